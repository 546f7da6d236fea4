"""FLB's receive side as a bump in the wire: CNM tap -> parser -> F0 -> flb-owd -> join -> clear, on the 512-bit
AXI4-Stream (FLB, paper 002, sections 3.1 and 3.2; datasheet docs/flb_rx_wire.md).

Frames from the fabric toward the hosts. A RoCEv2 frame marked by the source edge switch (BTH byte 4: bit 5 ``S``,
the UDP checksum holds a send stamp; bit 4 ``P``, the UDP checksum holds a queueing delay and bits 3..0 its path) is
measured by flb-owd (``S``: the measurement leaves on ``meas``) or handed on ``dly`` (``P``), and leaves with the
checksum and the marks cleared (both fields under the ICRC's mask: no CRC change). A CNM frame (EtherType 0x88B6)
addressed to this edge switch is handed on ``cnm`` and passes unchanged. Every other frame passes unchanged.

The destination side's CNMs (section 3.2): every RoCEv2 frame is an enqueue on its egress port (``flb-cnm``), every
item on ``deq`` a dequeue; a CNM they cause is addressed with its flow's previous hop (``flb-prevhop``, which every
enqueue records) and leaves as a CNM frame on ``m_cnm``.

Pipeline::

    s_axis -> CNM tap (a frame's first beat: EtherType, CNM fields, checked) -> parser -> beat FIFO -> clear -> m_axis
                  \\-> tap FIFO -\\        \\-> F0 (marks, source edge, checks) -> fork -> flb-owd (samples) -\\
                                 \\-------------------------------------------> side FIFO ---------------> join
    join -> clear FIFO (one entry per frame), meas, dly and cnm FIFOs, enqueue FIFO
    enqueue FIFO, deq -> round robin -> flb-cnm -> split (record, lookup) -> flb-prevhop -> CNM frame -> m_cnm

**Clock**: ``now`` (``time_bits``) advances once every ``tick_cycles`` clocks (``ctl`` table 48: index 0 sets ``now``,
index 1 the cycles per tick, 0 stops it), read as flb-owd takes a sample.

Cut-through only: a frame's beats wait in the beat FIFO only until its entry reaches the clear stage.
"""

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.flb import wire as tx_wire
from lbpipe.hdl.flb.cnm import Cnm, check_parameters as check_cnm
from lbpipe.hdl.flb.owd import Owd, check_parameters as check_owd
from lbpipe.hdl.flb.prevhop import PrevHop, check_parameters as check_prevhop
from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.stage import counter32, register_slice, tick_clock
from lbpipe.hdl.packet.marks import BEAT, edit_beats, field_lanes
from lbpipe.hdl.packet.parser import Parser

__all__ = ["FlbRxWire", "WireMeas", "WireDeq", "N_STATS", "TABLE_CLOCK", "TABLE_EDGE", "TABLE_THRESHOLD",
           "TABLE_MAC", "CNM_ETHERTYPE", "check_parameters"]

#: Control tables: flb-owd's at 0 and 1, the clock at 48, this edge switch's number at 49, flb-cnm's K at 50,
#: flb-prevhop's MAC (this switch's) at 51.
TABLE_CLOCK, TABLE_EDGE, TABLE_THRESHOLD, TABLE_MAC = 48, 49, 50, 51
#: The CNM frame's EtherType (IEEE 802 local experimental 2) and version; its fields end at byte 24; one sent is
#: 60 bytes.
CNM_ETHERTYPE, CNM_VERSION, CNM_BYTES, CNM_FRAME_BYTES = 0x88B6, 1, 24, 60
#: An enqueue's amount: the frame's 64-byte cells, saturated to 8 bits.
CELL_SHIFT, AMOUNT_BITS = 6, 8
#: BTH byte 4: ``S`` (bit 5), ``P`` (bit 4); the UDP checksum and BTH byte 4 from the UDP header.
MARK_S, MARK_P, CSUM_OFFSET, BTH_BYTE4_OFFSET = 5, 4, 6, 12
#: Counters: samples, bases set, samples rejected (flb-owd's 0, 1, 4); piggybacks sent and refused; CNMs sent and
#: refused; frames marked both S and P; flb-cnm's five; flb-prevhop's hits (CNM frames sent), misses, aged misses
#: and rejected records.
N_STATS = 17


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_edges, n_paths, n_flows, n_ports, time_bits, delay_bits, edge_shift, edge, tick_cycles,
                     n_slots=4, q_bits=16, threshold=512, port_shift=0, hop_timeout=4096):
    check_owd(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
    for name, value in (("n_flows", n_flows), ("n_ports", n_ports), ("edge_shift", edge_shift), ("edge", edge),
                        ("tick_cycles", tick_cycles), ("q_bits", q_bits), ("port_shift", port_shift),
                        ("hop_timeout", hop_timeout)):
        check_int(name, value)
    if n_edges > 256:
        raise ValueError(f"n_edges must be 1 to 256 in the wire, not {n_edges}")
    if time_bits > 16:
        raise ValueError(f"time_bits must be 4 to 16 (the stamp travels in the UDP checksum), not {time_bits}")
    if not 2 <= n_flows <= 65536 or n_flows & (n_flows - 1):
        raise ValueError(f"n_flows must be a power of two from 2 to 65,536 (the CNM's 16-bit flow), not {n_flows}")
    if not 1 <= n_ports <= 32:
        raise ValueError(f"n_ports must be 1 to 32 (flb-cnm's egress ports), not {n_ports}")
    if not AMOUNT_BITS <= q_bits <= 32:
        raise ValueError(f"q_bits must be {AMOUNT_BITS} to 32, not {q_bits}")
    check_cnm(n_ports=n_ports, n_slots=n_slots, n_edges=n_edges, flow_bits=_bits(n_flows), amount_bits=AMOUNT_BITS,
              q_bits=q_bits, threshold=threshold)
    if not 1 <= hop_timeout < 1 << time_bits:
        raise ValueError(f"hop_timeout must be 1 to 2**time_bits - 1 = {(1 << time_bits) - 1} (time_bits "
                         f"{time_bits}), not {hop_timeout}")
    check_prevhop(n_flows=n_flows, time_bits=time_bits, timeout=hop_timeout)
    if not 0 <= port_shift <= 32 - _bits(n_ports):
        raise ValueError(f"port_shift must be 0 to {32 - _bits(n_ports)} (the port's {_bits(n_ports)} bits inside a "
                         f"32-bit address), not {port_shift}")
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


def WireDeq(*, n_ports=8):
    """One dequeue on ``deq``: ``amount`` cells left egress port ``port``."""
    return data.StructLayout({"port": _bits(n_ports), "amount": AMOUNT_BITS})


def _Tap(n_flows, n_edges, n_ports):
    """A frame's first beat, as the tap sees it: a CNM frame's EtherType, its fields checked but the length; the
    Ethernet source (the previous hop), first octet most significant."""
    return data.StructLayout({"is_cnm": 1, "ok": 1, "cnm": WireCnm(n_flows=n_flows, n_edges=n_edges,
                                                                      n_ports=n_ports), "mac": 48})


def _Enqueue(n_flows, n_edges, n_ports):
    """A RoCEv2 frame's enqueue: its egress port, its length from its headers (``l4_off + udp_len``, cells made
    after the join), its flow, source edge and Ethernet source."""
    return data.StructLayout({"port": _bits(n_ports), "length": 17, "flow": _bits(n_flows), "src": _bits(n_edges),
                              "mac": 48})


def _Clear():
    """One per frame, in frame order: clear the marks, and the frame's L4 offset (the checksum and BTH byte 4 are
    at fixed offsets from it)."""
    return data.StructLayout({"apply": 1, "l4_off": 8})


class FlbRxWire(wiring.Component):
    """CNM tap, parser, flb-owd and the clear stage, and the notification (flb-cnm, flb-prevhop, the CNM frames), in
    one component.

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
    n_slots, q_bits, threshold
        flb-cnm's (:class:`lbpipe.hdl.flb.cnm.Cnm`): congested flows per port, the estimate's width, K in cells.
    port_shift : int
        Lowest bit of the egress port in the destination address.
    hop_timeout : int
        flb-prevhop's ``timeout`` in ticks of ``now``.

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
    deq : In(stream.Signature(WireDeq(...)))
        The switch's dequeues, in cells per egress port.
    m_cnm : Out(AXI4StreamSignature(512, 1))
        The CNM frames this edge switch sends (one beat each).
    ctl : In(ControlSignature())
    stats : Out(32 * 17)
    """

    #: Beat FIFO (a frame's beats until its clear entry comes); side FIFO (F0 to the join); tap, clear and output
    #: FIFOs; the enqueue FIFO (the join to flb-cnm), and the FIFOs beside flb-cnm (each enqueue's MAC) and
    #: flb-prevhop (each lookup's CNM fields).
    BEAT_DEPTH, SIDE_DEPTH, TAP_DEPTH, OUT_DEPTH, ENQ_DEPTH, BESIDE_DEPTH = 32, 16, 16, 16, 16, 16

    def __init__(self, *, n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16,
                 edge_shift=8, edge=0, tick_cycles=64, n_slots=4, q_bits=16, threshold=512, port_shift=0,
                 hop_timeout=4096):
        check_parameters(n_edges=n_edges, n_paths=n_paths, n_flows=n_flows, n_ports=n_ports, time_bits=time_bits,
                         delay_bits=delay_bits, edge_shift=edge_shift, edge=edge, tick_cycles=tick_cycles,
                         n_slots=n_slots, q_bits=q_bits, threshold=threshold, port_shift=port_shift,
                         hop_timeout=hop_timeout)
        self._ne, self._n, self._nf, self._np = n_edges, n_paths, n_flows, n_ports
        self._tb, self._db, self._shift, self._edge, self._tick = time_bits, delay_bits, edge_shift, edge, tick_cycles
        self._eb, self._pb = _bits(n_edges), _bits(n_paths)
        self._port_shift, self._portb = port_shift, _bits(n_ports)
        self._parser = Parser(early=True)
        self._owd = Owd(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
        self._notify = Cnm(n_ports=n_ports, n_slots=n_slots, n_edges=n_edges, flow_bits=_bits(n_flows),
                           amount_bits=AMOUNT_BITS, q_bits=q_bits, threshold=threshold)
        self._hops = PrevHop(n_flows=n_flows, time_bits=time_bits, timeout=hop_timeout)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "meas": Out(stream.Signature(WireMeas(n_edges=n_edges, n_paths=n_paths, delay_bits=delay_bits))),
            "dly": Out(stream.Signature(WireDly(n_edges=n_edges, n_paths=n_paths, delay_bits=delay_bits))),
            "cnm": Out(stream.Signature(WireCnm(n_flows=n_flows, n_edges=n_edges, n_ports=n_ports))),
            "deq": In(stream.Signature(WireDeq(n_ports=n_ports))),
            "m_cnm": Out(axis),
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
        m.submodules.notify = notify = self._notify
        m.submodules.hops = hops = self._hops
        m.submodules.enqs = enqs = StreamFIFO(shape=_Enqueue(self._nf, self._ne, self._np), depth=self.ENQ_DEPTH)
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
        self._join(m, owd, side, clears, outs, enqs)
        self._clear(m, beats, clears)
        self._events(m, enqs, notify)
        self._split(m, notify, hops, now)
        self._cnm_frames(m, hops, own_edge)
        self._control(m, owd, notify, hops)
        m.d.comb += self.stats.eq(Cat(owd.stats[0:64], owd.stats[128:160],
                                      *[counter32(m, name, inc) for name, inc in counts],
                                      notify.stats, hops.stats[64:192]))
        return m

    def _side_layout(self):
        return data.StructLayout({
            "sample": 1, "pb": 1, "to_cnm": 1, "enq": 1, "clear": _Clear(),
            "ev": _Enqueue(self._nf, self._ne, self._np),
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
            t.mac.eq(be(6, 6)),
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
                f0.enq.eq(meta.roce),
                f0.ev.port.eq(meta.dst_ip[self._port_shift:self._port_shift + self._portb] if self._np > 1 else 0),
                f0.ev.length.eq(meta.l4_off + meta.udp_len), f0.ev.flow.eq(meta.flow_hash[:_bits(self._nf)]),
                f0.ev.src.eq(edge), f0.ev.mac.eq(tap.mac),
                s0.edge.eq(edge), s0.path.eq(meta.udp_sport[:pb]), s0.stamp.eq(meta.udp_csum), s0.kind.eq(meta.kind),
                bad_pb.eq(p & ~s & ~pb_ok), bad_cnm.eq(cnm & ~cnm_ok), both.eq(s & p),
            ]
        counted = take
        return [("pb_sent", counted & f0.pb), ("pb_refused", counted & bad_pb), ("cnm_sent", counted & f0.to_cnm),
                ("cnm_refused", counted & bad_cnm), ("marked_both", counted & both)]

    def _join(self, m, owd, side, clears, outs, enqs):
        """The side FIFO's head, with flb-owd's result for a sample, into the clear FIFO (every frame), the
        ``meas``, ``dly`` and ``cnm`` FIFOs (when the frame gives one) and the enqueue FIFO (a RoCEv2 frame); it
        moves when every FIFO it writes has room."""
        head, res = side.o.payload, owd.o.payload
        meas = head.sample & res.ok
        here = side.o.valid & (~head.sample | owd.o.valid)
        room = (clears.i.ready & (~meas | outs["meas"].i.ready) & (~head.pb | outs["dly"].i.ready)
                & (~head.to_cnm | outs["cnm"].i.ready) & (~head.enq | enqs.i.ready))
        take = Signal(name="join_take")
        m.d.comb += [
            take.eq(here & room),
            side.o.ready.eq(take), owd.o.ready.eq(take & head.sample),
            clears.i.payload.eq(head.clear), clears.i.valid.eq(here & room),
            outs["meas"].i.payload.edge.eq(res.edge), outs["meas"].i.payload.path.eq(res.path),
            outs["meas"].i.payload.delay.eq(res.qdelay), outs["meas"].i.valid.eq(take & meas),
            outs["dly"].i.payload.eq(head.dly), outs["dly"].i.valid.eq(take & head.pb),
            outs["cnm"].i.payload.eq(head.cnm), outs["cnm"].i.valid.eq(take & head.to_cnm),
            enqs.i.payload.eq(head.ev), enqs.i.valid.eq(take & head.enq),
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

    def _events(self, m, enqs, notify):
        """E0: the enqueue FIFO's head (its length made into cells) or an item of ``deq``, alternating when both
        wait, through a register slice into flb-cnm; each enqueue taken puts its MAC into the MAC FIFO beside
        flb-cnm (an enqueue waits while that FIFO is full)."""
        m.submodules.macs = macs = StreamFIFO(shape=48, depth=self.BESIDE_DEPTH)
        self._macs = macs
        head, deq = enqs.o.payload, self.deq
        hi, part = head.length[CELL_SHIFT:], head.length[:CELL_SHIFT].any()
        top = (1 << AMOUNT_BITS) - 1
        cells = Mux(hi[AMOUNT_BITS:].any() | hi[:AMOUNT_BITS].all(), top, hi[:AMOUNT_BITS] + part)
        item = Signal(notify.i.payload.shape(), name="e0_item")
        valid, ready, last_deq = Signal(name="e0_valid"), Signal(name="e0_ready"), Signal(name="e0_last_deq")
        enq = Signal(name="e0_enq")
        pick_deq = Signal(name="e0_pick_deq")
        m.d.comb += [
            enq.eq(enqs.o.valid & macs.i.ready),
            pick_deq.eq(deq.valid & (~enq | ~last_deq)),
            valid.eq(enq | deq.valid),
            item.deq.eq(pick_deq),
            item.port.eq(Mux(pick_deq, deq.payload.port, head.port)),
            item.amount.eq(Mux(pick_deq, deq.payload.amount, cells)),
            item.flow.eq(head.flow), item.src.eq(head.src),
            deq.ready.eq(ready & (~enq | ~last_deq)),          # not from deq.valid: no port-to-port path
            enqs.o.ready.eq(ready & ~pick_deq & macs.i.ready),
            macs.i.payload.eq(head.mac), macs.i.valid.eq(ready & ~pick_deq & enq),
        ]
        with m.If(valid & ready):
            m.d.sync += last_deq.eq(pick_deq)
        register_slice(m, "e0", valid, item, ready, notify.i)

    def _fields_layout(self):
        """What a CNM frame needs of flb-cnm's result, kept beside flb-prevhop's lookup."""
        return data.StructLayout({"cong": 1, "to": self._eb, "cp": self._portb,
                                  "n": self._notify.o.payload.shape()["cnm_n"].shape})

    def _split(self, m, notify, hops, now):
        """H0: each flb-cnm result (through a register slice, so that flb-cnm's ``o.ready`` is a flip-flop: its
        stages move on it) becomes flb-prevhop's items, in order: an enqueue's record (its flow, the MAC beside it,
        ``now``), then the result's CNM's lookup (``cnm_flow``), whose CNM fields go into the fields FIFO beside
        flb-prevhop; a result needing neither is dropped. Through a register slice."""
        res = stream.Signature(notify.o.payload.shape()).create()
        register_slice(m, "c0", notify.o.valid, notify.o.payload, notify.o.ready, res)
        r, macs = res.payload, self._macs
        m.submodules.fields = fields = StreamFIFO(shape=self._fields_layout(), depth=self.BESIDE_DEPTH)
        self._fields = fields
        item = Signal(hops.i.payload.shape(), name="h0_item")
        valid, ready = Signal(name="h0_valid"), Signal(name="h0_ready")
        done = Signal(name="h0_recorded")        # this result's record went, its lookup waits
        record, lookup = Signal(name="h0_record"), Signal(name="h0_lookup")
        take = Signal(name="h0_take")
        f = fields.i.payload
        m.d.comb += [
            record.eq(~r.deq & ~done), lookup.eq(r.cnm),
            item.cnm.eq(~record), item.flow.eq(Mux(record, r.flow, r.cnm_flow)), item.mac.eq(macs.o.payload),
            item.now.eq(now),
            valid.eq(res.valid & Mux(record, macs.o.valid, lookup & fields.i.ready)),
            take.eq(valid & ready),
            macs.o.ready.eq(take & record),
            f.cong.eq(r.cnm_cong), f.to.eq(r.cnm_src), f.cp.eq(r.cnm_cp), f.n.eq(r.cnm_n),
            fields.i.valid.eq(take & ~record),
            res.ready.eq((~record & ~lookup) | (take & ~(record & lookup))),
        ]
        with m.If(take & record & lookup):
            m.d.sync += done.eq(1)
        with m.Elif(take & ~record):
            m.d.sync += done.eq(0)
        register_slice(m, "h0", valid, item, ready, hops.i)

    def _cnm_frames(self, m, hops, own_edge):
        """F: a lookup's hit with its CNM fields becomes a CNM frame (the datasheet's table), through a register
        slice to ``m_cnm``; a record's result and a miss are dropped (the misses counted by flb-prevhop)."""
        res, fields = hops.o.payload, self._fields
        f = fields.o.payload
        lay = data.StructLayout({"dst": 48, "src": 48, "cong": 1, "to": self._eb, "frm": 16,
                                 "flow": _bits(self._nf), "cp": self._portb, "n": f.n.shape()})
        frame = Signal(lay, name="f_frame")
        beat = stream.Signature(lay).create()
        ready = Signal(name="f_ready")
        send = hops.o.valid & res.cnm & fields.o.valid
        m.d.comb += [
            frame.dst.eq(res.dst_mac), frame.src.eq(res.src_mac), frame.cong.eq(f.cong), frame.to.eq(f.to),
            frame.frm.eq(own_edge), frame.flow.eq(res.flow), frame.cp.eq(f.cp), frame.n.eq(f.n),
            hops.o.ready.eq(~res.cnm | (fields.o.valid & (~res.hit | ready))),
            fields.o.ready.eq(send & (~res.hit | ready)),
        ]
        register_slice(m, "f", send & res.hit, frame, ready, beat)
        b = beat.payload
        lanes = [C(0, 8)] * 64

        def put(at, value, size):
            """``value`` big-endian (zero-extended) in bytes ``at`` .. ``at + size - 1``."""
            wide = Cat(value, C(0, 8 * size))
            for k in range(size):
                lanes[at + k] = wide[8 * (size - 1 - k):8 * (size - k)]
        for at, value, size in ((0, b.dst, 6), (6, b.src, 6), (12, C(CNM_ETHERTYPE, 16), 2), (14, C(CNM_VERSION, 8), 1),
                                (15, b.cong, 1), (16, b.to, 2), (18, b.frm, 2), (20, b.flow, 2), (22, b.cp, 1),
                                (23, b.n, 1)):
            put(at, value, size)
        o = self.m_cnm
        m.d.comb += [o.tdata.eq(Cat(*lanes)), o.tkeep.eq((1 << CNM_FRAME_BYTES) - 1), o.tlast.eq(1), o.tuser.eq(0),
                     o.tvalid.eq(beat.valid), beat.ready.eq(o.tready)]

    def _control(self, m, owd, notify, hops):
        """Tables 0 and 1 to flb-owd, 50 to flb-cnm (its table 0, K), 51 to flb-prevhop (its table 0, the MAC);
        48 the clock; 49 this edge switch's number. A command is registered before it is offered (``ctl.ready`` a
        flip-flop); other tables are taken and ignored."""
        clock_now, period, pre = self._clock_cmd
        c = self.ctl.payload
        cmd = Signal.like(c, reset_less=True)
        to = {name: Signal(name=f"ctl_to_{name}") for name in ("owd", "cnm", "hop")}
        subs = {"owd": owd, "cnm": notify, "hop": hops}
        m.d.comb += self.ctl.ready.eq(~Cat(*to.values()).any())
        for name, sub in subs.items():
            m.d.comb += [sub.ctl.payload.eq(cmd), sub.ctl.valid.eq(to[name])]
            with m.If(to[name] & sub.ctl.ready):
                m.d.sync += to[name].eq(0)
        m.d.comb += [notify.ctl.payload.table.eq(0), hops.ctl.payload.table.eq(0)]
        with m.If(self.ctl.ready):
            m.d.sync += [cmd.eq(c), to["owd"].eq(self.ctl.valid & (c.table <= 1)),
                         to["cnm"].eq(self.ctl.valid & (c.table == TABLE_THRESHOLD) & (c.index == 0)),
                         to["hop"].eq(self.ctl.valid & (c.table == TABLE_MAC) & (c.index == 0))]
            with m.If(self.ctl.valid & (c.table == TABLE_CLOCK) & (c.index == 0)):
                m.d.sync += clock_now.eq(c.data)
            with m.If(self.ctl.valid & (c.table == TABLE_CLOCK) & (c.index == 1)):
                m.d.sync += [period.eq(c.data), pre.eq(0)]
            with m.If(self.ctl.valid & (c.table == TABLE_EDGE) & (c.index == 0)):
                m.d.sync += self._own_edge.eq(c.data)
