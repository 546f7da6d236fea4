"""Figures of docs/flb_net.md (run from the repository root):

    .venv/bin/python tests/flb_net_figures.py reorder    # docs/img/flb_net_reorder.png (out-of-order counts)
    .venv/bin/python tests/flb_net_figures.py hol        # docs/img/flb_net_hol.png (isolation against HoL blocking)
    .venv/bin/python tests/flb_net_figures.py table      # the numbers of the datasheet's tables (seeds 1-8)
    .venv/bin/python tests/flb_net_figures.py rc         # docs/img/flb_net_rc.png (host rate control, section 3.3)
    .venv/bin/python tests/flb_net_figures.py rc_table   # its numbers (seeds 1-8)
    .venv/bin/python tests/flb_net_figures.py sampling   # sampling period against delay age and reordering

The loop is sim/flb/net.py's (golden models only) at its default profile, as tests/test_flb_net.py runs it.
"""

import pathlib
import sys

import figures      # tests/figures.py, beside this script

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
U, C = tuple(range(2, 8)), (0, 1)
MODES = (("flb", "FLB (isolation)"), ("flb_noiso", "FLB, no isolation"), ("spray", "per-packet spraying"))


def _plt():
    return figures.pyplot()


def _save(fig, name):
    figures.save(fig, name, IMG)


def _runs(seed=1):
    from lbpipe.sim.flb.net import run_net
    return {(mode, incast): run_net(None, mode, seed=seed, **({} if incast else {"n_local": 0}))
            for mode, _ in MODES for incast in (False, True)}


def reorder():
    plt = _plt()
    runs = _runs()
    causes = ("reroute", "pfc", "isolation")
    colours = {"reroute": "tab:blue", "pfc": "tab:orange", "isolation": "tab:green"}
    names = {"reroute": "path choice (reroute, spray)", "pfc": "PFC pause of the earlier packet's path",
             "isolation": "isolation move or release"}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, incast in zip(axes, (False, True)):
        x = 0
        ticks, labels = [], []
        for mode, name in MODES:
            net = runs[(mode, incast)]
            for cls, flows in (("congested", C), ("uncongested", U)):
                bottom = 0
                for cause in causes:
                    n = sum(1 for _, f, _, _, why in net.ooo_log if f in flows and why == cause)
                    ax.bar(x, n, bottom=bottom, color=colours[cause], label=names[cause] if x == 0 else None)
                    bottom += n
                ax.text(x, bottom + 5, str(bottom), ha="center", fontsize=7)
                ticks.append(x)
                labels.append(f"{name}\n{cls}")
                x += 1
            x += 0.5
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=6, rotation=30, ha="right")
        ax.set_title("incast on port 0 (ticks 2,000-6,000)" if incast else "no incast")
        ax.set_yscale("symlog", linthresh=10)
    axes[0].set_ylabel("out-of-order deliveries (receiver count)")
    axes[0].legend(title="cause (network ground truth)", fontsize=7)
    fig.suptitle("Same traffic, seed 1: 8,000 ticks, 8 flows over 4 paths", fontsize=9)
    _save(fig, "flb_net_reorder.png")


def _binned(net, flows, width, what):
    stop = net.cfg.stop + net.cfg.drain
    sums, counts = [0.0] * (stop // width + 1), [0] * (stop // width + 1)
    for t, f, _, lat, _ in net.deliveries:
        if f in flows:
            b = (t - lat) // width if what == "latency" else t // width
            sums[b] += lat
            counts[b] += 1
    xs = [b * width for b in range(len(sums))]
    if what == "latency":
        return xs, [s / c if c else float("nan") for s, c in zip(sums, counts)]
    return xs, [c / width for c in counts]


def hol():
    plt = _plt()
    runs = _runs()
    cases = ((("flb", False), "no incast (reference)", "k"), (("flb", True), "incast, FLB with isolation", "tab:green"),
             (("flb_noiso", True), "incast, FLB without isolation", "tab:red"))
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for key, name, colour in cases:
        net = runs[key]
        xs, ys = _binned(net, U, 200, "latency")
        axes[0].plot(xs, ys, color=colour, lw=1, label=name)
        xs, ys = _binned(net, U, 200, "tput")
        axes[1].plot(xs, ys, color=colour, lw=1, label=name)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("uncongested flows' mean latency\n(ticks, by generation tick)")
    axes[1].set_ylabel("uncongested flows' throughput\n(packets per tick, by delivery)")
    axes[1].axhline(0.3, color="grey", ls=":", lw=0.8, label="offered 0.3")
    for key, name, colour in cases[1:]:
        net = runs[key]
        t = [r[0] for r in net.queue_log]
        axes[2].plot(t, [r[1][3] for r in net.queue_log], color=colour, lw=1, label=f"{name}: path 3 (isolation)")
        axes[2].plot(t, [sum(r[1][:3]) for r in net.queue_log], color=colour, lw=1, ls="--",
                     label=f"{name}: paths 0-2")
    axes[2].set_ylabel("source uplink FIFOs\n(packets)")
    axes[2].set_yscale("symlog", linthresh=10)
    axes[2].set_xlabel("tick")
    for ax in axes:
        ax.axvspan(2000, 6000, color="orange", alpha=0.08)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle("Incast on port 0 (shaded); seed 1", fontsize=9)
    _save(fig, "flb_net_hol.png")


def table():
    for seed in range(1, 9):
        runs = _runs(seed)
        row = [f"{seed}"]
        for key in (("flb", False), ("flb", True), ("flb_noiso", True)):
            s = runs[key].flow_stats(U, 2000, 6000)
            row.append(f"{s['tput']:.3f} / {s['mean']:.1f} / {s['p99']}")
        for key in (("flb", False), ("spray", False), ("flb", True), ("spray", True)):
            net = runs[key]
            row.append(f"{sum(net.out_of_order[:8])} ({sum(net.out_of_order[2:8])})")
        print("| " + " | ".join(row) + " |")


LOCAL = (8, 9, 10)      # S2's local hosts (flow ids after S1's eight)
RC_WINDOW = (2500, 6000)


def _rate(net, flow, t0, t1):
    return sum(1 for d in net.deliveries if d[1] == flow and t0 <= d[0] < t1) / (t1 - t0)


def rc():
    from lbpipe.sim.flb.net import run_net
    plt = _plt()
    runs = {on: run_net(None, "flb", rate_control=on) for on in (False, True)}
    fig, axes = plt.subplots(3, 2, figsize=(11, 8), sharex=True, sharey="row")
    for col, on in enumerate((False, True)):
        net = runs[on]
        for f, colour in zip(C + LOCAL, ("tab:blue", "tab:cyan", "tab:red", "tab:orange", "tab:brown")):
            xs, ys = _binned(net, (f,), 100, "tput")
            name = f"S1 flow {f}" if f in C else f"S2 local host {f - 7}"
            axes[0][col].plot(xs, ys, color=colour, lw=1, label=name)
        axes[0][col].axhline(0.2, color="grey", ls=":", lw=0.8, label="C/n, n = 5")
        t = [r[0] for r in net.queue_log]
        axes[1][col].plot(t, [r[1][3] for r in net.queue_log], color="tab:green", lw=1,
                          label="S1 uplink FIFO, path 3 (isolation)")
        axes[1][col].plot([r[0] for r in net.backlog_log], [sum(r[1][f] for f in C) for r in net.backlog_log],
                          color="tab:purple", lw=1, label="S1 hosts' send queues, flows 0 and 1")
        axes[2][col].plot(t, [r[2] for r in net.queue_log], color="k", lw=0.8, label="S2 port 0 queue")
        axes[2][col].axhline(net.cfg.threshold, color="grey", ls=":", lw=0.8, label="K")
        paused = sum(net.pause_ticks[3:])
        axes[0][col].set_title(("with" if on else "without") + f" host rate control (PFC pause ticks, path 3 and "
                               f"local hosts: {paused:,})", fontsize=9)
        axes[2][col].set_xlabel("tick")
    axes[0][0].set_ylabel("delivered packets per tick\n(100-tick bins)")
    axes[1][0].set_ylabel("packets")
    axes[1][0].set_yscale("symlog", linthresh=10)
    axes[1][0].set_ylim(bottom=0)
    axes[2][0].set_ylabel("packets")
    for row in axes:
        for ax in row:
            ax.axvspan(2000, 6000, color="orange", alpha=0.08)
        row[1].legend(fontsize=7, loc="upper right")
    fig.suptitle("Incast on port 0 (shaded), seed 1: minimal rate control (section 3.3) on the five congested "
                 "senders", fontsize=9)
    _save(fig, "flb_net_rc.png")


def rc_table():
    from lbpipe.sim.flb.net import run_net
    for seed in range(1, 9):
        row = [f"{seed}"]
        for on in (False, True):
            net = run_net(None, "flb", seed=seed, rate_control=on)
            rates = [_rate(net, f, *RC_WINDOW) for f in C + LOCAL]
            q3 = [r[1][3] for r in net.queue_log if RC_WINDOW[0] <= r[0] < RC_WINDOW[1]]
            back = [sum(r[1][f] for f in C) for r in net.backlog_log if RC_WINDOW[0] <= r[0] < RC_WINDOW[1]]
            s, c = net.flow_stats(U, 2000, 6000), net.flow_stats(C, 2000, 6000)
            row += [f"{min(rates):.3f}-{max(rates):.3f}", f"{max(net.pause_ticks):,}", f"{sum(q3) / len(q3):.0f}",
                    f"{sum(back) / len(back):.0f}", f"{c['mean']:.0f}",
                    f"{s['tput']:.3f} / {s['mean']:.1f} / {s['p99']}", f"{sum(net.out_of_order[:8])}"]
        print("| " + " | ".join(row) + " |")


def sampling():
    from lbpipe.sim.flb.net import run_net
    for period in (0, 4, 8, 16, 32, 64):
        row = [f"{period}"]
        ooo, med, writes, iso, raw = [], [], [], [], []
        for seed in range(1, 9):
            net = run_net(None, "flb", seed=seed, n_local=0, sample_period=period)
            ages = sorted(net.ages)
            ooo.append(sum(net.out_of_order[:8]))
            med.append(ages[len(ages) // 2])
            writes.append(len(net.stamped))
            ref = net.flow_stats(U, 2000, 6000)
            a = run_net(None, "flb", seed=seed, sample_period=period).flow_stats(U, 2000, 6000)
            b = run_net(None, "flb_noiso", seed=seed, sample_period=period).flow_stats(U, 2000, 6000)
            iso.append(a["p99"] / ref["p99"])
            raw.append(b["p99"] / ref["p99"])
        row += [f"{min(writes):,}-{max(writes):,}", f"{min(med)}-{max(med)}", f"{min(ooo)}-{max(ooo)}",
                f"{ooo[0]}", f"{min(iso):.2f}-{max(iso):.2f}", f"{min(raw):.1f}-{max(raw):.1f}",
                f"{sum(r >= 2.5 for r in raw)}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    {"reorder": reorder, "hol": hol, "table": table, "rc": rc, "rc_table": rc_table,
     "sampling": sampling}[sys.argv[1]]()
