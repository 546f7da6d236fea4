"""FLB's source edge switch as a bump in the wire: parser -> flb-isolate -> mask filter -> flb-route -> deparser, on
the 512-bit AXI4-Stream (FLB, paper 002, sections 3.1, 3.2 and 3.4, Algorithm 1; datasheet docs/flb_tx_wire.md).

A RoCEv2 frame with a zero UDP checksum is FLB traffic. Its flow is the parser's flow hash (CRC-16 of the addresses
and the destination QP) cut to ``log2 n_flows`` bits; its destination edge switch is ``n_dests``' bits of the
destination address from bit ``dest_shift`` (an addressing plan that numbers racks in the address: 10.0.<rack>.<host>
with the default 8). It leaves with the low ``log2 n_paths`` bits of its UDP source port set to its path (the edge
switch's uplink choice reads them, as PRO's PathID does), its ICRC updated by the deparser: the isolation path
flb-isolate gives an isolated flow, else flb-route's Algorithm 1 choice. Every other frame leaves bit for bit as it
came, counted; an FLB frame whose destination is out of range too.

**Mask filter**: flb-isolate reports, with each packet, its destination's isolated-path set after the packet;
flb-route must see that set before it decides. The wire keeps the last set it gave flb-route per destination (a small
memory, swept at reset: flb-route keeps its sets across a reset, flb-isolate does not, so after a reset every
destination's first packet sends its set) and sends an update on flb-route's ``upd`` stream, in the packet's own
clock, only when the set changed. Delays (``dly``, the piggybacked measurements of section 3.1) share that stream
in every other clock.

**Clock**: ``now`` (``time_bits``) advances once every ``tick_cycles`` clocks (``ctl`` table 48: index 0 sets ``now``,
index 1 the cycles per tick, 0 stops it), read when a frame's item enters the wire's first stage and when a CNM
enters.

**CNMs** reach flb-isolate on ``cnm`` (``now`` from the wire's clock), or through ``ctl`` table 49, which lets a trace
carry them. Delays reach flb-route on ``dly``, or through ``ctl`` table 0 (flb-route's own table 0).

**Marks** (docs/flb_rx_wire.md's format; section 3.1): a routed FLB frame leaves with BTH byte 4 bits 5..0 and the
UDP checksum (both under the ICRC's mask) set by the sampler, a three-stage pipeline beside the deparser (M0 to M2):
a sample (``S``, the frame's ``now`` as its stamp) when its (destination, path) has not been sampled since reset or
``sample period`` ticks have passed since its last sample (``ctl`` table 48 index 2; 0: never); else the newest
measurement waiting for its destination (``P``, path and delay: from ``meas``, flb-rx-wire's output, or ``ctl``
table 50); else both cleared. The mark stage after the deparser writes them.

Cut-through only: a frame leaves as it arrives once its action is resolved (the deparser's cut-through mode).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.flb.isolate import N_STATS as N_ISOLATE_STATS, Isolate, check_parameters as check_isolate
from lbpipe.hdl.flb.route import Route, check_parameters as check_route
from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.lib.stage import counter32, register_slice, tick_clock
from lbpipe.hdl.packet.deparser import Deparser
from lbpipe.hdl.packet.marks import edit_axis, field_lanes
from lbpipe.hdl.packet.parser import Parser

__all__ = ["FlbTxWire", "WireCnm", "WireDelay", "WireMeas", "N_STATS", "TABLE_DELAY", "TABLE_CLOCK", "TABLE_CNM",
           "TABLE_MEAS", "check_parameters"]

#: Control tables: flb-route's delays at 0, the clock (and the sampling period) at 48, a CNM at 49, a measurement
#: to piggyback at 50.
TABLE_DELAY, TABLE_CLOCK, TABLE_CNM, TABLE_MEAS = 0, 48, 49, 50
#: Counters: flb-isolate (8), deparser (3), frames not FLB, FLB frames with no route, set updates sent, samples
#: stamped, measurements piggybacked.
N_STATS = N_ISOLATE_STATS + 3 + 5
#: BTH byte 4's marks (``S``, ``P``) and the offsets of the UDP checksum and BTH byte 4 from the UDP header.
MARK_S, MARK_P, CSUM_OFFSET, BTH_BYTE4_OFFSET = 0x20, 0x10, 6, 12


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_flows, n_dests, n_paths, n_slots, n_ports, time_bits, delay_bits, timeout, release,
                     margin, dest_shift, tick_cycles, depth, sample_ticks):
    check_route(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits,
                timeout=timeout, margin=margin)
    check_isolate(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, n_slots=n_slots, time_bits=time_bits,
                  timeout=release, n_ports=n_ports)
    for name, value in (("dest_shift", dest_shift), ("tick_cycles", tick_cycles), ("depth", depth),
                        ("sample_ticks", sample_ticks)):
        check_int(name, value)
    if not 0 <= sample_ticks < min(1 << 16, 1 << time_bits):
        raise ValueError(f"sample_ticks must be 0 to {min(1 << 16, 1 << time_bits) - 1} (16 bits, and below the "
                         f"clock's wrap: a longer period never passes), not {sample_ticks}")
    if n_flows & (n_flows - 1):
        raise ValueError(f"n_flows must be a power of two (the flow hash's low bits), not {n_flows}")
    if n_dests > 256:
        raise ValueError(f"n_dests must be 1 to 256 in the wire (the mask filter's memory), not {n_dests}")
    if not 0 <= dest_shift <= 32 - _bits(n_dests):
        raise ValueError(f"dest_shift must be 0 to {32 - _bits(n_dests)} (the destination's {_bits(n_dests)} bits "
                         f"inside a 32-bit address), not {dest_shift}")
    if not 0 <= tick_cycles < 1 << 16:
        raise ValueError(f"tick_cycles must be 0 to 65535, not {tick_cycles}")


def WireCnm(*, n_flows=65536, n_dests=16, n_ports=8):
    """One CNM on ``cnm``: flb-isolate's CNM without ``now`` (the wire's clock stamps it)."""
    return data.StructLayout({"flow": _bits(n_flows), "dest": _bits(n_dests), "cp": _bits(n_ports), "n": 4,
                              "cong": 1})


def WireDelay(*, n_dests=16, n_paths=8, delay_bits=16):
    """One piggybacked delay on ``dly``: the queueing delay of (``dest``, ``path``), in ticks."""
    return data.StructLayout({"dest": _bits(n_dests), "path": _bits(n_paths), "delay": delay_bits})


def WireMeas(*, n_dests=16, n_paths=8, delay_bits=16):
    """One measurement on ``meas`` (flb-rx-wire's ``meas``): the queueing delay of (``edge``, ``path``) to carry
    back to ``edge``, at most 16 bits (the checksum field)."""
    return data.StructLayout({"edge": _bits(n_dests), "path": _bits(n_paths), "delay": min(delay_bits, 16)})


def _Mark():
    """One per frame, in frame order: write BTH byte 4 bits 5..0 and the UDP checksum (at fixed offsets from the
    frame's L4 offset)."""
    return data.StructLayout({"apply": 1, "l4_off": 8, "bits": 6, "value": 16})


def WireFields(n_paths):
    """What the deparser needs from the parser's item: FLB traffic, UDP and ICRC offsets, the port's low bits."""
    return data.StructLayout({"flb": 1, "l4_off": 8, "icrc_off": 14, "sport_low": _bits(n_paths)})


class FlbTxWire(wiring.Component):
    """Parser, flb-isolate, the mask filter, flb-route and the deparser in one component.

    Parameters
    ----------
    n_flows, n_dests, n_paths, time_bits, delay_bits, timeout, margin
        flb-route's (:class:`lbpipe.hdl.flb.route.Route`); ``n_flows`` a power of two, ``n_dests`` at most 256.
    n_slots, n_ports, release
        flb-isolate's (:class:`lbpipe.hdl.flb.isolate.Isolate`); ``release`` is its ``timeout``.
    dest_shift : int
        Lowest bit of the destination edge switch in the destination address.
    tick_cycles : int
        Clocks per tick of ``now`` after reset (0: stopped).
    depth : int
        Deparser frame buffer, in beats.
    sample_ticks : int
        Ticks between two samples of one (destination, path) after reset (0: no samples).

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
    cnm : In(stream.Signature(WireCnm(...)))
        CNMs received, to flb-isolate.
    dly : In(stream.Signature(WireDelay(...)))
        Piggybacked delays, to flb-route's delay table.
    meas : In(stream.Signature(WireMeas(...)))
        Measurements to piggyback toward their edge (flb-rx-wire's ``meas``).
    ctl : In(ControlSignature())
    stats : Out(32 * 16)
    """

    #: The side FIFO: every frame's fields, from the first stage to the join; flb-route's output ring (and the
    #: packets allowed between O and the join).
    SIDE_DEPTH, ROUTE_OUT_DEPTH = 32, 16
    #: The mark FIFO: one entry per frame between the sampler and the mark stage (the deparser's frames in flight).
    MARK_DEPTH = 64

    def __init__(self, *, n_flows=65536, n_dests=16, n_paths=8, n_slots=8, n_ports=8, time_bits=16, delay_bits=16,
                 timeout=4096, release=4096, margin=0, dest_shift=8, tick_cycles=64, depth=256, sample_ticks=64):
        check_parameters(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, n_slots=n_slots, n_ports=n_ports,
                         time_bits=time_bits, delay_bits=delay_bits, timeout=timeout, release=release,
                         margin=margin, dest_shift=dest_shift, tick_cycles=tick_cycles, depth=depth,
                         sample_ticks=sample_ticks)
        self._sample_ticks, self._mdb = sample_ticks, min(delay_bits, 16)
        self._nf, self._nd, self._n, self._tb, self._tick = n_flows, n_dests, n_paths, time_bits, tick_cycles
        self._fb, self._db, self._pb, self._shift = _bits(n_flows), _bits(n_dests), _bits(n_paths), dest_shift
        self._parser = Parser(early=True)
        self._isolate = Isolate(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, n_slots=n_slots,
                                time_bits=time_bits, timeout=release, n_ports=n_ports)
        self._route = Route(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, time_bits=time_bits,
                            delay_bits=delay_bits, timeout=timeout, margin=margin, upd=True, force=True)
        self._deparser = Deparser(depth=depth, cut_through=True)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "cnm": In(stream.Signature(WireCnm(n_flows=n_flows, n_dests=n_dests, n_ports=n_ports))),
            "dly": In(stream.Signature(WireDelay(n_dests=n_dests, n_paths=n_paths, delay_bits=delay_bits))),
            "meas": In(stream.Signature(WireMeas(n_dests=n_dests, n_paths=n_paths, delay_bits=delay_bits))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """The mask filter's bits and the sampler's (flb-route's and flb-isolate's tables are their own)."""
        return self._nd * (1 + self._n) + self.sampler_bits

    @property
    def sampler_bits(self):
        """The sampler's memories: the last sample's tick per (destination, path slot), the waiting measurement
        per destination (and its valid bit)."""
        return (self._nd << self._pb) * (1 + self._tb) + self._nd * (1 + self._pb + self._mdb)

    @property
    def latency(self):
        """Edges from the one that takes an FLB frame's first beat to the one that hands its first beat on,
        unthrottled, for a frame of two beats or more: the second beat, the parser, the first stage, flb-isolate's
        input slice, flb-isolate, its output slice, the mask filter (U0, U1), O, flb-route, its output ring (the
        write, then the head register), the deparser (the join adds none) and the mark stage's slice."""
        return (1 + Parser.latency + 1 + 1 + self._isolate.latency + 1 + 2 + 1 + self._route.latency + 2
                + Deparser.latency + 1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self._parser
        m.submodules.isolate = isolate = self._isolate
        m.submodules.route = route = self._route
        m.submodules.deparser = deparser = self._deparser
        m.submodules.side = side = StreamFIFO(shape=WireFields(self._n), depth=self.SIDE_DEPTH)
        m.submodules.marks = marks = StreamFIFO(shape=_Mark(), depth=self.MARK_DEPTH)
        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        wiring.connect(m, parser.m_axis, deparser.s_axis)
        now = self._clock(m)
        skipped = self._classify(m, parser, isolate, side, now)
        cnm_in = self._cnm_input(m, isolate)
        room, inc, dec = self._credits(m)
        updates = self._mask_filter(m, isolate, route, room, inc)
        meas_in = self._meas_input(m)
        sampler, stamped, piggybacked = self._sampler(m, marks, meas_in)
        unrouted = self._join(m, route, side, deparser, dec, sampler)
        self._mark(m, deparser, marks)
        self._control(m, route, cnm_in, meas_in)
        m.d.comb += self.stats.eq(Cat(isolate.stats, deparser.stats, counter32(m, "not_flb", skipped),
                                      counter32(m, "no_route", unrouted), counter32(m, "set_updates", updates),
                                      counter32(m, "stamped", stamped), counter32(m, "piggybacked", piggybacked)))
        return m

    def _clock(self, m):
        """``now``, stepped when the prescaler has counted ``period`` clocks (``period`` 0: stopped)."""
        self._clock_cmd = tick_clock(m, "now", self._tb, self._tick)
        self._sample_period = Signal(16, init=self._sample_ticks, name="sample_period")
        return self._clock_cmd[0]

    def _classify(self, m, parser, isolate, side, now):
        """F0 registers the parser's item as FLB or not, its flow, destination and the deparser's fields;
        then a fork: an FLB frame's packet to flb-isolate (through a register slice) and every frame's fields into
        the side FIFO, both in the same clock. Returns the "not FLB" count enable."""
        meta = parser.meta.payload
        lay = data.StructLayout({"flow": self._fb, "dest": self._db, "f": WireFields(self._n)})
        f0, v0 = Signal(lay, name="f0_item"), Signal(name="f0_valid")
        pkt = stream.Signature(isolate.i.payload.shape()).create()
        pkt_ready = Signal(name="isolate_in_ready")
        register_slice(m, "isolate_in", pkt.valid, pkt.payload, pkt_ready, isolate.i)
        # ``now`` as flb-isolate takes the packet, as for a CNM (below): the two kinds of event reach it in the order
        # it takes them, so a CNM taken after a packet is never stamped before it (its timeout is modular)
        m.d.comb += isolate.i.payload.now.eq(now)
        flb = f0.f.flb
        take = Signal(name="f0_take")
        m.d.comb += [
            pkt.payload.flow.eq(f0.flow), pkt.payload.dest.eq(f0.dest),
            pkt.valid.eq(v0 & flb & side.i.ready),
            side.i.payload.eq(f0.f), side.i.valid.eq(v0 & (~flb | pkt_ready)),
            take.eq(v0 & side.i.ready & (~flb | pkt_ready)),
        ]
        adv = Signal(name="f0_adv")
        m.d.comb += [adv.eq(~v0 | take), parser.meta.ready.eq(adv)]
        with m.If(adv):
            m.d.sync += [
                v0.eq(parser.meta.valid),
                f0.flow.eq(meta.flow_hash[:self._fb]),
                f0.dest.eq(meta.dst_ip[self._shift:self._shift + self._db]),
                f0.f.flb.eq(meta.roce & (meta.udp_csum == 0)),
                f0.f.l4_off.eq(meta.l4_off), f0.f.icrc_off.eq(meta.icrc_off),
                f0.f.sport_low.eq(meta.udp_sport[:self._pb]),
            ]
        return take & ~flb

    def _cnm_input(self, m, isolate):
        """flb-isolate's CNM input behind a register slice; :meth:`_control` feeds it from ``cnm`` or, while a
        table-49 command is offered, from the command (``cnm`` held)."""
        cnm = stream.Signature(isolate.upd.payload.shape()).create()
        cnm_ready = Signal(name="cnm_slice_ready")
        register_slice(m, "cnm", cnm.valid, cnm.payload, cnm_ready, isolate.upd)
        m.d.comb += isolate.upd.payload.now.eq(self._clock_cmd[0])
        return cnm, cnm_ready

    def _credits(self, m):
        """The packets between O and the join (in O, in flb-route, in its output ring), counted so that flb-route's
        output never waits: a packet enters O only while ``room`` (a flip-flop) says the ring can hold it. Returns
        ``room`` and the count's increment and decrement (driven by :meth:`_offer` and :meth:`_join`)."""
        inflight = Signal(range(self.ROUTE_OUT_DEPTH + 1), name="route_inflight")
        room = Signal(init=1, name="route_room")
        inc, dec = Signal(name="route_inflight_inc"), Signal(name="route_inflight_dec")
        after = Signal.like(inflight, name="route_inflight_next")
        m.d.comb += after.eq(inflight + inc - dec)
        m.d.sync += [inflight.eq(after), room.eq(after < self.ROUTE_OUT_DEPTH)]
        return room, inc, dec

    def _mask_filter(self, m, isolate, route, room, inc):
        """flb-isolate's result through a register slice into U0, which also reads the last set given flb-route
        for the destination (``known``, ``mask``; the read is transparent to U0's own write, so the next packet of
        the destination sees it); U0 writes the new set, and as the packet moves to U1 a changed set goes into UR,
        the update register; U1 and UR move into O together (:meth:`_offer`), which offers the packet to flb-route
        and the set on ``upd`` in the same clock. When UR holds no set it takes a delay from ``dly`` (through its
        own register slice). The memory is swept at reset (the filter waits meanwhile). Returns the "set sent"
        count enable."""
        nd, n = self._nd, self._n
        res_t = isolate.o.payload.shape()
        sink = stream.Signature(res_t).flip().create()
        register_slice(m, "isolate_out", isolate.o.valid, isolate.o.payload, isolate.o.ready, sink)
        ent = data.StructLayout({"known": 1, "mask": n})
        m.submodules.sets = mem = memory.Memory(shape=ent, depth=nd, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=(wr,))
        busy = Signal(init=1, name="sets_sweep")
        addr = Signal(range(nd), init=nd - 1, name="sets_sweep_addr")
        with m.If(busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += busy.eq(0)
        u0, u1 = Signal(res_t, name="u0_item"), Signal(res_t, name="u1_item")
        v0, v1 = Signal(name="u0_valid"), Signal(name="u1_valid")
        need = Signal(name="u1_need")
        need_next = Signal(name="u0_need")
        adv = Signal(name="filter_adv")
        route_ready = Signal(name="route_in_ready")         # flb-route takes a packet and an update (same ready)
        o_free = Signal(init=1, name="o_free")              # O's spare is empty (a flip-flop)
        xfer = Signal(name="o_take")                        # O takes U1 and UR this clock
        # UR: the update register, straight into flb-route's upd (valid and payload from flip-flops): U1's set while
        # U1 holds a packet whose set changed, else a delay from dly, else empty
        ur = Signal(route.upd.payload.shape(), name="ur_item")
        ur_v, ur_set = Signal(name="ur_valid"), Signal(name="ur_set")
        ur_free = Signal(name="ur_free")
        dly = stream.Signature(self.dly.payload.shape()).flip().create()
        dly_ready = Signal(name="dly_slice_ready")
        register_slice(m, "dly", self.dly.valid, self.dly.payload, dly_ready, dly)
        m.d.comb += [
            self.dly.ready.eq(dly_ready),
            route_ready.eq(route.i.ready),
            need_next.eq(v0 & u0.ok & (~rd.data.known | (rd.data.mask != u0.mask))),
            xfer.eq(o_free & (room | ~v1)),
            inc.eq(xfer & v1),
            ur_free.eq(~ur_v | xfer),
            # U moves when O takes U1 and UR (or U1 is empty and, for a packet whose set changed, UR too); never
            # during the sweep (so U1 and UR stay empty until it ends)
            adv.eq(~busy & (xfer | (~v1 & (~need_next | ~ur_v)))),
            sink.ready.eq(adv), rd.addr.eq(sink.payload.dest), rd.en.eq(adv),
        ]
        with m.If(adv):
            m.d.sync += [v0.eq(sink.valid), u0.eq(sink.payload), v1.eq(v0), u1.eq(u0), need.eq(need_next)]
        m.d.comb += [wr.addr.eq(Mux(busy, addr, u0.dest)), wr.data.known.eq(~busy), wr.data.mask.eq(u0.mask),
                     wr.en.eq(busy | (adv & v0 & u0.ok))]
        set_in = adv & need_next
        m.d.comb += dly.ready.eq(~busy & ur_free & ~set_in)
        with m.If(set_in):
            m.d.sync += [ur_v.eq(1), ur_set.eq(1), ur.isolate.eq(1), ur.dest.eq(u0.dest), ur.mask.eq(u0.mask)]
        with m.Elif(~busy & ur_free):
            m.d.sync += [ur_v.eq(dly.valid), ur_set.eq(0), ur.isolate.eq(0), ur.dest.eq(dly.payload.dest),
                         ur.path.eq(dly.payload.path), ur.delay.eq(dly.payload.delay)]
        pkt = Signal(route.i.payload.shape(), name="u1_packet")
        m.d.comb += [pkt.kind.eq(PacketKind.DATA), pkt.flow.eq(u1.flow), pkt.dest.eq(u1.dest), pkt.now.eq(u1.now),
                     pkt.tag.eq(Cat(u1.isolated, u1.path)), pkt.force.eq(u1.isolated), pkt.fpath.eq(u1.path)]
        return self._offer(m, route, o_free, xfer, (v1, pkt), (ur_v, ur_set, ur))

    def _offer(self, m, route, o_free, xfer, packet, update):
        """O: U1's packet and UR's update, taken together whenever ``xfer`` (the spare empty and, for a packet,
        room after flb-route: flip-flops), in flip-flops straight into flb-route's ``i`` and ``upd``; both leave
        when flb-route is ready (one ready for both). A spare copy catches what is taken in the clock flb-route
        first refuses (a register slice for the pair), so nothing upstream waits on flb-route's ready. Returns the
        "set sent" count enable."""
        (v1, pkt), (ur_v, ur_set, ur) = packet, update
        lay = data.StructLayout({"pv": 1, "pkt": pkt.shape(), "uv": 1, "set": 1, "upd": ur.shape()})
        up, o, spare = Signal(lay, name="o_in"), Signal(lay, name="o_item"), Signal(lay, name="o_spare")
        spare_v = Signal(name="o_spare_valid")
        route_ready = route.i.ready
        m.d.comb += [up.pv.eq(v1), up.pkt.eq(pkt), up.uv.eq(ur_v), up.set.eq(ur_set), up.upd.eq(ur)]
        with m.If(route_ready | ~(o.pv | o.uv)):
            with m.If(spare_v):
                m.d.sync += [o.eq(spare), spare_v.eq(0), o_free.eq(1)]
            with m.Elif(xfer):
                m.d.sync += o.eq(up)
            with m.Else():
                m.d.sync += [o.pv.eq(0), o.uv.eq(0)]
        with m.Elif(xfer & (v1 | ur_v)):
            m.d.sync += [spare.eq(up), spare_v.eq(1), o_free.eq(0)]
        m.d.comb += [
            route.i.valid.eq(o.pv), route.i.payload.eq(o.pkt),
            route.upd.valid.eq(o.uv), route.upd.payload.eq(o.upd),
        ]
        return o.uv & o.set & route_ready

    def _route_out(self, m, route, res_t):
        """flb-route's results in a ring of ``ROUTE_OUT_DEPTH`` entries (LUT RAM) written whenever ``o.valid``
        (``o.ready`` is 1: the count of :meth:`_credits` keeps it from filling), then a head register: no level
        counter, so neither side's handshake goes through an adder. Returns the head as a stream."""
        depth = self.ROUTE_OUT_DEPTH
        m.submodules.route_out = mem = memory.Memory(shape=res_t, depth=depth, init=[])
        wr, rd = mem.write_port(), mem.read_port(domain="comb")
        wp, rp = Signal(range(depth), name="route_out_wp"), Signal(range(depth), name="route_out_rp")
        head = stream.Signature(res_t).flip().create()
        head_v = Signal(name="route_out_head_valid")
        head_d = Signal(res_t, name="route_out_head")
        m.d.comb += [route.o.ready.eq(1), wr.addr.eq(wp), wr.data.eq(route.o.payload), wr.en.eq(route.o.valid),
                     rd.addr.eq(rp), head.valid.eq(head_v), head.payload.eq(head_d)]
        with m.If(route.o.valid):
            m.d.sync += wp.eq(wp + 1)
        with m.If((~head_v | head.ready) & (rp != wp)):
            m.d.sync += [head_d.eq(rd.data), head_v.eq(1), rp.eq(rp + 1)]
        with m.Elif(head.ready):
            m.d.sync += head_v.eq(0)
        return head

    def _join(self, m, route, side, deparser, dec, sampler):
        """flb-route's result through a ring it never waits on (``route.o.ready`` is 1: :meth:`_credits`), beside
        the side FIFO's head, into the deparser's action and the sampler's M0 (every frame, in the same clock):
        for an FLB frame with a route, the port's low bits become the path (XOR with the old ones): flb-isolate's
        isolation path for an isolated flow (the tag's), else flb-route's. Returns the "no route" count enable."""
        res_t = route.o.payload.shape()
        sink = self._route_out(m, route, res_t)
        head, res = side.o.payload, sink.payload
        act = deparser.act.payload
        flb = head.flb
        isolated, iso_path = res.tag[0], res.tag[1:1 + self._pb]
        path = Signal(self._pb, name="join_path")
        xor = Signal(self._pb, name="join_xor")
        go = Signal(name="join_rewrite")
        m.d.comb += [path.eq(Mux(isolated, iso_path, res.path)), xor.eq(head.sport_low ^ path),
                     go.eq(flb & res.ok & (xor != 0))]
        here = side.o.valid & (~flb | sink.valid)
        take = Signal(name="join_take")
        m_ready, m_item = sampler
        m.d.comb += [
            act.tag.eq(0), act.drop.eq(0), act.rewrite.eq(go),
            act.l4_off.eq(head.l4_off), act.icrc_off.eq(head.icrc_off), act.sport_xor.eq(xor),
            deparser.act.valid.eq(here & m_ready), take.eq(here & m_ready & deparser.act.ready),
            side.o.ready.eq(take), sink.ready.eq(take & flb), dec.eq(take & flb),
            m_item.valid.eq(take), m_item.routed.eq(flb & res.ok), m_item.dest.eq(res.dest), m_item.path.eq(path),
            m_item.now.eq(res.now), m_item.l4_off.eq(head.l4_off),
        ]
        return take & flb & ~res.ok

    def _meas_input(self, m):
        """The measurements to piggyback, behind a register slice whose output is always taken; :meth:`_control`
        feeds it from ``meas`` or, while a table-50 command is offered, from the command (``meas`` held)."""
        meas = stream.Signature(self.meas.payload.shape()).create()
        meas_ready = Signal(name="meas_slice_ready")
        self._meas_out = out = stream.Signature(self.meas.payload.shape()).flip().create()
        register_slice(m, "meas", meas.valid, meas.payload, meas_ready, out)
        m.d.comb += out.ready.eq(1)
        return meas, meas_ready

    def _sampler(self, m, marks, meas_in):
        """M0 to M2, one adv (the mark FIFO has room, or M2 is empty); every frame enters M0 from the join and
        leaves M2 as its entry in the mark FIFO.

        * M0 reads the tick of the last sample of the frame's (destination, path) (LUT RAM, with its ``known`` bit:
          swept at reset, the join waits meanwhile) and registers ``now - last`` and ``now - M1's now``.
        * M1 samples a routed frame when sampling is on and the pair is unknown or ``sample period`` ticks have
          passed; the tick M0 read misses the write of the frame M1 held in that clock, so when that frame was of
          the same pair and sampled, M1 takes its own difference from it (``now - M1's now``). M1 writes the tick
          (in every clock it holds a sampled frame: the write enable does not wait for the stage's advance).
        * M2: a routed frame not sampled carries its destination's waiting measurement, if any (valid bits in
          flip-flops, the measurement in LUT RAM), and empties the slot; a measurement arriving in that clock for
          the destination is newer and stays.

        Returns ``((ready, item), stamped, piggybacked)``: M0's ready and input, the two counters' enables."""
        nd, tb, pb, db = self._nd, self._tb, self._pb, self._db
        lay = data.StructLayout({"valid": 1, "routed": 1, "dest": db, "path": pb, "now": tb, "l4_off": 8})
        item = Signal(lay, name="m_in")
        m0, m1, m2 = (Signal(lay, name=f"m{k}") for k in range(3))
        m.submodules.last = last = memory.Memory(shape=data.StructLayout({"known": 1, "tick": tb}),
                                                  depth=nd << pb, init=[])
        wr, rd = last.write_port(), last.read_port(domain="comb")
        busy = Signal(init=1, name="last_sweep")
        sweep = Signal(range(nd << pb), init=(nd << pb) - 1, name="last_sweep_addr")
        with m.If(busy):
            m.d.sync += sweep.eq(sweep - 1)
            with m.If(sweep == 0):
                m.d.sync += busy.eq(0)
        adv = Signal(name="m_adv")
        m.d.comb += [adv.eq(marks.i.ready | ~m2.valid), rd.addr.eq(Cat(m0.path, m0.dest))]
        # M1's registers beside the item: the two differences, the known bit, the same-pair hit and whether the
        # frame M1 held before sampled
        diff_mem, diff_fwd = Signal(tb, name="m1_diff_mem"), Signal(tb, name="m1_diff_fwd")
        known, hit = Signal(name="m1_known"), Signal(name="m1_hit")
        sampled, s2 = Signal(name="m1_sampled"), Signal(name="m2_sampled")        # s2: M2's frame was sampled
        use_fwd = Signal(name="m1_use_fwd")
        period = self._sample_period
        # both differences compared with the period, then the comparison picked (not the difference): the pick
        # after the carry chains, not before them
        m.d.comb += [
            use_fwd.eq(hit & s2),
            sampled.eq(m1.valid & m1.routed & (period != 0)
                       & Mux(use_fwd, diff_fwd >= period, ~known | (diff_mem >= period))),
            wr.addr.eq(Mux(busy, sweep, Cat(m1.path, m1.dest))), wr.data.known.eq(~busy),
            # the tick is written while M1 holds a sampled frame, not only as it leaves: a stalled frame writes the
            # same tick again, and a frame in M0 that reads it then gets the value forwarding would give it
            wr.data.tick.eq(m1.now), wr.en.eq(busy | sampled),
        ]
        with m.If(adv):
            m.d.sync += [
                m0.eq(item), m1.eq(m0), m2.eq(m1), s2.eq(sampled),
                diff_mem.eq(m0.now - rd.data.tick), diff_fwd.eq(m0.now - m1.now), known.eq(rd.data.known),
                hit.eq(m1.valid & m1.routed & (m0.dest == m1.dest) & (m0.path == m1.path)),
            ]
        # the waiting measurements: valid bits (flip-flops), the measurement (LUT RAM)
        mlay = data.StructLayout({"path": pb, "delay": self._mdb})
        m.submodules.slots = slots = memory.Memory(shape=mlay, depth=nd, init=[])
        swr, srd = slots.write_port(), slots.read_port(domain="comb")
        waiting = Signal(nd, name="slot_valid")
        meas = self._meas_out
        into = meas.valid & (meas.payload.edge < nd)
        piggy = Signal(name="m2_piggyback")
        m.d.comb += [
            swr.addr.eq(meas.payload.edge), swr.data.path.eq(meas.payload.path),
            swr.data.delay.eq(meas.payload.delay), swr.en.eq(into),
            srd.addr.eq(m2.dest), piggy.eq(m2.valid & m2.routed & ~s2 & waiting.bit_select(m2.dest, 1)),
        ]
        for k in range(nd):
            with m.If(into & (meas.payload.edge == k)):
                m.d.sync += waiting[k].eq(1)
            with m.Elif(adv & piggy & (m2.dest == k)):
                m.d.sync += waiting[k].eq(0)
        e = marks.i.payload
        m.d.comb += [
            marks.i.valid.eq(m2.valid),
            e.apply.eq(m2.routed), e.l4_off.eq(m2.l4_off),
            e.bits.eq(Mux(s2, MARK_S, Mux(piggy, MARK_P | srd.data.path, 0))),
            e.value.eq(Mux(s2, m2.now[:16], Mux(piggy, srd.data.delay, 0))),
        ]
        ready = Signal(name="m_ready")
        m.d.comb += ready.eq(adv & ~busy)
        return (ready, item), adv & s2 & m2.valid, adv & piggy

    def _mark(self, m, deparser, marks):
        """The deparser's beats through the mark stage to ``m_axis``: in a routed FLB frame, BTH byte 4 bits 5..0
        become the entry's bits (FECN, BECN kept) and the UDP checksum its value (both under the ICRC's mask)."""
        def edit(index, entry, tdata):
            lanes = [tdata[8 * j:8 * j + 8] for j in range(64)]
            value = [entry.value[8:16], entry.value[0:8]]          # big-endian on the wire: byte k of the field
            for j, selects in field_lanes(index, entry.l4_off, CSUM_OFFSET, 2).items():
                for k in (0, 1):
                    on = [s for s, kk in selects if kk == k]
                    if on:
                        lanes[j] = Mux(entry.apply & Cat(*on).any(), value[k], lanes[j])
            for j, selects in field_lanes(index, entry.l4_off, BTH_BYTE4_OFFSET).items():
                on = entry.apply & Cat(*[s for s, _ in selects]).any()
                lanes[j] = Cat(Mux(on, entry.bits, lanes[j][:6]), lanes[j][6:])
            return Cat(*lanes)
        edit_axis(m, "mark", deparser.m_axis, marks.o, edit, self.m_axis)

    def _control(self, m, route, cnm_in, meas_in):
        """Table 0 to flb-route (a delay); 48 the clock; 49 a CNM into flb-isolate's CNM slice, which the ``cnm``
        port otherwise drives (while a command is offered the port is held). A command is registered before it is
        offered (``ctl.ready`` a flip-flop); other tables are taken and ignored.

        Table 49's data: ``dest`` in bits 0 to 15, ``cp`` 16 to 23, ``n`` 24 to 27, ``cong`` bit 28; its index is
        the flow. Table 48 index 2 sets the sampling period (ticks; 0: no samples). Table 50 is a measurement to
        piggyback into the sampler's slots: index the edge, data the delay in bits 0 to 15, the path 16 to 19."""
        clock_now, period, pre = self._clock_cmd
        cnm, cnm_ready = cnm_in
        meas, meas_ready = meas_in
        c = self.ctl.payload
        cmd = Signal.like(c, reset_less=True)
        to_route, to_cnm = Signal(name="ctl_to_route"), Signal(name="ctl_to_cnm")
        to_meas = Signal(name="ctl_to_meas")
        idle = ~to_route & ~to_cnm & ~to_meas
        m.d.comb += [
            self.ctl.ready.eq(idle),
            route.ctl.payload.eq(cmd), route.ctl.valid.eq(to_route),
        ]
        p = cnm.payload
        with m.If(to_cnm):
            m.d.comb += [cnm.valid.eq(1), p.flow.eq(cmd.index), p.dest.eq(cmd.data[0:16]), p.cp.eq(cmd.data[16:24]),
                         p.n.eq(cmd.data[24:28]), p.cong.eq(cmd.data[28]), self.cnm.ready.eq(0)]
        with m.Else():
            m.d.comb += [cnm.valid.eq(self.cnm.valid), p.flow.eq(self.cnm.payload.flow),
                         p.dest.eq(self.cnm.payload.dest), p.cp.eq(self.cnm.payload.cp), p.n.eq(self.cnm.payload.n),
                         p.cong.eq(self.cnm.payload.cong), self.cnm.ready.eq(cnm_ready)]
        q = meas.payload
        with m.If(to_meas):
            m.d.comb += [meas.valid.eq(1), q.edge.eq(cmd.index), q.path.eq(cmd.data[16:20]), q.delay.eq(cmd.data[0:16]),
                         self.meas.ready.eq(0)]
        with m.Else():
            m.d.comb += [meas.valid.eq(self.meas.valid), q.eq(self.meas.payload), self.meas.ready.eq(meas_ready)]
        # the clock's registers are written a clock after the command is taken, from the registered command and
        # decode (the decode of the AXI4-Lite bridge's registers straight into ``now`` was 7 levels)
        set_now, set_period, set_sample = (Signal(name=f"ctl_set_{n}") for n in ("now", "period", "sample"))
        clock = self.ctl.valid & (c.table == TABLE_CLOCK)
        m.d.sync += [set_now.eq(0), set_period.eq(0), set_sample.eq(0)]
        with m.If(idle):
            m.d.sync += [cmd.eq(c), to_route.eq(self.ctl.valid & (c.table == TABLE_DELAY)),
                         to_cnm.eq(self.ctl.valid & (c.table == TABLE_CNM)),
                         to_meas.eq(self.ctl.valid & (c.table == TABLE_MEAS)),
                         set_now.eq(clock & (c.index == 0)), set_period.eq(clock & (c.index == 1)),
                         set_sample.eq(clock & (c.index == 2))]
        with m.If(set_now):
            m.d.sync += clock_now.eq(cmd.data)
        with m.If(set_period):
            m.d.sync += [period.eq(cmd.data), pre.eq(0)]
        with m.If(set_sample):
            m.d.sync += self._sample_period.eq(cmd.data)
        with m.If(to_route & route.ctl.ready):
            m.d.sync += to_route.eq(0)
        with m.If(to_cnm & cnm_ready):
            m.d.sync += to_cnm.eq(0)
        with m.If(to_meas & meas_ready):
            m.d.sync += to_meas.eq(0)
