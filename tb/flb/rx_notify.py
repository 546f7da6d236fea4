"""Hand-worked scenarios for the destination side's congestion notification in FLB's receive wire
(`flb-rx-wire`, docs/flb_rx_wire.md, "Congestion notification (the destination side, section 3.2)").

Every expected value here is worked by hand from the datasheets (docs/flb_rx_wire.md, docs/flb_cnm.md,
docs/flb_prevhop.md), in the comments beside each step: the cells of each frame (``ceil((l4_off + udp_len) / 64)``,
saturated at 255), the port and source edge it gives, the port's estimate after each event, the port's set and
the refresh debts, the CNM's ``n``, the previous hop found (or the miss) and the CNM frame's fields. Nothing is
taken from lbpipe's RTL, golden model or protocol constants: the frames are built with scapy (through the test
side's builders in ``tb/lib/packets.py`` and ``tb/flb/rx_frames.py``), flow ids with the test side's own flow hash
(:func:`lbpipe.tb.lib.packets.flow_hash`), and the CNM frames the wire must send with :func:`cnm_out`, from the
datasheet's "CNM frame" table.

A scenario is a list of steps the golden model and the RTL testbench both run, in order (the RTL testbench drains
the wire between steps, so a dequeue comes after every earlier frame's enqueue):

* ``{"op": "ctl", "cmd": {"table", "index", "data"}, "note"}``;
* ``{"op": "frame", "frame", "out", "cnm", "note", "enq"}``: ``out`` is what leaves on ``m_axis``, ``cnm`` the CNM
  frames this frame's enqueue sends on ``m_cnm`` in order; ``enq`` the enqueue as worked by hand (``port``,
  ``cells``, ``flow``, ``src``; None for a frame that is not RoCEv2), which the tests check against scapy's reading
  of the frame;
* ``{"op": "deq", "port", "amount", "cnm", "note"}``: a dequeue on ``deq`` and the CNM frames it sends.

Each scenario stops the clock (table 48) and sets ``now`` explicitly before the steps where aging matters. The
counters are tallied twice: per step (``count=``) and as totals written at the end; :meth:`Scenario.check`
requires both to agree.

How the scenarios meet the datasheet's rules on points that are easy to get wrong:

* Every scenario starts with this switch's MAC 0: the golden model from power-on, the RTL testbench after a reset
  and a table 51 write of 0 (the MAC is kept across reset; 0 is an individual address, so it is taken). ``odd``
  sends its first CNM frame before its own table 51 write, so that frame's source MAC is 0.
* With ``n_ports`` 1 every enqueue goes to port 0 (``odd``); a dequeue naming port 1 is still rejected.
* An enqueue rejected for its port records its flow's previous hop (the datasheet's step 1): ``shift`` sends a
  frame to its forged port 3 whose flow id collides with a flow in port 1's set, and that flow's later refresh and
  release go to the forged frame's hop.
* Table 50 takes ``data mod 2^q_bits`` first and ignores a result of 0: ``shift`` writes ``2^(q_bits+1)`` (K stays).
"""

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from lbpipe.tb.flb.rx_frames import cleared, cnm_frame, mark
from lbpipe.tb.lib.packets import RC_SEND_ONLY, flow_hash, roce_cnp, roce_data

__all__ = ["CNM_ETHERTYPE", "PARAMETERS", "COUNTER_NAMES", "Scenario", "mac_int", "cnm_out", "enq", "notify_scenarios"]

#: The CNM frame's EtherType (docs/flb_rx_wire.md, "CNM frame").
CNM_ETHERTYPE = 0x88B6
#: Every parameter of the datasheet's "Parameters" table (each scenario gives all of them).
PARAMETERS = ("n_edges", "n_paths", "n_flows", "n_ports", "time_bits", "delay_bits", "edge_shift", "edge",
              "tick_cycles", "n_slots", "q_bits", "threshold", "port_shift", "hop_timeout")
#: The datasheet's counters (STATUS_0..16), by index.
COUNTER_NAMES = ("samples measured", "bases set", "samples rejected", "piggybacks sent", "piggybacks refused",
                 "CNMs taken", "CNM frames refused", "S and P", "congestion CNMs", "release CNMs", "set full",
                 "clamped", "port rejected", "CNM frames sent", "no previous hop", "previous hop aged",
                 "group source MAC")

# Counter indices, the datasheet's "Counters" table.
MEASURED, BASES, DLY, CNM_TAKEN, CNM_REFUSED = 0, 1, 3, 5, 6
JOIN, RELEASE, FULL, CLAMP, REJECTED, SENT, NO_HOP, AGED, GROUP = 8, 9, 10, 11, 12, 13, 14, 15, 16


def mac_int(text):
    """A MAC written ``aa:bb:cc:dd:ee:ff`` as table 51 takes it: 48 bits, the first octet most significant."""
    return int(text.replace(":", ""), 16)


def cnm_out(*, dst, src, cong, to, frm, flow, cp, n):
    """The CNM frame the wire sends (docs/flb_rx_wire.md, "The CNM frame sent"): destination MAC ``dst`` (the
    flow's previous hop), source MAC ``src`` (this switch's, table 51), EtherType 0x88B6, then byte 14 the version
    1, byte 15 the flags (bit 0 ``cong``, bits 7..1 zero), bytes 16..17 ``to`` (the flow's source edge), 18..19
    ``frm`` (this edge, table 49), 20..21 ``flow``, 22 ``cp``, 23 ``n``, all big-endian; zeros to 60 bytes."""
    body = bytes([1, cong & 1, to >> 8 & 0xFF, to & 0xFF, frm >> 8 & 0xFF, frm & 0xFF, flow >> 8 & 0xFF, flow & 0xFF,
                  cp, n])
    frame = bytes(Ether(dst=dst, src=src, type=CNM_ETHERTYPE) / Raw(body))
    return frame + bytes(60 - len(frame))


# -- frames ------------------------------------------------------------------------------------------------------------

def _send(src, dst, qpn, payload, mac, *, vlan=None, sport=0x4000, trailer=0):
    """A RoCEv2 SEND ONLY of ``payload`` bytes (a multiple of 4: no pad), from the previous hop ``mac``, then
    ``trailer`` zero bytes after the IP packet. UDP length 8 + 12 (BTH) + payload + 4 (ICRC) = 24 + payload."""
    frame = bytes(roce_data(src, dst, sport, qpn, 1, opcode=RC_SEND_ONLY, payload_len=payload, src_mac=mac,
                            vlan=vlan))
    return frame + bytes(trailer)


def _announcing(frame, udp_len):
    """An untagged IPv4 RoCEv2 frame whose headers announce a UDP length of ``udp_len`` (and an IP total length of
    20 + ``udp_len``) while the frame itself stays as it is: more than 128 bytes, so the wire judges it on its
    headers (docs/flb_rx_wire.md, "FLB marks", the parser's cut-through mode). IPv4 header checksum recomputed."""
    data = bytearray(frame)
    data[16:18] = (20 + udp_len).to_bytes(2, "big")
    data[24:26] = b"\0\0"
    words = sum(int.from_bytes(data[k:k + 2], "big") for k in range(14, 34, 2))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    data[24:26] = (~words & 0xFFFF).to_bytes(2, "big")
    data[38:40] = udp_len.to_bytes(2, "big")
    return bytes(data)


def _udp(src, dst, size, mac):
    """A UDP datagram to port 53 (not RoCEv2), ``size`` bytes in all."""
    frame = bytes(Ether(dst="02:00:00:00:00:02", src=mac) / IP(src=src, dst=dst) / UDP(sport=1234, dport=53, chksum=0)
                  / Raw(bytes(size - 42)))
    assert len(frame) == size
    return frame


# -- scenarios ---------------------------------------------------------------------------------------------------------

class Scenario:
    """One hand-worked scenario.

    Members
    -------
    name : str
    params : dict
        Every ``FlbRxWire`` / ``FlbRxWireModel`` parameter.
    steps : list of dict
        ``ctl``, ``frame`` and ``deq`` steps (module docstring).
    totals : dict
        Counter index -> value at the end, all 17 (STATUS_0..16).
    cnm_fields : list of (bytes, dict)
        Every expected CNM frame with the fields it was built from, for the builder's self-check.
    """

    def __init__(self, name, params):
        missing = set(PARAMETERS) ^ set(params)
        if missing:
            raise ValueError(f"{name}: parameters missing or unknown: {sorted(missing)}")
        self.name, self.params, self.steps, self.totals, self.cnm_fields = name, dict(params), [], {}, []
        self._tally = dict.fromkeys(range(len(COUNTER_NAMES)), 0)

    def _cnms(self, cnms):
        out = []
        for fields in cnms:
            frame = cnm_out(**fields)
            self.cnm_fields.append((frame, dict(fields)))
            out.append(frame)
        return out

    def _count(self, count):
        for index in count:
            self._tally[index] += 1

    def ctl(self, table, index, data, note):
        self.steps.append({"op": "ctl", "cmd": {"table": table, "index": index, "data": data}, "note": note})

    def clock(self, now, note, *, data=None):
        """Table 48 index 0: ``now`` set (``data`` overrides what is written, for junk above ``time_bits``)."""
        self.ctl(48, 0, now if data is None else data, note)

    def frame(self, frame, note, *, enq, out=None, cnm=(), count=()):
        """A frame; ``enq`` the enqueue it makes, worked by hand (``port``, ``cells``, ``flow``, ``src``), or None
        (not RoCEv2); ``out`` what leaves on ``m_axis`` (the frame itself by default); ``cnm`` the CNM frames'
        fields (:func:`cnm_out`'s keywords); ``count`` the counter indices it moves."""
        self.steps.append({"op": "frame", "frame": frame, "out": frame if out is None else out,
                           "cnm": self._cnms(cnm), "note": note, "enq": enq})
        self._count(count)

    def deq(self, port, amount, note, *, cnm=(), count=()):
        self.steps.append({"op": "deq", "port": port, "amount": amount, "cnm": self._cnms(cnm), "note": note})
        self._count(count)

    def check(self, totals):
        """The totals written by hand must equal the per-step tallies, and STATUS_13 the CNM frames listed."""
        totals = dict(totals)
        if set(totals) != set(range(len(COUNTER_NAMES))):
            raise AssertionError(f"{self.name}: totals must give all 17 counters")
        if totals != self._tally:
            raise AssertionError(f"{self.name}: steps tally {self._tally}, totals written {totals}")
        listed = sum(len(s["cnm"]) for s in self.steps if s["op"] != "ctl")
        if listed != totals[SENT]:
            raise AssertionError(f"{self.name}: {listed} CNM frames listed, STATUS_13 written {totals[SENT]}")
        self.totals = totals
        return self


def enq(port, cells, flow, src):
    """An enqueue as worked by hand: its egress port, cells, flow id and source edge."""
    return {"port": port, "cells": cells, "flow": flow, "src": src}


def _totals(**named):
    """All 17 counters, 0 unless named (``c8=5``)."""
    out = dict.fromkeys(range(len(COUNTER_NAMES)), 0)
    for key, value in named.items():
        out[int(key[1:])] = value
    return out


def _small():
    """n_edges 3, n_paths 4, n_flows 256 (8-bit flows), n_ports 3 (a 2-bit port field: port 3 is out of range),
    n_slots 2, q_bits 8 (estimates 0..255), K 5 cells, port_shift 0 (the host number's low 2 bits), 12-bit ticks,
    hop_timeout 100, edge_shift 8 (10.0.<edge>.<host>: 2 bits from bit 8), this edge 2, the clock stopped from
    reset (tick_cycles 0).

    Cells of an untagged IPv4 SEND ONLY with payload P: l4_off 34, udp_len 24 + P, so ceil((58 + P) / 64); with one
    VLAN tag l4_off 38: ceil((62 + P) / 64)."""
    sc = Scenario("small", dict(n_edges=3, n_paths=4, n_flows=256, n_ports=3, time_bits=12, delay_bits=10,
                                edge_shift=8, edge=2, tick_cycles=0, n_slots=2, q_bits=8, threshold=5, port_shift=0,
                                hop_timeout=100))
    sw1, sw2 = "02:5a:00:00:00:02", "02:5a:00:00:00:22"
    ha, ha2, hb, hc, hd = "02:00:00:00:0a:01", "02:00:00:00:0a:02", "02:00:00:00:0b:01", "02:00:00:00:0c:01", \
        "02:00:00:00:0d:01"
    hf, grp = "02:00:00:00:0f:02", "03:00:00:00:0f:01"          # grp: first octet odd, the group bit
    d9 = "10.0.2.9"                                               # host 9 = 0b1001: port 1
    # Flows (flow id: the low 8 bits of the test side's CRC-16; source edge: bits 9..8 of the source address).
    fa = flow_hash("10.0.1.5", d9, 0xA01) & 0xFF                  # 0xCEFF -> 0xFF, edge 1, port 1
    fb = flow_hash("10.0.0.7", d9, 0xB02) & 0xFF                  # 0xA928 -> 0x28, edge 0, port 1
    fc = flow_hash("10.0.1.6", "10.0.2.13", 0xC03) & 0xFF         # 0x469F -> 0x9F, edge 1, host 13 & 3 = port 1
    fd = flow_hash("10.0.0.8", "10.0.2.8", 0xD04) & 0xFF          # 0xCC3E -> 0x3E, edge 0, host 8 & 3 = port 0
    fe = flow_hash("10.0.1.9", "10.0.2.3", 0xE05) & 0xFF          # edge 1, host 3: port 3 >= 3, rejected
    ff = flow_hash("10.0.0.10", "10.0.2.10", 0xF06) & 0xFF        # 0xE8D0 -> 0xD0, edge 0, host 10 & 3 = port 2
    fg = flow_hash("10.0.0.11", "10.0.2.5", 0x107) & 0xFF         # 0x48C3 -> 0xC3, edge 0, host 5 & 3 = port 1
    assert (fa, fb, fc, fd, ff, fg) == (0xFF, 0x28, 0x9F, 0x3E, 0xD0, 0xC3)

    def a(payload, mac, **kw):
        return _send("10.0.1.5", d9, 0xA01, payload, mac, **kw)

    def b(payload, **kw):
        return _send("10.0.0.7", d9, 0xB02, payload, hb, **kw)

    def c(payload):
        return _send("10.0.1.6", "10.0.2.13", 0xC03, payload, hc)

    def d(payload):
        return _send("10.0.0.8", "10.0.2.8", 0xD04, payload, hd)

    def f(payload, **kw):
        return _send("10.0.0.10", "10.0.2.10", 0xF06, payload, hf, **kw)

    def g(payload):
        return _send("10.0.0.11", "10.0.2.5", 0x107, payload, grp)

    def cnm(dst, src, cong, to, frm, flow, n, cp=1):
        return {"dst": dst, "src": src, "cong": cong, "to": to, "frm": frm, "flow": flow, "cp": cp, "n": n}

    sc.ctl(48, 1, 0, "clock stopped")
    sc.clock(0, "now 0")
    sc.ctl(51, 0, mac_int(sw1), "this switch's MAC: sw1")
    # K 5. Port 1 estimate q1, set S1 (slot: flow), debts; q0, q2 likewise.
    sc.frame(a(0, ha, trailer=2), "A, 60 bytes: headers say 34 + 24 = 58 -> 1 cell (the 2 trailer bytes are not "
             "counted); q1 1 < K; A recorded (ha, 0)", enq=enq(1, 1, fa, 1))
    sc.frame(b(68), "B, 126 bytes: 58 + 68 = 126 -> 2 cells; q1 3", enq=enq(1, 2, fb, 0))
    sc.frame(_udp("10.0.1.5", d9, 300, ha), "UDP to port 53, 300 bytes, to host 9: not RoCEv2, not counted; q1 3",
             enq=None)
    inbound = cnm_frame(to=2, frm=1, flow=0x1234, cp=2, n=3, cong=1)
    sc.frame(inbound, "a CNM frame for this edge (to 2, from 1 < 3, cp 2 < 3, n 3): taken on cnm, passes unchanged, "
             "not counted in the estimate; q1 3", enq=None, count=[CNM_TAKEN])
    sc.frame(a(4, ha, vlan=5), "A behind VLAN 5: l4_off 38, 38 + 28 = 66 -> 2 cells; q1 5 >= K: A joins slot 0, "
             "n 1; A recorded (ha, 0), then looked up: hit", enq=enq(1, 2, fa, 1), count=[JOIN, SENT],
             cnm=[cnm(ha, sw1, 1, 1, 2, fa, 1)])
    sc.frame(b(240), "B, 298 bytes: 58 + 240 = 298 -> 5 cells; q1 10: B joins slot 1, n 2; A now owes a refresh",
             enq=enq(1, 5, fb, 0), count=[JOIN, SENT], cnm=[cnm(hb, sw1, 1, 0, 2, fb, 2)])
    sc.frame(d(16), "D to port 0, 74 bytes -> 2 cells; q0 2 < K, no CNM of its own: pays A's refresh (port 1 slot "
             "0): cong 1, n 2 (port 1's count), cp 1 (A's port, not D's)", enq=enq(0, 2, fd, 0), count=[SENT],
             cnm=[cnm(ha, sw1, 1, 1, 2, fa, 2)])
    sc.frame(c(4), "C, 62 bytes -> 1 cell; q1 11 >= K, C not in the set, both slots taken: set full, no CNM; no "
             "debt left", enq=enq(1, 1, fc, 1), count=[FULL])
    sample = mark(_send("10.0.1.5", d9, 0xA01, 16, ha, sport=0x1235), s=1, value=0x0FF0)
    sc.frame(sample, "A, S-marked (edge 1, path 0x1235 & 3 = 1: in range, its first sample sets the base): a "
             "RoCEv2 frame, counted: 74 bytes -> 2 cells; q1 13; A already in the set: nothing; leaves cleared",
             enq=enq(1, 2, fa, 1), out=cleared(sample), count=[MEASURED, BASES])
    sc.clock(60, "now 60")
    sc.frame(a(4, ha2), "A from another hop (ha2), 62 bytes -> 1 cell; q1 14; A recorded (ha2, 60)",
             enq=enq(1, 1, fa, 1))
    sc.deq(1, 9, "q1 14 - 9 = 5 >= K: nothing (no debt owed)")
    sc.deq(1, 1, "q1 4 < K: releases slot 0, A: cong 0, n 2 (the count before); A's last hop ha2 (age 0); B now "
           "owes", count=[RELEASE, SENT], cnm=[cnm(ha2, sw1, 0, 1, 2, fa, 2)])
    sc.deq(3, 1, "port 3 >= 3: rejected, counted; a rejected event pays no debt (B still owes)", count=[REJECTED])
    sc.frame(_send("10.0.1.9", "10.0.2.3", 0xE05, 16, ha), "E to host 3: port 3 rejected, counted, pays nothing; "
             "the frame passes", enq=enq(3, 2, fe, 1), count=[REJECTED])
    sc.clock(99, "now 99: B recorded at 0 is 99 ticks old")
    sc.deq(0, 1, "q0 1 < K, set empty, no CNM of its own: pays B's refresh (port 1 slot 1): n 1 (B alone); age 99 "
           "< 100: hit hb", count=[SENT], cnm=[cnm(hb, sw1, 1, 0, 2, fb, 1)])
    sc.clock(100, "now 100: B's record 100 ticks old, aged")
    sc.deq(1, 1, "q1 3 < K: releases B (n 1); lookup: 100 ticks old, a miss (aged), no frame",
           count=[RELEASE, AGED])
    sc.deq(1, 7, "q1 3 - 7 below 0: clamped to 0, counted; set empty, no debt", count=[CLAMP])
    sc.ctl(50, 0, 0x103, "K = 0x103 mod 2^8 = 3")
    sc.ctl(50, 0, 0, "K 0: ignored (K stays 3)")
    sc.ctl(51, 0, mac_int("03:5a:00:00:00:03"), "a group MAC: ignored (sw1 stays)")
    sc.ctl(51, 0, 1 << 48 | mac_int("02:5a:00:00:00:04"), "wider than 48 bits: ignored (sw1 stays)")
    sc.frame(g(68), "G from a group source MAC, 126 bytes -> 2 cells; q1 2 < 3; not recorded, counted",
             enq=enq(1, 2, fg, 0), count=[GROUP])
    sc.frame(g(4), "G again, 62 bytes -> 1 cell; q1 3 >= K 3: G joins slot 0, n 1; not recorded, and never was: "
             "a miss (no entry), no frame", enq=enq(1, 1, fg, 0), count=[GROUP, JOIN, NO_HOP])
    sc.frame(f(0, trailer=2), "F to port 2, 60 bytes -> 1 cell; q2 1; no debt owed: nothing", enq=enq(2, 1, ff, 0))
    sc.frame(c(16), "C, 74 bytes -> 2 cells; q1 5: C joins slot 1, n 2; hit hc (recorded now); G owes",
             enq=enq(1, 2, fc, 1), count=[JOIN, SENT], cnm=[cnm(hc, sw1, 1, 1, 2, fc, 2)])
    sc.frame(f(4), "F, 62 bytes -> 1 cell; q2 2 < K: pays G's refresh (n 2, cp 1); G has no entry: a miss",
             enq=enq(2, 1, ff, 0), count=[NO_HOP])
    sc.ctl(49, 0, 0x1_0001, "this edge: low 16 bits, 1 (the CNM frames' from)")
    sc.ctl(51, 0, mac_int(sw2), "this switch's MAC: sw2")
    sc.frame(b(0, trailer=2), "B, 60 bytes -> 1 cell; q1 6; set {G, C} full; no debt", enq=enq(1, 1, fb, 0),
             count=[FULL])
    sc.deq(1, 3, "q1 3 >= K 3: nothing")
    sc.deq(1, 1, "q1 2 < K: releases slot 0, G (n 2); G has no entry: a miss; C owes", count=[RELEASE, NO_HOP])
    sc.frame(d(4), "D, 62 bytes -> 1 cell; q0 2 < K: pays C's refresh: n 1, from 1, source MAC sw2, hit hc",
             enq=enq(0, 1, fd, 0), count=[SENT], cnm=[cnm(hc, sw2, 1, 1, 1, fc, 1)])
    released = {"dst": hc, "src": sw2, "cong": 0, "to": 1, "frm": 1, "flow": fc, "cp": 1, "n": 1}
    sc.deq(1, 1, "q1 1 < K: releases C (n 1), hit hc", count=[RELEASE, SENT], cnm=[released])
    sc.frame(cnm_out(**released), "the release just sent, back in: to 1 is now this edge, from 1 < 3, cp 1, n 1: "
             "taken; not counted in the estimate (q1 1)", enq=None, count=[CNM_TAKEN])
    sc.frame(a(68, grp), "A from a group source MAC, 126 bytes -> 2 cells; q1 3 >= K: A joins slot 0, n 1; not "
             "recorded, so the lookup finds A's earlier record (ha2 at 60, 40 ticks old): hit ha2",
             enq=enq(1, 2, fa, 1), count=[GROUP, JOIN, SENT], cnm=[cnm(ha2, sw2, 1, 1, 1, fa, 1)])
    # Joins: A, B, G, C, A = 5; releases A, B, G, C = 4; refreshes A, B, G, C (not counted); 13 CNMs in all: 9
    # frames sent, 3 with no entry (G), 1 aged (B).
    return sc.check(_totals(c0=1, c1=1, c5=2, c8=5, c9=4, c10=2, c11=1, c12=2, c13=9, c14=3, c15=1, c16=3))


def _defaults():
    """The defaults (16 edges, 8 paths, 65,536 flows, 8 ports, 16-bit ticks, 4 slots, 16-bit estimates, K 512, this
    edge 0, port_shift 0, hop_timeout 4,096), K set to 4 cells by table 50; IPv6 and VLAN-tagged frames.

    Cells: untagged IPv4 ceil((58 + P) / 64); VLAN IPv4 (l4_off 38) ceil((62 + P) / 64); IPv6 (l4_off 54)
    ceil((78 + P) / 64); VLAN IPv6 (l4_off 58) ceil((82 + P) / 64). Port: the address's low 3 bits (IPv6: of the
    128-bit address); source edge: bits 11..8. The clock is stopped at 0xFFF0 first, so later ages cross the wrap."""
    sc = Scenario("defaults", dict(n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16,
                                   edge_shift=8, edge=0, tick_cycles=64, n_slots=4, q_bits=16, threshold=512,
                                   port_shift=0, hop_timeout=4096))
    sw = "02:5b:00:00:00:01"
    hp, hq, hr, hs, hs2, ht, hv, hw, hx, hm, hn = (f"02:00:00:00:10:{k:02x}" for k in range(1, 12))
    fp = flow_hash("fd00::105", "fd00::209", 0x100)     # edge 0x105 >> 8 = 1; port 0x209 & 7 = 1
    fq = flow_hash("10.0.3.4", "10.0.2.9", 0x200)       # VLAN 7; edge 3; port 9 & 7 = 1
    fr = flow_hash("fd00::a07", "fd00::211", 0x300)     # VLAN 9; edge 10; port 0x211 & 7 = 1
    fs = flow_hash("10.0.15.2", "10.0.2.17", 0x400)     # edge 15; port 17 & 7 = 1
    ft = flow_hash("10.0.5.5", "10.0.2.25", 0x500)      # edge 5; port 25 & 7 = 1
    fv = flow_hash("10.0.6.1", "10.0.2.8", 0x600)       # edge 6; port 0
    fw = flow_hash("10.0.4.1", "10.0.2.3", 0x700)       # edge 4; port 3
    fx = flow_hash("fd00::701", "fd00::20b", 0x800)     # edge 7; port 0x20b & 7 = 3
    fm = flow_hash("10.0.9.1", "10.0.2.16", 0x900)      # edge 9; port 16 & 7 = 0
    fn = flow_hash("10.0.12.1", "10.0.2.9", 0xA00)      # a CNP: edge 12; port 1
    assert len({fp, fq, fr, fs, ft, fv, fw, fx, fm, fn}) == 10

    def p(payload):
        return _send("fd00::105", "fd00::209", 0x100, payload, hp)

    def q(payload):
        return _send("10.0.3.4", "10.0.2.9", 0x200, payload, hq, vlan=7)

    def r(payload):
        return _send("fd00::a07", "fd00::211", 0x300, payload, hr, vlan=9)

    def s(payload, mac):
        return _send("10.0.15.2", "10.0.2.17", 0x400, payload, mac)

    def v(payload):
        return _send("10.0.6.1", "10.0.2.8", 0x600, payload, hv)

    def cnm(dst, cong, to, flow, cp, n):
        return {"dst": dst, "src": sw, "cong": cong, "to": to, "frm": 0, "flow": flow, "cp": cp, "n": n}

    sc.ctl(48, 1, 0, "clock stopped")
    sc.clock(0xFFF0, "now 0xFFF0")
    sc.ctl(51, 0, mac_int(sw), "this switch's MAC")
    sc.ctl(50, 0, 4, "K 4 cells")
    sc.ctl(50, 0, 0, "K 0: ignored (K stays 4)")
    # Port 1: q1, set slots 0..3, debts (port x 4 + slot: port 1's are 4..7, port 3's 12..15).
    sc.frame(q(0), "Q (VLAN 7): 38 + 24 = 62 -> 1 cell; q1 1", enq=enq(1, 1, fq, 3))
    sc.frame(r(0), "R (VLAN 9, IPv6): 58 + 24 = 82 -> 2 cells; q1 3 < 4", enq=enq(1, 2, fr, 10))
    sc.frame(p(0), "P (IPv6): 54 + 24 = 78 -> 2 cells; q1 5 >= 4: P joins slot 0, n 1; hit hp",
             enq=enq(1, 2, fp, 1), count=[JOIN, SENT], cnm=[cnm(hp, 1, 1, fp, 1, 1)])
    sc.frame(q(200), "Q, 262 bytes: 62 + 200 = 262 -> 5 cells; q1 10: Q joins slot 1, n 2; debts {P}",
             enq=enq(1, 5, fq, 3), count=[JOIN, SENT], cnm=[cnm(hq, 1, 3, fq, 1, 2)])
    sc.frame(r(0), "R, 2 cells; q1 12: R joins slot 2, n 3; debts {P, Q}", enq=enq(1, 2, fr, 10),
             count=[JOIN, SENT], cnm=[cnm(hr, 1, 10, fr, 1, 3)])
    sc.frame(s(136, hs), "S, 194 bytes: 58 + 136 = 194 -> 4 cells; q1 16: S joins slot 3, n 4; debts {P, Q, R}",
             enq=enq(1, 4, fs, 15), count=[JOIN, SENT], cnm=[cnm(hs, 1, 15, fs, 1, 4)])
    big = _announcing(_send("10.0.4.1", "10.0.2.3", 0x700, 200, hw), 16400)
    sc.frame(big, "W to port 3, 258 bytes whose headers announce UDP length 16,400: 34 + 16,400 = 16,434 -> 257 "
             "cells, saturated to 255; q3 255 >= 4: W joins port 3 slot 0, n 1", enq=enq(3, 255, fw, 4),
             count=[JOIN, SENT], cnm=[cnm(hw, 1, 4, fw, 3, 1)])
    sc.frame(_send("fd00::701", "fd00::20b", 0x800, 0, hx), "X (IPv6) to port 3: 2 cells; q3 257: X joins slot 1, "
             "n 2; debts {P, Q, R} on port 1, {W} on port 3", enq=enq(3, 2, fx, 7), count=[JOIN, SENT],
             cnm=[cnm(hx, 1, 7, fx, 3, 2)])
    sc.frame(_send("10.0.5.5", "10.0.2.25", 0x500, 4, ht), "T, 62 bytes -> 1 cell; q1 17; set full; no CNM of its "
             "own: pays the lowest debt, P (4): n 4", enq=enq(1, 1, ft, 5), count=[FULL, SENT],
             cnm=[cnm(hp, 1, 1, fp, 1, 4)])
    sc.frame(v(16), "V to port 0, 74 bytes -> 2 cells; q0 2 < 4: pays Q (5), n 4", enq=enq(0, 2, fv, 6),
             count=[SENT], cnm=[cnm(hq, 1, 3, fq, 1, 4)])
    piggy = mark(_send("10.0.9.1", "10.0.2.16", 0x900, 0, hm, trailer=2), p=1, path=2, value=100)
    sc.frame(piggy, "M, P-marked (edge 9, path 2: sent on dly), 60 bytes: 58 -> 1 cell; q0 3 < 4: pays R (6), n 4; "
             "leaves cleared", enq=enq(0, 1, fm, 9), out=cleared(piggy), count=[DLY, SENT],
             cnm=[cnm(hr, 1, 10, fr, 1, 4)])
    sc.deq(3, 252, "q3 257 - 252 = 5 >= 4; pays W (12): n 2, cp 3", count=[SENT], cnm=[cnm(hw, 1, 4, fw, 3, 2)])
    sc.deq(3, 1, "q3 4 >= 4; no debt: nothing")
    sc.deq(3, 1, "q3 3 < 4: releases slot 0, W (n 2); debts on port 3 {X}", count=[RELEASE, SENT],
           cnm=[cnm(hw, 0, 4, fw, 3, 2)])
    sc.deq(3, 3, "q3 0 < 4: releases X (n 1); X's debt goes with it", count=[RELEASE, SENT],
           cnm=[cnm(hx, 0, 7, fx, 3, 1)])
    sc.deq(3, 1, "q3 0 - 1: clamped, counted; no debt (X's went): nothing", count=[CLAMP])
    udp6 = Ether(dst="02:00:00:00:00:02", src=hp) / IPv6(src="fd00::105", dst="fd00::209") / UDP(sport=1, dport=53)
    sc.frame(bytes(udp6 / Raw(bytes(200))), "IPv6 UDP to port 53, to port 1's host: not RoCEv2, not counted",
             enq=None)
    sc.frame(cnm_frame(to=0, frm=15, flow=0xBEEF, cp=7, n=1, cong=1), "a CNM frame for this edge: taken, not "
             "counted in the estimate", enq=None, count=[CNM_TAKEN])
    sc.frame(cnm_frame(to=0, frm=15, flow=0xBEEF, cp=7, n=1, cong=1, vlan=3), "a tagged CNM frame: not a CNM frame, "
             "not RoCEv2: nothing", enq=None)
    sc.frame(bytes(roce_cnp("10.0.12.1", "10.0.2.9", 0x4000, 0xA00, src_mac=hn)), "a CNP (RoCEv2): UDP 8 + 12 + 16 "
             "+ 4 = 40, 34 + 40 = 74 -> 2 cells; q1 19; set full, no debt", enq=enq(1, 2, fn, 12), count=[FULL])
    sc.clock(0x0F00, "now 0x0F00: the records made at 0xFFF0 are 0x0F00 + 0x10 = 3,856 ticks old (< 4,096)")
    sc.deq(1, 15, "q1 19 - 15 = 4 >= 4: nothing")
    sc.deq(1, 1, "q1 3 < 4: releases slot 0, P: n 4; hit hp (3,856 ticks old); debts {Q, R, S}",
           count=[RELEASE, SENT], cnm=[cnm(hp, 0, 1, fp, 1, 4)])
    sc.frame(p(0), "P again, 2 cells; q1 5 >= 4, P not in the set: a new crossing, P takes the lowest free slot, "
             "0, n 4; recorded (hp, 0x0F00); debts still {Q, R, S}", enq=enq(1, 2, fp, 1), count=[JOIN, SENT],
             cnm=[cnm(hp, 1, 1, fp, 1, 4)])
    sc.frame(s(4, hs2), "S from another hop (hs2), 1 cell; q1 6; S in the set: pays Q (5), n 4; Q 3,856 ticks old: "
             "hit hq; S recorded (hs2, 0x0F00)", enq=enq(1, 1, fs, 15), count=[SENT], cnm=[cnm(hq, 1, 3, fq, 1, 4)])
    sc.clock(0x0FF0, "now 0x0FF0: records of 0xFFF0 are 0x1000 = 4,096 ticks old (aged), those of 0x0F00 240")
    sc.deq(1, 2, "q1 4 >= 4: pays R (6), n 4; R aged: a miss", count=[AGED])
    sc.deq(1, 1, "q1 3 < 4: releases slot 0, P (n 4); hit hp (240 ticks); debts {Q, R, S}", count=[RELEASE, SENT],
           cnm=[cnm(hp, 0, 1, fp, 1, 4)])
    sc.deq(1, 1, "q1 2: releases slot 1, Q (n 3); aged: a miss; debts {R, S}", count=[RELEASE, AGED])
    sc.deq(1, 1, "q1 1: releases slot 2, R (n 2); aged: a miss; debts {S}", count=[RELEASE, AGED])
    sc.frame(v(4), "V, 62 bytes -> 1 cell; q0 4 >= 4: V joins port 0 slot 0, n 1 (its own CNM: S's debt waits)",
             enq=enq(0, 1, fv, 6), count=[JOIN, SENT], cnm=[cnm(hv, 1, 6, fv, 0, 1)])
    sc.deq(0, 0, "amount 0: q0 stays 4 >= 4; pays S (7): n 1 (S alone on port 1), cp 1; hit hs2 (the newer hop)",
           count=[SENT], cnm=[cnm(hs2, 1, 15, fs, 1, 1)])
    sc.deq(1, 1, "q1 0: releases S (n 1), hit hs2", count=[RELEASE, SENT], cnm=[cnm(hs2, 0, 15, fs, 1, 1)])
    sc.deq(1, 1, "q1 0 - 1: clamped; nothing", count=[CLAMP])
    # Joins P, Q, R, S, W, X, P, V = 8; releases W, X, P, P, Q, R, S = 7; refreshes P, Q, R, W, Q, R, S = 7;
    # 22 CNMs: 19 frames, 3 aged.
    return sc.check(_totals(c3=1, c5=1, c8=8, c9=7, c10=2, c11=2, c13=19, c15=3))


def _odd():
    """n_edges 5 (a 3-bit edge field from bit 16: 10.<edge>.x.y), n_paths 6, n_flows 2 (a 1-bit flow: flows
    collide), n_ports 1 (every enqueue goes to port 0 whatever its address, so port_shift 8 is never read; the
    ``deq`` port field is still 1 bit wide, and a dequeue naming port 1 is rejected), n_slots 1 (no debts ever:
    n_slots - 1 = 0), q_bits 8, K 3, 8-bit ticks (wrap 256), hop_timeout 10, this edge 4. J's destination has an
    odd third octet and every destination an odd host number: the address's bit at port_shift, or at bit 0, would
    name port 1 (rejected)."""
    sc = Scenario("odd", dict(n_edges=5, n_paths=6, n_flows=2, n_ports=1, time_bits=8, delay_bits=4, edge_shift=16,
                              edge=4, tick_cycles=64, n_slots=1, q_bits=8, threshold=3, port_shift=8,
                              hop_timeout=10))
    sw = "02:5c:00:00:00:04"
    hx, hy, hy2, hz, hk, hj = (f"02:00:00:00:20:{k:02x}" for k in range(1, 7))
    fx = flow_hash("10.1.0.5", "10.9.4.7", 0x101) & 1       # edge 1; third octet 4: port 0
    fy = flow_hash("10.3.2.1", "10.9.6.3", 0x102) & 1       # edge 3; port 0
    fz = flow_hash("10.2.0.9", "10.9.8.5", 0x101) & 1       # edge 2; port 0; the same flow id as Y
    fk = flow_hash("10.12.0.3", "10.9.2.1", 0x101) & 1      # 12 & 7 = edge 4; port 0; the same id as X
    fj = flow_hash("10.1.0.5", "10.9.5.7", 0x102) & 1       # third octet 5, but one port: port 0; flow 0, whose
    assert (fx, fy, fz, fk, fj) == (0, 1, 1, 0, 0)          # record X renews before flow 0 is looked up

    def cnm(dst, src, cong, to, frm, flow):
        return {"dst": dst, "src": src, "cong": cong, "to": to, "frm": frm, "flow": flow, "cp": 0, "n": 1}

    sc.ctl(48, 1, 0, "clock stopped")
    sc.clock(250, "now 250")
    # No table 51 write of its own yet: this switch's MAC is 0 (power-on, or the testbench's write of 0).
    sc.frame(_send("10.1.0.5", "10.9.4.7", 0x101, 68, hx), "X, 126 bytes -> 2 cells; q0 2 < 3; X (flow 0) recorded "
             "(hx, 250)", enq=enq(0, 2, fx, 1))
    sc.frame(_send("10.3.2.1", "10.9.6.3", 0x102, 0, hy, trailer=2), "Y, 60 bytes: 58 -> 1 cell; q0 3 >= 3: flow "
             "1 joins the one slot, n 1; to 3; hit hy; source MAC 0 (table 51 not written yet)",
             enq=enq(0, 1, fy, 3), count=[JOIN, SENT], cnm=[cnm(hy, "00:00:00:00:00:00", 1, 3, 4, fy)])
    sc.ctl(51, 0, mac_int(sw), "this switch's MAC")
    sc.frame(_send("10.1.0.5", "10.9.4.7", 0x101, 4, hx), "X, 1 cell; q0 4; flow 0 not in the set, the one slot "
             "taken: set full", enq=enq(0, 1, fx, 1), count=[FULL])
    sc.frame(_send("10.1.0.5", "10.9.5.7", 0x102, 16, hj), "J to 10.9.5.7 (flow 0, edge 1), 74 bytes -> 2 cells; "
             "one port: port 0 (the third octet's odd bit not read); q0 6; flow 0 not in the set, the one slot "
             "taken: set full; flow 0 recorded (hj, 250)", enq=enq(0, 2, fj, 1), count=[FULL])
    sc.deq(1, 1, "port 1 (the field's one bit) >= 1: rejected", count=[REJECTED])
    sc.frame(_udp("10.1.0.5", "10.9.4.7", 100, hx), "UDP to port 53: not counted", enq=None)
    sc.frame(cnm_frame(to=4, frm=1, flow=3, cp=0, n=1, cong=1), "a CNM frame for edge 4: taken", enq=None,
             count=[CNM_TAKEN])
    sc.clock(3, "now 0x103 -> low 8 bits 3: Y recorded at 250 is (3 - 250) mod 256 = 9 ticks old", data=0x103)
    sc.deq(0, 3, "q0 6 - 3 = 3 >= 3: nothing")
    sc.deq(0, 1, "q0 2 < 3: releases flow 1 (n 1, to 3); 9 < 10: hit hy", count=[RELEASE, SENT],
           cnm=[cnm(hy, sw, 0, 3, 4, fy)])
    sc.frame(_send("10.2.0.9", "10.9.8.5", 0x101, 4, hz), "Z (flow 1 too, edge 2), 1 cell; q0 3: flow 1 joins with "
             "source edge 2; recorded (hz, 3): hit hz", enq=enq(0, 1, fz, 2), count=[JOIN, SENT],
             cnm=[cnm(hz, sw, 1, 2, 4, fz)])
    sc.frame(_send("10.3.2.1", "10.9.6.3", 0x102, 4, hy2), "Y (flow 1) from hy2, 1 cell; q0 4; flow 1 in the set: "
             "nothing; flow 1's record becomes (hy2, 3): the newest wins", enq=enq(0, 1, fy, 3))
    sc.clock(12, "now 12: flow 1's record 9 ticks old")
    sc.deq(0, 2, "q0 2 < 3: releases flow 1: to 2 (the source edge it joined with), to hy2 (its newest hop)",
           count=[RELEASE, SENT], cnm=[cnm(hy2, sw, 0, 2, 4, fz)])
    sc.frame(_send("10.1.0.5", "10.9.4.7", 0x101, 240, hx), "X, 298 bytes -> 5 cells; q0 7: flow 0 joins, to 1; "
             "recorded (hx, 12): hit", enq=enq(0, 5, fx, 1), count=[JOIN, SENT], cnm=[cnm(hx, sw, 1, 1, 4, fx)])
    sc.clock(22, "now 22: flow 0's record 10 ticks old, aged")
    sc.deq(0, 5, "q0 2 < 3: releases flow 0; aged: a miss", count=[RELEASE, AGED])
    sc.ctl(49, 0, 3, "this edge: 3")
    big = _announcing(_send("10.12.0.3", "10.9.2.1", 0x101, 200, hk), 16400)
    sc.frame(big, "K (flow 0, edge 12 & 7 = 4), headers announce 16,400 UDP bytes -> 255 cells; q0 2 + 255 = 257 > "
             "255: saturated at 255, counted; >= 3: flow 0 joins, to 4, from 3; hit hk", enq=enq(0, 255, fk, 4),
             count=[CLAMP, JOIN, SENT], cnm=[cnm(hk, sw, 1, 4, 3, fk)])
    sc.deq(0, 252, "q0 255 - 252 = 3 >= 3: nothing")
    last = cnm(hk, sw, 0, 4, 3, fk)
    sc.deq(0, 1, "q0 2 < 3: releases flow 0, from 3", count=[RELEASE, SENT], cnm=[last])
    sc.frame(cnm_out(**last), "that release back in: to 4, but this edge is now 3: refused, counted", enq=None,
             count=[CNM_REFUSED])
    # Joins Y, Z, X, K = 4; releases 4; no refreshes (one slot); 8 CNMs: 7 frames, 1 aged; set full X, J; one
    # rejected event (the dequeue on port 1).
    return sc.check(_totals(c5=1, c6=1, c8=4, c9=4, c10=2, c11=1, c12=1, c13=7, c15=1))


def _shift():
    """n_ports 3 with port_shift 8: the port is bits 9..8 of the destination address (10.0.<x>.y: x's low 2 bits;
    over IPv6 bits 9..8 of the 128-bit address, fd00::502 is port 1); x = 7 names port 3, forged. n_edges 4
    (10.0.<edge>.h, edge_shift 8), n_flows 16 (4-bit flows: a chosen collision), n_slots 2, q_bits 8, K 6 from
    reset then 4 by table 50, hop_timeout 1,000, 16-bit ticks, this edge 2.

    Every destination's third octet has bit 2 set and its host number differs from x in its low 2 bits, so a port
    read from bit 0, or 3 bits wide, or the forged 3 taken mod 3, changes the ports. Cells: untagged IPv4
    ceil((58 + P) / 64), IPv6 ceil((78 + P) / 64)."""
    sc = Scenario("shift", dict(n_edges=4, n_paths=4, n_flows=16, n_ports=3, time_bits=16, delay_bits=16,
                                edge_shift=8, edge=2, tick_cycles=16, n_slots=2, q_bits=8, threshold=6, port_shift=8,
                                hop_timeout=1000))
    sw = "02:5d:00:00:00:02"
    ha, hb, hc, he, hp, hg = (f"02:00:00:00:30:{k:02x}" for k in range(1, 7))
    d1, d0, d2, d3 = "10.0.5.2", "10.0.4.1", "10.0.6.3", "10.0.7.1"    # ports 5&3=1, 4&3=0, 6&3=2, 7&3=3 (forged)
    fa = flow_hash("10.0.1.5", d1, 0x211) & 0xF             # 0x2CAC -> 12; edge 1; port 1 (bit 0 would say 2)
    fb = flow_hash("10.0.3.7", d0, 0x212) & 0xF             # 0x6483 -> 3; edge 3; port 0 (bit 0: 1)
    fc = flow_hash("10.0.0.9", d1, 0x213) & 0xF             # 0xF67A -> 10; edge 0; port 1
    fe = flow_hash("10.0.3.3", d3, 0x221) & 0xF             # 0x830C -> 12 = A's id; edge 3; port 3, forged
    fp = flow_hash("fd00::305", "fd00::502", 0x214) & 0xF   # 0xEA52 -> 2; edge 0x305 >> 8 & 3 = 3; port 1
    fg = flow_hash("10.0.1.8", d2, 0x216) & 0xF             # 0x9249 -> 9; edge 1; port 2 (bit 0: 3)
    assert (fa, fb, fc, fe, fp, fg) == (12, 3, 10, 12, 2, 9)

    def a(payload):
        return _send("10.0.1.5", d1, 0x211, payload, ha)

    def b(payload):
        return _send("10.0.3.7", d0, 0x212, payload, hb)

    def cnm(dst, cong, to, flow, cp, n):
        return {"dst": dst, "src": sw, "cong": cong, "to": to, "frm": 2, "flow": flow, "cp": cp, "n": n}

    sc.ctl(48, 1, 0, "clock stopped")
    sc.clock(100, "now 100")
    sc.ctl(51, 0, mac_int(sw), "this switch's MAC")
    sc.ctl(50, 0, 0x104, "K = 0x104 mod 2^8 = 4")
    sc.ctl(50, 0, 0x200, "0x200 mod 2^8 = 0: ignored (K stays 4)")
    # Port p: qp; port 1's set slots 0, 1; debts (port x 2 + slot).
    sc.frame(a(68), "A to 10.0.5.2: port 1; 126 bytes -> 2 cells; q1 2 < 4; A recorded (ha, 100)",
             enq=enq(1, 2, fa, 1))
    sc.frame(b(4), "B to 10.0.4.1: port 0; 62 bytes -> 1 cell; q0 1", enq=enq(0, 1, fb, 3))
    sc.frame(_send("10.0.0.9", d1, 0x213, 68, hc), "C to port 1, 2 cells; q1 4 >= 4: C joins port 1 slot 0, n 1, "
             "to 0; hit hc", enq=enq(1, 2, fc, 0), count=[JOIN, SENT], cnm=[cnm(hc, 1, 0, fc, 1, 1)])
    sc.frame(a(4), "A, 1 cell; q1 5: A joins slot 1, n 2, to 1; hit ha; C now owes a refresh",
             enq=enq(1, 1, fa, 1), count=[JOIN, SENT], cnm=[cnm(ha, 1, 1, fa, 1, 2)])
    sc.frame(_send("10.0.3.3", d3, 0x221, 16, he), "E to 10.0.7.1: port 3 >= 3, rejected, counted, pays no debt; "
             "74 bytes; the frame passes; flow 12 (A's id) recorded (he, 100)", enq=enq(3, 2, fe, 3),
             count=[REJECTED])
    sc.deq(3, 1, "port 3 >= 3: rejected, counted; pays no debt (C still owes)", count=[REJECTED])
    sc.frame(b(4), "B, 1 cell; q0 2 < 4, port 0's set empty, no CNM of its own: pays C's refresh (debt 2): n 2 "
             "(port 1's count), cp 1, to 0; hit hc", enq=enq(0, 1, fb, 3), count=[SENT], cnm=[cnm(hc, 1, 0, fc, 1, 2)])
    sc.frame(_send("fd00::305", "fd00::502", 0x214, 4, hp), "P (IPv6) to fd00::502: port 1; 54 + 28 = 82 -> 2 "
             "cells; q1 7; P not in the set, both slots taken: set full; no debt", enq=enq(1, 2, fp, 3), count=[FULL])
    sc.frame(_send("10.0.1.8", d2, 0x216, 200, hg), "G to 10.0.6.3: port 2; 258 bytes -> 5 cells; q2 5 >= 4: G "
             "joins port 2 slot 0, n 1, cp 2, to 1; hit hg", enq=enq(2, 5, fg, 1), count=[JOIN, SENT],
             cnm=[cnm(hg, 1, 1, fg, 2, 1)])
    sc.frame(cnm_frame(to=2, frm=1, flow=0x77, cp=2, n=1, cong=1), "a CNM frame for this edge, cp 2 < 3: taken",
             enq=None, count=[CNM_TAKEN])
    sc.frame(cnm_frame(to=2, frm=1, flow=0x77, cp=3, n=1, cong=1), "a CNM frame, cp 3 >= 3: refused", enq=None,
             count=[CNM_REFUSED])
    sc.clock(150, "now 150: the records made at 100 are 50 ticks old")
    sc.deq(1, 3, "q1 4 >= 4: nothing; no debt")
    sc.deq(1, 1, "q1 3 < 4: releases slot 0, C: n 2, to 0; hit hc; A now owes", count=[RELEASE, SENT],
           cnm=[cnm(hc, 0, 0, fc, 1, 2)])
    sc.deq(2, 1, "q2 4 >= 4, no CNM of its own: pays A's refresh (debt 3): n 1, cp 1, to 1; flow 12's newest "
           "record is E's (the forged port's): hit he", count=[SENT], cnm=[cnm(he, 1, 1, fa, 1, 1)])
    sc.deq(1, 1, "q1 2 < 4: releases slot 1, A: n 1, to 1; hit he", count=[RELEASE, SENT],
           cnm=[cnm(he, 0, 1, fa, 1, 1)])
    sc.deq(2, 2, "q2 2 < 4: releases G: n 1, cp 2, to 1; hit hg", count=[RELEASE, SENT],
           cnm=[cnm(hg, 0, 1, fg, 2, 1)])
    # Joins C, A, G = 3; releases C, A, G = 3; refreshes C, A (not counted); 8 CNM frames; set full P; rejected E
    # and the dequeue on port 3.
    return sc.check(_totals(c5=1, c6=1, c8=3, c9=3, c10=1, c12=2, c13=8))


def notify_scenarios():
    """The hand-worked notification scenarios: ``small``, ``defaults``, ``odd``, ``shift`` (a list of
    :class:`Scenario`)."""
    return [_small(), _defaults(), _odd(), _shift()]
