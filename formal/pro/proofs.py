"""Proofs of the PRO blocks: the stream contract of the round-robin scheduler, small sizes."""

from lbpipe.hdl.pro.rr import RoundRobin

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

__all__ = ["PROOFS"]


def _rr():
    return RoundRobin(n_qps=2, n_tors=1, m_paths=2, batch=1)


PROOFS = [
    Proof("pro-rr", "stream contract (n_qps=2, n_tors=1, m_paths=2)",
          lambda: StreamContract(_rr, capacity=RoundRobin.latency, stall_bound=RoundRobin.latency), depth=14),
    Proof("pro-rr", "valid independent of ready (n_qps=2, n_tors=1, m_paths=2)",
          lambda: ValidIndependence(_rr), depth=12),
]

PROOFS.append(
    # docs/pro_rr.md: reset clears the counters and sweeps Q and T, max(n_qps, n_tors) clocks with the inputs not
    # ready; the sweep's length plus one clock is when the input must be ready again.
    Proof("pro-rr", "reset empties the pipeline, clears stats, sweep ends (n_qps=2, n_tors=1, m_paths=2)",
          lambda: ResetEmpty(_rr, stats_cleared=True, ready_within=3), method="prove",
          depth=RoundRobin.latency + 2, cover_depth=RoundRobin.latency + 6))

PROOFS.append(
    Proof("pro-rr", "stream contract (n_qps=2, n_tors=1, m_paths=2), deep", PROOFS[0].build, depth=20, deep=True))
