"""LAPS transmit-side pacer: a per-flow token bucket, one packet decision and one rate update per clock (LAPS, IEEE
ToN: section III-F, Table V "Rate Limiting Tables"; datasheet docs/laps_pacer.md).

The AIMD rate controller (``laps-aimd``) sets each flow's current rate; the pacer makes the flow's packets leave no
faster than that rate. The scheduler asks, per packet, "may flow f send this frame of b bytes now?"; the answer
``allow`` = 1 charges the flow's bucket, 0 charges nothing.

Units (datasheet): rates in kbit/s, times in ns, so rate x time is in microbits; a byte is 8,000,000 microbits =
15,625 x 512. Tokens are counted in units of 512 microbits (1/15,625 byte): a frame costs exactly
``bytes x 15625`` units, a bucket of ``bucket`` bytes holds exactly ``bucket x 15625`` units, and a refill of
``rate x elapsed`` microbits is ``floor(rate x elapsed / 512)`` units (truncation under one unit per decision).

Why a token bucket, not a next-allowed time: the bucket needs a multiply per decision (``rate x elapsed``, two DSPs,
off the read-modify-write loop) and never a divide; a next-allowed time needs ``bytes / rate`` per packet, a
divider or a reciprocal table per rate update. The multiply is exact, so the pacer adds no rounding of its own
beyond the refill's truncation.

Every decision of a known flow writes back ``tokens`` (refilled, charged when allowed) and ``last = now``. A
refill is ``rate x min(now - last, 2**24 - 1)``: the 48-bit elapsed time is modular, so ``now`` wraps cleanly, and
it saturates at 16.7 ms (a flow idle longer gets at most 16.7 ms of refill: a full bucket at any rate of 4,000
kbit/s or more for the largest bucket).

Pipeline (stages r1 .. r11, all moved by one ``adv``; latency 11)::

    r0 accept, read last/rate/flow entry -> r1 C = bytes x 15625 (DSP), match flows ahead -> r2 memory data in
    registers, pick last, write last = now, rate forwarding, D = bucket x 15625 (DSP) -> r3 elapsed in 24-bit
    halves -> r4 saturate elapsed, D - C and C > D -> r5 rate x elapsed (2 DSPs) -> r6 partial products added,
    tokens read issued -> r7 refill R saturated -> r8 C - R, D - R, R - C, tokens forwarded from r10 .. h12 -> r9
    the decision (the loop) -> r10 write back the tokens, tokens >= C -> r11 output

The read-modify-write loop is r9 alone: the token count of the request just ahead (r10's register) is muxed into
the four parallel 32-bit chains (T + R, T + R - C, T >= C - R, T >= D - R) and one LUT picks the new count. Each
per-flow field is read as late and written as early as it can be, so few writes are in flight between its read and
its write: ``last`` does not depend on the decision, so it is written at r2 (its read at r0 misses the requests in
r1 and r2, forwarded at r2 from r3 and r4); the tokens are read at r6 (the read misses the requests in r7 .. r10,
forwarded at r8 from r10, r11 and h12, and at r9 from r10). Both are selected by a one-hot "nearest request of the
same flow among the 4 ahead" computed at r1.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS

__all__ = ["Pacer", "PacerItem", "PacerRate", "PacerResult", "check_parameters", "TABLE_FLOW", "N_STATS",
           "UNITS_PER_BYTE", "ELAPSED_BITS", "RATE_BITS_USED"]

TIME_BITS = 48
RATE_BITS = 32
BYTES_BITS = 14
BUCKET_BITS = 16
UNITS_PER_BYTE = 15625          # token units (512 microbits) per byte
UNIT_SHIFT = 9                  # a token unit is 2**9 microbits
ELAPSED_BITS = 24               # elapsed time saturates at 2**24 - 1 ns
RATE_BITS_USED = 27             # rates saturate at 2**27 - 1 kbit/s (134 Gb/s)
TOKEN_BITS = 30                 # 65,535 B x 15,625 < 2**30
R_MAX = (1 << TOKEN_BITS) - 1
NEVER = (1 << 31) - 1           # a cost no bucket can cover (frame larger than the bucket)
#: Requests ahead whose write the tokens read (issued at r6) can miss: the four in r7 .. r10. ``last`` is written at
#: r2, so its read at r0 misses only the two in r1 and r2.
AHEAD = 4
WRITE_STAGE = 10
TABLE_FLOW = 0                  # index = flow: data[31:0] rate, data[47:32] bucket bytes, data[48] exists
N_STATS = 5                     # requests, allowed, stray requests, rate updates, stray rate updates


def check_parameters(*, n_flows):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    check_int("n_flows", n_flows)
    if not 2 <= n_flows <= 1 << 16 or n_flows & (n_flows - 1):
        raise ValueError(f"n_flows must be a power of two from 2 to 65536, not {n_flows}")


def _fb(n_flows):
    return (n_flows - 1).bit_length()


def PacerItem(*, n_flows=1024):
    """A decision request: may ``flow`` send a frame of ``bytes`` bytes at time ``now`` (ns)?"""
    return data.StructLayout({"kind": PacketKind, "flow": _fb(n_flows), "bytes": BYTES_BITS, "now": TIME_BITS,
                              "tag": TAG_BITS})


def PacerRate(*, n_flows=1024):
    """A rate update from the rate controller: ``flow``'s current rate, kbit/s."""
    return data.StructLayout({"flow": _fb(n_flows), "rate": RATE_BITS})


def PacerResult(*, n_flows=1024):
    """The decision: ``allow`` (sent now, bucket charged), ``eligible`` (after this decision the bucket still covers
    another frame of the same size), ``known`` (the flow exists)."""
    return data.StructLayout({"kind": PacketKind, "flow": _fb(n_flows), "bytes": BYTES_BITS, "allow": 1,
                              "eligible": 1, "known": 1, "tag": TAG_BITS})


def _tokens_layout():
    """The tokens memory (read at r6, written at r10 and by ``ctl``)."""
    return data.StructLayout({"fresh": 1, "tokens": TOKEN_BITS})


def _flow_layout():
    """The flow memory (read at r0, written by ``ctl`` only): exists and the bucket in bytes."""
    return data.StructLayout({"valid": 1, "bucket": BUCKET_BITS})


class Pacer(wiring.Component):
    """Per-flow token-bucket pacer.

    Parameters
    ----------
    n_flows : int
        Flows, a power of two from 2 to 65536 (``flow`` is log2(n_flows) bits).

    Members
    -------
    i : In(stream.Signature(PacerItem(n_flows)))
    rate : In(stream.Signature(PacerRate(n_flows)))
        Accepted in the same cycles as ``i``; an update offered with a request applies before it.
    o : Out(stream.Signature(PacerResult(n_flows)))
    ctl : In(ControlSignature())
        Table 0 creates (data[48] = 1) or removes (0) flow ``index``: rate data[31:0], bucket bytes data[47:32].
    stats : Out(32 * 5)
        Requests, allowed, stray requests, rate updates, stray rate updates (wrapping; cleared by reset).
    """

    latency = 11

    def __init__(self, *, n_flows=1024):
        check_parameters(n_flows=n_flows)
        self._n = n_flows
        self._fb = _fb(n_flows)
        super().__init__({
            "i": In(stream.Signature(PacerItem(n_flows=n_flows))),
            "rate": In(stream.Signature(PacerRate(n_flows=n_flows))),
            "o": Out(stream.Signature(PacerResult(n_flows=n_flows))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """Tokens (fresh, tokens), last, rate, flow (valid, bucket) and the rate stream's copy of valid, per flow."""
        return self._n * (_tokens_layout().size + TIME_BITS + RATE_BITS_USED + _flow_layout().size + 1)

    def elaborate(self, platform):
        """The datasheet's block diagram: memories, r0 -> r1 -> ... -> r11 (module docstring), control, counters."""
        m = Module()
        mem = self._memories(m)
        adv = Signal()
        r = self._stage_registers()
        ctl_go = self._control(m, mem, r)
        self._accept(m, adv, ctl_go, mem, r)
        self._nearest(m, adv, r)
        self._forward_last(m, adv, mem, r)
        self._elapsed(m, adv, r)
        self._saturate(m, adv, r)
        self._product(m, adv, r)
        self._refill(m, adv, r, mem)
        self._operands(m, adv, r)
        self._decide(m, adv, r)
        self._write_back(m, adv, mem, r, ctl_go)
        self._output(m, adv, r)
        return m

    # -- memories and registers -------------------------------------------------------------------------------------

    def _memories(self, m):
        """Per flow: tokens (read at r6, written at r10 and by ``ctl``), last (read at r0, written at r2: it does
        not depend on the decision), rate (written by the rate stream and ``ctl``), flow (exists and bucket,
        ``ctl``), and a copy of valid the rate stream reads."""
        out = {}
        for name, shape in (("tokens", _tokens_layout()), ("last", TIME_BITS), ("rate", RATE_BITS_USED),
                            ("flow", _flow_layout()), ("valid", 1)):
            mm = memory.Memory(shape=shape, depth=self._n, init=[])
            m.submodules[f"{name}_mem"] = mm
            out[name] = (mm.read_port(), mm.write_port())
        return out

    def _stage_registers(self):
        """One dict per stage r1 .. r11: ``req`` (a request), ``item``, ``live`` (a request of a known flow, from
        r2), ``near`` (one-hot nearest request of its flow ahead, from r2), plus stage-specific values; history
        entry h12 of tokens of the request that left r11."""
        item = PacerItem(n_flows=self._n)
        r = {}
        for s in range(1, 12):
            r[s] = dict(req=Signal(name=f"r{s}_req"), item=Signal(item, name=f"r{s}_item"),
                        live=Signal(name=f"r{s}_live"), near=Signal(AHEAD, name=f"r{s}_near"))
        for s in range(WRITE_STAGE, 9 + AHEAD):
            r.setdefault(s, {})
            r[s]["tok"] = Signal(TOKEN_BITS, name=f"p{s}_tokens")
        r[2]["fl"] = Signal(_flow_layout(), name="r2_flow_entry")
        return r

    def _carry(self, m, adv, r, s, names=("req", "item", "live", "near")):
        """Registers of stage ``s + 1`` loaded from stage ``s`` on ``adv``."""
        with m.If(adv):
            m.d.sync += [r[s + 1][n].eq(r[s][n]) for n in names]

    # -- r0, r1: accept, costs, hazards -------------------------------------------------------------------------------

    def _accept(self, m, adv, ctl_go, mem, r):
        """r0: accept a request and a rate update together (ready with ``adv`` unless a ``ctl`` command waits), read
        the request's last, rate and flow entry (exists, bucket) and the update's valid bit, write the update's rate
        (read-first: the same clock's request is forwarded at r2). Loads r1."""
        take = Signal()
        m.d.comb += [take.eq(adv & ~self.ctl.valid & ~self._ctl_rate[0]), self.i.ready.eq(take),
                     self.rate.ready.eq(take)]
        flow, upd = self.i.payload.flow, self.rate.payload
        for name in ("last", "rate", "flow"):
            rd = mem[name][0]
            m.d.comb += [rd.addr.eq(flow), rd.en.eq(adv)]
        vr = mem["valid"][0]
        m.d.comb += [vr.addr.eq(upd.flow), vr.en.eq(adv)]
        got_upd = take & self.rate.valid
        rw = mem["rate"][1]
        pend, cflow, crate = self._ctl_rate
        # rates are stored saturated at 2**27 - 1 (the refill uses no more): one saturation for the memory and
        # the same clock's forwarded copy (a command and an update never share a clock)
        wrate = Mux(pend, crate, upd.rate)
        wsat = Signal(RATE_BITS_USED, name="rate_saturated")
        m.d.comb += [wsat.eq(Mux(wrate[RATE_BITS_USED:] != 0, (1 << RATE_BITS_USED) - 1, wrate[:RATE_BITS_USED])),
                     rw.en.eq(pend | got_upd), rw.addr.eq(Mux(pend, cflow, upd.flow)), rw.data.eq(wsat)]
        r1 = r[1]
        r1.update(upd=Signal(name="r1_upd"), hit=Signal(name="r1_rate_hit"),
                  rate=Signal(RATE_BITS_USED, name="r1_rate"),
                  eq=Signal(AHEAD, name="r1_flow_eq"))
        # flow equality with the requests 1 .. AHEAD ahead (in r1 .. r4 now, r2 .. r5 when this one is in r1)
        eq = Cat(r[k]["item"].flow == flow for k in range(1, AHEAD + 1))
        with m.If(adv):
            m.d.sync += [r1["req"].eq(take & self.i.valid), r1["item"].eq(self.i.payload), r1["eq"].eq(eq),
                         r1["upd"].eq(got_upd), r1["hit"].eq(got_upd & (upd.flow == flow)),
                         r1["rate"].eq(wsat)]

    def _nearest(self, m, adv, r):
        """r1: the cost ``C = bytes x 15625`` (a DSP between registers); ``near``: one-hot, the nearest request of
        the same flow among the ``AHEAD`` requests ahead (positions r2 .. r5) that writes back (a known flow), from
        the flow comparisons r0 registered and the positions' ``live``.
        Loads r2 (the memory data go straight into r2 registers)."""
        r1, r2 = r[1], r[2]
        match = [r[1 + k]["live"] & r1["eq"][k - 1] for k in range(1, AHEAD + 1)]
        # each bit from its own balanced OR of the matches before it (a running OR synthesizes as a chain)
        near = [match[0]] + [match[k] & ~Cat(*match[:k]).any() for k in range(1, AHEAD)]
        r2.update(cost=Signal(TOKEN_BITS, name="r2_cost"), upd=Signal(name="r2_upd"), hit=Signal(name="r2_hit"),
                  urate=Signal(RATE_BITS_USED, name="r2_urate"))
        with m.If(adv):
            m.d.sync += [r2["req"].eq(r1["req"]), r2["item"].eq(r1["item"]), r2["near"].eq(Cat(*near)),
                         r2["cost"].eq(r1["item"].bytes * UNITS_PER_BYTE),
                         r2["upd"].eq(r1["upd"]), r2["hit"].eq(r1["hit"]), r2["urate"].eq(r1["rate"])]

    # -- r2 .. r8: the refill, off the loop ----------------------------------------------------------------------------

    def _forward_last(self, m, adv, mem, r):
        """r2 (memory data in registers): ``live``; ``last`` = ``now`` of the request ahead of the same flow when it
        is the nearest and in r3 or r4 (its write, at r2, came after this request's read), else the stored one; a
        known flow's ``now`` written as its ``last`` (the decision does not change it); the rate, the same clock's
        update forwarded (both stored saturated at 2**27 - 1). ``D = bucket x 15625`` (a DSP between registers).
        Loads r3."""
        r2, r3 = r[2], r[3]
        fl = r2["fl"]
        last_m = Signal(TIME_BITS, name="r2_last_mem")
        rate_m = Signal(RATE_BITS_USED, name="r2_rate_mem")
        vbit = Signal(name="r2_valid_bit")
        with m.If(adv):
            m.d.sync += [fl.eq(mem["flow"][0].data), last_m.eq(mem["last"][0].data),
                         rate_m.eq(mem["rate"][0].data), vbit.eq(mem["valid"][0].data)]
        m.d.comb += r2["live"].eq(r2["req"] & fl.valid)
        lw = mem["last"][1]
        m.d.comb += [lw.en.eq(adv & r2["live"]), lw.addr.eq(r2["item"].flow), lw.data.eq(r2["item"].now)]
        last = Mux(r2["near"][:2] == 0, last_m, 0)
        for k in (1, 2):
            last = last | Mux(r2["near"][k - 1], r[2 + k]["item"].now, 0)
        rsat = Mux(r2["hit"], r2["urate"], rate_m)
        r3.update(last=Signal(TIME_BITS, name="r3_last"), rate=Signal(RATE_BITS_USED, name="r3_rate"),
                  cost=Signal(TOKEN_BITS, name="r3_cost"), d=Signal(TOKEN_BITS, name="r3_d"))
        with m.If(adv):
            m.d.sync += [r3["req"].eq(r2["req"]), r3["item"].eq(r2["item"]), r3["live"].eq(r2["live"]),
                         r3["near"].eq(r2["near"]), r3["last"].eq(last), r3["rate"].eq(rsat),
                         r3["cost"].eq(r2["cost"]), r3["d"].eq(fl.bucket * UNITS_PER_BYTE)]
        # rate stream statistics: an update of a flow that does not exist is counted (its rate write is harmless:
        # creating the flow writes the rate)
        self._rate_stats = (r2["upd"], r2["upd"] & ~vbit)

    def _elapsed(self, m, adv, r):
        """r3: ``now - last`` modulo 2**48 in 24-bit halves (the high half both ways, without and with the low
        half's borrow). Loads r4."""
        r3, r4 = r[3], r[4]
        now, last = r3["item"].now, r3["last"]
        lo = Cat(now[:24], Const(1, 1)) - last[:24]
        r4.update(e_lo=Signal(24, name="r4_e_lo"), nb=Signal(name="r4_no_borrow"), hi0=Signal(24, name="r4_hi0"),
                  hi1=Signal(24, name="r4_hi1"))
        keep = ("rate", "cost", "d")
        r4.update({n: Signal.like(r3[n], name=f"r4_{n}") for n in keep})
        self._carry(m, adv, r, 3, ("req", "item", "live", "near") + keep)
        with m.If(adv):
            m.d.sync += [r4["e_lo"].eq(lo[:24]), r4["nb"].eq(lo[24]), r4["hi0"].eq(now[24:] - last[24:]),
                         r4["hi1"].eq(now[24:] + ~last[24:])]

    def _saturate(self, m, adv, r):
        """r4: elapsed saturated at 2**24 - 1; ``D - C`` and, its borrow, ``C > D`` (a frame no bucket of this flow
        ever covers). Loads r5."""
        r4, r5 = r[4], r[5]
        hi = Mux(r4["nb"], r4["hi0"], r4["hi1"])
        r5.update(e=Signal(ELAPSED_BITS, name="r5_e"), big=Signal(name="r5_too_big"),
                  dmc=Signal(TOKEN_BITS, name="r5_dmc"))
        keep = ("rate", "cost", "d")
        r5.update({n: Signal.like(r4[n], name=f"r5_{n}") for n in keep})
        self._carry(m, adv, r, 4, ("req", "item", "live", "near") + keep)
        with m.If(adv):
            m.d.sync += [r5["e"].eq(Mux(hi != 0, (1 << ELAPSED_BITS) - 1, r4["e_lo"])),
                         # C > D is the borrow of D - C: one chain gives both
                         Cat(r5["dmc"], r5["big"]).eq(r4["d"] - r4["cost"])]

    def _product(self, m, adv, r):
        """r5: ``rate x e`` as two DSP products between registers (rate bits 0-16 and 17-26, each by the 24-bit
        elapsed time); ``C'`` (``NEVER`` when the frame exceeds the bucket). Loads r6."""
        r5, r6 = r[5], r[6]
        rate, e = r5["rate"], r5["e"]
        r6.update(p0=Signal(17 + ELAPSED_BITS, name="r6_p0"), p1=Signal(10 + ELAPSED_BITS, name="r6_p1"),
                  cprime=Signal(31, name="r6_cprime"))
        keep = ("cost", "d", "dmc")
        r6.update({n: Signal.like(r5[n], name=f"r6_{n}") for n in keep})
        self._carry(m, adv, r, 5, ("req", "item", "live", "near") + keep)
        with m.If(adv):
            m.d.sync += [r6["p0"].eq(rate[:17] * e), r6["p1"].eq(rate[17:] * e),
                         r6["cprime"].eq(Mux(r5["big"], NEVER, r5["cost"]))]

    def _refill(self, m, adv, r, mem):
        """r6: ``(p0 + p1 x 2**17) >> 9`` with one 24-bit add (bits 0-7 come straight from p0), and whether p1
        alone exceeds any bucket; the tokens read issued (r6's flow). Loads r7; r7 saturates it at 2**30 - 1 into
        r8, and the tokens read goes straight into an r8 register."""
        r6, r7, r8 = r[6], r[7], r[8]
        p0, p1 = r6["p0"], r6["p1"]
        keep = ("cprime", "dmc", "cost", "d")
        r7.update(rs=Signal(33, name="r7_rs"), big=Signal(name="r7_big"))
        r7.update({n: Signal.like(r6[n], name=f"r7_{n}") for n in keep})
        self._carry(m, adv, r, 6, ("req", "item", "live", "near") + keep)
        with m.If(adv):
            m.d.sync += [r7["rs"].eq(Cat(p0[UNIT_SHIFT:17], p0[17:] + p1[:22])), r7["big"].eq(p1[22:] != 0)]
        rd = mem["tokens"][0]
        m.d.comb += [rd.addr.eq(r6["item"].flow), rd.en.eq(adv)]
        r8.update(R=Signal(TOKEN_BITS, name="r8_refill"), tm=Signal(_tokens_layout(), name="r8_tokens_mem"))
        r8.update({n: Signal.like(r7[n], name=f"r8_{n}") for n in keep})
        self._carry(m, adv, r, 7, ("req", "item", "live", "near") + keep)
        with m.If(adv):
            m.d.sync += [r8["R"].eq(Mux(r7["big"] | (r7["rs"][TOKEN_BITS:] != 0), R_MAX, r7["rs"][:TOKEN_BITS])),
                         r8["tm"].eq(rd.data)]

    def _operands(self, m, adv, r):
        """r8: the loop's operands, each one chain: ``K = C' - R`` and ``D - R`` as 32-bit two's complement with the
        sign bit flipped (so r9 compares unsigned), ``R - C`` modulo 2**30; the tokens of the nearest request ahead
        that has left r9 and whose write the read at r6 missed (positions r10 .. h12), or the stored ones (a full
        bucket when fresh). Loads r9."""
        r8, r9 = r[8], r[9]
        R = r8["R"]
        flip = 1 << 31
        k, dmr = Signal(signed(32), name="r8_k"), Signal(signed(32), name="r8_dmr")
        m.d.comb += [k.eq(r8["cprime"] - R), dmr.eq(r8["d"] - R)]
        tm = r8["tm"]
        tok = Mux(r8["near"][1:] == 0, Mux(tm.fresh, r8["d"], tm.tokens), 0)
        for j in range(2, AHEAD + 1):
            tok = tok | Mux(r8["near"][j - 1], r[8 + j]["tok"], 0)
        r9.update(kx=Signal(32, name="r9_kx"), dmrx=Signal(32, name="r9_dmrx"), R=Signal(TOKEN_BITS, name="r9_R"),
                  rmc=Signal(TOKEN_BITS, name="r9_rmc"), tv=Signal(TOKEN_BITS, name="r9_tv"),
                  d=Signal(TOKEN_BITS, name="r9_d"), dmc=Signal(TOKEN_BITS, name="r9_dmc"),
                  cost=Signal(TOKEN_BITS, name="r9_cost"), tvn=Signal(TOKEN_BITS, name="r9_tvn"))
        self._carry(m, adv, r, 8)
        with m.If(adv):
            m.d.sync += [r9["kx"].eq(k.as_unsigned() ^ flip), r9["dmrx"].eq(dmr.as_unsigned() ^ flip), r9["R"].eq(R), r9["rmc"].eq(R - r8["cost"]),
                         r9["tv"].eq(tok), r9["tvn"].eq(~tok), r9["d"].eq(r8["d"]), r9["dmc"].eq(r8["dmc"]),
                         r9["cost"].eq(r8["cost"])]

    # -- r9: the decision (the read-modify-write loop) -----------------------------------------------------------------

    def _decide(self, m, adv, r):
        """r9: tokens in = r10's new count when the request just ahead is of the same flow, else r8's pick;
        ``allow = T >= C' - R``, ``full = T >= D - R`` (unsigned on sign-flipped operands), then
        ``T' = full ? (allow ? D - C : D) : (allow ? T + R - C : T + R)``. Loads r10."""
        r9, r10 = r[9], r[10]
        r10.update(allow=Signal(name="r10_allow"), cost=Signal(TOKEN_BITS, name="r10_cost"),
                   tokn=Signal(TOKEN_BITS, name="r10_tokens_n"))
        t = Signal(TOKEN_BITS, name="r9_tokens_in")
        m.d.comb += t.eq(Mux(r9["near"][0], r10["tok"], r9["tv"]))
        # T + R reads inverted copies of the same registers: sharing one T would let Yosys (opt_share) merge the
        # two adders into one behind an operand mux driven by ``allow``, putting the compare chain before the add
        tn = Signal(TOKEN_BITS, name="r9_tokens_in_n")
        m.d.comb += tn.eq(Mux(r9["near"][0], r10["tokn"], r9["tvn"]))
        tx = Cat(t, Const(0, 1), Const(1, 1))        # T as 32-bit two's complement, sign flipped
        allow = tx >= r9["kx"]
        full = tx >= r9["dmrx"]
        new = Mux(full, Mux(allow, r9["dmc"], r9["d"]),
                  Mux(allow, (t + r9["rmc"])[:TOKEN_BITS], (~tn + r9["R"])[:TOKEN_BITS]))
        self._carry(m, adv, r, 9)
        with m.If(adv):
            m.d.sync += [r10["tok"].eq(new), r10["tokn"].eq(~new), r10["allow"].eq(allow & r9["live"]), r10["cost"].eq(r9["cost"])]

    def _write_back(self, m, adv, mem, r, ctl_go):
        """r10: write a known flow's tokens (fresh 0); ``eligible = T' >= C``. Loads r11 and the history h12
        (tokens)."""
        r10, r11 = r[10], r[11]
        wp = mem["tokens"][1]
        with m.If(~self._ctl_state_we):
            m.d.comb += [wp.en.eq(adv & r10["live"]), wp.addr.eq(r10["item"].flow), wp.data.fresh.eq(0),
                         wp.data.tokens.eq(r10["tok"])]
        r11.update(allow=Signal(name="r11_allow"), eligible=Signal(name="r11_eligible"))
        self._carry(m, adv, r, 10, ("req", "item", "live", "near", "tok"))
        with m.If(adv):
            m.d.sync += [r11["allow"].eq(r10["allow"]), r11["eligible"].eq(r10["live"] & (r10["tok"] >= r10["cost"]))]
            for p in range(12, 9 + AHEAD):
                m.d.sync += r[p]["tok"].eq(r[p - 1]["tok"])

    def _output(self, m, adv, r):
        """r11: the result; ``adv`` (the whole pipeline moves unless r11 holds a result the consumer does not take);
        the counters, from registers."""
        r11, out = r[11], self.o.payload
        m.d.comb += [
            adv.eq(~r11["req"] | self.o.ready),
            self.o.valid.eq(r11["req"]),
            out.kind.eq(r11["item"].kind), out.flow.eq(r11["item"].flow), out.bytes.eq(r11["item"].bytes),
            out.tag.eq(r11["item"].tag), out.allow.eq(r11["allow"]), out.eligible.eq(r11["eligible"]),
            out.known.eq(r11["live"]),
        ]
        counts = [Signal(32, name=n) for n in ("n_requests", "n_allowed", "n_stray", "n_rates", "n_stray_rates")]
        upd, stray_upd = self._rate_stats
        with m.If(adv):
            m.d.sync += [
                counts[0].eq(counts[0] + r11["req"]), counts[1].eq(counts[1] + r11["allow"]),
                counts[2].eq(counts[2] + (r11["req"] & ~r11["live"])),
                counts[3].eq(counts[3] + upd), counts[4].eq(counts[4] + stray_upd),
            ]
        m.d.comb += self.stats.eq(Cat(*counts))

    # -- control ------------------------------------------------------------------------------------------------------

    def _control(self, m, mem, r):
        """``ctl`` table 0: create (data[48] = 1: exists, rate, bucket, a full bucket) or remove (0) flow ``index``.
        Taken only with the pipeline empty; requests wait while a command is offered. The command is registered and
        written the next clock (no request is accepted in between: ``ctl.valid`` was high)."""
        cmd = self.ctl.payload
        busy = Const(0, 1)
        for s in range(1, 12):
            busy = busy | r[s]["req"]
        pend = Signal(name="ctl_pending")
        go = Signal()
        m.d.comb += [go.eq(self.ctl.valid & ~busy & ~pend), self.ctl.ready.eq(~busy & ~pend)]
        flow, rate, bucket, exists = (Signal(self._fb, name="ctl_flow"), Signal(RATE_BITS, name="ctl_rate"),
                                      Signal(BUCKET_BITS, name="ctl_bucket"), Signal(name="ctl_exists"))
        m.d.sync += pend.eq(go & (cmd.table == TABLE_FLOW) & (cmd.index < self._n))
        with m.If(go):
            m.d.sync += [flow.eq(cmd.index), rate.eq(cmd.data[:32]), bucket.eq(cmd.data[32:48]),
                         exists.eq(cmd.data[48])]
        self._ctl_state_we = pend
        sw = mem["tokens"][1]
        with m.If(pend):
            m.d.comb += [sw.en.eq(1), sw.addr.eq(flow), sw.data.fresh.eq(1)]
        vw = mem["valid"][1]
        m.d.comb += [vw.en.eq(pend), vw.addr.eq(flow), vw.data.eq(exists)]
        fw = mem["flow"][1]
        m.d.comb += [fw.en.eq(pend), fw.addr.eq(flow), fw.data.valid.eq(exists), fw.data.bucket.eq(bucket)]
        self._ctl_rate = (pend, flow, rate)
        return go
