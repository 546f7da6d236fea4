"""Registry entries of the packet I/O stages (datasheets docs/packet_io.md and docs/qp_classifier.md)."""

from .base import Block, Param, load

__all__ = ["BLOCKS"]


def _qp_classifier_extra(params, component):
    from lbpipe.hdl.packet.qp_classifier import QpSlot
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


BLOCKS = [
    Block(
        name="parser",
        summary="Packet I/O: 512-bit AXI4-Stream frames to RoCEv2 and LAPS packet metadata, frames passed through "
                "unchanged",
        paper_ref="RoCEv2 (IBA annex A17); LAPS (IEEE ToN), section III-B, as a UDP shim; feeds every block",
        params=[
            Param("user_width", 1, "width of the AXI4-Stream tuser, carried with the frame"),
            Param("laps_port", 0xC1A5, "UDP destination port of the LAPS shim, 1 to 65535 but not 4791 "
                                       "(default 49573, RFC 6335 dynamic range)"),
            Param("early", False, "emit each item after the frame's second beat (cut-through) instead of its last"),
            Param("fcs", False, "frames end with their 4-byte FCS, which the rules leave out"),
        ],
        build=load("lbpipe.hdl.packet.parser:Parser"),
        golden=None,
        golden_ref="lbpipe.sim.packet.parser:parse",
        tb_module="lbpipe.tb.packet.test_parser",
        doc="docs/packet_io.md",
        interface="packet",
    ),
    Block(
        name="deparser",
        summary="Packet I/O: store-and-forward or cut-through rewrite of frames from per-frame actions (UDP "
                "source port with incremental ICRC and UDP checksum updates, drop)",
        paper_ref="RoCEv2 (IBA annex A17), RFC 1624",
        params=[
            Param("depth", 256, "frame buffer in 64-byte beats (the largest frame is depth x 64 bytes)"),
            Param("pending", 32, "frames whose action has not arrived yet"),
            Param("user_width", 1, "width of the AXI4-Stream tuser"),
            Param("cut_through", False, "take actions before the frame's end and send frames as they arrive"),
            Param("fcs", False, "frames end with their 4-byte FCS (left valid by the rewrite)"),
        ],
        build=load("lbpipe.hdl.packet.deparser:Deparser"),
        golden=None,
        golden_ref="lbpipe.sim.packet.deparser:deparse",
        tb_module="lbpipe.tb.packet.test_deparser",
        doc="docs/packet_io.md",
        interface="packet",
    ),
    Block(
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
        build=load("lbpipe.hdl.packet.qp_classifier:QpClassifier"),
        golden=load("lbpipe.sim.packet.qp_classifier:QpClassifier"),
        test_params=[
            dict(n_entries=16, buckets=8, ways=2, ipv6=True, user_bits=0),
            dict(n_entries=40, buckets=4, ways=3, ipv6=False, user_bits=5),
            dict(n_entries=5, buckets=16, ways=1, ipv6=True, user_bits=0),
            dict(n_entries=29, buckets=2, ways=8, ipv6=True, user_bits=0),
        ],
        random_params=lambda rng: dict(n_entries=rng.randrange(1, 300), buckets=1 << rng.randrange(1, 7),
                                       ways=rng.randrange(1, 9), ipv6=rng.random() < 0.5,
                                       user_bits=rng.choice([0, 1, 9])),
        tb_module="lbpipe.tb.packet.test_qp_classifier",
        trace="lbpipe.sim.packet.qp_classifier:qp_classifier_trace",
        doc="docs/qp_classifier.md",
        paper={"memory": "13 B QP ID per flow entry (section 4)"},
        report_extra=_qp_classifier_extra,
    ),
    Block(
        name="compensator",
        summary="Packet I/O: Themis-D's frame end: drops blocked NACKs, records the NACK that armed compensation, "
                "sends it again on compensation",
        paper_ref="Themis (APNet 2025), section 3.4",
        params=[
            Param("n_qps", 1600, "per-QP NACK templates, 1 to 65536"),
            Param("depth", 256, "frame buffer in 64-byte beats"),
            Param("user_width", 1, "width of the AXI4-Stream tuser"),
        ],
        build=load("lbpipe.hdl.packet.compensator:Compensator"),
        golden=None,
        golden_ref="lbpipe.sim.packet.compensator:Compensator",
        tb_module="lbpipe.tb.packet.test_compensator",
        doc="docs/packet_io.md",
        interface="packet",
    ),
    Block(
        name="laps-editor",
        summary="Packet I/O: LAPS header insert, remove and update (the deparser side of the LAPS shim), lengths "
                "and checksums kept right, 512-bit AXI4-Stream",
        paper_ref="LAPS (IEEE ToN), section III-B",
        params=[
            Param("depth", 256, "frame buffer in 64-byte beats (the longest frame in and out)"),
            Param("user_width", 1, "width of the AXI4-Stream tuser"),
            Param("laps_port", 0xC1A5, "UDP destination port INSERT writes, 1 to 65535 but not 4791"),
            Param("cut_through", True, "cut-through (first beat out a constant 13 cycles after the first beat in) or "
                                       "store-and-forward (frames longer than depth beats dropped)"),
        ],
        build=load("lbpipe.hdl.packet.laps_editor:LapsEditor"),
        golden=load("lbpipe.sim.packet.laps_editor:LapsEditor"),
        golden_ref="lbpipe.sim.packet.laps_editor:LapsEditor",
        tb_module="lbpipe.tb.packet.test_laps_editor",
        doc="docs/packet_io.md",
        interface="packet",
        actions="lbpipe.hdl.packet.laps_editor:LapsEdit",
        pcap_trace="lbpipe.tb.packet.test_laps_editor:pcap_trace",
    ),
]
