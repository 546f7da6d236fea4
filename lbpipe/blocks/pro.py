"""Registry entries of PRO (paper 003; datasheet docs/pro.md): the sender's orchestrated round-robin path scheduler,
the receiver's out-of-order window with loss recovery, and the sender in the wire."""

from .base import Block, Param, load  # noqa: F401

__all__ = ["BLOCKS"]

BLOCKS = []

# -- orchestrated round robin (pro-rr) ---------------------------------------------------------------------------------
# (entry appended below by the round-robin work)

def _rr_memory_bits(n_qps, n_tors=16, m_paths=8, batch=1):
    """(Q, T, PathID) bits of the round robin: per QP active, started, ToR, base (+ batch position); per ToR C and
    P mod M/n; per ToR and path (2**ceil(log2 M) rows) a 12-bit PathID."""
    b = lambda n: max(1, (n - 1).bit_length())  # noqa: E731
    q = 2 + b(n_tors) + b(m_paths) + (b(batch) if batch > 1 else 0)
    return n_qps * q, n_tors * (b(m_paths) + b(m_paths // batch)), n_tors * (1 << b(m_paths)) * 12


def _rr_extra(params, component):
    q, t, p = _rr_memory_bits(params["n_qps"], params["n_tors"], params["m_paths"], params["batch"])
    rest = (params["n_tors"], params["m_paths"], params["batch"])
    scale = "; ".join(f"{n // 1024}K: {sum(_rr_memory_bits(n, *rest)) / 8 / 1024:.1f} KiB"
                      for n in (1 << 10, 10240, 1 << 14, 1 << 16))
    return {
        "Memory": f"{q + t + p} bits = {(q + t + p) / 8 / 1024:.1f} KiB: Q {params['n_qps']} x {q // params['n_qps']} "
                  f"bit, T {params['n_tors']} x {t // params['n_tors']} bit, PathID {p // 12} x 12 bit",
        "Latency": f"{component.latency} cycles, one packet (or control command) per clock",
        "Paper, Table I (Intel Agilex 7, 10K QPs)": "round robin 0.3K ALM, 0.4K registers, 15 KB RAM (ALMs are "
                                                    "not LUTs: see docs/pro_rr.md)",
        "Scale (memory linear in QPs)": scale,
    }


BLOCKS.append(Block(
    name="pro-rr",
    summary="PRO orchestrated round-robin path scheduler: per-ToR counter, per-QP odd span, PathID, one per clock",
    paper_ref="PRO, sections III-A, IV, V, Algorithm 1, Table I",
    params=[
        Param("n_qps", 10240, "QPs (the prototype's 10K), 2 to 2**20"),
        Param("n_tors", 16, "destination ToRs = equivalent path sets, 1 to 64 (the paper's simulation: 16)"),
        Param("m_paths", 8, "M, paths per equivalent path set, 1 to 64 (the paper's fabrics: 8 Aggr switches)"),
        Param("batch", 1, "n, packets of a QP per scheduling batch, divides m_paths (1: Algorithm 1 per packet)"),
    ],
    build=load("lbpipe.hdl.pro.rr:RoundRobin"),
    golden=load("lbpipe.sim.pro.rr:RoundRobin"),
    test_params=[
        dict(n_qps=16, n_tors=4, m_paths=8, batch=1),
        dict(n_qps=24, n_tors=3, m_paths=16, batch=8),
        dict(n_qps=40, n_tors=5, m_paths=12, batch=2),
    ],
    regression_items=3000,
    random_params=lambda rng: dict(n_qps=rng.randrange(2, 200), n_tors=rng.randrange(1, 65),
                                   **(lambda mm: dict(m_paths=mm, batch=rng.choice(
                                       [d for d in range(1, mm + 1) if mm % d == 0])))(rng.randrange(1, 65))),
    tb_module="lbpipe.tb.pro.test_rr",
    trace="lbpipe.sim.pro.rr:rr_trace",
    doc="docs/pro_rr.md",
    paper={"registers": 400, "ALM (Intel Agilex 7 ALMs, not LUTs)": "0.3K", "RAM": "15 KB"},
    report_extra=_rr_extra,
))

# -- receiver out-of-order window (pro-ooo) ----------------------------------------------------------------------------
# (entry appended below by the receiver work)


def _ooo_extra(params, component):
    per_qp = component.record_bits
    scale = "; ".join(f"{n // 1024}K: {n * per_qp / 8 / 1024:.0f} KiB" for n in (1 << 10, 10240, 1 << 14, 1 << 16))
    return {"Memory": f"{component.memory_bits} bits = {component.memory_bits / 8 / 1024:.1f} KiB: {params['n_qps']} "
                      f"records x {per_qp} bit (valid, "
                      f"{'24-bit' if params.get('head', 'record') == 'record' else 'low bits of the'} head base "
                      f"and 2-bit pending advance, "
                      f"{component._L}-bit bitmap, tail offset, wnd, two NACK flags), banks of 1,024",
            "Latency": f"{component.latency} cycles, one event per clock (back-to-back events of one QP included)",
            "Paper, Table I loss recovery (10K QPs)": "20.7K ALM / 34.3K registers / 53 KB RAM (Intel ALMs: an ALM "
                                                      "holds up to two LUTs; lbpipe counts Yosys LUT cells)",
            f"Scale ({per_qp} bits per QP)": scale}


BLOCKS.append(Block(
    name="pro-ooo",
    summary="PRO receiver: per-QP out-of-order bitmap, AIMD window (Algorithm 2) and one NACK per event for lost PSNs",
    paper_ref="PRO, sections III-B, III-C, Algorithm 2, Figure 4, Table I",
    params=[
        Param("n_qps", 10240, "QP records (the qp field is the index a QP classifier gives)"),
        Param("bitmap_len", 0, "arrival bits per QP: 8, 16, 32 or 64 (context: 8 or 16); 0: 32 with head=record, "
                               "16 with context"),
        Param("head", "record", "where the head lives: the record, or the QP context (epsn in, written back out)",
              choices=("record", "context")),
    ],
    build=load("lbpipe.hdl.pro.ooo:Ooo"),
    golden=load("lbpipe.sim.pro.ooo:Ooo"),
    test_params=[dict(n_qps=16, bitmap_len=32), dict(n_qps=5, bitmap_len=8), dict(n_qps=64, bitmap_len=16),
                 dict(n_qps=64, bitmap_len=16, head="context")],
    regression_items=2000,
    random_params=lambda rng: (dict(n_qps=rng.randrange(8, 200), bitmap_len=rng.choice([8, 16]), head="context")
                               if rng.random() < 0.5 else
                               dict(n_qps=rng.randrange(8, 200), bitmap_len=rng.choice([8, 16, 32, 64]))),
    tb_module="lbpipe.tb.pro.test_ooo",
    trace="lbpipe.sim.pro.ooo:ooo_trace",
    doc="docs/pro_ooo.md",
    paper={"registers": 34300, "ALM (Intel Agilex 7 ALMs, not LUTs)": "20.7K", "RAM": "53 KB"},
    report_extra=_ooo_extra,
))

# -- sender in the wire (pro-tx-wire) ----------------------------------------------------------------------------------
# (entry appended below by the round-robin work)

def _tx_wire_extra(params, component):
    cls, rr = component._classifier.memory_bits, component._rr.memory_bits
    return {"Round robin memory": f"{rr} bits = {rr / 8 / 1024:.1f} KiB",
           "Latency": f"{component.latency} cycles from a frame's first beat in to its first beat out (cut-through), "
                      f"one beat per clock at every frame size (lbpipe bench pro-tx-wire)",
            "QP classifier memory": f"{cls} bits = {cls / 8 / 1024:.1f} KiB (keys of up to 2**24 QPs' value width)"}


BLOCKS.append(Block(
    name="pro-tx-wire",
    summary="PRO sender in the wire: parser -> QP classifier (QP index and destination ToR) -> orchestrated round "
            "robin -> deparser (PathID into the UDP source port's low 12 bits, ICRC updated), 512-bit AXI4-Stream",
    paper_ref="PRO, sections III-A, V, Algorithm 1, on RoCEv2 frames",
    params=[
        Param("n_qps", 10240, "QPs of the round robin, 2 to 2**20 (bits(n_qps) + bits(n_tors) <= 24)"),
        Param("n_tors", 16, "destination ToRs, 1 to 64"),
        Param("m_paths", 8, "M, paths per equivalent path set, 1 to 64"),
        Param("batch", 1, "n, packets of a QP per scheduling batch, divides m_paths"),
        Param("buckets", 4096, "QP classifier slots per way, a power of two"),
        Param("ways", 4, "QP classifier ways, 1 to 8"),
        Param("ipv6", True, "QP classifier keys hold 128-bit addresses (IPv4 and IPv6) or 32-bit ones"),
        Param("depth", 256, "deparser frame buffer, in 64-byte beats"),
        Param("cut_through", True, "cut-through (first beat out a constant time after the first beat in) or "
                                   "store-and-forward"),
    ],
    build=load("lbpipe.hdl.pro.wire:ProTxWire"),
    golden=load("lbpipe.sim.pro.wire:ProTxWireModel"),
    golden_ref="lbpipe.sim.pro.wire:ProTxWireModel",
    tb_module="lbpipe.tb.pro.test_wire",
    doc="docs/pro_wire.md",
    interface="packet",
    pcap_trace="lbpipe.tb.pro.test_wire:pcap_trace",
    report_extra=_tx_wire_extra,
))

# -- receiver NAK frames (pro-nak; the NAK-frame stage of pro-rx-wire) ------------------------------------------------


def _nak_extra(params, component):
    return {"Memory": f"{component.memory_bits} bits = {component.memory_bits / 8 / 1024:.1f} KiB of NAK contexts "
                      f"({params['n_qps']} x 256 bit: MACs, IPv4 addresses, UDP port, P_Key, QPN, valid)",
            "Latency": f"{component.latency} cycles from a NACK event to its frame on m_axis, one frame per clock"}


BLOCKS.append(Block(
    name="pro-nak",
    summary="PRO receiver NAK frames: a NACK event (qp, psn) becomes a 62-byte RoCEv2 NAK (syndrome 0x60) from the "
            "QP's context, IPv4 checksum and ICRC computed, one per clock",
    paper_ref="PRO, section III-C; issue #14 (Receiver)",
    params=[
        Param("n_qps", 10240, "NAK contexts (the qp field is the index a QP classifier gives), 1 to 2**20"),
        Param("user_width", 1, "width of m_axis tuser (0 on every frame)"),
    ],
    build=load("lbpipe.hdl.pro.nak:NakGen"),
    golden=None,
    golden_ref="lbpipe.sim.pro.nak:NakGen",
    tb_module="lbpipe.tb.pro.test_nak",
    doc="docs/pro_rx_wire.md",
    interface="packet",
    report_extra=_nak_extra,
))


# -- receiver in the wire (pro-rx-wire) ------------------------------------------------------------------------------
# (entry appended below by the receiver-pipeline work)


def _rx_wire_extra(params, component):
    cls, ooo, nak = component._classifier.memory_bits, component._ooo.memory_bits, component._nak.memory_bits
    return {"Latency": f"{component.latency} cycle from a frame's first beat in to its first beat out (m_axis, frames "
                       f"unchanged), {component.nak_latency} cycles from a frame's last beat to the NAK its event "
                       f"sends (m_axis_nak); one beat per clock at every frame size (lbpipe bench pro-rx-wire)",
            "Memory": f"windows {ooo} bits = {ooo / 8 / 1024:.1f} KiB, NAK contexts {nak / 8 / 1024:.1f} KiB, "
                      f"QP classifier {cls / 8 / 1024:.1f} KiB",
            "Paper, Table I loss recovery (10K QPs)": "20.7K ALM / 34.3K registers / 53 KB RAM (Intel ALMs; lbpipe "
                                                      "counts Yosys LUT cells: docs/pro_rx_wire.md)"}


BLOCKS.append(Block(
    name="pro-rx-wire",
    summary="PRO receiver in the wire: parser -> QP classifier -> out-of-order window (Algorithm 2) -> NAK frames; "
            "frames to the host unchanged, NAKs on their own 512-bit AXI4-Stream, QP timeouts on a stream",
    paper_ref="PRO, sections III-B, III-C, Algorithm 2, Figure 4, on RoCEv2 frames",
    params=[
        Param("n_qps", 10240, "QPs: windows, NAK contexts and the classifier's index, 2 to 2**20"),
        Param("bitmap_len", 32, "arrival bits per QP: 8, 16, 32 or 64"),
        Param("buckets", 4096, "QP classifier slots per way, a power of two"),
        Param("ways", 4, "QP classifier ways, 1 to 8"),
        Param("ipv6", True, "QP classifier keys hold 128-bit addresses (IPv4 and IPv6) or 32-bit ones"),
    ],
    build=load("lbpipe.hdl.pro.rx_wire:ProRxWire"),
    golden=load("lbpipe.sim.pro.rx_wire:ProRxWireModel"),
    golden_ref="lbpipe.sim.pro.rx_wire:ProRxWireModel",
    tb_module="lbpipe.tb.pro.test_rx_wire",
    doc="docs/pro_rx_wire.md",
    interface="packet",
    pcap_trace="lbpipe.tb.pro.test_rx_wire:pcap_trace",
    report_extra=_rx_wire_extra,
))
