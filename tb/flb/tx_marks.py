"""Hand-worked scenarios of the marks `flb-tx-wire` writes: samples and piggybacks (docs/flb_tx_wire.md, "Marks:
samples and piggybacks"; the field format of docs/flb_rx_wire.md, "FLB marks in a RoCEv2 frame").

Everything here is worked from the two datasheets and the RoCEv2 / IEEE 802.1Q layouts, not from lbpipe's RTL or
golden model:

* The path of every frame is made predictable as ``route_by_hand`` does (tb/flb/test_wire.py): the clock is stopped
  and each destination's delays (``ctl`` table 0) make one path the strictly fastest, so a new flow takes it and an
  existing flow on it never moves (Algorithm 1 moves a flow only to a strictly faster path; docs/flb_route.md). An
  isolated flow takes flb-isolate's isolation path, the highest one for ``k`` = 1 (docs/flb_isolate.md).
* :func:`routed` is what leaves for a routed FLB frame: the UDP source port's low ``log2 n_paths`` bits set to the
  path, the ICRC computed again from the bytes (tb/lib/packets.py's :func:`icrc`), then the marks written by hand:
  BTH byte 4 (FECN bit 7 and BECN bit 6 kept, ``S`` bit 5, ``P`` bit 4, the piggyback's path in bits 3..0) and the
  UDP checksum (big-endian). Both fields are under the ICRC's mask, so the order does not matter.
* :func:`hand_scenarios` gives two scenarios (the small parameter set, and 8 paths / 16 destinations / 16-bit
  ticks) whose every step, expected frame and the 16 counters at the end are worked in the comments and notes.

Steps, replayed in order (an RTL testbench drains between steps): ``("ctl", cmd)``; ``("meas", {"edge", "path",
"delay"})`` (the ``meas`` port); ``("frame", frame, expected_frame, note)``. ``now`` is only ever set by ``ctl``
table 48 index 0, after the clock is stopped (index 1, data 0).
"""

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from lbpipe.tb.lib.packets import RC_SEND_ONLY, flow_hash, icrc, roce_data

__all__ = ["COUNTERS", "SMALL", "WIDE", "Scenario", "udp_offset", "routed", "garbage", "hand_scenarios"]

#: The wire's 16 counters, STATUS_0..15 (the datasheet's "Interface": flb-isolate 0-7, deparser 8-10, then the
#: wire's own).
COUNTERS = ("isolated", "congestion", "release", "timeouts", "full", "forged", "stale", "rejected",
            "cut", "refused", "bad", "not_flb", "no_route", "sets", "samples", "piggybacks")

#: The brief's small parameter set.
SMALL = dict(n_flows=256, n_dests=3, n_paths=4, n_slots=4, n_ports=4, time_bits=12, delay_bits=12, timeout=1000,
             release=1000, margin=0, dest_shift=8, tick_cycles=64, depth=256, sample_ticks=5)
#: 8 paths, 16 destinations, 16-bit ticks and delays, the default sampling period.
WIDE = dict(n_flows=4096, n_dests=16, n_paths=8, n_slots=8, n_ports=8, time_bits=16, delay_bits=16, timeout=4096,
            release=4096, margin=0, dest_shift=8, tick_cycles=64, depth=256, sample_ticks=64)

_VLAN, _IPV4, _IPV6 = 0x8100, 0x0800, 0x86DD
_CSUM, _BYTE4 = 6, 8 + 4            # from the UDP header: its checksum; the BTH's byte 4 after 8 bytes of UDP


def _bits(n):
    return max(1, (n - 1).bit_length())


# -- frames ------------------------------------------------------------------------------------------------------------

def udp_offset(frame):
    """Where the UDP header starts: after an optional 802.1Q tag, IPv4 (IHL words) or IPv6 (40 bytes)."""
    data = bytes(frame)
    at = 16 if int.from_bytes(data[12:14], "big") == _VLAN else 12
    etype = int.from_bytes(data[at:at + 2], "big")
    if etype == _IPV4:
        return at + 2 + 4 * (data[at + 2] & 0x0F)
    if etype == _IPV6:
        return at + 2 + 40
    raise ValueError(f"EtherType {etype:#06x} is not IP")


def routed(frame, path, n_paths, *, s=0, p=0, mpath=0, value=0):
    """The frame a routed FLB frame leaves as: source port's low ``log2 n_paths`` bits = ``path``, the ICRC of the
    new bytes, BTH byte 4 = FECN/BECN kept | ``s`` << 5 | ``p`` << 4 | ``mpath``, UDP checksum = ``value``."""
    data = bytearray(bytes(frame))
    l4 = udp_offset(data)
    low = (1 << _bits(n_paths)) - 1
    port = int.from_bytes(data[l4:l4 + 2], "big")
    data[l4:l4 + 2] = ((port & ~low) | path).to_bytes(2, "big")
    data[-4:] = icrc(bytes(data))
    data[l4 + _BYTE4] = (data[l4 + _BYTE4] & 0xC0) | s << 5 | p << 4 | mpath
    data[l4 + _CSUM:l4 + _CSUM + 2] = value.to_bytes(2, "big")
    return bytes(data)


def garbage(frame, bits):
    """``frame`` with ``bits`` in BTH byte 4's bits 5..0 (what a host might send; the ICRC masks them)."""
    data = bytearray(bytes(frame))
    l4 = udp_offset(data)
    data[l4 + _BYTE4] = (data[l4 + _BYTE4] & 0xC0) | bits
    return bytes(data)


def _send(flow, psn, payload=16, **options):
    """A RoCEv2 SEND ONLY of ``flow`` = (src, dst, sport, dqpn), 16 payload bytes, UDP checksum 0 unless given.
    ``payload`` 0 over IPv4 makes a 58-byte frame: one beat, so two of them given back to back reach the sampler
    in consecutive clocks (the read-after-write case)."""
    src, dst, sport, dqpn = flow
    return bytes(roce_data(src, dst, sport, dqpn, psn, opcode=RC_SEND_ONLY, payload_len=payload, **options))


def _not_roce(dst):
    """UDP to port 53: not RoCE."""
    return bytes(Ether() / IP(src="10.0.0.1", dst=dst) / UDP(sport=0x1230, dport=53, chksum=0)
                 / Raw(bytes(range(40))))


def _flow_index(flow, n_flows):
    return flow_hash(flow[0], flow[1], flow[3]) % n_flows


def _cnm(flow, n_flows, dest, cp, n, cong):
    """Table 49 as the control map packs it: index the flow, data dest 0-15, cp 16-23, n 24-27, cong 28."""
    return {"table": 49, "index": _flow_index(flow, n_flows), "data": dest | cp << 16 | n << 24 | cong << 28}


def _clock(at):
    return {"table": 48, "index": 0, "data": at}


def _delays(dest, delays):
    return [{"table": 0, "index": dest << 4 | p, "data": d} for p, d in enumerate(delays)]


# -- scenarios ---------------------------------------------------------------------------------------------------------

class Scenario:
    """One hand-worked scenario.

    Members
    -------
    name : str
    params : dict
        ``FlbTxWireModel`` / ``FlbTxWire`` parameters.
    steps : list
        ``("ctl", cmd)``, ``("meas", item)`` or ``("frame", frame, expected_frame, note)``, in order.
    stats : list of int
        The 16 counters expected at the end (STATUS_0..15), tallied per step.
    """

    def __init__(self, name, params):
        self.name, self.params, self.steps = name, dict(params), []
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._n = params["n_paths"]

    @property
    def stats(self):
        return [self._counts[c] for c in COUNTERS]

    @property
    def frames(self):
        """``[(frame, expected_frame, note)]``."""
        return [s[1:] for s in self.steps if s[0] == "frame"]

    @property
    def back_to_back(self):
        """Indices (in :attr:`frames`) of frames to send right behind the frame before, with no drain between: the
        second of a pair whose first is sampled (the sampler's read misses that write; docs/flb_tx_wire.md)."""
        return [k for k, (_, _, note) in enumerate(self.frames) if note.startswith("back to back")]

    def ctl(self, *cmds):
        self.steps += [("ctl", dict(c)) for c in cmds]

    def meas(self, edge, path, delay):
        self.steps.append(("meas", {"edge": edge, "path": path, "delay": delay}))

    def _frame(self, frame, expected, note, count):
        self.steps.append(("frame", frame, expected, note))
        for c in count:
            self._counts[c] += 1

    def sample(self, frame, path, stamp, note, *, count=()):
        """A routed FLB frame on ``path``, sampled: ``S``, the checksum ``stamp``."""
        self._frame(frame, routed(frame, path, self._n, s=1, value=stamp), note, ("samples",) + tuple(count))

    def piggyback(self, frame, path, mpath, delay, note, *, count=()):
        """A routed FLB frame on ``path`` carrying a measurement of ``mpath``, ``delay``."""
        self._frame(frame, routed(frame, path, self._n, p=1, mpath=mpath, value=delay), note,
                    ("piggybacks",) + tuple(count))

    def plain(self, frame, path, note, *, count=()):
        """A routed FLB frame on ``path`` with no mark: bits 5..0 and the checksum 0."""
        self._frame(frame, routed(frame, path, self._n), note, tuple(count))

    def unchanged(self, frame, note, *, count=()):
        self._frame(frame, frame, note, tuple(count))

    def check(self, totals):
        """The counters written out at the end must agree with the per-step tally (two tallies of one hand-work)."""
        if self.stats != totals:
            raise AssertionError(f"{self.name}: steps count {self.stats}, totals written {totals}")
        return self


def _distinct(flows, n_flows):
    idx = [_flow_index(f, n_flows) for f in flows]
    if len(set(idx)) != len(idx):
        raise AssertionError(f"hand-worked flows share a flow index: {idx}")


def _small():
    """SMALL: 4 paths (2 port bits), 3 destinations (2 bits: destination 3 has no route), 12-bit ticks (wrap 4096),
    sampling period 5, timeouts 1,000. Delays: destination 0 (5, 40, 40, 40): path 0 fastest; destination 1 (50, 20,
    30, 5): path 3 (route_by_hand's); destination 2 (40, 10, 40, 40): path 1."""
    sc = Scenario("small", SMALL)
    nf = SMALL["n_flows"]
    a = ("10.0.0.1", "10.0.1.7", 0x1230, 0x000111)         # destination 1 -> path 3
    g = ("10.0.0.2", "10.0.1.8", 0x4561, 0x000222)         # destination 1 -> path 3
    b = ("10.0.0.3", "10.0.0.9", 0x7892, 0x000333)         # destination 0 -> path 0
    vl = ("10.0.0.6", "10.0.0.10", 0x2221, 0x000666)       # destination 0 (VLAN 5) -> path 0
    c = ("10.0.0.4", "10.0.2.7", 0x3333, 0x000444)         # destination 2 -> path 1
    f = ("10.0.0.5", "10.0.2.8", 0x5550, 0x000555)         # destination 2, isolated -> path 3
    v6 = ("fd00::1", "fd00::209", 0x6662, 0x000777)        # low 32 bits 0x209 >> 8 = destination 2 -> path 1
    _distinct([a, g, b, vl, c, f, v6], nf)
    sc.ctl({"table": 48, "index": 1, "data": 0}, _clock(100))
    sc.ctl(*_delays(0, (5, 40, 40, 40)), *_delays(1, (50, 20, 30, 5)), *_delays(2, (40, 10, 40, 40)))
    # now 100
    sc.sample(_send(a, 1), 3, 100, "A new on 3; (1, 3) never sampled: S, stamp 100", count=("sets",))
    sc.plain(garbage(_send(a, 2), 0x3F), 3, "A again at 100: (1, 3) 0 < 5, no measurement: garbage 0x3F cleared")
    sc.sample(_send(b, 1), 0, 100, "B new on 0; (0, 0) first: S 100", count=("sets",))
    sc.ctl(_clock(104))
    sc.meas(1, 2, 777)
    sc.unchanged(garbage(_send(a, 3, udp_chksum=0x1234), 0x3F), "A's addresses, checksum 0x1234: not FLB, garbage "
                 "kept, the measurement for edge 1 not taken", count=("not_flb",))
    sc.unchanged(_not_roce("10.0.1.9"), "UDP to port 53 toward edge 1: not FLB", count=("not_flb",))
    sc.unchanged(garbage(_send(("10.0.0.1", "10.0.3.7", 0x1233, 0x444), 1), 0x3F),
                 "destination 3 >= 3: no route, garbage kept", count=("no_route", "rejected"))
    sc.plain(_send(b, 2), 0, "B at 104: (0, 0) 4 < 5; the measurement waits for edge 1, not 0")
    sc.piggyback(_send(a, 4, fecn=1), 3, 2, 777, "A at 104: (1, 3) 4 < 5; edge 1's measurement: P path 2, 777; FECN "
                 "kept (byte 4 0x92)")
    sc.plain(_send(a, 5, becn=1), 3, "A at 104: carried once: nothing; BECN kept (byte 4 0x40)")
    sc.meas(1, 1, 300)
    sc.ctl(_clock(105))
    sc.sample(_send(a, 6, fecn=1, becn=1), 3, 105, "A at 105: (1, 3) 105 - 100 = 5 >= 5: S 105 (the waiting "
              "measurement stays: a sample first); FECN, BECN kept (byte 4 0xE0)")
    sc.piggyback(garbage(_send(a, 7), 0x2A), 3, 1, 300, "A at 105: 0 < 5: P path 1, 300 (garbage 0x2A overwritten)")
    sc.meas(1, 3, 0x555)
    # table 50, newer than the meas item above: index edge 1; delay 0xABC in bits 0-15, bits 16-19 0b1110 cut to
    # 2 bits: path 2; junk in bits 20-31
    sc.ctl({"table": 50, "index": 1, "data": 0xABC | 0xE << 16 | 0xFFF << 20})
    sc.piggyback(_send(a, 8), 3, 2, 0xABC, "A at 105: the newer of two measurements (table 50's): P path 2, 0xABC")
    sc.plain(_send(a, 9), 3, "A at 105: nothing (the older measurement was replaced, not queued)")
    sc.meas(3, 1, 9)                                          # edge 3 >= 3: ignored
    sc.ctl({"table": 50, "index": 3, "data": 7 | 2 << 16},   # edge 3: ignored
           {"table": 50, "index": 7, "data": 8 | 1 << 16})   # low 2 bits 3: ignored
    sc.sample(_send(b, 3), 0, 105, "B at 105: (0, 0) 105 - 100 = 5: S 105")
    sc.plain(_send(b, 4), 0, "B at 105: 0 < 5; nothing waits for edge 0 (edge 3 was ignored, not folded onto 0)")
    sc.plain(_send(a, 10), 3, "A at 105: 0 < 5; nothing waits for edge 1")
    sc.ctl({"table": 48, "index": 2, "data": 0}, _clock(200))
    sc.plain(_send(a, 11), 3, "period 0: A at 200 (95 since its pair's sample) not sampled, nothing waits")
    sc.meas(1, 0, 42)
    sc.piggyback(_send(a, 12), 3, 0, 42, "period 0: piggybacks still: P path 0, 42")
    sc.plain(_send(c, 1), 1, "period 0: C new on 1, (2, 1) never sampled but no samples", count=("sets",))
    sc.ctl({"table": 48, "index": 2, "data": 0x1_0005})       # data[15:0]: period 5
    sc.sample(garbage(_send(a, 13), 0x15), 3, 200, "period 5 again: (1, 3) 200 - 105 = 95: S 200 (garbage 0x15 "
              "overwritten)")
    sc.sample(_send(c, 2), 1, 200, "C at 200: (2, 1) first: S 200")
    sc.meas(2, 2, 0x0F0)
    sc.piggyback(_send(v6, 1), 1, 2, 0x0F0, "IPv6, new to destination 2 on 1: (2, 1) 0 < 5: P path 2, 0xF0 (UDP at "
                 "54: checksum 60..61, byte 4 at 66)")
    sc.sample(_send(vl, 1, vlan=5), 0, 200, "VLAN 5, new to destination 0 on 0: (0, 0) 200 - 105 = 95: S 200 (UDP at "
              "38: checksum 44..45, byte 4 at 50)")
    sc.ctl(_clock(4090))
    sc.sample(_send(a, 14, payload=0), 3, 4090, "A at 4090 (new again, on 3): (1, 3) 3890 >= 5: S 4090")
    sc.plain(_send(g, 1, payload=0), 3, "back to back with the frame before: G new on 3, (1, 3) 0 < 5: not sampled")
    sc.ctl(_clock(3))
    sc.sample(_send(a, 15), 3, 3, "across the wrap: (3 - 4090) mod 4096 = 9 >= 5: S 3 (A's gap 9: stays on 3)")
    sc.ctl(_clock(7))
    sc.plain(_send(g, 2), 3, "G at 7: (1, 3) 7 - 3 = 4 = period - 1: not sampled")
    sc.ctl(_cnm(f, nf, 2, 0, 1, 1))                           # congestion, n 1: k 1, isolation path 3
    sc.sample(_send(f, 1), 3, 7, "F isolated: path 3; (2, 3) first: S 7; destination 2's set {3} sent",
              count=("isolated", "congestion", "sets"))
    sc.meas(2, 3, 11)
    sc.piggyback(_send(f, 2), 3, 3, 11, "F at 7 on 3: (2, 3) 0 < 5: P path 3, 11", count=("isolated",))
    sc.sample(_send(c, 3), 1, 7, "C at 7 (idle 3903: new, the fastest outside {3}: 1): (2, 1) 3903 >= 5: S 7")
    # isolated 2, congestion 1, rejected 1, not FLB 2, no route 1, sets 4 (destinations 1, 0, 2 first, 2's {3}),
    # samples 11, piggybacks 6.
    return sc.check([2, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 1, 4, 11, 6])


def _wide():
    """WIDE: 8 paths (3 port bits), 16 destinations (4 bits, all in range), 16-bit ticks (wrap 65,536), sampling
    period 64, timeouts 4,096. Delays (100 everywhere but one path): destination 5 path 6 (3 ticks), destination 12
    path 2, destination 9 path 5, destination 3 path 1."""
    sc = Scenario("wide", WIDE)
    nf = WIDE["n_flows"]
    p = ("10.1.0.1", "10.1.5.20", 0xABC0, 0x012345)         # destination 5 -> path 6
    q = ("10.1.0.2", "10.1.5.21", 0xABC7, 0x012346)         # destination 5 -> path 6
    r = ("10.1.0.3", "10.1.12.9", 0x1111, 0x000ABC)         # destination 12, isolated -> path 7
    s = ("10.1.0.4", "10.1.12.10", 0x2225, 0x000ABD)        # destination 12 -> path 2 (outside {7})
    v6 = ("fd00::1", "fd00::905", 0x3330, 0x000AAA)         # low 32 bits 0x905 >> 8 = destination 9 -> path 5
    vl = ("10.1.0.5", "10.1.3.3", 0x4447, 0x000BBB)         # destination 3 (VLAN 7) -> path 1
    _distinct([p, q, r, s, v6, vl], nf)

    def fastest(path, at=3):
        return tuple(at if k == path else 100 for k in range(8))

    sc.ctl({"table": 48, "index": 1, "data": 0}, _clock(1000))
    sc.ctl(*_delays(5, fastest(6)), *_delays(12, fastest(2)), *_delays(9, fastest(5)), *_delays(3, fastest(1)))
    sc.sample(_send(p, 1), 6, 1000, "P new on 6; (5, 6) first: S 1000 (0x03E8)", count=("sets",))
    sc.meas(5, 7, 0xBEEF)
    sc.piggyback(_send(p, 2), 6, 7, 0xBEEF, "P at 1000: 0 < 64: P path 7, 0xBEEF (byte 4 0x17)")
    sc.ctl(_clock(1063))
    sc.plain(_send(p, 3), 6, "P at 1063: 63 = period - 1: nothing")
    sc.ctl(_clock(1064))
    sc.sample(_send(p, 4, payload=0), 6, 1064, "P at 1064: 64 >= 64: S 1064")
    sc.plain(_send(q, 1, payload=0), 6, "back to back with the frame before: Q new on 6, (5, 6) 0 < 64: not sampled")
    sc.meas(5, 1, 0x0101)
    # table 50, newer: edge 5, delay 0x1234, bits 16-19 0b1101 cut to 3 bits: path 5; junk in bits 20-31
    sc.ctl({"table": 50, "index": 5, "data": 0x1234 | 0xD << 16 | 0xABC << 20})
    sc.piggyback(_send(q, 2), 6, 5, 0x1234, "Q at 1064: the newer (table 50): P path 5, 0x1234 (byte 4 0x15)")
    sc.plain(_send(p, 5), 6, "P at 1064: carried once: nothing")
    sc.ctl({"table": 48, "index": 2, "data": 0}, _clock(2000))
    sc.plain(_send(p, 6), 6, "period 0: P at 2000 (936 since the pair's sample): nothing")
    sc.meas(5, 0, 0xFFFF)
    sc.piggyback(_send(p, 7), 6, 0, 0xFFFF, "period 0: P path 0, 0xFFFF")
    sc.ctl({"table": 48, "index": 2, "data": 0xFF_0040})     # data[15:0]: period 64
    sc.sample(_send(p, 8), 6, 2000, "period 64: (5, 6) 2000 - 1064 = 936: S 2000")
    sc.ctl(_clock(65530))
    sc.sample(_send(p, 9), 6, 65530, "P at 65530 (new again, on 6): 63530 >= 64: S 0xFFFA")
    sc.ctl(_clock(30))
    sc.plain(_send(p, 10), 6, "across the wrap: (30 - 65530) mod 65536 = 36 < 64: nothing")
    sc.ctl(_clock(57))
    sc.plain(_send(p, 11), 6, "across the wrap: 63: nothing")
    sc.ctl(_clock(58))
    sc.sample(_send(p, 12), 6, 58, "across the wrap: 64: S 58")
    sc.ctl(_cnm(r, nf, 12, 3, 1, 1))                          # congestion, n 1: k 1, isolation path 7
    sc.sample(_send(r, 1, fecn=1), 7, 58, "R isolated on 7; (12, 7) first: S 58, FECN kept (byte 4 0xA0); "
              "destination 12's first set, {7}", count=("isolated", "congestion", "sets"))
    sc.sample(_send(s, 1), 2, 58, "S new to destination 12: the fastest outside {7}, 2; (12, 2) first: S 58")
    sc.meas(12, 6, 0x7777)
    sc.piggyback(garbage(_send(r, 2, becn=1), 0x3F), 7, 6, 0x7777, "R at 58 on 7: 0 < 64: P path 6, 0x7777; BECN "
                 "kept, garbage 0x3F overwritten (byte 4 0x56)", count=("isolated",))
    sc.sample(_send(v6, 1), 5, 58, "IPv6 new to destination 9 on 5: S 58 at 60..61, byte 4 at 66", count=("sets",))
    sc.meas(9, 4, 0x0A0A)
    sc.piggyback(_send(v6, 2), 5, 4, 0x0A0A, "IPv6 at 58: P path 4, 0x0A0A")
    sc.meas(3, 2, 0x3333)
    sc.sample(_send(vl, 1, vlan=7), 1, 58, "VLAN 7 new to destination 3 on 1: S 58 at 44..45, byte 4 at 50 (edge 3's "
              "measurement waits)", count=("sets",))
    sc.piggyback(_send(vl, 2, vlan=7), 1, 2, 0x3333, "VLAN at 58: P path 2, 0x3333")
    sc.unchanged(garbage(_send(p, 13, udp_chksum=0x4321), 0x21), "checksum 0x4321: not FLB, unchanged",
                 count=("not_flb",))
    sc.unchanged(_not_roce("10.1.5.20"), "UDP to port 53: not FLB", count=("not_flb",))
    # isolated 2, congestion 1, not FLB 2, sets 4 (destinations 5, 12, 9, 3), samples 9, piggybacks 6.
    return sc.check([2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 4, 9, 6])


def hand_scenarios():
    """The hand-worked scenarios: ``small`` (SMALL) and ``wide`` (WIDE)."""
    return [_small(), _wide()]
