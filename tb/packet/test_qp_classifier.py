"""cocotb testbench of the QP classifier, on :class:`lbpipe.boards.top.AxiLiteTop` (flat ``in_*``/``out_*`` ports and
the AXI4-Lite control bridge), with the shared harness's ``TB``, ``StreamSource``, ``StreamSink`` and
``Scoreboard``.

``classifier_phases`` (run by ``tests/test_qp_classifier.py`` through :func:`lbpipe.tb.lib.runner.run_cocotb`; the
settings come in ``QPC_*`` environment variables, so the block needs no registry entry) runs one trace three ways
on one build, every output compared field by field with the golden model and the statistics counters with its
``stats()``:

1. unthrottled: also every item's latency (``QpClassifier.latency``) and one item accepted per clock between
   control commands;
2. after a reset, the trace's items again (no commands), with idle input cycles and output back-pressure: the
   table written before the reset must still be there;
3. the whole trace with idle cycles and back-pressure and a reset at a random point with items in flight: the
   outputs before the reset are a prefix of the golden outputs, and the rest of the trace after it matches the
   golden model with every command issued before the reset applied.

Once the block is registered, the generic ``trace`` and ``reset_mid_traffic`` tests imported from the harness run
through :func:`lbpipe.engine.run_rtl` like every block's.
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles

# The generic tests every registered block runs, defined once in the harness.
from lbpipe.tb.lib.harness import (TB, Scoreboard, expect_failure, reset_mid_traffic, reset_state,  # noqa: F401
                                   trace)
from lbpipe.trace import read_events

__all__ = ["stand_in_block"]


def stand_in_block():
    """A :class:`lbpipe.blocks.Block` describing the classifier, for the harness's ``TB`` (not registered)."""
    from lbpipe.blocks import Block, Param
    from lbpipe.hdl.packet.qp_classifier import QpClassifier
    from lbpipe.sim.packet.qp_classifier import QpClassifier as Golden
    return Block(
        name="qp-classifier",
        summary="exact-match QP classifier: RoCEv2 connection key to flow-table index",
        paper_ref="Themis (APNet 2025), section 4 (the QP ID of a flow entry)",
        params=[Param("n_entries", 4096, ""), Param("buckets", 4096, ""), Param("ways", 4, ""),
                Param("ipv6", True, ""), Param("user_bits", 0, "")],
        build=lambda **p: QpClassifier(**p),
        golden=lambda **p: Golden(**p),
        tb_module=__name__,
        doc="",
    )


def _golden(params, events, model=None):
    from lbpipe.sim.packet.qp_classifier import QpClassifier as Golden
    model = model or Golden(**params)
    outputs = []
    for event in events:
        if "ctl" in event:
            model.control({"table": 0, "index": 0, "data": 0, **event["ctl"]})
        else:
            outputs.append(model.process(event["item"]))
    return outputs, model


async def _drive(tb, events):
    for event in events:
        if "ctl" in event:
            await tb.drain()
            await tb.control(event["ctl"])
        else:
            tb.source.send(event["item"])


def _check_board(board, expected, what):
    errors = [f"{what}: {m}" for m in board.mismatches[:10]]
    if board.index != len(expected):
        errors.append(f"{what}: received {board.index} items, golden model produced {len(expected)}")
    return errors


def _segments(events):
    sizes, run = [], 0
    for event in events:
        if "ctl" in event:
            sizes.append(run)
            run = 0
        else:
            run += 1
    return sizes + [run]


@cocotb.test()
async def classifier_phases(dut):
    """Unthrottled with timing, after reset with the table kept, and reset in mid-traffic (module docstring)."""
    params = json.loads(os.environ["QPC_PARAMS"])
    events = read_events(os.environ["QPC_TRACE"])
    seed = int(os.environ.get("QPC_SEED", "1"))
    idle = float(os.environ.get("QPC_IDLE", "0.25"))
    backpressure = float(os.environ.get("QPC_BACKPRESSURE", "0.5"))
    rng = random.Random(seed)
    items = [e for e in events if "item" in e]
    errors = []
    measured = {}

    # Phase 1: unthrottled, timing checked.
    expected, model = _golden(params, events)
    board = Scoreboard(expected)
    tb = TB(dut, stand_in_block(), params, seed=seed, on_item=board)
    await tb.reset()
    start = tb.source.cycle
    await _drive(tb, events)
    await tb.drain()
    errors += _check_board(board, expected, "unthrottled")
    errors += list(tb.sink.errors)
    latency = tb.component.latency
    accept, out = tb.source.accept_cycles, tb.sink.cycles
    late = [k for k in range(len(out)) if out[k] - accept[k] != latency]
    if late:
        k = late[0]
        errors.append(f"{len(late)} items with a latency other than {latency}; item {k}: {out[k] - accept[k]}")
    gaps, k = 0, 0
    for size in _segments(events):
        gaps += sum(1 for j in range(k + 1, k + size) if accept[j] - accept[j - 1] != 1)
        k += size
    if gaps:
        errors.append(f"{gaps} items accepted later than one clock after the previous one of their run")
    counters = await tb.read_status(3)
    if counters != model.stats():
        errors.append(f"unthrottled: counters {counters}, golden model {model.stats()}")
    measured.update(items=len(items), cycles=tb.source.cycle - start, hits=model.stats()[0])

    # Phase 2: reset (the table stays), the items again with idle cycles and back-pressure.
    await tb.reset()
    model.reset()
    expected, model = _golden(params, items, model)
    tb.sink.on_item = board = Scoreboard(expected)
    tb.source.idle, tb.sink.backpressure = idle, backpressure
    await _drive(tb, items)
    await tb.drain()
    errors += _check_board(board, expected, "after reset, table kept")
    counters = await tb.read_status(3)
    if counters != model.stats():
        errors.append(f"after reset: counters {counters}, golden model {model.stats()}")
    measured["hits_after_reset"] = model.stats()[0]

    # Phase 3: reset in mid-traffic. Commands are awaited until the block accepts them, so every command before
    # the cut has been issued; the items in flight at the reset are lost.
    await tb.reset()
    model.reset()
    cut = rng.randrange(len(events) // 4, 3 * len(events) // 4)
    expected, model = _golden(params, events[:cut], model)
    tb.sink.items.clear()
    tb.sink.on_item = None
    tb.source.sent = 0
    await _drive(tb, events[:cut])
    await ClockCycles(dut.clk, rng.randrange(1, 8))
    await tb.reset()
    model.reset()
    before = list(tb.sink.items)
    if before != expected[:len(before)]:
        errors.append("outputs before the reset are not a prefix of the golden outputs")
    expected, model = _golden(params, events[cut:], model)
    tb.sink.items.clear()
    tb.sink.on_item = board = Scoreboard(expected)
    tb.source.sent = 0
    await _drive(tb, events[cut:])
    await tb.drain()
    errors += _check_board(board, expected, "after a reset in mid-traffic")
    errors += list(tb.sink.errors)
    measured.update(cut=cut, before_reset=len(before))

    if os.environ.get("QPC_OUT"):
        with open(os.environ["QPC_OUT"], "w") as f:
            json.dump(measured, f)
    assert not errors, "\n".join(errors)


@cocotb.test()
async def classifier_catches_a_wrong_output(dut):
    """Self-test: the scoreboard must fail when one expected output has a flipped ``qp_hit``, and for that."""
    await expect_failure(_wrong_output(dut), "differ in {'qp_hit'")


async def _wrong_output(dut):
    params = json.loads(os.environ["QPC_PARAMS"])
    events = read_events(os.environ["QPC_TRACE"])
    expected, _ = _golden(params, events)
    victim = next(o for o in expected if o["qp_hit"])
    victim["qp_hit"] ^= 1
    board = Scoreboard(expected)
    tb = TB(dut, stand_in_block(), params, on_item=board)
    await tb.reset()
    await _drive(tb, events)
    await tb.drain()
    assert not board.mismatches, "\n".join(board.mismatches)
