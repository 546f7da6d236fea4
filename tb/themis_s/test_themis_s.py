"""cocotb testbench of Themis-S (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine rtl``)."""

import cocotb

from ..harness import run_reset_test, run_trace_test


@cocotb.test()
async def trace(dut):
    """Drive the trace, compare every output with the golden model, check timing when unthrottled."""
    await run_trace_test(dut)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with items in flight: earlier outputs are a golden prefix, and a rerun after reset matches exactly."""
    await run_reset_test(dut)


@cocotb.test(expect_fail=True)
async def harness_catches_a_wrong_output(dut):
    """Self-test of the scoreboard: one expected output has a flipped bit, so this run must fail."""
    await run_trace_test(dut, corrupt="output")


@cocotb.test(expect_fail=True)
async def harness_catches_a_wrong_cycle(dut):
    """Self-test of the timing check: one predicted output cycle is off by one, so this run must fail."""
    await run_trace_test(dut, corrupt="timing")
