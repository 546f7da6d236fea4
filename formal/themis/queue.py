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

With ``part="pointers", inductive=True`` the harness states the queue pointers only, with the invariants that make
them inductive (:meth:`ThemisDQueue._inductive`: consistent pointers in every copy of a flow entry that can be
written back, the NACK scan's dequeue count within its entry's count), for k-induction: the pointers for all time.
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

    def _stage_registers(self):
        self.probe_stages = super()._stage_registers()
        return self.probe_stages

    def _forwarded_flow_entry(self, m, flow_rd, fw, s4):
        self.probe_flow_rd, self.probe_fw = flow_rd, fw
        return super()._forwarded_flow_entry(m, flow_rd, fw, s4)

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
    part : str
        ``"all"``: the three properties; ``"pointers"``: the queue pointers only.
    inductive : bool
        Also assert the invariants that make the pointer property inductive (:meth:`_inductive`): every register
        that holds a flow entry on its way back to the table has consistent pointers, and the scan's dequeue count
        stays within the scanned entry's count.
    """

    def __init__(self, build, *, cover_arm=True, part="all", inductive=False):
        super().__init__(reset="free")
        if part not in ("all", "pointers"):
            raise ValueError(f"part must be 'all' or 'pointers', not {part!r}")
        self._build = build
        self._cover_arm = cover_arm
        self._part = part
        self._inductive_inv = inductive

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        dut = self._build()
        # The harness elaborates the block itself, so the probes exist before it states anything about them.
        m.submodules.dut = body = dut.elaborate(platform)
        dut._MustUse__silence = True
        n_qps, depth = dut.n_qps, dut.queue_depth
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))

        self._pointers(m, dut, n_qps, depth)
        if self._inductive_inv:
            self._inductive(m, dut, body, depth)
        if self._part == "all":
            self._written(m, dut, n_qps, depth)
            self._armed(m, dut)
        return m

    def _inductive(self, m, dut, body, depth):
        """Invariants for k-induction: the pointers of every copy of a flow entry that can reach the table (the flow
        table's read data and its register ``rd_q``, the last two writes ``last_wr``/``prev_wr``, the compare stage's
        choice ``base4``, the scan's entry, the write data) are consistent, so the read-modify-write stage, whichever
        it forwards, writes a consistent entry; and the scan dequeues at most what its entry holds (``n1`` <= count;
        before an out-of-range verdict, ``n1`` + reads in flight + reads left <= count), so the NACK's write-back
        (``ring_drop(n1)``) keeps the pointers consistent."""
        fw, scan = dut.probe_fw, dut.probe_scan
        _, s2, s3, s4 = dut.probe_stages
        # The read-modify-write stage's state register (the block's one FSM, in the module its elaborate returned).
        fsm = body._generated["fsm"]
        in_scan = fsm._data["signal"] == fsm.encoding["SCAN"]
        # The read data and the registers fed from it hold an item's entry only while that item is in the stage that
        # uses them (the read data register is not reset: at power-up it holds anything until the first read).
        copies = {"flow_rd.data": (dut.probe_flow_rd.data, s2.valid), "rd_q": (fw.rd_q, s3.valid),
                  "base4": (fw.base4, s4.valid), "last_wr": (fw.last_wr, None), "prev_wr": (fw.prev_wr, None),
                  "sc_entry": (scan.entry, None), "flow_wr.data": (dut.probe_flow_wr.data, None)}
        for name, (entry, when) in copies.items():
            ring = entry.ring
            ok = (ring.head < depth) & (ring.tail < depth) & (ring.count <= depth) & \
                (ring.tail == _mod(ring.head + ring.count, depth))
            m.d.comb += Assert(ok if when is None else ~when | ok, f"inconsistent pointers in {name}")
        for s in (s3, s4):
            classed = s.nack | s.data | s.setup | s.teardown
            m.d.comb += Assert(~classed | s.valid, "a stage's item class set without a valid item")
        count = scan.entry.ring.count
        in_flight = (scan.pending + scan.pending2 + scan.pending3 + scan.x_valid + scan.d_valid + scan.f_valid)
        m.d.comb += [
            Assert(~in_scan | ~scan.oor, "scanning after an out-of-range verdict"),
            Assert(scan.n1 <= count, "scan dequeues more than its entry holds"),
            Assert(scan.oor | (scan.n1 + in_flight + scan.left <= count), "scan reads past its entry's count"),
        ]

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
