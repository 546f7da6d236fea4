"""Packet parser: a 512-bit AXI4-Stream of Ethernet frames in, the same frames and one metadata item per frame out.

The parser is the first stage of an lbpipe packet pipeline: it turns each frame into the :func:`PacketMeta` item
the load-balancing blocks take (``kind``, ``psn``, ``dqpn``, ``flow_hash``, ... for RoCEv2; ``laps``, ``laps_pid``,
``laps_time``, ``laps_anchors``, ... for LAPS; ``tag``), and passes the frame on, beat for beat and bit for bit, so
that a deparser can buffer it and rewrite it from the blocks' results.
What the parser does not understand it passes without a second look: other EtherTypes, other UDP ports, IP
fragments, malformed and truncated frames (the frame is forwarded as it came; its item says OTHER and which
headers were found, and ``truncated`` says the frame ended inside a header or inside its IP packet).

The rules (which header counts as found, when a frame is RoCEv2 or LAPS, the kinds) are stated once, in the
golden model :mod:`lbpipe.sim.packet.parser`, which the tests hold the hardware to bit for bit. Choices made where the
issue is silent:

* **The item is emitted after the frame's last beat**, ``latency`` (7) cycles after ``s_axis`` accepts it when
  ``meta`` is not back-pressured. Only at ``tlast`` is the frame length known, and the RoCEv2 rules are strict
  about lengths (:func:`lbpipe.tb.lib.packets.classify`): a frame cut inside its payload must be OTHER. An item
  emitted at the end of the headers would have to be revoked at ``tlast``, and the blocks behind the parser keep
  per-flow state (Themis-D's PSN rings) that a revoked item would already have changed. The deparser is therefore
  store-and-forward: it buffers the frame, which it must do anyway to wait for the blocks' results.
* **Early items** (``early=True``, for cut-through pipelines such as themis-s-wire; the default stays late, which
  the compensator and the LAPS editor rely on): the item is emitted once the header window is complete, ``latency``
  cycles after the frame's *second* beat is accepted (or its only beat), whatever the frame's length. A frame of
  one or two beats (up to 128 bytes) gets exactly its late item. A longer frame's length is unknown then, and its
  item reads the frame as saturated: ``frame_len`` 65,535, ``short`` 0, and no cut at the IP packet's end (every
  header in the window does lie in a frame of more than 128 bytes). So an early item is a *prediction* from the
  headers: a frame cut before the end its IP header announces, or carrying bytes after it, is found only at
  ``tlast``, by the consumer (the cut-through deparser marks such a rewritten frame bad, docs/packet_io.md).
  The golden model states the same rule (``parse(..., early=True)``).
* **FCS** (``fcs=True``, a MAC that keeps the FCS): every rule reads the frame without its last 4 bytes
  (``frame_len`` and ``short`` included), the length taken 4 less in stage 1 and the short-frame flags 4 bytes
  later in stage 0; the frame passes on ``m_axis`` whole. Without it the FCS is a 4-byte trailer after the IP
  packet, which the RoCEv2 rule allows (``parse(..., fcs=True)``).
* **Header window**: the first 118 bytes of the frame (from the first two beats; a one-beat frame completes it at
  ``tlast``) are held until ``tlast``: enough for two tags, IPv4 with 40 bytes of options, UDP, and the longer of
  the BTH with the AETH (12 + 4) and the largest LAPS header (12 + 4 x 4): 22 + 60 + 8 + 28. RETH, ImmDt and the
  other extension headers are known by opcode and only their length is checked, so they need not be in the
  window. Bytes beyond the frame's end (stale window bytes, undefined ``tdata`` lanes) never reach an output:
  every field is masked by the flag of the header it is in, and a header counts only when it lies inside the
  frame.
* **Pairing contract**: items leave in frame order, exactly one per frame (runt frames of 1 byte included), and
  ``tag`` counts frames from 0 after reset, wrapping at 2**16. A frame's item is never offered before the frame's
  last beat has been offered on ``m_axis`` (the item follows ``latency - 1`` cycles later at the earliest), and
  it does not wait for ``m_axis`` either: the metadata pipeline keeps draining while ``m_axis`` is
  back-pressured, so a consumer that buffers frames and waits for their items cannot deadlock. A consumer must
  not wait for an item before taking its frame's beats (store-and-forward, above).
* **Flow control**: ``m_axis`` is one register stage behind ``s_axis``; ``s_axis.tready`` is high when the
  ``m_axis`` register can take a beat and the metadata pipeline can advance (``meta`` not back-pressured).
  Without back-pressure the parser takes one beat per clock, back-to-back frames of every size included: the
  metadata pipeline accepts a new frame every cycle. ``valid`` outputs never wait on ``ready``.
* **Offsets** are byte offsets from the start of the frame. Every L4 offset is 2 modulo 4 (14 + 4k), so the L4
  slice (UDP, then BTH or LAPS) is a choice among 11 four-byte-aligned positions of the IP-aligned window.
* **The LAPS header** (LAPS, IEEE ToN, section III-B: type 1 bit, INT ``pid`` 16 and ``time`` 48, SR anchors of 32
  bits) has no standard encapsulation; the paper leaves it open. lbpipe carries it as a **UDP shim**: a UDP
  datagram whose destination port is ``laps_port`` (default :data:`LAPS_PORT`, 0xC1A5 = 49573, from the
  dynamic/private range of RFC 6335, so it is no registered service's port) starts with the LAPS header. A UDP
  shim crosses IP routers and the ECMP hashing of switches that do not know LAPS, as RoCEv2 does, and leaves the
  parser's tag and IP rules (fragments, options, IPv6) as they are. Layout, big-endian, 12 fixed bytes then
  ``count`` anchors of 4 bytes:

  ========  ==============================================================================================
  byte      field
  ========  ==============================================================================================
  0         bit 7 ``probe`` (the paper's type bit), bit 6 ``ack`` (1: ACK or probe ACK, 0: data or probe),
            bits 5-4 reserved (ignored), bits 3-0 ``count`` (anchors)
  1         ``sr_idx``: index of the next anchor to visit (for SR forwarding; the parser does not interpret it)
  2-3       ``pid``
  4-9       ``time`` (48 bits)
  10-11     reserved (ignored)
  12-       anchors s_1 ... s_count, 32 bits each
  ========  ==============================================================================================

  A ``count`` above :data:`LAPS_MAX_ANCHORS` (4, as the paper's prototype keeps 4 anchors per PIT entry), or a
  header longer than the UDP datagram, is malformed (``laps_bad``). A frame is never both RoCEv2 and LAPS: the
  ports differ (``laps_port`` 4791 raises ``ValueError``), and a LAPS frame's ``kind`` is OTHER (the kinds stay
  RoCEv2's; the LAPS blocks key on ``laps``). The exact rule is the golden model's.

Pipeline (one register stage each, at most 5 logic levels each as Yosys maps it; every stage of the metadata
pipeline advances together, whenever ``meta`` can take an item):

0. ``s_axis``: the window (bytes 0-63 and 64-117 captured at beats 0 and 1, the current beat substituted at
   ``tlast``), the frame length from the beat count and ``tkeep``, the EtherType compares at bytes 12, 16 and
   20 (as the first beat arrives), "shorter than 14, 18, 22, 64 bytes" from ``tkeep``, the tag.
1. Ethernet: tags, the EtherType, cuts in the Ethernet header or a tag, the window realigned to the IP header (a
   3-way choice: offset 14, 18 or 22).
2. IP header: version, IHL, addresses, the end of the IP packet and its payload length (one adder each), the L4
   offsets (lookups on IHL, family and tag count), the L4 position.
3. The IP header, the UDP header and the IP packet against the frame length; fragments; UDP selection; the
   L4 slice of 36 bytes, UDP then BTH and AETH or LAPS (an 11-way choice).
4. UDP, BTH, AETH and LAPS fields; the opcode table (extension headers, RETH/ImmDt/AETH, DATA) and the kind a
   RoCEv2 frame would have; the two port compares; the UDP length against the IP payload, against each
   extension-header length and against each LAPS header length (0 to 4 anchors); anchors beyond the count
   cleared; ``icrc_off``; ``truncated`` completed.
5. The RoCEv2 and LAPS decisions, ``kind``, masking; the flow hash's partial XORs (CRC-16 over up to 35 bytes is
   linear over GF(2): XOR trees in chunks of 36 inputs).
6. The flow hash; the output register.

Each stage is a method of :class:`Parser` (``_window_stage``, ``_ethernet_stage``, ``_ip_stage``,
``_l4_slice_stage``, ``_l4_fields_stage``, ``_decision_stage``, ``_flow_hash_stage``): stage *k* registers
``p{k+1}``, the input of stage *k+1* (``p1`` to ``p6``), and stage 6 the ``meta`` output.
"""

import binascii
from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import check_int
from lbpipe.hdl.lib.meta import PSN_BITS, TAG_BITS, PacketKind
from lbpipe.protocol import (DATA_OPCODES, ETH_IPV4, ETH_IPV6, HEADER_BYTES, IP_UDP, LAPS_ANCHOR_BITS,
                             LAPS_FIXED_BYTES, LAPS_MAX_ANCHORS, LAPS_PORT, NAK_PSN_SEQUENCE_ERROR, RC_ACKNOWLEDGE,
                             ROCE_PORT, TPID_INNER, TPID_OUTER, TRANSPORT_RD, transport)
from lbpipe.protocol import EXT_HEADERS as _ALL_EXT_HEADERS

__all__ = [
    "Parser", "PacketMeta", "meta_fields",
    "ROCE_PORT", "ETH_IPV4", "ETH_IPV6", "TPID_OUTER", "TPID_INNER", "IP_UDP", "RC_ACKNOWLEDGE",
    "NAK_PSN_SEQUENCE_ERROR", "EXT_HEADERS", "EXT_WORDS", "RETH_OPCODES", "IMMDT_OPCODES", "AETH_OPCODES",
    "DATA_OPCODES", "MAX_BEATS", "WINDOW_BYTES",
    "LAPS_PORT", "LAPS_FIXED_BYTES", "LAPS_MAX_ANCHORS", "LAPS_ANCHOR_BITS", "check_laps_port",
]

# Protocol facts (RoCEv2 opcodes, header lengths, ports, the LAPS header) come from lbpipe.protocol, which
# tests/test_protocol.py checks against scapy and the InfiniBand opcode list; they are re-exported for the parser's
# users.

#: Extension headers after the BTH, by opcode, for the opcodes the parser reads: every RoCEv2 opcode but reliable
#: datagram's (choice: no RoCEv2 NIC implements RD, and its AETH follows an RDETH, not the BTH). RD and unknown
#: opcodes are parsed as BTH only.
EXT_HEADERS = {op: headers for op, headers in _ALL_EXT_HEADERS.items() if transport(op) != TRANSPORT_RD}
#: Length of the extension headers in 4-byte words, by opcode.
EXT_WORDS = {op: sum(HEADER_BYTES[h] for h in headers) // 4 for op, headers in EXT_HEADERS.items()}
RETH_OPCODES = frozenset(op for op, headers in EXT_HEADERS.items() if "RETH" in headers)
IMMDT_OPCODES = frozenset(op for op, headers in EXT_HEADERS.items() if "ImmDt" in headers)
AETH_OPCODES = frozenset(op for op, headers in EXT_HEADERS.items() if "AETH" in headers)
_LAPS_MAX_BYTES = LAPS_FIXED_BYTES + LAPS_MAX_ANCHORS * LAPS_ANCHOR_BITS // 8

#: Beats counted exactly per frame: lengths are exact up to ``MAX_BEATS * 64`` bytes; a longer frame's length
#: saturates (``frame_len`` 65,535).
MAX_BEATS = 1024
#: Bytes of the frame the parser looks at: 2 tags, IPv4 with 40 bytes of options, UDP, then the longer of BTH and
#: AETH (16 bytes) and the largest LAPS header (28 bytes).
WINDOW_BYTES = 22 + 60 + 8 + max(12 + 4, _LAPS_MAX_BYTES)

_BEAT_BYTES = 64
_L3_BYTES = WINDOW_BYTES - 22   # from the IP header: 60 bytes of IPv4 header, UDP, BTH and AETH or LAPS
_L4_FIRST_WORD = 5              # the L4 header starts 20 to 60 bytes (words 5 to 15) after the IP header
_L4_POSITIONS = 11
_L4_BYTES = _L3_BYTES - 60      # UDP 8, then BTH 12 and AETH 4, or LAPS up to 28
_EXT_CHOICES = sorted(set(EXT_WORDS.values()) | {0})


def PacketMeta():
    """Metadata of one frame, as the parser emits it (first field in the low bits).

    =============  =====  =====================================================================================
    field          bits   meaning
    =============  =====  =====================================================================================
    kind           3      :class:`lbpipe.hdl.lib.meta.PacketKind`; OTHER unless ``roce``
    tag            16     frame count since reset, wrapping
    frame_len      16     frame length in bytes, saturating at 65,535
    short          1      frame under 64 bytes
    truncated      1      the frame ends inside a header or before the end of its IP packet
    vlans          2      tags found (0 to 2)
    ipv4, ipv6     1, 1   IP header found (well formed, wholly in the frame)
    frag           1      IPv4 fragment (MF or fragment offset)
    udp            1      UDP header found
    roce           1      a whole, well-formed RoCEv2 frame (the fields below it are 0 otherwise)
    aeth           1      the opcode carries an AETH (``syndrome``, ``msn`` valid)
    reth, immdt    1, 1   the opcode carries a RETH / an ImmDt
    l3_off         8      IP header offset (14, 18 or 22) with ``ipv4``/``ipv6``, else 0
    l4_off         8      byte after the IP header (with options) with ``ipv4``/``ipv6``, else 0
    bth_off        8      BTH offset, with ``roce``
    icrc_off       16     ICRC offset, ``l4_off + udp_len - 4``, with ``roce``
    src_ip         128    source address (IPv4 in the low 32 bits), with ``ipv4``/``ipv6``
    dst_ip         128    destination address, likewise
    udp_sport      16     UDP source port, with ``udp``
    udp_dport      16     UDP destination port, with ``udp``
    udp_len        16     UDP length, with ``udp``
    udp_csum       16     UDP checksum (0: none), with ``udp``
    opcode         8      BTH opcode, with ``roce``
    dqpn           24     BTH destination QP, with ``roce``
    psn            24     BTH PSN, with ``roce``
    ackreq         1      BTH AckReq, with ``roce``
    syndrome       8      AETH syndrome, with ``aeth``
    msn            24     AETH MSN, with ``aeth``
    flow_hash      16     CRC-16/CCITT-FALSE of src, dst (4 or 16 bytes) and dqpn (3 bytes), with ``roce``
    laps           1      a whole, well-formed LAPS header (the ``laps_*`` fields below it are 0 otherwise)
    laps_bad       1      a malformed LAPS header (count above 4, or longer than the UDP datagram) on
                          ``laps_port`` in a frame that passes the UDP rules of RoCEv2 (not truncated, UDP
                          length at most the IP payload)
    laps_probe     1      LAPS type bit: a probe or probe ACK (1), data or ACK (0), with ``laps``
    laps_ack       1      an ACK or probe ACK (1), data or probe (0), with ``laps``
    laps_count     3      anchors in the header (0 to 4), with ``laps``
    laps_sr_idx    8      index of the next anchor to visit (SR forwarding; not interpreted), with ``laps``
    laps_pid       16     INT path ID, with ``laps``
    laps_time      48     INT time (send time, or the one-way latency in an ACK), with ``laps``
    laps_anchors   128    SR anchor *i* (from 0) in bits 32i+31:32i; anchors beyond ``laps_count`` are 0
    laps_off       8      LAPS header offset (``l4_off + 8``), with ``laps``
    bth_resv       8      BTH byte 4 (FECN, BECN and the 6 reserved bits: under the ICRC's mask, so switches
                          may mark it), with ``roce``
    =============  =====  =====================================================================================

    The LAPS fields come after the RoCEv2 ones, so the offsets of the fields before them do not depend on LAPS;
    ``bth_resv``, added later, comes last for the same reason.
    """
    return data.StructLayout({
        "kind":      PacketKind,
        "tag":       TAG_BITS,
        "frame_len": 16,
        "short":     1,
        "truncated": 1,
        "vlans":     2,
        "ipv4":      1,
        "ipv6":      1,
        "frag":      1,
        "udp":       1,
        "roce":      1,
        "aeth":      1,
        "reth":      1,
        "immdt":     1,
        "l3_off":    8,
        "l4_off":    8,
        "bth_off":   8,
        "icrc_off":  16,
        "src_ip":    128,
        "dst_ip":    128,
        "udp_sport": 16,
        "udp_dport": 16,
        "udp_len":   16,
        "udp_csum":  16,
        "opcode":    8,
        "dqpn":      PSN_BITS,
        "psn":       PSN_BITS,
        "ackreq":    1,
        "syndrome":  8,
        "msn":       PSN_BITS,
        "flow_hash": 16,
        "laps":         1,
        "laps_bad":     1,
        "laps_probe":   1,
        "laps_ack":     1,
        "laps_count":   3,
        "laps_sr_idx":  8,
        "laps_pid":     16,
        "laps_time":    48,
        "laps_anchors": LAPS_MAX_ANCHORS * LAPS_ANCHOR_BITS,
        "laps_off":     8,
        "bth_resv":     8,
    })


def meta_fields():
    """Names of the :func:`PacketMeta` fields, in layout order."""
    return [name for name, _ in PacketMeta()]


def check_laps_port(laps_port):
    """Raise ``TypeError``/``ValueError`` unless ``laps_port`` is a UDP port (1 to 65535) other than RoCEv2's
    (shared by the parser and its golden model: a frame is never both RoCEv2 and LAPS)."""
    check_int("LAPS port", laps_port)
    if not 1 <= laps_port <= 0xFFFF:
        raise ValueError(f"LAPS port must be from 1 to 65535, not {laps_port}")
    if laps_port == ROCE_PORT:
        raise ValueError(f"LAPS port must not be RoCEv2's port {ROCE_PORT}")


# -- helpers ----------------------------------------------------------------------------------------------------------

def _byte(value, index):
    return value[8 * index:8 * index + 8]


def _be(value, offset, size):
    """The big-endian ``size``-byte field at byte ``offset`` of a little-endian-laned byte vector."""
    return Cat(*[_byte(value, offset + size - 1 - k) for k in range(size)])


def _window(value, offset, size):
    return value[8 * offset:8 * (offset + size)]


def _xor_chunks(bits, chunk=36):
    """XORs of ``bits`` in groups of at most ``chunk`` (two LUT6 levels each); ``[]`` for no bits."""
    return [Cat(*bits[i:i + chunk]).xor() for i in range(0, len(bits), chunk)]


def _lookup(index, function, width=1):
    """``function(i)`` (an integer of ``width`` bits) for the value ``i`` of ``index`` (at most 8 bits), built per
    output bit as 6-input lookups and a choice among them by the index's top bits, which maps to two LUT levels
    (case statements and chains of small adders map deeper)."""
    bits = len(index)
    low_bits = min(bits, 6)
    out = []
    for bit in range(width):
        parts = []
        for high in range(1 << (bits - low_bits)):
            table = sum((int(function((high << low_bits) | low)) >> bit & 1) << low
                        for low in range(1 << low_bits))
            parts.append(Const(table, 1 << low_bits).bit_select(index[:low_bits], 1))
        out.append(parts[0] if len(parts) == 1 else Cat(*parts).bit_select(index[low_bits:], 1))
    return Cat(*out)


def _crc16_columns():
    """The flow hash as ``K ^ M @ bits``: for each input bit, the 16-bit column it XORs into the CRC.

    ``crc_hqx(msg, 0xFFFF) = crc_hqx(msg, 0) ^ crc_hqx(zeros(len(msg)), 0xFFFF)`` and ``crc_hqx(msg, 0)`` is linear
    in ``msg`` and blind to leading zero bytes. So both families use one 35-byte message: IPv6 ``src16 dst16
    dqpn3``, IPv4 ``zeros(24) src4 dst4 dqpn3``, and only the constant and the low 32 address bits' positions
    differ.

    Returns ``(v6, v4, k6, k4)``: ``v6[(field, bit)]`` and ``v4[(field, bit)]`` are columns (field ``src``, ``dst`` or
    ``dqpn``), ``k6``/``k4`` the constants.
    """
    def column(position, bit):
        msg = bytearray(35)
        msg[position] = 1 << bit
        return binascii.crc_hqx(bytes(msg), 0)

    v6, v4 = {}, {}
    for b in range(128):
        v6[("src", b)] = column(15 - b // 8, b % 8)
        v6[("dst", b)] = column(31 - b // 8, b % 8)
    for b in range(32):
        v4[("src", b)] = column(27 - b // 8, b % 8)
        v4[("dst", b)] = column(31 - b // 8, b % 8)
    for b in range(24):
        v6[("dqpn", b)] = v4[("dqpn", b)] = column(34 - b // 8, b % 8)
    return v6, v4, binascii.crc_hqx(bytes(35), 0xFFFF), binascii.crc_hqx(bytes(11), 0xFFFF)


def _flow_hash_parts(src, dst, dqpn):
    """The flow hash's XOR terms, per output bit: ``(shared, only6, only4)``, each a list of chunk XORs
    (:func:`_xor_chunks`) of the input bits in that bit's columns (:func:`_crc16_columns`): ``shared`` those both
    families use (``dqpn``, and the address bits above 32, which IPv4 leaves 0), ``only6``/``only4`` the low 32
    address bits at IPv6's and at IPv4's positions. ``src``, ``dst`` (128 bits) and ``dqpn`` are values.
    """
    v6_cols, v4_cols, _, _ = _crc16_columns()
    inputs = {"src": src, "dst": dst, "dqpn": dqpn}
    hash_parts = []
    for bit in range(16):
        shared, only6, only4 = [], [], []
        for (field, b), col in v6_cols.items():
            if not col >> bit & 1:
                continue
            if field == "dqpn" or b >= 32:
                shared.append(inputs[field][b])     # IPv4 leaves the high address bits 0
            else:
                only6.append(inputs[field][b])
        for (field, b), col in v4_cols.items():
            if field != "dqpn" and col >> bit & 1:
                only4.append(inputs[field][b])
        hash_parts.append(tuple(_xor_chunks(bits) for bits in (shared, only6, only4)))
    return hash_parts


class Parser(wiring.Component):
    """Ethernet / [1-2 tags] / IPv4 or IPv6 / UDP / RoCEv2 or LAPS parser on a 512-bit AXI4-Stream.

    Parameters
    ----------
    user_width : int
        Width of ``tuser``, passed through; at least 1.
    laps_port : int
        UDP destination port of the LAPS shim (see the module docstring), 1 to 65535 but not RoCEv2's 4791;
        :data:`LAPS_PORT` (49573) by default.
    early : bool
        Emit each item once the header window is complete (after the frame's second beat) instead of after its last
        beat (see "Early items" in the module docstring). False by default.
    fcs : bool
        Each frame ends with its 4-byte FCS (a MAC that keeps it): the rules read the frame without its last 4
        bytes (``frame_len`` and ``short`` included), as :func:`lbpipe.sim.packet.parser.parse` with ``fcs``. The
        frame passes on ``m_axis`` whole. False by default.

    Members
    -------
    s_axis : In(AXI4StreamSignature(data_width=512, user_width=user_width))
        Frames in (see :mod:`lbpipe.hdl.lib.axis` for byte order and framing).
    m_axis : Out(AXI4StreamSignature(data_width=512, user_width=user_width))
        The same beats, unchanged (``tdata`` including undefined lanes, ``tkeep``, ``tlast``, ``tuser``), one
        register stage later.
    meta : Out(stream.Signature(PacketMeta()))
        One item per frame, in frame order, ``latency`` cycles after the frame's last beat is accepted when not
        back-pressured (see the module docstring for the pairing contract).

    Raises
    ------
    TypeError, ValueError
        If ``user_width`` is not an integer of at least 1, or ``laps_port`` not an integer from 1 to 65535 other
        than 4791.
    """

    #: Cycles from the clock edge that accepts a frame's last beat to the edge that hands its item on.
    latency = 7

    def __init__(self, *, user_width=1, laps_port=LAPS_PORT, early=False, fcs=False):
        AXI4StreamSignature.check_parameters(data_width=8 * _BEAT_BYTES, user_width=user_width)
        check_laps_port(laps_port)
        if not isinstance(early, bool):
            raise TypeError(f"early must be a bool, not {early!r}")
        if not isinstance(fcs, bool):
            raise TypeError(f"fcs must be a bool, not {fcs!r}")
        self._fcs = fcs
        self._user_width = user_width
        self._laps_port = laps_port
        self._early = early
        axis = AXI4StreamSignature(data_width=8 * _BEAT_BYTES, user_width=user_width)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "meta":   Out(stream.Signature(PacketMeta())),
        })

    @property
    def user_width(self):
        return self._user_width

    @property
    def laps_port(self):
        return self._laps_port

    @property
    def early(self):
        return self._early

    @property
    def fcs(self):
        return self._fcs

    def elaborate(self, platform):
        """The pipeline of the module docstring: the ``m_axis`` register beside the metadata stages 0 to 6, one
        method each: stage *k* registers ``p{k+1}``, the input of stage *k+1*, and stage 6 ``meta``::

            s_axis --> m_axis register -------------------------------------------------------------------> m_axis
               '--> 0 window -p1-> 1 Ethernet -p2-> 2 IP header -p3-> 3 L4 slice -p4-> 4 L4 fields -p5->
                    5 decisions -p6-> 6 flow hash --> meta

        Every metadata stage advances whenever ``meta`` can take an item (``men``).
        """
        m = Module()
        men, take = self._flow_control(m)
        p1 = self._window_stage(m, men, take)
        p2 = self._ethernet_stage(m, men, p1)
        p3 = self._ip_stage(m, men, p2)
        p4 = self._l4_slice_stage(m, men, p3)
        p5 = self._l4_fields_stage(m, men, p4)
        p6 = self._decision_stage(m, men, p5)
        self._flow_hash_stage(m, men, p6)
        return m

    def _flow_control(self, m):
        """Flow control and the ``m_axis`` register: ``m_axis`` is ``s_axis`` one register stage later.

        Returns
        -------
        men : Signal
            The metadata pipeline advances (all of its stages together): ``meta`` can take an item.
        take : Signal
            ``s_axis`` transfers a beat.
        """
        s, o, meta = self.s_axis, self.m_axis, self.meta
        adv = Signal()      # the m_axis register can take a beat
        men = Signal()      # the metadata pipeline advances (all of its stages together)
        take = Signal()     # s_axis transfers a beat
        m.d.comb += [
            adv.eq(~o.tvalid | o.tready),
            men.eq(~meta.valid | meta.ready),
            s.tready.eq(adv & men),
            take.eq(s.tvalid & s.tready),
        ]
        with m.If(adv):
            m.d.sync += [
                o.tvalid.eq(s.tvalid & men),
                o.tdata.eq(s.tdata),
                o.tkeep.eq(s.tkeep),
                o.tlast.eq(s.tlast),
                o.tuser.eq(s.tuser),
            ]
        return men, take

    def _window_stage(self, m, men, take):
        """Stage 0, on ``s_axis``: the header window, the frame length, the EtherType compares, the tag.

        Registers, per beat: the frame's position (first, second beat), its beat count, the tag, bytes 0-63 and
        64-117 of the window and the EtherType compares of the first beat. Registers ``p1`` (valid at ``tlast``):
        the window (the current beat substituted), the frame length from the beat count and ``tkeep``, the
        EtherType compares, "shorter than 14, 18, 22, 64 bytes", the tag. One cycle of ``latency``.
        """
        s = self.s_axis
        first = Signal(init=1)                      # the next beat is a frame's first
        second = Signal()                           # the next beat is a frame's second
        beats = Signal(range(MAX_BEATS))            # beats of the frame before the next one, saturating
        beats_p1 = Signal(range(MAX_BEATS + 1), init=1)
        over = Signal()                             # more than MAX_BEATS - 1 beats before the next one
        tag = Signal(TAG_BITS)
        win0 = Signal(8 * _BEAT_BYTES, reset_less=True)
        win1 = Signal(8 * (WINDOW_BYTES - _BEAT_BYTES), reset_less=True)
        with m.If(take):
            with m.If(s.tlast):
                m.d.sync += [first.eq(1), second.eq(0), beats.eq(0), beats_p1.eq(1), over.eq(0), tag.eq(tag + 1)]
            with m.Else():
                m.d.sync += [first.eq(0), second.eq(first)]
                with m.If(beats != MAX_BEATS - 1):
                    m.d.sync += [beats.eq(beats + 1), beats_p1.eq(beats_p1 + 1)]
                with m.Else():
                    m.d.sync += over.eq(1)
            with m.If(first):
                m.d.sync += win0.eq(s.tdata)
            with m.If(second):
                m.d.sync += win1.eq(s.tdata[:len(win1)])

        # Bytes in the last beat: tkeep is a run of ones from bit 0, so its top one's position, plus one.
        keep = s.tkeep
        top = [keep[i] & ~keep[i + 1] for i in range(_BEAT_BYTES - 1)] + [keep[_BEAT_BYTES - 1]]
        count = Signal(7)
        m.d.comb += count.eq(Cat(*[
            Cat(*[top[i] for i in range(_BEAT_BYTES) if (i + 1) >> b & 1]).any() for b in range(7)]))

        # EtherType candidates at 12, 16 and 20 are compared as the first beat arrives, so that stage 1 only
        # chooses among the results.
        eth_layout = data.StructLayout({"outer": 1, "inner": 1, "ipv4": 3, "ipv6": 3})

        def eth_decode(beat):
            ets = [_be(beat, 12 + 4 * k, 2) for k in range(3)]
            return Cat((ets[0] == TPID_OUTER[0]) | (ets[0] == TPID_OUTER[1]), ets[1] == TPID_INNER,
                       *[et == ETH_IPV4 for et in ets], *[et == ETH_IPV6 for et in ets])

        eth_first = Signal(eth_layout, reset_less=True)
        with m.If(take & first):
            m.d.sync += eth_first.eq(eth_decode(s.tdata))

        p1_valid = Signal()
        p1_win = Signal(8 * WINDOW_BYTES, reset_less=True)
        p1_n = Signal(17, reset_less=True)
        p1_eth = Signal(eth_layout, reset_less=True)
        # The frame is shorter than 14, 18, 22, 64 bytes: a one-beat frame whose tkeep stops before that byte.
        p1_below = Signal(data.StructLayout({"b14": 1, "b18": 1, "b22": 1, "b64": 1}), reset_less=True)
        p1_tag = Signal(TAG_BITS, reset_less=True)
        with m.If(men):
            m.d.sync += [
                # Late: at tlast. Early: once the window is complete, at the second beat or at a one-beat frame's
                # tlast (exactly one item per frame either way).
                p1_valid.eq(take & (((first & s.tlast) | second) if self._early else s.tlast)),
                p1_win.eq(Cat(Mux(first, s.tdata, win0), Mux(second, s.tdata[:len(win1)], win1))),
                # Past the beat count's range the length saturates (65,536, which frame_len shows as 65,535).
                # Early, before tlast: the frame has more than two beats, and its length is not known yet; it
                # reads as saturated (every header in the window is in the frame, no IP-packet cut is seen).
                p1_n.eq(Mux(over | (~s.tlast if self._early else 0), 1 << 16,
                            Cat(count[:6], Mux(count[6], beats_p1, beats)))),
                p1_eth.eq(Mux(first, eth_decode(s.tdata), eth_first)),
                p1_below.eq(self._below(first, second, s.tlast, keep)),
                p1_tag.eq(tag),
            ]
        return SimpleNamespace(valid=p1_valid, win=p1_win, n=p1_n, eth=p1_eth, below=p1_below, tag=p1_tag)

    def _below(self, first, second, last, keep):
        """"Shorter than 14, 18, 22, 64 bytes" for the beat on ``s_axis`` (read at ``tlast``): a one-beat frame
        whose ``tkeep`` stops before that byte; with ``fcs``, 4 bytes later, and every frame of up to 67 bytes is
        short (its last beat the second, holding fewer than 4 bytes)."""
        if not self._fcs:
            return Cat(*[first & ~keep[k - 1] for k in (14, 18, 22, 64)])
        return Cat(*[first & ~keep[k + 3] for k in (14, 18, 22)], first | (second & last & ~keep[3]))

    def _ethernet_stage(self, m, men, p1):
        """Stage 1, Ethernet: tags, the EtherType, cuts in the Ethernet header or a tag; the window realigned to the
        IP header (a 3-way choice: offset 14, 18 or 22).

        Registers ``p2``: the IP-aligned window, the IPv4/IPv6 selection, the tag choice, the L2 cut, whether the
        fixed IP header fits, the base of the IP packet's end, and the fields common to every item (tag, frame
        length, short, tags found). One cycle of ``latency``.
        """
        win, n, eth, below = p1.win, p1.n, p1.eth, p1.below
        f = 4 if self._fcs else 0   # with an FCS, the frame the rules see is 4 bytes shorter
        n_rules = Mux(n < 4, 0, n - 4) if self._fcs else n
        t1 = Signal()
        t2 = Signal()
        trunc_l2 = Signal()
        m.d.comb += [
            t1.eq(eth.outer),
            t2.eq(eth.outer & eth.inner),
            trunc_l2.eq(below.b14 | (t1 & below.b18) | (t2 & below.b22)),
        ]

        p2_valid = Signal()
        p2_l3 = Signal(8 * _L3_BYTES, reset_less=True)
        p2_n = Signal(17, reset_less=True)
        p2_sel4 = Signal(reset_less=True)
        p2_sel6 = Signal(reset_less=True)
        p2_l3sel = Signal(2, reset_less=True)
        p2_trunc = Signal(reset_less=True)
        p2_fits = Signal(data.StructLayout({"v4": 1, "v6": 1}), reset_less=True)
        p2_ip_base = Signal(7, reset_less=True)
        p2_common = Signal(data.StructLayout({"tag": TAG_BITS, "frame_len": 16, "short": 1, "vlans": 2}),
                           reset_less=True)
        with m.If(men):
            m.d.sync += [
                p2_valid.eq(p1.valid),
                p2_l3.eq(Mux(t2, _window(win, 22, _L3_BYTES),
                             Mux(t1, _window(win, 18, _L3_BYTES), _window(win, 14, _L3_BYTES)))),
                p2_n.eq(n_rules),
                p2_sel4.eq(~trunc_l2 & Mux(t2, eth.ipv4[2], Mux(t1, eth.ipv4[1], eth.ipv4[0]))),
                p2_sel6.eq(~trunc_l2 & Mux(t2, eth.ipv6[2], Mux(t1, eth.ipv6[1], eth.ipv6[0]))),
                p2_l3sel.eq(Cat(t1 & ~t2, t2)),
                p2_trunc.eq(trunc_l2),
                # The IPv4 header's fixed 20 bytes, the IPv6 header's 40, are in the frame.
                p2_fits.v4.eq(Mux(t2, n >= 42 + f, Mux(t1, n >= 38 + f, n >= 34 + f))),
                p2_fits.v6.eq(Mux(t2, n >= 62 + f, Mux(t1, n >= 58 + f, n >= 54 + f))),
                # What the IP length field is added to for the packet's end: the IP header's offset, + 40 for
                # IPv6 (whose payload length leaves out the 40-byte header).
                p2_ip_base.eq(Mux(t2, 22, Mux(t1, 18, 14)) +
                              Mux(Mux(t2, eth.ipv6[2], Mux(t1, eth.ipv6[1], eth.ipv6[0])), 40, 0)),
                p2_common.tag.eq(p1.tag),
                p2_common.frame_len.eq(Mux(n[16], 0xFFFF, n_rules[:16])),
                p2_common.short.eq(below.b64),
                p2_common.vlans.eq(Mux(t2 & ~below.b22, 2, Mux(t1 & ~below.b18, 1, 0))),
            ]
        return SimpleNamespace(valid=p2_valid, l3=p2_l3, n=p2_n, sel4=p2_sel4, sel6=p2_sel6, l3sel=p2_l3sel,
                               trunc=p2_trunc, fits=p2_fits, ip_base=p2_ip_base, common=p2_common)

    def _ip_stage(self, m, men, p2):
        """Stage 2, the IP header: version, IHL, addresses, the end of the IP packet and its payload length (one
        adder each), the L4 offsets (lookups on IHL, family and tag count), the L4 position.

        Registers ``p3``: the window from the earliest L4 offset on and the L4 position in it, the IPv4 and IPv6
        header checks so far, the IP packet's end and payload length, the L4, UDP-end and ``l4 - 4`` offsets, the
        fragment bits, "the next header is UDP", the addresses. One cycle of ``latency``.
        """
        l3w, n, l3sel = p2.l3, p2.n, p2.l3sel
        sel4, sel6 = p2.sel4, p2.sel6
        version, ihl = _byte(l3w, 0)[4:], _byte(l3w, 0)[:4]
        total = _be(l3w, 2, 2)
        plen = _be(l3w, 4, 2)
        fits_20, fits_40 = p2.fits.v4, p2.fits.v6
        hdr_words = Signal(4)
        m.d.comb += hdr_words.eq(Mux(sel6, 10, ihl))
        # Offsets as lookups on (IHL, family, tag count) rather than chains of small adders.
        layout_index = Cat(ihl, sel6, l3sel)

        def offset(extra):
            def function(i):
                words = 10 if i >> 4 & 1 else i & 0xF
                return (14 + 4 * (i >> 5) + 4 * words + extra) & 0x7F
            return _lookup(layout_index, function, 7)

        l4, udp_end, l4m4 = offset(0), offset(8), offset(-4)

        p3_valid = Signal()
        p3_l4win = Signal(8 * (_L3_BYTES - 4 * _L4_FIRST_WORD), reset_less=True)
        p3_pos = Signal(4, reset_less=True)
        p3_n = Signal(17, reset_less=True)
        p3_v4_pre = Signal(reset_less=True)
        p3_ipv6 = Signal(reset_less=True)
        p3_trunc = Signal(reset_less=True)
        p3_l3sel = Signal(2, reset_less=True)
        p3_l4 = Signal(7, reset_less=True)
        p3_udp_end = Signal(7, reset_less=True)
        p3_ip_end = Signal(17, reset_less=True)
        p3_ip_pl = Signal(signed(17), reset_less=True)
        p3_l4m4 = Signal(7, reset_less=True)
        p3_frag_bits = Signal(reset_less=True)
        p3_to_udp = Signal(reset_less=True)
        p3_src = Signal(128, reset_less=True)
        p3_dst = Signal(128, reset_less=True)
        p3_common = Signal.like(p2.common)
        with m.If(men):
            m.d.sync += [
                p3_valid.eq(p2.valid),
                p3_l4win.eq(l3w[8 * 4 * _L4_FIRST_WORD:]),
                p3_pos.eq(hdr_words - _L4_FIRST_WORD),
                p3_n.eq(n),
                p3_v4_pre.eq(sel4 & fits_20 & (version == 4) & (ihl >= 5)),
                p3_ipv6.eq(sel6 & fits_40 & (version == 6)),
                p3_trunc.eq(p2.trunc | (sel4 & ~fits_20) | (sel6 & ~fits_40)),
                p3_l3sel.eq(l3sel),
                p3_l4.eq(l4),
                p3_udp_end.eq(udp_end),
                # One adder each, on operands chosen by family: IPv4 total length, IPv6 payload length + 40.
                p3_ip_end.eq(Mux(sel6, plen, total) + p2.ip_base),
                p3_ip_pl.eq((Mux(sel6, plen, total) - Mux(sel6, 0, 4 * ihl)).as_signed()),
                p3_l4m4.eq(l4m4),
                p3_frag_bits.eq(_be(l3w, 6, 2)[:14].any()),
                p3_to_udp.eq(Mux(sel6, _byte(l3w, 6) == IP_UDP,
                                 (_byte(l3w, 9) == IP_UDP) & ~_be(l3w, 6, 2)[:14].any())),
                p3_src.eq(Mux(sel6, _be(l3w, 8, 16), _be(l3w, 12, 4))),
                p3_dst.eq(Mux(sel6, _be(l3w, 24, 16), _be(l3w, 16, 4))),
                p3_common.eq(p2.common),
            ]
        return SimpleNamespace(valid=p3_valid, l4win=p3_l4win, pos=p3_pos, n=p3_n, v4_pre=p3_v4_pre, ipv6=p3_ipv6,
                               trunc=p3_trunc, l3sel=p3_l3sel, l4=p3_l4, udp_end=p3_udp_end, ip_end=p3_ip_end,
                               ip_pl=p3_ip_pl, l4m4=p3_l4m4, frag_bits=p3_frag_bits, to_udp=p3_to_udp, src=p3_src,
                               dst=p3_dst, common=p3_common)

    def _l4_slice_stage(self, m, men, p3):
        """Stage 3, lengths and the L4 slice: the IP header, the UDP header and the IP packet against the frame
        length; fragments; UDP selection; the L4 slice of 36 bytes, UDP then BTH and AETH or LAPS (an 11-way
        choice).

        Registers ``p4``: the L4 slice, the header flags (``ipv4``, ``ipv6``, ``frag``, ``udp``, ``truncated`` so
        far), "the IP packet ends past the frame", the offsets, the IP payload length, the addresses. One cycle of
        ``latency``.
        """
        n = p3.n
        ipv4 = Signal()
        frag = Signal()
        m.d.comb += [
            ipv4.eq(p3.v4_pre & (n >= p3.l4)),
            frag.eq(ipv4 & p3.frag_bits),
        ]
        l4_slice = Signal(8 * _L4_BYTES)
        with m.Switch(p3.pos):
            for k in range(_L4_POSITIONS):
                with m.Case(k):
                    m.d.comb += l4_slice.eq(_window(p3.l4win, 4 * k, _L4_BYTES))
            with m.Default():
                m.d.comb += l4_slice.eq(0)   # IHL below 5: not IPv4, the slice is never used

        p4_valid = Signal()
        p4_l4hdr = Signal(8 * _L4_BYTES, reset_less=True)
        p4_flags = Signal(data.StructLayout({"ipv4": 1, "ipv6": 1, "frag": 1, "udp": 1, "truncated": 1}),
                          reset_less=True)
        p4_ip_cut = Signal(reset_less=True)     # the IP packet's end is past the frame's
        p4_l4m4 = Signal(7, reset_less=True)
        p4_l3sel = Signal(2, reset_less=True)
        p4_l4 = Signal(7, reset_less=True)
        p4_udp_end = Signal(7, reset_less=True)
        p4_ip_pl = Signal(16, reset_less=True)
        p4_src = Signal(128, reset_less=True)
        p4_dst = Signal(128, reset_less=True)
        p4_common = Signal.like(p3.common)
        with m.If(men):
            m.d.sync += [
                p4_valid.eq(p3.valid),
                p4_l4hdr.eq(l4_slice),
                p4_flags.ipv4.eq(ipv4),
                p4_flags.ipv6.eq(p3.ipv6),
                p4_flags.frag.eq(frag),
                # The UDP header's end is past the IP header's, so its compare implies ``n >= p3.l4``.
                p4_flags.udp.eq((p3.v4_pre | p3.ipv6) & p3.to_udp & (p3.ip_pl >= 8) & (n >= p3.udp_end)),
                # Cut inside a header so far; a cut IP packet is added in the next stage (the compare is deep).
                p4_flags.truncated.eq(p3.trunc | (p3.v4_pre & (n < p3.l4))),
                p4_ip_cut.eq(p3.ip_end > n),
                p4_l4m4.eq(p3.l4m4),
                p4_l3sel.eq(p3.l3sel),
                p4_l4.eq(p3.l4),
                p4_udp_end.eq(p3.udp_end),
                # With udp set the IP payload is 8 to 65,535 bytes; otherwise it is never used.
                p4_ip_pl.eq(p3.ip_pl[:16]),
                p4_src.eq(p3.src),
                p4_dst.eq(p3.dst),
                p4_common.eq(p3.common),
            ]
        return SimpleNamespace(valid=p4_valid, l4hdr=p4_l4hdr, flags=p4_flags, ip_cut=p4_ip_cut, l4m4=p4_l4m4,
                               l3sel=p4_l3sel, l4=p4_l4, udp_end=p4_udp_end, ip_pl=p4_ip_pl, src=p4_src,
                               dst=p4_dst, common=p4_common)

    def _l4_fields_stage(self, m, men, p4):
        """Stage 4, the L4 fields: UDP, BTH, AETH and LAPS fields; the opcode table (extension headers,
        RETH/ImmDt/AETH, DATA) and the kind a RoCEv2 frame would have; the two port compares; the UDP length against
        the IP payload, against each extension-header length and against each LAPS header length (0 to 4 anchors);
        anchors beyond the count cleared; ``icrc_off``; ``truncated`` completed.

        Registers ``p5``: those fields and compares (``p5.fields``), the header flags, the addresses, the common
        fields. One cycle of ``latency``.
        """
        hdr = p4.l4hdr
        udp_len = _be(hdr, 4, 2)
        opcode = _byte(hdr, 8)
        tver = _byte(hdr, 9)[:4]
        syndrome = _byte(hdr, 20)
        # The opcode table as truth tables (a case statement over 40 opcodes maps deeper).
        ext_words = Signal(3)
        op = Signal(data.StructLayout({"aeth": 1, "reth": 1, "immdt": 1, "data": 1}))
        columns = [lambda code, b=b: EXT_WORDS.get(code, 0) >> b & 1 for b in range(3)] + [
            lambda code: code in AETH_OPCODES, lambda code: code in RETH_OPCODES,
            lambda code: code in IMMDT_OPCODES, lambda code: code in DATA_OPCODES]
        m.d.comb += Cat(ext_words, op).eq(Cat(*[_lookup(opcode, column) for column in columns]))
        is_ack = opcode == RC_ACKNOWLEDGE
        kind = Mux(tver != 0, PacketKind.ROCE_OTHER,
                   Mux(op.data, PacketKind.DATA,
                       Mux(is_ack & (syndrome[5:] == 0), PacketKind.ACK,
                           Mux(is_ack & (syndrome == NAK_PSN_SEQUENCE_ERROR), PacketKind.NACK,
                               PacketKind.ROCE_OTHER))))

        # The LAPS header follows the UDP header in the same slice. An anchor beyond the header's count is cleared
        # here (a function of the count byte alone); the rest of the masking waits for the LAPS decision.
        laps_hdr = _window(hdr, 8, _LAPS_MAX_BYTES)
        laps_count = _byte(laps_hdr, 0)[:4]
        laps_anchors = Cat(*[Mux(laps_count > i, _be(laps_hdr, LAPS_FIXED_BYTES + 4 * i, 4), 0)
                             for i in range(LAPS_MAX_ANCHORS)])

        p5_valid = Signal()
        p5 = Signal(data.StructLayout({
            "udp_sport": 16, "udp_dport": 16, "udp_len": 16, "udp_csum": 16,
            "opcode": 8, "bth_resv": 8, "dqpn": PSN_BITS, "psn": PSN_BITS, "ackreq": 1, "syndrome": 8,
            "msn": PSN_BITS, "kind": PacketKind, "ext_words": 3, "aeth": 1, "reth": 1, "immdt": 1,
            "port_ok": 1, "len_ok": 1, "len_fits": len(_EXT_CHOICES), "icrc_off": 16, "bth_off": 7, "l4": 7,
            "l3sel": 2,
            "laps_port_ok": 1, "laps_fits": LAPS_MAX_ANCHORS + 1, "laps_flags": 8, "laps_sr_idx": 8,
            "laps_pid": 16, "laps_time": 48, "laps_anchors": LAPS_MAX_ANCHORS * LAPS_ANCHOR_BITS,
        }), reset_less=True)
        p5_flags = Signal.like(p4.flags)
        p5_src = Signal(128, reset_less=True)
        p5_dst = Signal(128, reset_less=True)
        p5_common = Signal.like(p4.common)
        with m.If(men):
            m.d.sync += [
                p5_valid.eq(p4.valid),
                p5.udp_sport.eq(_be(hdr, 0, 2)),
                p5.udp_dport.eq(_be(hdr, 2, 2)),
                p5.udp_len.eq(udp_len),
                p5.udp_csum.eq(_be(hdr, 6, 2)),
                p5.opcode.eq(opcode),
                p5.bth_resv.eq(_byte(hdr, 12)),
                p5.dqpn.eq(_be(hdr, 13, 3)),
                p5.psn.eq(_be(hdr, 17, 3)),
                p5.ackreq.eq(_byte(hdr, 16)[7]),
                p5.syndrome.eq(syndrome),
                p5.msn.eq(_be(hdr, 21, 3)),
                p5.kind.eq(kind),
                p5.ext_words.eq(ext_words),
                p5.aeth.eq(op.aeth),
                p5.reth.eq(op.reth),
                p5.immdt.eq(op.immdt),
                p5.port_ok.eq(_be(hdr, 2, 2) == ROCE_PORT),
                p5.len_ok.eq(udp_len <= p4.ip_pl),
                # The UDP length against BTH, extension headers and ICRC for each header length an opcode can
                # have, chosen by the opcode in the next stage: a table lookup then a compare is too deep.
                p5.len_fits.eq(Cat(*[udp_len >= 8 + 12 + 4 * words + 4 for words in _EXT_CHOICES])),
                p5.icrc_off.eq(p4.l4m4 + udp_len),
                p5.bth_off.eq(p4.udp_end),
                p5.l4.eq(p4.l4),
                p5.l3sel.eq(p4.l3sel),
                p5.laps_port_ok.eq(_be(hdr, 2, 2) == self._laps_port),
                # The UDP length against each LAPS header length (0 to 4 anchors), chosen by the count in the
                # next stage, as len_fits is by the opcode.
                p5.laps_fits.eq(Cat(*[udp_len >= 8 + LAPS_FIXED_BYTES + 4 * k
                                      for k in range(LAPS_MAX_ANCHORS + 1)])),
                p5.laps_flags.eq(_byte(laps_hdr, 0)),
                p5.laps_sr_idx.eq(_byte(laps_hdr, 1)),
                p5.laps_pid.eq(_be(laps_hdr, 2, 2)),
                p5.laps_time.eq(_be(laps_hdr, 4, 6)),
                p5.laps_anchors.eq(laps_anchors),
                p5_flags.eq(p4.flags),
                p5_flags.truncated.eq(p4.flags.truncated |
                                      ((p4.flags.ipv4 | p4.flags.ipv6) & p4.ip_cut)),
                p5_src.eq(p4.src),
                p5_dst.eq(p4.dst),
                p5_common.eq(p4.common),
            ]
        return SimpleNamespace(valid=p5_valid, fields=p5, flags=p5_flags, src=p5_src, dst=p5_dst, common=p5_common)

    def _decision_stage(self, m, men, p5):
        """Stage 5, the decisions: RoCEv2 and LAPS, ``kind``, every field masked by the flag of its header; the flow
        hash's partial XORs (CRC-16 over up to 35 bytes is linear over GF(2): XOR trees in chunks of 36 inputs).

        Registers ``p6``: the item but for ``flow_hash`` (``p6.item``), "IPv6", and per hash bit the chunk XORs
        shared by both families and those of IPv6 and IPv4 alone (``p6.hash_parts``). One cycle of ``latency``.
        """
        f, flags = p5.fields, p5.flags
        roce = Signal()
        ip_found = Signal()
        ext_fits = Signal()
        with m.Switch(f.ext_words):
            for index, words in enumerate(_EXT_CHOICES):
                with m.Case(words):
                    m.d.comb += ext_fits.eq(f.len_fits[index])
        m.d.comb += [
            roce.eq(flags.udp & ~flags.truncated & f.port_ok & f.len_ok & ext_fits),
            ip_found.eq(flags.ipv4 | flags.ipv6),
        ]
        # LAPS: the same UDP rules as RoCEv2 make a candidate; its count chooses the UDP length compare, and a
        # count above LAPS_MAX_ANCHORS chooses none (malformed).
        laps_candidate = Signal()
        laps_fits = Signal()
        laps = Signal()
        with m.Switch(f.laps_flags[:4]):
            for k in range(LAPS_MAX_ANCHORS + 1):
                with m.Case(k):
                    m.d.comb += laps_fits.eq(f.laps_fits[k])
        m.d.comb += [
            laps_candidate.eq(flags.udp & ~flags.truncated & f.laps_port_ok & f.len_ok),
            laps.eq(laps_candidate & laps_fits),
        ]
        aeth = roce & f.aeth
        udp = flags.udp
        hash_parts = _flow_hash_parts(p5.src, p5.dst, f.dqpn)

        p6_valid = Signal()
        p6 = Signal(PacketMeta(), reset_less=True)
        p6_v6 = Signal(reset_less=True)
        p6_parts = [[Signal(len(chunks), name=f"p6_hash{bit}_{which}", reset_less=True)
                     for which, chunks in zip(("shared", "v6", "v4"), parts)]
                    for bit, parts in enumerate(hash_parts)]
        with m.If(men):
            m.d.sync += [
                p6_valid.eq(p5.valid),
                p6.kind.eq(Mux(roce, f.kind.as_value(), PacketKind.OTHER.value)),
                p6.tag.eq(p5.common.tag),
                p6.frame_len.eq(p5.common.frame_len),
                p6.short.eq(p5.common.short),
                p6.truncated.eq(flags.truncated),
                p6.vlans.eq(p5.common.vlans),
                p6.ipv4.eq(flags.ipv4),
                p6.ipv6.eq(flags.ipv6),
                p6.frag.eq(flags.frag),
                p6.udp.eq(udp),
                p6.roce.eq(roce),
                p6.aeth.eq(aeth),
                p6.reth.eq(roce & f.reth),
                p6.immdt.eq(roce & f.immdt),
                p6.l3_off.eq(Mux(ip_found, 14 + 4 * f.l3sel, 0)),
                p6.l4_off.eq(Mux(ip_found, f.l4, 0)),
                p6.bth_off.eq(Mux(roce, f.bth_off, 0)),
                p6.icrc_off.eq(Mux(roce, f.icrc_off, 0)),
                p6.src_ip.eq(Mux(ip_found, p5.src, 0)),
                p6.dst_ip.eq(Mux(ip_found, p5.dst, 0)),
                p6.udp_sport.eq(Mux(udp, f.udp_sport, 0)),
                p6.udp_dport.eq(Mux(udp, f.udp_dport, 0)),
                p6.udp_len.eq(Mux(udp, f.udp_len, 0)),
                p6.udp_csum.eq(Mux(udp, f.udp_csum, 0)),
                p6.opcode.eq(Mux(roce, f.opcode, 0)),
                p6.dqpn.eq(Mux(roce, f.dqpn, 0)),
                p6.bth_resv.eq(Mux(roce, f.bth_resv, 0)),
                p6.psn.eq(Mux(roce, f.psn, 0)),
                p6.ackreq.eq(roce & f.ackreq),
                p6.syndrome.eq(Mux(aeth, f.syndrome, 0)),
                p6.msn.eq(Mux(aeth, f.msn, 0)),
                p6.laps.eq(laps),
                p6.laps_bad.eq(laps_candidate & ~laps_fits),
                p6.laps_probe.eq(laps & f.laps_flags[7]),
                p6.laps_ack.eq(laps & f.laps_flags[6]),
                p6.laps_count.eq(Mux(laps, f.laps_flags[:3], 0)),
                p6.laps_sr_idx.eq(Mux(laps, f.laps_sr_idx, 0)),
                p6.laps_pid.eq(Mux(laps, f.laps_pid, 0)),
                p6.laps_time.eq(Mux(laps, f.laps_time, 0)),
                p6.laps_anchors.eq(Mux(laps, f.laps_anchors, 0)),
                p6.laps_off.eq(Mux(laps, f.bth_off, 0)),   # the byte after the UDP header, as the BTH's
                p6_v6.eq(flags.ipv6),
            ]
            for regs, parts in zip(p6_parts, hash_parts):
                for reg, chunks in zip(regs, parts):
                    if chunks:
                        m.d.sync += reg.eq(Cat(*chunks))
        return SimpleNamespace(valid=p6_valid, item=p6, v6=p6_v6, hash_parts=p6_parts)

    def _flow_hash_stage(self, m, men, p6):
        """Stage 6, the flow hash and the output register: per hash bit, the chunk XORs of the frame's family and
        the shared ones XORed with the family's constant (0 unless ``roce``).

        Registers ``meta`` (``valid`` and the item with its ``flow_hash``). One cycle of ``latency``.
        """
        meta = self.meta
        _, _, k6, k4 = _crc16_columns()
        flow_hash = Signal(16)
        for bit, (shared, only6, only4) in enumerate(p6.hash_parts):
            k = Mux(p6.v6, k6 >> bit & 1, k4 >> bit & 1)
            family = Mux(p6.v6, only6.xor() if len(only6) else 0, only4.xor() if len(only4) else 0)
            total_xor = k ^ family ^ (shared.xor() if len(shared) else 0)
            m.d.comb += flow_hash[bit].eq(p6.item.roce & total_xor)
        with m.If(men):
            m.d.sync += [
                meta.valid.eq(p6.valid),
                meta.payload.eq(p6.item),
                meta.payload.flow_hash.eq(flow_hash),
            ]
