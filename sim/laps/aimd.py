"""Golden model of the LAPS per-flow AIMD rate controller (LAPS, IEEE ToN: section III-F, Algorithm 2; datasheet
docs/laps_aimd.md).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.laps.aimd.Aimd`: one call of :meth:`Aimd.process` per ACK,
in trace order. The rules are written again here from the datasheet (the RTL's constants are not imported).

Also here: :func:`aimd_commands` (flow creation and removal, rate limits -> ``ctl`` commands) and :func:`aimd_trace`
(seeded random ACK streams: congested and uncongested latency vectors, bursts to one flow, stray ACKs, ``now``
across the 48-bit wrap).
"""

import collections
import random

from lbpipe.hdl.laps.aimd import check_parameters
from lbpipe.hdl.lib.meta import PacketKind

__all__ = ["Aimd", "aimd_commands", "aimd_trace", "INFINITY", "TABLE_CREATE", "TABLE_REMOVE", "TABLE_LINE_RATE",
           "TABLE_MIN_RATE", "SIM_FLOOR", "HOLDOFF", "ACTION_NONE", "ACTION_INC", "ACTION_DEC"]

INFINITY = 0xFFFF_FFFF
TIME_MOD = 1 << 48
HALF = 1 << 47
TABLE_CREATE, TABLE_REMOVE, TABLE_LINE_RATE, TABLE_MIN_RATE = 0, 1, 2, 3
#: The authors' simulator's additive floor on an increase: 1 Gb/s in kbit/s.
SIM_FLOOR = 1_000_000
ACTION_NONE, ACTION_INC, ACTION_DEC = 0, 1, 2
#: An ACK adjusts nothing when one of the HOLDOFF items before it adjusted its flow (datasheet, "Adjustment
#: hold-off"): it reports the state that adjustment left.
HOLDOFF = 8


class _Flow:
    __slots__ = ("cur", "exp", "stage", "next_dec", "next_inc", "dec_open", "inc_open")

    def __init__(self, cur, exp):
        self.cur, self.exp, self.stage = cur, exp, 0
        self.next_dec = self.next_inc = 0
        self.dec_open = self.inc_open = True


class Aimd:
    """Per-flow AIMD state (``cur``, ``exp``, ``stage``, the two windows), created and removed through ``ctl``.

    Parameters are those of the RTL block (``n_flows``, ``k``, ``stages``, ``variant``, ``line_rate``,
    ``min_rate``).
    """

    def __init__(self, *, n_flows=1024, k=8, stages=5, variant="paper", line_rate=100_000_000, min_rate=100_000):
        check_parameters(n_flows=n_flows, k=k, stages=stages, variant=variant, line_rate=line_rate,
                         min_rate=min_rate)
        self.n_flows, self.k, self.n, self.variant = n_flows, k, stages, variant
        self.param_line, self.param_min = line_rate, min_rate
        self.reset()

    def reset(self):
        """Hardware reset: every flow removed (the RTL sweeps its state memory), counters cleared, the rate limits
        back to the parameters."""
        self.flows = {}
        self.line, self.min = self.param_line, self.param_min
        self.counts = [0, 0, 0, 0]          # ACKs, misses, increases, decreases
        self.recent = collections.deque(maxlen=HOLDOFF)     # (flow, adjusted) of the last items, latest last

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def clamp(self, x):
        """Into [min_rate, line_rate]; line_rate wins if the limits cross."""
        return min(max(x, self.min), self.line)

    def control(self, cmd):
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        lo, hi = value & 0xFFFF_FFFF, (value >> 32) & 0xFFFF_FFFF
        if table in (TABLE_CREATE, TABLE_REMOVE) and index < self.n_flows:
            self.recent.clear()
        if table == TABLE_CREATE and index < self.n_flows:
            self.flows[index] = _Flow(self.clamp(lo), self.clamp(hi))
        elif table == TABLE_REMOVE and index < self.n_flows:
            self.flows.pop(index, None)
        elif table == TABLE_LINE_RATE:
            self.line = lo
        elif table == TABLE_MIN_RATE:
            self.min = lo

    def _passed(self, now, deadline, is_open):
        """The window has passed: paper, now at or after the deadline; sim, strictly after (48-bit modular: a
        difference below 2**47 is "after")."""
        if is_open:
            return True
        d = (now - deadline) % TIME_MOD
        return d < HALF if self.variant == "paper" else 0 < d < HALF

    def process(self, item):
        """One item: the result (the flow's rates after it). Rules in the datasheet: hold-off, the window tests of
        the variant, clamping; an unknown flow gives all zeros with ``hit`` 0."""
        self.counts[0] += 1
        flow = item["flow"]
        f = self.flows.get(flow)
        out = {"kind": item["kind"], "tag": item["tag"], "flow": flow, "rate": 0, "expected": 0, "stage": 0,
               "action": ACTION_NONE, "changed": 0, "hit": 0}
        held = any(g == flow and adj for g, adj in self.recent)
        if f is None:
            self.counts[1] += 1
            self.recent.append((flow, False))
            return out
        valid = [item[f"valid{j}"] for j in range(self.k)]
        reals = [item[f"real_val{j}"] for j in range(self.k) if valid[j]]
        bases = [item[f"base_val{j}"] for j in range(self.k) if valid[j]]
        action, before = ACTION_NONE, f.cur
        if not held and item["kind"] == PacketKind.ACK.value and reals and min(reals) != INFINITY:
            t, big_t, now = min(reals), max(bases), item["now"]
            if t > big_t:
                if self._passed(now, f.next_dec, f.dec_open):
                    action = ACTION_DEC
                    window = t if self.variant == "paper" else max(reals)
                    f.exp, f.cur, f.stage = self.clamp(f.cur), self.clamp(f.cur >> 1), 0
                    f.next_dec, f.dec_open = (now + 2 * window) % TIME_MOD, False
            elif self._passed(now, f.next_inc, f.inc_open):
                action = ACTION_INC
                n = self.n
                if self.variant == "paper":
                    f.stage = min(f.stage + 1, n + 1)
                    f.exp = self.clamp(2 * f.exp if f.stage > n else f.exp)
                    f.cur = self.clamp((f.exp + f.cur) >> 1)
                    window = t
                else:
                    e = self.clamp(2 * f.exp if f.stage > n else f.exp)
                    f.stage = min(f.stage + 1, n + 1)
                    f.cur = self.clamp(max(f.cur + SIM_FLOOR, (f.cur + e) >> 1))
                    f.exp = max(e, f.cur)
                    window = big_t
                f.next_inc, f.inc_open = (now + 2 * window) % TIME_MOD, False
        self.recent.append((flow, action != ACTION_NONE))
        if action != ACTION_NONE:
            self.counts[2 if action == ACTION_INC else 3] += 1
        out.update(rate=f.cur, expected=f.exp, stage=f.stage, action=action, hit=1)
        out["changed"] = int(f.cur != before)
        return out

    def flow_state(self, flow):
        """``(cur, exp, stage)`` of a flow, or None (tests and the closed loop)."""
        f = self.flows.get(flow)
        return None if f is None else (f.cur, f.exp, f.stage)


def aimd_commands(flows=(), *, remove=(), limits=(None, None), **params):
    """``ctl`` commands: the rate limits ``limits = (line_rate, min_rate)`` first (each when not None), then one
    create per flow (``flows`` of ``(flow, current rate, expected rate)`` in kbit/s), then one remove per flow of
    ``remove``. ``params`` are the block's (``n_flows`` checks the flow numbers)."""
    n_flows = params.get("n_flows", 1024)
    line_rate, min_rate = limits
    cmds = []
    if line_rate is not None:
        cmds.append({"table": TABLE_LINE_RATE, "index": 0, "data": _u32("line_rate", line_rate)})
    if min_rate is not None:
        cmds.append({"table": TABLE_MIN_RATE, "index": 0, "data": _u32("min_rate", min_rate)})
    for flow, cur, exp in flows:
        if not 0 <= flow < n_flows:
            raise ValueError(f"flow {flow} is not one of {n_flows} flows")
        cmds.append({"table": TABLE_CREATE, "index": flow, "data": _u32("rate", cur) | _u32("rate", exp) << 32})
    for flow in remove:
        if not 0 <= flow < n_flows:
            raise ValueError(f"flow {flow} is not one of {n_flows} flows")
        cmds.append({"table": TABLE_REMOVE, "index": flow, "data": 0})
    return cmds


def _u32(name, value):
    if not 0 <= value < 1 << 32:
        raise ValueError(f"{name} {value} does not fit 32 bits (kbit/s)")
    return value


def aimd_ack(flow, now, paths, *, kind=None, tag=0, k=8):
    """An input item: ``paths`` a list of ``(real_val, base_val)`` for slots 0, 1, ... (``None`` for an invalid
    slot); the other slots invalid."""
    item = {"kind": PacketKind.ACK.value if kind is None else kind, "flow": flow, "now": now % TIME_MOD, "tag": tag}
    for j in range(k):
        p = paths[j] if j < len(paths) else None
        item[f"valid{j}"] = int(p is not None)
        item[f"real_val{j}"], item[f"base_val{j}"] = p if p is not None else (0, 0)
    return item


def aimd_trace(seed, n_items, **params):
    """A seeded random trace: a few flows created through ``ctl`` (one left unknown), then ``n_items`` ACKs with
    congested and uncongested latency vectors, bursts to one flow, sweeps over all flows, non-ACK items, empty
    and all-infinite vectors, stray ACKs, ``now`` jumps (forwards, backwards, across the 48-bit wrap), and mid-trace
    ``ctl`` commands (remove, re-create, rate limits)."""
    n_flows, k = params.get("n_flows", 1024), params.get("k", 8)
    line, low = params.get("line_rate", 100_000_000), params.get("min_rate", 100_000)
    rng = random.Random(seed)
    n_active = min(n_flows, rng.choice([4, 6, 8]))
    active = rng.sample(range(n_flows), n_active)
    stray = [f for f in range(n_flows) if f not in active][:1]

    def create(flow):
        top = max(line, 1)
        return (flow, rng.randrange(0, min(top + top // 8, (1 << 32) - 1) + 1), rng.randrange(0, top + 1))
    events = [{"ctl": c} for c in aimd_commands([create(f) for f in active], **params)]
    base = {f: [rng.randrange(200, 4000) for _ in range(k)] for f in active + stray}
    now = rng.choice([rng.randrange(0, 1 << 20), TIME_MOD - rng.randrange(1, 200_000)])
    burst, left = None, 0
    for n in range(n_items):
        if left == 0:
            burst = rng.choice(active) if rng.random() < 0.3 else None
            left = rng.randrange(2, 12)
        left -= 1
        r = rng.random()
        if r < 0.02 and stray:
            flow = stray[0]
        elif burst is not None:
            flow = burst
        else:
            flow = active[n % n_active] if rng.random() < 0.5 else rng.choice(active)
        step = rng.choice([0, 1, 4, rng.randrange(0, 600), rng.randrange(0, 20_000)])
        if rng.random() < 0.01:
            step = -rng.randrange(1, 30_000)                       # now going backwards
        if rng.random() < 0.004:
            step = rng.randrange(1 << 46, 1 << 47)                 # a long silence
        now = (now + step) % TIME_MOD
        b = base[flow]
        congested = rng.random() < 0.45
        paths = []
        for j in range(k):
            if rng.random() < 0.2:
                paths.append(None)
                continue
            big = max(b)
            if congested:
                real = rng.randrange(big + 1, big + 3000)
            else:
                real = rng.randrange(max(0, b[j] - 150), big + 1)
            if rng.random() < 0.04:
                real = INFINITY
            paths.append((real, b[j]))
        if rng.random() < 0.03:
            paths = [None] * k
        kind = PacketKind.ACK.value if rng.random() < 0.95 else rng.choice([0, 1, 3, 4])
        events.append({"item": aimd_ack(flow, now, paths, kind=kind, tag=n & 0xFFFF, k=k)})
        if n == n_items // 3:
            gone = rng.choice(active)
            events += [{"ctl": c} for c in aimd_commands(remove=[gone], **params)]
        if n == n_items // 2:
            events += [{"ctl": c} for c in aimd_commands([create(f) for f in active[:2]], **params)]
        if n == 2 * n_items // 3:
            events += [{"ctl": c} for c in aimd_commands(limits=(rng.randrange(line // 2, line + 1),
                                                                 rng.randrange(0, min(max(1, 2 * low), 1 << 32))), **params)]
    return events
