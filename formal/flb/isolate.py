"""FLB's isolation table (:mod:`lbpipe.hdl.flb.isolate`): isolation paths stay within the destination's top ``k``
paths, only flows under a congestion CNM are isolated, ``k`` never exceeds the flows that can be isolated, the CNM
stream is held only for the packet a CNM delays, and a forged CNM changes nothing.

:class:`IsolateInvariants` runs a small ``Isolate`` (free packets of any flow, destination and ``now``; free CNMs of
any flow, destination, point, ``n``, flag and ``now``; free ``ctl`` commands; free back-pressure; a reset at any
time). It keeps its own set of the (flow, destination) pairs a congestion CNM may have isolated: a CNM that is not
forged (flow, destination and point in range, and for a congestion ``n`` 1 to 8, written here from the datasheet's
"Stale and forged input" table) sets its pair with ``cong`` 1 and clears it with ``cong`` 0; a reset empties it. A
CNM taken with a packet applies first (the datasheet's order), so a packet sees the set as it stands after the CNMs
taken up to and including its own clock. It asserts, for every offered result:

* **top k**: ``mask`` is the highest ``k`` paths for some ``0 <= k <= n_paths - 1`` (path 0 never isolates);
* **within the mask**: an isolated result's ``path`` is one of ``mask``'s paths; a result not isolated has path 0
  (so never a path inside the mask); a rejected packet (``ok`` 0) is not isolated and its ``mask`` is 0;

and, for a watched packet (chosen by the solver at acceptance; results leave in acceptance order):

* **only congested flows**: isolated only if its (flow, destination) pair is in the set at its acceptance;
* **k bounded by the flows**: ``k`` (the bits of ``mask``) at most the number of its destination's pairs in the set
  at its acceptance (each isolated flow weighs at most one link, ``840 / n`` with ``n >= 1``).

On the CNM stream: ``upd`` and ``i`` are ready together, exactly while the pipeline can move (no result waiting on
``o.ready``) and no packet is held (a packet taken with a CNM waits, ``held``, until the pipeline next moves).

Covers: a packet isolated on the second-highest path; a mask of ``n_paths - 1`` paths; a held packet isolated by the
CNM taken with it.

:class:`IsolateForgedMiter` shows that a forged CNM changes nothing: two copies see the same packets, commands,
back-pressure and reset and the same CNMs, except that copy ``b`` never sees the forged ones. Their ``o`` (valid
and, when valid, payload) and their ``i.ready`` and ``upd.ready`` must agree in every cycle. Two assumptions keep
the comparison to what the datasheet promises: no packet is offered while a forged CNM is (a packet taken with it
would wait one clock in one copy only), and a forged CNM carries the ``now`` of the event taken before it (the
timeout sweep runs at every event, forged ones included, so a forged CNM from a later tick may release aged entries
in one copy only; one from the same tick cannot, as the event before it already released every entry aged at that
tick). Cover: an isolated result after a forged CNM was taken.
"""

from amaranth import Cat, Module, Signal
from amaranth.hdl import Assert, Assume, Cover

from lbpipe.formal.lib.harness import Harness, drive_source, free

__all__ = ["IsolateInvariants", "IsolateForgedMiter", "forged"]

_COUNT = 8
_N_MAX = 8      # the largest n a congestion CNM may carry (datasheet: 1 to 8)


def forged(u, *, n_flows, n_dests, n_ports):
    """1 when the CNM ``u`` is forged by the datasheet's table: flow, destination or point out of range, or a
    congestion with ``n`` 0 or above 8."""
    out = (u.flow >= n_flows) | (u.dest >= n_dests) | (u.cp >= n_ports)
    return out | (u.cong & ((u.n == 0) | (u.n > _N_MAX)))


def _tops(n_paths):
    """The masks of the highest ``k`` paths, k = 0 .. n_paths - 1 (bit p: path p)."""
    return [((1 << k) - 1) << (n_paths - k) for k in range(n_paths)]


class IsolateInvariants(Harness):
    """Isolation-path and CNM-stream harness.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    n_flows, n_dests, n_paths, n_ports : int
        The instance's parameters (not read from the block).
    """

    def __init__(self, build, *, n_flows, n_dests, n_paths, n_ports):
        super().__init__(reset="free")
        self._build = build
        self._nf, self._nd, self._n, self._np = n_flows, n_dests, n_paths, n_ports

    def elaborate(self, platform):
        m = Module()
        rst, _ = self.domain(m)
        m.submodules.dut = dut = self._build()
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.upd, "upd")
        drive_source(self, m, dut.ctl, "ctl")
        ready = free(self, 1, "o_ready")
        m.d.comb += dut.o.ready.eq(ready)
        nf, nd = self._nf, self._nd
        took_in = dut.i.valid & dut.i.ready
        took_cnm = dut.upd.valid & dut.upd.ready
        took_out = dut.o.valid & dut.o.ready

        # the pairs a congestion CNM may have isolated, after this clock's CNM (which goes before this clock's packet)
        cong_set = Signal(nf * nd, name="cong_set")
        after = Signal(nf * nd, name="cong_set_after_cnm")
        u = dut.upd.payload
        real = took_cnm & ~forged(u, n_flows=nf, n_dests=nd, n_ports=self._np)
        bits = []
        for f in range(nf):
            for d in range(nd):
                b = f * nd + d
                named = real & (u.flow == f) & (u.dest == d)
                bits.append((cong_set[b] & ~named) | (named & u.cong))
        m.d.comb += after.eq(Cat(bits))
        m.d.sync += cong_set.eq(after)

        # the watched packet: its pair's bit and its destination's pair count as it was accepted
        p = dut.i.payload
        own = Signal(name="watched_own_now")
        count = Signal(range(nf + 1), name="watched_count_now")
        m.d.comb += [
            own.eq(Cat(after[f * nd + d] & (p.flow == f) & (p.dest == d) for f in range(nf) for d in range(nd)).any()),
            count.eq(sum((after[f * nd + d] & (p.dest == d)) for f in range(nf) for d in range(nd))),
        ]
        accepted, delivered = Signal(_COUNT, name="accepted"), Signal(_COUNT, name="delivered")
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)
        pick = free(self, 1, "watch")
        armed = Signal(name="watch_armed")
        seq = Signal(_COUNT, name="watch_seq", reset_less=True)
        w_own = Signal(name="watch_own", reset_less=True)
        w_count = Signal(range(nf + 1), name="watch_count", reset_less=True)
        with m.If(took_in & pick & ~armed):
            m.d.sync += [armed.eq(1), seq.eq(accepted), w_own.eq(own), w_count.eq(count)]
        its_turn = armed & dut.o.valid & (delivered == seq)

        o = dut.o.payload
        v = dut.o.valid
        k = Signal(range(self._n + 1), name="k_of_mask")
        m.d.comb += k.eq(sum(o.mask[q] for q in range(self._n)))
        top = Cat(o.mask == t for t in _tops(self._n)).any()
        in_mask = Cat(o.mask[q] & (o.path == q) for q in range(self._n)).any()
        m.d.comb += [
            Assert(~v | top, "mask is not the top k paths, k <= n_paths - 1"),
            Assert(~v | ~o.isolated | in_mask, "an isolated packet's path is outside the mask"),
            Assert(~v | o.isolated | (o.path == 0), "a packet not isolated has an isolation path"),
            Assert(~v | o.ok | (~o.isolated & (o.mask == 0)), "a rejected packet isolated or with a mask"),
            Assert(~its_turn | ~o.isolated | w_own, "a flow isolated without a congestion CNM in force"),
            Assert(~its_turn | (k <= w_count), "k above the flows a congestion CNM isolated"),
        ]

        # the CNM stream: both inputs ready exactly while the pipeline can move (o not waiting) and no packet is held
        # (a packet taken with a CNM waits until the pipeline next moves)
        holding = Signal(name="packet_held")
        moves = ~v | ready
        with m.If(took_in & took_cnm):
            m.d.sync += holding.eq(1)
        with m.Elif(moves):
            m.d.sync += holding.eq(0)
        m.d.comb += [
            Assert(dut.upd.ready == dut.i.ready, "upd and i not ready together"),
            Assert(dut.i.ready == (moves & ~holding), "input ready other than while moving with no packet held"),
        ]
        held_iso = Signal(name="held_isolated")
        m.d.comb += held_iso.eq(v & o.isolated & o.held)
        m.d.comb += [
            Cover(v & o.isolated & (o.path == self._n - 2)),
            Cover(v & (k == self._n - 1)),
            Cover(held_iso),
        ]
        return m


class IsolateForgedMiter(Harness):
    """Forged-CNM miter.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    n_flows, n_dests, n_ports : int
        The instance's parameters (not read from the block).
    """

    def __init__(self, build, *, n_flows, n_dests, n_ports):
        super().__init__(reset="free")
        self._build = build
        self._nf, self._nd, self._np = n_flows, n_dests, n_ports

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        m.submodules.a = a = self._build()
        m.submodules.b = b = self._build()
        for name in ("i", "ctl"):
            drive_source(self, m, getattr(a, name), name)
            pa, pb = getattr(a, name), getattr(b, name)
            m.d.comb += [pb.valid.eq(pa.valid), pb.payload.eq(pa.payload)]
        drive_source(self, m, a.upd, "upd")
        u = a.upd.payload
        bad = Signal(name="cnm_forged")
        m.d.comb += bad.eq(forged(u, n_flows=self._nf, n_dests=self._nd, n_ports=self._np))
        m.d.comb += [b.upd.valid.eq(a.upd.valid & ~bad), b.upd.payload.eq(a.upd.payload)]
        ready = free(self, 1, "o_ready")
        m.d.comb += [a.o.ready.eq(ready), b.o.ready.eq(ready)]

        # the now of the last event taken (a packet taken with a CNM goes after it)
        last_now = Signal(len(u.now), name="last_now")
        with m.If(a.i.valid & a.i.ready):
            m.d.sync += last_now.eq(a.i.payload.now)
        with m.Elif(a.upd.valid & a.upd.ready):
            m.d.sync += last_now.eq(u.now)
        seen = Signal(name="forged_taken")
        with m.If(a.upd.valid & a.upd.ready & bad):
            m.d.sync += seen.eq(1)
        m.d.comb += [
            Assume(~(a.upd.valid & bad & a.i.valid)),
            Assume(~(a.upd.valid & bad) | (u.now == last_now)),
            Assert(a.o.valid == b.o.valid, "a forged CNM changed o.valid"),
            Assert(~a.o.valid | (a.o.payload.as_value() == b.o.payload.as_value()), "a forged CNM changed a result"),
            Assert((a.i.ready == b.i.ready) & (a.upd.ready == b.upd.ready), "a forged CNM changed the input's ready"),
            Cover(seen & a.o.valid & a.o.payload.isolated),
        ]
        return m
