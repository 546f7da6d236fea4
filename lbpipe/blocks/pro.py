"""Registry entries of PRO (paper 003; datasheet docs/pro.md): the sender's orchestrated round-robin path scheduler,
the receiver's out-of-order window with loss recovery, and the sender in the wire."""

from .base import Block, Param, load  # noqa: F401

__all__ = ["BLOCKS"]

BLOCKS = []

# -- orchestrated round robin (pro-rr) ---------------------------------------------------------------------------------
# (entry appended below by the round-robin work)

# -- receiver out-of-order window (pro-ooo) ----------------------------------------------------------------------------
# (entry appended below by the receiver work)

# -- sender in the wire (pro-tx-wire) ----------------------------------------------------------------------------------
# (entry appended below by the round-robin work)
