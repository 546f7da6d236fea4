"""Golden model of the packet parser (:class:`lbpipe.hdl.packet.parser.Parser`): one metadata item per Ethernet frame.

Bit-exact twin of the hardware: :func:`parse` of a frame's bytes gives the ``PacketMeta`` fields the parser emits
for it, as a dict of integers. It reads bytes only (no scapy), never reads past the end of the frame, and never
raises on frame contents. The rules, stated once here and implemented identically in the hardware:

**Headers and flags.** The parser walks Ethernet II, up to two VLAN tags, IPv4 (with options) or IPv6, UDP, and
on UDP destination port 4791 the RoCEv2 BTH with the opcode's extension headers, on UDP destination port
``laps_port`` (49573 by default) the LAPS header. A flag (``vlans``, ``ipv4``,
``ipv6``, ``udp``) says a header was *found*: the header before it selected it (EtherType, protocol), it is well
formed (IP version, IHL at least 5) and it lies wholly inside the frame. Fields of a header are reported only with
its flag (``src_ip``/``dst_ip``/``l3_off``/``l4_off`` with ``ipv4`` or ``ipv6``, ``udp_*`` with ``udp``), else 0.

* **Tags**: an outer TPID 0x8100 or 0x88A8, an inner TPID 0x8100. A single 0x88A8 (S-tag) is one tag. A third tag,
  an inner 0x88A8, or any other TPID (0x9100) is an unknown EtherType: the frame is OTHER with ``vlans`` counting
  the tags before it.
* **IPv4**: ``frag`` is set for a fragment (MF set or a non-zero fragment offset); the parser does not look past
  the IP header of a fragment (``udp`` is 0; the first fragment's UDP header describes a datagram the frame does
  not hold). UDP needs protocol 17 and a total length of at least IHL * 4 + 8.
* **IPv6**: the next header must be 17 (UDP) with a payload length of at least 8; extension headers are not
  followed (OTHER). ``l4_off`` is the byte after the fixed 40-byte header whatever the next header.
* ``l4_off`` is the byte after the IP header (IPv4 with options) whatever the protocol, so it is set for TCP too.

**RoCEv2** (``roce``) follows :func:`lbpipe.tb.lib.packets.classify`'s strict lengths: a UDP header on port 4791, the
frame not truncated (so the whole IP packet is in it), the UDP length at most the IP payload length and at least
8 + 12 (BTH) + the opcode's extension headers + 4 (ICRC). Only then are the BTH fields (``opcode``, ``dqpn``,
``psn``, ``ackreq``), ``bth_off``, ``icrc_off``, the extension-header flags (``aeth``, ``reth``, ``immdt``, by opcode),
the AETH fields (``syndrome``, ``msn``, with ``aeth``) and ``flow_hash`` reported; otherwise they are 0 and ``kind``
is OTHER. ``icrc_off`` is ``l4_off + udp_len - 4``: it comes from the UDP length (checked against the IP total or
payload length), not from the frame length, so Ethernet padding after the IP packet does not move it.

**LAPS** (``laps``; IEEE ToN, section III-B, carried as a UDP shim, :mod:`lbpipe.hdl.packet.parser`): the LAPS header
starts right after a UDP header on destination port ``laps_port``. Big-endian, 12 fixed bytes then ``count``
anchors of 4 bytes: byte 0 holds ``probe`` (bit 7, the paper's type bit), ``ack`` (bit 6), 2 reserved bits and
``count`` (bits 3-0); byte 1 ``sr_idx``; bytes 2-3 ``pid``; bytes 4-9 ``time``; bytes 10-11 reserved; then the
anchors. A frame is a LAPS *candidate* under the UDP rules of RoCEv2: a UDP header on ``laps_port``, the frame not
truncated, the UDP length at most the IP payload length. A candidate whose ``count`` is at most 4
(``LAPS_MAX_ANCHORS``) and whose UDP length is at least 8 + 12 + 4 * ``count`` is LAPS: ``laps`` is set with
``laps_probe``, ``laps_ack``, ``laps_count``, ``laps_sr_idx``, ``laps_pid``, ``laps_time``, ``laps_anchors``
(anchor *i* in bits 32i+31:32i, the rest 0) and ``laps_off`` (``l4_off + 8``); every other candidate is
malformed (``laps_bad``, every other LAPS field 0). A frame that is not a candidate has every LAPS field 0, even
on ``laps_port``: a frame cut in its LAPS header is ``truncated`` by the IP packet rule below, and one whose UDP
length exceeds its IP payload has a bad UDP header, not a bad LAPS header. ``kind`` stays OTHER and ``roce`` 0 on
LAPS frames: the two ports differ, so a frame is never both.

**Kind** (:class:`lbpipe.hdl.lib.meta.PacketKind`) exactly as ``classify``: a BTH TVer other than 0 is ROCE_OTHER; RC
requests ordered by PSN (SEND 0x00-0x05, 0x16, 0x17, RDMA WRITE 0x06-0x0B, READ request 0x0C) are DATA; RC
ACKNOWLEDGE (0x11) with syndrome type 0b000 is ACK and with syndrome 0x60 NACK; every other RoCEv2 frame is
ROCE_OTHER and every non-RoCEv2 frame OTHER.

**Truncation** (``truncated``): the frame ends before the end of the Ethernet header, a tag, the IP header (the
first 20 bytes, then IHL * 4; IPv6 40), or the IP packet its header announces (IPv4 total length, IPv6 40 +
payload length). Every header after the IP header lies inside the IP packet, so a frame cut in the UDP header, the
BTH, an extension header or the payload is flagged by the last rule. A truncated frame is never RoCEv2.

**Lengths.** ``frame_len`` is the frame's length in bytes, saturating at 65,535. ``short`` is a frame under 64
bytes (a 60-byte minimum Ethernet frame whose FCS the MAC stripped is short, and is still parsed). The hardware
counts at most 1,023 full beats before a frame's last one (65,536 bytes) and a longer frame's length saturates;
:func:`parse` models that (:func:`hw_length`), which no real Ethernet frame reaches.

**flow_hash**: CRC-16/CCITT-FALSE over the source address, the destination address (4 or 16 bytes each) and the
3-byte destination QPN, as :func:`lbpipe.tb.lib.packets.flow_hash`, for RoCEv2 frames; 0 otherwise.

Where this model differs from ``classify``, which parses at most one 0x8100 tag: frames with two tags, or with one
0x88A8 tag, are parsed (``classify`` says OTHER), and ``syndrome``/``msn`` are reported for every opcode with an
AETH (the read responses and the atomic acknowledge too), not only for RC ACKNOWLEDGE.
"""

import binascii
import struct

from lbpipe.hdl.lib.meta import TAG_BITS, PacketKind
from lbpipe.hdl.packet.parser import check_laps_port, meta_fields
from lbpipe.protocol import (ETH_IPV4, ETH_IPV6, EXT_HEADERS, IP_UDP, LAPS_FIXED_BYTES, LAPS_MAX_ANCHORS, LAPS_PORT,
                             RC_ACKNOWLEDGE, ROCE_PORT, TPID_INNER, TPID_OUTER, TRANSPORT_RD, DATA_OPCODES, ext_bytes,
                             transport)

#: Full beats the hardware counts before a frame's last one (docs/packet_io.md: lengths exact to 65,536 bytes).
MAX_BEATS = 1024

# The opcodes the parser reads extension headers for: every RoCEv2 opcode but reliable datagram's, which no RoCEv2
# NIC implements and whose AETH would follow an RDETH rather than the BTH. RD and unknown opcodes are BTH only.
_PARSED = {op: headers for op, headers in EXT_HEADERS.items() if transport(op) != TRANSPORT_RD}
_EXT_BYTES = {op: ext_bytes(op) for op in _PARSED}
_AETH_OPCODES = frozenset(op for op, headers in _PARSED.items() if "AETH" in headers)
_RETH_OPCODES = frozenset(op for op, headers in _PARSED.items() if "RETH" in headers)
_IMMDT_OPCODES = frozenset(op for op, headers in _PARSED.items() if "ImmDt" in headers)

__all__ = ["parse", "parse_frames", "hw_length", "flow_hash", "EARLY_BYTES"]


def hw_length(length):
    """The frame length the hardware measures: exact up to 65,536 bytes (1,023 full beats and a last one), 65,536
    for any longer frame (``frame_len`` then shows 65,535, its saturation)."""
    if length < 1:
        raise ValueError(f"a frame has at least one byte, not {length}")
    return min(length, MAX_BEATS * 64)


def flow_hash(src, dst, dqpn):
    """CRC-16/CCITT-FALSE of ``src + dst + dqpn.to_bytes(3)`` (address bytes in network order)."""
    return binascii.crc_hqx(bytes(src) + bytes(dst) + dqpn.to_bytes(3, "big"), 0xFFFF)


def _be(data, offset, size):
    return int.from_bytes(data[offset:offset + size], "big")


#: Bytes in the frames whose early item is their late one: the header window completes at the second beat.
EARLY_BYTES = 2 * 64


def parse(frame, tag=0, *, laps_port=LAPS_PORT, early=False, fcs=False):
    """The ``PacketMeta`` item the parser emits for one frame.

    Parameters
    ----------
    frame : bytes-like
        The frame as it travels on the AXI4-Stream (no FCS).
    tag : int
        The item's 16-bit tag (the hardware counts frames from 0 after reset).
    laps_port : int
        The parser's ``laps_port`` parameter.
    early : bool
        The parser's ``early`` parameter: the item is taken from the first two beats. A frame of more than 128 bytes
        is then read as one of unknown, saturated length (65,536 bytes: ``frame_len`` 65,535, ``short`` 0, no cut
        at the end of its IP packet); only the bytes of the header window are read, as always.
    fcs : bool
        The parser's ``fcs`` parameter: the frame's last 4 bytes are its FCS, and every rule (``frame_len`` and
        ``short`` included) reads the frame without them (a frame of 4 bytes or fewer reads as 0 bytes);
        ``frame_len`` still shows 65,535 for a frame whose measured length saturates.

    Returns
    -------
    dict
        Every ``PacketMeta`` field as an integer (``kind`` by value). The rules are in the module docstring.

    Raises
    ------
    TypeError
        If ``frame`` is not bytes-like.
    ValueError
        If ``frame`` is empty or ``tag`` does not fit 16 bits. Frame contents never raise.
    TypeError, ValueError
        If ``laps_port`` is not one the parser takes.
    """
    check_laps_port(laps_port)
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected frame bytes, not {type(frame).__name__}")
    data = bytes(frame)
    if not 0 <= tag < (1 << TAG_BITS):
        raise ValueError(f"tag {tag} does not fit {TAG_BITS} bits")
    measured = MAX_BEATS * 64 if early and len(data) > EARLY_BYTES else hw_length(len(data))
    n = max(measured - 4, 0) if fcs else measured
    # The model reads only bytes the hardware's length says are in the frame.
    data = data[:n]
    meta = dict.fromkeys(meta_fields(), 0)
    meta.update(tag=tag, frame_len=0xFFFF if measured == MAX_BEATS * 64 else n, short=int(n < 64),
                kind=PacketKind.OTHER.value)

    # -- Ethernet and tags
    if n < 14:
        meta["truncated"] = 1
        return meta
    ethertype = _be(data, 12, 2)
    l3 = 14
    if ethertype in TPID_OUTER:
        if n < 18:
            meta["truncated"] = 1
            return meta
        meta["vlans"] = 1
        ethertype = _be(data, 16, 2)
        l3 = 18
        if ethertype == TPID_INNER:
            if n < 22:
                meta["truncated"] = 1
                return meta
            meta["vlans"] = 2
            ethertype = _be(data, 20, 2)
            l3 = 22

    # -- IPv4 / IPv6
    if ethertype == ETH_IPV4:
        if n < l3 + 20:
            meta["truncated"] = 1
            return meta
        version, ihl = data[l3] >> 4, data[l3] & 0xF
        if version != 4 or ihl < 5:
            return meta
        l4 = l3 + 4 * ihl
        if n < l4:
            meta["truncated"] = 1
            return meta
        total = _be(data, l3 + 2, 2)
        ip_end = l3 + total
        ip_payload = total - 4 * ihl
        meta["ipv4"] = 1
        meta["frag"] = int(_be(data, l3 + 6, 2) & 0x3FFF != 0)
        src, dst = data[l3 + 12:l3 + 16], data[l3 + 16:l3 + 20]
        to_udp = data[l3 + 9] == IP_UDP and not meta["frag"]
    elif ethertype == ETH_IPV6:
        if n < l3 + 40:
            meta["truncated"] = 1
            return meta
        if data[l3] >> 4 != 6:
            return meta
        l4 = l3 + 40
        ip_payload = _be(data, l3 + 4, 2)
        ip_end = l4 + ip_payload
        meta["ipv6"] = 1
        src, dst = data[l3 + 8:l3 + 24], data[l3 + 24:l3 + 40]
        to_udp = data[l3 + 6] == IP_UDP
    else:
        return meta
    meta.update(l3_off=l3, l4_off=l4, src_ip=int.from_bytes(src, "big"), dst_ip=int.from_bytes(dst, "big"))
    if n < ip_end:
        meta["truncated"] = 1

    # -- UDP
    if not (to_udp and ip_payload >= 8) or n < l4 + 8:
        return meta
    sport, dport, ulen, csum = struct.unpack_from("!HHHH", data, l4)
    meta.update(udp=1, udp_sport=sport, udp_dport=dport, udp_len=ulen, udp_csum=csum)

    # -- RoCEv2 and LAPS: the whole IP packet is in the frame from here on, and the UDP datagram in the IP packet, so
    # every read below that the UDP length covers is inside the frame.
    if meta["truncated"] or ulen > ip_payload:
        return meta
    if dport == laps_port:
        _laps(meta, data, l4 + 8, ulen)
        return meta
    if dport != ROCE_PORT:
        return meta
    bth = l4 + 8
    if ulen < 8 + 12 + 4:
        return meta
    opcode = data[bth]
    if ulen < 8 + 12 + _EXT_BYTES.get(opcode, 0) + 4:
        return meta
    tver = data[bth + 1] & 0xF
    dqpn = _be(data, bth + 5, 3)
    ackreq = data[bth + 8] >> 7
    psn = _be(data, bth + 9, 3)
    aeth = opcode in _AETH_OPCODES
    syndrome = data[bth + 12] if aeth else 0
    msn = _be(data, bth + 13, 3) if aeth else 0
    if tver != 0:
        kind = PacketKind.ROCE_OTHER
    elif opcode in DATA_OPCODES:
        kind = PacketKind.DATA
    elif opcode == RC_ACKNOWLEDGE and syndrome >> 5 == 0:
        kind = PacketKind.ACK
    elif opcode == RC_ACKNOWLEDGE and syndrome == 0x60:
        kind = PacketKind.NACK
    else:
        kind = PacketKind.ROCE_OTHER
    meta.update(
        kind=kind.value, roce=1, bth_off=bth, icrc_off=l4 + ulen - 4,
        opcode=opcode, dqpn=dqpn, psn=psn, ackreq=ackreq, bth_resv=data[bth + 4],
        aeth=int(aeth), reth=int(opcode in _RETH_OPCODES), immdt=int(opcode in _IMMDT_OPCODES),
        syndrome=syndrome, msn=msn, flow_hash=flow_hash(src, dst, dqpn),
    )
    return meta


def _laps(meta, data, off, ulen):
    """Fill ``meta``'s LAPS fields for a candidate whose LAPS header starts at byte ``off`` (UDP length ``ulen``)."""
    if ulen < 8 + LAPS_FIXED_BYTES:
        # Not even the fixed part is in the datagram: malformed whatever its count byte (which may lie past
        # the frame) says.
        meta["laps_bad"] = 1
        return
    count = data[off] & 0xF
    if count > LAPS_MAX_ANCHORS or ulen < 8 + LAPS_FIXED_BYTES + 4 * count:
        meta["laps_bad"] = 1
        return
    anchors = 0
    for i in range(count):
        anchors |= _be(data, off + LAPS_FIXED_BYTES + 4 * i, 4) << (32 * i)
    meta.update(
        laps=1, laps_probe=data[off] >> 7, laps_ack=data[off] >> 6 & 1, laps_count=count,
        laps_sr_idx=data[off + 1], laps_pid=_be(data, off + 2, 2), laps_time=_be(data, off + 4, 6),
        laps_anchors=anchors, laps_off=off,
    )


def parse_frames(frames, first_tag=0, *, laps_port=LAPS_PORT, early=False, fcs=False):
    """:func:`parse` each frame with the tags the hardware gives a run of frames after reset (counting, wrapping
    at 16 bits)."""
    return [parse(frame, (first_tag + i) % (1 << TAG_BITS), laps_port=laps_port, early=early, fcs=fcs)
            for i, frame in enumerate(frames)]
