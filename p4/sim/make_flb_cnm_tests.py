"""Writes the P4 test directories of p4/flb_cnm.p4 (run from the repository root: python p4/sim/make_flb_cnm_tests.py).

Each directory p4/sim/test-flb-cnm-<name>/ holds, as the flb_owd.p4 ones (make_flb_owd_tests.py): test.json,
ctl.jsonl (empty: the block's commands go in-band), trace.jsonl (the run as a flb-cnm metadata trace), packets_in.pcap
(one harness frame per item, op 0, and per command, op 1; lbpipe/p4.py flb_cnm_frames), commands.txt (the
configuration) and packets_out.pcap (each item's frame with the golden model's result, sim/flb/cnm.py).
"""

import json
import pathlib
import struct
import sys

from lbpipe.p4 import flb_cnm_commands, flb_cnm_frames
from lbpipe.sim.flb.cnm import Cnm, cnm_trace
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent

CASES_PARAMS = dict(n_ports=2, n_slots=2, n_edges=16, flow_bits=16, amount_bits=6, q_bits=6, threshold=20)


def cases():
    """Hand-picked (2 ports, 2 slots, 6-bit estimates: top 63, K 20): events in order. The comments give each item's
    tag and the result tests/test_p4.py (CNM_CASES) expects; every CNM's congestion point is its port."""
    ev, tag = [], 0

    def e(port, deq, amount, flow=0, src=0):
        nonlocal tag
        ev.append({"item": {"port": port, "deq": deq, "amount": amount, "flow": flow, "src": src, "tag": tag}})
        tag += 1

    def ctl(table, data):
        ev.append({"ctl": {"table": table, "index": 0, "data": data}})

    ctl(0, 0)               # K 0: ignored (K stays 20)
    e(0, 0, 10, 1, 3)       # 0: q 10 < K: nothing
    e(0, 0, 10, 1, 3)       # 1: q 20 = K: flow 1 takes slot 0, congestion CNM n 1
    e(0, 0, 5, 1, 3)        # 2: q 25: flow 1 already in the set
    e(0, 0, 5, 2, 4)        # 3: q 30: flow 2 takes slot 1, n 2
    e(0, 0, 5, 3, 5)        # 4: q 35: the set full, no CNM of its own: flow 1 (owed since 3) refreshed, n 2
    e(0, 1, 10, 9, 9)       # 5: dequeue, q 25 >= K: nothing
    e(1, 0, 63, 7, 1)       # 6: port 1, q 63 (the top): flow 7, n 1
    e(1, 0, 63, 7, 1)       # 7: q clamped at 63; in the set
    e(0, 1, 6, 9, 9)        # 8: q 19 < K: release of slot 0 (flow 1, src 3), n 2
    e(0, 0, 0, 5, 6)        # 9: an enqueue of 0 below K releases too: slot 1 (flow 2, src 4), n 1
    e(0, 1, 50, 5, 6)       # 10: q below 0: clamped at 0; the set empty: nothing
    e(2, 0, 5, 1, 1)        # 11: port 2 >= n_ports: rejected
    ctl(0, 64 + 5)          # K = the low 6 bits: 5
    ctl(0, 64)              # low 6 bits 0: ignored
    ctl(1, 40)              # another table: ignored
    e(0, 0, 5, 8, 2)        # 12: q 5 = K: flow 8, slot 0, n 1
    e(0, 0, 1, 9, 9)        # 13: q 6: flow 9, slot 1, n 2
    e(0, 1, 2, 0, 0)        # 14: q 4: release slot 0 (flow 8), n 2
    e(0, 0, 3, 10, 1)       # 15: q 7: flow 10 takes the lowest free slot, 0; n 2 (flow 9, owed since 14:
    #                         15, 16, 17 carry their own CNMs, 17 releases it: no refresh for it)
    e(0, 1, 7, 0, 0)        # 16: q 0: release slot 0 (flow 10), n 2
    e(0, 1, 0, 0, 0)        # 17: q 0: release slot 1 (flow 9), n 1
    ctl(0, 30)              # K 30
    e(1, 1, 40, 0, 0)       # 18: port 1, q 23 < 30: release flow 7 (src 1), n 1
    return ev


def write_cnm_test(name, params, events, note):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    commands, frames, n_items = flb_cnm_frames(events, params)
    model = Cnm(**params)
    out = []
    for event, frame in zip(events, frames):
        if "ctl" in event:
            model.control(event["ctl"])
            continue
        res = model.process(event["item"])
        flags = res["ok"] | res["cnm"] << 1 | res["cnm_cong"] << 2
        out.append(frame[:41] + struct.pack("!BIIHBB", flags, res["qlen"], res["cnm_flow"], res["cnm_src"],
                                            res["cnm_n"], res["cnm_cp"]) + frame[54:])
    assert len(out) == n_items and commands == flb_cnm_commands(params, len(frames))
    (where / "test.json").write_text(json.dumps({"program": "flb_cnm.p4", "block": "flb-cnm", "params": params,
                                                 "note": note}, indent=2) + "\n")
    write_events(where / "ctl.jsonl", [])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in commands))
    write_pcap(where / "packets_out.pcap", out)
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(out)} out\n")


WIDE_PARAMS = dict(n_ports=32, n_slots=8, q_bits=32, amount_bits=32, threshold=100000)


def main():
    write_cnm_test("flb-cnm-cases", CASES_PARAMS, cases(),
                   "hand-picked: congestion CNMs (n counting the set), a refresh, a full set, dequeues above K, "
                   "releases in slot order (by a dequeue and by an enqueue), clamping at 0 and the top, a rejected "
                   "port, K rewritten (masked, 0 ignored, another table) (make_flb_cnm_tests.py cases)")
    write_cnm_test("flb-cnm-mixed", {}, cnm_trace(3, 300), "lbpipe trace flb-cnm --seed 3 -n 300")
    write_cnm_test("flb-cnm-wide", WIDE_PARAMS, cnm_trace(6, 300, **WIDE_PARAMS),
                   "lbpipe trace flb-cnm --param n_ports=32 --param n_slots=8 --param q_bits=32 --param "
                   "amount_bits=32 --param threshold=100000 --seed 6 -n 300")


if __name__ == "__main__":
    main()
