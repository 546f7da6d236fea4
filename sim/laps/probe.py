"""Golden model of the LAPS probe frame (:class:`lbpipe.hdl.laps.probe.ProbeGen`): the probe a triggering frame
leaves behind it, byte for byte (docs/laps_tx_wire.md, "Probe frames")."""

__all__ = ["probe_frame", "MAX_PROBE_BYTES"]

#: The probe is built from the triggering frame's first two 64-byte beats.
MAX_PROBE_BYTES = 128


def _ones_add(a, b):
    s = a + b
    return (s & 0xFFFF) + (s >> 16)


def probe_frame(frame, *, pid, count, anchors, ipv6, l3_off, l4_off, time, dport, laps_port):
    """The probe frame for ``frame`` (the triggering frame as it leaves the LAPS editor), at most
    :data:`MAX_PROBE_BYTES` long (118 with the parser's largest headers). ``anchors`` holds anchor ``a`` in bits
    ``32a`` up; ``dport`` is the frame's original UDP destination port. The frame's bytes up to its UDP source port
    are kept; the IPv4 total length and header checksum (RFC 1624, from the frame's own) or the IPv6 payload length
    are rewritten."""
    length = l4_off + 8 + 12 + 4 * count
    if length > MAX_PROBE_BYTES:
        raise ValueError(f"a probe of {length} bytes: the parser passes no such headers")
    out = bytearray(frame[:l4_off + 2])
    if ipv6:
        out[l3_off + 4:l3_off + 6] = (length - l3_off - 40).to_bytes(2, "big")
    else:
        old_tl = int.from_bytes(frame[l3_off + 2:l3_off + 4], "big")
        old_hc = int.from_bytes(frame[l3_off + 10:l3_off + 12], "big")
        new_tl = length - l3_off
        s = _ones_add(_ones_add(old_hc ^ 0xFFFF, old_tl ^ 0xFFFF), new_tl)
        out[l3_off + 2:l3_off + 4] = new_tl.to_bytes(2, "big")
        out[l3_off + 10:l3_off + 12] = (s ^ 0xFFFF).to_bytes(2, "big")
    out += laps_port.to_bytes(2, "big") + (8 + 12 + 4 * count).to_bytes(2, "big") + bytes(2)
    out += bytes([0x80 | count, 0]) + pid.to_bytes(2, "big") + time.to_bytes(6, "big") + dport.to_bytes(2, "big")
    for a in range(count):
        out += ((anchors >> (32 * a)) & 0xFFFF_FFFF).to_bytes(4, "big")
    return bytes(out)
