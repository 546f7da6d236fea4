"""Logic levels of a Yosys ``synth_xilinx`` netlist, counted the way Vivado counts them.

Yosys has no UltraScale+ timing data and no open place-and-route exists for the U280, so the timing proxy
lbpipe reports is the number of logic levels on the deepest register-to-register path: every LUT, MUXF and
CARRY8 on the path is one level (STYLE.md, "Pitfalls"). This module computes it from the JSON netlist that
``write_json`` produces after ``synth_xilinx -flatten``.

Path start points are module input ports and the outputs of clocked cells (``FD*``, ``LD*``, ``RAMB*``,
``URAM*``, ``DSP48*``, ``SRL*``, LUTRAM). Path end points are module output ports and the inputs of those same
cells. Choices made where Vivado's definition needs interpreting:

* **LUTRAM and SRL** launch their read data from the clock (level 0, like a register), but their read
  address ports (``A*``, ``ADDR*``, ``DPRA*``) reach the data output combinationally through the storage
  LUT, so a path through an address port counts the LUTRAM or SRL as one level and continues. Every input
  of a LUTRAM or SRL (address included, since it also addresses the write) is also an end point.
* **Carry chains.** Yosys maps carries to ``CARRY4`` cells even for ``-family xcup``; Vivado would build the
  same chain out of ``CARRY8`` cells, two ``CARRY4`` per ``CARRY8``, aligned at the start of the chain. A path
  therefore costs one level for each ``CARRY8`` it enters: a ``CARRY4`` entered through ``CI`` from the other
  half of its own ``CARRY8`` costs nothing more, any other entry (``S``, ``DI``, ``CYINIT``, or ``CI`` across a
  ``CARRY8`` boundary) costs one. This is exact in integers, unlike charging 0.5 per ``CARRY4`` and rounding
  up, which undercounts paths that enter two chains or cross a ``CARRY8`` boundary after entering mid-way.
* **DSP48E2** bounds paths (STYLE.md); its internal combinational delay is accounted for separately.
* ``INV``, buffers (``BUF*``, ``IBUF``, ``OBUF``) and constant drivers cost nothing; any other cell type
  counts as one level, so an unexpected primitive makes the figure pessimistic rather than optimistic.
* Delays are kept per cell, not per output pin: a multi-output cell's outputs all take its latest input.

Combinational loops (which a correct design does not have, but a buggy one can) do not hang the analysis:
each loop is broken at one edge, the cell after the cut starts paths of its own, and the cut is reported
as a ``"note: ..."`` entry after the path. The depth through a loop is arbitrary: fix the loop.
"""

from collections import defaultdict, deque


__all__ = ["logic_levels", "carry4_chains", "top_module"]


_ZERO_WEIGHT = frozenset({
    "INV", "BUF", "BUFG", "BUFGCE", "BUFGCE_DIV", "BUFGCTRL", "BUFG_GT", "BUFCE_LEAF", "BUFCE_ROW",
    "IBUF", "IBUFG", "IBUFDS", "IBUF_ANALOG", "OBUF", "OBUFT", "OBUFDS", "IOBUF",
    "GND", "VCC", "$scopeinfo",
})
_SEQUENTIAL_PREFIXES = ("FD", "LD", "RAMB", "URAM", "DSP48", "FIFO")


def _cell_class(cell_type):
    """One of ``"seq"``, ``"lutram"`` (LUTRAM and SRL), ``"carry4"``, ``"carry8"``, ``"zero"``, ``"logic"``."""
    if cell_type.startswith("RAM") and not cell_type.startswith("RAMB"):
        return "lutram"
    if cell_type.startswith("SRL"):
        return "lutram"
    if cell_type.startswith(_SEQUENTIAL_PREFIXES):
        return "seq"
    if cell_type == "CARRY4":
        return "carry4"
    if cell_type == "CARRY8":
        return "carry8"
    if cell_type in _ZERO_WEIGHT:
        return "zero"
    return "logic"


def _is_read_address(port):
    # LUTRAM read addresses: A, A0..A8 (RAMxX1S/D, SRL), DPRA* (dual-port read), ADDRA..ADDRH (RAM32M/64M/...).
    # Everything else on a LUTRAM (D, DI*, WE, WCLK, WSEL, CE, CLK) only affects the stored contents.
    if port.startswith(("ADDR", "DPRA")):
        return True
    return port == "A" or (port.startswith("A") and port[1:].isdigit())


def _attribute_set(value):
    # write_json gives attributes as binary strings ("000...001"), or as numbers with -compat-int.
    if value is None:
        return False
    if isinstance(value, int):
        return value != 0
    return "1" in value if set(value) <= {"0", "1"} else bool(value)


def top_module(netlist_json, top):
    """The module dict named ``top``, or the one carrying the ``top`` attribute if that name is absent.

    Raises
    ------
    KeyError
        If neither exists.
    """
    modules = netlist_json["modules"]
    for key in (top, "\\" + top):
        if key in modules:
            return modules[key]
    for module in modules.values():
        if _attribute_set(module.get("attributes", {}).get("top")):
            return module
    raise KeyError(f"module {top!r} not found in netlist")


def _drivers(module):
    """Map bit id to the ``(cell_name, port)`` driving it; module inputs appear as ``(None, port_name)``."""
    driver = {}
    for port_name, port in module.get("ports", {}).items():
        if port["direction"] in ("input", "inout"):
            for bit in port["bits"]:
                if isinstance(bit, int):
                    driver.setdefault(bit, (None, port_name))
    for cell_name, cell in module.get("cells", {}).items():
        directions = cell.get("port_directions", {})
        for port, bits in cell.get("connections", {}).items():
            if directions.get(port) in ("output", "inout"):
                for bit in bits:
                    if isinstance(bit, int):
                        driver.setdefault(bit, (cell_name, port))
    return driver


def carry4_chains(module):
    """The ``CARRY4`` chains of a flattened module, each a list of cell names from the chain's start.

    Chains are found by following ``CO[3]`` into the next cell's ``CI``. A chain of *n* cells is what Vivado
    would implement as ``ceil(n / 2)`` ``CARRY8`` cells.

    Parameters
    ----------
    module : dict
        One module from Yosys ``write_json`` output (see :func:`top_module`).
    """
    cells = module.get("cells", {})
    carry4 = [name for name, cell in cells.items() if cell["type"] == "CARRY4"]
    co3_owner = {}
    for name in carry4:
        co = cells[name]["connections"].get("CO", [])
        if len(co) == 4 and isinstance(co[3], int):
            co3_owner[co[3]] = name
    successors = defaultdict(list)
    has_pred = set()
    for name in carry4:
        ci = cells[name]["connections"].get("CI", [])
        if ci and isinstance(ci[0], int) and ci[0] in co3_owner:
            successors[co3_owner[ci[0]]].append(name)
            has_pred.add(name)
    chains, seen = [], set()
    for head in carry4:
        if head in has_pred:
            continue
        chain, name = [], head
        while name is not None and name not in seen:
            seen.add(name)
            chain.append(name)
            # CO[3] feeding two CIs does not occur in Yosys output; follow the first and let the rest start
            # chains of their own below rather than silently dropping them.
            nexts = successors.get(name, [])
            name = nexts[0] if nexts else None
        chains.append(chain)
    # Anything left is either a branch off a chain or a CO[3]->CI ring; give each its own chain.
    for name in carry4:
        if name not in seen:
            chain = []
            while name is not None and name not in seen:
                seen.add(name)
                chain.append(name)
                nexts = successors.get(name, [])
                name = nexts[0] if nexts else None
            chains.append(chain)
    return chains


def logic_levels(netlist_json, top):
    """Deepest register-to-register path of ``top``, in Vivado logic levels.

    Parameters
    ----------
    netlist_json : dict
        Parsed Yosys ``write_json`` output of a flattened, technology-mapped design.
    top : str
        Name of the top module.

    Returns
    -------
    levels : int
        Logic levels on the deepest path (0 when every path is register to register directly).
    path : list of str
        ``"TYPE:cell_name"`` entries from the launching cell (or ``"input:port"``) to the capturing cell
        (or ``"output:port"``), followed by one ``"note: ..."`` entry per combinational loop that was broken.
    """
    module = top_module(netlist_json, top)
    cells = module.get("cells", {})
    driver = _drivers(module)

    # Nodes are integers: one per cell, then one per module input port.
    names = list(cells)
    index = {name: i for i, name in enumerate(names)}
    labels = [f"{cells[name]['type']}:{name}" for name in names]
    port_node = {}
    for port_name, port in module.get("ports", {}).items():
        if port["direction"] in ("input", "inout"):
            port_node[port_name] = len(labels)
            labels.append(f"input:{port_name}")
    n_nodes = len(labels)

    def node_of(bit):
        if not isinstance(bit, int) or bit not in driver:
            return None
        cell_name, port = driver[bit]
        return port_node[port] if cell_name is None else index[cell_name]

    # Carry position within its chain decides whether entering through CI opens a new CARRY8.
    carry8_group = {}
    for chain_id, chain in enumerate(carry4_chains(module)):
        for position, name in enumerate(chain):
            carry8_group[name] = (chain_id, position // 2)

    in_edges = [[] for _ in range(n_nodes)]   # node -> list of (driver_node, weight)
    endpoints = []                           # (driver_node, endpoint_label)
    for name in names:
        cell = cells[name]
        v = index[name]
        kind = _cell_class(cell["type"])
        directions = cell.get("port_directions", {})
        for port, bits in cell.get("connections", {}).items():
            if directions.get(port) not in ("input", "inout"):
                continue
            for bit in bits:
                u = node_of(bit)
                if u is None:
                    continue
                if kind in ("seq", "lutram"):
                    endpoints.append((u, labels[v]))
                if kind == "seq":
                    continue
                if kind == "lutram":
                    if _is_read_address(port):
                        in_edges[v].append((u, 1))
                elif kind == "zero":
                    in_edges[v].append((u, 0))
                elif kind == "carry4":
                    same_carry8 = (
                        port == "CI" and u < len(names)
                        and names[u] in carry8_group and name in carry8_group
                        and carry8_group[names[u]] == carry8_group[name]
                    )
                    in_edges[v].append((u, 0 if same_carry8 else 1))
                else:
                    in_edges[v].append((u, 1))
    for port_name, port in module.get("ports", {}).items():
        if port["direction"] in ("output", "inout"):
            for bit in port["bits"]:
                u = node_of(bit)
                if u is not None:
                    endpoints.append((u, f"output:{port_name}"))

    out_edges = [[] for _ in range(n_nodes)]
    indegree = [0] * n_nodes
    for v, edges in enumerate(in_edges):
        for u, weight in edges:
            out_edges[u].append((v, weight))
            indegree[v] += 1

    # Kahn's algorithm computing the longest path; when it stalls, the remaining nodes hold a loop.
    # Logic cells start unreachable: one fed only by constants lies on no path, and must not lengthen the
    # chain it feeds (a CARRY4 with constant S/DI ahead of the real carry input, for instance).
    unreachable = -1
    arrival = [unreachable] * n_nodes
    self_weight = [0] * n_nodes
    for name in names:
        kind = _cell_class(cells[name]["type"])
        if kind in ("seq", "lutram"):
            arrival[index[name]] = 0
        elif kind in ("logic", "carry4", "carry8"):
            self_weight[index[name]] = 1
    for node in port_node.values():
        arrival[node] = 0
    pred = [None] * n_nodes
    done = [False] * n_nodes
    cut = set()
    notes = []
    queue = deque(v for v in range(n_nodes) if indegree[v] == 0)
    n_done, scan = 0, 0
    while n_done < n_nodes:
        while queue:
            u = queue.popleft()
            done[u] = True
            n_done += 1
            for v, weight in out_edges[u]:
                if (u, v) in cut:
                    continue
                if arrival[u] != unreachable and arrival[u] + weight > arrival[v]:
                    arrival[v] = arrival[u] + weight
                    pred[v] = u
                indegree[v] -= 1
                if indegree[v] == 0:
                    queue.append(v)
        if n_done == n_nodes:
            break
        while done[scan]:
            scan += 1
        # Walk backwards through unfinished predecessors until a node repeats: that closes a loop.
        walk, position = [scan], {scan: 0}
        while True:
            v = walk[-1]
            u = next(u for u, _ in in_edges[v] if not done[u] and (u, v) not in cut)
            if u in position:
                break
            position[u] = len(walk)
            walk.append(u)
        cut.add((u, v))
        indegree[v] -= sum(1 for w, _ in in_edges[v] if w == u)
        # The cut edge's target starts paths of its own, so the loop's cells are not silently dropped.
        arrival[v] = max(arrival[v], self_weight[v])
        notes.append(f"note: combinational loop broken at {labels[u]} -> {labels[v]}")
        if indegree[v] == 0:
            queue.append(v)

    best_level, best = -1, None
    for u, label in endpoints:
        if arrival[u] != unreachable and arrival[u] > best_level:
            best_level, best = arrival[u], (u, label)
    if best is None:
        return 0, notes
    u, end_label = best
    path = []
    while u is not None:
        path.append(labels[u])
        u = pred[u]
    path.reverse()
    path.append(end_label)
    return best_level, path + notes
