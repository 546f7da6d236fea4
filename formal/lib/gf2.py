"""A decision procedure for combinational XOR networks: exact symbolic evaluation over GF(2) of Yosys's gate netlist.

CDCL solvers (Yices 2, MiniSAT, ABC's ``iprove``) do not close miters of two structurally different wide XOR
networks, such as a bit-serial CRC against a matrix CRC (docs/formal.md). This method does not search: Yosys maps
the flattened harness to single-bit gates (``prep -flatten; chformal -lower; techmap; opt -fast``), and every net is
evaluated, gate by gate, as an *affine form* over GF(2) of the free input bits: a bit mask ``m`` and a constant
``c``, meaning ``c XOR (XOR of the inputs selected by m)``. XOR, XNOR, NOT, buffers, AND/OR/MUX with a constant
operand, and a MUX choosing between two constants on an affine select are exact on affine forms. The comparators the
assertions end in (``a == b`` becomes NOT(OR of XORs)) are kept one level further, as an AND or an OR of affine
forms. Any other gate (an AND of two non-constant nets, say) makes the method report ``ERROR`` ("not affine"): the
result is never a guess. The method is for combinational networks: a check that depends on a flip-flop output, an
undriven net or an undefined constant is also ``ERROR`` (a free state bit would make a cover look reachable from an
unreachable state, and its value would be missing from the counterexample), and so is a netlist with no assertion.

An assertion ``EN -> A`` then fails iff a linear system over GF(2) is consistent (Gaussian elimination): for
``A`` affine, ``A = 0``; for an AND of forms, some form ``= 0``; for an OR of forms, every form ``= 0``. A cover is
reached iff the dual system is consistent. A solution is a counterexample: the input values are written to a
one-step VCD and the failing assertion's source line to the log, in SymbiYosys's wording (``Assert failed in top:
file.py:NN``).

Linearity is not assumed anywhere: it is computed for each net, and the check is complete and sound for every
netlist it accepts.
"""

import json
import pathlib

__all__ = ["check_netlist", "write_vcd", "load", "YOSYS_SCRIPT"]

YOSYS_SCRIPT = "\n".join([
    "read_rtlil top.il",
    "prep -flatten -top top",
    "chformal -lower",
    "techmap",
    "opt -fast",
    "write_json gates.json",
    "",
])


class NotAffine(Exception):
    pass


# A value: ("a", mask, const) affine form; ("and", frozenset of (mask, const)); ("or", frozenset of (mask, const)).
def _const(bit):
    return ("a", 0, bit)


def _neg_form(form):
    return (form[0], form[1] ^ 1)


def _not(v):
    if v[0] == "a":
        return ("a", v[1], v[2] ^ 1)
    return ("or" if v[0] == "and" else "and", frozenset(_neg_form(f) for f in v[1]))


def _is_const(v):
    return v[0] == "a" and v[1] == 0


def _xor(a, b):
    if a[0] == "a" and b[0] == "a":
        return ("a", a[1] ^ b[1], a[2] ^ b[2])
    if _is_const(a) or _is_const(b):
        const, other = (a, b) if _is_const(a) else (b, a)
        return _not(other) if const[2] else other
    raise NotAffine("XOR of a comparator result")


def _set_of(v, kind):
    if v[0] == "a":
        return frozenset([(v[1], v[2])])
    if v[0] == kind:
        return v[1]
    raise NotAffine(f"{kind.upper()} of an {v[0].upper()} of forms")


def _and(a, b):
    for x, y in ((a, b), (b, a)):
        if _is_const(x):
            return y if x[2] else _const(0)
    return ("and", _set_of(a, "and") | _set_of(b, "and"))


def _or(a, b):
    return _not(_and(_not(a), _not(b)))


def _mux(s, a, b):
    """``s ? b : a``."""
    if _is_const(s):
        return b if s[2] else a
    if a == b:
        return a
    if _is_const(a) and _is_const(b):
        return s if b[2] else _not(s)
    if s[0] == "a" and a[0] == "a" and b[0] == "a":
        diff = _xor(a, b)
        if _is_const(diff):         # a ^ (s & (a ^ b)) with a ^ b constant 1
            return _xor(a, s)
    return _or(_and(_not(s), a), _and(s, b))


_GATES = {
    "$_BUF_": lambda p: p["A"],
    "$_NOT_": lambda p: _not(p["A"]),
    "$_XOR_": lambda p: _xor(p["A"], p["B"]),
    "$_XNOR_": lambda p: _not(_xor(p["A"], p["B"])),
    "$_AND_": lambda p: _and(p["A"], p["B"]),
    "$_NAND_": lambda p: _not(_and(p["A"], p["B"])),
    "$_OR_": lambda p: _or(p["A"], p["B"]),
    "$_NOR_": lambda p: _not(_or(p["A"], p["B"])),
    "$_ANDNOT_": lambda p: _and(p["A"], _not(p["B"])),
    "$_ORNOT_": lambda p: _or(p["A"], _not(p["B"])),
    "$_MUX_": lambda p: _mux(p["S"], p["A"], p["B"]),
}


def _solve(equations, n_vars):
    """A solution (an int, bit i = variable i) of ``f(x) = t`` for every ``(mask, const, t)``, or None."""
    pivots = []                       # (pivot bit, mask, rhs), rows reduced against earlier pivots
    for mask, const, target in equations:
        rhs = const ^ target          # mask . x = rhs
        for bit, pmask, prhs in pivots:
            if mask >> bit & 1:
                mask ^= pmask
                rhs ^= prhs
        if mask == 0:
            if rhs:
                return None
            continue
        bit = mask.bit_length() - 1
        pivots = [(b, pm ^ mask, pr ^ rhs) if pm >> bit & 1 else (b, pm, pr) for b, pm, pr in pivots]
        pivots.append((bit, mask, rhs))
    x = 0
    for bit, pmask, prhs in pivots:   # fully reduced: free variables 0, each pivot its right-hand side
        if prhs:
            x |= 1 << bit
    return x


def _witness(v, target, n_vars):
    """Inputs making ``v`` equal ``target``, or None."""
    if v[0] == "a":
        return _solve([(v[1], v[2], target)], n_vars)
    every = (v[0] == "and") == bool(target)    # AND = 1 and OR = 0 need every form; the others one form
    forms = sorted(v[1])
    if every:
        return _solve([(m, c, target) for m, c in forms], n_vars)
    for m, c in forms:
        x = _solve([(m, c, target)], n_vars)
        if x is not None:
            return x
    return None


def check_netlist(netlist):
    """Check the ``$assert`` and ``$cover`` cells of Yosys's JSON netlist ``netlist`` (a dict, module ``top``).

    Returns a dict: ``status`` ("PASS", "FAIL" or "ERROR"), ``failed`` (the source locations of the failing
    assertions), ``unreached`` (the source locations of unreachable covers), ``counterexample`` ({port: value} for
    the first failing assertion), ``detail``."""
    module = netlist["modules"]["top"]
    variables = []                     # (port name, bit) or (None, description), in variable order
    net_value = {}
    for name, port in module["ports"].items():
        if port["direction"] == "input":
            for i, net in enumerate(port["bits"]):
                if isinstance(net, int) and net not in net_value:
                    net_value[net] = ("a", 1 << len(variables), 0)
                    variables.append((name, i))
    drivers = {}
    checks = []
    for cname, cell in module["cells"].items():
        kind = cell["type"]
        if kind in ("$assert", "$cover", "$assume"):
            checks.append((kind, cell))
            continue
        if kind == "$print":
            continue
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port) == "output":
                for i, net in enumerate(bits):
                    drivers[net] = (cname, cell, port, i)

    def fresh(why):
        variables.append((None, why))
        return ("a", 1 << (len(variables) - 1), 0)

    def value(net):
        if net == "0" or net == "1":
            return _const(int(net))
        stack = [net]
        while stack:
            top = stack[-1]
            if not isinstance(top, int) or top in net_value:
                stack.pop()
                continue
            if top not in drivers:
                net_value[top] = fresh(f"undriven net {top}")
                stack.pop()
                continue
            cname, cell, port, i = drivers[top]
            kind = cell["type"]
            if kind not in _GATES:
                if "DFF" in kind or "DLATCH" in kind or kind in ("$dff", "$ff", "$anyseq", "$anyconst"):
                    net_value[top] = fresh(f"{cname}.{port}[{i}]")
                    stack.pop()
                    continue
                raise NotAffine(f"cell type {kind} ({cname})")
            inputs = {p: b[0] for p, b in cell["connections"].items()
                      if cell.get("port_directions", {}).get(p) == "input"}
            pending = [b for b in inputs.values() if isinstance(b, int) and b not in net_value]
            if pending:
                stack.extend(pending)
                continue
            args = {}
            for p, b in inputs.items():
                if isinstance(b, int):
                    args[p] = net_value[b]
                elif b in ("0", "1"):
                    args[p] = _const(int(b))
                else:
                    args[p] = fresh(f"undefined constant at {cname}.{p}")
            net_value[top] = _GATES[kind](args)
            stack.pop()
        return net_value[net] if isinstance(net, int) else fresh(f"constant {net}")

    result = {"status": "PASS", "failed": [], "unreached": [], "counterexample": None, "detail": ""}
    n_ports = len(variables)           # variables from here on are flip-flops, undriven nets, undefined constants
    if not any(kind == "$assert" for kind, _ in checks):
        result.update(status="ERROR", detail="no assertion in the netlist: nothing would be proven")
        return result
    try:
        for kind, cell in checks:
            src = cell.get("attributes", {}).get("src", "?").split("|")[0]
            a = value(cell["connections"]["A"][0])
            en = value(cell["connections"]["EN"][0])
            if (_support(a) | _support(en)) >> n_ports:
                # A free state bit would over-approximate (sound for an assertion, not for a cover) and its value
                # would be missing from the counterexample: this method is for combinational networks only.
                raise NotAffine(f"{kind} at {src} depends on state or on an undefined net, not only on inputs")
            if kind == "$assume":
                if not (_is_const(en) and en[2] == 0):
                    raise NotAffine(f"an assumption ({src}); this method proves only unconstrained networks")
                continue
            if kind == "$assert":
                x = _witness(_and(en, _not(a)), 1, len(variables))
                if x is not None:
                    result["failed"].append(src)
                    if result["counterexample"] is None:
                        result["counterexample"] = _ports(variables, x)
            else:
                if _witness(_and(en, a), 1, len(variables)) is None:
                    result["unreached"].append(src)
    except NotAffine as exc:
        result.update(status="ERROR", detail=f"not affine over GF(2): {exc}")
        return result
    if result["failed"]:
        result["status"] = "FAIL"
    return result


def _support(v):
    """The variables ``v`` depends on, as a mask."""
    if v[0] == "a":
        return v[1]
    mask = 0
    for m, _ in v[1]:
        mask |= m
    return mask


def _ports(variables, x):
    ports = {}
    for i, (name, bit) in enumerate(variables):
        if name is not None:
            ports[name] = ports.get(name, 0) | ((x >> i & 1) << bit)
    return ports


def write_vcd(path, ports, widths):
    """A one-step VCD holding the counterexample's input values."""
    lines = ["$timescale 1ns $end", "$scope module top $end"]
    ids = {}
    for n, name in enumerate(sorted(widths)):
        ids[name] = f"v{n}"
        lines.append(f"$var wire {widths[name]} {ids[name]} {name} $end")
    lines += ["$upscope $end", "$enddefinitions $end", "#0"]
    for name in sorted(widths):
        lines.append(f"b{ports.get(name, 0):b} {ids[name]}")
    lines.append("#1")
    pathlib.Path(path).write_text("\n".join(lines) + "\n")


def load(path):
    return json.loads(pathlib.Path(path).read_text())
