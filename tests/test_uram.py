"""lib.uram: the UltraRAM table memory in its three modes, with and without its read register, against a plain
Python dict written here (random writes and reads, read during write of the same address, read enable low, reset),
the URAM288_BASE instances under Icarus with the behavioural model, the LAPS PIT built on it against its golden
model, and Yosys's count of the UltraRAM it maps.

Expected behaviour (written here, from the port semantics the blocks rely on, docs/laps_pit.md "UltraRAM"): a read
of the address written in the same clock returns the old word; ``r_data`` holds while ``r_en`` is low; reset
changes neither the contents nor the unregistered ``r_data``; contents start at zero. With the read register:
``r_data`` loads the word read the clock before when ``r_reg_en`` is high, and reset clears it (priority)."""

import random

import cocotb
import pytest
from amaranth import ClockDomain, Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge, Timer

from lbpipe.engine import run_golden, run_rtl
from lbpipe.hdl.lib.uram import SIM_MODEL, UltraRAM, sim_sources
from lbpipe.sim.laps.pit import pit_trace
from lbpipe.tb.lib import runner

DEPTH, WIDTH = 64, 81           # two tiles in "instance" mode, the second 9 bits used (as the PIT's D)
MODES = ("memory", "infer", "instance")


# -- parameters ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(shape=8, depth=16, mode="ultra"), "mode must be one of"),
    (dict(shape=8, depth=0), "depth must be at least 1"),
    (dict(shape=8, depth=4097, mode="instance"), "up to 4096"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        UltraRAM(**kwargs)


def test_signature():
    plain = UltraRAM(shape=WIDTH, depth=DEPTH)
    assert set(plain.signature.members) == {"r_addr", "r_en", "r_data", "w_addr", "w_en", "w_data"}
    reg = UltraRAM(shape=WIDTH, depth=DEPTH, registered=True)
    assert set(reg.signature.members) == set(plain.signature.members) | {"r_reg_en"}
    assert reg.signature.members["r_en"].init == 1 and reg.signature.members["r_reg_en"].init == 1
    assert plain.signature.members["r_addr"].shape == range(DEPTH) and plain.signature.members["r_data"].shape == WIDTH
    port = reg.read_port()
    assert (port.addr, port.en, port.data, port.reg_en) == (reg.r_addr, reg.r_en, reg.r_data, reg.r_reg_en)


def test_tiles_by_width():
    # 72 bits a URAM288 (UG573): 72 -> 1, 73 -> 2, 163 -> 3
    assert [UltraRAM(shape=w, depth=16, mode="instance").n_tiles for w in (1, 72, 73, 144, 163)] == [1, 1, 2, 2, 3]
    assert UltraRAM(shape=72, depth=4096, mode="instance").n_tiles == 1
    assert UltraRAM(shape=72, depth=8192, mode="memory").n_tiles == 0


def test_verilog_instantiates_the_primitive_only_in_instance_mode():
    from amaranth.back import verilog
    texts = {mode: verilog.convert(UltraRAM(shape=WIDTH, depth=DEPTH, mode=mode), name="u") for mode in MODES}
    assert texts["instance"].count("URAM288_BASE #(") == 2 and sim_sources(texts["instance"]) == [SIM_MODEL]
    assert texts["instance"].count('.OREG_A("FALSE")') == 2
    registered = verilog.convert(UltraRAM(shape=WIDTH, depth=DEPTH, mode="instance", registered=True), name="u")
    assert registered.count('.OREG_A("TRUE")') == 2
    assert 'ram_style = "ultra"' in texts["infer"] and "URAM288_BASE" not in texts["infer"]
    assert "URAM288_BASE" not in texts["memory"] and "ram_style" not in texts["memory"]
    assert sim_sources(texts["memory"]) == []


# -- the dict model and random stimulus ------------------------------------------------------------------------------

def _stimulus(seed, n, depth=DEPTH, width=WIDTH):
    """Per clock ``(r_en, r_addr, w_en, w_addr, w_data, rst, reg_en)``: reads and writes with many same-address
    clocks, read enable and register enable low now and then, and a reset of three clocks in the middle (read and
    write ports idle during it)."""
    rng = random.Random(seed)
    hot = [rng.randrange(depth) for _ in range(4)]
    out = []
    for c in range(n):
        rst = n // 2 <= c < n // 2 + 3
        w_addr = rng.choice(hot) if rng.random() < 0.5 else rng.randrange(depth)
        r_addr = w_addr if rng.random() < 0.3 else (rng.choice(hot) if rng.random() < 0.5 else rng.randrange(depth))
        w_data = rng.choice([0, (1 << width) - 1, rng.getrandbits(width)])
        r_en = 0 if rst else int(c == 0 or rng.random() < 0.8)
        w_en = 0 if rst else int(rng.random() < 0.6)
        # clock 0 reads before the register loads: the read data before the first read is not defined (X in the
        # Verilog of an inferred memory; zero in Amaranth's simulator and in the UltraRAM)
        out.append((r_en, r_addr, w_en, w_addr, w_data, int(rst), int(c > 0 and rng.random() < 0.8)))
    # after the reset: read every address back (the reset kept the contents)
    out += [(1, a, 0, 0, 0, 0, 1) for a in range(depth)]
    return out


def _expected(stimulus, registered=False):
    """``r_data`` after each clock, from a dict: the read sees the word before this clock's write; a clock without
    a read keeps it; reset touches neither the contents nor it. ``registered``: the register after it, loaded
    with the word read the clock before when ``reg_en`` is high, cleared by reset."""
    mem, rdata, reg, out = {}, 0, 0, []
    for r_en, r_addr, w_en, w_addr, w_data, rst, reg_en in stimulus:
        if rst:
            reg = 0
        elif reg_en:
            reg = rdata
        if r_en:
            rdata = mem.get(r_addr, 0)
        if w_en:
            mem[w_addr] = w_data
        out.append(reg if registered else rdata)
    return out


def test_expected_model_by_hand():
    # write 5 to 3; read 3 while writing 7 to it: old 5; read with en low: still 5; read 3: 7; unwritten 9: 0
    stim = [(0, 0, 1, 3, 5, 0, 1), (1, 3, 1, 3, 7, 0, 1), (0, 3, 0, 0, 0, 0, 1), (1, 3, 0, 0, 0, 0, 1),
            (1, 9, 0, 0, 0, 0, 1)]
    assert _expected(stim) == [0, 5, 5, 7, 0]
    # registered: the word read one clock later (5 read at clock 1 shows after clock 2); reg_en low at clock 3
    # holds 5 while 9 is read; reset clears; then the word read last (0 at 9, kept through reset) loads
    stim = [(1, 3, 1, 3, 5, 0, 1), (1, 3, 0, 0, 0, 0, 1), (1, 3, 0, 0, 0, 0, 1), (1, 9, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 1, 1), (0, 0, 0, 0, 0, 0, 1)]
    assert _expected(stim, registered=True) == [0, 0, 5, 5, 0, 0]


# -- Amaranth simulator: memory and infer modes, a layout shape ----------------------------------------------------

@pytest.mark.parametrize("mode", ["memory", "infer"])
@pytest.mark.parametrize("registered", [False, True])
def test_amaranth_modes_against_dict(mode, registered):
    layout = data.StructLayout({"valid": 1, "time": 48, "real": 32})      # the PIT's D
    dut = UltraRAM(shape=layout, depth=DEPTH, mode=mode, registered=registered)
    stim = _stimulus(11, 300)
    want = _expected(stim, registered)
    got = []

    async def bench(ctx):
        for r_en, r_addr, w_en, w_addr, w_data, rst, reg_en in stim:
            ctx.set(dut.r_en, r_en)
            if registered:
                ctx.set(dut.r_reg_en, reg_en)
            ctx.set(cd.rst, rst)
            ctx.set(dut.r_addr, r_addr)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.w_addr, w_addr)
            ctx.set(dut.w_data.as_value(), w_data)
            await ctx.tick()
            got.append(ctx.get(dut.r_data.as_value()))
    top = Module()
    top.domains.sync = cd = ClockDomain("sync")
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got == want


# -- Icarus: the three modes side by side, the instances on the behavioural model ----------------------------------

VARIANTS = [(mode, reg) for mode in MODES for reg in (False, True)]


class _Trio(wiring.Component):
    """The same ports drive an UltraRAM of each mode, without and with its read register; ``d_<mode>[_reg]``
    are their read data."""

    def __init__(self):
        super().__init__({"r_addr": In(range(DEPTH)), "r_en": In(1), "w_addr": In(range(DEPTH)), "w_en": In(1),
                          "w_data": In(WIDTH), "reg_en": In(1), **{_name(*v): Out(WIDTH) for v in VARIANTS}})

    def elaborate(self, platform):
        m = Module()
        for mode, reg in VARIANTS:
            u = m.submodules[_name(mode, reg)] = UltraRAM(shape=WIDTH, depth=DEPTH, mode=mode, registered=reg)
            m.d.comb += [u.r_addr.eq(self.r_addr), u.r_en.eq(self.r_en), u.w_addr.eq(self.w_addr),
                         u.w_en.eq(self.w_en), u.w_data.eq(self.w_data), getattr(self, _name(mode, reg)).eq(u.r_data)]
            if reg:
                m.d.comb += u.r_reg_en.eq(self.reg_en)
        return m


def _name(mode, registered):
    return f"d_{mode}" + ("_reg" if registered else "")


async def uram_trio_against_dict(dut):
    """cocotb: every clock, each mode's ``r_data`` equals the dict model's (seed from ``LBPIPE_SEED``)."""
    import os
    stim = _stimulus(int(os.environ.get("LBPIPE_SEED", "5")), 400)
    want = {reg: _expected(stim, reg) for reg in (False, True)}
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    for name in ("r_en", "w_en", "rst", "reg_en"):
        getattr(dut, name).value = 0
    await Timer(1, unit="ns")
    for cycle, (r_en, r_addr, w_en, w_addr, w_data, rst, reg_en) in enumerate(stim):
        dut.r_en.value, dut.r_addr.value, dut.w_en.value = r_en, r_addr, w_en
        dut.w_addr.value, dut.w_data.value, dut.rst.value, dut.reg_en.value = w_addr, w_data, rst, reg_en
        await RisingEdge(dut.clk)
        await ReadOnly()
        for mode, reg in VARIANTS:
            value, exp = getattr(dut, _name(mode, reg)).value, want[reg][cycle]
            assert value.is_resolvable, f"clock {cycle}: {_name(mode, reg)} reads {value}"
            got = int(value)
            assert got == exp, f"clock {cycle}: {_name(mode, reg)} read {got:#x}, the dict model {exp:#x}"
        await Timer(1, unit="ns")


uram_trio_against_dict = cocotb.test()(uram_trio_against_dict)


def test_icarus_three_modes_against_dict(tmp_path):
    top = _Trio()
    path = runner.write_verilog(top, name="uram_trio", ports=None, directory=tmp_path)
    # the runner compiles the URAM288_BASE model beside any Verilog that instantiates it
    runner.run_cocotb(path, toplevel="uram_trio", test_module="test_uram",
                      testcase="uram_trio_against_dict", extra_env={"LBPIPE_SEED": "5"})


# -- the LAPS PIT on UltraRAM ----------------------------------------------------------------------------------------

P64 = dict(n_entries=64, k=4, probe_rule="paper", lfsr_seed=0xACE1)


@pytest.mark.parametrize("uram, idle, backpressure", [("instance", 0.0, 0.0),
                                                      pytest.param("instance", 0.2, 0.3, marks=pytest.mark.deep),
                                                      pytest.param("infer", 0.0, 0.0, marks=pytest.mark.deep)])
def test_pit_on_uram_matches_golden(uram, idle, backpressure):
    params = dict(P64, uram=uram)
    events = pit_trace(7, 250, **params)
    assert run_rtl("laps-pit", params, events, idle=idle, backpressure=backpressure) == \
        run_golden("laps-pit", params, events)


@pytest.mark.parametrize("testcase", ["reset_mid_traffic", "reset_state"])
def test_pit_on_uram_reset(testcase):
    params = dict(P64, uram="instance")
    run_rtl("laps-pit", params, pit_trace(9, 200, **params), testcase=testcase)


def test_pit_uram_parameter_checks():
    from lbpipe.hdl.laps.pit import Pit
    with pytest.raises(ValueError, match="uram must be one of"):
        Pit(n_entries=64, k=4, uram="yes")
    with pytest.raises(ValueError, match="up to 4096"):
        Pit(n_entries=65536, k=8, uram="instance")          # 8,192-entry sub-tables


# -- Yosys: what the modes map to --------------------------------------------------------------------------------

class _Registered(wiring.Component):
    """A 2,048 x 81 table (the PIT's D at 16K entries) with its read data registered, as the blocks do: in the
    fabric, or (``"instance+oreg"``) in the UltraRAM's output register."""

    def __init__(self, mode):
        self._mode = mode
        super().__init__({"r_addr": In(11), "w_addr": In(11), "w_en": In(1), "w_data": In(WIDTH),
                          "q": Out(WIDTH)})

    def elaborate(self, platform):
        m = Module()
        oreg = self._mode == "instance+oreg"
        u = m.submodules.u = UltraRAM(shape=WIDTH, depth=2048, mode=self._mode.split("+")[0], registered=oreg)
        m.d.comb += [u.r_addr.eq(self.r_addr), u.w_addr.eq(self.w_addr), u.w_en.eq(self.w_en),
                     u.w_data.eq(self.w_data)]
        m.d[("comb" if oreg else "sync")] += self.q.eq(u.r_data)
        return m


@pytest.mark.synthesis
def test_yosys_maps_instance_and_infer_to_uram(tmp_path):
    from lbpipe.synth import synthesize
    got = {}
    for mode in ("memory", "infer", "instance+oreg"):
        r = synthesize(_Registered(mode), name="t", workdir=tmp_path / mode, uram=True, wrapped=False)
        got[mode] = (r["ramb36"], r["ramb18"], r["uram"], r["unregistered_ram"]["paths"])
    # 2,048 x 81: Yosys's cost model picks block RAM even with -uram (half of each 4K-deep URAM would be empty);
    # the attribute gives two URAM288 (72 + 9 bits wide), the read registered in the fabric
    assert got["memory"][2] == 0 and got["memory"][0] + got["memory"][1] > 0
    assert got["infer"][:3] == (0, 0, 2) and got["infer"][3] == 0
    # the register in OREG_A: no flip-flops after the UltraRAM, and its read still counts as registered
    assert got["instance+oreg"] == (0, 0, 2, 0)


def test_sweep_takes_the_pit_to_uram_where_yosys_would_not():
    from lbpipe.report import format_scale, scale_points
    # k = 8: sub-tables of 128, 512, 2,048 and 8,192 entries; 2,048 is where -uram still picks block RAM
    assert [p.get("uram") for _, p in scale_points("laps-pit")] == ["off", "off", "instance", "off"]
    row = format_scale({"laps-pit": [(16384, {"lut": 1, "uram": 56, "params": {"uram": "instance"}})]})
    assert "| `laps-pit` (uram=instance) | 16,384 | 1 |" in row
