"""Measures what a switch version of Themis-D's per-NACK scan would cost (p4/README.md, "Themis-D").

A v1model (or Tofino-class) pipeline reads a register array a fixed number of times per pass, so a NACK's scan of
its QP's PSN queue must either recirculate (k entries per pass) or stop after k entries (bounded scan: forward the
NACK when undecided). This runs lbpipe's closed-loop model (sim/themis/net.py: 4 QPs, 1 to 4 us path delay spread,
200 ns last hop, 100 ns between a QP's packets, 2% loss, queue depth 40, 10-bit entries, 300 packets per flow,
seeds 1 to 5) and reads the golden model's ``scanned`` (queue entries each NACK's scan read before it decided):
recirculation costs ``ceil(scanned / k)`` extra passes, and a bounded scan decides exactly as Themis-D does when
``scanned <= k``. Run: .venv/bin/python p4/sim/themis_d_scan.py
"""

import math

from lbpipe.sim.themis.net import generate

NACK = 3


def scans(n_paths, seeds=range(1, 6)):
    out = []
    for seed in seeds:
        sc = generate(seed, n_paths=n_paths, n_qps=6, queue_depth=40, entry_bits=10, n_flows=4, packets_per_flow=300,
                      loss=0.02, gap_ns=100, path_delay_ns=(1000, 4000), last_hop_ns=200)
        for ev, res, info in zip(sc.items, sc.outputs, sc.info):
            if info["origin"] == "nack" and ev["item"]["kind"] == NACK:
                out.append(res["scanned"])
    return sorted(out)


def main():
    print("| N | NACKs | scanned median / p90 / max | extra passes, k = 4: mean / max | k = 8: mean / max "
          "| bounded scan decides as Themis-D: k = 4 / 8 / 16 |")
    print("|---|---|---|---|---|---|")
    for n_paths in (2, 8, 64):
        s = scans(n_paths)
        med, p90 = s[len(s) // 2], s[int(0.9 * (len(s) - 1))]
        row = [str(n_paths), str(len(s)), f"{med} / {p90} / {s[-1]}"]
        for k in (4, 8):
            passes = [math.ceil(x / k) for x in s]
            row.append(f"{sum(passes) / len(passes):.1f} / {max(passes)}")
        row.append(" / ".join(f"{sum(x <= k for x in s) / len(s):.0%}" for k in (4, 8, 16)))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
