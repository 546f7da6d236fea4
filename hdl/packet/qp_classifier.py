"""QP classifier: exact match of a RoCEv2 packet's connection key to a flow-table index, in block RAM.

Themis-D (paper 001, sections 3.3-3.4) keeps one flow-table entry per QP and takes its index from an upstream
classifier (docs/themis.md, "QP classification is upstream"); the paper counts a 13-byte QP ID per flow entry
for it (section 4). This block is that classifier. It implements the keys of the test-side model
:class:`lbpipe.tb.lib.packets.QpClassifier`:

==============  ===========  =================================================================================
kind            ``dir``      key fields
==============  ===========  =================================================================================
``DATA``        0 (towards)  ``ipv6``, ``local`` = destination address, ``remote`` = 0, ``qpn`` = BTH dest QPN
``ACK``/``NACK``  1 (from)   ``ipv6``, ``local`` = source address, ``remote`` = destination address, ``qpn`` =
                             BTH dest QPN (the remote QP)
other kinds     --           not looked up: ``qp_hit`` = 0
==============  ===========  =================================================================================

A QPN names one QP of the NIC that owns an address, so a data packet towards the local NIC needs no source
address; a NACK's destination QPN names a QP of the remote NIC, so its key needs the remote address, and the model
keys on the local (source) address too. A QP therefore takes two slots, one per direction.

Choices where neither the paper nor the brief fixes them:

* **Exact match on the whole key.** Each slot stores the full key (:func:`QpKey`: 282 bits, or 89 with
  ``ipv6=False``), a valid bit and the index (:func:`QpSlot`); a lookup hits only on equality of every bit, so
  there are no false hits whatever the hash does. The ``ipv6`` flag is part of the key: IPv4 10.0.0.1 and IPv6
  ``::a00:1`` are different addresses, as in the model.
* **``ipv6=False`` stores 32-bit addresses** (about a third of the block RAM). An item whose key does not fit
  (``ipv6`` set, or address bits above 31 set) misses; a commit of such a staged key is ignored.
* **Skewed ways (d-ary cuckoo hashing).** Way ``w`` of ``ways`` is a memory of ``buckets`` slots addressed by its
  own hash ``h_w(key)``; a lookup reads all ways in parallel and compares. Independent hashes per way let the
  control plane relocate a key to another of its ways to make room (cuckoo insertion). Measured with
  :class:`lbpipe.sim.packet.qp_classifier.QpTable` on 4096 QPs with random QPNs: 4 ways of 4096 slots (50% load) place
  every key (21 relocations in all), where without relocation 20 QPs find no slot, the first at 34% load; 4 ways
  of 2048 take 3900 QPs (95% load); 2 ways of 8192 lose 13 QPs and one way of 16384 loses 1358. A key is in at
  most one slot, except during a relocation, when it may be in two with the same index: the lowest matching way
  wins.
* **The hash is H3** (Carter and Wegman): ``h_w(K)`` is the XOR, over the set bits ``i`` of the packed key
  ``K`` (:func:`QpKey` layout, first field lowest), of the constant ``q_w[i]``, truncated to ``log2(buckets)``
  bits. ``q_w[i]`` is output number ``512 w + i + 1`` of splitmix64 started from state 0 (:func:`h3_constant`;
  the first three are 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, the published reference
  values), so any control plane can compute it in a few lines. In hardware each bucket-address bit is an XOR
  of about half the key bits (141 inputs), computed in two stages: H3 being linear, the input register stage
  registers the hash of each field a key form takes from the item (about 64 inputs each), and the hash stage
  XORs a form's parts (see "Pipeline").
* **Control through a staging register** (64-bit control words, a key is up to 282 bits):

  =====  ==========  ===================================================================================
  table  name        command
  =====  ==========  ===================================================================================
  0      KEY         staging word ``index`` (0 to 4) = ``data``: word 0 bits 23:0 ``qpn``, bit 24 ``dir``,
                     bit 25 ``ipv6``; words 1, 2 ``local`` bits 63:0, 127:64; words 3, 4 ``remote`` likewise.
                     Other bits are ignored; ``index`` above 4 is ignored.
  1      INSERT      slot ``index`` = the staged key, valid, ``qp`` = ``data`` (low bits). ``index`` is
                     ``way * buckets + bucket``; out of range is ignored.
  2      DELETE      slot ``index`` invalid.
  3      CLEAR       every slot invalid: the inputs are not ready for ``buckets + 2`` cycles after the one
                     that accepts it (a sweep of one bucket of every way per cycle).
  =====  ==========  ===================================================================================

  Commands enter the pipeline ahead of items (one bubble each, and one free cycle before the next command) and
  write the table when they reach the stage where items read it, so a command takes effect between two items,
  and no item's read meets a write in the same cycle: read-during-write behaviour never matters (only a
  bubble's read, whose data nobody uses, can meet a CLEAR's sweep). A KEY word reaches the staging register one
  cycle after the edge that accepts it (registered on the way, so the output side's ready never reaches the
  staging register's enables); an INSERT writes at the soonest two edges after the KEY before it, and checks
  (``ipv6=False``) that the staged key fits where it writes. None of this shows at the ports. The golden model's
  control plane (:class:`lbpipe.sim.packet.qp_classifier.QpTable`) computes buckets, picks free ways, relocates,
  and reports a collision it cannot resolve as an error.
* **Reset** empties the pipeline and clears the statistics. The table is a memory and keeps its contents; the
  staging register and a command already accepted (an INSERT, DELETE or CLEAR on its way, or a CLEAR's sweep)
  are not reset either, so once the AXI4-Lite write of a command has completed, the command takes effect.

Pipeline (one item per clock, latency 6): input register (the kind decoded, and per way the H3 hashes of the
QPN, of each address as ``local`` and of the destination as ``remote``); key and per-way hash (each form's parts
XORed, the kind choosing last); block RAM read; the read data registered; per-way comparison in 18-bit
chunks; the chunks' AND, the first matching way and the output register. The whole pipeline advances when the
output register can hand on.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.lib.meta import PSN_BITS, TAG_BITS, PacketKind

__all__ = [
    "QpClassifier", "ClassifierItem", "ClassifierResult", "QpKey", "QpSlot",
    "TABLE_KEY", "TABLE_INSERT", "TABLE_DELETE", "TABLE_CLEAR", "KEY_WORDS", "QPN_BITS",
    "DIR_TOWARDS", "DIR_FROM", "splitmix64", "h3_constant", "address_bits", "qp_bits",
    "MAX_WAYS", "MAX_BUCKETS",
]

TABLE_KEY = 0
TABLE_INSERT = 1
TABLE_DELETE = 2
TABLE_CLEAR = 3

#: Staging words of a key: word 0 (qpn, dir, ipv6), local address low/high, remote address low/high.
KEY_WORDS = 5

QPN_BITS = 24

#: ``dir`` of a key: a data packet towards the local NIC, or an ACK/NACK from it.
DIR_TOWARDS = 0
DIR_FROM = 1

MAX_WAYS = 8
MAX_BUCKETS = 1 << 20

_M64 = (1 << 64) - 1
_EQ_CHUNK = 18
_GAMMA = 0x9E3779B97F4A7C15


def splitmix64(n):
    """Output number ``n`` (from 1) of splitmix64 (Steele, Lea and Flood; Vigna's reference code) started from
    state 0."""
    z = (n * _GAMMA) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def h3_constant(way, bit):
    """The 64-bit H3 constant ``q_way[bit]``: a bucket index takes its low ``log2(buckets)`` bits."""
    if not 0 <= bit < 512:
        raise ValueError(f"key bit {bit} out of range")
    return splitmix64(512 * way + bit + 1)


def address_bits(ipv6):
    """Address bits a key stores: 128 with IPv6 support, 32 without."""
    return 128 if ipv6 else 32


def qp_bits(n_entries):
    """Width of a flow-table index (as :func:`lbpipe.hdl.themis.themis_d.ThemisDItem` sizes ``qp``)."""
    return max(1, (n_entries - 1).bit_length())


def QpKey(*, ipv6=True):
    """The key stored in a slot and hashed, first field in the low bits (see the module docstring)."""
    fields = {"qpn": QPN_BITS, "dir": 1}
    if ipv6:
        fields["ipv6"] = 1
    fields["local"] = address_bits(ipv6)
    fields["remote"] = address_bits(ipv6)
    return data.StructLayout(fields)


def QpSlot(*, n_entries, ipv6=True):
    """One slot of a way: valid bit, flow-table index, key."""
    return data.StructLayout({"valid": 1, "qp": qp_bits(n_entries), "key": QpKey(ipv6=ipv6)})


def ClassifierItem(*, user_bits=0):
    """Input metadata: the parser's fields the key needs (``ipv6``, ``src_ip``, ``dst_ip`` with IPv4 in the low 32
    bits, ``dqpn``), the fields Themis-D takes next (``psn``, ``msn``), an opaque ``user`` field of ``user_bits``
    (absent when 0) for whatever else the next stage needs, and ``tag``."""
    fields = {
        "kind":   PacketKind,
        "ipv6":   1,
        "src_ip": 128,
        "dst_ip": 128,
        "dqpn":   QPN_BITS,
        "psn":    PSN_BITS,
        "msn":    24,
    }
    if user_bits:
        fields["user"] = user_bits
    fields["tag"] = TAG_BITS
    return data.StructLayout(fields)


def ClassifierResult(*, n_entries, user_bits=0):
    """Output metadata: the input fields unchanged, ``qp_hit`` and ``qp`` (the flow-table index; 0 on a miss)."""
    return data.StructLayout({
        **ClassifierItem(user_bits=user_bits).members,
        "qp_hit": 1,
        "qp":     qp_bits(n_entries),
    })


def _check_int(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")


def check_parameters(*, n_entries, buckets, ways, ipv6, user_bits):
    """Raise ``TypeError``/``ValueError`` for parameters the block does not take (shared with the golden model)."""
    _check_int("n_entries", n_entries, 1, 1 << 24)
    _check_int("buckets", buckets, 2, MAX_BUCKETS)
    if buckets & (buckets - 1):
        raise ValueError(f"buckets must be a power of two, not {buckets}")
    _check_int("ways", ways, 1, MAX_WAYS)
    if not isinstance(ipv6, bool):
        raise TypeError(f"ipv6 must be a bool, not {ipv6!r}")
    _check_int("user_bits", user_bits, 0, 256)


class QpClassifier(wiring.Component):
    """Exact-match QP classifier (see the module docstring for keys, hash, control and timing).

    Parameters
    ----------
    n_entries : int
        Flow-table entries the ``qp`` output indexes, 1 to 2**24.
    buckets : int
        Slots per way, a power of two from 2 to 2**20.
    ways : int
        Ways, each with its own hash, 1 to 8. A QP takes two slots.
    ipv6 : bool
        Store 128-bit addresses (IPv4 and IPv6 keys) or 32-bit ones (IPv4 keys only).
    user_bits : int
        Width of the opaque ``user`` pass-through field, 0 (no field) to 256.

    Members
    -------
    i : In(stream.Signature(ClassifierItem))
    o : Out(stream.Signature(ClassifierResult))
    ctl : In(ControlSignature())
        Tables 0 KEY, 1 INSERT, 2 DELETE, 3 CLEAR (module docstring). Other tables are ignored.
    stats : Out(32 * 3)
        Counters (wrapping at 2**32; cleared by reset): 0 hits, 1 misses (DATA, ACK and NACK items that found no
        slot), 2 items of other kinds (not looked up). The top level maps counter ``i`` to STATUS_i.

    Raises
    ------
    TypeError, ValueError
        For parameters of the wrong type or out of range.
    """

    #: Cycles from the edge that accepts an item to the edge that hands its result on.
    latency = 6

    def __init__(self, *, n_entries=4096, buckets=4096, ways=4, ipv6=True, user_bits=0):
        check_parameters(n_entries=n_entries, buckets=buckets, ways=ways, ipv6=ipv6, user_bits=user_bits)
        self._n_entries = n_entries
        self._buckets = buckets
        self._ways = ways
        self._ipv6 = ipv6
        self._user_bits = user_bits
        super().__init__({
            "i":     In(stream.Signature(ClassifierItem(user_bits=user_bits))),
            "o":     Out(stream.Signature(ClassifierResult(n_entries=n_entries, user_bits=user_bits))),
            "ctl":   In(ControlSignature()),
            "stats": Out(32 * 3),
        })

    @property
    def n_entries(self):
        return self._n_entries

    @property
    def buckets(self):
        return self._buckets

    @property
    def ways(self):
        return self._ways

    @property
    def ipv6(self):
        return self._ipv6

    @property
    def user_bits(self):
        return self._user_bits

    @property
    def slots(self):
        """Slots in all ways (keys the table can hold; a QP takes two)."""
        return self._ways * self._buckets

    @property
    def memory_bits(self):
        """Bits held in the ways' memories."""
        return self.slots * QpSlot(n_entries=self._n_entries, ipv6=self._ipv6).size

    def elaborate(self, platform):
        """Ways of slots in block RAM; the control stages write them (:meth:`_control`), the item pipeline reads
        them (:meth:`_lookup`: s1 key, s2 hash, s3 read, s4 slot, s5 compare, output register)."""
        m = Module()
        ways = []
        for w in range(self._ways):
            mem = memory.Memory(shape=QpSlot(n_entries=self._n_entries, ipv6=self._ipv6), depth=self._buckets,
                                init=[])
            m.submodules[f"way{w}"] = mem
            # Not transparent, and never needs to be: commands write at the read stage, where no item is.
            ways.append((mem.write_port(), mem.read_port()))

        # The whole pipeline advances together whenever the output register can take an item.
        adv = Signal()
        m.d.comb += adv.eq(~self.o.valid | self.o.ready)
        self._control(m, ways, adv)
        self._lookup(m, ways, adv)
        return m

    def _control(self, m, ways, adv):
        """The command stages: the key staging register (table 0), INSERT/DELETE registered twice (``s1_cmd``,
        ``s2_cmd``) so they write at the read stage, and the CLEAR sweep; drives ``ctl.ready`` and ``i.ready``."""
        n_ways, n_buckets, ipv6 = self._ways, self._buckets, self._ipv6
        bucket_bits = n_buckets.bit_length() - 1
        abits = address_bits(ipv6)
        key_layout = QpKey(ipv6=ipv6)
        slot_layout = QpSlot(n_entries=self._n_entries, ipv6=ipv6)
        qbits = qp_bits(self._n_entries)
        # -- control: staging register and the command stages ----------------------------------------------------
        # Control state is not reset: a command the block has accepted always takes effect.
        staged = Signal(key_layout, reset_less=True)
        # ipv6=False: words holding bits a 32-bit key cannot store (word 0's ipv6 bit, address bits above 31).
        unfit = Signal(KEY_WORDS, reset_less=True)
        cmd_layout = data.StructLayout({"insert": 1, "delete": 1, "clear": 1, "way": n_ways,
                                        "bucket": bucket_bits, "qp": qbits})
        s1_cmd = Signal(cmd_layout, reset_less=True)
        s2_cmd = Signal(cmd_layout, reset_less=True)
        sweeping = Signal(reset_less=True)
        sweep_addr = Signal(bucket_bits, reset_less=True)

        # Entry: commands take priority over items; a command is followed by one free cycle before the next
        # command (so the staging register cannot change under an INSERT before it writes), and a CLEAR blocks
        # the entry until its sweep is done. ``open_ctl`` is the entry's state without ``adv`` (registers only):
        # the registers that load only when ``adv`` is high take it, not ``ctl.ready``, so ``adv`` (the output
        # side's ready) reaches them as an enable and never through the command decode.
        blocked = Signal()
        open_ctl = Signal()
        m.d.comb += [
            blocked.eq(s1_cmd.clear | s2_cmd.clear | sweeping),
            open_ctl.eq(~blocked & ~(s1_cmd.insert | s1_cmd.delete)),
            self.ctl.ready.eq(adv & open_ctl),
            self.i.ready.eq(adv & ~blocked & ~self.ctl.valid),
        ]
        cmd = self.ctl.payload
        take_ctl = self.ctl.valid & self.ctl.ready
        # Equal to take_ctl whenever adv is high, which is when s1_cmd loads.
        offer_ctl = self.ctl.valid & open_ctl
        slot_ok = cmd.index < n_ways * n_buckets
        way_field = cmd.index[bucket_bits:]
        next_cmd = Signal(cmd_layout)
        m.d.comb += [
            # An INSERT of a key a 32-bit table cannot store is dropped where it writes (``unfit`` is checked
            # there, against the staged key it would write).
            next_cmd.insert.eq(offer_ctl & (cmd.table == TABLE_INSERT) & slot_ok),
            next_cmd.delete.eq(offer_ctl & (cmd.table == TABLE_DELETE) & slot_ok),
            next_cmd.clear.eq(offer_ctl & (cmd.table == TABLE_CLEAR)),
            next_cmd.way.eq(Cat(way_field == w for w in range(n_ways))),
            next_cmd.bucket.eq(cmd.index[:bucket_bits]),
            next_cmd.qp.eq(cmd.data[:qbits]),
        ]
        # The registers that reset leaves alone take their next values from expressions, not If blocks: Yosys
        # writes an If block as an ``always @*`` process, and Icarus never runs one whose inputs are registers
        # that do not change after their initial value (this made ``s2_cmd`` X with two buckets).
        def hold(reg, enable, value):
            return reg.eq(Mux(enable, value, reg))
        m.d.sync += [hold(s1_cmd.as_value(), adv, next_cmd.as_value()),
                     hold(s2_cmd.as_value(), adv, s1_cmd.as_value())]

        # A KEY word is written one cycle after the edge that accepts it, from registers (``key_took``, the word
        # it names, its data): the staging register's enables are then two register inputs, not ``adv`` through
        # ``ctl.ready`` and the table/index decode (7 logic levels inside pro-tx-wire). Nothing reads the staging
        # register earlier: the INSERT right behind a KEY writes the table two edges after it at the soonest.
        key_took = Signal(reset_less=True)
        key_word = Signal(KEY_WORDS, reset_less=True)
        key_high = Signal(reset_less=True)          # the index's bits above the word number are all zero
        word = Signal(64, name="key_data", reset_less=True)
        low = (KEY_WORDS - 1).bit_length()
        m.d.sync += [
            key_took.eq(take_ctl & (cmd.table == TABLE_KEY)),
            key_word.eq(Cat(cmd.index[:low] == k for k in range(KEY_WORDS))),
            key_high.eq(cmd.index[low:] == 0),
            word.eq(cmd.data),
        ]
        put = [key_took & key_high & key_word[k] for k in range(KEY_WORDS)]
        m.d.sync += [
            hold(staged.qpn, put[0], word[:QPN_BITS]),
            hold(staged.dir, put[0], word[24]),
            hold(staged.local[:min(64, abits)], put[1], word[:min(64, abits)]),
            hold(staged.remote[:min(64, abits)], put[3], word[:min(64, abits)]),
        ]
        if ipv6:
            m.d.sync += [
                hold(staged.ipv6, put[0], word[25]),
                hold(staged.local[64:], put[2], word),
                hold(staged.remote[64:], put[4], word),
            ]
        else:
            m.d.sync += hold(unfit, Cat(*put).any(),
                             Cat(*(Mux(put[k], bad, unfit[k]) for k, bad in enumerate(
                                 (word[25], word[32:].any(), word.any(), word[32:].any(), word.any())))))

        # CLEAR sweeps every bucket of every way once it leaves the read stage (after every item ahead of it).
        sweep_start = Signal()
        sweep_last = Signal()
        m.d.comb += [sweep_start.eq(~sweeping & adv & s2_cmd.clear),
                     sweep_last.eq(sweeping & (sweep_addr == n_buckets - 1))]
        m.d.sync += [
            sweeping.eq((sweeping & ~sweep_last) | sweep_start),
            sweep_addr.eq(Mux(sweeping, sweep_addr + 1, 0)),
        ]

        # Writes come from the second stage, where items read: the item ahead read a cycle earlier, the item
        # behind reads a cycle after the command leaves. The write repeats harmlessly while the stage is stalled.
        new_slot = Signal(slot_layout)
        insert = s2_cmd.insert & (unfit == 0)
        m.d.comb += [new_slot.valid.eq(insert & ~sweeping), new_slot.qp.eq(s2_cmd.qp),
                     new_slot.key.eq(staged)]
        for w, (wr, _) in enumerate(ways):
            m.d.comb += [
                wr.addr.eq(Mux(sweeping, sweep_addr, s2_cmd.bucket)),
                wr.data.eq(new_slot),
                wr.en.eq(sweeping | ((insert | s2_cmd.delete) & s2_cmd.way[w])),
            ]


    def _lookup(self, m, ways, adv):
        """The item pipeline: s1 registers the item and its kind, s2 the H3 bucket of each way, s3 the read, s4 the
        slots, s5 the chunked key comparison; the output register takes the first matching way's ``qp``. Counts
        hits, misses and items not looked up in ``stats``."""
        n_ways, n_buckets, ipv6 = self._ways, self._buckets, self._ipv6
        bucket_bits = n_buckets.bit_length() - 1
        abits = address_bits(ipv6)
        key_layout = QpKey(ipv6=ipv6)
        slot_layout = QpSlot(n_entries=self._n_entries, ipv6=ipv6)
        item_layout = ClassifierItem(user_bits=self._user_bits)
        qbits = qp_bits(self._n_entries)
        # -- items -------------------------------------------------------------------------------------------------
        def stage(name, key=True):
            fields = dict(valid=Signal(name=f"{name}_valid"),
                          item=Signal(item_layout, name=f"{name}_item"),
                          lookup=Signal(name=f"{name}_lookup"))
            if key:
                fields["key"] = Signal(key_layout, name=f"{name}_key")
            return fields
        s1 = stage("s1", key=False)
        s2, s3, s4 = stage("s2"), stage("s3"), stage("s4")
        s5 = stage("s5", key=False)

        # Key of the item in s1, in both forms: the kind is decoded at the entry, and each form is hashed on its
        # own, the choice coming last (H3 is linear, so this is the hash of the chosen key), which keeps the kind
        # decode off the XOR trees. The lookup flag says the item has a key the table can hold.
        it = s1["item"]
        s1_data = Signal()
        s1_ack = Signal()
        with m.If(adv):
            m.d.sync += [
                s1_data.eq(self.i.payload.kind == PacketKind.DATA),
                s1_ack.eq((self.i.payload.kind == PacketKind.ACK) | (self.i.payload.kind == PacketKind.NACK)),
            ]
        key_towards = Signal(key_layout)
        key_from = Signal(key_layout)
        m.d.comb += [
            key_towards.qpn.eq(it.dqpn), key_towards.dir.eq(DIR_TOWARDS), key_towards.local.eq(it.dst_ip[:abits]),
            key_from.qpn.eq(it.dqpn), key_from.dir.eq(DIR_FROM), key_from.local.eq(it.src_ip[:abits]),
            key_from.remote.eq(it.dst_ip[:abits]),
        ]
        if ipv6:
            m.d.comb += [key_towards.ipv6.eq(it.ipv6), key_from.ipv6.eq(it.ipv6)]
            fits = Const(1)
        else:
            fits = ~it.ipv6 & Mux(s1_data, ~it.dst_ip[32:].any(), ~it.src_ip[32:].any() & ~it.dst_ip[32:].any())
        key = Mux(s1_data, key_towards.as_value(), key_from.as_value())

        # H3 is linear: a key's hash is the XOR of its fields' hashes. The input register stage hashes each field
        # the two key forms take from the item (QPN with the ipv6 flag; the destination address as ``local`` and
        # as ``remote``; the source address as ``local``), about 64 taps each, and registers the parts with the
        # item; the hash stage XORs two or three parts and the ``dir`` constant, the kind choosing last. (One
        # 141-tap tree per bucket bit mapped to 6 levels, 7 inside themis-d-wire; the parts to 5, 6 there.)
        def h3(w, pieces):
            """The H3 hash of way ``w`` of a key holding ``pieces`` (``(field, value)``) and zero elsewhere."""
            out = []
            for j in range(bucket_bits):
                taps = [value[i] for field, value in pieces for i in range(len(value))
                        if (h3_constant(w, key_layout[field].offset + i) >> j) & 1]
                out.append(Cat(*taps).xor() if taps else Const(0))
            return Cat(*out)

        def h3_dir(w, direction):
            h = h3_constant(w, key_layout["dir"].offset) if direction else 0
            return Const(h & ((1 << bucket_bits) - 1), bucket_bits)

        inp = self.i.payload
        common = [("qpn", inp.dqpn)] + ([("ipv6", inp.ipv6)] if ipv6 else [])
        parts = {}
        for w in range(n_ways):
            for name, pieces in (("qpn", common), ("dst_local", [("local", inp.dst_ip[:abits])]),
                                 ("src_local", [("local", inp.src_ip[:abits])]),
                                 ("dst_remote", [("remote", inp.dst_ip[:abits])])):
                parts[name, w] = Signal(bucket_bits, name=f"s1_h3_{name}{w}")
                with m.If(adv):
                    m.d.sync += parts[name, w].eq(h3(w, pieces))

        def hash_of(w):
            towards = parts["qpn", w] ^ parts["dst_local", w] ^ h3_dir(w, DIR_TOWARDS)
            from_ = parts["qpn", w] ^ parts["src_local", w] ^ parts["dst_remote", w] ^ h3_dir(w, DIR_FROM)
            return Mux(s1_data, towards, from_)

        s2_addr = [Signal(bucket_bits, name=f"s2_addr{w}") for w in range(n_ways)]
        s4_slot = [Signal(slot_layout, name=f"s4_slot{w}") for w in range(n_ways)]
        # The key comparison is split: 18-bit chunks compared in one stage (two LUT levels each), their AND and
        # the way selection in the next.
        chunks = [(lo, min(lo + _EQ_CHUNK, key_layout.size)) for lo in range(0, key_layout.size, _EQ_CHUNK)]
        s5_ok = [Signal(name=f"s5_ok{w}") for w in range(n_ways)]
        s5_chunks = [Signal(len(chunks), name=f"s5_chunks{w}") for w in range(n_ways)]
        s5_qp = [Signal(qbits, name=f"s5_qp{w}") for w in range(n_ways)]

        for w, (_, rd) in enumerate(ways):
            m.d.comb += [rd.addr.eq(s2_addr[w]), rd.en.eq(adv)]

        with m.If(adv):
            m.d.sync += [
                s1["valid"].eq(self.i.valid & self.i.ready), s1["item"].eq(self.i.payload),
                s2["valid"].eq(s1["valid"]), s2["item"].eq(it), s2["key"].eq(key),
                s2["lookup"].eq((s1_data | s1_ack) & fits),
            ]
            m.d.sync += [a.eq(hash_of(w)) for w, a in enumerate(s2_addr)]
            for src, dst in ((s2, s3), (s3, s4)):
                m.d.sync += [dst[k].eq(src[k]) for k in ("valid", "item", "lookup", "key")]
            m.d.sync += [s.eq(rd.data) for s, (_, rd) in zip(s4_slot, ways)]
            m.d.sync += [s5[k].eq(s4[k]) for k in ("valid", "item", "lookup")]
            for w in range(n_ways):
                stored, wanted = s4_slot[w].key.as_value(), s4["key"].as_value()
                m.d.sync += [
                    s5_ok[w].eq(s4["lookup"] & s4_slot[w].valid),
                    s5_chunks[w].eq(Cat(stored[lo:hi] == wanted[lo:hi] for lo, hi in chunks)),
                    s5_qp[w].eq(s4_slot[w].qp),
                ]

            # First matching way: a key is in two ways only while the control plane relocates it, with one index.
            s5_eq = [ok & chunk_eq.all() for ok, chunk_eq in zip(s5_ok, s5_chunks)]
            hit = Cat(*s5_eq).any()
            qp = Const(0, qbits)
            for w in reversed(range(n_ways)):
                qp = Mux(s5_eq[w], s5_qp[w], qp)
            out = self.o.payload
            m.d.sync += [self.o.valid.eq(s5["valid"]), out.qp_hit.eq(hit), out.qp.eq(qp)]
            m.d.sync += [getattr(out, name).eq(getattr(s5["item"], name)) for name, _ in item_layout]

            kind = s5["item"].kind
            looked_up = (kind == PacketKind.DATA) | (kind == PacketKind.ACK) | (kind == PacketKind.NACK)
            counter = Mux(looked_up, Mux(hit, 0, 1), 2)
            with m.If(s5["valid"]):
                for c in range(3):
                    with m.If(counter == c):
                        word = self.stats.word_select(c, 32)
                        m.d.sync += word.eq(word + 1)
