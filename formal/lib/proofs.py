"""Proofs of the shared primitives: ring-buffer pointers (k-induction), the CRC-32 matrices and incremental update
(the ``gf2`` method: exact evaluation of the XOR network over GF(2), :mod:`.gf2`), and the AXI4-Lite control
bridge (BMC; its handshake rules also by k-induction)."""

from lbpipe.hdl.lib.axil import ControlBridge

from .axil import AxilBridgeContract
from .crc import CrcIncremental
from .harness import Proof
from .ring import RingInvariants

__all__ = ["PROOFS"]

#: The bridge instance the AXI4-Lite proofs use: the smallest address width that reaches COMMIT (0x18), the default
#: ident written out (the harness checks ID reads against it).
AXIL_IDENT = 0x4C425031


def _bridge():
    return ControlBridge(addr_width=5, ident=AXIL_IDENT)


PROOFS = [
    Proof("lib-ring", "ring invariants (depth 5, overwrite)",
          lambda: RingInvariants(depth=5, overwrite=True), method="prove", depth=2,
          cover_depth=14),
    Proof("lib-ring", "ring invariants (depth 5, refuse when full)",
          lambda: RingInvariants(depth=5, overwrite=False), method="prove", depth=2,
          cover_depth=14),
    Proof("lib-ring", "ring invariants (depth 8, overwrite)",
          lambda: RingInvariants(depth=8, overwrite=True), method="prove", depth=2,
          cover_depth=20),
    Proof("lib-ring", "ring invariants (depth 1, refuse when full)",
          lambda: RingInvariants(depth=1, overwrite=False), method="prove", depth=2,
          cover_depth=6),
    Proof("lib-crc", "crc32_update = bit-serial; incremental = recomputation (8 bytes, 2-byte field)",
          lambda: CrcIncremental(n_bytes=8, field_bytes=2), method="gf2", depth=1),
    Proof("lib-crc", "crc32_update = bit-serial; incremental = recomputation (8 bytes, 4-byte field)",
          lambda: CrcIncremental(n_bytes=8, field_bytes=4), method="gf2", depth=1, deep=True),
    Proof("lib-crc", "crc32_update = bit-serial; incremental = recomputation (16 bytes, 2-byte field)",
          lambda: CrcIncremental(n_bytes=16, field_bytes=2), method="gf2", depth=1, deep=True),
    Proof("lib-axil", "AXI4-Lite handshake, counts, RESP, reset, reads (addr_width 5)",
          lambda: AxilBridgeContract(_bridge, ident=AXIL_IDENT, part="handshake"), depth=20),
    # k-induction: the handshake rules with the invariants tying the harness's counts to READY, BVALID and
    # ctl.valid (formal/lib/axil.py, _inductive); the covers from reset as in the BMC row.
    Proof("lib-axil", "AXI4-Lite handshake, counts, RESP, reset, reads, for all time (addr_width 5)",
          lambda: AxilBridgeContract(_bridge, ident=AXIL_IDENT, part="handshake", invariants=True),
          method="prove", depth=3, cover_depth=20),
    Proof("lib-axil", "writes reach ctl in issue order (addr_width 5)",
          lambda: AxilBridgeContract(_bridge, ident=AXIL_IDENT, part="order"), depth=10, cover_depth=12),
    Proof("lib-axil", "AXI4-Lite handshake, counts, RESP, reset, reads (addr_width 5), deep",
          lambda: AxilBridgeContract(_bridge, ident=AXIL_IDENT, part="handshake"), depth=32, deep=True),
    Proof("lib-axil", "writes reach ctl in issue order (addr_width 5), deep",
          lambda: AxilBridgeContract(_bridge, ident=AXIL_IDENT, part="order"), depth=11, cover_depth=12, deep=True),
]
