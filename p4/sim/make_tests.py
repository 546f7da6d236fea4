"""Writes the P4 test directories p4/sim/test-<name>/ (run from the repository root: python p4/sim/make_tests.py).

Each directory holds what the test needs, the inputs first:
  ctl.jsonl         lbpipe control commands ({"ctl": {...}} lines, as `lbpipe trace BLOCK` writes them)
  test.json         the program and the golden model's parameters
  packets_in.pcap   frames into the switch (port 0)
  commands.txt      simple_switch_CLI commands, from ctl.jsonl by lbpipe/p4.py (the same source as the FPGA ctl)
  packets_out.pcap  the expected frames out (port 1): the golden model's output for the same frames and commands

tests/test_p4.py checks that commands.txt and packets_out.pcap are what this script derives, then runs bmv2.
The flb_edge.p4 tests (test-flb-*) are written by make_flb_tests.py.
"""

import json
import pathlib
import struct
import sys

from lbpipe.p4 import (golden_between, themis_d_commands, themis_d_golden, themis_d_inband, themis_s_commands,
                        themis_s_inband)
from lbpipe.sim.themis.wire import ThemisDWireModel, ThemisSWireModel
from lbpipe.tb.lib import packets as pk
from lbpipe.tb.themis import test_themis_d_wire as dwire
from lbpipe.tb.themis.test_themis_s_wire import pcap_trace
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent


def _fix_icrc(frame):
    """The frame with its ICRC recomputed (tb/lib/packets.py icrc), when it is a whole RoCEv2 frame."""
    try:
        value = pk.icrc(frame)
    except ValueError:
        return frame
    where = len(frame) - 4
    return frame[:where] + value


def _set(frame, at, data):
    return frame[:at] + bytes(data) + frame[at + len(data):]


def _ipv4_checksum(header):
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def edge_frames():
    """Hand-picked frames around every rule of the RoCEv2 classification and of the rewrite."""
    src, dst = "10.1.0.1", "10.2.0.1"
    frames = []

    def data(psn, **kw):
        kw.setdefault("opcode", pk.RC_SEND_ONLY)
        kw.setdefault("payload_len", 40)
        return bytes(pk.roce_data(src, dst, 0xC123, 0x42, psn, **kw))

    # Equation 1 across the PSN wrap (N = 3: PSNs 2^24-1 and 0 share a path), every opcode.
    for psn in ((1 << 24) - 2, (1 << 24) - 1, 0, 1, 2, 3):
        frames.append(data(psn))
    base = data(7)
    bth = 14 + 20 + 8
    for op in list(range(0x00, 0x20)) + [0x20, 0x24, 0x2A, 0x40, 0x64, 0x81, 0xFF]:
        frames.append(_fix_icrc(_set(base, bth, [op])))
    # TVer 1: ROCE_OTHER.
    frames.append(_fix_icrc(_set(base, bth + 1, [base[bth + 1] | 1])))
    # UDP length too short for the opcode's extension headers (0x0B needs 20 bytes; 8 bytes of payload here).
    short = data(9, payload_len=8)
    frames.append(_fix_icrc(_set(short, bth, [0x0B])))
    frames.append(_fix_icrc(_set(short, bth, [0x06])))
    # UDP length above the IP payload; below it (4 bytes after the datagram inside the IP packet).
    ulen = struct.unpack_from("!H", base, 14 + 20 + 4)[0]
    frames.append(_set(base, 14 + 20 + 4, struct.pack("!H", ulen + 4)))
    inner = bytearray(base + b"\xAA" * 4)
    struct.pack_into("!H", inner, 16, struct.unpack_from("!H", inner, 16)[0] + 4)
    struct.pack_into("!H", inner, 24, 0)
    struct.pack_into("!H", inner, 24, _ipv4_checksum(bytes(inner[14:34])))
    frames.append(bytes(inner))
    # IPv4 fragment (MF), IHL 4, version 5.
    frames.append(_set(base, 20, [0x20 | base[20], base[21]]))
    frames.append(_set(base, 14, [0x44]))
    frames.append(_set(base, 14, [0x55]))
    # IPv4 with 8 bytes of options (the ICRC covers them).
    opt = bytearray(base[:34] + b"\x01" * 8 + base[34:])
    opt[14] = 0x47
    struct.pack_into("!H", opt, 16, struct.unpack_from("!H", opt, 16)[0] + 8)
    struct.pack_into("!H", opt, 24, 0)
    struct.pack_into("!H", opt, 24, _ipv4_checksum(bytes(opt[14:42])))
    frames.append(_fix_icrc(bytes(opt)))
    # Tags: S-tag + C-tag, lone S-tag, C-tag, three tags (not parsed), TPID 0x9100 (not parsed).
    def tagged(tags):
        return base[:12] + b"".join(struct.pack("!HH", tpid, vid) for tpid, vid in tags) + base[12:]
    frames.append(tagged([(0x88A8, 5), (0x8100, 7)]))
    frames.append(tagged([(0x88A8, 5)]))
    frames.append(tagged([(0x8100, 7)]))
    frames.append(tagged([(0x8100, 1), (0x8100, 2), (0x8100, 3)]))
    frames.append(tagged([(0x9100, 5)]))
    # IPv6; IPv6 with a non-zero UDP checksum (left unsprayed); IPv4 non-zero checksum.
    frames.append(bytes(pk.roce_data("fd00::1", "fd00::2", 0xC200, 0x77, 11, opcode=pk.RC_RDMA_WRITE_MIDDLE,
                                     payload_len=100)))
    frames.append(bytes(pk.roce_data("fd00::1", "fd00::2", 0xC200, 0x77, 12, opcode=pk.RC_RDMA_WRITE_MIDDLE,
                                     payload_len=100, udp_chksum=0x1234)))
    frames.append(data(13, udp_chksum=0xBEEF))
    # Every data opcode the builder makes, with its extension headers, several sizes (up to a jumbo frame).
    for n, op in enumerate((0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C)):
        frames.append(data(100 + n, opcode=op, payload_len=0 if op == 0x0C else (0, 3, 61, 1000, 9000)[n % 5]))
    # Padding after the IP packet (a 58-byte frame padded to 64; a 4-byte trailer on a long frame).
    frames.append(data(20, payload_len=0) + bytes(6))
    frames.append(data(21, payload_len=500) + b"\x11\x22\x33\x44")
    # Truncated at most 128 bytes long (the parser knows its length): not RoCEv2, unchanged.
    frames.append(data(22, payload_len=40)[:-10])
    # ACK, NAK, CNP; non-RoCE UDP and TCP; a runt.
    frames.append(bytes(pk.roce_ack(dst, src, 0xC123, 0x42, 5)))
    frames.append(bytes(pk.roce_nak(dst, src, 0xC123, 0x42, 5)))
    frames.append(bytes(pk.roce_cnp(dst, src, 0xC123, 0x42)))
    frames.append(_set(base, 14 + 20 + 2, struct.pack("!H", 4792)))
    frames.append(base[:23] + b"\x06" + base[24:])
    frames.append(base[:20])
    return frames


def edge_ctl():
    """N = 3: entry 1 written twice (the last wins), entry 2 a zero delta, entry 5 and table 1 ignored, entry 0
    data wider than 16 bits (masked)."""
    return [{"table": 0, "index": 0, "data": 0x1ABCD}, {"table": 0, "index": 1, "data": 0x1111},
            {"table": 0, "index": 1, "data": 0x8001}, {"table": 0, "index": 2, "data": 0},
            {"table": 0, "index": 5, "data": 0x5555}, {"table": 1, "index": 0, "data": 0x7777}]


def ctl_s():
    """PathMap writes between frames, N = 4: ``(events, frames)``. One QP's data frames PSN 0 to 39 (every relative
    path ten times), the entries rewritten every few frames, an entry written twice before one frame (the last
    wins), data wider than 16 bits, forged writes (index at N and 2^24 - 1, table 1), and a write after the last
    frame."""
    import random
    rng = random.Random(5)
    src, dst = "10.1.0.1", "10.2.0.1"
    frames = [bytes(pk.roce_data(src, dst, 0xC123, 0x42, psn, payload_len=rng.choice([0, 40, 300])))
              for psn in range(40)]
    events = [{"ctl": {"table": 0, "index": i, "data": 0x100 * (i + 1)}} for i in range(4)]
    for at in range(3, 40, 5):
        index = rng.randrange(4)
        events.append({"ctl": {"table": 0, "index": index, "data": rng.randrange(1 << 17)}, "before": at})
    events += [{"ctl": {"table": 0, "index": 1, "data": 0x1111}, "before": 20},
               {"ctl": {"table": 0, "index": 1, "data": 0x2222}, "before": 20},
               {"ctl": {"table": 0, "index": 4, "data": 0x5555}, "before": 24},
               {"ctl": {"table": 0, "index": (1 << 24) - 1, "data": 0x5555}, "before": 24},
               {"ctl": {"table": 1, "index": 2, "data": 0x7777}, "before": 24},
               {"ctl": {"table": 0, "index": 2, "data": 0}, "before": 30},
               {"ctl": {"table": 0, "index": 0, "data": 0xAAAA}, "before": 40}]
    events.sort(key=lambda e: e.get("before", 0))
    return events, frames


def write_test_s_ctl(name, events, frames, n_paths, note):
    """A Themis-S test with PathMap writes between frames (packets_in.pcap with the in-band command frames,
    trace.pcap without)."""
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    write_events(where / "ctl.jsonl", events)
    (where / "test.json").write_text(json.dumps({"program": "themis_tor.p4", "block": "themis-s-wire",
                                                 "params": {"n_paths": n_paths}, "note": note}, indent=2) + "\n")
    commands, inband = themis_s_inband(events, n_paths, frames)
    write_pcap(where / "trace.pcap", frames)
    write_pcap(where / "packets_in.pcap", inband)
    (where / "commands.txt").write_text("".join(c + "\n" for c in commands))
    write_pcap(where / "packets_out.pcap", golden_between("themis-s-wire", {"n_paths": n_paths}, events, frames))
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(inband) - len(frames)} in-band commands\n")


def expected(frames, ctl, n_paths):
    model = ThemisSWireModel(n_paths=n_paths)
    for cmd in ctl:
        model.control(cmd)
    return [model.process(f) for f in frames]


def write_test(name, frames, ctl, n_paths, note):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    write_events(where / "ctl.jsonl", [{"ctl": c} for c in ctl])
    (where / "test.json").write_text(json.dumps({"program": "themis_tor.p4", "block": "themis-s-wire",
                                                 "params": {"n_paths": n_paths}, "note": note}, indent=2) + "\n")
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in themis_s_commands(ctl, n_paths)))
    write_pcap(where / "packets_out.pcap", expected(frames, ctl, n_paths))
    sys.stdout.write(f"{where}: {len(frames)} frames\n")


def expected_d(frames, ctl, params):
    model = ThemisDWireModel(**params)
    for cmd in ctl:
        model.control(cmd)
    return [f for frame in frames for f in model.process(frame)]


def write_test_d(name, frames, ctl, params, note, trace):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    write_events(where / "ctl.jsonl", [{"ctl": c} for c in ctl])
    (where / "test.json").write_text(json.dumps({"program": "themis_d.p4", "block": "themis-d-wire",
                                                 "params": params, "note": note, "trace": trace}, indent=2) + "\n")
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in themis_d_commands(ctl, params)))
    write_pcap(where / "packets_out.pcap", expected_d(frames, ctl, params))
    sys.stdout.write(f"{where}: {len(frames)} frames\n")


EDGE_D_PARAMS = dict(n_qps=4, queue_depth=8, n_paths=2, entry_bits=8, buckets=16, ways=2, ipv6=True, depth=256)


def edge_d():
    """Hand-picked Themis-D cases, N = 2, 8 entries of 8 bits: ``(commands, frames)``. QP 0 (IPv4): the paper's
    Figure 4c (NACK 2 blocked by tPSN 3, compensated by 4), a stale NACK, a NACK after its queue was consumed; QP 1
    (VLAN): a blocked NACK too long to keep (compensation missed), a compensation disarmed by ePSN's own packet, a
    late NACK; QP 2 (IPv6): a NACK on an empty queue, PSNs across the 2^24 wrap, the ring overwritten; QP 3 set up
    then torn down (passes untouched); an index at n_qps ignored."""
    import random
    rng = random.Random(7)
    qps = [dwire.Qp(q) for q in range(4)]
    p = EDGE_D_PARAMS
    cmds = dwire.setup_commands(qps, n_qps=p["n_qps"], buckets=p["buckets"], ways=p["ways"], ipv6=p["ipv6"])
    cmds += [{"table": 17, "index": 3, "data": 0}, {"table": 16, "index": 4, "data": 0}]
    q0, q1, q2, q3 = qps
    frames = []

    def data(qp, *psns):
        frames.extend(bytes(qp.data(psn, rng)) for psn in psns)

    def nack(qp, epsn, msn=1, trailer=b""):
        frames.append(bytes(qp.nack(epsn, msn)) + trailer)

    data(q0, 0, 1, 3)
    nack(q0, 2, 7)
    data(q0, 5, 4, 6)
    nack(q0, 1, 2)
    data(q0, 8, 10)
    nack(q0, 9, 3)
    nack(q0, 7, 4)
    data(q0, 9, 11)
    data(q1, 10, 11, 13)
    nack(q1, 12, 5, trailer=bytes(70))
    data(q1, 14, 16, 17, 19)
    nack(q1, 18, 6)
    data(q1, 18, 20, 22, 21, 23)
    nack(q1, 21, 7)
    nack(q2, 100, 1)
    data(q2, (1 << 24) - 3, (1 << 24) - 2, (1 << 24) - 1, 0, 2)
    nack(q2, 1, 8)
    data(q2, 3, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 13)
    nack(q2, 13, 9)
    data(q3, 1, 3)
    nack(q3, 2, 1)
    return cmds, frames


CTL_D_PARAMS = dict(n_qps=8, queue_depth=16, n_paths=2, entry_bits=8, buckets=16, ways=2, ipv6=True, depth=256)


def ctl_d():
    """Hand-picked Themis-D cases with control commands between frames (``"before": K`` events; themis_d.p4 takes
    them in-band): ``(events, frames)``. N = 2, 16 entries of 8 bits, QPs 0 to 3 set up first. QP 0: a NACK whose
    scan takes three passes, then at once a tear-down (served after the scan, in the QP's order), data and a NACK
    of the idle QP (untouched), a set-up (empty queue), a blocked NACK then compensation. QP 1: compensation armed,
    then a tear-down and set-up before the packet that would fire it (no compensation). QP 2: removed from the
    classifier (its frames pass as no QP's), its index given to new addresses (QP 4's) and set up again. QP 3:
    moved to index 5 in the classifier without a set-up of 5 (passes), then set up. Forged: a set-up at n_qps, an
    unknown table, tables 16 and 17 at index 2^24 - 1."""
    import random
    from lbpipe.sim.packet.qp_classifier import QpTable
    rng = random.Random(11)
    p = CTL_D_PARAMS
    qps = [dwire.Qp(q) for q in range(6)]
    table = QpTable(n_entries=p["n_qps"], buckets=p["buckets"], ways=p["ways"], ipv6=p["ipv6"])
    events, frames = [], []

    def ctl(cmds):
        events.extend({"ctl": c, "before": len(frames)} for c in cmds)

    def data(qp, *psns):
        frames.extend(bytes(qp.data(psn, rng)) for psn in psns)

    def nack(qp, epsn, msn=1):
        frames.append(bytes(qp.nack(epsn, msn)))

    q0, q1, q2, q3, q4, _ = qps
    for q in range(4):
        ctl(table.add_qp(qps[q].local, qps[q].remote, qps[q].local_qpn, qps[q].remote_qpn, q))
        ctl([{"table": 16, "index": q, "data": 0}])
    data(q0, *range(0, 12))
    nack(q0, 10, 1)                                         # tPSN 10 at entry 11: three passes, then forwarded
    ctl([{"table": 17, "index": 0, "data": 0}])
    data(q0, 12, 13)
    nack(q0, 12, 2)
    ctl([{"table": 16, "index": 0, "data": 0}])
    data(q0, 20, 21, 23)
    nack(q0, 22, 3)                                         # blocked (tPSN 23, ePSN's path), kept
    data(q0, 24)                                            # compensation
    data(q1, 1, 2, 4)
    nack(q1, 3, 4)                                          # blocked
    ctl([{"table": 17, "index": 1, "data": 0}, {"table": 16, "index": 1, "data": 0}])
    data(q1, 5, 3)                                          # 5 would have fired compensation: disarmed
    nack(q1, 4, 5)
    data(q2, 7, 8, 10)
    ctl(table.remove_qp(2))
    data(q2, 11)
    nack(q2, 9, 6)                                          # no QP: passes
    ctl(table.add_qp(q4.local, q4.remote, q4.local_qpn, q4.remote_qpn, 2))
    ctl([{"table": 16, "index": 2, "data": 0}])
    data(q4, 1, 2, 4)
    nack(q4, 3, 7)                                          # blocked on the new QP 2
    data(q4, 5)                                             # compensation
    data(q2, 12)                                            # the old addresses: no QP
    data(q3, 30, 31)
    ctl(table.remove_qp(3) + table.add_qp(q3.local, q3.remote, q3.local_qpn, q3.remote_qpn, 5))
    data(q3, 33)
    nack(q3, 32, 8)                                         # QP 5, not set up: passes
    ctl([{"table": 16, "index": p["n_qps"], "data": 0}, {"table": 18, "index": 5, "data": 0},
         {"table": 16, "index": (1 << 24) - 1, "data": 0}, {"table": 17, "index": (1 << 24) - 1, "data": 0}])
    data(q3, 34)
    ctl([{"table": 16, "index": 5, "data": 0}])
    data(q3, 35, 36, 38)
    nack(q3, 37, 9)                                         # blocked on QP 5
    data(q3, 39)                                            # compensation
    data(q0, 25, 26)
    ctl([{"table": 17, "index": 0, "data": 0}])             # after the last frame
    return events, frames


def write_test_ctl(name, events, frames, params, note):
    """A Themis-D test with commands between frames: packets_in.pcap holds the in-band command frames, trace.pcap
    the frames alone (the input of ``lbpipe replay themis-d-wire trace.pcap --ctl ctl.jsonl``)."""
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    write_events(where / "ctl.jsonl", events)
    (where / "test.json").write_text(json.dumps({"program": "themis_d.p4", "block": "themis-d-wire",
                                                 "params": params, "note": note, "trace": None}, indent=2) + "\n")
    commands, inband = themis_d_inband(events, params, frames)
    write_pcap(where / "trace.pcap", frames)
    write_pcap(where / "packets_in.pcap", inband)
    (where / "commands.txt").write_text("".join(c + "\n" for c in commands))
    write_pcap(where / "packets_out.pcap", themis_d_golden(events, params, frames)[0])
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(inband) - len(frames)} in-band commands\n")


def themis_d_tests():
    """``lbpipe trace themis-d-wire`` traces (closed-loop runs on four QPs with foreign and malformed frames) at
    parameters themis_d.p4 takes."""
    base = dict(dwire.WIRE_PARAMS)
    for name, seed, extra, note in (
            ("themis-d-mixed", 3, {}, "the testbench's parameters (N = 3, 40 entries of 10 bits, 8 QPs)"),
            ("themis-d-n8", 4, dict(n_paths=8, entry_bits=6), "N = 8, 6-bit entries: out-of-range NACKs"),
            ("themis-d-n64", 3, dict(n_paths=64, queue_depth=64, entry_bits=24, n_qps=16, buckets=16, ways=4),
             "N = 64, 64 full-PSN entries, 16 QPs")):
        params = dict(base, **extra)
        cmds, frames = dwire.pcap_trace(seed, 300, **params)
        flags = " ".join(f"--param {k}={str(v).lower()}" for k, v in params.items())
        write_test_d(name, frames, cmds, params, f"lbpipe trace themis-d-wire {flags} --seed {seed} -n 300: {note}",
                     {"seed": seed, "n_frames": 300})
    cmds, frames = edge_d()
    write_test_d("themis-d-edge", frames, cmds, dict(EDGE_D_PARAMS), "hand-picked frames, N = 2 (make_tests.py edge_d)",
                 None)
    events, frames = ctl_d()
    write_test_ctl("themis-d-ctl", events, frames, dict(CTL_D_PARAMS),
                   "hand-picked frames with commands between them, N = 2 (make_tests.py ctl_d)")


def main():
    cmds, frames = pcap_trace(1, 300, n_paths=8, depth=256)
    write_test("themis-mixed", frames, cmds, 8, "lbpipe trace themis-s-wire --param n_paths=8 --seed 1 -n 300")
    cmds, frames = pcap_trace(2, 120, n_paths=256, depth=256)
    write_test("themis-n256", frames, cmds, 256, "lbpipe trace themis-s-wire --seed 2 -n 120 (N = 256)")
    write_test("themis-edge", edge_frames(), edge_ctl(), 3, "hand-picked frames, N = 3 (make_tests.py)")
    events, frames = ctl_s()
    write_test_s_ctl("themis-ctl", events, frames, 4, "PathMap writes between frames, N = 4 (make_tests.py ctl_s)")
    themis_d_tests()


if __name__ == "__main__":
    main()
