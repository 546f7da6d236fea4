"""Cycle-exact cases in Amaranth's own simulator, for the tests that need to place one command or item on a chosen
clock edge (a lookup racing an update, a command accepted on the cycle of a reset), which a cocotb trace cannot."""

from amaranth import ClockDomain, Module
from amaranth.sim import Simulator

__all__ = ["simulate", "command"]


def simulate(dut, process, *, period=4e-9):
    """Run ``process(ctx, rst)`` on ``dut`` in a ``sync`` domain whose reset ``rst`` the process can drive."""
    m = Module()
    m.domains.sync = domain = ClockDomain()
    m.submodules.dut = dut
    sim = Simulator(m)
    sim.add_clock(period)

    async def testbench(ctx):
        await process(ctx, domain.rst)
    sim.add_testbench(testbench)
    sim.run()


async def command(ctx, dut, cmd):
    """Offer ``cmd`` (``table``, ``index``, ``data``) on ``dut.ctl`` until the edge that takes it."""
    ctx.set(dut.ctl.valid, 1)
    for name in ("table", "index", "data"):
        ctx.set(getattr(dut.ctl.payload, name), cmd[name])
    while True:
        ready = ctx.get(dut.ctl.ready)
        await ctx.tick()
        if ready:
            break
    ctx.set(dut.ctl.valid, 0)
