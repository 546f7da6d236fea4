"""FLB's one-way-delay block (:mod:`lbpipe.hdl.flb.owd`): a piggyback is the newest measurement of its source edge,
sent at most once, and never names a path that does not exist.

:class:`OwdPiggyback` runs a small ``Owd`` (free packets: sampled, reverse, both or neither, any edge, path, stamp
and ``now``; free FORGET / FORGET_ALL commands of any index; free back-pressure; a reset at any time) and keeps, per
source edge, what left the block: the ``path`` and ``qdelay`` of the last accepted sample from that edge (``ok``
set) and whether it is still owed (a credit set by that sample's output, spent by a piggyback toward the edge).
Outputs leave in acceptance order, so this is the order the block handled them in. It asserts, for every offered
result:

* **range**: ``pb_path < n_paths`` (``n_paths`` not a power of two, so the field can name a path that does not
  exist);
* **at most once**: a piggyback toward edge ``e`` (``pb_valid``) is offered only by an ``ok`` reverse packet, and
  only while a sample from ``e`` is owed: between two piggybacks toward ``e`` a sample from ``e`` left;
* **newest**: its ``pb_path`` and ``pb_delay`` are those of the last sample from ``e``.

A FORGET_ALL empties the slots; the harness keeps its credit then (a piggyback it would still allow, the block does
not send, so the assertions stay sound). Covers: a piggyback on the highest path; a reverse with nothing owed.
"""

from amaranth import Module, Signal
from amaranth.hdl import Assert, Cover
from amaranth.lib import wiring

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["OwdPiggyback", "WithoutControl"]


class OwdPiggyback(Harness):
    """Piggyback harness.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    n_edges, n_paths : int
        The instance's edges and paths (from its parameters, not read from the block).
    """

    def __init__(self, build, *, n_edges, n_paths):
        super().__init__(reset="free")
        self._build = build
        self._ne = n_edges
        self._n = n_paths

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))
        o = dut.o.payload
        took = dut.o.valid & dut.o.ready
        sample_out = took & o.ok & o.sampled
        m.d.comb += [
            Assert(~dut.o.valid | ~o.pb_valid | (o.pb_path < self._n), "a piggyback names a path >= n_paths"),
            Assert(~dut.o.valid | ~o.pb_valid | (o.reverse & o.ok), "a piggyback on a packet that is not a reverse"),
        ]
        for e in range(self._ne):
            owed = Signal(name=f"owed_{e}")
            path = Signal(len(o.path), name=f"last_path_{e}")
            delay = Signal(len(o.qdelay), name=f"last_delay_{e}")
            with m.If(took & o.pb_valid & (o.to_edge == e)):
                m.d.sync += owed.eq(0)
            with m.If(sample_out & (o.edge == e)):
                m.d.sync += [owed.eq(1), path.eq(o.path), delay.eq(o.qdelay)]
            toward = dut.o.valid & o.pb_valid & (o.to_edge == e)
            newest = (o.pb_path == path) & (o.pb_delay == delay)
            m.d.comb += [
                Assert(~toward | owed, "a piggyback sent twice, or with no sample"),
                Assert(~toward | newest, "a piggyback that is not the newest measurement"),
            ]
        m.d.comb += [
            Cover(dut.o.valid & o.pb_valid & (o.pb_path == self._n - 1) & (o.pb_delay != 0)),
            Cover(dut.o.valid & o.reverse & o.ok & ~o.pb_valid & (o.to_edge == self._ne - 1)),
        ]
        return m


class WithoutControl(wiring.Component):
    """The block with its ``ctl`` port tied idle and not exported (``i``, ``o``, ``stats`` pass straight through):
    for the "ready again after reset" row, as a FORGET (one clock) and a FORGET_ALL (a sweep) hold ``i`` on
    purpose."""

    def __init__(self, build):
        self._inner = build()
        self.latency = self._inner.latency
        sig = self._inner.signature.members
        super().__init__({"i": sig["i"], "o": sig["o"], "stats": sig["stats"]})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self._inner
        m.d.comb += [inner.i.valid.eq(self.i.valid), inner.i.payload.eq(self.i.payload),
                     self.i.ready.eq(inner.i.ready), self.o.valid.eq(inner.o.valid),
                     self.o.payload.eq(inner.o.payload), inner.o.ready.eq(self.o.ready),
                     self.stats.eq(inner.stats), inner.ctl.valid.eq(0)]
        return m
