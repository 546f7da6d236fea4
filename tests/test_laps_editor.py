# amaranth: UnusedElaboratable=no
"""LAPS header editor: the golden model checked independently (frames built with scapy, results re-parsed with scapy
and with the parser's golden model, checksums recomputed by scapy), the RTL's signature and parameters.

Expected values are the ones the frames and actions are built with and offsets from the header sizes (Ethernet 14,
tag 4, IPv4 20 + options, IPv6 40, UDP 8, LAPS 12 + 4 per anchor); never from running the model under test.
"""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

from lbpipe.sim.packet.laps_editor import LapsEditor as Golden
from lbpipe.sim.packet.parser import parse
from lbpipe.tb.lib.packets import LapsHeader, laps_frame

PORT = 0xC1A5
PASSED, UPDATED, INSERTED, REMOVED, DROPPED, REFUSED, TOO_LONG = range(7)
SRC4, DST4 = "10.0.0.1", "10.0.0.2"
SRC6, DST6 = "2001:db8::1", "2001:db8:ffff::2"


def _udp_frame(v6, *, tags=(), ip_options=0, payload=b"", dport=4000, chksum=None):
    pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    for vid, tpid in enumerate(tags, 5):
        pkt = pkt / (Dot1Q if tpid == 0x8100 else Dot1AD)(vlan=vid)
    if v6:
        pkt = pkt / IPv6(src=SRC6, dst=DST6)
    else:
        from scapy.layers.inet import IPOption_NOP
        pkt = pkt / IP(src=SRC4, dst=DST4, options=[IPOption_NOP()] * ip_options)
    pkt = pkt / UDP(sport=1234, dport=dport, chksum=chksum) / Raw(payload)
    return bytes(pkt)


def _offsets(tags, v6, ip_options=0):
    l3 = 14 + 4 * len(tags)
    return l3, l3 + (40 if v6 else 20 + ip_options)


def _act(op, l3, l4, v6, **fields):
    return {"tag": 7, "op": op, "ipv6": int(v6), "l3_off": l3, "l4_off": l4, **fields}


def _anchors(values):
    return sum(v << (32 * i) for i, v in enumerate(values))


def _check_ip(frame, v6):
    """The frame's IPv4 header checksum (rebuilt by scapy) and, for IPv6, its UDP checksum are valid; its lengths
    match its size. Returns the scapy packet."""
    pkt = Ether(frame)
    if v6:
        ip = pkt[IPv6]
        assert ip.plen == len(bytes(ip.payload))
        udp = pkt[UDP]
        if udp.chksum:
            fixed = pkt.copy()
            del fixed[UDP].chksum
            assert Ether(bytes(fixed))[UDP].chksum == udp.chksum
    else:
        ip = pkt[IP]
        assert ip.len == len(bytes(ip))
        fixed = ip.copy()
        del fixed.chksum
        assert IP(bytes(fixed)).chksum == ip.chksum
    assert pkt[UDP].len == len(bytes(pkt[UDP]))
    return pkt


CASES = [(v6, tags, opts) for v6 in (False, True) for tags in ((), (0x8100,), (0x88A8, 0x8100))
         for opts in ((0, 40) if not v6 else (0,))]


@pytest.mark.parametrize("v6,tags,opts", CASES)
@pytest.mark.parametrize("count", [0, 1, 4])
def test_insert_then_remove(v6, tags, opts, count):
    payload = bytes(range(37)) * 3
    original = _udp_frame(v6, tags=tags, ip_options=opts, payload=payload, chksum=None if v6 else 0)
    l3, l4 = _offsets(tags, v6, opts)
    anchors = [0x01020304 * (i + 1) & 0xFFFFFFFF for i in range(count)]
    model = Golden(laps_port=PORT)
    out = model.process(original, _act(2, l3, l4, v6, count=count, probe=1, ack=0, sr_idx=0x5A, pid=0xBEEF,
                                         time=0x123456789ABC, anchors=_anchors(anchors)))
    assert len(out) == 1 and len(out[0]) == len(original) + 12 + 4 * count
    pkt = _check_ip(out[0], v6)
    assert pkt[UDP].dport == PORT and pkt[UDP].sport == 1234
    if not v6:
        assert pkt[UDP].chksum == 0
    laps = LapsHeader(bytes(pkt[UDP].payload))
    assert (laps.probe, laps.ack, laps.count, laps.sr_idx, laps.pid, laps.int_time, laps.reserved2) == \
        (1, 0, count, 0x5A, 0xBEEF, 0x123456789ABC, 4000)
    assert list(laps.anchors) == anchors
    assert bytes(laps.payload) == payload
    meta = parse(out[0], 3, laps_port=PORT)
    assert (meta["laps"], meta["laps_count"], meta["laps_pid"], meta["laps_time"], meta["laps_probe"],
            meta["laps_sr_idx"], meta["l3_off"], meta["l4_off"]) == (1, count, 0xBEEF, 0x123456789ABC, 1, 0x5A, l3, l4)
    back = model.process(out[0], _act(3, l3, l4, v6, count=count))
    assert back == [original]
    assert model.stats() == [0, 0, 1, 1, 0, 0, 0]


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("count", [0, 2, 4])
def test_update(v6, count):
    anchors = [0xA0B0C0D0 + i for i in range(count)]
    src, dst = (SRC6, DST6) if v6 else (SRC4, DST4)
    frame = laps_frame(src, dst, probe=0, ack=1, reserved=2, pid=1, time=2, sr_idx=3, anchors=anchors,
                       payload=b"xyz" * 20, tags=(0x8100,), sport=777)
    if v6:
        frame[UDP].chksum = None          # scapy computes a valid checksum
    frame = bytes(frame)
    l3, l4 = _offsets((0x8100,), v6)
    model = Golden(laps_port=PORT)
    out = model.process(frame, _act(1, l3, l4, v6, count=count, probe=1, ack=0, sr_idx=9, pid=0x4242,
                                    time=0xFFFF00001111, anchors=_anchors([5, 6, 7, 8])))
    assert len(out[0]) == len(frame)
    pkt = _check_ip(out[0], v6)
    laps = LapsHeader(bytes(pkt[UDP].payload))
    assert (laps.probe, laps.ack, laps.reserved, laps.count, laps.sr_idx, laps.pid, laps.int_time) == \
        (1, 0, 2, count, 9, 0x4242, 0xFFFF00001111)
    assert list(laps.anchors) == anchors and pkt[UDP].dport == PORT
    if v6:
        assert pkt[UDP].chksum != 0
    else:
        assert pkt[UDP].chksum == 0
        assert out[0][:l4] == frame[:l4]        # the IPv4 header is untouched by UPDATE
    assert model.stats()[UPDATED] == 1


def test_ipv6_zero_checksum_stays_zero():
    frame = _udp_frame(True, payload=bytes(50), chksum=0)
    l3, l4 = _offsets((), True)
    out = Golden(laps_port=PORT).process(frame, _act(2, l3, l4, True, count=1, anchors=3))
    assert Ether(out[0])[UDP].chksum == 0


def test_ipv6_remove_restores_a_valid_checksum():
    frame = laps_frame(SRC6, DST6, anchors=[1, 2, 3], dport=PORT, payload=b"\x55" * 33)
    frame[UDP].chksum = None
    frame = bytes(frame)
    inner = bytearray(frame)
    inner[14 + 40 + 8 + 10:14 + 40 + 8 + 12] = (4791).to_bytes(2, "big")
    pkt = Ether(bytes(inner))
    del pkt[UDP].chksum
    inner = bytes(pkt)
    out = Golden(laps_port=PORT).process(inner, _act(3, 14, 54, True, count=3))
    p = _check_ip(out[0], True)
    assert p[UDP].dport == 4791 and bytes(p[UDP].payload) == b"\x55" * 33


def test_drop_and_pass():
    model = Golden(laps_port=PORT)
    frame = _udp_frame(False, payload=bytes(30))
    assert model.process(frame, _act(2, 14, 34, False, drop=1)) == []
    assert model.process(frame, _act(0, 14, 34, False)) == [frame]
    assert model.process(frame, {}) == [frame]
    assert model.stats() == [2, 0, 0, 0, 1, 0, 0]


@pytest.mark.parametrize("op", [1, 2, 3])
@pytest.mark.parametrize("bad", ["odd_l4", "l3", "short", "count", "window", "l4_inside_ip"])
def test_refused_pass_unchanged(op, bad):
    frame = bytes(laps_frame(SRC4, DST4, anchors=[1], payload=bytes(4)))   # 14 + 20 + 8 + 16 + 4 = 62 bytes
    act = _act(op, 14, 34, False, count=1)
    if bad == "odd_l4":
        act["l4_off"] = 35
    elif bad == "l3":
        act["l3_off"] = 16
    elif bad == "short":
        frame = frame[:41] if op == 2 else frame[:57]      # INSERT needs h = 42 bytes, the others h + 16 = 58
    elif bad == "count":
        act["count"] = 5
    elif bad == "window":
        act["l4_off"] = 100                               # h + 16 = 124 fits, so make it not
        act["count"] = 4                                  # h + 28 = 136 > 128
    else:
        act["l4_off"] = 30
    model = Golden(laps_port=PORT)
    assert model.process(frame, act) == [frame]
    assert model.stats() == [0, 0, 0, 0, 0, 1, 0]


def test_limits_accepted():
    """The edges of the rule: INSERT with h equal to the frame length, REMOVE with h + K equal to it, and a result
    of exactly depth beats."""
    frame = _udp_frame(False)[:42]
    model = Golden(laps_port=PORT, depth=2)
    assert len(model.process(frame, _act(2, 14, 34, False, count=0))[0]) == 54
    lf = bytes(laps_frame(SRC4, DST4, anchors=[1, 2]))
    assert len(lf) == 62
    assert len(model.process(lf, _act(3, 14, 34, False, count=2))[0]) == 42
    big = _udp_frame(False, payload=bytes(128 - 42 - 16))
    assert len(big) == 112
    assert len(model.process(big, _act(2, 14, 34, False, count=1))[0]) == 128
    assert model.process(big + b"\0", _act(2, 14, 34, False, count=1)) == [big + b"\0"]
    assert model.stats() == [0, 0, 2, 1, 0, 1, 0]


@pytest.mark.parametrize("drop", [0, 1])
@pytest.mark.parametrize("op", [0, 1, 2, 3])
def test_too_long_dropped_whatever_the_action(op, drop):
    """With depth 2 (128 bytes): a LAPS frame of 129 bytes is dropped under any action and counted as too long
    only; the same frame cut to 128 bytes (exactly depth beats) is treated as usual."""
    long_frame = bytes(laps_frame(SRC4, DST4, anchors=[7], payload=bytes(71)))     # 14 + 20 + 8 + 16 + 71
    assert len(long_frame) == 129
    act = _act(op, 14, 34, False, count=1, drop=drop, pid=0x1234)     # the frame's pid is 0: UPDATE changes it
    model = Golden(laps_port=PORT, depth=2)
    assert model.process(long_frame, act) == []
    assert model.stats() == [0, 0, 0, 0, 0, 0, 1]
    fits = bytes(laps_frame(SRC4, DST4, anchors=[7], payload=bytes(70)))
    assert len(fits) == 128
    out = model.process(fits, act)
    # By hand, for 128 bytes: PASS passes; UPDATE keeps the length; INSERT is refused (128 + 16 > 128) and the
    # frame passes unchanged; REMOVE takes the 16-byte header; drop drops.
    want_len = {0: 128, 1: 128, 2: 128, 3: 112}[op]
    counter = DROPPED if drop else {0: PASSED, 1: UPDATED, 2: REFUSED, 3: REMOVED}[op]
    assert out == ([] if drop else [out[0]])
    if not drop:
        assert len(out[0]) == want_len
        assert (out[0] == fits) == (op in (0, 2))
    want = [0] * 7
    want[counter] = 1
    want[TOO_LONG] = 1
    assert model.stats() == want


def test_too_long_sizes_and_counts():
    """Frames around the buffer of depth 4 (256 bytes), by hand: 256 bytes and less pass, 257 (one byte over),
    320 (one beat over) and 775 (three buffers and 7 bytes) are dropped, whatever their action (PASS, INSERT,
    drop); the default depth 256 takes 16,384 bytes and not 16,385."""
    model = Golden(laps_port=PORT, depth=4)
    sizes_ops = [(256, 0, 0), (257, 0, 0), (60, 0, 0), (320, 2, 0), (256, 0, 1), (775, 0, 1), (255, 0, 0)]
    outs = [model.process(bytes(n), {"op": op, "drop": drop, "l3_off": 14, "l4_off": 34})
            for n, op, drop in sizes_ops]
    assert [[len(f) for f in out] for out in outs] == [[256], [], [60], [], [], [], [255]]
    assert model.stats() == [3, 0, 0, 0, 1, 0, 3]
    default = Golden()
    assert default.process(bytes(16384), {}) == [bytes(16384)]
    assert default.process(bytes(16385), {}) == []
    assert default.stats() == [1, 0, 0, 0, 0, 0, 1]


def test_counters_wrap():
    model = Golden()
    model.counts[PASSED] = (1 << 32) - 1
    model.process(b"\0" * 60, {})
    assert model.stats()[PASSED] == 0
    model.counts[TOO_LONG] = (1 << 32) - 1
    model.process(b"\0" * (256 * 64 + 1), {})
    assert model.stats()[TOO_LONG] == 0
    model.reset()
    assert model.stats() == [0] * 7


def test_random_round_trip():
    rng = random.Random(5)
    model = Golden(laps_port=PORT)
    for _ in range(200):
        v6 = rng.random() < 0.5
        tags = rng.choice(((), (0x8100,), (0x88A8, 0x8100)))
        opts = 0 if v6 else rng.choice((0, 4, 12, 40))
        original = _udp_frame(v6, tags=tags, ip_options=opts, payload=rng.randbytes(rng.randint(0, 1500)),
                              dport=rng.randrange(1, 65536), chksum=None if v6 else 0)
        l3, l4 = _offsets(tags, v6, opts)
        count = rng.randint(0, 4)
        out = model.process(original, _act(2, l3, l4, v6, count=count, anchors=rng.getrandbits(128),
                                           pid=rng.getrandbits(16), time=rng.getrandbits(48)))
        _check_ip(out[0], v6)
        assert model.process(out[0], _act(3, l3, l4, v6, count=count)) == [original]


@pytest.mark.parametrize("kwargs,error", [
    ({"depth": 1}, ValueError), ({"depth": 4097}, ValueError), ({"depth": 2.0}, TypeError),
    ({"user_width": 0}, ValueError), ({"laps_port": 0}, ValueError), ({"laps_port": 4791}, ValueError),
    ({"laps_port": True}, TypeError)])
def test_parameters(kwargs, error):
    from lbpipe.hdl.packet.laps_editor import LapsEditor
    with pytest.raises(error):
        Golden(**kwargs)
    with pytest.raises(error):
        LapsEditor(**kwargs)


def test_action_layout():
    from lbpipe.hdl.packet.laps_editor import LapsEdit
    layout = LapsEdit()
    fields = [(name, f.offset, f.width) for name, f in layout]
    assert fields == [("tag", 0, 16), ("op", 16, 2), ("drop", 18, 1), ("ipv6", 19, 1), ("l3_off", 20, 8),
                      ("l4_off", 28, 8), ("count", 36, 3), ("probe", 39, 1), ("ack", 40, 1), ("sr_idx", 41, 8),
                      ("pid", 49, 16), ("time", 65, 48), ("anchors", 113, 128)]
    assert layout.size == 241


# --- RTL: signature, cocotb under Icarus -------------------------------------------------------------------------

def test_signature():
    from amaranth import Shape
    from amaranth.lib import stream
    from amaranth.lib.wiring import In, Out

    from lbpipe.hdl.lib.axis import AXI4StreamSignature
    from lbpipe.hdl.packet.laps_editor import LapsEdit, LapsEditor
    dut = LapsEditor()
    assert (dut.depth, dut.laps_port) == (256, 0xC1A5)
    members = dut.signature.members
    assert set(members) == {"s_axis", "m_axis", "act", "stats"}
    assert members["s_axis"] == In(AXI4StreamSignature(data_width=512, user_width=1))
    assert members["m_axis"] == Out(AXI4StreamSignature(data_width=512, user_width=1))
    assert members["act"] == In(stream.Signature(LapsEdit()))
    assert members["stats"].flow == Out and Shape.cast(members["stats"].shape).width == 32 * 7
    small = LapsEditor(depth=8, user_width=3, laps_port=1000)
    assert (small.depth, small.laps_port) == (8, 1000)
    assert small.signature.members["m_axis"] == Out(AXI4StreamSignature(data_width=512, user_width=3))


def _run(testcase, *, depth=64, user_width=1, env=None, cut_through=False):
    from lbpipe.boards.top import FlatTop
    from lbpipe.hdl.packet.laps_editor import LapsEditor
    from lbpipe.tb.lib.runner import run_cocotb, write_verilog
    top = FlatTop(LapsEditor(depth=depth, user_width=user_width, cut_through=cut_through))
    name = "laps_editor_ct_top" if cut_through else "laps_editor_top"
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.packet.test_laps_editor", testcase=testcase,
               extra_env={"LAPS_DEPTH": str(depth), "LAPS_CT": str(int(cut_through)), **(env or {})})


@pytest.mark.parametrize("testcase", ["random_traffic", "random_traffic_pauses", "line_rate", "reset_mid_traffic",
                                      "first_beat_latency"])
def test_laps_editor_cocotb(testcase):
    _run(testcase)


@pytest.mark.parametrize("testcase", ["random_traffic_pauses", "ct_latency_constant", "ct_growth_pauses"])
def test_laps_editor_cocotb_cut_through(testcase):
    """Cut-through (beat FIFO of 8 beats, frames up to 9,216 bytes): golden frames with pauses, the first-beat
    latency constant over sizes, frames growing and shrinking across a beat boundary under back-pressure."""
    _run(testcase, depth=8, cut_through=True, env={"LAPS_FRAMES": "80"})


def test_laps_editor_cocotb_wide_tuser():
    _run("random_traffic_pauses", user_width=4, env={"LAPS_FRAMES": "60"})


def test_laps_editor_cocotb_small_depth():
    """An 8-beat FIFO: frames up to 512 bytes, INSERTs that would pass 512 refused, with pauses."""
    _run("random_traffic_pauses", depth=8, env={"LAPS_FRAMES": "120"})


@pytest.mark.parametrize("depth", [8, 64])
def test_laps_editor_cocotb_long_frames(depth):
    """Frames longer than ``depth`` beats, whatever their action, are dropped and counted; the frames around them
    come out as golden (the editor deadlocked on them before: the test has a time limit)."""
    _run("long_frames", depth=depth)


# 600 frames a run at the default depth: about 2 minutes of Icarus each on the reference machine (2,000 took 8).
@pytest.mark.regression
@pytest.mark.parametrize("seed", [21, pytest.param(22, marks=pytest.mark.deep)])
def test_laps_editor_cocotb_long(seed):
    _run("random_traffic", env={"LAPS_FRAMES": "600", "LAPS_SEED": str(seed)})
    _run("random_traffic_pauses", env={"LAPS_FRAMES": "600", "LAPS_SEED": str(seed)})


def test_cli_replay_golden_and_rtl_identical(tmp_path):
    """``lbpipe trace laps-editor`` writes frames and their actions; ``lbpipe replay`` runs them through the golden
    model and the RTL (with pauses on both sides), which send the same frames."""
    from lbpipe.cli import main
    from lbpipe.trace import read_events, read_pcap
    args = ["--param", "depth=64"]
    assert main(["trace", "laps-editor", *args, "-n", "30", "--seed", "4", "-o", str(tmp_path / "in.pcap")]) == 0
    acts = tmp_path / "in.actions.jsonl"
    assert len(read_events(acts, kinds=("act",))) == len(read_pcap(tmp_path / "in.pcap")) == 30
    common = ["replay", "laps-editor", str(tmp_path / "in.pcap"), *args, "--actions", str(acts)]
    assert main([*common, "-o", str(tmp_path / "g.pcap")]) == 0
    assert main([*common, "--engine", "rtl", "--idle", "0.2", "--backpressure", "0.3", "-o",
                 str(tmp_path / "r.pcap")]) == 0
    golden = read_pcap(tmp_path / "g.pcap")
    assert golden and golden == read_pcap(tmp_path / "r.pcap")


def test_cli_replay_rejects_bad_actions(tmp_path, capsys):
    from lbpipe.cli import main
    from lbpipe.trace import write_pcap
    write_pcap(tmp_path / "in.pcap", [bytes(80), bytes(90)])
    (tmp_path / "one.jsonl").write_text('{"act": {"op": 1}}\n')
    (tmp_path / "wide.jsonl").write_text('{"act": {"op": 1}}\n{"act": {"op": 9}}\n')
    base = ["replay", "laps-editor", str(tmp_path / "in.pcap"), "-o", str(tmp_path / "o.pcap")]
    assert main(base) == 2
    assert "needs its per-frame actions" in capsys.readouterr().err
    assert main([*base, "--actions", str(tmp_path / "one.jsonl")]) == 2
    assert "1 actions for 2 frames" in capsys.readouterr().err
    assert main([*base, "--actions", str(tmp_path / "wide.jsonl")]) == 2
    assert "wide.jsonl:2: field op=9 does not fit" in capsys.readouterr().err


def test_byte_count_of_every_contiguous_keep():
    """The byte count the RTL puts beside each beat (``_ones``, no adder) equals the number of kept lanes for every
    contiguous ``tkeep`` of a 512-bit beat, 0 to 64 lanes (the interface's only shapes), evaluated in simulation."""
    from amaranth import Module, Signal
    from amaranth.sim import Simulator
    from lbpipe.hdl.packet.laps_editor import _ones

    m = Module()
    keep, count = Signal(64), Signal(7)
    m.d.comb += count.eq(_ones(keep))
    seen = []

    async def bench(ctx):
        for lanes in range(65):
            ctx.set(keep, (1 << lanes) - 1)
            seen.append(ctx.get(count))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert seen == list(range(65))
