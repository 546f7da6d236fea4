"""The lbpipe command line, as users call it."""

import json
import re

import pytest

from lbpipe.cli import main
from lbpipe.trace import read_events


def test_blocks_lists_every_block_with_parameters(capsys):
    assert main(["blocks"]) == 0
    out = capsys.readouterr().out
    for text in ("themis-s:", "themis-d:", "--param n_paths=256", "--param queue_depth=100", "--param n_qps=1600",
                 "--param mode=sport (one of port, sport)"):
        assert text in out


def test_unknown_block_and_bad_param(capsys):
    assert main(["verilog", "nope", "-o", "x"]) == 2
    assert "unknown block 'nope'" in capsys.readouterr().err
    assert main(["verilog", "themis-d", "--param", "n_qps=lots", "-o", "x"]) == 2
    assert main(["verilog", "themis-d", "--param", "colour=red", "-o", "x"]) == 2


def test_verilog_writes_top_core_and_layout(tmp_path, capsys):
    assert main(["verilog", "themis-d", "--param", "n_qps=8", "--param", "queue_depth=6", "-o", str(tmp_path)]) == 0
    top = (tmp_path / "themis_d.v").read_text()
    core = (tmp_path / "themis_d_core.v").read_text()
    assert re.search(r"module themis_d\(", top) and re.search(r"module themis_d_core\(", core)
    for port in ("s_axil_awaddr", "s_axil_rdata", "in_payload", "out_ready", "clk", "rst"):
        assert port in top
    layout = json.loads((tmp_path / "themis_d.json").read_text())
    assert layout["params"]["n_qps"] == 8
    fields = {f["field"]: (f["lsb"], f["width"]) for f in layout["in_payload"]}
    assert fields["kind"] == (0, 3) and fields["psn"][1] == 24 and fields["qp"][1] == 3
    assert "[1/1] themis-d: Verilog" in capsys.readouterr().err


@pytest.mark.parametrize("block, params", [
    ("themis-d", ["n_qps=8", "queue_depth=12", "n_paths=5", "entry_bits=6"]),
    ("themis-s", ["n_paths=11", "mode=port"]),
])
def test_replay_golden_and_rtl_identical(tmp_path, block, params):
    args = [a for p in params for a in ("--param", p)]
    trace = tmp_path / "t.jsonl"
    assert main(["trace", block, *args, "--seed", "9", "-n", "400", "-o", str(trace)]) == 0
    assert main(["replay", block, str(trace), *args, "--engine", "golden", "-o", str(tmp_path / "g.jsonl")]) == 0
    assert main(["replay", block, str(trace), *args, "--engine", "rtl", "--idle", "0.2", "--backpressure", "0.3",
                 "-o", str(tmp_path / "r.jsonl")]) == 0
    golden = (tmp_path / "g.jsonl").read_text()
    assert golden == (tmp_path / "r.jsonl").read_text()
    assert len(read_events(tmp_path / "g.jsonl")) == sum(1 for e in read_events(trace) if "item" in e)


def test_replay_rejects_values_that_do_not_fit(tmp_path, capsys):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"item": {"kind": 1, "psn": 16777216}}\n')
    assert main(["replay", "themis-d", str(trace)]) == 2
    assert "does not fit" in capsys.readouterr().err


def test_synth_prints_the_table(tmp_path, capsys):
    assert main(["synth", "themis-s", "--param", "n_paths=16", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| `themis-s` |" in out and "Logic levels" in out and "Timing proxy" in out
    report = json.loads((tmp_path / "synth.json").read_text())[0]
    assert report["params"]["n_paths"] == 16 and report["lut"] > 0 and report["ff"] > 0


def test_bench_measures_one_item_per_clock(tmp_path, capsys):
    assert main(["bench", "themis-s", "--param", "n_paths=5", "-o", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "bench.json").read_text())
    assert results[0]["scenario"] == "back-to-back data" and results[0]["items_per_clock"] == 1.0
    assert "| `themis-s` | back-to-back data |" in capsys.readouterr().out
