"""lbpipe: FPGA data-plane pipelines for multi-path load balancing.

The repository keeps the hardware (``hdl/``), golden models (``sim/``), cocotb testbenches (``tb/``) and board
wrappers (``boards/``) at top level; they install as ``lbpipe.hdl``, ``lbpipe.sim``, ``lbpipe.tb`` and
``lbpipe.boards``.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
