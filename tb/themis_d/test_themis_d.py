"""cocotb testbench of Themis-D (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine rtl``)."""

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
