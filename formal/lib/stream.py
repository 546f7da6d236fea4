"""The stream contract every metadata block promises (docs/architecture.md, "A block"), as formal harnesses.

:class:`StreamContract` drives a block's ``i`` (and any extra input streams, and ``ctl``) from free inputs that keep
the producer's rule, and its ``o.ready`` freely (arbitrary back-pressure and idle input), with a reset at any time.
It asserts, in every cycle:

* **stable**: an output offered and not taken is offered again in the next cycle with the same payload (unless a
  reset came between);
* **no spurious output**: an output is handed over only while an accepted item has not yet left
  (``accepted - delivered > 0``; both counters cleared by reset, as the block's pipeline is);
* **order**: a watched item, chosen by the solver at acceptance (the ``n``-th accepted since reset), leaves as the
  ``n``-th output with its ``tag`` unchanged; with the counters this is one output per input, in order, none lost
  or duplicated (items carry distinct tags when the solver wants them to);
* **bounded in flight**: at most ``capacity`` items are inside the block;
* **progress**: with an item inside and ``o.ready`` high, an output is handed over within ``stall_bound``
  consecutive ready cycles (a lost item would hold ``accepted - delivered`` above 0 for ever).

and covers that each antecedent happens: an output back-pressured for a cycle, the watched item leaving, an output
taken with another item still inside, a reset with items inside.

:class:`ValidIndependence` is the miter for "``valid`` never waits on ``ready``": two copies of the block see the
same inputs in every cycle except one probe cycle, in which their ``o.ready`` may differ; their ``o.valid`` must
agree in that cycle. Before the probe both copies are in the same state (same reset, same inputs), so a difference
can only come through a combinational path from ``o.ready`` to ``o.valid``.
"""

from amaranth import Module, Signal
from amaranth.hdl import Assert, Assume, Cover

from .harness import Harness, drive_source, free

__all__ = ["StreamContract", "ValidIndependence"]

_COUNT = 8


class StreamContract(Harness):
    """Stream-contract harness around a metadata block.

    Parameters
    ----------
    build : callable
        Returns a fresh block (ports ``i``, ``o``, optionally ``ctl`` and the streams in ``extra``).
    capacity : int or callable
        Most items the block may hold (accepted, not yet delivered); a callable is given the block.
    stall_bound : int or callable
        Most consecutive cycles with ``o.ready`` high and an item inside without an output; a callable is given
        the block.
    extra : tuple of str
        Names of extra input streams (the LAPS PIT's ``upd``), driven like ``i``.
    ctl : bool
        Drive ``ctl`` from free inputs (otherwise it is held idle).
    tag : str
        The output field that returns the input's tag unchanged.
    """

    def __init__(self, build, *, capacity, stall_bound, extra=(), ctl=True, tag="tag", reset="free"):
        super().__init__(reset=reset)
        self._build = build
        self._capacity = capacity
        self._stall_bound = stall_bound
        self._extra = tuple(extra)
        self._ctl = ctl
        self._tag = tag

    def elaborate(self, platform):
        m = Module()
        rst, _ = self.domain(m)
        m.submodules.dut = dut = self._build()
        capacity = self._capacity(dut) if callable(self._capacity) else self._capacity
        stall_bound = self._stall_bound(dut) if callable(self._stall_bound) else self._stall_bound
        if capacity >= 1 << (_COUNT - 1) or stall_bound >= 1 << _COUNT:
            raise ValueError("capacity and stall_bound must fit the harness counters")
        drive_source(self, m, dut.i, "i")
        for name in self._extra:
            drive_source(self, m, getattr(dut, name), name)
        if hasattr(dut, "ctl"):
            if self._ctl:
                drive_source(self, m, dut.ctl, "ctl")
            else:
                m.d.comb += dut.ctl.valid.eq(0)
        ready = free(self, 1, "o_ready")
        m.d.comb += dut.o.ready.eq(ready)

        took_in = dut.i.valid & dut.i.ready
        took_out = dut.o.valid & dut.o.ready
        accepted = Signal(_COUNT)
        delivered = Signal(_COUNT)
        inside = Signal(_COUNT)
        m.d.comb += inside.eq(accepted - delivered)
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)

        self._stable(m, dut)
        self._order(m, dut, took_in, took_out, accepted, delivered)

        m.d.comb += [
            Assert(~took_out | (inside != 0), "output without an accepted item"),
            Assert(inside <= capacity, "more items inside than the block can hold"),
        ]
        stall = Signal(_COUNT)
        with m.If(ready & (inside != 0) & ~took_out):
            m.d.sync += stall.eq(stall + 1)
        with m.Else():
            m.d.sync += stall.eq(0)
        m.d.comb += [
            Assert(stall <= stall_bound, "no output for stall_bound ready cycles with an item inside"),
            Cover(took_out & (inside >= 2)),
            Cover(rst & (inside >= 2)),
        ]
        return m

    def _stable(self, m, dut):
        """Asserts that an offered, untaken output is offered again unchanged."""
        waiting = Signal(name="o_waiting")
        last = Signal(len(dut.o.payload.as_value()), name="o_last", reset_less=True)
        m.d.sync += [waiting.eq(dut.o.valid & ~dut.o.ready), last.eq(dut.o.payload.as_value())]
        m.d.comb += [
            Assert(~waiting | dut.o.valid, "valid withdrawn before ready"),
            Assert(~waiting | (dut.o.payload.as_value() == last), "payload changed while waiting"),
            Cover(waiting),
        ]

    def _order(self, m, dut, took_in, took_out, accepted, delivered):
        """Watches one item chosen at acceptance; asserts it leaves at its place in the order with its tag."""
        pick = free(self, 1, "watch")
        armed = Signal()
        seq = Signal(_COUNT, reset_less=True)
        tag = Signal(len(dut.i.payload.tag), reset_less=True)
        with m.If(took_in & pick & ~armed):
            m.d.sync += [armed.eq(1), seq.eq(accepted), tag.eq(dut.i.payload.tag)]
        its_turn = armed & took_out & (delivered == seq)
        m.d.comb += [
            Assert(~its_turn | (getattr(dut.o.payload, self._tag) == tag), "output out of order, lost or duplicated"),
            Cover(its_turn & (seq != 0)),
        ]


class ValidIndependence(Harness):
    """Miter: ``o.valid`` of a block does not depend combinationally on its ``o.ready``.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    extra : tuple of str
        Extra input streams, driven alike in both copies.
    """

    def __init__(self, build, *, extra=()):
        super().__init__(reset="start")
        self._build = build
        self._extra = tuple(extra)

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.a = a = self._build()
        m.submodules.b = b = self._build()
        names = ["i", *self._extra] + (["ctl"] if hasattr(a, "ctl") else [])
        for name in names:
            drive_source(self, m, getattr(a, name), name)
            pa, pb = getattr(a, name), getattr(b, name)
            m.d.comb += [pb.valid.eq(pa.valid), pb.payload.eq(pa.payload)]
        ready_a = free(self, 1, "o_ready_a")
        ready_b = free(self, 1, "o_ready_b")
        probe = free(self, 1, "probe")
        probed = Signal()
        with m.If(probe):
            m.d.sync += probed.eq(1)
        m.d.comb += [
            a.o.ready.eq(ready_a), b.o.ready.eq(ready_b),
            Assume(probe | (ready_a == ready_b)),
            # Nothing after the probe matters: the copies part there.
            Assume(~probed),
            Assert(~probe | (a.o.valid == b.o.valid), "o.valid depends on o.ready in the same cycle"),
            Cover(probe & a.o.valid & (ready_a != ready_b)),
        ]
        return m
