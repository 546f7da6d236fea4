"""cocotb testbench of the SELB clustering engine (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine
rtl``): the generic tests; the block-specific checks (independent k-means, atomic publish, the waiting tick) are
traces run by tests/test_selb_cluster.py through the same ``trace`` test."""

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import (harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, trace)
