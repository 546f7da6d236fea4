"""Themis-S in the wire: golden model checks and the cocotb tests of parser -> Themis-S -> deparser."""

import random

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.themis.wire import ThemisSWire
from lbpipe.sim.themis.wire import ThemisSWireModel
from lbpipe.tb.lib.packets import icrc, roce_data
from lbpipe.tb.lib.runner import run_cocotb, write_verilog


def test_golden_rewrites_the_source_port_and_the_icrc():
    """A RoCEv2 data frame leaves with sport XOR PathMap[PSN mod N] (Themis-S, sport mode) and a correct ICRC."""
    model = ThemisSWireModel(n_paths=4)
    deltas = [0x0000, 0x0001, 0x0110, 0x1000]
    for p, d in enumerate(deltas):
        model.control({"table": 0, "index": p, "data": d})
    for psn in range(6):
        frame = bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x123, psn, payload_len=64))
        out = model.process(frame)
        sport = int.from_bytes(out[34:36], "big")                 # Ethernet 14 + IPv4 20: UDP source port
        assert sport == 0xC000 ^ deltas[psn % 4]
        assert out[-4:] == icrc(out)
        assert (out == frame) == (deltas[psn % 4] == 0)


def test_golden_passes_other_frames():
    model = ThemisSWireModel(n_paths=4)
    model.control({"table": 0, "index": 1, "data": 0xFFFF})
    frame = bytes(range(60)) + bytes(4)
    assert model.process(frame) == frame


@pytest.mark.parametrize("cut_through", [True, pytest.param(False, marks=pytest.mark.deep)])
def test_rtl(cut_through):
    """Both modes: mixed traffic with and without stalls, a reset in flight, and frames whose end contradicts their
    headers (expectations by hand)."""
    top = FlatTop(ThemisSWire(n_paths=8, depth=256, cut_through=cut_through))
    name = "themis_wire_top" if cut_through else "themis_wire_top_sf"
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.themis.test_themis_s_wire",
               testcase=["frames_with_stalls", "line_rate", "reset_mid_traffic", "contradicting_frames"],
               extra_env={"LBPIPE_WIRE_PATHS": "8", "LBPIPE_WIRE_CT": str(int(cut_through))})


@pytest.mark.parametrize("cut_through", [True, pytest.param(False, marks=pytest.mark.deep)])
def test_rtl_fcs(cut_through):
    """``fcs=True``: frames with a zlib FCS through both modes, the FCS still correct after the rewrite."""
    top = FlatTop(ThemisSWire(n_paths=8, depth=256, cut_through=cut_through, fcs=True))
    name = "themis_wire_top_fcs" if cut_through else "themis_wire_top_fcs_sf"
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.themis.test_themis_s_wire", testcase="fcs_frames",
               extra_env={"LBPIPE_WIRE_PATHS": "8", "LBPIPE_WIRE_CT": str(int(cut_through))})


def test_golden_fcs_bug4():
    """Bug 4: a RoCEv2 frame carrying its FCS (zlib), whose 4 bytes push the frame's end into the next beat,
    passed unsprayed and uncounted. With ``fcs`` it is sprayed, ICRC and FCS correct; without, store-and-forward
    still refuses it but counts it (refused)."""
    import struct
    import zlib
    # IPv4 SEND ONLY sized so that its ICRC ends at lane 61 of beat 1:
    # 14 + 20 + 8 + 12 + 68 + 4 = 126 bytes, then the FCS at 126-129 (beat 2).
    body = bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x55, 1, opcode=0x04, payload_len=68))
    assert len(body) == 126
    frame = body + struct.pack("<I", zlib.crc32(body))
    for cut_through in (False, True):
        model = ThemisSWireModel(n_paths=2, cut_through=cut_through, fcs=True)
        model.control({"table": 0, "index": 1, "data": 0x0F0F})
        out = model.process(frame)
        assert int.from_bytes(out[34:36], "big") == 0xC000 ^ 0x0F0F and out[122:126] == icrc(out[:126])
        assert out[-4:] == struct.pack("<I", zlib.crc32(out[:-4])) and not model.last_bad
    model = ThemisSWireModel(n_paths=2, cut_through=False)
    model.control({"table": 0, "index": 1, "data": 0x0F0F})
    assert model.process(frame) == frame and model.stats() == [1, 0, 0, 1, 0, 0]


def test_wire_parameters():
    wire = ThemisSWire()
    assert wire.cut_through is True and ThemisSWire(cut_through=False).cut_through is False
    assert wire.signature.members["stats"].shape == 192
    # Cut-through: second beat, parser 7, Themis-S, deparser 28 (hand sum of the documented latencies).
    from lbpipe.hdl.themis.themis_s import ThemisS
    assert wire.latency == 1 + 7 + ThemisS.latency + 28
    with pytest.raises(TypeError, match="cut_through must be a bool"):
        ThemisSWire(cut_through="yes")


def test_golden_cut_through_rules_by_hand():
    """The wire model in both modes on frames worked by hand: a non-zero checksum is declined and counted in
    cut-through only; a frame cut inside its IP packet is predicted whole (sent bad) in cut-through only."""
    deltas = [0x0F0F, 0x1234]
    frames = {
        "summed": bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x123, 1, payload_len=200, udp_chksum=0x4321)),
        "cut": bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x123, 0, payload_len=1000))[:300],
    }
    for cut_through in (True, False):
        model = ThemisSWireModel(n_paths=2, cut_through=cut_through)
        for p, d in enumerate(deltas):
            model.control({"table": 0, "index": p, "data": d})
        out = model.process(frames["summed"])
        assert (out == frames["summed"]) == cut_through
        assert int.from_bytes(out[34:36], "big") == (0xC000 if cut_through else 0xC000 ^ 0x1234)
        out = model.process(frames["cut"])
        assert model.last_bad == cut_through
        assert int.from_bytes(out[34:36], "big") == (0xC000 ^ 0x0F0F if cut_through else 0xC000)
        assert out[36:] == frames["cut"][36:]
        assert model.stats() == ([2, 0, 0, 0, 1, 1] if cut_through else [1, 1, 0, 0, 0, 0])


def test_pcap_replay_golden_and_rtl_identical(tmp_path):
    """``lbpipe replay themis-s-wire`` on a pcap: the golden model and the RTL write the same frames."""
    import json

    from lbpipe.cli import main
    from lbpipe.tb.themis.test_themis_s_wire import frames_for
    from lbpipe.trace import read_pcap, write_pcap
    rng = random.Random(4)
    write_pcap(tmp_path / "in.pcap", frames_for(rng, 40))
    (tmp_path / "ctl.jsonl").write_text("".join(json.dumps({"ctl": {"table": 0, "index": p, "data": 0x1111 * p}})
                                                + "\n" for p in range(4)))
    args = ["--param", "n_paths=4", "--ctl", str(tmp_path / "ctl.jsonl")]
    assert main(["replay", "themis-s-wire", str(tmp_path / "in.pcap"), *args, "-o", str(tmp_path / "g.pcap")]) == 0
    assert main(["replay", "themis-s-wire", str(tmp_path / "in.pcap"), *args, "--engine", "rtl",
                 "-o", str(tmp_path / "r.pcap")]) == 0
    assert main(["replay", "themis-s-wire", str(tmp_path / "in.pcap"), *args, "--engine", "rtl", "--idle", "0.3",
                 "--backpressure", "0.4", "--seed", "5", "-o", str(tmp_path / "s.pcap")]) == 0
    golden = read_pcap(tmp_path / "g.pcap")
    assert golden == read_pcap(tmp_path / "r.pcap") == read_pcap(tmp_path / "s.pcap")
    sent = read_pcap(tmp_path / "in.pcap")
    assert len(golden) == 40 and sum(g != s for g, s in zip(golden, sent)) > 0   # some frames were rewritten


def test_pcap_replay_counts_frames(tmp_path, monkeypatch):
    """The RTL replay fails when the RTL sends another number of frames than the golden model: here the golden
    model is made to send one more, as an RTL that lost a frame would look."""
    import json

    from lbpipe import engine
    from lbpipe.tb.themis.test_themis_s_wire import frames_for
    from lbpipe.trace import write_pcap
    write_pcap(tmp_path / "in.pcap", frames_for(random.Random(5), 6))
    ctl = [{"ctl": {"table": 0, "index": p, "data": 0x1111 * p}} for p in range(4)]
    (tmp_path / "ctl.jsonl").write_text("".join(json.dumps(c) + "\n" for c in ctl))
    real = engine.golden_ports
    monkeypatch.setattr(engine, "golden_ports", lambda *a: real(*a) + [("m_axis", bytes(64))])
    with pytest.raises(RuntimeError, match="the RTL sent 6 frames, the golden model 7"):
        engine.replay_pcap("themis-s-wire", {"n_paths": 4}, tmp_path / "in.pcap", tmp_path / "r.pcap", ctl,
                           engine="rtl")


def test_packet_bench(monkeypatch):
    """``lbpipe bench themis-s-wire`` measures beats per clock per frame size in RTL and formats a table (two sizes
    here, to stay short)."""
    from lbpipe import bench
    monkeypatch.setattr(bench, "PACKET_SIZES", [64, 129, 1518])
    rows = bench.run_bench("themis-s-wire", {"n_paths": 4})
    assert [(r["size"], r["beats"], r["beats_per_clock"]) for r in rows] == [(64, 48, 1.0), (129, 144, 1.0),
                                                                              (1518, 1152, 1.0)]
    # Cut-through: the first beat's latency is the same for every frame of two beats or more, alone or back to
    # back, and one cycle less for a one-beat frame (its only beat completes the header window).
    lat = [(r["first_beat_latency"], r["first_beat_latency_max"]) for r in rows]
    assert lat[1] == lat[2] == (lat[1][0], lat[1][0]) and lat[0][0] == lat[1][0] - 1, lat
    text = bench.format_bench(rows)
    assert f"| `themis-s-wire` | 129 | 48 | 144 | 144 | 1.000 | {lat[1][0]} | {lat[1][0]} |" in text
    assert "Items per clock" not in text
