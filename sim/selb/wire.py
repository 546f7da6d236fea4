"""Golden model of SELB's source ToR in the wire (:class:`lbpipe.hdl.selb.wire.SelbTxWire`), on frames: the golden
parser, selb-cluster (:mod:`lbpipe.sim.selb.cluster`), selb-reroute (:mod:`lbpipe.sim.selb.reroute`) and the
deparser composed as docs/selb_tx_wire.md says, with the path mirror and the BTH mark written here.

**The mirror's timing.** The hardware's mirror is written when selb-reroute's result leaves, some clocks after the
frames behind it have read it; this model writes it at once. A frame read in that window sees the flow's earlier
path and selb-reroute treats it as stale (it leaves on the flow's table path, no decision taken). The frame that
leaves is the same either way while the flow cannot be rerouted again (``now`` has not moved by ``hold`` since its
last reroute: always with the clock stopped, as the tests and ``lbpipe trace`` run it); only the stale count
(STATUS_9, :data:`STALE_STAT`) may then differ, either way when two QPs share a flow index (docs/selb_tx_wire.md).
"""

from lbpipe.sim.packet.deparser import deparse_counted
from lbpipe.sim.packet.parser import parse
from lbpipe.sim.selb.cluster import Cluster
from lbpipe.sim.selb.reroute import Reroute

__all__ = ["SelbTxWireModel", "TABLE_CLOCK", "TABLE_SAMPLE", "TABLE_TICK", "MARK_OFFSET", "STALE_STAT"]

# The datasheet's address map and mark position, written again here (not imported from the RTL).
TABLE_CLOCK, TABLE_SAMPLE, TABLE_TICK = 48, 49, 50
MARK_OFFSET = 12        # from the UDP header: UDP (8 bytes), then BTH byte 4
STALE_STAT = 9          # selb-reroute's stale count among the wire's counters
DATA = 1                # PacketKind.DATA (docs/packet_io.md)


class SelbTxWireModel:
    """Frames in, frames out, bit for bit as the hardware (parameters as :class:`SelbTxWire`)."""

    def __init__(self, *, n_flows=1024, n_paths=64, k=4, q_bits=16, iter_cap=16, draws=4, theta=64, time_bits=16,
                 hold=32, tick_cycles=64, depth=256, cluster_seed=0xACE1, reroute_seed=0xB5AD):
        self.cluster = Cluster(n_paths=n_paths, k=k, q_bits=q_bits, iter_cap=iter_cap, draws=draws, theta=theta,
                               lfsr_seed=cluster_seed)
        self.reroute = Reroute(n_flows=n_flows, n_paths=n_paths, time_bits=time_bits, hold=hold,
                               lfsr_seed=reroute_seed)
        self.nf, self.n, self.tb, self.qb = n_flows, n_paths, time_bits, q_bits
        self.tick_reset, self.depth = tick_cycles, depth
        self.reset()

    def reset(self):
        """Hardware reset: both blocks as after their reset (published clusters, flow table, LFSRs, counters), the
        mirror swept, the clock at 0 stepping every ``tick_cycles`` clocks."""
        self.cluster.reset()
        self.reroute.reset()
        self.mirror = {}
        self.now, self.period = 0, self.tick_reset
        self.tag = 0
        self.counters = {"cut": 0, "refused": 0, "bad": 0, "skipped": 0}
        self.last_bad = False
        self.last = None

    def control(self, cmd):
        table, index, value = cmd["table"], cmd["index"], cmd["data"]
        if table < 16:
            self.cluster.control(cmd)
        elif table == TABLE_CLOCK and index == 0:
            self.now = value % (1 << self.tb)
        elif table == TABLE_CLOCK and index == 1:
            self.period = value & 0xFFFF
        elif table == TABLE_SAMPLE:
            self.sample({"path": index % self.n, "qlen": value % (1 << self.qb), "tick": 0})
        elif table == TABLE_TICK:
            self.sample({"path": 0, "qlen": 0, "tick": 1})

    def sample(self, item):
        """An item on ``smp``."""
        self.cluster.process_stream("smp", item)

    def stats(self):
        c = self.counters
        return (self.cluster.stats() + self.reroute.stats() + [c["cut"], c["refused"], c["bad"]]
                + [c["skipped"] % (1 << 32)])

    def process(self, frame, now=None):
        """The frame that leaves for ``frame`` (bytes); ``now`` the clock's value when its item entered (default:
        the model's own clock, which only commands move). :attr:`last` holds the decision (or None)."""
        frame = bytes(frame)
        meta = parse(frame, self.tag, early=True)
        self.tag = (self.tag + 1) & 0xFFFF
        t = self.now if now is None else now % (1 << self.tb)
        selb = bool(meta["roce"] and meta["kind"] == DATA and meta["udp_csum"] == 0)
        flow = meta["flow_hash"] % self.nf
        port_path = meta["udp_sport"] % self.n
        path = self.mirror.get(flow, port_path)
        res = self.cluster.process({"kind": meta["kind"], "tag": meta["tag"], "path": path})
        if selb:
            self.last = self.reroute.process({"kind": meta["kind"], "tag": meta["tag"], "flow": flow, "now": t,
                                              "path": path, "congested": res["congested"], "alt": res["alt"],
                                              "shortest": res["shortest"]})
            self.mirror[flow] = self.last["path"]
            xor = port_path ^ self.last["path"]
        else:
            self.last = None
            self.counters["skipped"] += 1
            xor = 0
        action = {"tag": 0, "drop": 0, "rewrite": int(xor != 0), "l4_off": meta["l4_off"],
                  "icrc_off": meta["icrc_off"], "sport_xor": xor}
        out, self.last_bad = deparse_counted(frame, action, self.counters, cut_through=True, depth=self.depth)
        pos = meta["l4_off"] + MARK_OFFSET
        if selb and pos < len(out):
            out = bytearray(out)
            out[pos] = (out[pos] & 0xFC) | self.last["tail"] | self.last["epoch"] << 1
            out = bytes(out)
        return out
