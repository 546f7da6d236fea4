"""LAPS PST (:mod:`lbpipe.hdl.laps.pst`): a lookup's pids come from one record, as the table stood when the item was
accepted; a miss's from record 0.

:class:`PstRecords` runs a small PST (free items, free control commands of any table, index and data, free
back-pressure, a reset at any time) and keeps its own copy of the record table, written from the datasheet's RECORD
command format (docs/laps_pst.md, "Control tables": table 0, index ``record x 2^wb + word``, pid ``4 word + m`` in
data bits ``16m + 15 : 16m``; a record ``>= n_dests`` rejected), at the clock the block accepts the command. The copy
is not reset, as the records are not, and an accepted command takes effect across a reset, as the datasheet says.

The solver marks one accepted item (the n-th since reset) and the harness snapshots its copy of the records then.
When the n-th output leaves, asserted:

* **one record**: its ``pid0`` .. ``pid{k-1}`` are the pids of one record of the snapshot (no pid slot from another
  record, nor from an earlier or later version of it: commands take effect exactly between two items);
* **a miss reads record 0**: with ``hit`` = 0 they are record 0's.

Covers: the watched item leaves with a hit on a record other than 0 that a command wrote; a miss after record 0 was
written.
"""

from amaranth import Cat, Module, Signal
from amaranth.hdl import Assert, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["PstRecords"]

_COUNT = 8
_PID = 16        # a pid's width, from the datasheet
_RECORD = 0      # the RECORD table's number, from the datasheet


class PstRecords(Harness):
    """Record-consistency harness around a PST with ``k`` <= 4 (one control word per record).

    Parameters
    ----------
    build : callable
        Returns a fresh block with ``n_dests`` and ``k`` attributes.
    """

    def __init__(self, build):
        super().__init__(reset="free")
        self._build = build

    def elaborate(self, platform):
        m = Module()
        rst, _ = self.domain(m)
        m.submodules.dut = dut = self._build()
        n_dests, k = dut.n_dests, dut.k
        if k > 4:
            raise ValueError("the harness models one control word per record (k <= 4)")
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        ready = free(self, 1, "o_ready")
        m.d.comb += dut.o.ready.eq(ready)

        # The harness's copy of the records (not reset, like the block's), written when a command is accepted.
        shadow = [Signal(_PID * k, name=f"shadow{r}", reset_less=True) for r in range(n_dests)]
        written = [Signal(name=f"written{r}", reset_less=True) for r in range(n_dests)]
        c = dut.ctl.payload
        took_ctl = dut.ctl.valid & dut.ctl.ready
        for r in range(n_dests):
            with m.If(took_ctl & (c.table == _RECORD) & (c.index == r)):
                m.d.sync += [shadow[r].eq(c.data[:_PID * k]), written[r].eq(1)]

        took_in = dut.i.valid & dut.i.ready
        took_out = dut.o.valid & dut.o.ready
        accepted = Signal(_COUNT)
        delivered = Signal(_COUNT)
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)

        pick = free(self, 1, "watch")
        armed = Signal()
        seq = Signal(_COUNT, reset_less=True)
        snap = [Signal(_PID * k, name=f"snap{r}", reset_less=True) for r in range(n_dests)]
        snap_written = [Signal(name=f"snap_written{r}", reset_less=True) for r in range(n_dests)]
        with m.If(took_in & pick & ~armed):
            m.d.sync += [armed.eq(1), seq.eq(accepted)]
            m.d.sync += [a.eq(b) for a, b in zip(snap, shadow)]
            m.d.sync += [a.eq(b) for a, b in zip(snap_written, written)]

        its_turn = armed & took_out & (delivered == seq)
        out = dut.o.payload
        pids = Cat(*(getattr(out, f"pid{i}") for i in range(k)))
        one_record = Cat(*(pids == s for s in snap)).any()
        m.d.comb += [
            Assert(~its_turn | one_record, "a lookup's pids are not one record of the table as it stood"),
            Assert(~its_turn | out.hit | (pids == snap[0]), "a miss did not read record 0"),
            Cover(its_turn & out.hit & Cat(*((pids == s) & w for s, w in zip(snap[1:], snap_written[1:]))).any()
                  & (pids != snap[0])),
            Cover(its_turn & ~out.hit & snap_written[0] & (pids != 0)),
        ]
        return m
