"""Proofs of the SELB blocks, small sizes: the stream contract (with the ``smp`` stream), valid independence and
reset of the clustering engine. The harnesses use the block's public ports only (``i``, ``smp``, ``ctl``, ``o``,
``stats``)."""

from lbpipe.hdl.selb.cluster import Cluster

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

__all__ = ["PROOFS", "CLUSTER_SMALL"]

#: The small clustering engine: 4 paths, 3 clusters, 4-bit queues, one sweep, one draw per centroid.
CLUSTER_SMALL = dict(n_paths=4, k=3, q_bits=4, iter_cap=1, draws=1, theta=2)
_LABEL = "n_paths=4, k=3, q_bits=4, iter_cap=1"


def _cluster():
    return Cluster(**CLUSTER_SMALL)


# docs/selb_cluster.md: a lookup leaves 2 clocks after acceptance; a held output holds both inputs, but the lookup in
# the first stage drains into the output register as soon as it is free (a tick waiting for the engine or a command
# holds only acceptance), so an item inside leaves within 2 ready cycles. Reset empties the pipeline and clears the
# counters; "input ready again" is not asserted: a tick offered while the engine runs holds both inputs, at any time.
# The deep contract stops at 16: BMC step 16 ended after 17 s, step 19 after 51 s, step 20 after 89 s (doubling each
# step), and the deep rows' budget goes to the parser's.
PROOFS = [
    Proof("selb-cluster", f"stream contract (with smp, {_LABEL})",
          lambda: StreamContract(_cluster, extra=("smp",), capacity=Cluster.latency, stall_bound=Cluster.latency),
          depth=12),
    Proof("selb-cluster", f"valid independent of ready ({_LABEL})",
          lambda: ValidIndependence(_cluster, extra=("smp",)), depth=8),
    Proof("selb-cluster", f"reset empties the pipeline, clears stats ({_LABEL})",
          lambda: ResetEmpty(_cluster, extra=("smp",), stats_cleared=True), method="prove",
          depth=Cluster.latency + 2, cover_depth=Cluster.latency + 4),
    Proof("selb-cluster", f"stream contract (with smp, {_LABEL}), deep",
          lambda: StreamContract(_cluster, extra=("smp",), capacity=Cluster.latency, stall_bound=Cluster.latency),
          depth=16, deep=True),
]
