"""SELB's destination reordering (:mod:`lbpipe.hdl.selb.reorder`): its stream contract, release order and reset,
seen from the ports.

The block holds early packets in reorder buffers and returns every item once, in release order, not input order
(docs/selb_reorder.md), so the generic contract's "the n-th output is the n-th input" does not hold, and neither
does "an output within a few ready cycles": held items wait, with no input at all, for ever ("Idle input: nothing
changes"). The harnesses here state what the datasheet promises instead. Items are told apart by ``tag``: each
harness watches items by tag values the solver chooses (free, constant after the first cycle) and assumes that at
most one item of each watched tag is accepted between two resets; other items may share any tag. The solver picks
the watched tags, so every item is a watched one in some run.

:class:`ReorderContract` asserts, in every cycle, with free items (any kind, flow, epoch, tail, ``now``), free
commands (ignored by the block), free back-pressure and a reset at any time:

* **stable**: an output offered and not taken stays, with the same payload (:class:`StreamContract`'s check);
* **never more out than in**: an output only while ``accepted - delivered > 0`` (both counted since the last reset);
* **bounded inside**: at most ``capacity`` items inside (the datasheet: a buffer is never left full, so at most
  ``depth - 1`` held in each, one more in a drain, and the S1, S2 and output registers);
* **none duplicated, none from before a reset**: an output of the watched tag ``W`` only after ``W`` was accepted
  since the last reset and not yet delivered; it leaves with its ``kind``, ``flow``, ``epoch`` and ``tail``;
* **none lost** (the timeout): ``now`` is read as a timer that never goes back, each accepted item advancing it by
  ``(now - previous now) mod 2**time_bits``, and every such step is assumed at most ``2**time_bits - timeout`` (the
  datasheet's rule that a buffer is looked at before its age wraps: a buffer younger than ``timeout`` at one item
  is then exactly aged at the next). An item ``Y`` (the second watched tag) accepted ``timeout`` ticks or more
  after ``W`` leaves only after ``W`` has left: whatever buffer holds ``W`` opened no later than ``W`` and times
  out before ``Y`` at the latest;
* **progress**: with an item offered at the input and ``o.ready`` high, something moves (an output taken or an
  input accepted) within ``stall_bound`` cycles.

:class:`ReorderOvertaking` watches two items ``A`` and ``B``, ``B`` accepted after ``A``, and asserts when ``A``
leaves: if ``B`` has already left, ``A`` leaves from a buffer (``held``) and ``B`` is not a DATA packet of ``A``'s
flow and epoch; and, as in the contract, each of them leaves at most once and only if accepted since the last reset
(the deep run of this harness reaches an item held across a reset). So an item that passes is never overtaken (in
particular a flow with no buffer open keeps its arrival order, and other kinds pass in order), and a buffer's items
leave in arrival order, behind nothing of their own flow and epoch that came later (the old path's packets and its
tail may overtake them: that is the point).

:class:`ReorderReset` (k-induction): after a reset the input is not ready during the flow-table sweep
(``n_flows`` clocks) and ready right after it, ``o.valid`` is low until the first item taken after the sweep can
leave (``n_flows + latency`` clocks: nothing held from before the reset comes out), and the counters are 0.

Only the ports are used. The widths, ``timeout`` and ``n_flows`` come from the instance's parameters, not from
the block.
"""

from amaranth import Module, Mux, Signal
from amaranth.hdl import Assert, Assume, Cover

from lbpipe.hdl.lib.meta import PacketKind

from lbpipe.formal.lib.harness import Harness, drive_source, free
from lbpipe.formal.lib.stream import StreamContract

__all__ = ["ReorderContract", "ReorderOvertaking", "ReorderReset"]

_COUNT = 8


def _watched_tag(harness, m, started, width, name):
    """A free tag the solver picks in the first cycle and keeps."""
    tag = free(harness, width, name)
    last = Signal(width, name=f"{name}_last", reset_less=True)
    m.d.sync += last.eq(tag)
    m.d.comb += Assume(~started | (tag == last))
    return tag


def _watch_once(m, took_in, tag, wanted, name):
    """Assumes at most one accepted item of tag ``wanted`` between two resets; returns (taken now, taken before)."""
    now = Signal(name=f"{name}_taken_now")
    seen = Signal(name=f"{name}_accepted")
    m.d.comb += now.eq(took_in & (tag == wanted))
    with m.If(now):
        m.d.sync += seen.eq(1)
    m.d.comb += Assume(~now | ~seen)
    return now, seen


def _drive(harness, m, dut):
    drive_source(harness, m, dut.i, "i")
    drive_source(harness, m, dut.ctl, "ctl")
    ready = free(harness, 1, "o_ready")
    m.d.comb += dut.o.ready.eq(ready)
    return ready, dut.i.valid & dut.i.ready, dut.o.valid & dut.o.ready


class ReorderContract(StreamContract):
    """The reordering block's stream contract; see the module documentation.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    capacity : int
        Most items inside (accepted since the last reset, not yet delivered).
    stall_bound : int
        Most consecutive cycles with an item offered, ``o.ready`` high and nothing taken on either side.
    time_bits, timeout : int
        Width of ``now``; ticks after which a held buffer drains.
    """

    def __init__(self, build, *, capacity, stall_bound, time_bits, timeout):
        super().__init__(build, capacity=capacity, stall_bound=stall_bound)
        self._tb = time_bits
        self._timeout = timeout

    def elaborate(self, platform):
        m = Module()
        rst, started = self.domain(m)
        m.submodules.dut = dut = self._build()
        ready, took_in, took_out = _drive(self, m, dut)
        i, o = dut.i.payload, dut.o.payload
        accepted, delivered, inside = Signal(_COUNT), Signal(_COUNT), Signal(_COUNT)
        m.d.comb += inside.eq(accepted - delivered)
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)
        self._stable(m, dut)
        m.d.comb += [
            Assert(~took_out | (inside != 0), "an output without an accepted item"),
            Assert(inside <= self._capacity, "more items inside than the buffers and stages hold"),
        ]

        # W: the watched item; its fields as accepted; its output.
        width = len(i.tag)
        w_tag = _watched_tag(self, m, started, width, "w_tag")
        y_tag = _watched_tag(self, m, started, width, "y_tag")
        m.d.comb += Assume(w_tag != y_tag)
        w_now, w_in = _watch_once(m, took_in, i.tag, w_tag, "w")
        y_now, y_in = _watch_once(m, took_in, i.tag, y_tag, "y")
        w_kind = Signal.like(i.kind, reset_less=True)
        w_flow = Signal.like(i.flow, reset_less=True)
        w_epoch, w_tail = Signal(reset_less=True), Signal(reset_less=True)
        with m.If(w_now):
            m.d.sync += [w_kind.eq(i.kind), w_flow.eq(i.flow), w_epoch.eq(i.epoch), w_tail.eq(i.tail)]
        w_out = took_out & (o.tag == w_tag)
        w_left = Signal()
        with m.If(w_out):
            m.d.sync += w_left.eq(1)
        same = (o.kind == w_kind) & (o.flow == w_flow) & (o.epoch == w_epoch) & (o.tail == w_tail)
        m.d.comb += [
            Assert(~w_out | (w_in & ~w_left), "an item left twice, or left without being accepted since the reset"),
            Assert(~w_out | same, "an item left with its kind, flow, epoch or tail changed"),
        ]

        # The timer: ticks since W's acceptance, saturating at timeout; Y is late when taken at or past it.
        tb, timeout = self._tb, self._timeout
        last_now = Signal(tb, reset_less=True)
        any_in = Signal()
        step = Signal(tb, name="now_step")
        elapsed = Signal(range(timeout + 1))
        total = Signal(tb + 1, name="elapsed_total")
        m.d.comb += [step.eq(i.now - last_now), total.eq(elapsed + step),
                     # the datasheet's "looked at before its age wraps": no step longer than 2**tb - timeout
                     Assume(~took_in | ~any_in | (step <= (1 << tb) - timeout))]
        with m.If(took_in):
            m.d.sync += [last_now.eq(i.now), any_in.eq(1),
                         elapsed.eq(Mux(w_now | ~w_in, 0, Mux(total < timeout, total, timeout)))]
        y_late = Signal()
        with m.If(y_now):
            m.d.sync += y_late.eq(w_in & (total >= timeout))
        y_out = took_out & (o.tag == y_tag)
        m.d.comb += [
            Assert(~y_out | ~y_late | w_left, "an item still inside when one taken timeout ticks after it leaves"),
            Cover(y_out & y_late & w_left),
            Cover(w_out & o.held),
        ]

        stall = Signal(_COUNT)
        with m.If(ready & dut.i.valid & ~took_in & ~took_out):
            m.d.sync += stall.eq(stall + 1)
        with m.Else():
            m.d.sync += stall.eq(0)
        m.d.comb += [
            Assert(stall <= self._stall_bound, "nothing moved for stall_bound cycles with an item offered"),
            Cover(rst & (inside >= 2)),
        ]
        return m


class ReorderOvertaking(Harness):
    """Who may overtake whom; see the module documentation.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    """

    def __init__(self, build):
        super().__init__(reset="free")
        self._build = build

    def elaborate(self, platform):
        m = Module()
        _, started = self.domain(m)
        m.submodules.dut = dut = self._build()
        _, took_in, took_out = _drive(self, m, dut)
        i, o = dut.i.payload, dut.o.payload
        width = len(i.tag)
        a_tag = _watched_tag(self, m, started, width, "a_tag")
        b_tag = _watched_tag(self, m, started, width, "b_tag")
        m.d.comb += Assume(a_tag != b_tag)
        a_now, a_in = _watch_once(m, took_in, i.tag, a_tag, "a")
        b_now, b_in = _watch_once(m, took_in, i.tag, b_tag, "b")
        a_data = Signal(reset_less=True)
        a_flow = Signal.like(i.flow, reset_less=True)
        a_epoch = Signal(reset_less=True)
        with m.If(a_now):
            m.d.sync += [a_data.eq(i.kind == PacketKind.DATA), a_flow.eq(i.flow), a_epoch.eq(i.epoch)]
        b_after = Signal()          # B taken after A, and B of A's flow and epoch, a DATA packet like A
        b_kin = Signal()
        with m.If(b_now):
            m.d.sync += [b_after.eq(a_in),
                         b_kin.eq((i.kind == PacketKind.DATA) & a_data & (i.flow == a_flow) & (i.epoch == a_epoch))]
        b_out = took_out & (o.tag == b_tag)
        b_left, a_left = Signal(), Signal()
        with m.If(b_out):
            m.d.sync += b_left.eq(1)
        a_out = took_out & (o.tag == a_tag)
        with m.If(a_out):
            m.d.sync += a_left.eq(1)
        overtaken = a_out & b_after & b_left
        m.d.comb += [
            Assert(~a_out | (a_in & ~a_left), "an item left twice, or left without being accepted since the reset"),
            Assert(~b_out | (b_in & ~b_left), "an item left twice, or left without being accepted since the reset"),
            Assert(~overtaken | o.held, "an item that passed was overtaken by a later one"),
            Assert(~overtaken | ~b_kin, "a held item was overtaken by a later packet of its flow and epoch"),
            Cover(overtaken & o.held),
            Cover(a_out & b_after & ~b_left & b_kin & o.held),
        ]
        return m


class ReorderReset(Harness):
    """Reset: the sweep, then an empty block; see the module documentation.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    n_flows : int
        Flow-table entries (the sweep's length in clocks).
    """

    def __init__(self, build, *, n_flows):
        super().__init__(reset="free")
        self._build = build
        self._nf = n_flows

    def elaborate(self, platform):
        m = Module()
        rst, _ = self.domain(m)
        m.submodules.dut = dut = self._build()
        ready, _, _ = _drive(self, m, dut)
        quiet = self._nf + dut.latency          # the earliest new output: an item taken right after the sweep
        since = Signal(range(quiet + 2))
        # "<", not "!=": the induction step starts from any value of the counter, also those above the horizon.
        with m.If(since <= quiet):
            m.d.sync += since.eq(since + 1)
        m.d.comb += [
            Assert((since >= quiet) | ~dut.o.valid, "an output before an item taken after the sweep could leave"),
            Assert((since != 0) | (dut.stats == 0), "stats not cleared by reset"),
            Assert((since >= self._nf) | ~dut.i.ready, "input ready during the flow-table sweep"),
            Assert((since != self._nf) | dut.i.ready, "input not ready when the flow-table sweep ends"),
            Cover(rst & dut.o.valid & ~ready),
            Cover((since == quiet) & dut.o.valid),
        ]
        return m
