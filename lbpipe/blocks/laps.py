"""Registry entries of LAPS (IEEE ToN; datasheets docs/laps_pst.md and docs/laps_pit.md): the Path Search Table and
the decomposed Path Information Table."""

from .base import Block, Param, load  # noqa: F401

__all__ = ["BLOCKS"]

BLOCKS = []

# -- PST (laps-pst) ---------------------------------------------------------------------------------------------------
# (entry appended below by the PST work)

# -- PIT (laps-pit) ---------------------------------------------------------------------------------------------------
# (entry appended below by the PIT work)
