"""Proofs of the FLB blocks, small sizes: the stream contract, valid independence and reset of the per-packet path
decision, the one-way-delay block and the congestion notification block; the decision's path range, the piggyback's
range, once-only and newest measurement (:mod:`.owd`), the CNMs' threshold and count (:mod:`.cnm`); the isolation
table's contract (with its CNM stream), valid independence and reset, its paths, mask and input readiness, and that
a forged CNM changes nothing (:mod:`.isolate`); the previous-hop table's contract, valid independence and reset (the
generic rows only)."""

from lbpipe.hdl.flb.cnm import Cnm
from lbpipe.hdl.flb.isolate import Isolate
from lbpipe.hdl.flb.owd import Owd
from lbpipe.hdl.flb.prevhop import PrevHop
from lbpipe.hdl.flb.route import Route

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.standard import metadata_block_proofs
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

from .cnm import CnmThreshold
from .isolate import IsolateForgedMiter, IsolateInvariants
from .owd import OwdPiggyback, WithoutControl
from .route import RoutePathRange

__all__ = ["PROOFS", "ROUTE_SMALL", "OWD_SMALL", "CNM_SMALL", "ISOLATE_SMALL", "PREVHOP_SMALL"]

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


# -- one-way delay ------------------------------------------------------------------------------------------------

#: The small one-way-delay block: 2 edges, 3 paths (not a power of two: the 2-bit path fields can name a path that
#: does not exist), 4-bit ticks and delays. Its tables have 2 x 4 base rows: an 8-clock sweep after reset.
OWD_SMALL = dict(n_edges=2, n_paths=3, time_bits=4, delay_bits=4)
_OWD_LABEL = "n_edges=2, n_paths=3, time_bits=4"


def _owd():
    return Owd(**OWD_SMALL)


# docs/flb_owd.md: reset empties the pipeline, clears the counters and sweeps both tables (8 clocks here, i and ctl
# not ready). A command holds i while it waits for the pipeline to drain, a FORGET one clock more, and a FORGET_ALL
# sweeps again, so "ready again" is a row of its own, without commands (WithoutControl). The first
# output leaves 13 clocks after reset (sweep, accept, 4 stages): the covers need depth 14. "Ready again" is a BMC
# row: k-induction cannot close it, as the step may start mid-sweep with the cycle counter already past 8 (an
# unreachable state) and hold o.ready low for any k.
PROOFS += metadata_block_proofs(
    "flb-owd", _OWD_LABEL, _owd, Owd.latency, contract_depth=16, valid_depth=14, stats_cleared=True,
    ready_within=None, reset_cover=10)
PROOFS += [
    Proof("flb-owd", f"input ready again 8 clocks after a reset, no commands (sweep) ({_OWD_LABEL})",
          lambda: ResetEmpty(lambda: WithoutControl(_owd), stats_cleared=True, ready_within=8), depth=20),
]
_OWD_PB = f"a piggyback is the newest measurement of its edge, sent at most once, path < n_paths ({_OWD_LABEL})"
PROOFS += [
    Proof("flb-owd", _OWD_PB, lambda: OwdPiggyback(_owd, n_edges=2, n_paths=3), depth=16),
]


# -- congestion notification ----------------------------------------------------------------------------------------

#: The small CNM block: 3 ports (the 2-bit port field can name a 4th, forged), 2 slots (the 2-bit count can say 3),
#: 2 edges, 2-bit flows and amounts, 4-bit estimates, K = 3 at reset.
CNM_SMALL = dict(n_ports=3, n_slots=2, n_edges=2, flow_bits=2, amount_bits=2, q_bits=4, threshold=3)
_CNM_LABEL = "n_ports=3, n_slots=2, q_bits=4"


def _cnm():
    return Cnm(**CNM_SMALL)


# docs/flb_cnm.md: reset empties the pipeline, clears the counters and restores K; no sweep, and a command takes the
# input's slot, so the input follows o.ready at once whenever no command waits. The deep contract stops at 17: BMC
# step 17 ended after about 55 s under load, step 18 had not finished after 2 minutes.
PROOFS += metadata_block_proofs(
    "flb-cnm", _CNM_LABEL, _cnm, Cnm.latency, contract_depth=14, valid_depth=10, stats_cleared=True,
    ready_within=0, deep_depth=17)
_CNM_K = f"a CNM agrees with the K in force, its count within 1..n_slots ({_CNM_LABEL})"
PROOFS += [
    Proof("flb-cnm", _CNM_K, lambda: CnmThreshold(_cnm, n_slots=2, q_bits=4, threshold=3), depth=12),
]


# -- congested-flow isolation ---------------------------------------------------------------------------------------

#: The small isolation table: 3 flows, 1 destination and 3 ports (the 2-bit flow and point fields and the 1-bit
#: destination field can name one more, forged), 3 paths (k up to 2; the 2-bit path field can name a 4th), 2 entries,
#: 4-bit ticks, a 5-tick timeout.
ISOLATE_SMALL = dict(n_flows=3, n_dests=1, n_paths=3, n_slots=2, time_bits=4, timeout=5, n_ports=3)
_ISO_LABEL = "n_flows=3, n_paths=3, n_slots=2, n_ports=3"
_ISO_NAMES = dict(n_flows=3, n_dests=1, n_ports=3)


def _isolate():
    return Isolate(**ISOLATE_SMALL)


# docs/flb_isolate.md: one packet per clock with the CNMs (upd) as a second input stream; a packet taken with a CNM
# waits one clock (held), so it leaves latency + 1 clocks after it was taken, and the CNM's stage slot holds no
# packet: at most `latency` packets inside. Reset empties the table, the held packet and the counters, no sweep;
# "ready again" is not the generic row (a held packet keeps i not ready with o.ready high): the invariant row states
# the input's readiness exactly instead.
_iso_contract = Proof("flb-isolate", f"stream contract (with upd) ({_ISO_LABEL})",
                      lambda: StreamContract(_isolate, extra=("upd",), capacity=Isolate.latency,
                                             stall_bound=Isolate.latency), depth=12)
PROOFS += [
    _iso_contract,
    Proof("flb-isolate", f"valid independent of ready ({_ISO_LABEL})",
          lambda: ValidIndependence(_isolate, extra=("upd",)), depth=10),
    Proof("flb-isolate", f"reset empties the pipeline, clears stats ({_ISO_LABEL})",
          lambda: ResetEmpty(_isolate, extra=("upd",), stats_cleared=True, ready_within=None), method="prove",
          depth=Isolate.latency + 2, cover_depth=Isolate.latency + 4),
    Proof("flb-isolate", f"stream contract (with upd) ({_ISO_LABEL}), deep", _iso_contract.build, depth=16,
          deep=True),
]
_ISO_PATHS = (f"an isolated path is within the top k <= n_paths - 1, only a congested flow is isolated, k at most "
              f"its flows, upd and i ready together ({_ISO_LABEL})")
_ISO_FORGED = f"a forged CNM changes nothing ({_ISO_LABEL})"
PROOFS += [
    Proof("flb-isolate", _ISO_PATHS, lambda: IsolateInvariants(_isolate, n_paths=3, **_ISO_NAMES), depth=12),
    Proof("flb-isolate", _ISO_FORGED, lambda: IsolateForgedMiter(_isolate, **_ISO_NAMES), depth=10),
]


# -- previous hop per flow ------------------------------------------------------------------------------------------

#: The small previous-hop table: 3 flows (the 2-bit flow field can name a 4th, forged; one bank of 3: a 3-clock
#: sweep), 4-bit ticks, a 5-tick timeout.
PREVHOP_SMALL = dict(n_flows=3, time_bits=4, timeout=5)
_PH_LABEL = "n_flows=3, time_bits=4"


def _prevhop():
    return PrevHop(**PREVHOP_SMALL)


# docs/flb_prevhop.md: reset empties the pipeline, clears the counters and sweeps the table (3 clocks here, i and ctl
# not ready); a command waits for the pipeline to drain with i held (a waiting command), so the input follows
# o.ready from then on whenever no command waits. The first output after a reset leaves at the earliest 9 clocks
# after it (sweep 3, accept, 5 stages): the reset covers, VACUOUS at depth 9 (latency + 4), need 11.
PROOFS += metadata_block_proofs(
    "flb-prevhop", _PH_LABEL, _prevhop, PrevHop.latency, contract_depth=12, valid_depth=10, stats_cleared=True,
    ready_within=3, reset_prop="reset empties the pipeline, clears stats, sweep ends", reset_cover=6)
