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

Pipeline: input register, residue stage (the flow-table read is issued as an item enters it, and its data registered
straight out of the block RAM, per bank of 4,096 entries), compare stage (the item's PSN compared with every flow-entry
value it can meet in the next stage: the read data, the two writes already made and every value the item just ahead
can write; each flag registered), read-modify-write stage (flow entry and flags chosen by registered forwarding bits,
entry written back the same cycle), and a three-entry skid buffer whose head is the output register
(``ThemisD.elaborate`` draws it; ``_NackScan`` is the NACK scan engine).
Data items flow at one per clock. A NACK with a flow-table hit holds the read-modify-write stage for ``scanned + 8``
cycles (one queue entry read per cycle, seven stages to a decision; 3 cycles when the queue is empty or the entry
idle, 5 when its PSN bound is out of range); items behind it wait. Reset clears the flow table, one entry per cycle,
with both inputs not ready meanwhile.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.lib.meta import PacketKind, PSN_BITS, TAG_BITS
from lbpipe.hdl.lib.modn import ModN, residue_bits
from lbpipe.hdl.lib.ring import RingMemory, RingState, ring_base, ring_drop, ring_push, wrap_inc

__all__ = ["ThemisD", "check_parameters", "ThemisDItem", "ThemisDResult", "ThemisDVerdict", "FlowEntry",
           "TABLE_QP_SETUP", "TABLE_QP_TEARDOWN", "N_STATS", "STAT_OUT_OF_RANGE"]

TABLE_QP_SETUP = 0
TABLE_QP_TEARDOWN = 1


#: Flow-table entries per block-RAM bank: a larger table is built as banks of this many entries, each bank's read
#: data registered (one column of RAMB36 in 4K x 9 mode).
FLOW_BANK = 4096

#: Statistics counters: one per verdict, then out-of-range NACKs.
N_STATS = 9
STAT_OUT_OF_RANGE = 8


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
    ``scanned`` counts the PSN-queue entries the NACK's scan read; ``out_of_range`` marks a NACK forwarded (as
    ``NACK_NO_TPSN``) because its queue may hold PSNs too far from ePSN for ``entry_bits`` to order."""
    return data.StructLayout({
        **ThemisDItem(n_qps=n_qps).members,
        "drop":     1,
        "arm":      1,
        "comp":     1,
        "comp_psn": PSN_BITS,
        "comp_msn": 24,
        "verdict":  ThemisDVerdict,
        "scanned":  queue_depth.bit_length(),
        "out_of_range": 1,
    })


def FlowEntry(*, queue_depth, n_paths):
    """One flow-table entry: the paper's (queue index, head/tail, BePSN, Valid) plus what hardware needs: ``hi``,
    ``lo_cur``, ``lo_prev`` bound the full PSNs the queue can hold (the latest PSN pushed; the earliest pushed in the
    current and in the previous pass of the tail over the ring's slots)."""
    return data.StructLayout({
        "active": 1,
        "valid":  1,
        "bepsn":  PSN_BITS,
        "bres":   residue_bits(n_paths),
        "bmsn":   24,
        "ring":   RingState(queue_depth),
        "hi":     PSN_BITS,
        "lo_cur": PSN_BITS,
        "lo_prev": PSN_BITS,
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
    stats : Out(32 * 9)
        Counter ``v`` (bits ``32v+31:32v``, ``v`` < 8) counts the results with verdict ``v``; counter 8 the
        out-of-range NACKs (wrapping at 2**32; cleared by reset). The top level maps counter ``i`` to the AXI4-Lite
        register STATUS_i. (A flat vector rather than an
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
            "stats": Out(32 * N_STATS),
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
        """Cycles an item holds the read-modify-write stage: 1; for a NACK of an active QP ``scanned + 8`` (3 when
        its queue was empty, 5 when out of range); 3 for a NACK whose flow-table entry is idle (it goes through the
        scan state too)."""
        if result["kind"] == PacketKind.NACK.value and result["qp_hit"] and result["qp"] < self._n_qps:
            if result.get("out_of_range"):
                return 5
            return result["scanned"] + 8 if result["scanned"] else 3
        return 1

    def elaborate(self, platform):
        """Compose the pipeline of the datasheet ("Pipeline and timing")::

            ctl --+  input     residue        compare            read-modify-write                skid buffer
                  +-> s1 ----> s2 ----------> s3 --------------> s4 -----------------------------> 3 entries, head --> o
            i ----+  commands  PSN mod N;     PSN against every  flow entry and flags chosen       o.payload
                     first     flow read      entry value it     (fwd4); written back; PSN push;
                               issued, data   can meet in s4;    a NACK holds the stage for its
                               registered     flags registered   queue scan
                               (flow_rd_q)
            cycles   1         1              1                  1                                 1             = 5

        The read-modify-write stage is an FSM: CLEAR (after reset, clears the flow table) -> RUN (one item per
        clock); a NACK with a flow-table hit goes RUN -> SCAN (the scan engine reads its PSN queue) -> DONE (write
        back, result) -> RUN. ``adv`` moves the front (s1 to s4, the flow read and its data register). Each helper's
        docstring says what its stage registers. The helpers are called in the order their logic was written before
        the split (it sets the order of the netlist's cells, which Yosys's results depend on): keep it.
        """
        m = Module()
        flow_rd, flow_wr, queues, psn_mod = self._memories(m)
        s1, s2, s3, s4 = self._stage_registers()
        adv = Signal()      # the front advances: s1 to s4 load and the next item's flow read is issued
        done = Signal()     # the read-modify-write stage is in DONE (a NACK's write-back)
        result, produce, can_out = self._result_register_and_skid_buffer(m)
        self._statistics(m, result, produce)

        fw = _FlowForwarding(self._flow_entry_layout())
        fe, fl = self._forwarded_flow_entry(m, flow_rd, fw, s4)
        is_data, starts_scan = self._decode_rmw_item(m, s4, fe)
        self._input_and_residue_stages(m, adv, psn_mod, flow_rd, s1, s2, s3, s4)
        data_entry, cancel, comp, took_hi, took_lo = self._data_update(m, s4, fe, fl)
        scan = _NackScan(queue_depth=self._queue_depth, n_paths=self._n_paths, entry_bits=self._entry_bits,
                         entry_layout=self._flow_entry_layout(), rd_data=queues.rd_data)
        scan.distance_pipeline(m)
        scan.range_pipeline(m)
        self._compare_stage(m, adv, done, fw, s3, s4, scan, took_hi, took_lo)
        # Queue addresses do not depend on the state: only the write enable and the scan's valid bits do.
        m.d.comb += [
            queues.wr_base.eq(s4.base), queues.wr_pos.eq(fe.ring.tail),
            queues.wr_data.eq(s4.item.psn[:self._entry_bits]),
            queues.rd_base.eq(s4.base), queues.rd_pos.eq(scan.pos),
        ]
        nack_entry = scan.write_back_entry(m)
        m.d.comb += flow_wr.addr.eq(s4.item.qp)     # CLEAR overrides it

        with m.FSM(init="CLEAR"):
            with m.State("CLEAR"):
                self._clear_flow_table(m, flow_wr)      # then RUN
            with m.State("RUN"):
                m.d.comb += adv.eq(can_out & ~starts_scan)
                with m.If(starts_scan):
                    scan.start(m, s4.item, s4.res, fe)
                    m.next = "SCAN"
                self._rmw_write(m, adv, s4, flow_wr, queues, data_entry)
                self._rmw_result(m, adv, s4, fe, result, produce, is_data, cancel, comp)
            with m.State("SCAN"):
                with m.If(scan.step(m)):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += [adv.eq(can_out), done.eq(1)]
                with m.If(can_out):
                    m.d.comb += [flow_wr.data.eq(nack_entry), flow_wr.en.eq(scan.active)]
                    self._nack_result(m, scan, s4.item, result, produce)
                    m.next = "RUN"
        # What the stage writes as the front advances: DONE writes an active entry back; RUN writes for set-up,
        # tear-down and data (``_rmw_write``).
        wr_intent = Signal()
        m.d.comb += wr_intent.eq(Mux(done, scan.active, s4.setup | s4.teardown | s4.data))
        self._remember_flow_write(m, adv, flow_wr, wr_intent, s1, s2, s3, s4, fw)
        return m

    # -- stages of elaborate; each adds its logic to the block's module ---------------------------------------------

    def _flow_entry_layout(self):
        """The flow table's entry layout at this block's parameters."""
        return FlowEntry(queue_depth=self._queue_depth, n_paths=self._n_paths)

    def _memories(self, m):
        """Add the flow table (one :func:`FlowEntry` per QP; banks of ``FLOW_BANK`` above that), the PSN queues (one
        ring of ``queue_depth`` entries per QP in one :class:`RingMemory`) and the PSN mod N pipeline; return the
        flow table's read and write ports, the PSN queues and the ModN."""
        # Not transparent: the compare stage forwards the three writes a read can miss itself (``_compare_stage``).
        n_banks = -(-self._n_qps // FLOW_BANK)
        if n_banks == 1:
            m.submodules.flows = flows = memory.Memory(shape=self._flow_entry_layout(), depth=self._n_qps, init=[])
            flow_wr = flows.write_port()
            flow_rd = flows.read_port()
        else:
            flow_wr, flow_rd = self._flow_banks(m, n_banks)
        # The queue write port is registered: the push lands a cycle later, two before a NACK behind it can read.
        m.submodules.queues = queues = RingMemory(n_rings=self._n_qps, depth=self._queue_depth, shape=self._entry_bits,
                                                  write_register=True)
        m.submodules.psn_mod = psn_mod = ModN(width=PSN_BITS, n=self._n_paths)
        return flow_rd, flow_wr, queues, psn_mod

    def _flow_banks(self, m, n_banks):
        """A flow table of more than ``FLOW_BANK`` entries, as banks of ``FLOW_BANK`` entries (one column of
        RAMB36 each), each bank's read data registered by ``_forwarded_flow_entry`` (Yosys would otherwise build the
        depth multiplexer itself, after the block RAMs and before any register). Returns write and read ports
        with the memory ports' ``addr``, ``data``, ``en`` (the read port's ``data`` is per bank: ``banks``)."""
        layout = self._flow_entry_layout()
        low = (FLOW_BANK - 1).bit_length()
        flow_wr = _Port(addr=Signal(range(self._n_qps), name="flow_wr_addr"), data=Signal(layout, name="flow_wr_data"),
                        en=Signal(name="flow_wr_en"))
        flow_rd = _Port(addr=Signal(range(self._n_qps), name="flow_rd_addr"), en=Signal(name="flow_rd_en"), banks=[])
        for b in range(n_banks):
            mem = memory.Memory(shape=layout, depth=min(FLOW_BANK, self._n_qps - b * FLOW_BANK), init=[])
            m.submodules[f"flows{b}"] = mem
            wr = mem.write_port()
            rd = mem.read_port()
            m.d.comb += [
                wr.addr.eq(flow_wr.addr[:low]), wr.data.eq(flow_wr.data),
                wr.en.eq(flow_wr.en & (flow_wr.addr[low:] == b)),
                rd.addr.eq(flow_rd.addr[:low]), rd.en.eq(flow_rd.en),
            ]
            flow_rd.banks.append(rd.data)
        return flow_wr, flow_rd

    def _stage_registers(self):
        """Create (not drive) the front's stage registers: ``s1`` (input register), ``s2`` (residue stage), ``s3``
        (compare stage) and ``s4`` (entry of the read-modify-write stage), each a :class:`_StageRegisters`; ``s3``
        and ``s4`` also have ``res`` (PSN mod N), ``base`` (the QP's first PSN-queue entry) and the item's class
        ``nack``, ``data``, ``setup``, ``teardown`` (see ``_input_and_residue_stages``)."""
        s1, s2, s3, s4 = (_StageRegisters(name, n_qps=self._n_qps) for name in ("s1", "s2", "s3", "s4"))
        for s in (s3, s4):
            name = s.valid.name[:2]
            s.res = Signal(residue_bits(self._n_paths), name=f"{name}_res")
            s.base = Signal(range(max(2, self._n_qps * self._queue_depth)), name=f"{name}_base")
            # Every NACK with a flow-table hit enters the scan state, active QP or not: the stall decision then
            # depends only on registers (s4_nack), not on the flow table's read data.
            s.nack = Signal(name=f"{name}_nack")
            s.data = Signal(name=f"{name}_data")      # a data packet with a flow-table hit (active entry or not)
            s.setup = Signal(name=f"{name}_setup")
            s.teardown = Signal(name=f"{name}_teardown")
        return s1, s2, s3, s4

    def _result_register_and_skid_buffer(self, m):
        """Three-entry skid buffer whose head is the output register: 1 cycle of latency, the last of the block's 5.

        Registers the read-modify-write stage's ``result`` (when ``produce`` is high) in a three-entry skid buffer
        whose head is the output register ``o.payload`` (``skid1`` and ``skid2`` behind it, ``skid_count`` entries;
        ``o.valid`` is ``skid_count != 0``). ``can_out``, the condition for the pipeline to advance, is that the
        buffer holds at most two items, a registered fact, so neither ``o.ready`` nor ``o.valid`` reaches the
        pipeline's enables (their fan-out is every stage register); unthrottled, the buffer never holds more than
        one item. The read-modify-write stage decides from registered compare flags (``_compare_stage``), so its
        result goes straight into the buffer: no result register is needed to keep the comparisons apart from the
        buffer's multiplexers.

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
        skid_count = Signal(range(4))
        skid1 = Signal.like(result)
        skid2 = Signal.like(result)
        pop = self.o.valid & self.o.ready
        m.d.comb += [self.o.valid.eq(skid_count != 0), can_out.eq(skid_count <= 2)]
        with m.Switch(Cat(produce, pop)):
            with m.Case(0b01):      # push only
                with m.Switch(skid_count):
                    with m.Case(0):
                        m.d.sync += self.o.payload.eq(result)
                    with m.Case(1):
                        m.d.sync += skid1.eq(result)
                    with m.Default():
                        m.d.sync += skid2.eq(result)
                m.d.sync += skid_count.eq(skid_count + 1)
            with m.Case(0b10):      # pop only
                m.d.sync += [self.o.payload.eq(skid1), skid1.eq(skid2), skid_count.eq(skid_count - 1)]
            with m.Case(0b11):      # both: skid_count is 1 or 2 here (3 never meets a push, 0 never pops)
                with m.If(skid_count == 1):
                    m.d.sync += self.o.payload.eq(result)
                with m.Else():
                    m.d.sync += [self.o.payload.eq(skid1), skid1.eq(result)]
        return result, produce, can_out

    def _statistics(self, m, result, produce):
        """Register ``stats``: one 32-bit counter per verdict, counting results as they are produced (beside the
        item path: no latency)."""
        with m.If(produce):
            for v in ThemisDVerdict:
                with m.If(result.verdict == v):
                    counter = self.stats.word_select(v.value, 32)
                    m.d.sync += counter.eq(counter + 1)
            with m.If(result.out_of_range):
                counter = self.stats.word_select(STAT_OUT_OF_RANGE, 32)
                m.d.sync += counter.eq(counter + 1)

    def _forwarded_flow_entry(self, m, flow_rd, fw, s4):
        """The flow entry and its compare flags as the read-modify-write stage's item must see them (combinational
        from registers, no latency): ``last_wr`` when the item just ahead wrote the item's entry (``fwd4``), else
        the entry the compare stage chose (``base4``); the flags likewise (``_compare_stage`` registers both
        candidates). The flow table's read data goes straight into ``rd_q`` (Vivado packs it into the block RAM's
        output register), which the compare stage uses.

        Returns
        -------
        fe : Signal(FlowEntry)
        fl : dict of the compare flags ``eq``, ``aft``, ``res``, ``hi``, ``lo`` (see :func:`_compare_flags`)
        """
        if hasattr(flow_rd, "banks"):
            # Each bank's read data straight into its register; the bank is chosen in the compare stage.
            low = (FLOW_BANK - 1).bit_length()
            fw.rd_banks = [Signal.like(fw.rd_q, name=f"flow_rd_q{b}") for b in range(len(flow_rd.banks))]
            # The bank of the read in flight (its data arrives a cycle after its address), then of the read data.
            rd_bank = Signal(range(len(flow_rd.banks)), name="flow_rd_bank")
            fw.rd_sel = Signal(range(len(flow_rd.banks)), name="flow_rd_sel")
            with m.If(flow_rd.en):
                m.d.sync += [q.eq(data) for q, data in zip(fw.rd_banks, flow_rd.banks)]
                m.d.sync += [rd_bank.eq(flow_rd.addr[low:]), fw.rd_sel.eq(rd_bank)]
            m.d.comb += fw.rd_q.eq(_select(fw.rd_sel, fw.rd_banks))
        else:
            with m.If(flow_rd.en):
                m.d.sync += fw.rd_q.eq(flow_rd.data)
        fe = Signal(self._flow_entry_layout())
        m.d.comb += fe.eq(Mux(fw.fwd4, fw.last_wr, fw.base4))
        fl = {}
        for key in _FLAG_KEYS:
            ahead = fw.fl_ahead[key]
            if key in ("eq", "aft", "res"):
                ahead = Mux(fw.arm_ahead, fw.fl_arm[key], ahead)
            elif key == "hi":
                ahead = Mux(fw.took_hi, fw.fl_psn["hi"], ahead)
            else:
                ahead = Mux(fw.took_lo, fw.fl_psn["lo"], ahead)
            fl[key] = Signal(name=f"fl_{key}")
            m.d.comb += fl[key].eq(Mux(fw.fwd4, ahead, fw.fl_base[key]))
        return fe, fl

    def _compare_stage(self, m, adv, done, fw, s3, s4, scan, took_hi, took_lo):
        """The compare stage: the item in ``s3`` compared with every entry it may see in the read-modify-write stage,
        each comparison registered into ``s4`` as the item moves on (``_FlowForwarding`` names the registers).

        The item's flow read misses the writes of three advances: that which issued it, the next (both in
        ``prev_wr``/``last_wr`` now, chosen by ``fwd_old``/``fwd_new``, else ``rd_q``: ``base4``, ``fl_base``) and
        the one that moves it into ``s4``, by the item now in ``s4``. What that item writes is not in a register
        yet, so the flags are made against each value it can write: its own flow entry (``last_wr`` or ``base4``,
        chosen by that item's ``fwd4``: ``fl_ahead``); for a NACK's write-back that arms, ePSN and its residue
        (``fl_arm``, used when ``arm_ahead``); for a data packet's new PSN bound, its PSN (``fl_psn``, used when
        ``took_hi``/``took_lo``, its "PSN taken" bits, registered). The read-modify-write stage then only chooses.
        """
        psn, res = s3.item.psn, s3.res
        src_last = _compare_flags(fw.last_wr, psn, res)
        src_prev = _compare_flags(fw.prev_wr, psn, res)
        if fw.rd_banks:
            # Several banks: compare each bank's registered data, then choose (the bank multiplexer is off the
            # comparators' path).
            per_bank = [_compare_flags(q, psn, res) for q in fw.rd_banks]
            src_rd = {key: _select(fw.rd_sel, [flags[key] for flags in per_bank]) for key in _FLAG_KEYS}
        else:
            src_rd = _compare_flags(fw.rd_q, psn, res)
        src_base4 = _compare_flags(fw.base4, psn, res)
        arm = scan.may_update & (scan.verdict == ThemisDVerdict.NACK_BLOCKED)
        with m.If(adv):
            m.d.sync += [
                fw.base4.eq(Mux(fw.fwd_new, fw.last_wr, Mux(fw.fwd_old, fw.prev_wr, fw.rd_q))),
                fw.arm_ahead.eq(done & arm),
                fw.took_hi.eq(s4.data & took_hi),
                fw.took_lo.eq(s4.data & took_lo),
                fw.fl_arm["eq"].eq(psn == scan.e_psn),
                fw.fl_arm["aft"].eq(~(psn - scan.e_psn)[PSN_BITS - 1]),
                fw.fl_arm["res"].eq(res == scan.e_res),
                fw.fl_psn["hi"].eq(~(psn - s4.item.psn)[PSN_BITS - 1]),
                fw.fl_psn["lo"].eq((psn - s4.item.psn)[PSN_BITS - 1]),
            ]
            for key in _FLAG_KEYS:
                m.d.sync += [
                    fw.fl_base[key].eq(Mux(fw.fwd_new, src_last[key], Mux(fw.fwd_old, src_prev[key], src_rd[key]))),
                    fw.fl_ahead[key].eq(Mux(fw.fwd4, src_last[key], src_base4[key])),
                ]

    def _decode_rmw_item(self, m, s4, fe):
        """Classify the read-modify-write stage's item (combinational): ``is_data``, a data packet of an active
        entry; ``starts_scan``, a NACK with a flow-table hit (from the registered ``s4.nack`` only)."""
        active = Signal()
        m.d.comb += active.eq(s4.valid & ~s4.ctl & s4.hit & fe.active)
        is_data = active & (s4.item.kind == PacketKind.DATA)
        starts_scan = Signal()
        m.d.comb += starts_scan.eq(s4.nack)
        return is_data, starts_scan

    def _input_and_residue_stages(self, m, adv, psn_mod, flow_rd, s1, s2, s3, s4):
        """Input register ``s1``, residue stage ``s2``, compare stage ``s3`` and the registers ``s4`` entering the
        read-modify-write stage: 1 cycle each, all loaded when ``adv``; the block's first 4 cycles of latency.

        ``s1`` takes a command when one is offered (commands take priority over packets: ``i.ready`` is low then),
        else the input item; its ``hit`` is ``qp_hit`` with ``qp`` in range (a command: ``index`` in range). ``psn_mod``
        follows the item through ``s1`` and ``s2`` and its PSN mod N is registered in ``s3.res``. As the item moves
        from ``s1`` to ``s2``, its flow-table read is issued (the data is registered as it moves on to ``s3``); as it
        moves from ``s2`` to ``s3``, ``s3`` registers its QP's PSN-queue base and its class (copied on to ``s4``),
        so that the read-modify-write stage's stall and write selects come from registers.
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
                m.d.sync += [getattr(s2, key).eq(getattr(s1, key)), getattr(s3, key).eq(getattr(s2, key)),
                             getattr(s4, key).eq(getattr(s3, key))]
            for key in ("res", "base", "nack", "data", "setup", "teardown"):
                m.d.sync += getattr(s4, key).eq(getattr(s3, key))
            m.d.sync += [
                s3.res.eq(psn_mod.o), s3.base.eq(ring_base(s2.item.qp, self._queue_depth)),
                s3.nack.eq(s2.valid & ~s2.ctl & s2.hit & (s2.item.kind == PacketKind.NACK)),
                s3.data.eq(s2.valid & ~s2.ctl & s2.hit & (s2.item.kind == PacketKind.DATA)),
                s3.setup.eq(s2.valid & s2.ctl & s2.hit & (s2.table == TABLE_QP_SETUP)),
                s3.teardown.eq(s2.valid & s2.ctl & s2.hit & (s2.table == TABLE_QP_TEARDOWN)),
            ]
        m.d.comb += [
            flow_rd.addr.eq(Mux(s1.hit, s1.item.qp, 0)),
            flow_rd.en.eq(adv),
        ]

    def _data_update(self, m, s4, fe, fl):
        """A data packet's compensation test and its flow entry after the PSN push (combinational, in the
        read-modify-write stage: no latency). The PSN comparisons were made in the compare stage (``fl``).

        Returns
        -------
        data_entry : Signal(FlowEntry)
            ``fe`` with the PSN pushed on its ring and Valid cleared by a cancel or a compensation.
        cancel, comp : Signal
            The PSN is BePSN (``DATA_CANCEL``); it is after BePSN on BePSN's path (``DATA_COMP``). Both only while
            Valid.
        took_hi, took_lo : Signal
            The PSN becomes the entry's ``hi``, ``lo_cur`` (the compare stage needs them for the item behind).
        """
        psn = s4.item.psn
        # "After BePSN" is 0 < psn - BePSN < 2**23: equality and the sign of the difference, both flags.
        cancel = Signal()
        comp = Signal()
        m.d.comb += [cancel.eq(fe.valid & fl["eq"]), comp.eq(fe.valid & ~fl["eq"] & fl["aft"] & fl["res"])]
        # The PSN bound (``FlowEntry``); the golden model's ``_bound`` states the rule.
        take_hi, take_lo = fl["hi"], fl["lo"]
        empty = fe.ring.count == 0
        new_pass = fe.ring.tail == 0
        pushed, _ = ring_push(fe.ring, self._queue_depth, overwrite=True)
        data_entry = Signal(self._flow_entry_layout())
        m.d.comb += [
            data_entry.eq(fe),
            data_entry.valid.eq(fe.valid & ~cancel & ~comp),
            data_entry.ring.head.eq(pushed["head"]),
            data_entry.ring.tail.eq(pushed["tail"]),
            data_entry.ring.count.eq(pushed["count"]),
            data_entry.hi.eq(Mux(empty | take_hi, psn, fe.hi)),
            data_entry.lo_cur.eq(Mux(empty | new_pass | take_lo, psn, fe.lo_cur)),
            data_entry.lo_prev.eq(Mux(empty, psn, Mux(new_pass, fe.lo_cur, fe.lo_prev))),
        ]
        took_hi = Signal()
        took_lo = Signal()
        m.d.comb += [took_hi.eq(empty | take_hi), took_lo.eq(empty | new_pass | take_lo)]
        return data_entry, cancel, comp, took_hi, took_lo

    def _clear_flow_table(self, m, flow_wr):
        """State CLEAR, after reset: write an idle entry to ``clr_addr`` (registered, counting up), one per cycle,
        then go to RUN. ``adv`` stays low meanwhile, so both inputs are not ready."""
        clr_addr = Signal(_bits(self._n_qps))
        m.d.comb += [flow_wr.addr.eq(clr_addr), flow_wr.data.eq(0), flow_wr.en.eq(1)]
        m.d.sync += clr_addr.eq(clr_addr + 1)
        with m.If(clr_addr == self._n_qps - 1):
            m.d.sync += clr_addr.eq(0)
            m.next = "RUN"

    def _rmw_write(self, m, adv, s4, flow_wr, queues, data_entry):
        """State RUN, the write half of the read-modify-write stage: write back the item's flow entry (set-up: active
        and empty; tear-down: idle; data: ``data_entry``) and push a data packet's PSN on its queue, as the item
        leaves the stage. Enables and data selection come from registered flags only."""
        # A data packet of an idle entry updates that entry's ring too: harmless, as set-up empties the ring and the
        # entry stays idle (its Valid is 0, so no compensation); its output still says PASS.
        with m.If(s4.setup):
            m.d.comb += flow_wr.data.eq(1)
        with m.Elif(s4.data):
            m.d.comb += flow_wr.data.eq(data_entry)
        m.d.comb += [
            flow_wr.en.eq(adv & (s4.setup | s4.teardown | s4.data)),
            queues.wr_en.eq(adv & s4.data),
        ]

    def _rmw_result(self, m, adv, s4, fe, result, produce, is_data, cancel, comp):
        """State RUN, the result of every item but a NACK with a flow-table hit (combinational; the result register
        loads it): a data packet of an active entry gets DATA, DATA_COMP (with BePSN and its MSN) or DATA_CANCEL,
        everything else PASS. Commands produce no result."""
        m.d.comb += produce.eq(adv & s4.valid & ~s4.ctl)
        with m.If(is_data):
            m.d.comb += _load_result(
                result, s4.item,
                Mux(cancel, ThemisDVerdict.DATA_CANCEL, Mux(comp, ThemisDVerdict.DATA_COMP, ThemisDVerdict.DATA)),
                comp=comp, comp_psn=Mux(comp, fe.bepsn, 0), comp_msn=Mux(comp, fe.bmsn, 0))
        with m.Else():
            m.d.comb += _load_result(result, s4.item, ThemisDVerdict.PASS)

    def _nack_result(self, m, scan, item, result, produce):
        """State DONE, when the result register can take it: the NACK's result (combinational), its verdict for an
        active entry and PASS for an idle one. A blocked or late NACK is dropped; ``arm`` marks the blocked NACK that
        changed (BePSN, Valid)."""
        drop = (scan.verdict == ThemisDVerdict.NACK_BLOCKED) | (scan.verdict == ThemisDVerdict.NACK_LATE)
        m.d.comb += produce.eq(1)
        with m.If(scan.active):
            arm = scan.may_update & (scan.verdict == ThemisDVerdict.NACK_BLOCKED)
            m.d.comb += _load_result(result, item, scan.verdict, drop=drop, arm=arm, scanned=scan.scanned,
                                     out_of_range=scan.oor)
        with m.Else():
            m.d.comb += _load_result(result, item, ThemisDVerdict.PASS)

    def _remember_flow_write(self, m, adv, flow_wr, wr_intent, s1, s2, s3, s4, fw):
        """Register the forwarding state (``_FlowForwarding``).

        An item's flow read is issued as it enters ``s2``, its registered data is compared in ``s3`` and used in
        ``s4``; writes happen only as the front advances. The read misses the write of the advance that issues it
        (by the item three ahead), that of the next (two ahead) and that of the one after (just ahead):
        ``fwd_old``, ``fwd_new`` (valid while the item is in ``s3``) and ``fwd4`` (in ``s4``), decided from
        registered addresses as the item enters ``s2``, ``s3`` and ``s4``."""
        # As the front advances, the stage writes exactly when it means to (``wr_intent``, from registers); its
        # address is ``s4``'s QP. Neither ``adv`` nor the state decode then reaches the three comparators.
        with m.If(adv):
            m.d.sync += [
                fw.f2.eq(wr_intent & s1.hit & (s4.item.qp == s1.item.qp)),
                fw.fwd_old.eq(fw.f2),
                fw.fwd_new.eq(wr_intent & s2.hit & (s4.item.qp == s2.item.qp)),
                fw.fwd4.eq(wr_intent & s3.hit & (s4.item.qp == s3.item.qp)),
                fw.prev_wr.eq(fw.last_wr),
                fw.last_wr.eq(flow_wr.data),
            ]


class _Port:
    """The ports of a banked flow table, as ``_flow_banks`` drives them."""

    def __init__(self, **signals):
        self.__dict__.update(signals)


def _select(sel, values):
    """``values[sel]``, a multiplexer."""
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = Mux(sel == i, values[i], out)
    return out


#: The compare flags of an item against a flow entry (see :func:`_compare_flags`).
_FLAG_KEYS = ("eq", "aft", "res", "hi", "lo")


def _compare_flags(entry, psn, res):
    """The PSN comparisons the read-modify-write stage needs, of an item (``psn``, ``res`` = PSN mod N) against
    ``entry``: ``eq``, PSN == BePSN; ``aft``, PSN - BePSN is in [0, 2**23); ``res``, the residues agree (with
    ``eq`` clear and ``aft`` set: after BePSN on its path); ``hi``, PSN is not before ``hi``; ``lo``, PSN is before
    ``lo_cur`` (sign tests: see the golden model's ``_bound``)."""
    return {
        "eq":  psn == entry.bepsn,
        "aft": ~(psn - entry.bepsn)[PSN_BITS - 1],
        "res": res == entry.bres,
        "hi":  ~(psn - entry.hi)[PSN_BITS - 1],
        "lo":  (psn - entry.lo_cur)[PSN_BITS - 1],
    }


class _FlowForwarding:
    """Forwarding registers: the registered flow-table read data ``rd_q``; the last two writes, ``last_wr`` and
    ``prev_wr``; the hits of the three writes an item's read misses (``f2`` then ``fwd_old``; ``fwd_new``; ``fwd4``);
    the entry the compare stage chose, ``base4``, with its flags ``fl_base``; and the flags against what the item
    ahead writes (``fl_ahead``, ``fl_arm`` with ``arm_ahead``, ``fl_psn`` with ``took_hi``/``took_lo``)."""

    def __init__(self, layout):
        self.rd_q = Signal(layout, name="flow_rd_q")
        self.rd_banks = []      # a flow table of several banks: each bank's registered read data (``rd_sel``)
        self.last_wr = Signal(layout, name="last_wr")
        self.prev_wr = Signal(layout, name="prev_wr")
        self.base4 = Signal(layout, name="base4")
        self.f2 = Signal(name="fwd_s2")
        self.fwd_old = Signal()
        self.fwd_new = Signal()
        self.fwd4 = Signal()
        self.arm_ahead = Signal()
        self.took_hi = Signal(name="took_hi_ahead")
        self.took_lo = Signal(name="took_lo_ahead")
        self.fl_base = {k: Signal(name=f"fl_base_{k}") for k in _FLAG_KEYS}
        self.fl_ahead = {k: Signal(name=f"fl_ahead_{k}") for k in _FLAG_KEYS}
        self.fl_arm = {k: Signal(name=f"fl_arm_{k}") for k in ("eq", "aft", "res")}
        self.fl_psn = {k: Signal(name=f"fl_psn_{k}") for k in ("hi", "lo")}


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


def _load_result(out, item, verdict, drop=0, arm=0, comp=0, comp_psn=0, comp_msn=0, scanned=0, out_of_range=0):
    """Assignments of ``item``'s fields and the decision to the result ``out``."""
    return [
        out.kind.eq(item.kind), out.qp_hit.eq(item.qp_hit), out.qp.eq(item.qp), out.psn.eq(item.psn),
        out.msn.eq(item.msn), out.tag.eq(item.tag), out.verdict.eq(verdict), out.drop.eq(drop),
        out.arm.eq(arm), out.comp.eq(comp), out.comp_psn.eq(comp_psn), out.comp_msn.eq(comp_msn),
        out.scanned.eq(scanned), out.out_of_range.eq(out_of_range),
    ]


class _NackScan:
    """The NACK scan engine: its registers, and the logic of the read-modify-write stage's SCAN state.

    ``start`` (in RUN, for a NACK with a flow-table hit) registers ePSN (``e_t``, its low entry bits; ``e_psn``;
    ``e_msn``; ``e_res``, PSN mod N) and the QP's entry as read (``sc_entry``, ``sc_active``). ``step`` (SCAN) then
    issues one PSN-queue read per cycle (``sc_pos``, ``sc_left``, ``sc_pending``) and brings each entry through a
    pipeline to a decision: the ring memory's registered read data ``x`` (the queue spans many BRAMs and their
    output multiplexer is deep), the distance ``d`` to ePSN, the look-up flags ``f_*``, and the decision, which
    updates ``sc_phase2``, ``sc_verdict``, ``sc_n1`` (entries to dequeue) and ``sc_scanned``. DONE writes
    ``write_back_entry`` back. The engine holds the read-modify-write stage for ``scanned + 8`` cycles (3 when the
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
        # left == 0, kept in a register: the scan's stop decision then starts at flip-flops only.
        self.left_zero = Signal(name="sc_left_zero")
        # Each stage of the scan pipeline has a valid bit.
        self.pending = Signal(name="sc_pending")   # a queue read was issued last cycle
        self.pending2 = Signal(name="sc_pending2")  # ... the cycle before
        self.pending3 = Signal(name="sc_pending3")  # ... the cycle before that: its data reaches x next cycle
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
        # The range test (``range_pipeline``): differences, then the out-of-range flag, each with a valid pulse.
        self.r_hi = Signal(PSN_BITS)
        self.r_lc = Signal(PSN_BITS)
        self.r_lp = Signal(PSN_BITS)
        self.r_first = Signal()
        self.r_d_valid = Signal()
        self.r_oor = Signal()
        self.r_valid = Signal()
        self.oor = Signal(name="sc_out_of_range")     # the verdict came from the range test

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

    def range_pipeline(self, m):
        """Register the differences of the QP's PSN bound (``hi``, ``lo_cur``, ``lo_prev``) from ePSN, then
        ``r_oor``: one of them is ``2**(entry_bits-1)`` or more from ePSN, either way, and the queue is not empty.
        Valid (``r_valid``) in the scan's third cycle, before the first queue entry reaches a decision.

        A difference ``d`` is near when its bits from ``entry_bits - 1`` up are all zero, or all one with a lower bit
        set. With 24-bit entries the entries are full PSNs and the test is off."""
        W = self._entry_bits
        e = self.e_psn
        m.d.sync += [
            self.r_hi.eq(self.entry.hi - e), self.r_lc.eq(self.entry.lo_cur - e), self.r_lp.eq(self.entry.lo_prev - e),
            self.r_first.eq(0), self.r_d_valid.eq(self.r_first), self.r_valid.eq(self.r_d_valid),
        ]
        if W >= PSN_BITS:
            m.d.sync += self.r_oor.eq(0)
            return

        def near(d):
            top = d[W - 1:]
            return (top == 0) | (top.all() & (d[:W - 1] != 0))
        m.d.sync += self.r_oor.eq(self.active & (self.entry.ring.count != 0)
                                  & ~(near(self.r_hi) & near(self.r_lc) & near(self.r_lp)))

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
            self.left_zero.eq(~fe.active | (fe.ring.count == 0)),
            self.pending.eq(0), self.pending2.eq(0), self.pending3.eq(0), self.x_valid.eq(0), self.d_valid.eq(0),
            self.f_valid.eq(0),
            self.phase2.eq(0), self.n1.eq(0), self.scanned.eq(0),
            self.r_first.eq(1), self.r_d_valid.eq(0), self.r_valid.eq(0), self.oor.eq(0),
        ]

    def step(self, m):
        """One cycle of SCAN: decide on the entry whose flags are valid, issue the next queue read, advance the
        valid bits. Return ``stop``, high in the cycle the verdict is settled (the FSM then goes to DONE)."""
        decided = Signal()
        phase2_next = Signal()
        verdict_next = Signal(ThemisDVerdict)
        m.d.comb += [phase2_next.eq(self.phase2), verdict_next.eq(self.verdict)]
        m.d.sync += [self.pending2.eq(self.pending), self.pending3.eq(self.pending2), self.x_valid.eq(self.pending3),
                     self.d_valid.eq(self.x_valid),
                     self.f_valid.eq(self.d_valid)]
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
        # Out of range: forward without a look at the queue, and empty it (the first entry decides in the sixth
        # cycle at the earliest, so the two never meet).
        with m.If(self.r_valid & self.r_oor):
            m.d.comb += [decided.eq(1), verdict_next.eq(ThemisDVerdict.NACK_NO_TPSN)]
            m.d.sync += [self.n1.eq(self.entry.ring.count), self.oor.eq(1)]
        stop = Signal()
        # The queue is exhausted once nothing is left to read and no entry is on its way to a decision.
        exhausted = (self.left_zero & ~self.pending & ~self.pending2 & ~self.pending3 & ~self.x_valid
                     & ~self.d_valid)
        m.d.comb += stop.eq(decided | exhausted)
        with m.If(~decided & exhausted):
            m.d.comb += verdict_next.eq(Mux(phase2_next, ThemisDVerdict.NACK_BLOCKED, ThemisDVerdict.NACK_NO_TPSN))
        m.d.sync += [self.phase2.eq(phase2_next), self.verdict.eq(verdict_next)]
        with m.If(~stop & ~self.left_zero):
            m.d.sync += [
                self.pos.eq(wrap_inc(self.pos, self._queue_depth)),
                self.left.eq(self.left - 1),
                self.left_zero.eq(self.left == 1),
                self.pending.eq(1),
            ]
        with m.Else():
            m.d.sync += self.pending.eq(0)
        return stop
