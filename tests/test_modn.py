import random

import pytest
from amaranth.sim import Simulator

from lbpipe.hdl.lib.modn import ModN, residue_bits


def test_parameters():
    with pytest.raises(ValueError):
        ModN(width=24, n=0)
    with pytest.raises(ValueError):
        ModN(width=24, n=257)
    with pytest.raises(TypeError):
        ModN(width=0, n=3)
    assert residue_bits(1) == 1 and residue_bits(256) == 8 and residue_bits(200) == 8 and residue_bits(3) == 2


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 200, 255, 256])
@pytest.mark.parametrize("width", [16, 24])
def test_residue(n, width):
    dut = ModN(width=width, n=n)
    rng = random.Random(n * 100 + width)
    values = [0, 1, n - 1, n, (1 << width) - 1] + [rng.randrange(1 << width) for _ in range(200)]
    got = []

    async def bench(ctx):
        ctx.set(dut.en, 1)
        for value in values + [0] * ModN.latency:
            ctx.set(dut.i, value)
            await ctx.tick()
            got.append(ctx.get(dut.o))
        # While en is low the pipeline holds.
        ctx.set(dut.en, 0)
        ctx.set(dut.i, 5)
        held = ctx.get(dut.o)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.o) == held

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # The value set before tick k appears after tick k + latency - 1.
    assert got[ModN.latency - 1:ModN.latency - 1 + len(values)] == [v % n for v in values]
