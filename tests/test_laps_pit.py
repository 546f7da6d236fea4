"""LAPS PIT: signature and parameters, the golden model against hand-worked cases (probing worked by hand under both
rules), RTL against the golden model with idle and back-pressure on both streams, and read-after-write cycle by
cycle in Amaranth's simulator.

Expected values here are written by hand from the paper's rules and the datasheet (docs/laps_pit.md); the LFSR
sequence is re-derived below from its polynomial, not taken from the model."""

import ipaddress

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from lbpipe.engine import run_golden, run_rtl
from lbpipe.engine import run_golden as run_golden_
from lbpipe.hdl.laps.pit import Pit, PitItem, PitResult, PitUpdate
from lbpipe.sim.laps.pit import pit_commands, pit_trace

INF = 0xFFFF_FFFF
P64 = dict(n_entries=64, k=4, probe_rule="paper", lfsr_seed=0xACE1)   # 4 sub-tables of 16: pid = 16 j + index


def _lfsr_sequence(seed, n):
    """The datasheet's LFSR, re-derived: the polynomial x^16 + x^14 + x^13 + x^11 + 1 as a bit list, the register
    shifting towards its top bit, the new bit 0 the XOR of the tapped bits (exponent e taps bit e - 1)."""
    bits = [(seed >> b) & 1 for b in range(16)]      # bits[0] = bit 0
    out = []
    for _ in range(n):
        out.append(sum(b << i for i, b in enumerate(bits)))
        new = bits[16 - 1] ^ bits[14 - 1] ^ bits[13 - 1] ^ bits[11 - 1]
        bits = [new] + bits[:15]
    return out


def test_lfsr_rederived_by_hand():
    # 0xACE1 = 1010 1100 1110 0001: bits 15, 13, 12, 10 = 1, 1, 0, 1 -> new bit 1 -> 0x59C3.
    assert _lfsr_sequence(0xACE1, 3)[:2] == [0xACE1, 0x59C3]


# -- signature and parameters -------------------------------------------------------------------------------------

def test_signature():
    dut = Pit(n_entries=64, k=4)
    dut._MustUse__silence = True
    assert set(dut.signature.members) == {"i", "upd", "o", "ctl", "stats"}
    item = dut.signature.members["i"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("pid0", 16), ("pid1", 16), ("pid2", 16),
                                               ("pid3", 16), ("now", 48), ("tag", 16)]
    upd = dut.signature.members["upd"].signature.members["payload"].shape
    assert [(n, f.width) for n, f in upd] == [("pid", 16), ("owd", 32), ("now", 48)]
    res = dict((n, f.width) for n, f in dut.signature.members["o"].signature.members["payload"].shape)
    assert res["real_val3"] == 32 and res["time0"] == 48 and res["anchor2_3"] == 32 and res["n_anchors1"] == 3
    assert res["probe_pid"] == 16 and res["probe_slot"] == 2 and res["held"] == 1
    assert dut.signature.members["stats"].shape == 128
    assert dut.latency == 5
    assert item == PitItem(k=4) and upd == PitUpdate()
    assert dut.signature.members["o"].signature.members["payload"].shape == PitResult(k=4)


@pytest.mark.parametrize("kwargs, exc", [
    (dict(k=0), ValueError), (dict(k=33), ValueError), (dict(n_entries=100, k=8), ValueError),
    (dict(n_entries=96, k=4), ValueError), (dict(n_entries=1 << 17, k=8), ValueError),
    (dict(probe_rule="min"), ValueError), (dict(lfsr_seed=0), ValueError), (dict(k="8"), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        Pit(**kwargs)


# -- golden model against hand-worked cases -----------------------------------------------------------------------

def _entry(pid, base, anchors=(), valid=1, time=0, real=None):
    e = {"pid": pid, "base_val": base, "anchors": list(anchors), "valid": valid, "time": time}
    if real is not None:
        e["real_val"] = real
    return e


def _setup(*entries, **params):
    return [{"ctl": c} for c in pit_commands(list(entries), **{**P64, **params})]


def _look(now, pids, tag=0):
    return {"item": {"kind": 1, "now": now, "tag": tag, **{f"pid{j}": p for j, p in enumerate(pids)}}}


def _upd(pid, owd, now):
    return {"upd": {"pid": pid, "owd": owd, "now": now}}


def test_commands_written_by_hand():
    """pit_commands: values (base | real << 32), anchors 0-1, anchors 2-3, time, commit (valid | count << 1)."""
    cmds = pit_commands([_entry(17, 1500, ["10.0.0.1", "10.0.1.2", "10.0.2.3"])], **P64)
    assert cmds == [
        {"table": 0, "index": 0, "data": 1500 | 1500 << 32},
        {"table": 1, "index": 0, "data": 0x0A000001 | 0x0A000102 << 32},
        {"table": 2, "index": 0, "data": 0x0A000203},
        {"table": 3, "index": 0, "data": 0},
        {"table": 4, "index": 17, "data": 1 | 3 << 1},
    ]
    with pytest.raises(ValueError):
        pit_commands([_entry(16, 10)], **P64)          # index 0 of sub-table 1 is "no path"


def test_lookup_reads_all_slots_and_masks_empty_ones():
    ev = _setup(_entry(17, 1500, ["10.0.0.1", "10.0.1.2"]), _entry(35, 900))
    # slot 0 empty, slot 1 pid 17, slot 2 pid 35, slot 3 a pid of sub-table 0 (forged: wrong sub-table)
    ev.append(_look(100, [0, 17, 35, 5], tag=9))
    (out,) = run_golden("laps-pit", P64, ev)
    assert out["tag"] == 9 and out["probe_valid"] == 0
    assert (out["valid1"], out["real_val1"], out["base_val1"], out["time1"], out["n_anchors1"]) == (1, 1500, 1500,
                                                                                                     0, 2)
    assert (out["anchor1_0"], out["anchor1_1"], out["anchor1_2"]) == (0x0A000001, 0x0A000102, 0)
    assert (out["valid2"], out["real_val2"], out["base_val2"]) == (1, 900, 900)
    # empty slot 0: index 0 of sub-table 0, never written; forged slot 3 (pid 5 = sub-table 0, index 5): invalid,
    # infinity, and whatever sub-table 3 holds at index 5 (nothing here)
    for j in (0, 3):
        assert (out[f"valid{j}"], out[f"real_val{j}"], out[f"base_val{j}"], out[f"time{j}"]) == (0, INF, 0, 0)
    # a forged slot whose index holds a path of its sub-table: that entry's stored fields, but valid 0, infinity
    ev = _setup(_entry(1, 1500, ["10.0.0.9"], time=7), _entry(17, 900))
    ev.append(_look(100, [0, 33, 0, 0]))          # pid 33 (sub-table 2, index 1) in slot 1: reads sub-table 1 index 1
    (out,) = run_golden("laps-pit", P64, ev)
    assert (out["valid1"], out["real_val1"], out["base_val1"], out["probe_valid"]) == (0, INF, 900, 0)


def test_probing_paper_rule_worked_by_hand():
    """Algorithm 1: stale when now - time > 2 x realVal; the probe doubles realVal and sets time = now. Five
    lookups of an empty destination (tag 99) push the probe out of the hold-off window before the path is tested
    again."""
    ev = _setup(_entry(17, 1000))
    ev += [_look(2000, [0, 17, 0, 0]),            # 2000 - 0 = 2000, not > 2000: fresh
           _look(2001, [0, 17, 0, 0]),            # 2001 > 2000: probe, real 2000, time 2001
           _look(2002, [0, 17, 0, 0])]            # 1 elapsed: fresh, sees real 2000
    ev += [_look(2003, [0, 0, 0, 0], tag=99)] * 5
    ev += [_look(2001 + 4000, [0, 17, 0, 0]),     # 4000, not > 4000
           _look(2001 + 4001, [0, 17, 0, 0])]     # probe again: real 4000
    out = [o for o in run_golden("laps-pit", P64, ev) if o["tag"] != 99]
    assert [o["probe_valid"] for o in out] == [0, 1, 0, 0, 1]
    assert [o["real_val1"] for o in out] == [1000, 2000, 2000, 2000, 4000]
    assert [o["time1"] for o in out] == [0, 2001, 2001, 2001, 6002]
    assert out[1]["probe_pid"] == 17 and out[1]["probe_slot"] == 1


@pytest.mark.parametrize("engine", ["golden", "rtl"])
def test_probe_hold_off_worked_by_hand(engine):
    """Hold-off (datasheet): a path written by the lookup's clock's update or one of the 5 updates before it, or
    probed by one of the 5 lookups before it, is not probed, however stale. Counted in updates and lookups, not
    clocks. The RTL runs each trace back to back (lookup 1 decides right behind lookup 0's probe)."""
    def run_golden(block, params, events):
        return run_rtl(block, params, events) if engine == "rtl" else run_golden_(block, params, events)
    ev = _setup(_entry(17, 1000), _entry(33, 1000))
    # probes: lookup 0 probes pid 17 (3000 > 2000); lookups 1-5 see it stale (97,000 > 4,000) but held; lookup 6
    # no longer has lookup 0 among its 5 predecessors: probe, real 4000
    ev += [_look(3000, [0, 17, 0, 0])] + [_look(100_000, [0, 17, 0, 0])] * 6
    out = run_golden("laps-pit", P64, ev)
    assert [(o["probe_valid"], o["real_val1"]) for o in out] == [(1, 2000)] + [(0, 2000)] * 5 + [(1, 4000)]
    # updates: pid 33 updated (time 0, owd 1000), then 4 updates of pid 17 (the 4th in the lookup's clock): the
    # lookup at 100,000 has pid 33 among its clock's update and the 5 before: held. One more update of pid 17:
    # pid 33 drops out, the next lookup probes it (real 2000).
    ev = _setup(_entry(17, 1000), _entry(33, 1000))
    ev += [_upd(33, 1000, 0)] + [_upd(17, 500, 50)] * 4 + [_look(100_000, [0, 0, 33, 0])]
    ev += [_upd(17, 500, 60), _look(100_001, [0, 0, 0, 0]), _look(100_002, [0, 0, 33, 0])]
    out = run_golden("laps-pit", P64, ev)
    assert [(o["probe_valid"], o["real_val2"]) for o in out] == [(0, 1000), (0, INF), (1, 2000)]
    # the lookup's own clock's update counts too (the 6th most recent then): same table, update paired with it
    ev = _setup(_entry(17, 1000), _entry(33, 1000))
    ev += [_upd(33, 1000, 0)] + [_upd(17, 500, 50)] * 4 + [_upd(17, 500, 60), _look(100_000, [0, 0, 33, 0])]
    ev += [_upd(17, 500, 70), _look(100_001, [0, 0, 33, 0])]
    out = run_golden("laps-pit", P64, ev)
    assert [(o["probe_valid"], o["real_val2"]) for o in out] == [(0, 1000), (1, 2000)]


def test_probing_picks_with_the_lfsr():
    """Four stale slots. Lookup n starts its search at LFSR_n mod 4 and takes the first stale slot at or after it,
    going round, skipping the slots the lookups before it probed (hold-off: all four lookups are within 5)."""
    seq = _lfsr_sequence(0xACE1, 5)
    ev = _setup(_entry(1, 10), _entry(17, 10), _entry(33, 10), _entry(49, 10))
    for n in range(5):
        ev.append(_look(1000 + 100 * n, [1, 17, 33, 49]))
    out = run_golden("laps-pit", P64, ev)
    chosen, held = [], set()
    for n in range(4):
        start = seq[n] % 4
        j = next(j for j in [(start + i) % 4 for i in range(4)] if j not in held)
        chosen.append(j)
        held.add(j)
    assert [o["probe_slot"] for o in out[:4]] == chosen and all(o["probe_valid"] for o in out[:4])
    assert out[4]["probe_valid"] == 0              # all four held
    # 0xACE1 mod 4 = 1 -> slot 1; 0x59C3 mod 4 = 3 -> slot 3
    assert chosen[:2] == [1, 3]


def test_probing_max_rule_worked_by_hand():
    """The simulator's rule: stale when now - time > 2 x the largest finite realVal of the destination's valid
    paths; infinity and invalid paths do not count."""
    p = dict(P64, probe_rule="max")
    ev = _setup(_entry(1, 1000), _entry(17, 3000), _entry(33, 50, real=INF), _entry(49, 9000, valid=0), **p)
    ev += [_look(6000, [1, 17, 33, 49]),          # limit 2 x 3000 = 6000: nothing stale
           _look(6001, [1, 17, 33, 49])]          # slots 0 and 1 stale (and slot 2: 6001 > 6000 too)
    out = run_golden("laps-pit", p, ev)
    assert out[0]["probe_valid"] == 0
    assert out[1]["probe_valid"] == 1 and out[1]["probe_slot"] in (0, 1, 2)
    # Under the paper's rule, the same table probes slot 0 at 2001 already (2001 > 2 x 1000).
    ev2 = _setup(_entry(1, 1000), _entry(17, 3000)) + [_look(2001, [1, 17, 0, 0])]
    assert run_golden("laps-pit", P64, ev2)[0]["probe_slot"] == 0


def test_probe_doubling_saturates():
    """Both slots stale (2**40 ns > 2 x infinity). Lookup 0 starts at slot 1 (0xACE1 mod 4): infinity stays
    infinity; lookup 1 probes slot 0 (slot 1 held): 0x9000_0000 x 2 saturates to infinity; lookup 2: both held."""
    ev = _setup(_entry(1, 10, real=0x9000_0000), _entry(17, 10, real=INF))
    big = 1 << 40
    ev += [_look(big, [1, 17, 0, 0]), _look(2 * big, [1, 17, 0, 0]), _look(3 * big, [1, 17, 0, 0])]
    out = run_golden("laps-pit", P64, ev)
    assert [(o["probe_valid"], o["probe_slot"], o["real_val0"], o["real_val1"]) for o in out] == [
        (1, 1, 0x9000_0000, INF), (1, 0, INF, INF), (0, 0, INF, INF)]


def test_updates_and_bad_updates():
    ev = _setup(_entry(17, 1000), _entry(18, 1000, valid=0))
    ev += [_upd(17, 777, 50),                 # good
           _upd(16, 5, 60),                   # index 0
           _upd(64, 5, 60),                   # out of range
           _upd(18, 5, 60),                   # invalid entry
           _upd(19, 5, 60),                   # never set up (invalid)
           _look(70, [0, 17, 0, 0]), _look(71, [0, 18, 0, 0])]
    from lbpipe.engine import golden_run
    out, model = golden_run("laps-pit", P64, ev)
    assert (out[0]["real_val1"], out[0]["time1"]) == (777, 50)
    assert (out[1]["valid1"], out[1]["real_val1"], out[1]["time1"]) == (0, 1000, 0)
    assert model.stats() == [2, 5, 4, 0]      # lookups, updates, rejected, probes


def test_now_behind_time_is_a_long_elapsed_time():
    """A now before the path's time counts modulo 2**48: a huge elapsed time, so the path is probed once and its
    time restarts at that now."""
    ev = _setup(_entry(1, 100, time=10_000))
    ev += [_look(5_000, [1, 0, 0, 0]), _look(5_001, [1, 0, 0, 0])]
    out = run_golden("laps-pit", P64, ev)
    assert (out[0]["probe_valid"], out[0]["time0"], out[0]["real_val0"]) == (1, 5_000, 200)
    assert out[1]["probe_valid"] == 0


HAZARDS = [_upd(1, 300, 5000), _look(5000, [1, 0, 0, 0]),    # the update applies first: 300, fresh, no probe
           _upd(2, 300, 5001), _look(9000, [1, 0, 0, 0]),    # pid 1 stale (4000 > 600) but updated: held
           _upd(2, 300, 20000), _look(20000, [3, 0, 0, 0]),  # pid 3 stale: probe (200); update of pid 2, same
                                                             # sub-table: held one clock
           _upd(17, 300, 20001), _look(40000, [4, 0, 0, 0])]  # probe of pid 4 (200), update in sub-table 1: no wait
HAZARDS_OUT = [(0, 300, 0), (0, 300, 0), (1, 200, 1), (1, 200, 0)]


def test_same_clock_update_then_lookup_and_held():
    """Trace order = serial order: the update of a clock applies before its lookup. A probe and the same clock's
    update of another pid of the same sub-table cost one more clock (held)."""
    ev = _setup(_entry(1, 100), _entry(2, 100), _entry(3, 100), _entry(4, 100), _entry(17, 100)) + HAZARDS
    out = run_golden("laps-pit", P64, ev)
    assert [(o["probe_valid"], o["real_val0"], o["held"]) for o in out] == HAZARDS_OUT


# -- RTL against the golden model -----------------------------------------------------------------------------------

@pytest.mark.parametrize("params", [P64, dict(n_entries=96, k=3, probe_rule="max", lfsr_seed=7)])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_matches_golden(params, idle, backpressure):
    events = pit_trace(11, 400, **params)
    stats = {}
    out = run_rtl("laps-pit", params, events, idle=idle, backpressure=backpressure, seed=5, stats=stats)
    assert out == run_golden("laps-pit", params, events)
    assert stats["errors"] == 0 and stats["outputs"] == stats["items"]


def test_rtl_hand_worked_hazards():
    """The hand-worked cases above, through the RTL with no idle cycles (each clock's group back to back)."""
    ev = _setup(_entry(1, 100), _entry(2, 100), _entry(3, 100), _entry(4, 100), _entry(17, 100)) + HAZARDS
    ev += [_look(40001, [4, 0, 0, 0]), _upd(4, 50, 40002), _look(40003, [4, 0, 0, 0])]
    out = run_rtl("laps-pit", P64, ev)
    assert [(o["probe_valid"], o["real_val0"], o["held"]) for o in out] == HAZARDS_OUT + [(0, 200, 0), (0, 50, 0)]


# -- read after write, cycle by cycle, in Amaranth's simulator ---------------------------------------------------

def _cycle_run(clocks, entries, params=P64, ready=None):
    """Drive ``clocks`` (a list, one per clock, of ``(lookup or None, update or None)``) after loading ``entries``
    through ``ctl``; returns the results in order and the clock each lookup was taken."""
    dut = Pit(**params)
    k = params["k"]
    item_l, upd_l, res_l = PitItem(k=k), PitUpdate(), PitResult(k=k)
    cmds = pit_commands(entries, **params)
    taken, outs = [], []

    async def producer(ctx):
        for cmd in cmds:
            ctx.set(dut.ctl.payload, data.StructLayout({"table": 8, "index": 24, "data": 64}).const(cmd))
            ctx.set(dut.ctl.valid, 1)
            while True:
                _, _, rdy = await ctx.tick().sample(dut.ctl.ready)
                if rdy:
                    break
        ctx.set(dut.ctl.valid, 0)
        await ctx.tick()            # the clock after a commit writes it and takes nothing (datasheet, Control)
        for clock, (look, upd) in enumerate(clocks):
            ctx.set(dut.i.valid, look is not None)
            ctx.set(dut.upd.valid, upd is not None)
            if look is not None:
                ctx.set(dut.i.payload, item_l.const(look))
            if upd is not None:
                ctx.set(dut.upd.payload, upd_l.const(upd))
            _, _, ir, ur = await ctx.tick().sample(dut.i.ready, dut.upd.ready)
            assert ir and ur, f"clock {clock}: not ready"
            if look is not None:
                taken.append(clock)
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.upd.valid, 0)

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        for _ in range(len(clocks) + len(cmds) * 2 + 40):
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                outs.append({n: getattr(payload, n) for n, _ in res_l})

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return outs, taken


def _lk(now, pids):
    return {"kind": 1, "now": now, "tag": now & 0xFFFF, **{f"pid{j}": p for j, p in enumerate(pids)}}


def _up(pid, owd, now):
    return {"pid": pid, "owd": owd, "now": now}


def test_read_after_write_same_and_consecutive_clocks():
    """Clock by clock (table in docs/laps_pit.md, "Read after write"):
    c0: update pid 1 (owd 300) with a lookup of pid 1        -> the lookup sees 300 (same clock)
    c1: update pid 1 (owd 400), no lookup
    c2: lookup of pid 1                                        -> 400 (the update one clock before)
    c3-c7: lookups of pid 1, each with an update of pid 17     -> 400 (fresh; these updates push pid 1 out of the
                                                                  update hold-off)
    c8: lookup at a now that makes pid 1 stale (5000 - 1001 > 800), with an update of pid 17 -> probe, 800
    c9: update pid 1 (owd 90) with a lookup of pid 1           -> 90 (the update one clock after the probe wins)
    c10: lookup of pid 1                                       -> 90
    c11: lookup of pid 1 with update pid 1 (owd 70) at a stale now -> the update first: 70, no probe
    """
    entries = [_entry(1, 100), _entry(17, 100)]
    clocks = [
        (_lk(1000, [1, 0, 0, 0]), _up(1, 300, 1000)),
        (None, _up(1, 400, 1001)),
        (_lk(1002, [1, 0, 0, 0]), None),
        *[(_lk(1003 + n, [1, 0, 0, 0]), _up(17, 500, 1003 + n)) for n in range(5)],
        (_lk(5000, [1, 0, 0, 0]), _up(17, 500, 5000)),
        (_lk(5001, [1, 0, 0, 0]), _up(1, 90, 5001)),
        (_lk(5002, [1, 0, 0, 0]), None),
        (_lk(90000, [1, 0, 0, 0]), _up(1, 70, 90000)),
    ]
    outs, taken = _cycle_run(clocks, entries)
    assert [(o["real_val0"], o["probe_valid"]) for o in outs] == [
        (300, 0), (400, 0), *[(400, 0)] * 5, (800, 1), (90, 0), (90, 0), (70, 0)]
    assert taken == [0, *range(2, 12)]


def test_rtl_probe_hold_off_counts_updates_and_lookups():
    """The hold-off through the RTL clock by clock, with idle clocks between: it counts updates and lookups, not
    clocks. pids 1, 33 (slots 0, 2): real_val 100, time 0.
    c0: update pid 1 (owd 100, now 10); c1-c4: updates of pid 17; c5, c6 idle
    c7: lookup pid 1 at 100,000 (stale)     -> pid 1 is among the last 5 updates: no probe
    c8: update of pid 17; c9 idle
    c10: lookup pid 1 at 100,001            -> the last 5 updates are pid 17: probe slot 0 (real 200)
    c11: lookup pids 1, 33 at 100,002       -> pid 1 held (probed by the lookup before): probe slot 2 (pid 33)
    c12, c13 (idle), c14, c15: lookups of pids 1, 33 at 200,000 -> both held (probes within the last 5 lookups)
    c16: lookup of pids 1, 33 at 200,001   -> the lookups before it are c15, c14, c12, c11, c10: both still held
    c17: lookup of pids 1, 33 at 200,002   -> c10 dropped out: pid 1 probed (slot 0, real 400)
    c18: lookup of pids 1, 33 at 200,003   -> c11 dropped out, pid 1 held by c17: probe slot 2 (real 200 -> 400)
    c19-c22: lookups of an empty destination; c23, c24 idle (so nothing is ahead in X4/X5 when the next decides)
    c25: lookup of pid 33 at 400,000        -> the 5th lookup back (c18) probed it: held, no probe
    c26, c27 idle; c28: lookup of pid 33 at 400,001 -> c18 dropped out: probe (real 800)
    """
    entries = [_entry(1, 100), _entry(17, 100), _entry(33, 100)]
    both = [1, 0, 33, 0]
    clocks = [(None, _up(1, 100, 10))] + [(None, _up(17, 100, 20))] * 4 + [(None, None)] * 2
    clocks += [(_lk(100_000, [1, 0, 0, 0]), None), (None, _up(17, 100, 30)), (None, None),
               (_lk(100_001, [1, 0, 0, 0]), None), (_lk(100_002, both), None),
               (_lk(200_000, both), None), (None, None), (_lk(200_000, both), None), (_lk(200_000, both), None),
               (_lk(200_001, both), None), (_lk(200_002, both), None), (_lk(200_003, both), None)]
    clocks += [(_lk(300_000, [0, 0, 0, 0]), None)] * 4 + [(None, None)] * 2 + [(_lk(400_000, [0, 0, 33, 0]), None)]
    clocks += [(None, None)] * 2 + [(_lk(400_001, [0, 0, 33, 0]), None)]
    outs, taken = _cycle_run(clocks, entries)
    got = [(o["probe_valid"], o["probe_slot"], o["probe_pid"], o["real_val0"], o["real_val2"]) for o in outs]
    assert got == [(0, 0, 0, 100, INF), (1, 0, 1, 200, INF), (1, 2, 33, 200, 200),
                   (0, 0, 0, 200, 200), (0, 0, 0, 200, 200), (0, 0, 0, 200, 200), (0, 0, 0, 200, 200),
                   (1, 0, 1, 400, 200), (1, 2, 33, 400, 400),
                   *[(0, 0, 0, INF, INF)] * 4, (0, 0, 0, INF, 400), (1, 2, 33, INF, 800)]
    assert taken == [7, 10, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 22, 25, 28]


def test_probe_write_back_races_updates_of_other_pids_in_its_sub_table():
    """A probe (pid 1) and its clock's update of pid 2, both in sub-table 0: the result waits one clock (held), and
    both writes land: the next clocks read pid 1 doubled and pid 2 updated."""
    entries = [_entry(1, 100), _entry(2, 100)]
    clocks = [
        (_lk(5000, [1, 0, 0, 0]), _up(2, 333, 5000)),
        (_lk(5001, [1, 0, 0, 0]), None),
        (_lk(5002, [2, 0, 0, 0]), None),
    ]
    outs, _ = _cycle_run(clocks, entries)
    assert [(o["real_val0"], o["probe_valid"], o["held"]) for o in outs] == [(200, 1, 1), (200, 0, 0), (333, 0, 0)]


def test_latency_is_five_clocks():
    """An item taken at clock t leaves at clock t + 5 (datasheet: X0 accept, X1 dstale data, X2 elapsed time, X3
    stale test, X4 decide, X5 output); back to back, one per clock."""
    dut = Pit(**P64)
    item_l = PitItem(k=4)
    seen = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for t in range(12):
            ctx.set(dut.i.valid, t < 4)
            ctx.set(dut.i.payload, item_l.const(_lk(t, [0, 0, 0, 0])))
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                seen.append((t, payload.tag))
    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert [t for t, _ in seen] == [5, 6, 7, 8]
    assert [tag for _, tag in seen] == [0, 1, 2, 3]


@pytest.mark.parametrize("distance", [1, 2, 3, 4, 5, 6, 7])
def test_read_after_write_at_every_distance(distance):
    """A write (an update, or a lookup's probe) at clock 0 and a lookup of the same pid ``distance`` clocks later,
    nothing between: the lookup sees the write whichever pipeline stage it is in when the write lands (writes land
    in X5, 5 clocks after they are taken; the lookup's ``dval`` read is issued in its X3, 3 clocks after it is
    taken: at distance 1 the write lands while the lookup is in X4, at 2 in the clock of its read (read-first),
    both snooped into its X4/X5 registers; from 3 on the read sees it). The second lookup is in the hold-off of
    the first one's probe, and fresh anyway: no probe."""
    entries = [_entry(1, 100)]
    gap = [(None, None)] * (distance - 1)
    clocks = [(None, _up(1, 321, 1000))] + gap + [(_lk(1000 + distance, [1, 0, 0, 0]), None)]
    outs, _ = _cycle_run(clocks, entries)
    assert [(o["real_val0"], o["time0"], o["probe_valid"]) for o in outs] == [(321, 1000, 0)]
    clocks = [(_lk(5000, [1, 0, 0, 0]), None)] + gap + [(_lk(5000 + distance, [1, 0, 0, 0]), None)]
    outs, _ = _cycle_run(clocks, entries)
    assert [(o["real_val0"], o["time0"], o["probe_valid"]) for o in outs] == [(200, 5000, 1), (200, 5000, 0)]


@pytest.mark.parametrize("testcase", ["harness_catches_a_wrong_output", "harness_catches_a_wrong_cycle"])
def test_harness_can_fail(testcase):
    """The scoreboard and the timing check (with lone-update clocks and held lookups in the trace) fail on a wrong
    expectation, each for its own reason."""
    run_rtl("laps-pit", P64, pit_trace(3, 120, **P64), testcase=testcase)


def test_lone_update_clocks_and_held_lookups_are_timed():
    """Unthrottled, every output's clock is checked against the golden model: a clock with an update and no lookup
    delays the next result by one clock, a held lookup by one more (the trace has both)."""
    events = pit_trace(5, 300, **P64)
    out = run_golden("laps-pit", P64, events)
    assert any(o["held"] for o in out)
    kinds = [next(iter(e)) for e in events]
    assert any(a == "upd" and b != "item" for a, b in zip(kinds, kinds[1:]))
    stats = {}
    run_rtl("laps-pit", P64, events, stats=stats)
    assert stats["errors"] == 0


@pytest.mark.parametrize("rule", ["paper", "max"])
def test_rtl_probing_under_a_controlled_clock(rule):
    """Probing worked by hand, through the RTL (cocotb), ``now`` set per lookup. Paths real_val 1000 (slot 0) and
    3000 (slot 1), time 0. paper: stale after 2000 and 6000 ns; max: both after 2 x 3000 = 6000 ns."""
    p = dict(P64, probe_rule=rule)
    ev = _setup(_entry(1, 1000), _entry(17, 3000), **p)
    ev += [_look(2000, [1, 17, 0, 0]), _look(2001, [1, 17, 0, 0]), _look(6000, [1, 17, 0, 0]),
           _look(6001, [1, 17, 0, 0]), _look(6002, [1, 17, 0, 0])]
    out = run_rtl("laps-pit", p, ev)
    got = [(o["probe_valid"], o["probe_slot"], o["real_val0"], o["real_val1"]) for o in out]
    if rule == "paper":
        # 2001: slot 0 stale (2001 > 2000) -> 2000, time 2001. 6000: slot 0 held (probed 2 lookups before),
        # slot 1 6000 <= 6000. 6001: slot 1 stale -> 6000. 6002: slot 0 elapsed 4001 > 4000 but still held (the
        # probe at 2001 is 3 lookups before), slot 1 held: no probe.
        assert got == [(0, 0, 1000, 3000), (1, 0, 2000, 3000), (0, 0, 2000, 3000), (1, 1, 2000, 6000),
                       (0, 0, 2000, 6000)]
    else:
        # Nothing before 6001 (M = 3000). 6001: both stale; lookup 4 starts at LFSR_3 mod 4 (0x670F: 3, round to
        # slot 0): slot 0 probed (2000). 6002: slot 0 is held (probed by the lookup before) and left out of M, so
        # M = 3000 (slot 1) and slot 1 (elapsed 6002 > 6000) is probed.
        seq = _lfsr_sequence(0xACE1, 4)
        first = 0 if seq[3] % 4 in (0, 2, 3) else 1
        assert first == 0
        assert got == [(0, 0, 1000, 3000), (0, 0, 1000, 3000), (0, 0, 1000, 3000), (1, 0, 2000, 3000),
                       (1, 1, 2000, 6000)]


def test_rtl_max_rule_with_no_finite_path_waits_for_twice_infinity():
    """max rule, through the RTL: both valid paths at infinity, so M is infinity and a path is stale only when
    now - time > 2 x (2**32 - 1) = 0x1_FFFF_FFFE ns (datasheet, Active probing); a path that is invalid (pid 33,
    real_val 10) does not count for M either. The probe doubles infinity to infinity."""
    p = dict(P64, probe_rule="max")
    ev = _setup(_entry(1, 10, real=INF), _entry(17, 10, real=INF), _entry(33, 10, valid=0), **p)
    ev += [_look(0x1_FFFF_FFFE, [1, 17, 33, 0]), _look(0x1_FFFF_FFFF, [1, 17, 33, 0])]
    out = run_rtl("laps-pit", p, ev)
    assert out[0]["probe_valid"] == 0
    assert out[1]["probe_valid"] == 1 and out[1]["probe_slot"] in (0, 1)
    assert (out[1]["real_val0"], out[1]["real_val1"]) == (INF, INF)


def test_lookup_right_after_a_commit_waits_a_clock_and_sees_it():
    """A commit (ctl table 4) is written in the clock after its command, which takes no lookup or update (datasheet,
    Control): a lookup offered at once is taken one clock later and reads the committed entry (real_val 700, stale
    at now 5000: probed to 1400). Without the wait it would read the entry as it was (never written: invalid)."""
    dut = Pit(**P64)
    item_l, res_l = PitItem(k=4), PitResult(k=4)
    cmds = pit_commands([_entry(1, 700)], **P64)
    ctl_l = data.StructLayout({"table": 8, "index": 24, "data": 64})
    log = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for cmd in cmds:
            ctx.set(dut.ctl.payload, ctl_l.const(cmd))
            ctx.set(dut.ctl.valid, 1)
            while True:
                _, _, rdy = await ctx.tick().sample(dut.ctl.ready)
                if rdy:
                    break
        ctx.set(dut.ctl.valid, 0)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, item_l.const(_lk(5000, [1, 0, 0, 0])))
        offered = True
        for clock in range(12):
            _, _, ready, valid, payload = await ctx.tick().sample(dut.i.ready, dut.o.valid, dut.o.payload)
            if ready and offered:
                log.append(("taken", clock))
                ctx.set(dut.i.valid, 0)
                offered = False
            if valid:
                log.append(("out", clock, payload.valid0, payload.real_val0, payload.probe_valid))
    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert log == [("taken", 1), ("out", 6, 1, 1400, 1)]


def test_command_waits_for_the_lookup_ahead_to_leave():
    """Commands are applied only with the pipeline empty (datasheet, Control): a command offered in the clock after
    a lookup is taken (the lookup alone in the first stage) is accepted only after the lookup's result has left, and
    the result shows the entry as it was (real_val 700, stale at now 5000: probed to 1400)."""
    dut = Pit(**P64)
    item_l = PitItem(k=4)
    cmds = pit_commands([_entry(1, 700)], **P64)
    ctl_l = data.StructLayout({"table": 8, "index": 24, "data": 64})
    log = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for cmd in cmds:
            ctx.set(dut.ctl.payload, ctl_l.const(cmd))
            ctx.set(dut.ctl.valid, 1)
            while True:
                _, _, rdy = await ctx.tick().sample(dut.ctl.ready)
                if rdy:
                    break
        ctx.set(dut.ctl.valid, 0)
        for _ in range(2):
            await ctx.tick()
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, item_l.const(_lk(5000, [1, 0, 0, 0])))
        waiting = False
        for clock in range(12):
            _, _, i_ready, c_ready, c_valid, valid, payload = await ctx.tick().sample(
                dut.i.ready, dut.ctl.ready, dut.ctl.valid, dut.o.valid, dut.o.payload)
            if valid:
                log.append(("out", clock, payload.real_val0))
            if waiting and c_ready and c_valid:
                log.append(("command", clock))
                ctx.set(dut.ctl.valid, 0)
                waiting = False
            if i_ready and clock == 0:
                # the lookup is taken at clock 0; from the next clock a VALUES command waits (real_val 900)
                log.append(("taken", clock))
                ctx.set(dut.i.valid, 0)
                ctx.set(dut.ctl.payload, ctl_l.const({"table": 0, "index": 0, "data": 900 << 32}))
                ctx.set(dut.ctl.valid, 1)
                waiting = True
    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert log[0] == ("taken", 0) and log[1] == ("out", 5, 1400)
    assert len(log) == 3 and log[2][0] == "command" and log[2][1] > 5
