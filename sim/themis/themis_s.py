"""Golden model of Themis-S, the source-ToR half of Themis (paper 001, section 3.2).

Bit-exact, transaction-level twin of :class:`lbpipe.hdl.themis.themis_s.ThemisS`: the same items in give the same items
out, in the same order. See docs/themis.md for the choices made where the paper is silent.
"""

from lbpipe.hdl.lib.meta import PacketKind

__all__ = ["ThemisS", "TABLE_PATHMAP", "MODES"]

#: Control table number of the PathMap.
TABLE_PATHMAP = 0

#: ``port``: two-tier leaf-spine, PathMap[absolute path] is the egress port.
#: ``sport``: multi-tier, PathMap[PSN mod N] is an XOR delta applied to the UDP source port (relative path control).
MODES = ("port", "sport")


class ThemisS:
    """PSN-based spraying: ``path = (PSN mod N + Pbase) mod N`` with ``Pbase = flow_hash mod N``.

    Parameters
    ----------
    n_paths : int
        N, the number of equal-cost paths, 1 to 256 (not only powers of two).
    mode : str
        One of :data:`MODES`.
    hash_bits : int
        Width of the flow hash the parser supplies.
    """

    def __init__(self, *, n_paths=256, mode="sport", hash_bits=16):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if not 1 <= n_paths <= 256:
            raise ValueError(f"n_paths must be 1 to 256, not {n_paths}")
        self.n_paths = n_paths
        self.mode = mode
        self.hash_bits = hash_bits
        self.pathmap = [0] * self.n_paths
        self.counts = [0, 0]

    def reset(self):
        """Hardware reset: the pipeline empties and the counters clear; the PathMap keeps its contents (it is a
        memory, not a register)."""
        self.counts = [0, 0]

    def stats(self):
        """The statistics counters, as the RTL's ``stats`` port holds them: sprayed, passed (modulo 2**32)."""
        return [c % (1 << 32) for c in self.counts]

    def control(self, cmd):
        """Apply one control command ``{"table", "index", "data"}``; commands it does not know are ignored."""
        if cmd["table"] == TABLE_PATHMAP and cmd["index"] < self.n_paths:
            self.pathmap[cmd["index"]] = cmd["data"] & 0xFFFF

    def process(self, item):
        """Return the output item for one input item (a dict of the input layout's fields)."""
        out = dict(item)
        out.update(sprayed=0, path=0, egress_port=0, udp_sport_xor=0)
        if item["kind"] != PacketKind.DATA.value:
            self.counts[1] += 1
            return out
        self.counts[0] += 1
        rel = item["psn"] % self.n_paths
        path = (rel + item["flow_hash"] % self.n_paths) % self.n_paths
        out["sprayed"] = 1
        out["path"] = path
        if self.mode == "port":
            out["egress_port"] = self.pathmap[path]
        else:
            out["udp_sport"] = item["udp_sport"] ^ self.pathmap[rel]
            out["udp_sport_xor"] = self.pathmap[rel]
        return out
