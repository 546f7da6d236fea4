"""Proofs of the LAPS blocks: the stream contract of the PIT (with its ``upd`` stream) and of softmax, small sizes."""

from lbpipe.hdl.laps.pit import Pit
from lbpipe.hdl.laps.softmax import Softmax

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

__all__ = ["PROOFS"]


def _pit():
    return Pit(n_entries=2, k=1, probe_rule="paper", lfsr_seed=0xACE1)


def _softmax():
    return Softmax(k=2, precision=8, mode="paper")


def _latency(dut):
    return dut.latency


# Softmax at k = 2: 13 + 1 + 3 = 17 cycles (docs/laps_softmax.md); the depths leave room for two items to pass.
_SOFTMAX_DEPTH = 21

PROOFS = [
    # A PIT lookup and update that write one sub-table hold X5 for a second clock: an item may wait latency + 1.
    Proof("laps-pit", "stream contract (n_entries=2, k=1)",
          lambda: StreamContract(_pit, extra=("upd",), capacity=Pit.latency, stall_bound=Pit.latency + 1),
          depth=14),
    Proof("laps-pit", "valid independent of ready (n_entries=2, k=1)",
          lambda: ValidIndependence(_pit, extra=("upd",)), depth=8),
    Proof("laps-softmax", "stream contract (k=2, precision=8)",
          lambda: StreamContract(_softmax, capacity=_latency, stall_bound=_latency), depth=_SOFTMAX_DEPTH),
    Proof("laps-softmax", "valid independent of ready (k=2, precision=8)",
          lambda: ValidIndependence(_softmax), depth=_SOFTMAX_DEPTH - 2),
]

PROOFS += [
    Proof("laps-pit", "reset empties the pipeline, clears stats (n_entries=2, k=1)",
          lambda: ResetEmpty(_pit, extra=("upd",), stats_cleared=True), method="prove",
          depth=Pit.latency + 3, cover_depth=Pit.latency + 5),
    Proof("laps-softmax", "reset empties the pipeline (k=2, precision=8)",
          lambda: ResetEmpty(_softmax, stats_cleared=False, ready_within=0), method="prove",
          depth=_SOFTMAX_DEPTH - 2, cover_depth=_SOFTMAX_DEPTH),
]
