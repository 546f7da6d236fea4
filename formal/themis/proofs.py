"""Proofs of the Themis blocks: the stream contract of Themis-S at small sizes; Themis-D's stream contract, reset and
per-QP queue invariants (:mod:`.queue`) at 2 QPs with 3-entry queues."""

from lbpipe.hdl.themis.themis_d import ThemisD
from lbpipe.hdl.themis.themis_s import ThemisS

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.standard import metadata_block_proofs
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

from .queue import ProbedThemisD, ThemisDQueue

__all__ = ["PROOFS", "THEMIS_D_SMALL", "themis_d_capacity", "themis_d_stall_bound"]


def _themis_s():
    return ThemisS(n_paths=3, mode="sport", hash_bits=4)


# docs/themis.md: stats clear on reset; the input is ready whenever the output is (no sweep).
PROOFS = metadata_block_proofs(
    "themis-s", "n_paths=3", _themis_s, ThemisS.latency, contract_depth=16, valid_depth=8, stats_cleared=True,
    ready_within=0)


# -- Themis-D --------------------------------------------------------------------------------------------------------

#: The small instance: 2 QPs, 3-entry queues (not a power of two), N = 2, 4-bit queue entries (PSNs stay 24 bits).
THEMIS_D_SMALL = dict(n_qps=2, queue_depth=3, n_paths=2, entry_bits=4)
_D_LABEL = "n_qps=2, queue_depth=3"


def _themis_d():
    return ThemisD(**THEMIS_D_SMALL)


def _probed_themis_d():
    return ProbedThemisD(**THEMIS_D_SMALL)


def themis_d_capacity(dut):
    """Items Themis-D can hold: the four front stages and the three-entry skid buffer."""
    return 4 + 3


def themis_d_stall_bound(dut):
    """Ready cycles with an item inside and no output: an item enters at ``s1`` behind commands (3 advances to the
    read-modify-write stage), a NACK there holds it ``queue_depth + 8`` cycles (docs/themis.md), then the skid
    buffer's head: ``latency + queue_depth + 8``."""
    return ThemisD.latency + dut.queue_depth + 8


PROOFS += [
    Proof("themis-d", f"stream contract ({_D_LABEL})",
          lambda: StreamContract(_themis_d, capacity=themis_d_capacity, stall_bound=themis_d_stall_bound),
          depth=14),
    Proof("themis-d", f"valid independent of ready ({_D_LABEL})", lambda: ValidIndependence(_themis_d), depth=12),
    # The flow-table clear after reset keeps both inputs not ready for n_qps clocks; a NACK's scan holds the input
    # later on too, so "input ready again" is not a property of this block (ready_within is not asserted).
    Proof("themis-d", f"reset empties the pipeline, clears stats ({_D_LABEL})",
          lambda: ResetEmpty(_themis_d, stats_cleared=True), method="prove", depth=ThemisD.latency + 2,
          cover_depth=ThemisD.latency + 6),
    # Depth 16 takes about a minute; at 18 the last step had not finished after 9 minutes.
    Proof("themis-d", f"stream contract ({_D_LABEL}), deep",
          lambda: StreamContract(_themis_d, capacity=themis_d_capacity, stall_bound=themis_d_stall_bound),
          depth=17, deep=True),
    # BMC grows steeply with depth here (about 2x per cycle past 14). The first NACK that arms compensation needs 18
    # cycles (reset, the 2-cycle flow-table clear, a set-up, a data packet, the NACK, 4 stages, its scan): the
    # default row checks every write to 15 cycles (no set-up, clear or data write arms; pointers; scan reads), the
    # deep row to 20, with a NACK arming covered.
    Proof("themis-d", f"per-QP queue invariants ({_D_LABEL})",
          lambda: ThemisDQueue(_probed_themis_d, cover_arm=False), depth=15),
    Proof("themis-d", f"per-QP queue invariants ({_D_LABEL}), deep",
          lambda: ThemisDQueue(_probed_themis_d), depth=20, deep=True),
    # k-induction of the pointers alone, with the invariants on every copy of a flow entry and on the scan's dequeue
    # count (formal/themis/queue.py, _inductive): closes at k = 2 (k = 1 does not; without the invariants, not at 4).
    Proof("themis-d", f"queue pointers head/tail/count consistent, for all time ({_D_LABEL})",
          lambda: ThemisDQueue(_probed_themis_d, part="pointers", inductive=True, cover_arm=False),
          method="prove", depth=3, cover_depth=14),
]
