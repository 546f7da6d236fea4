"""PRO's sender in the wire: golden-model checks (expectations by hand) and the cocotb tests of
parser -> QP classifier -> round robin -> deparser."""

import json

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.pro.wire import ProTxWire
from lbpipe.sim.pro.wire import ProTxWireModel, TxControlPlane
from lbpipe.tb.lib.packets import icrc, roce_ack, roce_data
from lbpipe.tb.lib.runner import run_cocotb, write_verilog

SMALL = dict(n_qps=16, n_tors=4, m_paths=8, batch=1, buckets=64, ways=2, ipv6=True, depth=256)


def _installed(**over):
    params = dict(SMALL, **{"cut_through": True, **over})
    model = ProTxWireModel(**params)
    cp = TxControlPlane(**{k: params[k] for k in ("n_qps", "n_tors", "buckets", "ways", "ipv6")})
    for cmd in (cp.seed(2, 6) + cp.path_id(2, 6, 0xABC) + cp.path_id(2, 7, 0x001) + cp.path_id(2, 0, 0x555)
                + cp.add_qp(3, 2, "10.0.1.1", 0x42)):
        model.control(cmd)
    return model


def test_golden_port_low_bits_become_the_path_id():
    """One QP alone toward ToR 2 seeded C = 6: paths 6, then +1 each (span 1), PathIDs set by hand: the port's low
    12 bits, high 4 kept, ICRC right (test-side CRC)."""
    model = _installed()
    for psn, pid in enumerate([0xABC, 0x001, 0x555]):
        frame = bytes(roce_data("10.0.0.1", "10.0.1.1", 0x7123, 0x42, psn, payload_len=100))
        out = model.process(frame)
        assert int.from_bytes(out[34:36], "big") == 0x7000 | pid
        assert out[-4:] == icrc(out) and out[36:-4] == frame[36:-4]
    assert model.stats()[3:6] == [3, 0, 0]


def test_golden_passes_other_frames_counted():
    """An ACK of the QP, a data frame of an unknown QPN, a non-RoCE frame: unchanged, counted as unscheduled."""
    model = _installed()
    frames = [bytes(roce_ack("10.0.0.1", "10.0.1.1", 0x7123, 0x42, 1)),
              bytes(roce_data("10.0.0.1", "10.0.1.1", 0x7123, 0x43, 1, payload_len=8)),
              bytes(range(60)) + bytes(4)]
    for f in frames:
        assert model.process(f) == f
    assert model.stats()[9] == 3 and model.stats()[3:5] == [0, 0]


def test_golden_checksum_declined_in_cut_through():
    model = _installed()
    frame = bytes(roce_data("10.0.0.1", "10.0.1.1", 0x7123, 0x42, 1, payload_len=8, udp_chksum=0x1234))
    assert model.process(frame) == frame and model.stats()[10] == 1
    model = _installed(cut_through=False)
    out = model.process(frame)
    assert int.from_bytes(out[34:36], "big") == 0x7ABC and out[-4:] == icrc(out)


def test_wire_parameters():
    with pytest.raises(ValueError):
        ProTxWire(n_qps=1 << 20, n_tors=64)           # 20 + 6 bits do not fit the classifier's 24-bit value
    with pytest.raises(TypeError):
        ProTxWire(cut_through=1)


def _run(params, testcases, name):
    top = FlatTop(ProTxWire(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.pro.test_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params)})


def test_rtl():
    """Cut-through: mixed traffic with stalls, line rate, reset mid-traffic, Algorithm 1's ports by hand."""
    _run(dict(SMALL, cut_through=True), ["frames_with_stalls", "line_rate", "reset_mid_traffic", "algorithm1_ports"],
         "pro_tx_wire_top")


@pytest.mark.deep
def test_rtl_store_and_forward():
    """Store-and-forward, with batch 2 and a non-power-of-two M (golden comparison only)."""
    _run(dict(SMALL, m_paths=6, batch=2, cut_through=False), ["frames_with_stalls", "reset_mid_traffic"],
         "pro_tx_wire_top_sf")
