"""Golden model of the SELB queue sampling and k-means path clustering engine (SELB, paper 004: section III,
Algorithm 1; datasheet docs/selb_cluster.md).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.selb.cluster.Cluster`. The engine's result is computed
whole at the tick that starts it and published at the next tick (the hardware makes a tick wait until the engine
is done), so no cycle count decides what a lookup sees. Also here: :func:`cluster_trace`, seeded random traces.
"""

import random

from lbpipe.hdl.selb.cluster import check_parameters
from lbpipe.hdl.lib.meta import PacketKind

__all__ = ["Cluster", "cluster_trace", "lfsr_step", "kmeans", "engine_cycles"]

TABLE_THETA = 0     # written again here (the datasheet's table), not imported from the RTL


def lfsr_step(state):
    """One step of the 16-bit Fibonacci LFSR x^16 + x^14 + x^13 + x^11 + 1, shifting left."""
    bit = ((state >> 15) ^ (state >> 13) ^ (state >> 12) ^ (state >> 10)) & 1
    return ((state << 1) | bit) & 0xFFFF


def kmeans(snap, k, iter_cap, draws, lfsr):
    """Algorithm 1 with the datasheet's integer rules. Returns ``(assignment, centroids of the last sweep's means,
    nonempty flags, sweeps, capped, draws used, lfsr)``."""
    n = len(snap)
    cen, used = [], 0
    for j in range(k):
        for t in range(draws):
            value = snap[lfsr & (n - 1)]
            lfsr = lfsr_step(lfsr)
            used += 1
            if value not in cen or t == draws - 1:
                break
        cen.append(value)
    sweeps = 0
    while True:
        sums, counts, asg = [0] * k, [0] * k, []
        for q in snap:
            d = [abs(q - c) for c in cen]
            j = d.index(min(d))         # the first (lowest) index among the nearest
            asg.append(j)
            sums[j] += q
            counts[j] += 1
        sweeps += 1
        means = [sums[j] // counts[j] if counts[j] else cen[j] for j in range(k)]
        changed = means != cen
        cen = means
        if not changed or sweeps == iter_cap:
            return asg, cen, [c > 0 for c in counts], sweeps, changed, used, lfsr


def engine_cycles(draws_used, sweeps, n, q_bits):
    """Busy clocks of one clustering: 3 a draw, n + q_bits + 5 a sweep (sweep n + 2, divider load, q_bits divider
    steps, check, decide), the backup choice and the pending write."""
    return 3 * draws_used + sweeps * (n + q_bits + 5) + 2


class Cluster:
    """Parameters are those of the RTL block."""

    def __init__(self, *, n_paths=64, k=4, q_bits=16, iter_cap=16, draws=4, theta=64, lfsr_seed=0xACE1):
        check_parameters(n_paths=n_paths, k=k, q_bits=q_bits, iter_cap=iter_cap, draws=draws, theta=theta,
                         lfsr_seed=lfsr_seed)
        self.n, self.k, self.q_bits, self.cap, self.draws = n_paths, k, q_bits, iter_cap, draws
        self.theta_reset, self.seed = theta, lfsr_seed
        self.reset()

    def reset(self):
        """Hardware reset: every register returns to its reset value (queue lengths 0, every path published in
        cluster 0 = the backup set, not congested; theta to its parameter, the LFSR to its seed, counters 0)."""
        n = self.n
        self.qcur = [0] * n
        self.snap = [0] * n
        self.theta = self.theta_reset
        self.lfsr = self.seed
        self.published = ([0] * n, [1] * n, [0] * n, 0)    # cluster, backup, congested per path; shortest path
        self.pending = ([0] * n, [1] * n, [0] * n, 0)
        self.pending_info = (0, 0, 0)                       # capped, sweeps, cycles
        self.counts = [0] * 6

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        if cmd["table"] == TABLE_THETA:
            self.theta = cmd["data"] & ((1 << self.q_bits) - 1)

    def process_stream(self, name, item):
        assert name == "smp"
        if item["tick"]:
            self._tick()
        else:
            self.qcur[item["path"]] = item["qlen"]
            self.counts[1] += 1

    def _tick(self):
        capped, sweeps, cycles = self.pending_info
        self.published = self.pending
        self.counts[2] += 1
        self.counts[3] += capped
        self.counts[4], self.counts[5] = sweeps, cycles
        prev, self.snap = self.snap, list(self.qcur)
        asg, cen, nonempty, sweeps, capped, used, self.lfsr = kmeans(self.snap, self.k, self.cap, self.draws,
                                                                     self.lfsr)
        live = [j for j in range(self.k) if nonempty[j]]
        backup = min(live, key=lambda j: (cen[j], j))
        congested = [int(s - p > self.theta) for s, p in zip(self.snap, prev)]
        shortest = min(range(self.n), key=lambda p: (self.snap[p], p))
        self.pending = (asg, [int(a == backup) for a in asg], congested, shortest)
        self.pending_info = (int(capped), sweeps, engine_cycles(used, sweeps, self.n, self.q_bits))

    def process(self, item):
        self.counts[0] += 1
        cl, bk, cg, shortest = self.published
        p = item["path"]
        alt = sum(1 << b for b in range(self.n) if cl[b] == cl[p] and not cg[b])
        if alt == 0:            # the whole cluster congested: the backup set's paths that are not
            alt = sum(1 << b for b in range(self.n) if bk[b] and not cg[b])
        return {"kind": item["kind"], "tag": item["tag"], "path": p, "cluster": cl[p], "congested": cg[p],
                "backup": bk[p], "alt": alt, "shortest": shortest}


def cluster_trace(seed, n_items, *, early_ticks=False, **params):
    """Seeded random trace: lookups, queue samples (grouped with lookups and alone), ticks, theta writes. Queues
    drift around a few levels, with jumps (congestion) and equal lengths. A tick comes only when the clustering the
    previous tick started has had its engine cycles (each event group is at least a clock), so no tick waits and
    the harness can check every cycle; ``early_ticks`` drops that spacing (ticks then wait for the engine: run
    such traces with idle or back-pressure, where the harness checks values, not cycles)."""
    model = Cluster(**params)
    n, q_bits = model.n, model.q_bits
    rng = random.Random(seed)
    qmax = (1 << q_bits) - 1
    levels = [rng.randrange(0, qmax + 1) for _ in range(4)]
    base = [rng.choice(levels) for _ in range(n)]
    events, since_tick, items, gap = [], 0, 0, 0

    def lookup():
        events.append({"item": {"kind": rng.choice(list(PacketKind)).value, "path": rng.randrange(n),
                                "tag": rng.randrange(1 << 16)}})

    while items < n_items:
        if rng.random() < 0.005:
            cmd = {"table": rng.choice([0, 0, 0, 5]), "index": 0,
                   "data": rng.choice([0, 1, 8, rng.randrange(0, qmax + 1), 1 << 40])}
            events.append({"ctl": cmd})
            model.control(cmd)
            continue
        if (early_ticks or since_tick > gap) and rng.random() < (0.3 if not early_ticks else 0.05):
            tick = {"path": rng.randrange(n), "qlen": rng.randrange(qmax + 1), "tick": 1}
            events.append({"smp": tick})
            model.process_stream("smp", tick)
            gap, since_tick = model.pending_info[2] + 1, 0
            if rng.random() < 0.5:
                lookup()            # in the tick's own clock
                items += 1
            continue
        if rng.random() < 0.7:
            p = rng.randrange(n)
            kind = rng.random()
            if kind < 0.05:
                base[p] = rng.randrange(qmax + 1)                           # a jump
            elif kind < 0.15:
                base[p] = rng.choice(levels)
            else:
                base[p] = max(0, min(qmax, base[p] + rng.randrange(-3, 4) * (1 + qmax // 64)))
            sample = {"path": p, "qlen": base[p], "tick": 0}
            events.append({"smp": sample})
            model.process_stream("smp", sample)
            if rng.random() < 0.1:
                continue                # a sample alone, or with the next event's lookup: not counted as a clock
        lookup()
        since_tick += 1
        items += 1
    return events
