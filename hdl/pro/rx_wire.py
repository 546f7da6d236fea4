"""PRO's receiver as a bump in the wire: parser -> QP classifier -> out-of-order window (``pro-ooo``) -> NAK frames
(``pro-nak``), on the 512-bit AXI4-Stream (PRO: sections III-B, III-C, Algorithm 2; issue 14, "Receiver";
datasheet docs/pro_rx_wire.md).

Every received frame leaves on ``m_axis`` (towards the host) bit for bit as it came, in order, cut-through: its
first beat one cycle after it was taken, whatever its length, since nothing in the frame is rewritten and no frame
waits for a decision. The parser's item of a frame (emitted after its last beat, so the length checks are exact) is
looked up in the QP classifier (data key: destination address, BTH destination QPN); a RoCEv2 ``DATA`` frame whose
key hit becomes an event of ``pro-ooo`` for the stored QP index. QP timeouts come on their own stream ``tmo`` (QP
indices from the transport's timer) and share ``pro-ooo``'s input with the frames' events. Each ``pro-ooo`` result
with ``nack`` goes, through a 16-event FIFO, to ``pro-nak``, whose 62-byte RoCEv2 NAK frame leaves on its own
output ``m_axis_nak`` (towards the network: the shell merges it into its transmit direction).

**Why a separate NAK output** (choice; the issue asks for one and the datasheet explains it): the receive path
carries frames to the host, a NAK must leave towards the network; merged into ``m_axis`` it would reach the host,
which must not see it. A second stream also keeps the host path free of any frame-boundary merge (no data frame
ever waits for a NAK, and the latency stays one cycle).

Back-pressure: ``m_axis`` stalls only the frame path (through one skid register, so ``m_axis.tready`` does not reach
``s_axis.tready`` combinationally); ``m_axis_nak`` stalls ``pro-nak``, then fills the event FIFO, then stalls
``pro-ooo`` and the classifier, and once the parser's item pipeline is full, ``s_axis``: no NAK is ever dropped.
"""

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature, AxisBeat
from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.packet.parser import Parser
from lbpipe.hdl.packet.qp_classifier import QpClassifier
from lbpipe.hdl.pro.nak import NakEvent, NakGen
from lbpipe.hdl.pro.ooo import Ooo
from lbpipe.hdl.lib.stage import counter32, skid

__all__ = ["ProRxWire", "TimeoutItem", "TABLE_OOO_BASE", "TABLE_NAK_BASE", "N_STATS", "NAK_FIFO_DEPTH"]

#: Control tables: the classifier's at 0 to 3, pro-ooo's at 16 and 17 (create, destroy), pro-nak's at 32 to 35.
TABLE_OOO_BASE = 16
TABLE_NAK_BASE = 32

#: Counters: classifier (3), pro-ooo (7), pro-nak (built, missed, ignored commands), frames not given to the window.
N_STATS = 14

#: NACK events between pro-ooo and pro-nak (LUTRAM).
NAK_FIFO_DEPTH = 16


def _bits(n):
    return max(1, (n - 1).bit_length())


def TimeoutItem(*, n_qps=10240):
    """One QP timeout on ``tmo``: the QP index (as the classifier stores it)."""
    return data.StructLayout({"qp": _bits(n_qps)})


def _pipe(m, name, valid, payload, ready, sink):
    """``payload`` offered with ``valid`` to the stream ``sink`` through an output register and a skid register:
    ``sink`` sees flip-flops only (no multiplexer between this register and the consumer's logic), and ``ready`` is a
    flip-flop (high while the skid register is empty). One cycle of latency, one item per clock while ``sink`` takes
    them."""
    out_v, skid_v = Signal(name=f"{name}_valid"), Signal(name=f"{name}_skid_valid")
    out = Signal.like(payload, name=f"{name}_out", reset_less=True)
    keep = Signal.like(payload, name=f"{name}_skid", reset_less=True)
    m.d.comb += [ready.eq(~skid_v), sink.valid.eq(out_v), sink.payload.eq(out)]
    with m.If(~out_v | sink.ready):
        m.d.sync += [out_v.eq(skid_v | valid), out.eq(Mux(skid_v, keep, payload)), skid_v.eq(0)]
    with m.Elif(valid & ~skid_v):
        m.d.sync += [skid_v.eq(1), keep.eq(payload)]


class ProRxWire(wiring.Component):
    """Parser, QP classifier, out-of-order window and NAK frames in one component.

    Parameters
    ----------
    n_qps, bitmap_len
        pro-ooo's (:class:`lbpipe.hdl.pro.ooo.Ooo`); ``n_qps`` also sizes the classifier's index and pro-nak's
        contexts.
    buckets, ways, ipv6
        The QP classifier's (:class:`lbpipe.hdl.packet.qp_classifier.QpClassifier`).

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
        Frames from the network.
    m_axis : Out(AXI4StreamSignature(512, 1))
        The same frames, unchanged, towards the host.
    m_axis_nak : Out(AXI4StreamSignature(512, 1))
        NAK frames (one beat each) towards the network.
    tmo : In(stream.Signature(TimeoutItem(n_qps)))
        QP timeouts (Algorithm 2's QP_TIMEOUT event).
    ctl : In(ControlSignature())
        Tables 0 to 15 to the classifier, 16 to 31 to pro-ooo as ``table - 16``, 32 to 47 to pro-nak as
        ``table - 32``; others taken and ignored.
    stats : Out(32 * 14)
        Classifier (hits, misses, not looked up), pro-ooo (accepted, repeated, timeouts, NACKs, stale, beyond,
        unknown QP), pro-nak (frames built, NACKs missed, commands ignored), frames not given to the window.
    """

    def __init__(self, *, n_qps=10240, bitmap_len=32, buckets=4096, ways=4, ipv6=True):
        self._n = n_qps
        self._parser = Parser()
        self._classifier = QpClassifier(n_entries=n_qps, buckets=buckets, ways=ways, ipv6=ipv6)
        self._ooo = Ooo(n_qps=n_qps, bitmap_len=bitmap_len)
        self._nak = NakGen(n_qps=n_qps)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "m_axis_nak": Out(axis),
            "tmo": In(stream.Signature(TimeoutItem(n_qps=n_qps))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def latency(self):
        """Edges from the one that takes a frame's first beat to the one that hands it on at ``m_axis``,
        unthrottled, at every frame size: the parser's beat register (the skid passes an untaken beat at once)."""
        return 1

    @property
    def nak_latency(self):
        """Edges from the one that takes a frame's last beat to the one after which the NAK its event asks for is
        offered on ``m_axis_nak``, unthrottled and with nothing ahead: the parser's item, the register before the
        classifier, the classifier, the register before pro-ooo, pro-ooo, the event FIFO (2) and pro-nak."""
        return Parser.latency + 1 + QpClassifier.latency + 1 + Ooo.latency + 2 + NakGen.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self._parser
        m.submodules.classifier = classifier = self._classifier
        m.submodules.ooo = ooo = self._ooo
        m.submodules.events = events = StreamFIFO(shape=NakEvent(n_qps=self._n), depth=NAK_FIFO_DEPTH)
        m.submodules.nak = nak = self._nak
        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        self._frames(m, parser)
        self._classify(m, parser, classifier)
        passed = self._merge(m, classifier, ooo)
        self._nacks(m, ooo, events, nak)
        wiring.connect(m, nak.m_axis, wiring.flipped(self.m_axis_nak))
        m.d.comb += self.stats.eq(Cat(classifier.stats, ooo.stats, nak.stats[:64], nak.stats[96:128],
                                      counter32(m, "passed", passed)))
        self._control(m, classifier, ooo, nak)
        return m

    def _frames(self, m, parser):
        """The parser's beats to ``m_axis`` through one skid register (``m_axis.tready`` stops there)."""
        beat = Signal(AxisBeat(data_width=512, user_width=1))
        p = parser.m_axis
        m.d.comb += [beat.data.eq(p.tdata), beat.keep.eq(p.tkeep), beat.last.eq(p.tlast), beat.user.eq(p.tuser)]
        sink = SimpleNamespace(valid=self.m_axis.tvalid, ready=self.m_axis.tready,
                               payload=Signal(AxisBeat(data_width=512, user_width=1), name="beat_out"))
        skid(m, "beat", p.tvalid, beat, p.tready, sink)
        o = sink.payload
        m.d.comb += [self.m_axis.tdata.eq(o.data), self.m_axis.tkeep.eq(o.keep), self.m_axis.tlast.eq(o.last),
                     self.m_axis.tuser.eq(o.user)]

    def _classify(self, m, parser, classifier):
        """The parser's item to the classifier through an output and a skid register (the classifier's field hashes
        start from flip-flops)."""
        meta = parser.meta.payload
        item = Signal(classifier.i.payload.shape())
        m.d.comb += [getattr(item, name).eq(getattr(meta, name))
                     for name in ("kind", "ipv6", "src_ip", "dst_ip", "dqpn", "psn", "msn", "tag")]
        _pipe(m, "meta", parser.meta.valid, item, parser.meta.ready, classifier.i)

    def _merge(self, m, classifier, ooo):
        """Registered (skid) classifier result; a RoCEv2 DATA frame whose key hit becomes a pro-ooo event, every
        other result is dropped here (counted). Events and timeouts share pro-ooo's input through an output and a skid
        register:
        when both wait, they take turns (``tmo_first`` flips on every grant made while the other side waited).
        Returns the "not given to the window" count enable."""
        res_t = classifier.o.payload.shape()
        res = SimpleNamespace(valid=Signal(name="res_valid"), ready=Signal(name="res_ready"),
                              payload=Signal(res_t, name="res"))
        skid(m, "result", classifier.o.valid, classifier.o.payload, classifier.o.ready, res)
        r = res.payload
        sched = Signal()
        m.d.comb += sched.eq(r.qp_hit & (r.kind == PacketKind.DATA))
        ev_t = ooo.i.payload.shape()
        merged = SimpleNamespace(valid=Signal(name="ev_valid"), payload=Signal(ev_t, name="ev"),
                                 ready=Signal(name="ev_free"))
        item_v, tmo_v = Signal(name="item_wait"), Signal(name="tmo_wait")
        tmo_first = Signal(name="tmo_first")
        grant_t = Signal(name="grant_tmo")
        m.d.comb += [item_v.eq(res.valid & sched), tmo_v.eq(self.tmo.valid),
                     grant_t.eq(tmo_v & (~item_v | tmo_first))]
        ev = merged.payload
        with m.If(grant_t):
            m.d.comb += [ev.kind.eq(PacketKind.OTHER), ev.timeout.eq(1), ev.qp.eq(self.tmo.payload.qp)]
        with m.Else():
            m.d.comb += [ev.kind.eq(r.kind), ev.qp.eq(r.qp), ev.psn.eq(r.psn), ev.tag.eq(r.tag)]
        free = merged.ready
        m.d.comb += [
            merged.valid.eq(item_v | tmo_v),
            self.tmo.ready.eq(free & (~item_v | tmo_first)),
            res.ready.eq(~sched | (free & ~(tmo_v & tmo_first))),
        ]
        with m.If(free & item_v & tmo_v):
            m.d.sync += tmo_first.eq(~tmo_first)
        _pipe(m, "event", merged.valid, ev, merged.ready, ooo.i)
        return res.valid & ~sched

    def _nacks(self, m, ooo, events, nak):
        """pro-ooo's results with ``nack`` into the event FIFO (the others are dropped); the FIFO feeds pro-nak."""
        o = ooo.o.payload
        m.d.comb += [
            events.i.payload.qp.eq(o.qp), events.i.payload.nack.eq(1), events.i.payload.psn.eq(o.nack_psn),
            events.i.valid.eq(ooo.o.valid & o.nack),
            ooo.o.ready.eq(~o.nack | events.i.ready),
        ]
        wiring.connect(m, events.o, nak.i)

    def _control(self, m, classifier, ooo, nak):
        """Route a command by its table's high nibble (0 classifier, 1 pro-ooo, 2 pro-nak; others taken and
        dropped), registered with one valid flip-flop per block before it is offered (as pro-tx-wire's router:
        the classifier is handed a 2-bit table and a slot-wide index, commands it would ignore dropped here)."""
        c = self.ctl.payload
        cmd = Signal.like(c, reset_less=True)
        to = {n: Signal(name=f"ctl_to_{n}") for n in ("classifier", "ooo", "nak")}
        slots = classifier.ways * classifier.buckets
        ib = (slots - 1).bit_length()
        index_ok = Mux(c.table[:2] == 0, c.index < 5, Mux(c.table[:2] == 3, 1, c.index < slots))
        idle = ~Cat(*to.values()).any()
        m.d.comb += [
            self.ctl.ready.eq(idle),
            classifier.ctl.payload.data.eq(cmd.data), classifier.ctl.payload.table.eq(cmd.table[:2]),
            classifier.ctl.payload.index.eq(cmd.index[:ib]),
            ooo.ctl.payload.eq(cmd), ooo.ctl.payload.table.eq(cmd.table[:4]),
            nak.ctl.payload.eq(cmd), nak.ctl.payload.table.eq(cmd.table[:4]),
            classifier.ctl.valid.eq(to["classifier"]), ooo.ctl.valid.eq(to["ooo"]), nak.ctl.valid.eq(to["nak"]),
        ]
        with m.If(idle):
            m.d.sync += [cmd.eq(c),
                         to["classifier"].eq(self.ctl.valid & (c.table[2:] == 0) & index_ok),
                         to["ooo"].eq(self.ctl.valid & (c.table[4:] == TABLE_OOO_BASE >> 4)),
                         to["nak"].eq(self.ctl.valid & (c.table[4:] == TABLE_NAK_BASE >> 4))]
        for name, block in (("classifier", classifier), ("ooo", ooo), ("nak", nak)):
            with m.If(to[name] & block.ctl.ready):
                m.d.sync += to[name].eq(0)
