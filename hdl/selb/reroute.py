"""SELB source ToR: per-flow rerouting within a path cluster (SELB, paper 004: section III "Rerouting Strategy";
datasheet docs/selb_reroute.md).

Per flow (the flow index from the parser layer, as flb-route's) the flow table holds a valid bit, the flow's current
path, whether a reroute is in flight, the time (``now`` ticks) of the last reroute and the flow's epoch bit. Each
item is a packet with its flow, ``now`` and what ``selb-cluster`` returned for the flow's current path (``path``,
``congested``, ``alt``, ``shortest``). A packet of a flow whose current path is congested, when no reroute of the
flow is in flight, is the **tail**: it leaves on the old path marked ``tail``, and the flow moves to a random
non-congested path of the same cluster (the first set bit of ``alt`` at or after a 16-bit LFSR's draw, cyclically)
or, when ``alt`` is empty, to ``shortest``; its epoch bit flips, so every packet of the new path carries the new
epoch. The next reroute is allowed ``hold`` ticks after this one.

Pipeline (all stages move on one ``adv``; latency 5)::

    S0 accept      S1                 S2                    S3                      S4 decide              out
    table read,    RAM data; alt      RAM data registered;  entry resolved; the     flow state, decision,  -> o
    LFSR draw      rotated by draw    per 8-bit group: any  candidate path; hold,   table write
                                      bit, first bit's path current path, stale

The flow table is written at S4 and read at S0; the four items behind a decision get its result forwarded as they
move (S1 -> S2 from the decision of the clock before as well), so back-to-back packets of one flow see each other.
"""

from amaranth import Cat, Module, Mux, Signal
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


def _first_set(bits):
    """(any, index of the lowest set bit) of a list of 1-bit values, as a balanced tree."""
    if len(bits) == 1:
        return bits[0], None
    h = len(bits) // 2
    any_lo, idx_lo = _first_set(bits[:h])
    any_hi, idx_hi = _first_set(bits[h:])
    high = ~any_lo
    return any_lo | any_hi, high if idx_lo is None else Cat(Mux(any_lo, idx_lo, idx_hi), high)


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

    latency = 5

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
        """Reset sweep, S0 accept, S1..S3 (table data, forwarding, candidate path), S4 decision, counters."""
        m = Module()
        m.submodules.table = mem = memory.Memory(shape=self._ent, depth=self._nf, init=[])
        rd, wr = mem.read_port(transparent_for=()), mem.write_port()
        adv = Signal(name="adv")
        busy = Signal(init=1, name="sweep_busy")
        lay = RerouteItem(n_flows=self._nf, n_paths=self._n, time_bits=self._tb)
        s = {k: Signal(lay, name=f"{k}_item") for k in ("s1", "s2", "s3", "s4")}
        v = {k: Signal(name=f"{k}_valid") for k in s}
        start = {k: Signal(self._pb, name=f"{k}_start") for k in ("s1", "s2", "s3")}
        d = self._decide_signals()
        self._accept(m, adv, busy, rd, wr, s, v, start, d)
        self._middle(m, adv, rd, s, v, start, d)
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
                    alt_r=Signal(self._n, name="s1_alt_rot"),       # alt rotated by the draw's low 2 bits
                    # registered beside the entry: its valid & inflight, not stale & congested, alt empty
                    busy=Signal(name="s4_busy"), live=Signal(name="d_live"), empty=Signal(name="d_alt_empty"),
                    ent=Signal(ent, name="s4_entry"), cand=Signal(pb, name="s4_cand"),
                    # the decision of the previous adv (forwarded to the item in S1 that read the table then)
                    r1_v=Signal(name="r1_valid"), r1_flow=Signal(_bits(self._nf), name="r1_flow"),
                    r1=Signal(ent, name="r1_entry"))

    def _accept(self, m, adv, busy, rd, wr, s, v, start, d):
        """S0: after reset the sweep clears every entry (one a clock, inputs not ready); then an item is taken
        when the output register is free, reads its flow's entry, and takes the LFSR's draw (the LFSR steps with
        every item taken). ``ctl`` is always ready and ignored. S4's decision writes the table."""
        out_free = Signal(name="out_free")
        m.d.comb += [out_free.eq(~self.o.valid | self.o.ready), adv.eq(out_free & ~busy), self.i.ready.eq(adv),
                     self.ctl.ready.eq(1)]
        addr = Signal(range(self._nf), init=self._nf - 1, name="sweep_addr")
        with m.If(busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += busy.eq(0)
        m.d.comb += [rd.addr.eq(self.i.payload.flow), rd.en.eq(adv),
                     wr.addr.eq(Mux(busy, addr, s["s4"].flow)), wr.data.eq(Mux(busy, 0, d["new"])),
                     wr.en.eq(busy | (adv & v["s4"]))]
        lfsr = Signal(16, init=self._seed, name="lfsr")
        take = adv & self.i.valid
        with m.If(take):
            m.d.sync += lfsr.eq(Cat(lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10], lfsr[:15]))
        with m.If(adv):
            m.d.sync += [v["s1"].eq(take), s["s1"].eq(self.i.payload), start["s1"].eq(lfsr[:self._pb]),
                         # the rotation by the draw's low two bits here (one LUT), the rest at S1 -> S2
                         d["alt_r"].eq(self._rotate(self.i.payload.alt, lfsr[:self._pb], 0, 2))]

    def _middle(self, m, adv, rd, s, v, start, d):
        """S1 -> S2: the table's data registered as read, with the forwarding decided beside it (the decision in
        S4 now, else the one of the clock before); the alt mask rotated by the draw. S2 -> S3: the entry resolved
        (S4's decision now first); the rotated mask's first set bit. S3 -> S4: the entry (S4's decision first);
        the candidate path: that bit's path, or ``shortest`` when the mask is empty."""
        n, pb = self._n, self._pb
        ent = self._ent
        raw, hit, hv = Signal(ent, name="s2_raw"), Signal(name="s2_hit"), Signal(ent, name="s2_hit_entry")
        rot = Signal(n, name="s2_rot")
        e3 = Signal(ent, name="s3_entry")
        gs = min(8, n)                              # the rotated mask in groups of 8 bits
        ng = n // gs
        gany = Signal(ng, name="s3_group_any")
        gcand = [Signal(pb, name=f"s3_group_cand{g}") for g in range(ng)]
        # S4 holds the item's flow: for the items in S2 and S3, registered a stage early (all stages move together)
        near = {k: Signal(name=f"{k}_hit_s4") for k in ("s2", "s3")}
        now_hit = lambda item: near[item] if item in near else v["s4"] & (s[item].flow == s["s4"].flow)  # noqa: E731
        r1_hit = lambda item: d["r1_v"] & (item.flow == d["r1_flow"])        # noqa: E731
        h = self._hold.bit_length() - 1
        now_m1 = Signal(self._tb - h, name="s3_now_hi_m1")     # the item's now, high bits, minus 1 (for _aged)
        with m.If(adv):
            m.d.sync += [near["s2"].eq(v["s3"] & (s["s1"].flow == s["s3"].flow)),
                         near["s3"].eq(v["s3"] & (s["s2"].flow == s["s3"].flow))]
            m.d.sync += [v["s2"].eq(v["s1"]), s["s2"].eq(s["s1"]), start["s2"].eq(start["s1"]), raw.eq(rd.data),
                         hit.eq(now_hit("s1") | r1_hit(s["s1"])),
                         hv.eq(Mux(now_hit("s1"), d["new"], d["r1"])),
                         rot.eq(self._rotate(d["alt_r"], start["s1"], 2, self._pb))]
            # per group: any set bit, and the path of its first one (the group's base and the draw added)
            for g in range(ng):
                any_g, idx_g = _first_set(list(rot[g * gs:(g + 1) * gs]))
                m.d.sync += [gany[g].eq(any_g), gcand[g].eq((idx_g + g * gs + start["s2"])[:pb])]
            m.d.sync += [v["s3"].eq(v["s2"]), s["s3"].eq(s["s2"]), start["s3"].eq(start["s2"]),
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
                         d["stale"].eq(stale3), d["live"].eq(~stale3 & s["s3"].congested),
                         d["busy"].eq(Mux(now_hit("s3"), d["new"].inflight, e3.valid & e3.inflight)),
                         d["empty"].eq(s["s3"].alt == 0)]
            m.d.sync += [v["s4"].eq(v["s3"]), s["s4"].eq(s["s3"]),
                         d["ent"].eq(Mux(now_hit("s3"), d["new"], e3)),
                         d["cand"].eq(self._first_group(gany, gcand, s["s3"].shortest))]
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

    def _first_group(self, gany, gcand, shortest):
        """The candidate of the first group with a set bit, else ``shortest`` (one-hot AND-OR)."""
        acc, before = 0, 0
        for g, c in enumerate(gcand):
            first = gany[g] & ~before if g else gany[g]
            acc = acc | Mux(first, c, 0)
            before = before | gany[g] if g else gany[g]
        return Mux(gany != 0, acc, shortest)

    def _rotate(self, alt, r, lo, hi):
        """``alt`` rotated right by r's bits lo to hi - 1 (bit b of the result is alt[(b + r') mod n], r' those
        bits of r), one shift stage a bit."""
        n = self._n
        x = alt
        for k in range(lo, min(hi, self._pb)):
            sh = 1 << k
            if sh >= n:
                break
            x = Mux(r[k], Cat(x[sh:], x[:sh]), x)
        return x

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
