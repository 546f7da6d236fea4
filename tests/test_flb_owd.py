"""FLB one-way-delay measurement and piggyback (flb-owd): signature and parameters, a hand-worked sequence (first
sample, a base coming down, stamps across the timer's wrap, saturation, back-to-back samples of one (edge, path) at
distances 1, 2 and 3, piggyback sent once, bad items, FORGET and FORGET_ALL) on the golden model and on the RTL,
with the counters; the golden model and the RTL (idle input, back-pressure) against an independent re-derivation
written here; one packet per clock measured.

Expected values come from the hand-worked comments or from :func:`rederive` below, written from the paper's
section 3.1 and the datasheet's choices, never from lbpipe.sim.flb."""

import os

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.flb.owd import Owd as OwdRTL
from lbpipe.sim.flb.owd import Owd, owd_trace

FULL = os.environ.get("LBPIPE_FULL") == "1"

# The datasheet's control tables, written again here.
FORGET, FORGET_ALL = 0, 1

P = dict(n_edges=3, n_paths=5, time_bits=8, delay_bits=6)


def _sample(edge, path, stamp, now, tag=0):
    return {"item": {"kind": 1, "sampled": 1, "edge": edge, "path": path, "stamp": stamp, "now": now, "tag": tag}}


def _reverse(edge, tag=0):
    return {"item": {"kind": 1, "reverse": 1, "to_edge": edge, "tag": tag}}


def _none(tag=0):
    return {"item": {"kind": 2, "edge": 1, "path": 1, "to_edge": 1, "stamp": 7, "now": 9, "tag": tag}}


def _forget(edge, path):
    return {"ctl": {"table": FORGET, "index": edge << 4 | path, "data": 0}}


# -- the independent re-derivation -------------------------------------------------------------------------------------

def rederive(events, *, n_edges, n_paths, time_bits, delay_bits):
    """Section 3.1 per packet, in signed arithmetic: the clock offset between the two switches is unknown, so a
    one-way delay is only known up to a constant; take each new ``owd`` relative to the base as a signed number in
    ``[-2**(time_bits-1), 2**(time_bits-1))``; negative means a new minimum. The newest measurement of each source
    edge waits to be sent once. Returns ``[(ok, qdelay, base_set, pb_valid, pb_path, pb_delay)]`` and the
    counters ``[samples, bases set, piggybacks, empty reverses, rejected]``."""
    span, half = 2 ** time_bits, 2 ** (time_bits - 1)
    top = 2 ** delay_bits - 1
    base, pending, out = {}, {}, []
    n = [0, 0, 0, 0, 0]
    for e in events:
        if "ctl" in e:
            t, idx = e["ctl"]["table"], e["ctl"]["index"]
            if t == FORGET and idx // 16 < n_edges and idx % 16 < n_paths:
                base.pop((idx // 16, idx % 16), None)
            if t == FORGET_ALL:
                base, pending = {}, {}
            continue
        it = e["item"]
        s, r = it.get("sampled", 0), it.get("reverse", 0)
        if (s and r) or (s and not (it["edge"] < n_edges and it["path"] < n_paths)) or (r and it["to_edge"] >= n_edges):
            out.append((0, 0, 0, 0, 0, 0))
            n[4] += 1
            continue
        if s:
            key = (it["edge"], it["path"])
            owd = (it["now"] - it["stamp"]) % span
            rel = None if key not in base else (owd - base[key] + half) % span - half
            if rel is None or rel < 0:
                base[key], delay, new = owd, 0, 1
            else:
                delay, new = min(rel, top), 0
            pending[it["edge"]] = (it["path"], delay)
            out.append((1, delay, new, 0, 0, 0))
            n[0] += 1
            n[1] += new
        elif r:
            got = pending.pop(it["to_edge"], None)
            out.append((1, 0, 0, 1, got[0], got[1]) if got else (1, 0, 0, 0, 0, 0))
            n[2 if got else 3] += 1
        else:
            out.append((1, 0, 0, 0, 0, 0))
    return out, n


def _fields(outputs):
    return [(o["ok"], o["qdelay"], o["base_set"], o["pb_valid"], o["pb_path"], o["pb_delay"]) for o in outputs]


# -- the hand-worked sequence ------------------------------------------------------------------------------------------

def hand_worked():
    """Events and expected (ok, qdelay, base_set, pb_valid, pb_path, pb_delay), worked by hand (P: 3 edges, 5
    paths, 8-bit ticks (mod 256, half 128), 6-bit delays (saturating at 63)); and the expected counters."""
    ev, want = [], []
    ev += [_sample(1, 2, 250, 4)]; want += [(1, 0, 1, 0, 0, 0)]      # A owd (4-250) mod 256 = 10: first, base 10
    ev += [_sample(1, 2, 0, 15)]; want += [(1, 5, 0, 0, 0, 0)]       # B next clock: owd 15, delay 5
    ev += [_sample(1, 2, 5, 13)]; want += [(1, 0, 1, 0, 0, 0)]       # C owd 8 < 10 (A two ahead): base comes down
    ev += [_sample(1, 2, 200, 220)]; want += [(1, 12, 0, 0, 0, 0)]   # D owd 20 - 8 (C one ahead) = 12
    ev += [_reverse(1)]; want += [(1, 0, 0, 1, 2, 12)]               # E carries D's measurement
    ev += [_reverse(1)]; want += [(1, 0, 0, 0, 0, 0)]                # F nothing left: each sent once
    ev += [_sample(1, 2, 0, 108)]; want += [(1, 63, 0, 0, 0, 0)]     # G owd 108 - 8 = 100: saturates at 63
    ev += [_sample(0, 4, 100, 100)]; want += [(1, 0, 1, 0, 0, 0)]    # H edge 0 path 4: owd 0, base 0
    ev += [_none()]; want += [(1, 0, 0, 0, 0, 0)]                    # I neither flag: nothing
    ev += [_sample(0, 4, 250, 3)]; want += [(1, 9, 0, 0, 0, 0)]      # J now wrapped: owd (3-250) mod 256 = 9
    ev += [_sample(0, 4, 10, 9)]; want += [(1, 0, 1, 0, 0, 0)]       # K owd 255 = 0 - 1 mod 256: base down to 255
    ev += [_sample(0, 4, 0, 3)]; want += [(1, 4, 0, 0, 0, 0)]        # L owd 3: (3 - 255) mod 256 = 4
    ev += [_reverse(0)]; want += [(1, 0, 0, 1, 4, 4)]                # M edge 0's newest: L
    ev += [_reverse(1)]; want += [(1, 0, 0, 1, 2, 63)]               # N edge 1's newest: G (D was sent)
    ev += [{"item": {"kind": 1, "sampled": 1, "reverse": 1, "edge": 0, "path": 4, "stamp": 0, "now": 200,
                     "to_edge": 0}}]; want += [(0, 0, 0, 0, 0, 0)]   # O both flags: rejected, base unchanged
    ev += [_sample(3, 0, 0, 1)]; want += [(0, 0, 0, 0, 0, 0)]        # P edge 3 of 3: rejected
    ev += [_sample(1, 6, 0, 1)]; want += [(0, 0, 0, 0, 0, 0)]        # Q path 6 of 5: rejected
    ev += [_reverse(3)]; want += [(0, 0, 0, 0, 0, 0)]                # R to edge 3 of 3: rejected
    ev += [_sample(0, 4, 0, 5)]; want += [(1, 6, 0, 0, 0, 0)]        # S owd 5 - 255 = 6: O changed nothing
    # distance 3: X1 sets the base, two other packets, X2 lower (X1's base in flight, forwarded)
    ev += [_sample(2, 0, 0, 50)]; want += [(1, 0, 1, 0, 0, 0)]       # X1 first: base 50
    ev += [_none(), _none()]; want += [(1, 0, 0, 0, 0, 0)] * 2
    ev += [_sample(2, 0, 0, 40)]; want += [(1, 0, 1, 0, 0, 0)]       # X2 owd 40 < 50: base 40
    ev += [_none(), _none()]; want += [(1, 0, 0, 0, 0, 0)] * 2
    ev += [_sample(2, 0, 0, 45)]; want += [(1, 5, 0, 0, 0, 0)]       # X3 45 - 40 (X2 three ahead)
    # distance 2: Y1 sets the base, one other packet, Y2 above it
    ev += [_sample(2, 1, 0, 30)]; want += [(1, 0, 1, 0, 0, 0)]       # Y1 first: base 30
    ev += [_reverse(2)]; want += [(1, 0, 0, 1, 1, 0)]                # (edge 2's newest: Y1, delay 0)
    ev += [_sample(2, 1, 0, 35)]; want += [(1, 5, 0, 0, 0, 0)]       # Y2 35 - 30 (Y1 two ahead)
    ev += [_sample(2, 0, 10, 51)]; want += [(1, 1, 0, 0, 0, 0)]      # Z path 0 again: 41 - 40 (path 1 between)
    ev += [_reverse(2)]; want += [(1, 0, 0, 1, 0, 1)]                # edge 2's newest: Z (replaced Y2)
    ev += [_forget(1, 2)]                                            # FORGET edge 1, path 2
    ev += [_sample(1, 2, 0, 50)]; want += [(1, 0, 1, 0, 0, 0)]       # T owd 50: first again, base 50
    ev += [_sample(1, 2, 0, 49)]; want += [(1, 0, 1, 0, 0, 0)]       # U 49 < 50: base 49
    # forged and out-of-range commands change nothing: path 5 of 5, edge 3 of 3, tables 2 and 255
    ev += [_forget(0, 5), _forget(3, 4),
           {"ctl": {"table": 2, "index": 0 << 4 | 4, "data": 0}},
           {"ctl": {"table": 255, "index": 0, "data": 1}}]
    ev += [_sample(0, 4, 0, 7)]; want += [(1, 8, 0, 0, 0, 0)]        # V base still 255: 7 - 255 = 8
    ev += [{"ctl": {"table": FORGET_ALL, "index": 77, "data": 5}}]   # every base and slot forgotten
    ev += [_reverse(1)]; want += [(1, 0, 0, 0, 0, 0)]                # W edge 1's U measurement gone
    ev += [_sample(0, 4, 0, 7)]; want += [(1, 0, 1, 0, 0, 0)]        # X first again
    ev += [_reverse(0)]; want += [(1, 0, 0, 1, 4, 0)]                # Y carries X
    # samples A B C D G H J K L S X1 X2 X3 Y1 Y2 Z T U V X = 20; bases set A C H K X1 X2 Y1 T U X = 10;
    # piggybacks E M N (Y1) (Z) Y = 6; empty reverses F W = 2; rejected O P Q R = 4
    return ev, want, [20, 10, 6, 2, 4]


def test_hand_worked_on_the_rederivation_and_the_golden_model():
    ev, want, counts = hand_worked()
    got, n = rederive(ev, **P)
    assert got == want and n == counts
    model = Owd(**P)
    out = []
    for e in ev:
        if "ctl" in e:
            model.control(e["ctl"])
        else:
            out.append(model.process(e["item"]))
    assert _fields(out) == want
    assert model.stats() == counts


def test_rtl_hand_worked():
    """Back to back (no idle): the samples at distances 1, 2 and 3 go through the forwarding."""
    ev, want, counts = hand_worked()
    stats = {}
    out = run_rtl("flb-owd", P, ev, compare=False, stats=stats)
    bad = [(n, w, g) for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts


# -- signature and parameters ------------------------------------------------------------------------------------------

def test_signature():
    dut = OwdRTL(**P)
    dut._MustUse__silence = True
    members = dut.signature.members
    assert set(members) == {"i", "o", "ctl", "stats"}
    item = members["i"].signature.members["payload"].shape
    res = members["o"].signature.members["payload"].shape
    # edge 2 bits (3 edges), path 3 bits (5 paths), 8-bit stamps, 6-bit delays
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("sampled", 1), ("edge", 2), ("path", 3), ("stamp", 8),
                                               ("now", 8), ("reverse", 1), ("to_edge", 2), ("tag", 16)]
    assert [(n, f.width) for n, f in res] == [("kind", 3), ("sampled", 1), ("edge", 2), ("path", 3), ("reverse", 1),
                                              ("to_edge", 2), ("tag", 16), ("ok", 1), ("qdelay", 6),
                                              ("base_set", 1), ("pb_valid", 1), ("pb_path", 3), ("pb_delay", 6)]
    assert members["stats"].shape == 5 * 32
    assert dut.latency == 4


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_edges=0), ValueError), (dict(n_edges=1025), ValueError), (dict(n_paths=1), ValueError),
    (dict(n_paths=17), ValueError), (dict(time_bits=3), ValueError), (dict(time_bits=33), ValueError),
    (dict(delay_bits=3), ValueError), (dict(time_bits=12, delay_bits=13), ValueError),
    (dict(n_edges=2.0), TypeError), (dict(delay_bits=True), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        OwdRTL(**kwargs)


# -- random traces -----------------------------------------------------------------------------------------------------

PARAMS = [P, dict(n_edges=4, n_paths=4, time_bits=6, delay_bits=6), dict(n_edges=5, n_paths=3, time_bits=10,
                                                                         delay_bits=4)]


@pytest.mark.parametrize("seed", range(12))
def test_golden_matches_the_rederivation(seed):
    params = PARAMS[seed % 3]
    ev = owd_trace(seed, 2000, **params)
    out = run_golden("flb-owd", params, ev)
    assert _fields(out) == rederive(ev, **params)[0]


def test_trace_exercises_every_outcome():
    """The random trace reaches what the hand-worked case does: bases coming down after the first sample,
    saturation, wraps, piggybacks and empty reverses, rejections, and back-to-back samples of one entry."""
    ev = owd_trace(3, 2000, **PARAMS[2])
    got, n = rederive(ev, **PARAMS[2])
    items = [e["item"] for e in ev if "item" in e]
    assert n[1] > 20 and n[2] > 50 and n[3] > 50 and n[4] > 20
    assert sum(1 for g in got if g[1] == 15) > 5                        # saturated (4-bit delays)
    assert sum(1 for it in items if it.get("sampled") and it["now"] < it["stamp"]) > 20     # stamp wrap
    same = sum(1 for a, b in zip(items, items[1:]) if a.get("sampled") and b.get("sampled") and
               (a["edge"], a["path"]) == (b["edge"], b["path"]))
    assert same > 100


@pytest.mark.parametrize("params", PARAMS[:2], ids=["P", "wrap6"])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_against_the_rederivation(params, idle, backpressure):
    ev = owd_trace(11, 600, **params)
    stats = {}
    out = run_rtl("flb-owd", params, ev, idle=idle, backpressure=backpressure, seed=5, compare=False, stats=stats)
    want, counts = rederive(ev, **params)
    bad = [n for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:5]
    assert stats["counters"] == counts


def test_rtl_one_packet_per_clock():
    ev = [_sample(n % 3, n % 5 if n % 7 else 2, n % 256, (n * 3 + 9) % 256, n) if n % 4 else _reverse(n % 3, n)
          for n in range(300)]
    stats = {}
    out = run_rtl("flb-owd", P, ev, compare=False, stats=stats)
    assert len(out) == 300 and stats["items_per_clock"] == 1.0
    assert _fields(out) == rederive(ev, **P)[0]


@pytest.mark.regression
@pytest.mark.skipif(not FULL, reason="LBPIPE_FULL=1")
@pytest.mark.parametrize("seed", range(3))
def test_rtl_long_random(seed):
    import random
    rng = random.Random(seed)
    tb = rng.randrange(4, 17)
    params = dict(n_edges=rng.randrange(1, 40), n_paths=rng.randrange(2, 17), time_bits=tb,
                  delay_bits=rng.randrange(4, tb + 1))
    ev = owd_trace(seed, 3000, **params)
    out = run_rtl("flb-owd", params, ev, idle=0.2, backpressure=0.3, seed=seed, compare=False)
    assert _fields(out) == rederive(ev, **params)[0]


def test_rtl_forget_under_backpressure():
    """A FORGET lands while a result waits for the output (the command needs only A1..A3 empty)."""
    run_rtl("flb-owd", P, [_none()], testcase="ctl_under_backpressure")
