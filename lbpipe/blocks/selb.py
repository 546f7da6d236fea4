"""Registry entries of SELB (paper 004; datasheets docs/selb_cluster.md, docs/selb_reroute.md): the source ToR's
queue sampling and k-means path clustering engine (section III, Algorithm 1) and its per-flow rerouting stage; the
destination ToR's reordering (docs/selb_reorder.md)."""

from .base import Block, Param, load  # noqa: F401

__all__ = ["BLOCKS"]

BLOCKS = []

# -- queue sampling and clustering (selb-cluster) ---------------------------------------------------------------------


def _cluster_extra(params, component):
    n, q = params["n_paths"], params["q_bits"]
    worst = component.worst_case_cycles()
    return {
        "Latency": f"{component.latency} cycles, one lookup and one queue sample (or tick) per clock",
        "Clustering time": f"3 clocks a draw, {n + q + 5} clocks a sweep (n_paths + q_bits + 5), worst case "
                           f"{worst} clocks = {worst * 4 / 1000:.2f} us at 250 MHz ({params['iter_cap']} sweeps, "
                           f"every draw used): the sample period must be at least this, else a tick waits",
        "State": f"{n} paths x ({q}-bit latest, snapshot and previous queue lengths + 2 x (cluster, backup, "
                 f"congested) + cluster) in registers; no memories",
        "Paper": "SELB gives no hardware figures (NS-3 evaluation only)",
    }


BLOCKS.append(Block(
    name="selb-cluster",
    summary="SELB source ToR: queue sampling, growth-rate congestion marking, background k-means path clustering "
            "(Algorithm 1) published atomically at each sample-period tick; one lookup per clock",
    paper_ref="SELB, section III (Path Classification, Rerouting Strategy), Algorithm 1",
    params=[
        Param("n_paths", 64, "egress paths, a power of two from 2 to 64"),
        Param("k", 4, "clusters, 1 to 4"),
        Param("q_bits", 16, "width of a queue length, 4 to 24"),
        Param("iter_cap", 16, "most assignment sweeps per clustering, 1 to 255"),
        Param("draws", 4, "draws per initial centroid before a duplicate value is accepted, 1 to 16"),
        Param("theta", 64, "reset value of the congestion threshold: growth of a queue over one period"),
        Param("lfsr_seed", 0xACE1, "reset value of the 16-bit LFSR that draws the initial centroids"),
    ],
    build=load("lbpipe.hdl.selb.cluster:Cluster"),
    golden=load("lbpipe.sim.selb.cluster:Cluster"),
    streams=("smp",),
    test_params=[
        dict(n_paths=8, k=2, q_bits=6, iter_cap=4, draws=2, theta=3, lfsr_seed=0xACE1),
        dict(n_paths=16, k=4, q_bits=5, iter_cap=3, draws=3, theta=0, lfsr_seed=0x1234),
        dict(n_paths=4, k=1, q_bits=4, iter_cap=1, draws=1, theta=15, lfsr_seed=1),
    ],
    regression_items=1500,
    random_params=lambda rng: (lambda n, q: dict(
        n_paths=n, k=rng.randrange(1, min(4, n) + 1), q_bits=q, iter_cap=rng.randrange(1, 9),
        draws=rng.randrange(1, 5), theta=rng.randrange(1 << q), lfsr_seed=rng.randrange(1, 1 << 16)))(
        1 << rng.randrange(1, 6), rng.randrange(4, 11)),
    tb_module="lbpipe.tb.selb.test_cluster",
    trace="lbpipe.sim.selb.cluster:cluster_trace",
    doc="docs/selb_cluster.md",
    paper={"hardware figures": "none: SELB was evaluated in NS-3 only (section IV)"},
    report_extra=_cluster_extra,
))

# -- per-flow rerouting (selb-reroute) --------------------------------------------------------------------------------


def _reroute_extra(params, component):
    pb = max(1, (params["n_paths"] - 1).bit_length())
    return {
        "Latency": f"{component.latency} cycles, one packet per clock (back-to-back packets of one flow included)",
        "Memory": f"{params['n_flows']} x {3 + pb + params['time_bits']} bit (valid, path, in flight, "
                  f"{params['time_bits']}-bit reroute time, epoch) = {component.memory_bits} bits",
        "Paper": "SELB gives no hardware figures (NS-3 evaluation only)",
    }


BLOCKS.append(Block(
    name="selb-reroute",
    summary="SELB source ToR: per-flow rerouting off a congested path after the train's tail, to a random "
            "non-congested path of the same cluster or the shortest-queue path; one reroute in flight per flow",
    paper_ref="SELB, section III (Rerouting Strategy, Packet Reordering)",
    params=[
        Param("n_flows", 1024, "flow table entries (flow index from the parser layer), a power of two, 2 to 4096"),
        Param("n_paths", 64, "paths, a power of two from 2 to 64 (selb-cluster's)"),
        Param("time_bits", 16, "width of now and of the stored reroute time, 4 to 32"),
        Param("hold", 32, "ticks after a reroute before the flow's next one, a power of two (32 x 256 ns = 8.2 us)"),
        Param("lfsr_seed", 0xB5AD, "reset value of the 16-bit LFSR that draws among the alt paths"),
    ],
    build=load("lbpipe.hdl.selb.reroute:Reroute"),
    golden=load("lbpipe.sim.selb.reroute:Reroute"),
    test_params=[
        dict(n_flows=16, n_paths=8, time_bits=8, hold=4, lfsr_seed=0xACE1),
        dict(n_flows=4, n_paths=4, time_bits=4, hold=2, lfsr_seed=0x1234),
        dict(n_flows=64, n_paths=16, time_bits=6, hold=16, lfsr_seed=1),
    ],
    regression_items=3000,
    random_params=lambda rng: (lambda tb: dict(
        n_flows=1 << rng.randrange(1, 8), n_paths=1 << rng.randrange(1, 7), time_bits=tb,
        hold=1 << rng.randrange(0, tb), lfsr_seed=rng.randrange(1, 1 << 16)))(rng.randrange(4, 12)),
    tb_module="lbpipe.tb.selb.test_reroute",
    trace="lbpipe.sim.selb.reroute:reroute_trace",
    doc="docs/selb_reroute.md",
    paper={"hardware figures": "none: SELB was evaluated in NS-3 only (section IV)"},
    report_extra=_reroute_extra,
))

# -- destination reordering (selb-reorder) ----------------------------------------------------------------------------


def _reorder_extra(params, component):
    nb, d = params["n_buffers"], params["depth"]
    return {
        "Latency": f"{component.latency} cycles for a passing item, one item per clock when no buffer is touched "
                   f"(an item waits 1 clock behind one that opens or frees a buffer or appends to its flow's); a "
                   f"drain holds the input for 2 + (items held) clocks, at most {2 + d} a buffer",
        "Memory": f"flow table {params['n_flows']} x 1 bit (the in-order epoch); buffers {nb} x {d} x 17 bit "
                  f"(tag, tail) = {component.memory_bits} bits in all",
        "Paper": "SELB gives no hardware figures (NS-3 evaluation only); ConWeave's experiment: 8 buffers a port",
    }


BLOCKS.append(Block(
    name="selb-reorder",
    summary="SELB destination ToR: in-network reordering after a reroute (ConWeave's method): early packets of the "
            "new path held in one of n_buffers reorder buffers until the old path's tail or a timeout, then "
            "released in order; fallback when none is free. Output in release order (as many items as in)",
    paper_ref="SELB, section III (Packet Reordering), after ConWeave",
    params=[
        Param("n_flows", 1024, "flow table entries (flow index from the parser layer), a power of two, 2 to 4096"),
        Param("n_buffers", 8, "reorder buffers, 1 to 16 (8 a port in the paper's experiment)"),
        Param("depth", 32, "items a buffer holds, a power of two from 2 to 1024"),
        Param("time_bits", 16, "width of now and of a buffer's start time, 4 to 32"),
        Param("timeout", 1024, "ticks after which a held buffer drains without its tail, a power of two"),
    ],
    build=load("lbpipe.hdl.selb.reorder:Reorder"),
    golden=load("lbpipe.sim.selb.reorder:Reorder"),
    test_params=[
        dict(n_flows=8, n_buffers=2, depth=4, time_bits=6, timeout=16),
        dict(n_flows=16, n_buffers=3, depth=2, time_bits=4, timeout=8),
        dict(n_flows=4, n_buffers=1, depth=8, time_bits=8, timeout=64),
    ],
    regression_items=3000,
    random_params=lambda rng: (lambda tb: dict(
        n_flows=1 << rng.randrange(1, 8), n_buffers=rng.randrange(1, 9), depth=1 << rng.randrange(1, 6),
        time_bits=tb, timeout=1 << rng.randrange(2, tb)))(rng.randrange(4, 12)),
    tb_module="lbpipe.tb.selb.test_reorder",
    trace="lbpipe.sim.selb.reorder:reorder_trace",
    doc="docs/selb_reorder.md",
    paper={"hardware figures": "none: SELB was evaluated in NS-3 only (section IV)"},
    report_extra=_reorder_extra,
))

# -- the source ToR in the wire (selb-tx-wire) ------------------------------------------------------------------------


def _tx_wire_extra(params, component):
    bits = component.memory_bits
    return {
        "Latency": f"{component.latency} cycles from a frame's first beat in to its first beat out (cut-through), "
                   f"one beat per clock at every frame size (lbpipe bench selb-tx-wire)",
        "Path mirror": f"{bits} bits = {bits / 8 / 1024:.1f} KiB ({params['n_flows']} x (valid, path)), beside "
                       f"selb-reroute's flow table",
        "Paper": "SELB gives no hardware figures (NS-3 evaluation only)",
    }


BLOCKS.append(Block(
    name="selb-tx-wire",
    summary="SELB source ToR in the wire: parser -> path mirror -> selb-cluster -> selb-reroute -> deparser (path "
            "into the UDP source port's low bits, ICRC updated) -> tail and epoch into the BTH's reserved byte; "
            "queue samples on smp or through ctl, 512-bit AXI4-Stream",
    paper_ref="SELB, section III (Path Classification, Rerouting Strategy), on RoCEv2 frames",
    params=[
        Param("n_flows", 1024, "selb-reroute's flow table and the path mirror (flow = the parser's flow hash, low "
                               "bits), a power of two, 2 to 4096"),
        Param("n_paths", 64, "uplink paths, a power of two from 2 to 64"),
        Param("k", 4, "clusters, 1 to 4"),
        Param("q_bits", 16, "width of a queue length, 4 to 24"),
        Param("iter_cap", 16, "most assignment sweeps per clustering, 1 to 255"),
        Param("draws", 4, "draws per initial centroid, 1 to 16"),
        Param("theta", 64, "reset value of the congestion threshold (queue growth over one sample period)"),
        Param("time_bits", 16, "width of now, 4 to 32"),
        Param("hold", 32, "ticks of now between a flow's reroutes (one reroute in flight)"),
        Param("tick_cycles", 64, "clocks per tick of now after reset (64: 256 ns at 250 MHz), 0 stops it"),
        Param("depth", 256, "deparser frame buffer, in 64-byte beats"),
        Param("cluster_seed", 0xACE1, "selb-cluster's LFSR seed"),
        Param("reroute_seed", 0xB5AD, "selb-reroute's LFSR seed"),
    ],
    build=load("lbpipe.hdl.selb.wire:SelbTxWire"),
    golden=load("lbpipe.sim.selb.wire:SelbTxWireModel"),
    golden_ref="lbpipe.sim.selb.wire:SelbTxWireModel",
    tb_module="lbpipe.tb.selb.test_wire",
    doc="docs/selb_tx_wire.md",
    interface="packet",
    pcap_trace="lbpipe.tb.selb.test_wire:pcap_trace",
    paper={"hardware figures": "none: SELB was evaluated in NS-3 only (section IV)"},
    report_extra=_tx_wire_extra,
))
