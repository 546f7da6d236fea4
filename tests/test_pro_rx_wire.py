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
