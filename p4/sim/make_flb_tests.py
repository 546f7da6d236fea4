"""Writes the P4 test directories of p4/flb_edge.p4 (run from the repository root: python p4/sim/make_flb_tests.py).

Each directory p4/sim/test-flb-<name>/ holds, as the Themis ones (make_tests.py):
  test.json         the program, the golden model's parameters and the routes (dest_edge LPM entries)
  ctl.jsonl         the control commands before the first packet (written through simple_switch_CLI)
  trace.jsonl       the same run as a flb-route metadata trace (ctl and items, in order; what `lbpipe replay` takes)
  packets_in.pcap   frames into the switch: packets with the test harness header (op 0, the tick), and the control
                    commands after the first packet in-band (op 1)
  commands.txt      simple_switch_CLI commands, from ctl.jsonl and the routes by lbpipe/p4.py
  packets_out.pcap  the expected frames out: each packet with the golden model's decision in its harness header
                    (test-flb-margin1, -margin2: the decisions worked by hand in margin_cases)

The golden model (sim/flb/route.py) is fed each packet's flow (the CRC16 of its 5-tuple), destination (the routes'
longest prefix; none: 0xFFFF, out of range) and tick. tests/test_p4.py re-derives all of it from packets_in.pcap.
"""

import json
import pathlib
import struct
import sys

from scapy.layers.inet import IP, TCP, UDP, IPOption
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from lbpipe.p4 import FLB_TICK_TYPE, crc16, flb_edge_commands, flb_route_frames, flb_tick
from lbpipe.sim.flb.route import Route, route_trace
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent
NO_DEST = 0xFFFF


def _dest(routes, addr):
    import ipaddress
    best, dest = -1, NO_DEST
    for prefix, length, d in routes:
        if length > best and ipaddress.IPv4Address(addr) in ipaddress.IPv4Network(f"{prefix}/{length}"):
            best, dest = length, d
    return dest


def _flow(ip):
    """CRC16 of (source, destination, protocol, source port, destination port); ports 0 unless an unfragmented
    TCP or UDP packet."""
    sport = dport = 0
    if ip.flags.MF == 0 and ip.frag == 0 and (TCP in ip or UDP in ip):
        l4 = ip[TCP] if TCP in ip else ip[UDP]
        sport, dport = l4.sport, l4.dport
    import ipaddress
    key = ipaddress.IPv4Address(ip.src).packed + ipaddress.IPv4Address(ip.dst).packed + \
        struct.pack("!BHH", ip.proto, sport, dport)
    return crc16(key)


def _frame(tick, l3):
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=FLB_TICK_TYPE) / Raw(tick) / l3)


CASES_PARAMS = dict(n_paths=4, n_dests=4, timeout=100)
CASES_ROUTES = [("10.0.0.0", 24, 0), ("10.0.1.0", 24, 1), ("10.0.2.0", 24, 2), ("10.0.3.0", 24, 3),
                ("10.0.0.128", 25, 2), ("10.9.0.0", 16, 7)]


def cases():
    """Hand-picked (N = 4 paths, 4 destinations, timeout 100 ticks): ``(initial ctl, steps)``, each step
    ``("ctl", cmd)`` or ``("pkt", now, scapy IPv4 packet or other L3, kind)``."""
    ctl = [{"table": 0, "index": 0 << 4 | p, "data": d} for p, d in enumerate((30, 10, 20, 40))]
    ctl += [{"table": 0, "index": 1 << 4 | p, "data": 5} for p in range(4)]
    ctl += [{"table": 0, "index": 2 << 4 | p, "data": 3} for p in range(4)]
    ctl += [{"table": 0, "index": 3 << 4 | p, "data": d} for p, d in enumerate((9, 1, 7, 3))]
    # Ignored by the control plane: destination 4 (>= n_dests), path 9, a 17-bit delay, table 3, mask bit 4.
    ctl += [{"table": 0, "index": 4 << 4, "data": 0}, {"table": 0, "index": 2 << 4 | 9, "data": 0},
            {"table": 0, "index": 3 << 4 | 1, "data": 1 << 16}, {"table": 3, "index": 0, "data": 0},
            {"table": 1, "index": 3, "data": 0b10010}]
    A = IP(src="10.1.0.1", dst="10.0.0.5") / TCP(sport=1000, dport=80)
    B = IP(src="10.1.0.2", dst="10.0.1.9") / UDP(sport=5000, dport=4791)
    C = IP(src="10.1.0.3", dst="10.0.0.6") / TCP(sport=2000, dport=443)
    E = IP(src="10.1.0.4", dst="10.0.0.7") / UDP(sport=7, dport=7)
    F = IP(src="10.1.0.5", dst="10.0.0.8") / TCP(sport=9, dport=9)
    G = IP(src="10.1.0.6", dst="10.0.3.1") / UDP(sport=1234, dport=5678)
    H = IP(src="10.1.0.7", dst="10.0.1.2") / TCP(sport=3, dport=4)
    L = IP(src="10.1.0.8", dst="10.0.0.200") / TCP(sport=5, dport=6)          # 10.0.0.128/25: destination 2
    L2 = IP(src="10.1.0.8", dst="10.0.2.44") / TCP(sport=5, dport=7)
    steps = [
        ("pkt", 1000, A, 1),                                    # new: path 1 (delay 10)
        ("ctl", {"table": 0, "index": 0 << 4 | 1, "data": 50}),  # delays [30, 50, 20, 40]
        ("pkt", 1010, A, 1),                                    # gap 10 = 50 - 40: window edge, stays on 1
        ("pkt", 1031, A, 1),                                    # gap 21: 0 (20 < 21) and 3 (10 < 21): 0
        ("pkt", 1031, A, 1),                                    # gap 0: stays
        ("pkt", 1040, B, 2),                                    # new, equal delays: path 0 (ties low)
        ("pkt", 1040, B, 2),                                    # existing, stays
        ("ctl", {"table": 1, "index": 0, "data": 0b0001}),       # isolate destination 0's path 0
        ("pkt", 1041, A, 1),                                    # off path 0, gap 10: safe {1, 3}, not 2: 3
        ("pkt", 1042, C, 1),                                    # new: 2 (not isolated 0)
        ("ctl", {"table": 1, "index": 0, "data": 0b0100}),       # isolate path 2
        ("pkt", 1043, E, 1),                                    # new: 0
        ("pkt", 1044, C, 1),                                    # off 2, gap 2: safe {0, 1, 3}: 0
        ("ctl", {"table": 1, "index": 0, "data": 0b1010}),       # isolate 1 and 3
        ("pkt", 1045, A, 1),                                    # off 3 (40), gap 4: no safe path: fastest 2
        ("ctl", {"table": 1, "index": 0, "data": 0b1111}),       # every path isolated: ignored
        ("pkt", 1046, F, 1),                                    # new: 2 (20)
        ("ctl", {"table": 0, "index": 0 << 4 | 0, "data": 5}),   # delays [5, 50, 20, 40]
        ("pkt", 1056, F, 1),                                    # gap 10 < 15: stays on 2
        ("pkt", 1145, A, 1),                                    # gap 100 = timeout: new, 0
        ("pkt", 1155, F, 1),                                    # gap 99: existing, 15 < 99: rerouted to 0
        ("pkt", 65530, G, 1),                                   # new (destination 3): 1
        ("ctl", {"table": 0, "index": 3 << 4 | 1, "data": 20}),  # [9, 20, 7, 3]
        ("pkt", 9, G, 1),                                       # across the wrap, gap 15: {0, 2}: 2
        ("pkt", 9 + 2, G, 1),                                   # gap 2: 2 - ... stays on 2 (7 - 3 = 4 >= 2)
        ("pkt", 1200, L, 1),                                    # LPM /25: destination 2, new: 0
        # Forged commands: path 9 of destination 1 (index 1 * 8 + 9 would alias destination 2's path 1), a
        # 17-bit delay, an isolation mask with bit 4, an unknown table, destination 4: none may change anything.
        ("ctl", {"table": 0, "index": 1 << 4 | 9, "data": 0}),
        ("ctl", {"table": 0, "index": 1 << 4 | 2, "data": 1 << 16}),
        ("ctl", {"table": 1, "index": 1, "data": 0b10001}),
        ("ctl", {"table": 2, "index": 1 << 4 | 3, "data": 0}),
        ("ctl", {"table": 0, "index": 4 << 4 | 0, "data": 0}),
        ("ctl", {"table": 1, "index": 200, "data": 1}),
        ("pkt", 1201, H, 1),                                    # new, destination 1: still path 0
        ("pkt", 1202, L2, 1),                                   # new, destination 2: still path 0
        # Not routed: no route, a route to destination 7 (>= n_dests), then fragments, options, not IPv4.
        ("pkt", 1203, IP(src="10.1.0.1", dst="192.168.1.1") / UDP(sport=1, dport=2), 1),
        ("pkt", 1204, IP(src="10.1.0.1", dst="10.9.1.1") / UDP(sport=1, dport=2), 1),
        ("pkt", 1205, IP(src="10.1.0.9", dst="10.0.1.3", flags="MF") / UDP(sport=11, dport=12) / Raw(bytes(8)), 1),
        ("pkt", 1206, IP(src="10.1.0.9", dst="10.0.1.3", frag=3) / Raw(bytes(16)), 1),
        ("pkt", 1207, IP(src="10.1.0.9", dst="10.0.1.3", options=IPOption(b"\x01\x01\x01\x00")) /
         TCP(sport=77, dport=88), 1),
        ("pkt", 1208, ARP(pdst="10.0.1.1"), 1),
    ]
    return ctl, steps


def expected_frame(frame, out):
    """``frame`` with the decision ``out`` (the golden model's) in its harness header."""
    flags = out["ok"] | out["new"] << 1 | out["rerouted"] << 2
    return frame[:34] + struct.pack("!HHBB", out["flow"], out["dest"], out["path"], flags) + frame[40:]


def write_flb_test(name, params, routes, ctl, steps, note):
    """``steps`` as in :func:`cases`; the frames and the golden model's decisions written as the test directory."""
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    model = Route(**params)
    for cmd in ctl:
        model.control(cmd)
    frames, out, events = [], [], [{"ctl": c} for c in ctl]
    for tag, step in enumerate(steps):
        if step[0] == "ctl":
            cmd = step[1]
            model.control(cmd)
            events.append({"ctl": cmd})
            frames.append(_frame(flb_tick(1, table=cmd["table"], index=cmd["index"], data=cmd["data"]), bytes(32)))
            continue
        _, now, l3, kind = step
        if IP in l3:
            item = {"kind": kind, "flow": _flow(l3), "dest": _dest(routes, l3.dst), "now": now, "tag": tag}
            etype = 0x0800
        else:
            item = {"kind": kind, "flow": 0, "dest": NO_DEST, "now": now, "tag": tag}
            etype = 0x0806
        frame = _frame(flb_tick(0, kind=kind, tag=tag, now=now, ether_type=etype), l3)
        events.append({"item": item})
        frames.append(frame)
        out.append(expected_frame(frame, model.process(item)))
    write_test_dir(where, params, routes, ctl, events, frames, out, note)


def write_test_dir(where, params, routes, ctl, events, frames, out, note):
    (where / "test.json").write_text(json.dumps({"program": "flb_edge.p4", "block": "flb-route", "params": params,
                                                 "routes": routes, "note": note}, indent=2) + "\n")
    write_events(where / "ctl.jsonl", [{"ctl": c} for c in ctl])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in flb_edge_commands(ctl, params, routes)))
    write_pcap(where / "packets_out.pcap", out)
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(out)} out\n")


MIXED_PARAMS = dict(n_paths=8, n_dests=16, timeout=256)


def mixed():
    """``lbpipe trace flb-route`` (route_trace, seed 7, 300 packets) as frames, the way ``lbpipe replay flb-route
    --engine bmv2`` makes them (lbpipe/p4.py flb_route_frames)."""
    events = route_trace(7, 300, **MIXED_PARAMS)
    commands, frames, n_items = flb_route_frames(events, MIXED_PARAMS)
    first = next(i for i, e in enumerate(events) if "item" in e)
    ctl = [e["ctl"] for e in events[:first]]
    routes = [(f"10.0.{d}.0", 24, d) for d in range(16)]
    assert commands == flb_edge_commands(ctl, MIXED_PARAMS, routes)
    model = Route(**MIXED_PARAMS)
    out, k = [], 0
    for event in events:
        if "ctl" in event:
            model.control(event["ctl"])
            continue
        while frames[k][14] != 0:       # in-band commands: no frame out
            k += 1
        out.append(expected_frame(frames[k], model.process(event["item"])))
        k += 1
    (HERE / "test-flb-mixed").mkdir(exist_ok=True)
    write_test_dir(HERE / "test-flb-mixed", MIXED_PARAMS, routes, ctl, events, frames, out,
                   "lbpipe trace flb-route --param n_paths=8 --param timeout=256 --seed 7 -n 300, as frames")


MARGIN_PARAMS = dict(n_paths=4, n_dests=4, timeout=100)
MARGIN_ROUTES = [(f"10.0.{d}.0", 24, d) for d in range(4)]


def margin_cases():
    """Hand-worked at ``margin`` 1 and 2 (N = 4 paths, 4 destinations, timeout 100): ``(initial ctl, steps)`` as
    :func:`cases`, each packet step with a fifth element ``{margin: (path, new, rerouted)}`` worked out here from
    the datasheet's rule (docs/flb_route.md): an existing flow on an eligible path ``p`` with gap ``g`` moves to the
    fastest eligible ``q`` with ``0 < D <= g - 1 - margin`` (``D = delay(p) - delay(q)``), else stays; off an
    isolated ``p`` it takes the fastest eligible ``q`` with ``D < 0`` or ``D <= g - 1 - margin``, else the fastest
    eligible path. The comments give margin 0's decision where the margin changes it."""
    delays = {0: (10, 20, 30, 40), 1: (30, 20, 40, 1), 2: (10, 11, 12, 13), 3: (20, 10, 21, 50)}
    ctl = [{"table": 0, "index": d << 4 | q, "data": v} for d, row in delays.items() for q, v in enumerate(row)]

    def pkt(name, dest, sport):
        return IP(src=f"10.2.0.{name}", dst=f"10.0.{dest}.9") / UDP(sport=sport, dport=4791)

    def delay(dest, path, value):
        return ("ctl", {"table": 0, "index": dest << 4 | path, "data": value})

    def isolate(dest, mask):
        return ("ctl", {"table": 1, "index": dest, "data": mask})

    A, B, C, E, F = pkt(1, 0, 101), pkt(2, 0, 102), pkt(3, 1, 103), pkt(4, 1, 104), pkt(5, 2, 105)
    G, H, K, J = pkt(6, 3, 106), pkt(7, 3, 107), pkt(8, 3, 108), pkt(9, 3, 109)
    M, N, P, Q = pkt(10, 0, 110), pkt(11, 2, 111), pkt(12, 1, 112), pkt(13, 0, 113)

    def new(q):                                     # a new flow: the fastest eligible path, whatever the margin
        return {1: (q, 1, 0), 2: (q, 1, 0)}

    steps = [
        ("pkt", 1000, A, 1, new(0)),                     # destination 0 [10, 20, 30, 40]: new, path 0
        delay(0, 0, 25),                                 # [25, 20, 30, 40]
        # gap 6, path 1 faster by 5 = gap - 1 (the only faster path): margin 0 moves to 1; 1 and 2 stay
        ("pkt", 1006, A, 1, {1: (0, 0, 0), 2: (0, 0, 0)}),
        ("pkt", 1010, B, 1, new(1)),                     # new: path 1 (20)
        delay(0, 2, 18),                                 # [25, 20, 18, 40]
        # gap 4, path 2 faster by 2 = gap - 2: margins 0 and 1 move to 2, margin 2 stays
        ("pkt", 1014, B, 1, {1: (2, 0, 1), 2: (1, 0, 0)}),
        ("pkt", 1020, C, 1, new(3)),                     # destination 1 [30, 20, 40, 1]: new, path 3
        delay(1, 3, 40),                                 # [30, 20, 40, 40]
        # gap 21: path 1 faster by 20 = gap - 1, path 0 by 10: margin 0 takes 1 (the fastest in its window),
        # margins 1 and 2 the next one, 0
        ("pkt", 1041, C, 1, {1: (0, 0, 1), 2: (0, 0, 1)}),
        ("pkt", 1050, E, 1, new(1)),                     # new: path 1 (20)
        delay(1, 1, 35),                                 # [30, 35, 40, 40]
        # gap 8, path 0 faster by 5 = gap - 3: moves whatever the margin
        ("pkt", 1058, E, 1, {1: (0, 0, 1), 2: (0, 0, 1)}),
        ("pkt", 1100, F, 1, new(0)),                     # destination 2 [10, 11, 12, 13]: new, path 0
        delay(2, 0, 12),                                 # [12, 11, 12, 13]: path 1 faster by 1
        ("pkt", 1100, F, 1, {1: (0, 0, 0), 2: (0, 0, 0)}),   # gap 0 (below both margins): stays
        ("pkt", 1101, F, 1, {1: (0, 0, 0), 2: (0, 0, 0)}),   # gap 1 (below margin 2): stays
        # gap 2: 1 <= 2 - 1 - margin at margin 0 only (moves to 1); stays at 1, and at 2 (gap = margin)
        ("pkt", 1103, F, 1, {1: (0, 0, 0), 2: (0, 0, 0)}),
        ("pkt", 1106, F, 1, {1: (1, 0, 1), 2: (0, 0, 0)}),   # gap 3: 1 <= 3 - 2 at margin 1; not at 2
        ("pkt", 1110, F, 1, {1: (1, 0, 0), 2: (1, 0, 1)}),   # gap 4: margin 2 moves; margin 1 is on 1, stays
        ("pkt", 1190, H, 1, new(1)),                     # destination 3 [20, 10, 21, 50]: new, path 1
        ("pkt", 1195, K, 1, new(1)),
        ("pkt", 1200, G, 1, new(1)),
        delay(3, 0, 10), delay(3, 1, 20), isolate(3, 0b0010),    # [10, 20, 21, 50], path 1 isolated
        # off isolated path 1 (20), gap 0: path 0 is faster by 10, path 2 slower by 1, path 3 by 30: only the
        # slower paths are safe, at every margin: path 2 (without the slower-path clause, path 2 fails the bound
        # -1 - margin at margins 1 and 2 and path 3 is taken)
        ("pkt", 1200, G, 1, {1: (2, 0, 1), 2: (2, 0, 1)}),
        # gap 11: path 0 faster by 10 = gap - 1: safe at margin 0 only (path 0); else path 2
        ("pkt", 1201, H, 1, {1: (2, 0, 1), 2: (2, 0, 1)}),
        # gap 12: path 0 faster by 10 = gap - 2: safe at margins 0 and 1 (path 0); at 2 not: path 2
        ("pkt", 1207, K, 1, {1: (0, 0, 1), 2: (2, 0, 1)}),
        ("pkt", 1300, J, 1, new(0)),                     # eligible {0, 2, 3}: new, path 0 (10)
        isolate(3, 0b0001), delay(3, 0, 30), delay(3, 3, 25),    # [30, 20, 21, 25], path 0 isolated
        # off isolated path 0 (30), gap 6: paths 1, 2, 3 faster by 10, 9, 5, none slower; margin 0: path 3
        # (5 <= 5); margins 1 and 2: no path safe, the fastest eligible, path 1
        ("pkt", 1306, J, 1, {1: (1, 0, 1), 2: (1, 0, 1)}),
        ("pkt", 1406, J, 1, new(1)),                     # gap 100 = timeout: new, the fastest eligible (1)
        # Delays near 2^16 - 1: delay(p) + margin and delay(q) + gap above 2^16 (flb_edge.p4 sums them in 18 bits;
        # in 16 bits they would wrap and decide otherwise).
        *(delay(0, q, 65535) for q in range(4)),         # destination 0 [65535, 65535, 65535, 65535]
        ("pkt", 2000, M, 1, new(0)),                     # new, all equal: path 0 (ties low)
        delay(0, 1, 65525),                              # [65535, 65525, 65535, 65535]
        # gap 5, path 1 faster by 10 > 5 - 1 - margin: stays at every margin (at 0 too); 65535 + margin >= 2^16
        # (wrapped to margin - 1, less than 65525 + 5: a move)
        ("pkt", 2005, M, 1, {1: (0, 0, 0), 2: (0, 0, 0)}),
        delay(0, 1, 65529),                              # [65535, 65529, 65535, 65535]
        # gap 8, path 1 faster by 6 = gap - 2: margins 0 and 1 move to 1, margin 2 stays; both sums above 2^16
        # (65536 < 65537 at margin 1, 65537 < 65537 not at 2)
        ("pkt", 2013, M, 1, {1: (1, 0, 1), 2: (0, 0, 0)}),
        *(delay(2, q, 65533) for q in range(4)),         # destination 2 [65533, 65533, 65533, 65533]
        ("pkt", 2100, N, 1, new(0)),                     # new: path 0
        delay(2, 3, 65530),                              # [65533, 65533, 65533, 65530]
        # gap 8, path 3 faster by 3 <= 8 - 1 - margin: moves at every margin; 65533 + margin (65534, 65535) below
        # 2^16 < 65530 + 8 = 65538 (wrapped to 2: no move)
        ("pkt", 2108, N, 1, {1: (3, 0, 1), 2: (3, 0, 1)}),
        *(delay(1, q, 65535) for q in range(4)),         # destination 1 [65535, 65535, 65535, 65535]
        ("pkt", 2200, P, 1, new(0)),                     # new: path 0
        delay(1, 1, 65525), delay(1, 2, 65533), isolate(1, 0b0001),  # [65535, 65525, 65533, 65535], 0 isolated
        # off isolated path 0, gap 5: path 1 faster by 10 (not safe: 10 > 5 - 1 - margin), path 2 by 2 and path 3
        # by 0 (safe at margins 0, 1 and 2): the fastest safe, path 2 (65535 + margin wrapped would make path 1
        # safe and take it, the fastest)
        ("pkt", 2205, P, 1, {1: (2, 0, 1), 2: (2, 0, 1)}),
        # The tick wrapping past 2^16 - 1 with a margin (destination 0, small delays again).
        delay(0, 0, 10), delay(0, 1, 20), delay(0, 2, 30), delay(0, 3, 40),
        ("pkt", 65533, Q, 1, new(0)),                    # new: path 0 (10)
        delay(0, 0, 24),                                 # [24, 20, 30, 40]
        # at tick 3: gap 6 across the wrap (3 + 65536 - 65533); path 1 faster by 4 = gap - 2: margins 0 and 1
        # move to 1, margin 2 stays (an unwrapped gap, at or above the timeout, would make the flow new)
        ("pkt", 3, Q, 1, {1: (1, 0, 1), 2: (0, 0, 0)}),
    ]
    return ctl, steps


def write_margin_test(margin):
    """:func:`margin_cases` at ``margin`` as p4/sim/test-flb-margin<margin>/; the expected frames carry the decisions
    worked out by hand in :func:`margin_cases` (not the golden model's: tests/test_p4.py checks the golden model
    against them, and bmv2 against the golden model)."""
    params = dict(MARGIN_PARAMS, margin=margin)
    (HERE / f"test-flb-margin{margin}").mkdir(exist_ok=True)
    ctl, steps = margin_cases()
    flows = {_flow(s[2]) for s in steps if s[0] == "pkt"}
    assert len(flows) == len({(s[2].src, s[2].dst, s[2][UDP].sport) for s in steps if s[0] == "pkt"}), \
        "two flows share a CRC16"
    frames, out, events = [], [], [{"ctl": c} for c in ctl]
    for tag, step in enumerate(steps):
        if step[0] == "ctl":
            cmd = step[1]
            events.append({"ctl": cmd})
            frames.append(_frame(flb_tick(1, table=cmd["table"], index=cmd["index"], data=cmd["data"]), bytes(32)))
            continue
        _, now, l3, kind, want = step
        item = {"kind": kind, "flow": _flow(l3), "dest": _dest(MARGIN_ROUTES, l3.dst), "now": now, "tag": tag}
        frame = _frame(flb_tick(0, kind=kind, tag=tag, now=now), l3)
        events.append({"item": item})
        frames.append(frame)
        path, new, rerouted = want[margin]
        out.append(expected_frame(frame, dict(item, path=path, new=new, rerouted=rerouted, ok=1)))
    write_test_dir(HERE / f"test-flb-margin{margin}", params, MARGIN_ROUTES, ctl, events, frames, out,
                   f"hand-worked at margin {margin}: delay differences of gap - 1, gap - 2 and gap - 3, gaps below the "
                   "margin, off an isolated path (slower paths, a faster one at gap - 1 and gap - 2, none safe), "
                   "timeout, delays near 2^16 - 1 (sums above 2^16: a stay, a move, gap - 2, off an isolated path), "
                   "a move across the tick's wrap (make_flb_tests.py margin_cases)")


def main():
    ctl, steps = cases()
    write_flb_test("flb-cases", CASES_PARAMS, CASES_ROUTES, ctl, steps,
                   "hand-picked: new flows, the window and its edge, isolation, timeout, tick wrap, forged "
                   "commands, routes (make_flb_tests.py cases)")
    mixed()
    for margin in (1, 2):
        write_margin_test(margin)


if __name__ == "__main__":
    main()
