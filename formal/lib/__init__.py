"""Harness conventions, the generic stream contract, and proofs of the shared primitives (ring, CRC-32)."""
