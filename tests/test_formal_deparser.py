"""Formal proofs of the deparser (formal/packet/deparser.py, docs/packet_io.md): each property catches a
deliberately broken design, for the planted reason (the failing assertion's source line names the property), with a
counterexample VCD; the rows themselves pass.

The whole-deparser row needs about 31 cycles before a frame can leave (the join and output pipelines), so it is a
deep row and its planted faults run in the deep profile only (about 1 to 3 minutes each).
"""

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring

from lbpipe.prove import run_proof, select

from formal_checks import expect_fail as _expect_fail


# The deep row runs in tests/test_formal.py::test_every_proof_passes (regression profile), with every other row.
@pytest.mark.parametrize("proof", select("deparser"), ids=lambda p: p.prop)
def test_fast_deparser_proofs_pass(tmp_path, proof):
    result = run_proof(proof, outdir=tmp_path)
    assert result.result == "PASS", f"{proof.prop}: {result.result} ({result.log})"


# -- the ones'-complement adder of the checksum update ----------------------------------------------------------------


def _add_no_carry(m, a, b, name):
    """A checksum adder that drops the end-around carry (a two's-complement 16-bit sum)."""
    out = Signal(16, name=name)
    m.d.comb += out.eq((a + b)[:16])
    return out


def _add_carry_twice(m, a, b, name):
    """A checksum adder that adds the carry back in every case (one too many when there is none)."""
    out = Signal(16, name=name)
    s = a + b
    m.d.comb += out.eq((s[:16] + 1)[:16])
    return out


@pytest.mark.parametrize("add", [_add_no_carry, _add_carry_twice], ids=["no end-around carry", "carry always"])
def test_broken_checksum_adder_is_caught(tmp_path, add):
    from lbpipe.formal.packet.deparser import OnesComplementAdd
    _expect_fail(tmp_path, OnesComplementAdd(add=add), "differs from RFC 1071's end-around carry", depth=1)


def test_checksum_adder_fault_in_the_deparser_is_caught(tmp_path, monkeypatch):
    """The row looks the adder up in the deparser's module, so a fault planted there is the one it proves."""
    from lbpipe.formal.packet.deparser import OnesComplementAdd
    from lbpipe.hdl.packet import deparser
    monkeypatch.setattr(deparser, "_oc_add", _add_no_carry)
    _expect_fail(tmp_path, OnesComplementAdd(), "differs from RFC 1071's end-around carry", depth=1)


def test_checksum_adder_reference_by_hand():
    """The harness's RFC 1071 reference and the deparser's adder on hand-worked sums (RFC 1071 section 3's example
    words 0x0001 + 0xF203 + 0xF4F5 + 0xF6F7 sum to 0xDDF2 with end-around carry)."""
    from amaranth.sim import Simulator
    from lbpipe.hdl.packet.deparser import _oc_add

    m = Module()
    a, b = Signal(16), Signal(16)
    out = _oc_add(m, a, b, "s")
    got = {}

    async def bench(ctx):
        for x, y in ((0x0001, 0xF203), (0xFFFF, 0x0001), (0xFFFF, 0xFFFF), (0, 0), (0x8000, 0x8000)):
            ctx.set(a, x)
            ctx.set(b, y)
            got[(x, y)] = ctx.get(out)
        acc = 0x0001
        for word in (0xF203, 0xF4F5, 0xF6F7):
            ctx.set(a, acc)
            ctx.set(b, word)
            acc = ctx.get(out)
        got["rfc1071"] = acc

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got[(0x0001, 0xF203)] == 0xF204
    assert got[(0xFFFF, 0x0001)] == 0x0001      # 0x10000: carry back, 1
    assert got[(0xFFFF, 0xFFFF)] == 0xFFFF      # 0x1FFFE: 0xFFFE + 1
    assert got[(0, 0)] == 0
    assert got[(0x8000, 0x8000)] == 0x0001
    assert got["rfc1071"] == 0xDDF2


# -- the whole deparser (deep rows; planted faults in the regression profile) ---------------------------------------


class _Broken(wiring.Component):
    """The deparser (smallest instance) behind a wrapper that plants ``fault``; every other port passes straight
    through."""

    def __init__(self, fault):
        from lbpipe.hdl.packet.deparser import Deparser
        self._inner = Deparser(depth=4, pending=2)
        self._fault = fault
        self.user_width = self._inner.user_width
        super().__init__(self._inner.signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self._inner
        s, o, si, oi = self.s_axis, self.m_axis, inner.s_axis, inner.m_axis
        m.d.comb += [si.tvalid.eq(s.tvalid), si.tdata.eq(s.tdata), si.tkeep.eq(s.tkeep), si.tlast.eq(s.tlast),
                     si.tuser.eq(s.tuser), s.tready.eq(si.tready),
                     o.tvalid.eq(oi.tvalid), o.tdata.eq(oi.tdata), o.tkeep.eq(oi.tkeep), o.tlast.eq(oi.tlast),
                     o.tuser.eq(oi.tuser), oi.tready.eq(o.tready),
                     inner.act.valid.eq(self.act.valid), inner.act.payload.eq(self.act.payload),
                     self.act.ready.eq(inner.act.ready), self.stats.eq(inner.stats)]
        if self._fault == "byte-flipped":
            # the last byte lane of every beat changes on its way out
            m.d.comb += o.tdata.eq(oi.tdata ^ (1 << 511))
        elif self._fault == "port-swapped":
            # the source port's XOR pattern as if the port were little endian: the deparser gets the action with
            # its sport_xor bytes swapped
            x = self.act.payload.sport_xor
            m.d.comb += inner.act.payload.sport_xor.eq(x.rotate_left(8))
        elif self._fault in ("checksum-touched", "dport-flipped"):
            # where the rewrite applies to a one-beat frame (the datasheet's rule, as the wrapper can see it), the
            # low bit of the UDP checksum (the first action's l4_off + 7) or of the destination port (+ 3) flips
            p = self.act.payload
            l4, icrc, rewrite, seen = Signal(8), Signal(14), Signal(), Signal()
            with m.If(self.act.valid & self.act.ready & ~seen):
                m.d.sync += [seen.eq(1), l4.eq(p.l4_off), icrc.eq(p.icrc_off), rewrite.eq(p.rewrite)]
            applies = (rewrite & ~l4[0] & (icrc >= l4 + 8) & (icrc + 3 < 64) &
                       oi.tkeep.bit_select((icrc + 3)[:6], 1))
            lane = l4 + (7 if self._fault == "checksum-touched" else 3)
            m.d.comb += o.tdata.eq(oi.tdata ^ (applies << (8 * lane)).as_unsigned())
        return m


def _build(fault):
    return lambda: _Broken(fault)


@pytest.mark.deep
@pytest.mark.parametrize("fault, reason", [
    ("byte-flipped", ("a byte outside the port, checksum and ICRC changed", "a frame the rule refuses is changed")),
    ("dport-flipped", "a byte outside the port, checksum and ICRC changed"),
    ("port-swapped", "the UDP source port is not old ^ sport_xor"),
    ("checksum-touched", "a zero UDP checksum is not kept"),
])
def test_deparser_broken_rewrite_is_caught(tmp_path, fault, reason):
    from lbpipe.formal.packet.deparser import DeparserRewrite
    from lbpipe.formal.packet.proofs import DEPARSER_REWRITE_DEPTH
    _expect_fail(tmp_path, DeparserRewrite(_build(fault)), reason, depth=DEPARSER_REWRITE_DEPTH)
