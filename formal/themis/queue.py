"""Themis-D's per-QP state (:mod:`lbpipe.hdl.themis.themis_d`): PSN-queue pointers, reads of written slots only, and
compensation armed only by a blocked NACK.

:class:`ThemisDQueue` runs a small Themis-D (free input items, free control commands, free back-pressure, a reset at
any time) and reads its internal state through a harness-only subclass, :class:`ProbedThemisD`: the subclass calls
the block's own stage methods unchanged and only keeps references to what they create (the flow-table memory, its
write port, the PSN-queue memory's ports, the scan engine, the result and its ``produce`` strobe), and adds
asynchronous read ports to the flow table for the harness alone. The shipped block is not modified.

Asserted in every cycle:

* **queue pointers** of every QP's flow entry, as stored in the flow table: ``head``, ``tail`` < depth,
  ``count`` <= depth, ``tail == (head + count) mod depth`` (the harness's own arithmetic);
* **no read of a slot never written since reset**: a shadow bit per PSN-queue slot is set when a push lands in the
  memory (the queue's write port is registered: the shadow follows a cycle after the push, as the memory does), and
  cleared only by reset; every queue read the scan engine issues (one per ``sc_pending`` cycle) is of a slot whose
  shadow bit was set when the read was sampled;
* **compensation armed only by a blocked NACK**: a flow-table write that sets a QP's Valid (BePSN armed) while the
  stored entry's Valid is clear happens only in a cycle where the block produces the result of a NACK of that QP
  with verdict ``NACK_BLOCKED``.

Covers: a full queue, a tail wrap, a scan read, a NACK's compensation armed.
"""

from amaranth import Module, Mux, Signal
from amaranth.hdl import Assert, Cover

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.themis.themis_d import ThemisD, ThemisDVerdict

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["ProbedThemisD", "ThemisDQueue"]


class ProbedThemisD(ThemisD):
    """Themis-D with references to its internal state kept for a harness (``probe_*``), and one asynchronous flow-table
    read port per QP plus one at the write address. Only for single-bank flow tables (``n_qps`` <= 4096)."""

    def _memories(self, m):
        flow_rd, flow_wr, queues, psn_mod = super()._memories(m)
        flows = m.submodules["flows"]
        self.probe_flow_wr = flow_wr
        self.probe_queues = queues
        self.probe_entries = [flows.read_port(domain="comb") for _ in range(self._n_qps)]
        self.probe_at_wr = flows.read_port(domain="comb")
        return flow_rd, flow_wr, queues, psn_mod

    def _statistics(self, m, result, produce):
        self.probe_result, self.probe_produce = result, produce
        super()._statistics(m, result, produce)

    def _compare_stage(self, m, adv, done, fw, s3, s4, scan, took_hi, took_lo):
        self.probe_scan, self.probe_done = scan, done
        super()._compare_stage(m, adv, done, fw, s3, s4, scan, took_hi, took_lo)


def _mod(value, depth):
    """``value mod depth`` for ``value < 2 * depth``."""
    return Mux(value >= depth, value - depth, value)


class ThemisDQueue(Harness):
    """Harness of Themis-D's per-QP invariants.

    Parameters
    ----------
    build : callable
        Returns a fresh :class:`ProbedThemisD` (or a subclass that plants a fault).
    cover_arm : bool
        Cover a NACK arming compensation (its first trace is 18 cycles long at the small instance: a set-up, a data
        packet, the NACK and its scan; shorter runs leave it out).
    """

    def __init__(self, build, *, cover_arm=True):
        super().__init__(reset="free")
        self._build = build
        self._cover_arm = cover_arm

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        dut = self._build()
        # The harness elaborates the block itself, so the probes exist before it states anything about them.
        m.submodules.dut = dut.elaborate(platform)
        dut._MustUse__silence = True
        n_qps, depth = dut.n_qps, dut.queue_depth
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))

        self._pointers(m, dut, n_qps, depth)
        self._written(m, dut, n_qps, depth)
        self._armed(m, dut)
        return m

    def _pointers(self, m, dut, n_qps, depth):
        for qp, port in enumerate(dut.probe_entries):
            m.d.comb += port.addr.eq(qp)
            ring = port.data.ring
            in_range = (ring.head < depth) & (ring.tail < depth) & (ring.count <= depth)
            m.d.comb += [
                Assert(in_range, "queue pointer out of range"),
                Assert(ring.tail == _mod(ring.head + ring.count, depth), "queue tail != (head + count) mod depth"),
                Cover(port.data.active & (ring.count == depth)),
            ]
        wr = dut.probe_flow_wr
        m.d.comb += Cover(wr.en & (wr.data.ring.tail == 0) & (wr.data.ring.count != 0))

    def _written(self, m, dut, n_qps, depth):
        q, scan = dut.probe_queues, dut.probe_scan
        size = n_qps * depth
        written = Signal(size, name="slot_written")
        # The queue's write port is registered: a push requested now lands in the memory in the next cycle.
        land = Signal(name="push_lands")
        land_addr = Signal(range(max(2, size)), name="push_lands_addr")
        m.d.sync += [land.eq(q.wr_en), land_addr.eq(q.wr_base + q.wr_pos)]
        with m.If(land):
            for slot in range(size):
                with m.If(land_addr == slot):
                    m.d.sync += written[slot].eq(1)
        # The read sampled this cycle (address rd_base + rd_pos) is the one whose issue shows as sc_pending next.
        rd_addr = Signal(range(max(2, size)), name="scan_rd_addr")
        m.d.comb += rd_addr.eq(q.rd_base + q.rd_pos)
        rd_written = Signal(name="scan_rd_written", reset_less=True)
        m.d.sync += rd_written.eq(Mux(rd_addr < size, written.bit_select(rd_addr, 1), 0))
        m.d.comb += [
            Assert(~scan.pending | rd_written, "scan read a queue slot never written since reset"),
            Cover(scan.pending & scan.pending2),
        ]

    def _armed(self, m, dut):
        wr, old, result = dut.probe_flow_wr, dut.probe_at_wr, dut.probe_result
        m.d.comb += old.addr.eq(wr.addr)
        arms = Signal(name="arms")
        m.d.comb += arms.eq(wr.en & wr.data.valid & ~old.data.valid)
        blocked_here = (dut.probe_produce & (result.kind == PacketKind.NACK)
                        & (result.verdict == ThemisDVerdict.NACK_BLOCKED) & (result.qp == wr.addr))
        m.d.comb += Assert(~arms | blocked_here, "compensation armed without a blocked NACK of that QP")
        if self._cover_arm:
            m.d.comb += Cover(arms)
