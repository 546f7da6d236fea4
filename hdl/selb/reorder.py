"""SELB destination ToR: in-network reordering after a reroute (SELB, paper 004: section III "Packet Reordering",
which takes ConWeave's method; datasheet docs/selb_reorder.md).

A metadata block: each item is a packet the switch holds by its ``tag``, with its ``flow``, the ``epoch`` bit and
``tail`` mark selb-reroute gave it at the source, and the time ``now``. Per flow the flow table holds its in-order
epoch, 0 after reset (selb-reroute starts every flow at epoch 0, so a flow the block has not seen is in order at 0,
whichever of its paths arrives first). A DATA packet of the other epoch with no tail mark arrives before the old
path's tail: it is held in a free reorder buffer (``n_buffers`` of ``depth`` items, in one memory) and the flow's
later packets of that epoch join it; the old path's tail leaves, then the buffer drains in order. A buffer also
drains when it fills (the filling item last), on a second reroute's tail (last), and when ``timeout`` ticks of
``now`` have passed since it opened (checked with every item, before the item). With no buffer free the packet
passes (fallback, counted). Non-DATA items pass untouched.

Pipeline::

    i -> S1 (item register; flow-table data; per buffer: flow equal, expired) -> classify -> S2 (item and its
         classification registered) -> act -> o
                       drain: buffer memory read -> read register -> o

The output register takes a drained item or S2's item; while a buffer drains, S2 holds (and S1 and the input behind
it), so the release order is the output order. A drain starts with two bubbles (memory read, read register). S1's
item waits a clock behind an S2 item that opens or frees a buffer or appends to its flow's buffer (then classified
again from the updated state); S2's flow-table write is forwarded. A timeout is issued by S1 (S2 and the drain
empty) and drained the next clock.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS

__all__ = ["Reorder", "ReorderItem", "ReorderResult", "check_parameters", "N_STATS"]

N_STATS = 8     # items, held, reorders, timeouts, overflows, second reroutes, fallbacks, stale tails


def check_parameters(*, n_flows, n_buffers, depth, time_bits, timeout):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_flows", n_flows), ("n_buffers", n_buffers), ("depth", depth),
                        ("time_bits", time_bits), ("timeout", timeout)):
        check_int(name, value)
    if not 2 <= n_flows <= 4096 or n_flows & (n_flows - 1):
        raise ValueError(f"n_flows must be a power of two from 2 to 4096, not {n_flows}")
    if not 1 <= n_buffers <= 16:
        raise ValueError(f"n_buffers must be 1 to 16, not {n_buffers}")
    if not 2 <= depth <= 1024 or depth & (depth - 1):
        raise ValueError(f"depth must be a power of two from 2 to 1024, not {depth}")
    if not 4 <= time_bits <= 32:
        raise ValueError(f"time_bits must be 4 to 32, not {time_bits}")
    if not 1 <= timeout < 1 << time_bits or timeout & (timeout - 1):
        # a power of two: "the age reached timeout" is then an OR of the age's high bits
        raise ValueError(f"timeout must be a power of two from 1 to 2**(time_bits - 1), not {timeout}")


def _bits(n):
    return max(1, (n - 1).bit_length())


def ReorderItem(*, n_flows=1024, time_bits=16):
    """A packet: ``tag`` (the switch's handle), ``flow``, selb-reroute's ``epoch`` and ``tail``, and ``now``."""
    return data.StructLayout({"kind": PacketKind, "tag": TAG_BITS, "flow": _bits(n_flows), "epoch": 1, "tail": 1,
                              "now": time_bits})


def ReorderResult(*, n_flows=1024):
    """The packet, in release order; ``held``: it leaves from a reorder buffer."""
    return data.StructLayout({"kind": PacketKind, "tag": TAG_BITS, "flow": _bits(n_flows), "epoch": 1, "tail": 1,
                              "held": 1})


def _flow_entry():
    return data.StructLayout({"epoch": 1})


def _slot():
    return data.StructLayout({"tag": TAG_BITS, "tail": 1})


def _first(bits):
    """(any, one-hot of the lowest set bit) of a list of 1-bit values."""
    out = [bits[0]] + [bits[k] & ~Cat(*bits[:k]).any() for k in range(1, len(bits))]
    return Cat(*bits).any(), out


def _index(onehot, width):
    """The index of a one-hot list, as an OR of constants."""
    acc = Const(0, width)
    for k, b in enumerate(onehot):
        acc = acc | Mux(b, k, 0)
    return acc


def _select(onehot, values, width):
    acc = Const(0, width)
    for b, v in zip(onehot, values):
        acc = acc | Mux(b, v, 0)
    return acc


class Reorder(wiring.Component):
    """SELB destination reordering.

    Parameters
    ----------
    n_flows : int
        Flow table entries (the flow index from the parser layer), a power of two from 2 to 4096.
    n_buffers : int
        Reorder buffers, 1 to 16 (8: the paper's experiment, per port).
    depth : int
        Items a buffer holds, a power of two from 2 to 1024.
    time_bits : int
        Width of ``now`` and of a buffer's start time, 4 to 32.
    timeout : int
        Ticks of ``now`` after which a held buffer drains without its tail, a power of two.

    Members
    -------
    i : In(stream.Signature(ReorderItem(...)))
    o : Out(stream.Signature(ReorderResult(...)))
    ctl : In(ControlSignature())
        No tables: commands are taken and ignored.
    stats : Out(32 * 8)
        Items, held, reorders, timeouts, overflows, second reroutes, fallbacks, stale tails.
    """

    latency = 3

    def __init__(self, *, n_flows=1024, n_buffers=8, depth=32, time_bits=16, timeout=1024):
        check_parameters(n_flows=n_flows, n_buffers=n_buffers, depth=depth, time_bits=time_bits, timeout=timeout)
        self._nf, self._nb, self._depth, self._tb, self._timeout = n_flows, n_buffers, depth, time_bits, timeout
        self._db = _bits(depth)
        self._bb = _bits(n_buffers)
        self.memory_bits = n_flows * _flow_entry().size + n_buffers * depth * _slot().size
        super().__init__({
            "i": In(stream.Signature(ReorderItem(n_flows=n_flows, time_bits=time_bits))),
            "o": Out(stream.Signature(ReorderResult(n_flows=n_flows))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    def elaborate(self, platform):
        """Flow-table sweep and accept, per-buffer precompute, S1 classification, S2 action, buffer state, drain,
        output, counters."""
        m = Module()
        m.submodules.flows = ft = memory.Memory(shape=_flow_entry(), depth=self._nf, init=[])
        m.submodules.slots = sm = memory.Memory(shape=_slot(), depth=self._nb * self._depth, init=[])
        s = self._signals()
        ft_rd, ft_wr = ft.read_port(transparent_for=()), ft.write_port()
        sm_rd, sm_wr = sm.read_port(transparent_for=()), sm.write_port()
        self._resolve(m, s, ft_rd)
        self._classify(m, s)
        self._act(m, s)
        self._accept(m, s, ft_rd, ft_wr)
        self._precompute(m, s)
        self._stage2(m, s)
        self._buffers(m, s, sm_wr)
        self._drain(m, s, sm_rd)
        self._output(m, s)
        self._counters(m, s)
        return m

    def _signals(self):
        nb, tb, db, bb = self._nb, self._tb, self._db, self._bb
        lay = ReorderItem(n_flows=self._nf, time_bits=tb)
        fb = _bits(self._nf)
        r = range(nb)
        return dict(
            adv=Signal(name="adv"), busy=Signal(init=1, name="sweep_busy"),
            v1=Signal(name="s1_valid"), s1=Signal(lay, name="s1_item"),
            fwd=Signal(name="fwd"), fwd_val=Signal(_flow_entry(), name="fwd_entry"), twy=Signal(name="tw_is_s1"),
            tw_en=Signal(name="tw_en"), tw_flow=Signal(fb, name="tw_flow"),
            tw_data=Signal(_flow_entry(), name="tw_data"),
            # per buffer: in use, flow, held epoch, start time, items held
            bv=[Signal(name=f"b{b}_valid") for b in r], bflow=[Signal(fb, name=f"b{b}_flow") for b in r],
            bep=[Signal(name=f"b{b}_epoch") for b in r], bstart=[Signal(tb, name=f"b{b}_start") for b in r],
            bcnt=[Signal(db + 1, name=f"b{b}_count") for b in r],
            # count - 1 beside the count (the slot of the buffer's last item), so a timeout's drain takes its last
            # slot by a select alone, without a decrement after it
            blast=[Signal(db, name=f"b{b}_last") for b in r],
            bnf=[Signal(name=f"b{b}_one_free_slot") for b in r],     # count = depth - 1, registered with count
            # S1's item against each buffer, registered (corrected for the buffer S2's item opened at the clock
            # edge, ``alloc_prev``): flow equal, age at least timeout; and against the item ahead of it (``prev``:
            # the one in S2, or that left S2 as this one was taken)
            # (``exp_old``: the buffer in use and aged, 0 for a buffer opened at the edge)
            eq_old=[Signal(name=f"b{b}_flow_eq") for b in r], exp_old=[Signal(name=f"b{b}_exp") for b in r],
            eq_new=Signal(name="prev_flow_eq"), aged_new=Signal(name="prev_aged"),
            alloc_prev=[Signal(name=f"b{b}_opened") for b in r], opened=Signal(name="opened"),
            # resolved (comb)
            eq=[Signal(name=f"b{b}_eq") for b in r],
            match=[Signal(name=f"b{b}_match") for b in r], exp=[Signal(name=f"b{b}_expired") for b in r],
            ent=Signal(_flow_entry(), name="s1_entry"),
            # S1 (comb)
            mv=Signal(name="s1_to_s2"), any_exp=Signal(name="any_expired"), to_go=Signal(name="timeout_issue"),
            # timeout issued (registered): the lowest expired buffer, drained next clock
            to_pend=Signal(name="timeout_pending"), to_sel=[Signal(name=f"b{b}_timeout") for b in r],
            # S2: the item and its classification, registered
            v2=Signal(name="s2_valid"), s2=Signal(lay, name="s2_item"),
            r_data=Signal(name="s2_is_data"), r_hit=Signal(name="s2_hit"), r_same=Signal(name="s2_same_epoch"),
            r_full=Signal(name="s2_fills"), r_early=Signal(name="s2_early"),
            r_free=Signal(name="s2_any_free"), r_ent_ep=Signal(name="s2_entry_epoch"),
            m2=[Signal(name=f"b{b}_s2_match") for b in r], f2=[Signal(name=f"b{b}_s2_free") for b in r],
            hcnt2=Signal(db + 1, name="s2_hit_count"),
            # S2 (comb)
            decide=Signal(name="decide"), hz=Signal(name="s2_hazard"),
            release=Signal(name="release"), tailrel=Signal(name="tail_release"), append=Signal(name="append"),
            alloc=Signal(name="alloc"), direct=Signal(name="direct"), second=Signal(name="second"),
            full=Signal(name="full"), fallback=Signal(name="fallback"), stale=Signal(name="stale"),
            new_ep=Signal(name="new_epoch"), hit_ep=Signal(name="hit_epoch"),
            # drain
            dr_active=Signal(name="dr_active"), dr_buf=Signal(bb, name="dr_buf"), dr_next=Signal(db, name="dr_next"),
            dr_last=Signal(db, name="dr_last"), dr_flow=Signal(fb, name="dr_flow"), dr_ep=Signal(name="dr_epoch"),
            p1=Signal(name="dr_read_valid"), p2=Signal(name="dr_reg_valid"), rq=Signal(_slot(), name="dr_reg"),
        )

    def _aged(self, now, start):
        """(now - start) mod 2**time_bits >= timeout (a power of two): a bit of the difference at or above it."""
        h = self._timeout.bit_length() - 1
        diff = (now - start)[:self._tb]
        return diff[h:] != 0

    def _resolve(self, m, s, ft_rd):
        """S1's view of the buffers, one level from registers, and its flow's entry: S2's pending write of the same
        flow first, then the write in the write-behind register, then earlier forwarded writes, then the table."""
        for b in range(self._nb):
            m.d.comb += [s["eq"][b].eq(Mux(s["alloc_prev"][b], s["eq_new"], s["eq_old"][b])),
                         s["match"][b].eq(s["bv"][b] & s["eq"][b]),
                         s["exp"][b].eq(s["exp_old"][b] | (s["alloc_prev"][b] & s["aged_new"]))]
        pend = Signal(_flow_entry(), name="s2_entry")
        m.d.comb += pend.epoch.eq(s["new_ep"])
        m.d.comb += s["ent"].eq(Mux(s["v2"] & s["r_data"] & s["eq_new"], pend,
                                    Mux(s["twy"], s["tw_data"], Mux(s["fwd"], s["fwd_val"], ft_rd.data))))

    def _classify(self, m, s):
        """S1: timeouts first (when S2 and the drain are empty, the lowest expired buffer is issued, drained the
        next clock; the item waits), else the item moves to S2 with its classification, unless S2's item changes
        the buffers this item sees (opens or frees one, or adds to this item's flow's buffer): then it waits a
        clock and is classified again."""
        nb = self._nb
        blocked = s["dr_active"] | s["p1"] | s["p2"] | s["to_pend"]
        _, first_exp = _first(s["exp"])
        # exp_old is 0 for the buffer opened at the last edge: the OR needs no per-buffer correction
        any_exp = Cat(*s["exp_old"]).any() | (s["opened"] & s["aged_new"])
        m.d.comb += [s["any_exp"].eq(any_exp),
                     s["to_go"].eq(s["v1"] & any_exp & ~s["v2"] & ~blocked),
                     s["mv"].eq(s["v1"] & ~any_exp & ~s["to_pend"] & (~s["v2"] | (s["decide"] & ~s["hz"])))]
        with m.If(s["to_go"]):
            m.d.sync += [s["to_sel"][b].eq(first_exp[b]) for b in range(nb)]
        m.d.sync += s["to_pend"].eq(s["to_go"])

    def _stage2(self, m, s):
        """The item and its classification registered into S2 (the per-buffer ORs and selections; S2 derives its
        case from them)."""
        it, nb, e = s["s1"], self._nb, s["s1"].epoch
        same = [s["match"][b] & (e == s["bep"][b]) for b in range(nb)]
        fills = [same[b] & s["bnf"][b] for b in range(nb)]
        any_free, first_free = _first([~v for v in s["bv"]])
        ent = s["ent"]
        with m.If(s["mv"]):
            m.d.sync += [s["s2"].eq(it), s["v2"].eq(1), s["r_data"].eq(it.kind == PacketKind.DATA),
                         s["r_hit"].eq(Cat(*s["match"]).any()), s["r_same"].eq(Cat(*same).any()),
                         s["r_full"].eq(Cat(*fills).any()), s["r_early"].eq(e != ent.epoch), s["r_free"].eq(any_free),
                         s["r_ent_ep"].eq(ent.epoch),
                         s["hcnt2"].eq(_select(s["match"], s["bcnt"], self._db + 1))]
            m.d.sync += [s["m2"][b].eq(s["match"][b]) for b in range(nb)]
            m.d.sync += [s["f2"][b].eq(first_free[b]) for b in range(nb)]
        with m.Elif(s["decide"]):
            m.d.sync += s["v2"].eq(0)

    def _act(self, m, s):
        """S2's case (the datasheet's behaviour table) from its registered classification; it acts when the output
        register is free and no drain runs."""
        e, t = s["s2"].epoch, s["s2"].tail
        blocked = s["dr_active"] | s["p1"] | s["p2"] | s["to_pend"]
        data, hit, same = s["r_data"], s["r_hit"], s["r_same"]
        miss_early = data & ~hit & s["r_early"]
        m.d.comb += [s["adv"].eq(~self.o.valid | self.o.ready),
                     s["decide"].eq(s["v2"] & ~blocked & s["adv"]),
                     s["append"].eq(data & same),
                     s["tailrel"].eq(data & hit & ~same & t),
                     s["second"].eq(data & same & t),
                     s["full"].eq(data & ~t & s["r_full"]),
                     s["stale"].eq(miss_early & t),
                     s["alloc"].eq(miss_early & ~t & s["r_free"]),
                     s["fallback"].eq(miss_early & ~t & ~s["r_free"]),
                     s["hit_ep"].eq(Mux(same, e, ~e))]
        m.d.comb += [s["release"].eq(s["tailrel"] | s["second"] | s["full"]),
                     s["direct"].eq(~(s["append"] | s["alloc"])),
                     # a tail with a buffer: the other epoch (old tail: the buffer's; second reroute: not the
                     # buffer's); a full buffer: the buffer's; no buffer and in order: epoch xor tail
                     s["new_ep"].eq(Mux(hit & t, ~e, Mux(s["r_full"], e,
                                                         Mux(~hit & ~s["r_early"], e ^ t, s["r_ent_ep"])))),
                     s["hz"].eq(s["v2"] & (s["alloc"] | s["release"] | (s["append"] & s["eq_new"])))]

    def _accept(self, m, s, ft_rd, ft_wr):
        """After reset the sweep sets every flow to epoch 0 (one entry a clock, input not ready); then an item enters
        S1 when S1 is empty or moves to S2, and reads its flow's entry. The flow table is written by S2's decision (the
        item's flow) or a timeout (the buffer's flow, which moves to the held epoch), registered first
        (write-behind); the entry of the item in S1 is forwarded from those writes."""
        busy, take = s["busy"], Signal(name="take")
        addr = Signal(range(self._nf), init=self._nf - 1, name="sweep_addr")
        with m.If(busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += busy.eq(0)
        m.d.comb += [self.i.ready.eq(~busy & (~s["v1"] | s["mv"])), take.eq(self.i.valid & self.i.ready),
                     self.ctl.ready.eq(1)]
        self._take = take
        to_sel, it2 = s["to_sel"], s["s2"]
        wflow = Mux(s["to_pend"], _select(to_sel, s["bflow"], len(it2.flow)), it2.flow)
        wval = Signal(_flow_entry(), name="table_wdata")
        m.d.comb += [wval.epoch.eq(Mux(s["to_pend"], _select(to_sel, s["bep"], 1), s["new_ep"]))]
        wen = s["to_pend"] | (s["decide"] & s["r_data"])
        pw_en, pw_flow, pw_val = s["tw_en"], s["tw_flow"], s["tw_data"]
        m.d.sync += [pw_en.eq(wen), pw_flow.eq(wflow), pw_val.eq(wval)]
        m.d.comb += [ft_rd.addr.eq(self.i.payload.flow), ft_rd.en.eq(take),
                     ft_wr.addr.eq(Mux(busy, addr, pw_flow)), ft_wr.data.eq(Mux(busy, 0, pw_val)),
                     ft_wr.en.eq(busy | pw_en)]
        # forwarding, from registers only: an item taken gets the write landing now (``tw``) if it is its flow's;
        # ``twy``: the write entering ``tw`` at this clock edge is the flow of the item in S1 after it
        with m.If(take):
            m.d.sync += [s["s1"].eq(self.i.payload), s["v1"].eq(1),
                         s["fwd"].eq(pw_en & (self.i.payload.flow == pw_flow)), s["fwd_val"].eq(pw_val),
                         s["twy"].eq(s["decide"] & s["r_data"] & (self.i.payload.flow == it2.flow))]
        with m.Else():
            with m.If(s["mv"]):
                m.d.sync += s["v1"].eq(0)
            with m.If(s["twy"]):
                m.d.sync += [s["fwd"].eq(1), s["fwd_val"].eq(pw_val)]
            to_mine = Cat(*[to_sel[b] & s["eq"][b] for b in range(self._nb)]).any()
            m.d.sync += s["twy"].eq((s["decide"] & s["r_data"] & s["eq_new"]) | (s["to_pend"] & to_mine))

    def _precompute(self, m, s):
        """Per buffer, for the item entering S1: its flow equal to the buffer's, its ``now`` aged against the
        buffer's start; and the same against the item ahead of it (S1's, or S2's when S1 is empty), for the buffer
        that one may open. While S1 holds, the resolved values are kept."""
        i = self.i.payload
        prev_flow = Mux(s["v1"], s["s1"].flow, s["s2"].flow)
        prev_now = Mux(s["v1"], s["s1"].now, s["s2"].now)
        # a buffer freed at this edge: S2's release or a timeout
        freed = [(s["decide"] & s["release"] & s["m2"][b]) | (s["to_pend"] & s["to_sel"][b]) for b in range(self._nb)]
        with m.If(self._take):
            m.d.sync += [s["eq_new"].eq(i.flow == prev_flow), s["aged_new"].eq(self._aged(i.now, prev_now))]
            for b in range(self._nb):
                m.d.sync += [s["eq_old"][b].eq(i.flow == s["bflow"][b]),
                             s["exp_old"][b].eq(s["bv"][b] & ~freed[b] & self._aged(i.now, s["bstart"][b]))]
        with m.Else():
            for b in range(self._nb):
                m.d.sync += [s["eq_old"][b].eq(s["eq"][b]), s["exp_old"][b].eq(s["exp"][b] & ~freed[b])]
        m.d.sync += [s["alloc_prev"][b].eq(s["decide"] & s["alloc"] & s["f2"][b]) for b in range(self._nb)]
        m.d.sync += s["opened"].eq(s["decide"] & s["alloc"])

    def _buffers(self, m, s, sm_wr):
        """Buffer state: opened by an early packet (slot 0), grown by an append, freed by a release or a timeout
        (which start the drain). The slot memory is written at S2's decision."""
        it, db, d = s["s2"], self._db, s["decide"]
        hidx, fidx = _index(s["m2"], self._bb), _index(s["f2"], self._bb)
        m.d.comb += [sm_wr.addr.eq(Cat(Mux(s["alloc"], 0, s["hcnt2"][:db]), Mux(s["alloc"], fidx, hidx))),
                     sm_wr.data.tag.eq(it.tag), sm_wr.data.tail.eq(it.tail),
                     sm_wr.en.eq(d & (s["append"] | s["alloc"]))]
        for b in range(self._nb):
            with m.If(d & s["alloc"] & s["f2"][b]):
                m.d.sync += [s["bv"][b].eq(1), s["bflow"][b].eq(it.flow), s["bep"][b].eq(it.epoch),
                             s["bstart"][b].eq(it.now), s["bcnt"][b].eq(1), s["blast"][b].eq(0),
                             s["bnf"][b].eq(self._depth == 2)]
            with m.If(d & s["m2"][b]):
                with m.If(s["release"]):
                    m.d.sync += [s["bv"][b].eq(0), s["bcnt"][b].eq(0), s["bnf"][b].eq(0)]
                with m.Elif(s["append"]):
                    m.d.sync += [s["bcnt"][b].eq(s["bcnt"][b] + 1), s["blast"][b].eq(s["bcnt"][b][:db]),
                                 s["bnf"][b].eq(s["bcnt"][b] == self._depth - 2)]
            with m.If(s["to_pend"] & s["to_sel"][b]):
                m.d.sync += [s["bv"][b].eq(0), s["bcnt"][b].eq(0), s["bnf"][b].eq(0)]
        # a drain starts with a release (the item's buffer) or a timeout (the buffer issued the clock before)
        with m.If(d & s["release"]):
            m.d.sync += [s["dr_active"].eq(1), s["dr_buf"].eq(hidx), s["dr_next"].eq(0),
                         s["dr_last"].eq(Mux(s["tailrel"], s["hcnt2"] - 1, s["hcnt2"])[:db]),
                         s["dr_flow"].eq(it.flow), s["dr_ep"].eq(s["hit_ep"])]
        sel = s["to_sel"]
        with m.If(s["to_pend"]):
            m.d.sync += [s["dr_active"].eq(1), s["dr_buf"].eq(_index(sel, self._bb)), s["dr_next"].eq(0),
                         s["dr_last"].eq(_select(sel, s["blast"], db)),
                         s["dr_flow"].eq(_select(sel, s["bflow"], len(it.flow))),
                         s["dr_ep"].eq(_select(sel, s["bep"], 1))]

    def _drain(self, m, s, sm_rd):
        """One slot read a clock while draining; the memory's data is registered before the output."""
        m.d.comb += [sm_rd.addr.eq(Cat(s["dr_next"], s["dr_buf"])), sm_rd.en.eq(s["adv"])]
        with m.If(s["adv"]):
            m.d.sync += [s["p1"].eq(s["dr_active"]), s["p2"].eq(s["p1"]), s["rq"].eq(sm_rd.data)]
            with m.If(s["dr_active"]):
                m.d.sync += s["dr_next"].eq(s["dr_next"] + 1)
                with m.If(s["dr_next"] == s["dr_last"]):
                    m.d.sync += s["dr_active"].eq(0)

    def _output(self, m, s):
        out, it = self.o.payload, s["s2"]
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(s["adv"] & s["p2"]):
            m.d.sync += [self.o.valid.eq(1), out.kind.eq(PacketKind.DATA), out.tag.eq(s["rq"].tag),
                         out.flow.eq(s["dr_flow"]), out.epoch.eq(s["dr_ep"]), out.tail.eq(s["rq"].tail),
                         out.held.eq(1)]
        with m.Elif(s["decide"] & s["direct"]):
            m.d.sync += [self.o.valid.eq(1), out.kind.eq(it.kind), out.tag.eq(it.tag), out.flow.eq(it.flow),
                         out.epoch.eq(it.epoch), out.tail.eq(it.tail), out.held.eq(0)]

    def _counters(self, m, s):
        names = ("n_items", "n_held", "n_reorders", "n_timeouts", "n_overflows", "n_second", "n_fallbacks",
                 "n_stale")
        c = [Signal(32, name=x) for x in names]
        d = s["decide"]
        conds = [d, d & (s["append"] | s["alloc"]), d & s["tailrel"], s["to_pend"], d & s["full"],
                 d & s["second"], d & s["fallback"], d & s["stale"]]
        flags = [Signal(name=f"k_{x[2:]}") for x in names]
        m.d.sync += [f.eq(cnd) for f, cnd in zip(flags, conds)]
        m.d.sync += [x.eq(x + k) for x, k in zip(c, flags)]
        m.d.comb += self.stats.eq(Cat(*c))
