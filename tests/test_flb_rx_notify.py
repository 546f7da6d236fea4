"""FLB's receive wire (flb-rx-wire), the destination side's congestion notification: the golden model against the
hand-worked scenarios of ``tb/flb/rx_notify.py``.

Expectations come from those scenarios (worked by hand from docs/flb_rx_wire.md, docs/flb_cnm.md and
docs/flb_prevhop.md) and from the literal values below, never from lbpipe.sim or lbpipe.hdl. The scenarios'
builders are checked here against scapy's dissection: every expected CNM frame parses back to the fields it was
meant to carry, and every frame's hand-worked enqueue (port, cells, flow, source edge) is re-derived from scapy's
reading of its headers."""

import ipaddress
import math
import zlib

import pytest
from scapy.contrib.roce import BTH
from scapy.fields import ByteField, ShortField
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet

from lbpipe.tb.flb.rx_frames import udp_offset
from lbpipe.tb.flb.rx_notify import PARAMETERS, cnm_out, mac_int, notify_scenarios
from lbpipe.tb.lib.packets import flow_hash

SCENARIOS = {sc.name: sc for sc in notify_scenarios()}


class CnmBody(Packet):
    """Bytes 14..23 of a CNM frame, written from the datasheet's "CNM frame" table."""
    name = "CNM"
    fields_desc = [ByteField("version", 0), ByteField("flags", 0), ShortField("to", 0), ShortField("frm", 0),
                   ShortField("flow", 0), ByteField("cp", 0), ByteField("n", 0)]


def _bits(n):
    """ceil(log2 n), at least 1 bit (the datasheet's widths)."""
    return max(1, math.ceil(math.log2(n)))


# -- the golden model on the scenarios ---------------------------------------------------------------------------------

def _run_model(sc):
    from lbpipe.sim.flb.rx_wire import FlbRxWireModel
    model = FlbRxWireModel(**sc.params)
    errors = []
    for k, step in enumerate(sc.steps):
        where = f"{sc.name} step {k} ({step['note']})"
        if step["op"] == "ctl":
            model.control(dict(step["cmd"]))
            continue
        if step["op"] == "frame":
            got = [(port, bytes(data)) for port, data in model.process_ports(step["frame"])]
            want = [("m_axis", step["out"])] + [("m_cnm", c) for c in step["cnm"]]
        else:
            got = [bytes(c) for c in model.dequeue(step["port"], step["amount"])]
            want = list(step["cnm"])
        if got != want:
            errors.append(f"{where}:\n  got  {_show(got)}\n  want {_show(want)}")
    stats = list(model.stats())
    if len(stats) != 17:
        errors.append(f"{sc.name}: {len(stats)} counters, 17 expected")
    for index, value in sc.totals.items():
        if index < len(stats) and stats[index] != value:
            errors.append(f"{sc.name}: STATUS_{index} got {stats[index]}, want {value}")
    return errors


def _show(items):
    def one(item):
        if isinstance(item, tuple):
            port, data = item
            return f"{port}:{data[:24].hex() if port == 'm_cnm' else f'{len(data)} bytes crc32 {zlib.crc32(data):08x}'}"
        return item[:24].hex()
    return [one(i) for i in items]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_notify_scenario(name):
    """Every frame out on m_axis, every CNM frame on m_cnm (after a frame and after a dequeue), in order, and the 17
    counters at the end."""
    errors = _run_model(SCENARIOS[name])
    assert not errors, "\n".join(errors[:10])


# -- the scenarios' own builders ---------------------------------------------------------------------------------------

def test_cnm_out_bytes_by_hand():
    """The datasheet's table written out as bytes by hand: destination, source, 0x88B6, version 1, flags, to, from,
    flow, cp, n, then 36 zero bytes."""
    frame = cnm_out(dst="02:00:00:00:0a:01", src="02:5a:00:00:00:02", cong=1, to=0x0102, frm=0x0304, flow=0xCEFF,
                    cp=5, n=7)
    assert frame == bytes.fromhex("02000000 0a01 025a00000002 88b6 01 01 0102 0304 ceff 05 07") + bytes(36)
    assert cnm_out(dst="02:00:00:00:00:01", src="00:00:00:00:00:00", cong=0, to=0, frm=0, flow=0, cp=0, n=0)[15] == 0
    assert mac_int("02:5a:00:00:00:02") == 0x025A00000002
    assert mac_int("03:00:00:00:00:00") >> 40 & 1 == 1


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_expected_cnm_frames_parse_back(name):
    """Every CNM frame a scenario expects, dissected by scapy: 60 bytes, the MACs, EtherType 0x88B6, untagged,
    version 1, flags exactly the congestion bit, the fields meant, zero padding."""
    sc = SCENARIOS[name]
    assert sc.cnm_fields, "no CNM frame expected"
    for frame, fields in sc.cnm_fields:
        assert len(frame) == 60
        eth = Ether(frame)
        assert Dot1Q not in eth
        assert (eth.dst, eth.src, eth.type) == (fields["dst"], fields["src"], 0x88B6)
        body = CnmBody(bytes(eth.payload))
        assert (body.version, body.flags) == (1, fields["cong"])
        assert (body.to, body.frm, body.flow, body.cp, body.n) == tuple(fields[k] for k in
                                                                        ("to", "frm", "flow", "cp", "n"))
        assert bytes(body.payload) == bytes(36)
    listed = [c for s in sc.steps if s["op"] != "ctl" for c in s["cnm"]]
    assert listed == [frame for frame, _ in sc.cnm_fields]


def _enqueue_by_scapy(frame, params):
    """The enqueue a frame makes, re-derived from scapy's dissection and the datasheet's rules: None unless UDP to
    4791 with a BTH; port from the destination address at port_shift (0 whatever the address with one port),
    source edge from the source address at edge_shift, cells ceil((l4_off + udp_len) / 64) saturated at 255, flow
    the CRC-16 of the addresses and the destination QPN cut to log2 n_flows bits."""
    eth = Ether(frame)
    if UDP not in eth or eth[UDP].dport != 4791 or BTH not in eth:
        return None
    ip = eth[IP] if IP in eth else eth[IPv6]
    src, dst = int(ipaddress.ip_address(ip.src)), int(ipaddress.ip_address(ip.dst))
    one_port = params["n_ports"] == 1
    return {"port": 0 if one_port else dst >> params["port_shift"] & (1 << _bits(params["n_ports"])) - 1,
            "cells": min(255, -(-(udp_offset(frame) + eth[UDP].len) // 64)),
            "flow": flow_hash(ip.src, ip.dst, eth[BTH].dqpn) & params["n_flows"] - 1,
            "src": src >> params["edge_shift"] & (1 << _bits(params["n_edges"])) - 1}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_hand_worked_enqueues_by_scapy(name):
    """Each frame's enqueue as worked by hand (the cells, the port, the flow, the source edge) against the same
    quantities read from the frame by scapy."""
    sc = SCENARIOS[name]
    frames = [s for s in sc.steps if s["op"] == "frame"]
    for step in frames:
        assert step["enq"] == _enqueue_by_scapy(step["frame"], sc.params), step["note"]
    assert sum(s["enq"] is not None for s in frames) >= 5


def test_scenarios_cover_the_brief():
    """What the scenarios were written to cover, counted over all four: joins, releases, set full, clamps both ways,
    rejected ports (enqueue and dequeue), CNM frames sent and every kind of miss, group source MACs, both marks,
    CNM frames in (taken and refused), IPv6 and VLAN frames, a saturated amount, every table (48 to 51)."""
    totals = [sum(sc.totals[i] for sc in SCENARIOS.values()) for i in range(17)]
    assert all(totals[i] for i in (0, 1, 3, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16))
    frames = [s for sc in SCENARIOS.values() for s in sc.steps if s["op"] == "frame"]
    eth = [Ether(s["frame"]) for s in frames]
    assert any(IPv6 in e and Dot1Q in e for e in eth) and any(IP in e and Dot1Q in e for e in eth)
    assert any(s["enq"] and s["enq"]["cells"] == 255 for s in frames)
    assert {60, 298} <= {len(s["frame"]) for s in frames if s["enq"]}
    tables = {s["cmd"]["table"] for sc in SCENARIOS.values() for s in sc.steps if s["op"] == "ctl"}
    assert {48, 49, 50, 51} <= tables
    assert any(s["out"] != s["frame"] for s in frames)          # marked frames leave cleared


def test_shift_reads_the_port_at_port_shift():
    """``shift``: enqueues on every in-range port and on the forged one (port 3, rejected), each frame's port
    differing from the one read at bit 0 and from a 3-bit field at port_shift (so each of those readings would
    move the frame), dequeues on every in-range port and the forged one."""
    sc = SCENARIOS["shift"]
    assert sc.params["port_shift"] == 8 and sc.params["n_ports"] == 3
    enqs = [(s["enq"], s["frame"]) for s in sc.steps if s["op"] == "frame" and s["enq"]]
    assert {e["port"] for e, _ in enqs} == {0, 1, 2, 3}
    for e, frame in enqs:
        eth = Ether(frame)
        dst = int(ipaddress.ip_address((eth[IP] if IP in eth else eth[IPv6]).dst))
        assert e["port"] != dst & 3 and e["port"] != dst >> 8 & 7, eth.summary()
    assert {s["port"] for s in sc.steps if s["op"] == "deq"} == {1, 2, 3}
    assert sc.totals[12] == 2 and sc.totals[8] and sc.totals[9] and sc.totals[10]
    assert any(s["op"] == "ctl" and s["cmd"]["table"] == 50 and s["cmd"]["data"] % 256 == 0 != s["cmd"]["data"]
               for s in sc.steps)


def test_one_port_takes_every_enqueue():
    """``odd`` (n_ports 1): every enqueue on port 0, one of them to a destination whose bit at port_shift is 1;
    a dequeue naming port 1 (the field's one bit) rejected."""
    sc = SCENARIOS["odd"]
    assert sc.params["n_ports"] == 1
    frames = [s for s in sc.steps if s["op"] == "frame" and s["enq"]]
    assert all(s["enq"]["port"] == 0 for s in frames)
    assert any(Ether(s["frame"])[IP].dst.split(".")[2] == "5" for s in frames)
    assert any(s["op"] == "deq" and s["port"] == 1 for s in sc.steps) and sc.totals[12] == 1

# -- the parameters ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCENARIOS))
def test_params_complete_and_build_the_rtl(name):
    """Each scenario gives every parameter of the datasheet's table, and FlbRxWire(**params) builds."""
    from lbpipe.hdl.flb.rx_wire import FlbRxWire
    params = SCENARIOS[name].params
    assert set(params) == set(PARAMETERS)
    FlbRxWire(**params)
