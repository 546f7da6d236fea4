"""Writes the P4 test directories of p4/selb_reorder.p4's no-header form beyond untagged IPv4 (run from the repository
root: .venv/bin/python p4/sim/make_selb_reorder_bth_tests.py).

  test-selb-reorder-bth-tags   IPv4 RoCEv2 frames behind one tag (0x8100, or a lone 0x88A8) and two (0x88A8 or
                               0x8100, then 0x8100), and frames whose tags lbpipe's parser does not take (three
                               tags, an inner 0x88A8, TPID 0x9100)
  test-selb-reorder-bth-ipv6   IPv6 RoCEv2 frames, untagged and behind one and two tags, two flows differing only in
                               the destination QP, and IPv6 frames the program does not take (an extension header,
                               TCP, a version field of 4)

Files as test-selb-reorder-bth's (make_selb_reorder_tests.py bth). The frames are built with scapy (its BTH, so each
carries a valid ICRC; the tail and epoch marks in BTH byte 4, bits 0 and 1, the ICRC's masked byte, as
selb-tx-wire writes them, with the UDP source port 0xC000 on the old path and 0xC001 on the new). The frames out
are written by hand below (``OUT``: the golden order, each tail followed by the packets it releases), and checked
here against the golden model sim/selb/reorder.py fed the items; tests/test_p4.py re-derives both again.
"""

import json
import pathlib
import sys

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

from lbpipe.p4 import crc16, selb_reorder_commands
from lbpipe.sim.selb.reorder import Reorder
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent

#: bmv2's clock is the tick, so the timeout (2^31 us) is out of reach, as in test-selb-reorder-bth.
PARAMS = dict(n_flows=16, n_buffers=2, depth=4, time_bits=32, timeout=1 << 31)
OLD, NEW = 0xC000, 0xC001
SEND_ONLY, WRITE_ONLY, ACKNOWLEDGE = 0x04, 0x0A, 0x11


def _eth(tags, ether_type=None):
    """Ethernet with ``tags`` [(TPID, VLAN id)], outermost first."""
    frame = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=tags[0][0] if tags else ether_type)
    for i, (_, vid) in enumerate(tags):
        nxt = tags[i + 1][0] if i + 1 < len(tags) else ether_type
        frame = frame / (Dot1AD if tags[i][0] == 0x88A8 else Dot1Q)(vlan=vid, type=nxt)
    return frame


def _bth(sport, opcode, dqpn, psn, epoch, tail):
    """UDP (checksum 0: selb-tx-wire marks only such frames, docs/selb_tx_wire.md), the BTH and 16 payload bytes."""
    return UDP(sport=sport, dport=4791, chksum=0) / BTH(opcode=opcode, dqpn=dqpn, psn=psn, resv6=tail | epoch << 1) \
        / (b"\x00" * 16)


def roce4(tags, src, dqpn, psn, epoch=0, tail=0, opcode=SEND_ONLY, ether_type=0x0800):
    """An IPv4 RoCEv2 frame from 10.1.0.SRC to 10.2.0.1."""
    udp = _bth(NEW if epoch else OLD, opcode, dqpn, psn, epoch, tail)
    return bytes(_eth(tags, ether_type) / IP(src=f"10.1.0.{src}", dst="10.2.0.1", flags="DF") / udp)


def roce6(tags, src, dqpn, psn, epoch=0, tail=0, opcode=SEND_ONLY, ip=None, l4=None):
    """An IPv6 RoCEv2 frame from fd00::SRC to fd00::2."""
    ip = ip if ip is not None else IPv6(src=f"fd00::{src}", dst="fd00::2")
    return bytes(_eth(tags, 0x86DD) / ip / (l4 if l4 is not None else _bth(NEW if epoch else OLD, opcode, dqpn,
                                                                           psn, epoch, tail)))


C, S = 0x8100, 0x88A8


def tags():
    """``{name: (frame, flow key or None, PSN, epoch, tail, DATA)}`` in arrival order; A one C-tag, B an S-tag and a
    C-tag, C a lone S-tag, D two C-tags (each an IPv4 flow, destination QPs chosen for four flow indices at 16
    flows); U1 to U3 tags the program does not take, marked as an early packet of A, C and B would be; an ACK
    behind two tags, marked epoch 1 and tail (not data: it passes)."""
    a, b, c, d = ([(C, 10)], 1, 0x12), ([(S, 20), (C, 21)], 2, 0x412), ([(S, 30)], 3, 0x812), \
        ([(C, 40), (C, 41)], 4, 0x1012)
    rows = {}

    def data(name, flow, psn, epoch=0, tail=0):
        rows[name] = (roce4(flow[0], flow[1], flow[2], psn, epoch, tail), flow, psn, epoch, tail, True)

    def other(name, frame, epoch, tail=0):
        rows[name] = (frame, None, None, epoch, tail, False)
    data("A0", a, 0)
    data("B0", b, 0)
    data("A1", a, 1)
    data("A4", a, 4, 1)                                             # early: buffer 0
    other("U1", roce4([(C, 10), (C, 11), (C, 12)], 1, 0x12, 7, 1), 1)   # three tags
    data("B2", b, 2, 1)                                             # early: buffer 1
    data("A5", a, 5, 1)                                             # joins buffer 0
    data("C0", c, 0)
    other("U2", roce4([(C, 30), (S, 31)], 3, 0x812, 7, 1), 1)       # an inner S-tag
    data("A2", a, 2)                                                # old path: passes
    data("A3", a, 3, 0, 1)                                          # the tail: A3, then A4 and A5
    other("U3", roce4([(0x9100, 20)], 2, 0x412, 7, 1), 1)           # TPID 0x9100
    data("C2", c, 2, 1)                                             # early: buffer 0
    data("D0", d, 0)
    other("ACK", roce4(b[0], 2, 0x412, 1, 1, 1, opcode=ACKNOWLEDGE), 1, 1)
    data("B1", b, 1, 0, 1)                                          # the tail: B1, then B2
    data("A6", a, 6, 1)
    data("D2", d, 2, 1)                                             # early: buffer 1
    data("C1", c, 1, 0, 1)                                          # the tail: C1, then C2
    data("D1", d, 1, 0, 1)                                          # the tail: D1, then D2
    data("B3", b, 3, 1)
    data("C3", c, 3, 1)
    data("D3", d, 3, 1)
    return rows


def ipv6():
    """As :func:`tags` for IPv6: P untagged, Q P's addresses with another destination QP, R one C-tag and P's
    destination QP, S an S-tag and a C-tag; X1 (a hop-by-hop extension header, then UDP) and X4 (version 4 in an
    IPv6 frame) carry P's key and marks an early packet of P would have, X2 is TCP."""
    p, q, r, s = ([], 1, 0x12), ([], 1, 0x412), ([(C, 50)], 3, 0x12), ([(S, 60), (C, 61)], 4, 0x812)
    rows = {}

    def data(name, flow, psn, epoch=0, tail=0):
        rows[name] = (roce6(flow[0], flow[1], flow[2], psn, epoch, tail), flow, psn, epoch, tail, True)

    def other(name, frame, epoch, tail=0):
        rows[name] = (frame, None, None, epoch, tail, False)
    data("P0", p, 0)
    data("Q0", q, 0)
    data("P2", p, 2, 1)                                             # early: buffer 0
    other("X1", roce6([], 1, 0x12, 7, ip=IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrHopByHop(),
                      l4=_bth(NEW, SEND_ONLY, 0x12, 7, 1, 0)), 1)   # would join P's buffer
    data("Q1", q, 1)
    data("R0", r, 0)
    data("P3", p, 3, 1)                                             # joins buffer 0
    data("R2", r, 2, 1)                                             # early: buffer 1
    data("P1", p, 1, 0, 1)                                          # the tail: P1, then P2 and P3
    data("Q2", q, 2)                                                # in order (P's epoch is 1 now, Q's 0)
    other("X2", roce6([], 1, 0, 0, l4=TCP(sport=OLD, dport=4791)), 0)
    data("S0", s, 0)
    data("R1", r, 1, 0, 1)                                          # the tail: R1, then R2
    data("S2", s, 2, 1)                                             # early: buffer 0
    other("X4", roce6([], 1, 0x12, 7, ip=IPv6(version=4, src="fd00::1", dst="fd00::2"),
                      l4=_bth(OLD, SEND_ONLY, 0x12, 7, 0, 0)), 0)   # P is at epoch 1: would open a buffer
    data("S1", s, 1, 0, 1)                                          # the tail: S1, then S2
    data("P4", p, 4, 1)
    data("Q3", q, 3)
    data("R3", r, 3, 1)
    data("S3", s, 3, 1)
    return rows


#: The frames out in the golden order, worked by hand from the rows' comments: a frame leaves as it arrives unless it
#: is held; a tail leaves, then its buffer's packets in arrival order.
OUT = {"selb-reorder-bth-tags": "A0 B0 A1 U1 C0 U2 A2 A3 A4 A5 U3 D0 ACK B1 B2 A6 C1 C2 D1 D2 B3 C3 D3",
       "selb-reorder-bth-ipv6": "P0 Q0 X1 Q1 R0 P1 P2 P3 Q2 X2 S0 R1 R2 X4 S1 S2 P4 Q3 R3 S3"}
#: Counters by hand: items, held, reorders (each tail releasing its buffer), no timeout, full buffer, second reroute,
#: fallback or stale tail.
STATS = {"selb-reorder-bth-tags": [23, 5, 4, 0, 0, 0, 0, 0], "selb-reorder-bth-ipv6": [20, 4, 3, 0, 0, 0, 0, 0]}


def _key(frame, flow):
    """The flow index from the row's own addresses (as built) and destination QP."""
    import ipaddress
    v4 = ipaddress.IPv4Address(f"10.1.0.{flow[1]}").packed + ipaddress.IPv4Address("10.2.0.1").packed
    v6 = ipaddress.IPv6Address(f"fd00::{flow[1]}").packed + ipaddress.IPv6Address("fd00::2").packed
    return crc16((v6 if IPv6 in Ether(frame) else v4) + flow[2].to_bytes(3, "big")) & (PARAMS["n_flows"] - 1)


def write_test(name, rows):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    model = Reorder(**PARAMS)
    names = list(rows)
    frames, events, golden = [], [], []
    for tag, n in enumerate(names):
        frame, flow, _, epoch, tail, data = rows[n]
        item = {"kind": 1 if data else 0, "tag": tag, "flow": _key(frame, flow) if data else 0, "epoch": epoch,
                "tail": tail, "now": 0}
        frames.append(frame)
        events.append({"item": item})
        golden += [names[res["tag"]] for res in model.step(item)]
    assert not model.held()
    keys = {_key(rows[n][0], rows[n][1]) for n in names if rows[n][5]}
    assert len(keys) == len({rows[n][1][1:] for n in names if rows[n][5]}), "the flows must not share an index"
    assert golden == OUT[name].split(), (golden, OUT[name])
    assert model.stats() == STATS[name], model.stats()
    (where / "test.json").write_text(json.dumps({"program": "selb_reorder.p4", "block": "selb-reorder",
                                                 "params": PARAMS, "stats": model.stats(),
                                                 "note": f"hand-picked frames without the harness header "
                                                         f"(make_selb_reorder_bth_tests.py): {OUT[name]}"},
                                                indent=2) + "\n")
    write_events(where / "ctl.jsonl", [])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in selb_reorder_commands(PARAMS)))
    write_pcap(where / "packets_out.pcap", [rows[n][0] for n in OUT[name].split()])
    sys.stdout.write(f"{where}: {len(frames)} frames; counters {model.stats()}\n")


def main():
    write_test("selb-reorder-bth-tags", tags())
    write_test("selb-reorder-bth-ipv6", ipv6())


if __name__ == "__main__":
    main()
