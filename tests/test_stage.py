"""The stream stages of ``hdl/lib/stage.py`` in Amaranth's simulator: every item handed on once, in order, under
random valid and ready; one item per clock when the sink is always ready; and which outputs come from flip-flops
(a register slice's valid, payload and ready; a skid's ready)."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.stage import register_slice, skid
from lbpipe.tb.lib.pysim import simulate

STAGES = {"register_slice": register_slice, "skid": skid}


class _Stage(wiring.Component):
    i: In(stream.Signature(16))
    o: Out(stream.Signature(16))

    def __init__(self, stage):
        self._stage = stage
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        ready = Signal()
        STAGES[self._stage](m, "t", self.i.valid, self.i.payload, ready, self.o)
        m.d.comb += self.i.ready.eq(ready)
        return m


def _run(stage, items, p_valid, p_ready, seed):
    """Offer ``items`` with probability ``p_valid`` per clock, take with ``p_ready``; returns (items out, clocks)."""
    dut, rng, out, clocks = _Stage(stage), random.Random(seed), [], [0]

    async def process(ctx, rst):
        pending = list(items)
        ctx.set(dut.i.valid, 0)
        while len(out) < len(items) and clocks[0] < 50 * len(items) + 50:
            if pending and not ctx.get(dut.i.valid) and rng.random() < p_valid:
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, pending[0])
            ctx.set(dut.o.ready, rng.random() < p_ready)
            took_in = ctx.get(dut.i.valid) and ctx.get(dut.i.ready)
            took_out = ctx.get(dut.o.valid) and ctx.get(dut.o.ready)
            if took_out:
                out.append(ctx.get(dut.o.payload))
            await ctx.tick()
            clocks[0] += 1
            if took_in:
                pending.pop(0)
                ctx.set(dut.i.valid, 0)
                if pending and rng.random() < p_valid:
                    ctx.set(dut.i.valid, 1)
                    ctx.set(dut.i.payload, pending[0])
    simulate(dut, process)
    return out, clocks[0]


@pytest.mark.parametrize("stage", sorted(STAGES))
@pytest.mark.parametrize("p_valid, p_ready", [(1.0, 1.0), (0.7, 0.5), (1.0, 0.3), (0.3, 1.0)])
def test_items_pass_once_in_order(stage, p_valid, p_ready):
    rng = random.Random(3)
    items = [rng.randrange(1 << 16) for _ in range(300)]
    out, _ = _run(stage, items, p_valid, p_ready, seed=int(10 * p_valid + p_ready * 100))
    assert out == items


@pytest.mark.parametrize("stage, latency", [("register_slice", 1), ("skid", 0)])
def test_one_item_per_clock(stage, latency):
    """200 items through an always-ready sink: 200 clocks plus the stage's latency (1 for the register slice, 0 for
    the skid, whose item passes straight through: hdl/lib/stage.py's docstrings)."""
    items = list(range(1, 201))
    out, clocks = _run(stage, items, 1.0, 1.0, seed=1)
    assert out == items and clocks == len(items) + latency


@pytest.mark.parametrize("stage, registered", [("register_slice", {"ready", "valid", "payload"}),
                                               ("skid", {"ready"})])
def test_which_outputs_are_flip_flops(stage, registered):
    """Within one clock, change the sink's ready and the source's valid and payload: an output that comes from a
    flip-flop does not move; one that is combinational does (the skid's valid and payload follow the input)."""
    dut = _Stage(stage)
    seen = {}

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 0)
        await ctx.tick()
        before = {"ready": ctx.get(dut.i.ready), "valid": ctx.get(dut.o.valid), "payload": ctx.get(dut.o.payload)}
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 0xBEEF)
        after = {"ready": ctx.get(dut.i.ready), "valid": ctx.get(dut.o.valid), "payload": ctx.get(dut.o.payload)}
        seen.update({name: before[name] == after[name] for name in before})
    simulate(dut, process)
    assert {name for name, same in seen.items() if same} == registered


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_reset_empties_the_stage(stage):
    """Both registers full (sink refusing), then reset: right after it, nothing is offered and ``ready`` is high
    (checked before any new item could fill it), and the held items never come out."""
    dut = _Stage(stage)
    seen = {}

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 0)
        for value in (0x11, 0x22, 0x33):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, value)
            await ctx.tick()
        seen["full"] = (ctx.get(dut.o.valid), ctx.get(dut.i.ready))
        ctx.set(dut.i.valid, 0)
        ctx.set(rst, 1)
        await ctx.tick()
        ctx.set(rst, 0)
        seen["after"] = (ctx.get(dut.o.valid), ctx.get(dut.i.ready))
        ctx.set(dut.o.ready, 1)
        await ctx.tick()
        seen["later"] = ctx.get(dut.o.valid)
    simulate(dut, process)
    assert seen["full"] == (1, 0)
    assert seen["after"] == (0, 1) and seen["later"] == 0
