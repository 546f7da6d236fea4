"""Golden model of FLB's source edge switch in the wire (:class:`lbpipe.hdl.flb.wire.FlbTxWire`), on frames: the
golden parser, flb-isolate (:mod:`lbpipe.sim.flb.isolate`), flb-route (:mod:`lbpipe.sim.flb.route`) and the
deparser composed as docs/flb_tx_wire.md says, with the mask filter and FLB's marks (samples and piggybacks)
written here.

Order of events: a CNM (``cnm`` port or ``ctl`` table 49) and a delay (``dly`` or table 0) apply when given, before
every frame given after them; the hardware agrees when they are given with the pipeline empty (the harness drains it
before each command). So does a measurement (``meas`` or ``ctl`` table 50). An isolated-path set flb-isolate reports with a packet reaches flb-route with that packet.
"""

from lbpipe.sim.flb.isolate import Isolate
from lbpipe.sim.flb.route import Route
from lbpipe.sim.packet.deparser import deparse_counted
from lbpipe.sim.packet.parser import parse

__all__ = ["FlbTxWireModel", "TABLE_DELAY", "TABLE_CLOCK", "TABLE_CNM", "TABLE_MEAS", "cnm_command"]

# The datasheet's address map and marks, written again here (not imported from the RTL).
TABLE_DELAY, TABLE_CLOCK, TABLE_CNM, TABLE_MEAS = 0, 48, 49, 50
MARK_S, MARK_P = 0x20, 0x10


def _bits(n):
    return max(1, (n - 1).bit_length())


def cnm_command(flow, dest, cp, n, cong):
    """The ``ctl`` command (table 49) of one CNM, packed as the datasheet says."""
    return {"table": TABLE_CNM, "index": flow, "data": dest | cp << 16 | n << 24 | cong << 28}


class FlbTxWireModel:
    """Frames in, frames out, bit for bit as the hardware (parameters as :class:`FlbTxWire`)."""

    def __init__(self, *, n_flows=65536, n_dests=16, n_paths=8, n_slots=8, n_ports=8, time_bits=16, delay_bits=16,
                 timeout=4096, release=4096, margin=0, dest_shift=8, tick_cycles=64, depth=256, sample_ticks=64):
        self.isolate = Isolate(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, n_slots=n_slots,
                               time_bits=time_bits, timeout=release, n_ports=n_ports)
        self.route = Route(force=True, n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, time_bits=time_bits,
                           delay_bits=delay_bits, timeout=timeout, margin=margin, upd=True)
        self.nf, self.nd, self.n, self.tb = n_flows, n_dests, n_paths, time_bits
        self.db, self.pb, self.shift = _bits(n_dests), _bits(n_paths), dest_shift
        self.n_ports, self.delay_bits = n_ports, delay_bits
        self.tick_reset, self.depth, self.sample_reset = tick_cycles, depth, sample_ticks
        self.reset()

    def reset(self):
        """Hardware reset: flb-isolate empty, flb-route's flow table swept (its delays and sets kept), the filter's
        memory swept, the clock at 0 stepping every ``tick_cycles`` clocks, the counters 0."""
        self.isolate.reset()
        self.route.reset()
        self.sets = {}
        self.now, self.period = 0, self.tick_reset
        self.sample_period = self.sample_reset
        self.sampled = {}           # (dest, path) -> the tick of its last sample since reset
        self.slot = {}              # dest -> (path, delay): the newest measurement toward it, not yet carried
        self.tag = 0
        self.counters = {"cut": 0, "refused": 0, "bad": 0, "skipped": 0, "unrouted": 0, "updates": 0,
                         "stamped": 0, "piggybacked": 0}
        self.last_bad = False
        self.last = None

    def control(self, cmd):
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        if table == TABLE_DELAY:
            self.route.control(cmd)
        elif table == TABLE_CLOCK and index == 0:
            self.now = value % (1 << self.tb)
        elif table == TABLE_CLOCK and index == 1:
            self.period = value & 0xFFFF
        elif table == TABLE_CLOCK and index == 2:
            self.sample_period = value & 0xFFFF
        elif table == TABLE_MEAS:
            # as the hardware cuts them: the edge the index's low bits, the delay bits 0 to 15, the path 16 to 19
            self.measurement({"edge": index % (1 << self.db), "path": (value >> 16) & ((1 << self.pb) - 1),
                              "delay": value & 0xFFFF})
        elif table == TABLE_CNM:
            # the fields as the hardware cuts them from the command: flow the index's low bits, then the data's
            self.cnm({"flow": index % (1 << _bits(self.nf)), "dest": value & ((1 << self.db) - 1),
                      "cp": (value >> 16) & ((1 << _bits(self.n_ports)) - 1), "n": (value >> 24) & 15,
                      "cong": (value >> 28) & 1})

    def cnm(self, item):
        """A CNM on ``cnm`` (flow, dest, cp, n, cong), stamped with the wire's clock."""
        self.isolate.process_stream("upd", dict(item, now=self.now))

    def delay(self, item):
        """A delay on ``dly`` (dest, path, delay)."""
        self.route.process_stream("upd", {"isolate": 0, "dest": item["dest"], "path": item["path"],
                                          "delay": item["delay"]})

    def measurement(self, item):
        """A measurement on ``meas`` (edge, path, delay): the newest toward ``edge``, to ride on its next frame that
        carries no sample (an edge at or above ``n_dests`` is ignored; the path's low ``log2 n_paths`` bits and the
        delay's low ``min(delay_bits, 16)`` bits, their fields' widths)."""
        if item["edge"] < self.nd:
            self.slot[item["edge"]] = (item["path"] % (1 << self.pb), item["delay"] % (1 << min(self.delay_bits, 16)))

    def stats(self):
        c = self.counters
        return (self.isolate.stats() + [c["cut"], c["refused"], c["bad"]]
                + [c[k] % (1 << 32) for k in ("skipped", "unrouted", "updates", "stamped", "piggybacked")])

    def process(self, frame, now=None):
        """The frame that leaves for ``frame`` (bytes); ``now`` the clock's value when its item entered (default:
        the model's own clock, which only commands move). :attr:`last` holds the decision (or None)."""
        frame = bytes(frame)
        meta = parse(frame, self.tag, early=True)
        self.tag = (self.tag + 1) & 0xFFFF
        t = self.now if now is None else now % (1 << self.tb)
        flb = bool(meta["roce"] and meta["udp_csum"] == 0)
        flow = meta["flow_hash"] % self.nf
        dest = (meta["dst_ip"] >> self.shift) & ((1 << self.db) - 1)
        sport_low = meta["udp_sport"] & ((1 << self.pb) - 1)
        xor = 0
        mark = None
        self.last = None
        if flb:
            iso = self.isolate.process({"flow": flow, "dest": dest, "now": t, "tag": 0})
            if iso["ok"] and self.sets.get(dest) != iso["mask"]:
                self.route.process_stream("upd", {"isolate": 1, "dest": dest, "mask": iso["mask"]})
                self.sets[dest] = iso["mask"]
                self.counters["updates"] += 1
            res = self.route.process({"kind": meta["kind"], "flow": flow, "dest": dest, "now": t, "tag": 0,
                                      "force": iso["isolated"], "fpath": iso["path"]})
            if res["ok"]:
                path = iso["path"] if iso["isolated"] else res["path"]
                xor = sport_low ^ path
                self.last = {"path": path, "isolated": iso["isolated"], "new": res["new"],
                             "rerouted": res["rerouted"], "route_path": res["path"]}
                mark = self._mark(dest, path, t)
            else:
                self.counters["unrouted"] += 1
        else:
            self.counters["skipped"] += 1
        action = {"tag": 0, "drop": 0, "rewrite": int(xor != 0), "l4_off": meta["l4_off"],
                  "icrc_off": meta["icrc_off"], "sport_xor": xor}
        out, self.last_bad = deparse_counted(frame, action, self.counters, cut_through=True, depth=self.depth)
        if mark is not None:
            bits, value = mark
            out = bytearray(out)
            l4 = meta["l4_off"]
            out[l4 + 6:l4 + 8] = value.to_bytes(2, "big")
            out[l4 + 12] = (out[l4 + 12] & 0xC0) | bits
            out = bytes(out)
        return out

    def _mark(self, dest, path, t):
        """A routed FLB frame's marks ``(bits, value)``: a sample when sampling is on and its (dest, path) has not
        been sampled since reset or ``sample period`` ticks have passed (modulo the clock's wrap) since its last
        sample (``S``, the stamp: ``now``'s low 16 bits); else the destination's waiting measurement, if any (``P``,
        its path, its delay); else none (0, 0: the fields cleared)."""
        last = self.sampled.get((dest, path))
        if self.sample_period and (last is None or (t - last) % (1 << self.tb) >= self.sample_period):
            self.sampled[(dest, path)] = t
            self.counters["stamped"] += 1
            return MARK_S, t & 0xFFFF
        if dest in self.slot:
            p, d = self.slot.pop(dest)
            self.counters["piggybacked"] += 1
            return MARK_P | p, d
        return 0, 0
