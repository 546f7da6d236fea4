"""Golden model of FLB's per-flow previous-hop MAC (FLB: section 3.2, "CNM construction"; section 3.3; section 3.4's
flow entry; datasheet docs/flb_prevhop.md).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.flb.prevhop.PrevHop`: events apply in trace order. Written
from the paper and the datasheet, not from the RTL: the table is a dict and items are handled one at a time; the RTL
reads every bank and selects one a stage later.

Per flow: the tick of its last data packet and the source MAC that packet arrived with. A data packet (``cnm`` 0)
with an individual source MAC overwrites its flow's entry. A CNM (``cnm`` 1) hits when its flow has an entry whose
age ``(now - stamp) mod 2**time_bits`` is below ``timeout``; a hit names the recorded MAC as the CNM's destination
and this switch's MAC (control table 0) as its source.

Also here: :func:`prevhop_trace` (seeded random traces).
"""

import random

from lbpipe.hdl.flb.prevhop import check_parameters

__all__ = ["PrevHop", "prevhop_trace", "TABLE_MY_MAC"]

# Written again here (the datasheet's table and the MAC layout), not imported from the RTL.
TABLE_MY_MAC = 0
_GROUP = 1 << 40        # the I/G bit of the first octet, the octets first-most-significant
_MAC_SPAN = 1 << 48


def _width(n):
    return max(1, (n - 1).bit_length())


class PrevHop:
    """The previous-hop table's state and rules; parameters are those of the RTL block."""

    def __init__(self, *, n_flows=65536, time_bits=16, timeout=4096):
        check_parameters(n_flows=n_flows, time_bits=time_bits, timeout=timeout)
        self.n_flows, self.mod, self.timeout = n_flows, 1 << time_bits, timeout
        self.my_mac = 0         # control-plane register: power-on 0, kept across reset
        self.reset()

    def reset(self):
        """Hardware reset: every entry gone, counters 0; the switch's MAC stays."""
        self.table = {}         # flow -> (stamp, mac)
        self.counts = [0] * 6   # recorded, moved, hits, misses without entry, misses aged, rejected

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        """Table 0 sets this switch's MAC when the data is an individual 48-bit address; anything else is ignored."""
        if cmd["table"] == TABLE_MY_MAC and cmd["data"] < _MAC_SPAN and not cmd["data"] & _GROUP:
            self.my_mac = cmd["data"]

    def _live(self, flow, now):
        entry = self.table.get(flow)
        if entry is None:
            return None, None
        return (now - entry[0]) % self.mod < self.timeout, entry[1]

    def process(self, item):
        g = item.get
        flow, cnm, now, mac = g("flow", 0), g("cnm", 0), g("now", 0), g("mac", 0)
        out = {"kind": g("kind", 0), "cnm": cnm, "flow": flow, "tag": g("tag", 0), "ok": 1, "hit": 0, "aged": 0,
               "moved": 0, "dst_mac": 0, "src_mac": 0}
        if flow >= self.n_flows or (not cnm and mac & _GROUP):
            out["ok"] = 0
            self.counts[5] += 1
            return out
        live, old = self._live(flow, now)
        if cnm:
            if live:
                out.update(hit=1, dst_mac=old, src_mac=self.my_mac)
                self.counts[2] += 1
            elif live is None:
                self.counts[3] += 1
            else:
                out["aged"] = 1
                self.counts[4] += 1
            return out
        if live and old != mac:
            out["moved"] = 1
            self.counts[1] += 1
        self.table[flow] = (now, mac)
        self.counts[0] += 1
        return out

    def cycles(self, result):
        return 1


def prevhop_trace(seed, n_items, **params):
    """A seeded random trace: a few flows, each arriving from one of a few previous hops (a route change now and
    then moves a flow to another hop; two flows of one index stand for a CRC16 collision), the timer advancing by
    small steps with wraps and occasional idle gaps past the timeout; CNMs for recorded flows (hits, often right
behind the flow's packets), for flows
    never recorded or aged out (misses), for flows out of range (forged); data packets with a group source MAC or
    out of range (rejected); the switch's MAC written first, then now and then again (valid, group, too wide) and
    unknown control tables."""
    p = dict(n_flows=65536, time_bits=16, timeout=4096)
    p.update(params)
    nf, tb, to = p["n_flows"], p["time_bits"], p["timeout"]
    mod = 1 << tb
    rng = random.Random(seed)
    hops = [rng.randrange(_MAC_SPAN) & ~_GROUP for _ in range(rng.randrange(2, 6))]
    flows = rng.sample(range(nf), min(nf, rng.randrange(3, 12)))
    hop = {f: rng.choice(hops) for f in flows}
    now = rng.randrange(mod)
    step = max(1, to // 8)
    # the control plane's bring-up writes the switch's MAC first (a register reset keeps: the trace's rerun after a
    # reset rewrites it, as a table's set-up)
    last = None
    events, sent = [{"ctl": {"table": TABLE_MY_MAC, "index": 0, "data": rng.randrange(_MAC_SPAN) & ~_GROUP}}], 0

    def item(**fields):
        nonlocal sent
        base = {"kind": 1, "cnm": 0, "flow": 0, "mac": 0, "now": now, "tag": sent & 0xFFFF}
        base.update(fields)
        events.append({"item": base})
        sent += 1

    while sent < n_items:
        r = rng.random()
        now = (now + rng.choice([0, 0, 1, 1, 2, rng.randrange(step + 1)])) % mod
        if r < 0.01:
            now = (now + to + rng.randrange(-2, step + 1)) % mod        # an idle gap around the timeout
        if r < 0.02:
            events.append({"ctl": rng.choice([
                {"table": TABLE_MY_MAC, "index": rng.randrange(1 << 24), "data": rng.randrange(_MAC_SPAN) & ~_GROUP},
                {"table": TABLE_MY_MAC, "index": 0, "data": rng.randrange(_MAC_SPAN) | _GROUP},
                {"table": TABLE_MY_MAC, "index": 0, "data": rng.randrange(_MAC_SPAN, 1 << 64)},
                {"table": rng.randrange(1, 256), "index": rng.randrange(1 << 24), "data": rng.randrange(1 << 64)},
            ])})
            continue
        f = last if last is not None and rng.random() < 0.4 else rng.choice(flows)
        if rng.random() < 0.03:
            hop[f] = rng.choice(hops)                                     # a route change
        if r < 0.55:
            for _ in range(rng.choice([1, 1, 2, 3])):                     # back-to-back packets of one flow
                if sent >= n_items:
                    break
                other = rng.random() < 0.05                               # a colliding flow from another hop
                item(flow=f, mac=rng.choice(hops) if other else hop[f])
                last = f
        elif r < 0.88:
            for _ in range(rng.choice([1, 1, 2])):
                if sent >= n_items:
                    break
                item(cnm=1, flow=f if rng.random() < 0.85 else rng.randrange(nf), mac=rng.randrange(_MAC_SPAN))
        elif r < 0.94:
            item(flow=f, mac=rng.randrange(_MAC_SPAN) | _GROUP)            # a group source address
        else:
            item(cnm=rng.randrange(2), flow=rng.randrange(1 << _width(nf)), mac=rng.choice(hops))
    return events
