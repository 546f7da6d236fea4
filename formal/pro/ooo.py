"""PRO's receiver window (:mod:`lbpipe.hdl.pro.ooo`): the bitmap agrees with the tail in every record written.

:class:`OooBitmap` runs a small ``Ooo`` in record mode (free events of any kind, QP, PSN and timeout flag, free
control commands, free back-pressure, a reset at any time) and watches the record table's write port through
:class:`ProbedOoo`, a harness-only subclass that calls the block's own methods unchanged and keeps a reference to
the banks' ports. For every write of a known QP's record (``valid`` set; the reset sweep writes unknown records),
with the record's bitmap ``bm`` relative to its head (``hb + padv``) and its tail offset ``tr`` (tail = head + tr -
1, docs/pro_ooo.md "Record"), asserted:

* **nothing past the tail**: ``tr <= bitmap_len`` and no bit of ``bm`` at or above ``tr`` is set (the tail is the
  highest arrived PSN, and ``bitmap_len`` bounds ``tail - head``);
* **the tail arrived**: with ``tr > 0``, bit ``tr - 1`` of ``bm`` is set.

Covers: a record written with two PSNs arrived past a hole; a record written whose head advanced by two.
"""

from amaranth import Cat, Module
from amaranth.hdl import Assert, Cover

from lbpipe.hdl.pro.ooo import Ooo, OooRecord

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["ProbedOoo", "OooBitmap"]


class ProbedOoo(Ooo):
    """``Ooo`` with a reference to its record banks kept for a harness (``probe_banks``)."""

    def _banks(self, m):
        banks = super()._banks(m)
        self.probe_banks = banks
        return banks


class OooBitmap(Harness):
    """Bitmap-consistency harness (record mode, one bank: ``n_qps`` <= 1024).

    Parameters
    ----------
    build : callable
        Returns a fresh :class:`ProbedOoo` (or a subclass) in record mode.
    bitmap_len : int
        The instance's bitmap length (from its parameters, not read from the block).
    """

    def __init__(self, build, *, bitmap_len):
        super().__init__(reset="free")
        self._build = build
        self._L = bitmap_len

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        dut = self._build()
        # The harness elaborates the block itself, so the probe exists before it states anything about it.
        m.submodules.dut = dut.elaborate(platform)
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))
        L = self._L
        rec = OooRecord(bitmap_len=L)(dut.probe_banks[0][1].data)
        written = dut.probe_banks[0][1].en.any() & rec.valid
        bm, tr = rec.bm, rec.tr
        above = Cat(*((bm >> t) == 0 for t in range(L + 1)))          # above[t]: no bit at or past offset t
        tail_set = Cat(*(bm[t - 1] if t else 1 for t in range(L + 1)))
        m.d.comb += [
            Assert(~written | ((tr <= L) & above.bit_select(tr, 1)), "an arrival past the tail, or a tail past the "
                                                                     "bitmap"),
            Assert(~written | (tr > L) | tail_set.bit_select(tr, 1), "the tail is not an arrived PSN"),
            Cover(written & (tr >= 3) & ~bm[0]),
            Cover(written & (rec.padv == 2)),
        ]
        return m
