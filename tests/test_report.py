"""``lbpipe report``: the resource table (core and top side by side, ratios to the papers' figures), its CSV and
JSON, the bar chart, the table-size sweep's plan and plot, and the CLI's refusals. Expected values are worked by
hand from the report dicts written here, not taken from the formatter."""

import csv
import io
import json

import pytest

from lbpipe.blocks import BLOCKS, get_block
from lbpipe.cli import main
from lbpipe.report import SCALE, format_csv, format_markdown, resource_table, scale_points, write_resources, write_scale


def _report(block, lut, ff, levels, top=None, **more):
    r = {"block": block, "lut": lut, "ff": ff, "carry8": 3, "ramb36": 2, "ramb18": 1, "uram": 0, "dsp": 0,
         "logic_levels": levels, **more}
    if top:
        r["top"] = {"lut": top[0], "ff": top[1], "carry8": 3, "ramb36": 2, "ramb18": 1, "uram": 0, "dsp": 0,
                    "logic_levels": top[2]}
    return r


def test_ratios_are_the_shipped_top_over_the_paper():
    reports = [_report("a", 1000, 2000, 5, top=(1500, 2400, 6)), _report("b", 10, 20, 3)]
    paper = {"a": {"LUT": 3000, "registers": 4800, "ALM": "0.3K", "RAM": "15 KB"}}
    a, b = resource_table(reports, paper)
    assert a["ratio"] == {"lut": 0.5, "ff": 0.5}                  # 1,500 / 3,000 and 2,400 / 4,800
    assert a["paper_text"] == {"ALM": "0.3K", "RAM": "15 KB"}      # not LUTs, not divided
    assert a["core"]["lut"] == 1000 and a["top"]["lut"] == 1500
    assert b["top"] is None and b["ratio"] == {}
    # The U280 has 1,303,680 LUTs (DS963): 1,500 of them plus nothing else is 0.115%.
    assert abs(a["u280_percent"]["lut"] - 100 * 1500 / 1303680) < 1e-9
    md = format_markdown([a, b])
    assert "| `a` | 1,000 / 1,500 | 2,000 / 2,400 |" in md
    assert "LUT 3,000 (0.50x)" in md and "FF 4,800 (0.50x)" in md and "ALM: 0.3K" in md
    assert "| `b` | 10 / - | 20 / - |" in md and "| 3 / - |" in md


def test_csv_has_core_and_top_columns():
    rows = list(csv.DictReader(io.StringIO(format_csv(resource_table(
        [_report("a", 1000, 2000, 5, top=(1500, 2400, 6)), _report("b", 10, 20, 3)], {"a": {"LUT": 3000}})))))
    assert [r["block"] for r in rows] == ["a", "b"]
    assert rows[0]["core_lut"] == "1000" and rows[0]["top_lut"] == "1500" and rows[0]["top_logic_levels"] == "6"
    assert rows[0]["paper_lut"] == "3000" and rows[1]["top_lut"] == "" and rows[1]["paper_lut"] == ""


def test_write_resources_and_scale_files(tmp_path):
    paths = write_resources([_report("a", 1000, 2000, 5, top=(1500, 2400, 6))], tmp_path, {"a": {"LUT": 3000,
                                                                                                 "FF": 4000}})
    assert [p.name for p in paths] == ["resources.md", "resources.csv", "resources.json", "resources_vs_papers.png"]
    assert json.loads(paths[2].read_text())[0]["ratio"]["ff"] == 0.6
    assert paths[3].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sweeps = {"a": [(1024, _report("a", 100, 200, 4, bram_bits=36864)), (4096, _report("a", 150, 210, 5))]}
    md, js, png = write_scale(sweeps, tmp_path)
    assert "| `a` | 1,024 | 100 | 200 | 2 | 1 | 0 | 37 | 4 |" in md.read_text()     # 36,864 bits = 37 kbit
    assert [p["size"] for p in json.loads(js.read_text())["a"]] == [1024, 4096]
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", sorted(SCALE))
def test_every_sweep_point_is_a_valid_configuration(name):
    block = get_block(name)
    points = scale_points(name)
    assert [n for n, _ in points][0] == 1024 and len(points) >= 3
    for size, over in points:
        assert set(over) <= {p.name for p in block.params}
        block.check(block.resolve(over))


def test_blocks_with_tables_have_a_sweep():
    """Every block whose per-flow or per-QP table is sized by one of these parameters is swept (wire pipelines
    excepted: their tables are their stages', swept on their own)."""
    sizing = {"n_qps", "n_flows", "n_dests", "n_entries"}
    missing = [b.name for b in BLOCKS.values() if b.is_meta and sizing & {p.name for p in b.params}
               and b.name not in SCALE]
    assert not missing, f"blocks with a table but no report sweep: {missing}"


@pytest.mark.parametrize("argv, message", [
    (["report", "nope"], "nope"),
    (["report", "themis-s", "--sweep"], "no table to sweep"),
    (["report", "all", "--from", "/nonexistent/synth.json"], "--from"),
    (["report", "all", "--from", "{tmp}/bad.json"], "not an lbpipe synth report"),
    (["report", "all", "--sweep", "--from", "{tmp}/bad.json"], "--from reads a synth report"),
])
def test_cli_refusals(tmp_path, capsys, argv, message):
    (tmp_path / "bad.json").write_text('{"x": 1}')
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv] + ["-o", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_report_of_one_block_synthesized(tmp_path, capsys):
    """A real (small) synthesis through the CLI: themis-s at its defaults, core and top."""
    assert main(["report", "themis-s", "-o", str(tmp_path), "--workdir", str(tmp_path / "work")]) == 0
    rec = json.loads((tmp_path / "resources.json").read_text())
    assert [r["block"] for r in rec] == ["themis-s"]
    assert rec[0]["core"]["lut"] > 0 and rec[0]["top"]["lut"] > rec[0]["core"]["lut"]
    assert (tmp_path / "img" / "resources_vs_papers.png").exists()
