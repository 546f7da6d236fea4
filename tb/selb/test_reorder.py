"""cocotb testbench of SELB's destination reordering (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine
rtl``): the generic tests (random traces with idle and back-pressure, latency, reset mid-traffic, reset state); the
block-specific checks (hand-worked release orders, timeouts, full buffers, fallback, second reroutes, stale tails,
timer wrap, the independent reference) are traces run by tests/test_selb_reorder.py through the same ``trace``
test."""

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import (harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, trace)
