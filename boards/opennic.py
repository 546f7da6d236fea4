"""OpenNIC shell user box: an lbpipe packet pipeline in the shell's 250 MHz box, the other direction passed through.

The shell (github.com/Xilinx/open-nic-shell) instantiates two user boxes, ``box_250mhz`` and ``box_322mhz``, whose
module headers live in the shell (``src/box_XXXmhz/box_XXXmhz.sv``) and whose contents come from a user plugin
directory: ``box_XXXmhz/user_plugin_XXXmhz_inst.vh`` (included inside the box, instantiates the user logic),
``box_XXXmhz/box_XXXmhz_address_map_inst.vh`` and ``box_XXXmhz_address_map.v`` (register routing),
``box_XXXmhz/box_XXXmhz_axi_crossbar.tcl`` (the IP the address map uses) and ``build_box_XXXmhz.tcl`` (reads the
user sources). This module generates:

* ``lbpipe_box_250mhz`` (:class:`Box250`, Amaranth): the user logic. Its ports are the box's own, named and sized
  as the shell's ``box_250mhz`` with one PCIe function and one CMAC port (``NUM_PHYS_FUNC = NUM_CMAC_PORT = 1``):
  AXI4-Lite ``s_axil_*`` (32-bit addresses, no ``wstrb``/``*prot``, as the shell has them), the QDMA streams
  ``s_axis_qdma_h2c_*`` and ``m_axis_qdma_c2h_*``, the CMAC adapter streams ``m_axis_adap_tx_250mhz_*`` and
  ``s_axis_adap_rx_250mhz_*`` (512-bit ``tdata``, 64-bit ``tkeep``, ``tlast``, ``tuser_size``/``tuser_src``/
  ``tuser_dst`` of 16 bits each), one reset pair ``mod_rstn``/``mod_rst_done`` and the clocks ``axil_aclk``
  (125 MHz) and ``axis_aclk`` (250 MHz).
* :func:`box_250mhz_verilog`: a stand-alone ``box_250mhz`` with the shell's exact module header (name, the five
  parameters, every port), wrapping ``lbpipe_box_250mhz``, for out-of-context synthesis and lint without the shell.
* :func:`plugin_files`: the plugin directory the shell's ``script/build.tcl`` reads (``-user_plugin DIR``).

Choices (docs/nic_build.md says them to users):

* **Direction.** The sender-side pipelines (``themis-s-wire``, ``pro-tx-wire``) rewrite frames the host sends:
  they sit between the QDMA's H2C stream and the CMAC adapter's TX stream. ``rx`` puts a pipeline between the
  adapter's RX stream and the QDMA's C2H stream. The other direction passes through as wires.
* **tuser.** The pipelines keep frames one to one and their size, so each frame's ``tuser_size`` and
  ``tuser_src`` are taken at its first beat into a side FIFO and given back on its beats out; ``tuser_dst`` is set
  as the shell's p2p plugin sets it (``1 << 6`` for CMAC port 0 on TX, ``1`` for PCIe function 0 on C2H). The
  pipeline's own ``tuser`` bit (a frame sent bad, cut-through) has no field on the 250 MHz interface; such frames
  are counted in the pipeline's STATUS words.
* **Clocks.** The shell's 125 MHz AXI4-Lite clock and 250 MHz stream clock are phase aligned (shell README,
  "Shell Interface"). The control bridge runs at 125 MHz; committed commands cross to 250 MHz through a 4-entry
  asynchronous FIFO (which counts once per command whatever the clock ratio); the pipeline's counters are
  registered at 250 MHz and read at 125 MHz as an ordinary timed path between the two related clocks.
* **Addresses.** The bridge decodes the low 12 bits of the box's 32-bit address, so its registers repeat every
  4 KB across the box's window (system addresses 0x40000 to 0xFFFFF) whether or not the shell's address map
  subtracts the window's base.
* **Reset.** ``mod_rstn`` low resets both domains (synchronised into each); ``mod_rst_done`` rises 16 cycles of
  ``axil_aclk`` after it is released. The other 15 ``mod_rst_done`` bits of the box read 1, as the shell asks of
  unused reset pairs.
"""

from amaranth import ClockDomain, ClockSignal, DomainRenamer, Elaboratable, Module, Shape, Signal
from amaranth.lib import data, fifo
from amaranth.lib.cdc import ResetSynchronizer

from lbpipe.hdl.lib.axil import ControlBridge
from lbpipe.hdl.lib.fifo import StreamFIFO

__all__ = ["Box250", "DIRECTIONS", "PLACEMENT", "BOX_250MHZ_PARAMS", "box_250mhz_ports", "box_250mhz_verilog",
           "plugin_files", "register_map", "MODULE", "TUSER_DST_CMAC0", "TUSER_DST_PF0"]

#: Module name of the generated user logic.
MODULE = "lbpipe_box_250mhz"

DIRECTIONS = ("tx", "rx")

#: Where each shell-ready pipeline goes: tx = QDMA H2C -> pipeline -> CMAC TX; rx = CMAC RX -> pipeline -> QDMA C2H.
#: themis-d-wire takes both directions of a port on one stream (data towards the NIC, the NIC's NACKs from it)
#: and adds and drops frames; its box (a merge of RX and H2C, a split of its output) is not built yet.
PLACEMENT = {"themis-s-wire": "tx", "pro-tx-wire": "tx"}

#: ``tuser_dst`` of frames the box sends: CMAC port 0 (bit 6 up: MAC ports), PCIe function 0 (bits 3:0).
TUSER_DST_CMAC0 = 1 << 6
TUSER_DST_PF0 = 1 << 0

#: The shell's box_250mhz parameters and their defaults.
BOX_250MHZ_PARAMS = (("MIN_PKT_LEN", 64), ("MAX_PKT_LEN", 1518), ("USE_PHYS_FUNC", 1), ("NUM_PHYS_FUNC", 1),
                     ("NUM_CMAC_PORT", 1))

#: Frames in flight the tuser side FIFO covers (a pipeline holds at most its buffer's beats plus its latency).
SIDE_DEPTH = 512

_AXIL = (("awvalid", "i", 1), ("awaddr", "i", 32), ("awready", "o", 1), ("wvalid", "i", 1), ("wdata", "i", 32),
         ("wready", "o", 1), ("bvalid", "o", 1), ("bresp", "o", 2), ("bready", "i", 1), ("arvalid", "i", 1),
         ("araddr", "i", 32), ("arready", "o", 1), ("rvalid", "o", 1), ("rdata", "o", 32), ("rresp", "o", 2),
         ("rready", "i", 1))
_AXIS = (("tvalid", 1), ("tdata", 512), ("tkeep", 64), ("tlast", 1), ("tuser_size", 16), ("tuser_src", 16),
         ("tuser_dst", 16), ("tready", 1))
#: The four streams: name, True when the box receives it.
_STREAMS = (("s_axis_qdma_h2c", True), ("m_axis_qdma_c2h", False), ("m_axis_adap_tx_250mhz", False),
            ("s_axis_adap_rx_250mhz", True))


def box_250mhz_ports():
    """``[(name, "i"|"o", width)]`` of :data:`MODULE` in order (one PCIe function, one CMAC port)."""
    ports = [(f"s_axil_{name}", d, w) for name, d, w in _AXIL]
    for stream, inbound in _STREAMS:
        for member, width in _AXIS:
            to_box = inbound != (member == "tready")
            ports.append((f"{stream}_{member}", "i" if to_box else "o", width))
    ports += [("mod_rstn", "i", 1), ("mod_rst_done", "o", 1), ("axil_aclk", "i", 1), ("axis_aclk", "i", 1)]
    return ports


def _pipeline_ports(block):
    members = block.signature.members
    for port in ("s_axis", "m_axis", "ctl"):
        if port not in members:
            raise TypeError(f"{block!r} has no {port!r} port: the box takes an AXI4-Stream pipeline with ctl")
    return members


class Box250(Elaboratable):
    """The user logic of the 250 MHz box around one packet pipeline (see the module docstring).

    Parameters
    ----------
    block : wiring.Component
        A pipeline with ``s_axis``/``m_axis`` (512-bit AXI4-Stream), ``ctl`` and optionally ``stats``.
    direction : str
        ``"tx"`` or ``"rx"``.
    """

    def __init__(self, block, *, direction="tx"):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        members = _pipeline_ports(block)
        width = Shape.cast(members["s_axis"].signature.members["tdata"].shape).width
        if width != 512:
            raise ValueError(f"the shell's streams are 512 bits wide; the pipeline's are {width}")
        self.block = block
        self.direction = direction
        self.n_status = Shape.cast(members["stats"].shape).width // 32 if "stats" in members else 0
        self.bridge = ControlBridge(addr_width=12, status_words=self.n_status)
        self.p = {name: Signal(width, name=name) for name, _, width in box_250mhz_ports()}

    def ports(self):
        return list(self.p.values())

    def elaborate(self, platform):
        m = Module()
        self._clocks_and_resets(m)
        self._control(m)
        into, out = (("s_axis_qdma_h2c", "m_axis_adap_tx_250mhz") if self.direction == "tx"
                     else ("s_axis_adap_rx_250mhz", "m_axis_qdma_c2h"))
        by, to = (("s_axis_adap_rx_250mhz", "m_axis_qdma_c2h") if self.direction == "tx"
                  else ("s_axis_qdma_h2c", "m_axis_adap_tx_250mhz"))
        self._pipeline(m, into, out)
        self._pass_through(m, by, to)
        return m

    def _dst(self, out):
        return TUSER_DST_CMAC0 if out == "m_axis_adap_tx_250mhz" else TUSER_DST_PF0

    def _clocks_and_resets(self, m):
        """Two domains: ``sync`` on ``axis_aclk`` (the pipeline), ``axil`` on ``axil_aclk`` (the bridge), each reset
        by ``mod_rstn`` through its own synchroniser; ``mod_rst_done`` a counter in ``axil``."""
        p = self.p
        m.domains.sync = ClockDomain("sync")
        m.domains.axil = ClockDomain("axil")
        m.d.comb += [ClockSignal("sync").eq(p["axis_aclk"]), ClockSignal("axil").eq(p["axil_aclk"])]
        m.submodules.rst_sync = ResetSynchronizer(~p["mod_rstn"], domain="sync")
        m.submodules.rst_axil = ResetSynchronizer(~p["mod_rstn"], domain="axil")
        count = Signal(5)
        with m.If(~count[4]):
            m.d.axil += count.eq(count + 1)
        m.d.comb += p["mod_rst_done"].eq(count[4])

    def _control(self, m):
        """The AXI4-Lite bridge at 125 MHz, its commands through an asynchronous FIFO to the pipeline's ``ctl``,
        the pipeline's counters registered at 250 MHz for the bridge's STATUS words."""
        p, block = self.p, self.block
        m.submodules.bridge = bridge = DomainRenamer("axil")(self.bridge)
        axil = bridge.axil
        for name, direction, _ in _AXIL:
            port = p[f"s_axil_{name}"]
            ours = getattr(axil, name)
            if direction == "i":
                m.d.comb += ours.eq(port[:len(ours)])
            else:
                m.d.comb += port.eq(ours)
        m.d.comb += [axil.wstrb.eq(0b1111), axil.awprot.eq(0), axil.arprot.eq(0)]
        width = Shape.cast(block.ctl.payload.shape()).width
        m.submodules.ctl_cdc = cdc = fifo.AsyncFIFO(width=width, depth=4, w_domain="axil", r_domain="sync")
        m.d.comb += [
            cdc.w_data.eq(bridge.ctl.payload.as_value()), cdc.w_en.eq(bridge.ctl.valid),
            bridge.ctl.ready.eq(cdc.w_rdy),
            block.ctl.payload.as_value().eq(cdc.r_data), block.ctl.valid.eq(cdc.r_rdy), cdc.r_en.eq(block.ctl.ready),
        ]
        if self.n_status:
            stats = Signal(32 * self.n_status)
            m.d.sync += stats.eq(block.stats)
            for i in range(self.n_status):
                m.d.comb += bridge.status[i].eq(stats.word_select(i, 32))

    def _pipeline(self, m, into, out):
        """``into`` -> pipeline -> ``out``; each frame's ``tuser_size``/``tuser_src`` wait in a side FIFO from its
        first beat in to its last beat out."""
        p, block = self.p, self.block
        m.submodules.block = block
        side_layout = data.StructLayout({"size": 16, "src": 16})
        m.submodules.side = side = StreamFIFO(shape=side_layout, depth=SIDE_DEPTH)
        first = Signal(init=1)
        s, o = block.s_axis, block.m_axis
        # A frame enters only when its first beat can leave its tuser in the side FIFO.
        room = side.i.ready | ~first
        m.d.comb += [
            s.tdata.eq(p[f"{into}_tdata"]), s.tkeep.eq(p[f"{into}_tkeep"]), s.tlast.eq(p[f"{into}_tlast"]),
            s.tuser.eq(0), s.tvalid.eq(p[f"{into}_tvalid"] & room),
            p[f"{into}_tready"].eq(s.tready & room),
            side.i.valid.eq(p[f"{into}_tvalid"] & first & s.tready),
            side.i.payload.size.eq(p[f"{into}_tuser_size"]), side.i.payload.src.eq(p[f"{into}_tuser_src"]),
        ]
        with m.If(s.tvalid & s.tready):
            m.d.sync += first.eq(s.tlast)
        m.d.comb += [
            p[f"{out}_tdata"].eq(o.tdata), p[f"{out}_tkeep"].eq(o.tkeep), p[f"{out}_tlast"].eq(o.tlast),
            p[f"{out}_tvalid"].eq(o.tvalid & side.o.valid),
            o.tready.eq(p[f"{out}_tready"] & side.o.valid),
            p[f"{out}_tuser_size"].eq(side.o.payload.size), p[f"{out}_tuser_src"].eq(side.o.payload.src),
            p[f"{out}_tuser_dst"].eq(self._dst(out)),
            side.o.ready.eq(o.tvalid & o.tready & o.tlast),
        ]

    def _pass_through(self, m, by, to):
        p = self.p
        for member in ("tvalid", "tdata", "tkeep", "tlast", "tuser_size", "tuser_src"):
            m.d.comb += p[f"{to}_{member}"].eq(p[f"{by}_{member}"])
        m.d.comb += [p[f"{to}_tuser_dst"].eq(self._dst(to)), p[f"{by}_tready"].eq(p[f"{to}_tready"])]


def _decl(direction, width, name, indent="  "):
    kind = "input " if direction == "i" else "output"
    rng = f"[{width}]" if isinstance(width, str) else (f"[{width - 1}:0]" if width > 1 else "")
    return f"{indent}{kind} {rng:>24} {name}"


def _header_ports():
    """The shell's box_250mhz port list: ``(direction, width or width expression, name)`` in its order."""
    ports = [("i" if d == "i" else "o", w, f"s_axil_{n}") for n, d, w in _AXIL]
    for stream, inbound in _STREAMS:
        count = "NUM_PHYS_FUNC" if "qdma" in stream else "NUM_CMAC_PORT"
        for member, width in _AXIS:
            to_box = inbound != (member == "tready")
            expr = f"{count}-1:0" if width == 1 else f"{width}*{count}-1:0"
            ports.append(("i" if to_box else "o", expr, f"{stream}_{member}"))
    ports += [("i", 16, "mod_rstn"), ("o", 16, "mod_rst_done"), ("i", 1, "box_rstn"), ("o", 1, "box_rst_done"),
              ("i", 1, "axil_aclk")]
    return ports


def _instance(indent="  "):
    """The instantiation of :data:`MODULE` inside a box_250mhz (the box's own names in scope)."""
    lines = [f"{indent}{MODULE} lbpipe_inst ("]
    conns = []
    for name, _, width in box_250mhz_ports():
        if name == "mod_rstn":
            conns.append(f".mod_rstn ({'lbpipe_rstn'})")
        elif name == "mod_rst_done":
            conns.append(".mod_rst_done (lbpipe_rst_done)")
        else:
            conns.append(f".{name} ({name})")
    lines += [f"{indent}  {c}," for c in conns[:-1]] + [f"{indent}  {conns[-1]}", f"{indent});"]
    return "\n".join(lines)


def _body(rstn, rst_done_lines):
    return "\n".join([
        "  // lbpipe: one PCIe function and one CMAC port (the shell's defaults); other counts stop elaboration.",
        "  generate if (USE_PHYS_FUNC != 1 || NUM_PHYS_FUNC != 1 || NUM_CMAC_PORT != 1) begin : lbpipe_unsupported",
        "    lbpipe_box_needs_one_function_and_one_port unsupported_configuration ();",
        "  end endgenerate",
        "",
        "  wire lbpipe_rstn = " + rstn + ";",
        "  wire lbpipe_rst_done;",
        *rst_done_lines,
        "",
        _instance(),
    ])


def user_plugin_inst():
    """``user_plugin_250mhz_inst.vh``: included inside the shell's box_250mhz."""
    return ("// Generated by lbpipe (boards/opennic.py): the lbpipe pipeline in the shell's 250 MHz box.\n"
            + _body("mod_rstn[0]", ["  assign mod_rst_done = {15'h7fff, lbpipe_rst_done};"]) + "\n")


def box_250mhz_verilog():
    """A stand-alone ``box_250mhz`` with the shell's module header, for out-of-context builds and lint."""
    params = ",\n".join(f"  parameter {name} = {value}" for name, value in BOX_250MHZ_PARAMS)
    decls = [_decl(d, w, n) for d, w, n in _header_ports()]
    ifdef = ["`ifdef __au55n__", "  input                          ref_clk_100mhz,",
             "`elsif __au55c__", "  input                          ref_clk_100mhz,", "`endif",
             "  input                          axis_aclk"]
    unused = ["  // MIN_PKT_LEN, MAX_PKT_LEN, box_rstn's upper use and mod_rstn[15:1] are the shell's; the box reads",
              "  // mod_rstn[0] and box_rstn only."]
    return "\n".join([
        "// Generated by lbpipe (boards/opennic.py): box_250mhz with the OpenNIC shell's module header, wrapping",
        f"// {MODULE}. Out-of-context builds and lint use it; inside the shell, the shell's own box_250mhz includes",
        "// user_plugin_250mhz_inst.vh instead.",
        "`timescale 1ns/1ps",
        "module box_250mhz #(",
        params,
        ") (",
        ",\n".join(decls) + ",",
        *ifdef,
        ");",
        *unused,
        _body("mod_rstn[0] & box_rstn", ["  assign mod_rst_done = {15'h7fff, lbpipe_rst_done};",
                                         "  assign box_rst_done = lbpipe_rst_done;"]),
        "",
        "endmodule",
        "",
    ])


def address_map_inst():
    return ("// Generated by lbpipe: the box has one AXI4-Lite subordinate (the lbpipe control bridge), so the box's\n"
            "// AXI4-Lite port goes to it directly and no address map module is instantiated.\n")


def address_map_module():
    return ("// Generated by lbpipe: the shell's build script reads this file for every box; lbpipe's box needs no\n"
            "// address map (one subordinate), so the module is an empty placeholder that nothing instantiates.\n"
            "`timescale 1ns/1ps\nmodule box_250mhz_address_map ();\nendmodule\n")


def axi_crossbar_tcl():
    return ("# Generated by lbpipe: the shell's build script sources this file for every box. lbpipe's box has one\n"
            "# AXI4-Lite subordinate and needs no crossbar IP, so nothing is created here.\n")


def build_box_tcl(sources):
    lines = ["# Generated by lbpipe: read the lbpipe box sources (the shell sources this from the plugin directory).",
             *(f"read_verilog -quiet {src}" for src in sources)]
    return "\n".join(lines) + "\n"


def plugin_files(core_file):
    """``{relative path: text}`` of the plugin directory, ``core_file`` being the generated Verilog's file name
    (placed beside ``build_box_250mhz.tcl``). The 322 MHz box is left to the shell's default (p2p): the shell uses
    its own plugin for a box whose directory or build script is absent."""
    return {
        "box_250mhz/user_plugin_250mhz_inst.vh": user_plugin_inst(),
        "box_250mhz/box_250mhz_address_map_inst.vh": address_map_inst(),
        "box_250mhz/box_250mhz_address_map.v": address_map_module(),
        "box_250mhz/box_250mhz_axi_crossbar.tcl": axi_crossbar_tcl(),
        "build_box_250mhz.tcl": build_box_tcl([core_file]),
    }


def register_map(block_name, n_status, doc):
    """Markdown register map of the box: the control bridge's registers and the pipeline's STATUS words."""
    b = ControlBridge
    rows = [("ID", b.ID_ADDR, "RO", "0x4C425031 (\"LBP1\")"),
            ("STATUS", b.STATUS_ADDR, "RO", "bit 0 PENDING: a committed command has not reached the pipeline"),
            ("TABLE", b.TABLE_ADDR, "RW", "bits 7:0 table number"),
            ("INDEX", b.INDEX_ADDR, "RW", "bits 23:0 entry index"),
            ("DATA_LO", b.DATA_LO_ADDR, "RW", "command data bits 31:0"),
            ("DATA_HI", b.DATA_HI_ADDR, "RW", "command data bits 63:32"),
            ("COMMIT", b.COMMIT_ADDR, "WO", "any write sends {TABLE, INDEX, DATA} to the pipeline; the write "
                                            "response waits until the command is in the crossing FIFO")]
    rows += [(f"STATUS_{i}", b.STATUS_BASE_ADDR + 4 * i, "RO", f"{block_name} counter {i} (see {doc})")
             for i in range(n_status)]
    lines = [f"# {MODULE}: register map ({block_name})", "",
             "Byte offsets within the 250 MHz box's AXI4-Lite window (the low 12 address bits are decoded, so the "
             "map repeats every 4 KB). Unmapped offsets read 0; every response is OKAY. Table numbers and the "
             f"meaning of each counter: {doc}.", "",
             "| offset | name | access | contents |", "|---|---|---|---|"]
    lines += [f"| 0x{addr:03X} | {name} | {acc} | {text} |" for name, addr, acc, text in rows]
    return "\n".join(lines) + "\n"
