"""FLB destination edge switch: congestion detection and CNM generation (FLB: sections 3.2, 3.3, 5; datasheet
docs/flb_cnm.md).

Per egress port, a queue-length estimate ``q`` kept from enqueue and dequeue events (as the paper's Tofino build
does: a counter per port), and a small **set** of the port's congested flows (``n_slots`` entries of flow id and
source edge). An enqueue that leaves ``q >= K`` (the isolation threshold) by a flow not in its port's set adds the
flow and emits a congestion CNM (flow, source edge, ``n`` = the set's count with it, flag 1, the congestion point
``cp`` = the port); any event that leaves ``q < K`` while the port's set holds flows removes the lowest one and
emits its release CNM (flag 0, ``n`` = the count before, ``cp`` = the port). So each flow gets one congestion CNM
and one release CNM per stay in the set; the congestion point lets the source edge switch give every flow of one
port the port's latest ``n`` (flb-isolate), so that a port's flows sum to one link's rate. When a port's count changes
(a join or a release) every other flow in its set owes its source a **refresh**: a congestion CNM with the port's
current ``n`` and ``cp``; an in-range event with no CNM of its own carries the lowest debt (``port * n_slots +
slot``, any port), so a source's ``n`` follows the port's (issue 17).

Pipeline (one register stage per cycle, all moved by one ``adv``; latency 6)::

    A0 accept      A1                  A2               A3            A4                    A5             A6 out
    i or ctl ----> port's q + addend -> port's q read -> q >= K:   -> port's set: found, -> CNM: flag,  -> o
    (ctl once      (clamped); the q    (it holds this   add / rel     add / release (the    flow, src, n;
    drained);      registers written   event's result)                set registers)        counters
    addend formed

Choices where the paper is silent (all in the datasheet): a per-port set of ``n_slots`` congested flows, ``n`` its
count, a full set notifies no more (counted); only enqueues notify, once per flow per stay in the set; releases ride
the port's events one at a time, lowest slot first (the source's timeout covers a port gone silent); ``q >= K`` is
congested; the estimate clamps at 0 and saturates at the top (counted); forged ports are rejected (counted); K is
``ctl`` table 0 (0 ignored), written between two events; reset empties everything and restores K; refreshes
lowest debt first, on events without a CNM of their own, not counted.

Every loop is one stage wide (the q registers at A1, the set registers at A4, the refresh debts at A5), so
back-to-back events of one port need no forwarding: each sees the state its predecessor left.
"""

from amaranth import Cat, C, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import below, check_int, ControlSignature
from lbpipe.hdl.lib.meta import TAG_BITS
from lbpipe.hdl.lib.stage import counter32

__all__ = ["Cnm", "CnmItem", "CnmResult", "check_parameters", "TABLE_THRESHOLD", "N_STATS"]

TABLE_THRESHOLD = 0     # data[:q_bits] = K (0 is ignored); any index
N_STATS = 5             # congestion CNMs, release CNMs, set full, clamped, rejected


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_ports, n_slots, n_edges, flow_bits, amount_bits, q_bits, threshold):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_ports", n_ports), ("n_slots", n_slots), ("n_edges", n_edges),
                        ("flow_bits", flow_bits), ("amount_bits", amount_bits), ("q_bits", q_bits),
                        ("threshold", threshold)):
        check_int(name, value)
    if not 1 <= n_ports <= 32:
        raise ValueError(f"n_ports must be 1 to 32, not {n_ports}")
    if not 1 <= n_slots <= 8:
        raise ValueError(f"n_slots must be 1 to 8, not {n_slots}")
    if not 1 <= n_edges <= 1024:
        raise ValueError(f"n_edges must be 1 to 1,024, not {n_edges}")
    if not 1 <= flow_bits <= 24:
        raise ValueError(f"flow_bits must be 1 to 24, not {flow_bits}")
    if not 4 <= q_bits <= 32:
        raise ValueError(f"q_bits must be 4 to 32, not {q_bits}")
    if not 1 <= amount_bits <= q_bits:
        raise ValueError(f"amount_bits must be 1 to q_bits ({q_bits}), not {amount_bits}")
    if not 1 <= threshold < 1 << q_bits:
        raise ValueError(f"threshold must be 1 to 2**q_bits - 1, not {threshold}")


def CnmItem(*, n_ports=8, n_edges=16, flow_bits=16, amount_bits=8):
    """One queue event at the destination edge switch: egress ``port``, ``deq`` (0 enqueue, 1 dequeue), the
    packet's ``amount`` (bytes or packets, as the threshold), its ``flow`` id and source edge switch ``src``."""
    return data.StructLayout({"port": _bits(n_ports), "deq": 1, "amount": amount_bits, "flow": flow_bits,
                              "src": _bits(n_edges), "tag": TAG_BITS})


def CnmResult(*, n_ports=8, n_slots=4, n_edges=16, flow_bits=16, q_bits=16):
    """The event's identity passed through; ``ok`` (0: forged port, nothing done); ``qlen`` (the port's estimate
    after the event); the CNM: ``cnm`` (valid), ``cnm_cong`` (1 congestion, 0 release), ``cnm_flow``,
    ``cnm_src`` (the source edge switch it goes to), ``cnm_n`` (congested flows of the port), ``cnm_cp`` (the
    congestion point: the egress port whose set the flow is in); 0 without a CNM."""
    eb, pb = _bits(n_edges), _bits(n_ports)
    return data.StructLayout({"port": pb, "deq": 1, "flow": flow_bits, "src": eb, "tag": TAG_BITS,
                              "ok": 1, "qlen": q_bits, "cnm": 1, "cnm_cong": 1, "cnm_flow": flow_bits,
                              "cnm_src": eb, "cnm_n": (n_slots).bit_length(), "cnm_cp": pb})


class Cnm(wiring.Component):
    """FLB congestion detection at the destination edge switch, one queue event per clock.

    Parameters
    ----------
    n_ports : int
        Egress ports, 1 to 32.
    n_slots : int
        Congested flows tracked per port (the set), 1 to 8.
    n_edges : int
        Edge switches (field ``src``), 1 to 1,024.
    flow_bits : int
        Width of a flow id, 1 to 24 (16: the paper's CRC16).
    amount_bits : int
        Width of one event's amount, 1 to ``q_bits``.
    q_bits : int
        Width of a queue estimate, 4 to 32 (saturating).
    threshold : int
        The isolation threshold K at reset, 1 to ``2**q_bits - 1``; ``ctl`` table 0 rewrites it.

    Members
    -------
    i : In(stream.Signature(CnmItem(...)))
    o : Out(stream.Signature(CnmResult(...)))
    ctl : In(ControlSignature())
    stats : Out(32 * 5)
        Congestion CNMs, release CNMs, set full (no CNM), clamped estimates, rejected items.
    """

    latency = 6

    def __init__(self, *, n_ports=8, n_slots=4, n_edges=16, flow_bits=16, amount_bits=8, q_bits=16,
                 threshold=512):
        check_parameters(n_ports=n_ports, n_slots=n_slots, n_edges=n_edges, flow_bits=flow_bits,
                         amount_bits=amount_bits, q_bits=q_bits, threshold=threshold)
        self._np, self._ns, self._ne, self._fb, self._ab, self._qb = (n_ports, n_slots, n_edges, flow_bits,
                                                                      amount_bits, q_bits)
        self._k0 = threshold
        self._eb = _bits(n_edges)
        self._item = CnmItem(n_ports=n_ports, n_edges=n_edges, flow_bits=flow_bits, amount_bits=amount_bits)
        self._slot = data.StructLayout({"valid": 1, "flow": flow_bits, "src": self._eb})
        super().__init__({
            "i": In(stream.Signature(self._item)),
            "o": Out(stream.Signature(CnmResult(n_ports=n_ports, n_slots=n_slots, n_edges=n_edges,
                                                flow_bits=flow_bits, q_bits=q_bits))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """No memories: the estimates and the sets are registers."""
        return 0

    def item_cycles(self, result):
        return 1

    def elaborate(self, platform):
        """The datasheet's block diagram: A0 -> A1 (estimates) -> A2 (read) -> A3 (K) -> A4 (sets) -> A5 (CNM)
        -> A6 out."""
        m = Module()
        st = self._registers()
        adv = Signal()
        m.d.comb += adv.eq(~st[6]["valid"] | self.o.ready)
        self._accept_stage(m, adv, st)
        self._queue_stage(m, adv, st)
        self._read_stage(m, adv, st)
        self._threshold_stage(m, adv, st)
        self._set_stage(m, adv, st)
        self._cnm_stage(m, adv, st)
        self._output(m, st)
        return m

    def _registers(self):
        """Per stage A1..A6: ``valid``, ``ok``, the item, the one-hot port, and what each stage adds (carried on)."""
        st = {}
        for n in range(1, 7):
            st[n] = {"valid": Signal(name=f"a{n}_valid"), "ok": Signal(name=f"a{n}_ok"),
                     "item": Signal(self._item, name=f"a{n}_item", reset_less=True),
                     "ph": Signal(self._np, name=f"a{n}_port_onehot", reset_less=True)}
        st[1].update(addend=Signal(self._qb, name="a1_addend", reset_less=True), down=Signal(name="a1_down"))
        st[2]["over"] = Signal(self._np, name="a2_out_of_range")
        for n in range(3, 7):
            st[n]["clamp"] = Signal(name=f"a{n}_clamp")
        for n in range(3, 7):
            st[n]["qlen"] = Signal(self._qb, name=f"a{n}_qlen", reset_less=True)
        for n in (4, 5):
            st[n].update(add=Signal(name=f"a{n}_add"), rel=Signal(name=f"a{n}_rel"))
        st[5].update(found=Signal(self._np, name="a5_found"), free=Signal(name="a5_any_free"),
                     some=Signal(name="a5_any_valid"), vold=Signal(self._ns, name="a5_valid_before"),
                     rflow=Signal(self._fb, name="a5_rel_flow", reset_less=True),
                     rsrc=Signal(self._eb, name="a5_rel_src", reset_less=True))
        st[6].update(cnm=Signal(name="a6_cnm"), cong=Signal(name="a6_cong"), n=Signal(self._ns.bit_length(),
                     name="a6_n"), cflow=Signal(self._fb, name="a6_cnm_flow"), csrc=Signal(self._eb, name="a6_cnm_src"),
                     cp=Signal(_bits(self._np), name="a6_cnm_cp", reset_less=True))
        return st

    @staticmethod
    def _carry(m, src, dst, names=("valid", "ok", "item", "ph", "clamp", "qlen")):
        m.d.sync += [dst[n].eq(src[n]) for n in names if n in src and n in dst]

    @staticmethod
    def _select(onehot, values):
        """AND-OR of ``values`` by a one-hot select (0 when none)."""
        acc = 0
        for p, v in enumerate(values):
            acc = acc | Mux(onehot[p], v, 0)
        return acc

    def _accept_stage(self, m, adv, st):
        """A0: a control command once A1..A6 are empty (``i`` held meanwhile), else an event: its port decoded
        (one-hot) and range-checked, its signed step formed (``addend``: ``amount``, or ``2**q_bits - amount`` for
        a dequeue of a non-zero amount, ``down``). Loads A1. A threshold write lands here."""
        i, c, a1 = self.i.payload, self.ctl.payload, st[1]
        empty = ~Cat(st[n]["valid"] for n in range(1, 7)).any()
        m.d.comb += [self.ctl.ready.eq(empty), self.i.ready.eq(adv & ~self.ctl.valid)]
        self._k = k = Signal(self._qb, init=self._k0, name="threshold_k")
        kd = c.data[:self._qb]
        with m.If(self.ctl.valid & self.ctl.ready & (c.table == TABLE_THRESHOLD) & kd.any()):
            m.d.sync += k.eq(kd)
        take = self.i.valid & self.i.ready
        down = i.deq & i.amount.any()
        with m.If(adv):
            m.d.sync += [a1["valid"].eq(take), a1["ok"].eq(below(i.port, self._np)), a1["item"].eq(i),
                         a1["ph"].eq(Cat(i.port == p for p in range(self._np))), a1["down"].eq(down),
                         a1["addend"].eq(Mux(down, -i.amount, i.amount))]

    def _queue_stage(self, m, adv, st):
        """A1: the event's port's estimate ``q + addend`` (one adder per port); its carry out means the estimate
        left ``[0, 2**q_bits)`` (an enqueue overflowing, or a dequeue's borrow), and it is clamped to the top or to
        0. The q registers are written here, so a later stage reads this event's result. Loads A2."""
        a1, a2 = st[1], st[2]
        qb = self._qb
        self._q = []
        clamps = []
        for p in range(self._np):
            q = Signal(qb, name=f"q{p}")
            self._q.append(q)
            total = Signal(qb + 1, name=f"q{p}_sum")
            m.d.comb += total.eq(q + a1["addend"])
            over = Signal(name=f"q{p}_out_of_range")
            m.d.comb += over.eq(total[qb] ^ a1["down"])
            with m.If(adv & a1["ph"][p] & a1["valid"] & a1["ok"]):
                m.d.sync += q.eq(Mux(over, Mux(a1["down"], 0, (1 << qb) - 1), total[:qb]))
            clamps.append(over)
        with m.If(adv):
            self._carry(m, a1, a2)
            m.d.sync += a2["over"].eq(Mux(a1["valid"] & a1["ok"], Cat(clamps), 0))

    def _read_stage(self, m, adv, st):
        """A2: the port's estimate (the q registers hold this event's result: the next event writes them only as
        this one moves on) and whether it was clamped. Loads A3."""
        a2, a3 = st[2], st[3]
        with m.If(adv):
            self._carry(m, a2, a3)
            m.d.sync += [a3["qlen"].eq(Mux(a2["ok"], self._select(a2["ph"], self._q), 0)),
                         a3["clamp"].eq((a2["over"] & a2["ph"]).any())]

    def _threshold_stage(self, m, adv, st):
        """A3: against K: ``add`` (an enqueue leaving q >= K), ``rel`` (any event leaving q < K). Loads A4."""
        a3, a4 = st[3], st[4]
        above = a3["qlen"] >= self._k
        ok = a3["valid"] & a3["ok"]
        with m.If(adv):
            self._carry(m, a3, a4)
            m.d.sync += [a4["add"].eq(ok & ~a3["item"].deq & above), a4["rel"].eq(ok & ~above)]

    def _set_stage(self, m, adv, st):
        """A4: the port's set, every port's logic in parallel (gated by the one-hot port): ``found`` (the flow is
        in the set), the first free and the first valid slot; an ``add`` of a flow not found takes the first free
        slot (none: no CNM); a ``rel`` frees the first valid slot. Registered for A5: ``found`` per port, whether
        the port had a free slot and a valid one, its valid bits before, the first valid slot's flow and source.
        Loads A5."""
        a4, a5 = st[4], st[5]
        it = a4["item"]
        go = adv & a4["valid"]
        ns = self._ns
        founds, anyfree, anyvalid, vold, rflow, rsrc = [], [], [], [], [], []
        self._slots, self._owed = [], []
        for p in range(self._np):
            slots = [Signal(self._slot, name=f"set{p}_{j}") for j in range(ns)]
            v = Cat(s.valid for s in slots)
            found = Cat(s.valid & (s.flow == it.flow) for s in slots).any()
            ff = [~slots[j].valid & v[:j].all() if j else ~slots[0].valid for j in range(ns)]
            fv = [slots[j].valid & ~v[:j].any() if j else slots[0].valid for j in range(ns)]
            sel = go & a4["ph"][p]
            self._slots.append(slots)
            self._owed.append(Signal(ns, name=f"owed{p}"))
            for j in range(ns):
                with m.If(sel & a4["add"] & ~found & ff[j]):
                    m.d.sync += [slots[j].valid.eq(1), slots[j].flow.eq(it.flow), slots[j].src.eq(it.src)]
                with m.If(sel & a4["rel"] & fv[j]):
                    m.d.sync += slots[j].valid.eq(0)
            founds.append(found)
            anyfree.append(~v.all())
            anyvalid.append(v.any())
            vold.append(v)
            rflow.append(self._select(Cat(fv), [s.flow for s in slots]))
            rsrc.append(self._select(Cat(fv), [s.src for s in slots]))
        ph = a4["ph"]
        with m.If(adv):
            self._carry(m, a4, a5)
            m.d.sync += [a5["add"].eq(a4["add"]), a5["rel"].eq(a4["rel"]), a5["found"].eq(Cat(founds)),
                         a5["free"].eq(self._select(ph, anyfree)), a5["some"].eq(self._select(ph, anyvalid)),
                         a5["vold"].eq(self._select(ph, vold)), a5["rflow"].eq(self._select(ph, rflow)),
                         a5["rsrc"].eq(self._select(ph, rsrc))]

    def _refresh_read(self, m, adv, st, cong, rel):
        """A5: the refresh debts (a bit per slot) and the refresh. An event that changes its port's set (``cong``,
        ``rel``) replaces the port's debts with its other valid slots (``vold``: the slots before it, less the one
        released). Otherwise it pays the lowest debt in the order ``port * n_slots + slot``, chosen per port (the
        lowest owed slot) and across ports (the lowest port with one): its flow, source, its port's count and the
        port, registered for A6 with ``pv`` (a debt exists, an in-range event); the debt is cleared. The debts here
        are the previous event's (this one's change is written as it leaves: it pays nothing then); the sets hold
        this event's result (written at A4; the next event writes them only as this one moves on)."""
        a5, a6 = st[5], st[6]
        ns = self._ns
        anyp = [o.any() for o in self._owed]
        firstp = Cat(anyp[p] & ~Cat(anyp[:p]).any() if p else anyp[0] for p in range(self._np))
        pflow, psrc, slot1 = [], [], []
        for p, slots in enumerate(self._slots):
            o = self._owed[p]
            f = Cat(o[j] & ~o[:j].any() if j else o[0] for j in range(ns))
            slot1.append(f)
            pflow.append(self._select(f, [x.flow for x in slots]))
            psrc.append(self._select(f, [x.src for x in slots]))
        pops = [sum(x.valid for x in slots) for slots in self._slots]
        a6.update(pv=Signal(name="a6_refresh_valid"), fflow=Signal(self._fb, name="a6_refresh_flow"),
                  fsrc=Signal(self._eb, name="a6_refresh_src"), fn=Signal(ns.bit_length(), name="a6_refresh_n"),
                  fcp=Signal(_bits(self._np), name="a6_refresh_cp"))
        with m.If(adv):
            m.d.sync += [a6["pv"].eq(a5["valid"] & a5["ok"] & Cat(anyp).any()),
                         a6["fflow"].eq(self._select(firstp, pflow)), a6["fsrc"].eq(self._select(firstp, psrc)),
                         a6["fn"].eq(self._select(firstp, pops)),
                         a6["fcp"].eq(self._select(firstp, [C(p, _bits(self._np)) for p in range(self._np)]))]
        go = adv & a5["valid"] & a5["ok"]
        vold = a5["vold"]
        fv = Cat(vold[j] & ~vold[:j].any() if j else vold[0] for j in range(ns))
        others = vold & ~Mux(rel, fv, 0)
        for p in range(self._np):
            with m.If(go & a5["ph"][p] & (cong | rel)):
                m.d.sync += self._owed[p].eq(others)
            with m.Elif(go & ~cong & ~rel & firstp[p]):
                m.d.sync += self._owed[p].eq(self._owed[p] & ~slot1[p])

    def _cnm_stage(self, m, adv, st):
        """A5: the CNM: congestion (``add``, not found, a free slot), release (``rel``, a valid slot); ``n`` the
        set's count before, plus one for a congestion CNM; every CNM field 0 without one. The counters. Loads A6."""
        a5, a6 = st[5], st[6]
        found = (a5["found"] & a5["ph"]).any()
        cong = a5["add"] & ~found & a5["free"]
        rel = a5["rel"] & a5["some"]
        full = a5["add"] & ~found & ~a5["free"]
        pop = sum(a5["vold"][j] for j in range(self._ns))
        it = a5["item"]
        with m.If(adv):
            self._carry(m, a5, a6)
            m.d.sync += [a6["cnm"].eq(cong | rel), a6["cong"].eq(cong),
                         a6["n"].eq(Mux(cong, pop + 1, Mux(rel, pop, 0))),
                         a6["cflow"].eq(Mux(cong, it.flow, Mux(rel, a5["rflow"], 0))),
                         a6["csrc"].eq(Mux(cong, it.src, Mux(rel, a5["rsrc"], 0))),
                         a6["cp"].eq(Mux(a5["add"] | a5["rel"], it.port, 0))]
        self._refresh_read(m, adv, st, cong, rel)
        go = adv & a5["valid"]
        counts = [counter32(m, "n_cong", go & cong), counter32(m, "n_release", go & rel),
                  counter32(m, "n_full", go & full), counter32(m, "n_clamped", go & a5["clamp"]),
                  counter32(m, "n_rejected", go & ~a5["ok"])]
        m.d.comb += self.stats.eq(Cat(*counts))

    def _output(self, m, st):
        """``o`` from A6's registers. The congestion point ``cnm_cp`` (the event's port, whose set the CNM's flow is
        in) is registered at A5 from ``add | rel`` (registers) and gated by A6's ``cnm`` here, one LUT after the
        registers, so that it adds nothing to A5's CNM decision."""
        a6, o = st[6], self.o.payload
        it = a6["item"]
        fr = Signal(name="o_refresh")
        m.d.comb += fr.eq(a6["pv"] & ~a6["cnm"])
        m.d.comb += [self.o.valid.eq(a6["valid"]), o.port.eq(it.port), o.deq.eq(it.deq), o.flow.eq(it.flow),
                     o.src.eq(it.src), o.tag.eq(it.tag), o.ok.eq(a6["ok"]), o.qlen.eq(a6["qlen"]),
                     o.cnm.eq(a6["cnm"] | fr), o.cnm_cong.eq(a6["cong"] | fr),
                     o.cnm_flow.eq(Mux(a6["cnm"], a6["cflow"], Mux(fr, a6["fflow"], 0))),
                     o.cnm_src.eq(Mux(a6["cnm"], a6["csrc"], Mux(fr, a6["fsrc"], 0))),
                     o.cnm_n.eq(Mux(a6["cnm"], a6["n"], Mux(fr, a6["fn"], 0))),
                     o.cnm_cp.eq(Mux(a6["cnm"], a6["cp"], Mux(fr, a6["fcp"], 0)))]
