"""A table memory that can be UltraRAM: one write port and one synchronous read port, as the blocks use
``lib.memory.Memory``, elaborated three ways (``mode``).

* ``"memory"``: a plain ``lib.memory.Memory``. Tools choose the primitive; Yosys's ``memory_libmap`` weighs a
  URAM288 tile (4K x 72) at cost 1024 against 257 for a RAMB36 and 129 for a RAMB18 (``urams.txt`` and
  ``brams_*.txt`` of its Xilinx techlib), so a table shallower than 4K words (the LAPS PIT's sub-tables at 16K
  entries are 2,048 deep) or narrow lands in block RAM even under ``synth_xilinx -uram``.
* ``"infer"``: the same memory with the ``ram_style = "ultra"`` attribute, which Vivado and Yosys's
  ``memory_libmap`` (with ``-uram``) honour over their cost model. Portable Verilog; simulates anywhere.
* ``"instance"``: explicit ``URAM288_BASE`` tiles, one per 72 bits of width (depth up to 4,096 words, one tile
  deep): UltraRAM whatever the tool infers, and without ``-uram``. Simulation needs a model of the primitive:
  :data:`SIM_MODEL` (``uram288_base_sim.v``, written for lbpipe), which :func:`sim_sources` names for a Verilog
  text that instantiates it. Vivado uses its own primitive.

The port semantics are those of ``Memory.read_port(transparent_for=())`` and ``Memory.write_port()`` in every mode:

* write: ``w_en`` high at a clock edge stores ``w_data`` at ``w_addr``;
* read: ``r_en`` high at a clock edge loads ``r_data`` with the word at ``r_addr`` (a latch: ``r_data`` holds while
  ``r_en`` is low; ``r_en`` defaults high, as in Amaranth); a read of the address written in the same clock returns
  the old word (read before write);
* reset does not touch the contents nor ``r_data`` (neither Amaranth's read port nor the instance's ``RST_A``,
  tied low, is reset); contents start at zero (the only initial contents Yosys's UltraRAM mapping takes, ``init
  zero`` in ``urams.txt``, so ``init`` is not offered); ``r_data`` before the first read is not defined (X in the
  Verilog of the memory modes).

``registered=True`` adds the read register the blocks put after every memory read: ``r_data`` is then a register
loaded with the read word when ``r_reg_en`` is high (one clock after the read, like a block's own register
enabled by the same pipeline advance) and cleared by the domain's reset. In ``"instance"`` mode that register is
the UltraRAM's own output register (``OREG_A = "TRUE"``, ``OREG_CE_A`` = ``r_reg_en``, ``RST_A`` the synchronous
domain reset: UG573, "UltraRAM Attributes" and ports: RST_A resets the output register and has priority over CE),
so an instantiated UltraRAM is read as fast as an inferred one whose register Vivado packs; in the other modes it is
a fabric register after the memory, which the tools may pack.

In ``"instance"`` mode the read is port A and the write port B of each tile: the URAM288 executes port A's operation
before port B's in a clock (UG573, UltraScale Architecture Memory Resources, "Dual Port SRAM Array Operations": port
A reading and port B writing one address returns the old data), which is the read-before-write order above. Port
names, widths and attribute names are UG974's (UltraScale Architecture Libraries Guide, "URAM288_BASE") and match
Yosys's ``techlibs/xilinx/cells_xtra.v``; ``ADDR[11:0]`` selects one of the 4,096 words and ``ADDR[22:12]`` only
matters in a cascade (UG573, "Address Bus - ADDR_A, ADDR_B"), so it is tied to zero. Without ``registered`` the
output registers (``OREG_A``/``OREG_B``) stay off and the read timing equals the memory's latch.
"""

import pathlib

from amaranth import Cat, ClockSignal, Const, Instance, Module, ResetSignal, Shape, Signal, Value
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import check_int

__all__ = ["UltraRAM", "MODES", "URAM_DEPTH", "URAM_WIDTH", "SIM_MODEL", "sim_sources", "tiles"]

MODES = ("memory", "infer", "instance")
URAM_DEPTH = 4096       # words of one URAM288 (UG573: 4K x 72)
URAM_WIDTH = 72
_ADDR_BITS = 23         # ADDR_A/ADDR_B width (UG974)
_BWE_BITS = 9

#: The behavioural Verilog model of the URAM288_BASE subset that ``"instance"`` mode uses (simulation only).
SIM_MODEL = pathlib.Path(__file__).with_name("uram288_base_sim.v")


def sim_sources(verilog_text):
    """Extra Verilog sources a simulator needs for ``verilog_text``: ``[SIM_MODEL]`` when it instantiates
    ``URAM288_BASE``, else none."""
    return [SIM_MODEL] if "URAM288_BASE" in verilog_text else []


def tiles(width):
    """URAM288 tiles (72 bits each) for one ``"instance"`` word of ``width`` bits."""
    return -(-width // URAM_WIDTH)


def _shape_width(shape):
    cast = shape.as_shape() if hasattr(shape, "as_shape") else shape
    return Shape.cast(cast).width


class UltraRAM(wiring.Component):
    """One-write-port, one-read-port table memory, optionally in UltraRAM.

    Parameters
    ----------
    shape : shape-castable
        Word shape (a plain width or a layout; ``r_data``/``w_data`` take it).
    depth : int
        Words, at least 1; at most 4,096 in ``"instance"`` mode (one tile deep: deeper tables need an output
        multiplexer between the UltraRAMs and the block's read register, or the URAM288 cascade, neither done here;
        Yosys infers UltraRAM for them under ``-uram``, or use ``"infer"``).
    mode : str
        ``"memory"``, ``"infer"`` or ``"instance"`` (module docstring).
    registered : bool
        ``r_data`` through the read register (``r_reg_en``), in ``"instance"`` mode the UltraRAM's ``OREG_A``.
    domain : str
        Clock domain of both ports.

    Members
    -------
    r_addr : In(range(depth))
    r_en : In(1, init=1)
    r_data : Out(shape)
    r_reg_en : In(1, init=1)
        Only with ``registered``: the read register's enable.
    w_addr : In(range(depth))
    w_en : In(1)
    w_data : In(shape)

    Raises
    ------
    ValueError
        A mode not in :data:`MODES`, a depth below 1, or above 4,096 in ``"instance"`` mode.
    """

    def __init__(self, *, shape, depth, mode="memory", registered=False, domain="sync"):
        check_int("depth", depth)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        if mode == "instance" and depth > URAM_DEPTH:
            raise ValueError(f"mode 'instance' takes a depth up to {URAM_DEPTH} (one URAM288 deep), not {depth}")
        self._shape, self._depth, self._mode, self._domain = shape, depth, mode, domain
        self._width = _shape_width(shape)
        self._registered = bool(registered)
        super().__init__({
            "r_addr": In(range(depth)), "r_en": In(1, init=1), "r_data": Out(shape),
            "w_addr": In(range(depth)), "w_en": In(1), "w_data": In(shape),
            **({"r_reg_en": In(1, init=1)} if registered else {}),
        })

    @property
    def mode(self):
        return self._mode

    @property
    def n_tiles(self):
        """URAM288 tiles this memory instantiates (``"instance"`` mode; 0 otherwise)."""
        return tiles(self._width) if self._mode == "instance" else 0

    def read_port(self):
        """The read port as the blocks use ``Memory.read_port()``: an object with ``addr``, ``en``, ``data``."""
        return _Port(self.r_addr, self.r_en, self.r_data, getattr(self, "r_reg_en", None))

    def write_port(self):
        """The write port: ``addr``, ``en``, ``data``."""
        return _Port(self.w_addr, self.w_en, self.w_data)

    def elaborate(self, platform):
        m = Module()
        if self._mode == "instance":
            self._tiles(m)
        else:
            attrs = {"ram_style": "ultra"} if self._mode == "infer" else None
            mem = memory.Memory(shape=self._shape, depth=self._depth, init=[], attrs=attrs)
            m.submodules.mem = mem
            rd = mem.read_port(domain=self._domain, transparent_for=())
            wr = mem.write_port(domain=self._domain)
            m.d.comb += [rd.addr.eq(self.r_addr), rd.en.eq(self.r_en),
                         wr.addr.eq(self.w_addr), wr.en.eq(self.w_en), wr.data.eq(self.w_data)]
            if self._registered:
                with m.If(self.r_reg_en):
                    m.d[self._domain] += self.r_data.eq(rd.data)
            else:
                m.d.comb += self.r_data.eq(rd.data)
        return m

    def _tiles(self, m):
        """One URAM288_BASE per 72 bits of the word: port A reads, port B writes; DOUT_A wired straight to
        ``r_data`` (no logic between the UltraRAM and the block's read register)."""
        w = self._width
        wdata, rdata = Value.cast(self.w_data), Value.cast(self.r_data)
        raddr, waddr = Signal(_ADDR_BITS, name="uram_addr_a"), Signal(_ADDR_BITS, name="uram_addr_b")
        m.d.comb += [raddr.eq(self.r_addr), waddr.eq(self.w_addr)]      # ADDR[22:12] (cascade only) zero
        outs = []
        for t in range(tiles(w)):
            lo, hi = t * URAM_WIDTH, min(w, (t + 1) * URAM_WIDTH)
            din = Signal(URAM_WIDTH, name=f"uram{t}_din")
            dout = Signal(URAM_WIDTH, name=f"uram{t}_dout")
            m.d.comb += din.eq(wdata[lo:hi])        # zero-extended: unused bits write 0
            m.submodules[f"uram{t}"] = Instance(
                "URAM288_BASE",
                # UG974 attribute names; values the model checks (uram288_base_sim.v)
                p_OREG_A="TRUE" if self._registered else "FALSE", p_OREG_B="FALSE",
                p_OREG_ECC_A="FALSE", p_OREG_ECC_B="FALSE",
                p_IREG_PRE_A="FALSE", p_IREG_PRE_B="FALSE",
                p_EN_ECC_RD_A="FALSE", p_EN_ECC_RD_B="FALSE", p_EN_ECC_WR_A="FALSE", p_EN_ECC_WR_B="FALSE",
                p_BWE_MODE_A="PARITY_INTERLEAVED", p_BWE_MODE_B="PARITY_INTERLEAVED",
                p_RST_MODE_A="SYNC", p_RST_MODE_B="SYNC", p_EN_AUTO_SLEEP_MODE="FALSE",
                p_USE_EXT_CE_A="FALSE", p_USE_EXT_CE_B="FALSE",
                i_CLK=ClockSignal(self._domain), i_SLEEP=Const(0, 1),
                # port A: read
                i_ADDR_A=raddr,
                i_EN_A=self.r_en, i_RDB_WR_A=Const(0, 1), i_BWE_A=Const(0, _BWE_BITS),
                i_DIN_A=Const(0, URAM_WIDTH),
                i_RST_A=ResetSignal(self._domain) if self._registered else Const(0, 1),
                i_OREG_CE_A=self.r_reg_en if self._registered else Const(0, 1), i_OREG_ECC_CE_A=Const(0, 1),
                i_INJECT_SBITERR_A=Const(0, 1), i_INJECT_DBITERR_A=Const(0, 1),
                o_DOUT_A=dout, o_SBITERR_A=Signal(name=f"uram{t}_sbiterr_a"),
                o_DBITERR_A=Signal(name=f"uram{t}_dbiterr_a"),
                # port B: write, whole word (every byte-write enable)
                i_ADDR_B=waddr, i_EN_B=self.w_en, i_RDB_WR_B=Const(1, 1),
                i_BWE_B=Const((1 << _BWE_BITS) - 1, _BWE_BITS), i_DIN_B=din, i_RST_B=Const(0, 1),
                i_OREG_CE_B=Const(0, 1), i_OREG_ECC_CE_B=Const(0, 1),
                i_INJECT_SBITERR_B=Const(0, 1), i_INJECT_DBITERR_B=Const(0, 1),
                o_DOUT_B=Signal(URAM_WIDTH, name=f"uram{t}_dout_b"), o_SBITERR_B=Signal(name=f"uram{t}_sbiterr_b"),
                o_DBITERR_B=Signal(name=f"uram{t}_dbiterr_b"),
            )
            outs.append(dout[:hi - lo])
        m.d.comb += rdata.eq(Cat(*outs))


class _Port:
    """``addr``, ``en``, ``data`` of one port (what the blocks read off ``Memory.read_port()``), and ``reg_en``
    of a registered read port."""

    def __init__(self, addr, en, data, reg_en=None):
        self.addr, self.en, self.data, self.reg_en = addr, en, data, reg_en
