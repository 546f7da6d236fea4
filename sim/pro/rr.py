"""Golden model of PRO's orchestrated round-robin path scheduler (PRO: sections III-A, V, Algorithm 1).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.pro.rr.RoundRobin`: events apply in trace order (a control
command between two packets, as the block serializes them). Written from the paper and the datasheet
(docs/pro_rr.md), not from the RTL: the model keeps the exact active count per ToR and finds the span with ``gcd``;
the RTL keeps the count modulo the number of batch slots and reads the span from a table.

Per destination ToR ``t`` (equivalent path set of ``m_paths`` = M paths): counter ``C[t]`` and the active count
``P[t]``. Per QP: active (joined), started (has sent its first packet), the ToR it joined, ``base`` (first path of
its current batch) and ``k`` (packets of the current batch sent so far). A packet of an active QP toward ToR ``t``:

* first packet of a batch (``k == 0``): a QP that has not sent yet starts at ``base = C[t]``; otherwise
  ``base = (base + span * n) mod M``, span the active count ``P[t]`` made coprime to ``M / n`` (made odd when
  ``M / n`` is a power of two: Algorithm 1, lines 6-9); then ``C[t] = (base + n) mod M`` (line 12, batch form);
* packet ``k`` of the batch takes ``path = (base + k) mod M``; ``k`` counts modulo ``n`` = ``batch``.

With ``batch = 1`` this is Algorithm 1 exactly. PathID comes from a per-ToR table (ctl table 3), by default
``path | tor << 6`` (ToR egress = uplink ``path``, Aggr egress = the destination ToR's port).

Also here: :func:`rr_commands` (joins, leaves, seeds, PathIDs -> ``ctl`` commands), :func:`rr_trace` (seeded
random traces) and :func:`span` (the span rule on its own).
"""

import math
import random

from lbpipe.hdl.pro.rr import check_parameters

__all__ = ["RoundRobin", "rr_commands", "rr_trace", "span", "TABLE_JOIN", "TABLE_LEAVE", "TABLE_SEED",
           "TABLE_PATH_ID"]

# Written again here (the datasheet's table), not imported from the RTL.
TABLE_JOIN, TABLE_LEAVE, TABLE_SEED, TABLE_PATH_ID = 0, 1, 2, 3
PATH_ID_MASK = (1 << 12) - 1


def span(active, slots):
    """The span of a QP whose ToR has ``active`` active QPs, with ``slots`` = M / n batch slots: the smallest
    value >= ``active`` coprime to ``slots`` (for a power-of-two ``slots``: ``active`` made odd, Algorithm 1)."""
    s = active
    while math.gcd(s, slots) != 1:
        s += 1
    return s


class RoundRobin:
    """The round-robin scheduler's state and rules.

    Parameters are those of the RTL block: ``n_qps`` (QP indices 0 to n_qps - 1), ``n_tors`` (destination ToRs),
    ``m_paths`` (M, paths per equivalent path set), ``batch`` (n, packets of a QP per scheduling batch; divides M).
    """

    def __init__(self, *, n_qps=10240, n_tors=16, m_paths=8, batch=1):
        check_parameters(n_qps=n_qps, n_tors=n_tors, m_paths=m_paths, batch=batch)
        self.n_qps, self.n_tors, self.m, self.n = n_qps, n_tors, m_paths, batch
        self.slots = m_paths // batch
        # Power-on contents: the PathIDs path | tor << 6; reset() clears the rest.
        self.active = [0] * n_qps
        self.started = [0] * n_qps
        self.qtor = [0] * n_qps
        self.base = [0] * n_qps
        self.k = [0] * n_qps
        self.counter = [0] * n_tors          # C
        self.n_active = [0] * n_tors         # P, exact
        self.path_ids = [[(p | t << 6) & PATH_ID_MASK for p in range(m_paths)] for t in range(n_tors)]
        self.reset()

    def reset(self):
        """Hardware reset: the pipeline empties, the counters clear, and so does the run-time state: no QP is
        active, every C and P is 0 (the control plane joins and seeds again). The PathID table keeps its
        contents."""
        self.counts = [0] * 3       # scheduled packets, missed packets, rejected commands
        for table in (self.active, self.started, self.qtor, self.base, self.k, self.counter, self.n_active):
            table[:] = [0] * len(table)

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    # -- control -----------------------------------------------------------------------------------------------------
    def control(self, cmd):
        """Apply one ``ctl`` command (datasheet, "Control tables"); anything it cannot apply is counted as rejected
        and changes nothing."""
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        if table == TABLE_JOIN:
            ok = index < self.n_qps and value < self.n_tors and not self.active[index]
            if ok:
                q = index
                self.active[q], self.started[q], self.qtor[q], self.base[q], self.k[q] = 1, 0, value, 0, 0
                self.n_active[value] += 1
        elif table == TABLE_LEAVE:
            ok = index < self.n_qps and self.active[index] and self.qtor[index] == value
            if ok:
                self.active[index] = 0
                self.n_active[value] -= 1
        elif table == TABLE_SEED:
            ok = index < self.n_tors and value < self.m
            if ok:
                self.counter[index] = value
        elif table == TABLE_PATH_ID:
            tor, path = index >> 6, index & 63
            ok = tor < self.n_tors and path < self.m and value <= PATH_ID_MASK
            if ok:
                self.path_ids[tor][path] = value
        else:
            ok = False
        if not ok:
            self.counts[2] += 1

    def join(self, qp, tor):
        """The QP becomes active toward ``tor`` (the ``ctl`` join command)."""
        self.control({"table": TABLE_JOIN, "index": qp, "data": tor})

    def leave(self, qp):
        """The QP stops being active (the ``ctl`` leave command, naming the ToR it joined; a QP that is not active
        gives a command the block rejects)."""
        tor = self.qtor[qp] if qp < self.n_qps else 0
        self.control({"table": TABLE_LEAVE, "index": qp, "data": tor})

    def seed(self, tor, value):
        """Set ``C`` of ``tor``'s path set (the ``ctl`` seed command; ``value < m_paths``)."""
        self.control({"table": TABLE_SEED, "index": tor, "data": value})

    # -- packets -----------------------------------------------------------------------------------------------------
    def process(self, item):
        """One packet: ``{"kind", "tag", "hit", "path", "path_id"}``. A packet of a QP that is not active toward
        the item's ``tor`` (never joined, left, or joined toward another ToR) is a miss: counted, ``hit`` 0,
        ``path`` 0, ``path_id`` 0, no state changes."""
        q, t = item["qp"], item["tor"]
        out = {"kind": item.get("kind", 0), "tag": item.get("tag", 0), "hit": 0, "path": 0, "path_id": 0}
        if not (q < self.n_qps and self.active[q] and self.qtor[q] == t):
            self.counts[1] += 1
            return out
        m, n = self.m, self.n
        if self.k[q] == 0:
            if self.started[q]:
                step = span(self.n_active[t], self.slots) % self.slots
                self.base[q] = (self.base[q] + step * n) % m
            else:
                self.base[q] = self.counter[t]
            self.counter[t] = (self.base[q] + n) % m
        path = (self.base[q] + self.k[q]) % m
        self.k[q] = (self.k[q] + 1) % n
        self.started[q] = 1
        self.counts[0] += 1
        out.update(hit=1, path=path, path_id=self.path_ids[t][path])
        return out

    def cycles(self, result):
        """One packet per clock, always."""
        return 1


def rr_commands(*, joins=(), leaves=(), seeds=(), path_ids=()):
    """``ctl`` commands, in this order: ``seeds`` ((tor, C) pairs or a {tor: C} dict), ``path_ids`` ((tor, path,
    PathID) triples), ``joins`` ((qp, tor) pairs), ``leaves`` ((qp, tor) pairs: the ToR the QP joined)."""
    seeds = seeds.items() if isinstance(seeds, dict) else seeds
    cmds = [{"table": TABLE_SEED, "index": t, "data": c} for t, c in seeds]
    cmds += [{"table": TABLE_PATH_ID, "index": t << 6 | p, "data": pid} for t, p, pid in path_ids]
    cmds += [{"table": TABLE_JOIN, "index": q, "data": t} for q, t in joins]
    cmds += [{"table": TABLE_LEAVE, "index": q, "data": t} for q, t in leaves]
    return cmds


def rr_trace(seed, n_items, **params):
    """A seeded random trace: random seeds for every ToR's counter, a few PathIDs, a random QP set joined, then
    ``n_items`` packets sent as a QP scheduler would (active QPs in turn, ``batch`` packets each, sometimes a short
    batch or the same QP again back to back) with QPs joining and leaving meanwhile, and bad input: packets of
    unknown QPs and of QPs toward another ToR, joins of active QPs, leaves of inactive QPs or naming the wrong ToR,
    out-of-range seeds, PathIDs and indices, unknown tables."""
    n_qps, n_tors = params.get("n_qps", 10240), params.get("n_tors", 16)
    m, n = params.get("m_paths", 8), params.get("batch", 1)
    rng = random.Random(seed)
    model = RoundRobin(n_qps=n_qps, n_tors=n_tors, m_paths=m, batch=n)       # tracks who is active, nothing else
    events = []

    def ctl(cmds):
        for c in cmds:
            events.append({"ctl": c})
            model.control(c)

    ctl(rr_commands(seeds=[(t, rng.randrange(m)) for t in range(n_tors)],
                    path_ids=[(rng.randrange(n_tors), rng.randrange(m), rng.randrange(1 << 12)) for _ in range(3)]))
    pool = rng.sample(range(n_qps), min(n_qps, rng.randrange(2, 24)))
    busy_tors = rng.sample(range(n_tors), min(n_tors, rng.randrange(1, 4)))
    ctl(rr_commands(joins=[(q, rng.choice(busy_tors)) for q in pool[:max(1, len(pool) * 2 // 3)]]))
    turn = 0
    sent = 0
    while sent < n_items:
        r = rng.random()
        if r < 0.04:
            q = rng.choice(pool)
            ctl(rr_commands(joins=[(q, rng.choice(busy_tors))]))              # may be a join twice
            continue
        if r < 0.07:
            q = rng.choice(pool)
            tor = model.qtor[q] if rng.random() < 0.8 else rng.randrange(n_tors)
            ctl(rr_commands(leaves=[(q, tor)]))                                # may be a non-member
            continue
        if r < 0.075:
            bad = rng.choice([
                {"table": TABLE_SEED, "index": rng.randrange(n_tors), "data": rng.randrange(m, 1 << 8)},
                {"table": TABLE_SEED, "index": rng.randrange(1 << 8), "data": rng.randrange(m)},
                {"table": TABLE_SEED, "index": rng.randrange(n_tors), "data": rng.randrange(m)},
                {"table": TABLE_JOIN, "index": rng.randrange(1 << 20), "data": rng.randrange(n_tors)},
                {"table": TABLE_JOIN, "index": rng.randrange(n_qps), "data": rng.randrange(64)},
                # out of range (a valid PathID write mid-trace would outlive the reset tests' reruns)
                {"table": TABLE_PATH_ID, "index": rng.randrange(1 << 12), "data": rng.randrange(1 << 12, 1 << 13)},
                {"table": TABLE_PATH_ID, "index": rng.randrange(64 << 6, 1 << 24), "data": rng.randrange(1 << 12)},
                {"table": rng.randrange(4, 256), "index": rng.randrange(1 << 24), "data": rng.randrange(1 << 64)},
            ])
            ctl([bad])
            continue
        live = [q for q in pool if model.active[q]]
        if not live or rng.random() < 0.05:
            q = rng.randrange(n_qps)
            tor = rng.randrange(1 << max(1, (n_tors - 1).bit_length()))
            burst = 1
        else:
            q = live[turn % len(live)]
            turn += 1
            tor = model.qtor[q] if rng.random() < 0.97 else rng.randrange(n_tors)
            burst = n if rng.random() < 0.85 else rng.randrange(1, 2 * n + 1)
        for _ in range(burst):
            if sent >= n_items:
                break
            item = {"kind": 1, "qp": q, "tor": tor, "tag": sent & 0xFFFF}
            events.append({"item": item})
            model.process(item)
            sent += 1
    return events
