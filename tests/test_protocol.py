"""lbpipe.protocol against outside sources: scapy's RoCE layers and the InfiniBand opcode list.

Nothing here reads the table it checks to make an expectation: names come from scapy (``scapy.contrib.roce``) and,
for the opcodes scapy lacks, from Linux's ``include/rdma/ib_pack.h`` as transcribed below; header lengths from
scapy's layers where it has them and otherwise from IBA vol. 1 table 38's rules as the test writes them.
"""

import pytest
import scapy.contrib.roce as scapy_roce
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import UDP

from lbpipe import protocol

# Linux include/rdma/ib_pack.h, the generic operation codes (lower five bits), as the kernel lists them:
#   IB_OPCODE_FETCH_ADD = 0x14, /* opcode 0x15 is reserved */,
#   IB_OPCODE_SEND_LAST_WITH_INVALIDATE = 0x16, IB_OPCODE_SEND_ONLY_WITH_INVALIDATE = 0x17,
# and IB_OPCODE(RC, SEND_LAST_WITH_INVALIDATE), IB_OPCODE(RC, SEND_ONLY_WITH_INVALIDATE) for RC only.
IB_PACK_ONLY = {0x16: "RC_SEND_LAST_WITH_INVALIDATE", 0x17: "RC_SEND_ONLY_WITH_INVALIDATE"}
RESERVED_RC = 0x15


def outside_names():
    names = dict(scapy_roce._bth_opcodes)
    assert not set(names) & set(IB_PACK_ONLY), "scapy now names the invalidate opcodes: drop the transcription"
    names.update(IB_PACK_ONLY)
    return names


def test_every_opcode_name_matches_scapy_and_ib_pack():
    names = outside_names()
    for opcode in range(256):
        assert protocol.opcode_name(opcode) == names.get(opcode), f"opcode {opcode:#04x}"
    assert protocol.opcode_name(RESERVED_RC) is None


def test_transport_classes_match_scapy():
    assert {"RC": protocol.TRANSPORT_RC, "UC": protocol.TRANSPORT_UC, "RD": protocol.TRANSPORT_RD,
            "UD": protocol.TRANSPORT_UD} == {k: v >> 5 for k, v in scapy_roce._transports.items()}
    for opcode, name in outside_names().items():
        prefix = name.split("_")[0]
        if prefix != "CNP":
            assert protocol.transport(opcode) == scapy_roce._transports[prefix] >> 5, name
    assert protocol.CNP == scapy_roce.CNP_OPCODE
    assert protocol.transport(protocol.CNP) == protocol.TRANSPORT_CNP


def _spec_headers(name):
    """Extension headers by IBA vol. 1 table 38's rules, written from the opcode's name alone."""
    if name == "CNP":
        return {"CNP": 16}
    transport, op = name.split("_", 1)
    request = op.startswith(("SEND", "RDMA_WRITE", "RDMA_READ_REQUEST", "COMPARE_SWAP", "FETCH_ADD"))
    out = {}
    if transport == "RD":
        out["RDETH"] = 4
        if request:
            out["DETH"] = 8
    if transport == "UD":
        out["DETH"] = 8
    if op in ("RDMA_WRITE_FIRST", "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RDMA_READ_REQUEST"):
        out["RETH"] = 16
    if op in ("COMPARE_SWAP", "FETCH_ADD"):
        out["AtomicETH"] = 28
    if op in ("ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE") or op in ("RDMA_READ_RESPONSE_" + p for p in ("FIRST", "LAST",
                                                                                                 "ONLY")):
        out["AETH"] = 4
    if op == "ATOMIC_ACKNOWLEDGE":
        out["AtomicAckETH"] = 8
    if op.endswith("WITH_IMMEDIATE"):
        out["ImmDt"] = 4
    if op.endswith("WITH_INVALIDATE"):
        out["IETH"] = 4
    return out


def test_extension_headers_follow_the_spec_rules():
    for opcode, name in outside_names().items():
        expected = _spec_headers(name)
        assert set(protocol.EXT_HEADERS[opcode]) == set(expected), name
        assert protocol.ext_bytes(opcode) == sum(expected.values()), name
    for opcode in set(range(256)) - set(outside_names()):
        assert protocol.ext_bytes(opcode) == 0 and opcode not in protocol.EXT_HEADERS


def test_header_lengths_match_scapy():
    # scapy's BTH carries the 4-byte ICRC as its last field.
    assert len(BTH()) == protocol.BTH_BYTES + protocol.ICRC_BYTES
    assert [f.name for f in BTH.fields_desc][-1] == "icrc"
    assert len(AETH()) == protocol.HEADER_BYTES["AETH"]
    assert len(CNPPadding()) == protocol.HEADER_BYTES["CNP"]
    # scapy binds AETH after RC ACKNOWLEDGE and CNPPadding after the CNP opcode.
    bound = {tuple(fields.items()): cls for fields, cls in BTH.payload_guess}
    assert bound[(("opcode", protocol.RC_ACKNOWLEDGE),)] is AETH
    assert bound[(("opcode", protocol.CNP),)] is CNPPadding


def test_data_opcodes_are_the_rc_requests_ordered_by_psn():
    expected = {op for op, name in outside_names().items()
                if name.startswith(("RC_SEND_", "RC_RDMA_WRITE_")) or name == "RC_RDMA_READ_REQUEST"}
    assert protocol.DATA_OPCODES == expected
    # The regression: SEND ONLY with invalidate is data, the reserved opcode is not.
    assert 0x17 in protocol.DATA_OPCODES and RESERVED_RC not in protocol.DATA_OPCODES
    assert {protocol.RETH_OPCODES, protocol.IMMDT_OPCODES, protocol.AETH_OPCODES} and protocol.RC_ACKNOWLEDGE == 0x11


def test_ports_and_syndromes():
    # scapy dissects UDP destination port 4791 as a BTH.
    udp = UDP(bytes(UDP(dport=protocol.ROCE_PORT) / BTH()))
    assert isinstance(udp.payload, BTH)
    # AETH syndrome (IBA 9.7.5.2.1): bits 7:5 type, 0b000 ACK, 0b001 RNR NAK, 0b011 NAK; NAK code 0 = PSN sequence
    # error, so the byte is 0b011_00000.
    assert (protocol.SYNDROME_TYPE_ACK, protocol.SYNDROME_TYPE_RNR_NAK, protocol.SYNDROME_TYPE_NAK) == (0, 1, 3)
    assert protocol.NAK_PSN_SEQUENCE_ERROR == 0b011_00000
    assert (protocol.ETH_IPV4, protocol.ETH_IPV6, protocol.IP_UDP) == (0x0800, 0x86DD, 17)


@pytest.mark.parametrize("field", sorted(protocol.LAPS_FIELDS))
def test_laps_header_layout_matches_the_scapy_layer(field):
    """The LAPS shim is lbpipe's own format: the test side's scapy layer (written from docs/packet_io.md) must
    place every field where the protocol module says."""
    from lbpipe.tb.lib.packets import LapsHeader
    byte, bit, width = protocol.LAPS_FIELDS[field]
    value = (1 << width) - 1
    # The scapy layer calls time int_time (scapy packets have a time attribute) and bytes 10-11 reserved2 (the
    # header editor keeps the displaced UDP port there).
    scapy_name = {"time": "int_time", "inner_port": "reserved2"}.get(field, field)
    raw = bytes(LapsHeader(**{scapy_name: value}, **({"count": 0} if field != "count" else {})))
    header = int.from_bytes(raw[:protocol.LAPS_FIXED_BYTES], "big")
    shift = protocol.LAPS_FIXED_BYTES * 8 - (byte * 8 + bit) - width
    assert (header >> shift) & value == value
    assert header & ~(value << shift) == 0, f"{field}: other bits set: {raw.hex()}"
