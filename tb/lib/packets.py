"""Real RoCEv2 packets for the testbenches: scapy builders, a byte-level parser model and a QP classifier model.

Until lbpipe has its packet parser, classifier and deparser stages, tests build Ethernet frames with scapy and turn
them into block metadata here, the way those stages will:

* :func:`roce_data`, :func:`roce_ack`, :func:`roce_nak`, :func:`roce_cnp` build Ether / [802.1Q] / IPv4 or IPv6 /
  UDP (destination port 4791) / BTH / extension headers / payload / ICRC frames; scapy computes the ICRC.
* :func:`classify` is the parser model: it reads the frame bytes (not scapy's dissection, so it checks the builders
  rather than echoing them) and returns the metadata fields the blocks take.
* :class:`QpClassifier` is the model of the exact-match QP classifier that will sit in front of Themis-D.
* :func:`themis_d_item` and :func:`themis_s_item` give the blocks' input items (dicts for a trace).
* :func:`icrc` and :func:`rewrite_udp_sport` are the deparser's side: the ICRC computed from the bytes, and the
  UDP source port rewrite of Themis-S applied with an incremental ICRC (and UDP checksum) update.
* :class:`LapsHeader` and :func:`laps_frame` build LAPS frames (LAPS, IEEE ToN, section III-B) in lbpipe's UDP shim
  encapsulation (docs/packet_io.md): Ether / [tags] / IPv4 or IPv6 / UDP (destination port 49573 by default) /
  LAPS header / payload.

Choices (where neither the specification nor the brief fixes them):

* **RETH and ImmDt are our own scapy layers.** ``scapy.contrib.roce`` has BTH and AETH only. :class:`RETH` (virtual
  address 64, R_Key 32, DMA length 32) and :class:`ImmDt` (32) are bound after BTH for the opcodes that carry them,
  so scapy dissects our frames too. The bindings are added to scapy's global tables at import; scapy binds nothing
  for these opcodes itself, so nothing it does changes.
* **Frames carry no Ethernet FCS** (an AXI4-Stream from a MAC has it stripped). Bytes after the IP packet (Ethernet
  padding of short frames) are ignored.
* **One 802.1Q tag (TPID 0x8100) is parsed.** A second tag, or an 802.1ad (0x88A8) or 0x9100 outer tag, makes the
  frame ``OTHER``.
* **IPv4 and IPv6.** IPv4 options are skipped; IPv4 fragments (MF set or a non-zero offset) are ``OTHER`` (RoCEv2
  sets DF). IPv6 must carry UDP directly (next header 17): extension headers make the frame ``OTHER``.
  ``src_ip``/``dst_ip`` are the addresses as integers, ``ip_version`` says which family.
* **Strict lengths.** A frame is RoCEv2 only if the bytes back every length field: the IP packet is wholly in the
  frame, the UDP length fits the IP payload, and the UDP payload holds the BTH, the opcode's extension headers and
  the 4-byte ICRC. A frame cut anywhere, in the headers or in the payload, is ``OTHER``. (A streaming parser that
  emits metadata at the end of the headers must mark the item bad at ``tlast`` instead; this model decides on the
  whole frame.) Checksums and the ICRC are not verified, as a switch does not verify them.
* **Kinds** (:class:`lbpipe.hdl.lib.meta.PacketKind`): ``DATA`` is an RC request that the responder orders by PSN
  (SEND opcodes 0x00 to 0x05 and 0x16, 0x17 with invalidate; RDMA WRITE 0x06 to 0x0B; RDMA READ request 0x0C).
  ``ACK`` is RC ACKNOWLEDGE (0x11) with AETH syndrome type 0b000; ``NACK`` is RC ACKNOWLEDGE with syndrome exactly
  0x60 (NAK, PSN sequence error). Everything else on UDP port 4791 is ``ROCE_OTHER``: CNP (0x81), RNR NAK and other
  NAK codes, read responses, atomics and atomic acknowledges, UC and UD opcodes, any opcode whose BTH TVer is not 0
  (receivers drop those). Non-RoCE frames, and malformed or truncated ones, are ``OTHER``; ``classify`` never raises
  on frame contents.
* **OTHER items are all zero** except ``kind``: the blocks pass them untouched, so no field is defined for them.
* **The flow hash** is CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, no reflection, no final XOR;
  Python's ``binascii.crc_hqx(data, 0xFFFF)``; check value 0x29B1 for ``b"123456789"``) over the source address,
  the destination address (4 or 16 bytes each, network order) and the 24-bit destination QPN (3 bytes, big
  endian). It leaves out the UDP source port, so Themis-S's rewrite of the port does not change it, and it is a
  cheap function in hardware (16 flip-flops and an XOR tree per input byte).
"""

import binascii
import ipaddress
import struct
import zlib
from collections import namedtuple

import scapy.contrib.roce as _scapy_roce
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.fields import (BitField, BitFieldLenField, ByteField, FieldListField, IntField, ShortField, XIntField,
                          XLongField)
from scapy.layers.inet import IP, UDP, IPOption_NOP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.packet import Packet, Raw, bind_layers

from lbpipe.hdl.lib.meta import PSN_BITS, TAG_BITS, PacketKind

__all__ = [
    "ROCE_PORT", "RC_SEND_ONLY", "RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST",
    "RC_RDMA_WRITE_ONLY", "RC_RDMA_READ_REQUEST", "RC_ACKNOWLEDGE", "CNP", "NAK_PSN_SEQUENCE_ERROR",
    "RETH", "ImmDt", "LAPS_PORT", "LapsHeader",
    "roce_data", "roce_ack", "roce_nak", "roce_cnp", "laps_frame", "sized_data", "mixed_roce_frames",
    "classify", "flow_hash", "icrc", "rewrite_udp_sport",
    "QpClassifier", "QpEntry", "themis_d_item", "themis_s_item",
]

#: RoCEv2's UDP destination port.
ROCE_PORT = 4791
#: The UDP destination port lbpipe carries LAPS on by default (RFC 6335 dynamic/private range).
LAPS_PORT = 49573

RC_SEND_ONLY = 0x04
RC_RDMA_WRITE_FIRST = 0x06
RC_RDMA_WRITE_MIDDLE = 0x07
RC_RDMA_WRITE_LAST = 0x08
RC_RDMA_WRITE_ONLY = 0x0A
RC_RDMA_READ_REQUEST = 0x0C
RC_ACKNOWLEDGE = 0x11
CNP = 0x81

#: AETH syndrome of a NAK with code *PSN sequence error*: the only NAK Themis-D handles.
NAK_PSN_SEQUENCE_ERROR = 0x60

_PSN_MASK = (1 << PSN_BITS) - 1
_ETH_VLAN = 0x8100
_ETH_OUTER_TAGS = (0x8100, 0x88A8, 0x9100)
_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_IP_UDP = 17
_BTH_LEN = 12
_ICRC_LEN = 4

# The opcode table is written here from outside sources, apart from the one lbpipe.protocol gives the RTL and the
# golden models, so the tests can catch an error in either: the names are scapy's BTH opcode names, plus the two RC
# SEND-with-invalidate opcodes scapy lacks, as Linux's include/rdma/ib_pack.h lists them (0x15 is reserved there).
_OPCODE_NAMES = dict(_scapy_roce._bth_opcodes)
_OPCODE_NAMES.update({0x16: "RC_SEND_LAST_WITH_INVALIDATE", 0x17: "RC_SEND_ONLY_WITH_INVALIDATE"})


def _ext_len(name):
    """Bytes of extension headers after the BTH for the opcode called ``name``, by the rules of IBA vol. 1 table 38:
    RETH 16 on RDMA WRITE FIRST/ONLY and READ request, ImmDt 4 on "with immediate", IETH 4 on "with invalidate",
    AETH 4 on ACKNOWLEDGE and READ RESPONSE FIRST/LAST/ONLY, AtomicAckETH 8 more on the atomic acknowledge,
    AtomicETH 28 on COMPARE SWAP and FETCH ADD, DETH 8 on UD; a CNP carries 16 reserved bytes."""
    if name == "CNP":
        return 16
    op = name.split("_", 1)[1]
    size = 8 if name.startswith("UD_") else 0
    if op.startswith(("RDMA_WRITE_FIRST", "RDMA_WRITE_ONLY")) or op == "RDMA_READ_REQUEST":
        size += 16
    if op.endswith("WITH_IMMEDIATE"):
        size += 4
    if op.endswith("WITH_INVALIDATE"):
        size += 4
    if op in ("ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "RDMA_READ_RESPONSE_FIRST", "RDMA_READ_RESPONSE_LAST",
              "RDMA_READ_RESPONSE_ONLY"):
        size += 4
    if op == "ATOMIC_ACKNOWLEDGE":
        size += 8
    if op in ("COMPARE_SWAP", "FETCH_ADD"):
        size += 28
    return size


# Extension-header bytes by opcode. RD opcodes (0x40 to 0x5F) are left out: no RoCEv2 NIC implements reliable
# datagram, and a parser that places the AETH right after the BTH would misread theirs (it follows an RDETH).
# Unknown opcodes: BTH only.
_EXT_LEN = {op: _ext_len(name) for op, name in _OPCODE_NAMES.items() if not name.startswith("RD_")}

#: RC requests the responder orders by PSN: SEND (with immediate, with invalidate), RDMA WRITE, RDMA READ request.
_DATA_OPCODES = frozenset(op for op, name in _OPCODE_NAMES.items()
                          if name.startswith(("RC_SEND_", "RC_RDMA_WRITE_")) or name == "RC_RDMA_READ_REQUEST")

_RETH_OPCODES = tuple(sorted(op for op, name in _OPCODE_NAMES.items() if not name.startswith("RD_")
                             and ("RDMA_WRITE_FIRST" in name or "RDMA_WRITE_ONLY" in name
                                  or name.endswith("RDMA_READ_REQUEST"))))
_IMM_OPCODES = tuple(sorted(op for op, name in _OPCODE_NAMES.items()
                            if not name.startswith(("RD_", "UD_")) and name.endswith("WITH_IMMEDIATE")))
_IMM_AFTER_RETH = (0x0B, 0x2B)
#: What :func:`roce_data` builds: RC and UC SEND, RDMA WRITE and RC RDMA READ request.
_BUILDABLE_REQUESTS = frozenset(range(0x00, 0x0D)) | frozenset(range(0x20, 0x2C))


class ImmDt(Packet):
    """Immediate Data extension header (4 bytes)."""
    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class RETH(Packet):
    """RDMA Extended Transport Header (16 bytes): virtual address 64, R_Key 32, DMA length 32.

    Bound after :class:`scapy.contrib.roce.BTH` for RDMA WRITE FIRST/ONLY (RC and UC, with and without immediate)
    and RC RDMA READ request; on the WRITE ONLY with immediate opcodes an :class:`ImmDt` follows it.
    """
    name = "RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        IntField("dma_len", 0),
    ]

    def guess_payload_class(self, payload):
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode in _IMM_AFTER_RETH:
            return ImmDt
        return Raw


for _op in _RETH_OPCODES:
    bind_layers(BTH, RETH, opcode=_op)
for _op in _IMM_OPCODES:
    if _op not in _IMM_AFTER_RETH:
        bind_layers(BTH, ImmDt, opcode=_op)


# -- builders ---------------------------------------------------------------------------------------------------------

def _ip_version(address):
    return ipaddress.ip_address(address).version


def _headers(src_ip, dst_ip, sport, *, src_mac, dst_mac, vlan, tos, ttl, ip_id, df, udp_chksum):
    if _ip_version(src_ip) != _ip_version(dst_ip):
        raise ValueError(f"source {src_ip} and destination {dst_ip} are not the same IP version")
    if not 0 <= sport <= 0xFFFF:
        raise ValueError(f"UDP source port {sport} does not fit 16 bits")
    l2 = Ether(src=src_mac, dst=dst_mac)
    if vlan is not None:
        l2 = l2 / Dot1Q(vlan=vlan)
    if _ip_version(src_ip) == 4:
        l3 = IP(src=str(src_ip), dst=str(dst_ip), tos=tos, ttl=ttl, id=ip_id, flags="DF" if df else 0)
    else:
        l3 = IPv6(src=str(src_ip), dst=str(dst_ip), tc=tos, hlim=ttl)
    return l2 / l3 / UDP(sport=sport, dport=ROCE_PORT, chksum=udp_chksum)


def _bth(opcode, dqpn, psn, *, pkey, fecn, becn, ackreq, solicited=0, padcount=0):
    if not 0 <= dqpn <= _PSN_MASK:
        raise ValueError(f"destination QPN {dqpn:#x} does not fit 24 bits")
    if not 0 <= psn <= _PSN_MASK:
        raise ValueError(f"PSN {psn:#x} does not fit 24 bits")
    return BTH(opcode=opcode, solicited=solicited, padcount=padcount, pkey=pkey, fecn=fecn, becn=becn,
               dqpn=dqpn, ackreq=ackreq, psn=psn)


_DEFAULTS = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", vlan=None, tos=0x02, ttl=64, ip_id=0,
                 df=True, udp_chksum=0)
_BTH_DEFAULTS = dict(pkey=0xFFFF, fecn=0, becn=0)


def _split_options(options):
    l2 = dict(_DEFAULTS)
    bth = dict(_BTH_DEFAULTS)
    for name, value in options.items():
        if name in l2:
            l2[name] = value
        elif name in bth:
            bth[name] = value
        else:
            raise TypeError(f"unknown option {name!r}; the builders take {sorted(l2) + sorted(bth)}")
    return l2, bth


_OPTIONS_DOC = """\
src_mac, dst_mac : str
        Ethernet addresses (they are not covered by the ICRC).
    vlan : int or None
        802.1Q VLAN ID of one tag, or no tag.
    tos : int
        IPv4 TOS (IPv6 traffic class); the default 0x02 is ECT(0), as in the reference vectors.
    ttl : int
        IPv4 TTL (IPv6 hop limit).
    ip_id : int
        IPv4 identification.
    df : bool
        IPv4 don't-fragment flag.
    udp_chksum : int or None
        UDP checksum; 0 (the default) as RoCEv2 senders send it over IPv4, None to have scapy compute it.
    pkey, fecn, becn : int
        BTH partition key and congestion bits."""


def _options_doc(function):
    """Put the options every builder takes into its docstring, at ``{options}``."""
    function.__doc__ = function.__doc__.replace("{options}", _OPTIONS_DOC)
    return function


@_options_doc
def roce_data(src_ip, dst_ip, sport, dqpn, psn, opcode=RC_RDMA_WRITE_ONLY, payload_len=None, *, va=0, rkey=0,
              dma_len=None, imm=0, ackreq=0, solicited=0, **options):
    """A RoCEv2 request: SEND, RDMA WRITE or RDMA READ request, with scapy computing the ICRC.

    Parameters
    ----------
    src_ip, dst_ip : str
        IPv4 or IPv6 addresses (both the same family).
    sport : int
        UDP source port (the ECMP entropy RoCEv2 NICs derive from the QP).
    dqpn : int
        Destination QP number, 24 bits.
    psn : int
        Packet sequence number, 24 bits.
    opcode : int
        An RC or UC SEND or RDMA WRITE opcode (0x00 to 0x0B, 0x20 to 0x2B) or RC RDMA READ request (0x0C). RETH and
        ImmDt are added as the opcode requires.
    payload_len : int or None
        Payload bytes; None means 64, or 0 for a READ request (which carries none). The payload is padded to a
        multiple of 4 bytes and the BTH PadCnt set.
    va, rkey, dma_len : int
        RETH fields; ``dma_len`` defaults to ``payload_len``.
    imm : int
        Immediate data, for the opcodes with immediate.
    ackreq, solicited : int
        BTH AckReq and SE bits.
    {options}

    Returns
    -------
    scapy.packet.Packet

    Raises
    ------
    ValueError
        For an opcode that is not such a request, a payload on a READ request, or fields that do not fit.
    """
    if opcode not in _BUILDABLE_REQUESTS:
        raise ValueError(f"opcode {opcode:#04x} is not a SEND, RDMA WRITE or RC RDMA READ request")
    if payload_len is None:
        payload_len = 0 if opcode == RC_RDMA_READ_REQUEST else 64
    if opcode == RC_RDMA_READ_REQUEST and payload_len:
        raise ValueError("an RDMA READ request carries no payload")
    if payload_len < 0:
        raise ValueError(f"payload_len must be at least 0, not {payload_len}")
    l2, bth_opts = _split_options(options)
    padcount = -payload_len % 4
    pkt = _headers(src_ip, dst_ip, sport, **l2) / _bth(opcode, dqpn, psn, ackreq=ackreq, solicited=solicited,
                                                       padcount=padcount, **bth_opts)
    if opcode in _RETH_OPCODES:
        pkt = pkt / RETH(va=va, rkey=rkey, dma_len=payload_len if dma_len is None else dma_len)
    if opcode in _IMM_OPCODES:
        pkt = pkt / ImmDt(imm=imm)
    body = bytes((psn + i) & 0xFF for i in range(payload_len)) + bytes(padcount)
    if body:
        pkt = pkt / Raw(body)
    return pkt


@_options_doc
def roce_ack(src_ip, dst_ip, sport, dqpn, psn, msn=0, syndrome=0x00, **options):
    """An RC ACKNOWLEDGE with an ACK syndrome (AETH type 0b000), with scapy computing the ICRC.

    Parameters
    ----------
    src_ip, dst_ip, sport, dqpn, psn
        As for :func:`roce_data`; ``psn`` is the PSN acknowledged.
    msn : int
        AETH message sequence number, 24 bits.
    syndrome : int
        AETH syndrome, type 0b000 (low 5 bits: credit count, 0x1F none). The default 0 is scapy's, and that of the
        reference vectors.
    {options}

    Raises
    ------
    ValueError
        If ``syndrome`` is not an ACK syndrome.
    """
    if not 0 <= syndrome <= 0x1F:
        raise ValueError(f"syndrome {syndrome:#04x} is not an ACK syndrome (type 0b000)")
    return _aeth_packet(src_ip, dst_ip, sport, dqpn, psn, msn, syndrome, options)


@_options_doc
def roce_nak(src_ip, dst_ip, sport, dqpn, psn, msn=0, syndrome=NAK_PSN_SEQUENCE_ERROR, **options):
    """An RC ACKNOWLEDGE with a NAK or RNR NAK syndrome, with scapy computing the ICRC.

    Parameters
    ----------
    src_ip, dst_ip, sport, dqpn
        As for :func:`roce_data`; for a NAK sent by a responder, ``dqpn`` is the requester's QP.
    psn : int
        For a PSN sequence error, the responder's expected PSN (ePSN).
    msn : int
        AETH message sequence number, 24 bits.
    syndrome : int
        AETH syndrome: 0x60 PSN sequence error (the default), 0x61 to 0x63 other NAK codes, 0x20 to 0x3F RNR NAK.
    {options}

    Raises
    ------
    ValueError
        If ``syndrome`` is an ACK syndrome or does not fit 8 bits.
    """
    if not 0x20 <= syndrome <= 0xFF:
        raise ValueError(f"syndrome {syndrome:#04x} is not a NAK or RNR NAK syndrome")
    return _aeth_packet(src_ip, dst_ip, sport, dqpn, psn, msn, syndrome, options)


def _aeth_packet(src_ip, dst_ip, sport, dqpn, psn, msn, syndrome, options):
    if not 0 <= msn <= _PSN_MASK:
        raise ValueError(f"MSN {msn:#x} does not fit 24 bits")
    l2, bth_opts = _split_options(options)
    return (_headers(src_ip, dst_ip, sport, **l2) / _bth(RC_ACKNOWLEDGE, dqpn, psn, ackreq=0, **bth_opts)
            / AETH(syndrome=syndrome, msn=msn))


@_options_doc
def roce_cnp(src_ip, dst_ip, sport, dqpn, **options):
    """A RoCEv2 congestion notification packet (opcode 0x81, BECN set, PSN 0, 16 reserved bytes).

    Parameters
    ----------
    src_ip, dst_ip, sport
        As for :func:`roce_data`.
    dqpn : int
        The QP of the sender of the congested flow.
    {options}
    """
    l2, bth_opts = _split_options(options)
    bth_opts["becn"] = 1
    return _headers(src_ip, dst_ip, sport, **l2) / _bth(CNP, dqpn, 0, ackreq=0, **bth_opts) / CNPPadding()


# -- LAPS -------------------------------------------------------------------------------------------------------------

class LapsHeader(Packet):
    """The LAPS header as lbpipe carries it after a UDP header: 12 fixed bytes, then ``count`` 32-bit anchors.

    Byte 0: ``probe`` (bit 7, the paper's type bit), ``ack`` (bit 6: ACK or probe ACK), 2 reserved bits, ``count``
    (bits 3-0, the number of anchors; filled in from ``anchors`` unless given). Byte 1: ``sr_idx``. Bytes 2-3:
    ``pid``; bytes 4-9: the paper's ``time``, called ``int_time`` here because scapy packets already have a
    ``time`` attribute (the capture time); bytes 10-11 reserved; then the anchors s_1, s_2, ... Give ``count``
    explicitly to build a header whose count disagrees with its anchors (a malformed one).
    """
    name = "LAPS"
    fields_desc = [
        BitField("probe", 0, 1),
        BitField("ack", 0, 1),
        BitField("reserved", 0, 2),
        BitFieldLenField("count", None, 4, count_of="anchors"),
        ByteField("sr_idx", 0),
        ShortField("pid", 0),
        BitField("int_time", 0, 48),
        ShortField("reserved2", 0),
        FieldListField("anchors", [], IntField("anchor", 0), count_from=lambda pkt: pkt.count),
    ]


_TAG_LAYERS = {0x8100: Dot1Q, 0x88A8: Dot1AD}


def laps_frame(src_ip, dst_ip, *, probe=0, ack=0, pid=0, time=0, anchors=(), count=None, sr_idx=0, reserved=0,
               sport=0xC000, dport=LAPS_PORT, udp_len=None, payload=b"", tags=(), ip_options=0,
               src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02"):
    """A LAPS frame: Ether / [tags] / IPv4 or IPv6 / UDP / :class:`LapsHeader` / payload.

    Parameters
    ----------
    src_ip, dst_ip : str
        IPv4 or IPv6 addresses (both the same family).
    probe, ack, pid, time, anchors, count, sr_idx : int or sequence
        LAPS header fields (``time`` goes to :class:`LapsHeader`'s ``int_time``); ``count`` defaults to
        ``len(anchors)``.
    reserved : int
        The 2 reserved bits of byte 0.
    sport, dport : int
        UDP ports; ``dport`` is the LAPS port the parser is built with.
    udp_len : int or None
        UDP length field; None for the datagram's true length.
    payload : bytes
        Bytes after the LAPS header.
    tags : sequence of int
        TPIDs of VLAN tags (0x8100 or 0x88A8), outermost first.
    ip_options : int
        Bytes of IPv4 NOP options (a multiple of 4, at most 40).

    Returns
    -------
    scapy.packet.Packet
    """
    if _ip_version(src_ip) != _ip_version(dst_ip):
        raise ValueError(f"source {src_ip} and destination {dst_ip} are not the same IP version")
    if ip_options % 4 or not 0 <= ip_options <= 40:
        raise ValueError(f"IPv4 options take a multiple of 4 bytes up to 40, not {ip_options}")
    pkt = Ether(src=src_mac, dst=dst_mac)
    for vid, tpid in enumerate(tags, 5):
        pkt = pkt / _TAG_LAYERS[tpid](vlan=vid)
    if _ip_version(src_ip) == 4:
        options = [IPOption_NOP()] * ip_options
        pkt = pkt / IP(src=str(src_ip), dst=str(dst_ip), flags="DF", options=options)
    else:
        if ip_options:
            raise ValueError("IPv6 takes no IPv4 options")
        pkt = pkt / IPv6(src=str(src_ip), dst=str(dst_ip))
    pkt = pkt / UDP(sport=sport, dport=dport, len=udp_len, chksum=0)
    pkt = pkt / LapsHeader(probe=probe, ack=ack, reserved=reserved, count=count, sr_idx=sr_idx, pid=pid,
                           int_time=time, anchors=list(anchors))
    if payload:
        pkt = pkt / Raw(payload)
    return pkt


# -- parser model -----------------------------------------------------------------------------------------------------

class _Malformed(Exception):
    pass


_Layout = namedtuple("_Layout", "l3 ip_version udp bth ext icrc end")


def _frame_bytes(frame):
    if isinstance(frame, Packet):
        return bytes(frame)
    if isinstance(frame, (bytes, bytearray, memoryview)):
        return bytes(frame)
    raise TypeError(f"expected frame bytes or a scapy packet, not {type(frame).__name__}")


def _need(data, end):
    if end > len(data):
        raise _Malformed


def _locate(data):
    """Offsets of the RoCEv2 headers in ``data``, or :class:`_Malformed` when it is not a whole RoCEv2 frame."""
    _need(data, 14)
    (ethertype,) = struct.unpack_from("!H", data, 12)
    off = 14
    if ethertype == _ETH_VLAN:
        _need(data, 18)
        (ethertype,) = struct.unpack_from("!H", data, 16)
        off = 18
    if ethertype in _ETH_OUTER_TAGS:
        raise _Malformed     # a second tag, or a service tag: not parsed
    if ethertype == _ETH_IPV4:
        _need(data, off + 20)
        ver_ihl = data[off]
        ihl = (ver_ihl & 0xF) * 4
        if ver_ihl >> 4 != 4 or ihl < 20:
            raise _Malformed
        (total, frag, proto) = struct.unpack_from("!H2xHxB", data, off + 2)
        if frag & 0x3FFF:    # MF or a fragment offset
            raise _Malformed
        if proto != _IP_UDP or total < ihl + 8:
            raise _Malformed
        end = off + total
        udp = off + ihl
        version = 4
    elif ethertype == _ETH_IPV6:
        _need(data, off + 40)
        if data[off] >> 4 != 6:
            raise _Malformed
        (plen, nexthdr) = struct.unpack_from("!HB", data, off + 4)
        if nexthdr != _IP_UDP or plen < 8:
            raise _Malformed
        end = off + 40 + plen
        udp = off + 40
        version = 6
    else:
        raise _Malformed
    _need(data, end)         # the whole IP packet is in the frame; bytes after it are Ethernet padding
    (dport, ulen) = struct.unpack_from("!HH", data, udp + 2)
    if dport != ROCE_PORT or ulen < 8 or udp + ulen > end:
        raise _Malformed
    end = udp + ulen
    bth = udp + 8
    opcode = data[bth] if bth < end else None
    ext = _EXT_LEN.get(opcode, 0)
    icrc_at = bth + _BTH_LEN + ext
    if icrc_at + _ICRC_LEN > end:
        raise _Malformed
    return _Layout(l3=off, ip_version=version, udp=udp, bth=bth, ext=bth + _BTH_LEN, icrc=end - _ICRC_LEN, end=end)


_FIELDS = ("kind", "opcode", "psn", "dqpn", "udp_sport", "src_ip", "dst_ip", "ip_version", "flow_hash", "syndrome",
           "msn")


def _addresses(data, where):
    if where.ip_version == 4:
        return data[where.l3 + 12:where.l3 + 16], data[where.l3 + 16:where.l3 + 20]
    return data[where.l3 + 8:where.l3 + 24], data[where.l3 + 24:where.l3 + 40]


def flow_hash(src_ip, dst_ip, dqpn):
    """The 16-bit flow hash :func:`classify` gives: CRC-16/CCITT-FALSE over source address, destination address and
    the 3-byte destination QPN (see the module docstring).

    Parameters
    ----------
    src_ip, dst_ip : str, int, bytes or ipaddress object
        Both of one family; an ``int`` is taken as IPv4 when below 2**32, so pass IPv6 addresses in another form.
    dqpn : int
        Destination QP number, 24 bits.
    """
    return binascii.crc_hqx(_address_bytes(src_ip) + _address_bytes(dst_ip) + dqpn.to_bytes(3, "big"), 0xFFFF)


def _address_bytes(address):
    if isinstance(address, (bytes, bytearray)):
        return bytes(address)
    return ipaddress.ip_address(address).packed


def classify(frame):
    """The metadata a parser stage gives for one Ethernet frame.

    Parameters
    ----------
    frame : bytes or scapy.packet.Packet
        An Ethernet frame without FCS.

    Returns
    -------
    dict
        ``kind`` (:class:`lbpipe.hdl.lib.meta.PacketKind` value), ``opcode``, ``psn``, ``dqpn``, ``udp_sport``,
        ``src_ip``, ``dst_ip`` (addresses as integers), ``ip_version`` (4 or 6), ``flow_hash`` (16 bits, see
        :func:`flow_hash`), ``syndrome`` and ``msn`` (AETH, for RC ACKNOWLEDGE; else 0). For ``OTHER`` every field
        but ``kind`` is 0. The rules are in the module docstring.

    Raises
    ------
    TypeError
        If ``frame`` is neither bytes nor a scapy packet. Frame contents never raise: a malformed or truncated
        frame is ``OTHER``.
    """
    data = _frame_bytes(frame)
    meta = dict.fromkeys(_FIELDS, 0)
    meta["kind"] = PacketKind.OTHER.value
    try:
        where = _locate(data)
    except _Malformed:
        return meta
    src, dst = _addresses(data, where)
    opcode = data[where.bth]
    tver = data[where.bth + 1] & 0xF
    (dqpn,) = struct.unpack_from("!I", data, where.bth + 4)
    (psn,) = struct.unpack_from("!I", data, where.bth + 8)
    dqpn &= _PSN_MASK
    psn &= _PSN_MASK
    syndrome = msn = 0
    kind = PacketKind.ROCE_OTHER
    if opcode == RC_ACKNOWLEDGE:
        (aeth,) = struct.unpack_from("!I", data, where.ext)
        syndrome, msn = aeth >> 24, aeth & _PSN_MASK
    if tver != 0:
        pass                 # a transport version receivers drop
    elif opcode in _DATA_OPCODES:
        kind = PacketKind.DATA
    elif opcode == RC_ACKNOWLEDGE and syndrome >> 5 == 0:
        kind = PacketKind.ACK
    elif opcode == RC_ACKNOWLEDGE and syndrome == NAK_PSN_SEQUENCE_ERROR:
        kind = PacketKind.NACK
    meta.update(
        kind=kind.value, opcode=opcode, psn=psn, dqpn=dqpn,
        udp_sport=struct.unpack_from("!H", data, where.udp)[0],
        src_ip=int.from_bytes(src, "big"), dst_ip=int.from_bytes(dst, "big"), ip_version=where.ip_version,
        flow_hash=flow_hash(src, dst, dqpn), syndrome=syndrome, msn=msn,
    )
    return meta


# -- deparser model ---------------------------------------------------------------------------------------------------

def _pseudo_packet(data, where):
    """IBA's ICRC input: eight 0xFF bytes, then IP header to the end of the payload with the variant fields set to
    ones (IPv4 TOS, TTL, header checksum; IPv6 traffic class, flow label, hop limit; UDP checksum; BTH FECN, BECN and
    the 6 reserved bits)."""
    p = bytearray(data[where.l3:where.icrc])
    udp = where.udp - where.l3
    bth = where.bth - where.l3
    if where.ip_version == 4:
        p[1] = 0xFF
        p[8] = 0xFF
        p[10:12] = b"\xff\xff"
    else:
        p[0] |= 0x0F
        p[1:4] = b"\xff\xff\xff"
        p[7] = 0xFF
    p[udp + 6:udp + 8] = b"\xff\xff"
    p[bth + 4] = 0xFF
    return b"\xff" * 8 + bytes(p)


def icrc(frame):
    """The ICRC of a RoCEv2 frame computed from its bytes, as transmitted (least significant byte first).

    Independent of scapy's computation; compare with ``frame[-4:]`` (when the frame has no Ethernet padding).

    Raises
    ------
    ValueError
        If the frame is not a whole RoCEv2 frame (:func:`classify` would say ``OTHER``).
    """
    data = _frame_bytes(frame)
    try:
        where = _locate(data)
    except _Malformed:
        raise ValueError("not a whole RoCEv2 frame") from None
    return struct.pack("<I", zlib.crc32(_pseudo_packet(data, where)))


def rewrite_udp_sport(frame, sport_xor):
    """Apply a Themis-S ``udp_sport_xor`` to a frame as a deparser would, without recomputing over the packet.

    The new ICRC comes from the old one by CRC linearity: for equal lengths ``crc(a ^ b) = crc(a) ^ crc(b) ^
    crc(0)``, so the change is the CRC of a zero pseudo-packet holding only ``sport_xor`` at the source port's place,
    a function of ``sport_xor`` and the distance from the port to the end of the packet (a hardware deparser
    applies it with a per-distance matrix; here it is computed directly). A non-zero UDP checksum is updated as RFC
    1624 describes, for the port and for the ICRC, which it covers (so the ICRC must be known first); a zero one
    stays zero.

    Parameters
    ----------
    frame : bytes or scapy.packet.Packet
        A whole RoCEv2 frame.
    sport_xor : int
        Old port XOR new port, 16 bits.

    Returns
    -------
    bytes
        The rewritten frame.

    Raises
    ------
    ValueError
        If the frame is not a whole RoCEv2 frame or ``sport_xor`` does not fit 16 bits.
    """
    data = bytearray(_frame_bytes(frame))
    if not 0 <= sport_xor <= 0xFFFF:
        raise ValueError(f"sport_xor {sport_xor:#x} does not fit 16 bits")
    try:
        where = _locate(bytes(data))
    except _Malformed:
        raise ValueError("not a whole RoCEv2 frame") from None
    old = bytes(data)
    old_port, chksum = struct.unpack_from("!H4xH", data, where.udp)
    struct.pack_into("!H", data, where.udp, old_port ^ sport_xor)
    length = 8 + (where.icrc - where.l3)
    at = 8 + (where.udp - where.l3)
    delta = bytearray(length)
    delta[at:at + 2] = sport_xor.to_bytes(2, "big")
    (old_icrc,) = struct.unpack_from("<I", data, where.icrc)
    new_icrc = old_icrc ^ zlib.crc32(bytes(delta)) ^ zlib.crc32(bytes(length))
    struct.pack_into("<I", data, where.icrc, new_icrc)
    if chksum:
        # The checksum covers the whole UDP payload, so both the port and the ICRC changed under it.
        changed = [(where.udp, 2), (where.icrc, _ICRC_LEN)]
        struct.pack_into("!H", data, where.udp + 6, _checksum_update(chksum, old, data, where.udp, where.end, changed))
    return bytes(data)


def _checksum_update(chksum, old, new, start, end, changed):
    """RFC 1624 eqn. 3, ``HC' = ~(~HC + ~m + m')``, over the 16-bit words that hold the ``changed`` (offset,
    length) byte ranges. Words are counted from ``start`` (the UDP header) up to ``end``, where an odd last byte is
    padded with zero, so a range may sit at any offset. A computed 0 is sent as 0xFFFF (RFC 768)."""
    words = sorted({start + ((at - start) & ~1) for offset, length in changed for at in range(offset, offset + length)})
    total = ~chksum & 0xFFFF
    for at in words:
        m = int.from_bytes(bytes(old[at:min(at + 2, end)]).ljust(2, b"\0"), "big")
        m_new = int.from_bytes(bytes(new[at:min(at + 2, end)]).ljust(2, b"\0"), "big")
        total += (~m & 0xFFFF) + m_new
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF) or 0xFFFF


# -- QP classifier model ----------------------------------------------------------------------------------------------

#: One QP known to the classifier: what a deparser needs to address a compensation NACK too.
QpEntry = namedtuple("QpEntry", "local_ip remote_ip local_qpn remote_qpn index")


def _address(value, version=None):
    if version == 6 and isinstance(value, int):
        return ipaddress.IPv6Address(value)
    return ipaddress.ip_address(value)


class QpClassifier:
    """Test-side model of the exact-match QP classifier in front of Themis-D (docs/themis.md, "QP classification
    is upstream"): it maps a packet's QP to a flow-table index.

    A QP is a pair of local NIC (below this ToR) and remote end. Keys depend on the direction Themis-D handles:

    * ``DATA`` towards the local NIC: (destination address = local, destination QPN = local QPN). A QPN names one
      QP of the NIC that owns the address, so the source is not needed.
    * ``NACK`` (and ``ACK``) from the local NIC: (source = local, destination = remote, destination QPN = remote
      QPN). ACKs hit too, as a header-keyed classifier would; Themis-D passes them whatever the hit.
    * Every other kind misses: Themis-D passes it whatever the hit.

    Members
    -------
    entries : dict
        Index to :class:`QpEntry`.
    """

    def __init__(self):
        self.entries = {}
        self._towards = {}
        self._from = {}

    def add(self, local_ip, remote_ip, local_qpn, remote_qpn, index):
        """Add a QP with flow-table entry ``index``.

        Raises
        ------
        ValueError
            If a QPN does not fit 24 bits, the addresses are of different families, ``index`` is negative, or the
            QP's keys or ``index`` are already in use.
        TypeError
            If ``index`` is not an integer.
        """
        local, remote = _address(local_ip), _address(remote_ip)
        if local.version != remote.version:
            raise ValueError(f"local {local} and remote {remote} are not the same IP version")
        for name, qpn in (("local_qpn", local_qpn), ("remote_qpn", remote_qpn)):
            if not 0 <= qpn <= _PSN_MASK:
                raise ValueError(f"{name} {qpn:#x} does not fit 24 bits")
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"index must be an integer, not {index!r}")
        if index < 0:
            raise ValueError(f"index must be at least 0, not {index}")
        towards, back = (local, local_qpn), (local, remote, remote_qpn)
        if index in self.entries or towards in self._towards or back in self._from:
            raise ValueError(f"QP ({local}, {local_qpn:#x}) <-> ({remote}, {remote_qpn:#x}) or index {index} is "
                             f"already in the classifier")
        self.entries[index] = QpEntry(local, remote, local_qpn, remote_qpn, index)
        self._towards[towards] = index
        self._from[back] = index

    def lookup(self, meta):
        """``(qp_hit, qp)`` for the metadata of one packet (a :func:`classify` dict, or a frame); ``(0, 0)`` on a
        miss."""
        if not isinstance(meta, dict):
            meta = classify(meta)
        kind = meta["kind"]
        if kind == PacketKind.DATA.value:
            index = self._towards.get((_address(meta["dst_ip"], meta["ip_version"]), meta["dqpn"]))
        elif kind in (PacketKind.NACK.value, PacketKind.ACK.value):
            index = self._from.get((_address(meta["src_ip"], meta["ip_version"]),
                                    _address(meta["dst_ip"], meta["ip_version"]), meta["dqpn"]))
        else:
            index = None
        return (0, 0) if index is None else (1, index)


# -- block items ------------------------------------------------------------------------------------------------------

def _meta(pkt):
    return dict(pkt) if isinstance(pkt, dict) else classify(pkt)


def _check_tag(tag):
    if not 0 <= tag < (1 << TAG_BITS):
        raise ValueError(f"tag {tag} does not fit {TAG_BITS} bits")


def sized_data(size, src_ip, dst_ip, sport, dqpn, psn, **options):
    """A RoCEv2 SEND ONLY frame of exactly ``size`` bytes: the largest payload that fits (a multiple of 4), then
    Ethernet trailer bytes up to ``size`` (at least the headers: 58 bytes over IPv4 without a tag)."""
    base = len(roce_data(src_ip, dst_ip, sport, dqpn, psn, opcode=RC_SEND_ONLY, payload_len=0, **options))
    if size < base:
        raise ValueError(f"a RoCEv2 frame with these headers has at least {base} bytes, not {size}")
    frame = bytes(roce_data(src_ip, dst_ip, sport, dqpn, psn, opcode=RC_SEND_ONLY,
                            payload_len=(size - base) // 4 * 4, **options))
    return frame + bytes(size - len(frame))


def themis_d_item(pkt, classifier, tag):
    """The Themis-D input item (``ThemisDItem`` fields) for one frame.

    Parameters
    ----------
    pkt : bytes, scapy.packet.Packet or dict
        The frame, or its :func:`classify` metadata.
    classifier : QpClassifier
        Gives ``qp_hit`` and ``qp``.
    tag : int
        The item's 16-bit tag.

    Returns
    -------
    dict
        ``kind``, ``qp_hit``, ``qp``, ``psn``, ``msn`` (the AETH MSN of a NACK, 0 otherwise), ``tag``.
    """
    _check_tag(tag)
    meta = _meta(pkt)
    qp_hit, qp = classifier.lookup(meta)
    msn = meta["msn"] if meta["kind"] == PacketKind.NACK.value else 0
    return {"kind": meta["kind"], "qp_hit": qp_hit, "qp": qp, "psn": meta["psn"], "msn": msn, "tag": tag}


def themis_s_item(pkt, tag, *, hash_bits=16):
    """The Themis-S input item (``ThemisSItem`` fields) for one frame.

    Parameters
    ----------
    pkt : bytes, scapy.packet.Packet or dict
        The frame, or its :func:`classify` metadata.
    tag : int
        The item's 16-bit tag.
    hash_bits : int
        The block's ``hash_bits``; the 16-bit flow hash is truncated to it (zero-extended above 16).

    Returns
    -------
    dict
        ``kind``, ``psn``, ``flow_hash``, ``udp_sport``, ``tag``.
    """
    _check_tag(tag)
    meta = _meta(pkt)
    return {"kind": meta["kind"], "psn": meta["psn"], "flow_hash": meta["flow_hash"] & ((1 << hash_bits) - 1),
            "udp_sport": meta["udp_sport"], "tag": tag}


def mixed_roce_frames(rng, count, flows, sizes=None, *, shares=(0.72, 0.78, 0.85, 0.9, 0.98)):
    """``count`` frames for a wire pipeline's random tests, each of a flow of ``flows`` ((src, dst, sport, dqpn)
    tuples): RoCEv2 data (SEND ONLY or RDMA WRITE MIDDLE, one in seven with a VLAN tag), data with a non-zero UDP
    checksum (IPv4 flows only), ACKs, CNPs, non-RoCE IPv4 (TCP, or UDP to port 4791 without a BTH) and runts of 1,
    20 or 70 random bytes. ``shares``: the cumulative fractions at which each kind ends, in that order (runts
    after the last). Sizes: payload bytes from ``sizes`` in turn, else drawn from a mix of small and large."""
    from scapy.layers.inet import TCP
    frames = []
    data, csum, ack, cnp, other = shares
    for n in range(count):
        src, dst, sport, dqpn = flows[rng.randrange(len(flows))]
        size = sizes[n % len(sizes)] if sizes else rng.choice([0, 0, 3, 16, 200, 1024, 4096])
        r = rng.random()
        if r < data:
            opts = {"vlan": 5} if rng.random() < 0.15 else {}
            frame = roce_data(src, dst, sport, dqpn, rng.randrange(1 << 24),
                              opcode=rng.choice([RC_SEND_ONLY, RC_RDMA_WRITE_MIDDLE]), payload_len=size, **opts)
        elif r < csum and ":" not in dst:
            frame = roce_data(src, dst, sport, dqpn, 5, payload_len=size, udp_chksum=rng.randrange(1, 1 << 16))
        elif r < ack:
            frame = roce_ack(src, dst, sport, dqpn, 3)
        elif r < cnp:
            frame = roce_cnp(src, dst, sport, dqpn)
        elif r < other:
            frame = Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / \
                rng.choice([TCP(sport=80, dport=1234), UDP(sport=1, dport=4791)]) / Raw(b"y" * size)
        else:
            frame = bytes(rng.randrange(256) for _ in range(rng.choice([1, 20, 70])))
        frames.append(bytes(frame))
    return frames
