"""LAPS closed loop (sim/laps/net.py; datasheet docs/laps_net.md; issue 13, "Closed-loop demonstration"): the three
claims, measured on the loop's record, and the RTL fed the item sequences the golden blocks saw in the loop.

Expectations come from the test's own statement of the network (path delays, service rates) and from the network's
ground truth (which transmissions it dropped, which arrived, when each ACK came back), never from the LAPS blocks.
"""

import functools
import os

import pytest

from lbpipe.engine import run_rtl
from lbpipe.sim.laps.loss import Loss
from lbpipe.sim.laps.net import LapsNet, NetConfig, run_net

FULL = os.environ.get("LBPIPE_FULL") == "1"

# The network, stated here again: four paths of 10 Gb/s each, one-way delays 2, 5, 8 and 14 us; path 0 rises to
# 20 us in the step run.
PROP_US = (2, 5, 8, 14)
CAP_GBPS = 4 * 10
STEP_AT, STEP_END = 1_500_000, 3_000_000


def _cfg(**kw):
    return NetConfig(prop_ns=tuple(1000 * p for p in PROP_US), cap_gbps=(10, 10, 10, 10), **kw)


@functools.lru_cache(maxsize=None)
def _steady(seed=1):
    return run_net(_cfg(stop_ns=2_000_000, seed=seed))


@functools.lru_cache(maxsize=None)
def _step():
    return run_net(_cfg(stop_ns=STEP_END, change_at_ns=STEP_AT, change_path=0, change_prop_ns=20_000))


@functools.lru_cache(maxsize=None)
def _lossy():
    return run_net(_cfg(stop_ns=1_000_000, loss_prob=(0.05,) * 4))


# -- the loss checker (ground truth of the network against the detector's declarations) -----------------------------

def loss_report(net):
    """Sets from the network's ground truth: dropped transmissions not declared (missed), arrived transmissions
    declared lost, split by how the declaration can be accounted for."""
    dropped, arrived = net.dropped, net.arrived
    declared = set(net.declared)
    sends = {}
    for e in net.tx_log:
        sends[(e["flow"], e["seq"])] = sends.get((e["flow"], e["seq"]), 0) + 1
    late_timeout, ambiguous, unexplained = set(), set(), set()
    for t, tid, reason, key in net.decl_log:
        if tid not in arrived:
            continue
        if reason == "timeout" and net.ack_time.get(tid, float("inf")) > t:
            late_timeout.add(tid)             # the ACK was still on its way when the timer fired
        elif reason == "ack" and sends[key] > 1:
            ambiguous.add(tid)                # the ACK's (flow, seq) was sent more than once (Karn's ambiguity)
        else:
            unexplained.add(tid)
    return {"missed": dropped - declared, "false": declared & arrived, "late_timeout": late_timeout,
            "ambiguous": ambiguous, "unexplained": unexplained, "errors": list(net.declare_errors),
            "retx": net.n_retx, "declared": len(declared), "dropped": len(dropped)}


def check_exact(net):
    """The issue's claim in full: the declared set is the dropped set, and one retransmission per declaration."""
    r = loss_report(net)
    assert not r["errors"]
    assert set(net.declared) == net.dropped, (len(r["missed"]), len(r["false"]))
    assert r["retx"] == r["declared"] == r["dropped"]


def check_accounted(net):
    """Every loss found; every arrived packet declared lost is a late-ACK timeout or an ambiguous ACK, none else."""
    r = loss_report(net)
    assert not r["errors"]
    assert not r["missed"]
    assert not r["unexplained"], sorted(r["unexplained"])[:5]
    assert r["retx"] == r["declared"]
    return r


# -- claim 1: shares -----------------------------------------------------------------------------------------------

def test_shares_favour_shorter_paths_but_not_all():
    """Figure 19's shape: the share falls as the path delay rises, the shortest path has the most but under 60%,
    the longest still above 5%."""
    s = _steady().shares(300_000, 2_000_000)
    assert s == sorted(s, reverse=True) and len(set(s)) == 4       # strictly ordered by delay (2 < 5 < 8 < 14 us)
    assert s[0] < 0.6 and s[3] > 0.05


def test_shares_move_when_a_path_slows():
    """Path 0 goes from 2 us (the shortest) to 20 us (the longest): its share drops by at least a third and becomes
    the smallest; the others gain."""
    net = _step()
    before = net.shares(300_000, STEP_AT)
    after = net.shares(STEP_AT + 300_000, STEP_END)
    assert before[0] == max(before)
    assert after[0] == min(after) and after[0] < before[0] * 2 / 3
    assert all(a > b for a, b in zip(after[1:], before[1:]))


# -- claim 2: AIMD ------------------------------------------------------------------------------------------------

def test_aimd_settles_around_the_bottleneck_capacity():
    """The capacity is the paths' service rates summed (40 Gb/s, below the 60 Gb/s ceiling and the 100 Gb/s line):
    after 0.3 ms the time-averaged AIMD rate is within 15% of it, the goodput between 75% and 100% of it, and the
    controller both decreased and increased."""
    net = _steady()
    rate = net.mean_rate_gbps(300_000, 2_000_000)
    good = net.goodput_gbps(300_000, 2_000_000)
    assert abs(rate - CAP_GBPS) <= 0.15 * CAP_GBPS, rate
    assert 0.75 * CAP_GBPS <= good <= CAP_GBPS, good
    acts = [a for t, _r, _e, a, _m in net.rate_log if t >= 300_000]
    assert acts.count(2) >= 10 and acts.count(1) >= 30


# -- claim 3: loss detection ---------------------------------------------------------------------------------------

def test_every_loss_found_and_none_false_in_the_steady_run():
    """Seed 1, steady delays: the declared set equals the dropped set exactly (tail drops and random losses), one
    retransmission each."""
    net = _steady()
    check_exact(net)
    fates = {e["fate"] for e in net.tx_log}
    assert {"queue", "random", "arrived"} <= fates


def test_timeouts_find_losses_no_ack_order_can():
    """5% random loss: some losses have no later packet on their path to reveal them, and the timeout finds them;
    the ACK-order rule never declares an arrived packet lost; a timeout that does fired while the ACK was still
    on its way back (the 2 x realVal rule under a queue that grew since realVal was sampled)."""
    net = _lossy()
    r = check_accounted(net)
    true_timeouts = [tid for tid, why in net.declared.items() if why == "timeout" and tid in net.dropped]
    assert true_timeouts
    assert not r["ambiguous"]
    assert r["false"] == r["late_timeout"]


def test_step_run_losses_accounted():
    """The latency step: every loss found; the false declarations are late-ACK timeouts on the slowed path and
    ACK-order declarations by an ACK whose (flow, seq) was sent twice."""
    r = check_accounted(_step())
    assert r["dropped"] > 100


class _DeclaresOneArrived:
    """A planted bug for the checker: a loss detector that, on its 40th matched ACK, also declares the next newer
    outstanding entry of that path lost (which has, as a rule, arrived)."""

    def __init__(self, **params):
        self.inner = Loss(**params)
        self.matched = 0

    def control(self, cmd):
        self.inner.control(cmd)

    def process(self, item):
        out = self.inner.process(item)
        if out["ack"] == 1:
            self.matched += 1
            rest = self.inner.outstanding(item["ack_pid"])
            if self.matched == 40 and rest:
                n = out["lost_count"]
                out.update(lost_reason=out["lost_reason"] or 1, lost_pid=item["ack_pid"], lost_count=n + 1)
                out[f"lost{n}_flow"], out[f"lost{n}_seq"] = rest[0]
        return out


def test_checker_catches_a_detector_declaring_an_arrived_packet_lost():
    net = LapsNet(_cfg(stop_ns=300_000), loss_model=_DeclaresOneArrived(n_paths=64, depth=32, flow_bits=16)).run()
    with pytest.raises(AssertionError):
        check_exact(net)
    with pytest.raises(AssertionError):
        check_accounted(net)


@pytest.mark.skipif(not FULL, reason="LBPIPE_FULL=1: more seeds")
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_more_seeds(seed):
    net = _steady(seed)
    check_accounted(net)
    s = net.shares(300_000, 2_000_000)
    assert s[0] > s[3] and min(s) > 0.05
    assert abs(net.mean_rate_gbps(300_000, 2_000_000) - CAP_GBPS) <= 0.2 * CAP_GBPS


# -- RTL in the loop, trace-driven ---------------------------------------------------------------------------------

def test_rtl_replays_what_the_golden_blocks_saw_in_the_loop():
    """A short loop run records every ctl command and item the softmax and the loss detector saw; replayed from
    reset through the RTL (cocotb, Icarus), both give the loop's outputs item for item, so the loop would have run
    the same with the RTL in it."""
    net = LapsNet(_cfg(stop_ns=120_000, drain_ns=20_000), record=True).run()
    sm, lo = net.tx.softmax, net.loss
    assert len({o["slot"] for o in sm.outputs}) == 4                 # every path chosen
    assert sum(o["lost_count"] for o in lo.outputs) >= 10             # losses declared in the replayed slots
    assert any(o["ack"] == 1 for o in lo.outputs)
    assert run_rtl("laps-softmax", dict(k=4, precision=16, mode="paper"), sm.events, compare=False) == sm.outputs
    assert run_rtl("laps-loss", dict(n_paths=64, depth=32, flow_bits=16), lo.events, compare=False) == lo.outputs
