"""AMD Alveo data-centre cards as Amaranth platforms, in amaranth-boards' style (amaranth-boards has no Alveo).

Only what a NIC design touches is declared: the 100 MHz system clocks, the QSFP28 GT reference clocks, the PCIe
reference clock, the HBM catastrophic-trip output that must be driven low on HBM parts, and the QSFP LEDs where the
pin is known. Pin numbers come from the boards' published constraints (the OpenNIC shell's ``constr/<board>/pins.xdc``
for the PCIe and QSFP reference clocks and the HBM trip pin, the vendor's master XDC as reproduced by open NIC
projects for the system clocks and LEDs); docs/nic_build.md lists them with their sources.

GT reference clocks are dedicated MGT pins: they take no I/O standard, and a design requests them with ``dir="-"``
and instantiates ``IBUFDS_GTE4`` itself (Amaranth would otherwise put an ``IBUFDS`` there). The QSFP reference
clock of the U280 comes from an SI546 whose frequency select pin picks 156.25 MHz (``fs`` low) or 161.1328125 MHz
(``fs`` high, the CMAC's preferred rate); :data:`QSFP_REFCLK_MHZ` holds both.

lbpipe does not run Vivado; these classes give ``lbpipe build`` the part and the clock facts it writes into the
Tcl, and let a user build a stand-alone (shell-less) design with Amaranth's own Vivado flow.
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, PinsN, Resource, Subsignal  # noqa: F401
from amaranth.vendor import XilinxPlatform

__all__ = ["AlveoU280Platform", "AlveoU250Platform", "AlveoU55CPlatform", "BOARDS", "QSFP_REFCLK_MHZ",
           "get_board"]

#: The two frequencies of the U280's QSFP reference-clock generator (SI546): frequency select low, high.
QSFP_REFCLK_MHZ = (156.25, 161.1328125)


def _gt_refclk(number, p, n, mhz):
    return Resource("qsfp_refclk", number, DiffPairs(p, n, dir="i"), Clock(mhz * 1e6))


def _sysclk(number, p, n):
    return Resource("clk100", number, DiffPairs(p, n, dir="i"), Clock(100e6), Attrs(IOSTANDARD="LVDS"))


class AlveoU280Platform(XilinxPlatform):
    """Alveo U280: Virtex UltraScale+ HBM, xcu280-fsvh2892-2L-e, two QSFP28 cages, 8 GB HBM2.

    Resources: ``clk100`` 0 and 1 (SYSCLK0/1, LVDS), ``qsfp_refclk`` 0 and 1 (QSFP0/1 GT reference clocks, 156.25
    or 161.1328125 MHz), ``qsfp_refclk_fs`` and ``qsfp_refclk_oe`` 0 (QSFP0 clock generator select and output
    enable), ``pcie_refclk`` 0 (100 MHz), ``hbm_cattrip`` 0 (drive low).
    """
    device = "xcu280"
    package = "fsvh2892"
    speed = "2L-e"
    default_clk = "clk100"
    resources = [
        _sysclk(0, "BJ43", "BJ44"),
        _sysclk(1, "BH6", "BJ6"),
        _gt_refclk(0, "T42", "T43", QSFP_REFCLK_MHZ[1]),
        _gt_refclk(1, "P42", "P43", QSFP_REFCLK_MHZ[1]),
        Resource("qsfp_refclk_fs", 0, Pins("G32", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
        Resource("qsfp_refclk_oe", 0, PinsN("H32", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
        Resource("pcie_refclk", 0, DiffPairs("AR15", "AR14", dir="i"), Clock(100e6)),
        Resource("hbm_cattrip", 0, Pins("D32", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
    ]
    connectors = []


class AlveoU250Platform(XilinxPlatform):
    """Alveo U250: Virtex UltraScale+, xcu250-figd2104-2L-e, two QSFP28 cages. Resources: ``qsfp_refclk`` 0 and 1
    (156.25 MHz), ``pcie_refclk`` 0. The system clocks of this card feed its DDR4 banks and are not declared."""
    device = "xcu250"
    package = "figd2104"
    speed = "2L-e"
    default_clk = "qsfp_refclk"
    resources = [
        _gt_refclk(0, "M11", "M10", 156.25),
        _gt_refclk(1, "T11", "T10", 156.25),
        Resource("pcie_refclk", 0, DiffPairs("AM11", "AM10", dir="i"), Clock(100e6)),
    ]
    connectors = []


class AlveoU55CPlatform(XilinxPlatform):
    """Alveo U55C: Virtex UltraScale+ HBM, xcu55c-fsvh2892-2L-e, two QSFP28 cages, 16 GB HBM2. Resources:
    ``qsfp_refclk`` 0 and 1 (161.1328125 MHz), ``pcie_refclk`` 0, ``hbm_cattrip`` 0 (drive low), ``qsfp_led``
    0 and 1 (activity, link green, link yellow)."""
    device = "xcu55c"
    package = "fsvh2892"
    speed = "2L-e"
    default_clk = "qsfp_refclk"
    resources = [
        _gt_refclk(0, "AD42", "AD43", QSFP_REFCLK_MHZ[1]),
        _gt_refclk(1, "AB42", "AB43", QSFP_REFCLK_MHZ[1]),
        Resource("pcie_refclk", 0, DiffPairs("AR15", "AR14", dir="i"), Clock(100e6)),
        Resource("hbm_cattrip", 0, Pins("BE45", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
        Resource("qsfp_led", 0, Subsignal("act", Pins("BL13", dir="o")), Subsignal("stat_g", Pins("BK11", dir="o")),
                 Subsignal("stat_y", Pins("BJ11", dir="o")), Attrs(IOSTANDARD="LVCMOS18")),
        Resource("qsfp_led", 1, Subsignal("act", Pins("BK14", dir="o")), Subsignal("stat_g", Pins("BK15", dir="o")),
                 Subsignal("stat_y", Pins("BL12", dir="o")), Attrs(IOSTANDARD="LVCMOS18")),
    ]
    connectors = []


#: ``lbpipe build --board`` names, with the OpenNIC shell's ``-board`` name for each.
BOARDS = {
    "alveo-u280": (AlveoU280Platform, "au280"),
    "alveo-u250": (AlveoU250Platform, "au250"),
    "alveo-u55c": (AlveoU55CPlatform, "au55c"),
}


def get_board(name):
    """``(platform class, shell board name)`` for a ``--board`` name; ``ValueError`` naming the known boards."""
    if name not in BOARDS:
        raise ValueError(f"unknown board {name!r}; boards: {', '.join(BOARDS)}")
    return BOARDS[name]
