"""The LAPS tables end to end: one Dragonfly host's PST and PIT, computed by the control plane, loaded into the RTL
through ``ctl`` (the command trace ``lbpipe paths --ctl`` writes) and looked up for every destination.

The expected results come from the control plane's JSON tables (the destination's pids, each path's baseVal and
anchors) and from the LAPS conventions the datasheets state (slot ``j`` holds sub-table ``j``'s pid, 0 an empty
slot; a loaded entry starts with realVal = baseVal and time 0; an empty slot reads invalid with realVal infinite),
never from the blocks' golden models; the golden models must agree too.
"""

import ipaddress

import pytest

from lbpipe.engine import run_golden, run_rtl
from lbpipe.sim.laps import control, topology

INFINITY = 0xFFFF_FFFF
HOST = "h0"


@pytest.fixture(scope="module")
def tables():
    graph = topology.build("dragonfly")
    out = control.host_tables(graph, HOST)
    assert (len(out["pst"]), len(out["pit"])) == (143, 3 * 1 + (3 * 4) * 3 + (8 * 4 * 4) * 8)    # Table I
    return out


def _commands(tables, name):
    """The control plane's trace split by block: PIT commands come first, then the PST's (docs/laps_control.md)."""
    from lbpipe.sim.laps.pit import pit_commands
    commands = control.ctl_commands(tables)
    n_pit = len(pit_commands(tables["pit"], k=tables["k"], n_entries=tables["n_entries"]))
    return commands[:n_pit] if name == "pit" else commands[n_pit:]


def test_pst_rtl_finds_every_destination(tables):
    events = [{"ctl": c} for c in _commands(tables, "pst")]
    lookups = [entry["dst"] for entry in tables["pst"]]
    absent = ["10.0.0.1" if tables["ip"] != "10.0.0.1" else "10.0.0.2", "192.0.2.7"]   # the host itself, TEST-NET
    absent = [a for a in absent if a not in lookups]
    for n, ip in enumerate(lookups + absent):
        events.append({"item": {"kind": 1, "ipv6": 0, "dst_ip": int(ipaddress.ip_address(ip)), "tag": n}})
    out = run_rtl("laps-pst", {}, events, idle=0.1, backpressure=0.2, seed=5)
    assert out == run_golden("laps-pst", {}, events)
    assert len(out) == len(lookups) + len(absent)
    for n, entry in enumerate(tables["pst"]):
        got = out[n]
        assert got["tag"] == n and got["hit"] == 1, entry["dst"]
        assert [got[f"pid{j}"] for j in range(tables["k"])] == entry["pids"], entry["dst"]
    for got in out[len(lookups):]:
        assert got["hit"] == 0


def test_pit_rtl_returns_every_path(tables):
    k = tables["k"]
    by_pid = {entry["pid"]: entry for entry in tables["pit"]}
    events = [{"ctl": c} for c in _commands(tables, "pit")]
    for n, entry in enumerate(tables["pst"]):
        item = {"kind": 1, "now": 0, "tag": n}
        item.update({f"pid{j}": pid for j, pid in enumerate(entry["pids"])})
        events.append({"item": item})
    out = run_rtl("laps-pit", {}, events, idle=0.1, backpressure=0.2, seed=6)
    assert out == run_golden("laps-pit", {}, events)
    assert len(out) == len(tables["pst"])
    for n, entry in enumerate(tables["pst"]):
        got = out[n]
        assert got["tag"] == n and got["probe_valid"] == 0
        for j, pid in enumerate(entry["pids"]):
            if pid == 0:
                assert (got[f"valid{j}"], got[f"real_val{j}"]) == (0, INFINITY), (entry["dst"], j)
                continue
            path = by_pid[pid]
            anchors = [int(ipaddress.ip_address(a)) for a in path["anchors"]]
            assert got[f"valid{j}"] == 1, (entry["dst"], j)
            assert got[f"base_val{j}"] == path["base_val"] and got[f"real_val{j}"] == path["base_val"]
            assert got[f"time{j}"] == 0 and got[f"n_anchors{j}"] == len(anchors)
            assert [got[f"anchor{j}_{a}"] for a in range(len(anchors))] == anchors
