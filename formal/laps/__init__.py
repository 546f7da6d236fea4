"""Formal proofs of the LAPS blocks."""
