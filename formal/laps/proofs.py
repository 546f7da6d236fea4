"""Proofs of the LAPS blocks, small sizes: the stream contract, valid independence and reset of the PIT (with its
``upd`` stream), softmax, the PST, the pacer (with its ``rate`` stream), loss detection and AIMD; the PST's record
consistency (:mod:`.pst`), the PIT's read after write (:mod:`.pit`) and AIMD's rates moving only as their action says
(:mod:`.aimd`)."""

from lbpipe.hdl.laps.aimd import Aimd
from lbpipe.hdl.laps.loss import Loss
from lbpipe.hdl.laps.pacer import Pacer
from lbpipe.hdl.laps.pit import Pit
from lbpipe.hdl.laps.pst import Pst
from lbpipe.hdl.laps.softmax import Softmax

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.standard import metadata_block_proofs
from lbpipe.formal.lib.stream import StreamContract, ValidIndependence

from .aimd import AimdWindows
from .pit import PitReadAfterWrite
from .pst import PstRecords

__all__ = ["PROOFS", "PST_SMALL", "PIT_SMALL", "AIMD_SMALL"]

#: The small PIT of every laps-pit row: two entries in one sub-table (pid 1 the only path), paper probe rule.
PIT_SMALL = dict(n_entries=2, k=1, probe_rule="paper", lfsr_seed=0xACE1)


def _pit():
    return Pit(**PIT_SMALL)


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

# docs/laps_pit.md, "Read after write". The first lookup after an update that a commit made valid leaves at step 8
# (commit, its write clock, the update and the lookup, latency 5); the covers (a lookup taken 0, 1, 2 clocks after
# its update) are reached at steps 8 to 10, so depth 13 sees a few items leave behind it (depth 12: 26 s, 13: 69 s
# under load). A lookup may probe the updated pid only 5 updates after it (the hold-off): its own probe is first
# reached at step 14 (``probe_cover=True``), and depth 15 took 579 s, too long for a row.
PROOFS += [
    Proof("laps-pit", "a lookup after an update reads the update's value (n_entries=2, k=1)",
          lambda: PitReadAfterWrite(_pit, k=PIT_SMALL["k"]), depth=13),
]


# -- PST ---------------------------------------------------------------------------------------------------------------

#: The small PST: 2 records (record 0 the miss record, one destination), 2 pids, one way of 2 buckets, IPv4.
PST_SMALL = dict(n_dests=2, k=2, ways=1, buckets=2, ipv6=False, user_bits=0)
_PST_LABEL = "n_dests=2, k=2, ways=1, buckets=2"


def _pst():
    return Pst(**PST_SMALL)


# docs/laps_pst.md: reset empties the pipeline and clears the counters; a command takes the input's slot, so the
# input follows o.ready at once whenever no command waits.
# The deep contract stops at 18: step 18 took 75 s under load, step 19 had not finished after 2 minutes.
PROOFS += metadata_block_proofs(
    "laps-pst", _PST_LABEL, _pst, Pst.latency, contract_depth=14, valid_depth=10, stats_cleared=True,
    ready_within=0, deep_depth=18)
# The record check grows steeply with depth (BMC step 12: about 7 s, 13: 30 s, 15: 50 s, 16: over 10 minutes under
# load); the first hit on a record a command wrote leaves at step 12 (RECORD, its 4-clock write, INSERT, the item).
_PST_RECORDS = (f"a lookup's pids are one record as the table stood at acceptance; a miss reads record 0 "
                f"({_PST_LABEL})")
PROOFS += [
    Proof("laps-pst", _PST_RECORDS, lambda: PstRecords(_pst), depth=13),
    Proof("laps-pst", f"{_PST_RECORDS}, deep", lambda: PstRecords(_pst), depth=15, deep=True),
]


# -- pacer ------------------------------------------------------------------------------------------------------------

_PACER_LABEL = "n_flows=2"


def _pacer():
    return Pacer(n_flows=2)


# docs/laps_pacer.md: reset empties the pipeline and clears the counters. A flow-table command holds both inputs
# until it is written, at any time, so "input ready again" is not asserted. The rate stream (``rate``) is driven like
# ``i`` and gives no output.
PROOFS += [
    Proof("laps-pacer", f"stream contract (with rate, {_PACER_LABEL})",
          lambda: StreamContract(_pacer, extra=("rate",), capacity=Pacer.latency, stall_bound=Pacer.latency),
          depth=Pacer.latency + 5),
    Proof("laps-pacer", f"valid independent of ready ({_PACER_LABEL})",
          lambda: ValidIndependence(_pacer, extra=("rate",)), depth=Pacer.latency + 3),
    Proof("laps-pacer", f"reset empties the pipeline, clears stats ({_PACER_LABEL})",
          lambda: ResetEmpty(_pacer, extra=("rate",), stats_cleared=True), method="prove",
          depth=Pacer.latency + 2, cover_depth=Pacer.latency + 4),
    Proof("laps-pacer", f"stream contract (with rate, {_PACER_LABEL}), deep",
          lambda: StreamContract(_pacer, extra=("rate",), capacity=Pacer.latency, stall_bound=Pacer.latency),
          depth=20, deep=True),
]


# -- loss detection --------------------------------------------------------------------------------------------------

_LOSS_LABEL = "n_paths=2, depth=4, flow_bits=1"


def _loss():
    return Loss(n_paths=2, depth=4, flow_bits=1)


# docs/laps_loss.md: reset empties the pipeline, clears the counters and sweeps the paths, one a clock (2 here) with
# the input not ready; ctl is always ready, so the input follows o.ready from then on. The first output leaves at
# step 16 (reset, the sweep, the latency of 13): the depths leave room for a second.
PROOFS += metadata_block_proofs(
    "laps-loss", _LOSS_LABEL, _loss, Loss.latency, contract_depth=Loss.latency + 6, valid_depth=Loss.latency + 5,
    stats_cleared=True, ready_within=2, reset_prop="reset empties the pipeline, clears stats, sweep ends",
    deep_depth=Loss.latency + 10)


# -- AIMD rate control -------------------------------------------------------------------------------------------------

_AIMD_LABEL = "n_flows=2, k=1, stages=1"


#: The small AIMD of every laps-aimd row; the limits are its defaults, written out for the harness.
AIMD_SMALL = dict(n_flows=2, k=1, stages=1, variant="paper", line_rate=100_000_000, min_rate=100_000)


def _aimd():
    return Aimd(**AIMD_SMALL)


# docs/laps_aimd.md: reset empties the pipeline, clears the counters and sweeps the flows (n_flows clocks, inputs
# and ctl not ready); a command holds the input while it settles, at any time, so "input ready again" is not
# asserted.
PROOFS += metadata_block_proofs(
    "laps-aimd", _AIMD_LABEL, _aimd, Aimd.latency, contract_depth=14, valid_depth=12, stats_cleared=True,
    ready_within=None)

# docs/laps_aimd.md, "The algorithm, exactly" and "Clamping". A flow's first result can leave at step 18 (reset, the
# 2-clock sweep, a create's seven clocks, the latency of 8), a second right behind it (held: action 0) at 19; the
# covers (an increase that raised the rate, a decrease that lowered it, a held result after an adjustment) are
# reached at steps 18, 18 and 19. Two adjustments of one flow are 9 items apart (the hold-off), out of reach: BMC
# step 19 took 14 s, 20 about a minute, 21 over four minutes under load.
PROOFS += [
    Proof("laps-aimd", f"rates within the limits, moved only as their action says ({_AIMD_LABEL})",
          lambda: AimdWindows(_aimd, n_flows=AIMD_SMALL["n_flows"], line_rate=AIMD_SMALL["line_rate"],
                              min_rate=AIMD_SMALL["min_rate"]), depth=20),
]
