"""PRO receiver's NAK-frame stage (``pro-nak``, docs/pro_rx_wire.md): the golden model against frames scapy builds
(tb/lib/packets.py), the RTL's signature and parameters, and the cocotb tests of the RTL (tb/pro/test_nak.py)."""

import ipaddress

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.pro.nak import NakGen, nak_context_commands
from lbpipe.sim.pro.nak import NakGen as Golden
from lbpipe.tb.lib.packets import roce_nak
from lbpipe.tb.lib.runner import run_cocotb, write_verilog
from lbpipe.tb.pro.test_nak import check_nak


def _mac(text):
    return int(text.replace(":", ""), 16)


def _ip(text):
    return int(ipaddress.ip_address(text))


def _scapy_nak(psn, *, sip="10.1.2.3", dip="10.9.8.7", sport=0xC0DE, dqpn=0x12345, pkey=0xFFFF,
               smac="02:00:00:00:00:0a", dmac="02:00:00:00:00:0b"):
    """The NAK the datasheet defines, built by scapy (TOS 0, id 0, DF, TTL 64, UDP checksum 0, MSN 0)."""
    return bytes(roce_nak(sip, dip, sport, dqpn, psn, msn=0, src_mac=smac, dst_mac=dmac, tos=0, ttl=64, ip_id=0,
                          df=True, udp_chksum=0, pkey=pkey))


def _model_with_qp(qp=3, n_qps=16, **kw):
    model = Golden(n_qps=n_qps)
    for cmd in nak_context_commands(qp, dmac=_mac("02:00:00:00:00:0b"), smac=_mac("02:00:00:00:00:0a"),
                                    sip=_ip("10.1.2.3"), dip=_ip("10.9.8.7"), sport=0xC0DE, dqpn=0x12345, **kw):
        model.control(cmd)
    return model


@pytest.mark.parametrize("psn", [0, 1, 0x7FFFFF, 0xFFFFFF, 0x123456])
def test_golden_frame_is_scapys_nak(psn):
    model = _model_with_qp()
    (frame,) = model.process({"qp": 3, "nack": 1, "psn": psn})
    assert frame == _scapy_nak(psn)
    assert check_nak(frame, psn=psn, dqpn=0x12345, sip="10.1.2.3", dip="10.9.8.7") == []


def test_golden_pkey_from_the_context():
    model = _model_with_qp(pkey=0x8001)
    (frame,) = model.process({"qp": 3, "nack": 1, "psn": 9})
    assert frame == _scapy_nak(9, pkey=0x8001)


def test_golden_counts_misses_non_nacks_and_bad_commands():
    model = _model_with_qp(qp=3, n_qps=16)
    assert model.process({"qp": 3, "nack": 0, "psn": 5}) == []           # no nack: nothing, counter 2
    assert model.process({"qp": 4, "nack": 1, "psn": 5}) == []           # no context: missed
    assert model.process({"qp": 17, "nack": 1, "psn": 5}) == []          # out of range: missed
    model.control({"table": 4, "index": 3, "data": 0})                  # no such table
    model.control({"table": 0, "index": 16, "data": 0})                 # index out of range
    assert len(model.process({"qp": 3, "nack": 1, "psn": 5})) == 1
    assert model.stats() == [1, 2, 1, 2]
    model.control({"table": 3, "index": 3, "data": 0x12345})            # valid bit clear: QP torn down
    assert model.process({"qp": 3, "nack": 1, "psn": 5}) == []
    model.reset()
    assert model.stats() == [0, 0, 0, 0]


def test_check_nak_rejects_a_bad_frame():
    """The independent checker itself fails on a corrupted ICRC, checksum, PSN and syndrome."""
    good = _scapy_nak(77)
    assert check_nak(good, psn=77) == []
    for pos, what in ((61, "ICRC"), (25, "checksum"), (53, "PSN"), (54, "syndrome")):
        bad = bytearray(good)
        bad[pos] ^= 0x01
        assert check_nak(bytes(bad), psn=77), what


def test_signature_and_parameters():
    nak = NakGen(n_qps=10)
    assert nak.latency == 8
    members = nak.signature.members
    assert set(members) == {"i", "m_axis", "ctl", "stats"}
    for bad in (0, 1 << 21):
        with pytest.raises(ValueError):
            NakGen(n_qps=bad)
    with pytest.raises(TypeError):
        NakGen(n_qps=True)


def _run(testcase, n_qps=16, env=None):
    top = FlatTop(NakGen(n_qps=n_qps))
    path = write_verilog(top, name="pro_nak_top", ports=top.ports())
    run_cocotb(path, toplevel="pro_nak_top", test_module="lbpipe.tb.pro.test_nak", testcase=testcase,
               extra_env={"NAK_N_QPS": str(n_qps), **(env or {})})


@pytest.mark.parametrize("testcase", ["random_events", "random_events_pauses", "ooo_events", "one_per_clock",
                                      "reset_mid_traffic"])
def test_nak_cocotb(testcase):
    """n_qps = 13: QP indices 13 .. 15 out of range."""
    _run(testcase, n_qps=13)


def test_nak_cocotb_banks():
    """n_qps = 2,100: three context banks (the last of 52 QPs), QPs 2,100 .. 4,095 out of range; contexts at the bank
    boundaries."""
    _run("random_events_pauses", n_qps=2100)


# -- the receiver in the wire (pro-rx-wire) ---------------------------------------------------------------------------

import json  # noqa: E402

from lbpipe.hdl.pro.rx_wire import ProRxWire  # noqa: E402
from lbpipe.sim.pro.rx_wire import ProRxWireModel, RxControlPlane  # noqa: E402
from lbpipe.tb.pro.test_rx_wire import check_against_truth, loss_scenario, truth_counters  # noqa: E402

#: Small tables (fast in Icarus): 13 QPs, so QP indices 13 to 15 are out of range; a 16-bit bitmap.
RX_SMALL = dict(n_qps=13, bitmap_len=16, buckets=64, ways=2, ipv6=True)
#: docs/pro_rx_wire.md: "33 cycles from a frame's last beat to the NAK it causes" (and 1 cycle first beat in to out).
RX_NAK_LATENCY = 33


def _rx_model_with_qp(first_psn=100, wnd=0, **params):
    params = dict(RX_SMALL, **params)
    model = ProRxWireModel(**params)
    cp = RxControlPlane(**{k: params[k] for k in ("n_qps", "buckets", "ways", "ipv6")})
    for cmd in cp.add_qp(3, local_ip="10.0.0.2", local_qpn=0x42, first_psn=first_psn, wnd=wnd,
                         dmac=_mac("02:00:00:00:00:0b"), smac=_mac("02:00:00:00:00:0a"), sip=_ip("10.1.2.3"),
                         dip=_ip("10.9.8.7"), sport=0xC0DE, dqpn=0x12345):
        model.control(cmd)
    return model


def _rx_data(psn, qpn=0x42, dst="10.0.0.2"):
    from lbpipe.tb.lib.packets import roce_data
    return bytes(roce_data("10.9.8.7", dst, 0x1111, qpn, psn % (1 << 24), payload_len=32))


def test_rx_golden_figure4_naks():
    """Figure 4 (wnd 8): PSNs 1 to 3 lost, 4 to 8 and 11, 12 in order, 9 and 10 and 13 to 15 late. Worked by hand
    with pro-ooo's rules (datasheet): the head stays at 1; when 11 arrives tail - head = 10 > 8, so 1 is NACKed, and
    nothing else is (2 and 3 wait for 1's retransmission; 9, 10, 13 to 15 are inside the window). The NAK equals
    scapy's; every frame leaves unchanged."""
    model = _rx_model_with_qp(first_psn=1, wnd=8)
    naks = []
    for psn in (4, 5, 6, 7, 8, 11, 12, 9, 10, 13, 14, 15):
        frame = _rx_data(psn)
        out = model.process(frame)
        assert out[0] == frame
        naks += [(psn, n) for n in out[1:]]
    assert [p for p, _ in naks] == [11]
    assert naks[0][1] == _scapy_nak(1)
    out = model.process(_rx_data(1))              # 1's retransmission: the head moves to 2, 15 - 2 > 8: NACK 2
    assert out[1:] == [_scapy_nak(2)]
    assert model.process(_rx_data(2))[1:] == [_scapy_nak(3)]
    assert model.process(_rx_data(3))[1:] == []
    stats = model.stats()
    assert stats[3:10] == [15, 0, 0, 3, 0, 0, 0] and stats[10] == 3 and stats[13] == 0


def test_rx_golden_passes_and_counts():
    """A non-RoCE frame, an ACK, a data frame of an unknown QPN (classifier miss), a truncated data frame of the QP
    (parser: OTHER) pass unchanged, counted as not given to the window; a timeout of an index without a window is
    an unknown-QP event; a timeout of an idle QP sends nothing."""
    from lbpipe.tb.lib.packets import roce_ack
    model = _rx_model_with_qp()
    frames = [bytes(range(60)) + bytes(4), bytes(roce_ack("10.9.8.7", "10.0.0.2", 1, 0x42, 5)), _rx_data(100, qpn=0x43),
              _rx_data(100)[:-6]]
    for f in frames:
        assert model.process(f) == [f]
    assert model.timeout(7) == [] and model.timeout(3) == []
    stats = model.stats()
    assert stats[13] == 4 and stats[9] == 1 and stats[5] == 1 and stats[0:3] == [0, 2, 2]


def _golden_scenario(seed):
    """The loss scenario of ``seed`` through the golden model: (model, truth, frames it passed, NAK frames)."""
    cmds, events, truth = loss_scenario(seed, RX_SMALL)
    model = ProRxWireModel(**RX_SMALL)
    for c in cmds:
        model.control(c)
    frames, naks = [], []
    for kind, value in events:
        if kind == "frame":
            frames.append(value)
            naks += model.receive(value)[1]
        else:
            naks += model.timeout(value)
    return model, truth, frames, naks


def test_rx_scenario_properties_hold_on_the_golden_model():
    """The scenario's construction (losses, retransmission of what is NACKed, timeouts at the end) and the golden
    model agree on a few seeds: every loss NACKed once, nothing else."""
    for seed in range(6):
        model, truth, frames, naks = _golden_scenario(seed)
        assert check_against_truth(RX_SMALL, truth, frames, frames, naks) == []
        assert truth_counters(truth, model.stats()) == []


def test_rx_truth_checker_fails_on_bad_naks():
    """The independent checker fails on a NAK for a PSN that arrived, a NAK sent twice, a missing NAK, a changed
    host frame."""
    _, truth, frames, naks = _golden_scenario(1)
    assert check_against_truth(RX_SMALL, truth, frames, frames, naks) == []
    arrived = bytearray(naks[0])
    arrived[53] ^= 1                      # another PSN (and ICRC now wrong)
    for bad_naks in (naks + naks[:1], naks[1:], [bytes(arrived)] + naks[1:]):
        assert check_against_truth(RX_SMALL, truth, frames, frames, bad_naks)
    assert check_against_truth(RX_SMALL, truth, frames, frames[:-1] + [frames[-1][:-1]], naks)


def test_rx_wire_signature():
    wire = ProRxWire(**RX_SMALL)
    assert wire.latency == 1 and wire.nak_latency == RX_NAK_LATENCY
    assert set(wire.signature.members) == {"s_axis", "m_axis", "m_axis_nak", "tmo", "ctl", "stats"}
    with pytest.raises(ValueError):
        ProRxWire(n_qps=1)
    with pytest.raises(ValueError):
        ProRxWire(bitmap_len=12)


def _rx_run(params, testcases, name, env=None):
    top = FlatTop(ProRxWire(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.pro.test_rx_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params), "LBPIPE_NAK_LATENCY": str(RX_NAK_LATENCY),
                          **(env or {})})


def test_rx_wire_rtl():
    """Reordering and loss with and without stalls, NAK output blocked, reset mid-traffic, timing by hand."""
    _rx_run(RX_SMALL, ["recovery", "recovery_stalls", "nak_output_blocked", "reset_mid_traffic", "timing"],
            "pro_rx_wire_top")


def test_rx_wire_replay_both_engines(tmp_path):
    """``lbpipe trace`` then ``lbpipe replay`` of pro-rx-wire: the RTL (idle input, back-pressure on both outputs)
    writes the same frames as the golden model, each frame followed by the NAKs its event sent."""
    from lbpipe import engine
    from lbpipe.tb.pro.test_rx_wire import pcap_trace
    from lbpipe.trace import read_pcap, write_pcap
    cmds, frames = pcap_trace(2, 40, **RX_SMALL)
    write_pcap(tmp_path / "in.pcap", frames)
    ctl = [{"ctl": c} for c in cmds]
    n = engine.replay_pcap("pro-rx-wire", RX_SMALL, tmp_path / "in.pcap", tmp_path / "g.pcap", ctl)
    engine.replay_pcap("pro-rx-wire", RX_SMALL, tmp_path / "in.pcap", tmp_path / "r.pcap", ctl, engine="rtl",
                       idle=0.2, backpressure=0.3, seed=2)
    golden, rtl = read_pcap(tmp_path / "g.pcap"), read_pcap(tmp_path / "r.pcap")
    assert rtl == golden and n > len(frames)          # some NAKs among them
