"""Closed-loop Themis scenarios (paper 001, sections 2.2, 3 and 4) and a checker of Themis' two promises.

:func:`generate` runs a discrete-event model (integer nanoseconds) of one destination rack:

* ``n_flows`` senders, sender ``q`` being QP ``q`` of the destination ToR's flow table. Each sends
  ``packets_per_flow`` new packets, one every ``gap_ns`` (each sender with its own random phase, so QPs interleave),
  PSNs counting up from its start PSN modulo 2**24.
* Themis-S (:class:`lbpipe.sim.themis.themis_s.ThemisS`, absolute-port mode) puts each data packet on path
  ``(PSN mod N + Pbase) mod N``, ``Pbase`` a random per-flow hash.
* The fabric: each transmission is lost with probability ``loss``; otherwise it reaches the destination ToR after a
  random delay drawn uniformly from ``path_delay_ns``, but never before the previous arrival on the same path:
  ``arrival = max(send + delay, previous arrival on that path + 1)``. Paths are FIFO, shared by all flows.
* The destination ToR runs the Themis-D golden model (:class:`lbpipe.sim.themis.themis_d.ThemisD`) on everything that
  arrives, in arrival order. Data goes on to the NIC over the last hop (``last_hop_ns`` one way, FIFO, lossless).
* The NIC runs one :class:`lbpipe.sim.net.rnic.SelectiveRepeatReceiver` per QP; its NACKs come back over the last hop.
* A NACK Themis-D forwards (``drop == 0``) and a compensation NACK (``comp == 1`` on a data item) reach the sender
  ``reverse_ns`` later; the sender at once retransmits the NACKed PSN, once per NACK. A retransmission takes the same
  path as the original (the path is a function of the PSN) and may be lost again. There is no sender timeout: a
  PSN whose retransmission is lost stays missing (the NIC never NACKs the same ePSN twice).
* Foreign traffic (``foreign`` items per data packet sent): ACKs and other RoCE packets of the active QPs, non-RoCE
  packets, DATA and NACK items of unknown QPs (``qp_hit = 0``) and, when ``n_qps > n_flows``, of idle QPs. Themis-D
  must pass all of them untouched. No forged NACK for an active QP is generated: the checker would rightly count a
  forwarded forged NACK as a violation of P1.

Same seed, same scenario. The events are the exact input trace of Themis-D (JSON-ready: ``json.dumps(event)``
works), so an RTL run can be fed the same trace and judged by :func:`check_properties` against the same timeline.

Properties (:func:`check_properties`)
-------------------------------------
A *transmission* is one send of one PSN by one sender (original or retransmission). It is *truly lost* when the
fabric dropped it. For an item the ToR handles at time ``T``, the *current transmission* of PSN ``p`` of QP ``q`` is
the last transmission of ``(q, p)`` sent at or before ``T``.

P1, no reordering NACK reaches the sender: every NIC NACK Themis-D forwards (``drop == 0``) and every compensation
NACK (``comp == 1``, for ``comp_psn``) concerns a PSN whose current transmission at the ToR's handling time was truly
lost. A NACK for a PSN whose current transmission is merely in flight (or has already passed the ToR) is a
reordering NACK, even when an earlier transmission of that PSN was lost. (For a NIC NACK the current transmission
is the same at the NIC's raising time and at the ToR: the NIC NACKs an ePSN at most once, so no retransmission of
it can start in between.)

P2, every NACK for a truly lost packet reaches the sender in time: for every NIC NACK for ePSN ``e`` whose current
transmission was truly lost, let the *next packet on the lost packet's path* be the first data item of the same QP,
in the ToR's handling order, whose transmission was sent after the lost one, that took the same path (for one QP:
``PSN mod N == e mod N``, on 24-bit PSNs) and whose PSN is after ``e`` (modulo 2**24). It may have passed the ToR
before the NACK arrived (then the NACK itself must be forwarded) or after it (then compensation must happen by it). The NACK must reach the sender, by
being forwarded or by a compensation NACK for ``e`` on a data item of that QP, no later than the ToR's handling of
that next packet, or of the NACK itself if that is later. When no such packet exists the property asks nothing
(Themis has no evidence; a sender timeout would recover). "No later than" is in the ToR's handling order, so the
compensation may ride on the next packet itself.

The checker also reports *well-formedness* violations (prefix ``P0``): one output per item with the item's tag,
data items never dropped, foreign items untouched, compensation only on data items of active QPs.

Assumptions under which Themis-D can keep both promises, and which :func:`generate` enforces or reports:

* per-path FIFO and a lossless, FIFO last hop (built into the model);
* the PSN queue holds every packet that left the ToR during a NACK's last-hop round trip, so a NACK's real tPSN is
  never overwritten: ``queue_depth >= min_queue_depth(...)`` (:func:`generate` raises :class:`ValueError`
  otherwise), and at run time any NACK whose tPSN was overwritten all the same is listed in
  ``Scenario.warnings``;
* queue entries lie within ``2**(entry_bits - 1) - 1`` of the NACK's ePSN, so the truncated entries order exactly
  (checked at every NACK; breaches are listed in ``Scenario.warnings``).

A scenario with warnings breaks an assumption: its trace is still a valid input for comparing RTL with the golden
model, but property violations found in it say nothing about Themis-D.
"""

import heapq
import math
import random
from collections import Counter, deque

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.lib.psn import PSN_MOD, psn_add, psn_after, psn_sub
from lbpipe.sim.net.rnic import SelectiveRepeatReceiver
from lbpipe.sim.themis.themis_d import ThemisD, Verdict
from lbpipe.sim.themis.themis_s import ThemisS

__all__ = ["Scenario", "Transmission", "generate", "check_properties", "min_queue_depth", "verdict_counts",
           "VERDICT_NAMES"]

_DATA = PacketKind.DATA.value
_NACK = PacketKind.NACK.value

#: Verdict value -> name.
VERDICT_NAMES = {v: k for k, v in vars(Verdict).items() if k.isupper()}


class Transmission:
    """One send of one PSN: ``qp``, ``psn``, ``t_send``, ``path``, ``lost``, ``retx`` (a retransmission),
    ``t_tor`` (ToR handling time, None if lost) and ``item`` (index of its data item among the trace items)."""
    __slots__ = ("qp", "psn", "t_send", "path", "lost", "retx", "t_tor", "item")

    def __init__(self, qp, psn, t_send, path, lost, retx):
        self.qp, self.psn, self.t_send, self.path, self.lost, self.retx = qp, psn, t_send, path, lost, retx
        self.t_tor = None
        self.item = None

    def __repr__(self):
        return (f"Transmission(qp={self.qp}, psn={self.psn}, t_send={self.t_send}, path={self.path}, "
                f"lost={self.lost}, retx={self.retx}, t_tor={self.t_tor})")


class Scenario:
    """What :func:`generate` returns.

    Members
    -------
    params : dict
        The ThemisD parameters ``n_qps``, ``queue_depth``, ``n_paths``, ``entry_bits``.
    config : dict
        Every argument of :func:`generate`, for the record.
    events : list of dict
        Themis-D's input trace: the ``{"ctl": ...}`` set-up commands, then ``{"item": ..., "t": ns}`` in ToR
        handling order.
    outputs : list of dict
        The golden model's output for each item event, in order.
    info : list of dict
        Ground truth per item event: ``origin`` (``"data"``, ``"nack"`` or ``"foreign"``), ``t``, and for data
        ``tx`` (index into ``transmissions``) and ``retx``; for a NIC NACK ``raised`` (time the NIC sent it),
        ``tpsn`` (the PSN that triggered it) and ``tpsn_item`` (that data item's index).
    transmissions : list of Transmission
        Every send, in send order.
    lost : set of (qp, psn)
        Every (QP, PSN) of which at least one transmission was dropped in the fabric.
    pbase, start_psn : list of int
        Per flow.
    warnings : list of str
        Run-time breaches of the assumptions: a NACK whose real tPSN had been overwritten in the PSN queue
        (``queue_depth``), or queue entries too far from a NACK's ePSN (``entry_bits``).
    diagnostics : Counter
        How NACK scans related to the real tPSN: ``tpsn_overwritten``, ``tpsn_consumed`` (an earlier scan had
        dequeued it), ``tpsn_misidentified`` (the first queued PSN after ePSN is not the NIC's tPSN: an entry that
        reached the NIC while its ePSN was lower), ``entry_bits_exceeded``.
    """

    def __init__(self):
        self.params = {}
        self.config = {}
        self.events = []
        self.outputs = []
        self.info = []
        self.transmissions = []
        self.lost = set()
        self.pbase = []
        self.start_psn = []
        self.warnings = []
        self.diagnostics = Counter()

    @property
    def items(self):
        """The item events (without the control commands)."""
        return [ev for ev in self.events if "item" in ev]

    def summary(self):
        """Counts describing the run: transmissions, losses, retransmissions, NIC NACKs, foreign items, and the
        golden verdicts by name."""
        origins = Counter(info["origin"] for info in self.info)
        return dict(transmissions=len(self.transmissions),
                    retransmissions=sum(tx.retx for tx in self.transmissions),
                    lost=sum(tx.lost for tx in self.transmissions),
                    nic_nacks=origins["nack"], foreign=origins["foreign"], data_items=origins["data"],
                    verdicts=dict(verdict_counts(self.outputs)), **self.diagnostics)


def min_queue_depth(*, gap_ns, last_hop_ns, path_delay_ns):
    """PSN-queue entries one QP needs so that a NACK's tPSN is still queued when the NACK comes back.

    Entries enqueued after tPSN and before its NACK returns arrive within one last-hop round trip ``2 x last_hop_ns``;
    with per-packet delays spread over ``hi - lo``, the packets sent within ``2 x last_hop_ns + hi - lo`` can all land
    in that window. One entry for tPSN itself and one of slack (a retransmission, a FIFO nudge) are added.
    """
    lo, hi = path_delay_ns
    return math.ceil((2 * last_hop_ns + (hi - lo)) / gap_ns) + 2


def _check_args(n_paths, n_qps, queue_depth, entry_bits, n_flows, packets_per_flow, loss, gap_ns, path_delay_ns,
                last_hop_ns, reverse_ns, foreign):
    for name, value, lo in (("n_paths", n_paths, 1), ("n_qps", n_qps, 1), ("queue_depth", queue_depth, 1),
                            ("entry_bits", entry_bits, 2), ("n_flows", n_flows, 1),
                            ("packets_per_flow", packets_per_flow, 0), ("gap_ns", gap_ns, 1),
                            ("last_hop_ns", last_hop_ns, 1), ("reverse_ns", reverse_ns, 0)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, not {value!r}")
        if value < lo:
            raise ValueError(f"{name} must be at least {lo}, not {value}")
    if n_flows > n_qps:
        raise ValueError(f"n_flows ({n_flows}) must not exceed n_qps ({n_qps})")
    if entry_bits > 24:
        raise ValueError(f"entry_bits must be at most 24, not {entry_bits}")
    if not 0 <= loss < 1:
        raise ValueError(f"loss must be in [0, 1), not {loss}")
    if not 0 <= foreign:
        raise ValueError(f"foreign must be non-negative, not {foreign}")
    lo, hi = path_delay_ns
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
        raise ValueError(f"path_delay_ns must be integers 0 <= lo <= hi, not {path_delay_ns!r}")


def generate(seed, *, n_paths, n_qps, queue_depth, entry_bits, n_flows, packets_per_flow, loss, gap_ns,
             path_delay_ns, last_hop_ns, start_psn=None, reverse_ns=None, foreign=0.05, check_queue=True):
    """Run the closed loop once and return its :class:`Scenario`.

    Parameters
    ----------
    seed : int or str
        Seeds the one ``random.Random`` every choice is drawn from.
    n_paths, n_qps, queue_depth, entry_bits : int
        Themis-D's parameters (``n_paths`` is also Themis-S's N).
    n_flows : int
        Senders (QPs 0 to ``n_flows - 1``), at most ``n_qps``.
    packets_per_flow : int
        New packets each sender sends.
    loss : float
        Probability that the fabric drops a transmission.
    gap_ns : int
        Each sender's packet interval.
    path_delay_ns : (int, int)
        Range of the per-packet fabric delay.
    last_hop_ns : int
        One-way ToR-NIC delay.
    start_psn : None, int or sequence of int
        Each flow's first PSN: random when None, the same for all flows when an int.
    reverse_ns : int or None
        Delay from the ToR to the sender for a NACK (default: the largest path delay).
    foreign : float
        Foreign items per new data packet.
    check_queue : bool
        Raise :class:`ValueError` when ``queue_depth < min_queue_depth(...)``. Only tests of the checker itself
        should turn this off.

    Raises
    ------
    ValueError
        Bad parameters, or a PSN queue too small for the last hop (see :func:`min_queue_depth`).
    """
    if reverse_ns is None:
        reverse_ns = path_delay_ns[1]
    _check_args(n_paths, n_qps, queue_depth, entry_bits, n_flows, packets_per_flow, loss, gap_ns, path_delay_ns,
                last_hop_ns, reverse_ns, foreign)
    need = min_queue_depth(gap_ns=gap_ns, last_hop_ns=last_hop_ns, path_delay_ns=path_delay_ns)
    if check_queue and queue_depth < need:
        raise ValueError(f"queue_depth {queue_depth} is too small: a NACK's last-hop round trip "
                         f"({2 * last_hop_ns} ns, delay spread {path_delay_ns[1] - path_delay_ns[0]} ns) spans up "
                         f"to {need - 1} packets at one every {gap_ns} ns; use at least {need}")

    rng = random.Random(seed)
    sc = Scenario()
    sc.params = dict(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)
    sc.config = dict(seed=seed, n_paths=n_paths, n_qps=n_qps, queue_depth=queue_depth, entry_bits=entry_bits,
                     n_flows=n_flows, packets_per_flow=packets_per_flow, loss=loss, gap_ns=gap_ns,
                     path_delay_ns=tuple(path_delay_ns), last_hop_ns=last_hop_ns, start_psn=start_psn,
                     reverse_ns=reverse_ns, foreign=foreign, check_queue=check_queue)

    themis_s = ThemisS(n_paths=n_paths, mode="port")
    themis_d = ThemisD(**sc.params)
    sc.pbase = [rng.randrange(n_paths) for _ in range(n_flows)]
    if start_psn is None:
        sc.start_psn = [rng.randrange(PSN_MOD) for _ in range(n_flows)]
    elif isinstance(start_psn, int):
        sc.start_psn = [start_psn % PSN_MOD] * n_flows
    else:
        sc.start_psn = [p % PSN_MOD for p in start_psn]
        if len(sc.start_psn) != n_flows:
            raise ValueError("start_psn must give one PSN per flow")
    phase = [rng.randrange(gap_ns) for _ in range(n_flows)]
    nics = [SelectiveRepeatReceiver(p) for p in sc.start_psn]

    for q in range(n_flows):
        cmd = {"table": 0, "index": q, "data": 0}
        sc.events.append({"ctl": cmd})
        themis_d.control(cmd)

    heap = []
    seq = 0

    def push(t, kind, payload):
        nonlocal seq
        heapq.heappush(heap, (t, seq, kind, payload))
        seq += 1

    for q in range(n_flows):
        for k in range(packets_per_flow):
            push(phase[q] + k * gap_ns, "send", (q, psn_add(sc.start_psn[q], k), False))

    horizon = packets_per_flow * gap_ns + path_delay_ns[1]
    foreign_kinds = [PacketKind.OTHER.value, PacketKind.ACK.value, PacketKind.ROCE_OTHER.value]
    for _ in range(round(foreign * n_flows * packets_per_flow)):
        r = rng.random()
        if r < 0.5:      # other traffic, of an active QP or of none
            item = {"kind": rng.choice(foreign_kinds), "qp_hit": rng.randrange(2), "qp": rng.randrange(n_flows), "msn": 0}
        elif r < 0.8 or n_qps == n_flows:      # DATA or NACK of a QP the classifier does not know
            item = {"kind": rng.choice([_DATA, _NACK]), "qp_hit": 0, "qp": rng.randrange(n_qps), "msn": 0}
        else:            # DATA or NACK of an idle flow-table entry
            item = {"kind": rng.choice([_DATA, _NACK]), "qp_hit": 1, "qp": rng.randrange(n_flows, n_qps), "msn": 0}
        item["psn"] = rng.randrange(PSN_MOD)
        push(rng.randrange(horizon + 1), "tor", ("foreign", item, None))

    last_arrival = [-1] * n_paths
    shadow = [deque(maxlen=queue_depth) for _ in range(n_flows)]   # full PSNs and item indices of queue entries
    lo, hi = path_delay_ns
    window = 1 << (entry_bits - 1)

    def send(t, q, psn, retx):
        path = themis_s.process({"kind": _DATA, "psn": psn, "flow_hash": sc.pbase[q], "udp_sport": 0})["path"]
        lost = rng.random() < loss
        delay = rng.randint(lo, hi)
        tx = Transmission(q, psn, t, path, lost, retx)
        sc.transmissions.append(tx)
        if lost:
            sc.lost.add((q, psn))
            return
        arrival = max(t + delay, last_arrival[path] + 1)
        last_arrival[path] = arrival
        push(arrival, "tor", ("data", len(sc.transmissions) - 1, None))

    while heap:
        t, _, kind, payload = heapq.heappop(heap)
        if kind == "send":
            send(t, *payload)
        elif kind == "sender":
            q, psn = payload
            send(t, q, psn, True)
        elif kind == "nic":
            q, psn, index = payload
            nack = nics[q].receive(psn)
            if nack is not None:
                # Every data packet is a one-packet message, so the AETH MSN (messages completed) is ePSN - start.
                msn = (nack[1] - sc.start_psn[q]) % PSN_MOD
                push(t + last_hop_ns, "tor", ("nack", {"kind": _NACK, "qp_hit": 1, "qp": q, "psn": nack[1],
                                                       "msn": msn},
                                              dict(raised=t, tpsn=psn, tpsn_item=index)))
        elif kind == "tor":
            origin, what, extra = payload
            index = len(sc.info)
            info = {"origin": origin, "t": t}
            if origin == "data":
                tx = sc.transmissions[what]
                tx.t_tor, tx.item = t, index
                item = {"kind": _DATA, "qp_hit": 1, "qp": tx.qp, "psn": tx.psn, "msn": 0}
                info.update(tx=what, retx=tx.retx)
            else:
                item = dict(what)
                if extra is not None:
                    info.update(extra)
            item["tag"] = index % (1 << 16)
            if origin == "nack":
                _check_scan_window(sc, themis_d, shadow, item, info, window)
            out = themis_d.process(item)
            sc.events.append({"item": item, "t": t})
            sc.outputs.append(out)
            sc.info.append(info)
            if origin == "data":
                shadow[item["qp"]].append((item["psn"], index))
                push(t + last_hop_ns, "nic", (item["qp"], item["psn"], index))
                if out["comp"]:
                    push(t + reverse_ns, "sender", (item["qp"], out["comp_psn"]))
            elif origin == "nack" and not out["drop"]:
                push(t + reverse_ns, "sender", (item["qp"], item["psn"]))
    return sc


def _check_scan_window(sc, themis_d, shadow, item, info, window):
    """Before a NIC NACK is handled: check the entry_bits assumption and note how the scan relates to the real
    tPSN (overwritten, dequeued by an earlier scan, or misidentified)."""
    q, e = item["qp"], item["psn"]
    live = list(shadow[q])[len(shadow[q]) - themis_d.flows[q].queue.count:]
    for psn, _ in live:
        if not (psn_sub(psn, e) < window or psn_sub(e, psn) < window):
            sc.warnings.append(f"NACK item {len(sc.info)} (QP {q}, ePSN {e}, t={info['t']}): entry_bits "
                               f"{sc.params['entry_bits']} too small, queued PSN {psn} is "
                               f"{min(psn_sub(psn, e), psn_sub(e, psn))} from ePSN")
            sc.diagnostics["entry_bits_exceeded"] += 1
            break
    tpsn_item = info["tpsn_item"]
    indices = [index for _, index in shadow[q]]
    if tpsn_item not in indices:
        sc.warnings.append(f"NACK item {len(sc.info)} (QP {q}, ePSN {e}, t={info['t']}): its tPSN "
                           f"{info['tpsn']} was overwritten in the PSN queue before the NACK arrived")
        sc.diagnostics["tpsn_overwritten"] += 1
    elif tpsn_item not in [index for _, index in live]:
        sc.diagnostics["tpsn_consumed"] += 1
    first_after = next((index for psn, index in live if psn_after(psn, e)), None)
    if first_after != tpsn_item:
        sc.diagnostics["tpsn_misidentified"] += 1


def verdict_counts(outputs):
    """Counter of verdict names over an outputs list."""
    return Counter(VERDICT_NAMES[out["verdict"]] for out in outputs)


def _current_tx(by_psn, q, p, t):
    """The last transmission of (q, p) sent at or before t, or None."""
    current = None
    for tx in by_psn.get((q, p), ()):
        if tx.t_send <= t:
            current = tx
        else:
            break
    return current


def check_properties(scenario, outputs):
    """Check P1, P2 and well-formedness (see the module docstring) of ``outputs`` for ``scenario``'s trace.

    ``outputs`` is any list of output dicts with the golden model's fields (golden or RTL). Returns a list of
    violation strings, empty when every property holds.
    """
    sc = scenario
    items = sc.items
    violations = []
    if len(outputs) != len(items):
        return [f"P0: {len(outputs)} outputs for {len(items)} items"]

    by_psn = {}
    for tx in sc.transmissions:     # already in send order
        by_psn.setdefault((tx.qp, tx.psn), []).append(tx)
    data_by_path = {}               # (qp, path) -> data item indices in ToR order
    for i, info in enumerate(sc.info):
        if info["origin"] == "data":
            tx = sc.transmissions[info["tx"]]
            data_by_path.setdefault((tx.qp, tx.path), []).append(i)

    def where(i):
        return f"item {i} (tag {items[i]['item']['tag']}, t={items[i]['t']} ns)"

    # P0: well-formedness.
    for i, (ev, out, info) in enumerate(zip(items, outputs, sc.info)):
        item = ev["item"]
        if out.get("tag") != item["tag"]:
            violations.append(f"P0: {where(i)}: output tag {out.get('tag')} != {item['tag']}")
        if info["origin"] == "foreign" and (out["drop"] or out["comp"]):
            violations.append(f"P0: {where(i)}: foreign item {item} not passed untouched "
                              f"(drop={out['drop']}, comp={out['comp']})")
        if info["origin"] == "data" and out["drop"]:
            violations.append(f"P0: {where(i)}: data packet QP {item['qp']} PSN {item['psn']} dropped")
        if info["origin"] == "nack" and out["comp"]:
            violations.append(f"P0: {where(i)}: compensation on a NACK item")

    # P1: what reaches the sender is a NACK for a truly lost transmission.
    for i, (ev, out, info) in enumerate(zip(items, outputs, sc.info)):
        t = ev["t"]
        q = ev["item"]["qp"]
        reaching = []
        if info["origin"] == "nack" and not out["drop"]:
            reaching.append(("forwarded NACK", ev["item"]["psn"]))
        if info["origin"] == "data" and out["comp"]:
            reaching.append(("compensation NACK", out["comp_psn"]))
        for what, p in reaching:
            tx = _current_tx(by_psn, q, p, t)
            if tx is None:
                violations.append(f"P1: {where(i)}: {what} QP {q} PSN {p}: PSN never sent")
            elif not tx.lost:
                state = (f"passed the ToR at t={tx.t_tor}" if tx.t_tor is not None and tx.t_tor <= t
                         else f"in flight, reaches the ToR at t={tx.t_tor}")
                kind = "retransmission" if tx.retx else "transmission"
                violations.append(f"P1: {where(i)}: {what} QP {q} PSN {p} is a reordering NACK: its current "
                                  f"{kind} (sent t={tx.t_send}) was not lost, {state}")

    # P2: every NIC NACK for a truly lost packet reaches the sender by the next packet on its path.
    for i, (ev, out, info) in enumerate(zip(items, outputs, sc.info)):
        if info["origin"] != "nack":
            continue
        q, e, t = ev["item"]["qp"], ev["item"]["psn"], ev["t"]
        lost_tx = _current_tx(by_psn, q, e, t)
        if lost_tx is None or not lost_tx.lost:
            continue
        nxt = None
        for j in data_by_path.get((q, lost_tx.path), ()):
            tx = sc.transmissions[sc.info[j]["tx"]]
            if tx.t_send > lost_tx.t_send and psn_after(tx.psn, e):
                nxt = j
                break
        if nxt is None:
            continue
        deadline = max(i, nxt)
        if not out["drop"]:
            continue
        if any(outputs[j]["comp"] and outputs[j]["comp_psn"] == e and sc.info[j]["origin"] == "data"
               and items[j]["item"]["qp"] == q for j in range(i, deadline + 1)):
            continue
        later = next((j for j in range(deadline + 1, len(items)) if outputs[j]["comp"]
                      and outputs[j]["comp_psn"] == e and items[j]["item"]["qp"] == q), None)
        late = f"compensated only at {where(later)}" if later is not None else "never compensated"
        violations.append(f"P2: {where(i)}: NACK QP {q} ePSN {e} (lost, sent t={lost_tx.t_send}, path "
                          f"{lost_tx.path}) blocked as {VERDICT_NAMES.get(out['verdict'], out['verdict'])} and "
                          f"{late}; the next packet on its path, PSN {items[nxt]['item']['psn']}, is {where(nxt)}")
    return violations
