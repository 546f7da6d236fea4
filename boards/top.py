"""Top-level wrapper: a block with its AXI4-Lite control bridge and flat, named ports.

This is what ``lbpipe verilog`` writes and what the cocotb testbenches drive. Port names follow the conventions of
the tools users pair it with: ``s_axil_*`` for cocotbext-axi's ``AxiLiteBus.from_prefix(dut, "s_axil")`` and for
Vivado's interface inference, and ``in_valid/in_ready/in_payload``, ``out_valid/out_ready/out_payload`` for the
metadata streams, whose payload bit layout is the block's layout (first field in the low bits).
"""

from types import SimpleNamespace

from amaranth import Cat, ClockDomain, ClockSignal, Elaboratable, Module, ResetSignal, Shape, Signal
from amaranth.lib import wiring

from lbpipe.hdl.lib.axil import ControlBridge
from lbpipe.hdl.lib.stage import register_slice

__all__ = ["AxiLiteTop", "StreamsTop", "FlatTop", "RegisteredPorts", "PowerOnReset"]


def _axil_ports(bridge):
    """Flat ``s_axil_<member>`` signals for a :class:`ControlBridge`'s AXI4-Lite port."""
    return {name: Signal(member.shape, name=f"s_axil_{name}")
            for name, member in bridge.signature.members["axil"].signature.members.items()}


def _connect_axil(m, bridge, ports):
    # The bridge holds the flipped (subordinate) view: its In members are driven from the top's ports.
    members = bridge.signature.members["axil"].signature.members
    for name, sig in ports.items():
        port = getattr(bridge.axil, name)
        if members[name].flow == wiring.In:
            m.d.comb += port.eq(sig)
        else:
            m.d.comb += sig.eq(port)


class AxiLiteTop(Elaboratable):
    """Wrap ``block`` (a component with ``i``, ``o`` and ``ctl`` ports) with a :class:`ControlBridge`.

    Parameters
    ----------
    block : wiring.Component
        The block.
    addr_width : int
        AXI4-Lite address width.
    """

    def __init__(self, block, *, addr_width=16):
        members = block.signature.members
        for port in ("i", "o", "ctl"):
            if port not in members:
                raise TypeError(f"block {block!r} has no {port!r} port")
        self.block = block
        # Block statistics, if any, become the bridge's STATUS_i registers.
        self.n_status = Shape.cast(members["stats"].shape).width // 32 if "stats" in members else 0
        self.bridge = ControlBridge(addr_width=addr_width, status_words=self.n_status)
        in_shape = members["i"].signature.members["payload"].shape
        out_shape = members["o"].signature.members["payload"].shape
        self.in_layout = in_shape
        self.out_layout = out_shape
        self.in_valid = Signal(name="in_valid")
        self.in_ready = Signal(name="in_ready")
        self.in_payload = Signal(in_shape.size, name="in_payload")
        self.out_valid = Signal(name="out_valid")
        self.out_ready = Signal(name="out_ready")
        self.out_payload = Signal(out_shape.size, name="out_payload")
        self.axil = _axil_ports(self.bridge)

    def ports(self):
        """The flat port list, in a stable order, for ``verilog.convert(..., ports=...)``."""
        return [self.in_valid, self.in_ready, self.in_payload, self.out_valid, self.out_ready, self.out_payload,
                *self.axil.values()]

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        m.submodules.bridge = bridge = self.bridge
        wiring.connect(m, bridge.ctl, block.ctl)
        for i in range(self.n_status):
            m.d.comb += bridge.status[i].eq(block.stats.word_select(i, 32))
        m.d.comb += [
            block.i.valid.eq(self.in_valid),
            block.i.payload.as_value().eq(self.in_payload),
            self.in_ready.eq(block.i.ready),
            self.out_valid.eq(block.o.valid),
            self.out_payload.eq(block.o.payload.as_value()),
            block.o.ready.eq(self.out_ready),
        ]
        _connect_axil(m, bridge, self.axil)
        return m


class StreamsTop(AxiLiteTop):
    """:class:`AxiLiteTop` plus flat ``<name>_valid``, ``<name>_ready`` and ``<name>_payload`` ports for each extra
    input stream of the block (the LAPS PIT's ``upd``), the payload bits in the stream's layout order.

    Parameters
    ----------
    block : wiring.Component
        The block: ``i``, ``o``, ``ctl`` and the input streams ``streams``.
    streams : iterable of str
        Names of the block's extra input stream ports.
    addr_width : int
        AXI4-Lite address width.
    """

    def __init__(self, block, streams, **kwargs):
        super().__init__(block, **kwargs)
        self.streams = {}
        for name in streams:
            shape = block.signature.members[name].signature.members["payload"].shape
            self.streams[name] = (Signal(name=f"{name}_valid"), Signal(name=f"{name}_ready"),
                                  Signal(Shape.cast(shape).width, name=f"{name}_payload"))

    def ports(self):
        return [*super().ports(), *(sig for trio in self.streams.values() for sig in trio)]

    def elaborate(self, platform):
        m = super().elaborate(platform)
        for name, (valid, ready, payload) in self.streams.items():
            port = getattr(self.block, name)
            m.d.comb += [port.valid.eq(valid), port.payload.as_value().eq(payload), ready.eq(port.ready)]
        return m


class FlatTop(Elaboratable):
    """Any component with its interface ports flattened to ``<port>_<member>`` names (``s_axis_tdata``,
    ``meta_valid``, ``meta_payload``), for blocks whose ports are not the metadata-stream triple (the packet I/O
    stages). A ``ctl`` port, if present, is driven by a :class:`ControlBridge` behind ``s_axil_*``, and a ``stats``
    port becomes its STATUS_i registers; a block without ``ctl`` keeps ``stats`` as an output port.

    Parameters
    ----------
    block : wiring.Component
    """

    def __init__(self, block, *, addr_width=16):
        self.block = block
        self._flat = []          # (port object path, flat signal, flows into the block)
        members = block.signature.members
        self.n_status = Shape.cast(members["stats"].shape).width // 32 if "stats" in members else 0
        self.bridge = (ControlBridge(addr_width=addr_width, status_words=self.n_status) if "ctl" in members
                       else None)
        for name, member in members.items():
            # With a bridge, ``stats`` is read through its STATUS_i registers; without one it stays a port.
            if name == "ctl" or (name == "stats" and self.bridge is not None):
                continue
            self._flatten(name, member, getattr(block, name))
        self.axil = _axil_ports(self.bridge) if self.bridge is not None else {}

    def _flatten(self, prefix, member, value):
        # Members reached through an In member's signature are already flipped, so a port's own flow tells its
        # direction as the block sees it.
        if member.is_port:
            flat = Signal(Shape.cast(member.shape).width, name=prefix)
            self._flat.append((value, flat, member.flow == wiring.In))
            return
        for name, sub in member.signature.members.items():
            self._flatten(f"{prefix}_{name}", sub, getattr(value, name))

    def ports(self):
        return [flat for _, flat, _ in self._flat] + list(self.axil.values())

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        for value, flat, into_block in self._flat:
            value = value.as_value() if hasattr(value, "as_value") else value
            if into_block:
                m.d.comb += value.eq(flat)
            else:
                m.d.comb += flat.eq(value)
        if self.bridge is not None:
            m.submodules.bridge = bridge = self.bridge
            wiring.connect(m, bridge.ctl, block.ctl)
            for i in range(self.n_status):
                m.d.comb += bridge.status[i].eq(block.stats.word_select(i, 32))
            _connect_axil(m, bridge, self.axil)
        return m


class RegisteredPorts(wiring.Component):
    """``block`` with the same ports, each stream behind a register slice and each plain input behind a register;
    ``ctl`` and the outputs that are not streams pass straight.

    For the fast replay engine (lbpipe/fast.py) only: none of the block's logic is then fed by a top-level input in
    the same clock, so Verilator evaluates it once per cycle (at the clock edge) instead of also after every change
    of the inputs. The frames and items are the block's own; each stream gains one cycle of latency and two items of
    buffering, and a plain input takes effect a cycle later.

    Parameters
    ----------
    block : wiring.Component
    """

    def __init__(self, block):
        self._block = block
        super().__init__(block.signature)

    @staticmethod
    def _stream(port):
        """A stream port as ``valid``, ``payload`` (one value) and ``ready``: AXI4-Stream's ``tdata``, ``tkeep``,
        ``tlast`` and ``tuser`` joined, or a ``lib.stream`` port as it is."""
        if hasattr(port, "tdata"):
            return SimpleNamespace(valid=port.tvalid, ready=port.tready,
                                   payload=Cat(port.tdata, port.tkeep, port.tlast, port.tuser))
        return SimpleNamespace(valid=port.valid, ready=port.ready, payload=port.payload.as_value())

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self._block
        for name, member in self.signature.members.items():
            outer, inner = getattr(self, name), getattr(block, name)
            if name == "ctl":
                wiring.connect(m, wiring.flipped(outer), inner)
            elif member.is_port:
                if member.flow == wiring.In:
                    held = Signal.like(outer, name=f"reg_{name}", reset_less=True)     # no reset: no 0 after one
                    m.d.sync += held.eq(outer)
                    m.d.comb += inner.eq(held)
                else:
                    m.d.comb += outer.eq(inner)
            elif member.flow == wiring.In:
                src, dst = self._stream(outer), self._stream(inner)
                register_slice(m, f"reg_{name}", src.valid, src.payload, src.ready, dst)
            else:
                src, dst = self._stream(inner), self._stream(outer)
                register_slice(m, f"reg_{name}", src.valid, src.payload, src.ready, dst)
        return m


class PowerOnReset(Elaboratable):
    """``top`` with a clock input ``clk`` and no reset input: the ``sync`` domain is held in reset for the first
    ``cycles`` clocks by a counter of its own (initial value, no reset) and then runs.

    For the fast replay engine only, with :class:`RegisteredPorts`: a reset input feeds every register's next-state
    logic, which Verilator then re-evaluates whenever an input changes; an internal reset leaves that logic to the
    clock edge. ``ports()`` is ``top``'s and ``clk``."""

    def __init__(self, top, cycles=4):
        self.top, self.cycles = top, cycles
        self.clk = Signal(name="clk")

    def ports(self):
        return [*self.top.ports(), self.clk]

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain("sync")
        m.domains.por = ClockDomain("por", reset_less=True)
        left = Signal(range(self.cycles + 1), init=self.cycles, name="por_left")
        m.d.comb += [ClockSignal("sync").eq(self.clk), ClockSignal("por").eq(self.clk),
                     ResetSignal("sync").eq(left != 0)]
        with m.If(left != 0):
            m.d.por += left.eq(left - 1)
        m.submodules.top = self.top
        return m
