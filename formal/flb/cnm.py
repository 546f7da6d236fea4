"""FLB's congestion notification block (:mod:`lbpipe.hdl.flb.cnm`): every CNM agrees with the threshold in force and
its count with the set's size.

:class:`CnmThreshold` runs a small ``Cnm`` (free queue events of any port, in range or forged, enqueue or dequeue,
amount, flow and source; free threshold writes of any data; free back-pressure; a reset at any time). It keeps its
own copy of K (the instance's ``threshold`` at reset; a ``ctl`` table-0 write of a non-zero value replaces it, as
the datasheet's "Control" says: a command is taken only with the pipeline empty, so every item in flight was
judged against the K in force when it leaves). For every offered result it asserts:

* a CNM only for an ``ok`` event (a forged port does nothing);
* ``1 <= cnm_n <= n_slots`` with a CNM (a congestion counts the flow it adds, a release the set before it);
  ``cnm_n``, ``cnm_flow``, ``cnm_src``, ``cnm_cp`` are 0 without one.

It also keeps its own count of each port's set, from the CNMs alone (every join and every release is a CNM; a set
full or a flow already in the set changes nothing): a congestion CNM whose ``n`` is the count plus one is a join,
a release sets the count to ``n - 1``; reset empties them. Then:

* a release CNM only when ``qlen < K``, for the event's port (``cnm_cp == port``), with ``n`` the port's count;
* a join only for an enqueue whose estimate ``qlen`` is ``>= K``, for the event's port, flow and source;
* every other congestion CNM is a **refresh** and carries its port's current count (``cnm_n`` = the count of
  ``cnm_cp``'s set), on an event of any port.

Covers: a congestion CNM that fills the set (``cnm_n == n_slots``); a release CNM after a threshold write; a refresh
riding a dequeue.
"""

from amaranth import Array, Module, Signal
from amaranth.hdl import Assert, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["CnmThreshold"]


class CnmThreshold(Harness):
    """Threshold and count harness.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    n_slots, q_bits, threshold : int
        The instance's parameters (not read from the block).
    """

    def __init__(self, build, *, n_slots, q_bits, threshold):
        super().__init__(reset="free")
        self._build = build
        self._ns = n_slots
        self._qb = q_bits
        self._k0 = threshold

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))
        k = Signal(self._qb, init=self._k0, name="k_in_force")
        written = Signal(name="k_written")
        c = dut.ctl.payload
        with m.If(dut.ctl.valid & dut.ctl.ready & (c.table == 0) & (c.data[:self._qb] != 0)):
            m.d.sync += [k.eq(c.data[:self._qb]), written.eq(1)]
        o = dut.o.payload
        v = dut.o.valid
        cnm = v & o.cnm
        cleared = (o.cnm_n == 0) & (o.cnm_flow == 0) & (o.cnm_src == 0) & (o.cnm_cp == 0) & ~o.cnm_cong
        n_cp = 1 << len(o.cnm_cp)
        count = Array(Signal(len(o.cnm_n), name=f"set_count{p}") for p in range(n_cp))
        now = count[o.cnm_cp]
        join = cnm & o.cnm_cong & (o.cnm_n == now + 1)
        refresh = cnm & o.cnm_cong & ~(o.cnm_n == now + 1)
        release = cnm & ~o.cnm_cong
        with m.If(dut.o.ready & join):
            m.d.sync += now.eq(o.cnm_n)
        with m.If(dut.o.ready & release):
            m.d.sync += now.eq(o.cnm_n - 1)
        join_ok = ~o.deq & (o.qlen >= k) & (o.cnm_cp == o.port) & (o.cnm_flow == o.flow) & (o.cnm_src == o.src)
        in_range = (o.cnm_n >= 1) & (o.cnm_n <= self._ns) & (~release | (o.cnm_n == now))
        m.d.comb += [
            Assert(~cnm | o.ok, "a CNM for a forged event"),
            Assert(~join | join_ok, "a congestion CNM below K or for a dequeue (a join), or for another flow or port"),
            Assert(~release | ((o.qlen < k) & (o.cnm_cp == o.port)), "a release CNM at or above K or for another port"),
            Assert(~refresh | (o.cnm_n == now), "a refresh CNM not at its port's current count"),
            Assert(~cnm | in_range, "a CNM's count outside 1..n_slots (a release's: not its port's count)"),
            Assert(~v | o.cnm | cleared, "CNM fields set without a CNM"),
            Cover(cnm & o.cnm_cong & (o.cnm_n == self._ns)),
            Cover(cnm & ~o.cnm_cong & written),
            Cover(refresh & o.deq),
        ]
        return m
