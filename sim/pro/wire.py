"""Golden model of PRO's sender in the wire (:class:`lbpipe.hdl.pro.wire.ProTxWire`), on frames: the golden parser,
QP classifier, round robin (:mod:`lbpipe.sim.pro.rr`) and deparser composed as docs/pro_wire.md says.

Also here: :class:`TxControlPlane` (the commands that install a QP: its classifier key, valued ``tor << qp_bits |
qp``, then its join).
"""

from lbpipe.sim.packet.deparser import deparse_counted
from lbpipe.sim.packet.parser import parse
from lbpipe.sim.packet.qp_classifier import QpClassifier, QpTable, data_key
from lbpipe.sim.pro.rr import RoundRobin

__all__ = ["ProTxWireModel", "TxControlPlane", "TABLE_RR_BASE"]

# The datasheet's address map, written again here (not imported from the RTL).
TABLE_RR_BASE = 16
DATA = 1            # PacketKind.DATA (docs/packet_io.md)


def _bits(n):
    return max(1, (n - 1).bit_length())


class ProTxWireModel:
    """Frames in, frames out, bit for bit as the hardware (parameters as :class:`ProTxWire`).
    :attr:`last_bad` says whether the last frame leaves bad (cut-through: ``tuser`` bit 0 on its last beat)."""

    def __init__(self, *, n_qps=10240, n_tors=16, m_paths=8, batch=1, buckets=4096, ways=4, ipv6=True,
                 depth=256, cut_through=True):
        self.qb = _bits(n_qps)
        self.classifier = QpClassifier(n_entries=1 << (self.qb + _bits(n_tors)), buckets=buckets, ways=ways,
                                       ipv6=ipv6)
        self.rr = RoundRobin(n_qps=n_qps, n_tors=n_tors, m_paths=m_paths, batch=batch)
        self.depth = depth
        self.cut_through = cut_through
        self.tor_mask = (1 << _bits(n_tors)) - 1
        self.reset()

    def reset(self):
        """Hardware reset: counters clear, the round robin's run-time state clears (its PathIDs and the
        classifier's table stay)."""
        self.classifier.reset()
        self.rr.reset()
        self.tag = 0
        self.counters = {"cut": 0, "refused": 0, "bad": 0, "unscheduled": 0, "checksum": 0}
        self.last_bad = False

    def control(self, cmd):
        """Tables 0 to 15 to the classifier, 16 to 31 to the round robin (as ``table - 16``), others ignored."""
        table = cmd["table"]
        if table < TABLE_RR_BASE:
            self.classifier.control(cmd)
        elif table < 2 * TABLE_RR_BASE:
            self.rr.control(dict(cmd, table=table - TABLE_RR_BASE))

    def stats(self):
        c = self.counters
        return (self.classifier.stats() + self.rr.stats() + [c["cut"], c["refused"], c["bad"]]
                + [c["unscheduled"] % (1 << 32), c["checksum"] % (1 << 32)])

    def decide(self, frame):
        """``(meta, rr result or None)`` for ``frame``, advancing the state as :meth:`process` does."""
        meta = parse(bytes(frame), self.tag, early=self.cut_through)
        self.tag = (self.tag + 1) & 0xFFFF
        item = {name: meta[name] for name in ("kind", "ipv6", "src_ip", "dst_ip", "dqpn", "psn", "msn", "tag")}
        res = self.classifier.process(item)
        if not (res["qp_hit"] and meta["kind"] == DATA and meta["roce"]):
            self.counters["unscheduled"] += 1
            return meta, None
        value = res["qp"]
        return meta, self.rr.process({"kind": meta["kind"], "qp": value & ((1 << self.qb) - 1),
                                      "tor": (value >> self.qb) & self.tor_mask, "tag": meta["tag"]})

    def process(self, frame):
        """The frame that leaves for ``frame`` (bytes), or None if the deparser cuts it (store-and-forward)."""
        meta, result = self.decide(frame)
        xor = ((meta["udp_sport"] & 0xFFF) ^ result["path_id"]) if result else 0
        wanted = bool(result and result["hit"] and meta["roce"] and xor)
        declined = self.cut_through and wanted and meta["udp_csum"] != 0
        self.counters["checksum"] += declined
        action = {"tag": 0, "drop": 0, "rewrite": int(wanted and not declined), "l4_off": meta["l4_off"],
                  "icrc_off": meta["icrc_off"], "sport_xor": xor}
        out, self.last_bad = deparse_counted(bytes(frame), action, self.counters, cut_through=self.cut_through,
                                             depth=self.depth)
        return out


class TxControlPlane:
    """Commands for :class:`ProTxWire`: a QP (destination address, destination QPN) installed in the classifier
    with the value ``tor << qp_bits | qp`` and joined toward ``tor``; seeds and PathIDs of the round robin."""

    def __init__(self, *, n_qps=10240, n_tors=16, buckets=4096, ways=4, ipv6=True):
        self.qb = _bits(n_qps)
        self.table = QpTable(n_entries=1 << (self.qb + _bits(n_tors)), buckets=buckets, ways=ways, ipv6=ipv6)

    def add_qp(self, qp, tor, dst_ip, dqpn):
        return (self.table.insert(data_key(dst_ip, dqpn), tor << self.qb | qp)
                + [{"table": TABLE_RR_BASE + 0, "index": qp, "data": tor}])

    def leave(self, qp, tor):
        return [{"table": TABLE_RR_BASE + 1, "index": qp, "data": tor}]

    def seed(self, tor, c):
        return [{"table": TABLE_RR_BASE + 2, "index": tor, "data": c}]

    def path_id(self, tor, path, value):
        return [{"table": TABLE_RR_BASE + 3, "index": tor << 6 | path, "data": value}]
