"""Network topologies for the LAPS control plane (LAPS, IEEE ToN, sections II-A and IV-A, Fig. 1).

Every topology is an undirected :class:`networkx.Graph` whose nodes carry

* ``kind``: ``"host"`` (a server or GPU with a LAPS NIC), ``"switch"`` or ``"nvswitch"`` (a scale-up NVLink switch);
* ``ip``: a host's address, or a switch's 32-bit loopback address (the SR anchor the LAPS header carries);
* ``relay`` (hosts only, optional, default false): the host forwards traffic between its links (a GPU relaying
  between NVLink and its rail NIC in the Rail-only network); other hosts never appear inside a path;

and whose links carry ``rate`` (Gb/s, that is bits per ns) and ``delay`` (ns, propagation plus switch latency).
The graph attribute ``topology`` names the builder (``dragonfly``, ``rail``, ``fat-tree``, ``leaf-spine``), which
is how the control plane picks the paper's path rules; builders also store the structural node attributes those
rules read (Dragonfly ``group``/``index``, Rail ``cluster``/``rail``).

Addressing (lbpipe's choice; the paper names none): hosts are numbered 0, 1, ... in node order and host ``i`` is
``10.0.0.0 + 256 * (i // 254) + i % 254 + 1`` (254 hosts per /24: 10.0.0.1 ... 10.0.0.254, 10.0.1.1 ...);
switches of either kind are numbered in node order and switch ``j`` has the loopback
``10.255.0.0 + 256 * (j // 254) + j % 254 + 1``. A graph read from a file may give any node an ``ip`` of its own.

Dragonfly global links (the paper fixes their number, 36, not their ends): group ``g`` lists the other groups in
increasing order, ``h = 0 .. G-2``; the link to its ``h``-th other group ends at switch ``floor(h * A / (G - 1))``
of ``g`` (``A`` switches per group). With 9 groups of 4 switches, switch ``s`` of group ``g`` holds the global links
to ``g``'s other groups number ``2s`` and ``2s + 1``: every switch has exactly two global links.
"""

import ipaddress
import math
import pathlib

import networkx as nx

__all__ = [
    "HOST", "SWITCH", "NVSWITCH", "KINDS", "LINK_RATE_GBPS", "LINK_DELAY_NS", "BUILDERS",
    "dragonfly", "rail", "fat_tree", "leaf_spine", "build", "read_topology", "write_topology", "normalise",
    "hosts", "host_ip", "switch_ip", "FILE_FORMATS",
]

HOST, SWITCH, NVSWITCH = "host", "switch", "nvswitch"
KINDS = (HOST, SWITCH, NVSWITCH)
#: Link defaults: the paper's simulations set every link to 100 Gb/s (section IV-A); the propagation delay is not
#: given there, 1 us is what the authors' simulator's examples work out to (docs/laps_control.md).
LINK_RATE_GBPS = 100
LINK_DELAY_NS = 1000

_HOST_BASE = int(ipaddress.IPv4Address("10.0.0.0"))
_SWITCH_BASE = int(ipaddress.IPv4Address("10.255.0.0"))
_MAX_HOSTS = 254 * 255 * 256
_MAX_SWITCHES = 254 * 256


def _indexed_ip(base, i):
    return str(ipaddress.IPv4Address(base + 256 * (i // 254) + i % 254 + 1))


def host_ip(i):
    """The address of host number ``i`` (0-based, in node order)."""
    if not 0 <= i < _MAX_HOSTS:
        raise ValueError(f"host number {i} is outside the addressing plan (at most {_MAX_HOSTS} hosts)")
    return _indexed_ip(_HOST_BASE, i)


def switch_ip(j):
    """The loopback address of switch number ``j`` (0-based, switches of both kinds in node order)."""
    if not 0 <= j < _MAX_SWITCHES:
        raise ValueError(f"switch number {j} is outside the addressing plan (at most {_MAX_SWITCHES} switches)")
    return _indexed_ip(_SWITCH_BASE, j)


def hosts(g):
    """The graph's hosts in node order: host ``i`` of the CLI and of the addressing plan is ``hosts(g)[i]``."""
    return [n for n, kind in g.nodes(data="kind") if kind == HOST]


def _positive_int(name, value, minimum=1):
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _link(g, u, v, rate, delay):
    g.add_edge(u, v, rate=rate, delay=delay)


def _finish(g):
    """Number hosts and switches and give them the addressing plan's addresses."""
    return normalise(g)


def dragonfly(*, groups=9, switches=4, servers=4, link_rate=LINK_RATE_GBPS, link_delay=LINK_DELAY_NS):
    """Dragonfly: ``groups`` groups of ``switches`` fully meshed switches with ``servers`` hosts each, and one
    global link between every pair of groups (paper Fig. 1(b): 9 x 4 x 4 = 144 servers, 36 global links).

    Hosts are ``h<n>`` with ``n = (group * switches + switch) * servers + server``; switch ``s`` of group ``g`` is
    ``g<g>s<s>``. Global link ends: see the module docstring.
    """
    _positive_int("groups", groups, 2)
    _positive_int("switches", switches)
    _positive_int("servers", servers)
    g = nx.Graph(topology="dragonfly", groups=groups, switches=switches, servers=servers)
    for grp in range(groups):
        for s in range(switches):
            for h in range(servers):
                g.add_node(f"h{(grp * switches + s) * servers + h}", kind=HOST, group=grp, index=s, server=h)
    for grp in range(groups):
        for s in range(switches):
            g.add_node(f"g{grp}s{s}", kind=SWITCH, group=grp, index=s)
    for grp in range(groups):
        for s in range(switches):
            for h in range(servers):
                _link(g, f"h{(grp * switches + s) * servers + h}", f"g{grp}s{s}", link_rate, link_delay)
        for s in range(switches):
            for t in range(s + 1, switches):
                _link(g, f"g{grp}s{s}", f"g{grp}s{t}", link_rate, link_delay)
    for a in range(groups):
        for b in range(a + 1, groups):
            _link(g, f"g{a}s{_gateway(a, b, groups, switches)}", f"g{b}s{_gateway(b, a, groups, switches)}",
                  link_rate, link_delay)
    return _finish(g)


def _gateway(a, b, groups, switches):
    """The switch of group ``a`` that ends the global link to group ``b``."""
    h = b if b < a else b - 1          # b's position among a's other groups, in increasing order
    return h * switches // (groups - 1)


def rail(*, clusters=8, gpus=8, link_rate=LINK_RATE_GBPS, link_delay=LINK_DELAY_NS, nvlink_rate=None,
         nvlink_delay=None):
    """Rail-only: ``clusters`` nodes of ``gpus`` GPUs; the GPUs of a node share one NVLink switch, and GPU ``i`` of
    every node connects to rail switch ``i`` (paper Fig. 1(c), section IV-A: 8 clusters, 8 rail switches, 8 NVLink
    switches, 64 GPUs). A GPU relays between its NVLink and its rail link (``relay``), which is how a packet
    reaches another rail ("routed to any node in the same cluster first", section II-A).

    GPU ``i`` of cluster ``c`` is ``h<c * gpus + i>``; the NVLink switch of cluster ``c`` is ``nv<c>``; rail switch
    ``r`` is ``rail<r>``. NVLink links take ``nvlink_rate``/``nvlink_delay`` (default: the same as the rail links,
    as the paper's simulations set every link to 100 Gb/s).
    """
    _positive_int("clusters", clusters)
    _positive_int("gpus", gpus)
    nvlink_rate = link_rate if nvlink_rate is None else nvlink_rate
    nvlink_delay = link_delay if nvlink_delay is None else nvlink_delay
    g = nx.Graph(topology="rail", clusters=clusters, gpus=gpus)
    for c in range(clusters):
        for i in range(gpus):
            g.add_node(f"h{c * gpus + i}", kind=HOST, cluster=c, rail=i, relay=True)
    for r in range(gpus):
        g.add_node(f"rail{r}", kind=SWITCH, rail=r)
    for c in range(clusters):
        g.add_node(f"nv{c}", kind=NVSWITCH, cluster=c)
    for c in range(clusters):
        for i in range(gpus):
            _link(g, f"h{c * gpus + i}", f"nv{c}", nvlink_rate, nvlink_delay)
            _link(g, f"h{c * gpus + i}", f"rail{i}", link_rate, link_delay)
    return _finish(g)


def fat_tree(*, arity=4, link_rate=LINK_RATE_GBPS, link_delay=LINK_DELAY_NS):
    """The k-ary fat-tree (``arity`` = k, even): k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core
    switches, k/2 hosts per edge switch (k^3/4 hosts). Aggregation switch ``a`` of every pod connects to core
    switches ``a * k/2 ... a * k/2 + k/2 - 1``. Names: ``h<n>``, ``p<pod>e<i>``, ``p<pod>a<i>``, ``c<j>``."""
    _positive_int("arity", arity, 2)
    if arity % 2:
        raise ValueError(f"arity must be even, not {arity}")
    half = arity // 2
    g = nx.Graph(topology="fat-tree", arity=arity)
    for p in range(arity):
        for e in range(half):
            for h in range(half):
                g.add_node(f"h{(p * half + e) * half + h}", kind=HOST)
    for p in range(arity):
        for e in range(half):
            g.add_node(f"p{p}e{e}", kind=SWITCH)
        for a in range(half):
            g.add_node(f"p{p}a{a}", kind=SWITCH)
    for j in range(half * half):
        g.add_node(f"c{j}", kind=SWITCH)
    for p in range(arity):
        for e in range(half):
            for h in range(half):
                _link(g, f"h{(p * half + e) * half + h}", f"p{p}e{e}", link_rate, link_delay)
            for a in range(half):
                _link(g, f"p{p}e{e}", f"p{p}a{a}", link_rate, link_delay)
        for a in range(half):
            for j in range(half):
                _link(g, f"p{p}a{a}", f"c{a * half + j}", link_rate, link_delay)
    return _finish(g)


def leaf_spine(*, leaves=4, spines=2, hosts_per_leaf=4, link_rate=LINK_RATE_GBPS, link_delay=LINK_DELAY_NS):
    """Leaf-spine: every leaf switch connects to every spine switch and to ``hosts_per_leaf`` hosts. Names:
    ``h<n>`` (``n = leaf * hosts_per_leaf + i``), ``leaf<i>``, ``spine<j>``."""
    _positive_int("leaves", leaves)
    _positive_int("spines", spines)
    _positive_int("hosts_per_leaf", hosts_per_leaf)
    g = nx.Graph(topology="leaf-spine", leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf)
    for lf in range(leaves):
        for h in range(hosts_per_leaf):
            g.add_node(f"h{lf * hosts_per_leaf + h}", kind=HOST)
    for lf in range(leaves):
        g.add_node(f"leaf{lf}", kind=SWITCH)
    for s in range(spines):
        g.add_node(f"spine{s}", kind=SWITCH)
    for lf in range(leaves):
        for h in range(hosts_per_leaf):
            _link(g, f"h{lf * hosts_per_leaf + h}", f"leaf{lf}", link_rate, link_delay)
        for s in range(spines):
            _link(g, f"leaf{lf}", f"spine{s}", link_rate, link_delay)
    return _finish(g)


#: The built-in topologies by their CLI name.
BUILDERS = {"dragonfly": dragonfly, "rail": rail, "fat-tree": fat_tree, "leaf-spine": leaf_spine}


def build(name, **params):
    """A built-in topology by name, with builder parameters (``ValueError`` for an unknown name or parameter)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown topology {name!r}; built-in topologies: {', '.join(BUILDERS)}")
    import inspect
    accepted = set(inspect.signature(BUILDERS[name]).parameters)
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"{name} has no parameter {unknown[0]!r}; its parameters: {', '.join(sorted(accepted))}")
    return BUILDERS[name](**params)


# -- files ---------------------------------------------------------------------------------------------------------

#: File formats read and written, by file name suffix.
FILE_FORMATS = {
    ".graphml": "GraphML", ".xml": "GraphML", ".gml": "GML", ".json": "node-link JSON",
    ".edgelist": "edge list", ".edges": "edge list", ".txt": "edge list",
}


def _format(path):
    fmt = FILE_FORMATS.get(pathlib.Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unknown topology file type; name it " + ", ".join(sorted(FILE_FORMATS)))
    return fmt


def read_topology(path, *, link_rate=LINK_RATE_GBPS, link_delay=LINK_DELAY_NS):
    """A topology from a file, normalised (:func:`normalise`). The format follows the suffix (:data:`FILE_FORMATS`):
    GraphML, GML (node names from ``label``), networkx node-link JSON, or a networkx edge list (``u v`` per line,
    optionally followed by a dict of link attributes, as ``networkx.write_edgelist`` writes). Directed graphs and
    multigraphs are read as simple undirected graphs: a link is bidirectional."""
    import json
    path = pathlib.Path(path)
    fmt = _format(path)
    text = path.read_bytes()    # OSError (missing, unreadable) propagates as it is
    try:
        if fmt == "GraphML":
            g = nx.read_graphml(path)
        elif fmt == "GML":
            g = nx.read_gml(path)
        elif fmt == "node-link JSON":
            obj = json.loads(text)
            if not isinstance(obj, dict) or "nodes" not in obj:
                raise ValueError("not a node-link object (no 'nodes')")
            g = nx.node_link_graph(obj, edges="edges" if "edges" in obj else "links")
        else:
            g = nx.read_edgelist(path, nodetype=str)
    except (nx.NetworkXError, ValueError, TypeError, KeyError, SyntaxError, IndexError) as exc:
        # (the XML parser's ParseError is a SyntaxError; UnicodeDecodeError a ValueError)
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path}: not a readable {fmt} file ({why})") from None
    if g.is_directed() or g.is_multigraph():
        simple = nx.Graph()
        simple.graph.update(g.graph)
        simple.add_nodes_from(g.nodes(data=True))
        simple.add_edges_from(g.edges(data=True))
        g = simple
    try:
        return normalise(g, link_rate=link_rate, link_delay=link_delay)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}")


def write_topology(g, path):
    """Write ``g`` in the format its suffix names (the formats :func:`read_topology` reads)."""
    import json
    fmt = _format(path)
    if fmt == "GraphML":
        nx.write_graphml(g, path)
    elif fmt == "GML":
        nx.write_gml(g, path)
    elif fmt == "node-link JSON":
        pathlib.Path(path).write_text(json.dumps(nx.node_link_data(g, edges="links"), indent=1) + "\n")
    else:
        nx.write_edgelist(g, path, data=True)


def _number(what, value, *, positive):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number, not {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{what} must be {'positive' if positive else 'non-negative'}, not {value!r}")
    return int(value) if float(value).is_integer() else value


def normalise(g, *, link_rate=LINK_RATE_GBPS, link_delay=LINK_DELAY_NS):
    """Check and complete a topology in place, and return it.

    * ``kind``: when no node has one, nodes of degree 1 are hosts and the others switches; when some node has one,
      every node must, and it must be one of :data:`KINDS`.
    * ``rate``/``delay``: a link without them takes ``link_rate``/``link_delay``; rates must be positive and delays
      non-negative numbers.
    * ``ip``: a node without one takes the addressing plan's (module docstring); every address must be a valid,
      distinct IPv4 or IPv6 address, and switch addresses IPv4 (they are 32-bit SR anchors).
    * at least two hosts, no self-loops, and every host must reach every other.
    """
    if g.number_of_nodes() == 0:
        raise ValueError("the topology has no nodes")
    if any(u == v for u, v in g.edges):
        raise ValueError("the topology has a self-loop")
    kinds = dict(g.nodes(data="kind"))
    if all(k is None for k in kinds.values()):
        for n in g:
            g.nodes[n]["kind"] = HOST if g.degree(n) == 1 else SWITCH
    else:
        for n, k in kinds.items():
            if k not in KINDS:
                raise ValueError(f"node {n!r} has kind {k!r}; kinds are {', '.join(KINDS)}")
    for u, v, d in g.edges(data=True):
        d["rate"] = _number(f"link {u}-{v} rate", d.get("rate", link_rate), positive=True)
        d["delay"] = _number(f"link {u}-{v} delay", d.get("delay", link_delay), positive=False)
    for n in g:
        relay = g.nodes[n].get("relay", False)
        if relay not in (True, False, 0, 1):
            raise ValueError(f"node {n!r} has relay={relay!r}; it takes true or false")
        if g.nodes[n]["kind"] == HOST:
            g.nodes[n]["relay"] = bool(relay)
    host_list = hosts(g)
    if len(host_list) < 2:
        raise ValueError(f"the topology has {len(host_list)} host(s); LAPS needs at least two")
    seen = {}
    n_host = n_switch = 0
    for n, attrs in g.nodes(data=True):
        is_host = attrs["kind"] == HOST
        if attrs.get("ip") is None:
            attrs["ip"] = host_ip(n_host) if is_host else switch_ip(n_switch)
        try:
            addr = ipaddress.ip_address(str(attrs["ip"]))
        except ValueError:
            raise ValueError(f"node {n!r} has ip {attrs['ip']!r}, not an IP address") from None
        if not is_host and addr.version != 4:
            raise ValueError(f"switch {n!r} has ip {addr}; switch loopbacks are 32-bit anchors (IPv4)")
        if addr in seen:
            raise ValueError(f"nodes {seen[addr]!r} and {n!r} share ip {addr}")
        seen[addr] = n
        attrs["ip"] = str(addr)
        n_host += is_host
        n_switch += not is_host
    component = nx.node_connected_component(g, host_list[0])
    stray = [h for h in host_list if h not in component]
    if stray:
        raise ValueError(f"host {stray[0]!r} cannot reach host {host_list[0]!r}")
    return g
