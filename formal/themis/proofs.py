"""Proofs of the Themis blocks: the stream contract of Themis-S at small sizes."""

from lbpipe.hdl.themis.themis_s import ThemisS

from lbpipe.formal.lib.standard import metadata_block_proofs

__all__ = ["PROOFS"]


def _themis_s():
    return ThemisS(n_paths=3, mode="sport", hash_bits=4)


# docs/themis.md: stats clear on reset; the input is ready whenever the output is (no sweep).
PROOFS = metadata_block_proofs(
    "themis-s", "n_paths=3", _themis_s, ThemisS.latency, contract_depth=16, valid_depth=8, stats_cleared=True,
    ready_within=0)
