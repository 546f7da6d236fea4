"""The registry of lbpipe blocks: parameters, hardware, golden model, testbench and paper figures of each.

Every CLI command and every generic test iterates this registry, so a block registered once gets Verilog
generation, synthesis reports, trace replay and the generic RTL-versus-golden tests. Each mechanism keeps its
entries in its own module here (``packet``, ``themis``, ...); this module only collects them, in the order of the
datasheets.
"""

from . import flb, laps, packet, pro, selb, themis
from .base import Block, Param, load, parse_params

__all__ = ["Param", "Block", "BLOCKS", "get_block", "parse_params", "load"]

#: Block name -> :class:`Block`: every mechanism's entries, in the order of the datasheets.
BLOCKS = {}
for _module in (packet, themis, laps, pro, flb, selb):
    for _block in _module.BLOCKS:
        if _block.name in BLOCKS:
            raise ValueError(f"block {_block.name!r} registered twice")
        BLOCKS[_block.name] = _block


def get_block(name):
    """The :class:`Block` called ``name``; raises ``KeyError`` listing the known blocks."""
    try:
        return BLOCKS[name]
    except KeyError:
        raise KeyError(f"unknown block {name!r}; known blocks: {', '.join(sorted(BLOCKS))}") from None
