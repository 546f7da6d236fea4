"""Golden model of FLB's receive side in the wire (:class:`lbpipe.hdl.flb.rx_wire.FlbRxWire`), on frames: the
golden parser and flb-owd (:mod:`lbpipe.sim.flb.owd`) composed as docs/flb_rx_wire.md says, with the marks, the
CNM frame and the clearing written here.

Order of events: a command applies before every frame given after it; the hardware agrees when it is given with the
pipeline empty (the harness drains it before each command). The outputs ``meas``, ``dly`` and ``cnm`` are lists
in the order the hardware hands them out.
"""

from lbpipe.sim.flb.owd import Owd
from lbpipe.sim.packet.parser import parse

__all__ = ["FlbRxWireModel", "TABLE_FORGET", "TABLE_FORGET_ALL", "TABLE_CLOCK", "TABLE_EDGE", "CNM_ETHERTYPE",
           "N_STATS"]

# The datasheet's address map and formats, written again here (not imported from the RTL).
TABLE_FORGET, TABLE_FORGET_ALL, TABLE_CLOCK, TABLE_EDGE = 0, 1, 48, 49
CNM_ETHERTYPE, CNM_VERSION, CNM_BYTES = 0x88B6, 1, 24
MARK_S, MARK_P = 0x20, 0x10
N_STATS = 8


def _bits(n):
    return max(1, (n - 1).bit_length())


class FlbRxWireModel:
    """Frames in, frames out, bit for bit as the hardware (parameters as :class:`FlbRxWire`)."""

    def __init__(self, *, n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16,
                 edge_shift=8, edge=0, tick_cycles=64):
        self.owd = Owd(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
        self.ne, self.n, self.nf, self.n_ports = n_edges, n_paths, n_flows, n_ports
        self.tb, self.delay_bits, self.shift = time_bits, delay_bits, edge_shift
        self.eb, self.pb = _bits(n_edges), _bits(n_paths)
        self.edge_reset, self.tick_reset = edge, tick_cycles
        self.reset()

    def reset(self):
        """Hardware reset: flb-owd swept, the clock at 0 stepping every ``tick_cycles`` clocks, this edge's number
        ``edge``, the outputs and the counters empty."""
        self.owd.reset()
        self.now, self.period, self.edge = 0, self.tick_reset, self.edge_reset
        self.tag = 0
        self.meas, self.dly, self.cnm = [], [], []
        self.counters = {"pb": 0, "pb_bad": 0, "cnm": 0, "cnm_bad": 0, "both": 0}

    def control(self, cmd):
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        if table in (TABLE_FORGET, TABLE_FORGET_ALL):
            self.owd.control(cmd)
        elif table == TABLE_CLOCK and index == 0:
            self.now = value % (1 << self.tb)
        elif table == TABLE_CLOCK and index == 1:
            self.period = value & 0xFFFF
        elif table == TABLE_EDGE and index == 0:
            self.edge = value & 0xFFFF

    def stats(self):
        o, c = self.owd.stats(), self.counters
        return [o[0], o[1], o[4]] + [c[k] % (1 << 32) for k in ("pb", "pb_bad", "cnm", "cnm_bad", "both")]

    def process(self, frame, now=None):
        """The frame that leaves for ``frame`` (bytes); ``now`` the clock's value when its sample reached flb-owd
        (default: the model's own clock, which only commands move)."""
        frame = bytes(frame)
        meta = parse(frame, self.tag, early=True)
        self.tag = (self.tag + 1) & 0xFFFF
        t = self.now if now is None else now % (1 << self.tb)
        mark = meta["bth_resv"] & (MARK_S | MARK_P) if meta["roce"] else 0
        if mark:
            self._marked(meta, mark, t)
            out = bytearray(frame)
            l4 = meta["l4_off"]
            out[l4 + 6] = out[l4 + 7] = 0
            out[l4 + 12] &= 0xC0
            return bytes(out)
        if len(frame) >= 14 and int.from_bytes(frame[12:14], "big") == CNM_ETHERTYPE:
            self._cnm_frame(frame)
        return frame

    def _marked(self, meta, mark, now):
        edge = (meta["src_ip"] >> self.shift) & ((1 << self.eb) - 1)
        value = meta["udp_csum"]
        if mark == MARK_S | MARK_P:
            self.counters["both"] += 1
        elif mark == MARK_S:
            path = meta["udp_sport"] & ((1 << self.pb) - 1)
            res = self.owd.process({"kind": meta["kind"], "sampled": 1, "edge": edge, "path": path,
                                    "stamp": value % (1 << self.tb), "now": now})
            if res["ok"]:
                self.meas.append({"edge": edge, "path": path, "delay": res["qdelay"]})
        else:
            path = meta["bth_resv"] & 15
            if edge < self.ne and path < self.n:
                self.dly.append({"dest": edge, "path": path, "delay": min(value, (1 << self.delay_bits) - 1)})
                self.counters["pb"] += 1
            else:
                self.counters["pb_bad"] += 1

    def _cnm_frame(self, frame):
        """A frame of EtherType 0x88B6: the CNM on ``cnm`` when every field is right, else counted. The length is
        the hardware's (a frame of more than 128 bytes reads as long enough)."""
        f = frame
        be = lambda a, n: int.from_bytes(f[a:a + n], "big")       # noqa: E731
        ok = (len(f) >= CNM_BYTES and f[14] == CNM_VERSION and be(16, 2) == self.edge and be(18, 2) < self.ne
              and f[22] < self.n_ports and f[23] <= 15)
        if not ok:
            self.counters["cnm_bad"] += 1
            return
        self.cnm.append({"flow": be(20, 2) % self.nf, "dest": be(18, 2), "cp": f[22], "n": f[23],
                         "cong": f[15] & 1})
        self.counters["cnm"] += 1
