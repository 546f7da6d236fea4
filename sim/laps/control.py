"""The LAPS control plane: candidate paths, PST and PIT contents and ``ctl`` traces for one host (LAPS, IEEE ToN,
sections II-B, III-C, III-D, III-H, IV-A, Table I).

For a source host this module finds every destination host's candidate paths, orders them so that the ``j``-th
path of a destination lives in PIT sub-table ``j``, gives each path a pid (``pid = j * (n_entries // k) + index``,
index 0 of each sub-table reserved), its baseVal and its anchors, and returns the tables in the JSON form of
``lbpipe paths --json``. The datasheet is docs/laps_control.md; topologies are :mod:`lbpipe.sim.laps.topology`.

Path rules (``rule="paper"``, the default for the two topologies the paper evaluates):

* Dragonfly: one path under the same switch; three inside a group (the direct local link, then one via each other
  switch of the group, in switch order); eight across groups (the direct global link, then one via each other group
  as the intermediate, in group order). Segments between anchors follow the Dragonfly's minimal routing (local hop,
  the global link between the two groups, local hop). Anchor of a via path: the via switch, or the switch where
  the path enters the intermediate group. Direct paths carry no anchor.
* Rail-only: one path inside a cluster (through its NVLink switch, no anchor); eight between clusters, one per rail
  switch in rail order, each anchored at its rail switch (NVLink to the GPU on that rail, the rail switch, the
  destination cluster's GPU on that rail, NVLink to the destination).

Any other graph (``rule="kshortest"``): the ``n_paths`` shortest loopless paths (Yen's algorithm,
:func:`networkx.shortest_simple_paths`) by uncongested latency (link delay plus one serialisation per link), with
only switches and relaying hosts inside a path; anchors are found greedily: from the source, the longest prefix
that is the unique hop-count shortest path between its ends, then again from its last node, which becomes an
anchor. A path that needs more than four anchors is not a candidate.
"""

import dataclasses
import fractions
import functools
import ipaddress
import math

import networkx as nx

from lbpipe.sim.laps.topology import HOST, hosts

__all__ = [
    "Path", "MARGINS", "MAX_ANCHORS", "PACKET_BYTES", "RULES", "find_host", "candidate_paths", "dragonfly_paths",
    "rail_paths", "kshortest_paths", "anchors_for", "serialisation_ns", "base_val", "host_tables", "tables_json",
    "ctl_commands", "summary",
]

#: Anchors a PIT entry holds (the LAPS header's SR field, lbpipe/protocol.py LAPS_MAX_ANCHORS, written again here
#: because the control plane's limit is a fact of the table format).
MAX_ANCHORS = 4
#: Packet size of the baseVal serialisation terms: the paper's 1,500-byte packets (section III-B, IV-A).
PACKET_BYTES = 1500
#: Queuing margins of baseVal: (packets, where). "paper": five packets at each switch along the path (section
#: III-F); "simulator": one packet per hop (the authors' simulator, shared/reference).
MARGINS = {"paper": (5, "switch"), "simulator": (1, "hop")}
RULES = ("auto", "paper", "kshortest")
_INFINITY = 0xFFFF_FFFF
_PID_BITS = 16


@dataclasses.dataclass(frozen=True)
class Path:
    """One candidate path: ``hops`` from the source host to the destination host (node names), ``anchors`` the
    waypoint switches that distinguish it (at most :data:`MAX_ANCHORS`)."""
    hops: tuple
    anchors: tuple = ()


def find_host(g, spec):
    """The host ``spec`` names: a host's node name, else its IP address, else its number (0-based, node order)."""
    host_list = hosts(g)
    text = str(spec)
    by_name = {str(h): h for h in host_list}
    if text in by_name:
        return by_name[text]
    for h in host_list:
        if g.nodes[h]["ip"] == text:
            return h
    if text.isdigit():
        i = int(text)
        if i < len(host_list):
            return host_list[i]
        raise ValueError(f"host number {i} is out of range: the topology has {len(host_list)} hosts (0-"
                         f"{len(host_list) - 1})")
    raise ValueError(f"unknown host {text!r}: give a host name (e.g. {host_list[0]!r}), its IP address or its "
                     f"number 0-{len(host_list) - 1}")


# -- paper rules -----------------------------------------------------------------------------------------------------

def _attached_switch(g, host):
    switches = [n for n in g[host] if g.nodes[n]["kind"] != HOST]
    if len(switches) != 1:
        raise ValueError(f"host {host!r} has {len(switches)} switch links; the paper's rules need exactly one")
    return switches[0]


def _dragonfly_structure(g):
    """(switch by (group, index), gateway by (from group, to group), group count) read from the graph."""
    try:
        by_pos = {(a["group"], a["index"]): n for n, a in g.nodes(data=True) if a["kind"] != HOST}
        gateway = {}
        for u, v in g.edges:
            gu, gv = g.nodes[u], g.nodes[v]
            if gu["kind"] != HOST and gv["kind"] != HOST and gu["group"] != gv["group"]:
                key = (gu["group"], gv["group"])
                if key in gateway:
                    raise ValueError(f"not a Dragonfly: groups {key[0]} and {key[1]} have two global links")
                gateway[key] = u
                gateway[key[::-1]] = v
    except KeyError as exc:
        raise ValueError(f"not a Dragonfly: a switch lacks its {exc.args[0]!r} attribute") from None
    groups = sorted({grp for grp, _ in by_pos})
    missing = [(a, b) for a in groups for b in groups if a != b and (a, b) not in gateway]
    if missing:
        raise ValueError(f"not a Dragonfly: no global link between groups {missing[0][0]} and {missing[0][1]}")
    return by_pos, gateway, groups


def _dragonfly_route(g, gateway, a, b):
    """Switches from ``a`` to ``b`` by the Dragonfly's minimal routing: local hop, global link, local hop."""
    ga, gb = g.nodes[a]["group"], g.nodes[b]["group"]
    if a == b:
        return [a]
    if ga == gb:
        return [a, b]
    out, inn = gateway[(ga, gb)], gateway[(gb, ga)]
    return [a] + ([out] if out != a else []) + [inn] + ([b] if b != inn else [])


def dragonfly_paths(g, src):
    """The paper's Dragonfly candidate paths from host ``src``: ``{dst: [Path, ...]}`` in host order."""
    by_pos, gateway, groups = _dragonfly_structure(g)
    a = _attached_switch(g, src)
    ga = g.nodes[a]["group"]
    out = {}
    for dst in hosts(g):
        if dst == src:
            continue
        b = _attached_switch(g, dst)
        gb = g.nodes[b]["group"]
        if a == b:
            out[dst] = [Path((src, a, dst))]
        elif ga == gb:
            paths = [Path((src, a, b, dst))]
            for (grp, _), w in sorted(by_pos.items()):
                if grp == ga and w not in (a, b):
                    paths.append(Path((src, a, w, b, dst), (w,)))
            out[dst] = paths
        else:
            paths = [Path((src, *_dragonfly_route(g, gateway, a, b), dst))]
            for mid in groups:
                if mid in (ga, gb):
                    continue
                entry = gateway[(mid, ga)]
                first = _dragonfly_route(g, gateway, a, entry)
                second = _dragonfly_route(g, gateway, entry, b)
                paths.append(Path((src, *first, *second[1:], dst), (entry,)))
            out[dst] = paths
    return out


def rail_paths(g, src):
    """The paper's Rail-only candidate paths from GPU ``src``: ``{dst: [Path, ...]}`` in host order."""
    try:
        gpu = {(a["cluster"], a["rail"]): n for n, a in g.nodes(data=True) if a["kind"] == HOST}
        nvswitch = {a["cluster"]: n for n, a in g.nodes(data=True) if a["kind"] == "nvswitch"}
        rails = {a["rail"]: n for n, a in g.nodes(data=True) if a["kind"] == "switch"}
    except KeyError as exc:
        raise ValueError(f"not a Rail-only network: a node lacks its {exc.args[0]!r} attribute") from None
    lacking = [(c, r) for c in sorted(nvswitch) for r in sorted(rails) if (c, r) not in gpu]
    if lacking or set(gpu) != {(c, r) for c in nvswitch for r in rails}:
        where = f"cluster {lacking[0][0]} has no GPU on rail {lacking[0][1]}" if lacking else "a GPU's cluster or " \
            "rail has no switch"
        raise ValueError(f"not a Rail-only network: {where}")
    c, i = g.nodes[src]["cluster"], g.nodes[src]["rail"]
    out = {}
    for dst in hosts(g):
        if dst == src:
            continue
        d, j = g.nodes[dst]["cluster"], g.nodes[dst]["rail"]
        if c == d:
            out[dst] = [Path((src, nvswitch[c], dst))]
            continue
        paths = []
        for r in sorted(rails):
            hops = [src] + ([nvswitch[c], gpu[(c, r)]] if r != i else []) + [rails[r]]
            hops += ([gpu[(d, r)], nvswitch[d]] if r != j else []) + [dst]
            paths.append(Path(tuple(hops), (rails[r],)))
        out[dst] = paths
    return out


# -- any graph -------------------------------------------------------------------------------------------------------

def _transit(g, n):
    attrs = g.nodes[n]
    return attrs["kind"] != HOST or attrs.get("relay", False)


class _Counts:
    """Hop-count distances and numbers of shortest paths from a node, through transit nodes only (cached)."""

    def __init__(self, g):
        self.g = g
        self.cache = {}

    def __call__(self, u):
        if u not in self.cache:
            dist, count, frontier = {u: 0}, {u: 1}, [u]
            while frontier:
                nxt = []
                for x in frontier:
                    if x != u and not _transit(self.g, x):
                        continue
                    for y in self.g[x]:
                        if y not in dist:
                            dist[y] = dist[x] + 1
                            count[y] = 0
                            nxt.append(y)
                        if dist[y] == dist[x] + 1:
                            count[y] += count[x]
                frontier = nxt
            self.cache[u] = (dist, count)
        return self.cache[u]


def anchors_for(g, hops, counts=None):
    """Waypoints that pin ``hops`` down: every segment between the source, the anchors and the destination is the
    unique hop-count shortest path between its ends (greedy, from the source)."""
    counts = counts or _Counts(g)
    anchors, p = [], 0
    while p < len(hops) - 1:
        dist, count = counts(hops[p])
        q = p + 1
        while q + 1 < len(hops) and dist.get(hops[q + 1]) == q + 1 - p and count.get(hops[q + 1]) == 1:
            q += 1
        if q < len(hops) - 1:
            anchors.append(hops[q])
        p = q
    return tuple(anchors)


def _canonical(g, packet_bytes):
    """``g`` with links in node order (so ties between equal paths break the same way for a graph and its file
    copy) and a ``cost`` per link: delay plus one serialisation."""
    pos = {n: i for i, n in enumerate(g)}
    h = nx.Graph()
    h.add_nodes_from(g.nodes(data=True))
    edges = sorted((tuple(sorted((u, v), key=pos.get)) for u, v in g.edges), key=lambda e: (pos[e[0]], pos[e[1]]))
    for u, v in edges:
        d = g.edges[u, v]
        h.add_edge(u, v, **d, cost=math.ceil(d["delay"]) + serialisation_ns(d["rate"], packet_bytes))
    return h


def kshortest_paths(g, src, n_paths, *, packet_bytes=PACKET_BYTES):
    """The ``n_paths`` shortest loopless paths from ``src`` to every other host, with their anchors."""
    if not isinstance(n_paths, int) or n_paths < 1:
        raise ValueError(f"the number of paths must be a positive integer, not {n_paths!r}")
    h = _canonical(g, packet_bytes)
    counts = _Counts(h)
    out = {}
    for dst in hosts(h):
        if dst == src:
            continue
        view = nx.subgraph_view(h, filter_node=lambda n, d=dst: n in (src, d) or _transit(h, n))
        paths, tried = [], 0
        try:
            for hops in nx.shortest_simple_paths(view, src, dst, weight="cost"):
                tried += 1
                anchors = anchors_for(h, hops, counts)
                if len(anchors) <= MAX_ANCHORS:
                    paths.append(Path(tuple(hops), anchors))
                if len(paths) == n_paths or tried >= 64 * n_paths:
                    break
        except nx.NetworkXNoPath:
            pass
        if not paths:
            raise ValueError(f"no path from {src!r} to {dst!r} through switches")
        out[dst] = paths
    return out


def candidate_paths(g, src, *, rule="auto", n_paths=8, packet_bytes=PACKET_BYTES):
    """``{dst: [Path, ...]}`` for every other host, by ``rule``: "paper" (Dragonfly and Rail-only only),
    "kshortest", or "auto" (the paper's rules for a graph whose ``topology`` is dragonfly or rail)."""
    if rule not in RULES:
        raise ValueError(f"unknown path rule {rule!r}; rules: {', '.join(RULES)}")
    kind = g.graph.get("topology")
    if rule == "auto":
        rule = "paper" if kind in ("dragonfly", "rail") else "kshortest"
    if rule == "paper":
        if kind == "dragonfly":
            return dragonfly_paths(g, src)
        if kind == "rail":
            return rail_paths(g, src)
        raise ValueError(f"the paper's path rules cover dragonfly and rail, not {kind or 'this graph'}; "
                         f"use the kshortest rule")
    return kshortest_paths(g, src, n_paths, packet_bytes=packet_bytes)


# -- baseVal and the tables ------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def serialisation_ns(rate_gbps, packet_bytes=PACKET_BYTES):
    """Time to send one packet on a link of ``rate_gbps`` (bits per ns), rounded up to whole ns."""
    return math.ceil(fractions.Fraction(packet_bytes * 8) / fractions.Fraction(str(rate_gbps)))


def base_val(g, hops, *, packet_bytes=PACKET_BYTES, margin="paper", queue_packets=None):
    """Uncongested one-way delay of ``hops`` in ns plus a queuing margin.

    Every link adds its delay (rounded up) and one serialisation of a ``packet_bytes`` packet at its rate. The
    margin adds ``queue_packets`` serialisations (default: the margin's own count) on the outgoing link of every
    node inside the path (``margin="paper"``: at each switch) or on every link (``"simulator"``: per hop).
    """
    if margin not in MARGINS:
        raise ValueError(f"unknown margin {margin!r}; margins: {', '.join(MARGINS)}")
    packets, where = MARGINS[margin]
    packets = packets if queue_packets is None else queue_packets
    if not isinstance(packets, int) or packets < 0:
        raise ValueError(f"queue packets must be a non-negative integer, not {packets!r}")
    total = 0
    for n, (u, v) in enumerate(zip(hops, hops[1:])):
        link = g.edges[u, v]
        ser = serialisation_ns(link["rate"], packet_bytes)
        total += math.ceil(link["delay"]) + ser
        if where == "hop" or n > 0:     # "switch": the first link leaves the source, not a switch
            total += packets * ser
    return total


def _check_table_params(k, n_entries):
    for name, value in (("k", k), ("n_entries", n_entries)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    if n_entries % k or n_entries // k < 2:
        raise ValueError(f"n_entries ({n_entries}) must be a multiple of k ({k}) with at least 2 entries per "
                         f"sub-table")
    if n_entries > 1 << _PID_BITS:
        raise ValueError(f"n_entries ({n_entries}) exceeds the {1 << _PID_BITS} pids of the 16-bit pid field")


def host_tables(g, host, *, k=8, n_entries=8192, rule="auto", n_paths=None, packet_bytes=PACKET_BYTES,
                margin="paper", queue_packets=None):
    """The PST and PIT of one host, as ``lbpipe paths --json`` writes them (docs/laps_control.md)."""
    _check_table_params(k, n_entries)
    if not isinstance(packet_bytes, int) or isinstance(packet_bytes, bool) or packet_bytes < 1:
        raise ValueError(f"packet size must be a positive integer, not {packet_bytes!r}")
    src = find_host(g, host)
    n_paths = k if n_paths is None else n_paths
    paths = candidate_paths(g, src, rule=rule, n_paths=n_paths, packet_bytes=packet_bytes)
    size = n_entries // k
    next_index = [1] * k
    pst, pit = [], []
    for dst, cands in paths.items():
        if len(cands) > k:
            raise ValueError(f"{len(cands)} candidate paths from {src} to {dst} need k >= {len(cands)} sub-tables, "
                             f"not k = {k}")
        pids = [0] * k
        for j, path in enumerate(cands):
            index = next_index[j]
            if index >= size:
                raise ValueError(f"PIT sub-table {j} is full ({size - 1} paths); raise n_entries")
            next_index[j] += 1
            pid = j * size + index
            pids[j] = pid
            value = base_val(g, path.hops, packet_bytes=packet_bytes, margin=margin, queue_packets=queue_packets)
            if value >= _INFINITY:
                raise ValueError(f"baseVal {value} ns of a path from {src} to {dst} does not fit in 32 bits")
            anchors = [g.nodes[a]["ip"] for a in path.anchors]
            if any(ipaddress.ip_address(a).version != 4 for a in anchors):
                raise ValueError(f"an anchor of a path from {src} to {dst} has no IPv4 address")
            pit.append({"pid": pid, "sub_table": j, "index": index, "base_val": value, "anchors": anchors,
                        "hops": [str(n) for n in path.hops]})
        pst.append({"dst": g.nodes[dst]["ip"], "pids": pids})
    pit.sort(key=lambda e: e["pid"])
    return {"topology": str(g.graph.get("topology", g.graph.get("name", "file"))), "host": str(src),
            "ip": g.nodes[src]["ip"], "k": k, "n_entries": n_entries, "pst": pst, "pit": pit}


def tables_json(tables):
    """``tables`` as the text of ``lbpipe paths --json``: one JSON object, one table entry per line."""
    import json
    head = {key: value for key, value in tables.items() if key not in ("pst", "pit")}
    lines = [json.dumps(head)[:-1] + ","]
    for name in ("pst", "pit"):
        rows = [" " + json.dumps(e) for e in tables[name]]
        lines.append(f' "{name}": [')
        lines.append(",\n".join(rows))
        lines.append(" ]" + ("," if name == "pst" else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _call_encoder(module, name, entries, params):
    import importlib
    import inspect
    try:
        encode = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise RuntimeError(f"the ctl trace needs {module}.{name}, which this installation lacks; "
                           f"--json works without it") from None
    accepted = inspect.signature(encode).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    kwargs = {key: value for key, value in params.items() if takes_any or key in accepted}
    return list(encode(entries, **kwargs))


def ctl_commands(tables):
    """The ``ctl`` commands that load ``tables`` (from :func:`host_tables`) into the PIT and the PST: the PIT first,
    so no PST entry ever names a pid whose PIT entry is not yet written. The encoders are the golden models'
    (:func:`lbpipe.sim.laps.pit.pit_commands`, :func:`lbpipe.sim.laps.pst.pst_commands`); they receive the table
    parameters ``k``, ``n_entries`` and ``ipv6`` (those their signatures name, or all when they take ``**params``);
    the PST's other parameters (``n_dests``, ways, buckets) are the block's defaults."""
    ipv6 = any(ipaddress.ip_address(e["dst"]).version == 6 for e in tables["pst"])
    params = {"k": tables["k"], "n_entries": tables["n_entries"], "ipv6": ipv6}
    pit = _call_encoder("lbpipe.sim.laps.pit", "pit_commands", tables["pit"], params)
    pst = _call_encoder("lbpipe.sim.laps.pst", "pst_commands", tables["pst"], params)
    return pit + pst


def summary(tables):
    """A short human-readable account of one host's tables."""
    pst, pit = tables["pst"], tables["pit"]
    per_dst = {}
    for e in pst:
        n = sum(1 for p in e["pids"] if p)
        per_dst[n] = per_dst.get(n, 0) + 1
    occupancy = [0] * tables["k"]
    for e in pit:
        occupancy[e["sub_table"]] += 1
    vals = [e["base_val"] for e in pit]
    lines = [
        f"{tables['topology']}: host {tables['host']} ({tables['ip']}), k = {tables['k']} sub-tables of "
        f"{tables['n_entries'] // tables['k']} entries",
        f"PST entries: {len(pst)}",
        f"PIT entries: {len(pit)}",
        "destinations by candidate paths: " + ", ".join(f"{n} path{'s' if n != 1 else ''}: {c}"
                                                        for n, c in sorted(per_dst.items())),
        "PIT sub-table occupancy: " + " ".join(str(n) for n in occupancy),
        f"baseVal: {min(vals)} to {max(vals)} ns; anchors per path: at most "
        f"{max(len(e['anchors']) for e in pit)}",
    ]
    return "\n".join(lines)
