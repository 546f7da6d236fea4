"""LAPS receiver in the wire: golden-model checks with expectations from scapy and by hand, and the cocotb tests of
the RTL against the golden model."""

import json
import random

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.laps.rx_wire import LapsRxWire
from lbpipe.sim.laps.rx_wire import LapsRxWireModel
from lbpipe.tb.laps.test_rx_wire import NOW0, data_frame
from lbpipe.tb.lib.runner import run_cocotb, write_verilog

SMALL = dict(n_entries=64, k=8, depth=256, laps_port=0xC1A5)
SMALL6 = dict(SMALL, ipv6=True)


def _run(params, testcases, name, env=None):
    top = FlatTop(LapsRxWire(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.laps.test_rx_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params), **(env or {})})


def test_rtl():
    """Mixed traffic with stalls on every output, a clock offset, line rate, ACK latency, reset mid-traffic."""
    _run(SMALL, ["frames_with_stalls", "clock_offset", "line_rate", "ack_latency", "reset_mid_traffic"],
         "laps_rx_wire_top", env={"LBPIPE_ACK_LATENCY": str(LapsRxWire(**SMALL).latency)})


def test_rtl_ipv6():
    """``ipv6=True``: the mixed traffic with IPv6 data frames, probes and ACKs among it (random addresses, VLAN
    tags), with stalls, at line rate and across a reset: IPv6 ACKs, every output and counter as the golden model."""
    _run(SMALL6, ["frames_with_stalls", "line_rate", "reset_mid_traffic"], "laps_rx_wire_v6_top")


NOW = NOW0 + 5_000_000


def _scapy_parse(frame):
    from scapy.layers.l2 import Ether
    from lbpipe.tb.lib.packets import LapsHeader
    from scapy.layers.inet import UDP
    from scapy.packet import bind_layers
    bind_layers(UDP, LapsHeader, dport=0xC1A5)
    return Ether(frame)


def _host_expected(src, dst, sport, flow, seq, payload, smac, dmac):
    """What the host must see: the frame as its sender's transport built it (RoCEv2 on 4791, UDP checksum 0)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    return bytes(Ether(src=smac, dst=dmac) / IP(src=src, dst=dst, flags="DF") / UDP(sport=sport, dport=4791, chksum=0)
                 / BTH(opcode=4, dqpn=flow, psn=seq) / Raw(payload))


def _frame(**kw):
    """A data frame with every field fixed by the test: the RoCEv2 frame the host's transport built (scapy, valid
    ICRC), with a LAPS header (scapy) between its UDP header and its BTH, as the sender's pipeline inserts it."""
    from scapy.packet import Raw
    from lbpipe.tb.lib.packets import LapsHeader, laps_frame
    pkt = laps_frame("10.0.0.1", "10.0.0.2", probe=kw.get("probe", 0), ack=kw.get("ack", 0), pid=kw.get("pid", 9),
                     time=kw.get("time", NOW - 12345), anchors=kw.get("anchors", [0x0A000001, 0x0A000002, 0x0A000003]),
                     sport=0x1234, src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02")
    pkt[LapsHeader].reserved2 = 4791
    if kw.get("inner", True):
        pkt = pkt / Raw(INNER[42:])
    return bytes(pkt)


INNER = _host_expected("10.0.0.1", "10.0.0.2", 0x1234, 0xABCDEF, 0x123456, b"p" * 40, "02:00:00:00:00:01",
                       "02:00:00:00:00:02")


def test_golden_data_frame_ack_by_scapy():
    """A data frame: the ACK read back with scapy (addresses swapped, checksum as scapy computes it, pid, latency
    12,345 ns, anchors reversed, the echo) and the host frame as the sender's transport built it."""
    from scapy.layers.inet import IP, UDP
    from lbpipe.tb.lib.packets import LapsHeader
    model = LapsRxWireModel(**SMALL)
    out = model.step(_frame(), NOW)
    ack = _scapy_parse(out["ack"])
    assert ack.src == "02:00:00:00:00:02" and ack.dst == "02:00:00:00:00:01"
    assert ack[IP].src == "10.0.0.2" and ack[IP].dst == "10.0.0.1" and ack[IP].ttl == 64 and ack[IP].flags == 2
    chk = ack[IP].chksum
    del ack[IP].chksum
    assert IP(bytes(ack[IP]))[IP].chksum == chk
    assert ack[UDP].sport == 0x1234 and ack[UDP].dport == 0xC1A5 and ack[UDP].chksum == 0
    assert ack[UDP].len == len(out["ack"]) - 34 and ack[IP].len == len(out["ack"]) - 14
    h = ack[LapsHeader]
    assert (h.probe, h.ack, h.count, h.sr_idx, h.pid, h.int_time) == (0, 1, 3, 0, 9, 12345)
    assert h.anchors == [0x0A000003, 0x0A000002, 0x0A000001] and h.reserved2 == 4791
    echo = bytes(h.payload)
    assert len(echo) == 12 and echo[0] == 4
    assert echo[5:8] == bytes.fromhex("abcdef") and echo[9:] == bytes.fromhex("123456")
    assert out["host"] == INNER
    assert out["upd"] is None and out["loss"] is None
    assert model.stats()[0] == 1 and sum(model.stats()[1:10]) == 0


def test_golden_ack_at_sender():
    """An ACK (time field = its latency 777): PIT update {pid, 777, now}, loss item with the echoed flow and seq, the
    host frame without the LAPS header; a duplicate gives the same items again."""
    model = LapsRxWireModel(**SMALL)
    frame = _frame(ack=1, time=777)
    for n in (1, 2):
        out = model.step(frame, NOW)
        assert out["upd"] == {"pid": 9, "owd": 777, "now": NOW}
        assert out["loss"] == {"flow": 0xABCDEF, "seq": 0x123456, "pid": 9, "owd": 777, "now": NOW}
        assert out["ack"] is None and out["host"] == INNER
        assert model.stats()[2] == n
    # a latency that does not fit 32 bits saturates below the PIT's infinity
    assert model.step(_frame(ack=1, time=1 << 40), NOW)["upd"]["owd"] == 0xFFFF_FFFE


def test_golden_probe_and_probe_ack():
    """A probe is answered (type bit kept) and not delivered; a probe ACK updates the PIT only, not delivered."""
    model = LapsRxWireModel(**SMALL)
    out = model.step(_frame(probe=1, inner=False), NOW)
    ack = _scapy_parse(out["ack"])
    from lbpipe.tb.lib.packets import LapsHeader
    assert ack[LapsHeader].probe == 1 and ack[LapsHeader].ack == 1 and out["host"] is None
    out = model.step(_frame(probe=1, ack=1, inner=False, time=500), NOW0 + 1500)
    assert out["upd"] == {"pid": 9, "owd": 500, "now": NOW0 + 1500}
    assert out["loss"] is None and out["host"] is None and out["ack"] is None
    assert model.stats()[1] == 1 and model.stats()[3] == 1


def test_golden_time_from_the_future_and_bad_pids():
    """A send time after now: latency 0, counted (no wrap-around); pids 0, index 0, n_entries: no update, counted,
    frame still delivered."""
    model = LapsRxWireModel(**SMALL)
    out = model.step(_frame(time=NOW + 1), NOW)
    assert int.from_bytes(out["ack"][46:52], "big") == 0 and model.stats()[5] == 1
    out = model.step(_frame(probe=1, time=NOW + 10**9), NOW)
    assert int.from_bytes(out["ack"][46:52], "big") == 0 and model.stats()[5] == 2
    out = model.step(_frame(time=NOW - 1), NOW)
    assert int.from_bytes(out["ack"][46:52], "big") == 1 and model.stats()[5] == 2
    for pid in (0, 8, 64, 0xFFFF):
        out = model.step(_frame(ack=1, pid=pid, time=1), NOW)
        assert out["upd"] is None and out["loss"] is None and out["host"] is not None
    assert model.stats()[4] == 4


def test_golden_malformed_truncated_ipv6():
    """A count of 7 (malformed) and a header cut short pass unchanged, counted; an IPv6 data frame is delivered
    without its header and not acknowledged (counted)."""
    rng = random.Random(1)
    model = LapsRxWireModel(**SMALL)
    bad = bytearray(_frame())
    bad[42] = (bad[42] & 0xF0) | 7
    assert model.step(bytes(bad), NOW)["host"] == bytes(bad)
    cut = _frame()[:50]
    assert model.step(cut, NOW) == {"host": cut, "ack": None, "upd": None, "loss": None}
    out = model.step(data_frame(rng, v6=True, n_entries=64, k=8), NOW)
    assert out["ack"] is None and out["host"] is not None
    s = model.stats()
    assert s[9] == 1 and s[8] == 1 and s[6] == 1


def test_parameters():
    with pytest.raises(ValueError):
        LapsRxWire(n_entries=60, k=8)
    with pytest.raises(ValueError):
        LapsRxWire(laps_port=4791)
    with pytest.raises(TypeError):
        LapsRxWire(depth="x")
    for bad in (1, "True", None):
        with pytest.raises(TypeError):
            LapsRxWire(ipv6=bad)
        with pytest.raises(TypeError):
            LapsRxWireModel(ipv6=bad)


# -- IPv6 ACKs (ipv6=True) -------------------------------------------------------------------------------------------

SRC6, DST6 = "2001:db8:1:2:3:4:5:6", "fd12:3456:789a:1::beef"
ANCHORS = [0x0A000001, 0x0A000002, 0x0A000003]


def _frame6(*, probe=0, ack=0, tags=(0x8100,), time=NOW - 12345, anchors=ANCHORS):
    """An IPv6 LAPS data frame (VLAN-tagged: the ACK leaves untagged) or probe, scapy-built, every field fixed here:
    the data carries a RoCEv2 BTH (QP 0xABCDEF, PSN 0x123456) and 40 bytes after its LAPS header."""
    from scapy.contrib.roce import BTH
    from scapy.packet import Raw
    from lbpipe.tb.lib.packets import LapsHeader, laps_frame
    pkt = laps_frame(SRC6, DST6, probe=probe, ack=ack, pid=9, time=time, anchors=anchors,
                     tags=tags, sport=0x1234, src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02")
    pkt[LapsHeader].reserved2 = 4791
    if not probe:
        pkt = pkt / BTH(opcode=4, dqpn=0xABCDEF, psn=0x123456) / Raw(b"p" * 40)
    return bytes(pkt)


def _ack6(laps, hlim=64):
    """The IPv6 ACK scapy builds around ``laps`` (the LAPS header and echo bytes worked out by the caller): MACs
    swapped, untagged, addresses swapped, traffic class and flow label 0, UDP to the LAPS port, checksum 0."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    return bytes(Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
                 / IPv6(src=DST6, dst=SRC6, tc=0, fl=0, hlim=hlim) / UDP(sport=0x1234, dport=0xC1A5, chksum=0)
                 / Raw(laps))


def test_golden_ipv6_data_and_probe_acks_by_scapy():
    """``ipv6=True``: an IPv6 data frame (one VLAN tag) and an IPv6 probe are answered byte for byte as scapy builds
    the ACKs (payload length and UDP length by scapy, 86 + 4 count bytes), the LAPS bytes worked out here: type
    bits, count, sr_idx 0, pid 9, latency 12,345 ns, the inner port, anchors reversed, the BTH's first 12 bytes
    as echo (a probe has nothing after its header: 12 zero bytes). The hop limit follows the ctl TTL. Counted as
    an IPv4 ACK is."""
    from scapy.contrib.roce import BTH
    model = LapsRxWireModel(**SMALL6)
    echo = bytes(BTH(opcode=4, dqpn=0xABCDEF, psn=0x123456))[:12]
    laps = (bytes([0x40 | 3, 0, 0, 9]) + (12345).to_bytes(6, "big") + (4791).to_bytes(2, "big")
            + bytes.fromhex("0a000003" "0a000002" "0a000001") + echo)
    out = model.step(_frame6(), NOW)
    assert out["ack"] == _ack6(laps) and len(out["ack"]) == 86 + 4 * 3
    assert out["host"] is not None and len(out["host"]) == len(_frame6()) - 24
    assert out["upd"] is None and out["loss"] is None
    probe_laps = (bytes([0xC0 | 2, 0, 0, 9]) + (500).to_bytes(6, "big") + (4791).to_bytes(2, "big")
                  + bytes.fromhex("c0a80002" "c0a80001") + bytes(12))
    model.control({"table": 0, "index": 0, "data": 1 | 9 << 8})
    out = model.step(_frame6(probe=1, tags=(), time=NOW - 500, anchors=[0xC0A80001, 0xC0A80002]), NOW)
    assert out["ack"] == _ack6(probe_laps, hlim=9) and len(out["ack"]) == 86 + 8 and out["host"] is None
    s = model.stats()
    assert s[0] == 1 and s[1] == 1 and sum(s[2:10]) == 0


@pytest.mark.parametrize("ipv6", [False, True])
def test_golden_ipv6_ack_at_sender(ipv6):
    """IPv6 LAPS ACKs taken at the sender (scapy; one VLAN tag, then QinQ) give their PIT update and loss item
    whatever ``ipv6`` is: flow = echo bytes 5-7 (the BTH's destination QP), seq = echo bytes 9-11 (its
    PSN), big-endian; owd = the ACK's time field (saturated below the PIT's infinity); the host gets the frame
    without its LAPS header; nothing is answered."""
    from scapy.contrib.roce import BTH
    from scapy.packet import Raw
    from lbpipe.tb.lib.packets import LapsHeader, laps_frame
    model = LapsRxWireModel(**SMALL, ipv6=ipv6)
    cases = [  # tags, pid, time field, anchors, QP, PSN, owd by hand, LAPS header bytes by hand
        ((0x8100,), 9, 777, ANCHORS, 0x5A0001, 0xFFFFFE, 777, 12 + 12),
        ((0x88A8, 0x8100), 63, 1 << 40, ANCHORS + [0xC0A80001], 0x000102, 0x7F8081, 0xFFFF_FFFE, 12 + 16)]
    for n, (tags, pid, time, anchors, qp, psn, owd, size) in enumerate(cases, 1):
        pkt = laps_frame(SRC6, DST6, ack=1, pid=pid, time=time, anchors=anchors, tags=tags, sport=0x1234,
                         src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02")
        pkt[LapsHeader].reserved2 = 4791
        frame = bytes(pkt / BTH(opcode=4, dqpn=qp, psn=psn) / Raw(b"q" * 40))
        # the echo as the datasheet places it: the 12 bytes after the LAPS header (14 + 4 per tag + 40 + 8 = its
        # offset); the QP and PSN at echo bytes 5-7 and 9-11 (RoCEv2 BTH)
        echo = frame[62 + 4 * len(tags) + size:][:12]
        assert echo[5:8] == qp.to_bytes(3, "big") and echo[9:12] == psn.to_bytes(3, "big")
        out = model.step(frame, NOW + n)
        assert out["upd"] == {"pid": pid, "owd": owd, "now": NOW + n}
        assert out["loss"] == {"flow": qp, "seq": psn, "pid": pid, "owd": owd, "now": NOW + n}
        assert out["ack"] is None and len(out["host"]) == len(frame) - size
        s = model.stats()
        assert s[2] == n and s[0] == s[1] == s[6] == 0


def test_golden_ipv6_off_and_extension_headers():
    """``ipv6=False`` (the default): the same IPv6 frames are not answered, counted ``not_acked``, the data still
    delivered without its header. ``ipv6=True``: an IPv6 LAPS datagram behind a hop-by-hop extension header is no
    LAPS frame to the parser: passed unchanged, not answered, counted ``not_laps``."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    model = LapsRxWireModel(**SMALL)
    out = model.step(_frame6(), NOW)
    assert out["ack"] is None and len(out["host"]) == len(_frame6()) - 24
    assert model.step(_frame6(probe=1), NOW) == {"host": None, "ack": None, "upd": None, "loss": None}
    s = model.stats()
    assert s[6] == 2 and s[0] == 0 and s[1] == 0
    laps = bytes([0, 0, 0, 9]) + (NOW - 5).to_bytes(6, "big") + bytes(2)
    ext = bytes(Ether() / IPv6(src=SRC6, dst=DST6) / IPv6ExtHdrHopByHop() / UDP(sport=1, dport=0xC1A5, chksum=0)
                / Raw(laps + b"x" * 30))
    model = LapsRxWireModel(**SMALL6)
    assert model.step(ext, NOW) == {"host": ext, "ack": None, "upd": None, "loss": None}
    s = model.stats()
    assert s[8] == 1 and s[6] == 0 and s[0] == 0


@pytest.mark.regression
def test_replay_engines_agree(tmp_path):
    """``lbpipe trace``/``replay``: the seeded pcap through the golden model and through the RTL (idle input,
    back-pressure on both frame outputs) gives the same frames, host frames and ACKs interleaved alike."""
    from lbpipe.blocks import get_block
    from lbpipe.engine import replay_pcap
    from lbpipe.trace import read_pcap, write_pcap
    from lbpipe.tb.laps.test_rx_wire import pcap_trace
    params = dict(SMALL)
    _, frames = pcap_trace(3, 80, **params)
    write_pcap(tmp_path / "in.pcap", frames)
    block = get_block("laps-rx-wire")
    replay_pcap(block, params, tmp_path / "in.pcap", tmp_path / "g.pcap", [])
    replay_pcap(block, params, tmp_path / "in.pcap", tmp_path / "r.pcap", [], engine="rtl", idle=0.2,
                backpressure=0.3)
    golden, rtl = read_pcap(tmp_path / "g.pcap"), read_pcap(tmp_path / "r.pcap")
    assert len(golden) > len(frames) // 2 and golden == rtl


def _tx_model(**over):
    """A ``laps-tx-wire`` golden model with ``ipv6=True`` and one IPv6 destination, fd00::5, over two paths (slots
    1 and 2 of 4: pids 16 + 3 and 32 + 7, base_val 700 and 900 ns, two anchors each)."""
    from lbpipe.sim.laps.tx_wire import LapsTxWireModel, tx_wire_commands
    params = dict(n_dests=16, k=4, ways=2, buckets=16, ipv6=True, n_entries=64, probe_rule="paper",
                  lfsr_seed=0xACE1, precision=16, depth=256, laps_port=0xC1A5, tick_ns=4, **over)
    model = LapsTxWireModel(**params)
    table = {"pst": [{"dst": "fd00::5", "pids": [0, 16 + 3, 32 + 7, 0]}],
             "pit": [{"pid": 16 + 3, "base_val": 700, "anchors": ["10.9.0.1", "10.9.0.2"]},
                     {"pid": 32 + 7, "base_val": 900, "anchors": ["10.9.1.1", "10.9.1.2"]}]}
    for cmd in tx_wire_commands(table, beta_q=0, exp_entries=4, **params):
        model.control(cmd)
    return model


@pytest.mark.parametrize("answered", [True, False])
def test_golden_closed_loop_over_ipv6(answered):
    """LAPS over IPv6 in golden models: ``laps-tx-wire`` (``ipv6=True``) sends a host's IPv6 UDP frames to fd00::5,
    one every 10 us; each frame it emits (data with a LAPS header, probes) crosses its path (by its pid, read with
    scapy: 1,500 ns on pid 19, 2,500 on pid 39) to a ``laps-rx-wire`` (``ipv6`` = ``answered``) whose ACKs come
    back over the same delay to the sender's ``laps-rx-wire``, whose PIT updates go to the sender's PIT. Answered:
    every data frame and probe gets an IPv6 ACK addressed to the host (scapy), each update carries its path's delay,
    and the PIT holds it; not answered (``ipv6=False``, as before): no ACK, and every probe doubles its path's
    real_val (base_val x 2 ** probes: 64 and more here)."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from lbpipe.tb.lib.packets import LapsHeader
    from lbpipe.tb.laps.test_tx_wire import udp_frame
    delay = {16 + 3: 1500, 32 + 7: 2500}
    tx = _tx_model()
    far = LapsRxWireModel(n_entries=64, k=4, ipv6=answered)
    near = LapsRxWireModel(n_entries=64, k=4, ipv6=True)
    sent, acks, updates = [], [], []
    for n in range(40):
        t = 10_000 * (n + 1)
        for f in tx.process(udp_frame("fd00::1", "fd00::5", 300, sport=5555, dport=6666), now=t):
            e = Ether(f)
            assert e[IPv6].dst == "fd00::5" and e[UDP].dport == 0xC1A5
            h = LapsHeader(bytes(e[UDP].payload))
            sent.append((h.probe, h.pid))
            out = far.step(f, t + delay[h.pid])
            if out["ack"] is None:
                continue
            a = Ether(out["ack"])
            acks.append((LapsHeader(bytes(a[UDP].payload)).probe, a[IPv6].src, a[IPv6].dst, a[UDP].dport))
            upd = near.step(out["ack"], t + 2 * delay[h.pid])["upd"]
            assert upd is not None
            updates.append((upd["pid"], upd["owd"]))
            tx.update(upd)
    probes = sum(p for p, _ in sent)
    assert len(sent) > 40 and probes >= 4 and {pid for _, pid in sent} == set(delay)
    if answered:
        assert acks == [(p, "fd00::5", "fd00::1", 0xC1A5) for p, _ in sent]
        assert updates == [(pid, delay[pid]) for _, pid in sent]
        assert [tx.pit.real[pid] for pid in delay] == list(delay.values())
        assert near.stats()[2] + near.stats()[3] == len(sent) and near.stats()[3] == probes
    else:
        assert acks == [] and updates == [] and far.stats()[6] == len(sent)
        # Algorithm 1: each unanswered probe doubles its path's real_val
        assert [tx.pit.real[pid] for pid in delay] == [base << sent.count((1, pid))
                                                        for pid, base in ((19, 700), (39, 900))]
