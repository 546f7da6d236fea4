"""``lbpipe report``: the resource report users compare designs with.

* :func:`resource_table` turns ``lbpipe synth`` reports (bare core and the shipped AXI4-Lite top of each block) into
  one table: LUT, FF, CARRY8, RAMB36, RAMB18, URAM, DSP, share of the U280, logic levels, the core and the top side
  by side, and the paper's figure with our ratio to it wherever a paper gives one. Written as Markdown, CSV and
  JSON, with a bar chart of ours against the papers'.
* :data:`SCALE` names, per block with a per-flow or per-QP table, the parameters that size it (several move
  together where the table's shape needs it: the hash tables' buckets with their entries); :func:`scale_plot`
  draws LUTs, memory and logic levels against size from the sweep's reports.

Synthesis itself is :func:`lbpipe.synth.synthesize`; this module only formats and plots what it returns.
"""

import csv
import io
import json
import pathlib

from .synth import FOOTNOTE, percent_of_u280

__all__ = ["SCALE", "SIZES", "scale_points", "resource_table", "write_resources", "write_scale"]

#: Table sizes of ``lbpipe report --sweep``: 1K to 64K entries (block RAM to UltraRAM).
SIZES = (1024, 4096, 16384, 65536)

#: Per block: ``{parameter: function of the size}`` for the parameters that move with the table size. A block's
#: largest size is limited where its table would not fit the U280 or its parameter range (noted beside it).
SCALE = {
    # The flow table and the PSN queues (100 entries x 9 bits per QP): 64K QPs is 59 Mbit of queue, most of the
    # U280's 70.9 Mbit of block RAM; the issue's range is 256 to 16,384.
    "themis-d": ({"n_qps": lambda n: n}, SIZES[:3]),
    # 4 ways of `buckets` slots hold 2 x n_entries keys at 50% load.
    "qp-classifier": ({"n_entries": lambda n: n, "buckets": lambda n: n}, SIZES),
    # 3 ways of n_dests / 2 slots.
    "laps-pst": ({"n_dests": lambda n: n, "buckets": lambda n: n // 2}, SIZES),
    # Sub-tables (n / k, k = 8) of 2K to 4K entries are URAM288_BASE instances: Yosys's cost model keeps them in
    # block RAM even under -uram (a 4K-deep URAM half empty); from 8K deep it infers URAM itself.
    "laps-pit": ({"n_entries": lambda n: n, "uram": lambda n: "instance" if 2048 <= n // 8 <= 4096 else "off"},
                 SIZES),
    "laps-aimd": ({"n_flows": lambda n: n}, SIZES),
    "laps-pacer": ({"n_flows": lambda n: n}, SIZES),
    "pro-rr": ({"n_qps": lambda n: n}, SIZES),
    "pro-ooo": ({"n_qps": lambda n: n}, SIZES),
    # 16 entries per path ring: 16K paths is 384 RAMB36 (19% of the U280); 64K would take three quarters of it.
    "laps-loss": ({"n_paths": lambda n: n}, SIZES[:3]),
    "flb-route": ({"n_flows": lambda n: n}, SIZES),
    # n bases: n / 8 source edges of 8 paths (n_edges at most 1,024).
    "flb-owd": ({"n_edges": lambda n: n // 8}, (1024, 4096, 8192)),
    # The isolation table is n_slots registers whatever n_flows: only the flow field widens with it.
    "flb-isolate": ({"n_flows": lambda n: n}, SIZES),
    # 65 bits a flow (valid, 16-bit stamp, MAC) in banks of up to 4,096: 64K flows (its default) is 128 RAMB36.
    "flb-prevhop": ({"n_flows": lambda n: n}, SIZES),
    # The flow table's range stops at 4,096 flows (n_flows' check): three points up to it.
    "selb-reroute": ({"n_flows": lambda n: n}, (1024, 2048, 4096)),
    # The reorder buffers are the scarce resource (ConWeave: 8 a port): 4, 8, 16 buffers of depth 32, one per 256
    # flows of the flow table (1K to 4K flows, the table's range).
    "selb-reorder": ({"n_flows": lambda n: n, "n_buffers": lambda n: n // 256}, (1024, 2048, 4096)),
}


def scale_points(name):
    """``[(size, {parameter: value})]`` of block ``name``'s sweep."""
    params, sizes = SCALE[name]
    return [(n, {p: f(n) for p, f in params.items()}) for n in sizes]


# Column key, header: the resources of the table, in the order of the U280 datasheet.
_RESOURCES = [("lut", "LUT"), ("ff", "FF"), ("carry8", "CARRY8"), ("ramb36", "RAMB36"), ("ramb18", "RAMB18"),
              ("uram", "URAM"), ("dsp", "DSP")]
# A paper's metric names as the registry spells them, to our keys (only the figures a ratio can be taken of:
# numbers of the same kind of cell; "ALM" and "RAM" in kB are not LUTs or RAMB36 and stay text).
_PAPER_KEYS = {"lut": "lut", "luts": "lut", "ff": "ff", "ffs": "ff", "registers": "ff", "carry8": "carry8",
               "bram": "ramb36", "ramb36": "ramb36", "dsp": "dsp", "uram": "uram"}


def _paper_numbers(figures):
    """``({key: number}, {metric: text})`` of a registry ``paper`` dict: the figures a ratio can be taken of, and
    the rest as the paper states them."""
    numbers, text = {}, {}
    for metric, value in (figures or {}).items():
        key = _PAPER_KEYS.get(str(metric).strip().lower())
        if key is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers[key] = value
        else:
            text[metric] = value
    return numbers, text


def resource_table(reports, paper=None):
    """One record per block from ``lbpipe synth`` reports (``reports``: as :func:`lbpipe.synth.synthesize` returns
    them, with ``block`` set and ``top`` present for blocks with a control port); ``paper``:
    ``{block: {metric: value}}`` as the registry holds it.

    Each record: ``block``; ``core`` and ``top`` (``{resource: count}`` plus ``logic_levels``; ``top`` None for a
    block shipped bare); ``u280_percent`` of the top (the core when there is no top); ``paper`` (the numeric
    figures), ``paper_text`` (the others) and ``ratio`` (``{resource: ours / paper}``, the top's figures where
    there is a top: what a user instantiates is what the paper's prototype had)."""
    paper = paper or {}
    records = []
    for report in reports:
        core = {key: report.get(key, 0) for key, _ in _RESOURCES}
        core["logic_levels"] = report.get("logic_levels")
        top = None
        if report.get("top"):
            top = {key: report["top"].get(key, 0) for key, _ in _RESOURCES}
            top["logic_levels"] = report["top"].get("logic_levels")
        shipped = report["top"] if report.get("top") else report
        numbers, text = _paper_numbers(paper.get(report["block"]))
        ours = top or core
        ratio = {key: ours[key] / value for key, value in numbers.items() if value}
        records.append({"block": report["block"], "params": report.get("params", {}), "core": core, "top": top,
                        "u280_percent": percent_of_u280(shipped), "paper": numbers, "paper_text": text,
                        "ratio": ratio})
    return records


def _levels(part):
    return "" if part is None or part.get("logic_levels") is None else str(part["logic_levels"])


def format_markdown(records):
    """The table of :func:`resource_table` as Markdown: a row per block, core and top side by side."""
    head = (["Block"] + [f"{h} core / top" for _, h in _RESOURCES] + ["Logic levels core / top", "% of U280 (LUT)",
                                                                      "Paper (ours / paper)"])
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in records:
        cells = [f"`{r['block']}`"]
        for key, _ in _RESOURCES:
            top = r["top"][key] if r["top"] else "-"
            cells.append(f"{r['core'][key]:,} / {top:,}" if r["top"] else f"{r['core'][key]:,} / -")
        cells.append(f"{_levels(r['core'])} / {_levels(r['top']) or '-'}")
        cells.append(f"{r['u280_percent']['lut']:.2f}%")
        paper = [f"{h} {r['paper'][k]:,} ({r['ratio'][k]:.2f}x)" for k, h in _RESOURCES if k in r["paper"]
                 and k in r["ratio"]]
        paper += [f"{m}: {v}" for m, v in r["paper_text"].items()]
        cells.append("; ".join(str(p).replace("|", "\\|") for p in paper))
        lines.append("| " + " | ".join(cells) + " |")
    return ("# Resources\n\nEvery block and pipeline at its defaults, Yosys `synth_xilinx -family xcup` out of "
            "context for the Alveo U280 (`lbpipe report`; the sweep against table size is in "
            "[resources_sweep.md](resources_sweep.md)). *core*: the bare block; *top*: what `lbpipe verilog` "
            "ships (the block behind its AXI4-Lite control port), the figure compared with the paper's. A ratio "
            "is ours over the paper's for the same kind of cell; ALMs and kilobytes of RAM are not LUTs or "
            "RAMB36 and are quoted, not divided.\n\n"
            + "\n".join(lines) + "\n\n![ours against the papers](img/resources_vs_papers.png)\n\n" + FOOTNOTE + "\n")


def format_csv(records):
    """The table as CSV: one row per block, the core's and the top's figures in separate columns."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    keys = [k for k, _ in _RESOURCES] + ["logic_levels"]
    writer.writerow(["block"] + [f"core_{k}" for k in keys] + [f"top_{k}" for k in keys] + ["u280_lut_percent"]
                    + [f"paper_{k}" for k, _ in _RESOURCES])
    for r in records:
        top = r["top"] or {}
        writer.writerow([r["block"]] + [r["core"].get(k) for k in keys] + [top.get(k, "") for k in keys]
                        + [f"{r['u280_percent']['lut']:.4f}"] + [r["paper"].get(k, "") for k, _ in _RESOURCES])
    return out.getvalue()


def papers_chart(records, path):
    """A bar chart of our LUT and FF counts (the shipped top) against the paper's, for every block whose paper
    gives both as numbers; written to ``path`` (PNG). Returns the blocks drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    drawn = [r for r in records if {"lut", "ff"} & set(r["paper"])]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, (key, label) in zip(axes, (("lut", "LUT"), ("ff", "FF"))):
        rows = [r for r in drawn if key in r["paper"]]
        xs = range(len(rows))
        ours = [(r["top"] or r["core"])[key] for r in rows]
        theirs = [r["paper"][key] for r in rows]
        ax.bar([x - 0.2 for x in xs], ours, width=0.4, label="lbpipe (Yosys, xcup)")
        ax.bar([x + 0.2 for x in xs], theirs, width=0.4, label="paper")
        ax.set_xticks(list(xs), [r["block"] for r in rows], rotation=30, ha="right")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.set_title(f"{label}: ours against the paper's")
    axes[0].legend()
    fig.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [r["block"] for r in drawn]


def write_resources(reports, outdir, paper=None):
    """``outdir/resources.md``, ``.csv``, ``.json`` and ``outdir/img/resources_vs_papers.png``; returns the paths."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    records = resource_table(reports, paper)
    paths = [outdir / "resources.md", outdir / "resources.csv", outdir / "resources.json",
             outdir / "img" / "resources_vs_papers.png"]
    paths[0].write_text(format_markdown(records))
    paths[1].write_text(format_csv(records))
    paths[2].write_text(json.dumps(records, indent=2) + "\n")
    papers_chart(records, paths[3])
    return paths


def _memory_kbit(report):
    return (report.get("bram_bits", 0) + report.get("uram_bits", 0)) / 1000


def format_scale(sweeps):
    """Markdown of the sweeps: ``sweeps`` is ``{block: [(size, report)]}``."""
    lines = ["# Resources against table size", "",
             "Each block with a per-flow, per-QP or per-destination table, swept from 1K to 64K entries (`lbpipe "
             "report --sweep`; bare core, one synthesis per size, `synth_xilinx -uram` so that large tables may "
             "take UltraRAM). Memory is the capacity of the block RAM and UltraRAM primitives used.", "",
             "| Block | entries | LUT | FF | RAMB36 | RAMB18 | URAM | memory (kbit) | logic levels |",
             "|---|---|---|---|---|---|---|---|---|"]
    for block, points in sweeps.items():
        for size, r in points:
            uram = (r.get("params") or {}).get("uram", "off")
            label = f"`{block}`" + (f" (uram={uram})" if uram != "off" else "")
            lines.append(f"| {label} | {size:,} | {r.get('lut', 0):,} | {r.get('ff', 0):,} | {r.get('ramb36', 0)} "
                         f"| {r.get('ramb18', 0)} | {r.get('uram', 0)} | {_memory_kbit(r):,.0f} "
                         f"| {r.get('logic_levels')} |")
    return "\n".join(lines) + "\n\n![resources against table size](img/resources_scale.png)\n\n" + FOOTNOTE + "\n"


def scale_plot(sweeps, path):
    """LUTs, memory and logic levels against table size, a line per block; written to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = (("LUT cells", lambda r: r.get("lut", 0), "log"), ("memory (kbit)", _memory_kbit, "log"),
              ("logic levels", lambda r: r.get("logic_levels") or 0, "linear"))
    for ax, (label, value, yscale) in zip(axes, panels):
        for block, points in sweeps.items():
            ax.plot([n for n, _ in points], [value(r) for _, r in points], marker="o", label=block)
        ax.set_xscale("log", base=2)
        ax.set_yscale(yscale)
        ax.set_xlabel("table entries")
        ax.set_title(label)
    axes[2].set_ylim(0, 8)
    axes[2].set_yticks(range(0, 9))
    axes[2].axhline(6, color="grey", linestyle="--", linewidth=1)
    axes[2].text(1024, 6.1, "250 MHz budget", color="grey", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_scale(sweeps, outdir):
    """``outdir/resources_sweep.md``, ``.json`` and ``outdir/img/resources_scale.png``; returns the paths."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / "resources_sweep.md", outdir / "resources_sweep.json", outdir / "img" / "resources_scale.png"]
    paths[0].write_text(format_scale(sweeps))
    paths[1].write_text(json.dumps({b: [{"size": n, **r} for n, r in pts] for b, pts in sweeps.items()},
                                   indent=2) + "\n")
    scale_plot(sweeps, paths[2])
    return paths
