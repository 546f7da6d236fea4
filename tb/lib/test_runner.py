"""cocotb self-test of :mod:`lbpipe.tb.lib.runner`: combinational processes are evaluated after time zero.

:class:`StateDecoded` has an output assigned in a state of an FSM from a register that never changes: in Amaranth's
Verilog that is an ``always @*`` block whose inputs never change after time zero, which Icarus left at X before
:func:`lbpipe.tb.lib.runner._kick_processes`.
"""

import cocotb
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

__all__ = ["StateDecoded"]


class StateDecoded(wiring.Component):
    go: In(1)
    y: Out(1)

    def elaborate(self, platform):
        m = Module()
        held = Signal(init=1)
        m.d.sync += held.eq(held)
        with m.FSM():
            with m.State("A"):
                m.d.comb += self.y.eq(held)
                with m.If(self.go):
                    m.next = "B"
            with m.State("B"):
                m.next = "A"
        return m


@cocotb.test()
async def no_x_after_time_zero(dut):
    dut.go.value = 0
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    await ClockCycles(dut.clk, 3)
    assert str(dut.y.value) == "1", f"y is {dut.y.value}"
