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
the output register.
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
        m = Module()
        Q, N, W = self._queue_depth, self._n_paths, self._entry_bits
        qb = _bits(self._n_qps)
        entry_layout = FlowEntry(queue_depth=Q, n_paths=N)

        m.submodules.flows = flows = memory.Memory(shape=entry_layout, depth=self._n_qps, init=[])
        flow_wr = flows.write_port()
        # Not transparent: the read-modify-write stage forwards the one write it can miss itself (below), so that
        # the compensation test runs on the memory data and the forwarded entry in parallel.
        flow_rd = flows.read_port()
        m.submodules.queues = queues = RingMemory(n_rings=self._n_qps, depth=Q, shape=W)

        m.submodules.psn_mod = psn_mod = ModN(width=PSN_BITS, n=N)

        # Stage records. ``hit`` is qp_hit with qp in range (or, for a command, index in range).
        def stage(name):
            return dict(
                valid=Signal(name=f"{name}_valid"),
                ctl=Signal(name=f"{name}_ctl"),
                table=Signal(8, name=f"{name}_table"),
                hit=Signal(name=f"{name}_hit"),
                item=Signal(ThemisDItem(n_qps=self._n_qps), name=f"{name}_item"),
            )
        s1, s2, s3 = stage("s1"), stage("s2"), stage("s3")
        s3_res = Signal(residue_bits(N))
        s3_base = Signal(range(max(2, self._n_qps * Q)))

        # A result is registered (``res_q``), then goes through a three-entry skid buffer whose head is the output
        # register: the result register keeps the read-modify-write stage's decision logic apart from the skid
        # buffer's multiplexers. The pipeline advances while the result register and the buffer hold at most two
        # items between them, a registered fact, so neither out.ready nor out.valid reaches the pipeline's enables
        # (their fan-out is every stage register); three entries let one item per clock flow with the output
        # register full. Unthrottled, the buffer never holds more than one item.
        can_out = Signal()
        produce = Signal()
        result = Signal(ThemisDResult(n_qps=self._n_qps, queue_depth=Q))
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
        adv = Signal()
        # Statistics: one counter per verdict, counted as results are produced.
        with m.If(produce):
            for v in ThemisDVerdict:
                with m.If(result.verdict == v):
                    counter = self.stats.word_select(v.value, 32)
                    m.d.sync += counter.eq(counter + 1)

        # The entry as the item must see it: the memory's, or the one written in the cycle the item's read was
        # issued (a read-before-write memory misses that write). ``fwd`` is decided a cycle early, from addresses
        # in registers.
        fwd = Signal()
        last_wr = Signal(entry_layout)
        fe = Signal(entry_layout)
        m.d.comb += fe.eq(Mux(fwd, last_wr, flow_rd.data))
        item = s3["item"]
        active = Signal()
        m.d.comb += active.eq(s3["valid"] & ~s3["ctl"] & s3["hit"] & fe.active)
        is_data = active & (item.kind == PacketKind.DATA)
        # Every NACK with a flow-table hit enters the scan state, active QP or not: the stall decision then
        # depends only on registers (s3_nack), not on the flow table's read data.
        s3_nack = Signal()
        s3_data = Signal()      # a data packet with a flow-table hit (active entry or not)
        s3_setup = Signal()
        s3_teardown = Signal()
        starts_scan = Signal()
        m.d.comb += starts_scan.eq(s3_nack)
        sc_active = Signal()

        # -- front of the pipeline: commands take priority over packets ------------------------------------------
        m.d.comb += [
            self.ctl.ready.eq(adv),
            self.i.ready.eq(adv & ~self.ctl.valid),
            psn_mod.i.eq(self.i.payload.psn),
            psn_mod.en.eq(adv),
        ]
        with m.If(adv):
            with m.If(self.ctl.valid):
                m.d.sync += [
                    s1["valid"].eq(1), s1["ctl"].eq(1), s1["table"].eq(self.ctl.payload.table),
                    s1["hit"].eq(self.ctl.payload.index < self._n_qps),
                    s1["item"].eq(0), s1["item"].qp.eq(self.ctl.payload.index[:qb]),
                ]
            with m.Else():
                m.d.sync += [
                    s1["valid"].eq(self.i.valid), s1["ctl"].eq(0), s1["table"].eq(0),
                    s1["hit"].eq(self.i.payload.qp_hit & (self.i.payload.qp < self._n_qps)),
                    s1["item"].eq(self.i.payload),
                ]
            for key in ("valid", "ctl", "table", "hit", "item"):
                m.d.sync += [s2[key].eq(s1[key]), s3[key].eq(s2[key])]
            m.d.sync += [
                s3_res.eq(psn_mod.o), s3_base.eq(ring_base(s2["item"].qp, Q)),
                s3_nack.eq(s2["valid"] & ~s2["ctl"] & s2["hit"] & (s2["item"].kind == PacketKind.NACK)),
                s3_data.eq(s2["valid"] & ~s2["ctl"] & s2["hit"] & (s2["item"].kind == PacketKind.DATA)),
                s3_setup.eq(s2["valid"] & s2["ctl"] & s2["hit"] & (s2["table"] == TABLE_QP_SETUP)),
                s3_teardown.eq(s2["valid"] & s2["ctl"] & s2["hit"] & (s2["table"] == TABLE_QP_TEARDOWN)),
            ]

        m.d.comb += [
            flow_rd.addr.eq(Mux(s2["hit"], s2["item"].qp, 0)),
            flow_rd.en.eq(adv),
        ]

        out = result
        def load_out(verdict, drop=0, arm=0, comp=0, comp_psn=0, comp_msn=0, scanned=0):
            return [
                out.kind.eq(item.kind), out.qp_hit.eq(item.qp_hit), out.qp.eq(item.qp), out.psn.eq(item.psn),
                out.msn.eq(item.msn), out.tag.eq(item.tag), out.verdict.eq(verdict), out.drop.eq(drop),
                out.arm.eq(arm), out.comp.eq(comp), out.comp_psn.eq(comp_psn), out.comp_msn.eq(comp_msn), out.scanned.eq(scanned),
            ]

        # -- data packet: compensation check and enqueue -----------------------------------------------------------
        psn = item.psn
        # "After BePSN" is 0 < psn - BePSN < 2**23; with psn == BePSN tested in parallel by equality, only the
        # sign of the difference is left after the carry chain. The test runs on both candidate entries and the
        # forwarding choice comes last, off the carry chain's path.
        def compensation(entry):
            cancel = entry.valid & (psn == entry.bepsn)
            comp = entry.valid & ~cancel & ~(psn - entry.bepsn)[PSN_BITS - 1] & (s3_res == entry.bres)
            return cancel, comp
        cancel_mem, comp_mem = compensation(flow_rd.data)
        cancel_fwd, comp_fwd = compensation(last_wr)
        cancel = Signal()
        comp = Signal()
        m.d.comb += [cancel.eq(Mux(fwd, cancel_fwd, cancel_mem)), comp.eq(Mux(fwd, comp_fwd, comp_mem))]
        pushed, _ = ring_push(fe.ring, Q, overwrite=True)
        data_entry = Signal(entry_layout)
        m.d.comb += [
            data_entry.eq(fe),
            data_entry.valid.eq(fe.valid & ~cancel & ~comp),
            data_entry.ring.head.eq(pushed["head"]),
            data_entry.ring.tail.eq(pushed["tail"]),
            data_entry.ring.count.eq(pushed["count"]),
        ]

        # -- NACK scan state ---------------------------------------------------------------------------------------
        e_t = Signal(W)          # ePSN truncated to an entry
        e_psn = Signal(PSN_BITS)
        e_msn = Signal(24)
        e_res = Signal(residue_bits(N))
        sc_entry = Signal(entry_layout)   # the QP's entry as read when the scan began
        sc_pos = Signal(_bits(Q))
        sc_left = Signal(Q.bit_length())
        # The scan is a pipeline: read, register the read data (the PSN queue spans many BRAMs and their output
        # multiplexer is deep), distance to ePSN, table look-ups, decision. Each stage has a valid bit.
        sc_pending = Signal()    # a queue read was issued last cycle: its data reaches x next cycle
        x = queues.rd_data       # registered in the ring memory
        x_valid = Signal()
        d = Signal(W)
        d_wraps = Signal()
        d_valid = Signal()
        f_after = Signal()       # flags of the entry being decided on
        f_same = Signal()
        f_is_e = Signal()
        f_valid = Signal()
        sc_phase2 = Signal()
        sc_n1 = Signal(Q.bit_length())
        sc_scanned = Signal(Q.bit_length())
        sc_verdict = Signal(ThemisDVerdict)
        # An entry d after ePSN has the full PSN ePSN + d (mod 2**24) and is on ePSN's path when that PSN and ePSN
        # agree mod N: d mod N == 0, or, when ePSN + d wraps past 2**24, d mod N == 2**24 mod N. Two constant bit
        # tables indexed by d give both answers. ePSN + d can only wrap when ePSN's bits above the entry are all
        # ones, and then it wraps exactly when the entry is numerically below ePSN's low bits.
        wrap_res = (1 << PSN_BITS) % N
        same_nowrap = Const(sum(1 << d for d in range(1 << W) if d % N == 0), 1 << W)
        same_wrap = Const(sum(1 << d for d in range(1 << W) if d % N == wrap_res), 1 << W)
        e_top_ones = Signal()

        d_after = (d != 0) & ~d[W - 1]
        # The scan's data registers load every cycle, whatever the state: only their valid bits are gated, which
        # keeps the state decode out of the look-up paths.
        m.d.sync += [
            d.eq(x - e_t), d_wraps.eq(e_top_ones & (x < e_t)),
            f_after.eq(d_after), f_is_e.eq(d == 0),
            f_same.eq(d_after & Mux(d_wraps, same_wrap.bit_select(d, 1), same_nowrap.bit_select(d, 1))),
        ]

        # Queue addresses do not depend on the state: only the write enable and the scan's valid bits do.
        m.d.comb += [
            queues.wr_base.eq(s3_base), queues.wr_pos.eq(fe.ring.tail), queues.wr_data.eq(psn[:W]),
            queues.rd_base.eq(s3_base), queues.rd_pos.eq(sc_pos),
        ]
        dropped = ring_drop(sc_entry.ring, sc_n1, Q)
        nack_entry = Signal(entry_layout)
        # Whether this NACK may change (BePSN, Valid); computed during the scan, registered for the write-back.
        may_update = Signal()
        m.d.sync += may_update.eq(~sc_entry.valid | ~_after(sc_entry.bepsn, e_psn, PSN_BITS))
        m.d.comb += [
            nack_entry.eq(sc_entry),
            nack_entry.ring.head.eq(dropped["head"]),
            nack_entry.ring.count.eq(dropped["count"]),
        ]
        with m.If(may_update):
            with m.If(sc_verdict == ThemisDVerdict.NACK_BLOCKED):
                m.d.comb += [nack_entry.valid.eq(1), nack_entry.bepsn.eq(e_psn), nack_entry.bres.eq(e_res),
                             nack_entry.bmsn.eq(e_msn)]
            with m.Else():
                m.d.comb += nack_entry.valid.eq(0)

        clr_addr = Signal(qb)
        m.d.comb += flow_wr.addr.eq(item.qp)

        with m.FSM(init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += [flow_wr.addr.eq(clr_addr), flow_wr.data.eq(0), flow_wr.en.eq(1)]
                m.d.sync += clr_addr.eq(clr_addr + 1)
                with m.If(clr_addr == self._n_qps - 1):
                    m.d.sync += clr_addr.eq(0)
                    m.next = "RUN"

            with m.State("RUN"):
                m.d.comb += adv.eq(can_out & ~starts_scan)
                with m.If(starts_scan):
                    m.d.sync += [
                        e_t.eq(item.psn[:W]), e_psn.eq(item.psn), e_msn.eq(item.msn), e_res.eq(s3_res),
                        e_top_ones.eq(item.psn[W:].all() if W < PSN_BITS else 1),
                        sc_entry.eq(fe), sc_active.eq(fe.active),
                        sc_pos.eq(fe.ring.head), sc_left.eq(Mux(fe.active, fe.ring.count, 0)),
                        sc_pending.eq(0), x_valid.eq(0), d_valid.eq(0), f_valid.eq(0),
                        sc_phase2.eq(0), sc_n1.eq(0), sc_scanned.eq(0),
                    ]
                    m.next = "SCAN"
                # The write's enable and data selection come from registered flags only. A data packet of an idle
                # entry updates that entry's ring too: harmless, as set-up empties the ring and the entry stays idle
                # (its Valid is 0, so no compensation); its output still says PASS.
                with m.If(s3_setup):
                    m.d.comb += flow_wr.data.eq(1)
                with m.Elif(s3_data):
                    m.d.comb += flow_wr.data.eq(data_entry)
                m.d.comb += [
                    flow_wr.en.eq(adv & (s3_setup | s3_teardown | s3_data)),
                    queues.wr_en.eq(adv & s3_data),
                ]
                m.d.comb += produce.eq(adv & s3["valid"] & ~s3["ctl"])
                with m.If(is_data):
                    m.d.comb += load_out(
                        Mux(cancel, ThemisDVerdict.DATA_CANCEL,
                            Mux(comp, ThemisDVerdict.DATA_COMP, ThemisDVerdict.DATA)),
                        comp=comp, comp_psn=Mux(comp, fe.bepsn, 0), comp_msn=Mux(comp, fe.bmsn, 0))
                with m.Else():
                    m.d.comb += load_out(ThemisDVerdict.PASS)

            with m.State("SCAN"):
                decided = Signal()
                phase2_next = Signal()
                verdict_next = Signal(ThemisDVerdict)
                m.d.comb += [phase2_next.eq(sc_phase2), verdict_next.eq(sc_verdict)]
                m.d.sync += [x_valid.eq(sc_pending), d_valid.eq(x_valid), f_valid.eq(d_valid)]
                x_same, x_after, x_is_e = f_same, f_after, f_is_e
                with m.If(f_valid):
                    m.d.sync += sc_scanned.eq(sc_scanned + 1)
                    with m.If(~sc_phase2):
                        with m.If(x_same):
                            m.d.comb += [decided.eq(1), verdict_next.eq(ThemisDVerdict.NACK_VALID)]
                        with m.Elif(x_after):
                            m.d.comb += phase2_next.eq(1)
                        with m.Else():
                            # Entries before tPSN are dequeued; tPSN itself stays (see the golden model).
                            m.d.sync += sc_n1.eq(sc_n1 + 1)
                    with m.Else():
                        with m.If(x_is_e):
                            m.d.comb += [decided.eq(1), verdict_next.eq(ThemisDVerdict.NACK_LATE)]
                        with m.Elif(x_same):
                            m.d.comb += [decided.eq(1), verdict_next.eq(ThemisDVerdict.NACK_VALID)]
                stop = Signal()
                # The queue is exhausted once nothing is left to read and no entry is on its way to a decision.
                exhausted = (sc_left == 0) & ~sc_pending & ~x_valid & ~d_valid
                m.d.comb += stop.eq(decided | exhausted)
                with m.If(~decided & exhausted):
                    m.d.comb += verdict_next.eq(Mux(phase2_next, ThemisDVerdict.NACK_BLOCKED,
                                                    ThemisDVerdict.NACK_NO_TPSN))
                m.d.sync += [sc_phase2.eq(phase2_next), sc_verdict.eq(verdict_next)]
                with m.If(~stop & (sc_left != 0)):
                    m.d.sync += [
                        sc_pos.eq(wrap_inc(sc_pos, Q)),
                        sc_left.eq(sc_left - 1),
                        sc_pending.eq(1),
                    ]
                with m.Else():
                    m.d.sync += sc_pending.eq(0)
                with m.If(stop):
                    m.next = "DONE"

            with m.State("DONE"):
                m.d.comb += adv.eq(can_out)
                with m.If(can_out):
                    m.d.comb += [flow_wr.data.eq(nack_entry), flow_wr.en.eq(sc_active)]
                    drop = (sc_verdict == ThemisDVerdict.NACK_BLOCKED) | (sc_verdict == ThemisDVerdict.NACK_LATE)
                    m.d.comb += produce.eq(1)
                    with m.If(sc_active):
                        arm = may_update & (sc_verdict == ThemisDVerdict.NACK_BLOCKED)
                        m.d.comb += load_out(sc_verdict, drop=drop, arm=arm, scanned=sc_scanned)
                    with m.Else():
                        m.d.comb += load_out(ThemisDVerdict.PASS)
                    m.next = "RUN"
        # The next item to enter the read-modify-write stage has its flow read issued in a cycle where the pipeline
        # advances; if a write happens in that same cycle to the same entry, the read misses it: remember it.
        with m.If(adv):
            m.d.sync += [
                fwd.eq(flow_wr.en & s2["hit"] & (flow_wr.addr == s2["item"].qp)),
                last_wr.eq(flow_wr.data),
            ]
        return m
