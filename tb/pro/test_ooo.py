"""cocotb testbench of PRO's receiver window (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine rtl``)."""

import cocotb

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import expect_failure, reset_mid_traffic, reset_state, run_trace_test, trace  # noqa: F401


@cocotb.test()
async def harness_catches_a_wrong_output(dut):
    """Self-test of the scoreboard: one expected output has a flipped bit, so the run must fail on it."""
    await expect_failure(run_trace_test(dut, corrupt="output"), "(rtl, golden) differ in")


@cocotb.test()
async def harness_catches_a_wrong_cycle(dut):
    """Self-test of the timing check: one predicted output cycle is off by one, so the run must fail on it."""
    await expect_failure(run_trace_test(dut, corrupt="timing"), "golden model predicts")
