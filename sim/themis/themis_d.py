"""Golden model of Themis-D, the destination-ToR half of Themis (paper 001, sections 3.3, 3.4 and 4).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.themis.themis_d.ThemisD`. The model also predicts how many clock
cycles each item holds the pipeline (:meth:`ThemisD.cycles`), which the RTL testbench checks.

Choices made where the paper is silent (docs/themis.md explains each):

* The PSN queue keeps the truncated PSNs (``entry_bits`` low bits) of the last ``queue_depth`` data packets sent to
  the QP's NIC. It is a ring that overwrites its oldest entry when full: that is its steady state, since entries
  leave it only when a NACK's scan consumes them.
* The NACK scan skips and dequeues the entries before the first one after ePSN (tPSN). tPSN itself stays queued: a
  later NACK may need it as the evidence that its own ePSN was lost (found by a closed-loop property check: with
  tPSN dequeued, a lost packet could wait for a second packet on its path). If tPSN is on ePSN's path the NACK is
  valid. Otherwise the scan goes on, without dequeuing, through the entries
  sent after tPSN: the first of those that is ePSN itself means ePSN was only late (blocked, nothing armed); the first
  that is on ePSN's path and after it means ePSN was lost (valid, forwarded). With neither, the NACK is blocked and
  compensation armed (BePSN, Valid), as in the paper.
* A NACK whose scan finds no tPSN (queue empty or overwritten) is forwarded: without evidence, never suppress.
* A NACK changes (BePSN, Valid) only when Valid is clear or its ePSN is not before BePSN, so a stale or forged NACK
  cannot disarm the compensation of a truly lost packet.
* Queue entries keep only ``entry_bits`` low PSN bits, so the scan's ordering is exact only for entries within
  ``2**(entry_bits-1) - 1`` of ePSN. Each QP keeps a bound on the full PSNs its queue can hold: ``hi``, the latest
  (serial maximum) PSN pushed, and ``lo_cur``/``lo_prev``, the earliest PSN pushed in the current and the previous
  pass of the ring's tail over its slots (every entry in the ring was written in one of those two passes). All three
  restart at the PSN pushed into an empty ring. A NACK whose ePSN is not within that distance of all three
  (``out_of_range``) is forwarded as ``NACK_NO_TPSN`` without reading the queue, the queue is emptied and statistics
  counter 8 counts it: narrow entries cost forwarded NACKs, never a missed one. (Sound while a QP's queued PSNs span
  less than 2**23, the RoCE PSN window.)
"""

from fractions import Fraction
import math

from lbpipe.hdl.lib.meta import PacketKind, PSN_BITS
from lbpipe.sim.lib.psn import PSN_MOD, psn_after, serial_after
from lbpipe.sim.lib.ring import Ring

__all__ = [
    "ThemisD", "Verdict", "TABLE_QP_SETUP", "TABLE_QP_TEARDOWN",
    "psn_queue_entries", "paper_memory_bytes", "REFERENCE", "N_STATS", "STAT_OUT_OF_RANGE",
]

#: The fields of ``ThemisDItem``, in layout order.
INPUT_FIELDS = ("kind", "qp_hit", "qp", "psn", "msn", "tag")

TABLE_QP_SETUP = 0
TABLE_QP_TEARDOWN = 1

#: The paper's Table 1 reference values.
REFERENCE = dict(n_paths=256, bw_bps=400 * 10**9, rtt_last_s=Fraction(2, 10**6), n_nic=16, n_qp_per_nic=100,
                 mtu_bytes=1500, expansion=Fraction(3, 2))


class Verdict:
    """Values of the ``verdict`` output field (mirrors :class:`lbpipe.hdl.themis.themis_d.ThemisDVerdict`)."""
    PASS          = 0  # not for Themis-D (other traffic, unknown or idle QP): untouched
    DATA          = 1  # data packet, PSN enqueued
    DATA_COMP     = 2  # data packet on BePSN's path after it: compensation NACK for BePSN emitted
    DATA_CANCEL   = 3  # data packet with PSN == BePSN: compensation disarmed
    NACK_VALID    = 4  # tPSN (or a later packet) on ePSN's path: forwarded
    NACK_BLOCKED  = 5  # blocked, compensation armed
    NACK_LATE     = 6  # blocked: ePSN itself left the ToR after tPSN, it was only late
    NACK_NO_TPSN  = 7  # no tPSN in the queue: forwarded


def psn_queue_entries(*, bw_bps, rtt_last_s, mtu_bytes, expansion):
    """The paper's queue capacity ``ceil(BW x RTT_last x F / MTU)``, in exact arithmetic."""
    return math.ceil(Fraction(bw_bps) * Fraction(rtt_last_s) * Fraction(expansion) / (8 * mtu_bytes))


def paper_memory_bytes(*, n_paths, bw_bps, rtt_last_s, n_nic, n_qp_per_nic, mtu_bytes, expansion):
    """Equation 4 of the paper: PathMap (2 B per path) plus (20 B + N_entries x 1 B) per QP."""
    n_entries = psn_queue_entries(bw_bps=bw_bps, rtt_last_s=rtt_last_s, mtu_bytes=mtu_bytes, expansion=expansion)
    return n_paths * 2 + (20 + n_entries) * n_qp_per_nic * n_nic


#: Statistics counters: one per verdict, then the NACKs forwarded because the queue's span was out of range.
N_STATS = 9
STAT_OUT_OF_RANGE = 8


class _Flow:
    __slots__ = ("active", "valid", "bepsn", "bres", "bmsn", "queue", "hi", "lo_cur", "lo_prev")

    def __init__(self, queue_depth):
        self.active = 0
        self.valid = 0
        self.bepsn = 0
        self.bres = 0
        self.bmsn = 0
        self.queue = Ring(queue_depth)
        self.hi = 0
        self.lo_cur = 0
        self.lo_prev = 0


class ThemisD:
    """Themis-D: PSN queue per QP, NACK validation and NACK compensation.

    Parameters
    ----------
    n_qps : int
        Flow-table entries (cross-rack QPs served by this ToR).
    queue_depth : int
        PSN-queue entries per QP (see :func:`psn_queue_entries`).
    n_paths : int
        N, the number of equal-cost paths Themis-S sprays over, 1 to 256.
    entry_bits : int
        Low PSN bits kept per queue entry. The scan's ordering is exact while the PSNs in the queue lie within
        ``2**(entry_bits-1) - 1`` of ePSN.
    """

    def __init__(self, *, n_qps, queue_depth, n_paths, entry_bits):
        self.n_qps = n_qps
        self.queue_depth = queue_depth
        self.n_paths = n_paths
        self.entry_bits = entry_bits
        self._mask = (1 << entry_bits) - 1
        self.reset()

    def reset(self):
        """Hardware reset: every QP idle, every queue empty, compensation disarmed."""
        self.flows = [_Flow(self.queue_depth) for _ in range(self.n_qps)]
        self.counts = [0] * N_STATS

    # -- control -------------------------------------------------------------------------------------------------

    def control(self, cmd):
        """QP set-up (table 0) makes the entry active with an empty queue; tear-down (table 1) makes it idle.
        Out-of-range indices and unknown tables are ignored."""
        if cmd["index"] >= self.n_qps:
            return
        if cmd["table"] == TABLE_QP_SETUP:
            self.flows[cmd["index"]] = _Flow(self.queue_depth)
            self.flows[cmd["index"]].active = 1
        elif cmd["table"] == TABLE_QP_TEARDOWN:
            self.flows[cmd["index"]] = _Flow(self.queue_depth)

    # -- data path -----------------------------------------------------------------------------------------------

    def _flow(self, item):
        if not item["qp_hit"] or item["qp"] >= self.n_qps:
            return None
        flow = self.flows[item["qp"]]
        return flow if flow.active else None

    def process(self, item):
        """Return the output item for one input item (a dict of ``ThemisDItem`` fields; missing fields are 0)."""
        item = {name: item.get(name, 0) for name in INPUT_FIELDS}
        out = dict(item)
        out.update(drop=0, arm=0, comp=0, comp_psn=0, comp_msn=0, verdict=Verdict.PASS, scanned=0, out_of_range=0)
        flow = self._flow(item)
        if flow is not None:
            if item["kind"] == PacketKind.DATA.value:
                self._data(item, flow, out)
            elif item["kind"] == PacketKind.NACK.value:
                self._nack(item, flow, out)
        self.counts[out["verdict"]] += 1
        self.counts[STAT_OUT_OF_RANGE] += out["out_of_range"]
        return out

    def _data(self, item, flow, out):
        psn = item["psn"]
        out["verdict"] = Verdict.DATA
        if flow.valid:
            if psn == flow.bepsn:
                flow.valid = 0
                out["verdict"] = Verdict.DATA_CANCEL
            elif psn_after(psn, flow.bepsn) and psn % self.n_paths == flow.bres:
                flow.valid = 0
                out.update(comp=1, comp_psn=flow.bepsn, comp_msn=flow.bmsn, verdict=Verdict.DATA_COMP)
        self._bound(flow, psn)
        flow.queue.push(psn & self._mask, overwrite=True)

    @staticmethod
    def _bound(flow, psn):
        """Widen the QP's PSN bound for a push of ``psn`` (before the push; see the module docstring)."""
        queue = flow.queue
        if len(queue) == 0:
            flow.hi = flow.lo_cur = flow.lo_prev = psn
            return
        # Sign-of-difference tests (as the RTL's): equal values need no test, and a difference of exactly 2**23
        # lies outside the 2**23 span the bound assumes.
        if (psn - flow.hi) % PSN_MOD < PSN_MOD // 2:
            flow.hi = psn
        if queue.tail == 0:        # a new pass over the ring's slots begins with this push
            flow.lo_prev, flow.lo_cur = flow.lo_cur, psn
        elif (psn - flow.lo_cur) % PSN_MOD >= PSN_MOD // 2:
            flow.lo_cur = psn

    def out_of_range(self, flow, e):
        """Some PSN the QP's queue may hold could lie ``2**(entry_bits-1)`` or more from ``e``."""
        if len(flow.queue) == 0 or self.entry_bits == PSN_BITS:
            return False
        half = 1 << (self.entry_bits - 1)

        def far(p):
            d = (p - e) % (1 << PSN_BITS)
            return not (d < half or d > (1 << PSN_BITS) - half)
        return far(flow.hi) or far(flow.lo_cur) or far(flow.lo_prev)

    def _same_path_after(self, x, e):
        """Entry ``x`` is after ePSN ``e`` (a full PSN) and Themis-S sent it on ePSN's path. The entry's full PSN is
        ``e + d`` modulo 2**24, with ``d`` the serial distance; the path is that PSN mod N, so the 2**24 wrap counts
        (for N not dividing 2**24, PSNs 2**24-1 and 0 may share a path)."""
        d = (x - e) & self._mask
        full = (e + d) % (1 << PSN_BITS)
        return serial_after(x, e & self._mask, self.entry_bits) and full % self.n_paths == e % self.n_paths

    def _nack(self, item, flow, out):
        e = item["psn"]
        et = e & self._mask
        queue = flow.queue
        verdict = None
        if self.out_of_range(flow, e):
            queue.drop(len(queue))
            if not flow.valid or not psn_after(flow.bepsn, e):
                flow.valid = 0
            out.update(verdict=Verdict.NACK_NO_TPSN, out_of_range=1)
            return
        # Phase 1: dequeue the entries before tPSN, the first entry after ePSN. tPSN stays at the head: it may be
        # the only evidence for a later NACK that its ePSN was lost.
        t = next((i for i in range(len(queue)) if serial_after(queue[i], et, self.entry_bits)), None)
        if t is None:
            scanned = len(queue)
            queue.drop(len(queue))
            verdict = Verdict.NACK_NO_TPSN
        else:
            scanned = t + 1
            queue.drop(t)
            verdict = Verdict.NACK_VALID if self._same_path_after(queue[0], e) else Verdict.NACK_BLOCKED
        # Phase 2: look, without dequeuing, at what left the ToR after tPSN.
        i = 1
        while verdict == Verdict.NACK_BLOCKED and i < len(queue):
            x = queue[i]
            i += 1
            scanned += 1
            if x == et:
                verdict = Verdict.NACK_LATE
            elif self._same_path_after(x, e):
                verdict = Verdict.NACK_VALID
        if not flow.valid or not psn_after(flow.bepsn, e):
            if verdict == Verdict.NACK_BLOCKED:
                flow.valid, flow.bepsn, flow.bres, flow.bmsn = 1, e, e % self.n_paths, item["msn"]
                out["arm"] = 1
            else:
                flow.valid = 0
        out["verdict"] = verdict
        out["drop"] = int(verdict in (Verdict.NACK_BLOCKED, Verdict.NACK_LATE))
        out["scanned"] = scanned

    def stats(self):
        """The statistics counters, as the RTL's ``stats`` port and STATUS_i registers hold them: results per
        verdict (0 to 7), then out-of-range NACKs (8), modulo 2**32."""
        return [c % (1 << 32) for c in self.counts]

    def cycles(self, out):
        """Clock cycles the item holds the read-modify-write stage when the output is not back-pressured.

        1 for every item but a NACK with a flow-table hit: a NACK of an active QP holds it ``scanned + 8`` cycles
        (3 for an empty queue): one cycle to read the flow entry, one per queue entry read, six to bring the last
        entry read through the scan pipeline (read, three registered read-data stages, distance, look-ups) to its
        decision, one to write back. A NACK whose entry is idle also goes through the scan state: 3 cycles. An out-of-range NACK reads
        no entry: 5 cycles (the range test takes the scan's first two cycles and stops it in the third).
        """
        if out["kind"] == PacketKind.NACK.value and out["qp_hit"] and out["qp"] < self.n_qps:
            if out.get("out_of_range"):
                return 5
            return out["scanned"] + 8 if out["scanned"] else 3
        return 1
