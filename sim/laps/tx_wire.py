"""Golden model of the LAPS sender in the wire (:class:`lbpipe.hdl.laps.tx_wire.LapsTxWire`), on frames: the golden
parser (early items), PST, PIT, softmax and LAPS header editor composed as docs/laps_tx_wire.md says, and the
probe frame (:func:`lbpipe.sim.laps.probe.probe_frame`) right behind a frame whose PIT lookup probed a path.

Also here: :func:`tx_wire_commands` (the control plane's JSON tables as ``ctl`` commands at the pipeline's table
numbers) and :func:`tx_wire_trace` (seeded frames and commands for ``lbpipe trace laps-tx-wire``).
"""

import random

from lbpipe.sim.laps.pit import Pit, pit_commands
from lbpipe.sim.laps.probe import probe_frame
from lbpipe.sim.laps.pst import Pst, PstTable
from lbpipe.sim.laps.softmax import Softmax
from lbpipe.sim.packet.laps_editor import LapsEditor
from lbpipe.sim.packet.parser import parse

__all__ = ["LapsTxWireModel", "tx_wire_commands", "TABLE_PST", "TABLE_PIT", "TABLE_SOFTMAX", "TABLE_CLOCK"]

# The datasheet's control map, written again here (not imported from the RTL).
TABLE_PST, TABLE_PIT, TABLE_SOFTMAX, TABLE_CLOCK = 0, 16, 32, 48
_OP_PASS, _OP_INSERT = 0, 2
_TIME_MASK = (1 << 48) - 1
_LAPS_PORT = 0xC1A5


class LapsTxWireModel:
    """Frames in, frames out, bit for bit as the hardware (parameters as :class:`LapsTxWire`).

    The clock: :meth:`process` takes the frame's time as ``now``; without it the model uses its own clock, which
    only ``ctl`` table 48 moves, and then refuses to run unless ``tick`` is 0 (a running clock's value depends on
    the cycle a frame came in, which only the testbench sees)."""

    def __init__(self, *, n_dests=1024, k=8, ways=3, buckets=512, ipv6=False, n_entries=8192, probe_rule="paper",
                 lfsr_seed=0xACE1, precision=16, depth=256, laps_port=_LAPS_PORT, tick_ns=4):
        self.k, self.ipv6, self.laps_port = k, ipv6, laps_port
        self.pst = Pst(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6)
        self.pit = Pit(n_entries=n_entries, k=k, probe_rule=probe_rule, lfsr_seed=lfsr_seed)
        self.softmax = Softmax(k=k, precision=precision, mode="paper")
        self.editor = LapsEditor(depth=depth, laps_port=laps_port, cut_through=True)
        self.tick_reset = tick_ns
        self.reset()

    def reset(self):
        """Hardware reset: counters clear, the clock restarts at 0 with ``tick_ns``, the PIT's and the softmax's
        run-time state restart; the tables (PST, PIT, softmax) stay."""
        self.pst.reset()
        self.pit.reset()
        self.softmax.reset()
        self.editor.reset()
        self.tag = 0
        self.clock = 0
        self.tick = self.tick_reset
        self.own = [0, 0, 0, 0]       # not looked up, normal forwarding, no valid path, inserts
        self.probes = [0]             # probe frames sent
        self.dport = 0                # the last decided frame's UDP destination port

    def control(self, cmd):
        """Tables 0-15 PST, 16-31 PIT, 32-47 softmax (as ``table % 16``), 48 the clock; others ignored."""
        table = cmd["table"]
        sub = dict(cmd, table=table % 16)
        if table < 16:
            self.pst.control(sub)
        elif table < 32:
            self.pit.control(sub)
        elif table < 48:
            self.softmax.control(sub)
        elif table == TABLE_CLOCK and cmd["index"] == 0:
            self.clock = cmd["data"] & _TIME_MASK
        elif table == TABLE_CLOCK and cmd["index"] == 1:
            self.tick = cmd["data"] & 0xFF

    def stats(self):
        return self.pst.stats() + self.pit.stats() + self.editor.stats() + \
            [c % (1 << 32) for c in self.own + self.probes]

    def update(self, item):
        """An update on ``upd`` in a clock of its own (no lookup beside it): ``{"pid", "owd", "now"}``."""
        self.pit.update(item)
        self.pit._paired = None       # its own group: the next lookup is a later clock

    def process_stream(self, name, item):
        if name != "upd":
            raise ValueError(f"laps-tx-wire has no input stream {name!r}")
        self.update(item)

    def decide(self, frame, now=None):
        """The editor's action for ``frame`` (advancing the state as :meth:`process` does)."""
        if now is None:
            if self.tick:
                raise ValueError("the clock runs (tick != 0): give each frame's time as now")
            now = self.clock
        meta = parse(bytes(frame), self.tag, laps_port=self.laps_port, early=True)
        self.dport = meta["udp_dport"]
        self.tag = (self.tag + 1) & 0xFFFF
        family = meta["ipv4"] or (self.ipv6 and meta["ipv6"])
        lookup = bool(meta["udp"] and family and not meta["truncated"] and not meta["laps"]
                      and not meta["laps_bad"] and meta["udp_dport"] != self.laps_port)
        addr = meta["dst_ip"] if self.ipv6 else meta["dst_ip"] & 0xFFFF_FFFF
        res = self.pst.process({"kind": meta["kind"], "ipv6": meta["ipv6"], "dst_ip": addr, "tag": meta["tag"]})
        use = lookup and not res["normal"]
        k = self.k
        pids = [res[f"pid{j}"] if use else 0 for j in range(k)]
        pit = self.pit.process({"kind": meta["kind"], **{f"pid{j}": pids[j] for j in range(k)}, "now": now,
                                "tag": meta["tag"]})
        choice = self.softmax.process({**{f"valid_{j}": pit[f"valid{j}"] for j in range(k)},
                                       **{f"pid_{j}": 0 for j in range(k)},
                                       **{f"real_val_{j}": pit[f"real_val{j}"] for j in range(k)},
                                       "base_val_max": 0, "tag": meta["tag"]})
        insert = use and not choice["none"]
        j = choice["slot"]
        self.own[0] += not use and not (lookup and res["normal"])
        self.own[1] += bool(lookup and res["normal"])
        self.own[2] += bool(use and choice["none"])
        self.own[3] += insert
        anchors = sum(pit[f"anchor{j}_{a}"] << (32 * a) for a in range(4))
        return {"tag": meta["tag"], "op": _OP_INSERT if insert else _OP_PASS, "drop": 0, "ipv6": meta["ipv6"],
                "l3_off": meta["l3_off"], "l4_off": meta["l4_off"], "count": pit[f"n_anchors{j}"], "probe": 0,
                "ack": 0, "sr_idx": 0, "pid": pids[j], "time": now, "anchors": anchors}, pit

    def process(self, frame, now=None):
        """The frames that leave for ``frame``: the frame (edited or not), then its probe frame if the PIT's lookup
        probed a path (docs/laps_tx_wire.md, "Probe frames")."""
        action, pit = self.decide(frame, now)
        out = self.editor.process(bytes(frame), action)
        if out and pit["probe_valid"]:
            j = pit["probe_slot"]
            probe = probe_frame(out[0], pid=pit["probe_pid"], count=pit[f"n_anchors{j}"],
                                anchors=sum(pit[f"anchor{j}_{a}"] << (32 * a) for a in range(4)),
                                ipv6=action["ipv6"], l3_off=action["l3_off"], l4_off=action["l4_off"],
                                time=action["time"], dport=self.dport, laps_port=self.laps_port)
            self.probes[0] += 1
            out = out + [probe]
        return out


def tx_wire_commands(table, *, beta_q=0, seed=None, exp_entries=None, n_entries=8192, k=8, n_dests=1024, ways=3,
                     buckets=512, ipv6=False, precision=16, **_):
    """The pipeline's ``ctl`` commands for a control-plane JSON table (``{"pst": [...], "pit": [...]}``), the
    softmax's beta register (``beta_q``), seed and the first ``exp_entries`` entries of its exponent table
    (``T[a] = min(2**P - 1, round(2**P exp(-a / 64)))``, all 1,024 when None), and the clock stopped at 0."""
    import math
    cmds = [{"table": TABLE_CLOCK, "index": 1, "data": 0}, {"table": TABLE_CLOCK, "index": 0, "data": 0}]
    pst = PstTable(n_dests=n_dests, k=k, ways=ways, buckets=buckets, ipv6=ipv6, n_entries=n_entries)
    for entry in table.get("pst", []):
        cmds += [dict(c, table=TABLE_PST + c["table"]) for c in pst.insert(entry["dst"], entry["pids"])]
    if "default" in table:
        cmds += [dict(c, table=TABLE_PST + c["table"]) for c in pst.miss_action(normal=False, pids=table["default"])]
    cmds += [dict(c, table=TABLE_PIT + c["table"]) for c in pit_commands(table.get("pit", []), n_entries=n_entries,
                                                                          k=k)]
    top = (1 << precision) - 1

    def t(a):
        return min(top, round((1 << precision) * math.exp(-a / 64)))
    for a in range(1024 if exp_entries is None else exp_entries):
        cmds.append({"table": TABLE_SOFTMAX, "index": a, "data": t(a) | (t(a) - t(a + 1)) << 32})
    cmds.append({"table": TABLE_SOFTMAX + 1, "index": 0, "data": beta_q})
    if seed is not None:
        cmds.append({"table": TABLE_SOFTMAX + 1, "index": 1, "data": seed})
    return cmds
