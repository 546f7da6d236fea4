"""LAPS per-path loss detection in hardware (LAPS, IEEE ToN: section III-G, Algorithm 3; datasheet
docs/laps_loss.md).

The paper keeps, per path, the (flow, sequence) of the data packets sent on it and not yet acknowledged; an ACK on
path p (ACKs take the reverse of their packet's path, so they come back in send order) declares every older entry
of p lost, and a timer of 2 x realVal declares all of p's outstanding entries lost. The paper runs this on a CPU
("Algorithm 3 ... exceeds the resources available on the FPGA"); this block does it at one slot per clock.

**Slots.** The input is one *slot* per clock: the NIC's ``now`` and at most one send and one ACK. Every slot
gives one result: what that slot declared lost. Within a slot the ACK is applied first, then the send. A slot
without a (valid) ACK checks one path's timer instead (a sweep pointer over all paths).

**Storage: per-path rings in one shared block-RAM pool.** Path p owns ``depth`` slots of the pool, one memory word
(``depth`` x (flow, seq)), written one lane per send; a 16-bit tail (sends so far) and head (oldest unresolved
position) per path. An ACK reads p's whole word and compares every lane at once, so the loss scan is one clock
whatever the number of losses, and a forged or duplicated ACK costs the same clock and changes nothing. The
outstanding entries are the positions [max(head, tail - depth), tail); a send that overwrites an outstanding entry
(the ring was full) hands the overwritten entry out as an *eviction* (reason overflow, counted) instead of dropping
it.

**Match rule.** The newest lane equal to the ACK's (flow, seq) is the acknowledged position m; the ACK is fresh if
m is at or after the head. A fresh ACK declares [max(head, tail - depth), m) lost (in send order) and moves the head
to m + 1; a stale one (duplicate, reordered, after a timeout) or an unknown one (forged flow, sequence never sent
on p) changes nothing but is counted, as is an ACK whose pid is out of range.

**Timer.** Every send on p restarts p's deadline to now + 2 x real_val (the real_val the PIT gave the send); a
sweep visit to p at or after the deadline declares every outstanding entry of p lost and moves the head to the tail.

Pipeline (banks b0 .. b12, all moved by one ``adv``; latency 13)::

    accept: tail read (send)   -> b1 tail RMW (fwd b2, b3): write tail, ring lane, deadline; read word/tail/deadline
    b3 lane compares, evicted lane, deadline halves -> b4 age order; head read -> b5 newest match
    b6 m = tail-1-a, head from memory or b8/b9 (two, three slots ahead), relation to b7 -> b7 head RMW (fwd b8):
    fresh, lagging, write head -> b8 outstanding; head read (send) -> b9 count, first lane
    b10 rotate low bits, eviction test -> b11 rotate high bits, mask -> b12 result (registers) -> o

Every cross-read is placed after the writes of all earlier slots (the ring word, tail and deadline are read at b1,
where sends write them; the eviction test reads the head at b8, after b7 writes it), so results never depend on
idle cycles. The tail loop (b1) forwards the two slots ahead. The head loop forwards three: the slots two and three
ahead into a register at b6, and the slot one ahead at b7 without a carry chain in the loop (its new head is m' + 1,
its tail T', T' - depth or the head it kept; with T = T' + (its send on q) the compares against the first three are
on small numbers, worked out at b6).
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS
from lbpipe.hdl.lib.stage import RegisterBanks

__all__ = ["Loss", "LossItem", "LossResult", "check_parameters", "N_STATS", "POS_BITS", "SEQ_BITS", "PID_BITS",
           "ACK_NONE", "ACK_MATCHED", "ACK_STALE", "ACK_UNKNOWN", "ACK_BAD_PID", "SEND_NONE", "SEND_RECORDED",
           "SEND_BAD_PID", "REASON_NONE", "REASON_ACK_ORDER", "REASON_TIMEOUT"]

TIME_BITS = 48
VAL_BITS = 32
SEQ_BITS = 32
PID_BITS = 16
POS_BITS = 16                   # ring positions (tail, head), modulo 2**16
_HALF = 24
ACK_NONE, ACK_MATCHED, ACK_STALE, ACK_UNKNOWN, ACK_BAD_PID = 0, 1, 2, 3, 4
SEND_NONE, SEND_RECORDED, SEND_BAD_PID = 0, 1, 2
REASON_NONE, REASON_ACK_ORDER, REASON_TIMEOUT = 0, 1, 2
#: sends, sends with a bad pid, ACKs matched, stale, unknown, bad pid, entries lost by ACK order, entries lost by
#: timeout, timeouts that declared something, evictions
N_STATS = 10
LAST = 12                       # the result bank


def check_parameters(*, n_paths, depth, flow_bits):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_paths", n_paths), ("depth", depth), ("flow_bits", flow_bits)):
        check_int(name, value)
    if not 2 <= n_paths <= 1 << PID_BITS or n_paths & (n_paths - 1):
        raise ValueError(f"n_paths must be a power of two from 2 to 65536, not {n_paths}")
    if depth not in (4, 8, 16, 32):
        raise ValueError(f"depth must be 4, 8, 16 or 32, not {depth}")
    if not 1 <= flow_bits <= 32:
        raise ValueError(f"flow_bits must be 1 to 32, not {flow_bits}")


def LossItem(*, flow_bits=16):
    """One slot: ``now`` and at most one send (``send_valid``) and one ACK (``ack_valid``)."""
    return data.StructLayout({
        "kind": PacketKind, "now": TIME_BITS,
        "send_valid": 1, "send_flow": flow_bits, "send_seq": SEQ_BITS, "send_pid": PID_BITS,
        "send_real_val": VAL_BITS,
        "ack_valid": 1, "ack_flow": flow_bits, "ack_seq": SEQ_BITS, "ack_pid": PID_BITS,
        "tag": TAG_BITS})


def LossResult(*, depth=16, flow_bits=16):
    """What one slot declared: the ACK's and the send's outcome, the entries lost by ACK order or timeout (oldest
    first, ``lost_count`` of them, the rest 0) and the entry a full ring evicted."""
    fields = {"kind": PacketKind, "tag": TAG_BITS, "ack": 3, "send": 2, "lost_reason": 2, "lost_pid": PID_BITS,
              "lost_count": (depth).bit_length()}
    for j in range(depth):
        fields.update({f"lost{j}_flow": flow_bits, f"lost{j}_seq": SEQ_BITS})
    fields.update({"evict": 1, "evict_pid": PID_BITS, "evict_flow": flow_bits, "evict_seq": SEQ_BITS})
    return data.StructLayout(fields)


def _sign(x):
    """Top bit of a 16-bit modular difference: 1 when ``x`` is 'negative' (before)."""
    return x[POS_BITS - 1]


class Loss(wiring.Component):
    """Per-path loss detection: rings of unacknowledged (flow, seq), the ACK-order rule and the per-path timeout.

    Parameters
    ----------
    n_paths : int
        Path ids tracked, a power of two from 2 to 65536; a pid at or above it is out of range (counted).
    depth : int
        Entries per path (ring size): 4, 8, 16 or 32. The pool is ``n_paths x depth`` entries.
    flow_bits : int
        Width of the flow id, 1 to 32.

    Members
    -------
    i : In(stream.Signature(LossItem(flow_bits)))
    o : Out(stream.Signature(LossResult(depth, flow_bits)))
    ctl : In(ControlSignature())
        No tables: commands are accepted and ignored.
    stats : Out(32 * 10)
        Wrapping counters, cleared by reset (see ``N_STATS``).
    """

    latency = LAST + 1

    def __init__(self, *, n_paths=1024, depth=16, flow_bits=16):
        check_parameters(n_paths=n_paths, depth=depth, flow_bits=flow_bits)
        self._n, self._L, self._fb = n_paths, depth, flow_bits
        self._pb = (n_paths - 1).bit_length()
        self._lb = (depth - 1).bit_length()
        self._kb = flow_bits + SEQ_BITS
        super().__init__({
            "i": In(stream.Signature(LossItem(flow_bits=flow_bits))),
            "o": Out(stream.Signature(LossResult(depth=depth, flow_bits=flow_bits))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """State bits: the pool, a tail, a head and a deadline per path."""
        return self._n * (self._L * self._kb + 2 * POS_BITS + TIME_BITS)

    def elaborate(self, platform):
        """The datasheet's block diagram: memories; accept; b1 tail RMW and pool write; b3 compares; b4 age order;
        b5 newest match; b6 position; b7 head RMW; b8 .. b9 count; b10 .. b11 ordered output, eviction; b12
        result; reset sweep; counters."""
        m = Module()
        self._m = m
        n, L, kb = self._n, self._L, self._kb
        self._ent = memory.Memory(shape=L * kb, depth=n, init=[])
        self._tail = memory.Memory(shape=POS_BITS, depth=n, init=[])
        self._head = memory.Memory(shape=POS_BITS, depth=n, init=[])
        self._sdl = memory.Memory(shape=TIME_BITS, depth=n, init=[])
        m.submodules.pool, m.submodules.tails = self._ent, self._tail
        m.submodules.heads, m.submodules.deadlines = self._head, self._sdl
        adv = Signal()
        self._sweep = Signal(init=1, name="sweeping")
        self._sweep_addr = Signal(self._pb, name="sweep_addr")
        pipe = RegisterBanks(m, adv, LAST)
        self._accept(m, pipe, adv)
        self._tail_rmw(m, pipe, adv)
        self._compare(pipe)
        self._age_order(pipe)
        self._newest(m, pipe, adv)
        self._head_rmw(m, pipe, adv)
        self._count(pipe)
        self._ordered(pipe)
        self._eviction(m, pipe, adv)
        self._output(m, pipe, adv)
        self._reset_sweep(m)
        self._counters(m, pipe, adv)
        return m

    # -- accept and the send side ---------------------------------------------------------------------------------

    def _in_range(self, pid):
        return Const(1) if self._n == 1 << PID_BITS else pid < self._n

    def _accept(self, m, pipe, adv):
        """Accept (b0 registers): the slot; the A-operation's path (the ACK's pid, else the sweep pointer, which
        then moves on); the send's tail read issued; deadline low half now + 2 x real_val."""
        p = self.i.payload
        pb = self._pb
        take = Signal()
        m.d.comb += [self.i.ready.eq(adv & ~self._sweep), take.eq(self.i.valid & self.i.ready),
                     self.ctl.ready.eq(1)]
        sweep_c = Signal(pb, name="sweep_pointer")
        a_ok = p.ack_valid & self._in_range(p.ack_pid)
        with m.If(take & ~a_ok):
            m.d.sync += sweep_c.eq(sweep_c + 1)
        self._rd_t1 = self._tail.read_port()
        m.d.comb += [self._rd_t1.addr.eq(p.send_pid[:pb]), self._rd_t1.en.eq(adv)]
        pipe.put("v", 0, take, 1)
        pipe.put("kind", 0, p.kind, PacketKind)
        pipe.put("tag", 0, p.tag, TAG_BITS)
        pipe.put("now", 0, p.now, TIME_BITS, until=3)
        pipe.put("s_v", 0, p.send_valid, 1)
        pipe.put("s_ok", 0, p.send_valid & self._in_range(p.send_pid), 1)
        pipe.put("s_pid", 0, p.send_pid[:pb], pb)
        pipe.put("s_key", 0, Cat(p.send_flow, p.send_seq), self._kb, until=1)
        rv2 = Cat(Const(0, 1), p.send_real_val)
        pipe.put("sdl_lo", 0, p.now[:_HALF] + rv2[:_HALF], _HALF + 1, until=1)
        pipe.put("rv2_hi", 0, rv2[_HALF:], len(rv2) - _HALF, until=1)
        pipe.put("a_v", 0, p.ack_valid, 1)
        pipe.put("a_ok", 0, a_ok, 1)
        pipe.put("q", 0, Mux(a_ok, p.ack_pid[:pb], sweep_c), pb)
        pipe.put("a_key", 0, Cat(p.ack_flow, p.ack_seq), self._kb, until=3)

    def _tail_rmw(self, m, pipe, adv):
        """b1: the send's tail (memory, or a send of the same path one or two slots ahead: b2, b3), the tail
        written + 1, the ring lane (tail mod depth) and the deadline written. The A-operation's reads (word, tail,
        deadline of q) and the eviction read (word of the send's path: the lane before this send overwrites it) are
        issued here too: sends of earlier slots have written, this slot's has not."""
        b0, b1, b2, b3 = pipe[0], pipe[1], pipe[2], pipe[3]
        L, lb = self._L, self._lb
        fw1 = pipe.put("t_fw1", 1, b1["v"] & b1["s_ok"] & (b1["s_pid"] == b0["s_pid"]), 1, until=1)
        fw2 = pipe.put("t_fw2", 1, b2["v"] & b2["s_ok"] & (b2["s_pid"] == b0["s_pid"]), 1, until=1)
        t_rd = pipe.put("t_rd", 1, self._rd_t1.data, POS_BITS, until=1)
        t = Signal(POS_BITS, name="b1_send_pos")
        pipe.put("t_new", 2, t + 1, POS_BITS, until=3)
        pipe.put("t", 2, t, POS_BITS)
        m.d.comb += t.eq(Mux(fw1, b2["t_new"], Mux(fw2, b3["t_new"], t_rd)))
        write = adv & b1["v"] & b1["s_ok"] & ~self._sweep
        wt, ws = self._tail.write_port(), self._sdl.write_port()
        we = self._ent.write_port(granularity=self._kb)
        hi = b1["now"][_HALF:] + b1["rv2_hi"] + b1["sdl_lo"][_HALF]
        # The eviction read uses the write port's address, so the two share one block-RAM port (read-first).
        waddr = Signal(self._pb, name="b1_pool_addr")
        m.d.comb += waddr.eq(Mux(self._sweep, self._sweep_addr, b1["s_pid"]))
        m.d.comb += [
            wt.addr.eq(Mux(self._sweep, self._sweep_addr, b1["s_pid"])),
            wt.data.eq(Mux(self._sweep, 0, t + 1)), wt.en.eq(write | self._sweep),
            ws.addr.eq(Mux(self._sweep, self._sweep_addr, b1["s_pid"])),
            ws.data.eq(Mux(self._sweep, 0, Cat(b1["sdl_lo"][:_HALF], hi))), ws.en.eq(write | self._sweep),
            we.addr.eq(waddr),
            we.data.eq(Cat(Mux(self._sweep, 0, b1["s_key"]) for _ in range(L))),
        ]
        for j in range(L):
            m.d.comb += we.en[j].eq((write & (t[:lb] == j)) | self._sweep)
        reads = {}
        for name, mem, addr in (("word", self._ent, b1["q"]), ("tail_e", self._tail, b1["q"]),
                                ("sdl", self._sdl, b1["q"]), ("ev_word", self._ent, waddr)):
            rp = mem.read_port()
            m.d.comb += [rp.addr.eq(addr), rp.en.eq(adv)]
            reads[name] = rp.data
        self._b1_reads = reads

    # -- the A-operation: ACK match or timer check ------------------------------------------------------------------

    def _compare(self, pipe):
        """b3: the word, tail and deadline registered (b3); b4: one equality per lane, the evicted lane's entry,
        ``now - deadline`` in 24-bit halves."""
        L, kb, lb = self._L, self._kb, self._lb
        r = self._b1_reads
        word = pipe.put("word", 3, r["word"], L * kb, until=11)
        t_e = pipe.put("tail_e", 3, r["tail_e"], POS_BITS, until=9)
        sdl = pipe.put("sdl", 3, r["sdl"], TIME_BITS, until=3)
        evw = pipe.put("ev_word", 3, r["ev_word"], L * kb, until=3)
        b3 = pipe[3]
        key = b3["a_key"]
        pipe.put("eq", 4, Cat(word[j * kb:(j + 1) * kb] == key for j in range(L)), L, until=4)
        lanes = Array(evw[j * kb:(j + 1) * kb] for j in range(L))
        pipe.put("ev_key", 4, lanes[b3["t"][:lb]], kb)
        pipe.put("sh", 4, ~(t_e - 1)[:lb], lb, until=4)
        now = b3["now"]
        lo = Cat(now[:_HALF], Const(1, 1)) - sdl[:_HALF]
        nb = pipe.put("dl_nb", 4, lo[_HALF], 1, until=4)
        s0 = pipe.put("dl_s0", 4, (now[_HALF:] - sdl[_HALF:])[TIME_BITS - _HALF - 1], 1, until=4)
        s1 = pipe.put("dl_s1", 4, (now[_HALF:] + ~sdl[_HALF:])[TIME_BITS - _HALF - 1], 1, until=4)
        pipe.put("passed", 5, ~Mux(nb, s0, s1), 1, until=6)

    def _age_order(self, pipe):
        """b4 -> b5: the lane matches in age order (age 0 = the newest send, lane tail - 1)."""
        L = self._L
        b4 = pipe[4]
        eq = b4["eq"]
        rev = Cat(eq[L - 1 - j] for j in range(L))
        pipe.put("eq_age", 5, (Cat(rev, rev) >> b4["sh"])[:L], L, until=5)

    def _newest(self, m, pipe, adv):
        """b5 -> b6: the newest match's age (priority encoder); the head read for q issued at b4 lands in b6, and
        whether the slots two and three ahead (b7, b8) act on q. b6 -> b7: m = tail - 1 - age; the new head if the
        slot moves it to m + 1 or the tail (``h_jump``); tail - depth; the head from memory or from the slots two or
        three ahead (``h_far``); and the relation to the slot one ahead (b7) on q, worked out on small numbers
        because its new head is only known at the end of this clock (see ``_head_rmw``)."""
        L, lb = self._L, self._lb
        b4, b5, b6, b7, b8, b9 = (pipe[k] for k in range(4, 10))
        self._new = Signal(POS_BITS, name="b7_head_new")       # driven in _head_rmw
        pipe.put("h_new", 8, self._new, POS_BITS, until=9)
        e = b5["eq_age"]
        age = Const(0, lb)
        for j in reversed(range(L)):
            age = Mux(e[j], j, age)
        pipe.put("found", 6, e != 0, 1, until=7)
        pipe.put("age", 6, age, lb, until=9)
        self._rd_h = self._head.read_port()
        m.d.comb += [self._rd_h.addr.eq(b4["q"]), self._rd_h.en.eq(adv)]
        h_rd = pipe.put("h_rd", 6, self._rd_h.data, POS_BITS, until=6)
        pipe.put("h_fw2", 6, b7["v"] & (b7["q"] == b5["q"]), 1, until=6)
        pipe.put("h_fw3", 6, b8["v"] & (b8["q"] == b5["q"]), 1, until=6)
        t_e = b6["tail_e"]
        a_ok6 = b6["a_ok"]
        fire6 = ~a_ok6 & b6["passed"]
        pipe.put("m", 7, t_e + ~Cat(b6["age"], Const(0, POS_BITS - lb)), POS_BITS, until=7)
        pipe.put("h_jump", 7, Mux(fire6, t_e, t_e - b6["age"]), POS_BITS, until=7)
        pipe.put("t_less", 7, t_e - L, POS_BITS, until=7)
        pipe.put("fire", 7, fire6, 1, until=9)
        pipe.put("af", 7, a_ok6 & b6["found"], 1, until=7)
        pipe.put("h_far", 7, Mux(b6["h_fw2"], b8["h_new"], Mux(b6["h_fw3"], b9["h_new"], h_rd)), POS_BITS, until=7)
        pipe.put("h_fw1", 7, b7["v"] & (b7["q"] == b6["q"]), 1, until=7)
        # The slot one ahead (b7) on the same path read tail T' and this one T = T' + d (d = 1 when its send was on
        # q), so against each head it can leave the compares are small: m - (T' - a') = d - 1 - a + a',
        # m - T' = d - 1 - a, m - (T' - depth) >= 0 (before: a' + d <= a; d = 1 and a = 0 not before; never).
        d = t_e[0] ^ b7["tail_e"][0]
        a, a1 = b6["age"], b7["age"]
        pipe.put("rel_b_fresh", 7, (a1 + d) <= a, 1, until=7)
        pipe.put("rel_b_fire", 7, ~(d & (a == 0)), 1, until=7)

    def _head_rmw(self, m, pipe, adv):
        """b7: the head of q and the new head, written back. The head is the new head of the slot one ahead (b8)
        if it acted on q, else ``h_far`` (registered at b6 from memory or the slots two or three ahead). Fresh (an
        ACK whose match is at or after the head) and lagging (head at or before tail - depth) compare m and
        tail - depth with the head: against ``h_far``, and against the head b8 kept, each is a carry chain from
        registers; when b8 moved the head (to m' + 1, its tail or its tail - depth) the answer is the small-number
        relation registered at b6. So the new head (m + 1 or the tail: ``h_jump``; tail - depth; the head) is one
        LUT after those bits, and the loop from b8's new head back to itself is two LUTs."""
        b7, b8 = pipe[7], pipe[8]
        head = Signal(POS_BITS, name="b7_head")
        fresh = Signal(name="b7_fresh")
        lagging = Signal(name="b7_lagging")
        fire, new = b7["fire"], self._new
        pipe.put("moved", 8, fresh | fire | lagging, 1, until=8)
        pipe.put("head", 8, head, POS_BITS, until=9)
        pipe.put("fresh", 8, fresh, 1, until=9)
        f1 = b7["h_fw1"]
        h_far, h8 = b7["h_far"], b8["h_new"]
        fresh8, fire8, moved8 = b8["fresh"], b8["fire"], b8["moved"]
        rel_b = Mux(fresh8, b7["rel_b_fresh"], fire8 & b7["rel_b_fire"])
        # After a fresh b8, tail - depth - (T' - a') = d - depth + a' <= 0: lagging only when equal, where moving
        # the head to tail - depth leaves it where it is; so lagging is taken as 0 there.
        rel_l = ~fresh8 & ~fire8
        # Written so that the last LUT of ``jump`` has six inputs: the two carry-chain bits and four early ones.
        early = fire | (f1 & moved8 & b7["af"] & ~rel_b)
        fresh_k = f1 & ~moved8 & ~_sign(b7["m"] - b8["head"])
        fresh_f = ~f1 & ~_sign(b7["m"] - h_far)
        jump = Signal(name="b7_jump")
        m.d.comb += jump.eq(early | (b7["af"] & (fresh_k | fresh_f)))
        m.d.comb += lagging.eq(Mux(f1, Mux(moved8, rel_l, ~_sign(b7["t_less"] - b8["head"])),
                                   ~_sign(b7["t_less"] - h_far)))
        m.d.comb += head.eq(Mux(f1, h8, h_far))
        m.d.comb += fresh.eq(jump & ~fire)
        m.d.comb += new.eq(Mux(jump, b7["h_jump"], Mux(lagging, b7["t_less"], head)))
        pipe.put("ack", 8, Mux(b7["a_v"] & ~b7["a_ok"], ACK_BAD_PID,
                               Mux(~b7["a_ok"], ACK_NONE,
                                   Mux(fresh, ACK_MATCHED, Mux(b7["found"], ACK_STALE, ACK_UNKNOWN)))), 3)
        wh = self._head.write_port()
        m.d.comb += [wh.addr.eq(Mux(self._sweep, self._sweep_addr, b7["q"])),
                     wh.data.eq(Mux(self._sweep, 0, new)),
                     wh.en.eq((adv & b7["v"] & ~self._sweep) | self._sweep)]

    def _count(self, pipe):
        """b8: outstanding = tail - head; b9: n = min(outstanding, depth); the entries declared (fresh: n - age - 1,
        fire: n) and the lane of the oldest (tail - n: the tail's lane when n = depth, else the head's), each
        worked out for both cases of n in parallel."""
        L, lb = self._L, self._lb
        b8 = pipe[8]
        pipe.put("d", 9, b8["tail_e"] - b8["head"], POS_BITS, until=9)
        b9 = pipe[9]
        d, age = b9["d"], b9["age"]
        big = d[lb:] != 0                       # n = depth; else n = d, and tail - n = head (mod depth)
        n_out = Mux(big, L, d[:lb])
        fresh_cnt = Mux(big, L - 1 - age, d[:lb] - age - 1)
        cnt = Mux(b9["fresh"], fresh_cnt, Mux(b9["fire"], n_out, 0))
        pipe.put("count", 10, cnt[:lb + 1], lb + 1)
        pipe.put("first", 10, Mux(big, b9["tail_e"][:lb], b9["head"][:lb]), lb, until=10)
        pipe.put("lost_ack", 10, b9["fresh"], 1)

    def _ordered(self, pipe):
        """b10 -> b11 -> b12: the word rotated so that the oldest declared entry is entry 0 (low bits of the first
        lane, then the high bits), entries past the count zeroed."""
        L, kb, lb = self._L, self._kb, self._lb
        b10, b11 = pipe[10], pipe[11]
        lanes = [b10["word"][j * kb:(j + 1) * kb] for j in range(L)]
        lo = b10["first"][:2]
        rot1 = Cat(Array(lanes[(j + s) % L] for s in range(4))[lo] for j in range(L))
        pipe.put("rot1", 11, rot1, L * kb, until=11)
        pipe.put("first_hi", 11, b10["first"][2:], lb - 2, until=11)
        lanes = [b11["rot1"][j * kb:(j + 1) * kb] for j in range(L)]
        groups = L // 4
        out = []
        for j in range(L):
            sel = Array(lanes[(j + 4 * s) % L] for s in range(groups))[b11["first_hi"]] if groups > 1 else lanes[j]
            out.append(Mux(j < b11["count"], sel, 0))
        pipe.put("lost", 12, Cat(out), L * kb)

    # -- eviction, output, reset, counters --------------------------------------------------------------------------

    def _eviction(self, m, pipe, adv):
        """b8: the head of the send's path read (after this slot's A-operation wrote it at b7); b10: send position -
        depth - head; b11: the send overwrote an outstanding entry (position - depth at or after the head)."""
        b8, b10, b11 = pipe[8], pipe[10], pipe[11]
        rd = self._head.read_port()
        m.d.comb += [rd.addr.eq(b8["s_pid"]), rd.en.eq(adv)]
        h = pipe.put("ev_head", 10, rd.data, POS_BITS, until=10)
        pipe.put("ev_diff", 11, b10["t"] - self._L - h, POS_BITS, until=11)
        pipe.put("evict", 12, b11["s_ok"] & ~_sign(b11["ev_diff"]), 1)

    def _output(self, m, pipe, adv):
        """b12: the result straight from registers."""
        b = pipe[LAST]
        L, kb = self._L, self._kb
        out = self.o.payload
        cnt = b["count"]
        m.d.comb += [adv.eq(~b["v"] | self.o.ready), self.o.valid.eq(b["v"]),
                     out.kind.eq(b["kind"]), out.tag.eq(b["tag"]), out.ack.eq(b["ack"]),
                     out.send.eq(Mux(b["s_v"], Mux(b["s_ok"], SEND_RECORDED, SEND_BAD_PID), SEND_NONE)),
                     out.lost_count.eq(cnt),
                     out.lost_reason.eq(Mux(cnt == 0, REASON_NONE,
                                            Mux(b["lost_ack"], REASON_ACK_ORDER, REASON_TIMEOUT))),
                     out.lost_pid.eq(Mux(cnt == 0, 0, b["q"])),
                     out.evict.eq(b["evict"]),
                     out.evict_pid.eq(Mux(b["evict"], b["s_pid"], 0)),
                     out.evict_flow.eq(Mux(b["evict"], b["ev_key"][:self._fb], 0)),
                     out.evict_seq.eq(Mux(b["evict"], b["ev_key"][self._fb:], 0))]
        for j in range(L):
            lane = b["lost"][j * kb:(j + 1) * kb]
            m.d.comb += [out[f"lost{j}_flow"].eq(lane[:self._fb]), out[f"lost{j}_seq"].eq(lane[self._fb:])]

    def _reset_sweep(self, m):
        """After reset the tails, heads, deadlines and ring words are written 0, one path a clock, with the input not
        ready (a stale lane would otherwise turn an unknown ACK into a stale one)."""
        with m.If(self._sweep):
            m.d.sync += self._sweep_addr.eq(self._sweep_addr + 1)
            with m.If(self._sweep_addr == self._n - 1):
                m.d.sync += self._sweep.eq(0)

    def _counters(self, m, pipe, adv):
        """``stats``, counted as a result leaves b12; each increment is decoded a bank earlier (b11 -> b12), so a
        counter is one adder after a register."""
        b11, b = pipe[11], pipe[LAST]
        names = ("n_sends", "n_sends_bad_pid", "n_acks_matched", "n_acks_stale", "n_acks_unknown", "n_acks_bad_pid",
                 "n_lost_ack_order", "n_lost_timeout", "n_timeouts", "n_evictions")
        c = [Signal(32, name=n) for n in names]
        cnt, ack, by_ack = b11["count"], b11["ack"], b11["lost_ack"]
        incs = [b11["s_v"] & b11["s_ok"], b11["s_v"] & ~b11["s_ok"], ack == ACK_MATCHED, ack == ACK_STALE,
                ack == ACK_UNKNOWN, ack == ACK_BAD_PID]
        inc = [pipe.put(f"inc{k}", LAST, v, 1, until=LAST) for k, v in enumerate(incs)]
        inc.append(pipe.put("inc_ack_order", LAST, Mux(by_ack, cnt, 0), len(cnt), until=LAST))
        inc.append(pipe.put("inc_timeout", LAST, Mux(by_ack, 0, cnt), len(cnt), until=LAST))
        inc.append(pipe.put("inc_timeouts", LAST, ~by_ack & (cnt != 0), 1, until=LAST))
        inc.append(b["evict"])
        with m.If(adv & b["v"]):
            m.d.sync += [ck.eq(ck + ik) for ck, ik in zip(c, inc)]
        m.d.comb += self.stats.eq(Cat(*c))
