"""Formal proofs of the packet I/O stages."""
