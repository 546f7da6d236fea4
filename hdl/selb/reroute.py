"""SELB source ToR: per-flow rerouting within a path cluster (SELB, paper 004: section III "Rerouting Strategy";
datasheet docs/selb_reroute.md).

Per flow (the flow index from the parser layer, as flb-route's) the flow table holds a valid bit, the flow's current
path, whether a reroute is in flight, the time (``now`` ticks) of the last reroute and the flow's epoch bit. Each
item is a packet with its flow, ``now`` and what ``selb-cluster`` returned for the flow's current path (``path``,
``congested``, ``alt``, ``shortest``). A packet of a flow whose current path is congested, when no reroute of the
flow is in flight, is the **tail**: it leaves on the old path marked ``tail``, and the flow moves to a
non-congested path of the same cluster drawn uniformly (the ``floor(r x m / 2**16)``-th of the ``m`` set bits of
``alt``, ``r`` a 16-bit LFSR's state) or, when ``alt`` is empty, to ``shortest``; its epoch bit flips, so every
packet of the new path carries the new epoch. The next reroute is allowed ``hold`` ticks after this one.

Pipeline (all stages move on one ``adv``; latency 7)::

    accept        P1            P2 = S0       S1             S2              S3                  S4 decide      out
    LFSR draw;    group sums    table read;   RAM data;      RAM data reg.;  entry resolved;     flow state,    -> o
    set bits per  (last 2 of 3  rank = m x    rank below     the group of    the draw's path;    decision,
    8-bit group,  prefix        draw / 2^16   each group's   the rank, its   hold, current path  table write
    first prefix  steps)        (one DSP)     sum?           bits, rank in
    step

The draw needs six register stages (counts and the first prefix step, the other two steps, the multiply, the
comparisons, the group, the bit) and the table's read-modify-write four, so the draw starts two stages ahead of the
table read (P1, P2).
The flow table is written at S4 and read at S0; the four items behind a decision get its result forwarded as they
move (S1 -> S2 from the decision of the clock before as well), so back-to-back packets of one flow see each other.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS

__all__ = ["Reroute", "RerouteItem", "RerouteResult", "check_parameters", "LFSR_SEED", "N_STATS"]

LFSR_SEED = 0xB5AD
N_STATS = 4         # packets, reroutes (tails), reroutes to the shortest path, stale items


def check_parameters(*, n_flows, n_paths, time_bits, hold, lfsr_seed):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_flows", n_flows), ("n_paths", n_paths), ("time_bits", time_bits), ("hold", hold),
                        ("lfsr_seed", lfsr_seed)):
        check_int(name, value)
    if not 2 <= n_flows <= 4096 or n_flows & (n_flows - 1):
        raise ValueError(f"n_flows must be a power of two from 2 to 4096, not {n_flows}")
    if not 2 <= n_paths <= 64 or n_paths & (n_paths - 1):
        raise ValueError(f"n_paths must be a power of two from 2 to 64 (selb-cluster's range), not {n_paths}")
    if not 4 <= time_bits <= 32:
        raise ValueError(f"time_bits must be 4 to 32, not {time_bits}")
    if not 1 <= hold < 1 << time_bits or hold & (hold - 1):
        # a power of two: "the hold has passed" is then a test of the age's high bits (no comparator)
        raise ValueError(f"hold must be a power of two from 1 to 2**(time_bits - 1), not {hold}")
    if not 1 <= lfsr_seed < 1 << 16:
        raise ValueError(f"lfsr_seed must be 1 to 65535, not {lfsr_seed}")


def _bits(n):
    return max(1, (n - 1).bit_length())


def RerouteItem(*, n_flows=1024, n_paths=64, time_bits=16):
    """A packet: its flow, ``now``, and selb-cluster's result for the flow's current path."""
    return data.StructLayout({"kind": PacketKind, "tag": TAG_BITS, "flow": _bits(n_flows), "now": time_bits,
                              "path": _bits(n_paths), "congested": 1, "alt": n_paths, "shortest": _bits(n_paths)})


def RerouteResult(*, n_flows=1024, n_paths=64):
    """The packet's path; ``tail``: the last packet on the old path of a reroute; ``epoch``: the flow's epoch bit
    when the packet left (the tail carries the old one, the new path's packets the new one)."""
    return data.StructLayout({"kind": PacketKind, "tag": TAG_BITS, "flow": _bits(n_flows), "path": _bits(n_paths),
                              "tail": 1, "epoch": 1})


def _entry(n_paths, time_bits):
    return data.StructLayout({"valid": 1, "path": _bits(n_paths), "inflight": 1, "since": time_bits, "epoch": 1})


def _pick(sel, a, b):
    """Mux(sel, a, b) of two 1-bit tests, as AND-OR: Yosys's opt_share would pull a $mux of two comparisons with a
    common operand in front of one comparator, putting the select (a late decision) before the comparison."""
    return (sel & a) | (~sel & b)


def _less(a, b):
    """(a < b, a == b), unsigned, as a balanced tree of gates (no carry chain): the high half decides unless
    equal."""
    if len(a) == 1:
        return ~a[0] & b[0], ~(a[0] ^ b[0])
    h = len(a) // 2
    lt_lo, eq_lo = _less(a[:h], b[:h])
    lt_hi, eq_hi = _less(a[h:], b[h:])
    return lt_hi | (eq_hi & lt_lo), eq_hi & eq_lo


def _table(index, width, f):
    """A lookup of f over every value of ``index`` (a constant table: Yosys maps it to LUTs, no carry chain)."""
    k = len(index)
    return Const(sum(f(x) << (width * x) for x in range(1 << k)), width << k).word_select(index, width)


def _count(bits):
    """The number of set bits of up to 8 bits: each half's by a table, the two sums by a table."""
    if len(bits) <= 4:
        return _table(bits, len(bits).bit_length(), lambda x: bin(x).count("1"))
    h = len(bits) // 2
    lo, hi = _count(bits[:h]), _count(bits[h:])
    w = len(lo)
    return _table(Cat(lo, hi), len(bits).bit_length(), lambda x: (x & ((1 << w) - 1)) + (x >> w))


def _nth_set(bits, k):
    """The position of the k-th set bit (from 0, from bit 0) of ``bits``; 0 when there is none."""
    n, w = len(bits), len(k)

    def nth(x):
        mask, rank = x & ((1 << n) - 1), x >> n
        ones = [p for p in range(n) if mask >> p & 1]
        return ones[rank] if rank < len(ones) else 0
    return _table(Cat(bits, k), w, nth)


class Reroute(wiring.Component):
    """SELB per-flow rerouting.

    Parameters
    ----------
    n_flows : int
        Flow table entries, a power of two from 2 to 4096.
    n_paths : int
        Paths, a power of two from 2 to 64 (as selb-cluster).
    time_bits : int
        Width of ``now`` and of the stored reroute time, 4 to 32.
    hold : int
        Ticks after a reroute before the flow's next one is allowed.
    lfsr_seed : int
        Reset value of the 16-bit LFSR that draws among the ``alt`` paths.

    Members
    -------
    i : In(stream.Signature(RerouteItem(...)))
    o : Out(stream.Signature(RerouteResult(...)))
    ctl : In(ControlSignature())
        No tables: commands are taken and ignored.
    stats : Out(32 * 4)
        Packets, reroutes, reroutes to the shortest path, stale items.
    """

    latency = 7

    def __init__(self, *, n_flows=1024, n_paths=64, time_bits=16, hold=32, lfsr_seed=LFSR_SEED):
        check_parameters(n_flows=n_flows, n_paths=n_paths, time_bits=time_bits, hold=hold, lfsr_seed=lfsr_seed)
        self._nf, self._n, self._tb, self._hold, self._seed = n_flows, n_paths, time_bits, hold, lfsr_seed
        self._pb = _bits(n_paths)
        self._ent = _entry(n_paths, time_bits)
        self.memory_bits = n_flows * self._ent.size
        super().__init__({
            "i": In(stream.Signature(RerouteItem(n_flows=n_flows, n_paths=n_paths, time_bits=time_bits))),
            "o": Out(stream.Signature(RerouteResult(n_flows=n_flows, n_paths=n_paths))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    def elaborate(self, platform):
        """Reset sweep, accept (P1, P2 ahead of the table), S0 table read, S1..S3 (table data, forwarding), the
        draw beside them (P1..S3: the candidate path), S4 decision, counters."""
        m = Module()
        m.submodules.table = mem = memory.Memory(shape=self._ent, depth=self._nf, init=[])
        rd, wr = mem.read_port(transparent_for=()), mem.write_port()
        adv = Signal(name="adv")
        busy = Signal(init=1, name="sweep_busy")
        lay = RerouteItem(n_flows=self._nf, n_paths=self._n, time_bits=self._tb)
        s = {k: Signal(lay, name=f"{k}_item") for k in ("p1", "p2", "s1", "s2", "s3", "s4")}
        v = {k: Signal(name=f"{k}_valid") for k in s}
        d = self._decide_signals()
        self._accept(m, adv, busy, rd, wr, s, v, d)
        self._draw(m, adv, s, d)
        self._middle(m, adv, rd, s, v, d)
        self._decide(m, adv, s["s4"], v["s4"], d)
        self._output(m, adv, s["s4"], v["s4"], d)
        self._counters(m, adv, v["s4"], d)
        return m

    def _decide_signals(self):
        pb, ent = self._pb, self._ent
        return dict(new=Signal(ent, name="d_new"), move=Signal(name="d_move"), cur=Signal(pb, name="d_cur"),
                    stale=Signal(name="d_stale"), to_short=Signal(name="d_to_short"),
                    exp=Signal(3, name="s4_aged"), exp_hit=Signal(name="s4_aged_hit"),
                    exp_moved=Signal(name="s4_aged_moved"),
                    # registered beside the entry: its valid & inflight, not stale & congested, alt empty
                    busy=Signal(name="s4_busy"), live=Signal(name="d_live"), empty=Signal(name="d_alt_empty"),
                    ent=Signal(ent, name="s4_entry"), cand=Signal(pb, name="s4_cand"),
                    # the decision of the previous adv (forwarded to the item in S1 that read the table then)
                    r1_v=Signal(name="r1_valid"), r1_flow=Signal(_bits(self._nf), name="r1_flow"),
                    r1=Signal(ent, name="r1_entry"))

    def _accept(self, m, adv, busy, rd, wr, s, v, d):
        """Accept -> P1 -> P2 -> S0: after reset the sweep clears every entry (one a clock, inputs not ready); then
        an item is taken when the output register is free, with the LFSR's state as its draw (the LFSR steps with
        every item taken), and reads its flow's entry two stages later, at S0. ``ctl`` is always ready and
        ignored. S4's decision writes the table."""
        out_free = Signal(name="out_free")
        m.d.comb += [out_free.eq(~self.o.valid | self.o.ready), adv.eq(out_free & ~busy), self.i.ready.eq(adv),
                     self.ctl.ready.eq(1)]
        addr = Signal(range(self._nf), init=self._nf - 1, name="sweep_addr")
        with m.If(busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += busy.eq(0)
        m.d.comb += [rd.addr.eq(s["p2"].flow), rd.en.eq(adv),
                     wr.addr.eq(Mux(busy, addr, s["s4"].flow)), wr.data.eq(Mux(busy, 0, d["new"])),
                     wr.en.eq(busy | (adv & v["s4"]))]
        lfsr = Signal(16, init=self._seed, name="lfsr")
        take = adv & self.i.valid
        with m.If(take):
            m.d.sync += lfsr.eq(Cat(lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10], lfsr[:15]))
        d["draw"] = Signal(16, name="p1_draw")
        with m.If(adv):
            m.d.sync += [v["p1"].eq(take), s["p1"].eq(self.i.payload), d["draw"].eq(lfsr),
                         v["p2"].eq(v["p1"]), s["p2"].eq(s["p1"]),
                         v["s1"].eq(v["p2"]), s["s1"].eq(s["p2"])]

    def _draw(self, m, adv, s, d):
        """The candidate: the ``floor(r x m / 2**16)``-th set bit of ``alt`` (``m`` set bits, ``r`` the draw),
        by 8-bit groups. Accept -> P1: each group's set bits (two table lookups) and the first step of their
        running sums (a Hillis-Steele prefix). P1 -> P2: its other two steps. P2 -> S1: the rank
        ``r x m / 2**16`` (one DSP). S1 -> S2: per group, whether the rank is below its running sum, and the rank
        less the sums before it. S2 -> S3: the group holding the rank (the first running sum above it), its bits,
        the rank within it. S3 -> S4: that group's set bit of that rank, or ``shortest`` when ``alt`` is empty."""
        n, gs = self._n, min(8, self._n)
        ng, rb, sw = n // gs, _bits(gs), n.bit_length()
        alt = self.i.payload.alt
        cnt = [_count(alt[g * gs:(g + 1) * gs]) for g in range(ng)]
        run1 = [Signal(sw, name=f"p1_sum{g}") for g in range(ng)]
        run = {k: [Signal(sw, name=f"{k}_sum{g}") for g in range(ng)] for k in ("p2", "s1")}
        draw2 = Signal(16, name="p2_draw")
        rank = Signal(sw, name="s1_rank")
        below = Signal(ng, name="s2_below")
        rest = [Signal(rb, name=f"s2_rest{g}") for g in range(ng)]
        gsel, gbits, grank = Signal(max(1, ng.bit_length() - 1), name="s3_group"), Signal(gs, name="s3_bits"), \
            Signal(rb, name="s3_rank")
        glo = Signal(3, name="s3_low_count")            # groups of 8: the group's set bits among its low 4
        with m.If(adv):
            m.d.sync += [x.eq(cnt[g] + cnt[g - 1] if g >= 1 else cnt[g]) for g, x in enumerate(run1)]
            step2 = [run1[g] + run1[g - 2] if g >= 2 else run1[g] for g in range(ng)]
            m.d.sync += [x.eq(step2[g] + step2[g - 4] if g >= 4 else step2[g]) for g, x in enumerate(run["p2"])]
            m.d.sync += [draw2.eq(d["draw"]), rank.eq((draw2 * run["p2"][-1])[16:]),
                         *[a.eq(b) for a, b in zip(run["s1"], run["p2"])]]
            # a gate tree, not a carry chain: nondecreasing in g, so the group is the first one set
            m.d.sync += [below.eq(Cat(_less(rank, x)[0] for x in run["s1"])),
                         *[x.eq((rank - run["s1"][g - 1])[:rb] if g else rank[:rb]) for g, x in enumerate(rest)]]
            acc_g, acc_b, acc_r, acc_l = 0, 0, 0, 0
            for g in range(ng):
                here = below[g] & ~below[g - 1] if g else below[g]
                bits = s["s2"].alt[g * gs:(g + 1) * gs]
                acc_g = acc_g | Mux(here, g, 0)
                acc_b = acc_b | Mux(here, bits, 0)
                acc_r = acc_r | Mux(here, rest[g], 0)
                acc_l = acc_l | Mux(here, _count(bits[:4]), 0) if gs == 8 else 0
            m.d.sync += [gsel.eq(acc_g), gbits.eq(acc_b), grank.eq(acc_r), glo.eq(acc_l)]
            if gs == 8:
                # a group of 8 as two halves of 4: each half's bit of a rank is a 6-input table (one LUT level)
                high = ~_less(grank, glo)[0]
                pick = Mux(high, Cat(_nth_set(gbits[4:], (grank - glo)[:2]), 1), Cat(_nth_set(gbits[:4], grank[:2]), 0))
            else:
                pick = _nth_set(gbits, grank)
            path = Cat(pick, gsel)[:self._pb] if ng > 1 else pick
            m.d.sync += d["cand"].eq(Mux(s["s3"].alt == 0, s["s3"].shortest, path))

    def _middle(self, m, adv, rd, s, v, d):
        """S1 -> S2: the table's data registered as read, with the forwarding decided beside it (the decision in
        S4 now, else the one of the clock before). S2 -> S3: the entry resolved (S4's decision now first). S3 ->
        S4: the entry (S4's decision first), the hold's cases, the current path, staleness."""
        ent = self._ent
        raw, hit, hv = Signal(ent, name="s2_raw"), Signal(name="s2_hit"), Signal(ent, name="s2_hit_entry")
        e3 = Signal(ent, name="s3_entry")
        # S4 holds the item's flow: for the items in S2 and S3, registered a stage early (all stages move together)
        near = {k: Signal(name=f"{k}_hit_s4") for k in ("s2", "s3")}
        now_hit = lambda item: near[item] if item in near else v["s4"] & (s[item].flow == s["s4"].flow)  # noqa: E731
        r1_hit = lambda item: d["r1_v"] & (item.flow == d["r1_flow"])        # noqa: E731
        h = self._hold.bit_length() - 1
        now_m1 = Signal(self._tb - h, name="s3_now_hi_m1")     # the item's now, high bits, minus 1 (for _aged)
        with m.If(adv):
            m.d.sync += [near["s2"].eq(v["s3"] & (s["s1"].flow == s["s3"].flow)),
                         near["s3"].eq(v["s3"] & (s["s2"].flow == s["s3"].flow))]
            m.d.sync += [v["s2"].eq(v["s1"]), s["s2"].eq(s["s1"]), raw.eq(rd.data),
                         hit.eq(now_hit("s1") | r1_hit(s["s1"])),
                         hv.eq(Mux(now_hit("s1"), d["new"], d["r1"]))]
            m.d.sync += [v["s3"].eq(v["s2"]), s["s3"].eq(s["s2"]),
                         now_m1.eq(s["s2"].now[h:] - 1),
                         e3.eq(Mux(now_hit("s2"), d["new"], Mux(hit, hv, raw)))]
            # whether the hold has passed for the item entering S4, from registers only: against its entry's time,
            # or, when S4 now holds the same flow, against S4's now (if S4 moves it) or S4's entry's time
            exp_a = self._aged(s["s3"].now, now_m1, e3.since)
            exp_b = self._aged(s["s3"].now, now_m1, s["s4"].now)
            exp_c = self._aged(s["s3"].now, now_m1, d["ent"].since)
            # the three registered as they are, with the choice's selects (S4 chooses: one level)
            m.d.sync += [d["exp"].eq(Cat(exp_a, exp_b, exp_c)), d["exp_hit"].eq(now_hit("s3")),
                         d["exp_moved"].eq(d["move"])]
            # the current path and staleness of the item entering S4, also from registers and S4's move only
            p3 = s["s3"].path
            stale3 = Mux(now_hit("s3"), _pick(d["move"], p3 != d["cand"], p3 != d["cur"]), e3.valid & (p3 != e3.path))
            m.d.sync += [d["cur"].eq(Mux(now_hit("s3"), d["new"].path, Mux(e3.valid, e3.path, p3))),
                         d["stale"].eq(stale3),
                         # only a data packet moves: selb-reorder honours a tail on DATA only
                         d["live"].eq(~stale3 & s["s3"].congested & (s["s3"].kind == PacketKind.DATA)),
                         d["busy"].eq(Mux(now_hit("s3"), d["new"].inflight, e3.valid & e3.inflight)),
                         d["empty"].eq(s["s3"].alt == 0)]
            m.d.sync += [v["s4"].eq(v["s3"]), s["s4"].eq(s["s3"]),
                         d["ent"].eq(Mux(now_hit("s3"), d["new"], e3))]
            m.d.sync += [d["r1_v"].eq(v["s4"]), d["r1_flow"].eq(s["s4"].flow), d["r1"].eq(d["new"])]

    def _aged(self, now, now_m1, since):
        """(now - since) mod 2**time_bits >= hold, hold a power of two: a bit of the difference at or above it.
        Without a subtractor: the high bits of the difference are ``now_hi - since_hi - b`` (b: the low bits
        borrow, now_lo < since_lo), zero exactly when since_hi equals now_hi, or now_hi - 1 (``now_m1``,
        registered with the item) when b; two equality tests picked by b."""
        h = self._hold.bit_length() - 1
        if h == 0:
            return now != since
        return _pick(_less(now[:h], since[:h])[0], since[h:] != now_m1, since[h:] != now[h:])

    def _decide(self, m, adv, item, valid, d):
        """S4: the flow's current path (the table's, or the item's for a new flow), staleness (the item was looked
        up on another path than the table's), whether a reroute may start (none in flight, or ``hold`` ticks since
        the last), the move, the new entry."""
        e, new = d["ent"], d["new"]
        cur = d["cur"]     # registered at S3 -> S4, as are d_stale, and d_live (not stale, congested), s4_busy
        # (now - since) mod 2**time_bits >= hold, the three cases registered at S3 -> S4
        x = d["exp"]
        expired = Mux(d["exp_hit"], Mux(d["exp_moved"], x[1], x[2]), x[0])
        inflight = d["busy"] & ~expired
        move = d["live"] & ~inflight & (d["cand"] != cur)
        m.d.comb += [d["move"].eq(move),
                     d["to_short"].eq(move & d["empty"]),
                     new.valid.eq(1), new.path.eq(Mux(move, d["cand"], cur)), new.inflight.eq(move | inflight),
                     new.since.eq(Mux(move, item.now, e.since)), new.epoch.eq((e.valid & e.epoch) ^ move)]

    def _output(self, m, adv, item, valid, d):
        out = self.o.payload
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(adv & valid):
            m.d.sync += [self.o.valid.eq(1), out.kind.eq(item.kind), out.tag.eq(item.tag), out.flow.eq(item.flow),
                         out.path.eq(d["cur"]), out.tail.eq(d["move"]),
                         out.epoch.eq(d["ent"].valid & d["ent"].epoch)]

    def _counters(self, m, adv, valid, d):
        c = [Signal(32, name=x) for x in ("n_packets", "n_reroutes", "n_to_shortest", "n_stale")]
        # the decision's flags are registered first (the counters lag one clock), so no adder follows a decision
        flags = [Signal(name=f"k_{x}") for x in ("packet", "move", "short", "stale")]
        m.d.sync += [flags[0].eq(adv & valid), flags[1].eq(adv & valid & d["move"]),
                     flags[2].eq(adv & valid & d["to_short"]), flags[3].eq(adv & valid & d["stale"])]
        m.d.sync += [x.eq(x + k) for x, k in zip(c, flags)]
        m.d.comb += self.stats.eq(Cat(*c))
