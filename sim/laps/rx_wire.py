"""Golden model of :class:`lbpipe.hdl.laps.rx_wire.LapsRxWire` (LAPS receiver in the wire), on frames.

The rules are the datasheet's (docs/laps_rx_wire.md), written here once in Python: the parser's item
(:func:`lbpipe.sim.packet.parser.parse`, early), the role of a frame, the ACK frame built byte by byte, the
latency and its saturation, the PIT update and the loss item, and the LAPS header editor's action
(:class:`lbpipe.sim.packet.laps_editor.LapsEditor` applies it).

``step(frame, now)`` returns every output of one frame: ``{"host": frame or None, "ack": frame or None, "upd":
item or None, "loss": item or None}``; ``now`` is the NIC's clock at the frame's first beat. ``process(frame)``
(pcap replay) is ``step`` at :attr:`now` (settable; the replay testbench drives the same constant), returning the
host frame, then the ACK frame.

With ``ipv6`` an IPv6 data frame or probe is answered by an IPv6 ACK (datasheet, "ACK frame"); without it IPv6
frames are counted ``not_acked``.
"""

from lbpipe.hdl.laps.rx_wire import check_parameters
from lbpipe.protocol import LAPS_PORT
from lbpipe.sim.packet.laps_editor import LapsEditor
from lbpipe.sim.packet.parser import parse

__all__ = ["LapsRxWireModel", "REPLAY_NOW", "COUNTERS"]

#: The clock value ``lbpipe replay`` drives (2**40 ns, about 18 minutes).
REPLAY_NOW = 1 << 40
COUNTERS = ("acked", "probes_answered", "acks", "probe_acks", "bad_pid", "future", "not_acked", "no_echo",
            "not_laps", "laps_bad")
_OP_PASS, _OP_REMOVE = 0, 3
_MASK48 = (1 << 48) - 1
_OWD_MAX = 0xFFFF_FFFE


class LapsRxWireModel:
    """Frames in, frames and items out, as :class:`lbpipe.hdl.laps.rx_wire.LapsRxWire`."""

    def __init__(self, *, n_entries=8192, k=8, depth=256, laps_port=LAPS_PORT, ipv6=False):
        check_parameters(n_entries=n_entries, k=k, depth=depth, laps_port=laps_port, ipv6=ipv6)
        self.n_entries, self.sub, self.laps_port, self.ipv6 = n_entries, n_entries // k, laps_port, ipv6
        self.editor = LapsEditor(depth=depth, laps_port=laps_port, cut_through=True)
        self.ack_on, self.ttl = 1, 64           # the power-up configuration; reset keeps what ctl wrote
        self.now = REPLAY_NOW
        self.reset()

    def reset(self):
        self.editor.reset()
        self.tag = 0
        self.counters = dict.fromkeys(COUNTERS, 0)

    def control(self, cmd):
        if cmd["table"] == 0 and cmd["index"] == 0:
            self.ack_on, self.ttl = cmd["data"] & 1, (cmd["data"] >> 8) & 0xFF

    def stats(self):
        return [self.counters[c] for c in COUNTERS] + self.editor.stats()

    def process(self, frame):
        return [f for _, f in self.process_ports(frame)]

    def process_ports(self, frame):
        """``[(port, frame)]`` that leave for ``frame`` at ``now``: its host frame on ``m_axis``, then its ACK on
        ``m_ack`` (either may be missing)."""
        out = self.step(frame, self.now)
        return [(port, out[key]) for port, key in (("m_axis", "host"), ("m_ack", "ack")) if out[key] is not None]

    def step(self, frame, now):
        frame = bytes(frame)
        meta = parse(frame, self.tag, early=True, laps_port=self.laps_port)
        self.tag = (self.tag + 1) & 0xFFFF
        c = self.counters
        out = {"host": None, "ack": None, "upd": None, "loss": None}
        laps = bool(meta["laps"])
        probe, ack = bool(meta["laps_probe"]), bool(meta["laps_ack"])
        pid = meta["laps_pid"]
        pid_ok = pid < self.n_entries and pid % self.sub != 0
        sent = meta["laps_time"]
        # data and probes: the latency is measured here; an ACK carries it in its time field
        future = laps and not ack and sent > now
        latency = 0 if sent > now else (now - sent) & _MASK48
        owd = min(sent, _OWD_MAX)
        window = frame[:128].ljust(128, b"\0")
        h = meta["laps_off"]
        size = 12 + 4 * meta["laps_count"]
        echo = window[h + size:h + size + 12].ljust(12, b"\0") if laps else bytes(12)
        if laps:
            c["bad_pid"] += not pid_ok
            c["future"] += future
            if not ack:
                if (meta["ipv4"] or (self.ipv6 and meta["ipv6"])) and self.ack_on:
                    out["ack"] = self._ack(frame, meta, latency, echo, window[h + 10:h + 12])
                    c["probes_answered" if probe else "acked"] += 1
                else:
                    c["not_acked"] += 1
                c["no_echo"] += (not probe) and h + size > 116
            elif pid_ok:
                out["upd"] = {"pid": pid, "owd": owd, "now": now}
                c["probe_acks" if probe else "acks"] += 1
                if not probe:
                    out["loss"] = {"flow": int.from_bytes(echo[5:8], "big"), "seq": int.from_bytes(echo[9:12], "big"),
                                   "pid": pid, "owd": owd, "now": now}
        elif meta["laps_bad"]:
            c["laps_bad"] += 1
        else:
            c["not_laps"] += 1
        action = {"tag": meta["tag"], "op": _OP_REMOVE if laps and not probe else _OP_PASS,
                  "drop": int(laps and probe), "ipv6": meta["ipv6"], "l3_off": meta["l3_off"],
                  "l4_off": meta["l4_off"], "count": meta["laps_count"], "probe": 0, "ack": 0, "sr_idx": 0, "pid": 0,
                  "time": 0, "anchors": 0}
        host = self.editor.process(frame, action)
        out["host"] = host[0] if host else None
        return out

    def _ack(self, frame, meta, latency, echo, inner):
        n = meta["laps_count"]
        to_mac, from_mac = frame[6:12], frame[0:6]       # the data's source is the ACK's destination
        udp_len = 8 + 12 + 4 * n + 12
        if meta["ipv6"]:
            # traffic class and flow label 0, payload length = the UDP length, UDP, hop limit = the TTL; the UDP
            # checksum stays 0 (datasheet)
            sip, dip = meta["dst_ip"].to_bytes(16, "big"), meta["src_ip"].to_bytes(16, "big")
            ethertype = b"\x86\xdd"
            ip = bytes([0x60, 0, 0, 0]) + udp_len.to_bytes(2, "big") + bytes([17, self.ttl]) + sip + dip
        else:
            sip, dip = meta["dst_ip"].to_bytes(4, "big"), meta["src_ip"].to_bytes(4, "big")
            ethertype = b"\x08\x00"
            total = 20 + udp_len
            ip = bytearray(bytes([0x45, 0]) + total.to_bytes(2, "big") + bytes(2) + b"\x40\x00"
                           + bytes([self.ttl, 17]) + bytes(2) + sip + dip)
            s = sum(int.from_bytes(ip[i:i + 2], "big") for i in range(0, 20, 2))
            while s > 0xFFFF:
                s = (s & 0xFFFF) + (s >> 16)
            ip[10:12] = (~s & 0xFFFF).to_bytes(2, "big")
        udp = meta["udp_sport"].to_bytes(2, "big") + self.laps_port.to_bytes(2, "big") + \
            udp_len.to_bytes(2, "big") + bytes(2)
        anchors = [(meta["laps_anchors"] >> (32 * i)) & 0xFFFF_FFFF for i in range(n)]
        hdr = bytes([meta["laps_probe"] << 7 | 1 << 6 | n, 0]) + meta["laps_pid"].to_bytes(2, "big") + \
            latency.to_bytes(6, "big") + inner + b"".join(a.to_bytes(4, "big") for a in reversed(anchors))
        return to_mac + from_mac + ethertype + bytes(ip) + udp + hdr + echo
