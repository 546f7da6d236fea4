"""Golden model of FLB's isolation table at the source edge switch (FLB: sections 3.2, 3.3; datasheet
docs/flb_isolate.md).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.flb.isolate.Isolate`, written from the datasheet's rules.
Events apply in trace order (a CNM offered with a packet goes first). At every event, isolated flows idle for
``timeout`` ticks or more are released first; then a CNM isolates, refreshes or releases its flow, or a packet of an
isolated flow refreshes its stamp and is told its isolation path. A CNM names its congestion point (the destination
and ``cp``, the egress port there); a congestion CNM gives every entry of its point the point's latest ``n`` (so the
``m`` flows of one point here converge to ``m`` times ``C/n``). Per destination the isolation paths are the top
``k`` paths, ``k = ceil(sum of 1/n over the destination's isolated flows)`` capped at ``n_paths - 1``; a flow
takes path ``n_paths - 1 - (rank mod k)``, its rank the number of the destination's entries in lower slots.

Also here: :func:`isolate_trace` (seeded random traces).
"""

import random
from fractions import Fraction

from lbpipe.hdl.flb.isolate import check_parameters

__all__ = ["Isolate", "isolate_trace"]


def _width(n):
    return max(1, (n - 1).bit_length())


class Isolate:
    """Slots (``None`` or ``[flow, dest, n, stamp, cp]``); parameters are those of the RTL block."""

    def __init__(self, *, n_flows=65536, n_dests=16, n_paths=8, n_slots=8, time_bits=16, timeout=4096, n_ports=8):
        check_parameters(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, n_slots=n_slots, time_bits=time_bits,
                         timeout=timeout, n_ports=n_ports)
        self.n_flows, self.n_dests, self.n_paths, self.n_slots = n_flows, n_dests, n_paths, n_slots
        self.n_ports = n_ports
        self.mod, self.timeout = 1 << time_bits, timeout
        self.reset()

    def reset(self):
        """Hardware reset: the table empty, the counters 0."""
        self.slots = [None] * self.n_slots
        self._paired = False    # a CNM offered in the same clock as the next packet
        self.counts = [0] * 8   # isolated packets, congestion, release, timeouts, full, forged, stale, rejected

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        """No control tables: every command is ignored."""
        self._paired = False

    def _expire(self, now):
        for j, s in enumerate(self.slots):
            if s is not None and (now - s[3]) % self.mod >= self.timeout:
                self.slots[j] = None
                self.counts[3] += 1

    def _find(self, flow):
        return next((j for j, s in enumerate(self.slots) if s is not None and s[0] == flow), None)

    def process_stream(self, name, item):
        """The ``upd`` stream: one CNM. Produces no output."""
        if name != "upd":
            raise ValueError(f"flb-isolate has no input stream {name!r}")
        flow, dest, n, cong, now = item["flow"], item["dest"], item["n"], item["cong"], item["now"]
        cp = item.get("cp", 0)
        self._paired = True
        self._expire(now)
        if flow >= self.n_flows or dest >= self.n_dests or cp >= self.n_ports or (cong and not 1 <= n <= 8):
            self.counts[5] += 1
            return None
        j = self._find(flow)
        mine = j is not None and self.slots[j][1] == dest
        if cong:
            for s in self.slots:            # the point's latest n, for all its entries (whatever happens below)
                if s is not None and s[1] == dest and s[4] == cp:
                    s[2] = n
            if mine:
                self.slots[j][2], self.slots[j][3], self.slots[j][4] = n, now, cp
                self.counts[1] += 1
            elif j is not None:
                self.counts[6] += 1
            elif None in self.slots:
                self.slots[self.slots.index(None)] = [flow, dest, n, now, cp]
                self.counts[1] += 1
            else:
                self.counts[4] += 1
        elif mine:
            self.slots[j] = None
            self.counts[2] += 1
        else:
            self.counts[6] += 1
        return None

    def _k(self, dest):
        rate = sum((Fraction(1, s[2]) for s in self.slots if s is not None and s[1] == dest), Fraction(0))
        return min(self.n_paths - 1, -(-rate.numerator // rate.denominator))

    def process(self, item):
        flow, dest, now = item["flow"], item["dest"], item["now"]
        out = {"flow": flow, "dest": dest, "now": now, "tag": item.get("tag", 0), "ok": 1, "isolated": 0,
               "path": 0, "mask": 0, "held": int(self._paired)}
        self._paired = False
        self._expire(now)
        if flow >= self.n_flows or dest >= self.n_dests:
            out["ok"] = 0
            self.counts[7] += 1
            return out
        j = self._find(flow)
        k = self._k(dest)
        out["mask"] = sum(1 << (self.n_paths - 1 - t) for t in range(k))
        if j is not None and self.slots[j][1] == dest:
            self.slots[j][3] = now
            rank = sum(1 for s in self.slots[:j] if s is not None and s[1] == dest)
            out["isolated"], out["path"] = 1, self.n_paths - 1 - rank % k
            self.counts[0] += 1
        return out

    def cycles(self, result):
        """2 for a packet that waited a clock behind the CNM offered with it."""
        return 1 + result["held"]


def isolate_trace(seed, n_items, **params):
    """A seeded random trace: a few flows toward a few destinations, the timer advancing by small random steps
    (with wraps and occasional long idle gaps past the timeout); congestion CNMs (storms of several flows), releases,
    repeated CNMs, stale releases, CNMs naming another destination, forged CNMs (range, congestion point, n 0 or
    above 8), packets out of range, and ignored control commands. Each flow belongs to one of a few congestion
    points of its destination; a point's CNMs carry varying ``n``. A CNM is followed by a packet of the same flow
    half the time (offered in the same clock)."""
    p = dict(n_flows=65536, n_dests=16, n_paths=8, n_slots=8, time_bits=16, timeout=4096, n_ports=8)
    p.update(params)
    nf, nd, tb, to, npo = p["n_flows"], p["n_dests"], p["time_bits"], p["timeout"], p["n_ports"]
    rng = random.Random(seed)
    mod = 1 << tb
    points = min(npo, 3)
    flows = [(rng.randrange(nf), rng.randrange(nd)) for _ in range(rng.randrange(4, 3 * p["n_slots"] + 4))]
    where = {f: rng.randrange(points) for f in flows}
    fb, db, cb = _width(nf), _width(nd), _width(npo)
    now = rng.randrange(mod)
    step = max(1, to // 16)
    events, sent = [], 0

    def packet(flow, dest):
        nonlocal sent
        events.append({"item": {"flow": flow, "dest": dest, "now": now, "tag": sent & 0xFFFF}})
        sent += 1

    def cnm(flow, dest, n, cong, cp=None):
        cp = where.get((flow, dest), 0) if cp is None else cp
        events.append({"upd": {"flow": flow, "dest": dest, "cp": cp, "n": n, "cong": cong, "now": now}})

    while sent < n_items:
        r = rng.random()
        now = (now + rng.randrange(0, step + 1)) % mod
        if r < 0.01:
            now = (now + to + rng.randrange(step + 1)) % mod
        if r < 0.015:
            events.append({"ctl": {"table": rng.randrange(4), "index": rng.randrange(64), "data": rng.randrange(256)}})
            continue
        f, d = rng.choice(flows)
        if r < 0.06:
            for _ in range(rng.randrange(2, 6)):         # a storm
                g, e = rng.choice(flows)
                cnm(g, e, rng.randrange(1, 9), 1)
            packet(f, d)
            continue
        if r < 0.12:
            cnm(f, d, rng.randrange(1, 9), int(rng.random() < 0.6))
        elif r < 0.14:
            cnm(f, rng.randrange(nd), rng.randrange(16), rng.randrange(2), rng.randrange(points))   # any dest, n
        elif r < 0.16:
            cnm(rng.randrange(1 << fb), rng.randrange(1 << db), rng.randrange(16), rng.randrange(2),
                rng.randrange(1 << cb))
        if rng.random() < 0.03:
            packet(rng.randrange(1 << fb), rng.randrange(1 << db))
        else:
            packet(f, d)
    return events
