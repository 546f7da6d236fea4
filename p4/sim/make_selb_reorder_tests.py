"""Writes the P4 test directories of p4/selb_reorder.p4 (run from the repository root: python
p4/sim/make_selb_reorder_tests.py).

Each directory p4/sim/test-selb-reorder-<name>/ holds, as the selb_tor.p4 ones (make_selb_tests.py):
  test.json         the program, the block, the golden model's parameters and its counters at the end
  ctl.jsonl         empty: the block has no tables (its ctl commands go in-band as op 1 and are dropped)
  trace.jsonl       the run as a selb-reorder metadata trace (the items the golden model was fed, and the commands)
  packets_in.pcap   frames into the switch: one per item, selb_tor.p4's harness header (op 0: kind, tag, tick, and
                    the tail and epoch in its flags as selb_tor.p4 writes them) before an IPv4 packet of the item's
                    flow (the CRC16 of its 5-tuple); op-1 and op-2 frames between them
  commands.txt      simple_switch_CLI commands (lbpipe/p4.py selb_reorder_commands)
  packets_out.pcap  the expected frames out, in the golden model's release order: each item's frame with its flow
                    and `held` (flags bit 6) written. bmv2 keeps this order within each flow only (p4/README.md).

test-selb-reorder-bth's frames have no harness header: RoCEv2 frames with the tail and epoch in the BTH's reserved
byte, the tick bmv2's clock (packets_out.pcap: the frames unchanged, in the golden model's order).

The golden model is sim/selb/reorder.py. tests/test_p4.py re-derives the items and the expected frames from
packets_in.pcap and commands.txt alone, and checks the hand-picked test against orders worked by hand there.
"""

import json
import pathlib
import struct
import sys

from lbpipe.p4 import SELB_TICK_TYPE, selb_reorder_commands, selb_reorder_frames, selb_reorder_tick
from lbpipe.sim.selb.reorder import Reorder, reorder_trace
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent

CASES_PARAMS = dict(n_flows=16, n_buffers=2, depth=4, time_bits=8, timeout=32)
ETH = bytes.fromhex("020000000002" "020000000001") + struct.pack("!H", SELB_TICK_TYPE)
A, B, C, D, E, F, G, H = 1, 2, 3, 4, 5, 6, 7, 8
ACK, OTHER = 2, 0


def cases():
    """Hand-picked (16 flows, 2 buffers of 4, 8-bit ticks, timeout 32): events in order; an item ``(kind, flow,
    epoch, tail, now)``, its tag its position among the items. The comments give what leaves; tests/test_p4.py
    (REORDER_CASES) has each flow's order worked from them."""
    steps = [
        (1, A, 0, 0, 0),        # 0: in order
        (1, A, 0, 0, 1),        # 1: in order
        (1, A, 1, 0, 2),        # 2: early (new path before the old path's tail): buffer 0 opens, held
        (ACK, A, 0, 0, 3),      # 3: another kind: passes, even for a flow with a held buffer
        (1, A, 1, 0, 4),        # 4: joins buffer 0
        (1, A, 0, 0, 5),        # 5: an old-path packet: passes
        (1, A, 0, 1, 6),        # 6: the tail: 6, then 2 and 4 (held); A at epoch 1
        (1, A, 1, 0, 7),        # 7: in order
        {"ctl": {"table": 0, "index": 3, "data": 9}},               # the block's ctl: no tables, dropped
        {"op2": {"table": 1, "index": 0, "data": 1}},               # selb_tor.p4's register write: dropped here
        (1, B, 1, 0, 10),       # 8: B not seen yet, in order at 0: early, buffer 0 opens at 10
        (1, C, 1, 0, 12),       # 9: early, buffer 1 opens at 12
        (1, D, 1, 0, 13),       # 10: early, no buffer free: passes (fallback)
        (1, E, 1, 1, 14),       # 11: a tail of the other epoch, no buffer: passes (stale); E stays at 0
        (1, F, 0, 1, 15),       # 12: an unknown flow's epoch-0 tail: in order, F moves to 1
        (1, F, 1, 0, 16),       # 13: in order
        "arp",                  # 14: not IPv4 (kind DATA in the header): passes as another kind
        (OTHER, H, 0, 0, 42),   # 15: buffer 0 is 32 old: times out, 8 leaves (held), B at 1; buffer 1 is 30 old
        (1, C, 0, 1, 43),       # 16: buffer 1 is 31 old, kept; C's tail: 16, then 9 (held)
        (1, A, 0, 0, 44),       # 17: A at 1: early, buffer 0 opens
        (1, A, 0, 0, 45),       # 18: joins
        (1, A, 0, 0, 46),       # 19: joins
        (1, A, 0, 0, 47),       # 20: the fourth: full, 17 18 19 20 leave (held); A at 0
        (1, A, 1, 1, 48),       # 21: the old path's tail after the full buffer: stale, passes
        (1, B, 0, 0, 50),       # 22: B at 1: early, buffer 0 opens
        (1, B, 0, 1, 51),       # 23: the new path's tail before the old one's (second reroute): 22 23 (held); B
                                #     at 1 (not the buffer's epoch)
        (1, B, 1, 0, 52),       # 24: in order
        (1, G, 1, 0, 53),       # 25: an unknown flow's epoch-1 packet: early, held (buffer 0)
        (1, G, 0, 0, 54),       # 26: old path: passes
        (1, G, 0, 1, 55),       # 27: tail: 27, then 25
        (1, D, 1, 0, 250),      # 28: D (fallback at 10) still at 0: early, buffer 0 opens at 250
        (OTHER, H, 0, 0, 20),   # 29: across the tick's wrap: 26 old, kept
        (1, D, 1, 0, 25),       # 30: 31 old: joins
        (OTHER, H, 0, 0, 26),   # 31: 32 old: times out, 28 30 (held), then 31; D at 1
    ]
    events, frames, tag = [], [], 0
    for step in steps:
        if isinstance(step, dict) and "ctl" in step:
            cmd = step["ctl"]
            events.append({"ctl": cmd})
            frames.append(ETH + selb_reorder_tick(1, table=cmd["table"], index=cmd["index"], data=cmd["data"])
                          + bytes(32))
            continue
        if isinstance(step, dict):
            cmd = step["op2"]
            frames.append(ETH + selb_reorder_tick(2, table=cmd["table"], index=cmd["index"], data=cmd["data"])
                          + bytes(32))
            continue
        if step == "arp":
            # An ARP request behind the header (kind DATA, epoch 1, no tail: as a flow it would be early).
            now = 20
            item = {"kind": OTHER, "tag": tag, "flow": 0, "epoch": 1, "tail": 0, "now": now}
            arp = bytes.fromhex("0001080006040001" "020000000001" "0a000001" "000000000000" "0a000002")
            frames.append(ETH + selb_reorder_tick(0, kind=1, tag=tag, now=now, epoch=1, ether_type=0x0806) + arp)
        else:
            kind, flow, epoch, tail, now = step
            item = {"kind": kind, "tag": tag, "flow": flow, "epoch": epoch, "tail": tail, "now": now}
            _, one, _ = selb_reorder_frames([{"item": item}], CASES_PARAMS)
            frames += one
        events.append({"item": item})
        tag += 1
    return events, frames


def expected(events, frames, params):
    """The golden model's output frames, in its release order: each item's frame with the flow and ``held``
    written (the ``flow`` field only for IPv4 frames: 0 for the others, as the program writes it)."""
    model = Reorder(**params)
    by_tag, k = {}, 0
    for event in events:
        while frames[k][14] != 0:
            k += 1
        if "item" in event:
            by_tag[event["item"]["tag"]] = frames[k]
            k += 1
    out = []
    for event in events:
        if "ctl" in event:
            model.control(event["ctl"])
            continue
        for res in model.step(event["item"]):
            frame = bytearray(by_tag[res["tag"]])
            ipv4 = frame[49:51] == b"\x08\x00"
            struct.pack_into("!H", frame, 35, res["flow"] if ipv4 else 0)
            frame[38] |= res["held"] << 6
            out.append(bytes(frame))
    assert not model.held(), "the trace must end with every buffer released"
    return out, model.stats()


def write_reorder_test(name, params, events, frames, note):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    out, stats = expected(events, frames, params)
    (where / "test.json").write_text(json.dumps({"program": "selb_reorder.p4", "block": "selb-reorder",
                                                 "params": params, "stats": stats, "note": note}, indent=2) + "\n")
    write_events(where / "ctl.jsonl", [])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in selb_reorder_commands(params)))
    write_pcap(where / "packets_out.pcap", out)
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(out)} out; items, held, reorders, timeouts, overflows, "
                     f"second reroutes, fallbacks, stale tails = {stats}\n")


#: Frames marked in the BTH (no harness header): the tick is bmv2's timestamp, so the timeout is out of reach.
BTH_PARAMS = dict(n_flows=16, n_buffers=2, depth=4, time_bits=32, timeout=1 << 31)


def _roce(src, sport, opcode, psn, epoch=0, tail=0, dqpn=0x12):
    """An IPv4 RoCEv2 frame from 10.1.0.SRC port SPORT to 10.2.0.1 whose BTH reserved byte carries the tail (bit 0)
    and epoch (bit 1), as a source ToR marking the BTH would send it (16 payload bytes, an ICRC of zeros: the
    program neither checks nor changes it)."""
    bth = struct.pack("!BBHB", opcode, 0x40, 0xFFFF, tail | epoch << 1) + dqpn.to_bytes(3, "big") + \
        struct.pack("!I", psn & 0xFFFFFF)
    udp = struct.pack("!HHHH", sport, 4791, 8 + len(bth) + 20, 0) + bth + bytes(20)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                               bytes([10, 1, 0, src]), bytes([10, 2, 0, 1])))
    total = sum(struct.unpack("!10H", ip))
    total = (total & 0xFFFF) + (total >> 16)
    struct.pack_into("!H", ip, 10, ~((total & 0xFFFF) + (total >> 16)) & 0xFFFF)
    return bytes.fromhex("020000000002" "020000000001" "0800") + bytes(ip) + udp


def bth():
    """Hand-picked frames without the harness header, the marks in the BTH: ``[(frame, tag, flow, epoch, tail,
    DATA)]`` (the flow by the test's CRC16 of the addresses and destination QP, the tag an index for the expected
    order; B's destination QP 0x20 keeps it off A's index at 16 flows). One flow rerouted (two new-path packets
    held until the old path's tail), its source port's low bits
    changed with the path as selb-tx-wire writes them (0xC000 on the old path, 0xC001 on the new: a 5-tuple key
    would put them on two flows at 16 flows), another flow in
    order, acknowledgements (not data: they pass, even marked)."""
    old, new = 0xC000, 0xC001
    rows = [(_roce(1, old, 0x04, 0), 0, 0, 1),    # A: SEND only, in order
            (_roce(2, 49153, 0x0A, 0, dqpn=0x20), 0, 0, 1),    # B: RDMA WRITE only, in order
            (_roce(1, old, 0x04, 1), 0, 0, 1),    # A: in order
            (_roce(1, new, 0x04, 4, 1), 1, 0, 1),  # A: the new path's first packet, early: held
            (_roce(2, 49153, 0x11, 7, 1, 1, dqpn=0x20), 1, 1, 0),  # an ACK marked epoch 1 and tail: not data, passes
            (_roce(1, new, 0x04, 5, 1), 1, 0, 1),  # A: joins the buffer
            (_roce(2, 49153, 0x0A, 1, dqpn=0x20), 0, 0, 1),    # B: in order
            (_roce(1, old, 0x04, 2), 0, 0, 1),    # A: an old-path packet: passes
            (_roce(1, old, 0x04, 3, 0, 1), 0, 1, 1),  # A: the tail: it leaves, then PSN 4 and 5
            (_roce(1, new, 0x04, 6, 1), 1, 0, 1)]  # A: in order at epoch 1
    return rows


def write_bth_test(name="selb-reorder-bth", params=BTH_PARAMS):
    from lbpipe.p4 import crc16
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    model = Reorder(**params)
    frames, events, out = [], [], []
    for tag, (frame, epoch, tail, data) in enumerate(bth()):
        flow = crc16(frame[26:34] + frame[47:50]) & (params["n_flows"] - 1)     # addresses, destination QP
        item = {"kind": 1 if data else 4, "tag": tag, "flow": flow, "epoch": epoch, "tail": tail, "now": 0}
        frames.append(frame)
        events.append({"item": item})
        out += [frames[res["tag"]] for res in model.step(item)]
    assert not model.held()
    (where / "test.json").write_text(json.dumps({"program": "selb_reorder.p4", "block": "selb-reorder",
                                                 "params": params, "stats": model.stats(),
                                                 "note": "hand-picked RoCEv2 frames without the harness header, the "
                                                         "tail and epoch in the BTH reserved byte (bits 0 and 1), the "
                                                         "tick bmv2's clock (make_selb_reorder_tests.py bth)"},
                                                indent=2) + "\n")
    write_events(where / "ctl.jsonl", [])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in selb_reorder_commands(params)))
    write_pcap(where / "packets_out.pcap", out)
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(out)} out; counters {model.stats()}\n")


MIXED_PARAMS = dict(n_flows=64, n_buffers=2, depth=8, time_bits=12, timeout=256)
DEFAULTS_PARAMS = dict(n_flows=1024, n_buffers=8, depth=32, time_bits=16, timeout=1024)


def trace_test(name, params, seed, n):
    events = reorder_trace(seed, n, **params)
    _, frames, _ = selb_reorder_frames(events, params)
    args = " ".join(f"--param {k}={v}" for k, v in params.items())
    write_reorder_test(name, params, events, frames, f"lbpipe trace selb-reorder {args} --seed {seed} -n {n}, as "
                                                     f"frames (lbpipe/p4.py selb_reorder_frames)")


def main():
    events, frames = cases()
    write_reorder_test("selb-reorder-cases", CASES_PARAMS, events, frames,
                       "hand-picked: in order, a reroute held and released by its tail, another kind past a held "
                       "buffer, fallback with both buffers busy, stale tails, unknown flows at epoch 0 and 1, a "
                       "timeout at exactly timeout (31 kept), a full buffer, a second reroute, a timeout across the "
                       "tick's wrap, commands dropped, a non-IPv4 frame (make_selb_reorder_tests.py cases)")
    trace_test("selb-reorder-mixed", MIXED_PARAMS, 4, 300)
    trace_test("selb-reorder-defaults", DEFAULTS_PARAMS, 5, 1000)
    write_bth_test()


if __name__ == "__main__":
    main()
