"""LAPS (IEEE ToN): the path tables, path choice and congestion control of the NIC side."""
