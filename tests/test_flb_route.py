"""FLB per-packet path decision (flb-route): signature and parameters, a hand-worked sequence of Algorithm 1 (new
flow, strict window, back-to-back packets of one flow at distances 1 to 3, isolation, every path isolated, timeout,
time wraparound, out-of-range items and commands) on the golden model and on the RTL, the window's ``margin``
worked by hand at 0, 1 and 2 ticks (the boundary difference gap - 1, short gaps, an isolated path), the RTL against an
independent re-derivation of Algorithm 1 written here (with idle input and back-pressure), control commands racing
back-to-back lookups, one packet per clock measured, the multi-bank build (16,384 flows: 8 stamp banks, 2 path
banks) on flows that share their low address bits, and the builds beyond 8 paths (the choice over S5 and S5b,
latency 8) on back-to-back packets of one flow at distances 1 to 4 behind a path change, with their logic levels
(synthesis profile).

Expected values come from the hand-worked comments or from :func:`algorithm1` below, written from the paper's
Algorithm 1 and the datasheet's choices, never from lbpipe.sim.flb."""

import os
import random

import pytest
from amaranth import Shape

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.flb.route import Route as RouteRTL
from lbpipe.sim.flb.route import Route, route_trace

FULL = os.environ.get("LBPIPE_FULL") == "1"

# The datasheet's control tables, written again here.
DELAY, ISOLATE = 0, 1

P = dict(n_flows=16, n_dests=3, n_paths=4, time_bits=8, delay_bits=6, timeout=40)


def _pkt(flow, dest, now, tag=0):
    return {"item": {"kind": 1, "flow": flow, "dest": dest, "now": now, "tag": tag}}


def _delay(dest, path, value):
    return {"ctl": {"table": DELAY, "index": dest << 4 | path, "data": value}}


def _iso(dest, mask):
    return {"ctl": {"table": ISOLATE, "index": dest, "data": mask}}


# -- the independent re-derivation -------------------------------------------------------------------------------------

def algorithm1(events, *, n_flows, n_dests, n_paths, time_bits, delay_bits, timeout, margin=0, upd=False):
    """Algorithm 1 per packet, from the paper: paths ranked by (delay, index); a new or expired flow takes the first
    ranked path not isolated; an existing flow walks the ranking from the fastest and takes the first path whose
    delay is below its own by less than the gap less ``margin`` (the datasheet's narrowed window; 0: the paper's)
    (an isolated current path: the first ranked path whose delay is below its own by less than the gap less
    ``margin``, or above it, else the new-flow choice). Every path isolated: isolation ignored. Out-of-range
    items: (path 0, not new, not rerouted, not ok). ``upd`` events (the datasheet's rule: a packet taken in the
    same clock as an update or later sees it; the trace puts an update offered with a packet before it, so trace
    order) write a delay or a mask; out of range: nothing. Returns ``[(path, new, rerouted, ok)]``."""
    delays = {}
    iso = {}
    last = {}
    out = []
    for e in events:
        if "ctl" in e:
            t, idx, v = e["ctl"]["table"], e["ctl"]["index"], e["ctl"]["data"]
            if t == DELAY and idx // 16 < n_dests and idx % 16 < n_paths and v < 2 ** delay_bits:
                delays[idx // 16, idx % 16] = v
            if t == ISOLATE and idx < n_dests and v < 2 ** n_paths:
                iso[idx] = v
            continue
        if "upd" in e:
            u = e["upd"]
            if u.get("dest", 0) < n_dests:
                if u.get("isolate", 0):
                    iso[u["dest"]] = u.get("mask", 0)
                elif u.get("path", 0) < n_paths:
                    delays[u["dest"], u.get("path", 0)] = u.get("delay", 0)
            continue
        it = e["item"]
        f, d, now = it["flow"], it["dest"], it["now"]
        if f >= n_flows or d >= n_dests:
            out.append((0, 0, 0, 0))
            continue
        delay = [delays.get((d, p), 0) for p in range(n_paths)]
        ranking = sorted(range(n_paths), key=lambda p: (delay[p], p))
        allowed = [p for p in ranking if not iso.get(d, 0) & (1 << p)] or ranking
        if f in last and (now - last[f][0]) % 2 ** time_bits < timeout:
            gap = (now - last[f][0]) % 2 ** time_bits
            cur = last[f][1]
            if cur not in allowed:
                path = next((q for q in allowed if delay[q] > delay[cur] or delay[q] + gap - margin > delay[cur]),
                            allowed[0])
            else:
                path = next((q for q in allowed if delay[cur] - gap + margin < delay[q] < delay[cur]), cur)
            res = (path, 0, int(path != cur), 1)
        else:
            path = allowed[0]
            res = (path, 1, 0, 1)
        last[f] = (now, path)
        out.append(res)
    return out


def _fields(outputs):
    return [(o["path"], o["new"], o["rerouted"], o["ok"]) for o in outputs]


# -- the hand-worked sequence ------------------------------------------------------------------------------------------

def hand_worked():
    """Events and expected (path, new, rerouted, ok), worked by hand (P: 4 paths, timeout 40, 8-bit ticks).
    Destination 1's delays [10, 5, 1, 20]."""
    ev = [_delay(1, 0, 10), _delay(1, 1, 5), _delay(1, 2, 1), _delay(1, 3, 20)]
    want = []
    ev += [_pkt(3, 1, 0, 0)]; want += [(2, 1, 0, 1)]            # A new: fastest is path 2 (1)
    ev += [_delay(1, 2, 30)]                                    # delays [10, 5, 30, 20]
    # B gap 20 on path 2 (30): path 0 differs by exactly 20 (not < 20), path 1 by 25, path 3 by 10 -> path 3
    ev += [_pkt(3, 1, 20, 1)]; want += [(3, 0, 1, 1)]
    ev += [_pkt(3, 1, 20, 2)]; want += [(3, 0, 0, 1)]           # C back to back, gap 0: stays on B's path 3
    ev += [_pkt(3, 1, 31, 3)]; want += [(0, 0, 1, 1)]           # D gap 11 on 3 (20): path 0 by 10 ok, 1 by 15 no
    ev += [_pkt(5, 1, 31, 4)]; want += [(1, 1, 0, 1)]           # E another flow, new: path 1 (5)
    # F gap 9 on D's path 0 (10), E between: path 1 by 5 -> 1 (from the stale path 3 it would stay on 3)
    ev += [_pkt(3, 1, 40, 5)]; want += [(1, 0, 1, 1)]
    ev += [_pkt(5, 1, 40, 6)]; want += [(1, 0, 0, 1)]           # H: E's flow on the fastest path stays
    ev += [_pkt(6, 2, 40, 7)]; want += [(0, 1, 0, 1)]           # I: destination 2, all delays 0: path 0
    ev += [_pkt(3, 1, 40, 8)]; want += [(1, 0, 0, 1)]           # G: F's flow three packets later stays on 1
    ev += [_iso(1, 0b0010)]                                     # path 1 isolated
    ev += [_pkt(3, 1, 41, 9)]; want += [(0, 0, 1, 1)]           # J: on an isolated path: fastest eligible, 0
    ev += [_pkt(7, 1, 41, 10)]; want += [(0, 1, 0, 1)]          # K new: fastest non-isolated, 0 (10)
    ev += [_iso(1, 0b1111)]                                     # every path isolated: isolation ignored
    ev += [_pkt(8, 1, 41, 11)]; want += [(1, 1, 0, 1)]          # L new: path 1 (5)
    ev += [_pkt(3, 1, 45, 12)]; want += [(0, 0, 0, 1)]          # M gap 4 on 0 (10): path 1 by 5, not < 4: stays
    ev += [_pkt(3, 1, 85, 13)]; want += [(1, 1, 0, 1)]          # N gap 40 = timeout: new, path 1
    ev += [_iso(1, 0)]
    ev += [_pkt(9, 1, 250, 14)]; want += [(1, 1, 0, 1)]         # O new at tick 250: path 1
    ev += [_delay(1, 1, 40)]                                    # delays [10, 40, 30, 20]
    # P at tick 8: gap (8 - 250) mod 256 = 14 on path 1 (40): path 2 by 10 ok, 3 by 20 no -> 2
    ev += [_pkt(9, 1, 8, 15)]; want += [(2, 0, 1, 1)]
    # Q: P's flow toward destination 3 of 3: passes with ok 0 and changes nothing (U below, the same flow four
    # packets later, must still find P's path 2 in the path table)
    ev += [_pkt(9, 3, 8, 16)]; want += [(0, 0, 0, 0)]
    # out of range: path 4 of 4 (a 2-bit path field would alias it to path 0), delay 64 > 6 bits (would truncate
    # to 0 on path 2), mask 0b10001 > 4 bits (would isolate path 0), destination 3, unknown tables 3 and 2 (a
    # decoder looking at the table's low bit only would isolate destination 1's path 0, or make its path 3 take
    # 1 tick: R would then take path 3)
    ev += [_delay(1, 4, 50), _delay(1, 2, 64), _iso(1, 0b10001), _iso(3, 1), _delay(3, 0, 1),
           {"ctl": {"table": 3, "index": 1, "data": 0b0001}}, {"ctl": {"table": 2, "index": 1 << 4 | 3, "data": 1}}]
    ev += [_pkt(10, 1, 8, 17)]; want += [(0, 1, 0, 1)]          # R new: path 0 (10) still the fastest
    ev += [_pkt(3, 1, 9, 18)]; want += [(0, 1, 0, 1)]           # S: N's flow, gap (9 - 85) mod 256 = 180: new
    ev += [_pkt(11, 2, 9, 19)]; want += [(0, 1, 0, 1)]          # T: destination 2, new: path 0
    # U, V, W back to back, one flow (delays [10, 40, 30, 20]): U gap 1 after P on path 2: nothing within 1, stays;
    # V gap 15: path 3 by 10 < 15 (path 0 by 20 not): reroutes to 3; W gap 0: stays on V's path 3 (U's path 2, one
    # stage further down the pipeline, is older)
    ev += [_pkt(9, 1, 9, 20)]; want += [(2, 0, 0, 1)]
    ev += [_pkt(9, 1, 24, 21)]; want += [(3, 0, 1, 1)]
    ev += [_pkt(9, 1, 24, 22)]; want += [(3, 0, 0, 1)]
    # off an isolated path: destination 2's delays [30, 40, 25, 40]: X new on path 2 (25)
    ev += [_delay(2, 0, 30), _delay(2, 1, 40), _delay(2, 2, 25), _delay(2, 3, 40)]
    ev += [_pkt(12, 2, 30, 23)]; want += [(2, 1, 0, 1)]
    ev += [_delay(2, 1, 1), _iso(2, 0b0100)]                   # delays [30, 1, 25, 40], path 2 isolated
    # Y gap 0: path 1 (1) would overtake X (25 - 1 = 24 >= 0); the fastest path with 25 - delay < 0 is 0 (30)
    ev += [_pkt(12, 2, 30, 24)]; want += [(0, 0, 1, 1)]
    ev += [_iso(2, 0b1001)]                                     # paths 0 and 3 isolated: eligible 1 (1), 2 (25)
    # Z gap 0 on path 0 (30): no eligible path is safe (30 - 1, 30 - 25 >= 0): the fastest eligible, 1
    ev += [_pkt(12, 2, 30, 25)]; want += [(1, 0, 1, 1)]
    return ev, want


def test_hand_worked_on_the_rederivation_and_the_golden_model():
    ev, want = hand_worked()
    assert algorithm1(ev, **P) == want
    assert _fields(run_golden("flb-route", P, ev)) == want


def test_rtl_hand_worked():
    """The hand-worked sequence through the RTL back to back (``compare=False``: no golden model)."""
    ev, want = hand_worked()
    stats = {}
    out = run_rtl("flb-route", P, ev, compare=False, stats=stats)
    assert _fields(out) == want
    assert [o["tag"] for o in out] == list(range(len(want)))
    assert out[16]["dest"] == 3 and out[16]["flow"] == 9 and out[15]["now"] == 8 and out[15]["flow"] == 9


# -- the window's margin -----------------------------------------------------------------------------------------------

def margin_hand_worked(margin):
    """Events and expected (path, new, rerouted, ok) for ``margin`` 0, 1 or 2, worked by hand from the datasheet's
    rule: a move needs ``delay(p) - delay(q) <= gap - 1 - margin`` (off an isolated path, also any slower ``q``).
    P: 4 paths, timeout 40. Each case has a flow of its own, made new on path 2 first."""
    ev = [_delay(1, p, v) for p, v in enumerate([10, 5, 1, 20])]
    ev += [_delay(2, p, v) for p, v in enumerate([8, 20, 3, 12])]
    want = []
    # flows 1 to 6 to destination 1, 7 and 8 to destination 2, all new at tick 0: the fastest is path 2 (1, 3)
    ev += [_pkt(f, 1 if f <= 6 else 2, 0, f) for f in range(1, 9)]; want += [(2, 1, 0, 1)] * 8
    # destination 1: [10, 5, 30, 20], differences from path 2: path 0 by 20, path 1 by 25, path 3 by 10
    # destination 2: [8, 21, 20, 12], path 2 isolated: from path 2, path 0 by 12, path 1 by -1, path 3 by 8
    ev += [_delay(1, 2, 30), _delay(2, 2, 20), _delay(2, 1, 21), _iso(2, 0b0100)]
    stay, to3, to0 = (2, 0, 0, 1), (3, 0, 1, 1), (0, 0, 1, 1)
    # flow 5 again at tick 0, gap 0: no difference is <= -1 - margin: stays whatever the margin
    ev += [_pkt(5, 1, 0, 9)]; want += [stay]
    # flow 8 again at tick 0 (gap 0) off isolated path 2: only path 1, slower by 1, cannot overtake: path 1
    ev += [_pkt(8, 2, 0, 10)]; want += [(1, 0, 1, 1)]
    # flow 6 at tick 1, gap 1: bound -m: stays
    ev += [_pkt(6, 1, 1, 11)]; want += [stay]
    # flow 1 at tick 11, gap 11: path 3 by exactly gap - 1 = 10: moves with margin 0 only
    ev += [_pkt(1, 1, 11, 12)]; want += [(to3, stay, stay)[margin]]
    # flow 4 at tick 12, gap 12: path 3 by 10 = gap - 2: moves with margin 0 and 1, stays with 2
    ev += [_pkt(4, 1, 12, 13)]; want += [(to3, to3, stay)[margin]]
    # flow 3 at tick 13, gap 13: path 3 by 10 = gap - 3: moves whatever the margin
    ev += [_pkt(3, 1, 13, 14)]; want += [to3]
    # flow 7 at tick 13 off isolated path 2, gap 13: path 0 by 12 = gap - 1 is safe with margin 0 only (path 0, the
    # fastest); else path 3 (by 8; path 1 is slower and safe, but path 3 is faster)
    ev += [_pkt(7, 2, 13, 15)]; want += [(to0, to3, to3)[margin]]
    # flow 2 at tick 21, gap 21: path 0 by 20 = gap - 1 (margin 0: path 0, the fastest in the window), else path 3
    ev += [_pkt(2, 1, 21, 16)]; want += [(to0, to3, to3)[margin]]
    return ev, want


@pytest.mark.parametrize("margin", [0, 1, 2])
def test_margin_hand_worked_on_the_rederivation_and_the_golden_model(margin):
    ev, want = margin_hand_worked(margin)
    params = dict(P, margin=margin)
    assert algorithm1(ev, **params) == want
    assert _fields(run_golden("flb-route", params, ev)) == want


@pytest.mark.parametrize("margin", [0, 1, 2])
def test_rtl_margin_hand_worked(margin):
    """The margin cases through the RTL (``compare=False``), back to back."""
    ev, want = margin_hand_worked(margin)
    out = run_rtl("flb-route", dict(P, margin=margin), ev, compare=False)
    assert _fields(out) == want


# -- signature and parameters ------------------------------------------------------------------------------------------

def test_signature():
    dut = RouteRTL()
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "o", "ctl"}
    item = dut.signature.members["i"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("flow", 16), ("dest", 4), ("now", 16), ("tag", 16)]
    res = dut.signature.members["o"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in res] == [("kind", 3), ("flow", 16), ("dest", 4), ("now", 16), ("tag", 16),
                                              ("path", 3), ("new", 1), ("rerouted", 1), ("ok", 1)]
    assert dut.latency == 7


def test_margin_default_and_cli_error(capsys):
    """The default is the paper's window (margin 0, the datasheet's table); a bad value is one line on the CLI."""
    from lbpipe.blocks import BLOCKS
    from lbpipe.cli import main
    assert BLOCKS["flb-route"].resolve()["margin"] == 0
    assert main(["verilog", "flb-route", "--param", "margin=-1", "-o", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "margin" in err and "-1" in err, err


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_flows=1), ValueError), (dict(n_flows=(1 << 20) + 1), ValueError), (dict(n_dests=0), ValueError),
    (dict(n_paths=1), ValueError), (dict(n_paths=17), ValueError), (dict(time_bits=3), ValueError),
    (dict(delay_bits=33), ValueError), (dict(timeout=0), ValueError), (dict(time_bits=8, timeout=256), ValueError),
    (dict(n_paths=True), TypeError), (dict(timeout=4.0), TypeError),
    (dict(margin=-1), ValueError), (dict(time_bits=8, timeout=40, margin=256), ValueError),
    (dict(margin=True), TypeError), (dict(margin=1.0), TypeError),
])
def test_bad_parameters(kwargs, exc):
    for cls in (RouteRTL, Route):
        with pytest.raises(exc):
            cls(**kwargs)


# -- random traces -----------------------------------------------------------------------------------------------------

def _random_params(rng):
    """Random parameters within the datasheet's ranges, small enough for Icarus."""
    tb = rng.randrange(4, 17)
    return dict(n_flows=rng.randrange(2, 300), n_dests=rng.randrange(1, 20), n_paths=rng.randrange(2, 17),
                time_bits=tb, delay_bits=rng.randrange(4, 17), timeout=rng.randrange(1, 1 << tb),
                margin=rng.choice([0, 0, 1, 2, rng.randrange(1 << tb)]))


@pytest.mark.parametrize("seed", range(20))
def test_golden_matches_the_rederivation(seed):
    rng = random.Random(seed)
    params = _random_params(rng)
    ev = route_trace(seed, 1500, **params)
    assert _fields(run_golden("flb-route", params, ev)) == algorithm1(ev, **params)


def test_trace_exercises_every_outcome():
    ev = route_trace(7, 500, **P)
    got = algorithm1(ev, **P)
    assert {(r[1], r[2], r[3]) for r in got} >= {(1, 0, 1), (0, 1, 1), (0, 0, 1), (0, 0, 0)}


P5 = dict(n_flows=13, n_dests=5, n_paths=5, time_bits=6, delay_bits=5, timeout=20)
P16 = dict(n_flows=64, n_dests=4, n_paths=16, time_bits=10, delay_bits=8, timeout=100)


@pytest.mark.parametrize("params", [P, P5, pytest.param(P16, marks=pytest.mark.skipif(
    not FULL, reason="16 paths: a long Icarus build, LBPIPE_FULL=1"))])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_against_the_rederivation(params, idle, backpressure):
    """Random traces (flows back to back and with gaps, delay and isolation updates, bad input) through the RTL,
    against :func:`algorithm1`; without idle or back-pressure, one packet per clock measured between commands."""
    ev = route_trace(31 + params["n_paths"], 400, **params)
    stats = {}
    out = run_rtl("flb-route", params, ev, idle=idle, backpressure=backpressure, seed=5, compare=False,
                  stats=stats)
    assert _fields(out) == algorithm1(ev, **params)


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_margin_against_the_rederivation(idle, backpressure):
    """``margin`` 1 on a random trace chosen (seed 120) for the packets whose decision the margin changes (the
    re-derivation at margin 0 and 1 differs on at least 8 of them), through the RTL against :func:`algorithm1`."""
    params = dict(P, margin=1)
    ev = route_trace(120, 400, **P)
    want = algorithm1(ev, **params)
    assert sum(a != b for a, b in zip(want, algorithm1(ev, **P))) >= 8
    out = run_rtl("flb-route", params, ev, idle=idle, backpressure=backpressure, seed=5, compare=False)
    assert _fields(out) == want


def test_rtl_one_packet_per_clock():
    """Back-to-back packets of a few flows, no commands after the set-up: one packet per clock, measured."""
    ev = [_delay(d, p, (7 * d + 3 * p) % 64) for d in range(3) for p in range(4)]
    ev += [_pkt(f % 5, f % 3, f // 4, f) for f in range(300)]
    stats = {}
    out = run_rtl("flb-route", P, ev, compare=False, stats=stats)
    assert _fields(out) == algorithm1(ev, **P)
    assert stats["items_per_clock"] == 1.0


def test_rtl_control_racing_lookups():
    """Delay and isolation commands written while packets stream in back to back: the cocotb test records the
    clock edge each command is taken on and checks that exactly the packets taken after it see it. Every packet
    here is a new flow (64 flows in turn, 3 ticks apart: 192 ticks between a flow's packets, timeout 40), so each
    takes the fastest eligible path, and every command changes which path that is: [10, 5, 1, 20] -> path 2 made
    63 (fastest 1) -> path 1 made 63 (fastest 0) -> path 0 isolated (fastest 3) -> path 2 made 0 (fastest 2).
    Then the same with random commands and flows that reroute."""
    params = dict(P, n_flows=64)
    ev = [_delay(1, p, v) for p, v in enumerate([10, 5, 1, 20])]
    swings = {12: _delay(1, 2, 63), 40: _delay(1, 1, 63), 70: _iso(1, 0b0001), 100: _delay(1, 2, 0)}
    for n in range(140):
        if n in swings:
            ev.append(swings[n])
        ev.append(_pkt(n % 64, 1, 3 * n % 256, n))
    run_rtl("flb-route", params, ev, testcase="ctl_race")
    rng = random.Random(4)
    ev = [_delay(1, p, v) for p, v in enumerate([10, 5, 1, 20])]
    now = 0
    for n in range(120):
        if n in (10, 40, 70, 100):
            ev.append(rng.choice([_delay(1, rng.randrange(4), rng.randrange(64)), _iso(1, rng.randrange(16))]))
        now += rng.choice([0, 1, 3, 9])
        ev.append(_pkt(rng.randrange(3), 1, now % 256, n))
    run_rtl("flb-route", P, ev, testcase="ctl_race")


def test_rtl_reset_state_odd_table():
    """A reset in mid-traffic empties the flow table (every flow new again: the sweep covers all 13 entries of a
    table whose depth is not a power of two) and keeps delays and isolated sets, as the datasheet says (the
    harness checks the RTL against the golden model's ``reset()`` before anything is set up again)."""
    run_rtl("flb-route", P5, route_trace(21, 400, **P5), testcase="reset_state", seed=2)


# -- more than 8 paths: the choice over two stages (S5, S5b), latency 8 ---------------------------------------------
# The datasheet: beyond 8 paths the winners are registered at S5 and the per-path choice made at S5b, one cycle
# more; the path table read moves from S3 to S4 so that its three writes in flight stay those of S7, S8 and S9.

def many_paths_trace(seed, n_paths, n_items=400):
    """Packets of 6 flows to 3 destinations, one packet a clock with no command between them (the pipeline never
    drains): rounds over a few distinct flows (1 to 5), so a flow's packets follow each other at distances 1 to 5.
    In most packets' clocks an ``upd`` keeps the ranking moving: half of the delay updates raise or lower the
    fastest path of the packet's destination (by the delays written here, isolation aside), where the flows sit,
    so they keep rerouting; some masks, some updates of another destination. Every ``upd`` event sits right before
    a packet: one clock each."""
    rng = random.Random(seed)
    delays = [[rng.randrange(40) for p in range(n_paths)] for d in range(3)]
    ev = [_delay(d, p, delays[d][p]) for d in range(3) for p in range(n_paths)]
    flows = {f: f % 3 for f in (2, 7, 11, 13, 14, 15)}
    now, n = 5, 0
    while n < n_items:
        group = rng.sample(sorted(flows), rng.choice([1, 1, 1, 2, 2, 3, 4, 5]))
        for flow in group * rng.randrange(2, 6):
            dest = flows[flow]
            now = (now + rng.choice([0, 2, 5, 10, 20])) % 1024
            r = rng.random()
            if r < 0.7:
                fastest = min(range(n_paths), key=lambda q: delays[dest][q])
                path = fastest if rng.random() < 0.5 else rng.randrange(n_paths)
                delays[dest][path] = rng.randrange(40)
                ev.append(_upd_delay(dest, path, delays[dest][path]))
            elif r < 0.75:
                ev.append(_upd_iso(dest, rng.choice([0, 0, 1 << rng.randrange(n_paths), rng.randrange(1 << n_paths)])))
            elif r < 0.8:
                other, path = (dest + 1) % 3, rng.randrange(n_paths)
                delays[other][path] = rng.randrange(40)
                ev.append(_upd_delay(other, path, delays[other][path]))
            ev.append(_pkt(flow, dest, now, n))
            n += 1
    return ev


def _forwarded(ev, want):
    """Per distance 1 to 4 (in clocks: one packet a clock), how many packets follow, at that distance, a packet of
    their flow that changed the flow's path (new on another path, or rerouted): those whose current path a stale
    path table read would get wrong."""
    items = [e["item"] for e in ev if "item" in e]
    last, held, count = {}, {}, {1: 0, 2: 0, 3: 0, 4: 0}
    for k, (it, (path, _, _, ok)) in enumerate(zip(items, want)):
        f = it["flow"]
        if f in last and k - last[f][0] in count and last[f][1]:
            count[k - last[f][0]] += 1
        if ok:
            last[f] = (k, held.get(f) != path)
            held[f] = path
    return count


PM = dict(n_flows=16, n_dests=3, time_bits=10, delay_bits=6, timeout=100, upd=True)


@pytest.mark.parametrize("n_paths", [12, pytest.param(16, marks=pytest.mark.skipif(
    not FULL, reason="16 paths: a long Icarus build, LBPIPE_FULL=1"))])
def test_rtl_many_paths_back_to_back(n_paths):
    """12 and 16 paths (S5b built, latency 8): the trace above through the RTL against the golden model (every
    output, its cycle and the latency, checked by the testbench) and against :func:`algorithm1`; the trace holds
    at least 12 packets at each distance 1 to 4 behind a path change of their flow."""
    params = dict(PM, n_paths=n_paths)
    assert RouteRTL(**params).latency == 8 and RouteRTL.latency == 7
    ev = many_paths_trace(50 + n_paths, n_paths)
    want = algorithm1(ev, **params)
    assert min(_forwarded(ev, want).values()) >= 12, _forwarded(ev, want)
    assert sum(r[2] for r in want) >= 100
    out = run_rtl("flb-route", params, ev)
    assert _fields(out) == want


@pytest.mark.parametrize("testcase", ["reset_mid_traffic", "reset_state"])
def test_rtl_many_paths_reset(testcase):
    """12 paths (S5b built): a reset in mid-traffic empties S5b with the rest of the pipeline (the generic tests,
    the RTL against the golden model's documented reset)."""
    params = dict(PM, n_paths=12)
    run_rtl("flb-route", params, many_paths_trace(7, 12), testcase=testcase, idle=0.2, backpressure=0.3, seed=2)


# -- the default multi-bank build: 16,384 flows ------------------------------------------------------------------------
# A stamp entry (valid + 16-bit stamp) is 17 bits: one RAMB36 holds 2,048 of them (18-bit wide), so 16,384 flows are
# 8 stamp banks selected by flow bits 11 to 13; a path entry (3 bits for 8 paths) fits 8,192 in a RAMB36 (4-bit wide):
# 2 path banks selected by flow bit 13. Flows 5 + 2048 * k (k = 0..7) share their low 11 bits: one in each stamp bank,
# four in each path bank, at the same address of every bank.
PBIG = dict(n_flows=16384, n_dests=4, n_paths=8, time_bits=16, delay_bits=8, timeout=300)


def _alias(k, base=5):
    return base + 2048 * k


def test_rtl_banks_hand_worked():
    """Eight flows at the same address of the eight stamp banks (and of the two path banks), each made new on its
    own path, then each seen again: every one must find its own stamp (not new: a missed or misdirected bank write
    makes it new, or makes a later flow look old) and its own path (it stays: all delays are then equal)."""
    ev = [_delay(1, p, 50) for p in range(8)]
    want = []
    for k in range(8):
        # path k alone is fastest (1 tick): flow k is new on path k; then path k back to 50
        ev += [_delay(1, k, 1), _pkt(_alias(k), 1, 10 + k, k), _delay(1, k, 50)]
        want += [(k, 1, 0, 1)]
    # every path at 50 again: each flow, gap 20 - 27 < timeout, stays on its own path (not new, not rerouted)
    for n, k in enumerate([7, 0, 6, 1, 5, 2, 4, 3]):
        ev += [_pkt(_alias(k), 1, 30 + n, 8 + n)]
        want += [(k, 0, 0, 1)]
    # a flow at another address of bank 3 (low bits 6) and one at bank 3's address 5 + 1024: both new
    ev += [_pkt(6 + 2048 * 3, 1, 40, 16), _pkt(_alias(3) + 1024, 1, 40, 17)]
    want += [(0, 1, 0, 1), (0, 1, 0, 1)]
    assert algorithm1(ev, **PBIG) == want
    out = run_rtl("flb-route", PBIG, ev, compare=False)
    assert _fields(out) == want


def _banked_trace(seed, n_items, idle_flows=16):
    """A random trace (route_trace on 16 flows) with flow f mapped to 5 + 2048 * (f % 8) + 1024 * (f // 8): the 16
    flows share their low 10 bits, two in each stamp bank, eight in each path bank."""
    params = dict(PBIG, n_flows=idle_flows)
    ev = route_trace(seed, n_items, **params)
    for e in ev:
        if "item" in e:
            f = e["item"]["flow"]
            e["item"]["flow"] = (5 + 2048 * (f % 8) + 1024 * (f // 8)) if f < idle_flows else f % PBIG["n_flows"]
    return ev


@pytest.mark.parametrize("idle, backpressure", [(0.3, 0.5), pytest.param(0.0, 0.0, marks=pytest.mark.skipif(
    not FULL, reason="second 16,384-flow build: LBPIPE_FULL=1"))])
def test_rtl_banks_against_the_rederivation(idle, backpressure):
    """The 8-bank build on a random trace of flows that share their low address bits, against
    :func:`algorithm1`, with idle input and back-pressure."""
    ev = _banked_trace(11, 400)
    out = run_rtl("flb-route", PBIG, ev, idle=idle, backpressure=backpressure, seed=3, compare=False)
    assert _fields(out) == algorithm1(ev, **PBIG)


def test_rtl_banks_reset_state():
    """A reset in mid-traffic on the 8-bank build: the sweep (2,048 clocks, every bank at once) must clear the
    flows of every bank (the harness checks against the golden model's documented reset)."""
    run_rtl("flb-route", PBIG, _banked_trace(12, 400), testcase="reset_state", seed=4)


@pytest.mark.skipif(not FULL, reason="long random regression: LBPIPE_FULL=1")
@pytest.mark.parametrize("seed", range(3))
def test_rtl_long_random(seed):
    rng = random.Random(seed)
    params = _random_params(rng)
    ev = route_trace(seed, 3000, **params)
    out = run_rtl("flb-route", params, ev, idle=0.2, backpressure=0.3, seed=seed, compare=False)
    assert _fields(out) == algorithm1(ev, **params)


# -- the upd stream (upd=True) -----------------------------------------------------------------------------------------

PU = dict(n_flows=16, n_dests=3, n_paths=5, time_bits=8, delay_bits=6, timeout=40, upd=True)


def _upd_delay(dest, path, value):
    return {"upd": {"isolate": 0, "dest": dest, "path": path, "delay": value, "mask": 0}}


def _upd_iso(dest, mask):
    return {"upd": {"isolate": 1, "dest": dest, "path": 0, "delay": 0, "mask": mask}}


def upd_hand_worked():
    """Read after write on ``upd``, worked by hand from the datasheet's rule: a packet taken in the same clock as an
    update, or later, sees it; a packet taken earlier does not. An ``upd`` event just before a packet is offered in
    the packet's clock; two ``upd`` events in a row take a clock each. PU: 5 paths, 3 destinations, timeout 40.
    Destination 1's delays [10, 20, 30, 40, 50] through ``ctl``."""
    ev = [_delay(1, p, 10 * (p + 1)) for p in range(5)]
    want = []
    # A with "path 2 = 5" in its own clock: new, the fastest is now path 2 (without it: path 0)
    ev += [_upd_delay(1, 2, 5), _pkt(1, 1, 100, 0)]; want += [(2, 1, 0, 1)]
    # B, then in the next clock "path 3 = 1" with C: B does not see it (path 2), C does (path 3)
    ev += [_pkt(2, 1, 100, 1)]; want += [(2, 1, 0, 1)]
    ev += [_upd_delay(1, 3, 1), _pkt(3, 1, 100, 2)]; want += [(3, 1, 0, 1)]
    # D with "isolate path 3" in its clock: eligible 0, 1, 2, 4 -> path 2 (5) (without it: path 3)
    ev += [_upd_iso(1, 0b01000), _pkt(4, 1, 100, 3)]; want += [(2, 1, 0, 1)]
    # "isolate path 2" alone in a clock, then an update of destination 3 (out of range: ignored) with E, next
    # clock: eligible 0, 1, 3, 4 -> path 3 (1) (with the old mask: path 2)
    ev += [_upd_iso(1, 0b00100), _upd_iso(3, 0b11111), _pkt(5, 1, 100, 4)]; want += [(3, 1, 0, 1)]
    # F: A's flow (path 2, stamp 100) at 110, gap 10, "path 2 = 30" in its clock; path 2 is isolated, so the
    # safe set: 30 - d(q) < 10 for d = [10, 20, 30, 1, 50]: only path 4 (50) -> rerouted to 4 (with path 2 = 5
    # every path is safe and the fastest eligible, 3, would win)
    ev += [_upd_delay(1, 2, 30), _pkt(1, 1, 110, 5)]; want += [(4, 0, 1, 1)]
    # G: C's flow (path 3, d 1, stamp 100) at 120, gap 20, "path 0 = 0" in its clock: 0 < 1 - 0 < 20 -> path 0
    # (without it: no faster path, stays on 3)
    ev += [_upd_delay(1, 0, 0), _pkt(3, 1, 120, 6)]; want += [(0, 0, 1, 1)]
    # H: the same flow back to back at 121 (gap 1, on G's path 0, forwarded); "path 0 = 3" in a clock of its own,
    # then "path 1 = 2" with H: d = [3, 2, 30, 1, 50], path 2 isolated: 0 < 3 - d(q) < 1 has no solution ->
    # stays on 0
    ev += [_upd_delay(1, 0, 3), _upd_delay(1, 1, 2), _pkt(3, 1, 121, 7)]; want += [(0, 0, 0, 1)]
    # I: a new flow with "path 7" (out of range: ignored) in its clock: d = [3, 2, 30, 1, 50] -> path 3 (1)
    ev += [_upd_delay(1, 7, 0), _pkt(6, 1, 121, 8)]; want += [(3, 1, 0, 1)]
    # J: the update in the clock after the packet that would see it: J first (path 3), then "path 4 = 0" with K:
    # K takes path 4, J did not
    ev += [_pkt(7, 1, 121, 9)]; want += [(3, 1, 0, 1)]
    ev += [_upd_delay(1, 4, 0), _pkt(8, 1, 121, 10)]; want += [(4, 1, 0, 1)]
    # L with an update of destination 2 (its path 1 = 0) in its clock: destination 1 unchanged, d = [3, 2, 30, 1, 0]
    # -> path 4 (taking destination 2's value for its own path 1 would tie at 0 and win on the lower index: 1)
    ev += [_upd_delay(2, 1, 0), _pkt(9, 1, 121, 11)]; want += [(4, 1, 0, 1)]
    return ev, want


PF = dict(P, force=True)


def force_hand_worked(n_paths=4):
    """Forced paths (``force=True``), worked by hand: destination 0's delays 10, 20, 30, 40 (paths 4 and up, when
    there are more, 63: slower than all). Flow 1 forced onto 3 as
    a new flow: 3, new. Unforced at the same tick: it is on 3 (recorded), gap 0, no move: 3. At gap 20: the window
    0 < 40 - d(q) <= 19 holds path 2 only: 2, rerouted. Forced onto 0: 0, rerouted. Unforced, gap 0: stays on 0.
    Flow 2, new, unforced: the fastest, 0. Flow 1 forced onto 0, where it is: 0, not rerouted. Flow 3 forced (a
    new flow) onto 2 with destination 3 out of range: (0, not new, not rerouted, not ok)."""
    def pkt(flow, dest, now, force=0, fpath=0):
        return {"item": {"kind": 1, "flow": flow, "dest": dest, "now": now, "tag": 0, "force": force,
                         "fpath": fpath}}
    ev = [_delay(0, p, d) for p, d in enumerate((10, 20, 30, 40) + (63,) * (n_paths - 4))]
    ev += [pkt(1, 0, 10, 1, 3), pkt(1, 0, 10), pkt(1, 0, 30), pkt(1, 0, 30, 1, 0), pkt(1, 0, 30), pkt(2, 0, 30),
           pkt(1, 0, 30, 1, 0), pkt(3, 3, 30, 1, 2)]
    want = [(3, 1, 0, 1), (3, 0, 0, 1), (2, 0, 1, 1), (0, 0, 1, 1), (0, 0, 0, 1), (0, 1, 0, 1), (0, 0, 0, 1),
            (0, 0, 0, 0)]
    return ev, want


@pytest.mark.parametrize("n_paths", [4, 12])
def test_force_hand_worked_on_the_golden_model(n_paths):
    ev, want = force_hand_worked(n_paths)
    assert _fields(run_golden("flb-route", dict(PF, n_paths=n_paths), ev)) == want


@pytest.mark.parametrize("n_paths, idle, backpressure", [(4, 0.0, 0.0), (4, 0.3, 0.5), (12, 0.0, 0.0)])
def test_rtl_force_hand_worked(n_paths, idle, backpressure):
    """The forced paths through the RTL (``compare=False``: the hand-worked values), back to back and with pauses
    (a forced packet and the next of its flow one clock apart go through S6's forwarding); 12 paths: the choice
    over S5 and S5b."""
    ev, want = force_hand_worked(n_paths)
    out = run_rtl("flb-route", dict(PF, n_paths=n_paths), ev, idle=idle, backpressure=backpressure, seed=5,
                  compare=False)
    assert _fields(out) == want


def test_upd_hand_worked_on_the_rederivation_and_the_golden_model():
    ev, want = upd_hand_worked()
    assert algorithm1(ev, **PU) == want
    assert _fields(run_golden("flb-route", PU, ev)) == want


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_upd_hand_worked(idle, backpressure):
    """The read-after-write cases through the RTL (``compare=False``), back to back and with idle input and
    back-pressure (a group's update and packet are taken in one clock whatever the timing)."""
    ev, want = upd_hand_worked()
    out = run_rtl("flb-route", PU, ev, idle=idle, backpressure=backpressure, seed=3, compare=False)
    assert _fields(out) == want


def test_upd_signature():
    assert "upd" not in RouteRTL(**P).signature.members
    # the latency with upd (7, the datasheet's) is measured cycle by cycle by the generic tests on the upd entry
    lay = RouteRTL(**PU).signature.members["upd"].signature.members["payload"].shape
    assert {name: Shape.cast(lay[name].shape).width for name in ("isolate", "dest", "path", "delay", "mask")} == {
        "isolate": 1, "dest": 2, "path": 3, "delay": 6, "mask": 5}
    with pytest.raises(ValueError):
        Route(**P).process_stream("upd", {"dest": 0})


@pytest.mark.parametrize("seed", range(8))
def test_upd_golden_matches_the_rederivation(seed):
    rng = random.Random(100 + seed)
    params = dict(_random_params(rng), upd=True)
    ev = route_trace(seed, 1500, **params)
    assert sum("upd" in e for e in ev) > 1000
    assert _fields(run_golden("flb-route", params, ev)) == algorithm1(ev, **params)


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_upd_against_the_rederivation(idle, backpressure):
    """Random ``upd=True`` traces (about one update a clock, most in the clock of a packet of their destination)
    through the RTL against :func:`algorithm1`."""
    ev = route_trace(41, 500, **PU)
    out = run_rtl("flb-route", PU, ev, idle=idle, backpressure=backpressure, seed=6, compare=False)
    assert _fields(out) == algorithm1(ev, **PU)


@pytest.mark.parametrize("testcase", ["reset_mid_traffic", "reset_state"])
def test_rtl_upd_reset(testcase):
    """Reset in mid-traffic with updates: the generic tests (RTL against the golden model; the tables kept)."""
    run_rtl("flb-route", PU, route_trace(23, 400, **PU), testcase=testcase, idle=0.2, backpressure=0.3, seed=2)


# -- synthesis (LBPIPE_SYNTH=1) ----------------------------------------------------------------------------------------

@pytest.mark.synthesis
def test_synthesis_logic_levels_16_paths(tmp_path):
    """The 16-path core (4,096 flows, as the datasheet's "Logic depth by n_paths" rows) within the 6-level budget:
    the choice split over S5 and S5b. About two to four minutes of Yosys."""
    from lbpipe.synth import synthesize

    report = synthesize(RouteRTL(n_paths=16, n_flows=4096), name="flb_route", workdir=tmp_path / "flb_route",
                        wrapped=False)
    print({key: report[key] for key in ("lut", "ff", "carry8", "logic_levels", "seconds")})
    assert report["logic_levels"] <= 6, report["critical_path"]
    assert report["unregistered_ram"]["ports"] == []
