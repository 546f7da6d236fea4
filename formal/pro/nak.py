"""PRO's NAK-frame stage (:mod:`lbpipe.hdl.pro.nak`): its contract differs from a metadata block's, so it has a
harness of its own.

The stage takes one *event* per clock (``i``: ``qp``, ``nack``, ``psn``) and gives a one-beat frame on ``m_axis``
only for a NACK event of a QP in range whose NAK context is valid (every other event is only counted). So "one
output per input" becomes: one frame per *frame-making* event, in order. :class:`NakFrames` drives ``i`` and ``ctl``
from free producers (any event, any command of any table, index and data), ``m_axis.tready`` freely, a reset at any
time, and keeps its own copy of each QP's context-valid bit, written from the datasheet's table 3 format (index =
QP, ``data[63]`` the valid bit; ``ctl`` is always ready; an event and a write of its QP in one clock: the event sees
the old bit), not reset (the contexts are memory and survive a reset). Asserted in every cycle:

* **stable**: a beat offered and not taken is offered again in the next cycle with the same ``tdata``, ``tkeep``,
  ``tlast`` and ``tuser`` (unless a reset came between);
* **one beat per frame**: every beat offered has ``tlast`` set and ``tkeep`` = the 62 bytes of a NAK frame;
* **no spurious frame**: a beat is handed over only while a frame-making event accepted since the last reset has no
  frame yet;
* **order**: a watched frame-making event (the n-th since reset) leaves as the n-th frame, with its PSN in the BTH
  PSN bytes (frame bytes 51 to 53, big-endian: 14 Ethernet + 20 IPv4 + 8 UDP bytes, then BTH bytes 9 to 11);
* **bounded inside**, **progress**: at most ``latency`` frames owed; with frames owed and ``tready`` high, a frame
  within ``latency`` ready cycles.

Covers: a beat waiting on ``tready``; the watched event's frame when it is not the first; a reset with two frames
owed. :class:`NakAsStream` shows the stage as a block with ``o`` (``tvalid``/``tready``), so the generic
:class:`~lbpipe.formal.lib.stream.ValidIndependence` and :class:`~lbpipe.formal.lib.reset.ResetEmpty` apply.
"""

from amaranth import Cat, Module, Signal
from amaranth.hdl import Assert, Cover
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.pro.nak import NakEvent

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["NakFrames", "NakAsStream"]

_COUNT = 8
_FRAME_BYTES = 62           # a NAK frame: 14 + 20 + 8 + 12 (BTH) + 4 (AETH) + 4 (ICRC), from the datasheet
_PSN_BYTE = 14 + 20 + 8 + 9
_CONTEXT_TABLE = 3          # the table whose data[63] is the context's valid bit


class NakAsStream(wiring.Component):
    """A NAK stage with its ``m_axis`` handshake shown as a one-bit stream ``o`` (payload ``tlast``)."""

    def __init__(self, build):
        self._inner = build()
        self.latency = self._inner.latency
        super().__init__({
            "i": In(self._inner.signature.members["i"].signature),
            "ctl": In(ControlSignature()),
            "o": Out(stream.Signature(1)),
            "stats": Out(len(self._inner.stats)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self._inner
        m.d.comb += [
            inner.i.valid.eq(self.i.valid), inner.i.payload.eq(self.i.payload), self.i.ready.eq(inner.i.ready),
            inner.ctl.valid.eq(self.ctl.valid), inner.ctl.payload.eq(self.ctl.payload),
            self.ctl.ready.eq(inner.ctl.ready),
            self.o.valid.eq(inner.m_axis.tvalid), self.o.payload.eq(inner.m_axis.tlast),
            inner.m_axis.tready.eq(self.o.ready), self.stats.eq(inner.stats),
        ]
        return m


class NakFrames(Harness):
    """Frame-contract harness around a NAK stage.

    Parameters
    ----------
    build : callable
        Returns a fresh stage.
    n_qps : int
        The instance's QPs (from its parameters, not read from the block).
    """

    def __init__(self, build, *, n_qps):
        super().__init__(reset="free")
        self._build = build
        self._n_qps = n_qps

    def elaborate(self, platform):
        m = Module()
        rst, _ = self.domain(m)
        m.submodules.dut = dut = self._build()
        latency = dut.latency
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        o = dut.m_axis
        ready = free(self, 1, "tready")
        m.d.comb += o.tready.eq(ready)

        # The harness's context-valid bits (not reset, like the contexts).
        valid = [Signal(name=f"ctx_valid{q}", reset_less=True) for q in range(self._n_qps)]
        c = dut.ctl.payload
        for q in range(self._n_qps):
            with m.If(dut.ctl.valid & dut.ctl.ready & (c.table == _CONTEXT_TABLE) & (c.index == q)):
                m.d.sync += valid[q].eq(c.data[63])
        ev = dut.i.payload
        known = Cat(*((ev.qp == q) & valid[q] for q in range(self._n_qps))).any()
        makes = dut.i.valid & dut.i.ready & ev.nack & known
        took = o.tvalid & o.tready
        owed_in = Signal(_COUNT)
        sent = Signal(_COUNT)
        owed = Signal(_COUNT)
        m.d.comb += owed.eq(owed_in - sent)
        with m.If(makes):
            m.d.sync += owed_in.eq(owed_in + 1)
        with m.If(took):
            m.d.sync += sent.eq(sent + 1)

        beat = Cat(o.tdata, o.tkeep, o.tlast, o.tuser)
        waiting = Signal()
        last = Signal(len(beat), reset_less=True)
        m.d.sync += [waiting.eq(o.tvalid & ~o.tready), last.eq(beat)]

        pick = free(self, 1, "watch")
        armed = Signal()
        seq = Signal(_COUNT, reset_less=True)
        psn = Signal(24, reset_less=True)
        with m.If(makes & pick & ~armed):
            m.d.sync += [armed.eq(1), seq.eq(owed_in), psn.eq(ev.psn)]
        its_turn = armed & took & (sent == seq)
        wire_psn = Cat(o.tdata.word_select(_PSN_BYTE + 2, 8), o.tdata.word_select(_PSN_BYTE + 1, 8),
                       o.tdata.word_select(_PSN_BYTE, 8))

        stall = Signal(_COUNT)
        with m.If(ready & (owed != 0) & ~took):
            m.d.sync += stall.eq(stall + 1)
        with m.Else():
            m.d.sync += stall.eq(0)
        m.d.comb += [
            Assert(~waiting | (o.tvalid & (beat == last)), "beat withdrawn or changed while waiting"),
            Assert(~o.tvalid | (o.tlast & (o.tkeep == (1 << _FRAME_BYTES) - 1)), "a beat that is not a whole NAK"),
            Assert(~took | (owed != 0), "a frame without a frame-making event"),
            Assert(~its_turn | (wire_psn == psn), "frame out of order, lost, duplicated or with another PSN"),
            Assert(owed <= latency, "more frames owed than the stage can hold"),
            Assert(stall <= latency, "no frame for latency ready cycles with a frame owed"),
            Cover(waiting),
            Cover(its_turn & (seq != 0)),
            Cover(rst & (owed >= 2)),
        ]
        return m
