"""Verilator ``--lint-only -Wall`` on everything lbpipe hands over: every block's ``lbpipe verilog`` output (the flat
top with its AXI4-Lite bridge, at the block's defaults) and the OpenNIC box (``lbpipe build``'s ``box_250mhz.v``
with the user logic). Clean means no warning and no error beyond the waivers below, each with its reason (also in
docs/nic_build.md, "Lint"):

* WIDTH: Amaranth's Verilog leans on Verilog's own operand extension (``inner_level + r_rdy``, ``x == 1'h1``); each
  such width change is the zero or sign extension Amaranth's semantics asked for.
* UNUSEDSIGNAL: Amaranth names every intermediate value and keeps struct fields a block does not read; the box
  keeps the shell's ports it does not need (``tuser_dst`` in, ``mod_rstn[15:1]``).
* CASEINCOMPLETE: Amaranth assigns each signal's default before every ``case``, so an uncovered value keeps it
  (no latch: Verilator's LATCH check stays on).
* DECLFILENAME: one file holds all modules of a design.
* UNUSEDPARAM, in box_250mhz.v only: MIN_PKT_LEN and MAX_PKT_LEN are in the shell's header and unused by lbpipe.
* CMPCONST, UNSIGNED: decoders comparing a field with every constant of its range (the LAPS header editor's
  thermometer codes) make the comparisons at the range's ends constant (``x >= 0``); Yosys folds them.
"""

import re
import shutil
import subprocess

import pytest

from lbpipe.blocks import BLOCKS

VERILATOR = shutil.which("verilator")

WAIVERS = """`verilator_config
lint_off -rule WIDTH
lint_off -rule UNUSEDSIGNAL
lint_off -rule CASEINCOMPLETE
lint_off -rule DECLFILENAME
lint_off -rule UNUSEDPARAM -file "*box_250mhz.v"
lint_off -rule CMPCONST
lint_off -rule UNSIGNED
"""

pytestmark = pytest.mark.skipif(VERILATOR is None, reason="verilator not installed")


def lint(tmp_path, files, top):
    """Lint ``files`` with the waivers; returns the findings (warnings and errors), one per line."""
    waivers = tmp_path / "waivers.vlt"
    waivers.write_text(WAIVERS)
    # --no-timing: the simulation build's "initial #0" kicks are not in these files, and none need timing.
    run = subprocess.run([VERILATOR, "--lint-only", "-Wall", "--no-timing", "--top-module", top, str(waivers),
                          *map(str, files)], capture_output=True, text=True, timeout=600)
    text = run.stdout + run.stderr
    found = re.findall(r"^%(?:Warning|Error)[^\n]*", text, flags=re.M)
    if run.returncode != 0 and not found:
        found = [text[-2000:]]
    return found


def _verilog(name, tmp_path):
    from lbpipe.cli import main
    assert main(["verilog", name, "-o", str(tmp_path)]) == 0
    stem = name.replace("-", "_")
    return tmp_path / f"{stem}.v", stem


# Every block at its defaults, in the deep profile (generating the Verilog of the big tables and pipelines takes up to
# minutes each). The default profile lints the shell boxes below.
@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_block_lint_clean(name, tmp_path):
    path, top = _verilog(name, tmp_path)
    found = lint(tmp_path, [path], top)
    assert not found, "\n".join(found[:20])


# Every pipeline with a box. The default profile lints themis-s-wire's and, at small tables, themis-d-wire's (the box
# with every part the others use: both merges' arbiter, the steering, both sizers); the deep profile the others at
# small tables and all at their defaults.
_SMALL = {"themis-d-wire": "n_qps=8 queue_depth=8 n_paths=3 buckets=16 ways=2 depth=32",
          "laps-rx-wire": "n_entries=64 depth=32", "laps-tx-wire": "n_dests=16 k=2 buckets=16 n_entries=32 depth=32",
          "pro-rx-wire": "n_qps=2048 buckets=16 ways=2"}


@pytest.mark.parametrize("pipeline, params", [
    ("themis-s-wire", ""), pytest.param("pro-tx-wire", "", marks=pytest.mark.deep),
    ("themis-d-wire", _SMALL["themis-d-wire"]),
    *(pytest.param(name, _SMALL[name], marks=pytest.mark.deep)
      for name in ("laps-rx-wire", "laps-tx-wire", "pro-rx-wire")),
    *(pytest.param(name, "", marks=pytest.mark.deep) for name in sorted(_SMALL))])
def test_opennic_box_lint_clean(pipeline, params, tmp_path):
    from lbpipe.cli import main
    extra = [arg for p in params.split() for arg in ("--param", p)]
    assert main(["build", pipeline, *extra, "-o", str(tmp_path / "out")]) == 0
    src = tmp_path / "out" / "src"
    found = lint(tmp_path, [src / "box_250mhz.v", src / "lbpipe_box_250mhz.v"], "box_250mhz")
    assert not found, "\n".join(found[:20])


def test_lint_finds_a_planted_defect(tmp_path):
    """The check can fail: a multiply-driven net and an unwaived warning in a small module are both reported."""
    bad = tmp_path / "bad.v"
    bad.write_text("module bad(input a, input b, output y);\n  assign y = a;\n  assign y = b;\nendmodule\n")
    found = lint(tmp_path, [bad], "bad")
    assert any("MULTIDRIVEN" in f or "Error" in f for f in found), found

