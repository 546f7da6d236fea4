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
not eligible it takes the fastest eligible ``p'`` that is slower than ``p`` or has ``delay(p) - delay(p') <= dt - 1
- margin`` (it cannot overtake the previous packet), else the new-flow choice; otherwise the fastest eligible ``p'``
with ``0 < delay(p) - delay(p') <= dt - 1 - margin``, else ``p``. ``margin`` (ticks) narrows the window for the
tick rounding (datasheet "Tick rounding and margin"); with ``margin`` 0 the window is the paper's ``0 < ... < dt``.

With ``upd=True`` the ``upd`` stream's items (``process_stream``) write a delay or an isolated set, applied in
trace order (a packet taken in the same clock as an update or later sees it).

Also here: :func:`route_trace` (seeded random traces; with ``upd=True`` mostly updates on ``upd``).
"""

import random

from lbpipe.hdl.flb.route import check_parameters

__all__ = ["Route", "route_trace", "TABLE_DELAY", "TABLE_ISOLATE", "MARGIN"]

# Written again here (the datasheet's table and default), not imported from the RTL.
TABLE_DELAY, TABLE_ISOLATE = 0, 1
MARGIN = 0


def _width(n):
    return max(1, (n - 1).bit_length())


class Route:
    """The path decision's state and rules; parameters are those of the RTL block."""

    def __init__(self, *, n_flows=65536, n_dests=16, n_paths=8, time_bits=16, delay_bits=16, timeout=4096,
                 margin=MARGIN, upd=False, force=False):
        self.upd, self.force = upd, force
        check_parameters(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, time_bits=time_bits,
                         delay_bits=delay_bits, timeout=timeout, margin=margin)
        self.margin = margin
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

    def process_stream(self, name, item):
        """One item of the ``upd`` stream (``upd=True``), applied at once: the trace puts an update offered in a
        packet's clock before that packet, so the packet sees it (the datasheet's rule). ``isolate`` 0: the delay
        of (``dest``, ``path``); 1: the isolated set of ``dest``. Out-of-range ``dest`` or ``path``: ignored."""
        if name != "upd" or not self.upd:
            raise ValueError(f"flb-route has no input stream {name!r} (upd={self.upd})")
        dest = item.get("dest", 0)
        if dest >= self.n_dests:
            return None
        if item.get("isolate", 0):
            self.isolated[dest] = item.get("mask", 0) & ((1 << self.n_paths) - 1)
        elif item.get("path", 0) < self.n_paths:
            self.delay[dest][item["path"]] = item.get("delay", 0) & ((1 << self.delay_bits) - 1)
        return None

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
            # the largest difference a move may have: the gap less one tick (the paper's strict "<") less the margin
            most = gap - 1 - self.margin
            if cur not in elig:
                # off an isolated path: the fastest path that cannot overtake the previous packet (a slower one, or
                # one within the window's bound), else the fastest
                safe = [q for q in elig if d[cur] - d[q] < 0 or d[cur] - d[q] <= most]
                path = self._fastest(dest, safe or elig)
            else:
                window = [q for q in elig if 0 < d[cur] - d[q] <= most]
                path = self._fastest(dest, window) if window else cur
            out["rerouted"] = int(path != cur)
        if self.force and item.get("force", 0):
            # a path decided upstream (the isolation path), recorded as the flow's path
            path = item.get("fpath", 0)
            if existing:
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
    p = dict(n_flows=65536, n_dests=16, n_paths=8, time_bits=16, delay_bits=16, timeout=4096, upd=False)
    p.update(params)
    if p["upd"]:
        return _upd_trace(seed, n_items, p)
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


def _upd_trace(seed, n_items, p):
    """``upd=True``: the delays and isolated sets arrive mostly on ``upd``, about one update a clock: an update in
    the same clock as a packet (often of the packet's own destination and of the path its flow is on), updates in
    clocks of their own, updates out of range; now and then a ``ctl`` command still (it drains the pipeline)."""
    nf, nd, n, tb, db, to = (p["n_flows"], p["n_dests"], p["n_paths"], p["time_bits"], p["delay_bits"],
                             p["timeout"])
    rng = random.Random(seed)
    pw, dw = _width(n), _width(nd)
    spread = min(1 << db, max(4, to))
    events = []

    def delay():
        r = rng.random()
        return rng.randrange(min(spread, 8)) if r < 0.5 else rng.randrange(spread if r < 0.9 else 1 << db)

    def update(dest):
        r = rng.random()
        if r < 0.05:     # out of range: a destination or (delay updates) a path that does not exist
            bad_dest = nd < 1 << dw and rng.random() < 0.5
            return {"upd": {"isolate": int(bad_dest and rng.random() < 0.5),
                            "dest": rng.randrange(nd, 1 << dw) if bad_dest else dest,
                            "path": rng.randrange(n, 1 << pw) if n < 1 << pw else rng.randrange(n),
                            "delay": delay(), "mask": rng.randrange(1 << n)}}
        if r < 0.17:
            mask = rng.choice([0, 0, 1 << rng.randrange(n), rng.randrange(1 << n), (1 << n) - 1])
            return {"upd": {"isolate": 1, "dest": dest, "path": rng.randrange(1 << pw), "delay": rng.randrange(1 << db),
                            "mask": mask}}
        return {"upd": {"isolate": 0, "dest": dest, "path": rng.randrange(n), "delay": delay(),
                        "mask": rng.randrange(1 << n)}}

    for dst in range(min(nd, 8)):
        for q in range(n):
            events.append({"ctl": {"table": TABLE_DELAY, "index": dst << 4 | q, "data": delay()}})
    flows = rng.sample(range(nf), min(nf, rng.randrange(2, 12)))
    dests = {f: rng.randrange(min(nd, 8)) for f in flows}
    now = rng.randrange(1 << tb)
    sent = 0
    while sent < n_items:
        r = rng.random()
        if r < 0.01:
            events.append({"ctl": {"table": TABLE_DELAY, "index": dests[rng.choice(flows)] << 4 | rng.randrange(n),
                                   "data": delay()}})
            continue
        if r < 0.15:
            events.append(update(dests[rng.choice(flows)]))     # an update in a clock of its own
            continue
        step = rng.choice([0, 0, 1, 1, 2, rng.randrange(to // 2 + 1), rng.randrange(2 * to + 1),
                           rng.randrange(1 << tb)])
        now = (now + step) % (1 << tb)
        if rng.random() < 0.03:
            flow, dest = rng.randrange(1 << _width(nf)), rng.randrange(1 << dw)
        else:
            flow = rng.choice(flows)
            dest = dests[flow]
        for _ in range(rng.choice([1, 1, 2, 3])):
            if sent >= n_items:
                break
            if rng.random() < 0.7:      # an update offered with the packet (applies before it)
                events.append(update(dest if dest < nd and rng.random() < 0.8 else dests[rng.choice(flows)]))
            events.append({"item": {"kind": 1, "flow": flow, "dest": dest, "now": now, "tag": sent & 0xFFFF}})
            sent += 1
    return events
