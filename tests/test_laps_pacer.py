"""LAPS pacer: signature and parameters, the golden model against hand-worked cases, the RTL on a hand-worked trace
(back-to-back requests of one flow, the 48-bit wrap, stray requests and rate updates, rate changes, a frame larger
than its bucket, removal) with and without idle cycles and back-pressure, and pacing accuracy in RTL: a scheduler
asking every clock (and with gaps) for one flow and for several, with a controlled ``now``, sends within 1% of the
configured rate over a long run, and no window carries more than the bucket plus what the rate earns in it.

Expected values are worked by hand from the datasheet's rule (docs/laps_pacer.md): a byte is 8,000,000 microbits,
a rate of r kbit/s earns r microbits per ns, tokens count 512-microbit units (15,625 per byte), a refill is
floor(r x elapsed / 512). The accuracy checks use the configured rate only, never the model."""

import os

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.laps.pacer import Pacer, PacerItem, PacerRate, PacerResult
from lbpipe.sim.laps.pacer import pacer_commands

FULL = os.environ.get("LBPIPE_FULL") == "1"
W = 1 << 48
P16 = dict(n_flows=16)
MIN_RATE, LINE_RATE = 100_000, 100_000_000       # kbit/s: 100 Mb/s and 100 Gb/s


# -- signature and parameters -------------------------------------------------------------------------------------

def test_signature():
    dut = Pacer(n_flows=16)
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "rate", "o", "ctl", "stats"}
    item = dut.signature.members["i"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("flow", 4), ("bytes", 14), ("now", 48), ("tag", 16)]
    rate = dut.signature.members["rate"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in rate] == [("flow", 4), ("rate", 32)]
    res = dut.signature.members["o"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in res] == [("kind", 3), ("flow", 4), ("bytes", 14), ("allow", 1),
                                              ("eligible", 1), ("known", 1), ("tag", 16)]
    assert dut.signature.members["stats"].shape == 160
    assert dut.latency == 11
    assert item == PacerItem(n_flows=16) and rate == PacerRate(n_flows=16) and res == PacerResult(n_flows=16)
    big = Pacer(n_flows=65536)
    big._MustUse__silence = True
    assert dict((n, f.width) for n, f in big.signature.members["i"].signature.members["payload"].shape)["flow"] == 16


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_flows=1), ValueError), (dict(n_flows=3), ValueError), (dict(n_flows=1 << 17), ValueError),
    (dict(n_flows="16"), TypeError), (dict(n_flows=True), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        Pacer(**kwargs)


def test_commands_written_by_hand():
    """Table 0, index = flow: data = rate | bucket << 32 | exists << 48."""
    assert pacer_commands([{"flow": 3, "rate": 100_000_000, "bucket": 1500}], **P16) == [
        {"table": 0, "index": 3, "data": 0x0001_05DC_05F5_E100}]
    assert pacer_commands([{"flow": 3, "rate": 7, "bucket": 9, "exists": 0}], **P16) == [
        {"table": 0, "index": 3, "data": 7 | 9 << 32}]
    with pytest.raises(ValueError):
        pacer_commands([{"flow": 16, "rate": 1, "bucket": 1}], **P16)
    with pytest.raises(ValueError):
        pacer_commands([{"flow": 1, "rate": 1, "bucket": 1 << 16}], **P16)


# -- a hand-worked trace --------------------------------------------------------------------------------------------

def _req(flow, size, now, tag=0):
    return {"item": {"kind": 1, "flow": flow, "bytes": size, "now": now % W, "tag": tag}}


def _rate(flow, rate):
    return {"rate": {"flow": flow, "rate": rate}}


def _hand_trace():
    """Flow 3 at 100 Gb/s with a 128-byte bucket, 64-byte frames: 2,000,000 units of bucket, 1,000,000 a frame,
    390,625 units every 2 ns (1e8 x 2 / 512). Returns (events, [(allow, eligible, known)], stats)."""
    ev = [{"ctl": c} for c in pacer_commands([{"flow": 3, "rate": LINE_RATE, "bucket": 128}], **P16)]
    ev.append({"ctl": {"table": 1, "index": 3, "data": 0}})       # no table 1: ignored (as table 0: removal)
    ev.append({"ctl": {"table": 0, "index": 16 + 5, "data": LINE_RATE | 128 << 32 | 1 << 48}})   # flow 21 of 16
    want = []

    def ask(flow, size, now, result, *, rate=None):
        if rate is not None:
            ev.append(_rate(*rate))
        ev.append(_req(flow, size, now, tag=len(want)))
        want.append(result)
    ask(3, 64, W - 8, (1, 1, 1))        # created full: 2,000,000 -> 1,000,000 left, covers another frame
    ask(3, 64, W - 8, (1, 0, 1))        # same ns, back to back: 1,000,000 -> 0
    ask(3, 64, W - 6, (0, 0, 1))        # +390,625 = 390,625
    ask(3, 64, W - 4, (0, 0, 1))        # 781,250
    ask(3, 64, W - 2, (1, 0, 1))        # 1,171,875 -> 171,875
    ask(3, 64, 0, (0, 0, 1))            # across the wrap, 2 ns: 562,500
    ask(3, 64, 10, (1, 1, 1))           # +1,953,125 = 2,515,625, capped at 2,000,000 -> 1,000,000
    ask(5, 64, 11, (0, 0, 0))           # flow 5 was never created: stray
    ask(3, 64, 1000, (1, 0, 1), rate=(3, 0))            # rate 0 from now on (applies before): 1,000,000 -> 0
    ask(3, 64, 2000, (0, 0, 1), rate=(5, 7))            # nothing earned at rate 0; stray rate update of flow 5
    ask(3, 64, 7120, (1, 0, 1), rate=(3, MIN_RATE))     # 100 Mb/s over 5,120 ns: 1e5 x 5120 / 512 = 1,000,000
    ask(3, 64, 7121, (0, 0, 1))         # floor(1e5 / 512) = 195
    ask(3, 200, 10 ** 9, (0, 0, 1))     # 3,125,000 > the bucket: never; the bucket is full again (2,000,000)
    ask(3, 64, 10 ** 9, (1, 1, 1))      # 2,000,000 -> 1,000,000
    ask(3, 0, 10 ** 9, (1, 1, 1))       # a 0-byte frame costs nothing
    ev.append({"ctl": pacer_commands([{"flow": 3, "rate": LINE_RATE, "bucket": 128, "exists": 0}], **P16)[0]})
    ask(3, 64, 10 ** 9 + 100, (0, 0, 0))                # removed: stray
    ask(3, 64, 10 ** 9 + 101, (0, 0, 0), rate=(3, 1))   # and its rate update too
    # requests, allowed, stray requests, rate updates, stray rate updates
    return ev, want, [17, 8, 3, 4, 2]


def _triples(outs):
    return [(o["allow"], o["eligible"], o["known"]) for o in outs]


def test_golden_hand_trace():
    from lbpipe.engine import golden_run
    ev, want, stats = _hand_trace()
    outs, model = golden_run("laps-pacer", P16, ev)
    assert _triples(outs) == want
    assert [o["tag"] for o in outs] == list(range(len(want)))
    assert model.stats() == stats


def test_golden_elapsed_saturates_at_2_24_ns():
    """A flow at 1 kbit/s idle for 2**30 ns earns only 2**24 - 1 ns of refill: floor(16,777,215 / 512) = 32,767
    units. Drained first with a 9,216-byte frame from a 9,216-byte bucket (144,000,000 units)."""
    ev = [{"ctl": c} for c in pacer_commands([{"flow": 1, "rate": 1, "bucket": 9216}], **P16)]
    ev += [_req(1, 9216, 0), _req(1, 0, 1 << 30)]
    from lbpipe.engine import golden_run
    outs, model = golden_run("laps-pacer", P16, ev)
    assert _triples(outs) == [(1, 0, 1), (1, 1, 1)]     # a 0-byte frame is always covered
    assert model.tokens[1] == 32_767


def test_golden_rate_saturates_and_full_bucket_bounds_the_refill():
    """Rates above 2**27 - 1 kbit/s count as 2**27 - 1: over 1 ns that earns floor(134,217,727 / 512) = 262,143
    units. A refill never takes the bucket above its depth."""
    ev = [{"ctl": c} for c in pacer_commands([{"flow": 0, "rate": 0xFFFF_FFFF, "bucket": 64}], **P16)]
    ev += [_req(0, 64, 50), _req(0, 0, 51)]
    from lbpipe.engine import golden_run
    _, model = golden_run("laps-pacer", P16, ev)
    assert model.tokens[0] == 262_143
    _, model = golden_run("laps-pacer", P16, ev[:-1] + [_req(0, 0, 10 ** 6)])
    assert model.tokens[0] == 64 * 15_625


def test_bucket_zero_passes_only_empty_frames():
    """A 0-byte bucket (depth 0 units): a 1-byte frame (15,625 units) never fits, not even after 1 ms at 100 Gb/s
    (the refill is capped at the depth, 0); a 0-byte frame always does. Golden model and RTL."""
    ev = [{"ctl": c} for c in pacer_commands([{"flow": 2, "rate": LINE_RATE, "bucket": 0}], **P16)]
    ev += [_req(2, 1, 0, tag=0), _req(2, 1, 10 ** 6, tag=1), _req(2, 0, 10 ** 6 + 1, tag=2)]
    want = [(0, 0, 1), (0, 0, 1), (1, 1, 1)]
    assert _triples(run_golden("laps-pacer", P16, ev)) == want
    assert _triples(run_rtl("laps-pacer", P16, ev, compare=False)) == want


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_hand_trace(idle, backpressure):
    ev, want, stats = _hand_trace()
    st = {}
    outs = run_rtl("laps-pacer", P16, ev, idle=idle, backpressure=backpressure, seed=5, stats=st)
    assert _triples(outs) == want
    assert st["counters"] == stats and st["errors"] == 0


def test_rtl_reset_clears_counters_and_pipeline():
    ev, _, _ = _hand_trace()
    run_rtl("laps-pacer", P16, ev * 3, testcase="reset_clears_counters_and_pipeline")


# -- pacing accuracy ------------------------------------------------------------------------------------------------

def _schedule(flows, n_clocks, *, ns_per_clock, start, size, gaps=0.0, seed=1):
    """A scheduler that asks every clock (round robin over ``flows``: (flow, rate kbit/s, bucket bytes), frames of
    ``size`` bytes or ``size[flow]``); with
    ``gaps`` a clock is skipped with that probability (``now`` still advances). ``now`` = start + clock x
    ns_per_clock, modulo 2**48. Returns the events and, per request, (flow, unwrapped now, bytes)."""
    import random
    rng = random.Random(seed)
    ev = [{"ctl": c} for c in pacer_commands([{"flow": f, "rate": r, "bucket": b} for f, r, b in flows], **P16)]
    asked, turn = [], 0
    for clock in range(n_clocks):
        if gaps and rng.random() < gaps:
            continue
        flow = flows[turn % len(flows)][0]
        turn += 1
        t = start + clock * ns_per_clock
        b = size[flow] if isinstance(size, dict) else size
        ev.append(_req(flow, b, t, tag=len(asked) & 0xFFFF))
        asked.append((flow, t, b))
    return ev, asked


def check_rate(sends, rate, *, tolerance=0.01, min_packets=250):
    """``sends``: [(unwrapped ns, allowed, bytes)] of one flow, every request in order. From the first refusal
    (the initial full bucket spent) to the last request, the bytes sent must be within ``tolerance`` of
    rate x time (kbit/s x ns = microbits; 8,000,000 microbits a byte). Returns the measured/configured ratio."""
    first = next(i for i, (_, ok, _) in enumerate(sends) if not ok)
    t0, t1 = sends[first][0], sends[-1][0]
    sent = [b for t, ok, b in sends[first:] if ok]
    assert len(sent) >= min_packets, f"only {len(sent)} packets in the window: run longer"
    ratio = sum(sent) * 8_000_000 / (rate * (t1 - t0))
    print(f"pacing: {rate} kbit/s, {len(sent)} frames over {t1 - t0} ns: {ratio:.5f} x the configured rate")
    assert abs(ratio - 1) <= tolerance, f"sent at {ratio:.5f} x the configured rate {rate} kbit/s"
    return ratio


def check_burst(sends, rate, bucket):
    """No window [t_i, t_j] carries more than bucket + rate x (t_j - t_i): in microbits, for every j,
    cum_j x 8e6 - rate t_j - min over i <= j of (cum_(i-1) x 8e6 - rate t_i) <= bucket x 8e6 (one pass). For a
    window shorter than a frame's time this is at most the bucket plus one frame."""
    low, cum, worst = None, 0, None
    for t, ok, b in sends:
        if not ok:
            continue
        h = cum * 8_000_000 - rate * t
        low = h if low is None else min(low, h)
        cum += b
        g = cum * 8_000_000 - rate * t
        excess = g - low - bucket * 8_000_000
        worst = excess if worst is None else max(worst, excess)
        assert excess <= 0, f"a window ending at {t} ns carries {excess / 8e6:.1f} bytes more than the bound"
    return worst


def test_checkers_catch_planted_errors():
    """Each checker fails on a log it must refuse: 2% too fast; one frame more than the bucket at once."""
    rate = 10_000_000                     # 1.25 bytes/ns: a 125-byte frame every 100 ns
    paced = [(0, 1, 125), (50, 0, 125)] + [(100 * k, 1, 125) for k in range(1, 400)]
    assert abs(check_rate(paced, rate) - 1) < 0.01
    fast = [(0, 1, 125), (50, 0, 125)] + [(98 * k, 1, 125) for k in range(1, 400)]
    with pytest.raises(AssertionError, match="configured rate"):
        check_rate(fast, rate)
    check_burst([(0, 1, 125), (0, 1, 125), (200, 1, 125), (300, 1, 125)], rate, 250)
    with pytest.raises(AssertionError, match="more than the bound"):
        check_burst([(0, 1, 125), (0, 1, 125), (0, 1, 125)], rate, 250)


def _measure(flows, outs, asked):
    by_flow = {f: [] for f, _, _ in flows}
    for (flow, t, size), out in zip(asked, outs):
        assert out["flow"] == flow and out["known"] == 1
        by_flow[flow].append((t, out["allow"], size))
    ratios = {}
    for f, rate, bucket in flows:
        ratios[f] = check_rate(by_flow[f], rate)
        check_burst(by_flow[f], rate, bucket)
    return ratios


# (rate kbit/s, frame bytes, ns per clock): the scheduler's clock is chosen so ~10 clocks carry one frame, and a
# run of a few thousand clocks carries several hundred frames; the default profile takes three rates, the full one
# the sweep from the minimum to line rate.
SWEEP = [(MIN_RATE, 64, 512), (1_000_000, 1500, 1200), (10_000_000, 64, 4), (25_000_000, 9216, 300),
         (40_000_000, 1024, 20), (73_000_000, 333, 4), (LINE_RATE, 64, 4), (LINE_RATE, 1500, 8)]
DEFAULT = [SWEEP[0], SWEEP[2], SWEEP[6]]


@pytest.mark.parametrize("rate, size, step", SWEEP if FULL else DEFAULT, ids=lambda v: str(v))
def test_rtl_pacing_one_flow_every_clock(rate, size, step):
    """One flow, a request every clock, across the 48-bit wrap."""
    flows = [(7, rate, 2 * size)]
    ev, asked = _schedule(flows, 4000, ns_per_clock=step, start=W - 1000 * step, size=size)
    outs = run_rtl("laps-pacer", P16, ev, compare=False)     # judged by the configured rate alone
    _measure(flows, outs, asked)


def test_rtl_pacing_with_gaps_idle_and_backpressure():
    """One flow at 10 Gb/s, a third of the clocks without a request, idle input and back-pressure in the RTL."""
    flows = [(2, 10_000_000, 1500)]
    ev, asked = _schedule(flows, 6000, ns_per_clock=4, start=123, size=64, gaps=0.33, seed=3)
    outs = run_rtl("laps-pacer", P16, ev, idle=0.2, backpressure=0.3, seed=4, compare=False)
    _measure(flows, outs, asked)


# Several flows at once, round robin, one request a clock: (flows, frame bytes per flow, ns per clock, clocks).
# Each flow's offered load (frame / (4 x ns per clock)) exceeds its rate, so each stays backlogged, and each bucket
# holds a frame plus what the rate earns between two requests of the flow (else a full bucket drops tokens).
SEVERAL = [
    ([(0, LINE_RATE, 18432), (5, 40_000_000, 8192), (9, 10_000_000, 2048), (15, 1_000_000, 9216)],
     {0: 9216, 5: 4096, 9: 1024, 15: 128}, 64, 5000),
    ([(1, 1_000_000, 1500), (2, 500_000, 1500), (3, 250_000, 1500), (4, MIN_RATE, 1500)],
     {1: 512, 2: 256, 3: 128, 4: 64}, 256, 24000),
]


@pytest.mark.parametrize("case, gaps", [(0, 0.0), (0, 0.2), (1, 0.1)] if FULL else [(0, 0.2)])
def test_rtl_pacing_several_flows(case, gaps):
    """Four flows at once (100, 40, 10 and 1 Gb/s; in the full profile also 1 Gb/s down to the minimum)."""
    flows, sizes, step, clocks = SEVERAL[case]
    ev, asked = _schedule(flows, clocks, ns_per_clock=step, start=W - 50_000, size=sizes, gaps=gaps, seed=8)
    outs = run_rtl("laps-pacer", P16, ev, compare=False)     # judged by the configured rate alone
    _measure(flows, outs, asked)


def test_sustained_one_decision_and_one_rate_update_per_clock():
    """Every clock a request and a rate update of the same flow (the worst read-after-write case): the RTL takes
    one of each per clock (the harness checks every output cycle against the latency)."""
    ev = [{"ctl": c} for c in pacer_commands([{"flow": 4, "rate": LINE_RATE, "bucket": 1500}], **P16)]
    for k in range(2000):
        ev += [_rate(4, LINE_RATE - (k % 3)), _req(4, 64, 1000 + 4 * k, tag=k)]
    st = {}
    outs = run_rtl("laps-pacer", P16, ev, stats=st)
    assert outs == run_golden("laps-pacer", P16, ev)
    assert st["errors"] == 0 and st["items_per_clock"] == 1.0


def _bucket_rederived(flows, requests):
    """The datasheet's rule, written again for one test: ``flows`` {flow: (rate kbit/s, bucket bytes)}, requests
    (flow, bytes, now) in order -> [(allow, eligible, known)]."""
    state, out = {}, []
    for flow, size, now in requests:
        if flow not in flows:
            out.append((0, 0, 0))
            continue
        rate, bucket = flows[flow]
        depth, cost = bucket * 15_625, size * 15_625
        tokens, last = state.get(flow, (depth, now))
        elapsed = min((now - last) % W, (1 << 24) - 1)
        level = min(tokens + min(rate, (1 << 27) - 1) * elapsed // 512, depth)
        allow = level >= cost
        level -= cost if allow else 0
        state[flow] = (level, now)
        out.append((int(allow), int(level >= cost), 1))
    return out


def test_rtl_forwarding_at_every_distance():
    """Requests of one flow 1, 2, 3, 4, 5 and 6 clocks apart (other flows, known and unknown, in between), 8 ns a
    clock: each one's ``last`` and tokens come from a different place (the request just ahead in the loop, the
    registers r3/r4 for ``last`` and r10, r11, h12 for the tokens, or memory), so a wrong forwarding distance changes
    the refill and with it the decisions. At 10 Gb/s an 8-ns step earns 156,250 units, 6 steps 937,500: never a
    full 128-byte bucket (2,000,000) from empty, so no cap hides a wrong count; a 64-byte frame costs 1,000,000.
    Expected values from the rule re-derived above, not from the golden model."""
    flows = {1: (10_000_000, 128), 2: (LINE_RATE, 9216)}
    gaps = [1, 2, 3, 4, 5, 6, 2, 1, 3, 1, 4, 2, 5, 1, 1, 3, 2, 6, 4, 4, 1, 2]
    order = [1]
    for g in gaps:
        order += [2 if j % 2 else 7 for j in range(g - 1)] + [1]     # flow 7 never exists: a stray in between
    requests = [(f, 64, 8 * n) for n, f in enumerate(order)]
    want = _bucket_rederived(flows, requests)
    assert {a for (f, _, _), (a, _, _) in zip(requests, want) if f == 1} == {0, 1}
    ev = [{"ctl": c} for c in pacer_commands([{"flow": f, "rate": r, "bucket": b} for f, (r, b) in flows.items()],
                                             **P16)]
    ev += [_req(f, size, now, tag=n) for n, (f, size, now) in enumerate(requests)]
    assert _triples(run_rtl("laps-pacer", P16, ev, compare=False)) == want
    assert _triples(run_rtl("laps-pacer", P16, ev, idle=0.3, backpressure=0.4, seed=3, compare=False)) == want
