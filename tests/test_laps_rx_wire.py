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


def _run(params, testcases, name, env=None):
    top = FlatTop(LapsRxWire(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.laps.test_rx_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params), **(env or {})})


def test_rtl():
    """Mixed traffic with stalls on every output, a clock offset, line rate, ACK latency, reset mid-traffic."""
    _run(SMALL, ["frames_with_stalls", "clock_offset", "line_rate", "ack_latency", "reset_mid_traffic"],
         "laps_rx_wire_top", env={"LBPIPE_ACK_LATENCY": str(LapsRxWire(**SMALL).latency)})


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
