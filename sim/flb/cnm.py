"""Golden model of FLB's congestion detection and CNM generation at the destination edge switch (FLB: sections
3.2, 3.3, 5).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.flb.cnm.Cnm`: events apply in trace order. Written from the
paper and the datasheet (docs/flb_cnm.md), not from the RTL: per port a queue estimate and a list of congested
flows in slot order.

An event moves its port's estimate by its amount (enqueue up, dequeue down), clamped to ``[0, 2**q_bits - 1]``. An
enqueue leaving ``q >= K`` whose flow is not in the port's set takes the lowest free slot and emits a congestion
CNM with ``n`` = the set's count including it (no free slot: no CNM, counted). Any event leaving ``q < K`` while
the set is not empty frees the lowest occupied slot and emits that flow's release CNM with ``n`` = the count
before the removal. Every CNM names its congestion point ``cp``: the port.

Refresh CNMs: when a port's set count changes (a join or a release), every other flow in the set owes its source a
refresh (a congestion CNM with the port's current ``n`` and ``cp``). An in-range event whose output carries no CNM
of its own pays the lowest owed debt in the order ``port * n_slots + slot`` (any port), with the count as the event
leaves the sets.

Also here: :func:`cnm_trace` (seeded random traces).
"""

import random

from lbpipe.hdl.flb.cnm import check_parameters

__all__ = ["Cnm", "cnm_trace", "TABLE_THRESHOLD"]

TABLE_THRESHOLD = 0     # the datasheet's control table, written again here


def _width(n):
    return max(1, (n - 1).bit_length())


class Cnm:
    """The detection's state and rules; parameters are those of the RTL block."""

    def __init__(self, *, n_ports=8, n_slots=4, n_edges=16, flow_bits=16, amount_bits=8, q_bits=16,
                 threshold=512):
        check_parameters(n_ports=n_ports, n_slots=n_slots, n_edges=n_edges, flow_bits=flow_bits,
                         amount_bits=amount_bits, q_bits=q_bits, threshold=threshold)
        self.n_ports, self.n_slots, self.q_bits, self.threshold = n_ports, n_slots, q_bits, threshold
        self.reset()

    def reset(self):
        """Hardware reset: every estimate 0, every set empty, K back to the parameter, counters 0."""
        self.q = [0] * self.n_ports
        self.sets = [[None] * self.n_slots for _ in range(self.n_ports)]     # slot -> (flow, src) or None
        self.k = self.threshold
        self.counts = [0] * 5
        self.owed = [[False] * self.n_slots for _ in range(self.n_ports)]

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        """Table 0: K = data's low q_bits bits, unless 0; anything else changes nothing."""
        if cmd["table"] == TABLE_THRESHOLD:
            k = cmd["data"] % (1 << self.q_bits)
            if k:
                self.k = k

    def process(self, item):
        g = item.get
        port, deq, amount = g("port", 0), g("deq", 0), g("amount", 0)
        flow, src = g("flow", 0), g("src", 0)
        out = {"port": port, "deq": deq, "flow": flow, "src": src, "tag": g("tag", 0), "ok": 1, "qlen": 0,
               "cnm": 0, "cnm_cong": 0, "cnm_flow": 0, "cnm_src": 0, "cnm_n": 0, "cnm_cp": 0}
        if port >= self.n_ports:
            out["ok"] = 0
            self.counts[4] += 1
            return out
        top = (1 << self.q_bits) - 1
        q = self.q[port] - amount if deq else self.q[port] + amount
        if q < 0 or q > top:
            self.counts[3] += 1
        q = max(0, min(top, q))
        self.q[port] = out["qlen"] = q
        slots = self.sets[port]
        count = sum(s is not None for s in slots)
        if q >= self.k and not deq:
            if all(s is None or s[0] != flow for s in slots):
                if None in slots:
                    j = slots.index(None)
                    slots[j] = (flow, src)
                    self._owe(port, j)
                    out.update(cnm=1, cnm_cong=1, cnm_flow=flow, cnm_src=src, cnm_n=count + 1, cnm_cp=port)
                    self.counts[0] += 1
                else:
                    self.counts[2] += 1
        elif q < self.k and count:
            j = next(j for j, s in enumerate(slots) if s is not None)
            out.update(cnm=1, cnm_flow=slots[j][0], cnm_src=slots[j][1], cnm_n=count, cnm_cp=port)
            slots[j] = None
            self._owe(port, j)
            self.counts[1] += 1
        owed = [(p, j) for p in range(self.n_ports) for j in range(self.n_slots) if self.owed[p][j]]
        if owed and not out["cnm"]:
            p, j = owed[0]
            f, s = self.sets[p][j]
            self.owed[p][j] = False
            out.update(cnm=1, cnm_cong=1, cnm_flow=f, cnm_src=s, cnm_cp=p,
                       cnm_n=sum(x is not None for x in self.sets[p]))
        return out

    def _owe(self, port, j):
        """Port ``port``'s count changed by slot ``j`` (joined or left): the other flows in the set owe a refresh,
        slot ``j`` owes none."""
        for i, s in enumerate(self.sets[port]):
            self.owed[port][i] = s is not None and i != j

    def cycles(self, result):
        return 1


def cnm_trace(seed, n_items, **params):
    """A seeded random trace: a few ports, each with a handful of flows; bursts of enqueues that push a port over
    K and drains that bring it back (storms: several ports crossing together), dequeues below zero, enqueues near
    the estimate's top, forged ports, and control commands (a new K, K = 0, other tables)."""
    p = dict(n_ports=8, n_slots=4, n_edges=16, flow_bits=16, amount_bits=8, q_bits=16, threshold=512)
    p.update(params)
    npo, ne, fb, ab, qb = p["n_ports"], p["n_edges"], p["flow_bits"], p["amount_bits"], p["q_bits"]
    rng = random.Random(seed)
    k = p["threshold"]
    amax = min((1 << ab) - 1, max(1, k // 3))
    flows = [(rng.randrange(1 << fb), rng.randrange(ne)) for _ in range(rng.randrange(3, 3 * p["n_slots"] + 4))]
    pb = _width(npo)
    events, sent = [], 0
    mode = {q: rng.random() < 0.5 for q in range(npo)}       # filling or draining

    def item(port, deq, amount, f):
        nonlocal sent
        events.append({"item": {"port": port, "deq": deq, "amount": amount, "flow": f[0], "src": f[1],
                                "tag": sent & 0xFFFF}})
        sent += 1

    while sent < n_items:
        r = rng.random()
        if r < 0.01:
            k = rng.randrange(1, min(1 << qb, 4 * k + 2))
            events.append({"ctl": {"table": TABLE_THRESHOLD, "index": rng.randrange(1 << 24), "data": k}})
            continue
        if r < 0.015:
            events.append({"ctl": rng.choice([{"table": TABLE_THRESHOLD, "index": 0, "data": 0},
                                              {"table": TABLE_THRESHOLD, "index": 0, "data": 1 << qb},
                                              {"table": rng.randrange(1, 256), "index": 0, "data": 5}])})
            continue
        if r < 0.05:
            for q in range(npo):
                if rng.random() < 0.3:
                    mode[q] = not mode[q]
        port = rng.randrange(npo) if rng.random() < 0.9 else rng.randrange(1 << pb)
        if port >= npo:
            item(port, rng.randrange(2), rng.randrange(1 << ab), rng.choice(flows))
            continue
        fill = mode[port]
        for _ in range(rng.choice([1, 1, 2, 4])):
            if sent >= n_items:
                break
            if rng.random() < 0.02:
                item(port, 0, (1 << ab) - 1, rng.choice(flows))
            else:
                deq = int(rng.random() < (0.4 if fill else 0.65))
                item(port, deq, rng.randrange(amax + 1), rng.choice(flows))
    return events
