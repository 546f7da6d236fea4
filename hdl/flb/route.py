"""FLB source edge switch: per-packet path decision, rerouting without reordering (FLB: section 3.1, Algorithm 1,
section 3.2's isolated paths, section 3.4, Table 1; datasheet docs/flb_route.md).

Per flow (the flow index, for example the CRC16 of the 5-tuple that the parser layer computes, as the paper's
16-bit flow ID) the flow table holds a valid bit, the time stamp of the flow's previous packet (in ticks of the
switch's timer) and its selected path. Per destination edge switch the path delay table holds each path's queueing
delay (ticks, written through ``ctl``), and the isolation table the set of isolated paths (``ctl``). With
``upd=True`` both tables are also written per packet through the ``upd`` stream (one write per clock beside the
packets; a packet taken in the same clock as an update or later sees it: the write lands at S0 and the packet of
the same clock gets it forwarded at S2).

Algorithm 1, one decision per clock: a new flow (no entry, or an entry idle for ``timeout`` ticks or more) takes the
minimum-delay path outside the isolated set; an existing flow on path ``p`` with gap ``dt`` since its previous
packet moves to the fastest path ``p'`` outside the isolated set with ``0 < delay(p) - delay(p') <= dt - 1 -
margin``, else stays (``margin`` 0: the paper's ``< dt``; 1: no reordering from the tick rounding, datasheet "Tick
rounding and margin").

Pipeline (one register stage per cycle, all moved by one ``adv``; latency 7, 8 with more than 8 paths)::

    S0 accept        S1          S2            S3              S4              S5               S6 compute  S7 out
    i or ctl ------> RAM data -> stamp bank -> gap, pairwise -> window and  -> per current   -> forward,  -> o
    stamp R/W,       (banks     select,       differences,    order bits,     path p its       pick by p,
    delay/iso read,  registered eligible set  path read       existing flow,  next path; path  path write
    ctl write        at S2)                   (every bank)    path banks reg. bank select

The aging metric of the paper (reset by each packet, incremented by a periodic timer) is kept as the equivalent
time stamp: the table stores the tick of the flow's previous packet and the gap is ``now - stamp`` modulo
``2**time_bits``. The stamp is written at S0 with the packet's own ``now`` (known on entry), so a packet of the same
flow one clock later already reads it: no forwarding. Only the path is computed late; the path table is read at
S3 and written at S6, and the three operations between are forwarded from their result registers (S7, S8, S9).
Every decision that depends on the current path is computed for all ``n_paths`` possible current paths at S5, so
S6 only picks one. Beyond 8 paths the winners (an AND over ``n_paths - 1`` order bits per candidate, then an
encoder) do not fit one stage: S5 registers them one-hot and a stage S5b encodes them and makes the per-path choice
(latency 8); the path table read then moves to S4, so that the writes in flight between read and write are still
the three of S7, S8 and S9. The flow tables are banks of one block RAM each; every memory output goes straight into a
register, and the bank select comes one stage after it.

Choices where the paper is silent (all in the datasheet): time stamps instead of an aging counter (aliasing
after ``2**time_bits`` idle ticks); the isolated set per destination, ignored when it holds every path; an
existing flow on a path that became isolated moves at once to the fastest eligible path it can take without
reordering (``delay(p) - delay(q) < gap - margin``, or q slower), and only when there is none to the new-flow
choice; the window narrowed by ``margin`` ticks for the tick rounding (0 by default, the paper's); ties go to the
lowest path index; items whose flow or destination is out of range pass with ``ok`` 0 and change nothing; every
item kind is routed; reset sweeps the flow table (inputs not ready meanwhile) and keeps the delay and isolation tables.
"""

from amaranth import Array, C, Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS

__all__ = ["Route", "RouteItem", "RouteResult", "RouteUpdate", "check_parameters", "TABLE_DELAY", "TABLE_ISOLATE",
           "PATH_FIELD_BITS", "MARGIN"]

TABLE_DELAY = 0     # index = dest << 4 | path, data = queueing delay in ticks (< 2**delay_bits)
TABLE_ISOLATE = 1   # index = dest, data = isolated-path mask (bit p: path p; < 2**n_paths)
PATH_FIELD_BITS = 4  # the path's field in a delay command's index
MARGIN = 0          # ticks taken off the reroute window (datasheet "Tick rounding and margin"): the paper's
SPLIT_ABOVE = 8     # more paths than this: the choice over two stages (S5, S5b), latency 8 (datasheet "Pipeline")


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_flows, n_dests, n_paths, time_bits, delay_bits, timeout, margin=MARGIN):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_flows", n_flows), ("n_dests", n_dests), ("n_paths", n_paths),
                        ("time_bits", time_bits), ("delay_bits", delay_bits), ("timeout", timeout),
                        ("margin", margin)):
        check_int(name, value)
    if not 2 <= n_flows <= 1 << 20:
        raise ValueError(f"n_flows must be 2 to 1,048,576, not {n_flows}")
    if not 1 <= n_dests <= 1 << 12:
        raise ValueError(f"n_dests must be 1 to 4,096, not {n_dests}")
    if not 2 <= n_paths <= 1 << PATH_FIELD_BITS:
        raise ValueError(f"n_paths must be 2 to 16, not {n_paths}")
    if not 4 <= time_bits <= 32:
        raise ValueError(f"time_bits must be 4 to 32, not {time_bits}")
    if not 4 <= delay_bits <= 32:
        raise ValueError(f"delay_bits must be 4 to 32, not {delay_bits}")
    if not 1 <= timeout < 1 << time_bits:
        hint = " (the default; set timeout too)" if timeout == 4096 else ""
        raise ValueError(f"timeout must be 1 to 2**time_bits - 1 = {(1 << time_bits) - 1:,} (time_bits {time_bits}), "
                         f"not {timeout}{hint}")
    if not 0 <= margin < 1 << time_bits:
        raise ValueError(f"margin must be 0 to 2**time_bits - 1 = {(1 << time_bits) - 1:,} ticks (time_bits "
                         f"{time_bits}), not {margin}")


def RouteItem(*, n_flows=65536, n_dests=16, time_bits=16, n_paths=8, force=False):
    """One packet at the source edge switch: its flow index, destination edge switch and the timer's ``now``; with
    ``force`` (a build option), ``force`` 1 makes ``fpath`` the packet's path (isolation decided it upstream), which
    the flow table records as the flow's path."""
    fields = {"kind": PacketKind, "flow": _bits(n_flows), "dest": _bits(n_dests), "now": time_bits, "tag": TAG_BITS}
    if force:
        fields.update(force=1, fpath=_bits(n_paths))
    return data.StructLayout(fields)


def RouteResult(*, n_flows=65536, n_dests=16, n_paths=8, time_bits=16):
    """The input fields passed through, the chosen ``path``, ``new`` (the flow had no live entry), ``rerouted``
    (an existing flow changed path) and ``ok`` (flow and destination in range; 0: path 0, no state change)."""
    return data.StructLayout({"kind": PacketKind, "flow": _bits(n_flows), "dest": _bits(n_dests),
                              "now": time_bits, "tag": TAG_BITS, "path": _bits(n_paths), "new": 1,
                              "rerouted": 1, "ok": 1})


def RouteUpdate(*, n_dests=16, n_paths=8, delay_bits=16):
    """One item of the optional ``upd`` stream (``upd=True``): ``isolate`` 0 writes ``delay`` as the delay of
    (``dest``, ``path``) (a piggybacked measurement arriving at the source edge); ``isolate`` 1 writes ``mask`` as
    the isolated-path set of ``dest`` (``path`` and ``delay`` unused). Out-of-range ``dest`` or ``path``: ignored."""
    return data.StructLayout({"isolate": 1, "dest": _bits(n_dests), "path": _bits(n_paths), "delay": delay_bits,
                              "mask": n_paths})


def _below(value, limit):
    """``value < limit`` as a zero test of the high bits and a short compare of the low ones."""
    b = (limit - 1).bit_length()
    high = value[b:] == 0 if len(value) > b else C(1, 1)
    if limit == 1 << b:
        return high
    return high & (value[:b] < limit)


def _one_hot(m, name, members, beats, n):
    """One-hot: the member that beats every other member (``beats[a][b]``: a is no slower than b, ties to the
    lower index); all zero when there is no member."""
    one_hot = []
    for a in range(n):
        terms = [~members[b] | beats[a][b] for b in range(n) if b != a]
        w = Signal(name=f"{name}_w{a}")
        andall = C(1, 1)
        for t in terms:
            andall = andall & t
        m.d.comb += w.eq(members[a] & andall)
        one_hot.append(w)
    return one_hot


def _encode(m, name, one_hot, n):
    """The index of the one-hot bit set (0 when none is)."""
    pb = _bits(n)
    enc = Signal(pb, name=f"{name}_enc")
    m.d.comb += enc.eq(0)
    for bit in range(pb):
        terms = [one_hot[a] for a in range(n) if a >> bit & 1]
        v = C(0, 1)
        for t in terms:
            v = v | t
        m.d.comb += enc[bit].eq(v)
    return enc


def _winner(m, name, members, beats, n):
    """The fastest member (:func:`_one_hot`), encoded; and whether the set is non-empty."""
    return _encode(m, name, _one_hot(m, name, members, beats, n), n), members.any()


#: Depth of one RAMB36 in simple dual-port mode by data width: a flow table is split into banks of this depth, so
#: every bank is one block RAM whose output goes straight into its own register (the bank select comes after it).
def _bank_depth(width):
    for w, d in ((1, 32768), (2, 16384), (4, 8192), (9, 4096), (18, 2048), (36, 1024)):
        if width <= w:
            return d
    return 512


class _Banked:
    """A per-flow table in banks of one block RAM each: reads of every bank at once, each bank's data registered,
    then the addressed bank selected (one stage later); writes to the addressed bank, or to every bank (the reset
    sweep)."""

    def __init__(self, m, name, shape, depth):
        width = shape.size if isinstance(shape, data.Layout) else shape
        bd = _bank_depth(width)
        if depth <= bd:
            self.shift, self.n = _bits(depth), 1
        else:
            self.shift, self.n = (bd - 1).bit_length(), -(-depth // bd)
        self.shape = shape
        self.ports = []
        for b in range(self.n):
            mem = memory.Memory(shape=shape, depth=min(depth - b * (1 << self.shift), 1 << self.shift), init=[])
            m.submodules[f"{name}{b}"] = mem
            self.ports.append((mem.read_port(transparent_for=()), mem.write_port()))

    def read(self, m, addr, en):
        for rd, _ in self.ports:
            m.d.comb += [rd.addr.eq(addr[:self.shift]), rd.en.eq(en)]

    def write(self, m, addr, value, en, every=C(0, 1)):
        for b, (_, wr) in enumerate(self.ports):
            mine = (addr >> self.shift) == b if self.n > 1 else C(1, 1)
            m.d.comb += [wr.addr.eq(addr[:self.shift]), wr.data.eq(value), wr.en.eq(every | (en & mine))]

    def registers(self, m, adv, name):
        """Each bank's read data in its own register (loaded on ``adv``, nothing in between)."""
        regs = [Signal(self.shape, name=f"{name}{b}") for b in range(self.n)]
        with m.If(adv):
            m.d.sync += [r.eq(rd.data) for r, (rd, _) in zip(regs, self.ports)]
        return regs

    def select(self, regs, addr):
        return Array(regs)[addr >> self.shift] if self.n > 1 else regs[0]


class _Stage:
    """An operation's registers at one stage (plain Signals, named by stage)."""

    def __init__(self, name, item):
        self.valid = Signal(name=f"{name}_valid")
        self.ok = Signal(name=f"{name}_ok")
        self.item = Signal(item, name=f"{name}_item", reset_less=True)

    def carry(self, other):
        return [self.valid.eq(other.valid), self.ok.eq(other.ok), self.item.eq(other.item)]


class Route(wiring.Component):
    """FLB per-packet path decision at the source edge switch, one packet per clock.

    Parameters
    ----------
    n_flows : int
        Flow table entries (field ``flow``), 2 to 2**20; 65,536 holds every CRC16 flow ID.
    n_dests : int
        Destination edge switches (field ``dest``), 1 to 4,096.
    n_paths : int
        Paths per destination, 2 to 16.
    time_bits : int
        Width of ``now`` and of the stored stamps, in timer ticks.
    delay_bits : int
        Width of a path's queueing delay, in the same ticks.
    timeout : int
        Ticks after which an idle flow's entry is free (the flow is new again).
    margin : int
        Ticks taken off the reroute window, 0 to 2**time_bits - 1: a move needs ``delay(p) - delay(p') <= gap - 1 -
        margin``. 0 (default): the paper's ``< gap``, which the tick rounding lets overtake by less than a tick; 1:
        never overtakes when the delays are exact to the tick (rounded up); more: room for that many ticks of delay
        error less one.
    upd : bool
        With the ``upd`` stream (below).
    force : bool
        With the item fields ``force`` and ``fpath``: a packet with ``force`` 1 takes ``fpath`` (a path decided
        upstream, ``flb-tx-wire``'s isolation path) whatever Algorithm 1 would choose, and the flow table records
        it, so that the flow's next decision starts from the path its packets took (``new`` and ``rerouted`` as for
        any choice).

    Members
    -------
    i : In(stream.Signature(RouteItem(...)))
    o : Out(stream.Signature(RouteResult(...)))
    upd : In(stream.Signature(RouteUpdate(...)))
        Only with ``upd=True``: one delay or isolation-mask write per clock beside the packets; a packet taken in
        the same clock as an update or later sees it (forwarded from S0 to S2 for the same clock).
    ctl : In(ControlSignature())
        Path delays (table 0) and isolated-path sets (table 1), datasheet "Control tables".

    Attributes
    ----------
    latency : int
        Cycles from a packet taken on ``i`` to its result on ``o``: 7 (the class attribute, every build up to 8
        paths), 8 on an instance with ``n_paths`` > 8 (the choice over two stages, S5 and S5b).
    """

    latency = 7

    def __init__(self, *, n_flows=65536, n_dests=16, n_paths=8, time_bits=16, delay_bits=16, timeout=4096,
                 margin=MARGIN, upd=False, force=False):
        for name, value in (("upd", upd), ("force", force)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")
        self._upd, self._force = upd, force
        check_parameters(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, time_bits=time_bits,
                         delay_bits=delay_bits, timeout=timeout, margin=margin)
        self._nf, self._nd, self._n = n_flows, n_dests, n_paths
        # beyond 8 paths the winners and the per-path choice take two stages (S5, S5b): one cycle more
        self._split = n_paths > SPLIT_ABOVE
        if self._split:
            self.latency = Route.latency + 1
        self._tb, self._db, self._timeout, self._margin = time_bits, delay_bits, timeout, margin
        self._fb, self._pb = _bits(n_flows), _bits(n_paths)
        self._item = RouteItem(n_flows=n_flows, n_dests=n_dests, time_bits=time_bits, n_paths=n_paths, force=force)
        self._stamp = data.StructLayout({"valid": 1, "stamp": time_bits})
        super().__init__({
            "i": In(stream.Signature(self._item)),
            "o": Out(stream.Signature(RouteResult(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths,
                                                  time_bits=time_bits))),
            "ctl": In(ControlSignature()),
            **({"upd": In(stream.Signature(RouteUpdate(n_dests=n_dests, n_paths=n_paths, delay_bits=delay_bits)))}
               if upd else {}),
        })

    @property
    def memory_bits(self):
        """Bits held in memories: flow stamps and paths, delays, isolation masks."""
        return (self._nf * (1 + self._tb + self._pb) + self._nd * self._n * (self._db + 1))

    def item_cycles(self, result):
        return 1

    def elaborate(self, platform):
        """The datasheet's block diagram: memories, reset sweep, S0 -> S1 -> ... -> S7 (-> S8, S9 kept for
        forwarding), with S5b between S5 and S6 beyond 8 paths."""
        m = Module()
        mem = self._memories(m)
        adv = Signal()
        names = ("s1", "s2", "s3", "s4", "s5") + (("s5b",) if self._split else ()) + ("s6", "s7", "s8", "s9")
        s = {n: _Stage(n, self._item) for n in names}
        self._busy = Signal(init=1, name="sweep_busy")
        sweep = self._sweep(m, mem["st"])
        m.d.comb += adv.eq(~s["s7"].valid | self.o.ready)
        self._accept_stage(m, adv, mem, s, sweep)
        ram = self._register_stage(m, adv, mem, s)
        ram = self._select_stage(m, adv, s, ram)
        gap, diff, elig, valid4 = self._difference_stage(m, adv, mem, s, ram)
        win, beats, exist5, elig5, pregs = self._window_stage(m, adv, mem, s, gap, diff, elig, valid4)
        if self._split:
            choice = self._winner_stage(m, adv, mem, s, win, beats, exist5, elig5)
        else:
            choice = self._winners(m, win, beats, elig5) + (exist5, elig5, pregs, s["s5"])
        cand, newp, exist6, fsel, pmem, moved = self._choice_stage(m, adv, mem, s, *choice)
        self._compute_stage(m, adv, mem, s, cand, newp, exist6, fsel, pmem, moved)
        return m

    def _memories(self, m):
        """Flow stamps (valid, stamp) and flow paths in banks; per-destination delay rows and isolation masks."""
        dt = memory.Memory(shape=self._n * self._db, depth=self._nd, init=[])
        it = memory.Memory(shape=self._n, depth=self._nd, init=[])
        m.submodules.delays, m.submodules.isolated = dt, it
        self._stamps = _Banked(m, "stamps", self._stamp, self._nf)
        return {
            "st": self._stamps,
            "pt": _Banked(m, "paths", self._pb, self._nf),
            "dt": (dt.read_port(transparent_for=()), dt.write_port(granularity=self._db)),
            "it": (it.read_port(transparent_for=()), it.write_port()),
        }

    def _sweep(self, m, stamps):
        """After reset: clear every flow's valid bit, one entry of every bank a clock (a bank's depth in clocks),
        inputs not ready."""
        top = min(self._nf, 1 << stamps.shift) - 1
        addr = Signal(range(top + 1), init=top, name="sweep_addr")
        with m.If(self._busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += self._busy.eq(0)
        return addr

    def _accept_stage(self, m, adv, mem, s, sweep):
        """S0: take a control command (first) or a packet. A packet reads its flow's stamp (every bank) and writes
        its own ``now`` as the new stamp in the same clock (the read returns the old one), reads its
        destination's delay row and isolation mask. A command writes the delay or isolation table here (a packet
        taken in a later clock reads it). Loads S1."""
        s1 = s["s1"]
        i, c = self.i.payload, self.ctl.payload
        m.d.comb += [self.ctl.ready.eq(adv & ~self._busy),
                     self.i.ready.eq(adv & ~self._busy & ~self.ctl.valid)]
        take_i = self.i.valid & self.i.ready
        take_c = self.ctl.valid & self.ctl.ready
        ok = _below(i.flow, self._nf) & _below(i.dest, self._nd)
        st = mem["st"]
        drd, dwr = mem["dt"]
        ird, iwr = mem["it"]
        st.read(m, i.flow, adv)
        m.d.comb += [drd.addr.eq(i.dest), drd.en.eq(adv), ird.addr.eq(i.dest), ird.en.eq(adv)]
        entry = Signal(self._stamp, name="s0_stamp")
        m.d.comb += [entry.valid.eq(~self._busy), entry.stamp.eq(Mux(self._busy, 0, i.now))]
        st.write(m, Mux(self._busy, sweep, i.flow), entry, take_i & ok, every=self._busy)
        cdest = c.index >> PATH_FIELD_BITS
        cpath = c.index[:PATH_FIELD_BITS]
        delay_ok = (take_c & (c.table == TABLE_DELAY) & _below(cdest, self._nd) & _below(cpath, self._n)
                    & _below(c.data, 1 << self._db))
        iso_ok = take_c & (c.table == TABLE_ISOLATE) & _below(c.index, self._nd) & _below(c.data, 1 << self._n)
        if not self._upd:
            m.d.comb += [dwr.addr.eq(cdest), dwr.data.eq(Cat(*[c.data[:self._db]] * self._n)),
                         iwr.addr.eq(c.index), iwr.data.eq(c.data[:self._n]), iwr.en.eq(iso_ok)]
            for p in range(self._n):
                m.d.comb += dwr.en[p].eq(delay_ok & (cpath == p))
        else:
            self._update_writes(m, adv, take_i, (cdest, cpath, delay_ok, iso_ok), dwr, iwr)
        with m.If(adv):
            m.d.sync += [s1.valid.eq(take_i), s1.ok.eq(ok), s1.item.eq(i)]

    def _update_writes(self, m, adv, take_i, command, dwr, iwr):
        """``upd=True``, S0: the ``upd`` stream is taken with the packets (same ready) and never with a command
        (``ctl`` waiting holds both); an in-range update writes the delay or isolation table on this clock's edge,
        sharing the command's write ports. The packet taken in the same clock read the old row: the update is
        matched against its destination here and carried to S2 (``fwd``), which patches the registered row."""
        cdest, cpath, delay_ok, iso_ok = command
        c, u = self.ctl.payload, self.upd.payload
        m.d.comb += self.upd.ready.eq(self.i.ready)
        take_u = self.upd.valid & self.upd.ready
        u_dest_ok = take_u & _below(u.dest, self._nd)
        u_del = u_dest_ok & ~u.isolate & _below(u.path, self._n)
        u_iso = u_dest_ok & u.isolate
        m.d.comb += [dwr.addr.eq(Mux(take_u, u.dest, cdest)),
                     dwr.data.eq(Mux(take_u, Cat(*[u.delay] * self._n), Cat(*[c.data[:self._db]] * self._n))),
                     iwr.addr.eq(Mux(take_u, u.dest, c.index)),
                     iwr.data.eq(Mux(take_u, u.mask, c.data[:self._n])), iwr.en.eq(iso_ok | u_iso)]
        for p in range(self._n):
            m.d.comb += dwr.en[p].eq((delay_ok & (cpath == p)) | (u_del & (u.path == p)))
        same = take_i & (u.dest == self.i.payload.dest)
        self._fwd = {}
        for k in ("s1", "s2"):
            self._fwd[k] = dict(delay=Signal(self._n, name=f"{k}_fwd_delay"), iso=Signal(name=f"{k}_fwd_iso"),
                                value=Signal(self._db, name=f"{k}_fwd_value"),
                                mask=Signal(self._n, name=f"{k}_fwd_mask"))
        f1, f2 = self._fwd["s1"], self._fwd["s2"]
        with m.If(adv):
            m.d.sync += [f1["delay"][p].eq(same & u_del & (u.path == p)) for p in range(self._n)]
            m.d.sync += [f1["iso"].eq(same & u_iso), f1["value"].eq(u.delay), f1["mask"].eq(u.mask)]
            m.d.sync += [f2[key].eq(f1[key]) for key in f1]

    def _register_stage(self, m, adv, mem, s):
        """S1: every memory's read data into its own register (nothing in between). Returns S2's
        ``(stamp bank registers, delay row, isolation mask)``."""
        banks = mem["st"].registers(m, adv, "s2_stamp")
        d2 = Signal(self._n * self._db, name="s2_delays")
        i2 = Signal(self._n, name="s2_isolated")
        with m.If(adv):
            m.d.sync += [d2.eq(mem["dt"][0].data), i2.eq(mem["it"][0].data)]
            m.d.sync += s["s2"].carry(s["s1"])
        return banks, d2, i2

    def _select_stage(self, m, adv, s, ram):
        """S2: the addressed stamp bank selected; the eligible set (the non-isolated paths, or every path when all
        are isolated). Loads S3."""
        banks, d2, i2 = ram
        n = self._n
        if self._upd:
            # the update taken in the packet's own clock (the RAM row read before its write): patched in here
            f2, db = self._fwd["s2"], self._db
            d2p, i2p = Signal(n * db, name="s2_delays_fwd"), Signal(n, name="s2_isolated_fwd")
            m.d.comb += [d2p[p * db:(p + 1) * db].eq(Mux(f2["delay"][p], f2["value"], d2[p * db:(p + 1) * db]))
                         for p in range(n)]
            m.d.comb += i2p.eq(Mux(f2["iso"], f2["mask"], i2))
            d2, i2 = d2p, i2p
        st3 = Signal(self._stamp, name="s3_stamp")
        d3 = Signal(n * self._db, name="s3_delays")
        elig = Signal(n, name="s3_eligible")
        with m.If(adv):
            m.d.sync += [st3.eq(self._stamps.select(banks, s["s2"].item.flow)), d3.eq(d2),
                         elig.eq(Mux(i2 == (1 << n) - 1, (1 << n) - 1, ~i2))]
            m.d.sync += s["s3"].carry(s["s2"])
        # margin >= 2: S3's window bound is now - (margin - 1) - stamp - 1; its first term is formed here, so S3 has
        # one subtraction (margin 1 needs none: now - stamp - 1 = now + ~stamp)
        self._now_less = s["s3"].item.now
        if self._margin >= 2:
            self._now_less = Signal(self._tb, name="s3_now_less_margin")
            with m.If(adv):
                m.d.sync += self._now_less.eq((s["s2"].item.now - (self._margin - 1))[:self._tb])
        return st3, d3, elig

    def _difference_stage(self, m, adv, mem, s, ram):
        """S3: the gap ``now - stamp`` (mod 2**time_bits), the window's bound ``gap - margin`` (mod 2**time_bits;
        ``gap`` itself when ``margin`` is 0) and every ordered pair's delay difference ``delay(p) - delay(q)`` (one
        sign bit more). Issues the path table read (every bank; at S4 instead when S5b is built). Loads S4."""
        st3, d3, elig = ram
        n, db = self._n, self._db
        s3 = s["s3"]
        if not self._split:
            mem["pt"].read(m, s3.item.flow, adv)
        gap = Signal(self._tb, name="s4_gap")
        bound = gap
        if self._margin:
            bound = Signal(self._tb, name="s4_gap_less_margin")
            with m.If(adv):
                m.d.sync += bound.eq((self._now_less + ~st3.stamp)[:self._tb])
        valid4 = Signal(name="s4_stamp_valid")
        elig4 = Signal(n, name="s4_eligible")
        diff = {}
        d = [d3[p * db:(p + 1) * db] for p in range(n)]
        with m.If(adv):
            m.d.sync += [gap.eq((s3.item.now - st3.stamp)[:self._tb]), valid4.eq(st3.valid), elig4.eq(elig)]
            for p in range(n):
                for q in range(n):
                    if p != q:
                        diff[p, q] = Signal(db + 1, name=f"s4_diff_{p}_{q}")
                        m.d.sync += diff[p, q].eq(d[p] - d[q])
            m.d.sync += s["s4"].carry(s3)
        return (gap, bound), diff, elig4, valid4

    def _window_stage(self, m, adv, mem, s, gap, diff, elig, valid4):
        """S4: per ordered pair, the member bit: q eligible and, when p is eligible, in p's window ``0 < delay(p) -
        delay(q) < gap - margin`` (q is faster and may take p's flow without reordering), when p is isolated, safe
        ``delay(p) - delay(q) < 0`` or ``< gap - margin`` (q may take it without reordering); the order bit
        (``beats[a][b]``: a no slower than b, ties to the lower index); whether the flow exists (a valid stamp less
        than ``timeout`` ticks old); the path banks' read data registered (when S5b is built: the path table read
        issued here instead, three stages before its write as without S5b). Loads S5."""
        n, db = self._n, self._db
        gap, bound = gap
        win = {}
        beats = [[None] * n for _ in range(n)]
        exist5 = Signal(name="s5_exist")
        elig5 = Signal(n, name="s5_eligible")
        if self._split:
            mem["pt"].read(m, s["s4"].item.flow, adv)
            pregs = None
        else:
            pregs = mem["pt"].registers(m, adv, "s5_path_bank")
        # gap < margin: the bound gap - margin is negative (it wrapped), so no difference >= 0 is below it
        short = _below(gap, self._margin) if self._margin else None
        with m.If(adv):
            for (p, q), dv in diff.items():
                # q is a candidate for a flow on p: in p's window when p is eligible, safe when p is isolated
                w = Signal(name=f"s5_member_{p}_{q}")
                lt = Signal(name=f"s4_lt_{p}_{q}")
                m.d.comb += lt.eq(dv[:db] < bound if short is None else (dv[:db] < bound) & ~short)
                positive = ~dv[db] & (dv[:db] != 0)
                m.d.sync += w.eq(Mux(elig[p], positive & lt, dv[db] | lt) & elig[q])
                win[p, q] = w
            for a in range(n):
                for b in range(a + 1, n):
                    bt = Signal(name=f"s5_beats_{a}_{b}")
                    # a < b: a wins a tie, so a beats b when delay(a) - delay(b) <= 0
                    m.d.sync += bt.eq(diff[a, b][db] | (diff[a, b] == 0))
                    beats[a][b], beats[b][a] = bt, ~bt
            m.d.sync += [exist5.eq(valid4 & (gap < self._timeout)), elig5.eq(elig)]
            m.d.sync += s["s5"].carry(s["s4"])
        return win, beats, exist5, elig5, pregs

    def _members(self, win, p):
        """The member bits of current path ``p`` (S4: its window when ``p`` is eligible, its safe set when not)."""
        return Cat(*[win[p, q] if q != p else C(0, 1) for q in range(self._n)])

    def _winners(self, m, win, beats, elig5):
        """S5's combinational winners: the new-flow path (the fastest eligible path), and for every possible
        current path ``p`` the fastest of its member bits, encoded, with whether it has any."""
        n = self._n
        newp, _ = _winner(m, "s5_new", elig5, beats, n)
        decs, founds = [], []
        for p in range(n):
            dec, found = _winner(m, f"s5_p{p}", self._members(win, p), beats, n)
            decs.append(dec)
            founds.append(found)
        return newp, decs, founds

    def _winner_stage(self, m, adv, mem, s, win, beats, exist5, elig5):
        """S5 when ``n_paths`` > 8 (S5b built): the winners one-hot (the new-flow path's, and for every possible
        current path ``p`` the fastest of its member bits), registered; S5b encodes them, so that neither stage
        holds both the ``n_paths``-wide AND and the encoder. The path banks' read data registered. Loads S5b and
        returns S5b's encoded winners and whether each has any."""
        n = self._n
        sets = [("new", elig5)] + [(f"p{p}", self._members(win, p)) for p in range(n)]
        regs = []
        for key, members in sets:
            oh = _one_hot(m, f"s5_{key}", members, beats, n)
            reg = Signal(n, name=f"s5b_{key}_one_hot")
            with m.If(adv):
                m.d.sync += reg.eq(Cat(*oh))
            regs.append(reg)
        exist_r = Signal(name="s5b_exist")
        elig_r = Signal(n, name="s5b_eligible")
        pregs = mem["pt"].registers(m, adv, "s5b_path_bank")
        with m.If(adv):
            m.d.sync += [exist_r.eq(exist5), elig_r.eq(elig5)]
            m.d.sync += s["s5b"].carry(s["s5"])
        newp = _encode(m, "s5b_new", regs[0], n)
        decs = [_encode(m, f"s5b_p{p}", r, n) for p, r in enumerate(regs[1:])]
        # a one-hot register is zero exactly when its set was empty
        founds = [r.any() for r in regs[1:]]
        return newp, decs, founds, exist_r, elig_r, pregs, s["s5b"]

    def _choice_stage(self, m, adv, mem, s, newp, decs, founds, exist5, elig5, pregs, here):
        """S5 (S5b when ``n_paths`` > 8): for every possible current path ``p``, the path an existing flow on ``p``
        takes: when ``p`` is not eligible (isolated), the fastest eligible safe path, else the new-flow path; when
        it is, the fastest eligible path in ``p``'s window, else ``p``. The addressed path bank selected. The flow
        matched against the operations that will sit in S7, S8 and S9 when it computes (the newest match encoded).
        With S5b, whether the flow exists is folded in here (each candidate is the decision itself, the new-flow
        path when the flow is new) and each candidate's ``rerouted`` is formed, so that S6 is one multiplexer by
        the current path. Loads S6."""
        n, pb = self._n, self._pb
        s6, s7, s8 = s["s6"], s["s7"], s["s8"]
        cand = [Signal(pb, name=f"s6_cand{p}") for p in range(n)]
        newp6 = Signal(pb, name="s6_newp")
        exist6 = Signal(name="s6_exist")
        fsel = Signal(2, name="s6_fwd")
        pmem = Signal(pb, name="s6_path_mem")
        picks = [Mux(founds[p], decs[p], Mux(elig5[p], p, newp)) for p in range(n)]
        if self._force:
            # a forced packet's path whatever the flow's current path (and for a new flow): recorded at S6
            f = here.item
            picks = [Mux(f.force, f.fpath, v) for v in picks]
            newp = Mux(f.force, f.fpath, newp)
        moved = None
        if self._split:
            # S6's decision and rerouted bit for current path p, and (s6_newp) for a current path >= n_paths, as
            # the unfolded S6 would form them: a new flow takes newp; an existing flow on p >= n_paths, path 0
            moved = Signal(n, name="s6_moved")
            with m.If(adv):
                m.d.sync += [moved[p].eq(exist5 & (v != p)) for p, v in enumerate(picks)]
            picks = [Mux(exist5, v, newp) for v in picks]
            newp = Mux(exist5, 0, newp)
        hits = [o.valid & o.ok & (o.item.flow == here.item.flow) for o in (s6, s7, s8)]
        with m.If(adv):
            m.d.sync += [c.eq(v) for c, v in zip(cand, picks)]
            m.d.sync += [newp6.eq(newp), exist6.eq(exist5), pmem.eq(mem["pt"].select(pregs, here.item.flow)),
                         fsel.eq(Mux(hits[0], 1, Mux(hits[1], 2, Mux(hits[2], 3, 0))))]
            m.d.sync += s6.carry(here)
        return cand, newp6, exist6, fsel, pmem, moved

    def _compute_stage(self, m, adv, mem, s, cand, newp, exist, fsel, pmem, moved):
        """S6: the flow's current path (the newest of S7's, S8's and S9's results for the same flow, else the path
        table's registered read); the decision picked by it; write the path table. Loads S7 (the output register)
        and shifts S7 -> S8 -> S9 (result registers kept for forwarding)."""
        s6, s7, s8, s9 = s["s6"], s["s7"], s["s8"], s["s9"]
        pb, n = self._pb, self._n
        paths = [Signal(pb, name=f"s{k}_path") for k in (7, 8, 9)]
        cur = Signal(pb, name="s6_current")
        m.d.comb += cur.eq(Array([pmem] + paths)[fsel])
        picked = Signal(pb, name="s6_picked")
        if moved is None:
            table = cand + [C(0, pb)] * ((1 << pb) - n)
            m.d.comb += picked.eq(Mux(exist, Array(table)[cur], newp))
            rer = s6.ok & exist & (picked != cur)
        else:
            # S5b folded the flow's existence in: the decision is the candidate of the current path
            pad = (1 << pb) - n
            m.d.comb += picked.eq(Array(cand + [newp] * pad)[cur])
            rer = s6.ok & Array(list(moved) + [exist] * pad)[cur]
        mem["pt"].write(m, s6.item.flow, picked, adv & s6.valid & s6.ok)
        new7, rer7 = Signal(name="s7_new"), Signal(name="s7_rerouted")
        with m.If(adv):
            m.d.sync += s7.carry(s6) + s8.carry(s7) + s9.carry(s8)
            m.d.sync += [paths[0].eq(Mux(s6.ok, picked, 0)), paths[1].eq(paths[0]), paths[2].eq(paths[1])]
            m.d.sync += [new7.eq(s6.ok & ~exist), rer7.eq(rer)]
        o = self.o.payload
        m.d.comb += [self.o.valid.eq(s7.valid),
                     o.kind.eq(s7.item.kind), o.flow.eq(s7.item.flow), o.dest.eq(s7.item.dest),
                     o.now.eq(s7.item.now), o.tag.eq(s7.item.tag), o.path.eq(paths[0]), o.new.eq(new7),
                     o.rerouted.eq(rer7), o.ok.eq(s7.ok)]
