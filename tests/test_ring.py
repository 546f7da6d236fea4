"""The shared queue primitives: ring pointers and memory against the golden Ring, and the layout FIFO."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.ring import RingMemory, RingState, ring_base, ring_drop, ring_push
from lbpipe.sim.lib.ring import Ring


def test_golden_ring():
    ring = Ring(3)
    assert ring.push(1) and ring.push(2) and ring.push(3)
    assert [ring[i] for i in range(len(ring))] == [1, 2, 3]
    assert ring.push(4)                        # overwrites the oldest
    assert [ring[i] for i in range(3)] == [2, 3, 4]
    assert not ring.push(5, overwrite=False)   # refused when full
    ring.drop(2)
    assert len(ring) == 1 and ring[0] == 4
    with pytest.raises(ValueError):
        ring.drop(2)
    with pytest.raises(IndexError):
        ring[1]


class _RingDut(wiring.Component):
    """Rings of ``depth`` 8-bit entries with their pointers in registers, driven by (ring, op, value, n)."""

    def __init__(self, n_rings, depth, overwrite):
        self.n_rings, self.depth, self.overwrite = n_rings, depth, overwrite
        super().__init__({
            "ring": In(range(n_rings)), "push": In(1), "drop": In(1), "n": In(range(depth + 1)), "value": In(8),
            "state": Out(RingState(depth)), "accepted": Out(1),
            "rd_ring": In(range(n_rings)), "rd_pos": In(range(depth)), "rd_data": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = RingMemory(n_rings=self.n_rings, depth=self.depth, shape=8)
        states = [Signal(RingState(self.depth), name=f"st{r}") for r in range(self.n_rings)]
        st = Signal(RingState(self.depth))
        for r, s in enumerate(states):
            with m.If(self.ring == r):
                m.d.comb += st.eq(s)
        m.d.comb += self.state.eq(st)
        pushed, accepted = ring_push(st, self.depth, overwrite=self.overwrite)
        dropped = ring_drop(st, self.n, self.depth)
        m.d.comb += [
            self.accepted.eq(accepted),
            mem.wr_base.eq(ring_base(self.ring, self.depth)), mem.wr_pos.eq(st.tail), mem.wr_data.eq(self.value),
            mem.wr_en.eq(self.push & accepted),
            mem.rd_base.eq(ring_base(self.rd_ring, self.depth)), mem.rd_pos.eq(self.rd_pos),
            self.rd_data.eq(mem.rd_data),
        ]
        for r, s in enumerate(states):
            with m.If(self.ring == r):
                with m.If(self.push):
                    m.d.sync += [s.head.eq(pushed["head"]), s.tail.eq(pushed["tail"]), s.count.eq(pushed["count"])]
                with m.Elif(self.drop):
                    m.d.sync += [s.head.eq(dropped["head"]), s.count.eq(dropped["count"])]
        return m


@pytest.mark.parametrize("depth", [1, 3, 5, 8])
@pytest.mark.parametrize("overwrite", [True, False])
def test_ring_pointers_and_memory_match_golden(depth, overwrite):
    n_rings = 3
    dut = _RingDut(n_rings, depth, overwrite)
    rng = random.Random(depth * 2 + overwrite)
    gold = [Ring(depth) for _ in range(n_rings)]

    async def bench(ctx):
        for _ in range(300):
            r = rng.randrange(n_rings)
            ctx.set(dut.ring, r)
            ctx.set(dut.push, 0)
            ctx.set(dut.drop, 0)
            state = ctx.get(dut.state)
            assert (state.head, state.tail, state.count) == (gold[r].head, gold[r].tail, gold[r].count)
            # Every entry the golden ring holds is in the memory at head + i (two-cycle registered read).
            for i in range(len(gold[r])):
                ctx.set(dut.rd_ring, r)
                ctx.set(dut.rd_pos, (gold[r].head + i) % depth)
                await ctx.tick().repeat(RingMemory.read_latency)
                assert ctx.get(dut.rd_data) == gold[r][i]
            if rng.random() < 0.7:
                value = rng.randrange(256)
                ctx.set(dut.push, 1)
                ctx.set(dut.value, value)
                assert ctx.get(dut.accepted) == int(gold[r].push(value, overwrite=overwrite))
            else:
                n = rng.randrange(len(gold[r]) + 1)
                ctx.set(dut.drop, 1)
                ctx.set(dut.n, n)
                gold[r].drop(n)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_ring_memory_parameters():
    with pytest.raises(ValueError):
        RingMemory(n_rings=0, depth=4, shape=8)
    with pytest.raises(TypeError):
        RingMemory(n_rings=2, depth=4.0, shape=8)


LAYOUT = data.StructLayout({"kind": 3, "psn": 24, "tag": 16})


@pytest.mark.parametrize("depth", [1, 2, 7])
def test_stream_fifo_carries_layout_in_order_under_backpressure(depth):
    dut = StreamFIFO(shape=LAYOUT, depth=depth)
    rng = random.Random(depth)
    items = [{"kind": rng.randrange(8), "psn": rng.randrange(1 << 24), "tag": k} for k in range(200)]
    got = []

    async def producer(ctx):
        for item in items:
            while rng.random() < 0.3:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.payload, item)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        while len(got) < len(items):
            ready = int(rng.random() < 0.6)
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid and ready:
                got.append({"kind": payload.kind, "psn": payload.psn, "tag": payload.tag})
            assert ctx.get(dut.level) <= depth

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    assert got == items
