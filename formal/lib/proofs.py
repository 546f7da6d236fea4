"""Proofs of the shared primitives: ring-buffer pointers (k-induction).

The CRC-32 harness (:mod:`.crc`) is not listed: Yices (and Yosys's MiniSAT) do not close its XOR miter in
minutes even for a 1-byte message (docs/formal.md).
"""

from .harness import Proof
from .ring import RingInvariants

__all__ = ["PROOFS"]

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
]
