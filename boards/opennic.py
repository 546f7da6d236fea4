"""OpenNIC shell user box: an lbpipe packet pipeline in the shell's 250 MHz box, the other traffic passed through.

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

* **Direction** (:data:`PLACEMENT`). The sender-side pipelines (``themis-s-wire``, ``pro-tx-wire``,
  ``laps-tx-wire``) rewrite frames the host sends: QDMA H2C -> pipeline -> CMAC TX. The receivers
  (``laps-rx-wire``, ``pro-rx-wire``): CMAC RX -> pipeline -> QDMA C2H, and the frames they make for the network
  (``m_ack``, ``m_axis_nak``) merged with the host's H2C frames, a whole frame at a time (:class:`FrameMerge`),
  into CMAC TX. ``themis-d-wire`` takes both directions of the port on one stream: RX and H2C are merged into it,
  each frame tagged on ``tuser`` bit 0 (:data:`TAG_FROM_HOST`), and each output beat steered by that bit (the
  pipeline carries ``tuser`` bit for bit; a compensation NACK carries the tag of the NACK it repeats): by tag, not
  by frame type, since a host sends and receives both data and ACKs/NACKs on the port. Otherwise the other
  direction passes through as wires. Other input streams (``upd`` of laps-tx-wire, ``tmo`` of pro-rx-wire) are
  tied idle, other output streams (``upd``, ``loss`` of laps-rx-wire) taken and dropped, ``now`` a nanosecond
  counter (4 a cycle) from reset.
* **tuser.** Pipelines that keep frames one to one and their size (:data:`KEEPS_FRAMES`) have each frame's
  ``tuser_size`` and ``tuser_src`` taken at its first beat into a side FIFO and given back on its beats out. For
  the others the length is counted on the way out, as each side of the shell reads it: towards CMAC TX the adapter
  reads ``tuser_size`` on the last beat only (:class:`TxSizer`: bytes so far, one register stage); towards C2H the
  QDMA takes it as the frame's length on every beat (:class:`C2hSizer`: store-and-forward). ``tuser_dst`` is set
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

from amaranth import Cat, ClockDomain, ClockSignal, DomainRenamer, Elaboratable, Module, Mux, Shape, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axil import ControlBridge
from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.fifo import StreamFIFO

__all__ = ["Box250", "DIRECTIONS", "PLACEMENT", "KEEPS_FRAMES", "NET_OUTPUTS", "FrameMerge", "TxSizer", "C2hSizer",
           "TAG_FROM_HOST", "BOX_250MHZ_PARAMS", "box_250mhz_ports", "box_250mhz_verilog",
           "plugin_files", "register_map", "MODULE", "TUSER_DST_CMAC0", "TUSER_DST_PF0"]

#: Module name of the generated user logic.
MODULE = "lbpipe_box_250mhz"

DIRECTIONS = ("tx", "rx", "both")

#: Where each shell-ready pipeline goes: tx = QDMA H2C -> pipeline -> CMAC TX; rx = CMAC RX -> pipeline -> QDMA C2H;
#: both = the port's two directions merged into the pipeline, its output steered back by a per-frame tag
#: (themis-d-wire, docs/nic_build.md).
PLACEMENT = {"themis-s-wire": "tx", "pro-tx-wire": "tx", "laps-tx-wire": "tx", "laps-rx-wire": "rx",
             "pro-rx-wire": "rx", "themis-d-wire": "both"}

#: Pipelines that keep frames one to one and keep their length: each frame's tuser rides a side FIFO beside them.
#: The others' frames get their tuser_size computed on the way out (:class:`TxSizer`, :class:`C2hSizer`).
KEEPS_FRAMES = ("themis-s-wire", "pro-tx-wire", "pro-rx-wire")

#: The pipeline outputs that carry frames the pipeline makes towards the network (merged into CMAC TX).
NET_OUTPUTS = ("m_ack", "m_axis_nak")

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


#: themis-d-wire's box: ``tuser`` bit 0 of a frame taken from the host (QDMA H2C); 0 for one from the network.
TAG_FROM_HOST = 1

#: Beats a :class:`C2hSizer` holds: a frame up to this many beats (4,096 bytes, the shell's MAX_PKT_LEN is 1,518)
#: leaves whole; a longer one is cut to this many beats.
C2H_DEPTH = 64

_AXIS512 = AXI4StreamSignature(data_width=512, user_width=1)


def _beat_bytes(keep):
    """``(low, full)``: the bytes of a beat modulo 64 and whether it has all 64, for a ``tkeep`` that is a run of
    ones from bit 0 (the AXI4-Stream convention of lbpipe and of the shell: every beat but a frame's last is full).
    The run's end is found by a one-hot (``keep[i] & ~keep[i+1]``) and encoded by OR trees: three logic levels,
    where an adder tree over the 64 bits and the add after it took ten (Yosys, xcup)."""
    n = len(keep)
    ends = [keep[i] & ~keep[i + 1] for i in range(n - 1)]
    bits = []
    for b in range(6):
        terms = [ends[i] for i in range(n - 1) if ((i + 1) >> b) & 1]
        bit = terms[0]
        for t in terms[1:]:
            bit = bit | t
        bits.append(bit)
    return Cat(*bits), keep[n - 1]


class FrameMerge(wiring.Component):
    """Two AXI4-Streams into one, a whole frame at a time, round robin between frames.

    When no frame is under way, the input that was not served last wins if both offer a beat, otherwise the one
    that offers; the grant then holds until that frame's ``tlast`` passes, so frames are never interleaved. The
    choice is combinational (no register on the path): a beat leaves in the cycle it is offered, one beat per
    clock with no gap between frames, and a frame waits at most one frame of the other input.

    Members
    -------
    a, b : In(AXI4StreamSignature(512, 1))
    o : Out(AXI4StreamSignature(512, 1))
    """

    def __init__(self):
        super().__init__({"a": In(_AXIS512), "b": In(_AXIS512), "o": Out(_AXIS512)})

    def elaborate(self, platform):
        m = Module()
        a, b, o = self.a, self.b, self.o
        busy = Signal()
        held = Signal()          # the input granted for the frame under way (0 = a)
        last = Signal()          # the input that sent the last whole frame
        pick = Signal()
        m.d.comb += pick.eq(Mux(busy, held, Mux(last, ~a.tvalid, b.tvalid)))
        for member in ("tvalid", "tdata", "tkeep", "tlast", "tuser"):
            m.d.comb += getattr(o, member).eq(Mux(pick, getattr(b, member), getattr(a, member)))
        m.d.comb += [a.tready.eq(o.tready & ~pick), b.tready.eq(o.tready & pick)]
        with m.If(o.tvalid & o.tready):
            m.d.sync += [busy.eq(~o.tlast), held.eq(pick)]
            with m.If(o.tlast):
                m.d.sync += last.eq(pick)
        return m


class TxSizer(wiring.Component):
    """A register stage that gives each beat the frame's bytes so far, for the CMAC adapter's ``tuser_size``.

    The shell's TX adapter reads ``tuser_size`` on a frame's last beat only (its low 6 bits, when not 0, replace
    that beat's ``tkeep``; the whole value is its byte counter), so the count of bytes up to and including the beat,
    exact on the last beat, is all it needs; the frame streams through (one cycle, one beat per clock).

    Members
    -------
    i : In(AXI4StreamSignature(512, 1))
    o : Out(AXI4StreamSignature(512, 1))
    size : Out(16)
        With ``o``: bytes of ``o``'s frame up to and including the offered beat.
    """

    def __init__(self):
        super().__init__({"i": In(_AXIS512), "o": Out(_AXIS512), "size": Out(16)})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        beats = Signal(10)          # full beats of the frame before this one
        low, full = _beat_bytes(i.tkeep)
        m.d.comb += i.tready.eq(~o.tvalid | o.tready)
        with m.If(i.tvalid & i.tready):
            m.d.sync += [o.tvalid.eq(1), o.tdata.eq(i.tdata), o.tkeep.eq(i.tkeep), o.tlast.eq(i.tlast),
                         o.tuser.eq(i.tuser), self.size.eq(Cat(low, beats + full)),
                         beats.eq(Mux(i.tlast, 0, beats + 1))]
        with m.Elif(o.tready):
            m.d.sync += o.tvalid.eq(0)
        return m


class C2hSizer(wiring.Component):
    """Store-and-forward: each frame leaves with its exact length, for the QDMA's ``tuser_size`` from its first beat.

    The shell's C2H path takes ``tuser_size`` as the packet length of every beat (the QDMA's ``ctrl_len``) and the
    last beat's empty bytes from its low 6 bits (it ignores ``tkeep``), so a frame whose length the pipeline changed
    must be counted whole before its first beat leaves. Beats wait in a ``depth``-beat FIFO, the length of each
    frame in a FIFO of its own written with the frame's last beat; a frame is offered once its length is there.
    A frame longer than ``depth`` beats could never be counted whole: its ``depth``-th beat is written as its last
    (the frame leaves cut to ``depth`` beats, with that length) and the rest is discarded (counted in ``cut``).

    Members
    -------
    i : In(AXI4StreamSignature(512, 1))
    o : Out(AXI4StreamSignature(512, 1))
    size : Out(16)
        With ``o``: the length in bytes of ``o``'s frame, on every beat.
    cut : Out(32)
        Frames cut.
    """

    def __init__(self, *, depth=C2H_DEPTH):
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        self._depth = depth
        super().__init__({"i": In(_AXIS512), "o": Out(_AXIS512), "size": Out(16), "cut": Out(32)})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        beat = data.StructLayout({"data": 512, "keep": 64, "last": 1, "user": 1})
        m.submodules.beats = beats = StreamFIFO(shape=beat, depth=self._depth)
        m.submodules.sizes = sizes = StreamFIFO(shape=16, depth=self._depth)
        count = Signal(range(self._depth))     # beats of the frame before this one
        discard = Signal()
        ends = Signal()
        low, full = _beat_bytes(i.tkeep)
        m.d.comb += [
            ends.eq(i.tlast | (count == self._depth - 1)),
            i.tready.eq(discard | (beats.i.ready & sizes.i.ready)),
            beats.i.valid.eq(i.tvalid & ~discard & sizes.i.ready),
            beats.i.payload.data.eq(i.tdata), beats.i.payload.keep.eq(i.tkeep), beats.i.payload.last.eq(ends),
            beats.i.payload.user.eq(i.tuser[0]),
            sizes.i.valid.eq(i.tvalid & ~discard & beats.i.ready & ends),
            sizes.i.payload.eq(Cat(low, count + full)),
        ]
        with m.If(beats.i.valid & beats.i.ready):
            m.d.sync += count.eq(Mux(ends, 0, count + 1))
            with m.If(ends & ~i.tlast):
                m.d.sync += [discard.eq(1), self.cut.eq(self.cut + 1)]
        with m.If(discard & i.tvalid & i.tlast):
            m.d.sync += discard.eq(0)
        head = beats.o.payload
        m.d.comb += [
            o.tvalid.eq(beats.o.valid & sizes.o.valid), o.tdata.eq(head.data), o.tkeep.eq(head.keep),
            o.tlast.eq(head.last), o.tuser.eq(head.user), self.size.eq(sizes.o.payload),
            beats.o.ready.eq(o.tready & sizes.o.valid),
            sizes.o.ready.eq(o.tready & beats.o.valid & head.last),
        ]
        return m


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
        A pipeline with ``s_axis``/``m_axis`` (512-bit AXI4-Stream), ``ctl`` and optionally ``stats``, frame
        outputs towards the network (:data:`NET_OUTPUTS`), other input streams (tied idle), other output streams
        (taken and dropped) and ``now`` (the box's nanosecond clock).
    direction : str
        ``"tx"``, ``"rx"`` or ``"both"`` (the two directions merged into the pipeline, tagged on ``tuser`` bit 0).
    keeps_frames : bool
        The pipeline sends every frame it takes, one to one and at its length: its ``tuser_size``/``tuser_src`` ride
        a side FIFO. Otherwise each frame's length is counted on its way out (:class:`TxSizer`, :class:`C2hSizer`).
    """

    def __init__(self, block, *, direction="tx", keeps_frames=True):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        members = _pipeline_ports(block)
        width = Shape.cast(members["s_axis"].signature.members["tdata"].shape).width
        if width != 512:
            raise ValueError(f"the shell's streams are 512 bits wide; the pipeline's are {width}")
        self.net = [name for name in NET_OUTPUTS if name in members]
        if self.net and direction != "rx":
            raise ValueError(f"the pipeline's {self.net[0]} frames go to the network: it belongs in rx, "
                             f"not {direction!r}")
        if direction == "both" and keeps_frames:
            raise ValueError("direction 'both' needs keeps_frames=False (frames are steered and counted on the "
                             "way out)")
        self.block = block
        self.direction = direction
        self.keeps_frames = keeps_frames
        self.n_status = Shape.cast(members["stats"].shape).width // 32 if "stats" in members else 0
        self.bridge = ControlBridge(addr_width=12, status_words=self.n_status)
        self.p = {name: Signal(width, name=name) for name, _, width in box_250mhz_ports()}

    def ports(self):
        return list(self.p.values())

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = self.block
        self._clocks_and_resets(m)
        self._control(m)
        self._extras(m)
        h2c, tx, rx, c2h = "s_axis_qdma_h2c", "m_axis_adap_tx_250mhz", "s_axis_adap_rx_250mhz", "m_axis_qdma_c2h"
        if self.direction == "both":
            self._both(m)
            return m
        into, out, by, to = (h2c, tx, rx, c2h) if self.direction == "tx" else (rx, c2h, h2c, tx)
        if self.keeps_frames:
            self._pipeline(m, into, out)
        else:
            self._drive_input(m, self.block.s_axis, into, tag=0)
            self._sized_output(m, self.block.m_axis, out, "out")
        if self.net:
            self._net_merge(m)
        else:
            self._pass_through(m, by, to)
        return m

    def _extras(self, m):
        """Ports beyond the frame streams, ``ctl`` and ``stats``: other input streams never offer (``valid`` 0),
        other output streams are always taken and dropped, ``now`` is the box's clock: nanoseconds since reset,
        4 a cycle of the 250 MHz ``axis_aclk``."""
        block = self.block
        for name, member in block.signature.members.items():
            if name in ("s_axis", "m_axis", "ctl", "stats", *self.net):
                continue
            port = getattr(block, name)
            if member.is_signature and isinstance(member.signature, stream.Signature):
                if member.flow == In:
                    m.d.comb += port.valid.eq(0)
                else:
                    m.d.comb += port.ready.eq(1)
            elif name == "now":
                now = Signal(len(port))
                m.d.sync += now.eq(now + 4)
                m.d.comb += port.eq(now)
            else:
                raise TypeError(f"the box does not know what to connect to the pipeline's {name!r} port")

    def _drive_input(self, m, s, into, *, tag):
        """The box's input stream ``into`` onto AXI4-Stream ``s`` (``tuser`` = ``tag``)."""
        p = self.p
        m.d.comb += [s.tdata.eq(p[f"{into}_tdata"]), s.tkeep.eq(p[f"{into}_tkeep"]), s.tlast.eq(p[f"{into}_tlast"]),
                     s.tuser.eq(tag), s.tvalid.eq(p[f"{into}_tvalid"]), p[f"{into}_tready"].eq(s.tready)]

    def _sized_output(self, m, o, out, name, valid=None):
        """AXI4-Stream ``o`` to the box's output ``out`` through the sizer that output needs (:class:`TxSizer`
        towards the adapter, :class:`C2hSizer` towards the QDMA); returns the sizer. With ``valid`` (a steered
        stream), ``o.tready`` is left to the caller."""
        p = self.p
        sizer = TxSizer() if out == "m_axis_adap_tx_250mhz" else C2hSizer()
        m.submodules[f"{name}_sizer"] = sizer
        self._join(m, o, sizer.i, valid=valid)
        so = sizer.o
        src = TUSER_DST_PF0 if out == "m_axis_adap_tx_250mhz" else TUSER_DST_CMAC0
        m.d.comb += [
            p[f"{out}_tdata"].eq(so.tdata), p[f"{out}_tkeep"].eq(so.tkeep), p[f"{out}_tlast"].eq(so.tlast),
            p[f"{out}_tvalid"].eq(so.tvalid), so.tready.eq(p[f"{out}_tready"]),
            p[f"{out}_tuser_size"].eq(sizer.size), p[f"{out}_tuser_src"].eq(src),
            p[f"{out}_tuser_dst"].eq(self._dst(out)),
        ]
        return sizer

    @staticmethod
    def _join(m, o, s, valid=None):
        """Source ``o`` into sink ``s`` (both AXI4-Stream); with ``valid``, ``s.tvalid`` is that and ``o.tready`` is
        not driven here."""
        m.d.comb += [s.tdata.eq(o.tdata), s.tkeep.eq(o.tkeep), s.tlast.eq(o.tlast), s.tuser.eq(o.tuser),
                     s.tvalid.eq(o.tvalid if valid is None else valid)]
        if valid is None:
            m.d.comb += o.tready.eq(s.tready)

    def _net_merge(self, m):
        """The host's frames (H2C) and the pipeline's frames towards the network merged a frame at a time
        (:class:`FrameMerge`) into the adapter's TX, through a :class:`TxSizer`."""
        m.submodules.net_merge = merge = FrameMerge()
        self._drive_input(m, merge.a, "s_axis_qdma_h2c", tag=0)
        self._join(m, getattr(self.block, self.net[0]), merge.b)
        self._sized_output(m, merge.o, "m_axis_adap_tx_250mhz", "net")

    def _both(self, m):
        """Both directions of the port into the pipeline, each frame tagged on ``tuser`` bit 0 (1 from the host,
        0 from the network); the pipeline's output steered by that bit, beat by beat (a frame's beats all carry its
        tag): 1 to the adapter's TX, 0 to the QDMA's C2H."""
        block = self.block
        m.submodules.merge = merge = FrameMerge()
        self._drive_input(m, merge.a, "s_axis_adap_rx_250mhz", tag=0)
        self._drive_input(m, merge.b, "s_axis_qdma_h2c", tag=TAG_FROM_HOST)
        self._join(m, merge.o, block.s_axis)
        o = block.m_axis
        to_net = o.tuser[0] == TAG_FROM_HOST
        net = self._sized_output(m, o, "m_axis_adap_tx_250mhz", "net", valid=o.tvalid & to_net)
        host = self._sized_output(m, o, "m_axis_qdma_c2h", "host", valid=o.tvalid & ~to_net)
        m.d.comb += o.tready.eq(Mux(to_net, net.i.tready, host.i.tready))

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
