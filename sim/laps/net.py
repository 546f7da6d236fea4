"""Closed-loop LAPS network (LAPS, IEEE ToN: Figure 19, sections III-B to III-G; datasheet docs/laps_net.md; issue 13,
"Closed-loop demonstration").

One sender NIC, one receiver NIC and ``K`` paths between them. Each path has a one-way propagation delay (which
can change at a given time), a bottleneck queue (a service rate in Gb/s and a buffer in frames; a frame arriving to
a full buffer is tail-dropped) and a random loss probability (applied after the queue). ACKs return on the
reverse path of their data: the path's propagation delay, no queue, no loss.

In the loop, on frames (bit for bit what the wire pipelines would emit):

* the sender pipeline's golden model :class:`~lbpipe.sim.laps.tx_wire.LapsTxWireModel` (parser, PST, PIT,
  softmax, LAPS header INSERT) takes each RoCEv2 frame the host sends, once the pacer
  (:class:`~lbpipe.sim.laps.pacer.Pacer`) allows it; every frame it emits is routed by its LAPS ``pid`` (probe
  frames too: the loop forwards whatever the pipeline emits);
* the receiver pipeline's golden model :class:`~lbpipe.sim.laps.rx_wire.LapsRxWireModel` answers each data and
  probe frame with an ACK frame;
* a second ``LapsRxWireModel`` at the sender takes the ACKs: its PIT update goes to the sender's PIT, its loss item
  to the loss detector :class:`~lbpipe.sim.laps.loss.Loss` (Algorithm 3), and an AIMD item built from the PIT's
  entries for the destination goes to :class:`~lbpipe.sim.laps.aimd.Aimd`, whose rate feeds the pacer;
* the host retransmits every (flow, seq) the loss detector declares lost (ACK order, timeout or ring overflow),
  ahead of new data.

The network keeps its own ground truth (which transmissions it dropped, which arrived) so the loss claims are
checked against something the LAPS blocks never see. Deterministic for a seed: one ``random.Random`` for the
network, events ordered by (time, insertion number).

Choices where the paper and the issue are silent are listed in docs/laps_net.md.
"""

import heapq
import math
import random

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.laps.aimd import Aimd, aimd_commands
from lbpipe.sim.laps.loss import Loss, loss_slot
from lbpipe.sim.laps.pacer import Pacer, pacer_commands
from lbpipe.sim.laps.rx_wire import LapsRxWireModel
from lbpipe.sim.laps.tx_wire import LapsTxWireModel, tx_wire_commands
from lbpipe.sim.packet.parser import parse

__all__ = ["NetConfig", "LapsNet", "Recorder", "run_net", "roce_frame", "standin_probe"]

_LAPS_PORT = 0xC1A5
_ROCE_PORT = 4791


class NetConfig:
    """The model's parameters (keyword arguments; defaults are the datasheet's "default profile").

    Times in ns, rates in Gb/s (bits per ns) for the network and kbit/s for AIMD and the pacer (the blocks' unit).
    """

    def __init__(self, *, prop_ns=(2000, 5000, 8000, 14000), cap_gbps=(10, 10, 10, 10), buffer_frames=(8,) * 4,
                 loss_prob=(0.01,) * 4, change_at_ns=None, change_path=0, change_prop_ns=20000,
                 payload=4000, line_gbps=100, beta_per_us=0.1, margin_bytes=5 * 1024, stop_ns=2_000_000,
                 drain_ns=1_000_000, tick_ns=100, depth=32, n_entries=64, aimd_variant="paper", stages=5,
                 min_rate=100_000, max_rate=60_000_000, start_rate=None, bucket_frames=2, seed=1):
        k = len(prop_ns)
        for name, v in (("cap_gbps", cap_gbps), ("buffer_frames", buffer_frames), ("loss_prob", loss_prob)):
            if len(v) != k:
                raise ValueError(f"{name}: one value per path ({k})")
        if not 1 <= k <= 8 or n_entries % k or n_entries // k < 2:
            raise ValueError("1 to 8 paths, n_entries a multiple of the path count")
        self.k, self.prop_ns, self.cap_gbps = k, list(prop_ns), list(cap_gbps)
        self.buffer_frames, self.loss_prob = list(buffer_frames), list(loss_prob)
        self.change_at_ns, self.change_path, self.change_prop_ns = change_at_ns, change_path, change_prop_ns
        self.payload, self.line_gbps, self.beta_per_us = payload, line_gbps, beta_per_us
        self.margin_bytes, self.stop_ns, self.drain_ns, self.tick_ns = margin_bytes, stop_ns, drain_ns, tick_ns
        self.depth, self.n_entries, self.aimd_variant, self.stages = depth, n_entries, aimd_variant, stages
        self.min_rate = min_rate
        self.max_rate = max_rate
        self.start_rate = self.max_rate if start_rate is None else start_rate
        self.bucket_frames, self.seed = bucket_frames, seed

    @property
    def sub(self):
        return self.n_entries // self.k

    def pid(self, path):
        """Path ``j`` is index 1 of PIT sub-table ``j`` (the shared pid convention)."""
        return path * self.sub + 1

    def frame_bytes(self):
        return len(roce_frame(0, 0, self.payload))

    def base_val(self, path):
        """baseVal: propagation delay plus ``margin_bytes`` of queuing at the path's service rate (the paper's
        five-packet margin, five 1,024-byte packets by default), in ns."""
        return self.prop_ns[path] + math.ceil(self.margin_bytes * 8 / self.cap_gbps[path])


def _ipv4_checksum(header):
    s = sum(int.from_bytes(header[i:i + 2], "big") for i in range(0, len(header), 2))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


SRC_IP, DST_IP = "10.0.0.1", "10.0.0.2"


def _ip(text):
    return bytes(int(x) for x in text.split("."))


def roce_frame(qp, psn, payload):
    """An IPv4 RoCEv2 SEND-only frame (BTH opcode 4) to destination QP ``qp`` with PSN ``psn`` and ``payload``
    bytes, ICRC 0 (the loop never checks it)."""
    bth = bytes([4, 0]) + b"\xff\xff" + bytes(1) + qp.to_bytes(3, "big") + bytes(1) + psn.to_bytes(3, "big")
    udp_len = 8 + len(bth) + payload + 4
    udp = (0xC000 | qp).to_bytes(2, "big") + _ROCE_PORT.to_bytes(2, "big") + udp_len.to_bytes(2, "big") + bytes(2)
    ip = bytearray(bytes([0x45, 0]) + (20 + udp_len).to_bytes(2, "big") + bytes(2) + b"\x40\x00" + bytes([64, 17])
                   + bytes(2) + _ip(SRC_IP) + _ip(DST_IP))
    ip[10:12] = _ipv4_checksum(ip).to_bytes(2, "big")
    eth = bytes.fromhex("020000000002") + bytes.fromhex("020000000001") + b"\x08\x00"
    return eth + bytes(ip) + udp + bth + bytes(payload) + bytes(4)


def standin_probe(pid, now, anchors):
    """A probe as docs/laps_tx_wire.md plans it ("Not done yet"): the data frames' Ethernet/IPv4/UDP headers with
    a LAPS header of type 1 (probe) on ``pid``, send time ``now``, the path's ``anchors``, and no payload. The loop
    builds it only while the sender pipeline's model does not emit probes itself."""
    n = len(anchors)
    laps = bytes([0x80 | n, 0]) + pid.to_bytes(2, "big") + (now % (1 << 48)).to_bytes(6, "big") + \
        _ROCE_PORT.to_bytes(2, "big") + b"".join(a.to_bytes(4, "big") for a in anchors)
    udp_len = 8 + len(laps)
    udp = (0xC001).to_bytes(2, "big") + _LAPS_PORT.to_bytes(2, "big") + udp_len.to_bytes(2, "big") + bytes(2)
    ip = bytearray(bytes([0x45, 0]) + (20 + udp_len).to_bytes(2, "big") + bytes(2) + b"\x40\x00" + bytes([64, 17])
                   + bytes(2) + _ip(SRC_IP) + _ip(DST_IP))
    ip[10:12] = _ipv4_checksum(ip).to_bytes(2, "big")
    eth = bytes.fromhex("020000000002") + bytes.fromhex("020000000001") + b"\x08\x00"
    frame = eth + bytes(ip) + udp + laps
    return frame.ljust(60, b"\0")


class Recorder:
    """Stands in for a golden block inside the loop and records what it saw: ``ctl`` commands and items in order
    (``events``, trace format) and the outputs (``outputs``), so the sequence can be replayed through the RTL."""

    def __init__(self, model):
        self.model = model
        self.events, self.outputs = [], []

    def control(self, cmd):
        self.events.append({"ctl": dict(cmd)})
        return self.model.control(cmd)

    def process(self, item):
        out = self.model.process(item)
        self.events.append({"item": dict(item)})
        self.outputs.append(dict(out))
        return out

    def __getattr__(self, name):
        return getattr(self.model, name)


class LapsNet:
    """The loop. :meth:`run` executes it; the attributes below are its record (see :func:`run_net`)."""

    def __init__(self, cfg=None, *, record=False, loss_model=None):
        self.cfg = cfg = cfg or NetConfig()
        k = cfg.k
        self.rng = random.Random(cfg.seed)
        self.tx = LapsTxWireModel(n_dests=64, k=k, ways=2, buckets=32, n_entries=cfg.n_entries, tick_ns=0)
        if record:
            self.tx.softmax = Recorder(self.tx.softmax)
        self._pit_results = []
        lookup = self.tx.pit.process

        def tapped(item):                     # the PIT's result of each lookup, for the probe stand-in
            res = lookup(item)
            self._pit_results.append(res)
            return res
        self.tx.pit.process = tapped
        self.rx_far = LapsRxWireModel(n_entries=cfg.n_entries, k=k)      # the receiver NIC
        self.rx_near = LapsRxWireModel(n_entries=cfg.n_entries, k=k)     # the sender NIC's receive path
        loss = loss_model if loss_model is not None else Loss(n_paths=cfg.n_entries, depth=cfg.depth, flow_bits=16)
        self.loss = Recorder(loss) if record else loss
        params = dict(n_flows=2, k=k, stages=cfg.stages, variant=cfg.aimd_variant,
                      line_rate=cfg.max_rate, min_rate=cfg.min_rate)
        self.aimd = Aimd(**params)
        for c in aimd_commands([(0, cfg.start_rate, cfg.start_rate)], **params):
            self.aimd.control(c)
        self.frame_len = cfg.frame_bytes()
        self.pacer = Pacer(n_flows=2)
        for c in pacer_commands([{"flow": 0, "rate": cfg.start_rate,
                                  "bucket": cfg.bucket_frames * self.frame_len}], n_flows=2):
            self.pacer.control(c)
        self.pids = [cfg.pid(j) for j in range(k)]
        table = {"pst": [{"dst": DST_IP, "pids": self.pids}],
                 "pit": [{"pid": cfg.pid(j), "sub_table": j, "index": 1, "base_val": cfg.base_val(j),
                          "anchors": [f"10.255.0.{j + 1}"]} for j in range(k)]}
        beta_q = round(cfg.beta_per_us / 1000 * (1 << 24))
        for c in tx_wire_commands(table, beta_q=beta_q, seed=0x1234_5678, n_entries=cfg.n_entries, k=k, n_dests=64,
                                  ways=2, buckets=32):
            self.tx.control(c)
        # network state
        self.prop = list(cfg.prop_ns)
        self.busy_until = [0.0] * k           # the bottleneck's last departure
        self.departures = [[] for _ in range(k)]   # departure times of frames in each queue (a min-heap)
        self.events, self.n_ev = [], 0
        # ground truth and records
        self.tx_log = []                      # per data transmission: dict(t, flow, seq, pid, path, fate, retx)
        self.outstanding = {}                 # (flow, seq) -> transmission id (latest)
        self.dropped, self.arrived = set(), set()
        self.ack_time = {}                    # transmission id -> when its ACK reached the sender
        self.declared = {}                    # transmission id -> reason ("ack", "timeout", "overflow")
        self.decl_log = []                    # (t, transmission id, reason, the ACK's (flow, seq) or None)
        self.declare_errors = []              # declarations naming nothing outstanding
        self.rate_log = []                    # (t, rate kbit/s, expected, action, min real_val)
        self.delivered = []                   # (t, bytes) of data frames reaching the receiver
        self.probes = {"sent": 0, "dropped": 0, "answered": 0, "standin": 0}
        self.retx_queue = []
        self.n_retx = 0
        self.seq = 0
        self.slot_tag = 0
        self.n_polls = 0

    # -- event queue -----------------------------------------------------------------------------------------------
    def _at(self, t, kind, data=None):
        heapq.heappush(self.events, (t, self.n_ev, kind, data))
        self.n_ev += 1

    def run(self):
        cfg = self.cfg
        self._at(0, "poll")
        self._at(cfg.tick_ns, "tick")
        if cfg.change_at_ns is not None:
            self._at(cfg.change_at_ns, "change")
        end = cfg.stop_ns + cfg.drain_ns
        while self.events:
            t, _, kind, data = heapq.heappop(self.events)
            if t > end:
                break
            self.now = t
            getattr(self, "_ev_" + kind)(t, data)
        self.end_ns = self.now
        return self

    # -- the sender host and its NIC ---------------------------------------------------------------------------------
    def _ev_poll(self, t, _):
        """A send opportunity at line rate: the host offers its next frame (a retransmission first)."""
        cfg = self.cfg
        more = self.retx_queue or t < cfg.stop_ns
        if not more:
            if self._busy():
                self._at(t + 1000, "poll")
            return
        self.n_polls += 1
        req = {"kind": PacketKind.DATA.value, "flow": 0, "bytes": self.frame_len, "now": int(t) % (1 << 48),
               "tag": self.n_polls & 0xFFFF}
        wire_ns = self.frame_len * 8 / cfg.line_gbps
        if self.pacer.process(req)["allow"]:
            if self.retx_queue:
                flow, seq = self.retx_queue.pop(0)
                retx = True
            else:
                flow, seq, retx = 0, self.seq, False
                self.seq = (self.seq + 1) % (1 << 24)
            self._send(t, flow, seq, retx)
        self._at(t + wire_ns, "poll")

    def _send(self, t, flow, seq, retx):
        frame = roce_frame(flow + 1, seq, self.cfg.payload)       # QP = flow + 1 (QP 0 is special in RoCE)
        self._pit_results.clear()
        outs = list(self.tx.process(frame, int(t)))
        own = any(parse(f, laps_port=_LAPS_PORT, early=True)["laps_probe"] for f in outs)
        if not own:
            self.probes["standin"] += sum(r["probe_valid"] for r in self._pit_results)
            outs += [standin_probe(r["probe_pid"], int(t), self._anchors(r["probe_pid"]))
                     for r in self._pit_results if r["probe_valid"]]
        for f in outs:
            m = parse(f, laps_port=_LAPS_PORT, early=True)
            if not m["laps"]:
                raise RuntimeError("the sender pipeline emitted a frame without a LAPS header: no path for it")
            pid = m["laps_pid"]
            path = pid // self.cfg.sub
            if m["laps_probe"]:
                self.probes["sent"] += 1
                self._network(t, f, path, None)
                continue
            tid = len(self.tx_log)
            self.tx_log.append({"t": t, "flow": flow, "seq": seq, "pid": pid, "path": path, "retx": retx,
                                "fate": None, "real_val": self.tx.pit.real[pid]})
            self.outstanding[(flow, seq)] = tid
            self.n_retx += retx
            self._loss_slot(t, send=(flow, seq, pid, self.tx_log[tid]["real_val"]))
            self._network(t, f, path, tid)

    def _anchors(self, pid):
        pit = self.tx.pit
        return pit.anchors[pid][:pit.n_anchors[pid]]

    def _busy(self):
        return bool(self.outstanding) or any(self.departures)

    # -- the network -----------------------------------------------------------------------------------------------
    def _network(self, t, frame, path, tid):
        cfg = self.cfg
        q = self.departures[path]
        while q and q[0] <= t:
            heapq.heappop(q)
        if len(q) >= cfg.buffer_frames[path]:
            fate = "queue"
        else:
            start = max(t, self.busy_until[path])
            self.busy_until[path] = dep = start + len(frame) * 8 / cfg.cap_gbps[path]
            heapq.heappush(q, dep)
            fate = "random" if self.rng.random() < cfg.loss_prob[path] else None
        if fate is not None:
            if tid is None:
                self.probes["dropped"] += 1
            else:
                self.tx_log[tid]["fate"] = fate
                self.dropped.add(tid)
            return
        self._at(dep + self.prop[path], "arrive", (frame, path, tid))

    def _ev_change(self, t, _):
        self.prop[self.cfg.change_path] = self.cfg.change_prop_ns

    # -- the receiver NIC --------------------------------------------------------------------------------------------
    def _ev_arrive(self, t, data):
        frame, path, tid = data
        out = self.rx_far.step(frame, int(t))
        if tid is not None:
            self.arrived.add(tid)
            self.tx_log[tid]["fate"] = "arrived"
            self.delivered.append((t, len(out["host"]) if out["host"] is not None else 0))
        if out["ack"] is not None:
            self._at(t + self.prop[path], "ack", (out["ack"], tid))

    # -- ACKs at the sender NIC --------------------------------------------------------------------------------------
    def _ev_ack(self, t, data):
        frame, tid = data
        if tid is not None:
            self.ack_time[tid] = t
        out = self.rx_near.step(frame, int(t))
        if out["upd"] is not None:
            self.tx.update(out["upd"])
        if out["loss"] is None:
            if out["upd"] is not None:
                self.probes["answered"] += 1
            return
        li = out["loss"]
        self._loss_slot(t, ack=(li["flow"] - 1, li["seq"], li["pid"]))
        pit = self.tx.pit
        item = {"kind": PacketKind.ACK.value, "flow": 0, "now": int(t) % (1 << 48), "tag": len(self.rate_log) & 0xFFFF}
        for j, p in enumerate(self.pids):
            item.update({f"valid{j}": pit.valid[p], f"real_val{j}": pit.real[p], f"base_val{j}": pit.base[p]})
        res = self.aimd.process(item)
        if res["changed"]:
            self.pacer.process_stream("rate", {"flow": 0, "rate": res["rate"]})
        self.rate_log.append((t, res["rate"], res["expected"], res["action"], min(pit.real[p] for p in self.pids)))

    # -- loss detection ----------------------------------------------------------------------------------------------
    def _ev_tick(self, t, _):
        """An idle slot for the loss detector's timer sweep, every ``tick_ns`` while anything is in flight."""
        self._loss_slot(t)
        if t < self.cfg.stop_ns or self._busy() or self.retx_queue:
            self._at(t + self.cfg.tick_ns, "tick")

    def _loss_slot(self, t, *, send=None, ack=None):
        self.slot_tag += 1
        out = self.loss.process(loss_slot(int(t), send=send, ack=ack, tag=self.slot_tag))
        reason = {1: "ack", 2: "timeout"}.get(out["lost_reason"])
        key = (ack[0], ack[1]) if reason == "ack" else None
        for j in range(out["lost_count"]):
            self._declare(t, out[f"lost{j}_flow"], out[f"lost{j}_seq"], reason, key)
        if out["evict"]:
            self._declare(t, out["evict_flow"], out["evict_seq"], "overflow", None)
        if out["ack"] == 1:                              # matched: this (flow, seq) is acknowledged
            self.outstanding.pop((ack[0], ack[1] % (1 << 24)), None)

    def _declare(self, t, flow, seq, reason, key):
        tid = self.outstanding.pop((flow, seq % (1 << 24)), None)
        if tid is None:
            self.declare_errors.append((flow, seq, reason))
            return
        self.declared[tid] = reason
        self.decl_log.append((t, tid, reason, key))
        self.retx_queue.append((flow, seq))

    # -- summaries -------------------------------------------------------------------------------------------------
    def shares(self, t0, t1):
        """Fraction of the data transmissions sent in [t0, t1) on each path."""
        counts = [0] * self.cfg.k
        for e in self.tx_log:
            if t0 <= e["t"] < t1:
                counts[e["path"]] += 1
        total = sum(counts) or 1
        return [c / total for c in counts]

    def goodput_gbps(self, t0, t1):
        """Bytes delivered to the receiving host in [t0, t1), in Gb/s."""
        return sum(b for t, b in self.delivered if t0 <= t < t1) * 8 / (t1 - t0)

    def mean_rate_gbps(self, t0, t1):
        """The AIMD rate, time-weighted over [t0, t1), in Gb/s."""
        area, last_t, last_r = 0.0, t0, None
        for t, r, *_ in self.rate_log:
            if t < t0:
                last_r = r
                continue
            if t >= t1:
                break
            if last_r is not None:
                area += last_r * (t - last_t)
            last_t, last_r = t, r
        if last_r is not None:
            area += last_r * (t1 - last_t)
        return area / (t1 - t0) / 1e6


def run_net(cfg=None, **kw):
    """Build and run the loop; returns the :class:`LapsNet` with its record."""
    return LapsNet(cfg, **kw).run()
