"""PRO receiver window (pro-ooo): signature and parameters, the golden model against cases worked by hand (Figure 4
of the paper, PSN wrap, stale and forged PSNs, unknown QPs, idle timeouts, control commands), an independent
closed-loop check (a sender spraying over paths with different delays, random loss, duplicates, retransmission of
what the receiver NACKs), and the RTL against the golden model on the same streams with idle input and
back-pressure.

Expected values are written by hand from the paper (section III-B, Algorithm 2, Figure 4) and the datasheet's rules
(docs/pro_ooo.md); the closed-loop check keeps its own record of what was sent, lost and delivered."""

import random

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.pro.ooo import Ooo as OooRtl
from lbpipe.sim.pro.ooo import Ooo

MOD = 1 << 24
ACCEPT, REPEAT, STALE, BEYOND, UNKNOWN, TIMEOUT, OTHER = 1, 2, 3, 4, 5, 6, 0     # datasheet, "cls"


def create(qp, psn, wnd):
    return {"ctl": {"table": 0, "index": qp, "data": psn | (wnd << 24)}}


def destroy(qp):
    return {"ctl": {"table": 1, "index": qp, "data": 0}}


def pkt(qp, psn, tag=0):
    return {"item": {"kind": 1, "qp": qp, "psn": psn, "tag": tag}}


def timeout(qp, tag=0):
    return {"item": {"kind": 1, "timeout": 1, "qp": qp, "psn": 0, "tag": tag}}


def check(outs, expected):
    """``expected``: per item (cls, head, tail, wnd, nack_psn or None)."""
    assert len(outs) == len(expected)
    for k, (out, (cls, head, tail, wnd, nack)) in enumerate(zip(outs, expected)):
        got = (out["cls"], out["head"], out["tail"], out["wnd"], out["nack_psn"] if out["nack"] else None)
        assert got == (cls, head, tail, wnd, nack), f"event {k}: got {got}, expected {(cls, head, tail, wnd, nack)}"


# -- signature and parameters -------------------------------------------------------------------------------------

def test_signature():
    dut = OooRtl(n_qps=10240, bitmap_len=32)
    dut._MustUse__silence = True
    members = dut.signature.members
    assert set(members) == {"i", "o", "ctl", "stats"}
    item = members["i"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("timeout", 1), ("qp", 14), ("psn", 24), ("tag", 16)]
    res = dict((n, f.width) for n, f in members["o"].signature.members["payload"].shape)
    assert res == {"kind": 3, "tag": 16, "qp": 14, "cls": 3, "nack": 1, "nack_psn": 24, "head": 24, "tail": 24,
                   "wnd": 7, "nacked": 1}
    assert members["stats"].shape == 7 * 32
    assert dut.latency == 8
    # 1 valid + 24 head + 2 pending advance + 32 bitmap + 6 tail offset + 7 wnd + 2 NACK flags
    assert dut.record_bits == 74 and dut.memory_bits == 10240 * 74


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_qps=1), ValueError), (dict(n_qps=(1 << 20) + 1), ValueError), (dict(bitmap_len=4), ValueError),
    (dict(bitmap_len=48), ValueError), (dict(bitmap_len=128), ValueError), (dict(n_qps=True), TypeError),
    (dict(bitmap_len=32.0), TypeError)])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        OooRtl(**kwargs)
    with pytest.raises(exc):
        Ooo(**kwargs)


# -- hand-worked cases ---------------------------------------------------------------------------------------------

# Figure 4: wnd 8; 0, 4-8, 11, 12 and 16 arrive, 1-3 are lost, 9-10 and 13-15 are late. Once the tail is 11,
# head 1 is older than tail - wnd = 3: NACK 1, and only once. 2 and 3 are NACKed when the head reaches them (the
# retransmission of 1 arrives), each older than 16 - 9; 9-10 and 13-15 (inside the window) never are.
FIG4 = [create(3, 0, 8)] + [pkt(3, p, k) for k, p in enumerate([0, 4, 5, 6, 7, 8, 11, 12, 16, 5, 1, 2, 3, 9, 10,
                                                                13, 14])] + [timeout(3, 17), pkt(3, 15, 18),
                                                                            pkt(3, 16, 19)]
FIG4_EXPECTED = [
    (ACCEPT, 1, 0, 8, None),      # 0: the head passes 0
    (ACCEPT, 1, 4, 8, None),      # 4: tail 4, 4 - 1 = 3 is not more than 8
    (ACCEPT, 1, 5, 8, None),
    (ACCEPT, 1, 6, 8, None),
    (ACCEPT, 1, 7, 8, None),
    (ACCEPT, 1, 8, 8, None),      # 8 - 1 = 7
    (ACCEPT, 1, 11, 8, 1),        # 11 - 1 = 10 > 8: 1 is lost
    (ACCEPT, 1, 12, 8, None),     # 1 was NACKed already
    (ACCEPT, 1, 16, 8, None),
    (REPEAT, 1, 16, 9, None),     # 5 again: wnd + 1
    (ACCEPT, 2, 16, 9, 2),        # 1 retransmitted: head 2, 16 - 2 = 14 > 9
    (ACCEPT, 3, 16, 9, 3),        # 16 - 3 = 13 > 9
    (ACCEPT, 5, 16, 9, None),     # the head passes 3 and 4 (two a event); 5 has arrived
    (ACCEPT, 7, 16, 9, None),     # 9: passes 5, 6
    (ACCEPT, 9, 16, 9, None),     # 10: passes 7, 8
    (ACCEPT, 11, 16, 9, None),    # 13: passes 9, 10
    (ACCEPT, 13, 16, 9, None),    # 14: passes 11, 12
    (TIMEOUT, 15, 16, 4, None),   # wnd 9 // 2; passes 13, 14; 15 missing but 16 - 15 = 1 is not more than 4
    (ACCEPT, 17, 16, 4, None),    # 15: passes 15, 16
    (REPEAT, 17, 16, 5, None),    # 16 again, behind the head
]


def test_figure4_golden():
    check(run_golden("pro-ooo", dict(n_qps=16, bitmap_len=32), FIG4), FIG4_EXPECTED)
    nacked = [o["nack_psn"] for o in run_golden("pro-ooo", dict(n_qps=16, bitmap_len=32), FIG4) if o["nack"]]
    assert nacked == [1, 2, 3]


# PSN wrap, window edges, stale/forged PSNs, unknown QPs, idle timeouts, wnd saturation, control commands, with an
# 8-bit bitmap (n_qps 5: qp 5..7 fit the 3-bit field but are out of range).
W0 = MOD - 3
EDGES = [
    create(1, W0, 2),
    pkt(1, W0),                   # head passes it
    pkt(1, MOD - 1),              # d = 1: tail 2**24 - 1
    pkt(1, 1),                    # across the wrap: d = 3, tail 1; 1 - (2**24 - 2) = 3 > 2: NACK 2**24 - 2
    pkt(1, 0),                    # tail stays 1
    pkt(1, MOD - 2),              # the lost one: head passes 2**24 - 2 and 2**24 - 1 -> 0 (arrived): no NACK
    pkt(1, 5),                    # head passes 0, 1 -> 2 missing; 5 - 2 = 3 > 2: NACK 2
    pkt(1, MOD - 6),              # 8 behind head 2: a repeat, wnd 3
    pkt(1, MOD - 7),              # 9 behind: stale, nothing changes
    pkt(1, 10),                   # head + 8: beyond the bitmap, nothing changes
    pkt(1, 9),                    # head + 7: recorded, tail 9; 2 was NACKed already
    pkt(1, 2 + (1 << 23)),        # 2**23 ahead of the head reads as behind: stale
    pkt(1, 1 + (1 << 23)),        # 2**23 - 1 ahead: beyond
    pkt(4, 3),                    # never created
    timeout(4),
    {"item": {"kind": 2, "qp": 4, "psn": 3, "tag": 0}},     # an ACK of it: OTHER, not counted as unknown
    {"item": {"kind": 2, "qp": 1, "psn": 3, "tag": 0}},     # an ACK: passed, the window shown
    create(2, 100, 6),
    timeout(2), timeout(2), timeout(2), timeout(2),         # idle QP: wnd 3, 1, 0, 0, nothing else
    pkt(7, 0),                    # qp out of range
    create(0, 0, 1000),           # wnd clamps to 31 (5 bits for an 8-bit bitmap)
    pkt(0, 0), pkt(0, 0),         # the second is a repeat; wnd stays 31
    destroy(1), pkt(1, 2),        # destroyed: unknown
    create(6, 0, 4), pkt(6, 0),   # index 6 is out of range: ignored
    create(1, 50, 3), pkt(1, 51), pkt(1, 55),   # re-created: a fresh window; 55 - 50 = 5 > 3: NACK 50
]
EDGES_EXPECTED = [
    (ACCEPT, MOD - 2, W0, 2, None),
    (ACCEPT, MOD - 2, MOD - 1, 2, None),
    (ACCEPT, MOD - 2, 1, 2, MOD - 2),
    (ACCEPT, MOD - 2, 1, 2, None),
    (ACCEPT, 0, 1, 2, None),
    (ACCEPT, 2, 5, 2, 2),
    (REPEAT, 2, 5, 3, None),
    (STALE, 2, 5, 3, None),
    (BEYOND, 2, 5, 3, None),
    (ACCEPT, 2, 9, 3, None),
    (STALE, 2, 9, 3, None),
    (BEYOND, 2, 9, 3, None),
    (UNKNOWN, 0, 0, 0, None),
    (UNKNOWN, 0, 0, 0, None),
    (OTHER, 0, 0, 0, None),
    (OTHER, 2, 9, 3, None),
    (TIMEOUT, 100, 99, 3, None),
    (TIMEOUT, 100, 99, 1, None),
    (TIMEOUT, 100, 99, 0, None),
    (TIMEOUT, 100, 99, 0, None),
    (UNKNOWN, 0, 0, 0, None),
    (ACCEPT, 1, 0, 31, None),
    (REPEAT, 1, 0, 31, None),
    (UNKNOWN, 0, 0, 0, None),
    (UNKNOWN, 0, 0, 0, None),
    (ACCEPT, 50, 51, 3, None),
    (ACCEPT, 50, 55, 3, 50),
]
P_EDGES = dict(n_qps=5, bitmap_len=8)


def test_edges_golden():
    outs = run_golden("pro-ooo", P_EDGES, EDGES)
    check(outs, EDGES_EXPECTED)
    # what the counters say, by hand: accepted, repeated, timeouts, NACKs, stale, beyond, unknown
    from lbpipe.engine import golden_run
    _, model = golden_run("pro-ooo", P_EDGES, EDGES)
    assert model.stats() == [10, 2, 4, 3, 2, 2, 5]


# -- the independent closed-loop check ------------------------------------------------------------------------------

def closed_loop(seed, *, n_pkts=400, delays=(0, 3, 1, 4), loss=0.03, dup=0.02, rtt=10, wnd=8, bitmap_len=64,
                start=None):
    """A sender spraying one QP's PSNs round robin over paths with the given delays (one packet a tick), losing
    first transmissions at random, duplicating some, and retransmitting every NACKed PSN ``rtt`` ticks later (never
    lost); when traffic is over, timeouts until the receiver is quiet. Returns (events, outputs, record), with the
    test's own record of what was lost and delivered."""
    rng = random.Random(seed)
    start = rng.randrange(MOD) if start is None else start
    model = Ooo(n_qps=4, bitmap_len=bitmap_len)
    events = [create(2, start, wnd)]
    model.control(events[0]["ctl"])
    outs = []
    pending = []                    # (tick, order, psn)
    lost, delivered, nack_log = set(), set(), []
    wmax = 4 * bitmap_len - 1        # datasheet: 2**(log2 bitmap_len + 2) - 1
    expect_wnd = [wnd]
    order = 0

    def deliver(item):
        item = {"kind": 1, "timeout": 0, "tag": 0, **item}
        out = model.process(item)
        events.append({"item": item})
        outs.append(out)
        return out

    def record(out, kind_repeat, is_timeout):
        w = expect_wnd[-1]
        w = w // 2 if is_timeout else (min(w + 1, wmax) if kind_repeat else w)
        expect_wnd.append(w)
        if out["nack"]:
            psn = out["nack_psn"]
            nack_log.append((psn, psn in delivered))
            return psn
        return None

    t = 0
    while t < n_pkts or pending:
        if t < n_pkts:
            psn = (start + t) % MOD
            if rng.random() < loss:
                lost.add(psn)
            else:
                pending.append((t + delays[t % len(delays)], order, psn))
                order += 1
                if rng.random() < dup:
                    pending.append((t + delays[t % len(delays)] + rng.randrange(1, 6), order, psn))
                    order += 1
        due = sorted(p for p in pending if p[0] <= t)
        pending = [p for p in pending if p[0] > t]
        for _, _, psn in due:
            repeat = psn in delivered
            out = deliver({"qp": 2, "psn": psn})
            delivered.add(psn)
            n = record(out, repeat, False)
            if n is not None:
                pending.append((t + rtt, order, n))
                order += 1
        t += 1
    quiet = 0
    while quiet < 12:
        out = deliver({"qp": 2, "psn": 0, "timeout": 1})
        n = record(out, False, True)
        quiet += 1
        if n is not None:
            quiet = 0
            out = deliver({"qp": 2, "psn": n})        # the retransmission arrives before the next timeout
            record(out, n in delivered, False)
            delivered.add(n)
    return events, outs, dict(lost=lost, delivered=delivered, nacks=nack_log, wnd=expect_wnd, start=start,
                              last=(start + n_pkts - 1) % MOD)


def _lost_below_tail(rec, outs):
    tail = outs[-1]["tail"]
    return {p for p in rec["lost"] if (tail - p) % MOD < MOD // 2 and p != tail}


@pytest.mark.parametrize("seed", range(6))
def test_closed_loop_every_loss_nacked_once(seed):
    delays = [(0, 3, 1, 4), (0, 0, 2, 5, 1, 3, 0, 4), (2, 0)][seed % 3]
    start = [None, MOD - 150, 0][seed % 3]
    events, outs, rec = closed_loop(seed, delays=delays, start=start)
    nacked = [p for p, _ in rec["nacks"]]
    # no PSN that had arrived is NACKed; no PSN is NACKed twice
    assert not [p for p, arrived in rec["nacks"] if arrived]
    assert len(nacked) == len(set(nacked))
    # every lost PSN the receiver can see (below the highest arrived) is NACKed, and nothing else
    assert set(nacked) == _lost_below_tail(rec, outs)
    assert len(rec["lost"]) >= 3
    # the window follows Algorithm 2 event by event: +1 on a repeat, halved on a timeout
    assert [o["wnd"] for o in outs] == rec["wnd"][1:]
    # the window never overflowed and reordering within the window raised nothing: only accepted, repeated, timeout
    assert {o["cls"] for o in outs} <= {ACCEPT, REPEAT, TIMEOUT}


def test_closed_loop_small_window_nacks_late_packets():
    """With wnd 1 and paths 4 ticks apart, true reordering looks like loss: late PSNs are NACKed (the case the
    repeats and the AIMD window are for) and come back as repeats, which grow the window."""
    events, outs, rec = closed_loop(11, delays=(0, 4), loss=0.0, dup=0.0, wnd=1)
    assert rec["nacks"] and all(not arrived for _, arrived in rec["nacks"])
    assert max(rec["wnd"]) > 1
    assert [o["wnd"] for o in outs] == rec["wnd"][1:]


# -- RTL against the golden model -------------------------------------------------------------------------------------

def test_figure4_rtl():
    outs = run_rtl("pro-ooo", dict(n_qps=16, bitmap_len=32), FIG4)
    check(outs, FIG4_EXPECTED)


def test_edges_rtl_with_idle_and_backpressure():
    check(run_rtl("pro-ooo", P_EDGES, EDGES), EDGES_EXPECTED)
    check(run_rtl("pro-ooo", P_EDGES, EDGES, idle=0.3, backpressure=0.5, seed=4), EDGES_EXPECTED)


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.2, 0.4)])
def test_closed_loop_stream_rtl(idle, backpressure):
    """The reordering + loss stream (three QPs interleaved, back-to-back events of one QP included) through the RTL;
    the testbench compares every output with the golden model (and the cycle timing when unthrottled)."""
    streams = [closed_loop(s, n_pkts=150, delays=d, start=st)[0] for s, d, st in
               ((1, (0, 3, 1, 4), MOD - 60), (2, (0, 0, 2, 5), None), (3, (1, 0), 7))]
    rng = random.Random(5)
    merged, queues = [], []
    for qp, ev in enumerate(streams):
        merged.append(create(qp, ev[0]["ctl"]["data"] & (MOD - 1), ev[0]["ctl"]["data"] >> 24))
        queues.append([{"item": {**e["item"], "qp": qp}} for e in ev[1:]])
    while any(queues):
        q = rng.choice([k for k, x in enumerate(queues) if x])
        for _ in range(rng.randrange(1, 5)):
            if queues[q]:
                merged.append(queues[q].pop(0))
    outs = run_rtl("pro-ooo", dict(n_qps=16, bitmap_len=64), merged, idle=idle, backpressure=backpressure, seed=2)
    assert outs == run_golden("pro-ooo", dict(n_qps=16, bitmap_len=64), merged)
    assert sum(o["nack"] for o in outs) >= 5


def test_default_parameters_rtl():
    """10,240 QPs (the sweep after reset covers every record) with a short trace."""
    from lbpipe.sim.pro.ooo import ooo_trace
    params = dict(n_qps=10240, bitmap_len=32)
    events = ooo_trace(9, 300, **params)
    assert run_rtl("pro-ooo", params, events) == run_golden("pro-ooo", params, events)


def test_back_to_back_hazards_rtl():
    """The same QP at distances 1 to 6 (forwarding from each in-flight result, then the memory): a duplicate of a
    PSN accepted k events earlier is a REPEAT at every k, and the head passes every PSN in order."""
    events = [create(0, 0, 2), create(1, 100, 2)]
    expected_cls = []
    fill = [pkt(1, 100 + k) for k in range(8)]          # QP 1 in order: all accepted
    used = 0
    for psn, gap in enumerate(range(0, 6)):
        events.append(pkt(0, psn))
        expected_cls.append(ACCEPT)
        for _ in range(gap):
            events.append(fill[used % 8] if used < 8 else pkt(1, 100 + used))
            expected_cls.append(ACCEPT)
            used += 1
        events.append(pkt(0, psn))
        expected_cls.append(REPEAT)
    events += [pkt(0, 6), pkt(0, 8), pkt(0, 7), pkt(0, 8), timeout(0), pkt(0, 9)]
    expected_cls += [ACCEPT, ACCEPT, ACCEPT, REPEAT, TIMEOUT, ACCEPT]
    outs = run_rtl("pro-ooo", dict(n_qps=16, bitmap_len=16), events)
    assert [o["cls"] for o in outs] == expected_cls
    assert outs == run_golden("pro-ooo", dict(n_qps=16, bitmap_len=16), events)
    # QP 0's head after each of its events: passes 0..5 one at a time, then 6; 8 early; 7 fills: two passed
    heads = [o["head"] for o, e in zip(outs, [e for e in events if "item" in e]) if e["item"]["qp"] == 0]
    assert heads == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 9, 9, 9, 10]


@pytest.mark.parametrize("testcase", ["harness_catches_a_wrong_output", "harness_catches_a_wrong_cycle"])
def test_harness_can_fail(testcase):
    """The scoreboard and the timing check fail on a wrong expectation, each for its own reason."""
    from lbpipe.sim.pro.ooo import ooo_trace
    params = dict(n_qps=16, bitmap_len=32)
    run_rtl("pro-ooo", params, ooo_trace(3, 150, **params), testcase=testcase)


def test_one_event_per_clock_back_to_back():
    """Measured, not timed: 400 events of one QP back to back (reordered, duplicates, timeouts) are accepted one per
    clock (the harness counts the clocks between acceptances)."""
    events = [create(0, MOD - 100, 8)]
    rng = random.Random(1)
    psns = list(range(400))
    for k in range(0, 400, 4):
        psns[k:k + 4] = rng.sample(psns[k:k + 4], 4)
    for k, p in enumerate(psns):
        events.append(timeout(0, k) if k % 50 == 49 else pkt(0, (MOD - 100 + p) % MOD, k))
    stats = {}
    outs = run_rtl("pro-ooo", dict(n_qps=16, bitmap_len=32), events, stats=stats)
    assert len(outs) == 400 and stats["items_per_clock"] == 1.0


def test_low_difference_gates():
    """S2a's carry-free low difference (datasheet, "Pipeline"): ``a - b`` mod 2**7 and its borrow, for every pair
    of 7-bit values, against Python's integer subtraction."""
    from amaranth import Module, Signal
    from amaranth.sim import Simulator
    from lbpipe.hdl.pro.ooo import _gate_difference
    a, b, y = Signal(7), Signal(7), Signal(8)
    m = Module()
    m.d.comb += y.eq(_gate_difference(a, b))
    sim = Simulator(m)
    bad = []

    async def bench(ctx):
        for x in range(128):
            for z in range(128):
                ctx.set(a, x)
                ctx.set(b, z)
                if ctx.get(y) != ((x - z) % 128) | (int(x < z) << 7):
                    bad.append((x, z))
    sim.add_testbench(bench)
    sim.run()
    assert not bad, f"{len(bad)} wrong pairs, first {bad[:3]}"


# -- head from the QP context (head="context") --------------------------------------------------------------------
# The record keeps the head base's low k = max(6, log2 L + 2) bits; each event carries the QP context's expected PSN
# (epsn) and the base is rebuilt as the PSN with those low bits in [epsn - 12, epsn - 12 + 2**k) (datasheet, "Head
# from the QP context"). The oracle for these tests is record mode: a context written back faithfully (or late by
# less than the contract's 2**k - 13 PSNs) must give the same decisions, event by event.

CTX = "context"
P_CTX = dict(n_qps=8, bitmap_len=16, head=CTX)


def with_epsn(events, epsn_of):
    """``events`` with each item's ``epsn`` set to ``epsn_of(number of the item)``."""
    out, k = [], 0
    for e in events:
        if "item" in e:
            e = {"item": {**e["item"], "epsn": epsn_of(k)}}
            k += 1
        out.append(e)
    return out


def strip(outs):
    """Context-mode results without the two write-back fields, for comparing with record mode."""
    return [{k: v for k, v in o.items() if k not in ("epsn", "epsn_we")} for o in outs]


def test_signature_context():
    dut = OooRtl(n_qps=10240, head=CTX)
    dut._MustUse__silence = True
    members = dut.signature.members
    item = members["i"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("timeout", 1), ("qp", 14), ("psn", 24), ("epsn", 24),
                                               ("tag", 16)]
    res = dict((n, f.width) for n, f in members["o"].signature.members["payload"].shape)
    assert res == {"kind": 3, "tag": 16, "qp": 14, "cls": 3, "nack": 1, "nack_psn": 24, "head": 24, "tail": 24,
                   "wnd": 6, "nacked": 1, "epsn": 24, "epsn_we": 1}
    # context mode's default bitmap is 16: 1 valid + 6 low head-base bits + 2 pending advance + 16 bitmap
    # + 5 tail offset + 6 wnd + 2 NACK flags = 38 bits; 10,240 of them are 47.5 KiB, with pro-rr's 11.4 KiB
    # 58.9 KiB = 60.3 kB, under Table I's 68 KB
    assert dut.record_bits == 38 and dut.memory_bits == 10240 * 38
    assert 10240 * 38 / 8 + 11.4 * 1024 < 68000
    # 8 bits: 1 + 6 + 2 + 8 + 4 + 5 + 2 = 28 bits
    dut8 = OooRtl(n_qps=10240, bitmap_len=8, head=CTX)
    dut8._MustUse__silence = True
    assert dut8.record_bits == 28
    rec = OooRtl(n_qps=10240)
    rec._MustUse__silence = True
    assert rec.record_bits == 74        # record mode's default stays 32 bits of bitmap


@pytest.mark.parametrize("kwargs, exc", [(dict(head="ctx"), ValueError), (dict(head=1), TypeError),
                                         (dict(head=CTX, bitmap_len=12), ValueError)])
def test_bad_parameters_context(kwargs, exc):
    with pytest.raises(exc):
        OooRtl(**kwargs)
    with pytest.raises(exc):
        Ooo(**kwargs)


def fig4_context(lag):
    """Figure 4 with the epsn a context would give when the write-back of the event ``lag`` items before is the
    latest it holds (lag 0: faithful): the heads of FIG4_EXPECTED, written by hand, delayed by ``lag``."""
    heads = [0] + [h for _, h, _, _, _ in FIG4_EXPECTED]        # before the first item: the created PSN 0
    return with_epsn(FIG4, lambda k: heads[max(0, k - lag)])


@pytest.mark.parametrize("lag", [0, 3, 19])
def test_figure4_context_golden(lag):
    outs = run_golden("pro-ooo", dict(P_CTX, n_qps=16), fig4_context(lag))
    check(outs, FIG4_EXPECTED)
    assert [o["epsn"] for o in outs] == [h for _, h, _, _, _ in FIG4_EXPECTED]
    assert all(o["epsn_we"] for o in outs)


def test_figure4_context_rtl():
    """Back to back (the forwarding), each epsn 19 items late (the create's PSN 0 for the first 19); a faithful
    context is in test_context_equals_record_rtl."""
    check(run_rtl("pro-ooo", dict(P_CTX, n_qps=16), fig4_context(19)), FIG4_EXPECTED)


def context_from_record(events, record_outs, n_qps, lag):
    """The test's own QP context, built from record mode's results (never from context mode): a create writes the
    created PSN at once; each item on a live QP writes back its resulting head, seen ``lag`` items later."""
    live, writes, ctx, out = set(), [], {}, []
    k = 0
    for e in events:
        if "ctl" in e:
            c = e["ctl"]
            if c["index"] < n_qps:
                if c["table"] == 0:
                    live.add(c["index"])
                    writes = [w for w in writes if w[1] != c["index"]]
                    ctx[c["index"]] = c["data"] % MOD
                elif c["table"] == 1:
                    live.discard(c["index"])
            out.append(e)
            continue
        for w in [w for w in writes if w[0] <= k]:
            ctx[w[1]] = w[2]
        writes = [w for w in writes if w[0] > k]
        qp = e["item"]["qp"]
        out.append({"item": {**e["item"], "epsn": ctx.get(qp, 0xABCDE)}})
        if qp in live:
            writes.append((k + 1 + lag, qp, record_outs[k]["head"]))
        k += 1
    return out


@pytest.mark.parametrize("bitmap_len", [16, 8])
def test_context_equals_record_golden(bitmap_len):
    """The oracle: on the existing traces, context mode fed back through a dictionary (the model's own epsn
    written back at once, then a context built from record mode's heads and 10 items late) decides exactly as
    record mode: same class, NACKs, window."""
    from lbpipe.sim.pro.ooo import ooo_trace
    for seed in range(3):
        params = dict(n_qps=64, bitmap_len=bitmap_len)
        events = ooo_trace(seed, 1500, **params)
        record = run_golden("pro-ooo", params, events)
        model, ctx, outs = Ooo(head=CTX, **params), {}, []
        for e in events:
            if "ctl" in e:
                model.control(e["ctl"])
                if e["ctl"]["table"] == 0:
                    ctx[e["ctl"]["index"]] = e["ctl"]["data"] % MOD
                continue
            out = model.process({"timeout": 0, **e["item"], "epsn": ctx.get(e["item"]["qp"], 0)})
            if out["epsn_we"]:
                ctx[e["item"]["qp"]] = out["epsn"]
            outs.append(out)
        assert strip(outs) == record
        assert sum(o["nack"] for o in record) > 20
        late = run_golden("pro-ooo", dict(params, head=CTX), context_from_record(events, record, 64, 10))
        assert strip(late) == record


@pytest.mark.parametrize("lag, idle, backpressure", [(0, 0.0, 0.0), (10, 0.2, 0.4)])
def test_context_equals_record_rtl(lag, idle, backpressure):
    """The same oracle on the RTL: epsn from the test's context (record mode's heads, ``lag`` items late), the
    results equal record mode's (the RTL's own comparison with the golden model is off: the oracle is record
    mode)."""
    from lbpipe.sim.pro.ooo import ooo_trace
    params = dict(n_qps=64, bitmap_len=16)
    events = ooo_trace(7, 700, **params)
    record = run_golden("pro-ooo", params, events)
    outs = run_rtl("pro-ooo", dict(params, head=CTX), context_from_record(events, record, 64, lag), idle=idle,
                   backpressure=backpressure, compare=False)
    assert strip(outs) == record
    assert [o["nack_psn"] for o in outs if o["nack"]] == [o["nack_psn"] for o in record if o["nack"]]


# Forged and out-of-contract epsn on a QP with no event in flight (six events of another QP between), worked by
# hand (L 16, k 6). QP 2 is created at 1000; 1000 and 1001 arrive (head 1002; the record's base is 1001 with a
# pending advance of 1, low bits 1001 mod 64 = 41).
FILL = [pkt(3, p) for p in range(12)]
FORGED = [create(2, 1000, 8), create(3, 0, 8), pkt(2, 1000), pkt(2, 1001)] + FILL[:6] + [
    # epsn 5000: E = 4988 = 77 * 64 + 60; 41 < 60, so the base is 78 * 64 + 41 = 5033, the head 5034: the window
    # moves by 4032 = 63 * 64 (tail 1001 -> 5033). PSN 5034 is the head: accepted, head 5035, tail 5034.
    pkt(2, 5034)] + FILL[6:12] + [
    # epsn 4975, 60 behind the head 5035 (beyond the contract's 51): base 5034 (low bits 42), E = 4963 = 77 * 64
    # + 35; 42 >= 35: base 77 * 64 + 42 = 4970, head 4971: the window moves back 64 (tail 4970). PSN 4972 is
    # 1 past the head: accepted, tail 4972, 4972 - 4971 = 1 is not more than 8: no NACK.
    pkt(2, 4972)]
FORGED_EPSN = [1000, 1001] + list(range(6)) + [5000] + list(range(6, 12)) + [4975]
FORGED_EXPECTED = [(ACCEPT, 1001, 1000, 8, None), (ACCEPT, 1002, 1001, 8, None)] + \
    [(ACCEPT, p + 1, p, 8, None) for p in range(6)] + [(ACCEPT, 5035, 5034, 8, None)] + \
    [(ACCEPT, p + 1, p, 8, None) for p in range(6, 12)] + [(ACCEPT, 4971, 4972, 8, None)]


def forged_events():
    return with_epsn(FORGED, lambda k: FORGED_EPSN[k])


def test_forged_epsn_golden():
    check(run_golden("pro-ooo", P_CTX, forged_events()), FORGED_EXPECTED)


def test_forged_epsn_rtl():
    check(run_rtl("pro-ooo", P_CTX, forged_events()), FORGED_EXPECTED)
    check(run_rtl("pro-ooo", P_CTX, forged_events(), idle=0.3, backpressure=0.5, seed=5), FORGED_EXPECTED)


def test_epsn_ignored_in_flight_rtl():
    """An event whose QP has an event among the five accepted just before it takes the whole head from that
    event's result: its epsn, even forged, is not used (back to back, no idle: each event is in flight for the
    next). The first event reads the record (epsn trusted); the rest carry garbage and decide as record mode."""
    seq = [create(2, 1000, 2)] + [pkt(2, p) for p in (1000, 1002, 1003, 1001, 1006, 1004, 1005, 1002, 1010, 1011)]
    expected = [(ACCEPT, 1001, 1000, 2, None), (ACCEPT, 1001, 1002, 2, None), (ACCEPT, 1001, 1003, 2, None),
                (ACCEPT, 1003, 1003, 2, None),     # 1001 fills: the head passes two (1001, 1002)
                (ACCEPT, 1004, 1006, 2, None),     # passes 1003; 1006 - 1004 = 2 is not more than 2
                (ACCEPT, 1005, 1006, 2, None), (ACCEPT, 1007, 1006, 2, None),
                (REPEAT, 1007, 1006, 3, None),     # 5 behind the head: a repeat, wnd 3
                (ACCEPT, 1007, 1010, 3, None), (ACCEPT, 1007, 1011, 3, 1007)]     # 1011 - 1007 = 4 > 3
    check(run_golden("pro-ooo", dict(P_CTX, head="record"), seq), expected)
    garbage = [1000, 0x5A5A5A, 0, 0xFFFFFF, 77, 0x800000, 4242, 1, 0x123456, 999]
    check(run_rtl("pro-ooo", P_CTX, with_epsn(seq, lambda k: garbage[k]), compare=False), expected)


@pytest.mark.parametrize("bitmap_len", [32, 64])
def test_context_mode_refuses_long_bitmaps(bitmap_len):
    """Context mode at 32 bits measured 8 logic levels and 57 bits per QP (docs/pro_ooo.md): it is refused, on both
    engines, with the reason."""
    for cls in (Ooo, OooRtl):
        with pytest.raises(ValueError, match="bitmap_len 8 or 16"):
            cls(n_qps=64, bitmap_len=bitmap_len, head=CTX)
