"""Registry entries of Themis (APNet 2025; datasheet docs/themis.md): Themis-S, Themis-D and both in the wire."""

from .base import Block, Param, load

__all__ = ["BLOCKS"]


def _themis_s_extra(params, component):
    pathmap_bytes = params["n_paths"] * 2
    return {"PathMap": f"{params['n_paths']} x 16 bit = {pathmap_bytes} B "
                       f"(paper, section 4: N_paths x 2 B = {params['n_paths'] * 2} B)"}


def _paper_figures():
    """The paper's Eq. 4 at its Table 1 values: (total, Themis-D part, Themis-D part without the QP IDs), bytes."""
    from lbpipe.sim.themis.themis_d import REFERENCE, paper_memory_bytes
    ref = dict(REFERENCE)
    total = paper_memory_bytes(**ref)
    themis_d = total - ref["n_paths"] * 2
    qps = ref["n_nic"] * ref["n_qp_per_nic"]
    # The paper's 20 B flow entry holds a 13 B QP ID (section 4), which lbpipe keeps in the QP classifier.
    return total, themis_d, themis_d - 13 * qps


def _themis_d_extra(params, component):
    bits = component.memory_bits
    total, paper_d, paper_d_no_id = _paper_figures()
    return {
        "Themis-D memory (flow table + PSN queues)":
            f"{bits} bits = {bits / 8 / 1000:.1f} kB for {params['n_qps']} QPs x {params['queue_depth']} entries x "
            f"{params['entry_bits']} bit",
        "Paper, Eq. 4 at Table 1 values":
            f"{total / 1000:.1f} kB in all ({paper_d / 1000:.1f} kB Themis-D + 512 B PathMap); the paper's 20 B flow "
            f"entry includes a 13 B QP ID that lbpipe keeps in the upstream QP classifier",
        "Like for like: Themis-D without QP IDs":
            f"{bits / 8 / 1000:.1f} kB against the paper's {paper_d_no_id / 1000:.1f} kB "
            f"({bits / 8 / paper_d_no_id:.3f}x); the whole themis-d-wire (QP IDs included) is in its own row",
    }


def _themis_d_wire_extra(params, component):
    total, paper_d, _ = _paper_figures()
    parts = {"QP classifier (QP IDs, both directions)": component._classifier.memory_bits,
             "Themis-D (flow table + PSN queues)": component._themis.memory_bits,
             "compensator NACK templates": component._comp.template_bits}
    bits = sum(parts.values())
    detail = ", ".join(f"{name} {b / 8 / 1000:.1f} kB" for name, b in parts.items())
    return {
        "Like for like: the whole Themis-D in the wire":
            f"{bits / 8 / 1000:.1f} kB ({detail}) against the paper's Themis-D {paper_d / 1000:.1f} kB, QP IDs "
            f"included ({bits / 8 / paper_d:.3f}x); the classifier matches two full IPv6-capable keys per QP where "
            f"the paper counts a 13 B QP ID, and the templates hold what the paper's NIC-side compensation does not",
    }


_THEMIS_REFERENCE_QPS = 16 * 100


BLOCKS = [
    Block(
        name="themis-s",
        summary="Themis source ToR: PSN-based packet spraying through a PathMap",
        paper_ref="Themis (APNet 2025), section 3.2",
        params=[
            Param("n_paths", 256, "equal-cost paths N, 1 to 256 (any value, not only powers of two)"),
            Param("mode", "sport", "port: PathMap gives the egress port (two-tier); sport: PathMap gives a UDP "
                                   "source port XOR delta (multi-tier)", choices=("port", "sport")),
            Param("hash_bits", 16, "width of the flow hash supplied by the parser"),
        ],
        build=load("lbpipe.hdl.themis.themis_s:ThemisS"),
        golden=load("lbpipe.sim.themis.themis_s:ThemisS"),
        test_params=[
            dict(n_paths=256, mode="sport", hash_bits=16),
            dict(n_paths=7, mode="port", hash_bits=16),
            dict(n_paths=1, mode="sport", hash_bits=8),
            dict(n_paths=200, mode="port", hash_bits=32),
        ],
        random_params=lambda rng: dict(n_paths=rng.randrange(1, 257), mode=rng.choice(["port", "sport"]),
                                       hash_bits=rng.randrange(1, 33)),
        tb_module="lbpipe.tb.themis.test_themis_s",
        trace="lbpipe.sim.themis.traffic:themis_s_trace",
        doc="docs/themis.md",
        paper={"memory": "512 B PathMap (N=256)"},
        report_extra=_themis_s_extra,
    ),
    Block(
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
        build=load("lbpipe.hdl.themis.themis_d:ThemisD"),
        golden=load("lbpipe.sim.themis.themis_d:ThemisD"),
        test_params=[
            dict(n_qps=8, queue_depth=12, n_paths=5, entry_bits=6),
            dict(n_qps=5, queue_depth=7, n_paths=256, entry_bits=9),
            dict(n_qps=3, queue_depth=4, n_paths=2, entry_bits=3),
            dict(n_qps=4, queue_depth=20, n_paths=1, entry_bits=8),
            dict(n_qps=6, queue_depth=100, n_paths=200, entry_bits=9),
        ],
        random_params=lambda rng: dict(n_qps=rng.randrange(1, 40), queue_depth=rng.randrange(1, 120),
                                       n_paths=rng.randrange(1, 257), entry_bits=rng.randrange(2, 13)),
        tb_module="lbpipe.tb.themis.test_themis_d",
        trace="lbpipe.sim.themis.traffic:themis_d_trace",
        doc="docs/themis.md",
        paper={"memory": "193 kB (Eq. 4, Table 1)"},
        report_extra=_themis_d_extra,
    ),
    Block(
        name="themis-s-wire",
        summary="Themis-S as a bump in the wire: parser -> Themis-S (sport mode) -> deparser, 512-bit AXI4-Stream",
        paper_ref="Themis (APNet 2025), section 3.2, on RoCEv2 frames",
        params=[
            Param("n_paths", 256, "equal-cost paths N, 1 to 256"),
            Param("depth", 256, "deparser frame buffer, in 64-byte beats"),
            Param("cut_through", True, "cut-through (first beat out a constant time after the first beat in) or "
                                       "store-and-forward (every frame waits for its last beat)"),
            Param("fcs", False, "frames carry their 4-byte FCS (a MAC that keeps it); it is left valid"),
        ],
        build=load("lbpipe.hdl.themis.wire:ThemisSWire"),
        golden=load("lbpipe.sim.themis.wire:ThemisSWireModel"),
        golden_ref="lbpipe.sim.themis.wire:ThemisSWireModel",
        tb_module="lbpipe.tb.themis.test_themis_s_wire",
        doc="docs/packet_io.md",
        interface="packet",
        pcap_trace="lbpipe.tb.themis.test_themis_s_wire:pcap_trace",
    ),
    Block(
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
        build=load("lbpipe.hdl.themis.wire:ThemisDWire"),
        golden=load("lbpipe.sim.themis.wire:ThemisDWireModel"),
        golden_ref="lbpipe.sim.themis.wire:ThemisDWireModel",
        tb_module="lbpipe.tb.themis.test_themis_d_wire",
        doc="docs/packet_io.md",
        interface="packet",
        pcap_trace="lbpipe.tb.themis.test_themis_d_wire:pcap_trace",
        report_extra=_themis_d_wire_extra,
    ),
]
