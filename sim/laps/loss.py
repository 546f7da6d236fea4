"""Golden model of LAPS per-path loss detection (LAPS, IEEE ToN: section III-G, Algorithm 3; datasheet
docs/laps_loss.md).

Bit-exact, slot-level twin of :class:`lbpipe.hdl.laps.loss.Loss`: one :meth:`Loss.process` per slot, the ACK (or
the timer check of the sweep pointer's path) applied before the send. The rules are written again here from the
datasheet; only the layouts and the parameter check come from the RTL module.

Also here: :func:`loss_slot` (a slot item) and :func:`loss_trace` (seeded random slots: sends sprayed over a few
paths, ACKs coming back in send order after a delay, random drops, duplicated, reordered and forged ACKs,
out-of-range pids, full rings, idle slots for the timers, ``now`` and sequence numbers across their wraps).
"""

import random

from lbpipe.hdl.laps.loss import check_parameters

__all__ = ["Loss", "loss_slot", "loss_trace", "ACK_NONE", "ACK_MATCHED", "ACK_STALE", "ACK_UNKNOWN", "ACK_BAD_PID",
           "SEND_NONE", "SEND_RECORDED", "SEND_BAD_PID", "REASON_NONE", "REASON_ACK_ORDER", "REASON_TIMEOUT"]

TIME_MOD = 1 << 48
POS = 1 << 16                   # ring positions are 16-bit counters
SEQ_MOD = 1 << 32
ACK_NONE, ACK_MATCHED, ACK_STALE, ACK_UNKNOWN, ACK_BAD_PID = 0, 1, 2, 3, 4
SEND_NONE, SEND_RECORDED, SEND_BAD_PID = 0, 1, 2
REASON_NONE, REASON_ACK_ORDER, REASON_TIMEOUT = 0, 1, 2


def _before(a, b):
    """Position ``a`` is before ``b`` (modulo 2**16, half the range each way)."""
    return (a - b) % POS >= POS // 2


class Loss:
    """Per-path rings of (flow, seq), tails, heads and deadlines. Parameters are the RTL block's."""

    def __init__(self, *, n_paths=1024, depth=16, flow_bits=16):
        check_parameters(n_paths=n_paths, depth=depth, flow_bits=flow_bits)
        self.n, self.depth, self.flow_bits = n_paths, depth, flow_bits
        self.reset()

    def reset(self):
        """Hardware reset: ring words, tails, heads and deadlines 0 (the RTL sweeps them), the sweep pointer 0,
        counters cleared."""
        self.ring = [[(0, 0)] * self.depth for _ in range(self.n)]
        self.tail = [0] * self.n
        self.head = [0] * self.n
        self.deadline = [0] * self.n
        self.sweep = 0
        self.counts = [0] * 10

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        """No tables: every command is ignored."""

    def outstanding(self, pid):
        """The outstanding (flow, seq) of ``pid``, oldest first (tests and the closed loop)."""
        n = self._n_out(pid)
        t = self.tail[pid]
        return [self.ring[pid][(t - n + j) % self.depth] for j in range(n)]

    def _n_out(self, pid):
        return min((self.tail[pid] - self.head[pid]) % POS, self.depth)

    def process(self, item):
        L = self.depth
        out = {"kind": item["kind"], "tag": item["tag"], "ack": ACK_NONE, "send": SEND_NONE, "lost_reason": 0,
               "lost_pid": 0, "lost_count": 0, "evict": 0, "evict_pid": 0, "evict_flow": 0, "evict_seq": 0}
        for j in range(L):
            out[f"lost{j}_flow"] = out[f"lost{j}_seq"] = 0
        now = item["now"]
        # -- the A-operation: the ACK, or the timer check of the sweep pointer's path
        ack = item["ack_valid"] and item["ack_pid"] < self.n
        if ack:
            q = item["ack_pid"]
        else:
            q = self.sweep
            self.sweep = (self.sweep + 1) % self.n
            if item["ack_valid"]:
                out["ack"] = ACK_BAD_PID
                self.counts[5] += 1
        tail, head, word = self.tail[q], self.head[q], self.ring[q]
        n_out = self._n_out(q)
        count, new_head = 0, head
        fresh = fire = False
        if ack:
            key = (item["ack_flow"], item["ack_seq"])
            ages = [a for a in range(L) if word[(tail - 1 - a) % L] == key]
            if ages:
                age = ages[0]                                   # the newest send of this (flow, seq)
                m = (tail - 1 - age) % POS
                fresh = not _before(m, head)
                if fresh:
                    count, new_head = n_out - age - 1, (m + 1) % POS
            out["ack"] = ACK_MATCHED if fresh else ACK_STALE if ages else ACK_UNKNOWN
            self.counts[{ACK_MATCHED: 2, ACK_STALE: 3, ACK_UNKNOWN: 4}[out["ack"]]] += 1
        elif (now - self.deadline[q]) % TIME_MOD < TIME_MOD // 2:
            fire = True
            count, new_head = n_out, tail
        if not fresh and not fire and not _before((tail - L) % POS, head):
            new_head = (tail - L) % POS                         # a head lagging depth or more behind moves up
        self.head[q] = new_head
        if count:
            first = tail - n_out
            out.update(lost_reason=REASON_ACK_ORDER if fresh else REASON_TIMEOUT, lost_pid=q, lost_count=count)
            for j in range(count):
                out[f"lost{j}_flow"], out[f"lost{j}_seq"] = word[(first + j) % L]
            self.counts[6 if fresh else 7] += count
            self.counts[8] += int(fire)
        # -- the send
        if item["send_valid"]:
            p = item["send_pid"]
            if p < self.n:
                out["send"] = SEND_RECORDED
                self.counts[0] += 1
                t = self.tail[p]
                if not _before((t - L) % POS, self.head[p]):    # the lane holds an outstanding entry
                    out["evict"], out["evict_pid"] = 1, p
                    out["evict_flow"], out["evict_seq"] = self.ring[p][t % L]
                    self.counts[9] += 1
                self.ring[p] = list(self.ring[p])
                self.ring[p][t % L] = (item["send_flow"], item["send_seq"])
                self.tail[p] = (t + 1) % POS
                self.deadline[p] = (now + 2 * item["send_real_val"]) % TIME_MOD
            else:
                out["send"] = SEND_BAD_PID
                self.counts[1] += 1
        return out


def loss_slot(now, *, send=None, ack=None, tag=0, kind=0):
    """A slot item: ``send = (flow, seq, pid, real_val)``, ``ack = (flow, seq, pid)``, either None."""
    item = {"kind": kind, "now": now % TIME_MOD, "tag": tag & 0xFFFF, "send_valid": 0, "send_flow": 0,
            "send_seq": 0, "send_pid": 0, "send_real_val": 0, "ack_valid": 0, "ack_flow": 0, "ack_seq": 0,
            "ack_pid": 0}
    if send is not None:
        f, s, p, rv = send
        item.update(send_valid=1, send_flow=f, send_seq=s % SEQ_MOD, send_pid=p, send_real_val=rv)
    if ack is not None:
        f, s, p = ack
        item.update(ack_valid=1, ack_flow=f, ack_seq=s % SEQ_MOD, ack_pid=p)
    return item


def loss_trace(seed, n_items, **params):
    """Seeded random slots: a few flows sprayed over a few paths (one slot a clock, ``now`` 4 ns a slot, jumping
    now and then, across the 48-bit wrap), ACKs returned in each path's send order after 6 to 6 + depth x paths slots, packets
    dropped at random (the ACK never comes), ACKs duplicated, delayed out of order and forged (unknown flow or
    sequence), pids out of range, bursts to one path that overflow its ring, idle stretches that let timers
    expire, sequence numbers across the 32-bit wrap."""
    n, depth, fb = params.get("n_paths", 1024), params.get("depth", 16), params.get("flow_bits", 16)
    rng = random.Random(seed)
    paths = rng.sample(range(n), min(n, rng.choice([2, 3, 4, 6])))
    flows = rng.sample(range(1 << fb), min(1 << fb, 4))
    seq = {f: rng.choice([0, SEQ_MOD - rng.randrange(1, 40), rng.randrange(SEQ_MOD)]) for f in flows}
    now = rng.choice([rng.randrange(1 << 20), TIME_MOD - rng.randrange(100, 4000)])
    pending = []                    # (due slot, ack tuple)
    sent = []                       # recent (flow, seq, pid) for duplicates and reordering
    events = []
    burst = None
    for k in range(n_items):
        now = (now + rng.choice([4, 4, 4, 0, 8, rng.randrange(0, 3000)])) % TIME_MOD
        if rng.random() < 0.003:
            now = (now + rng.randrange(1 << 20, 1 << 30)) % TIME_MOD
        send = ack = None
        idle = rng.random() < 0.15
        if k % 97 == 0:
            burst = (rng.choice(paths), rng.randrange(depth, 3 * depth)) if rng.random() < 0.5 else None
        if not idle and rng.random() < 0.4:
            f = rng.choice(flows)
            if burst and burst[1] > 0:
                p = burst[0]
                burst = (p, burst[1] - 1)
            else:
                p = rng.choice(paths)
            if rng.random() < 0.02:
                p = rng.randrange(n, 1 << 16) if n < 1 << 16 else p
            s = seq[f]
            seq[f] = (s + 1) % SEQ_MOD
            send = (f, s, p, rng.choice([rng.randrange(50, 400), rng.randrange(400, 4000)]))
            sent.append((f, s, p))
            if p < n and rng.random() > 0.08:                  # 8% of packets are lost: no ACK
                pending.append((k + rng.randrange(6, 6 + depth * len(paths)), (f, s, p)))
        if pending and not idle:
            pending.sort(key=lambda x: x[0])
            if pending[0][0] <= k:
                ack = pending.pop(0)[1]
        if ack is None and not idle and rng.random() < 0.06 and sent:
            r = rng.random()
            f, s, p = rng.choice(sent[-60:])
            if r < 0.4:
                ack = (f, s, p)                                # duplicate or late
            elif r < 0.6:
                ack = (rng.randrange(1 << fb), rng.randrange(SEQ_MOD), p)      # forged
            elif r < 0.8:
                ack = (f, s, rng.randrange(n, 1 << 16) if n < 1 << 16 else p)  # pid out of range
            else:
                ack = (f, s, rng.choice(paths))                # reordered onto another path
        events.append({"item": loss_slot(now, send=send, ack=ack, tag=k)})
    return events
