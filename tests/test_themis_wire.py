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


@pytest.mark.parametrize("testcase", ["frames_with_stalls", "line_rate", "reset_mid_traffic"])
def test_rtl(testcase):
    top = FlatTop(ThemisSWire(n_paths=8, depth=256))
    path = write_verilog(top, name="themis_wire_top", ports=top.ports())
    run_cocotb(path, toplevel="themis_wire_top", test_module="lbpipe.tb.themis.test_themis_s_wire", testcase=testcase,
               extra_env={"LBPIPE_WIRE_PATHS": "8"})


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
    real = engine._golden_frames
    monkeypatch.setattr(engine, "_golden_frames", lambda *a: real(*a) + [bytes(64)])
    with pytest.raises(RuntimeError, match="the RTL sent 6 frames, the golden model 7"):
        engine.replay_pcap("themis-s-wire", {"n_paths": 4}, tmp_path / "in.pcap", tmp_path / "r.pcap", ctl,
                           engine="rtl")


def test_packet_bench(monkeypatch):
    """``lbpipe bench themis-s-wire`` measures beats per clock per frame size in RTL and formats a table (two sizes
    here, to stay short)."""
    from lbpipe import bench
    monkeypatch.setattr(bench, "PACKET_SIZES", [64, 129])
    rows = bench.run_bench("themis-s-wire", {"n_paths": 4})
    assert [(r["size"], r["beats"], r["beats_per_clock"]) for r in rows] == [(64, 48, 1.0), (129, 144, 1.0)]
    text = bench.format_bench(rows)
    assert "| `themis-s-wire` | 129 | 48 | 144 | 144 | 1.000 |" in text and "Items per clock" not in text
