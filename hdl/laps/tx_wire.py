"""LAPS sender as a bump in the wire: parser -> PST -> PIT -> softmax path choice -> LAPS header INSERT, on the
512-bit AXI4-Stream (LAPS, IEEE ToN, sections III-B to III-E, Figures 3 and 5, Algorithm 1; issue 13, "Sender";
datasheet docs/laps_tx_wire.md).

A UDP frame toward a destination the PST knows leaves with a LAPS header inserted after its UDP header (type 0,
the chosen path's pid, the frame's send time, the path's anchors as the source route; the UDP destination port
becomes ``laps_port`` and the original one is kept in the header, :mod:`lbpipe.hdl.packet.laps_editor`); every
other frame leaves bit for bit as it came, counted. When the PIT's lookup for a frame probes a stale path
(Algorithm 1 lines 5-8), :class:`lbpipe.hdl.laps.probe.ProbeGen` after the editor sends a probe frame on that path
right behind the frame (its request rides with the anchors through the anchor FIFO and waits beside the editor in
a request FIFO, one per frame).

**Which frames get a header** (choices where the paper is silent): a frame the parser found a whole UDP header in
(IPv4, not a fragment, or IPv6 when the PST keys are 128 bits), not truncated, not already LAPS (``laps`` and
``laps_bad`` clear, destination port not ``laps_port``), whose destination the PST finds (or whose miss the PST's
miss action sends to its default pid set, record 0), and for which the softmax found a valid path. RoCEv2 frames
are UDP frames like any other: the receiver's REMOVE restores them exactly, so their ICRC (which covers the UDP
length and ports) holds again when the host sees them.

**Time.** One free-running 48-bit nanosecond clock: it reads 0 in the first cycle after reset and adds ``tick``
(``tick_ns`` at reset, 4 for 250 MHz) every cycle; ctl table 48 sets its value (index 0) or ``tick`` (index 1).
A frame's time is the clock's value in the cycle its first beat is accepted on ``s_axis`` (an ingress timestamp),
kept in a small FIFO until the parser's item for the frame comes out; the PIT's ``now`` for the frame's lookup and
the header's ``time`` are that value.

Every frame's item goes down the whole chain (one item per frame keeps the order by construction); a frame that
gets no header has its pids zeroed before the PIT (no PIT state changes for it, no probe) and is PASSed. What the
last stage needs waits beside the PIT and the softmax in two FIFOs: the frame's fields and pids from the PST's
output, the slots' anchors from the PIT's output.
"""

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.laps.pit import Pit, PitUpdate, check_parameters as check_pit
from lbpipe.hdl.laps.probe import N_STATS as N_PROBE, ProbeGen, ProbeRequest
from lbpipe.hdl.laps.pst import Pst, check_parameters as check_pst
from lbpipe.hdl.laps.softmax import Softmax
from lbpipe.hdl.packet.laps_editor import LapsEditor, N_COUNTERS as N_EDITOR, OP_INSERT, OP_PASS
from lbpipe.hdl.packet.parser import LAPS_PORT, Parser, check_laps_port
from lbpipe.hdl.lib.stage import counter32, register_slice, skid

__all__ = ["LapsTxWire", "N_STATS", "TABLE_PST", "TABLE_PIT", "TABLE_SOFTMAX", "TABLE_CLOCK", "check_parameters"]

#: Control map: the high nibble of the table picks the stage, the low nibble is the stage's own table.
TABLE_PST, TABLE_PIT, TABLE_SOFTMAX, TABLE_CLOCK = 0, 16, 32, 48
#: Counters: PST (6), PIT (4), LAPS editor (7), the pipeline's own (4), then the probe generator's (1: probes sent).
N_OWN = 4
N_STATS = 6 + 4 + N_EDITOR + N_OWN + N_PROBE
TIME_BITS = 48
TICK_BITS = 8


def check_parameters(*, n_dests, k, ways, buckets, ipv6, n_entries, probe_rule, lfsr_seed, precision, depth,
                     laps_port, tick_ns):
    check_pst(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, user_bits=1)
    check_pit(n_entries=n_entries, k=k, probe_rule=probe_rule, lfsr_seed=lfsr_seed)
    if k > 16:
        raise ValueError(f"k must be at most 16 (the softmax's limit), not {k}")
    check_int("precision", precision)
    check_int("depth", depth)
    check_laps_port(laps_port)
    check_int("tick_ns", tick_ns)
    if not 0 <= tick_ns < 1 << TICK_BITS:
        raise ValueError(f"tick_ns must be from 0 to {(1 << TICK_BITS) - 1}, not {tick_ns}")


def Fields():
    """What the editor's action needs from the parser's item, carried through the PST in its ``user`` field:
    whether the frame looks up paths, the IP family, the header offsets, the frame's time and its UDP destination
    port (a probe's LAPS header keeps it)."""
    return data.StructLayout({"lookup": 1, "ipv6": 1, "l3_off": 8, "l4_off": 8, "now": TIME_BITS, "dport": 16})


def Side(*, k):
    """The fields (``lookup`` now: paths looked up in the PIT), the PST's verdict and the pids, waiting beside the
    PIT and the softmax."""
    return data.StructLayout({**Fields().members, "normal": 1, **{f"pid{j}": 16 for j in range(k)}})


def Anchors(*, k):
    """Per slot the anchor count and anchors of the PIT's result, and its probe (the probed path's pid, anchor
    count and anchors), waiting beside the softmax."""
    return data.StructLayout({**{f"n{j}": 3 for j in range(k)}, **{f"a{j}": 128 for j in range(k)},
                              "probe": 1, "probe_pid": 16, "probe_n": 3, "probe_a": 128})


def _stream(name, shape):
    return SimpleNamespace(valid=Signal(name=f"{name}_valid"), ready=Signal(name=f"{name}_ready"),
                           payload=Signal(shape, name=name))


class LapsTxWire(wiring.Component):
    """Parser, PST, PIT, softmax and LAPS header editor in one component (see the module docstring).

    Parameters
    ----------
    n_dests, k, ways, buckets, ipv6
        The PST's (:class:`lbpipe.hdl.laps.pst.Pst`); ``k`` is also the PIT's and the softmax's.
    n_entries, probe_rule, lfsr_seed
        The PIT's (:class:`lbpipe.hdl.laps.pit.Pit`).
    precision
        The softmax's weight width (:class:`lbpipe.hdl.laps.softmax.Softmax`, ``mode="paper"``).
    depth : int
        The editor's beat FIFO, in beats (the editor is cut-through: frames of any length pass; the FIFO holds a
        frame's beats while its decision is made).
    laps_port : int
        UDP port of the LAPS shim.
    tick_ns : int
        Nanoseconds the clock advances per cycle after reset (4 at 250 MHz), 0 to 255.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
    m_axis : Out(AXI4StreamSignature(512, 1))
    upd : In(stream.Signature(PitUpdate()))
        realVal/time updates of the PIT (from the receiver pipeline's ACKs), straight to the PIT.
    ctl : In(ControlSignature())
        Tables 0-15 PST, 16-31 PIT, 32-47 softmax (each as ``table % 16``), 48 the clock; others ignored.
    stats : Out(32 * N_STATS)
    """

    #: Side FIFO: covers the PIT, the softmax and their skid registers with one item per clock.
    SIDE_DEPTH = 64
    #: Anchor FIFO: covers the softmax and its skid register.
    ANCHOR_DEPTH = 32
    #: Ingress time FIFO: frames between s_axis and the parser's item.
    TIME_DEPTH = 16
    #: Probe request FIFO: one per frame between the editor's action input and the frame's first beat out.
    PROBE_DEPTH = 32

    def __init__(self, *, n_dests=1024, k=8, ways=3, buckets=512, ipv6=False, n_entries=8192, probe_rule="paper",
                 lfsr_seed=0xACE1, precision=16, depth=256, laps_port=LAPS_PORT, tick_ns=4):
        check_parameters(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, n_entries=n_entries,
                         probe_rule=probe_rule, lfsr_seed=lfsr_seed, precision=precision, depth=depth,
                         laps_port=laps_port, tick_ns=tick_ns)
        self._k, self._ipv6, self._laps_port, self._tick = k, ipv6, laps_port, tick_ns
        self._parser = Parser(early=True, laps_port=laps_port)
        self._pst = Pst(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, user_bits=Fields().size)
        self._pit = Pit(n_entries=n_entries, k=k, probe_rule=probe_rule, lfsr_seed=lfsr_seed)
        self._softmax = Softmax(k=k, precision=precision, mode="paper")
        self._editor = LapsEditor(depth=depth, laps_port=laps_port, cut_through=True)
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "upd": In(stream.Signature(PitUpdate())),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def decision_latency(self):
        """Edges from the one that takes a frame's second beat (its only beat, for a one-beat frame) to the one that
        offers its action to the editor, unthrottled: the parser's early item, the PST, the PIT, the register slice
        after the PIT (one), the softmax (the skid registers add none)."""
        return Parser.latency + Pst.latency + Pit.latency + 1 + self._softmax.latency

    @property
    def latency(self):
        """Edges from the one that takes a one-beat frame's beat to the one that offers its first beat on
        ``m_axis``, unthrottled: the decision, then 13 cycles in the editor from the action to the first beat of a
        frame that is in (its ``latency`` of 11 stages and 2 more, measured by ``lbpipe bench``, whose testcase
        checks the datasheet's formula; the editor is cut-through, so a longer frame's is one cycle more, the
        decision starting from its second beat, at every size: docs/laps_tx_wire.md)."""
        return self.decision_latency + 2 + LapsEditor.latency

    def elaborate(self, platform):
        """parser -> (skid) PST -> (skid) fork[PIT, side FIFO] -> (register slice) fork[softmax, anchor FIFO]
        -> (skid) join -> editor; the clock and the ingress-time FIFO beside the parser; ``ctl`` routed by table."""
        m = Module()
        m.submodules.parser = parser = self._parser
        m.submodules.pst = pst = self._pst
        m.submodules.pit = pit = self._pit
        m.submodules.softmax = softmax = self._softmax
        m.submodules.editor = editor = self._editor
        m.submodules.side = side = StreamFIFO(shape=Side(k=self._k), depth=self.SIDE_DEPTH)
        m.submodules.anchors = anchors = StreamFIFO(shape=Anchors(k=self._k), depth=self.ANCHOR_DEPTH)
        wiring.connect(m, parser.m_axis, editor.s_axis)
        m.submodules.probe_req = probe_req = StreamFIFO(shape=ProbeRequest(), depth=self.PROBE_DEPTH)
        m.submodules.probe = probe = ProbeGen(laps_port=self._laps_port)
        wiring.connect(m, editor.m_axis, probe.s_axis)
        wiring.connect(m, probe_req.o, probe.req)
        wiring.connect(m, probe.m_axis, wiring.flipped(self.m_axis))
        wiring.connect(m, wiring.flipped(self.upd), pit.upd)
        set_time, set_tick, value = self._control(m, pst, pit, softmax)
        now = self._clock(m, set_time, set_tick, value)
        stamp = self._ingress(m, parser, now)
        self._lookup(m, parser, stamp, pst)
        self._fork_pit(m, pst, pit, side)
        self._fork_softmax(m, pit, softmax, anchors)
        own = self._join(m, softmax, side, anchors, editor, probe_req)
        m.d.comb += self.stats.eq(Cat(pst.stats, pit.stats, editor.stats, *own, probe.stats))
        return m

    def _clock(self, m, set_time, set_tick, value):
        """The 48-bit ns clock, in two 24-bit halves: the low half adds ``tick``, and its carry picks the high
        half's registered successor (``hi_inc``, kept equal to ``hi + 1``), so no carry chain spans 48 bits.
        Registers ``lo``, ``hi``, ``hi_inc`` and ``tick``; returns the clock value."""
        half = TIME_BITS // 2
        lo, hi = Signal(half, name="clock_lo"), Signal(half, name="clock_hi")
        hi_inc = Signal(half, init=1, name="clock_hi_inc")
        tick = Signal(TICK_BITS, init=self._tick, name="clock_tick")
        nxt = Signal(half + 1, name="clock_lo_next")
        m.d.comb += nxt.eq(lo + tick)
        with m.If(set_time):
            m.d.sync += [lo.eq(value[:half]), hi.eq(value[half:TIME_BITS]),
                         hi_inc.eq(value[half:TIME_BITS] + 1)]
        with m.Else():
            m.d.sync += lo.eq(nxt[:half])
            with m.If(nxt[half]):
                m.d.sync += [hi.eq(hi_inc), hi_inc.eq(hi_inc + 1)]
        with m.If(set_tick):
            m.d.sync += tick.eq(value[:TICK_BITS])
        return Cat(lo, hi)

    def _ingress(self, m, parser, now):
        """Timestamps each frame as its first beat is accepted: the clock's value at that beat, registered with the
        acceptance, goes into the time FIFO a clock later (the FIFO holds ``s_axis`` while it is nearly full).
        Registers whether the next beat starts a frame; returns the FIFO.

        Why a clock later: ``s_axis.tready`` is the parser's, which follows its ``meta.ready``, which waits for the
        FIFO's output; a write enable built from it put the FIFO's read side, the parser's ready and the FIFO's
        level counter on one path (7 levels). Written from registers, the FIFO sees its write a clock late, and the
        stamp is still offered long before its frame's item (two clocks after the write; the item follows the
        frame's last beat by the parser's latency, 7).

        The room is registered and counts the stamp in the register: at most ``TIME_DEPTH - 4`` held two clocks
        before a write, and at most two writes since, so the FIFO holds at most ``TIME_DEPTH - 2`` before the write
        and its storage behind the output register is never full (its ready is then high without looking at it)."""
        m.submodules.stamps = stamps = StreamFIFO(shape=TIME_BITS, depth=self.TIME_DEPTH)
        s, p = self.s_axis, parser.s_axis
        first = Signal(init=1, name="ingress_first")
        room = Signal(init=1, name="ingress_room")
        stamp = Signal(TIME_BITS, name="ingress_stamp", reset_less=True)
        stamp_valid = Signal(name="ingress_stamp_valid")
        m.d.sync += [room.eq(stamps.level < self.TIME_DEPTH - 3),
                     stamp.eq(now), stamp_valid.eq(s.tvalid & s.tready & first)]
        m.d.comb += [
            p.tvalid.eq(s.tvalid & room), p.tdata.eq(s.tdata), p.tkeep.eq(s.tkeep), p.tlast.eq(s.tlast),
            p.tuser.eq(s.tuser), s.tready.eq(p.tready & room),
            stamps.i.payload.eq(stamp), stamps.i.valid.eq(stamp_valid),
        ]
        with m.If(s.tvalid & s.tready):
            m.d.sync += first.eq(s.tlast)
        return stamps

    def _lookup(self, m, parser, stamp, pst):
        """The parser's item and its frame's time to the PST through a skid register; whether the frame is one that
        may get a LAPS header (``lookup``) and the editor's fields ride in the PST's ``user`` field."""
        meta = parser.meta.payload
        side = Signal(Fields())
        family = (meta.ipv4 | meta.ipv6) if self._ipv6 else meta.ipv4
        m.d.comb += [
            side.lookup.eq(meta.udp & family & ~meta.truncated & ~meta.laps & ~meta.laps_bad
                           & (meta.udp_dport != self._laps_port)),
            side.ipv6.eq(meta.ipv6), side.l3_off.eq(meta.l3_off), side.l4_off.eq(meta.l4_off),
            side.now.eq(stamp.o.payload), side.dport.eq(meta.udp_dport),
        ]
        item = Signal(pst.i.payload.shape())
        addr_bits = len(item.dst_ip)
        m.d.comb += [item.kind.eq(meta.kind), item.ipv6.eq(meta.ipv6), item.dst_ip.eq(meta.dst_ip[:addr_bits]),
                     item.user.eq(side), item.tag.eq(meta.tag)]
        both = SimpleNamespace(valid=Signal(name="meta_both_valid"), ready=Signal(name="meta_both_ready"),
                               payload=item)
        m.d.comb += [both.valid.eq(parser.meta.valid & stamp.o.valid),
                     parser.meta.ready.eq(both.ready & stamp.o.valid), stamp.o.ready.eq(both.ready & parser.meta.valid)]
        skid(m, "meta", both.valid, item, both.ready, pst.i)

    def _fork_pit(self, m, pst, pit, side):
        """The PST's result (skid) to the PIT (pids zeroed unless the frame looks up paths and the PST did not send
        it to normal forwarding) and to the side FIFO (the editor's fields and the pids)."""
        res = _stream("pst_res", pst.o.payload.shape())
        skid(m, "pst_res", pst.o.valid, pst.o.payload, pst.o.ready, res)
        k = self._k
        f = Signal(Fields())
        m.d.comb += f.eq(res.payload.user)
        use = Signal(name="use_paths")
        m.d.comb += use.eq(f.lookup & ~res.payload.normal)
        q = pit.i.payload
        m.d.comb += [q.kind.eq(res.payload.kind), q.now.eq(f.now), q.tag.eq(res.payload.tag)]
        m.d.comb += [getattr(q, f"pid{j}").eq(Mux(use, getattr(res.payload, f"pid{j}"), 0)) for j in range(k)]
        s = side.i.payload
        m.d.comb += [s.lookup.eq(use), s.ipv6.eq(f.ipv6), s.l3_off.eq(f.l3_off), s.l4_off.eq(f.l4_off),
                     s.now.eq(f.now), s.dport.eq(f.dport), s.normal.eq(f.lookup & res.payload.normal)]
        m.d.comb += [getattr(s, f"pid{j}").eq(getattr(q, f"pid{j}")) for j in range(k)]
        m.d.comb += [pit.i.valid.eq(res.valid & side.i.ready), side.i.valid.eq(res.valid & pit.i.ready),
                     res.ready.eq(pit.i.ready & side.i.ready)]

    def _fork_softmax(self, m, pit, softmax, anchors):
        """The PIT's result (skid) to the softmax (valid and real_val per slot; the pids wait in the side FIFO, so
        the softmax's are 0 and its ``slot`` is used) and the slots' anchors to the anchor FIFO."""
        res = _stream("pit_res", pit.o.payload.shape())
        # a register slice, not a skid: the PIT's last stage and the softmax's first would otherwise share a path
        register_slice(m, "pit_res", pit.o.valid, pit.o.payload, pit.o.ready, res)
        k, r, q, a = self._k, res.payload, softmax.i.payload, anchors.i.payload
        for j in range(k):
            m.d.comb += [getattr(q, f"valid_{j}").eq(getattr(r, f"valid{j}")),
                         getattr(q, f"real_val_{j}").eq(getattr(r, f"real_val{j}")),
                         getattr(a, f"n{j}").eq(getattr(r, f"n_anchors{j}")),
                         getattr(a, f"a{j}").eq(Cat(*[getattr(r, f"anchor{j}_{n}") for n in range(4)]))]
        probed = Signal(k, name="probed")
        m.d.comb += probed.eq(Cat(*[r.probe_slot == j for j in range(k)]))
        m.d.comb += [a.probe.eq(r.probe_valid), a.probe_pid.eq(r.probe_pid),
                     a.probe_n.eq(_or_all([Mux(probed[j], getattr(r, f"n_anchors{j}"), 0) for j in range(k)])),
                     a.probe_a.eq(_or_all([Mux(probed[j], Cat(*[getattr(r, f"anchor{j}_{n}") for n in range(4)]), 0)
                                           for j in range(k)]))]
        m.d.comb += [q.tag.eq(r.tag),
                     softmax.i.valid.eq(res.valid & anchors.i.ready), anchors.i.valid.eq(res.valid & softmax.i.ready),
                     res.ready.eq(softmax.i.ready & anchors.i.ready)]

    def _join(self, m, softmax, side, anchors, editor, probes):
        """The softmax's choice (skid), the side FIFO's and the anchor FIFO's heads into the editor's action: INSERT
        of the chosen slot's pid, anchors and count with the frame's time, or PASS. Returns the pipeline's own
        counters (frames not looked up, sent to normal forwarding by a PST miss, with no valid path, given a
        header to insert)."""
        ch = _stream("choice", softmax.o.payload.shape())
        skid(m, "choice", softmax.o.valid, softmax.o.payload, softmax.o.ready, ch)
        k, s, a, c = self._k, side.o.payload, anchors.o.payload, ch.payload
        onehot = Signal(k, name="chosen")
        m.d.comb += onehot.eq(Cat(*[c.slot == j for j in range(k)]))
        pid, count, anch = Signal(16), Signal(3), Signal(128)
        m.d.comb += [
            pid.eq(_or_all([Mux(onehot[j], getattr(s, f"pid{j}"), 0) for j in range(k)])),
            count.eq(_or_all([Mux(onehot[j], getattr(a, f"n{j}"), 0) for j in range(k)])),
            anch.eq(_or_all([Mux(onehot[j], getattr(a, f"a{j}"), 0) for j in range(k)])),
        ]
        insert = Signal(name="insert")
        m.d.comb += insert.eq(s.lookup & ~c.none)
        act = editor.act.payload
        m.d.comb += [
            act.tag.eq(c.tag), act.op.eq(Mux(insert, OP_INSERT, OP_PASS)), act.drop.eq(0), act.ipv6.eq(s.ipv6),
            act.l3_off.eq(s.l3_off), act.l4_off.eq(s.l4_off), act.count.eq(count), act.probe.eq(0), act.ack.eq(0),
            act.sr_idx.eq(0), act.pid.eq(pid), act.time.eq(s.now), act.anchors.eq(anch),
        ]
        # the frame's probe request, in frame order beside the editor (one per frame)
        req = probes.i.payload
        m.d.comb += [req.probe.eq(a.probe), req.pid.eq(a.probe_pid), req.count.eq(a.probe_n),
                     req.anchors.eq(a.probe_a), req.ipv6.eq(s.ipv6), req.l3_off.eq(s.l3_off), req.l4_off.eq(s.l4_off),
                     req.time.eq(s.now), req.dport.eq(s.dport)]
        room = probes.i.ready
        all_in = ch.valid & side.o.valid & anchors.o.valid & room
        m.d.comb += [editor.act.valid.eq(all_in), probes.i.valid.eq(all_in & editor.act.ready),
                     ch.ready.eq(editor.act.ready & side.o.valid & anchors.o.valid & room),
                     side.o.ready.eq(editor.act.ready & ch.valid & anchors.o.valid & room),
                     anchors.o.ready.eq(editor.act.ready & ch.valid & side.o.valid & room)]
        done = all_in & editor.act.ready
        return [counter32(m, "not_looked_up", done & ~s.lookup & ~s.normal),
                counter32(m, "normal", done & s.normal),
                counter32(m, "no_path", done & s.lookup & c.none),
                counter32(m, "inserts", done & insert)]

    def _control(self, m, pst, pit, softmax):
        """Route a command by its table's high nibble (0 PST, 1 PIT, 2 softmax, 3 the clock; others taken and
        ignored), each registered with a valid flip-flop per stage before it is offered, so ``ctl.ready`` and
        each stage's ``ctl.valid`` are flip-flops. Returns the clock's set strobes (registered) and the value.

        Each stage (and the clock) has a command register of its own, loaded only with the commands routed to it:
        with one register shared, synthesis shared the stages' index decodes too and chained them (7 levels from
        the register to the softmax's configuration strobes and the PST's command register)."""
        c = self.ctl.payload
        names = ("pst", "pit", "softmax")
        cmds = [Signal.like(c, reset_less=True, name=f"ctl_cmd_{n}") for n in names]
        value = Signal.like(c.data, reset_less=True, name="ctl_clock_value")
        to = [Signal(name=f"ctl_to_{n}") for n in names]
        set_time, set_tick = Signal(name="set_time"), Signal(name="set_tick")
        busy = Cat(*to).any()
        m.d.comb += self.ctl.ready.eq(~busy)
        for stage, flag, cmd in zip((pst, pit, softmax), to, cmds):
            m.d.comb += [stage.ctl.payload.eq(cmd), stage.ctl.payload.table.eq(cmd.table[:4]),
                         stage.ctl.valid.eq(flag)]
        m.d.sync += [set_time.eq(0), set_tick.eq(0)]
        with m.If(~busy):
            for n, (flag, cmd) in enumerate(zip(to, cmds)):
                ours = self.ctl.valid & (c.table[4:] == n)
                m.d.sync += flag.eq(ours)
                with m.If(ours):
                    m.d.sync += cmd.eq(c)
            clock = self.ctl.valid & (c.table == TABLE_CLOCK)
            with m.If(clock):
                m.d.sync += value.eq(c.data)
            m.d.sync += [set_time.eq(clock & (c.index == 0)), set_tick.eq(clock & (c.index == 1))]
        for stage, flag in zip((pst, pit, softmax), to):
            with m.If(flag & stage.ctl.ready):
                m.d.sync += flag.eq(0)
        return set_time, set_tick, value


def _or_all(values):
    out = values[0]
    for v in values[1:]:
        out = out | v
    return out
