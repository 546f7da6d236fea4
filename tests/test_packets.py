"""Real RoCEv2 packets through the Themis blocks: :mod:`lbpipe.tb.lib.packets` (scapy builders, the parser and QP
classifier models, the deparser's ICRC update) and end-to-end runs of Themis-D and Themis-S on items made from real
frames, golden model and RTL.

Expected values come from the reference vectors (shared/reference/README.md), the InfiniBand header layouts, the
Themis paper (001, sections 3.2 to 3.4) and docs/themis.md, worked out by hand; never from running a model.
"""

import binascii
import ipaddress
import random
import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP, IPOption
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.contrib.roce import BTH
from scapy.packet import Raw

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.themis.themis_d import Verdict
from lbpipe.tb.lib.packets import (
    RC_RDMA_READ_REQUEST, RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_LAST, RC_RDMA_WRITE_MIDDLE, RC_RDMA_WRITE_ONLY,
    RC_SEND_ONLY, RETH, QpClassifier, classify, flow_hash, icrc, rewrite_udp_sport, roce_ack, roce_cnp, roce_data,
    roce_nak, themis_d_item, themis_s_item,
)

M = 1 << 24
OTHER, DATA, ACK, NACK, ROCE_OTHER = (k.value for k in PacketKind)

A, B = "10.0.0.1", "10.0.0.2"
#: Explicit addresses: scapy would otherwise look them up (slowly, for IPv6) on the host's network.
ETH = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _ip(text):
    return int(ipaddress.ip_address(text))


def _crc16_ccitt_false(data):
    """Bitwise CRC-16/CCITT-FALSE, independent of binascii."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


# --- reference vectors ---------------------------------------------------------------------------------------------

def _reference_headers(frame):
    """The fields the reference lists: IPv4 10.0.0.1 -> 10.0.0.2, TOS 0x02, TTL 64, DF, id 0, UDP 49152 -> 4791."""
    ver_ihl, tos, _, ident, flags, ttl, proto = struct.unpack_from("!BBHHHBB", frame, 14)
    assert (ver_ihl, tos, ident, flags, ttl, proto) == (0x45, 0x02, 0, 0x4000, 64, 17)
    assert frame[26:34] == bytes([10, 0, 0, 1, 10, 0, 0, 2])
    assert struct.unpack_from("!HH", frame, 34) == (49152, 4791)


def test_reference_icrc_ack():
    """RC ACK dqpn 0x456 PSN 0x10 MSN 1 -> ICRC bytes 68 12 dc eb (AETH syndrome 0, scapy's default)."""
    frame = bytes(roce_ack(A, B, 49152, 0x456, 0x10, msn=1))
    _reference_headers(frame)
    assert frame[42:58] == bytes.fromhex("11 00 ffff 00 000456 00 000010 00 000001")
    assert frame[-4:] == bytes.fromhex("6812dceb")
    assert icrc(frame) == bytes.fromhex("6812dceb")        # our own ICRC agrees with scapy's
    assert len(frame) == 62                                # shorter than 64 bytes, even with the FCS it is 66


def test_reference_icrc_nak():
    """NAK syndrome 0x60 dqpn 0x456 PSN 0x0d -> ICRC bytes 58 b6 8a 48 (with MSN 1, as the ACK vector)."""
    frame = bytes(roce_nak(A, B, 49152, 0x456, 0x0D, msn=1))
    _reference_headers(frame)
    assert frame[42:58] == bytes.fromhex("11 00 ffff 00 000456 00 00000d 60 000001")
    assert frame[-4:] == bytes.fromhex("58b68a48")
    assert icrc(frame) == bytes.fromhex("58b68a48")


def test_icrc_ignores_masked_fields_only():
    """The variant fields (TOS, TTL, UDP checksum, FECN/BECN) do not change the ICRC; the UDP source port does."""
    ref = bytes(roce_ack(A, B, 49152, 0x456, 0x10, msn=1))[-4:]
    assert bytes(roce_ack(A, B, 49152, 0x456, 0x10, msn=1, tos=0xB8, ttl=3, udp_chksum=0x1234, fecn=1,
                          becn=1))[-4:] == ref
    assert bytes(roce_ack(A, B, 49153, 0x456, 0x10, msn=1))[-4:] != ref


@pytest.mark.parametrize("build", [
    lambda: roce_data(A, B, 1, 2, 3, opcode=RC_RDMA_WRITE_FIRST, payload_len=33, udp_chksum=None),
    lambda: roce_data("fd00::1", "fd00::2", 1, 2, 3, opcode=0x0B, payload_len=7, vlan=12),
    lambda: roce_cnp(A, B, 7, 0x456),
    lambda: Ether(**ETH) / IP(src=A, dst=B, options=[IPOption(b"\x01\x01\x01\x01")]) / UDP(sport=1, dport=4791)
            / BTH(opcode=RC_SEND_ONLY, dqpn=5, psn=6) / Raw(b"abcd"),
])
def test_icrc_matches_scapy(build):
    frame = bytes(build())
    assert icrc(frame) == frame[-4:]


# --- flow hash -----------------------------------------------------------------------------------------------------

def test_flow_hash_is_crc16_ccitt_false():
    assert binascii.crc_hqx(b"123456789", 0xFFFF) == 0x29B1 == _crc16_ccitt_false(b"123456789")
    key = bytes([10, 0, 1, 1, 10, 0, 0, 2, 0x00, 0x04, 0x56])
    assert flow_hash("10.0.1.1", "10.0.0.2", 0x456) == _crc16_ccitt_false(key)
    meta = classify(roce_data("10.0.1.1", "10.0.0.2", 0xC000, 0x456, 7))
    assert meta["flow_hash"] == _crc16_ccitt_false(key)
    # Every packet of the QP, whatever its PSN, opcode or UDP source port, has the same hash.
    for psn, sport, op in [(0, 1, RC_RDMA_WRITE_FIRST), (M - 1, 0xFFFF, RC_RDMA_WRITE_LAST), (5, 2, RC_SEND_ONLY)]:
        assert classify(roce_data("10.0.1.1", "10.0.0.2", sport, 0x456, psn, opcode=op))["flow_hash"] == \
            meta["flow_hash"]


# --- classify ------------------------------------------------------------------------------------------------------

SRC, DST, SPORT, DQPN, PSN = "10.0.1.1", "10.0.0.2", 0xC123, 0x456, 0xABCDEF


def _roce(opcode, ext=b"", payload=b"", *, tver=0, psn=PSN):
    """A RoCEv2 frame with any opcode and raw extension headers (for opcodes the builders do not make)."""
    return (Ether(**ETH) / IP(src=SRC, dst=DST) / UDP(sport=SPORT, dport=4791, chksum=0)
            / BTH(opcode=opcode, dqpn=DQPN, psn=psn, version=tver) / Raw(ext + payload))


def _aeth(syndrome, msn=9):
    return bytes([syndrome]) + msn.to_bytes(3, "big")


ROCE_CASES = {
    # DATA: RC SEND, RDMA WRITE, RDMA READ request
    "rc-send-only": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=RC_SEND_ONLY), DATA),
    "rc-send-first": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=0x00), DATA),
    "rc-send-only-imm": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=0x05, payload_len=1), DATA),
    "rc-write-first": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=RC_RDMA_WRITE_FIRST), DATA),
    "rc-write-middle": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=RC_RDMA_WRITE_MIDDLE), DATA),
    "rc-write-last": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=RC_RDMA_WRITE_LAST), DATA),
    "rc-write-only": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=RC_RDMA_WRITE_ONLY), DATA),
    "rc-write-only-imm": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=0x0B, payload_len=0), DATA),
    "rc-read-request": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=RC_RDMA_READ_REQUEST,
                                          dma_len=1 << 20), DATA),
    "rc-send-only-inv": (lambda: _roce(0x16, b"\0" * 4, b"data"), DATA),
    # ACK: AETH syndrome type 0b000
    "ack": (lambda: roce_ack(DST, SRC, SPORT, DQPN, PSN, msn=9), ACK),
    "ack-no-credit": (lambda: roce_ack(DST, SRC, SPORT, DQPN, PSN, msn=9, syndrome=0x1F), ACK),
    # NACK: NAK PSN sequence error only
    "nak-psn-seq": (lambda: roce_nak(DST, SRC, SPORT, DQPN, PSN, msn=9), NACK),
    # ROCE_OTHER
    "cnp": (lambda: roce_cnp(SRC, DST, SPORT, DQPN), ROCE_OTHER),
    "rnr-nak": (lambda: roce_nak(DST, SRC, SPORT, DQPN, PSN, msn=9, syndrome=0x2E), ROCE_OTHER),
    "nak-invalid-request": (lambda: roce_nak(DST, SRC, SPORT, DQPN, PSN, msn=9, syndrome=0x61), ROCE_OTHER),
    "nak-remote-access": (lambda: roce_nak(DST, SRC, SPORT, DQPN, PSN, msn=9, syndrome=0x62), ROCE_OTHER),
    "nak-remote-op": (lambda: roce_nak(DST, SRC, SPORT, DQPN, PSN, msn=9, syndrome=0x63), ROCE_OTHER),
    "reserved-syndrome": (lambda: _roce(0x11, _aeth(0x40)), ROCE_OTHER),
    "read-response-first": (lambda: _roce(0x0D, _aeth(0x00), b"x" * 8), ROCE_OTHER),
    "read-response-middle": (lambda: _roce(0x0E, b"", b"x" * 8), ROCE_OTHER),
    "read-response-only": (lambda: _roce(0x10, _aeth(0x00), b"x" * 8), ROCE_OTHER),
    "atomic-fetch-add": (lambda: _roce(0x14, b"\0" * 28), ROCE_OTHER),
    "atomic-ack": (lambda: _roce(0x12, _aeth(0x00) + b"\0" * 8), ROCE_OTHER),
    "uc-write-only": (lambda: roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=0x2A), ROCE_OTHER),
    "ud-send-only": (lambda: _roce(0x64, b"\0" * 8, b"data"), ROCE_OTHER),
    "tver-1-write": (lambda: _roce(RC_RDMA_WRITE_MIDDLE, b"", b"data", tver=1), ROCE_OTHER),
}


@pytest.mark.parametrize("name", sorted(ROCE_CASES))
def test_classify_roce(name):
    build, kind = ROCE_CASES[name]
    pkt = build()
    meta = classify(pkt)
    assert meta["kind"] == kind
    assert classify(bytes(pkt)) == meta                   # a scapy packet and its bytes classify alike
    psn = 0 if name == "cnp" else PSN
    src, dst = (DST, SRC) if kind in (ACK, NACK) or name.startswith(("rnr", "nak")) else (SRC, DST)
    assert (meta["psn"], meta["dqpn"], meta["udp_sport"], meta["src_ip"], meta["dst_ip"], meta["ip_version"]) == \
        (psn, DQPN, SPORT, _ip(src), _ip(dst), 4)
    assert meta["flow_hash"] == flow_hash(src, dst, DQPN)
    assert meta["opcode"] == bytes(pkt)[42]
    if kind in (ACK, NACK):
        assert meta["msn"] == 9 and meta["syndrome"] == bytes(pkt)[54]


def test_classify_nack_fields():
    """A NAK's BTH PSN is the responder's ePSN; its destination QP is the requester's."""
    meta = classify(roce_nak("10.0.0.2", "10.0.1.1", 0xD000, 0x123, 2, msn=7))
    assert meta == {"kind": NACK, "opcode": 0x11, "psn": 2, "dqpn": 0x123, "udp_sport": 0xD000,
                    "src_ip": _ip("10.0.0.2"), "dst_ip": _ip("10.0.1.1"), "ip_version": 4,
                    "flow_hash": _crc16_ccitt_false(bytes([10, 0, 0, 2, 10, 0, 1, 1, 0, 1, 0x23])),
                    "syndrome": 0x60, "msn": 7}


def test_classify_ipv6():
    meta = classify(roce_data("fd00::1", "fd00::2", SPORT, DQPN, PSN))
    assert (meta["kind"], meta["ip_version"], meta["src_ip"], meta["dst_ip"], meta["psn"]) == \
        (DATA, 6, _ip("fd00::1"), _ip("fd00::2"), PSN)
    key = ipaddress.ip_address("fd00::1").packed + ipaddress.ip_address("fd00::2").packed + DQPN.to_bytes(3, "big")
    assert meta["flow_hash"] == _crc16_ccitt_false(key)


def test_classify_one_vlan_tag():
    """One 802.1Q tag is parsed: the tagged frame gives the untagged frame's metadata."""
    for build in (lambda **kw: roce_data(SRC, DST, SPORT, DQPN, PSN, **kw),
                  lambda **kw: roce_nak(DST, SRC, SPORT, DQPN, PSN, **kw),
                  lambda **kw: roce_data("fd00::1", "fd00::2", SPORT, DQPN, PSN, **kw)):
        tagged = bytes(build(vlan=100))
        assert struct.unpack_from("!HH", tagged, 12) == (0x8100, 100)
        assert classify(tagged) == classify(build())
        assert classify(tagged)["kind"] != OTHER


def test_classify_two_tags_or_service_tag_is_other():
    inner = IP(src=SRC, dst=DST) / UDP(sport=SPORT, dport=4791) / BTH(opcode=RC_SEND_ONLY, dqpn=DQPN, psn=PSN)
    assert classify(Ether(**ETH) / Dot1Q(vlan=1) / Dot1Q(vlan=2) / inner)["kind"] == OTHER
    assert classify(Ether(**ETH) / Dot1AD(vlan=1) / Dot1Q(vlan=2) / inner)["kind"] == OTHER


def test_classify_ipv4_options_and_ethernet_padding():
    pkt = (Ether(**ETH) / IP(src=SRC, dst=DST, options=[IPOption(b"\x01\x01\x01\x01")]) / UDP(sport=SPORT, dport=4791)
           / BTH(opcode=RC_RDMA_WRITE_MIDDLE, dqpn=DQPN, psn=PSN) / Raw(b"abcd"))
    assert bytes(pkt)[14] == 0x46
    assert classify(pkt)["kind"] == DATA and classify(pkt)["psn"] == PSN
    # Bytes after the IP packet (a MAC's padding of a short frame) are not part of it.
    ack = bytes(roce_ack(DST, SRC, SPORT, DQPN, PSN, msn=9))
    assert classify(ack + bytes(12)) == classify(ack)
    assert icrc(ack + bytes(12)) == ack[-4:]


def _tcp():
    return Ether(**ETH) / IP(src=SRC, dst=DST) / TCP(sport=40000, dport=4791) / Raw(b"x" * 20)


OTHER_CASES = {
    "tcp-to-4791": _tcp,
    "udp-dns": lambda: Ether(**ETH) / IP(src=SRC, dst=DST) / UDP(sport=5000, dport=53) / Raw(b"x" * 20),
    "udp-sport-4791": lambda: Ether(**ETH) / IP(src=SRC, dst=DST) / UDP(sport=4791, dport=4792)
                              / BTH(opcode=RC_SEND_ONLY, dqpn=DQPN, psn=PSN),
    "arp": lambda: Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=SRC, pdst=DST),
    "ipv6-tcp": lambda: Ether(**ETH) / IPv6(src="fd00::1", dst="fd00::2") / TCP(dport=4791),
    "ipv6-udp-other": lambda: Ether(**ETH) / IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=1, dport=53)
                              / Raw(b"x" * 20),
    "ipv6-hop-by-hop": lambda: bytes(Ether(**ETH) / IPv6(src="fd00::1", dst="fd00::2", nh=0)
                                     / Raw(bytes([17, 0, 1, 4, 0, 0, 0, 0])
                                           + bytes(UDP(sport=1, dport=4791, len=8 + 16, chksum=0)
                                                   / BTH(opcode=RC_SEND_ONLY, dqpn=DQPN, psn=PSN)))),
    "ipv4-first-fragment": lambda: Ether(**ETH) / IP(src=SRC, dst=DST, flags="MF") / UDP(sport=1, dport=4791)
                                   / BTH(opcode=RC_SEND_ONLY, dqpn=DQPN, psn=PSN) / Raw(b"x" * 64),
    "ipv4-later-fragment": lambda: Ether(**ETH) / IP(src=SRC, dst=DST, frag=8, proto=17) / Raw(b"x" * 64),
    "empty": lambda: b"",
    "13-bytes": lambda: bytes(13),
    "runt-40-bytes": lambda: bytes(random.Random(1).randrange(256) for _ in range(40)),
    "ipv4-bad-version": lambda: bytes(roce_data(SRC, DST, SPORT, DQPN, PSN))[:14] + b"\x55"
                                + bytes(roce_data(SRC, DST, SPORT, DQPN, PSN))[15:],
    "ipv4-ihl-4": lambda: bytes(roce_data(SRC, DST, SPORT, DQPN, PSN))[:14] + b"\x44"
                          + bytes(roce_data(SRC, DST, SPORT, DQPN, PSN))[15:],
}


@pytest.mark.parametrize("name", sorted(OTHER_CASES))
def test_classify_other(name):
    frame = OTHER_CASES[name]()
    meta = classify(frame)
    assert meta["kind"] == OTHER
    assert all(value == 0 for key, value in meta.items() if key != "kind")


def test_frame_shorter_than_64_bytes():
    """Minimum Ethernet frame is 64 bytes with FCS, 60 without. A RoCEv2 ACK is 62 bytes (66 with FCS): a whole
    frame, classified; an ARP request padded to 60 bytes and anything cut below 62 are OTHER."""
    ack = bytes(roce_ack(DST, SRC, SPORT, DQPN, PSN, msn=9))
    assert len(ack) == 62 and classify(ack)["kind"] == ACK
    arp = bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=SRC, pdst=DST))
    assert len(arp) == 42 and classify(arp + bytes(18))["kind"] == OTHER
    assert classify(ack[:60])["kind"] == OTHER


# Offsets (no VLAN tag): Ethernet 0..13, IPv4 14..33, UDP 34..41, BTH 42..53, RETH / AETH from 54.
@pytest.mark.parametrize("where, cut", [
    ("ethernet", 7), ("ethernet-type", 13), ("after-ethernet", 14), ("ipv4", 24), ("ipv4-addresses", 30),
    ("udp", 38), ("bth", 48), ("bth-psn", 52), ("reth", 62), ("payload", 80), ("icrc", -2),
])
def test_truncated_write_first(where, cut):
    frame = bytes(roce_data(SRC, DST, SPORT, DQPN, PSN, opcode=RC_RDMA_WRITE_FIRST, payload_len=64))
    assert len(frame) == 54 + 16 + 64 + 4
    assert classify(frame)["kind"] == DATA
    assert classify(frame[:cut])["kind"] == OTHER


@pytest.mark.parametrize("cut", [56, 57, 58, 60])
def test_truncated_nak_in_aeth_or_icrc(cut):
    frame = bytes(roce_nak(DST, SRC, SPORT, DQPN, PSN))
    assert classify(frame[:cut])["kind"] == OTHER


def test_truncated_vlan_frame():
    frame = bytes(roce_data(SRC, DST, SPORT, DQPN, PSN, vlan=5))
    for cut in (15, 17, 20):
        assert classify(frame[:cut])["kind"] == OTHER


@pytest.mark.parametrize("name", sorted(ROCE_CASES))
def test_every_prefix_is_other(name):
    """Strict lengths: a frame cut anywhere is OTHER, and never raises."""
    frame = bytes(ROCE_CASES[name][0]())
    for cut in range(len(frame)):
        assert classify(frame[:cut])["kind"] == OTHER


def test_length_fields_the_bytes_do_not_back():
    frame = bytearray(bytes(roce_data(SRC, DST, SPORT, DQPN, PSN, payload_len=16)))
    longer_ip = bytearray(frame)
    struct.pack_into("!H", longer_ip, 16, struct.unpack_from("!H", frame, 16)[0] + 1)
    assert classify(bytes(longer_ip))["kind"] == OTHER
    longer_udp = bytearray(frame)
    struct.pack_into("!H", longer_udp, 38, struct.unpack_from("!H", frame, 38)[0] + 1)
    assert classify(bytes(longer_udp))["kind"] == OTHER
    short_udp = bytearray(frame)
    struct.pack_into("!H", short_udp, 38, 8 + 12 + 16 + 3)   # BTH + RETH + 3: no room for the ICRC
    assert classify(bytes(short_udp))["kind"] == OTHER
    struct.pack_into("!H", short_udp, 38, 8 + 12 + 16 + 4)   # shorter than the IP payload is allowed (UDP trailer)
    assert classify(bytes(short_udp))["kind"] == DATA


def test_classify_never_raises_on_garbage():
    rng = random.Random(4791)
    frames = [bytes(ROCE_CASES[name][0]()) for name in sorted(ROCE_CASES)]
    for _ in range(3000):
        if rng.random() < 0.3:
            frame = bytes(rng.randrange(256) for _ in range(rng.randrange(100)))
        else:
            frame = bytearray(rng.choice(frames))
            for _ in range(rng.randrange(1, 4)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            if rng.random() < 0.5:
                frame = frame[:rng.randrange(len(frame) + 1)]
            frame = bytes(frame)
        meta = classify(frame)
        assert meta["kind"] in (OTHER, DATA, ACK, NACK, ROCE_OTHER)
        assert 0 <= meta["psn"] < M and 0 <= meta["dqpn"] < M and 0 <= meta["flow_hash"] < 1 << 16


def test_classify_rejects_non_frames():
    with pytest.raises(TypeError):
        classify(1234)
    with pytest.raises(TypeError):
        classify("not bytes")


# --- builders ------------------------------------------------------------------------------------------------------

def test_builders_reject_bad_arguments():
    with pytest.raises(ValueError):
        roce_ack(A, B, 1, 2, 3, syndrome=0x60)
    with pytest.raises(ValueError):
        roce_nak(A, B, 1, 2, 3, syndrome=0x1F)
    with pytest.raises(ValueError):
        roce_data(A, B, 1, 2, 3, opcode=0x11)
    with pytest.raises(ValueError):
        roce_data(A, B, 1, 2, 3, opcode=RC_RDMA_READ_REQUEST, payload_len=4)
    with pytest.raises(ValueError):
        roce_data(A, B, 1, 2, M)
    with pytest.raises(ValueError):
        roce_data(A, B, 1, M, 0)
    with pytest.raises(ValueError):
        roce_data(A, "fd00::2", 1, 2, 3)
    with pytest.raises(TypeError):
        roce_data(A, B, 1, 2, 3, colour="red")


def test_reth_and_padding():
    """RETH follows BTH on WRITE FIRST, and scapy dissects it; a payload of 5 bytes is padded to 8, PadCnt 3."""
    frame = bytes(roce_data(A, B, 1, 2, 3, opcode=RC_RDMA_WRITE_FIRST, payload_len=5, va=0x1122334455667788,
                            rkey=0xCAFE, dma_len=4096))
    assert frame[54:70] == bytes.fromhex("1122334455667788 0000cafe 00001000")
    assert (frame[43] >> 4) & 3 == 3 and len(frame) == 54 + 16 + 8 + 4
    reth = Ether(frame)[RETH]
    assert (reth.va, reth.rkey, reth.dma_len) == (0x1122334455667788, 0xCAFE, 4096)
    assert not Ether(bytes(roce_data(A, B, 1, 2, 3, opcode=RC_RDMA_WRITE_MIDDLE))).haslayer(RETH)
    read = bytes(roce_data(A, B, 1, 2, 3, opcode=RC_RDMA_READ_REQUEST, dma_len=1 << 20))
    assert len(read) == 54 + 16 + 4 and read[66:70] == (1 << 20).to_bytes(4, "big")


# --- QP classifier -------------------------------------------------------------------------------------------------

LOCAL = "10.0.0.2"                   # the NIC below the destination ToR


def test_qp_classifier_keys():
    qpc = QpClassifier()
    qpc.add(LOCAL, "10.0.1.1", 0x456, 0x123, 2)
    qpc.add(LOCAL, "10.0.1.9", 0x457, 0x123, 0)          # same remote QPN, another remote host
    assert qpc.lookup(classify(roce_data("10.0.1.1", LOCAL, 1, 0x456, 5))) == (1, 2)
    assert qpc.lookup(classify(roce_data("10.0.1.9", LOCAL, 1, 0x457, 5))) == (1, 0)
    assert qpc.lookup(classify(roce_nak(LOCAL, "10.0.1.1", 1, 0x123, 5))) == (1, 2)
    assert qpc.lookup(classify(roce_nak(LOCAL, "10.0.1.9", 1, 0x123, 5))) == (1, 0)
    assert qpc.lookup(roce_ack(LOCAL, "10.0.1.1", 1, 0x123, 5)) == (1, 2)     # a frame is classified first
    misses = [
        roce_data("10.0.1.1", LOCAL, 1, 0x999, 5),        # unknown local QPN
        roce_data("10.0.1.1", "10.0.0.3", 1, 0x456, 5),   # another NIC
        roce_data(LOCAL, "10.0.1.1", 1, 0x123, 5),        # data from the local NIC: not Themis-D's direction
        roce_nak("10.0.1.1", LOCAL, 1, 0x456, 5),         # a NAK towards the local NIC
        roce_nak(LOCAL, "10.0.1.2", 1, 0x123, 5),         # unknown remote
        roce_cnp(LOCAL, "10.0.1.1", 1, 0x123),            # other RoCE kinds always miss
        roce_nak(LOCAL, "10.0.1.1", 1, 0x123, 5, syndrome=0x61),
        _tcp(),
    ]
    for pkt in misses:
        assert qpc.lookup(classify(pkt)) == (0, 0)
    assert qpc.entries[2].remote_qpn == 0x123 and str(qpc.entries[2].remote_ip) == "10.0.1.1"


def test_qp_classifier_ipv6_and_families_apart():
    qpc = QpClassifier()
    qpc.add("fd00::2", "fd00::1", 0x456, 0x123, 1)
    assert qpc.lookup(classify(roce_data("fd00::1", "fd00::2", 1, 0x456, 5))) == (1, 1)
    assert qpc.lookup(classify(roce_nak("fd00::2", "fd00::1", 1, 0x123, 5))) == (1, 1)
    qpc.add("::a00:2", "::a00:101", 0x456, 0x123, 2)     # integers equal to 10.0.0.2 / 10.0.1.1 as IPv6
    assert qpc.lookup(classify(roce_data("10.0.1.1", "10.0.0.2", 1, 0x456, 5))) == (0, 0)


@pytest.mark.parametrize("args, exc", [
    ((LOCAL, "10.0.1.1", 0x456, 0x123, 0), ValueError),    # index in use
    ((LOCAL, "10.0.1.7", 0x456, 0x777, 5), ValueError),    # the local QPN's key in use
    ((LOCAL, "10.0.1.1", 0x458, 0x123, 5), ValueError),    # the NAK key in use
    ((LOCAL, "10.0.1.1", M, 0x1, 5), ValueError),
    ((LOCAL, "fd00::1", 0x1, 0x1, 5), ValueError),
    ((LOCAL, "10.0.1.1", 0x1, 0x1, -1), ValueError),
    ((LOCAL, "10.0.1.1", 0x1, 0x1, 1.0), TypeError),
])
def test_qp_classifier_rejects(args, exc):
    qpc = QpClassifier()
    qpc.add(LOCAL, "10.0.1.1", 0x456, 0x123, 0)
    with pytest.raises(exc):
        qpc.add(*args)


# --- Themis-D end to end --------------------------------------------------------------------------------------------

D_PARAMS = dict(n_qps=4, queue_depth=16, n_paths=2, entry_bits=8)

#: QPs between the NIC below the destination ToR (LOCAL) and remote senders: (remote, local QPN, remote QPN, PSN
#: base, UDP source ports of data and NAKs). Bases put two of the paper's examples across the 2**24 wrap; with N = 2
#: (which divides 2**24) a PSN's path parity, and so every verdict, is unchanged by the offset.
QPS = {
    0: ("10.0.1.1", 0x000456, 0x000123, M - 2, 0xC000, 0xD000),
    1: ("10.0.1.2", 0x000457, 0x000124, 0, 0xC001, 0xD001),
    2: ("10.0.1.3", 0xABCDEF, 0x000125, M - 1, 0xC002, 0xD002),
    3: ("10.0.1.4", 0x000459, 0x000126, 0, 0xC003, 0xD003),   # in the classifier, never set up in Themis-D
}


def _write(qp, k, msg_len=8):
    """Packet k of an 8-packet RDMA WRITE on QP ``qp``: FIRST (with RETH) at PSN base + 0, MIDDLE after."""
    remote, local_qpn, _, base, sport, _ = QPS[qp]
    opcode = RC_RDMA_WRITE_FIRST if k == 0 else RC_RDMA_WRITE_LAST if k == msg_len - 1 else RC_RDMA_WRITE_MIDDLE
    return roce_data(remote, LOCAL, sport, local_qpn, (base + k) % M, opcode=opcode, payload_len=256,
                     dma_len=256 * msg_len, va=0x10000)


def _nak_msn(qp, k):
    """A distinct AETH MSN per NAK, so the test sees which NAK's MSN a compensation NACK carries."""
    return 0x100 * (qp + 1) + k


def _nak(qp, k, syndrome=0x60):
    remote, _, remote_qpn, base, _, nak_sport = QPS[qp]
    return roce_nak(LOCAL, remote, nak_sport, remote_qpn, (base + k) % M, msn=_nak_msn(qp, k), syndrome=syndrome)


def _classifier():
    qpc = QpClassifier()
    for index, (remote, local_qpn, remote_qpn, *_rest) in QPS.items():
        qpc.add(LOCAL, remote, local_qpn, remote_qpn, index)
    return qpc


def test_themis_d_real_packets_paper_figure4():
    """Section 3.3 (Figure 4, N = 2) and 3.4 on real frames, three QPs interleaved with foreign traffic.

    QP 0, Figure 4b literally: the ToR forwards 0, 1, 3, 2; the NIC got 3 before 2 and NAKs ePSN 2. The scan
    dequeues 0 and 1 and stops at tPSN 3: 3 mod 2 != 2 mod 2, the NAK is invalid and blocked (the paper). 2 is in the
    queue after tPSN, so lbpipe says why: late (docs/themis.md, phase 2), nothing armed, 4 entries read. 4 is then
    lost and 6 overtakes it; the NIC (ePSN 4 once 2 filled the hole) NAKs ePSN 4. The queue holds 3, 2 (both kept by
    the first scan) and 6: 3 and 2 are not after 4 and are dequeued, tPSN is 6, 6 mod 2 == 4 mod 2, valid,
    forwarded, 3 entries read.

    QP 1, the order in which the paper's verdict is exactly "blocked": 0, 1, 3 leave the ToR and the NAK (ePSN 2)
    comes back before 2 does. tPSN 3, nothing after it: blocked, compensation armed with BePSN 2 (3 entries read).
    Then 2 arrives: PSN == BePSN, not lost, disarmed (section 3.4). 6 (4 lost) and the NAK for ePSN 4: as QP 0.

    QP 2, Figure 4c (section 3.4): 2 is lost. NAK(2) blocked as for QP 1; 5 is on the other path; 4 is after BePSN 2
    on its path: the ToR asks for a NAK for 2 (comp_psn 2) and forwards 4; 6 raises nothing (Valid cleared).

    PSNs of QPs 0 and 2 straddle 2**24. Everything else passes untouched (verdict PASS): TCP, other UDP, a CNP, ACKs
    and non-0x60 NAKs of a known QP, data and a NAK for unknown QPs, and data of QP 3, known to the classifier but
    not set up in Themis-D.
    """
    qpc = _classifier()
    scenario = {
        0: [("d", 0), ("d", 1), ("d", 3), ("d", 2), ("n", 2), ("d", 6), ("n", 4)],
        1: [("d", 0), ("d", 1), ("d", 3), ("n", 2), ("d", 2), ("d", 6), ("n", 4)],
        2: [("d", 0), ("d", 1), ("d", 3), ("n", 2), ("d", 5), ("d", 4), ("d", 6)],
    }
    # (qp, step) -> (verdict, drop, comp, comp_psn offset or None, scanned); unlisted data steps: plain DATA.
    expected = {
        (0, 4): (Verdict.NACK_LATE, 1, 0, None, 4),
        (0, 6): (Verdict.NACK_VALID, 0, 0, None, 3),
        (1, 3): (Verdict.NACK_BLOCKED, 1, 0, None, 3),
        (1, 4): (Verdict.DATA_CANCEL, 0, 0, None, 0),
        (1, 6): (Verdict.NACK_VALID, 0, 0, None, 3),
        (2, 3): (Verdict.NACK_BLOCKED, 1, 0, None, 3),
        (2, 5): (Verdict.DATA_COMP, 0, 1, 2, 0),
    }
    foreign = [
        _tcp(),
        Ether(**ETH) / IP(src="10.0.1.1", dst=LOCAL) / UDP(sport=5000, dport=53) / Raw(b"q" * 30),
        roce_cnp(LOCAL, "10.0.1.1", 0xD000, 0x123),                       # the NIC's CNP to QP 0's sender
        roce_ack(LOCAL, "10.0.1.1", 0xD000, 0x123, M - 1, msn=0),         # QP 0's ACK: a hit, but not a NACK
        roce_nak(LOCAL, "10.0.1.2", 0xD001, 0x124, 2, syndrome=0x2E),     # RNR NAK on QP 1
        roce_nak(LOCAL, "10.0.1.3", 0xD002, 0x125, 1, syndrome=0x61),     # invalid-request NAK on QP 2
        roce_data("10.0.1.1", LOCAL, 0xC000, 0x999, 0),                   # unknown QP
        roce_nak(LOCAL, "10.0.1.1", 0xD000, 0x999, 2),                    # NAK for an unknown QP
        _write(3, 0), _write(3, 2),                                       # idle QP
        roce_nak(LOCAL, "10.0.1.4", 0xD003, 0x126, 1),                    # NAK of the idle QP
    ]
    foreign_meta = [(OTHER, 0), (OTHER, 0), (ROCE_OTHER, 0), (ACK, 1), (ROCE_OTHER, 0), (ROCE_OTHER, 0), (DATA, 0),
                    (NACK, 0), (DATA, 1), (DATA, 1), (NACK, 1)]

    events = [{"ctl": {"table": 0, "index": qp}} for qp in scenario]
    expect_by_tag = {}
    packets = []
    # Interleave the three QPs step by step, with a foreign packet after each round.
    for step in range(7):
        for qp, steps in scenario.items():
            kind, k = steps[step]
            packets.append((_write(qp, k) if kind == "d" else _nak(qp, k), (qp, step)))
        packets.append((foreign[step], ("foreign", step)))
    packets += [(pkt, ("foreign", n)) for n, pkt in enumerate(foreign[7:], 7)]
    for tag, (pkt, key) in enumerate(packets):
        item = themis_d_item(pkt, qpc, tag)
        events.append({"item": item})
        if key[0] == "foreign":
            assert (item["kind"], item["qp_hit"]) == foreign_meta[key[1]]
            expect_by_tag[tag] = (Verdict.PASS, 0, 0, None, 0)
        else:
            qp, step = key
            kind, k = scenario[qp][step]
            base = QPS[qp][3]
            assert item == {"kind": DATA if kind == "d" else NACK, "qp_hit": 1, "qp": qp, "psn": (base + k) % M,
                            "msn": 0 if kind == "d" else _nak_msn(qp, k), "tag": tag}
            expect_by_tag[tag] = expected.get(key, (Verdict.DATA, 0, 0, None, 0))

    golden = run_golden("themis-d", D_PARAMS, events)
    rtl = run_rtl("themis-d", D_PARAMS, events)
    assert rtl == golden
    assert [out["tag"] for out in golden] == list(range(len(packets)))
    for out in golden:
        verdict, drop, comp, comp_k, scanned = expect_by_tag[out["tag"]]
        base = QPS[out["qp"]][3] if out["qp_hit"] else 0
        comp_psn = 0 if comp_k is None else (base + comp_k) % M
        assert (out["verdict"], out["drop"], out["comp"], out["comp_psn"], out["scanned"]) == \
            (verdict, drop, comp, comp_psn, scanned), packets[out["tag"]][1]
        # A compensation NACK carries the MSN of the NAK that was blocked for the same ePSN (NAK(2) of that QP).
        assert out["comp_msn"] == (_nak_msn(out["qp"], comp_k) if comp else 0)

    # The paper's two verdicts in order for each Figure 4 QP: NACK(2) blocked, NACK(4) forwarded.
    for qp in (0, 1):
        nacks = [out for out in golden if out["kind"] == NACK and out["qp_hit"] and out["qp"] == qp]
        assert [(out["psn"], out["drop"]) for out in nacks] == [((QPS[qp][3] + 2) % M, 1), ((QPS[qp][3] + 4) % M, 0)]

    # The compensation NAK the deparser must build, from the classifier's record of QP 2: it is a real NAK for
    # ePSN 2 that the classifier maps back to QP 2.
    comp = next(out for out in golden if out["comp"])
    entry = qpc.entries[comp["qp"]]
    nak = roce_nak(str(entry.local_ip), str(entry.remote_ip), QPS[2][5], entry.remote_qpn, comp["comp_psn"],
                   msn=comp["comp_msn"])
    assert themis_d_item(nak, qpc, 0) == {"kind": NACK, "qp_hit": 1, "qp": 2, "psn": 1, "msn": _nak_msn(2, 2),
                                          "tag": 0}


# --- Themis-S end to end --------------------------------------------------------------------------------------------

def test_themis_s_real_packets_sport_mode():
    """Section 3.2 / Figure 3 in mode sport: a data packet's UDP source port becomes sport XOR PathMap[PSN mod N].

    N = 4, PathMap = [0x0000, 0x0001, 0x0110, 0x1000], one QP sending 6 RDMA WRITE packets with PSNs 2**24 - 3 to 2
    (residues mod 4: 1, 2, 3, 0, 1, 2; 4 divides 2**24 so they run on across the wrap) from port 0xC000. Non-data
    keeps its port. The rewritten frame needs a new ICRC (the port is not a masked field): rebuilt by scapy it
    differs wherever the delta is not 0, and the metadata's udp_sport_xor is enough to update the old ICRC
    incrementally to exactly scapy's.
    """
    params = dict(n_paths=4, mode="sport", hash_bits=16)
    pathmap = [0x0000, 0x0001, 0x0110, 0x1000]
    sender, receiver, sport, dqpn = "10.0.1.1", "10.0.0.2", 0xC000, 0x456
    psns = [M - 3, M - 2, M - 1, 0, 1, 2]
    ops = [RC_RDMA_WRITE_FIRST] + [RC_RDMA_WRITE_MIDDLE] * 4 + [RC_RDMA_WRITE_LAST]
    writes = [roce_data(sender, receiver, sport, dqpn, psn, opcode=op, payload_len=100, dma_len=600)
              for psn, op in zip(psns, ops)]
    others = [roce_ack(receiver, sender, 0xD000, 0x123, 2), roce_cnp(receiver, sender, 0xD000, 0x123), _tcp()]
    events = [{"ctl": {"table": 0, "index": i, "data": d}} for i, d in enumerate(pathmap)]
    events += [{"item": themis_s_item(pkt, tag)} for tag, pkt in enumerate(writes + others)]

    golden = run_golden("themis-s", params, events)
    assert run_rtl("themis-s", params, events) == golden

    fh = flow_hash(sender, receiver, dqpn)
    assert [out["udp_sport"] for out in golden[:6]] == [0xC001, 0xC110, 0xD000, 0xC000, 0xC001, 0xC110]
    assert [out["udp_sport_xor"] for out in golden[:6]] == [0x0001, 0x0110, 0x1000, 0x0000, 0x0001, 0x0110]
    assert [out["path"] for out in golden[:6]] == [(r + fh % 4) % 4 for r in (1, 2, 3, 0, 1, 2)]   # Equation 1
    assert all(out["sprayed"] == 1 and out["flow_hash"] == fh for out in golden[:6])
    for out, pkt in zip(golden[6:], others):
        assert (out["sprayed"], out["udp_sport_xor"], out["udp_sport"]) == (0, 0, classify(pkt)["udp_sport"])

    for pkt, out in zip(writes, golden):
        before = bytes(pkt)
        rebuilt = pkt.copy()
        rebuilt[UDP].sport = out["udp_sport"]
        after = bytes(rebuilt)                              # scapy recomputes the ICRC
        assert (after[-4:] != before[-4:]) == (out["udp_sport_xor"] != 0)
        assert icrc(after) == after[-4:]
        assert rewrite_udp_sport(before, out["udp_sport_xor"]) == after
        meta_before, meta_after = classify(before), classify(after)
        assert meta_after["udp_sport"] == out["udp_sport"]
        for field in ("kind", "psn", "dqpn", "flow_hash"):   # the hash leaves the port out: Themis-D sees the same
            assert meta_after[field] == meta_before[field]


def test_rewrite_udp_sport_updates_nonzero_checksum():
    """A non-zero UDP checksum is updated (RFC 1624) to what a full recomputation gives. The checksum covers the
    UDP payload, ICRC included, so its update takes in the ICRC's change as well as the port's."""
    for src, dst in ((A, B), ("fd00::1", "fd00::2")):
        pkt = roce_data(src, dst, 0xC000, 0x456, 77, opcode=RC_SEND_ONLY, payload_len=30, udp_chksum=None)
        before = bytes(pkt)
        assert struct.unpack_from("!H", before, 40 if src == A else 60)[0] != 0
        for delta in (0x0001, 0x8000, 0xFFFF, 0x3FFF):
            rebuilt = pkt.copy()
            rebuilt[UDP].sport = 0xC000 ^ delta
            assert rewrite_udp_sport(before, delta) == bytes(rebuilt)
    # A frame without BTH padding (PadCnt 0, 5 payload bytes): the ICRC sits at an odd offset in the UDP segment.
    odd = (Ether(**ETH) / IP(src=A, dst=B) / UDP(sport=0xC000, dport=4791) / BTH(opcode=RC_SEND_ONLY, dqpn=5, psn=6)
           / Raw(b"abcde"))
    assert (len(bytes(odd)) - 34) % 2 == 1
    for delta in (0x0001, 0xFFFF, 0x1234):
        rebuilt = odd.copy()
        rebuilt[UDP].sport = 0xC000 ^ delta
        assert rewrite_udp_sport(bytes(odd), delta) == bytes(rebuilt)
    with pytest.raises(ValueError):
        rewrite_udp_sport(bytes(_tcp()), 1)
    with pytest.raises(ValueError):
        rewrite_udp_sport(bytes(roce_ack(A, B, 1, 2, 3)), 1 << 16)


def test_items_reject_bad_tags():
    with pytest.raises(ValueError):
        themis_s_item(roce_data(A, B, 1, 2, 3), 1 << 16)
    with pytest.raises(ValueError):
        themis_d_item(roce_data(A, B, 1, 2, 3), QpClassifier(), -1)
    assert themis_s_item(roce_data(A, B, 1, 2, 3), 0, hash_bits=4)["flow_hash"] == flow_hash(A, B, 2) & 0xF
