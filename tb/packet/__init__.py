"""cocotb benches of the packet I/O stages, one module per block."""
