"""LAPS per-path loss detection (Algorithm 3): signature and parameters, hand-worked cases on the golden model and
the RTL (ACK order, duplicate / reordered / forged ACKs, out-of-range pids, the timer, overflow, the same-slot
order, 48-bit time and 32-bit sequence wraps), and an independent plain-list re-derivation of Algorithm 3 against
both engines on realistic traffic where the ground truth (which packets the network dropped) is known.

Expected values are written by hand from the paper's rules and the datasheet (docs/laps_loss.md) or computed by
the reference in this file; none is read from the RTL or the golden model."""

import collections
import random

import pytest

from lbpipe.engine import golden_run, run_golden, run_rtl
from lbpipe.hdl.laps.loss import Loss, LossItem, LossResult
from lbpipe.sim.laps.loss import loss_slot

SMALL = dict(n_paths=4, depth=4, flow_bits=8)
WRAP48 = 1 << 48
# Result codes as the datasheet numbers them.
MATCHED, STALE, UNKNOWN, BAD_PID = 1, 2, 3, 4
RECORDED, SEND_BAD = 1, 2
ACK_ORDER, TIMEOUT = 1, 2


def _lost(out, depth=4):
    return [(out[f"lost{j}_flow"], out[f"lost{j}_seq"]) for j in range(out["lost_count"])]


def _ev(slots):
    return [{"item": s} for s in slots]


# -- signature and parameters -------------------------------------------------------------------------------------

def test_signature():
    dut = Loss(n_paths=16, depth=8, flow_bits=9)
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "o", "ctl", "stats"}
    item = [(n, f.width) for n, f in dut.signature.members["i"].signature.members["payload"].shape]
    assert item == [("kind", 3), ("now", 48), ("send_valid", 1), ("send_flow", 9), ("send_seq", 32),
                    ("send_pid", 16), ("send_real_val", 32), ("ack_valid", 1), ("ack_flow", 9), ("ack_seq", 32),
                    ("ack_pid", 16), ("tag", 16)]
    res = [(n, f.width) for n, f in dut.signature.members["o"].signature.members["payload"].shape]
    assert res[:7] == [("kind", 3), ("tag", 16), ("ack", 3), ("send", 2), ("lost_reason", 2), ("lost_pid", 16),
                       ("lost_count", 4)]
    assert res[7:9] == [("lost0_flow", 9), ("lost0_seq", 32)] and len(res) == 7 + 2 * 8 + 4
    assert res[-4:] == [("evict", 1), ("evict_pid", 16), ("evict_flow", 9), ("evict_seq", 32)]
    assert dut.signature.members["stats"].shape == 320
    assert dut.latency == 13                         # the datasheet: 13 cycles for every parameter set
    assert Loss(n_paths=1 << 16, depth=32, flow_bits=32).latency == 13
    assert LossItem(flow_bits=9) == dut.signature.members["i"].signature.members["payload"].shape
    assert LossResult(depth=8, flow_bits=9) == dut.signature.members["o"].signature.members["payload"].shape


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_paths=1000), ValueError), (dict(n_paths=1), ValueError), (dict(n_paths=1 << 17), ValueError),
    (dict(depth=2), ValueError), (dict(depth=12), ValueError), (dict(depth=64), ValueError),
    (dict(flow_bits=0), ValueError), (dict(flow_bits=33), ValueError), (dict(depth="16"), TypeError),
    (dict(n_paths=True), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        Loss(**kwargs)


# -- hand-worked cases ----------------------------------------------------------------------------------------------
# SMALL: 4 paths, rings of 4. A slot without a valid ACK checks the timer of the sweep pointer's path, the pointer
# starting at 0 after reset and moving on after each such slot. Sends use real_val 10,000 ns (timer 20,000 ns) unless
# said; "now" moves 4 ns a slot from 1,000,000, far before any deadline.

def _hand_trace():
    """Slots and, per slot, the expected (ack, send, reason, lost pid, lost entries, evicted entry or None)."""
    rv = 10_000
    slots, want = [], []
    now = [1_000_000]

    def slot(send=None, ack=None, expect=(0, 0, 0, 0, [], None), step=4):
        now[0] += step
        slots.append(loss_slot(now[0], send=send, ack=ack, tag=len(slots)))
        want.append(expect)
    # (1) ACK order: A1, A2, A3 sent on path 1; the ACK of A3 declares A1, A2 lost, in send order.
    for s in (1, 2, 3):
        slot(send=(7, s, 1, rv), expect=(0, RECORDED, 0, 0, [], None))
    slot(ack=(7, 3, 1), expect=(MATCHED, 0, ACK_ORDER, 1, [(7, 1), (7, 2)], None))
    # (2) the same ACK again, an ACK of A1 (declared lost already: reordered), a forged flow, a forged sequence,
    # a pid out of range (4 of 4): counted, nothing declared.
    slot(ack=(7, 3, 1), expect=(STALE, 0, 0, 0, [], None))
    slot(ack=(7, 1, 1), expect=(STALE, 0, 0, 0, [], None))
    slot(ack=(99, 3, 1), expect=(UNKNOWN, 0, 0, 0, [], None))
    slot(ack=(7, 12345, 1), expect=(UNKNOWN, 0, 0, 0, [], None))
    slot(ack=(7, 3, 4), expect=(BAD_PID, 0, 0, 0, [], None))
    slot(send=(7, 4, 9, rv), expect=(0, SEND_BAD, 0, 0, [], None))       # a send on pid 9: not recorded
    # (3) an ACK on the wrong path: A4 sent on path 2; its ACK arriving tagged path 1 is unknown there, and path 2
    # still holds A4, which the ACK on path 2 then matches with nothing older to declare.
    slot(send=(7, 5, 2, rv), expect=(0, RECORDED, 0, 0, [], None))
    slot(ack=(7, 5, 1), expect=(UNKNOWN, 0, 0, 0, [], None))
    slot(ack=(7, 5, 2), expect=(MATCHED, 0, 0, 0, [], None))
    # (4) overflow: six sends on path 3 (ring of 4) without ACK: the fifth and sixth evict the first two (oldest
    # first); the ACK of the sixth then declares the third to fifth lost.
    for s in range(10, 16):
        ev = {14: (8, 10), 15: (8, 11)}.get(s)
        slot(send=(8, s, 3, rv), expect=(0, RECORDED, 0, 0, [], ev and (3, *ev)))
    slot(ack=(8, 15, 3), expect=(MATCHED, 0, ACK_ORDER, 3, [(8, 12), (8, 13), (8, 14)], None))
    # (5) the same slot: an ACK and a send of path 0; the ACK does not see the send of its own slot (unknown), the
    # next slot's ACK does.
    slot(send=(9, 1, 0, rv), ack=(9, 1, 0), expect=(UNKNOWN, RECORDED, 0, 0, [], None))
    slot(ack=(9, 1, 0), expect=(MATCHED, 0, 0, 0, [], None))
    # (6) sequence wrap: 2**32 - 1 then 0 on path 2; the ACK of 0 declares 2**32 - 1 lost.
    slot(send=(5, 2 ** 32 - 1, 2, rv), expect=(0, RECORDED, 0, 0, [], None))
    slot(send=(5, 0, 2, rv), expect=(0, RECORDED, 0, 0, [], None))
    slot(ack=(5, 0, 2), expect=(MATCHED, 0, ACK_ORDER, 2, [(5, 2 ** 32 - 1)], None))
    return slots, want


def _check_hand(out):
    slots, want = _hand_trace()
    got = [(o["ack"], o["send"], o["lost_reason"], o["lost_pid"], _lost(o),
            (o["evict_pid"], o["evict_flow"], o["evict_seq"]) if o["evict"] else None) for o in out]
    assert got == want


def test_hand_worked_golden():
    slots, _ = _hand_trace()
    _check_hand(run_golden("laps-loss", SMALL, _ev(slots)))


def _timer_trace():
    """The timer, across the 48-bit wrap. After reset every slot here is ACK-free, so slot k checks path k mod 4.
    Slot 0 sends T1 on path 2 at now = 2**48 - 100 with real_val 100: deadline (2**48 - 100 + 200) mod 2**48 =
    100. Slot 1 sends T2 on path 2 at 2**48 - 96: deadline 104. Checks of path 2 come at slots 2, 6, 10, 14: at
    2**48 - 50 (before the deadline), at 60 (after the wrap, still before 104), at 103 (before), at 104 (reached):
    slot 14 declares T1, T2 lost (timeout)."""
    times = [WRAP48 - 100, WRAP48 - 96, WRAP48 - 50, WRAP48 - 40, WRAP48 - 30, WRAP48 - 20, 60, 70, 80, 90, 103,
             103, 103, 103, 104, 104]
    slots = [loss_slot(times[0], send=(3, 1, 2, 100)), loss_slot(times[1], send=(3, 2, 2, 100))]
    slots += [loss_slot(t) for t in times[2:]]
    for k, s in enumerate(slots):
        s["tag"] = k
    return slots


def _check_timer(out):
    fired = [(k, o["lost_pid"], o["lost_reason"], _lost(o)) for k, o in enumerate(out) if o["lost_count"]]
    assert fired == [(14, 2, TIMEOUT, [(3, 1), (3, 2)])]


def test_timer_golden():
    _check_timer(run_golden("laps-loss", SMALL, _ev(_timer_trace())))


def test_hand_worked_and_timer_rtl():
    """Both hand-worked traces through the RTL in one run (the timer slots first, then the others from now =
    1,000,004 on, where no deadline is due), with the statistics counters read over AXI4-Lite: sends 2 + 3 + 1 + 6
    + 1 + 2 recorded, 1 out of range; ACKs matched 5, stale 2, unknown 4, out of range 1; lost by ACK order 2 + 3 +
    1, by timeout 2 (one timeout); evictions 2."""
    slots, _ = _hand_trace()
    timer = _timer_trace()
    st = {}
    out = run_rtl("laps-loss", SMALL, _ev(timer + slots), stats=st)
    _check_timer(out[:len(timer)])
    _check_hand(out[len(timer):])
    assert st["counters"] == [15, 1, 5, 2, 4, 1, 6, 2, 1, 2]


# -- an independent re-derivation: Algorithm 3 on plain lists ---------------------------------------------------

class Reference:
    """Algorithm 3 as the paper writes it, on a Python list per path, with the datasheet's choices: an ACK whose
    (flow, seq) is not outstanding on its path changes nothing (stale if among the path's last ``depth`` sends,
    else unknown); a path keeps at most ``depth`` outstanding entries, the oldest handed out when a send finds it
    full; every send sets the path's deadline to now + 2 x real_val; a slot without an ACK of a pid below
    ``n_paths`` checks the timer of the sweep pointer's path, which then moves on."""

    def __init__(self, n_paths, depth):
        self.n, self.depth = n_paths, depth
        self.out = collections.defaultdict(list)
        self.recent = collections.defaultdict(lambda: collections.deque(maxlen=depth))
        self.deadline = collections.defaultdict(int)
        self.sweep = 0

    def slot(self, s):
        res = {"ack": 0, "lost": [], "reason": 0, "pid": 0, "evict": None}
        if s["ack_valid"] and s["ack_pid"] < self.n:
            p, key = s["ack_pid"], (s["ack_flow"], s["ack_seq"])
            lst = self.out[p]
            if key in lst:
                i = lst.index(key)
                res.update(ack=MATCHED, lost=lst[:i], reason=ACK_ORDER if i else 0, pid=p if i else 0)
                del lst[:i + 1]
            else:
                res["ack"] = STALE if key in self.recent[p] else UNKNOWN
        else:
            if s["ack_valid"]:
                res["ack"] = BAD_PID
            c = self.sweep
            self.sweep = (c + 1) % self.n
            if (s["now"] - self.deadline[c]) % WRAP48 < WRAP48 // 2 and self.out[c]:
                res.update(lost=list(self.out[c]), reason=TIMEOUT, pid=c)
                self.out[c].clear()
        if s["send_valid"] and s["send_pid"] < self.n:
            p, key = s["send_pid"], (s["send_flow"], s["send_seq"])
            if len(self.out[p]) == self.depth:
                res["evict"] = (p, *self.out[p].pop(0))
            self.out[p].append(key)
            self.recent[p].append(key)
            self.deadline[p] = (s["now"] + 2 * s["send_real_val"]) % WRAP48
        return res


def _network(seed, n_slots, n_paths, depth, loss=0.05, delays=(20, 35, 50, 80)):
    """Realistic traffic: 3 flows sprayed over 4 paths of different delays (one a 'dead' path for a stretch),
    each packet dropped with probability ``loss``; the ACK of a delivered packet comes back on its path in send
    order after the path's delay. Returns the slots and the ground truth: the (flow, seq) dropped."""
    rng = random.Random(seed)
    paths = rng.sample(range(n_paths), 4)
    delay = {p: d for p, d in zip(paths, delays)}
    seq = {f: rng.randrange(2 ** 32) for f in (1, 2, 3)}
    acks = collections.defaultdict(collections.deque)       # path -> (due slot, key) in send order
    dropped, slots = set(), []
    now = 5_000
    for k in range(n_slots):
        now += 4
        send = ack = None
        if k < n_slots - 300 and rng.random() < 0.35:
            f = rng.choice((1, 2, 3))
            p = rng.choice(paths)
            s = seq[f]
            seq[f] = (s + 1) % 2 ** 32
            send = (f, s, p, 4 * delay[p])                      # real_val: the path's delay in ns
            dead = (p == paths[3] and 400 <= k < 700) or (p == paths[0] and k >= n_slots - 360)  # tail drops
            if dead or rng.random() < loss:
                dropped.add((f, s))
            else:
                acks[p].append((k + delay[p], (f, s)))
        due = [p for p in paths if acks[p] and acks[p][0][0] <= k]
        if due:
            p = min(due, key=lambda x: acks[x][0][0])
            ack = (*acks[p].popleft()[1], p)
        slots.append(loss_slot(now, send=send, ack=ack, tag=k))
    return slots, dropped


def _compare_with_reference(slots, out, n_paths, depth):
    ref = Reference(n_paths, depth)
    for k, (s, o) in enumerate(zip(slots, out)):
        r = ref.slot(s)
        got = {"ack": o["ack"], "lost": _lost(o), "reason": o["lost_reason"], "pid": o["lost_pid"],
               "evict": (o["evict_pid"], o["evict_flow"], o["evict_seq"]) if o["evict"] else None}
        assert got == r, f"slot {k}: block {got}, reference {r}"


def _declared(out):
    lost = []
    for o in out:
        lost += _lost(o)
        if o["evict"]:
            lost.append((o["evict_flow"], o["evict_seq"]))
    return lost


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reference_and_ground_truth_golden(seed):
    """Every dropped packet is declared lost (ACK order or timeout), none that the receiver acknowledged is, and
    each is declared once; the golden model agrees with the reference slot by slot."""
    n, depth = 64, 16
    slots, dropped = _network(seed, 3000, n, depth)
    out, model = golden_run("laps-loss", dict(n_paths=n, depth=depth, flow_bits=8), _ev(slots))
    _compare_with_reference(slots, out, n, depth)
    declared = _declared(out)
    assert len(declared) == len(set(declared))
    assert set(declared) == dropped
    assert not any(o["ack"] in (STALE, UNKNOWN) for o in out)
    assert sum(o["lost_reason"] == TIMEOUT for o in out) > 0 and sum(o["lost_reason"] == ACK_ORDER for o in out) > 0


def test_reference_and_ground_truth_rtl():
    n, depth = 16, 16
    slots, dropped = _network(4, 1000, n, depth, delays=(10, 15, 20, 40))
    p = dict(n_paths=n, depth=depth, flow_bits=9)
    out = run_rtl("laps-loss", p, _ev(slots), idle=0.2, backpressure=0.3, seed=5)
    _compare_with_reference(slots, out, n, depth)
    declared = _declared(out)
    assert len(declared) == len(set(declared)) and set(declared) == dropped


def test_back_to_back_same_path_rtl():
    """One send and one ACK every slot on the same path (the forwarding of both read-modify-write loops): each ACK
    matches the send of 3 slots before and declares the one it skips (every fourth packet dropped), checked against
    the reference."""
    slots, now = [], 1000
    for k in range(120):
        now += 4
        ack = None
        if k >= 3 and (k - 3) % 4 != 1:
            ack = (1, k - 3, 2)
        slots.append(loss_slot(now, send=(1, k, 2, 1_000_000), ack=ack, tag=k))
    p = dict(n_paths=16, depth=16, flow_bits=9)
    out = run_rtl("laps-loss", p, _ev(slots))
    _compare_with_reference(slots, out, 16, 16)
    assert sum(o["lost_count"] for o in out) == 29


@pytest.mark.parametrize("testcase", ["harness_catches_a_wrong_output", "harness_catches_a_wrong_cycle"])
def test_harness_can_fail(testcase):
    """The block's testbench runs the harness's self-tests: a planted wrong output and a planted wrong cycle must
    both fail."""
    from lbpipe.sim.laps.loss import loss_trace
    run_rtl("laps-loss", SMALL, loss_trace(3, 120, **SMALL), testcase=testcase)
