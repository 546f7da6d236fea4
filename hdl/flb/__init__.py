"""FLB (paper 002): the source edge switch's per-packet path decision (rerouting without reordering)."""
