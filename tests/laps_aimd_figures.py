"""Figures of docs/laps_aimd.md (run from the repository root):

    .venv/bin/python tests/laps_aimd_figures.py loop       # docs/img/laps_aimd_loop.png (closed loop, both variants)
    .venv/bin/python tests/laps_aimd_figures.py sweep      # the n_flows sweep table (one Yosys synthesis at a time)

The closed loop is sim/laps/aimd_loop.py's (golden model only), as tests/test_laps_aimd.py runs it.
"""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"


def loop():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from lbpipe.sim.laps.aimd_loop import DEFAULT_CAPS, run_loop
    cap = sum(DEFAULT_CAPS) / 1e6
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for ax, variant in zip(axes, ("paper", "sim")):
        trace = run_loop(variant=variant, n_acks=20_000)
        t = [now / 1e6 for now, *_ in trace]
        ax.plot(t, [r / 1e6 for _, r, *_ in trace], lw=0.8, label="current rate")
        ax.plot(t, [e / 1e6 for _, _, e, *_ in trace], lw=0.6, alpha=0.6, label="expected rate")
        ax.axhline(cap, color="k", ls="--", lw=0.8, label=f"capacity {cap:.0f} Gb/s")
        ax.axhspan(0.45 * cap, 2.05 * cap, color="g", alpha=0.07, label="band the test asserts after 5 ms")
        ax.set_ylabel("Gb/s")
        ax.set_ylim(0, 105)
        ax.set_title(f"variant={variant}: one flow, 4 paths (16 + 12 + 8 + 4 Gb/s), line rate 100 Gb/s")
        ax.legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("time (ms)")
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG / "laps_aimd_loop.png", dpi=110)
    print(IMG / "laps_aimd_loop.png")


def sweep():
    """The bare core at 1K, 4K, 16K and 64K flows, one synthesis after the other (``lbpipe synth --sweep``)."""
    out = ROOT / "build" / "reports" / "laps-aimd-sweep"
    subprocess.run([str(ROOT / ".venv" / "bin" / "lbpipe"), "synth", "laps-aimd", "--sweep",
                    "n_flows=1024,4096,16384,65536", "-o", str(out)], check=True)
    print((out / "sweep.md").read_text())


if __name__ == "__main__":
    {"loop": loop, "sweep": sweep}[sys.argv[1]]()
