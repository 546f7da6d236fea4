"""Proofs of the PRO blocks, small sizes: the stream contract, valid independence and reset of the round-robin
scheduler and the receiver window, the window's bitmap consistency (:mod:`.ooo`), and the NAK stage's frame contract
(:mod:`.nak`)."""

from lbpipe.hdl.pro.nak import NakGen
from lbpipe.hdl.pro.ooo import Ooo
from lbpipe.hdl.pro.rr import RoundRobin

from lbpipe.formal.lib.harness import Proof
from lbpipe.formal.lib.reset import ResetEmpty
from lbpipe.formal.lib.standard import metadata_block_proofs
from lbpipe.formal.lib.stream import ValidIndependence

from .nak import NakAsStream, NakFrames
from .ooo import OooBitmap, ProbedOoo

__all__ = ["PROOFS", "OOO_SMALL", "NAK_SMALL"]


def _rr():
    return RoundRobin(n_qps=2, n_tors=1, m_paths=2, batch=1)


# docs/pro_rr.md: reset clears the counters and sweeps Q and T, max(n_qps, n_tors) clocks with the inputs not ready;
# the sweep's length plus one clock is when the input must be ready again.
PROOFS = metadata_block_proofs(
    "pro-rr", "n_qps=2, n_tors=1, m_paths=2", _rr, RoundRobin.latency, contract_depth=14, valid_depth=12,
    stats_cleared=True, ready_within=3, reset_prop="reset empties the pipeline, clears stats, sweep ends",
    reset_cover=6)


# -- receiver window (pro-ooo) ---------------------------------------------------------------------------------------

#: The small instance: 2 QPs (a 2-clock sweep), 8-bit bitmaps, record mode (PSNs stay 24 bits).
OOO_SMALL = dict(n_qps=2, bitmap_len=8, head="record")
_OOO_LABEL = "n_qps=2, bitmap_len=8"


def _ooo():
    return Ooo(**OOO_SMALL)


def _probed_ooo():
    return ProbedOoo(**OOO_SMALL)


# docs/pro_ooo.md: reset clears the counters and sweeps every record to unknown, min(n_qps, 1024) clocks with the
# inputs not ready. A create or destroy command holds the item input until it is written (up to 5 clocks after it
# was taken, at any time), so "input ready again" is not a property of this block (ready_within is not asserted).
PROOFS += metadata_block_proofs(
    "pro-ooo", _OOO_LABEL, _ooo, Ooo.latency, contract_depth=14, valid_depth=12, stats_cleared=True,
    ready_within=None)
PROOFS += [
    Proof("pro-ooo", f"bitmap consistency: nothing past the tail, the tail arrived ({_OOO_LABEL})",
          lambda: OooBitmap(_probed_ooo, bitmap_len=OOO_SMALL["bitmap_len"]), depth=16),
]


# -- NAK frames (pro-nak) -------------------------------------------------------------------------------------------

NAK_SMALL = dict(n_qps=2, user_width=1)
_NAK_LABEL = "n_qps=2"


def _nak():
    return NakGen(**NAK_SMALL)


def _nak_stream():
    return NakAsStream(_nak)


# docs/pro_rx_wire.md: reset clears the counters and the pipeline; ctl is always ready and i.ready is the m_axis
# register's "free", so the input follows tready at once.
PROOFS += [
    Proof("pro-nak", f"frame contract: one single-beat frame per NACK of a valid context, in order, stable "
                     f"({_NAK_LABEL})", lambda: NakFrames(_nak, n_qps=NAK_SMALL["n_qps"]), depth=14),
    Proof("pro-nak", f"tvalid independent of tready ({_NAK_LABEL})", lambda: ValidIndependence(_nak_stream),
          depth=12),
    Proof("pro-nak", f"reset empties the pipeline, clears stats ({_NAK_LABEL})",
          lambda: ResetEmpty(_nak_stream, stats_cleared=True, ready_within=0), method="prove",
          depth=NakGen.latency + 2, cover_depth=NakGen.latency + 4),
]
