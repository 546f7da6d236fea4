"""The registry of lbpipe blocks: parameters, hardware, golden model, testbench and paper figures of each.

Every CLI command and every generic test iterates this registry, so a new block is added here once and gets
Verilog generation, synthesis reports, trace replay and the generic RTL-versus-golden tests for free.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

__all__ = ["Param", "Block", "BLOCKS", "get_block", "parse_params"]


@dataclass(frozen=True)
class Param:
    """One elaboration parameter of a block."""
    name: str
    default: Any
    help: str
    choices: Optional[tuple] = None

    def parse(self, text):
        """Convert a command-line string to this parameter's type."""
        if isinstance(self.default, bool):
            value = text.lower() in ("1", "true", "yes", "on")
        elif isinstance(self.default, int):
            try:
                value = int(text, 0)
            except ValueError:
                raise ValueError(f"parameter {self.name} takes an integer, not {text!r}") from None
        else:
            value = text
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"parameter {self.name} must be one of {self.choices}, not {value!r}")
        return value


@dataclass(frozen=True)
class Block:
    """Everything lbpipe knows about one block.

    ``build(**params)`` returns the Amaranth component (ports ``i``, ``o``, ``ctl``); ``golden(**params)`` the
    golden model (``control``, ``process``, ``reset`` and optionally ``cycles``); ``tb_module`` is the cocotb module
    with the generic ``trace`` and ``reset_mid_traffic`` tests; ``paper`` holds the paper's figures for the synthesis report;
    ``report_extra(params, component)`` returns extra report lines (label -> text).
    """
    name: str
    summary: str
    paper_ref: str
    params: List[Param]
    build: Callable
    golden: Optional[Callable]
    tb_module: str
    doc: str
    #: ``"meta"``: ports ``i``/``o``/``ctl`` carrying metadata items (traces, replay, generic tests, benchmarks);
    #: ``"packet"``: AXI4-Stream packet I/O stages, with their own testbenches (Verilog and synthesis only here).
    interface: str = "meta"
    #: Where a packet block's golden model lives (documentation and the completeness test).
    golden_ref: Optional[str] = None
    paper: Dict[str, Any] = field(default_factory=dict)
    #: Small parameter sets the generic tests run RTL against golden on (fast to simulate, corner values).
    test_params: List[Dict[str, Any]] = field(default_factory=list)
    #: ``f(random.Random) -> params`` for the long random regression.
    random_params: Optional[Callable] = None
    report_extra: Optional[Callable] = None
    synth_nolutram: bool = False
    #: Packet pipelines: ``"module:function"`` of ``f(seed, n_frames, **params) -> (commands, frames)``, the seeded
    #: traffic ``lbpipe trace`` writes as a pcap file and its control commands.
    pcap_trace: Optional[str] = None

    @property
    def is_meta(self):
        return self.interface == "meta"

    def layouts(self, params):
        """``(input layout, output layout, control layout, component)`` of the block built with ``params``.

        The component is built only to read its signature, so Amaranth's unused-elaboratable warning is silenced.
        """
        component = self.build(**params)
        component._MustUse__silence = True
        members = component.signature.members
        return (members["i"].signature.members["payload"].shape,
                members["o"].signature.members["payload"].shape,
                members["ctl"].signature.members["payload"].shape,
                component)

    def defaults(self):
        return {p.name: p.default for p in self.params}

    def resolve(self, overrides=None):
        """Defaults updated with ``overrides`` (a dict of already-typed values); unknown names raise."""
        params = self.defaults()
        for name, value in (overrides or {}).items():
            if name not in params:
                raise ValueError(f"block {self.name} has no parameter {name!r}; it has {sorted(params)}")
            params[name] = value
        return params


def parse_params(block, assignments):
    """Parse ``["NAME=VALUE", ...]`` for ``block`` into a typed dict."""
    by_name = {p.name: p for p in block.params}
    out = {}
    for text in assignments or []:
        if "=" not in text:
            raise ValueError(f"--param takes NAME=VALUE, not {text!r}")
        name, value = text.split("=", 1)
        if name not in by_name:
            raise ValueError(f"block {block.name} has no parameter {name!r}; it has {sorted(by_name)}")
        out[name] = by_name[name].parse(value)
    return out


def _load(path):
    """``"lbpipe.hdl.themis_s:ThemisS"`` -> a callable that imports and calls it (imports stay lazy, so listing
    blocks does not load Amaranth)."""
    module, name = path.split(":")

    def make(**params):
        import importlib
        return getattr(importlib.import_module(module), name)(**params)
    make.__qualname__ = path
    return make


# -- Themis ----------------------------------------------------------------------------------------------------------

def _themis_s_extra(params, component):
    pathmap_bytes = params["n_paths"] * 2
    return {"PathMap": f"{params['n_paths']} x 16 bit = {pathmap_bytes} B "
                       f"(paper, section 4: N_paths x 2 B = {params['n_paths'] * 2} B)"}


def _themis_d_extra(params, component):
    from .sim.themis_d import REFERENCE, paper_memory_bytes
    bits = component.memory_bits
    ref = dict(REFERENCE)
    paper_d = paper_memory_bytes(**ref) - ref["n_paths"] * 2
    paper_total = paper_memory_bytes(**ref)
    lines = {
        "Themis-D memory (flow table + PSN queues)":
            f"{bits} bits = {bits / 8 / 1000:.1f} kB for {params['n_qps']} QPs x {params['queue_depth']} entries x "
            f"{params['entry_bits']} bit",
        "Paper, Eq. 4 at Table 1 values":
            f"{paper_total / 1000:.1f} kB in all ({paper_d / 1000:.1f} kB Themis-D + "
            f"{ref['n_paths'] * 2} B PathMap); the paper's 20 B flow entry includes a 13 B QP ID that lbpipe keeps "
            f"in the upstream QP classifier",
        "Ratio to the paper's Themis-D figure": f"{bits / 8 / paper_d:.3f}x",
    }
    return lines


_THEMIS_REFERENCE_QPS = 16 * 100


# -- QP classifier ---------------------------------------------------------------------------------------------------

def _qp_classifier_extra(params, component):
    from .hdl.qp_classifier import QpSlot
    slot_bits = QpSlot(n_entries=params["n_entries"], ipv6=params["ipv6"]).size
    bits = component.memory_bits
    keys = 2 * params["n_entries"]
    return {
        "Table": f"{params['ways']} ways x {params['buckets']} slots x {slot_bits} bit = {bits / 8 / 1000:.1f} kB; "
                 f"{params['n_entries']} QPs take {keys} slots ({100 * keys / component.slots:.0f}% load)",
        "Paper, section 4": f"13 B QP ID per flow entry: {13 * params['n_entries'] / 1000:.1f} kB for "
                            f"{params['n_entries']} QPs; lbpipe matches two full keys per QP (one per direction), "
                            f"exactly, IPv6 included",
    }

BLOCKS = {
    "themis-s": Block(
        name="themis-s",
        summary="Themis source ToR: PSN-based packet spraying through a PathMap",
        paper_ref="Themis (APNet 2025), section 3.2",
        params=[
            Param("n_paths", 256, "equal-cost paths N, 1 to 256 (any value, not only powers of two)"),
            Param("mode", "sport", "port: PathMap gives the egress port (two-tier); sport: PathMap gives a UDP "
                                   "source port XOR delta (multi-tier)", choices=("port", "sport")),
            Param("hash_bits", 16, "width of the flow hash supplied by the parser"),
        ],
        build=_load("lbpipe.hdl.themis_s:ThemisS"),
        golden=_load("lbpipe.sim.themis_s:ThemisS"),
        test_params=[
            dict(n_paths=256, mode="sport", hash_bits=16),
            dict(n_paths=7, mode="port", hash_bits=16),
            dict(n_paths=1, mode="sport", hash_bits=8),
            dict(n_paths=200, mode="port", hash_bits=32),
        ],
        random_params=lambda rng: dict(n_paths=rng.randrange(1, 257), mode=rng.choice(["port", "sport"]),
                                       hash_bits=rng.randrange(1, 33)),
        tb_module="lbpipe.tb.themis_s.test_themis_s",
        doc="docs/themis.md",
        paper={"memory": "512 B PathMap (N=256)"},
        report_extra=_themis_s_extra,
    ),
    "themis-d": Block(
        name="themis-d",
        summary="Themis destination ToR: PSN queue, NACK validation and NACK compensation",
        paper_ref="Themis (APNet 2025), sections 3.3, 3.4, 4",
        params=[
            Param("n_qps", _THEMIS_REFERENCE_QPS, "flow-table entries (cross-rack QPs: 16 NICs x 100 QPs)"),
            Param("queue_depth", 100, "PSN-queue entries per QP: ceil(BW x RTT_last x F / MTU) = "
                                      "ceil(400 Gb/s x 2 us x 1.5 / 1500 B) = 100"),
            Param("n_paths", 256, "equal-cost paths N, 1 to 256"),
            Param("entry_bits", 9, "low PSN bits per queue entry (9 fits BRAM's 9-bit bytes; the paper uses 8)"),
        ],
        build=_load("lbpipe.hdl.themis_d:ThemisD"),
        golden=_load("lbpipe.sim.themis_d:ThemisD"),
        test_params=[
            dict(n_qps=8, queue_depth=12, n_paths=5, entry_bits=6),
            dict(n_qps=5, queue_depth=7, n_paths=256, entry_bits=9),
            dict(n_qps=3, queue_depth=4, n_paths=2, entry_bits=3),
            dict(n_qps=4, queue_depth=20, n_paths=1, entry_bits=8),
            dict(n_qps=6, queue_depth=100, n_paths=200, entry_bits=9),
        ],
        random_params=lambda rng: dict(n_qps=rng.randrange(1, 40), queue_depth=rng.randrange(1, 120),
                                       n_paths=rng.randrange(1, 257), entry_bits=rng.randrange(2, 13)),
        tb_module="lbpipe.tb.themis_d.test_themis_d",
        doc="docs/themis.md",
        paper={"memory": "193 kB (Eq. 4, Table 1)"},
        report_extra=_themis_d_extra,
    ),
    "qp-classifier": Block(
        name="qp-classifier",
        summary="Exact-match QP classifier: RoCEv2 connection key to flow-table index (Themis-D's qp, qp_hit)",
        paper_ref="Themis (APNet 2025), section 4 (the flow entry's QP ID, kept upstream of Themis-D)",
        params=[
            Param("n_entries", 4096, "flow-table entries the qp output indexes (QPs; each takes two slots)"),
            Param("buckets", 4096, "slots per way, a power of two (4 x 4096 slots: 4096 QPs at 50% load)"),
            Param("ways", 4, "ways, each with its own H3 hash (the control plane relocates keys between them)"),
            Param("ipv6", True, "store 128-bit addresses (IPv4 and IPv6 keys); false: 32-bit, IPv4 keys only"),
            Param("user_bits", 0, "width of the opaque user pass-through field (0: none)"),
        ],
        build=_load("lbpipe.hdl.qp_classifier:QpClassifier"),
        golden=_load("lbpipe.sim.qp_classifier:QpClassifier"),
        test_params=[
            dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=0),
            dict(n_entries=40, buckets=4, ways=3, ipv6=False, user_bits=5),
            dict(n_entries=5, buckets=16, ways=1, ipv6=True, user_bits=0),
            dict(n_entries=29, buckets=2, ways=8, ipv6=True, user_bits=0),
        ],
        random_params=lambda rng: dict(n_entries=rng.randrange(1, 300), buckets=1 << rng.randrange(1, 7),
                                       ways=rng.randrange(1, 9), ipv6=rng.random() < 0.5,
                                       user_bits=rng.choice([0, 1, 9])),
        tb_module="lbpipe.tb.test_qp_classifier",
        doc="docs/qp_classifier.md",
        paper={"memory": "13 B QP ID per flow entry (section 4)"},
        report_extra=_qp_classifier_extra,
    ),
    "deparser": Block(
        name="deparser",
        summary="Packet I/O: store-and-forward rewrite of frames from per-frame actions (UDP source port with "
                "incremental ICRC and UDP checksum updates, drop)",
        paper_ref="RoCEv2 (IBA annex A17), RFC 1624",
        params=[
            Param("depth", 256, "frame buffer in 64-byte beats (the largest frame is depth x 64 bytes)"),
            Param("pending", 32, "frames whose action has not arrived yet"),
            Param("user_width", 1, "width of the AXI4-Stream tuser"),
        ],
        build=_load("lbpipe.hdl.deparser:Deparser"),
        golden=None,
        golden_ref="lbpipe.sim.deparser:deparse",
        tb_module="lbpipe.tb.test_deparser",
        doc="docs/packet_io.md",
        interface="packet",
    ),
    "themis-s-wire": Block(
        name="themis-s-wire",
        summary="Themis-S as a bump in the wire: parser -> Themis-S (sport mode) -> deparser, 512-bit AXI4-Stream",
        paper_ref="Themis (APNet 2025), section 3.2, on RoCEv2 frames",
        params=[
            Param("n_paths", 256, "equal-cost paths N, 1 to 256"),
            Param("depth", 256, "deparser frame buffer, in 64-byte beats"),
        ],
        build=_load("lbpipe.hdl.themis_wire:ThemisSWire"),
        golden=_load("lbpipe.sim.themis_wire:ThemisSWireModel"),
        golden_ref="lbpipe.sim.themis_wire:ThemisSWireModel",
        tb_module="lbpipe.tb.test_themis_wire",
        doc="docs/packet_io.md",
        interface="packet",
        pcap_trace="lbpipe.tb.test_themis_wire:pcap_trace",
    ),
    "themis-d-wire": Block(
        name="themis-d-wire",
        summary="Themis-D as a bump in the wire: parser -> QP classifier -> Themis-D -> compensator (blocked NACKs "
                "dropped, compensation NACKs sent), 512-bit AXI4-Stream",
        paper_ref="Themis (APNet 2025), sections 3.3-3.4, on RoCEv2 frames",
        params=[
            Param("n_qps", 1600, "flow-table entries (cross-rack QPs), 1 to 65536"),
            Param("queue_depth", 100, "PSN-queue entries per QP, 1 to 255"),
            Param("n_paths", 256, "equal-cost paths N, 1 to 256"),
            Param("entry_bits", 9, "low PSN bits per queue entry, 2 to 24"),
            Param("buckets", 4096, "QP classifier slots per way, a power of two"),
            Param("ways", 4, "QP classifier ways, 1 to 8"),
            Param("ipv6", True, "QP classifier keys hold 128-bit addresses (IPv4 and IPv6) or 32-bit ones"),
            Param("depth", 256, "compensator frame buffer, in 64-byte beats"),
        ],
        build=_load("lbpipe.hdl.themis_wire:ThemisDWire"),
        golden=_load("lbpipe.sim.themis_wire:ThemisDWireModel"),
        golden_ref="lbpipe.sim.themis_wire:ThemisDWireModel",
        tb_module="lbpipe.tb.test_themis_d_wire",
        doc="docs/packet_io.md",
        interface="packet",
        pcap_trace="lbpipe.tb.test_themis_d_wire:pcap_trace",
    ),
    "compensator": Block(
        name="compensator",
        summary="Packet I/O: Themis-D's frame end: drops blocked NACKs, records the NACK that armed compensation, "
                "sends it again on compensation",
        paper_ref="Themis (APNet 2025), section 3.4",
        params=[
            Param("n_qps", 1600, "per-QP NACK templates, 1 to 65536"),
            Param("depth", 256, "frame buffer in 64-byte beats"),
            Param("user_width", 1, "width of the AXI4-Stream tuser"),
        ],
        build=_load("lbpipe.hdl.compensator:Compensator"),
        golden=None,
        golden_ref="lbpipe.sim.compensator:Compensator",
        tb_module="lbpipe.tb.test_compensator",
        doc="docs/packet_io.md",
        interface="packet",
    ),
    "laps-editor": Block(
        name="laps-editor",
        summary="Packet I/O: LAPS header insert, remove and update (the deparser side of the LAPS shim), lengths "
                "and checksums kept right, 512-bit AXI4-Stream",
        paper_ref="LAPS (IEEE ToN), section III-B",
        params=[
            Param("depth", 256, "frame buffer in 64-byte beats (the longest frame in and out)"),
            Param("user_width", 1, "width of the AXI4-Stream tuser"),
            Param("laps_port", 0xC1A5, "UDP destination port INSERT writes, 1 to 65535 but not 4791"),
        ],
        build=_load("lbpipe.hdl.laps_editor:LapsEditor"),
        golden=None,
        golden_ref="lbpipe.sim.laps_editor:LapsEditor",
        tb_module="lbpipe.tb.test_laps_editor",
        doc="docs/packet_io.md",
        interface="packet",
    ),
    "parser": Block(
        name="parser",
        summary="Packet I/O: 512-bit AXI4-Stream frames to RoCEv2 and LAPS packet metadata, frames passed through "
                "unchanged",
        paper_ref="RoCEv2 (IBA annex A17); LAPS (paper 000, section III-B) as a UDP shim; feeds every block",
        params=[
            Param("user_width", 1, "width of the AXI4-Stream tuser, carried with the frame"),
            Param("laps_port", 0xC1A5, "UDP destination port of the LAPS shim, 1 to 65535 but not 4791 "
                                       "(default 49573, RFC 6335 dynamic range)"),
        ],
        build=_load("lbpipe.hdl.parser:Parser"),
        golden=None,
        golden_ref="lbpipe.sim.parser:parse",
        tb_module="lbpipe.tb.test_parser",
        doc="docs/packet_io.md",
        interface="packet",
    ),
}


def get_block(name):
    """The :class:`Block` called ``name``; raises ``KeyError`` listing the known blocks."""
    try:
        return BLOCKS[name]
    except KeyError:
        raise KeyError(f"unknown block {name!r}; known blocks: {', '.join(sorted(BLOCKS))}") from None
