"""Golden model of PRO's receiver in the wire (:class:`lbpipe.hdl.pro.rx_wire.ProRxWire`), on frames: the golden
parser, QP classifier, out-of-order window (:mod:`lbpipe.sim.pro.ooo`) and NAK frames (:mod:`lbpipe.sim.pro.nak`)
composed as docs/pro_rx_wire.md says.

Also here: :class:`RxControlPlane` (the commands that set a QP up: its classifier data key, its window, its NAK
context).
"""

from lbpipe.sim.packet.parser import parse
from lbpipe.sim.packet.qp_classifier import QpClassifier, QpTable, data_key
from lbpipe.sim.pro.nak import NakGen
from lbpipe.sim.pro.ooo import Ooo

__all__ = ["ProRxWireModel", "RxControlPlane", "TABLE_OOO_BASE", "TABLE_NAK_BASE"]

# The datasheet's address map, written again here (not imported from the RTL).
TABLE_OOO_BASE = 16
TABLE_NAK_BASE = 32
DATA = 1            # PacketKind.DATA (docs/packet_io.md)


class ProRxWireModel:
    """Frames in; the host frame and the NAK frames out, bit for bit as the hardware (parameters as
    :class:`ProRxWire`).

    :meth:`receive` gives ``(host frame, NAK frames)`` for one frame, :meth:`timeout` the NAK frames of one QP
    timeout on ``tmo``; :meth:`process` (``lbpipe replay``) the frame followed by its NAK frames."""

    def __init__(self, *, n_qps=10240, bitmap_len=32, buckets=4096, ways=4, ipv6=True):
        self.classifier = QpClassifier(n_entries=n_qps, buckets=buckets, ways=ways, ipv6=ipv6)
        self.ooo = Ooo(n_qps=n_qps, bitmap_len=bitmap_len)
        self.nak = NakGen(n_qps=n_qps)
        self.qp_mask = (1 << max(1, (n_qps - 1).bit_length())) - 1
        self.reset()

    def reset(self):
        """Hardware reset: counters clear, every window becomes unknown (pro-ooo's sweep); the classifier's table
        and the NAK contexts stay."""
        self.classifier.reset()
        self.ooo.reset()
        self.nak.reset()
        self.tag = 0
        self.passed = 0

    def control(self, cmd):
        """Tables 0 to 15 to the classifier, 16 to 31 to pro-ooo, 32 to 47 to pro-nak (less the base), others
        ignored."""
        table = cmd["table"]
        if table < TABLE_OOO_BASE:
            self.classifier.control(cmd)
        elif table < TABLE_NAK_BASE:
            self.ooo.control(dict(cmd, table=table - TABLE_OOO_BASE))
        elif table < TABLE_NAK_BASE + 16:
            self.nak.control(dict(cmd, table=table - TABLE_NAK_BASE))

    def stats(self):
        nak = self.nak.stats()
        return (self.classifier.stats() + self.ooo.stats() + [nak[0], nak[1], nak[3]]
                + [self.passed % (1 << 32)])

    def _event(self, item):
        out = self.ooo.process(item)
        if not out["nack"]:
            return []
        return self.nak.process({"qp": out["qp"], "nack": 1, "psn": out["nack_psn"]})

    def receive(self, frame):
        """``(frame, NAK frames)`` for one received frame (bytes)."""
        frame = bytes(frame)
        meta = parse(frame, self.tag)
        self.tag = (self.tag + 1) & 0xFFFF
        item = {name: meta[name] for name in ("kind", "ipv6", "src_ip", "dst_ip", "dqpn", "psn", "msn", "tag")}
        res = self.classifier.process(item)
        if not (res["qp_hit"] and meta["kind"] == DATA):
            self.passed += 1
            return frame, []
        return frame, self._event({"kind": DATA, "timeout": 0, "qp": res["qp"], "psn": meta["psn"],
                                   "tag": meta["tag"]})

    def timeout(self, qp):
        """The NAK frames of a timeout of QP index ``qp`` (offered on ``tmo``)."""
        return self._event({"kind": 0, "timeout": 1, "qp": qp & self.qp_mask, "psn": 0, "tag": 0})

    def process(self, frame):
        """The frames that leave for ``frame``: the frame itself (``m_axis``), then its NAK frames
        (``m_axis_nak``)."""
        return [f for _, f in self.process_ports(frame)]

    def process_ports(self, frame):
        """``[(port, frame)]`` that leave for ``frame``: the frame on ``m_axis``, then its NAK frames on
        ``m_axis_nak``."""
        host, naks = self.receive(frame)
        return [("m_axis", host)] + [("m_axis_nak", nak) for nak in naks]


class RxControlPlane:
    """Commands for :class:`ProRxWire`: a QP (local address, local QPN) installed in the classifier with its index,
    its window created (first expected PSN, initial ``wnd``) and its NAK context written."""

    def __init__(self, *, n_qps=10240, buckets=4096, ways=4, ipv6=True):
        self.table = QpTable(n_entries=n_qps, buckets=buckets, ways=ways, ipv6=ipv6)

    def classify(self, qp, local_ip, local_qpn):
        return self.table.insert(data_key(local_ip, local_qpn), qp)

    @staticmethod
    def create(qp, first_psn, wnd):
        return [{"table": TABLE_OOO_BASE + 0, "index": qp, "data": (first_psn % (1 << 24)) | wnd << 24}]

    @staticmethod
    def destroy(qp):
        return [{"table": TABLE_OOO_BASE + 1, "index": qp, "data": 0}]

    @staticmethod
    def nak_context(qp, *, dmac, smac, sip, dip, sport, dqpn, pkey=0xFFFF, valid=True):
        """The NAK context (docs/pro_rx_wire.md, pro-nak tables 0 to 3, table 3 last) at tables 32 to 35."""
        return [
            {"table": TABLE_NAK_BASE + 0, "index": qp, "data": dmac | sport << 48},
            {"table": TABLE_NAK_BASE + 1, "index": qp, "data": smac},
            {"table": TABLE_NAK_BASE + 2, "index": qp, "data": sip | dip << 32},
            {"table": TABLE_NAK_BASE + 3, "index": qp, "data": dqpn | pkey << 24 | int(bool(valid)) << 63},
        ]

    def add_qp(self, qp, *, local_ip, local_qpn, first_psn, wnd, **nak):
        """Every command that sets QP index ``qp`` up: NAK context, window, then the classifier key last (frames
        reach the window only once everything behind the classifier is in place)."""
        return self.nak_context(qp, **nak) + self.create(qp, first_psn, wnd) + self.classify(qp, local_ip,
                                                                                             local_qpn)
