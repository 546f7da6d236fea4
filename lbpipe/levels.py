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
* **Block RAM and UltraRAM read data without the output register.** A ``RAMB18E2``/``RAMB36E2`` port whose
  ``DOA_REG``/``DOB_REG`` is 0 (Yosys always writes 0), or a ``URAM288`` port whose ``OREG_A``/``OREG_B`` is
  ``FALSE``, has a clock-to-out of about 1.5-2 ns on a -2 UltraScale+ part against about 0.3 ns with the register
  on. At 250 MHz, 6 levels share 4 ns, about 0.65 ns a level (LUT plus its routing), so the extra 1.2-1.7 ns is
  about two levels: a path launched from such a port starts at :data:`UNREGISTERED_RAM_PENALTY` (2) levels
  instead of 0. Exception: a port whose every used output bit drives only ``D`` pins of ``FDRE``/``FDSE`` flip-flops
  clocked by the RAM's own clock is *packable*: Vivado absorbs those flip-flops into the RAM's output register
  (synchronous reset and clock enable map to ``RSTREG``/``REGCE``; that the flip-flops of one port share one
  enable and one reset, as Vivado needs, is not checked), so the port counts as registered and its paths start
  at 0. A port with any other load (a LUT, a port, an asynchronously reset flip-flop, another RAM)
  is unregistered, and every path from it, the direct ones into flip-flops included, is charged and counted.
  Primitive defaults apply when the parameter is absent (``DO*_REG`` = 1, ``OREG_*`` = ``FALSE``).
* **Port to port.** A combinational path from a module input port to a module output port is reported by
  port name (:func:`analyse`): a block that users instantiate next to other logic must not have one.

Combinational loops (which a correct design does not have, but a buggy one can) do not hang the analysis:
each loop is broken at one edge, the cell after the cut starts paths of its own, and the cut is reported
as a ``"note: ..."`` entry after the path. The depth through a loop is arbitrary: fix the loop.
"""

import re
from collections import defaultdict, deque


__all__ = ["logic_levels", "analyse", "carry4_chains", "top_module", "UNREGISTERED_RAM_PENALTY"]

#: Levels charged at the start of a path launched from a block RAM or UltraRAM read port without its output
#: register (see the module docstring for the figures behind the number).
UNREGISTERED_RAM_PENALTY = 2


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


_FF_PACKABLE = frozenset({"FDRE", "FDSE"})
_RAM_CLOCK_PORTS = ("CLKARDCLK", "CLKBWRCLK", "CLKA", "CLKB", "CLK", "CLKARDCLKL", "CLKARDCLKU", "CLKBWRCLKL",
                    "CLKBWRCLKU")


def _param_on(value, default):
    # Binary strings ("1", "00000001"), integers, or strings such as "TRUE"/"FALSE" (Yosys may pad a string
    # parameter with a trailing space to tell it from a bit string).
    if value is None:
        return default
    if isinstance(value, int):
        return value != 0
    text = str(value).strip()
    if text and set(text) <= {"0", "1"}:
        return "1" in text
    return text.upper() == "TRUE"


def _ram_port_side(cell_type, port):
    """``"A"`` or ``"B"``: which output register governs output ``port`` of a block RAM or UltraRAM, or None
    when ``cell_type`` is neither."""
    if cell_type.startswith("RAMB"):
        if port.startswith(("DOUTB", "DOUTPB", "CASDOUTB", "CASDOUTPB", "DOB", "DOPB")):
            return "B"
        return "A"
    if cell_type.startswith("URAM"):
        return "B" if port.endswith("_B") else "A"
    return None


def _ram_side_registered(cell, side):
    """Whether the RAM's output register for ``side`` is on, from the cell's parameters."""
    params = cell.get("parameters", {})
    if cell["type"].startswith("RAMB"):
        return _param_on(params.get(f"DO{side}_REG"), True)
    return _param_on(params.get(f"OREG_{side}"), False)


def _unregistered_ram_ports(module, driver):
    """``{(cell_name, side)}`` of block RAM and UltraRAM ports that launch unregistered, unpackable read data."""
    cells = module.get("cells", {})
    used = defaultdict(set)                  # (cell, side) -> output bits with at least one load
    loads = defaultdict(list)                # bit -> [(cell_name, port)] reading it
    for name, cell in cells.items():
        directions = cell.get("port_directions", {})
        for port, bits in cell.get("connections", {}).items():
            if directions.get(port) in ("input", "inout"):
                for bit in bits:
                    if isinstance(bit, int):
                        loads[bit].append((name, port))
    port_loads = set()
    for port in module.get("ports", {}).values():
        if port["direction"] in ("output", "inout"):
            port_loads.update(bit for bit in port["bits"] if isinstance(bit, int))
    for bit, (name, port) in driver.items():
        if name is None:
            continue
        side = _ram_port_side(cells[name]["type"], port)
        if side is not None and (loads.get(bit) or bit in port_loads):
            used[(name, side)].add(bit)
    out = set()
    for (name, side), bits in used.items():
        cell = cells[name]
        if _ram_side_registered(cell, side):
            continue
        clocks = {bit for port in _RAM_CLOCK_PORTS for bit in cell.get("connections", {}).get(port, [])}
        packable = all(
            bit not in port_loads and all(
                cells[load]["type"] in _FF_PACKABLE and load_port == "D"
                and cells[load]["connections"].get("C", [None])[0] in clocks
                for load, load_port in loads[bit])
            for bit in bits)
        if not packable:
            out.add((name, side))
    return out


def _net_names(module):
    """Map bit id to ``name[i]`` (or ``name``) of a net the design named (Yosys's ``hide_name`` 0)."""
    out = {}
    for net, info in module.get("netnames", {}).items():
        if info.get("hide_name"):
            continue
        bits = info.get("bits", [])
        for i, bit in enumerate(bits):
            if isinstance(bit, int):
                out.setdefault(bit, net if len(bits) == 1 else f"{net}[{i}]")
    return out


def _readable(name, cell, net_names):
    """A cell Yosys named automatically (``$abc$...``, ``$auto$...``) goes by the named net its output drives."""
    if not name.startswith("$"):
        return name
    directions = cell.get("port_directions", {})
    for port, bits in cell.get("connections", {}).items():
        if directions.get(port) == "output":
            for bit in bits:
                if bit in net_names:
                    return f"{net_names[bit]} ({name})"
    return name


def _by_memory(cells, ports):
    """``{memory: "n TYPE, m ports"}``: RAM primitives named ``<memory>.<row>.<column>`` grouped by memory."""
    groups = defaultdict(lambda: [set(), 0])
    for name, _ in ports:
        memory = re.sub(r"(\.\d+)+$", "", name)
        groups[memory][0].add((cells[name]["type"], name))
        groups[memory][1] += 1
    out = {}
    for memory, (prims, n_ports) in sorted(groups.items()):
        types = defaultdict(int)
        for cell_type, _ in prims:
            types[cell_type] += 1
        out[memory] = ", ".join(f"{n} {t}" for t, n in sorted(types.items())) + f", {n_ports} ports"
    return out


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
        Logic levels on the deepest path (0 when every path is register to register directly), a path launched
        from an unregistered RAM port included with its :data:`UNREGISTERED_RAM_PENALTY`.
    path : list of str
        ``"TYPE:cell_name"`` entries from the launching cell (or ``"input:port"``) to the capturing cell
        (or ``"output:port"``), followed by one ``"note: ..."`` entry per combinational loop that was broken.
    """
    result = analyse(netlist_json, top)
    return result["levels"], result["path"]


def analyse(netlist_json, top):
    """Logic levels of ``top`` with the paths that need a designer's attention.

    Returns
    -------
    dict
        ``levels`` and ``path`` as :func:`logic_levels` returns them, and

        * ``unregistered_ram``: ``{"ports": ["TYPE:cell (A)", ...], "memories": {memory: summary}, "paths": n,
          "levels": worst}``: the block RAM and UltraRAM read ports launching unregistered data (see the module
          docstring), grouped by memory (primitive names without their ``.row.column`` suffix), the number of
          paths they launch (distinct pairs of such a port and an end point: a capturing cell or an output
          port), and the deepest of those paths, penalty included (0 when there is none);
        * ``port_paths``: ``[{"from": input_port, "to": output_port, "levels": n, "path": [...]}, ...]``, every
          pair of ports joined by a combinational path, with the depth and cells of the deepest such path, sorted
          by port name.
    """
    module = top_module(netlist_json, top)
    cells = module.get("cells", {})
    driver = _drivers(module)
    unregistered = _unregistered_ram_ports(module, driver)
    net_names = _net_names(module)

    # Nodes are integers: one per cell, one per module input port, one per unregistered RAM read port.
    names = list(cells)
    index = {name: i for i, name in enumerate(names)}
    labels = [f"{cells[name]['type']}:{_readable(name, cells[name], net_names)}" for name in names]
    port_node = {}
    for port_name, port in module.get("ports", {}).items():
        if port["direction"] in ("input", "inout"):
            port_node[port_name] = len(labels)
            labels.append(f"input:{port_name}")
    ram_node = {}
    for name, side in sorted(unregistered):
        ram_node[(name, side)] = len(labels)
        labels.append(f"{cells[name]['type']}:{name} (unregistered {side})")
    n_nodes = len(labels)

    def node_of(bit):
        if not isinstance(bit, int) or bit not in driver:
            return None
        cell_name, port = driver[bit]
        if cell_name is None:
            return port_node[port]
        side = _ram_port_side(cells[cell_name]["type"], port)
        if side is not None and (cell_name, side) in ram_node:
            return ram_node[(cell_name, side)]
        return index[cell_name]

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
    for node in ram_node.values():
        arrival[node] = UNREGISTERED_RAM_PENALTY
    pred = [None] * n_nodes
    done = [False] * n_nodes
    order = []
    cut = set()
    notes = []
    queue = deque(v for v in range(n_nodes) if indegree[v] == 0)
    n_done, scan = 0, 0
    while n_done < n_nodes:
        while queue:
            u = queue.popleft()
            done[u] = True
            order.append(u)
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
        levels, path = 0, notes
    else:
        u, end_label = best
        path = []
        while u is not None:
            path.append(labels[u])
            u = pred[u]
        path.reverse()
        path.append(end_label)
        levels, path = best_level, path + notes

    ends_at = defaultdict(set)
    for u, label in endpoints:
        ends_at[u].add(label)
    rank = {v: i for i, v in enumerate(order)}

    def cone(source, start):
        """Longest depth from ``source`` (arriving at ``start``) to every node it reaches combinationally."""
        seen, stack = {source}, [source]
        while stack:
            u = stack.pop()
            for v, _ in out_edges[u]:
                if (u, v) not in cut and v not in seen:
                    seen.add(v)
                    stack.append(v)
        depth, back = {source: start}, {}
        for u in sorted(seen, key=rank.__getitem__):
            if u not in depth:
                continue
            for v, weight in out_edges[u]:
                if (u, v) not in cut and depth[u] + weight > depth.get(v, -1):
                    depth[v] = depth[u] + weight
                    back[v] = u
        return depth, back

    def trace(back, u):
        cells_on_path = []
        while u is not None:
            cells_on_path.append(labels[u])
            u = back.get(u)
        return cells_on_path[::-1]

    ram_paths, ram_worst = 0, 0
    for node in ram_node.values():
        reached = set()
        for u, depth in cone(node, UNREGISTERED_RAM_PENALTY)[0].items():
            for label in ends_at.get(u, ()):
                reached.add(label)
                ram_worst = max(ram_worst, depth)
        ram_paths += len(reached)
    port_paths = {}
    for port_name, node in port_node.items():
        depths, back = cone(node, 0)
        for u, depth in depths.items():
            for label in ends_at.get(u, ()):
                if label.startswith("output:"):
                    key = (port_name, label[len("output:"):])
                    if key not in port_paths or depth > port_paths[key][0]:
                        port_paths[key] = (depth, trace(back, u) + [label])
    return {
        "levels": levels,
        "path": path,
        "unregistered_ram": {
            "ports": [f"{cells[name]['type']}:{name} ({side})" for name, side in sorted(unregistered)],
            "memories": _by_memory(cells, unregistered),
            "paths": ram_paths,
            "levels": ram_worst,
        },
        "port_paths": [{"from": a, "to": b, "levels": n, "path": cells_on_path}
                       for (a, b), (n, cells_on_path) in sorted(port_paths.items())],
    }
