"""cocotb benches of Themis-S, Themis-D and the two Themis wire pipelines."""
