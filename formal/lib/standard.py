"""The proofs every one-stream metadata block gets: the stream contract (and a deeper run of it for the regression
profile), valid independent of ready, and reset to the empty state."""

from .harness import Proof
from .reset import ResetEmpty
from .stream import StreamContract, ValidIndependence

__all__ = ["metadata_block_proofs"]


def metadata_block_proofs(block, label, make, latency, *, contract_depth, valid_depth, stats_cleared, ready_within,
                          reset_prop="reset empties the pipeline, clears stats", reset_cover=4, deep_depth=20):
    """``block``'s proofs on instances ``make()`` (``label`` names their parameters): the contract to
    ``contract_depth`` (an item leaves within ``latency`` ready cycles, at most ``latency`` inside), valid
    independence to ``valid_depth``, reset (k-induction at ``latency + 2``; ``ready_within`` clocks until the input
    is ready again) with its covers at ``latency + reset_cover``, and the contract again to ``deep_depth``."""
    contract = Proof(block, f"stream contract ({label})",
                     lambda: StreamContract(make, capacity=latency, stall_bound=latency), depth=contract_depth)
    return [
        contract,
        Proof(block, f"valid independent of ready ({label})", lambda: ValidIndependence(make), depth=valid_depth),
        Proof(block, f"{reset_prop} ({label})",
              lambda: ResetEmpty(make, stats_cleared=stats_cleared, ready_within=ready_within), method="prove",
              depth=latency + 2, cover_depth=latency + reset_cover),
        Proof(block, f"stream contract ({label}), deep", contract.build, depth=deep_depth, deep=True),
    ]
