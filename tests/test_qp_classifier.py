"""QP classifier: signature, hash, golden model and control plane by hand, agreement with the test-side
``QpClassifier`` of ``tb/lib/packets.py``, RTL against the golden model (cocotb + Icarus, and Amaranth's simulator for
cycle-exact corner cases), synthesis."""

import ipaddress
import json
import random

import pytest

from lbpipe.boards.top import AxiLiteTop
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.packet.qp_classifier import (TABLE_CLEAR, TABLE_DELETE, TABLE_INSERT, TABLE_KEY, ClassifierItem,
                                      ClassifierResult, QpClassifier, QpKey, QpSlot, h3_constant, splitmix64)
from lbpipe.sim.packet.qp_classifier import QpClassifier as Golden
from lbpipe.sim.packet.qp_classifier import (Key, QpTable, TableFull, ack_key, bucket_of, data_key, key_words, pack_key,
                                      qp_classifier_trace, unpack_key)
from lbpipe.tb.lib.pysim import command, simulate
from lbpipe.trace import layout_fields, pack, unpack, write_events

DATA, ACK, NACK = PacketKind.DATA.value, PacketKind.ACK.value, PacketKind.NACK.value
OTHER, ROCE_OTHER = PacketKind.OTHER.value, PacketKind.ROCE_OTHER.value
IP = ipaddress.ip_address
SMALL = dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=0)


def _item(kind, src, dst, dqpn, *, tag=0, psn=0, msn=0, **extra):
    src, dst = IP(src), IP(dst)
    return dict(kind=kind, ipv6=int(src.version == 6), src_ip=int(src), dst_ip=int(dst), dqpn=dqpn, psn=psn, msn=msn,
                tag=tag, **extra)


def _apply(model, cmds):
    for cmd in cmds:
        model.control(cmd)


# -- signature ------------------------------------------------------------------------------------------------------

def test_signature_and_layouts():
    dut = QpClassifier(n_entries=1600, buckets=1024, ways=3, ipv6=True, user_bits=7)
    assert set(dut.signature.members) == {"i", "o", "ctl", "stats"}
    assert dut.signature.members["i"].signature.members["payload"].shape == ClassifierItem(user_bits=7)
    assert dut.signature.members["o"].signature.members["payload"].shape == ClassifierResult(n_entries=1600,
                                                                                            user_bits=7)
    assert dut.latency == 6 and dut.slots == 3072 and dut.memory_bits == 3072 * (1 + 11 + 282)
    dut._MustUse__silence = True
    assert layout_fields(ClassifierItem()) == [
        ("kind", 0, 3), ("ipv6", 3, 1), ("src_ip", 4, 128), ("dst_ip", 132, 128), ("dqpn", 260, 24),
        ("psn", 284, 24), ("msn", 308, 24), ("tag", 332, 16)]
    assert layout_fields(ClassifierResult(n_entries=4096))[-2:] == [("qp_hit", 348, 1), ("qp", 349, 12)]
    assert [name for name, _, _ in layout_fields(ClassifierItem(user_bits=5))][-2:] == ["user", "tag"]
    # Keys: 24 + 1 + 1 + 128 + 128 bits, or 24 + 1 + 32 + 32 without IPv6.
    assert layout_fields(QpKey()) == [("qpn", 0, 24), ("dir", 24, 1), ("ipv6", 25, 1), ("local", 26, 128),
                                      ("remote", 154, 128)]
    assert QpKey(ipv6=False).size == 89 and QpSlot(n_entries=4096).size == 295


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(n_entries=0), ValueError, "n_entries"),
    (dict(n_entries=1.5), TypeError, "n_entries"),
    (dict(buckets=1), ValueError, "buckets"),
    (dict(buckets=96), ValueError, "power of two"),
    (dict(buckets=True), TypeError, "buckets"),
    (dict(ways=0), ValueError, "ways"),
    (dict(ways=9), ValueError, "ways"),
    (dict(ipv6=1), TypeError, "ipv6"),
    (dict(user_bits=-1), ValueError, "user_bits"),
    (dict(user_bits=257), ValueError, "user_bits"),
])
def test_bad_parameters(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        QpClassifier(**kwargs)
    with pytest.raises(exc, match=message):
        Golden(**kwargs)


def test_keyword_only():
    with pytest.raises(TypeError):
        QpClassifier(4096)


# -- hash -------------------------------------------------------------------------------------------------------------

def test_splitmix64_reference_values():
    # Vigna's splitmix64.c from state 0: the first three outputs.
    assert [splitmix64(n) for n in (1, 2, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    assert h3_constant(0, 0) == 0xE220A8397B1DCDAF and h3_constant(1, 0) == splitmix64(513)
    # The golden model's own generator gives the same reference values.
    from lbpipe.sim.packet import qp_classifier as model
    assert [model.splitmix64(n) for n in (1, 2, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    assert model.h3_constant(1, 7) == h3_constant(1, 7)


def test_h3_by_hand():
    # qpn = 1 sets key bit 0 only; qpn = 3 sets bits 0 and 1; dir sets bit 24.
    one = Key(qpn=1, dir=0, ipv6=0, local=0, remote=0)
    assert pack_key(one) == 1
    assert bucket_of(one, 0, buckets=4096) == 0xE220A8397B1DCDAF & 0xFFF == 0xDAF
    assert bucket_of(one._replace(qpn=3), 0, buckets=4096) == (0xE220A8397B1DCDAF ^ 0x6E789E6AA1B965F4) & 0xFFF
    assert bucket_of(one._replace(qpn=0, dir=1), 2, buckets=64) == splitmix64(2 * 512 + 24 + 1) & 63
    # IPv4-only packing: local starts at bit 25, remote at 57.
    key = Key(qpn=0, dir=1, ipv6=0, local=1, remote=1)
    assert pack_key(key, ipv6=False) == 1 << 24 | 1 << 25 | 1 << 57
    assert pack_key(key) == 1 << 24 | 1 << 26 | 1 << 154


def test_h3_is_linear_and_spreads():
    rng = random.Random(1)
    keys = [Key(rng.randrange(1 << 24), rng.randrange(2), 1, rng.getrandbits(128), rng.getrandbits(128))
            for _ in range(200)]
    for a, b in zip(keys, keys[1:]):
        xor = Key(*(x ^ y for x, y in zip(a, b)))
        for w in range(4):
            assert bucket_of(a, w, buckets=1024) ^ bucket_of(b, w, buckets=1024) == bucket_of(xor, w, buckets=1024)
    # Keys differing only in the QPN (one local NIC's QPs) spread over the buckets in every way.
    for w in range(4):
        used = {bucket_of(data_key("10.0.0.1", qpn), w, buckets=64) for qpn in range(256)}
        assert len(used) > 56


# -- golden model and control plane, by hand --------------------------------------------------------------------------

def test_insert_commands_by_hand():
    table = QpTable(**SMALL)
    cmds = table.add_qp("10.0.0.1", "10.9.0.2", 0x000123, 0xABCDEF, 5)
    dkey, akey = data_key("10.0.0.1", 0x123), ack_key("10.0.0.1", "10.9.0.2", 0xABCDEF)
    assert dkey == Key(0x123, 0, 0, 0x0A000001, 0) and akey == Key(0xABCDEF, 1, 0, 0x0A000001, 0x0A090002)
    dslot = (0, bucket_of(dkey, 0, buckets=8))
    aslot = (0, bucket_of(akey, 0, buckets=8)) if bucket_of(akey, 0, buckets=8) != dslot[1] else \
        (1, bucket_of(akey, 1, buckets=8))
    assert cmds == [
        {"table": TABLE_KEY, "index": 0, "data": 0x000123},
        {"table": TABLE_KEY, "index": 1, "data": 0x0A000001},
        {"table": TABLE_KEY, "index": 2, "data": 0},
        {"table": TABLE_KEY, "index": 3, "data": 0},
        {"table": TABLE_KEY, "index": 4, "data": 0},
        {"table": TABLE_INSERT, "index": dslot[0] * 8 + dslot[1], "data": 5},
        {"table": TABLE_KEY, "index": 0, "data": 0xABCDEF | 1 << 24},
        {"table": TABLE_KEY, "index": 1, "data": 0x0A000001},
        {"table": TABLE_KEY, "index": 2, "data": 0},
        {"table": TABLE_KEY, "index": 3, "data": 0x0A090002},
        {"table": TABLE_KEY, "index": 4, "data": 0},
        {"table": TABLE_INSERT, "index": aslot[0] * 8 + aslot[1], "data": 5},
    ]
    assert table.where(dkey) == dslot and table.where(akey) == aslot
    assert key_words(Key(1, 1, 1, (1 << 128) - 1, 3 << 64)) == [1 | 3 << 24, (1 << 64) - 1, (1 << 64) - 1, 0, 3]


def test_lookup_hit_miss_delete():
    model, table = Golden(**SMALL), QpTable(**SMALL)
    _apply(model, table.add_qp("10.0.0.1", "10.9.0.2", 0x123, 0xABCDEF, 5))
    _apply(model, table.add_qp("10.0.0.1", "10.9.0.3", 0x124, 0xABCDEF, 6))
    cases = [
        # (item, qp_hit, qp)
        (_item(DATA, "10.9.0.2", "10.0.0.1", 0x123, psn=7, msn=9, tag=1), 1, 5),
        (_item(DATA, "1.2.3.4", "10.0.0.1", 0x123), 1, 5),              # the source is not in a data key
        (_item(NACK, "10.0.0.1", "10.9.0.2", 0xABCDEF), 1, 5),
        (_item(ACK, "10.0.0.1", "10.9.0.2", 0xABCDEF), 1, 5),
        (_item(NACK, "10.0.0.1", "10.9.0.3", 0xABCDEF), 1, 6),          # same remote QPN, other remote
        (_item(DATA, "10.9.0.2", "10.0.0.1", 0x125), 0, 0),             # unknown QPN
        (_item(DATA, "10.9.0.2", "10.0.0.2", 0x123), 0, 0),             # other local NIC
        (_item(NACK, "10.0.0.2", "10.9.0.2", 0xABCDEF), 0, 0),          # other local NIC
        (_item(NACK, "10.9.0.2", "10.0.0.1", 0x123), 0, 0),             # a data packet's fields on a NACK
        (_item(DATA, "10.0.0.1", "10.9.0.2", 0xABCDEF), 0, 0),          # a NACK's fields on a data packet
        (_item(ROCE_OTHER, "10.9.0.2", "10.0.0.1", 0x123), 0, 0),       # not looked up
        (_item(OTHER, "10.0.0.1", "10.9.0.2", 0xABCDEF), 0, 0),
    ]
    for item, hit, qp in cases:
        assert model.process(item) == {**item, "qp_hit": hit, "qp": qp}, item
    assert model.stats() == [5, 5, 2]
    _apply(model, table.remove_qp(5))
    assert model.process(cases[0][0])["qp_hit"] == 0 and model.process(cases[2][0])["qp_hit"] == 0
    assert model.process(cases[4][0])["qp"] == 6
    with pytest.raises(KeyError):
        table.remove_qp(5)


def test_first_way_wins_and_ignored_commands():
    model = Golden(**SMALL)
    key = data_key("10.0.0.1", 0x42)
    b0, b1 = bucket_of(key, 0, buckets=8), bucket_of(key, 1, buckets=8)
    stage = [{"table": TABLE_KEY, "index": i, "data": w} for i, w in enumerate(key_words(key))]
    _apply(model, stage + [{"table": TABLE_INSERT, "index": 8 + b1, "data": 3}])
    item = _item(DATA, "10.9.0.2", "10.0.0.1", 0x42)
    assert model.process(item)["qp"] == 3
    _apply(model, [{"table": TABLE_INSERT, "index": b0, "data": 0x1FF}])   # qp is cut to 4 bits
    assert model.process(item)["qp"] == 0xF
    # Unknown table, staging word 5, slot out of range: nothing changes.
    _apply(model, [{"table": 4, "index": b0, "data": 0}, {"table": TABLE_KEY, "index": 5, "data": 1},
                   {"table": TABLE_DELETE, "index": 16, "data": 0}, {"table": TABLE_INSERT, "index": 16, "data": 1}])
    assert model.process(item)["qp"] == 0xF and model.staged_key() == key
    _apply(model, [{"table": TABLE_DELETE, "index": b0, "data": 0}])
    assert model.process(item)["qp"] == 3
    _apply(model, [{"table": TABLE_CLEAR, "index": 0, "data": 0}])
    assert model.process(item)["qp_hit"] == 0


def _colliding_qpns(buckets, way=0, count=2):
    """QPNs of local 10.0.0.1 whose data keys share a bucket in ``way``."""
    by_bucket = {}
    for qpn in range(1000):
        by_bucket.setdefault(bucket_of(data_key("10.0.0.1", qpn), way, buckets=buckets), []).append(qpn)
        for qpns in by_bucket.values():
            if len(qpns) == count:
                return qpns


def test_collision_reported_and_table_unchanged():
    params = dict(n_entries=16, buckets=4, ways=1, ipv6=True, user_bits=0)
    model, table = Golden(**params), QpTable(**params)
    q1, q2 = _colliding_qpns(4)
    key = data_key("10.0.0.1", q1)
    bucket = bucket_of(key, 0, buckets=4)
    _apply(model, table.insert(key, 1))
    with pytest.raises(TableFull, match=rf"its slots \(way 0 bucket {bucket}\) are taken .* 1 of 4 keys \(25% load\)"):
        table.insert(data_key("10.0.0.1", q2), 2)
    # A QP whose second key collides is not installed at all.
    acks = [ack_key("10.0.0.1", "10.9.0.9", rq) for rq in range(400)]
    rq = next(k.qpn for k in acks if bucket_of(k, 0, buckets=4) == bucket)
    free_qpn = next(q for q in range(1000) if bucket_of(data_key("10.0.0.1", q), 0, buckets=4) != bucket)
    with pytest.raises(TableFull):
        table.add_qp("10.0.0.1", "10.9.0.9", free_qpn, rq, 3)
    assert table.keys == 1 and table.qps == {} and table.where(data_key("10.0.0.1", free_qpn)) is None
    assert sum(s is not None for s in table.slots[0]) == 1
    assert model.process(_item(DATA, "10.9.0.2", "10.0.0.1", q1))["qp"] == 1


def _key_with_buckets(buckets_by_way, used, ipv6=False):
    """A data key of local 10.0.0.1 whose bucket in way ``w`` is ``buckets_by_way[w]`` (2 buckets per way)."""
    for qpn in range(10000):
        key = data_key("10.0.0.1", qpn)
        if key not in used and all(bucket_of(key, w, buckets=2, ipv6=ipv6) == b
                                   for w, b in enumerate(buckets_by_way)):
            used.add(key)
            return key


def test_relocation_keeps_every_key_reachable():
    """Two ways of two buckets. K1 has buckets (0, 1), K2 and K3 (0, 0): K1 takes way 0 bucket 0, K2 way 1
    bucket 0; K3 finds both its slots taken and K1 moves to its way 1 slot to make room. Every installed key hits
    after every single command (a key moves by copy, then overwrite). K4, with buckets (0, 0) too, cannot be
    placed although way 0 bucket 1 is free: no chain of moves reaches it."""
    params = dict(n_entries=16, buckets=2, ways=2, ipv6=False, user_bits=0)
    model, table = Golden(**params), QpTable(**params)
    used = set()
    k1, k2, k3, k4 = (_key_with_buckets(b, used) for b in ((0, 1), (0, 0), (0, 0), (0, 0)))
    installed = []
    for key, index in ((k1, 1), (k2, 2), (k3, 3)):
        cmds = table.insert(key, index)
        for cmd in cmds:
            model.control(cmd)
            for k, i in installed:
                assert model.lookup(k) == (1, i)
        installed.append((key, index))
        assert model.lookup(key) == (1, index)
    assert table.moves == 1 and len(cmds) == 12
    assert [c["index"] for c in cmds if c["table"] == TABLE_INSERT] == [2 + 1, 0]     # K1 to way 1 bucket 1, K3 to 0
    assert table.where(k1) == (1, 1) and table.where(k2) == (1, 0) and table.where(k3) == (0, 0)
    with pytest.raises(TableFull, match="3 of 4 keys"):
        table.insert(k4, 4)
    assert table.keys == 3 and table.where(k4) is None


@pytest.mark.parametrize("ways, buckets", [(2, 4), (3, 4), (4, 8)])
def test_control_plane_shadow_matches_block(ways, buckets):
    """Random QP additions and removals near full load: after every operation the control plane's shadow is the
    block model's table slot for slot, a failed addition (relocations rolled back included) changes nothing and
    emits nothing, and every installed QP's keys hit with its index."""
    import copy
    rng = random.Random(ways * 100 + buckets)
    params = dict(n_entries=64, buckets=buckets, ways=ways, ipv6=True, user_bits=0)
    model, table = Golden(**params), QpTable(**params)
    failures = 0
    for _ in range(400):
        if table.qps and rng.random() < 0.3:
            _apply(model, table.remove_qp(rng.choice(list(table.qps))))
        else:
            free = [i for i in range(64) if i not in table.qps]
            before = (copy.deepcopy(table.slots), dict(table._where), table.moves)
            try:
                _apply(model, table.add_qp(rng.choice(["10.0.0.1", "10.0.0.2"]), "10.9.0.1", rng.randrange(1 << 24),
                                           rng.randrange(1 << 24), rng.choice(free)))
            except TableFull:
                failures += 1
                assert (table.slots, table._where, table.moves) == before
        assert table.slots == model.slots
        for record in table.qps.values():
            assert model.lookup(record.data_key) == model.lookup(record.ack_key) == (1, record.index)
    assert failures > 10 and table.moves > 10


def test_no_relocation_when_max_moves_is_zero():
    params = dict(n_entries=16, buckets=2, ways=2, ipv6=True, user_bits=0, max_moves=0)
    table = QpTable(**params)
    placed = 0
    for qpn in range(64):
        try:
            table.insert(data_key("10.0.0.1", qpn), 0)
            placed += 1
        except TableFull:
            pass
    assert table.moves == 0 and placed == table.keys <= 4


def test_ipv6_keys():
    model, table = Golden(**SMALL), QpTable(**SMALL)
    _apply(model, table.add_qp("2001:db8::1", "2001:db8:ffff::2", 0x10, 0x20, 1))
    # An IPv6 address with the same bits as 10.0.0.1 is another address: its own keys, its own index.
    _apply(model, table.add_qp("10.0.0.1", "10.0.0.2", 0x10, 0x20, 2))
    _apply(model, table.add_qp("::a00:1", "::a00:2", 0x10, 0x20, 3))
    assert model.process(_item(DATA, "2001:db8:ffff::2", "2001:db8::1", 0x10))["qp"] == 1
    assert model.process(_item(NACK, "2001:db8::1", "2001:db8:ffff::2", 0x20))["qp"] == 1
    assert model.process(_item(NACK, "2001:db8::1", "2001:db8:ffff::3", 0x20))["qp_hit"] == 0
    assert model.process(_item(DATA, "10.0.0.2", "10.0.0.1", 0x10))["qp"] == 2
    assert model.process(_item(DATA, "::a00:2", "::a00:1", 0x10))["qp"] == 3
    assert model.process(_item(ACK, "::a00:1", "::a00:2", 0x20))["qp"] == 3
    with pytest.raises(ValueError, match="same IP version"):
        table.add_qp("10.0.0.1", "2001:db8::1", 1, 2, 4)


def test_ipv4_only_table():
    params = dict(SMALL, ipv6=False)
    model, table = Golden(**params), QpTable(**params)
    with pytest.raises(ValueError, match="ipv6=False"):
        table.add_qp("2001:db8::1", "2001:db8::2", 1, 2, 0)
    assert table.keys == 0
    _apply(model, table.add_qp("10.0.0.1", "10.0.0.2", 0x10, 0x20, 2))
    assert model.process(_item(DATA, "10.0.0.2", "10.0.0.1", 0x10))["qp"] == 2
    assert model.process(_item(DATA, "::a00:2", "::a00:1", 0x10))["qp_hit"] == 0            # ipv6 set
    wide = _item(DATA, "10.0.0.2", "10.0.0.1", 0x10)
    wide["dst_ip"] |= 1 << 100                                                              # bits above 31
    assert model.process(wide)["qp_hit"] == 0
    wide = _item(NACK, "10.0.0.1", "10.0.0.2", 0x20)
    wide["src_ip"] |= 1 << 40
    assert model.process(wide)["qp_hit"] == 0
    assert model.stats() == [1, 3, 0]
    # A key staged by hand that a 32-bit table cannot hold is not committed.
    for key in (Key(0x11, 0, 1, 0x0A000001, 0), Key(0x11, 0, 0, 0x0A000001 | 1 << 32, 0)):
        slot = bucket_of(Key(0x11, 0, 0, 0x0A000001, 0), 0, buckets=8, ipv6=False)
        _apply(model, [{"table": TABLE_KEY, "index": i, "data": w} for i, w in enumerate(key_words(key))]
               + [{"table": TABLE_INSERT, "index": slot, "data": 7}])
        assert model.slots[0][slot] is None or model.slots[0][slot][1] != 7


def test_reset_keeps_table_and_staging():
    model, table = Golden(**SMALL), QpTable(**SMALL)
    _apply(model, table.add_qp("10.0.0.1", "10.0.0.2", 0x10, 0x20, 2))
    item = _item(DATA, "10.0.0.2", "10.0.0.1", 0x10)
    model.process(item)
    model.reset()
    assert model.stats() == [0, 0, 0] and model.process(item)["qp"] == 2
    assert model.staged_key() == ack_key("10.0.0.1", "10.0.0.2", 0x20)


def test_agrees_with_packets_qp_classifier():
    """The keys are those of the test-side model: same (qp_hit, qp) on scapy frames and on random metadata with
    near misses."""
    from lbpipe.tb.lib.packets import QpClassifier as Reference
    from lbpipe.tb.lib.packets import classify, roce_ack, roce_cnp, roce_data, roce_nak
    rng = random.Random(4)
    params = dict(n_entries=64, buckets=64, ways=4, ipv6=True, user_bits=0)
    model, table, reference = Golden(**params), QpTable(**params), Reference()
    locals_ = ["10.0.0.1", "10.0.0.2", "2001:db8::1", "::a00:1"]
    remotes = {4: ["10.1.0.1", "10.1.0.2"], 6: ["2001:db8:1::1", "::a01:1"]}
    qps = []
    for index in range(40):
        local = rng.choice(locals_)
        remote = rng.choice(remotes[IP(local).version])
        lq, rq = rng.choice([1, 2, rng.randrange(1 << 24)]), rng.choice([1, 2, rng.randrange(1 << 24)])
        try:
            reference.add(local, remote, lq, rq, index)
        except ValueError:
            continue
        _apply(model, table.add_qp(local, remote, lq, rq, index))
        qps.append((local, remote, lq, rq))
    frames = []
    for local, remote, lq, rq in qps[:6]:
        frames += [roce_data(remote, local, 0xC000, lq, 5), roce_nak(local, remote, 0xC000, rq, 5),
                   roce_ack(local, remote, 0xC000, rq, 5), roce_cnp(local, remote, 0xC000, rq)]
    metas = [classify(f) for f in frames]
    for _ in range(3000):
        local, remote, lq, rq = rng.choice(qps)
        kind = rng.choice([DATA, ACK, NACK, ROCE_OTHER, OTHER])
        src, dst, dqpn = (remote, local, lq) if kind == DATA else (local, remote, rq)
        if rng.random() < 0.5:
            src, dst = rng.choice(locals_ + remotes[4] + remotes[6]), rng.choice(locals_)
            if IP(src).version != IP(dst).version:
                continue
        if rng.random() < 0.2:
            dqpn = rng.choice([1, 2, lq, rq])
        metas.append(dict(kind=kind, src_ip=int(IP(src)), dst_ip=int(IP(dst)), ip_version=IP(src).version,
                          dqpn=dqpn))
    hits = 0
    for meta in metas:
        item = dict(kind=meta["kind"], ipv6=int(meta["ip_version"] == 6), src_ip=meta["src_ip"],
                    dst_ip=meta["dst_ip"], dqpn=meta["dqpn"], psn=0, msn=0, tag=0)
        out = model.process(item)
        assert (out["qp_hit"], out["qp"]) == reference.lookup(meta), meta
        hits += out["qp_hit"]
    assert 500 < hits < len(metas) - 500


def test_trace_generator():
    params = dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=3)
    events = qp_classifier_trace(3, 300, **params)
    assert events == qp_classifier_trace(3, 300, **params)
    assert events[0] == {"ctl": {"table": TABLE_CLEAR, "index": 0, "data": 0}}
    layout = ClassifierItem(user_bits=3)
    for event in events:
        if "item" in event:
            pack(layout, event["item"])
    model = Golden(**params)
    for event in events:
        model.control(event["ctl"]) if "ctl" in event else model.process(event["item"])
    hits, misses, others = model.stats()
    assert hits > 50 and misses > 50 and others > 20 and hits + misses + others == 300
    # Default parameters generate quickly too (4096 QPs' worth of keys, relocations included).
    big = qp_classifier_trace(1, 100, n_entries=4096, buckets=4096, ways=4, ipv6=True, user_bits=0)
    assert sum(1 for e in big if "ctl" in e) > 1000


# -- RTL --------------------------------------------------------------------------------------------------------------

RTL_CASES = [
    # Seeds chosen (on the golden model) so that the traces hold keys in two ways with different indices, looked
    # up; same-bucket near misses differing in the key's last bits; with ipv6=False, unfit keys committed and
    # looked up; and a well-filled table at the end (phase 2 looks up in it).
    pytest.param(dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=0), 25, id="v6-2way"),
    pytest.param(dict(n_entries=40, buckets=4, ways=3, ipv6=False, user_bits=5), 6, id="v4-3way-user"),
    pytest.param(dict(n_entries=5, buckets=16, ways=1, ipv6=True, user_bits=0), 37, id="v6-1way"),
    # Two buckets: the configuration in which Icarus once left registers X (hdl/packet/qp_classifier.py, ``hold``).
    pytest.param(dict(n_entries=29, buckets=2, ways=8, ipv6=True, user_bits=0), 24, id="v6-8way-2bucket"),
]


def _cocotb(tmp_path, params, events, *, seed=1, testcase="classifier_phases"):
    from lbpipe.tb.lib.runner import run_cocotb, write_verilog
    top = AxiLiteTop(QpClassifier(**params))
    path = write_verilog(top, name="lbpipe_top", ports=top.ports())
    write_events(tmp_path / "trace.jsonl", events)
    env = {"QPC_PARAMS": json.dumps(params), "QPC_TRACE": str(tmp_path / "trace.jsonl"), "QPC_SEED": str(seed),
           "QPC_OUT": str(tmp_path / "measured.json")}
    run_cocotb(path, toplevel="lbpipe_top", test_module="lbpipe.tb.packet.test_qp_classifier", testcase=testcase,
               extra_env=env, seed=seed)
    out = tmp_path / "measured.json"
    return json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.parametrize("params, seed", RTL_CASES)
def test_rtl_matches_golden(tmp_path, params, seed):
    """Random trace through the RTL: unthrottled with latency and one item per clock, after reset with the table
    kept, and reset in mid-traffic with idle cycles and back-pressure (tb/packet/test_qp_classifier.py)."""
    measured = _cocotb(tmp_path, params, qp_classifier_trace(seed, 250, **params), seed=seed)
    assert measured["items"] == 250 and measured["hits"] > 60 and measured["hits_after_reset"] > 20


def test_rtl_scoreboard_can_fail(tmp_path):
    params = RTL_CASES[0].values[0]
    _cocotb(tmp_path, params, qp_classifier_trace(2, 60, **params), testcase="classifier_catches_a_wrong_output")


@pytest.mark.regression
@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.deep) for s in range(2, 6))])
def test_rtl_regression(tmp_path, seed):
    rng = random.Random(seed)
    params = dict(n_entries=rng.randrange(1, 300), buckets=1 << rng.randrange(1, 7), ways=rng.randrange(1, 9),
                  ipv6=rng.random() < 0.5, user_bits=rng.choice([0, 1, 9]))
    _cocotb(tmp_path, params, qp_classifier_trace(seed, 3000, **params), seed=seed)


# -- cycle-exact corner cases in Amaranth's simulator -----------------------------------------------------------------

def test_accepted_command_survives_reset():
    """An INSERT accepted just before reset is asserted, while the output stalls the pipeline, still writes the
    table; a CLEAR's sweep too; and the entry stays closed for ``buckets + 2`` cycles after the one that accepts
    a CLEAR."""
    params = dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=0)
    dut = QpClassifier(**params)
    table = QpTable(**params)
    cmds = table.add_qp("10.0.0.1", "10.0.0.2", 0x10, 0x20, 9)
    in_layout = ClassifierItem()
    out_layout = ClassifierResult(n_entries=16)
    item = _item(DATA, "10.0.0.2", "10.0.0.1", 0x10)
    probe = _item(NACK, "10.0.0.1", "10.0.0.2", 0x20)     # the key of the last INSERT
    results = {}

    async def lookup(ctx):
        ctx.set(dut.i.payload.as_value(), pack(in_layout, probe))
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.o.ready, 1)
        while not ctx.get(dut.i.ready):
            await ctx.tick()
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(20):
            if ctx.get(dut.o.valid):
                out = unpack(out_layout, ctx.get(dut.o.payload.as_value()))
                await ctx.tick()
                return out
            await ctx.tick()
        raise AssertionError("no output")

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 1)
        for cmd in cmds[:-1]:
            await command(ctx, dut, cmd)
        # Stall the pipeline: an item in the output register, not taken. The INSERT is accepted just before the
        # stall begins (adv is high in the cycle the item reaches the output register).
        ctx.set(dut.i.payload.as_value(), pack(in_layout, item))
        ctx.set(dut.i.valid, 1)
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(QpClassifier.latency - 2):
            await ctx.tick()
        ctx.set(dut.o.ready, 0)
        await command(ctx, dut, cmds[-1])
        assert ctx.get(dut.o.valid) and not ctx.get(dut.ctl.ready)   # stalled, the INSERT inside
        ctx.set(rst, 1)
        for _ in range(3):
            await ctx.tick()
        ctx.set(rst, 0)
        results["after_reset"] = await lookup(ctx)
        # CLEAR: accepted, then reset at once; the sweep still runs, and the entry is closed meanwhile.
        await command(ctx, dut, {"table": TABLE_CLEAR, "index": 0, "data": 0})
        ctx.set(rst, 1)
        await ctx.tick()
        ctx.set(rst, 0)
        closed = 1
        while not ctx.get(dut.i.ready):
            closed += 1
            await ctx.tick()
        results["closed"] = closed
        results["after_clear"] = await lookup(ctx)

    simulate(dut, process)
    assert results["after_reset"]["qp_hit"] == 1 and results["after_reset"]["qp"] == 9
    assert results["after_clear"]["qp_hit"] == 0
    assert results["closed"] == params["buckets"] + 2


def test_one_item_per_clock_between_commands():
    """Back-to-back items are accepted every clock, a command costs one cycle of the entry, and results leave
    ``latency`` cycles after their items, in Amaranth's simulator."""
    params = dict(n_entries=16, buckets=8, ways=2, ipv6=False, user_bits=0)
    dut = QpClassifier(**params)
    table = QpTable(**params)
    cmds = table.add_qp("10.0.0.1", "10.0.0.2", 0x10, 0x20, 9)
    in_layout = ClassifierItem()
    items = [_item(DATA, "10.0.0.2", "10.0.0.1", 0x10 + (k % 2), tag=k) for k in range(12)]
    accepted, produced = [], []

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 1)
        for cmd in cmds:
            await command(ctx, dut, cmd)
        cycle = 0
        queue = list(items)
        while len(produced) < len(items):
            if queue:
                ctx.set(dut.i.payload.as_value(), pack(in_layout, queue[0]))
            ctx.set(dut.i.valid, int(bool(queue)))
            # A staging write (ignored index) in the middle of the run takes the entry for one cycle.
            ctx.set(dut.ctl.valid, int(cycle == 5))
            ctx.set(dut.ctl.payload.table, TABLE_KEY)
            ctx.set(dut.ctl.payload.index, 7)
            took = queue and ctx.get(dut.i.ready)
            out = ctx.get(dut.o.valid)
            tag = unpack(ClassifierResult(n_entries=16), ctx.get(dut.o.payload.as_value()))
            await ctx.tick()
            cycle += 1
            if took:
                queue.pop(0)
                accepted.append(cycle)
            if out:
                produced.append((cycle, tag["tag"], tag["qp_hit"]))

    simulate(dut, process)
    gaps = [b - a for a, b in zip(accepted, accepted[1:])]
    assert gaps == [1] * 4 + [2] + [1] * 6
    assert [c for c, _, _ in produced] == [a + QpClassifier.latency for a in accepted]
    assert [(t, h) for _, t, h in produced] == [(k, int(k % 2 == 0)) for k in range(12)]


@pytest.mark.parametrize("ipv6", [True, False])
def test_every_key_bit_is_compared(ipv6):
    """One way of two buckets, one ACK key installed, and every single-bit variant of it that an item can carry
    looked up: about half land in the key's bucket, and all must miss; the key itself hits."""
    params = dict(n_entries=16, buckets=2, ways=1, ipv6=ipv6, user_bits=0)
    dut = QpClassifier(**params)
    rng = random.Random(8)
    bits = 128 if ipv6 else 32
    key = Key(rng.randrange(1 << 24), 1, int(ipv6), rng.getrandbits(bits), rng.getrandbits(bits))
    cmds = QpTable(**params).insert(key, 11)
    size = QpKey(ipv6=ipv6).size
    variants = [unpack_key(pack_key(key, ipv6=ipv6) ^ 1 << i, ipv6=ipv6) for i in range(size)]
    variants = [v for v in variants if v.dir == 1]          # flipping dir gives a data key with a remote address
    same = sum(bucket_of(v, 0, buckets=2, ipv6=ipv6) == bucket_of(key, 0, buckets=2, ipv6=ipv6) for v in variants)
    assert same > size // 4
    items = [_key_item(v, tag=n) for n, v in enumerate([key] + variants)]
    outputs = []
    in_layout, out_layout = ClassifierItem(), ClassifierResult(n_entries=16)

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 1)
        for cmd in cmds:
            await command(ctx, dut, cmd)
        for item in items + [None] * (QpClassifier.latency + 1):
            ctx.set(dut.i.valid, item is not None)
            if item is not None:
                ctx.set(dut.i.payload.as_value(), pack(in_layout, item))
            if ctx.get(dut.o.valid):
                outputs.append(unpack(out_layout, ctx.get(dut.o.payload.as_value())))
            await ctx.tick()

    simulate(dut, process)
    assert [(o["tag"], o["qp_hit"], o["qp"]) for o in outputs] == [(0, 1, 11)] + [(n, 0, 0) for n in
                                                                                 range(1, len(items))]


def _key_item(key, tag=0):
    return dict(kind=NACK, ipv6=key.ipv6, src_ip=key.local, dst_ip=key.remote, dqpn=key.qpn, psn=0, msn=0, tag=tag)


def test_back_to_back_commands():
    """Commands offered on every clock (faster than AXI4-Lite can): the staging register cannot change under an
    INSERT before it writes, so every key lands with its own index, and the DELETEs right behind remove QP 9
    only."""
    params = dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=0)
    dut = QpClassifier(**params)
    table = QpTable(**params)
    cmds = (table.add_qp("10.0.0.1", "10.0.0.2", 0x10, 0x20, 9) + table.add_qp("2001:db8::1", "2001:db8::2", 0x11,
                                                                                   0x21, 4)
            + table.remove_qp(9))
    in_layout, out_layout = ClassifierItem(), ClassifierResult(n_entries=16)
    probes = [_item(DATA, "10.0.0.2", "10.0.0.1", 0x10), _item(NACK, "10.0.0.1", "10.0.0.2", 0x20),
              _item(DATA, "2001:db8::2", "2001:db8::1", 0x11), _item(NACK, "2001:db8::1", "2001:db8::2", 0x21)]
    model = Golden(**params)
    outputs = []

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 1)
        pending = list(cmds)
        while pending:
            cmd = pending[0]
            ctx.set(dut.ctl.valid, 1)
            for name in ("table", "index", "data"):
                ctx.set(getattr(dut.ctl.payload, name), cmd[name])
            took = ctx.get(dut.ctl.ready)
            out = ctx.get(dut.o.valid) and unpack(out_layout, ctx.get(dut.o.payload.as_value()))
            await ctx.tick()
            if took:
                model.control(pending.pop(0))
            if out:
                outputs.append(out)
        ctx.set(dut.ctl.valid, 0)
        for probe in probes:
            ctx.set(dut.i.payload.as_value(), pack(in_layout, probe))
            ctx.set(dut.i.valid, 1)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(QpClassifier.latency + 1):
            if ctx.get(dut.o.valid):
                outputs.append(unpack(out_layout, ctx.get(dut.o.payload.as_value())))
            await ctx.tick()

    simulate(dut, process)
    assert [(o["qp_hit"], o["qp"]) for o in outputs] == [(0, 0), (0, 0), (1, 4), (1, 4)]
    assert [(o["qp_hit"], o["qp"]) for o in outputs] == [(model.process(p)["qp_hit"], model.process(p)["qp"])
                                                        for p in probes]


@pytest.mark.parametrize("stall_after", range(4))
def test_waiting_key_word_leaves_a_stalled_insert_alone(stall_after):
    """Items back to back keep the output register full; an INSERT is accepted, the output stalls ``stall_after``
    cycles later (with the INSERT in its command stage or writing, the write repeating while stalled), and the next
    QP's first KEY word waits on ``ctl`` throughout the stall. A word that is offered but not yet accepted must not
    reach the staging register: both QPs' keys must hit with their own indices afterwards."""
    params = dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=0)
    dut = QpClassifier(**params)
    table = QpTable(**params)
    first = table.add_qp("10.0.0.1", "10.0.0.2", 0x10, 0x20, 9)
    second = table.add_qp("10.0.0.3", "10.0.0.4", 0x33, 0x44, 5)
    in_layout, out_layout = ClassifierItem(), ClassifierResult(n_entries=16)
    filler = _item(ACK, "10.9.9.9", "10.9.9.8", 0x77)
    probes = [_item(NACK, "10.0.0.1", "10.0.0.2", 0x20), _item(DATA, "10.0.0.2", "10.0.0.1", 0x10),
              _item(NACK, "10.0.0.3", "10.0.0.4", 0x44), _item(DATA, "10.0.0.4", "10.0.0.3", 0x33)]
    outputs = []

    def offer(ctx, cmd):
        ctx.set(dut.ctl.valid, 1)
        for name in ("table", "index", "data"):
            ctx.set(getattr(dut.ctl.payload, name), cmd[name])

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 1)
        for cmd in first[:-1]:
            await command(ctx, dut, cmd)
        ctx.set(dut.i.payload.as_value(), pack(in_layout, filler))
        ctx.set(dut.i.valid, 1)
        for _ in range(QpClassifier.latency + 2):
            await ctx.tick()
        assert ctx.get(dut.o.valid)
        await command(ctx, dut, first[-1])
        for _ in range(stall_after):
            await ctx.tick()
        ctx.set(dut.o.ready, 0)
        offer(ctx, second[0])
        for _ in range(6):
            assert not ctx.get(dut.ctl.ready)
            await ctx.tick()
        ctx.set(dut.o.ready, 1)
        for cmd in second:
            await command(ctx, dut, cmd)
        ctx.set(dut.i.valid, 0)
        for _ in range(QpClassifier.latency + 2):
            await ctx.tick()
        for probe in probes + [None] * (QpClassifier.latency + 1):
            ctx.set(dut.i.valid, probe is not None)
            if probe is not None:
                ctx.set(dut.i.payload.as_value(), pack(in_layout, probe))
            if ctx.get(dut.o.valid):
                outputs.append(unpack(out_layout, ctx.get(dut.o.payload.as_value())))
            await ctx.tick()

    simulate(dut, process)
    assert [(o["qp_hit"], o["qp"]) for o in outputs] == [(1, 9), (1, 9), (1, 5), (1, 5)]


# -- synthesis --------------------------------------------------------------------------------------------------------

@pytest.mark.synthesis
def test_synthesis_defaults(tmp_path):
    """Out-of-context synthesis at the defaults (4096 QPs, 2 keys each, in 4 ways of 4096 slots, IPv6 keys)."""
    from lbpipe.synth import synthesize
    dut = QpClassifier()
    report = synthesize(dut, name="qp_classifier", workdir=tmp_path, wrapped=False)
    print({k: report[k] for k in ("lut", "ff", "carry8", "ramb36", "ramb18", "lutram", "logic_levels")})
    # Each way is 4096 x 295 bits; a RAMB36 holds 4096 x 9: ceil(295 / 9) = 33 per way.
    assert report["ramb36"] + report["ramb18"] / 2 <= 4 * 33
    assert report["logic_levels"] <= 6
    # s4 takes every way's read data and nothing else: the block RAM output register (docs/qp_classifier.md).
    assert report["unregistered_ram"]["ports"] == []
    assert report["dsp"] == 0 and report["uram"] == 0
