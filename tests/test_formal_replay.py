"""Per-proof time limits and counterexample replay in cocotb (lbpipe prove --timeout, lbpipe replay-cex;
docs/formal.md).

The replay checks run a planted fault through the prover, replay the solver's trace in cocotb (Icarus) and require
the failure at the very step the solver names, with an assertion whose source line is one the solver names. The
same inputs are then replayed on the harness without the fault, which must pass every cycle: a replay that always
failed, or that failed at another cycle, is caught either way.
"""

import os
import pathlib
import re

from amaranth import Module, Signal
from amaranth.back import rtlil
from amaranth.lib import wiring

from lbpipe.cex import read_witness, replay, replay_command
from lbpipe.cli import main
from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.ring import RingInvariants
from lbpipe.formal.lib.stream import StreamContract
from lbpipe.hdl.lib.ring import ring_drop
from lbpipe.hdl.themis.themis_s import ThemisS
from lbpipe.prove import ProofResult, _session_members, format_table, run_proof, select


def _drop_keeps_count(state, n, depth):
    # The planted fault: a drop that moves head but keeps count.
    return {**ring_drop(state, n, depth), "count": state.count}


def _fail(tmp_path, harness, depth):
    proof = Proof("broken", "planted fault", lambda: harness, depth=depth, cover=False)
    result = run_proof(proof, outdir=tmp_path / "formal", harness=harness)
    assert result.result == "FAIL", result
    return result, pathlib.Path(result.vcd).parents[2]


def _solver_step_and_lines(result):
    text = pathlib.Path(result.log).read_text()
    found = re.findall(r"failed assertion \S+ at (\S+?\.py):(\d+) step (\d+)", text)
    assert found, "the solver's log names no failed assertion"
    lines = [pathlib.Path(path).read_text().splitlines()[int(line) - 1] for path, line, _ in found]
    return int(found[0][2]), lines


def _states(line, message):
    """Whether the source ``line`` (an ``Assert(..., "text")``, the text perhaps an f-string) states ``message``."""
    for literal in re.findall(r'f?"((?:[^"\\]|\\.)*)"', line):
        pattern = "".join(".*" if part.startswith("{") else re.escape(part)
                          for part in re.split(r"(\{[^}]*\})", literal))
        if re.fullmatch(pattern, message):
            return True
    return False


def _write_il(tmp_path, harness, name):
    path = tmp_path / name
    path.write_text(rtlil.convert(harness, name="top", ports=harness.ports))
    return path


def _check_both_ways(tmp_path, broken, fixed, depth):
    result, workdir = _fail(tmp_path, broken, depth)
    step, lines = _solver_step_and_lines(result)
    replayed = replay(workdir, sim_dir=tmp_path / "replay-broken")
    assert replayed.failed_cycle == step, f"replay failed at {replayed.failed_cycle}, the solver at step {step}"
    assert replayed.failed and all(any(_states(line, msg) for line in lines) for msg in replayed.failed), \
        f"replay failed {replayed.failed}, the solver at {lines}"
    good = _write_il(tmp_path, fixed, "fixed.il")
    again = replay(workdir, design=good, sim_dir=tmp_path / "replay-fixed")
    assert again.failed_cycle is None, f"the fixed harness fails the same inputs: {again.lines()}"
    assert again.assumption_cycle is None, f"the inputs break an assumption of the fixed harness: {again.lines()}"
    return result, workdir


def test_ring_counterexample_replays(tmp_path, capsys):
    _, workdir = _check_both_ways(tmp_path, RingInvariants(depth=5, overwrite=True, drop=_drop_keeps_count),
                                  RingInvariants(depth=5, overwrite=True), depth=14)
    # The command line: exit status 1 and the failing cycle on the proof's own harness, 0 on the fixed one.
    capsys.readouterr()
    assert main(["replay-cex", str(workdir)]) == 1
    assert re.search(r"replay: cycle \d+: assertion failed: ", capsys.readouterr().out)
    assert main(["replay-cex", str(workdir), "--design", str(tmp_path / "fixed.il")]) == 0
    assert "pass every assertion" in capsys.readouterr().out


def test_themis_s_counterexample_replays(tmp_path):
    # Themis-S whose output flips a payload bit every cycle, under the stream contract (caught by "payload changed
    # while waiting"); then the same inputs on the real Themis-S.
    make = lambda: ThemisS(n_paths=3, mode="sport", hash_bits=4)    # noqa: E731
    broken = StreamContract(lambda: _Unstable(make()), capacity=ThemisS.latency, stall_bound=ThemisS.latency)
    fixed = StreamContract(make, capacity=ThemisS.latency, stall_bound=ThemisS.latency)
    _check_both_ways(tmp_path, broken, fixed, depth=8)


class _Unstable(wiring.Component):
    """``inner`` with bit 0 of the output's ``udp_sport`` flipped in every other cycle."""

    def __init__(self, inner):
        self._inner = inner
        self.latency = inner.latency
        super().__init__(inner.signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self._inner
        wiring.connect(m, wiring.flipped(self.i), inner.i)
        wiring.connect(m, wiring.flipped(self.ctl), inner.ctl)
        m.d.comb += [self.stats.eq(inner.stats), self.o.valid.eq(inner.o.valid), inner.o.ready.eq(self.o.ready),
                     self.o.payload.eq(inner.o.payload)]
        toggle = Signal()
        m.d.sync += toggle.eq(~toggle)
        m.d.comb += self.o.payload.udp_sport[0].eq(inner.o.payload.udp_sport[0] ^ toggle)
        return m


def test_witness_bit_order():
    # Two signals, the first at the low end of the bit string: hand-worked from the Yosys witness format.
    import json
    import tempfile
    data = {"signals": [{"path": ["\\a"], "width": 1, "offset": 0, "init_only": False},
                        {"path": ["\\b"], "width": 3, "offset": 0, "init_only": False}],
            "steps": [{"bits": "1100"}, {"bits": "0011"}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yw", delete=False) as f:
        json.dump(data, f)
    try:
        assert read_witness(f.name) == [{"a": 0, "b": 0b110}, {"a": 1, "b": 0b001}]
    finally:
        os.unlink(f.name)


def test_failed_row_prints_the_replay_command(tmp_path):
    vcd = tmp_path / "blk" / "prop" / "bmc" / "engine_0" / "trace.vcd"
    row = ProofResult("blk", "prop", "BMC", 4, "FAIL", 1.0, vcd=str(vcd), log="log")
    assert "replay" not in format_table([row])        # no witness, no top.il: nothing to replay
    vcd.parent.mkdir(parents=True)
    for path in (vcd, vcd.with_name("trace.yw"), tmp_path / "blk" / "prop" / "top.il"):
        path.write_text("")
    text = format_table([row])
    assert f"lbpipe replay-cex {tmp_path / 'blk' / 'prop'}/" in text
    assert replay_command(vcd) in text


def test_replay_refuses_a_directory_without_trace(tmp_path, capsys):
    assert main(["replay-cex", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lbpipe:")


# -- time limits -----------------------------------------------------------------------------------------------------


def _children():
    """Processes whose parent is this one (a solver or sby left behind would be one, or in the sby session)."""
    me = str(os.getpid())
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2:].split()[1] == me:
                found.append(int(entry.name))
    return found


def test_timeout_kills_the_proof(tmp_path):
    # The Themis-S stream contract to depth 60 takes far longer than its 2 s limit on any machine (depth 20 takes
    # minutes): the limit must stop it and leave no process behind.
    proof = next(p for p in select("themis-s") if p.prop.startswith("stream contract"))
    limited = Proof(proof.block, proof.prop, proof.build, depth=60, timeout=2.0)
    before = set(_children())
    result = run_proof(limited, outdir=tmp_path)
    assert result.result == "TIMEOUT", result
    assert result.seconds < 15
    assert result.session is not None and _session_members(result.session) == []
    assert set(_children()) <= before
    table = format_table([result])
    assert "TIMEOUT after" in table


def test_timeout_flag_overrides_and_is_checked(tmp_path, capsys):
    for bad in ("0", "-3", "soon", "nan", "inf"):
        assert main(["prove", "lib-ring", "--timeout", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("lbpipe:") and "--timeout" in err
    # --timeout replaces the rows' limits: ring proofs at k = 40 under a 0.5 s limit time out, exit status 1.
    assert main(["prove", "lib-ring", "--depth", "40", "--timeout", "0.5"]) == 1
    assert "TIMEOUT" in capsys.readouterr().out
