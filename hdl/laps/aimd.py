"""LAPS per-flow AIMD rate controller (LAPS, IEEE ToN: section III-F, Algorithm 2, Table V "Rate Limiting Tables";
datasheet docs/laps_aimd.md).

One ACK per clock: ``flow``, ``now`` and, per candidate slot, the PIT's ``valid``/``real_val``/``base_val`` (the
PIT's output field names, so a NIC pipeline connects PIT -> AIMD by field). T = max base_val and t = min real_val
over the valid slots; t > T is congestion. t comes from a comparator tree (one level a bank); the paper variant
tests t > T as "every valid base_val < t" (one compare a slot, no max tree), the simulator's, which also needs T and
the largest real_val for its windows, builds their max trees. Per flow, in block RAM: the
current and expected rate (kbit/s), the increase stage and a flag per window for "open" (set at creation) in one
memory; the next-decrease and next-increase deadlines (48-bit ns) in another, a write enable each.

Pipeline (banks B0..B6 and RW, all moved by one ``adv``; latency 8 for every parameter set)::

    B0 slots, state read issued -> B1..BL trees        -> BL+1 base_val < t (paper), deadlines (low)
                                                          -> BL+2 t > T, deadlines (high)
                                   B1 state register   -> B2 .. B6 window tests, candidate rates (paper,
                                                          k <= 8: one compare pair and clamp for the new rate of
                                                          either adjustment, chosen in B4 by the congestion bit)
                                   B4 second state read -> B6 registered
    B6 -> RW: hold-off, action, result, history; RW writes the state back (adjustments only)

The state is read when an ACK is taken and written back from RW, 8 banks later. Instead of forwarding through
a one-clock loop of compares and adds, an ACK does not adjust a flow that one of the ``HOLDOFF`` = 8 items before it
adjusted (it reports the rates that adjustment left: the second state read, issued from B4, has every write-back
but the FORWARD = 3 nearest items', which B6 forwards from the history): no adjustment then depends on another
one's result, and each bank does one compare or one add.

Choices where the paper is silent (all in the datasheet): the window test is "now has reached the deadline"
(paper) or "now is past it" (sim), 48-bit modular; no valid slot, t infinite or a non-ACK item adjust nothing;
rates are clamped into [min_rate, line_rate] at creation and at every adjustment; the stage counter saturates at
N + 1; the hold-off; reset removes every flow (a sweep with the inputs not ready); a removed flow's entry holds
zeros, so a miss reports zeros straight from memory.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS
from lbpipe.hdl.lib.stage import RegisterBanks, counter32

__all__ = ["Aimd", "AimdItem", "AimdResult", "check_parameters", "VARIANTS", "INFINITY", "TABLE_CREATE",
           "TABLE_REMOVE", "TABLE_LINE_RATE", "TABLE_MIN_RATE", "N_STATS", "HOLDOFF", "ACTION_NONE", "ACTION_INC",
           "ACTION_DEC"]

TIME_BITS = 48
VAL_BITS = 32
RATE_BITS = 32
STAGE_BITS = 4
INFINITY = (1 << VAL_BITS) - 1
VARIANTS = ("paper", "sim")
SIM_FLOOR = 1_000_000           # kbit/s: the authors' simulator's additive floor on an increase (1 Gb/s)
TABLE_CREATE = 0                # index = flow: data[31:0] current rate, data[63:32] expected rate (kbit/s)
TABLE_REMOVE = 1                # index = flow
TABLE_LINE_RATE = 2             # data[31:0]
TABLE_MIN_RATE = 3              # data[31:0]
N_STATS = 4                     # ACKs, misses, increases, decreases
#: Items ahead of an ACK when its state is read (banks B0 to RW): an ACK does not adjust a flow one of the HOLDOFF
#: items before it adjusted, so no adjustment ever waits for another's arithmetic (datasheet, "Hold-off").
HOLDOFF = 8
DECIDE = 6                      # the bank the decision reads (B6 -> RW)
#: The items ahead whose write-back the second state read (B4 -> B6) misses: forwarded in B6.
FORWARD = 3
_HALF = 24                      # 48-bit adds and compares work in 24-bit halves
ACTION_NONE, ACTION_INC, ACTION_DEC = 0, 1, 2


def check_parameters(*, n_flows, k, stages, variant, line_rate, min_rate):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_flows", n_flows), ("k", k), ("stages", stages), ("line_rate", line_rate),
                        ("min_rate", min_rate)):
        check_int(name, value)
    if not 2 <= n_flows <= 1 << 16 or n_flows & (n_flows - 1):
        raise ValueError(f"n_flows must be a power of two from 2 to 65536, not {n_flows}")
    if not 1 <= k <= 32:
        raise ValueError(f"k must be 1 to 32, not {k}")
    if not 1 <= stages <= (1 << STAGE_BITS) - 2:
        raise ValueError(f"stages must be 1 to {(1 << STAGE_BITS) - 2}, not {stages}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
    for name, value in (("line_rate", line_rate), ("min_rate", min_rate)):
        if not 0 <= value < 1 << RATE_BITS:
            raise ValueError(f"{name} must fit 32 bits (kbit/s), not {value}")
    if min_rate > line_rate:
        raise ValueError(f"min_rate {min_rate} is above line_rate {line_rate}")


def _flow_bits(n_flows):
    return (n_flows - 1).bit_length()


def AimdItem(*, n_flows=1024, k=8):
    """One ACK: its flow, the NIC's ``now`` and the candidate slots as the PIT returns them."""
    fields = {"kind": PacketKind, "flow": _flow_bits(n_flows), "now": TIME_BITS}
    for j in range(k):
        fields.update({f"valid{j}": 1, f"real_val{j}": VAL_BITS, f"base_val{j}": VAL_BITS})
    fields["tag"] = TAG_BITS
    return data.StructLayout(fields)


def AimdResult(*, n_flows=1024):
    """The flow's state after the ACK (all 0 with ``hit`` 0 for an unknown flow)."""
    return data.StructLayout({"kind": PacketKind, "tag": TAG_BITS, "flow": _flow_bits(n_flows),
                              "rate": RATE_BITS, "expected": RATE_BITS, "stage": STAGE_BITS, "action": 2,
                              "changed": 1, "hit": 1})


def _state_layout():
    """A flow's rate state (one memory, written whole); the two deadlines are a second memory (see
    :func:`_deadline_bits`)."""
    return data.StructLayout({"valid": 1, "dec_open": 1, "inc_open": 1, "stage": STAGE_BITS, "cur": RATE_BITS,
                              "exp": RATE_BITS})


def _deadline_bits():
    """next_dec (bits 0-47) and next_inc (48-95): a memory of two 48-bit lanes with a write enable each, so an
    adjustment writes only its own deadline."""
    return 2 * TIME_BITS


class Aimd(wiring.Component):
    """Per-flow AIMD rate controller.

    Parameters
    ----------
    n_flows : int
        Flows, a power of two from 2 to 65536 (the ``flow`` field is log2(n_flows) bits).
    k : int
        Candidate path slots per ACK, 1 to 32.
    stages : int
        N, linear increases before the hyper increase doubles the expected rate, 1 to 14.
    variant : str
        ``"paper"`` (Algorithm 2 with the text's window intent) or ``"sim"`` (the authors' simulator).
    line_rate, min_rate : int
        Reset values of the rate limits (kbit/s); both writable through ``ctl``.

    Members
    -------
    i : In(stream.Signature(AimdItem(n_flows, k)))
    o : Out(stream.Signature(AimdResult(n_flows)))
    ctl : In(ControlSignature())
    stats : Out(32 * 4)
        ACKs, misses (unknown flow), increases, decreases; wrapping, cleared by reset.
    """

    latency = DECIDE + 2

    def __init__(self, *, n_flows=1024, k=8, stages=5, variant="paper", line_rate=100_000_000, min_rate=100_000):
        check_parameters(n_flows=n_flows, k=k, stages=stages, variant=variant, line_rate=line_rate,
                         min_rate=min_rate)
        self._n_flows, self._k, self._n, self._variant = n_flows, k, stages, variant
        self._line0, self._min0 = line_rate, min_rate
        self._fb = _flow_bits(n_flows)
        self._levels = (k - 1).bit_length()
        super().__init__({
            "i": In(stream.Signature(AimdItem(n_flows=n_flows, k=k))),
            "o": Out(stream.Signature(AimdResult(n_flows=n_flows))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        return self._n_flows * (_state_layout().size + _deadline_bits())

    def elaborate(self, platform):
        """The datasheet's block diagram: the state memory read at accept; B0 -> B1 .. BL (comparator trees) ->
        congestion, deadlines; B1 (state register) -> B2 .. B6 (candidate rates, window tests); B6 -> RW (hold-off,
        decision, write back, output); control, reset sweep, counters."""
        m = Module()
        self._m = m
        mem = memory.Memory(shape=_state_layout(), depth=self._n_flows, init=[])
        m.submodules.state = mem
        rd, wr = mem.read_port(), mem.write_port()
        self._rd2 = mem.read_port()
        dmem = memory.Memory(shape=_deadline_bits(), depth=self._n_flows, init=[])
        m.submodules.deadlines = dmem
        drd, dwr = dmem.read_port(), dmem.write_port(granularity=TIME_BITS)
        self._drd = drd
        adv = Signal()
        pipe = RegisterBanks(m, adv, DECIDE)
        self._pipe = pipe
        lim = self._limits(m)
        self._accept(m, pipe, adv, lim, rd)
        self._trees(pipe)
        self._congestion(pipe)
        self._window_tests(pipe)
        self._candidate_rates(pipe, lim)
        hist = self._history(m)
        self._reread(m, pipe, adv)
        self._hold_matches(m, pipe, hist)
        rw = self._decide(m, pipe, adv, hist)
        self._output(m, adv, pipe, rw)
        self._write_port(m, wr, dwr, rw, lim, hist)
        self._counters(m, adv, rw)
        return m

    # -- limits and clamps -----------------------------------------------------------------------------------------

    def _limits(self, m):
        """The rate limits (reset to the parameters, written by ``ctl``) and values derived from them a clock later
        (control waits for them): ``cross`` (min_rate > line_rate) and the limits less the
        simulator's floor (so its compares stay 32 bits)."""
        line0, min0 = self._line0, self._min0
        lim = {"line": Signal(RATE_BITS, init=line0, name="line_rate"),
               "min": Signal(RATE_BITS, init=min0, name="min_rate"),
               "cross": Signal(name="limits_cross"),
               "line_less": Signal(RATE_BITS, init=line0 - SIM_FLOOR + 1 if line0 >= SIM_FLOOR else 0,
                                   name="line_less_floor"),
               "min_less": Signal(RATE_BITS, init=max(0, min0 - SIM_FLOOR), name="min_less_floor"),
               "sweep": Signal(init=1, name="sweeping"), "sweep_addr": Signal(self._fb, name="sweep_addr"),
               "busy": Signal(name="ctl_busy"), "go": Signal(name="ctl_go"), "op": Signal(2, name="ctl_op"),
               "lo": Signal(RATE_BITS, name="ctl_lo"), "hi": Signal(RATE_BITS, name="ctl_hi"),
               # 1-2: the rates enter B3's adder (one each), 4-5: clamped, into RW, 6: write
               "phase": Signal(3, name="ctl_phase")}
        line, low = lim["line"], lim["min"]
        m.d.sync += [lim["cross"].eq(low > line), 
                     lim["line_less"].eq(Mux(line >= SIM_FLOOR, line - (SIM_FLOOR - 1), 0)),
                     lim["min_less"].eq(Mux(low > SIM_FLOOR, low - SIM_FLOOR, 0))]
        self._lim = lim
        return lim

    def _clampmux(self, x, lo, hi):
        """``x`` clamped, from the registered compare flags ``lo`` (x < min_rate) and ``hi`` (x > line_rate, or the
        limits cross: line rate wins then): one LUT a bit."""
        lim = self._lim
        return Mux(hi, lim["line"], Mux(lo, lim["min"], x[:RATE_BITS]))

    # -- the item side ---------------------------------------------------------------------------------------------

    def _accept(self, m, pipe, adv, lim, rd):
        """B0: the item taken, slots masked (an invalid slot: base 0 for the max, real infinity for the min, 0 for
        the simulator's max of real_val); the state read issued with the item's flow."""
        k, p = self._k, self.i.payload
        take = Signal()
        m.d.comb += [self.i.ready.eq(adv & ~lim["sweep"] & ~lim["busy"] & ~self.ctl.valid),
                     take.eq(self.i.valid & self.i.ready), rd.addr.eq(p.flow), rd.en.eq(adv)]
        self._rd_data = rd.data
        m.d.comb += [self._drd.addr.eq(p.flow), self._drd.en.eq(adv)]
        pipe.put("v", 0, take, 1)
        pipe.put("kind", 0, p.kind, PacketKind)
        pipe.put("tag", 0, p.tag, TAG_BITS)
        pipe.put("flow", 0, p.flow, self._fb)
        pipe.put("now", 0, p.now, TIME_BITS)
        pipe.put("ack", 0, (p.kind == PacketKind.ACK) & (Cat(p[f"valid{j}"] for j in range(k)) != 0), 1,
                 until=max(self._levels, 0))
        self._tree_in = {"valid": [p[f"valid{j}"] for j in range(k)], "base": [p[f"base_val{j}"] for j in range(k)],
                         "rmin": [p[f"real_val{j}"] for j in range(k)], "rmax": [p[f"real_val{j}"] for j in range(k)]}

    _NEUTRAL = {"base": 0, "rmin": INFINITY, "rmax": 0}

    def _trees(self, pipe):
        """B0 .. BL: the slots as taken, then one level of the min(real_val) (and, sim, max(base_val) and
        max(real_val)) comparator trees a bank: t (and T, the largest real_val) in BL. The first level leaves out
        invalid slots in its choice (both invalid: 0 for a max, infinity for the min), so no slot is masked before
        its compare. The paper variant needs no max(base_val) tree: t > T is "every valid base_val below t"
        (:meth:`_congestion`), so its base_val and valid bits ride along to BL instead."""
        sim = self._variant == "sim"
        trees = ("base", "rmin", "rmax") if sim else ("rmin",)
        ins = self._tree_in
        last = self._levels
        if not sim:
            self._slots = [(pipe.put(f"valid0_{j}", 0, v, 1, until=last), pipe.put(f"base0_{j}", 0, b, VAL_BITS,
                                                                                    until=last))
                           for j, (v, b) in enumerate(zip(ins["valid"], ins["base"]))]
        if last == 0:
            v = ins["valid"][0]
            self._tree_out = {f: pipe.put(f"{f}0_0", 0, Mux(v, ins[f][0], self._NEUTRAL[f]), VAL_BITS, until=0)
                              for f in trees}
            return
        valid = ([pipe.put(f"valid0_{j}", 0, v, 1, until=0) for j, v in enumerate(ins["valid"])] if sim
                 else [v for v, _ in self._slots])
        cur = {f: [pipe.put(f"{f}0_{j}", 0, v, VAL_BITS, until=0) for j, v in enumerate(ins[f])] for f in trees}
        for level in range(1, self._levels + 1):
            nxt = {}
            for f in trees:
                vals, out, neutral = cur[f], [], self._NEUTRAL[f]
                for j in range((len(vals) + 1) // 2):
                    a = vals[2 * j]
                    name = f"{f}{level}_{j}"
                    if 2 * j + 1 == len(vals):
                        value = Mux(valid[2 * j], a, neutral) if level == 1 else a
                        out.append(pipe.put(name, level, value, VAL_BITS, until=level))
                        continue
                    b = vals[2 * j + 1]
                    better = (b < a) if f == "rmin" else (b > a)
                    if level == 1:
                        va, vb = valid[2 * j], valid[2 * j + 1]
                        value = Mux(vb & (~va | better), b, Mux(va, a, neutral))
                    else:
                        value = Mux(better, b, a)
                    out.append(pipe.put(name, level, value, VAL_BITS, until=level))
                nxt[f] = out
            cur = nxt
        self._tree_out = {f: v[0] for f, v in cur.items()}

    def _congestion(self, pipe):
        """B(L+1): congested (t > T), may adjust (an ACK, a valid slot, t finite), the low halves of the two
        deadlines ``now + 2 x window``; B(L+2): their high halves."""
        at, out = self._levels + 1, self._tree_out
        t = out["rmin"]
        src = pipe[at - 1]
        if self._variant == "paper":
            w_dec = w_inc = t
            # t > T as "every valid slot's base_val < t": one compare a slot, no choice multiplexers; an invalid
            # slot's top bits (1 against 0) make its compare true
            slots = [(src[f"valid0_{j}"], src[f"base0_{j}"]) for j in range(self._k)]
            below = Cat(Cat(t[:-1], t[-1] | ~v) > Cat(b[:-1], b[-1] & v) for v, b in slots)
            if at == 4:
                # k = 5 to 8: the AND in the compares' bank, so B4 holds the congestion bit for the shared clamp
                # of the current rate (:meth:`_candidate_rates`)
                pipe.put("cong", at, below.all(), 1)
            elif at + 1 <= DECIDE:
                okj = pipe.put("below", at, below, self._k, until=at)
                pipe.put("cong", at + 1, okj.all(), 1)
            else:
                okj = pipe.put("below", at, below, self._k, until=at)
                self._late_cong = okj.all()
        else:
            big_t = out["base"]
            w_dec, w_inc = out["rmax"], big_t
            pipe.put("cong", at, t > big_t, 1)
        pipe.put("ok", at, src["ack"] & (t != INFINITY), 1)
        # the paper variant's two windows are both 2t: one deadline serves both
        for name, w in (("dec", w_dec),) + ((("inc", w_inc),) if self._variant == "sim" else ()):
            w2 = Cat(Const(0, 1), w)
            lo = pipe.put(f"dl_{name}_lo", at, src["now"][:_HALF] + w2[:_HALF], _HALF + 1,
                          until=min(at + 1, DECIDE))
            hi = pipe.put(f"dl_{name}_w", at, w2[_HALF:], len(w2) - _HALF, until=at)
            # 48 bits: the high half's sum is 25 bits wide, and an untruncated value would shift next_inc
            # by a bit in Cat(dl_dec, dl_inc) when the deadline is formed in B6's decision (k >= 17)
            value = Cat(lo[:_HALF], pipe[at]["now"][_HALF:] + hi + lo[_HALF])[:TIME_BITS]
            if at + 1 <= DECIDE:
                pipe.put(f"dl_{name}", at + 1, value, TIME_BITS)
            else:
                self._late_dl = getattr(self, "_late_dl", {})
                self._late_dl[name] = value

    # -- the state side ---------------------------------------------------------------------------------------------

    def _window_tests(self, pipe):
        """B1: the state straight from memory. B2: the top bit of the 48-bit ``now - next`` (from one 47-bit compare)
        and, sim, ``now == next`` per window. B3: the window has passed (open, or the modular difference below 2**47;
        sim: and non-zero)."""
        pipe.put("mem", 1, self._rd_data, _state_layout(), until=3)
        dls = pipe.put("dls", 1, self._drd.data, _deadline_bits(), until=1)
        now = pipe[1]["now"]
        for n, name in enumerate(("dec", "inc")):
            nxt = dls[n * TIME_BITS:(n + 1) * TIME_BITS]
            # bit 47 of now - next: the top bits' difference and the borrow out of the 47 bits below (a compare)
            top = now[TIME_BITS - 1] ^ nxt[TIME_BITS - 1] ^ (now[:TIME_BITS - 1] < nxt[:TIME_BITS - 1])
            after = ~pipe.put(f"msb_{name}", 2, top, 1, until=2)
            if self._variant == "sim":
                after = after & ~pipe.put(f"eq_{name}", 2, now == nxt, 1, until=2)
            pipe.put(f"pass_{name}", 3, pipe[2]["mem"][f"{name}_open"] | after, 1)

    def _candidate_rates(self, pipe, lim):
        """The rates of a decrease and of an increase, from the state read (the hold-off makes it current):
        B2 the increase's expected rate before its clamp and the compare flags, B3 clamps and ``e``, B4 ``(e + cur) / 2`` (sim: and
        ``cur + 1 Gb/s``), B5 their compare flags, B6 the increase's rates."""
        n, line, low = self._n, lim["line"], lim["min"]
        st = pipe[1]["mem"]
        cur, exp, stage = st.cur, st.exp, st.stage
        half_cur = cur[1:]
        # the increase's expected rate before its clamp, 2 x exp once the stage has reached N (N + 1, sim): one
        # LUT a bit (the stage and two exp bits), so one pair of compares serves both cases
        dbl = (stage >= n) if self._variant == "paper" else (stage > n)
        x = Mux(dbl, Cat(Const(0, 1), exp), exp)
        cong4 = self._share_cur()
        cross = lim["cross"]
        flags = {"x_lo": x < low, "x_hi": (x > line) | cross, "c_lo": cur < low, "c_hi": (cur > line) | cross}
        if cong4 is None:
            flags.update({"ch_lo": half_cur < low, "ch_hi": (half_cur > line) | cross})
        for name, value in flags.items():
            pipe.put(name, 2, value, 1, until=2)
        pipe.put("x", 2, x, RATE_BITS + 1, until=2)
        pipe.put("st1", 2, Mux(stage > n, n + 1, stage + 1), STAGE_BITS)
        b2 = pipe[2]
        s2 = b2["mem"]
        pipe.put("e", 3, self._clampmux(b2["x"], b2["x_lo"], b2["x_hi"]), RATE_BITS)
        if cong4 is None:
            pipe.put("cur_dec", 3, self._clampmux(s2.cur[1:], b2["ch_lo"], b2["ch_hi"]), RATE_BITS)
        pipe.put("exp_dec", 3, self._clampmux(s2.cur, b2["c_lo"], b2["c_hi"]), RATE_BITS)
        b3 = pipe[3]
        c3 = b3["mem"].cur
        # a command's rates (current in phase 1, expected in phase 2) go through the adder as 2 x rate + 0, so the
        # increase's compare pair and clamp clamp them (the pipeline is empty then): no comparators of their own
        busy = lim["busy"]
        ctl_rate = Mux(lim["phase"][1], lim["hi"], lim["lo"])
        e_in = Mux(busy, Cat(Const(0, 1), ctl_rate), b3["e"])
        # B3's current rate is cleared while a command runs (the registers' synchronous reset, no multiplexer),
        # and it is the adder's first operand, the one its carry chain takes unchanged
        with self._m.If(busy | lim["go"]):
            self._m.d.sync += b3["mem"].cur.eq(0)
        pipe.put("half", 4, (c3 + e_in)[1:], RATE_BITS, until=5)
        if cong4 is not None:
            pipe.put("half_cur", 4, c3[1:], RATE_BITS - 1, until=4)
        if self._variant == "sim":
            pipe.put("plus", 4, c3 + SIM_FLOOR, RATE_BITS + 1, until=5)
            pipe.put("p_hi", 4, (c3 >= lim["line_less"]) | lim["cross"], 1, until=5)
            pipe.put("p_lo", 4, c3 < lim["min_less"], 1, until=5)
        b4 = pipe[4]
        if cong4 is not None:
            # the congestion bit is known in B4: one compare pair and one clamp serve the decrease's cur / 2 and
            # the increase's (e + cur) / 2
            z = Mux(cong4 & ~busy, b4["half_cur"], b4["half"])
            pipe.put("z", 5, z, RATE_BITS, until=5)
        else:
            z = b4["half"]
        # a remove's rates enter as 0 and leave the clamp as 0 (a removed flow's entry holds zeros)
        removing = busy & (lim["op"] == 2)
        pipe.put("h_lo", 5, (z < low) & ~removing, 1, until=5)
        pipe.put("h_hi", 5, ((z > line) | lim["cross"]) & ~removing, 1, until=5)
        if self._variant == "sim":
            for name, value in (("p_gt_h", b4["plus"] > b4["half"]), ("e_gt_p", b4["e"] > b4["plus"]),
                                ("e_gt_h", b4["e"] > b4["half"]), ("e_gt_min", b4["e"] > low),
                                ("e_gt_line", b4["e"] > line)):
                pipe.put(name, 5, value, 1, until=5)
        b5 = pipe[5]
        if cong4 is not None:
            pipe.put("cur_new", 6, self._clampmux(b5["z"], b5["h_lo"], b5["h_hi"]), RATE_BITS)
            pipe.put("exp_inc", 6, b5["e"], RATE_BITS)
        elif self._variant == "paper":
            pipe.put("cur_inc", 6, self._clampmux(b5["half"], b5["h_lo"], b5["h_hi"]), RATE_BITS)
            pipe.put("exp_inc", 6, b5["e"], RATE_BITS)
        else:
            pick_p = b5["p_gt_h"] & ~busy
            c_lo = Mux(pick_p, b5["p_lo"], b5["h_lo"])
            c_hi = Mux(pick_p, b5["p_hi"], b5["h_hi"])
            raw = Mux(pick_p, b5["plus"][:RATE_BITS], b5["half"])
            c = self._clampmux(raw, c_lo, c_hi)
            e_gt_c = Mux(c_hi, b5["e_gt_line"], Mux(c_lo, b5["e_gt_min"], Mux(pick_p, b5["e_gt_p"], b5["e_gt_h"])))
            pipe.put("cur_inc", 6, c, RATE_BITS)
            pipe.put("exp_inc", 6, Mux(e_gt_c, b5["e"], c), RATE_BITS)

    def _share_cur(self):
        """The paper variant's congestion bit in B4 (comb), when the trees leave it there (k <= 8), else None: then
        the decrease's cur / 2 and the increase's (e + cur) / 2 share one compare pair and one clamp."""
        at = self._levels + 1       # the bank the per-slot compares are registered in
        if self._variant != "paper" or at > 4:
            return None
        if not hasattr(self, "_cong4"):
            self._cong4 = self._pipe[4]["cong"]
        return self._cong4

    # -- hold-off, decision, write back ------------------------------------------------------------------------------

    def _history(self, m):
        """The last HOLDOFF items that left B6 (latest first): flow and adjusted; the rates they left for the
        FORWARD latest."""
        hist = [{"flow": Signal(self._fb, name=f"h{n}_flow"), "adj": Signal(name=f"h{n}_adj")}
                for n in range(HOLDOFF)]
        # entry 0's rates are RW's result registers (loaded by items only): one register for the result, the
        # write-back data and the forwarding
        hist[0].update({"cur": Signal(RATE_BITS, name="rw_rate"), "exp": Signal(RATE_BITS, name="rw_expected"),
                        "stage": Signal(STAGE_BITS, name="rw_stage")})
        for n in range(1, FORWARD):
            hist[n].update({"cur": Signal(RATE_BITS, name=f"h{n}_cur"), "exp": Signal(RATE_BITS, name=f"h{n}_exp"),
                            "stage": Signal(STAGE_BITS, name=f"h{n}_stage")})
        return hist

    def _reread(self, m, pipe, adv):
        """B4 -> B6: the state read again with the flow in B4, registered into B6 (``st``). It holds every write
        of the items ahead but the FORWARD nearest (then in B5, B6 and RW), which :meth:`_decide` forwards: the
        rates a held item reports come from memory instead of an 8-way choice from the history."""
        rd2 = self._rd2
        m.d.comb += [rd2.addr.eq(pipe[DECIDE - 2]["flow"]), rd2.en.eq(adv)]
        pipe.put("st", DECIDE, rd2.data, _state_layout())

    def _hold_matches(self, m, pipe, hist):
        """B6: per history entry, whether it is of this item's flow, compared a bank early against the history
        as it will be (the item in B6, if any, enters it as this one moves up)."""
        b5, b6 = pipe[5], pipe[DECIDE]
        ahead = [b6["flow"]] + [h["flow"] for h in hist[:-1]]
        match = Cat(Mux(b6["v"], a == b5["flow"], h["flow"] == b5["flow"]) for a, h in zip(ahead, hist))
        pipe.put("match", DECIDE, match, HOLDOFF)

    def _decide(self, m, pipe, adv, hist):
        """B6 -> RW: held (an entry of the history of this flow adjusted it), the action, the rates the item
        leaves (its own adjustment, else the holding entry's, else the state read), the state written back."""
        b6 = pipe[DECIDE]
        st = b6["st"]
        adj = Cat(h["adj"] for h in hist)
        sel = Signal(HOLDOFF, name="hold_sel")
        m.d.comb += sel.eq(b6["match"] & adj)
        held = sel != 0
        hit = st.valid
        do_dec, do_inc = Signal(name="do_dec"), Signal(name="do_inc")
        go = b6["v"] & hit & b6["ok"] & ~held
        cong = getattr(self, "_late_cong", None)
        cong = b6["cong"] if cong is None else cong
        m.d.comb += [do_dec.eq(go & cong & b6["pass_dec"]), do_inc.eq(go & ~cong & b6["pass_inc"])]
        rw = {"v": Signal(name="rw_v"), "kind": Signal(PacketKind, name="rw_kind"), "tag": Signal(TAG_BITS,
              name="rw_tag"), "flow": Signal(self._fb, name="rw_flow"), "hit": Signal(name="rw_hit"),
              "action": Signal(2, name="rw_action"), "changed": Signal(name="rw_changed"),
              "rate": hist[0]["cur"], "expected": hist[0]["exp"], "stage": hist[0]["stage"],
              "valid": Signal(name="rw_valid"), "dec_open": Signal(name="rw_dec_open"),
              "inc_open": Signal(name="rw_inc_open"),
              "dl": Signal(_deadline_bits(), name="rw_deadlines"), "dl_en": Signal(2, name="rw_deadline_en")}
        fwd = {}
        for f in ("cur", "exp", "stage"):
            # the state as the items ahead left it: memory, unless one of the FORWARD nearest adjusted it
            value = st[f]
            for n in reversed(range(FORWARD)):
                value = Mux(sel[n], hist[n][f], value)
            fwd[f] = value
        cur = Signal(RATE_BITS, name="cur_out")
        exp = Signal(RATE_BITS, name="exp_out")
        stage = Signal(STAGE_BITS, name="stage_out")
        if "cur_new" in b6:
            new_cur = b6["cur_new"]
            m.d.comb += cur.eq(Mux(do_dec | do_inc, new_cur, fwd["cur"]))
            changed = (do_dec | do_inc) & (new_cur != st.cur)
        else:
            m.d.comb += cur.eq(Mux(do_dec, b6["cur_dec"], Mux(do_inc, b6["cur_inc"], fwd["cur"])))
            changed = Mux(do_dec, b6["cur_dec"] != st.cur, do_inc & (b6["cur_inc"] != st.cur))
        m.d.comb += [
                     exp.eq(Mux(do_dec, b6["exp_dec"], Mux(do_inc, b6["exp_inc"], fwd["exp"]))),
                     stage.eq(Mux(do_dec, 0, Mux(do_inc, b6["st1"], fwd["stage"])))]
        # the result's rates, the state written back and history entry 0 (one register each), loaded by items
        # and by a create or remove (which clear the history's adjusted flags): one enable, so Yosys keeps it a
        # clock enable; after reset they hold zeros for the sweep
        lim = self._lim
        load_cur, load_exp = Signal(name="ctl_load_cur"), Signal(name="ctl_load_exp")
        clamped = b6["cur_new"] if "cur_new" in b6 else b6["cur_inc"]
        m.d.comb += [load_cur.eq((lim["phase"] == 4) & (lim["op"] != 0)),
                     load_exp.eq((lim["phase"] == 5) & (lim["op"] != 0))]
        item = adv & b6["v"]
        with m.If(item | load_cur):
            m.d.sync += [rw["rate"].eq(Mux(load_cur, clamped, cur)), rw["stage"].eq(Mux(load_cur, 0, stage))]
        with m.If(item | load_exp):
            m.d.sync += rw["expected"].eq(Mux(load_exp, clamped, exp))

        late = getattr(self, "_late_dl", None)
        dl_dec = late["dec"] if late else b6["dl_dec"]
        dl_inc = dl_dec if self._variant == "paper" else late["inc"] if late else b6["dl_inc"]
        with m.If(adv):
            m.d.sync += [rw["v"].eq(b6["v"]), rw["kind"].eq(b6["kind"]), rw["tag"].eq(b6["tag"]),
                         rw["flow"].eq(b6["flow"]), rw["hit"].eq(hit),
                         rw["action"].eq(Mux(do_dec, ACTION_DEC, Mux(do_inc, ACTION_INC, ACTION_NONE))),
                         rw["changed"].eq(changed)]
            with m.If(b6["v"]):
                # the rest of the state written back; loaded by items only, so after reset it holds zeros for the
                # sweep
                m.d.sync += [rw["valid"].eq(1), rw["dec_open"].eq(st.dec_open & ~do_dec),
                             rw["inc_open"].eq(st.inc_open & ~do_inc),
                             rw["dl"].eq(Cat(dl_dec, dl_inc)), rw["dl_en"].eq(Cat(do_dec, do_inc))]
                m.d.sync += [hist[0]["flow"].eq(b6["flow"]), hist[0]["adj"].eq(do_dec | do_inc)]
                for n in range(1, HOLDOFF):
                    m.d.sync += [hist[n][f].eq(hist[n - 1][f]) for f in hist[n]]
        return rw

    def _output(self, m, adv, pipe, rw):
        """RW: the result, straight from registers; ``adv``; the pipeline's occupancy for ``ctl``."""
        out = self.o.payload
        m.d.comb += [
            adv.eq(~rw["v"] | self.o.ready),
            self.o.valid.eq(rw["v"]),
            out.kind.eq(rw["kind"]), out.tag.eq(rw["tag"]), out.flow.eq(rw["flow"]), out.rate.eq(rw["rate"]),
            out.expected.eq(rw["expected"]), out.stage.eq(rw["stage"]), out.action.eq(rw["action"]),
            out.changed.eq(rw["changed"]), out.hit.eq(rw["hit"]),
        ]
        busy = rw["v"]
        for bank in pipe.banks:
            busy = busy | bank["v"]
        self._busy = busy

    def _write_port(self, m, wr, dwr, rw, lim, hist):
        """The memories' write ports (one address): the reset sweep, else a control write, else RW's write-back (an
        adjustment: the rates, and the deadline it set), all with RW's registers as the data. Control: the command
        is latched, its rates clamped by the increase's adder, compare pair and clamp (:meth:`_candidate_rates`),
        loaded into RW's registers, then written (seven clocks; nothing is taken meanwhile); a create or remove
        clears the history's adjusted flags. The sweep writes RW's registers as reset leaves them: zeros, flow not
        valid."""
        cmd = self.ctl.payload
        go = lim["go"]
        m.d.comb += [self.ctl.ready.eq(~self._busy & ~lim["sweep"] & ~lim["busy"]),
                     go.eq(self.ctl.valid & self.ctl.ready)]
        op, idx = lim["op"], Signal(self._fb, name="ctl_index")
        lo, hi, phase = lim["lo"], lim["hi"], lim["phase"]
        in_range = cmd.index < self._n_flows
        with m.If(go):
            m.d.sync += [op.eq(Mux(in_range & (cmd.table == TABLE_CREATE), 1,
                                   Mux(in_range & (cmd.table == TABLE_REMOVE), 2, 0))),
                         idx.eq(cmd.index[:self._fb]), lo.eq(cmd.data[:32]), hi.eq(cmd.data[32:]),
                         phase.eq(1), lim["busy"].eq(1)]
            with m.If(cmd.table == TABLE_LINE_RATE):
                m.d.sync += lim["line"].eq(cmd.data[:32])
            with m.If(cmd.table == TABLE_MIN_RATE):
                m.d.sync += lim["min"].eq(cmd.data[:32])
            with m.If(in_range & ((cmd.table == TABLE_CREATE) | (cmd.table == TABLE_REMOVE))):
                m.d.sync += [h["adj"].eq(0) for h in hist]
        with m.If(go & (cmd.table == TABLE_REMOVE)):
            # a remove's rates enter as 0 (a removed flow's entry holds zeros); outside the If above, so Yosys
            # makes it the registers' synchronous reset
            m.d.sync += [lo.eq(0), hi.eq(0)]
        # phases 1-3: the rates travel B3 -> B6 through the increase's adder, compare pair and clamp (the limits
        # set by a command have settled by the clamp); 4, 5: the clamped rates into RW (:meth:`_decide`; a create
        # or a remove only, which cleared the history's adjusted flags, as RW's rates are history entry 0's);
        # 5: the rest of the entry into RW's registers; 6: write
        with m.If(phase != 0):
            m.d.sync += phase.eq(phase + 1)
        with m.If(phase == 5):
            # a removed flow keeps rates and stage 0, as the reset sweep leaves it: a miss then reports zeros
            # straight from memory, with no multiplexer on the result
            m.d.sync += [rw["valid"].eq(op == 1), rw["dl"].eq(0), rw["dec_open"].eq(1), rw["inc_open"].eq(1)]
        with m.If(phase == 6):
            m.d.sync += [phase.eq(0), lim["busy"].eq(0)]
        m.d.comb += [wr.data.valid.eq(rw["valid"]), wr.data.dec_open.eq(rw["dec_open"]),
                     wr.data.inc_open.eq(rw["inc_open"]), wr.data.stage.eq(rw["stage"]), wr.data.cur.eq(rw["rate"]),
                     wr.data.exp.eq(rw["expected"]), dwr.data.eq(rw["dl"]), dwr.addr.eq(wr.addr)]
        with m.If(lim["sweep"]):
            m.d.comb += [wr.en.eq(1), dwr.en.eq(0b11), wr.addr.eq(lim["sweep_addr"])]
            m.d.sync += lim["sweep_addr"].eq(lim["sweep_addr"] + 1)
            with m.If(lim["sweep_addr"] == self._n_flows - 1):
                m.d.sync += lim["sweep"].eq(0)
        with m.Elif(phase == 6):
            m.d.comb += [wr.en.eq(op != 0), dwr.en.eq(Mux(op != 0, 0b11, 0)), wr.addr.eq(idx)]
        with m.Else():
            m.d.comb += [wr.en.eq(rw["v"] & (rw["action"] != ACTION_NONE)), wr.addr.eq(rw["flow"]),
                         dwr.en.eq(Mux(rw["v"], rw["dl_en"], 0))]

    def _counters(self, m, adv, rw):
        """``stats``: ACKs, misses, increases, decreases, counted as a result leaves RW (:func:`counter32`: the
        event registered, then two 16-bit halves, so a count trails its result by a clock or two)."""
        out = adv & rw["v"]
        events = (("n_acks", out), ("n_misses", out & ~rw["hit"]), ("n_increases", out & (rw["action"] == ACTION_INC)),
                  ("n_decreases", out & (rw["action"] == ACTION_DEC)))
        m.d.comb += self.stats.eq(Cat(*(counter32(m, name, event) for name, event in events)))
