"""cocotb testbench of Themis-D with the scan beside the data path (:class:`ThemisDSplit`), on the shared harness.

The block is not in the registry (see docs/themis.md, "Themis-D with the scan beside the data path"): this module
describes it as a :class:`Block` (:data:`SPLIT_BLOCK`, the ``themis-d`` entry with this component and a golden model
that makes no timing prediction) and registers it in the simulator's process, so the harness's settings, golden
runs and reset tests find it by name. The oracle is the unchanged golden model :class:`lbpipe.sim.themis.themis_d.
ThemisD`.

Testcases:

* ``split_trace``: the trace against the golden model (every output field, the statistics counters); with neither
  idle input nor back-pressure, the timing this block promises: the items before a segment's first NACK leave
  exactly ``latency`` cycles after they were accepted, at one item per clock. Records outputs and measurements
  (items per clock, and each item's acceptance cycle) as the generic ``trace`` test does.
* ``reset_mid_traffic``, ``reset_state``: the harness's generic reset tests.
* ``harness_catches_a_wrong_output``: the scoreboard's self-test.
"""

import dataclasses
import json
import os

import cocotb

from lbpipe.blocks import BLOCKS, get_block
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.themis.themis_d_split import ThemisDSplit
from lbpipe.sim.themis.themis_d import ThemisD as GoldenThemisD
from lbpipe.tb.lib import harness
from lbpipe.tb.lib.harness import TB, Scoreboard, expect_failure, run_reset_state_test, run_reset_test
from lbpipe.trace import read_events, write_events

__all__ = ["SPLIT_BLOCK", "register"]


class SplitGolden:
    """The golden model :class:`ThemisD` without its timing prediction (``cycles`` describes today's block)."""

    def __init__(self, **params):
        self._model = GoldenThemisD(**params)

    def control(self, cmd):
        return self._model.control(cmd)

    def process(self, item):
        return self._model.process(item)

    def reset(self):
        self._model.reset()

    def stats(self):
        return self._model.stats()


#: ``themis-d``'s registry entry with this component, the golden model without timing and this testbench.
SPLIT_BLOCK = dataclasses.replace(get_block("themis-d"), name="themis-d-split", build=ThemisDSplit,
                                  golden=SplitGolden, tb_module="lbpipe.tb.themis.test_themis_d_split")


def register():
    """Make ``themis-d-split`` known to the harness in this process, if the registry lacks it."""
    BLOCKS.setdefault(SPLIT_BLOCK.name, SPLIT_BLOCK)


# Only the simulator's process, which runs this block, learns of it: the registry seen by every other test (and by
# the CLI) stays the shipped one, whichever order a pytest worker imports modules in.
if os.environ.get("LBPIPE_BLOCK") == SPLIT_BLOCK.name:
    register()


def _segments(events):
    runs, run = [], []
    for event in events:
        if "ctl" in event:
            if run:
                runs.append(run)
            run = []
        elif "item" in event:
            run.append(event["item"])
    if run:
        runs.append(run)
    return runs


def timing_errors(tb, events, latency):
    """Per run of items between commands: the items before its first NACK with a flow-table hit leave ``latency``
    cycles after acceptance, each accepted one cycle after the one before."""
    errors, index = [], 0
    accept, out = tb.source.accept_cycles, tb.sink.cycles
    n_qps = tb.params["n_qps"]
    for run in _segments(events):
        for j, item in enumerate(run):
            if item.get("kind") == PacketKind.NACK.value and item.get("qp_hit") and item.get("qp", 0) < n_qps:
                break
            k = index + j
            if out[k] - accept[k] != latency:
                errors.append(f"item {k}: latency {out[k] - accept[k]} cycles, datasheet says {latency}")
            if j and accept[k] - accept[k - 1] != 1:
                errors.append(f"item {k}: accepted {accept[k] - accept[k - 1]} cycles after the previous one")
        index += len(run)
    return errors


async def run_split_trace(dut, *, corrupt=None):
    from lbpipe.engine import golden_run
    s = harness.settings_from_env()
    block, params = s["block"], s["params"]
    events = read_events(s["trace"])
    expected, model = golden_run(block, params, events)
    if corrupt == "output":
        expected[len(expected) // 2]["tag"] ^= 1
    board = Scoreboard(expected)
    tb = TB(dut, block, params, idle=s["idle"], backpressure=s["backpressure"], seed=s["seed"], on_item=board)
    await tb.reset()
    start = tb.source.cycle
    await tb.play(events)
    await tb.drain()
    acc = tb.source.accept_cycles
    stats = {"items": len(expected), "cycles": tb.source.cycle - start, "accepted": tb.source.sent,
             "outputs": len(tb.sink.items)}
    stats["accept_cycles"] = [c - start for c in acc]
    if len(acc) > 1:
        stats["items_per_clock"] = (len(acc) - 1) / (acc[-1] - acc[0]) if acc[-1] > acc[0] else 1.0
    errors = list(tb.sink.errors) + board.mismatches[:10]
    if board.index != len(expected):
        errors.append(f"received {board.index} items, golden model produced {len(expected)}")
    counters = await tb.read_status(9)
    stats["counters"] = counters
    if counters != model.stats():
        errors.append(f"statistics counters {counters}, golden model {model.stats()}")
    if not s["idle"] and not s["backpressure"] and not board.mismatches:
        errors += timing_errors(tb, events, tb.component.latency)[:10]
    if s["out"]:
        write_events(s["out"], [{"item": item} for item in tb.sink.items])
    stats["errors"] = len(errors)
    if s["stats"]:
        with open(s["stats"], "w") as f:
            json.dump(stats, f)
    assert not errors, "\n".join(errors)


@cocotb.test()
async def split_trace(dut):
    """The trace against the golden model, with the timing the block promises when unthrottled."""
    await run_split_trace(dut)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with items in flight: earlier outputs are a golden prefix, and a rerun after reset matches exactly."""
    await run_reset_test(dut)


@cocotb.test()
async def reset_state(dut):
    """Reset, then the rest of the trace without a new set-up: outputs as the golden model's documented reset."""
    await run_reset_state_test(dut)


@cocotb.test()
async def harness_catches_a_wrong_output(dut):
    """Self-test of the scoreboard: one expected output has a flipped bit, so the run must fail on it."""
    await expect_failure(run_split_trace(dut, corrupt="output"), "(rtl, golden) differ in")
