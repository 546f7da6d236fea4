"""PRO receiver: per-QP out-of-order window and loss recovery (PRO, paper 003: sections III-B, III-C, Algorithm 2,
Figure 4, Table I; datasheet docs/pro_ooo.md).

Per QP a record in block RAM (banks of 1,024): ``valid``, the head (``hb + padv``: the base and the last event's
advance), ``bm`` (``bitmap_len`` arrival bits, bit ``j`` = PSN ``head + j``), ``tr`` (tail offset: tail = head + tr
- 1), ``wnd``, and the NACK state of the head (``hnb``, ``cand``). One event per clock (a data packet, a QP timeout,
or a control command that creates or destroys a QP), back-to-back events of one QP included: S0 reads every bank,
S1 registers the outputs, S1b to S2b bring the record up to date with the events still in flight and decode the
PSN's offset from the head for every advance those events can make, S3 is the one-clock loop (datasheet,
"Pipeline").

Each event (the datasheet's rules, written again in the golden model):

1. record: ``d = psn - head`` (mod 2**24, signed). ``0 <= d < L``: the bit is set (accept; the tail grows) or was
   set (repeat, ``wnd += 1``). ``-L <= d < 0``: repeat. Further behind: *stale*; at or past ``head + L``: *beyond*;
   both only counted. A timeout halves ``wnd``.
2. head catch-up: the head passes at most two arrived PSNs per event (a 0/1/2 shift, no priority encoder).
3. NACK check (Algorithm 2's CheckAndSendNACK for the lowest missing PSN): the head, when missing, not NACKed yet
   and older than ``tail - wnd``, is NACKed once.

Steps 2 and 3 run on accepted packets, repeats and timeouts; a stale or beyond packet, an unknown QP and a non-data
item change nothing but a counter.

``head="context"`` (the memory goal of Table I): the record keeps only the low ``k = max(6, log2 L + 2)`` bits of the
head base; each event carries the QP context's expected PSN (``epsn``, possibly behind by up to ``2**k - 13``), and the
head base is rebuilt as the PSN with those low bits in ``[epsn - 12, epsn - 12 + 2**k)`` (datasheet, "Head from the
QP context"). An event with an event of its QP among the five ahead takes its head from those (their results, or the
base the nearest of them worked from) and ignores its ``epsn``.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, PSN_BITS, TAG_BITS

__all__ = ["Ooo", "OooItem", "OooResult", "OooRecord", "OooStored", "OooClass", "check_parameters", "TABLE_CREATE",
           "TABLE_DESTROY", "N_STATS", "HEADS", "DEFAULT_BITMAP_LEN", "resolve_bitmap_len",
           "head_low_bits", "CONTEXT_REACH"]

TABLE_CREATE = 0        # index = qp: data[23:0] first expected PSN, data[39:24] initial wnd (BDP / MTU)
TABLE_DESTROY = 1       # index = qp: the QP becomes unknown
N_STATS = 7             # accepted, repeated, timeouts, NACKs, stale, beyond, unknown QP
_PSN_MASK = (1 << PSN_BITS) - 1


class OooClass(enum.Enum, shape=3):
    """What an event was, as the output reports it."""
    OTHER   = 0     # not a data packet nor a timeout: passed, nothing changes
    ACCEPT  = 1
    REPEAT  = 2
    STALE   = 3     # more than the bitmap length behind the head
    BEYOND  = 4     # at or past head + bitmap length
    UNKNOWN = 5     # QP not created (or out of range)
    TIMEOUT = 6


HEADS = ("record", "context")
#: The bitmap length each mode takes when none (or 0) is given: context mode's 16 meets Table I's memory goal.
DEFAULT_BITMAP_LEN = {"record": 32, "context": 16}


def resolve_bitmap_len(bitmap_len, head):
    """``bitmap_len``, or the mode's default when it is None or 0."""
    return DEFAULT_BITMAP_LEN.get(head, 32) if bitmap_len is None or (type(bitmap_len) is int and bitmap_len == 0) \
        else bitmap_len


def check_parameters(*, n_qps, bitmap_len, head="record"):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with (``bitmap_len`` None or 0:
    the mode's default)."""
    if not isinstance(head, str):
        raise TypeError(f"head must be a string, not {head!r}")
    if head not in HEADS:
        raise ValueError(f"head must be 'record' or 'context', not {head!r}")
    bitmap_len = resolve_bitmap_len(bitmap_len, head)
    check_int("n_qps", n_qps)
    check_int("bitmap_len", bitmap_len)
    if not 2 <= n_qps <= 1 << 20:
        raise ValueError(f"n_qps must be 2 to 1,048,576, not {n_qps}")
    if bitmap_len not in (8, 16, 32, 64):
        raise ValueError(f"bitmap_len must be 8, 16, 32 or 64, not {bitmap_len}")
    if head == "context" and bitmap_len > 16:
        raise ValueError(f"head='context' takes bitmap_len 8 or 16, not {bitmap_len} (at 32 it misses the memory "
                         f"goal it exists for and maps 8 logic levels deep: use head='record')")


def _gate_difference(a, b):
    """``a - b`` modulo ``2**len(a)`` and its borrow out (the top bit), as gates: every borrow a flat OR of
    generate-and-propagate terms (two levels of logic, no ripple and no carry chain)."""
    n = len(a)
    gen = [~a[k] & b[k] for k in range(n)]           # bit k borrows
    prop = [~(a[k] ^ b[k]) for k in range(n)]        # bit k passes a borrow on

    def borrow_into(k):
        terms = [gen[j] & Cat(*prop[j + 1:k]).all() if j + 1 < k else gen[j] for j in range(k)]
        return Cat(*terms).any() if terms else Const(0, 1)
    return Cat(*(a[k] ^ b[k] ^ borrow_into(k) for k in range(n)), borrow_into(n))


def _qp_bits(n_qps):
    return max(1, (n_qps - 1).bit_length())


def _wnd_bits(bitmap_len):
    """wnd saturates at 2**(b+2) - 1 with b = log2(bitmap_len): a wnd of bitmap_len or more never NACKs anyway."""
    return bitmap_len.bit_length() + 1


def OooItem(*, n_qps=10240, head="record"):
    """One event: a packet (``kind``; DATA is handled, others pass) or, with ``timeout`` = 1, a QP timeout; with
    ``head="context"`` also ``epsn``, the expected PSN read from the QP context."""
    fields = {"kind": PacketKind, "timeout": 1, "qp": _qp_bits(n_qps), "psn": PSN_BITS}
    if head == "context":
        fields["epsn"] = PSN_BITS
    return data.StructLayout({**fields, "tag": TAG_BITS})


def OooResult(*, n_qps=10240, bitmap_len=32, head="record"):
    """One result per event: the NACK to send (if any) and the QP's window after the event (0 for an unknown QP);
    with ``head="context"`` also ``epsn`` (the head, to write back to the QP context) and ``epsn_we`` (the QP is
    known: write it)."""
    fields = {"kind": PacketKind, "tag": TAG_BITS, "qp": _qp_bits(n_qps), "cls": OooClass, "nack": 1,
              "nack_psn": PSN_BITS, "head": PSN_BITS, "tail": PSN_BITS, "wnd": _wnd_bits(bitmap_len), "nacked": 1}
    if head == "context":
        fields.update(epsn=PSN_BITS, epsn_we=1)
    return data.StructLayout(fields)


def head_low_bits(bitmap_len):
    """Low bits of the head base a context-mode record keeps: ``max(6, log2 bitmap_len + 2)``."""
    return max(6, bitmap_len.bit_length() + 1)


#: Context mode: how far the head base read from block RAM can be behind the event's head (five events not yet
#: written, two PSNs each, and the base's own pending advance of 2); the base is rebuilt in [epsn - 12, epsn - 12 +
#: 2**k).
CONTEXT_REACH = 12


def OooRecord(*, bitmap_len=32):
    """The per-QP record in block RAM. The head is ``hb + padv`` (the last advance is added by the next event, off
    the loop's critical path); the record's NACK is ``cand & (wnd + 1 < tr)`` (the comparison is made by whoever
    reads the record, so it too is off the loop's path); the head has been NACKed when ``hnb`` or that NACK."""
    ob = bitmap_len.bit_length()        # offsets 0 .. bitmap_len
    return data.StructLayout({"valid": 1, "hb": PSN_BITS, "padv": 2, "bm": bitmap_len, "tr": ob,
                              "wnd": _wnd_bits(bitmap_len), "hnb": 1, "cand": 1})


def OooStored(*, bitmap_len=32, head="record"):
    """What block RAM holds per QP: the record, or with ``head="context"`` the record with only the low
    ``log2 bitmap_len + 2`` bits of ``hb`` (``hbl``; the rest comes from the event's ``epsn``)."""
    if head == "record":
        return OooRecord(bitmap_len=bitmap_len)
    ob = bitmap_len.bit_length()
    return data.StructLayout({"valid": 1, "hbl": head_low_bits(bitmap_len), "padv": 2, "bm": bitmap_len, "tr": ob,
                              "wnd": _wnd_bits(bitmap_len), "hnb": 1, "cand": 1})


class Ooo(wiring.Component):
    """PRO's receiver window.

    Parameters
    ----------
    n_qps : int
        QP records (the ``qp`` field is the index an upstream QP classifier gives), 2 to 1,048,576.
    bitmap_len : int
        Arrival bits per QP (8, 16, 32 or 64): packets at or past head + bitmap_len are not recorded. None or 0:
        32 in record mode, 16 in context mode.
    head : str
        ``"record"`` (the record keeps the whole head) or ``"context"`` (the head's high bits come from the QP
        context's expected PSN on each event, ``epsn``; the record keeps ``log2 bitmap_len + 2`` low bits).

    Members
    -------
    i : In(stream.Signature(OooItem(n_qps)))
    o : Out(stream.Signature(OooResult(n_qps, bitmap_len)))
    ctl : In(ControlSignature())
        Table 0 creates (or re-creates) QP ``index``, table 1 destroys it (datasheet).
    stats : Out(32 * 7)
        Accepted, repeated, timeouts, NACKs, stale, beyond, unknown-QP events (wrapping at 2**32; cleared by reset).
    """

    #: Cycles from an event's acceptance to its result on ``o``.
    latency = 8

    def __init__(self, *, n_qps=10240, bitmap_len=None, head="record"):
        check_parameters(n_qps=n_qps, bitmap_len=bitmap_len, head=head)
        bitmap_len = resolve_bitmap_len(bitmap_len, head)
        self._ctx = head == "context"
        self._head = head
        self._store = OooStored(bitmap_len=bitmap_len, head=head)
        self._n = n_qps
        self._L = bitmap_len
        self._b = bitmap_len.bit_length() - 1
        self._qb = _qp_bits(n_qps)
        self._wb = _wnd_bits(bitmap_len)
        self._rec = OooRecord(bitmap_len=bitmap_len)
        super().__init__({
            "i": In(stream.Signature(OooItem(n_qps=n_qps, head=head))),
            "o": Out(stream.Signature(OooResult(n_qps=n_qps, bitmap_len=bitmap_len, head=head))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def record_bits(self):
        """Bits per QP in block RAM."""
        return self._store.size

    @property
    def memory_bits(self):
        """Bits held in block RAM: one record per QP."""
        return self._n * self._store.size

    def _event_layout(self):
        return data.StructLayout({"item": OooItem(n_qps=self._n, head=self._head), "ctl": 1, "create": 1,
                                  "cpsn": PSN_BITS,
                                  "cwnd": self._wb, "inr": 1})

    def elaborate(self, platform):
        """S0 accept, read -> S1 hazards -> S2a freshest copy but the two events ahead, ``psn - head`` -> S2b
        offsets for every advance the events ahead can make -> S3 the step (the loop), write back -> S4 the
        result -> ``o``. A reset sweeps the records to unknown first (inputs not ready)."""
        m = Module()
        banks = self._banks(m)
        adv = Signal()
        m.d.comb += adv.eq(~self.o.valid | self.o.ready)
        ev = {n: Signal(self._event_layout(), name=n) for n in ("s1", "s1b", "s2a", "s2b", "s3", "s4")}
        v = {n: Signal(name=f"{n}_valid") for n in ev}
        r = self._result_registers()
        sweeping, sidx = self._sweep(m)
        self._accept(m, adv, sweeping, banks, ev, v)
        hz = self._hazards(m, adv, ev, v, r)
        older = self._older(m, adv, banks, ev, r, hz)
        pa, dd = self._freshest(m, adv, older, ev, r, hz)
        fl = self._offsets(m, adv, ev, r, hz, pa, dd)
        step = self._step(m, ev["s3"], r, hz, fl)
        self._write_back(m, adv, sweeping, sidx, banks, ev, v, r, step)
        self._output(m, adv, ev, v, r)
        return m

    _BANK = 1024

    def _banks(self, m):
        """The records in banks of 1,024 (one block-RAM depth, so no read multiplexer inside a bank): every bank
        is read, its output registered, and S1b picks the bank after the registers."""
        banks = []
        for k in range((self._n + self._BANK - 1) // self._BANK):
            depth = min(self._BANK, self._n - k * self._BANK)
            mem = memory.Memory(shape=self._store, depth=depth, init=[])
            m.submodules[f"records{k}"] = mem
            banks.append((mem.read_port(), mem.write_port(), depth))
        return banks

    def _result_registers(self):
        rec = self._rec
        return dict(r1=Signal(rec, name="r1"), r2=Signal(rec, name="r2"), r1_acc=Signal(name="r1_acc"),
                    r1_v=Signal(name="r1_valid"), r1_qp=Signal(self._qb, name="r1_qp"), r2_acc=Signal(name="r2_acc"),
                    cls=Signal(OooClass, name="s4_cls"), known=Signal(name="s4_known"))

    # -- S0: accept --------------------------------------------------------------------------------------------------

    def _accept(self, m, adv, sweeping, banks, ev, v):
        """S0: a control command goes first and holds the item input until it has been written (so no event
        follows a record the command rewrites); the record of the event's QP is read; the event registers move
        one stage per advance."""
        busy = Signal()
        m.d.comb += busy.eq(Cat(*(v[n] & ev[n].ctl for n in ("s1", "s1b", "s2a", "s2b", "s3"))).any())
        take_ctl, take_i = Signal(), Signal()
        m.d.comb += [
            take_ctl.eq(adv & ~sweeping & ~busy),
            take_i.eq(adv & ~sweeping & ~busy & ~self.ctl.valid),
            self.ctl.ready.eq(take_ctl),
            self.i.ready.eq(take_i),
        ]
        c, i = self.ctl.payload, self.i.payload
        use_ctl = self.ctl.valid
        qp = Mux(use_ctl, c.index[:self._qb], i.qp)
        for rd, _, depth in banks:
            m.d.comb += [rd.addr.eq(qp[:max(1, (depth - 1).bit_length())]), rd.en.eq(adv)]
        wmax = (1 << self._wb) - 1
        cw = c.data[24:40]
        s1 = ev["s1"]
        with m.If(adv):
            m.d.sync += [
                v["s1"].eq((self.ctl.valid & take_ctl & ((c.table == TABLE_CREATE) | (c.table == TABLE_DESTROY)))
                           | (self.i.valid & take_i)),
                s1.ctl.eq(use_ctl),
                s1.create.eq(c.table == TABLE_CREATE),
                s1.cpsn.eq(c.data[:PSN_BITS]),
                s1.cwnd.eq(Mux(cw > wmax, wmax, cw)),
                s1.inr.eq(Mux(use_ctl, c.index < self._n, i.qp < self._n)),
                s1.item.eq(i),
                s1.item.qp.eq(qp),
            ]
            for a, b in (("s1b", "s1"), ("s2a", "s1b"), ("s2b", "s2a"), ("s3", "s2b"), ("s4", "s3")):
                m.d.sync += [v[a].eq(v[b]), ev[a].eq(ev[b])]

    # -- S1: hazards --------------------------------------------------------------------------------------------------

    def _hazards(self, m, adv, ev, v, r):
        """S1: which of the five events ahead (now in S1b, S2a, S2b, S3 and the result register) are of the same
        QP, and whether the two nearest carry the same PSN; registered and carried along."""
        s1 = ev["s1"]

        def same(n):
            return v[n] & ev[n].inr & (ev[n].item.qp == s1.item.qp) & ~s1.ctl
        keys = ("h1", "h2", "h3", "h4", "h5", "e1", "e2")
        hz = {n: {k: Signal(name=f"{n}_{k}") for k in keys} for n in ("s1b", "s2a", "s2b", "s3")}
        with m.If(adv):
            m.d.sync += [
                hz["s1b"]["h1"].eq(same("s1b")), hz["s1b"]["h2"].eq(same("s2a")), hz["s1b"]["h3"].eq(same("s2b")),
                hz["s1b"]["h4"].eq(same("s3")),
                hz["s1b"]["h5"].eq(r["r1_v"] & (r["r1_qp"] == s1.item.qp) & ~s1.ctl),
                hz["s1b"]["e1"].eq(s1.item.psn == ev["s1b"].item.psn),
                hz["s1b"]["e2"].eq(s1.item.psn == ev["s2a"].item.psn),
            ]
            for a, b in (("s2a", "s1b"), ("s2b", "s2a"), ("s3", "s2b")):
                m.d.sync += [hz[a][k].eq(hz[b][k]) for k in keys]
        if self._ctx:
            # the two candidates for hb's high bits, from E = epsn - 12 (one constant addition each, no chain of two)
            k = head_low_bits(self._L)
            epsn = s1.item.epsn
            hz["ctx"] = dict(elo=Signal(k, name="ctx_elo"), ehi0=Signal(PSN_BITS - k, name="ctx_ehi0"),
                             ehi1=Signal(PSN_BITS - k, name="ctx_ehi1"))
            e0, e1 = Signal(PSN_BITS), Signal(PSN_BITS)
            m.d.comb += [e0.eq(epsn - CONTEXT_REACH), e1.eq(epsn + (1 << k) - CONTEXT_REACH)]
            with m.If(adv):
                m.d.sync += [hz["ctx"]["elo"].eq(e0[:k]), hz["ctx"]["ehi0"].eq(e0[k:]), hz["ctx"]["ehi1"].eq(e1[k:])]
        return hz

    # -- S1b: the bank, the events four and five ahead -----------------------------------------------------------------

    def _older(self, m, adv, banks, ev, r, hz):
        """S1 registers every bank's output (nothing between a block RAM and its register); S1b picks the QP's bank
        and the results of the events four and five ahead (``r1``, ``r2`` now), which the read missed."""
        memregs = [Signal(self._store, name=f"memreg{k}") for k in range(len(banks))]
        with m.If(adv):
            m.d.sync += [mr.eq(rd.data) for mr, (rd, _, _) in zip(memregs, banks)]
        bank = ev["s1b"].item.qp >> (self._BANK.bit_length() - 1)
        stored = Signal(self._store, name="bank_data")
        if len(memregs) == 1:
            m.d.comb += stored.eq(memregs[0])
        else:
            m.d.comb += stored.eq(Array(memregs)[bank])
        picked = self._rebuild_head(m, adv, stored, hz) if self._ctx else stored
        h = hz["s1b"]
        older = Signal(self._rec, name="older")
        with m.If(adv):
            m.d.sync += older.eq(Mux(h["h4"], r["r1"], Mux(h["h5"], r["r2"], picked)))
            if self._ctx:
                # read from block RAM, and an event of the QP one or two ahead: its base, not this event's epsn
                mem = ~h["h3"] & ~h["h4"] & ~h["h5"]
                m.d.sync += [self._wrap["sel"].eq(~h["h4"] & ~h["h5"] & self._wrap["c"]),
                             self._wrap["sub1"].eq(mem & h["h1"]), self._wrap["sub2"].eq(mem & ~h["h1"] & h["h2"])]
        return older

    def _rebuild_head(self, m, adv, stored, hz):
        """Context mode, S1b: ``hb`` is the PSN with the stored low bits ``hbl`` in ``[E, E + 2**k)``,
        ``E = epsn - 12``: ``E``'s high bits, plus one when ``hbl`` is below ``E``'s low bits. The comparison comes
        after the bank pick, so the choice is registered (``wrap_sel``) and made in S2a; here the high bits are
        ``E``'s."""
        ctx = hz["ctx"]
        full = Signal(self._rec, name="rebuilt")
        self._wrap = dict(c=Signal(name="wrap_c"), sel=Signal(name="wrap_sel"), sub1=Signal(name="inherit1"),
                          sub2=Signal(name="inherit2"),
                          ehi1=Signal(PSN_BITS - head_low_bits(self._L), name="wrap_ehi1"))
        m.d.comb += [
            self._wrap["c"].eq(stored.hbl < ctx["elo"]),
            full.valid.eq(stored.valid), full.hb.eq(Cat(stored.hbl, ctx["ehi0"])),
            full.padv.eq(stored.padv), full.bm.eq(stored.bm), full.tr.eq(stored.tr), full.wnd.eq(stored.wnd),
            full.hnb.eq(stored.hnb), full.cand.eq(stored.cand),
        ]
        with m.If(adv):
            m.d.sync += self._wrap["ehi1"].eq(ctx["ehi1"])
        return full

    # -- S2a: the freshest copy but the two events ahead ---------------------------------------------------------------

    def _freshest(self, m, adv, older, ev, r, hz):
        """S2a: the record as the events three and more ahead left it (the result register holds the one three
        ahead, ``older`` the rest), and ``D = psn - hb`` against it, in two parts that share no logic: the low
        bits ``dlo`` (and their borrow) as gates, the high bits ``ehi`` (without that borrow) as a carry chain."""
        h = hz["s2a"]
        x = Signal(self._rec, name="x")
        pa = Signal(self._rec, name="pa")
        if self._ctx:
            # The base's high bits: E's or one more (the choice registered in S1b); but when an event of the QP is
            # one or two ahead, the base that event worked from (its x, now in pa or carried to S3): the record
            # read is the same, so only the first event of a run uses its epsn (datasheet).
            k = head_low_bits(self._L)
            xb3 = Signal(PSN_BITS - k, name="x_base_s3")
            with m.If(adv):
                m.d.sync += xb3.eq(pa.hb[k:])
            src = Signal(self._rec, name="older_rebuilt")
            w = self._wrap
            m.d.comb += [src.eq(older), src.hb[k:].eq(Mux(w["sub1"], pa.hb[k:], Mux(w["sub2"], xb3,
                                                                                   Mux(w["sel"], w["ehi1"],
                                                                                       older.hb[k:]))))]
            older = src
        m.d.comb += x.eq(Mux(h["h3"], r["r1"], older))
        nb = self._b + 2
        psn = ev["s2a"].item.psn
        # D's low bits depend only on the low bits of psn and hb: their decodes are tables registered here. The
        # difference is written as gates and the high part does not include it: ABC (abc9) sees through carry
        # chains, and when the tables could read the low sum bits of a full 24-bit subtraction it mapped them
        # there, then a chain of LUTs (7 levels at 1,024 or 10,240 QPs, depending on the run); a ripple borrow
        # written as gates was mapped as a 7-level chain at 4,096, so each borrow is a flat sum of products.
        dlo_c = Signal(nb, name="dlo_c")
        bor_c = Signal(name="dlo_borrow_c")
        if self._ctx:
            # the same difference taken from both sources, then picked (abc9 mapped the pick-first form of context
            # mode 7 levels deep from older to oh0 in the AXI4-Lite top)
            m.d.comb += Cat(dlo_c, bor_c).eq(Mux(h["h3"], _gate_difference(psn[:nb], r["r1"].hb[:nb]),
                                                 _gate_difference(psn[:nb], older.hb[:nb])))
        else:
            m.d.comb += Cat(dlo_c, bor_c).eq(_gate_difference(psn[:nb], x.hb[:nb]))
        dd = dict(dlo=Signal(nb, name="dlo"), bor=Signal(name="dlo_borrow"),
                  ehi=Signal(PSN_BITS - nb, name="ehi"))
        with m.If(adv):
            m.d.sync += [pa.eq(x), dd["dlo"].eq(dlo_c), dd["bor"].eq(bor_c), dd["ehi"].eq(psn[nb:] - x.hb[nb:])]
        self._decode_tables(m, adv, dlo_c)
        return pa, dd

    _AMAX = 6       # the largest advance S2b and S3 subtract: pa.padv + two events' advances, 2 each

    def _decode_tables(self, m, adv, dlo):
        """Registered at S2a, for every offset ``a`` in 0..6, functions of ``dlo`` (D's low bits, read signed:
        ``D`` is near the head when the rest of its bits are its sign): ``D - a`` inside the bitmap, behind it,
        ``(D - a) mod L + 1``; and ``oh0[j] = (dlo == j)``."""
        L, b, nb, amax = self._L, self._b, self._b + 2, self._AMAX

        def sv(v):
            return v - (1 << nb) if v >= 1 << (nb - 1) else v

        def table(name, f, width=1):
            out = []
            for a in range(amax + 1):
                comb = Signal(width, name=f"{name}{a}_c")
                reg = Signal(width, name=f"{name}{a}")
                m.d.comb += comb.eq(Array(Const(f(a, sv(v)), width) for v in range(1 << nb))[dlo])
                with m.If(adv):
                    m.d.sync += reg.eq(comb)
                out.append(reg)
            return out
        self._t = dict(
            inb=table("t_inb", lambda a, x: int(0 <= x - a < L)),
            beh=table("t_beh", lambda a, x: int(-L <= x - a < 0)),
            dp1=table("t_dp1", lambda a, x: ((x - a) % L) + 1, b + 1),
        )
        oh0 = Signal(L + amax, name="oh0")
        with m.If(adv):
            m.d.sync += oh0.eq(Array(Const(1 << v if v < L + amax else 0, L + amax) for v in range(1 << nb))[dlo])
        self._t["oh0"] = oh0

    # -- S2b: offsets -----------------------------------------------------------------------------------------------

    def _offsets(self, m, adv, ev, r, hz, pa, dd):
        """S2b: the record before the event just ahead (``pb``), and for each advance ``c`` (0, 1, 2) that event
        can still make, ``d = D - a`` with ``a = pa.padv + (the event two ahead's advance) + c`` decoded: inside the
        bitmap, behind it, its sign, its bit (one-hot) and ``d + 1``; whether the PSN had arrived in ``pa`` or was
        accepted by the event two ahead. Every decode is a table of the low bits of ``D`` (no carry chain): ``D`` is
        near the head when its high bits are all zeros or all ones."""
        L, b = self._L, self._b
        h = hz["s2b"]
        pb = Signal(self._rec, name="pb")
        nb = b + 2                                    # low bits of D: [-2L, 2L) near the head
        # D = (ehi - bor) * 2**nb + dlo; the high part H = ehi - bor is recognised by comparing ehi with constants
        dlo, bor, ehi = dd["dlo"], dd["bor"], dd["ehi"]
        w = PSN_BITS - nb
        eq = {k: ehi == (k % (1 << w)) for k in (0, 1, -1, 1 << (w - 1), (1 << (w - 1)) + 1)}
        h0, hm1, hh = Signal(name="hi_zero"), Signal(name="hi_ones"), Signal(name="hi_half")
        m.d.comb += [h0.eq(Mux(bor, eq[1], eq[0])), hm1.eq(Mux(bor, eq[0], eq[-1])),
                     hh.eq(Mux(bor, eq[(1 << (w - 1)) + 1], eq[1 << (w - 1)]))]
        near = Signal(name="near")                    # D's bits nb-1 .. 23 all zeros or all ones
        m.d.comb += near.eq(Mux(dlo[nb - 1], hm1, h0))
        top = Signal(name="d_sign")                   # D's bit 23
        m.d.comb += top.eq(ehi[w - 1] ^ (bor & (ehi[:w - 1] == 0)))
        low0 = Signal(name="low0")                    # D's bits 3 .. 22 all zeros
        m.d.comb += low0.eq((dlo[3:] == 0) & (h0 | hh))
        amax = self._AMAX
        inb_t, beh_t, dp1_t, oh0 = self._t["inb"], self._t["beh"], self._t["dp1"], self._t["oh0"]
        p1 = pa.padv
        p2 = Signal(2, name="p2")
        m.d.comb += p2.eq(Mux(h["h2"], r["r1"].padv, 0))

        def by_offset(c, values):
            """values[a] selected by a = p1 + p2 + c (entries past 6 cannot happen)."""
            return Array(values[min(amax, (k & 3) + (k >> 2) + c)] for k in range(16))[Cat(p1, p2)]
        fl = {k: [Signal(name=f"fl_{k}{c}") for c in range(3)] for k in ("inb", "beh", "sgn")}
        fl["oh"] = [Signal(L, name=f"fl_oh{c}") for c in range(3)]
        fl["dp1"] = [Signal(b + 1, name=f"fl_dp1_{c}") for c in range(3)]
        fl["arr"] = Signal(name="fl_arrived")
        # the PSN arrived in pa: its bit at D - pa.padv, through the registered one-hot of D
        looks = [Signal(name=f"look{p}") for p in range(3)]
        for p in range(3):
            m.d.comb += looks[p].eq((pa.bm & oh0[p:p + L]).any())
        arrived = Signal(name="arrived_pa")
        m.d.comb += arrived.eq(near & Array(looks + [looks[2]])[p1])
        created = Signal(self._rec, name="created")
        s2b = ev["s2b"]
        m.d.comb += created.eq(Cat(s2b.create, s2b.cpsn, Const(0, 2 + L + b + 1), s2b.cwnd, Const(0, 2)))
        with m.If(adv):
            m.d.sync += [pb.eq(Mux(s2b.ctl, created, Mux(h["h2"], r["r1"], pa))),
                         fl["arr"].eq(arrived | (h["h2"] & h["e2"] & r["r1_acc"]))]
            for c in range(3):
                m.d.sync += [
                    fl["inb"][c].eq(near & by_offset(c, inb_t)),
                    fl["beh"][c].eq(near & by_offset(c, beh_t)),
                    fl["sgn"][c].eq(top ^ (low0 & by_offset(c, [dlo[:3] < a for a in range(amax + 1)]))),
                    fl["oh"][c].eq(Mux(near, by_offset(c, [oh0[a:a + L] for a in range(amax + 1)]), 0)),
                    fl["dp1"][c].eq(by_offset(c, dp1_t)),
                ]
        if self._ctx:
            # the event's own flags, registered here so that S3's cones start from single bits (context mode only:
            # record mode's netlist stays the one measured at 6 levels alone and inside pro-rx-wire)
            fl.update(ok=Signal(name="s3_ok"), data=Signal(name="s3_data"), tmo=Signal(name="s3_tmo"))
            with m.If(adv):
                m.d.sync += [fl["ok"].eq(s2b.inr & ~s2b.ctl),
                             fl["data"].eq((s2b.item.kind == PacketKind.DATA) & ~s2b.item.timeout),
                             fl["tmo"].eq(s2b.item.timeout)]
        return dict(pb=pb, **fl)

    # -- S3: the step -------------------------------------------------------------------------------------------------

    def _step(self, m, s3, r, hz, fl):
        """S3 (combinational, the loop): Algorithm 2 on the freshest record: record the PSN, pass up to two arrived
        PSNs at the head, decide the NACK candidate."""
        L, b, wb = self._L, self._b, self._wb
        h = hz["s3"]
        ev = s3.item
        cur = Signal(self._rec, name="cur")
        m.d.comb += cur.eq(Mux(h["h1"], r["r1"], fl["pb"]))
        a1 = Signal(2, name="a1")
        m.d.comb += a1.eq(Mux(h["h1"], r["r1"].padv, 0))

        def pick(sigs):
            return Mux(a1 == 0, sigs[0], Mux(a1 == 1, sigs[1], sigs[2]))
        known, is_data, tmo = Signal(name="known"), Signal(name="is_data"), Signal(name="tmo")
        if self._ctx:
            # the flags registered in S2b (abc9 mapped context mode's loop 7 levels deep in the AXI4-Lite top from
            # the item fields); record mode keeps the form it was measured at 6 with
            m.d.comb += [known.eq(cur.valid & fl["ok"]), is_data.eq(fl["data"]), tmo.eq(fl["tmo"])]
        else:
            m.d.comb += [known.eq(cur.valid & s3.inr & ~s3.ctl),
                         is_data.eq((ev.kind == PacketKind.DATA) & ~ev.timeout), tmo.eq(ev.timeout)]
        inb, beh, sgn = Signal(name="inb"), Signal(name="beh"), Signal(name="sgn")
        oh, dp1 = Signal(L, name="oh"), Signal(b + 1, name="dp1")
        m.d.comb += [inb.eq(pick(fl["inb"])), beh.eq(pick(fl["beh"])), sgn.eq(pick(fl["sgn"])),
                     oh.eq(pick(fl["oh"])), dp1.eq(pick(fl["dp1"]))]
        arrived = Signal(name="arrived")
        m.d.comb += arrived.eq(fl["arr"] | (h["h1"] & h["e1"] & r["r1_acc"]))
        rec = Signal(name="rec")
        m.d.comb += rec.eq(known & is_data & inb)
        acc, rep = Signal(name="acc"), Signal(name="rep")
        m.d.comb += [acc.eq(rec & ~arrived), rep.eq(known & is_data & (beh | (inb & arrived)))]
        active = Signal(name="active")
        m.d.comb += active.eq(known & ((is_data & (inb | beh)) | tmo))
        bm1 = Signal(L, name="bm1")
        m.d.comb += bm1.eq(cur.bm | Mux(rec, oh, 0))
        hadv = Signal(2, name="hadv")
        m.d.comb += hadv.eq(Mux(active & bm1[0], Mux(bm1[1], 2, 1), 0))
        # tail offset: max(tr, d + 1) - hadv, from candidates computed beside hadv
        gt = Signal(name="tail_moves")
        m.d.comb += gt.eq(rec & (dp1 > cur.tr))
        tr_c = [Signal(b + 1, name=f"tr_minus{k}") for k in range(3)]
        dp_c = [Signal(b + 1, name=f"dp1_minus{k}") for k in range(3)]
        m.d.comb += [x.eq(cur.tr - k) for k, x in enumerate(tr_c)] + [x.eq(dp1 - k) for k, x in enumerate(dp_c)]
        tr2 = Signal(b + 1, name="tr2")
        m.d.comb += tr2.eq(Mux(gt, Array(dp_c + [dp_c[2]])[hadv], Array(tr_c + [tr_c[2]])[hadv]))
        wmax = (1 << wb) - 1
        w1 = Signal(wb, name="w1")
        m.d.comb += w1.eq(Mux(rep, Mux(cur.wnd == wmax, wmax, cur.wnd + 1), Mux(known & tmo, cur.wnd >> 1, cur.wnd)))
        hn_true = Signal(name="hn_true")
        m.d.comb += hn_true.eq(cur.hnb | (cur.cand & ((cur.wnd + 1) < cur.tr)))
        hmiss = Signal(name="hmiss")
        m.d.comb += hmiss.eq(~(bm1[0] & bm1[1] & bm1[2]))
        hnb = Signal(name="hnb")
        m.d.comb += hnb.eq(hn_true & (hadv == 0))
        # One expression for every event: an inactive one (other kind, stale, beyond, unknown QP, a command, whose
        # created record S2b put in pb) records nothing and does not advance, so it keeps the record (normalized).
        nxt = Signal(self._rec, name="nxt")
        m.d.comb += [nxt.valid.eq(cur.valid), nxt.hb.eq(cur.hb + cur.padv), nxt.padv.eq(hadv),
                     nxt.bm.eq(bm1 >> hadv), nxt.tr.eq(tr2), nxt.wnd.eq(w1), nxt.hnb.eq(hnb),
                     nxt.cand.eq(active & hmiss & ~hnb)]
        cls = Signal(OooClass, name="cls")
        with m.If(~known):
            m.d.comb += cls.eq(Mux(ev.timeout | (ev.kind == PacketKind.DATA), OooClass.UNKNOWN, OooClass.OTHER))
        with m.Elif(tmo):
            m.d.comb += cls.eq(OooClass.TIMEOUT)
        with m.Elif(acc):
            m.d.comb += cls.eq(OooClass.ACCEPT)
        with m.Elif(rep):
            m.d.comb += cls.eq(OooClass.REPEAT)
        with m.Elif(~is_data):
            m.d.comb += cls.eq(OooClass.OTHER)
        with m.Elif(sgn):
            m.d.comb += cls.eq(OooClass.STALE)
        with m.Else():
            m.d.comb += cls.eq(OooClass.BEYOND)
        return dict(nxt=nxt, known=known, cls=cls, acc=acc)

    # -- S3: write back ----------------------------------------------------------------------------------------------

    def _sweep(self, m):
        """After reset every record is written unknown, the banks in parallel (up to 1,024 clocks), inputs not ready
        meanwhile."""
        sweeping = Signal(init=1)
        last = min(self._n, self._BANK) - 1
        sidx = Signal(range(last + 1))
        with m.If(sweeping):
            m.d.sync += sidx.eq(sidx + 1)
            with m.If(sidx == last):
                m.d.sync += sweeping.eq(0)
        return sweeping, sidx

    def _write_back(self, m, adv, sweeping, sidx, banks, ev, v, r, step):
        """S3 writes the new record (an unknown or out-of-range QP's record is left alone); ``r1``/``r2`` keep the
        last two results for the forwarding and S4."""
        s3 = ev["s3"]
        we = Signal()
        m.d.comb += we.eq(adv & v["s3"] & s3.inr & (s3.ctl | step["known"]))
        sh = self._BANK.bit_length() - 1
        for k, (_, wr, depth) in enumerate(banks):
            ab = max(1, (depth - 1).bit_length())
            with m.If(sweeping):
                m.d.comb += [wr.en.eq(sidx < depth), wr.addr.eq(sidx[:ab]), wr.data.eq(0)]
            with m.Else():
                m.d.comb += [wr.en.eq(we & ((s3.item.qp >> sh) == k)), wr.addr.eq(s3.item.qp[:ab]),
                             wr.data.eq(self._stored(step["nxt"]))]
        with m.If(adv):
            m.d.sync += [
                r["r1"].eq(step["nxt"]), r["r1_v"].eq(v["s3"] & s3.inr), r["r1_qp"].eq(s3.item.qp),
                r["r1_acc"].eq(step["acc"]), r["r2"].eq(r["r1"]), r["r2_acc"].eq(r["r1_acc"]),
                r["cls"].eq(step["cls"]), r["known"].eq(step["known"]),
            ]

    def _stored(self, rec):
        """The record as block RAM holds it (context mode: ``hb``'s low bits only)."""
        if not self._ctx:
            return rec
        return Cat(rec.valid, rec.hb[:head_low_bits(self._L)], rec.padv, rec.bm, rec.tr, rec.wnd, rec.hnb, rec.cand)

    # -- S4: output, counters ---------------------------------------------------------------------------------------

    def _output(self, m, adv, ev, v, r):
        """S4: the NACK and the tail offset from ``r1`` (the record the event left), the counters; S5: head and tail
        (the 24-bit additions), the result register ``o``."""
        o = self.o.payload
        s4, rec, known = ev["s4"], r["r1"], r["known"]
        nack = Signal(name="nack_s4")
        m.d.comb += nack.eq(known & rec.cand & ((rec.wnd + 1) < rec.tr))
        item = Signal()
        m.d.comb += item.eq(v["s4"] & ~s4.ctl)
        s5 = dict(valid=Signal(name="s5_valid"), item=Signal(OooItem(n_qps=self._n, head=self._head), name="s5_item"),
                  cls=Signal(OooClass, name="s5_cls"), known=Signal(name="s5_known"), nack=Signal(name="s5_nack"),
                  hb=Signal(PSN_BITS, name="s5_hb"), padv=Signal(2, name="s5_padv"),
                  toff=Signal(data.signed(self._b + 3), name="s5_tail_off"), wnd=Signal(self._wb, name="s5_wnd"),
                  nacked=Signal(name="s5_nacked"))
        with m.If(adv):
            m.d.sync += [
                s5["valid"].eq(item), s5["item"].eq(s4.item), s5["cls"].eq(r["cls"]), s5["known"].eq(known),
                s5["nack"].eq(nack), s5["hb"].eq(rec.hb), s5["padv"].eq(rec.padv),
                s5["toff"].eq(rec.padv + rec.tr - 1), s5["wnd"].eq(rec.wnd), s5["nacked"].eq(known & (rec.hnb | nack)),
            ]
        head = Signal(PSN_BITS, name="head_out")
        m.d.comb += head.eq(s5["hb"] + s5["padv"])
        k5 = s5["known"]
        with m.If(adv):
            m.d.sync += [
                self.o.valid.eq(s5["valid"]),
                o.kind.eq(s5["item"].kind), o.tag.eq(s5["item"].tag), o.qp.eq(s5["item"].qp), o.cls.eq(s5["cls"]),
                o.nack.eq(s5["nack"]),
                o.nack_psn.eq(Mux(s5["nack"], head, 0)),
                o.head.eq(Mux(k5, head, 0)),
                o.tail.eq(Mux(k5, s5["hb"] + s5["toff"], 0)),
                o.wnd.eq(Mux(k5, s5["wnd"], 0)),
                o.nacked.eq(s5["nacked"]),
            ]
            if self._ctx:
                m.d.sync += [o.epsn.eq(Mux(k5, head, 0)), o.epsn_we.eq(k5)]
        counts = [Signal(32, name=f"count{k}") for k in range(N_STATS)]
        cls = r["cls"]
        incs = [cls == OooClass.ACCEPT, cls == OooClass.REPEAT, cls == OooClass.TIMEOUT, nack,
                cls == OooClass.STALE, cls == OooClass.BEYOND, cls == OooClass.UNKNOWN]
        for c, inc in zip(counts, incs):
            with m.If(adv & item & inc):
                m.d.sync += c.eq(c + 1)
        m.d.comb += self.stats.eq(Cat(*counts))
