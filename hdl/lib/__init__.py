"""Shared primitives every block builds on: stream and control conventions (``meta``, ``control``), the AXI4-Lite
bridge (``axil``), the AXI4-Stream beat (``axis``), ring buffers (``ring``), a layout-carrying stream FIFO
(``fifo``), residue modulo a constant (``modn``) and the CRC-32 primitive (``crc``)."""
