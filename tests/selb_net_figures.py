"""Figures of docs/selb_net.md (run from the repository root):

    .venv/bin/python tests/selb_net_figures.py occupancy   # docs/img/selb_net_occupancy.png (buffer time per reroute)
    .venv/bin/python tests/selb_net_figures.py fallback    # docs/img/selb_net_fallback.png (fallbacks against buffers)
    .venv/bin/python tests/selb_net_figures.py order       # docs/img/selb_net_order.png (delivered order)
    .venv/bin/python tests/selb_net_figures.py table       # the numbers of the datasheet's tables (seeds 1-8)

The network is sim/selb/net.py's (golden models only) at its default profile, as tests/test_selb_net.py runs it.
"""

import pathlib
import statistics
import sys

import figures      # tests/figures.py, beside this script

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
MODES = (("selb", "SELB (in-cluster)", "tab:blue"), ("random", "random (ConWeave-like)", "tab:orange"))


def _plt():
    return figures.pyplot()


def _save(fig, name):
    figures.save(fig, name, IMG)


def _run(mode, **kw):
    from lbpipe.sim.selb.net import run_net
    return run_net(None, mode, **kw)


def _waits(net, target=None):
    """Protected reroutes' buffer time (ticks from the first early packet's arrival to the tail's); ``target``:
    only the reroutes whose target came from there (``"cluster"``, ``"backup"``, ``"shortest"``, ``"any"``)."""
    return sorted(o["wait"] for o in net.outcomes() if o["kind"] == "protected"
                  and target in (None, o["target"]))


def _cdf(ax, xs, **kw):
    n = len(xs)
    ax.step(xs, [(i + 1) / n for i in range(n)], where="post", **kw)


def occupancy():
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    runs = {mode: _run(mode) for mode, _, _ in MODES}
    sel, rnd = runs["selb"], runs["random"]
    ax = axes[0]
    for xs, name, style in ((_waits(rnd), "random: all reroutes", dict(color="tab:orange")),
                            (_waits(sel), "SELB: all reroutes", dict(color="tab:blue")),
                            (_waits(sel, "cluster"), "SELB: within the cluster", dict(color="tab:blue", ls="--")),
                            (_waits(sel, "backup"), "SELB: into the backup set (cluster all congested)",
                             dict(color="tab:blue", ls=":")),
                            (sorted(o["ticks"] for o in rnd.occupancy), "random: every buffer use, any release",
                             dict(color="tab:orange", lw=0.6, alpha=0.6)),
                            (sorted(o["ticks"] for o in sel.occupancy), "SELB: every buffer use, any release",
                             dict(color="tab:blue", lw=0.6, alpha=0.6))):
        _cdf(ax, xs, label=f"{name} ({len(xs)}, median {statistics.median(xs):.0f}, mean "
                           f"{statistics.mean(xs):.0f})", **style)
    ax.set_xscale("log")
    ax.set_xlabel("reorder-buffer occupancy per reroute (ticks of 100 ns; protected reroutes unless said)")
    ax.set_ylabel("fraction of reroutes")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("seed 1", fontsize=9)
    ax = axes[1]
    seeds = range(1, 9)
    rows = {key: [] for key in ("sel_in", "sel_bk", "sel", "rnd")}
    for seed in seeds:
        s, r = _run("selb", seed=seed), _run("random", seed=seed)
        rows["sel_in"].append(statistics.median(_waits(s, "cluster")))
        rows["sel_bk"].append(statistics.median(_waits(s, "backup")))
        rows["sel"].append(statistics.median(_waits(s)))
        rows["rnd"].append(statistics.median(_waits(r)))
    ax.plot(seeds, rows["rnd"], "o-", color="tab:orange", label="random: all")
    ax.plot(seeds, rows["sel"], "s-", color="tab:blue", label="SELB: all")
    ax.plot(seeds, rows["sel_in"], "s--", color="tab:blue", mfc="none", label="SELB: within the cluster")
    ax.plot(seeds, rows["sel_bk"], "^:", color="tab:blue", label="SELB: into the backup set")
    ax.set_xlabel("seed")
    ax.set_ylabel("median occupancy (ticks)")
    ax.legend(fontsize=7)
    ax.set_title("seeds 1-8", fontsize=9)
    fig.suptitle("Same traffic: 8 leaves x 8 spines, 16 hosts a leaf (2:1), load 0.3, 8 buffers a leaf", fontsize=9)
    _save(fig, "selb_net_occupancy.png")


def fallback():
    plt = _plt()
    buffers = (1, 2, 4, 8, 16)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for mode, name, colour in MODES:
        fb, un, fe = [], [], []
        for nb in buffers:
            net = _run(mode, n_buffers=nb)
            fb.append(net.stats()[0]["fallbacks"])
            oc = net.outcomes()
            un.append(sum(1 for o in oc if o["kind"] == "unprotected" and not o["first_early"]))
            fe.append(sum(1 for o in oc if o["kind"] == "unprotected" and o["first_early"]))
            print(mode, nb, fb[-1], un[-1], fe[-1], net.out_of_order)
        axes[0].plot(buffers, fb, "o-", color=colour, label=name)
        axes[1].plot(buffers, un, "o-", color=colour, label=f"{name}: buffer busy, timeout, overflow, second reroute")
        axes[1].plot(buffers, fe, "x:", color=colour,
                     label=f"{name}: the same, a flow rerouted before its start arrived")
    axes[0].set_ylabel("fallbacks (selb-reorder's counter: early packets\npassed unordered, no buffer free)")
    axes[1].set_ylabel("unprotected reroutes (network's record)")
    for ax, where in zip(axes, ("upper right", "center right")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(buffers)
        ax.set_xticklabels([str(b) for b in buffers])
        ax.set_xlabel("reorder buffers per destination leaf")
        ax.legend(fontsize=7, loc=where)
    fig.suptitle("Same traffic, seed 1 (the paper's 8 buffers a port, here shared by a leaf's 16 ports)", fontsize=9)
    _save(fig, "selb_net_fallback.png")


def order():
    plt = _plt()
    net = _run("selb")
    oc = net.outcomes()
    # a typical protected reroute (held at most 100 ticks) with the most early packets: its flow at ToR and host
    pick = max((o for o in oc if o["kind"] == "protected" and o["wait"] <= 100), key=lambda o: o["early"])
    pk = sorted((p for p in net.packets if p["flow"] == pick["flow"]), key=lambda p: p["seq"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    paths = sorted({p["path"] for p in pk})
    for path in paths:
        xs = [p for p in pk if p["path"] == path]
        ax.plot([p["arr_tor"] for p in xs], [p["seq"] for p in xs], ".", ms=3,
                label=f"arrival at the ToR, spine {path}")
    ax.plot([p["delivered"] for p in pk], [p["seq"] for p in pk], "k-", lw=0.8, label="delivery at the host")
    for p in pk:
        if p["tail"]:
            ax.plot(p["arr_tor"], p["seq"], "rx", ms=7)
    ax.set_xlabel("tick")
    ax.set_ylabel("sequence number")
    ax.set_title(f"SELB, seed 1: flow {pick['flow']} ({pick['early']} packets held for {pick['wait']} ticks; "
                 "x = tails)", fontsize=8)
    ax.legend(fontsize=7)
    ax = axes[1]
    x = 0
    for mode, name, colour in MODES:
        n = _run(mode)
        outs = n.outcomes()
        bad = {}
        top = {}
        for _, f, s in n.deliveries:
            if s < top.get(f, -1):
                bad[f] = bad.get(f, 0) + 1
            top[f] = max(top.get(f, -1), s)
        fell = {o["flow"] for o in outs if o["why"] == "fallback"}
        at_fallback = sum(v for f, v in bad.items() if f in fell)
        vals = (n.arrival_disorder(), at_fallback, sum(bad.values()) - at_fallback)
        labels = ("at the destination ToRs", "at the hosts: flows with a fallback (no buffer free)",
                  "at the hosts: other (overflow, timeout,\nsecond reroute before the first's tail)")
        for i, (v, lab) in enumerate(zip(vals, labels)):
            ax.bar(x + i * 0.27, v, width=0.25, color=("grey", "tab:red", "tab:purple")[i],
                   label=lab if mode == "selb" else None)
            ax.text(x + i * 0.27, v * 1.05 + 1, str(v), ha="center", fontsize=7)
        x += 1
    ax.set_xticks([0.27, 1.27])
    ax.set_xticklabels([name for _, name, _ in MODES], fontsize=8)
    ax.set_ylabel("packets out of order (below the flow's highest so far)")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(0, 1e5)                 # room for the legend above the bars
    ax.legend(fontsize=7)
    ax.set_title("seed 1, 8 buffers a leaf", fontsize=8)
    _save(fig, "selb_net_order.png")


def _summary(net):
    ro, _ = net.stats()
    oc = net.outcomes()
    w = _waits(net)
    un = [o for o in oc if o["kind"] == "unprotected"]
    n = {t: sum(o["target"] == t for o in oc) for t in ("cluster", "backup", "shortest", "any")}
    return {"reroutes": len(oc), "targets": n, "uses": len(net.occupancy),
            "wait": f"{statistics.mean(w):.0f} / {statistics.median(w):.0f} / {w[int(0.9 * (len(w) - 1))]}",
            "in": _waits(net, "cluster"), "bk": _waits(net, "backup"),
            "unprot": f"{len(un)} ({sum(o['first_early'] for o in un)})", "fb": ro["fallbacks"],
            "tor": net.arrival_disorder(), "host": net.out_of_order, "packets": len(net.packets)}


def table():
    for seed in range(1, 9):
        s, r = _summary(_run("selb", seed=seed)), _summary(_run("random", seed=seed))
        n = s["targets"]
        print(f"| {seed} | {s['packets']} | {s['reroutes']} ({n['cluster']} / {n['backup']} / {n['shortest']}) | "
              f"{r['reroutes']} ({r['targets']['shortest']}) | {s['wait']} | "
              f"{statistics.median(s['in']):.0f} / {statistics.median(s['bk']):.0f} | {r['wait']} | "
              f"{s['unprot']} | {r['unprot']} | {s['fb']} / {r['fb']} | {s['tor']} / {r['tor']} | "
              f"{s['host']} / {r['host']} |")


if __name__ == "__main__":
    {"occupancy": occupancy, "fallback": fallback, "order": order, "table": table}[sys.argv[1]]()
