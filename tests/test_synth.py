"""Tests for :mod:`lbpipe.synth` and :mod:`lbpipe.levels`.

The logic-level unit tests run on hand-written netlists and need no Yosys. The synthesis tests run Yosys once
per design (about 3 s each) through module-scoped fixtures; their expected figures are derived from the
design, not copied from a run, and each derivation is written beside its assertion.
"""

import json
import random
import math

import pytest
from amaranth.hdl import Cat, Instance, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature

from lbpipe.levels import analyse, carry4_chains, logic_levels
from lbpipe.synth import (FOOTNOTE, U280, format_markdown, percent_of_u280, synthesize, write_reports,
                          write_sweep)


# --- hand-written netlists ----------------------------------------------------------------------------------

_OUTPUT_PORTS = {"O", "Q", "CO", "P", "SPO", "DPO"}


def _cell(cell_type, **connections):
    """A ``write_json`` cell; ports named in ``_OUTPUT_PORTS`` or starting with ``DO`` are outputs."""
    connections = {port: bits if isinstance(bits, list) else [bits] for port, bits in connections.items()}
    directions = {
        port: "output" if port in _OUTPUT_PORTS or port.startswith("DO") else "input" for port in connections
    }
    return {"type": cell_type, "port_directions": directions, "connections": connections}


def _netlist(cells, ports=None):
    return {"modules": {"top": {"ports": ports or {}, "cells": cells}}}


def _ff(d, q):
    return _cell("FDRE", C=1, CE="1", R="0", D=d, Q=q)


def test_levels_two_luts_between_registers():
    netlist = _netlist({
        "a": _ff(d=5, q=2),
        "l1": _cell("LUT2", I0=2, I1=2, O=3),
        "l2": _cell("LUT1", I0=3, O=4),
        "b": _ff(d=4, q=5),
    }, ports={"clk": {"direction": "input", "bits": [1]}})
    assert logic_levels(netlist, "top") == (2, ["FDRE:a", "LUT2:l1", "LUT1:l2", "FDRE:b"])


def _carry4(ci, s, co_first):
    """A CARRY4 whose CO bits are ``co_first .. co_first + 3`` and O bits ``co_first + 4 .. + 7``."""
    return _cell("CARRY4", CI=ci, CYINIT="0", DI=["0"] * 4, S=s,
                 CO=list(range(co_first, co_first + 4)), O=list(range(co_first + 4, co_first + 8)))


def test_levels_carry4_chain_of_four_is_two_carry8():
    # FD -> S of c0 -> CI of c1 -> c2 -> c3 -> FD: four CARRY4 are two CARRY8, so two levels.
    netlist = _netlist({
        "r": _ff(d=2, q=2),
        "c0": _carry4("0", [2, 2, 2, 2], 10),
        "c1": _carry4(13, ["1"] * 4, 20),
        "c2": _carry4(23, ["1"] * 4, 30),
        "c3": _carry4(33, ["1"] * 4, 40),
        "d": _ff(d=47, q=50),
    })
    levels, path = logic_levels(netlist, "top")
    assert levels == 2
    assert path == ["FDRE:r", "CARRY4:c0", "CARRY4:c1", "CARRY4:c2", "CARRY4:c3", "FDRE:d"]
    assert carry4_chains(netlist["modules"]["top"]) == [["c0", "c1", "c2", "c3"]]


@pytest.mark.parametrize("enter, leave, expected", [
    # c1 and c2 sit in different CARRY8s (c0+c1, c2+c3): crossing the boundary costs a second level, which
    # charging 0.5 per CARRY4 and rounding up would miss.
    ("c1", 37, 2),
    # c2 and c3 share one CARRY8.
    ("c2", 47, 1),
])
def test_levels_carry_entered_mid_chain(enter, leave, expected):
    cells = {
        "c0": _carry4("0", ["1"] * 4, 10),
        "c1": _carry4(13, ["1"] * 4, 20),
        "c2": _carry4(23, ["1"] * 4, 30),
        "c3": _carry4(33, ["1"] * 4, 40),
        "r": _ff(d=2, q=2),
        "d": _ff(d=leave, q=60),
    }
    cells[enter]["connections"]["S"] = [2, "1", "1", "1"]
    assert logic_levels(_netlist(cells), "top")[0] == expected


def test_levels_combinational_loop_terminates_and_is_reported():
    netlist = _netlist({
        "r": _ff(d=4, q=2),
        "a": _cell("LUT2", I0=2, I1=4, O=3),
        "b": _cell("LUT1", I0=3, O=4),
    })
    levels, path = logic_levels(netlist, "top")
    notes = [entry for entry in path if entry.startswith("note:")]
    assert len(notes) == 1 and "loop" in notes[0]
    # A loop has no depth; which edge is cut decides whether one or both LUTs count on the path into r.
    assert levels in (1, 2)
    assert path[-2] == "FDRE:r"


def test_levels_lutram_read_address_is_one_level_write_side_ends_path():
    netlist = _netlist({
        "ra": _ff(d=2, q=2),
        "wd": _ff(d=3, q=3),
        "ram": _cell("RAM64M", WCLK=1, WE="1", ADDRA=[2] * 6, ADDRB=["0"] * 6, ADDRC=["0"] * 6,
                     ADDRD=["0"] * 6, DIA=[3, 3], DIB=["0"] * 2, DIC=["0"] * 2, DID=["0"] * 2,
                     DOA=[10, 11], DOB=[12, 13], DOC=[14, 15], DOD=[16, 17]),
        "q": _ff(d=10, q=20),
    })
    assert logic_levels(netlist, "top") == (1, ["FDRE:ra", "RAM64M:ram", "FDRE:q"])
    # Without an address path the RAM's output is launched by its clock, like a register's.
    netlist["modules"]["top"]["cells"]["ram"]["connections"]["ADDRA"] = ["0"] * 6
    assert logic_levels(netlist, "top")[0] == 0


def test_levels_dsp_bounds_paths_and_ports_start_and_end_them():
    netlist = _netlist({
        "l1": _cell("LUT2", I0=2, I1=2, O=3),
        "dsp": _cell("DSP48E2", CLK=1, A=[3], B=["0"], P=[4, 5]),
        "l2": _cell("LUT1", I0=4, O=6),
        "l3": _cell("LUT1", I0=6, O=7),
    }, ports={
        "a": {"direction": "input", "bits": [2]},
        "y": {"direction": "output", "bits": [7]},
    })
    assert logic_levels(netlist, "top") == (2, ["DSP48E2:dsp", "LUT1:l2", "LUT1:l3", "output:y"])


# --- unregistered block RAM and UltraRAM reads, port-to-port paths -------------------------------------------
#
# Every expected figure below is worked by hand from the netlist in the test: a path launched from a RAM port
# without its output register starts at 2 levels (docs/architecture.md: 1.5-2 ns clock-to-out against 0.3 ns,
# about 0.65 ns a level at 250 MHz), every LUT adds one.

_RAM_PENALTY = 2      # the documented figure, restated here rather than read from lbpipe.levels


def _ramb(do_reg_a, do_reg_b=1, dout_a=(10, 11), dout_b=(12, 13), cell_type="RAMB36E2"):
    """A block RAM on clock bit 1, addressed from bit 2 (the register ``ra``), outputs on ``dout_*``."""
    cell = _cell(cell_type, CLKARDCLK=1, CLKBWRCLK=1, ADDRARDADDR=[2], ADDRBWRADDR=[2],
                 DOUTADOUT=list(dout_a), DOUTBDOUT=list(dout_b))
    cell["parameters"] = {"DOA_REG": f"{do_reg_a:032b}", "DOB_REG": f"{do_reg_b:032b}"}
    return cell


def _bram_netlist(do_reg_a, loads):
    """Block RAM ``ram`` (port A's two bits 10 and 11 used) and the cells reading it, plus the address register."""
    cells = {"ra": _ff(d=2, q=2), "ram": _ramb(do_reg_a)}
    cells.update(loads)
    return _netlist(cells)


def test_levels_unregistered_bram_through_logic_is_charged_and_counted():
    # ram.A (DOA_REG=0) -> LUT -> LUT -> FF q: 2 + 2 levels; one more path ram.A -> LUT -> FF p: 2 + 1.
    netlist = _bram_netlist(0, {
        "l1": _cell("LUT2", I0=10, I1=11, O=20),
        "l2": _cell("LUT1", I0=20, O=21),
        "q": _ff(d=21, q=30),
        "p": _ff(d=20, q=31),
    })
    result = analyse(netlist, "top")
    assert result["levels"] == _RAM_PENALTY + 2
    assert result["path"] == ["RAMB36E2:ram (unregistered A)", "LUT2:l1", "LUT1:l2", "FDRE:q"]
    assert result["unregistered_ram"] == {"ports": ["RAMB36E2:ram (A)"], "memories": {"ram": "1 RAMB36E2, 1 ports"},
                                          "paths": 2, "levels": _RAM_PENALTY + 2}
    # The same netlist with the output register on: the paths start at the RAM, two LUTs deep, none flagged.
    netlist["modules"]["top"]["cells"]["ram"]["parameters"]["DOA_REG"] = "1"
    result = analyse(netlist, "top")
    assert result["levels"] == 2 and result["path"][0] == "RAMB36E2:ram"
    assert result["unregistered_ram"] == {"ports": [], "memories": {}, "paths": 0, "levels": 0}


def test_levels_bram_into_flip_flops_only_is_packable():
    # Both used bits go straight into FDRE D pins on the RAM's clock: Vivado absorbs them as DOA_REG.
    packable = {"q0": _ff(d=10, q=30), "q1": _cell("FDSE", C=1, CE="1", S="0", D=11, Q=31)}
    result = analyse(_bram_netlist(0, packable), "top")
    assert result["levels"] == 0
    assert result["unregistered_ram"]["ports"] == []


@pytest.mark.parametrize("why, loads, paths, levels", [
    # An asynchronously cleared flip-flop cannot become the RAM's (synchronous) output register.
    ("async clear", {"q0": _ff(d=10, q=30), "q1": _cell("FDCE", C=1, CE="1", CLR="0", D=11, Q=31)}, 2, 0),
    # A flip-flop on another clock cannot either.
    ("other clock", {"q0": _ff(d=10, q=30), "q1": _cell("FDRE", C=9, CE="1", R="0", D=11, Q=31)}, 2, 0),
    # Bit 11 also feeds a LUT: the unregistered data is needed, so the port stays unregistered, and the direct
    # path into q1 is charged too (three end points: q0, q1, and q2 behind the LUT).
    ("shared bit", {"q0": _ff(d=10, q=30), "q1": _ff(d=11, q=31), "l": _cell("LUT1", I0=11, O=20),
                    "q2": _ff(d=20, q=32)}, 3, 1),
])
def test_levels_bram_not_packable(why, loads, paths, levels):
    result = analyse(_bram_netlist(0, loads), "top")
    ram = result["unregistered_ram"]
    assert (ram["ports"], ram["paths"], ram["levels"]) == (["RAMB36E2:ram (A)"], paths, _RAM_PENALTY + levels), why
    assert result["levels"] == _RAM_PENALTY + levels


def test_levels_bram_port_b_and_output_port():
    # Port A registered (DOA_REG=1) into a LUT; port B unregistered straight to a module output port.
    cells = {"ra": _ff(d=2, q=2), "ram": _ramb(1, 0), "l": _cell("LUT1", I0=10, O=20), "q": _ff(d=20, q=30)}
    result = analyse(_netlist(cells, ports={"y": {"direction": "output", "bits": [12]}}), "top")
    ram = result["unregistered_ram"]
    assert (ram["ports"], ram["paths"], ram["levels"]) == (["RAMB36E2:ram (B)"], 1, _RAM_PENALTY)
    assert result["levels"] == _RAM_PENALTY
    assert result["path"] == ["RAMB36E2:ram (unregistered B)", "output:y"]


@pytest.mark.parametrize("oreg, levels, ports", [("FALSE", _RAM_PENALTY + 1, ["URAM288:u (A)"]), ("TRUE", 1, [])])
def test_levels_uram_output_register(oreg, levels, ports):
    uram = _cell("URAM288", CLK=1, ADDR_A=[2], DOUT_A=[10])
    uram["parameters"] = {"OREG_A": oreg + " ", "OREG_B": "FALSE "}
    cells = {"ra": _ff(d=2, q=2), "u": uram, "l": _cell("LUT1", I0=10, O=20), "q": _ff(d=20, q=30)}
    result = analyse(_netlist(cells), "top")
    assert result["levels"] == levels
    assert result["unregistered_ram"]["ports"] == ports


def test_levels_port_to_port_paths_by_name():
    # a -> LUT -> LUT -> y and a -> FF (no path); b -> y through the second LUT only; c -> z as a bare wire;
    # the register r -> y path is register to output, not port to port.
    netlist = _netlist({
        "l1": _cell("LUT1", I0=2, O=5),
        "l2": _cell("LUT3", I0=5, I1=3, I2=7, O=6),
        "f": _ff(d=2, q=8),
        "r": _ff(d=8, q=7),
    }, ports={
        "a": {"direction": "input", "bits": [2]},
        "b": {"direction": "input", "bits": [3]},
        "c": {"direction": "input", "bits": [4]},
        "y": {"direction": "output", "bits": [6]},
        "z": {"direction": "output", "bits": [4]},
    })
    assert analyse(netlist, "top")["port_paths"] == [
        {"from": "a", "to": "y", "levels": 2, "path": ["input:a", "LUT1:l1", "LUT3:l2", "output:y"]},
        {"from": "b", "to": "y", "levels": 1, "path": ["input:b", "LUT3:l2", "output:y"]},
        {"from": "c", "to": "z", "levels": 0, "path": ["input:c", "output:z"]},
    ]


# --- markdown and JSON reports ------------------------------------------------------------------------------

def _report(block, **figures):
    report = dict(block=block, lut=0, lutram=0, srl=0, ff=0, carry8=0, ramb36=0, ramb18=0, uram=0, dsp=0,
                  logic_levels=0, nolutram=False)
    report.update(figures)
    return report


def test_percent_of_u280_counts_lutram_sites_and_bram_tiles():
    pct = percent_of_u280(_report("x", lut=1000, lutram=2, lutram_luts=16, srl=4, ramb36=3, ramb18=2, dsp=9))
    assert pct["lut"] == pytest.approx(100 * 1020 / 1303680)
    assert pct["bram"] == pytest.approx(100 * 4 / 2016)
    assert pct["dsp"] == pytest.approx(100 * 9 / 9024)
    assert U280["ramb18"] == 2 * U280["ramb36"]


def test_sweep_table_one_row_per_point_with_bram_tiles(tmp_path):
    small = {"lut": 100, "lutram": 2, "ff": 50, "carry8": 3, "ramb36": 1, "ramb18": 3, "uram": 0, "dsp": 0,
             "logic_levels": 4, "bram_bits": 36864 + 3 * 18432, "uram_bits": 0, "seconds": 9.4}
    big = dict(small, lut=1234, ramb36=10, ramb18=0, uram=2, bram_bits=10 * 36864, uram_bits=2 * 294912,
               logic_levels=5)
    md, js = write_sweep("blk", ["n", "m"], [({"n": 1, "m": 8}, small), ({"n": 4, "m": 32}, big)], tmp_path,
                         fixed={"n": 1, "m": 8, "k": 3})
    lines = md.read_text().splitlines()
    assert lines[0].startswith("Sweep of `n`, `m` for `blk` (k=3)")
    header = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert header[:4] == ["n", "m", "LUT", "LUTRAM"] and "URAM" in header and "Logic levels" in header
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in lines[4:6]]
    cell = dict(zip(header, rows[0]))
    # 1 RAMB36 + 3 RAMB18 = 2.5 tiles; 1 x 36,864 + 3 x 18,432 = 92,160 bits
    assert (cell["n"], cell["LUT"], cell["BRAM (RAMB36 + RAMB18)"], cell["Memory bits (BRAM + URAM)"]) == (
        "1", "100", "2.5 (1 + 3)", "92,160")
    cell = dict(zip(header, rows[1]))
    assert (cell["LUT"], cell["URAM"], cell["Logic levels"], cell["Memory bits (BRAM + URAM)"]) == (
        "1,234", "2", "5", "958,464")
    assert FOOTNOTE in md.read_text()
    assert [r["sweep"] for r in json.loads(js.read_text())] == [{"n": 1, "m": 8}, {"n": 4, "m": 32}]


def test_format_markdown_rows_paper_extras_and_footnote(tmp_path):
    reports = [
        _report("themis_s_pst", lut=1200, ff=800, ramb36=4, logic_levels=5,
                extra={"PST memory": "4096 x 36 bits = 147456 bits | 4 RAMB36"}),
        _report("themis_d_pit", lut=300, ff=100, uram=2, logic_levels=3, nolutram=True),
    ]
    paper = {"themis_s_pst": {"LUT": 900, "bram": "4", "Fmax": "250 MHz"}}
    text = format_markdown(reports, paper)
    lines = text.splitlines()
    ours = next(i for i, line in enumerate(lines) if "themis_s_pst" in line)
    # The paper's row sits right under ours, with LUT in the LUT column, BRAM under RAMB36, the rest blank.
    paper_cells = [c.strip() for c in lines[ours + 1].strip("|").split("|")]
    assert paper_cells[:5] == ["_paper_", "900", "", "", "4"]
    assert "themis_d_pit" in text and "(-nolutram)" in text
    assert "0.20% U280" in text  # 4 RAMB36 of 2016
    assert "paper Fmax: 250 MHz" in text
    assert "PST memory: 4096 x 36 bits = 147456 bits \\| 4 RAMB36" in text
    assert FOOTNOTE in text and text.count("_paper_") == 1

    md_path, json_path = write_reports(reports, tmp_path / "out", paper)
    assert md_path.read_text() == text
    records = json.loads(json_path.read_text())
    assert [r["block"] for r in records] == ["themis_s_pst", "themis_d_pit"]
    assert records[1]["u280_percent"]["uram"] == pytest.approx(100 * 2 / 960)


# --- synthesis ----------------------------------------------------------------------------------------------

def _adder():
    m = Module()
    a, b, ra, rb, s = (Signal(16, name=n) for n in ("a", "b", "ra", "rb", "s"))
    m.d.sync += [ra.eq(a), rb.eq(b), s.eq(ra + rb)]
    return m, [a, b, s]


def _and_tree():
    # 216 = 6**3 registered inputs, reduced six at a time: three LUT6 levels for an ideal mapper.
    m = Module()
    x, rx, y = Signal(216, name="x"), Signal(216, name="rx"), Signal(name="y")
    m.d.sync += rx.eq(x)
    level = list(rx)
    while len(level) > 1:
        level = [Cat(*level[i:i + 6]).all() for i in range(0, len(level), 6)]
    m.d.sync += y.eq(level[0])
    return m, [x, y]


_LUT_CHAIN = 5


def _lut_chain(length=_LUT_CHAIN):
    # Instantiated LUT6 primitives pass through synthesis untouched, so the depth is the chain length.
    m = Module()
    x, rx, y = Signal(6, name="x"), Signal(6, name="rx"), Signal(name="y")
    m.d.sync += rx.eq(x)
    prev = rx[0]
    for i in range(length):
        out = Signal(name=f"lut{i}_o")
        # INIT is 6-input parity, so no input is constant-folded away.
        m.submodules[f"lut{i}"] = Instance("LUT6", p_INIT=0x6996966996696996, o_O=out,
                                           i_I0=prev, i_I1=rx[1], i_I2=rx[2], i_I3=rx[3], i_I4=rx[4], i_I5=rx[5])
        prev = out
    m.d.sync += y.eq(prev)
    return m, [x, y]


def _bram():
    m = Module()
    m.submodules.mem = mem = Memory(shape=36, depth=4096, init=[])
    wp, rp = mem.write_port(), mem.read_port()
    return m, [wp.addr, wp.data, wp.en, rp.addr, rp.en, rp.data]


def _lutram():
    m = Module()
    m.submodules.mem = mem = Memory(shape=8, depth=64, init=[])
    wp, rp = mem.write_port(), mem.read_port(domain="comb")
    raddr, ra, q = Signal(6, name="raddr"), Signal(6, name="ra"), Signal(8, name="q")
    m.d.sync += [ra.eq(raddr), q.eq(rp.data)]
    m.d.comb += rp.addr.eq(ra)
    return m, [wp.addr, wp.data, wp.en, raddr, q]


def _bram_read(registered):
    """4096 x 36 block RAM read from an address register; its data either straight into a register (what Vivado
    packs into DOA_REG/DOB_REG) or XORed with a register first (logic behind the unregistered read)."""
    m = Module()
    m.submodules.mem = mem = Memory(shape=36, depth=4096, init=[])
    wp, rp = mem.write_port(), mem.read_port()
    raddr, ra, x, rx, q = (Signal(w, name=n) for w, n in ((12, "raddr"), (12, "ra"), (36, "x"), (36, "rx"),
                                                          (36, "q")))
    m.d.sync += [ra.eq(raddr), rx.eq(x), q.eq(rp.data if registered else rp.data ^ rx)]
    m.d.comb += rp.addr.eq(ra)
    return m, [wp.addr, wp.data, wp.en, raddr, x, q]


class _CtlThrough(wiring.Component):
    """A metadata block with a planted combinational path from ``ctl`` to ``o`` and ``o.ready`` to ``i.ready``."""

    def __init__(self):
        item = data.StructLayout({"x": 8})
        super().__init__({"i": In(stream.Signature(item)), "o": Out(stream.Signature(item)),
                          "ctl": In(ControlSignature())})

    def elaborate(self, platform):
        m = Module()
        held = Signal(8)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += held.eq(self.i.payload.x)
        m.d.comb += [
            self.o.valid.eq(1),
            self.o.payload.x.eq(Mux(self.ctl.valid, self.ctl.payload.data[:8], held)),
            self.ctl.ready.eq(1),
            self.i.ready.eq(self.o.ready),
        ]
        return m


_DESIGNS = {"adder": _adder, "and_tree": _and_tree, "lut_chain": _lut_chain, "bram": _bram, "lutram": _lutram,
            "bram_logic": lambda: _bram_read(False), "bram_reg": lambda: _bram_read(True)}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            design, ports = _DESIGNS[name]()
            cache[name] = synthesize(design, name=name, ports=ports, workdir=tmp_path_factory.mktemp(name))
        return cache[name]
    return get


def test_synth_registered_adder(synthesized):
    r = synthesized("adder")
    assert r["ff"] == 48                 # ra, rb, s
    assert r["carry8"] == 2              # 16 bits, 8 per CARRY8
    assert r["cells"].get("CARRY4") == 4
    assert r["lut"] == 16                # one a ^ b propagate LUT per bit feeding S
    assert r["logic_levels"] == 3        # LUT2 then two CARRY8
    assert r["critical_path"][0].startswith("FDRE:") and r["critical_path"][-1].startswith("FDRE:")
    assert r["yosys_version"].startswith("Yosys ") and r["seconds"] > 0 and r["nolutram"] is False


def test_synth_instantiated_lut_chain_depth(synthesized):
    r = synthesized("lut_chain")
    assert r["cells"].get("LUT6") == _LUT_CHAIN
    assert r["ff"] == 7
    assert r["logic_levels"] == _LUT_CHAIN
    assert sum(e.startswith("LUT6:") for e in r["critical_path"]) == _LUT_CHAIN


def test_synth_and_tree_depth_bounds(synthesized):
    r = synthesized("and_tree")
    assert r["ff"] == 217
    # Each LUT6 removes at most five of the 216 inputs.
    assert r["lut"] >= math.ceil(215 / 5)
    # ceil(log6 216) = 3 is the least any 6-LUT mapping can do. Yosys's ABC9 maps against per-pin delays,
    # not levels, and does not reach it (it is not told to); it must still beat the 2-input gate tree,
    # ceil(log2 216) = 8.
    assert 3 <= r["logic_levels"] <= 8


def test_synth_bram_4096x36(synthesized):
    r = synthesized("bram")
    # 4096 x 36 = 147456 bits = exactly four RAMB36 as 4K x 9.
    assert (r["ramb36"], r["ramb18"]) == (4, 0)
    assert r["bram_bits"] == 4096 * 36
    assert r["lut"] == 0 and r["ff"] == 0
    assert percent_of_u280(r)["bram"] == pytest.approx(100 * 4 / 2016)
    # Ports drive the BRAM directly and its output leaves unregistered for an output port: no logic in between,
    # but each of the four RAMB36 launches unregistered data, 2 levels of penalty, into the one output port.
    assert r["logic_levels"] == 2
    assert len(r["unregistered_ram"]["ports"]) == 4 and r["unregistered_ram"]["paths"] == 4
    assert r["port_paths"] == [] and "top" not in r      # a plain Module is not wrapped


def test_synth_bram_read_through_logic_is_charged(synthesized):
    r = synthesized("bram_logic")
    assert (r["ramb36"], r["ramb18"]) == (4, 0)
    # Each RAMB36 (4K x 9) drives nine bits, each through one XOR LUT into its own q flip-flop:
    # 4 unregistered ports, 4 x 9 = 36 paths, 2 + 1 = 3 levels.
    ram = r["unregistered_ram"]
    assert (len(ram["ports"]), ram["paths"], ram["levels"]) == (4, 36, 3)
    assert ram["memories"] == {"mem": "4 RAMB36E2, 4 ports"}
    assert r["logic_levels"] == 3
    assert r["critical_path"][0].startswith("RAMB36E2:") and "unregistered" in r["critical_path"][0]


def test_synth_bram_read_into_register_is_packable(synthesized):
    r = synthesized("bram_reg")
    assert (r["ramb36"], r["ramb18"]) == (4, 0)
    assert r["ff"] == 12 + 36               # ra and q (rx reads nothing here and is removed)
    # Yosys leaves DOA_REG/DOB_REG at 0, but q takes the data with no logic between: Vivado absorbs it.
    assert r["unregistered_ram"] == {"ports": [], "memories": {}, "paths": 0, "levels": 0}
    assert r["logic_levels"] == 0


def test_synth_wrapped_component_and_port_paths(tmp_path):
    r = synthesize(_CtlThrough(), name="ctl_through", workdir=tmp_path)
    core = {(p["from"], p["to"]) for p in r["port_paths"]}
    # The planted paths, by the core's flattened port names.
    assert ("ctl__payload", "o__payload") in core and ("ctl__valid", "o__payload") in core
    assert ("o__ready", "i__ready") in core
    # Wrapped as `lbpipe verilog` writes it: ctl comes from the bridge's registers, so only ready remains.
    top = r["top"]
    assert {(p["from"], p["to"]) for p in top["port_paths"]} == {("out_ready", "in_ready")}
    assert top["ff"] > r["ff"] and top["lut"] > r["lut"]        # the bridge's registers and decoding
    text = format_markdown([r])
    assert "`ctl_through` + AXI4-Lite (`ctl_through.v`)" in text
    assert "Combinational port-to-port paths (core): ctl__payload -> o__payload" in text
    assert "Combinational port-to-port paths (AXI4-Lite top): out_ready -> in_ready (0 levels)" in text


def test_synth_lutram_read_path(synthesized):
    r = synthesized("lutram")
    assert r["lutram"] >= 1 and r["ramb18"] == 0 and r["ramb36"] == 0
    assert r["ff"] == 14                 # 6 read-address and 8 read-data registers
    assert r["logic_levels"] == 1        # address register -> LUTRAM -> data register
    assert percent_of_u280(r)["lut"] == pytest.approx(100 * (r["lut"] + r["lutram_luts"]) / U280["lut"])


def test_synth_failure_raises_with_log(tmp_path):
    m = Module()
    a, y = Signal(name="a"), Signal(name="y")
    m.submodules.missing = Instance("NO_SUCH_PRIMITIVE", i_I=a, o_O=y)
    with pytest.raises(RuntimeError, match="yosys failed") as info:
        synthesize(m, name="broken", ports=[a, y], workdir=tmp_path)
    assert "NO_SUCH_PRIMITIVE" in str(info.value)
    assert (tmp_path / "yosys.log").exists()


def test_synth_rejects_bad_name(tmp_path):
    with pytest.raises(ValueError, match="identifier"):
        synthesize(Module(), name="a b", ports=[], workdir=tmp_path)


# --- StreamFIFO: block RAM read registered, timing unchanged ------------------------------------------------

def _fifo_pair(depth, width=12):
    from amaranth.lib.fifo import SyncFIFOBuffered
    from lbpipe.hdl.lib.fifo import RegisteredReadFIFO
    m = Module()
    rst = Signal(name="rst")
    ref = SyncFIFOBuffered(width=width, depth=depth)
    dut = RegisteredReadFIFO(width=width, depth=depth)
    m.submodules.ref = ResetInserter(rst)(ref)
    m.submodules.dut = ResetInserter(rst)(dut)
    return m, ref, dut, rst


@pytest.mark.parametrize("depth, p_write, p_read", [
    (2, 0.5, 0.5), (3, 0.7, 0.4), (4, 0.9, 0.9), (5, 0.4, 0.8), (9, 0.8, 0.3), (70, 0.6, 0.6), (70, 0.95, 0.2),
    (70, 0.3, 0.95), (70, 1.0, 1.0),
])
def test_registered_read_fifo_matches_sync_fifo_buffered_every_cycle(depth, p_write, p_read):
    """Amaranth's own ``SyncFIFOBuffered`` is the reference: same inputs each cycle, and ``w_rdy``, ``r_rdy``,
    ``level`` and ``r_data`` equal on every cycle (the data offered holds the last item read even while ``r_rdy``
    is low, as the RAM latch does in the reference). Phases of full and empty make the slots,
    the bypass and the RAM path all carry the head."""
    from amaranth.sim import Simulator
    m, ref, dut, rst = _fifo_pair(depth)
    rng = random.Random(f"{depth}/{p_write}/{p_read}")
    n_cycles = 3000
    mismatches = []

    async def bench(ctx):
        for cycle in range(n_cycles):
            phase = (cycle // 400) % 3          # mixed, fill (reads rare), drain (writes rare)
            pw = (p_write, 0.95, 0.05)[phase]
            pr = (p_read, 0.05, 0.95)[phase]
            w_en, r_en, w_data = int(rng.random() < pw), int(rng.random() < pr), rng.randrange(1 << 12)
            # A reset in the middle of traffic, once in a while: both must come back empty together.
            ctx.set(rst, int(cycle % 977 == 500))
            for fifo in (ref, dut):
                ctx.set(fifo.w_en, w_en)
                ctx.set(fifo.r_en, r_en)
                ctx.set(fifo.w_data, w_data)
            seen = [(ctx.get(f.w_rdy), ctx.get(f.r_rdy), ctx.get(f.level)) for f in (ref, dut)]
            if seen[0] != seen[1] or ctx.get(ref.r_data) != ctx.get(dut.r_data):
                mismatches.append((cycle, seen, ctx.get(ref.r_data), ctx.get(dut.r_data)))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert mismatches == [], mismatches[:5]


def _deep_stream_fifo():
    from lbpipe.hdl.lib.fifo import StreamFIFO
    dut = StreamFIFO(shape=data.StructLayout({"a": 20, "b": 16}), depth=257)
    return dut, None


def test_deep_stream_fifo_block_ram_read_is_registered(tmp_path):
    dut, _ = _deep_stream_fifo()
    r = synthesize(dut, name="deep_fifo", workdir=tmp_path)
    # 256 x 36 bits of storage behind the output register: one RAMB18 (512 x 36).
    assert r["ramb18"] + 2 * r["ramb36"] >= 1
    assert r["unregistered_ram"] == {"ports": [], "memories": {}, "paths": 0, "levels": 0}


@pytest.mark.parametrize("length, status", [(6, 0), (7, 3)])
def test_synth_command_exits_3_over_six_levels(tmp_path, monkeypatch, capsys, length, status):
    # The project's budget is 6 logic levels on every path (README, docs/architecture.md). The block's synthesis is
    # replaced by a chain of `length` instantiated LUT6 (that many levels, whatever the mapper does); every report
    # is still written, and each design over the budget gets one line on stderr, and the exit status is 3 (1 is
    # a failure, 2 bad input).
    import lbpipe.cli as cli

    def chain(blocks, all_params, out, **kwargs):
        design, ports = _lut_chain(length)
        report = synthesize(design, name="chain", ports=ports, workdir=out / "chain")
        report.update(block=blocks[0].name, params=all_params[0], extra={})
        return [report]
    monkeypatch.setattr(cli, "_synth_blocks", chain)
    assert cli.main(["synth", "themis-s", "-o", str(tmp_path)]) == status
    assert (tmp_path / "synth.json").exists() and (tmp_path / "synth.md").exists()
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lbpipe synth:")]
    assert len(err) == (1 if status else 0)
    if status:
        assert "themis-s (core): 7 logic levels, over the budget of 6" in err[0]
