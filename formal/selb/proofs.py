"""Proofs of the SELB blocks, small sizes: the stream contract (with the ``smp`` stream), valid independence and
reset of the clustering engine; the same three of the per-flow rerouting, and its decisions (:mod:`.reroute`). The
harnesses use the blocks' public ports only (``i``, ``smp``, ``ctl``, ``o``, ``stats``)."""

from lbpipe.hdl.selb.cluster import Cluster
from lbpipe.hdl.selb.reroute import Reroute

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.standard import metadata_block_proofs
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

from .reroute import RerouteDecisions

__all__ = ["PROOFS", "CLUSTER_SMALL", "REROUTE_SMALL"]

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


# -- per-flow rerouting -----------------------------------------------------------------------------------------------

#: The small rerouting block: 2 flows (a 2-clock sweep after reset), 4 paths (a power of two, as the block requires),
#: 4-bit ticks, a hold of 4 ticks (the timer wraps every 16).
REROUTE_SMALL = dict(n_flows=2, n_paths=4, time_bits=4, hold=4)
_REROUTE_LABEL = "n_flows=2, n_paths=4, time_bits=4, hold=4"


def _reroute():
    return Reroute(**REROUTE_SMALL)


# docs/selb_reroute.md: a packet leaves 5 clocks after acceptance, all stages move together (at most 5 inside, an
# output within 5 ready cycles); reset empties the pipeline, clears the counters and sweeps the flow table (n_flows
# = 2 clocks, input not ready); ctl is always ready and ignored, so the input follows o.ready from then on. The deep
# contract stops at 18: BMC step 18 ended after 40 s, step 19 had not ended after 200 more.
PROOFS += metadata_block_proofs(
    "selb-reroute", _REROUTE_LABEL, _reroute, Reroute.latency, contract_depth=14, valid_depth=12,
    stats_cleared=True, ready_within=2, reset_prop="reset empties the pipeline, clears stats, sweep ends",
    deep_depth=18)
_REROUTE_DECISIONS = ("a reroute goes to a path the cluster offered, tail exactly on the deciding packet, "
                      f"one reroute per hold ticks ({_REROUTE_LABEL})")
PROOFS += [
    Proof("selb-reroute", _REROUTE_DECISIONS,
          lambda: RerouteDecisions(_reroute, n_paths=4, time_bits=4, hold=4), depth=14),
]
# No deep row of the decisions: BMC step 13 ends after 10 s, step 14 had not ended after 90 s more.
