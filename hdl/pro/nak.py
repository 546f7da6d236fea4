"""PRO receiver, NAK-frame stage: each NACK event of :mod:`lbpipe.hdl.pro.ooo` becomes a RoCEv2 NAK frame with a
valid ICRC and IPv4 header checksum (PRO, paper 003, section III-C; issue #14, "NACKs leave as RoCEv2 NAK frames
(syndrome 0x60) with a valid ICRC"; datasheet docs/pro_rx_wire.md).

The event stream ``i`` carries ``qp`` (the QP classifier's index), ``nack`` and ``psn`` (pro-ooo's ``nack_psn``).
An event with ``nack`` set, for a QP whose *NAK context* is valid, becomes one 62-byte frame on ``m_axis`` (one
512-bit beat, ``tlast``); every other event is only counted.

**Where the header comes from** (choice; the issue is silent). Unlike the Themis compensator
(:mod:`lbpipe.hdl.packet.compensator`), which keeps a NACK the NIC built and sends it verbatim, PRO's receiver
builds NACKs the NIC never sent, for PSNs only the receiver pipeline knows. So each QP has a *NAK context* written
through ``ctl`` when the QP is set up (the control plane knows both ends of the connection): the NAK's destination
and source MAC, source and destination IPv4 address, UDP source port, P_Key and destination QPN (the requester's
QPN). The block computes the IPv4 header checksum and the ICRC itself for every frame, so the control plane writes
no derived value and a stale or forged context can only give a well-formed NAK to a wrong address. Fixed fields:
untagged IPv4, TOS 0, identification 0, DF, TTL 64, UDP destination port 4791, UDP checksum 0, BTH opcode 0x11 (RC
ACKNOWLEDGE) with SE, M, pad, TVer, FECN, BECN, AckReq and reserved bits 0, AETH syndrome 0x60 (NAK, PSN sequence
error) and MSN 0 (pro-ooo does not track the responder's message sequence number; a requester's go-back-N on a PSN
sequence error NAK uses the PSN).

**ICRC.** The ICRC is CRC-32 over eight 0xFF bytes, the IP header with TOS, TTL and checksum set to ones, the UDP
header with its checksum set to ones, BTH with its FECN/BECN/reserved byte set to ones, and AETH (IBA annex A17).
It is affine in the 144 variable bits (addresses, port, P_Key, QPN, PSN): the matrices come at elaboration time from
:func:`lbpipe.hdl.lib.crc.crc32_matrix`, the constant part folds into one mask, and each ICRC bit is an XOR of at
most 144 variable bits, cut into chunks of 36 (two LUT6 levels) registered, then XORed.

**Pipeline** (``latency`` = 8: from the edge that takes an event to the one that offers its frame on ``m_axis``):
S1 every context bank read (block RAM, banks of 1,024 QPs), S2 each bank's output registered, S2b the event's bank
chosen, S3 the frame decided, ICRC chunks and the address halves of the checksum summed, S4 ICRC and checksum sum,
S5 plus the constant words, S6 and S7 the end-around carries (the frame is assembled into the ``m_axis`` register
at S7). Every stage advances together when the ``m_axis`` register is free (``~tvalid | tready``), so ``i.ready`` is
that and events pass at one per clock.

**Control** (``ctl``, table = lane, index = QP): table 0 ``data[47:0]`` destination MAC, ``data[63:48]`` UDP
source port; table 1 ``data[47:0]`` source MAC; table 2 ``data[31:0]`` source IPv4, ``data[63:32]`` destination
IPv4; table 3 ``data[23:0]`` destination QPN, ``data[39:24]`` P_Key, ``data[63]`` valid. MACs and addresses are
integers with the first byte on the wire most significant. Write table 3 last when setting a QP up; a table 3
write with bit 63 clear makes the QP's NACKs count as missed. A command with a table above 3 or an index at or above
``n_qps`` writes nothing and is counted. ``ctl`` is always ready; a write and an event's read of the same QP in one
clock: the event reads the old context.

**Reset** clears the counters and the pipeline (a frame in flight is lost); the contexts are memory and survive.

Counters (``stats``, 32 bits each, wrapping): 0 NAK frames built, 1 NACK events missed (QP out of range or context not
valid), 2 events without ``nack``, 3 control commands ignored.
"""

from amaranth import Array, Cat, Const, Module, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.crc import CRC32_INIT, CRC32_XOROUT, crc32_matrix
from lbpipe.hdl.lib.meta import PSN_BITS
from lbpipe.protocol import NAK_PSN_SEQUENCE_ERROR, RC_ACKNOWLEDGE, ROCE_PORT

__all__ = ["NakGen", "NakEvent", "N_STATS", "NAK_BYTES", "check_parameters", "nak_context_commands"]

N_STATS = 4
NAK_BYTES = 62
_CHUNK = 36
_ETH_IPV4 = 0x0800
_IP_TTL = 64
_IP_UDP = 17

# The variable fields, in the order of the 144-bit vector the ICRC is computed from: (name, bits).
_VAR_FIELDS = (("sip", 32), ("dip", 32), ("sport", 16), ("pkey", 16), ("dqpn", 24), ("psn", PSN_BITS))


def _qp_bits(n_qps):
    return max(1, (n_qps - 1).bit_length())


def NakEvent(*, n_qps=10240):
    """One event: ``qp`` (QP index), ``nack`` (a NAK is to be sent) and ``psn`` (its BTH PSN)."""
    return data.StructLayout({"qp": _qp_bits(n_qps), "nack": 1, "psn": PSN_BITS})


def _context_layout():
    return data.StructLayout({"dmac": 48, "sport": 16, "smac": 48, "pad1": 16, "sip": 32, "dip": 32,
                              "dqpn": 24, "pkey": 16, "pad3": 23, "valid": 1})


def check_parameters(*, n_qps, user_width=1):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    check_int("n_qps", n_qps)
    check_int("user_width", user_width)
    if not 1 <= n_qps <= 1 << 20:
        raise ValueError(f"n_qps must be 1 to 1,048,576, not {n_qps}")
    if not 1 <= user_width <= 64:
        raise ValueError(f"user_width must be 1 to 64, not {user_width}")


def nak_context_commands(qp, *, dmac, smac, sip, dip, sport, dqpn, pkey=0xFFFF, valid=True):
    """The four ``ctl`` commands (dicts of table, index, data) that set QP ``qp``'s NAK context, table 3 last."""
    return [
        {"table": 0, "index": qp, "data": dmac | sport << 48},
        {"table": 1, "index": qp, "data": smac},
        {"table": 2, "index": qp, "data": sip | dip << 32},
        {"table": 3, "index": qp, "data": dqpn | pkey << 24 | int(bool(valid)) << 63},
    ]


def _be(value, n_bytes):
    """The bytes of a big-endian field ``value`` in wire order (8-bit slices, most significant first)."""
    return [value[8 * (n_bytes - 1 - k):8 * (n_bytes - k)] for k in range(n_bytes)]


def _const_be(value, n_bytes):
    return list(value.to_bytes(n_bytes, "big"))


def _frame_bytes(f, chk, icrc):
    """The 62 bytes of the NAK frame, each an int (constant) or a Value of 8 bits."""
    return (_be(f["dmac"], 6) + _be(f["smac"], 6) + _const_be(_ETH_IPV4, 2)
            + [0x45, 0x00] + _const_be(48, 2) + _const_be(0, 2) + _const_be(0x4000, 2) + [_IP_TTL, _IP_UDP]
            + _be(chk, 2) + _be(f["sip"], 4) + _be(f["dip"], 4)
            + _be(f["sport"], 2) + _const_be(ROCE_PORT, 2) + _const_be(28, 2) + _const_be(0, 2)
            + [RC_ACKNOWLEDGE, 0x00] + _be(f["pkey"], 2) + [0x00] + _be(f["dqpn"], 3) + [0x00] + _be(f["psn"], 3)
            + [NAK_PSN_SEQUENCE_ERROR, 0, 0, 0]
            + [icrc[8 * k:8 * k + 8] for k in range(4)])


def _icrc_rows():
    """``(const, rows)``: ICRC (as an integer, transmitted least significant byte first) = ``const`` XOR, for each
    bit ``o``, the parity of the variable bits set in ``rows[o]`` (over the 144-bit vector of :data:`_VAR_FIELDS`).

    The message is the ICRC's pseudo-packet: eight 0xFF bytes, then the frame from the IP header to AETH with the
    variant fields set to ones."""
    offsets, off = {}, 0
    for name, bits in _VAR_FIELDS:
        offsets[name] = off
        off += bits
    msg = []        # per byte: int, or (field, k, n_bytes)

    def var(name, n):
        return [(name, k, n) for k in range(n)]
    msg += [0xFF] * 8
    msg += [0x45, 0xFF] + _const_be(48, 2) + _const_be(0, 2) + _const_be(0x4000, 2) + [0xFF, _IP_UDP, 0xFF, 0xFF]
    msg += var("sip", 4) + var("dip", 4)
    msg += var("sport", 2) + _const_be(ROCE_PORT, 2) + _const_be(28, 2) + [0xFF, 0xFF]
    msg += [RC_ACKNOWLEDGE, 0x00] + var("pkey", 2) + [0xFF] + var("dqpn", 3) + [0x00] + var("psn", 3)
    msg += [NAK_PSN_SEQUENCE_ERROR, 0, 0, 0]
    state_rows, data_rows = crc32_matrix(len(msg))
    const_bits, var_of = 0, {}
    for i, b in enumerate(msg):
        for t in range(8):
            if isinstance(b, int):
                const_bits |= (b >> t & 1) << (8 * i + t)
            else:
                name, k, n = b
                var_of[8 * i + t] = offsets[name] + 8 * (n - 1 - k) + t
    rows, const = [], 0
    for o in range(32):
        parity = bin(state_rows[o] & CRC32_INIT).count("1") + bin(data_rows[o] & const_bits).count("1")
        const |= (parity & 1) << o
        row = 0
        for bit, v in var_of.items():
            if data_rows[o] >> bit & 1:
                row ^= 1 << v
        rows.append(row)
    return const ^ CRC32_XOROUT, rows


class NakGen(wiring.Component):
    """NACK events in, RoCEv2 NAK frames out (see the module docstring).

    Parameters
    ----------
    n_qps : int
        NAK contexts, 1 to 2**20.
    user_width : int
        Width of ``tuser`` (0 on every beat sent).

    Members
    -------
    i : In(stream.Signature(NakEvent(n_qps=n_qps)))
    m_axis : Out(AXI4StreamSignature(512, user_width))
    ctl : In(ControlSignature())
    stats : Out(32 * N_STATS)
    """

    latency = 8
    #: QPs per context-memory bank (a bank's read is registered before the banks are multiplexed).
    BANK = 1024

    def __init__(self, *, n_qps=10240, user_width=1):
        check_parameters(n_qps=n_qps, user_width=user_width)
        self._n_qps = n_qps
        self._user_width = user_width
        super().__init__({
            "i": In(stream.Signature(NakEvent(n_qps=n_qps))),
            "m_axis": Out(AXI4StreamSignature(data_width=512, user_width=user_width)),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def n_qps(self):
        return self._n_qps

    @property
    def memory_bits(self):
        return self._n_qps * _context_layout().size

    def elaborate(self, platform):
        m = Module()
        o = self.m_axis
        adv = Signal()
        m.d.comb += adv.eq(~o.tvalid | o.tready)
        with m.If(o.tvalid & o.tready):
            m.d.sync += o.tvalid.eq(0)
        counters = [self.stats.word_select(k, 32) for k in range(N_STATS)]
        rd = self._contexts(m, adv, counters)
        s2 = self._decide(m, adv, rd, counters)
        s3 = self._partials(m, adv, s2)
        s4 = self._sums(m, adv, s3)
        s6 = self._folds(m, adv, s4)
        self._emit(m, adv, s6)
        return m

    def _contexts(self, m, adv, counters):
        """The context memory in banks of :attr:`BANK` QPs (four 64-bit lanes written by ``ctl``), every bank read by
        the event taken; registers S1 (the event, its bank, whether its QP is in range) beside the banks' read
        registers."""
        size = _context_layout().size
        bank_depth = min(self.BANK, self._n_qps)
        n_banks = -(-self._n_qps // bank_depth)
        low = max(1, (bank_depth - 1).bit_length())
        c, ev = self.ctl.payload, self.i.payload
        ok = Signal()
        m.d.comb += [
            self.ctl.ready.eq(1),
            ok.eq((c.table < 4) & (c.index < self._n_qps)),
            self.i.ready.eq(adv),
        ]
        with m.If(self.ctl.valid & ~ok):
            m.d.sync += counters[3].eq(counters[3] + 1)
        datas = []
        for b in range(n_banks):
            depth = min(bank_depth, self._n_qps - b * bank_depth)
            bank = memory.Memory(shape=size, depth=depth, init=[])
            m.submodules[f"ctx{b}"] = bank
            wp, rp = bank.write_port(granularity=64), bank.read_port()
            mine = self.ctl.valid & ok
            if n_banks > 1:
                mine = mine & ((c.index >> low) == b)
            m.d.comb += [
                wp.addr.eq(c.index[:low]), wp.data.eq(Cat(c.data, c.data, c.data, c.data)),
                wp.en.eq(_lane_enables(mine, c.table)),
                rp.addr.eq(ev.qp[:low]), rp.en.eq(adv),
            ]
            datas.append(rp.data)
        s1 = {"v": Signal(), "nack": Signal(), "psn": Signal(PSN_BITS), "in_range": Signal(),
              "bank": Signal(range(max(2, n_banks)))}
        with m.If(adv):
            m.d.sync += [s1["v"].eq(self.i.valid), s1["nack"].eq(ev.nack), s1["psn"].eq(ev.psn),
                         s1["in_range"].eq(ev.qp < self._n_qps)]
            if n_banks > 1:
                m.d.sync += s1["bank"].eq(ev.qp >> low)
        return s1, datas

    def _decide(self, m, adv, rd, counters):
        """S2: every bank's read registered (nothing between a block RAM and its register) and whether the event
        asks for a frame; S2b: the event's bank chosen and registered."""
        s1, datas = rd
        regs = [Signal(len(d), name=f"s2_bank{b}") for b, d in enumerate(datas)]
        s2a = {"v": Signal(), "in_range": Signal(), "psn": Signal(PSN_BITS), "bank": Signal.like(s1["bank"])}
        ctx = Signal(_context_layout())
        s2 = {"v": Signal(), "in_range": Signal(), "psn": Signal(PSN_BITS), "ctx": ctx}
        with m.If(adv):
            m.d.sync += [reg.eq(d) for reg, d in zip(regs, datas)]
            m.d.sync += [s2a["v"].eq(s1["v"] & s1["nack"]), s2a["in_range"].eq(s1["in_range"]),
                         s2a["psn"].eq(s1["psn"]), s2a["bank"].eq(s1["bank"])]
            m.d.sync += [s2[n].eq(s2a[n]) for n in ("v", "in_range", "psn")]
            m.d.sync += ctx.eq(Array(regs)[s2a["bank"]] if len(regs) > 1 else regs[0])
            with m.If(s1["v"] & ~s1["nack"]):
                m.d.sync += counters[2].eq(counters[2] + 1)
        return s2

    def _partials(self, m, adv, s2):
        """S3: the frame decided (a context not valid counts as missed), ICRC chunk XORs, address-half sums."""
        ctx = s2["ctx"]
        fields = {"dmac": ctx.dmac, "smac": ctx.smac, "sip": ctx.sip, "dip": ctx.dip, "sport": ctx.sport,
                  "pkey": ctx.pkey, "dqpn": ctx.dqpn, "psn": s2["psn"]}
        s3 = {name: Signal(len(value), name=f"s3_{name}") for name, value in fields.items()}
        s3["v"] = Signal(name="s3_v")
        const, rows = _icrc_rows()
        vec = Cat(*[fields[name] for name, _ in _VAR_FIELDS])
        chunks = []
        for o, row in enumerate(rows):
            n_taps = bin(row).count("1")
            chunks.append([Signal(name=f"s3_icrc{o}_{k}") for k in range(max(1, -(-n_taps // _CHUNK)))])
        a, b = Signal(17, name="s3_a"), Signal(17, name="s3_b")
        with m.If(adv):
            m.d.sync += [s3[name].eq(value) for name, value in fields.items()]
            m.d.sync += [s3["v"].eq(s2["v"] & s2["in_range"] & ctx.valid),
                         a.eq(ctx.sip[16:] + ctx.sip[:16]), b.eq(ctx.dip[16:] + ctx.dip[:16])]
            for o, row in enumerate(rows):
                taps = [vec[bit] for bit in range(len(vec)) if row >> bit & 1]
                for k, reg in enumerate(chunks[o]):
                    part = taps[k * _CHUNK:(k + 1) * _CHUNK]
                    m.d.sync += reg.eq(Cat(*part).xor() if part else 0)
        built = s2["in_range"] & ctx.valid
        counters = [self.stats.word_select(k, 32) for k in range(2)]
        with m.If(adv & s2["v"]):
            m.d.sync += [counters[0].eq(counters[0] + built), counters[1].eq(counters[1] + ~built)]
        s3["chunks"], s3["icrc_const"], s3["a"], s3["b"] = chunks, const, a, b
        return s3

    def _sums(self, m, adv, s3):
        """S4: the ICRC (chunks and constant XORed) and the address words summed; S5: plus the constant words."""
        keep = ("dmac", "smac", "sip", "dip", "sport", "pkey", "dqpn", "psn", "v")
        s4 = {name: Signal(len(s3[name]), name=f"s4_{name}") for name in keep}
        s5 = {name: Signal(len(s3[name]), name=f"s5_{name}") for name in keep}
        icrc4, icrc5 = Signal(32, name="s4_icrc"), Signal(32, name="s5_icrc")
        c4, d5 = Signal(18, name="s4_c"), Signal(19, name="s5_d")
        # The IPv4 header's constant 16-bit words (version/IHL/TOS, length, identification, flags, TTL/protocol).
        const_words = 0x4500 + 48 + 0 + 0x4000 + (_IP_TTL << 8 | _IP_UDP)
        bits = [Cat(*regs).xor() ^ (s3["icrc_const"] >> o & 1) for o, regs in enumerate(s3["chunks"])]
        with m.If(adv):
            m.d.sync += [s4[n].eq(s3[n]) for n in keep] + [s5[n].eq(s4[n]) for n in keep]
            m.d.sync += [icrc4.eq(Cat(*bits)), c4.eq(s3["a"] + s3["b"]), icrc5.eq(icrc4), d5.eq(c4 + const_words)]
        s5["icrc"], s5["d"] = icrc5, d5
        return s5

    def _folds(self, m, adv, s5):
        """S6: the first end-around carry of the ones'-complement sum."""
        keep = ("dmac", "smac", "sip", "dip", "sport", "pkey", "dqpn", "psn", "v", "icrc")
        s6 = {name: Signal(len(s5[name]), name=f"s6_{name}") for name in keep}
        e6 = Signal(17, name="s6_e")
        with m.If(adv):
            m.d.sync += [s6[n].eq(s5[n]) for n in keep] + [e6.eq(s5["d"][:16] + s5["d"][16:])]
        s6["e"] = e6
        return s6

    def _emit(self, m, adv, s6):
        """S7: the second end-around carry, the checksum's complement, and the frame into the ``m_axis`` register."""
        o = self.m_axis
        chk = Signal(16)
        m.d.comb += chk.eq(~(s6["e"][:16] + s6["e"][16]))
        frame = _frame_bytes(s6, chk, s6["icrc"])
        assert len(frame) == NAK_BYTES
        tdata = Cat(*[Const(b, 8) if isinstance(b, int) else b for b in frame])
        with m.If(adv & s6["v"]):
            m.d.sync += [o.tvalid.eq(1), o.tdata.eq(tdata), o.tkeep.eq((1 << NAK_BYTES) - 1), o.tlast.eq(1),
                         o.tuser.eq(0)]


def _lane_enables(en, table):
    """Write-enable lanes of the context memory: bit ``table`` of 4 when ``en``."""
    return Cat(*[en & (table == k) for k in range(4)])
