"""Figure and table of docs/pro_queues.md (run from the repository root):

    .venv/bin/python tests/pro_queue_figures.py            # results table (Markdown) + docs/img/pro_queues.png

The runs are those of ``lbpipe.sim.pro.net.run`` (round robin = the golden model ``lbpipe.sim.pro.rr``); queue
lengths are in packets of 1 KB, so packets and KB are the same number.
"""

import pathlib
import sys

from lbpipe.sim.pro.net import run

IMG = pathlib.Path(__file__).resolve().parent.parent / "docs" / "img"

#: (label, policy) in plotting order
POLICIES = [("random per-packet spraying", "random"), ("round robin, every C starts at 0", "rr-aligned"),
            ("PRO round robin, random initial C", "rr")]
COLORS = {"random": "tab:red", "rr-aligned": "tab:orange", "rr": "tab:blue"}
SEEDS = (1, 2, 3)
SLOTS = 8000
SETUPS = [  # (name, n_tors, n_hosts = n_uplinks)
    ("4 racks x 16", 4, 16),
    ("2 racks x 16 (Figure 2 pattern)", 2, 16),
    ("4 racks x 8", 4, 8),
]


def running_max(series):
    out, top = [], 0
    for v in series:
        top = max(top, v)
        out.append(top)
    return out


def table(results):
    print("| setup | path choice | largest uplink @2,000 / @8,000 | largest downlink @2,000 / @8,000 "
          "| uplink p50 / p90 / p99 |")
    print("|---|---|---|---|---|")
    for (name, _, _), by_policy in results.items():
        for label, policy in POLICIES:
            rs = by_policy[policy]
            up = " ; ".join(f"{r.largest('up', 2000)} / {r.largest('up')}" for r in rs)
            down = " ; ".join(f"{r.largest('down', 2000)} / {r.largest('down')}" for r in rs)
            pct = " ; ".join(f"{r.percentile(50)} / {r.percentile(90)} / {r.percentile(99)}" for r in rs)
            print(f"| {name} | {label} | {up} | {down} | {pct} |")


def figure(results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    name = SETUPS[0][0]
    by_policy = results[SETUPS[0]]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, kind, title in ((axes[0], "up", "largest ToR uplink queue"),
                            (axes[1], "down", "largest Aggr downlink queue")):
        for label, policy in POLICIES:
            for i, r in enumerate(by_policy[policy]):
                series = r.max_up if kind == "up" else r.max_down
                ax.plot(series, color=COLORS[policy], lw=0.3, alpha=0.25)
                ax.plot(running_max(series), color=COLORS[policy], lw=1.4, label=label if i == 0 else None)
        for x in (2000, 8000):
            ax.axvline(x, color="k", lw=0.6, ls=":")
        ax.set_xlabel("slot")
        ax.set_ylabel("queue (KB, 1 KB packets)")
        ax.set_title(f"{title}\n(thin: per slot; thick: largest so far)", fontsize=9)
        ax.set_xlim(0, SLOTS)
    axes[0].legend(fontsize=7, loc="upper left")
    ax = axes[2]
    width = 0.27
    qs = (50, 90, 100)
    for k, (label, policy) in enumerate(POLICIES):
        r = by_policy[policy][0]
        vals = [r.percentile(q, "up") for q in qs]
        xs = [i + (k - 1) * width for i in range(len(qs))]
        bars = ax.bar(xs, vals, width, color=COLORS[policy], label=label)
        ax.bar_label(bars, fontsize=7)
    ax.set_xticks(range(len(qs)), [f"{q}th" for q in qs])
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(0, 3 * by_policy["random"][0].largest("up"))
    ax.set_ylabel("ToR uplink queue (KB)")
    ax.set_title(f"ToR uplink queue percentiles over {SLOTS:,} slots\n(all uplinks, seed 1; cf. Figure 2(b), (c))",
                 fontsize=9)
    fig.suptitle(f"Two-tier slotted model, {name} NICs and uplinks per rack, all-to-all at full load", fontsize=10)
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG / "pro_queues.png", dpi=110)


def main():
    results = {}
    for setup in SETUPS:
        _, n_tors, m = setup
        results[setup] = {p: [run(p, n_tors=n_tors, n_hosts=m, n_uplinks=m, n_slots=SLOTS, seed=s) for s in SEEDS]
                          for _, p in POLICIES}
    table(results)
    figure(results)


if __name__ == "__main__":
    sys.exit(main())
