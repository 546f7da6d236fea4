"""Golden model of :class:`lbpipe.hdl.themis_wire.ThemisSWire`: parser, Themis-S and deparser on frames."""

from .deparser import deparse
from .parser import parse
from .themis_s import ThemisS

__all__ = ["ThemisSWireModel"]


class ThemisSWireModel:
    """Frames in, frames out, bit for bit as the hardware: the parser's item goes through Themis-S
    (``mode="sport"``) and the deparser rewrites the UDP source port of sprayed RoCEv2 frames."""

    def __init__(self, *, n_paths=256, depth=256):
        self.themis = ThemisS(n_paths=n_paths, mode="sport", hash_bits=16)
        self.tag = 0

    def reset(self):
        self.themis.reset()
        self.tag = 0

    def control(self, cmd):
        self.themis.control(cmd)

    def stats(self):
        return self.themis.stats()

    def process(self, frame):
        """The frame that leaves for ``frame`` (bytes)."""
        meta = parse(bytes(frame), self.tag)
        self.tag = (self.tag + 1) & 0xFFFF
        result = self.themis.process({"kind": meta["kind"], "psn": meta["psn"], "flow_hash": meta["flow_hash"],
                                      "udp_sport": meta["udp_sport"], "tag": meta["tag"]})
        action = {
            "tag": meta["tag"], "drop": 0,
            "rewrite": int(bool(meta["roce"] and result["sprayed"] and result["udp_sport_xor"])),
            "l4_off": meta["l4_off"], "icrc_off": meta["icrc_off"], "sport_xor": result["udp_sport_xor"],
        }
        return deparse(bytes(frame), action)
