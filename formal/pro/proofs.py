"""Proofs of the PRO blocks: the stream contract of the round-robin scheduler, small sizes."""

from lbpipe.hdl.pro.rr import RoundRobin

from lbpipe.formal.lib.standard import metadata_block_proofs

__all__ = ["PROOFS"]


def _rr():
    return RoundRobin(n_qps=2, n_tors=1, m_paths=2, batch=1)


# docs/pro_rr.md: reset clears the counters and sweeps Q and T, max(n_qps, n_tors) clocks with the inputs not ready;
# the sweep's length plus one clock is when the input must be ready again.
PROOFS = metadata_block_proofs(
    "pro-rr", "n_qps=2, n_tors=1, m_paths=2", _rr, RoundRobin.latency, contract_depth=14, valid_depth=12,
    stats_cleared=True, ready_within=3, reset_prop="reset empties the pipeline, clears stats, sweep ends",
    reset_cover=6)
