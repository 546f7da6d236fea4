"""Golden model of :mod:`lbpipe.hdl.lib.crc`: CRC-32 as the Ethernet FCS, its running state, and the RoCEv2 ICRC.

CRC-32 here is the Ethernet FCS (and zlib's ``crc32``): reflected polynomial 0xEDB88320, initial register
0xFFFFFFFF, final XOR 0xFFFFFFFF, bytes taken least significant bit first, the result transmitted least significant
byte first.

**State convention** (shared with the hardware): the *state* is the running 32-bit register of the reflected
byte-table algorithm, ``state = T[(state ^ byte) & 0xFF] ^ (state >> 8)``, before the final XOR. It starts at
``init`` (0xFFFFFFFF) and after a prefix ``p`` of a message it is ``zlib.crc32(p) ^ 0xFFFFFFFF``.
:class:`lbpipe.hdl.lib.crc.CRC32Stream` holds exactly this value after every full beat of a frame.

The register update is linear over GF(2) in (state, bytes). The helpers below name the two facts the hardware is
built on:

* :func:`crc32_advance` with ``n > 0`` is the state after ``n`` zero bytes (``A**n @ state``, where ``A`` is the
  zero-byte step); with ``n < 0`` it undoes zero bytes (``A`` is invertible because the top bytes of the table are
  a permutation of 0..255).
* Leading zero bytes do not move a zero state, and trailing zero bytes only advance it, so the state of ``k``
  bytes is the state of those bytes followed by ``j`` zeros, advanced by ``-j``.

This model is written independently of the hardware's matrices (a byte table, not zlib and not unit vectors), so
the tests check one against the other and both against zlib.

:func:`icrc` is the RoCEv2 invariant CRC of an Ethernet / [802.1Q] / IPv4 / UDP / BTH frame (IBA annex A17);
:func:`icrc_stream_bytes` is the byte string whose plain CRC (initial register 0) is that ICRC, which is how a
deparser feeds the frame to :class:`lbpipe.hdl.lib.crc.CRC32Stream` without realigning it.
"""

import struct

__all__ = [
    "POLY", "INIT", "XOROUT", "CHECK",
    "crc32", "crc32_state", "crc32_advance", "crc32_final",
    "CRC32StreamModel",
    "icrc_pseudo_packet", "icrc", "icrc_stream_bytes",
]

#: Reflected CRC-32 polynomial (0x04C11DB7 bit-reversed).
POLY = 0xEDB88320
#: Initial register of the Ethernet FCS.
INIT = 0xFFFFFFFF
#: Final XOR of the Ethernet FCS.
XOROUT = 0xFFFFFFFF
#: CRC-32 of ``b"123456789"`` (the catalogue's check value).
CHECK = 0xCBF43926

_MASK = 0xFFFFFFFF


def _make_table():
    table = []
    for byte in range(256):
        reg = byte
        for _ in range(8):
            reg = (reg >> 1) ^ POLY if reg & 1 else reg >> 1
        table.append(reg)
    return table


_TABLE = _make_table()
# The top byte of each entry is distinct, which is what makes the zero-byte step invertible.
_TOP_INDEX = {entry >> 24: index for index, entry in enumerate(_TABLE)}
assert len(_TOP_INDEX) == 256


def _check_state(state):
    if not isinstance(state, int) or not 0 <= state <= _MASK:
        raise ValueError(f"CRC-32 state must be an integer from 0 to 0xFFFFFFFF, not {state!r}")


def crc32_state(data, state=INIT):
    """The running register after ``data``, starting from ``state`` (no final XOR).

    Parameters
    ----------
    data : bytes-like
    state : int
        Register before ``data``: :data:`INIT` for the start of a message, or the state of a prefix.

    Returns
    -------
    int
        The register after ``data``; ``crc32_state(data) == zlib.crc32(data) ^ 0xFFFFFFFF``.
    """
    _check_state(state)
    reg = state
    for byte in bytes(data):
        reg = _TABLE[(reg ^ byte) & 0xFF] ^ (reg >> 8)
    return reg


def crc32_final(state, xorout=XOROUT):
    """The CRC value of a message whose running register is ``state``."""
    _check_state(state)
    return state ^ xorout


def crc32(data, init=INIT, xorout=XOROUT):
    """CRC-32 of ``data`` (the Ethernet FCS and ``zlib.crc32`` with the defaults).

    Parameters
    ----------
    data : bytes-like
    init : int
        Initial register.
    xorout : int
        Final XOR.

    Returns
    -------
    int
        The CRC; it is transmitted least significant byte first (``value.to_bytes(4, "little")``).
    """
    _check_state(xorout)
    return crc32_state(data, init) ^ xorout


def crc32_advance(state, n):
    """The register after ``n`` zero bytes from ``state``; a negative ``n`` undoes ``-n`` zero bytes.

    ``crc32_advance(crc32_state(p + bytes(j)), -j) == crc32_state(p)`` for any ``p`` and ``j``.
    """
    _check_state(state)
    if not isinstance(n, int):
        raise TypeError(f"n must be an integer, not {n!r}")
    reg = state
    if n >= 0:
        for _ in range(n):
            reg = _TABLE[reg & 0xFF] ^ (reg >> 8)
    else:
        for _ in range(-n):
            # reg = T[i] ^ (prev >> 8): prev >> 8 has a zero top byte, so T[i]'s top byte is reg's.
            index = _TOP_INDEX[reg >> 24]
            reg = (((reg ^ _TABLE[index]) << 8) | index) & _MASK
    return reg


class CRC32StreamModel:
    """Beat-level model of :class:`lbpipe.hdl.lib.crc.CRC32Stream`: one CRC per frame.

    A frame is a run of beats ending with ``last``; ``keep`` is used on the last beat only (its valid bytes are the
    low ones, at least one), and every byte of an earlier beat counts.

    Parameters
    ----------
    data_width : int
        Beat width in bits.
    init, xorout : int
        As for :func:`crc32`.
    """

    def __init__(self, *, data_width=512, init=INIT, xorout=XOROUT):
        self.n_bytes = data_width // 8
        self.init = init
        self.xorout = xorout
        self.reset()

    def reset(self):
        """Forget the frame in progress."""
        self.state = self.init

    def beat(self, data, keep, last):
        """Take one beat (``data`` an integer, byte 0 in bits 7..0); return the frame's CRC on ``last``, else None."""
        raw = data.to_bytes(self.n_bytes, "little")
        if last:
            n_valid = bin(keep).count("1")
            if not 1 <= n_valid <= self.n_bytes or keep != (1 << n_valid) - 1:
                raise ValueError(f"keep {keep:#x} of a last beat is not contiguous from byte 0")
            raw = raw[:n_valid]
        self.state = crc32_state(raw, self.state)
        if last:
            value = self.state ^ self.xorout
            self.reset()
            return value
        return None

    def frame(self, payload):
        """The CRC of a whole frame of bytes, through :meth:`beat` (so it also checks the beat splitting)."""
        out = None
        n = self.n_bytes
        for offset in range(0, max(len(payload), 1), n):
            chunk = payload[offset:offset + n]
            last = offset + n >= len(payload)
            out = self.beat(int.from_bytes(chunk.ljust(n, b"\0"), "little"), (1 << len(chunk)) - 1, last)
        return out


# --- RoCEv2 ICRC ---------------------------------------------------------------------------------------------------

_ETH_VLAN = 0x8100
_ETH_IPV4 = 0x0800
_IP_UDP = 17
_ROCE_PORT = 4791
_BTH_LEN = 12
_ICRC_LEN = 4


def _locate(frame):
    """Offsets (l3, udp, bth, icrc) of an Ethernet / [802.1Q] / IPv4 / UDP 4791 / BTH frame."""
    frame = bytes(frame)
    if len(frame) < 14:
        raise ValueError("frame shorter than an Ethernet header")
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    l3 = 14
    if ethertype == _ETH_VLAN:
        if len(frame) < 18:
            raise ValueError("frame shorter than a tagged Ethernet header")
        (ethertype,) = struct.unpack_from("!H", frame, 16)
        l3 = 18
    if ethertype != _ETH_IPV4:
        raise ValueError(f"EtherType {ethertype:#06x} is not IPv4")
    if len(frame) < l3 + 20:
        raise ValueError("frame shorter than its IPv4 header")
    ver_ihl, total, proto = frame[l3], struct.unpack_from("!H", frame, l3 + 2)[0], frame[l3 + 9]
    ihl = (ver_ihl & 0xF) * 4
    if ver_ihl >> 4 != 4 or ihl < 20:
        raise ValueError("not an IPv4 header")
    if proto != _IP_UDP:
        raise ValueError(f"IP protocol {proto} is not UDP")
    udp = l3 + ihl
    end = l3 + total
    if end > len(frame) or udp + 8 + _BTH_LEN + _ICRC_LEN > end:
        raise ValueError("IPv4 total length does not fit the frame or leaves no room for UDP, BTH and ICRC")
    (dport,) = struct.unpack_from("!H", frame, udp + 2)
    if dport != _ROCE_PORT:
        raise ValueError(f"UDP destination port {dport} is not RoCEv2's {_ROCE_PORT}")
    return l3, udp, udp + 8, end - _ICRC_LEN


def icrc_pseudo_packet(frame):
    """The bytes the ICRC covers: eight 0xFF bytes, then IPv4 header to the end of the payload (the ICRC itself
    excluded) with IPv4 TOS, TTL and header checksum, the UDP checksum and BTH byte 4 (FECN, BECN and the six
    reserved bits) set to ones. Ethernet padding after the IP packet is not covered.

    Raises
    ------
    ValueError
        If ``frame`` is not an Ethernet / [802.1Q] / IPv4 / UDP (port 4791) / BTH frame with room for its ICRC.
    """
    l3, udp, bth, end = _locate(frame)
    p = bytearray(bytes(frame)[l3:end])
    p[1] = 0xFF                   # TOS (DSCP and ECN)
    p[8] = 0xFF                   # TTL
    p[10:12] = b"\xff\xff"        # header checksum
    p[udp - l3 + 6:udp - l3 + 8] = b"\xff\xff"     # UDP checksum
    p[bth - l3 + 4] = 0xFF        # FECN, BECN, reserved 6
    return b"\xff" * 8 + bytes(p)


def icrc(frame_bytes):
    """The RoCEv2 ICRC of a frame, as transmitted: 4 bytes, least significant byte first.

    Parameters
    ----------
    frame_bytes : bytes-like
        Ethernet / [802.1Q] / IPv4 / UDP / BTH / ... frame without FCS; its ICRC field (the last 4 bytes of the IP
        packet) is not read.

    Returns
    -------
    bytes
    """
    return crc32(icrc_pseudo_packet(frame_bytes)).to_bytes(4, "little")


def icrc_stream_bytes(frame_bytes):
    """The frame as a deparser feeds it to a CRC with *initial register 0* so that the result is the ICRC.

    The frame is cut before its ICRC; the Ethernet header (14 or 18 bytes) becomes zeros followed by four 0xFF
    bytes, and the variant fields are set to ones. Why this works: starting from register 0xFFFFFFFF is the same as
    starting from 0 with the first four message bytes complemented, so the pseudo-packet's ``FF x 8`` prefix equals
    ``00 x 4 FF x 4`` from register 0; and leading zero bytes leave a zero register unchanged, so any number of
    zeros may come first. The bytes keep their places in the frame: no realignment, only byte substitution.

    Returns
    -------
    bytes
        ``crc32(icrc_stream_bytes(f), init=0) == int.from_bytes(icrc(f), "little")``.
    """
    l3 = _locate(frame_bytes)[0]
    # pseudo[8:] is the masked IP header to payload, in frame order from l3.
    return bytes(l3 - 4) + b"\xff" * 4 + icrc_pseudo_packet(frame_bytes)[8:]
