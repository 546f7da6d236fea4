"""SELB (paper 004): k-means path clustering at the source ToR, rerouting within a cluster, in-network reordering."""
