"""Golden model of the LAPS Path Search Table, its control plane, and its random traces.

:class:`Pst` is the bit-exact, transaction-level twin of :class:`lbpipe.hdl.laps.pst.Pst`: the same commands and
items in give the same items out. :class:`PstTable` is the control plane: it keeps a shadow of the slots and
records, places each destination in one of its ways' buckets (moving resident keys between their ways, cuckoo
style, when all are taken) and turns the result into control commands; :func:`pst_commands` encodes a whole table
(the ``"pst"`` list of the control-plane JSON, docs/laps_pst.md) and refuses one that does not fit.
:func:`pst_trace` writes seeded random traces, :func:`pst_bench` back-to-back lookups.

The rules, written again here from the datasheet (docs/laps_pst.md):

* A key is ``(address, ipv6 flag)``; with ``B = log2(buckets)``, its remainder is ``key >> B`` where
  ``key = address | flag << address_bits``, and way ``w`` puts it in bucket ``(address mod 2**B) XOR f_w(remainder)``.
  Bucket bit ``j`` of ``f_w`` XORs the remainder bits ``pi_w[(j t + m) mod R]``, ``m < t``; ``R`` the remainder
  width, ``t = min(R, max(5, ceil(R / B)))``; ``pi_w`` the remainder bits ordered by the QP classifier's H3
  constant ``q_w[i]``.
* A lookup hits when the slot of its bucket in some way is valid and holds its remainder; the record the (first)
  matching slot points to gives the pids. A miss reads record 0 and sets ``normal`` when the MISS flag is set.
* Reset clears the counters only.
"""

import ipaddress
import random
from collections import deque

from lbpipe.hdl.laps.pst import (COUNTERS, PID_BITS, TABLE_DELETE, TABLE_INSERT, TABLE_KEY, TABLE_MISS,
                                 TABLE_RECORD, check_parameters)
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.packet.qp_classifier import h3_constant

__all__ = ["Pst", "PstTable", "TableFull", "pst_commands", "pst_trace", "pst_bench", "bucket_of", "parse_address",
           "DEFAULTS", "TABLE_RECORD", "TABLE_MISS", "TABLE_INSERT", "TABLE_DELETE", "TABLE_KEY"]

#: The block's defaults (docs/laps_pst.md).
DEFAULTS = dict(n_dests=1024, k=8, ways=3, buckets=512, ipv6=False, user_bits=0)

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1


def _abits(ipv6):
    return 128 if ipv6 else 32


def _geometry(buckets, ipv6):
    """``(B, R)``: bucket bits and remainder bits."""
    b = buckets.bit_length() - 1
    return b, _abits(ipv6) + 1 - b


def _taps(way, buckets, ipv6):
    b, r = _geometry(buckets, ipv6)
    t = min(r, max(5, -(-r // b)))
    order = sorted(range(r), key=lambda i: h3_constant(way, i))
    return [[order[(j * t + m) % r] for m in range(t)] for j in range(b)]


_TAP_CACHE = {}


def bucket_of(addr, flag, way, *, buckets, ipv6=False):
    """The bucket of key ``(addr, flag)`` in ``way``."""
    key = (way, buckets, ipv6)
    if key not in _TAP_CACHE:
        _TAP_CACHE[key] = _taps(way, buckets, ipv6)
    b, _ = _geometry(buckets, ipv6)
    rem = (addr | flag << _abits(ipv6)) >> b
    out = addr & ((1 << b) - 1)
    for j, taps in enumerate(_TAP_CACHE[key]):
        out ^= (sum((rem >> i) & 1 for i in taps) & 1) << j
    return out


def parse_address(value):
    """``(integer, ipv6 flag)`` of an address string or ``ipaddress`` object."""
    address = ipaddress.ip_address(value)
    return int(address), int(address.version == 6)


class Pst:
    """The block: control commands and items, as the hardware handles them.

    Parameters
    ----------
    n_dests, k, ways, buckets, ipv6, user_bits
        As :class:`lbpipe.hdl.laps.pst.Pst`.

    Members
    -------
    slots : list of list
        ``slots[way][bucket]`` is ``(remainder, pointer)`` or None.
    records : list of list
        ``records[r]`` is the list of ``k`` pids of record ``r``.
    normal : int
        The MISS flag (1 at power-up).
    """

    def __init__(self, *, n_dests=1024, k=8, ways=3, buckets=512, ipv6=False, user_bits=0):
        check_parameters(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, user_bits=user_bits)
        self.n_dests, self.k, self.ways, self.buckets = n_dests, k, ways, buckets
        self.ipv6, self.user_bits = ipv6, user_bits
        self.words = -(-k // 4)
        self.word_bits = (self.words - 1).bit_length()
        self.slots = [[None] * buckets for _ in range(ways)]
        self.records = [[0] * k for _ in range(n_dests)]
        self.normal = 1
        self.staging = [0, 0]
        self.counts = [0] * len(COUNTERS)

    def reset(self):
        """Hardware reset: the counters clear; slots, records, the MISS flag and the staging register are kept."""
        self.counts = [0] * len(COUNTERS)

    def stats(self):
        """Counters as the RTL's ``stats`` port holds them (modulo 2**32), in :data:`COUNTERS` order."""
        return [c & _M32 for c in self.counts]

    def control(self, cmd):
        """Apply one command ``{"table", "index", "data"}``; what the block rejects is counted and changes
        nothing."""
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        b, _ = _geometry(self.buckets, self.ipv6)
        if table in (TABLE_INSERT, TABLE_DELETE) and index < self.ways * self.buckets:
            way, bucket = index >> b, index & (self.buckets - 1)
            if table == TABLE_INSERT:
                if self.ipv6:
                    upper = self.staging[0] | self.staging[1] << 64
                else:
                    upper = 0
                rem = ((value & _M32) | upper << 32) >> b
                self.slots[way][bucket] = (rem, (value >> 32) & (self.n_dests - 1))
                self.counts[3] += 1
            else:
                self.slots[way][bucket] = None
                self.counts[4] += 1
        elif table == TABLE_RECORD and index >> self.word_bits < self.n_dests and \
                index % (1 << self.word_bits) < self.words:
            record, word = index >> self.word_bits, index % (1 << self.word_bits)
            for m in range(4):
                if 4 * word + m < self.k:
                    self.records[record][4 * word + m] = (value >> (PID_BITS * m)) & 0xFFFF
        elif table == TABLE_MISS and index == 0:
            self.normal = value & 1
        elif table == TABLE_KEY and self.ipv6 and index < 2:
            self.staging[index] = value & (_M64 if index == 0 else (1 << 33) - 1)
        else:
            self.counts[5] += 1

    def lookup(self, addr, flag):
        """``(hit, record)`` for key ``(addr, flag)``."""
        b, _ = _geometry(self.buckets, self.ipv6)
        rem = (addr | flag << _abits(self.ipv6)) >> b
        for way in range(self.ways):
            slot = self.slots[way][bucket_of(addr, flag, way, buckets=self.buckets, ipv6=self.ipv6)]
            if slot is not None and slot[0] == rem:
                return 1, slot[1]
        return 0, 0

    def process(self, item):
        """The output item for one input item (a dict of the input layout's fields)."""
        hit, record = self.lookup(item["dst_ip"], item["ipv6"])
        self.counts[0] += 1
        self.counts[1 if hit else 2] += 1
        out = {"kind": item["kind"], "tag": item["tag"], "hit": hit, "normal": int(not hit and self.normal)}
        if self.user_bits:
            out["user"] = item["user"]
        out.update({f"pid{i}": pid for i, pid in enumerate(self.records[record])})
        return out


class TableFull(ValueError):
    """A destination finds no slot (all its buckets taken and no chain of relocations frees one), or no free
    record."""


class PstTable:
    """Control plane: a shadow of the slots and records, and the commands that change the block's.

    Each method returns the commands (``{"table", "index", "data"}`` dicts, in order) that make the block's tables
    match the shadow. A method that raises leaves the shadow unchanged.

    Insertion writes the record first, then the slot; a relocation writes a key's new slot before deleting its old
    one (the copies carry one pointer), so a lookup of an installed destination hits at every point. Deletion
    empties the slot first; the record is free after that. A changed pid set goes to a fresh record and the slot
    is repointed in one write.

    Parameters
    ----------
    n_dests, k, ways, buckets, ipv6, user_bits
        As the block's.
    n_entries : int
        PIT entries: pids are checked against ``pid = sub_table * (n_entries // k) + index`` (slot ``i`` holds a pid
        of sub-table ``i`` with index > 0, or 0).
    max_moves : int
        Relocations an insertion may make.
    """

    def __init__(self, *, n_dests=1024, k=8, ways=3, buckets=512, ipv6=False, user_bits=0, n_entries=8192,
                 max_moves=8):
        check_parameters(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, user_bits=user_bits)
        if not isinstance(n_entries, int) or n_entries < k or n_entries > 1 << PID_BITS:
            raise ValueError(f"n_entries must be an integer from k = {k} to {1 << PID_BITS}, not {n_entries!r}")
        self.n_dests, self.k, self.ways, self.buckets, self.ipv6 = n_dests, k, ways, buckets, ipv6
        self.n_entries, self.max_moves = n_entries, max_moves
        self.words = -(-k // 4)
        self.word_bits = (self.words - 1).bit_length()
        self.slots = [[None] * buckets for _ in range(ways)]      # (addr, flag) or None
        self.where = {}                                            # (addr, flag) -> (way, bucket)
        self.pointer = {}                                          # (addr, flag) -> record
        self.pids = {}                                             # (addr, flag) -> pids
        self.free = list(range(n_dests - 1, 0, -1))                # records 1 .. n_dests - 1
        self.moves = 0
        self._b = buckets.bit_length() - 1

    @property
    def capacity(self):
        return min(self.ways * self.buckets, self.n_dests - 1)

    def check_pids(self, pids):
        """``pids`` as a list of ``k`` integers, each 0 or a pid of its slot's sub-table; raises ``ValueError``."""
        if len(pids) != self.k:
            raise ValueError(f"a destination takes k = {self.k} pids (0 for an empty slot), not {len(pids)}")
        size = self.n_entries // self.k
        for i, pid in enumerate(pids):
            if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < self.k * size:
                raise ValueError(f"pid {pid!r} in slot {i} is not a pid of a {self.k * size}-entry PIT")
            if pid and (pid // size != i or pid % size == 0):
                raise ValueError(f"pid {pid} in slot {i} is sub-table {pid // size} index {pid % size}: slot {i} "
                                 f"takes a pid of sub-table {i} with an index above 0, or 0")
        return list(pids)

    def key(self, dst):
        addr, flag = parse_address(dst) if isinstance(dst, (str, ipaddress.IPv4Address, ipaddress.IPv6Address)) \
            else dst
        if flag and not self.ipv6:
            raise ValueError(f"{dst}: an IPv6 destination does not fit a table built with ipv6=False")
        return addr, flag

    def candidates(self, key):
        return [(w, bucket_of(*key, w, buckets=self.buckets, ipv6=self.ipv6)) for w in range(self.ways)]

    # -- commands -------------------------------------------------------------------------------------------------

    def _record_cmds(self, record, pids):
        out = []
        for word in range(self.words):
            value = 0
            for m in range(4):
                if 4 * word + m < self.k:
                    value |= pids[4 * word + m] << (PID_BITS * m)
            out.append({"table": TABLE_RECORD, "index": record << self.word_bits | word, "data": value})
        return out

    def _slot_cmds(self, key, slot, record):
        addr, flag = key
        out = []
        if self.ipv6:
            out += [{"table": TABLE_KEY, "index": 0, "data": (addr >> 32) & _M64},
                    {"table": TABLE_KEY, "index": 1, "data": (addr >> 96) | flag << 32}]
        way, bucket = slot
        out.append({"table": TABLE_INSERT, "index": way << self._b | bucket,
                    "data": (addr & _M32) | record << 32})
        return out

    def _path(self, key):
        """Shortest chain ``[s0, ..., sn]`` of slots: s0 a slot of ``key``, each next one another slot of the key in
        the previous, sn free; None if none within ``max_moves``."""
        starts = self.candidates(key)
        for s in starts:
            if self.slots[s[0]][s[1]] is None:
                return [s]
        parent = {s: None for s in starts}
        frontier = deque((s, 0) for s in starts)
        while frontier:
            s, depth = frontier.popleft()
            if depth >= self.max_moves:
                continue
            for nxt in self.candidates(self.slots[s[0]][s[1]]):
                if nxt[0] == s[0] or nxt in parent:
                    continue
                parent[nxt] = s
                if self.slots[nxt[0]][nxt[1]] is None:
                    path = [nxt]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1]
                frontier.append((nxt, depth + 1))
        return None

    def insert(self, dst, pids):
        """Commands that install destination ``dst`` with ``pids``; raises :class:`TableFull` or ``ValueError``."""
        key = self.key(dst)
        pids = self.check_pids(pids)
        if key in self.where:
            raise ValueError(f"{dst} is in the table already")
        if not self.free:
            raise TableFull(f"no free record for {dst}: {self.n_dests - 1} destinations at most "
                            f"(n_dests = {self.n_dests}, record 0 is the miss record)")
        path = self._path(key)
        if path is None:
            raise TableFull(f"no slot for {dst}: its buckets {self.candidates(key)} are taken and no chain of at "
                            f"most {self.max_moves} relocations frees one ({len(self.where)} destinations in "
                            f"{self.ways} x {self.buckets} slots); use more buckets or ways")
        record = self.free.pop()
        cmds = self._record_cmds(record, pids)
        for j in range(len(path) - 1, 0, -1):
            moving = self.slots[path[j - 1][0]][path[j - 1][1]]
            cmds += self._slot_cmds(moving, path[j], self.pointer[moving])
            self.slots[path[j][0]][path[j][1]] = moving
            self.where[moving] = path[j]
            self.moves += 1
        cmds += self._slot_cmds(key, path[0], record)
        self.slots[path[0][0]][path[0][1]] = key
        self.where[key], self.pointer[key], self.pids[key] = path[0], record, pids
        return cmds

    def delete(self, dst):
        """Commands that remove ``dst`` (``KeyError`` if absent); its record is free afterwards."""
        key = self.key(dst)
        way, bucket = self.where.pop(key)
        self.slots[way][bucket] = None
        self.free.append(self.pointer.pop(key))
        del self.pids[key]
        return [{"table": TABLE_DELETE, "index": way << self._b | bucket, "data": 0}]

    def update(self, dst, pids):
        """Commands that give ``dst`` new pids: a fresh record, then the slot repointed in one write."""
        key = self.key(dst)
        pids = self.check_pids(pids)
        if key not in self.where:
            raise KeyError(dst)
        if not self.free:
            raise TableFull("no free record for the update")
        record = self.free.pop()
        cmds = self._record_cmds(record, pids) + self._slot_cmds(key, self.where[key], record)
        self.free.append(self.pointer[key])
        self.pointer[key], self.pids[key] = record, pids
        return cmds

    def miss_action(self, *, normal=True, pids=None):
        """Commands that set the miss action: ``normal`` (pass to normal forwarding) and the default pids."""
        pids = self.check_pids(pids if pids is not None else [0] * self.k)
        return self._record_cmds(0, pids) + [{"table": TABLE_MISS, "index": 0, "data": int(bool(normal))}]


def pst_commands(pst_entries, *, n_entries=8192, max_moves=8, **params):
    """The commands that load a PST: ``pst_entries`` is the control-plane JSON's ``"pst"`` list
    (``{"dst": "<IP>", "pids": [k values]}``), ``params`` the block's parameters (defaults if absent),
    ``n_entries`` the PIT size the pids refer to.

    Raises
    ------
    TableFull
        If the destinations do not fit (more than ``n_dests - 1``, or no slot for one), naming the first that does
        not.
    ValueError
        For a pid in the wrong slot or out of range, a repeated destination, or an IPv6 destination on an IPv4
        table.
    """
    table = PstTable(**{**DEFAULTS, **params}, n_entries=n_entries, max_moves=max_moves)
    if len(pst_entries) > table.n_dests - 1:
        raise TableFull(f"{len(pst_entries)} destinations do not fit a PST of n_dests = {table.n_dests} "
                        f"({table.n_dests - 1} destinations; record 0 is the miss record)")
    cmds = []
    for entry in pst_entries:
        cmds += table.insert(entry["dst"], list(entry["pids"]))
    return cmds


# -- traffic ----------------------------------------------------------------------------------------------------------

def _random_pids(rng, table):
    size = table.n_entries // table.k
    n = rng.randint(1, table.k)
    return [i * size + rng.randrange(1, size) if i < n else 0 for i in range(table.k)]


def _random_dest(rng, ipv6):
    r = rng.random()
    if ipv6 and r < 0.4:
        return rng.choice([0x20010DB8 << 96, 0xFD00 << 112]) | rng.getrandbits(24), 1
    if r < 0.6:
        return 0x0A000000 | rng.getrandbits(12), 0      # one subnet: the low bits differ
    return rng.getrandbits(32), 0


def pst_trace(seed, n_items, *, n_dests, k, ways, buckets, ipv6, user_bits, n_entries=None):
    """A seeded random trace: a miss action and destinations installed up to a random load, then lookups of present
    and absent destinations (and near misses: one address bit or the ``ipv6`` flag changed) interleaved with
    inserts, deletes, pid updates, miss-action changes, forged commands (unknown tables, out-of-range slots and
    records, KEY on an IPv4 table) and raw slot writes behind the control plane's back (a second copy of a key in
    another way, first way wins; a key written to a bucket that is not its own)."""
    rng = random.Random(seed)
    n_entries = n_entries or max(k, min(1 << 16, k * max(2, n_dests)))
    table = PstTable(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, user_bits=user_bits,
                     n_entries=n_entries)
    events = [{"ctl": c} for c in table.miss_action(normal=rng.random() < 0.5, pids=_random_pids(rng, table))]
    removed = []
    target = max(1, int(table.capacity * rng.uniform(0.3, 0.9)))

    def install():
        for _ in range(4):
            dst = _random_dest(rng, ipv6)
            if dst in table.where:
                continue
            try:
                return table.insert(dst, _random_pids(rng, table))
            except TableFull:
                return []
        return []

    while len(table.where) < target:
        cmds = install()
        if not cmds:
            break
        events += [{"ctl": c} for c in cmds]
    b = buckets.bit_length() - 1
    abits = _abits(ipv6)
    rbits = abits + 1 - b
    user_mask = (1 << user_bits) - 1

    def item_for(addr, flag):
        out = {"kind": rng.randrange(8), "ipv6": flag, "dst_ip": addr, "tag": rng.randrange(1 << 16)}
        if user_bits:
            out["user"] = rng.getrandbits(user_bits) & user_mask
        return out

    def same_bucket(key):
        """A key other than ``key`` in ``key``'s bucket of the way that holds it: one or two remainder bits flipped
        and the low bits corrected (the hash is linear), so that only the comparison tells them apart."""
        addr, flag = key
        way = table.where[key][0]
        for i in rng.sample(range(rbits), min(rbits, rng.randint(1, 2))):
            x_addr, x_flag = (0, 1) if b + i == abits else (1 << (b + i), 0)
            addr ^= x_addr ^ bucket_of(x_addr, x_flag, way, buckets=buckets, ipv6=ipv6)
            flag ^= x_flag
        return addr, flag

    def lookup():
        r = rng.random()
        if table.where and r < 0.45:
            return item_for(*rng.choice(list(table.where)))
        if table.where and r < 0.55:
            return item_for(*same_bucket(rng.choice(list(table.where))))
        if table.where and r < 0.75:
            addr, flag = rng.choice(list(table.where))
            if rng.random() < 0.15:
                return item_for(addr, flag ^ 1)
            return item_for(addr ^ 1 << rng.randrange(128 if flag else 32), flag)
        if removed and r < 0.85:
            return item_for(*rng.choice(removed))
        addr, flag = _random_dest(rng, ipv6)
        if not ipv6 and rng.random() < 0.1:
            flag = 1             # an IPv6 packet's low address bits on an IPv4 table: a miss
        return item_for(addr, flag)

    def forged():
        choice = rng.randrange(6)
        if choice == 0:
            return [{"table": rng.randrange(5, 256), "index": rng.randrange(1 << 24), "data": rng.getrandbits(64)}]
        if choice == 1:
            return [{"table": rng.choice([TABLE_INSERT, TABLE_DELETE]),
                     "index": rng.randrange(ways * buckets, 1 << 24), "data": rng.getrandbits(64)}]
        if choice == 2:
            return [{"table": TABLE_RECORD, "index": rng.randrange(n_dests << table.word_bits, 1 << 24),
                     "data": rng.getrandbits(64)}]
        if choice == 3:
            return [{"table": TABLE_KEY if not ipv6 else TABLE_MISS, "index": rng.randrange(2, 1 << 24),
                     "data": rng.getrandbits(64)}]
        if choice == 4 and table.where:
            # A second copy of an installed key in another of its ways, pointing elsewhere: the first way wins.
            key = rng.choice(list(table.where))
            others = [s for s in table.candidates(key) if s != table.where[key]]
            if others:
                return table._slot_cmds(key, rng.choice(others), rng.randrange(n_dests))
        if choice == 5:
            # A key written to a bucket that is not its own: the slot then holds the key that bucket implies.
            addr, flag = _random_dest(rng, ipv6)
            return table._slot_cmds((addr, flag), (rng.randrange(ways), rng.randrange(buckets)),
                                    rng.randrange(n_dests))
        return []

    have = 0
    while have < n_items:
        r = rng.random()
        cmds = []
        if r < 0.03:
            cmds = install()
        elif r < 0.05 and table.where:
            dst = rng.choice(list(table.where))
            removed.append(dst)
            cmds = table.delete(dst)
        elif r < 0.06 and table.where and table.free:
            cmds = table.update(rng.choice(list(table.where)), _random_pids(rng, table))
        elif r < 0.065:
            cmds = table.miss_action(normal=rng.random() < 0.5, pids=_random_pids(rng, table))
        elif r < 0.08:
            cmds = forged()
        events += [{"ctl": c} for c in cmds]
        events.append({"item": lookup()})
        have += 1
    return events


def pst_bench(params, n_items=2000, n_dests=None):
    """Back-to-back lookups for ``lbpipe bench``: destinations of one /22 installed (up to ``n_dests - 1``), then
    ``n_items`` lookups, three in four of installed destinations, with no command in between."""
    rng = random.Random(1)
    params = {**DEFAULTS, **params}
    table = PstTable(**params)
    count = min(n_dests or params["n_dests"] - 1, params["n_dests"] - 1, 1000)
    events = [{"ctl": c} for c in table.miss_action(normal=True)]
    dests = []
    for n in range(count):
        dst = (0x0A000000 | (n + 1), 0)
        try:
            events += [{"ctl": c} for c in table.insert(dst, _random_pids(rng, table))]
            dests.append(dst)
        except TableFull:
            break
    for n in range(n_items):
        addr, flag = rng.choice(dests) if dests and n % 4 else (0x0B000000 | rng.getrandbits(16), 0)
        events.append({"item": {"kind": PacketKind.DATA.value, "ipv6": flag, "dst_ip": addr, "tag": n & 0xFFFF}})
    return events
