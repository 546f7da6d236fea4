"""FLB's source edge switch in the wire: golden-model checks (expectations by hand) and the cocotb tests of
parser -> flb-isolate -> mask filter -> flb-route -> deparser."""

import json

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.flb.wire import FlbTxWire
from lbpipe.sim.flb.wire import FlbTxWireModel
from lbpipe.tb.flb.test_wire import HAND_DELAYS, cnm_cmd, delay_cmd, flow_index, stop_clock
from lbpipe.tb.lib.packets import RC_SEND_ONLY, icrc, roce_ack, roce_data
from lbpipe.tb.lib.runner import run_cocotb, write_verilog

SMALL = dict(n_flows=256, n_dests=3, n_paths=4, n_slots=4, n_ports=4, time_bits=12, delay_bits=12, timeout=1000,
             release=1000, margin=0, dest_shift=8, tick_cycles=64, depth=256, sample_ticks=5)
L4 = 14 + 20
F = ("10.0.0.1", "10.0.1.7", 0x1230, 0x000111)
G = ("10.0.0.2", "10.0.1.8", 0x4560, 0x000222)
H = ("10.0.0.3", "10.0.1.9", 0x7890, 0x000333)


def _port(frame):
    return int.from_bytes(frame[L4:L4 + 2], "big")


def _programmed(**over):
    model = FlbTxWireModel(**dict(SMALL, **over))
    for cmd in stop_clock(100) + [delay_cmd(1, p, d) for p, d in HAND_DELAYS.items()]:
        model.control(cmd)
    return model


def _send(model, flow, n):
    return model.process(bytes(roce_data(*flow, n, opcode=RC_SEND_ONLY, payload_len=40)))


#: Destination 1's delays where the isolation path (3, the highest) is the slowest.
SLOW_ISOLATION = {0: 50, 1: 5, 2: 30, 3: 60}


def test_golden_release_from_a_slow_isolation_path():
    """Destination 1's delays 50, 5, 30, 60 (the clock stopped at 100): F new, path 1 (5). CNM: F isolated, on 3
    (60). Released, next packet at the same tick: flb-route recorded 3 with the isolated packet; gap 0, so no path
    can be taken that is faster than 3: F stays on 3. The clock at 200: gap 100, the window 0 < 60 - d(q) <= 99
    holds paths 0, 1, 2: the fastest, 1. (Had flb-route kept its own choice beside the isolated packet, path 1, F
    would be back on 1 at once, 55 ticks ahead of its isolated packet.)"""
    model = FlbTxWireModel(**SMALL)
    for cmd in stop_clock(100) + [delay_cmd(1, p, d) for p, d in SLOW_ISOLATION.items()]:
        model.control(cmd)
    f = flow_index(F, SMALL["n_flows"])
    lows = [_port(_send(model, F, 1)) & 3]
    model.control(cnm_cmd(f, 1, 0, 1, 1))
    lows.append(_port(_send(model, F, 2)) & 3)
    model.control(cnm_cmd(f, 1, 0, 1, 0))
    lows.append(_port(_send(model, F, 3)) & 3)
    for cmd in stop_clock(200):
        model.control(cmd)
    lows.append(_port(_send(model, F, 4)) & 3)
    assert lows == [1, 3, 3, 1]


def test_golden_hand_worked():
    """tb/flb/test_wire.py's hand-worked sequence (destination 1's delays 50, 20, 30, 5): G new on path 3; F
    isolated on path 3; H new on path 1 (3 isolated); G off the isolated path to 1; F released stays on 3 (its
    isolation path, which flb-route recorded; none faster); ICRCs
    right (test-side CRC); 3 set updates; flb-isolate 1 isolated packet, 1 congestion, 1 release."""
    model = _programmed()
    nf = SMALL["n_flows"]
    lows = [_port(_send(model, G, 1)) & 3]
    model.control(cnm_cmd(flow_index(F, nf), 1, 0, 1, 1))
    outs = [_send(model, F, 3), _send(model, H, 4), _send(model, G, 5)]
    model.control(cnm_cmd(flow_index(F, nf), 1, 0, 1, 0))
    outs.append(_send(model, F, 7))
    lows += [_port(o) & 3 for o in outs]
    assert lows == [3, 3, 1, 1, 3]
    assert all(o[-4:] == icrc(o) for o in outs)
    stats = model.stats()
    assert stats[0:3] == [1, 1, 1] and stats[13] == 3


def test_golden_other_frames_unchanged():
    """A data frame with a non-zero UDP checksum and a non-RoCE frame are not FLB traffic; a frame to destination 3
    (2 bits, 3 destinations) has no route: all unchanged and counted. An ACK is FLB traffic: it is routed."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    model = _programmed()
    csum = bytes(roce_data(*G, 2, payload_len=8, udp_chksum=0x1234))
    other = bytes(Ether() / IP(src="1.2.3.4", dst="10.0.1.1") / UDP(sport=5, dport=53) / (b"x" * 20))
    far = bytes(roce_data("10.0.0.1", "10.0.3.7", 0x1233, 0x444, 1, payload_len=8))
    assert model.process(csum) == csum and model.process(other) == other and model.process(far) == far
    assert model.stats()[11:13] == [2, 1]
    ack = bytes(roce_ack(*G, 1))
    out = model.process(ack)
    assert _port(out) & 3 == 3 and out[-4:] == icrc(out)          # new flow: the fastest path, 3


def test_golden_cnm_command_fields():
    """Table 49 packs dest in bits 0-15, cp 16-23, n 24-27, cong 28 (the datasheet's): a congestion CNM naming
    point 2 with n 4 isolates the flow with weight 1/4: k = 1, the set {3}."""
    model = _programmed()
    nf = SMALL["n_flows"]
    model.control({"table": 49, "index": flow_index(F, nf), "data": 1 | 2 << 16 | 4 << 24 | 1 << 28})
    assert model.isolate.slots[0][:3] == [flow_index(F, nf), 1, 4] and model.isolate.slots[0][4] == 2
    assert _port(_send(model, F, 1)) & 3 == 3
    assert model.route.isolated[1] == 0b1000


def test_golden_reset_resends_sets():
    """flb-route keeps its sets across a reset, the filter does not: after a reset the first packet of each
    destination sends its set again (the count restarts at 0 and reaches 1)."""
    model = _programmed()
    _send(model, G, 1)
    assert model.stats()[13] == 1
    model.reset()
    _send(model, G, 2)
    _send(model, G, 3)
    assert model.stats()[13] == 1


def test_wire_parameters():
    with pytest.raises(ValueError):
        FlbTxWire(n_flows=1000)
    with pytest.raises(ValueError):
        FlbTxWire(n_dests=300)
    with pytest.raises(ValueError):
        FlbTxWire(dest_shift=29)
    with pytest.raises(ValueError):
        FlbTxWire(tick_cycles=1 << 16)
    with pytest.raises(ValueError):
        FlbTxWire(n_slots=9)
    with pytest.raises(TypeError):
        FlbTxWire(depth="x")


def _run(params, testcases, name):
    top = FlatTop(FlbTxWire(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.flb.test_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params)})


def test_rtl():
    """Mixed traffic with stalls, samples over a moving clock, line rate, CNMs, delays and measurements on their
    ports, reset mid-traffic, a 3,000-clock output stall, commands beside frames; hand-worked: the marks, the reset
    that forgets the samples, measurements racing frames, the decisions, the reset that sweeps the filter, a delay
    and a set in one clock, the clock's gaps and timeouts, a CNM with the clock running, a release from a slow
    isolation path."""
    _run(SMALL, ["frames_with_stalls", "samples_over_time", "marks_by_hand", "samples_with_a_running_clock",
                 "reset_forgets_samples",
                 "measurements_race_frames", "line_rate", "ports_cnm_and_dly", "reset_mid_traffic", "long_stall",
                 "commands_beside_frames", "route_by_hand", "reset_sweeps_the_sets", "delay_waits_for_the_set",
                 "clock_by_hand", "cnm_with_a_running_clock", "release_from_a_slow_isolation_path"],
         "flb_tx_wire_top")


def test_rtl_marks_wide():
    """The marks by hand at 8 paths, 16 destinations, 16-bit ticks and the default sampling period
    (``tb/flb/tx_marks.py``'s second scenario)."""
    from lbpipe.tb.flb.tx_marks import WIDE
    _run(WIDE, ["marks_by_hand"], "flb_tx_wire_top_marks")


@pytest.mark.regression
def test_rtl_wider():
    """8 paths, 16 destinations, 4,096 flows, 8 slots, a 16-bit clock, margin 1: mixed traffic with stalls, line
    rate and the ports against the golden model."""
    _run(dict(SMALL, n_flows=4096, n_dests=16, n_paths=8, n_slots=8, n_ports=8, time_bits=16, delay_bits=16,
              timeout=4096, release=4096, margin=1), ["frames_with_stalls", "line_rate", "ports_cnm_and_dly"],
         "flb_tx_wire_top_wide")


@pytest.mark.regression
def test_rtl_twelve_paths():
    """12 paths (not a power of two, and flb-route's two-stage choice: latency 8), 5 destinations (3 bits: 5 to 7
    out of range), 1,024 flows: mixed traffic with stalls and line rate against the golden model."""
    _run(dict(SMALL, n_flows=1024, n_dests=5, n_paths=12, n_slots=3), ["frames_with_stalls", "line_rate"],
         "flb_tx_wire_top_12")
