"""LAPS AIMD rate controller: signature and parameters, the golden model against hand-worked cases and the paper's
worked example (section III-F), RTL against the golden model on targeted random ACK streams (congested and
uncongested vectors, bursts to one flow, every flow, adjustments back to back at every forwarding distance, ``now``
across the 48-bit wrap, stray ACKs), and the closed loop.

Expected values are written by hand from the paper's rules and the datasheet (docs/laps_aimd.md); none is read
from the RTL or the golden model."""

import random

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.laps.aimd import Aimd, AimdItem, AimdResult
from lbpipe.sim.laps.aimd import aimd_ack, aimd_commands
from lbpipe.sim.laps.aimd_loop import run_loop

INF = 0xFFFF_FFFF
WRAP = 1 << 48
P4 = dict(n_flows=16, k=4, stages=5, variant="paper", line_rate=100_000_000, min_rate=100_000)
S4 = dict(P4, variant="sim")
# Slot vectors (real_val, base_val): T = max base = 2000.
CALM = [(1000, 1500), (1200, 2000)]            # t = 1000 <= T: not congested; paper windows 2 t = 2000 ns
BUSY = [(2500, 1500), (3000, 2000)]            # t = 2500 > T: congested; paper 2 t = 5000, sim 2 max real = 6000


def _create(flow, cur, exp, **p):
    return [{"ctl": c} for c in aimd_commands([(flow, cur, exp)], **{**P4, **p})]


def _ack(flow, now, paths, tag=0, kind=None, k=4):
    return {"item": aimd_ack(flow, now, paths, tag=tag, kind=kind, k=k)}


FILL = 0xFFFF     # tag of the filler items


def _sp(acks):
    """Eight ACKs of the never-created flow 15 after each ACK (tag FILL), so no ACK of the list falls in the
    hold-off of the one before it (datasheet: an ACK does not adjust a flow one of the 8 items before it
    adjusted)."""
    out = []
    for a in acks:
        out += [a] + [_ack(15, 0, CALM, tag=FILL) for _ in range(8)]
    return out


def _run(p, ev, rtl=False):
    out = (run_rtl if rtl else run_golden)("laps-aimd", p, ev)
    return [o for o in out if o["tag"] != FILL]


def _rates(out):
    return [(o["rate"], o["expected"], o["stage"], o["action"], o["changed"], o["hit"]) for o in out]


# -- signature and parameters -------------------------------------------------------------------------------------

def test_signature():
    dut = Aimd(n_flows=16, k=4)
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "o", "ctl", "stats"}
    item = [(n, f.width) for n, f in dut.signature.members["i"].signature.members["payload"].shape]
    assert item == [("kind", 3), ("flow", 4), ("now", 48)] + [
        (f"{f}{j}", w) for j in range(4) for f, w in (("valid", 1), ("real_val", 32), ("base_val", 32))] + [
        ("tag", 16)]
    res = [(n, f.width) for n, f in dut.signature.members["o"].signature.members["payload"].shape]
    assert res == [("kind", 3), ("tag", 16), ("flow", 4), ("rate", 32), ("expected", 32), ("stage", 4),
                   ("action", 2), ("changed", 1), ("hit", 1)]
    assert dut.signature.members["stats"].shape == 128
    assert dut.latency == 8                        # the datasheet: 8 cycles for every k and n_flows
    assert Aimd(n_flows=1 << 16, k=32).latency == 8
    assert AimdItem(n_flows=16, k=4) == dut.signature.members["i"].signature.members["payload"].shape
    assert AimdResult(n_flows=16) == dut.signature.members["o"].signature.members["payload"].shape


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_flows=1000), ValueError), (dict(n_flows=1 << 17), ValueError), (dict(n_flows=1), ValueError),
    (dict(k=0), ValueError), (dict(k=33), ValueError), (dict(stages=0), ValueError), (dict(stages=15), ValueError),
    (dict(variant="ns3"), ValueError), (dict(line_rate=1 << 32), ValueError),
    (dict(line_rate=10, min_rate=11), ValueError), (dict(k="8"), TypeError), (dict(min_rate=True), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        Aimd(**kwargs)


def test_commands_written_by_hand():
    cmds = aimd_commands([(3, 5_000, 7_000)], remove=[9], limits=(40_000_000, 1_000), **P4)
    assert cmds == [{"table": 2, "index": 0, "data": 40_000_000}, {"table": 3, "index": 0, "data": 1_000},
                    {"table": 0, "index": 3, "data": 5_000 | 7_000 << 32}, {"table": 1, "index": 9, "data": 0}]
    with pytest.raises(ValueError):
        aimd_commands([(16, 1, 1)], **P4)          # flow 16 of 16
    with pytest.raises(ValueError):
        aimd_commands([(1, 1 << 32, 1)], **P4)


# -- golden model: hand-worked ------------------------------------------------------------------------------------

A = 1 << 20      # the example's rate "a" (kbit/s), a power of two so every halving is exact


def _worked_example_events():
    """Expected 2a, current a; six uncongested ACKs a window apart (five linear increases, then the doubling);
    one congested ACK."""
    ev = _create(1, A, 2 * A)
    ev += _sp([_ack(1, 10_000 + 2000 * n, CALM, tag=n) for n in range(6)])  # each at the previous deadline
    ev += _sp([_ack(1, 30_000, BUSY, tag=6)])
    return ev


# By hand: a -> (2a + a)/2 = 1.5a -> 1.75a -> 1.875a -> 1.9375a -> 1.96875a (stages 1..5, expected 2a);
# stage 6 > N: expected 4a, current (4a + 1.96875a)/2 = 2.984375a ("3a"); congestion: expected 2.984375a,
# current 1.4921875a ("1.5a"), stage 0.
WORKED = [(1_572_864, 2 * A, 1), (1_835_008, 2 * A, 2), (1_966_080, 2 * A, 3), (2_031_616, 2 * A, 4),
          (2_064_384, 2 * A, 5), (3_129_344, 4 * A, 6), (1_564_672, 3_129_344, 0)]


def test_paper_worked_example_golden():
    out = _run(P4, _worked_example_events())
    assert [(o["rate"], o["expected"], o["stage"]) for o in out] == WORKED
    assert [o["action"] for o in out] == [1] * 6 + [2]
    # the paper's rounded figures: 3a after the doubling, 1.5a and 3a after the congestion
    assert abs(out[5]["rate"] - 3 * A) <= A // 64 and out[5]["expected"] == 4 * A
    assert abs(out[6]["rate"] - 3 * A // 2) <= A // 128 and abs(out[6]["expected"] - 3 * A) <= A // 64


def test_paper_worked_example_rtl():
    """The same events through the RTL (a controlled clock: ``now`` set per ACK)."""
    out = _run(P4, _worked_example_events(), rtl=True)
    assert [(o["rate"], o["expected"], o["stage"]) for o in out] == WORKED


def test_hyper_increase_keeps_doubling_and_caps_at_line_rate():
    """After the doubling the stage stays above N: every increase doubles (HAI) until the line rate caps it."""
    p = dict(P4, line_rate=10 * A)
    ev = _create(1, A, 2 * A, **p) + _sp([_ack(1, 10_000 + 2000 * n, CALM) for n in range(8)])
    out = _run(p, ev)
    # stages 6, 7, 8 (saturates at N + 1 = 6): expected 4a, 8a, min(16a, 10a) = 10a
    assert [o["expected"] for o in out[5:]] == [4 * A, 8 * A, 10 * A]
    assert [o["stage"] for o in out[5:]] == [6, 6, 6]
    assert out[6]["rate"] == (8 * A + 3_129_344) // 2 and out[7]["rate"] == (10 * A + out[6]["rate"]) // 2


def test_windows_paper_and_sim():
    """paper: act when now has reached the deadline; sim: only once it is past. Increase window: paper 2 t =
    2000, sim 2 T = 4000; decrease window: paper 2 t = 5000, sim 2 x max real_val = 6000."""
    inc = [_ack(1, 10_000, CALM), _ack(1, 11_999, CALM), _ack(1, 12_000, CALM), _ack(1, 14_000, CALM),
           _ack(1, 14_001, CALM)]
    inc = _sp(inc)
    got = [o["action"] for o in _run(P4, _create(1, A, 2 * A) + inc)]
    assert got == [1, 0, 1, 1, 0]
    got = [o["action"] for o in _run(S4, _create(1, A, 2 * A, **S4) + inc)]
    assert got == [1, 0, 0, 0, 1]          # 14,000 is not past 14,000; 14,001 is
    dec = _sp([_ack(1, 10_000, BUSY), _ack(1, 15_000, BUSY), _ack(1, 16_000, BUSY), _ack(1, 16_001, BUSY)])
    assert [o["action"] for o in _run(P4, _create(1, 8 * A, 8 * A) + dec)] == [2, 2, 0, 0]
    assert [o["action"] for o in _run(S4, _create(1, 8 * A, 8 * A, **S4) + dec)] == [2, 0, 0, 2]


def test_sim_decrease_window_with_an_infinite_slot():
    """sim: W_dec is the largest valid real_val, infinity included, so a congested ACK with one valid infinite slot
    (t = 2500 > T = 2000) closes the decrease window for 2 x (2**32 - 1) = 8,589,934,590 ns: deadline 8,589,944,590;
    1 ns before it nothing, 1 ns after it a decrease. paper: W_dec = t = 2500 (window 5,000 ns), so the ACKs 1 s and
    8.6 s later decrease, and the one 2 ns after that does not."""
    busy_inf = [(2500, 1500), (INF, 2000)]
    deadline = 10_000 + 2 * (2 ** 32 - 1)
    ev = _sp([_ack(1, 10_000, busy_inf), _ack(1, 10_000 + 10 ** 9, BUSY), _ack(1, deadline - 1, BUSY),
              _ack(1, deadline + 1, BUSY)])
    assert [o["action"] for o in _run(S4, _create(1, 8 * A, 8 * A, **S4) + ev)] == [2, 0, 0, 2]
    assert [o["action"] for o in _run(S4, _create(1, 8 * A, 8 * A, **S4) + ev, rtl=True)] == [2, 0, 0, 2]
    assert [o["action"] for o in _run(P4, _create(1, 8 * A, 8 * A) + ev)] == [2, 2, 2, 0]


def test_windows_are_separate():
    """A decrease leaves the increase window open (Algorithm 2 keeps two deadlines)."""
    ev = _create(1, 8 * A, 8 * A) + _sp([_ack(1, 10_000, BUSY), _ack(1, 10_001, CALM), _ack(1, 10_002, BUSY)])
    out = _run(P4, ev)
    # dec: exp 8a, cur 4a; inc (stage 1): cur (8a + 4a)/2 = 6a; dec window (until 15,000) still shut
    assert _rates(out) == [(4 * A, 8 * A, 0, 2, 1, 1), (6 * A, 8 * A, 1, 1, 1, 1), (6 * A, 8 * A, 1, 0, 0, 1)]


def test_sim_variant_floor_target_and_late_doubling():
    """sim: current = max(current + 1 Gb/s, (current + expected)/2), expected = max(expected, current); the doubling
    needs stage > N before the increment (the (N + 2)-th increase)."""
    p = dict(S4, stages=2)
    ev = _create(1, 10_000_000, 10_500_000, **p) + _sp([_ack(1, 10_000 + 4001 * n, CALM) for n in range(5)])
    out = _run(p, ev)
    # 1: max(11.0M, 10.25M) = 11.0M, exp 11.0M; 2: 12.0M (floor beats 11.0M), 3: 13.0M (stage 2 -> 3);
    # 4: stage 3 > 2: exp 2 x 13.0M = 26.0M, cur max(14.0M, 19.5M) = 19.5M, exp 26.0M; 5: exp 52.0M,
    # cur max(20.5M, 35.75M) = 35.75M
    assert [(o["rate"], o["expected"], o["stage"]) for o in out] == [
        (11_000_000, 11_000_000, 1), (12_000_000, 12_000_000, 2), (13_000_000, 13_000_000, 3),
        (19_500_000, 26_000_000, 3), (35_750_000, 52_000_000, 3)]


def test_inputs_that_adjust_nothing():
    """No valid slot, every valid real_val infinite, a non-ACK item: no adjustment, the state reported; an invalid
    slot's values are ignored (here a huge base_val that would make T large)."""
    ev = _create(1, 4 * A, 8 * A)
    last = _ack(1, 90_000, [(2500, 1500), None, None, (0, 0xFFFF_0000)])    # slot 3 invalid: still congested
    last["item"]["valid3"] = 0
    ev += _sp([_ack(1, 10_000, [None, None]), _ack(1, 10_000, [(INF, 100), None]), _ack(1, 10_000, BUSY, kind=1),
               _ack(1, 10_000, [(2500, 1500), (INF, 2000)]),                 # t = 2500 > T = 2000: congested
               last])
    out = _run(P4, ev)
    assert _rates(out) == [(4 * A, 8 * A, 0, 0, 0, 1)] * 3 + [(2 * A, 4 * A, 0, 2, 1, 1), (A, 2 * A, 0, 2, 1, 1)]


def test_unknown_and_removed_flows_counted():
    ev = _create(1, 4 * A, 8 * A) + [_ack(2, 10_000, CALM), _ack(1, 10_000, CALM)]
    ev += [{"ctl": c} for c in aimd_commands(remove=[1], **P4)]
    ev += [_ack(1, 20_000, CALM), {"ctl": {"table": 0, "index": 16, "data": 5}}, _ack(0, 20_000, CALM),
           {"ctl": {"table": 7, "index": 1, "data": 5}}, _ack(1, 20_000, CALM)]
    from lbpipe.engine import golden_run
    out, model = golden_run("laps-aimd", P4, ev)
    zero = (0, 0, 0, 0, 0, 0)
    assert _rates(out) == [zero, (6 * A, 8 * A, 1, 1, 1, 1), zero, zero, zero]
    assert [o["flow"] for o in out] == [2, 1, 1, 0, 1]
    assert model.stats() == [5, 4, 1, 0]        # ACKs, misses, increases, decreases
    # the RTL too: a create of flow 16 of 16 must not create flow 0 (the index cut to 4 bits)
    st = {}
    out = run_rtl("laps-aimd", P4, ev, stats=st)
    assert _rates(out) == [zero, (6 * A, 8 * A, 1, 1, 1, 1), zero, zero, zero]
    assert st["counters"] == [5, 4, 1, 0]


def test_rates_clamped():
    """Creation clamps into [min_rate, line_rate]; halving stops at min_rate; a lowered line rate caps the next
    adjustment; crossed limits: line_rate wins."""
    p = dict(P4, line_rate=8 * A, min_rate=A)
    ev = _create(1, 9 * A, 0, **p) + _sp([_ack(1, 10_000, BUSY), _ack(1, 20_000, BUSY), _ack(1, 30_000, BUSY),
                                          _ack(1, 40_000, BUSY)])
    out = _run(p, ev)
    # created cur 8a (clamped), exp a (clamped); dec: exp 8a, cur 4a; 2a; a; max(a/2, a) = a (changed 0)
    assert _rates(out) == [(4 * A, 8 * A, 0, 2, 1, 1), (2 * A, 4 * A, 0, 2, 1, 1), (A, 2 * A, 0, 2, 1, 1),
                           (A, A, 0, 2, 0, 1)]
    ev = _create(1, 4 * A, 8 * A, **p) + [{"ctl": c} for c in aimd_commands(limits=(5 * A, None), **p)]
    ev += _sp([_ack(1, 10_000, CALM)]) + [{"ctl": {"table": 3, "index": 0, "data": 6 * A}}]
    ev += _sp([_ack(1, 20_000, CALM)])
    out = _run(p, ev)
    # exp clamp(8a) = 5a, cur (5a + 4a)/2 = 4.5a; then min 6a > line 5a: everything becomes 5a
    assert _rates(out) == [(4 * A + A // 2, 5 * A, 1, 1, 1, 1), (5 * A, 5 * A, 2, 1, 1, 1)]


def test_creation_clamps_and_removal_zeros_rtl():
    """A create's rates go through the increase's adder, compare pair and clamp in the RTL (datasheet, Control):
    both rates clamped, line rate winning over crossed limits, a remove leaving zeros (worked by hand; golden and
    RTL)."""
    p = dict(P4, line_rate=8 * A, min_rate=A)
    look = lambda flow, tag: _ack(flow, 0, CALM, tag=tag, kind=0)     # not an ACK: reports the state
    ev = _create(1, 9 * A, 0, **p) + [look(1, 1)]
    ev += [{"ctl": c} for c in aimd_commands(remove=[1], **p)] + [_ack(1, 10_000, CALM, tag=2)]
    ev += [{"ctl": c} for c in aimd_commands(limits=(5 * A, 6 * A), **p)]
    ev += _create(2, A, 9 * A, **p) + _create(1, 7 * A, 2 * A, **p) + [look(2, 3), look(1, 4)]
    ev += [{"ctl": c} for c in aimd_commands(limits=(8 * A, 2 * A), **p)] + _create(3, 3 * A, A // 2, **p)
    ev += [look(3, 5)]
    # flow 1: cur 9a -> 8a, exp 0 -> a; removed: zeros, hit 0; limits crossed (min 6a > line 5a): both rates of
    # flows 2 and 1 become 5a; limits [2a, 8a]: flow 3 keeps 3a and its expected a/2 rises to 2a
    want = [(8 * A, A, 0, 0, 0, 1), (0, 0, 0, 0, 0, 0), (5 * A, 5 * A, 0, 0, 0, 1), (5 * A, 5 * A, 0, 0, 0, 1),
            (3 * A, 2 * A, 0, 0, 0, 1)]
    assert _rates(_run(p, ev)) == want
    assert _rates(_run(p, ev, rtl=True)) == want


def test_windows_across_the_48_bit_wrap():
    """A deadline past 2**48 wraps; the modular test keeps it right. Flow 1: increase at 2**48 - 1000 sets the
    deadline 1000 (after the wrap); 2**48 - 500 is before it (a plain compare would say after), 999 too, 1000 has
    reached it (paper), 1001 is inside the next window. Flow 2: a decrease at 2**48 - 6000 sets 2**48 - 1000
    (window 2 x 2500); now = 10 after the wrap has passed it (a plain compare would say not)."""
    ev = _create(1, A, 2 * A) + _create(2, 8 * A, 8 * A)
    ev += _sp([_ack(1, WRAP - 1000, CALM), _ack(1, WRAP - 500, CALM), _ack(1, 999, CALM), _ack(1, 1000, CALM),
               _ack(1, 1001, CALM), _ack(2, WRAP - 6000, BUSY), _ack(2, 10, BUSY)])
    want = [1, 0, 0, 1, 0, 2, 2]
    assert [o["action"] for o in _run(P4, ev)] == want
    assert [o["action"] for o in _run(P4, ev, rtl=True)] == want


def test_reset_removes_every_flow():
    from lbpipe.blocks import BLOCKS
    model = BLOCKS["laps-aimd"].golden(**P4)
    for e in _create(1, A, A) + [{"ctl": c} for c in aimd_commands(limits=(5, 5), **P4)]:
        model.control(e["ctl"])
    model.process(_ack(1, 10, CALM)["item"])
    model.reset()
    assert model.process(_ack(1, 10, CALM)["item"])["hit"] == 0 and model.stats() == [1, 1, 0, 0]
    assert (model.line, model.min) == (100_000_000, 100_000)


# -- RTL against the golden model on targeted streams -------------------------------------------------------------

def _stream(seed, n, *, mode, p=P4, step=100):
    """ACK streams: ``calm`` / ``busy`` (every vector uncongested / congested), ``burst`` (runs of one flow),
    ``all`` (every flow created, round robin and random), ``b2b`` (windows of 0 or 2 ns: nearly every ACK adjusts,
    so same-flow adjustments meet at every forwarding distance), ``wrap`` (``now`` across 2**48)."""
    rng = random.Random(seed)
    k, nf = p["k"], p["n_flows"]
    flows = list(range(nf)) if mode == "all" else [3, 5, 6]
    ev = [{"ctl": c} for c in aimd_commands([(f, rng.randrange(1, 1 << 27), rng.randrange(1, 1 << 27))
                                              for f in flows], **p)]
    now = WRAP - 20_000 if mode == "wrap" else rng.randrange(1 << 40)
    run, flow = 0, flows[0]
    for n in range(n):
        if mode == "all":
            flow = flows[n % nf] if n < 2 * nf else rng.choice(flows)
        elif mode == "burst":
            if run == 0:
                flow, run = rng.choice(flows), rng.randrange(3, 20)
            run -= 1
        else:
            flow = rng.choice(flows + [9])                 # flow 9 never created: stray ACKs
        now = (now + (rng.choice([0, 1, 2]) if mode == "b2b" else rng.randrange(0, 900))) % WRAP
        busy = {"calm": False, "busy": True}.get(mode, rng.random() < 0.5)
        if mode == "b2b":
            paths = [(1, 0)] if busy else [(0, 5)]          # t = 1 > T = 0: window 2; t = 0: window 0
        else:
            paths = []
            for j in range(k):
                base = 1000 + step * j
                paths.append((rng.randrange(3000, 5000) if busy else rng.randrange(200, 1400), base)
                             if rng.random() < 0.8 else None)
        ev.append(_ack(flow, now, paths, tag=n, k=k))
    return ev


FULL = pytest.mark.regression        # LBPIPE_FULL=1 runs these too


@pytest.mark.parametrize("mode, idle, bp", [("calm", 0, 0), ("busy", 0.2, 0.3), ("burst", 0.3, 0.5),
                                            ("all", 0.1, 0.2), ("b2b", 0, 0),
                                            pytest.param("burst", 0, 0, marks=FULL),
                                            pytest.param("b2b", 0.3, 0.4, marks=FULL),
                                            pytest.param("wrap", 0, 0.3, marks=FULL)])
def test_rtl_streams(mode, idle, bp):
    p = P4          # the sim variant runs in the generic tests (test_params[1])
    ev = _stream(11, 400, mode=mode, p=p)
    gold = run_golden("laps-aimd", p, ev)
    actions = [o["action"] for o in gold]
    assert actions.count(1) + actions.count(2) > 20          # the stream exercises adjustments
    stats = {}
    out = run_rtl("laps-aimd", p, ev, idle=idle, backpressure=bp, seed=5, stats=stats)
    assert out == gold and stats["errors"] == 0
    if not idle and not bp:
        assert stats["items_per_clock"] == 1.0               # one ACK per clock, same flow back to back too


WIDE = [pytest.param(k, v, m, n, marks=[FULL] if full else [])
        for k, v, m, n, full in ((17, "paper", "burst", 250, False), (17, "sim", "burst", 250, False),
                                 (32, "paper", "burst", 250, False), (32, "sim", "burst", 250, False),
                                 (17, "paper", "b2b", 400, True), (32, "sim", "b2b", 400, True),
                                 (32, "paper", "all", 400, True), (17, "sim", "wrap", 400, True))]


@pytest.mark.parametrize("k, variant, mode, n", WIDE)
def test_rtl_streams_wide(k, variant, mode, n):
    """k = 17 and 32 (5 comparator-tree levels: congestion and the deadlines are formed in B6's decision, not a
    register). Regression: the deadline formed there was 49 bits wide, so Cat(next_dec, next_inc) stored next_inc
    shifted by a bit and every increase after the first missed its window. The stream must hold repeated
    increases (stage 3 or more) and decreases of a flow after its first, so both deadlines are exercised."""
    p = dict(P4, k=k, variant=variant)
    ev = _stream(17, n, mode=mode, p=p, step=20)       # base_val 1000 .. 1620: busy vectors congested for any k
    gold = run_golden("laps-aimd", p, ev)
    assert max(o["stage"] for o in gold) >= 3
    decs = [o["flow"] for o in gold if o["action"] == 2]
    assert len(decs) > len(set(decs))
    stats = {}
    assert run_rtl("laps-aimd", p, ev, stats=stats) == gold and stats["errors"] == 0


def _junk_invalid(ev, seed):
    """The stream with random real_val/base_val (infinity and 0 among them) in every invalid slot."""
    rng = random.Random(seed)
    out = []
    for e in ev:
        if "item" in e:
            it = dict(e["item"])
            for j in range(sum(1 for f in it if f.startswith("valid"))):
                if not it[f"valid{j}"]:
                    it[f"real_val{j}"], it[f"base_val{j}"] = (rng.choice([0, 1, INF, rng.randrange(1 << 32)])
                                                              for _ in range(2))
            e = {"item": it}
        out.append(e)
    return out


def test_invalid_slots_ignored_worked_by_hand():
    """Datasheet: "invalid slots are ignored", whatever they carry. Current a, expected 2a; BUSY (t = 2500 > T =
    2000, congested) plus an invalid slot of real_val 100, base_val 9000 (counted, it would make t = 100 <= T =
    9000: an increase, window 200): a decrease (expected a, current a/2). 4,999 ns later the decrease window
    (2 t = 5000 ns, not 200) has not passed: nothing; at 5,000 ns it has: expected a/2, current a/4."""
    junk = (100, 9000)
    ev = _create(1, A, 2 * A)
    ev += _sp([_ack(1, 10_000, BUSY + [None]), _ack(1, 14_999, BUSY + [None]), _ack(1, 15_000, BUSY + [None])])
    for e in ev:
        if "item" in e and e["item"]["tag"] != FILL:
            e["item"]["real_val2"], e["item"]["base_val2"] = junk
    want = [(A // 2, A, 0, 2, 1, 1), (A // 2, A, 0, 0, 0, 1), (A // 4, A // 2, 0, 2, 1, 1)]
    assert _rates(_run(P4, ev)) == want
    assert _rates(_run(P4, ev, rtl=True)) == want


@pytest.mark.parametrize("p, mode", [(P4, "burst"), (S4, "burst"), (dict(P4, k=5), "all"),
                                     pytest.param(dict(S4, k=17), "burst", marks=FULL)])
def test_invalid_slots_carrying_values(p, mode):
    """RTL against the golden model with random real_val/base_val in the invalid slots (each slot invalid with
    probability 0.2), so a compare or tree choice that lost its valid bit is seen."""
    ev = _junk_invalid(_stream(23, 300, mode=mode, p=p, step=20), 29)
    gold = run_golden("laps-aimd", p, ev)
    acts = [o["action"] for o in gold]
    assert acts.count(1) > 10 and acts.count(2) > 10
    assert run_rtl("laps-aimd", p, ev) == gold


def test_b2b_stream_meets_the_hold_off_at_every_distance():
    """The forwarding stream has, for every distance 1 to 8 items, an ACK held by an adjustment of its flow that
    many items before (it must report the rates that adjustment left, forwarded), and adjustments of one flow
    exactly 9 items apart (the first one the hold-off lets through, reading the memory the other just wrote)."""
    ev = _stream(11, 400, mode="b2b")
    items = [e["item"] for e in ev if "item" in e]
    gold = run_golden("laps-aimd", P4, ev)
    held, again = set(), set()
    for i, it in enumerate(items):
        for d in range(1, 10):
            if i >= d and gold[i - d]["action"] and items[i - d]["flow"] == it["flow"]:
                if gold[i]["action"] and d == 9:
                    again.add(d)
                if not gold[i]["action"] and gold[i]["hit"] and d < 9:
                    held.add(d)
                break
    assert held == set(range(1, 9)) and again == {9}


def test_hold_off_worked_by_hand():
    """Windows of 0 ns (real_val 0): every ACK may adjust, but one of the 8 items after an adjustment of its flow
    does not; it reports the adjusted rates. Flow 1 at items 0, 1, 8, 9 (7 ACKs of flow 2 between); flow 2's
    first ACK adjusts, the others are held by it or by each other."""
    zero = [(0, 5)]                        # t = 0 <= T = 5: increase, window 0
    ev = _create(1, A, 2 * A) + _create(2, A, 2 * A)
    ev += [_ack(1, 100, zero), _ack(1, 100, zero)] + [_ack(2, 100, zero) for _ in range(6)]
    ev += [_ack(1, 100, zero), _ack(1, 100, zero)]
    out = run_golden("laps-aimd", P4, ev)
    # item 0: 1.5a; item 1 held (distance 1): 1.5a; items 2..7 flow 2: 1.5a, then held 5 times; item 8 (distance 8
    # from item 0): held; item 9 (distance 9): adjusts, (2a + 1.5a)/2 = 1.75a
    assert [o["action"] for o in out] == [1, 0, 1, 0, 0, 0, 0, 0, 0, 1]
    assert [o["rate"] for o in out] == [3 * A // 2] * 9 + [7 * A // 4]
    assert [o["stage"] for o in out] == [1] * 9 + [2]


def test_hold_off_across_kinds_worked_by_hand():
    """The windows are separate, yet a congested ACK right after an increase of its flow is held (Algorithm 2 would
    decrease at once); the flow's congested ACK 8 items after the increase (distance 9) decreases. Current a,
    expected 2a: increase to 1.5a; held (1.5a reported); decrease: expected 1.5a, current 0.75a."""
    ev = _create(1, A, 2 * A) + [_ack(1, 10_000, CALM), _ack(1, 10_001, BUSY)]
    ev += [_ack(15, 0, CALM, tag=FILL) for _ in range(7)] + [_ack(1, 10_002, BUSY)]
    want = [(3 * A // 2, 2 * A, 1, 1, 1, 1), (3 * A // 2, 2 * A, 1, 0, 0, 1), (3 * A // 4, 3 * A // 2, 0, 2, 1, 1)]
    assert _rates(_run(P4, ev)) == want
    assert _rates(_run(P4, ev, rtl=True)) == want


@pytest.mark.parametrize("testcase", ["harness_catches_a_wrong_output", "harness_catches_a_wrong_cycle"])
def test_harness_can_fail(testcase):
    from lbpipe.sim.laps.aimd import aimd_trace
    run_rtl("laps-aimd", P4, aimd_trace(3, 120, **P4), testcase=testcase)


# -- closed loop --------------------------------------------------------------------------------------------------

CAPACITY = 40_000_000        # the loop's four paths: 16 + 12 + 8 + 4 Gb/s


@pytest.mark.parametrize("variant", ["paper", "sim"])
def test_closed_loop_settles_around_the_capacity(variant):
    """After 5 ms the rate stays within [0.45 C, 2.05 C] (never at the 0.1 Gb/s floor or the 100 Gb/s line rate)
    and averages within 10% of C; it both decreases and increases repeatedly."""
    trace = run_loop(variant=variant, n_acks=20_000)
    late = [r for _, r, *_ in trace[5000:]]
    assert 0.45 * CAPACITY <= min(late) and max(late) <= 2.05 * CAPACITY
    assert abs(sum(late) / len(late) - CAPACITY) <= 0.1 * CAPACITY
    acts = [a for *_, a, _ in trace[5000:]]
    assert acts.count(2) >= 50 and acts.count(1) >= 200
