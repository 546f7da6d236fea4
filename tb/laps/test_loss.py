"""cocotb testbench of LAPS per-path loss detection (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine
rtl``)."""

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import (harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, trace)
