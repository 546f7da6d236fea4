"""FLB source edge switch: the isolation table (FLB: sections 3.2, 3.3; datasheet docs/flb_isolate.md).

CNMs from destination edge switches (stream ``upd``: flow, the destination edge it came from, the congestion point
``cp`` there (its egress port), ``n``, the congestion flag, the timer's ``now`` on arrival) and packets (stream
``i``: flow, destination, ``now``) go through one serial pipeline, one event per clock (a CNM is a packet arriving
at the switch: it takes a packet's clock). The table is ``n_slots`` registers of (valid, flow, destination, point,
weight, stamp). A congestion CNM isolates its flow (lowest free slot; a repeated one refreshes the weight and the
point) and gives every entry of its congestion point (destination, ``cp``) the weight of its ``n``: a point's flows
all use its latest ``n``. A non-congestion CNM releases its flow (the point's other entries keep their ``n``), and a
flow idle (no packet, no CNM) for ``timeout`` ticks is released by the next event. Per destination the isolation
paths are the highest-numbered ``k`` paths, ``k = ceil(sum of the isolated flows' converged rates / C)`` capped at
``n_paths - 1``: a flow of a point whose latest ``n`` is ``n`` converges to ``C/n`` (section 3.3), kept exactly as
the integer weight ``840 / n`` (840 = lcm(1..8)), so the ``m`` flows of one point here sum to exactly ``m/n``
paths (the ``n`` flows of one congested port, one path). An isolated flow takes path ``n_paths - 1 - (rank mod
k)``, its rank the number of its destination's live entries in lower slots (so a destination's flows fill its ``k``
paths in turn, whatever slots other destinations hold).

Pipeline (one register stage per cycle, all moved by one ``adv``; latency 6)::

    S0 accept          S1 apply              S2          S3           S4          S5               S6 out
    CNM first, else -> expire, CNM or     -> pair sums -> quad sums -> total   -> thresholds:   -> path: the
    packet; per slot   packet on the table;    of the                             mask, k          candidate of
    age / flow / dest  snapshot of the dest's  dest's weights                     (one-hot)        the one-hot k
    compares           weights, hit slot,   -> the dest's  -> count    -> rank    -> path for
                       the dest's live slots   slots below    per half    (one-hot)   every k:
                                               the hit                                top - (rank mod k)

Choices where the paper is silent (all in the datasheet): a small fully associative table (``n_slots`` isolated
flows, full: counted, not isolated); ``n`` from 1 to 8 (flb-cnm's range), weights ``840 / n``; the highest-numbered
paths isolate, path 0 never, a destination's flows spread over them by rank among its entries; the timeout counts
from the flow's last packet or CNM (the paper's "inactive" entries) and is evaluated at every event; forged CNMs
(destination, flow or point out of range, ``n`` 0 or above 8) and stale ones (a release of a flow not isolated, or a CNM
naming another destination than the flow's entry) are counted and change nothing; ``ctl`` has no tables (commands
ignored). Departure from the paper (datasheet): the flow moves to its isolation path as soon as the CNM is applied,
not where its last packet is pending, so packets sent before the pause can be overtaken.

S0 compares every slot against the incoming event (age, flow, destination, point) one clock ahead; a slot that S1
writes in the same clock is compared against S1's event instead (``touched``; for the point, ``touched_cp``: a
packet's hit writes the stamp, not the point), so back-to-back events of one flow or one point need no stall.
"""

from itertools import combinations

from amaranth import Cat, C, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import below, check_int, ControlSignature
from lbpipe.hdl.lib.meta import TAG_BITS
from lbpipe.hdl.lib.stage import counter32

__all__ = ["Isolate", "IsolateItem", "IsolateCnm", "IsolateResult", "check_parameters", "N_STATS", "RATE_ONE"]

N_STATS = 8         # isolated packets, congestion CNMs, release CNMs, timeouts, full, forged, stale, rejected
RATE_ONE = 840      # one link's rate C in weight units: lcm(1..8), so C/n is an integer for every n of flb-cnm
N_MAX = 8           # largest n (flb-cnm's n_slots range)


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_flows, n_dests, n_paths, n_slots, time_bits, timeout, n_ports=8):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_flows", n_flows), ("n_dests", n_dests), ("n_paths", n_paths), ("n_slots", n_slots),
                        ("time_bits", time_bits), ("timeout", timeout), ("n_ports", n_ports)):
        check_int(name, value)
    if not 2 <= n_flows <= 1 << 20:
        raise ValueError(f"n_flows must be 2 to 2**20, not {n_flows}")
    if not 1 <= n_dests <= 4096:
        raise ValueError(f"n_dests must be 1 to 4,096, not {n_dests}")
    if not 2 <= n_paths <= 16:
        raise ValueError(f"n_paths must be 2 to 16, not {n_paths}")
    if not 1 <= n_slots <= 8:
        raise ValueError(f"n_slots must be 1 to 8, not {n_slots}")
    if not 4 <= time_bits <= 32:
        raise ValueError(f"time_bits must be 4 to 32, not {time_bits}")
    if not 1 <= timeout < 1 << time_bits:
        raise ValueError(f"timeout must be 1 to 2**time_bits - 1, not {timeout}")
    if not 1 <= n_ports <= 32:
        raise ValueError(f"n_ports must be 1 to 32, not {n_ports}")


def IsolateItem(*, n_flows=65536, n_dests=16, time_bits=16):
    """One packet at the source edge switch: flow index, destination edge switch, the timer's ``now`` (flb-route's)."""
    return data.StructLayout({"flow": _bits(n_flows), "dest": _bits(n_dests), "now": time_bits, "tag": TAG_BITS})


def IsolateCnm(*, n_flows=65536, n_dests=16, time_bits=16, n_ports=8):
    """One CNM received: ``flow``, ``dest`` (the destination edge switch that sent it), ``cp`` (the congestion
    point there: flb-cnm's egress port), ``n`` (congested flows of that point, 1 to 8), ``cong`` (1 congestion,
    0 non-congestion), ``now`` (the timer on arrival)."""
    return data.StructLayout({"flow": _bits(n_flows), "dest": _bits(n_dests), "cp": _bits(n_ports), "n": 4,
                              "cong": 1, "now": time_bits})


def IsolateResult(*, n_flows=65536, n_dests=16, n_paths=8, time_bits=16):
    """The packet's identity passed through; ``ok`` (0: destination or flow out of range); ``isolated`` and
    ``path`` (the isolation path it must take, 0 when not isolated); ``mask`` (the destination's isolated-path set
    after this packet, bit p: path p; 0 when rejected); ``held`` (1: a CNM was taken in the same clock and went
    first, so this packet left one clock later)."""
    return data.StructLayout({"flow": _bits(n_flows), "dest": _bits(n_dests), "now": time_bits, "tag": TAG_BITS,
                              "ok": 1, "isolated": 1, "path": _bits(n_paths), "mask": n_paths, "held": 1})


def _count_is(bits, count):
    """1 when exactly ``count`` of ``bits`` (at most 4) are set: a sum of minterms, so a LUT, never a carry chain."""
    n = len(bits)
    terms = [Cat(bits[i] if i in ones else ~bits[i] for i in range(n)).all() for ones in combinations(range(n), count)]
    return Cat(terms).any() if terms else C(0, 1)


class Isolate(wiring.Component):
    """FLB isolation table at the source edge switch, one packet or CNM per clock.

    Parameters
    ----------
    n_flows : int
        Flow index range (flb-route's key), 2 to 2**20.
    n_dests : int
        Destination edge switches, 1 to 4,096.
    n_paths : int
        Paths per destination, 2 to 16.
    n_slots : int
        Isolated flows held at once, 1 to 8.
    time_bits : int
        Width of the timer's ticks (flb-route's), 4 to 32.
    timeout : int
        Ticks of inactivity after which an isolated flow is released, 1 to ``2**time_bits - 1``.
    n_ports : int
        Congestion points per destination edge switch (flb-cnm's ``n_ports``), 1 to 32.

    Members
    -------
    i : In(stream.Signature(IsolateItem(...)))
    upd : In(stream.Signature(IsolateCnm(...)))
    o : Out(stream.Signature(IsolateResult(...)))
    ctl : In(ControlSignature())
        No tables: every command is taken and ignored.
    stats : Out(32 * 8)
    """

    latency = 6

    def __init__(self, *, n_flows=65536, n_dests=16, n_paths=8, n_slots=8, time_bits=16, timeout=4096, n_ports=8):
        check_parameters(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, n_slots=n_slots, time_bits=time_bits,
                         timeout=timeout, n_ports=n_ports)
        self._np, self._cb = n_ports, _bits(n_ports)
        self._nf, self._nd, self._n, self._ns, self._tb, self._to = (n_flows, n_dests, n_paths, n_slots, time_bits,
                                                                     timeout)
        self._fb, self._db, self._pb = _bits(n_flows), _bits(n_dests), _bits(n_paths)
        self._wb = RATE_ONE.bit_length()
        self._item = IsolateItem(n_flows=n_flows, n_dests=n_dests, time_bits=time_bits)
        self._slot = data.StructLayout({"valid": 1, "flow": self._fb, "dest": self._db, "cp": self._cb,
                                        "w": self._wb, "stamp": time_bits})
        super().__init__({
            "i": In(stream.Signature(self._item)),
            "upd": In(stream.Signature(IsolateCnm(n_flows=n_flows, n_dests=n_dests, time_bits=time_bits,
                                                  n_ports=n_ports))),
            "o": Out(stream.Signature(IsolateResult(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths,
                                                    time_bits=time_bits))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """No memories: the table is registers."""
        return 0

    def item_cycles(self, result):
        return 1

    def elaborate(self, platform):
        """The datasheet's block diagram: S0 accept -> S1 apply -> S2..S4 sum -> S5 mask -> S6 path, out."""
        m = Module()
        self._adv = adv = Signal()
        self._v = {n: Signal(name=f"s{n}_valid") for n in range(1, 7)}
        self._it = {n: Signal(self._item, name=f"s{n}_item", reset_less=True) for n in range(1, 7)}
        self._okr = {n: Signal(name=f"s{n}_ok") for n in range(2, 7)}
        m.d.comb += adv.eq(~self._v[6] | self.o.ready)
        m.d.comb += self.ctl.ready.eq(1)
        self._held1 = Signal(name="s1_held")
        self._held = {1: self._held1, **{n: Signal(name=f"s{n}_held") for n in range(2, 7)}}
        for n in range(2, 7):
            with m.If(adv):
                m.d.sync += [self._it[n].eq(self._it[n - 1]), self._held[n].eq(self._held[n - 1])]
                if n > 2:       # S2's valid: packets only (set by the apply stage)
                    m.d.sync += self._v[n].eq(self._v[n - 1])
        self._slots = [Signal(self._slot, name=f"slot{j}") for j in range(self._ns)]
        self._accept_stage(m)
        self._apply_stage(m)
        self._sum_stages(m)
        self._rank_stages(m)
        self._mask_stage(m)
        self._path_stage(m)
        self._output(m)
        return m

    def _age_over(self, now, stamp):
        """``(now - stamp) mod 2**time_bits >= timeout``."""
        return (now - stamp)[:self._tb] >= self._to

    def _accept_stage(self, m):
        """S0: a CNM and a packet offered together are both taken; the CNM goes on first and the packet waits one
        clock in ``held`` (nothing new is taken meanwhile). Then range checks, the CNM's weight; per slot the
        event's age, flow and destination compares against the table now, and the same three against S1's event
        (for a slot S1 writes in this clock). Loads S1."""
        adv, u, i = self._adv, self.upd.payload, self.i.payload
        held_v = Signal(name="s0_held_valid")
        held = Signal(self._item, name="s0_held", reset_less=True)
        m.d.comb += [self.upd.ready.eq(adv & ~held_v), self.i.ready.eq(adv & ~held_v)]
        with m.If(adv):
            m.d.sync += held_v.eq(~held_v & self.upd.valid & self.i.valid)
            m.d.sync += held.eq(i)
        is_cnm = ~held_v & self.upd.valid
        pi = Mux(held_v, held.as_value(), i.as_value())
        pi = self._item(pi)
        flow = Mux(is_cnm, u.flow, pi.flow)
        dest = Mux(is_cnm, u.dest, pi.dest)
        now = Mux(is_cnm, u.now, pi.now)
        s1 = self._it[1]
        self._cnm1, self._cong1, self._w1 = Signal(name="s1_cnm"), Signal(name="s1_cong"), Signal(self._wb, name="s1_w")
        self._ok1 = Signal(name="s1_ok")
        self._exp1 = Signal(self._ns, name="s1_expired_then")
        self._eqf1, self._eqd1 = Signal(self._ns, name="s1_flow_eq"), Signal(self._ns, name="s1_dest_eq")
        self._prev1 = Signal(4, name="s1_vs_prev")  # age over, flow, dest, point equal: against S1's event
        self._cp1 = Signal(self._cb, name="s1_cp")
        self._eqc1 = Signal(self._ns, name="s1_cp_eq")
        ok_range = below(flow, self._nf) & below(dest, self._nd) & (~is_cnm | below(u.cp, self._np))
        n_ok = (u.n != 0) & (u.n <= N_MAX)
        weight = Signal(self._wb)
        with m.Switch(u.n):
            for n in range(1, N_MAX + 1):
                with m.Case(n):
                    m.d.comb += weight.eq(RATE_ONE // n)
        with m.If(adv):
            m.d.sync += [self._v[1].eq(held_v | self.upd.valid | self.i.valid), s1.flow.eq(flow), s1.dest.eq(dest),
                         s1.now.eq(now), s1.tag.eq(Mux(is_cnm, 0, pi.tag)), self._cnm1.eq(is_cnm),
                         self._held1.eq(held_v),
                         self._cong1.eq(u.cong), self._w1.eq(weight),
                         self._ok1.eq(ok_range & (~is_cnm | ~u.cong | n_ok)),
                         self._exp1.eq(Cat(self._age_over(now, s.stamp) for s in self._slots)),
                         self._eqf1.eq(Cat(s.flow == flow for s in self._slots)),
                         self._eqd1.eq(Cat(s.dest == dest for s in self._slots)),
                         self._eqc1.eq(Cat(s.cp == u.cp for s in self._slots)), self._cp1.eq(u.cp),
                         self._prev1.eq(Cat(self._age_over(now, s1.now), flow == s1.flow, dest == s1.dest,
                                            u.cp == self._cp1))]

    def _apply_stage(self, m):
        """S1: the event on the table. Slots aged ``timeout`` or more are released first; then a CNM isolates
        (lowest free slot), refreshes or releases its flow, or a packet of an isolated flow refreshes its stamp.
        Registers for S2: the destination's weights after the event (0 for slots of other destinations), the hit
        slot (one-hot), the destination's live slots (a packet changes no slot's liveness but by age, already out),
        ``isolated``, and the counters' events. Loads S2."""
        adv, go = self._adv, self._adv & self._v[1]
        ns = self._ns
        touched = Signal(ns, name="s1_touched")
        touchc = Signal(ns, name="s1_touched_cp")      # slots whose point S1 wrote (a packet's hit writes none)
        pexp, peqf, peqd, peqc = self._prev1[0], self._prev1[1], self._prev1[2], self._prev1[3]
        pc = Signal(ns, name="s1_cp_is")
        x, f, d = Signal(ns, name="s1_aged"), Signal(ns, name="s1_flow_is"), Signal(ns, name="s1_dest_is")
        live, expired = Signal(ns, name="s1_live"), Signal(ns, name="s1_expired")
        hit, hitd, free = Signal(ns, name="s1_hit"), Signal(ns, name="s1_hit_dest"), Signal(ns, name="s1_free")
        for j, s in enumerate(self._slots):
            m.d.comb += [x[j].eq(Mux(touched[j], pexp, self._exp1[j])), f[j].eq(Mux(touched[j], peqf, self._eqf1[j])),
                         d[j].eq(Mux(touched[j], peqd, self._eqd1[j])), live[j].eq(s.valid & ~x[j]),
                         expired[j].eq(s.valid & x[j]), hit[j].eq(live[j] & f[j]), hitd[j].eq(hit[j] & d[j]),
                         free[j].eq(~live[j] & (live[:j].all() if j else C(1, 1))),
                         pc[j].eq(Mux(touchc[j], peqc, self._eqc1[j]))]
        any_hit, any_hitd = Signal(name="s1_any_hit"), Signal(name="s1_any_hit_dest")
        any_free = Signal(name="s1_any_free")
        m.d.comb += [any_hit.eq(hit.any()), any_hitd.eq(hitd.any()), any_free.eq(~live.all())]
        ok, cnm, cong = self._ok1, self._cnm1, self._cong1
        c_ok = cnm & ok
        add, refresh, release = Signal(name="s1_add"), Signal(name="s1_refresh"), Signal(name="s1_release")
        stale, full, pkt_hit = Signal(name="s1_stale"), Signal(name="s1_full"), Signal(name="s1_packet_hit")
        m.d.comb += [add.eq(c_ok & cong & ~any_hit & any_free), refresh.eq(c_ok & cong & any_hitd),
                     release.eq(c_ok & ~cong & any_hitd),
                     stale.eq(c_ok & ((cong & any_hit & ~any_hitd) | (~cong & ~any_hitd))),
                     full.eq(c_ok & cong & ~any_hit & ~any_free), pkt_hit.eq(~cnm & ok & any_hitd)]
        it = self._it[1]
        point = Signal(name="s1_point_n")               # a congestion CNM: its point's entries take its n
        m.d.comb += point.eq(c_ok & cong)
        wrote, wrote_cp = [], []
        for j, s in enumerate(self._slots):
            w_add = add & free[j]
            w_ref = (refresh | pkt_hit) & hitd[j]
            w_cp = w_add | (refresh & hitd[j])
            wrote.append(w_add | w_ref)
            wrote_cp.append(w_cp)
            with m.If(go):
                with m.If(expired[j] | (release & hitd[j])):
                    m.d.sync += s.valid.eq(0)
                with m.If(w_add):
                    m.d.sync += [s.valid.eq(1), s.flow.eq(it.flow), s.dest.eq(it.dest)]
                with m.If(w_cp | (point & d[j] & pc[j])):
                    m.d.sync += s.w.eq(self._w1)
                with m.If(w_cp):
                    m.d.sync += s.cp.eq(self._cp1)
                with m.If(w_add | w_ref):
                    m.d.sync += s.stamp.eq(it.now)
        with m.If(adv):
            m.d.sync += [touched.eq(Mux(self._v[1], Cat(wrote), 0)), touchc.eq(Mux(self._v[1], Cat(wrote_cp), 0))]
        # the destination's weights after this event (a packet changes no weight, releases no slot but by age)
        self._terms = [Signal(self._wb, name=f"s2_term{j}") for j in range(ns)]
        self._hit2 = Signal(ns, name="s2_hit")
        self._same2 = Signal(ns, name="s2_dest_live")
        self._iso2 = Signal(name="s2_isolated")
        self._exp2 = Signal(ns, name="s2_expired")
        ev = {k: Signal(name=f"s2_{k}") for k in ("cong", "rel", "full", "forged", "stale", "rej")}
        with m.If(adv):
            m.d.sync += [t.eq(Mux(live[j] & d[j], self._slots[j].w, 0)) for j, t in enumerate(self._terms)]
            m.d.sync += [self._okr[2].eq(ok), self._hit2.eq(hitd), self._same2.eq(live & d),
                         self._iso2.eq(pkt_hit),
                         self._exp2.eq(Mux(self._v[1], expired, 0)),
                         self._v[2].eq(self._v[1] & ~cnm)]
            m.d.sync += [ev["cong"].eq(self._v[1] & (add | refresh)), ev["rel"].eq(self._v[1] & release),
                         ev["full"].eq(self._v[1] & full), ev["forged"].eq(self._v[1] & cnm & ~ok),
                         ev["stale"].eq(self._v[1] & stale), ev["rej"].eq(self._v[1] & ~cnm & ~ok)]
        self._ev2 = ev

    def _sum_stages(self, m):
        """S2 to S4: the destination's total weight, pairs, quads, all (up to 8 terms); the counters. Loads S5."""
        adv = self._adv
        terms = list(self._terms) + [C(0, self._wb)] * (8 - len(self._terms))
        pairs = [Signal(self._wb + 1, name=f"s3_pair{j}") for j in range(4)]
        quads = [Signal(self._wb + 2, name=f"s4_quad{j}") for j in range(2)]
        self._sum5 = Signal(self._wb + 3, name="s5_sum")
        carry = {n: {"iso": Signal(name=f"s{n}_isolated")} for n in (3, 4, 5)}
        prev = {"iso": self._iso2}
        for n in (3, 4, 5):
            with m.If(adv):
                m.d.sync += [carry[n][k].eq(prev[k]) for k in prev]
                m.d.sync += self._okr[n].eq(self._okr[n - 1])
            prev = carry[n]
        self._carry5 = carry[5]
        with m.If(adv):
            m.d.sync += [p.eq(terms[2 * j] + terms[2 * j + 1]) for j, p in enumerate(pairs)]
            m.d.sync += [q.eq(pairs[2 * j] + pairs[2 * j + 1]) for j, q in enumerate(quads)]
            m.d.sync += self._sum5.eq(quads[0] + quads[1])
        ev = self._ev2
        n_exp = Signal(4, name="s3_timeouts")
        m.d.sync += n_exp.eq(Mux(adv, sum(self._exp2[j] for j in range(self._ns)), 0))
        adv_ev = {k: adv & v for k, v in ev.items()}
        n_iso = counter32(m, "n_isolated", adv & self._v[2] & self._iso2)
        counts = [n_iso, counter32(m, "n_cong", adv_ev["cong"]), counter32(m, "n_release", adv_ev["rel"])]
        tlo, thi, tc = Signal(16, name="n_timeout_lo"), Signal(16, name="n_timeout_hi"), Signal(name="n_timeout_c")
        m.d.sync += [Cat(tlo, tc).eq(tlo + n_exp), thi.eq(thi + tc)]
        counts += [Cat(tlo, thi), counter32(m, "n_full", adv_ev["full"]), counter32(m, "n_forged", adv_ev["forged"]),
                   counter32(m, "n_stale", adv_ev["stale"]), counter32(m, "n_rejected", adv_ev["rej"])]
        m.d.comb += self.stats.eq(Cat(*counts))

    def _rank_stages(self, m):
        """S2 to S4, beside the sums: the hit slot's rank among the destination's live slots, as a one-hot. S2
        registers the destination's slots below the hit one; S3 the count of those in each half of the table
        (one-hot, 0 to 4); S4 the rank (one-hot, the two counts added by a table, no carry chain). Loads S5."""
        adv, ns = self._adv, self._ns
        below = Signal(ns, name="s3_below")
        above = [self._hit2[i + 1:].any() if i + 1 < ns else C(0, 1) for i in range(ns)]
        with m.If(adv):
            m.d.sync += below.eq(Cat(self._same2[i] & above[i] for i in range(ns)))
        halves = [below[:4], below[4:]] if ns > 4 else [below]
        counts = [Signal(len(h) + 1, name=f"s4_count{n}") for n, h in enumerate(halves)]
        with m.If(adv):
            for h, c in zip(halves, counts):
                m.d.sync += c.eq(Cat(_count_is(h, r) for r in range(len(h) + 1)))
        self._rank5 = Signal(ns, name="s5_rank")
        pairs = [(a, b) for a in range(len(counts[0])) for b in range(len(counts[1]) if len(counts) > 1 else 1)]
        rank = []
        for r in range(ns):
            terms = [counts[0][a] & (counts[1][b] if len(counts) > 1 else 1) for a, b in pairs if a + b == r]
            rank.append(Cat(terms).any() if terms else C(0, 1))
        with m.If(adv):
            m.d.sync += self._rank5.eq(Cat(rank))

    def _mask_stage(self, m):
        """S5: thresholds ``sum > t * 840`` for t = 0 .. n_paths - 2 (a thermometer: path ``n_paths - 1 - t`` is an
        isolation path), ``k`` as a one-hot (``k - 1`` = the last threshold passed); beside them, from the one-hot
        rank, the flow's path for every possible ``k``. Loads S6."""
        adv, n = self._adv, self._n
        th = [self._sum5 > t * RATE_ONE for t in range(n - 1)]
        self._mask6 = Signal(n, name="s6_mask")
        self._k6 = Signal(n - 1, name="s6_k_onehot")
        self._iso6 = Signal(name="s6_isolated")
        # per possible k (t + 1), the path n_paths - 1 - (rank mod (t + 1)): S6 only selects one by the one-hot k
        self._cand6 = [Signal(self._pb, name=f"s6_path_if_k{t + 1}") for t in range(n - 1)]
        for t, cand in enumerate(self._cand6):
            value = C(0, self._pb)
            for r in range(self._ns):
                value = value | Mux(self._rank5[r], n - 1 - (r % (t + 1)), 0)
            with m.If(adv):
                m.d.sync += cand.eq(value)
        kh = [th[t] & (~th[t + 1] if t + 1 < n - 1 else C(1, 1)) for t in range(n - 1)]
        with m.If(adv):
            m.d.sync += [self._mask6.eq(Cat(C(0, 1), *reversed(th))), self._k6.eq(Cat(kh)),
                         self._iso6.eq(self._carry5["iso"]),
                         self._okr[6].eq(self._okr[5])]

    def _path_stage(self, m):
        """S6 (combinational into ``o``): an isolated flow's path ``n_paths - 1 - (rank mod k)``, the candidate of
        S5 picked by the one-hot ``k``; 0 when not isolated."""
        acc = C(0, self._pb)
        for t, cand in enumerate(self._cand6):
            acc = acc | Mux(self._k6[t], cand, 0)
        self._path = Signal(self._pb, name="s6_path")
        m.d.comb += self._path.eq(Mux(self._iso6, acc, 0))

    def _output(self, m):
        """``o`` from S6's registers."""
        o, it = self.o.payload, self._it[6]
        ok = self._okr[6]
        m.d.comb += [self.o.valid.eq(self._v[6]), o.flow.eq(it.flow), o.dest.eq(it.dest), o.now.eq(it.now),
                     o.tag.eq(it.tag), o.ok.eq(ok), o.isolated.eq(self._iso6), o.path.eq(self._path),
                     o.mask.eq(Mux(ok, self._mask6, 0)), o.held.eq(self._held[6])]
