"""LAPS softmax path choice: parameters and layouts, the golden model against an independent float64 softmax over a
dense sweep, the authors' worked example, the edge cases, the random source, and the RTL (edge cases, statistics).

Expected values come from outside the code under test: the float64 softmax below (numpy), the worked example of
the authors' simulator (shared/reference/README.md), hand-worked cases, and the GF(2) period argument for xorshift32.
"""

import json
import math
import pathlib
import random
import tempfile

import numpy as np
import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.laps.softmax import Softmax as SoftmaxRTL, SoftmaxItem, SoftmaxResult
from lbpipe.sim.laps.softmax import Softmax, softmax_commands, xorshift32

INF = 0xFFFF_FFFF
#: The datasheet's bound on |P_hw - P_float64| per path at the default precision (the goal is 2**-10).
BOUND = 2.0 ** -11.5
#: What the bound becomes at the narrower and wider settings (datasheet's error table).
BOUNDS = {10: 2.0 ** -9, 16: BOUND, 20: BOUND}


# -- independent reference -------------------------------------------------------------------------------------------

def beta_held(beta):
    """The beta the register holds: the datasheet's register format, 17 bits of beta * 2**24 per ns."""
    return round(beta * 2 ** 24) / 2 ** 24


def ref_softmax(real_vals, valid, beta):
    """float64 softmax over the valid, finite slots (0 elsewhere); shift-invariant form."""
    d = np.array(real_vals, dtype=np.float64)
    ok = np.array(valid, dtype=bool) & (d != INF)
    out = np.zeros(len(d))
    if ok.any():
        z = -beta * (d[ok] - d[ok].min())
        e = np.exp(z)
        out[ok] = e / e.sum()
    return out


def item_of(real_vals, valid=None, pids=None, k=None, tag=0):
    k = k or len(real_vals)
    valid = valid if valid is not None else [1] * len(real_vals)
    item = {"tag": tag, "base_val_max": 0}
    for i in range(k):
        item[f"valid_{i}"] = valid[i] if i < len(real_vals) else 0
        item[f"real_val_{i}"] = real_vals[i] if i < len(real_vals) else 0
        item[f"pid_{i}"] = pids[i] if pids else 0x100 + i
    return item


def model_with(beta=None, *, k=8, precision=16, seed=1, **kw):
    m = Softmax(k=k, precision=precision)
    for c in softmax_commands(beta, seed=seed, precision=precision, **kw):
        m.control(c)
    return m


def hw_probs(model, item):
    """The probabilities the arithmetic gives before the random draw: w_i / sum w."""
    _, w, _ = model.weights(item)
    s = sum(w)
    return np.array(w, dtype=np.float64) / s if s else np.zeros(len(w))


# -- parameters and layouts ------------------------------------------------------------------------------------------

def test_layouts():
    item = SoftmaxItem(k=3)
    names = [name for name, _ in item]
    assert names == ["valid_0", "pid_0", "real_val_0", "valid_1", "pid_1", "real_val_1", "valid_2", "pid_2",
                     "real_val_2", "base_val_max", "tag"]
    assert item.size == 3 * (1 + 16 + 32) + 32 + 16
    res = dict((n, f.width) for n, f in SoftmaxResult(k=8))
    assert res == {"slot": 3, "pid": 16, "none": 1, "tag": 16}
    assert dict((n, f.width) for n, f in SoftmaxResult(k=16))["slot"] == 4
    assert dict((n, f.width) for n, f in SoftmaxResult(k=1))["slot"] == 1


@pytest.mark.parametrize("kw, exc", [(dict(k=0), ValueError), (dict(k=17), ValueError), (dict(precision=7), ValueError),
                                     (dict(precision=21), ValueError), (dict(k=2.0), TypeError),
                                     (dict(precision=True), TypeError)])
def test_bad_parameters(kw, exc):
    with pytest.raises(exc):
        SoftmaxRTL(**kw)
    with pytest.raises(exc):
        Softmax(**kw)


def test_latency_and_defaults():
    c = SoftmaxRTL()
    assert (c.k, c.precision, c.latency) == (8, 16, 19)
    assert SoftmaxRTL(k=16).latency == 20 and SoftmaxRTL(k=2).latency == 17


def test_beta_range_refused():
    with pytest.raises(ValueError):
        softmax_commands(1e-2)             # above the 17-bit register
    with pytest.raises(ValueError):
        softmax_commands(1e-8)             # below the smallest supported non-zero beta
    with pytest.raises(ValueError):
        softmax_commands(-1.0)
    assert softmax_commands(0.0)[-1] == {"table": 1, "index": 0, "data": 0}


# -- accuracy --------------------------------------------------------------------------------------------------------

def sweep_errors(precision, betas, rng, n_random=300):
    """Worst |P_hw - P_float64| over: two paths, one at every difference x of a dense grid from 0 to the PIT's
    infinity minus one, for every beta; and random 8-path vectors."""
    xs = sorted(set([0, 1, 2, 3] + [int(v) for v in np.unique(np.round(np.logspace(0, math.log10(INF - 1), 3000)))]
                    + [rng.randrange(1 << 16) for _ in range(300)] + [INF - 1, INF - 2]))
    worst = 0.0
    for beta in betas:
        m = model_with(beta, precision=precision)
        b = beta_held(beta)
        for x in xs:
            for base in (0, INF - 1 - x):
                vals = [base, base + x]
                item = item_of(vals, k=8)
                err = np.abs(hw_probs(m, item) - ref_softmax(vals + [0] * 6, [1, 1] + [0] * 6, b)).max()
                worst = max(worst, err)
        for _ in range(n_random):
            base = rng.randrange(INF - (1 << 20))
            vals = [base + rng.randrange(1 << rng.choice([4, 8, 12, 16, 20])) for _ in range(8)]
            valid = [int(rng.random() < 0.8) for _ in range(8)]
            valid[0] = 1
            err = np.abs(hw_probs(m, item_of(vals, valid)) - ref_softmax(vals, valid, b)).max()
            worst = max(worst, err)
    return worst


BETAS = [0.0, 4 / 2 ** 24, 1 / 1e6, 1 / 20000, 1 / 4664, 1 / 1000, 1 / 300, 1 / 150, 131071 / 2 ** 24]


@pytest.mark.parametrize("precision", [16, 10, 20])
def test_golden_within_bound_of_float64(precision):
    worst = sweep_errors(precision, BETAS, random.Random(precision), n_random=100)
    assert worst <= BOUNDS[precision], f"worst error {worst:.3g} = 2**{math.log2(worst):.2f}"


def test_worked_example():
    """The authors' simulator: realVal [4332, 4332, 8000, 12000] ns, max baseVal 4664 ns, alpha = 1."""
    want = [0.377551, 0.377551, 0.171959, 0.072939]
    m = model_with(alpha=1.0, base_val_max=4664, k=4)
    got = m.probabilities(item_of([4332, 4332, 8000, 12000]))
    assert np.abs(np.array(got) - want).max() <= BOUND
    m8 = model_with(alpha=1.0, base_val_max=4664)
    got8 = m8.probabilities(item_of([4332, 8000, 4332, 12000, 1, 2, 3, 4], valid=[1, 1, 1, 1, 0, 0, 0, 0]))
    assert np.abs(np.array(got8[:4]) - [want[0], want[2], want[1], want[3]]).max() <= BOUND
    assert got8[4:] == [0.0] * 4


# -- edge cases (golden model; the RTL runs the same items below) ----------------------------------------------------

EDGE_ITEMS = {
    "none valid": item_of([5, 6, 7, 8, 9, 10, 11, 12], valid=[0] * 8),
    "all infinite": item_of([INF] * 8),
    "one valid": item_of([900, 5, 5, 5, 5, 5, 5, 5], valid=[1, 0, 0, 0, 0, 0, 0, 0]),
    "one finite": item_of([INF, INF, INF, 77, INF, INF, INF, INF]),
    "all equal": item_of([12345] * 8),
    "all slow": item_of([INF - 1, INF - 2, INF - 3, INF - 1, INF - 500, INF - 2, INF - 9, INF - 1]),
    "all slow, spread": item_of([0xF000_0000 + 1000 * i for i in range(8)]),
    "zero latency": item_of([0, 0, 1, 2, 3, 4, 5, INF]),
}


def test_no_valid_path_says_none():
    m = model_with(1 / 300)
    for name in ("none valid", "all infinite"):
        out = m.process(EDGE_ITEMS[name])
        assert out == {"slot": 0, "pid": 0, "none": 1, "tag": 0}, name


def test_one_valid_path_always_chosen():
    m = model_with(1 / 300)
    for name, slot in (("one valid", 0), ("one finite", 3)):
        outs = [m.process(EDGE_ITEMS[name]) for _ in range(200)]
        assert {(o["slot"], o["pid"], o["none"]) for o in outs} == {(slot, 0x100 + slot, 0)}, name


@pytest.mark.parametrize("beta", [0.0, 1 / 300, 131071 / 2 ** 24])
def test_all_equal_is_uniform(beta):
    p = model_with(beta).probabilities(EDGE_ITEMS["all equal"])
    assert max(abs(q - 1 / 8) for q in p) <= 2 ** -15


@pytest.mark.parametrize("beta", [4 / 2 ** 24, 1 / 4664, 131071 / 2 ** 24])
def test_all_paths_slow_still_choose(beta):
    m = model_with(beta)
    for name in ("all slow", "all slow, spread"):
        item = EDGE_ITEMS[name]
        outs = [m.process(item) for _ in range(300)]
        assert all(o["none"] == 0 for o in outs), name
        ref = ref_softmax([item[f"real_val_{i}"] for i in range(8)], [1] * 8, beta_held(beta))
        assert np.abs(np.array(m.probabilities(item)) - ref).max() <= BOUND, name


def test_infinity_never_chosen():
    m = model_with(0.0)
    item = item_of([INF, 10, INF, 10_000_000, INF, 3, INF, 4_000_000_000])
    outs = [m.process(item) for _ in range(2000)]
    assert not {o["slot"] for o in outs} & {0, 2, 4, 6}
    p = m.probabilities(item)
    assert [p[i] for i in (0, 2, 4, 6)] == [0, 0, 0, 0]


def test_beta_zero_is_uniform_spraying():
    """beta = 0: RPS over the valid paths, whatever their latencies (paper, section II-E)."""
    item = item_of([1, 10 ** 9, 5, INF - 1, 77, 3, 2 ** 31, 8], valid=[1, 1, 1, 1, 0, 1, 1, 1])
    p = model_with(0.0).probabilities(item)
    assert p[4] == 0 and max(abs(p[i] - 1 / 7) for i in range(8) if i != 4) <= 2 ** -15


def test_beta_largest_is_argmax():
    """The largest beta (1/128 per ns): a path 2 us slower than the fastest gets exp(-15.6), below 2**-16."""
    item = item_of([5000, 3000, 3000 + 2048, 9000, 3000 + 4000, INF, 10 ** 6, 3000 + 2100])
    p = model_with(131071 / 2 ** 24).probabilities(item)
    assert p[1] >= 1 - 2 ** -15 and sum(p) == 1.0


def test_zero_tables_fall_back_to_the_fastest():
    """Forged control input: an all-zero exponent table gives every weight 0; the fastest valid path is chosen."""
    m = Softmax()
    m.control({"table": 1, "index": 0, "data": 5000})
    outs = [m.process(EDGE_ITEMS["all slow"]) for _ in range(50)]
    assert {o["slot"] for o in outs} == {4}


# -- random source ---------------------------------------------------------------------------------------------------

def _gf2_matrix(step):
    cols = [step(1 << j) for j in range(32)]
    return np.array([[(cols[j] >> i) & 1 for j in range(32)] for i in range(32)], dtype=np.int64)


def _gf2_pow(mat, e):
    out = np.eye(32, dtype=np.int64)
    while e:
        if e & 1:
            out = (out @ mat) % 2
        mat = (mat @ mat) % 2
        e >>= 1
    return out


def test_generator_period_is_2_32_minus_1():
    """xorshift32 is linear over GF(2): its period is 2**32 - 1 for every non-zero state iff T**(2**32-1) = I and
    T**((2**32-1)/q) != I for each prime q of 2**32 - 1 = 3 * 5 * 17 * 257 * 65537."""
    t = _gf2_matrix(xorshift32)
    n = 2 ** 32 - 1
    eye = np.eye(32, dtype=np.int64)
    assert (_gf2_pow(t, n) == eye).all()
    for q in (3, 5, 17, 257, 65537):
        assert not (_gf2_pow(t, n // q) == eye).all(), q


def test_seed_zero_is_replaced_and_reset_restarts_the_stream():
    m = Softmax()
    m.control({"table": 1, "index": 1, "data": 0})
    assert m.state != 0
    item = EDGE_ITEMS["all equal"]
    for c in softmax_commands(0.0, seed=42):
        m.control(c)
    first = [m.process(item)["slot"] for _ in range(40)]
    m.reset()
    assert [m.process(item)["slot"] for _ in range(40)] == first


# -- RTL ---------------------------------------------------------------------------------------------------------------

def _fastest(item, k=8):
    ok = [i for i in range(k) if item[f"valid_{i}"] and item[f"real_val_{i}"] != INF]
    return min(ok, key=lambda i: (item[f"real_val_{i}"], i)) if ok else None


def _edge_trace(k=8):
    # First, beta with the exponent tables still all zero (as after power-up): every weight is 0, so every decision
    # must fall back to the fastest valid slot (tags 300 and up).
    events = [{"ctl": softmax_commands(1 / 300, table=False)[0]}]
    events += [{"item": dict(item, tag=300 + n)} for n, item in enumerate(EDGE_ITEMS.values())]
    events += [{"ctl": c} for c in softmax_commands(1 / 300, seed=99)]
    for n, item in enumerate(list(EDGE_ITEMS.values()) * 6):
        events.append({"item": dict(item, tag=n)})
    events += [{"ctl": c} for c in softmax_commands(131071 / 2 ** 24, table=False)]
    events += [{"item": dict(item, tag=100 + n)} for n, item in enumerate(EDGE_ITEMS.values())]
    events += [{"ctl": c} for c in softmax_commands(0.0, table=False)]
    events += [{"item": dict(item, tag=200 + n)} for n, item in enumerate(EDGE_ITEMS.values())]
    return events


def test_rtl_edge_cases():
    """The edge cases through the RTL (with idle input and back-pressure), first with all-zero tables (forged or
    unwritten: the fastest slot is chosen), then with the tables at three betas: outputs equal the golden model's,
    and the properties hold on the RTL's own outputs."""
    events = _edge_trace()
    out = run_rtl("laps-softmax", {}, events, idle=0.2, backpressure=0.3, seed=5)
    assert out == run_golden("laps-softmax", {}, events)
    items = [e["item"] for e in events if "item" in e]
    names = list(EDGE_ITEMS)
    for item, o in zip(items, out):
        name = names[item["tag"] % 100 % len(names)]
        if item["tag"] >= 300 and _fastest(item) is not None:
            assert o["slot"] == _fastest(item), f"{name}: zero tables must choose the fastest slot"
        if name in ("none valid", "all infinite"):
            assert (o["none"], o["slot"], o["pid"]) == (1, 0, 0)
        else:
            assert o["none"] == 0 and item[f"valid_{o['slot']}"] and item[f"real_val_{o['slot']}"] != INF
            assert o["pid"] == item[f"pid_{o['slot']}"]


def _chi2_critical(df, z=3.719):
    """Wilson-Hilferty approximation of the chi-square quantile (z = 3.719: p = 1e-4)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


STAT_VECTORS = [
    (1 / 4664, [4332, 4332, 8000, 12000, INF, 5000, 4400, 30000]),
    (1 / 300, [1000, 1100, 1200, 1300, 1400, 1500, 1600, 1700]),
    (0.0, [3, 2 ** 31, 5, 7, INF - 1, 9, 11, 13]),
    (1 / 150, [100, 130, 160, 190, 220, 250, 280, 310]),
]


def run_statistics(n):
    """Drive ``n`` decisions per vector of STAT_VECTORS through the RTL; returns (counts, golden probabilities)."""
    from lbpipe.engine import top_verilog
    from lbpipe.blocks import get_block
    from lbpipe.tb.lib.runner import run_cocotb
    block = get_block("laps-softmax")
    params = block.resolve({})
    spec = {"commands": softmax_commands(1 / 4664, seed=2024), "vectors": []}
    probs = []
    for beta, vals in STAT_VECTORS:
        item = item_of(vals)
        del item["tag"]
        spec["vectors"].append({"commands": softmax_commands(beta, table=False), "item": item, "n": n})
        probs.append(model_with(beta).probabilities(item_of(vals)))
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "counts.json"
        env = {"LBPIPE_BLOCK": block.name, "LBPIPE_PARAMS": json.dumps(params),
               "LBPIPE_STAT_VECTORS": json.dumps(spec), "LBPIPE_STAT_OUT": str(out)}
        run_cocotb(top_verilog(block, params), toplevel="lbpipe_top", test_module=block.tb_module,
                   testcase="statistics", extra_env=env)
        counts = json.loads(out.read_text())
    return counts, probs


def chi_square_failures(counts, probs, n):
    bad = []
    for v, (c, p) in enumerate(zip(counts, probs)):
        if sum(c) != n:
            bad.append(f"vector {v}: {sum(c)} decisions, not {n}")
        if any(ci and not pi for ci, pi in zip(c, p)):
            bad.append(f"vector {v}: a slot of probability 0 was chosen: {c}")
        used = [(ci, pi) for ci, pi in zip(c, p) if pi > 0]
        stat = sum((ci - n * pi) ** 2 / (n * pi) for ci, pi in used)
        if len(used) > 1 and stat > _chi2_critical(len(used) - 1):
            bad.append(f"vector {v}: chi-square {stat:.1f} > {_chi2_critical(len(used) - 1):.1f} ({c})")
    return bad


def test_rtl_statistics_short():
    n = 3000
    counts, probs = run_statistics(n)
    assert not chi_square_failures(counts, probs, n)


@pytest.mark.regression
def test_rtl_statistics_100k():
    """At least 100,000 RTL decisions (4 vectors x 30,000), chi-square against the exact probabilities."""
    n = 30000
    counts, probs = run_statistics(n)
    assert not chi_square_failures(counts, probs, n)


def test_chi_square_checker_catches_a_skew():
    """The checker itself: counts drawn from the wrong distribution (two probabilities swapped) fail."""
    rng = np.random.default_rng(1)
    p = np.array([0.4, 0.3, 0.2, 0.1])
    n = 30000
    assert not chi_square_failures([list(rng.multinomial(n, p))], [list(p)], n)
    assert chi_square_failures([list(rng.multinomial(n, p[[1, 0, 2, 3]]))], [list(p)], n)


def test_rtl_beta_change_in_flight():
    """A beta write with decisions in flight: every decision is wholly old-beta or wholly new-beta, in order (one
    switch point), and the switch falls inside the run. Expected outputs: the golden model run with each beta
    throughout (the random stream does not depend on beta)."""
    from lbpipe.engine import top_verilog
    from lbpipe.blocks import get_block
    from lbpipe.tb.lib.runner import run_cocotb
    rng = random.Random(11)
    items = []
    for n in range(400):
        vals = [rng.randrange(2000, 12000) for _ in range(8)]
        items.append(dict(item_of(vals), tag=n))
    setup = softmax_commands(1 / 4664, seed=7)
    change = softmax_commands(1 / 300, table=False)[0]
    expect = {}
    for name, beta in (("old", 1 / 4664), ("new", 1 / 300)):
        m = model_with(beta, seed=7)
        expect[name] = [m.process(it) for it in items]
    block = get_block("laps-softmax")
    params = block.resolve({})
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "out.json"
        spec = pathlib.Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"setup": setup, "change": change, "items": items, "after": 150}))
        env = {"LBPIPE_BLOCK": block.name, "LBPIPE_PARAMS": json.dumps(params), "LBPIPE_STAT_OUT": str(out),
               "LBPIPE_INFLIGHT": str(spec)}
        run_cocotb(top_verilog(block, params), toplevel="lbpipe_top", test_module=block.tb_module,
                   testcase="beta_in_flight", extra_env=env)
        got = json.loads(out.read_text())
    assert len(got) == len(items)
    old = [g == e for g, e in zip(got, expect["old"])]
    new = [g == e for g, e in zip(got, expect["new"])]
    assert all(o or n for o, n in zip(old, new)), "a decision matches neither beta"
    switch = next(i for i in range(len(got)) if not old[i])       # first decision that is not old-beta
    assert all(new[switch:]), "a decision after the switch went back to the old beta"
    assert 150 <= switch < 200, f"switch at decision {switch}"


# -- mode sim: the authors' simulator's exp(-alpha d / max baseVal), per item ------------------------------------------

def sim_model(alpha, *, k=8, seed=1):
    m = Softmax(k=k, mode="sim")
    for c in softmax_commands(alpha=alpha, seed=seed, mode="sim"):
        m.control(c)
    return m


WORKED = [0.377551, 0.377551, 0.171959, 0.072939]


def test_sim_mode_worked_example():
    """realVal [4332, 4332, 8000, 12000] ns, max baseVal 4664 ns, alpha = 1, the normalisation done per item."""
    m = sim_model(1.0)
    item = dict(item_of([4332, 4332, 8000, 12000, 0, 0, 0, 0], valid=[1, 1, 1, 1, 0, 0, 0, 0]), base_val_max=4664)
    assert np.abs(np.array(m.probabilities(item)[:4]) - WORKED).max() <= BOUND
    # the same latencies under a destination with twice the baseVal: beta halves
    item2 = dict(item, base_val_max=9328)
    ref = ref_softmax([4332, 4332, 8000, 12000], [1] * 4, 1 / 9328)
    assert np.abs(np.array(m.probabilities(item2)[:4]) - ref).max() <= BOUND
    assert np.abs(np.array(m.probabilities(dict(item, base_val_max=0))[:4]) - 0.25).max() <= 2 ** -15   # beta 0


@pytest.mark.parametrize("alpha", [1.0, 0.25])
def test_sim_mode_within_bound_of_float64(alpha):
    """Against float64 at the exact beta = alpha / B (the reciprocal table's error included), for B up to
    alpha * 2**15 ns (beta register >= 512): the datasheet's 2^-10.5."""
    xs = sorted(set([0, 1, 2, 3] + [int(v) for v in np.unique(np.round(np.logspace(0, math.log10(INF - 1), 800)))]))
    m = sim_model(alpha)
    worst = 0.0
    for b in [130, 300, 1000, 4664, 12345, int(alpha * 32768)]:
        for x in xs:
            it = dict(item_of([0, x], k=8), base_val_max=b)
            ref = ref_softmax([0, x] + [0] * 6, [1, 1] + [0] * 6, alpha / b)
            worst = max(worst, np.abs(hw_probs(m, it) - ref).max())
    assert worst <= 2 ** -10.5, f"worst {worst:.3g} = 2**{math.log2(worst):.2f}"


def test_rtl_sim_mode_worked_example():
    """mode sim on the RTL: the worked example with its baseVal (and a destination with twice it) interleaved,
    3,000 decisions: equal to the golden model, and the counts of the first destination pass a chi-square test
    against the authors' probabilities."""
    params = {"k": 8, "precision": 16, "mode": "sim"}
    events = [{"ctl": c} for c in softmax_commands(alpha=1.0, seed=5, mode="sim")]
    base = item_of([4332, 4332, 8000, 12000, 0, 0, 0, 0], valid=[1, 1, 1, 1, 0, 0, 0, 0])
    n = 3000
    for t in range(n):
        events.append({"item": dict(base, tag=t, base_val_max=4664 if t % 2 == 0 else 9328)})
    out = run_rtl("laps-softmax", params, events)
    assert out == run_golden("laps-softmax", params, events)
    counts = [0] * 8
    for o in out[::2]:
        counts[o["slot"]] += 1
    assert not chi_square_failures([counts], [WORKED + [0] * 4], n // 2)
