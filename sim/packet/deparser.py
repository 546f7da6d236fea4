"""Golden model of :class:`lbpipe.hdl.packet.deparser.Deparser`: what becomes of one frame under one action.

Bit-exact twin of the hardware, written on bytes (no scapy), independently of its matrices: the ICRC change is the
CRC-32 register (:mod:`lbpipe.sim.lib.crc`, a byte table) of the 2-byte port delta from register 0, advanced over the
zero bytes up to the ICRC, and the UDP checksum is updated word by word as RFC 1624 writes it (eqn. 3), not as the
residue sums the hardware uses. :func:`lbpipe.tb.lib.packets.rewrite_udp_sport` is a third, whole-packet computation
(zlib over a delta pseudo-packet) that the tests hold both to.

The rules (the hardware's module docstring explains the choices):

* ``drop``: the frame is discarded (:func:`deparse` returns None), whatever else the action says.
* ``rewrite`` where :func:`rewrite_applies`: the UDP source port at ``l4_off`` is XORed with ``sport_xor`` (big
  endian), the 4 ICRC bytes at ``icrc_off`` (least significant first) are XORed with
  :func:`icrc_delta`, and a non-zero UDP checksum (at ``l4_off + 6``) is updated for both changes; a zero one stays
  zero, and a computed zero is sent as 0xFFFF.
* Otherwise the frame passes unchanged.

**Cut-through** (``cut_through=True``, :func:`deparse_cut_through`): the action is taken before the frame's end is
known, so the rule cannot look at the frame's length (:func:`rewrite_applies_cut_through`: ``rewrite``, ``l4_off``
even, ``icrc_off >= l4_off + 8``). The port and the ICRC bytes that lie in the frame are XORed as in
store-and-forward, the UDP checksum is never written (its update needs the old ICRC, which comes last), and the
frame is sent *bad* (``tuser`` bit 0 set on its last beat) when the rewrite could not be made whole: the frame ends
before the ICRC's last byte, or its UDP checksum is not zero. A frame that passes unchanged is never bad.

**FCS** (``fcs=True``: each frame ends with its 4-byte Ethernet FCS, as from a MAC that keeps it): the rewrite is
decided and checked as in cut-through, in both modes (:func:`deparse_cut_through` with ``fcs``), the frame having
to hold the ICRC *and 4 bytes after it* to be whole. The FCS is never written: the port and ICRC changes leave it
valid, since the CRC-32 of the change pattern (the port delta, ``dist`` zero bytes, the ICRC delta, which is that
pattern's own CRC-32 register, least significant byte first) is 0 and stays 0 over the zero bytes up to the FCS;
a checksum change would not, which is one more reason a non-zero checksum sends the frame bad. Store-and-forward
with ``fcs`` still drops frames longer than ``depth`` beats.
"""

import struct

from lbpipe.sim.lib.crc import crc32_advance, crc32_state

__all__ = ["deparse", "deparse_cut_through", "rewrite_applies", "rewrite_applies_cut_through", "icrc_delta",
           "checksum_update", "BEAT_BYTES", "ICRC_OFF_BITS"]

BEAT_BYTES = 64
ICRC_OFF_BITS = 14

_FIELDS = {"tag": 16, "drop": 1, "rewrite": 1, "l4_off": 8, "icrc_off": ICRC_OFF_BITS, "sport_xor": 16}


def _check_action(action):
    unknown = set(action) - set(_FIELDS)
    if unknown:
        raise ValueError(f"unknown action fields {sorted(unknown)}; the action has {sorted(_FIELDS)}")
    values = {name: int(action.get(name, 0)) for name in _FIELDS}
    for name, width in _FIELDS.items():
        if not 0 <= values[name] < 1 << width:
            raise ValueError(f"action field {name}={values[name]} does not fit in {width} bits")
    return values


def _take(frame_bytes, action, depth):
    """The frame as bytes and the checked action, or None when the frame is dropped: the action says so, or, with
    ``depth``, the frame is longer than a ``depth``-beat buffer. Raises ``ValueError`` for a bad action."""
    frame = bytes(frame_bytes)
    a = _check_action(action)
    if a["drop"] or (depth is not None and len(frame) > BEAT_BYTES * depth):
        return None
    return frame, a


def rewrite_applies(frame_len, l4_off, icrc_off):
    """Whether a rewrite of a ``frame_len``-byte frame with these offsets is performed.

    ``l4_off`` is even, the UDP header (8 bytes) ends at or before ``icrc_off``, and the ICRC lies in the frame and
    ends in its last 64-byte beat: the deparser keeps each frame's last beat (and the 3 bytes before it) to read
    the old ICRC from before the header leaves.
    """
    if l4_off % 2 or icrc_off < l4_off + 8 or icrc_off + 4 > frame_len:
        return False
    return (icrc_off + 3) // BEAT_BYTES == (frame_len - 1) // BEAT_BYTES


def icrc_delta(sport_xor, dist):
    """The ICRC change, as the 32-bit register value, for a port delta followed by ``dist`` bytes up to the ICRC.

    The linear CRC-32 (register 0, no final XOR) of ``sport_xor`` (2 bytes, big endian) followed by ``dist`` zero
    bytes; leading zeros would leave register 0 unchanged, so the pseudo-packet before the port does not matter.
    The ICRC bytes change by ``icrc_delta(...).to_bytes(4, "little")``.
    """
    if not 0 <= sport_xor <= 0xFFFF:
        raise ValueError(f"sport_xor {sport_xor:#x} does not fit 16 bits")
    if dist < 0:
        raise ValueError(f"dist must be at least 0, not {dist}")
    return crc32_advance(crc32_state(sport_xor.to_bytes(2, "big"), 0), dist)


def checksum_update(chksum, old, new, start, changed):
    """RFC 1624 eqn. 3, ``HC' = ~(~HC + ~m + m')`` with end-around carries, over every 16-bit word (counted from
    ``start``, the UDP header) that holds a byte of ``changed`` (offsets). A byte beyond the end of ``old`` reads as
    zero (it is the same in ``old`` and ``new``). A computed 0 is sent as 0xFFFF (RFC 768).

    Parameters
    ----------
    chksum : int
        The old checksum, not 0.
    old, new : bytes
        The frame before and after the change.
    start : int
        Offset of the UDP header.
    changed : iterable of int
        Offsets of the changed bytes.
    """
    words = sorted({start + ((at - start) & ~1) for at in changed})

    def word(frame, at):
        return int.from_bytes(bytes(frame[at:at + 2]).ljust(2, b"\0"), "big")

    total = ~chksum & 0xFFFF
    for at in words:
        total += (~word(old, at) & 0xFFFF) + word(new, at)
        total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF) or 0xFFFF


def deparse(frame_bytes, action, *, depth=None):
    """The frame the deparser sends for ``frame_bytes`` under ``action``, or None if it drops it: when the action
    says so, or when the frame is longer than a ``depth``-beat buffer (64-byte beats), whatever the action.

    Parameters
    ----------
    frame_bytes : bytes-like
        The frame as it arrives (no FCS).
    action : dict
        :func:`lbpipe.hdl.packet.deparser.DeparseAction` fields as integers; missing fields are 0.

    Returns
    -------
    bytes or None

    Raises
    ------
    ValueError
        If a field is unknown or does not fit its width.
    """
    taken = _take(frame_bytes, action, depth)
    if taken is None:
        return None
    frame, a = taken
    l4, icrc_at, sport_xor = a["l4_off"], a["icrc_off"], a["sport_xor"]
    if not a["rewrite"] or not rewrite_applies(len(frame), l4, icrc_at):
        return frame
    out = bytearray(frame)
    (port,) = struct.unpack_from("!H", out, l4)
    struct.pack_into("!H", out, l4, port ^ sport_xor)
    delta = icrc_delta(sport_xor, icrc_at - l4 - 2).to_bytes(4, "little")
    for k in range(4):
        out[icrc_at + k] ^= delta[k]
    (chksum,) = struct.unpack_from("!H", out, l4 + 6)
    if chksum:
        changed = [l4, l4 + 1, *range(icrc_at, icrc_at + 4)]
        struct.pack_into("!H", out, l4 + 6, checksum_update(chksum, frame, out, l4, changed))
    return bytes(out)


def rewrite_applies_cut_through(l4_off, icrc_off):
    """Whether the cut-through deparser rewrites a frame with these offsets (its length is not known yet)."""
    return l4_off % 2 == 0 and icrc_off >= l4_off + 8


def deparse_cut_through(frame_bytes, action, *, fcs=False, depth=None):
    """What the cut-through deparser (or any deparser with ``fcs``) sends for ``frame_bytes`` under ``action``:
    ``None`` if it drops the frame (the action says so, or, with ``depth``, the frame is longer than the
    store-and-forward buffer), else ``(frame, bad)``, ``bad`` being ``tuser`` bit 0 of the last beat forced to 1
    (the module docstring's rule).

    Raises
    ------
    ValueError
        If a field is unknown or does not fit its width.
    """
    taken = _take(frame_bytes, action, depth)
    if taken is None:
        return None
    frame, a = taken
    l4, icrc_at, sport_xor = a["l4_off"], a["icrc_off"], a["sport_xor"]
    if not a["rewrite"] or not rewrite_applies_cut_through(l4, icrc_at):
        return frame, False
    out = bytearray(frame)
    pattern = {l4: sport_xor >> 8, l4 + 1: sport_xor & 0xFF}
    delta = icrc_delta(sport_xor, icrc_at - l4 - 2).to_bytes(4, "little")
    pattern.update({icrc_at + k: delta[k] for k in range(4)})
    for at, value in pattern.items():
        if at < len(out):
            out[at] ^= value
    checksum = frame[l4 + 6:l4 + 8]
    bad = icrc_at + 4 + (4 if fcs else 0) > len(frame) or any(checksum)
    return bytes(out), bool(bad)


def deparse_counted(frame_bytes, action, counters, *, cut_through, depth, fcs=False):
    """A wire pipeline's deparser stage: :func:`deparse_cut_through` (``cut_through`` or ``fcs``; the frame buffer
    bounds the frame only when not cut-through) or :func:`deparse`, counting in ``counters`` a frame the buffer
    cannot hold (``"cut"``), a rewrite that does not apply (``"refused"``) and a frame found bad on the way
    (``"bad"``). Returns ``(frame or None, bad)``."""
    if cut_through or fcs:
        result = deparse_cut_through(frame_bytes, action, fcs=fcs, depth=None if cut_through else depth)
        if result is None:
            counters["cut"] += 1
            return None, False
        out, bad = result
        if action["rewrite"] and not rewrite_applies_cut_through(action["l4_off"], action["icrc_off"]):
            counters["refused"] += 1
        counters["bad"] += bad
        return out, bad
    if len(frame_bytes) > 64 * depth:
        counters["cut"] += 1
    elif action["rewrite"] and not rewrite_applies(len(frame_bytes), action["l4_off"], action["icrc_off"]):
        counters["refused"] += 1
    return deparse(frame_bytes, action, depth=depth), False
