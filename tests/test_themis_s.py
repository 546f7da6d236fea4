"""Themis-S: signature, the paper's spraying rule, RTL against the golden model, throughput."""

import random

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.themis.themis_s import ThemisS, ThemisSItem, ThemisSResult

DATA = PacketKind.DATA.value


def test_signature():
    dut = ThemisS(n_paths=200, mode="port", hash_bits=20)
    assert set(dut.signature.members) == {"i", "o", "ctl", "stats"}
    assert dut.signature.members["i"].signature.members["payload"].shape == ThemisSItem(hash_bits=20)
    assert dut.signature.members["o"].signature.members["payload"].shape == ThemisSResult(n_paths=200, hash_bits=20)
    dut._MustUse__silence = True


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_paths=0), ValueError), (dict(n_paths=257), ValueError), (dict(mode="ecmp"), ValueError),
    (dict(hash_bits=0), ValueError), (dict(n_paths="8"), ValueError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        ThemisS(**kwargs)


def _pathmap_events(values):
    return [{"ctl": {"table": 0, "index": p, "data": v}} for p, v in enumerate(values)]


@pytest.mark.parametrize("n_paths", [2, 3, 256])
def test_paper_rule_every_path_in_turn(n_paths):
    """Equation 1: consecutive PSNs of a flow visit every path in turn, starting from Pbase = hash mod N."""
    flow_hash = 0xBEEF
    pbase = flow_hash % n_paths
    start = (1 << 24) - n_paths // 2 - 1   # straddle the PSN wrap
    events = _pathmap_events([0x1000 + p for p in range(n_paths)])
    psns = [(start + k) % (1 << 24) for k in range(2 * n_paths)]
    events += [{"item": {"kind": DATA, "psn": psn, "flow_hash": flow_hash, "udp_sport": 0xC000, "tag": k}}
               for k, psn in enumerate(psns)]
    for mode in ("port", "sport"):
        out = run_golden("themis-s", {"n_paths": n_paths, "mode": mode}, events)
        for item, psn in zip(out, psns):
            path = (psn % n_paths + pbase) % n_paths
            assert item["path"] == path and item["sprayed"] == 1
            if mode == "port":
                assert item["egress_port"] == 0x1000 + path and item["udp_sport"] == 0xC000
            else:
                assert item["udp_sport"] == 0xC000 ^ (0x1000 + psn % n_paths)
                assert item["udp_sport_xor"] == 0x1000 + psn % n_paths
        # Away from the wrap, N consecutive PSNs use every path once.
        clear = [item["path"] for item, psn in zip(out, psns) if psn < (1 << 24) - n_paths][:n_paths]
        assert sorted(clear) == list(range(n_paths))


def test_wrap_restarts_the_round_robin():
    """PSN 2**24 - 1 and PSN 0 are both 0 mod 3: across the wrap Equation 1 puts two packets on one path."""
    events = [{"item": {"kind": DATA, "psn": psn, "flow_hash": 1, "udp_sport": 0, "tag": 0}}
              for psn in ((1 << 24) - 1, 0)]
    first, second = run_golden("themis-s", {"n_paths": 3}, events)
    assert first["path"] == second["path"] == 1


def test_non_data_untouched():
    events = _pathmap_events([0xFFFF] * 4)
    kinds = [k.value for k in PacketKind if k != PacketKind.DATA]
    events += [{"item": {"kind": k, "psn": 7, "flow_hash": 3, "udp_sport": 0x1234, "tag": k}} for k in kinds]
    for item, kind in zip(run_golden("themis-s", {"n_paths": 4}, events), kinds):
        assert item == {"kind": kind, "psn": 7, "flow_hash": 3, "udp_sport": 0x1234, "tag": kind, "sprayed": 0,
                        "path": 0, "egress_port": 0, "udp_sport_xor": 0}


def test_throughput_one_item_per_clock():
    """Back-to-back data after the PathMap is written: the RTL accepts one item every clock."""
    params = dict(n_paths=13, mode="port", hash_bits=16)
    rng = random.Random(3)
    events = _pathmap_events([rng.randrange(1 << 16) for _ in range(13)])
    events += [{"item": {"kind": DATA, "psn": rng.randrange(1 << 24), "flow_hash": rng.randrange(1 << 16),
                         "udp_sport": 0, "tag": k}} for k in range(500)]
    stats = {}
    run_rtl("themis-s", params, events, stats=stats)
    assert stats["items_per_clock"] == 1.0


@pytest.mark.parametrize("testcase", ["harness_catches_a_wrong_output", "harness_catches_a_wrong_cycle"])
def test_harness_can_fail(testcase):
    """The scoreboard and the timing check fail on a wrong expectation, each for its own reason."""
    params = dict(n_paths=5, mode="port", hash_bits=16)
    events = _pathmap_events(list(range(5)))
    events += [{"item": {"kind": DATA, "psn": k, "flow_hash": 7, "udp_sport": 1, "tag": k}} for k in range(40)]
    run_rtl("themis-s", params, events, testcase=testcase)


def test_pathmap_read_is_registered_before_logic(tmp_path):
    """At N = 256 the 256 x 16 PathMap is a RAMB18; its read data must reach a register before any logic (the block
    RAM output register, docs/themis.md), so no path starts at an unregistered read (about 3 s of Yosys)."""
    from lbpipe.hdl.themis.themis_s import ThemisS
    from lbpipe.synth import synthesize
    report = synthesize(ThemisS(n_paths=256, mode="sport"), name="themis_s", workdir=tmp_path, wrapped=False)
    assert (report["ramb18"], report["ramb36"]) == (1, 0)
    assert report["unregistered_ram"]["ports"] == []
    assert report["logic_levels"] <= 4
