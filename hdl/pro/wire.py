"""PRO's sender as a bump in the wire: parser -> QP classifier -> orchestrated round robin -> deparser, on the
512-bit AXI4-Stream (PRO: sections III-A, V, Algorithm 1; issue 14, "Sender"; datasheet docs/pro_wire.md).

A RoCEv2 data frame of a known, active QP leaves with the low 12 bits of its UDP source port replaced by the PathID
the round robin chose (section V: low 6 bits ToR egress, high 6 bits Aggr egress), its ICRC updated incrementally
by the deparser; every other frame leaves bit for bit as it came, counted.

**QP index and destination ToR come from one QP-classifier lookup.** The classifier's data key of a frame is
(destination address, BTH destination QPN), which names one QP of the sending NIC whatever the QPNs are; the value
a slot stores is ``tor << qp_bits | qp``, so the same exact-match hit gives the QP index and its destination ToR.
A separate destination-subnet table would cost a second lookup (a prefix match or an assumed address plan); the
control plane knows the destination ToR when it installs the QP, so it writes both at once. The round robin still
checks that the QP joined that ToR: a stale or forged classifier entry is a counted miss, and the frame passes.

Only frames the parser calls RoCEv2 ``DATA`` whose key hits go to the round robin; every frame's deparser fields
wait in a side FIFO in frame order, and the action for a frame that skipped the round robin leaves as soon as it
reaches the FIFO's head (in order behind earlier frames).

Cut-through (``cut_through=True``, the default) and store-and-forward as in :mod:`lbpipe.hdl.themis.wire`: in
cut-through a chosen frame with a non-zero UDP checksum is left unchanged and counted.
"""

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.lib.stage import counter32, skid
from lbpipe.hdl.packet.deparser import Deparser
from lbpipe.hdl.packet.parser import Parser
from lbpipe.hdl.packet.qp_classifier import QpClassifier
from lbpipe.hdl.pro.rr import PATH_ID_BITS, RoundRobin, check_parameters as check_rr

__all__ = ["ProTxWire", "WireFields", "TABLE_RR_BASE", "N_STATS", "check_parameters"]

#: Control tables: the QP classifier's at 0 to 3, the round robin's at 16 to 19 (join, leave, seed, PathID).
TABLE_RR_BASE = 16

#: Counters: classifier (3), round robin (3), deparser (3), frames not given to the round robin, checksum declines.
N_STATS = 11


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_qps, n_tors, m_paths, batch, buckets, ways, ipv6, depth, cut_through):
    check_rr(n_qps=n_qps, n_tors=n_tors, m_paths=m_paths, batch=batch)
    if _bits(n_qps) + _bits(n_tors) > 24:
        raise ValueError(f"the classifier's value tor << {_bits(n_qps)} | qp must fit 24 bits: n_qps {n_qps} with "
                         f"n_tors {n_tors} does not")
    if not isinstance(cut_through, bool):
        raise TypeError(f"cut_through must be a bool, not {cut_through!r}")


def WireFields():
    """What the deparser needs from the parser's item, carried through the classifier (its ``user`` field) and
    beside the round robin: the frame is RoCEv2, UDP and ICRC offsets, UDP checksum zero, source port low bits."""
    return data.StructLayout({"roce": 1, "l4_off": 8, "icrc_off": 14, "csum_zero": 1, "sport_low": PATH_ID_BITS})


def SideFields():
    return data.StructLayout({"sched": 1, "f": WireFields()})


class ProTxWire(wiring.Component):
    """Parser, QP classifier, round robin and deparser in one component.

    Parameters
    ----------
    n_qps, n_tors, m_paths, batch
        The round robin's (:class:`lbpipe.hdl.pro.rr.RoundRobin`); ``bits(n_qps) + bits(n_tors)`` at most 24.
    buckets, ways, ipv6
        The QP classifier's (:class:`lbpipe.hdl.packet.qp_classifier.QpClassifier`).
    depth : int
        Deparser frame buffer, in beats.
    cut_through : bool
        Cut-through (default) or store-and-forward.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
    ctl : In(ControlSignature())
        Tables 0 to 15 to the classifier, 16 to 31 to the round robin as ``table - 16``; others taken and ignored.
    stats : Out(32 * 11)
        Classifier (hits, misses, not looked up), round robin (scheduled, missed, rejected commands), deparser (cut,
        refused, bad), frames not given to the round robin, chosen frames left unchanged for a non-zero checksum.
    """

    #: Side FIFO: covers the round robin's latency and output register with room for one item per clock.
    SIDE_DEPTH = 16

    def __init__(self, *, n_qps=10240, n_tors=16, m_paths=8, batch=1, buckets=4096, ways=4, ipv6=True,
                 depth=256, cut_through=True):
        check_parameters(n_qps=n_qps, n_tors=n_tors, m_paths=m_paths, batch=batch, buckets=buckets, ways=ways,
                         ipv6=ipv6, depth=depth, cut_through=cut_through)
        self._qb, self._tb = _bits(n_qps), _bits(n_tors)
        self._ct = cut_through
        self._parser = Parser(early=cut_through)
        self._classifier = QpClassifier(n_entries=1 << (self._qb + self._tb), buckets=buckets, ways=ways,
                                        ipv6=ipv6, user_bits=WireFields().size)
        self._rr = RoundRobin(n_qps=n_qps, n_tors=n_tors, m_paths=m_paths, batch=batch)
        self._deparser = Deparser(depth=depth, cut_through=cut_through)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def cut_through(self):
        return self._ct

    @property
    def latency(self):
        """Cut-through: edges from the one that takes a frame's first beat to the one that hands its first beat on,
        unthrottled, for a frame of two beats or more whose QP is scheduled: the second beat, the parser's item
        latency, the classifier, the round robin, the side join and the deparser's action-to-first-beat latency.
        Store-and-forward: the same from the frame's last beat."""
        return ((1 if self._ct else 0) + Parser.latency + QpClassifier.latency + RoundRobin.latency
                + Deparser.latency)

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self._parser
        m.submodules.classifier = classifier = self._classifier
        m.submodules.rr = rr = self._rr
        m.submodules.side = side = StreamFIFO(shape=SideFields(), depth=self.SIDE_DEPTH)
        m.submodules.deparser = deparser = self._deparser
        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        wiring.connect(m, parser.m_axis, deparser.s_axis)
        wiring.connect(m, deparser.m_axis, wiring.flipped(self.m_axis))
        self._classify(m, parser, classifier)
        unscheduled = self._fork(m, classifier, rr, side)
        declined = self._join(m, rr, side, deparser)
        m.d.comb += self.stats.eq(Cat(classifier.stats, rr.stats, deparser.stats,
                                      counter32(m, "unscheduled", unscheduled), counter32(m, "declined", declined)))
        self._control(m, classifier, rr)
        return m

    def _classify(self, m, parser, classifier):
        """The parser's item, with the deparser's fields in ``user``, to the classifier through a skid register."""
        meta = parser.meta.payload
        item = Signal(classifier.i.payload.shape())
        fields = Signal(WireFields())
        m.d.comb += [
            fields.roce.eq(meta.roce), fields.l4_off.eq(meta.l4_off), fields.icrc_off.eq(meta.icrc_off),
            fields.csum_zero.eq(meta.udp_csum == 0), fields.sport_low.eq(meta.udp_sport[:PATH_ID_BITS]),
            item.kind.eq(meta.kind), item.ipv6.eq(meta.ipv6), item.src_ip.eq(meta.src_ip),
            item.dst_ip.eq(meta.dst_ip), item.dqpn.eq(meta.dqpn), item.psn.eq(meta.psn), item.msn.eq(meta.msn),
            item.user.eq(fields), item.tag.eq(meta.tag),
        ]
        skid(m, "meta", parser.meta.valid, item, parser.meta.ready, classifier.i)

    def _fork(self, m, classifier, rr, side):
        """Registered (skid) classifier result; a frame goes to the round robin when it is a RoCEv2 data frame
        whose key hit (the QP index and ToR taken from the stored value), and its side fields into the FIFO.
        Returns the "not given to the round robin" count enable."""
        res_t = classifier.o.payload.shape()
        sink = SimpleNamespace(valid=Signal(name="res_valid"), ready=Signal(name="res_ready"),
                               payload=Signal(res_t, name="res"))
        res, res_valid, res_ready = sink.payload, sink.valid, sink.ready
        skid(m, "result", classifier.o.valid, classifier.o.payload, classifier.o.ready, sink)
        fields = Signal(WireFields())
        m.d.comb += fields.eq(res.user)
        sched = Signal()
        m.d.comb += sched.eq(res.qp_hit & (res.kind == PacketKind.DATA) & fields.roce)
        qb, tb = self._qb, self._tb
        m.d.comb += [
            rr.i.payload.kind.eq(res.kind), rr.i.payload.qp.eq(res.qp[:qb]),
            rr.i.payload.tor.eq(res.qp[qb:qb + tb]), rr.i.payload.tag.eq(res.tag),
            side.i.payload.sched.eq(sched), side.i.payload.f.eq(fields),
            rr.i.valid.eq(res_valid & sched & side.i.ready),
            side.i.valid.eq(res_valid & (~sched | rr.i.ready)),
            res_ready.eq(side.i.ready & (~sched | rr.i.ready)),
        ]
        return res_valid & res_ready & ~sched

    def _join(self, m, rr, side, deparser):
        """The side FIFO's head, with the round robin's result when it went there, into the deparser's action: the
        source port's low 12 bits become the PathID (XOR with the old low bits). Returns the decline count enable."""
        head, res = side.o.payload, rr.o.payload
        act = deparser.act.payload
        ready = side.o.valid & (~head.sched | rr.o.valid)
        xor = Signal(PATH_ID_BITS)
        m.d.comb += xor.eq(head.f.sport_low ^ res.path_id)
        wanted = head.sched & res.hit & head.f.roce & (xor != 0)
        declined = wanted & ~head.f.csum_zero if self._ct else 0
        m.d.comb += [
            act.tag.eq(0), act.drop.eq(0), act.rewrite.eq(wanted & ~declined),
            act.l4_off.eq(head.f.l4_off), act.icrc_off.eq(head.f.icrc_off), act.sport_xor.eq(xor),
            deparser.act.valid.eq(ready),
            side.o.ready.eq(deparser.act.ready & (~head.sched | rr.o.valid)),
            rr.o.ready.eq(deparser.act.ready & side.o.valid & head.sched),
        ]
        return ready & deparser.act.ready & declined

    def _control(self, m, classifier, rr):
        """Route a command by its table's high nibble (0: classifier, 1: round robin as ``table - 16``, others taken
        and dropped). It is registered with a valid flip-flop per block before it is offered, so ``ctl.ready`` and
        each block's ``ctl.valid`` are flip-flops (no logic between them and the blocks' command decisions)."""
        cmd = Signal.like(self.ctl.payload, reset_less=True)
        to_cls, to_rr = Signal(name="ctl_to_classifier"), Signal(name="ctl_to_rr")
        # The classifier ignores KEY words above 4, INSERT/DELETE slots out of range and tables 4 to 15: such a
        # command is dropped here instead, so the classifier sees a 2-bit table and a slot-wide index (the high
        # bits constant zero), which keeps its wide decode off its command path's logic depth.
        c = self.ctl.payload
        slots = self._classifier.ways * self._classifier.buckets
        ib = (slots - 1).bit_length()
        index_ok = Mux(c.table[:2] == 0, c.index < 5, Mux(c.table[:2] == 3, 1, c.index < slots))
        m.d.comb += [
            self.ctl.ready.eq(~to_cls & ~to_rr),
            classifier.ctl.payload.data.eq(cmd.data), classifier.ctl.payload.table.eq(cmd.table[:2]),
            classifier.ctl.payload.index.eq(cmd.index[:ib]),
            rr.ctl.payload.eq(cmd), rr.ctl.payload.table.eq(cmd.table[:4]),
            classifier.ctl.valid.eq(to_cls), rr.ctl.valid.eq(to_rr),
        ]
        with m.If(~to_cls & ~to_rr):
            m.d.sync += [cmd.eq(self.ctl.payload),
                         to_cls.eq(self.ctl.valid & (c.table[2:] == 0) & index_ok),
                         to_rr.eq(self.ctl.valid & (self.ctl.payload.table[4:] == TABLE_RR_BASE >> 4))]
        with m.If(to_cls & classifier.ctl.ready):
            m.d.sync += to_cls.eq(0)
        with m.If(to_rr & rr.ctl.ready):
            m.d.sync += to_rr.eq(0)
