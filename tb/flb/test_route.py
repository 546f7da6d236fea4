"""cocotb testbench of FLB's per-packet path decision (run through lbpipe.engine.run_rtl or ``lbpipe replay
--engine rtl``).

Besides the generic tests, ``ctl_race``: the trace's control commands that come after its first item are written
over AXI4-Lite while the items stream in back to back (no drain), so each command lands between two packets the
testbench does not choose. A monitor records the clock edge each command is taken on (``ctl`` valid and ready),
counted in packets taken before it; the outputs must be those of the golden model with each command applied
exactly there."""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.trace import read_events
from lbpipe.tb.lib.harness import (TB, harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, settings_from_env, trace)


def replay_with(model, items, cmds, where):
    """``model``'s outputs with command ``k`` applied just before item ``where[k]``."""
    out = []
    pending = list(zip(where, cmds))
    for n, item in enumerate(items):
        while pending and pending[0][0] == n:
            model.control(pending.pop(0)[1])
        out.append(model.process(item))
    return out


@cocotb.test()
async def ctl_race(dut):
    s = settings_from_env()
    block, params = s["block"], s["params"]
    events = read_events(s["trace"])
    first = next(n for n, e in enumerate(events) if "item" in e)
    setup = [e["ctl"] for e in events[:first] if "ctl" in e]
    rest = events[first:]
    items = [e["item"] for e in rest if "item" in e]
    racing = [(sum(1 for e in rest[:n] if "item" in e), e["ctl"]) for n, e in enumerate(rest) if "ctl" in e]
    tb = TB(dut, block, params, idle=s["idle"], backpressure=s["backpressure"], seed=s["seed"])
    await tb.reset()
    for cmd in setup:
        await tb.control(cmd)
    rng = random.Random(s["seed"])
    landed = []
    taken = [0]

    async def watch():
        # the clock edge a command is taken on, counted in items taken on earlier edges (the block never takes
        # both on one edge)
        while True:
            await RisingEdge(dut.clk)
            if int(dut.ctl__valid.value) and int(dut.ctl__ready.value):
                landed.append(taken[0])
            if int(dut.in_valid.value) and int(dut.in_ready.value):
                taken[0] += 1

    async def commands():
        for before, cmd in racing:
            while tb.source.sent < before:
                await RisingEdge(dut.clk)
            await ClockCycles(dut.clk, rng.randrange(3))
            await tb.control(cmd)

    watcher = cocotb.start_soon(watch())
    task = cocotb.start_soon(commands())
    for item in items:
        tb.source.send(item)
    await task
    await tb.drain()
    watcher.cancel()
    assert not tb.sink.errors, tb.sink.errors
    assert len(landed) == len(racing), landed
    assert sum(0 < n < len(items) for n in landed) >= len(landed) - 1, f"commands did not race the packets: {landed}"
    model = block.golden(**params)
    for cmd in setup:
        model.control(cmd)
    got = tb.sink.items
    want = replay_with(model, items, [c for _, c in racing], landed)
    bad = [n for n, (g, w) in enumerate(zip(got, want)) if g != w]
    assert len(got) == len(items) and not bad, (
        f"commands taken before items {landed}; outputs differ from the model's at items {bad[:5]}")
    dut._log.info(f"commands taken before items {landed}")
