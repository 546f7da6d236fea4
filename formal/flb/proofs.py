"""Proofs of the FLB blocks: the stream contract, reset and path range of the per-packet path decision, small
sizes."""

from lbpipe.hdl.flb.route import Route

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.standard import metadata_block_proofs

from .route import RoutePathRange

__all__ = ["PROOFS", "ROUTE_SMALL"]

#: The small instance: 2 flows (one bank of 2: a 2-clock sweep), 1 destination, 3 paths (not a power of two: the
#: 2-bit path field can name a path that does not exist), 4-bit ticks and delays, a 5-tick timeout.
ROUTE_SMALL = dict(n_flows=2, n_dests=1, n_paths=3, time_bits=4, delay_bits=4, timeout=5)
_LABEL = "n_flows=2, n_dests=1, n_paths=3"


def _route():
    return Route(**ROUTE_SMALL)


# docs/flb_route.md: reset empties the pipeline and sweeps the flow table, one bank's depth in clocks (2 here) with
# i and ctl not ready; the input follows o.ready (no command waiting) from then on. Route has no counters.
PROOFS = metadata_block_proofs(
    "flb-route", _LABEL, _route, Route.latency, contract_depth=14, valid_depth=12, stats_cleared=False,
    ready_within=2, reset_prop="reset empties the pipeline, sweep ends")
PROOFS += [
    Proof("flb-route", f"a decision never names a path >= n_paths ({_LABEL})",
          lambda: RoutePathRange(_route, n_paths=ROUTE_SMALL["n_paths"]), depth=14),
]
