"""cocotb testbench of FLB's one-way-delay measurement and piggyback (run through lbpipe.engine.run_rtl or
``lbpipe replay --engine rtl``).

Besides the generic tests, ``ctl_under_backpressure``: a FORGET written over AXI4-Lite while the output is held
(one result waiting in the output register) must land at once, before the result is taken, and the next sample of
the forgotten (edge, path) must set its base again."""

import cocotb
from cocotb.triggers import ClockCycles, SimTimeoutError, with_timeout

from lbpipe.tb.lib.harness import (TB, harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, settings_from_env, trace)


@cocotb.test()
async def ctl_under_backpressure(dut):
    s = settings_from_env()
    tb = TB(dut, s["block"], s["params"], seed=s["seed"])
    await tb.reset()
    tb.sink.backpressure = 1.0          # ready held low from now on
    # (edge 1, path 2): owd 50 sets the base; it then waits in the output register
    tb.source.send({"kind": 1, "sampled": 1, "edge": 1, "path": 2, "stamp": 10, "now": 60, "tag": 1})
    await ClockCycles(dut.clk, 10)
    try:                                # FORGET (edge 1, path 2), within 100 clocks
        await with_timeout(tb.control({"table": 0, "index": 1 << 4 | 2, "data": 0}), 400, "ns")
    except SimTimeoutError:
        raise AssertionError("the FORGET was not taken while the output was held") from None
    assert not tb.sink.items, "the FORGET waited for the output to be taken"
    tb.sink.backpressure = 0.0
    # owd 60: the base was forgotten, so this sample sets it again (delay 0); with the old base it would read 10
    tb.source.send({"kind": 1, "sampled": 1, "edge": 1, "path": 2, "stamp": 0, "now": 60, "tag": 2})
    await tb.drain()
    got = [(o["tag"], o["qdelay"], o["base_set"]) for o in tb.sink.items]
    assert got == [(1, 0, 1), (2, 0, 1)], got
    assert not tb.sink.errors, tb.sink.errors
