"""Proofs of the Themis blocks: the stream contract of Themis-S at small sizes."""

from lbpipe.hdl.themis.themis_s import ThemisS

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

__all__ = ["PROOFS"]


def _themis_s():
    return ThemisS(n_paths=3, mode="sport", hash_bits=4)


PROOFS = [
    Proof("themis-s", "stream contract (n_paths=3)",
          lambda: StreamContract(_themis_s, capacity=ThemisS.latency, stall_bound=ThemisS.latency), depth=16),
    Proof("themis-s", "valid independent of ready (n_paths=3)",
          lambda: ValidIndependence(_themis_s), depth=8),
]

PROOFS.append(
    # docs/themis.md: stats clear on reset; the input is ready whenever the output is (no sweep).
    Proof("themis-s", "reset empties the pipeline, clears stats (n_paths=3)",
          lambda: ResetEmpty(_themis_s, stats_cleared=True, ready_within=0), method="prove",
          depth=ThemisS.latency + 2, cover_depth=ThemisS.latency + 4))

PROOFS.append(
    Proof("themis-s", "stream contract (n_paths=3), deep", PROOFS[0].build, depth=20, deep=True))
