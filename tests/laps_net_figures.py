"""Figures of docs/laps_net.md (run from the repository root):

    .venv/bin/python tests/laps_net_figures.py          # docs/img/laps_net_{shares,rate,loss}.png and the numbers

The runs are tests/test_laps_net.py's (sim/laps/net.py, golden models in the loop): the steady run (seed 1, 2 ms),
the step run (path 0 from 2 to 20 us at 1.5 ms, 3 ms) and the 5%-loss run (1 ms).
"""

import collections
import pathlib

from lbpipe.sim.laps.net import NetConfig, run_net

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
STEP_AT, STEP_END = 1_500_000, 3_000_000


def _runs():
    steady = run_net(NetConfig(stop_ns=2_000_000))
    step = run_net(NetConfig(stop_ns=STEP_END, change_at_ns=STEP_AT, change_path=0, change_prop_ns=20_000))
    lossy = run_net(NetConfig(stop_ns=1_000_000, loss_prob=(0.05,) * 4))
    return steady, step, lossy


def shares(plt, steady, step):
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    cfg = steady.cfg
    s = steady.shares(300_000, 2_000_000)
    a.bar([f"path {j}\n{cfg.prop_ns[j] / 1000:g} us" for j in range(cfg.k)], s, color="tab:blue")
    for j, v in enumerate(s):
        a.text(j, v + 0.005, f"{v:.3f}", ha="center", fontsize=8)
    a.set_ylabel("share of data frames sent")
    a.set_title("steady run: share by path one-way delay (0.3-2 ms)")
    win = 100_000
    t = list(range(0, STEP_END, win))
    for j in range(step.cfg.k):
        b.plot([x / 1e6 for x in t], [step.shares(x, x + win)[j] for x in t], marker=".", label=f"path {j}")
    b.axvline(STEP_AT / 1e6, color="k", ls="--", lw=0.8)
    b.text(STEP_AT / 1e6, 0.02, " path 0: 2 -> 20 us", fontsize=8)
    b.set_xlabel("time (ms)")
    b.set_ylabel("share per 0.1 ms")
    b.set_title("step run: delays 2, 5, 8, 14 us; path 0 to 20 us at 1.5 ms")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "laps_net_shares.png", dpi=110)


def rate(plt, steady):
    cap = sum(steady.cfg.cap_gbps)
    fig, ax = plt.subplots(figsize=(9, 4))
    t = [x / 1e6 for x, *_ in steady.rate_log]
    ax.step(t, [r / 1e6 for _, r, *_ in steady.rate_log], where="post", lw=0.8, label="AIMD current rate")
    win = 50_000
    g = list(range(0, steady.cfg.stop_ns, win))
    ax.plot([(x + win / 2) / 1e6 for x in g], [steady.goodput_gbps(x, x + win) for x in g], "o-", ms=3, lw=0.8,
            label="goodput at the receiver (per 50 us)")
    ax.axhline(cap, color="k", ls="--", lw=0.8, label=f"bottleneck capacity {cap} Gb/s (4 x 10)")
    ax.axhline(steady.cfg.max_rate / 1e6, color="r", ls=":", lw=0.8, label="rate ceiling 60 Gb/s")
    m = steady.mean_rate_gbps(300_000, steady.cfg.stop_ns)
    ax.set_title(f"steady run: AIMD (paper variant); mean rate after 0.3 ms {m:.1f} Gb/s")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("Gb/s")
    ax.set_ylim(0, 70)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "laps_net_rate.png", dpi=110)


def loss(plt, runs):
    fig, axes = plt.subplots(1, len(runs), figsize=(14, 4))
    for ax, (name, net) in zip(axes, runs):
        dropped = sorted(net.tx_log[tid]["t"] / 1e6 for tid in net.dropped)
        declared = sorted(t / 1e6 for t, *_ in net.decl_log)
        retx = sorted(e["t"] / 1e6 for e in net.tx_log if e["retx"])
        why = collections.Counter((r, tid in net.arrived) for _, tid, r, _ in net.decl_log)
        detail = ", ".join(f"{r}{' (arrived)' if a else ''} {n}" for (r, a), n in sorted(why.items()))
        for xs, style, label in ((dropped, dict(lw=4, alpha=0.3), f"dropped by the network: {len(dropped)}"),
                                 (declared, dict(lw=1.2, ls="--"), f"declared lost: {len(declared)} ({detail})"),
                                 (retx, dict(lw=1, ls=":"), f"retransmissions: {len(retx)}")):
            ax.step(xs, range(1, len(xs) + 1), where="post", label=label, **style)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("time (ms)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("cumulative count")
    fig.tight_layout()
    fig.savefig(IMG / "laps_net_loss.png", dpi=110)


def numbers(runs):
    for name, net in runs:
        why = collections.Counter(net.declared.values())
        false = collections.Counter(net.declared[t] for t in set(net.declared) & net.arrived)
        fates = collections.Counter(e["fate"] for e in net.tx_log)
        print(f"{name}: sent {len(net.tx_log)} ({net.n_retx} retransmissions), {dict(fates)}, declared {dict(why)},"
              f" arrived but declared {dict(false)}, missed {len(net.dropped - set(net.declared))}, probes "
              f"{net.probes}, rate {net.mean_rate_gbps(300_000, net.cfg.stop_ns):.1f} Gb/s, goodput "
              f"{net.goodput_gbps(300_000, net.cfg.stop_ns):.1f} Gb/s, loss stats {net.loss.stats()},"
              f" aimd stats {net.aimd.stats()}")


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    IMG.mkdir(parents=True, exist_ok=True)
    steady, step, lossy = _runs()
    shares(plt, steady, step)
    rate(plt, steady)
    runs = [("steady (seed 1, 1% random loss)", steady), ("5% random loss", lossy), ("step: path 0 2 -> 20 us", step)]
    loss(plt, runs)
    print("steady shares", [round(x, 3) for x in steady.shares(300_000, 2_000_000)])
    print("step shares before", [round(x, 3) for x in step.shares(300_000, STEP_AT)], "after",
          [round(x, 3) for x in step.shares(STEP_AT + 300_000, STEP_END)])
    numbers(runs)
    for f in ("shares", "rate", "loss"):
        print(IMG / f"laps_net_{f}.png")


if __name__ == "__main__":
    main()
