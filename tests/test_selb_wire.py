"""SELB's source ToR in the wire: golden-model checks (expectations by hand) and the cocotb tests of
parser -> path mirror -> selb-cluster -> selb-reroute -> deparser -> mark."""

import json

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.selb.wire import SelbTxWire
from lbpipe.sim.selb.wire import SelbTxWireModel
from lbpipe.tb.lib.packets import icrc, roce_ack, roce_data
from lbpipe.tb.lib.runner import run_cocotb, write_verilog
from lbpipe.tb.selb.test_wire import HAND_PERIODS, period, stop_clock

SMALL = dict(n_flows=64, n_paths=8, k=2, q_bits=12, iter_cap=16, draws=4, theta=64, time_bits=8, hold=4,
             tick_cycles=64, depth=256, cluster_seed=0xACE1, reroute_seed=0xB5AD)
HOT = ("10.0.0.1", "10.1.0.9", 0xC3A5, 0x000123)          # source port low 3 bits: path 5
L4 = 14 + 20


def _published(**over):
    """The hand-worked clustering of tb/selb/test_wire.py: {0-3} and {4-7}, only path 5 congested."""
    model = SelbTxWireModel(**dict(SMALL, **over))
    for cmd in stop_clock(100) + period(HAND_PERIODS[0]) + period(HAND_PERIODS[1]) + period(HAND_PERIODS[2]):
        model.control(cmd)
    return model


def test_golden_hand_worked_reroute():
    """The flow on path 5 (congested; free mates 4, 6, 7; the first draw is the seed 0xB5AD = 46,509, rank
    floor(46,509 x 3 / 2**16) = 2: path 7): the first frame is the tail on path 5 (mark 0b01), the next ones leave
    on path 7 (port low bits 7, mark 0b10), ICRC right (test-side CRC)."""
    model = _published()
    outs = [model.process(bytes(roce_data(*HOT, n, payload_len=64))) for n in range(3)]
    ports = [int.from_bytes(o[L4:L4 + 2], "big") for o in outs]
    marks = [o[L4 + 12] & 3 for o in outs]
    assert ports == [0xC3A5, 0xC3A7, 0xC3A7] and marks == [0b01, 0b10, 0b10]
    assert all(o[-4:] == icrc(o) for o in outs)
    assert model.stats()[6:10] == [3, 1, 0, 1]     # the frame right after the tail was looked up on path 5: stale


def test_golden_other_frames_unchanged():
    """An ACK, a data frame with a non-zero UDP checksum, and a data frame of a flow on an uncongested path whose
    mark bits are set by its host (cleared: mark 0b00)."""
    model = _published()
    ack = bytes(roce_ack(*HOT, 1))
    csum = bytes(roce_data(*HOT, 2, payload_len=8, udp_chksum=0x1234))
    assert model.process(ack) == ack and model.process(csum) == csum
    assert model.stats()[13] == 2 and model.stats()[6] == 0
    cool = bytearray(bytes(roce_data("10.0.0.1", "10.1.0.8", 0x7001, 0x456, 3, payload_len=8, fecn=1)))
    cool[L4 + 12] |= 0x03
    out = model.process(bytes(cool))
    assert out[L4 + 12] == (cool[L4 + 12] & 0xFC) and out[:L4 + 12] == bytes(cool[:L4 + 12])
    assert out[L4 + 12] & 0x80, "FECN is kept"


def test_golden_clock_commands():
    """Table 48: index 0 sets now (mod 2**time_bits), index 1 the period; 49 and 50 are samples and ticks."""
    model = SelbTxWireModel(**SMALL)
    model.control({"table": 48, "index": 0, "data": 0x1FF})
    assert model.now == 0xFF
    model.control({"table": 48, "index": 1, "data": 0})
    assert model.period == 0
    model.control({"table": 49, "index": 3, "data": 700})
    model.control({"table": 50, "index": 0, "data": 0})
    assert model.cluster.stats()[1:3] == [1, 1]


def test_wire_parameters():
    with pytest.raises(ValueError):
        SelbTxWire(n_paths=6)
    with pytest.raises(ValueError):
        SelbTxWire(n_flows=1 << 13)
    with pytest.raises(ValueError):
        SelbTxWire(tick_cycles=1 << 16)
    with pytest.raises(TypeError):
        SelbTxWire(depth="x")


def _run(params, testcases, name):
    top = FlatTop(SelbTxWire(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.selb.test_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params)})


def test_rtl():
    """Mixed traffic with stalls, line rate, samples on smp, reset mid-traffic, a 3,000-clock output stall, the
    hand-worked reroute and the reset that sweeps the mirror."""
    _run(SMALL, ["frames_with_stalls", "line_rate", "samples_on_smp", "reset_mid_traffic", "long_stall",
                 "reroute_by_hand", "reset_sweeps_the_mirror"], "selb_tx_wire_top")


@pytest.mark.regression
def test_rtl_wider():
    """16 paths in 4 clusters, 256 flows, a 16-bit clock: mixed traffic with stalls, line rate and samples on smp
    against the golden model."""
    _run(dict(SMALL, n_flows=256, n_paths=16, k=4, q_bits=14, time_bits=16, hold=32, cluster_seed=0x1234,
              reroute_seed=0x0F0F), ["frames_with_stalls", "line_rate", "samples_on_smp"], "selb_tx_wire_top_wide")
