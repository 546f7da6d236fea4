"""Seeded random traces of Themis-S and Themis-D, for the tests and for ``lbpipe trace``.

These traces aim at coverage, not realism: every packet kind, unknown and out-of-range ids, PSNs straddling the
2**24 wrap, control commands in the middle of traffic, forged NACKs. The realistic closed-loop Themis traffic
(paths, loss, a receiving NIC) is :mod:`lbpipe.sim.themis.net`.
"""

import random

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.lib.psn import PSN_MOD

__all__ = ["themis_s_trace", "themis_d_trace"]

_KINDS = [k.value for k in PacketKind]


def themis_s_trace(seed, n_items, *, n_paths, mode, hash_bits):
    """PathMap programmed with random values (some entries rewritten mid-trace), then mixed traffic."""
    rng = random.Random(seed)
    events = [{"ctl": {"table": 0, "index": p, "data": rng.randrange(1 << 16)}} for p in range(n_paths)]
    flows = [(rng.randrange(1 << hash_bits), rng.randrange(1 << 16), rng.randrange(PSN_MOD)) for _ in range(6)]
    flows.append((rng.randrange(1 << hash_bits), 0xC000, PSN_MOD - 5))   # crosses the PSN wrap
    psns = [f[2] for f in flows]
    for n in range(n_items):
        if rng.random() < 0.01:
            # PathMap rewrite, an out-of-range index, or an unknown table: the last two must change nothing.
            table, index = rng.choice([(0, rng.randrange(n_paths)), (0, n_paths + rng.randrange(8)),
                                       (rng.randrange(1, 256), rng.randrange(n_paths))])
            events.append({"ctl": {"table": table, "index": index, "data": rng.randrange(1 << 64)}})
        f = rng.randrange(len(flows))
        kind = PacketKind.DATA.value if rng.random() < 0.75 else rng.choice(_KINDS)
        events.append({"item": {"kind": kind, "psn": psns[f], "flow_hash": flows[f][0], "udp_sport": flows[f][1],
                                "tag": n & 0xFFFF}})
        if kind == PacketKind.DATA.value:
            psns[f] = (psns[f] + 1) % PSN_MOD
    return events


def themis_d_trace(seed, n_items, *, n_qps, queue_depth, n_paths, entry_bits):
    """QPs set up (some left idle), data with local reordering, NACKs near ePSN, forged NACKs far from it,
    unknown and out-of-range QPs, other traffic, set-up/tear-down in mid-traffic."""
    rng = random.Random(seed)
    qp_bits = max(1, (n_qps - 1).bit_length())
    active = sorted(rng.sample(range(n_qps), max(1, (3 * n_qps) // 4)))
    events = [{"ctl": {"table": 0, "index": q, "data": 0}} for q in active]
    nxt = {q: rng.choice([rng.randrange(PSN_MOD), PSN_MOD - rng.randrange(1, 40)]) for q in range(1 << qp_bits)}
    spread = max(2, min(n_paths, 8))
    for n in range(n_items):
        r = rng.random()
        if r < 0.01:
            events.append({"ctl": {"table": rng.choice([0, 1, 0, 7]), "index": rng.randrange(n_qps + 4),
                                   "data": 0}})
        q = rng.randrange(1 << qp_bits)
        hit = int(rng.random() < 0.95)
        r = rng.random()
        if r < 0.65:
            kind = PacketKind.DATA.value
            psn = (nxt[q] + rng.randrange(-spread, spread)) % PSN_MOD
            nxt[q] = (nxt[q] + 1) % PSN_MOD
        elif r < 0.88:
            kind = PacketKind.NACK.value
            if rng.random() < 0.9:
                psn = (nxt[q] - rng.randrange(1, queue_depth + 2 * spread)) % PSN_MOD
            else:
                psn = rng.randrange(PSN_MOD)   # forged
        else:
            kind = rng.choice(_KINDS)
            psn = rng.randrange(PSN_MOD)
        msn = rng.randrange(1 << 24) if rng.random() < 0.5 else 0   # the block must carry it, whatever the kind
        events.append({"item": {"kind": kind, "qp_hit": hit, "qp": q, "psn": psn, "msn": msn, "tag": n & 0xFFFF}})
    return events

