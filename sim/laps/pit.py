"""Golden model of the LAPS decomposed Path Information Table with active probing (LAPS, IEEE ToN: sections III-C,
III-D, III-H, Algorithm 1).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.laps.pit.Pit`. Events apply in trace order, which is the
serial order the hardware keeps: an update offered in the same clock as a lookup (the event just before it) applies
first, then the lookup and its probe write-back, then anything later. See docs/laps_pit.md for the rules.

Also here: :func:`pit_commands` (control-plane JSON ``"pit"`` list -> ``ctl`` commands) and :func:`pit_trace` (seeded
random traces with hazards, stale paths and bad updates).
"""

import ipaddress
import random

import collections

from lbpipe.hdl.laps.pit import check_parameters
from lbpipe.hdl.lib.meta import PacketKind

__all__ = ["Pit", "pit_commands", "pit_trace", "lfsr_step", "INFINITY", "TABLE_VALUES", "TABLE_ANCHORS01",
           "TABLE_ANCHORS23", "TABLE_TIME", "TABLE_COMMIT"]

# Written again here (the datasheet's tables), not imported from the RTL.
INFINITY = 0xFFFF_FFFF
TIME_MASK = (1 << 48) - 1
TABLE_VALUES, TABLE_ANCHORS01, TABLE_ANCHORS23, TABLE_TIME, TABLE_COMMIT = 0, 1, 2, 3, 4
#: A lookup never probes a path written by its clock's update or one of the HOLDOFF updates before it, or probed by
#: one of the HOLDOFF lookups before it (datasheet, "Probe hold-off").
HOLDOFF = 5


def lfsr_step(state):
    """One step of the 16-bit Fibonacci LFSR x^16 + x^14 + x^13 + x^11 + 1, shifting left (bit 0 takes the
    feedback)."""
    bit = ((state >> 15) ^ (state >> 13) ^ (state >> 12) ^ (state >> 10)) & 1
    return ((state << 1) | bit) & 0xFFFF


def _double(real):
    return min(2 * real, INFINITY)


class Pit:
    """The PIT: per pid ``valid``, ``time``, ``real`` (written by updates, probes and ``ctl``), ``base``,
    ``anchors`` (``ctl`` only).

    Parameters are those of the RTL block (``n_entries``, ``k``, ``probe_rule``, ``lfsr_seed``).
    """

    def __init__(self, *, n_entries=8192, k=8, probe_rule="paper", lfsr_seed=0xACE1):
        check_parameters(n_entries=n_entries, k=k, probe_rule=probe_rule, lfsr_seed=lfsr_seed)
        self.n_entries, self.k, self.rule, self.seed = n_entries, k, probe_rule, lfsr_seed
        self.sub = n_entries // k
        self.kp = 1 << (k - 1).bit_length()
        self.valid = [0] * n_entries
        self.time = [0] * n_entries
        self.real = [0] * n_entries
        self.base = [0] * n_entries
        self.n_anchors = [0] * n_entries
        self.anchors = [[0] * 4 for _ in range(n_entries)]
        self.reset()

    def reset(self):
        """Hardware reset: the pipeline empties, counters, staging registers and the hold-off history clear, the
        LFSR restarts at its seed; the memories keep their contents."""
        self.counts = [0, 0, 0, 0]          # lookups, updates, rejected updates, probes
        self.lfsr = self.seed
        self.staged = {"base": 0, "real": 0, "anchors": [0, 0, 0, 0], "time": 0}
        self._paired = None                 # the update offered in the same clock as the next lookup
        self.recent_updates = collections.deque(maxlen=HOLDOFF + 1)     # pids, the latest last
        self.recent_probes = collections.deque(maxlen=HOLDOFF)          # probed pid or None per lookup

    def stats(self):
        return [c % (1 << 32) for c in self.counts]

    def _names_path(self, pid):
        return pid < self.n_entries and pid % self.sub != 0

    def control(self, cmd):
        """Tables 0-3 stage values; table 4 commits the staged entry to pid ``index`` (when it names a path)."""
        self._paired = None
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        lo, hi = value & 0xFFFF_FFFF, value >> 32
        if table == TABLE_VALUES:
            self.staged["base"], self.staged["real"] = lo, hi
        elif table == TABLE_ANCHORS01:
            self.staged["anchors"][0:2] = [lo, hi]
        elif table == TABLE_ANCHORS23:
            self.staged["anchors"][2:4] = [lo, hi]
        elif table == TABLE_TIME:
            self.staged["time"] = value & TIME_MASK
        elif table == TABLE_COMMIT and self._names_path(index):
            self.valid[index] = value & 1
            self.n_anchors[index] = min((value >> 1) & 7, 4)
            self.base[index] = self.staged["base"]
            self.real[index] = self.staged["real"]
            self.time[index] = self.staged["time"]
            self.anchors[index] = list(self.staged["anchors"])

    def process_stream(self, name, item):
        """An item of an input stream other than ``i``: here ``upd``, an update. Returns nothing."""
        if name != "upd":
            raise ValueError(f"the PIT has no input stream {name!r}")
        return self.update(item)

    def update(self, item):
        """``real = owd``, ``time = now`` for a valid path; anything else is rejected (counted, no change)."""
        pid = item["pid"]
        self.counts[1] += 1
        ok = self._names_path(pid) and self.valid[pid] == 1
        if ok:
            self.real[pid] = item["owd"]
            self.time[pid] = item["now"]
        else:
            self.counts[2] += 1
        self._paired = (pid, ok)
        self.recent_updates.append(pid)
        return None

    def _slot_pid(self, item, j):
        pid = item[f"pid{j}"]
        return pid if self._names_path(pid) and pid // self.sub == j else None

    def process(self, item):
        """One lookup: the result item (slots as the lookup leaves them, and its probe)."""
        paired, self._paired = self._paired, None
        k, now = self.k, item["now"]
        self.counts[0] += 1
        pids = [self._slot_pid(item, j) for j in range(k)]
        live = [p is not None and self.valid[p] == 1 for p in pids]
        # hold-off: this clock's update and the HOLDOFF before it, the probes of the last HOLDOFF lookups
        updates = list(self.recent_updates)[-(HOLDOFF + 1):] if paired is not None else \
            list(self.recent_updates)[-HOLDOFF:]
        hold = set(updates) | {p for p in self.recent_probes if p is not None}
        ok = [live[j] and pids[j] not in hold for j in range(k)]
        if self.rule == "max":
            finite = [self.real[p] for j, p in enumerate(pids) if ok[j] and self.real[p] != INFINITY]
            limit = [max(finite) if finite else INFINITY] * k
        else:
            limit = [self.real[p] if ok[j] else 0 for j, p in enumerate(pids)]
        stale = [ok[j] and (now - self.time[pids[j]]) % (1 << 48) > 2 * limit[j] for j in range(k)]
        start = self.lfsr & (self.kp - 1)
        self.lfsr = lfsr_step(self.lfsr)
        chosen = None
        for n in range(self.kp):
            j = (start + n) % self.kp
            if j < k and stale[j]:
                chosen = j
                break
        held = 0
        self.recent_probes.append(pids[chosen] if chosen is not None else None)
        if chosen is not None:
            p = pids[chosen]
            self.real[p] = _double(self.real[p])
            self.time[p] = now
            self.counts[3] += 1
            if paired is not None and paired[1] and paired[0] != p and paired[0] // self.sub == chosen:
                held = 1
        out = {"kind": item["kind"], "tag": item["tag"], "probe_valid": int(chosen is not None),
               "probe_slot": chosen or 0, "probe_pid": pids[chosen] if chosen is not None else 0, "held": held}
        for j, p in enumerate(pids):
            # A slot naming no path of sub-table j: valid 0, real_val infinity, and the other fields of the entry
            # at its index in sub-table j (index 0, never written, for an empty slot: zeros).
            row = p if p is not None else j * self.sub + item[f"pid{j}"] % self.sub
            out[f"valid{j}"] = int(live[j])
            out[f"real_val{j}"] = self.real[row] if p is not None else INFINITY
            out[f"base_val{j}"] = self.base[row]
            out[f"time{j}"] = self.time[row]
            out[f"n_anchors{j}"] = self.n_anchors[row]
            for a in range(4):
                out[f"anchor{j}_{a}"] = self.anchors[row][a]
        return out

    def cycles(self, result):
        """Cycles the lookup holds the output stage: 2 when its probe waited behind its clock's update."""
        return 1 + result["held"]


def _ip(value):
    return int(ipaddress.IPv4Address(value)) if isinstance(value, str) else int(value)


def pit_commands(pit_entries, **params):
    """``ctl`` commands that load the control plane's ``"pit"`` list: per path its values (base_val, initial
    real_val = base_val), anchors, time 0, then the commit (valid, anchor count)."""
    n_entries = params.get("n_entries", 8192)
    k = params.get("k", 8)
    sub = n_entries // k
    cmds = []
    for entry in pit_entries:
        pid = entry["pid"]
        if "sub_table" in entry and pid != entry["sub_table"] * sub + entry["index"]:
            raise ValueError(f"pid {pid} is not sub_table {entry['sub_table']} x {sub} + index {entry['index']}")
        if not (pid < n_entries and pid % sub):
            raise ValueError(f"pid {pid} names no path of a {n_entries}-entry PIT in {k} sub-tables")
        anchors = [_ip(a) for a in entry.get("anchors", [])]
        if len(anchors) > 4:
            raise ValueError(f"pid {pid}: {len(anchors)} anchors, at most 4")
        words = anchors + [0] * (4 - len(anchors))
        base = entry["base_val"]
        real = entry.get("real_val", base)
        cmds += [
            {"table": TABLE_VALUES, "index": 0, "data": base | real << 32},
            {"table": TABLE_ANCHORS01, "index": 0, "data": words[0] | words[1] << 32},
            {"table": TABLE_ANCHORS23, "index": 0, "data": words[2] | words[3] << 32},
            {"table": TABLE_TIME, "index": 0, "data": entry.get("time", 0)},
            {"table": TABLE_COMMIT, "index": pid, "data": int(entry.get("valid", 1)) | len(anchors) << 1},
        ]
    return cmds


def pit_trace(seed, n_items, **params):
    """A seeded random trace: paths set up through ``ctl``, then ``n_items`` clocks, each a lookup (about 95%),
    most with an update (``{"upd": ...}`` just before the ``{"item": ...}`` it shares a clock with). Hazards: updates of pids of the
    same lookup and of the previous one; stale paths (``now`` jumps); bad updates (pid out of range, index 0,
    invalid entry, a pid never set up); ``now`` going backwards; empty and forged slots; a mid-trace re-commit."""
    n_entries, k = params.get("n_entries", 8192), params.get("k", 8)
    sub = n_entries // k
    rng = random.Random(seed)
    n_dst = 6
    dests = []
    entries = []
    used = set()
    for d in range(n_dst):
        slots = []
        for j in range(k):
            if rng.random() < 0.15:
                slots.append(0)
                continue
            index = rng.randrange(1, sub)
            pid = j * sub + index
            slots.append(pid)
            if pid not in used:
                used.add(pid)
                entries.append({"pid": pid, "base_val": rng.randrange(500, 5000),
                                "anchors": [f"10.0.{rng.randrange(256)}.{rng.randrange(256)}"
                                            for _ in range(rng.randrange(0, 5))],
                                "valid": int(rng.random() < 0.9), "time": rng.randrange(0, 3000)})
        dests.append(slots)
    for e in entries:
        e["real_val"] = e["base_val"] if rng.random() < 0.9 else INFINITY
    events = [{"ctl": c} for c in pit_commands(entries, n_entries=n_entries, k=k)]
    now = 10_000
    prev = None
    for n in range(n_items):
        r = rng.random()
        now = (now + (rng.randrange(0, 40) if r < 0.9 else rng.randrange(1000, 30000))) & TIME_MASK
        if rng.random() < 0.01:
            now = (now - rng.randrange(1, 20000)) & TIME_MASK
        if rng.random() < 0.003:
            now = TIME_MASK - rng.randrange(0, 100)            # about to wrap
        slots = list(rng.choice(dests))
        if rng.random() < 0.05:
            j = rng.randrange(k)
            slots[j] = rng.choice([rng.randrange(1 << 16), j * sub, ((j + 1) % k) * sub + 1])   # forged slot
        pool = [p for p in slots if p] + ([p for p in prev if p] if prev else [])
        u = rng.random()
        if u < 0.8:
            b = rng.random()
            if b < 0.06:
                pid = rng.choice([rng.randrange(n_entries, 1 << 16) if n_entries < 1 << 16 else 0,
                                  rng.randrange(k) * sub, rng.randrange(1 << 16)])
            elif pool:
                pid = rng.choice(pool)
            else:
                pid = rng.randrange(1, n_entries)
            owd = INFINITY if rng.random() < 0.02 else rng.randrange(100, 8000)
            unow = (now - rng.randrange(0, 50)) & TIME_MASK
            events.append({"upd": {"pid": pid, "owd": owd, "now": unow}})
        if rng.random() < 0.05:
            continue                                           # an update with no lookup in its clock
        if n == n_items // 2 and entries:
            e = dict(rng.choice(entries), valid=int(rng.random() < 0.7), time=now)
            events += [{"ctl": c} for c in pit_commands([e], n_entries=n_entries, k=k)]
        item = {"kind": PacketKind.DATA.value, "now": now, "tag": n & 0xFFFF}
        item.update({f"pid{j}": slots[j] for j in range(k)})
        events.append({"item": item})
        prev = slots
    return events
