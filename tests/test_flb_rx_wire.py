"""FLB's receive side in the wire (flb-rx-wire): the golden model against hand-worked scenarios.

Expectations come from ``tb/flb/rx_frames.py`` (frames built from the datasheet's tables, items and counters worked
by hand beside each step) and from the literal values below, never from lbpipe.sim.flb. The frame builders
themselves are checked here against scapy's dissection (an outside reading of the RoCEv2 and 802.1Q layouts)."""

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from lbpipe.sim.flb.rx_wire import FlbRxWireModel
from lbpipe.tb.flb.rx_frames import (cleared, clocked_steps, cnm_frame, hand_scenarios, mark, qinq, stop_clock,
                                     udp_offset)
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.tb.lib.packets import RC_SEND_ONLY, classify, icrc, roce_data

OTHER = PacketKind.OTHER.value

SCENARIOS = {sc.name: sc for sc in hand_scenarios()}


def _send(src, sport=0x1235, **options):
    dst = "fd00::209" if ":" in src else "10.0.2.9"
    return bytes(roce_data(src, dst, sport, 0x000ABC, 1, opcode=RC_SEND_ONLY, payload_len=16, **options))


def _run(model, steps):
    """Feed ``("ctl", cmd)`` and ``("frame", frame, now)`` steps; returns the frames that left."""
    outs = []
    for step in steps:
        if step[0] == "ctl":
            model.control(step[1])
        else:
            outs.append(model.process(step[1], now=step[2]))
    return outs


def _compare(sc, outs, model):
    errors = []
    notes = [s[4] for s in sc.steps if s[0] == "frame"]
    for k, (got, want, note) in enumerate(zip(outs, sc.outputs, notes)):
        if got != want:
            errors.append(f"frame {k} ({note}): got {got.hex()}, want {want.hex()}")
    if len(outs) != len(sc.outputs):
        errors.append(f"{len(outs)} frames out, {len(sc.outputs)} expected")
    for port in ("meas", "dly", "cnm"):
        got, want = [dict(d) for d in getattr(model, port)], getattr(sc, port)
        if got != want:
            errors.append(f"{port}: got {got}, want {want}")
    got = list(model.stats())[:len(sc.stats)]         # the scenarios' eight; the notification's are tb/flb/rx_notify.py's
    if got != sc.stats:
        errors.append(f"counters: got {got}, want {sc.stats}")
    return errors


# -- the builders against scapy ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, {"vlan": 5}, {"src": "fd00::105"}, {"vlan": 7, "src": "fd00::105"}])
def test_golden_mark_fields_by_scapy(options):
    """scapy dissects a marked frame with the marks in BTH FECN/BECN/resv6 and UDP chksum; cleared() zeroes resv6
    and the checksum and keeps FECN/BECN; the ICRC (computed from the bytes) is right before and after (both fields
    are under its mask)."""
    options = dict(options)
    frame = _send(options.pop("src", "10.0.1.5"), fecn=1, becn=0, **options)
    marked = mark(frame, s=1, p=0, path=0x9, value=0xBEEF)
    pkt = Ether(marked)
    assert pkt[UDP].chksum == 0xBEEF
    assert (pkt[BTH].fecn, pkt[BTH].becn, pkt[BTH].resv6) == (1, 0, 0b101001)
    assert marked[-4:] == icrc(marked) == frame[-4:]
    out = Ether(cleared(marked))
    assert (out[UDP].chksum, out[BTH].fecn, out[BTH].becn, out[BTH].resv6) == (0, 1, 0, 0)
    assert cleared(marked) == frame
    assert classify(marked)["kind"] == classify(frame)["kind"] != OTHER


def test_golden_mark_offsets_by_hand():
    """Byte positions worked by hand: untagged IPv4, UDP at 14 + 20 = 34, checksum at 40..41, BTH byte 4 at
    34 + 8 + 4 = 46; one tag: +4; IPv6: UDP at 14 + 40 = 54; 802.1ad + 802.1Q: UDP at 14 + 8 + 20 = 42."""
    f = _send("10.0.1.5", fecn=1, becn=1)
    m = mark(f, s=0, p=1, path=3, value=0x0102)
    assert (udp_offset(f), m[40:42], m[46]) == (34, b"\x01\x02", 0xD3)
    assert cleared(m)[46] == 0xC0 and cleared(m)[40:42] == b"\0\0"
    assert udp_offset(_send("10.0.1.5", vlan=5)) == 38
    assert udp_offset(_send("fd00::105")) == 54
    q = qinq(_send("10.0.1.5", vlan=5))
    assert udp_offset(q) == 42 and q[12:16] == b"\x88\xa8\x00\x64" and q[16:20] == b"\x81\x00\x00\x05"


def test_golden_cnm_frame_bytes():
    """The CNM layout of the datasheet's table, written as bytes by hand."""
    f = cnm_frame(to=0x0102, frm=0x0304, flow=0xABCD, cp=7, n=12, cong=1, dst_mac="01:02:03:04:05:06",
                  src_mac="0a:0b:0c:0d:0e:0f")
    assert f == bytes.fromhex("010203040506 0a0b0c0d0e0f 88b6 01 01 0102 0304 abcd 07 0c") + bytes(36)
    assert len(cnm_frame(to=0, frm=0, flow=0, cp=0, n=0, cong=0, length=23)) == 23
    assert cnm_frame(to=0, frm=0, flow=0, cp=0, n=0, cong=1, flags=0xFE)[15] == 0xFE
    tagged = cnm_frame(to=2, frm=1, flow=5, cp=0, n=1, cong=1, vlan=5)
    assert tagged[12:14] == b"\x81\x00" and tagged[16:18] == b"\x88\xb6" and tagged[18] == 1


# -- the golden model on the hand-worked scenarios ---------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_hand_scenarios(name):
    """Every frame, every meas/dly/cnm item and the eight counters of the scenario (tb/flb/rx_frames.py), `now`
    given with each frame."""
    sc = SCENARIOS[name]
    model = FlbRxWireModel(**sc.params)
    outs = _run(model, [s if s[0] == "ctl" else ("frame", s[1], s[2]) for s in sc.steps])
    errors = _compare(sc, outs, model)
    assert not errors, "\n".join(errors[:12])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_hand_scenarios_clock_by_table_48(name):
    """The same scenarios with the clock set through table 48 (what the RTL testbench does) and `now` not given;
    the data of every clock command carries junk above `time_bits` (only the low bits are taken)."""
    sc = SCENARIOS[name]
    junk = 0xA5 << sc.params["time_bits"] | 1 << 40
    model = FlbRxWireModel(**sc.params)
    outs = []
    for step in clocked_steps(sc):
        if step[0] == "ctl":
            cmd = dict(step[1])
            if cmd["table"] == 48 and cmd["index"] == 0:
                cmd["data"] |= junk
            model.control(cmd)
        else:
            outs.append(model.process(step[1]))
    errors = _compare(sc, outs, model)
    assert not errors, "\n".join(errors[:12])


def test_golden_marked_frames_keep_icrc():
    """Every RoCEv2 frame of the scenarios leaves with the ICRC its bytes give (tb/lib/packets.py's icrc)."""
    checked = 0
    for sc in SCENARIOS.values():
        for out in sc.outputs:
            if classify(out)["kind"] != OTHER:
                assert out[-4:] == icrc(out)
                checked += 1
    assert checked > 40


def test_golden_reset():
    """After the small scenario, reset: counters 0, the edge number back to the parameter (2, after table 49 made it
    1), every base forgotten (the next sample of (1, 1) sets its base: delay 0), the output lists empty."""
    sc = SCENARIOS["small"]
    model = FlbRxWireModel(**sc.params)
    _run(model, [s if s[0] == "ctl" else ("frame", s[1], s[2]) for s in sc.steps])
    model.reset()
    assert list(model.stats()) == [0] * 17
    assert (list(model.meas), list(model.dly), list(model.cnm)) == ([], [], [])
    for cmd in stop_clock(0):
        model.control(cmd)
    f = mark(_send("10.0.1.5"), s=1, value=0)
    assert model.process(f, now=2310) == cleared(f)             # owd 2310: d 10 against the old base
    assert [dict(d) for d in model.meas] == [{"edge": 1, "path": 1, "delay": 0}]
    model.process(cnm_frame(to=2, frm=0, flow=1, cp=0, n=1, cong=1), now=2310)
    assert [dict(d) for d in model.cnm] == [{"flow": 1, "dest": 0, "cp": 0, "n": 1, "cong": 1}]
    assert list(model.stats())[:8] == [1, 1, 0, 0, 0, 1, 0, 0]


def test_golden_one_frame_each_kind_small():
    """One frame of each kind from a fresh model (small parameters), literal results: a sample (owd 100 sets the
    base), a piggyback (edge 2 path 3 delay 1000), a CNM, S+P."""
    sc = SCENARIOS["small"]
    model = FlbRxWireModel(**sc.params)
    s = mark(_send("10.0.2.77", sport=0x0007), s=1, value=0xF000 | 50)   # 77 = 0b1001101: bits 8.. are the edge
    p = mark(_send("10.0.2.77"), p=1, path=3, value=1000)
    both = mark(_send("10.0.2.77"), s=1, p=1, path=3, value=1000)
    c = cnm_frame(to=2, frm=2, flow=0x1FF, cp=3, n=2, cong=0)
    outs = [model.process(f, now=150) for f in (s, p, both, c)]
    assert [o[46] for o in outs[:3]] == [0, 0, 0] and [o[40:42] for o in outs[:3]] == [b"\0\0"] * 3
    assert outs[3] == c
    assert [dict(d) for d in model.meas] == [{"edge": 2, "path": 3, "delay": 0}]
    assert [dict(d) for d in model.dly] == [{"dest": 2, "path": 3, "delay": 1000}]
    assert [dict(d) for d in model.cnm] == [{"flow": 0xFF, "dest": 2, "cp": 3, "n": 2, "cong": 0}]
    assert list(model.stats())[:8] == [1, 1, 0, 1, 0, 1, 0, 1]


# -- RTL (cocotb) ------------------------------------------------------------------------------------------------------

RTL_SMALL = dict(n_edges=3, n_paths=4, n_flows=256, n_ports=4, time_bits=12, delay_bits=10, edge_shift=8, edge=2,
                 tick_cycles=64, hop_timeout=4000)


def test_wire_parameters():
    from lbpipe.hdl.flb.rx_wire import FlbRxWire
    for bad in (dict(n_edges=300), dict(time_bits=20), dict(n_flows=1000), dict(n_ports=257), dict(n_ports=33),
                dict(edge_shift=31), dict(edge=1 << 16), dict(tick_cycles=1 << 16), dict(n_paths=17), dict(n_slots=9),
                dict(q_bits=7), dict(threshold=0), dict(threshold=1 << 16), dict(port_shift=30),
                dict(hop_timeout=0), dict(time_bits=12, delay_bits=10, hop_timeout=4096)):
        with pytest.raises(ValueError):
            FlbRxWire(**bad)
    with pytest.raises(TypeError):
        FlbRxWire(edge="x")


def _run_rtl(params, testcases, name, cls=None):
    import json
    from lbpipe.boards.top import FlatTop
    from lbpipe.hdl.flb.rx_wire import FlbRxWire
    from lbpipe.tb.lib.runner import run_cocotb, write_verilog
    top = FlatTop((cls or FlbRxWire)(**params))
    path = write_verilog(top, name=name, ports=top.ports())
    run_cocotb(path, toplevel=name, test_module="lbpipe.tb.flb.test_rx_wire", testcase=testcases,
               extra_env={"LBPIPE_PARAMS": json.dumps(params)})


def test_rtl():
    """Mixed traffic with stalls, line rate, the item outputs held, commands between bursts, reset mid-traffic, a
    3,000-clock output stall, the clock running, dequeues racing the frames, reset of the notification;
    hand-worked: the small scenario."""
    _run_rtl(RTL_SMALL, ["frames_with_stalls", "line_rate", "outputs_held", "commands_between_frames",
                     "reset_mid_traffic", "long_stall", "by_hand", "clock_running", "congestion_with_dequeues",
                     "reset_forgets_notify"], "flb_rx_wire_top")


def test_rtl_defaults():
    """The defaults: the hand-worked scenarios (marks and notification) and mixed traffic with stalls."""
    _run_rtl(dict(n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16, edge_shift=8, edge=0,
              tick_cycles=64), ["by_hand", "notify_by_hand", "frames_with_stalls"], "flb_rx_wire_top_def")


def test_rtl_odd():
    """5 edges, 6 paths (neither a power of two), 2 flows, 1 port, 8-bit ticks, 4-bit delays, the edge from bit
    16: the hand-worked scenario and mixed traffic with stalls."""
    _run_rtl(dict(n_edges=5, n_paths=6, n_flows=2, n_ports=1, time_bits=8, delay_bits=4, edge_shift=16, edge=4,
              tick_cycles=64, hop_timeout=200), ["by_hand", "frames_with_stalls"], "flb_rx_wire_top_odd")


@pytest.mark.parametrize("name", ["small", "odd", "shift"])
def test_rtl_notify(name):
    """The notification's hand-worked scenarios (tb/flb/rx_notify.py) at their own parameters (the defaults' runs in
    test_rtl_defaults); at the small set (3 ports: forged dequeue ports) also dequeues racing mixed traffic."""
    from lbpipe.tb.flb.rx_notify import notify_scenarios
    params = next(sc.params for sc in notify_scenarios() if sc.name == name)
    cases = ["notify_by_hand"] + (["congestion_with_dequeues", "frames_with_stalls"] if name == "small" else [])
    _run_rtl(params, cases, f"flb_rx_wire_top_n{name}")


def test_rtl_shallow_tap():
    """A build with a 2-entry tap FIFO: more frames than that sit between the tap and F0 (the parser's pipeline),
    so the first beat's wait for room in it is what keeps each frame's CNM fields joined to its own item (at 16
    entries the parser's own back-pressure keeps the FIFO from filling, and no test could see the wait): mixed
    traffic with stalls and a long output stall against the golden model."""
    from lbpipe.hdl.flb.rx_wire import FlbRxWire

    class ShallowTap(FlbRxWire):
        TAP_DEPTH = 2
    _run_rtl(RTL_SMALL, ["frames_with_stalls", "long_stall"], "flb_rx_wire_top_tap2", ShallowTap)


def test_pairs_with_the_tx_wire():
    """flb-rx-wire's dly, cnm and meas connect to flb-tx-wire's with wiring.connect when the parameters pair up as
    both datasheets say (the defaults; 5 edges, 6 paths, 12-bit delays); a different n_paths does not connect."""
    from amaranth import Module
    from amaranth.lib import wiring
    from lbpipe.hdl.flb.rx_wire import FlbRxWire
    from lbpipe.hdl.flb.wire import FlbTxWire
    pairs = [({}, {}),
             (dict(n_edges=5, n_paths=6, delay_bits=12, time_bits=12, n_flows=1024, n_ports=4, hop_timeout=4000),
              dict(n_dests=5, n_paths=6, delay_bits=12, time_bits=12, n_flows=1024, n_ports=4, timeout=1000,
                   release=1000))]
    for rx, tx in pairs:
        m = Module()
        m.submodules.rx, m.submodules.tx = a, b = FlbRxWire(**rx), FlbTxWire(**tx)
        for port in ("dly", "cnm", "meas"):
            wiring.connect(m, getattr(a, port), getattr(b, port))
    m = Module()
    m.submodules.rx, m.submodules.tx = a, b = FlbRxWire(n_paths=4), FlbTxWire(n_paths=8)
    with pytest.raises(wiring.ConnectionError):
        wiring.connect(m, a.dly, b.dly)
