"""AMD Alveo U280 (xcu280-fsvh2892-2L-e, Virtex UltraScale+ HBM): the figures lbpipe reports against.

lbpipe does not place and route; it synthesizes out of context with Yosys (``synth_xilinx -family xcup``) and
reports resources as a share of this device, and logic levels against the clock budgets below.
"""

__all__ = ["PART", "CAPACITY", "CLOCKS_MHZ", "LEVEL_BUDGET"]

PART = "xcu280-fsvh2892-2L-e"

#: Device capacity (AMD DS963): CLB LUTs and flip-flops, CARRY8 (one per 8 LUTs), block RAM (RAMB36 tiles, each
#: two RAMB18), UltraRAM and DSP slices.
CAPACITY = {
    "lut": 1303680,
    "ff": 2607360,
    "carry8": 162960,
    "ramb36": 2016,
    "ramb18": 4032,
    "uram": 960,
    "dsp": 9024,
}

#: OpenNIC-style shells: user logic at 250 MHz on 512-bit AXI4-Stream; the 100G MAC side at 322 MHz.
CLOCKS_MHZ = {"user": 250, "mac": 322}

#: Logic levels (LUT, MUXF, CARRY8 each one) that fit a clock period on a -2 part, as a rule of thumb.
LEVEL_BUDGET = {250: 6, 322: 4}
