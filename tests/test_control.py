# amaranth: UnusedElaboratable=no
"""Tests of :mod:`lbpipe.hdl.lib.axil`: signatures and parameter checks, then the cocotb bench under Icarus.

Signature tests construct components without elaborating them; the first line silences Amaranth's
``UnusedElaboratable`` warning for that reason (pytest turns warnings into errors).
"""

import pytest

from amaranth.hdl import Elaboratable, Module, Shape, Signal
from amaranth.lib import data
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axil import AXI4LiteSignature, ControlBridge
from lbpipe.hdl.lib.control import ControlSignature
from lbpipe.tb.lib.runner import run_cocotb, write_verilog


# --- AXI4LiteSignature --------------------------------------------------------------------------------------------

MANAGER_OUT = {"awaddr", "awprot", "awvalid", "wdata", "wstrb", "wvalid", "bready",
               "araddr", "arprot", "arvalid", "rready"}
MANAGER_IN = {"awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp", "rvalid"}


def test_axil_signature_members():
    sig = AXI4LiteSignature()
    assert (sig.addr_width, sig.data_width) == (16, 32)
    assert set(sig.members) == MANAGER_OUT | MANAGER_IN
    for name in MANAGER_OUT:
        assert sig.members[name].flow == Out, name
    for name in MANAGER_IN:
        assert sig.members[name].flow == In, name
    widths = {name: Shape.cast(member.shape).width for name, member in sig.members.items()}
    assert widths == {
        "awaddr": 16, "awprot": 3, "awvalid": 1, "awready": 1,
        "wdata": 32, "wstrb": 4, "wvalid": 1, "wready": 1,
        "bresp": 2, "bvalid": 1, "bready": 1,
        "araddr": 16, "arprot": 3, "arvalid": 1, "arready": 1,
        "rdata": 32, "rresp": 2, "rvalid": 1, "rready": 1,
    }


def test_axil_signature_widths_eq_repr():
    sig = AXI4LiteSignature(addr_width=40, data_width=64)
    assert Shape.cast(sig.members["awaddr"].shape).width == 40
    assert Shape.cast(sig.members["araddr"].shape).width == 40
    assert Shape.cast(sig.members["wdata"].shape).width == 64
    assert Shape.cast(sig.members["rdata"].shape).width == 64
    assert Shape.cast(sig.members["wstrb"].shape).width == 8
    assert sig == AXI4LiteSignature(addr_width=40, data_width=64)
    assert sig != AXI4LiteSignature(addr_width=40, data_width=32)
    assert sig != AXI4LiteSignature(addr_width=16, data_width=64)
    assert sig.flip() == AXI4LiteSignature(addr_width=40, data_width=64).flip()
    assert sig.flip() != sig
    assert repr(sig) == "AXI4LiteSignature(addr_width=40, data_width=64)"


def test_axil_signature_subordinate_flip():
    # The subordinate's view: In(AXI4LiteSignature) makes the manager's outputs its inputs.
    sub = In(AXI4LiteSignature()).signature
    assert sub.members["awaddr"].flow == In
    assert sub.members["awready"].flow == Out
    assert sub.members["rdata"].flow == Out


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"addr_width": "16"}, TypeError, r"^Address width must be an integer, not '16'$"),
    ({"addr_width": True}, TypeError, r"^Address width must be an integer, not True$"),
    ({"addr_width": 0}, ValueError, r"^Address width must be between 1 and 64, not 0$"),
    ({"addr_width": 65}, ValueError, r"^Address width must be between 1 and 64, not 65$"),
    ({"data_width": 32.0}, TypeError, r"^Data width must be an integer, not 32\.0$"),
    ({"data_width": 16}, ValueError, r"^AXI4-Lite data width must be 32 or 64, not 16$"),
    ({"data_width": 128}, ValueError, r"^AXI4-Lite data width must be 32 or 64, not 128$"),
])
def test_axil_signature_bad_parameters(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        AXI4LiteSignature(**kwargs)


# --- ControlBridge signature ---------------------------------------------------------------------------------------

def test_bridge_signature():
    bridge = ControlBridge(status_words=3)
    assert (bridge.addr_width, bridge.status_words, bridge.ident) == (16, 3, 0x4C425031)
    members = bridge.signature.members
    assert set(members) == {"axil", "ctl", "status"}
    assert members["axil"] == In(AXI4LiteSignature(addr_width=16, data_width=32))
    assert members["ctl"] == Out(ControlSignature())
    assert members["status"] == In(data.ArrayLayout(32, 3))


def test_bridge_signature_without_status():
    bridge = ControlBridge(addr_width=12, ident=0)
    assert set(bridge.signature.members) == {"axil", "ctl"}
    assert bridge.signature.members["axil"] == In(AXI4LiteSignature(addr_width=12))


def test_bridge_minimum_addr_width():
    ControlBridge(addr_width=7, status_words=16)  # STATUS_15 at 0x7C is the last word of a 7-bit space
    with pytest.raises(ValueError, match=r"^Address width 7 cannot reach byte address 0x83; "
                                         r"status_words=17 needs addr_width >= 8$"):
        ControlBridge(addr_width=7, status_words=17)
    ControlBridge(addr_width=5)  # COMMIT at 0x18 is the last register without status words
    with pytest.raises(ValueError, match=r"^Address width 4 cannot reach byte address 0x1b; "
                                         r"status_words=0 needs addr_width >= 5$"):
        ControlBridge(addr_width=4)
    with pytest.raises(ValueError, match=r"^Address width 6 cannot reach byte address 0x43; "
                                         r"status_words=1 needs addr_width >= 7$"):
        ControlBridge(addr_width=6, status_words=1)


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"status_words": "2"}, TypeError, r"^Status word count must be an integer, not '2'$"),
    ({"status_words": -1}, ValueError, r"^Status word count must be non-negative, not -1$"),
    ({"ident": 1.5}, TypeError, r"^Ident must be an integer, not 1\.5$"),
    ({"ident": 1 << 32}, ValueError, r"^Ident must fit in 32 bits \(0 to 0xFFFFFFFF\), not 0x100000000$"),
    ({"ident": -1}, ValueError, r"^Ident must fit in 32 bits \(0 to 0xFFFFFFFF\), not -0x1$"),
    ({"addr_width": None}, TypeError, r"^Address width must be an integer, not None$"),
])
def test_bridge_bad_parameters(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        ControlBridge(**kwargs)


def test_bridge_parameters_keyword_only():
    with pytest.raises(TypeError):
        ControlBridge(16)


# --- cocotb bench ----------------------------------------------------------------------------------------------------

class ControlTop(Elaboratable):
    """``ControlBridge(status_words=2)`` with flat, conventionally named ports for cocotb.

    AXI4-Lite as ``s_axil_<member>`` (what ``AxiLiteBus.from_prefix(dut, "s_axil")`` binds), the control stream as
    ``ctl_valid``/``ctl_ready``/``ctl_payload`` (96 bits, ``ControlWrite`` packing: table in the low bits), and
    status inputs ``status_0``/``status_1``. Clock ``clk`` and active-high synchronous reset ``rst`` come from the
    ``sync`` domain that conversion creates.
    """

    STATUS_WORDS = 2

    def __init__(self):
        self.bridge = ControlBridge(status_words=self.STATUS_WORDS)
        axil_sig = self.bridge.signature.members["axil"].signature
        self.axil = {}
        for name, member in axil_sig.members.items():
            self.axil[name] = Signal(member.shape, name=f"s_axil_{name}")
        self.ctl_valid = Signal(name="ctl_valid")
        self.ctl_ready = Signal(name="ctl_ready")
        self.ctl_payload = Signal(len(self.bridge.ctl.payload.as_value()), name="ctl_payload")
        self.status = [Signal(32, name=f"status_{i}") for i in range(self.STATUS_WORDS)]

    def ports(self):
        return [*self.axil.values(), self.ctl_valid, self.ctl_ready, self.ctl_payload, *self.status]

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = bridge = self.bridge
        # Members flowing In to the bridge are driven from the top's inputs, and the rest drive the top's outputs.
        for name, member in bridge.signature.members["axil"].signature.members.items():
            if member.flow == In:
                m.d.comb += getattr(bridge.axil, name).eq(self.axil[name])
            else:
                m.d.comb += self.axil[name].eq(getattr(bridge.axil, name))
        m.d.comb += [
            self.ctl_valid.eq(bridge.ctl.valid),
            bridge.ctl.ready.eq(self.ctl_ready),
            self.ctl_payload.eq(bridge.ctl.payload.as_value()),
        ]
        for i, status in enumerate(self.status):
            m.d.comb += bridge.status[i].eq(status)
        return m


def test_control_top_ports():
    top = ControlTop()
    names = [port.name for port in top.ports()]
    assert names[:19] == [f"s_axil_{name}" for name in AXI4LiteSignature().members]
    assert names[19:] == ["ctl_valid", "ctl_ready", "ctl_payload", "status_0", "status_1"]


def test_control_cocotb():
    top = ControlTop()
    path = write_verilog(top, name="control_top", ports=top.ports())
    text = path.read_text()
    for name in ["clk", "rst", "s_axil_awaddr", "s_axil_rready", "ctl_payload", "status_1"]:
        assert f" {name};" in text, f"port {name} missing from {path}"
    run_cocotb(path, toplevel="control_top", test_module="lbpipe.tb.lib.test_control")
