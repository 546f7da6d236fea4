"""Golden model of FLB's one-way-delay measurement and piggyback at the destination edge switch (FLB: section 3.1).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.flb.owd.Owd`: events apply in trace order. Written from the
paper and the datasheet (docs/flb_owd.md), not from the RTL: the model keeps the bases and the slots in dicts and
handles one packet at a time; the RTL forwards the operations in flight.

Per (source edge, path): the base delay (the smallest one-way delay seen, modular). Per source edge: the newest
measurement not yet sent back. A sampled packet measures ``owd = (now - stamp) mod 2**time_bits``; with no base, or
``(owd - base) mod 2**time_bits >= 2**(time_bits - 1)`` (owd below the base), the base becomes ``owd`` and the
delay is 0; otherwise the delay is ``owd - base``, saturated to ``2**delay_bits - 1``. The measurement replaces its
edge's slot. A reverse packet toward edge ``e`` carries ``e``'s slot, which it empties.

Also here: :func:`owd_trace` (seeded random traces).
"""

import random

from lbpipe.hdl.flb.owd import check_parameters

__all__ = ["Owd", "owd_trace", "TABLE_FORGET", "TABLE_FORGET_ALL"]

# Written again here (the datasheet's table), not imported from the RTL.
TABLE_FORGET, TABLE_FORGET_ALL = 0, 1


def _width(n):
    return max(1, (n - 1).bit_length())


class Owd:
    """The measurement's state and rules; parameters are those of the RTL block."""

    def __init__(self, *, n_edges=16, n_paths=8, time_bits=16, delay_bits=16):
        check_parameters(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
        self.n_edges, self.n_paths, self.time_bits, self.delay_bits = n_edges, n_paths, time_bits, delay_bits
        self.reset()

    def reset(self):
        """Hardware reset: no base, no pending measurement, counters 0."""
        self.base = {}          # (edge, path) -> base
        self.slot = {}          # edge -> (path, delay), not yet sent
        self.counts = [0] * 5   # samples, bases set, piggybacks, reverses with nothing, rejected

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        """FORGET one base (in range), FORGET_ALL (every base and slot); anything else changes nothing."""
        table, index = cmd["table"], cmd["index"]
        if table == TABLE_FORGET:
            edge, path = index >> 4, index & 15
            if edge < self.n_edges and path < self.n_paths:
                self.base.pop((edge, path), None)
        elif table == TABLE_FORGET_ALL:
            self.base.clear()
            self.slot.clear()

    def process(self, item):
        g = item.get
        out = {"kind": g("kind", 0), "sampled": g("sampled", 0), "edge": g("edge", 0), "path": g("path", 0),
               "reverse": g("reverse", 0), "to_edge": g("to_edge", 0), "tag": g("tag", 0), "ok": 1, "qdelay": 0,
               "base_set": 0, "pb_valid": 0, "pb_path": 0, "pb_delay": 0}
        sampled, reverse = out["sampled"], out["reverse"]
        if sampled and reverse:
            out["ok"] = 0
        elif sampled:
            edge, path = out["edge"], out["path"]
            if edge < self.n_edges and path < self.n_paths:
                self._sample(out, edge, path, g("stamp", 0), g("now", 0))
            else:
                out["ok"] = 0
        elif reverse:
            if out["to_edge"] < self.n_edges:
                self._reverse(out, out["to_edge"])
            else:
                out["ok"] = 0
        if not out["ok"]:
            self.counts[4] += 1
        return out

    def _sample(self, out, edge, path, stamp, now):
        mod = 1 << self.time_bits
        owd = (now - stamp) % mod
        base = self.base.get((edge, path))
        diff = None if base is None else (owd - base) % mod
        if diff is None or diff >= mod // 2:
            self.base[(edge, path)] = owd
            delay, out["base_set"] = 0, 1
            self.counts[1] += 1
        else:
            delay = min(diff, (1 << self.delay_bits) - 1)
        self.slot[edge] = (path, delay)
        out["qdelay"] = delay
        self.counts[0] += 1

    def _reverse(self, out, edge):
        pending = self.slot.pop(edge, None)
        if pending is None:
            self.counts[3] += 1
            return
        out.update(pb_valid=1, pb_path=pending[0], pb_delay=pending[1])
        self.counts[2] += 1

    def cycles(self, result):
        return 1


def owd_trace(seed, n_items, **params):
    """A seeded random trace: a few source edges, each with its own clock offset and a base delay per path;
    sampled packets with a queueing delay that rises and falls (a base coming down when the first samples met a
    queue), bursts of back-to-back samples of one (edge, path), stamps and ``now`` wrapping, reverse packets toward
    the edges, packets with neither flag, bad items (both flags, edges or paths out of range) and control commands
    (FORGET, FORGET_ALL, out of range, unknown tables)."""
    p = dict(n_edges=16, n_paths=8, time_bits=16, delay_bits=16)
    p.update(params)
    ne, n, tb = p["n_edges"], p["n_paths"], p["time_bits"]
    mod = 1 << tb
    rng = random.Random(seed)
    eb, pb = _width(ne), _width(n)
    edges = rng.sample(range(ne), min(ne, rng.randrange(1, 5)))
    offset = {e: rng.randrange(mod) for e in range(1 << eb)}
    qmax = max(1, min(mod // 2 - 1, rng.choice([4, 16, mod // 4, mod // 2 - 1])))
    prop = {(e, q): rng.randrange(max(1, mod // 8)) for e in range(1 << eb) for q in range(1 << pb)}
    queue = {k: rng.randrange(qmax + 1) for k in prop}
    now = rng.randrange(mod)
    events = []
    sent = 0
    last = None

    def item(**fields):
        nonlocal sent
        base = {"kind": 1, "sampled": 0, "edge": 0, "path": 0, "stamp": 0, "now": now, "reverse": 0,
                "to_edge": 0, "tag": sent & 0xFFFF}
        base.update(fields)
        events.append({"item": base})
        sent += 1

    def sample(e, q):
        k = (e, q)
        queue[k] = max(0, min(qmax, queue[k] + rng.choice([-3, -1, 0, 0, 1, 2, 5, -qmax, qmax // 2])))
        owd = prop[k] + queue[k]
        stamp = (now - owd + offset[e]) % mod     # the source's clock runs offset[e] ticks ahead
        item(sampled=1, edge=e, path=q, stamp=stamp)

    while sent < n_items:
        r = rng.random()
        if r < 0.02:
            events.append({"ctl": {"table": TABLE_FORGET, "index": rng.choice(edges) << 4 | rng.randrange(n),
                                   "data": rng.randrange(1 << 64)}})
            continue
        if r < 0.025:
            events.append({"ctl": rng.choice([
                {"table": TABLE_FORGET_ALL, "index": rng.randrange(1 << 24), "data": 0},
                {"table": TABLE_FORGET, "index": rng.randrange(1 << 24), "data": 0},
                {"table": TABLE_FORGET, "index": rng.randrange(ne, 1 << 20) << 4, "data": 0},
                {"table": TABLE_FORGET, "index": rng.choice(edges) << 4 | rng.randrange(min(n, 15), 16),
                 "data": 0},
                {"table": rng.randrange(2, 256), "index": rng.randrange(1 << 24), "data": rng.randrange(1 << 64)},
            ])})
            continue
        now = (now + rng.choice([0, 0, 1, 1, 2, 3, rng.randrange(mod)])) % mod
        if rng.random() < 0.05:
            prop[rng.choice(list(prop))] = rng.randrange(max(1, mod // 8))   # a route change: the base moves
        r = rng.random()
        if r < 0.45:
            if last is not None and rng.random() < 0.5:
                e, q = last
            else:
                e, q = rng.choice(edges), rng.randrange(n)
            last = (e, q)
            for _ in range(rng.choice([1, 1, 2, 3, 4])):
                if sent >= n_items:
                    break
                sample(e, q)
        elif r < 0.85:
            e = rng.choice(edges) if rng.random() < 0.9 else rng.randrange(ne)
            for _ in range(rng.choice([1, 1, 2, 3])):
                if sent >= n_items:
                    break
                item(reverse=1, to_edge=e)
        elif r < 0.92:
            item(edge=rng.randrange(1 << eb), path=rng.randrange(1 << pb), to_edge=rng.randrange(1 << eb),
                 stamp=rng.randrange(mod))
        else:
            bad = rng.randrange(3)
            if bad == 0:
                item(sampled=1, reverse=1, edge=rng.choice(edges), path=rng.randrange(n),
                     to_edge=rng.choice(edges), stamp=rng.randrange(mod))
            elif bad == 1:
                item(sampled=1, edge=rng.randrange(1 << eb), path=rng.randrange(1 << pb), stamp=rng.randrange(mod))
            else:
                item(reverse=1, to_edge=rng.randrange(1 << eb))
    return events
