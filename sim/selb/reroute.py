"""Golden model of SELB's per-flow rerouting (SELB, paper 004: section III "Rerouting Strategy"; datasheet
docs/selb_reroute.md).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.selb.reroute.Reroute`: one decision per item, in order (the
hardware's forwarding makes back-to-back packets of a flow behave as if one after the other). Also here:
:func:`reroute_trace`, seeded random traces.
"""

import random

from lbpipe.hdl.selb.reroute import check_parameters
from lbpipe.hdl.lib.meta import PacketKind

__all__ = ["Reroute", "reroute_trace"]

DATA = PacketKind.DATA.value


def _lfsr_step(state):
    bit = ((state >> 15) ^ (state >> 13) ^ (state >> 12) ^ (state >> 10)) & 1
    return ((state << 1) | bit) & 0xFFFF


class Reroute:
    """Parameters are those of the RTL block."""

    def __init__(self, *, n_flows=1024, n_paths=64, time_bits=16, hold=32, lfsr_seed=0xB5AD):
        check_parameters(n_flows=n_flows, n_paths=n_paths, time_bits=time_bits, hold=hold, lfsr_seed=lfsr_seed)
        self.nf, self.n, self.tb, self.hold, self.seed = n_flows, n_paths, time_bits, hold, lfsr_seed
        self.reset()

    def reset(self):
        """Hardware reset: every flow invalid (the sweep), the LFSR to its seed, counters 0."""
        self.flows = {}         # flow -> [path, inflight, since, epoch]
        self.lfsr = self.seed
        self.counts = [0] * 4

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        pass                    # no tables

    def _pick(self, alt, draw):
        """Uniform among the set bits of ``alt``: the floor(draw x m / 2**16)-th of its m set bits, from bit 0."""
        mates = [p for p in range(self.n) if alt >> p & 1]
        return mates[draw * len(mates) >> 16] if mates else None

    def process(self, item):
        draw = self.lfsr
        self.lfsr = _lfsr_step(self.lfsr)
        f = item["flow"]
        ent = self.flows.get(f)
        if ent is None:
            cur, inflight, since, epoch, stale = item["path"], 0, 0, 0, False
        else:
            cur, inflight, since, epoch = ent
            stale = item["path"] != cur
            if (item["now"] - since) % (1 << self.tb) >= self.hold:
                inflight = 0
        pick = self._pick(item["alt"], draw)
        cand = item["shortest"] if pick is None else pick
        # only a data packet is rerouted (and so marked the tail): selb-reorder honours a tail on DATA only
        move = item["kind"] == DATA and not stale and item["congested"] and not inflight and cand != cur
        self.counts[0] += 1
        self.counts[1] += move
        self.counts[2] += move and item["alt"] == 0
        self.counts[3] += stale
        if move:
            self.flows[f] = [cand, 1, item["now"], epoch ^ 1]
        else:
            self.flows[f] = [cur, inflight, since, epoch]
        return {"kind": item["kind"], "tag": item["tag"], "flow": f, "path": cur, "tail": int(move), "epoch": epoch}


def reroute_trace(seed, n_items, **params):
    """Seeded random trace: a few flows (often back to back), ``now`` advancing by 0..hold (and wrapping), each
    packet with cluster fields as selb-cluster would give for the flow's current path (congested often, ``alt``
    random and sometimes empty, ``shortest`` random); now and then a stale path (looked up on another path than the
    flow's) and ignored ``ctl`` commands. The golden model only tracks the flows' paths (stimuli, not expectations)."""
    model = Reroute(**params)
    n, nf, tb, hold = model.n, model.nf, model.tb, model.hold
    rng = random.Random(seed)
    flows = rng.sample(range(nf), min(nf, rng.randrange(2, 9)))
    now = rng.randrange(1 << tb)
    events = []
    for k in range(n_items):
        if rng.random() < 0.01:
            events.append({"ctl": {"table": rng.randrange(4), "index": 0, "data": rng.randrange(1 << 16)}})
        f = rng.choice(flows) if rng.random() < 0.9 else rng.randrange(nf)
        ent = model.flows.get(f)
        path = ent[0] if ent is not None and rng.random() < 0.93 else rng.randrange(n)
        r = rng.random()
        alt = 0 if r < 0.2 else rng.randrange(1 << n)
        alt &= ~(1 << path) if rng.random() < 0.8 else -1
        kind = DATA if rng.random() < 0.8 else rng.choice(list(PacketKind)).value
        item = {"kind": kind, "tag": k & 0xFFFF, "flow": f, "now": now,
                "path": path, "congested": int(rng.random() < 0.4), "alt": alt, "shortest": rng.randrange(n)}
        events.append({"item": item})
        model.process(item)
        if rng.random() < 0.3:
            now = (now + rng.randrange(0, hold + 2)) % (1 << tb)
    return events
