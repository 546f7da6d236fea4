"""Closed loop around the AIMD golden model (LAPS, IEEE ToN: section III-F; datasheet docs/laps_aimd.md, "Closed
loop"): one flow sprayed over K paths whose one-way delay rises with the sending rate above their capacity.

The network is a fluid model, stepped once per ACK (every ``ack_ns``):

* the flow's rate ``r`` (kbit/s, the golden model's ``rate``) is split over the paths in proportion to their
  capacities (the spread a latency-aware sprayer converges to), so every path congests together when ``r``
  exceeds the total capacity ``C``;
* path ``i`` holds a queue ``q_i`` (bits) that grows by ``(share_i - cap_i) x dt`` and never goes below 0;
* its one-way delay is ``prop_i + q_i / cap_i``; its baseVal ``prop_i + margin`` with a queuing margin of
  ``margin_pkts`` packets of ``pkt_bits`` at the path's capacity (the paper's "five packets").

Each ACK carries every path's current delay (real_val) and baseVal, as the PIT would return them. Only the golden
model runs here; nothing of the RTL.
"""

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.laps.aimd import Aimd, aimd_commands

__all__ = ["run_loop", "DEFAULT_CAPS"]

#: Path capacities in kbit/s (40 Gb/s in all, below the 100 Gb/s line rate).
DEFAULT_CAPS = (16_000_000, 12_000_000, 8_000_000, 4_000_000)


def run_loop(*, caps=DEFAULT_CAPS, prop_ns=(2000, 2500, 3000, 3500), n_acks=20_000, ack_ns=1000, margin_pkts=5,
             pkt_bits=8 * 1024, variant="paper", stages=5, line_rate=100_000_000, min_rate=100_000, start_ns=0,
             model=None):
    """Run the loop; returns a list of ``(now_ns, rate_kbps, expected_kbps, action, min_real_ns)`` per ACK.

    ``model`` replaces the golden model (a stand-in with the same ``control``/``process``), for tests of the
    loop's checker."""
    k = len(caps)
    if len(prop_ns) != k:
        raise ValueError("one propagation delay per path")
    params = dict(n_flows=2, k=k, stages=stages, variant=variant, line_rate=line_rate, min_rate=min_rate)
    aimd = model if model is not None else Aimd(**params)
    for cmd in aimd_commands([(0, line_rate, line_rate)], **params):
        aimd.control(cmd)
    total = sum(caps)
    base = [p + margin_pkts * pkt_bits * 1_000_000 // c for p, c in zip(prop_ns, caps)]
    queue = [0.0] * k
    rate = line_rate
    trace = []
    now = start_ns
    for _ in range(n_acks):
        now += ack_ns
        real = []
        for i in range(k):
            share = rate * caps[i] / total                        # kbit/s
            queue[i] = max(0.0, queue[i] + (share - caps[i]) * ack_ns / 1_000_000)   # bits
            real.append(min(0xFFFF_FFFE, int(prop_ns[i] + queue[i] * 1_000_000 / caps[i])))
        item = {"kind": PacketKind.ACK.value, "flow": 0, "now": now % (1 << 48), "tag": 0}
        for j in range(k):
            item.update({f"valid{j}": 1, f"real_val{j}": real[j], f"base_val{j}": base[j]})
        out = aimd.process(item)
        rate = out["rate"]
        trace.append((now, rate, out["expected"], out["action"], min(real)))
    return trace
