# amaranth: UnusedElaboratable=no
"""The parser's LAPS shim: the ``laps_port`` parameter, the scapy layer the tests build frames with, and the golden
model :func:`lbpipe.sim.packet.parser.parse` on LAPS frames (the RTL is held to the golden model by the cocotb bench in
``tests/test_parser.py``, whose corpus carries LAPS frames on two ports).

Expected values are the ones the frames are built with, and offsets from the header sizes (Ethernet 14, tag 4,
IPv4 20 + options, IPv6 40, UDP 8, LAPS 12 + 4 per anchor); never from running a model.
"""

import pytest
from scapy.layers.inet import IP

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.packet.parser import LAPS_PORT, WINDOW_BYTES, Parser, meta_fields
from lbpipe.sim.packet.parser import parse
from lbpipe.tb.lib import packets
from lbpipe.tb.lib.packets import LapsHeader, laps_frame

OTHER = PacketKind.OTHER.value
SRC4, DST4 = "10.0.0.1", "10.0.0.2"
SRC6, DST6 = "2001:db8::1", "2001:db8:ffff::2"
LAPS_FIELDS = [name for name in meta_fields() if name.startswith("laps")]


def _laps(meta):
    return {name: meta[name] for name in LAPS_FIELDS}


def _no_laps(meta):
    return all(meta[name] == 0 for name in LAPS_FIELDS)


def _anchors(values):
    """Anchor i (s_{i+1}) in bits 32i+31:32i."""
    return sum(value << (32 * i) for i, value in enumerate(values))


def _frame(version=4, **kwargs):
    src, dst = (SRC4, DST4) if version == 4 else (SRC6, DST6)
    return bytes(laps_frame(src, dst, **kwargs))


# --- parameter ---------------------------------------------------------------------------------------------------

def test_laps_port_default():
    # 0xC1A5 is in RFC 6335's dynamic/private range (49152 to 65535); tb/lib/packets.py states it independently.
    assert LAPS_PORT == 0xC1A5 == 49573 == packets.LAPS_PORT
    assert 49152 <= LAPS_PORT <= 65535
    assert Parser().laps_port == LAPS_PORT
    assert Parser(laps_port=1).laps_port == 1 and Parser(laps_port=65535).laps_port == 65535


@pytest.mark.parametrize("laps_port, exc, message", [
    ("49573", TypeError, r"^LAPS port must be an integer, not '49573'$"),
    (49573.0, TypeError, r"^LAPS port must be an integer, not 49573\.0$"),
    (True, TypeError, r"^LAPS port must be an integer, not True$"),
    (None, TypeError, r"^LAPS port must be an integer, not None$"),
    (0, ValueError, r"^LAPS port must be from 1 to 65535, not 0$"),
    (-1, ValueError, r"^LAPS port must be from 1 to 65535, not -1$"),
    (65536, ValueError, r"^LAPS port must be from 1 to 65535, not 65536$"),
    (4791, ValueError, r"^LAPS port must not be RoCEv2's port 4791$"),
])
def test_laps_port_bad(laps_port, exc, message):
    with pytest.raises(exc, match=message):
        Parser(laps_port=laps_port)
    with pytest.raises(exc, match=message):
        parse(bytes(60), laps_port=laps_port)


def test_laps_port_in_the_registry():
    """``lbpipe ... parser --param laps_port=N`` reaches the component; the registry states the default itself (it
    does not import the hardware), so it is checked against the parser's."""
    from lbpipe.blocks import get_block, parse_params
    block = get_block("parser")
    assert block.defaults()["laps_port"] == LAPS_PORT
    params = block.resolve(parse_params(block, ["laps_port=0x1388"]))
    assert params == {"user_width": 1, "laps_port": 5000, "early": False, "fcs": False}
    assert block.build(**params).laps_port == 5000
    with pytest.raises(ValueError, match="RoCEv2"):
        block.build(**block.resolve({"laps_port": 4791}))


def test_laps_port_keyword_only():
    with pytest.raises(TypeError):
        parse(bytes(60), 0, LAPS_PORT)


# --- the scapy layer ---------------------------------------------------------------------------------------------

def test_laps_header_bytes_by_hand():
    header = LapsHeader(probe=1, ack=0, sr_idx=1, pid=0x1234, int_time=0x0000_0000_0102, anchors=[0xA0B0C0D0])
    assert bytes(header) == bytes.fromhex("81" "01" "1234" "000000000102" "0000" "a0b0c0d0")
    header = LapsHeader(probe=0, ack=1, reserved=3, pid=0xFFFF, int_time=(1 << 48) - 1, anchors=[1, 2, 3, 4])
    assert bytes(header)[:12] == bytes.fromhex("74" "00" "ffff" "ffffffffffff" "0000")
    assert len(bytes(header)) == 12 + 16
    # An explicit count disagrees with the anchors (a malformed header).
    assert bytes(LapsHeader(count=9, anchors=[5])) == bytes.fromhex("09" + "00" * 11 + "00000005")
    # It dissects what it builds.
    back = LapsHeader(bytes(LapsHeader(ack=1, sr_idx=7, pid=9, int_time=10, anchors=[11, 12])))
    assert (back.probe, back.ack, back.count, back.sr_idx, back.pid, back.int_time, back.anchors) == (
        0, 1, 2, 7, 9, 10, [11, 12])


def test_laps_frame_layout():
    frame = _frame(tags=(0x88A8, 0x8100), ip_options=8, anchors=[1], payload=b"xyz")
    assert frame[12:14] == b"\x88\xa8" and frame[16:18] == b"\x81\x00" and frame[20:22] == b"\x08\x00"
    assert frame[22] == 0x47                                   # IHL 7: 8 bytes of options
    l4 = 22 + 28
    assert int.from_bytes(frame[l4 + 2:l4 + 4], "big") == LAPS_PORT
    assert int.from_bytes(frame[l4 + 4:l4 + 6], "big") == 8 + 12 + 4 + 3
    assert frame[l4 + 8] == 0x01 and frame[-3:] == b"xyz"


# --- golden model: well-formed headers ---------------------------------------------------------------------------

def test_golden_laps_ipv4_by_hand():
    # Ethernet 14 + IPv4 20 + UDP 8 + LAPS 12 + 3 anchors 12 + payload 4 = 70 bytes; LAPS at 42, UDP length 36.
    anchors = [0x0A000001, 0x0A000002, 0xDEADBEEF]
    frame = _frame(probe=1, ack=0, sr_idx=2, pid=0xBEEF, time=0x0123456789AB, anchors=anchors, sport=0x1234,
                   payload=b"data")
    assert len(frame) == 70
    want = dict.fromkeys(meta_fields(), 0)
    want.update(
        kind=OTHER, tag=3, frame_len=70, ipv4=1, udp=1, l3_off=14, l4_off=34, src_ip=0x0A000001,
        dst_ip=0x0A000002, udp_sport=0x1234, udp_dport=49573, udp_len=36,
        laps=1, laps_probe=1, laps_ack=0, laps_count=3, laps_sr_idx=2, laps_pid=0xBEEF, laps_time=0x0123456789AB,
        laps_anchors=0x0A000001 | 0x0A000002 << 32 | 0xDEADBEEF << 64, laps_off=42,
    )
    assert parse(frame, 3) == want


def test_golden_laps_ipv6_ack_by_hand():
    # Ethernet 14 + tag 4 + IPv6 40 + UDP 8: LAPS at 66; no anchors, no payload: UDP length 20, frame 78 bytes.
    frame = _frame(6, tags=(0x8100,), probe=0, ack=1, sr_idx=0, pid=0x0001, time=17)
    meta = parse(frame)
    assert (meta["ipv6"], meta["vlans"], meta["l4_off"], meta["udp_len"], meta["frame_len"]) == (1, 1, 58, 20, 78)
    assert _laps(meta) == dict(laps=1, laps_bad=0, laps_probe=0, laps_ack=1, laps_count=0, laps_sr_idx=0,
                               laps_pid=1, laps_time=17, laps_anchors=0, laps_off=66)
    assert (meta["kind"], meta["roce"], meta["truncated"], meta["short"]) == (OTHER, 0, 0, 0)


@pytest.mark.parametrize("version, tags, options", [
    (4, (), 0), (4, (0x8100,), 0), (4, (0x88A8,), 0), (4, (0x88A8, 0x8100), 0), (4, (0x8100, 0x8100), 0),
    (4, (), 4), (4, (0x8100,), 20), (4, (0x88A8, 0x8100), 40),
    (6, (), 0), (6, (0x8100,), 0), (6, (0x88A8, 0x8100), 0),
])
@pytest.mark.parametrize("count", [0, 1, 4])
def test_golden_laps_offsets_and_fields(version, tags, options, count):
    anchors = [0x11111111 * (i + 1) for i in range(count)]
    frame = _frame(version, tags=tags, ip_options=options, probe=count & 1, ack=1 - (count & 1), sr_idx=count,
                   pid=0xA5A5, time=0xFEDCBA987654, anchors=anchors, payload=bytes(range(count)))
    l3 = 14 + 4 * len(tags)
    l4 = l3 + (20 + options if version == 4 else 40)
    meta = parse(frame)
    assert (meta["vlans"], meta["l3_off"], meta["l4_off"], meta["udp"]) == (len(tags), l3, l4, 1)
    assert meta["udp_len"] == 8 + 12 + 4 * count + count
    assert _laps(meta) == dict(laps=1, laps_bad=0, laps_probe=count & 1, laps_ack=1 - (count & 1),
                               laps_count=count, laps_sr_idx=count, laps_pid=0xA5A5, laps_time=0xFEDCBA987654,
                               laps_anchors=_anchors(anchors), laps_off=l4 + 8)


def test_golden_laps_deepest_header_fills_the_window():
    # Two tags, 40 bytes of IPv4 options, 4 anchors: the header ends at 22 + 60 + 8 + 28 = 118 bytes.
    anchors = [0xFFFFFFFF, 0x80000001, 0x7FFFFFFE, 0x00000001]
    frame = _frame(tags=(0x88A8, 0x8100), ip_options=40, probe=1, ack=1, sr_idx=255, pid=0xFFFF,
                   time=(1 << 48) - 1, anchors=anchors)
    assert len(frame) == 118 == WINDOW_BYTES
    meta = parse(frame)
    assert _laps(meta) == dict(laps=1, laps_bad=0, laps_probe=1, laps_ack=1, laps_count=4, laps_sr_idx=255,
                               laps_pid=0xFFFF, laps_time=(1 << 48) - 1, laps_anchors=_anchors(anchors), laps_off=90)


def test_golden_laps_reserved_bits_ignored():
    plain = parse(_frame(pid=5, time=6, anchors=[7]))
    frame = bytearray(_frame(reserved=3, pid=5, time=6, anchors=[7]))
    frame[42 + 10:42 + 12] = b"\xff\xff"                     # reserved bytes 10-11
    assert _laps(parse(bytes(frame))) == _laps(plain)
    assert _laps(plain)["laps"] == 1


def test_golden_laps_padding_and_trailing_bytes():
    frame = _frame(anchors=[9])                              # 58 bytes
    want = _laps(parse(frame))
    assert want["laps"] == 1 and want["laps_anchors"] == 9
    assert _laps(parse(frame + bytes(64 - len(frame)))) == want
    assert _laps(parse(frame + b"\xff" * 40)) == want


# --- golden model: malformed, cut, and not LAPS -------------------------------------------------------------------

@pytest.mark.parametrize("count", range(5, 16))
@pytest.mark.parametrize("version", [4, 6])
def test_golden_laps_count_above_four_is_bad(version, count):
    # Enough anchors present for the count: only the count is wrong.
    frame = _frame(version, count=count, probe=1, pid=3, time=4, anchors=list(range(1, count + 1)))
    meta = parse(frame)
    assert (meta["laps"], meta["laps_bad"], meta["udp"], meta["truncated"]) == (0, 1, 1, 0)
    assert all(meta[name] == 0 for name in LAPS_FIELDS if name != "laps_bad")
    assert (meta["kind"], meta["roce"]) == (OTHER, 0)


@pytest.mark.parametrize("count", range(5))
def test_golden_laps_udp_length_too_short_is_bad(count):
    anchors = list(range(100, 100 + count))
    need = 8 + 12 + 4 * count
    for udp_len in sorted({0, 7, 8, 9, 19, need - 4, need - 1}):
        if udp_len >= need:
            continue
        meta = parse(_frame(anchors=anchors, udp_len=udp_len, payload=bytes(8)))
        assert (meta["laps"], meta["laps_bad"], meta["udp_len"]) == (0, 1, udp_len), udp_len
        assert all(meta[name] == 0 for name in LAPS_FIELDS if name != "laps_bad")
    # Exactly the header, with bytes after the datagram in the IP packet: LAPS.
    meta = parse(_frame(anchors=anchors, udp_len=need, payload=bytes(8)))
    assert (meta["laps"], meta["laps_count"], meta["laps_anchors"]) == (1, count, _anchors(anchors))


def test_golden_laps_udp_length_past_the_ip_payload_is_not_judged():
    # The UDP header is bad (its length exceeds the IP payload), as RoCEv2 treats it: neither LAPS nor a bad LAPS
    # header.
    meta = parse(_frame(anchors=[1, 2], udp_len=8 + 12 + 8 + 1))
    assert (meta["udp"], meta["truncated"]) == (1, 0) and _no_laps(meta)


@pytest.mark.parametrize("version, tags, options", [(4, (), 0), (4, (0x88A8, 0x8100), 40), (6, (0x8100,), 0)])
def test_golden_laps_cut_inside_the_header_is_truncated(version, tags, options):
    frame = _frame(version, tags=tags, ip_options=options, count=None, anchors=[1, 2, 3, 4], pid=1)
    l4 = 14 + 4 * len(tags) + (20 + options if version == 4 else 40)
    assert parse(frame)["laps"] == 1
    for end in range(l4 + 8, len(frame)):                   # the UDP header whole, the LAPS header cut
        meta = parse(frame[:end])
        assert (meta["truncated"], meta["udp"]) == (1, 1), end
        assert _no_laps(meta), end
    # Cut inside the UDP header: not even UDP.
    meta = parse(frame[:l4 + 7])
    assert (meta["truncated"], meta["udp"]) == (1, 0) and _no_laps(meta)


def test_golden_laps_cut_with_a_bad_count_is_only_truncated():
    # A cut frame is not judged: its count byte is there, but the frame is truncated, not a bad LAPS header.
    frame = _frame(count=12, anchors=[1, 2])
    assert parse(frame)["laps_bad"] == 1
    meta = parse(frame[:-1])
    assert meta["truncated"] == 1 and _no_laps(meta)


@pytest.mark.parametrize("dport", [53, 4790, LAPS_PORT - 1, LAPS_PORT + 1, LAPS_PORT ^ 0x8000])
def test_golden_laps_other_port_is_not_laps(dport):
    meta = parse(_frame(dport=dport, anchors=[1]))
    assert (meta["udp"], meta["udp_dport"]) == (1, dport) and _no_laps(meta)


def test_golden_laps_port_parameter():
    on_default = _frame(anchors=[0xCAFE], pid=2)
    on_5000 = _frame(dport=5000, anchors=[0xCAFE], pid=2)
    assert parse(on_default)["laps"] == 1 and _no_laps(parse(on_5000))
    assert _no_laps(parse(on_default, laps_port=5000))
    meta = parse(on_5000, laps_port=5000)
    assert (meta["laps"], meta["laps_anchors"], meta["laps_pid"], meta["laps_off"]) == (1, 0xCAFE, 2, 42)
    # Every other field is what it is on the default port.
    assert {k: v for k, v in meta.items() if k != "udp_dport"} == {
        k: v for k, v in parse(on_default).items() if k != "udp_dport"}


@pytest.mark.parametrize("flags, frag", [("MF", 0), ("DF", 5), (0, 9), ("MF", 1)])
def test_golden_laps_fragments_are_not_laps(flags, frag):
    pkt = laps_frame(SRC4, DST4, anchors=[1, 2])
    pkt[IP].flags, pkt[IP].frag = flags, frag
    meta = parse(bytes(pkt))
    assert (meta["ipv4"], meta["frag"], meta["udp"]) == (1, 1, 0) and _no_laps(meta)


def test_golden_laps_needs_ip_and_udp():
    # IPv6 with a hop-by-hop header before UDP: extension headers are not followed.
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop
    from scapy.layers.l2 import Ether
    pkt = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IPv6(src=SRC6, dst=DST6) /
           IPv6ExtHdrHopByHop() / UDP(sport=1, dport=LAPS_PORT) / LapsHeader(anchors=[1]))
    meta = parse(bytes(pkt))
    assert (meta["ipv6"], meta["udp"]) == (1, 0) and _no_laps(meta)
    # TCP whose destination port happens to be the LAPS port.
    frame = bytearray(_frame(anchors=[1]))
    frame[14 + 9] = 6
    assert _no_laps(parse(bytes(frame)))


def test_golden_laps_never_reads_past_the_frame():
    frame = _frame(tags=(0x88A8, 0x8100), ip_options=40, anchors=[1, 2, 3, 4], payload=bytes(20))
    for k in range(1, len(frame) + 1):
        assert parse(frame[:k]) == parse(bytearray(frame[:k])), k


def test_golden_roce_frames_do_not_depend_on_the_laps_port():
    """RoCEv2 parsing is unchanged by LAPS: on every named frame the item is the same whatever ``laps_port`` is
    (none of them is on these ports), and every LAPS field is 0."""
    from lbpipe.tb.packet.test_parser import base_frames
    for name, frame in base_frames().items():
        items = [parse(frame, laps_port=port) for port in (LAPS_PORT, 1, 65535, 4792)]
        assert all(item == items[0] for item in items), name
        assert _no_laps(items[0]), name
