"""Formal proofs of the SELB blocks."""
