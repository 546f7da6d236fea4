"""Themis-D with the NACK scan beside the data path (issue 8, "Themis-D: data never waits for a NACK scan"; the
design of docs/themis.md, "Next step", with one pending NACK per QP).

Same ports, layouts, control commands, decisions and statistics as :class:`lbpipe.hdl.themis.themis_d.ThemisD`,
whose front (residue, compare and read-modify-write stages, flow-table forwarding), memories and scan engine
(``_NackScan``) it reuses by inheritance. What changes is who waits for a scan:

* A NACK with a flow-table hit passes the read-modify-write (RMW) stage in one cycle. If it may change (BePSN,
  Valid), it writes BePSN = ePSN and Valid = 1 back at once, as if it will be blocked (*provisional arming*), and it
  restarts its entry's *fresh bound* (the PSN bound of the pushes since the NACK). It leaves a *placeholder* in the
  result FIFO and a *job* (its item, residue, queue base and flow entry as read) in the job register, then the job
  FIFO (an idle engine with no job queued takes it from the register), and the front goes on with the next item.
* The scan engine takes jobs in arrival order and runs ``_NackScan`` on them (one queue entry read per clock). A
  *token* enters ``s1`` ahead of input and commands, as a command does: the cycle after the one that requests it,
  which is the verdict's, or earlier, as soon as the verdict is certain to settle within two cycles (the last
  entry read, or an entry equal to ePSN after tPSN, has reached the scan's read register). It takes the slot's push
  count as it enters (no data of its QP moves on between the request and the token); the scan's results (the
  entries before tPSN, whether Valid is cleared) are *bound* into it the cycle after the verdict, wherever it is
  then, and the verdict goes into the verdict FIFO. The token works out the ring the golden model holds by now (the
  scanned entries before tPSN dequeued from the ring as the NACK found it, then the pushes since); at the RMW stage
  it writes the QP's current entry back with that ring, Valid cleared if the NACK may update and is not blocked, and
  the fresh bound installed as the bound if the scan emptied the ring and data was pushed since. The engine takes
  its next job in the cycle the token is bound.
* **Conditional data.** A data packet of a QP whose NACK is pending (from the NACK entering ``s1`` to its token
  entering ``s1``) is decided at the RMW stage as usual, against the provisional arming, and its result is marked
  conditional on the NACK's slot: if that NACK turns out not blocked, the output rewrites the result to plain
  ``DATA`` (no ``comp``). It waits in the hazard register ``s0`` only (a) until the NACK has passed the RMW stage
  (the ring's count is known), (b) while its push could overwrite a queue entry the scan has not read yet (the
  *overwrite wait*: ``room``, below), and (c) in the token's own cycle, as every item does.
* Results leave in input order: the RMW stage's result is registered into the result FIFO (``rob`` entries, block
  RAM, read registered); the output stage takes its head and, for a placeholder, the verdict FIFO's head, merges
  them (and rewrites a conditional result whose NACK was not blocked) into a two-entry skid buffer whose head is
  ``o.payload``; the statistics count what it takes.
* **Hazard slots.** Each pending NACK has a slot (``slots`` of them, allocated in order as the NACK enters ``s1``,
  freed as its token does). A slot holds the NACK's QP and, once the NACK has passed the RMW stage, ``room`` =
  queue depth - the ring's count at the NACK - pushes since + entries read by the scan (a push is safe while
  ``room`` is at least 1), ``p`` = the pushes since (saturating), ``tailk`` = the ring's tail now, and whether
  the NACK may update. A second NACK of a pending QP waits in ``s0`` until the first one's token (the cycle model
  allows two), and so does any NACK while ``slots`` NACKs are outstanding (from ``s1`` to their result leaving the
  output). Commands wait until no NACK is pending. ``s0``'s decision starts at registers (per-slot match and
  ``ok`` flags, made as ``s0`` loads or the slot changes).

docs/themis.md ("Themis-D with the scan beside the data path") gives the timing, the measured throughput and what
is left to build (a second pending NACK per QP, four entries read per clock).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data

from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import PacketKind, PSN_BITS
from lbpipe.hdl.lib.modn import residue_bits
from lbpipe.hdl.themis.themis_d import (
    FLOW_BANK, FlowEntry, ThemisD, ThemisDItem, ThemisDResult, ThemisDVerdict, _bits, _FlowForwarding, _NackScan,
    _select,
)
from lbpipe.hdl.lib.ring import ring_base, wrap_inc

__all__ = ["ThemisDSplit"]


#: The compare flags of this block: Themis-D's (``eq``, ``aft``, ``res``, ``hi``, ``lo``), ``half`` (PSN - BePSN is
#: exactly 2**23: with ``aft``, a NACK's "not after BePSN" test) and ``fhi``/``flo`` against the fresh bound.
_KEYS = ("eq", "aft", "res", "hi", "lo", "half", "fhi", "flo")


def _flags(entry, psn, res):
    d = (psn - entry.bepsn)[:PSN_BITS]
    return {
        "eq":  psn == entry.bepsn,
        "aft": ~d[PSN_BITS - 1],
        "res": res == entry.bres,
        "hi":  ~(psn - entry.hi)[PSN_BITS - 1],
        "lo":  (psn - entry.lo_cur)[PSN_BITS - 1],
        "half": psn == (entry.bepsn ^ (1 << (PSN_BITS - 1))),     # psn - BePSN == 2**23
        "fhi": ~(psn - entry.fhi)[PSN_BITS - 1],
        "flo": (psn - entry.flo_cur)[PSN_BITS - 1],
    }


class _SplitForwarding(_FlowForwarding):
    """Themis-D's forwarding registers with this block's flags, and what the item ahead did: ``arm_ahead`` (a NACK
    that armed provisionally), ``took_hi``/``took_lo`` and ``ftook_hi``/``ftook_lo`` (a data packet whose PSN became
    the bound's or the fresh bound's ``hi``/``lo_cur``), ``inst_ahead`` (a token that installed the fresh bound)."""

    def __init__(self, layout):
        super().__init__(layout)
        self.fl_base = {k: Signal(name=f"fl_base_{k}") for k in _KEYS}
        self.fl_ahead = {k: Signal(name=f"fl_ahead_{k}") for k in _KEYS}
        self.fl_arm = {k: Signal(name=f"fl_arm_{k}") for k in ("eq", "aft", "res", "half")}
        self.ftook_hi = Signal(name="ftook_hi_ahead")
        self.ftook_lo = Signal(name="ftook_lo_ahead")
        self.inst_ahead = Signal(name="inst_ahead")


class ThemisDSplit(ThemisD):
    """Destination-ToR Themis stage whose data path does not wait for NACK scans.

    Parameters
    ----------
    n_qps, queue_depth, n_paths, entry_bits : int
        As :class:`ThemisD`.
    slots : int
        NACKs outstanding at once (hazard slots, job and verdict FIFO depth), 1 to 64.
    rob : int
        Result FIFO entries (the reorder buffer: results wait there for the NACK placeholders ahead of them), 8 to
        65536.

    Members
    -------
    i, o, ctl, stats
        As :class:`ThemisD`.
    """

    #: Cycles from an item's acceptance to its result on ``o`` with nothing ahead of it: hazard register, input,
    #: residue, compare, RMW stages, the result register, the result FIFO (2 cycles, registered output) and the
    #: output register.
    latency = 9

    def __init__(self, *, n_qps=1600, queue_depth=100, n_paths=256, entry_bits=9, slots=16, rob=1024):
        for name, value, lo, hi in (("slots", slots, 1, 64), ("rob", rob, 8, 65536)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
            if not lo <= value <= hi:
                raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")
        self._slots = slots
        self._rob = rob
        super().__init__(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)

    @property
    def memory_bits(self):
        """Bits of state held in memories: the flow table (with the fresh bound) and the PSN queues."""
        return self._n_qps * (self._flow_entry_layout().size + self._queue_depth * self._entry_bits)

    def item_cycles(self, result):
        """Not predicted per item for this block (an item's wait in ``s0`` depends on the scans of NACKs ahead of
        it; docs/themis.md states the timing): :class:`ThemisD`'s prediction does not apply."""
        raise NotImplementedError("ThemisDSplit has no per-item cycle prediction")

    def elaborate(self, platform):
        """Compose the pipeline::

            i -> s0 (hazard) -> s1 (token | command | s0) -> s2 -> s3 -> s4 (RMW) -> result FIFO -> merge -> o
                                   ^                                  |  NACK: job               ^
                                   +----- token <---- scan engine <---+                verdict FIFO

        ``adv`` moves s1 to s4 (as in :class:`ThemisD`) whenever the result FIFO has room; only the hazard register
        ``s0`` ever holds an item.
        """
        m = Module()
        flow_rd, flow_wr, queues, psn_mod = self._memories(m)
        s1, s2, s3, s4 = self._stage_registers()
        for s in (s1, s2, s3, s4):
            name = s.valid.name[:2]
            s.token = Signal(name=f"{name}_token")
            s.tk = Signal(self._token_layout(), name=f"{name}_tk")
            s.cond = Signal(name=f"{name}_cond")
            s.slot = Signal(range(self._slots), name=f"{name}_slot")
        adv = Signal()
        # In RUN (``running``) the front advances whenever the result FIFO has room: ``adv`` is the register
        # ``can_out`` itself, which is only ever set in RUN (it stays low through the CLEAR sweep).
        self._running = Signal(name="front_in_run")
        result, produce, can_out, v_in, nack_left, out_slot = self._result_fifo_and_output(m, s4)
        m.d.comb += adv.eq(can_out)

        fw = _SplitForwarding(self._flow_entry_layout())
        fe, fl = self._forwarded_flow_entry(m, flow_rd, fw, s4)
        is_data, _ = self._decode_rmw_item(m, s4, fe)
        scan = _NackScan(queue_depth=self._queue_depth, n_paths=self._n_paths, entry_bits=self._entry_bits,
                         entry_layout=self._flow_entry_layout(), rd_data=queues.rd_data)
        eng = self._engine_registers()
        slot = self._hazard_slots(m, eng, nack_left)
        self._hazard_and_input_stages(m, adv, psn_mod, flow_rd, slot, eng, s1, s2, s3, s4)
        data_entry, cancel, comp, took = self._data_update(m, s4, fe, fl)
        nack_entry, armable = self._nack_update(m, s4, fe, fl)
        scan.distance_pipeline(m)
        scan.range_pipeline(m)
        token_entry = self._token_update(m, fe, s4.tk)
        self._compare_stage(m, adv, fw, s3, s4, armable, took, s4.tk)
        self._slot_capture(m, adv, s4, fe, armable, slot)
        m.d.comb += [
            queues.wr_base.eq(s4.base), queues.wr_pos.eq(fe.ring.tail),
            queues.wr_data.eq(s4.item.psn[:self._entry_bits]),
            queues.rd_base.eq(eng.base), queues.rd_pos.eq(scan.pos),
        ]
        m.d.comb += flow_wr.addr.eq(s4.item.qp)
        with m.FSM(init="CLEAR", name="front"):
            with m.State("CLEAR"):
                self._clear_flow_table(m, flow_wr)
            with m.State("RUN"):
                m.d.comb += [self._running.eq(1), eng.running.eq(1)]
                self._rmw_writes(m, adv, s4, flow_wr, queues, data_entry, nack_entry, token_entry)
                self._rmw_result(m, adv, s4, fe, result, produce, is_data, cancel, comp)
        wr_intent = Signal()
        m.d.comb += wr_intent.eq(Mux(s4.token, s4.tk.active, s4.setup | s4.teardown | s4.data | s4.nack))
        self._remember_flow_write(m, adv, flow_wr, wr_intent, s1, s2, s3, s4, fw)
        self._scan_engine(m, adv, s4, fe, scan, eng, slot, v_in, s1)
        self._token_stages(m, adv, eng, s1, s2, s3, s4)
        return m

    # -- flow entry, forwarding and the RMW stage's updates ----------------------------------------------------------

    def _flow_entry_layout(self):
        """Themis-D's flow entry plus the *fresh bound*: ``fpushed`` (data was pushed since the QP's last NACK) and
        ``fhi``, ``flo_cur``, ``flo_prev``, the PSN bound of those pushes alone (the golden model's bound if that
        NACK's scan empties the ring)."""
        return data.StructLayout({
            **FlowEntry(queue_depth=self._queue_depth, n_paths=self._n_paths).members,
            "fpushed": 1,
            "fhi": PSN_BITS,
            "flo_cur": PSN_BITS,
            "flo_prev": PSN_BITS,
        })

    def _forwarded_flow_entry(self, m, flow_rd, fw, s4):
        """As :meth:`ThemisD._forwarded_flow_entry`, with this block's flags: against the item just ahead, the
        flags come from its own entry (``fl_ahead``), from a NACK's provisional arming (``fl_arm``), from a data
        packet's PSN taken into the bound or the fresh bound (``fl_psn``), or, after a token that installed the
        fresh bound, from that bound's flags (``fl_ahead``'s ``fhi``/``flo``)."""
        if hasattr(flow_rd, "banks"):
            low = (FLOW_BANK - 1).bit_length()
            fw.rd_banks = [Signal.like(fw.rd_q, name=f"flow_rd_q{b}") for b in range(len(flow_rd.banks))]
            rd_bank = Signal(range(len(flow_rd.banks)), name="flow_rd_bank")
            fw.rd_sel = Signal(range(len(flow_rd.banks)), name="flow_rd_sel")
            with m.If(flow_rd.en):
                m.d.sync += [q.eq(d) for q, d in zip(fw.rd_banks, flow_rd.banks)]
                m.d.sync += [rd_bank.eq(flow_rd.addr[low:]), fw.rd_sel.eq(rd_bank)]
            m.d.comb += fw.rd_q.eq(_select(fw.rd_sel, fw.rd_banks))
        else:
            with m.If(flow_rd.en):
                m.d.sync += fw.rd_q.eq(flow_rd.data)
        fe = Signal(self._flow_entry_layout())
        m.d.comb += fe.eq(Mux(fw.fwd4, fw.last_wr, fw.base4))
        fl = {}
        for key in _KEYS:
            ahead = fw.fl_ahead[key]
            if key in ("eq", "aft", "res", "half"):
                ahead = Mux(fw.arm_ahead, fw.fl_arm[key], ahead)
            elif key == "hi":
                ahead = Mux(fw.took_hi, fw.fl_psn["hi"], Mux(fw.inst_ahead, fw.fl_ahead["fhi"], ahead))
            elif key == "lo":
                ahead = Mux(fw.took_lo, fw.fl_psn["lo"], Mux(fw.inst_ahead, fw.fl_ahead["flo"], ahead))
            elif key == "fhi":
                ahead = Mux(fw.ftook_hi, fw.fl_psn["hi"], ahead)
            else:
                ahead = Mux(fw.ftook_lo, fw.fl_psn["lo"], ahead)
            fl[key] = Signal(name=f"fl_{key}")
            m.d.comb += fl[key].eq(Mux(fw.fwd4, ahead, fw.fl_base[key]))
        return fe, fl

    def _compare_stage(self, m, adv, fw, s3, s4, armable, took, tok):
        """As :meth:`ThemisD._compare_stage`, with this block's flags; the values the item in ``s4`` can write are a
        NACK's provisional arming (its own PSN and residue), a data packet's PSN (bound and fresh bound) and a
        token's installed bound (``tok``: the token's registers in ``s4``)."""
        psn, res = s3.item.psn, s3.res
        src_last = _flags(fw.last_wr, psn, res)
        src_prev = _flags(fw.prev_wr, psn, res)
        if fw.rd_banks:
            per_bank = [_flags(q, psn, res) for q in fw.rd_banks]
            src_rd = {key: _select(fw.rd_sel, [flags[key] for flags in per_bank]) for key in _KEYS}
        else:
            src_rd = _flags(fw.rd_q, psn, res)
        src_base4 = _flags(fw.base4, psn, res)
        d_arm = (psn - s4.item.psn)[:PSN_BITS]
        with m.If(adv):
            m.d.sync += [
                fw.base4.eq(Mux(fw.fwd_new, fw.last_wr, Mux(fw.fwd_old, fw.prev_wr, fw.rd_q))),
                fw.arm_ahead.eq(s4.nack & armable),
                fw.took_hi.eq(s4.data & took["hi"]),
                fw.took_lo.eq(s4.data & took["lo"]),
                fw.ftook_hi.eq(s4.data & took["fhi"]),
                fw.ftook_lo.eq(s4.data & took["flo"]),
                fw.inst_ahead.eq(s4.token & tok.active & tok.install),
                fw.fl_arm["eq"].eq(psn == s4.item.psn),
                fw.fl_arm["aft"].eq(~d_arm[PSN_BITS - 1]),
                fw.fl_arm["res"].eq(res == s4.res),
                fw.fl_arm["half"].eq(psn == (s4.item.psn ^ (1 << (PSN_BITS - 1)))),
                fw.fl_psn["hi"].eq(~d_arm[PSN_BITS - 1]),
                fw.fl_psn["lo"].eq(d_arm[PSN_BITS - 1]),
            ]
            for key in _KEYS:
                m.d.sync += [
                    fw.fl_base[key].eq(Mux(fw.fwd_new, src_last[key], Mux(fw.fwd_old, src_prev[key], src_rd[key]))),
                    fw.fl_ahead[key].eq(Mux(fw.fwd4, src_last[key], src_base4[key])),
                ]

    def _data_update(self, m, s4, fe, fl):
        """:meth:`ThemisD._data_update`'s entry, and the fresh bound widened by the push the same way (restarted at
        the first push since the QP's last NACK). Returns the entry, ``cancel``, ``comp`` and the "PSN taken" bits
        ``took`` (``hi``, ``lo``, ``fhi``, ``flo``) the compare stage needs for the item behind."""
        data_entry, cancel, comp, took_hi, took_lo = super()._data_update(m, s4, fe, fl)
        psn = s4.item.psn
        fresh = ~fe.fpushed
        new_pass = fe.ring.tail == 0
        entry = Signal(self._flow_entry_layout())
        m.d.comb += [
            entry.eq(data_entry),
            # Not a constant: Icarus never runs a combinational process that reads no signal (it stays X).
            entry.fpushed.eq(s4.data),
            entry.fhi.eq(Mux(fresh | fl["fhi"], psn, fe.fhi)),
            entry.flo_cur.eq(Mux(fresh | new_pass | fl["flo"], psn, fe.flo_cur)),
            entry.flo_prev.eq(Mux(fresh, psn, Mux(new_pass, fe.flo_cur, fe.flo_prev))),
        ]
        took = {"hi": took_hi, "lo": took_lo, "fhi": fresh | fl["fhi"], "flo": fresh | new_pass | fl["flo"]}
        return entry, cancel, comp, took

    def _nack_update(self, m, s4, fe, fl):
        """A NACK's write at the RMW stage (combinational): the fresh bound restarted, and, when the entry is active
        and the NACK may change (BePSN, Valid) (Valid clear, or ePSN not before BePSN), the provisional arming.
        Returns the entry and ``armable``."""
        armable = Signal()
        m.d.comb += armable.eq(fe.active & (~fe.valid | fl["aft"] | fl["half"]))
        entry = Signal(self._flow_entry_layout())
        m.d.comb += [entry.eq(fe), entry.fpushed.eq(~s4.nack)]     # 0 when written (not a constant: Icarus)
        with m.If(armable):
            m.d.comb += [entry.valid.eq(1), entry.bepsn.eq(s4.item.psn), entry.bres.eq(s4.res),
                         entry.bmsn.eq(s4.item.msn)]
        return entry, armable

    def _rmw_writes(self, m, adv, s4, flow_wr, queues, data_entry, nack_entry, token_entry):
        """State RUN, the write half of the RMW stage: the entry written back by set-up (active and empty), tear-down
        (idle), a data packet, a NACK and an active token; a data packet's PSN pushed on its ring. The four item
        classes are exclusive registered bits, so the write data is an AND-OR of the candidates (no priority
        chain)."""
        m.d.comb += [
            flow_wr.data.as_value().eq(Mux(s4.setup, 1, 0) | Mux(s4.data, data_entry.as_value(), 0)
                                       | Mux(s4.nack, nack_entry.as_value(), 0)
                                       | Mux(s4.token, token_entry.as_value(), 0)),
            flow_wr.en.eq(adv & (s4.setup | s4.teardown | s4.data | s4.nack | (s4.token & s4.tk.active))),
            queues.wr_en.eq(adv & s4.data),
        ]

    def _token_update(self, m, fe, tok):
        """A token's write at the RMW stage (combinational): the QP's current entry with the ring the engine worked
        out, Valid cleared if the NACK may update and is not blocked, the fresh bound installed if the scan emptied
        the ring and data was pushed since."""
        entry = Signal(self._flow_entry_layout())
        m.d.comb += [
            entry.eq(fe),
            entry.ring.head.eq(tok.head), entry.ring.count.eq(tok.count),
            entry.valid.eq(fe.valid & ~tok.clear),
        ]
        with m.If(tok.install):
            m.d.comb += [entry.hi.eq(fe.fhi), entry.lo_cur.eq(fe.flo_cur), entry.lo_prev.eq(fe.flo_prev)]
        return entry

    # -- stages ------------------------------------------------------------------------------------------------------

    def _job_layout(self):
        return data.StructLayout({
            "item": ThemisDItem(n_qps=self._n_qps),
            "res":  residue_bits(self._n_paths),
            "base": range(max(2, self._n_qps * self._queue_depth)),
            "fe":   self._flow_entry_layout(),
        })

    def _verdict_layout(self):
        return data.StructLayout({
            "verdict": ThemisDVerdict, "drop": 1, "arm": 1,
            "scanned": self._queue_depth.bit_length(), "out_of_range": 1,
        })

    def _engine_registers(self):
        """The scan engine's own registers (``_NackScan`` holds the scan's): the QP and queue base of the NACK being
        scanned; ``token_req``, a token waits to enter ``s1``; ``running``, the front is out of its CLEAR sweep."""
        class _Eng:
            pass
        eng = _Eng()
        eng.qp = Signal(_bits(self._n_qps), name="eng_qp")
        eng.base = Signal(range(max(2, self._n_qps * self._queue_depth)), name="eng_base")
        eng.token_req = Signal(name="eng_token_req")
        eng.running = Signal(name="front_running")
        eng.sent = Signal(name="eng_token_sent")   # the token is in the front, the scan's results not bound yet
        eng.bind = Signal(name="eng_bind")
        Q = self._queue_depth
        eng.cn1 = Signal(range(Q + 1), name="eng_cn1")          # the ring's count at the NACK - n1
        eng.hn1 = Signal(range(max(2, Q)), name="eng_hn1")      # its head + n1, mod depth
        eng.emptied = Signal(name="eng_emptied")                # n1 is that count
        eng.tail0 = Signal(range(max(2, Q)), name="eng_tail0")  # its tail (the head once every entry is dequeued)
        return eng

    def _result_fifo_and_output(self, m, s4):
        """The result register and FIFO (``rob`` entries, block RAM read registered), the verdict FIFO (``slots``
        entries) and the output's two-entry skid buffer (head ``o.payload``), which takes the result FIFO's head and,
        for a NACK placeholder, merges the verdict FIFO's head; the statistics count what the skid buffer takes.

        A conditional data result (``cond``, with its NACK's ``slot``) whose NACK was not blocked is rewritten to
        plain ``DATA``: ``out_blocked`` holds, per slot, whether the last placeholder merged for it was blocked
        (placeholders take slots in order: ``out_slot`` counts them), and a NACK's placeholder leaves before every
        result conditional on it, and after every result conditional on the slot's previous NACK.

        ``can_out`` (registered) is high while the result register and FIFO have room for three more results, so
        ``adv`` never depends on ``o.ready``. Returns ``result``/``produce`` (driven by the RMW stage), ``can_out``,
        the verdict FIFO's input stream, ``nack_left`` (a placeholder's result was merged this cycle) and
        ``out_slot``."""
        res_layout = ThemisDResult(n_qps=self._n_qps, queue_depth=self._queue_depth)
        entry = data.StructLayout({"r": res_layout, "nack": 1, "cond": 1, "slot": self._slots})     # slot one-hot
        m.submodules.results = rf = StreamFIFO(shape=entry, depth=self._rob)
        m.submodules.verdicts = vf = StreamFIFO(shape=self._verdict_layout(), depth=self._slots)
        result = Signal(res_layout)
        produce = Signal()
        # The RMW stage's result is registered before the FIFO: the FIFO's bookkeeping then starts at registers.
        m.d.sync += [rf.i.valid.eq(produce), rf.i.payload.r.eq(result), rf.i.payload.nack.eq(s4.nack),
                     rf.i.payload.cond.eq(s4.cond), rf.i.payload.slot.eq(1 << s4.slot)]

        occ = Signal(range(self._rob + 1))
        can_out = Signal(name="can_out")       # reset to 0: set in RUN only (see ``elaborate``)
        head = rf.o.payload
        load = Signal()
        count = Signal(range(3), name="out_count")
        skid = Signal(res_layout, name="out_skid")
        m.d.comb += [
            load.eq((count <= 1) & rf.o.valid & (~head.nack | vf.o.valid)),
            rf.o.ready.eq(load),
            vf.o.ready.eq(load & head.nack),
            self.o.valid.eq(count != 0),
        ]
        occ_next = occ + produce - load     # counts the result register too
        m.d.sync += occ.eq(occ_next)
        with m.If(self._running):
            m.d.sync += can_out.eq(occ_next <= self._rob - 3)
        out_slot = Signal(range(self._slots), name="out_slot")
        out_blocked = Signal(self._slots, name="out_blocked")
        merged = Signal(res_layout)
        v = vf.o.payload
        rewrite = Signal(name="out_rewrite")        # a conditional data result whose NACK was not blocked
        m.d.comb += rewrite.eq(head.cond & ~(head.slot & out_blocked).any())
        m.d.comb += [
            merged.eq(head.r),
            merged.verdict.eq(Mux(head.nack, v.verdict, Mux(rewrite, ThemisDVerdict.DATA, head.r.verdict))),
            merged.comp.eq(head.r.comp & ~rewrite),
            merged.comp_psn.eq(Mux(rewrite, 0, head.r.comp_psn)),
            merged.comp_msn.eq(Mux(rewrite, 0, head.r.comp_msn)),
            merged.drop.eq(Mux(head.nack, v.drop, head.r.drop)),
            merged.arm.eq(Mux(head.nack, v.arm, head.r.arm)),
            merged.scanned.eq(Mux(head.nack, v.scanned, head.r.scanned)),
            merged.out_of_range.eq(Mux(head.nack, v.out_of_range, head.r.out_of_range)),
        ]
        with m.If(load & head.nack):
            m.d.sync += [out_slot.eq(Mux(out_slot == self._slots - 1, 0, out_slot + 1)),
                         out_blocked.bit_select(out_slot, 1).eq(v.verdict == ThemisDVerdict.NACK_BLOCKED)]
        pop = self.o.valid & self.o.ready
        with m.Switch(Cat(load, pop)):
            with m.Case(0b01):
                with m.If(count == 0):
                    m.d.sync += self.o.payload.eq(merged)
                with m.Else():
                    m.d.sync += skid.eq(merged)
                m.d.sync += count.eq(count + 1)
            with m.Case(0b10):
                m.d.sync += [self.o.payload.eq(skid), count.eq(count - 1)]
            with m.Case(0b11):      # count is 1 here (0 never pops, 2 never loads)
                m.d.sync += self.o.payload.eq(merged)
        # The statistics count a cycle later, from registers (the rewrite is deep enough).
        merged_q = Signal(res_layout, name="stat_item")
        load_q = Signal(name="stat_load")
        m.d.sync += [merged_q.eq(merged), load_q.eq(load)]
        self._statistics(m, merged_q, load_q)
        nack_left = Signal()
        m.d.comb += nack_left.eq(load & head.nack)
        return result, produce, can_out, vf.i, nack_left, out_slot

    def _hazard_slots(self, m, eng, nack_left):
        """Registers of the hazard slots: ``live`` and ``qp`` per slot, allocated in order the cycle after a NACK with
        a flow-table hit enters ``s1`` (``alloc``, from the register ``s1_nack_new``), freed in order as its token
        enters ``s1`` (``free``); ``outstanding`` counts NACKs from allocation until their result leaves the output.
        Per slot, for conditional data: ``known`` (the NACK has passed the RMW stage), ``room``, ``p``, ``tailk``,
        ``may`` (see the module docstring) and ``ok``, a data packet of the slot's QP may move on (``known``,
        ``room`` at least 1), each made from registers and the candidates for ``s0``'s move (``admit``). The caller
        drives ``alloc``, ``alloc_qp``, ``free``, ``admit``, ``cap``/``cap_*`` and ``rd_inc``."""
        class _Slots:
            pass
        k = self._slots
        Q = self._queue_depth
        slot = _Slots()
        slot.live = [Signal(name=f"slot{j}_live") for j in range(k)]
        slot.qp = [Signal(_bits(self._n_qps), name=f"slot{j}_qp") for j in range(k)]
        slot.known = [Signal(name=f"slot{j}_known") for j in range(k)]
        slot.ok = [Signal(name=f"slot{j}_ok") for j in range(k)]
        slot.live_n, slot.hold_in, slot.hold_stay = [], [], []     # after this cycle (see ``_hazard_slots``)
        slot.may = [Signal(name=f"slot{j}_may") for j in range(k)]
        slot.room = [Signal(range(Q + 2), name=f"slot{j}_room") for j in range(k)]
        slot.p = [Signal(range(Q + 1), name=f"slot{j}_pushes") for j in range(k)]     # saturating at Q
        slot.tailk = [Signal(range(max(2, Q)), name=f"slot{j}_tailk") for j in range(k)]
        slot.wr = Signal(range(k), name="slot_wr")
        slot.rd = Signal(range(k), name="slot_rd")
        slot.alloc = Signal()
        slot.alloc_at = [Signal(name=f"slot{j}_alloc") for j in range(k)]
        slot.alloc_qp = Signal(_bits(self._n_qps))
        slot.free = Signal()
        slot.admit = [Signal(name=f"slot{j}_admit") for j in range(k)]
        # The NACK that passed the RMW stage last cycle (slots are captured in order: ``cap_ptr``).
        slot.cap = Signal(name="slot_cap")
        slot.cap_ptr = Signal(range(k), name="slot_cap_ptr")
        slot.cap_room = Signal(range(Q + 2), name="slot_cap_room")
        slot.cap_ok = Signal(name="slot_cap_ok")
        slot.cap_ge2 = Signal(name="slot_cap_ge2")
        # ``room != 0`` and ``room >= 2`` kept in registers of their own, and ``rd`` one-hot: ``ok`` then starts at
        # registers only.
        slot.nz = [Signal(name=f"slot{j}_room_nz") for j in range(k)]
        slot.ge2 = [Signal(name=f"slot{j}_room_ge2") for j in range(k)]
        slot.rd_oh = Signal(k, init=1, name="slot_rd_onehot")
        slot.cap_tail = Signal(range(max(2, Q)), name="slot_cap_tail")
        slot.cap_may = Signal(name="slot_cap_may")
        slot.rd_inc = Signal()      # the engine issued a queue read (for slot ``rd``) the cycle before last
        slot.outstanding = Signal(range(k + 1))
        slot.any_live = Signal()
        m.d.sync += slot.outstanding.eq(slot.outstanding + slot.alloc - nack_left)
        # Live slots counted in a register of their own: ``any_live`` then comes from one register.
        n_live = Signal(range(k + 1), name="slots_live")
        m.d.sync += n_live.eq(n_live + slot.alloc - slot.free)
        m.d.comb += slot.any_live.eq(n_live != 0)
        with m.If(slot.cap):
            m.d.sync += slot.cap_ptr.eq(Mux(slot.cap_ptr == k - 1, 0, slot.cap_ptr + 1))
        for j in range(k):
            admit = slot.admit[j]
            inc = slot.rd_inc & slot.rd_oh[j]
            room = slot.room[j]
            nz = slot.nz[j]
            ge2 = slot.ge2[j]
            m.d.comb += slot.alloc_at[j].eq(slot.alloc & (slot.wr == j))
            live_n = Signal(name=f"slot{j}_live_next")
            # ``ok`` after this cycle if a data packet moves on under this slot (``ok_a``) and if not (``ok_b``).
            ok_a = Signal(name=f"slot{j}_ok_admit")
            ok_b = Signal(name=f"slot{j}_ok_stay")
            ok_n = Mux(admit, ok_a, ok_b)
            m.d.comb += [live_n.eq(slot.live[j]), ok_a.eq(slot.ok[j]), ok_b.eq(slot.ok[j])]
            m.d.sync += [slot.live[j].eq(live_n), slot.ok[j].eq(ok_n)]
            slot.live_n.append(live_n)
            # For s0's next item: a new one (``hold_in``: as if the item now in s0 moved on under this slot, which
            # errs on the side of waiting) or the same one (``hold_stay``: it did not move on).
            slot.hold_in.append(live_n & ~ok_a)
            slot.hold_stay.append(live_n & ~ok_b)
            with m.If(slot.alloc_at[j]):
                m.d.comb += [live_n.eq(1), ok_a.eq(0), ok_b.eq(0)]
                m.d.sync += [slot.qp[j].eq(slot.alloc_qp), slot.known[j].eq(0), slot.p[j].eq(0)]
            with m.Elif(slot.cap & (slot.cap_ptr == j)):
                m.d.comb += [ok_a.eq(slot.cap_ok), ok_b.eq(slot.cap_ok)]
                m.d.sync += [slot.nz[j].eq(slot.cap_ok), slot.ge2[j].eq(slot.cap_ge2)]
                m.d.sync += [slot.known[j].eq(1), slot.room[j].eq(slot.cap_room), slot.tailk[j].eq(slot.cap_tail),
                             slot.may[j].eq(slot.cap_may)]
            with m.Else():
                with m.If(slot.free & (slot.rd == j)):
                    m.d.comb += live_n.eq(0)
                # Candidates from registers; ``admit`` only chooses.
                known = slot.known[j]
                m.d.comb += [ok_a.eq(known & Mux(inc, nz, ge2)), ok_b.eq(known & (inc | nz))]
                m.d.sync += [
                    slot.room[j].eq(Mux(admit, Mux(inc, room, room - 1), Mux(inc, room + 1, room))),
                    slot.nz[j].eq(Mux(admit, Mux(inc, nz, ge2), inc | nz)),
                    slot.ge2[j].eq(Mux(admit, Mux(inc, ge2, room >= 3), Mux(inc, nz, ge2))),
                ]
                with m.If(admit):
                    m.d.sync += slot.tailk[j].eq(wrap_inc(slot.tailk[j], Q))
                    with m.If(slot.p[j] != Q):
                        m.d.sync += slot.p[j].eq(slot.p[j] + 1)
        with m.If(slot.alloc):
            m.d.sync += slot.wr.eq(Mux(slot.wr == k - 1, 0, slot.wr + 1))
        with m.If(slot.free):
            m.d.sync += [slot.rd.eq(Mux(slot.rd == k - 1, 0, slot.rd + 1)), slot.rd_oh.eq(slot.rd_oh.rotate_left(1))]
        return slot

    def _slot_capture(self, m, adv, s4, fe, armable, slot):
        """As a NACK with a flow-table hit passes the RMW stage, register what its slot needs (``cap_*``): the
        ring's tail, ``room`` = depth - count, and whether the NACK may update an active entry."""
        Q = self._queue_depth
        m.d.sync += [
            slot.cap.eq(adv & s4.nack),
            slot.cap_room.eq(Q - fe.ring.count), slot.cap_ok.eq(fe.ring.count != Q),
            slot.cap_ge2.eq(fe.ring.count <= Q - 2),
            slot.cap_tail.eq(fe.ring.tail), slot.cap_may.eq(armable),
        ]

    def _hazard_and_input_stages(self, m, adv, psn_mod, flow_rd, slot, eng, s1, s2, s3, s4):
        """The hazard register ``s0`` (takes ``i`` when empty or moving on) and the front's registers ``s1`` to
        ``s4`` (as ``ThemisD``'s ``_input_and_residue_stages``, with ``s1`` taking a token first, then a command,
        then ``s0``).

        ``s0`` holds a data packet of a pending QP while its slot is not ``ok``, a NACK of a pending QP, and a NACK
        while ``slots`` are outstanding. Its hold decision starts at registers only: ``s0_match`` holds, per slot,
        whether the slot's QP is ``s0``'s (made as ``s0`` loads, against the slot's QP as it will be after that
        edge); a NACK that has just entered ``s1`` and has no slot yet is compared directly (``s1_nack_new``). A
        data packet that moves on under a live slot carries the slot's number and ``cond`` (the slot's NACK may
        update: its result is conditional)."""
        qb = _bits(self._n_qps)
        k = self._slots
        s0_valid = Signal(name="s0_valid")
        s0_item = Signal(ThemisDItem(n_qps=self._n_qps), name="s0_item")
        s0_hit = Signal(name="s0_hit")
        s0_data = Signal(name="s0_data")        # data with a flow-table hit: pushes on its QP's ring
        s0_nack = Signal(name="s0_nack")
        s0_match = [Signal(name=f"s0_match{j}") for j in range(k)]
        s1_nack_new = Signal(name="s1_nack_new")
        m.d.comb += [slot.alloc.eq(s1_nack_new), slot.alloc_qp.eq(s1.item.qp)]
        full = Signal()
        m.d.comb += full.eq((slot.outstanding == k) | (s1_nack_new & (slot.outstanding == k - 1)))
        hits = [Signal(name=f"s0_pend{j}") for j in range(k)]
        m.d.comb += [h.eq(f & live) for h, f, live in zip(hits, s0_match, slot.live)]
        # A NACK that has just entered s1 (no slot yet) against the item loaded into s0 behind it, compared as it
        # loaded.
        s0_nm = Signal(name="s0_same_qp_as_s1")
        m.d.sync += s0_nm.eq(self.i.payload.qp == s0_item.qp)
        new_match = Signal()
        m.d.comb += new_match.eq(s1_nack_new & s0_nm)
        # Per slot, s0's item must wait for it (``s0_block``): a NACK of its QP while the slot is live, a data packet
        # of its QP while the slot is live and not ``ok``. Registered from the candidates for s0's next item, so the
        # hold decision is one OR.
        s0_block = [Signal(name=f"s0_block{j}") for j in range(k)]
        blocked = Signal()
        m.d.comb += blocked.eq(_any(s0_block) | ((s0_data | s0_nack) & new_match) | (s0_nack & full))
        ctl_go = Signal()
        s0_move = Signal()
        take = Signal()
        m.d.comb += [
            ctl_go.eq(adv & ~eng.token_req & self.ctl.valid & ~slot.any_live),
            s0_move.eq(adv & ~eng.token_req & ~(self.ctl.valid & ~slot.any_live) & s0_valid & ~blocked),
            self.ctl.ready.eq(ctl_go),
            take.eq(~s0_valid | s0_move),
            self.i.ready.eq(eng.running & take),
            psn_mod.i.eq(s0_item.psn),
            psn_mod.en.eq(adv),
        ]
        # The data packet in s0 moves on under slot j (``s0_move`` for a data packet with ``hits[j]``, at most one
        # j): written out from registers, so the slots' counters do not wait for the whole hold decision.
        go = Signal()
        m.d.comb += go.eq(adv & ~eng.token_req & ~(self.ctl.valid & ~slot.any_live) & s0_valid)
        for j in range(k):
            m.d.comb += slot.admit[j].eq(go & s0_data & hits[j] & ~s0_block[j] & ~new_match)
        s0_cond = Signal(name="s0_cond")
        s0_slot = Signal(range(k), name="s0_slot")
        m.d.comb += s0_cond.eq(_any([h & may for h, may in zip(hits, slot.may)]))
        # At most one live slot matches (one pending NACK per QP): its number is an OR of the one-hot hits.
        for b in range(len(s0_slot)):
            m.d.comb += s0_slot[b].eq(_any([hits[j] for j in range(k) if (j >> b) & 1] or [Const(0)]))
        kind = self.i.payload.kind
        hit = self.i.payload.qp_hit & (self.i.payload.qp < self._n_qps)
        new_qp = self.i.payload.qp
        nack_in = hit & (kind == PacketKind.NACK)
        data_in = hit & (kind == PacketKind.DATA)
        for j in range(k):
            # Both candidates are made from registers and the input; the load decision only chooses.
            match_in = Mux(slot.alloc_at[j], slot.alloc_qp == new_qp, slot.qp[j] == new_qp)
            match_stay = Mux(slot.alloc_at[j], slot.alloc_qp == s0_item.qp, s0_match[j])
            wait_in = Mux(nack_in, slot.live_n[j], data_in & slot.hold_in[j])
            wait_stay = Mux(s0_nack, slot.live_n[j], s0_data & slot.hold_stay[j])
            m.d.sync += [
                s0_match[j].eq(Mux(take, match_in, match_stay)),
                s0_block[j].eq(Mux(take, match_in & wait_in, match_stay & wait_stay)),
            ]
        m.d.sync += s1_nack_new.eq(adv & ~eng.token_req & ~ctl_go & s0_move & s0_nack)
        # s0 takes the input whenever it is empty or moving on (``take``; an item only if ``i.valid``): the input's
        # valid bit then gates only ``s0_valid``, not every register of s0.
        with m.If(take):
            m.d.sync += [
                s0_valid.eq(self.i.valid & eng.running), s0_item.eq(self.i.payload), s0_hit.eq(hit),
                s0_data.eq(hit & (kind == PacketKind.DATA)),
                s0_nack.eq(hit & (kind == PacketKind.NACK)),
            ]
        with m.If(adv):
            with m.If(eng.token_req):
                m.d.sync += [s1.valid.eq(1), s1.ctl.eq(1), s1.token.eq(1), s1.table.eq(0), s1.hit.eq(1),
                             s1.item.eq(0), s1.item.qp.eq(eng.qp), s1.cond.eq(0)]
            with m.Elif(ctl_go):
                m.d.sync += [
                    s1.valid.eq(1), s1.ctl.eq(1), s1.token.eq(0), s1.table.eq(self.ctl.payload.table),
                    s1.hit.eq(self.ctl.payload.index < self._n_qps),
                    s1.item.eq(0), s1.item.qp.eq(self.ctl.payload.index[:qb]), s1.cond.eq(0),
                ]
            with m.Else():
                m.d.sync += [s1.valid.eq(s0_move), s1.ctl.eq(0), s1.token.eq(0), s1.table.eq(0),
                             s1.hit.eq(s0_move & s0_hit), s1.item.eq(s0_item),
                             s1.cond.eq(s0_data & s0_cond), s1.slot.eq(s0_slot)]
            for key in ("valid", "ctl", "table", "hit", "item", "token", "cond", "slot"):
                m.d.sync += [getattr(s2, key).eq(getattr(s1, key)), getattr(s3, key).eq(getattr(s2, key)),
                             getattr(s4, key).eq(getattr(s3, key))]
            for key in ("res", "base", "nack", "data", "setup", "teardown"):
                m.d.sync += getattr(s4, key).eq(getattr(s3, key))
            packet = s2.valid & ~s2.ctl & s2.hit
            command = s2.valid & s2.ctl & ~s2.token & s2.hit
            m.d.sync += [
                s3.res.eq(psn_mod.o), s3.base.eq(ring_base(s2.item.qp, self._queue_depth)),
                s3.nack.eq(packet & (s2.item.kind == PacketKind.NACK)),
                s3.data.eq(packet & (s2.item.kind == PacketKind.DATA)),
                s3.setup.eq(command & (s2.table == 0)),
                s3.teardown.eq(command & (s2.table == 1)),
            ]
        m.d.comb += [flow_rd.addr.eq(Mux(s1.hit, s1.item.qp, 0)), flow_rd.en.eq(adv)]

    def _token_layout(self):
        """What a token carries through ``s1`` to ``s4`` (see ``_token_stages``)."""
        Q = self._queue_depth
        pos = range(max(2, Q))
        return data.StructLayout({
            "p": range(Q + 1), "tail": pos, "q_less_p": range(Q + 1), "pushed": 1,
            "late": 1, "active": 1, "clear": 1, "cn1": range(Q + 1), "hn1": pos, "emptied": 1,
            "head": pos, "count": range(Q + 1), "install": 1,
        })

    def _token_stages(self, m, adv, eng, s1, s2, s3, s4):
        """The token's write-back, worked out as it moves from ``s1`` to ``s4``.

        As it enters ``s1`` the token takes from its hazard slot ``p``, the pushes since the NACK (saturating at the
        depth), and ``tail``, the ring's tail now; ``s2`` adds ``q_less_p`` = depth - ``p`` and ``pushed``. What the
        scan decides (``active``; ``clear``, Valid is cleared: the NACK may update and is not blocked; ``cn1`` = the
        ring's count at the NACK ``c`` - ``n1``, the entries before tPSN; ``hn1``, the ring's head at the NACK +
        ``n1`` mod depth; ``emptied``, ``n1 == c``) is *bound* into the token by the engine (``eng.bind``) wherever
        the token is then: as it enters ``s1`` or, for a token sent ahead of its verdict (``late``), in ``s1`` or
        ``s2`` (the engine sends a token early only when the verdict comes within two cycles, so it is bound before
        it leaves ``s2``). The golden ring holds ``t = c - n1 + p`` entries from ``hn1`` when ``t`` < depth, else a
        full ring whose head is the tail: ``s4`` gets ``count`` and ``head`` (full when ``cn1 >= q_less_p``); the
        fresh bound is installed when the scan emptied the ring and data was pushed since (``install``)."""
        Q = self._queue_depth
        bind = eng.bind

        def bound(stage):
            return [getattr(stage.tk, key).eq(value) for key, value in eng.late.items()] + [stage.tk.late.eq(0)]
        at1 = bind & s1.token & s1.tk.late
        at2 = bind & s2.token & s2.tk.late
        full = Signal(name="s3_tk_full")
        m.d.comb += full.eq(s3.tk.cn1 >= s3.tk.q_less_p)
        with m.If(adv):
            m.d.sync += [s2.tk.eq(s1.tk), s3.tk.eq(s2.tk), s4.tk.eq(s3.tk)]
            m.d.sync += [
                s2.tk.q_less_p.eq(Q - s1.tk.p), s2.tk.pushed.eq(s1.tk.p != 0),
                s4.tk.count.eq(Mux(full, Q, s3.tk.cn1 + s3.tk.p)),
                s4.tk.head.eq(Mux(full, s3.tk.tail, s3.tk.hn1)),
                s4.tk.install.eq(s3.tk.emptied & s3.tk.pushed),
            ]
            with m.If(at1):
                m.d.sync += bound(s2)
            with m.If(at2):
                m.d.sync += bound(s3)
        with m.Else():
            with m.If(at1):
                m.d.sync += bound(s1)
            with m.If(at2):
                m.d.sync += bound(s2)

    def _scan_engine(self, m, adv, s4, fe, scan, eng, slot, v_in, s1):
        """The job register (written by the RMW stage for each NACK with a flow-table hit) and FIFO (written from the
        register unless the engine takes the job from it at once: ``direct``, when it is idle with no job queued;
        the scan then starts from registers), the scan and its token.

        IDLE (take a job: ``scan.start``) -> SCAN (``scan.step`` each cycle to the verdict, ``stop``) -> settled
        (``done``) -> IDLE once the scan's results are bound into the token (``bind``: the verdict goes to the
        verdict FIFO; for a token already in the front the engine is IDLE from the cycle the verdict settles, and the
        bind happens as it takes its next job). ``token_req`` asks for the token to enter ``s1`` (ahead of commands
        and ``s0``; its slot is freed as it enters): the cycle after ``stop``, or earlier, as soon as the verdict is
        certain to come within two cycles (``predict``): the last queue read has been issued and its entry has
        reached the ring memory's read register, or, tPSN found, an entry equal to ePSN is in that register or in
        the distance register (it decides NACK_LATE as it reaches the decision). Such a token enters ``s1`` at the
        earliest as the verdict settles (``sent`` until it is bound). The engine keeps ``cn1``, ``hn1`` and
        ``emptied`` up to date as the scan dequeues (``n1``), so the token can be bound the cycle after the
        verdict."""
        Q = self._queue_depth
        m.submodules.jobs = jf = StreamFIFO(shape=self._job_layout(), depth=self._slots)
        idle = Signal(init=1, name="eng_idle")
        direct = Signal()
        job_valid = Signal(name="job_valid")
        jobs = Signal(range(self._slots + 1), name="jobs_queued")
        jobs_none = Signal(init=1, name="jobs_none")
        jobs_wr = Signal()
        jobs_rd = Signal()
        m.d.comb += [direct.eq(idle & jobs_none & job_valid), jobs_wr.eq(job_valid & ~direct),
                     jobs_rd.eq(jf.o.valid & jf.o.ready), jf.i.valid.eq(jobs_wr)]
        m.d.sync += [jobs.eq(jobs + jobs_wr - jobs_rd),
                     jobs_none.eq(~jobs_wr & Mux(jobs_rd, jobs == 1, jobs_none))]
        m.d.sync += [
            job_valid.eq(adv & s4.nack), jf.i.payload.item.eq(s4.item), jf.i.payload.res.eq(s4.res),
            jf.i.payload.base.eq(s4.base), jf.i.payload.fe.eq(fe),
        ]
        verdict_word = Signal(ThemisDResult(n_qps=self._n_qps, queue_depth=self._queue_depth))
        dummy_item = Signal(ThemisDItem(n_qps=self._n_qps))
        self._nack_result(m, scan, dummy_item, verdict_word, Signal())
        scan.write_back_entry(m)        # registers ``may_update`` (the entry it returns is the old design's)
        rd = slot.rd
        scanning = Signal(name="eng_scan")
        busy = Signal(name="eng_busy")      # a job taken, its results not bound yet
        done = Signal(name="eng_done")      # the scan has settled; its results are not bound yet
        stop = Signal(name="eng_stop")
        enter = Signal(name="eng_token_enters")
        m.d.comb += [
            done.eq(busy & ~scanning),
            enter.eq(eng.token_req & adv),
            eng.bind.eq(done & (eng.sent | enter)),
        ]
        # The verdict is registered into the verdict FIFO as the token is bound (the FIFO's bookkeeping then starts
        # at registers).
        m.d.sync += v_in.valid.eq(eng.bind)
        with m.If(eng.bind):
            m.d.sync += [
                v_in.payload.verdict.eq(verdict_word.verdict), v_in.payload.drop.eq(verdict_word.drop),
                v_in.payload.arm.eq(verdict_word.arm), v_in.payload.scanned.eq(verdict_word.scanned),
                v_in.payload.out_of_range.eq(verdict_word.out_of_range),
            ]
        # Reads issued after the token entered belong to a freed slot (they are past the deciding entry).
        m.d.comb += slot.rd_inc.eq(scan.pending & ~eng.sent)
        eng.late = {
            "active": scan.active,
            "clear": scan.active & scan.may_update & (scan.verdict != ThemisDVerdict.NACK_BLOCKED),
            # Out of range, the scan dequeues every entry (``scan.oor``, registered with that verdict).
            "cn1": Mux(scan.oor, 0, eng.cn1), "hn1": Mux(scan.oor, eng.tail0, eng.hn1),
            "emptied": scan.oor | eng.emptied,
        }
        # What the token takes into ``s1`` (``_token_stages`` works out the rest on the way to the RMW stage).
        with m.If(enter):
            m.d.sync += [
                s1.tk.p.eq(Cat(*slot.p).word_select(rd, len(slot.p[0]))),
                s1.tk.tail.eq(Cat(*slot.tailk).word_select(rd, len(slot.tailk[0]))),
                s1.tk.late.eq(~eng.bind),
            ]
            m.d.sync += [getattr(s1.tk, key).eq(value) for key, value in eng.late.items()]

        # The engine is free for the next job once the scan's results are bound, or, for a token already in the
        # front, from the cycle its verdict settles (it is bound in the next, as the next job starts).
        with m.If(eng.bind | (scanning & stop & (eng.sent | enter))):
            m.d.sync += idle.eq(1)
        with m.If(eng.bind):
            m.d.sync += busy.eq(0)

        def start(job):
            scan.start(m, job.item, job.res, job.fe)
            ring = job.fe.ring
            m.d.sync += [eng.qp.eq(job.item.qp), eng.base.eq(job.base), idle.eq(0), busy.eq(1), scanning.eq(1),
                         eng.hn1.eq(ring.head), eng.cn1.eq(ring.count), eng.emptied.eq(ring.count == 0),
                         eng.tail0.eq(ring.tail)]
        with m.If(idle):
            m.d.comb += jf.o.ready.eq(1)
            with m.If(jf.o.valid):
                start(jf.o.payload)
        with m.If(direct):
            start(jf.i.payload)
        with m.If(scanning):
            m.d.comb += stop.eq(scan.step(m))
            with m.If(stop):
                m.d.sync += scanning.eq(0)
            # ``cn1``, ``hn1``, ``emptied`` follow ``n1`` as ``_NackScan.step`` adds an entry before tPSN (phase 1,
            # neither on ePSN's path nor after it).
            with m.If(scan.f_valid & ~scan.phase2 & ~scan.f_same & ~scan.f_after):
                m.d.sync += [eng.hn1.eq(wrap_inc(eng.hn1, Q)), eng.cn1.eq(eng.cn1 - 1), eng.emptied.eq(eng.cn1 == 1)]
        predict = Signal(name="eng_predict")
        m.d.comb += predict.eq(
            (scan.left_zero & ~scan.pending & ~scan.pending2 & ~scan.pending3)
            | (scan.phase2 & ((scan.x_valid & (scan.x == scan.e_t)) | (scan.d_valid & (scan.d == 0)))))
        m.d.sync += [
            eng.token_req.eq(Mux(eng.token_req, ~adv, scanning & (stop | predict) & ~eng.sent)),
            eng.sent.eq((eng.sent | enter) & ~eng.bind),
        ]
        m.d.comb += slot.free.eq(enter)


def _any(bits):
    """The OR of a list of 1-bit values."""
    out = bits[0]
    for b in bits[1:]:
        out = out | b
    return out
