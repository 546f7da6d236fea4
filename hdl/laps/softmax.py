"""LAPS softmax path choice (paper 000, sections II-E, III-E, III-H "Implementing the Softmax function").

Chooses one of ``k`` candidate paths with probability ``exp(-beta d_i) / sum_j exp(-beta d_j)`` over the valid
paths, one decision per clock, fully pipelined (datasheet: docs/laps_softmax.md).

Arithmetic (the choices made where the paper is silent):

* Shift invariance: every weight is taken relative to the fastest valid path, ``x_i = d_i - d_min``, found by a
  one-hot comparison matrix (one comparator per pair, then an AND per path), so the fastest path always has weight
  ``2**P - 1`` and a decision never loses all its weight because every path is slow. The 32-bit comparisons and
  subtracts are split into 16-bit halves so that no stage has more than 4 logic levels.
* ``u_i = beta x_i`` by one DSP multiply per path: ``x_i`` (26 bits, larger differences saturate to weight 0) times
  the control-plane register ``beta_q = round(beta * 2**24)`` (17 bits). The paper precomputes ``e**beta`` instead;
  here beta is one register, so a beta change is a single atomic write.
* ``exp(-u)`` from one 1,024-entry table per path (``T[a] = exp(-a / 64)`` in ``P`` bits and the difference ``D[a] =
  T[a] - T[a+1]``), filled through ``ctl``, with linear interpolation on 4 fraction bits done by shifts and adds in
  the fabric (no DSP); ``u >= 16`` gives weight 0.
* No divider: prefix sums ``S_i`` of the weights, a 16-bit uniform ``r`` from a xorshift32 generator, one DSP multiply
  ``r * S_k`` and the first slot with ``(r * S_k) >> 16 < S_i`` wins.
* ``mode="sim"`` (the authors' simulator): beta is formed per item as ``alpha 2**24 / base_val_max`` from a
  256-entry reciprocal table (filled through ``ctl`` for alpha) and a shift, beside stages S1 to S6.
* Reset empties the pipeline and restarts the generator from the last seed written; the tables, beta and the seed
  are control-plane state and are kept. A beta write is atomic per decision (all slots of a decision use one beta).
"""

from amaranth import Cat, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import TAG_BITS

__all__ = ["Softmax", "SoftmaxItem", "SoftmaxResult", "check_softmax_params", "INFINITY", "TABLE_EXP",
           "TABLE_CONFIG", "TABLE_RECIP", "RECIP_BITS", "MODES", "CONFIG_BETA", "CONFIG_SEED", "EXP_ENTRIES",
           "EXP_STEP_BITS", "FRAC_BITS", "BETA_BITS", "BETA_FRAC_BITS", "X_BITS", "R_BITS", "SEED_DEFAULT", "d_bits",
           "prefix_stages"]

#: real_val meaning "no measurement / never choose" (docs/laps_iface.md convention).
INFINITY = 0xFFFF_FFFF
TABLE_EXP = 0
TABLE_CONFIG = 1
#: mode="sim": the reciprocal table, 256 entries of 32 bits, entry m = alpha * 2**32 / (1 + (m + 0.5) / 256).
TABLE_RECIP = 2
RECIP_BITS = 8
MODES = ("paper", "sim")
CONFIG_BETA = 0
CONFIG_SEED = 1
#: Exponent table: EXP_ENTRIES entries, entry a holds exp(-a / 2**EXP_STEP_BITS).
EXP_ENTRIES = 1024
EXP_STEP_BITS = 6
#: Interpolation fraction bits below the table step.
FRAC_BITS = 4
#: beta register: BETA_BITS unsigned, value beta * 2**BETA_FRAC_BITS (per ns).
BETA_BITS = 17
BETA_FRAC_BITS = 24
#: Latency differences at or above 2**X_BITS ns get weight 0.
X_BITS = 26
#: Width of the uniform random number of a decision.
R_BITS = 16
#: xorshift32 state after power-up, and what a seed of 0 is replaced by (the state must never be 0).
SEED_DEFAULT = 0x9E37_79B9


def d_bits(precision):
    """Width of the stored table difference D."""
    return precision - 4


def check_softmax_params(*, k=8, precision=16, mode="paper"):
    """Raise ``TypeError``/``ValueError`` unless k is 1 to 16, precision 8 to 20 and mode one of MODES (shared with
    the golden model)."""
    check_int("k", k)
    check_int("precision", precision)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if not 1 <= k <= 16:
        raise ValueError(f"k must be 1 to 16, not {k}")
    if not 8 <= precision <= 20:
        raise ValueError(f"precision must be 8 to 20 bits, not {precision}")


def prefix_stages(k):
    """Pipeline stages of the prefix sums of ``k`` weights."""
    return max(1, (k - 1).bit_length())


def _slot_bits(k):
    return max(1, (k - 1).bit_length())


def SoftmaxItem(*, k=8):
    """Input item: ``k`` PIT slots (``valid_i``, ``pid_i``, ``real_val_i`` in ns), the destination's largest
    ``base_val`` (carried for the control plane's record; see the datasheet) and the pass-through ``tag``."""
    fields = {}
    for i in range(k):
        fields[f"valid_{i}"] = 1
        fields[f"pid_{i}"] = 16
        fields[f"real_val_{i}"] = 32
    fields["base_val_max"] = 32
    fields["tag"] = TAG_BITS
    return data.StructLayout(fields)


def SoftmaxResult(*, k=8):
    """Result: the chosen ``slot`` and its ``pid``; ``none`` = 1 when no slot was valid (slot and pid 0)."""
    return data.StructLayout({"slot": _slot_bits(k), "pid": 16, "none": 1, "tag": TAG_BITS})


class Softmax(wiring.Component):
    """Softmax path choice, one decision per clock.

    Parameters
    ----------
    k : int
        Candidate paths per decision, 1 to 16.
    precision : int
        Weight width P in bits (weights are Q0.P), 8 to 20.
    mode : str
        ``"paper"`` (beta from the table-1 register) or ``"sim"`` (beta = alpha / base_val_max per item).

    Members
    -------
    i : In(stream.Signature(SoftmaxItem))
    o : Out(stream.Signature(SoftmaxResult))
    ctl : In(ControlSignature())
        Table 0 (exponent): entry ``index`` (0 to 1,023) gets ``T = data[0:P]`` and ``D = data[32:32+P-4]``, written
        into every path's copy at once. Table 1 (config): index 0 ``beta_q = data[0:17]``; index 1 the random seed
        ``data[0:32]`` (0 means 0x9E3779B9), which also restarts the generator. Table 2 (mode sim): reciprocal entry
        ``index`` (0 to 255) gets ``data[0:32]``. Others are ignored. Table 0 writes
        apply at once, table 1 writes one cycle after acceptance: a decision in flight uses the beta register of
        the cycle it reaches the multiplier and the table of the cycle it reads it (docs/laps_softmax.md).
    """

    def __init__(self, *, k=8, precision=16, mode="paper"):
        check_softmax_params(k=k, precision=precision, mode=mode)
        self._k = k
        self._p = precision
        self._mode = mode
        super().__init__({
            "i":   In(stream.Signature(SoftmaxItem(k=k))),
            "o":   Out(stream.Signature(SoftmaxResult(k=k))),
            "ctl": In(ControlSignature()),
        })

    @property
    def k(self):
        return self._k

    @property
    def precision(self):
        return self._p

    @property
    def mode(self):
        return self._mode

    @property
    def latency(self):
        """Cycles from an item's acceptance to its result on ``o``: 13 stages to the weights, the prefix stages,
        then ``r * S``, the comparisons and the output register."""
        return 13 + prefix_stages(self._k) + 3

    # -- stages -----------------------------------------------------------------------------------------------------

    def _stage_mask(self, m, adv, p):
        """S1 registers the latencies, the valid mask (valid and not infinite), the pids and the tag."""
        k = self._k
        d = [Signal(32, name=f"s1_d{i}") for i in range(k)]
        ok = Signal(k, name="s1_ok")
        pid = [Signal(16, name=f"s1_pid{i}") for i in range(k)]
        with m.If(adv):
            for i in range(k):
                good = p[f"valid_{i}"] & (p[f"real_val_{i}"] != INFINITY)
                m.d.sync += [d[i].eq(p[f"real_val_{i}"]), ok[i].eq(good), pid[i].eq(p[f"pid_{i}"])]
        return d, ok, pid

    def _stage_compare(self, m, adv, d):
        """S2 registers, per pair a < b, ``d_b < d_a`` in halves: high halves less and equal, low halves less (16-bit
        carry chains); returns ``lt[(a, b)]``, the full comparison formed from them."""
        k = self._k
        lt = {}
        for a in range(k):
            for b in range(a + 1, k):
                hi_lt, hi_eq, lo_lt = (Signal(name=f"s2_{what}{b}_{a}") for what in ("hlt", "heq", "llt"))
                with m.If(adv):
                    m.d.sync += [hi_lt.eq(d[b][16:] < d[a][16:]), hi_eq.eq(d[b][16:] == d[a][16:]),
                                 lo_lt.eq(d[b][:16] < d[a][:16])]
                lt[(a, b)] = hi_lt | (hi_eq & lo_lt)
        return lt

    def _stage_first(self, m, adv, lt, ok):
        """S3 registers the one-hot fastest valid slot (lowest slot on ties; 0 when none is valid): an invalid slot
        loses every comparison."""
        k = self._k
        onehot = Signal(k, name="s3_first")
        with m.If(adv):
            for i in range(k):
                terms = ([lt[(j, i)] | ~ok[j] for j in range(i)] + [~lt[(i, j)] | ~ok[j] for j in range(i + 1, k)]
                         + [ok[i]])
                m.d.sync += onehot[i].eq(Cat(*terms).all())
        return onehot

    def _stage_min(self, m, adv, d, onehot):
        """S4 registers the fastest valid latency ``d_min`` (AND-OR multiplexer on the one-hot slot)."""
        d_min = Signal(32, name="s4_dmin")
        sel = 0
        for i in range(self._k):
            sel = sel | Mux(onehot[i], d[i], 0)
        with m.If(adv):
            m.d.sync += d_min.eq(sel)
        return d_min

    def _stage_diff(self, m, adv, d, d_min):
        """S5 registers the low halves of ``x_i = d_i - d_min`` with their borrows (and the high halves of both
        operands); S6 ``x_i`` (an invalid slot's value is masked later)."""
        k = self._k
        x = [Signal(32, name=f"s6_x{i}") for i in range(k)]
        for i in range(k):
            lo = Signal(17, name=f"s5_xlo{i}")
            dh, mh = Signal(16, name=f"s5_dhi{i}"), Signal(16, name=f"s5_mhi{i}")
            with m.If(adv):
                m.d.sync += [lo.eq(d[i][:16] - d_min[:16]), dh.eq(d[i][16:]), mh.eq(d_min[16:]),
                             x[i].eq(Cat(lo[:16], dh - mh - lo[16]))]
        return x

    def _item_beta(self, m, adv, base):
        """mode="sim": ``beta_q = alpha 2**24 / base_val_max`` per item, ready for S7. S1 registers B and the
        position p of its leading one; S2 the 8 bits below it (m); S3 reads the reciprocal table R at m (the
        memory's address register), S4 registers R; S5 ``(R >> 8) >> 4 p[4:2]``; S6 that ``>> p[1:0]``, saturated
        to 17 bits (0 when B = 0), which S7 takes as the multiplier's beta."""
        b2 = Signal(32, name="s1_base")
        p2, p3, p4, p5, p6 = (Signal(5, name=f"s{s}_lead") for s in range(1, 6))
        z2, z3, z4, z5, z6 = (Signal(name=f"s{s}_bzero") for s in range(1, 6))
        lead = Signal(5, name="lead_one")
        for j in range(32):
            with m.If(base[j]):
                m.d.comb += lead.eq(j)
        mant = Signal(RECIP_BITS, name="s2_mant")
        norm = Signal(32 + RECIP_BITS, name="base_norm")
        m.d.comb += norm.eq(Cat(Signal(RECIP_BITS), b2) >> p2)
        mem = memory.Memory(shape=32, depth=1 << RECIP_BITS, init=[])
        m.submodules.recip = mem
        wr = mem.write_port()
        rd = mem.read_port()
        c = self.ctl.payload
        m.d.comb += [
            wr.addr.eq(c.index[:RECIP_BITS]), wr.data.eq(c.data[:32]),
            wr.en.eq(self.ctl.valid & (c.table == TABLE_RECIP) & (c.index < (1 << RECIP_BITS))),
            rd.addr.eq(mant), rd.en.eq(adv),
        ]
        r5 = Signal(24, name="s4_recip")
        r6 = Signal(24, name="s5_recip")
        with m.If(adv):
            m.d.sync += [
                b2.eq(base), p2.eq(lead), z2.eq(base == 0),
                mant.eq(norm[:RECIP_BITS]), p3.eq(p2), z3.eq(z2),
                p4.eq(p3), z4.eq(z3),
                r5.eq(rd.data[8:]), p5.eq(p4), z5.eq(z4),
                r6.eq(r5 >> Cat(Signal(2), p5[2:])), p6.eq(p5), z6.eq(z5),
            ]
        shifted = Signal(24, name="recip_shifted")
        m.d.comb += shifted.eq(r6 >> p6[:2])
        beta = Signal(BETA_BITS, name="s6_item_beta")
        with m.If(adv):
            m.d.sync += beta.eq(Mux(z6, 0, Mux(shifted[BETA_BITS:].any(), (1 << BETA_BITS) - 1,
                                               shifted[:BETA_BITS])))
        return beta

    def _stage_dsp_in(self, m, adv, x, beta):
        """S7 registers the multiplier inputs (low 26 bits of x, beta) and whether x saturates (x >= 2**26 with a
        non-zero beta, where u >= 16 for every supported beta; at beta 0 every weight is exp(0))."""
        k = self._k
        xl = [Signal(X_BITS, name=f"s7_x{i}") for i in range(k)]
        big = Signal(k, name="s7_big")
        b = [Signal(BETA_BITS, name=f"s7_beta{i}") for i in range(k)]
        with m.If(adv):
            for i in range(k):
                m.d.sync += [xl[i].eq(x[i][:X_BITS]), big[i].eq(x[i][X_BITS:].any() & beta.any()), b[i].eq(beta)]
        return xl, big, b

    def _stage_mul(self, m, adv, xl, b, big):
        """S8 registers ``u_i * 2**24 = x_i * beta_q`` (a DSP each, fabric registers on both sides)."""
        prod = [Signal(X_BITS + BETA_BITS, name=f"s8_u{i}") for i in range(self._k)]
        big6 = Signal(self._k, name="s8_big")
        with m.If(adv):
            m.d.sync += [prod[i].eq(xl[i] * b[i]) for i in range(self._k)]
            m.d.sync += big6.eq(big)
        return prod, big6

    def _stage_lookup(self, m, adv, prod, big):
        """S9 reads the exponent tables (the block RAM's address register); S10 registers their output, the
        interpolation fraction and whether the weight is 0."""
        k, p = self._k, self._p
        low = BETA_FRAC_BITS - EXP_STEP_BITS - FRAC_BITS
        abits = (EXP_ENTRIES - 1).bit_length()
        t = [Signal(p, name=f"s10_t{i}") for i in range(k)]
        dd = [Signal(d_bits(p), name=f"s10_d{i}") for i in range(k)]
        frac7 = [Signal(FRAC_BITS, name=f"s9_f{i}") for i in range(k)]
        zero7 = Signal(k, name="s9_zero")
        frac = [Signal(FRAC_BITS, name=f"s10_f{i}") for i in range(k)]
        zero = Signal(k, name="s10_zero")
        wr_en = (self.ctl.valid & (self.ctl.payload.table == TABLE_EXP) & (self.ctl.payload.index < EXP_ENTRIES))
        for i in range(k):
            mem = memory.Memory(shape=p + d_bits(p), depth=EXP_ENTRIES, init=[])
            m.submodules[f"exp{i}"] = mem
            wr = mem.write_port()
            rd = mem.read_port()
            m.d.comb += [
                wr.addr.eq(self.ctl.payload.index[:abits]),
                wr.data.eq(Cat(self.ctl.payload.data[:p], self.ctl.payload.data[32:32 + d_bits(p)])),
                wr.en.eq(wr_en),
                rd.addr.eq(prod[i][low + FRAC_BITS:low + FRAC_BITS + abits]),
                rd.en.eq(adv),
            ]
            with m.If(adv):
                m.d.sync += [
                    frac7[i].eq(prod[i][low:low + FRAC_BITS]),
                    zero7[i].eq(big[i] | prod[i][low + FRAC_BITS + abits:].any()),
                    frac[i].eq(frac7[i]), zero[i].eq(zero7[i]),
                    t[i].eq(rd.data[:p]), dd[i].eq(rd.data[p:]),
                ]
        return t, dd, frac, zero

    def _stage_interp(self, m, adv, t, dd, frac, zero, ok):
        """S11 registers two partial products of ``D * f``; S12 their sum; S13 the weight ``T - (D f >> 4)`` (0 for
        an invalid slot or a saturated exponent, modulo 2**P for a forged table)."""
        k, p = self._k, self._p
        w = [Signal(p, name=f"s13_w{i}") for i in range(k)]
        for i in range(k):
            f = frac[i]
            pa = Signal(d_bits(p) + 2, name=f"s11_pa{i}")
            pb = Signal(d_bits(p) + 2, name=f"s11_pb{i}")
            acc = Signal(d_bits(p) + FRAC_BITS, name=f"s12_df{i}")
            t9, t10 = Signal(p, name=f"s11_t{i}"), Signal(p, name=f"s12_t{i}")
            z9, z10 = Signal(name=f"s11_z{i}"), Signal(name=f"s12_z{i}")
            with m.If(adv):
                m.d.sync += [
                    pa.eq(Mux(f[0], dd[i], 0) + Mux(f[1], dd[i] << 1, 0)),
                    pb.eq(Mux(f[2], dd[i], 0) + Mux(f[3], dd[i] << 1, 0)),
                    t9.eq(t[i]), z9.eq(zero[i] | ~ok[i]),
                    acc.eq(pa + (pb << 2)), t10.eq(t9), z10.eq(z9),
                    w[i].eq(Mux(z10, 0, t10 - (acc >> FRAC_BITS))),
                ]
        return w

    def _stage_prefix(self, m, adv, w):
        """S14 .. S13+n register the prefix sums ``S_i = w_0 + .. + w_i``, a Sklansky prefix: in stage j every slot
        with bit j set adds the running sum of the block below it (``n = ceil(log2 k)``, at least 1; k/2 adders a
        stage)."""
        k, p = self._k, self._p
        sbits = p + (k - 1).bit_length()
        cur = list(w)
        for j in range(prefix_stages(k)):
            nxt = [Signal(sbits, name=f"pre{j}_{i}") for i in range(k)]
            with m.If(adv):
                for i in range(k):
                    src = ((i >> j) << j) - 1
                    m.d.sync += nxt[i].eq(cur[i] + cur[src] if (i >> j) & 1 else cur[i])
            cur = nxt
        return cur

    def _stage_choose(self, m, adv, prefix, r, first):
        """S14+n registers ``r * S_k`` (a DSP, inputs registered in S13+n); the next stage the comparisons
        ``below_i = (r S_k) >> 16 < S_i``; returns the one-hot choice for the output register: the first slot with
        ``below_i`` (``below`` is monotone, the prefix sums never decrease, so that is ``below_i & ~below_{i-1}``),
        or the fastest slot when none is below (every weight 0); all zero when no slot is valid."""
        k = self._k
        total = prefix[-1]
        rs = Signal(R_BITS + len(total), name="s17_rs")
        pre = [Signal(len(total), name=f"s17_pre{i}") for i in range(k)]
        below = Signal(k, name="s18_below")
        with m.If(adv):
            m.d.sync += rs.eq(r * total)
            m.d.sync += [pre[i].eq(prefix[i]) for i in range(k)]
            m.d.sync += [below[i].eq(rs[R_BITS:] < pre[i]) for i in range(k)]
        choice = Signal(k, name="choice")
        for i in range(k):
            starts = below[i] & ~below[i - 1] if i else below[i]
            m.d.comb += choice[i].eq(starts | (~below[k - 1] & first[i]))
        return choice

    # -- the pipeline -----------------------------------------------------------------------------------------------

    def elaborate(self, platform):
        m = Module()
        k = self._k
        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv), self.ctl.ready.eq(1)]

        beta = Signal(BETA_BITS)
        seed = Signal(32, init=SEED_DEFAULT, reset_less=True)
        rng = Signal(32, init=SEED_DEFAULT, reset_less=True)   # reset reloads it from the seed register
        cfg = self._config_write(m)
        # beta is a control-plane register: it keeps its value through reset, like the tables.
        beta_keep = Signal(BETA_BITS, reset_less=True)
        m.d.comb += beta.eq(beta_keep)
        with m.If(cfg["beta_we"]):
            m.d.sync += beta_keep.eq(cfg["value"][:BETA_BITS])

        # valid bits and the side fields that travel along the stages
        n_stages = self.latency
        v = [Signal(name=f"v{s}") for s in range(1, n_stages + 1)]
        with m.If(adv):
            m.d.sync += v[0].eq(self.i.valid)
            m.d.sync += [v[s].eq(v[s - 1]) for s in range(1, n_stages - 1)]
        tags = [self.i.payload.tag] + [Signal(TAG_BITS, name=f"tag{s}") for s in range(1, n_stages)]
        oks = [None] + [Signal(k, name=f"ok{s}") for s in range(1, n_stages)]
        with m.If(adv):
            m.d.sync += [tags[s].eq(tags[s - 1]) for s in range(1, n_stages)]
            m.d.sync += [oks[s].eq(oks[s - 1]) for s in range(2, n_stages)]

        d, ok, pid1 = self._stage_mask(m, adv, self.i.payload)
        m.d.comb += oks[1].eq(ok)
        lt = self._stage_compare(m, adv, d)
        d_at = {1: d}
        for s in range(2, 5):            # the latencies wait beside the comparisons until S4
            d_at[s] = [Signal(32, name=f"s{s}_d{i}") for i in range(k)]
            with m.If(adv):
                m.d.sync += [d_at[s][i].eq(d_at[s - 1][i]) for i in range(k)]
        first3 = self._stage_first(m, adv, lt, oks[2])
        d_min = self._stage_min(m, adv, d_at[3], first3)
        x = self._stage_diff(m, adv, d_at[4], d_min)
        if self._mode == "sim":
            beta = self._item_beta(m, adv, self.i.payload.base_val_max)
        xl, big, b = self._stage_dsp_in(m, adv, x, beta)
        prod, big = self._stage_mul(m, adv, xl, b, big)
        t, dd, frac, zero = self._stage_lookup(m, adv, prod, big)
        w = self._stage_interp(m, adv, t, dd, frac, zero, oks[10])
        prefix = self._stage_prefix(m, adv, w)

        # The pids and the fastest slot wait in a shift register beside the arithmetic (S1 .. S16).
        pid_bits = Signal(16 * k, name="pid1")
        m.d.comb += pid_bits.eq(Cat(*pid1))
        pid_pipe = [pid_bits]
        first_pipe = {3: first3}
        for s in range(2, n_stages):
            nxt = Signal(16 * k, name=f"pid{s}")
            with m.If(adv):
                m.d.sync += nxt.eq(pid_pipe[-1])
            pid_pipe.append(nxt)
        for s in range(4, n_stages):
            nxt = Signal(k, name=f"first{s}")
            with m.If(adv):
                m.d.sync += nxt.eq(first_pipe[s - 1])
            first_pipe[s] = nxt

        # One draw of the generator per item, as it enters S15 (where r * S is formed).
        last = n_stages - 1
        # the item entering the last prefix stage draws r (v[s - 1] is stage s's valid bit)
        r = self._xorshift(m, adv, v[n_stages - 5], rng, seed, cfg)
        choice = self._stage_choose(m, adv, prefix, r, first_pipe[last])
        none = Signal(name=f"none{last}")
        slot = 0
        pid = 0
        for i in range(k):
            slot = slot | Mux(choice[i], i, 0)
            pid = pid | Mux(choice[i], pid_pipe[-1][16 * i:16 * (i + 1)], 0)
        out = self.o.payload
        with m.If(adv):
            m.d.sync += [
                none.eq(~oks[last - 1].any()),
                self.o.valid.eq(v[last - 1]),
                out.tag.eq(tags[last]),
                out.none.eq(none),
                out.slot.eq(slot),
                out.pid.eq(pid),
            ]
        return m

    def _config_write(self, m):
        """Registers a table-1 write (decoded, and the seed with 0 replaced) so it applies one cycle after the
        command is accepted, keeping the decode off the generator's and beta's paths."""
        p = self.ctl.payload
        cfg = self.ctl.valid & (p.table == TABLE_CONFIG)
        out = {"beta_we": Signal(name="cfg_beta_we"), "seed_we": Signal(name="cfg_seed_we"),
               "value": Signal(32, name="cfg_value"), "seed": Signal(32, name="cfg_seed")}
        m.d.sync += [
            out["beta_we"].eq(cfg & (p.index == CONFIG_BETA)),
            out["seed_we"].eq(cfg & (p.index == CONFIG_SEED)),
            out["value"].eq(p.data[:32]),
            out["seed"].eq(Mux(p.data[:32] == 0, SEED_DEFAULT, p.data[:32])),
        ]
        return out

    def _xorshift(self, m, adv, take, rng, seed, cfg):
        """The xorshift32 generator: steps once per item that enters the last prefix stage; a seed write (or
        reset) restarts it."""
        a = rng ^ (rng << 13)[:32]
        b = a ^ (a >> 17)
        nxt = Signal(32, name="rng_next")
        m.d.comb += nxt.eq(b ^ (b << 5)[:32])
        r = Signal(R_BITS, name="s16_r")
        with m.If(ResetSignal()):
            m.d.sync += rng.eq(seed)
        with m.Elif(cfg["seed_we"]):
            m.d.sync += [seed.eq(cfg["seed"]), rng.eq(cfg["seed"])]
        with m.Elif(adv & take):
            m.d.sync += rng.eq(nxt)
        with m.If(adv):
            m.d.sync += r.eq(nxt[32 - R_BITS:])
        return r
