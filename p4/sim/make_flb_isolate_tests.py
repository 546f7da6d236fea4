"""Writes the P4 test directories of p4/flb_isolate.p4 (run from the repository root:
python p4/sim/make_flb_isolate_tests.py).

Each directory p4/sim/test-flb-isolate-<name>/ holds, as the flb_owd.p4 ones (make_flb_owd_tests.py): test.json,
ctl.jsonl (empty: the block's commands and the CNMs go in-band), trace.jsonl (the run as a flb-isolate trace: packets,
``upd`` CNMs, ``ctl`` commands, in order), packets_in.pcap (one harness frame per event: packets op 0, commands op 1,
CNMs op 2; lbpipe/p4.py flb_isolate_frames), commands.txt (the configuration) and packets_out.pcap (each packet's
frame with the golden model's result, sim/flb/isolate.py).
"""

import json
import pathlib
import struct
import sys

from lbpipe.p4 import flb_isolate_commands, flb_isolate_frames
from lbpipe.sim.flb.isolate import Isolate, isolate_trace
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent

CASES_PARAMS = dict(n_flows=64, n_dests=4, n_paths=4, n_slots=4, time_bits=8, timeout=50, n_ports=3)


def cases():
    """Hand-picked (64 flows, 4 destinations, 4 paths, 4 entries, 8-bit ticks, timeout 50, 3 congestion points):
    events in order. The comments give each packet's tag and the result tests/test_p4.py (ISO_CASES) expects:
    weights 840/n (n the point's latest: a congestion CNM sets it for all the point's entries), k = ceil(sum / 840)
    capped at 3, mask the top k paths, path 3 - (rank mod k). Point 0 unless a CNM says otherwise."""
    ev, tag = [], 0

    def p(flow, dest, now):
        nonlocal tag
        ev.append({"item": {"flow": flow, "dest": dest, "now": now, "tag": tag}})
        tag += 1

    def c(flow, dest, n, cong, now, cp=0):
        ev.append({"upd": {"flow": flow, "dest": dest, "cp": cp, "n": n, "cong": cong, "now": now}})

    ev.append({"ctl": {"table": 0, "index": 1, "data": 5}})   # no tables: ignored
    p(5, 1, 10)             # 0: not isolated, k 0
    c(5, 1, 2, 1, 10)       # entry 0: (5, 1, 420)
    p(5, 1, 11)             # 1: held; k 1, mask 8, rank 0: path 3
    c(6, 1, 2, 1, 12)       # entry 1: (6, 1, 420); point (1, 0): n 2, both entries 420
    ev.append({"ctl": {"table": 7, "index": 0, "data": 0}})   # between: the next packet is not held
    p(6, 1, 12)             # 2: sum 840 exactly: k 1, path 3
    c(7, 2, 1, 1, 13)       # entry 2: (7, 2, 840)
    c(8, 1, 4, 1, 13, 1)    # entry 3: (8, 1, point 1, 210): destination 1's sum 1050, k 2
    p(8, 1, 14)             # 3: held; mask 12; rank 2 (entries 0, 1; not entry 2): path 3 (entry mod k: 2)
    p(6, 1, 15)             # 4: rank 1: path 2
    p(7, 2, 15)             # 5: destination 2: k 1, mask 8, path 3
    p(7, 1, 15)             # 6: flow 7 isolated toward destination 2 only: not isolated, mask 12
    c(9, 3, 1, 1, 16)       # table full: nothing
    p(9, 3, 16)             # 7: held, not isolated, mask 0
    c(7, 1, 1, 1, 16, 2)    # stale: flow 7 is isolated toward destination 2 (point (1, 2): no entries to set)
    c(5, 1, 9, 1, 16)       # forged: n 9
    c(5, 1, 0, 1, 16)       # forged: n 0
    c(64, 1, 1, 1, 16)      # forged: flow 64
    c(5, 4, 1, 1, 16)       # forged: destination 4
    c(5, 1, 8, 1, 16, 3)    # forged: point 3 of 3 (else flow 5 would move to point 3 at 105)
    p(5, 1, 17)             # 8: held; unchanged: k 2, mask 12, rank 0: path 3
    c(6, 1, 0, 0, 17)       # release of flow 6 (n ignored): entry 1 free; destination 1's sum 630
    p(8, 1, 18)             # 9: held; k 1, mask 8, rank 1: 1 mod 1 = 0, path 3
    p(6, 1, 18)             # 10: not isolated, mask 8
    c(6, 1, 3, 0, 19)       # stale release: not in the table
    c(5, 1, 1, 1, 20)       # renewal: entry 0's weight 840; sum 1050
    p(8, 1, 20)             # 11: held; k 2, mask 12, rank 1: path 2
    c(10, 1, 1, 1, 21)      # entry 1 (the lowest free): (10, 1, 840); sum 1890: k 3 = n_paths - 1 (cap)
    p(8, 1, 22)             # 12: held; mask 14, rank 2: path 1
    p(10, 1, 22)            # 13: rank 1: path 2
    p(5, 1, 64)             # 14: entry 2 idle 49 < 50: kept; rank 0: path 3, mask 14
    p(63, 0, 65)            # 15: entry 2 idle 50: released at this packet; not isolated, mask 0
    p(7, 2, 65)             # 16: released: not isolated, mask 0
    p(8, 1, 100)            # 17: entries 1 and 3 idle 78: released; flow 8 not isolated; mask 8 (flow 5 left)
    c(8, 1, 2, 1, 240, 1)   # entry 0 (flow 5) idle 176: released first; flow 8 takes entry 0
    p(8, 1, 250)            # 18: held; k 1, mask 8, path 3
    p(8, 1, 30)             # 19: across the wrap, idle 36: kept, path 3
    p(1, 0, 79)             # 20: entry 0 idle 49: kept; not isolated, mask 0
    p(8, 1, 80)             # 21: idle 50: released at its own packet; not isolated, mask 0
    c(3, 9, 1, 1, 81)       # forged: destination 9
    p(64, 0, 81)            # 22: held; flow 64 out of range: ok 0
    p(1, 4, 82)             # 23: destination 4 out of range: ok 0
    ev.append({"ctl": {"table": 0, "index": 0, "data": 0}})
    return ev


def write_iso_test(name, params, events, note):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    commands, frames, n_items = flb_isolate_frames(events, params)
    model = Isolate(**params)
    out = []
    for event, frame in zip(events, frames):
        if "ctl" in event:
            model.control(event["ctl"])
        elif "upd" in event:
            model.process_stream("upd", event["upd"])
        else:
            res = model.process(event["item"])
            flags = res["ok"] | res["isolated"] << 1 | res["held"] << 2
            out.append(frame[:42] + struct.pack("!BBH", flags, res["path"], res["mask"]) + frame[46:])
    assert len(out) == n_items and commands == flb_isolate_commands(params, len(frames))
    (where / "test.json").write_text(json.dumps({"program": "flb_isolate.p4", "block": "flb-isolate",
                                                 "params": params, "note": note}, indent=2) + "\n")
    write_events(where / "ctl.jsonl", [])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in commands))
    write_pcap(where / "packets_out.pcap", out)
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(out)} out\n")


MIXED_PARAMS = dict(n_slots=4, time_bits=12, timeout=300)


def main():
    write_iso_test("flb-isolate-cases", CASES_PARAMS, cases(),
                   "hand-picked: isolation, k from exact weights (840 exactly: one path), two congestion points, the "
                   "rank across another destination's entry, the cap at n_paths - 1, renewal, release, stale, forged "
                   "(a point out of range included) and full CNMs, held "
                   "packets, timeouts at packets and CNMs, the wrap (make_flb_isolate_tests.py cases)")
    write_iso_test("flb-isolate-mixed", MIXED_PARAMS, isolate_trace(5, 300, **MIXED_PARAMS),
                   "lbpipe trace flb-isolate --param n_slots=4 --param time_bits=12 --param timeout=300 --seed 5 "
                   "-n 300")
    write_iso_test("flb-isolate-defaults", {}, isolate_trace(6, 300), "lbpipe trace flb-isolate --seed 6 -n 300")


if __name__ == "__main__":
    main()
