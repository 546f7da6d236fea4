"""cocotb testbench of the LAPS softmax path choice (run through lbpipe.engine.run_rtl or ``lbpipe replay``).

Besides the generic trace and reset tests, ``statistics`` (``LBPIPE_STAT_VECTORS`` set) drives many decisions per
latency vector and writes the RTL's choice counts to ``LBPIPE_STAT_OUT`` for the chi-square test in
tests/test_laps_softmax.py.
"""

import json
import os

import cocotb
from cocotb.triggers import RisingEdge

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import (TB, harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, settings_from_env, trace)


@cocotb.test(skip=os.environ.get("LBPIPE_STAT_VECTORS") is None)
async def statistics(dut):
    """For each latency vector: the control commands, then ``n`` decisions back to back; counts per slot out."""
    s = settings_from_env()
    spec = json.loads(os.environ["LBPIPE_STAT_VECTORS"])
    tb = TB(dut, s["block"], s["params"])
    await tb.reset()
    for cmd in spec["commands"]:
        await tb.control(cmd)
    results = []
    for vector in spec["vectors"]:
        for cmd in vector.get("commands", []):
            await tb.drain()
            await tb.control(cmd)
        start = len(tb.sink.items)
        for n in range(vector["n"]):
            tb.source.send(dict(vector["item"], tag=n & 0xFFFF))
        await tb.drain()
        counts = [0] * s["params"]["k"]
        for out in tb.sink.items[start:]:
            counts[out["slot"]] += 1
        results.append(counts)
    with open(os.environ["LBPIPE_STAT_OUT"], "w") as f:
        json.dump(results, f)


@cocotb.test(skip=os.environ.get("LBPIPE_INFLIGHT") is None)
async def beta_in_flight(dut):
    """A beta write lands while decisions are in flight (no drain): from the JSON file ``LBPIPE_INFLIGHT``, the
    set-up commands, then the items back to back, and once ``after`` items have been accepted the ``change``
    command over AXI4-Lite. The outputs go to ``LBPIPE_STAT_OUT``; the pytest side checks each against the old and
    the new beta."""
    s = settings_from_env()
    with open(os.environ["LBPIPE_INFLIGHT"]) as f:
        spec = json.load(f)
    tb = TB(dut, s["block"], s["params"])
    await tb.reset()
    for cmd in spec["setup"]:
        await tb.control(cmd)
    for item in spec["items"]:
        tb.source.send(item)
    while tb.source.sent < spec["after"]:
        await RisingEdge(dut.clk)
    await tb.control(spec["change"])
    await tb.drain()
    with open(os.environ["LBPIPE_STAT_OUT"], "w") as f:
        json.dump(tb.sink.items, f)
