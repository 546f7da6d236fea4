"""Golden model of PRO's receiver out-of-order window and loss recovery (PRO, paper 003: sections III-B, III-C,
Algorithm 2, Figure 4).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.pro.ooo.Ooo`, written from the datasheet's rules
(docs/pro_ooo.md) with a different representation: a QP keeps the *set* of arrived PSNs at or past its head and
absolute PSNs for head, tail and NACK pointer; PSN order is ``(a - b) mod 2**24`` read as a signed number.

With ``head="context"`` each event carries the QP context's expected PSN (``epsn``) and the head the event works on
is rebuilt from it as the RTL's record does (datasheet, "Head from the QP context"): the head base (the head less
``padv``, how far the QP's last event moved its head) is the PSN in ``[epsn - 12, epsn - 12 + 2**k)`` that agrees
with the model's own in its low ``k = max(6, log2 bitmap_len + 2)`` bits. A faithful context (or one lagging by at
most ``2**k - 13`` PSNs) gives the model's own head back; a forged ``epsn`` moves the window by a multiple of
``2**k``. (The RTL ignores the ``epsn`` of an event whose QP has an event in flight; traces forge only on QPs with
none.)

Also here: :func:`ooo_trace`, seeded random traces with per-path reordering, loss, duplicates, timeouts, PSN wrap,
stale and forged PSNs, unknown QPs and QPs created and destroyed mid-trace.
"""

import random

from lbpipe.hdl.pro.ooo import check_parameters, resolve_bitmap_len

__all__ = ["Ooo", "ooo_trace", "create_cmd", "destroy_cmd"]

# Written again here (the datasheet's tables and codes), not imported from the RTL.
MOD = 1 << 24
HALF = 1 << 23
TABLE_CREATE, TABLE_DESTROY = 0, 1
DATA = 1                                      # PacketKind.DATA
OTHER, ACCEPT, REPEAT, STALE, BEYOND, UNKNOWN, TIMEOUT = range(7)


def sdiff(a, b):
    """``a - b`` for 24-bit PSNs, as a signed number in [-2**23, 2**23)."""
    x = (a - b) % MOD
    return x - MOD if x >= HALF else x


def create_cmd(qp, psn, wnd):
    return {"table": TABLE_CREATE, "index": qp, "data": (psn % MOD) | (wnd << 24)}


def destroy_cmd(qp):
    return {"table": TABLE_DESTROY, "index": qp, "data": 0}


class _Qp:
    def __init__(self, psn, wnd):
        self.head = psn             # lowest PSN not yet passed by the head (all earlier PSNs arrived)
        self.tail = (psn - 1) % MOD  # highest PSN arrived (head - 1 when nothing at or past the head arrived)
        self.arrived = set()        # arrived PSNs at or past the head
        self.nacked = False         # the head has been NACKed (Algorithm 2's QP.NACK == head)
        self.wnd = wnd
        self.padv = 0               # PSNs the head passed at this QP's last event (the RTL adds it late)


class Ooo:
    """Per-QP windows keyed by ``qp``. Parameters are those of the RTL block (``n_qps``, ``bitmap_len``)."""

    def __init__(self, *, n_qps=10240, bitmap_len=None, head="record"):
        check_parameters(n_qps=n_qps, bitmap_len=bitmap_len, head=head)
        bitmap_len = resolve_bitmap_len(bitmap_len, head)
        self.n_qps, self.L = n_qps, bitmap_len
        self.context = head == "context"
        self.k = max(6, bitmap_len.bit_length() + 1)     # low head-base bits a context-mode record keeps
        self.wmax = (1 << (bitmap_len.bit_length() + 1)) - 1
        self.reset()

    def reset(self):
        """Hardware reset: every QP becomes unknown (the records are swept), counters clear."""
        self.qps = {}
        self.counts = [0] * 7       # accepted, repeated, timeouts, NACKs, stale, beyond, unknown

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        if index >= self.n_qps:
            return
        if table == TABLE_CREATE:
            self.qps[index] = _Qp(value % MOD, min((value >> 24) & 0xFFFF, self.wmax))
        elif table == TABLE_DESTROY:
            self.qps.pop(index, None)

    def process(self, item):
        """One event: the result item (the NACK to send, if any, and the QP's window after the event)."""
        kind, qp, psn, timeout = int(item["kind"]), item["qp"], item["psn"], item["timeout"]
        out = {"kind": kind, "tag": item["tag"], "qp": qp, "nack": 0, "nack_psn": 0, "head": 0, "tail": 0, "wnd": 0,
               "nacked": 0}
        if self.context:
            out.update(epsn=0, epsn_we=0)
        q = self.qps.get(qp)
        if q is not None and self.context:
            self._from_context(q, item["epsn"])
        if q is None:
            cls = UNKNOWN if (timeout or kind == DATA) else OTHER
            if cls == UNKNOWN:
                self.counts[6] += 1
            out["cls"] = cls
            return out
        if timeout:
            cls = TIMEOUT
            q.wnd //= 2
            self.counts[2] += 1
        elif kind != DATA:
            cls = OTHER
        else:
            d = sdiff(psn, q.head)
            if 0 <= d < self.L:
                if psn in q.arrived:
                    cls = REPEAT
                else:
                    cls = ACCEPT
                    q.arrived.add(psn)
                    if sdiff(psn, q.tail) > 0:
                        q.tail = psn
            elif -self.L <= d < 0:
                cls = REPEAT
            else:
                cls = BEYOND if d > 0 else STALE
            if cls == REPEAT:
                q.wnd = min(q.wnd + 1, self.wmax)
        if cls in (ACCEPT, REPEAT, STALE, BEYOND):
            self.counts[{ACCEPT: 0, REPEAT: 1, STALE: 4, BEYOND: 5}[cls]] += 1
        q.padv = 0
        if cls in (ACCEPT, REPEAT, TIMEOUT):
            q.padv = self._catch_up(q)
            nack = self._check(q)
            if nack is not None:
                out["nack"], out["nack_psn"] = 1, nack
                self.counts[3] += 1
        out.update(cls=cls, head=q.head, tail=q.tail, wnd=q.wnd, nacked=int(q.nacked))
        if self.context:
            out.update(epsn=q.head, epsn_we=1)
        return out

    def _from_context(self, q, epsn):
        """The head rebuilt from ``epsn``: the head base (head - padv) is the PSN in [epsn - 12, epsn - 12 + 2**k)
        with the base's low k bits. When it differs, the whole window (head, tail, arrived PSNs) moves with it."""
        size = 1 << self.k
        base = (q.head - q.padv) % MOD
        e = (epsn - 12) % MOD
        new = (e + (base - e) % size + q.padv) % MOD
        delta = (new - q.head) % MOD
        if delta:
            q.head = new
            q.tail = (q.tail + delta) % MOD
            q.arrived = {(p + delta) % MOD for p in q.arrived}

    def _catch_up(self, q):
        """The head passes at most two arrived PSNs; a head that moves has not been NACKed. Returns how many."""
        passed = 0
        for _ in range(2):
            if q.head not in q.arrived:
                break
            q.arrived.discard(q.head)
            q.head = (q.head + 1) % MOD
            q.nacked = False
            passed += 1
        return passed

    def _check(self, q):
        """Algorithm 2's CheckAndSendNACK for the lowest missing PSN only (RoCE's NAK names the expected PSN): the
        head, when it is missing, not NACKed yet, and older than tail - wnd."""
        if q.head not in q.arrived and not q.nacked and sdiff(q.tail, q.head) > q.wnd:
            q.nacked = True
            return q.head
        return None


def ooo_trace(seed, n_items, **params):
    """A seeded random trace: a few QPs created through ``ctl`` (some starting near the PSN wrap), then
    ``n_items`` events: each QP's packets sent in order over ``paths`` paths with different delays (reordering),
    some lost, some duplicated, occasional timeouts, stale and forged PSNs, unknown QPs, non-data items, runs of
    back-to-back events of one QP, and QPs destroyed and re-created mid-trace."""
    n_qps = params.get("n_qps", 10240)
    L = resolve_bitmap_len(params.get("bitmap_len"), params.get("head", "record"))
    rng = random.Random(seed)
    n_active = min(n_qps - 1, 5)
    qps = rng.sample(range(n_qps), n_active) if n_qps > n_active else list(range(n_active))
    unknown = [q for q in range(n_qps) if q not in qps][:3]
    events = []
    state = {}

    def create(q):
        start = rng.choice([0, rng.randrange(MOD), MOD - rng.randrange(1, 3 * L)])
        wnd = rng.randrange(max(1, L // 8), L)
        events.append({"ctl": create_cmd(q, start, wnd)})
        state[q] = {"next": start, "pending": []}      # pending: (arrival time, psn)

    for q in qps:
        create(q)
    t = 0
    burst_q, burst = None, 0
    n = 0
    while n < n_items:
        t += 1
        if burst == 0:
            burst_q = rng.choice(qps)
            burst = rng.randrange(1, 6)
        burst -= 1
        q = burst_q
        st = state[q]
        r = rng.random()
        if r < 0.01 and n > 10:
            events.append({"ctl": destroy_cmd(q)} if rng.random() < 0.5 else None)
            events[-1] is None and events.pop()
            create(q)
            continue
        # send one packet of q on a random path: the delay is the path's
        psn = st["next"]
        st["next"] = (psn + 1) % MOD
        if rng.random() > 0.04:                                   # 4% lost
            st["pending"].append((t + rng.choice([0, 1, 2, 4, 7]), psn))
        elif rng.random() < 0.9:                                  # most lost packets come again (retransmitted)
            st["pending"].append((t + rng.randrange(8, 24), psn))
            if rng.random() < 0.03:                               # duplicate
                st["pending"].append((t + rng.randrange(3, 12), psn))
        due = sorted(p for p in st["pending"] if p[0] <= t)
        st["pending"] = [p for p in st["pending"] if p[0] > t]
        for _, p in due:
            events.append({"item": {"kind": DATA, "qp": q, "psn": p, "tag": n & 0xFFFF}})
            n += 1
        x = rng.random()
        tag = n & 0xFFFF
        if x < 0.04:
            events.append({"item": {"kind": DATA, "timeout": 1, "qp": q, "psn": rng.randrange(MOD), "tag": tag}})
        elif x < 0.06:
            events.append({"item": {"kind": DATA, "qp": q, "psn": rng.randrange(MOD), "tag": tag}})   # forged
        elif x < 0.07:
            events.append({"item": {"kind": DATA, "qp": q, "psn": (st["next"] - rng.randrange(L, 4 * L)) % MOD,
                                    "tag": tag}})                                                  # stale dup
        elif x < 0.08:
            events.append({"item": {"kind": DATA, "qp": q, "psn": (st["next"] + rng.randrange(L, 3 * L)) % MOD,
                                    "tag": tag}})                                                  # far ahead
        elif x < 0.09 and unknown:
            events.append({"item": {"kind": DATA, "timeout": rng.randrange(2), "qp": rng.choice(unknown),
                                    "psn": rng.randrange(MOD), "tag": tag}})
        elif x < 0.10:
            events.append({"item": {"kind": rng.choice([0, 2, 3, 4]), "qp": q, "psn": rng.randrange(MOD),
                                    "tag": tag}})
        else:
            continue
        n += 1
    while n > n_items and "item" in events[-1]:
        events.pop()
        n -= 1
    if params.get("head", "record") == "context":
        _context_epsn(rng, events, n_qps, L)
    return events


def _context_epsn(rng, events, n_qps, L):
    """Give every item an ``epsn`` as a QP context would: the head a result wrote back, seen ``lag`` events late
    (0 to 12, changing along the trace: a context read racing the write-back), set at once by a create; and, on a
    QP with no event among the six before (none in flight), now and then a forged ``epsn`` (after which the context
    is written at once with the head the block reports)."""
    model = Ooo(n_qps=n_qps, bitmap_len=L, head="context")
    ctx, written, pending, recent = {}, {}, [], []
    lag = 0
    for number, event in enumerate(events):
        if number % 50 == 0:
            lag = rng.choice([0, 1, 3, 6, 12])
        due = [p for p in pending if p[0] <= number]
        pending = [p for p in pending if p[0] > number]
        for _, qp, head, _ in sorted(due, key=lambda p: p[3]):
            if written.get(qp, -1) < head[1]:           # an older write-back never overwrites a newer one
                ctx[qp], written[qp] = head[0], head[1]
        if "ctl" in event:
            cmd = event["ctl"]
            model.control(cmd)
            qp = cmd["index"]
            if cmd["table"] == TABLE_CREATE:
                ctx[qp], written[qp] = cmd["data"] % MOD, number
                pending = [p for p in pending if p[1] != qp]
            recent.append(qp)
            continue
        item = event["item"]
        qp = item["qp"]
        forged = qp not in recent[-6:] and rng.random() < 0.03
        item["epsn"] = rng.randrange(MOD) if forged or qp not in ctx else ctx[qp]
        out = model.process({"timeout": 0, **item})
        if forged:
            ctx[qp], written[qp] = out["epsn"], number
            pending = [p for p in pending if p[1] != qp]
        elif out["epsn_we"]:
            pending.append((number + 1 + lag, qp, (out["epsn"], number), number))
        recent.append(qp)
