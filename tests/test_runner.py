"""The cocotb runner's Verilog: every combinational process runs after time zero (see ``_kick_processes``)."""

from amaranth.back import verilog

from lbpipe.tb.lib.runner import _kick_processes, run_cocotb, write_verilog
from lbpipe.tb.lib.test_runner import StateDecoded


def test_kick_adds_one_initial_per_module():
    text = verilog.convert(StateDecoded(), name="state_decoded")
    kicked = _kick_processes(text)
    assert text.count("dump_module") > 0
    assert kicked.count("initial #0 ") == text.count("  reg \\$auto$verilog_backend")
    assert kicked.replace("\n", "").count("= 1;") >= 1


def test_state_decoded_output_is_not_x():
    path = write_verilog(StateDecoded(), name="state_decoded")
    run_cocotb(path, toplevel="state_decoded", test_module="lbpipe.tb.lib.test_runner")
