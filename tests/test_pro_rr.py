"""PRO orchestrated round robin (pro-rr): signature and parameters, the golden model against sequences worked by hand
from Algorithm 1 and section III-A, the RTL against hand-worked sequences and against the golden model (random QP
sets joining and leaving, batch sizes 1 and 8, idle input, back-pressure), one packet per clock measured, and the
round-robin properties the paper claims checked directly on RTL outputs.

Every expected path below is worked out by hand in the comments (Algorithm 1: span = active QPs made odd, or made
coprime to M / n; a QP's first packet takes C; then C = path + n), not computed by the code under test."""

import os
import random

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.pro.rr import RoundRobin as RoundRobinRTL
from lbpipe.sim.pro.rr import RoundRobin, rr_commands, rr_trace, span

FULL = os.environ.get("LBPIPE_FULL") == "1"

# The datasheet's control tables, written again here.
JOIN, LEAVE, SEED, PATH_ID = 0, 1, 2, 3


def _pkt(qp, tor, tag=0):
    return {"item": {"kind": 1, "qp": qp, "tor": tor, "tag": tag}}


def _ctl(table, index, data):
    return {"ctl": {"table": table, "index": index, "data": data}}


def _paths(model, order, tor=0):
    return [model.process({"qp": q, "tor": tor})["path"] for q in order]


# -- signature and parameters -------------------------------------------------------------------------------------

def test_signature():
    dut = RoundRobinRTL(n_qps=10240, n_tors=16, m_paths=8, batch=1)
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "o", "ctl", "stats"}
    item = dut.signature.members["i"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("qp", 14), ("tor", 4), ("tag", 16)]
    res = dut.signature.members["o"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in res] == [("kind", 3), ("tag", 16), ("hit", 1), ("path", 3), ("path_id", 12)]
    assert dut.signature.members["stats"].shape == 96
    assert dut.latency == 5


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_qps=1), ValueError), (dict(n_qps=(1 << 20) + 1), ValueError), (dict(n_tors=0), ValueError),
    (dict(n_tors=65), ValueError), (dict(m_paths=65), ValueError), (dict(m_paths=0), ValueError),
    (dict(m_paths=8, batch=3), ValueError), (dict(m_paths=8, batch=16), ValueError),
    (dict(batch=True), TypeError), (dict(n_qps=8.0), TypeError),
])
def test_bad_parameters(kwargs, exc):
    for cls in (RoundRobinRTL, RoundRobin):
        with pytest.raises(exc):
            cls(**kwargs)


# -- the golden model against hand-worked sequences ------------------------------------------------------------------

def test_span_rule_by_hand():
    # Power-of-two slot counts: the active count made odd (Algorithm 1, lines 6-9).
    assert [span(p, 8) for p in (1, 2, 3, 4, 7, 8)] == [1, 3, 3, 5, 7, 9]
    # M = 6: 2 -> 5 (3 shares 3 with 6, 4 shares 2), 3 -> 5, 7 -> 7; M / n = 1: anything (one slot).
    assert [span(p, 6) for p in (1, 2, 3, 5, 7)] == [1, 5, 5, 5, 7]
    assert span(4, 1) == 4


def test_figure3_two_qps_four_paths():
    """Figure 3's setting: two QPs toward one ToR, four paths, C = 0. P = 2 -> span 3.
    q1: C=0 -> 0 (C=1); q2: 1 (C=2); q1: 0+3=3 (C=0); q2: 1+3=0 (C=1); q1: 3+3=2; q2: 0+3=3; q1: 2+3=1; q2: 3+3=2.
    Each round the two QPs take different uplinks; each QP covers all four in four packets."""
    m = RoundRobin(n_qps=16, n_tors=2, m_paths=4)
    m.seed(0, 0)
    m.join(1, 0)
    m.join(2, 0)
    got = _paths(m, [1, 2] * 5)
    assert got[0::2] == [0, 3, 2, 1, 0]
    assert got[1::2] == [1, 0, 3, 2, 1]
    assert m.stats() == [10, 0, 0]


def test_three_qps_eight_paths_seeded():
    """M = 8, P = 3 (odd: span 3), C seeded 5. Round 1: 5, 6, 7 (C = 0). Then each QP steps by 3:
    q0 5, 0, 3, 6, 1, 4, 7, 2 (all eight), q1 6, 1, 4, 7, 2, 5, 0, 3, q2 7, 2, 5, 0, 3, 6, 1, 4."""
    m = RoundRobin(n_qps=16, n_tors=4, m_paths=8)
    m.seed(3, 5)
    for q in (0, 1, 2):
        m.join(q, 3)
    got = _paths(m, [0, 1, 2] * 8, tor=3)
    assert got[0::3] == [5, 0, 3, 6, 1, 4, 7, 2]
    assert got[1::3] == [6, 1, 4, 7, 2, 5, 0, 3]
    assert got[2::3] == [7, 2, 5, 0, 3, 6, 1, 4]


def test_span_follows_joins_and_leaves():
    """M = 8, C = 0. q0 alone: 0 (C=1), 0+1=1 (span 1). q1 joins (P=2, span 3): q0 1+3=4 (C=5); q1 first: 5 (C=6);
    q0 4+3=7; q1 5+3=0. q2 joins (P=3, span 3): q2 first takes C = 0+1 = 1 (C=2). q1 leaves (P=2, span 3 again);
    q0 7+3=2; q2 1+3=4. q0 leaves (P=1, span 1): q2 4+1=5."""
    m = RoundRobin(n_qps=16, n_tors=1, m_paths=8)
    m.join(0, 0)
    assert _paths(m, [0, 0]) == [0, 1]
    m.join(1, 0)
    assert _paths(m, [0, 1, 0, 1]) == [4, 5, 7, 0]
    m.join(2, 0)
    assert _paths(m, [2]) == [1]
    m.leave(1)
    assert _paths(m, [0, 2]) == [2, 4]
    m.leave(0)
    assert _paths(m, [2]) == [5]


def test_batch_four_of_eight():
    """M = 8, n = 4: two slots of four consecutive paths; C advances by 4 per batch. One QP (span 1 -> step 4),
    C = 1: 1, 2, 3, 4 (C = 5), then base 1 + 4 = 5: 5, 6, 7, 0 (C = 1), then 1, 2, 3, 4. Two QPs (P = 2, span 3,
    step 3 mod 2 = 1 slot = 4 paths), C = 0: q0 0-3 (C = 4), q1 4-7 (C = 0), q0 4-7, q1 0-3: never the same
    paths at once."""
    m = RoundRobin(n_qps=8, n_tors=2, m_paths=8, batch=4)
    m.seed(1, 1)
    m.join(3, 1)
    assert _paths(m, [3] * 12, tor=1) == [1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4]
    m = RoundRobin(n_qps=8, n_tors=1, m_paths=8, batch=4)
    m.join(0, 0)
    m.join(1, 0)
    got = _paths(m, [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4)
    assert got == [0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, 0, 1, 2, 3]


def test_short_batch_continues():
    """A batch cut short (the QP scheduler moved on) continues where it stopped: M = 8, n = 4, C = 0, one QP:
    0, 1 (short), then 2, 3 finish the batch, then the next batch 4, 5, 6, 7."""
    m = RoundRobin(n_qps=8, n_tors=1, m_paths=8, batch=4)
    m.join(0, 0)
    assert _paths(m, [0] * 8) == [0, 1, 2, 3, 4, 5, 6, 7]


def test_non_power_of_two_paths():
    """M = 6, two QPs, C = 0: span 5 (coprime to 6): q0 0, 5, 4, 3, 2, 1; q1 1, 0, 5, 4, 3, 2. The paper's rule
    (odd: span 3) would send q0 along 0, 3, 0, 3, ...: two of six paths (what breaks without a power of two)."""
    m = RoundRobin(n_qps=8, n_tors=1, m_paths=6)
    m.join(0, 0)
    m.join(1, 0)
    got = _paths(m, [0, 1] * 6)
    assert got[0::2] == [0, 5, 4, 3, 2, 1]
    assert got[1::2] == [1, 0, 5, 4, 3, 2]
    odd_rule = [(0 + 3 * j) % 6 for j in range(6)]
    assert sorted(set(odd_rule)) == [0, 3]


def test_bad_input_and_counters():
    """Misses: a QP that never joined, a QP toward another ToR, a QP out of range (hit 0, path 0, PathID 0, no
    state change). Rejected: join twice, leave of an inactive QP, leave naming the wrong ToR, seed >= M, ToR out of
    range, PathID > 12 bits, unknown table."""
    m = RoundRobin(n_qps=8, n_tors=2, m_paths=4)
    m.seed(0, 2)
    m.join(1, 0)
    miss = {"kind": 1, "tag": 7, "hit": 0, "path": 0, "path_id": 0}
    assert m.process({"kind": 1, "qp": 2, "tor": 0, "tag": 7}) == miss
    assert m.process({"kind": 1, "qp": 1, "tor": 1, "tag": 7}) == miss
    assert m.process({"kind": 1, "qp": 1, "tor": 0, "tag": 7}) == dict(miss, hit=1, path=2, path_id=2)
    for cmd in ([JOIN, 1, 1], [LEAVE, 2, 0], [LEAVE, 1, 1], [SEED, 0, 4], [SEED, 2, 0], [JOIN, 8, 0],
                [JOIN, 3, 2], [PATH_ID, 0 << 6 | 1, 1 << 12], [PATH_ID, 0 << 6 | 4, 5], [PATH_ID, 2 << 6, 5],
                [9, 0, 0]):
        m.control({"table": cmd[0], "index": cmd[1], "data": cmd[2]})
    assert m.stats() == [1, 2, 11]
    # nothing changed: q1 steps by 1 (P = 1) from 2
    assert m.process({"kind": 1, "qp": 1, "tor": 0, "tag": 0})["path"] == 3


def test_path_ids_and_reset():
    """PathID: power-on path | tor << 6 (ToR egress = uplink, Aggr egress = the destination ToR); a written entry
    replaces it. Reset clears the QPs, C and P and keeps the PathIDs."""
    m = RoundRobin(n_qps=8, n_tors=4, m_paths=4)
    m.control({"table": PATH_ID, "index": 3 << 6 | 1, "data": 0xABC})
    m.seed(3, 1)
    m.join(0, 3)
    assert m.process({"qp": 0, "tor": 3})["path_id"] == 0xABC
    assert m.process({"qp": 0, "tor": 3})["path_id"] == 2 | 3 << 6
    m.reset()
    assert m.stats() == [0, 0, 0]
    assert m.process({"qp": 0, "tor": 3})["hit"] == 0
    m.join(0, 3)
    assert m.process({"qp": 0, "tor": 3}) == {"kind": 0, "tag": 0, "hit": 1, "path": 0, "path_id": 0 | 3 << 6}
    m.join(1, 3)
    assert m.process({"qp": 1, "tor": 3})["path_id"] == 0xABC


def test_rr_commands():
    assert rr_commands(seeds={2: 5}, path_ids=[(1, 3, 77)], joins=[(4, 2)], leaves=[(4, 2)]) == [
        {"table": SEED, "index": 2, "data": 5}, {"table": PATH_ID, "index": 1 << 6 | 3, "data": 77},
        {"table": JOIN, "index": 4, "data": 2}, {"table": LEAVE, "index": 4, "data": 2}]


# -- RTL -----------------------------------------------------------------------------------------------------------

def test_rtl_figure3_by_hand():
    """The Figure 3 sequence, plus a second ToR's seeded set, through the RTL back to back, against the hand-worked
    paths (``compare=False``: the golden model is not consulted)."""
    params = dict(n_qps=16, n_tors=4, m_paths=4, batch=1)
    events = [_ctl(SEED, 0, 0), _ctl(SEED, 2, 3), _ctl(JOIN, 1, 0), _ctl(JOIN, 2, 0), _ctl(JOIN, 9, 2)]
    events += [_pkt(q, 0, n) for n, q in enumerate([1, 2] * 5)]
    # q9 alone toward ToR 2 (span 1), C = 3: 3, 0, 1, 2; PathIDs path | 2 << 6
    events += [_pkt(9, 2, 10 + n) for n in range(4)]
    events += [_pkt(5, 0, 14)]                                  # never joined: a miss
    out = run_rtl("pro-rr", params, events, compare=False)
    assert [o["path"] for o in out[:10:2]] == [0, 3, 2, 1, 0]
    assert [o["path"] for o in out[1:10:2]] == [1, 0, 3, 2, 1]
    assert [o["path_id"] for o in out[10:14]] == [3 | 2 << 6, 0 | 2 << 6, 1 | 2 << 6, 2 | 2 << 6]
    assert out[14] == {"kind": 1, "tag": 14, "hit": 0, "path": 0, "path_id": 0}
    assert all(o["hit"] == 1 for o in out[:14])


def _stagger_trace(n_qps, m_paths, batch, rounds, qps, tor, seed_c):
    """QPs joined toward one ToR, then ``rounds`` scheduler rounds back to back (each QP ``batch`` packets)."""
    events = [_ctl(SEED, tor, seed_c)] + [_ctl(JOIN, q, tor) for q in qps]
    tag = 0
    for _ in range(rounds):
        for q in qps:
            for _ in range(batch):
                events.append(_pkt(q, tor, tag & 0xFFFF))
                tag += 1
    return events


@pytest.mark.parametrize("m_paths, batch, n_active", [(8, 1, 4), (16, 8, 2), (16, 1, 5)])
def test_rtl_round_robin_properties(m_paths, batch, n_active):
    """The properties section III-A claims, on RTL outputs: each QP's consecutive M packets use all M paths
    (intra-QP round robin balances the downlinks); within a round the QPs' batches never share a path while
    ``n_active * batch <= M`` (inter-QP staggering balances the uplinks). One packet per clock, measured."""
    params = dict(n_qps=64, n_tors=4, m_paths=m_paths, batch=batch)
    qps = random.Random(m_paths * 10 + n_active).sample(range(64), n_active)
    rounds = 2 * m_paths // batch
    events = _stagger_trace(64, m_paths, batch, rounds, qps, 2, 5)
    stats = {}
    out = run_rtl("pro-rr", params, events, stats=stats, compare=False)
    assert stats["items_per_clock"] == 1.0
    per_qp = {q: [] for q in qps}
    for o, e in zip(out, [e for e in events if "item" in e]):
        assert o["hit"] == 1
        per_qp[e["item"]["qp"]].append(o["path"])
    for q, paths in per_qp.items():
        for j in range(0, len(paths) - m_paths + 1, m_paths):
            assert sorted(paths[j:j + m_paths]) == list(range(m_paths)), (q, paths)
    if n_active * batch <= m_paths:
        width = n_active * batch
        for j in range(0, len(out), width):
            round_paths = [o["path"] for o in out[j:j + width]]
            assert len(set(round_paths)) == width, round_paths


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_random_joins_and_leaves(batch, idle, backpressure):
    """Random QP sets joining and leaving (the trace generator), RTL against the golden model, output by output and
    (without idle or back-pressure) cycle by cycle."""
    params = dict(n_qps=48, n_tors=6, m_paths=16, batch=batch)
    events = rr_trace(11 + batch, 400, **params)
    out = run_rtl("pro-rr", params, events, idle=idle, backpressure=backpressure, seed=batch)
    assert out == run_golden("pro-rr", params, events)


def test_rtl_back_to_back_same_qp():
    """One QP, then two QPs of the same ToR alternating, back to back (the read-modify-write hazards at distances
    1, 2 and 3): the RTL matches the hand-worked paths. M = 8, C = 6, q7 alone (span 1): 6, 7, 0, 1, 2, 3; q8
    joins (P = 2, span 3); q7 3+3=6 (C=7), q8 first 7 (C=0), q7 1, q8 2, q7 4, q8 5."""
    params = dict(n_qps=16, n_tors=2, m_paths=8, batch=1)
    events = [_ctl(SEED, 1, 6), _ctl(JOIN, 7, 1)] + [_pkt(7, 1, n) for n in range(6)]
    events += [_ctl(JOIN, 8, 1)] + [_pkt(q, 1, 6 + n) for n, q in enumerate([7, 8] * 3)]
    out = run_rtl("pro-rr", params, events, compare=False)
    assert [o["path"] for o in out] == [6, 7, 0, 1, 2, 3, 6, 7, 1, 2, 4, 5]


@pytest.mark.skipif(not FULL, reason="long random regression: LBPIPE_FULL=1")
@pytest.mark.parametrize("seed", range(2))
def test_rtl_long_random(seed):
    rng = random.Random(seed)
    m = rng.choice([4, 8, 12, 16, 64])
    params = dict(n_qps=rng.randrange(2, 300), n_tors=rng.randrange(1, 65), m_paths=m,
                  batch=rng.choice([d for d in range(1, m + 1) if m % d == 0]))
    events = rr_trace(seed, 3000, **params)
    assert run_rtl("pro-rr", params, events, idle=0.2, backpressure=0.3, seed=seed) == run_golden("pro-rr", params,
                                                                                                   events)


@pytest.mark.parametrize("testcase", ["reset_mid_traffic", "reset_state"])
def test_rtl_reset_with_batches(testcase):
    """The generic reset tests (they run at test_params[0], batch 1) with batch 8: a reset in the middle of traffic
    clears QPs, counters and the batch positions and keeps the PathIDs, as the golden model's ``reset()`` says."""
    params = dict(n_qps=24, n_tors=3, m_paths=16, batch=8)
    run_rtl("pro-rr", params, rr_trace(21, 400, **params), testcase=testcase, idle=0.2, backpressure=0.3)
