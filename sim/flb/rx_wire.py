"""Golden model of FLB's receive side in the wire (:class:`lbpipe.hdl.flb.rx_wire.FlbRxWire`), on frames: the
golden parser, flb-owd (:mod:`lbpipe.sim.flb.owd`), flb-cnm (:mod:`lbpipe.sim.flb.cnm`) and flb-prevhop
(:mod:`lbpipe.sim.flb.prevhop`) composed as docs/flb_rx_wire.md says, with the marks, the CNM frames (taken and
sent), the enqueue events and the clearing written here.

Order of events: a command applies before every frame given after it; the hardware agrees when it is given with the
pipeline empty (the harness drains it before each command). The outputs ``meas``, ``dly`` and ``cnm`` are lists
in the order the hardware hands them out. A dequeue (:meth:`FlbRxWireModel.dequeue`) applies between the enqueues
of the frames given before and after it: the order in which ``flb-cnm`` took the two kinds of event, which the
hardware's round robin decides and a testbench observes (``order`` of :meth:`FlbRxWireModel.run`).
"""

from lbpipe.sim.flb.cnm import Cnm
from lbpipe.sim.flb.owd import Owd
from lbpipe.sim.flb.prevhop import PrevHop
from lbpipe.sim.packet.parser import parse

__all__ = ["FlbRxWireModel", "TABLE_FORGET", "TABLE_FORGET_ALL", "TABLE_CLOCK", "TABLE_EDGE", "TABLE_THRESHOLD",
           "TABLE_MAC", "CNM_ETHERTYPE", "N_STATS"]

# The datasheet's address map and formats, written again here (not imported from the RTL).
TABLE_FORGET, TABLE_FORGET_ALL, TABLE_CLOCK, TABLE_EDGE, TABLE_THRESHOLD, TABLE_MAC = 0, 1, 48, 49, 50, 51
CNM_ETHERTYPE, CNM_VERSION, CNM_BYTES, CNM_FRAME_BYTES = 0x88B6, 1, 24, 60
MARK_S, MARK_P = 0x20, 0x10
CELL, MAX_CELLS = 64, 255
N_STATS = 17


def _bits(n):
    return max(1, (n - 1).bit_length())


class FlbRxWireModel:
    """Frames in, frames out, bit for bit as the hardware (parameters as :class:`FlbRxWire`)."""

    def __init__(self, *, n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16,
                 edge_shift=8, edge=0, tick_cycles=64, n_slots=4, q_bits=16, threshold=512, port_shift=0,
                 hop_timeout=4096):
        self.owd = Owd(n_edges=n_edges, n_paths=n_paths, time_bits=time_bits, delay_bits=delay_bits)
        self.notify = Cnm(n_ports=n_ports, n_slots=n_slots, n_edges=n_edges, flow_bits=_bits(n_flows), amount_bits=8,
                          q_bits=q_bits, threshold=threshold)
        self.hops = PrevHop(n_flows=n_flows, time_bits=time_bits, timeout=hop_timeout)
        self.port_shift, self.portb = port_shift, _bits(n_ports)
        self.ne, self.n, self.nf, self.n_ports = n_edges, n_paths, n_flows, n_ports
        self.tb, self.delay_bits, self.shift = time_bits, delay_bits, edge_shift
        self.eb, self.pb = _bits(n_edges), _bits(n_paths)
        self.edge_reset, self.tick_reset = edge, tick_cycles
        self.reset()

    def reset(self):
        """Hardware reset: flb-owd swept, the clock at 0 stepping every ``tick_cycles`` clocks, this edge's number
        ``edge``, the outputs and the counters empty."""
        self.owd.reset()
        self.notify.reset()
        self.hops.reset()
        self.now, self.period, self.edge = 0, self.tick_reset, self.edge_reset
        self.tag = 0
        self.meas, self.dly, self.cnm, self.cnm_frames = [], [], [], []
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
        elif table == TABLE_THRESHOLD and index == 0:
            self.notify.control({"table": 0, "index": 0, "data": value})
        elif table == TABLE_MAC and index == 0:
            self.hops.control({"table": 0, "index": 0, "data": value})

    def stats(self):
        o, c, h = self.owd.stats(), self.counters, self.hops.stats()
        return ([o[0], o[1], o[4]] + [c[k] % (1 << 32) for k in ("pb", "pb_bad", "cnm", "cnm_bad", "both")]
                + self.notify.stats() + [h[2], h[3], h[4], h[5]])

    def process_ports(self, frame, now=None):
        """``[(port, frame)]``: the frame that leaves on ``m_axis``, then the CNM frames its enqueue made on
        ``m_cnm``."""
        sent = len(self.cnm_frames)
        out = self.process(frame, now)
        return [("m_axis", out)] + [("m_cnm", f) for f in self.cnm_frames[sent:]]

    def dequeue(self, port, amount, now=None):
        """A dequeue of ``amount`` cells from egress port ``port`` (the ``deq`` input); returns the CNM frames it
        made (also appended to ``cnm_frames``)."""
        sent = len(self.cnm_frames)
        self._event({"port": port, "deq": 1, "amount": amount}, self.now if now is None else now)
        return self.cnm_frames[sent:]

    def run(self, frames, deqs=(), order=None):
        """Frames and dequeues in ``flb-cnm``'s order: ``order`` a string of ``e`` (the next enqueue) and ``d``
        (the next dequeue, a ``(port, amount)`` of ``deqs``); default every dequeue after every frame. Returns the
        frames out on ``m_axis`` (the CNM frames are in ``cnm_frames``)."""
        deqs = list(deqs)
        order = "e" * len(frames) + "d" * len(deqs) if order is None else order
        tokens, out = iter(order), []
        for frame in frames:
            if self.enqueues(frame):
                for token in tokens:
                    if token == "e":
                        break
                    self.dequeue(*deqs.pop(0))
            out.append(self.process(frame))
        for token in tokens:
            if token == "d":
                self.dequeue(*deqs.pop(0))
        return out

    def enqueues(self, frame):
        """Whether ``frame`` is an enqueue event (the parser finds it RoCEv2)."""
        return bool(parse(bytes(frame), 0, early=True)["roce"])

    def process(self, frame, now=None):
        """The frame that leaves for ``frame`` (bytes); ``now`` the clock's value when its sample reached flb-owd
        (default: the model's own clock, which only commands move)."""
        frame = bytes(frame)
        meta = parse(frame, self.tag, early=True)
        self.tag = (self.tag + 1) & 0xFFFF
        t = self.now if now is None else now % (1 << self.tb)
        if meta["roce"]:
            self._enqueue(frame, meta, t)
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

    def _enqueue(self, frame, meta, now):
        """A RoCEv2 frame into its egress port's estimate; then its previous hop recorded, then the event's CNM."""
        cells = min(MAX_CELLS, -(-(meta["l4_off"] + meta["udp_len"]) // CELL))
        port = (meta["dst_ip"] >> self.port_shift) & ((1 << self.portb) - 1) if self.n_ports > 1 else 0
        item = {"port": port, "deq": 0, "amount": cells,
                "flow": meta["flow_hash"] % self.nf, "src": (meta["src_ip"] >> self.shift) & ((1 << self.eb) - 1),
                "mac": int.from_bytes(frame[6:12], "big")}
        self._event(item, now)

    def _event(self, item, now):
        res = self.notify.process(item)
        if not item["deq"]:
            self.hops.process({"cnm": 0, "flow": item["flow"], "mac": item["mac"], "now": now})
        if not res["cnm"]:
            return
        hop = self.hops.process({"cnm": 1, "flow": res["cnm_flow"], "now": now})
        if hop["hit"]:
            self.cnm_frames.append(self._cnm_out(res, hop))

    def _cnm_out(self, res, hop):
        """The CNM frame for ``flb-cnm``'s result ``res`` and the previous hop ``hop``: the datasheet's table."""
        head = hop["dst_mac"].to_bytes(6, "big") + hop["src_mac"].to_bytes(6, "big") + CNM_ETHERTYPE.to_bytes(2, "big")
        body = (bytes([CNM_VERSION, res["cnm_cong"]]) + res["cnm_src"].to_bytes(2, "big") + self.edge.to_bytes(2, "big")
                + res["cnm_flow"].to_bytes(2, "big") + bytes([res["cnm_cp"], res["cnm_n"]]))
        return (head + body).ljust(CNM_FRAME_BYTES, b"\0")
