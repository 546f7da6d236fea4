"""Golden model of the LAPS transmit-side pacer (LAPS, IEEE ToN: section III-F, Table V; datasheet
docs/laps_pacer.md).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.laps.pacer.Pacer`: a token bucket per flow, written here
from the datasheet's rules. Events apply in trace order, which is the hardware's serial order: a rate update offered
with a request (the event just before it) applies first.

Also here: :func:`pacer_commands` (flows -> ``ctl`` commands) and :func:`pacer_trace` (seeded random traces).
"""

import random

from lbpipe.hdl.laps.pacer import check_parameters
from lbpipe.hdl.lib.meta import PacketKind

__all__ = ["Pacer", "pacer_commands", "pacer_trace", "UNITS_PER_BYTE"]

# The datasheet's constants, written again here (not imported from the RTL).
TIME_MASK = (1 << 48) - 1
UNITS_PER_BYTE = 15625          # tokens are 512 microbits: 8,000,000 / 512 per byte
ELAPSED_MAX = (1 << 24) - 1     # ns
RATE_MAX = (1 << 27) - 1        # kbit/s used by the refill
TABLE_FLOW = 0


class Pacer:
    """Per flow: ``exists``, ``rate`` (kbit/s), ``bucket`` (bytes), ``tokens`` (512-microbit units), ``last`` (ns),
    ``fresh`` (created and not yet asked: its bucket counts as full)."""

    def __init__(self, *, n_flows=1024):
        check_parameters(n_flows=n_flows)
        self.n = n_flows
        self.exists = [0] * n_flows
        self.rate = [0] * n_flows
        self.bucket = [0] * n_flows
        self.tokens = [0] * n_flows
        self.last = [0] * n_flows
        self.fresh = [0] * n_flows
        self.reset()

    def reset(self):
        """Hardware reset: the pipeline empties and the counters clear; per-flow memories keep their contents."""
        self.counts = [0] * 5       # requests, allowed, stray requests, rate updates, stray rate updates

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        """Table 0, index = flow: data[48] 1 creates the flow (rate data[31:0], bucket data[47:32] bytes, a full
        bucket), 0 removes it. Other tables and flows out of range: ignored."""
        flow, value = cmd["index"], cmd["data"]
        if cmd["table"] != TABLE_FLOW or flow >= self.n:
            return
        self.exists[flow] = (value >> 48) & 1
        self.rate[flow] = value & 0xFFFF_FFFF
        self.bucket[flow] = (value >> 32) & 0xFFFF
        self.fresh[flow] = 1

    def process_stream(self, name, item):
        """The ``rate`` stream: set a flow's current rate. An update of a flow that does not exist is counted and
        changes nothing."""
        if name != "rate":
            raise ValueError(f"the pacer has no input stream {name!r}")
        self.counts[3] += 1
        if self.exists[item["flow"]]:
            self.rate[item["flow"]] = item["rate"]
        else:
            self.counts[4] += 1
        return None

    def process(self, item):
        """One decision: refill the flow's bucket up to ``now``, allow the frame if the bucket covers it (and
        charge it), write back."""
        flow, size = item["flow"], item["bytes"]
        self.counts[0] += 1
        out = {"kind": item["kind"], "flow": flow, "bytes": size, "tag": item["tag"], "allow": 0, "eligible": 0,
               "known": 0}
        if not self.exists[flow]:
            self.counts[2] += 1
            return out
        depth = self.bucket[flow] * UNITS_PER_BYTE
        cost = size * UNITS_PER_BYTE
        held = depth if self.fresh[flow] else self.tokens[flow]
        elapsed = min((item["now"] - self.last[flow]) & TIME_MASK, ELAPSED_MAX)
        refill = (min(self.rate[flow], RATE_MAX) * elapsed) >> 9
        level = min(held + refill, depth)
        allow = level >= cost
        if allow:
            level -= cost
            self.counts[1] += 1
        self.tokens[flow], self.last[flow], self.fresh[flow] = level, item["now"], 0
        out.update(allow=int(allow), eligible=int(level >= cost), known=1)
        return out


def pacer_commands(flows, **params):
    """``ctl`` commands creating (``exists`` true, the default) or removing each flow of ``flows`` (dicts with
    ``flow``, ``rate`` in kbit/s, ``bucket`` in bytes)."""
    n = params.get("n_flows", 1024)
    cmds = []
    for f in flows:
        if not 0 <= f["flow"] < n:
            raise ValueError(f"flow {f['flow']} out of range for {n} flows")
        rate, bucket = f.get("rate", 0), f.get("bucket", 0)
        if not 0 <= rate < 1 << 32 or not 0 <= bucket < 1 << 16:
            raise ValueError(f"flow {f['flow']}: rate must fit 32 bits and bucket 16 bits")
        cmds.append({"table": TABLE_FLOW, "index": f["flow"],
                     "data": rate | bucket << 32 | int(f.get("exists", 1)) << 48})
    return cmds


def pacer_trace(seed, n_items, **params):
    """A seeded random trace: flows created through ``ctl`` (some never: stray requests and rate updates), then
    ``n_items`` clocks, each a request (about 95%), many with a rate update offered in the same clock. Hazards:
    back-to-back requests of one flow, rate updates of the requested flow; ``now`` steps of a few ns, jumps, going
    backwards and wrapping at 2**48; frames larger than the bucket; a mid-trace removal and re-creation."""
    n = params.get("n_flows", 1024)
    rng = random.Random(seed)
    pool = rng.sample(range(n), min(n, 6))
    created = pool[: max(1, len(pool) - 1)]
    flows = [{"flow": f, "rate": rng.choice([100_000, 1_000_000, 25_000_000, 100_000_000, rng.randrange(1 << 32)]),
              "bucket": rng.choice([1500, 9216, 16383, 65535, rng.randrange(1 << 16)])} for f in created]
    events = [{"ctl": c} for c in pacer_commands(flows, n_flows=n)]
    now = rng.choice([0, TIME_MASK - 3000, rng.randrange(1 << 48)])
    flow = created[0]
    for k in range(n_items):
        r = rng.random()
        now = (now + (rng.randrange(0, 9) if r < 0.9 else rng.randrange(100, 1 << 25))) & TIME_MASK
        if rng.random() < 0.01:
            now = (now - rng.randrange(1, 5000)) & TIME_MASK
        if rng.random() < 0.6:
            flow = rng.choice(pool) if rng.random() < 0.8 else rng.randrange(n)
        if rng.random() < 0.4:
            target = flow if rng.random() < 0.5 else rng.choice(pool + [rng.randrange(n)])
            rate = rng.choice([0, 100_000, 40_000_000, 100_000_000, rng.randrange(1 << 32)])
            events.append({"rate": {"flow": target, "rate": rate}})
        if rng.random() < 0.05:
            continue                        # an update with no request in its clock
        if k == n_items // 2:
            f = rng.choice(flows)
            events.append({"ctl": pacer_commands([dict(f, exists=0)], n_flows=n)[0]})
        if k == 3 * n_items // 4:
            f = rng.choice(flows)
            events.append({"ctl": pacer_commands([dict(f, bucket=rng.randrange(1, 1 << 16))], n_flows=n)[0]})
        size = rng.choice([64, 64, 128, 1500, 9216, rng.randrange(1 << 14)])
        events.append({"item": {"kind": PacketKind.DATA.value, "flow": flow, "bytes": size, "now": now,
                                "tag": k & 0xFFFF}})
    return events
