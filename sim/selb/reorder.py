"""Golden model of SELB's destination-ToR reordering (SELB, paper 004: section III "Packet Reordering", after
ConWeave; datasheet docs/selb_reorder.md).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.selb.reorder.Reorder`, written from the datasheet's rules.
:meth:`Reorder.step` takes one item and returns the items that leave because of it, in release order (none, one, or
a burst). :meth:`Reorder.process` is the engines' one-result-per-item view of the same stream: it returns a slot
that the ``k``-th item to leave fills, whenever that happens (the block returns as many items as it takes, in release
order, not input order; a slot still empty when it is compared holds -1 in every field, which matches nothing the
hardware can send). Also here: :func:`reorder_trace`, seeded random traces that end with every buffer released.
"""

import random
from collections import deque

from lbpipe.hdl.selb.reorder import check_parameters
from lbpipe.hdl.lib.meta import PacketKind

__all__ = ["Reorder", "reorder_trace"]

DATA = PacketKind.DATA.value
FIELDS = ("kind", "tag", "flow", "epoch", "tail", "held")
# items, held, reorders (tails that released a buffer), timeouts, overflows, second reroutes, fallbacks, stale tails
N_STATS = 8


class Reorder:
    """Parameters are those of the RTL block."""

    def __init__(self, *, n_flows=1024, n_buffers=8, depth=32, time_bits=16, timeout=1024):
        check_parameters(n_flows=n_flows, n_buffers=n_buffers, depth=depth, time_bits=time_bits, timeout=timeout)
        self.nf, self.nb, self.depth, self.tb, self.timeout = n_flows, n_buffers, depth, time_bits, timeout
        self._slots = deque()
        self.reset()

    def reset(self):
        """Hardware reset: every flow at epoch 0 (the sweep), every buffer free and its held items gone, counters 0."""
        self.flows = {}                     # flow -> its in-order epoch (0 for a flow not in the dict)
        self.bufs = [None] * self.nb        # [flow, epoch, start, [(tag, tail), ...]]
        self.counts = [0] * N_STATS
        while self._slots:                  # items lost with the reset never fill their slots
            self._slots.popleft()

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        pass                                # no tables

    def process(self, item):
        slot = {k: -1 for k in FIELDS}
        self._slots.append(slot)
        for out in self.step(item):
            self._slots.popleft().update(out)
        return slot

    def held(self):
        """Buffers in use: ``[(index, flow, epoch, start, items held)]``."""
        return [(b, x[0], x[1], x[2], len(x[3])) for b, x in enumerate(self.bufs) if x is not None]

    def _release(self, b):
        flow, epoch, _, items = self.bufs[b]
        self.bufs[b] = None
        return [{"kind": DATA, "tag": tag, "flow": flow, "epoch": epoch, "tail": tail, "held": 1}
                for tag, tail in items]

    def step(self, item):
        """One item in; the items that leave because of it, in order."""
        out = []
        now = item["now"]
        self.counts[0] += 1
        # 1. timeouts: every buffer whose age reached ``timeout`` drains, lowest index first; its flow moves to the
        # held epoch as if the tail had come
        for b in range(self.nb):
            x = self.bufs[b]
            if x is not None and (now - x[2]) % (1 << self.tb) >= self.timeout:
                self.flows[x[0]] = x[1]
                self.counts[3] += 1
                out += self._release(b)
        me = {"kind": item["kind"], "tag": item["tag"], "flow": item["flow"], "epoch": item["epoch"],
              "tail": item["tail"], "held": 0}
        if item["kind"] != DATA:
            return out + [me]
        f, e, t = item["flow"], item["epoch"], item["tail"]
        b = next((b for b in range(self.nb) if self.bufs[b] is not None and self.bufs[b][0] == f), None)
        if b is not None:
            nb = self.bufs[b][1]
            if e != nb:
                if t:                               # the old path's tail: it leaves, then the buffer
                    self.flows[f] = nb
                    self.counts[2] += 1
                    return out + [me] + self._release(b)
                return out + [me]                   # an old-path packet before the tail
            self.bufs[b][3].append((item["tag"], t))
            self.counts[1] += 1
            if t:                                   # a second reroute's tail: the buffer drains with it last
                self.flows[f] = nb ^ 1
                self.counts[5] += 1
                return out + self._release(b)
            if len(self.bufs[b][3]) == self.depth:  # the buffer is full: it drains with this item last
                self.flows[f] = nb
                self.counts[4] += 1
                return out + self._release(b)
            return out
        ep = self.flows.get(f, 0)                   # an unknown flow is in order at epoch 0 (selb-reroute's start)
        if e == ep:
            self.flows[f] = e ^ t
            return out + [me]
        if t:                                       # a tail of the other epoch, no buffer: stale
            self.counts[7] += 1
            return out + [me]
        free = next((b for b in range(self.nb) if self.bufs[b] is None), None)
        if free is None:                            # early, but no buffer: passes unordered
            self.counts[6] += 1
            return out + [me]
        self.bufs[free] = [f, e, now, [(item["tag"], 0)]]
        self.counts[1] += 1
        return out


def reorder_trace(seed, n_items, **params):
    """Seeded random trace: a few flows, each rerouted now and then (its epoch flips, the old path's remaining
    packets and its tail interleave with the new path's), tails sometimes lost, sometimes a second reroute before
    the first's tail, now and then a stale tail, other kinds; ``now`` advances by 0..timeout/4 and wraps. It ends
    with items (kind OTHER) whose ``now`` times out what is still held, so every item leaves. The golden model only
    tells it what is held (stimuli, not expectations)."""
    model = Reorder(**params)
    nf, tb, timeout, nb, depth = model.nf, model.tb, model.timeout, model.nb, model.depth
    rng = random.Random(seed)
    mod = 1 << tb
    flows = rng.sample(range(nf), min(nf, rng.randrange(2, nb + 4)))
    epoch = {f: 0 for f in flows}
    old = {f: deque() for f in flows}           # the old path's packets still to arrive (tag, tail)
    now = rng.randrange(mod)
    events = []
    k = 0

    def emit(kind, f, e, t):
        nonlocal k
        item = {"kind": kind, "tag": k & 0xFFFF, "flow": f, "epoch": e, "tail": t, "now": now}
        k += 1
        events.append({"item": item})
        model.step(item)

    while k < n_items:
        f = rng.choice(flows)
        r = rng.random()
        if r < 0.05:
            emit(rng.choice([0, 2, 3, 4]), rng.randrange(nf), rng.randrange(2), rng.randrange(2))
        elif r < 0.12 and not old[f]:
            # a reroute: a few old-path packets and the tail still to come (the tail lost sometimes)
            old[f].extend([(epoch[f], 0)] * rng.randrange(0, 3))
            if rng.random() < 0.85:
                old[f].append((epoch[f], 1))
            epoch[f] ^= 1
        elif r < 0.14:
            emit(DATA, f, epoch[f] ^ rng.randrange(2), 1)           # a stale or second-reroute tail
        elif old[f] and rng.random() < 0.4:
            e, t = old[f].popleft()
            emit(DATA, f, e, t)
        else:
            emit(DATA, f, epoch[f], 0)
        if rng.random() < 0.3:
            now = (now + rng.randrange(0, timeout // 4 + 2)) % mod
    # flush: items of another kind whose now times out the oldest buffer still held
    while model.held():
        oldest = max(model.held(), key=lambda h: (now - h[3]) % mod)[3]
        now = (oldest + timeout) % mod
        item = {"kind": 0, "tag": k & 0xFFFF, "flow": rng.randrange(nf), "epoch": 0, "tail": 0, "now": now}
        k += 1
        events.append({"item": item})
        model.step(item)
    return events
