"""Residue of an unsigned value modulo a constant N (1 to 256), pipelined, for PSN-to-path arithmetic.

Themis needs ``PSN mod N`` for any N up to 256, not only powers of two. A divider is far too deep for one clock, so
the value is split into 8-bit digits; each digit's contribution ``(digit << 8k) mod N`` comes from a 256-entry
constant table (LUT ROM), and the partial residues are summed and reduced with conditional subtractions.
For a power-of-two N the residue is the low bits, with the same latency so callers need not care.
"""

from amaranth import Array, C, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ModN", "residue_bits"]


def residue_bits(n):
    """Width of a residue modulo ``n`` (at least 1)."""
    return max(1, (n - 1).bit_length())


class ModN(wiring.Component):
    """``o = i mod n``, ``latency`` clock cycles after ``i`` while ``en`` is high (a stall-able pipeline).

    Parameters
    ----------
    width : int
        Width of the input.
    n : int
        The modulus, 1 to 256.

    Members
    -------
    i : In(width)
    en : In(1)
        Pipeline advance; when low every stage holds.
    o : Out(residue_bits(n))
    """

    latency = 2

    def __init__(self, *, width, n):
        if not isinstance(width, int) or width < 1:
            raise TypeError(f"width must be a positive integer, not {width!r}")
        if not isinstance(n, int) or not 1 <= n <= 256:
            raise ValueError(f"n must be an integer from 1 to 256, not {n!r}")
        self._width = width
        self._n = n
        super().__init__({"i": In(width), "en": In(1), "o": Out(residue_bits(n))})

    @property
    def n(self):
        return self._n

    def elaborate(self, platform):
        m = Module()
        n, rb = self._n, residue_bits(self._n)
        if n & (n - 1) == 0:
            s1 = Signal(rb)
            with m.If(self.en):
                m.d.sync += [s1.eq(self.i[:rb] if n > 1 else 0), self.o.eq(s1)]
            return m
        digits = (self._width + 7) // 8
        parts = []
        for k in range(digits):
            lo, hi = 8 * k, min(8 * k + 8, self._width)
            table = Array(C((d << lo) % n, rb) for d in range(1 << (hi - lo)))
            part = Signal(rb, name=f"part{k}")
            with m.If(self.en):
                m.d.sync += part.eq(table[self.i[lo:hi]])
            parts.append(part)
        # Each part is below n, so the sum is below digits * n: reduce by subtracting the largest fitting multiple.
        total = Signal(range(digits * n))
        m.d.comb += total.eq(sum(parts))
        reduced = Signal(rb)
        m.d.comb += reduced.eq(total)
        # Later assignments win: the largest multiple that fits is the one subtracted.
        for mult in range(1, digits):
            with m.If(total >= mult * n):
                m.d.comb += reduced.eq(total - mult * n)
        with m.If(self.en):
            m.d.sync += self.o.eq(reduced)
        return m
