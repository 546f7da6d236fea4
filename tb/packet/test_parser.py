"""cocotb tests of :class:`lbpipe.hdl.packet.parser.Parser`, and the frames they (and ``tests/test_parser.py``) use.

The DUT is ``parser_top`` from ``tests/test_parser.py``: the parser with flat ports ``s_axis_*`` and ``m_axis_*``
(driven by cocotbext-axi's ``AxiStreamSource`` and ``AxiStreamSink``) and ``meta_valid``/``meta_ready``/
``meta_payload`` (taken by :class:`MetaMonitor`, ``PacketMeta`` packing, first field in the low bits).

Every frame is sent with its last beat's unused lanes filled with random bytes (``tkeep`` clear) and a random
``tuser`` per beat, so the checks see that the parser passes undefined lanes through untouched and never lets them
into an item. Checks: every ``m_axis`` frame equals the frame sent, lane for lane (``tdata``, ``tkeep``,
``tuser``); every item equals :func:`lbpipe.sim.packet.parser.parse` of its frame, in order, with ``tag`` counting
frames; the stream rule on ``meta``. Without idle cycles and back-pressure also: each item leaves exactly
``Parser.latency`` cycles after its frame's last beat was accepted, and back-to-back frames of 64, 65, 128, 129,
512, 1,518 and 9,216 bytes are accepted at one beat per clock.

Tests: ``corpus_with_stalls`` (idle cycles on ``s_axis``, back-pressure on ``m_axis`` and ``meta``, in random
bursts), ``corpus_at_line_rate`` (none: latency and throughput checked too), ``line_rate`` (beats per clock by
frame size), ``meta_does_not_wait_for_m_axis``, ``reset_mid_traffic``, ``long_frames`` (past the beat
counter: ``frame_len`` saturates), ``tag_wrap`` (65,540 frames) and ``laps_fuzz`` (:func:`laps_frames` with
``PARSER_LAPS_FUZZ`` mutated frames from seed ``PARSER_LAPS_SEED``, with stalls); the pytest entry points name the
testcases of each profile, so none is skipped unseen.

The parser's ``laps_port`` comes from ``PARSER_LAPS_PORT`` (default :data:`lbpipe.hdl.packet.parser.LAPS_PORT`): the
corpus builds its LAPS frames on that port and the golden model is run with it.
"""

import os
import random
import struct

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.hdl.packet.parser import LAPS_PORT, Parser, PacketMeta
from lbpipe.sim.packet.parser import parse
from lbpipe.trace import unpack
from lbpipe.tb.lib.harness import AxisBench

__all__ = ["corpus", "sized_frames", "base_frames", "opcode_sweep", "laps_frames", "with_tags", "with_ip_options",
           "LINE_RATE_SIZES"]

BEAT = 64
#: Frame sizes whose back-to-back throughput is measured.
LINE_RATE_SIZES = (64, 65, 128, 129, 512, 1518, 9216)

_ETH = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
_V4 = ("10.0.0.1", "10.0.0.2")
_V6 = ("2001:db8::1", "2001:db8:ffff::2")


# -- frames ---------------------------------------------------------------------------------------------------------

def with_tags(frame, tpids, vid=5):
    """``frame`` with tags ``tpids`` (outermost first) inserted after the MAC addresses."""
    tags = b"".join(struct.pack("!HH", tpid, vid + i) for i, tpid in enumerate(tpids))
    return frame[:12] + tags + frame[12:]


def with_ip_options(frame, length, l3=14):
    """An IPv4 ``frame`` with ``length`` bytes (a multiple of 4) of NOP options added to the IP header at ``l3``;
    IHL and total length follow (the checksum and the ICRC go stale, which a parser does not check)."""
    data = bytearray(frame)
    data[l3] += length // 4
    struct.pack_into("!H", data, l3 + 2, struct.unpack_from("!H", data, l3 + 2)[0] + length)
    return bytes(data[:l3 + 20] + b"\x01" * length + data[l3 + 20:])


def _set(frame, offset, value, size=1):
    data = bytearray(frame)
    data[offset:offset + size] = value.to_bytes(size, "big")
    return bytes(data)


def _roce(version=4, **kwargs):
    from lbpipe.tb.lib.packets import roce_data
    src, dst = _V4 if version == 4 else _V6
    return bytes(roce_data(src, dst, kwargs.pop("sport", 49152), kwargs.pop("dqpn", 0x456), kwargs.pop("psn", 0x10),
                           src_mac=_ETH["src"], dst_mac=_ETH["dst"], **kwargs))


def base_frames():
    """Named whole frames: RoCEv2 of every kind on IPv4 and IPv6, and frames the parser must pass as OTHER."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop
    from scapy.layers.l2 import ARP, Ether
    from scapy.packet import Raw
    from lbpipe.tb.lib.packets import (RC_RDMA_READ_REQUEST, RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_MIDDLE, RC_RDMA_WRITE_ONLY,
                          RC_SEND_ONLY, roce_ack, roce_cnp, roce_nak)
    frames = {}
    for version, (src, dst) in ((4, _V4), (6, _V6)):
        opts = dict(src_mac=_ETH["src"], dst_mac=_ETH["dst"])
        v = f"v{version}"
        frames[f"{v} write first"] = _roce(version, opcode=RC_RDMA_WRITE_FIRST, payload_len=64)
        frames[f"{v} write middle"] = _roce(version, opcode=RC_RDMA_WRITE_MIDDLE, payload_len=256, psn=0xFFFFFF)
        frames[f"{v} write only"] = _roce(version, opcode=RC_RDMA_WRITE_ONLY, payload_len=100, ackreq=1)
        frames[f"{v} write only imm"] = _roce(version, opcode=0x0B, payload_len=8, imm=0x12345678)
        frames[f"{v} send only"] = _roce(version, opcode=RC_SEND_ONLY, payload_len=31, dqpn=0xABCDEF)
        frames[f"{v} send imm"] = _roce(version, opcode=0x05, payload_len=4)
        frames[f"{v} read request"] = _roce(version, opcode=RC_RDMA_READ_REQUEST, dma_len=4096)
        frames[f"{v} uc write only imm"] = _roce(version, opcode=0x2B, payload_len=12)
        frames[f"{v} checksum"] = _roce(version, opcode=RC_SEND_ONLY, payload_len=16, udp_chksum=None)
        frames[f"{v} ack"] = bytes(roce_ack(src, dst, 49153, 0x456, 0x10, msn=1, **opts))
        frames[f"{v} ack credits"] = bytes(roce_ack(src, dst, 49153, 0x456, 0x10, msn=7, syndrome=0x1F, **opts))
        frames[f"{v} nak"] = bytes(roce_nak(src, dst, 49154, 0x123, 0x0D, msn=0xFFFFFF, **opts))
        frames[f"{v} nak invalid"] = bytes(roce_nak(src, dst, 49154, 0x123, 0x0D, syndrome=0x61, **opts))
        frames[f"{v} rnr nak"] = bytes(roce_nak(src, dst, 49154, 0x123, 0x0D, syndrome=0x21, **opts))
        frames[f"{v} cnp"] = bytes(roce_cnp(src, dst, 49155, 0x77, **opts))
    # Tags and IPv4 options.
    frames["v4 one tag"] = with_tags(frames["v4 write only"], [0x8100])
    frames["v4 s-tag"] = with_tags(frames["v4 ack"], [0x88A8])
    frames["v4 two tags"] = with_tags(frames["v4 write only imm"], [0x88A8, 0x8100])
    frames["v4 two c-tags"] = with_tags(frames["v4 nak"], [0x8100, 0x8100])
    frames["v6 two tags"] = with_tags(frames["v6 read request"], [0x88A8, 0x8100])
    for length in (4, 20, 40):
        frames[f"v4 options {length}"] = with_ip_options(frames["v4 write first"], length)
    frames["v4 two tags options 40"] = with_tags(with_ip_options(frames["v4 write only imm"], 40), [0x88A8, 0x8100])
    frames["v4 two tags options 40 ack"] = with_tags(with_ip_options(frames["v4 ack"], 40), [0x8100, 0x8100])
    # Other transports and headers (OTHER, with what was found).
    eth = Ether(**_ETH)
    frames["tcp"] = bytes(eth / IP(src=_V4[0], dst=_V4[1]) / TCP(sport=1, dport=2) / Raw(bytes(40)))
    frames["udp other port"] = bytes(eth / IP(src=_V4[0], dst=_V4[1]) / UDP(sport=1, dport=53) / Raw(bytes(20)))
    frames["udp v6 other port"] = bytes(eth / IPv6(src=_V6[0], dst=_V6[1]) / UDP(sport=1, dport=4790) / Raw(b"x"))
    frames["arp"] = bytes(eth / ARP(psrc=_V4[0], pdst=_V4[1], hwsrc=_ETH["src"]))
    frames["lldp"] = bytes(Ether(type=0x88CC, **_ETH) / Raw(bytes(50)))
    frames["v6 tcp"] = bytes(eth / IPv6(src=_V6[0], dst=_V6[1]) / TCP() / Raw(bytes(8)))
    frames["v6 hop-by-hop"] = bytes(eth / IPv6(src=_V6[0], dst=_V6[1]) / IPv6ExtHdrHopByHop() /
                                    UDP(sport=1, dport=4791) / BTH(opcode=4) / Raw(bytes(8)))
    first_fragment = IP(src=_V4[0], dst=_V4[1], flags="MF") / UDP(sport=1, dport=4791) / BTH(opcode=4) / Raw(bytes(32))
    frames["fragment first"] = bytes(eth / first_fragment)
    frames["fragment middle"] = bytes(eth / IP(src=_V4[0], dst=_V4[1], flags="MF", frag=4, proto=17) / Raw(bytes(40)))
    frames["fragment last"] = bytes(eth / IP(src=_V4[0], dst=_V4[1], frag=9, proto=17) / Raw(bytes(40)))
    frames["three tags"] = with_tags(frames["v4 ack"], [0x88A8, 0x8100, 0x8100])
    frames["inner s-tag"] = with_tags(frames["v4 ack"], [0x8100, 0x88A8])
    frames["tag 0x9100"] = with_tags(frames["v4 ack"], [0x9100])
    # Malformed: each breaks one rule of the golden model.
    ack = frames["v4 ack"]
    frames["ip version 5"] = _set(ack, 14, 0x55)
    frames["ihl 4"] = _set(ack, 14, 0x44)
    frames["v6 version 4"] = _set(frames["v6 ack"], 14, 0x40)
    frames["tver 1"] = _set(frames["v4 write only"], 14 + 20 + 8 + 1, 0x01)
    frames["udp len short"] = _set(ack, 14 + 20 + 4, 8 + 12 + 4 + 3, 2)       # AETH does not fit
    frames["udp len no icrc"] = _set(frames["v4 write middle"], 14 + 20 + 4, 8 + 12 + 3, 2)
    frames["udp len long"] = _set(ack, 14 + 20 + 4, 8 + 12 + 4 + 4 + 1, 2)    # beyond the IP payload
    frames["udp len 7"] = _set(ack, 14 + 20 + 4, 7, 2)
    frames["ip total small"] = _set(ack, 14 + 2, 20 + 7, 2)                   # no room for UDP
    frames["ip total large"] = _set(ack, 14 + 2, len(ack) - 14 + 1, 2)       # cut in the payload
    frames["v6 plen large"] = _set(frames["v6 ack"], 14 + 4, len(frames["v6 ack"]) - 54 + 1, 2)
    frames["v6 plen 7"] = _set(frames["v6 ack"], 14 + 4, 7, 2)
    frames["padded ack"] = ack + bytes(64 - len(ack))                      # Ethernet padding after the IP packet
    frames["ack trailing bytes"] = ack + bytes(range(1, 30))
    # Opcodes with other extension headers, by hand: BTH opcode, then the header's bytes, then the ICRC.
    for name, opcode, ext in (("atomic", 0x13, 28), ("atomic ack", 0x12, 12), ("ud send", 0x64, 8),
                              ("ud send imm", 0x65, 12), ("reserved opcode", 0x1F, 0), ("read response", 0x0D, 4)):
        # scapy appends the ICRC; a short variant lacks the header's last 4 bytes.
        for short in ((0, 1) if ext else (0,)):
            payload = bytes(range(ext - 4 * short))
            frames[f"{name}{' short' * short}"] = bytes(
                eth / IP(src=_V4[0], dst=_V4[1]) / UDP(sport=7, dport=4791, chksum=0) /
                BTH(opcode=opcode, dqpn=0x10203, psn=0x40506) / Raw(payload))
    return frames


def sized_frames(size, count, rng):
    """``count`` frames of exactly ``size`` bytes: RoCEv2 WRITE MIDDLE frames with Ethernet padding (at 62 bytes
    and more), UDP frames on another port and random bytes, in turn."""
    from lbpipe.tb.lib.packets import RC_RDMA_WRITE_MIDDLE
    frames = []
    for i in range(count):
        if i % 3 == 0 and size >= 62:
            frame = _roce(4, opcode=RC_RDMA_WRITE_MIDDLE, payload_len=(size - 58) // 4 * 4, psn=i)
        elif i % 3 == 1 and size >= 42:
            body = bytes(rng.getrandbits(8) for _ in range(size - 42))
            frame = (bytes.fromhex("020000000002020000000001 0800".replace(" ", "")) +
                     struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(body), 0, 0x4000, 64, 17, 0,
                                 bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) +
                     struct.pack("!HHHH", 1000 + i, 53, 8 + len(body), 0) + body)
        else:
            frame = b""
        frame += bytes(rng.getrandbits(8) for _ in range(size - len(frame)))
        frames.append(frame)
    return frames


def _mutate(frame, rng, reach=110):
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(min(len(data), reach))
        data[at] = rng.choice([rng.getrandbits(8), 0, 0xFF, data[at] ^ (1 << rng.randrange(8))])
    if rng.random() < 0.3:
        data = data[:rng.randint(1, len(data))]
    return bytes(data)


def opcode_sweep(rng):
    """Every BTH opcode twice: with 28 bytes after the BTH (room for any extension headers) and with a random
    multiple of 4 from 0 to 28 (too few for some), random AETH-position bytes, and TVer 1 now and then."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    frames = []
    for opcode in range(256):
        for ext in (28, 4 * rng.randrange(8)):
            after = bytes([rng.choice([0x00, 0x1F, 0x20, 0x60, 0x61, 0x80, rng.getrandbits(8)])])
            after += bytes(rng.getrandbits(8) for _ in range(ext - 1)) if ext else b""
            frame = bytes(Ether(**_ETH) / IP(src=_V4[0], dst=_V4[1]) / UDP(sport=opcode, dport=4791, chksum=0) /
                          BTH(opcode=opcode, dqpn=rng.getrandbits(24), psn=rng.getrandbits(24),
                              version=int(rng.random() < 0.1)) / Raw(after[:ext]))
            frames.append(frame)
    return frames


def laps_frames(rng, laps_port=LAPS_PORT, *, fuzz=100):
    """LAPS frames on ``laps_port``: well formed (IPv4 and IPv6, 0 to 2 tags, IPv4 options, 0 to 4 anchors, random
    fields and reserved bits, payloads to two beats and one 1,518-byte frame), counts 5 to 15, UDP lengths too
    short for the header, longer than the IP payload and below 8, fragments, every prefix of the deepest header
    (two tags, 40 bytes of options, 4 anchors: it ends at byte 118), near-miss ports and the other configuration's
    port, and ``fuzz`` frames with random bytes changed up to byte 120 (some cut short)."""
    from scapy.layers.inet import IP
    from lbpipe.tb.lib.packets import laps_frame

    def build(version=4, port=laps_port, **kwargs):
        src, dst = _V4 if version == 4 else _V6
        fields = dict(probe=rng.getrandbits(1), ack=rng.getrandbits(1), reserved=rng.getrandbits(2),
                      sr_idx=rng.getrandbits(8), pid=rng.getrandbits(16), time=rng.getrandbits(48),
                      sport=rng.getrandbits(16))
        fields.update(kwargs)
        if "anchors" not in fields:
            fields["anchors"] = [rng.getrandbits(32) for _ in range(rng.randint(0, 4))]
        return laps_frame(src, dst, dport=port, **fields)

    def payload(most=100):
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, most)))

    good, frames = [], []
    for version in (4, 6):
        for tags in ((), (0x8100,), (0x88A8,), (0x88A8, 0x8100)):
            for options in ((0, 4, 20, 40) if version == 4 else (0,)):
                for count in range(5):
                    anchors = [rng.getrandbits(32) for _ in range(count)]
                    good.append(bytes(build(version, tags=tags, ip_options=options, anchors=anchors,
                                            payload=payload())))
    good.append(bytes(build(6, tags=(0x88A8, 0x8100), payload=payload(1400))))
    good.append(bytes(build(4, anchors=[0xFFFFFFFF] * 4, probe=1, ack=1, pid=0xFFFF, time=(1 << 48) - 1,
                            sr_idx=0xFF, reserved=3)))
    frames += good
    # One-beat frames (54 to 64 bytes), padded to the minimum frame, and with trailing bytes after the IP packet.
    for count in range(3):
        short = bytes(build(4, anchors=[rng.getrandbits(32) for _ in range(count)], payload=b""))
        good.append(short)
        frames += [short, short + bytes(64 - len(short))]
    good.append(bytes(build(4, anchors=[1, 2], payload=b"ab")))
    frames += [good[-1], bytes(build(4, anchors=[1, 2], payload=b"")) + bytes(range(1, 20))]
    bad = []
    for count in range(5, 16):
        for version in (4, 6):
            bad.append(bytes(build(version, count=count, anchors=[rng.getrandbits(32) for _ in range(count % 5)],
                                   payload=payload(70))))
    for count in range(5):
        anchors = [rng.getrandbits(32) for _ in range(count)]
        need = 8 + 12 + 4 * count
        for udp_len in sorted({0, 7, 8, 9, 19, need - 4, need - 1}):
            if udp_len < need:
                bad.append(bytes(build(rng.choice((4, 6)), anchors=anchors, udp_len=udp_len, payload=payload(8))))
        # Longer than the IP payload (a bad UDP header), and exactly the header.
        bad.append(bytes(build(4, anchors=anchors, udp_len=need + 1)))
        bad.append(bytes(build(6, anchors=anchors, udp_len=need, payload=payload(8))))
    frames += bad
    for flags, frag in (("MF", 0), ("DF", 5), (0, 9)):
        pkt = build(4, anchors=[1, 2, 3])
        pkt[IP].flags, pkt[IP].frag = flags, frag
        frames.append(bytes(pkt))
    deep = bytes(build(4, tags=(0x88A8, 0x8100), ip_options=40, anchors=[rng.getrandbits(32) for _ in range(4)],
                       payload=bytes(12)))
    frames += [deep[:k] for k in range(1, len(deep))]
    v6 = bytes(build(6, tags=(0x8100,), anchors=[7, 8, 9], payload=b""))
    frames += [v6[:k] for k in range(58, len(v6))]
    other = 4790 if laps_port == LAPS_PORT else LAPS_PORT
    for port in sorted({other, laps_port ^ 1, laps_port ^ 0x8000, laps_port ^ 0x0100}):
        if port != 4791:
            frames.append(bytes(build(rng.choice((4, 6)), port=port, anchors=[3, 4])))
    sources = good + bad
    frames += [_mutate(rng.choice(sources), rng, reach=120) for _ in range(fuzz)]
    return frames


def corpus(seed=1, *, fuzz=300, laps_port=LAPS_PORT):
    """The functional corpus: the named frames, every opcode (:func:`opcode_sweep`), every prefix of four frames
    that reach deep (two tags and 40 bytes of IPv4 options, IPv6 with and without two tags, one tag), frames of 1
    to 66 bytes, 1,518 and 9,216 bytes, and ``fuzz`` frames with random header bytes changed (some also cut
    short); then :func:`laps_frames` on ``laps_port`` (drawn from a random generator of their own, so the frames
    before them do not depend on LAPS)."""
    rng = random.Random(seed)
    named = base_frames()
    frames = list(named.values()) + opcode_sweep(rng)
    for name in ("v4 two tags options 40", "v6 two tags", "v6 ack", "v4 one tag"):
        frame = named[name]
        frames += [frame[:k] for k in range(1, len(frame))]
    frames += [named["v4 ack"][:k] + bytes(max(0, k - 62)) for k in range(56, 67)]
    frames += [bytes(rng.getrandbits(8) for _ in range(k)) for k in (1, 13, 14, 59, 60, 61, 63, 64)]
    for size in (1518, 9216):
        frames += sized_frames(size, 3, rng)
        frames.append(with_tags(_roce(6, payload_len=size - 114), [0x88A8, 0x8100]))
    sources = list(named.values())
    frames += [_mutate(rng.choice(sources), rng) for _ in range(fuzz)]
    frames += laps_frames(random.Random(1000 + seed), laps_port, fuzz=fuzz // 3)
    return frames


# -- testbench --------------------------------------------------------------------------------------------------------

class MetaMonitor:
    """Takes items from ``meta_*`` (``ready`` held low with probability ``backpressure`` per cycle), checks that an
    offered item is neither withdrawn nor changed before it is taken, and records the cycle of every transfer on
    ``meta`` and of every beat accepted on ``s_axis``."""

    def __init__(self, dut, *, backpressure=0.0, rng=None):
        self.dut = dut
        self.layout = PacketMeta()
        self.backpressure = backpressure
        self.rng = rng or random.Random(0)
        self.items, self.cycles, self.errors = [], [], []
        self.beat_cycles, self.last_cycles = [], []
        self.window_cycles = []     # beats that complete a frame's header window: its second, or its only one
        self._index = 0             # index of the next accepted beat in its frame
        self.cycle = 0
        dut.meta_ready.value = 0
        self._task = cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        ready, held = 0, None
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if int(dut.rst.value):
                held, ready, self._index = None, 0, 0
                dut.meta_ready.value = 0
                continue
            if int(dut.rst.value) == 0 and int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                self.beat_cycles.append(self.cycle)
                last = int(dut.s_axis_tlast.value)
                if self._index == 1 or (self._index == 0 and last):
                    self.window_cycles.append(self.cycle)
                self._index = 0 if last else self._index + 1
                if last:
                    self.last_cycles.append(self.cycle)
            valid = int(dut.meta_valid.value)
            word = int(dut.meta_payload.value) if valid else None
            if held is not None and word != held:
                self.errors.append(f"cycle {self.cycle}: meta item withdrawn or changed while waiting for ready")
            held = None
            if valid:
                if ready:
                    self.items.append(unpack(self.layout, word))
                    self.cycles.append(self.cycle)
                else:
                    held = word
            ready = 0 if (self.backpressure and self.rng.random() < self.backpressure) else 1
            dut.meta_ready.value = ready


class TB(AxisBench):
    """Clock, reset, the AXI4-Stream source and sink and the metadata monitor around ``parser_top``."""

    def __init__(self, dut, *, stalls=False, seed=1):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.3) if stalls else None)
        self.meta = MetaMonitor(dut, backpressure=0.3 if stalls else 0.0, rng=random.Random(self.rng.random()))
        self.user_width = len(dut.s_axis_tuser)
        self.laps_port = int(os.environ.get("PARSER_LAPS_PORT", str(LAPS_PORT)))
        self.early = os.environ.get("PARSER_EARLY", "0") == "1"
        self.fcs = os.environ.get("PARSER_FCS", "0") == "1"
        # The beats an item's latency counts from: the last (late items) or the one completing the window.
        self.item_beats = self.meta.window_cycles if self.early else self.meta.last_cycles
        self.sent = []

    def send(self, frame):
        """Queue ``frame``; its last beat's unused lanes carry random bytes and each beat a random ``tuser``."""
        from cocotbext.axi import AxiStreamFrame
        pad = -len(frame) % BEAT
        tdata = bytes(frame) + bytes(self.rng.getrandbits(8) for _ in range(pad))
        tkeep = [1] * len(frame) + [0] * pad
        tuser = []
        for _ in range(len(tdata) // BEAT):
            tuser += [self.rng.getrandbits(self.user_width)] * BEAT
        self.sent.append(AxiStreamFrame(tdata, tkeep=tkeep, tuser=tuser))
        self.source.send_nowait(AxiStreamFrame(tdata, tkeep=list(tkeep), tuser=list(tuser)))

    async def collect(self, frames, first_tag=0, limit=None):
        """Wait for ``frames`` (already sent) on ``m_axis`` and their items on ``meta``, and return the errors."""
        errors = []
        expected = [parse(frame, (first_tag + i) & 0xFFFF, laps_port=self.laps_port, early=self.early, fcs=self.fcs)
                    for i, frame in enumerate(frames)]
        start = len(self.meta.items)
        limit = limit or 100_000 + 4 * sum(len(f) // BEAT + 2 for f in frames)
        sent = self.sent[-len(frames):]
        for i, want in enumerate(sent):
            got = await self.sink.recv(compact=False)
            if (bytes(got.tdata), list(got.tkeep), list(got.tuser)) != (bytes(want.tdata), want.tkeep, want.tuser):
                errors.append(f"frame {i} ({len(frames[i])} bytes): m_axis differs from s_axis")
        for _ in range(limit):
            if len(self.meta.items) >= start + len(frames):
                break
            await RisingEdge(self.dut.clk)
        got_items = self.meta.items[start:]
        if len(got_items) != len(frames):
            errors.append(f"{len(got_items)} meta items for {len(frames)} frames")
        for i, (got, want) in enumerate(zip(got_items, expected)):
            diff = {k: (got[k], v) for k, v in want.items() if got[k] != v}
            if diff:
                errors.append(f"frame {i} ({frames[i][:64].hex()}...): (rtl, golden) differ in {diff}")
        errors += self.meta.errors
        return errors


async def _wait_idle(tb, cycles=16):
    await ClockCycles(tb.dut.clk, cycles)


@cocotb.test()
async def corpus_with_stalls(dut):
    """The corpus with idle cycles on s_axis and back-pressure on m_axis and meta."""
    tb = TB(dut, stalls=True, seed=11)
    await tb.reset()
    frames = corpus(seed=3, laps_port=tb.laps_port)
    for frame in frames:
        tb.send(frame)
    errors = await tb.collect(frames)
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def corpus_at_line_rate(dut):
    """The corpus without idle cycles or back-pressure: items as golden, latency exact, one beat per clock."""
    tb = TB(dut, stalls=False, seed=12)
    await tb.reset()
    frames = corpus(seed=4, fuzz=200, laps_port=tb.laps_port)
    for frame in frames:
        tb.send(frame)
    errors = await tb.collect(frames)
    lat = [c - a for a, c in zip(tb.item_beats, tb.meta.cycles)]
    if set(lat) != {Parser.latency}:
        errors.append(f"latencies {sorted(set(lat))}, datasheet says {Parser.latency}")
    beats = sum(-(-len(f) // BEAT) for f in frames)
    span = tb.meta.beat_cycles[-1] - tb.meta.beat_cycles[0] + 1
    if (len(tb.meta.beat_cycles), span) != (beats, beats):
        errors.append(f"{len(tb.meta.beat_cycles)} beats accepted in {span} cycles, {beats} sent")
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of each size: beats accepted per clock, measured from the first beat to the last."""
    tb = TB(dut, stalls=False, seed=13)
    await tb.reset()
    rng = random.Random(5)
    errors, rates = [], {}
    tag = 0
    for size in LINE_RATE_SIZES:
        count = max(4, min(64, 4096 // size))
        frames = sized_frames(size, count, rng)
        first = len(tb.meta.beat_cycles)
        for frame in frames:
            tb.send(frame)
        errors += await tb.collect(frames, first_tag=tag)
        tag += count
        cycles = tb.meta.beat_cycles[first:]
        rates[size] = len(cycles) / (cycles[-1] - cycles[0] + 1)
        if len(cycles) != count * -(-size // BEAT):
            errors.append(f"{size} bytes: {len(cycles)} beats accepted, {count * -(-size // BEAT)} sent")
        await _wait_idle(tb)
    dut._log.info("beats accepted per clock: %s", ", ".join(f"{s} B: {r:.3f}" for s, r in rates.items()))
    errors += [f"{s} bytes: {r:.4f} beats per clock" for s, r in rates.items() if r != 1.0]
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def meta_does_not_wait_for_m_axis(dut):
    """With m_axis stopped, the items of frames whose last beat was accepted still come out, on time."""
    tb = TB(dut, stalls=False, seed=14)
    await tb.reset()
    tb.sink.pause = True
    frames = [base_frames()["v4 ack"]]
    tb.send(frames[0])
    await ClockCycles(dut.clk, 4 + Parser.latency)
    errors = []
    if len(tb.meta.items) != 1:
        errors.append(f"{len(tb.meta.items)} items with m_axis stopped, expected 1")
    elif tb.meta.cycles[0] - tb.item_beats[0] != Parser.latency:
        errors.append(f"latency {tb.meta.cycles[0] - tb.item_beats[0]} with m_axis stopped")
    if int(dut.s_axis_tready.value):
        errors.append("s_axis ready while the m_axis register is full and stopped")
    tb.sink.pause = False
    got = await tb.sink.recv(compact=False)
    if bytes(got.tdata) != bytes(tb.sent[0].tdata):
        errors.append("m_axis frame differs")
    want = parse(frames[0], 0, laps_port=tb.laps_port, early=tb.early)
    if tb.meta.items and tb.meta.items[0] != want:
        errors.append(f"item {tb.meta.items[0]} is not {want}")
    assert not errors, "\n".join(errors)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight: items before it are a prefix of the golden items; after it the parser starts
    afresh (tags from 0, no stale window or item) on a new run of frames."""
    from lbpipe.sim.packet.parser import parse_frames
    tb = TB(dut, stalls=True, seed=15)
    await tb.reset()
    frames = corpus(seed=6, fuzz=40, laps_port=tb.laps_port)[:160]
    for frame in frames:
        tb.send(frame)
    await ClockCycles(dut.clk, 150)
    tb.source.clear()
    await tb.reset()
    errors = []
    before = list(tb.meta.items)
    dut._log.info("%d of %d items out before the reset", len(before), len(frames))
    golden = parse_frames(frames, laps_port=tb.laps_port, early=tb.early, fcs=tb.fcs)
    if not 0 < len(before) < len(frames) or before != golden[:len(before)]:
        errors.append(f"{len(before)} items before the reset, not a golden prefix of a partial run")
    while not tb.sink.empty():
        tb.sink.recv_nowait()
    frames = corpus(seed=7, fuzz=40, laps_port=tb.laps_port)[:120]
    for frame in frames:
        tb.send(frame)
    errors += await tb.collect(frames, first_tag=0)
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def long_frames(dut):
    """Frames past the beat counter's range (1,023 full beats before the last): ``frame_len`` saturates at 65,535
    and the items stay the golden model's, with frames before and after them parsed as usual."""
    tb = TB(dut, stalls=False, seed=17)
    await tb.reset()
    head = base_frames()["v4 ack"]
    frames = [head]
    for size in (1023 * BEAT, 1023 * BEAT + 1, 65535, 65536, 1024 * BEAT + 1, 1030 * BEAT + 7):
        frames += [head + bytes(size - len(head)), head]
    for frame in frames:
        tb.send(frame)
    errors = await tb.collect(frames)
    lengths = [item["frame_len"] for item in tb.meta.items[-len(frames):]]
    # Early items of frames over 128 bytes read the length as saturated (unknown when the item leaves).
    if lengths[1:13:2] != ([65535] * 6 if tb.early else [65472, 65473, 65535, 65535, 65535, 65535]):
        errors.append(f"frame_len of the long frames: {lengths[1:13:2]}")
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def tag_wrap(dut):
    """65,540 one-beat frames: the tag wraps from 0xFFFF to 0 (run by the regression only: about 65,000 cycles)."""
    tb = TB(dut, stalls=False, seed=16)
    await tb.reset()
    frame = base_frames()["v4 ack"]
    count = (1 << 16) + 4
    from cocotbext.axi import AxiStreamFrame
    for _ in range(count):
        tb.source.send_nowait(AxiStreamFrame(frame))
    for k in range(count):
        await tb.recv(f"frame {k} of {count}")
    await ClockCycles(dut.clk, Parser.latency + 2)
    tags = [item["tag"] for item in tb.meta.items]
    assert tags == [k & 0xFFFF for k in range(count)], "tags do not count frames modulo 2**16"
    want = parse(frame, 0, laps_port=tb.laps_port)
    assert all({**item, "tag": 0} == want for item in tb.meta.items[::4096]), "items differ"


@cocotb.test()
async def laps_fuzz(dut):
    """LAPS frames with many random mutations, idle cycles and back-pressure (run by the regression only)."""
    seed = int(os.environ.get("PARSER_LAPS_SEED", "1"))
    tb = TB(dut, stalls=True, seed=seed)
    await tb.reset()
    frames = laps_frames(random.Random(seed), tb.laps_port, fuzz=int(os.environ.get("PARSER_LAPS_FUZZ", "300")))
    for frame in frames:
        tb.send(frame)
    errors = await tb.collect(frames)
    dut._log.info("%d LAPS frames on port %d: %d LAPS, %d malformed", len(frames), tb.laps_port,
                  sum(parse(f, laps_port=tb.laps_port)["laps"] for f in frames),
                  sum(parse(f, laps_port=tb.laps_port)["laps_bad"] for f in frames))
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def item_timing_by_mode(dut):
    """A 9,216-byte RoCEv2 data frame and a 640-byte frame cut short of the 1,000-byte IP packet its header announces:
    late items come ``latency`` cycles after the last beat, the cut frame OTHER and truncated; early items come
    ``latency`` cycles after the second beat, long before the last, the cut frame predicted RoCEv2 and whole, and both
    with ``frame_len`` 65,535 (expectations written here, by hand)."""
    tb = TB(dut, stalls=False, seed=18)
    await tb.reset()
    head = base_frames()["v4 ack"]
    jumbo = sized_frames(9216, 1, random.Random(1))[0]               # RoCEv2 WRITE MIDDLE and 2 bytes after
    # RDMA WRITE ONLY: 20 IPv4 + 8 UDP + 12 BTH + 16 RETH + payload + 4 ICRC = a 1,000-byte IPv4 packet ...
    cut = _roce(payload_len=1000 - 20 - 8 - 12 - 16 - 4)[:640]        # ... cut to 640 bytes of frame
    frames = [jumbo, cut, head]
    for frame in frames:
        tb.send(frame)
    errors = await tb.collect(frames)
    items = tb.meta.items[-3:]
    if len(jumbo) != 9216 or (items[0]["kind"], items[0]["roce"]) != (1, 1):
        errors.append(f"jumbo: {len(jumbo)} bytes, kind {items[0]['kind']}, roce {items[0]['roce']}")
    beats = [tb.meta.beat_cycles[0], tb.meta.beat_cycles[1], tb.meta.last_cycles[0]]
    if tb.early:
        if (items[0]["frame_len"], items[1]["frame_len"]) != (65535, 65535):
            errors.append(f"early frame_len {items[0]['frame_len']}, {items[1]['frame_len']}, not 65535")
        if (items[1]["roce"], items[1]["truncated"]) != (1, 0):
            errors.append(f"early item of the cut frame: roce {items[1]['roce']}, truncated {items[1]['truncated']}")
        if tb.meta.cycles[-3] != beats[1] + Parser.latency or tb.meta.cycles[-3] >= beats[2]:
            errors.append(f"early item at {tb.meta.cycles[-3]}, beats 1 and last at {beats[1:]}")
    else:
        if (items[0]["frame_len"], items[1]["frame_len"]) != (9216, 640):
            errors.append(f"late frame_len {items[0]['frame_len']}, {items[1]['frame_len']}")
        if (items[1]["roce"], items[1]["truncated"], items[1]["kind"]) != (0, 1, 0):
            errors.append(f"late item of the cut frame: roce {items[1]['roce']}, truncated {items[1]['truncated']}")
        if tb.meta.cycles[-3] != beats[2] + Parser.latency:
            errors.append(f"late item at {tb.meta.cycles[-3]}, last beat at {beats[2]}")
    assert not errors, "\n".join(errors)


@cocotb.test()
async def fcs_frames(dut):
    """RoCEv2 frames carrying an FCS computed by zlib (``PARSER_FCS=1``): each item is RoCEv2 with the frame length
    without the FCS; the same frame cut by 4 bytes (the FCS gone, so the ICRC read as the FCS) is truncated; a frame
    of 67 bytes with its FCS is short, one of 68 is not (both all zeros: EtherType 0, OTHER, not truncated;
    expectations by hand)."""
    import zlib
    tb = TB(dut, stalls=False, seed=19)
    await tb.reset()

    def with_fcs(body):
        return body + struct.pack("<I", zlib.crc32(body))
    data = _roce(payload_len=200)
    frames = [with_fcs(data), data, with_fcs(bytes(63)), with_fcs(bytes(64))]
    for frame in frames:
        tb.send(frame)
    errors = await tb.collect(frames)
    items = tb.meta.items[-4:]
    got = [(i["roce"], i["truncated"], i["frame_len"], i["short"]) for i in items]
    n = len(data)
    want = [(1, 0, n, 0), (0, 1, n - 4, 0), (0, 0, 63, 1), (0, 0, 64, 0)]   # zero bytes: EtherType 0, OTHER
    if tb.early and n > 128:     # an early item cannot know the length
        want[0], want[1] = (1, 0, 65535, 0), (1, 0, 65535, 0)
    if got != want:
        errors.append(f"(roce, truncated, frame_len, short) {got}, expected {want}")
    assert not errors, "\n".join(errors)
