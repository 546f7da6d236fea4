"""SELB's per-flow rerouting (:mod:`lbpipe.hdl.selb.reroute`): what a reroute may do, seen from the ports.

:class:`RerouteDecisions` runs a small ``Reroute`` (free packets of any flow, ``now``, lookup path and cluster fields,
free control commands, free back-pressure, a reset at any time) and watches one packet ``M``, chosen by the solver at
acceptance (the n-th since reset; it leaves as the n-th output, which the stream contract proves). It records M's
flow, ``congested``, ``alt`` and ``shortest`` at acceptance, M's ``path``, ``tail`` and ``epoch`` when it leaves, and
compares them with the **next** output of M's flow (the first packet of the flow after M). Asserted, from the
datasheet (docs/selb_reroute.md, "Decision"), with no reset between:

* **a tail only for a congested packet**: M leaves with ``tail`` only if its ``congested`` was set;
* **the new path is one the cluster offered**: after a tail, the flow's next packet leaves on a path below
  ``n_paths``, other than M's, and a member of M's ``alt`` (or M's ``shortest`` when ``alt`` was empty);
* **tail exactly on the deciding packet**: the flow's next packet leaves on M's path with M's epoch unless M was
  a tail; after a tail the epoch is flipped (with the point above: the path changed);
* **one reroute per ``hold`` ticks**: the harness reads the items' ``now`` as a timer that never goes back (each
  accepted item advances it by ``(now - previous now) mod 2**time_bits``, so every input sequence is such a timer)
  and sums the ticks since M's acceptance, saturating at ``hold``; a second watched packet ``M2`` of M's flow,
  accepted fewer than ``hold`` ticks after M, must not be a tail when M was one.

The harness uses the block's ports only. The widths, ``hold`` and ``n_paths`` come from the instance's parameters,
not from the block. Covers: a reroute to an ``alt`` member seen on the flow's next packet; a reroute to ``shortest``
(``alt`` empty); a packet of the flow within ``hold`` ticks of a tail; a second tail of the flow (the hold passed).
"""

from amaranth import Module, Mux, Signal
from amaranth.hdl import Assert, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["RerouteDecisions"]

_COUNT = 8


class RerouteDecisions(Harness):
    """Reroute-decision harness; see the module documentation.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    n_paths : int
        The paths that exist.
    time_bits : int
        Width of ``now``.
    hold : int
        Ticks after a reroute before the flow's next one is allowed.
    """

    def __init__(self, build, *, n_paths, time_bits, hold):
        super().__init__(reset="free")
        self._build = build
        self._n_paths = n_paths
        self._tb = time_bits
        self._hold = hold

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.dut = dut = self._build()
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))
        i, o = dut.i.payload, dut.o.payload
        took_in = dut.i.valid & dut.i.ready
        took_out = dut.o.valid & dut.o.ready
        accepted, delivered = Signal(_COUNT), Signal(_COUNT)
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)

        # M: chosen at acceptance; its cluster fields as it was taken.
        armed = Signal()
        seq = Signal(_COUNT, reset_less=True)
        m_flow = Signal(len(i.flow), reset_less=True)
        m_cong = Signal(reset_less=True)
        m_alt = Signal(len(i.alt), reset_less=True)
        m_short = Signal(len(i.shortest), reset_less=True)
        pick = free(self, 1, "watch")
        with m.If(took_in & pick & ~armed):
            m.d.sync += [armed.eq(1), seq.eq(accepted), m_flow.eq(i.flow), m_cong.eq(i.congested),
                         m_alt.eq(i.alt), m_short.eq(i.shortest)]
        its_turn = armed & took_out & (delivered == seq)
        # M as it left; then the next output of its flow.
        left, seen_next = Signal(), Signal()
        m_tail = Signal(reset_less=True)
        m_path = Signal(len(o.path), reset_less=True)
        m_epoch = Signal(reset_less=True)
        with m.If(its_turn):
            m.d.sync += [left.eq(1), m_tail.eq(o.tail), m_path.eq(o.path), m_epoch.eq(o.epoch)]
        nxt = left & ~seen_next & took_out & (o.flow == m_flow)
        with m.If(nxt):
            m.d.sync += seen_next.eq(1)
        offered = Mux(m_alt != 0, m_alt.bit_select(o.path, 1), o.path == m_short)
        new_ok = (o.path < self._n_paths) & offered & (o.path != m_path)
        same = (o.path == m_path) & (o.epoch == m_epoch)
        m.d.comb += [
            Assert(~its_turn | ~o.tail | m_cong, "a tail for a packet that was not congested"),
            Assert(~nxt | ~m_tail | new_ok, "a rerouted flow's new path is not one its cluster offered"),
            Assert(~nxt | ~m_tail | (o.epoch != m_epoch), "a tail without the epoch flipped behind it"),
            Assert(~nxt | m_tail | same, "the flow's path or epoch changed without a tail"),
            Cover(nxt & m_tail & (m_alt != 0)),
            Cover(nxt & m_tail & (m_alt == 0)),
        ]
        self._hold_check(m, dut, took_in, took_out, accepted, delivered, armed, m_flow, left, m_tail)
        return m

    def _hold_check(self, m, dut, took_in, took_out, accepted, delivered, armed, m_flow, left, m_tail):
        """Ticks since M's acceptance (a timer that never goes back), and a second watched packet of M's flow."""
        i, o = dut.i.payload, dut.o.payload
        tb, hold = self._tb, self._hold
        last_now = Signal(tb, reset_less=True)
        elapsed = Signal(range(hold + 1))
        step = Signal(tb, name="now_step")
        total = Signal(tb + 2, name="elapsed_total")
        m.d.comb += [step.eq(i.now - last_now), total.eq(elapsed + step)]
        young = total < hold                      # this item is taken fewer than hold ticks after M
        with m.If(took_in):
            m.d.sync += last_now.eq(i.now)
            with m.If(armed):
                m.d.sync += elapsed.eq(Mux(young, total, hold))
            with m.Else():
                m.d.sync += elapsed.eq(0)         # M itself (or an item before M): the count starts here
        pick2 = free(self, 1, "watch2")
        armed2 = Signal()
        seq2 = Signal(_COUNT, reset_less=True)
        with m.If(took_in & armed & ~armed2 & pick2 & (i.flow == m_flow) & young):
            m.d.sync += [armed2.eq(1), seq2.eq(accepted)]
        turn2 = armed2 & took_out & (delivered == seq2)
        # A later tail of M's flow once the hold has passed (not watched as M2: any later output of the flow).
        later_tail = left & ~armed2 & took_out & (o.flow == m_flow) & o.tail & (elapsed == hold)
        m.d.comb += [
            Assert(~turn2 | ~m_tail | ~o.tail, "two reroutes of a flow within hold ticks"),
            Cover(turn2 & m_tail),
            Cover(later_tail & m_tail),
        ]
