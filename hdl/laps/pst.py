"""LAPS Path Search Table (PST): exact match of a destination IP address to its K candidate path ids.

LAPS (IEEE ToN), sections II-B and III-C: "PST uses the packet's destination address as the key for Exact
Matching (EM) to obtain the IDs of candidate forwarding paths"; section III-H: K pids are read in one pass, slot
``i`` holding a pid of PIT sub-table ``i`` or 0; section IV-C and Table V: a 1,024-entry prototype in 74 LUT,
177 FF and 8 BRAM. The datasheet is docs/laps_pst.md. Choices made where the paper is silent:

* **Two memories, one pointer.** The match is a d-ary hashed table of *slots* (``ways`` ways of ``buckets``
  slots, block RAM) holding ``valid``, a *record pointer* and the key's remainder; the K pids live in a *record*
  table of ``n_dests`` entries (block RAM, ``16 K`` bits each) that the pointer addresses. The ways' outputs are
  narrow (a pointer, not K pids), so choosing the matching way costs a 10-bit multiplexer instead of a
  ``16 K``-bit one, and the record's block RAM output goes straight into the output register.
* **The miss action is record 0.** A miss reads record 0 (its pids are the default pid set, 0 until written), and
  the result's ``normal`` flag ("pass to normal forwarding") is set when the MISS register's flag is (1 at power-up).
  So ``n_dests`` records hold ``n_dests - 1`` destinations: 1,023 by default, the paper's ``n - 1`` for 1,024
  servers (section III-C).
* **Quotiented keys.** The key is the address and an ``ipv6`` flag (:func:`PstKey`, first field lowest); way ``w``
  places it in bucket ``address[B-1:0] XOR f_w(remainder)`` where ``B = log2(buckets)`` and the remainder is the
  key above bit ``B``. A slot stores only the remainder: a slot of bucket ``b`` holding remainder ``r`` matches the
  one key whose remainder is ``r`` and whose hash is ``b``, so the comparison is exact on ``B`` fewer bits (a slot is
  35 bits at the defaults: one RAMB18 per way).
* **A sparse H3 hash.** ``f_w`` is linear (an H3 hash, as the QP classifier's): bucket bit ``j`` XORs address bit
  ``j`` with ``t`` remainder bits, ``pi_w[(j t + m) mod R]`` for ``m < t``, where ``R`` is the remainder width,
  ``t = min(R, max(5, ceil(R / B)))`` and ``pi_w`` orders the remainder bits by the QP classifier's H3 constants
  ``q_w[i]`` (:func:`hash_taps`). Each bucket bit is one LUT6 for IPv4 keys (the QP classifier's dense H3 takes
  three): the whole hash is ``ways x B`` LUTs in one level. Addresses of one subnet differ in their low bits, which
  go to the bucket unchanged, so they spread over the buckets without collisions.
* **Commands ride the pipeline.** An accepted command takes the entry for one cycle (a bubble) and writes each
  memory when its bubble reaches the stage where items read that memory: the slots one cycle after acceptance,
  the records and the MISS flag four cycles after. So a command takes effect exactly between two items: every
  item accepted before it sees the old table in both memories, every item after it the new one, and no item's
  read ever meets a write. The next command waits until the last write is done (a command every 5 cycles at
  most; AXI4-Lite takes longer than that to deliver one).
* **Reset** empties the pipeline and clears the counters. The memories, the MISS flag, the IPv6 staging register
  and an accepted command are not reset: once a command's AXI4-Lite COMMIT has completed, it takes effect.

Pipeline (latency 6, one item per clock): s1 input register; the hash addresses the ways; s3 the slots (block RAM
outputs registered); s4 the remainder compared in 3-bit chunks; the chunks' AND and the matching way's pointer
address the records; the output register takes the record (block RAM output registered) and ``hit``/``normal``.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.lib.meta import TAG_BITS, PacketKind
from lbpipe.hdl.packet.qp_classifier import h3_constant

__all__ = [
    "Pst", "PstItem", "PstResult", "PstKey", "PstSlot", "check_parameters", "hash_taps", "address_bits",
    "remainder_bits", "record_words", "PID_BITS", "PIDS_PER_WORD", "N_COUNTERS", "COUNTERS",
    "TABLE_RECORD", "TABLE_MISS", "TABLE_INSERT", "TABLE_DELETE", "TABLE_KEY",
]

TABLE_RECORD = 0
TABLE_MISS = 1
TABLE_INSERT = 2
TABLE_DELETE = 3
TABLE_KEY = 4

#: Width of a path id (the LAPS header's pid field).
PID_BITS = 16
#: Pids in one 64-bit control word.
PIDS_PER_WORD = 4
#: The statistics counters, in ``stats`` order (STATUS_0 to STATUS_5).
COUNTERS = ("lookups", "hits", "misses", "inserts", "deletes", "rejected")
N_COUNTERS = len(COUNTERS)

_EQ_CHUNK = 3          # remainder bits compared per LUT6
_TAPS_PER_LUT = 5      # remainder bits a bucket bit takes beside its address bit in one LUT6


def address_bits(ipv6):
    """Address bits a key holds: 128 with IPv6 support, 32 without."""
    return 128 if ipv6 else 32


def remainder_bits(*, buckets, ipv6):
    """Key bits a slot stores: the key (address and ``ipv6`` flag) above the ``log2(buckets)`` bucket bits."""
    return address_bits(ipv6) + 1 - (buckets.bit_length() - 1)


def record_words(k):
    """64-bit control words of a record (four pids each)."""
    return -(-k // PIDS_PER_WORD)


def hash_taps(way, *, buckets, ipv6):
    """The remainder bits bucket bit ``j`` of ``way`` XORs into address bit ``j``: a list of ``log2(buckets)`` lists
    (see the module docstring)."""
    n_bits = buckets.bit_length() - 1
    rem = remainder_bits(buckets=buckets, ipv6=ipv6)
    taps = min(rem, max(_TAPS_PER_LUT, -(-rem // n_bits)))
    order = sorted(range(rem), key=lambda i: h3_constant(way, i))
    return [[order[(j * taps + m) % rem] for m in range(taps)] for j in range(n_bits)]


def PstKey(*, ipv6=False):
    """The key hashed and matched: the address, then the ``ipv6`` flag (first field in the low bits)."""
    return data.StructLayout({"addr": address_bits(ipv6), "ipv6": 1})


def PstSlot(*, n_dests, buckets, ipv6=False):
    """One slot of a way: valid bit, record pointer, key remainder."""
    return data.StructLayout({
        "valid": 1,
        "ptr":   n_dests.bit_length() - 1,
        "rem":   remainder_bits(buckets=buckets, ipv6=ipv6),
    })


def PstItem(*, ipv6=False, user_bits=0):
    """Input metadata: ``kind`` (passed through), ``ipv6`` (the address family of ``dst_ip``), ``dst_ip`` (32 bits,
    or 128 with ``ipv6``), an opaque ``user`` field of ``user_bits`` (absent when 0) and ``tag``."""
    fields = {"kind": PacketKind, "ipv6": 1, "dst_ip": address_bits(ipv6)}
    if user_bits:
        fields["user"] = user_bits
    fields["tag"] = TAG_BITS
    return data.StructLayout(fields)


def PstResult(*, k=8, user_bits=0):
    """Output metadata: ``kind``, ``user`` and ``tag`` unchanged, ``hit``, ``normal`` (a miss whose action is "pass to
    normal forwarding") and ``pid0`` ... ``pid{k-1}`` (slot ``i`` a pid of PIT sub-table ``i``, 0 for none)."""
    fields = {"kind": PacketKind}
    if user_bits:
        fields["user"] = user_bits
    fields.update(tag=TAG_BITS, hit=1, normal=1)
    fields.update({f"pid{i}": PID_BITS for i in range(k)})
    return data.StructLayout(fields)


def _check_int(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")


def _check_power_of_two(name, value):
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two, not {value}")


def check_parameters(*, n_dests, k, ways, buckets, ipv6, user_bits):
    """Raise ``TypeError``/``ValueError`` for parameters the block does not take (shared with the golden model)."""
    _check_int("n_dests", n_dests, 2, 1 << 16)
    _check_power_of_two("n_dests", n_dests)
    _check_int("k", k, 1, 32)
    _check_int("ways", ways, 1, 8)
    _check_int("buckets", buckets, 2, 1 << 20)
    _check_power_of_two("buckets", buckets)
    if not isinstance(ipv6, bool):
        raise TypeError(f"ipv6 must be a bool, not {ipv6!r}")
    _check_int("user_bits", user_bits, 0, 256)


def _below(value, bound):
    """``value < bound`` for a constant ``bound``, as logic on the bits, not a subtraction."""
    if bound >= 1 << len(value):
        return Const(1)
    result = Const(0)
    for i in range(len(value)):
        if (bound >> i) & 1:
            result = ~value[i] | result
        else:
            result = ~value[i] & result
    return result


class Pst(wiring.Component):
    """LAPS Path Search Table (see the module docstring for the structure, the hash and the timing).

    Parameters
    ----------
    n_dests : int
        Records, a power of two from 2 to 65536: record 0 is the miss record, so ``n_dests - 1`` destinations.
    k : int
        Pids per destination (PIT sub-tables), 1 to 32.
    ways : int
        Hash ways, 1 to 8, each with its own hash.
    buckets : int
        Slots per way, a power of two from 2 to 2**20.
    ipv6 : bool
        Keys of 128-bit addresses (IPv4 and IPv6 destinations) or 32-bit ones (IPv4 only).
    user_bits : int
        Width of the opaque ``user`` pass-through field, 0 (none) to 256.

    Members
    -------
    i : In(stream.Signature(PstItem))
    o : Out(stream.Signature(PstResult))
    ctl : In(ControlSignature())
        Tables 0 RECORD, 1 MISS, 2 INSERT, 3 DELETE, 4 KEY (``ipv6`` only); see docs/laps_pst.md. Anything else is
        rejected (ignored and counted).
    stats : Out(32 * 6)
        Counters (wrapping at 2**32, cleared by reset): lookups, hits, misses, inserts, deletes, rejected commands.
        The top level maps counter ``i`` to STATUS_i.

    Raises
    ------
    TypeError, ValueError
        For parameters of the wrong type or out of range.
    """

    #: Cycles from the edge that accepts an item to the edge that hands its result on.
    latency = 6

    def __init__(self, *, n_dests=1024, k=8, ways=3, buckets=512, ipv6=False, user_bits=0):
        check_parameters(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, user_bits=user_bits)
        self._n_dests = n_dests
        self._k = k
        self._ways = ways
        self._buckets = buckets
        self._ipv6 = ipv6
        self._user_bits = user_bits
        super().__init__({
            "i":     In(stream.Signature(PstItem(ipv6=ipv6, user_bits=user_bits))),
            "o":     Out(stream.Signature(PstResult(k=k, user_bits=user_bits))),
            "ctl":   In(ControlSignature()),
            "stats": Out(32 * N_COUNTERS),
        })

    n_dests = property(lambda self: self._n_dests)
    k = property(lambda self: self._k)
    ways = property(lambda self: self._ways)
    buckets = property(lambda self: self._buckets)
    ipv6 = property(lambda self: self._ipv6)
    user_bits = property(lambda self: self._user_bits)

    @property
    def slots(self):
        """Slots in all ways (destinations the match table can hold, at most ``n_dests - 1`` of them used)."""
        return self._ways * self._buckets

    @property
    def slot_bits(self):
        return PstSlot(n_dests=self._n_dests, buckets=self._buckets, ipv6=self._ipv6).size

    @property
    def memory_bits(self):
        """Bits in the slot and record memories."""
        return self.slots * self.slot_bits + self._n_dests * PID_BITS * self._k

    # -- elaboration ------------------------------------------------------------------------------------------------

    def elaborate(self, platform):
        """The slot ways and the record table in block RAM; the command stages write them (:meth:`_control`), the
        item pipeline reads them (:meth:`_lookup`), the counters watch both (:meth:`_counters`)."""
        m = Module()
        slot = PstSlot(n_dests=self._n_dests, buckets=self._buckets, ipv6=self._ipv6)
        ways = []
        for w in range(self._ways):
            mem = memory.Memory(shape=slot, depth=self._buckets, init=[])
            m.submodules[f"way{w}"] = mem
            # Not transparent, and never needs to be: a command writes where its own bubble reads.
            ways.append((mem.write_port(), mem.read_port()))
        m.submodules.records = records = memory.Memory(shape=PID_BITS * self._k, depth=self._n_dests, init=[])
        rec = (records.write_port(granularity=PID_BITS), records.read_port())

        # The whole pipeline advances together whenever the output register can hand on.
        adv = Signal()
        m.d.comb += adv.eq(~self.o.valid | self.o.ready)
        cmd = self._control(m, ways, rec, adv)
        looked = self._lookup(m, ways, rec, adv, cmd)
        self._counters(m, adv, cmd, looked)
        return m

    def _control(self, m, ways, rec, adv):
        """The command register and its bubble's position (``at1`` .. ``at4``), the MISS flag and the IPv6 staging
        register; slot writes when the bubble is in s1, record and MISS writes when it is in s4. Drives
        ``ctl.ready`` and ``i.ready``; returns the command state the counters and the output stage use."""
        n_bits = self._buckets.bit_length() - 1
        p_bits = self._n_dests.bit_length() - 1
        words = record_words(self._k)
        w_bits = (words - 1).bit_length()

        # Control state is not reset: a command the block has accepted always takes effect. The registers that
        # reset leaves alone take their next values from expressions, not If blocks (Icarus never runs an
        # ``always @*`` whose inputs are registers that do not change after time zero).
        def hold(reg, enable, value):
            return reg.eq(Mux(enable, value, reg))

        at = [Signal(name=f"cmd_at{s}", reset_less=True) for s in range(1, 5)]
        busy = Signal()
        take = Signal()
        m.d.comb += [
            busy.eq(Cat(*at).any()),
            self.ctl.ready.eq(adv & ~busy),
            take.eq(self.ctl.valid & self.ctl.ready),
            # A command takes the entry: the item waits one cycle (the bubble the command rides in).
            self.i.ready.eq(adv & ~(self.ctl.valid & ~busy)),
        ]
        m.d.sync += [hold(at[0], adv, take)] + [hold(at[s], adv, at[s - 1]) for s in range(1, 4)]

        c = self.ctl.payload
        layout = data.StructLayout({
            "insert": 1, "delete": 1, "record": 1, "miss": 1, "rejected": 1,
            "way": self._ways, "bucket": n_bits, "word": max(1, words), "dest": p_bits, "data": 64,
        })
        cmd = Signal(layout, reset_less=True)
        # Range checks as bit tests against the constant bounds, not arithmetic compares (a LUT per bit pair and a
        # carry chain each).
        slot_ok = _below(c.index, self._ways * self._buckets)
        rec_ok = _below(c.index[w_bits:], self._n_dests)
        if words & (words - 1):
            rec_ok = rec_ok & _below(c.index[:w_bits], words)
        is_ins = c.table == TABLE_INSERT
        is_del = c.table == TABLE_DELETE
        is_rec = c.table == TABLE_RECORD
        is_miss = (c.table == TABLE_MISS) & (c.index == 0)
        is_key = Const(0)
        if self._ipv6:
            is_key = (c.table == TABLE_KEY) & (c.index < 2)
        nxt = Signal(layout)
        m.d.comb += [
            nxt.insert.eq(is_ins & slot_ok),
            nxt.delete.eq(is_del & slot_ok),
            nxt.record.eq(is_rec & rec_ok),
            nxt.miss.eq(is_miss),
            nxt.rejected.eq(~(((is_ins | is_del) & slot_ok) | (is_rec & rec_ok) | is_miss | is_key)),
            nxt.way.eq(Cat(c.index[n_bits:] == w for w in range(self._ways))),
            nxt.bucket.eq(c.index[:n_bits]),
            nxt.word.eq(Cat(c.index[:w_bits] == j for j in range(words)) if w_bits else 1),
            nxt.dest.eq(c.index[w_bits:w_bits + p_bits]),
            nxt.data.eq(c.data),
        ]
        m.d.sync += hold(cmd.as_value(), take, nxt.as_value())

        # IPv6: the key bits above 31 and the flag, staged by KEY commands (index 0: address 95:32; index 1:
        # address 127:96 in bits 31:0, the flag in bit 32).
        if self._ipv6:
            stage_lo = Signal(64, reset_less=True)
            stage_hi = Signal(33, reset_less=True)
            put = [take & (c.table == TABLE_KEY) & (c.index == j) for j in range(2)]
            m.d.sync += [hold(stage_lo, put[0], c.data), hold(stage_hi, put[1], c.data[:33])]
            upper = Cat(stage_lo, stage_hi)
        else:
            upper = Const(0, 1)    # the ipv6 flag of an IPv4 table's keys

        # Slot writes, when the bubble is where items read the ways.
        key_low = cmd.data[:32]
        new = Signal(PstSlot(n_dests=self._n_dests, buckets=self._buckets, ipv6=self._ipv6))
        m.d.comb += [new.valid.eq(cmd.insert), new.ptr.eq(cmd.data[32:32 + p_bits]),
                     new.rem.eq(Cat(key_low[n_bits:], upper))]
        for w, (wr, _) in enumerate(ways):
            m.d.comb += [wr.addr.eq(cmd.bucket), wr.data.eq(new),
                         wr.en.eq(at[0] & adv & (cmd.insert | cmd.delete) & cmd.way[w])]

        # Record writes, when the bubble is where items read the records: word j is pids 4j .. 4j + 3.
        wr = rec[0]
        lanes = Cat(*(cmd.word[j // PIDS_PER_WORD] for j in range(self._k)))
        m.d.comb += [
            wr.addr.eq(cmd.dest),
            wr.data.eq(Cat(*([cmd.data] * words))[:PID_BITS * self._k]),
            wr.en.eq(Mux(at[3] & adv & cmd.record, lanes, 0)),
        ]
        normal_flag = Signal(init=1, reset_less=True)
        m.d.sync += hold(normal_flag, at[3] & adv & cmd.miss, cmd.data[0])
        return dict(cmd=cmd, at=at, normal_flag=normal_flag)

    def _lookup(self, m, ways, rec, adv, ctl):
        """The item pipeline: s1 registers the item, the hash addresses the ways; s2 holds the remainder; s3 the
        slots; s4 the chunk comparisons; the matching way's pointer addresses the records; s5 holds ``hit``; the
        output register takes the record. Returns the s5 stage for the counters."""
        n_bits = self._buckets.bit_length() - 1
        p_bits = self._n_dests.bit_length() - 1
        key_layout = PstKey(ipv6=self._ipv6)
        rem_bits = remainder_bits(buckets=self._buckets, ipv6=self._ipv6)
        slot = PstSlot(n_dests=self._n_dests, buckets=self._buckets, ipv6=self._ipv6)
        meta_fields = ["kind", "tag"] + (["user"] if self._user_bits else [])
        item = PstItem(ipv6=self._ipv6, user_bits=self._user_bits)
        meta_layout = data.StructLayout({name: item.members[name] for name in meta_fields})

        def stage(name):
            return Signal(name=f"{name}_valid"), Signal(meta_layout, name=f"{name}_meta")

        (v1, m1), (v2, m2), (v3, m3), (v4, m4), (v5, m5) = (stage(f"s{n}") for n in range(1, 6))
        key1 = Signal(key_layout, name="s1_key")
        rem2, rem3 = Signal(rem_bits, name="s2_rem"), Signal(rem_bits, name="s3_rem")
        slot3 = [Signal(slot, name=f"s3_slot{w}") for w in range(self._ways)]
        chunks = [(lo, min(lo + _EQ_CHUNK, rem_bits)) for lo in range(0, rem_bits, _EQ_CHUNK)]
        eq4 = [Signal(len(chunks), name=f"s4_eq{w}") for w in range(self._ways)]
        valid4 = [Signal(name=f"s4_used{w}") for w in range(self._ways)]
        ptr4 = [Signal(p_bits, name=f"s4_ptr{w}") for w in range(self._ways)]
        hit5 = Signal(name="s5_hit")

        # s1 -> ways: bucket bit j of way w is address bit j XOR its remainder taps (one LUT6 for IPv4 keys).
        key = key1.as_value()
        rem = key[n_bits:]
        for w, (_, rd) in enumerate(ways):
            bucket = Cat(*(Cat(key[j], *(rem[i] for i in taps)).xor()
                           for j, taps in enumerate(hash_taps(w, buckets=self._buckets, ipv6=self._ipv6))))
            m.d.comb += [rd.addr.eq(bucket), rd.en.eq(adv)]

        # s4 -> records: a way matches when its slot is valid and every chunk is equal; the first matching way's
        # pointer (0 when none: the miss record) addresses the records. A key is in one way, or, while the control
        # plane moves it, in two with one pointer; a forged second copy loses to the lower way.
        match = [used & eq.all() for used, eq in zip(valid4, eq4)]
        ptr = Const(0, p_bits)
        for w in reversed(range(self._ways)):
            ptr = Mux(match[w], ptr4[w], ptr)
        m.d.comb += [rec[1].addr.eq(ptr), rec[1].en.eq(adv)]

        out = self.o.payload
        with m.If(adv):
            m.d.sync += [
                v1.eq(self.i.valid & self.i.ready), key1.addr.eq(self.i.payload.dst_ip),
                key1.ipv6.eq(self.i.payload.ipv6),
                v2.eq(v1), rem2.eq(rem),
                v3.eq(v2), rem3.eq(rem2),
                v4.eq(v3), v5.eq(v4), hit5.eq(Cat(*match).any()),
                self.o.valid.eq(v5), out.hit.eq(hit5), out.normal.eq(~hit5 & ctl["normal_flag"]),
            ]
            m.d.sync += [getattr(m1, f).eq(getattr(self.i.payload, f)) for f in meta_fields]
            m.d.sync += [a.eq(b) for a, b in ((m2, m1), (m3, m2), (m4, m3), (m5, m4))]
            m.d.sync += [getattr(out, f).eq(getattr(m5, f)) for f in meta_fields]
            m.d.sync += [s.eq(rd.data) for s, (_, rd) in zip(slot3, ways)]
            for w in range(self._ways):
                stored = slot3[w].rem
                m.d.sync += [
                    eq4[w].eq(Cat(stored[lo:hi] == rem3[lo:hi] for lo, hi in chunks)),
                    valid4[w].eq(slot3[w].valid),
                    ptr4[w].eq(slot3[w].ptr),
                ]
            m.d.sync += [getattr(out, f"pid{i}").eq(rec[1].data.word_select(i, PID_BITS)) for i in range(self._k)]
        return dict(valid=v5, hit=hit5)

    def _counters(self, m, adv, ctl, looked):
        """Statistics: lookups, hits and misses as results enter the output register; inserts, deletes and rejected
        commands one cycle after acceptance, from the command register."""
        cmd, at = ctl["cmd"], ctl["at"]
        counted = at[0] & adv
        events = [
            looked["valid"] & adv,
            looked["valid"] & adv & looked["hit"],
            looked["valid"] & adv & ~looked["hit"],
            counted & cmd.insert,
            counted & cmd.delete,
            counted & cmd.rejected,
        ]
        for n, event in enumerate(events):
            word = self.stats.word_select(n, 32)
            with m.If(event):
                m.d.sync += word.eq(word + 1)
