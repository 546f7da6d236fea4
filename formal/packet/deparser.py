"""The deparser (:mod:`lbpipe.hdl.packet.deparser`): its checksum adder and what a rewrite changes.

:class:`OnesComplementAdd` (combinational, any two 16-bit words): the deparser's ones'-complement adder
(``_oc_add``, the carry-select pair every sum of its UDP checksum update is made of) equals RFC 1071's sum, the 17-bit
sum with its carry added back. The update's composition (which words, RFC 1624 eqn. 3, the ICRC words' pairing, a
computed 0 sent as 0xFFFF) is not proven: a from-scratch recomputation against the deparser's output, even a
7-word ones'-complement identity alone, did not close in 5 to 12 minutes with Yices (bit-level SAT and modular
sums; the ``gf2`` method does not apply: the sum is not affine over GF(2)). The cocotb bench checks every rewritten
frame's checksum with scapy.

Frames are driven by a free producer that keeps the AXI4-Stream rule (a beat offered stays, unchanged, until taken)
and lbpipe's frame shape (docs/packet_io.md): every beat full but the last, whose valid bytes are lanes 0 to L-1,
L >= 1. Actions (``act``) come from a free producer that keeps the stream rule. ``m_axis.tready`` is free.

:class:`DeparserRewrite` (the whole deparser at ``depth`` 4, ``pending`` 2; one-beat frames, reset at the start
only, no ``drop``): the first frame and its action are recorded; when its beat leaves, asserted: ``tkeep``,
``tlast``, ``tuser`` unchanged; where the datasheet's rule applies (``rewrite``, ``l4_off`` even, ``icrc_off >=
l4_off + 8``, the ICRC's 4 bytes inside the frame), the UDP source port (big endian at ``l4_off``) is ``old ^
sport_xor``, no byte but the port's, the checksum's (``l4_off + 6``) and the ICRC's changes, and a zero checksum
stays zero; where it does not, the beat is unchanged.
Cover: a rewrite with a non-zero ``sport_xor`` leaving.

The frame contract (beats and frames conserved, in order, ``tlast`` kept, one action per frame, reset empties it)
was stated on the whole deparser at ``depth`` 4, ``pending`` 2 with a free reset, frames of any length and any
actions (and with one-beat frames), but BMC had reached only step 22 to 27 of the 34 needed (a frame leaves 31 cycles
after it enters) after 6 to 10 minutes: it is not a row, and only simulated.
"""

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.hdl import Assert, Assume, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["OnesComplementAdd", "DeparserRewrite"]

_LANES = 64


def _drive_frames(harness, m, s, *, one_beat=False):
    """Free frames on the AXI4-Stream sink ``s``: the producer's rule and lbpipe's frame shape (see the module
    docstring). Returns the number of valid bytes of the beat offered, less one (6 bits)."""
    uw = len(s.tuser)
    any_cur = Cat(free(harness, 1, "s_any_valid"), free(harness, 1, "s_any_last"), free(harness, 6, "s_any_len"),
                  free(harness, uw, "s_any_user"), free(harness, 8 * _LANES, "s_any_data"))
    valid, last, length, user, tdata = (Signal(name="s_valid"), Signal(name="s_last"), Signal(6, name="s_len"),
                                        Signal(uw, name="s_user"), Signal(8 * _LANES, name="s_data"))
    cur = Cat(valid, last, length, user, tdata)
    hold = Signal(name="s_hold")
    held = Signal(len(cur), name="s_held", reset_less=True)
    m.d.sync += [hold.eq(s.tvalid & ~s.tready), held.eq(cur)]
    m.d.comb += cur.eq(Mux(hold, held, any_cur))
    keep = Cat(length >= j for j in range(_LANES))
    m.d.comb += [s.tvalid.eq(valid), s.tlast.eq(last), s.tuser.eq(user), s.tdata.eq(tdata),
                 s.tkeep.eq(Mux(last, keep, (1 << _LANES) - 1))]
    if one_beat:
        m.d.comb += Assume(last)
    return length


def _byte(value, j):
    return value[8 * j:8 * j + 8]


def _field(data, off):
    """The big-endian 16-bit field at byte offset ``off`` of a 64-byte beat (0 past the beat)."""
    lanes = Cat(*[_byte(data, j) for j in range(_LANES)], C(0, 16))
    return Cat(lanes.word_select(off + 1, 8), lanes.word_select(off, 8))


class OnesComplementAdd(Harness):
    """The deparser's ones'-complement adder (``_oc_add``, a carry-select pair: every sum of its UDP checksum
    update is one) against RFC 1071's: the 17-bit sum of two 16-bit words with its carry added back (combinational,
    any two words).

    Parameters
    ----------
    add : callable
        The adder under proof, ``add(m, a, b, name)`` (default the deparser's; the tests pass broken ones).
    """

    def __init__(self, *, add=None):
        super().__init__(reset="start")
        self._add = add

    def elaborate(self, platform):
        from lbpipe.hdl.packet import deparser
        m = Module()
        self.domain(m)
        add = self._add or deparser._oc_add
        a, b = free(self, 16, "a"), free(self, 16, "b")
        got = add(m, a, b, "dut_sum")
        wide = Signal(17, name="wide")
        folded = Signal(17, name="folded")
        m.d.comb += [wide.eq(a + b), folded.eq(wide[:16] + wide[16])]
        m.d.comb += [
            Assert(got == folded[:16], "the ones'-complement sum differs from RFC 1071's end-around carry"),
            Cover(wide[16] & (got != 0xFFFF)),
        ]
        return m


class DeparserRewrite(Harness):
    """What a rewrite changes in a frame; see the module docstring.

    Parameters
    ----------
    build : callable
        Returns a fresh deparser (store-and-forward: the checksum is written only there).
    """

    def __init__(self, build):
        super().__init__(reset="start")
        self._build = build

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        s, o, act = dut.s_axis, dut.m_axis, dut.act
        length = _drive_frames(self, m, s, one_beat=True)
        drive_source(self, m, act, "act")
        m.d.comb += [o.tready.eq(free(self, 1, "m_tready")), Assume(~act.payload.drop)]

        # the first frame and its action (frames are one beat; no drop, so its beat is the first to leave)
        beat_in = Signal(8 * _LANES, name="in_data", reset_less=True)
        ctl_in = Signal(len(s.tkeep) + 1 + len(s.tuser), name="in_ctl", reset_less=True)
        n_valid = Signal(7, name="in_n_valid", reset_less=True)
        got_beat = Signal(name="got_beat")
        with m.If(s.tvalid & s.tready & ~got_beat):
            m.d.sync += [got_beat.eq(1), beat_in.eq(s.tdata), ctl_in.eq(Cat(s.tkeep, s.tlast, s.tuser)),
                         n_valid.eq(length + 1)]
        a = act.payload
        l4 = Signal(8, name="in_l4_off", reset_less=True)
        icrc = Signal(14, name="in_icrc_off", reset_less=True)
        xor = Signal(16, name="in_sport_xor", reset_less=True)
        rewrite = Signal(name="in_rewrite", reset_less=True)
        got_act = Signal(name="got_act")
        took_act = act.valid & act.ready & ~got_act
        with m.If(took_act):
            m.d.sync += [got_act.eq(1), l4.eq(a.l4_off), icrc.eq(a.icrc_off), xor.eq(a.sport_xor),
                         rewrite.eq(a.rewrite)]
        # the datasheet's rule, for a one-beat frame: the ICRC (4 bytes) inside the frame
        applies = rewrite & ~l4[0] & (icrc >= l4 + 8) & (icrc + 4 <= n_valid)

        port_in, sum_in = Signal(16, name="port_in"), Signal(16, name="csum_in")
        port_out, sum_out = Signal(16, name="port_out"), Signal(16, name="csum_out")
        m.d.comb += [port_in.eq(_field(beat_in, l4)), sum_in.eq(_field(beat_in, l4 + 6)),
                     port_out.eq(_field(o.tdata, l4)), sum_out.eq(_field(o.tdata, l4 + 6))]
        written = []
        for j in range(_LANES):
            written.append((l4 == j) | (l4 + 1 == j) | (l4 + 6 == j) | (l4 + 7 == j) |
                           ((icrc <= j) & (icrc + 4 > j)))
        untouched = Cat(written[j] | (_byte(o.tdata, j) == _byte(beat_in, j)) for j in range(_LANES)).all()
        first_out = Signal(name="first_out")
        with m.If(o.tvalid & o.tready):
            m.d.sync += first_out.eq(1)
        check = o.tvalid & ~first_out
        same_ctl = Cat(o.tkeep, o.tlast, o.tuser) == ctl_in
        m.d.comb += [
            Assert(~check | (got_beat & got_act), "a beat leaves before its frame and action"),
            Assert(~check | same_ctl, "tkeep, tlast or tuser changed"),
            Assert(~check | applies | (o.tdata == beat_in), "a frame the rule refuses is changed"),
            Assert(~check | ~applies | (port_out == port_in ^ xor), "the UDP source port is not old ^ sport_xor"),
            Assert(~check | ~applies | untouched, "a byte outside the port, checksum and ICRC changed"),
            Assert(~check | ~applies | (sum_in != 0) | (sum_out == 0), "a zero UDP checksum is not kept"),
            Cover(check & applies & (xor != 0)),
        ]
        return m
