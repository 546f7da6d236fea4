"""Writes the P4 test directories of p4/flb_owd.p4 (run from the repository root: python p4/sim/make_flb_owd_tests.py).

Each directory p4/sim/test-flb-owd-<name>/ holds, as the flb_edge.p4 ones (make_flb_tests.py):
  test.json         the program and the golden model's parameters
  ctl.jsonl         empty: every command of the block goes in-band (op 1), before the first packet too
  trace.jsonl       the run as a flb-owd metadata trace (ctl and items, in order; what `lbpipe replay` takes)
  packets_in.pcap   frames into the switch: one harness frame per item (op 0) and per command (op 1), in order
  commands.txt      simple_switch_CLI commands (the configuration), by lbpipe/p4.py
  packets_out.pcap  the expected frames out: each item's frame with the golden model's result in its header

The frames are made by lbpipe/p4.py flb_owd_frames (what `lbpipe replay flb-owd --engine bmv2` sends); the golden
model is sim/flb/owd.py. tests/test_p4.py re-derives the items and results from packets_in.pcap alone, and checks
the hand-picked test's results against values worked by hand there.
"""

import json
import pathlib
import struct
import sys

from lbpipe.p4 import flb_owd_commands, flb_owd_frames
from lbpipe.sim.flb.owd import Owd, owd_trace
from lbpipe.trace import write_events, write_pcap

HERE = pathlib.Path(__file__).resolve().parent

CASES_PARAMS = dict(n_edges=3, n_paths=3, time_bits=8, delay_bits=6)


def cases():
    """Hand-picked (3 edges, 3 paths, 8-bit ticks, 6-bit delays: saturation at 63): events in order. The comments
    give each item's tag and the result tests/test_p4.py (OWD_CASES) expects."""
    ev, tag = [], 0

    def item(kind=1, sampled=0, reverse=0, edge=0, path=0, to_edge=0, stamp=0, now=0):
        nonlocal tag
        ev.append({"item": {"kind": kind, "sampled": sampled, "edge": edge, "path": path, "stamp": stamp,
                            "now": now, "reverse": reverse, "to_edge": to_edge, "tag": tag}})
        tag += 1

    def s(edge, path, stamp, now, kind=1):
        item(kind=kind, sampled=1, edge=edge, path=path, stamp=stamp, now=now)

    def r(to_edge, kind=2):
        item(kind=kind, reverse=1, to_edge=to_edge)

    def ctl(table, index, data=0):
        ev.append({"ctl": {"table": table, "index": index, "data": data}})

    ctl(1, 0)                       # FORGET_ALL before the first packet: nothing to forget
    s(0, 0, 10, 30)                 # 0: owd 20, first: base 20, delay 0, base set
    s(0, 0, 10, 35)                 # 1: owd 25: delay 5
    r(0)                            # 2: carries (0, 5)
    r(0, kind=7)                    # 3: nothing (sent once)
    s(0, 0, 20, 38)                 # 4: owd 18 < 20: the base comes down, delay 0
    s(0, 1, 250, 4, kind=0)         # 5: owd (4 - 250) mod 256 = 10 across the wrap, first: base 10
    s(0, 1, 200, 220)               # 6: owd 20: delay 10
    s(0, 2, 0, 100)                 # 7: first: base 100
    s(0, 2, 0, 227)                 # 8: owd 227, d 127 (just below half): saturates at 63
    s(0, 2, 0, 228)                 # 9: d 128 = half: negative, the base comes down to 228, delay 0
    r(0)                            # 10: the newest of 5..9: (2, 0)
    s(1, 0, 5, 5)                   # 11: owd 0, first: base 0
    s(1, 0, 255, 0)                 # 12: owd 1 (both across the wrap): delay 1
    item(sampled=1, reverse=1, edge=1, path=0, to_edge=1, stamp=0, now=200)   # 13: both flags: rejected
    s(3, 0, 0, 50)                  # 14: edge 3 >= n_edges: rejected
    s(1, 3, 0, 50)                  # 15: path 3 >= n_paths: rejected
    r(3)                            # 16: to_edge 3: rejected
    item(kind=5, edge=2, path=2, to_edge=2, stamp=9, now=99)                   # 17: neither flag: ok, nothing
    r(1)                            # 18: (0, 1): the rejected 13 left the slot alone
    ctl(0, 0 << 4 | 1, 77)          # FORGET (0, 1), data ignored
    ctl(0, 3 << 4 | 0)              # FORGET edge 3: out of range
    ctl(0, 1 << 4 | 3)              # FORGET path 3: out of range
    s(0, 1, 0, 50)                  # 19: base forgotten: first again, delay 0 (with base 10: 40)
    s(0, 0, 0, 30)                  # 20: base 18: delay 12
    ctl(2, 0)                       # forged: table 2 (a FORGET on table bit 0 would forget (0, 0))
    ctl(3, 0)                       # forged: table 3 (a FORGET_ALL on table bit 0 would empty everything)
    ctl(255, 1 << 4)
    s(0, 0, 0, 28)                  # 21: base 18 still: delay 10
    s(1, 0, 0, 3)                   # 22: base 0: delay 3
    ctl(1, 12345, 1)                # FORGET_ALL: every base and slot
    r(0)                            # 23: nothing (the slot of 21 emptied)
    s(0, 0, 0, 40)                  # 24: first again: delay 0 (with base 18: 22)
    s(1, 0, 0, 3)                   # 25: first again: base 3, delay 0
    r(2)                            # 26: nothing (edge 2 never sampled)
    s(2, 2, 100, 99)                # 27: owd 255, first: base 255
    s(2, 2, 100, 104)               # 28: owd 4: (4 - 255) mod 256 = 5: delay 5, the base across the wrap
    r(2)                            # 29: (2, 5)
    r(1)                            # 30: (0, 0), from 25
    ctl(1, 0)                       # FORGET_ALL after the last packet
    return ev


def write_owd_test(name, params, events, note):
    where = HERE / f"test-{name}"
    where.mkdir(exist_ok=True)
    commands, frames, n_items = flb_owd_frames(events, params)
    model = Owd(**params)
    out, k = [], 0
    for event in events:
        if "ctl" in event:
            model.control(event["ctl"])
            k += 1
            continue
        res = model.process(event["item"])
        flags = res["ok"] | res["base_set"] << 1 | res["pb_valid"] << 2
        out.append(frames[k][:44] + struct.pack("!BBII", flags, res["pb_path"], res["qdelay"], res["pb_delay"])
                   + frames[k][54:])
        k += 1
    assert len(out) == n_items and commands == flb_owd_commands(params, len(frames))
    (where / "test.json").write_text(json.dumps({"program": "flb_owd.p4", "block": "flb-owd", "params": params,
                                                 "note": note}, indent=2) + "\n")
    write_events(where / "ctl.jsonl", [])
    write_events(where / "trace.jsonl", events)
    write_pcap(where / "packets_in.pcap", frames)
    (where / "commands.txt").write_text("".join(c + "\n" for c in commands))
    write_pcap(where / "packets_out.pcap", out)
    sys.stdout.write(f"{where}: {len(frames)} frames, {len(out)} out\n")


MIXED_PARAMS = dict(n_edges=16, n_paths=16, time_bits=8, delay_bits=6)
WIDE_PARAMS = dict(n_edges=1024, n_paths=8, time_bits=32, delay_bits=20)


def main():
    write_owd_test("flb-owd-cases", CASES_PARAMS, cases(),
                   "hand-picked: first samples, the base coming down (at half exactly), stamps and ticks across the "
                   "wrap, saturation, piggyback sent once and newest, rejections, FORGET, forged commands, FORGET_ALL "
                   "(make_flb_owd_tests.py cases)")
    write_owd_test("flb-owd-mixed", MIXED_PARAMS, owd_trace(3, 300, **MIXED_PARAMS),
                   "lbpipe trace flb-owd --param n_paths=16 --param time_bits=8 --param delay_bits=6 --seed 3 -n 300")
    write_owd_test("flb-owd-wide", WIDE_PARAMS, owd_trace(4, 200, **WIDE_PARAMS),
                   "lbpipe trace flb-owd --param n_edges=1024 --param time_bits=32 --param delay_bits=20 --seed 4 "
                   "-n 200")


if __name__ == "__main__":
    main()
