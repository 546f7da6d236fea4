"""Themis-S as a bump in the wire: parser -> Themis-S -> deparser on the 512-bit AXI4-Stream.

Frames enter on ``s_axis`` and leave on ``m_axis``; RoCEv2 data frames leave with their UDP source port moved to
the path Themis-S chose (``mode="sport"``, the paper's multi-tier case), the ICRC and a non-zero UDP checksum
updated; every other frame leaves bit for bit as it came. Themis-S's PathMap is written through ``ctl`` (the top
level puts it behind AXI4-Lite).

The parser's item for a frame goes to Themis-S; the fields the deparser needs from the parser (``roce``,
``l4_off``, ``icrc_off``) wait beside Themis-S in a small FIFO, since Themis-S returns exactly one item per item in
order; the deparser's action joins the two.

**Cut-through** (``cut_through=True``, the default): the parser emits its item once the header window is complete
(``Parser(early=True)``), after the frame's second beat, and the deparser takes the action as soon as it comes and
sends the frame as it arrives (``Deparser(cut_through=True)``): the first beat leaves a constant number of cycles
after it came in, whatever the frame's length (docs/themis.md, themis-s-wire). Themis-S decides on the headers; a
frame whose real end contradicts them is found at ``tlast``, after Themis-S's state has advanced: if it was being
rewritten it leaves bad (``tuser`` bit 0 on its last beat, so the MAC aborts it), otherwise unchanged, and it is
counted. A frame with a non-zero UDP checksum is not rewritten (its update needs the ICRC, which comes after the
header has left): it leaves unchanged and is counted. With ``cut_through=False`` the pipeline is store-and-forward
(the parser's late items, the deparser's tail FIFO): every frame waits for its last beat, and non-zero checksums
are updated. ``fcs=True`` serves a shell whose MAC keeps the FCS: the parser leaves the last 4 bytes out, the
deparser leaves the FCS valid (docs/packet_io.md).

The two-tier case (``mode="port"``: Themis-S picks the egress port) needs the switch's forwarding interface, which a
NIC shell does not have; it is left to the switch integration.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.packet.compensator import N_COUNTERS, Compensator
from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.packet.deparser import Deparser
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.stage import skid
from lbpipe.hdl.packet.parser import Parser
from lbpipe.hdl.packet.qp_classifier import QpClassifier
from lbpipe.hdl.themis.themis_d import N_STATS as N_THEMIS_D_STATS, ThemisD, ThemisDVerdict
from lbpipe.hdl.themis.themis_s import ThemisS

__all__ = ["ThemisSWire", "ThemisDWire", "SideFields", "TABLE_THEMIS_D_BASE"]


def SideFields():
    """What the deparser needs from the parser's item, carried beside Themis-S."""
    return data.StructLayout({"roce": 1, "l4_off": 8, "icrc_off": 14, "csum_zero": 1})


class ThemisSWire(wiring.Component):
    """Parser, Themis-S (``mode="sport"``) and deparser in one component.

    Parameters
    ----------
    n_paths : int
        N for Themis-S, 1 to 256.
    depth : int
        Deparser frame buffer, in beats.
    cut_through : bool
        Cut-through (default) or store-and-forward (see the module docstring).
    fcs : bool
        Frames carry their 4-byte FCS (a MAC that keeps it): the parser reads them without it, the deparser checks
        that a rewritten frame holds the ICRC and 4 bytes after it (else it leaves bad) and leaves the FCS as it is,
        which the port and ICRC changes keep valid; a non-zero UDP checksum is declined as in cut-through (its
        change would need the FCS updated). False by default.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
        ``tuser`` bit 0 set on the last beat of a frame sent bad (cut-through only).
    ctl : In(ControlSignature())
        Themis-S's PathMap (table 0), as in docs/themis.md.
    stats : Out(192)
        Six 32-bit counters: Themis-S's (sprayed, passed), the deparser's (frames cut for being longer than
        ``depth`` beats, refused rewrites, frames sent bad), and sprayed RoCEv2 frames left unchanged for their
        non-zero UDP checksum (cut-through or ``fcs`` only).
    """

    #: The side FIFO covers Themis-S's pipeline (4 stages and its output register) with room to spare.
    SIDE_DEPTH = 8

    def __init__(self, *, n_paths=256, depth=256, cut_through=True, fcs=False):
        if not isinstance(cut_through, bool):
            raise TypeError(f"cut_through must be a bool, not {cut_through!r}")
        if not isinstance(fcs, bool):
            raise TypeError(f"fcs must be a bool, not {fcs!r}")
        self._fcs = fcs
        self._n_paths = n_paths
        self._depth = depth
        self._cut_through = cut_through
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "ctl": In(ControlSignature()),
            "stats": Out(192),
        })

    @property
    def cut_through(self):
        return self._cut_through

    @property
    def latency(self):
        """Cut-through: edges from the one that takes a frame's first beat to the one that hands its first beat on,
        unthrottled, for every frame of two beats or more (one less for a one-beat frame): the second beat, the
        parser's item latency, Themis-S, and the deparser's latency from action to first beat. Store-and-forward: the
        same counted from the frame's last beat (measured by ``lbpipe bench``; docs/themis.md)."""
        return (1 if self._cut_through else 0) + Parser.latency + ThemisS.latency + Deparser.latency

    def elaborate(self, platform):
        m = Module()
        ct = self._cut_through
        m.submodules.parser = parser = Parser(early=ct, fcs=self._fcs)
        m.submodules.themis = themis = ThemisS(n_paths=self._n_paths, mode="sport", hash_bits=16)
        m.submodules.side = side = StreamFIFO(shape=SideFields(), depth=self.SIDE_DEPTH)
        m.submodules.deparser = deparser = Deparser(depth=self._depth, cut_through=ct, fcs=self._fcs)

        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        wiring.connect(m, parser.m_axis, deparser.s_axis)
        wiring.connect(m, deparser.m_axis, wiring.flipped(self.m_axis))
        wiring.connect(m, wiring.flipped(self.ctl), themis.ctl)
        csum_declined = Signal(32)
        m.d.comb += self.stats.eq(Cat(themis.stats, deparser.stats, csum_declined))

        # Fork the parser's item to Themis-S and the side FIFO: an item moves when both can take it.
        meta = parser.meta.payload
        m.d.comb += [
            themis.i.payload.kind.eq(meta.kind),
            themis.i.payload.psn.eq(meta.psn),
            themis.i.payload.flow_hash.eq(meta.flow_hash),
            themis.i.payload.udp_sport.eq(meta.udp_sport),
            themis.i.payload.tag.eq(meta.tag),
            side.i.payload.roce.eq(meta.roce),
            side.i.payload.l4_off.eq(meta.l4_off),
            side.i.payload.icrc_off.eq(meta.icrc_off),
            side.i.payload.csum_zero.eq(meta.udp_csum == 0),
            themis.i.valid.eq(parser.meta.valid & side.i.ready),
            side.i.valid.eq(parser.meta.valid & themis.i.ready),
            parser.meta.ready.eq(themis.i.ready & side.i.ready),
        ]

        # Join Themis-S's result with the side fields into the deparser's action.
        result, fields = themis.o.payload, side.o.payload
        act = deparser.act.payload
        both = themis.o.valid & side.o.valid
        wanted = fields.roce & result.sprayed & (result.udp_sport_xor != 0)
        # Cut-through cannot update a non-zero UDP checksum (the old ICRC comes last), nor can a deparser that leaves
        # the FCS as it is: such a frame is declined.
        declined = wanted & ~fields.csum_zero if (ct or self._fcs) else 0
        with m.If(both & deparser.act.ready & declined):
            m.d.sync += csum_declined.eq(csum_declined + 1)
        m.d.comb += [
            act.tag.eq(result.tag),
            act.drop.eq(0),
            act.rewrite.eq(wanted & ~declined),
            act.l4_off.eq(fields.l4_off),
            act.icrc_off.eq(fields.icrc_off),
            act.sport_xor.eq(result.udp_sport_xor),
            deparser.act.valid.eq(both),
            themis.o.ready.eq(deparser.act.ready & side.o.valid),
            side.o.ready.eq(deparser.act.ready & themis.o.valid),
        ]
        return m


#: Control tables of :class:`ThemisDWire`: the QP classifier's at 0 to 3, Themis-D's at 16 and 17.
TABLE_THEMIS_D_BASE = 16


class ThemisDWire(wiring.Component):
    """Parser, QP classifier, Themis-D and compensator in one component: Themis-D as a bump in the wire.

    Frames from both directions of the destination ToR's NIC port share ``s_axis``: data towards the NIC and the
    NIC's ACKs and NACKs (as they share Themis-D's input). The parser's item goes to the QP classifier, whose result
    goes to Themis-D; Themis-D's decision becomes the compensator's action, which drops blocked NACKs, records the
    NACK that armed compensation, and sends it again after the data frame that raises ``comp``
    (:mod:`lbpipe.hdl.packet.compensator`). Every other frame leaves bit for bit as it came, in order.

    Parameters
    ----------
    n_qps, queue_depth, n_paths, entry_bits
        Themis-D's (:class:`lbpipe.hdl.themis.themis_d.ThemisD`); ``n_qps`` also sizes the classifier's index and the
        compensator's templates.
    buckets, ways, ipv6
        The QP classifier's (:class:`lbpipe.hdl.packet.qp_classifier.QpClassifier`).
    depth : int
        The compensator's frame buffer, in beats; a longer frame leaves cut to ``depth`` beats, counted in the
        compensator's last counter.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
    ctl : In(ControlSignature())
        Tables 0 to 15 go to the QP classifier (0 KEY, 1 INSERT, 2 DELETE, 3 CLEAR), tables 16 to 31 to Themis-D as
        table ``t - 16`` (16 QP set-up, 17 QP tear-down); other tables are ignored. Each command is registered
        before it reaches its block (``ctl.ready`` is a flip-flop): one command every two cycles at most.
    stats : Out(32 * 18)
        The classifier's 3 counters, Themis-D's 8 per-verdict counters, the compensator's 6, then Themis-D's
        out-of-range NACKs (its counter 8, last so that the earlier registers keep their numbers).
    """

    def __init__(self, *, n_qps=1600, queue_depth=100, n_paths=256, entry_bits=9, buckets=4096, ways=4,
                 ipv6=True, depth=256):
        # The parts are built here so that bad parameters raise at construction, as for every block.
        self._parser = Parser()
        self._classifier = QpClassifier(n_entries=n_qps, buckets=buckets, ways=ways, ipv6=ipv6)
        self._themis = ThemisD(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)
        self._comp = Compensator(n_qps=n_qps, depth=depth)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * (3 + N_THEMIS_D_STATS + N_COUNTERS)),
        })

    @property
    def latency(self):
        """Cycles from the edge that takes a frame's last beat to the one after which its first beat is offered,
        unthrottled, for a frame behind no NACK scan and no other frame: the parser's item latency, the classifier,
        Themis-D, the compensator's action FIFO (one register) and its ``m_axis`` register."""
        return Parser.latency + QpClassifier.latency + ThemisD.latency + 1 + Compensator.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self._parser
        m.submodules.classifier = classifier = self._classifier
        m.submodules.themis = themis = self._themis
        m.submodules.comp = comp = self._comp

        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        wiring.connect(m, parser.m_axis, comp.s_axis)
        wiring.connect(m, comp.m_axis, wiring.flipped(self.m_axis))
        per_verdict = 32 * len(ThemisDVerdict)
        m.d.comb += self.stats.eq(Cat(classifier.stats, themis.stats[:per_verdict], comp.stats,
                                      themis.stats[per_verdict:]))

        # Skid registers on both item hand-overs (``_skid``): the parser's and the classifier's output ready are
        # flip-flops, so a stall (a NACK scan in Themis-D, its skid buffer, a command entering either block) does
        # not ripple back through the classifier's and the parser's pipeline enables to s_axis.tready in one cycle.
        meta = parser.meta.payload
        item = Signal(classifier.i.payload.shape())
        m.d.comb += [
            item.kind.eq(meta.kind), item.ipv6.eq(meta.ipv6), item.src_ip.eq(meta.src_ip),
            item.dst_ip.eq(meta.dst_ip), item.dqpn.eq(meta.dqpn), item.psn.eq(meta.psn), item.msn.eq(meta.msn),
            item.tag.eq(meta.tag),
        ]
        skid(m, "meta", parser.meta.valid, item, parser.meta.ready, classifier.i)
        res = classifier.o.payload
        titem = Signal(themis.i.payload.shape())
        m.d.comb += [getattr(titem, name).eq(getattr(res, name))
                     for name in ("kind", "qp_hit", "qp", "psn", "msn", "tag")]
        skid(m, "result", classifier.o.valid, titem, classifier.o.ready, themis.i)
        dec, action = themis.o.payload, comp.act.payload
        m.d.comb += [
            action.tag.eq(dec.tag), action.drop.eq(dec.drop), action.record.eq(dec.arm), action.comp.eq(dec.comp),
            action.qp.eq(dec.qp),
            comp.act.valid.eq(themis.o.valid), themis.o.ready.eq(comp.act.ready),
        ]

        # Control: route by table number; a command for no block is taken and ignored.
        # The high nibble of the table number picks the block, the low nibble is the block's table.
        # Each command is registered with its route before it is offered (``ctl.ready`` is a flip-flop, and no
        # port reaches the blocks' ready decisions, hence ``s_axis.tready``, through a combinational path): one
        # command every two cycles at most, one cycle later than offered.
        cmd = Signal.like(self.ctl.payload, reset_less=True)
        cmd_valid = Signal()
        to_classifier = Signal(reset_less=True)
        to_themis = Signal(reset_less=True)
        taken = Signal()
        m.d.comb += [
            self.ctl.ready.eq(~cmd_valid),
            classifier.ctl.payload.eq(cmd),
            themis.ctl.payload.eq(cmd),
            themis.ctl.payload.table.eq(cmd.table[:4]),
            classifier.ctl.valid.eq(cmd_valid & to_classifier),
            themis.ctl.valid.eq(cmd_valid & to_themis),
            taken.eq(Mux(to_classifier, classifier.ctl.ready, Mux(to_themis, themis.ctl.ready, 1))),
        ]
        with m.If(~cmd_valid):
            m.d.sync += [
                cmd_valid.eq(self.ctl.valid), cmd.eq(self.ctl.payload),
                to_classifier.eq(self.ctl.payload.table[4:] == 0),
                to_themis.eq(self.ctl.payload.table[4:] == TABLE_THEMIS_D_BASE >> 4),
            ]
        with m.Elif(taken):
            m.d.sync += cmd_valid.eq(0)
        return m
