"""Figures of docs/flb_net.md (run from the repository root):

    .venv/bin/python tests/flb_net_figures.py reorder    # docs/img/flb_net_reorder.png (out-of-order counts)
    .venv/bin/python tests/flb_net_figures.py hol        # docs/img/flb_net_hol.png (isolation against HoL blocking)
    .venv/bin/python tests/flb_net_figures.py table      # the numbers of the datasheet's tables (seeds 1-8)

The loop is sim/flb/net.py's (golden models only) at its default profile, as tests/test_flb_net.py runs it.
"""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
U, C = tuple(range(2, 8)), (0, 1)
MODES = (("flb", "FLB (isolation)"), ("flb_noiso", "FLB, no isolation"), ("spray", "per-packet spraying"))


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


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
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG / "flb_net_reorder.png", dpi=110)
    print(IMG / "flb_net_reorder.png")


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
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG / "flb_net_hol.png", dpi=110)
    print(IMG / "flb_net_hol.png")


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


if __name__ == "__main__":
    {"reorder": reorder, "hol": hol, "table": table}[sys.argv[1]]()
