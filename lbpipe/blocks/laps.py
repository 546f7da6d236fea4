"""Registry entries of LAPS (IEEE ToN; datasheets docs/laps_pst.md, docs/laps_pit.md, docs/laps_softmax.md): the Path
Search Table, the decomposed Path Information Table and the softmax path choice."""

from .base import Block, Param, load  # noqa: F401

__all__ = ["BLOCKS"]

BLOCKS = []

# -- PST (laps-pst) ---------------------------------------------------------------------------------------------------
# (entry appended below by the PST work)

def _pst_memory(n_dests, k=8, ways=3, buckets=None, ipv6=False):
    """(slot bits, record bits) of a PST of ``n_dests`` records, ``n_dests / 2`` buckets a way unless given."""
    from lbpipe.hdl.laps.pst import PstSlot
    buckets = buckets or max(2, n_dests // 2)
    slot = PstSlot(n_dests=n_dests, buckets=buckets, ipv6=ipv6).size
    return ways * buckets * slot, n_dests * 16 * k


def _pst_extra(params, component):
    slots, records = _pst_memory(params["n_dests"], params["k"], params["ways"], params["buckets"], params["ipv6"])
    scale = "; ".join(f"{n // 1024}K: {sum(_pst_memory(n, params['k'], params['ways'])) / 8 / 1024:.0f} KiB"
                      for n in (1 << 10, 1 << 12, 1 << 14, 1 << 16))
    return {
        "Memory": f"{component.memory_bits} bits = {component.memory_bits / 8 / 1024:.1f} KiB: slots "
                  f"{params['ways']} x {params['buckets']} x {component.slot_bits} bit = {slots} bits, records "
                  f"{params['n_dests']} x {params['k']} x 16 bit = {records} bits ({params['n_dests'] - 1} "
                  f"destinations; record 0 is the miss action)",
        "Paper, Table V": "PST 74 LUT / 177 FF / 0 CARRY8 / 8 BRAM at 1,024 entries of 8 pids",
        "Scale (3 ways of n_dests / 2 buckets, 67% slot load, IPv4, k = 8: memory linear in destinations)": scale,
    }


BLOCKS.append(Block(
    name="laps-pst",
    summary="LAPS Path Search Table: exact match of a destination IP to its K candidate path ids, miss action",
    paper_ref="LAPS (IEEE ToN), sections II-B, III-C, III-H, Table V",
    params=[
        Param("n_dests", 1024, "records, a power of two: n_dests - 1 destinations (record 0 is the miss action)"),
        Param("k", 8, "pids per destination (PIT sub-tables), 1 to 32"),
        Param("ways", 3, "hash ways, 1 to 8, each with its own sparse H3 hash"),
        Param("buckets", 512, "slots per way, a power of two (3 x 512: 1,023 destinations at 67% load)"),
        Param("ipv6", False, "keys of 128-bit addresses (IPv4 and IPv6); false: 32-bit, IPv4 only"),
        Param("user_bits", 0, "width of the opaque user pass-through field (0: none)"),
    ],
    build=load("lbpipe.hdl.laps.pst:Pst"),
    golden=load("lbpipe.sim.laps.pst:Pst"),
    test_params=[
        dict(n_dests=16, k=8, ways=2, buckets=8, ipv6=False, user_bits=0),
        dict(n_dests=8, k=5, ways=3, buckets=4, ipv6=True, user_bits=3),
        dict(n_dests=32, k=1, ways=1, buckets=64, ipv6=False, user_bits=0),
    ],
    regression_items=1000,
    random_params=lambda rng: dict(n_dests=1 << rng.randrange(1, 7), k=rng.randrange(1, 17),
                                   ways=rng.randrange(1, 9), buckets=1 << rng.randrange(1, 7),
                                   ipv6=rng.random() < 0.5, user_bits=rng.choice([0, 1, 9])),
    tb_module="lbpipe.tb.laps.test_pst",
    trace="lbpipe.sim.laps.pst:pst_trace",
    doc="docs/laps_pst.md",
    paper={"LUT": 74, "FF": 177, "CARRY8": 0, "BRAM": 8},
    report_extra=_pst_extra,
))

# -- PIT (laps-pit) ---------------------------------------------------------------------------------------------------
# (entry appended below by the PIT work)

def _without(make, *names):
    """``make`` called without the parameters ``names`` (implementation choices its callee does not take)."""
    def call(**params):
        return make(**{n: v for n, v in params.items() if n not in names})
    call.__qualname__ = make.__qualname__
    return call


def _pit_extra(params, component):
    sub = params["n_entries"] // params["k"]
    per_entry = 2 * 81 + 163 + 1        # dstale + dval (valid/time/real_val), S (base_val/anchors), V
    scale = "; ".join(f"{n // 1024}K: {n * per_entry / 8 / 1024:.0f} KiB" for n in (1 << 10, 1 << 12, 1 << 14, 1 << 16))
    uram = {"infer": "infer: D and S marked ram_style ultra (synthesize with -uram)",
            "instance": f"instance: D and S are {7 * params['k']} URAM288_BASE (7 a sub-table), read registers in "
                        f"OREG_A"}.get(params.get("uram", "off"))
    return {"PIT memory": f"{component.memory_bits} bits: {params['k']} sub-tables x {sub} entries x (2 x 81-bit "
                          f"valid/time/real_val, one copy for the stale test and one for the values, + 163-bit "
                          f"base_val/anchors) + 1 valid bit per pid for the update stream",
            "Latency": f"{component.latency} cycles, one lookup and one update per clock",
            **({"UltraRAM (uram)": uram} if uram else {}),
            "Scale (326 bits per entry, any k: memory linear in entries; 65,536 is the 16-bit pid's limit)": scale}


BLOCKS.append(Block(
    name="laps-pit",
    summary="LAPS decomposed Path Information Table: k pids read per lookup, one update per clock, active probing",
    paper_ref="LAPS (IEEE ToN), sections III-C, III-D, III-H, Algorithm 1",
    params=[
        Param("n_entries", 8192, "paths, a multiple of k with n_entries / k a power of two, up to 65536"),
        Param("k", 8, "sub-tables = candidate paths per destination, 1 to 32"),
        Param("probe_rule", "paper", "paper: stale when now - time > 2 x real_val (Algorithm 1); max: > 2 x the "
                                     "largest finite real_val of the destination (the authors' simulator)",
              choices=("paper", "max")),
        Param("lfsr_seed", 0xACE1, "reset value of the 16-bit LFSR that picks the probed path"),
        Param("uram", "off", "where D and S live: off (tools choose; block RAM below 4K-deep sub-tables), infer "
                             "(ram_style ultra), instance (URAM288_BASE tiles, n_entries / k up to 4096)",
              choices=("off", "infer", "instance")),
    ],
    build=load("lbpipe.hdl.laps.pit:Pit"),
    # uram chooses primitives only: the golden model has no such parameter
    golden=_without(load("lbpipe.sim.laps.pit:Pit"), "uram"),
    streams=("upd",),
    test_params=[
        dict(n_entries=64, k=4, probe_rule="paper", lfsr_seed=0xACE1),
        dict(n_entries=96, k=3, probe_rule="max", lfsr_seed=0x1234),
        dict(n_entries=8192, k=8, probe_rule="paper", lfsr_seed=0xACE1),
    ],
    regression_items=400,
    random_params=lambda rng: dict(n_entries=(k := rng.randrange(1, 9)) * (1 << rng.randrange(2, 5)), k=k,
                                   probe_rule=rng.choice(["paper", "max"]), lfsr_seed=rng.randrange(1, 1 << 16)),
    tb_module="lbpipe.tb.laps.test_pit",
    trace="lbpipe.sim.laps.pit:pit_trace",
    doc="docs/laps_pit.md",
    paper={"LUT": 2950, "FF": 2976, "CARRY8": 0, "BRAM": 112},
    report_extra=_pit_extra,
))


# -- softmax path choice (laps-softmax) -------------------------------------------------------------------------------
# (entry appended below by the softmax work)


def _softmax_extra(params, component):
    return {"Latency": f"{component.latency} cycles, one decision per clock",
            "Exponent tables": f"{params['k']} x 1,024 x {2 * params['precision'] - 4} bit (one per slot)",
            "Paper, Table V softmax row": "26,949 LUT, 7,938 FF, 1,752 CARRY8, 0 BRAM (Vivado LUTs; lbpipe counts "
                                          "Yosys LUT cells, which Vivado would combine)"}


BLOCKS.append(Block(
    name="laps-softmax",
    summary="LAPS softmax path choice: exp(-beta d) weights by table, weighted random choice, one per clock",
    paper_ref="LAPS (IEEE ToN), sections II-E, III-E, III-H",
    params=[
        Param("k", 8, "candidate path slots per decision, 1 to 16"),
        Param("precision", 16, "weight width P in bits (Q0.P), 8 to 20"),
        Param("mode", "paper", "paper: exp(-beta d), beta a register; sim: the authors' simulator's "
                               "exp(-alpha d / base_val_max), per item", choices=("paper", "sim")),
    ],
    build=load("lbpipe.hdl.laps.softmax:Softmax"),
    golden=load("lbpipe.sim.laps.softmax:Softmax"),
    test_params=[dict(k=8, precision=16, mode="paper"), dict(k=3, precision=10, mode="paper"),
                 dict(k=1, precision=16, mode="sim"), dict(k=16, precision=20, mode="paper"),
                 dict(k=5, precision=16, mode="sim")],
    regression_items=600,
    random_params=lambda rng: dict(k=rng.randrange(1, 9), precision=rng.randrange(8, 21),
                                   mode=rng.choice(["paper", "sim"])),
    tb_module="lbpipe.tb.laps.test_softmax",
    trace="lbpipe.sim.laps.softmax:softmax_trace",
    doc="docs/laps_softmax.md",
    paper={"LUT": 26949, "FF": 7938, "CARRY8": 1752, "BRAM": 0},
    report_extra=_softmax_extra,
))



# -- AIMD rate controller (laps-aimd) ---------------------------------------------------------------------------------
# (entry appended below by the rate-controller work)

def _aimd_extra(params, component):
    bits = component.memory_bits // params["n_flows"]
    scale = "; ".join(f"{n // 1024}K: {n * bits / 8 / 1024:.0f} KiB" for n in (1 << 10, 1 << 12, 1 << 14, 1 << 16))
    return {"State memory": f"{component.memory_bits} bits: {params['n_flows']} flows x {bits} bits (rates: valid, "
                            f"two window-open flags, 4-bit stage, current and expected rate 32 bits each; deadlines: "
                            f"next-decrease and next-increase 48 bits each, a write enable each)",
            "Latency": f"{component.latency} cycles, one ACK per clock (same flow back to back included)",
            "Scale (state linear in flows; at 64K a URAM-sized table: Yosys maps it to URAM only with -uram)": scale,
            "Paper, Table V rate-limiting row": "3,012 LUT, 3,866 FF, 119 CARRY8, 8 BRAM (Vivado; lbpipe counts "
                                                "Yosys LUT cells)"}


BLOCKS.append(Block(
    name="laps-aimd",
    summary="LAPS per-flow AIMD rate controller: one ACK per clock, rates in kbit/s, paper and simulator windows",
    paper_ref="LAPS (IEEE ToN), section III-F, Algorithm 2, Table V",
    params=[
        Param("n_flows", 1024, "flows, a power of two from 2 to 65536"),
        Param("k", 8, "candidate path slots per ACK, 1 to 32"),
        Param("stages", 5, "N: linear increases before the hyper increase, 1 to 14"),
        Param("variant", "paper", "paper: Algorithm 2 with the text's window intent; sim: the authors' simulator "
                                  "(now > next, 1 Gb/s increase floor, 2 x T increase window)",
              choices=("paper", "sim")),
        Param("line_rate", 100_000_000, "highest rate, kbit/s (reset value; ctl table 2)"),
        Param("min_rate", 100_000, "lowest rate, kbit/s (reset value; ctl table 3)"),
    ],
    build=load("lbpipe.hdl.laps.aimd:Aimd"),
    golden=load("lbpipe.sim.laps.aimd:Aimd"),
    test_params=[
        dict(n_flows=16, k=4, stages=5, variant="paper", line_rate=100_000_000, min_rate=100_000),
        dict(n_flows=8, k=3, stages=2, variant="sim", line_rate=40_000_000, min_rate=1_000_000),
        dict(n_flows=1024, k=8, stages=5, variant="paper", line_rate=100_000_000, min_rate=100_000),
    ],
    regression_items=1000,
    random_params=lambda rng: dict(n_flows=1 << rng.randrange(1, 8), k=rng.randrange(1, 9),
                                   stages=rng.randrange(1, 15), variant=rng.choice(["paper", "sim"]),
                                   line_rate=(line := rng.randrange(1, 1 << 32)), min_rate=rng.randrange(0, line + 1)),
    tb_module="lbpipe.tb.laps.test_aimd",
    trace="lbpipe.sim.laps.aimd:aimd_trace",
    doc="docs/laps_aimd.md",
    paper={"LUT": 3012, "FF": 3866, "CARRY8": 119, "BRAM": 8},
    report_extra=_aimd_extra,
))


# -- pacer (laps-pacer) -----------------------------------------------------------------------------------------------
# (entry appended below by the pacer work)

def _pacer_extra(params, component):
    return {"Latency": f"{component.latency} cycles, one decision and one rate update per clock",
            "Per-flow memory": f"{component.memory_bits} bits: tokens and fresh 31, last 48, rate 27 (stored capped), "
                               f"exists and bucket 17, a copy of exists for the rate stream 1",
            "Paper, Table V rate-limiting row": "3,012 LUT, 3,866 FF, 119 CARRY8, 8 BRAM (the AIMD controller and "
                                                "the pacer together; Vivado LUTs, lbpipe counts Yosys LUT cells)"}


BLOCKS.append(Block(
    name="laps-pacer",
    summary="LAPS transmit-side pacer: per-flow token bucket, one decision and one rate update per clock",
    paper_ref="LAPS (IEEE ToN), section III-F, Table V",
    params=[Param("n_flows", 1024, "flows, a power of two from 2 to 65536")],
    build=load("lbpipe.hdl.laps.pacer:Pacer"),
    golden=load("lbpipe.sim.laps.pacer:Pacer"),
    streams=("rate",),
    test_params=[dict(n_flows=16), dict(n_flows=2), dict(n_flows=1024)],
    regression_items=1000,
    random_params=lambda rng: dict(n_flows=1 << rng.randrange(1, 9)),
    tb_module="lbpipe.tb.laps.test_pacer",
    trace="lbpipe.sim.laps.pacer:pacer_trace",
    doc="docs/laps_pacer.md",
    paper={"LUT": 3012, "FF": 3866, "CARRY8": 119, "BRAM": 8},
    report_extra=_pacer_extra,
))


# -- per-path loss detection (laps-loss) -----------------------------------------------------------------------------
# (entry appended below by the loss-detection work)

def _loss_extra(params, component):
    n, L, kb = params["n_paths"], params["depth"], params["flow_bits"] + 32
    return {"State": f"pool {n} paths x {L} entries x {kb} bit = {n * L * kb} bits (one copy: the eviction read "
                     f"shares the write port, read-first); tails and heads 16 bit, deadlines 48 bit per path: "
                     f"{component.memory_bits} bits in all (tails and heads are read at two addresses: two copies)",
            "Latency": f"{component.latency} cycles; one slot (a send and an ACK, or a timer check) per clock; an "
                       f"ACK's scan is one clock whatever it declares lost (up to {L - 1} entries)",
            "Paper, section III-H": "Algorithm 3 'requires a ring buffer and associated hardware for each flow, which "
                                    "exceeds the resources available on the FPGA': per path, not per flow, it fits"}


BLOCKS.append(Block(
    name="laps-loss",
    summary="LAPS loss detection (Algorithm 3): per-path rings of unacknowledged packets, ACK-order rule, timeout",
    paper_ref="LAPS (IEEE ToN), section III-G, Algorithm 3",
    params=[
        Param("n_paths", 1024, "path ids tracked, a power of two from 2 to 65536 (pids at or above: out of range)"),
        Param("depth", 16, "entries per path (ring size): 4, 8, 16 or 32"),
        Param("flow_bits", 16, "width of the flow id, 1 to 32"),
    ],
    build=load("lbpipe.hdl.laps.loss:Loss"),
    golden=load("lbpipe.sim.laps.loss:Loss"),
    test_params=[dict(n_paths=8, depth=4, flow_bits=4), dict(n_paths=16, depth=16, flow_bits=9)],
    regression_items=1500,
    random_params=lambda rng: dict(n_paths=1 << rng.randrange(1, 7), depth=rng.choice([4, 8, 16, 32]),
                                   flow_bits=rng.randrange(1, 33)),
    tb_module="lbpipe.tb.laps.test_loss",
    trace="lbpipe.sim.laps.loss:loss_trace",
    doc="docs/laps_loss.md",
    paper={"resources": "none given: Algorithm 3 'exceeds the resources available on the FPGA' (section III-H)"},
    report_extra=_loss_extra,
))


# -- sender in the wire (laps-tx-wire) -------------------------------------------------------------------------------
# (entry appended below by the sender-pipeline work)

def _tx_wire_extra(params, component):
    return {"Latency": f"{component.latency} cycles from a one-beat frame's beat in to its first beat out; a longer "
                       f"frame's first beat leaves when its last beat is in plus the editor's pipeline "
                       f"(docs/laps_tx_wire.md); decision {component.decision_latency} cycles from the second beat",
            "Throughput": "1 beat per clock out; in, 1 beat per clock less the beat a header adds to a frame and "
                          "the output slots a probe takes (1-2 beats, max(0, 7 - n) idle cycles after an n-beat "
                          "frame) (lbpipe bench laps-tx-wire)"}


BLOCKS.append(Block(
    name="laps-tx-wire",
    summary="LAPS sender in the wire: parser -> PST -> PIT -> softmax path choice -> LAPS header INSERT (pid, send "
            "time, the path's anchors) and probe frames after their triggering frames, 512-bit AXI4-Stream; PIT "
            "updates on upd",
    paper_ref="LAPS (IEEE ToN), sections III-B to III-E, Figures 3 and 5, Algorithm 1",
    params=[
        Param("n_dests", 1024, "PST records (record 0 the miss record)"),
        Param("k", 8, "candidate paths per destination = PIT sub-tables, 1 to 16"),
        Param("ways", 3, "PST ways"),
        Param("buckets", 512, "PST slots per way, a power of two"),
        Param("ipv6", False, "PST keys of 128 bits (IPv4 and IPv6 frames) or 32 (IPv4 only)"),
        Param("n_entries", 8192, "PIT paths, a multiple of k with n_entries / k a power of two"),
        Param("probe_rule", "paper", "the PIT's stale rule", choices=("paper", "max")),
        Param("lfsr_seed", 0xACE1, "the PIT's probe LFSR seed"),
        Param("precision", 16, "softmax weight width"),
        Param("depth", 256, "editor frame buffer, in 64-byte beats"),
        Param("laps_port", 0xC1A5, "UDP port of the LAPS shim"),
        Param("tick_ns", 4, "ns the clock advances per cycle after reset (4 at 250 MHz), 0 to 255"),
    ],
    build=load("lbpipe.hdl.laps.tx_wire:LapsTxWire"),
    golden=load("lbpipe.sim.laps.tx_wire:LapsTxWireModel"),
    golden_ref="lbpipe.sim.laps.tx_wire:LapsTxWireModel",
    tb_module="lbpipe.tb.laps.test_tx_wire",
    doc="docs/laps_tx_wire.md",
    interface="packet",
    pcap_trace="lbpipe.tb.laps.test_tx_wire:pcap_trace",
    report_extra=_tx_wire_extra,
))


# -- receiver in the wire (laps-rx-wire) -----------------------------------------------------------------------------
# (entry appended below by the receiver-pipeline work)


def _rx_wire_extra(params, component):
    return {"Latency": f"{component.latency} cycles from a data frame's first beat in to its ACK's first beat on "
                       f"m_ack (cut-through); host frames store-and-forward, 13 cycles after their last beat "
                       f"(the LAPS editor), one beat per clock (lbpipe bench laps-rx-wire)"}


BLOCKS.append(Block(
    name="laps-rx-wire",
    summary="LAPS receiver in the wire: data frames answered by ACK frames built in the NIC (pid, one-way latency, "
            "reversed source route), ACKs turned into PIT updates and loss items, LAPS headers removed for the host",
    paper_ref="LAPS (IEEE ToN), sections III-B to III-G, Figures 3 and 5",
    params=[
        Param("n_entries", 8192, "PIT entries (pids checked against it), a multiple of k"),
        Param("k", 8, "PIT sub-tables (index 0 of each is no path)"),
        Param("depth", 256, "LAPS editor frame buffer, in 64-byte beats"),
        Param("laps_port", 0xC1A5, "UDP destination port of the LAPS shim"),
        Param("ipv6", False, "answer IPv6 data frames and probes too (IPv6 ACKs); false: IPv4 only"),
    ],
    build=load("lbpipe.hdl.laps.rx_wire:LapsRxWire"),
    golden=load("lbpipe.sim.laps.rx_wire:LapsRxWireModel"),
    golden_ref="lbpipe.sim.laps.rx_wire:LapsRxWireModel",
    tb_module="lbpipe.tb.laps.test_rx_wire",
    pcap_trace="lbpipe.tb.laps.test_rx_wire:pcap_trace",
    held_inputs={"now": "lbpipe.sim.laps.rx_wire:REPLAY_NOW"},
    doc="docs/laps_rx_wire.md",
    interface="packet",
    report_extra=_rx_wire_extra,
))
