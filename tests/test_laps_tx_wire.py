"""LAPS sender in the wire: golden-model checks (expectations by hand and by scapy) and the cocotb tests of
parser -> PST -> PIT -> softmax -> LAPS header INSERT (tb/laps/test_tx_wire.py)."""

import json
import random

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.laps.tx_wire import LapsTxWire
from lbpipe.sim.laps.tx_wire import LapsTxWireModel, tx_wire_commands
from lbpipe.tb.laps.test_tx_wire import mixed_frames, table_for, udp_frame
from lbpipe.tb.lib.packets import LAPS_PORT, LapsHeader
from lbpipe.tb.lib.runner import run_cocotb, write_verilog

SMALL = dict(n_dests=16, k=4, ways=2, buckets=16, ipv6=False, n_entries=64, probe_rule="paper", lfsr_seed=0xACE1,
             precision=16, depth=256, laps_port=LAPS_PORT, tick_ns=4)


def _model(table, **over):
    params = dict(SMALL, **over)
    model = LapsTxWireModel(**params)
    for cmd in tx_wire_commands(table, beta_q=0, exp_entries=4, **params):
        model.control(cmd)
    return model


def test_golden_inserts_the_header_scapy_reads():
    """One destination, one valid path (slot 2, pid 2 x 16 + 5, anchors 10.1.1.1 and 10.1.1.2), the clock stopped
    at 0 then set to 123,456: scapy finds the LAPS header with the values written here, the inner port, the UDP
    and IP lengths 20 bytes longer, a valid IPv4 header checksum and the payload unchanged."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    pid = 2 * 16 + 5
    model = _model({"pst": [{"dst": "10.0.5.1", "pids": [0, 0, pid, 0]}],
                    "pit": [{"pid": pid, "base_val": 900, "anchors": ["10.1.1.1", "10.1.1.2"]}]})
    model.control({"table": 48, "index": 0, "data": 123456})
    frame = udp_frame("10.0.0.1", "10.0.5.1", 300, sport=11, dport=4000)
    # the path's time is 0 and its real_val 900: stale at 123,456 ns, so the frame also leaves a probe behind it
    [out, probe] = model.process(frame)
    want = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.5.1") / \
        UDP(sport=11, dport=LAPS_PORT, chksum=0) / LapsHeader(probe=1, pid=pid, int_time=123456, reserved2=4000,
                                                              anchors=[0x0A010101, 0x0A010102])
    assert probe == bytes(want)
    e, o = Ether(out), Ether(frame)
    assert e[UDP].dport == LAPS_PORT and e[UDP].len == o[UDP].len + 20 and e[IP].len == o[IP].len + 20
    hdr = LapsHeader(bytes(e[UDP].payload))
    assert (hdr.probe, hdr.ack, hdr.count, hdr.sr_idx, hdr.pid, hdr.int_time, hdr.reserved2) == \
        (0, 0, 2, 0, pid, 123456, 4000)
    assert hdr.anchors == [0x0A010101, 0x0A010102]
    assert bytes(hdr.payload) == bytes(o[UDP].payload)
    chk = e[IP].chksum
    del e[IP].chksum
    assert Ether(bytes(e))[IP].chksum == chk


def _probe_case(tags, options, ipv6):
    """A frame (``tags`` VLAN tags, ``options`` bytes of IPv4 options, or IPv6) to a destination whose one path
    (slot 1, four anchors) is stale: the model's two frames, and the probe scapy builds from the values here."""
    from scapy.layers.inet import IP, IPOption_NOP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw
    pid = 1 * 16 + 9
    anchors = [0x0A000001, 0x0A000002, 0x0A000003, 0xC0A80004]
    dst = "fd00::5" if ipv6 else "10.0.6.1"
    model = _model({"pst": [{"dst": dst, "pids": [0, pid, 0, 0]}],
                    "pit": [{"pid": pid, "base_val": 700, "anchors": [f"{a >> 24}.{a >> 16 & 255}.{a >> 8 & 255}."
                                                                       f"{a & 255}" for a in anchors]}]},
                   ipv6=ipv6)
    model.control({"table": 48, "index": 0, "data": 0xABCDEF})

    def head():
        pkt = Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b")
        for n in range(tags):
            pkt = pkt / Dot1Q(vlan=10 + n)
        if ipv6:
            return pkt / IPv6(src="fd00::1", dst=dst, hlim=9)
        return pkt / IP(src="10.0.0.3", dst=dst, id=77, ttl=5, tos=4, options=[IPOption_NOP()] * options)
    frame = bytes(head() / UDP(sport=5555, dport=6666) / Raw(b"q" * 200))
    want = bytes(head() / UDP(sport=5555, dport=LAPS_PORT, chksum=0) /
                 LapsHeader(probe=1, pid=pid, int_time=0xABCDEF, reserved2=6666, anchors=anchors))
    return model.process(frame), want


@pytest.mark.parametrize("tags, options, ipv6", [(0, 0, False), (1, 0, False), (2, 40, False), (2, 0, True),
                                                 (0, 8, False)])
def test_golden_probe_frame_scapy_builds(tags, options, ipv6):
    """The probe after its triggering frame equals scapy's: the headers up to the UDP source port copied, UDP to
    the LAPS port with checksum 0 and the probe's length, a type-1 LAPS header (the probed pid, the frame's time,
    its original port, the path's anchors), no payload; IPv4 total length and checksum or IPv6 payload length as
    scapy computes them. The largest case (two tags, 40 bytes of options, 4 anchors) is 118 bytes."""
    out, want = _probe_case(tags, options, ipv6)
    assert len(out) == 2 and out[1] == want
    if (tags, options) == (2, 40):
        assert len(want) == 118


def test_golden_passes_what_is_no_candidate():
    """Frames that are no LAPS candidates leave unchanged; a PST miss with the miss flag set (power-up) too."""
    table, dests = table_for(random.Random(1), SMALL)
    del table["default"]
    model = _model(table)
    frames, passes = mixed_frames(random.Random(2), 200, dests)
    for f, p in zip(frames, passes):
        out = model.process(f)
        if p:
            assert out == [f]
    miss = udp_frame("10.0.0.1", "10.9.9.9", 100)
    assert model.process(miss) == [miss]
    assert model.stats()[18] >= 1


def test_golden_running_clock_needs_times():
    model = LapsTxWireModel(**SMALL)
    with pytest.raises(ValueError):
        model.process(udp_frame("10.0.0.1", "10.0.5.1", 100))
    assert model.process(udp_frame("10.0.0.1", "10.0.5.1", 100), now=5)


def test_wire_parameters():
    with pytest.raises(ValueError):
        LapsTxWire(tick_ns=256)
    with pytest.raises(ValueError):
        LapsTxWire(k=32, n_entries=8192)
    with pytest.raises(ValueError):
        LapsTxWire(laps_port=4791)


def _run(params, testcases, name, env=None):
    top = FlatTop(LapsTxWire(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.laps.test_tx_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params), **(env or {})})


def test_rtl(tmp_path):
    """Mixed traffic with stalls and updates, line rate, the header by hand, updates steering the choice, the
    running clock, reset mid-traffic, probe frames by hand (their output slots, back-pressure), reset with a probe
    pending, and the bench at three sizes (its first-beat latencies against the
    datasheet's formula)."""
    out = tmp_path / "bench.json"
    _run(SMALL, ["frames_with_stalls", "line_rate", "header_by_hand", "updates_steer", "running_clock",
                 "reset_mid_traffic", "probes_by_hand", "reset_with_probe_pending", "bench"], "laps_tx_wire_top",
         env={"LBPIPE_BENCH_SIZES": json.dumps([64, 129, 4096]), "LBPIPE_BENCH_OUT": str(out)})
    rows = json.loads(out.read_text())
    assert [r["beats_per_clock"] for r in rows] == [1.0, 1.0, 1.0]


def test_pcap_replay_golden_and_rtl_identical(tmp_path):
    """``lbpipe trace laps-tx-wire`` then ``lbpipe replay`` on both engines (the RTL with idle input and
    back-pressure): the same frames, some of them given a header, and probe frames (the trace stops the clock past
    every path's 2 x real_val) right behind their triggering frames."""
    from lbpipe.cli import main
    from lbpipe.trace import read_pcap
    params = [a for k, v in SMALL.items() if k in ("n_dests", "k", "ways", "buckets", "n_entries")
              for a in ("--param", f"{k}={v}")]
    pcap, ctl = tmp_path / "in.pcap", tmp_path / "in.ctl.jsonl"
    assert main(["trace", "laps-tx-wire", *params, "--seed", "7", "-n", "40", "-o", str(pcap)]) == 0
    args = [*params, "--ctl", str(ctl)]
    assert main(["replay", "laps-tx-wire", str(pcap), *args, "-o", str(tmp_path / "g.pcap")]) == 0
    assert main(["replay", "laps-tx-wire", str(pcap), *args, "--engine", "rtl", "--idle", "0.3",
                 "--backpressure", "0.4", "--seed", "5", "-o", str(tmp_path / "r.pcap")]) == 0
    golden = read_pcap(tmp_path / "g.pcap")
    assert golden == read_pcap(tmp_path / "r.pcap")
    sent = read_pcap(pcap)
    from scapy.layers.inet import UDP
    from scapy.layers.l2 import Ether

    def is_probe(g):
        if len(g) < 54:                 # a probe has at least Ethernet, IPv4, UDP and the LAPS header's 12 bytes
            return False
        e = Ether(g)
        return UDP in e and e[UDP].dport == LAPS_PORT and bool(LapsHeader(bytes(e[UDP].payload)).probe)
    probes = [g for g in golden if is_probe(g)]
    assert len(golden) == 40 + len(probes) and len(probes) >= 5
    data = [g for g in golden if g not in probes]
    assert sum(g != s for g, s in zip(data, sent)) > 5
