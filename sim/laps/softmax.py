"""Golden model of the LAPS softmax path choice (paper 000, sections II-E, III-E, III-H).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.laps.softmax.Softmax`: the same integer arithmetic and the
same xorshift32 stream, so every decision picks the same path. Also the control plane's encoder
(:func:`softmax_commands`) and a seeded trace generator (:func:`softmax_trace`). The arithmetic is written here again
from the datasheet (docs/laps_softmax.md); only layouts and field widths come from the RTL module.
"""

import math
import random

from lbpipe.hdl.laps.softmax import check_softmax_params   # the parameter checks, shared

__all__ = ["Softmax", "softmax_commands", "softmax_trace", "softmax_bench", "exp_table", "recip_table",
           "beta_register", "xorshift32", "INFINITY", "BETA_MIN_Q", "BETA_MAX"]

INFINITY = 0xFFFF_FFFF
_TABLE_EXP, _TABLE_CONFIG, _TABLE_RECIP = 0, 1, 2
_ENTRIES, _STEP, _FRAC = 1024, 64, 4          # exp table: entry a = exp(-a / 64); 4 interpolation bits
_BETA_BITS, _BETA_SCALE = 17, 1 << 24         # beta register = round(beta * 2**24), 17 bits
_X_BITS = 26
_R_BITS = 16
_SEED_DEFAULT = 0x9E37_79B9
#: The smallest non-zero beta register value for which every difference of 2**26 ns or more has weight 0 exactly as
#: the table would give it (u = x beta >= 16 there); smaller non-zero values are refused by :func:`beta_register`.
BETA_MIN_Q = 4
#: The largest beta (per ns) the 17-bit register holds.
BETA_MAX = ((1 << _BETA_BITS) - 1) / _BETA_SCALE


def xorshift32(state):
    """One step of the xorshift32 generator (shifts 13, 17, 5)."""
    state ^= (state << 13) & 0xFFFF_FFFF
    state ^= state >> 17
    state ^= (state << 5) & 0xFFFF_FFFF
    return state


def exp_table(precision=16):
    """The exponent table the control plane writes: ``[(T, D)] * 1024`` with ``T[a] = round(2**P exp(-a/64))``
    (at most ``2**P - 1``) and ``D[a] = T[a] - T[a+1]`` (``T[1024]`` the same formula)."""
    top = (1 << precision) - 1

    def t(a):
        return min(top, round((1 << precision) * math.exp(-a / _STEP)))
    return [(t(a), t(a) - t(a + 1)) for a in range(_ENTRIES)]


def beta_register(beta=None, *, alpha=None, base_val_max=None):
    """The beta register value for ``exp(-beta d)`` (beta per ns), or for the authors' simulator's
    ``exp(-alpha d / max baseVal)`` (beta = alpha / base_val_max). Raises ``ValueError`` outside the supported range:
    0, or ``BETA_MIN_Q / 2**24`` to ``BETA_MAX`` per ns."""
    if beta is None:
        if alpha is None or not base_val_max:
            raise ValueError("give beta, or alpha and a non-zero base_val_max")
        beta = alpha / base_val_max
    if beta < 0:
        raise ValueError(f"beta must be non-negative, not {beta}")
    q = round(beta * _BETA_SCALE)
    if q >= 1 << _BETA_BITS:
        raise ValueError(f"beta {beta} per ns is above the largest the register holds ({BETA_MAX:.3g})")
    if 0 < q < BETA_MIN_Q or (q == 0 and beta > 0):
        raise ValueError(f"beta {beta} per ns is below the smallest supported non-zero beta "
                         f"({BETA_MIN_Q / _BETA_SCALE:.3g})")
    return q


def recip_table(alpha):
    """mode="sim": the reciprocal table, ``R[m] = round(alpha 2**32 / (1 + (m + 0.5) / 256))`` (32 bits; alpha
    from 0 to 1)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be 0 to 1 in mode sim, not {alpha}")
    return [min(0xFFFF_FFFF, round(alpha * 2 ** 32 / (1 + (m + 0.5) / 256))) for m in range(256)]


def softmax_commands(beta=None, *, alpha=None, base_val_max=None, seed=None, precision=16, table=True,
                     mode="paper", **params):
    """The ``ctl`` commands the control plane sends: the exponent table (unless ``table=False``, for a beta change
    alone), the beta register, and the seed when given. ``mode="sim"``: the reciprocal table for ``alpha`` instead
    of the beta register (beta = alpha / base_val_max per item)."""
    cmds = []
    if table:
        cmds += [{"table": _TABLE_EXP, "index": a, "data": t | (d << 32)}
                 for a, (t, d) in enumerate(exp_table(precision))]
    if mode == "sim":
        cmds += [{"table": _TABLE_RECIP, "index": i, "data": r} for i, r in enumerate(recip_table(alpha))]
        if seed is not None:
            cmds.append({"table": _TABLE_CONFIG, "index": 1, "data": seed & 0xFFFF_FFFF})
        return cmds
    cmds.append({"table": _TABLE_CONFIG, "index": 0, "data": beta_register(beta, alpha=alpha,
                                                                               base_val_max=base_val_max)})
    if seed is not None:
        cmds.append({"table": _TABLE_CONFIG, "index": 1, "data": seed & 0xFFFF_FFFF})
    return cmds


class Softmax:
    """The softmax path choice.

    Parameters
    ----------
    k : int
        Candidate slots per item.
    precision : int
        Weight width P.
    """

    def __init__(self, *, k=8, precision=16, mode="paper"):
        check_softmax_params(k=k, precision=precision, mode=mode)
        self.k = k
        self.precision = precision
        self.mode = mode
        self.recip = [0] * 256
        self.table = [(0, 0)] * _ENTRIES
        self.beta_q = 0
        self.seed = _SEED_DEFAULT
        self.state = _SEED_DEFAULT

    def reset(self):
        """Hardware reset: the pipeline empties and the generator restarts from the last seed written; the table,
        beta and the seed are control-plane state and keep their values."""
        self.state = self.seed

    def control(self, cmd):
        """Apply one ``{"table", "index", "data"}`` command; others are ignored."""
        table, index, data = cmd["table"], cmd["index"], cmd["data"]
        p = self.precision
        if table == _TABLE_EXP and index < _ENTRIES:
            self.table[index] = (data & ((1 << p) - 1), (data >> 32) & ((1 << (p - 4)) - 1))
        elif table == _TABLE_RECIP and index < 256:
            self.recip[index] = data & 0xFFFF_FFFF
        elif table == _TABLE_CONFIG and index == 0:
            self.beta_q = data & ((1 << _BETA_BITS) - 1)
        elif table == _TABLE_CONFIG and index == 1:
            self.seed = (data & 0xFFFF_FFFF) or _SEED_DEFAULT
            self.state = self.seed

    def weights(self, item):
        """``(ok, weights, fastest)``: the valid mask, the P-bit weights and the fastest valid slot (lowest on
        ties; 0 when none is valid)."""
        k, p = self.k, self.precision
        ok = [bool(item[f"valid_{i}"]) and item[f"real_val_{i}"] != INFINITY for i in range(k)]
        d = [item[f"real_val_{i}"] if ok[i] else INFINITY for i in range(k)]
        d_min = min(d)
        fastest = d.index(d_min)
        beta_q = self.item_beta(item["base_val_max"]) if self.mode == "sim" else self.beta_q
        w = []
        for i in range(k):
            x = d[i] - d_min
            u = (x % (1 << _X_BITS)) * beta_q               # u * 2**24
            frac = (u >> 14) & 0xF
            addr = (u >> 18) % _ENTRIES
            if not ok[i] or (x >> _X_BITS and beta_q) or u >> 28:
                w.append(0)
                continue
            t, dd = self.table[addr]
            w.append((t - ((dd * frac) >> _FRAC)) % (1 << p))
        return ok, w, fastest

    def item_beta(self, base):
        """mode="sim": the beta register value for a destination whose largest baseVal is ``base``: the reciprocal
        table at the 8 bits below the leading one of ``base``, shifted right by 8 plus its position, at most
        ``2**17 - 1``; 0 for ``base = 0``."""
        if base == 0:
            return 0
        p = base.bit_length() - 1
        r = self.recip[((base << 8) >> p) & 0xFF]
        return min((1 << _BETA_BITS) - 1, (r >> 8) >> p)

    @staticmethod
    def _pick(w, fastest, r):
        total = sum(w)
        key = (r * total) >> _R_BITS
        acc = 0
        for i, wi in enumerate(w):
            acc += wi
            if key < acc:
                return i
        return fastest

    def process(self, item):
        """One decision: ``{"slot", "pid", "none", "tag"}``. Every item draws one number from the generator."""
        ok, w, fastest = self.weights(item)
        self.state = xorshift32(self.state)
        r = self.state >> (32 - _R_BITS)
        out = {"slot": 0, "pid": 0, "none": 0, "tag": item["tag"]}
        if not any(ok):
            out["none"] = 1
            return out
        slot = self._pick(w, fastest, r)
        out.update(slot=slot, pid=item[f"pid_{slot}"])
        return out

    def probabilities(self, item):
        """The exact probability of each slot over the 2**16 values of r (what the hardware's arithmetic gives,
        before the generator's own bias); all zero when no slot is valid."""
        ok, w, fastest = self.weights(item)
        counts = [0] * self.k
        if any(ok):
            for r in range(1 << _R_BITS):
                counts[self._pick(w, fastest, r)] += 1
        return [c / (1 << _R_BITS) for c in counts]


def _random_item(rng, k, tag):
    item = {"tag": tag}
    style = rng.random()
    base = rng.choice([0, rng.randrange(1 << 12), rng.randrange(1 << 20), rng.randrange(1 << 31)])
    for i in range(k):
        valid = int(rng.random() < 0.85)
        if style < 0.1:
            rv = base                                            # all equal
        elif style < 0.2:
            rv = min(INFINITY, base + rng.randrange(1 << 30))    # very spread
        else:
            rv = min(INFINITY, base + rng.randrange(1 << rng.choice([8, 12, 14, 16])))
        if rng.random() < 0.05:
            rv = INFINITY
        item[f"valid_{i}"] = valid
        item[f"pid_{i}"] = rng.randrange(1 << 16)
        item[f"real_val_{i}"] = rv
    if style > 0.97:
        for i in range(k):
            item[f"valid_{i}"] = 0                               # no valid path
    item["base_val_max"] = rng.randrange(1 << 32)
    return item


def softmax_trace(seed, n_items, *, k=8, precision=16, mode="paper", **params):
    """A seeded random trace: the table (all of it from 8,192 items, else part), beta (mode sim: the reciprocal
    table, likewise) and a seed, then items (ties, infinities, invalid slots, spread latencies), with beta changes,
    seed changes and a forged table entry."""
    rng = random.Random(seed)
    betas = [0.0, 1 / 4664, 1 / 300, 1 / 20000, 7e-3]
    if mode == "sim":
        setup = softmax_commands(alpha=rng.choice([1.0, 0.5, 0.25]), seed=rng.randrange(1 << 32),
                                 precision=precision, mode="sim")
    else:
        setup = softmax_commands(rng.choice(betas[1:]), seed=rng.randrange(1 << 32), precision=precision)
    # A short trace writes only part of the tables (exponent entries 0 to 15 and a random sample, reciprocal entries
    # a random sample; the others stay 0, so a slot landing there gets weight 0 and a destination whose reciprocal
    # entry is 0 gets beta 0): the reset tests cut a trace in its middle half, which must fall among the items.
    n_table = min(1024, max(16, n_items // 8))
    keep = set(range(16)) | set(rng.sample(range(1024), n_table - 16)) if n_table < 1024 else set(range(1024))
    bases = [0, 100, 300, 1000, 4664, 30000, 1 << 20]
    keep_recip = set(rng.sample(range(256), min(256, max(8, n_items // 16)))) if n_items < 8192 else set(range(256))
    keep_recip |= {((b << 8) >> (b.bit_length() - 1)) & 0xFF for b in bases if b}   # the usual destinations'
    events = [{"ctl": c} for c in setup if (c["table"] != 0 or c["index"] in keep)
              and (c["table"] != 2 or c["index"] in keep_recip)]
    for n in range(n_items):
        if n and n % 150 == 0:
            if mode == "sim":
                events += [{"ctl": {"table": 2, "index": rng.randrange(256), "data": rng.randrange(1 << 32)}}
                           for _ in range(3)]
            else:
                events += [{"ctl": c} for c in softmax_commands(rng.choice(betas), precision=precision, table=False)]
        if n and n % 230 == 0:
            events.append({"ctl": {"table": 1, "index": 1, "data": rng.choice([0, rng.randrange(1 << 32)])}})
        if n == 333:
            events.append({"ctl": {"table": 0, "index": rng.randrange(4), "data": rng.randrange(1 << 64)}})
            events.append({"ctl": {"table": 7, "index": 3, "data": 5}})          # unknown table: ignored
        item = _random_item(rng, k, n & 0xFFFF)
        if mode == "sim":
            item["base_val_max"] = rng.choice(bases + [rng.randrange(1 << 32), rng.randrange(100, 100_000)])
        events.append({"item": item})
    return events


def softmax_bench(*, k=8, precision=16, n_items=2000, mode="paper", **params):
    """``lbpipe bench``: the table, beta = 1/4664 per ns (mode sim: alpha = 1) and a seed, then ``n_items``
    decisions back to back."""
    rng = random.Random(1)
    events = [{"ctl": c} for c in softmax_commands(1 / 4664, alpha=1.0, seed=1, precision=precision, mode=mode)]
    events += [{"item": _random_item(rng, k, n & 0xFFFF)} for n in range(n_items)]
    return events
