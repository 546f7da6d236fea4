"""SELB per-flow rerouting (selb-reroute): RTL and golden model against an independent re-derivation of the
datasheet's rules (docs/selb_reroute.md), hand-worked cases (the tail, the draw among ``alt``, the shortest path,
one reroute in flight, the hold expiring across the timer's wrap, a stale path), back-to-back packets of one flow.

Nothing here takes an expected value from lbpipe.sim.selb.reroute; its trace generator supplies stimuli only (and
its model is driven, as the code under test, by the draw's uniformity test).
"""

import random

import numpy as np
import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.sim.selb.reroute import Reroute, reroute_trace

BLOCK = "selb-reroute"


# -- independent reference ----------------------------------------------------------------------------------------

class Ref:
    """The datasheet's rules, with the flow table as numpy columns."""

    def __init__(self, n_flows, n_paths, time_bits, hold, lfsr_seed):
        self.n, self.mod, self.hold = n_paths, 1 << time_bits, hold
        self.valid = np.zeros(n_flows, dtype=bool)
        self.path = np.zeros(n_flows, dtype=np.int64)
        self.busy = np.zeros(n_flows, dtype=bool)         # a reroute in flight
        self.t = np.zeros(n_flows, dtype=np.int64)
        self.epoch = np.zeros(n_flows, dtype=np.int64)
        self.state = [int(c) for c in f"{lfsr_seed:016b}"]   # bit 15 first
        self.counters = [0, 0, 0, 0]

    def draw(self):
        """The LFSR's whole state as a fraction of 2^16, then one step (x^16 + x^14 + x^13 + x^11 + 1: new bit 0 =
        b15^b13^b12^b10)."""
        value = int("".join(map(str, self.state)), 2) / 65536
        b = self.state
        self.state = b[1:] + [b[0] ^ b[2] ^ b[3] ^ b[5]]      # index 0 is bit 15, 2 is bit 13, 3 bit 12, 5 bit 10
        return value

    def item(self, it):
        r = self.draw()
        f = it["flow"]
        mates = [q for q in range(self.n) if it["alt"] >> q & 1]      # uniform: equal slices of [0, 1) in order
        target = mates[int(r * len(mates))] if mates else it["shortest"]
        if self.valid[f]:
            cur, stale, ep = int(self.path[f]), it["path"] != int(self.path[f]), int(self.epoch[f])
            waiting = self.busy[f] and (it["now"] - int(self.t[f])) % self.mod < self.hold
        else:
            cur, stale, ep, waiting = it["path"], False, 0, False
        tail = it["kind"] == 1 and bool(it["congested"]) and not stale and not waiting and target != cur
        self.valid[f] = True
        self.busy[f] = tail or waiting
        if tail:
            self.path[f], self.t[f], self.epoch[f] = target, it["now"], ep ^ 1
        else:
            self.path[f], self.epoch[f] = cur, ep
        self.counters = [self.counters[0] + 1, self.counters[1] + tail, self.counters[2] + (tail and not mates),
                         self.counters[3] + stale]
        return {"kind": it["kind"], "tag": it["tag"], "flow": f, "path": cur, "tail": int(tail), "epoch": ep}

    def run(self, events):
        return [self.item(e["item"]) for e in events if "item" in e]


# -- hand-worked cases ------------------------------------------------------------------------------------------
# 8 paths, seed 0xACE1: the draws are the states 0xACE1, 0x59C3, 0xB387, ... (each step shifts left and brings in
# bit 15 ^ 13 ^ 12 ^ 10: 1 for 0xACE1, 1 for 0x59C3), one draw per packet. In this case every draw that matters has
# one or two mates; the draw's rank is worked in UNIFORM_EVENTS below.
HAND = dict(n_flows=16, n_paths=8, time_bits=8, hold=4, lfsr_seed=0xACE1)


def pkt(tag, flow, now, path, congested, alt, shortest):
    return {"item": {"kind": 1, "tag": tag, "flow": flow, "now": now, "path": path, "congested": congested,
                     "alt": alt, "shortest": shortest}}


HAND_EVENTS = [
    pkt(0, 3, 10, 2, 0, 0b11111011, 0),     # new flow on path 2, not congested: stays
    pkt(1, 3, 11, 2, 1, 0b00110000, 7),     # congested: 0x59C3 = 22979, x 2 < 65536: the first of {4, 5}: the tail
    pkt(2, 3, 12, 4, 1, 0b00000001, 6),     # on path 4, congested, but the reroute is in flight (1 < hold 4)
    pkt(3, 3, 16, 4, 1, 0b00000000, 6),     # 5 ticks later (>= 4): allowed; no mate: the shortest path 6; the tail
    pkt(4, 3, 17, 4, 1, 0b00000000, 5),     # looked up on path 4, but the flow is on 6: stale, no decision
    pkt(5, 3, 30, 6, 1, 0b00000000, 6),     # congested, no mate, the shortest is its own path: stays
    pkt(6, 9, 253, 1, 1, 0b10000000, 0),    # a new flow, congested at once: draw, only mate 7: the tail
    pkt(7, 9, 0, 7, 1, 0b00000100, 0),      # 3 ticks later across the wrap (0 - 253 = 3 mod 256): waits
    pkt(8, 9, 1, 7, 1, 0b00000100, 0),      # 4 ticks: allowed: to path 2 (the only mate)
]
#                    (path, tail, epoch)
HAND_OUT = [(2, 0, 0), (2, 1, 0), (4, 0, 1), (4, 1, 1), (6, 0, 0), (6, 0, 0), (1, 1, 0), (7, 0, 1), (7, 1, 1)]
HAND_COUNTERS = [9, 4, 1, 1]


def _view(out):
    return [(o["path"], o["tail"], o["epoch"]) for o in out]


def test_hand_worked_reference():
    ref = Ref(**HAND)
    assert _view(ref.run(HAND_EVENTS)) == HAND_OUT
    assert ref.counters == HAND_COUNTERS


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_hand_worked_rtl(idle, backpressure):
    """Back to back (every packet of flow 3 one clock after the other: forwarding) and throttled."""
    stats = {}
    out = run_rtl(BLOCK, HAND, HAND_EVENTS, idle=idle, backpressure=backpressure, seed=3, stats=stats)
    assert _view(out) == HAND_OUT
    assert stats["counters"] == HAND_COUNTERS
    assert _view(run_golden(BLOCK, HAND, HAND_EVENTS)) == HAND_OUT


# The draw is uniform among the set bits of alt: the k-th of its m set bits (from bit 0) for k = floor(r m / 2^16),
# r the LFSR's state. The states from 0xACE1, worked by hand (shift left, new bit 0 = bit 15 ^ 13 ^ 12 ^ 10):
# 0xACE1 = 44257, 0x59C3 = 22979, 0xB387 = 45959, 0x670F = 26383 (0xB387: 1 ^ 1 ^ 1 ^ 0 = 1), 0xCE1E = 52766
# (0x670F: 0 ^ 1 ^ 0 ^ 1 = 0). Every first packet is a new flow on path 0, congested: the tail; its flow's second
# packet (looked up on the new path, not congested) shows where it went. A rotate-and-find-first draw from the
# state's low bits (the block's earlier rule) would give 1, 4, 7, 7, 1 for these five.
UNIFORM_EVENTS = [
    pkt(0, 0, 1, 0, 1, 0b01000110, 0),      # 44257 x 3 = 132771 -> k = 2 of {1, 2, 6}: path 6
    pkt(1, 1, 1, 0, 1, 0b00010010, 0),      # 22979 x 2 = 45958 -> k = 0 of {1, 4}: path 1
    pkt(2, 2, 1, 0, 1, 0b11111110, 0),      # 45959 x 7 = 321713 -> k = 4 of {1..7}: path 5
    pkt(3, 3, 1, 0, 1, 0b11111100, 0),      # 26383 x 6 = 158298 -> k = 2 of {2..7}: path 4
    pkt(4, 4, 1, 0, 1, 0b00001110, 0),      # 52766 x 3 = 158298 -> k = 2 of {1, 2, 3}: path 3
    pkt(5, 0, 2, 6, 0, 0, 0), pkt(6, 1, 2, 1, 0, 0, 0), pkt(7, 2, 2, 5, 0, 0, 0), pkt(8, 3, 2, 4, 0, 0, 0),
    pkt(9, 4, 2, 3, 0, 0, 0),
]
UNIFORM_OUT = [(0, 1, 0)] * 5 + [(6, 0, 1), (1, 0, 1), (5, 0, 1), (4, 0, 1), (3, 0, 1)]
# 64 paths (eight groups of 8 in the RTL): {5, 17, 40, 63} at 44257 x 4 = 177028 -> k = 2: path 40; then
# {8..15, 48} at 45959 x 9 = 413631 -> k = 6: path 14 (the second packet of flow 0 took 22979).
WIDE = dict(HAND, n_paths=64)
WIDE_EVENTS = [pkt(0, 0, 1, 0, 1, (1 << 5) | (1 << 17) | (1 << 40) | (1 << 63), 0), pkt(1, 0, 2, 40, 0, 0, 0),
               pkt(2, 1, 3, 0, 1, (0xFF << 8) | (1 << 48), 0), pkt(3, 1, 4, 14, 0, 0, 0)]
WIDE_OUT = [(0, 1, 0), (40, 0, 1), (0, 1, 0), (14, 0, 1)]


# Only a data packet is rerouted (the destination's selb-reorder honours a tail on DATA only). Flow 5, new, on path
# 2, congested, one mate (path 3), every draw the same: an ACK (kind 2) and a CNP (kind 3) leave on path 2 and are
# never the tail (the entry is made, the LFSR steps); the data packet after them is the tail; a NACK (kind 4) next,
# looked up on the new path 3 and congested with mate 2, is in flight anyway; the OTHER (kind 0) after the hold,
# congested, does not move either; the data packet after it does (to 2). The old rule (any kind) makes the ACK the
# tail.
def kind_pkt(kind, *args):
    return {"item": dict(pkt(*args)["item"], kind=kind)}


KIND_EVENTS = [kind_pkt(2, 0, 5, 10, 2, 1, 0b1000, 0), kind_pkt(3, 1, 5, 10, 2, 1, 0b1000, 0),
               pkt(2, 5, 11, 2, 1, 0b1000, 0), kind_pkt(4, 3, 5, 12, 3, 1, 0b0100, 0),
               kind_pkt(0, 4, 5, 20, 3, 1, 0b0100, 0), pkt(5, 5, 21, 3, 1, 0b0100, 0)]
KIND_OUT = [(2, 0, 0), (2, 0, 0), (2, 1, 0), (3, 0, 1), (3, 0, 1), (3, 1, 1)]


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_only_data_packets_are_rerouted(idle, backpressure):
    stats = {}
    assert _view(Ref(**HAND).run(KIND_EVENTS)) == KIND_OUT
    assert _view(run_golden(BLOCK, HAND, KIND_EVENTS)) == KIND_OUT
    assert _view(run_rtl(BLOCK, HAND, KIND_EVENTS, idle=idle, backpressure=backpressure, seed=5,
                         stats=stats)) == KIND_OUT
    assert stats["counters"] == [6, 2, 0, 0]


def test_hand_worked_uniform_draw_reference():
    assert _view(Ref(**HAND).run(UNIFORM_EVENTS)) == UNIFORM_OUT
    assert _view(Ref(**WIDE).run(WIDE_EVENTS)) == WIDE_OUT


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_hand_worked_uniform_draw(idle, backpressure):
    """The draw's rank among alt's set bits, RTL and golden model, at 8 paths (one group) and 64 (eight)."""
    for params, events, want in ((HAND, UNIFORM_EVENTS, UNIFORM_OUT), (WIDE, WIDE_EVENTS, WIDE_OUT)):
        stats = {}
        assert _view(run_rtl(BLOCK, params, events, idle=idle, backpressure=backpressure, seed=4,
                             stats=stats)) == want
        assert stats["counters"] == [len(want), want.count((0, 1, 0)), 0, 0]
        assert _view(run_golden(BLOCK, params, events)) == want


@pytest.mark.parametrize("mates", [(5, 17, 40), (0, 9, 18, 27, 36, 45, 63)], ids=["m3", "m7"])
def test_golden_draw_is_uniform_over_the_lfsr_period(mates):
    """The golden model's draws over the LFSR's whole period: one flow, a congested packet (a reroute, hold 1)
    then a packet that shows where it went, 65,535 times. Each draw takes every other LFSR state, and the period is
    odd, so the measured draws see each of the 65,535 states once: each of the m mates is chosen floor or ceil of
    65,535 / m times (21,845 each for m = 3; 9,362 or 9,363 for m = 7). Arithmetic, not the block's constants."""
    model = Reroute(**dict(HAND, n_flows=16, n_paths=64, hold=1))
    mask = sum(1 << p for p in mates)
    cur, now, counts = 0, 0, {}
    for _ in range(65535):
        now = (now + 2) % 256
        model.process(pkt(0, 0, now, cur, 1, mask, 0)["item"])
        cur = model.process(pkt(1, 0, (now + 1) % 256, cur, 0, 0, 0)["item"])["path"]
        counts[cur] = counts.get(cur, 0) + 1
    assert sorted(counts) == sorted(mates)
    low = 65535 // len(mates)
    assert all(c in (low, low + 1) for c in counts.values()) and sum(counts.values()) == 65535, counts


def test_one_flow_back_to_back_stream():
    """One flow, every packet congested, one per clock: exactly one tail per hold window, each decision seeing the
    one of the packet before (the four-deep forwarding), the epoch flipping at each tail."""
    p = dict(HAND, hold=4)
    walk, events = Ref(**p), []     # each packet looked up on the flow's current path (an ideal wire)
    for t in range(40):
        cur = int(walk.path[5]) if walk.valid[5] else 0
        events.append(pkt(t, 5, t, cur, 1, 0xFF & ~(1 << cur), 0))
        walk.item(events[-1]["item"])
    ref = Ref(**p)
    want = ref.run(events)
    out = run_rtl(BLOCK, p, events)
    assert out == want
    tails = [o["tag"] for o in out if o["tail"]]
    assert tails == list(range(0, 40, 4))       # a reroute every hold (4) ticks, one tick a packet
    # the packet on the old path is the one flagged; the next leaves on the new path with the flipped epoch
    for t in tails[:-1]:
        assert out[t + 1]["epoch"] != out[t]["epoch"] and out[t + 1]["path"] != out[t]["path"]


# -- random traces against the reference --------------------------------------------------------------------------

CASES = [
    dict(n_flows=16, n_paths=8, time_bits=8, hold=4, lfsr_seed=0xACE1),
    dict(n_flows=4, n_paths=4, time_bits=4, hold=2, lfsr_seed=0x1234),
    dict(n_flows=64, n_paths=64, time_bits=6, hold=16, lfsr_seed=1),
]


def test_golden_matches_reference_many_traces():
    rng = random.Random(5)
    tails = 0
    for seed in range(40):
        tb = rng.randrange(4, 12)
        params = dict(n_flows=1 << rng.randrange(1, 8), n_paths=1 << rng.randrange(1, 7), time_bits=tb,
                      hold=1 << rng.randrange(0, tb), lfsr_seed=rng.randrange(1, 1 << 16))
        events = reroute_trace(seed, 400, **params)
        ref = Ref(**params)
        want = ref.run(events)
        assert run_golden(BLOCK, params, events) == want, (seed, params)
        tails += ref.counters[1]
    assert tails > 200


@pytest.mark.parametrize("params", CASES, ids=lambda p: f"f{p['n_flows']}n{p['n_paths']}")
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.25, 0.5)])
def test_rtl_matches_reference(params, idle, backpressure):
    events = reroute_trace(17, 600, **params)
    stats = {}
    out = run_rtl(BLOCK, params, events, idle=idle, backpressure=backpressure, seed=9, stats=stats)
    ref = Ref(**params)
    assert out == ref.run(events)
    assert stats["counters"] == ref.counters
    assert ref.counters[1] > 20 and ref.counters[2] > 0 and ref.counters[3] > 0


@pytest.mark.parametrize("params", [dict(n_flows=4, n_paths=2, time_bits=4, hold=1, lfsr_seed=0xACE1),
                                    dict(n_flows=8, n_paths=4, time_bits=4, hold=8, lfsr_seed=7)],
                         ids=["hold1", "hold-half-range"])
def test_rtl_hold_edges(params):
    """The hold's edge cases against the reference: hold = 1 (its own branch of the RTL's hold test: any later tick
    has passed) and hold = 2**(time_bits - 1) (the largest, half the timer's range), with idle and back-pressure."""
    events = reroute_trace(23, 400, **params)
    stats = {}
    out = run_rtl(BLOCK, params, events, idle=0.2, backpressure=0.3, seed=5, stats=stats)
    ref = Ref(**params)
    assert out == ref.run(events)
    assert stats["counters"] == ref.counters
    assert ref.counters[1] > 5          # reroutes happened, so the hold test was exercised both ways


def test_reset_mid_traffic_forgets_flows():
    """Reset while flows stream (the harness's reset_state: afterwards the block behaves as reset: every flow new,
    the LFSR from its seed)."""
    run_rtl(BLOCK, CASES[0], reroute_trace(4, 300, **CASES[0]), testcase="reset_state", idle=0.1,
            backpressure=0.2, seed=2)
