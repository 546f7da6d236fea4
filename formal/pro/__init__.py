"""Formal proofs of the PRO blocks."""
