"""FLB's receive side as a bump in the wire: CNM tap -> parser -> F0 -> flb-owd -> join -> clear, on the 512-bit
AXI4-Stream (FLB, paper 002, sections 3.1 and 3.2; datasheet docs/flb_rx_wire.md).

Frames from the fabric toward the hosts. A RoCEv2 frame marked by the source edge switch (BTH byte 4: bit 5 ``S``,
the UDP checksum holds a send stamp; bit 4 ``P``, the UDP checksum holds a queueing delay and bits 3..0 its path) is
measured by flb-owd (``S``: the measurement leaves on ``meas``) or handed on ``dly`` (``P``), and leaves with the
checksum and the marks cleared (both fields under the ICRC's mask: no CRC change). A CNM frame (EtherType 0x88B6)
addressed to this edge switch is handed on ``cnm`` and passes unchanged. Every other frame passes unchanged.

Pipeline::

    s_axis -> CNM tap (a frame's first beat: EtherType, CNM fields, checked) -> parser -> beat FIFO -> clear -> m_axis
                  \\-> tap FIFO -\\        \\-> F0 (marks, source edge, checks) -> fork -> flb-owd (samples) -\\
                                 \\-------------------------------------------> side FIFO ---------------> join
    join -> clear FIFO (one entry per frame), meas, dly and cnm FIFOs

**Clock**: ``now`` (``time_bits``) advances once every ``tick_cycles`` clocks (``ctl`` table 48: index 0 sets ``now``,
index 1 the cycles per tick, 0 stops it), read as flb-owd takes a sample.

Cut-through only: a frame's beats wait in the beat FIFO only until its entry reaches the clear stage.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.flb import wire as tx_wire
from lbpipe.hdl.flb.owd import Owd, check_parameters as check_owd
from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.stage import counter32, register_slice, tick_clock
from lbpipe.hdl.packet.marks import BEAT, edit_beats, field_lanes
from lbpipe.hdl.packet.parser import Parser

__all__ = ["FlbRxWire", "WireMeas", "N_STATS", "TABLE_CLOCK", "TABLE_EDGE", "CNM_ETHERTYPE", "check_parameters"]

#: Control tables: flb-owd's at 0 and 1, the clock at 48, this edge switch's number at 49.
TABLE_CLOCK, TABLE_EDGE = 48, 49
#: The CNM frame's EtherType (IEEE 802 local experimental 2) and version; its fields end at byte 24.
CNM_ETHERTYPE, CNM_VERSION, CNM_BYTES = 0x88B6, 1, 24
#: BTH byte 4: ``S`` (bit 5), ``P`` (bit 4); the UDP checksum and BTH byte 4 from the UDP header.
MARK_S, MARK_P, CSUM_OFFSET, BTH_BYTE4_OFFSET = 5, 4, 6, 12
#: Counters: samples, bases set, samples rejected (flb-owd's 0, 1, 4); piggybacks sent and refused; CNMs sent and
#: refused; frames marked both S and P.
N_STATS = 8


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_edges, n_paths, n_flows, n_ports, time_bits, delay_bits, edge_shift, edge, tick_cycles):
    check_owd(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
    for name, value in (("n_flows", n_flows), ("n_ports", n_ports), ("edge_shift", edge_shift), ("edge", edge),
                        ("tick_cycles", tick_cycles)):
        check_int(name, value)
    if n_edges > 256:
        raise ValueError(f"n_edges must be 1 to 256 in the wire, not {n_edges}")
    if time_bits > 16:
        raise ValueError(f"time_bits must be 4 to 16 (the stamp travels in the UDP checksum), not {time_bits}")
    if not 2 <= n_flows <= 65536 or n_flows & (n_flows - 1):
        raise ValueError(f"n_flows must be a power of two from 2 to 65,536 (the CNM's 16-bit flow), not {n_flows}")
    if not 1 <= n_ports <= 256:
        raise ValueError(f"n_ports must be 1 to 256 (the CNM's 8-bit cp), not {n_ports}")
    if not 0 <= edge_shift <= 32 - _bits(n_edges):
        raise ValueError(f"edge_shift must be 0 to {32 - _bits(n_edges)} (the edge's {_bits(n_edges)} bits inside a "
                         f"32-bit address), not {edge_shift}")
    if not 0 <= edge < 1 << 16:
        raise ValueError(f"edge must be 0 to 65535, not {edge}")
    if not 0 <= tick_cycles < 1 << 16:
        raise ValueError(f"tick_cycles must be 0 to 65535, not {tick_cycles}")


def WireMeas(*, n_edges=16, n_paths=8, delay_bits=16):
    """One measurement on ``meas``: the queueing delay of (``edge``, ``path``) a sample gave, in ticks
    (flb-tx-wire's ``meas``)."""
    return tx_wire.WireMeas(n_dests=n_edges, n_paths=n_paths, delay_bits=delay_bits)


def WireDly(*, n_edges=16, n_paths=8, delay_bits=16):
    """One piggybacked delay on ``dly`` (flb-tx-wire's ``dly``)."""
    return tx_wire.WireDelay(n_dests=n_edges, n_paths=n_paths, delay_bits=delay_bits)


def WireCnm(*, n_flows=65536, n_edges=16, n_ports=8):
    """One CNM on ``cnm`` (flb-tx-wire's ``cnm``)."""
    return tx_wire.WireCnm(n_flows=n_flows, n_dests=n_edges, n_ports=n_ports)


def _Tap(n_flows, n_edges, n_ports):
    """A frame's first beat, as the tap sees it: a CNM frame's EtherType, its fields checked but the length."""
    return data.StructLayout({"is_cnm": 1, "ok": 1, "cnm": WireCnm(n_flows=n_flows, n_edges=n_edges,
                                                                      n_ports=n_ports)})


def _Clear():
    """One per frame, in frame order: clear the marks, and the frame's L4 offset (the checksum and BTH byte 4 are
    at fixed offsets from it)."""
    return data.StructLayout({"apply": 1, "l4_off": 8})



class FlbRxWire(wiring.Component):
    """CNM tap, parser, flb-owd and the clear stage in one component.

    Parameters
    ----------
    n_edges, n_paths, time_bits, delay_bits
        flb-owd's (:class:`lbpipe.hdl.flb.owd.Owd`); ``n_edges`` at most 256, ``time_bits`` at most 16.
    n_flows : int
        The CNM's flow range (a power of two; flb-tx-wire's ``n_flows``).
    n_ports : int
        Congestion points per edge (the CNM's ``cp`` range).
    edge_shift : int
        Lowest bit of the source edge switch in the source address.
    edge : int
        This edge switch's number after reset (CNM frames addressed to it are taken).
    tick_cycles : int
        Clocks per tick of ``now`` after reset (0: stopped).

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
    meas : Out(stream.Signature(WireMeas(...)))
        Every sample flb-owd accepted: its (edge, path) and queueing delay.
    dly : Out(stream.Signature(WireDly(...)))
        Every piggybacked delay in range (flb-tx-wire's ``dly``).
    cnm : Out(stream.Signature(WireCnm(...)))
        Every CNM frame for this edge switch (flb-tx-wire's ``cnm``).
    ctl : In(ControlSignature())
    stats : Out(32 * 8)
    """

    #: Beat FIFO (a frame's beats until its clear entry comes); side FIFO (F0 to the join); tap, clear and output
    #: FIFOs.
    BEAT_DEPTH, SIDE_DEPTH, TAP_DEPTH, OUT_DEPTH = 32, 16, 16, 16

    def __init__(self, *, n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16,
                 edge_shift=8, edge=0, tick_cycles=64):
        check_parameters(n_edges=n_edges, n_paths=n_paths, n_flows=n_flows, n_ports=n_ports, time_bits=time_bits,
                         delay_bits=delay_bits, edge_shift=edge_shift, edge=edge, tick_cycles=tick_cycles)
        self._ne, self._n, self._nf, self._np = n_edges, n_paths, n_flows, n_ports
        self._tb, self._db, self._shift, self._edge, self._tick = time_bits, delay_bits, edge_shift, edge, tick_cycles
        self._eb, self._pb = _bits(n_edges), _bits(n_paths)
        self._parser = Parser(early=True)
        self._owd = Owd(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "meas": Out(stream.Signature(WireMeas(n_edges=n_edges, n_paths=n_paths, delay_bits=delay_bits))),
            "dly": Out(stream.Signature(WireDly(n_edges=n_edges, n_paths=n_paths, delay_bits=delay_bits))),
            "cnm": Out(stream.Signature(WireCnm(n_flows=n_flows, n_edges=n_edges, n_ports=n_ports))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def latency(self):
        """Edges from the one that takes a frame's first beat to the one that hands it on, unthrottled, for a
        frame of two beats or more: the second beat, the parser, F0, the join's entry through the clear FIFO (two)
        and the clear stage's slice; a sample adds flb-owd's input slice and flb-owd."""
        return 1 + Parser.latency + 1 + 1 + self._owd.latency + 2 + 1

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self._parser
        m.submodules.owd = owd = self._owd
        m.submodules.taps = taps = StreamFIFO(shape=_Tap(self._nf, self._ne, self._np), depth=self.TAP_DEPTH)
        m.submodules.beats = beats = StreamFIFO(shape=BEAT, depth=self.BEAT_DEPTH)
        m.submodules.clears = clears = StreamFIFO(shape=_Clear(), depth=self.OUT_DEPTH)
        m.submodules.side = side = StreamFIFO(shape=self._side_layout(), depth=self.SIDE_DEPTH)
        outs = {}
        for name in ("meas", "dly", "cnm"):
            m.submodules[f"{name}_fifo"] = outs[name] = StreamFIFO(shape=getattr(self, name).payload.shape(),
                                                                   depth=self.OUT_DEPTH)
            wiring.connect(m, outs[name].o, wiring.flipped(getattr(self, name)))
        now, own_edge = self._clock(m)
        self._tap(m, parser, taps, own_edge)
        self._beats_in(m, parser, beats)
        counts = self._classify(m, parser, taps, owd, side, now)
        self._join(m, owd, side, clears, outs)
        self._clear(m, beats, clears)
        self._control(m, owd)
        m.d.comb += self.stats.eq(Cat(owd.stats[0:64], owd.stats[128:160],
                                      *[counter32(m, name, inc) for name, inc in counts]))
        return m

    def _side_layout(self):
        return data.StructLayout({
            "sample": 1, "pb": 1, "to_cnm": 1, "clear": _Clear(),
            "dly": WireDly(n_edges=self._ne, n_paths=self._n, delay_bits=self._db),
            "cnm": WireCnm(n_flows=self._nf, n_edges=self._ne, n_ports=self._np),
        })

    def _clock(self, m):
        """``now`` (flb-owd's clock) and this edge switch's number (table 49)."""
        self._clock_cmd = tick_clock(m, "now", self._tb, self._tick)
        self._own_edge = Signal(16, init=self._edge, name="own_edge")
        return self._clock_cmd[0], self._own_edge

    def _tap(self, m, parser, taps, own_edge):
        """On a frame's first beat: its EtherType and CNM fields into the tap FIFO, checked (version, ``to`` this
        edge, ``from``, ``cp`` and ``n`` in range); the length is F0's. The first beat waits for room."""
        src = self.s_axis
        first = Signal(init=1, name="tap_first")
        d = src.tdata

        def be(at, size):
            return Cat(*[d[8 * (at + size - 1 - k):8 * (at + size - k)] for k in range(size)])

        t = taps.i.payload
        frm, cp, n = be(18, 2), be(22, 1), be(23, 1)
        m.d.comb += [
            t.is_cnm.eq(be(12, 2) == CNM_ETHERTYPE),
            t.ok.eq((be(14, 1) == CNM_VERSION) & (be(16, 2) == own_edge) & (frm < self._ne) & (cp < self._np)
                    & (n <= 15)),
            t.cnm.flow.eq(be(20, 2)), t.cnm.dest.eq(frm), t.cnm.cp.eq(cp), t.cnm.n.eq(n), t.cnm.cong.eq(d[8 * 15]),
        ]
        go = Signal(name="tap_go")
        m.d.comb += [
            go.eq(~first | taps.i.ready),
            taps.i.valid.eq(src.tvalid & first & parser.s_axis.tready),
            parser.s_axis.tdata.eq(d), parser.s_axis.tkeep.eq(src.tkeep), parser.s_axis.tlast.eq(src.tlast),
            parser.s_axis.tuser.eq(src.tuser), parser.s_axis.tvalid.eq(src.tvalid & go),
            src.tready.eq(parser.s_axis.tready & go),
        ]
        with m.If(src.tvalid & src.tready):
            m.d.sync += first.eq(src.tlast)

    def _beats_in(self, m, parser, beats):
        """The parser's beats into the beat FIFO."""
        p = parser.m_axis
        m.d.comb += [
            beats.i.payload.tdata.eq(p.tdata), beats.i.payload.tkeep.eq(p.tkeep),
            beats.i.payload.tlast.eq(p.tlast), beats.i.payload.tuser.eq(p.tuser),
            beats.i.valid.eq(p.tvalid), p.tready.eq(beats.i.ready),
        ]

    def _classify(self, m, parser, taps, owd, side, now):
        """F0 registers the parser's item with its tap entry: the marks, the source edge, the checks; then a fork:
        a sample to flb-owd (through a register slice) and every frame's fields into the side FIFO, in the same
        clock. Returns the counters' ``(name, enable)`` pairs."""
        meta, tap = parser.meta.payload, taps.o.payload
        eb, pb = self._eb, self._pb
        f0 = Signal(self._side_layout(), name="f0_item")
        v0 = Signal(name="f0_valid")
        owd_lay = data.StructLayout({"edge": eb, "path": pb, "stamp": self._tb, "kind": meta.kind.shape()})
        s0 = Signal(owd_lay, name="f0_sample")
        bad_pb, bad_cnm, both = Signal(name="f0_bad_pb"), Signal(name="f0_bad_cnm"), Signal(name="f0_both")
        pkt = stream.Signature(owd.i.payload.shape()).create()
        pkt_ready = Signal(name="owd_in_ready")
        register_slice(m, "owd_in", pkt.valid, pkt.payload, pkt_ready, owd.i)
        # ``now`` as flb-owd takes the sample
        m.d.comb += owd.i.payload.now.eq(now)
        take = Signal(name="f0_take")
        m.d.comb += [
            pkt.payload.kind.eq(s0.kind), pkt.payload.sampled.eq(1), pkt.payload.edge.eq(s0.edge),
            pkt.payload.path.eq(s0.path), pkt.payload.stamp.eq(s0.stamp),
            pkt.valid.eq(v0 & f0.sample & side.i.ready),
            side.i.payload.eq(f0), side.i.valid.eq(v0 & (~f0.sample | pkt_ready)),
            take.eq(v0 & side.i.ready & (~f0.sample | pkt_ready)),
        ]
        adv = Signal(name="f0_adv")
        here = parser.meta.valid & taps.o.valid
        m.d.comb += [adv.eq(~v0 | take), parser.meta.ready.eq(adv & taps.o.valid), taps.o.ready.eq(adv & here)]
        resv = meta.bth_resv
        s, p = meta.roce & resv[MARK_S], meta.roce & resv[MARK_P]
        edge = meta.src_ip[self._shift:self._shift + eb]
        pb_path = resv[:4]
        pb_ok = (edge < self._ne) & (pb_path < self._n)
        dmax = (1 << self._db) - 1
        cnm = tap.is_cnm & (meta.frame_len >= 14)
        cnm_ok = tap.ok & (meta.frame_len >= CNM_BYTES)
        with m.If(adv):
            m.d.sync += [
                v0.eq(here),
                f0.sample.eq(s & ~p), f0.pb.eq(p & ~s & pb_ok), f0.to_cnm.eq(cnm & cnm_ok),
                f0.clear.apply.eq(s | p),
                f0.clear.l4_off.eq(meta.l4_off),
                f0.dly.dest.eq(edge), f0.dly.path.eq(pb_path),
                f0.dly.delay.eq(Mux(meta.udp_csum > dmax, dmax, meta.udp_csum)),
                f0.cnm.eq(tap.cnm),
                s0.edge.eq(edge), s0.path.eq(meta.udp_sport[:pb]), s0.stamp.eq(meta.udp_csum), s0.kind.eq(meta.kind),
                bad_pb.eq(p & ~s & ~pb_ok), bad_cnm.eq(cnm & ~cnm_ok), both.eq(s & p),
            ]
        counted = take
        return [("pb_sent", counted & f0.pb), ("pb_refused", counted & bad_pb), ("cnm_sent", counted & f0.to_cnm),
                ("cnm_refused", counted & bad_cnm), ("marked_both", counted & both)]

    def _join(self, m, owd, side, clears, outs):
        """The side FIFO's head, with flb-owd's result for a sample, into the clear FIFO (every frame) and the
        ``meas``, ``dly`` and ``cnm`` FIFOs (when the frame gives one); it moves when every FIFO it writes has
        room."""
        head, res = side.o.payload, owd.o.payload
        meas = head.sample & res.ok
        here = side.o.valid & (~head.sample | owd.o.valid)
        room = (clears.i.ready & (~meas | outs["meas"].i.ready) & (~head.pb | outs["dly"].i.ready)
                & (~head.to_cnm | outs["cnm"].i.ready))
        take = Signal(name="join_take")
        m.d.comb += [
            take.eq(here & room),
            side.o.ready.eq(take), owd.o.ready.eq(take & head.sample),
            clears.i.payload.eq(head.clear), clears.i.valid.eq(here & room),
            outs["meas"].i.payload.edge.eq(res.edge), outs["meas"].i.payload.path.eq(res.path),
            outs["meas"].i.payload.delay.eq(res.qdelay), outs["meas"].i.valid.eq(take & meas),
            outs["dly"].i.payload.eq(head.dly), outs["dly"].i.valid.eq(take & head.pb),
            outs["cnm"].i.payload.eq(head.cnm), outs["cnm"].i.valid.eq(take & head.to_cnm),
        ]

    def _clear(self, m, beats, clears):
        """The beat FIFO's head through the clear stage to ``m_axis``: in a marked frame, the UDP checksum's two bytes
        become 0 and BTH byte 4's bits 5..0 (FECN, BECN kept). A frame's first beat waits for its clear entry."""

        def edit(index, entry, tdata):
            lanes = [tdata[8 * j:8 * j + 8] for j in range(64)]
            for j, selects in field_lanes(index, entry.l4_off, CSUM_OFFSET, 2).items():
                lanes[j] = Mux(entry.apply & Cat(*[s for s, _ in selects]).any(), 0, lanes[j])
            for j, selects in field_lanes(index, entry.l4_off, BTH_BYTE4_OFFSET).items():
                on = entry.apply & Cat(*[s for s, _ in selects]).any()
                lanes[j] = Cat(Mux(on, 0, lanes[j][:6]), lanes[j][6:])
            return Cat(*lanes)
        edit_beats(m, "clear", beats.o.valid, beats.o.payload, beats.o.ready, clears.o, edit, self.m_axis)

    def _control(self, m, owd):
        """Tables 0 and 1 to flb-owd; 48 the clock; 49 this edge switch's number. A command is registered before
        it is offered (``ctl.ready`` a flip-flop); other tables are taken and ignored."""
        clock_now, period, pre = self._clock_cmd
        c = self.ctl.payload
        cmd = Signal.like(c, reset_less=True)
        to_owd = Signal(name="ctl_to_owd")
        m.d.comb += [self.ctl.ready.eq(~to_owd), owd.ctl.payload.eq(cmd), owd.ctl.valid.eq(to_owd)]
        with m.If(~to_owd):
            m.d.sync += [cmd.eq(c), to_owd.eq(self.ctl.valid & (c.table <= 1))]
            with m.If(self.ctl.valid & (c.table == TABLE_CLOCK) & (c.index == 0)):
                m.d.sync += clock_now.eq(c.data)
            with m.If(self.ctl.valid & (c.table == TABLE_CLOCK) & (c.index == 1)):
                m.d.sync += [period.eq(c.data), pre.eq(0)]
            with m.If(self.ctl.valid & (c.table == TABLE_EDGE) & (c.index == 0)):
                m.d.sync += self._own_edge.eq(c.data)
        with m.If(to_owd & owd.ctl.ready):
            m.d.sync += to_owd.eq(0)
