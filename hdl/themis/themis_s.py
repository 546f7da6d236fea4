"""Themis-S: PSN-based packet spraying at the source ToR (paper 001, section 3.2).

Each RoCEv2 data packet of a flow goes to path ``(PSN mod N + Pbase) mod N`` where ``Pbase = flow_hash mod N`` is
the flow's ECMP base path. The PathMap turns the path into the forwarding decision:

* ``mode="port"`` (two-tier leaf-spine, the ToR picks the spine): ``PathMap[path]`` is the egress port.
* ``mode="sport"`` (multi-tier, the paper's Figure 3): ``PathMap[PSN mod N]`` is the 16-bit delta that moves the
  packet ``PSN mod N`` paths away from its ECMP path (relative path control by hash linearity); the block XORs it
  into the UDP source port. The ICRC covers the UDP source port, so the deparser must recompute it; ``udp_sport_xor``
  carries the delta it needs for an incremental update.

Packets that are not RoCEv2 data pass untouched with ``sprayed = 0``. The parser supplies ``flow_hash``; lbpipe
does not fix the hash function, only that every packet of a QP carries the same value.

Pipeline (one item per clock, latency 5): s1 and s2 while ``ModN`` reduces PSN and hash; the PathMap read (its
address is the sum of the residues, reduced once); s4 registers the PathMap's read data and nothing else (the
block RAM's output register: the PathMap lands in a RAMB18 at N = 256, and a read that went straight into logic
would start every path about 1.5 ns late); the output register takes the decision and the XOR.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.lib import stream

from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.hdl.lib.meta import PacketKind, PSN_BITS, TAG_BITS
from lbpipe.hdl.lib.modn import ModN, residue_bits

__all__ = ["ThemisS", "ThemisSItem", "ThemisSResult", "TABLE_PATHMAP"]

TABLE_PATHMAP = 0


def ThemisSItem(*, hash_bits=16):
    """Input metadata of Themis-S."""
    return data.StructLayout({
        "kind":      PacketKind,
        "psn":       PSN_BITS,
        "flow_hash": hash_bits,
        "udp_sport": 16,
        "tag":       TAG_BITS,
    })


def ThemisSResult(*, n_paths=256, hash_bits=16):
    """Output metadata of Themis-S: the input fields (``udp_sport`` possibly rewritten) and the decision."""
    return data.StructLayout({
        **ThemisSItem(hash_bits=hash_bits).members,
        "sprayed":       1,
        "path":          residue_bits(n_paths),
        "egress_port":   16,
        "udp_sport_xor": 16,
    })


class ThemisS(wiring.Component):
    """PSN-based spraying stage.

    Parameters
    ----------
    n_paths : int
        N, 1 to 256.
    mode : str
        ``"port"`` or ``"sport"`` (see the module docstring).
    hash_bits : int
        Width of ``flow_hash``, 1 to 32.

    Members
    -------
    i : In(stream.Signature(ThemisSItem))
    o : Out(stream.Signature(ThemisSResult))
    ctl : In(ControlSignature())
        Table 0: PathMap entry ``index`` (0 to N-1) gets ``data[15:0]``. Other tables and indices are ignored.
        The PathMap is written directly and is not reset. A packet reads the PathMap two cycles after it is
        accepted; a write in the same cycle as that read is not seen by it (read-before-write).
    stats : Out(32 * 2)
        Counter 0 (bits 31:0) counts sprayed data packets, counter 1 (bits 63:32) packets passed untouched (wrapping
        at 2**32; cleared by reset). The top level maps counter ``i`` to the AXI4-Lite register STATUS_i.
    """

    latency = 5

    def __init__(self, *, n_paths=256, mode="sport", hash_bits=16):
        if not isinstance(n_paths, int) or not 1 <= n_paths <= 256:
            raise ValueError(f"n_paths must be an integer from 1 to 256, not {n_paths!r}")
        if mode not in ("port", "sport"):
            raise ValueError(f"mode must be 'port' or 'sport', not {mode!r}")
        if not isinstance(hash_bits, int) or not 1 <= hash_bits <= 32:
            raise ValueError(f"hash_bits must be an integer from 1 to 32, not {hash_bits!r}")
        self._n_paths = n_paths
        self._mode = mode
        self._hash_bits = hash_bits
        super().__init__({
            "i":   In(stream.Signature(ThemisSItem(hash_bits=hash_bits))),
            "o":   Out(stream.Signature(ThemisSResult(n_paths=n_paths, hash_bits=hash_bits))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * 2),
        })

    @property
    def n_paths(self):
        return self._n_paths

    @property
    def mode(self):
        return self._mode

    def elaborate(self, platform):
        m = Module()
        n = self._n_paths
        item_layout = ThemisSItem(hash_bits=self._hash_bits)

        # The whole pipeline advances together whenever the output register can take an item.
        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv)]

        m.submodules.psn_mod = psn_mod = ModN(width=PSN_BITS, n=n)
        m.submodules.hash_mod = hash_mod = ModN(width=self._hash_bits, n=n)
        m.d.comb += [
            psn_mod.i.eq(self.i.payload.psn), psn_mod.en.eq(adv),
            hash_mod.i.eq(self.i.payload.flow_hash), hash_mod.en.eq(adv),
        ]

        m.submodules.pathmap = pathmap = memory.Memory(shape=16, depth=n, init=[])
        wr = pathmap.write_port()
        rd = pathmap.read_port()
        m.d.comb += [
            self.ctl.ready.eq(1),
            wr.addr.eq(self.ctl.payload.index),
            wr.data.eq(self.ctl.payload.data[:16]),
            wr.en.eq(self.ctl.valid & (self.ctl.payload.table == TABLE_PATHMAP) & (self.ctl.payload.index < n)),
        ]

        s1 = Signal(item_layout)
        s1_valid = Signal()
        s2 = Signal(item_layout)
        s2_valid = Signal()
        s3 = Signal(item_layout)
        s3_valid = Signal()
        s3_path = Signal(residue_bits(n))
        s4 = Signal(item_layout)
        s4_valid = Signal()
        s4_path = Signal(residue_bits(n))
        # The PathMap's read data, registered before any logic (the block RAM's output register).
        s4_map = Signal(16)

        rel = psn_mod.o
        path_sum = Signal(range(2 * n))
        path = Signal(residue_bits(n))
        m.d.comb += [
            path_sum.eq(psn_mod.o + hash_mod.o),
            path.eq(Mux(path_sum >= n, path_sum - n, path_sum)),
            rd.addr.eq(path if self._mode == "port" else rel),
            rd.en.eq(adv),
        ]

        with m.If(adv):
            m.d.sync += [
                s1.eq(self.i.payload), s1_valid.eq(self.i.valid),
                s2.eq(s1), s2_valid.eq(s1_valid),
                s3.eq(s2), s3_valid.eq(s2_valid), s3_path.eq(path),
                s4.eq(s3), s4_valid.eq(s3_valid), s4_path.eq(s3_path), s4_map.eq(rd.data),
            ]
            is_data = s4.kind == PacketKind.DATA
            with m.If(s4_valid & is_data):
                m.d.sync += self.stats[:32].eq(self.stats[:32] + 1)
            with m.Elif(s4_valid):
                m.d.sync += self.stats[32:].eq(self.stats[32:] + 1)
            out = self.o.payload
            m.d.sync += [
                self.o.valid.eq(s4_valid),
                out.kind.eq(s4.kind), out.psn.eq(s4.psn), out.flow_hash.eq(s4.flow_hash), out.tag.eq(s4.tag),
                out.sprayed.eq(is_data),
                out.path.eq(Mux(is_data, s4_path, 0)),
            ]
            if self._mode == "port":
                m.d.sync += [
                    out.udp_sport.eq(s4.udp_sport),
                    out.egress_port.eq(Mux(is_data, s4_map, 0)),
                    out.udp_sport_xor.eq(0),
                ]
            else:
                delta = Mux(is_data, s4_map, 0)
                m.d.sync += [
                    out.udp_sport.eq(s4.udp_sport ^ delta),
                    out.egress_port.eq(0),
                    out.udp_sport_xor.eq(delta),
                ]
        return m
