"""SELB's source ToR as a bump in the wire: parser -> path mirror -> selb-cluster -> selb-reroute -> deparser ->
mark, on the 512-bit AXI4-Stream (SELB, paper 004, section III "Rerouting Strategy"; datasheet
docs/selb_tx_wire.md).

A RoCEv2 data frame with a zero UDP checksum is SELB traffic: its flow is the parser's flow hash (CRC-16 of the
addresses and the destination QP) cut to ``log2 n_flows`` bits; it leaves with the low ``log2 n_paths`` bits of its
UDP source port set to the path selb-reroute chose (the ToR's uplink choice reads them, as PRO's PathID does), its
ICRC updated by the deparser, and the tail mark and epoch bit in the BTH's reserved byte (BTH byte 4, bits 0 and 1:
under the ICRC's mask, so no CRC change). Every other frame leaves bit for bit as it came, counted.

**Path mirror** (docs/selb_reroute.md, "Composition with selb-cluster"): selb-cluster is looked up with the flow's
current path before selb-reroute reads its own table, so the wire keeps a read-only copy of the path each flow last
left on (block RAM, ``n_flows`` x (valid, path)), written from selb-reroute's output. A flow the mirror has not seen
is looked up on its own source port's low bits (its ECMP path; a flow never rerouted keeps its port). A frame looked
up before an earlier frame's path reached the mirror is stale for selb-reroute: it leaves on the flow's table path,
no decision taken from it, counted (STATUS_9).

**Clock**: ``now`` (``time_bits``) advances once every ``tick_cycles`` clocks (``ctl`` table 48: index 0 sets
``now``, index 1 the cycles per tick, 0 stops it), read when a frame's item enters the mirror stage.

**Queue samples** reach selb-cluster on ``smp`` (the switch's uplink queue lengths and period ticks), or through
``ctl`` table 49 (a sample: index = path, data = queue length) and 50 (a period tick), which lets a trace carry them.

Cut-through only: a frame leaves as it arrives once its action is resolved (the deparser's cut-through mode: no
frame is dropped, so the marks, kept in frame order in a FIFO beside the deparser, stay joined to their frames).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.lib.stage import counter32, register_slice, tick_clock
from lbpipe.hdl.packet.deparser import Deparser
from lbpipe.hdl.packet.marks import edit_axis, field_lanes
from lbpipe.hdl.packet.parser import Parser
from lbpipe.hdl.selb.cluster import (N_STATS as N_CLUSTER_STATS, Cluster, ClusterSample,
                                     check_parameters as check_cluster)
from lbpipe.hdl.selb.reroute import N_STATS as N_REROUTE_STATS, Reroute, check_parameters as check_reroute

__all__ = ["SelbTxWire", "N_STATS", "TABLE_CLOCK", "TABLE_SAMPLE", "TABLE_TICK", "BTH_MARK_OFFSET",
           "check_parameters"]

#: Control tables: selb-cluster's at 0 to 15, the clock at 48, a queue sample at 49, a period tick at 50.
TABLE_CLOCK, TABLE_SAMPLE, TABLE_TICK = 48, 49, 50
#: The mark's byte from the UDP header: 8 bytes of UDP, then BTH byte 4 (FECN, BECN, 6 reserved bits).
BTH_MARK_OFFSET = 12
#: Counters: selb-cluster (6), selb-reroute (4), deparser (3), frames not given to selb-reroute.
N_STATS = N_CLUSTER_STATS + N_REROUTE_STATS + 3 + 1


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_flows, n_paths, k, q_bits, iter_cap, draws, theta, time_bits, hold, tick_cycles,
                     depth, cluster_seed, reroute_seed):
    check_cluster(n_paths=n_paths, k=k, q_bits=q_bits, iter_cap=iter_cap, draws=draws, theta=theta,
                  lfsr_seed=cluster_seed)
    check_reroute(n_flows=n_flows, n_paths=n_paths, time_bits=time_bits, hold=hold, lfsr_seed=reroute_seed)
    check_int("tick_cycles", tick_cycles)
    check_int("depth", depth)
    if not 0 <= tick_cycles < 1 << 16:
        raise ValueError(f"tick_cycles must be 0 to 65535, not {tick_cycles}")


def WireFields(n_paths):
    """What the deparser and the mark need from the parser's item: SELB traffic, UDP and ICRC offsets, the
    source port's low bits."""
    return data.StructLayout({"selb": 1, "l4_off": 8, "icrc_off": 14, "sport_low": _bits(n_paths)})


def Mark():
    """One per frame, in frame order: whether to mark it, the frame's L4 offset (the byte is ``BTH_MARK_OFFSET``
    after it), the two bits."""
    return data.StructLayout({"apply": 1, "l4_off": 8, "bits": 2})


class SelbTxWire(wiring.Component):
    """Parser, path mirror, selb-cluster, selb-reroute, deparser and mark in one component.

    Parameters
    ----------
    n_flows, time_bits, hold
        selb-reroute's (:class:`lbpipe.hdl.selb.reroute.Reroute`).
    n_paths, k, q_bits, iter_cap, draws, theta
        selb-cluster's (:class:`lbpipe.hdl.selb.cluster.Cluster`).
    tick_cycles : int
        Clocks per tick of ``now`` after reset (0: stopped).
    depth : int
        Deparser frame buffer, in beats.
    cluster_seed, reroute_seed : int
        The two blocks' LFSR seeds.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
    smp : In(stream.Signature(ClusterSample(n_paths, q_bits)))
        Queue samples and period ticks, straight to selb-cluster's ``smp``.
    ctl : In(ControlSignature())
    stats : Out(32 * 14)
    """

    #: Side FIFOs beside selb-cluster and selb-reroute; the mark FIFO beside the deparser.
    SIDE_DEPTH, MARK_DEPTH = 16, 64

    def __init__(self, *, n_flows=1024, n_paths=64, k=4, q_bits=16, iter_cap=16, draws=4, theta=64, time_bits=16,
                 hold=32, tick_cycles=64, depth=256, cluster_seed=0xACE1, reroute_seed=0xB5AD):
        check_parameters(n_flows=n_flows, n_paths=n_paths, k=k, q_bits=q_bits, iter_cap=iter_cap, draws=draws,
                         theta=theta, time_bits=time_bits, hold=hold, tick_cycles=tick_cycles, depth=depth,
                         cluster_seed=cluster_seed, reroute_seed=reroute_seed)
        self._nf, self._n, self._tb, self._tick = n_flows, n_paths, time_bits, tick_cycles
        self._fb, self._pb = _bits(n_flows), _bits(n_paths)
        self._parser = Parser(early=True)
        self._cluster = Cluster(n_paths=n_paths, k=k, q_bits=q_bits, iter_cap=iter_cap, draws=draws, theta=theta,
                                lfsr_seed=cluster_seed)
        self._reroute = Reroute(n_flows=n_flows, n_paths=n_paths, time_bits=time_bits, hold=hold,
                                lfsr_seed=reroute_seed)
        self._deparser = Deparser(depth=depth, cut_through=True)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "smp": In(stream.Signature(ClusterSample(n_paths=n_paths, q_bits=q_bits))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """The path mirror's bits (selb-reroute's table is its own)."""
        return self._nf * (1 + self._pb)

    @property
    def latency(self):
        """Edges from the one that takes a SELB frame's first beat to the one that hands its first beat on,
        unthrottled, for a frame of two beats or more: the second beat, the parser, the mirror (2), the lookup's
        register slice, selb-cluster and its result's slice, selb-reroute, the deparser (the join adds none) and the
        mark's slice."""
        return 1 + Parser.latency + 2 + 1 + Cluster.latency + 1 + Reroute.latency + Deparser.latency + 1

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self._parser
        m.submodules.cluster = cluster = self._cluster
        m.submodules.reroute = reroute = self._reroute
        m.submodules.deparser = deparser = self._deparser
        m.submodules.side_a = side_a = StreamFIFO(shape=self._side_a(), depth=self.SIDE_DEPTH)
        m.submodules.side_b = side_b = StreamFIFO(shape=self._side_b(), depth=self.SIDE_DEPTH)
        m.submodules.marks = marks = StreamFIFO(shape=Mark(), depth=self.MARK_DEPTH)
        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        wiring.connect(m, parser.m_axis, deparser.s_axis)
        now = self._clock(m)
        mirror_wr = self._mirror(m, parser, cluster, side_a, now)
        skipped = self._fork(m, cluster, side_a, reroute, side_b)
        self._join(m, reroute, side_b, deparser, marks, mirror_wr)
        self._mark(m, deparser, marks)
        self._control(m, cluster)
        m.d.comb += self.stats.eq(Cat(cluster.stats, reroute.stats, deparser.stats,
                                      counter32(m, "not_rerouted", skipped)))
        return m

    def _side_a(self):
        return data.StructLayout({"flow": self._fb, "now": self._tb, "f": WireFields(self._n)})

    def _side_b(self):
        return data.StructLayout({"f": WireFields(self._n)})

    def _clock(self, m):
        """``now``, stepped when the prescaler has counted ``period`` clocks (``period`` 0: stopped)."""
        self._clock_cmd = tick_clock(m, "now", self._tb, self._tick)
        return self._clock_cmd[0]

    def _mirror(self, m, parser, cluster, side_a, now):
        """M0 takes the parser's item (flow, SELB or not, fields) and reads the mirror; M1 holds the read (block RAM
        output); M2 registers it and picks the lookup path (the mirror's, else the port's low bits); M2 is offered
        to the lookup's register slice (then selb-cluster) and side FIFO A together. All three move together when M2
        is free; after reset the mirror is swept (one entry a clock; the input waits). Returns the write port for
        the join."""
        nf, pb, fb = self._nf, self._pb, self._fb
        ent = data.StructLayout({"valid": 1, "path": pb})
        m.submodules.mirror = mem = memory.Memory(shape=ent, depth=nf, init=[])
        rd, wr = mem.read_port(transparent_for=()), mem.write_port()
        busy = Signal(init=1, name="mirror_sweep")
        addr = Signal(range(nf), init=nf - 1, name="mirror_sweep_addr")
        with m.If(busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += busy.eq(0)
        meta = parser.meta.payload
        lay = data.StructLayout({"kind": PacketKind, "tag": 16, "flow": fb, "now": self._tb,
                                 "f": WireFields(self._n)})
        m1, m2 = Signal(lay, name="m1_item"), Signal(lay, name="m2_item")
        v1, v2 = Signal(name="m1_valid"), Signal(name="m2_valid")
        m2_ent = Signal(ent, name="m2_mirror")
        out_ok = Signal(name="m2_out_ok")
        look = stream.Signature(cluster.i.payload.shape()).create()
        look_ready = Signal(name="lookup_ready")
        register_slice(m, "lookup", look.valid, look.payload, look_ready, cluster.i)
        m.d.comb += out_ok.eq(look_ready & side_a.i.ready)
        adv = Signal(name="mirror_adv")
        m.d.comb += [adv.eq((~v2 | out_ok) & ~busy), parser.meta.ready.eq(adv)]
        m0 = Signal(lay, name="m0_item")
        m.d.comb += [
            m0.kind.eq(meta.kind), m0.tag.eq(meta.tag), m0.flow.eq(meta.flow_hash[:fb]), m0.now.eq(now),
            m0.f.selb.eq(meta.roce & (meta.kind == PacketKind.DATA) & (meta.udp_csum == 0)),
            m0.f.l4_off.eq(meta.l4_off), m0.f.icrc_off.eq(meta.icrc_off), m0.f.sport_low.eq(meta.udp_sport[:pb]),
            rd.addr.eq(m0.flow), rd.en.eq(adv),
        ]
        with m.If(adv):
            m.d.sync += [v1.eq(parser.meta.valid), m1.eq(m0), v2.eq(v1), m2.eq(m1), m2_ent.eq(rd.data)]
        path = Signal(pb, name="m2_path")
        m.d.comb += [
            path.eq(Mux(m2_ent.valid, m2_ent.path, m2.f.sport_low)),
            look.payload.kind.eq(m2.kind), look.payload.tag.eq(m2.tag), look.payload.path.eq(path),
            side_a.i.payload.flow.eq(m2.flow), side_a.i.payload.now.eq(m2.now), side_a.i.payload.f.eq(m2.f),
            look.valid.eq(v2 & side_a.i.ready), side_a.i.valid.eq(v2 & look_ready),
        ]
        wr_flow, wr_path, wr_en = Signal(fb, name="mirror_wr_flow"), Signal(pb, name="mirror_wr_path"), Signal()
        m.d.comb += [wr.addr.eq(Mux(busy, addr, wr_flow)), wr.data.valid.eq(~busy), wr.data.path.eq(wr_path),
                     wr.en.eq(busy | wr_en)]
        return wr_flow, wr_path, wr_en

    def _fork(self, m, cluster, side_a, reroute, side_b):
        """selb-cluster's result through a register slice, beside side FIFO A's head: a SELB frame's lookup goes
        to selb-reroute (flow, now, the cluster's fields) and its fields into side FIFO B; any other frame's fields
        go into side FIFO B alone. Returns the "not given to selb-reroute" count enable."""
        res_t = cluster.o.payload.shape()
        sink = stream.Signature(res_t).flip().create()
        register_slice(m, "cluster_res", cluster.o.valid, cluster.o.payload, cluster.o.ready, sink)
        head, res = side_a.o.payload, sink.payload
        sel = head.f.selb
        both = sink.valid & side_a.o.valid
        item = reroute.i.payload
        m.d.comb += [
            item.kind.eq(res.kind), item.tag.eq(res.tag), item.flow.eq(head.flow), item.now.eq(head.now),
            item.path.eq(res.path), item.congested.eq(res.congested), item.alt.eq(res.alt),
            item.shortest.eq(res.shortest),
            side_b.i.payload.f.eq(head.f),
            reroute.i.valid.eq(both & sel & side_b.i.ready),
            side_b.i.valid.eq(both & (~sel | reroute.i.ready)),
        ]
        take = Signal(name="fork_take")
        m.d.comb += [take.eq(both & side_b.i.ready & (~sel | reroute.i.ready)),
                     sink.ready.eq(take), side_a.o.ready.eq(take)]
        return take & ~sel

    def _join(self, m, reroute, side_b, deparser, marks, mirror_wr):
        """Side FIFO B's head, with selb-reroute's result for a SELB frame, into the deparser's action (the port's
        low bits become the path: XOR with the old ones) and the mark FIFO (the BTH's reserved byte for a SELB
        frame); the result's path goes into the mirror."""
        head, res = side_b.o.payload, reroute.o.payload
        act = deparser.act.payload
        sel = head.f.selb
        # a fork to two consumers: each is offered the item when the other can take it (neither's valid waits on
        # its own ready), and both take it in the same clock
        here = side_b.o.valid & (~sel | reroute.o.valid)
        ready = here & marks.i.ready
        xor = Signal(self._pb, name="join_xor")
        m.d.comb += xor.eq(head.f.sport_low ^ res.path)
        take = Signal(name="join_take")
        m.d.comb += [
            act.tag.eq(0), act.drop.eq(0), act.rewrite.eq(sel & (xor != 0)),
            act.l4_off.eq(head.f.l4_off), act.icrc_off.eq(head.f.icrc_off), act.sport_xor.eq(xor),
            marks.i.payload.apply.eq(sel), marks.i.payload.l4_off.eq(head.f.l4_off),
            marks.i.payload.bits.eq(Cat(res.tail, res.epoch)),
            deparser.act.valid.eq(ready), take.eq(ready & deparser.act.ready),
            marks.i.valid.eq(here & deparser.act.ready),
            side_b.o.ready.eq(take), reroute.o.ready.eq(take & sel),
        ]
        wr_flow, wr_path, wr_en = mirror_wr
        m.d.comb += [wr_flow.eq(res.flow), wr_path.eq(res.path), wr_en.eq(take & sel)]

    def _mark(self, m, deparser, marks):
        """The deparser's beats through the mark stage to ``m_axis``: in a marked frame, the beat holding byte
        ``l4_off + BTH_MARK_OFFSET`` has that byte's bits 1..0 replaced by the mark (multiplexers only in the lanes
        that byte can fall in). A frame's first beat waits for its mark entry."""
        def edit(index, entry, tdata):
            lanes = [tdata[8 * j:8 * j + 8] for j in range(64)]
            for j, selects in field_lanes(index, entry.l4_off, BTH_MARK_OFFSET).items():
                on = entry.apply & Cat(*[s for s, _ in selects]).any()
                lanes[j] = Cat(Mux(on, entry.bits, lanes[j][:2]), lanes[j][2:])
            return Cat(*lanes)
        edit_axis(m, "mark", deparser.m_axis, marks.o, edit, self.m_axis)

    def _control(self, m, cluster):
        """Tables 0 to 15 to selb-cluster; 48 the clock; 49 and 50 a sample and a tick into selb-cluster's
        ``smp``, which the ``smp`` port otherwise drives (while a command is offered the port is held); both reach
        selb-cluster through a register slice. A command is registered before it is offered (``ctl.ready`` a
        flip-flop)."""
        now, period, pre = self._clock_cmd
        c = self.ctl.payload
        cmd = Signal.like(c, reset_less=True)
        to_cls, to_smp = Signal(name="ctl_to_cluster"), Signal(name="ctl_to_smp")
        idle = ~to_cls & ~to_smp
        m.d.comb += [
            self.ctl.ready.eq(idle),
            cluster.ctl.payload.eq(cmd), cluster.ctl.valid.eq(to_cls),
        ]
        smp = stream.Signature(cluster.smp.payload.shape()).create()
        smp_ready = Signal(name="smp_slice_ready")
        register_slice(m, "smp", smp.valid, smp.payload, smp_ready, cluster.smp)
        with m.If(to_smp):
            m.d.comb += [smp.valid.eq(1), smp.payload.path.eq(cmd.index[:self._pb]),
                         smp.payload.qlen.eq(cmd.data), smp.payload.tick.eq(cmd.table == TABLE_TICK),
                         self.smp.ready.eq(0)]
        with m.Else():
            m.d.comb += [smp.valid.eq(self.smp.valid), smp.payload.eq(self.smp.payload),
                         self.smp.ready.eq(smp_ready)]
        with m.If(idle):
            m.d.sync += [cmd.eq(c), to_cls.eq(self.ctl.valid & (c.table < 16)),
                         to_smp.eq(self.ctl.valid & ((c.table == TABLE_SAMPLE) | (c.table == TABLE_TICK)))]
            with m.If(self.ctl.valid & (c.table == TABLE_CLOCK) & (c.index == 0)):
                m.d.sync += now.eq(c.data)
            with m.If(self.ctl.valid & (c.table == TABLE_CLOCK) & (c.index == 1)):
                m.d.sync += [period.eq(c.data), pre.eq(0)]
        with m.If(to_cls & cluster.ctl.ready):
            m.d.sync += to_cls.eq(0)
        with m.If(to_smp & smp_ready):
            m.d.sync += to_smp.eq(0)
