"""SELB destination reordering (selb-reorder): RTL and golden model against hand-worked release orders (the tail
releasing a buffer, a lost tail timing out, a full buffer, every buffer busy, a second reroute, a stale tail, the
timer's wrap, other kinds passing a held flow, an unknown flow in order at epoch 0: its first tails, and its new path
arriving before its old path) and an independent re-derivation of the datasheet's rules on random
traces, with idle input and back-pressure.

Nothing here takes an expected value from lbpipe.sim.selb.reorder; its trace generator supplies stimuli only.
"""

import os
import random

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.sim.selb.reorder import Reorder, reorder_trace

BLOCK = "selb-reorder"
SMALL = dict(n_flows=8, n_buffers=2, depth=4, time_bits=6, timeout=16)
D, OTHER = 1, 0          # PacketKind DATA and OTHER, from docs/architecture.md
FULL = os.environ.get("LBPIPE_FULL") == "1"


# -- independent reference ----------------------------------------------------------------------------------------

class Ref:
    """The datasheet's behaviour table, one rule a line, with the buffers as a dict keyed by flow (the buffer's
    number only orders the timeouts and picks the lowest free one)."""

    def __init__(self, n_flows, n_buffers, depth, time_bits, timeout):
        self.slots, self.depth, self.mod, self.timeout = n_buffers, depth, 1 << time_bits, timeout
        self.epoch = {}                        # flow -> in-order epoch; a flow not yet seen is at 0 (its first row)
        self.held = {}                         # flow -> {"no": buffer number, "ep", "t0", "items": [(tag, tail)]}
        self.n = dict(items=0, held=0, reorders=0, timeouts=0, overflows=0, second=0, fallbacks=0, stale=0)

    def counters(self):
        return [self.n[k] for k in ("items", "held", "reorders", "timeouts", "overflows", "second", "fallbacks",
                                    "stale")]

    def _out(self, flow):
        b = self.held.pop(flow)
        return [dict(kind=D, tag=tag, flow=flow, epoch=b["ep"], tail=tail, held=1) for tag, tail in b["items"]]

    def item(self, it):
        self.n["items"] += 1
        out = []
        for flow, b in sorted(self.held.items(), key=lambda kv: kv[1]["no"]):
            age = it["now"] - b["t0"]
            if age < 0:
                age += self.mod
            if age >= self.timeout:
                self.n["timeouts"] += 1
                self.epoch[flow] = b["ep"]
                out += self._out(flow)
        me = dict(kind=it["kind"], tag=it["tag"], flow=it["flow"], epoch=it["epoch"], tail=it["tail"], held=0)
        f, e, tail = it["flow"], it["epoch"], it["tail"]
        if it["kind"] != D:
            return out + [me]
        if f in self.held:
            b = self.held[f]
            if e != b["ep"] and tail:
                self.n["reorders"] += 1
                self.epoch[f] = b["ep"]
                return out + [me] + self._out(f)
            if e != b["ep"]:
                return out + [me]
            b["items"].append((it["tag"], tail))
            self.n["held"] += 1
            if tail:
                self.n["second"] += 1
                self.epoch[f] = 1 - b["ep"]
                return out + self._out(f)
            if len(b["items"]) >= self.depth:
                self.n["overflows"] += 1
                self.epoch[f] = b["ep"]
                return out + self._out(f)
            return out
        if self.epoch.get(f, 0) == e:
            self.epoch[f] = 1 - e if tail else e
            return out + [me]
        if tail:
            self.n["stale"] += 1
            return out + [me]
        used = {b["no"] for b in self.held.values()}
        free = [k for k in range(self.slots) if k not in used]
        if not free:
            self.n["fallbacks"] += 1
            return out + [me]
        self.held[f] = {"no": free[0], "ep": e, "t0": it["now"], "items": [(it["tag"], 0)]}
        self.n["held"] += 1
        return out


def ref_run(params, events):
    ref = Ref(**params)
    out = []
    for e in events:
        if "item" in e:
            full = dict(kind=0, tag=0, flow=0, epoch=0, tail=0, now=0)
            full.update(e["item"])
            out += ref.item(full)
    return out, ref


# -- hand-worked cases --------------------------------------------------------------------------------------------

def _it(tag, flow, epoch=0, tail=0, now=0, kind=D):
    return {"item": dict(kind=kind, tag=tag, flow=flow, epoch=epoch, tail=tail, now=now)}


# Each case: its parameters, its items, and the release order worked out by hand from the datasheet's behaviour
# table: (tag, held) in output order, and the counters (items, held, reorders, timeouts, overflows, second
# reroutes, fallbacks, stale tails).
CASES = {
    # flow 1 moves to epoch 1: 2 and 3 arrive before the old path's 4 and its tail 5; the tail leaves, then 2, 3
    "tail_releases": (SMALL, [_it(0, 1), _it(1, 1), _it(2, 1, 1), _it(3, 1, 1), _it(4, 1, 0), _it(5, 1, 0, 1),
                              _it(6, 1, 1)],
                      [(0, 0), (1, 0), (4, 0), (5, 0), (2, 1), (3, 1), (6, 0)], [7, 2, 1, 0, 0, 0, 0, 0]),
    # the tail is lost: 1 opens the buffer at now 1; at now 16 (age 15) 2 joins it; the OTHER item at now 17 (age
    # 16 = timeout) releases 1, 2 before itself; the old tail 4 comes late (stale), 5 is in order
    "tail_lost_timeout": (SMALL, [_it(0, 2, 0, 0, 0), _it(1, 2, 1, 0, 1), _it(2, 2, 1, 0, 16),
                                  _it(3, 5, 0, 0, 17, OTHER), _it(4, 2, 0, 1, 18), _it(5, 2, 1, 0, 18)],
                          [(0, 0), (1, 1), (2, 1), (3, 0), (4, 0), (5, 0)], [6, 2, 0, 1, 0, 0, 0, 1]),
    # depth 4: the fourth early item fills the buffer, which drains with it last; the tail then is stale
    "buffer_full": (SMALL, [_it(0, 3), _it(1, 3, 1), _it(2, 3, 1), _it(3, 3, 1), _it(4, 3, 1), _it(5, 3, 0, 1),
                            _it(6, 3, 1)],
                    [(0, 0), (1, 1), (2, 1), (3, 1), (4, 1), (5, 0), (6, 0)], [7, 4, 0, 0, 1, 0, 0, 1]),
    # two buffers: flows 1 and 2 take them, flow 3's early 5 falls back (passes); flow 3's tail 7 is then in order
    "all_buffers_busy": (SMALL, [_it(0, 1), _it(1, 2), _it(2, 3), _it(3, 1, 1), _it(4, 2, 1), _it(5, 3, 1),
                                 _it(6, 1, 0, 1), _it(7, 3, 0, 1), _it(8, 2, 0, 1)],
                         [(0, 0), (1, 0), (2, 0), (5, 0), (6, 0), (3, 1), (7, 0), (8, 0), (4, 1)],
                         [9, 2, 2, 0, 0, 0, 1, 0]),
    # a second reroute's tail (epoch 1, tail) while flow 1 is held: it joins the buffer last and the buffer drains;
    # the flow's epoch is then 0, so 3 is in order
    "second_reroute": (SMALL, [_it(0, 1), _it(1, 1, 1), _it(2, 1, 1, 1), _it(3, 1, 0), _it(4, 1, 0)],
                       [(0, 0), (1, 1), (2, 1), (3, 0), (4, 0)], [5, 2, 0, 0, 0, 1, 0, 0]),
    # 6-bit timer: the buffer opens at 62; at 12 its age is 14 (no timeout; the OTHER item overtakes it), at 14 it
    # is 16: released before 3
    "timer_wrap": (SMALL, [_it(0, 4, 0, 0, 60), _it(1, 4, 1, 0, 62), _it(2, 6, 0, 0, 12, OTHER),
                           _it(3, 6, 0, 0, 14, OTHER)],
                   [(0, 0), (2, 0), (1, 1), (3, 0)], [4, 1, 0, 1, 0, 0, 0, 0]),
    # an unknown flow is in order at epoch 0: its first item, a tail of epoch 1 with no buffer, is a stale tail and
    # leaves the flow at 0; 1 is in order; 2, again a tail of epoch 1, is stale; 3 in order
    "first_tail_and_stale": (SMALL, [_it(0, 7, 1, 1), _it(1, 7, 0), _it(2, 7, 1, 1), _it(3, 7, 0)],
                             [(0, 0), (1, 0), (2, 0), (3, 0)], [4, 0, 0, 0, 0, 0, 0, 2]),
    # an unknown flow's epoch-0 tail is an in-order tail: it passes and moves the flow to epoch 1, whose packet 1 is
    # then in order; 2 (epoch 0, no tail, no buffer) is early and held until the OTHER item at now 16 times it out
    "first_tail_in_order": (SMALL, [_it(0, 6, 0, 1), _it(1, 6, 1), _it(2, 6, 0), _it(3, 0, 0, 0, 16, OTHER)],
                            [(0, 0), (1, 0), (2, 1), (3, 0)], [4, 1, 0, 1, 0, 0, 0, 0]),
    # after 0 of flow 2, a new flow 5 rerouted before its first packet reached the destination: its new path's 4
    # and 5 (epoch 1) arrive first and are held (an unknown flow is at epoch 0), the old path's 1, 2 pass, its tail
    # 3 leaves, then 4, 5; 6 (epoch 1) is in order (the rule before: 4 in order, 1 and 2 held, 3 a second reroute)
    "new_flow_new_path_first": (SMALL, [_it(0, 2), _it(4, 5, 1), _it(5, 5, 1), _it(1, 5, 0), _it(2, 5, 0),
                                        _it(3, 5, 0, 1), _it(6, 5, 1)],
                                [(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 0)], [7, 2, 1, 0, 0, 0, 0, 0]),
}


def _order(out):
    return [(o["tag"], o["held"]) for o in out]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_and_reference_hand_cases(name):
    params, events, want, counters = CASES[name]
    ref_out, ref = ref_run(params, events)
    assert _order(ref_out) == want and ref.counters() == counters
    model = Reorder(**params)
    for e in events:
        model.process(e["item"])
    assert _order(run_golden(BLOCK, params, events)) == want and model.stats() == counters


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("idle, bp", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_hand_cases(name, idle, bp):
    params, events, want, counters = CASES[name]
    stats = {}
    out = run_rtl(BLOCK, params, events, idle=idle, backpressure=bp, seed=5, stats=stats)
    assert _order(out) == want
    assert stats["counters"] == counters


def test_reference_matches_golden_on_many_traces():
    rng = random.Random(11)
    for seed in range(60):
        params = dict(n_flows=1 << rng.randrange(1, 6), n_buffers=rng.randrange(1, 5),
                      depth=1 << rng.randrange(1, 4), time_bits=rng.randrange(4, 9))
        params["timeout"] = 1 << rng.randrange(1, params["time_bits"])
        events = reorder_trace(seed, 300, **params)
        assert run_golden(BLOCK, params, events) == ref_run(params, events)[0], (seed, params)


# The default profile keeps one random RTL run (the small parameters, with idle and back-pressure); the other
# parameter sets and the unthrottled runs are the long regression (LBPIPE_FULL=1).
_LONG = pytest.mark.skipif(not FULL, reason="long random RTL run: LBPIPE_FULL=1")


@pytest.mark.parametrize("params", [SMALL,
                                    pytest.param(dict(n_flows=16, n_buffers=3, depth=2, time_bits=4, timeout=4),
                                                 marks=_LONG),
                                    pytest.param(dict(n_flows=4, n_buffers=1, depth=8, time_bits=8, timeout=32),
                                                 marks=_LONG)])
@pytest.mark.parametrize("idle, bp", [pytest.param(0.0, 0.0, marks=_LONG), (0.2, 0.6)])
def test_rtl_matches_reference(params, idle, bp):
    events = reorder_trace(23, 400, **params)
    stats = {}
    out = run_rtl(BLOCK, params, events, idle=idle, backpressure=bp, seed=9, stats=stats)
    want, ref = ref_run(params, events)
    assert out == want
    assert stats["counters"] == ref.counters()
    # every item leaves exactly once
    assert sorted(o["tag"] for o in out) == sorted(e["item"]["tag"] for e in events)


def test_one_item_per_clock_when_nothing_drains():
    """In-order traffic of many flows (no early packets): accepted one a clock (the datasheet's)."""
    events = [_it(k, k % 8, 0, 0, k % 64) for k in range(200)]
    stats = {}
    out = run_rtl(BLOCK, SMALL, events, stats=stats)
    assert [o["tag"] for o in out] == list(range(200))
    assert stats["items_per_clock"] == 1.0


def test_release_burst_holds_the_input():
    """The datasheet's timing: a release of k held items holds the input for k + 2 clocks, and an item waits one
    clock behind an item that opens a buffer or adds to its own flow's buffer. Here 9 items back to back: 1 opens
    flow 1's buffer (2 waits), 2 and 3 join it (3 and 4 wait), the tail 4 releases 3 items (5 waits 3 + 2 clocks;
    the clock it waits behind a release is one of them): 8 + 3 + 5 clocks from the first item taken to the last."""
    params = dict(SMALL, depth=8)
    base = [_it(0, 1), _it(1, 1, 1), _it(2, 1, 1), _it(3, 1, 1)]
    tail = [_it(4, 1, 0, 1)] + [_it(5 + k, 2) for k in range(4)]
    s2 = {}
    out = run_rtl(BLOCK, params, base + tail, stats=s2)
    assert _order(out) == [(0, 0), (4, 0), (1, 1), (2, 1), (3, 1), (5, 0), (6, 0), (7, 0), (8, 0)]
    assert round((s2["accepted"] - 1) / s2["items_per_clock"]) == 8 + 3 + 5


@pytest.mark.parametrize("bad", [dict(n_buffers=0), dict(n_buffers=17), dict(depth=3), dict(depth=1), dict(depth=2048),
                                 dict(timeout=3), dict(timeout=1 << 16), dict(n_flows=6), dict(time_bits=3)])
def test_bad_parameters(bad):
    from lbpipe.hdl.selb.reorder import Reorder as RTL
    with pytest.raises(ValueError):
        RTL(**bad)


def test_rtl_a_512_deep_buffer_fills_at_its_512th_item():
    """depth 512 (a buffer as deep as an uplink's queue in docs/selb_net.md): flow 1's 520 early packets (epoch 1),
    then its old path's tail. By the datasheet's table the first 511 are held, the 512th fills the buffer, which
    drains with it last (held, an overflow: the flow moves to epoch 1); the other 8 pass in order, the tail last as
    a stale tail. Counters by hand: 521 items, 512 held, 0 reorders, 0 timeouts, 1 overflow, 0 second reroutes,
    0 fallbacks, 1 stale tail; the independent reference agrees."""
    params = dict(n_flows=8, n_buffers=2, depth=512, time_bits=12, timeout=2048)
    events = [_it(k, 1, 1, 0, now=k % 64) for k in range(520)] + [_it(520, 1, 0, 1, now=7)]
    stats = {}
    out = run_rtl(BLOCK, params, events, idle=0.1, backpressure=0.3, seed=4, stats=stats)
    assert _order(out) == [(k, 1) for k in range(512)] + [(k, 0) for k in range(512, 521)]
    assert stats["counters"] == [521, 512, 0, 0, 1, 0, 0, 1]
    want, ref = ref_run(params, events)
    assert out == want and ref.counters() == stats["counters"]


def test_reset_sweeps_every_flow_to_epoch_0():
    """A trace that shows a flow table surviving a reset: every flow first moves to epoch 1 (an in-order epoch-0
    tail), then only epoch-1 packets follow. The harness resets at a random cut past the tails and expects what a
    block back at its documented reset does (datasheet: every flow at epoch 0, so the epoch-1 packets are early and
    held or fall back); a table left at epoch 1 would pass them in order, unheld."""
    events = [_it(f, f, 0, 1, now=f) for f in range(SMALL["n_flows"])]
    for k in range(8, 300):
        events.append(_it(k, k % SMALL["n_flows"], 1, 0, now=k % 64))
    events += [{"item": {"kind": 0, "tag": 300 + k, "flow": 0, "epoch": 0, "tail": 0, "now": (300 + 20 * k) % 64}}
               for k in range(4)]
    for seed in (1, 2):
        run_rtl(BLOCK, SMALL, events, testcase="reset_state", seed=seed, idle=0.1, backpressure=0.2)
