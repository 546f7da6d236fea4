"""Verilator --lint-only on every block's generated Verilog: no errors, latches, multiple drivers or comb loops.

Amaranth's output carries harmless width, unused-signal and incomplete-case warnings; those are not checked.
"""

import re
import shutil
import subprocess

import pytest

from lbpipe.blocks import BLOCKS
from lbpipe.engine import top_verilog

SMALL = {"themis-d": {"n_qps": 16, "queue_depth": 12}}


@pytest.mark.skipif(shutil.which("verilator") is None, reason="verilator not installed")
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_verilator_lint(name):
    path = top_verilog(name, SMALL.get(name, {}))
    # --no-timing: the simulation build adds "initial #0" kicks (tb/lib/runner.py), which lint may ignore.
    run = subprocess.run(["verilator", "--lint-only", "--no-timing", "-Wall", "-Wno-fatal", "--top-module",
                          "lbpipe_top", str(path)], capture_output=True, text=True, timeout=300)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-3000:]
    bad = re.findall(r"%(Error[^:]*|Warning-(?:LATCH|MULTIDRIVEN|UNOPTFLAT|BLKANDNBLK|COMBDLY|ALWCOMBORDER)):.*",
                     text)
    assert not bad, "\n".join(bad[:20])
