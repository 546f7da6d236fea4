"""AXI4-Lite register file that drives a block's control port.

A host programs lbpipe blocks through one AXI4-Lite subordinate per block (or per shell user box).
:class:`ControlBridge` turns register writes into :func:`lbpipe.hdl.lib.control.ControlSignature` commands:
the host writes TABLE, INDEX, DATA_LO and DATA_HI, then writes COMMIT, and the COMMIT write's response is held
back until the block has accepted the command. When the host's write returns, the command is in the block, so
drivers need no polling and no read-back to order table updates against traffic.

Choices made where AXI and the papers are silent:

* One write and one read are in service at a time. Each address channel has a one-entry skid register, so a
  manager that pipelines (AW and W of the next write while waiting for B) does not stall, but the next write takes
  effect only after the previous write's response has been given. Writes therefore take effect, and respond, in
  issue order, which AXI4-Lite requires anyway (it has no IDs).
* AW and W are accepted independently: either may arrive first, or both in the same cycle.
* Every response is OKAY. Reads of unmapped or write-only addresses return 0, writes to unmapped or read-only
  addresses are dropped. A driver built for a newer register map (more status words, new registers) then still
  runs against an older bitstream instead of taking bus errors, and a newer driver probes features by reading ID.
* Ready outputs depend on registered state only, and every valid output (``bvalid``, ``rvalid``,
  ``ctl.valid``) is a register, so the bridge adds no combinational path between its ports.

Port naming
-----------
Amaranth names the flattened ports of a top-level component ``axil__awaddr``, ``ctl__payload`` and so on.
Top-level wrappers for OpenNIC, Corundum or cocotbext-axi should instead expose plain signals named
``s_axil_<member>`` (``s_axil_awaddr`` ... ``s_axil_rready``: the member names of :class:`AXI4LiteSignature`
with an ``s_axil_`` prefix, which is what ``AxiLiteBus.from_prefix(dut, "s_axil")`` and Xilinx IP integrator
expect), connect them to :attr:`ControlBridge.axil` member by member, and pass them to
:func:`amaranth.back.verilog.convert` as an explicit ``ports=`` list so the names survive.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import CONTROL_DATA_BITS, CONTROL_INDEX_BITS, CONTROL_TABLE_BITS, ControlSignature
from lbpipe.hdl.lib.control import check_int as _check_int

__all__ = ["AXI4LiteSignature", "ControlBridge", "AXIL_RESP_OKAY"]

#: AXI ``xRESP`` encoding of a successful transfer; the bridge never answers anything else.
AXIL_RESP_OKAY = 0b00




class AXI4LiteSignature(wiring.Signature):
    """Signature of an AXI4-Lite link, seen from the manager.

    The members are named by the AXI specification (lower case, no prefix) and their flows are those of the
    manager: addresses, write data, and the ready of the response channels are ``Out``. A component that *serves*
    AXI4-Lite (a subordinate, such as :class:`ControlBridge`) therefore declares ``In(AXI4LiteSignature(...))``,
    just as a stream sink declares ``In(stream.Signature(...))``; a component that issues transactions declares
    ``Out(AXI4LiteSignature(...))``.

    Parameters
    ----------
    addr_width : int
        Width of ``awaddr`` and ``araddr`` in bits, 1 to 64. Addresses are byte addresses.
    data_width : int
        Width of ``wdata`` and ``rdata`` in bits: 32 or 64 (the only widths AXI4-Lite allows).

    Members
    -------
    awaddr : Out(addr_width)
    awprot : Out(3)
    awvalid : Out(1)
    awready : In(1)
    wdata : Out(data_width)
    wstrb : Out(data_width // 8)
    wvalid : Out(1)
    wready : In(1)
    bresp : In(2)
    bvalid : In(1)
    bready : Out(1)
    araddr : Out(addr_width)
    arprot : Out(3)
    arvalid : Out(1)
    arready : In(1)
    rdata : In(data_width)
    rresp : In(2)
    rvalid : In(1)
    rready : Out(1)

    Raises
    ------
    TypeError
        If ``addr_width`` or ``data_width`` is not an integer.
    ValueError
        If ``addr_width`` is outside 1 to 64, or ``data_width`` is neither 32 nor 64.
    """

    def __init__(self, *, addr_width=16, data_width=32):
        self.check_parameters(addr_width=addr_width, data_width=data_width)
        self._addr_width = addr_width
        self._data_width = data_width
        super().__init__({
            "awaddr":  Out(addr_width),
            "awprot":  Out(3),
            "awvalid": Out(1),
            "awready": In(1),
            "wdata":   Out(data_width),
            "wstrb":   Out(data_width // 8),
            "wvalid":  Out(1),
            "wready":  In(1),
            "bresp":   In(2),
            "bvalid":  In(1),
            "bready":  Out(1),
            "araddr":  Out(addr_width),
            "arprot":  Out(3),
            "arvalid": Out(1),
            "arready": In(1),
            "rdata":   In(data_width),
            "rresp":   In(2),
            "rvalid":  In(1),
            "rready":  Out(1),
        })

    @classmethod
    def check_parameters(cls, *, addr_width=16, data_width=32):
        """Validate parameters without building a signature.

        Raises
        ------
        TypeError
            If a parameter is not an integer.
        ValueError
            If a parameter is out of range.
        """
        _check_int("Address width", addr_width)
        _check_int("Data width", data_width)
        if not 1 <= addr_width <= 64:
            raise ValueError(f"Address width must be between 1 and 64, not {addr_width}")
        if data_width not in (32, 64):
            raise ValueError(f"AXI4-Lite data width must be 32 or 64, not {data_width}")

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def data_width(self):
        return self._data_width

    def __eq__(self, other):
        return (type(other) is type(self) and
                self.addr_width == other.addr_width and
                self.data_width == other.data_width)

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width))

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width}, data_width={self.data_width})"


class ControlBridge(wiring.Component):
    """AXI4-Lite register file driving a ``ctl`` stream of control commands.

    Register map (32-bit words, byte addresses; all responses OKAY):

    ============  ========  ======  ==========================================================================
    Address       Name      Access  Contents
    ============  ========  ======  ==========================================================================
    0x00          ID        RO      ``ident`` (default ``0x4C425031``, ASCII "LBP1").
    0x04          STATUS    RO      bit 0 PENDING: a committed command has not yet been accepted by ``ctl``.
                                    Bits 31:1 read 0.
    0x08          TABLE     RW      bits 7:0 table number. Bits 31:8 read 0, writes to them are ignored.
    0x0C          INDEX     RW      bits 23:0 entry index. Bits 31:24 read 0, writes to them are ignored.
    0x10          DATA_LO   RW      bits 31:0 of the command data.
    0x14          DATA_HI   RW      bits 63:32 of the command data.
    0x18          COMMIT    WO      Any write (data and strobes ignored) copies {TABLE, INDEX, DATA} into the
                                    ``ctl`` payload and raises ``ctl.valid``. The write response is held back
                                    until ``ctl`` accepts the command. Reads return 0.
    0x40 + 4*i    STATUS_i  RO      ``status[i]``, for ``i < status_words``, sampled when the read address is
                                    accepted.
    other         --        --      Reads return 0, writes are ignored.
    ============  ========  ======  ==========================================================================

    RW registers honour ``wstrb`` byte by byte. Low address bits 1:0 are ignored (the strobes select bytes);
    all other address bits are decoded, so registers do not alias.

    Unmapped and read-only addresses answer OKAY rather than SLVERR/DECERR so that a driver newer or older than the
    bitstream (one that reads status words this build does not have, or writes a register it has dropped) keeps
    working; drivers tell builds apart by ID.

    TABLE, INDEX and DATA are staging registers: they keep their values after COMMIT, so a host updating many
    entries of one table rewrites only INDEX and DATA. The payload of a pending command is a separate copy and is
    not disturbed by later writes; moreover writes are taken one at a time, so a write issued after COMMIT takes
    effect only once the committed command has been accepted. Reads are served while a command is pending, so a
    host (or a second manager behind an interconnect) can poll STATUS.

    Parameters
    ----------
    addr_width : int
        AXI address width in bits. Must reach the last mapped register: at least 5 bits (COMMIT at 0x18), at
        least 7 with status words, more when ``status_words`` pushes STATUS_i past byte address 0x7F.
    status_words : int
        Number of 32-bit read-only status/counter inputs.
    ident : int
        Value of the ID register, 0 to 2**32-1.

    Members
    -------
    axil : ``In(AXI4LiteSignature(addr_width=addr_width, data_width=32))``
        AXI4-Lite subordinate port.
    ctl : ``Out(ControlSignature())``
        Control command stream to the block; the bridge is the source.
    status : ``In(data.ArrayLayout(32, status_words))``
        Status inputs; present only when ``status_words > 0``.

    Raises
    ------
    TypeError
        If a parameter is not an integer.
    ValueError
        If a parameter is out of range, or ``addr_width`` cannot address every register.
    """

    ID_ADDR = 0x00
    STATUS_ADDR = 0x04
    TABLE_ADDR = 0x08
    INDEX_ADDR = 0x0C
    DATA_LO_ADDR = 0x10
    DATA_HI_ADDR = 0x14
    COMMIT_ADDR = 0x18
    STATUS_BASE_ADDR = 0x40

    #: STATUS register bit positions.
    STATUS_PENDING = 0

    def __init__(self, *, addr_width=16, status_words=0, ident=0x4C425031):
        _check_int("Status word count", status_words)
        _check_int("Ident", ident)
        AXI4LiteSignature.check_parameters(addr_width=addr_width, data_width=32)
        if status_words < 0:
            raise ValueError(f"Status word count must be non-negative, not {status_words}")
        if not 0 <= ident < 2 ** 32:
            raise ValueError(f"Ident must fit in 32 bits (0 to 0xFFFFFFFF), not {ident:#x}")
        if status_words:
            last_byte = self.STATUS_BASE_ADDR + 4 * status_words - 1
        else:
            last_byte = self.COMMIT_ADDR + 3
        need = last_byte.bit_length()
        if addr_width < need:
            raise ValueError(f"Address width {addr_width} cannot reach byte address {last_byte:#x}; "
                             f"status_words={status_words} needs addr_width >= {need}")

        self._addr_width = addr_width
        self._status_words = status_words
        self._ident = ident

        members = {
            "axil": In(AXI4LiteSignature(addr_width=addr_width, data_width=32)),
            "ctl":  Out(ControlSignature()),
        }
        if status_words > 0:
            members["status"] = In(data.ArrayLayout(32, status_words))
        super().__init__(members)

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def status_words(self):
        return self._status_words

    @property
    def ident(self):
        return self._ident

    def elaborate(self, platform):
        m = Module()
        axil = self.axil
        word_bits = self._addr_width - 2

        # Staging registers, exactly as wide as the command fields.
        reg_table = Signal(CONTROL_TABLE_BITS)
        reg_index = Signal(CONTROL_INDEX_BITS)
        reg_data = Signal(CONTROL_DATA_BITS)

        def word(addr):
            return addr >> 2

        # --- Write path -------------------------------------------------------------------------------------
        aw_full = Signal()
        aw_word = Signal(word_bits)
        w_full = Signal()
        w_data = Signal(32)
        w_strb = Signal(4)

        # Ready from registered state only: each channel has room for one beat.
        m.d.comb += [
            axil.awready.eq(~aw_full),
            axil.wready.eq(~w_full),
        ]
        with m.If(axil.awvalid & axil.awready):
            m.d.sync += [aw_full.eq(1), aw_word.eq(axil.awaddr[2:])]
        with m.If(axil.wvalid & axil.wready):
            m.d.sync += [w_full.eq(1), w_data.eq(axil.wdata), w_strb.eq(axil.wstrb)]

        bvalid = Signal()
        m.d.comb += [axil.bvalid.eq(bvalid), axil.bresp.eq(AXIL_RESP_OKAY)]

        ctl_valid = Signal()
        ctl_payload = Signal(self.ctl.payload.shape())
        m.d.comb += [self.ctl.valid.eq(ctl_valid), self.ctl.payload.eq(ctl_payload)]

        # A write is executed only when the previous one has been fully answered (a pending COMMIT counts as
        # unanswered), which keeps writes and their responses in order.
        response_owed = bvalid | ctl_valid
        do_write = aw_full & w_full & ~response_owed

        def merge(old, width):
            """``old`` with the bytes selected by ``w_strb`` replaced by ``w_data``, truncated to ``width``."""
            lanes = []
            for i in range((width + 7) // 8):
                hi = min(8 * i + 8, width)
                lanes.append(Mux(w_strb[i], w_data[8 * i:hi], old[8 * i:hi]))
            return Cat(*lanes)

        with m.If(do_write):
            m.d.sync += [aw_full.eq(0), w_full.eq(0)]
            with m.Switch(aw_word):
                with m.Case(word(self.TABLE_ADDR)):
                    m.d.sync += reg_table.eq(merge(reg_table, CONTROL_TABLE_BITS))
                with m.Case(word(self.INDEX_ADDR)):
                    m.d.sync += reg_index.eq(merge(reg_index, CONTROL_INDEX_BITS))
                with m.Case(word(self.DATA_LO_ADDR)):
                    m.d.sync += reg_data[:32].eq(merge(reg_data[:32], 32))
                with m.Case(word(self.DATA_HI_ADDR)):
                    m.d.sync += reg_data[32:].eq(merge(reg_data[32:], 32))
            with m.If(aw_word == word(self.COMMIT_ADDR)):
                # The response waits for the block; see the ctl handshake below.
                m.d.sync += [
                    ctl_valid.eq(1),
                    ctl_payload.table.eq(reg_table),
                    ctl_payload.index.eq(reg_index),
                    ctl_payload.data.eq(reg_data),
                ]
            with m.Else():
                m.d.sync += bvalid.eq(1)

        with m.If(ctl_valid & self.ctl.ready):
            m.d.sync += [ctl_valid.eq(0), bvalid.eq(1)]
        with m.If(bvalid & axil.bready):
            m.d.sync += bvalid.eq(0)

        # --- Read path --------------------------------------------------------------------------------------
        rvalid = Signal()
        rdata = Signal(32)
        m.d.comb += [
            axil.arready.eq(~rvalid),
            axil.rvalid.eq(rvalid),
            axil.rdata.eq(rdata),
            axil.rresp.eq(AXIL_RESP_OKAY),
        ]
        with m.If(axil.arvalid & axil.arready):
            m.d.sync += rvalid.eq(1)
            m.d.sync += rdata.eq(0)
            with m.Switch(axil.araddr[2:]):
                with m.Case(word(self.ID_ADDR)):
                    m.d.sync += rdata.eq(Const(self._ident, 32))
                with m.Case(word(self.STATUS_ADDR)):
                    m.d.sync += rdata[self.STATUS_PENDING].eq(ctl_valid)
                with m.Case(word(self.TABLE_ADDR)):
                    m.d.sync += rdata.eq(reg_table)
                with m.Case(word(self.INDEX_ADDR)):
                    m.d.sync += rdata.eq(reg_index)
                with m.Case(word(self.DATA_LO_ADDR)):
                    m.d.sync += rdata.eq(reg_data[:32])
                with m.Case(word(self.DATA_HI_ADDR)):
                    m.d.sync += rdata.eq(reg_data[32:])
                for i in range(self._status_words):
                    with m.Case(word(self.STATUS_BASE_ADDR) + i):
                        m.d.sync += rdata.eq(self.status[i])
        with m.Elif(rvalid & axil.rready):
            m.d.sync += rvalid.eq(0)

        return m
