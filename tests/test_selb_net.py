"""SELB in a leaf-spine network (sim/selb/net.py; datasheet docs/selb_net.md; issue 18, "Demonstration (sim
network)"): reorder-buffer occupancy per reroute, fallbacks and the order the hosts receive, for SELB's in-cluster
rerouting against random rerouting (ConWeave-like) on the same traffic, with the golden models of selb-cluster,
selb-reroute and selb-reorder in the loop.

Expectations come from the test's own statement of the traffic (flow sizes, load, hosts, the run's length) and from
the network's record of every packet (its ticks and order of arrival at and release from the destination ToR, its
tail mark, its delivery), never from the SELB blocks: the hosts' out-of-order count, each reroute's early packets and
whether the reorder buffer protected them are recounted here.
"""

import functools
import os
import statistics
from collections import Counter

import pytest

from lbpipe.sim.selb.net import SelbNetConfig, run_net

FULL = os.environ.get("LBPIPE_FULL") == "1"

# The traffic, stated here again: 8 leaves of 16 hosts, each host offering 0.3 of its link in flows arriving as a
# Poisson process until tick 1,000, toward hosts of other leaves, sizes (packets, weight) below: mean 65.72 packets.
SIZES = ((2, 0.3), (8, 0.3), (32, 0.2), (128, 0.12), (512, 0.08))
LEAVES, HOSTS, LOAD, STOP = 8, 16, 0.3, 1000
MEAN_SIZE = 2 * 0.3 + 8 * 0.3 + 32 * 0.2 + 128 * 0.12 + 512 * 0.08
PERIOD = 16                 # the sources' sample period (ticks), the default profile's
SEEDS = tuple(range(1, 7)) if FULL else (1,)


def _run(mode, seed=1, **kw):
    return _cached(mode, seed, tuple(sorted(kw.items())))


@functools.lru_cache(maxsize=None)
def _cached(mode, seed, kw):
    return run_net(SelbNetConfig(seed=seed), mode, **dict(kw))


def host_disorder(deliveries):
    """Per flow, the deliveries whose sequence number is below the highest already delivered of the flow."""
    top, bad = {}, Counter()
    for _, f, s in deliveries:
        if s < top.get(f, -1):
            bad[f] += 1
        top[f] = max(top.get(f, -1), s)
    return bad


def arrival_disorder(packets):
    """The same count over the order in which the packets reached the destination ToRs."""
    return sum(host_disorder([(0, p["flow"], p["seq"]) for p in sorted(packets, key=lambda p: p["arr_order"])])
               .values())


def reroutes(net):
    """Every reroute, recounted from the packets: a tail mark ends a flow's train on the old path; the packets after
    it (in sequence order, up to the next tail) are the new path's; ``early`` = those that reached the ToR before the
    tail; ``protected`` = every early one left the ToR after the tail; ``wait`` = the tail's arrival minus the first
    early packet's; ``first_early`` = the flow's first packet to reach the ToR came after its first tail."""
    flows = {}
    for p in net.packets:
        flows.setdefault(p["flow"], []).append(p)
    out = []
    for f, pk in flows.items():
        pk.sort(key=lambda p: p["seq"])
        tails = [i for i, p in enumerate(pk) if p["tail"]]
        first = min(pk, key=lambda p: p["arr_order"])
        for n, i in enumerate(tails):
            tail = pk[i]
            end = tails[n + 1] + 1 if n + 1 < len(tails) else len(pk)
            early = [p for p in pk[i + 1:end] if p["arr_order"] < tail["arr_order"]]
            out.append({"flow": f, "n": n, "tick": tail["src_tick"], "early": len(early),
                        "protected": all(p["rel_order"] > tail["rel_order"] for p in early),
                        "wait": tail["arr_tor"] - min(p["arr_tor"] for p in early) if early else 0,
                        "first_early": first["seq"] > pk[tails[0]]["seq"]})
    return out


def test_receiver_counter_on_a_hand_worked_sequence():
    """The recount counts what a receiver would: 0 1 3 2 4 6 5 -> 2 (2 after 3, 5 after 6)."""
    assert sum(host_disorder([(t, 7, s) for t, s in enumerate((0, 1, 3, 2, 4, 6, 5))]).values()) == 2


def test_the_modes_see_the_same_traffic():
    """Both modes send the same packets at the same ticks; the flows are the traffic's statement: every flow to
    another leaf, sizes from SIZES, about LOAD of every host's link until STOP, each sent whole."""
    a, b = _run("selb"), _run("random")
    assert a.send_log == b.send_log
    sizes = dict(SIZES)
    assert all(size in sizes for _, _, _, size in a.flows)
    assert all(src // HOSTS != dst // HOSTS for _, src, dst, _ in a.flows)
    offered = sum(size for *_, size in a.flows) / (LEAVES * HOSTS * STOP)
    assert abs(offered - LOAD) <= 0.2 * LOAD                  # a heavy tail: 10 % standard deviation here
    assert len(a.send_log) == sum(size for *_, size in a.flows) > 20_000
    assert abs(len(a.flows) - LEAVES * HOSTS * STOP * LOAD / MEAN_SIZE) <= 0.1 * len(a.flows)


@pytest.mark.parametrize("mode", ["selb", "random"])
def test_every_packet_is_delivered_once(mode):
    net = _run(mode)
    sent = sorted((f, s) for _, f, s in net.send_log)
    assert sorted((f, s) for _, f, s in net.deliveries) == sent


def test_with_one_cluster_the_modes_are_one_run():
    """k = 1: the flow's cluster is every path, so selb-cluster's ``alt`` is every non-congested path, which is
    what the random mode feeds selb-reroute: the two runs take the same reroutes and deliver alike."""
    a, b = _run("selb", k=1, stop=200), _run("random", k=1, stop=200)
    ra = [(r["tick"], r["flow"], r["old"], r["new"]) for r in a.reroutes]
    assert len(ra) >= 10
    assert ra == [(r["tick"], r["flow"], r["old"], r["new"]) for r in b.reroutes]
    assert a.deliveries == b.deliveries


@pytest.mark.parametrize("mode", ["selb", "random"])
def test_the_network_reorders_and_the_reorder_blocks_restore_the_order(mode):
    """Thousands of packets reach the destination ToRs out of order; the hosts see disorder only in flows one of
    whose reroutes was not protected (an early packet left the ToR before its tail). Flows whose every reroute was
    protected or met no early packet are delivered in order, and there are many of them with held packets."""
    net = _run(mode)
    assert arrival_disorder(net.packets) >= 1000
    bad = host_disorder(net.deliveries)
    assert sum(bad.values()) == net.out_of_order
    rr = reroutes(net)
    unprotected = {r["flow"] for r in rr if not r["protected"]}
    assert set(bad) <= unprotected
    clean = {r["flow"] for r in rr if r["early"]} - unprotected
    assert len(clean) >= 50
    assert not set(bad) & clean
    assert len(rr) >= 150


@pytest.mark.parametrize("mode", ["selb", "random"])
def test_a_flow_rerouted_before_its_start_arrived_is_protected(mode):
    """selb-reroute starts every flow at epoch 0 and selb-reorder takes a flow it has not seen as in order at epoch 0
    (docs/selb_reorder.md): a new flow rerouted within its first packets, whose new path reaches the destination
    ToR first, has those packets held until its old path's tail like any reroute. Many reroutes are of such flows
    (36 SELB, 31 random at seed 1), none is left unprotected, and at most 1 in 20 reroutes is unprotected at all (5
    of 200 SELB, 5 of 186 random at seed 1; with the rule that took an unknown flow's epoch from its first packet, 48
    of SELB's 51 unprotected reroutes were such flows: docs/selb_net.md, "Delivered order")."""
    net = _run(mode)
    rr = reroutes(net)
    starts = [r for r in rr if r["first_early"] and r["n"] == 0 and r["early"]]
    assert len(starts) >= 20
    assert all(r["protected"] for r in starts)
    assert sum(not r["protected"] for r in rr) <= 0.05 * len(rr)


@pytest.mark.parametrize("mode", ["selb", "random"])
def test_buffer_occupancy_is_the_tails_lateness(mode):
    """A buffer released by its flow's tail (the network's view of what released it) in a protected reroute was
    occupied from the first early packet's arrival to the tail's: the recount's ``wait`` of that reroute, tick for
    tick; and 9 in 10 buffer uses or more end so (142 of 146 SELB, 135 of 139 random at seed 1; the rest are
    overflows, timeouts, second reroutes and old-path stragglers after a full buffer, which open a buffer of their
    own)."""
    net = _run(mode)
    rr = {(r["flow"], r["n"] + 1): r for r in reroutes(net)}
    by_tail = [o for o in net.occupancy if o["cause"] == "tail"]
    assert len(by_tail) >= 0.9 * len(net.occupancy)
    checked = [o for o in by_tail if (o["flow"], o["episode"]) in rr and rr[(o["flow"], o["episode"])]["protected"]]
    assert len(checked) >= 0.95 * len(by_tail) and len(checked) >= 100
    assert all(o["ticks"] == rr[(o["flow"], o["episode"])]["wait"] for o in checked)
    # 0 ticks: an early packet and its tail reaching the ToR in one tick, the early one from a lower spine (2 at
    # seed 1, SELB); the buffer still held it behind the tail
    assert sum(o["ticks"] > 0 for o in checked) >= 0.95 * len(checked)


def test_scarce_buffers_fall_back():
    """One buffer a leaf (same traffic, 400 ticks): early packets fall back (pass unordered) and more reroutes are
    left unprotected, other than by a flow's start, than with 8 buffers; the hosts see more disorder."""
    one, eight = _run("selb", n_buffers=1, stop=400), _run("selb", stop=400)
    assert one.send_log == eight.send_log
    assert one.stats()[0]["fallbacks"] > 0 == eight.stats()[0]["fallbacks"]

    def others(net):
        return sum(1 for r in reroutes(net) if not r["protected"] and not r["first_early"])

    assert others(one) >= others(eight) + 5
    assert sum(host_disorder(one.deliveries).values()) > 2 * sum(host_disorder(eight.deliveries).values())


@pytest.mark.parametrize("n_buffers", [1, 8])
def test_buffers_in_use_never_exceed_the_parameter(n_buffers):
    """At every destination leaf, the buffer uses the network saw (first held packet's arrival to release) never
    overlap more than ``n_buffers`` at a time (a buffer freed and opened again in one tick counts once), and reach it
    when the block fell back (an early packet found every buffer busy): with 1 the buffer is taken; with 8 all 8
    were at once at seed 1 (23 fallbacks)."""
    net = _run("selb", n_buffers=n_buffers, stop=400) if n_buffers == 1 else _run("selb")
    most = 0
    for leaf in range(LEAVES):
        edges = sorted([(o["first"], 1) for o in net.occupancy if o["leaf"] == leaf]
                       + [(o["release"], -1) for o in net.occupancy if o["leaf"] == leaf])
        used = 0
        for _, step in edges:           # at one tick, releases (-1) come before openings (+1)
            used += step
            most = max(most, used)
    assert most <= n_buffers
    assert most == n_buffers or net.stats()[0]["fallbacks"] == 0
    assert most == 1 if n_buffers == 1 else most >= 3


@pytest.mark.parametrize("seed", SEEDS)
def test_selb_waits_less_within_the_cluster_and_spreads_a_congested_cluster_over_the_backup_set(seed):
    """SELB's paper claim is shorter buffer occupancy from rerouting within a cluster. Measured (docs/selb_net.md),
    from the protected reroutes' recounted waits and the network's record of each reroute's target: SELB's
    in-cluster reroutes wait less than random rerouting's reroutes (median), and so do all of SELB's; its reroutes of
    a wholly congested cluster into the backup set wait longer than its in-cluster ones (mean), are a fifth or more
    of its reroutes, and are spread: in at least half the sample periods in which a leaf sends two or more of them,
    they take two or more paths (15 of 16 at seed 1; 73 % to 100 % at seeds 1-8); reroutes to the one shortest path
    (cluster and backup set all congested) are at most 1 in 20 (none at seeds 1-8)."""
    selb, rand = _run("selb", seed), _run("random", seed)

    def waits(net, targets):
        target = {(r["flow"], r["tick"]): r["target"] for r in net.reroutes}
        return [r["wait"] for r in reroutes(net) if r["early"] and r["protected"]
                and (targets is None or target[(r["flow"], r["tick"])] in targets)]

    assert statistics.median(waits(selb, {"cluster"})) < statistics.median(waits(rand, None))
    assert statistics.median(waits(selb, None)) < statistics.median(waits(rand, None))
    assert statistics.mean(waits(selb, {"backup"})) > statistics.mean(waits(selb, {"cluster"}))
    n = Counter(r["target"] for r in selb.reroutes)
    assert n["backup"] >= 0.2 * len(selb.reroutes) and n["shortest"] <= 0.05 * len(selb.reroutes)
    periods = {}
    for r in selb.reroutes:
        if r["target"] == "backup" and r["new"] is not None:
            periods.setdefault((r["leaf"], r["tick"] // PERIOD), []).append(r["new"])
    several = [paths for paths in periods.values() if len(paths) >= 2]
    assert len(several) >= 5
    # a uniform draw puts two flows on one path at 1 / (free backup paths) each time (1 when only one is free); the
    # one shortest path of the first version would put every such period's flows on one path (none spread)
    assert sum(len(set(paths)) >= 2 for paths in several) >= 0.5 * len(several)


@pytest.mark.parametrize("mode", ["selb", "random"])
def test_provisioned_reorder_buffers_deliver_in_order(mode):
    """16 buffers a leaf (a leaf never runs out: no fallback), a hold of 1,024 ticks (102 us, longer than any uplink
    queue here, so a flow has at most one reroute in flight) and 512-deep buffers (more than any old path's queue):
    seeds 1 to 4 reach the hosts in order, every reroute with early packets protected (recounted from the packets).
    Each provision is needed: with 256-deep buffers seed 1's hosts see disorder, and only in flows with a reroute of
    256 or more early packets (the buffer filled and drained before the tail); at the default profile (8 buffers,
    hold 256) seed 1 has disorder in flows without one (fallbacks and second reroutes)."""
    for seed in (1, 2, 3, 4):
        net = _run(mode, seed, n_buffers=16, hold=1024, depth=512)
        assert not host_disorder(net.deliveries), f"seed {seed}: out of order at the hosts"
        rr = reroutes(net)
        assert len(rr) >= 100 and all(r["protected"] for r in rr if r["early"])
    net = _run(mode, 1, n_buffers=16, hold=1024, depth=256)
    bad, full = host_disorder(net.deliveries), {r["flow"] for r in reroutes(net) if r["early"] >= 256}
    assert bad and set(bad) <= full
    net = _run(mode)
    full = {r["flow"] for r in reroutes(net) if r["early"] >= 256}
    assert set(host_disorder(net.deliveries)) - full
