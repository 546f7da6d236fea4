"""LAPS AIMD (:mod:`lbpipe.hdl.laps.aimd`): a flow's rates stay within the limits and move only as each result's
``action`` says (window monotonicity).

docs/laps_aimd.md, "The algorithm, exactly" and "Clamping": ``clamp(x) = min(max(x, min_rate), line_rate)`` (the line
rate wins when the limits cross); a create stores both rates clamped; a decrease sets ``exp = clamp(cur)`` and
``cur = clamp(cur >> 1)``; an increase sets ``exp`` to ``clamp(exp)`` or ``clamp(2 exp)`` and moves ``cur`` half-way to
it (the ``sim`` variant: at least 1 Gb/s up, ``exp`` at least the new ``cur``); anything else (no window passed, a
held ACK, no valid slot, t infinite, not an ACK) changes nothing and reports the state; each result carries the
rates after its item, ``action`` (0 none, 1 increase, 2 decrease) and ``changed`` (the current rate differs from the
one before). From these, with the limits unchanged since the flow was created, every result of the flow satisfies,
against the one before it (or the create's clamped rates for the first):

* **within the limits**: ``min(min_rate, line_rate) <= rate, expected <= line_rate``, and ``hit`` = 1;
* **nothing moves without an action**: with ``action`` 0 both rates are the previous ones;
* **a decrease never raises**: with ``action`` 2, ``rate <= `` the previous rate, and ``expected`` = the previous rate;
* **an increase never lowers**: with ``action`` 1, ``expected >=`` the previous expected rate, and, when the previous
  rate was at most the previous expected rate, ``previous rate <= rate <= expected``;
* ``action`` is 0, 1 or 2, and ``changed`` is exactly "``rate`` differs from the previous rate".

:class:`AimdWindows` runs a small AIMD (free items and control commands of any table, index and data, free
back-pressure, a reset at any time) and keeps, per flow, the rates of its last result in output order (the serial
order: results leave in input order and a command waits for the pipeline to empty, datasheet "Control"). A flow is
watched from its create (the items accepted after the command) until it is removed or re-created, a limit command is
taken (stored rates may then lie outside the new limits until their next adjustment, as the datasheet says), or
reset (which removes every flow). The limits are the instance's parameters after reset (given to the harness, not
read from the block) and follow the LINE_RATE and MIN_RATE commands.

Covers: a watched flow's increase that raised its rate; its decrease that lowered it; a result with ``action`` 0
after an adjustment of its flow.
"""

from amaranth import Module, Mux, Signal
from amaranth.hdl import Assert, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["AimdWindows"]

_COUNT = 8
_RATE = 32
# The control tables and actions, from the datasheet.
_CREATE, _REMOVE, _LINE_RATE, _MIN_RATE = 0, 1, 2, 3
_NONE, _INC, _DEC = 0, 1, 2


class AimdWindows(Harness):
    """Rate-monotonicity harness around an AIMD controller.

    Parameters
    ----------
    build : callable
        Returns a fresh block with ``i``, ``o`` and ``ctl`` ports.
    n_flows : int
        The instance's flow count.
    line_rate, min_rate : int
        The limits the instance was built with (their values after reset), kbit/s.
    """

    def __init__(self, build, *, n_flows, line_rate, min_rate):
        super().__init__(reset="free")
        self._build = build
        self._n_flows = n_flows
        self._line0, self._min0 = line_rate, min_rate

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))

        took_in = dut.i.valid & dut.i.ready
        took_ctl = dut.ctl.valid & dut.ctl.ready
        took_out = dut.o.valid & dut.o.ready
        accepted = Signal(_COUNT)
        delivered = Signal(_COUNT)
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)

        # The limits in force: the parameters after reset, then the commands.
        line = Signal(_RATE, init=self._line0)
        low = Signal(_RATE, init=self._min0)
        c = dut.ctl.payload
        limits_cmd = took_ctl & ((c.table == _LINE_RATE) | (c.table == _MIN_RATE))
        with m.If(took_ctl & (c.table == _LINE_RATE)):
            m.d.sync += line.eq(c.data[:_RATE])
        with m.If(took_ctl & (c.table == _MIN_RATE)):
            m.d.sync += low.eq(c.data[:_RATE])
        floor = Mux(low > line, line, low)

        def clamp(x):
            above_min = Mux(x < low, low, x)
            return Mux(above_min > line, line, above_min)

        out = dut.o.payload
        rate, expected, action = out.rate, out.expected, out.action
        for f in range(self._n_flows):
            watched = Signal(name=f"watched{f}")
            start = Signal(_COUNT, name=f"start{f}", reset_less=True)
            prev_cur = Signal(_RATE, name=f"prev_cur{f}", reset_less=True)
            prev_exp = Signal(_RATE, name=f"prev_exp{f}", reset_less=True)
            adjusted = Signal(name=f"adjusted{f}")
            mine = took_ctl & (c.index == f)
            with m.If(mine & (c.table == _CREATE)):
                m.d.sync += [watched.eq(1), start.eq(accepted), adjusted.eq(0),
                             prev_cur.eq(clamp(c.data[:_RATE])), prev_exp.eq(clamp(c.data[_RATE:2 * _RATE]))]
            with m.Elif((mine & (c.table == _REMOVE)) | limits_cmd):
                m.d.sync += watched.eq(0)

            its = watched & took_out & (out.flow == f) & (delivered >= start)
            ordered = prev_cur <= prev_exp
            in_range = (floor <= rate) & (rate <= line) & (floor <= expected) & (expected <= line)
            still = (rate == prev_cur) & (expected == prev_exp)
            down = (rate <= prev_cur) & (expected == prev_cur)
            up = ~ordered | ((prev_cur <= rate) & (rate <= expected))
            m.d.comb += [
                Assert(~its | out.hit, "a watched flow's result is a miss"),
                Assert(~its | in_range, "a rate outside the limits"),
                Assert(~its | (action <= _DEC), "an action that is not none, increase or decrease"),
                Assert(~its | (action != _NONE) | still, "rates moved without an action"),
                Assert(~its | (action != _DEC) | down, "a decrease raised the rate, or set another expected rate"),
                Assert(~its | (action != _INC) | (expected >= prev_exp), "an increase lowered the expected rate"),
                Assert(~its | (action != _INC) | up, "an increase lowered the rate, or took it past the expected"),
                Assert(~its | (out.changed == (rate != prev_cur)), "changed does not say whether the rate changed"),
            ]
            if f == 0:
                m.d.comb += [
                    Cover(its & (action == _INC) & (rate > prev_cur)),
                    Cover(its & (action == _DEC) & (rate < prev_cur)),
                    Cover(its & (action == _NONE) & adjusted),
                ]
            with m.If(its):
                m.d.sync += [prev_cur.eq(rate), prev_exp.eq(expected)]
                with m.If(action != _NONE):
                    m.d.sync += adjusted.eq(1)
        return m
