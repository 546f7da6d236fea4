"""Themis-D: signature, sizing against the paper, RTL against the golden model, timing and throughput, reset."""


import pytest

from lbpipe.blocks import get_block
from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.themis.themis_d import ThemisD, ThemisDItem, ThemisDResult
from lbpipe.sim.themis.themis_d import REFERENCE, Verdict, paper_memory_bytes, psn_queue_entries
from lbpipe.sim.themis.traffic import themis_d_trace

DATA, NACK = PacketKind.DATA.value, PacketKind.NACK.value


def test_signature():
    dut = ThemisD(n_qps=10, queue_depth=7, n_paths=3, entry_bits=5)
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "o", "ctl", "stats"}
    assert dut.signature.members["i"].signature.members["payload"].shape == ThemisDItem(n_qps=10)
    assert dut.signature.members["o"].signature.members["payload"].shape == ThemisDResult(n_qps=10, queue_depth=7)


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_qps=0), ValueError), (dict(queue_depth=0), ValueError), (dict(queue_depth=256), ValueError),
    (dict(n_paths=257), ValueError), (dict(entry_bits=1), ValueError), (dict(n_qps=2.5), TypeError),
    (dict(entry_bits=True), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        ThemisD(**kwargs)


def test_reference_sizing():
    """Section 4: ceil(400 Gb/s x 2 us x 1.5 / 1500 B) = 100 entries; Eq. 4 gives about 193 kB."""
    assert psn_queue_entries(bw_bps=REFERENCE["bw_bps"], rtt_last_s=REFERENCE["rtt_last_s"],
                             mtu_bytes=REFERENCE["mtu_bytes"], expansion=REFERENCE["expansion"]) == 100
    total = paper_memory_bytes(**REFERENCE)
    assert total == 256 * 2 + (20 + 100) * 1600
    assert round(total / 1000) == 193


def test_default_memory_within_paper_budget():
    """The issue's budget: Themis-D memory at the reference configuration within 1.1x of the paper's formula."""
    dut = ThemisD()
    dut._MustUse__silence = True
    paper_d_bytes = paper_memory_bytes(**REFERENCE) - REFERENCE["n_paths"] * 2
    assert dut.memory_bits / 8 <= 1.1 * paper_d_bytes


@pytest.mark.parametrize("params", get_block("themis-d").test_params,
                         ids=lambda p: "q{n_qps}-d{queue_depth}-n{n_paths}-w{entry_bits}".format(**p))
def test_random_traces_reach_every_case(params):
    """The random traces the generic RTL-against-golden tests use reach the interesting cases, or that comparison
    would prove little."""
    golden = run_golden("themis-d", params, themis_d_trace(7, 500, **params))
    verdicts = {item["verdict"] for item in golden}
    assert {Verdict.PASS, Verdict.DATA, Verdict.NACK_NO_TPSN} <= verdicts
    if params["n_paths"] > 1:   # with one path, tPSN is always on ePSN's path
        assert Verdict.NACK_BLOCKED in verdicts
    # A scan can see ePSN's same-path successor only when it is N PSNs later yet inside the queue and the entry
    # window: with N = 256 and 9-bit entries every lost packet is recovered by compensation instead.
    if params["n_paths"] < min(params["queue_depth"], 1 << (params["entry_bits"] - 1)):
        assert Verdict.NACK_VALID in verdicts


def test_default_configuration_rtl():
    """The paper's reference configuration (1600 QPs x 100 entries, N = 256) in simulation."""
    events = themis_d_trace(2, 300, **ThemisD_defaults())
    assert run_rtl("themis-d", {}, events) == run_golden("themis-d", {}, events)


def ThemisD_defaults():
    return get_block("themis-d").defaults()


def test_data_one_item_per_clock_and_nack_cost():
    """Back-to-back data: one item per clock. A NACK holds the pipeline scanned + 6 cycles (timing is checked
    item by item by the testbench against the golden model's prediction)."""
    params = dict(n_qps=4, queue_depth=16, n_paths=4, entry_bits=8)
    events = [{"ctl": {"table": 0, "index": q}} for q in range(4)]
    events += [{"item": {"kind": DATA, "qp_hit": 1, "qp": k % 4, "psn": k // 4, "tag": k}} for k in range(400)]
    stats = {}
    run_rtl("themis-d", params, events, stats=stats)
    assert stats["items_per_clock"] == 1.0
    # A full queue, then a NACK whose scan reads the whole queue (no tPSN: every entry precedes ePSN).
    events.append({"item": {"kind": NACK, "qp_hit": 1, "qp": 0, "psn": 100, "tag": 999}})
    events += [{"item": {"kind": DATA, "qp_hit": 1, "qp": 1, "psn": 100 + k, "tag": 1000 + k}} for k in range(8)]
    stats = {}
    out = run_rtl("themis-d", params, events, stats=stats)
    nack = out[400]
    assert nack["verdict"] == Verdict.NACK_NO_TPSN and nack["scanned"] == 16 and nack["drop"] == 0
    # 409 items, and 16 + 5 cycles of stall behind the NACK.
    assert stats["cycles"] >= 409 + 21


NET = dict(n_qps=6, n_flows=4, packets_per_flow=250, gap_ns=100, path_delay_ns=(1000, 4000), last_hop_ns=200,
           queue_depth=40, entry_bits=10)


@pytest.mark.parametrize("n_paths, start_psn", [(3, (1 << 24) - 150), (8, None)])
def test_rtl_closed_loop_properties(n_paths, start_psn):
    """Closed-loop traffic (spraying, per-path delay, loss, the receiving NIC, retransmission): the RTL's outputs
    equal the golden model's and meet the two user-facing properties (no reordering NACK reaches the sender;
    every NACK for a lost packet reaches it by the next packet on the lost packet's path)."""
    from lbpipe.sim.themis.net import check_properties, generate
    scenario = generate(4, n_paths=n_paths, loss=0.02, start_psn=start_psn, **NET)
    out = run_rtl("themis-d", scenario.params, scenario.events, idle=0.1, backpressure=0.2)
    assert out == scenario.outputs
    assert check_properties(scenario, out) == []
    verdicts = {item["verdict"] for item in out}
    assert {Verdict.NACK_VALID, Verdict.NACK_BLOCKED, Verdict.NACK_LATE, Verdict.DATA_CANCEL} <= verdicts
