"""FLB source-side isolation table (flb-isolate): signature and parameters, a hand-worked sequence (isolation, the
number of isolation paths from the converged rates, which path each flow takes, the table full, stale and forged
CNMs, a refresh changing n, timeouts across the timer's wrap, a CNM and a packet of one flow in the same clock) on the
re-derivation, the golden model and the RTL, with the counters; a second one with destinations interleaved in the
table (a flow's path from its rank among its destination's entries); a third for congestion points (a point's flows
at its latest n: 4 flows of one port, 1 path; 2 ports x 2 flows, 2 paths); the golden model and the RTL (idle
input, back-pressure, CNM storms) against an independent re-derivation written here; flb-cnm's golden model feeding
two flb-isolate golden models (and one RTL) on random scenarios against an end-to-end re-derivation.

Expected values come from the hand-worked comments or from :func:`rederive` below, written from the paper's
sections 3.2 and 3.3 and the datasheet's choices, never from lbpipe.sim.flb."""

import os

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.flb.isolate import Isolate as IsolateRTL
from lbpipe.sim.flb.isolate import isolate_trace
from test_flb_cnm import rederive as rederive_cnm

FULL = os.environ.get("LBPIPE_FULL") == "1"

P = dict(n_flows=12, n_dests=3, n_paths=4, n_slots=3, time_bits=6, timeout=20, n_ports=3)


def _pkt(flow, dest, now):
    return {"item": {"flow": flow, "dest": dest, "now": now, "tag": 0}}


def _cnm(flow, dest, n, cong, now, cp=0):
    return {"upd": {"flow": flow, "dest": dest, "cp": cp, "n": n, "cong": cong, "now": now}}


# -- the independent re-derivation -------------------------------------------------------------------------------------

def rederive(events, *, n_flows, n_dests, n_paths, n_slots, time_bits, timeout, n_ports=8):
    """Sections 3.2 and 3.3 per event, with ``table = {slot: [flow, dest, point, last]}`` and ``latest = {(dest,
    cp): n}``, the n last reported for each congestion point: an entry whose last packet or CNM lies ``timeout``
    ticks or more behind the event's tick (mod ``2**time_bits``) leaves first; a congestion CNM (not forged)
    records its point's n, then takes the lowest free slot (or renews its own entry's point and time), a
    non-congestion CNM removes the flow's entry; per destination, ``k`` = the converged rates summed (a flow of point
    q at C/latest[q]; counted in C/2520) over C, rounded up, at most ``n_paths - 1``, the top ``k`` paths; an
    isolated flow takes path ``n_paths - 1 - rank mod k``, its rank the count of its destination's entries in lower
    slots (the datasheet's "Which paths"). Returns ``[(ok, isolated, path, mask)]`` per packet and the counters
    ``[isolated packets, congestion, release, timeouts, full, forged, stale, rejected]``."""
    wrap = 2 ** time_bits
    table, out, cnt, latest = {}, [], [0] * 8, {}
    for e in events:
        if "ctl" in e:
            continue
        ev = e.get("upd") or e["item"]
        t = ev["now"]
        for s in [s for s, ent in table.items() if (t - ent[3] + wrap) % wrap >= timeout]:
            del table[s]
            cnt[3] += 1
        where = {ent[0]: s for s, ent in table.items()}
        bad = ev["flow"] >= n_flows or ev["dest"] >= n_dests
        if "upd" in e:
            point = (ev["dest"], ev.get("cp", 0))
            if bad or point[1] >= n_ports or (ev["cong"] and ev["n"] not in range(1, 9)):
                cnt[5] += 1
                continue
            if ev["cong"]:
                latest[point] = ev["n"]
            s = where.get(ev["flow"])
            same = s is not None and table[s][1] == ev["dest"]
            if not ev["cong"]:
                if same:
                    del table[s]
                    cnt[2] += 1
                else:
                    cnt[6] += 1
            elif same:
                table[s][2:] = [point, t]
                cnt[1] += 1
            elif s is not None:
                cnt[6] += 1
            elif len(table) < n_slots:
                table[min(set(range(n_slots)) - set(table))] = [ev["flow"], ev["dest"], point, t]
                cnt[1] += 1
            else:
                cnt[4] += 1
            continue
        if bad:
            out.append((0, 0, 0, 0))
            cnt[7] += 1
            continue
        units = sum(2520 // latest[ent[2]] for ent in table.values() if ent[1] == ev["dest"])
        k = min(n_paths - 1, (units + 2519) // 2520)
        mask = int("1" * k + "0" * (n_paths - k), 2)
        s = where.get(ev["flow"])
        if s is not None and table[s][1] == ev["dest"]:
            table[s][3] = t
            rank = len([u for u, ent in table.items() if u < s and ent[1] == ev["dest"]])
            out.append((1, 1, n_paths - 1 - rank % k, mask))
            cnt[0] += 1
        else:
            out.append((1, 0, 0, mask))
    return out, cnt


def _fields(outputs):
    return [(o["ok"], o["isolated"], o["path"], o["mask"]) for o in outputs]


# -- the hand-worked sequence ------------------------------------------------------------------------------------------

def hand_worked():
    """Events and expected (ok, isolated, path, mask) per packet, worked by hand (P: 4 paths, so the isolation
    paths are 3, then 3 and 2, then 3, 2, 1; 3 slots; 6-bit timer, timeout 20; 3 congestion points per
    destination, point 0 unless a CNM says otherwise); and the expected counters."""
    ev, want = [], []
    ev += [_pkt(1, 0, 0)]; want += [(1, 0, 0, 0)]           # 1 nothing isolated
    ev += [_cnm(1, 0, 2, 1, 1)]                             # 2 f1 -> slot 0, C/2
    ev += [_pkt(1, 0, 2)]; want += [(1, 1, 3, 0b1000)]      # 3 k = ceil(1/2) = 1: path 3
    ev += [_pkt(2, 0, 3)]; want += [(1, 0, 0, 0b1000)]      # 4 f2 not isolated, sees the set
    ev += [_cnm(2, 0, 2, 1, 3)]                             # 5 f2 -> slot 1, point (0, 0) n 2: 2/2 = 1
    ev += [_pkt(2, 0, 4)]; want += [(1, 1, 3, 0b1000)]      # 6 k 1: 3 - 1 mod 1 = 3
    ev += [_cnm(3, 0, 4, 1, 5, cp=1)]                       # 7 f3 -> slot 2, point (0, 1): 1 + 1/4: k 2
    ev += [_pkt(3, 0, 5)]; want += [(1, 1, 3, 0b1100)]      # 8 3 - 2 mod 2 = 3
    ev += [_pkt(2, 0, 6)]; want += [(1, 1, 2, 0b1100)]      # 9 3 - 1 mod 2 = 2
    ev += [_cnm(4, 1, 1, 1, 6)]                             # 10 table full: counted
    ev += [{"ctl": {"table": 0, "index": 1, "data": 5}}]    # ignored
    ev += [_pkt(4, 1, 7)]; want += [(1, 0, 0, 0)]           # 11 d1: nothing
    ev += [_cnm(1, 1, 0, 0, 7)]                             # 12 release naming d1, f1 is d0's: stale
    ev += [_cnm(1, 0, 5, 0, 8)]                             # 13 release f1 (n ignored): 0.75, k 1
    ev += [_pkt(1, 0, 8)]; want += [(1, 0, 0, 0b1000)]      # 14
    ev += [_cnm(4, 1, 1, 1, 9)]                             # 15 f4 -> slot 0 (d1), C
    ev += [_pkt(4, 1, 9)]; want += [(1, 1, 3, 0b1000)]      # 16 d1: k 1
    ev += [_cnm(3, 0, 1, 1, 10, cp=1)]                      # 17 refresh f3: point (0, 1) n 1: 1/2 + 1 = 1.5, k 2
    ev += [_pkt(2, 0, 10)]; want += [(1, 1, 3, 0b1100)]     # 18 f2 slot 1, d0's first (slot 0 is d1's): rank 0
    ev += [_cnm(5, 0, 0, 1, 10), _cnm(5, 3, 2, 1, 10), _cnm(5, 0, 9, 1, 10), _cnm(13, 0, 1, 1, 10),
           _cnm(2, 0, 8, 1, 10, cp=3)]                      # 19 forged x5 (the last: point 3 of 3; f2 keeps n 2)
    ev += [_pkt(2, 3, 11)]; want += [(0, 0, 0, 0)]          # 20 dest 3 of 3: rejected
    ev += [_cnm(2, 2, 2, 1, 11)]                            # 21 congestion for f2 naming d2: stale
    ev += [_pkt(2, 0, 29)]; want += [(1, 1, 3, 0b1100)]     # 22 f4 (last 9) ages out; f3 (10) and f2 (rank 0) stay
    ev += [_pkt(4, 1, 29)]; want += [(1, 0, 0, 0)]          # 23 f4 gone
    ev += [_pkt(1, 0, 30)]; want += [(1, 0, 0, 0b1000)]     # 24 f3 ages out: f2 alone, k 1
    ev += [_pkt(2, 0, 48)]; want += [(1, 1, 3, 0b1000)]     # 25 f2 age 19
    ev += [_pkt(2, 0, 3)]; want += [(1, 1, 3, 0b1000)]      # 26 across the wrap: (3 - 48) mod 64 = 19
    ev += [_pkt(1, 0, 23)]; want += [(1, 0, 0, 0)]          # 27 f2 age 20: out
    ev += [_cnm(6, 2, 3, 1, 23), _pkt(6, 2, 23)]; want += [(1, 1, 3, 0b1000)]   # 28 same clock: CNM first
    ev += [_cnm(6, 2, 3, 0, 24), _pkt(6, 2, 24)]; want += [(1, 0, 0, 0)]        # 29 released in the same clock
    ev += [_cnm(7, 1, 1, 1, 25), _cnm(8, 1, 1, 1, 25, cp=1), _cnm(9, 1, 1, 1, 25, cp=2)]   # 30 3 points of d1, C each
    ev += [_pkt(9, 1, 26)]; want += [(1, 1, 1, 0b1110)]     # 31 k 3: f9 slot 2, rank 2: 3 - 2 mod 3 = 1
    ev += [_pkt(8, 1, 26)]; want += [(1, 1, 2, 0b1110)]     # 32 f8 slot 1, rank 1: 2
    # isolated 3 6 8 9 16 18 22 25 26 28 31 32; congestion 2 5 7 15 17 28 30x3; release 13 29; timeouts 22 24 27;
    # full 10; forged 19 x5; stale 12 21; rejected 20
    return ev, want, [12, 9, 2, 3, 1, 5, 2, 1]


def test_hand_worked_on_the_rederivation_and_the_golden_model():
    ev, want, counts = hand_worked()
    got, n = rederive(ev, **P)
    assert got == want and n == counts
    out = run_golden("flb-isolate", P, ev)
    assert _fields(out) == want


def test_hand_worked_golden_counters():
    from lbpipe.sim.flb.isolate import Isolate
    ev, _, counts = hand_worked()
    model = Isolate(**P)
    for e in ev:
        if "upd" in e:
            model.process_stream("upd", e["upd"])
        elif "item" in e:
            model.process(e["item"])
    assert model.stats() == counts


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.4, 0.5)])
def test_rtl_hand_worked(idle, backpressure):
    """Back to back (no idle): consecutive events of one flow go through the table in turn."""
    ev, want, counts = hand_worked()
    stats = {}
    out = run_rtl("flb-isolate", P, ev, idle=idle, backpressure=backpressure, seed=2, compare=False, stats=stats)
    bad = [(n, w, g) for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts


# -- interleaved destinations: a flow's path from its rank among its destination's entries ---------------------------

Q = dict(n_flows=16, n_dests=3, n_paths=8, n_slots=6, time_bits=8, timeout=100, n_ports=4)


def interleaved():
    """Destinations' entries interleaved in the table (Q: 8 paths, so isolation paths 7, 7-6, 7-6-5; 6 slots;
    timeout 100). A flow's rank is the count of its destination's entries in lower slots; its path 7 - rank mod k.
    The old rule (7 - slot mod k) differs at packets 2, 4, 5, 9, 11, 13, 14 and 18. Every flow is alone at its
    congestion point (d0: f1 point 0, f3 1, f5 2, f7 3; d1: f2 0, f6 1; d2: f4 0), so its n is its own."""
    ev, want = [], []
    ev += [_cnm(1, 0, 1, 1, 0), _cnm(2, 1, 1, 1, 0), _cnm(3, 0, 1, 1, 0, cp=1)]   # slots: 0 f1 d0, 1 f2 d1, 2 f3 d0
    ev += [_pkt(1, 0, 1)]; want += [(1, 1, 7, 0b11000000)]  # 1 d0: 1 + 1 = 2, k 2; f1 rank 0: 7
    ev += [_pkt(3, 0, 1)]; want += [(1, 1, 6, 0b11000000)]  # 2 f3 slot 2, rank 1: 6 (slot 2 mod 2 would give 7)
    ev += [_pkt(2, 1, 1)]; want += [(1, 1, 7, 0b10000000)]  # 3 d1: k 1; f2 rank 0: 7
    ev += [_cnm(4, 2, 2, 1, 2), _cnm(5, 0, 2, 1, 2, cp=2), _cnm(6, 1, 1, 1, 2, cp=1)]  # 3 f4 d2, 4 f5 d0 (C/2), 5 f6 d1
    ev += [_pkt(5, 0, 3)]; want += [(1, 1, 5, 0b11100000)]  # 4 d0: 1 + 1 + 1/2, k 3; f5 slot 4, rank 2: 5
    ev += [_pkt(3, 0, 3)]; want += [(1, 1, 6, 0b11100000)]  # 5 f3 rank 1: 6
    ev += [_pkt(6, 1, 3)]; want += [(1, 1, 6, 0b11000000)]  # 6 d1: 1 + 1, k 2; f6 slot 5, rank 1: 6
    ev += [_pkt(4, 2, 3)]; want += [(1, 1, 7, 0b10000000)]  # 7 d2: 1/2, k 1: 7
    ev += [_cnm(1, 0, 1, 0, 4)]                             # f1 released: slot 0 free
    ev += [_pkt(3, 0, 4)]; want += [(1, 1, 7, 0b11000000)]  # 8 d0: 1 + 1/2, k 2; f3 now rank 0: 7
    ev += [_pkt(5, 0, 4)]; want += [(1, 1, 6, 0b11000000)]  # 9 f5 rank 1: 6
    ev += [_cnm(7, 0, 1, 1, 5, cp=3)]                       # f7 d0 -> slot 0
    ev += [_pkt(7, 0, 5)]; want += [(1, 1, 7, 0b11100000)]  # 10 d0: 1 + 1 + 1/2, k 3; f7 rank 0: 7
    ev += [_pkt(5, 0, 5)]; want += [(1, 1, 5, 0b11100000)]  # 11 f5 rank 2: 5
    ev += [_cnm(7, 0, 4, 1, 6, cp=3)]                       # f7 renewed at n 4: 1/4 + 1 + 1/2 = 1.75, k 2
    ev += [_pkt(5, 0, 6)]; want += [(1, 1, 7, 0b11000000)]  # 12 f5 rank 2, 2 mod 2 = 0: 7
    ev += [_pkt(3, 0, 6)]; want += [(1, 1, 6, 0b11000000)]  # 13 f3 rank 1: 6
    ev += [_pkt(3, 0, 60)]; want += [(1, 1, 6, 0b11000000)]     # 14 nothing aged (f2 last 1, f7 last 6)
    ev += [_pkt(5, 0, 60)]; want += [(1, 1, 7, 0b11000000)]     # 15
    ev += [_pkt(6, 1, 60)]; want += [(1, 1, 6, 0b11000000)]     # 16 d1: f2 (slot 1), f6 rank 1
    ev += [_pkt(4, 2, 60)]; want += [(1, 1, 7, 0b10000000)]     # 17
    ev += [_pkt(5, 0, 110)]; want += [(1, 1, 6, 0b11000000)]    # 18 f2 (109) and f7 (104) age out: d0 f3, f5:
    ev += [_pkt(6, 1, 110)]; want += [(1, 1, 7, 0b10000000)]    # 19   1.5, k 2, f5 rank 1: 6; d1 f6 alone: 7
    # isolated: all 19; congestion: 8 (7 new, 1 renewal); release 1; timeouts 2
    return ev, want, [19, 8, 1, 2, 0, 0, 0, 0]


def test_interleaved_on_the_rederivation_and_the_golden_model():
    ev, want, counts = interleaved()
    got, n = rederive(ev, **Q)
    assert got == want and n == counts
    assert _fields(run_golden("flb-isolate", Q, ev)) == want


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.4, 0.5)])
def test_rtl_interleaved(idle, backpressure):
    ev, want, counts = interleaved()
    stats = {}
    out = run_rtl("flb-isolate", Q, ev, idle=idle, backpressure=backpressure, seed=3, compare=False, stats=stats)
    bad = [(n, w, g) for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts


# -- congestion points: a point's flows at its latest n (issue 17's composition defect) ------------------------------

R = dict(n_flows=16, n_dests=2, n_paths=8, n_slots=6, time_bits=8, timeout=200, n_ports=3)


def points():
    """The converged rate per congestion point (R: 8 paths, so isolation paths 7, 7-6, 7-6-5; 6 slots; 3 points per
    destination, the 2-bit field can name a fourth, forged; no timeouts). Section 3.3: each of a point's n flows
    converges to C/n, so the m flows of one point here need m/n paths; n is the point's latest (every congestion
    CNM of the point sets it for all its flows). A release removes its flow only. The old rule (each flow at the n
    it joined with) gives the k in brackets."""
    ev, want = [], []
    ev += [_cnm(1, 0, 1, 1, 1), _cnm(2, 0, 2, 1, 1), _cnm(3, 0, 3, 1, 1), _cnm(4, 0, 4, 1, 1)]  # flb-cnm's 4 CNMs
    ev += [_pkt(1, 0, 2)]; want += [(1, 1, 7, 0b10000000)]  # 1 d0 point 0: 4 flows, n 4: 4/4, k 1 [1+1/2+1/3+1/4: 3]
    ev += [_pkt(4, 0, 2)]; want += [(1, 1, 7, 0b10000000)]  # 2 f4 slot 3, rank 3 mod 1: 7
    ev += [_cnm(3, 0, 4, 0, 3), _cnm(4, 0, 3, 0, 3)]        # releases of f3, f4: f1, f2 keep n 4
    ev += [_pkt(2, 0, 4)]; want += [(1, 1, 7, 0b10000000)]  # 3 2/4: k 1 [1 + 1/2: 2]
    ev += [_cnm(5, 1, 1, 1, 5), _cnm(6, 1, 2, 1, 5), _cnm(7, 1, 1, 1, 5, cp=1), _cnm(8, 1, 2, 1, 5, cp=1)]
    #                                                         slots 2 f5, 3 f6 (d1 point 0), 4 f7, 5 f8 (d1 point 1)
    ev += [_pkt(8, 1, 6)]; want += [(1, 1, 6, 0b11000000)]  # 4 d1: 2/2 + 2/2, k 2 [3]; f8 rank 3 mod 2: 6
    ev += [_pkt(5, 1, 6)]; want += [(1, 1, 7, 0b11000000)]  # 5 f5 rank 0: 7
    ev += [_pkt(1, 0, 6)]; want += [(1, 1, 7, 0b10000000)]  # 6 d0's point 0 is not d1's: still 2/4, k 1
    ev += [_cnm(7, 1, 1, 1, 7, cp=1)]                       # f7 renewed, point (1, 1) n 1: f7 and f8 at C
    ev += [_pkt(7, 1, 8)]; want += [(1, 1, 5, 0b11100000)]  # 7 1 + 2 = 3, k 3; f7 rank 2: 5
    ev += [_cnm(9, 1, 8, 1, 9, cp=1)]                       # table full (counted); point (1, 1) n 8 all the same
    ev += [_pkt(7, 1, 10)]; want += [(1, 1, 7, 0b11000000)]  # 8 1 + 2/8 = 1.25, k 2 [3]; rank 2 mod 2: 7
    ev += [_cnm(6, 1, 1, 1, 11, cp=2)]                      # f6 renewed at point (1, 2), n 1: it leaves point 0
    ev += [_cnm(10, 1, 4, 1, 11)]                           # full; point (1, 0) n 4: f5 alone now
    ev += [_pkt(6, 1, 12)]; want += [(1, 1, 6, 0b11000000)]  # 9 1/4 + 1 + 2/8 = 1.5, k 2; f6 rank 1: 6
    ev += [_cnm(7, 1, 2, 0, 13, cp=1)]                      # f7 released (n 2: the count before); f8 keeps n 8
    ev += [_pkt(8, 1, 14)]; want += [(1, 1, 7, 0b11000000)]  # 10 1/4 + 1 + 1/8, k 2 (n 1 after: 2.25, k 3); rank 2
    ev += [_cnm(1, 1, 2, 1, 15, cp=2)]                      # stale (f1 is d0's); point (1, 2) n 2 all the same
    ev += [_pkt(8, 1, 15)]; want += [(1, 1, 7, 0b10000000)]  # 11 1/4 + 1/2 + 1/8, k 1
    ev += [_cnm(11, 0, 1, 1, 15, cp=3), _cnm(1, 0, 1, 0, 15, cp=3), _cnm(2, 0, 1, 1, 15, cp=3)]   # forged x3
    ev += [_pkt(1, 0, 16)]; want += [(1, 1, 7, 0b10000000)]  # 12 nothing changed: f1 isolated, 2/4, k 1
    # isolated: all 12; congestion 4 + 4 + 2 renewals; release 3; full 2; forged 3; stale 1
    return ev, want, [12, 10, 3, 0, 2, 3, 1, 0]


def test_points_on_the_rederivation_and_the_golden_model():
    ev, want, counts = points()
    got, n = rederive(ev, **R)
    assert got == want and n == counts
    assert _fields(run_golden("flb-isolate", R, ev)) == want


@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.4, 0.5)])
def test_rtl_points(idle, backpressure):
    ev, want, counts = points()
    stats = {}
    out = run_rtl("flb-isolate", R, ev, idle=idle, backpressure=backpressure, seed=4, compare=False, stats=stats)
    bad = [(n, w, g) for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts


# -- composed: flb-cnm (destination edge) -> flb-isolate (each source edge) ------------------------------------------

CP = dict(n_ports=3, n_slots=4, n_edges=2, flow_bits=5, amount_bits=5, q_bits=8, threshold=40)
CI = dict(n_flows=32, n_dests=2, n_paths=6, n_slots=8, time_bits=10, timeout=1000, n_ports=3)
DEST = 1            # the destination edge switch's id at the sources (a packet toward edge 0 is never isolated)


def composed_scenario(seed, n_events):
    """Queue events at the destination edge (each flow leaves by one egress port; ports fill and drain in turn)
    and packets at the two source edges (flows 0, 2, 4, ... of source 0; 1, 3, 5, ... of source 1), ``now``
    advancing one tick per 8 events (no timeouts within ``n_events`` <= 4,000)."""
    import random
    rng = random.Random(seed)
    port = {f: rng.randrange(CP["n_ports"]) for f in range(14)}
    fill = [rng.random() < 0.5 for _ in range(CP["n_ports"])]
    ev = []
    for t in range(n_events):
        now = t // 8
        if rng.random() < 0.05:
            p = rng.randrange(CP["n_ports"])
            fill[p] = not fill[p]
        if rng.random() < 0.55:
            f = rng.randrange(14)
            p = port[f]
            deq = int(rng.random() < (0.35 if fill[p] else 0.7))
            ev.append(("queue", {"port": p, "deq": deq, "amount": rng.randrange(32), "flow": f, "src": f % 2}, now))
        else:
            f = rng.randrange(14)
            ev.append(("packet", f % 2, {"flow": f, "dest": DEST if rng.random() < 0.9 else 0, "now": now}))
    return ev


def compose_golden(scenario):
    """The golden models wired: each CNM of flb-cnm goes, as an ``upd`` item, to the flb-isolate of its
    ``cnm_src``. Returns the per-packet ``(source, ok, isolated, path, mask)`` and each source's ``upd``/``item``
    trace (for the RTL)."""
    from lbpipe.sim.flb.cnm import Cnm
    from lbpipe.sim.flb.isolate import Isolate
    cnm, iso = Cnm(**CP), [Isolate(**CI), Isolate(**CI)]
    out, traces = [], [[], []]
    for e in scenario:
        if e[0] == "queue":
            o = cnm.process(e[1])
            if o["cnm"]:
                upd = {"flow": o["cnm_flow"], "dest": DEST, "cp": o["cnm_cp"], "n": o["cnm_n"],
                       "cong": o["cnm_cong"], "now": e[2]}
                iso[o["cnm_src"]].process_stream("upd", upd)
                traces[o["cnm_src"]].append({"upd": upd})
        else:
            r = iso[e[1]].process(e[2])
            out.append((e[1], r["ok"], r["isolated"], r["path"], r["mask"]))
            traces[e[1]].append({"item": dict(e[2], tag=0)})
    assert iso[0].stats()[3] == iso[1].stats()[3] == 0        # no timeouts in these scenarios
    return out, traces


def rederive_composed(scenario):
    """Sections 3.2 and 3.3 end to end. The destination's CNMs (congestion, release and refresh) come from
    tests/test_flb_cnm.py's re-derivation run on the queue events alone; each source keeps the n last told per
    port and its isolated flows in slot order (lowest free; none free: not isolated; a congestion CNM for a flow
    it holds renews it at the CNM's port); a packet toward the destination sees ``k`` = the ceiling of the sum over
    its source's isolated flows of 1/(n of the flow's port), at most ``n_paths - 1``, and an isolated flow takes
    ``n_paths - 1 - rank mod k``. Also returns, per packet, the k of the old rule (each flow at the n it was told
    when it joined) and the number of ports among the source's isolated flows."""
    from fractions import Fraction
    rows = iter(rederive_cnm([{"item": e[1]} for e in scenario if e[0] == "queue"], **CP)[0])
    told = [{}, {}]                             # per source: port -> n last told
    table = [[None] * CI["n_slots"] for _ in range(2)]    # per source: slot -> (flow, port, n at join)
    out, old, ports = [], [], []
    last = CI["n_paths"] - 1
    for e in scenario:
        if e[0] == "queue":
            _, _, cnm, cong, flow, src, n, p = next(rows)
            if cnm and cong:
                told[src][p] = n
                mine = table[src]
                at = [j for j, s in enumerate(mine) if s and s[0] == flow]
                if at:
                    mine[at[0]] = (flow, p, mine[at[0]][2])
                elif None in mine:
                    mine[mine.index(None)] = (flow, p, n)
            elif cnm:
                table[src] = [None if s and s[0] == flow else s for s in table[src]]
            continue
        src, it = e[1], e[2]
        mine = table[src]
        if it["dest"] != DEST:
            out.append((src, 1, 0, 0, 0))
            old.append(0)
            ports.append(0)
            continue
        live = [s for s in mine if s]
        rate = sum((Fraction(1, told[src][s[1]]) for s in live), Fraction(0))
        k = min(last, -(-rate.numerator // rate.denominator))
        was = sum((Fraction(1, s[2]) for s in live), Fraction(0))
        old.append(min(last, -(-was.numerator // was.denominator)))
        ports.append(len({s[1] for s in live}))
        mask = sum(1 << (last - t) for t in range(k))
        at = [j for j, s in enumerate(mine) if s and s[0] == it["flow"]]
        if at:
            rank = sum(1 for s in mine[:at[0]] if s)
            out.append((src, 1, 1, last - rank % k, mask))
        else:
            out.append((src, 1, 0, 0, mask))
    return out, old, ports


@pytest.mark.parametrize("seed", range(4))
def test_composed_golden_matches_the_rederivation(seed):
    """flb-cnm's golden model feeding two flb-isolate golden models, against the end-to-end re-derivation; the
    scenario reaches the defect's case (the old rule's k differs) and k stays within the number of congested ports
    among the source's isolated flows (a port's flows share one link: at most one path each)."""
    sc = composed_scenario(seed, 3000)
    got, _ = compose_golden(sc)
    want, old, ports = rederive_composed(sc)
    assert got == want
    ks = [bin(w[4]).count("1") for w in want]
    assert all(k <= p for k, p in zip(ks, ports))
    worse = sum(1 for k, o in zip(ks, old) if o > k)
    assert max(ks) >= 2 and worse > 20, (max(ks), worse)


def test_rtl_composed():
    """The CNMs and packets source 0 sees in a composed scenario, through the flb-isolate RTL (back-pressure and
    idle input), against the end-to-end re-derivation."""
    sc = composed_scenario(7, 2000)
    _, traces = compose_golden(sc)
    want = [w[1:] for w in rederive_composed(sc)[0] if w[0] == 0]
    out = run_rtl("flb-isolate", CI, traces[0], idle=0.3, backpressure=0.4, seed=6, compare=False)
    got = _fields(out)
    bad = [n for n, (w, g) in enumerate(zip(want, got)) if w != g]
    assert len(got) == len(want) and not bad, bad[:4]


# -- the review's stale-n scenarios and the settled truth (refresh CNMs, issue 17) -----------------------------------

RP = dict(n_ports=4, n_slots=4, n_edges=2, flow_bits=6, amount_bits=6, q_bits=8, threshold=40)   # port 3: quiet
RI = dict(n_flows=64, n_dests=2, n_paths=8, n_slots=8, time_bits=10, timeout=1000, n_ports=4)
SETTLE = RP["n_ports"] * (RP["n_slots"] - 1)    # the datasheet's bound: events without a CNM of their own


class Wired:
    """flb-cnm's golden model (destination edge 1) feeding two flb-isolate golden models (sources 0 and 1)."""

    def __init__(self):
        from lbpipe.sim.flb.cnm import Cnm
        from lbpipe.sim.flb.isolate import Isolate
        self.cnm, self.iso = Cnm(**RP), [Isolate(**RI), Isolate(**RI)]

    def q(self, port, deq, amount, flow=0, src=0):
        o = self.cnm.process({"port": port, "deq": deq, "amount": amount, "flow": flow, "src": src})
        if o["cnm"]:
            self.iso[o["cnm_src"]].process_stream("upd", {"flow": o["cnm_flow"], "dest": 1, "cp": o["cnm_cp"],
                                                         "n": o["cnm_n"], "cong": o["cnm_cong"], "now": 0})

    def settle(self):
        """Events with nothing to notify (a dequeue of 0 on the quiet port 3): the refreshes go out."""
        for _ in range(SETTLE):
            self.q(3, 1, 0)

    def k(self, src):
        return bin(self.iso[src].process({"flow": 63, "dest": 1, "now": 0})["mask"]).count("1")


def test_review_stale_low_other_sources():
    """Per port p of 0..2: source 1's flows X1..X3 join (n 1, 2, 3), then source 0's A_p (n 4); three events below K
    release X1..X3; the port rises and source 1's Y joins. Each port's set is {A_p, Y}: source 0's share is
    1/2 + 1/2 + 1/2 = 1.5 links, k = 2 (without refreshes source 0 keeps n 4: 3/4, k 1). Source 1: 1.5, k 2."""
    w = Wired()
    for p in range(3):
        x = [10 + 4 * p + i for i in range(3)]
        w.q(p, 0, 40, x[0], 1); w.q(p, 0, 1, x[1], 1); w.q(p, 0, 1, x[2], 1); w.q(p, 0, 1, 40 + p, 0)  # q 43
        w.q(p, 1, 10); w.q(p, 1, 1); w.q(p, 1, 1)                   # q 33, 32, 31 < 40: X1, X2, X3 released
        w.q(p, 0, 20, 50 + p, 1)                                    # q 51: Y joins, {A_p, Y}
    w.settle()
    assert (w.k(0), w.k(1)) == (2, 2)


def test_review_stale_high_other_sources():
    """Source 0's flows join ports 0 and 1 first (n 1 each), then three of source 1's join each (n 2, 3, 4).
    Source 0: 1/4 + 1/4 = 0.5, k 1 (without refreshes: 1 + 1, k 2); source 1: 3/4 + 3/4 = 1.5, k 2."""
    w = Wired()
    for p in range(2):
        w.q(p, 0, 40, 40 + p, 0)
        for i in range(3):
            w.q(p, 0, 1, 10 + 4 * p + i, 1)
    w.settle()
    assert (w.k(0), w.k(1)) == (1, 2)


def test_review_stale_low_one_source():
    """One source: ports 0 and 1 hold {A, B} and {C, D} (k 1/2 * 4 = 2); each dips below K for one event (A, C
    released) and rises again on B's and D's enqueues (already in the sets: no CNM of their own). Each port has one
    flow: 1 + 1 = 2, k 2 (without refreshes B and D keep n 2: k 1)."""
    w = Wired()
    for p in range(2):
        w.q(p, 0, 40, 20 + 2 * p, 0); w.q(p, 0, 1, 21 + 2 * p, 0)
    w.settle()
    assert w.k(0) == 2
    for p in range(2):
        w.q(p, 1, 5)                        # q 36 < 40: the lowest slot (A, C) released
        w.q(p, 0, 30, 21 + 2 * p, 0)        # q 66: B (D) again, in the set
    w.settle()
    assert w.k(0) == 2


def settled_scenario(seed, n_events):
    """Queue events on ports 0..2 (each of 14 flows leaves by one port, source = flow mod 2; ports fill and drain in
    turn, amounts 0..31)."""
    import random
    rng = random.Random(seed)
    port = {f: rng.randrange(3) for f in range(14)}
    fill = [rng.random() < 0.5 for _ in range(3)]
    ev = []
    for _ in range(n_events):
        if rng.random() < 0.05:
            p = rng.randrange(3)
            fill[p] = not fill[p]
        f = rng.randrange(14)
        deq = int(rng.random() < (0.35 if fill[port[f]] else 0.7))
        ev.append((port[f], deq, rng.randrange(32), f, f % 2))
    return ev


@pytest.mark.parametrize("seed", range(3))
def test_settled_k_is_the_truth(seed):
    """After every queue event and SETTLE events with nothing to notify, each source's k is the truth: the ceiling
    of the sum over ports of (the source's flows in the port's set) / (the set's size), from the destination's sets
    re-derived here from the queue events alone (section 3.2: estimate clamped, an enqueue at or above K adds its
    flow to the lowest free slot, any event below K removes the lowest slot's flow), at most n_paths - 1."""
    from fractions import Fraction
    w = Wired()
    top, sets, q = 2 ** RP["q_bits"] - 1, [[None] * RP["n_slots"] for _ in range(3)], [0, 0, 0]
    checked = changed = 0
    for port, deq, amount, flow, src in settled_scenario(seed, 1500):
        w.q(port, deq, amount, flow, src)
        w.settle()
        q[port] = max(0, min(top, q[port] - amount if deq else q[port] + amount))
        here = sets[port]
        if q[port] >= RP["threshold"] and not deq and flow not in [s[0] for s in here if s] and None in here:
            here[here.index(None)] = (flow, src)
            changed += 1
        elif q[port] < RP["threshold"] and any(here):
            here[next(j for j, s in enumerate(here) if s)] = None
            changed += 1
        for s in (0, 1):
            share = sum((Fraction(sum(1 for x in h if x and x[1] == s), sum(1 for x in h if x)) for h in sets
                         if any(h)), Fraction(0))
            truth = min(RI["n_paths"] - 1, -(-share.numerator // share.denominator))
            assert w.k(s) == truth, (checked, s, sets)
            checked += truth > 1
    assert changed > 120 and checked > 500, (changed, checked)


# -- signature and parameters ------------------------------------------------------------------------------------------

def test_signature():
    dut = IsolateRTL(**P)
    dut._MustUse__silence = True
    members = dut.signature.members
    assert set(members) == {"i", "upd", "o", "ctl", "stats"}
    item = members["i"].signature.members["payload"].shape
    upd = members["upd"].signature.members["payload"].shape
    res = members["o"].signature.members["payload"].shape
    # 12 flows: 4 bits; 3 dests: 2 bits; 6-bit timer; 4 paths: path 2 bits, mask 4 bits; n 0..15: 4 bits;
    # 3 congestion points: 2 bits
    assert [(n, f.width) for n, f in item] == [("flow", 4), ("dest", 2), ("now", 6), ("tag", 16)]
    assert [(n, f.width) for n, f in upd] == [("flow", 4), ("dest", 2), ("cp", 2), ("n", 4), ("cong", 1),
                                              ("now", 6)]
    assert [(n, f.width) for n, f in res] == [("flow", 4), ("dest", 2), ("now", 6), ("tag", 16), ("ok", 1),
                                              ("isolated", 1), ("path", 2), ("mask", 4), ("held", 1)]
    assert members["stats"].shape == 8 * 32
    assert dut.latency == 6


@pytest.mark.parametrize("kwargs, exc", [
    (dict(n_flows=1), ValueError), (dict(n_flows=(1 << 20) + 1), ValueError), (dict(n_dests=0), ValueError),
    (dict(n_dests=4097), ValueError), (dict(n_paths=1), ValueError), (dict(n_paths=17), ValueError),
    (dict(n_slots=0), ValueError), (dict(n_slots=9), ValueError), (dict(time_bits=3), ValueError),
    (dict(time_bits=33), ValueError), (dict(timeout=0), ValueError), (dict(time_bits=8, timeout=256), ValueError),
    (dict(n_paths=2.0), TypeError), (dict(timeout=True), TypeError), (dict(n_ports=0), ValueError),
    (dict(n_ports=33), ValueError), (dict(n_ports=4.0), TypeError),
])
def test_bad_parameters(kwargs, exc):
    with pytest.raises(exc):
        IsolateRTL(**kwargs)


# -- random traces and storms ------------------------------------------------------------------------------------------

PARAMS = [P, dict(n_flows=11, n_dests=5, n_paths=5, n_slots=4, time_bits=8, timeout=60, n_ports=5),
          dict(n_flows=64, n_dests=2, n_paths=8, n_slots=8, time_bits=10, timeout=300, n_ports=2)]


def storm(params, n_items, seed=0):
    """Bursts of congestion CNMs (n 1 to 8) for many flows of one destination (each flow at one of its congestion
    points), each answered by packets of every flow back to back, then the releases, the timer nearly still (no
    timeouts): the table fills, k climbs to its cap and falls."""
    import random
    rng = random.Random(seed)
    nf, nd, wrap = params["n_flows"], params["n_dests"], 1 << params["time_bits"]
    ev, sent, now = [], 0, 0
    while sent < n_items:
        d = rng.randrange(nd)
        flows = rng.sample(range(nf), min(nf, params["n_slots"] + 2))
        cps = {f: rng.randrange(params.get("n_ports", 8)) for f in flows}
        for cong in (1, 0):
            for f in flows:
                ev.append(_cnm(f, d, rng.choice([1, 1, 1, 1, 2, 8]), cong, now, cps[f]))
                ev.append(_pkt(flows[rng.randrange(len(flows))], d, now))
                sent += 1
            for f in flows:
                ev.append(_pkt(f, d, now))
                sent += 1
            now = (now + 1) % wrap
    return ev


@pytest.mark.parametrize("seed", range(9))
def test_golden_matches_the_rederivation(seed):
    params = PARAMS[seed % 3]
    ev = isolate_trace(seed, 2000, **params) + storm(params, 300, seed)
    out = run_golden("flb-isolate", params, ev)
    assert _fields(out) == rederive(ev, **params)[0]


def test_trace_exercises_every_outcome():
    """The random trace and the storm reach what the hand-worked case does (k above 1 included)."""
    for params in PARAMS:
        ev = isolate_trace(3, 2000, **params)
        out, n = rederive(ev, **params)
        forgeable = params["n_flows"] & (params["n_flows"] - 1) or params["n_dests"] & (params["n_dests"] - 1)
        assert min(n[:4]) > 5 and n[4] > 0 and min(n[5:7]) > 5 and (n[7] > 5 or not forgeable), n
        assert max(bin(o[3]).count("1") for o in out) >= 2
        out, n = rederive(storm(params, 300), **params)
        assert n[1] > 40 and n[2] > 20 and n[4] > 10, n
        assert max(bin(o[3]).count("1") for o in out) == min(params["n_paths"] - 1, params["n_slots"])


@pytest.mark.parametrize("params", PARAMS[:2], ids=["P", "p5"])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.5)])
def test_rtl_against_the_rederivation(params, idle, backpressure):
    ev = isolate_trace(11, 500, **params) + storm(params, 200, seed=1)
    stats = {}
    out = run_rtl("flb-isolate", params, ev, idle=idle, backpressure=backpressure, seed=5, compare=False,
                  stats=stats)
    want, counts = rederive(ev, **params)
    bad = [n for n, (w, g) in enumerate(zip(want, _fields(out))) if w != g]
    assert len(out) == len(want) and not bad, bad[:4]
    assert stats["counters"] == counts


def test_one_packet_per_clock():
    """Packets only (a CNM takes a packet's clock): every packet taken back to back."""
    ev = [e for e in storm(P, 300, seed=2)]
    pk = [e for e in ev if "item" in e]
    stats = {}
    out = run_rtl("flb-isolate", P, pk, compare=False, stats=stats)
    assert _fields(out) == rederive(pk, **P)[0]
    assert len(out) == len(pk) and stats["items_per_clock"] == 1.0


@pytest.mark.skipif(not FULL, reason="LBPIPE_FULL=1")
@pytest.mark.parametrize("seed", range(2))
def test_rtl_long(seed):
    params = PARAMS[seed % 3]
    ev = isolate_trace(100 + seed, 4000, **params) + storm(params, 1000, seed=seed)
    out = run_rtl("flb-isolate", params, ev, idle=0.2, backpressure=0.3, seed=seed, compare=False)
    assert _fields(out) == rederive(ev, **params)[0]
