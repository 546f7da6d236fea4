"""Golden model of :class:`lbpipe.hdl.packet.laps_editor.LapsEditor`: frames and their ``LapsEdit`` actions in, frames out.

The rules are the hardware module docstring's, stated here once in Python: :func:`edit_applies` (when an edit is
made), UPDATE, INSERT and REMOVE of the LAPS header at ``h = l4_off + 8``, the IPv4 total length and header checksum,
the IPv6 payload length, the UDP length, destination port and checksum. Checksums are updated incrementally (RFC 1624
equation 3), as the hardware does, so a wrong checksum in the input stays wrong by the same amount.

A frame longer than the hardware's beat FIFO (more than ``depth`` 64-byte beats, ``depth * 64`` bytes) is dropped,
whatever its action says, and counted as too long (counter 6) and in no other counter: the store-and-forward
hardware cannot hold it until its length is known, so it cuts it and drops it rather than deadlock its input. A
frame of exactly ``depth`` beats is processed as any other (an INSERT on it is refused: the result would not fit).

Cut-through (``cut_through=True``): the hardware sends a frame as it arrives and holds none whole, so neither rule
exists there: a frame of any length is edited (or passed, or dropped) by its action, an INSERT is never refused for
the length of its result, and nothing is counted as too long. Every other rule, and every output byte of a frame of
at most ``depth`` beats whose result fits, is the same in both modes.
"""

from lbpipe.hdl.packet.laps_editor import N_COUNTERS, OP_INSERT, OP_PASS, OP_UPDATE, check_parameters

__all__ = ["LapsEditor", "csum_add", "csum_update"]

#: Bytes at the head of a frame the editor rewrites in place (docs/packet_io.md: ``h + K <= 128``).
WINDOW = 128
_BEAT = 64
#: Where the IP header may start: after 0, 1 or 2 VLAN tags.
_L3_OFFSETS = (14, 18, 22)


def edit_applies(*, op, l3_off, l4_off, count, length, depth):
    """Whether an UPDATE, INSERT or REMOVE is made on a frame of ``length`` bytes (docs/packet_io.md, "When an edit
    applies"): ``l4_off`` even, ``l3_off`` 14, 18 or 22, ``l4_off >= l3_off + 20``, ``count`` at most 4, the header
    (UDP end ``h`` plus ``K = 12 + 4 count``) within the 128-byte window; an INSERT needs the UDP header in the frame
    and the longer frame in the buffer (``depth`` beats; ``None``: no buffer, cut-through), the others the whole
    LAPS header in the frame."""
    udp_end = l4_off + 8
    size = 12 + 4 * count
    if l4_off % 2 or l3_off not in _L3_OFFSETS or l4_off < l3_off + 20 or count > 4 or udp_end + size > WINDOW:
        return False
    if op == OP_INSERT:
        return udp_end <= length and (depth is None or length + size <= depth * _BEAT)
    return udp_end + size <= length

PASSED, UPDATED, INSERTED, REMOVED, DROPPED, REFUSED, TOO_LONG = range(N_COUNTERS)


def csum_add(a, b):
    """Ones' complement sum of two 16-bit values."""
    s = a + b
    return (s & 0xFFFF) + (s >> 16)


def csum_update(checksum, old_words, new_words):
    """RFC 1624 eqn 3: HC' = ~(~HC + ~m + m'), for 16-bit words ``old_words`` replaced by ``new_words``."""
    s = ~checksum & 0xFFFF
    for w in old_words:
        s = csum_add(s, ~w & 0xFFFF)
    for w in new_words:
        s = csum_add(s, w)
    return ~s & 0xFFFF


def _words(data):
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def _get16(frame, at):
    return int.from_bytes(frame[at:at + 2], "big")


def _put16(frame, at, value):
    frame[at:at + 2] = value.to_bytes(2, "big")


class LapsEditor:
    """Parameters as :class:`lbpipe.hdl.packet.laps_editor.LapsEditor`."""

    def __init__(self, *, depth=256, user_width=1, laps_port=0xC1A5, cut_through=False):
        check_parameters(depth=depth, user_width=user_width, laps_port=laps_port, cut_through=cut_through)
        self.depth = depth
        self.cut_through = cut_through
        self.laps_port = laps_port
        self.counts = [0] * N_COUNTERS

    def reset(self):
        """Hardware reset: the counters clear."""
        self.counts = [0] * N_COUNTERS

    def stats(self):
        """Counters as the RTL's ``stats`` holds them: passed, updated, inserted, removed, dropped, refused, too
        long."""
        return [c % (1 << 32) for c in self.counts]

    def process(self, frame, action):
        """The frames (a list of 0 or 1 ``bytes``) that leave for ``frame`` and its action (a dict of ``LapsEdit``
        fields; missing fields are 0): none for a frame longer than ``depth`` beats, whatever the action
        (store-and-forward only)."""
        frame = bytes(frame)
        a = {name: int(action.get(name, 0)) for name in
             ("op", "drop", "ipv6", "l3_off", "l4_off", "count", "probe", "ack", "sr_idx", "pid", "time", "anchors")}
        if not self.cut_through and len(frame) > self.depth * _BEAT:
            self.counts[TOO_LONG] += 1
            return []
        if a["drop"]:
            self.counts[DROPPED] += 1
            return []
        op = a["op"]
        if op == OP_PASS:
            self.counts[PASSED] += 1
            return [frame]
        if not edit_applies(op=op, l3_off=a["l3_off"], l4_off=a["l4_off"], count=a["count"], length=len(frame),
                            depth=None if self.cut_through else self.depth):
            self.counts[REFUSED] += 1
            return [frame]
        out = bytearray(frame)
        h = a["l4_off"] + 8
        k = 12 + 4 * a["count"]
        l3, l4 = a["l3_off"], a["l4_off"]
        fixed = bytes([a["probe"] << 7 | a["ack"] << 6 | a["count"], a["sr_idx"]]) + a["pid"].to_bytes(2, "big") + \
            a["time"].to_bytes(6, "big")
        old_dport, old_ulen, old_csum = _get16(out, l4 + 2), _get16(out, l4 + 4), _get16(out, l4 + 6)
        if op == OP_UPDATE:
            new_fixed = bytes([(fixed[0] & 0xC0) | (out[h] & 0x3F)]) + fixed[1:]
            old_w, new_w = _words(out[h:h + 10]), _words(new_fixed)
            out[h:h + 10] = new_fixed
            self.counts[UPDATED] += 1
            delta = 0
            new_dport = old_dport
        elif op == OP_INSERT:
            anchors = b"".join(((a["anchors"] >> (32 * i)) & 0xFFFFFFFF).to_bytes(4, "big")
                               for i in range(a["count"]))
            header = fixed + old_dport.to_bytes(2, "big") + anchors
            old_w, new_w = [], _words(header)
            out[h:h] = header
            new_dport = self.laps_port
            delta = k
            self.counts[INSERTED] += 1
        else:
            removed = out[h:h + k]
            old_w, new_w = _words(removed), []
            new_dport = _get16(removed, 10)
            del out[h:h + k]
            delta = -k
            self.counts[REMOVED] += 1
        new_ulen = (old_ulen + delta) & 0xFFFF
        _put16(out, l4 + 2, new_dport)
        _put16(out, l4 + 4, new_ulen)
        if a["ipv6"]:
            _put16(out, l3 + 4, (_get16(out, l3 + 4) + delta) & 0xFFFF)
            if old_csum:
                # The UDP length is in the datagram and in the pseudo-header: it changes twice.
                csum = csum_update(old_csum, [old_dport, old_ulen, old_ulen] + old_w,
                                   [new_dport, new_ulen, new_ulen] + new_w)
                _put16(out, l4 + 6, csum or 0xFFFF)
        elif op != OP_UPDATE:
            old_total = _get16(out, l3 + 2)
            new_total = (old_total + delta) & 0xFFFF
            _put16(out, l3 + 2, new_total)
            _put16(out, l3 + 10, csum_update(_get16(out, l3 + 10), [old_total], [new_total]))
        if not a["ipv6"]:
            _put16(out, l4 + 6, 0)
        return [bytes(out)]
