"""FLB destination edge switch: one-way-delay measurement and piggyback (FLB: section 3.1; datasheet
docs/flb_owd.md).

A packet that the source edge switch sampled carries its send stamp. At the destination edge switch the measured
one-way delay is ``owd = now - stamp`` (modulo ``2**time_bits``; the two switches' clocks need not agree), the
base delay of its (source edge, path) is the smallest ``owd`` seen, and the queueing delay reported is ``owd -
base``. The newest measurement toward each source edge waits in a per-edge slot until a packet going back to that
edge carries it (piggyback), once.

"Smallest" is modular: ``d = (owd - base) mod 2**time_bits``; ``d`` in the upper half (``d >= 2**(time_bits-1)``)
means ``owd`` is below the base, which then comes down to ``owd`` (delay 0). So the clocks' offset may take any
value; the queueing delay plus the clocks' drift since the base was set must stay below ``2**(time_bits-1)``.

Pipeline (one register stage per cycle, all moved by one ``adv``; latency 4)::

    A0 accept         A1                  A2                    A3                      A4 out
    i or ctl -------> owd; base, slot  -> d = owd - base,    -> delay (saturated);   -> o
    owd = now-stamp   read registered;    forwarded; take     base, slot written;     (A5, A6 kept for
    base/slot read    forwarding pre-     (base comes down)   reverse: the slot,      forwarding)
    ctl (drained)     computed                                forwarded

Read after write: the base table is read at A0 and written at A3, so the three operations ahead of a sample (at
A1, A2, A3 when it reads) are forwarded. Their ``owd``s are known early, so the differences ``owd_k - owd_j`` are
formed at A1 (for the two oldest, already selected by their registered ``take``) and only the newest one's ``take``
(registered the cycle before) picks at A2. The slot table is read at A0 and written at A3; a reverse packet takes
the newest of the slots written by the three operations ahead (A4, A5, A6 when it is at A3), else the memory's.

Choices where the paper is silent (all in the datasheet): modular base; saturation of the delay at
``2**delay_bits - 1``; piggyback policy "the newest measurement per source edge, sent at most once"; an item both
sampled and reverse, or naming an out-of-range edge or path, is rejected (``ok`` 0, nothing written, counted);
control commands wait for the pipeline to drain; FORGET of one (edge, path) and FORGET_ALL (a sweep) as the base
aging the control plane drives; reset sweeps both tables.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import below, check_int, ControlSignature
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS
from lbpipe.hdl.lib.stage import counter32

__all__ = ["Owd", "OwdItem", "OwdResult", "check_parameters", "TABLE_FORGET", "TABLE_FORGET_ALL", "N_STATS",
           "PATH_FIELD_BITS"]

TABLE_FORGET = 0        # index = edge << 4 | path: that base is forgotten (the next sample sets it)
TABLE_FORGET_ALL = 1    # any index and data: every base forgotten, every slot emptied (a sweep)
PATH_FIELD_BITS = 4     # the path's field in a FORGET command's index
N_STATS = 5             # samples, bases set, piggybacks sent, reverses with nothing to send, rejected items


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_edges, n_paths, time_bits, delay_bits):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_edges", n_edges), ("n_paths", n_paths), ("time_bits", time_bits),
                        ("delay_bits", delay_bits)):
        check_int(name, value)
    if not 1 <= n_edges <= 1024:
        raise ValueError(f"n_edges must be 1 to 1,024, not {n_edges}")
    if not 2 <= n_paths <= 1 << PATH_FIELD_BITS:
        raise ValueError(f"n_paths must be 2 to 16, not {n_paths}")
    if not 4 <= time_bits <= 32:
        raise ValueError(f"time_bits must be 4 to 32, not {time_bits}")
    if not 4 <= delay_bits <= time_bits:
        raise ValueError(f"delay_bits must be 4 to time_bits ({time_bits}), not {delay_bits}")


def OwdItem(*, n_edges=16, n_paths=8, time_bits=16):
    """One packet at the destination edge switch: ``sampled`` (it carries ``stamp``, the source edge switch's send
    tick, from source edge ``edge`` over ``path``), ``reverse`` (it leaves toward edge switch ``to_edge`` and can
    carry a measurement back), and the local timer's ``now``."""
    eb = _bits(n_edges)
    return data.StructLayout({"kind": PacketKind, "sampled": 1, "edge": eb, "path": _bits(n_paths),
                              "stamp": time_bits, "now": time_bits, "reverse": 1, "to_edge": eb, "tag": TAG_BITS})


def OwdResult(*, n_edges=16, n_paths=8, delay_bits=16):
    """The item's identity passed through; ``ok`` (0: rejected, nothing done); for a sample the queueing delay
    ``qdelay`` written for (edge, path) and ``base_set`` (the base was set: first sample, or it came down); for a
    reverse packet the piggyback to embed: ``pb_valid``, ``pb_path``, ``pb_delay``."""
    eb, pb = _bits(n_edges), _bits(n_paths)
    return data.StructLayout({"kind": PacketKind, "sampled": 1, "edge": eb, "path": pb, "reverse": 1,
                              "to_edge": eb, "tag": TAG_BITS, "ok": 1, "qdelay": delay_bits, "base_set": 1,
                              "pb_valid": 1, "pb_path": pb, "pb_delay": delay_bits})


class Owd(wiring.Component):
    """FLB one-way-delay measurement and piggyback at the destination edge switch, one packet per clock.

    Parameters
    ----------
    n_edges : int
        Edge switches (fields ``edge``, ``to_edge``), 1 to 1,024.
    n_paths : int
        Paths per source edge switch (field ``path``), 2 to 16.
    time_bits : int
        Width of ``stamp``, ``now`` and the stored base, in timer ticks, 4 to 32.
    delay_bits : int
        Width of a queueing delay (``qdelay``, ``pb_delay``), 4 to ``time_bits``; larger delays saturate.

    Members
    -------
    i : In(stream.Signature(OwdItem(...)))
    o : Out(stream.Signature(OwdResult(...)))
    ctl : In(ControlSignature())
        FORGET (table 0) and FORGET_ALL (table 1), datasheet "Control".
    stats : Out(32 * 5)
        Samples, bases set, piggybacks sent, reverses with nothing to send, rejected items (wrapping; reset clears).
    """

    latency = 4

    def __init__(self, *, n_edges=16, n_paths=8, time_bits=16, delay_bits=16):
        check_parameters(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
        self._ne, self._n, self._tb, self._db = n_edges, n_paths, time_bits, delay_bits
        self._eb, self._pb = _bits(n_edges), _bits(n_paths)
        self._item = OwdItem(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits)
        self._base = data.StructLayout({"valid": 1, "base": time_bits})
        self._slot = data.StructLayout({"fresh": 1, "path": self._pb, "delay": delay_bits})
        super().__init__({
            "i": In(stream.Signature(self._item)),
            "o": Out(stream.Signature(OwdResult(n_edges=n_edges, n_paths=n_paths, delay_bits=delay_bits))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """Bits held in memories: a base per (edge, path) slot, a piggyback slot per edge (power-of-two rows)."""
        rows = 1 << self._eb
        return rows * (1 << self._pb) * self._base.size + rows * self._slot.size

    def item_cycles(self, result):
        return 1

    def elaborate(self, platform):
        """The datasheet's block diagram: memories, sweep, A0 -> A1 -> A2 -> A3 -> A4 (A5, A6 kept for
        forwarding), counters."""
        m = Module()
        bmem = memory.Memory(shape=self._base, depth=(1 << self._eb) << self._pb, init=[])
        smem = memory.Memory(shape=self._slot, depth=1 << self._eb, init=[])
        m.submodules.bases, m.submodules.slots = bmem, smem
        ports = {"b": (bmem.read_port(transparent_for=()), bmem.write_port()),
                 "s": (smem.read_port(transparent_for=()), smem.write_port())}
        adv = Signal()
        st = self._registers()
        m.d.comb += adv.eq(~st[4]["valid"] | self.o.ready)
        sweep, busy = self._sweep(m)
        ctl_forget = self._accept_stage(m, adv, ports, st, busy)
        self._read_stage(m, adv, ports, st)
        self._delay_stage(m, adv, st)
        wr = self._write_stage(m, adv, st)
        self._write_ports(m, adv, ports, st, wr, sweep, busy, ctl_forget)
        self._output(m, st)
        self._counters(m, adv, st, wr)
        return m

    # -- registers ------------------------------------------------------------------------------------------------

    def _registers(self):
        """Per stage A1..A6: ``valid``, the item, ``s_ok``/``r_ok``/``ok``, and what each stage adds."""
        tb, db = self._tb, self._db
        st = {}
        for n in range(1, 7):
            st[n] = {"valid": Signal(name=f"a{n}_valid"), "s_ok": Signal(name=f"a{n}_s_ok"),
                     "r_ok": Signal(name=f"a{n}_r_ok"), "ok": Signal(name=f"a{n}_ok"),
                     "item": Signal(self._item, name=f"a{n}_item", reset_less=True),
                     "owd": Signal(tb, name=f"a{n}_owd", reset_less=True),
                     "take": Signal(name=f"a{n}_take"),
                     "slotw": Signal(self._slot, name=f"a{n}_slot_written", reset_less=True)}
        st[1].update(same=Signal(3, name="a1_same_entry"), rh=Signal(3, name="a1_slot_hits"))
        st[2].update(bmem=Signal(self._base, name="a2_base_mem"), smem=Signal(self._slot, name="a2_slot_mem"),
                     hit1=Signal(name="a2_hit1"), fwd=Signal(name="a2_fwd"),
                     dfwd=Signal(tb, name="a2_d_fwd"), d1=Signal(tb, name="a2_d1"),
                     rh=Signal(3, name="a2_slot_hits"))
        st[3].update(d=Signal(tb, name="a3_d"), smem=Signal(self._slot, name="a3_slot_mem"),
                     rh=Signal(3, name="a3_slot_hits"))
        st[4].update(qdelay=Signal(db, name="a4_qdelay"), pb=Signal(self._slot, name="a4_piggyback"))
        return st

    @staticmethod
    def _carry(m, src, dst, names=("valid", "s_ok", "r_ok", "ok", "item", "owd", "take", "slotw")):
        m.d.sync += [dst[n].eq(src[n]) for n in names]

    # -- stages ---------------------------------------------------------------------------------------------------

    def _sweep(self, m):
        """After reset and on FORGET_ALL: every base address (and so every slot row) cleared, one a clock, inputs
        not ready."""
        top = ((1 << self._eb) << self._pb) - 1
        self._busy = busy = Signal(init=1, name="sweep_busy")
        addr = Signal(range(top + 1), init=top, name="sweep_addr")
        self._sweep_start = Signal(name="sweep_start")
        with m.If(self._sweep_start):
            m.d.sync += [busy.eq(1), addr.eq(top)]
        with m.Elif(busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += busy.eq(0)
        return addr, busy

    def _accept_stage(self, m, adv, ports, st, busy):
        """A0: a control command once A1..A3 are empty (it waits, and holds ``i``, until then), else a packet: its
        op decoded and range-checked, ``owd = now - stamp`` formed, the base of (edge, path) and the slot of
        ``to_edge`` read; its (edge, path) and slot row compared with A1's, A2's and A3's operations (for the
        forwarding). Loads A1. A FORGET is registered and written the next clock, with ``i`` held for that
        clock too (so the next packet's read sees it); FORGET_ALL starts the sweep. Returns the FORGET write
        enable."""
        i, c, a1 = self.i.payload, self.ctl.payload, st[1]
        empty = ~st[1]["valid"] & ~st[2]["valid"] & ~st[3]["valid"]
        pending = Signal(name="forget_pending")     # a FORGET taken last clock writes this clock
        m.d.comb += [self.ctl.ready.eq(~busy & empty & ~pending),
                     self.i.ready.eq(adv & ~busy & ~self.ctl.valid & ~pending)]
        take_i = self.i.valid & self.i.ready
        take_c = self.ctl.valid & self.ctl.ready
        s_in = below(i.edge, self._ne) & below(i.path, self._n)
        r_in = below(i.to_edge, self._ne)
        s_ok = i.sampled & ~i.reverse & s_in
        r_ok = i.reverse & ~i.sampled & r_in
        ok = ~(i.sampled | i.reverse) | s_ok | r_ok
        brd, _ = ports["b"]
        srd, _ = ports["s"]
        m.d.comb += [brd.addr.eq(Cat(i.path, i.edge)), brd.en.eq(adv),
                     srd.addr.eq(i.to_edge), srd.en.eq(adv)]
        def same_entry(o):
            return s_ok & o["s_ok"] & (o["item"].edge == i.edge) & (o["item"].path == i.path)

        def writes_row(o):
            return r_ok & ((o["s_ok"] & (o["item"].edge == i.to_edge)) |
                           (o["r_ok"] & (o["item"].to_edge == i.to_edge)))

        with m.If(adv):
            m.d.sync += [a1["same"].eq(Cat(same_entry(st[n]) for n in (1, 2, 3))),
                         a1["rh"].eq(Cat(writes_row(st[n]) for n in (1, 2, 3)))]
            m.d.sync += [a1["valid"].eq(take_i), a1["s_ok"].eq(take_i & s_ok), a1["r_ok"].eq(take_i & r_ok),
                         a1["ok"].eq(ok), a1["item"].eq(i), a1["owd"].eq((i.now - i.stamp)[:self._tb]),
                         a1["take"].eq(0)]
        cedge = c.index >> PATH_FIELD_BITS
        cpath = c.index[:PATH_FIELD_BITS]
        self._forget_addr = Signal((self._eb + self._pb), name="forget_addr")
        forget = take_c & (c.table == TABLE_FORGET) & below(cedge, self._ne) & below(cpath, self._n)
        m.d.sync += [pending.eq(forget),
                     self._forget_addr.eq(Cat(cpath[:self._pb], cedge[:self._eb]))]
        m.d.comb += self._sweep_start.eq(take_c & (c.table == TABLE_FORGET_ALL))
        return pending

    def _read_stage(self, m, adv, ports, st):
        """A1: the memories' data registered as it leaves them; forwarding prepared against the operations in A2,
        A3, A4 (which will be in A3, A4, A5 when this one computes; A0 compared their (edge, path) and slot rows
        with this one's, ``same`` and ``rh``): ``hit1`` (A2 is a sample of the same (edge, path)) and ``d1 = owd -
        owd(A2)``; the newest of A3 and A4 that is a same-entry sample which set the base (``fwd``) and ``owd -
        its owd`` (``dfwd``). Loads A2."""
        a1, a2 = st[1], st[2]
        h3 = a1["same"][1] & st[3]["take"]
        h4 = a1["same"][2] & st[4]["take"]
        with m.If(adv):
            self._carry(m, a1, a2)
            m.d.sync += [a2["bmem"].eq(ports["b"][0].data), a2["smem"].eq(ports["s"][0].data),
                         a2["hit1"].eq(a1["same"][0]), a2["fwd"].eq(h3 | h4),
                         a2["d1"].eq(a1["owd"] - st[2]["owd"]),
                         a2["dfwd"].eq(a1["owd"] - Mux(h3, st[3]["owd"], st[4]["owd"])),
                         a2["rh"].eq(a1["rh"])]

    def _delay_stage(self, m, adv, st):
        """A2: ``d = owd - base`` against the base in force: A3's ``owd`` when A3 is a same-entry sample that set
        the base, else A1's choice (A4's or A5's ``owd`` now), else the memory's base; ``take`` (the base is set to
        ``owd``): the base was invalid (and nothing forwarded) or ``d`` is in the upper half. Loads A3."""
        a2, a3 = st[2], st[3]
        half = self._tb - 1
        newest = a2["hit1"] & st[3]["take"]
        dmem = Signal(self._tb, name="a2_d_mem")
        m.d.comb += dmem.eq(a2["owd"] - a2["bmem"].base)
        d = Signal(self._tb, name="a2_d")
        m.d.comb += d.eq(Mux(newest, a2["d1"], Mux(a2["fwd"], a2["dfwd"], dmem)))
        fwd_any = newest | a2["fwd"]
        take = d[half] | (~fwd_any & ~a2["bmem"].valid)
        with m.If(adv):
            self._carry(m, a2, a3)
            m.d.sync += [a3["d"].eq(d), a3["take"].eq(a2["s_ok"] & take), a3["smem"].eq(a2["smem"]),
                         a3["rh"].eq(a2["rh"])]

    def _write_stage(self, m, adv, st):
        """A3: a sample's delay (0 when it set the base, else ``d`` saturated to ``delay_bits``) and its slot
        ``(fresh, path, delay)``; a reverse's slot: the newest of the slots A4, A5, A6 wrote to its row, else the
        memory's; it leaves empty. Loads A4 (the output) and shifts A4 -> A5 -> A6. Returns the write data."""
        a3, a4 = st[3], st[4]
        db, tb = self._db, self._tb
        d = a3["d"]
        if db >= tb - 1:
            sat = d[:db]
        else:
            sat = Mux(d[db:tb - 1].any(), (1 << db) - 1, d[:db])
        delay = Signal(db, name="a3_delay")
        m.d.comb += delay.eq(Mux(a3["take"], 0, sat))
        rh = a3["rh"]
        seen = Signal(self._slot, name="a3_slot_seen")
        m.d.comb += seen.eq(Mux(rh[0], st[4]["slotw"], Mux(rh[1], st[5]["slotw"],
                                                          Mux(rh[2], st[6]["slotw"], a3["smem"]))))
        slotw = Signal(self._slot, name="a3_slot_write")
        with m.If(a3["s_ok"]):
            m.d.comb += [slotw.fresh.eq(1), slotw.path.eq(a3["item"].path), slotw.delay.eq(delay)]
        with m.Else():
            m.d.comb += [slotw.fresh.eq(0), slotw.path.eq(seen.path), slotw.delay.eq(seen.delay)]
        pb_valid = a3["r_ok"] & seen.fresh
        with m.If(adv):
            self._carry(m, a3, a4, ("valid", "s_ok", "r_ok", "ok", "item", "owd", "take"))
            m.d.sync += [a4["slotw"].eq(slotw), a4["qdelay"].eq(Mux(a3["s_ok"], delay, 0)),
                         a4["pb"].fresh.eq(pb_valid), a4["pb"].path.eq(Mux(pb_valid, seen.path, 0)),
                         a4["pb"].delay.eq(Mux(pb_valid, seen.delay, 0))]
            self._carry(m, st[4], st[5], ("slotw",))
            self._carry(m, st[5], st[6], ("slotw",))
        return {"slot": slotw, "pb_valid": pb_valid}

    def _write_ports(self, m, adv, ports, st, wr, sweep, busy, ctl_forget):
        """The memories' one write port each: the sweep, else a FORGET (pipeline drained), else A3's operation (a
        sample writes its base when it set it, and its slot; a reverse writes its slot empty). A3 writes only on
        ``adv`` (while the output stalls A3 holds its operation, which writes once, when it moves on)."""
        a3 = st[3]
        _, bwr = ports["b"]
        _, swr = ports["s"]
        a3_go = a3["valid"] & adv
        entry = Cat(a3["item"].path, a3["item"].edge)
        row = Mux(a3["s_ok"], a3["item"].edge, a3["item"].to_edge)
        with m.If(busy):
            m.d.comb += [bwr.addr.eq(sweep), bwr.data.eq(0), bwr.en.eq(1),
                         swr.addr.eq(sweep >> self._pb), swr.data.eq(0), swr.en.eq(1)]
        with m.Elif(ctl_forget):
            m.d.comb += [bwr.addr.eq(self._forget_addr), bwr.data.eq(0), bwr.en.eq(1)]
        with m.Else():
            m.d.comb += [bwr.addr.eq(entry), bwr.data.valid.eq(1), bwr.data.base.eq(a3["owd"]),
                         bwr.en.eq(a3_go & a3["take"]),
                         swr.addr.eq(row), swr.data.eq(wr["slot"]), swr.en.eq(a3_go & (a3["s_ok"] | a3["r_ok"]))]

    def _output(self, m, st):
        """``o`` from A4's registers."""
        a4, o = st[4], self.o.payload
        it = a4["item"]
        m.d.comb += [self.o.valid.eq(a4["valid"]),
                     o.kind.eq(it.kind), o.sampled.eq(it.sampled), o.edge.eq(it.edge), o.path.eq(it.path),
                     o.reverse.eq(it.reverse), o.to_edge.eq(it.to_edge), o.tag.eq(it.tag), o.ok.eq(a4["ok"]),
                     o.qdelay.eq(a4["qdelay"]), o.base_set.eq(a4["take"]),
                     o.pb_valid.eq(a4["pb"].fresh), o.pb_path.eq(a4["pb"].path), o.pb_delay.eq(a4["pb"].delay)]

    def _counters(self, m, adv, st, wr):
        """``stats``: samples, bases set, piggybacks sent, reverses with nothing to send, rejected items, counted as
        an item leaves A3 (``counter32``: the increment registered first)."""
        a3 = st[3]
        go = adv & a3["valid"]
        counts = [counter32(m, "n_samples", go & a3["s_ok"]),
                  counter32(m, "n_bases_set", go & a3["take"]),
                  counter32(m, "n_piggybacks", go & wr["pb_valid"]),
                  counter32(m, "n_reverse_empty", go & a3["r_ok"] & ~wr["pb_valid"]),
                  counter32(m, "n_rejected", go & ~a3["ok"])]
        m.d.comb += self.stats.eq(Cat(*counts))
