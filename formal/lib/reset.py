"""Reset reaches the documented empty state, whatever state the block was in (docs/architecture.md, "Reset").

:class:`ResetEmpty` drives a block like :class:`~lbpipe.formal.lib.stream.StreamContract` (free inputs, free
back-pressure, a reset at any time) and counts the cycles since the last reset. It asserts:

* **pipeline empty**: for ``latency`` cycles after a reset ``o.valid`` is low (an item accepted in the first cycle
  after the reset is the earliest output, ``latency`` cycles later): nothing from before the reset comes out;
* **counters cleared** (blocks whose datasheet says so): in the first cycle after a reset, ``stats`` is 0;
* **ready again**: from ``ready_within`` cycles after a reset, ``i.ready`` is high whenever ``o.ready`` is and no
  control command waits (a block that sweeps its tables after reset keeps its input not ready only for the sweep).

Run with k-induction: the induction step starts from any state, so the proof covers a reset in every reachable
state, not only those a bounded run from reset reaches. Covers: a reset with an output waiting, the first output
after a reset.
"""

from amaranth import Module, Signal
from amaranth.hdl import Assert, Cover

from .harness import Harness, drive_source, free

__all__ = ["ResetEmpty"]


class ResetEmpty(Harness):
    """Reset harness.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    extra : tuple of str
        Extra input streams.
    stats_cleared : bool
        The datasheet says reset clears ``stats``.
    ready_within : int or None
        Cycles after a reset by which ``i.ready`` follows ``o.ready`` (None: not asserted).
    """

    def __init__(self, build, *, extra=(), stats_cleared=True, ready_within=None):
        super().__init__(reset="free")
        self._build = build
        self._extra = tuple(extra)
        self._stats = stats_cleared
        self._ready_within = ready_within

    def elaborate(self, platform):
        m = Module()
        rst, _ = self.domain(m)
        m.submodules.dut = dut = self._build()
        latency = dut.latency
        for name in ("i", *self._extra):
            drive_source(self, m, getattr(dut, name), name)
        if hasattr(dut, "ctl"):
            drive_source(self, m, dut.ctl, "ctl")
        ready = free(self, 1, "o_ready")
        m.d.comb += dut.o.ready.eq(ready)

        horizon = max(latency, self._ready_within or 0) + 1
        since = Signal(range(horizon + 1))      # cycles since the last reset, saturating; 0 right after it
        # "<", not "!=": the induction step starts from any value of the counter, also those above the horizon.
        with m.If(since < horizon):
            m.d.sync += since.eq(since + 1)
        m.d.comb += Assert((since >= latency) | ~dut.o.valid, "an output within latency cycles of a reset")
        if self._stats and hasattr(dut, "stats"):
            m.d.comb += Assert((since != 0) | (dut.stats == 0), "stats not cleared by reset")
        if self._ready_within is not None:
            quiet = ~dut.ctl.valid if hasattr(dut, "ctl") else 1    # commands may take the input's slot
            m.d.comb += Assert((since < self._ready_within) | ~ready | ~quiet | dut.i.ready,
                               "input not ready after the reset's stated time")
        m.d.comb += [
            Cover(rst & dut.o.valid & ~ready),
            Cover((since >= latency) & dut.o.valid),
        ]
        return m
