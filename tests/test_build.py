"""``lbpipe build`` and the OpenNIC box: the box's header against the shell's, the plan's completeness and the Tcl.

The expected port list is written here from the OpenNIC shell's source (github.com/Xilinx/open-nic-shell,
``src/box_250mhz/box_250mhz.sv``, module header), not from lbpipe's generator; the plugin layout from the shell's
README ("User Plugin Integration") and ``script/build.tcl``.
"""

import json
import re
import tkinter

import pytest

from lbpipe.cli import main

# box_250mhz's parameters and defaults, as the shell declares them.
SHELL_PARAMS = [("MIN_PKT_LEN", 64), ("MAX_PKT_LEN", 1518), ("USE_PHYS_FUNC", 1), ("NUM_PHYS_FUNC", 1),
                ("NUM_CMAC_PORT", 1)]

# box_250mhz's ports in the shell's order: direction, width expression (P = NUM_PHYS_FUNC, C = NUM_CMAC_PORT), name.
SHELL_PORTS = """
input 1 s_axil_awvalid
input 32 s_axil_awaddr
output 1 s_axil_awready
input 1 s_axil_wvalid
input 32 s_axil_wdata
output 1 s_axil_wready
output 1 s_axil_bvalid
output 2 s_axil_bresp
input 1 s_axil_bready
input 1 s_axil_arvalid
input 32 s_axil_araddr
output 1 s_axil_arready
output 1 s_axil_rvalid
output 32 s_axil_rdata
output 2 s_axil_rresp
input 1 s_axil_rready
input P s_axis_qdma_h2c_tvalid
input 512*P s_axis_qdma_h2c_tdata
input 64*P s_axis_qdma_h2c_tkeep
input P s_axis_qdma_h2c_tlast
input 16*P s_axis_qdma_h2c_tuser_size
input 16*P s_axis_qdma_h2c_tuser_src
input 16*P s_axis_qdma_h2c_tuser_dst
output P s_axis_qdma_h2c_tready
output P m_axis_qdma_c2h_tvalid
output 512*P m_axis_qdma_c2h_tdata
output 64*P m_axis_qdma_c2h_tkeep
output P m_axis_qdma_c2h_tlast
output 16*P m_axis_qdma_c2h_tuser_size
output 16*P m_axis_qdma_c2h_tuser_src
output 16*P m_axis_qdma_c2h_tuser_dst
input P m_axis_qdma_c2h_tready
output C m_axis_adap_tx_250mhz_tvalid
output 512*C m_axis_adap_tx_250mhz_tdata
output 64*C m_axis_adap_tx_250mhz_tkeep
output C m_axis_adap_tx_250mhz_tlast
output 16*C m_axis_adap_tx_250mhz_tuser_size
output 16*C m_axis_adap_tx_250mhz_tuser_src
output 16*C m_axis_adap_tx_250mhz_tuser_dst
input C m_axis_adap_tx_250mhz_tready
input C s_axis_adap_rx_250mhz_tvalid
input 512*C s_axis_adap_rx_250mhz_tdata
input 64*C s_axis_adap_rx_250mhz_tkeep
input C s_axis_adap_rx_250mhz_tlast
input 16*C s_axis_adap_rx_250mhz_tuser_size
input 16*C s_axis_adap_rx_250mhz_tuser_src
input 16*C s_axis_adap_rx_250mhz_tuser_dst
output C s_axis_adap_rx_250mhz_tready
input 16 mod_rstn
output 16 mod_rst_done
input 1 box_rstn
output 1 box_rst_done
input 1 axil_aclk
input 1 axis_aclk
"""

# The plugin directory the shell's build script reads for the 250 MHz box.
SHELL_PLUGIN_LAYOUT = ["box_250mhz/user_plugin_250mhz_inst.vh", "box_250mhz/box_250mhz_address_map_inst.vh",
                       "box_250mhz/box_250mhz_address_map.v", "box_250mhz/box_250mhz_axi_crossbar.tcl",
                       "build_box_250mhz.tcl"]

PART = "xcu280-fsvh2892-2L-e"
PERIODS = {"axis_aclk": 4.0, "axil_aclk": 8.0, "cmac_clk": 1000 / 322.265625}


def shell_ports(num_phys_func=1, num_cmac_port=1):
    out = []
    for line in SHELL_PORTS.strip().splitlines():
        direction, width, name = line.split()
        out.append((direction, eval(width, {"P": num_phys_func, "C": num_cmac_port}), name))
    return out


def header_ports(text, module):
    """``(params, ports)`` of ``module`` in ANSI-style Verilog: ``[(name, default)]``, ``[(dir, width, name)]``,
    widths evaluated with every parameter at its default; ``ifdef``'d ports for other boards are dropped."""
    body = text[text.index(f"module {module}"):]
    params = [(n, int(v)) for n, v in re.findall(r"parameter\s+(?:int\s+)?(\w+)\s*=\s*(\d+)", body.split(") (")[0])]
    header = body[:body.index(");\n")]
    header = re.sub(r"`ifdef.*?`endif", "", header, flags=re.S)
    env = dict(params)
    ports = []
    for direction, rng, name in re.findall(r"\b(input|output)\s+(?:wire\s+)?(\[[^\]]*\])?\s*(\w+)", header):
        width = 1
        if rng:
            hi, lo = rng[1:-1].split(":")
            width = eval(hi, {}, env) - eval(lo, {}, env) + 1
        ports.append((direction, width, name))
    return params, ports


def amaranth_ports(text, module):
    """``{name: (dir, width)}`` of a non-ANSI module as Amaranth writes it (``input [511:0] name;``)."""
    start = text.index(f"module {module}(")
    body = text[start:text.index("endmodule", start)]
    out = {}
    for direction, rng, name in re.findall(r"^\s*(input|output)\s+(\[\d+:\d+\])?\s*(\w+);", body, flags=re.M):
        width = 1
        if rng:
            hi, lo = map(int, rng[1:-1].split(":"))
            width = hi - lo + 1
        out[name] = (direction, width)
    return out


# pro-tx-wire's box is checked the same way in the long profile (each build generates a whole pipeline's Verilog).
@pytest.fixture(scope="module", params=["themis-s-wire", pytest.param("pro-tx-wire", marks=pytest.mark.regression)])
def built(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    assert main(["build", "--board", "alveo-u280", "--shell", "opennic", request.param, "-o", str(out)]) == 0
    return request.param, out


def test_box_header_matches_the_shell(built):
    _, out = built
    params, ports = header_ports((out / "src" / "box_250mhz.v").read_text(), "box_250mhz")
    assert params == SHELL_PARAMS
    assert ports == shell_ports()


def test_user_logic_ports_are_the_box_ports(built):
    """The generated user logic carries the box's streams, AXI4-Lite and clocks under the shell's names and
    widths, one reset pair of 1 bit, and nothing else."""
    _, out = built
    got = amaranth_ports((out / "src" / "lbpipe_box_250mhz.v").read_text(), "lbpipe_box_250mhz")
    want = {name: (d, w) for d, w, name in shell_ports() if name not in ("box_rstn", "box_rst_done")}
    want["mod_rstn"], want["mod_rst_done"] = ("input", 1), ("output", 1)
    assert got == want


def test_plan_is_complete_and_consistent(built):
    pipeline, out = built
    plan = json.loads((out / "plan.json").read_text())
    assert plan["part"] == PART and plan["pipeline"] == pipeline and plan["direction"] == "tx"
    for group in plan["files"].values():
        for path in group:
            assert (out / path).is_file(), path
    # the plugin directory is what the shell's build script reads
    for path in SHELL_PLUGIN_LAYOUT:
        assert (out / "plugin" / path).is_file(), path
    # every Verilog source a script reads exists, and the tops named are modules defined in them
    tcl = TclFile(out / "plugin" / "build_box_250mhz.tcl")
    plugin_sources = [out / "plugin" / args[-1] for args in tcl.commands("read_verilog")]
    assert plugin_sources and all(p.is_file() for p in plugin_sources)
    inst = (out / "plugin" / "box_250mhz" / "user_plugin_250mhz_inst.vh").read_text()
    module = re.search(r"^\s*(\w+)\s+lbpipe_inst\s*\(", inst, flags=re.M).group(1)
    assert any(f"module {module}(" in p.read_text() for p in plugin_sources)
    for script, top, clocks in (("ooc_250mhz", "box_250mhz", {"axis_aclk": 4.0, "axil_aclk": 8.0}),
                                ("ooc_322mhz", "lbpipe_box_250mhz", {"axis_aclk": PERIODS["cmac_clk"],
                                                                     "axil_aclk": 8.0})):
        tcl = TclFile(out / "vivado" / f"{script}.tcl")
        assert tcl.value("part") == PART and tcl.value("top") == top
        sources = [out / "vivado" / args[-1] for args in tcl.commands("read_verilog")]
        assert sources and all(p.is_file() for p in sources)
        assert any(re.search(rf"^module \\?{top}\b", p.read_text(), flags=re.M) for p in sources)
        synth = tcl.commands("synth_design")[0]
        assert synth[synth.index("-top") + 1] == "$top" and synth[synth.index("-part") + 1] == "$part"
        assert "out_of_context" in synth
        for cmd in ("opt_design", "place_design", "route_design", "report_timing_summary", "report_utilization",
                    "write_checkpoint"):
            assert tcl.commands(cmd), (script, cmd)
        xdc_name = tcl.commands("read_xdc")[0][-1]
        assert xdc_periods(out / "vivado" / xdc_name) == pytest.approx(clocks, abs=0.001)
    shell = TclFile(out / "vivado" / "in_shell.tcl")
    assert shell.value("part") == PART
    runs = [args[1] for args in shell.commands("launch_runs")]
    assert runs == ["synth_1", "impl_1"]
    checks = {args[1]: float(args[2]) for args in shell.commands("lbpipe_check_clock")}
    assert checks == pytest.approx({"axis_aclk": 4.0, "cmac_clk": PERIODS["cmac_clk"]}, abs=0.001)
    assert shell.commands("report_timing_summary") and shell.commands("report_utilization")


def test_register_map_lists_the_pipeline_counters(built):
    pipeline, out = built
    text = (out / "registers.md").read_text()
    # the bridge's registers at the offsets docs/architecture.md gives, and STATUS_0 at 0x40
    for name, offset in (("ID", 0x00), ("TABLE", 0x08), ("INDEX", 0x0C), ("DATA_LO", 0x10), ("DATA_HI", 0x14),
                         ("COMMIT", 0x18), ("STATUS_0", 0x40)):
        assert re.search(rf"\| 0x{offset:03X} \| {name} \|", text), name
    counters = {"themis-s-wire": 6, "pro-tx-wire": 11}[pipeline]
    assert f"STATUS_{counters - 1} |" in text and f"STATUS_{counters} |" not in text


class TclFile:
    """A Tcl script parsed by Tcl itself: it must be complete, and its top-level commands are listed as words."""

    def __init__(self, path):
        self.tcl = tkinter.Tcl()
        self.text = path.read_text()
        assert self._complete(self.text), path
        # top-level commands: lines gathered until Tcl says the command is complete (a proc or if body spans lines)
        self.lines, pending = [], ""
        for line in self.text.splitlines():
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            pending += line + "\n"
            if self._complete(pending):
                self.lines.append(list(self.tcl.splitlist(pending.strip())))
                pending = ""
        assert not pending, pending

    def _complete(self, text):
        self.tcl.setvar("lbpipe_text", text)
        return self.tcl.eval("info complete $lbpipe_text") == "1"

    def commands(self, name):
        return [words for words in self.lines if words and words[0] == name]

    def value(self, var):
        sets = [words for words in self.commands("set") if words[1] == var]
        return sets[0][2] if sets else None


def xdc_periods(path):
    return {m.group(2): float(m.group(1)) for m in re.finditer(r"create_clock -period ([\d.]+) -name (\w+)",
                                                                 path.read_text())}


@pytest.mark.parametrize("argv, message", [
    (["build", "laps-pit"], "laps-pit has no OpenNIC box"),
    (["build", "themis-d-wire", "--direction", "rx"], "--direction for themis-d-wire must be both"),
    (["build", "--board", "alveo-u9", "themis-s-wire"], "unknown board 'alveo-u9'"),
    (["build", "--shell", "corundum", "themis-s-wire"], "unknown shell 'corundum'"),
    (["build", "no-such-pipeline"], "unknown block"),
    (["build", "pro-tx-wire", "--param", "n_qps=1"], "pro-tx-wire"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lbpipe: ") and message in err[0], err
    assert not out.exists()


def test_output_that_is_a_file_is_refused(tmp_path, capsys):
    out = tmp_path / "taken"
    out.write_text("not a directory\n")
    assert main(["build", "themis-s-wire", "-o", str(out)]) == 2
    assert "is a file; -o names a directory" in capsys.readouterr().err
    assert out.read_text() == "not a directory\n"


def test_platforms():
    from lbpipe.boards.alveo import BOARDS
    parts = {name: cls()._part for name, (cls, _) in BOARDS.items()}
    assert parts == {"alveo-u280": PART, "alveo-u250": "xcu250-figd2104-2L-e", "alveo-u55c": "xcu55c-fsvh2892-2L-e"}
    u280 = BOARDS["alveo-u280"][0]()
    assert u280.family == "ultrascaleplus"
    assert u280.default_clk_frequency == 100e6
    # QSFP0 GT reference clock on T42/T43 (the shell's constr/au280/pins.xdc), 161.1328125 MHz by default
    res = u280.resources["qsfp_refclk", 0]
    assert (res.ios[0].p.names, res.ios[0].n.names) == (["T42"], ["T43"])
    assert res.clock.frequency == pytest.approx(161.1328125e6)


# -- behaviour of the box's plumbing, on a stand-in pipeline (the pipelines have their own tests) ----------------------

def _stand_in():
    """A two-beat-deep AXI4-Stream register pipeline with ``ctl`` and ``stats``: stats word 0 counts frames, words
    1 to 3 hold the last command's table, index and data low word."""
    from amaranth import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from lbpipe.hdl.lib.axis import AXI4StreamSignature
    from lbpipe.hdl.lib.control import ControlSignature

    class StandIn(wiring.Component):
        def __init__(self):
            super().__init__({"s_axis": In(AXI4StreamSignature(data_width=512, user_width=1)),
                              "m_axis": Out(AXI4StreamSignature(data_width=512, user_width=1)),
                              "ctl": In(ControlSignature()), "stats": Out(128)})

        def elaborate(self, platform):
            m = Module()
            frames = Signal(32)
            full = Signal()
            s, o = self.s_axis, self.m_axis
            m.d.comb += [s.tready.eq(~full | o.tready), o.tvalid.eq(full), self.ctl.ready.eq(1)]
            with m.If(s.tvalid & s.tready):
                m.d.sync += [o.tdata.eq(s.tdata), o.tkeep.eq(s.tkeep), o.tlast.eq(s.tlast), full.eq(1)]
                m.d.sync += frames.eq(frames + s.tlast)
            with m.Elif(o.tready):
                m.d.sync += full.eq(0)
            with m.If(self.ctl.valid):
                m.d.sync += [self.stats[32:40].eq(self.ctl.payload.table), self.stats[64:88].eq(self.ctl.payload.index),
                             self.stats[96:128].eq(self.ctl.payload.data[:32])]
            m.d.comb += self.stats[:32].eq(frames)
            return m
    return StandIn()


def _run_box(direction, bench):
    from lbpipe.boards.opennic import Box250
    _simulate(Box250(_stand_in(), direction=direction), bench)


def _simulate(box, bench):
    """Run ``bench(ctx, ports)`` on ``box`` with the shell's two clocks."""
    from amaranth.sim import Simulator
    sim = Simulator(box)
    p = box.p

    async def clocks(ctx):
        # 250 MHz and 125 MHz, phase aligned (a rising edge of axil_aclk on every second one of axis_aclk)
        while True:
            for phase in range(4):
                ctx.set(p["axis_aclk"], phase % 2)
                ctx.set(p["axil_aclk"], phase // 2)
                await ctx.delay(2e-9)
    async def testbench(ctx):
        await bench(ctx, p)
    sim.add_process(clocks)
    sim.add_testbench(testbench)
    sim.run()


async def _edge(ctx, clk):
    await ctx.changed(clk)
    while not ctx.get(clk):
        await ctx.changed(clk)


async def _cycle(ctx, clk, *signals):
    """Wait for the next rising edge of ``clk``; return ``signals`` as they were just before it (what the edge
    samples: a handshake happens on it when valid and ready were both high then)."""
    while ctx.get(clk):
        await ctx.changed(clk)
    values = [ctx.get(s) for s in signals]
    await _edge(ctx, clk)
    return values


async def _axil_write(ctx, p, addr, value, limit=3000):
    """One AXI4-Lite write; the response may wait (a pipeline clearing its tables after reset takes commands late)."""
    clk = p["axil_aclk"]
    ctx.set(p["s_axil_awvalid"], 1); ctx.set(p["s_axil_awaddr"], addr)
    ctx.set(p["s_axil_wvalid"], 1); ctx.set(p["s_axil_wdata"], value); ctx.set(p["s_axil_bready"], 1)
    for _ in range(limit):
        awready, wready, bvalid = await _cycle(ctx, clk, p["s_axil_awready"], p["s_axil_wready"],
                                               p["s_axil_bvalid"])
        if awready:
            ctx.set(p["s_axil_awvalid"], 0)
        if wready:
            ctx.set(p["s_axil_wvalid"], 0)
        if bvalid:
            ctx.set(p["s_axil_bready"], 0)
            return
    raise AssertionError(f"no write response for {addr:#x}")


async def _axil_read(ctx, p, addr):
    clk = p["axil_aclk"]
    ctx.set(p["s_axil_arvalid"], 1); ctx.set(p["s_axil_araddr"], addr); ctx.set(p["s_axil_rready"], 1)
    for _ in range(100):
        arready, rvalid, rdata = await _cycle(ctx, clk, p["s_axil_arready"], p["s_axil_rvalid"], p["s_axil_rdata"])
        if arready:
            ctx.set(p["s_axil_arvalid"], 0)
        if rvalid:
            ctx.set(p["s_axil_rready"], 0)
            return rdata
    raise AssertionError(f"no read data for {addr:#x}")


# Two frames: 100 bytes (2 beats) and 64 bytes (1 beat), with the tuser the shell's QDMA would give them.
FRAMES = [(bytes(range(100)), 100, 0x0001), (bytes(range(64, 128)), 64, 0x0001)]


async def _send_and_collect(ctx, p, into, out, frames):
    """Offer ``frames`` on ``into`` beat by beat (axis_aclk) while taking beats from ``out``; return the frames
    out as ``(bytes, tuser_size, tuser_src, tuser_dst)``, tuser read on every beat and required to hold."""
    clk = p["axis_aclk"]
    beats = []
    for data, size, src in frames:
        for k in range(0, len(data), 64):
            chunk = data[k:k + 64]
            beats.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, k + 64 >= len(data), size, src))
    got, cur, tusers = [], b"", set()
    ctx.set(p[f"{out}_tready"], 1)
    for _ in range(400):
        if beats:
            tdata, tkeep, tlast, size, src = beats[0]
            ctx.set(p[f"{into}_tvalid"], 1); ctx.set(p[f"{into}_tdata"], tdata); ctx.set(p[f"{into}_tkeep"], tkeep)
            ctx.set(p[f"{into}_tlast"], tlast); ctx.set(p[f"{into}_tuser_size"], size)
            ctx.set(p[f"{into}_tuser_src"], src); ctx.set(p[f"{into}_tuser_dst"], 0)
        else:
            ctx.set(p[f"{into}_tvalid"], 0)
        inready, valid, keep, tdata, last, size, src, dst = await _cycle(
            ctx, clk, p[f"{into}_tready"], p[f"{out}_tvalid"], p[f"{out}_tkeep"], p[f"{out}_tdata"],
            p[f"{out}_tlast"], p[f"{out}_tuser_size"], p[f"{out}_tuser_src"], p[f"{out}_tuser_dst"])
        if beats and inready:
            beats.pop(0)
        if valid:
            cur += tdata.to_bytes(64, "little")[:bin(keep).count("1")]
            tusers.add((size, src, dst))
            if last:
                assert len(tusers) == 1, tusers
                got.append((cur, *tusers.pop()))
                cur = b""
        if len(got) == len(frames):
            break
    ctx.set(p[f"{into}_tvalid"], 0)
    return got


@pytest.mark.parametrize("direction", ["tx", "rx"])
def test_box_moves_frames_and_commands(direction):
    """Frames go through the pipeline in ``direction`` and through wires in the other, each leaving with its
    tuser_size and tuser_src and the shell's tuser_dst (CMAC port 0 is bit 6, PCIe function 0 bit 0: shell README,
    "Shell Interface"); a command written over AXI4-Lite at 125 MHz reaches the pipeline at 250 MHz once, and its
    counters read back at 125 MHz; mod_rst_done follows mod_rstn."""
    h2c, tx, rx, c2h = "s_axis_qdma_h2c", "m_axis_adap_tx_250mhz", "s_axis_adap_rx_250mhz", "m_axis_qdma_c2h"
    seen = {}

    async def bench(ctx, p):
        ctx.set(p["mod_rstn"], 0)
        for _ in range(4):
            await _edge(ctx, p["axil_aclk"])
        assert ctx.get(p["mod_rst_done"]) == 0
        ctx.set(p["mod_rstn"], 1)
        for _ in range(24):
            await _edge(ctx, p["axil_aclk"])
        assert ctx.get(p["mod_rst_done"]) == 1
        assert await _axil_read(ctx, p, 0x000) == int.from_bytes(b"LBP1", "big")
        # TABLE 5, INDEX 0x123456, DATA_LO 0xCAFEF00D, COMMIT
        for addr, value in ((0x08, 5), (0x0C, 0x123456), (0x10, 0xCAFEF00D), (0x18, 1)):
            await _axil_write(ctx, p, addr, value)
        seen["ctl"] = [await _axil_read(ctx, p, 0x40 + 4 * i) for i in (1, 2, 3)]
        # the 4 KB window repeats: the same register 0x1000 higher, in the box's system window
        seen["alias"] = await _axil_read(ctx, p, 0x41000 + 0x4C)
        seen["tx"] = await _send_and_collect(ctx, p, h2c, tx, FRAMES)
        seen["rx"] = await _send_and_collect(ctx, p, rx, c2h, FRAMES)
        for _ in range(4):
            await _edge(ctx, p["axil_aclk"])
        seen["frames"] = await _axil_read(ctx, p, 0x40)

    _run_box(direction, bench)
    assert seen["ctl"] == [5, 0x123456, 0xCAFEF00D]
    assert seen["alias"] == 0xCAFEF00D
    assert seen["tx"] == [(data, size, src, 1 << 6) for data, size, src in FRAMES]
    assert seen["rx"] == [(data, size, src, 1 << 0) for data, size, src in FRAMES]
    assert seen["frames"] == len(FRAMES)  # only the pipeline's direction passed through the stand-in
