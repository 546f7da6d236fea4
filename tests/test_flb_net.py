"""FLB closed loop (sim/flb/net.py; datasheet docs/flb_net.md; issue 17, "FLB demonstration"): the two claims
measured at the receivers, with the golden models of flb-route, flb-owd, flb-cnm and flb-isolate in the loop.

Expectations come from the test's own statement of the traffic (offered rates, the path's fixed delay) and from the
network's ground truth (sequence numbers and ticks at the receivers, the tick each packet was generated), never from
the FLB blocks: the out-of-order count is recomputed here from the delivery log.
"""

import functools
import os

import pytest

from lbpipe.sim.flb.net import FlbNetConfig, run_net

FULL = os.environ.get("LBPIPE_FULL") == "1"

# The traffic, stated here again: flows 0 and 1 go to the incast port (0.2 packet per tick each), flows 2-7 to
# ports 1-3 (0.05 each); the incast lasts from tick 2,000 to 6,000; a packet meeting no queue is delivered 4 ticks
# after it was generated (the path's fixed delay; an empty FIFO forwards in the tick a packet arrives).
CONGESTED, UNCONGESTED = (0, 1), tuple(range(2, 8))
OFFERED_U = 6 * 0.05
WINDOW = (2000, 6000)
MIN_LATENCY = 4
SEEDS = tuple(range(1, 9)) if FULL else (1,)


@functools.lru_cache(maxsize=None)
def _run(mode, incast, seed=1):
    kw = {} if incast else {"n_local": 0}
    return run_net(FlbNetConfig(seed=seed), mode, **kw)


def out_of_order(net, flows):
    """The receiver's count, re-derived from the delivery log: a delivery whose sequence number is below the
    highest already delivered of its flow."""
    top, n = {}, 0
    for _, f, s, _, _ in net.deliveries:
        if f not in flows:
            continue
        if s < top.get(f, -1):
            n += 1
        top[f] = max(top.get(f, -1), s)
    return n


def stats(net, flows, t0, t1):
    """Throughput (deliveries in [t0, t1) per tick), mean and 99th-percentile latency of the packets generated in
    [t0, t1), from the delivery log (tick, flow, seq, latency, path)."""
    got = sum(1 for t, f, *_ in net.deliveries if f in flows and t0 <= t < t1)
    lat = sorted(d[3] for d in net.deliveries if d[1] in flows and t0 <= d[0] - d[3] < t1)
    return got / (t1 - t0), sum(lat) / len(lat), lat[int(0.99 * (len(lat) - 1))]


def test_receiver_counter_on_a_hand_worked_sequence():
    """The re-derivation above counts what a receiver would: 0 1 3 2 4 6 5 -> 2 (2 after 3, 5 after 6)."""
    class Log:
        deliveries = [(t, 7, s, 0, 0) for t, s in enumerate((0, 1, 3, 2, 4, 6, 5))]
    assert out_of_order(Log, (7,)) == 2


def test_the_modes_see_the_same_traffic():
    a, b = _run("flb", False), _run("spray", False)
    assert sorted((t, f) for t, f, *_ in a.path_log) == sorted((t, f) for t, f, *_ in b.path_log)
    assert len(a.path_log) > 2000


@pytest.mark.parametrize("incast", [False, True], ids=["no-incast", "incast"])
def test_the_loop_count_matches_the_receiver(incast):
    for mode in ("flb", "spray"):
        net = _run(mode, incast)
        assert sum(net.out_of_order[:8]) == out_of_order(net, range(8))


@pytest.mark.parametrize("seed", SEEDS)
def test_spraying_reorders_flb_almost_never(seed):
    """Same traffic, no incast: per-packet spraying reorders hundreds of packets, FLB's rerouting at most 1 in 20 of
    that (measured: 5 against 397 at seed 1; the FLB cases are reroutes on a stale delay, docs/flb_net.md)."""
    flb, spray = _run("flb", False, seed), _run("spray", False, seed)
    n_spray, n_flb = out_of_order(spray, range(8)), out_of_order(flb, range(8))
    assert n_spray >= 100
    assert n_flb * 20 <= n_spray
    # the uncongested flows (one packet per 20 ticks): at most a few with FLB, tens with spraying
    assert out_of_order(flb, UNCONGESTED) <= 5
    assert out_of_order(spray, UNCONGESTED) >= 20


def test_flb_reorders_only_by_reroutes_on_stale_delays():
    """The paper claims no reordering; this loop measures a few (5 at seed 1). Every one, by the network's own
    record, is a reroute (no PFC pause, no isolation move: there is no incast), i.e. Algorithm 1 moving a flow on a
    delay one feedback delay old (docs/flb_net.md, 'Reordering')."""
    net = _run("flb", False)
    causes = [cause for _, flow, _, _, cause in net.ooo_log if flow < 8]
    assert 0 < len(causes) == out_of_order(net, range(8))
    assert set(causes) == {"reroute"}


def test_uncongested_flows_reference():
    """Without incast the uncongested flows get what they offer and little more than the fixed delay."""
    tput, mean, p99 = stats(_run("flb", False), UNCONGESTED, *WINDOW)
    assert abs(tput - OFFERED_U) <= 0.1 * OFFERED_U
    assert MIN_LATENCY <= mean <= 1.5 * MIN_LATENCY
    assert p99 <= 3 * MIN_LATENCY


@pytest.mark.parametrize("seed", SEEDS)
def test_isolation_keeps_uncongested_flows_near_their_no_incast_values(seed):
    """With isolation, the uncongested flows' throughput is within 5 % and their mean and 99th-percentile latency
    within 1.5x of the no-incast run's; without isolation (rerouting only) their 99th percentile is 2.5x or more
    (HoL blocking behind the paused uplinks; at seed 1 the mean is 10x and the throughput 5 % lower or worse)."""
    ref_t, ref_l, ref_p = stats(_run("flb", False, seed), UNCONGESTED, *WINDOW)
    iso_t, iso_l, iso_p = stats(_run("flb", True, seed), UNCONGESTED, *WINDOW)
    raw_t, raw_l, raw_p = stats(_run("flb_noiso", True, seed), UNCONGESTED, *WINDOW)
    assert abs(iso_t - ref_t) <= 0.05 * ref_t
    assert iso_l <= 1.5 * ref_l and iso_p <= 1.5 * ref_p
    assert raw_p >= 2.5 * ref_p
    if seed == 1:
        assert raw_l >= 10 * ref_l
        assert raw_t <= 0.95 * ref_t        # measured 0.267 against 0.309 packet per tick


def test_isolation_moved_the_congested_flows_only():
    """During the incast (after the first CNMs, from tick 2,500) the uncongested flows never use the top path
    (path 3, the isolation path at k = 1) while the congested flows' packets go there; nothing of the sort
    without incast."""
    net = _run("flb", True)
    u = [p for t, f, p, _ in net.path_log if f in UNCONGESTED and 2500 <= t < 6000]
    c = [p for t, f, p, _ in net.path_log if f in CONGESTED and 2500 <= t < 6000]
    assert u and 3 not in u
    assert c.count(3) >= 0.9 * len(c)
    # the local incast hosts were paused by PFC (the port is oversubscribed), and so was path 3
    assert min(net.pause_ticks[4:]) > 1000 and net.pause_ticks[3] > 1000
