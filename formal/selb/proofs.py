"""Proofs of the SELB blocks, small sizes: the stream contract (with the ``smp`` stream), valid independence and
reset of the clustering engine; the same three of the per-flow rerouting, and its decisions (:mod:`.reroute`); the
destination reordering's contract in release order, valid independence, reset and who may overtake whom
(:mod:`.reorder`). The harnesses use the blocks' public ports only (``i``, ``smp``, ``ctl``, ``o``, ``stats``)."""

from lbpipe.hdl.selb.cluster import Cluster
from lbpipe.hdl.selb.reorder import Reorder
from lbpipe.hdl.selb.reroute import Reroute

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.standard import metadata_block_proofs
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

from .reorder import ReorderContract, ReorderOvertaking, ReorderReset
from .reroute import RerouteDecisions

__all__ = ["PROOFS", "CLUSTER_SMALL", "REROUTE_SMALL", "REORDER_SMALL"]

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


# docs/selb_reroute.md: a packet leaves 7 clocks after acceptance, all stages move together (at most 7 inside, an
# output within 7 ready cycles); reset empties the pipeline, clears the counters and sweeps the flow table (n_flows
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


# -- destination reordering -------------------------------------------------------------------------------------------

#: The small reordering block: 2 flows (a 2-clock sweep after reset), 2 buffers of 2 items, 4-bit ticks, a timeout
#: of 4 ticks (a power of two below 16, as the block requires).
REORDER_SMALL = dict(n_flows=2, n_buffers=2, depth=2, time_bits=4, timeout=4)
_REORDER_LABEL = "n_flows=2, n_buffers=2, depth=2, time_bits=4, timeout=4"


def _reorder():
    return Reorder(**REORDER_SMALL)


# docs/selb_reorder.md. Inside: a buffer is never left full (at most depth - 1 held in each), a drain takes up to
# depth items out of a freed buffer (one more than it held: the filling item), and the S1, S2 and output registers
# hold one each: 2 x 1 + 1 + 3 = 6. Nothing moves (input offered, o.ready high, no hand-over on either side) for at
# most 6 clocks: an S2 item that opens a buffer or appends (no output; S1 waits a clock), then a timeout's issue clock
# and drain-start clock, the drain's memory read and read register, and the output register's load.
_REORDER_CAPACITY = REORDER_SMALL["n_buffers"] * (REORDER_SMALL["depth"] - 1) + 1 + 3
_REORDER_STALL = 1 + 2 + 2 + 1
PROOFS += [
    Proof("selb-reorder", f"stream contract: every item once, none lost past the timeout ({_REORDER_LABEL})",
          lambda: ReorderContract(_reorder, capacity=_REORDER_CAPACITY, stall_bound=_REORDER_STALL,
                                  time_bits=REORDER_SMALL["time_bits"], timeout=REORDER_SMALL["timeout"]),
          depth=13),
    Proof("selb-reorder", f"valid independent of ready ({_REORDER_LABEL})",
          lambda: ValidIndependence(_reorder), depth=10),
    Proof("selb-reorder", f"reset empties the pipeline, clears stats, sweep ends ({_REORDER_LABEL})",
          lambda: ReorderReset(_reorder, n_flows=REORDER_SMALL["n_flows"]), method="prove",
          depth=REORDER_SMALL["n_flows"] + Reorder.latency + 2, cover_depth=REORDER_SMALL["n_flows"] + 8),
    Proof("selb-reorder", f"only a held item is overtaken, never by its flow's later packets of its epoch "
          f"({_REORDER_LABEL})", lambda: ReorderOvertaking(_reorder), depth=14),
    Proof("selb-reorder", f"only a held item is overtaken, never by its flow's later packets of its epoch "
          f"({_REORDER_LABEL}), deep", lambda: ReorderOvertaking(_reorder), depth=16, deep=True),
    Proof("selb-reorder", f"stream contract: every item once, none lost past the timeout ({_REORDER_LABEL}), deep",
          lambda: ReorderContract(_reorder, capacity=_REORDER_CAPACITY, stall_bound=_REORDER_STALL,
                                  time_bits=REORDER_SMALL["time_bits"], timeout=REORDER_SMALL["timeout"]),
          depth=15, deep=True, timeout=600),
]
# Times on the shared machine under load: the contract's BMC step 12 ends in about 10 s, step 13 in 10 s to 90 s
# more and step 14 in 35 s to 3 minutes more (the default row stops at 13, the deep one at 15: 187 to 287 s, the
# first depth at which a held item can be released and an item taken timeout ticks after it leave). The overtaking
# row: 14 to 19 s at 14, 65 to 74 s at 16 (the deep row reaches a buffer opened before a reset and a tail after it).
# The reset row's k covers the sweep and the latency (2 + 3) and two more cycles.
