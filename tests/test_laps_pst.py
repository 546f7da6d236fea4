"""LAPS PST: signature and parameters, the hash and the golden model by hand, the control plane (placement and the
``pst_commands`` encoder), RTL against the golden model (cocotb + Icarus, idle and back-pressure), and the cycle-exact
cases in Amaranth's simulator: latency, one lookup per clock, a lookup racing each kind of command."""

import ipaddress
import random

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.laps.pst import Pst, PstItem, PstResult
from lbpipe.sim.laps.pst import Pst as Golden
from lbpipe.sim.laps.pst import PstTable, TableFull, pst_bench, pst_commands, pst_trace
from lbpipe.tb.lib.pysim import command, simulate
from lbpipe.trace import pack, unpack

#: Control tables and record layout as docs/laps_pst.md states them (not imported from the code under test).
RECORD, MISS, INSERT, DELETE, KEY = 0, 1, 2, 3, 4
#: Latency as the datasheet states it.
DATASHEET_LATENCY = 6
SMALL = dict(n_dests=16, k=8, ways=2, buckets=8, ipv6=False, user_bits=0)
IP = lambda text: int(ipaddress.ip_address(text))   # noqa: E731


# -- an independent derivation of the hash (docs/laps_pst.md, "Hash") --------------------------------------------------

def _splitmix64(n):
    m = (1 << 64) - 1
    z = (n * 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def _bucket(addr, flag, way, buckets, ipv6=False):
    """Bucket of key (addr, flag) in ``way``, from the datasheet's formula."""
    b = buckets.bit_length() - 1
    abits = 128 if ipv6 else 32
    r = abits + 1 - b
    t = min(r, max(5, -(-r // b)))
    pi = sorted(range(r), key=lambda i: _splitmix64(512 * way + i + 1))
    rem = (addr | flag << abits) >> b
    out = 0
    for j in range(b):
        bit = (addr >> j) & 1
        for m in range(t):
            bit ^= (rem >> pi[(j * t + m) % r]) & 1
        out |= bit << j
    return out


def test_splitmix64_reference_values():
    assert [_splitmix64(n) for n in (1, 2, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_hash_by_hand():
    # 8 buckets (B = 3), IPv4: R = 30 remainder bits, t = 10. Address 5 has remainder 0: bucket 5 in every way.
    from lbpipe.sim.laps.pst import bucket_of
    assert all(bucket_of(5, 0, w, buckets=8) == 5 for w in range(4))
    # Address 8 = remainder bit 0 alone: bucket bit j is set where row j holds remainder bit 0.
    pi = sorted(range(30), key=lambda i: _splitmix64(i + 1))
    rows = [[pi[(j * 10 + m) % 30] for m in range(10)] for j in range(3)]
    want = sum(1 << j for j in range(3) if 0 in rows[j])
    assert bucket_of(8, 0, 0, buckets=8) == want
    rng = random.Random(4)
    for ipv6 in (False, True):
        for _ in range(300):
            addr, flag = rng.getrandbits(128 if ipv6 else 32), rng.randrange(2) if ipv6 else 0
            w, buckets = rng.randrange(8), 1 << rng.randrange(1, 12)
            assert bucket_of(addr, flag, w, buckets=buckets, ipv6=ipv6) == _bucket(addr, flag, w, buckets, ipv6)


def test_one_subnet_never_collides_within_a_way():
    """Addresses that differ only in their low log2(buckets) bits have the same remainder: distinct buckets."""
    from lbpipe.sim.laps.pst import bucket_of
    for w in range(4):
        assert len({bucket_of(0x0A000200 | h, 0, w, buckets=512) for h in range(512)}) == 512


# -- signature and parameters -----------------------------------------------------------------------------------------

def test_signature_and_layouts():
    dut = Pst(n_dests=64, k=5, ways=3, buckets=16, ipv6=True, user_bits=7)
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "o", "ctl", "stats"}
    item = dut.signature.members["i"].signature.members["payload"].shape
    res = dut.signature.members["o"].signature.members["payload"].shape
    assert item == PstItem(ipv6=True, user_bits=7)
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("ipv6", 1), ("dst_ip", 128), ("user", 7), ("tag", 16)]
    assert [(n, f.width) for n, f in res] == [("kind", 3), ("user", 7), ("tag", 16), ("hit", 1), ("normal", 1)] + \
        [(f"pid{i}", 16) for i in range(5)]
    assert res == PstResult(k=5, user_bits=7)
    assert dut.signature.members["stats"].shape == 6 * 32
    assert [(n, f.width) for n, f in PstItem()] == [("kind", 3), ("ipv6", 1), ("dst_ip", 32), ("tag", 16)]
    # Slot: valid, 6-bit pointer, 129 - 4 remainder bits; memory = slots + records.
    assert dut.slot_bits == 1 + 6 + 125
    assert dut.memory_bits == 3 * 16 * 132 + 64 * 5 * 16


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_dests=1000), ValueError), (dict(n_dests=1), ValueError), (dict(n_dests=1 << 17), ValueError),
    (dict(k=0), ValueError), (dict(k=33), ValueError), (dict(ways=0), ValueError), (dict(ways=9), ValueError),
    (dict(buckets=3), ValueError), (dict(buckets=1), ValueError), (dict(ipv6=1), TypeError),
    (dict(user_bits=-1), ValueError), (dict(k="8"), TypeError), (dict(n_dests=True), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        Pst(**kwargs)
    with pytest.raises(exc):
        Golden(**kwargs)


def test_keyword_only():
    with pytest.raises(TypeError):
        Pst(1024)


def test_latency_is_the_datasheets():
    assert Pst.latency == DATASHEET_LATENCY


def test_memory_scale_1k_to_64k():
    """Memory is linear in destinations (3 ways of n / 2 buckets, k = 8, IPv4), from 1K to 64K; derived by hand: a
    slot is 1 + log2(n) + (33 - log2(n / 2)) bits = 35 bits; a record 128 bits."""
    from lbpipe.blocks.laps import _pst_memory
    for n in (1 << 10, 1 << 12, 1 << 14, 1 << 16):
        slots, records = _pst_memory(n)
        assert slots == 3 * (n // 2) * 35 and records == n * 128
        dut = Pst(n_dests=n, buckets=n // 2)
        dut._MustUse__silence = True
        assert dut.memory_bits == slots + records == n * 35 * 3 // 2 + n * 128


# -- golden model by hand ----------------------------------------------------------------------------------------------

def _slot_index(way, bucket, buckets):
    return way * buckets + bucket


def _item(dst, tag=0, kind=1, flag=None):
    addr = ipaddress.ip_address(dst)
    return {"kind": kind, "ipv6": int(addr.version == 6) if flag is None else flag, "dst_ip": int(addr), "tag": tag}


def test_golden_by_hand():
    model = Golden(**SMALL)
    # Record 3 = pids 16, 0, 0x2A, 0 | 0x41, 0x51, 0, 0x77 (k = 8: two words, index = record * 2 + word).
    model.control({"table": RECORD, "index": 6, "data": 16 | 0x2A << 32})
    model.control({"table": RECORD, "index": 7, "data": 0x41 | 0x51 << 16 | 0x77 << 48})
    # 10.0.0.5: low 3 bits 5, remainder 10.0.0.5 >> 3; insert it in way 1 at its own bucket.
    addr = IP("10.0.0.5")
    bucket = _bucket(addr, 0, 1, 8)
    model.control({"table": INSERT, "index": _slot_index(1, bucket, 8), "data": addr | 3 << 32})
    out = model.process(_item("10.0.0.5", tag=9))
    assert out == {"kind": 1, "tag": 9, "hit": 1, "normal": 0, "pid0": 16, "pid1": 0, "pid2": 0x2A, "pid3": 0,
                   "pid4": 0x41, "pid5": 0x51, "pid6": 0, "pid7": 0x77}
    # A miss: record 0 (zeros) with normal = 1 (the power-up miss action).
    miss = model.process(_item("10.0.0.6", tag=1, kind=2))
    assert miss == {"kind": 2, "tag": 1, "hit": 0, "normal": 1, **{f"pid{i}": 0 for i in range(8)}}
    # The miss action: default pids in record 0, normal off.
    model.control({"table": RECORD, "index": 0, "data": 7 | 8 << 16})
    model.control({"table": MISS, "index": 0, "data": 0})
    miss = model.process(_item("10.0.0.6"))
    assert (miss["hit"], miss["normal"], miss["pid0"], miss["pid1"], miss["pid2"]) == (0, 0, 7, 8, 0)
    # An IPv6-flagged item with the same low address bits misses on an IPv4 table.
    assert model.process(_item("10.0.0.5", flag=1))["hit"] == 0
    # Delete: the slot empties, the destination misses.
    model.control({"table": DELETE, "index": _slot_index(1, bucket, 8), "data": 0})
    assert model.process(_item("10.0.0.5"))["hit"] == 0
    # Rejected: unknown table, slot out of range, record out of range, KEY on an IPv4 table, MISS index 1.
    for cmd in ({"table": 9, "index": 0, "data": 1}, {"table": INSERT, "index": 16, "data": addr},
                {"table": DELETE, "index": 1 << 23, "data": 0}, {"table": RECORD, "index": 32, "data": 5},
                {"table": KEY, "index": 0, "data": 5}, {"table": MISS, "index": 1, "data": 1}):
        model.control(cmd)
    assert model.stats() == [5, 1, 4, 1, 1, 6]
    assert model.records[0][:2] == [7, 8] and model.normal == 0
    model.reset()
    assert model.stats() == [0] * 6 and model.records[3][0] == 16 and model.normal == 0


def test_golden_first_way_wins_and_wrong_bucket():
    model = Golden(**SMALL)
    for r in (1, 2):
        model.control({"table": RECORD, "index": 2 * r, "data": 100 * r})
    addr = IP("192.168.1.77")
    model.control({"table": INSERT, "index": _slot_index(1, _bucket(addr, 0, 1, 8), 8), "data": addr | 2 << 32})
    model.control({"table": INSERT, "index": _slot_index(0, _bucket(addr, 0, 0, 8), 8), "data": addr | 1 << 32})
    assert model.process(_item("192.168.1.77"))["pid0"] == 100       # way 0 before way 1
    # A key written to a bucket other than its own: that slot holds the key whose low bits the bucket implies.
    other = IP("172.16.0.1")
    own = _bucket(other, 0, 0, 8)
    wrong = own ^ 1
    model.control({"table": INSERT, "index": _slot_index(0, wrong, 8), "data": other | 1 << 32})
    assert model.process(_item("172.16.0.1"))["hit"] == 0
    implied = other ^ 1              # flipping address bit 0 flips bucket bit 0 and leaves the remainder
    assert _bucket(implied, 0, 0, 8) == wrong
    assert model.process({"kind": 1, "ipv6": 0, "dst_ip": implied, "tag": 0})["hit"] == 1


def test_golden_ipv6_staging():
    params = dict(SMALL, ipv6=True)
    model = Golden(**params)
    model.control({"table": RECORD, "index": 2, "data": 0xBEEF})
    six = int(ipaddress.ip_address("2001:db8::1:2:3"))
    four = IP("10.1.2.3")
    b6 = _bucket(six, 1, 0, 8, ipv6=True)
    model.control({"table": KEY, "index": 0, "data": (six >> 32) & ((1 << 64) - 1)})
    model.control({"table": KEY, "index": 1, "data": six >> 96 | 1 << 32})
    model.control({"table": INSERT, "index": b6, "data": six & 0xFFFFFFFF | 1 << 32})
    assert model.process(_item("2001:db8::1:2:3"))["pid0"] == 0xBEEF
    # The same 128 bits with the flag clear are another key; so is ::a01:203 against 10.1.2.3.
    assert model.process({"kind": 1, "ipv6": 0, "dst_ip": six, "tag": 0})["hit"] == 0
    model.control({"table": KEY, "index": 0, "data": 0})
    model.control({"table": KEY, "index": 1, "data": 0})
    model.control({"table": INSERT, "index": 8 + _bucket(four, 0, 1, 8, ipv6=True), "data": four | 1 << 32})
    assert model.process(_item("10.1.2.3"))["hit"] == 1
    assert model.process({"kind": 1, "ipv6": 1, "dst_ip": four, "tag": 0})["hit"] == 0
    assert model.stats()[5] == 0


# -- control plane -----------------------------------------------------------------------------------------------------

def test_pst_commands_by_hand():
    entries = [{"dst": "10.0.0.2", "pids": [1, 0, 9, 0, 0, 0, 0, 0]},
               {"dst": "10.0.0.3", "pids": [2, 6, 0, 0, 0, 0, 0, 31]}]
    cmds = pst_commands(entries, n_entries=32, **SMALL)     # sub-tables of 4: pid = 4 i + index
    # Record 1 (the first free one) for 10.0.0.2: word 0 = pids 1, 0, 9, 0; then its slot in way 0.
    assert cmds[0] == {"table": RECORD, "index": 2, "data": 1 | 9 << 32}
    assert cmds[1] == {"table": RECORD, "index": 3, "data": 0}
    assert cmds[2] == {"table": INSERT, "index": _bucket(IP("10.0.0.2"), 0, 0, 8), "data": IP("10.0.0.2") | 1 << 32}
    model = Golden(**SMALL)
    for c in cmds:
        model.control(c)
    out = model.process(_item("10.0.0.3"))
    assert [out[f"pid{i}"] for i in range(8)] == [2, 6, 0, 0, 0, 0, 0, 31] and out["hit"] == 1


@pytest.mark.parametrize("entries, n_entries, message", [
    ([{"dst": "10.0.0.1", "pids": [5, 0, 0, 0, 0, 0, 0, 0]}], 32, "sub-table 1"),       # pid 5 is sub-table 1
    ([{"dst": "10.0.0.1", "pids": [4, 0, 0, 0, 0, 0, 0, 0]}], 32, "sub-table 1"),
    ([{"dst": "10.0.0.1", "pids": [0, 4, 0, 0, 0, 0, 0, 0]}], 32, "index 0"),           # index 0: no path
    ([{"dst": "10.0.0.1", "pids": [1, 0, 0]}], 32, "k = 8"),
    ([{"dst": "10.0.0.1", "pids": [0] * 7 + [32]}], 32, "32-entry PIT"),
    ([{"dst": "2001:db8::1", "pids": [0] * 8}], 32, "ipv6=False"),
    ([{"dst": "10.0.0.1", "pids": [0] * 8}] * 2, 32, "already"),
    ([{"dst": f"10.0.1.{n}", "pids": [0] * 8} for n in range(16)], 32, "15 destinations"),
])
def test_pst_commands_refuses(entries, n_entries, message):
    with pytest.raises(ValueError, match=message):
        pst_commands(entries, n_entries=n_entries, **SMALL)


def test_table_full_names_the_destination():
    # One way of two buckets: the third destination cannot be placed.
    entries = [{"dst": f"10.0.0.{n}", "pids": [0]} for n in range(1, 4)]
    with pytest.raises(TableFull, match="no slot for"):
        pst_commands(entries, n_dests=8, k=1, ways=1, buckets=2)


@pytest.mark.parametrize("seed", range(3))
def test_default_table_places_1023_destinations(seed):
    """1,023 random IPv4 destinations, and 1,023 of one /22, fit 3 ways x 512 buckets with every pid set found."""
    rng = random.Random(seed)
    size = 8192 // 8
    for kind in ("random", "subnet"):
        dests = set()
        while len(dests) < 1023:
            dests.add(rng.getrandbits(32) if kind == "random" else 0x0A000000 | rng.randrange(1, 1024))
        entries = [{"dst": str(ipaddress.ip_address(a)),
                    "pids": [i * size + rng.randrange(1, size) for i in range(8)]} for a in sorted(dests)]
        model = Golden()
        for c in pst_commands(entries):
            model.control(c)
        for e in entries:
            out = model.process(_item(e["dst"]))
            assert out["hit"] == 1 and [out[f"pid{i}"] for i in range(8)] == e["pids"]
        assert model.stats()[5] == 0


def test_control_plane_update_and_delete_keep_lookups_exact():
    table = PstTable(**SMALL, n_entries=32)
    model = Golden(**SMALL)
    for c in table.insert("10.0.0.9", [1, 5, 0, 0, 0, 0, 0, 0]) + table.update("10.0.0.9", [2, 0, 0, 0, 0, 0, 0, 29]):
        model.control(c)
    out = model.process(_item("10.0.0.9"))
    assert (out["pid0"], out["pid1"], out["pid7"]) == (2, 0, 29)
    for c in table.delete("10.0.0.9"):
        model.control(c)
    assert model.process(_item("10.0.0.9"))["hit"] == 0
    assert sorted(table.free) == list(range(1, 16))


def test_trace_generator():
    params = dict(SMALL)
    a, b = pst_trace(3, 300, **params), pst_trace(3, 300, **params)
    assert a == b and sum("item" in e for e in a) == 300
    from lbpipe.engine import golden_run
    out, model = golden_run("laps-pst", params, a)
    hits = sum(o["hit"] for o in out)
    assert 60 < hits < 270                       # present and absent destinations both
    tables = {e["ctl"]["table"] for e in a if "ctl" in e}
    assert {RECORD, MISS, INSERT, DELETE} <= tables
    assert model.stats()[5] > 0 and model.stats()[4] > 0    # forged commands rejected, deletes


# -- RTL against the golden model (cocotb + Icarus) --------------------------------------------------------------------

@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_matches_golden_default_geometry(idle, backpressure):
    """The default ways and buckets with few records; idle input and back-pressure in the second run."""
    params = dict(n_dests=64, k=8, ways=4, buckets=512, ipv6=False, user_bits=0)
    events = pst_trace(11, 600, **params)
    stats = {}
    out = run_rtl("laps-pst", params, events, idle=idle, backpressure=backpressure, seed=5, stats=stats)
    assert out == run_golden("laps-pst", params, events)
    assert stats["errors"] == 0 and stats["outputs"] == 600


def test_rtl_bench_one_lookup_per_clock():
    params = dict(n_dests=64, k=8, ways=4, buckets=32, ipv6=False, user_bits=0)
    events = pst_bench(params, n_items=400)
    stats = {}
    out = run_rtl("laps-pst", params, events, stats=stats)
    assert out == run_golden("laps-pst", params, events)
    assert stats["items_per_clock"] == 1.0 and sum(o["hit"] for o in out) > 250


def test_rtl_record_index_at_the_bound():
    """The RECORD range check exactly at its bound (datasheet: a record ``>= n_dests`` is rejected): 16 records of
    two words take indexes 0 to 31; 32 and 33 are rejected (their record bits, taken modulo 16, would name the miss
    record), 1 (record 0, word 1) is accepted. A miss shows record 0."""
    params = dict(n_dests=16, k=8, ways=3, buckets=8, ipv6=False, user_bits=0)
    events = [{"ctl": {"table": RECORD, "index": 32, "data": 1 | 2 << 16 | 3 << 32 | 4 << 48}},
              {"ctl": {"table": RECORD, "index": 33, "data": 1 | 2 << 16 | 3 << 32 | 4 << 48}},
              {"item": _item("10.0.0.1", tag=1)},
              {"ctl": {"table": RECORD, "index": 1, "data": 5 | 6 << 16 | 7 << 32 | 8 << 48}},
              {"item": _item("10.0.0.1", tag=2)}]
    out = run_rtl("laps-pst", params, events)
    assert [o["tag"] for o in out] == [1, 2]
    assert [out[0][f"pid{i}"] for i in range(8)] == [0] * 8 and (out[0]["hit"], out[0]["normal"]) == (0, 1)
    assert [out[1][f"pid{i}"] for i in range(8)] == [0, 0, 0, 0, 5, 6, 7, 8]


@pytest.mark.parametrize("testcase", ["harness_catches_a_wrong_output", "harness_catches_a_wrong_cycle"])
def test_harness_can_fail(testcase):
    events = pst_trace(2, 60, **SMALL)
    run_rtl("laps-pst", SMALL, events, testcase=testcase)


# -- cycle-exact cases in Amaranth's simulator -------------------------------------------------------------------------

def _run_cycles(dut, setup, schedule, n_items, params):
    """Offer ``n_items`` items (tags 0..n-1, item ``n`` = ``schedule['items'][n]``) on every clock, and command
    ``c`` when ``schedule['ctl']`` maps the cycle to it; record (cycle, accepted tag), (cycle, output) and the
    cycles of accepted commands."""
    in_layout = PstItem(ipv6=params["ipv6"])
    out_layout = PstResult(k=params["k"])
    log = {"accepted": [], "outputs": [], "commands": [], "ctl_ready": []}

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 1)
        for c in setup:
            await command(ctx, dut, c)
        for _ in range(8):
            await ctx.tick()
        queue = list(range(n_items))
        cycle = 0
        while len(log["outputs"]) < n_items:
            cmd = schedule["ctl"].get(cycle)
            if cmd is not None:
                schedule.setdefault("pending", []).append(cmd)
            pending = schedule.get("pending", [])
            ctx.set(dut.ctl.valid, int(bool(pending)))
            if pending:
                for name in ("table", "index", "data"):
                    ctx.set(getattr(dut.ctl.payload, name), pending[0][name])
            if queue:
                ctx.set(dut.i.payload.as_value(), pack(in_layout, schedule["items"][queue[0]]))
            ctx.set(dut.i.valid, int(bool(queue)))
            took_item = queue and ctx.get(dut.i.ready)
            took_ctl = pending and ctx.get(dut.ctl.ready)
            log["ctl_ready"].append(ctx.get(dut.ctl.ready))
            out = ctx.get(dut.o.valid) and unpack(out_layout, ctx.get(dut.o.payload.as_value()))
            await ctx.tick()
            if took_item:
                log["accepted"].append((cycle, queue.pop(0)))
            if took_ctl:
                log["commands"].append(cycle)
                pending.pop(0)
            if out:
                log["outputs"].append((cycle, out))
            cycle += 1
        ctx.set(dut.ctl.valid, 0)
    simulate(dut, process)
    return log


_RACE = dict(n_dests=16, k=4, ways=2, buckets=8, ipv6=False, user_bits=0)


def _race_setup():
    """Destination A = 10.0.0.1 in record 1 (pid0 = 0x11), record 2 = pid0 0x22 (not pointed to)."""
    a = IP("10.0.0.1")
    return a, [{"table": RECORD, "index": 1, "data": 0x11}, {"table": RECORD, "index": 2, "data": 0x22},
               {"table": INSERT, "index": _bucket(a, 0, 0, 8), "data": a | 1 << 32}]


@pytest.mark.parametrize("command", ["delete", "repoint", "record", "miss"])
def test_lookup_racing_a_command(command):
    """Lookups of A every clock; a command offered at cycle 5. Items accepted before the command's cycle see the
    old table in every memory, items after it the new one; the command's cycle accepts no item (the bubble); the
    next command waits 4 cycles (ctl.ready low); every result leaves exactly ``latency`` cycles after its item."""
    a, setup = _race_setup()
    slot = _bucket(a, 0, 0, 8)
    cmd = {"delete": {"table": DELETE, "index": slot, "data": 0},
           "repoint": {"table": INSERT, "index": slot, "data": a | 2 << 32},
           "record": {"table": RECORD, "index": 1, "data": 0x33},
           "miss": {"table": MISS, "index": 0, "data": 0}}[command]
    # Items: A, except tag 6 onwards alternate with an absent destination for the miss case.
    absent = IP("10.9.9.9")
    items = [{"kind": 1, "ipv6": 0, "dst_ip": absent if (command == "miss" and n % 2) else a, "tag": n}
             for n in range(12)]
    dut = Pst(**_RACE)
    log = _run_cycles(dut, setup, {"ctl": {5: cmd, 6: {"table": 9, "index": 0, "data": 0}}, "items": items}, 12,
                      _RACE)
    assert log["commands"][0] == 5
    accepted = dict((tag, c) for c, tag in log["accepted"])
    # The commands' cycles take no item; all others take one.
    assert sorted(accepted.values()) == [c for c in range(14) if c not in (5, 10)]
    # The second command (rejected, table 9) is accepted 5 cycles later: ctl.ready low for 4 cycles.
    assert log["commands"][1] == 10 and log["ctl_ready"][6:10] == [0, 0, 0, 0]
    for cycle, out in log["outputs"]:
        tag = out["tag"]
        assert cycle - accepted[tag] == DATASHEET_LATENCY
        before = accepted[tag] < 5
        if command == "delete":
            assert (out["hit"], out["pid0"]) == ((1, 0x11) if before else (0, 0))
        elif command == "repoint":
            assert (out["hit"], out["pid0"]) == (1, 0x11 if before else 0x22)
        elif command == "record":
            assert (out["hit"], out["pid0"]) == (1, 0x11 if before else 0x33)
        elif items[tag]["dst_ip"] == absent:
            assert (out["hit"], out["normal"]) == (0, 1 if before else 0)
        else:
            assert (out["hit"], out["normal"]) == (1, 0)


def test_back_to_back_lookups_one_per_clock():
    """No command: an item accepted every clock, results in order every clock, ``latency`` cycles later."""
    a, setup = _race_setup()
    items = [{"kind": n % 5, "ipv6": 0, "dst_ip": a ^ (n % 3), "tag": 100 + n} for n in range(20)]
    dut = Pst(**_RACE)
    log = _run_cycles(dut, setup, {"ctl": {}, "items": items}, 20, _RACE)
    assert [c for c, _ in log["accepted"]] == list(range(20))
    assert [c for c, _ in log["outputs"]] == [c + DATASHEET_LATENCY for c in range(20)]
    assert [(o["tag"], o["kind"], o["hit"]) for _, o in log["outputs"]] == \
        [(100 + n, n % 5, int(n % 3 == 0)) for n in range(20)]


def test_accepted_command_survives_reset():
    """A DELETE accepted in the cycle before reset is asserted still empties the slot."""
    a, setup = _race_setup()
    dut = Pst(**_RACE)
    in_layout, out_layout = PstItem(), PstResult(k=4)
    seen = {}

    async def process(ctx, rst):
        ctx.set(dut.o.ready, 1)
        for c in setup:
            await command(ctx, dut, c)
        await command(ctx, dut, {"table": DELETE, "index": _bucket(a, 0, 0, 8), "data": 0})
        ctx.set(rst, 1)
        await ctx.tick()
        ctx.set(rst, 0)
        seen["stats"] = ctx.get(dut.stats)
        ctx.set(dut.i.payload.as_value(), pack(in_layout, {"kind": 1, "ipv6": 0, "dst_ip": a, "tag": 3}))
        ctx.set(dut.i.valid, 1)
        while not ctx.get(dut.i.ready):
            await ctx.tick()
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(10):
            if ctx.get(dut.o.valid):
                seen["out"] = unpack(out_layout, ctx.get(dut.o.payload.as_value()))
                break
            await ctx.tick()
    simulate(dut, process)
    assert seen["stats"] == 0
    assert seen["out"]["tag"] == 3 and seen["out"]["hit"] == 0


@pytest.mark.parametrize("ipv6", [False, True])
def test_every_remainder_bit_is_compared(ipv6):
    """One key installed in way 0; every key that differs from it in one remainder bit, with its low bits corrected
    so that it lands in the same bucket of way 0 (the hash is linear), must miss in the RTL; the key itself hits."""
    params = dict(n_dests=8, k=1, ways=1, buckets=16, ipv6=ipv6, user_bits=0)
    abits = 128 if ipv6 else 32
    rng = random.Random(9)
    addr, flag = rng.getrandbits(abits), int(ipv6)
    bucket = _bucket(addr, flag, 0, 16, ipv6)
    cmds = [{"table": RECORD, "index": 3, "data": 0x5A}]
    if ipv6:
        cmds += [{"table": KEY, "index": 0, "data": (addr >> 32) & ((1 << 64) - 1)},
                 {"table": KEY, "index": 1, "data": addr >> 96 | flag << 32}]
    cmds.append({"table": INSERT, "index": bucket, "data": addr & 0xFFFFFFFF | 3 << 32})
    variants = []
    for i in range(abits + 1 - 4):
        x_addr, x_flag = (0, 1) if 4 + i == abits else (1 << (4 + i), 0)
        v = (addr ^ x_addr ^ _bucket(x_addr, x_flag, 0, 16, ipv6), flag ^ x_flag)
        assert _bucket(*v, 0, 16, ipv6) == bucket
        variants.append(v)
    items = [{"kind": 1, "ipv6": f, "dst_ip": a, "tag": n} for n, (a, f) in enumerate([(addr, flag)] + variants)]
    dut = Pst(**params)
    log = _run_cycles(dut, cmds, {"ctl": {}, "items": items}, len(items), params)
    assert [(o["tag"], o["hit"], o["pid0"]) for _, o in log["outputs"]] == \
        [(0, 1, 0x5A)] + [(n, 0, 0) for n in range(1, len(items))]
