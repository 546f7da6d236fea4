"""cocotb tests of :class:`lbpipe.hdl.packet.deparser.Deparser`, and the frames and actions they (and
``tests/test_deparser.py``) use.

The DUT is ``deparser_top`` from ``tests/test_deparser.py``: the deparser with flat ports ``s_axis_*`` and
``m_axis_*`` (cocotbext-axi's ``AxiStreamSource`` and ``AxiStreamSink``) and ``act_valid``/``act_ready``/
``act_payload`` (:class:`ActionDriver`, ``DeparseAction`` packing, first field in the low bits). Its parameters
come from the environment (``DEPARSER_DEPTH``, ``DEPARSER_PENDING``) so the checks know them, and so does the
action latency (``DEPARSER_LATENCY``, default :data:`ACTION_LATENCY`).

Every frame is sent with its last beat's unused lanes filled with random bytes and a random ``tuser`` per beat.
Checks: every ``m_axis`` frame equals :func:`lbpipe.sim.packet.deparser.deparse` of its frame and action, lane for lane
(``tdata`` including the undefined lanes, ``tkeep``, ``tuser``), in order, dropped frames absent; every rewritten
RoCEv2 frame is dissected by scapy with the new port, its ICRC equals scapy's own ICRC and
:func:`lbpipe.tb.lib.packets.icrc` of the frame, and its UDP checksum is 0 if it was 0 and otherwise equals scapy's
``in4_chksum``/``in6_chksum``; ``m_axis`` keeps an offered beat until it is taken. Without pause generators also:
no beat on ``s_axis`` waits, and back-to-back frames of one size leave at one beat per clock.

Actions are offered ``latency`` cycles after their frame's last beat is accepted (the earliest edge that can take
it is ``latency`` edges after the one that took the last beat), as a parser followed by blocks would offer them.
"""

import os
import random
import struct
from collections import deque

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.hdl.packet.deparser import DeparseAction, Deparser
from lbpipe.sim.packet.deparser import deparse, deparse_cut_through, rewrite_applies
from lbpipe.trace import pack
from lbpipe.tb.lib.harness import AxisBench

__all__ = ["roce_offsets", "corpus", "sized_frame", "random_action", "ACTION_LATENCY", "LINE_RATE_SIZES"]

BEAT = 64
#: Cycles from a frame's last beat to its action: the parser's 7, two 4-cycle blocks and a register.
ACTION_LATENCY = 16
#: Frame sizes whose back-to-back rate is measured.
LINE_RATE_SIZES = (64, 65, 66, 67, 100, 127, 128, 129, 130, 191, 192, 193, 256, 300, 511, 512, 513, 1024, 1500,
                   1517, 1518, 9216)

_ETH = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02")
_V4 = ("10.0.0.1", "10.0.0.2")
_V6 = ("2001:db8::1", "2001:db8:ffff::2")


# -- frames and actions -----------------------------------------------------------------------------------------------

def _l3(frame):
    """The offset of the header after the Ethernet tags and its EtherType."""
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    l3 = 14
    for tpids in ((0x8100, 0x88A8), (0x8100,)):         # an outer C- or S-tag, an inner C-tag
        if ethertype in tpids and len(frame) >= l3 + 4:
            (ethertype,) = struct.unpack_from("!H", frame, l3 + 2)
            l3 += 4
    return l3, ethertype


def roce_offsets(frame):
    """``(l4_off, icrc_off)`` of an Ethernet / [up to 2 tags] / IPv4 (with options) or IPv6 / UDP 4791 frame, from
    its bytes (the ICRC is the last 4 bytes of the UDP datagram), or None. A parser's job, done here independently
    of the parser."""
    frame = bytes(frame)
    if len(frame) < 14:
        return None
    l3, ethertype = _l3(frame)
    if ethertype == 0x0800 and len(frame) >= l3 + 20 and frame[l3] >> 4 == 4 and frame[l3 + 9] == 17:
        l4 = l3 + (frame[l3] & 0xF) * 4
    elif ethertype == 0x86DD and len(frame) >= l3 + 40 and frame[l3 + 6] == 17:
        l4 = l3 + 40
    else:
        return None
    if len(frame) < l4 + 8:
        return None
    dport, ulen = struct.unpack_from("!HH", frame, l4 + 2)
    if dport != 4791 or ulen < 8 + 12 + 4 or l4 + ulen > len(frame):
        return None
    return l4, l4 + ulen - 4


def _roce(version=4, **kwargs):
    from lbpipe.tb.lib.packets import roce_data
    src, dst = _V4 if version == 4 else _V6
    return bytes(roce_data(src, dst, kwargs.pop("sport", 49152), kwargs.pop("dqpn", 0x456), kwargs.pop("psn", 0x10),
                           **_ETH, **kwargs))


def corpus(rng):
    """Named frames: RDMA WRITE of many sizes, SEND, ACK, NAK, CNP on IPv4 and IPv6, with and without a VLAN tag,
    with zero and non-zero UDP checksums, with Ethernet padding and trailers, and frames that are not RoCEv2."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import ARP, Ether
    from scapy.packet import Raw
    from lbpipe.tb.lib.packets import RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_MIDDLE, RC_SEND_ONLY, roce_ack, roce_cnp, roce_nak
    frames = {}
    for version in (4, 6):
        src, dst = _V4 if version == 4 else _V6
        for vlan in (None, 7):
            for csum in (0, None):
                tag = f"v{version}{' vlan' if vlan else ''}{' csum' if csum is None else ''}"
                opts = dict(vlan=vlan, udp_chksum=csum)
                for size in (0, 1, 4, 29, 64, 100, 256, 1000, 1400) + tuple(rng.sample(range(2, 1440), 4)):
                    frames[f"{tag} write only {size}"] = _roce(version, payload_len=size, psn=size, **opts)
                frames[f"{tag} write first"] = _roce(version, opcode=RC_RDMA_WRITE_FIRST, payload_len=1024, **opts)
                frames[f"{tag} write middle 0"] = _roce(version, opcode=RC_RDMA_WRITE_MIDDLE, payload_len=0, **opts)
                frames[f"{tag} write imm"] = _roce(version, opcode=0x0B, payload_len=40, imm=0x1234, **opts)
                frames[f"{tag} send only"] = _roce(version, opcode=RC_SEND_ONLY, payload_len=31, **opts)
                frames[f"{tag} send only 0"] = _roce(version, opcode=RC_SEND_ONLY, payload_len=0, **opts)
                frames[f"{tag} read request"] = _roce(version, opcode=0x0C, dma_len=4096, **opts)
                frames[f"{tag} ack"] = bytes(roce_ack(src, dst, 49153, 0x456, 0x10, msn=1, **_ETH, **opts))
                frames[f"{tag} nak"] = bytes(roce_nak(src, dst, 49154, 0x123, 0x0D, msn=7, **_ETH, **opts))
                frames[f"{tag} cnp"] = bytes(roce_cnp(src, dst, 49155, 0x77, **_ETH, **opts))
    # UDP headers further in: port and checksum in different beats (l4_off 58 and 62), the header in beat 1.
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IPOption_NOP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1AD, Dot1Q
    eth = Ether(src=_ETH["src_mac"], dst=_ETH["dst_mac"])
    for csum in (0, None):
        for name, l2, l3 in (
                ("v4 two tags options 20", Dot1AD(vlan=5) / Dot1Q(vlan=6), IP(options=[IPOption_NOP()] * 20)),
                ("v4 two tags options 40", Dot1AD(vlan=5) / Dot1Q(vlan=6), IP(options=[IPOption_NOP()] * 40)),
                ("v4 one tag options 40", Dot1Q(vlan=6), IP(options=[IPOption_NOP()] * 40)),
                ("v6 two tags", Dot1Q(vlan=5) / Dot1Q(vlan=6), IPv6(src=_V6[0], dst=_V6[1]))):
            if IP in l3:
                l3.src, l3.dst = _V4
            for payload in (0, 40, 600):
                frames[f"{name}{' csum' if csum is None else ''} {payload}"] = bytes(
                    eth / l2 / l3 / UDP(sport=0xC000 + payload, dport=4791, chksum=csum) /
                    BTH(opcode=RC_SEND_ONLY, dqpn=0x456, psn=payload) / Raw(bytes(i & 0xFF for i in range(payload))))
    # Ethernet padding after the IP packet (the minimum 60 bytes) and trailers.
    short = frames["v4 send only 0"]                                          # 58 bytes
    frames["v4 send only 0 padded"] = short + bytes(60 - len(short))
    frames["v4 csum send only 0 padded"] = frames["v4 csum send only 0"] + bytes(2)
    frames["v4 csum ack padded 64"] = frames["v4 csum ack"] + bytes(2)
    frames["v4 csum write trailer 3"] = frames["v4 csum write only 64"] + b"\x01\x02\x03"
    frames["v4 csum ack trailer 29"] = frames["v4 csum ack"] + bytes(range(1, 30))  # ICRC not in the last beat
    frames["v6 csum write trailer 64"] = frames["v6 csum write only 100"] + bytes(64)
    # Not RoCEv2.
    frames["tcp"] = bytes(eth / IP(src=_V4[0], dst=_V4[1]) / TCP(sport=1, dport=2) / Raw(bytes(40)))
    frames["udp other port"] = bytes(eth / IP(src=_V4[0], dst=_V4[1]) / UDP(sport=1, dport=53) / Raw(bytes(200)))
    frames["arp"] = bytes(eth / ARP(psrc=_V4[0], pdst=_V4[1], hwsrc=_ETH["src_mac"]))
    frames["runt"] = bytes(range(1, 14))
    return frames


def sized_frame(size, rng, *, csum=False, version=4):
    """A RoCEv2 frame of exactly ``size`` bytes (at least 58 on IPv4, 78 on IPv6): RDMA WRITE ONLY, or SEND ONLY
    where that is too long, with the largest payload that fits (a multiple of 4), then up to 3 bytes of Ethernet
    trailer."""
    from lbpipe.tb.lib.packets import RC_RDMA_WRITE_ONLY, RC_SEND_ONLY
    overhead = (14 + 20 if version == 4 else 14 + 40) + 8 + 12 + 4
    opcode = RC_RDMA_WRITE_ONLY if size >= overhead + 16 else RC_SEND_ONLY
    overhead += 16 if opcode == RC_RDMA_WRITE_ONLY else 0
    if size < overhead:
        raise ValueError(f"no IPv{version} RoCEv2 frame of {size} bytes")
    frame = _roce(version, opcode=opcode, payload_len=(size - overhead) // 4 * 4, psn=rng.getrandbits(24),
                  udp_chksum=None if csum else 0)
    return frame + bytes(rng.getrandbits(8) for _ in range(size - len(frame)))


def action_for(frame, rng, *, drop=0.0, rewrite=0.9, tag=0):
    """The action a Themis pipeline would give ``frame``: its offsets from :func:`roce_offsets`, a random
    ``sport_xor`` (0 now and then), rewrite with probability ``rewrite``, drop with probability ``drop``."""
    offsets = roce_offsets(frame)
    action = {"tag": tag & 0xFFFF, "drop": int(rng.random() < drop)}
    if offsets is not None and offsets[1] < 1 << 14:
        action["l4_off"], action["icrc_off"] = offsets
        action["rewrite"] = int(rng.random() < rewrite)
        action["sport_xor"] = 0 if rng.random() < 0.05 else rng.getrandbits(16)
    return action


def random_action(frame, rng, tag=0):
    """An action with random offsets near the frame's real ones or anywhere: exercises the applicability rule."""
    offsets = roce_offsets(frame) or (rng.randrange(256), rng.randrange(len(frame) + 8))
    l4 = min(255, max(0, offsets[0] + rng.choice([0, 0, 0, -1, 1, 2, -2, rng.randrange(-20, 20)])))
    icrc = min((1 << 14) - 1, max(0, offsets[1] + rng.choice([0, 0, -1, 1, 3, 4, -64, 64, rng.randrange(-99, 99)])))
    return {"tag": tag & 0xFFFF, "drop": int(rng.random() < 0.1), "rewrite": int(rng.random() < 0.9),
            "l4_off": l4, "icrc_off": icrc, "sport_xor": rng.getrandbits(16)}


# -- independent checks of a rewritten frame ----------------------------------------------------------------------

def check_roce(sent, got, action, *, whole=None):
    """Errors in ``got``, the deparser's output for RoCEv2 frame ``sent`` under ``action``, as scapy and
    :func:`lbpipe.tb.lib.packets.icrc` see it (empty when the action does not rewrite the frame). ``whole`` says
    the rewrite was made whole (cut-through: the frame was not sent bad); by default the store-and-forward rule."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.layers.inet import in4_chksum
    from scapy.layers.inet6 import in6_chksum
    from lbpipe.tb.lib.packets import icrc
    offsets = roce_offsets(sent)
    if (offsets is None or action.get("drop") or not action.get("rewrite")
            or (action.get("l4_off"), action.get("icrc_off")) != offsets
            or not (rewrite_applies(len(sent), *offsets) if whole is None else whole)):
        return []
    l4, icrc_at = offsets
    errors = []
    pkt = Ether(got)
    if BTH not in pkt or UDP not in pkt:
        return [f"scapy does not dissect a RoCEv2 frame: {pkt.summary()}"]
    old_port, old_csum = struct.unpack_from("!H4xH", sent, l4)
    if pkt[UDP].sport != old_port ^ action["sport_xor"]:
        errors.append(f"UDP source port {pkt[UDP].sport:#06x}, expected {old_port ^ action['sport_xor']:#06x}")
    l3, ethertype = _l3(got)
    untagged = got[:12] + struct.pack("!H", ethertype) + got[l3:]       # the ICRC does not cover the tags
    if icrc(untagged) != got[icrc_at:icrc_at + 4]:
        errors.append(f"ICRC {got[icrc_at:icrc_at + 4].hex()}, packets.icrc says {icrc(untagged).hex()}")
    # scapy's own ICRC counts Ethernet padding in: only for frames that end with the ICRC.
    scapy_icrc = pkt[BTH].compute_icrc(b"") if icrc_at + 4 == len(got) else None
    if scapy_icrc is not None and scapy_icrc != got[icrc_at:icrc_at + 4]:
        errors.append(f"ICRC {got[icrc_at:icrc_at + 4].hex()}, scapy computes {scapy_icrc.hex()}")
    csum = pkt[UDP].chksum
    datagram = bytearray(got[l4:icrc_at + 4])
    datagram[6:8] = b"\0\0"
    ip = pkt[IP] if IP in pkt else pkt[IPv6]
    want = (in4_chksum if IP in pkt else in6_chksum)(17, ip, bytes(datagram))
    if old_csum == 0:
        if csum != 0:
            errors.append(f"UDP checksum {csum:#06x}, expected to stay 0")
    elif csum != (want or 0xFFFF):
        errors.append(f"UDP checksum {csum:#06x}, scapy computes {want:#06x}")
    return errors


# -- testbench --------------------------------------------------------------------------------------------------------

class ActionDriver:
    """Offers each queued action ``latency`` cycles (plus ``jitter()``) after its frame's last beat is accepted on
    ``s_axis`` (or, with ``eager``, as soon as it is queued), holding it until ``act_ready``; records beat transfers
    on ``s_axis`` and ``m_axis`` and the cycles ``s_axis`` waited, and checks that an offered ``m_axis`` beat is
    neither withdrawn nor changed and that no action is taken before its frame's last beat."""

    def __init__(self, dut, *, latency=ACTION_LATENCY, jitter=None, eager=False, cut_through=False):
        self.dut = dut
        # Cut-through: each action is due ``latency`` cycles after its frame's second beat (or only beat), as an
        # early parser's item would make it, and may be taken before the frame's last beat.
        self.cut_through = cut_through
        self._index = 0
        self.layout = DeparseAction()
        self.latency = latency
        self.jitter = jitter or (lambda: 0)
        self.eager = eager
        self.last_beats = 0
        self.actions = deque()
        self.due = deque()
        self.in_cycles, self.out_cycles, self.act_cycles = [], [], []
        self.waits = 0
        self.errors = []
        self.cycle = 0
        dut.act_valid.value = 0
        dut.act_payload.value = 0
        self._task = cocotb.start_soon(self._run())

    def queue(self, action):
        self.actions.append(action)

    async def _run(self):
        dut = self.dut
        offered, held = None, None
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if int(dut.rst.value):
                offered, held = None, None
                self.actions.clear()
                self.due.clear()
                self.last_beats = len(self.act_cycles)
                self._index = 0
                dut.act_valid.value = 0
                continue
            earlier_last_beats = self.last_beats        # frames whose last beat was taken at an earlier edge
            if int(dut.s_axis_tvalid.value):
                if int(dut.s_axis_tready.value):
                    self.in_cycles.append(self.cycle)
                    last = int(dut.s_axis_tlast.value)
                    window = self._index == 1 or (self._index == 0 and last)
                    if window if self.cut_through else last:
                        self.due.append(self.cycle + self.latency - 1 + self.jitter())
                    if last:
                        self.last_beats += 1
                    self._index = 0 if last else self._index + 1
                else:
                    self.waits += 1
            m_valid = int(dut.m_axis_tvalid.value)
            beat = (int(dut.m_axis_tdata.value), int(dut.m_axis_tkeep.value), int(dut.m_axis_tlast.value),
                    int(dut.m_axis_tuser.value)) if m_valid else None
            if held is not None and beat != held:
                self.errors.append(f"cycle {self.cycle}: m_axis beat withdrawn or changed while waiting for ready")
            held = None
            if m_valid:
                if int(dut.m_axis_tready.value):
                    self.out_cycles.append(self.cycle)
                else:
                    held = beat
            if offered is not None and int(dut.act_ready.value):
                self.act_cycles.append(self.cycle)
                offered = None
                if len(self.act_cycles) > earlier_last_beats and not self.cut_through:
                    self.errors.append(f"cycle {self.cycle}: action {len(self.act_cycles)} taken before its "
                                       f"frame's last beat")
            if self.eager and self.due:
                self.due.clear()
            if offered is None and self.actions and (self.eager or (self.due and self.due[0] <= self.cycle)):
                if not self.eager:
                    self.due.popleft()
                offered = self.actions.popleft()
                dut.act_payload.value = pack(self.layout, offered)
            dut.act_valid.value = int(offered is not None)


class TB(AxisBench):
    """Clock, reset, the AXI4-Stream source and sink and the action driver around ``deparser_top``."""

    def __init__(self, dut, *, pauses=False, latency=None, jitter=0, eager=False, seed=1):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.3) if pauses else None, quiet=True)
        self.depth = int(os.environ.get("DEPARSER_DEPTH", 256))
        self.pending = int(os.environ.get("DEPARSER_PENDING", 32))
        if latency is None:
            latency = int(os.environ.get("DEPARSER_LATENCY", ACTION_LATENCY))
        jitter_rng = random.Random(self.rng.random())
        self.cut_through = os.environ.get("DEPARSER_CUT_THROUGH", "0") == "1"
        self.fcs = os.environ.get("DEPARSER_FCS", "0") == "1"
        self.driver = ActionDriver(dut, latency=latency, eager=eager, cut_through=self.cut_through,
                                   jitter=(lambda: jitter_rng.randrange(jitter + 1)) if jitter else None)
        self.user_width = len(dut.s_axis_tuser)
        self.sent = []

    def send(self, frame, action):
        """Queue ``frame`` (random bytes in its last beat's unused lanes, a random ``tuser`` per beat) and its
        action."""
        from cocotbext.axi import AxiStreamFrame
        pad = -len(frame) % BEAT
        tdata = bytes(frame) + bytes(self.rng.getrandbits(8) for _ in range(pad))
        tkeep = [1] * len(frame) + [0] * pad
        tuser = []
        for _ in range(len(tdata) // BEAT):
            tuser += [self.rng.getrandbits(self.user_width)] * BEAT
        self.sent.append((bytes(frame), dict(action), tdata, tkeep, tuser))
        self.driver.queue(dict(action))
        self.source.send_nowait(AxiStreamFrame(tdata, tkeep=list(tkeep), tuser=list(tuser)))

    async def collect(self, limit_cycles=None):
        """Receive the output of every frame sent since the last call and return the errors found."""
        batch, self.sent = self.sent, []
        errors = []
        for i, (frame, action, tdata, tkeep, tuser) in enumerate(batch):
            whole = None
            if self.cut_through or self.fcs:
                want = deparse_cut_through(frame, action, fcs=self.fcs, depth=None if self.cut_through else self.depth)
                if want is not None:
                    want, bad = want
                    whole = not bad
                    if bad:     # tuser bit 0 of the last beat
                        tuser = tuser[:-BEAT] + [u | 1 for u in tuser[-BEAT:]]
            else:
                want = deparse(frame, action, depth=self.depth)
            if want is None:
                continue
            got = await self.sink.recv(compact=False)
            want_tdata = want + tdata[len(frame):]
            if (bytes(got.tdata), list(got.tkeep), list(got.tuser)) != (want_tdata, tkeep, tuser):
                where = [k for k, (a, b) in enumerate(zip(bytes(got.tdata), want_tdata)) if a != b][:8]
                errors.append(f"frame {i} ({len(frame)} bytes, action {action}): m_axis differs from golden "
                              f"(bytes {where}; tkeep {list(got.tkeep) == tkeep}, tuser {list(got.tuser) == tuser})")
                continue
            errors += [f"frame {i} ({len(frame)} bytes): {e}"
                       for e in check_roce(frame, bytes(got.tdata)[:len(frame)], action, whole=whole)]
        await ClockCycles(self.dut.clk, 8)
        if not self.sink.empty():
            errors.append(f"{self.sink.count()} unexpected frames on m_axis")
        errors += self.driver.errors
        return errors


def _frames_and_actions(rng, *, drop=0.1):
    named = corpus(rng)
    pairs = []
    for i, frame in enumerate(named.values()):
        pairs.append((frame, action_for(frame, rng, drop=drop, tag=i)))
    rng.shuffle(pairs)
    return pairs


@cocotb.test()
async def corpus_unthrottled(dut):
    """The corpus, drops included, without pauses: outputs as golden and correct for scapy; no input wait."""
    tb = TB(dut, seed=11)
    await tb.reset()
    rng = random.Random(21)
    pairs = _frames_and_actions(rng)
    for frame, action in pairs:
        tb.send(frame, action)
    errors = await tb.collect()
    if tb.driver.waits:
        errors.append(f"s_axis waited {tb.driver.waits} cycles at line rate")
    dut._log.info("%d frames, %d rewritten, %d dropped", len(pairs),
                  sum(1 for f, a in pairs if a.get("rewrite") and not a["drop"]), sum(a["drop"] for _, a in pairs))
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def corpus_with_pauses(dut):
    """The corpus with idle cycles on s_axis, back-pressure on m_axis and late actions."""
    tb = TB(dut, pauses=True, jitter=40, seed=12)
    await tb.reset()
    rng = random.Random(22)
    for frame, action in _frames_and_actions(rng):
        tb.send(frame, action)
    errors = await tb.collect()
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def random_actions(dut):
    """Actions with offsets off by a little or a lot, on RoCEv2 and other frames: the applicability rule. Each
    action is offered as soon as it is queued, long before its frame's last beat: the deparser must wait."""
    tb = TB(dut, pauses=True, eager=True, seed=13)
    await tb.reset()
    rng = random.Random(23)
    frames = list(corpus(rng).values())
    for i in range(400):
        frame = rng.choice(frames)
        tb.send(frame, random_action(frame, rng, tag=i))
    errors = await tb.collect()
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def sizes_back_to_back(dut):
    """Back-to-back rewritten frames of each size: no input wait, and output beats per clock from the first
    output beat of a size to its last."""
    tb = TB(dut, seed=14)
    await tb.reset()
    rng = random.Random(24)
    sizes = [int(s) for s in os.environ["DEPARSER_SIZES"].split(",")] if "DEPARSER_SIZES" in os.environ \
        else LINE_RATE_SIZES
    errors, rates = [], {}
    for size in sizes:
        count = max(6, min(48, 6144 // size))
        first_in, first_out = len(tb.driver.in_cycles), len(tb.driver.out_cycles)
        waits = tb.driver.waits
        for i in range(count):
            frame = sized_frame(size, rng, csum=i % 2 == 1)
            tb.send(frame, action_for(frame, rng, rewrite=1.0))
        errors += await tb.collect()
        beats = count * -(-size // BEAT)
        ins, outs = tb.driver.in_cycles[first_in:], tb.driver.out_cycles[first_out:]
        in_rate = len(ins) / (ins[-1] - ins[0] + 1)
        out_rate = len(outs) / (outs[-1] - outs[0] + 1)
        rates[size] = (in_rate, out_rate)
        if len(ins) != beats or len(outs) != beats:
            errors.append(f"{size} bytes: {len(ins)} beats in, {len(outs)} out, {beats} sent")
        if tb.driver.waits != waits:
            errors.append(f"{size} bytes: s_axis waited {tb.driver.waits - waits} cycles")
        await ClockCycles(dut.clk, 8)
    dut._log.info("beats per clock (in, out): %s",
                  ", ".join(f"{s} B: {i:.3f}/{o:.3f}" for s, (i, o) in rates.items()))
    errors += [f"{s} bytes: {i:.4f} in, {o:.4f} out beats per clock" for s, (i, o) in rates.items()
               if (i, o) != (1.0, 1.0)]
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def sweep_sizes(dut):
    """Every size from ``DEPARSER_SWEEP`` (``lo,hi``; default 64 to 1518) once, back to back in random order: no
    input wait, and the output rate over the run."""
    tb = TB(dut, seed=15)
    await tb.reset()
    rng = random.Random(25)
    lo, hi = (int(v) for v in os.environ.get("DEPARSER_SWEEP", "64,1518").split(","))
    sizes = list(range(lo, hi + 1))
    rng.shuffle(sizes)
    for size in sizes:
        frame = sized_frame(size, rng, csum=rng.random() < 0.5, version=6 if size >= 82 and rng.random() < 0.3 else 4)
        tb.send(frame, action_for(frame, rng, rewrite=1.0))
    errors = await tb.collect()
    ins, outs = tb.driver.in_cycles, tb.driver.out_cycles
    dut._log.info("%d sizes, %d beats: %.4f beats per clock in, %.4f out", len(sizes), len(ins),
                  len(ins) / (ins[-1] - ins[0] + 1), len(outs) / (outs[-1] - outs[0] + 1))
    if tb.driver.waits:
        errors.append(f"s_axis waited {tb.driver.waits} cycles")
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def backpressure_stalls_input(dut):
    """With m_axis stopped, s_axis stops once the buffers are full and nothing is lost; actions are taken only
    after their frame's last beat."""
    tb = TB(dut, seed=16)
    await tb.reset()
    rng = random.Random(26)
    tb.sink.pause = True
    count = 2 * tb.depth // 3 + 4
    for i in range(count):
        frame = sized_frame(128, rng, csum=True)
        tb.send(frame, action_for(frame, rng, rewrite=1.0, tag=i))
    await ClockCycles(dut.clk, 3 * tb.depth)
    errors = []
    taken = len(tb.driver.in_cycles)
    if taken >= 2 * count:
        errors.append(f"all {taken} beats taken with m_axis stopped")
    if taken > tb.depth + 16:
        errors.append(f"{taken} beats taken with m_axis stopped, {tb.depth} buffered and 16 in the skid buffer "
                      f"(docs/packet_io.md)")
    if int(dut.s_axis_tready.value):
        errors.append("s_axis ready with m_axis stopped and the buffer full")
    if tb.driver.out_cycles:
        errors.append("m_axis transfers while tready is low")
    tb.sink.pause = False
    # A deparser that loses beats while m_axis is stopped fails here rather than hang the run.
    from cocotb.triggers import SimTimeoutError, with_timeout
    try:
        errors += await with_timeout(tb.collect(), 40 * 2 * count + 20_000, "ns")
    except SimTimeoutError:
        errors.append("frames lost: the output never completed")
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def latency_one_frame(dut):
    """One frame after another with the pipeline empty: the first beat leaves ``Deparser.latency`` edges after the
    action is taken, the frame's beats then leave one per clock."""
    tb = TB(dut, seed=17)
    await tb.reset()
    rng = random.Random(27)
    errors = []
    for size in (60, 64, 130, 1518):
        first_out = len(tb.driver.out_cycles)
        frame = sized_frame(size, rng, csum=True)
        tb.send(frame, action_for(frame, rng, rewrite=1.0))
        errors += await tb.collect()
        await ClockCycles(dut.clk, 40)
        outs = tb.driver.out_cycles[first_out:]
        latency = outs[0] - tb.driver.act_cycles[-1]
        if latency != Deparser.latency:
            errors.append(f"{size} bytes: first beat {latency} edges after the action, datasheet says "
                          f"{Deparser.latency}")
        if outs[-1] - outs[0] + 1 != len(outs):
            errors.append(f"{size} bytes: {len(outs)} beats out in {outs[-1] - outs[0] + 1} cycles")
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in every buffer and pipeline: what left before is a prefix of the golden outputs, nothing
    of it leaves after, and the same traffic sent again comes out as golden."""
    tb = TB(dut, seed=18)
    await tb.reset()
    rng = random.Random(28)
    pairs = _frames_and_actions(rng, drop=0.1)[:60]
    for frame, action in pairs:
        tb.send(frame, action)
    await ClockCycles(dut.clk, 150)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    tb.source.clear()
    before = []
    while not tb.sink.empty():
        before.append(bytes(tb.sink.recv_nowait(compact=False).tdata))
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    errors = []
    if tb.cut_through or tb.fcs:
        golden = [(deparse_cut_through(frame, action, fcs=tb.fcs) or (None,))[0] for frame, action in pairs]
    else:
        golden = [deparse(frame, action) for frame, action in pairs]
    golden = [g + tdata[len(g):] for g, (_, _, tdata, _, _) in zip(golden, tb.sent) if g is not None]
    if not before or before != golden[:len(before)]:
        errors.append(f"{len(before)} frames out before the reset, not a non-empty prefix of the golden outputs")
    tb.sent = []
    await ClockCycles(dut.clk, 40)
    if not tb.sink.empty() or tb.driver.out_cycles[-1:] and tb.driver.out_cycles[-1] > tb.driver.cycle - 40:
        errors.append("m_axis transfers after the reset")
    for frame, action in pairs:
        tb.send(frame, action)
    errors += await tb.collect()
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def largest_frame(dut):
    """Frames of exactly ``depth`` beats pass one after another; with ``DEPARSER_OVERSIZE`` set, frames longer than
    that (one byte, one beat, three times the buffer) are dropped whatever their action and counted in ``stats``,
    and the frames around them pass as usual: no input deadlocks the deparser."""
    tb = TB(dut, seed=19)
    await tb.reset()
    rng = random.Random(29)
    oversize = int(os.environ.get("DEPARSER_OVERSIZE", 0))
    size = tb.depth * BEAT
    sizes = [size, size - 1, size - 2]
    if oversize:
        sizes = [size, size + 1, 100, size + BEAT, size, 3 * size + 7, 64, size + 1]
    for i, n in enumerate(sizes):
        frame = sized_frame(n, rng, csum=True)
        tb.send(frame, action_for(frame, rng, rewrite=1.0, tag=i))
    # A deparser that deadlocks on the long frames fails here rather than hang the run.
    from cocotb.triggers import with_timeout
    errors = await with_timeout(tb.collect(), 40 * BEAT * sum(sizes) // BEAT + 20_000, "ns")
    await ClockCycles(dut.clk, 200)     # the last frame's action may come after every output frame has left
    dropped = sum(n > size for n in sizes)
    if int(dut.stats.value) & 0xFFFFFFFF != dropped:
        errors.append(f"stats {int(dut.stats.value)}: {dropped} frames were too long")
    assert not errors, "\n".join(errors[:20])


def _counters(dut):
    """``stats`` as (cut, refused, bad)."""
    value = int(dut.stats.value)
    return value & 0xFFFFFFFF, value >> 32 & 0xFFFFFFFF, value >> 64 & 0xFFFFFFFF


@cocotb.test()
async def counters_by_reason(dut):
    """Five frames worked by hand, in both modes: (1) a whole RoCEv2 frame, checksum 0: rewritten, counted nowhere;
    (2) the same with 4 bytes after an ICRC that ends a beat (a kept FCS): store-and-forward refuses (the ICRC does
    not end in the last beat), cut-through rewrites it; (3) a frame cut 10 bytes before its ICRC ends, with the
    offsets of the whole frame: store-and-forward refuses, cut-through rewrites the port and sends it bad (``tuser``
    bit 0 on its last beat); (4) a non-zero UDP checksum: store-and-forward updates it, cut-through sends it bad;
    (5) an odd ``l4_off``: refused in both. Counters (refused, bad): (3, 0) and (1, 2)."""
    tb = TB(dut, seed=20)
    await tb.reset()
    rng = random.Random(30)
    # IPv4 RDMA WRITE ONLY: 14 + 20 + 8 (UDP at 34) + 12 + 16 + 52 of payload, then the ICRC at 122-125 (lanes 58
    # to 61 of beat 1): 126 bytes. Four bytes more end in beat 2, so the ICRC no longer ends in the last beat.
    whole = _roce(4, opcode=0x0A, payload_len=52, psn=5, udp_chksum=0)
    assert len(whole) == 126
    fcs = whole + bytes([0x11, 0x22, 0x33, 0x44])
    cut = whole[:116]
    summed = _roce(4, opcode=0x0A, payload_len=52, psn=6, udp_chksum=None)      # scapy fills the UDP checksum
    assert struct.unpack_from("!H", summed, 40)[0] != 0
    frames = [whole, fcs, cut, summed, whole]
    actions = [{"rewrite": 1, "l4_off": 34, "icrc_off": 122, "sport_xor": 0x1234, "tag": k} for k in range(5)]
    actions[4]["l4_off"] = 35
    for frame, action in zip(frames, actions):
        tb.send(frame, action)
    errors = await tb.collect()
    await ClockCycles(dut.clk, 40)
    want = (0, 1, 2) if tb.cut_through else (0, 3, 0)
    if _counters(dut) != want:
        errors.append(f"stats (cut, refused, bad) {_counters(dut)}, expected {want}")
    assert not errors, "\n".join(errors[:20])


@cocotb.test()
async def first_beat_latency(dut):
    """Frames of 64, 129, 1,518 and 9,216 bytes, each alone, actions ``latency`` cycles after the beat an early
    parser would answer (cut-through) or after the last beat: the first beat leaves ``Deparser.latency`` edges after
    the action is taken; in cut-through the time from first beat in to first beat out is the same for every frame
    of two beats or more, and a 64-byte frame's is one cycle less (its only beat completes the header window)."""
    tb = TB(dut, seed=21)
    await tb.reset()
    rng = random.Random(31)
    spans, errors = {}, []
    for size in (64, 129, 1518, 9216):
        first_in, first_out = len(tb.driver.in_cycles), len(tb.driver.out_cycles)
        frame = sized_frame(size, rng)
        tb.send(frame, action_for(frame, rng, rewrite=1.0))
        errors += await tb.collect()
        await ClockCycles(dut.clk, 40)
        ins, outs = tb.driver.in_cycles[first_in:], tb.driver.out_cycles[first_out:]
        spans[size] = outs[0] - ins[0]
        if outs[0] - tb.driver.act_cycles[-1] != Deparser.latency:
            errors.append(f"{size} bytes: first beat {outs[0] - tb.driver.act_cycles[-1]} edges after the action")
    dut._log.info("first beat in to first beat out: %s", spans)
    if tb.cut_through and not (spans[129] == spans[1518] == spans[9216] == spans[64] + 1):
        errors.append(f"cut-through first-beat latencies {spans}")
    if not tb.cut_through and not spans[64] < spans[129] < spans[1518] < spans[9216]:
        errors.append(f"store-and-forward first-beat latencies {spans} do not grow with the frame")
    assert not errors, "\n".join(errors[:20])
