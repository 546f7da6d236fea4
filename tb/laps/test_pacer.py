"""cocotb testbench of the LAPS pacer (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine rtl``)."""

import cocotb

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import (harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, trace)



@cocotb.test()
async def reset_clears_counters_and_pipeline(dut):
    """Reset with requests in flight: right after it every STATUS counter reads 0 and nothing more comes out
    (the requests in flight are dropped). The per-flow memories' side is checked by the generic ``reset_state``."""
    from cocotb.triggers import ClockCycles
    from lbpipe.tb.lib.harness import TB, settings_from_env
    from lbpipe.trace import read_events
    s = settings_from_env()
    events = read_events(s["trace"])
    tb = TB(dut, s["block"], s["params"], seed=s["seed"])
    await tb.reset()
    await tb.play(events)
    await ClockCycles(dut.clk, 6)                  # requests in flight, more queued
    before = await tb.read_status(5)
    await tb.reset()
    after = await tb.read_status(5)
    count = len(tb.sink.items)
    await ClockCycles(dut.clk, 40)
    assert before[0] > 0, f"no request counted before the reset: {before}"
    assert after == [0] * 5, f"counters after reset {after}"
    assert len(tb.sink.items) == count, "outputs after the reset"
