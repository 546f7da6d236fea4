"""Tests of the Themis golden models against the paper (001) and against a closed-loop network.

* :class:`lbpipe.sim.net.rnic.SelectiveRepeatReceiver`, the NIC-SR receiver of section 2.2.
* :class:`lbpipe.sim.themis.themis_d.ThemisD` on the worked examples of sections 3.3 and 3.4 (Figure 4), on the
  extended-scan rules its docstring adds, across the 2**24 PSN wrap, with an overflowing PSN queue, and with stale
  NACKs. Expected values are derived by hand from the paper's text and the docstring's rules, never by running
  the model.
* :mod:`lbpipe.sim.themis.net`: closed-loop scenarios judged by the two user-facing properties (P1: no reordering
  NACK reaches the sender; P2: every NACK for a lost packet does, no later than the next packet on its path), and
  negative tests proving the checker can fail.
"""

import json

import pytest

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.lib.psn import PSN_MOD
from lbpipe.sim.net.rnic import SelectiveRepeatReceiver
from lbpipe.sim.themis.themis_d import ThemisD, Verdict
from lbpipe.sim.themis.net import check_properties, generate, min_queue_depth, verdict_counts

M = PSN_MOD
DATA = PacketKind.DATA.value
NACK = PacketKind.NACK.value


# --- SelectiveRepeatReceiver -------------------------------------------------------------------------------------

def test_rnic_in_order():
    nic = SelectiveRepeatReceiver(start_psn=10)
    assert [nic.receive(p) for p in range(10, 20)] == [None] * 10
    assert nic.epsn == 20 and nic.received == set()


def test_rnic_one_nack_per_epsn():
    nic = SelectiveRepeatReceiver()
    assert nic.receive(0) is None
    assert nic.receive(2) == ("nack", 1)       # 1 missing: NACK carries ePSN, not the PSN that arrived
    assert nic.receive(3) is None              # same ePSN: no second NACK
    assert nic.receive(5) is None
    assert nic.epsn == 1 and nic.received == {2, 3, 5}


def test_rnic_bitmap_advance_then_new_nack():
    nic = SelectiveRepeatReceiver()
    for p in (2, 3, 5):
        nic.receive(p)
    assert nic.receive(0) is None and nic.epsn == 1
    assert nic.receive(1) is None              # fills the hole: ePSN jumps over 2 and 3
    assert nic.epsn == 4 and nic.received == {5}
    assert nic.receive(6) == ("nack", 4)       # a new ePSN may be NACKed once
    assert nic.receive(7) is None
    assert nic.receive(4) is None and nic.epsn == 8     # 4 fills the hole before 5, 6, 7
    assert nic.receive(9) == ("nack", 8)


def test_rnic_duplicates_and_old_psns_ignored():
    nic = SelectiveRepeatReceiver(start_psn=100)
    nic.receive(100)
    assert nic.receive(100) is None            # duplicate of a delivered PSN
    assert nic.receive(50) is None             # old PSN
    assert nic.receive(103) == ("nack", 101)
    assert nic.receive(103) is None            # duplicate of a bitmap PSN
    assert nic.epsn == 101 and nic.received == {103}


def test_rnic_psn_wrap():
    nic = SelectiveRepeatReceiver(start_psn=M - 2)
    assert nic.receive(M - 2) is None and nic.epsn == M - 1
    assert nic.receive(1) == ("nack", M - 1)   # 1 is after 2**24 - 1
    assert nic.receive(0) is None
    assert nic.receive(M - 1) is None          # ePSN wraps and runs through the bitmap
    assert nic.epsn == 2 and nic.received == set()
    assert nic.receive(M - 3) is None          # before ePSN across the wrap: old
    assert nic.epsn == 2


def test_rnic_rejects_bad_psn():
    with pytest.raises(ValueError):
        SelectiveRepeatReceiver(start_psn=M)
    with pytest.raises(ValueError):
        SelectiveRepeatReceiver().receive(-1)


# --- Themis-D directed cases ---------------------------------------------------------------------------------------

def _themis_d(*, n_paths=2, queue_depth=16, entry_bits=8, n_qps=2):
    model = ThemisD(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)
    model.control({"table": 0, "index": 0, "data": 0})
    return model


def _run(model, steps, base=0, qp=0):
    """``steps``: ("d", psn) data towards the NIC, ("n", epsn) a NACK from it; PSNs are offset by ``base`` modulo
    2**24. Returns the outputs."""
    outs = []
    for n, (kind, psn) in enumerate(steps):
        item = {"kind": DATA if kind == "d" else NACK, "qp_hit": 1, "qp": qp, "psn": (psn + base) % M, "tag": n}
        outs.append(model.process(item))
    return outs


#: Offsets putting the worked examples across the PSN wrap (with N = 2, which divides 2**24, paths are unchanged).
BASES = [0, M - 2, M - 3, M - 5]


@pytest.mark.parametrize("base", BASES)
def test_paper_figure4_tpsn_before_late_packet_arrives(base):
    """Section 3.3, Figure 4 (N = 2), read as: 0, 1 and 3 leave the ToR; the NIC (ePSN 2) NACKs on 3; the NACK
    reaches the ToR before 2 (slow on path 0) does. The scan reads 0, 1, 3, dequeues 0 and 1 and stops at tPSN = 3,
    which stays queued; 3 mod 2 != 2 mod 2 and nothing follows it, so the NACK is blocked and compensation armed
    (section 3.4). Then 2 arrives (disarming, it was not lost) and 6; packet 4 was lost (6 overtook it on path 0),
    so the NIC, now at ePSN 4, NACKs on 6. The queue holds 3, 2, 6: the scan reads all three, dequeues 3 and 2
    (neither is after 4) and stops at tPSN = 6, 6 mod 2 == 4 mod 2, valid, forwarded; 6 stays queued."""
    model = _themis_d()
    outs = _run(model, [("d", 0), ("d", 1), ("d", 3), ("n", 2), ("d", 2), ("d", 6), ("n", 4)], base)
    nack2, late2, nack4 = outs[3], outs[4], outs[6]
    assert (nack2["drop"], nack2["verdict"], nack2["scanned"]) == (1, Verdict.NACK_BLOCKED, 3)
    assert (late2["comp"], late2["verdict"]) == (0, Verdict.DATA_CANCEL)
    assert (nack4["drop"], nack4["verdict"], nack4["scanned"]) == (0, Verdict.NACK_VALID, 3)
    assert model.flows[0].queue.count == 1           # each scan kept its tPSN; NACK(4)'s, 6, is all that is left


@pytest.mark.parametrize("base", BASES)
def test_paper_figure4_all_four_enqueued(base):
    """Figure 4b literally: 0, 1, 3, 2 are all in the queue when the NACK for ePSN 2 arrives. The paper blocks it
    (tPSN 3); the model's extended scan also sees that 2 left after tPSN, so it blocks it as late, without arming
    compensation. Neither tPSN 3 nor the 2 after it is dequeued, so when 6 arrives the queue holds 3, 2, 6 and the
    NACK for ePSN 4 reads and dequeues 3 and 2 (not after 4) before it finds tPSN 6: valid, 3 entries read."""
    model = _themis_d()
    outs = _run(model, [("d", 0), ("d", 1), ("d", 3), ("d", 2), ("n", 2), ("d", 6), ("n", 4)], base)
    nack2, nack4 = outs[4], outs[6]
    assert (nack2["drop"], nack2["verdict"], nack2["scanned"]) == (1, Verdict.NACK_LATE, 4)
    assert outs[5]["comp"] == 0                # nothing armed, so 6 raises no compensation
    assert (nack4["drop"], nack4["verdict"], nack4["scanned"]) == (0, Verdict.NACK_VALID, 3)
    assert model.flows[0].queue.count == 1           # only tPSN 6 is left


@pytest.mark.parametrize("base", BASES)
def test_paper_compensation_example(base):
    """Section 3.4, Figure 4c (N = 2): 2 is lost. The NACK for ePSN 2 (tPSN 3) is blocked: BePSN = 2, Valid. The
    next packet with PSN > 2 and PSN mod 2 == 2 mod 2 is 4: the ToR generates the NACK for 2 and clears Valid, so 6
    raises nothing. 5 (other path) never compensates."""
    model = _themis_d()
    outs = _run(model, [("d", 0), ("d", 1), ("d", 3), ("n", 2), ("d", 5), ("d", 4), ("d", 6)], base)
    assert (outs[3]["drop"], outs[3]["verdict"]) == (1, Verdict.NACK_BLOCKED)
    assert (outs[4]["comp"], outs[4]["verdict"]) == (0, Verdict.DATA)
    assert (outs[5]["comp"], outs[5]["comp_psn"], outs[5]["verdict"]) == (1, (2 + base) % M, Verdict.DATA_COMP)
    assert (outs[6]["comp"], outs[6]["verdict"]) == (0, Verdict.DATA)
    assert outs[5]["drop"] == 0                # the data packet itself is forwarded
    assert model.flows[0].valid == 0


@pytest.mark.parametrize("base", BASES)
def test_extended_scan_valid_on_later_same_path_packet(base):
    """2 is lost; 4 (2's path) left the ToR after tPSN 3 but before the NACK came back. tPSN is on the other path,
    but the scan goes on past it, finds 4 and forwards the NACK; nothing is armed, so 6 raises nothing."""
    model = _themis_d()
    outs = _run(model, [("d", 0), ("d", 1), ("d", 3), ("d", 4), ("n", 2), ("d", 6)], base)
    assert (outs[4]["drop"], outs[4]["verdict"], outs[4]["scanned"]) == (0, Verdict.NACK_VALID, 4)
    # Phase 1 dequeues 0 and 1 only; tPSN 3 and the 4 phase 2 read stay, and 6 joins them.
    assert model.flows[0].queue.count == 3
    assert outs[5]["comp"] == 0


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("order, verdict", [
    # The first decisive entry after tPSN wins: ePSN itself means late, a later same-path PSN means lost.
    ([3, 5, 2, 4], Verdict.NACK_LATE),
    ([3, 5, 4, 2], Verdict.NACK_VALID),
])
def test_extended_scan_first_decisive_entry(base, order, verdict):
    model = _themis_d()
    steps = [("d", 0), ("d", 1)] + [("d", p) for p in order] + [("n", 2)]
    nack = _run(model, steps, base)[-1]
    scanned = 3 + order[1:].index(2 if verdict == Verdict.NACK_LATE else 4) + 1
    assert (nack["verdict"], nack["drop"], nack["scanned"]) == (verdict, int(verdict == Verdict.NACK_LATE), scanned)
    assert model.flows[0].valid == 0


def test_no_tpsn_when_queue_empty():
    model = _themis_d()
    nack = _run(model, [("n", 7)])[0]
    assert (nack["verdict"], nack["drop"], nack["scanned"]) == (Verdict.NACK_NO_TPSN, 0, 0)


def test_no_tpsn_when_nothing_after_epsn():
    """Only PSNs up to ePSN queued: all dequeued, no evidence, forwarded."""
    model = _themis_d()
    nack = _run(model, [("d", 0), ("d", 1), ("n", 2)])[-1]
    assert (nack["verdict"], nack["drop"], nack["scanned"]) == (Verdict.NACK_NO_TPSN, 0, 2)
    assert model.flows[0].queue.count == 0


def test_paths_across_wrap_not_power_of_two():
    """N = 3 does not divide 2**24, so Themis-S's path (PSN mod 3) is not a function of PSN distance across the
    wrap: 2**24 - 1 and 0 are both on residue 0, 2**24 - 2 (residue 2) and 1 (residue 1) are 3 apart yet on
    different paths."""
    assert ((M - 1) % 3, 0 % 3, (M - 2) % 3, 1 % 3) == (0, 0, 2, 1)
    # 2**24 - 1 lost; 0 (its path) overtook it: valid.
    model = _themis_d(n_paths=3)
    outs = _run(model, [("d", M - 3), ("d", M - 2), ("d", 0), ("n", M - 1)])
    assert (outs[-1]["verdict"], outs[-1]["drop"]) == (Verdict.NACK_VALID, 0)
    # 2**24 - 2 late; 1 is on another path whatever the distance: blocked.
    model = _themis_d(n_paths=3)
    outs = _run(model, [("d", M - 3), ("d", 1), ("n", M - 2)])
    assert (outs[-1]["verdict"], outs[-1]["drop"]) == (Verdict.NACK_BLOCKED, 1)
    # ... and compensation uses the same paths: 2 (residue 2) after 2**24 - 2 compensates, 0 and 1 do not.
    outs = _run(model, [("d", 0), ("d", 1), ("d", 2)])
    assert [o["comp"] for o in outs] == [0, 0, 1] and outs[2]["comp_psn"] == M - 2


def test_queue_overflow_keeps_newest_entries():
    """Depth 4, nine packets (2 lost), no NACK yet: the ring holds 6..9. The NACK for ePSN 2 (the NIC's tPSN 3 is
    long overwritten) decides on what is left: the first entry, 6, is after 2 and on its path (N = 2): forwarded,
    scan stops there, one entry read and none dequeued (6 is tPSN, and stays)."""
    model = _themis_d(queue_depth=4)
    outs = _run(model, [("d", p) for p in (0, 1) + tuple(range(3, 10))] + [("n", 2)])
    assert (model.flows[0].queue.count, outs[-1]["verdict"], outs[-1]["drop"], outs[-1]["scanned"]) == \
        (4, Verdict.NACK_VALID, 0, 1)


def test_queue_overflow_lost_tpsn_forwarded_never_blocked():
    """Depth 4. The NIC (ePSN 7) NACKs on 8; before the NACK is back, four retransmissions of older PSNs push 8 out
    of the ring. No entry is after 7: no tPSN, no evidence, forwarded rather than blocked, and nothing armed."""
    model = _themis_d(queue_depth=4)
    outs = _run(model, [("d", 5), ("d", 6), ("d", 8), ("d", 0), ("d", 1), ("d", 2), ("d", 3), ("n", 7)])
    assert (outs[-1]["verdict"], outs[-1]["drop"], outs[-1]["scanned"]) == (Verdict.NACK_NO_TPSN, 0, 4)
    assert model.flows[0].valid == 0 and model.flows[0].queue.count == 0


def test_stale_nack_does_not_disarm_compensation():
    """BePSN = 10 armed: NACK(10) dequeues 9 and stops at tPSN 11 (other path), which stays queued. A stale or
    forged NACK for ePSN 5 (before BePSN) is judged like any NACK (here: the first entry, 11, is after 5 and on its
    path, 11 mod 2 == 5 mod 2: valid, forwarded) but must leave (BePSN, Valid) alone, even though a valid verdict
    otherwise disarms, so 12 still compensates for 10."""
    model = _themis_d()
    outs = _run(model, [("d", 9), ("d", 11), ("n", 10), ("n", 5), ("d", 12)])
    assert (outs[2]["verdict"], outs[3]["verdict"], outs[3]["drop"]) == (Verdict.NACK_BLOCKED, Verdict.NACK_VALID, 0)
    assert (outs[4]["comp"], outs[4]["comp_psn"]) == (1, 10)


def test_arm_marks_only_the_nack_that_armed():
    """``arm`` is set on the blocked NACK whose ePSN became BePSN, and on no other: NACK(10) arms. A stale NACK for
    ePSN 8 is blocked too (tPSN 11 is on the other path and nothing follows it) but, being before BePSN, changes
    nothing, so its ``arm`` is 0 and 12 still compensates for 10 with NACK(10)'s MSN."""
    model = _themis_d()
    steps = [("d", 9), ("d", 11), ("n", 10), ("n", 8), ("d", 12)]
    outs = []
    for n, (kind, psn) in enumerate(steps):
        outs.append(model.process({"kind": DATA if kind == "d" else NACK, "qp_hit": 1, "qp": 0, "psn": psn,
                                   "msn": 100 + n, "tag": n}))
    assert [o["arm"] for o in outs] == [0, 0, 1, 0, 0]
    assert (outs[3]["verdict"], outs[3]["drop"]) == (Verdict.NACK_BLOCKED, 1)
    assert (outs[4]["comp"], outs[4]["comp_psn"], outs[4]["comp_msn"]) == (1, 10, 102)


def test_nack_at_or_after_bepsn_may_disarm():
    """A NACK for ePSN >= BePSN is the NIC's newer view: its verdict replaces the armed state. Here ePSN 13 with
    no evidence is forwarded and disarms, so 12 no longer compensates for 10."""
    model = _themis_d()
    outs = _run(model, [("d", 9), ("d", 11), ("n", 10), ("n", 13), ("d", 12)])
    assert (outs[3]["verdict"], outs[3]["drop"]) == (Verdict.NACK_NO_TPSN, 0)
    assert outs[4]["comp"] == 0


def test_foreign_items_pass_untouched():
    model = _themis_d()
    _run(model, [("d", 0), ("d", 2), ("n", 1)])          # arm compensation for 1, to show it is not touched
    items = [
        {"kind": PacketKind.OTHER.value, "qp_hit": 1, "qp": 0, "psn": 3, "tag": 1},
        {"kind": PacketKind.ACK.value, "qp_hit": 1, "qp": 0, "psn": 3, "tag": 2},
        {"kind": PacketKind.ROCE_OTHER.value, "qp_hit": 1, "qp": 0, "psn": 3, "tag": 3},
        {"kind": DATA, "qp_hit": 0, "qp": 0, "psn": 3, "tag": 4},      # unknown QP
        {"kind": NACK, "qp_hit": 0, "qp": 0, "psn": 1, "tag": 5},
        {"kind": DATA, "qp_hit": 1, "qp": 1, "psn": 3, "tag": 6},      # idle QP
    ]
    for item in items:
        out = model.process(item)
        assert {k: out[k] for k in item} == item
        assert (out["drop"], out["comp"], out["verdict"], out["scanned"]) == (0, 0, Verdict.PASS, 0)
    assert model.flows[0].valid == 1 and model.flows[0].bepsn == 1


# --- closed loop ---------------------------------------------------------------------------------------------------

NET = dict(n_qps=6, n_flows=4, packets_per_flow=300, gap_ns=100, path_delay_ns=(1000, 4000), last_hop_ns=200,
           queue_depth=40, entry_bits=10)

#: (N, loss, start PSN): N = 3 flows start just before 2**24 and cross the wrap.
CONFIGS = [(2, 0.0, None), (2, 0.02, None), (3, 0.0, M - 150), (3, 0.02, M - 150), (8, 0.0, None),
           (8, 0.02, None)]
SEEDS = [1, 2, 3]
# N3-loss0.02-seed1 is the scenario in which the closed loop found the P2 violation that made the scan keep tPSN
# queued (see test_p2_tpsn_kept_for_a_later_nack): with tPSN dequeued, its NACK for lost 2**24-99 was blocked and
# compensated one packet late. It is now an ordinary case of test_closed_loop_properties.


def _scenario(config, seed):
    n_paths, loss, start = config
    return generate(seed, n_paths=n_paths, loss=loss, start_psn=start, **NET)


@pytest.fixture(scope="module")
def scenarios():
    return {(config, seed): _scenario(config, seed) for config in CONFIGS for seed in SEEDS}


def _params():
    for config in CONFIGS:
        for seed in SEEDS:
            yield pytest.param(config, seed, id=f"N{config[0]}-loss{config[1]}-seed{seed}")


@pytest.mark.parametrize("config, seed", list(_params()))
def test_closed_loop_properties(scenarios, config, seed):
    sc = scenarios[config, seed]
    assert sc.warnings == []
    assert check_properties(sc, sc.outputs) == []


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"N{c[0]}-loss{c[1]}")
def test_closed_loop_no_reordering_nack_reaches_sender(scenarios, config):
    """P1 (and well-formedness) on its own, so that a P2 regression cannot hide a P1 one."""
    for seed in SEEDS:
        sc = scenarios[config, seed]
        assert [v for v in check_properties(sc, sc.outputs) if not v.startswith("P2")] == [], seed


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"N{c[0]}-loss{c[1]}")
def test_closed_loop_exercised(scenarios, config):
    """Each scenario blocks reordering NACKs (in both ways), forwards NACKs for losses and passes foreign traffic;
    the seeds of a lossy configuration together compensate at least once."""
    n_paths, loss, start = config
    comps = 0
    for seed in SEEDS:
        sc = scenarios[config, seed]
        counts = verdict_counts(sc.outputs)
        summary = sc.summary()
        comps += counts["DATA_COMP"]
        assert counts["NACK_BLOCKED"] > 0 and counts["NACK_LATE"] > 0 and counts["DATA_CANCEL"] > 0, seed
        assert counts["PASS"] == summary["foreign"] > 0, seed
        assert counts["NACK_NO_TPSN"] == 0, seed      # the real tPSN is always still queued
        if loss:
            assert counts["NACK_VALID"] > 0 and summary["retransmissions"] > 0, seed
        else:
            assert summary["lost"] == summary["retransmissions"] == 0, seed
            assert counts["NACK_VALID"] == counts["DATA_COMP"] == 0, seed
        if start is not None:
            psns = [ev["item"]["psn"] for ev, info in zip(sc.items, sc.info) if info["origin"] == "data"]
            assert max(psns) > M - 10 and min(psns) < 10, seed
    assert (comps > 0) == (loss > 0)


def test_closed_loop_deterministic_and_json():
    a = _scenario(CONFIGS[1], 7)
    b = _scenario(CONFIGS[1], 7)
    assert a.events == b.events and a.outputs == b.outputs and a.lost == b.lost
    assert a.events != _scenario(CONFIGS[1], 8).events
    lines = [json.dumps(ev) for ev in a.events]
    assert [json.loads(line) for line in lines] == a.events
    n_ctl = NET["n_flows"]
    assert a.events[:n_ctl] == [{"ctl": {"table": 0, "index": q, "data": 0}} for q in range(n_ctl)]
    items = a.items
    assert [ev["item"]["tag"] for ev in items] == [i % (1 << 16) for i in range(len(items))]
    assert all(x["t"] <= y["t"] for x, y in zip(items, items[1:]))
    assert all(set(ev["item"]) == {"kind", "qp_hit", "qp", "psn", "msn", "tag"} for ev in items)
    assert all(0 <= ev["item"]["qp"] < NET["n_qps"] for ev in items)


def test_closed_loop_model_invariants():
    """Per-path FIFO, lost transmissions never reach the ToR, the golden outputs are the model's."""
    sc = _scenario(CONFIGS[3], 2)
    by_path = {}
    for tx in sc.transmissions:
        assert (tx.t_tor is None) == tx.lost
        if not tx.lost:
            by_path.setdefault(tx.path, []).append(tx)
    for txs in by_path.values():
        arrivals = [tx.t_tor for tx in txs]
        assert arrivals == sorted(arrivals)
    assert sc.lost == {(tx.qp, tx.psn) for tx in sc.transmissions if tx.lost}
    model = ThemisD(**sc.params)
    outs = []
    for ev in sc.events:
        if "ctl" in ev:
            model.control(ev["ctl"])
        else:
            outs.append(model.process(ev["item"]))
    assert outs == sc.outputs


def test_generator_rejects_small_queue():
    need = min_queue_depth(gap_ns=100, last_hop_ns=200, path_delay_ns=(1000, 4000))
    assert need == 36
    with pytest.raises(ValueError, match="queue_depth"):
        generate(1, **{**NET, "queue_depth": need - 1}, n_paths=2, loss=0.0)
    with pytest.raises(ValueError):
        generate(1, **{**NET, "n_flows": 7}, n_paths=2, loss=0.0)


def test_small_queue_overwrites_tpsn_and_is_reported():
    """With the check off, a queue far too small loses tPSNs: the scenario says so in its warnings."""
    sc = generate(1, **{**NET, "queue_depth": 4}, n_paths=8, loss=0.0, check_queue=False)
    assert sc.warnings and sc.diagnostics["tpsn_overwritten"] > 0


# --- the checker can fail --------------------------------------------------------------------------------------------

def _copy(outputs):
    return [dict(out) for out in outputs]


def test_checker_flags_forwarded_reordering_nack():
    sc = _scenario(CONFIGS[0], 1)
    outs = _copy(sc.outputs)
    i = next(i for i, o in enumerate(outs) if o["verdict"] == Verdict.NACK_BLOCKED)
    outs[i]["drop"] = 0
    violations = check_properties(sc, outs)
    assert len(violations) == 1 and violations[0].startswith(f"P1: item {i} ") and "reordering" in violations[0]


def test_checker_flags_missing_compensation():
    sc = _scenario(CONFIGS[5], 1)
    outs = _copy(sc.outputs)
    j = next(j for j, o in enumerate(outs) if o["comp"])
    outs[j]["comp"] = 0
    violations = check_properties(sc, outs)
    assert len(violations) == 1 and violations[0].startswith("P2:") and "never compensated" in violations[0]


def test_checker_flags_blocked_valid_nack():
    sc = _scenario(CONFIGS[1], 1)
    outs = _copy(sc.outputs)
    i = next(i for i, o in enumerate(outs) if o["verdict"] == Verdict.NACK_VALID)
    outs[i]["drop"] = 1
    violations = check_properties(sc, outs)
    assert violations and all(v.startswith(f"P2: item {i} ") for v in violations)


def test_checker_flags_nack_while_retransmission_in_flight():
    """A PSN whose first transmission was lost, NACKed and retransmitted: a NACK for it while the retransmission
    is in flight is a reordering NACK, even though the PSN is in ``lost``."""
    sc = _scenario(CONFIGS[5], 1)
    retx = next(tx for tx in sc.transmissions if tx.retx and not tx.lost)
    assert (retx.qp, retx.psn) in sc.lost
    j = next(j for j, (ev, info) in enumerate(zip(sc.items, sc.info)) if info["origin"] == "data"
             and ev["item"]["qp"] == retx.qp and retx.t_send < ev["t"] < retx.t_tor)
    outs = _copy(sc.outputs)
    outs[j].update(comp=1, comp_psn=retx.psn)
    violations = check_properties(sc, outs)
    assert len(violations) == 1 and violations[0].startswith(f"P1: item {j} ")
    assert "current retransmission" in violations[0] and "in flight" in violations[0]


def test_checker_flags_spurious_compensation_and_malformed_outputs():
    sc = _scenario(CONFIGS[0], 1)
    outs = _copy(sc.outputs)
    j = next(j for j, info in enumerate(sc.info) if info["origin"] == "data")
    outs[j].update(comp=1, comp_psn=sc.items[j]["item"]["psn"])     # compensation for a PSN that just arrived
    f = next(f for f, info in enumerate(sc.info) if info["origin"] == "foreign")
    outs[f]["drop"] = 1
    violations = check_properties(sc, outs)
    assert any(v.startswith(f"P1: item {j} ") for v in violations)
    assert any(v.startswith(f"P0: item {f} ") for v in violations)
    assert check_properties(sc, outs[:-1]) == [f"P0: {len(outs) - 1} outputs for {len(outs)} items"]


# --- why the scan keeps tPSN: the P2 case the closed loop found, reduced to a directed case -------------------------

def test_p2_tpsn_kept_for_a_later_nack():
    """N = 2, one QP, 1 lost. ToR order: 3 (on 1's path, so 1 was lost: 3 overtook it), 0 (late on the other
    path), then 2. The NIC (ePSN 0) NACKs on 3; 0 arrives (ePSN 1); 2 raises NACK(1).

    NACK(0) comes back after 0 passed: the queue holds 3, 0. Its scan reads 3, the first entry after 0 (tPSN, on
    the other path), then 0 itself after it: blocked as late, 2 entries read, nothing armed, nothing dequeued.
    NACK(1): the queue holds 3, 0, 2; the first entry, 3, is after 1 and on 1's path: valid, forwarded at once.

    This is why tPSN stays queued. The model used to dequeue tPSN 3 with NACK(0)'s scan; NACK(1) then found only
    0, 2 (tPSN 2 on the other path, nothing after it), was blocked with compensation armed, and the NACK for the
    lost 1 reached the sender only when 5 arrived, a path period late, or, at the end of a flow, never. Since 3,
    the next packet on 1's path, had passed the ToR before NACK(1) came back, P2 asks for NACK(1) itself to be
    forwarded: the closed loop found this violation (N3-loss0.02-seed1)."""
    model = _themis_d()
    outs = _run(model, [("d", 3), ("d", 0), ("n", 0), ("d", 2), ("n", 1), ("d", 5)])
    assert (outs[2]["verdict"], outs[2]["drop"], outs[2]["scanned"]) == (Verdict.NACK_LATE, 1, 2)
    assert (outs[4]["verdict"], outs[4]["drop"], outs[4]["scanned"]) == (Verdict.NACK_VALID, 0, 1)
    assert (outs[5]["comp"], outs[5]["verdict"]) == (0, Verdict.DATA)      # nothing armed, nothing to compensate
    assert model.flows[0].queue.count == 4           # no scan dequeued anything: 3, 0, 2, 5


@pytest.mark.regression
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"N{c[0]}-loss{c[1]}")
def test_closed_loop_property_sweep(config):
    """P1, P2 and well-formedness over 200 seeds per configuration (N in {2, 3, 8}, loss 0 and 0.02). Every failing
    seed is collected, so a failure shows how many violations of each property there are, and where."""
    failures = {}
    for seed in range(200):
        sc = _scenario(config, seed)
        bad = [f"warning: {w}" for w in sc.warnings] + check_properties(sc, sc.outputs)
        if bad:
            failures[seed] = bad
    kinds = {k: sum(v.startswith(k) for bad in failures.values() for v in bad) for k in ("P0", "P1", "P2")}
    assert failures == {}, (kinds, failures)


# --- Narrow queue entries (issue 8, bug 3) ------------------------------------------------------------------------
# Expectations below are worked by hand at full PSN width, or come from ``_full_width_verdict``, a reference written
# here from the datasheet's rules with whole PSNs in the queue (no entry truncation, so no ordering ambiguity).

def test_narrow_entries_far_same_path_packet_forwards_the_nack():
    """9-bit entries (exact within 255 of ePSN), N = 4. ePSN 1000 (path 0) is lost; 1001, 1002, 1003 (paths 1, 2,
    3) and then 1256 (path 0, 256 after 1000) leave the ToR. At full width 1256 is after 1000 on its path, and paths
    are FIFO: 1000 is lost and its NACK must reach the sender. In 9 bits 1256 - 1000 = 256 reads as "not after", so
    the scan would block the NACK and wait for a further packet on path 0 that may never come. 1256 is out of the
    entries' range: the NACK is forwarded (as no tPSN), flagged, counted, and nothing is armed."""
    model = _themis_d(n_paths=4, entry_bits=9)
    outs = _run(model, [("d", 1001), ("d", 1002), ("d", 1003), ("d", 1256), ("n", 1000)])
    nack = outs[-1]
    assert (nack["verdict"], nack["drop"], nack["arm"], nack["out_of_range"]) == (Verdict.NACK_NO_TPSN, 0, 0, 1)
    assert model.flows[0].valid == 0
    assert model.stats()[8] == 1
    assert model.cycles(nack) == 5           # docs/themis.md: range test in two cycles, decided in the third
    # The queue was emptied: the next NACK with nothing queued is forwarded too, not out of range.
    again = _run(model, [("n", 1000)])[-1]
    assert (again["verdict"], again["out_of_range"]) == (Verdict.NACK_NO_TPSN, 0)


def test_narrow_entries_old_entry_far_before_epsn_forwards_the_nack():
    """An entry 300 before ePSN (a retransmission of 700 while ePSN is 1000) reads in 9 bits as 212 after it.
    Forwarded as out of range."""
    model = _themis_d(n_paths=4, entry_bits=9)
    nack = _run(model, [("d", 1001), ("d", 700), ("d", 1002), ("n", 1000)])[-1]
    assert (nack["verdict"], nack["drop"], nack["out_of_range"]) == (Verdict.NACK_NO_TPSN, 0, 1)


@pytest.mark.parametrize("base", BASES)
def test_narrow_entries_within_range_decide_as_before(base):
    """The same traffic with 1256 replaced by 1254 (254 after ePSN, within range, path 2): no entry after 1000 on
    path 0 left the ToR, nor 1000 itself: blocked and armed, as the full-width rules say. Across the PSN wrap too
    (N = 4 divides 2**24)."""
    model = _themis_d(n_paths=4, entry_bits=9)
    nack = _run(model, [("d", 1001), ("d", 1002), ("d", 1003), ("d", 1254), ("n", 1000)], base=base)[-1]
    assert (nack["verdict"], nack["drop"], nack["arm"], nack["out_of_range"]) == (Verdict.NACK_BLOCKED, 1, 1, 0)
    assert model.stats()[8] == 0


def test_narrow_entries_bound_follows_the_ring_passes():
    """Depth 4, 6-bit entries (exact within 31). PSNs 0..3 fill the ring, then 40..43 replace them in a second pass:
    the earliest PSN that can be queued is 40 again once the first pass is overwritten, so a NACK for 45 (every
    queued PSN within 5) is decided, not forwarded as out of range. In the first pass of a new ring, a NACK for 45
    with 0 still queued is out of range."""
    model = _themis_d(n_paths=2, queue_depth=4, entry_bits=6)
    outs = _run(model, [("d", p) for p in (0, 1, 2, 3, 40, 41, 42, 43, 44, 46, 47, 48)] + [("n", 45)])
    # Queue 44, 46, 47, 48: tPSN 46 (path 0; 45 is on path 1), then 47 is after 45 on its path: valid.
    assert (outs[-1]["verdict"], outs[-1]["out_of_range"]) == (Verdict.NACK_VALID, 0)
    model = _themis_d(n_paths=2, queue_depth=4, entry_bits=6)
    outs = _run(model, [("d", 0), ("d", 46), ("n", 45)])
    assert (outs[-1]["verdict"], outs[-1]["out_of_range"]) == (Verdict.NACK_NO_TPSN, 1)


def _full_width_verdict(queue, e, n_paths):
    """The datasheet's scan on whole PSNs: phase 1 to tPSN, the first PSN after ePSN; valid if on ePSN's path;
    phase 2 through what left after it: ePSN itself is late, a later PSN on its path proves it lost; else blocked."""
    def after(a, b):
        return 0 < (a - b) % M < M // 2
    t = next((i for i, x in enumerate(queue) if after(x, e)), None)
    if t is None:
        return Verdict.NACK_NO_TPSN
    if queue[t] % n_paths == e % n_paths:
        return Verdict.NACK_VALID
    for x in queue[t + 1:]:
        if x == e:
            return Verdict.NACK_LATE
        if after(x, e) and x % n_paths == e % n_paths:
            return Verdict.NACK_VALID
    return Verdict.NACK_BLOCKED


def wide_window_trace(seed, n_items, *, n_qps, psn_window, start=0):
    """Data sprayed out of order from a sender window of ``psn_window`` PSNs (wider than narrow entries can
    order), retransmissions of old PSNs, and NACKs for PSNs inside the window."""
    import random
    rng = random.Random(seed)
    events = [{"ctl": {"table": 0, "index": q, "data": 0}} for q in range(n_qps)]
    base = {q: start for q in range(n_qps)}
    for n in range(n_items):
        q = rng.randrange(n_qps)
        r = rng.random()
        if r < 0.8:
            psn = base[q] + rng.randrange(psn_window) if rng.random() < 0.9 else base[q] - rng.randrange(psn_window)
            base[q] += rng.randrange(3)
            item = {"kind": DATA, "psn": psn % M}
        else:
            item = {"kind": NACK, "psn": (base[q] + rng.randrange(-4, 8)) % M, "msn": n}
        events.append({"item": dict(item, qp_hit=1, qp=q, tag=n & 0xFFFF)})
    return events


@pytest.mark.parametrize("entry_bits, n_paths, window", [(6, 4, 60), (5, 3, 40), (9, 4, 400), (4, 2, 9)])
@pytest.mark.parametrize("start", [0, M - 300])
def test_narrow_entries_never_block_what_full_width_forwards(entry_bits, n_paths, window, start):
    """Against the full-width reference on the same queue contents (the whole PSNs pushed, dequeued as the model
    dequeues): a NACK not flagged out of range gets the reference's verdict; a flagged one is forwarded. So narrow
    entries never block a NACK the full-width rules forward."""
    params = dict(n_qps=2, queue_depth=10, n_paths=n_paths, entry_bits=entry_bits)
    model = ThemisD(**params)
    shadow = {}
    flagged = decided = 0
    for ev in wide_window_trace(entry_bits, 3000, n_qps=2, psn_window=window, start=start):
        if "ctl" in ev:
            model.control(ev["ctl"])
            shadow[ev["ctl"]["index"]] = []
            continue
        item = ev["item"]
        q = shadow[item["qp"]]
        expected = _full_width_verdict(q, item["psn"], n_paths) if item["kind"] == NACK else None
        out = model.process(item)
        if item["kind"] == DATA:
            q.append(item["psn"])
            del q[:-params["queue_depth"]]
            continue
        if out["out_of_range"]:
            flagged += 1
            assert (out["verdict"], out["drop"]) == (Verdict.NACK_NO_TPSN, 0)
        else:
            decided += 1
            assert out["verdict"] == expected, (q, item["psn"])
        del q[:len(q) - model.flows[item["qp"]].queue.count]
    assert flagged and decided
    assert model.stats()[8] == flagged
