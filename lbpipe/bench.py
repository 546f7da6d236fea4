"""Throughput benchmarks: traces through the RTL, measured in clock cycles by the cocotb testbench.

Each metadata block names its scenarios (``BENCHES``). A run drives the trace back to back (no idle cycles, no
back-pressure), so the testbench also checks every output's cycle against the golden model's timing. Packet
pipelines (``PACKET_BENCHES``) are measured per frame size: back-to-back frames of one size, every frame that leaves
checked against the golden model, beats accepted per clock counted, and, where the testbench reports it
(``themis-s-wire``), the cycles from a frame's first beat in to its first beat out. The figures reported are what
the simulation measured, never wall-clock time.
"""

import json
import pathlib
import statistics
import tempfile

from .engine import run_golden, run_rtl, top_verilog

__all__ = ["BENCHES", "PACKET_BENCHES", "PACKET_SIZES", "run_bench", "format_bench"]

#: Frame sizes (bytes, without FCS) of the packet benchmarks: the minimum, one byte over one and two beats, the
#: 100 GbE sizes the datasheet's line-rate arithmetic turns on, 1,518 and jumbo.
PACKET_SIZES = [64, 65, 128, 129, 130, 256, 512, 1024, 1518, 4096, 9216]
#: Packet pipelines with a cocotb ``bench`` testcase.
PACKET_BENCHES = ("themis-s-wire", "themis-d-wire", "pro-tx-wire", "laps-tx-wire", "laps-rx-wire", "pro-rx-wire",
                  "laps-editor", "selb-tx-wire", "flb-tx-wire", "flb-rx-wire")


def _themis_s_data(params):
    from lbpipe.hdl.lib.meta import PacketKind
    import random
    rng = random.Random(1)
    events = [{"ctl": {"table": 0, "index": p, "data": rng.randrange(1 << 16)}} for p in range(params["n_paths"])]
    events += [{"item": {"kind": PacketKind.DATA.value, "psn": k % (1 << 24), "flow_hash": rng.randrange(1 << 16),
                         "udp_sport": 0xC000, "tag": k & 0xFFFF}} for k in range(2000)]
    return events


def _themis_d_data(params):
    from lbpipe.hdl.lib.meta import PacketKind
    n = min(params["n_qps"], 64)
    events = [{"ctl": {"table": 0, "index": q}} for q in range(n)]
    events += [{"item": {"kind": PacketKind.DATA.value, "qp_hit": 1, "qp": k % n, "psn": k // n,
                         "tag": k & 0xFFFF}} for k in range(2000)]
    return events


def _themis_d_network(params, n_paths):
    from lbpipe.sim.themis.net import generate
    scenario = generate(1, n_paths=n_paths, n_qps=6, queue_depth=40, entry_bits=10, n_flows=4, packets_per_flow=300,
                        loss=0.02, gap_ns=100, path_delay_ns=(1000, 4000), last_hop_ns=200)
    return scenario.params, scenario.events


def _qp_classifier_lookups(params):
    from lbpipe.sim.packet.qp_classifier import qp_classifier_bench
    return qp_classifier_bench(params)


def _laps_pit_sustained(params, n=2000):
    """One lookup and one update in every clock: two paths per sub-table for 16 destinations, ``now`` 4 ns per clock
    (250 MHz), each clock's update an ACK for a path of the destination looked up two clocks before."""
    import random
    from lbpipe.sim.laps.pit import pit_commands
    rng = random.Random(1)
    k, sub = params["k"], params["n_entries"] // params["k"]
    entries = [{"pid": j * sub + x, "base_val": rng.randrange(2000, 6000), "anchors": ["10.0.0.1"]}
               for j in range(k) for x in range(1, min(sub, 3))]
    dests = [[j * sub + rng.randrange(1, min(sub, 3)) for j in range(k)] for _ in range(16)]
    events = [{"ctl": c} for c in pit_commands(entries, **params)]
    for t in range(n):
        now = 10_000 + 4 * t
        back = dests[(t - 2) % 16]
        events.append({"upd": {"pid": rng.choice(back), "owd": rng.randrange(2000, 9000), "now": now}})
        events.append({"item": {"kind": 1, "now": now, "tag": t & 0xFFFF,
                                **{f"pid{j}": p for j, p in enumerate(dests[t % 16])}}})
    return events


def _laps_pst_lookups(params):
    from lbpipe.sim.laps.pst import pst_bench
    return pst_bench(params)


def _laps_aimd_acks(params, n=2000):
    """One ACK every clock over 16 flows, now 4 ns per clock: runs to one flow back to back, calm and congested
    latency vectors mixed (adjustments and hold-offs both happen)."""
    import random
    from lbpipe.sim.laps.aimd import aimd_ack, aimd_commands
    rng = random.Random(1)
    flows = list(range(min(16, params["n_flows"])))
    events = [{"ctl": c} for c in aimd_commands([(f, 10_000_000, 20_000_000) for f in flows], **params)]
    for t in range(n):
        f = flows[(t // 4) % len(flows)]
        congested = rng.random() < 0.3
        paths = [(rng.randrange(6000, 9000) if congested else rng.randrange(1000, 3000), 5000)
                 for _ in range(params["k"])]
        events.append({"item": aimd_ack(f, 10_000 + 4 * t, paths, tag=t & 0xFFFF, k=params["k"])})
    return events


def _laps_loss_slots(params, n=2000):
    """One slot every clock, each with a send and an ACK: 8 paths, ACKs 40 slots after their send on each path,
    every 16th packet dropped (the next ACK of its path declares it), now 4 ns per clock."""
    from lbpipe.sim.laps.loss import loss_slot
    paths = [p % params["n_paths"] for p in range(1, 9)]
    events = []
    for t in range(n):
        k = t - 40
        ack = (k % 4, k, paths[k % 8]) if k >= 0 and k % 16 != 5 else None
        events.append({"item": loss_slot(10_000 + 4 * t, send=(t % 4, t, paths[t % 8], 10_000), ack=ack, tag=t)})
    return events


def _laps_pacer_requests(params, n=2000):
    """One request and one rate update every clock over 16 flows (runs of one flow back to back), now 4 ns per
    clock, 64 to 1,518-byte frames."""
    import random
    from lbpipe.sim.laps.pacer import pacer_commands
    rng = random.Random(1)
    flows = list(range(min(16, params["n_flows"])))
    events = [{"ctl": c} for c in pacer_commands([{"flow": f, "rate": 25_000_000, "bucket": 9216} for f in flows],
                                                 **params)]
    for t in range(n):
        f = flows[(t // 4) % len(flows)]
        events.append({"rate": {"flow": rng.choice(flows), "rate": rng.choice([10_000_000, 25_000_000])}})
        events.append({"item": {"kind": 1, "flow": f, "bytes": rng.choice([64, 512, 1518]),
                                "now": 10_000 + 4 * t, "tag": t & 0xFFFF}})
    return events


def _pro_rr_packets(params, n=2000):
    """One packet every clock: 32 QPs toward 4 ToRs sending in turn, ``batch`` packets each."""
    from lbpipe.sim.pro.rr import rr_commands
    n_qps, n_tors = min(32, params["n_qps"]), min(4, params["n_tors"])
    joins = [(q, q % n_tors) for q in range(n_qps)]
    events = [{"ctl": c} for c in rr_commands(seeds=[(t, (3 * t) % params["m_paths"]) for t in range(n_tors)],
                                              joins=joins)]
    events += [{"item": {"kind": 1, "qp": q, "tor": q % n_tors, "tag": t & 0xFFFF}}
               for t in range(n) for q in [(t // params["batch"]) % n_qps]]
    return events


def _flb_route_packets(params, n=2000):
    """One packet every clock: 64 flows toward 4 destinations, time advancing one tick every 8 packets, after
    the delays are set (spread so that flows reroute: a command mid-run would drain the pipeline)."""
    import random
    from lbpipe.sim.flb.route import TABLE_DELAY
    rng = random.Random(1)
    nd, n_p, nf = min(4, params["n_dests"]), params["n_paths"], params["n_flows"]
    db, tb = params["delay_bits"], params["time_bits"]
    events = []
    flows = [(f * 977) % nf for f in range(min(64, nf))]
    for dst in range(nd):
        for q in range(n_p):
            events.append({"ctl": {"table": TABLE_DELAY, "index": dst << 4 | q,
                                   "data": rng.randrange(min(1 << db, 64))}})
    for t in range(n):
        f = flows[rng.randrange(len(flows))]
        events.append({"item": {"kind": 1, "flow": f, "dest": f % nd, "now": (t // 8) % (1 << tb),
                                "tag": t & 0xFFFF}})
    return events


def _flb_owd_packets(params, n=2000):
    """One packet every clock: samples of 4 source edges on every path (runs of one (edge, path) back to back) and
    reverse packets toward those edges, the one-way delays moving up and down."""
    import random
    rng = random.Random(1)
    ne, n_p, mod = min(4, params["n_edges"]), params["n_paths"], 1 << params["time_bits"]
    events = []
    for t in range(n):
        now = t % mod
        if t % 3 == 2:
            item = {"reverse": 1, "to_edge": rng.randrange(ne)}
        else:
            e, q = (t // 6) % ne, (t // 24) % n_p
            item = {"sampled": 1, "edge": e, "path": q, "stamp": (now - 100 - rng.randrange(40)) % mod}
        events.append({"item": {"kind": 1, "now": now, "tag": t & 0xFFFF, **item}})
    return events


def _flb_cnm_events(params, n=2000):
    """One queue event every clock: every port filling past K together (a CNM storm) and draining below it, enqueue
    and dequeue amounts of a quarter to a half of K (at most the amount's width), 16 flows from 4 source edges."""
    import random
    rng = random.Random(1)
    npo, k = params["n_ports"], params["threshold"]
    a = max(1, min((1 << params["amount_bits"]) - 1, k // 2))
    flows = [(rng.randrange(1 << params["flow_bits"]), rng.randrange(min(4, params["n_edges"]))) for _ in range(16)]
    period = 2 * npo * (k // a + 2)
    events = []
    for t in range(n):
        f = rng.choice(flows)
        events.append({"item": {"port": t % npo, "deq": (t // period) % 2, "amount": rng.randrange(a // 2, a + 1),
                                "flow": f[0], "src": f[1], "tag": t & 0xFFFF}})
    return events


def _flb_isolate_events(params, n=2000):
    """Congestion CNMs isolating up to n_slots of 64 flows to 4 destinations (the i-th at congestion point i mod
    n_ports), then one packet every clock of all 64 flows (isolated ones included), a release and a new congestion
    CNM every 250 packets (each takes a clock)."""
    import random
    rng = random.Random(1)
    nd = min(4, params["n_dests"])
    flows = [(rng.randrange(params["n_flows"]), rng.randrange(nd)) for _ in range(64)]
    mod = 1 << params["time_bits"]
    events = [{"upd": {"flow": f, "dest": d, "n": rng.randrange(1, 9), "cong": 1, "cp": i % params["n_ports"],
                       "now": 0}}
              for i, (f, d) in enumerate(flows[:params["n_slots"]])]
    for t in range(n):
        if t % 250 == 249:
            f, d = flows[(t // 250) % params["n_slots"]]
            events.append({"upd": {"flow": f, "dest": d, "n": 2, "cong": (t // 250) % 2,
                                   "cp": ((t // 250) % params["n_slots"]) % params["n_ports"], "now": t % mod}})
        f, d = flows[t % 64]
        events.append({"item": {"flow": f, "dest": d, "now": t % mod, "tag": t & 0xFFFF}})
    return events


def _flb_prevhop_items(params, n=2000):
    """One item every clock: data packets of 64 flows from 4 previous hops (every flow moving to the next hop every
    500 items) and a CNM for one of the flows every third item, the timer advancing a tick every 8 items; the
    switch's MAC written first."""
    import random
    rng = random.Random(1)
    nf, mod = params["n_flows"], 1 << params["time_bits"]
    hops = [0x020000000100 + h for h in range(4)]
    flows = [(f * 977) % nf for f in range(min(64, nf))]
    events = [{"ctl": {"table": 0, "index": 0, "data": 0x021122334455}}]
    for t in range(n):
        f = flows[rng.randrange(len(flows))]
        item = {"cnm": 1} if t % 3 == 2 else {"cnm": 0, "mac": hops[(f + t // 500) % 4]}
        events.append({"item": {"kind": 1, "flow": f, "now": (t // 8) % mod, "tag": t & 0xFFFF, **item}})
    return events


def _selb_reroute_packets(params, n=3000):
    """One packet every clock from the block's seeded trace (a few flows, often back to back, cluster fields as
    selb-cluster would give them), its ignored commands dropped so nothing drains the pipeline."""
    from lbpipe.sim.selb.reroute import reroute_trace
    return [e for e in reroute_trace(1, n, **params) if "item" in e]


def _selb_reorder_items(params, n=3000):
    """One item every clock from the block's seeded trace (a few flows rerouted now and then: early packets held,
    tails releasing them, timeouts), back to back."""
    from lbpipe.sim.selb.reorder import reorder_trace
    return reorder_trace(1, n, **params)


def _selb_cluster_sustained(params, n=6000, period=1500):
    """One lookup and one queue sample every clock (the sample and the lookup of a clock share a group), paths in
    four queue levels drifting, a tick every ``period`` clocks (above the engine's worst case at the defaults, so
    no tick waits and the clustering time is hidden behind the period)."""
    import random
    rng = random.Random(1)
    n_p, qmax = params["n_paths"], (1 << params["q_bits"]) - 1
    # the engine's worst case (docs/selb_cluster.md), for parameters overridden beyond the defaults
    worst = 3 * params["k"] * params["draws"] + params["iter_cap"] * (n_p + params["q_bits"] + 5) + 2
    period = max(period, worst + 2)
    levels = [qmax // 40, qmax // 8, qmax // 3, qmax // 2]
    queue = [levels[p % 4] for p in range(n_p)]
    events = []
    for t in range(n):
        if t % period == period - 1:
            events.append({"smp": {"path": 0, "qlen": 0, "tick": 1}})
        else:
            p = t % n_p
            queue[p] = max(0, min(qmax, queue[p] + rng.randrange(-qmax // 256 - 1, qmax // 256 + 2)))
            events.append({"smp": {"path": p, "qlen": queue[p], "tick": 0}})
        events.append({"item": {"kind": 1, "path": rng.randrange(n_p), "tag": t & 0xFFFF}})
    return events


def _pro_ooo_events(params, n=2000):
    """One event every clock: 8 QPs, each one's packets reordered within a few PSNs and 1% lost, back to back."""
    import random
    from lbpipe.hdl.lib.meta import PacketKind
    from lbpipe.sim.pro.ooo import create_cmd
    rng = random.Random(1)
    qps = list(range(min(8, params["n_qps"])))
    events = [{"ctl": create_cmd(q, 0, 8)} for q in qps]
    nxt = {q: 0 for q in qps}
    for t in range(n):
        q = qps[(t // 3) % len(qps)]
        psn = nxt[q] + rng.randrange(0, 4)
        nxt[q] += 1
        if rng.random() < 0.01:
            psn = nxt[q] + 1
        events.append({"item": {"kind": PacketKind.DATA.value, "qp": q, "psn": psn % (1 << 24), "tag": t & 0xFFFF}})
    return events


#: Block -> [(scenario name, function(params) -> (params, events))].
BENCHES = {
    "laps-pit": [("one lookup + one update every clock", lambda p: (p, _laps_pit_sustained(p)))],
    "themis-s": [
        ("back-to-back data", lambda p: (p, _themis_s_data(p))),
    ],
    "qp-classifier": [("back-to-back lookups", lambda p: (p, _qp_classifier_lookups(p)))],
    "laps-softmax": [("back-to-back decisions", lambda p: (p, __import__(
        "lbpipe.sim.laps.softmax", fromlist=["softmax_bench"]).softmax_bench(**p)))],
    "laps-pst": [("back-to-back lookups", lambda p: (p, _laps_pst_lookups(p)))],
    "laps-aimd": [("one ACK every clock, 16 flows", lambda p: (p, _laps_aimd_acks(p)))],
    "laps-pacer": [("one request + one rate update every clock", lambda p: (p, _laps_pacer_requests(p)))],
    "laps-loss": [("one send + one ACK every clock, 8 paths, 1 in 16 lost", lambda p: (p, _laps_loss_slots(p)))],
    "pro-rr": [("one packet every clock, 32 QPs to 4 ToRs", lambda p: (p, _pro_rr_packets(p)))],
    "pro-ooo": [("one event every clock, 8 QPs, reordered", lambda p: (p, _pro_ooo_events(p)))],
    "flb-route": [("one packet every clock, 64 flows to 4 destinations", lambda p: (p, _flb_route_packets(p)))],
    "flb-owd": [("one packet every clock, samples and reverse packets of 4 edges", lambda p: (p, _flb_owd_packets(p)))],
    "flb-cnm": [("one queue event every clock, every port crossing K together", lambda p: (p, _flb_cnm_events(p)))],
    "flb-isolate": [("one packet every clock, 64 flows to 4 destinations, 8 isolated, a CNM every 250",
                     lambda p: (p, _flb_isolate_events(p)))],
    "flb-prevhop": [("one item every clock, 64 flows from 4 previous hops, a CNM every third item",
                     lambda p: (p, _flb_prevhop_items(p)))],
    "selb-cluster": [("one lookup + one queue sample every clock, a tick every 1,500 clocks",
                      lambda p: (p, _selb_cluster_sustained(p)))],
    "selb-reroute": [("one packet every clock, a few flows back to back, 40% congested",
                      lambda p: (p, _selb_reroute_packets(p)))],
    "selb-reorder": [("one item every clock, a few flows rerouted, early packets held and released",
                      lambda p: (p, _selb_reorder_items(p)))],
    "themis-d": [
        ("back-to-back data", lambda p: (p, _themis_d_data(p))),
        ("closed loop, N=8, 2% loss", lambda p: _themis_d_network(p, 8)),
        ("closed loop, N=64, 2% loss", lambda p: _themis_d_network(p, 64)),
    ],
}


def _run_packet_bench(block, params, speed=False):
    from lbpipe.tb.lib.runner import run_cocotb
    params = block.resolve(params)
    path = top_verilog(block, params)
    with tempfile.TemporaryDirectory(prefix="lbpipe-") as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        env = {"LBPIPE_PARAMS": json.dumps(params), "LBPIPE_BENCH_SIZES": json.dumps(PACKET_SIZES),
               "LBPIPE_BENCH_OUT": str(out)}
        run_cocotb(path, toplevel="lbpipe_top", test_module=block.tb_module, testcase="bench", extra_env=env)
        rows = json.loads(out.read_text())
    rows = [dict(row, block=block.name, scenario=f"back-to-back {row['size']}-byte frames", params=params,
                 kind="packet") for row in rows]
    # ``lbpipe bench --speed``: simulation speed per engine (wall clock and CPU time, unlike the figures above).
    from .fast import engine_speeds, supports
    if speed and supports(block) and block.pcap_trace is not None:
        rows += engine_speeds(block, params)
    return rows


def run_bench(block_name, params, speed=False):
    """Run every scenario of ``block_name``; returns a list of result dicts.

    ``params`` (the user's ``--param`` values) override the block's defaults and every scenario's own parameters
    (a closed-loop scenario sizes its network itself); a scenario whose trace does not fit the overridden
    parameters is refused with the reason."""
    from .blocks import get_block
    block = get_block(block_name)
    if block_name in PACKET_BENCHES:
        return _run_packet_bench(block, block.resolve(params), speed)
    from lbpipe.tb.lib.runner import simulator
    sim = simulator()
    results = []
    for name, make in BENCHES[block_name]:
        run_params, events = make(block.resolve(params))
        run_params = block.resolve({**run_params, **params})
        stats = {}
        outputs = run_rtl(block, run_params, events, stats=stats)
        if outputs != run_golden(block, run_params, events):
            raise AssertionError(f"{block_name} {name}: RTL and golden model differ")
        model = block.golden(**run_params)
        costs = [model.cycles(o) for o in outputs] if hasattr(model, "cycles") else []
        long = sorted(c for c in costs if c > 1)
        results.append({
            "block": block_name, "scenario": name, "params": run_params, "items": stats["items"], "simulator": sim,
            "cycles": stats["cycles"], "items_per_clock": stats.get("items_per_clock"),
            "stalling_items": len(long),
            "stall_median": statistics.median(long) if long else None,
            "stall_p90": long[int(0.9 * (len(long) - 1))] if long else None,
            "stall_max": long[-1] if long else None,
        })
    # ``lbpipe bench --speed``: simulation speed per engine, as for the packet pipelines.
    from .fast import item_speeds, supports
    if speed and supports(block):
        results += item_speeds(block, block.resolve(params))
    return results


def format_bench(results):
    packets = [r for r in results if r.get("kind") == "packet"]
    speeds = [r for r in results if r.get("kind") == "speed"]
    results = [r for r in results if r.get("kind") not in ("packet", "speed")]
    lines = []
    if results:
        lines += ["| Block | Scenario | Items | Items per clock | Items holding the pipeline > 1 cycle | "
                  "their cycles: median / p90 / max |", "|---|---|---|---|---|---|"]
        for r in results:
            stall = (f"{r['stall_median']} / {r['stall_p90']} / {r['stall_max']}" if r["stalling_items"] else "-")
            lines.append(f"| `{r['block']}` | {r['scenario']} | {r['items']} | {r['items_per_clock']:.3f} | "
                         f"{r['stalling_items']} | {stall} |")
        sims = sorted({r.get("simulator", "icarus").capitalize() for r in results})
        lines += ["", f"Measured in RTL simulation (cocotb + {' and '.join(sims)}), no idle input and no "
                  "back-pressure; each output's "
                  "cycle was checked against the golden model's timing. Items per clock counts accepted input items "
                  "from the first to the last acceptance, control writes included."]
    if packets:
        latency = any("first_beat_latency" in r for r in packets)
        extra = " First beat in to out, alone (cycles) | the same, back to back, max |" if latency else ""
        lines += ["" if lines else None, "| Block | Frame size (bytes) | Frames | Beats | Cycles | Beats per clock |"
                  + extra, "|---|---|---|---|---|---|" + ("---|---|" if latency else "")]
        for r in packets:
            cells = (f" {r.get('first_beat_latency', '-')} | {r.get('first_beat_latency_max', '-')} |"
                     if latency else "")
            lines.append(f"| `{r['block']}` | {r['size']} | {r['frames']} | {r['beats']} | {r['cycles']} | "
                         f"{r['beats_per_clock']:.3f} |" + cells)
        lines += ["", "Packet pipelines: back-to-back frames of one size (data of set-up flows), no idle input and no "
                  "back-pressure; every frame out checked against the golden model; cycles counted from the first "
                  "beat accepted to the last."
                  + (" First-beat latency: cycles from the edge that takes a frame's first beat on s_axis to the one "
                     "that hands its first beat on at m_axis, for one frame on the idle pipeline, and the largest "
                     "over the back-to-back run." if latency else "")]
    if speeds:
        lines += ["", "| Block | Engine | Frames or items | Cycles | Seconds | Cycles per second | "
                      "Cycles per CPU second |", "|---|---|---|---|---|---|---|"]
        for r in speeds:
            cpu = f"{r['cycles_per_cpu_second']:,.0f}" if r.get("cycles_per_cpu_second", 0) > 0 else "-"
            count = f"{r['frames']} frames" if "frames" in r else f"{r['items']} items"
            rate = f"{r['cycles_per_second']:,.0f}" if r["cycles_per_second"] > 0 else "- (too short to time)"
            lines.append(f"| `{r['block']}` | {r['engine']} | {count} | {r['cycles']} | {r['seconds']:.2f} | "
                         f"{rate} | {cpu} |")
        lines += ["", "Simulation speed (wall clock on a shared machine, so compare engines rather than runs): the "
                  "block's own trace (a pipeline's pcap trace, a metadata block's item trace) without pauses. The "
                  "fast engine times its own clock loop; the cocotb row is the cycles the trace takes beyond its "
                  "first frame or item alone (counted by the fast engine) over the time the replay takes beyond the "
                  "one-frame replay (CPU: the simulator process), so neither counts start-up. Builds are cached and "
                  "not timed (docs/simulation.md)."]
    return "\n".join(line for line in lines if line is not None) + "\n"
