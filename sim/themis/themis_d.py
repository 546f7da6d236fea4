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
    "psn_queue_entries", "paper_memory_bytes", "REFERENCE", "N_STATS", "STAT_OUT_OF_RANGE", "SplitScanPipeline",
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


# -- The split pipeline: a cycle model of the design to build (docs/themis.md, "Next step") ---------------------------


class _Slot:
    """A NACK in flight in :class:`SplitScanPipeline`, from the read-modify-write stage to its token's marker leaving
    the output: what it saw on arrival, its scan, and the data pushed to its QP since."""

    def __init__(self, index, item, flow, may_update, preds, cycle):
        self.index = index
        self.qp = item["qp"]
        self.e = item["psn"]
        self.may_update = may_update
        self.live_head, self.live_count = flow.queue.head, len(flow.queue)
        self.live_bound = (flow.hi, flow.lo_cur, flow.lo_prev)
        # NACKs of the same QP still pending on arrival: their pushes so far and their own PSN bound so far.
        self.preds = [(j, j.pushes, tuple(j.fresh)) for j in preds]
        self.enter = cycle
        self.start = None
        self.head = self.count = self.bound = None     # the ring and bound the scan must see, fixed at its start
        self.reads = 0
        self.phase = 1
        self.n1 = 0
        self.decided = None         # (verdict, n1, scanned, out_of_range)
        self.known = None           # the cycle its verdict leaves the scan pipeline
        self.token = None           # first cycle its token may take the read-modify-write stage
        self.pushes = 0             # data pushed to the QP since the NACK
        self.fresh = [0, 0, 0]      # their PSN bound alone: the QP's bound if the scan empties the ring
        self.superseded = False     # a later NACK of the QP set (BePSN, Valid) provisionally
        self.out = None             # its result, completed by the token
        self.row = None             # its reorder-buffer entry


class SplitScanPipeline:
    """Cycle model of the Themis-D pipeline to build next, in which data never waits for a NACK scan (docs/themis.md,
    "Next step"). It validates that design before RTL exists: its outputs must equal :class:`ThemisD`'s on every
    trace (the tests check it), and :meth:`run` measures input items per clock, NACK latency and buffer occupancy.

    One cycle at a time, it models the read-modify-write (RMW) stage, one scan engine and the output:

    * The RMW stage takes one item per clock. A NACK of an active QP takes one of ``slots`` NACK slots, records what
      its scan needs (ring pointers, PSN bound, ePSN), arms compensation provisionally (BePSN = ePSN, as if it will
      be blocked) when it may change (BePSN, Valid), and moves on: its QP is *pending* until its token.
    * The engine scans NACKs in arrival order, reading ``width`` queue entries per clock (one word of the ring
      memory) from the cycle after it takes one, from the memory the pushes write (so it reads what is there then).
      A NACK's verdict is known six cycles after the read of its deciding entry; the engine stops reading for it
      then, or when its queue is exhausted, and takes the next NACK at once (the scan pipeline holds both), except
      a NACK of the same QP, which needs the verdict first. An empty queue decides in 2 cycles, an out-of-range
      test in 4. A NACK's *token* takes the RMW stage the cycle after its verdict, ahead of input (one input cycle
      per NACK): drop ``max(0, n1 - overflow)`` entries (``overflow``: what the data pushed since has already
      pushed out of a ring that the NACK would have shortened), disarm if the verdict is not blocked (unless a later
      NACK of the QP has set (BePSN, Valid) since), and install the pushes' own PSN bound if the scan emptied the
      ring (the golden model restarts the bound at a push into an empty ring).
    * A NACK that arrives while its QP has NACKs pending starts its scan from the ring as they leave it (the engine
      takes NACKs in order, so theirs are settled by then). It waits at the RMW stage when ``chain`` NACKs of its QP
      are pending, when whether it may change (BePSN, Valid) would depend on the pending verdict (a NACK before a
      provisional BePSN: stale), or when every slot is taken.
    * A data item of a pending QP is decided against the provisional state and marked *conditional* on the last
      pending NACK that set it: if that NACK is not blocked, the result leaves as plain ``DATA``. The data item waits
      at the RMW stage only when its push would overwrite a ring entry a pending scan has not read yet.
    * Results leave in input order through a reorder buffer of ``rob`` entries (the input waits when it is full):
      a data result is ready the cycle after the RMW stage, a NACK's after its token. A token's marker frees its
      slot when it reaches the head (one output cycle).

    Commands are applied with the pipeline drained, as the testbench applies them. ``slots``, ``rob`` and ``width``
    are the design's sizes; the datasheet gives the figures they produce.
    """

    def __init__(self, *, n_qps, queue_depth, n_paths, entry_bits, slots=16, rob=1024, width=4, chain=2):
        self.golden = ThemisD(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)
        self.width = width
        self.chain = chain
        self.queue_depth = queue_depth
        self.n_paths = n_paths
        self.entry_bits = entry_bits
        self.mask = (1 << entry_bits) - 1
        self.n_slots = slots
        self.rob_size = rob

    @staticmethod
    def _bound(b, psn, empty, tail):
        """The golden model's ``_bound`` rule on a list ``[hi, lo_cur, lo_prev]`` (``tail``: the slot written)."""
        if empty:
            b[:] = [psn, psn, psn]
            return
        if (psn - b[0]) % PSN_MOD < PSN_MOD // 2:
            b[0] = psn
        if tail == 0:
            b[2], b[1] = b[1], psn
        elif (psn - b[1]) % PSN_MOD >= PSN_MOD // 2:
            b[1] = psn

    def _read(self, qp, pos, cycle):
        """Entry ``pos`` of ``qp``'s ring as a read issued in ``cycle`` returns it (a push lands two cycles after the
        RMW stage: registered write port, read-before-write)."""
        for visible, value in reversed(self.mem[qp][pos]):
            if visible <= cycle:
                return value
        return 0

    def _begin(self, s, cycle):
        """The engine takes ``s``: the ring and bound its scan must see (every NACK ahead of it is settled)."""
        Q = self.queue_depth
        s.start = cycle
        head, count, bound = s.live_head, s.live_count, s.live_bound
        for j, pushes, fresh in s.preds:
            n = j.decided[1]
            d = max(0, n - max(0, j.count + pushes - Q))
            head, count = (head + d) % Q, count - d
            if n == j.count:
                bound = fresh
        s.head, s.count, s.bound = head, count, bound

    def _scan_step(self, s, cycle):
        """One engine read cycle: read the next ``width`` entries of ``s``'s ring (one memory word) and apply the
        golden model's rules to them in ring order."""
        g, e = self.golden, s.e
        et = e & self.mask
        if s.reads == 0:
            half = 1 << (self.entry_bits - 1)
            far = self.entry_bits != PSN_BITS and any(
                not ((p - e) % PSN_MOD < half or (p - e) % PSN_MOD > PSN_MOD - half) for p in s.bound)
            if s.count and far:
                s.decided, s.token = (Verdict.NACK_NO_TPSN, s.count, 0, 1), s.start + 5
                s.known = s.token - 1
                return
            if s.count == 0:
                s.decided, s.token = (Verdict.NACK_NO_TPSN, 0, 0, 0), s.start + 3
                s.known = s.token - 1
                return
        for _ in range(self.width):
            x = self._read(s.qp, (s.head + s.reads) % self.queue_depth, cycle)
            s.reads += 1
            verdict = None
            if s.phase == 1:
                if serial_after(x, et, self.entry_bits):
                    if g._same_path_after(x, e):
                        verdict = Verdict.NACK_VALID
                    else:
                        s.phase = 2
                else:
                    s.n1 += 1
            elif x == et:
                verdict = Verdict.NACK_LATE
            elif g._same_path_after(x, e):
                verdict = Verdict.NACK_VALID
            if verdict is None and s.reads == s.count:
                verdict = Verdict.NACK_BLOCKED if s.phase == 2 else Verdict.NACK_NO_TPSN
            if verdict is not None:
                s.decided = (verdict, s.n1, s.reads, 0)
                s.known = cycle + 6     # six cycles through the scan pipeline to the decision
                s.token = cycle + 7
                return

    def _data(self, item, flow, out, cycle):
        """A data item at the RMW stage; False when it must wait (its push would overwrite an unread entry)."""
        pend = self.pending.get(item["qp"], [])
        q = flow.queue
        if len(q) == self.queue_depth:
            for s in pend:
                if s.decided is None and (s.start is None or s.reads <= (q.tail - s.head) % self.queue_depth < s.count):
                    return False
        tail = q.tail
        self.golden._data(item, flow, out)
        self.mem[item["qp"]][tail].append((cycle + 2, item["psn"] & self.mask))
        out["_cond"] = pend[-1] if pend and pend[-1].may_update else None
        self.conditional += out["_cond"] is not None
        for s in pend:
            self._bound(s.fresh, item["psn"], s.pushes == 0, tail)
            s.pushes += 1
        return True

    def _nack(self, item, flow, out, cycle, slots_free):
        """A NACK at the RMW stage; False when it must wait."""
        pend = self.pending.get(item["qp"], [])
        e = item["psn"]
        may = not flow.valid or not psn_after(flow.bepsn, e)
        if not slots_free or len(pend) >= self.chain or (pend and pend[-1].may_update and not may):
            return False
        s = _Slot(slots_free.pop(0), item, flow, may, pend, cycle)
        if may:
            for j in pend:
                j.superseded = True
            flow.valid, flow.bepsn, flow.bres, flow.bmsn = 1, e, e % self.n_paths, item["msn"]
        s.out = out
        self.pending.setdefault(item["qp"], []).append(s)
        self.jobs.append(s)
        return True

    def _token(self, s):
        flow = self.golden.flows[s.qp]
        verdict, n1, scanned, oor = s.decided
        flow.queue.drop(max(0, n1 - max(0, s.count + s.pushes - self.queue_depth)))
        if s.may_update and verdict != Verdict.NACK_BLOCKED and not s.superseded:
            flow.valid = 0
        if n1 == s.count and s.pushes:
            flow.hi, flow.lo_cur, flow.lo_prev = s.fresh
        s.out.update(verdict=verdict, scanned=scanned, out_of_range=oor,
                     drop=int(verdict in (Verdict.NACK_BLOCKED, Verdict.NACK_LATE)),
                     arm=int(s.may_update and verdict == Verdict.NACK_BLOCKED))
        self.pending[s.qp].remove(s)

    def run(self, events):
        """Run a trace; return its outputs (in input order) and the measurements: ``items``/``cycles`` (input items
        per clock within each run of items between commands), waits at the RMW stage by cause, ``nack_latency``
        (cycles from a NACK's RMW stage to its token's), ``data_wait`` (cycles a data result waited in the reorder
        buffer), ``rob_max``, ``conditional`` (data results decided while a NACK of their QP was pending)."""
        g = self.golden
        g.reset()
        self.mem = [[[] for _ in range(self.queue_depth)] for _ in range(g.n_qps)]
        self.cycle = 0
        self.conditional = 0
        stats = dict(cycles=0, items=0, wait_pending=0, wait_overwrite=0, wait_slots=0, wait_rob=0,
                     nack_latency=[], data_wait=[], rob_max=0)
        outputs, segment = [], []
        for event in events:
            if "ctl" in event:
                outputs += self._segment(segment, stats)
                segment = []
                g.control({"table": 0, "index": 0, "data": 0, **event["ctl"]})
            elif "item" in event:
                segment.append({name: event["item"].get(name, 0) for name in INPUT_FIELDS})
        outputs += self._segment(segment, stats)
        stats["conditional"] = self.conditional
        return outputs, stats

    def _segment(self, items, stats):
        """Items between two commands, from a drained pipeline; returns their outputs in input order."""
        g = self.golden
        self.pending, self.jobs, self.reading, scans = {}, [], None, []
        slots_free = list(range(self.n_slots))
        tokens, rob, results, accepted = [], [], [], []
        nxt, cycle = 0, self.cycle      # one clock across runs: ring entries outlive them
        while nxt < len(items) or rob or self.jobs or scans or tokens:
            # The engine: one NACK issues reads at a time; the next may start while the last one's entries are
            # still on their way to a decision (not one whose verdict it needs: a NACK of the same QP ahead of it).
            if self.reading is not None:
                s = self.reading
                if s.decided is None:
                    self._scan_step(s, cycle)
                if s.decided is not None and (s.reads >= s.count or s.known <= cycle):
                    self.reading = None
            if self.reading is None and self.jobs:
                s = self.jobs[0]
                if s.enter < cycle and all(j.decided is not None for j, _, _ in s.preds):
                    self.jobs.pop(0)
                    self._begin(s, cycle)
                    self.reading = s
                    scans.append(s)
            while scans and scans[0].decided is not None and scans[0].token <= cycle + 1:
                tokens.append(scans.pop(0))
            # The RMW stage: a token first, else the next item.
            if tokens and tokens[0].token <= cycle:
                s = tokens.pop(0)
                self._token(s)
                stats["nack_latency"].append(cycle - s.enter)
                s.row[1] = cycle + 1
                rob.append([s, cycle + 1, None])
            elif nxt < len(items):
                item = items[nxt]
                out = dict(item, drop=0, arm=0, comp=0, comp_psn=0, comp_msn=0, verdict=Verdict.PASS, scanned=0,
                           out_of_range=0)
                flow = g._flow(item)
                row = [out, cycle + 1, cycle]
                if len(rob) >= self.rob_size:
                    ok, why = False, "wait_rob"
                elif flow is not None and item["kind"] == PacketKind.DATA.value:
                    ok, why = self._data(item, flow, out, cycle), "wait_overwrite"
                elif flow is not None and item["kind"] == PacketKind.NACK.value:
                    ok = self._nack(item, flow, out, cycle, slots_free)
                    why = "wait_slots" if not slots_free else "wait_pending"
                    if ok:
                        row[1] = None
                        self.jobs[-1].row = row
                else:
                    ok = True
                if ok:
                    rob.append(row)
                    accepted.append(cycle)
                    nxt += 1
                else:
                    stats[why] += 1
            # The output: the head leaves when ready.
            if rob and rob[0][1] is not None and rob[0][1] <= cycle:
                head, _, rmw = rob.pop(0)
                if isinstance(head, _Slot):
                    slots_free.append(head.index)
                else:
                    cond = head.pop("_cond", None)
                    if cond is not None and cond.decided[0] != Verdict.NACK_BLOCKED:
                        head.update(verdict=Verdict.DATA, comp=0, comp_psn=0, comp_msn=0)
                    g.counts[head["verdict"]] += 1
                    g.counts[STAT_OUT_OF_RANGE] += head["out_of_range"]
                    if head["kind"] == PacketKind.DATA.value:
                        stats["data_wait"].append(cycle - rmw - 1)
                    results.append(head)
            stats["rob_max"] = max(stats["rob_max"], len(rob))
            cycle += 1
        self.cycle = cycle
        if len(accepted) > 1:
            stats["cycles"] += accepted[-1] - accepted[0]
            stats["items"] += len(accepted) - 1
        return results
