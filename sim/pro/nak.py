"""Golden model of :class:`lbpipe.hdl.pro.nak.NakGen`: NACK events in, RoCEv2 NAK frames (bytes) out.

Written from the rules of the datasheet (docs/pro_rx_wire.md), with ``struct`` and ``zlib``: the frame is packed
field by field, the IPv4 checksum summed in ones' complement and the ICRC taken by ``zlib.crc32`` over the masked
pseudo-packet. Contexts survive reset (they are memory); counters do not.
"""

import struct
import zlib

from lbpipe.hdl.pro.nak import N_STATS, check_parameters

__all__ = ["NakGen"]


def _ones_sum(words):
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


class NakGen:
    """Parameters as :class:`lbpipe.hdl.pro.nak.NakGen`."""

    def __init__(self, *, n_qps=10240, user_width=1):
        check_parameters(n_qps=n_qps, user_width=user_width)
        self.n_qps = n_qps
        self.lanes = {}
        self.counts = [0] * N_STATS

    def reset(self):
        self.counts = [0] * N_STATS

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        if table > 3 or index >= self.n_qps:
            self.counts[3] += 1
            return
        self.lanes.setdefault(index, [0, 0, 0, 0])[table] = value

    def process(self, event):
        """The frames (a list of 0 or 1 ``bytes``) for one event (a dict of ``qp``, ``nack``, ``psn``)."""
        if not event.get("nack"):
            self.counts[2] += 1
            return []
        qp = event.get("qp", 0)
        lanes = self.lanes.get(qp, [0, 0, 0, 0]) if qp < self.n_qps else [0, 0, 0, 0]
        if not lanes[3] >> 63 & 1:
            self.counts[1] += 1
            return []
        self.counts[0] += 1
        return [nak_frame(dmac=lanes[0] & (1 << 48) - 1, sport=lanes[0] >> 48 & 0xFFFF,
                          smac=lanes[1] & (1 << 48) - 1, sip=lanes[2] & 0xFFFFFFFF, dip=lanes[2] >> 32 & 0xFFFFFFFF,
                          dqpn=lanes[3] & 0xFFFFFF, pkey=lanes[3] >> 24 & 0xFFFF, psn=event["psn"] & 0xFFFFFF)]


def nak_frame(*, dmac, smac, sip, dip, sport, dqpn, pkey, psn):
    """The 62-byte NAK frame the datasheet defines for these fields."""
    eth = dmac.to_bytes(6, "big") + smac.to_bytes(6, "big") + struct.pack(">H", 0x0800)
    ip_words = [0x4500, 48, 0, 0x4000, 64 << 8 | 17, 0, sip >> 16, sip & 0xFFFF, dip >> 16, dip & 0xFFFF]
    chk = ~_ones_sum(ip_words) & 0xFFFF
    ip = struct.pack(">BBHHHBBHII", 0x45, 0, 48, 0, 0x4000, 64, 17, chk, sip, dip)
    udp = struct.pack(">HHHH", sport, 4791, 28, 0)
    bth = struct.pack(">BBHI I", 0x11, 0, pkey, dqpn, psn)
    aeth = struct.pack(">I", 0x60 << 24)
    masked = bytearray(ip + udp + bth + aeth)
    masked[1] = masked[8] = 0xFF
    masked[10:12] = b"\xff\xff"
    masked[26:28] = b"\xff\xff"
    masked[32] = 0xFF
    icrc = struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(masked)))
    return eth + ip + udp + bth + aeth + icrc


def nak_trace(seed, n_items, *, n_qps=16, **_):
    """Seeded ``(commands, events)``: contexts for most QPs (some written with valid clear), then events (NACKs,
    non-NACKs, QPs never set up and out of range)."""
    import random
    from lbpipe.hdl.pro.nak import nak_context_commands
    rng = random.Random(seed)
    commands = []
    # Every QP of a small block; of a large one, QPs around each 1,024-QP bank boundary and a few others.
    qps = list(range(n_qps)) if n_qps <= 64 else sorted(
        {q for b in range(0, n_qps, 1024) for q in (b - 1, b, b + 1) if 0 <= q < n_qps} | {n_qps - 1}
        | set(rng.sample(range(n_qps), 16)))
    for qp in qps:
        if rng.random() < 0.8:
            commands += nak_context_commands(
                qp, dmac=rng.getrandbits(48), smac=rng.getrandbits(48), sip=rng.getrandbits(32),
                dip=rng.getrandbits(32), sport=rng.getrandbits(16), dqpn=rng.getrandbits(24),
                pkey=rng.getrandbits(16), valid=rng.random() < 0.9)
    qp_bits = max(1, (n_qps - 1).bit_length())
    events = [{"qp": rng.choice(qps) if rng.random() < 0.8 else rng.randrange(1 << qp_bits),
               "nack": int(rng.random() < 0.7), "psn": rng.getrandbits(24)} for _ in range(n_items)]
    return commands, events


def ooo_nak_events(seed, n_items, *, n_qps=16, bitmap_len=8):
    """NakGen events as pro-ooo emits them on reordered, lossy traffic: :func:`lbpipe.sim.pro.ooo.ooo_trace` run
    through the pro-ooo golden model, each output's ``qp``, ``nack`` and ``nack_psn``."""
    from lbpipe.sim.pro.ooo import Ooo, ooo_trace
    ooo = Ooo(n_qps=n_qps, bitmap_len=bitmap_len)
    events = []
    for ev in ooo_trace(seed, n_items, n_qps=n_qps, bitmap_len=bitmap_len):
        if "ctl" in ev:
            ooo.control(ev["ctl"])
        elif "item" in ev:
            item = {"kind": 0, "timeout": 0, "qp": 0, "psn": 0, "tag": 0, **ev["item"]}
            out = ooo.process(item)
            events.append({"qp": item["qp"], "nack": out["nack"], "psn": out["nack_psn"]})
    return events

