"""Registry entries of FLB (paper 002; datasheet docs/flb_route.md): the source edge switch's per-packet path
decision (rerouting without reordering, Algorithm 1, with the isolated paths of section 3.2); and the destination
edge switch's one-way-delay measurement and piggyback (section 3.1; docs/flb_owd.md) and congestion detection (CNM,
sections 3.2, 3.3; docs/flb_cnm.md); and the source edge switch's congested-flow isolation table (sections 3.2, 3.3;
docs/flb_isolate.md); and every switch's per-flow previous-hop MAC that sends CNMs back hop by hop in routed networks
(section 3.2, "CNM construction"; docs/flb_prevhop.md); and the source edge switch in the wire, flb-isolate and
flb-route between the parser and the deparser (docs/flb_tx_wire.md)."""

from .base import Block, Param, load  # noqa: F401

__all__ = ["BLOCKS"]

BLOCKS = []

# -- per-packet path decision (flb-route) ------------------------------------------------------------------------------


def _route_extra(params, component):
    pb = max(1, (params["n_paths"] - 1).bit_length())
    per_flow = 1 + params["time_bits"] + pb
    scale = "; ".join(f"{n:,} flows: {n * per_flow / 8 / 1024:.0f} KiB" for n in (1 << 10, 1 << 14, 1 << 16, 100_000))
    return {
        "Memory": f"{component.memory_bits} bits = {component.memory_bits / 8 / 1024:.1f} KiB: flow table "
                  f"{params['n_flows']} x {per_flow} bit (valid, {params['time_bits']}-bit stamp, {pb}-bit path), "
                  f"delays {params['n_dests']} x {params['n_paths']} x {params['delay_bits']} bit, isolation "
                  f"{params['n_dests']} x {params['n_paths']} bit",
        "Latency": f"{component.latency} cycles, one packet per clock (back-to-back packets of one flow included)",
        "Paper, Table 1 (Tofino, 100K flows)": "SRAM 4.12%, hash bits 5.87%, gateway 9.56%, ALU instructions 8.2% "
                                               "of the switch (not comparable cell by cell: docs/flb_route.md)",
        f"Scale (flow table, {per_flow} bits per flow)": scale,
    }


BLOCKS.append(Block(
    name="flb-route",
    summary="FLB source edge switch: per-flow path and last-packet tick, Algorithm 1 (new flow: fastest "
            "non-isolated path; existing: fastest path within the gap), one packet per clock",
    paper_ref="FLB, sections 3.1, 3.2, 3.4, Algorithm 1, Table 1",
    params=[
        Param("n_flows", 65536, "flow table entries, 2 to 2**20 (65,536: every CRC16 flow ID, the paper's key)"),
        Param("n_dests", 16, "destination edge switches, 1 to 4,096"),
        Param("n_paths", 8, "paths per destination, 2 to 16"),
        Param("time_bits", 16, "width of the timer's ticks (now, stamps, gaps), 4 to 32"),
        Param("delay_bits", 16, "width of a path's queueing delay in ticks, 4 to 32"),
        Param("timeout", 4096, "ticks after which an idle flow is new again (paper: 1 ms; 4,096 x 256 ns)"),
        Param("margin", 0, "ticks taken off the reroute window, 0 to 2**time_bits - 1: a move needs delay(p) - "
                           "delay(p') <= gap - 1 - margin (0: the paper's rule, may overtake by < 1 tick; 1: no "
                           "reordering from tick rounding, for RoCE)"),
        Param("upd", False, "the upd stream: one delay or isolation-mask write per clock beside the packets"),
        Param("force", False, "the item fields force and fpath: a path decided upstream (flb-tx-wire's isolation "
                              "path), taken and recorded as the flow's"),
    ],
    build=load("lbpipe.hdl.flb.route:Route"),
    golden=load("lbpipe.sim.flb.route:Route"),
    test_params=[
        dict(n_flows=16, n_dests=3, n_paths=4, time_bits=8, delay_bits=6, timeout=40),
        dict(n_flows=64, n_dests=4, n_paths=8, time_bits=10, delay_bits=8, timeout=100),
        dict(n_flows=13, n_dests=5, n_paths=5, time_bits=6, delay_bits=5, timeout=20, margin=2),
        dict(n_flows=16, n_dests=3, n_paths=5, time_bits=8, delay_bits=6, timeout=40, upd=True),
    ],
    regression_items=3000,
    random_params=lambda rng: (lambda tb: dict(
        n_flows=rng.randrange(2, 300), n_dests=rng.randrange(1, 20), n_paths=rng.randrange(2, 17), time_bits=tb,
        delay_bits=rng.randrange(4, 17), timeout=rng.randrange(1, 1 << tb), margin=rng.choice([0, 0, 1, 2])))(
        rng.randrange(4, 17)),
    tb_module="lbpipe.tb.flb.test_route",
    trace="lbpipe.sim.flb.route:route_trace",
    streams=("upd",),
    doc="docs/flb_route.md",
    paper={"SRAM (% of Tofino)": "4.12%", "Gateway (% of Tofino)": "9.56%", "hash bits (% of Tofino)": "5.87%",
           "ALU instructions (% of Tofino)": "8.2%"},
    report_extra=_route_extra,
))

# -- one-way-delay measurement and piggyback (flb-owd) -----------------------------------------------------------------


def _owd_extra(params, component):
    pb = max(1, (params["n_paths"] - 1).bit_length())
    rows = 1 << max(1, (params["n_edges"] - 1).bit_length())
    return {
        "Memory": f"{component.memory_bits} bits = {component.memory_bits / 8 / 1024:.2f} KiB: bases "
                  f"{rows} x {1 << pb} x {1 + params['time_bits']} bit (valid, base), slots {rows} x "
                  f"{1 + pb + params['delay_bits']} bit (fresh, path, delay)",
        "Latency": f"{component.latency} cycles, one packet per clock (back-to-back samples of one (edge, path) "
                   f"included)",
    }


BLOCKS.append(Block(
    name="flb-owd",
    summary="FLB destination edge switch: one-way delay of sampled packets minus the (modular) minimum per "
            "(source edge, path), the newest measurement per edge piggybacked once on a packet going back",
    paper_ref="FLB, section 3.1",
    params=[
        Param("n_edges", 16, "edge switches (source edges measured, edges piggybacked to), 1 to 1,024"),
        Param("n_paths", 8, "paths per source edge, 2 to 16"),
        Param("time_bits", 16, "width of the timer's ticks (stamp, now, base), 4 to 32"),
        Param("delay_bits", 16, "width of a queueing delay in ticks (saturating), 4 to time_bits"),
    ],
    build=load("lbpipe.hdl.flb.owd:Owd"),
    golden=load("lbpipe.sim.flb.owd:Owd"),
    test_params=[
        dict(n_edges=3, n_paths=5, time_bits=8, delay_bits=8),
        dict(n_edges=4, n_paths=4, time_bits=6, delay_bits=6),
        dict(n_edges=5, n_paths=3, time_bits=10, delay_bits=4),
    ],
    regression_items=3000,
    random_params=lambda rng: (lambda tb: dict(
        n_edges=rng.randrange(1, 40), n_paths=rng.randrange(2, 17), time_bits=tb,
        delay_bits=rng.randrange(4, tb + 1)))(rng.randrange(4, 17)),
    tb_module="lbpipe.tb.flb.test_owd",
    trace="lbpipe.sim.flb.owd:owd_trace",
    doc="docs/flb_owd.md",
    paper={"Table 1 (Tofino, FLB as a whole)": "SRAM 4.12%, ALU instructions 8.2% (the delay measurement is not "
                                                "broken out)"},
    report_extra=_owd_extra,
))

# -- congestion detection and CNM generation (flb-cnm) -----------------------------------------------------------------


def _cnm_extra(params, component):
    eb = max(1, (params["n_edges"] - 1).bit_length())
    per_port = params["q_bits"] + params["n_slots"] * (1 + params["flow_bits"] + eb)
    return {
        "State": f"registers, no memory: {params['n_ports']} ports x {per_port} bit ({params['q_bits']}-bit "
                 f"estimate, {params['n_slots']} slots of valid, {params['flow_bits']}-bit flow, {eb}-bit source "
                 f"edge)",
        "Latency": f"{component.latency} cycles, one queue event per clock (back-to-back events of one port "
                   f"included)",
    }


BLOCKS.append(Block(
    name="flb-cnm",
    summary="FLB destination edge switch: per-port queue estimate from enqueue/dequeue events; crossing the "
            "isolation threshold K emits a congestion CNM per new flow (flow, source edge, n, congestion point), "
            "falling below it "
            "releases them one per event",
    paper_ref="FLB, sections 3.2, 3.3, 5",
    params=[
        Param("n_ports", 8, "egress ports, 1 to 32"),
        Param("n_slots", 4, "congested flows tracked per port, 1 to 8"),
        Param("n_edges", 16, "edge switches (the CNM's destination), 1 to 1,024"),
        Param("flow_bits", 16, "width of a flow id (16: the paper's CRC16), 1 to 24"),
        Param("amount_bits", 8, "width of one event's amount (64-byte cells: a packet of up to 16 KB), 1 to q_bits"),
        Param("q_bits", 16, "width of a queue estimate in cells (4 MB; saturating), 4 to 32"),
        Param("threshold", 512, "isolation threshold K at reset in cells (32 KB; ctl table 0 rewrites it)"),
    ],
    build=load("lbpipe.hdl.flb.cnm:Cnm"),
    golden=load("lbpipe.sim.flb.cnm:Cnm"),
    test_params=[
        dict(n_ports=3, n_slots=2, n_edges=4, flow_bits=5, amount_bits=6, q_bits=8, threshold=60),
        dict(n_ports=4, n_slots=3, n_edges=3, flow_bits=4, amount_bits=4, q_bits=6, threshold=20),
        dict(n_ports=2, n_slots=1, n_edges=5, flow_bits=6, amount_bits=8, q_bits=10, threshold=300),
    ],
    regression_items=3000,
    random_params=lambda rng: (lambda qb: dict(
        n_ports=rng.randrange(1, 9), n_slots=rng.randrange(1, 9), n_edges=rng.randrange(1, 40),
        flow_bits=rng.randrange(1, 17), amount_bits=rng.randrange(1, qb + 1), q_bits=qb,
        threshold=rng.randrange(1, 1 << qb)))(rng.randrange(4, 17)),
    tb_module="lbpipe.tb.flb.test_cnm",
    trace="lbpipe.sim.flb.cnm:cnm_trace",
    doc="docs/flb_cnm.md",
    paper={"Table 1 (Tofino, FLB as a whole)": "SRAM 4.12% (the queue-size SRAM is not broken out)"},
    report_extra=_cnm_extra,
))

# -- source-side congested-flow isolation (flb-isolate) ----------------------------------------------------------------


def _isolate_extra(params, component):
    fb = max(1, (params["n_flows"] - 1).bit_length())
    db = max(1, (params["n_dests"] - 1).bit_length())
    cb = max(1, (params["n_ports"] - 1).bit_length())
    per_slot = 1 + fb + db + cb + 10 + params["time_bits"]
    return {
        "State": f"registers, no memory: {params['n_slots']} slots x {per_slot} bit (valid, {fb}-bit flow, {db}-bit "
                 f"destination, {cb}-bit congestion point, 10-bit weight 840/n, {params['time_bits']}-bit stamp)",
        "Latency": f"{component.latency} cycles, one packet or CNM per clock (back-to-back events of one flow "
                   f"included)",
    }


BLOCKS.append(Block(
    name="flb-isolate",
    summary="FLB source edge switch: isolation table of congested flows from CNMs (upd), released by a "
            "non-congestion CNM or a timeout; per packet whether its flow is isolated, its isolation path, and the "
            "destination's isolated-path set (the top ceil(sum C/n / C) paths, n a congestion point's latest count)",
    paper_ref="FLB, sections 3.2, 3.3",
    params=[
        Param("n_flows", 65536, "flow index range (flb-route's key), 2 to 2**20"),
        Param("n_dests", 16, "destination edge switches, 1 to 4,096"),
        Param("n_paths", 8, "paths per destination, 2 to 16"),
        Param("n_slots", 8, "isolated flows held at once, 1 to 8"),
        Param("time_bits", 16, "width of the timer's ticks (flb-route's), 4 to 32"),
        Param("timeout", 4096, "ticks of inactivity after which an isolated flow is released (paper: 1 ms)"),
        Param("n_ports", 8, "congestion points (flb-cnm's egress ports) per destination edge, 1 to 32"),
    ],
    build=load("lbpipe.hdl.flb.isolate:Isolate"),
    golden=load("lbpipe.sim.flb.isolate:Isolate"),
    test_params=[
        dict(n_flows=16, n_dests=3, n_paths=4, n_slots=4, time_bits=8, timeout=40, n_ports=4),
        dict(n_flows=12, n_dests=5, n_paths=5, n_slots=3, time_bits=6, timeout=20, n_ports=3),
        dict(n_flows=64, n_dests=2, n_paths=8, n_slots=8, time_bits=10, timeout=300, n_ports=8),
    ],
    regression_items=3000,
    random_params=lambda rng: (lambda tb: dict(
        n_flows=rng.randrange(2, 300), n_dests=rng.randrange(1, 20), n_paths=rng.randrange(2, 17),
        n_slots=rng.randrange(1, 9), time_bits=tb, timeout=rng.randrange(1, 1 << tb),
        n_ports=rng.randrange(1, 33)))(rng.randrange(4, 17)),
    tb_module="lbpipe.tb.flb.test_isolate",
    trace="lbpipe.sim.flb.isolate:isolate_trace",
    streams=("upd",),
    doc="docs/flb_isolate.md",
    paper={"Table 1 (Tofino, FLB as a whole)": "SRAM 4.12% (the isolation table is not broken out)"},
    report_extra=_isolate_extra,
))

# -- previous-hop MAC per flow, for CNMs in routed networks (flb-prevhop) ---------------------------------------------


def _prevhop_extra(params, component):
    per_flow = 1 + params["time_bits"] + 48
    banks = component.banks
    return {
        "Memory": f"{component.memory_bits} bits = {component.memory_bits / 8 / 1024:.0f} KiB: {params['n_flows']:,} "
                  f"entries x {per_flow} bit (valid, {params['time_bits']}-bit stamp, 48-bit MAC) in {banks} "
                  f"bank{'s' if banks > 1 else ''} of up to 4,096 (one URAM288 each with --uram, else 8 RAMB36 of "
                  f"4K x 9 each)",
        "Latency": f"{component.latency} cycles, one data packet or CNM per clock (back-to-back items of one flow "
                   f"included)",
        "Paper (section 3.4)": "flow entry 16-bit flow ID, 8-bit path, 8-bit aging, 48-bit MAC; 0.1 MB of SRAM for "
                               "the whole flow table",
    }


BLOCKS.append(Block(
    name="flb-prevhop",
    summary="FLB at every switch: per flow the previous hop's source MAC and the tick of its last data packet; a "
            "CNM for a live flow gets that MAC as its destination (and the switch's MAC as its source), so CNMs go "
            "back hop by hop in routed networks",
    paper_ref="FLB, sections 3.2 (CNM construction), 3.3, 3.4",
    params=[
        Param("n_flows", 65536, "flow table entries, 2 to 2**20 (65,536: every CRC16 flow ID, flb-route's key)"),
        Param("time_bits", 16, "width of the timer's ticks (now, stamps), 4 to 32 (flb-route's)"),
        Param("timeout", 4096, "ticks after a flow's last data packet at which a CNM no longer finds it (paper: "
                               "1 ms; 4,096 x 256 ns)"),
    ],
    build=load("lbpipe.hdl.flb.prevhop:PrevHop"),
    golden=load("lbpipe.sim.flb.prevhop:PrevHop"),
    test_params=[
        dict(n_flows=12, time_bits=6, timeout=20),
        dict(n_flows=64, time_bits=8, timeout=100),
        dict(n_flows=5000, time_bits=4, timeout=15),
    ],
    regression_items=3000,
    random_params=lambda rng: (lambda tb: dict(
        n_flows=rng.choice([rng.randrange(2, 300), rng.randrange(4097, 9000)]), time_bits=tb,
        timeout=rng.randrange(1, 1 << tb)))(rng.randrange(4, 17)),
    tb_module="lbpipe.tb.flb.test_prevhop",
    trace="lbpipe.sim.flb.prevhop:prevhop_trace",
    doc="docs/flb_prevhop.md",
    paper={"flow entry (section 3.4)": "16 + 8 + 8 + 48 bits; 0.1 MB SRAM for the flow table (Tofino)"},
    report_extra=_prevhop_extra,
))

# -- the source edge switch in the wire (flb-tx-wire) -----------------------------------------------------------------


def _tx_wire_extra(params, component):
    return {
        "Latency": f"{component.latency} cycles from a frame's first beat in to its first beat out (cut-through), "
                   f"one beat per clock at every frame size (lbpipe bench flb-tx-wire)",
        "Mask filter": f"{component.memory_bits - component.sampler_bits} bits ({params['n_dests']} x (known, "
                       f"{params['n_paths']}-bit set)), beside flb-route's and flb-isolate's tables",
        "Sampler": f"{component.sampler_bits} bits (the last sample's tick per destination and path slot, the "
                   f"waiting measurement per destination)",
        "Paper (Table 1, Tofino)": "FLB as a whole: 5.82% match crossbar, 5.87% hash bits, 9.56% gateway, 4.12% "
                                   "SRAM, 3.34% VLIW actions, 8.2% ALU (not comparable cell by cell)",
    }


BLOCKS.append(Block(
    name="flb-tx-wire",
    summary="FLB source edge switch in the wire: parser -> flb-isolate -> isolated-path set filter -> flb-route -> "
            "deparser (path into the UDP source port's low bits, ICRC updated) -> marks (send stamps of samples, "
            "measurements carried back); CNMs on cnm, piggybacked delays on dly, measurements on meas, or all "
            "through ctl; 512-bit AXI4-Stream",
    paper_ref="FLB, sections 3.1, 3.2, 3.4, Algorithm 1, on RoCEv2 frames",
    params=[
        Param("n_flows", 65536, "flb-route's flow table and flb-isolate's flow range (flow = the parser's flow "
                                "hash, low bits), a power of two, 2 to 2**20"),
        Param("n_dests", 16, "destination edge switches, 1 to 256"),
        Param("n_paths", 8, "paths per destination, 2 to 16"),
        Param("n_slots", 8, "flb-isolate's isolated flows at once, 1 to 8"),
        Param("n_ports", 8, "congestion points per destination edge (flb-cnm's ports), 1 to 32"),
        Param("time_bits", 16, "width of now, 4 to 32"),
        Param("delay_bits", 16, "width of a path's queueing delay, 4 to 32"),
        Param("timeout", 4096, "flb-route: ticks after which an idle flow is new again (paper: 1 ms)"),
        Param("release", 4096, "flb-isolate: ticks of inactivity after which an isolated flow is released"),
        Param("margin", 0, "flb-route's margin: ticks taken off the reroute window (1: never ahead, for RoCE)"),
        Param("dest_shift", 8, "lowest bit of the destination edge switch in the destination address"),
        Param("tick_cycles", 64, "clocks per tick of now after reset (64: 256 ns at 250 MHz), 0 stops it"),
        Param("depth", 256, "deparser frame buffer, in 64-byte beats"),
        Param("sample_ticks", 64, "ticks between two samples of one (destination, path) after reset (64: 16.4 us, "
                                  "two base RTTs as the paper samples), 0 for none"),
    ],
    build=load("lbpipe.hdl.flb.wire:FlbTxWire"),
    golden=load("lbpipe.sim.flb.wire:FlbTxWireModel"),
    golden_ref="lbpipe.sim.flb.wire:FlbTxWireModel",
    tb_module="lbpipe.tb.flb.test_wire",
    doc="docs/flb_tx_wire.md",
    interface="packet",
    pcap_trace="lbpipe.tb.flb.test_wire:pcap_trace",
    paper={"Table 1 (Tofino, FLB as a whole)": "5.82% crossbar, 5.87% hash bits, 9.56% gateway, 4.12% SRAM"},
    report_extra=_tx_wire_extra,
))


# -- the receive side in the wire (flb-rx-wire) -----------------------------------------------------------------------


def _rx_wire_extra(params, component):
    return {
        "Latency": f"{component.latency} cycles from a sample's first beat in to its first beat out (cut-through), "
                   f"one beat per clock at every frame size (lbpipe bench flb-rx-wire)",
        "Buffers": f"beat FIFO {component.BEAT_DEPTH} beats; meas, dly, cnm and clear FIFOs {component.OUT_DEPTH} "
                   f"items each; enqueue FIFO {component.ENQ_DEPTH} events",
        "Notification": f"flb-cnm ({params['n_ports']} ports x {params['n_slots']} slots, K {params['threshold']} "
                        f"cells) and flb-prevhop ({params['n_flows']:,} flows) on the frames toward the hosts; CNM "
                        f"frames on m_cnm",
    }


BLOCKS.append(Block(
    name="flb-rx-wire",
    summary="FLB receive side in the wire: samples measured by flb-owd (meas), piggybacked delays (dly) and CNM "
            "frames (cnm) taken from the fabric's frames, FLB's marks cleared for the host; the destination side's "
            "CNMs (flb-cnm on the frames' enqueues and the deq reports, flb-prevhop) sent as CNM frames on m_cnm; "
            "512-bit AXI4-Stream",
    paper_ref="FLB, sections 3.1, 3.2, on RoCEv2 frames and CNM frames",
    params=[
        Param("n_edges", 16, "edge switches, 1 to 256 (flb-tx-wire's n_dests)"),
        Param("n_paths", 8, "paths per edge, 2 to 16"),
        Param("n_flows", 65536, "the CNM's flow range, a power of two, 2 to 65,536"),
        Param("n_ports", 8, "congestion points (egress ports) per edge, 1 to 32 (flb-cnm's)"),
        Param("time_bits", 16, "width of now and of the stamps, 4 to 16"),
        Param("delay_bits", 16, "width of a queueing delay, 4 to time_bits"),
        Param("edge_shift", 8, "lowest bit of the source edge switch in the source address"),
        Param("edge", 0, "this edge switch's number after reset (CNM frames for it are taken)"),
        Param("tick_cycles", 64, "clocks per tick of now after reset (64: 256 ns at 250 MHz), 0 stops it"),
        Param("n_slots", 4, "congested flows tracked per egress port, 1 to 8 (flb-cnm's)"),
        Param("q_bits", 16, "width of a port's queue estimate in 64-byte cells, 8 to 32"),
        Param("threshold", 512, "K in cells after reset (512: 32 KB), 1 to 2**q_bits - 1"),
        Param("port_shift", 0, "lowest bit of the egress port in the destination address"),
        Param("hop_timeout", 4096, "ticks after a flow's last frame at which its previous hop is forgotten (4,096 x "
                                   "256 ns: 1.05 ms), 1 to 2**time_bits - 1"),
    ],
    build=load("lbpipe.hdl.flb.rx_wire:FlbRxWire"),
    golden=load("lbpipe.sim.flb.rx_wire:FlbRxWireModel"),
    golden_ref="lbpipe.sim.flb.rx_wire:FlbRxWireModel",
    tb_module="lbpipe.tb.flb.test_rx_wire",
    doc="docs/flb_rx_wire.md",
    interface="packet",
    pcap_trace="lbpipe.tb.flb.test_rx_wire:pcap_trace",
    report_extra=_rx_wire_extra,
))
