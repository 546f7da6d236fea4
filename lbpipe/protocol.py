"""Protocol facts every layer shares: RoCEv2 opcodes and their classes, header lengths, AETH syndromes, port
numbers, and the layout of the LAPS header.

This is the one neutral module below :mod:`lbpipe.hdl` and :mod:`lbpipe.sim`: it holds facts from specifications,
not behaviour, and imports nothing of the project. The RTL and the golden models take their constants from here;
``tests/test_protocol.py`` checks every value against outside sources (scapy's RoCE layers, the InfiniBand opcode
list as Linux ``include/rdma/ib_pack.h`` states it), so a wrong entry here fails a test that does not read it.

Sources: InfiniBand Architecture Specification vol. 1, section 9.2 (BTH), table 38 (opcodes and the extension
headers each carries); annex A17 (RoCEv2: UDP port 4791, the ICRC); DCQCN's CNP (opcode 0x81, 16 reserved bytes).
"""

__all__ = [
    "ROCE_PORT", "ETH_IPV4", "ETH_IPV6", "TPID_OUTER", "TPID_INNER", "IP_UDP",
    "BTH_BYTES", "ICRC_BYTES", "HEADER_BYTES",
    "TRANSPORT_RC", "TRANSPORT_UC", "TRANSPORT_RD", "TRANSPORT_UD", "TRANSPORT_CNP", "transport",
    "OPCODES", "opcode_name", "EXT_HEADERS", "ext_bytes", "RETH_OPCODES", "IMMDT_OPCODES", "AETH_OPCODES",
    "DATA_OPCODES", "RC_ACKNOWLEDGE", "CNP",
    "SYNDROME_TYPE_ACK", "SYNDROME_TYPE_RNR_NAK", "SYNDROME_TYPE_NAK", "NAK_PSN_SEQUENCE_ERROR",
    "LAPS_PORT", "LAPS_FIXED_BYTES", "LAPS_MAX_ANCHORS", "LAPS_ANCHOR_BITS", "LAPS_FIELDS",
]

# -- Ethernet, IP, UDP --------------------------------------------------------------------------------------------

#: RoCEv2's UDP destination port (IBA annex A17).
ROCE_PORT = 4791
ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
#: TPIDs accepted for the outer tag (802.1Q C-tag, 802.1ad S-tag) and the inner one.
TPID_OUTER = (0x8100, 0x88A8)
TPID_INNER = 0x8100
#: IP protocol number of UDP.
IP_UDP = 17

# -- InfiniBand transport headers -----------------------------------------------------------------------------------

BTH_BYTES = 12
ICRC_BYTES = 4
#: Bytes of each extension header that may follow the BTH (IBA vol. 1, 9.3); a CNP carries 16 reserved bytes.
HEADER_BYTES = {"RDETH": 4, "DETH": 8, "RETH": 16, "AtomicETH": 28, "AETH": 4, "AtomicAckETH": 8, "ImmDt": 4,
                "IETH": 4, "CNP": 16}

#: Transport service of an opcode: its top three bits (IBA table 38).
TRANSPORT_RC = 0b000
TRANSPORT_UC = 0b001
TRANSPORT_RD = 0b010
TRANSPORT_UD = 0b011
#: RoCEv2's congestion notification packet takes the first opcode of the 0b100 block.
TRANSPORT_CNP = 0b100


def transport(opcode):
    """The transport-service bits of ``opcode`` (``opcode >> 5``)."""
    return opcode >> 5


# The operations (the low five bits) in the order of IBA table 38, with the headers each carries after the BTH.
# RD packets carry an RDETH first and, for requests, a DETH; UD carries a DETH.
_OPERATIONS = {
    0x00: ("SEND_FIRST", ()),
    0x01: ("SEND_MIDDLE", ()),
    0x02: ("SEND_LAST", ()),
    0x03: ("SEND_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x04: ("SEND_ONLY", ()),
    0x05: ("SEND_ONLY_WITH_IMMEDIATE", ("ImmDt",)),
    0x06: ("RDMA_WRITE_FIRST", ("RETH",)),
    0x07: ("RDMA_WRITE_MIDDLE", ()),
    0x08: ("RDMA_WRITE_LAST", ()),
    0x09: ("RDMA_WRITE_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x0A: ("RDMA_WRITE_ONLY", ("RETH",)),
    0x0B: ("RDMA_WRITE_ONLY_WITH_IMMEDIATE", ("RETH", "ImmDt")),
    0x0C: ("RDMA_READ_REQUEST", ("RETH",)),
    0x0D: ("RDMA_READ_RESPONSE_FIRST", ("AETH",)),
    0x0E: ("RDMA_READ_RESPONSE_MIDDLE", ()),
    0x0F: ("RDMA_READ_RESPONSE_LAST", ("AETH",)),
    0x10: ("RDMA_READ_RESPONSE_ONLY", ("AETH",)),
    0x11: ("ACKNOWLEDGE", ("AETH",)),
    0x12: ("ATOMIC_ACKNOWLEDGE", ("AETH", "AtomicAckETH")),
    0x13: ("COMPARE_SWAP", ("AtomicETH",)),
    0x14: ("FETCH_ADD", ("AtomicETH",)),
    # 0x15 is reserved.
    0x16: ("SEND_LAST_WITH_INVALIDATE", ("IETH",)),
    0x17: ("SEND_ONLY_WITH_INVALIDATE", ("IETH",)),
}
# Which operations each transport defines (IBA table 38).
_RC_OPS = tuple(_OPERATIONS)
_UC_OPS = tuple(range(0x00, 0x0C))
_RD_OPS = tuple(range(0x00, 0x15))
_UD_OPS = (0x04, 0x05)
_RD_REQUESTS = frozenset(range(0x00, 0x0D)) | {0x13, 0x14}

#: Opcode -> (name, extension headers after the BTH, in order), for every opcode a RoCEv2 frame may carry.
#: Names are as scapy and Linux spell them (``RC_SEND_ONLY``, ``UD_SEND_ONLY_WITH_IMMEDIATE``, ``CNP``).
OPCODES = {}
for _op in _RC_OPS:
    OPCODES[(TRANSPORT_RC << 5) | _op] = ("RC_" + _OPERATIONS[_op][0], _OPERATIONS[_op][1])
for _op in _UC_OPS:
    OPCODES[(TRANSPORT_UC << 5) | _op] = ("UC_" + _OPERATIONS[_op][0], _OPERATIONS[_op][1])
for _op in _RD_OPS:
    _rd = ("RDETH", "DETH") if _op in _RD_REQUESTS else ("RDETH",)
    OPCODES[(TRANSPORT_RD << 5) | _op] = ("RD_" + _OPERATIONS[_op][0], _rd + _OPERATIONS[_op][1])
for _op in _UD_OPS:
    OPCODES[(TRANSPORT_UD << 5) | _op] = ("UD_" + _OPERATIONS[_op][0], ("DETH",) + _OPERATIONS[_op][1])
#: Congestion notification packet (RoCEv2 annex A17, DCQCN): 16 reserved bytes after the BTH.
CNP = 0x81
OPCODES[CNP] = ("CNP", ("CNP",))

#: Opcode -> extension headers after the BTH. Opcodes missing here (reserved, manufacturer-specific, XRC) are parsed
#: as BTH only.
EXT_HEADERS = {op: headers for op, (_, headers) in OPCODES.items()}


def opcode_name(opcode):
    """The opcode's name (``"RC_SEND_ONLY"``), or None for an opcode RoCEv2 does not define."""
    entry = OPCODES.get(opcode)
    return entry[0] if entry else None


def ext_bytes(opcode):
    """Bytes of the extension headers ``opcode`` carries after the BTH (0 for an unknown opcode)."""
    return sum(HEADER_BYTES[h] for h in EXT_HEADERS.get(opcode, ()))


RETH_OPCODES = frozenset(op for op, headers in EXT_HEADERS.items() if "RETH" in headers)
IMMDT_OPCODES = frozenset(op for op, headers in EXT_HEADERS.items() if "ImmDt" in headers)
AETH_OPCODES = frozenset(op for op, headers in EXT_HEADERS.items() if "AETH" in headers)

#: RC requests the responder executes in PSN order, which Themis sprays and tracks: SEND (with immediate, with
#: invalidate), RDMA WRITE, RDMA READ request. Atomics are requests too, but a responder may answer a repeated one
#: from its cache, so they are not sprayed.
DATA_OPCODES = frozenset((TRANSPORT_RC << 5) | op for op in _OPERATIONS
                         if _OPERATIONS[op][0].startswith(("SEND_", "RDMA_WRITE_")) or op == 0x0C)
RC_ACKNOWLEDGE = 0x11

#: AETH syndrome types (bits 7:5): ACK (low 5 bits a credit count), RNR NAK (a timer), NAK (a code).
SYNDROME_TYPE_ACK = 0b000
SYNDROME_TYPE_RNR_NAK = 0b001
SYNDROME_TYPE_NAK = 0b011
#: The NAK code *PSN sequence error*: the receiver saw a gap, the one NAK Themis-D validates.
NAK_PSN_SEQUENCE_ERROR = 0x60

# -- LAPS header (lbpipe's UDP shim for LAPS, IEEE ToN section III-B) -------------------------------------------------

#: The default UDP destination port of the LAPS shim (``laps_port``): 49573, in the dynamic/private range of
#: RFC 6335 (49152 to 65535), where no service is registered.
LAPS_PORT = 0xC1A5
#: Bytes of the LAPS header before its anchors.
LAPS_FIXED_BYTES = 12
#: Anchors a LAPS header may carry (the paper's prototype keeps 4 per PIT entry); a larger count is malformed.
LAPS_MAX_ANCHORS = 4
#: Bits of one source-routing anchor.
LAPS_ANCHOR_BITS = 32
#: The LAPS header's fixed fields: name -> (byte offset, first bit from the byte's MSB, width in bits), big-endian.
#: ``inner_port`` holds the UDP destination port the header displaced (LAPS header editor, INSERT).
LAPS_FIELDS = {
    "probe": (0, 0, 1),
    "ack": (0, 1, 1),
    "count": (0, 4, 4),
    "sr_idx": (1, 0, 8),
    "pid": (2, 0, 16),
    "time": (4, 0, 48),
    "inner_port": (10, 0, 16),
}
