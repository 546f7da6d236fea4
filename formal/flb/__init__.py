"""Formal proofs of the FLB blocks."""
