"""FLB congestion detection and CNM generation (flb-cnm): signature and parameters, a hand-worked sequence (crossing
up and down, one CNM per flow per stay in the set, the congestion point, the set full, per-port sets, clamping at 0
and at the top, a forged port, threshold writes good and forged) on the golden model and on the RTL, with the
counters; the golden model and the RTL (idle input, back-pressure, a CNM storm of every port crossing together)
against an independent re-derivation written here; one event per clock measured.

Expected values come from the hand-worked comments or from :func:`rederive` below, written from the paper's sections
3.2 and 5 and the datasheet's choices, never from lbpipe.sim.flb."""

import os

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.flb.cnm import Cnm as CnmRTL
from lbpipe.sim.flb.cnm import Cnm, cnm_trace

FULL = os.environ.get("LBPIPE_FULL") == "1"

THRESHOLD = 0           # the datasheet's control table, written again here

P = dict(n_ports=3, n_slots=2, n_edges=4, flow_bits=5, amount_bits=6, q_bits=8, threshold=60)


def _e(port, amount, flow, src=0, deq=0):
    return {"item": {"port": port, "deq": deq, "amount": amount, "flow": flow, "src": src}}


def _d(port, amount, flow, src=0):
    return _e(port, amount, flow, src, deq=1)


def _k(data, table=THRESHOLD):
    return {"ctl": {"table": table, "index": 0, "data": data}}


# -- the independent re-derivation -------------------------------------------------------------------------------------

def rederive(events, *, n_ports, n_slots, n_edges, flow_bits, amount_bits, q_bits, threshold):
    """Sections 3.2 and 5 per event, with a dict ``isolated[port] = {slot: (flow, src)}``: the queue estimate is
    the running sum of enqueued minus dequeued amounts kept within ``[0, 2**q_bits)``; at or above K an enqueue
    notifies its flow once (lowest free slot; ``n`` counts it); below K each event releases the flow in the lowest
    slot (``n`` counts it too); every CNM names its port as the congestion point. Refreshes (issue 17, the
    datasheet's rule): a join or a release puts every other flow of the port in ``debts`` (and the port's other
    debts out); an in-range event without a CNM of its own pays the smallest debt (port, then slot) as a congestion
    CNM with that port's count now. Returns
    ``[(ok, qlen, cnm, cong, flow, src, n, cp)]`` and the counters
    ``[congestion CNMs, release CNMs, set full, clamped, rejected]``."""
    cap = 2 ** q_bits
    k = threshold
    queue = {p: 0 for p in range(n_ports)}
    isolated = {p: {} for p in range(n_ports)}
    out, cnt = [], [0, 0, 0, 0, 0]
    debts = set()
    for e in events:
        if "ctl" in e:
            if e["ctl"]["table"] == THRESHOLD and e["ctl"]["data"] % cap != 0:
                k = e["ctl"]["data"] % cap
            continue
        it = e["item"]
        p = it["port"]
        if p not in queue:
            out.append((0, 0, 0, 0, 0, 0, 0, 0))
            cnt[4] += 1
            continue
        want = queue[p] + (-it["amount"] if it["deq"] else it["amount"])
        queue[p] = min(max(want, 0), cap - 1)
        cnt[3] += queue[p] != want
        here = isolated[p]
        row = (1, queue[p], 0, 0, 0, 0, 0, 0)
        if queue[p] >= k:
            if not it["deq"] and it["flow"] not in [f for f, _ in here.values()]:
                free = [s for s in range(n_slots) if s not in here]
                if free:
                    here[free[0]] = (it["flow"], it["src"])
                    debts = {d for d in debts if d[0] != p} | {(p, s) for s in here if s != free[0]}
                    row = (1, queue[p], 1, 1, it["flow"], it["src"], len(here), p)
                    cnt[0] += 1
                else:
                    cnt[2] += 1
        elif here:
            s = min(here)
            row = (1, queue[p], 1, 0, here[s][0], here[s][1], len(here), p)
            del here[s]
            debts = {d for d in debts if d[0] != p} | {(p, t) for t in here}
            cnt[1] += 1
        if debts and not row[2]:
            fp, fs = min(debts)
            debts.discard((fp, fs))
            row = (1, queue[p], 1, 1, isolated[fp][fs][0], isolated[fp][fs][1], len(isolated[fp]), fp)
        out.append(row)
    return out, cnt


def _fields(outputs):
    return [(o["ok"], o["qlen"], o["cnm"], o["cnm_cong"], o["cnm_flow"], o["cnm_src"], o["cnm_n"], o["cnm_cp"])
            for o in outputs]


# -- the hand-worked sequence ------------------------------------------------------------------------------------------

def hand_worked():
    """Events and expected (ok, qlen, cnm, cong, flow, src, n, cp), worked by hand (P: 3 ports, 2 slots, 8-bit
    estimates (top 255), K 60); and the expected counters."""
    ev, want = [], []
    ev += [_e(0, 30, 1, 2)]; want += [(1, 30, 0, 0, 0, 0, 0, 0)]    # 1 q 30 < 60: nothing
    ev += [_e(0, 30, 2, 3)]; want += [(1, 60, 1, 1, 2, 3, 1, 0)]    # 2 q 60 reaches K: flow 2 notified, n 1
    ev += [_e(0, 10, 2, 3)]; want += [(1, 70, 0, 0, 0, 0, 0, 0)]    # 3 flow 2 already notified: nothing
    ev += [_e(0, 5, 1, 2)]; want += [(1, 75, 1, 1, 1, 2, 2, 0)]     # 4 flow 1 notified, n 2
    ev += [_e(0, 5, 7, 1)]; want += [(1, 80, 1, 1, 2, 3, 2, 0)]     # 5 set full (counted); flow 2 owed since 4:
    #                                                                   refresh, n 2 (its first CNM said 1)
    ev += [_d(0, 10, 2)]; want += [(1, 70, 0, 0, 0, 0, 0, 0)]       # 6 dequeue above K: nothing
    ev += [_e(1, 63, 2, 0)]; want += [(1, 63, 1, 1, 2, 0, 1, 1)]    # 7 port 1 has its own set: flow 2 again, n 1
    ev += [_d(0, 20, 7)]; want += [(1, 50, 1, 0, 2, 3, 2, 0)]       # 8 q 50 < 60: release slot 0 (flow 2), n 2
    ev += [_e(0, 5, 3, 1)]; want += [(1, 55, 1, 0, 1, 2, 1, 0)]     # 9 still below: release flow 1, n 1
    ev += [_e(0, 5, 3, 1)]; want += [(1, 60, 1, 1, 3, 1, 1, 0)]     # 10 up again: flow 3, n 1
    ev += [_d(0, 63, 3)]; want += [(1, 0, 1, 0, 3, 1, 1, 0)]        # 11 60 - 63: clamped to 0; release flow 3
    ev += [_d(0, 1, 3)]; want += [(1, 0, 0, 0, 0, 0, 0, 0)]         # 12 0 - 1: clamped; set empty, nothing
    ev += [_e(3, 5, 4, 1)]; want += [(0, 0, 0, 0, 0, 0, 0, 0)]      # 13 port 3 of 3: rejected
    ev += [_e(1, 63, 9, 1)]; want += [(1, 126, 1, 1, 9, 1, 2, 1)]   # 14 port 1: flow 9, n 2
    ev += [_e(1, 63, 9, 1)]; want += [(1, 189, 1, 1, 2, 0, 2, 1)]   # 15 flow 9 notified already: port 1's
    #                                                                   flow 2 (src 0) refreshed at n 2
    # (9: flow 1 owed since 8, but 9 carries its own release, of flow 1; 20 likewise for flow 9)
    ev += [_e(1, 63, 4, 1)]; want += [(1, 252, 0, 0, 0, 0, 0, 0)]   # 16 set full: counted
    ev += [_e(1, 10, 2, 0)]; want += [(1, 255, 0, 0, 0, 0, 0, 0)]   # 17 262 clamped to 255; flow 2 notified
    ev += [_k(200), _k(5, table=1), _k(256)]                     # K 200; then table 1 and K = 256 mod 256 = 0 ignored
    ev += [_d(1, 60, 5)]; want += [(1, 195, 1, 0, 2, 0, 2, 1)]      # 19 195 < 200: release flow 2 (src 0), n 2
    ev += [_d(1, 0, 5)]; want += [(1, 195, 1, 0, 9, 1, 1, 1)]       # 20 release flow 9, n 1
    ev += [_e(1, 5, 5, 3)]; want += [(1, 200, 1, 1, 5, 3, 1, 1)]    # 21 200 reaches K 200: flow 5, n 1
    ev += [_e(2, 0, 6, 0)]; want += [(1, 0, 0, 0, 0, 0, 0, 0)]      # 22 port 2 empty: nothing
    # congestion 2 4 7 10 14 21; release 8 9 11 19 20; full 5 16; clamped 11 12 17; rejected 13
    return ev, want, [6, 5, 2, 3, 1]


def test_hand_worked_on_the_rederivation_and_the_golden_model():
    ev, want, counts = hand_worked()
    got, n = rederive(ev, **P)
    assert got == want and n == counts
    model = Cnm(**P)
    out = []
    for e in ev:
        if "ctl" in e:
            model.control(e["ctl"])
        else:
            out.append(model.process(e["item"]))
    assert _fields(out) == want
    assert model.stats() == counts


def test_rtl_hand_worked():
    """Back to back (no idle): consecutive events of one port go through the estimate and the set in turn."""
    ev, want, counts = hand_worked()
    stats = {}
    out = run_rtl("flb-cnm", P, ev, compare=False, stats=stats)
    bad = [(n, w, g) for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts


# -- signature and parameters ------------------------------------------------------------------------------------------

def test_signature():
    dut = CnmRTL(**P)
    dut._MustUse__silence = True
    members = dut.signature.members
    assert set(members) == {"i", "o", "ctl", "stats"}
    item = members["i"].signature.members["payload"].shape
    res = members["o"].signature.members["payload"].shape
    # port 2 bits (3 ports), src 2 bits (4 edges), 5-bit flows, 6-bit amounts, 8-bit estimates, n 0..2: 2 bits
    assert [(n, f.width) for n, f in item] == [("port", 2), ("deq", 1), ("amount", 6), ("flow", 5), ("src", 2),
                                               ("tag", 16)]
    assert [(n, f.width) for n, f in res] == [("port", 2), ("deq", 1), ("flow", 5), ("src", 2), ("tag", 16),
                                              ("ok", 1), ("qlen", 8), ("cnm", 1), ("cnm_cong", 1),
                                              ("cnm_flow", 5), ("cnm_src", 2), ("cnm_n", 2), ("cnm_cp", 2)]
    assert members["stats"].shape == 5 * 32
    assert dut.latency == 6


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_ports=0), ValueError), (dict(n_ports=33), ValueError), (dict(n_slots=0), ValueError),
    (dict(n_slots=9), ValueError), (dict(n_edges=1025), ValueError), (dict(flow_bits=25), ValueError),
    (dict(q_bits=3), ValueError), (dict(q_bits=33), ValueError), (dict(q_bits=8, amount_bits=9), ValueError),
    (dict(threshold=0), ValueError), (dict(q_bits=8, amount_bits=8, threshold=256), ValueError),
    (dict(n_ports=2.0), TypeError), (dict(threshold=True), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        CnmRTL(**kwargs)


# -- random traces and storms ------------------------------------------------------------------------------------------

PARAMS = [P, dict(n_ports=4, n_slots=3, n_edges=3, flow_bits=4, amount_bits=4, q_bits=6, threshold=20),
          dict(n_ports=2, n_slots=1, n_edges=5, flow_bits=6, amount_bits=8, q_bits=10, threshold=300)]


def storm(params, n_items, seed=0):
    """Every port fills past K together, round-robin (a CNM on most events: many flows, every port crossing
    within a few clocks), then every port drains below K together (the releases), repeated."""
    import random
    rng = random.Random(seed)
    npo, a = params["n_ports"], (1 << params["amount_bits"]) - 1
    k = params["threshold"]
    ev = []
    while len(ev) < n_items:
        for deq in (0, 1):
            for t in range(2 * (k // max(1, a) + 2) * npo):
                ev.append(_e(t % npo, rng.randrange(a // 2, a + 1), rng.randrange(1 << params["flow_bits"]),
                             rng.randrange(params["n_edges"]), deq))
    return ev[:n_items]


@pytest.mark.parametrize("seed", range(12))
def test_golden_matches_the_rederivation(seed):
    params = PARAMS[seed % 3]
    ev = cnm_trace(seed, 2000, **params)
    out = run_golden("flb-cnm", params, ev)
    assert _fields(out) == rederive(ev, **params)[0]


def test_trace_exercises_every_outcome():
    """The random trace and the storm reach what the hand-worked case does."""
    for params in PARAMS:
        ev = cnm_trace(3, 2000, **params)
        _, n = rederive(ev, **params)
        forged = params["n_ports"] & (params["n_ports"] - 1)        # a port field with values out of range
        assert min(n[:2]) > 20 and n[2] > 5 and n[3] > 5 and (n[4] > 10 or not forged), n
        _, n = rederive(storm(params, 600), **params)
        assert n[0] > 40 and n[1] > 40, n


@pytest.mark.parametrize("params", PARAMS[:2], ids=["P", "q6"])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_against_the_rederivation(params, idle, backpressure):
    ev = cnm_trace(11, 600, **params) + storm(params, 200, seed=1)
    stats = {}
    out = run_rtl("flb-cnm", params, ev, idle=idle, backpressure=backpressure, seed=5, compare=False, stats=stats)
    want, counts = rederive(ev, **params)
    bad = [n for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts


def test_one_event_per_clock():
    """A storm without control commands (a command drains the pipeline): every event taken back to back."""
    ev = storm(P, 300, seed=2)
    stats = {}
    out = run_rtl("flb-cnm", P, ev, compare=False, stats=stats)
    assert _fields(out) == rederive(ev, **P)[0]
    assert len(out) == 300 and stats["items_per_clock"] == 1.0


@pytest.mark.skipif(not FULL, reason="LBPIPE_FULL=1")
@pytest.mark.parametrize("seed", range(2))
def test_rtl_long(seed):
    params = PARAMS[seed % 3]
    ev = cnm_trace(100 + seed, 4000, **params) + storm(params, 1000, seed=seed)
    out = run_rtl("flb-cnm", params, ev, idle=0.2, backpressure=0.3, seed=seed, compare=False)
    assert _fields(out) == rederive(ev, **params)[0]
