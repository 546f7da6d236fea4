"""cocotb testbench of the SELB clustering engine (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine
rtl``): the generic tests; the block-specific checks (independent k-means, atomic publish, the waiting tick) are
traces run by tests/test_selb_cluster.py through the same ``trace`` test.

Besides them, ``ctl_while_streaming``: a theta write over AXI4-Lite must land while lookups stream at one per clock
and while a result waits in the held output register (the harness's traces drain the pipeline before every command,
so they cannot see a command held off by traffic), and the theta written must be the one the next tick uses."""

import cocotb
from cocotb.triggers import ClockCycles, SimTimeoutError, with_timeout

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import (TB, harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, settings_from_env, trace)


async def _write_theta(tb, theta, what):
    try:                                # AXI4-Lite write and the block's acceptance, well within 100 clocks
        await with_timeout(tb.control({"table": 0, "index": 0, "data": theta}), 400, "ns")
    except SimTimeoutError:
        raise AssertionError(f"the theta write was not taken {what}") from None


@cocotb.test()
async def ctl_while_streaming(dut):
    s = settings_from_env()
    p = s["params"]
    tb = TB(dut, s["block"], p, seed=s["seed"])
    await tb.reset()
    look = lambda path, tag: {"item": {"kind": 1, "path": path, "tag": tag}}          # noqa: E731
    smp = lambda path, q, tick=0: {"smp": {"path": path, "qlen": q, "tick": tick}}    # noqa: E731
    # 1. lookups at one per clock: the write lands between them
    for t in range(200):
        tb.source.send_group(look(t % p["n_paths"], t))
    await ClockCycles(dut.clk, 20)
    await _write_theta(tb, 3, "while lookups stream")
    await tb.drain()
    # 2. the output held with a result in it: the write still lands, and the result stays
    tb.sink.backpressure = 1.0
    tb.source.send_group(look(0, 500))
    await ClockCycles(dut.clk, 10)
    n_before = len(tb.sink.items)
    await _write_theta(tb, 5, "while the output is held")
    assert len(tb.sink.items) == n_before, "the theta write waited for the output to be taken"
    tb.sink.backpressure = 0.0
    await tb.drain()
    # 3. the next tick uses theta = 5: path 0 grows by 6 over one period (congested: 6 > 5), path 1 by 5 (not)
    for group in ([smp(0, 0, 1)], [smp(0, 6), smp(1, 5), smp(0, 0, 1)], [smp(0, 0, 1)]):
        for g in group:
            tb.source.send_group(g)
        await ClockCycles(dut.clk, 40 * p["n_paths"] * p["iter_cap"])     # the engine done before the next tick
    tb.source.send_group(look(0, 600))
    tb.source.send_group(look(1, 601))
    await tb.drain()
    got = {o["tag"]: o["congested"] for o in tb.sink.items if o["tag"] in (600, 601)}
    assert got == {600: 1, 601: 0}, f"congested flags after theta = 5: {got} (want path 0 only)"
    assert not tb.sink.errors and not tb.source.errors, (tb.sink.errors, tb.source.errors)
