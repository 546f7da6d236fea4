"""Themis-D: PSN queue, NACK validation and NACK compensation at the destination ToR (paper 001, sections 3.3-3.4).

Data packets towards a QP's NIC push their truncated PSN into the QP's ring PSN queue. A NACK from the NIC (BTH PSN
= the NIC's ePSN) makes the block scan that queue for tPSN, the first PSN after ePSN that left the ToR, and decide:

====================  =========  ==================================================================================
verdict               NACK       when
====================  =========  ==================================================================================
``NACK_VALID``        forwarded  tPSN, or a later packet that left the ToR before ePSN did, is on ePSN's path
``NACK_BLOCKED``      dropped    neither, and ePSN has not left the ToR: compensation armed (BePSN = ePSN, Valid)
``NACK_LATE``         dropped    ePSN left the ToR after tPSN: it was late, not lost; nothing armed
``NACK_NO_TPSN``      forwarded  the queue holds no PSN after ePSN (empty or overwritten): no evidence to block
====================  =========  ==================================================================================

While Valid, a data packet with PSN == BePSN disarms compensation (``DATA_CANCEL``); one after BePSN on BePSN's path
(``PSN mod N == BePSN mod N``) raises ``comp`` with ``comp_psn = BePSN`` (``DATA_COMP``): the deparser sends that
NACK to the sender on the NIC's behalf. The golden model :mod:`lbpipe.sim.themis.themis_d` states the full rules.

Pipeline: input register, residue stage, read-modify-write stage (flow table read there and written back the same
cycle; the one write a read can miss is forwarded), a result register, and a three-entry skid buffer whose head is
the output register (``ThemisD.elaborate`` draws it; ``_NackScan`` is the NACK scan engine).
Data items flow at one per clock. A NACK with a flow-table hit holds the read-modify-write stage for ``scanned + 6``
cycles (one queue entry read per cycle, five stages to a decision; 3 cycles when the queue is empty or the entry
idle); items behind it wait. Reset clears the flow table, one entry per cycle, with both inputs not ready meanwhile.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.lib.meta import PacketKind, PSN_BITS, TAG_BITS
from lbpipe.hdl.lib.modn import ModN, residue_bits
from lbpipe.hdl.lib.ring import RingMemory, RingState, ring_base, ring_drop, ring_push, wrap_inc

__all__ = ["ThemisD", "check_parameters", "ThemisDItem", "ThemisDResult", "ThemisDVerdict", "FlowEntry",
           "TABLE_QP_SETUP", "TABLE_QP_TEARDOWN"]

TABLE_QP_SETUP = 0
TABLE_QP_TEARDOWN = 1


class ThemisDVerdict(enum.Enum, shape=3):
    """What Themis-D did with an item (see the module docstring)."""
    PASS         = 0
    DATA         = 1
    DATA_COMP    = 2
    DATA_CANCEL  = 3
    NACK_VALID   = 4
    NACK_BLOCKED = 5
    NACK_LATE    = 6
    NACK_NO_TPSN = 7


def _bits(n):
    return max(1, (n - 1).bit_length())


def ThemisDItem(*, n_qps):
    """Input metadata: ``qp`` is the flow-table index found by the upstream QP classifier, ``qp_hit`` its hit flag;
    ``psn`` is the BTH PSN (for a NACK, the NIC's ePSN); ``msn`` a NACK's AETH MSN (kept with a blocked NACK so a
    compensation NACK carries the MSN the NIC would have sent)."""
    return data.StructLayout({
        "kind":   PacketKind,
        "qp_hit": 1,
        "qp":     _bits(n_qps),
        "psn":    PSN_BITS,
        "msn":    24,
        "tag":    TAG_BITS,
    })


def ThemisDResult(*, n_qps, queue_depth):
    """Output metadata: the input fields and the decision. ``drop`` marks a blocked NACK; ``comp``/``comp_psn``/
    ``comp_msn`` ask the deparser to also send a NACK for ``comp_psn`` with MSN ``comp_msn`` to the QP's sender;
    ``scanned`` counts the PSN-queue entries the NACK's scan read."""
    return data.StructLayout({
        **ThemisDItem(n_qps=n_qps).members,
        "drop":     1,
        "arm":      1,
        "comp":     1,
        "comp_psn": PSN_BITS,
        "comp_msn": 24,
        "verdict":  ThemisDVerdict,
        "scanned":  queue_depth.bit_length(),
    })


def FlowEntry(*, queue_depth, n_paths):
    """One flow-table entry: the paper's (queue index, head/tail, BePSN, Valid) plus what hardware needs."""
    return data.StructLayout({
        "active": 1,
        "valid":  1,
        "bepsn":  PSN_BITS,
        "bres":   residue_bits(n_paths),
        "bmsn":   24,
        "ring":   RingState(queue_depth),
    })


def check_parameters(*, n_qps, queue_depth, n_paths, entry_bits):
    """Raise ``TypeError``/``ValueError`` for parameters the block does not take (shared with the models)."""
    for name, value, lo, hi in (("n_qps", n_qps, 1, 65536), ("queue_depth", queue_depth, 1, 255),
                                ("n_paths", n_paths, 1, 256), ("entry_bits", entry_bits, 2, 24)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, not {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")


def _after(a, b, bits):
    """Serial-number order on ``bits``-bit values: ``0 < (a - b) mod 2**bits < 2**(bits-1)``."""
    d = (a - b)[:bits]
    return (d != 0) & ~d[bits - 1]


class ThemisD(wiring.Component):
    """Destination-ToR Themis stage.

    Parameters
    ----------
    n_qps : int
        Flow-table entries, 1 to 65536.
    queue_depth : int
        PSN-queue entries per QP, 1 to 255.
    n_paths : int
        N, 1 to 256.
    entry_bits : int
        Low PSN bits per queue entry, 2 to 24.

    Members
    -------
    i : In(stream.Signature(ThemisDItem))
    o : Out(stream.Signature(ThemisDResult))
    ctl : In(ControlSignature())
        Table 0, QP set-up: entry ``index`` becomes active with an empty queue and compensation disarmed.
        Table 1, QP tear-down: entry ``index`` becomes idle. Indices ``>= n_qps`` and other tables are ignored.
        Commands enter the pipeline ahead of packets and take effect between two packets.
    stats : Out(32 * 8)
        Counter ``v`` (bits ``32v+31:32v``) counts the results with verdict ``v`` (wrapping at 2**32; cleared by
        reset). The top level maps counter ``i`` to the AXI4-Lite register STATUS_i. (A flat vector rather than an
        array layout: Yosys 0.70's ABC reintegration asserts on the array's element wire names.)
    """

    latency = 5

    def __init__(self, *, n_qps=1600, queue_depth=100, n_paths=256, entry_bits=9):
        check_parameters(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)
        self._n_qps = n_qps
        self._queue_depth = queue_depth
        self._n_paths = n_paths
        self._entry_bits = entry_bits
        super().__init__({
            "i":   In(stream.Signature(ThemisDItem(n_qps=n_qps))),
            "o":   Out(stream.Signature(ThemisDResult(n_qps=n_qps, queue_depth=queue_depth))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * len(ThemisDVerdict)),
        })

    @property
    def n_qps(self):
        return self._n_qps

    @property
    def queue_depth(self):
        return self._queue_depth

    @property
    def memory_bits(self):
        """Bits of state held in memories: the flow table and the PSN queues."""
        entry = FlowEntry(queue_depth=self._queue_depth, n_paths=self._n_paths).size
        return self._n_qps * (entry + self._queue_depth * self._entry_bits)

    def item_cycles(self, result):
        """Cycles an item holds the read-modify-write stage: 1; for a NACK of an active QP ``scanned + 6`` (3 when
        its queue was empty); 3 for a NACK whose flow-table entry is idle (it goes through the scan state too)."""
        if result["kind"] == PacketKind.NACK.value and result["qp_hit"] and result["qp"] < self._n_qps:
            return result["scanned"] + 6 if result["scanned"] else 3
        return 1

    def elaborate(self, platform):
        """Compose the pipeline of the datasheet ("Pipeline and timing")::

            ctl --+  input      residue         read-modify-write                result       skid buffer
                  +-> s1 -----> s2 ----------> s3 ----------------------------> res_q -----> 3 entries, head --> o
            i ----+  commands   PSN mod N;      flow entry read (forwarded),                  o.payload
                     first      flow read       tested and written back;
                                issued          PSN push; a NACK holds the
                                                stage for its queue scan
            cycles   1          1               1                                1            1             = 5

        The read-modify-write stage is an FSM: CLEAR (after reset, clears the flow table) -> RUN (one item per
        clock); a NACK with a flow-table hit goes RUN -> SCAN (the scan engine reads its PSN queue) -> DONE (write
        back, result) -> RUN. ``adv`` moves the front (s1 to s3, the flow read). Each helper's docstring says what
        its stage registers. The helpers are called in the order their logic was written before the split (it sets the
        order of the netlist's cells, which Yosys's results depend on): keep it.
        """
        m = Module()
        flow_rd, flow_wr, queues, psn_mod = self._memories(m)
        s1, s2, s3 = self._stage_registers()
        adv = Signal()      # the front advances: s1 to s3 load and the next item's flow read is issued
        result, produce, can_out = self._result_register_and_skid_buffer(m)
        self._statistics(m, result, produce)

        fe, fwd, last_wr = self._forwarded_flow_entry(m, flow_rd)
        is_data, starts_scan = self._decode_rmw_item(m, s3, fe)
        self._input_and_residue_stages(m, adv, psn_mod, flow_rd, s1, s2, s3)
        data_entry, cancel, comp = self._data_update(m, s3, fe, flow_rd, fwd, last_wr)
        scan = _NackScan(queue_depth=self._queue_depth, n_paths=self._n_paths, entry_bits=self._entry_bits,
                         entry_layout=self._flow_entry_layout(), rd_data=queues.rd_data)
        scan.distance_pipeline(m)
        # Queue addresses do not depend on the state: only the write enable and the scan's valid bits do.
        m.d.comb += [
            queues.wr_base.eq(s3.base), queues.wr_pos.eq(fe.ring.tail),
            queues.wr_data.eq(s3.item.psn[:self._entry_bits]),
            queues.rd_base.eq(s3.base), queues.rd_pos.eq(scan.pos),
        ]
        nack_entry = scan.write_back_entry(m)
        m.d.comb += flow_wr.addr.eq(s3.item.qp)     # CLEAR overrides it

        with m.FSM(init="CLEAR"):
            with m.State("CLEAR"):
                self._clear_flow_table(m, flow_wr)      # then RUN
            with m.State("RUN"):
                m.d.comb += adv.eq(can_out & ~starts_scan)
                with m.If(starts_scan):
                    scan.start(m, s3.item, s3.res, fe)
                    m.next = "SCAN"
                self._rmw_write(m, adv, s3, flow_wr, queues, data_entry)
                self._rmw_result(m, adv, s3, fe, result, produce, is_data, cancel, comp)
            with m.State("SCAN"):
                with m.If(scan.step(m)):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += adv.eq(can_out)
                with m.If(can_out):
                    m.d.comb += [flow_wr.data.eq(nack_entry), flow_wr.en.eq(scan.active)]
                    self._nack_result(m, scan, s3.item, result, produce)
                    m.next = "RUN"
        self._remember_flow_write(m, adv, flow_wr, s2, fwd, last_wr)
        return m

    # -- stages of elaborate; each adds its logic to the block's module ---------------------------------------------

    def _flow_entry_layout(self):
        """The flow table's entry layout at this block's parameters."""
        return FlowEntry(queue_depth=self._queue_depth, n_paths=self._n_paths)

    def _memories(self, m):
        """Add the flow table (one :func:`FlowEntry` per QP), the PSN queues (one ring of ``queue_depth`` entries
        per QP in one :class:`RingMemory`) and the PSN mod N pipeline; return the flow table's read and write ports,
        the PSN queues and the ModN."""
        m.submodules.flows = flows = memory.Memory(shape=self._flow_entry_layout(), depth=self._n_qps, init=[])
        flow_wr = flows.write_port()
        # Not transparent: the read-modify-write stage forwards the one write it can miss itself
        # (``_forwarded_flow_entry``), so that the compensation test runs on the memory data and the forwarded entry
        # in parallel.
        flow_rd = flows.read_port()
        m.submodules.queues = queues = RingMemory(n_rings=self._n_qps, depth=self._queue_depth, shape=self._entry_bits)
        m.submodules.psn_mod = psn_mod = ModN(width=PSN_BITS, n=self._n_paths)
        return flow_rd, flow_wr, queues, psn_mod

    def _stage_registers(self):
        """Create (not drive) the front's stage registers: ``s1`` (input register), ``s2`` (residue stage) and
        ``s3`` (entry of the read-modify-write stage), each a :class:`_StageRegisters`; ``s3`` also has ``res``
        (PSN mod N), ``base`` (the QP's first PSN-queue entry) and the item's class ``nack``, ``data``, ``setup``,
        ``teardown`` (see ``_input_and_residue_stages``)."""
        s1, s2, s3 = (_StageRegisters(name, n_qps=self._n_qps) for name in ("s1", "s2", "s3"))
        s3.res = Signal(residue_bits(self._n_paths), name="s3_res")
        s3.base = Signal(range(max(2, self._n_qps * self._queue_depth)), name="s3_base")
        # Every NACK with a flow-table hit enters the scan state, active QP or not: the stall decision then depends
        # only on registers (s3_nack), not on the flow table's read data.
        s3.nack = Signal(name="s3_nack")
        s3.data = Signal(name="s3_data")      # a data packet with a flow-table hit (active entry or not)
        s3.setup = Signal(name="s3_setup")
        s3.teardown = Signal(name="s3_teardown")
        return s1, s2, s3

    def _result_register_and_skid_buffer(self, m):
        """Result register and three-entry skid buffer: 2 cycles of latency, the last two of the block's 5.

        Registers the read-modify-write stage's ``result`` in ``res_q`` (``res_v`` when ``produce`` was high), then
        in a three-entry skid buffer whose head is the output register ``o.payload`` (``skid1`` and ``skid2``
        behind it, ``skid_count`` entries; ``o.valid`` is ``skid_count != 0``). The result register keeps the
        read-modify-write stage's decision logic apart from the skid buffer's multiplexers. ``can_out``, the
        condition for the pipeline to advance, is that the result register and the buffer hold at most two items
        between them, a registered fact, so neither ``o.ready`` nor ``o.valid`` reaches the pipeline's enables (their
        fan-out is every stage register); three entries let one item per clock flow with the output register full.
        Unthrottled, the buffer never holds more than one item.

        Returns
        -------
        result : Signal(ThemisDResult)
            The read-modify-write stage's result (combinational), registered when ``produce`` is high.
        produce : Signal
            Driven by the read-modify-write stage.
        can_out : Signal
        """
        can_out = Signal()
        produce = Signal()
        result = Signal(ThemisDResult(n_qps=self._n_qps, queue_depth=self._queue_depth))
        res_q = Signal.like(result)
        res_v = Signal()
        m.d.sync += [res_q.eq(result), res_v.eq(produce)]
        skid_count = Signal(range(4))
        skid1 = Signal.like(result)
        skid2 = Signal.like(result)
        pop = self.o.valid & self.o.ready
        m.d.comb += [self.o.valid.eq(skid_count != 0), can_out.eq(skid_count + res_v <= 2)]
        with m.Switch(Cat(res_v, pop)):
            with m.Case(0b01):      # push only
                with m.Switch(skid_count):
                    with m.Case(0):
                        m.d.sync += self.o.payload.eq(res_q)
                    with m.Case(1):
                        m.d.sync += skid1.eq(res_q)
                    with m.Default():
                        m.d.sync += skid2.eq(res_q)
                m.d.sync += skid_count.eq(skid_count + 1)
            with m.Case(0b10):      # pop only
                m.d.sync += [self.o.payload.eq(skid1), skid1.eq(skid2), skid_count.eq(skid_count - 1)]
            with m.Case(0b11):      # both: skid_count is 1 or 2 here (3 never meets a push, 0 never pops)
                with m.If(skid_count == 1):
                    m.d.sync += self.o.payload.eq(res_q)
                with m.Else():
                    m.d.sync += [self.o.payload.eq(skid1), skid1.eq(res_q)]
        return result, produce, can_out

    def _statistics(self, m, result, produce):
        """Register ``stats``: one 32-bit counter per verdict, counting results as they are produced (beside the
        item path: no latency)."""
        with m.If(produce):
            for v in ThemisDVerdict:
                with m.If(result.verdict == v):
                    counter = self.stats.word_select(v.value, 32)
                    m.d.sync += counter.eq(counter + 1)

    def _forwarded_flow_entry(self, m, flow_rd):
        """The flow entry as the read-modify-write stage's item must see it (combinational, no latency).

        That is the memory's, or the one written in the cycle the item's read was issued (a read-before-write memory
        misses that write). ``fwd`` and ``last_wr`` are registered by ``_remember_flow_write``: ``fwd`` is decided a
        cycle early, from addresses in registers.

        Returns
        -------
        fe : Signal(FlowEntry)
        fwd : Signal
        last_wr : Signal(FlowEntry)
        """
        fwd = Signal()
        last_wr = Signal(self._flow_entry_layout())
        fe = Signal(self._flow_entry_layout())
        m.d.comb += fe.eq(Mux(fwd, last_wr, flow_rd.data))
        return fe, fwd, last_wr

    def _decode_rmw_item(self, m, s3, fe):
        """Classify the read-modify-write stage's item (combinational): ``is_data``, a data packet of an active
        entry; ``starts_scan``, a NACK with a flow-table hit (from the registered ``s3.nack`` only)."""
        active = Signal()
        m.d.comb += active.eq(s3.valid & ~s3.ctl & s3.hit & fe.active)
        is_data = active & (s3.item.kind == PacketKind.DATA)
        starts_scan = Signal()
        m.d.comb += starts_scan.eq(s3.nack)
        return is_data, starts_scan

    def _input_and_residue_stages(self, m, adv, psn_mod, flow_rd, s1, s2, s3):
        """Input register ``s1``, residue stage ``s2`` and the registers ``s3`` entering the read-modify-write
        stage: 1 cycle each, all loaded when ``adv``; the block's first 3 cycles of latency.

        ``s1`` takes a command when one is offered (commands take priority over packets: ``i.ready`` is low then),
        else the input item; its ``hit`` is ``qp_hit`` with ``qp`` in range (a command: ``index`` in range). ``psn_mod``
        follows the item through ``s1`` and ``s2`` and its PSN mod N is registered in ``s3.res``. As the item moves
        from ``s2`` to ``s3``, its flow-table read is issued, and ``s3`` registers its QP's PSN-queue base and its
        class, so that the read-modify-write stage's stall and write selects come from registers.
        """
        qb = _bits(self._n_qps)
        m.d.comb += [
            self.ctl.ready.eq(adv),
            self.i.ready.eq(adv & ~self.ctl.valid),
            psn_mod.i.eq(self.i.payload.psn),
            psn_mod.en.eq(adv),
        ]
        with m.If(adv):
            with m.If(self.ctl.valid):
                m.d.sync += [
                    s1.valid.eq(1), s1.ctl.eq(1), s1.table.eq(self.ctl.payload.table),
                    s1.hit.eq(self.ctl.payload.index < self._n_qps),
                    s1.item.eq(0), s1.item.qp.eq(self.ctl.payload.index[:qb]),
                ]
            with m.Else():
                m.d.sync += [
                    s1.valid.eq(self.i.valid), s1.ctl.eq(0), s1.table.eq(0),
                    s1.hit.eq(self.i.payload.qp_hit & (self.i.payload.qp < self._n_qps)),
                    s1.item.eq(self.i.payload),
                ]
            for key in _StageRegisters.FIELDS:
                m.d.sync += [getattr(s2, key).eq(getattr(s1, key)), getattr(s3, key).eq(getattr(s2, key))]
            m.d.sync += [
                s3.res.eq(psn_mod.o), s3.base.eq(ring_base(s2.item.qp, self._queue_depth)),
                s3.nack.eq(s2.valid & ~s2.ctl & s2.hit & (s2.item.kind == PacketKind.NACK)),
                s3.data.eq(s2.valid & ~s2.ctl & s2.hit & (s2.item.kind == PacketKind.DATA)),
                s3.setup.eq(s2.valid & s2.ctl & s2.hit & (s2.table == TABLE_QP_SETUP)),
                s3.teardown.eq(s2.valid & s2.ctl & s2.hit & (s2.table == TABLE_QP_TEARDOWN)),
            ]
        m.d.comb += [
            flow_rd.addr.eq(Mux(s2.hit, s2.item.qp, 0)),
            flow_rd.en.eq(adv),
        ]

    def _data_update(self, m, s3, fe, flow_rd, fwd, last_wr):
        """A data packet's compensation test and its flow entry after the PSN push (combinational, in the
        read-modify-write stage: no latency).

        Returns
        -------
        data_entry : Signal(FlowEntry)
            ``fe`` with the PSN pushed on its ring and Valid cleared by a cancel or a compensation.
        cancel, comp : Signal
            The PSN is BePSN (``DATA_CANCEL``); it is after BePSN on BePSN's path (``DATA_COMP``). Both only while
            Valid.
        """
        psn = s3.item.psn
        # "After BePSN" is 0 < psn - BePSN < 2**23; with psn == BePSN tested in parallel by equality, only the
        # sign of the difference is left after the carry chain. The test runs on both candidate entries and the
        # forwarding choice comes last, off the carry chain's path.
        def compensation(entry):
            cancel = entry.valid & (psn == entry.bepsn)
            comp = entry.valid & ~cancel & ~(psn - entry.bepsn)[PSN_BITS - 1] & (s3.res == entry.bres)
            return cancel, comp
        cancel_mem, comp_mem = compensation(flow_rd.data)
        cancel_fwd, comp_fwd = compensation(last_wr)
        cancel = Signal()
        comp = Signal()
        m.d.comb += [cancel.eq(Mux(fwd, cancel_fwd, cancel_mem)), comp.eq(Mux(fwd, comp_fwd, comp_mem))]
        pushed, _ = ring_push(fe.ring, self._queue_depth, overwrite=True)
        data_entry = Signal(self._flow_entry_layout())
        m.d.comb += [
            data_entry.eq(fe),
            data_entry.valid.eq(fe.valid & ~cancel & ~comp),
            data_entry.ring.head.eq(pushed["head"]),
            data_entry.ring.tail.eq(pushed["tail"]),
            data_entry.ring.count.eq(pushed["count"]),
        ]
        return data_entry, cancel, comp

    def _clear_flow_table(self, m, flow_wr):
        """State CLEAR, after reset: write an idle entry to ``clr_addr`` (registered, counting up), one per cycle,
        then go to RUN. ``adv`` stays low meanwhile, so both inputs are not ready."""
        clr_addr = Signal(_bits(self._n_qps))
        m.d.comb += [flow_wr.addr.eq(clr_addr), flow_wr.data.eq(0), flow_wr.en.eq(1)]
        m.d.sync += clr_addr.eq(clr_addr + 1)
        with m.If(clr_addr == self._n_qps - 1):
            m.d.sync += clr_addr.eq(0)
            m.next = "RUN"

    def _rmw_write(self, m, adv, s3, flow_wr, queues, data_entry):
        """State RUN, the write half of the read-modify-write stage: write back the item's flow entry (set-up: active
        and empty; tear-down: idle; data: ``data_entry``) and push a data packet's PSN on its queue, as the item
        leaves the stage. Enables and data selection come from registered flags only."""
        # A data packet of an idle entry updates that entry's ring too: harmless, as set-up empties the ring and the
        # entry stays idle (its Valid is 0, so no compensation); its output still says PASS.
        with m.If(s3.setup):
            m.d.comb += flow_wr.data.eq(1)
        with m.Elif(s3.data):
            m.d.comb += flow_wr.data.eq(data_entry)
        m.d.comb += [
            flow_wr.en.eq(adv & (s3.setup | s3.teardown | s3.data)),
            queues.wr_en.eq(adv & s3.data),
        ]

    def _rmw_result(self, m, adv, s3, fe, result, produce, is_data, cancel, comp):
        """State RUN, the result of every item but a NACK with a flow-table hit (combinational; the result register
        loads it): a data packet of an active entry gets DATA, DATA_COMP (with BePSN and its MSN) or DATA_CANCEL,
        everything else PASS. Commands produce no result."""
        m.d.comb += produce.eq(adv & s3.valid & ~s3.ctl)
        with m.If(is_data):
            m.d.comb += _load_result(
                result, s3.item,
                Mux(cancel, ThemisDVerdict.DATA_CANCEL, Mux(comp, ThemisDVerdict.DATA_COMP, ThemisDVerdict.DATA)),
                comp=comp, comp_psn=Mux(comp, fe.bepsn, 0), comp_msn=Mux(comp, fe.bmsn, 0))
        with m.Else():
            m.d.comb += _load_result(result, s3.item, ThemisDVerdict.PASS)

    def _nack_result(self, m, scan, item, result, produce):
        """State DONE, when the result register can take it: the NACK's result (combinational), its verdict for an
        active entry and PASS for an idle one. A blocked or late NACK is dropped; ``arm`` marks the blocked NACK that
        changed (BePSN, Valid)."""
        drop = (scan.verdict == ThemisDVerdict.NACK_BLOCKED) | (scan.verdict == ThemisDVerdict.NACK_LATE)
        m.d.comb += produce.eq(1)
        with m.If(scan.active):
            arm = scan.may_update & (scan.verdict == ThemisDVerdict.NACK_BLOCKED)
            m.d.comb += _load_result(result, item, scan.verdict, drop=drop, arm=arm, scanned=scan.scanned)
        with m.Else():
            m.d.comb += _load_result(result, item, ThemisDVerdict.PASS)

    def _remember_flow_write(self, m, adv, flow_wr, s2, fwd, last_wr):
        """Register ``fwd`` and ``last_wr`` for ``_forwarded_flow_entry``.

        The next item to enter the read-modify-write stage has its flow read issued in a cycle where the pipeline
        advances; if a write happens in that same cycle to the same entry, the read misses it: remember it."""
        with m.If(adv):
            m.d.sync += [
                fwd.eq(flow_wr.en & s2.hit & (flow_wr.addr == s2.item.qp)),
                last_wr.eq(flow_wr.data),
            ]


class _StageRegisters:
    """One front stage's registers (see ``ThemisD._stage_registers``): ``valid``; ``ctl``, a command rather than a
    packet; ``table``, the command's table; ``hit``, ``qp_hit`` with ``qp`` in range (a command: ``index`` in range);
    ``item``, the packet's metadata (a command's index in ``item.qp``)."""

    FIELDS = ("valid", "ctl", "table", "hit", "item")

    def __init__(self, name, *, n_qps):
        self.valid = Signal(name=f"{name}_valid")
        self.ctl = Signal(name=f"{name}_ctl")
        self.table = Signal(8, name=f"{name}_table")
        self.hit = Signal(name=f"{name}_hit")
        self.item = Signal(ThemisDItem(n_qps=n_qps), name=f"{name}_item")


def _load_result(out, item, verdict, drop=0, arm=0, comp=0, comp_psn=0, comp_msn=0, scanned=0):
    """Assignments of ``item``'s fields and the decision to the result ``out``."""
    return [
        out.kind.eq(item.kind), out.qp_hit.eq(item.qp_hit), out.qp.eq(item.qp), out.psn.eq(item.psn),
        out.msn.eq(item.msn), out.tag.eq(item.tag), out.verdict.eq(verdict), out.drop.eq(drop),
        out.arm.eq(arm), out.comp.eq(comp), out.comp_psn.eq(comp_psn), out.comp_msn.eq(comp_msn),
        out.scanned.eq(scanned),
    ]


class _NackScan:
    """The NACK scan engine: its registers, and the logic of the read-modify-write stage's SCAN state.

    ``start`` (in RUN, for a NACK with a flow-table hit) registers ePSN (``e_t``, its low entry bits; ``e_psn``;
    ``e_msn``; ``e_res``, PSN mod N) and the QP's entry as read (``sc_entry``, ``sc_active``). ``step`` (SCAN) then
    issues one PSN-queue read per cycle (``sc_pos``, ``sc_left``, ``sc_pending``) and brings each entry through a
    pipeline to a decision: the ring memory's registered read data ``x`` (the queue spans many BRAMs and their
    output multiplexer is deep), the distance ``d`` to ePSN, the look-up flags ``f_*``, and the decision, which
    updates ``sc_phase2``, ``sc_verdict``, ``sc_n1`` (entries to dequeue) and ``sc_scanned``. DONE writes
    ``write_back_entry`` back. The engine holds the read-modify-write stage for ``scanned + 6`` cycles (3 when the
    queue is empty or the entry idle); items behind the NACK wait; other items see no extra latency.
    """

    def __init__(self, *, queue_depth, n_paths, entry_bits, entry_layout, rd_data):
        Q, N, W = queue_depth, n_paths, entry_bits
        self._queue_depth = Q
        self._n_paths = N
        self._entry_bits = W
        self.e_t = Signal(W)          # ePSN truncated to an entry
        self.e_psn = Signal(PSN_BITS)
        self.e_msn = Signal(24)
        self.e_res = Signal(residue_bits(N))
        self.entry = Signal(entry_layout, name="sc_entry")     # the QP's entry as read when the scan began
        self.active = Signal(name="sc_active")
        self.pos = Signal(_bits(Q), name="sc_pos")
        self.left = Signal(Q.bit_length(), name="sc_left")
        # Each stage of the scan pipeline has a valid bit.
        self.pending = Signal(name="sc_pending")   # a queue read was issued last cycle: its data reaches x next cycle
        self.x = rd_data                           # registered in the ring memory
        self.x_valid = Signal()
        self.d = Signal(W)
        self.d_wraps = Signal()
        self.d_valid = Signal()
        self.f_after = Signal()       # flags of the entry being decided on
        self.f_same = Signal()
        self.f_is_e = Signal()
        self.f_valid = Signal()
        self.phase2 = Signal(name="sc_phase2")
        self.n1 = Signal(Q.bit_length(), name="sc_n1")
        self.scanned = Signal(Q.bit_length(), name="sc_scanned")
        self.verdict = Signal(ThemisDVerdict, name="sc_verdict")
        self.e_top_ones = Signal()
        # Whether this NACK may change (BePSN, Valid); computed during the scan, registered for the write-back.
        self.may_update = Signal()

    def distance_pipeline(self, m):
        """Register ``d`` (the entry ``x`` minus ePSN's low bits), ``d_wraps`` and the flags ``f_after``, ``f_is_e``,
        ``f_same`` of ``d``: 2 of the scan pipeline's cycles.

        The scan's data registers load every cycle, whatever the state: only their valid bits are gated, which
        keeps the state decode out of the look-up paths.
        """
        N, W = self._n_paths, self._entry_bits
        d, x, e_t = self.d, self.x, self.e_t
        # An entry d after ePSN has the full PSN ePSN + d (mod 2**24) and is on ePSN's path when that PSN and ePSN
        # agree mod N: d mod N == 0, or, when ePSN + d wraps past 2**24, d mod N == 2**24 mod N. Two constant bit
        # tables indexed by d give both answers. ePSN + d can only wrap when ePSN's bits above the entry are all
        # ones, and then it wraps exactly when the entry is numerically below ePSN's low bits.
        wrap_res = (1 << PSN_BITS) % N
        same_nowrap = Const(sum(1 << d for d in range(1 << W) if d % N == 0), 1 << W)
        same_wrap = Const(sum(1 << d for d in range(1 << W) if d % N == wrap_res), 1 << W)
        d_after = (d != 0) & ~d[W - 1]
        m.d.sync += [
            d.eq(x - e_t), self.d_wraps.eq(self.e_top_ones & (x < e_t)),
            self.f_after.eq(d_after), self.f_is_e.eq(d == 0),
            self.f_same.eq(d_after & Mux(self.d_wraps, same_wrap.bit_select(d, 1), same_nowrap.bit_select(d, 1))),
        ]

    def write_back_entry(self, m):
        """The NACK's flow entry for DONE to write back (combinational from registers): the scanned ring with the
        ``sc_n1`` entries before tPSN dequeued and, if the NACK may change (BePSN, Valid), armed (blocked) or
        disarmed (any other verdict). Registers ``may_update`` during the scan."""
        sc_entry = self.entry
        dropped = ring_drop(sc_entry.ring, self.n1, self._queue_depth)
        nack_entry = Signal.like(sc_entry)
        m.d.sync += self.may_update.eq(~sc_entry.valid | ~_after(sc_entry.bepsn, self.e_psn, PSN_BITS))
        m.d.comb += [
            nack_entry.eq(sc_entry),
            nack_entry.ring.head.eq(dropped["head"]),
            nack_entry.ring.count.eq(dropped["count"]),
        ]
        with m.If(self.may_update):
            with m.If(self.verdict == ThemisDVerdict.NACK_BLOCKED):
                m.d.comb += [nack_entry.valid.eq(1), nack_entry.bepsn.eq(self.e_psn), nack_entry.bres.eq(self.e_res),
                             nack_entry.bmsn.eq(self.e_msn)]
            with m.Else():
                m.d.comb += nack_entry.valid.eq(0)
        return nack_entry

    def start(self, m, item, res, fe):
        """In RUN, for a NACK with a flow-table hit: register ePSN, its MSN and residue ``res``, and the flow entry
        ``fe``; aim the reads at the ring's head; clear the scan pipeline."""
        W = self._entry_bits
        m.d.sync += [
            self.e_t.eq(item.psn[:W]), self.e_psn.eq(item.psn), self.e_msn.eq(item.msn), self.e_res.eq(res),
            self.e_top_ones.eq(item.psn[W:].all() if W < PSN_BITS else 1),
            self.entry.eq(fe), self.active.eq(fe.active),
            self.pos.eq(fe.ring.head), self.left.eq(Mux(fe.active, fe.ring.count, 0)),
            self.pending.eq(0), self.x_valid.eq(0), self.d_valid.eq(0), self.f_valid.eq(0),
            self.phase2.eq(0), self.n1.eq(0), self.scanned.eq(0),
        ]

    def step(self, m):
        """One cycle of SCAN: decide on the entry whose flags are valid, issue the next queue read, advance the
        valid bits. Return ``stop``, high in the cycle the verdict is settled (the FSM then goes to DONE)."""
        decided = Signal()
        phase2_next = Signal()
        verdict_next = Signal(ThemisDVerdict)
        m.d.comb += [phase2_next.eq(self.phase2), verdict_next.eq(self.verdict)]
        m.d.sync += [self.x_valid.eq(self.pending), self.d_valid.eq(self.x_valid), self.f_valid.eq(self.d_valid)]
        x_same, x_after, x_is_e = self.f_same, self.f_after, self.f_is_e
        with m.If(self.f_valid):
            m.d.sync += self.scanned.eq(self.scanned + 1)
            with m.If(~self.phase2):
                with m.If(x_same):
                    m.d.comb += [decided.eq(1), verdict_next.eq(ThemisDVerdict.NACK_VALID)]
                with m.Elif(x_after):
                    m.d.comb += phase2_next.eq(1)
                with m.Else():
                    # Entries before tPSN are dequeued; tPSN itself stays (see the golden model).
                    m.d.sync += self.n1.eq(self.n1 + 1)
            with m.Else():
                with m.If(x_is_e):
                    m.d.comb += [decided.eq(1), verdict_next.eq(ThemisDVerdict.NACK_LATE)]
                with m.Elif(x_same):
                    m.d.comb += [decided.eq(1), verdict_next.eq(ThemisDVerdict.NACK_VALID)]
        stop = Signal()
        # The queue is exhausted once nothing is left to read and no entry is on its way to a decision.
        exhausted = (self.left == 0) & ~self.pending & ~self.x_valid & ~self.d_valid
        m.d.comb += stop.eq(decided | exhausted)
        with m.If(~decided & exhausted):
            m.d.comb += verdict_next.eq(Mux(phase2_next, ThemisDVerdict.NACK_BLOCKED, ThemisDVerdict.NACK_NO_TPSN))
        m.d.sync += [self.phase2.eq(phase2_next), self.verdict.eq(verdict_next)]
        with m.If(~stop & (self.left != 0)):
            m.d.sync += [
                self.pos.eq(wrap_inc(self.pos, self._queue_depth)),
                self.left.eq(self.left - 1),
                self.pending.eq(1),
            ]
        with m.Else():
            m.d.sync += self.pending.eq(0)
        return stop
