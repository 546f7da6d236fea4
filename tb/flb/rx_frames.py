"""Test-side frames of FLB's receive side in the wire (`flb-rx-wire`, docs/flb_rx_wire.md) and hand-worked
scenarios for its golden model and its RTL.

Everything here is written from the datasheet's tables and the RoCEv2 / IEEE 802.1Q layouts, not from lbpipe's
RTL, golden model or protocol constants:

* :func:`mark` writes FLB's marks into a frame: the BTH's byte 4 (FECN bit 7 and BECN bit 6 kept, ``S`` bit 5,
  ``P`` bit 4, the path in bits 3..0) and the UDP checksum (big-endian). :func:`cleared` is what the wire emits for
  a marked frame: checksum 0, bits 5..0 of the BTH's byte 4 cleared. Both find the UDP header themselves (0, 1 or
  2 VLAN tags, IPv4 with options, IPv6 with UDP as next header); neither touches the ICRC (both fields are under
  its mask).
* :func:`cnm_frame` builds a CNM frame (EtherType 0x88B6, version, flags, to, from, flow, cp, n, zero padding).
* :func:`hand_scenarios` gives three scenarios (the small parameter set, the defaults, and an odd set with
  ``n_paths`` 6 and ``n_edges`` 5) whose expected frames, ``meas``/``dly``/``cnm`` items and counters are worked by
  hand in the comments beside each step. Every ``now`` is explicit; :func:`clocked_steps` turns a scenario into the
  control commands (table 48) an RTL testbench sends to set the stopped clock before each frame.
"""

import struct

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from lbpipe.tb.lib.packets import RC_SEND_ONLY, roce_ack, roce_cnp, roce_data

__all__ = ["CNM_TYPE", "COUNTERS", "Scenario", "udp_offset", "mark", "cleared", "cnm_frame", "qinq",
           "hand_scenarios", "clocked_steps", "stop_clock"]

#: The CNM's EtherType (the datasheet's "CNM frame" table).
CNM_TYPE = 0x88B6
#: The datasheet's counters, in order (STATUS_0..7).
COUNTERS = ("measured", "bases", "rejected", "dly", "dly_refused", "cnm", "cnm_refused", "both")

_VLAN, _QINQ, _IPV4, _IPV6 = 0x8100, 0x88A8, 0x0800, 0x86DD
_BTH_BYTE4 = 8 + 4          # from the UDP header: 8 bytes of UDP, then the BTH's byte 4 (FECN, BECN, reserved 6)
_UDP_CSUM = 6


# -- frames ------------------------------------------------------------------------------------------------------------

def udp_offset(frame):
    """Offset of the UDP header in an Ethernet frame: after 0 to 2 VLAN tags (outer 0x8100 or 0x88A8, inner
    0x8100), IPv4 (IHL words, protocol 17) or IPv6 (next header 17).

    Raises
    ------
    ValueError
        If the frame carries no UDP header there.
    """
    data = bytes(frame)
    at = 12
    for tpids in ((_VLAN, _QINQ), (_VLAN,)):
        if len(data) >= at + 2 and int.from_bytes(data[at:at + 2], "big") in tpids:
            at += 4
    if len(data) < at + 2:
        raise ValueError("no EtherType")
    etype, l3 = int.from_bytes(data[at:at + 2], "big"), at + 2
    if etype == _IPV4 and len(data) >= l3 + 20 and data[l3 + 9] == 17:
        l4 = l3 + 4 * (data[l3] & 0x0F)
    elif etype == _IPV6 and len(data) >= l3 + 40 and data[l3 + 6] == 17:
        l4 = l3 + 40
    else:
        raise ValueError("not a UDP frame")
    if len(data) < l4 + _BTH_BYTE4 + 1:
        raise ValueError("frame too short for a BTH's byte 4")
    return l4


def mark(frame, *, s=0, p=0, path=0, value=0):
    """``frame`` with FLB's marks: bit 5 of the BTH's byte 4 ``s``, bit 4 ``p``, bits 3..0 ``path`` (bits 7 and 6,
    FECN and BECN, kept), and the UDP checksum ``value`` (16 bits, big-endian). Works on any UDP frame (so a test
    can put the bits where a non-RoCE frame has other bytes)."""
    if s not in (0, 1) or p not in (0, 1) or not 0 <= path <= 15 or not 0 <= value <= 0xFFFF:
        raise ValueError(f"marks out of range: s {s}, p {p}, path {path}, value {value}")
    data = bytearray(bytes(frame))
    l4 = udp_offset(data)
    data[l4 + _BTH_BYTE4] = (data[l4 + _BTH_BYTE4] & 0xC0) | s << 5 | p << 4 | path
    data[l4 + _UDP_CSUM:l4 + _UDP_CSUM + 2] = value.to_bytes(2, "big")
    return bytes(data)


def cleared(frame):
    """What the wire emits for a marked frame: the UDP checksum 0 and bits 5..0 of the BTH's byte 4 cleared (FECN
    and BECN kept); every other byte, the ICRC included, unchanged."""
    data = bytearray(bytes(frame))
    l4 = udp_offset(data)
    data[l4 + _BTH_BYTE4] &= 0xC0
    data[l4 + _UDP_CSUM:l4 + _UDP_CSUM + 2] = b"\0\0"
    return bytes(data)


def cnm_frame(*, to, frm, flow, cp, n, cong, version=1, flags=None, vlan=None, ethertype=CNM_TYPE,
              dst_mac="02:00:00:00:00:0a", src_mac="02:00:00:00:00:0b", length=60):
    """A CNM frame as the datasheet's table lays it out: EtherType (0x88B6) at byte 12, version at 14, flags at 15
    (bit 0 ``cong``; ``flags`` overrides the whole byte), ``to`` 16..17, ``frm`` 18..19, ``flow`` 20..21 (all
    big-endian), ``cp`` 22, ``n`` 23, zeros to ``length`` bytes (or cut to ``length`` when below 24). ``vlan``: put
    the same bytes behind an 802.1Q tag (which the datasheet says is not a CNM)."""
    body = struct.pack("!BBHHHBB", version, (cong & 1) if flags is None else flags, to, frm, flow, cp, n)
    l2 = Ether(dst=dst_mac, src=src_mac, type=_VLAN if vlan is not None else ethertype)
    if vlan is not None:
        l2 = l2 / Dot1Q(vlan=vlan, type=ethertype)
    data = bytes(l2 / Raw(body))
    return data[:length] if length <= len(data) else data + bytes(length - len(data))


def qinq(frame, outer=100):
    """``frame`` (with one 802.1Q tag) behind an outer 802.1ad tag (TPID 0x88A8, VLAN ``outer``). The ICRC does
    not cover the Ethernet header, so it stays right."""
    data = bytes(frame)
    return data[:12] + struct.pack("!HH", _QINQ, outer) + data[12:]


def _roce(src, sport, *, dst=None, psn=1, **options):
    """A RoCEv2 SEND ONLY with 16 payload bytes, UDP checksum 0 (FLB traffic)."""
    if dst is None:
        dst = "fd00::209" if ":" in src else "10.0.2.9"
    return bytes(roce_data(src, dst, sport, 0x000ABC, psn, opcode=RC_SEND_ONLY, payload_len=16, **options))


def _udp(dport, payload_len, *, src="10.0.1.5"):
    return bytes(Ether() / IP(src=src, dst="10.0.2.9") / UDP(sport=0x1235, dport=dport, chksum=0)
                 / Raw(bytes(range(1, payload_len + 1))))


# -- scenarios ---------------------------------------------------------------------------------------------------------

def stop_clock(at=0):
    """Table 48: the clock stopped (index 1, 0 clocks per tick), then set to ``at`` (index 0)."""
    return [{"table": 48, "index": 1, "data": 0}, {"table": 48, "index": 0, "data": at}]


class Scenario:
    """One hand-worked scenario.

    Members
    -------
    name : str
    params : dict
        ``FlbRxWireModel`` / ``FlbRxWire`` parameters.
    steps : list
        In order: ``("ctl", cmd)``, or ``("frame", frame, now, expected_frame, note)``.
    meas, dly, cnm : list of dict
        The items expected on each port, in order.
    stats : list of int
        The eight counters expected at the end (STATUS_0..7).
    """

    def __init__(self, name, params):
        self.name, self.params, self.steps = name, dict(params), []
        self.meas, self.dly, self.cnm = [], [], []
        self._counts = dict.fromkeys(COUNTERS, 0)

    @property
    def stats(self):
        return [self._counts[c] for c in COUNTERS]

    @property
    def inputs(self):
        """``[(frame, now)]``."""
        return [(s[1], s[2]) for s in self.steps if s[0] == "frame"]

    @property
    def outputs(self):
        """The frames expected on ``m_axis``, one per input."""
        return [s[3] for s in self.steps if s[0] == "frame"]

    @property
    def commands(self):
        """``[(k, cmd)]``: ``cmd`` is sent after the first ``k`` frames."""
        out, k = [], 0
        for s in self.steps:
            if s[0] == "ctl":
                out.append((k, s[1]))
            else:
                k += 1
        return out

    # building (hand-worked expectations)
    def ctl(self, *cmds):
        self.steps += [("ctl", c) for c in cmds]

    def frame(self, frame, now, note, *, marked=False, meas=None, dly=None, cnm=None, count=()):
        """One frame: ``marked`` (leaves :func:`cleared`) or not (leaves unchanged); the item it hands on
        (``meas`` (edge, path, delay), ``dly`` (dest, path, delay), ``cnm`` (flow, dest, cp, n, cong)); the
        counters it moves (names of :data:`COUNTERS`)."""
        self.steps.append(("frame", frame, now, cleared(frame) if marked else frame, note))
        if meas is not None:
            self.meas.append(dict(zip(("edge", "path", "delay"), meas)))
        if dly is not None:
            self.dly.append(dict(zip(("dest", "path", "delay"), dly)))
        if cnm is not None:
            self.cnm.append(dict(zip(("flow", "dest", "cp", "n", "cong"), cnm)))
        for c in (count,) if isinstance(count, str) else count:
            self._counts[c] += 1

    def sample(self, src, sport, stamp, now, note, *, meas=None, base=False, bits=0, **options):
        """An ``S``-marked frame (``bits`` in bits 3..0 of the BTH's byte 4, which a sample does not read);
        ``meas`` None: rejected by flb-owd."""
        count = ("rejected",) if meas is None else ("measured", "bases") if base else ("measured",)
        self.frame(mark(_roce(src, sport, **options), s=1, path=bits, value=stamp), now, note, marked=True,
                   meas=meas, count=count)

    def piggyback(self, src, path, value, now, note, *, dly=None, frame=None):
        """A ``P``-marked frame (a SEND ONLY of ``src`` unless ``frame`` is given); ``dly`` None: refused."""
        f = mark(_roce(src, 0x4321) if frame is None else frame, p=1, path=path, value=value)
        self.frame(f, now, note, marked=True, dly=dly, count="dly_refused" if dly is None else "dly")

    def cnm_in(self, now, note, *, took=None, counted=True, **fields):
        """A CNM frame; ``took``: the expected ``cnm`` item, None: refused (counted unless ``counted`` is False)."""
        self.frame(cnm_frame(**fields), now, note, cnm=took,
                   count="cnm" if took is not None else "cnm_refused" if counted else ())

    def check(self, totals):
        """The hand-counted totals must agree with the per-step counts (two tallies of the same hand-work)."""
        if self.stats != totals:
            raise AssertionError(f"{self.name}: steps count {self.stats}, totals written {totals}")
        return self


def _small():
    """n_edges 3 (a 2-bit field: edge 3 out of range), n_paths 4 (2 bits), n_flows 256, n_ports 4, 12-bit ticks
    (wrap 4096, half 2048), 10-bit delays (max 1023), edge_shift 8 (10.0.<edge>.<host>), this edge 2."""
    sc = Scenario("small", dict(n_edges=3, n_paths=4, n_flows=256, n_ports=4, time_bits=12, delay_bits=10,
                                edge_shift=8, edge=2, tick_cycles=64, hop_timeout=4000))
    sc.ctl(*stop_clock(0))
    e1 = "10.0.1.5"                                         # edge 1; host 5 = 0b101 (a shifted field reads 2 or 0)
    # (1, 1): sport 0x1235 -> low 2 bits 01.
    sc.sample(e1, 0x1235, 0xA384, 1000, "first sample: stamp 0xA384 -> low 12 bits 900; owd 100 = base",
              meas=(1, 1, 0), base=True)
    sc.sample(e1, 0x1235, 1863, 2000, "owd 137: 37 above the base", meas=(1, 1, 37))
    sc.sample(e1, 0x1235, 2910, 3000, "owd 90: below the base (d = -10), base 90", meas=(1, 1, 0), base=True)
    sc.sample(e1, 0x1235, 4090, 89, "stamp 4090, now 89 across the wrap: owd 95, d 5", meas=(1, 1, 5))
    sc.sample(e1, 0x1235, 100, 1690, "owd 1590, d 1500 > 1023: saturates", meas=(1, 1, 1023))
    sc.sample(e1, 0x1235, 0, 2138, "owd 2138, d = 2048 = half: read as below, base 2138", meas=(1, 1, 0), base=True)
    sc.sample(e1, 0x1235, 1000, 1089, "owd 89, d = 89 - 2138 + 4096 = 2047: a delay, saturated",
              meas=(1, 1, 1023))
    # Forged commands: table 2 (FORGET's table with bit 1), 3 (FORGET_ALL's with bit 1), 177 (49 in its low 6
    # bits, data 0 would make this edge 0), table 49 at index 1 (the edge is index 0 only). All ignored.
    sc.ctl({"table": 2, "index": 0x11, "data": 0}, {"table": 3, "index": 0, "data": 0},
           {"table": 177, "index": 0, "data": 0}, {"table": 49, "index": 1, "data": 1})
    sc.sample(e1, 0x1235, 300, 2500, "owd 2200, d 62 against 2138: the forged commands forgot nothing",
              meas=(1, 1, 62))
    sc.ctl({"table": 0, "index": 1 << 4 | 1, "data": 0})                                # FORGET (1, 1)
    sc.sample(e1, 0x1235, 300, 2500, "after FORGET (1, 1): owd 2200 sets the base (else 62)", meas=(1, 1, 0),
              base=True)
    sc.sample(e1, 0x1235, 310, 2520, "owd 2210: d 10", meas=(1, 1, 10))
    e0 = "10.0.0.7"                                          # edge 0
    sc.sample(e0, 0x0002, 50, 80, "(0, 2) first: owd 30 = base", meas=(0, 2, 0), base=True)
    sc.ctl({"table": 0, "index": 0 << 4 | 1, "data": 0},                                # FORGET (0, 1): not (0, 2)
           {"table": 0, "index": 1 << 4 | 2, "data": 0})                                # FORGET (1, 2): not (1, 1)
    sc.sample(e0, 0x0002, 4000, 4035, "owd 35: d 5, (0, 2) kept its base", meas=(0, 2, 5))
    sc.sample("10.0.5.1", 0xFFF9, 10, 2230, "10.0.5.1: 5 & 3 = edge 1; sport 0xFFF9 & 3 = path 1; owd 2220, d 20",
              meas=(1, 1, 20))
    sc.ctl({"table": 1, "index": 5, "data": 7})                                         # FORGET_ALL
    sc.sample(e1, 0x1235, 0, 2300, "after FORGET_ALL: owd 2300 sets the base (else d 100)", meas=(1, 1, 0),
              base=True)
    sc.sample(e0, 0x0002, 0, 40, "after FORGET_ALL: owd 40 sets (0, 2)'s base (else d 10)", meas=(0, 2, 0),
              base=True)
    sc.sample("10.0.3.4", 0x1235, 0, 100, "edge 3 >= 3 edges: rejected, still cleared")
    sc.sample("fd00::105", 0x0001, 5, 2310, "IPv6: 0x0105 >> 8 & 3 = edge 1, path 1; owd 2305, d 5",
              meas=(1, 1, 5))
    sc.sample("10.0.0.9", 0x0006, 100, 141, "VLAN 5: edge 0, 6 & 3 = path 2; owd 41, d 1", meas=(0, 2, 1), vlan=5)
    e2 = "10.0.2.3"
    sc.sample(e2, 0x0003, 7, 7, "FECN and BECN set (byte 4 leaves 0xC0): (2, 3) first, owd 0", meas=(2, 3, 0),
              base=True, fecn=1, becn=1)
    sc.sample(e2, 0x0003, 10, 9, "owd 4095, d 4095 >= 2048: below, base 4095", meas=(2, 3, 0), base=True)
    sc.sample(e2, 0x0003, 0, 3, "owd 3, d = 3 - 4095 + 4096 = 4", meas=(2, 3, 4))
    # Piggybacks: dest = the source edge, path = bits 3..0 of byte 4 (not the UDP port), delay = the checksum.
    sc.piggyback(e1, 3, 700, 3, "P from edge 1, path 3, 700", dly=(1, 3, 700))
    sc.piggyback(e0, 2, 1024, 3, "1024 > 1023: saturates", dly=(0, 2, 1023))
    sc.piggyback(e1, 0, 1023, 3, "1023: kept", dly=(1, 0, 1023))
    sc.piggyback(e2, 1, 0, 3, "on an ACK, delay 0", dly=(2, 1, 0),
                 frame=bytes(roce_ack(e2, "10.0.2.9", 0x1111, 0x000ABC, 9)))
    sc.piggyback("10.0.3.1", 0, 5, 3, "edge 3 out of range: refused")
    sc.piggyback(e1, 4, 5, 3, "path 4 >= 4 paths: refused (2 bits of it would read 0)")
    sc.piggyback("10.0.6.1", 3, 0xFFFF, 3, "10.0.6.1: 6 & 3 = edge 2; 0xFFFF saturates", dly=(2, 3, 1023))
    sc.piggyback("fd00::20a", 1, 77, 3, "IPv6: 0x020a >> 8 & 3 = edge 2", dly=(2, 1, 77))
    sc.piggyback(e1, 2, 33, 3, "802.1ad + 802.1Q tags", dly=(1, 2, 33), frame=qinq(_roce(e1, 0x4321, vlan=5)))
    sc.piggyback(e0, 3, 12, 3, "on a CNP (BECN set: byte 4 leaves 0x40)", dly=(0, 3, 12),
                 frame=bytes(roce_cnp(e0, "10.0.2.9", 0x2222, 0x000ABC)))
    sc.frame(mark(_roce(e1, 0x1235), s=1, p=1, path=1, value=2000), 2303, "S and P: nothing taken, cleared",
             marked=True, count="both")
    sc.sample(e1, 0x1235, 0, 2303, "owd 2303, d 3: the S+P frame changed no base (as a sample it would set 303)",
              meas=(1, 1, 3))
    # Not marked: unchanged, nothing counted.
    sc.frame(mark(_roce(e1, 0x1235), path=0xB), 2303, "RoCEv2, bits 3..0 set, no S or P: unchanged")
    sc.frame(bytes(roce_data(e1, "10.0.2.9", 0x1235, 0x000ABC, 4, opcode=RC_SEND_ONLY, payload_len=16,
                             udp_chksum=0x1234, fecn=1)), 2303, "RoCEv2 with a checksum, no marks: unchanged")
    sc.frame(mark(_udp(53, 20), s=1, path=3, value=0x0384), 2303, "UDP to port 53, the bits set: unchanged")
    sc.frame(mark(_udp(4791, 8), s=1, path=1, value=0x0384), 2303,
             "UDP to 4791 with 8 bytes (no whole BTH and ICRC): not RoCEv2, unchanged")
    sc.frame(bytes(range(20)), 2303, "a 20-byte runt: unchanged")
    # CNM frames (this edge 2; the forged table-177 and table-49-index-1 commands did not change it).
    cnm = dict(to=2, frm=1, flow=0xABCD, cp=3, n=4, cong=1)
    sc.cnm_in(2303, "good: flow 0xABCD -> low 8 bits 0xCD", took=(0xCD, 1, 3, 4, 1), **cnm)
    sc.cnm_in(2303, "flags 0xFE: cong 0, bits 7..1 ignored; n 15 is the largest", took=(0x00, 0, 0, 15, 0),
              to=2, frm=0, flow=0x0100, cp=0, n=15, cong=0, flags=0xFE)
    sc.cnm_in(2303, "version 2", **dict(cnm, version=2))
    sc.cnm_in(2303, "version 0", **dict(cnm, version=0))
    sc.cnm_in(2303, "to 1: another edge", **dict(cnm, to=1))
    sc.cnm_in(2303, "to 0x0102: the low byte alone would match", **dict(cnm, to=0x0102))
    sc.cnm_in(2303, "from 3 >= 3 edges", **dict(cnm, frm=3))
    sc.cnm_in(2303, "from 0x0101: 2 bits of it would read 1", **dict(cnm, frm=0x0101))
    sc.cnm_in(2303, "cp 4 >= 4 ports", **dict(cnm, cp=4))
    sc.cnm_in(2303, "cp 0x83: 2 bits of it would read 3", **dict(cnm, cp=0x83))
    sc.cnm_in(2303, "n 16 > 15", **dict(cnm, n=16))
    sc.cnm_in(2303, "n 0x13: 4 bits of it would read 3", **dict(cnm, n=0x13))
    sc.cnm_in(2303, "cut to 23 bytes (n missing)", **dict(cnm, length=23))
    sc.cnm_in(2303, "exactly 24 bytes, n 0", took=(0x07, 2, 1, 0, 0), to=2, frm=2, flow=0x0007, cp=1, n=0, cong=0,
              length=24)
    sc.cnm_in(2303, "behind a VLAN tag: not a CNM, not counted", counted=False, vlan=5, **cnm)
    sc.cnm_in(2303, "EtherType 0x88B5: not a CNM, not counted", counted=False, ethertype=0x88B5, **cnm)
    sc.ctl({"table": 49, "index": 0, "data": 0x1_0001})                                 # this edge: low 16 bits, 1
    sc.cnm_in(2303, "to 2 after the edge became 1", **cnm)
    sc.cnm_in(2303, "to 1, flags 0x03, 64 bytes", took=(0xAA, 2, 2, 1, 1), to=1, frm=2, flow=0x55AA, cp=2, n=1,
              cong=1, flags=0x03, length=64)
    sc.sample(e1, 0x1235, 0, 2310, "the edge number does not enter the measurement: owd 2310, d 10",
              meas=(1, 1, 10))
    sc.sample(e1, 0x1235, 0, 2312, "S with bits 3..0 = 2: a sample's path is the port's (1); owd 2312, d 12",
              meas=(1, 1, 12), bits=2)
    # measured: 23 samples in range; bases: 9; rejected 1; dly 8, refused 2; cnm 4, refused 12; S+P 1.
    return sc.check([23, 9, 1, 8, 2, 4, 12, 1])


def _defaults():
    """The defaults: 16 edges (4 bits), 8 paths (3 bits), 65,536 flows, 8 ports, 16-bit ticks (half 32768) and
    delays (max 65535), edge_shift 8, this edge 0."""
    sc = Scenario("defaults", dict(n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16,
                                   edge_shift=8, edge=0, tick_cycles=64))
    sc.ctl(*stop_clock(0))
    e5 = "10.0.5.3"
    sc.sample(e5, 0x1237, 0xFFF0, 0x0010, "(5, 7) first: owd 0x20 = 32 across the wrap", meas=(5, 7, 0), base=True)
    sc.sample(e5, 0x1237, 0x1000, 0x1045, "owd 69: d 37", meas=(5, 7, 37))
    sc.sample(e5, 0x1237, 0x2000, 0x2014, "owd 20: below, base 20", meas=(5, 7, 0), base=True)
    sc.sample("10.0.21.3", 0xFFFF, 0, 32787, "21 & 15 = edge 5, path 7; owd 32787, d 32767: a delay",
              meas=(5, 7, 32767))
    sc.sample(e5, 0x1237, 0, 32788, "owd 32788, d 32768: below, base 32788", meas=(5, 7, 0), base=True)
    sc.sample(e5, 0x1237, 0x8000, 1020, "now 1020 - 0x8000 + 65536 = owd 33788, d 1000", meas=(5, 7, 1000))
    sc.sample("10.0.15.1", 0x0008, 0x1234, 0x1234, "(15, 0) first: owd 0", meas=(15, 0, 0), base=True)
    sc.sample("fd00::a0b", 0x0003, 0xFFFF, 0x0000, "IPv6 0x0a0b: edge 10, path 3; owd 1", meas=(10, 3, 0),
              base=True)
    sc.piggyback("10.0.15.1", 7, 0xFFFF, 0, "65535 at 16-bit delays: no saturation", dly=(15, 7, 65535))
    sc.piggyback("10.0.0.2", 8, 1, 0, "path 8 >= 8 paths: refused")
    sc.piggyback("10.0.0.2", 15, 1, 0, "path 15: refused")
    sc.piggyback("10.0.3.2", 0, 0, 0, "edge 3, path 0, delay 0", dly=(3, 0, 0))
    sc.frame(mark(_roce(e5, 0x1237), s=1, p=1, path=7, value=5), 0, "S and P", marked=True, count="both")
    cnm = dict(to=0, frm=15, flow=0xBEEF, cp=7, n=1, cong=1)
    sc.cnm_in(0, "good: all 16 flow bits", took=(0xBEEF, 15, 7, 1, 1), **cnm)
    sc.cnm_in(0, "from 16", **dict(cnm, frm=16))
    sc.cnm_in(0, "cp 8", **dict(cnm, cp=8))
    sc.cnm_in(0, "to 16", **dict(cnm, to=16))
    sc.cnm_in(0, "VLAN-tagged: not counted", counted=False, vlan=1, **cnm)
    sc.ctl({"table": 49, "index": 0, "data": 0xFFFF})
    sc.cnm_in(0, "to 0 after the edge became 65535", **cnm)
    sc.cnm_in(0, "to 65535", took=(0x0001, 0, 0, 2, 0), to=0xFFFF, frm=0, flow=1, cp=0, n=2, cong=0)
    # measured 8, bases 5, rejected 0, dly 2, refused 2, cnm 2, refused 4, S+P 1.
    return sc.check([8, 5, 0, 2, 2, 2, 4, 1])


def _odd():
    """n_edges 5 (3 bits: 5 to 7 out of range), n_paths 6 (3 bits: 6, 7 out of range), n_flows 2 (1 bit),
    n_ports 1, 8-bit ticks (wrap 256, half 128), 4-bit delays (max 15), edge_shift 16 (10.<edge>.x.y), this edge
    4."""
    sc = Scenario("odd", dict(n_edges=5, n_paths=6, n_flows=2, n_ports=1, time_bits=8, delay_bits=4,
                              edge_shift=16, edge=4, tick_cycles=64, hop_timeout=200))
    sc.ctl(*stop_clock(0))
    e4 = "10.12.0.1"                                         # 12 & 7 = edge 4 (4 bits of it would read 12)
    sc.sample(e4, 0x0005, 0x03F0, 10, "(4, 5) first: stamp 0x03F0 -> 240; owd 10 - 240 + 256 = 26", meas=(4, 5, 0),
              base=True)
    sc.sample(e4, 0x0005, 0, 46, "owd 46, d 20 > 15: saturates", meas=(4, 5, 15))
    sc.sample(e4, 0x0005, 100, 253, "owd 153, d 127: a delay, saturated", meas=(4, 5, 15))
    sc.sample(e4, 0x0005, 100, 254, "owd 154, d 128 = half: below, base 154", meas=(4, 5, 0), base=True)
    sc.sample("10.4.0.1", 0x000E, 0, 0, "path 6 >= 6 paths: rejected")
    sc.sample("10.4.0.1", 0x0007, 0, 0, "path 7: rejected")
    sc.sample("10.5.0.1", 0x0000, 0, 0, "edge 5 >= 5 edges: rejected")
    sc.sample("10.7.0.1", 0x0000, 0, 0, "edge 7: rejected")
    e0 = "10.0.3.3"                                          # edge 0 (bits 8..15 are not the edge here)
    sc.sample(e0, 0x0008, 0x0105, 4, "(0, 0) first: stamp 5, owd 4 - 5 + 256 = 255", meas=(0, 0, 0), base=True)
    sc.sample(e0, 0x0008, 250, 3, "owd 9, d = 9 - 255 + 256 = 10", meas=(0, 0, 10))
    sc.ctl({"table": 0, "index": 4 << 4 | 5, "data": 0})                                # FORGET (4, 5)
    sc.sample(e4, 0x0005, 0, 160, "after FORGET (4, 5): owd 160 sets the base (else d 6)", meas=(4, 5, 0),
              base=True)
    sc.ctl({"table": 0, "index": 0 << 4 | 5, "data": 0})                                # FORGET (0, 5): not (4, 5)
    sc.sample(e4, 0x0005, 0, 163, "owd 163, d 3", meas=(4, 5, 3))
    sc.piggyback("10.4.0.1", 5, 14, 163, "edge 4, path 5, 14", dly=(4, 5, 14))
    sc.piggyback("10.4.0.1", 6, 1, 163, "path 6: refused")
    sc.piggyback("10.0.0.1", 0, 16, 163, "16 > 15: saturates", dly=(0, 0, 15))
    sc.piggyback("10.3.0.1", 2, 15, 163, "15: kept", dly=(3, 2, 15))
    sc.piggyback("10.6.0.1", 0, 1, 163, "edge 6: refused")
    cnm = dict(to=4, frm=4, flow=0x0003, cp=0, n=9, cong=1)
    sc.cnm_in(163, "good: flow 3 -> 1 bit, 1", took=(1, 4, 0, 9, 1), **cnm)
    sc.cnm_in(163, "cp 1 >= 1 port", **dict(cnm, cp=1))
    sc.cnm_in(163, "from 5", **dict(cnm, frm=5))
    sc.ctl({"table": 49, "index": 0, "data": 0x1_0003})                                 # this edge 3
    sc.cnm_in(163, "to 3", took=(0, 0, 0, 15, 0), to=3, frm=0, flow=0xFFFE, cp=0, n=15, cong=0)
    sc.cnm_in(163, "to 4 after the edge became 3", **cnm)
    # measured 8, bases 4, rejected 4, dly 3, refused 2, cnm 2, refused 3, S+P 0.
    return sc.check([8, 4, 4, 3, 2, 2, 3, 0])


def hand_scenarios():
    """The hand-worked scenarios: ``small``, ``defaults``, ``odd`` (a list of :class:`Scenario`)."""
    return [_small(), _defaults(), _odd()]


def clocked_steps(scenario):
    """The scenario for a testbench that sets the stopped clock: ``("ctl", cmd)`` and ``("frame", frame,
    expected_frame)``, with a table-48 index-0 command before each frame whose ``now`` differs from the clock's
    value (the scenarios start with :func:`stop_clock`)."""
    out, clock = [], None
    for step in scenario.steps:
        if step[0] == "ctl":
            cmd = step[1]
            if cmd["table"] == 48 and cmd["index"] == 0:
                clock = cmd["data"]
            out.append(step)
            continue
        _, frame, now, expected, _ = step
        if now != clock:
            out.append(("ctl", {"table": 48, "index": 0, "data": now}))
            clock = now
        out.append(("frame", frame, expected))
    return out
