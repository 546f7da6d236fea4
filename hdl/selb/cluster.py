"""SELB source ToR: queue sampling, queue-growth congestion marking and the k-means path clustering engine (SELB,
paper 004: section III "Path Classification" and "Rerouting Strategy", Algorithm 1; datasheet docs/selb_cluster.md).

Two input streams, ready in the same cycles (one ``adv``): ``i`` carries per-packet lookups (the path a packet is
about to take) and ``smp`` the egress's queue samples ``(path, qlen)`` or, with ``tick`` set, the end of a sample
period. ``o`` returns, per lookup, the path's published cluster, its congested flag, whether its cluster is the
backup set (the shortest mean queue), and what rerouting needs: ``alt``, the mask of the non-congested paths of the
path's cluster, and ``shortest``, the path with the shortest queue in the snapshot (ties to the lowest index).

At a tick the block (1) publishes the result of the clustering the previous tick started (a one-clock copy of the
``pending`` registers into the ``published`` ones: a lookup sees one whole assignment, never part of two), (2) takes
the snapshot ``S`` of the latest queue length of every path (keeping the previous snapshot as ``P``) and the
threshold ``theta``, and (3) starts the background engine on it. A tick waits (``smp`` and ``i`` not ready) while the
engine is still busy (``busy``, a register), so a result is always complete when it is published. Lookups wait
for the engine only then, behind such an early tick (at most the engine's worst case, 1,410 clocks at the
defaults); a sample period at least that long never makes them wait. A ``ctl`` command is taken in the clock it is
offered, and both streams wait that one clock.

Engine (a sequential FSM beside the lookup path; paths are visited by rotating the snapshot registers, so no
n-way read multiplexer sits in its loop)::

    INIT   k centroids: per centroid up to ``draws`` draws of S[lfsr mod n] (3 clocks a draw: DRAW, CMP, TEST), the
           first value not equal to an earlier centroid; after ``draws`` duplicates the last draw is kept
    SWEEP  n + 2 clocks: |q - c_j| (P1), pairwise d_i <= d_j (P2), the winner (ties to the lowest index), its sum
           and count, the congested flag q - p > theta (P3)
    LOAD   1 clock: the dividers start from the sums
    DIV    q_bits clocks: k restoring dividers, floor(sum / count); an empty cluster keeps its centroid
    CHECK  1 clock: the means replace the nonempty clusters' centroids; DECIDE (1 clock): stop when no centroid
           changed or after ``iter_cap`` sweeps, else SWEEP again
    BACKUP 1 clock: the nonempty cluster with the smallest mean (ties to the lowest index)
    PEND   1 clock: the last sweep's assignment, backup membership, congested flags and shortest path into ``pending``

The sweep also keeps the running argmin of the snapshot (``shortest``); the publish derives the k per-cluster masks
of non-congested paths (``alt``) from the pending assignment and flags, so a lookup's ``alt`` is a k-way choice of
an n-bit register, never a scan of the n paths.

Choices where the paper is silent are listed in the datasheet.
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS

__all__ = ["Cluster", "ClusterItem", "ClusterSample", "ClusterResult", "check_parameters", "TABLE_THETA",
           "N_STATS", "LFSR_SEED"]

LFSR_SEED = 0xACE1
TABLE_THETA = 0     # data[q_bits-1:0]: theta, taken by the engine at the next tick
N_STATS = 6         # lookups, samples, ticks, capped clusterings, iterations and cycles of the last published one


def check_parameters(*, n_paths, k, q_bits, iter_cap, draws, theta, lfsr_seed):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_paths", n_paths), ("k", k), ("q_bits", q_bits), ("iter_cap", iter_cap),
                        ("draws", draws), ("theta", theta), ("lfsr_seed", lfsr_seed)):
        check_int(name, value)
    if not 2 <= n_paths <= 64 or n_paths & (n_paths - 1):
        # 128 paths measure 7 logic levels (the lookup's and the draw's n-way reads), over the 6-level budget
        raise ValueError(f"n_paths must be a power of two from 2 to 64 (more exceed 6 logic levels), not {n_paths}")
    if not 1 <= k <= 4 or k > n_paths:
        raise ValueError(f"k must be 1 to 4 (and at most n_paths), not {k}")
    if not 4 <= q_bits <= 24:
        raise ValueError(f"q_bits must be 4 to 24, not {q_bits}")
    if not 1 <= iter_cap <= 255:
        raise ValueError(f"iter_cap must be 1 to 255, not {iter_cap}")
    if not 1 <= draws <= 16:
        raise ValueError(f"draws must be 1 to 16, not {draws}")
    if not 0 <= theta < 1 << q_bits:
        raise ValueError(f"theta must be 0 to 2**q_bits - 1, not {theta}")
    if not 1 <= lfsr_seed < 1 << 16:
        raise ValueError(f"lfsr_seed must be 1 to 65535, not {lfsr_seed}")


def _pbits(n_paths):
    return max(1, (n_paths - 1).bit_length())


def _cbits(k):
    return max(1, (k - 1).bit_length())


def ClusterItem(*, n_paths=64):
    """A lookup: the path the packet is about to take."""
    return data.StructLayout({"kind": PacketKind, "path": _pbits(n_paths), "tag": TAG_BITS})


def ClusterSample(*, n_paths=64, q_bits=16):
    """A queue sample of ``path`` (``tick`` 0), or the end of a sample period (``tick`` 1; path and qlen unused)."""
    return data.StructLayout({"path": _pbits(n_paths), "qlen": q_bits, "tick": 1})


def ClusterResult(*, n_paths=64, k=4):
    """A lookup's result: the path's published cluster, congested flag and backup-set membership; ``alt`` (bit p:
    path p is in the same cluster and not congested) and ``shortest`` (the snapshot's shortest-queue path)."""
    return data.StructLayout({"kind": PacketKind, "tag": TAG_BITS, "path": _pbits(n_paths), "cluster": _cbits(k),
                              "congested": 1, "backup": 1, "alt": n_paths, "shortest": _pbits(n_paths)})


def _first_minimum(le, k):
    """One-hot winner over ``k`` values from their pairwise ``le[a * k + b] = (v_a <= v_b)``: ``j`` wins when it is
    strictly below every lower index and no higher than every higher one (ties to the lowest index)."""
    win = []
    for j in range(k):
        w = Const(1, 1)
        for i in range(k):
            if i < j:
                w = w & ~le[i * k + j]
            elif i > j:
                w = w & le[j * k + i]
        win.append(w)
    return win


class Cluster(wiring.Component):
    """SELB queue sampling and k-means path clustering.

    Parameters
    ----------
    n_paths : int
        Egress paths, a power of two from 2 to 1024.
    k : int
        Clusters, 1 to 4.
    q_bits : int
        Width of a queue length, 4 to 24.
    iter_cap : int
        Most assignment sweeps per clustering, 1 to 255.
    draws : int
        Draws per initial centroid before a duplicate is accepted, 1 to 16.
    theta : int
        Reset value of the congestion threshold (growth of a path's queue over one period).
    lfsr_seed : int
        Reset value of the 16-bit LFSR that draws the initial centroids.

    Members
    -------
    i : In(stream.Signature(ClusterItem(n_paths)))
    smp : In(stream.Signature(ClusterSample(n_paths, q_bits)))
    o : Out(stream.Signature(ClusterResult(n_paths, k)))
    ctl : In(ControlSignature())
        Table 0: theta.
    stats : Out(32 * 6)
        Lookups, samples, ticks, published clusterings that hit ``iter_cap``, sweeps and engine cycles of the last
        published clustering.
    """

    latency = 3

    def __init__(self, *, n_paths=64, k=4, q_bits=16, iter_cap=16, draws=4, theta=64, lfsr_seed=LFSR_SEED):
        check_parameters(n_paths=n_paths, k=k, q_bits=q_bits, iter_cap=iter_cap, draws=draws, theta=theta,
                         lfsr_seed=lfsr_seed)
        self._n, self._k, self._q = n_paths, k, q_bits
        self._cap, self._draws, self._theta, self._seed = iter_cap, draws, theta, lfsr_seed
        self._pb, self._cb = _pbits(n_paths), _cbits(k)
        self._sum_bits = q_bits + self._pb + 1
        super().__init__({
            "i": In(stream.Signature(ClusterItem(n_paths=n_paths))),
            "smp": In(stream.Signature(ClusterSample(n_paths=n_paths, q_bits=q_bits))),
            "o": Out(stream.Signature(ClusterResult(n_paths=n_paths, k=k))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    def worst_case_cycles(self):
        """Engine cycles of a clustering at most: every draw used and every sweep up to the cap (datasheet)."""
        return 3 * self._k * self._draws + self._cap * (self._n + self._q + 5) + 2

    def elaborate(self, platform):
        """Input accept (samples, ticks, theta), the lookup pipeline, and the engine's FSM."""
        m = Module()
        adv = Signal(name="adv")
        tick_go = Signal(name="tick_go")
        busy = Signal()
        qcur = [Signal(self._q, name=f"qcur{p}") for p in range(self._n)]
        pend = self._pending_regs()
        pub = self._published_regs()
        theta = Signal(self._q, init=self._theta)
        self._s1 = (Signal(name="s1_we"), Signal(self._pb, name="s1_path"), Signal(self._q, name="s1_qlen"))
        self._accept(m, adv, tick_go, busy, qcur, theta)
        self._lookup(m, adv, pub)
        self._publish(m, tick_go, pend, pub)
        self._engine(m, tick_go, busy, qcur, theta, pend)
        self._counters(m, adv, tick_go, pend)
        return m

    # -- registers -------------------------------------------------------------------------------------------------

    def _pending_regs(self):
        n = self._n
        # reset: the assignment a tick publishes before any clustering ended is the published one's reset value
        return dict(cl=[Signal(self._cb, name=f"pend_cl{p}") for p in range(n)],
                    bk=Signal(n, init=(1 << n) - 1, name="pend_bk"), cg=Signal(n, name="pend_cg"),
                    capped=Signal(name="pend_capped"), iters=Signal(8, name="pend_iters"),
                    cycles=Signal(32, name="pend_cycles"), sh=Signal(self._pb, name="pend_shortest"))

    def _published_regs(self):
        n = self._n
        # reset: every path in cluster 0, which is the backup set, none congested (cluster 0's alt mask: all paths),
        # the shortest path 0 (every queue 0, ties to the lowest index)
        return dict(cl=[Signal(self._cb, name=f"pub_cl{p}") for p in range(n)],
                    bk=Signal(n, init=(1 << n) - 1, name="pub_bk"), cg=Signal(n, name="pub_cg"),
                    alt=[Signal(n, init=(1 << n) - 1 if j == 0 else 0, name=f"pub_alt{j}") for j in range(self._k)],
                    # the backup set's paths that are not congested
                    spare=Signal(n, init=(1 << n) - 1, name="pub_spare"),
                    sh=Signal(self._pb, name="pub_shortest"))

    # -- input -----------------------------------------------------------------------------------------------------

    def _accept(self, m, adv, tick_go, busy, qcur, theta):
        """Both streams advance on ``adv`` (the output register free, no tick waiting for the engine and no
        command offered); a sample is registered and writes its path's ``qcur`` the next clock; ``ctl`` (table 0)
        writes theta in the clock it is offered: commands have priority over both streams for that clock, so a
        command is never held off by traffic or a held output, and a tick offered with it sees the new theta."""
        smp = self.smp.payload
        out_free = self._out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)
        stall = self.smp.valid & smp.tick & busy
        m.d.comb += [adv.eq(out_free & ~stall & ~self.ctl.valid), self.i.ready.eq(adv), self.smp.ready.eq(adv),
                     tick_go.eq(adv & self.smp.valid & smp.tick)]
        # a sample is registered (s1) and written the next clock, so the accept logic stays off the n write enables;
        # a tick in that next clock snapshots the registered sample over its path's qcur (_engine)
        s1_we, s1_path, s1_qlen = self._s1
        m.d.sync += [s1_we.eq(adv & self.smp.valid & ~smp.tick), s1_path.eq(smp.path), s1_qlen.eq(smp.qlen)]
        with m.If(s1_we):
            with m.Switch(s1_path):
                for p in range(self._n):
                    with m.Case(p):
                        m.d.sync += qcur[p].eq(s1_qlen)
        m.d.comb += self.ctl.ready.eq(1)
        with m.If(self.ctl.valid & (self.ctl.payload.table == TABLE_THETA)):
            m.d.sync += theta.eq(self.ctl.payload.data[:self._q])

    def _lookup(self, m, adv, pub):
        """L1 registers the accepted lookup; L2 takes the path's published entry and all k published ``alt`` masks,
        read in the clock after acceptance (so a lookup offered with a tick sees the assignment that tick publishes,
        and everything it gets is of one publish); L3 (the output register) picks the path's cluster's mask."""
        n, k = self._n, self._k
        l1_valid, l2_valid = Signal(name="l1_valid"), Signal(name="l2_valid")
        l1 = Signal(ClusterItem(n_paths=n), name="l1")
        l2 = Signal(ClusterResult(n_paths=n, k=k), name="l2")
        l2_alt = [Signal(n, name=f"l2_alt{j}") for j in range(k)]
        l2_has, l2_spare = Signal(k, name="l2_has_free"), Signal(n, name="l2_spare")
        out_free = self._out_free
        # every stage moves when the output register is free: L1 and L2 drain even while a tick waits for the
        # engine (adv low, nothing accepted)
        with m.If(out_free):
            m.d.sync += [l1_valid.eq(self.i.valid & adv), l1.eq(self.i.payload), l2_valid.eq(l1_valid),
                         l2.kind.eq(l1.kind), l2.tag.eq(l1.tag), l2.path.eq(l1.path), l2.shortest.eq(pub["sh"])]
            # and, per cluster, whether it has a path that is not congested (else its alt is the backup set's)
            m.d.sync += [a.eq(pa) for a, pa in zip(l2_alt, pub["alt"])]
            m.d.sync += [l2_spare.eq(pub["spare"]), *[h.eq(pa != 0) for h, pa in zip(l2_has, pub["alt"])]]
            with m.Switch(l1.path):
                for p in range(n):
                    with m.Case(p):
                        m.d.sync += [l2.cluster.eq(pub["cl"][p]), l2.congested.eq(pub["cg"][p]),
                                     l2.backup.eq(pub["bk"][p])]
        out = self.o.payload
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(out_free & l2_valid):
            # alt: a k-way choice of the n-bit masks read at L2 by the cluster read with them; a cluster without a
            # free path takes the backup set's free paths
            alt = Const(0, n)
            for j in range(k):
                alt = alt | Mux(l2.cluster == j, Mux(l2_has[j], l2_alt[j], l2_spare), 0)
            m.d.sync += [self.o.valid.eq(1), out.eq(l2), out.alt.eq(alt)]

    def _publish(self, m, tick_go, pend, pub):
        """The atomic publish: at a tick every published register takes its pending value in one clock; cluster j's
        ``alt`` mask takes the pending paths of cluster j that are not congested or, when all of them are, the
        backup set's paths that are not congested (the paper's backup set for "highly congested path clusters")."""
        with m.If(tick_go):
            m.d.sync += [pub["bk"].eq(pend["bk"]), pub["cg"].eq(pend["cg"]), pub["sh"].eq(pend["sh"]),
                         pub["spare"].eq(pend["bk"] & ~pend["cg"])]
            for j in range(self._k):
                own = Cat(*[(pend["cl"][p] == j) & ~pend["cg"][p] for p in range(self._n)])
                m.d.sync += pub["alt"][j].eq(own)
            m.d.sync += [pub["cl"][p].eq(pend["cl"][p]) for p in range(self._n)]

    # -- engine ----------------------------------------------------------------------------------------------------

    def _engine(self, m, tick_go, busy, qcur, theta, pend):
        """The clustering engine: its registers, the snapshot, the sweep pipeline, the FSM (module docstring)."""
        e = self._engine_registers()
        self._snapshot(m, e, tick_go, qcur, theta)
        self._sweep(m, e)
        self._fsm(m, e, tick_go, busy, pend)

    def _engine_registers(self):
        """The engine's registers, by name (each stage method says what it loads)."""
        n, k, q, pb, cb = self._n, self._k, self._q, self._pb, self._cb
        e = SimpleNamespace(
            snap=[Signal(q, name=f"snap{p}") for p in range(n)], prev=[Signal(q, name=f"prev{p}") for p in range(n)],
            theta=Signal(q, name="theta_active"), cen=[Signal(q, name=f"cen{j}") for j in range(k)],
            lfsr=Signal(16, init=self._seed, name="lfsr"), cyc=Signal(32, name="cyc"), iters=Signal(8, name="iters"),
            rotate=Signal(name="rotate"),
            # initial centroids: the draw, which centroids are chosen (one bit each), the registered comparison
            j_init=Signal(range(k + 1), name="j_init"), tries=Signal(range(self._draws + 1), name="tries"),
            drawn=Signal(q, name="drawn"), eqs=Signal(k, name="eqs"), chosen=Signal(k, name="chosen"),
            last_try=Signal(name="last_try"), last_cen=Signal(name="last_cen"),
            # sweep: ``feeding`` is a register (set with the sweep's start, cleared after n paths), so the rotation's
            # enable of the 2 x n x q_bits snapshot bits starts at a flip-flop
            feeding=Signal(name="feeding"), cnt=Signal(range(n + 3), name="cnt"),
            p1_v=Signal(name="p1_v"), p1_q=Signal(q, name="p1_q"), p1_d=[Signal(q, name=f"p1_d{j}") for j in range(k)],
            p1_g=Signal(q + 1, name="p1_g"), p2_v=Signal(name="p2_v"), p2_q=Signal(q, name="p2_q"),
            p2_le=Signal(k * k, name="p2_le"), p2_cg=Signal(name="p2_cg"),
            sums=[Signal(self._sum_bits, name=f"sum{j}") for j in range(k)],
            cnts=[Signal(pb + 2, name=f"count{j}") for j in range(k)],
            asg=[Signal(cb, name=f"asg{p}") for p in range(n)], cg_sr=Signal(n, name="congested_sr"),
            # the snapshot's running argmin: the next path's index, the least queue so far and its path
            sh_pos=Signal(pb, name="sh_pos"), sh_q=Signal(q, name="sh_q"), sh_id=Signal(pb, name="sh_id"),
            # dividers, the stop decision, the backup choice
            step=Signal(range(q + 1), name="step"), rem=[Signal(pb + 3, name=f"rem{j}") for j in range(k)],
            quo=[Signal(q, name=f"quo{j}") for j in range(k)], dvd=[Signal(q, name=f"dvd{j}") for j in range(k)],
            neq=Signal(k, name="neq"), more=Signal(name="more"), mean_le=Signal(k * k, name="mean_le"),
            bk_id=Signal(cb, name="bk_id"))
        e.nonempty = Cat(*[c != 0 for c in e.cnts])
        self._feeding = e.feeding
        self._argmin = (e.sh_pos, e.sh_q, e.sh_id)
        return e

    def _snapshot(self, m, e, tick_go, qcur, theta):
        """At a tick: ``snap`` takes ``qcur`` (with the sample registered the clock before forwarded), ``prev`` the
        old ``snap``, theta is latched. During a sweep both rotate towards index 0 (the head), n shifts a sweep."""
        n = self._n
        with m.If(tick_go):
            s1_we, s1_path, s1_qlen = self._s1
            m.d.sync += [s.eq(Mux(s1_we & (s1_path == p), s1_qlen, c)) for p, (s, c) in enumerate(zip(e.snap, qcur))]
            m.d.sync += [pv.eq(s) for pv, s in zip(e.prev, e.snap)]
            m.d.sync += e.theta.eq(theta)
        with m.If(e.rotate):
            m.d.sync += [e.snap[p].eq(e.snap[(p + 1) % n]) for p in range(n)]
            m.d.sync += [e.prev[p].eq(e.prev[(p + 1) % n]) for p in range(n)]

    def _sweep(self, m, e):
        """The sweep pipeline, one path a clock: P1 registers ``|q - c_j|`` and the growth ``q - prev``; P2 the
        pairwise ``d_a <= d_b`` and the congested bit; P3 adds the path to its winner's sum and count and shifts its
        cluster and congested bit into the assignment registers, and keeps the argmin of the queues (a strictly
        smaller queue replaces it, so ties go to the lowest path index)."""
        n, k, q = self._n, self._k, self._q
        head_q, head_p = e.snap[0], e.prev[0]
        with m.If(e.feeding | e.p1_v | e.p2_v):
            m.d.sync += [e.p1_v.eq(e.feeding), e.p1_q.eq(head_q), e.p1_g.eq(head_q - head_p)]
            for j in range(k):
                m.d.sync += e.p1_d[j].eq(Mux(head_q >= e.cen[j], head_q - e.cen[j], e.cen[j] - head_q))
            m.d.sync += [e.p2_v.eq(e.p1_v), e.p2_q.eq(e.p1_q), e.p2_cg.eq(~e.p1_g[q] & (e.p1_g[:q] > e.theta))]
            for a in range(k):
                for b in range(k):
                    m.d.sync += e.p2_le[a * k + b].eq(e.p1_d[a] <= e.p1_d[b])
        win = _first_minimum(e.p2_le, k)
        win_id = Const(0, self._cb)
        for j in range(k):
            win_id = win_id | Mux(win[j], j, 0)
        with m.If(e.p2_v):
            m.d.sync += [e.asg[p].eq(e.asg[p + 1]) for p in range(n - 1)]
            m.d.sync += [e.asg[n - 1].eq(win_id), e.cg_sr.eq(Cat(e.cg_sr[1:], e.p2_cg))]
            for j in range(k):
                with m.If(win[j]):
                    m.d.sync += [e.sums[j].eq(e.sums[j] + e.p2_q), e.cnts[j].eq(e.cnts[j] + 1)]
            m.d.sync += e.sh_pos.eq(e.sh_pos + 1)
            with m.If(e.p2_q < e.sh_q):
                m.d.sync += [e.sh_q.eq(e.p2_q), e.sh_id.eq(e.sh_pos)]

    def _divide(self, m, e):
        """One step of the k restoring dividers: a quotient bit each, MSB first."""
        q = self._q
        for j in range(self._k):
            r2 = Cat(e.dvd[j][q - 1], e.rem[j])
            ge = r2 >= e.cnts[j]
            m.d.sync += [e.rem[j].eq(Mux(ge, r2 - e.cnts[j], r2)), e.quo[j].eq(Cat(ge, e.quo[j][:q - 1])),
                         e.dvd[j].eq(e.dvd[j] << 1)]

    def _fsm(self, m, e, tick_go, busy, pend):
        """INIT (DRAW, CMP, TEST), SWEEP, LOAD, DIV, CHECK, DECIDE, BACKUP, PEND (module docstring); ``cyc``
        counts the busy clocks."""
        n, k, q = self._n, self._k, self._q
        idx = e.lfsr[:self._pb]
        with m.If(busy):
            m.d.sync += e.cyc.eq(e.cyc + 1)
        with m.FSM(name="engine"):
            with m.State("IDLE"):
                with m.If(tick_go):
                    # busy is a register (set here, cleared by PEND), so the tick's stall starts at a flip-flop;
                    # the engine's counters were cleared by PEND (and reset), so the tick reaches only busy
                    m.d.sync += busy.eq(1)
                    m.next = "DRAW"
            with m.State("DRAW"):
                with m.Switch(idx):
                    for p in range(n):
                        with m.Case(p):
                            m.d.sync += e.drawn.eq(e.snap[p])
                m.d.sync += e.lfsr.eq(Cat(e.lfsr[15] ^ e.lfsr[13] ^ e.lfsr[12] ^ e.lfsr[10], e.lfsr[:15]))
                m.next = "CMP"
            with m.State("CMP"):
                # the drawn value against the centroids chosen so far, registered (the decision reads only these)
                m.d.sync += [e.eqs.eq(Cat(*[e.chosen[j] & (e.cen[j] == e.drawn) for j in range(k)])),
                             e.last_try.eq(e.tries == self._draws - 1), e.last_cen.eq(e.j_init == k - 1)]
                m.next = "TEST"
            with m.State("TEST"):
                with m.If((e.eqs == 0) | e.last_try):
                    with m.Switch(e.j_init):
                        for j in range(k):
                            with m.Case(j):
                                m.d.sync += [e.cen[j].eq(e.drawn), e.chosen[j].eq(1)]
                    m.d.sync += [e.j_init.eq(e.j_init + 1), e.tries.eq(0)]
                    with m.If(e.last_cen):
                        m.d.sync += self._sweep_start(e.sums, e.cnts, e.cnt)
                        m.next = "SWEEP"
                    with m.Else():
                        m.next = "DRAW"
                with m.Else():
                    m.d.sync += e.tries.eq(e.tries + 1)
                    m.next = "DRAW"
            with m.State("SWEEP"):
                m.d.sync += e.cnt.eq(e.cnt + 1)
                m.d.comb += e.rotate.eq(e.feeding)
                with m.If(e.cnt == n - 1):
                    m.d.sync += e.feeding.eq(0)
                with m.If(e.cnt == n + 1):
                    m.d.sync += [e.step.eq(0), e.iters.eq(e.iters + 1)]
                    m.next = "LOAD"
            with m.State("LOAD"):
                # the last path was accumulated at the edge ending SWEEP. The sum's bits from q up are below the
                # count (the mean fits q bits), so the divider starts from them and needs q steps, not q + pb + 1.
                for j in range(k):
                    m.d.sync += [e.rem[j].eq(e.sums[j][q:]), e.dvd[j].eq(e.sums[j][:q]), e.quo[j].eq(0)]
                m.next = "DIV"
            with m.State("DIV"):
                m.d.sync += e.step.eq(e.step + 1)
                self._divide(m, e)
                with m.If(e.step == q - 1):
                    m.next = "CHECK"
            with m.State("CHECK"):
                # the new means replace the centroids of the nonempty clusters; what changed, the means' order and
                # whether another sweep is allowed are registered for DECIDE
                m.d.sync += [e.more.eq(e.iters < self._cap),
                             e.neq.eq(Cat(*[e.nonempty[j] & (e.quo[j] != e.cen[j]) for j in range(k)]))]
                for j in range(k):
                    with m.If(e.nonempty[j]):
                        m.d.sync += e.cen[j].eq(e.quo[j])
                for a in range(k):
                    for b in range(k):
                        # an empty cluster compares as larger than every other: never the backup
                        m.d.sync += e.mean_le[a * k + b].eq(
                            e.nonempty[a] & (~e.nonempty[b] | (e.quo[a] <= e.quo[b])) if a != b else 1)
                m.next = "DECIDE"
            with m.State("DECIDE"):
                with m.If((e.neq != 0) & e.more):
                    m.d.sync += self._sweep_start(e.sums, e.cnts, e.cnt)
                    m.next = "SWEEP"
                with m.Else():
                    m.d.sync += pend["capped"].eq(e.neq != 0)
                    m.next = "BACKUP"
            with m.State("BACKUP"):
                acc = Const(0, self._cb)
                for j, w in enumerate(_first_minimum(e.mean_le, k)):
                    acc = acc | Mux(w, j, 0)
                m.d.sync += e.bk_id.eq(acc)
                m.next = "PEND"
            with m.State("PEND"):
                m.d.sync += [pend["cl"][p].eq(e.asg[p]) for p in range(n)]
                m.d.sync += [pend["bk"].eq(Cat(*[a == e.bk_id for a in e.asg])), pend["cg"].eq(e.cg_sr),
                             pend["iters"].eq(e.iters), pend["cycles"].eq(e.cyc + 1), pend["sh"].eq(e.sh_id),
                             busy.eq(0), e.j_init.eq(0), e.tries.eq(0), e.cyc.eq(0), e.iters.eq(0), e.chosen.eq(0)]
                m.next = "IDLE"

    def _sweep_start(self, sums, cnts, cnt):
        sh_pos, sh_q, sh_id = self._argmin
        return [*[s.eq(0) for s in sums], *[c.eq(0) for c in cnts], cnt.eq(0), self._feeding.eq(1),
                sh_pos.eq(0), sh_q.eq(-1), sh_id.eq(0)]

    def _counters(self, m, adv, tick_go, pend):
        """``stats``: lookups, samples and ticks accepted; at each tick the published clustering's capped flag
        (counted), sweeps and engine cycles."""
        names = ("n_lookups", "n_samples", "n_ticks", "n_capped", "last_iters", "last_cycles")
        c = [Signal(32, name=x) for x in names]
        with m.If(adv & self.i.valid):
            m.d.sync += c[0].eq(c[0] + 1)
        with m.If(adv & self.smp.valid & ~self.smp.payload.tick):
            m.d.sync += c[1].eq(c[1] + 1)
        with m.If(tick_go):
            m.d.sync += [c[2].eq(c[2] + 1), c[3].eq(c[3] + pend["capped"]), c[4].eq(pend["iters"]),
                         c[5].eq(pend["cycles"])]
        m.d.comb += self.stats.eq(Cat(*c))
