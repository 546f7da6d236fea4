"""LAPS PIT (:mod:`lbpipe.hdl.laps.pit`): read after write, as the datasheet's serial order states it.

docs/laps_pit.md, "Read after write": in one clock the update comes first, then the lookup, then the lookup's probe
write-back; everything of a later clock after. An update of a path whose entry is valid writes ``real_val = owd``
and ``time = now`` (the update's ``now``); a probe writes the probed slot's doubled ``real_val`` (saturating at
infinity, ``2^32 - 1``) and ``time`` = the lookup's ``now``, and the result shows the slot as its own probe leaves
it; commits (``ctl`` table 4) rewrite the whole entry.

:class:`PitReadAfterWrite` runs a small PIT (free lookups, updates and control commands of any table, index and data,
free back-pressure, a reset at any time). The solver marks one accepted update (pid E, ``owd`` V, ``now`` T) and then
one lookup accepted in the same clock or later; the harness notes every other write of E the serial order puts
between them: a later update naming E, a commit of E, the probe of E by a lookup accepted at or after the update's
clock and before the marked one (seen on ``o`` as ``probe_valid`` with ``probe_pid`` = E: results leave in order).
When the marked lookup leaves with none of those in between, asserted for every slot ``j`` whose pid is E and whose
result is ``valid``:

* **read after write**: ``real_val{j}`` = V and ``time{j}`` = T, or, when the lookup probed slot ``j``, the doubled
  V (saturating) and the lookup's own ``now``.

A slot that reads ``valid = 0`` is not checked (an update of an invalid entry changes nothing; a commit, the only
thing that changes validity, ends the watch). Covers: the marked lookup reads V from a valid entry when taken in the
same clock as the update, one clock after it, and two clocks after it; with ``probe_cover``, the marked lookup
probed E itself (the probe hold-off allows that only 5 updates after E's, so it needs a deeper run).
"""

from amaranth import Module, Mux, Signal
from amaranth.hdl import Assert, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["PitReadAfterWrite"]

_COUNT = 8
_INFINITY = (1 << 32) - 1    # real_val's infinity, from the datasheet
_COMMIT = 4                  # the COMMIT table's number, from the datasheet


class PitReadAfterWrite(Harness):
    """Read-after-write harness around a PIT.

    Parameters
    ----------
    build : callable
        Returns a fresh block with ``i``, ``upd``, ``o`` and ``ctl`` ports and ``k`` lookup slots.
    k : int
        The instance's slot count (from its parameters, not read from the block).
    probe_cover : bool
        Also cover a marked lookup whose own probe of E is applied.
    """

    def __init__(self, build, *, k, probe_cover=False):
        super().__init__(reset="free")
        self._build = build
        self._k = k
        self._probe_cover = probe_cover

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        k = self._k
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.upd, "upd")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))

        took_in = dut.i.valid & dut.i.ready
        took_upd = dut.upd.valid & dut.upd.ready
        took_ctl = dut.ctl.valid & dut.ctl.ready
        took_out = dut.o.valid & dut.o.ready
        accepted = Signal(_COUNT)       # lookups accepted since reset (a lookup's number is the count before it)
        delivered = Signal(_COUNT)
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)

        # The watched update: pid E, value V, time T; n0 = the number of the first lookup after it in the serial
        # order (a lookup of the same clock comes after the update).
        u = dut.upd.payload
        armed = Signal()
        e_pid = Signal(16, reset_less=True)
        e_owd = Signal(32, reset_less=True)
        e_now = Signal(48, reset_less=True)
        n0 = Signal(_COUNT, reset_less=True)
        arm_now = took_upd & free(self, 1, "watch_upd") & ~armed
        with m.If(arm_now):
            m.d.sync += [armed.eq(1), e_pid.eq(u.pid), e_owd.eq(u.owd), e_now.eq(u.now), n0.eq(accepted)]
        watching = armed | arm_now
        pid = Mux(armed, e_pid, u.pid)

        # Another write of E in the serial order: an update of E in a later clock, or a commit of E; lookups from
        # number n1 on come after it.
        cut = Signal()
        n1 = Signal(_COUNT, reset_less=True)
        c = dut.ctl.payload
        rewrite = ((armed & took_upd & (u.pid == e_pid))
                   | (watching & took_ctl & (c.table == _COMMIT) & (c.index == pid)))
        with m.If(rewrite & ~cut):
            m.d.sync += [cut.eq(1), n1.eq(accepted)]

        # The watched lookup: one accepted in the update's clock or later.
        i = dut.i.payload
        lk_armed = Signal()
        lk_seq = Signal(_COUNT, reset_less=True)
        lk_now = Signal(48, reset_less=True)
        lk_pids = [Signal(16, name=f"lk_pid{j}", reset_less=True) for j in range(k)]
        lk_dist = Signal(2, reset_less=True)       # clocks from the update to the lookup, saturating at 3
        dist = Signal(2)
        with m.If(arm_now):
            m.d.sync += dist.eq(1)
        with m.Elif(armed & (dist != 3)):
            m.d.sync += dist.eq(dist + 1)
        with m.If(took_in & watching & ~lk_armed & free(self, 1, "watch_lookup")):
            m.d.sync += [lk_armed.eq(1), lk_seq.eq(accepted), lk_now.eq(i.now), lk_dist.eq(Mux(armed, dist, 0))]
            m.d.sync += [a.eq(i[f"pid{j}"]) for j, a in enumerate(lk_pids)]

        # A probe of E by a lookup between the two (number n0 or later, before the watched lookup).
        out = dut.o.payload
        probed = Signal()
        between = armed & (delivered >= n0) & (~lk_armed | (delivered < lk_seq))
        with m.If(took_out & between & out.probe_valid & (out.probe_pid == e_pid)):
            m.d.sync += probed.eq(1)

        its_turn = lk_armed & took_out & (delivered == lk_seq)
        clean = its_turn & ~probed & (~cut | (lk_seq < n1))
        doubled = Signal(33)
        m.d.comb += doubled.eq(e_owd * 2)
        doubled_sat = Mux(doubled > _INFINITY, _INFINITY, doubled)
        for j in range(k):
            check = clean & (lk_pids[j] == e_pid) & out[f"valid{j}"]
            own_probe = out.probe_valid & (out.probe_slot == j)
            want_real = Mux(own_probe, doubled_sat, e_owd)
            want_time = Mux(own_probe, lk_now, e_now)
            read = (out[f"real_val{j}"] == want_real) & (out[f"time{j}"] == want_time)
            m.d.comb += Assert(~check | read, "a lookup after an update of its pid does not read the update's value")
            if j == 0:
                seen = check & ~own_probe & (out[f"real_val{j}"] == e_owd)
                m.d.comb += [Cover(seen & (lk_dist == d)) for d in range(3)]
                if self._probe_cover:
                    m.d.comb += Cover(check & own_probe)
        return m
