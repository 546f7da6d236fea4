"""Figures and tables of docs/laps_softmax.md (run from the repository root):

    .venv/bin/python tests/laps_softmax_figures.py errors     # error table + docs/img/laps_softmax_error.png
    .venv/bin/python tests/laps_softmax_figures.py share      # docs/img/laps_softmax_share.png
    .venv/bin/python tests/laps_softmax_figures.py luts       # LUT cells per stage (one Yosys synthesis)

The float64 reference and the sweep are the ones of tests/test_laps_softmax.py.
"""

import collections
import json
import math
import pathlib
import random
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_laps_softmax as t  # noqa: E402

IMG = pathlib.Path(__file__).resolve().parent.parent / "docs" / "img"


def errors():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = []
    for p in (10, 12, 16, 20):
        worst = t.sweep_errors(p, t.BETAS, random.Random(p), n_random=300)
        rows.append((p, worst))
        print(f"| {p} | {worst:.3g} | 2^{math.log2(worst):.2f} |")
    xs = np.unique(np.round(np.logspace(0, math.log10(t.INF - 1), 1500))).astype(np.int64)
    fig, ax = plt.subplots(figsize=(7, 4))
    for p, beta in ((16, 1 / 4664), (16, 1 / 300), (10, 1 / 4664), (20, 1 / 4664)):
        m = t.model_with(beta, precision=p)
        b = t.beta_held(beta)
        err = [np.abs(t.hw_probs(m, t.item_of([0, int(x)], k=8))
                      - t.ref_softmax([0, int(x)] + [0] * 6, [1, 1] + [0] * 6, b)).max() for x in xs]
        ax.loglog(xs, np.maximum(err, 1e-9), label=f"P={p}, beta=1/{round(1 / beta)} per ns", lw=0.8)
    ax.axhline(2 ** -10, color="k", ls="--", lw=0.8, label="goal 2^-10")
    ax.set_xlabel("latency difference to the fastest path x (ns)")
    ax.set_ylabel("|P_hw - P_float64| (two paths)")
    ax.set_ylim(1e-8, 1e-2)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "laps_softmax_error.png", dpi=110)


def share():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lat = [2000 + 500 * i for i in range(8)]
    fig, ax = plt.subplots(figsize=(7, 4))
    for beta in (0.0, 1 / 20000, 1 / 4664, 1 / 1000, 1 / 300):
        m = t.model_with(beta)
        p = m.probabilities(t.item_of(lat))
        label = "beta=0 (RPS)" if beta == 0 else f"beta=1/{round(1 / beta)} per ns"
        ax.plot(lat, p, marker="o", label=label)
    ax.set_xlabel("path latency realVal (ns); 8 paths")
    ax.set_ylabel("selection probability (golden model, exact over r)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "laps_softmax_share.png", dpi=110)


_STAGES = [("s1_", "S1 valid mask (real_val != infinity)"),
           ("s2_", "S2 comparison matrix, 16-bit halves (28 pairs)"),
           ("s3_", "S3 one-hot fastest slot"), ("s4_", "S4 d_min multiplexer"),
           ("s5_", "S5 low halves of x = d - d_min"), ("s6_", "S6 high halves of x"),
           ("s7_", "S7 saturation flag, DSP input registers"), ("s8_", "S8 DSP x * beta"),
           ("s9_", "S9 table address / saturation"), ("s10_", "S10 table output register"),
           ("s11_", "S11 interpolation partial products"), ("s12_", "S12 interpolation sum"),
           ("s13_", "S13 weight T - Df/16"), ("pre", "S14-S16 prefix sums"), ("s16_", "S16 random number register"),
           ("s17_", "S17 DSP r * S"), ("s18_", "S18 comparisons with the prefix sums"),
           ("o", "S19 choice, pid multiplexer (output register)"), ("rng", "xorshift32 generator"),
           ("", "control, valid/ready, side pipelines, other")]


def luts():
    from lbpipe.hdl.laps.softmax import Softmax
    from lbpipe.synth import synthesize
    with tempfile.TemporaryDirectory() as tmp:
        report = synthesize(Softmax(), name="laps_softmax", workdir=tmp, wrapped=False)
        netlist = json.loads((pathlib.Path(tmp) / "netlist.json").read_text())
    module = netlist["modules"]["laps_softmax"]
    names = {}
    for name, net in module["netnames"].items():
        for b in net["bits"]:
            if isinstance(b, int) and (b not in names or name.startswith(("s", "pre", "o", "rng"))):
                names[b] = name
    sinks = collections.defaultdict(list)
    for cname, cell in module["cells"].items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "input":
                for b in bits:
                    sinks[b].append(cname)
    cells = module["cells"]

    def stage_of(cname, seen):
        """The stage register a combinational cell feeds (first found, breadth first)."""
        queue = [cname]
        while queue:
            c = queue.pop(0)
            cell = cells[c]
            for port, bits in cell["connections"].items():
                if cell["port_directions"].get(port) != "output":
                    continue
                for b in bits:
                    for s in sinks.get(b, []):
                        st = cells[s]["type"]
                        if st.startswith("FD"):
                            q = cells[s]["connections"]["Q"][0]
                            return names.get(q, "")
                        if st.startswith(("DSP", "RAMB")):
                            return f"{st}"
                        if s not in seen:
                            seen.add(s)
                            queue.append(s)
        return ""

    counts = collections.Counter()
    for cname, cell in cells.items():
        if re.match(r"LUT\d", cell["type"]):
            dest = stage_of(cname, {cname})
            label = next(lab for pre, lab in _STAGES if dest.startswith(pre)) if not dest.startswith("RAMB") \
                else "table write port"
            counts[label] += 1
    for pre, lab in _STAGES + [(None, "table write port")]:
        if counts[lab]:
            print(f"| {lab} | {counts[lab]} |")
    print(f"| total | {sum(counts.values())} (report: {report['lut']}) |")


if __name__ == "__main__":
    {"errors": errors, "share": share, "luts": luts}[sys.argv[1]]()
