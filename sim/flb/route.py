"""Golden model of FLB's per-packet path decision at the source edge switch (FLB: section 3.1, Algorithm 1,
section 3.2's isolated paths).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.flb.route.Route`: events apply in trace order (a control
command between two packets). Written from the paper and the datasheet (docs/flb_route.md), not from the RTL: the
model keeps the flow table as a dict and applies Algorithm 1 to one packet at a time; the RTL precomputes the
decision for every possible current path and forwards in-flight results.

Per flow: the tick of its previous packet and its path. Per destination: each path's queueing delay and the
isolated-path set. A packet whose flow has no entry, or an entry ``timeout`` ticks old or older (the gap is taken
modulo ``2**time_bits``), is a new flow: it takes the minimum-delay eligible path (eligible: not isolated, or every
path when all are isolated; ties to the lowest index). An existing flow on path ``p`` with gap ``dt``: if ``p`` is
not eligible it takes the fastest eligible ``p'`` with ``delay(p) - delay(p') < dt`` (it cannot overtake the
previous packet), else the new-flow choice; otherwise the fastest eligible ``p'`` with ``0 < delay(p) - delay(p') <
dt``, else ``p``.

Also here: :func:`route_trace` (seeded random traces).
"""

import random

from lbpipe.hdl.flb.route import check_parameters

__all__ = ["Route", "route_trace", "TABLE_DELAY", "TABLE_ISOLATE"]

# Written again here (the datasheet's table), not imported from the RTL.
TABLE_DELAY, TABLE_ISOLATE = 0, 1


def _width(n):
    return max(1, (n - 1).bit_length())


class Route:
    """The path decision's state and rules; parameters are those of the RTL block."""

    def __init__(self, *, n_flows=65536, n_dests=16, n_paths=8, time_bits=16, delay_bits=16, timeout=4096):
        check_parameters(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, time_bits=time_bits,
                         delay_bits=delay_bits, timeout=timeout)
        self.n_flows, self.n_dests, self.n_paths = n_flows, n_dests, n_paths
        self.time_bits, self.delay_bits, self.timeout = time_bits, delay_bits, timeout
        # Control-plane tables: power-on zero, kept across reset.
        self.delay = [[0] * n_paths for _ in range(n_dests)]
        self.isolated = [0] * n_dests
        self.reset()

    def reset(self):
        """Hardware reset: the flow table empties (every flow is new); delays and isolated sets stay."""
        self.flows = {}         # flow -> (stamp, path)

    def stats(self):
        return []

    def control(self, cmd):
        """Apply one ``ctl`` command; unknown tables and out-of-range indices or values change nothing."""
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        if table == TABLE_DELAY:
            dest, path = index >> 4, index & 15
            if dest < self.n_dests and path < self.n_paths and value < 1 << self.delay_bits:
                self.delay[dest][path] = value
        elif table == TABLE_ISOLATE:
            if index < self.n_dests and value < 1 << self.n_paths:
                self.isolated[index] = value

    def eligible(self, dest):
        """The paths a non-congested flow may use: the non-isolated ones, or all when every path is isolated."""
        everything = list(range(self.n_paths))
        free = [p for p in everything if not self.isolated[dest] >> p & 1]
        return free or everything

    def _fastest(self, dest, paths):
        return min(paths, key=lambda p: (self.delay[dest][p], p))

    def process(self, item):
        flow, dest, now = item.get("flow", 0), item.get("dest", 0), item.get("now", 0)
        out = {"kind": item.get("kind", 0), "flow": flow, "dest": dest, "now": now, "tag": item.get("tag", 0),
               "path": 0, "new": 0, "rerouted": 0, "ok": 0}
        if not (flow < self.n_flows and dest < self.n_dests):
            return out
        entry = self.flows.get(flow)
        elig = self.eligible(dest)
        d = self.delay[dest]
        if entry is not None:
            gap = (now - entry[0]) % (1 << self.time_bits)
            existing = gap < self.timeout
        else:
            existing = False
        if not existing:
            path = self._fastest(dest, elig)
            out["new"] = 1
        else:
            cur = entry[1]
            if cur not in elig:
                # off an isolated path: the fastest path that cannot overtake the previous packet, else the fastest
                safe = [q for q in elig if d[cur] - d[q] < gap]
                path = self._fastest(dest, safe or elig)
            else:
                window = [q for q in elig if 0 < d[cur] - d[q] < gap]
                path = self._fastest(dest, window) if window else cur
            out["rerouted"] = int(path != cur)
        self.flows[flow] = (now, path)
        out.update(path=path, ok=1)
        return out

    def cycles(self, result):
        return 1


def route_trace(seed, n_items, **params):
    """A seeded random trace: random delays and isolated sets, then ``n_items`` packets of a few active flows
    toward a few destinations, back to back or with gaps (so flows reroute, stay, expire, and the timer wraps),
    with delay and isolation updates between packets, every path isolated now and then, and bad input (flows or
    destinations out of range, out-of-range commands, unknown tables)."""
    p = dict(n_flows=65536, n_dests=16, n_paths=8, time_bits=16, delay_bits=16, timeout=4096)
    p.update(params)
    nf, nd, n, tb, db, to = (p["n_flows"], p["n_dests"], p["n_paths"], p["time_bits"], p["delay_bits"],
                             p["timeout"])
    rng = random.Random(seed)
    events = []
    spread = min(1 << db, max(4, to))

    def delay():
        r = rng.random()
        if r < 0.5:
            return rng.randrange(min(spread, 8))
        return rng.randrange(spread) if r < 0.9 else rng.randrange(1 << db)

    for dst in range(min(nd, 8)):
        for q in range(n):
            events.append({"ctl": {"table": TABLE_DELAY, "index": dst << 4 | q, "data": delay()}})
    flows = rng.sample(range(nf), min(nf, rng.randrange(2, 12)))
    dests = {f: rng.randrange(min(nd, 8)) for f in flows}
    now = rng.randrange(1 << tb)
    sent = 0
    while sent < n_items:
        r = rng.random()
        if r < 0.15:
            dst = dests[rng.choice(flows)]
            events.append({"ctl": {"table": TABLE_DELAY, "index": dst << 4 | rng.randrange(n), "data": delay()}})
            continue
        if r < 0.17:
            dst = rng.randrange(min(nd, 8))
            mask = rng.choice([0, 0, 1 << rng.randrange(n), rng.randrange(1 << n), (1 << n) - 1])
            events.append({"ctl": {"table": TABLE_ISOLATE, "index": dst, "data": mask}})
            continue
        if r < 0.175:
            events.append({"ctl": rng.choice([
                {"table": TABLE_DELAY, "index": rng.randrange(1 << 24), "data": rng.randrange(1 << db)},
                {"table": TABLE_DELAY, "index": rng.randrange(nd) << 4 | rng.randrange(min(n, 15), 16),
                 "data": rng.randrange(1 << db) if n < 16 else 1 << db},
                {"table": TABLE_DELAY, "index": rng.randrange(nd) << 4, "data": rng.randrange(1 << db, 1 << 40)},
                {"table": TABLE_ISOLATE, "index": rng.randrange(nd, 1 << 24), "data": 0},
                {"table": TABLE_ISOLATE, "index": rng.randrange(nd), "data": rng.randrange(1 << n, 1 << 20)},
                {"table": rng.randrange(2, 256), "index": rng.randrange(1 << 24), "data": rng.randrange(1 << 64)},
            ])})
            continue
        step = rng.choice([0, 0, 1, 1, 2, rng.randrange(to // 2 + 1), rng.randrange(2 * to + 1),
                           rng.randrange(1 << tb)])
        now = (now + step) % (1 << tb)
        if rng.random() < 0.03:
            flow, dest = rng.randrange(1 << _width(nf)), rng.randrange(1 << _width(nd))
        else:
            flow = rng.choice(flows)
            dest = dests[flow]
        burst = rng.choice([1, 1, 1, 2, 3])
        for _ in range(burst):
            if sent >= n_items:
                break
            events.append({"item": {"kind": 1, "flow": flow, "dest": dest, "now": now, "tag": sent & 0xFFFF}})
            sent += 1
    return events
