"""The packet parser (:mod:`lbpipe.hdl.packet.parser`): what it reports never depends on bytes past the frame's end.

:class:`ParserPastLast` is a miter of two parsers fed the same frames (the same ``tvalid``, ``tkeep``, ``tlast``,
``tuser`` in every cycle, and the same ``tdata`` in every byte lane ``tkeep`` marks valid) whose other byte lanes
(past ``tlast``'s last valid byte) are free in each copy separately. Beats keep the AXI4-Stream producer's rule (a
beat offered stays, unchanged, until taken) and the shape lbpipe's streams have (docs/packet_io.md): every byte of a
beat valid but the last beat's, whose valid bytes are lanes 0 to L-1, L >= 1. ``meta.ready`` and
``m_axis.tready`` are free, the same for both copies; reset is free. Asserted in every cycle:

* ``meta`` agrees: ``valid`` and every payload field (``kind``, lengths, the headers found, ``truncated``, ``psn``,
  ``flow_hash``, ...): no field is taken from beyond ``tlast`` / ``tkeep``, and a header that does not fit in the
  frame counts as absent in both copies alike;
* ``s_axis.tready`` agrees (flow control does not look at those bytes either);
* ``m_axis`` agrees in ``tvalid``, ``tkeep``, ``tlast`` and in every valid byte of ``tdata`` (the frame passes bit
  for bit; bytes past the end are passed as they came).

Covers: an item for a frame shorter than one beat; an item for a frame of two beats (not with ``one_beat``).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import Assert, Assume, Cover

from lbpipe.formal.lib.harness import Harness, free

__all__ = ["ParserPastLast", "ParserFrames"]

_LANES = 64


def _valid_bytes_equal(a, b, keep):
    """``a`` and ``b`` (512-bit) agree in every byte lane ``keep`` marks."""
    return Cat(~keep[j] | (a[8 * j:8 * j + 8] == b[8 * j:8 * j + 8]) for j in range(_LANES)).all()


class ParserPastLast(Harness):
    """Past-the-end miter of the parser.

    Parameters
    ----------
    build : callable
        Returns a fresh parser.
    one_beat : bool
        Every frame is one beat (``tlast`` on every beat): the instance the default row runs.
    """

    def __init__(self, build, *, one_beat=False):
        super().__init__(reset="free")
        self._build = build
        self._one_beat = one_beat

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.a = a = self._build()
        m.submodules.b = b = self._build()
        sa, sb = a.s_axis, b.s_axis
        uw = len(sa.tuser)
        any_valid = free(self, 1, "s_any_valid")
        any_last = free(self, 1, "s_any_last")
        any_len = free(self, 6, "s_any_len")           # the last beat's valid bytes - 1
        any_user = free(self, uw, "s_any_user")
        data_a = free(self, 8 * _LANES, "s_any_data_a")
        data_b = free(self, 8 * _LANES, "s_any_data_b")
        # the producer's rule: a beat offered and not taken is offered again unchanged (both copies' data held)
        hold = Signal(name="s_hold")
        held = Signal(2 + 6 + uw + 16 * _LANES, name="s_held", reset_less=True)
        valid, last, length, user, da, db = (Signal(name="s_valid"), Signal(name="s_last"), Signal(6, name="s_len"),
                                             Signal(uw, name="s_user"), Signal(8 * _LANES, name="s_data_a"),
                                             Signal(8 * _LANES, name="s_data_b"))
        cur = Cat(valid, last, length, user, da, db)
        m.d.sync += [hold.eq(sa.tvalid & ~sa.tready), held.eq(cur)]
        with m.If(hold):
            m.d.comb += cur.eq(held)
        with m.Else():
            m.d.comb += cur.eq(Cat(any_valid, any_last, any_len, any_user, data_a, data_b))
        keep = Signal(_LANES, name="s_keep")
        m.d.comb += keep.eq(Cat(length >= j for j in range(_LANES)))
        for s, d in ((sa, da), (sb, db)):
            m.d.comb += [s.tvalid.eq(valid), s.tlast.eq(last), s.tuser.eq(user), s.tdata.eq(d),
                         s.tkeep.eq(Mux(last, keep, (1 << _LANES) - 1))]
        m.d.comb += Assume(_valid_bytes_equal(da, db, sa.tkeep))
        if self._one_beat:
            m.d.comb += Assume(last)

        ready = free(self, 1, "meta_ready")
        tready = free(self, 1, "m_tready")
        m.d.comb += [a.meta.ready.eq(ready), b.meta.ready.eq(ready),
                     a.m_axis.tready.eq(tready), b.m_axis.tready.eq(tready)]
        ma, mb = a.m_axis, b.m_axis
        meta_same = (a.meta.valid == b.meta.valid) & (~a.meta.valid | (a.meta.payload.as_value() ==
                                                                        b.meta.payload.as_value()))
        beat_same = (ma.tvalid == mb.tvalid) & (~ma.tvalid | ((ma.tkeep == mb.tkeep) & (ma.tlast == mb.tlast) &
                                                            _valid_bytes_equal(ma.tdata, mb.tdata, ma.tkeep)))
        # frames seen: the item for a short frame (one beat, not all bytes valid) and for a frame of two beats
        second = Signal(name="in_second_beat")
        with m.If(sa.tvalid & sa.tready):
            m.d.sync += second.eq(~sa.tlast)
        short_item = Signal(name="short_item")
        two_item = Signal(name="two_beat_item")
        with m.If(sa.tvalid & sa.tready & sa.tlast):
            m.d.sync += [short_item.eq(~second & (length != _LANES - 1)), two_item.eq(second)]
        m.d.comb += [
            Assert(meta_same, "meta depends on bytes past the frame's end"),
            Assert(sa.tready == sb.tready, "s_axis.tready depends on bytes past the frame's end"),
            Assert(beat_same, "m_axis differs in a valid byte or in tvalid, tkeep, tlast"),
            Cover(a.meta.valid & short_item),
        ]
        if not self._one_beat:
            m.d.comb += Cover(a.meta.valid & two_item)
        return m


class ParserFrames(Harness):
    """Frame contract of the parser: ``m_axis`` is ``s_axis`` passed through, and one item per frame.

    One parser, frames driven as in :class:`ParserPastLast` (any data, every beat full but the last), ``meta.ready``,
    ``m_axis.tready`` and reset free. Asserted in every cycle:

    * a beat offered on ``m_axis`` and not taken is offered again unchanged; no beat leaves without one accepted and
      not yet passed on;
    * **beats conserved, in order**: a watched beat, chosen by the solver at acceptance (the n-th since reset), leaves
      as the n-th beat of ``m_axis`` with its ``tdata``, ``tkeep``, ``tlast`` and ``tuser`` unchanged (so frames and
      ``tlast`` are kept);
    * **one item per frame, in order**: an item is offered only while a frame whose last beat was accepted has no
      item yet, and the n-th item's ``tag`` is n (mod 256 here; the datasheet: frames counted from 0 after reset).

    Covers: an item for a frame of two beats; a watched last beat passed on.
    """

    def __init__(self, build):
        super().__init__(reset="free")
        self._build = build

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        s, o, meta = dut.s_axis, dut.m_axis, dut.meta
        uw = len(s.tuser)
        any_valid = free(self, 1, "s_any_valid")
        any_last = free(self, 1, "s_any_last")
        any_len = free(self, 6, "s_any_len")
        any_user = free(self, uw, "s_any_user")
        any_data = free(self, 8 * _LANES, "s_any_data")
        hold = Signal(name="s_hold")
        held = Signal(2 + 6 + uw + 8 * _LANES, name="s_held", reset_less=True)
        valid, last, length, user, data = (Signal(name="s_valid"), Signal(name="s_last"), Signal(6, name="s_len"),
                                           Signal(uw, name="s_user"), Signal(8 * _LANES, name="s_data"))
        cur = Cat(valid, last, length, user, data)
        m.d.sync += [hold.eq(s.tvalid & ~s.tready), held.eq(cur)]
        with m.If(hold):
            m.d.comb += cur.eq(held)
        with m.Else():
            m.d.comb += cur.eq(Cat(any_valid, any_last, any_len, any_user, any_data))
        keep = Cat(length >= j for j in range(_LANES))
        m.d.comb += [s.tvalid.eq(valid), s.tlast.eq(last), s.tuser.eq(user), s.tdata.eq(data),
                     s.tkeep.eq(Mux(last, keep, (1 << _LANES) - 1))]
        m.d.comb += [meta.ready.eq(free(self, 1, "meta_ready")), o.tready.eq(free(self, 1, "m_tready"))]

        took_in = s.tvalid & s.tready
        took_out = o.tvalid & o.tready
        beat = Cat(s.tdata, s.tkeep, s.tlast, s.tuser)
        beat_out = Cat(o.tdata, o.tkeep, o.tlast, o.tuser)
        beats_in, beats_out, frames_in, items_out = (Signal(8, name=n) for n in
                                                     ("beats_in", "beats_out", "frames_in", "items_out"))
        with m.If(took_in):
            m.d.sync += beats_in.eq(beats_in + 1)
            with m.If(s.tlast):
                m.d.sync += frames_in.eq(frames_in + 1)
        with m.If(took_out):
            m.d.sync += beats_out.eq(beats_out + 1)
        with m.If(meta.valid & meta.ready):
            m.d.sync += items_out.eq(items_out + 1)
        waiting = Signal(name="m_waiting")
        last_out = Signal(len(beat_out), name="m_last_beat", reset_less=True)
        m.d.sync += [waiting.eq(o.tvalid & ~o.tready), last_out.eq(beat_out)]
        pick = free(self, 1, "watch")
        armed = Signal(name="armed")
        seq = Signal(8, name="watch_seq", reset_less=True)
        kept = Signal(len(beat), name="watch_beat", reset_less=True)
        with m.If(took_in & pick & ~armed):
            m.d.sync += [armed.eq(1), seq.eq(beats_in), kept.eq(beat)]
        its_turn = armed & took_out & (beats_out == seq)
        two = Signal(name="two_beat_frame")
        second = Signal(name="in_second_beat")
        with m.If(took_in):
            m.d.sync += second.eq(~s.tlast)
            with m.If(s.tlast & second):
                m.d.sync += two.eq(1)
        m.d.comb += [
            Assert(~waiting | (o.tvalid & (beat_out == last_out)), "m_axis beat withdrawn or changed while waiting"),
            Assert(~took_out | (beats_in != beats_out), "an m_axis beat without an accepted one"),
            Assert(~its_turn | (beat_out == kept), "a beat lost, duplicated, reordered or changed on m_axis"),
            Assert(~meta.valid | (frames_in != items_out), "an item without a frame ended"),
            Assert(~meta.valid | (meta.payload.tag[:8] == items_out), "an item out of frame order"),
            Cover(meta.valid & two),
            Cover(its_turn & o.tlast & (seq != 0)),
        ]
        return m
