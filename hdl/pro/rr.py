"""PRO orchestrated round-robin path scheduler, the sender side (PRO: sections III-A, V, Algorithm 1, Table I;
datasheet docs/pro_rr.md).

Per destination ToR an equivalent path set of ``m_paths`` = M paths, a counter ``C`` and the active count ``P``;
per QP its state (active, started, joined ToR, batch base path, position ``k`` in the batch). A packet of an active
QP at the start of a batch takes ``C`` (first packet) or ``base + span * n`` (mod M), span = ``P`` made coprime to
``M / n`` (odd for a power of two), and sets ``C = base + n``; packet ``k`` of a batch takes ``base + k``. The
PathID (12 bits, section V) comes from a per-ToR table.

Pipeline (one register stage per cycle, all moved by one ``adv``; latency 4)::

    S0 accept          S1                 S2 (compute, write back)            S3                 S4 (output)
    i or ctl --------> Q/T read data ---> forward (S3 / S4 results) --------> PathID read data -> o
    Q, T reads         forward matches    path, C, P, QP state; Q, T written  results            (hit gating)
                                          PathID read (or ctl write)

Q (per-QP state) and T (per-ToR C, P mod M/n) are read at S0 and written from S2's logic, so the two operations
ahead of one (at S3 and S4 when it computes) are forwarded from their result registers; the address matches are
computed at S1 and registered. Every memory output goes straight into a register. Control commands take a
pipeline slot (they win over packets), so a command applies between two packets in input order.

Choices where the paper is silent (all in the datasheet): span made coprime to M / n (odd when it is a power of
two, as in the paper); batches of ``n`` consecutive paths; ``C`` advances once per batch; misses (unknown QP or a
QP toward another ToR) are counted and get path 0, PathID 0, ``hit`` 0; a join of an active QP, a leave of an
inactive one or naming the wrong ToR are rejected and counted; every table keeps its contents across reset.
"""

import math

from amaranth import Array, C, Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS

__all__ = ["RoundRobin", "RRItem", "RRResult", "check_parameters", "PATH_ID_BITS", "TABLE_JOIN", "TABLE_LEAVE",
           "TABLE_SEED", "TABLE_PATH_ID", "N_STATS"]

#: PathID in the low 12 bits of the UDP source port (section V): low 6 bits ToR egress, high 6 bits Aggr egress.
PATH_ID_BITS = 12

TABLE_JOIN = 0      # index = qp, data[5:0] = destination ToR: the QP becomes active toward that ToR
TABLE_LEAVE = 1     # index = qp, data[5:0] = the ToR it joined: the QP stops being active
TABLE_SEED = 2      # index = ToR, data = initial counter C (< m_paths)
TABLE_PATH_ID = 3   # index = ToR << 6 | path, data[11:0] = PathID of that path of the ToR's equivalent path set
N_STATS = 3         # scheduled packets, missed packets, rejected commands


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_qps, n_tors, m_paths, batch):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_qps", n_qps), ("n_tors", n_tors), ("m_paths", m_paths), ("batch", batch)):
        check_int(name, value)
    if not 2 <= n_qps <= 1 << 20:
        raise ValueError(f"n_qps must be 2 to 1,048,576, not {n_qps}")
    if not 1 <= n_tors <= 64:
        raise ValueError(f"n_tors must be 1 to 64 (the PathID's 6-bit Aggr egress field), not {n_tors}")
    if not 1 <= m_paths <= 64:
        raise ValueError(f"m_paths must be 1 to 64 (the PathID's 6-bit ToR egress field), not {m_paths}")
    if not 1 <= batch <= m_paths or m_paths % batch:
        raise ValueError(f"batch must divide m_paths ({m_paths}), not {batch}")


def RRItem(*, n_qps=10240, n_tors=16):
    """One packet the QP scheduler sends: its QP and the QP's destination ToR."""
    return data.StructLayout({"kind": PacketKind, "qp": _bits(n_qps), "tor": _bits(n_tors), "tag": TAG_BITS})


def RRResult(*, m_paths=8):
    """The packet's path: ``hit`` (a QP active toward the item's ToR), index ``path`` in the ToR's equivalent path
    set and its ``path_id`` (0 and 0 on a miss)."""
    return data.StructLayout({"kind": PacketKind, "tag": TAG_BITS, "hit": 1, "path": _bits(m_paths),
                              "path_id": PATH_ID_BITS})


def _pow2(n):
    return n & (n - 1) == 0


def _below(value, limit):
    """``value < limit`` as a zero test of the high bits and a short compare of the low ones (no long carry
    chain across a 24- or 64-bit control field)."""
    b = (limit - 1).bit_length()
    high = value[b:] == 0 if len(value) > b else C(1, 1)
    if limit == 1 << b:
        return high
    return high & (value[:b] < limit)


def _span_table(m_paths, batch):
    """Per ``P mod (M / n)``: the batch base's step ``(span mod (M / n)) * n``, span the smallest value >= P
    coprime to M / n (the residue decides coprimality, so the table is indexed by it)."""
    slots = m_paths // batch
    out = []
    for r in range(slots):
        s = r
        while math.gcd(s, slots) != 1:
            s += 1
        out.append((s % slots) * batch)
    return out


def _qp_layout(n_qps, n_tors, m_paths, batch):
    fields = {"active": 1, "started": 1, "tor": _bits(n_tors), "base": _bits(m_paths)}
    if batch > 1:
        fields["k"] = _bits(batch)
    return data.StructLayout(fields)


def _tor_layout(m_paths, batch):
    return data.StructLayout({"c": _bits(m_paths), "pm": _bits(m_paths // batch)})


#: Depth of one RAMB18 in simple dual-port mode by data width: Q is split into banks of this depth, so every bank
#: is one block RAM whose output goes straight into its own register (no read mux between RAM and register).
def _bank_depth(width):
    for w, d in ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024), (36, 512)):
        if width <= w:
            return d
    return 512


class _Op:
    """What an S1..S4 stage register holds about its operation (plain Signals, named by stage)."""

    def __init__(self, name, item, qb, tb, pb):
        self.valid = Signal(name=f"{name}_valid")
        self.pkt = Signal(name=f"{name}_pkt")         # a packet (else a control command, when valid)
        self.qv = Signal(name=f"{name}_qv")           # addresses Q (qaddr in range)
        self.tv = Signal(name=f"{name}_tv")           # addresses T (taddr in range)
        self.qaddr = Signal(qb, name=f"{name}_qaddr")
        self.taddr = Signal(tb, name=f"{name}_taddr")
        # decoded at S1 (S1's own copies are the raw command fields)
        self.join = Signal(name=f"{name}_join")
        self.leave = Signal(name=f"{name}_leave")
        self.seed = Signal(name=f"{name}_seed")
        self.pid = Signal(name=f"{name}_pid")
        self.table = Signal(8, name=f"{name}_table", reset_less=True)
        self.arg_ok = Signal(name=f"{name}_arg_ok", reset_less=True)
        self.arg = Signal(max(pb, tb), name=f"{name}_arg", reset_less=True)      # ctl data: ToR or C
        self.ctor = Signal(tb, name=f"{name}_ctor", reset_less=True)             # the ToR the QP must have joined
        self.item = Signal(item, name=f"{name}_item", reset_less=True)

    _CARRIED = ("valid", "pkt", "qv", "tv", "qaddr", "taddr", "join", "leave", "seed", "pid", "table", "arg_ok",
                "arg", "ctor", "item")

    def carry(self, other, names=_CARRIED):
        return [getattr(self, n).eq(getattr(other, n)) for n in names]


class RoundRobin(wiring.Component):
    """Orchestrated round-robin path scheduler, one packet per clock.

    Parameters
    ----------
    n_qps : int
        QPs (QP index field ``qp``), 2 to 2**20.
    n_tors : int
        Destination ToRs (equivalent path sets; field ``tor``), 1 to 64.
    m_paths : int
        M, paths per equivalent path set, 1 to 64 (any value; see the datasheet for what a power of two buys).
    batch : int
        n, packets of a QP per scheduling batch; divides ``m_paths``.

    Members
    -------
    i : In(stream.Signature(RRItem(n_qps, n_tors)))
    o : Out(stream.Signature(RRResult(m_paths)))
    ctl : In(ControlSignature())
        Join, leave, seed, PathID (datasheet, "Control tables").
    stats : Out(32 * 3)
        Scheduled packets, missed packets, rejected commands (wrapping at 2**32; cleared by reset).
    """

    latency = 5

    def __init__(self, *, n_qps=10240, n_tors=16, m_paths=8, batch=1):
        check_parameters(n_qps=n_qps, n_tors=n_tors, m_paths=m_paths, batch=batch)
        self._n_qps, self._n_tors, self._m, self._n = n_qps, n_tors, m_paths, batch
        self._g = m_paths // batch
        self._qb, self._tb, self._pb = _bits(n_qps), _bits(n_tors), _bits(m_paths)
        self._qlay = _qp_layout(n_qps, n_tors, m_paths, batch)
        self._tlay = _tor_layout(m_paths, batch)
        depth = _bank_depth(self._qlay.size)
        self._bank_depth = min(depth, 1 << self._qb)
        self._n_banks = -(-n_qps // self._bank_depth)
        super().__init__({
            "i": In(stream.Signature(RRItem(n_qps=n_qps, n_tors=n_tors))),
            "o": Out(stream.Signature(RRResult(m_paths=m_paths))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """Bits held in memories: Q (per QP), T (per ToR), the PathID table (per ToR, 2**ceil(log2 M) rows)."""
        return (self._qlay.size * self._n_qps + self._tlay.size * self._n_tors
                + PATH_ID_BITS * self._n_tors * (1 << self._pb))

    def item_cycles(self, result):
        return 1

    def _addmod(self, a, b):
        """``(a + b) mod M`` for ``a, b < M``: the low bits for a power-of-two M, else one conditional subtract."""
        m, pb = self._m, self._pb
        if _pow2(m):
            return (a + b)[:pb]
        s = a + b
        return Mux(s >= m, s - m, s)[:pb]

    def elaborate(self, platform):
        """The datasheet's block diagram: memories, the reset sweep, S0 -> S1 -> ... -> S5, counters."""
        m = Module()
        banks, tmem, pmem = self._memories(m)
        adv = Signal()
        item = RRItem(n_qps=self._n_qps, n_tors=self._n_tors)
        s = {n: _Op(n, item, self._qb, self._tb, self._pb) for n in ("s1", "s2", "s3", "s4")}
        self._busy = Signal(init=1, name="sweep_busy")
        sweep = self._sweep(m)
        out_valid = Signal(name="s5_valid")
        m.d.comb += adv.eq(~out_valid | self.o.ready)
        self._accept_stage(m, adv, banks, tmem, pmem, s)
        fsel = self._decode_stage(m, adv, s)
        q3, t3 = self._bank_stage(m, adv, banks, tmem, s, fsel)
        res = self._compute_stage(m, adv, banks, tmem, pmem, s, q3, t3, sweep)
        self._output_stage(m, adv, pmem, s, res, out_valid)
        return m

    def _memories(self, m):
        """Q in banks (per-QP state), T (per ToR: C, P mod M/n), PathID (per ToR and path, power-on
        ``path | tor << 6``)."""
        banks = []
        for b in range(self._n_banks):
            depth = min(self._bank_depth, self._n_qps - b * self._bank_depth)
            q = memory.Memory(shape=self._qlay, depth=depth, init=[])
            m.submodules[f"q{b}"] = q
            banks.append((q.read_port(transparent_for=()), q.write_port()))
        t = memory.Memory(shape=self._tlay, depth=self._n_tors, init=[])
        rows = 1 << self._pb
        p = memory.Memory(shape=PATH_ID_BITS, depth=self._n_tors * rows,
                          init=[((a % rows) | (a // rows) << 6) & 0xFFF for a in range(self._n_tors * rows)])
        m.submodules.tmem, m.submodules.pathid = t, p
        return banks, (t.read_port(transparent_for=()), t.write_port()), (p.read_port(transparent_for=()),
                                                                            p.write_port())

    def _sweep(self, m):
        """After reset: clear Q and T, one entry of each a clock (max(n_qps, n_tors) clocks), inputs not ready.
        Returns the entry being cleared."""
        top = max(self._n_qps, self._n_tors) - 1
        addr = Signal(range(top + 1), init=top, name="sweep_addr")
        with m.If(self._busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += self._busy.eq(0)
        return addr

    # -- S0: accept --------------------------------------------------------------------------------------------------

    def _accept_stage(self, m, adv, banks, tmem, pmem, s):
        """S0: take a control command (first; it waits until no packet is in S1 to S3, the PathID readers, so its
        PathID write here is in order) or a packet; the Q and T addresses and their range checks; issue the Q
        (every bank) and T reads; write a PathID command's entry; load S1 with the raw command."""
        s1 = s["s1"]
        i, c = self.i.payload, self.ctl.payload
        quiet = ~self._busy & ~s1.valid & ~s["s2"].valid & ~s["s3"].valid
        take_c = self.ctl.valid & adv & quiet
        m.d.comb += [self.ctl.ready.eq(adv & quiet), self.i.ready.eq(adv & ~self._busy & ~self.ctl.valid)]
        # Decoded with ctl.valid, not with "a command is taken": when a command waits, nothing is taken at all.
        c_sel = self.ctl.valid
        is_join, is_leave = c.table == TABLE_JOIN, c.table == TABLE_LEAVE
        is_seed, is_pid = c.table == TABLE_SEED, c.table == TABLE_PATH_ID
        cidx_tor = c.index >> 6
        pid_ok = (_below(cidx_tor, self._n_tors) & _below(c.index[:6], self._m)
                  & _below(c.data, 1 << PATH_ID_BITS))
        qaddr = Mux(c_sel, c.index[:self._qb], i.qp)
        qv = Mux(c_sel, (is_join | is_leave) & _below(c.index, self._n_qps), _below(i.qp, self._n_qps))
        taddr = Mux(c_sel, Mux(is_seed, c.index[:self._tb], c.data[:self._tb]), i.tor)
        tv = Mux(c_sel, Mux(is_seed, _below(c.index, self._n_tors),
                            (is_join | is_leave) & _below(c.data, self._n_tors)),
                 _below(i.tor, self._n_tors))
        bank_addr = qaddr[:(self._bank_depth - 1).bit_length()] if self._bank_depth > 1 else C(0, 1)
        for rd, _ in banks:
            m.d.comb += [rd.addr.eq(bank_addr), rd.en.eq(adv)]
        trd, _ = tmem
        _, pwr = pmem
        m.d.comb += [trd.addr.eq(taddr), trd.en.eq(adv),
                     pwr.addr.eq(Cat(c.index[:self._pb], cidx_tor[:self._tb])), pwr.data.eq(c.data[:PATH_ID_BITS]),
                     pwr.en.eq(take_c & is_pid & pid_ok)]
        with m.If(adv):
            m.d.sync += [
                s1.valid.eq(Mux(c_sel, quiet, self.i.valid & ~self._busy)), s1.pkt.eq(~c_sel),
                s1.qv.eq(qv), s1.tv.eq(tv),
                s1.qaddr.eq(qaddr), s1.taddr.eq(taddr), s1.table.eq(c.table),
                s1.arg_ok.eq(Mux(is_seed, _below(c.data, self._m), pid_ok)),
                s1.arg.eq(c.data[:s1.arg.shape().width]), s1.item.eq(i),
            ]

    # -- S1: decode, forward matches ---------------------------------------------------------------------------------

    def _decode_stage(self, m, adv, s):
        """S1: decode the command (join, leave, seed, PathID: valid ones, in range) and the ToR the QP must have
        joined; compare S1's Q and T addresses with those of S2, S3 and S4 (the operations whose results the
        result registers R4, R5, R6 hold when S1 reaches S3). Loads S2 (S2 encodes the newest match)."""
        s1, s2, s3, s4 = s["s1"], s["s2"], s["s3"], s["s4"]
        cmd = s1.valid & ~s1.pkt
        fsel = {}
        # S1's qv and tv are the raw range checks; from S2 on they include valid.
        for which, v, addr in (("q", "qv", "qaddr"), ("t", "tv", "taddr")):
            hits = [s1.valid & getattr(s1, v) & getattr(o, v) & (getattr(s1, addr) == getattr(o, addr))
                    for o in (s2, s3, s4)]
            match = Signal(3, name=f"s2_{which}_match")
            with m.If(adv):
                m.d.sync += match.eq(Cat(*hits))
            fsel[which] = match
        with m.If(adv):
            m.d.sync += s2.carry(s1, ("valid", "pkt", "qaddr", "taddr", "arg", "item"))
            m.d.sync += [s2.qv.eq(s1.valid & s1.qv), s2.tv.eq(s1.valid & s1.tv)]
            m.d.sync += [
                s2.join.eq(cmd & (s1.table == TABLE_JOIN) & s1.qv & s1.tv),
                s2.leave.eq(cmd & (s1.table == TABLE_LEAVE) & s1.qv & s1.tv),
                s2.seed.eq(cmd & (s1.table == TABLE_SEED) & s1.tv & s1.arg_ok),
                s2.pid.eq(cmd & (s1.table == TABLE_PATH_ID) & s1.arg_ok),
                s2.ctor.eq(Mux(s1.pkt, s1.item.tor, s1.arg[:self._tb])),
            ]
        return fsel

    # -- S2: block RAM output registers, bank select -------------------------------------------------------------------

    def _bank_stage(self, m, adv, banks, tmem, s, fsel):
        """S2: each Q bank's read data and T's read data in their own registers (loaded at S1 -> S2, nothing in
        between); the forward select encoded (newest match first); the bank the address names selected into S3's
        register (zero while the reset sweep runs, so
        the sweep writes zeros). Returns S3's ``(q, t)`` registers."""
        s2, s3 = s["s2"], s["s3"]
        regs = [Signal(self._qlay, name=f"s2_q{b}") for b in range(len(banks))]
        t2 = Signal(self._tlay, name="s2_t")
        q3, t3 = Signal(self._qlay, name="s3_q_mem"), Signal(self._tlay, name="s3_t_mem")
        with m.If(adv):
            m.d.sync += [r.eq(rd.data) for r, (rd, _) in zip(regs, banks)]
            m.d.sync += t2.eq(tmem[0].data)
        shift = (self._bank_depth - 1).bit_length()
        bank = s2.qaddr >> shift
        pick = Array(regs)[bank] if len(regs) > 1 else regs[0]
        self._fsel3 = {k: Signal(2, name=f"s3_{k}_fwd") for k in fsel}
        with m.If(self._busy):
            m.d.sync += [q3.eq(0), t3.eq(0)]
        with m.Elif(adv):
            m.d.sync += [q3.eq(pick), t3.eq(t2)]
        with m.If(adv):
            # the newest match wins: R4 (the operation just ahead), then R5, then R6
            m.d.sync += [self._fsel3[k].eq(Mux(h[0], 1, Mux(h[1], 2, Mux(h[2], 3, 0)))) for k, h in fsel.items()]
            m.d.sync += s3.carry(s2)
        return q3, t3

    # -- S3: compute and write back ----------------------------------------------------------------------------------

    def _compute_stage(self, m, adv, banks, tmem, pmem, s, q3, t3, sweep):
        """S3: the current Q and T entries (the newest of the results R4, R5, R6 for the same entry, else the
        memory's); the packet's path, C and QP state, or the command's effect; write Q and T (every addressed entry,
        changed or not; zeros while the reset sweep runs). Loads R4 (and shifts R4 -> R5 ->
        R6) and S4."""
        s3, s4 = s["s3"], s["s4"]
        qlay, tlay = self._qlay, self._tlay
        res = [(Signal(qlay, name=f"r{n}_q"), Signal(tlay, name=f"r{n}_t")) for n in (4, 5, 6)]
        q, t = Signal(qlay), Signal(tlay)
        m.d.comb += [
            q.eq(Array([q3, res[0][0], res[1][0], res[2][0]])[self._fsel3["q"]]),
            t.eq(Array([t3, res[0][1], res[1][1], res[2][1]])[self._fsel3["t"]]),
        ]
        mm, n, g, pb = self._m, self._n, self._g, self._pb
        tor_ok = q.active & (q.tor == s3.ctor)
        hit = s3.valid & s3.pkt & s3.qv & s3.tv & tor_ok
        join_ok = s3.join & ~q.active
        leave_ok = s3.leave & tor_ok
        k = q.k if n > 1 else C(0, 1)
        first = k == 0
        steps = _span_table(mm, n)
        step = Array(C(v, pb) for v in steps)[t.pm] if g > 1 else C(0, pb)
        step_n = Array(C((v + n) % mm, pb) for v in steps)[t.pm] if g > 1 else C(n % mm, pb)
        nxt, nxt_c = Signal(pb), Signal(pb)
        m.d.comb += [nxt.eq(self._addmod(q.base, step)), nxt_c.eq(self._addmod(q.base, step_n))]
        c_n = self._addmod(t.c, C(n % mm, pb))
        cont = self._addmod(q.base, k) if n > 1 else q.base
        new_base = Mux(q.started, nxt, t.c)
        path = Mux(first, new_base, cont)
        new_c = Mux(q.started, nxt_c, c_n)
        pw = t.pm.shape().width
        pm_up = Mux(t.pm == g - 1, 0, t.pm + 1)[:pw] if g > 1 else t.pm
        pm_dn = Mux(t.pm == 0, g - 1, t.pm - 1)[:pw] if g > 1 else t.pm
        qn, tn = Signal(qlay), Signal(tlay)
        m.d.comb += [qn.eq(q), tn.eq(t)]
        with m.If(hit):
            m.d.comb += [qn.started.eq(1), qn.base.eq(Mux(first, new_base, q.base))]
            if n > 1:
                m.d.comb += qn.k.eq(Mux(k == n - 1, 0, k + 1))
            with m.If(first):
                m.d.comb += tn.c.eq(new_c)
        with m.If(join_ok):
            m.d.comb += [qn.active.eq(1), qn.started.eq(0), qn.tor.eq(s3.ctor), qn.base.eq(0), tn.pm.eq(pm_up)]
            if n > 1:
                m.d.comb += qn.k.eq(0)
        with m.If(leave_ok):
            m.d.comb += [qn.active.eq(0), tn.pm.eq(pm_dn)]
        with m.If(s3.seed):
            m.d.comb += tn.c.eq(s3.arg[:pb])
        twr = tmem[1]
        shift = (self._bank_depth - 1).bit_length()
        busy = self._busy
        waddr = Mux(busy, sweep, s3.qaddr)
        for b, (_, qwr) in enumerate(banks):
            mine = (waddr >> shift) == b if len(banks) > 1 else C(1, 1)
            m.d.comb += [qwr.addr.eq(waddr[:max(1, shift)] if shift else 0), qwr.data.eq(qn),
                         qwr.en.eq(mine & Mux(busy, sweep < self._n_qps, adv & s3.valid & s3.qv))]
        m.d.comb += [
            twr.addr.eq(Mux(busy, sweep, s3.taddr)), twr.data.eq(tn),
            twr.en.eq(Mux(busy, sweep < self._n_tors, adv & s3.valid & s3.tv)),
        ]
        flags = {n: Signal(name=f"s4_{n}") for n in ("hit", "scheduled", "missed", "rejected")}
        path4 = Signal(pb, name="s4_path")
        with m.If(adv):
            m.d.sync += [res[0][0].eq(qn), res[0][1].eq(tn), res[1][0].eq(res[0][0]), res[1][1].eq(res[0][1]),
                         res[2][0].eq(res[1][0]), res[2][1].eq(res[1][1])]
            m.d.sync += [
                flags["hit"].eq(hit), path4.eq(Mux(hit, path, 0)),
                flags["scheduled"].eq(hit), flags["missed"].eq(s3.valid & s3.pkt & ~hit),
                flags["rejected"].eq(s3.valid & ~s3.pkt & ~(join_ok | leave_ok | s3.seed | s3.pid)),
            ]
            m.d.sync += s4.carry(s3, ("valid", "pkt", "qv", "tv", "qaddr", "taddr", "item"))
        return flags, path4

    # -- S4 / S5: PathID and output ----------------------------------------------------------------------------------

    def _output_stage(self, m, adv, pmem, s, res, out_valid):
        """S4: the PathID read (registered address: the path, 0 on a miss, and the ToR); S5: the output register
        and the PathID read port's own data register, gated with ``hit``. The counters count S4's flags."""
        flags, path4 = res
        s4 = s["s4"]
        hit5, path5 = Signal(name="s5_hit"), Signal(self._pb, name="s5_path")
        pid5 = pmem[0].data
        kind5, tag5 = Signal(PacketKind, name="s5_kind"), Signal(TAG_BITS, name="s5_tag", reset_less=True)
        m.d.comb += [pmem[0].addr.eq(Cat(path4, s4.item.tor)), pmem[0].en.eq(adv)]
        with m.If(adv):
            m.d.sync += [hit5.eq(flags["hit"]), path5.eq(path4),
                         out_valid.eq(s4.valid & s4.pkt), kind5.eq(s4.item.kind), tag5.eq(s4.item.tag)]
        m.d.comb += [
            self.o.valid.eq(out_valid),
            self.o.payload.kind.eq(kind5), self.o.payload.tag.eq(tag5),
            self.o.payload.hit.eq(hit5), self.o.payload.path.eq(path5),
            self.o.payload.path_id.eq(Mux(hit5, pid5, 0)),
        ]
        # 32-bit counters in two 16-bit halves, the carry registered between them (short carry chains): the high
        # half catches up one clock later, long before a host can read it.
        # (S4's flags include valid.)
        words = []
        for name in ("scheduled", "missed", "rejected"):
            lo, hi, carry = Signal(16, name=f"{name}_lo"), Signal(16, name=f"{name}_hi"), Signal(name=f"{name}_c")
            m.d.sync += [carry.eq(0), hi.eq(hi + carry)]
            with m.If(adv):
                m.d.sync += Cat(lo, carry).eq(lo + flags[name])
            words.append(Cat(lo, hi))
        m.d.comb += self.stats.eq(Cat(*words))
