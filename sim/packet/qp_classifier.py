"""Golden model of the QP classifier, its control plane, and a random trace generator.

:class:`QpClassifier` is the bit-exact, transaction-level twin of :class:`lbpipe.hdl.packet.qp_classifier.QpClassifier`:
the same control commands and items in give the same items out. :class:`QpTable` is the control plane a host
driver runs: it keeps a shadow of the table, computes each key's bucket in every way, picks a free slot (moving
keys between their ways, cuckoo style, when none is free), and turns the result into control commands; a key
that cannot be placed raises :class:`TableFull`. :func:`qp_classifier_trace` writes seeded random traces.

The rules (module docstring of :mod:`lbpipe.hdl.packet.qp_classifier`):

* Keys (:class:`Key`): a ``DATA`` item's is ``(qpn = dqpn, dir = 0, ipv6, local = dst_ip, remote = 0)``; an
  ``ACK`` or ``NACK`` item's is ``(qpn = dqpn, dir = 1, ipv6, local = src_ip, remote = dst_ip)``; other kinds have
  none and miss. These are the keys of :class:`lbpipe.tb.lib.packets.QpClassifier`.
* A lookup hits when a valid slot holds exactly the item's key; the first such way (lowest number) gives ``qp``.
  On a miss ``qp`` is 0.
* With ``ipv6=False`` a key fits only with ``ipv6`` clear and both addresses below 2**32; an item whose key does
  not fit misses, and an INSERT of a staged key that does not fit is ignored.
* Reset clears the statistics only: the table and the staging register keep their contents.
"""

import ipaddress
import random
from collections import namedtuple

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.packet.qp_classifier import (DIR_FROM, DIR_TOWARDS, KEY_WORDS, QPN_BITS, TABLE_CLEAR, TABLE_DELETE,
                                 TABLE_INSERT, TABLE_KEY, QpKey, address_bits, check_parameters,
                                 qp_bits)

__all__ = [
    "Key", "QpClassifier", "QpTable", "TableFull", "QpRecord", "data_key", "ack_key", "item_key", "pack_key",
    "unpack_key", "key_words", "bucket_of", "key_fits", "qp_classifier_trace", "qp_classifier_bench",
    "TABLE_KEY", "TABLE_INSERT", "TABLE_DELETE", "TABLE_CLEAR", "KEY_WORDS",
]

_QPN_MASK = (1 << QPN_BITS) - 1
_M64 = (1 << 64) - 1
_DATA = PacketKind.DATA.value
_ACKS = (PacketKind.ACK.value, PacketKind.NACK.value)

#: A classifier key: ``qpn`` 24 bits, ``dir`` (0 towards the local NIC, 1 from it), ``ipv6`` (0 or 1), ``local``
#: and ``remote`` addresses as integers (``remote`` is 0 for ``dir`` 0).
Key = namedtuple("Key", "qpn dir ipv6 local remote")


def _address(value):
    """``(integer, is_ipv6)`` of an address given as a string, an ``ipaddress`` object or bytes (4 or 16)."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        raise TypeError("give addresses as strings, ipaddress objects or bytes: an integer does not say its family")
    address = ipaddress.ip_address(value)
    return int(address), int(address.version == 6)


def _qpn(name, qpn):
    if not isinstance(qpn, int) or isinstance(qpn, bool):
        raise TypeError(f"{name} must be an integer, not {qpn!r}")
    if not 0 <= qpn <= _QPN_MASK:
        raise ValueError(f"{name} {qpn:#x} does not fit 24 bits")
    return qpn


def data_key(local_ip, local_qpn):
    """The key a data packet towards the local NIC looks up: (destination = local address, dest QPN = local
    QPN)."""
    local, is6 = _address(local_ip)
    return Key(_qpn("local_qpn", local_qpn), DIR_TOWARDS, is6, local, 0)


def ack_key(local_ip, remote_ip, remote_qpn):
    """The key an ACK or NACK from the local NIC looks up: (source = local, destination = remote, dest QPN =
    remote QPN)."""
    local, is6 = _address(local_ip)
    remote, remote6 = _address(remote_ip)
    if is6 != remote6:
        raise ValueError(f"local {local_ip} and remote {remote_ip} are not the same IP version")
    return Key(_qpn("remote_qpn", remote_qpn), DIR_FROM, is6, local, remote)


def item_key(item):
    """The key of an input item (a dict of ``ClassifierItem`` fields), or None for kinds not looked up."""
    if item["kind"] == _DATA:
        return Key(item["dqpn"], DIR_TOWARDS, item["ipv6"], item["dst_ip"], 0)
    if item["kind"] in _ACKS:
        return Key(item["dqpn"], DIR_FROM, item["ipv6"], item["src_ip"], item["dst_ip"])
    return None


def key_fits(key, *, ipv6=True):
    """Whether the table of a block built with ``ipv6`` can hold ``key``."""
    if ipv6:
        return True
    return not key.ipv6 and key.local < (1 << 32) and key.remote < (1 << 32)


def pack_key(key, *, ipv6=True):
    """The key as the ``QpKey`` layout packs it (first field lowest): the hash's input."""
    a = address_bits(ipv6)
    word = key.qpn | key.dir << QPN_BITS
    at = QPN_BITS + 1
    if ipv6:
        word |= key.ipv6 << at
        at += 1
    return word | key.local << at | key.remote << (at + a)


def unpack_key(packed, *, ipv6=True):
    """The :class:`Key` packed in ``packed`` (the inverse of :func:`pack_key`)."""
    a = address_bits(ipv6)
    at = QPN_BITS + 1 + int(ipv6)
    mask = (1 << a) - 1
    return Key(packed & _QPN_MASK, (packed >> QPN_BITS) & 1, (packed >> (QPN_BITS + 1)) & 1 if ipv6 else 0,
               (packed >> at) & mask, (packed >> (at + a)) & mask)


def key_words(key):
    """The five staging words (control table 0, indices 0 to 4) of ``key``."""
    return [key.qpn | key.dir << 24 | key.ipv6 << 25,
            key.local & _M64, key.local >> 64, key.remote & _M64, key.remote >> 64]


def splitmix64(n):
    """Output ``n`` (from 1) of splitmix64 started from state 0 (Steele, Lea and Flood, as in Vigna's splitmix64.c),
    written here apart from the hardware's generator."""
    mask = (1 << 64) - 1
    z = (n * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def h3_constant(way, bit):
    """The H3 constant of key bit ``bit`` in ``way`` (docs/qp_classifier.md): splitmix64 output ``512 way + bit + 1``."""
    return splitmix64(512 * way + bit + 1)


def bucket_of(key, way, *, buckets, ipv6=True):
    """H3 bucket of ``key`` in ``way``: XOR of ``h3_constant(way, i)`` over the set bits ``i`` of the packed key,
    low ``log2(buckets)`` bits."""
    packed = pack_key(key, ipv6=ipv6)
    h = 0
    i = 0
    while packed:
        if packed & 1:
            h ^= h3_constant(way, i)
        packed >>= 1
        i += 1
    return h & (buckets - 1)


class QpClassifier:
    """The block: control commands and items, as the hardware handles them.

    Parameters
    ----------
    n_entries, buckets, ways, ipv6, user_bits
        As :class:`lbpipe.hdl.packet.qp_classifier.QpClassifier`.

    Members
    -------
    slots : list of list
        ``slots[way][bucket]`` is ``(Key, qp)`` or None.
    """

    def __init__(self, *, n_entries=4096, buckets=4096, ways=4, ipv6=True, user_bits=0):
        check_parameters(n_entries=n_entries, buckets=buckets, ways=ways, ipv6=ipv6, user_bits=user_bits)
        self.n_entries = n_entries
        self.buckets = buckets
        self.ways = ways
        self.ipv6 = ipv6
        self.user_bits = user_bits
        self._qp_mask = (1 << qp_bits(n_entries)) - 1
        self.slots = [[None] * buckets for _ in range(ways)]
        self.staging = [0] * KEY_WORDS
        self.counts = [0, 0, 0]

    def reset(self):
        """Hardware reset: the statistics clear; the table and the staging register are kept."""
        self.counts = [0, 0, 0]

    def stats(self):
        """Counters as the RTL's ``stats`` port holds them: hits, misses, other kinds (modulo 2**32)."""
        return [c % (1 << 32) for c in self.counts]

    def staged_key(self):
        """The key the staging register holds (all five words, whether the block stores them or not)."""
        w = self.staging
        return Key(w[0] & _QPN_MASK, (w[0] >> 24) & 1, (w[0] >> 25) & 1, w[1] | w[2] << 64, w[3] | w[4] << 64)

    def control(self, cmd):
        """Apply one control command ``{"table", "index", "data"}``; what the block ignores, this ignores."""
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        in_range = index < self.ways * self.buckets
        way, bucket = divmod(index, self.buckets)
        if table == TABLE_KEY:
            if index < KEY_WORDS:
                self.staging[index] = value & _M64
        elif table == TABLE_INSERT:
            key = self.staged_key()
            if in_range and key_fits(key, ipv6=self.ipv6):
                self.slots[way][bucket] = (key, value & self._qp_mask)
        elif table == TABLE_DELETE:
            if in_range:
                self.slots[way][bucket] = None
        elif table == TABLE_CLEAR:
            self.slots = [[None] * self.buckets for _ in range(self.ways)]

    def lookup(self, key):
        """``(qp_hit, qp)`` for ``key`` (None: not looked up)."""
        if key is None or not key_fits(key, ipv6=self.ipv6):
            return 0, 0
        for way in range(self.ways):
            slot = self.slots[way][bucket_of(key, way, buckets=self.buckets, ipv6=self.ipv6)]
            if slot is not None and slot[0] == key:
                return 1, slot[1]
        return 0, 0

    def process(self, item):
        """The output item for one input item (a dict of the input layout's fields)."""
        key = item_key(item)
        hit, qp = self.lookup(key)
        self.counts[2 if key is None else 0 if hit else 1] += 1
        out = dict(item)
        out.update(qp_hit=hit, qp=qp)
        return out


class TableFull(ValueError):
    """No slot can take a key: all its ways are taken and no relocation within the move budget frees one."""


#: A QP the control plane installed: its two keys and flow-table index.
QpRecord = namedtuple("QpRecord", "data_key ack_key index")


class QpTable:
    """Control plane of the classifier: a shadow of the table and the commands that change it.

    Each method returns the list of control commands (``{"table", "index", "data"}`` dicts, in order) that make
    the hardware's table match the shadow; apply them to the block (AXI4-Lite, or a trace) in that order. A
    method that raises leaves the shadow unchanged and returns no commands.

    Insertion: the key's slot in each way (``bucket_of``) is tried in way order; if all are taken, a
    breadth-first search finds the shortest chain of at most ``max_moves`` relocations of resident keys to
    another of their ways that ends at a free slot. The chain is executed from its free end: each key is first
    written to its new slot and only then overwritten in its old one, so a lookup of any installed key hits at
    every point of the sequence (a key briefly in two slots carries one index).

    Parameters
    ----------
    n_entries, buckets, ways, ipv6
        As the block's (``user_bits`` is accepted and ignored, so a block's parameters can be passed as they are).
    max_moves : int
        Relocations an insertion may make, 0 for none.
    """

    def __init__(self, *, n_entries=4096, buckets=4096, ways=4, ipv6=True, user_bits=0, max_moves=8):
        check_parameters(n_entries=n_entries, buckets=buckets, ways=ways, ipv6=ipv6, user_bits=user_bits)
        if not isinstance(max_moves, int) or isinstance(max_moves, bool):
            raise TypeError(f"max_moves must be an integer, not {max_moves!r}")
        if max_moves < 0:
            raise ValueError(f"max_moves must be at least 0, not {max_moves}")
        self.n_entries = n_entries
        self.buckets = buckets
        self.ways = ways
        self.ipv6 = ipv6
        self.max_moves = max_moves
        self.slots = [[None] * buckets for _ in range(ways)]
        self.qps = {}
        self._where = {}
        self.moves = 0     # relocations made so far (statistics)

    @property
    def capacity(self):
        return self.ways * self.buckets

    @property
    def keys(self):
        return len(self._where)

    @property
    def load(self):
        return self.keys / self.capacity

    def slot_index(self, way, bucket):
        """The control ``index`` of a slot."""
        return way * self.buckets + bucket

    def where(self, key):
        """``(way, bucket)`` of an installed key, or None."""
        return self._where.get(key)

    def candidates(self, key):
        """The key's slot ``(way, bucket)`` in every way."""
        return [(w, bucket_of(key, w, buckets=self.buckets, ipv6=self.ipv6)) for w in range(self.ways)]

    # -- commands -------------------------------------------------------------------------------------------------

    def _write(self, key, index, slot, log):
        cmds = [{"table": TABLE_KEY, "index": i, "data": word} for i, word in enumerate(key_words(key))]
        cmds.append({"table": TABLE_INSERT, "index": self.slot_index(*slot), "data": index})
        w, b = slot
        log.append((slot, self.slots[w][b]))
        self.slots[w][b] = (key, index)
        self._where[key] = slot
        return cmds

    def _undo(self, log, moves):
        """Put back the slots ``log`` records (in reverse), the positions of every key they held, and the
        relocation count."""
        self.moves = moves
        touched = set()
        for (w, b), old in log:
            for slot in (self.slots[w][b], old):
                if slot is not None:
                    touched.add(slot[0])
        for (w, b), old in reversed(log):
            self.slots[w][b] = old
        for key in touched:
            self._where.pop(key, None)
        for (w, b), _ in log:
            if self.slots[w][b] is not None:
                self._where[self.slots[w][b][0]] = (w, b)

    def _path(self, key):
        """Shortest list of slots ``[s0, ..., sn]``: s0 a slot of ``key``, each next slot another slot of the key
        in the previous one, sn free; None if there is none within ``max_moves`` relocations."""
        starts = self.candidates(key)
        for slot in starts:
            if self.slots[slot[0]][slot[1]] is None:
                return [slot]
        parent = {slot: None for slot in starts}
        frontier = list(starts)
        for _ in range(self.max_moves):
            following = []
            for slot in frontier:
                resident = self.slots[slot[0]][slot[1]][0]
                for nxt in self.candidates(resident):
                    if nxt[0] == slot[0] or nxt in parent:
                        continue
                    parent[nxt] = slot
                    if self.slots[nxt[0]][nxt[1]] is None:
                        path = [nxt]
                        while parent[path[-1]] is not None:
                            path.append(parent[path[-1]])
                        return path[::-1]
                    following.append(nxt)
            frontier = following
        return None

    def _insert(self, key, index, log):
        if not key_fits(key, ipv6=self.ipv6):
            raise ValueError(f"{_describe(key)} does not fit a table built with ipv6=False")
        if key in self._where:
            raise ValueError(f"{_describe(key)} is already in the table")
        path = self._path(key)
        if path is None:
            slots = ", ".join(f"way {w} bucket {b}" for w, b in self.candidates(key))
            raise TableFull(
                f"no free slot for {_describe(key)}: its slots ({slots}) are taken and no chain of at most "
                f"{self.max_moves} relocations frees one; the table holds {self.keys} of {self.capacity} keys "
                f"({100 * self.load:.0f}% load). Use more buckets or ways.")
        cmds = []
        for j in range(len(path) - 1, 0, -1):
            moving, moving_index = self.slots[path[j - 1][0]][path[j - 1][1]]
            cmds += self._write(moving, moving_index, path[j], log)
            self.moves += 1
        return cmds + self._write(key, index, path[0], log)

    def insert(self, key, index):
        """Commands that install ``key`` with flow-table index ``index``.

        Raises
        ------
        TableFull
            If no slot can be found.
        ValueError
            If the key is installed already, does not fit (``ipv6=False``), or ``index`` is out of range.
        """
        self._check_index(index)
        log, moves = [], self.moves
        try:
            return self._insert(key, index, log)
        except ValueError:
            self._undo(log, moves)
            raise

    def delete(self, key):
        """Commands that remove ``key``. Raises ``KeyError`` if it is not installed."""
        w, b = self._where.pop(key)
        self.slots[w][b] = None
        return [{"table": TABLE_DELETE, "index": self.slot_index(w, b), "data": 0}]

    def clear(self):
        """Commands that empty the table (one CLEAR)."""
        self.slots = [[None] * self.buckets for _ in range(self.ways)]
        self._where.clear()
        self.qps.clear()
        return [{"table": TABLE_CLEAR, "index": 0, "data": 0}]

    def add_qp(self, local_ip, remote_ip, local_qpn, remote_qpn, index):
        """Commands that install both keys of a QP (:func:`data_key`, :func:`ack_key`) with flow-table entry
        ``index``; both or neither.

        Raises
        ------
        TableFull
            If either key cannot be placed (the error says which slots and the load).
        ValueError
            For a QPN out of range, mixed address families, an IPv6 QP on a table built with ``ipv6=False``, an
            index out of range or in use, or keys already installed.
        """
        self._check_index(index)
        if index in self.qps:
            raise ValueError(f"flow-table index {index} is in use")
        keys = (data_key(local_ip, local_qpn), ack_key(local_ip, remote_ip, remote_qpn))
        log, moves = [], self.moves
        try:
            cmds = self._insert(keys[0], index, log) + self._insert(keys[1], index, log)
        except ValueError:
            self._undo(log, moves)
            raise
        self.qps[index] = QpRecord(keys[0], keys[1], index)
        return cmds

    def remove_qp(self, index):
        """Commands that remove the QP installed with ``index``. Raises ``KeyError`` if there is none."""
        record = self.qps.pop(index)
        return self.delete(record.data_key) + self.delete(record.ack_key)

    def _check_index(self, index):
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"index must be an integer, not {index!r}")
        if not 0 <= index < self.n_entries:
            raise ValueError(f"index must be from 0 to {self.n_entries - 1}, not {index}")


def _describe(key):
    version = ipaddress.IPv6Address if key.ipv6 else ipaddress.IPv4Address

    def text(value):
        try:
            return str(version(value))
        except ValueError:
            return hex(value)
    if key.dir == DIR_TOWARDS:
        return f"data key (local {text(key.local)}, QPN {key.qpn:#x})"
    return f"ACK/NACK key (local {text(key.local)}, remote {text(key.remote)}, QPN {key.qpn:#x})"


# -- random traces ----------------------------------------------------------------------------------------------------

_KINDS = [k.value for k in PacketKind]


def _random_address(rng, is6):
    if is6:
        return ipaddress.IPv6Address(rng.choice([0x20010DB8 << 96, 0xFD00 << 112]) | rng.getrandbits(64))
    return ipaddress.IPv4Address(rng.choice([0x0A000000, 0xC0A80000]) | rng.getrandbits(16))


def qp_classifier_trace(seed, n_items, *, n_entries, buckets, ways, ipv6, user_bits, max_moves=8):
    """A seeded random trace: CLEAR, QPs installed by :class:`QpTable` up to a random load (up to about 85%, so
    that relocations happen and some insertions fail and are skipped), then traffic with QPs added and removed in
    mid-traffic.

    Items: packets of installed QPs in both directions (hits), the same with one key field changed (QPN, local
    or remote address, the ``ipv6`` flag with the same address bits, address bits above 31 on IPv4, the other
    direction's form), packets of removed QPs, other kinds carrying a QP's fields, and random junk. Control:
    relocating insertions with items between their commands, removals, an occasional CLEAR and re-install,
    commands the block must ignore (unknown tables, staging words above 4, slots out of range), and raw commands
    behind the control plane's back: a second copy of an installed key with another index in another way (the
    first way wins), and with ``ipv6=False`` an unfit key committed where a removed QP's key would go (ignored).
    """
    rng = random.Random(seed)
    table = QpTable(n_entries=n_entries, buckets=buckets, ways=ways, ipv6=ipv6, user_bits=user_bits,
                    max_moves=max_moves)
    events = [{"ctl": c} for c in table.clear()]
    locals_ = [_random_address(rng, False) for _ in range(3)]
    remotes = [_random_address(rng, False) for _ in range(6)]
    if ipv6:
        locals_ += [_random_address(rng, True) for _ in range(2)]
        remotes += [_random_address(rng, True) for _ in range(4)]
        # An IPv6 address with the same bits as an IPv4 local: only the ipv6 flag tells their keys apart.
        locals_.append(ipaddress.IPv6Address(int(locals_[0])))
    qpns = [rng.randrange(1 << 24) for _ in range(6)] + [0, (1 << 24) - 1]
    removed = []
    target = max(1, int(table.capacity * rng.uniform(0.3, 0.85)) // 2)
    user_mask = (1 << user_bits) - 1

    def new_qp():
        limit = min(n_entries, 4 * table.capacity)
        if len(table.qps) >= limit:
            return []
        index = rng.randrange(limit)
        while index in table.qps:
            index = rng.randrange(limit)
        local = rng.choice(locals_)
        remote = rng.choice([r for r in remotes if r.version == local.version])
        qpn = rng.choice(qpns) if rng.random() < 0.3 else rng.randrange(1 << 24)
        try:
            return table.add_qp(local, remote, qpn, rng.randrange(1 << 24), index)
        except ValueError:      # TableFull, or keys already installed: skip
            return []

    def ctl_with_items(cmds):
        out = []
        for c in cmds:
            out.append({"ctl": c})
            if rng.random() < 0.15:
                out.append({"item": item()})
        return out

    def fields(record, kind):
        d, a = record.data_key, record.ack_key
        if kind == _DATA:
            return dict(ipv6=d.ipv6, src_ip=a.remote, dst_ip=d.local, dqpn=d.qpn)
        return dict(ipv6=a.ipv6, src_ip=a.local, dst_ip=a.remote, dqpn=a.qpn)

    def item():
        r = rng.random()
        kind = rng.choice([_DATA, _DATA, *_ACKS])
        if table.qps and r < 0.40:
            f = fields(table.qps[rng.choice(list(table.qps))], kind)
        elif table.qps and r < 0.55:
            f = fields(table.qps[rng.choice(list(table.qps))], kind)
            change = rng.randrange(6)
            if change == 0:
                f["dqpn"] ^= 1 << rng.randrange(24)
            elif change == 1:
                f["dst_ip" if kind == _DATA else "src_ip"] ^= 1 << rng.randrange(128 if f["ipv6"] else 32)
            elif change == 2:
                f["dst_ip"] ^= 1 << rng.randrange(128 if f["ipv6"] else 32)
            elif change == 3:
                f["ipv6"] ^= 1
            elif change == 4:
                f["dst_ip"] |= 1 << rng.randrange(32, 128)
            else:
                kind = _DATA if kind != _DATA else rng.choice(_ACKS)
        elif table.qps and r < 0.75:
            # A key that differs from an installed one and lands in its bucket: only the comparator rejects it.
            record = table.qps[rng.choice(list(table.qps))]
            stored = rng.choice([record.data_key, record.ack_key])
            where = table.where(stored)
            near = same_bucket(stored, where[0]) if where else None
            if near is None:
                f = fields(record, kind)
            else:
                return key_item(near)
        elif removed and r < 0.80:
            f = fields(rng.choice(removed), kind)
        elif table.qps and r < 0.90:
            f = fields(table.qps[rng.choice(list(table.qps))], kind)
            kind = rng.choice([PacketKind.OTHER.value, PacketKind.ROCE_OTHER.value, 5, 6, 7])
        else:
            kind = rng.choice(_KINDS + [5, 6, 7])
            is6 = rng.random() < 0.3
            f = dict(ipv6=int(is6), src_ip=rng.getrandbits(128 if is6 else 32),
                     dst_ip=rng.getrandbits(128 if is6 else 32), dqpn=rng.randrange(1 << 24))
        out = dict(kind=kind, psn=rng.randrange(1 << 24), msn=rng.randrange(1 << 24), tag=rng.randrange(1 << 16),
                   **f)
        if user_bits:
            out["user"] = rng.getrandbits(user_bits) & user_mask
        return out

    while table.keys // 2 < target:
        cmds = new_qp()
        if not cmds and len(table.qps) >= min(n_entries, 4 * table.capacity):
            break
        if not cmds:
            target -= 1
        events += [{"ctl": c} for c in cmds]

    def stage(key):
        return [{"ctl": {"table": TABLE_KEY, "index": i, "data": w}} for i, w in enumerate(key_words(key))]

    def stray_commands():
        """Raw commands behind the control plane's back (the golden model follows the block, not the shadow):
        a second copy of an installed key in a free slot of another way with another index, so that the first
        matching way must win; and, with ipv6=False, a key of a removed QP made unfit (ipv6 set, or an address
        bit above 31) committed to its free slot, which the block must ignore (the QP's packets keep missing)."""
        def spots(key):
            return [(w, b) for w, b in table.candidates(key) if table.slots[w][b] is None]

        def probes(key):
            return [{"item": key_item(key)} for _ in range(rng.randrange(1, 4))]
        if table.qps and (ipv6 or rng.random() < 0.5):
            keys = [k for r in table.qps.values() for k in (r.data_key, r.ack_key) if spots(k)]
            if keys:
                key = rng.choice(keys)
                return stage(key) + [{"ctl": {"table": TABLE_INSERT,
                                              "index": table.slot_index(*rng.choice(spots(key))),
                                              "data": rng.randrange(n_entries)}}] + probes(key)
        elif removed and not ipv6:
            keys = [k for r in removed[-20:] for k in (r.data_key, r.ack_key) if spots(k)]
            if keys:
                key = rng.choice(keys)
                wide = key._replace(ipv6=1) if rng.random() < 0.5 else key._replace(local=key.local | 1 << 32)
                return stage(wide) + [{"ctl": {"table": TABLE_INSERT,
                                               "index": table.slot_index(*rng.choice(spots(key))),
                                               "data": rng.randrange(n_entries)}}] + probes(key)
        return []

    def key_item(key):
        """An item whose key is ``key`` (a data key's ``remote`` must be 0)."""
        out = dict(kind=_DATA if key.dir == DIR_TOWARDS else rng.choice(_ACKS), ipv6=key.ipv6,
                   src_ip=key.local if key.dir else rng.getrandbits(128 if key.ipv6 else 32),
                   dst_ip=key.remote if key.dir else key.local, dqpn=key.qpn, psn=rng.randrange(1 << 24),
                   msn=rng.randrange(1 << 24), tag=rng.randrange(1 << 16))
        if user_bits:
            out["user"] = rng.getrandbits(user_bits)
        return out

    # Key bits by their H3 contribution to a bucket index, per way: flipping two bits with equal contributions
    # (or one contributing nothing) leaves the bucket unchanged.
    key_size = QpKey(ipv6=ipv6).size
    by_column = []
    for w in range(ways):
        columns = {}
        for i in range(key_size):
            columns.setdefault(h3_constant(w, i) & (buckets - 1), []).append(i)
        by_column.append(columns)

    remote_at = QPN_BITS + 1 + int(ipv6) + address_bits(ipv6)

    def same_bucket(key, way):
        """A key other than ``key`` with the same bucket in ``way``, that an item can carry (a data key keeps
        ``remote`` = 0); None if none was found quickly."""
        packed = pack_key(key, ipv6=ipv6)
        usable = key_size if key.dir == DIR_FROM else remote_at
        for _ in range(200):
            i = rng.randrange(usable)
            column = h3_constant(way, i) & (buckets - 1)
            partners = [j for j in by_column[way][column] if j != i and j < usable] + ([None] if column == 0 else [])
            if partners:
                j = rng.choice(partners)
                near = unpack_key(packed ^ (1 << i) ^ (0 if j is None else 1 << j), ipv6=ipv6)
                if near.dir == DIR_FROM or near.remote == 0:
                    return near
        return None

    have = 0
    cleared = False

    def emit(new):
        nonlocal have
        events.extend(new)
        have += sum(1 for e in new if "item" in e)

    def clear_and_refill():
        removed.extend(table.qps.values())
        emit(ctl_with_items(table.clear()))
        while table.keys // 2 < target // 2:
            cmds = new_qp()
            if not cmds:
                break
            emit([{"ctl": c} for c in cmds])

    while have < n_items:
        if not cleared and have >= (3 * n_items) // 5:
            cleared = True          # one CLEAR in every trace, then the packets of the QPs it removed
            clear_and_refill()
        r = rng.random()
        if r < 0.04:
            emit(ctl_with_items(new_qp()))
        elif r < 0.07 and table.qps:
            index = rng.choice(list(table.qps))
            removed.append(table.qps[index])
            emit(ctl_with_items(table.remove_qp(index)))
        elif r < 0.09:
            emit(stray_commands())
        elif r < 0.10:
            emit([{"ctl": rng.choice([
                {"table": rng.randrange(4, 256), "index": rng.randrange(1 << 24), "data": rng.getrandbits(64)},
                {"table": TABLE_KEY, "index": rng.randrange(KEY_WORDS, 1 << 24), "data": rng.getrandbits(64)},
                {"table": rng.choice([TABLE_INSERT, TABLE_DELETE]),
                 "index": rng.randrange(table.capacity, 1 << 24), "data": rng.getrandbits(64)},
            ])}])
        elif r < 0.102:
            clear_and_refill()
        emit([{"item": item()}])
    # Items between a sequence's commands may overshoot: end at the n_items-th item.
    while have > n_items or "ctl" in events[-1]:
        have -= "item" in events.pop()
    return events


def qp_classifier_bench(params, n_items=2000, n_qps=64):
    """Back-to-back lookups for ``lbpipe bench``: CLEAR, up to ``n_qps`` IPv4 QPs installed, then ``n_items``
    data packets and NACKs of installed QPs (three in four) and of unknown ones, with no control in between."""
    rng = random.Random(1)
    table = QpTable(**params)
    events = [{"ctl": c} for c in table.clear()]
    qps = []
    for index in range(min(n_qps, params["n_entries"], table.capacity // 4)):
        qp = ("10.0.0.%d" % (1 + index % 16), "10.1.%d.%d" % (index // 200, 1 + index % 200),
              rng.randrange(1 << 24), rng.randrange(1 << 24))
        try:
            events += [{"ctl": c} for c in table.add_qp(*qp, index)]
            qps.append(qp)
        except TableFull:
            pass
    for n in range(n_items):
        local, remote, lq, rq = rng.choice(qps)
        if rng.random() < 0.25:
            lq, rq = rng.randrange(1 << 24), rng.randrange(1 << 24)
        if n % 4:
            fields = dict(kind=_DATA, src_ip=int(ipaddress.ip_address(remote)), dst_ip=int(ipaddress.ip_address(local)),
                          dqpn=lq)
        else:
            fields = dict(kind=PacketKind.NACK.value, src_ip=int(ipaddress.ip_address(local)),
                          dst_ip=int(ipaddress.ip_address(remote)), dqpn=rq)
        events.append({"item": dict(fields, ipv6=0, psn=n % (1 << 24), msn=0, tag=n & 0xFFFF)})
    return events
