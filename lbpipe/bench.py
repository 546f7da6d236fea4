"""Throughput benchmarks: traces through the RTL, measured in clock cycles by the cocotb testbench.

Each block names its scenarios (``BENCHES``). A run drives the trace back to back (no idle cycles, no back-pressure),
so the testbench also checks every output's cycle against the golden model's timing; the figures reported are what
the simulation measured, never wall-clock time.
"""

import statistics

from .engine import run_golden, run_rtl

__all__ = ["BENCHES", "run_bench", "format_bench"]


def _themis_s_data(params):
    from .hdl.meta import PacketKind
    import random
    rng = random.Random(1)
    events = [{"ctl": {"table": 0, "index": p, "data": rng.randrange(1 << 16)}} for p in range(params["n_paths"])]
    events += [{"item": {"kind": PacketKind.DATA.value, "psn": k % (1 << 24), "flow_hash": rng.randrange(1 << 16),
                         "udp_sport": 0xC000, "tag": k & 0xFFFF}} for k in range(2000)]
    return events


def _themis_d_data(params):
    from .hdl.meta import PacketKind
    n = min(params["n_qps"], 64)
    events = [{"ctl": {"table": 0, "index": q}} for q in range(n)]
    events += [{"item": {"kind": PacketKind.DATA.value, "qp_hit": 1, "qp": k % n, "psn": k // n,
                         "tag": k & 0xFFFF}} for k in range(2000)]
    return events


def _themis_d_network(params, n_paths):
    from .sim.themis_net import generate
    scenario = generate(1, n_paths=n_paths, n_qps=6, queue_depth=40, entry_bits=10, n_flows=4, packets_per_flow=300,
                        loss=0.02, gap_ns=100, path_delay_ns=(1000, 4000), last_hop_ns=200)
    return scenario.params, scenario.events


def _qp_classifier_lookups(params):
    from .sim.qp_classifier import qp_classifier_bench
    return qp_classifier_bench(params)


#: Block -> [(scenario name, function(params) -> (params, events))].
BENCHES = {
    "themis-s": [
        ("back-to-back data", lambda p: (p, _themis_s_data(p))),
    ],
    "qp-classifier": [("back-to-back lookups", lambda p: (p, _qp_classifier_lookups(p)))],
    "themis-d": [
        ("back-to-back data", lambda p: (p, _themis_d_data(p))),
        ("closed loop, N=8, 2% loss", lambda p: _themis_d_network(p, 8)),
        ("closed loop, N=64, 2% loss", lambda p: _themis_d_network(p, 64)),
    ],
}


def run_bench(block_name, params):
    """Run every scenario of ``block_name``; returns a list of result dicts."""
    from .blocks import get_block
    block = get_block(block_name)
    results = []
    for name, make in BENCHES[block_name]:
        run_params, events = make(block.resolve(params))
        run_params = block.resolve(run_params)
        stats = {}
        outputs = run_rtl(block_name, run_params, events, stats=stats)
        if outputs != run_golden(block_name, run_params, events):
            raise AssertionError(f"{block_name} {name}: RTL and golden model differ")
        model = block.golden(**run_params)
        costs = [model.cycles(o) for o in outputs] if hasattr(model, "cycles") else []
        long = sorted(c for c in costs if c > 1)
        results.append({
            "block": block_name, "scenario": name, "params": run_params, "items": stats["items"],
            "cycles": stats["cycles"], "items_per_clock": stats.get("items_per_clock"),
            "stalling_items": len(long),
            "stall_median": statistics.median(long) if long else None,
            "stall_p90": long[int(0.9 * (len(long) - 1))] if long else None,
            "stall_max": long[-1] if long else None,
        })
    return results


def format_bench(results):
    lines = ["| Block | Scenario | Items | Items per clock | Items holding the pipeline > 1 cycle | "
             "their cycles: median / p90 / max |", "|---|---|---|---|---|---|"]
    for r in results:
        stall = (f"{r['stall_median']} / {r['stall_p90']} / {r['stall_max']}" if r["stalling_items"] else "-")
        lines.append(f"| `{r['block']}` | {r['scenario']} | {r['items']} | {r['items_per_clock']:.3f} | "
                     f"{r['stalling_items']} | {stall} |")
    lines.append("")
    lines.append("Measured in RTL simulation (cocotb + Icarus), no idle input and no back-pressure; each output's cycle "
                 "was checked against the golden model's timing. Items per clock counts accepted input items from the "
                 "first to the last acceptance, control writes included.")
    return "\n".join(lines) + "\n"
