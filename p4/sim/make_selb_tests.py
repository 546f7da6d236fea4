"""Writes the P4 test directories of p4/selb_tor.p4 (run from the repository root: python p4/sim/make_selb_tests.py).

Each directory p4/sim/test-selb-<name>/ holds, as the FLB ones (make_flb_tests.py):
  test.json         the program, the block and the golden model's parameters
  ctl.jsonl         the control plane's register writes before the first packet ({table, index, data}, op-2 tables:
                    0 cluster, 1 congested, 2 alt, 3 shortest), loaded through simple_switch_CLI
  trace.jsonl       the same run as a selb-reroute metadata trace (the items the golden model was fed)
  packets_in.pcap   frames into the switch: packets with the harness header (op 0: tick, lookup path, kind, tag), the
                    control plane's later register writes in-band (op 2) and the block's own ctl commands (op 1)
  commands.txt      simple_switch_CLI commands (lbpipe/p4.py selb_tor_commands)
  packets_out.pcap  the expected frames out: each packet with the golden model's decision in its harness header

The cluster fields of the hand-picked case come from lbpipe's clustering golden model (sim/selb/cluster.py) run as
the control plane would: queue samples and ticks in, its published result turned into register writes
(lbpipe/p4.py selb_cluster_commands). The golden model sim/selb/reroute.py is fed each packet's flow (the CRC16 of
its 5-tuple, low log2 n_flows bits), tick, lookup path and the registers' fields for that path.
tests/test_p4.py re-derives all of it from packets_in.pcap and commands.txt.
"""

import ipaddress
import json
import pathlib
import struct
import sys

from scapy.layers.inet import IP, TCP, UDP, IPOption
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from lbpipe.p4 import (SELB_MAX_CLUSTERS, SELB_TICK_TYPE, crc16, selb_cluster_commands, selb_reroute_frames,
                       selb_tick, selb_tor_commands)
from lbpipe.sim.selb.cluster import Cluster
from lbpipe.sim.selb.reroute import Reroute, reroute_trace
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent


def _flow(ip, n_flows):
    """CRC16 of (source, destination, protocol, source port, destination port), its low log2 n_flows bits; ports 0
    unless an unfragmented TCP or UDP packet."""
    sport = dport = 0
    if ip.flags.MF == 0 and ip.frag == 0 and (TCP in ip or UDP in ip):
        l4 = ip[TCP] if TCP in ip else ip[UDP]
        sport, dport = l4.sport, l4.dport
    key = ipaddress.IPv4Address(ip.src).packed + ipaddress.IPv4Address(ip.dst).packed + \
        struct.pack("!BHH", ip.proto, sport, dport)
    return crc16(key) & (n_flows - 1)


def _frame(tick, l3):
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=SELB_TICK_TYPE) / Raw(tick) / l3)


CASES_PARAMS = dict(n_paths=8, n_flows=16, hold=16, lfsr_seed=0xACE1)


def _publish(samples_rounds, k=2):
    """The control loop off the switch: the clustering golden model (8 paths, k clusters) fed one round of queue
    samples then a tick per round; returns the register writes of what it has published after the last round."""
    model = Cluster(n_paths=8, k=k)
    for qs in samples_rounds:
        for p, q in enumerate(qs):
            model.process_stream("smp", {"path": p, "qlen": q, "tick": 0})
        model.process_stream("smp", {"path": 0, "qlen": 0, "tick": 1})
    return model.published, selb_cluster_commands(model.published, k)


QUIET = [100, 90, 100, 100, 5000, 5000, 5000, 5000]
# Paths 2 and 5 grow by more than theta (64) in one period: congested; clusters {0..3} and {4..7}; shortest 1.
HOT = [100, 90, 300, 100, 5000, 5200, 5000, 5000]
# Then all of cluster {4..7} grows: its alt mask is empty.
HOTTER = [100, 90, 300, 100, 5100, 5300, 5100, 5100]


def cases():
    """Hand-picked (8 paths, 16 flows, hold 16): ``(initial register writes, steps)``, each step ``("cp", cmd)`` (an
    in-band register write), ``("ctl", cmd)`` (the block's ctl command, ignored) or ``("pkt", now, path, l3,
    kind)`` (path None: the flow's current path, as the wire's path mirror gives it)."""
    # Ticks: the publish after a tick is the clustering of the snapshot one tick before (docs/selb_cluster.md).
    pub1, first = _publish([QUIET, QUIET, HOT, HOT])
    assert pub1[2] == [0, 0, 1, 0, 0, 1, 0, 0] and pub1[3] == 1, pub1
    assert len(set(pub1[0][:4])) == 1 and len(set(pub1[0][4:])) == 1 and pub1[0][0] != pub1[0][4], pub1
    pub2, second = _publish([QUIET, QUIET, HOT, HOTTER, HOTTER])
    assert pub2[2] == [0, 0, 0, 0, 1, 1, 1, 1] and pub2[3] == 1, pub2
    a_cl, b_cl = pub2[0][0], pub2[0][4]
    A = IP(src="10.1.0.1", dst="10.2.0.5") / UDP(sport=1000, dport=4791)
    B = IP(src="10.1.0.2", dst="10.2.1.9") / UDP(sport=5000, dport=4791)
    C = IP(src="10.1.0.3", dst="10.2.0.6") / TCP(sport=2000, dport=443)
    D = IP(src="10.1.0.4", dst="10.2.0.16") / UDP(sport=7, dport=4791)
    E = IP(src="10.1.0.5", dst="10.2.0.16") / TCP(sport=9, dport=9)
    flows = [_flow(x, 16) for x in (A, B, C, D, E)]
    assert len(set(flows)) == 5, flows
    steps = [
        ("pkt", 1000, 2, A, 1),            # new, on congested path 2: rerouted at once, to 3 of {0, 1, 3} (tail)
        ("pkt", 1001, None, A, 1),         # on its new path, not congested: stays
        ("pkt", 1002, 5, B, 1),            # new, on congested path 5: moves to 7 of {4, 6, 7} (tail)
        ("pkt", 1003, 5, B, 1),            # looked up on the old path (behind the reroute): stale, new path
        ("ctl", {"table": 0, "index": 3, "data": 9}),       # the block's ctl: no tables, ignored
    ] + [("cp", c) for c in second] + [    # the next publish: cluster {4..7} wholly congested, 2 no longer
        ("pkt", 1010, None, B, 1),         # congested, alt empty, but the reroute at 1002 is in flight: held
        ("pkt", 1017, None, B, 1),         # age 15 < 16: held
        ("pkt", 1018, None, B, 1),         # age 16: moves (tail); its cluster has no mate, so alt is the backup
                                           # set's {0..3}: state 0x3879 = 14457, x 4 < 65536: path 0
        ("pkt", 1019, None, B, 1),         # on path 0, not congested: stays
        ("pkt", 1020, 1, C, 1),            # new on path 1: stays
        ("cp", {"table": 1, "index": 1, "data": 1}),        # path 1 congested, its cluster's alt emptied:
        ("cp", {"table": 2, "index": a_cl, "data": 0}),     # candidate = shortest = 1 = the current path
        ("pkt", 1021, None, C, 1),         # congested, candidate its own path: stays, unmarked
        ("cp", {"table": 2, "index": a_cl, "data": 0b1000}),  # alt {3}; path 0 congested
        ("cp", {"table": 1, "index": 0, "data": 1}),
        ("pkt", 65530, 0, D, 1),           # new on congested 0: moves to 3 (tail) at 65,530
        ("cp", {"table": 1, "index": 3, "data": 1}),        # then 3 congested, 0 not: alt {0}
        ("cp", {"table": 1, "index": 0, "data": 0}),
        ("cp", {"table": 2, "index": a_cl, "data": 0b0001}),
        ("pkt", 5, None, D, 1),            # across the tick's wrap, age 11: held
        ("pkt", 9, None, D, 1),            # age 15: held
        ("pkt", 10, None, D, 1),           # age 16 across the wrap: moves to 0 (tail)
        ("cp", {"table": 2, "index": b_cl, "data": 0}),     # {4..7}'s alt emptied (its backup wholly congested)
        # Forged writes, each out of range: a path at n_paths, congested 2, a cluster at 64, an alt bit at
        # n_paths, alt of cluster 64, shortest 8, shortest at index 1, an unknown table: none may change anything.
        ("cp", {"table": 1, "index": 8, "data": 1}),
        ("cp", {"table": 1, "index": 4, "data": 2}),
        ("cp", {"table": 0, "index": 6, "data": SELB_MAX_CLUSTERS}),
        ("cp", {"table": 2, "index": b_cl, "data": 1 << 8 | 1 << 6}),
        ("cp", {"table": 2, "index": SELB_MAX_CLUSTERS, "data": 1}),
        ("cp", {"table": 3, "index": 0, "data": 8}),
        ("cp", {"table": 3, "index": 1, "data": 6}),
        ("cp", {"table": 7, "index": 0, "data": 0}),
        ("pkt", 20, 6, E, 1),              # new on congested 6, alt empty: to the shortest path 1 (tail)
        ("pkt", 40, None, D, 1),           # on 0, not congested: stays
        ("pkt", 41, None, A, 1),           # on 3 (congested), alt {0}: moves to 0 (tail)
        # Not a flow (ok 0, no state, no LFSR step): ARP; flows of fragments (ports 0), new on congested 4 with an
        # empty alt: to the shortest path; a packet with IPv4 options whose flow index collides with C's (16
        # entries): it shares C's entry, looked up on path 7: stale, leaves on C's path.
        ("pkt", 42, 3, ARP(pdst="10.0.1.1"), 1),
        ("pkt", 43, 4, IP(src="10.1.0.9", dst="10.2.1.3", flags="MF") / UDP(sport=11, dport=12) / Raw(bytes(8)), 1),
        ("pkt", 44, 4, IP(src="10.1.0.9", dst="10.2.1.3", frag=3) / Raw(bytes(16)), 1),
        ("pkt", 45, 7, IP(src="10.1.0.9", dst="10.2.1.3", options=IPOption(b"\x01\x01\x01\x00")) /
         TCP(sport=77, dport=88), 1),
    ]
    return first, steps


def expected_frame(frame, out, fields, stale, new):
    """``frame`` with the golden model's decision ``out`` and the cluster ``fields`` in its harness header."""
    flags = 1 | out["tail"] << 1 | out["epoch"] << 2 | stale << 3 | fields["congested"] << 4 | new << 5
    return frame[:35] + struct.pack("!HBBBBQ", out["flow"], out["path"], flags, fields["cluster"],
                                    fields["shortest"], fields["alt"]) + frame[49:]


class Registers:
    """The switch's cluster registers as the control plane wrote them (the program's range rules)."""

    def __init__(self, n_paths):
        self.n = n_paths
        self.cluster, self.congested = [0] * n_paths, [0] * n_paths
        self.alt, self.shortest = [0] * SELB_MAX_CLUSTERS, 0

    def write(self, cmd):
        t, i, d = cmd["table"], cmd["index"], cmd["data"]
        if t == 0 and i < self.n and d < SELB_MAX_CLUSTERS:
            self.cluster[i] = d
        elif t == 1 and i < self.n and d < 2:
            self.congested[i] = d
        elif t == 2 and i < SELB_MAX_CLUSTERS and d < 1 << self.n:
            self.alt[i] = d
        elif t == 3 and i == 0 and d < self.n:
            self.shortest = d

    def fields(self, path):
        cl = self.cluster[path]
        return {"cluster": cl, "congested": self.congested[path], "alt": self.alt[cl], "shortest": self.shortest}


def write_selb_test(name, params, first, steps, note):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    model, regs = Reroute(**params), Registers(params["n_paths"])
    for cmd in first:
        regs.write(cmd)
    frames, out, events = [], [], []
    for tag, step in enumerate(steps):
        if step[0] in ("cp", "ctl"):
            cmd = step[1]
            if step[0] == "cp":
                regs.write(cmd)
            else:
                events.append({"ctl": cmd})
            op = 2 if step[0] == "cp" else 1
            frames.append(_frame(selb_tick(op, table=cmd["table"], index=cmd["index"], data=cmd["data"]), bytes(32)))
            continue
        _, now, path, l3, kind = step
        if IP not in l3:
            frame = _frame(selb_tick(0, kind=kind, tag=tag, now=now, path=path, ether_type=0x0806), l3)
            frames.append(frame)
            out.append(frame[:35] + bytes(14) + frame[49:])
            continue
        flow = _flow(l3, params["n_flows"])
        ent = model.flows.get(flow)
        if path is None:
            path = ent[0]
        fields = regs.fields(path)
        item = {"kind": kind, "tag": tag, "flow": flow, "now": now, "path": path,
                "congested": fields["congested"], "alt": fields["alt"], "shortest": fields["shortest"]}
        stale, new = int(ent is not None and ent[0] != path), int(ent is None)
        frame = _frame(selb_tick(0, kind=kind, tag=tag, now=now, path=path), l3)
        res = model.process(item)
        events.append({"item": item})
        frames.append(frame)
        out.append(expected_frame(frame, res, fields, stale, new))
    write_test_dir(where, params, first, events, frames, out, note)
    return model.stats()


def write_test_dir(where, params, first, events, frames, out, note):
    (where / "test.json").write_text(json.dumps({"program": "selb_tor.p4", "block": "selb-reroute",
                                                 "params": params, "note": note}, indent=2) + "\n")
    write_events(where / "ctl.jsonl", [{"ctl": c} for c in first])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in selb_tor_commands(params, first)))
    write_pcap(where / "packets_out.pcap", out)
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(out)} out\n")


MIXED_PARAMS = dict(n_paths=16, n_flows=64, hold=8, lfsr_seed=0x1234)


#: 64 paths: the draw's count and rank over all 64 bits of alt (bits 32-63 included).
WIDE_PARAMS = dict(n_paths=64, n_flows=1024, hold=8, lfsr_seed=0xB5AD)


def mixed(name="selb-mixed", params=MIXED_PARAMS, seed=11):
    """``lbpipe trace selb-reroute`` (reroute_trace, 300 packets) as frames, the way ``lbpipe replay
    selb-reroute --engine bmv2`` makes them (lbpipe/p4.py selb_reroute_frames)."""
    events = reroute_trace(seed, 300, **params)
    commands, frames, n_items = selb_reroute_frames(events, params)
    first = [{"table": 0, "index": q, "data": q} for q in range(params["n_paths"])]
    assert commands == selb_tor_commands(params, first)
    model, regs = Reroute(**params), Registers(params["n_paths"])
    for cmd in first:
        regs.write(cmd)
    (HERE / f"test-{name}").mkdir(exist_ok=True)
    out, k = [], 0
    for event in events:
        if "ctl" in event:
            k += 1                      # its op-1 frame
            continue
        while frames[k][14] != 0:       # the register writes before the item
            op, table, index, data = frames[k][14], frames[k][23], int.from_bytes(frames[k][24:27], "big"), \
                struct.unpack_from("!Q", frames[k], 27)[0]
            assert op == 2
            regs.write({"table": table, "index": index, "data": data})
            k += 1
        item = event["item"]
        fields = regs.fields(item["path"])
        assert all(fields[f] == item[f] for f in ("congested", "alt", "shortest"))
        ent = model.flows.get(item["flow"])
        stale, new = int(ent is not None and ent[0] != item["path"]), int(ent is None)
        out.append(expected_frame(frames[k], model.process(item), fields, stale, new))
        k += 1
    write_test_dir(HERE / f"test-{name}", params, first, events, frames, out,
                   f"lbpipe trace selb-reroute --param n_paths={params['n_paths']} --param n_flows={params['n_flows']} "
                   f"--param hold={params['hold']} --param lfsr_seed={params['lfsr_seed']} --seed {seed} -n 300, "
                   f"as frames")
    return model.stats()


def main():
    first, steps = cases()
    stats = write_selb_test("selb-cases", CASES_PARAMS, first, steps,
                            "hand-picked: clusters published by the clustering golden model, moves within the cluster, "
                            "empty alt -> shortest, reroutes in flight held, stale lookups, the tick wrap, forged "
                            "register writes, non-flows (make_selb_tests.py cases)")
    sys.stdout.write(f"  selb-cases: packets, tails, tails to the shortest path, stale = {stats}\n")
    sys.stdout.write(f"  selb-mixed: packets, tails, tails to the shortest path, stale = {mixed()}\n")
    wide = mixed("selb-wide", WIDE_PARAMS, 12)
    sys.stdout.write(f"  selb-wide: packets, tails, tails to the shortest path, stale = {wide}\n")


if __name__ == "__main__":
    main()
