# amaranth: UnusedElaboratable=no
"""Tests of :mod:`lbpipe.hdl.lib.axis`, :mod:`lbpipe.hdl.packet.parser` and its golden model :mod:`lbpipe.sim.packet.parser`.

Signature and parameter tests first, then the golden model on frames whose expected items are worked out by hand
(offsets from the header sizes: Ethernet 14, tag 4, IPv4 20 + options, IPv6 40, UDP 8, BTH 12, AETH 4, RETH 16,
ImmDt 4, ICRC 4), then the golden model against :func:`lbpipe.tb.lib.packets.classify` (written independently) on
the whole corpus, then the cocotb bench under Icarus (``lbpipe.tb.packet.test_parser``) and one synthesis check.

Signature tests construct components without elaborating them; the first line silences Amaranth's
``UnusedElaboratable`` warning for that reason (pytest turns warnings into errors).
"""

import binascii
import struct

import pytest

from amaranth.hdl import Elaboratable, Module, Shape, Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.packet.parser import (AETH_OPCODES, EXT_WORDS, IMMDT_OPCODES, LAPS_PORT, RETH_OPCODES, PacketMeta,
                               Parser, _crc16_columns, meta_fields)
from lbpipe.sim.packet.parser import hw_length, parse, parse_frames
from lbpipe.tb.lib.runner import run_cocotb, write_verilog

OTHER, DATA, ACK, NACK, ROCE_OTHER = (k.value for k in PacketKind)


# --- AXI4StreamSignature -------------------------------------------------------------------------------------------

def test_axis_signature_members():
    sig = AXI4StreamSignature()
    assert (sig.data_width, sig.user_width, sig.bytes_per_beat) == (512, 1, 64)
    assert list(sig.members) == ["tdata", "tkeep", "tvalid", "tready", "tlast", "tuser"]
    flows = {name: member.flow for name, member in sig.members.items()}
    assert flows == {"tdata": Out, "tkeep": Out, "tvalid": Out, "tready": In, "tlast": Out, "tuser": Out}
    widths = {name: Shape.cast(member.shape).width for name, member in sig.members.items()}
    assert widths == {"tdata": 512, "tkeep": 64, "tvalid": 1, "tready": 1, "tlast": 1, "tuser": 1}


def test_axis_signature_widths_eq_repr():
    sig = AXI4StreamSignature(data_width=64, user_width=48)
    assert Shape.cast(sig.members["tkeep"].shape).width == 8
    assert Shape.cast(sig.members["tuser"].shape).width == 48
    assert sig == AXI4StreamSignature(data_width=64, user_width=48)
    assert sig != AXI4StreamSignature(data_width=64, user_width=1)
    assert sig != AXI4StreamSignature(data_width=128, user_width=48)
    assert hash(sig) == hash(AXI4StreamSignature(data_width=64, user_width=48))
    assert repr(sig) == "AXI4StreamSignature(data_width=64, user_width=48)"
    # The sink's view flips every member, as In(stream.Signature(...)) does.
    sink = In(sig).signature
    assert sink.members["tdata"].flow == In and sink.members["tready"].flow == Out


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"data_width": "512"}, TypeError, r"^Data width must be an integer, not '512'$"),
    ({"data_width": True}, TypeError, r"^Data width must be an integer, not True$"),
    ({"data_width": 0}, ValueError, r"^Data width must be a positive multiple of 8, not 0$"),
    ({"data_width": 100}, ValueError, r"^Data width must be a positive multiple of 8, not 100$"),
    ({"user_width": 1.0}, TypeError, r"^User width must be an integer, not 1\.0$"),
    ({"user_width": 0}, ValueError, r"^User width must be at least 1, not 0$"),
])
def test_axis_signature_bad_parameters(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        AXI4StreamSignature(**kwargs)


def test_axis_signature_keyword_only():
    with pytest.raises(TypeError):
        AXI4StreamSignature(512)


# --- Parser signature and layout -----------------------------------------------------------------------------------

def test_parser_signature():
    parser = Parser(user_width=48)
    assert parser.user_width == 48 and Parser.latency == 7
    members = parser.signature.members
    assert set(members) == {"s_axis", "m_axis", "meta"}
    assert members["s_axis"] == In(AXI4StreamSignature(data_width=512, user_width=48))
    assert members["m_axis"] == Out(AXI4StreamSignature(data_width=512, user_width=48))
    assert members["meta"] == Out(stream.Signature(PacketMeta()))


@pytest.mark.parametrize("user_width, exc", [(0, ValueError), ("1", TypeError), (None, TypeError)])
def test_parser_bad_parameters(user_width, exc):
    with pytest.raises(exc, match=r"^User width must be"):
        Parser(user_width=user_width)


def test_parser_keyword_only():
    with pytest.raises(TypeError):
        Parser(1)


def test_packet_meta_layout():
    layout = PacketMeta()
    widths = {name: field.width for name, field in layout}
    assert widths == {
        "kind": 3, "tag": 16, "frame_len": 16, "short": 1, "truncated": 1, "vlans": 2, "ipv4": 1, "ipv6": 1,
        "frag": 1, "udp": 1, "roce": 1, "aeth": 1, "reth": 1, "immdt": 1, "l3_off": 8, "l4_off": 8,
        "bth_off": 8, "icrc_off": 16, "src_ip": 128, "dst_ip": 128, "udp_sport": 16, "udp_dport": 16,
        "udp_len": 16, "udp_csum": 16, "opcode": 8, "dqpn": 24, "psn": 24, "ackreq": 1, "syndrome": 8,
        "msn": 24, "flow_hash": 16,
        "laps": 1, "laps_bad": 1, "laps_probe": 1, "laps_ack": 1, "laps_count": 3, "laps_sr_idx": 8,
        "laps_pid": 16, "laps_time": 48, "laps_anchors": 128, "laps_off": 8, "bth_resv": 8,
    }
    # The RoCEv2 fields fill the first 512 bits as before LAPS; the LAPS fields follow them, then ``bth_resv``.
    assert layout.size == 512 + 215 + 8
    assert layout["flow_hash"].offset == 512 - 16 and layout["laps"].offset == 512
    assert layout["bth_resv"].offset == 512 + 215
    assert layout["kind"].shape is PacketKind and layout["kind"].offset == 0
    assert meta_fields() == list(widths)


def test_opcode_tables_match_packets():
    """The parser's opcode table against the one :mod:`lbpipe.tb.lib.packets` was written with (independently)."""
    from lbpipe.tb.lib import packets
    assert {op: 4 * words for op, words in EXT_WORDS.items()} == packets._EXT_LEN
    assert RETH_OPCODES == set(packets._RETH_OPCODES)
    assert IMMDT_OPCODES == set(packets._IMM_OPCODES) | {0x65}     # packets builds no UD SEND with immediate
    assert AETH_OPCODES == {0x0D, 0x0F, 0x10, 0x11, 0x12}


def test_flow_hash_matrix():
    """The hardware's XOR matrix reproduces CRC-16/CCITT-FALSE for both address families."""
    import random
    v6, v4, k6, k4 = _crc16_columns()
    assert binascii.crc_hqx(b"123456789", 0xFFFF) == 0x29B1
    rng = random.Random(1)
    for cols, k, size in ((v6, k6, 16), (v4, k4, 4)):
        for _ in range(50):
            src, dst, dqpn = rng.getrandbits(8 * size), rng.getrandbits(8 * size), rng.getrandbits(24)
            values = {"src": src, "dst": dst, "dqpn": dqpn}
            got = k
            for (field, bit), col in cols.items():
                if values[field] >> bit & 1:
                    got ^= col
            want = binascii.crc_hqx(src.to_bytes(size, "big") + dst.to_bytes(size, "big") +
                                    dqpn.to_bytes(3, "big"), 0xFFFF)
            assert got == want


# --- golden model, by hand -----------------------------------------------------------------------------------------

MAC = bytes.fromhex("020000000002" "020000000001")
SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])


def _ipv4(payload, *, proto=17, options=b"", flags_frag=0x4000):
    ihl = 5 + len(options) // 4
    return struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + len(payload), 0, flags_frag, 64, proto, 0,
                       SRC4, DST4) + options + payload


def _udp(payload, *, sport=0xC000, dport=4791, csum=0):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), csum) + payload


def _bth(opcode, dqpn, psn, *, ackreq=0, tver=0, byte4=0):
    return struct.pack("!BBHBBHBBH", opcode, tver, 0xFFFF, byte4, dqpn >> 16, dqpn & 0xFFFF,
                       ackreq << 7, psn >> 16, psn & 0xFFFF)


def _zeros(**fields):
    meta = dict.fromkeys(meta_fields(), 0)
    meta.update(fields)
    return meta


def test_golden_ipv4_ack_by_hand():
    # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4 = 62 bytes, under 64 (a minimum frame without FCS).
    aeth = bytes([0x00, 0x00, 0x00, 0x07])                           # syndrome 0 (ACK), MSN 7
    frame = MAC + b"\x08\x00" + _ipv4(_udp(_bth(0x11, 0x000456, 0x000010) + aeth + b"ICRC"))
    assert len(frame) == 62
    want = _zeros(
        kind=ACK, tag=9, frame_len=62, short=1, ipv4=1, udp=1, roce=1, aeth=1,
        l3_off=14, l4_off=34, bth_off=42, icrc_off=58,               # 34 + UDP length 28 - 4
        src_ip=0x0A000001, dst_ip=0x0A000002, udp_sport=0xC000, udp_dport=4791, udp_len=28,
        opcode=0x11, dqpn=0x456, psn=0x10, syndrome=0, msn=7,
        flow_hash=binascii.crc_hqx(SRC4 + DST4 + b"\x00\x04\x56", 0xFFFF),
    )
    assert parse(frame, 9) == want
    # The same frame cut inside the AETH: the IP packet announces 48 bytes, the frame holds fewer.
    cut = parse(frame[:56], 9)
    assert cut == _zeros(tag=9, frame_len=56, short=1, truncated=1, ipv4=1, udp=1, l3_off=14, l4_off=34,
                         src_ip=0x0A000001, dst_ip=0x0A000002, udp_sport=0xC000, udp_dport=4791, udp_len=28)


def test_golden_bth_byte4_by_hand():
    """``bth_resv`` is the BTH's byte 4 (IBA vol. 1 9.2: FECN, BECN, 6 reserved bits), here 0xA5 behind the UDP
    header at 34 + 8 + 4 = 46; a frame that is not RoCEv2 (UDP port 4792) gives 0."""
    payload = _bth(0x04, 0x000456, 0x000010, byte4=0xA5) + b"\x00" * 8 + b"ICRC"
    frame = MAC + b"\x08\x00" + _ipv4(_udp(payload)) + b"\x00" * 2
    assert frame[46] == 0xA5
    meta = parse(frame, 0)
    assert (meta["roce"], meta["kind"], meta["bth_resv"], meta["dqpn"]) == (1, DATA, 0xA5, 0x456)
    other = MAC + b"\x08\x00" + _ipv4(_udp(payload, dport=4792)) + b"\x00" * 2
    assert parse(other, 0)["bth_resv"] == 0


@pytest.mark.parametrize("opcode, kind, ieth", [
    (0x16, DATA, 1),         # RC SEND LAST with Invalidate: an RC request, IETH (4 bytes) after the BTH
    (0x17, DATA, 1),         # RC SEND ONLY with Invalidate
    (0x15, ROCE_OTHER, 0),   # reserved in IBA table 38 (ib_pack.h: "opcode 0x15 is reserved"): never data
    (0x18, ROCE_OTHER, 0),   # reserved
])
def test_golden_send_with_invalidate_by_hand(opcode, kind, ieth):
    """The opcode-table regression (the parser once took 0x15 for SEND with invalidate and missed 0x17): by hand,
    from IBA vol. 1 table 38. The UDP length holds BTH, the IETH if any and the ICRC, nothing more, so a parser that
    expects no IETH still calls the frame RoCEv2, and one that expects an IETH where there is none does not."""
    payload = _bth(opcode, 0x000456, 0x000010) + b"\x00" * (4 * ieth) + b"ICRC"
    frame = MAC + b"\x08\x00" + _ipv4(_udp(payload)) + b"\x00" * 8
    got = parse(frame, 1)
    assert (got["kind"], got["roce"], got["opcode"], got["icrc_off"]) == (kind, 1, opcode, 42 + 12 + 4 * ieth)


def test_golden_two_tags_options_write_only_imm_by_hand():
    # S-tag, C-tag: IP at 22; 40 bytes of options: IHL 15, L4 at 22 + 60 = 82, BTH at 90, RETH at 102,
    # ImmDt at 118, 8 payload bytes at 122, ICRC at 130; frame 134 bytes (three beats), UDP length 134 - 82 = 52.
    options = b"\x01" * 40
    payload = _bth(0x0B, 0xABCDEF, 0xFFFFFF, ackreq=1) + bytes(16) + b"IMMD" + bytes(8) + b"ICRC"
    frame = MAC + b"\x88\xa8\x00\x05\x81\x00\x00\x06\x08\x00" + _ipv4(_udp(payload), options=options)
    assert len(frame) == 134
    meta = parse(frame, 0xFFFF)
    assert (meta["vlans"], meta["l3_off"], meta["l4_off"], meta["bth_off"], meta["icrc_off"]) == (2, 22, 82, 90, 130)
    assert (meta["kind"], meta["roce"], meta["reth"], meta["immdt"], meta["aeth"]) == (DATA, 1, 1, 1, 0)
    assert (meta["opcode"], meta["dqpn"], meta["psn"], meta["ackreq"], meta["udp_len"]) == (0x0B, 0xABCDEF,
                                                                                           0xFFFFFF, 1, 52)
    assert (meta["tag"], meta["frame_len"], meta["short"], meta["truncated"]) == (0xFFFF, 134, 0, 0)
    # Cut in the ImmDt (byte 120): the frame ends inside the IP packet: truncated, and not RoCEv2.
    cut = parse(frame[:120], 0)
    assert (cut["truncated"], cut["roce"], cut["kind"], cut["udp"], cut["bth_off"]) == (1, 0, OTHER, 1, 0)
    # Cut inside the options (byte 70 < 82): the IPv4 header is not found.
    assert parse(frame[:70], 0) == _zeros(frame_len=70, truncated=1, vlans=2)
    # Cut inside the second tag.
    assert parse(frame[:20], 0) == _zeros(frame_len=20, short=1, truncated=1, vlans=1)


def test_golden_ipv6_nak_by_hand():
    src6, dst6 = bytes(range(16)), bytes(range(16, 32))
    aeth = bytes([0x60, 0xFF, 0xFF, 0xFF])                           # NAK PSN sequence error, MSN 0xFFFFFF
    udp = _udp(_bth(0x11, 0x123, 0x0D) + aeth + b"ICRC", sport=0xC001)
    ip6 = struct.pack("!IHBB", 0x60000000, len(udp), 17, 64) + src6 + dst6 + udp
    frame = MAC + b"\x81\x00\x00\x05\x86\xdd" + ip6
    # Tag: IP at 18, UDP at 58, BTH at 66, ICRC at 58 + 28 - 4 = 82; frame 86 bytes.
    meta = parse(frame, 1)
    assert (meta["kind"], meta["ipv6"], meta["vlans"]) == (NACK, 1, 1)
    assert (meta["l3_off"], meta["l4_off"], meta["bth_off"], meta["icrc_off"], meta["frame_len"]) == (18, 58, 66,
                                                                                                       82, 86)
    assert meta["src_ip"] == int.from_bytes(src6, "big") and meta["dst_ip"] == int.from_bytes(dst6, "big")
    assert (meta["syndrome"], meta["msn"]) == (0x60, 0xFFFFFF)
    assert meta["flow_hash"] == binascii.crc_hqx(src6 + dst6 + b"\x00\x01\x23", 0xFFFF)
    # TVer 1: still RoCEv2, but ROCE_OTHER.
    bad = bytearray(frame)
    bad[67] = 0x01
    assert (parse(bytes(bad))["kind"], parse(bytes(bad))["roce"]) == (ROCE_OTHER, 1)


def test_golden_other_frames_by_hand():
    # A first IPv4 fragment to port 4791: IPv4 found, frag, the UDP header not looked at.
    first = MAC + b"\x08\x00" + _ipv4(_udp(_bth(0x04, 1, 1) + b"ICRC"), flags_frag=0x2000)
    assert parse(first) == _zeros(frame_len=len(first), short=1, ipv4=1, frag=1, l3_off=14, l4_off=34,
                                  src_ip=0x0A000001, dst_ip=0x0A000002)
    # Another UDP port: UDP found, not RoCEv2.
    dns = MAC + b"\x08\x00" + _ipv4(_udp(bytes(30), dport=53, csum=0x1234))
    meta = parse(dns)
    assert (meta["udp"], meta["udp_dport"], meta["udp_csum"], meta["roce"], meta["kind"]) == (1, 53, 0x1234, 0, OTHER)
    # TCP: l4_off is set, udp is not.
    tcp = MAC + b"\x08\x00" + _ipv4(bytes(20), proto=6)
    assert (parse(tcp)["l4_off"], parse(tcp)["udp"]) == (34, 0)
    # ARP, and frames shorter than an Ethernet header.
    assert parse(MAC + b"\x08\x06" + bytes(28)) == _zeros(frame_len=42, short=1)
    assert parse(b"\x01") == _zeros(frame_len=1, short=1, truncated=1)
    assert parse(MAC + b"\x08") == _zeros(frame_len=13, short=1, truncated=1)


def test_golden_lengths():
    assert [hw_length(k) for k in (1, 63, 64, 65, 9216, 65536)] == [1, 63, 64, 65, 9216, 65536]
    # The datasheet: frame_len saturates at 65,535 (a frame past 1,024 beats is longer than any Ethernet frame).
    assert hw_length(65537) == 65536 and hw_length(65600) == 65536 and hw_length(70000) == 65536
    assert parse(bytes(70000))["frame_len"] == 0xFFFF
    assert parse(bytes(65536))["frame_len"] == 0xFFFF          # saturates
    with pytest.raises(ValueError):
        parse(b"")
    with pytest.raises(ValueError):
        parse(b"x" * 64, 1 << 16)
    with pytest.raises(TypeError):
        parse("frame")


def test_golden_tags_counted():
    frames = [bytes(60)] * 3
    assert [m["tag"] for m in parse_frames(frames, first_tag=0xFFFE)] == [0xFFFE, 0xFFFF, 0]


# --- golden model against classify --------------------------------------------------------------------------------

def test_golden_agrees_with_classify():
    """On every corpus frame ``classify`` parses (no S-tag, at most one tag), kind and the RoCEv2 fields agree."""
    from lbpipe.tb.lib.packets import classify
    from lbpipe.tb.packet.test_parser import corpus
    compared = 0
    for frame in corpus(seed=3):
        meta = parse(frame)
        if meta["vlans"] == 2 or (len(frame) >= 14 and frame[12:14] == b"\x88\xa8"):
            continue
        want = classify(frame)
        assert meta["kind"] == want["kind"], frame.hex()
        if want["kind"] != OTHER:
            for name in ("opcode", "psn", "dqpn", "udp_sport", "src_ip", "dst_ip", "flow_hash"):
                assert meta[name] == want[name], (name, frame.hex())
            if want["opcode"] == 0x11:
                assert (meta["syndrome"], meta["msn"]) == (want["syndrome"], want["msn"])
            assert meta["ipv6"] == (want["ip_version"] == 6)
        compared += 1
    assert compared > 500


def test_golden_never_reads_past_the_frame():
    """Every prefix of the deepest frames parses (a read past the end would raise) and the model's view of a frame
    does not depend on bytes after it."""
    from lbpipe.tb.packet.test_parser import base_frames
    frames = base_frames()
    for name in ("v4 two tags options 40", "v6 two tags", "atomic"):
        frame = frames[name]
        for k in range(1, len(frame) + 1):
            assert parse(frame[:k]) == parse(bytearray(frame[:k])), (name, k)


# --- RTL: cocotb under Icarus ----------------------------------------------------------------------------------------

class ParserTop(Elaboratable):
    """:class:`Parser` with flat ports for cocotb and Vivado: ``s_axis_<member>``, ``m_axis_<member>`` (what
    cocotbext-axi's ``AxiStreamBus.from_prefix`` binds), ``meta_valid``, ``meta_ready``, ``meta_payload``
    (``PacketMeta`` packing), and ``clk``/``rst`` from the ``sync`` domain."""

    def __init__(self, *, user_width=1, laps_port=LAPS_PORT, early=False, fcs=False):
        self.parser = Parser(user_width=user_width, laps_port=laps_port, early=early, fcs=fcs)
        members = self.parser.signature.members
        self.s_axis = {name: Signal(member.shape, name=f"s_axis_{name}")
                       for name, member in members["s_axis"].signature.members.items()}
        self.m_axis = {name: Signal(member.shape, name=f"m_axis_{name}")
                       for name, member in members["m_axis"].signature.members.items()}
        self.meta_valid = Signal(name="meta_valid")
        self.meta_ready = Signal(name="meta_ready")
        self.meta_payload = Signal(PacketMeta().size, name="meta_payload")

    def ports(self):
        return [*self.s_axis.values(), *self.m_axis.values(), self.meta_valid, self.meta_ready, self.meta_payload]

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self.parser
        for name, member in AXI4StreamSignature().members.items():
            inward, outward = getattr(parser.s_axis, name), getattr(parser.m_axis, name)
            if member.flow == Out:      # source-driven members: in from s_axis_*, out to m_axis_*
                m.d.comb += [inward.eq(self.s_axis[name]), self.m_axis[name].eq(outward)]
            else:
                m.d.comb += [self.s_axis[name].eq(inward), outward.eq(self.m_axis[name])]
        m.d.comb += [
            self.meta_valid.eq(parser.meta.valid),
            parser.meta.ready.eq(self.meta_ready),
            self.meta_payload.eq(parser.meta.payload.as_value()),
        ]
        return m


def test_parser_top_ports():
    names = [port.name for port in ParserTop().ports()]
    members = ["tdata", "tkeep", "tvalid", "tready", "tlast", "tuser"]
    assert names == ([f"s_axis_{n}" for n in members] + [f"m_axis_{n}" for n in members] +
                     ["meta_valid", "meta_ready", "meta_payload"])


# The default LAPS port, and 4790: one bit from RoCEv2's 4791, in the low range, and a port the corpus's "udp v6
# other port" frame uses (a 1-byte datagram: a malformed LAPS header there).
@pytest.mark.parametrize("laps_port", [LAPS_PORT, pytest.param(4790, marks=pytest.mark.deep)])
def test_parser_cocotb(laps_port):
    top = ParserTop(laps_port=laps_port)
    path = write_verilog(top, name="parser_top", ports=top.ports())
    text = path.read_text()
    for name in ["clk", "rst", "s_axis_tdata", "s_axis_tready", "m_axis_tuser", "meta_payload"]:
        assert f" {name};" in text, f"port {name} missing from {path}"
    run_cocotb(path, toplevel="parser_top", test_module="lbpipe.tb.packet.test_parser", testcase=DEFAULT_TESTCASES,
               extra_env={"PARSER_LAPS_PORT": str(laps_port)})


#: The parser bench's testcases in the default profile; ``tag_wrap`` and ``laps_fuzz`` run in the regression one.
DEFAULT_TESTCASES = ["corpus_with_stalls", "corpus_at_line_rate", "line_rate", "meta_does_not_wait_for_m_axis",
                     "reset_mid_traffic", "long_frames", "item_timing_by_mode"]


def test_parser_cocotb_early():
    """``early=True``: the same testcases, items held to ``parse(..., early=True)`` and timed from the beat that
    completes the header window."""
    top = ParserTop(early=True)
    path = write_verilog(top, name="parser_top_early", ports=top.ports())
    run_cocotb(path, toplevel="parser_top_early", test_module="lbpipe.tb.packet.test_parser",
               testcase=DEFAULT_TESTCASES, extra_env={"PARSER_EARLY": "1"})


@pytest.mark.parametrize("early", [pytest.param(False, marks=pytest.mark.deep), True])
def test_parser_cocotb_fcs(early):
    """``fcs=True`` (late and early items): the corpus held to ``parse(..., fcs=True)``, and frames with a real
    FCS (zlib) worked by hand."""
    top = ParserTop(fcs=True, early=early)
    name = "parser_top_fcs_early" if early else "parser_top_fcs"
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.packet.test_parser",
               testcase=["corpus_with_stalls", "reset_mid_traffic", "fcs_frames"],
               extra_env={"PARSER_FCS": "1", "PARSER_EARLY": str(int(early))})


def test_golden_fcs_by_hand():
    """With ``fcs``, the rules read the frame without its last 4 bytes: a RoCEv2 frame with its zlib FCS is RoCEv2
    with the length before the FCS; without ``fcs`` the 4 bytes are a trailer (still RoCEv2, 4 bytes longer)."""
    import zlib
    from lbpipe.sim.packet.parser import parse
    body = bytes(12) + b"\x08\x00" + _ipv4(_udp(_bth(0x04, 0x77, 9) + bytes(8) + bytes(4)))
    frame = body + struct.pack("<I", zlib.crc32(body))
    assert len(body) == 14 + 20 + 8 + 12 + 8 + 4 == 66
    with_fcs, plain = parse(frame, fcs=True), parse(frame)
    assert (with_fcs["roce"], with_fcs["frame_len"], with_fcs["short"], with_fcs["icrc_off"]) == (1, 66, 0, 62)
    assert (plain["roce"], plain["frame_len"]) == (1, 70)
    assert parse(body, fcs=True)["truncated"] == 1 and parse(body, fcs=True)["frame_len"] == 62
    assert parse(bytes(3), fcs=True)["frame_len"] == 0 and parse(bytes(67), fcs=True)["short"] == 1
    assert parse(bytes(68), fcs=True)["short"] == 0


def test_golden_early_items_by_hand():
    """Early items, worked by hand: a frame of up to 128 bytes gets its late item; a longer one reads as saturated
    (``frame_len`` 65,535), so a frame cut inside its IP packet is predicted whole RoCEv2, and a frame with bytes
    after its IP packet is RoCEv2 either way."""
    from lbpipe.sim.packet.parser import parse
    ip = _ipv4(_udp(_bth(0x0A, 0x123, 7) + bytes(16) + bytes(1000 - 20 - 8 - 12 - 16 - 4) + bytes(4)))
    frame = bytes(12) + b"\x08\x00" + ip                       # 1,014 bytes, WRITE ONLY
    assert len(frame) == 1014
    late, early = parse(frame), parse(frame, early=True)
    assert (late["roce"], late["frame_len"], early["roce"], early["frame_len"]) == (1, 1014, 1, 65535)
    assert {**early, "frame_len": 1014} == late
    cut = frame[:640]
    assert (parse(cut)["roce"], parse(cut)["truncated"], parse(cut)["kind"]) == (0, 1, 0)
    assert (parse(cut, early=True)["roce"], parse(cut, early=True)["truncated"], parse(cut, early=True)["kind"],
            parse(cut, early=True)["psn"], parse(cut, early=True)["icrc_off"]) == (1, 0, 1, 7, 14 + 1000 - 4)
    small = frame[:129], frame[:128]
    assert parse(small[0], early=True)["frame_len"] == 65535 and parse(small[0])["frame_len"] == 129
    assert parse(small[1], early=True) == parse(small[1]) and parse(small[1])["truncated"] == 1


def test_every_parser_testcase_runs_in_a_profile():
    """No cocotb test of the parser bench is left out of both profiles (a testcase cocotb skips is invisible)."""
    import ast
    import lbpipe.tb.packet.test_parser as bench
    tree = ast.parse(open(bench.__file__).read())
    cases = {f.name for f in tree.body if isinstance(f, ast.AsyncFunctionDef)
             and any("cocotb.test" in ast.unparse(d) for d in f.decorator_list)}
    assert cases == set(DEFAULT_TESTCASES) | {"tag_wrap", "laps_fuzz", "fcs_frames"}


@pytest.mark.deep
def test_parser_cocotb_tag_wrap():
    top = ParserTop()
    path = write_verilog(top, name="parser_top", ports=top.ports())
    run_cocotb(path, toplevel="parser_top", test_module="lbpipe.tb.packet.test_parser", testcase="tag_wrap",
               extra_env={"PARSER_TAG_WRAP": "1"})


@pytest.mark.regression
@pytest.mark.parametrize("seed", range(4))
def test_parser_cocotb_laps_fuzz(seed):
    """Random LAPS ports (one build each) and 3,000 mutated LAPS frames each."""
    import random
    laps_port = random.Random(seed).choice([p for p in range(1, 65536) if p != 4791])
    top = ParserTop(laps_port=laps_port)
    path = write_verilog(top, name="parser_top", ports=top.ports())
    run_cocotb(path, toplevel="parser_top", test_module="lbpipe.tb.packet.test_parser", testcase="laps_fuzz",
               extra_env={"PARSER_LAPS_PORT": str(laps_port), "PARSER_LAPS_FUZZ": "3000",
                          "PARSER_LAPS_SEED": str(seed)})


# --- synthesis -------------------------------------------------------------------------------------------------------

@pytest.mark.synthesis
def test_parser_synthesis(tmp_path_factory):
    from lbpipe.synth import synthesize
    report = synthesize(Parser(), name="parser", workdir=tmp_path_factory.mktemp("parser_synth"))
    print({k: report[k] for k in ("lut", "ff", "carry8", "muxf", "logic_levels", "seconds")})
    print(report["critical_path"])
    assert report["logic_levels"] <= 6, report["critical_path"]


@pytest.mark.parametrize("early", [1, "yes", None])
def test_parser_early_must_be_bool(early):
    with pytest.raises(TypeError, match="early must be a bool"):
        Parser(early=early)
