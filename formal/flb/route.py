"""FLB's path decision (:mod:`lbpipe.hdl.flb.route`): a decision never names a path that does not exist.

:class:`RoutePathRange` runs a small ``Route`` (free packets of any flow, destination and ``now``, free control
commands of any table, index and data, free back-pressure, a reset at any time) and asserts in every cycle that an
offered result's ``path`` is below ``n_paths`` (with ``n_paths`` not a power of two, the path field can hold values
that name no path). Covers: a result on the highest path; a result for an existing flow that was rerouted.
"""

from amaranth import Module
from amaranth.hdl import Assert, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["RoutePathRange"]


class RoutePathRange(Harness):
    """Path-range harness.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    n_paths : int
        The paths that exist (from the instance's parameters, not read from the block).
    """

    def __init__(self, build, *, n_paths):
        super().__init__(reset="free")
        self._build = build
        self._n_paths = n_paths

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))
        o = dut.o.payload
        m.d.comb += [
            Assert(~dut.o.valid | (o.path < self._n_paths), "a decision names a path >= n_paths"),
            Cover(dut.o.valid & o.ok & (o.path == self._n_paths - 1)),
            Cover(dut.o.valid & o.ok & o.rerouted),
        ]
        return m
