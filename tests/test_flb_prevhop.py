"""FLB previous-hop table (flb-prevhop): signature and parameters, a hand-worked sequence (a CNM before and after the
flow's first packet, back-to-back items of one flow at distances 1 and 2, a live entry moved to another MAC, the
exact timeout, an aged entry rewritten, the timer's wrap and its alias, group source MACs, flows out of range, the
switch's MAC written, forged and rewritten) on the re-derivation, the golden model and the RTL, with the counters; the
same rules across banks (16,384 flows, four banks of 4,096); the reset sweep seen directly (entries recorded before
a reset miss after it, one bank and two); the golden model and the RTL (idle input, back-pressure) against an
independent re-derivation written here; one item per clock measured; the CLI's one-line errors.

Expected values come from the hand-worked comments or from :func:`rederive` below, written from the paper's section
3.2 ("CNM construction") and the datasheet's choices, never from lbpipe.sim.flb."""

import os
import random

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.flb.prevhop import PrevHop as PrevHopRTL
from lbpipe.sim.flb.prevhop import PrevHop, prevhop_trace

FULL = os.environ.get("LBPIPE_FULL") == "1"

P = dict(n_flows=12, time_bits=6, timeout=20)

# MAC addresses as 48-bit integers, first octet most significant (02:00:00:00:00:0a is 0x02000000000a). The I/G bit
# is the least significant bit of the first octet: 01:00:5e:00:00:01 (an IPv4 multicast MAC) is a group address.
A, B, C = 0x02000000000A, 0x02000000000B, 0x0ABBCCDDEE01
GROUP = 0x01005E000001
M, M2 = 0x021122334455, 0x02AABBCCDDEE


def _data(flow, mac, now, tag=0):
    return {"item": {"kind": 1, "cnm": 0, "flow": flow, "mac": mac, "now": now, "tag": tag}}


def _cnm(flow, now, tag=0):
    return {"item": {"kind": 0, "cnm": 1, "flow": flow, "mac": 0, "now": now, "tag": tag}}


def _my_mac(value, index=0, table=0):
    return {"ctl": {"table": table, "index": index, "data": value}}


# -- the independent re-derivation -------------------------------------------------------------------------------------

def rederive(events, *, n_flows, time_bits, timeout):
    """Section 3.2 per item: a data packet leaves its flow's previous hop (the MAC it came with) and the time it came;
    a CNM goes to that hop if the flow sent within the last ``timeout`` ticks (ticks counted modulo
    ``2**time_bits``), from this switch's MAC. A source MAC whose first octet is odd is a group address: no sender
    has one. Returns ``[(ok, hit, aged, moved, dst_mac, src_mac)]`` and the counters ``[recorded, moved, hits,
    misses without entry, misses aged, rejected]``."""
    span = 2 ** time_bits
    seen, me, out = {}, 0, []
    n = dict(rec=0, moved=0, hit=0, empty=0, aged=0, bad=0)
    for e in events:
        if "ctl" in e:
            c = e["ctl"]
            first_octet = c["data"] >> 40
            if c["table"] == 0 and first_octet < 256 and first_octet % 2 == 0:
                me = c["data"]
            continue
        it = e["item"]
        flow, now = it["flow"], it["now"]
        is_cnm = it.get("cnm", 0) == 1
        if flow >= n_flows or (not is_cnm and (it["mac"] >> 40) % 2 == 1):
            out.append((0, 0, 0, 0, 0, 0))
            n["bad"] += 1
            continue
        recent = None
        if flow in seen:
            then, hop = seen[flow]
            recent = (now + span - then) % span <= timeout - 1
        if is_cnm:
            if recent is None:
                out.append((1, 0, 0, 0, 0, 0))
                n["empty"] += 1
            elif recent:
                out.append((1, 1, 0, 0, hop, me))
                n["hit"] += 1
            else:
                out.append((1, 0, 1, 0, 0, 0))
                n["aged"] += 1
        else:
            changed = int(bool(recent) and hop != it["mac"])
            out.append((1, 0, 0, changed, 0, 0))
            n["moved"] += changed
            n["rec"] += 1
            seen[flow] = (now, it["mac"])
    return out, [n["rec"], n["moved"], n["hit"], n["empty"], n["aged"], n["bad"]]


def _fields(outputs):
    return [(o["ok"], o["hit"], o["aged"], o["moved"], o["dst_mac"], o["src_mac"]) for o in outputs]


# -- the hand-worked sequence ------------------------------------------------------------------------------------------

def hand_worked():
    """Events and expected (ok, hit, aged, moved, dst_mac, src_mac), worked by hand (P: 12 flows (4-bit field:
    12 to 15 forged), 6-bit timer (mod 64), timeout 20: live while the age is 0 to 19); and the counters."""
    ev, want = [_my_mac(M)], []                                     # this switch is M
    ev += [_cnm(3, 0)]; want += [(1, 0, 0, 0, 0, 0)]               # 1 flow 3 never seen: miss, no entry
    ev += [_data(3, A, 1)]; want += [(1, 0, 0, 0, 0, 0)]           # 2 flow 3 from A at 1
    ev += [_cnm(3, 2)]; want += [(1, 1, 0, 0, A, M)]               # 3 next clock: to A, from M
    ev += [_data(3, A, 5)]; want += [(1, 0, 0, 0, 0, 0)]           # 4 A again: not moved
    ev += [_data(3, B, 6)]; want += [(1, 0, 0, 1, 0, 0)]           # 5 live, now from B: moved (newest wins)
    ev += [_cnm(3, 6)]; want += [(1, 1, 0, 0, B, M)]               # 6 distance 1: B
    ev += [_data(5, C, 7)]; want += [(1, 0, 0, 0, 0, 0)]           # 7 flow 5 from C at 7
    ev += [_cnm(3, 25)]; want += [(1, 1, 0, 0, B, M)]              # 8 age 25 - 6 = 19: live
    ev += [_cnm(3, 26)]; want += [(1, 0, 1, 0, 0, 0)]              # 9 age 20 = timeout: aged
    ev += [_cnm(5, 26)]; want += [(1, 1, 0, 0, C, M)]              # 10 age 19: live
    ev += [_data(3, A, 30)]; want += [(1, 0, 0, 0, 0, 0)]          # 11 flow 3 was aged (24): not moved
    ev += [_cnm(3, 30)]; want += [(1, 1, 0, 0, A, M)]              # 12 A again
    ev += [_data(7, GROUP, 31)]; want += [(0, 0, 0, 0, 0, 0)]      # 13 group source MAC: rejected, not recorded
    ev += [_cnm(7, 31)]; want += [(1, 0, 0, 0, 0, 0)]              # 14 so flow 7 has no entry
    ev += [_cnm(12, 31)]; want += [(0, 0, 0, 0, 0, 0)]             # 15 flow 12 of 12: forged CNM
    ev += [_data(13, A, 31)]; want += [(0, 0, 0, 0, 0, 0)]         # 16 flow 13: rejected
    ev += [_cnm(13, 31)]; want += [(0, 0, 0, 0, 0, 0)]             # 17 forged
    ev += [_data(9, C, 60)]; want += [(1, 0, 0, 0, 0, 0)]          # 18 flow 9 from C at 60
    ev += [_cnm(9, 3)]; want += [(1, 1, 0, 0, C, M)]               # 19 timer wrapped: age (3 - 60) mod 64 = 7
    ev += [_cnm(9, 15)]; want += [(1, 1, 0, 0, C, M)]              # 20 age 19
    ev += [_cnm(9, 16)]; want += [(1, 0, 1, 0, 0, 0)]              # 21 age 20: aged
    ev += [_cnm(5, 16)]; want += [(1, 1, 0, 0, C, M)]              # 22 flow 5 (7): 73 ticks on, reads as 9 (alias)
    ev += [_my_mac(GROUP), _my_mac(1 << 48 | M2), _my_mac(M2, table=1)]  # a group MAC, 49 bits, table 1: ignored
    ev += [_data(9, B, 17)]; want += [(1, 0, 0, 0, 0, 0)]          # 23 flow 9 aged (21): not moved
    ev += [_cnm(9, 18)]; want += [(1, 1, 0, 0, B, M)]              # 24 still from M
    ev += [_my_mac(M2, index=77)]                                  # any index
    ev += [_cnm(9, 18)]; want += [(1, 1, 0, 0, B, M2)]             # 25 from M2 now
    ev += [_data(1, A, 20)]; want += [(1, 0, 0, 0, 0, 0)]          # 26
    ev += [_data(2, B, 20)]; want += [(1, 0, 0, 0, 0, 0)]          # 27
    ev += [_cnm(1, 20)]; want += [(1, 1, 0, 0, A, M2)]             # 28 distance 2
    ev += [_cnm(2, 20)]; want += [(1, 1, 0, 0, B, M2)]             # 29 distance 2
    ev += [_data(11, C, 21)]; want += [(1, 0, 0, 0, 0, 0)]         # 30 the last flow
    ev += [_cnm(11, 40)]; want += [(1, 1, 0, 0, C, M2)]            # 31 age 19
    ev += [_cnm(10, 40)]; want += [(1, 0, 0, 0, 0, 0)]             # 32 never seen
    # recorded 2 4 5 7 11 18 23 26 27 30 = 10; moved 5; hits 3 6 8 10 12 19 20 22 24 25 28 29 31 = 13;
    # no entry 1 14 32 = 3; aged 9 21 = 2; rejected 13 15 16 17 = 4
    return ev, want, [10, 1, 13, 3, 2, 4]


def test_hand_worked_on_the_rederivation_and_the_golden_model():
    ev, want, counts = hand_worked()
    assert rederive(ev, **P) == (want, counts)
    model = PrevHop(**P)
    out = []
    for e in ev:
        if "ctl" in e:
            model.control(e["ctl"])
        else:
            out.append(model.process(e["item"]))
    assert _fields(out) == want
    assert model.stats() == counts


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_hand_worked(idle, backpressure):
    """Back to back (the distances 1 and 2 read entries written one and two clocks before), and throttled."""
    ev, want, counts = hand_worked()
    stats = {}
    out = run_rtl("flb-prevhop", P, ev, idle=idle, backpressure=backpressure, seed=2, compare=False, stats=stats)
    bad = [(n + 1, w, g) for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts
    assert [o["tag"] for o in out] == [0] * len(want)


# -- banks -------------------------------------------------------------------------------------------------------------

BANKED = dict(n_flows=16384, time_bits=8, timeout=100)


def banked():
    """Four banks of 4,096: flows 5, 4101, 8197 and 12293 share address 5 of every bank. Each from its own MAC, back
    to back; CNMs in another order must each find their own; 4101 moves, and only it; a CNM of flow 16383 (the last
    entry of the last bank) misses, then hits."""
    hops = {5: A, 4101: B, 8197: C, 12293: M}
    ev, want = [_my_mac(M2)], []
    for f, mac in hops.items():
        ev += [_data(f, mac, 10)]; want += [(1, 0, 0, 0, 0, 0)]
    for f in (12293, 5, 8197, 4101):
        ev += [_cnm(f, 11)]; want += [(1, 1, 0, 0, hops[f], M2)]
    ev += [_data(4101, A, 12)]; want += [(1, 0, 0, 1, 0, 0)]       # moved: B to A
    for f in (5, 4101, 8197, 12293):
        ev += [_cnm(f, 12)]; want += [(1, 1, 0, 0, A if f == 4101 else hops[f], M2)]
    ev += [_cnm(16383, 12)]; want += [(1, 0, 0, 0, 0, 0)]
    ev += [_data(16383, C, 13), _cnm(16383, 13)]; want += [(1, 0, 0, 0, 0, 0), (1, 1, 0, 0, C, M2)]
    ev += [_cnm(5, 110)]; want += [(1, 0, 1, 0, 0, 0)]             # age 100: aged
    ev += [_cnm(16383, 112)]; want += [(1, 1, 0, 0, C, M2)]        # age 99
    return ev, want


def test_banked_hand_worked_on_the_rederivation():
    ev, want = banked()
    assert rederive(ev, **BANKED)[0] == want
    assert PrevHopRTL(**BANKED).banks == 4


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_banked_hand_worked(idle, backpressure):
    ev, want = banked()
    out = run_rtl("flb-prevhop", BANKED, ev, idle=idle, backpressure=backpressure, seed=3, compare=False)
    bad = [(n, w, g) for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]


# -- the reset sweep, seen --------------------------------------------------------------------------------------------

def sweep_trace(flows, n_cnms=300):
    """Every flow of ``flows`` recorded (each from its own MAC), then CNMs of every flow at the same tick, a data
    packet of the first half of the flows every third item. Without a reset every CNM hits. The harness resets at a
    random cut past the records (a quarter of the trace or later) and expects the block's documented reset: every
    entry gone, so a flow's CNMs miss until its next data packet, and the switch's MAC kept (the re-recorded flows'
    hits carry it). A sweep skipped, or one that misses a bank, leaves the old entries answering. The switch's MAC is
    written again (the same value) after the records: the harness drains the pipeline before a command, so every
    record is in the table before the cut (items sent after the last command may still be queued at the reset,
    which drops them: a bank-1 record lost that way would let a sweep that skips bank 1 pass)."""
    ev = [_my_mac(M)]
    ev += [_data(f, 0x020000000100 + k, 5) for k, f in enumerate(flows)]
    ev += [_my_mac(M)]
    half = flows[:len(flows) // 2]
    for k in range(n_cnms):
        if k % 3 == 0:
            ev.append(_data(half[(k // 3) % len(half)], A, 5, k))
        else:
            ev.append(_cnm(flows[k % len(flows)], 5, k))
    return ev


def test_sweep_trace_hits_without_a_reset():
    """The trace's premise: every CNM hits when nothing resets (so a miss after the reset is the sweep's doing)."""
    for params, flows in ((P, list(range(12))), (dict(n_flows=5000, time_bits=6, timeout=20),
                                                  [0, 1, 2, 4095, 4096, 4097, 4999, 3000])):
        got = rederive(sweep_trace(flows), **params)[0]
        cnm_out = [g for g, e in zip(got, [e for e in sweep_trace(flows) if "item" in e]) if e["item"]["cnm"]]
        assert cnm_out and all(g[1] == 1 for g in cnm_out)


@pytest.mark.parametrize("params, flows", [
    (P, list(range(12))),
    # two banks (4,096 + 904): the sweep must clear both, in the same 4,096 clocks
    (dict(n_flows=5000, time_bits=6, timeout=20), [0, 1, 2, 4095, 4096, 4097, 4999, 3000]),
], ids=["one-bank", "two-banks"])
def test_rtl_reset_sweeps_every_entry(params, flows):
    for seed in (1, 2):
        run_rtl("flb-prevhop", params, sweep_trace(flows), testcase="reset_state", seed=seed, idle=0.1,
                backpressure=0.2)


# -- signature and parameters ------------------------------------------------------------------------------------------

def test_signature():
    dut = PrevHopRTL(**P)
    dut._MustUse__silence = True
    members = dut.signature.members
    assert set(members) == {"i", "o", "ctl", "stats"}
    item = members["i"].signature.members["payload"].shape
    res = members["o"].signature.members["payload"].shape
    # flow 4 bits (12 flows), 48-bit MACs, 6-bit ticks
    assert [(n, f.width) for n, f in item] == [("kind", 3), ("cnm", 1), ("flow", 4), ("mac", 48), ("now", 6),
                                               ("tag", 16)]
    assert [(n, f.width) for n, f in res] == [("kind", 3), ("cnm", 1), ("flow", 4), ("tag", 16), ("ok", 1),
                                              ("hit", 1), ("aged", 1), ("moved", 1), ("dst_mac", 48),
                                              ("src_mac", 48)]
    assert members["stats"].shape == 6 * 32
    assert dut.latency == 5


def test_memory_at_the_defaults():
    """65,536 entries of 1 + 16 + 48 = 65 bits: 4,259,840 bits (520 KiB) in 16 banks of 4,096."""
    dut = PrevHopRTL()
    dut._MustUse__silence = True
    assert dut.memory_bits == 4_259_840 and dut.banks == 16


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_flows=1), ValueError), (dict(n_flows=(1 << 20) + 1), ValueError), (dict(time_bits=3), ValueError),
    (dict(time_bits=33), ValueError), (dict(timeout=0), ValueError), (dict(time_bits=8, timeout=256), ValueError),
    (dict(n_flows=True), TypeError), (dict(timeout=4.0), TypeError),
])
def test_bad_parameters(kwargs, exc):
    for cls in (PrevHopRTL, PrevHop):
        with pytest.raises(exc):
            cls(**kwargs)


@pytest.mark.parametrize("args, words", [
    (["verilog", "flb-prevhop", "--param", "timeout=0"], ("timeout", "0")),
    (["verilog", "flb-prevhop", "--param", "time_bits=8", "--param", "timeout=300"], ("timeout", "300")),
    (["verilog", "flb-prevhop", "--param", "n_flows=abc"], ("n_flows", "abc")),
    (["trace", "flb-prevhop", "--param", "macs=3"], ("macs",)),
])
def test_cli_bad_input_is_one_line(args, words, capsys, tmp_path):
    from lbpipe.cli import main
    assert main(args + ["-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(w in err for w in words), err


def test_cli_replay_rejects_a_mac_too_wide(capsys, tmp_path):
    from lbpipe.cli import main
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item": {"cnm": 0, "flow": 1, "mac": 281474976710656, "now": 0}}\n')
    assert main(["replay", "flb-prevhop", str(bad), "--engine", "golden", "-o", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("lbpipe:")]     # beside the progress line
    assert len(lines) == 1 and "mac" in lines[0] and "48 bits" in lines[0] and "Traceback" not in err, err


# -- random traces -----------------------------------------------------------------------------------------------------

PARAMS = [P, dict(n_flows=64, time_bits=8, timeout=100), dict(n_flows=5000, time_bits=4, timeout=15)]


@pytest.mark.parametrize("seed", range(12))
def test_golden_matches_the_rederivation(seed):
    params = PARAMS[seed % 3]
    ev = prevhop_trace(seed, 2000, **params)
    model = PrevHop(**params)
    out = run_golden("flb-prevhop", params, ev)
    want, counts = rederive(ev, **params)
    assert _fields(out) == want
    for e in ev:
        (model.control(e["ctl"]) if "ctl" in e else model.process(e["item"]))
    assert model.stats() == counts


def test_trace_exercises_every_outcome():
    """The random trace reaches what the hand-worked case does: hits, both kinds of miss, moves, rejections, the
    timer's wrap between a record and its CNM, and CNMs right behind their flow's packet."""
    ev = prevhop_trace(3, 2000, **PARAMS[1])
    got, n = rederive(ev, **PARAMS[1])
    assert n[0] > 300 and n[1] > 10 and n[2] > 200 and n[3] > 20 and n[4] > 20 and n[5] > 50, n
    items = [e["item"] for e in ev if "item" in e]
    last = {}
    wraps = close = 0
    for it in items:
        if it["cnm"] and it["flow"] in last:
            wraps += it["now"] < last[it["flow"]]
        if not it["cnm"]:
            last[it["flow"]] = it["now"]
    close = sum(1 for a, b in zip(items, items[1:]) if not a["cnm"] and b["cnm"] and a["flow"] == b["flow"])
    assert wraps > 10 and close > 20, (wraps, close)


@pytest.mark.parametrize("params", PARAMS, ids=["P", "p64", "banks2"])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_against_the_rederivation(params, idle, backpressure):
    ev = prevhop_trace(11, 600, **params)
    stats = {}
    out = run_rtl("flb-prevhop", params, ev, idle=idle, backpressure=backpressure, seed=5, compare=False, stats=stats)
    want, counts = rederive(ev, **params)
    bad = [n for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:5]
    assert stats["counters"] == counts


def test_rtl_one_item_per_clock():
    """Data packets and CNMs interleaved back to back, CNMs one and two clocks behind their flow's packet."""
    ev = [_my_mac(M)]
    for n in range(300):
        f = (n // 3) % 12
        ev.append(_cnm(f, n % 64, n) if n % 3 else _data(f, 0x020000000000 + n, n % 64, n))
    stats = {}
    out = run_rtl("flb-prevhop", P, ev, compare=False, stats=stats)
    assert len(out) == 300 and stats["items_per_clock"] == 1.0
    assert _fields(out) == rederive(ev, **P)[0]


@pytest.mark.regression
@pytest.mark.skipif(not FULL, reason="LBPIPE_FULL=1")
@pytest.mark.parametrize("seed", range(3))
def test_rtl_long_random(seed):
    rng = random.Random(seed)
    tb = rng.randrange(4, 17)
    params = dict(n_flows=rng.choice([rng.randrange(2, 300), rng.randrange(4097, 9000)]), time_bits=tb,
                  timeout=rng.randrange(1, 1 << tb))
    ev = prevhop_trace(seed, 3000, **params)
    out = run_rtl("flb-prevhop", params, ev, idle=0.2, backpressure=0.3, seed=seed, compare=False)
    assert _fields(out) == rederive(ev, **params)[0]
