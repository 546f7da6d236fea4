# amaranth: UnusedElaboratable=no
"""Tests of the deparser: the golden model by hand and against the reference ICRC vectors and
:func:`lbpipe.tb.lib.packets.rewrite_udp_sport`, the hardware's matrices against the golden model, the signature and
parameters, then the cocotb bench under Icarus (``lbpipe.tb.packet.test_deparser``) and one synthesis regression.

Signature tests construct components without elaborating them; the first line silences Amaranth's
``UnusedElaboratable`` warning for that reason (pytest turns warnings into errors).
"""

import random
import struct
import zlib

import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import data, stream
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.crc import crc32_matrix, crc32_shift_matrix
from lbpipe.hdl.packet.deparser import DIST_BITS, DeparseAction, Deparser
from lbpipe.sim.lib.crc import crc32_state
from lbpipe.sim.packet.deparser import checksum_update, deparse, icrc_delta, rewrite_applies
from lbpipe.tb.lib import packets
from lbpipe.tb.lib.runner import run_cocotb, write_verilog
from lbpipe.tb.packet.test_deparser import ACTION_LATENCY, corpus, roce_offsets

A, B = "10.0.0.1", "10.0.0.2"
#: shared/reference/README.md: Ether/IPv4 10.0.0.1 -> 10.0.0.2, TOS 0x02, TTL 64, DF, id 0, UDP sport 49152.
ACK_ICRC = bytes.fromhex("6812dceb")
NAK_ICRC = bytes.fromhex("58b68a48")


def _ack(**options):
    return bytes(packets.roce_ack(A, B, 49152, 0x456, 0x10, msn=1, **options))


def _nak(**options):
    return bytes(packets.roce_nak(A, B, 49152, 0x456, 0x0D, msn=1, **options))


def _rewrite(frame, sport_xor, **extra):
    l4, icrc_at = roce_offsets(frame)
    return {"rewrite": 1, "l4_off": l4, "icrc_off": icrc_at, "sport_xor": sport_xor, **extra}


def _full_udp_checksum(frame, l4, end):
    """The IPv4 UDP checksum computed over the whole datagram (RFC 768), an independent check of RFC 1624."""
    data = bytearray(frame[l4:end])
    data[6:8] = b"\0\0"
    if len(data) % 2:
        data.append(0)
    pseudo = frame[26:34] + struct.pack("!BBH", 0, 17, end - l4)
    total = sum(struct.unpack(f"!{(len(pseudo) + len(data)) // 2}H", pseudo + bytes(data)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF) or 0xFFFF


# --- golden model by hand ------------------------------------------------------------------------------------------

def test_reference_vectors_rewrite_and_back():
    """The reference ACK and NAK: the ICRC is the published one, a rewrite gives the ICRC of the rewritten frame
    computed from scratch, and the same XOR again restores the frame and its published ICRC."""
    for frame, vector in ((_ack(), ACK_ICRC), (_nak(), NAK_ICRC)):
        assert frame[-4:] == vector == packets.icrc(frame)
        l4, icrc_at = roce_offsets(frame)
        assert (l4, icrc_at, len(frame)) == (34, len(frame) - 4, len(frame))
        for sport_xor in (0x0001, 0x8000, 0x3C5A, 0xFFFF):
            out = deparse(frame, _rewrite(frame, sport_xor))
            assert struct.unpack_from("!H", out, l4)[0] == 49152 ^ sport_xor
            assert out[:l4] == frame[:l4] and out[l4 + 2:icrc_at] == frame[l4 + 2:icrc_at]
            assert out[-4:] == packets.icrc(out) != vector
            assert out == packets.rewrite_udp_sport(frame, sport_xor)
            assert deparse(out, _rewrite(out, sport_xor)) == frame
        assert deparse(frame, _rewrite(frame, 0)) == frame


def test_reference_ack_pinned():
    """One rewrite written out: the ACK with port 0xC000 -> 0xC0FF. The UDP header is at 34, the ICRC at 58, so
    the delta 0x00FF is followed by 58 - 34 - 2 = 22 zero bytes (UDP length and checksum 4, BTH 12, AETH 4, and the
    2 bytes of the destination port); the ICRC changes by the linear CRC of those 24 bytes, computed here with
    zlib as crc(delta) ^ crc(zeros)."""
    frame = _ack()
    assert roce_offsets(frame) == (34, 58)
    delta = zlib.crc32(b"\x00\xff" + bytes(22), 0xFFFFFFFF) ^ zlib.crc32(bytes(24), 0xFFFFFFFF)
    assert icrc_delta(0x00FF, 22) == delta
    out = deparse(frame, _rewrite(frame, 0x00FF))
    want_icrc = bytes(a ^ b for a, b in zip(ACK_ICRC, delta.to_bytes(4, "little")))
    assert out[58:62] == want_icrc == packets.icrc(out)
    assert out[34:36] == b"\xc0\xff"


def test_icrc_delta_is_crc_linearity():
    """For equal-length messages, crc(a) ^ crc(b) is the linear CRC of a ^ b, whatever precedes the change."""
    rng = random.Random(1)
    for _ in range(50):
        dist = rng.randrange(0, 300)
        prefix = rng.randbytes(rng.randrange(0, 40))
        port = rng.getrandbits(16)
        sport_xor = rng.getrandbits(16)
        tail = rng.randbytes(dist)
        a = prefix + port.to_bytes(2, "big") + tail
        b = prefix + (port ^ sport_xor).to_bytes(2, "big") + tail
        assert zlib.crc32(a) ^ zlib.crc32(b) == icrc_delta(sport_xor, dist)
    assert icrc_delta(0, 1000) == 0
    with pytest.raises(ValueError):
        icrc_delta(1 << 16, 0)
    with pytest.raises(ValueError):
        icrc_delta(1, -1)


def test_checksum_rewrite_matches_full_recompute():
    """A non-zero UDP checksum after a rewrite equals the checksum computed over the whole new datagram, for ICRCs
    at both word parities (payload lengths 0..7 move it by 4; a 2-byte trailer moves it to the odd side)."""
    rng = random.Random(2)
    for payload_len in range(0, 40):
        frame = bytes(packets.roce_data(A, B, 0xC000, 0x456, 7, opcode=packets.RC_SEND_ONLY,
                                        payload_len=payload_len, udp_chksum=None))
        l4, icrc_at = roce_offsets(frame)
        assert struct.unpack_from("!H", frame, l4 + 6)[0] == _full_udp_checksum(frame, l4, icrc_at + 4)
        for _ in range(4):
            out = deparse(frame, _rewrite(frame, rng.getrandbits(16)))
            assert struct.unpack_from("!H", out, l4 + 6)[0] == _full_udp_checksum(out, l4, icrc_at + 4)


def test_checksum_odd_parity_and_zero_result():
    """ICRC words paired across the parity boundary, and a result of zero sent as 0xFFFF, against RFC 768 sums."""
    # A hand-made UDP datagram of odd length: header, 5 payload bytes, the 4 "ICRC" bytes at an odd offset.
    frame = bytearray(bytes(14) + bytes(20) + struct.pack("!HHHH", 0x1234, 4791, 8 + 9, 0) + b"\x01\x02\x03\x04\x05"
                      + b"\xaa\xbb\xcc\xdd")
    frame[26:34] = bytes([10, 0, 0, 1, 10, 0, 0, 2])
    end = len(frame)
    struct.pack_into("!H", frame, 40, _full_udp_checksum(frame, 34, end))
    old = bytes(frame)
    new = bytearray(old)
    new[34:36] = b"\x43\x21"
    new[end - 4:end] = b"\x11\x22\x33\x44"
    changed = [34, 35, end - 4, end - 3, end - 2, end - 1]
    assert checksum_update(struct.unpack_from("!H", old, 40)[0], old, new, 34, changed) == \
        _full_udp_checksum(new, 34, end)
    # RFC 1624's example values: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000 by eqn. 3 ... sent as
    # 0xFFFF here, since UDP reserves 0 for "no checksum".
    old = b"\x55\x55"
    new = b"\x32\x85"
    assert checksum_update(0xDD2F, old, new, 0, [0, 1]) == 0xFFFF


def test_zero_checksum_stays_zero_and_drop():
    frame = _ack()
    out = deparse(frame, _rewrite(frame, 0x1234))
    assert out[40:42] == b"\0\0"
    assert deparse(frame, _rewrite(frame, 0x1234, drop=1)) is None
    assert deparse(frame, {"drop": 1}) is None
    assert deparse(frame, {}) == frame
    assert deparse(frame, {**_rewrite(frame, 0x1234), "rewrite": 0}) == frame


def test_rewrite_applies_rule():
    assert rewrite_applies(62, 34, 58)
    assert not rewrite_applies(62, 35, 58)             # odd l4_off
    assert not rewrite_applies(62, 34, 41)             # ICRC inside the UDP header
    assert rewrite_applies(62, 34, 42)
    assert not rewrite_applies(62, 34, 59)             # ICRC past the end of the frame
    assert rewrite_applies(65, 34, 61)                 # straddles beats 0 and 1, ends in the last beat
    assert rewrite_applies(64, 34, 58)                 # 2 bytes of padding after it
    assert not rewrite_applies(65, 34, 58)             # ends in beat 0, the frame's last beat is 1
    assert rewrite_applies(91, 34, 61) and not rewrite_applies(91, 34, 60)   # the last byte decides
    frame = _ack() + bytes(range(1, 30))               # a long trailer: not rewritten
    assert deparse(frame, _rewrite(_ack(), 0x55)) == frame


def test_golden_matches_rewrite_udp_sport_on_corpus():
    """Every RoCEv2 frame of the bench's corpus that ends with its ICRC or Ethernet padding. ``packets`` parses at
    most one 0x8100 tag, so frames with two are compared with their tags removed (the rewrite does not see them)."""
    rng = random.Random(3)
    checked = 0
    for name, frame in corpus(rng).items():
        offsets = roce_offsets(frame)
        if offsets is None or not rewrite_applies(len(frame), *offsets):
            continue
        strip = 8 if "two tags" in name else 0          # both tags, so the EtherType follows the addresses
        for _ in range(3):
            sport_xor = rng.getrandbits(16)
            out = deparse(frame, _rewrite(frame, sport_xor))
            want = packets.rewrite_udp_sport(frame[:12] + frame[12 + strip:], sport_xor)
            assert out[:12] + out[12 + strip:] == want, name
            checked += 1
    assert checked > 300


def test_bench_checker_catches_corruption():
    """The bench's independent check (scapy, packets.icrc, in4/in6_chksum) flags a wrong port, ICRC or checksum."""
    from lbpipe.tb.packet.test_deparser import check_roce
    for frame in (bytes(packets.roce_data(A, B, 0xC000, 0x456, 7, payload_len=100, udp_chksum=None)),
                  bytes(packets.roce_data("2001:db8::1", "2001:db8::2", 0xC000, 1, 2, payload_len=9, udp_chksum=None)),
                  _ack()):
        l4, icrc_at = roce_offsets(frame)
        action = _rewrite(frame, 0x1357)
        out = deparse(frame, action)
        assert check_roce(frame, out, action) == []
        for at, what in ((l4 + 1, "UDP source port"), (icrc_at + 2, "ICRC"), (l4 + 7, "UDP checksum")):
            bad = bytearray(out)
            bad[at] ^= 0x10
            assert any(what in e for e in check_roce(frame, bytes(bad), action)), (what, frame[:20].hex())
        assert check_roce(frame, frame, action) != []          # not rewritten at all


@pytest.mark.parametrize("fields, message", [
    ({"flags": 1}, r"unknown action fields \['flags'\]"),
    ({"l4_off": 256}, r"l4_off=256 does not fit in 8 bits"),
    ({"icrc_off": 1 << 14}, r"icrc_off=16384 does not fit in 14 bits"),
    ({"sport_xor": -1}, r"sport_xor=-1 does not fit in 16 bits"),
])
def test_golden_bad_actions(fields, message):
    with pytest.raises(ValueError, match=message):
        deparse(_ack(), fields)


# --- the hardware's matrices against the golden model ---------------------------------------------------------------

def _apply(rows, vector):
    return sum((bin(row & vector).count("1") & 1) << o for o, row in enumerate(rows))


def test_cascade_matrices_match_golden():
    """D_2 on the byte-swapped port delta, then A**(2**b) for each set bit of dist, is icrc_delta."""
    rng = random.Random(4)
    data_rows = crc32_matrix(2)[1]
    for dist in [0, 1, 2, 3, 6, 22, 63, 64, 65, 1000, 9150, (1 << DIST_BITS) - 1] + \
            [rng.randrange(1 << DIST_BITS) for _ in range(10)]:
        sport_xor = rng.getrandbits(16)
        x = _apply(data_rows, (sport_xor >> 8) | (sport_xor & 0xFF) << 8)
        assert x == crc32_state(sport_xor.to_bytes(2, "big"), 0)
        for b in range(DIST_BITS):
            if dist >> b & 1:
                x = _apply(crc32_shift_matrix(1 << b), x)
        assert x == icrc_delta(sport_xor, dist), dist


# --- signature and parameters --------------------------------------------------------------------------------------

def test_action_layout():
    layout = DeparseAction()
    assert isinstance(layout, data.StructLayout)
    assert [(name, field.offset, field.width) for name, field in layout] == [
        ("tag", 0, 16), ("drop", 16, 1), ("rewrite", 17, 1), ("l4_off", 18, 8), ("icrc_off", 26, 14),
        ("sport_xor", 40, 16)]
    assert layout.size == 56


def test_deparser_signature():
    dut = Deparser()
    assert (dut.depth, dut.pending, dut.user_width) == (256, 32, 1)
    assert dut.max_frame_bytes == 256 * 64
    members = dut.signature.members
    assert set(members) == {"s_axis", "act", "m_axis", "stats"}
    assert members["stats"] == Out(96)
    assert dut.cut_through is False and Deparser(cut_through=True).cut_through is True
    assert members["s_axis"] == In(AXI4StreamSignature(data_width=512, user_width=1))
    assert members["m_axis"] == Out(AXI4StreamSignature(data_width=512, user_width=1))
    assert members["act"] == In(stream.Signature(DeparseAction()))
    wide = Deparser(depth=512, pending=8, user_width=16)
    assert wide.signature.members["m_axis"] == Out(AXI4StreamSignature(data_width=512, user_width=16))


def test_depth_rule():
    assert Deparser.required_depth(9216, ACTION_LATENCY) == 144 + ACTION_LATENCY + Deparser.DEPTH_MARGIN
    assert Deparser.required_depth(9217, 0) == 145 + Deparser.DEPTH_MARGIN
    assert Deparser.required_pending(ACTION_LATENCY) == ACTION_LATENCY + Deparser.PENDING_MARGIN
    assert Deparser.required_pending(1) == 3
    assert Deparser(pending=2).max_action_latency() == 0
    dut = Deparser()
    assert dut.max_action_latency() >= ACTION_LATENCY
    assert Deparser.required_depth(9216, dut.max_action_latency()) <= dut.depth
    assert Deparser.required_pending(dut.max_action_latency()) <= dut.pending


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"depth": "256"}, TypeError, r"^depth must be an integer, not '256'$"),
    ({"depth": True}, TypeError, r"^depth must be an integer, not True$"),
    ({"depth": 3}, ValueError, r"^depth must be at least 4, not 3$"),
    ({"pending": 1.0}, TypeError, r"^pending must be an integer, not 1\.0$"),
    ({"pending": 1}, ValueError, r"^pending must be at least 2, not 1$"),
    ({"user_width": None}, TypeError, r"^user_width must be an integer, not None$"),
    ({"user_width": 0}, ValueError, r"^User width must be at least 1, not 0$"),
    ({"cut_through": 1}, TypeError, r"^cut_through must be a bool, not 1$"),
])
def test_deparser_bad_parameters(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        Deparser(**kwargs)


def test_deparser_keyword_only():
    with pytest.raises(TypeError):
        Deparser(256)


# --- RTL: cocotb under Icarus ----------------------------------------------------------------------------------------

class DeparserTop(Elaboratable):
    """:class:`Deparser` with flat ports for cocotb and Vivado: ``s_axis_<member>``, ``m_axis_<member>`` (what
    cocotbext-axi's ``AxiStreamBus.from_prefix`` binds), ``act_valid``, ``act_ready``, ``act_payload``
    (``DeparseAction`` packing), and ``clk``/``rst`` from the ``sync`` domain."""

    def __init__(self, **params):
        self.deparser = Deparser(**params)
        members = self.deparser.signature.members
        self.s_axis = {name: Signal(member.shape, name=f"s_axis_{name}")
                       for name, member in members["s_axis"].signature.members.items()}
        self.m_axis = {name: Signal(member.shape, name=f"m_axis_{name}")
                       for name, member in members["m_axis"].signature.members.items()}
        self.act_valid = Signal(name="act_valid")
        self.act_ready = Signal(name="act_ready")
        self.act_payload = Signal(DeparseAction().size, name="act_payload")
        self.stats = Signal(len(self.deparser.stats), name="stats")

    def ports(self):
        return [*self.s_axis.values(), *self.m_axis.values(), self.act_valid, self.act_ready, self.act_payload,
                self.stats]

    def elaborate(self, platform):
        m = Module()
        m.submodules.deparser = dut = self.deparser
        for name, member in self.deparser.signature.members["s_axis"].signature.members.items():
            inward, outward = getattr(dut.s_axis, name), getattr(dut.m_axis, name)
            if member.flow == In:       # s_axis is In(...): its source-driven members arrive from the ports
                m.d.comb += [inward.eq(self.s_axis[name]), self.m_axis[name].eq(outward)]
            else:
                m.d.comb += [self.s_axis[name].eq(inward), outward.eq(self.m_axis[name])]
        m.d.comb += [
            dut.act.valid.eq(self.act_valid),
            dut.act.payload.as_value().eq(self.act_payload),
            self.act_ready.eq(dut.act.ready),
            self.stats.eq(dut.stats),
        ]
        return m


def test_deparser_top_ports():
    names = [port.name for port in DeparserTop().ports()]
    members = ["tdata", "tkeep", "tvalid", "tready", "tlast", "tuser"]
    assert names == ([f"s_axis_{n}" for n in members] + [f"m_axis_{n}" for n in members] +
                     ["act_valid", "act_ready", "act_payload", "stats"])


def _run(testcase, *, depth=256, pending=32, env=None, cut_through=False, fcs=False):
    top = DeparserTop(depth=depth, pending=pending, cut_through=cut_through, fcs=fcs)
    top_name = "deparser_top" + ("_ct" if cut_through else "") + ("_fcs" if fcs else "")
    path = write_verilog(top, name=top_name, ports=top.ports())
    text = path.read_text()
    for name in ["clk", "rst", "s_axis_tdata", "s_axis_tready", "m_axis_tuser", "act_payload", "act_ready"]:
        assert f" {name};" in text, f"port {name} missing from {path}"
    run_cocotb(path, toplevel=top_name, test_module="lbpipe.tb.packet.test_deparser", testcase=testcase,
               extra_env={"DEPARSER_DEPTH": str(depth), "DEPARSER_PENDING": str(pending),
                          "DEPARSER_CUT_THROUGH": str(int(cut_through)), "DEPARSER_FCS": str(int(fcs)),
                          **(env or {})})


@pytest.mark.parametrize("testcase", ["corpus_unthrottled", pytest.param("corpus_with_pauses", marks=pytest.mark.deep),
                                      "random_actions",
                                      "sizes_back_to_back", "backpressure_stalls_input", "latency_one_frame",
                                      "reset_mid_traffic", "counters_by_reason", "first_beat_latency"])
def test_deparser_cocotb(testcase):
    _run(testcase)


#: The cut-through deparser's testcases (``backpressure_stalls_input`` checks that actions wait for the last beat,
#: which cut-through does not; ``largest_frame`` the cut of frames longer than the buffer, which cut-through never
#: needs: a frame streams through).
CUT_THROUGH_TESTCASES = ["corpus_unthrottled", "corpus_with_pauses", "random_actions", "sizes_back_to_back",
                         "latency_one_frame", "reset_mid_traffic", "counters_by_reason", "first_beat_latency"]


def test_deparser_cocotb_cut_through():
    """``cut_through=True``: outputs held to :func:`lbpipe.sim.packet.deparser.deparse_cut_through` and to scapy,
    actions taken before their frames' last beats, the first beat's latency independent of the frame's size."""
    _run(CUT_THROUGH_TESTCASES, cut_through=True)


@pytest.mark.deep
def test_deparser_cocotb_fcs():
    """``fcs=True`` (store-and-forward): the corpus, random actions and a reset, held to
    ``deparse_cut_through(..., fcs=True, depth=...)``: the last 4 bytes of each frame are its FCS, so a rewrite is
    whole only with 4 bytes after the ICRC (the corpus's frames that end with their ICRC are sent bad)."""
    _run(["corpus_unthrottled", "corpus_with_pauses", "random_actions", "reset_mid_traffic"], fcs=True)


def test_deparser_cocotb_tight_buffers():
    """At exactly the documented depth and pending for 1,518-byte frames and ACTION_LATENCY, line rate holds."""
    depth = Deparser.required_depth(1518, ACTION_LATENCY)
    pending = Deparser.required_pending(ACTION_LATENCY)
    _run("sizes_back_to_back", depth=depth, pending=pending, env={"DEPARSER_SIZES": "64,65,127,1517,1518"})


@pytest.mark.deep
@pytest.mark.parametrize("depth, pending, sizes", [
    (Deparser.required_depth(1518, ACTION_LATENCY) - 1, Deparser.required_pending(ACTION_LATENCY), "1518"),
    (Deparser.required_depth(1518, ACTION_LATENCY), Deparser.required_pending(ACTION_LATENCY) - 1, "64"),
])
def test_deparser_cocotb_margins_are_tight(depth, pending, sizes):
    """One beat less of buffer, or one tail less, and line rate is lost: the margins are the smallest that work."""
    with pytest.raises(AssertionError, match="beats per clock|waited"):
        _run("sizes_back_to_back", depth=depth, pending=pending, env={"DEPARSER_SIZES": sizes})


@pytest.mark.deep
def test_deparser_cocotb_largest_frame():
    """A frame of ``depth`` beats fits; one byte more is dropped and counted (no deadlock), so
    :attr:`Deparser.max_frame_bytes` is exact."""
    assert Deparser(depth=16).max_frame_bytes == 16 * 64
    _run("largest_frame", depth=16, pending=4)
    _run("largest_frame", depth=16, pending=4, env={"DEPARSER_OVERSIZE": "1"})


@pytest.mark.deep
def test_deparser_cocotb_every_size():
    """Every size from 64 to 1,518 bytes once, back to back, no input wait."""
    _run("sweep_sizes")


# --- synthesis -------------------------------------------------------------------------------------------------------

@pytest.mark.synthesis
def test_deparser_synthesis(tmp_path_factory):
    from lbpipe.synth import synthesize
    report = synthesize(Deparser(), name="deparser", workdir=tmp_path_factory.mktemp("deparser_synth"))
    print({k: report[k] for k in ("lut", "lutram", "srl", "ff", "carry8", "ramb36", "ramb18", "muxf",
                                  "logic_levels", "seconds")})
    print(report["critical_path"])
    assert report["logic_levels"] <= 6, report["critical_path"]
