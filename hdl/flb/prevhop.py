"""FLB: each flow's previous hop, so that a CNM can go back hop by hop in an IP-routed network (FLB: section 3.2,
"CNM construction"; section 3.3, the source edge switch forwarding the CNM to the host; section 3.4's flow entry;
datasheet docs/flb_prevhop.md).

QCN forwards on L2 addresses, and a routed network rewrites the Ethernet source address at every hop, so the CNM
cannot be addressed to the flow's sender. FLB records, per flow, the source MAC address of the previous hop (the
MAC the data packet arrived with) at every switch; a CNM for the flow is sent to that MAC, and the switch there
does the same, back to the source edge switch and on to the host. This block is that record at one switch, one
item per clock on one stream (``cnm`` 0: a data packet, recorded; ``cnm`` 1: a CNM of the flow, looked up).

Per flow (the flow index, the CRC16 of the 5-tuple as ``flb-route``'s) one entry: ``valid``, ``stamp`` (the timer's
tick of the flow's last data packet) and ``mac``. A data packet writes ``{1, now, its source MAC}`` whatever the
entry held (the newest previous hop wins: a route change or a CRC16 collision; ``moved`` says that a live entry
had another MAC). A CNM hits when the entry is live: ``valid`` and ``(now - stamp) mod 2**time_bits < timeout``;
the result then carries the recorded MAC as the CNM's destination and the switch's own MAC (``ctl`` table 0) as its
source. The aging is the stored tick compared with ``now``, as ``flb-route``'s: no sweep, no port, no packet slot.

Pipeline (one register stage per cycle, all moved by one ``adv``; latency 5)::

    S0 accept          S1             S2              S3                   S4                    S5 out
    i or ctl -------> every bank's -> the flow's   -> age = now - stamp, -> live = valid and   -> o
    (ctl drained);    read data      bank selected    MAC equal            age < timeout;
    read every bank;  registered                                           hit / aged / moved;
    a data packet                                                          counters
    writes its entry

The write does not depend on the read, so it lands at S0 in the packet's own clock (the read returns the old entry:
``moved``) and the item of the next clock reads it: no forwarding. The table is split into banks of 4,096 entries
(one URAM288 deep, or 8 RAMB36 side by side at 9 bits each): every bank is read at once and registered, the
flow's bank selected one stage later, and the reset sweep writes every bank in the same clock (4,096 clocks at
65,536 flows).

Choices where the paper is silent (all in the datasheet): one stream for data packets and CNMs; the newest previous
hop wins; the entry ages from the flow's last data packet (a CNM does not refresh it); the switch's own MAC in a
``ctl`` register (kept across reset); a data packet whose source MAC has the group bit set is not recorded; items
whose flow is out of range pass with ``ok`` 0 and change nothing; commands wait for the pipeline to drain; reset
sweeps the table with the inputs not ready.
"""

from amaranth import Array, C, Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import below, check_int, ControlSignature
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS
from lbpipe.hdl.lib.stage import counter32

__all__ = ["PrevHop", "PrevHopItem", "PrevHopResult", "check_parameters", "TABLE_MY_MAC", "N_STATS", "MAC_BITS",
           "BANK_DEPTH"]

TABLE_MY_MAC = 0    # any index; data = this switch's MAC (< 2**48, group bit 40 clear)
N_STATS = 6         # recorded, moved, hits, misses (no entry), misses (aged), rejected
MAC_BITS = 48
GROUP_BIT = 40      # the I/G bit: the least significant bit of the first octet, the octets first-most-significant
BANK_DEPTH = 4096   # entries per bank: one URAM288 (4K x 72), or 8 RAMB36 of 4K x 9


def _bits(n):
    return max(1, (n - 1).bit_length())


def check_parameters(*, n_flows, time_bits, timeout):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    for name, value in (("n_flows", n_flows), ("time_bits", time_bits), ("timeout", timeout)):
        check_int(name, value)
    if not 2 <= n_flows <= 1 << 20:
        raise ValueError(f"n_flows must be 2 to 1,048,576, not {n_flows}")
    if not 4 <= time_bits <= 32:
        raise ValueError(f"time_bits must be 4 to 32, not {time_bits}")
    if not 1 <= timeout < 1 << time_bits:
        raise ValueError(f"timeout must be 1 to 2**time_bits - 1 = {(1 << time_bits) - 1:,} (time_bits "
                         f"{time_bits}), not {timeout}")


def PrevHopItem(*, n_flows=65536, time_bits=16):
    """One packet at the switch: ``cnm`` 0 a data packet of flow ``flow`` that arrived with source MAC ``mac``;
    ``cnm`` 1 a CNM for flow ``flow`` (``mac`` unused); ``now`` the timer's tick."""
    return data.StructLayout({"kind": PacketKind, "cnm": 1, "flow": _bits(n_flows), "mac": MAC_BITS,
                              "now": time_bits, "tag": TAG_BITS})


def PrevHopResult(*, n_flows=65536):
    """The item's identity passed through; ``ok`` (0: flow out of range, or a data packet with a group source MAC:
    nothing done); for a CNM ``hit`` (the flow's entry is live), ``aged`` (there is an entry, ``timeout`` ticks old
    or older), ``dst_mac`` (the recorded previous hop) and ``src_mac`` (this switch's MAC), both 0 without a hit;
    for a data packet ``moved`` (the entry was live with another MAC)."""
    return data.StructLayout({"kind": PacketKind, "cnm": 1, "flow": _bits(n_flows), "tag": TAG_BITS, "ok": 1,
                              "hit": 1, "aged": 1, "moved": 1, "dst_mac": MAC_BITS, "src_mac": MAC_BITS})


class PrevHop(wiring.Component):
    """FLB's per-flow previous-hop MAC at one switch, one data packet or CNM per clock.

    Parameters
    ----------
    n_flows : int
        Flow table entries (field ``flow``), 2 to 2**20; 65,536 holds every CRC16 flow ID.
    time_bits : int
        Width of ``now`` and of the stored stamps, in timer ticks, 4 to 32.
    timeout : int
        Ticks after a flow's last data packet at which its entry no longer answers a CNM, 1 to
        ``2**time_bits - 1``.

    Members
    -------
    i : In(stream.Signature(PrevHopItem(...)))
    o : Out(stream.Signature(PrevHopResult(...)))
    ctl : In(ControlSignature())
        Table 0: this switch's MAC (datasheet "Control").
    stats : Out(32 * 6)
        Recorded packets, moved entries, CNM hits, misses without an entry, misses aged, rejected items.
    """

    latency = 5

    def __init__(self, *, n_flows=65536, time_bits=16, timeout=4096):
        check_parameters(n_flows=n_flows, time_bits=time_bits, timeout=timeout)
        self._nf, self._tb, self._to = n_flows, time_bits, timeout
        self._item = PrevHopItem(n_flows=n_flows, time_bits=time_bits)
        self._result = PrevHopResult(n_flows=n_flows)
        self._entry = data.StructLayout({"valid": 1, "stamp": time_bits, "mac": MAC_BITS})
        self._ident = data.StructLayout({"kind": PacketKind, "cnm": 1, "flow": _bits(n_flows), "tag": TAG_BITS})
        if n_flows <= BANK_DEPTH:
            self._shift, self._n_banks = _bits(n_flows), 1
        else:
            self._shift, self._n_banks = _bits(BANK_DEPTH), -(-n_flows // BANK_DEPTH)
        super().__init__({
            "i": In(stream.Signature(self._item)),
            "o": Out(stream.Signature(self._result)),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """Bits held in memories: one entry (valid, stamp, MAC) per flow."""
        return self._nf * self._entry.size

    @property
    def banks(self):
        """Memories the table is split into (4,096 entries each when ``n_flows`` is larger)."""
        return self._n_banks

    def item_cycles(self, result):
        return 1

    def elaborate(self, platform):
        """The datasheet's block diagram: banks, sweep, S0 -> S1 -> S2 -> S3 -> S4 -> S5 (out), counters."""
        m = Module()
        self._adv = adv = Signal()
        self._v = {n: Signal(name=f"s{n}_valid") for n in range(1, 6)}
        self._ok = {n: Signal(name=f"s{n}_ok") for n in range(1, 6)}
        self._it = {n: Signal(self._item, name=f"s{n}_item", reset_less=True) for n in range(1, 4)}
        self._id = {n: Signal(self._ident, name=f"s{n}_ident", reset_less=True) for n in range(4, 6)}
        m.d.comb += adv.eq(~self._v[5] | self.o.ready)
        ports = self._banks(m)
        sweep = self._sweep(m)
        self._accept_stage(m, ports, sweep)
        regs = self._register_stage(m, ports)
        entry = self._select_stage(m, regs)
        self._age_stage(m, entry)
        self._decide_stage(m)
        self._output(m)
        return m

    def _banks(self, m):
        """The table in banks of one memory each; every bank's read port and write port."""
        ports = []
        for b in range(self._n_banks):
            depth = min(self._nf - b * (1 << self._shift), 1 << self._shift)
            mem = memory.Memory(shape=self._entry, depth=depth, init=[])
            m.submodules[f"table{b}"] = mem
            ports.append((mem.read_port(transparent_for=()), mem.write_port()))
        return ports

    def _sweep(self, m):
        """After reset: every entry's valid bit cleared, one address of every bank a clock (a bank's depth in
        clocks), inputs not ready."""
        top = min(self._nf, 1 << self._shift) - 1
        self._busy = Signal(init=1, name="sweep_busy")
        addr = Signal(range(top + 1), init=top, name="sweep_addr")
        with m.If(self._busy):
            m.d.sync += addr.eq(addr - 1)
            with m.If(addr == 0):
                m.d.sync += self._busy.eq(0)
        return addr

    def _accept_stage(self, m, ports, sweep):
        """S0: a control command once S1..S5 are empty (it holds ``i`` until then), else an item: range and
        group-bit checks; every bank read at the flow's address; a data packet in range writes its entry (the read
        of the same clock returns the old one). Loads S1."""
        i, c, adv = self.i.payload, self.ctl.payload, self._adv
        empty = ~Cat(*self._v.values()).any()
        m.d.comb += [self.ctl.ready.eq(~self._busy & empty),
                     self.i.ready.eq(adv & ~self._busy & ~self.ctl.valid)]
        take_i = self.i.valid & self.i.ready
        take_c = self.ctl.valid & self.ctl.ready
        ok = below(i.flow, self._nf) & (i.cnm | ~i.mac[GROUP_BIT])
        write = take_i & ~i.cnm & ok
        entry = Signal(self._entry, name="s0_entry")
        m.d.comb += [entry.valid.eq(~self._busy), entry.stamp.eq(Mux(self._busy, 0, i.now)),
                     entry.mac.eq(Mux(self._busy, 0, i.mac))]
        addr = Mux(self._busy, sweep, i.flow[:self._shift])
        for b, (rd, wr) in enumerate(ports):
            mine = (i.flow >> self._shift) == b if self._n_banks > 1 else C(1, 1)
            m.d.comb += [rd.addr.eq(i.flow[:self._shift]), rd.en.eq(adv),
                         wr.addr.eq(addr), wr.data.eq(entry), wr.en.eq(self._busy | (write & mine))]
        self._my_mac = Signal(MAC_BITS, name="my_mac", reset_less=True)
        with m.If(take_c & (c.table == TABLE_MY_MAC) & (c.data[MAC_BITS:] == 0) & ~c.data[GROUP_BIT]):
            m.d.sync += self._my_mac.eq(c.data[:MAC_BITS])
        with m.If(adv):
            m.d.sync += [self._v[1].eq(take_i), self._ok[1].eq(ok), self._it[1].eq(i)]

    def _register_stage(self, m, ports):
        """S1: every bank's read data into its own register (nothing in between). Loads S2."""
        regs = [Signal(self._entry, name=f"s2_bank{b}") for b in range(self._n_banks)]
        with m.If(self._adv):
            m.d.sync += [r.eq(rd.data) for r, (rd, _) in zip(regs, ports)]
            m.d.sync += [self._v[2].eq(self._v[1]), self._ok[2].eq(self._ok[1]), self._it[2].eq(self._it[1])]
        return regs

    def _select_stage(self, m, regs):
        """S2: the flow's bank selected by the flow's high bits. Loads S3."""
        entry = Signal(self._entry, name="s3_entry")
        flow = self._it[2].flow
        chosen = Array(regs)[flow >> self._shift] if self._n_banks > 1 else regs[0]
        with m.If(self._adv):
            m.d.sync += [entry.eq(chosen), self._v[3].eq(self._v[2]), self._ok[3].eq(self._ok[2]),
                         self._it[3].eq(self._it[2])]
        return entry

    def _age_stage(self, m, entry):
        """S3: the entry's age ``(now - stamp) mod 2**time_bits`` and whether its MAC is the packet's. Loads S4."""
        it = self._it[3]
        self._age4 = Signal(self._tb, name="s4_age")
        self._valid4 = Signal(name="s4_entry_valid")
        self._same4 = Signal(name="s4_same_mac")
        self._mac4 = Signal(MAC_BITS, name="s4_mac")
        with m.If(self._adv):
            m.d.sync += [self._age4.eq((it.now - entry.stamp)[:self._tb]), self._valid4.eq(entry.valid),
                         self._same4.eq(entry.mac == it.mac), self._mac4.eq(entry.mac),
                         self._v[4].eq(self._v[3]), self._ok[4].eq(self._ok[3])]
            m.d.sync += [self._id[4][n].eq(it[n]) for n in ("kind", "cnm", "flow", "tag")]

    def _decide_stage(self, m):
        """S4: ``live`` (valid and younger than ``timeout``); a CNM's hit or miss (aged, or no entry), a data
        packet's ``moved``; the hit's MAC; the counters' events. Loads S5 (the output register)."""
        adv, ok, cnm = self._adv, self._ok[4], self._id[4].cnm
        live = self._valid4 & (self._age4 < self._to)
        hit, aged, moved = cnm & ok & live, cnm & ok & self._valid4 & ~live, ~cnm & ok & live & ~self._same4
        self._hit5, self._aged5, self._moved5 = Signal(name="s5_hit"), Signal(name="s5_aged"), Signal(name="s5_moved")
        self._dst5 = Signal(MAC_BITS, name="s5_dst_mac")
        with m.If(adv):
            m.d.sync += [self._hit5.eq(hit), self._aged5.eq(aged), self._moved5.eq(moved),
                         self._dst5.eq(Mux(hit, self._mac4, 0)), self._v[5].eq(self._v[4]),
                         self._ok[5].eq(ok), self._id[5].eq(self._id[4])]
        go = adv & self._v[4]
        counts = [counter32(m, "n_recorded", go & ~cnm & ok), counter32(m, "n_moved", go & moved),
                  counter32(m, "n_hits", go & hit), counter32(m, "n_miss_empty", go & cnm & ok & ~self._valid4),
                  counter32(m, "n_miss_aged", go & aged), counter32(m, "n_rejected", go & ~ok)]
        m.d.comb += self.stats.eq(Cat(*counts))

    def _output(self, m):
        """``o`` from S5's registers; ``src_mac`` is the MAC register gated by the hit (commands wait for S5 to
        empty, so the MAC in force is the one the CNM was taken under)."""
        o, it = self.o.payload, self._id[5]
        m.d.comb += [self.o.valid.eq(self._v[5]), o.kind.eq(it.kind), o.cnm.eq(it.cnm), o.flow.eq(it.flow),
                     o.tag.eq(it.tag), o.ok.eq(self._ok[5]), o.hit.eq(self._hit5), o.aged.eq(self._aged5),
                     o.moved.eq(self._moved5), o.dst_mac.eq(self._dst5),
                     o.src_mac.eq(Mux(self._hit5, self._my_mac, 0))]
