"""Themis-S as a bump in the wire: parser -> Themis-S -> deparser on the 512-bit AXI4-Stream.

Frames enter on ``s_axis`` and leave on ``m_axis``; RoCEv2 data frames leave with their UDP source port moved to
the path Themis-S chose (``mode="sport"``, the paper's multi-tier case), the ICRC and a non-zero UDP checksum
updated; every other frame leaves bit for bit as it came. Themis-S's PathMap is written through ``ctl`` (the top
level puts it behind AXI4-Lite).

The parser's item for a frame goes to Themis-S; the fields the deparser needs from the parser (``roce``,
``l4_off``, ``icrc_off``) wait beside Themis-S in a small FIFO, since Themis-S returns exactly one item per item in
order; the deparser's action joins the two. The deparser buffers each frame until its action arrives
(store-and-forward, as the parser's pairing contract requires).

The two-tier case (``mode="port"``: Themis-S picks the egress port) needs the switch's forwarding interface, which a
NIC shell does not have; it is left to the switch integration.
"""

from amaranth import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .axis import AXI4StreamSignature
from .control import ControlSignature
from .deparser import Deparser
from .fifo import StreamFIFO
from .parser import Parser
from .themis_s import ThemisS

__all__ = ["ThemisSWire", "SideFields"]


def SideFields():
    """What the deparser needs from the parser's item, carried beside Themis-S."""
    return data.StructLayout({"roce": 1, "l4_off": 8, "icrc_off": 14})


class ThemisSWire(wiring.Component):
    """Parser, Themis-S (``mode="sport"``) and deparser in one component.

    Parameters
    ----------
    n_paths : int
        N for Themis-S, 1 to 256.
    depth : int
        Deparser frame buffer, in beats.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
    ctl : In(ControlSignature())
        Themis-S's PathMap (table 0), as in docs/themis.md.
    stats : Out(64)
        Themis-S's counters (sprayed, passed).
    """

    #: The side FIFO covers Themis-S's pipeline (4 stages and its output register) with room to spare.
    SIDE_DEPTH = 8

    def __init__(self, *, n_paths=256, depth=256):
        self._n_paths = n_paths
        self._depth = depth
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "ctl": In(ControlSignature()),
            "stats": Out(64),
        })

    @property
    def latency(self):
        """Cycles from a frame's last beat in to its first beat out, unthrottled: the parser's item latency, Themis-S,
        the join, and the deparser's action latency (see the datasheet for the measured figure)."""
        return Parser.latency + ThemisS.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = Parser()
        m.submodules.themis = themis = ThemisS(n_paths=self._n_paths, mode="sport", hash_bits=16)
        m.submodules.side = side = StreamFIFO(shape=SideFields(), depth=self.SIDE_DEPTH)
        m.submodules.deparser = deparser = Deparser(depth=self._depth)

        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        wiring.connect(m, parser.m_axis, deparser.s_axis)
        wiring.connect(m, deparser.m_axis, wiring.flipped(self.m_axis))
        wiring.connect(m, wiring.flipped(self.ctl), themis.ctl)
        m.d.comb += self.stats.eq(themis.stats)

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
            themis.i.valid.eq(parser.meta.valid & side.i.ready),
            side.i.valid.eq(parser.meta.valid & themis.i.ready),
            parser.meta.ready.eq(themis.i.ready & side.i.ready),
        ]

        # Join Themis-S's result with the side fields into the deparser's action.
        result, fields = themis.o.payload, side.o.payload
        act = deparser.act.payload
        both = themis.o.valid & side.o.valid
        m.d.comb += [
            act.tag.eq(result.tag),
            act.drop.eq(0),
            act.rewrite.eq(fields.roce & result.sprayed & (result.udp_sport_xor != 0)),
            act.l4_off.eq(fields.l4_off),
            act.icrc_off.eq(fields.icrc_off),
            act.sport_xor.eq(result.udp_sport_xor),
            deparser.act.valid.eq(both),
            themis.o.ready.eq(deparser.act.ready & side.o.valid),
            side.o.ready.eq(deparser.act.ready & themis.o.valid),
        ]
        return m
