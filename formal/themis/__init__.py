"""Formal proofs of the Themis blocks."""
