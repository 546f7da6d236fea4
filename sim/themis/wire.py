"""Golden models of Themis in the wire: :class:`lbpipe.hdl.themis.wire.ThemisSWire` (parser, Themis-S, deparser)
and :class:`lbpipe.hdl.themis.wire.ThemisDWire` (parser, QP classifier, Themis-D, compensator), on frames."""

from lbpipe.hdl.themis.themis_d import check_parameters as check_themis_d
from lbpipe.hdl.themis.wire import TABLE_THEMIS_D_BASE
from lbpipe.sim.packet.compensator import Compensator
from lbpipe.sim.packet.deparser import deparse_counted
from lbpipe.sim.packet.parser import parse
from lbpipe.sim.packet.qp_classifier import QpClassifier
from lbpipe.sim.themis.themis_d import ThemisD
from lbpipe.sim.themis.themis_s import ThemisS

__all__ = ["ThemisSWireModel", "ThemisDWireModel"]


class ThemisSWireModel:
    """Frames in, frames out, bit for bit as the hardware: the parser's item goes through Themis-S
    (``mode="sport"``) and the deparser rewrites the UDP source port of sprayed RoCEv2 frames. Cut-through (the
    default): early items, the cut-through deparser, a sprayed frame with a non-zero UDP checksum left unchanged;
    :attr:`last_bad` says whether the last frame processed leaves bad (``tuser`` bit 0 on its last beat)."""

    def __init__(self, *, n_paths=256, depth=256, cut_through=True, fcs=False):
        self.themis = ThemisS(n_paths=n_paths, mode="sport", hash_bits=16)
        self.depth = depth
        self.cut_through = cut_through
        self.fcs = fcs
        self.reset()

    def reset(self):
        self.themis.reset()
        self.tag = 0
        self.counters = {"cut": 0, "refused": 0, "bad": 0, "checksum": 0}
        self.last_bad = False

    def control(self, cmd):
        self.themis.control(cmd)

    def stats(self):
        """Themis-S's counters, then the deparser's (cut, refused, bad), then the checksum declines."""
        c = self.counters
        return self.themis.stats() + [c["cut"], c["refused"], c["bad"], c["checksum"]]

    def process(self, frame):
        """The frame that leaves for ``frame`` (bytes)."""
        meta = parse(bytes(frame), self.tag, early=self.cut_through, fcs=self.fcs)
        self.tag = (self.tag + 1) & 0xFFFF
        result = self.themis.process({"kind": meta["kind"], "psn": meta["psn"], "flow_hash": meta["flow_hash"],
                                      "udp_sport": meta["udp_sport"], "tag": meta["tag"]})
        wanted = bool(meta["roce"] and result["sprayed"] and result["udp_sport_xor"])
        declined = (self.cut_through or self.fcs) and wanted and meta["udp_csum"] != 0
        self.counters["checksum"] += declined
        action = {
            "tag": meta["tag"], "drop": 0, "rewrite": int(wanted and not declined),
            "l4_off": meta["l4_off"], "icrc_off": meta["icrc_off"], "sport_xor": result["udp_sport_xor"],
        }
        out, self.last_bad = deparse_counted(bytes(frame), action, self.counters, cut_through=self.cut_through,
                                             depth=self.depth, fcs=self.fcs)
        return out


class ThemisDWireModel:
    """Frames in, frames out, as :class:`lbpipe.hdl.themis.wire.ThemisDWire`: the parser's item goes through the QP
    classifier and Themis-D, and the compensator applies Themis-D's decision to the frame. :meth:`process` returns
    a list: nothing for a blocked NACK, the frame, or the frame and a compensation NACK after it."""

    def __init__(self, *, n_qps=1600, queue_depth=100, n_paths=256, entry_bits=9, buckets=4096, ways=4,
                 ipv6=True, depth=256):
        check_themis_d(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)
        self.classifier = QpClassifier(n_entries=n_qps, buckets=buckets, ways=ways, ipv6=ipv6)
        self.themis = ThemisD(n_qps=n_qps, queue_depth=queue_depth, n_paths=n_paths, entry_bits=entry_bits)
        self.comp = Compensator(n_qps=n_qps, depth=depth)
        self.tag = 0

    def reset(self):
        """Hardware reset: the classifier's and the compensator's tables stay, Themis-D's flow table clears."""
        self.classifier.reset()
        self.themis.reset()
        self.comp.reset()
        self.tag = 0

    def control(self, cmd):
        """Tables 0 to 15 to the classifier, 16 to 31 to Themis-D (as ``table - 16``), others ignored."""
        table = cmd["table"]
        if table < TABLE_THEMIS_D_BASE:
            self.classifier.control(cmd)
        elif table < 2 * TABLE_THEMIS_D_BASE:
            self.themis.control(dict(cmd, table=table - TABLE_THEMIS_D_BASE))

    def stats(self):
        themis = self.themis.stats()
        return self.classifier.stats() + themis[:8] + self.comp.stats() + themis[8:]

    def decide(self, frame):
        """Themis-D's result for ``frame`` (advancing the state as :meth:`process` does)."""
        meta = parse(bytes(frame), self.tag)
        self.tag = (self.tag + 1) & 0xFFFF
        item = {name: meta[name] for name in ("kind", "ipv6", "src_ip", "dst_ip", "dqpn", "psn", "msn", "tag")}
        return self.themis.process(self.classifier.process(item))

    def process(self, frame):
        """The frames (a list of ``bytes``) that leave for ``frame``."""
        result = self.decide(frame)
        return self.comp.process(frame, {"tag": result["tag"], "drop": result["drop"], "record": result["arm"],
                                         "comp": result["comp"], "qp": result["qp"]})
