"""cocotb testbench of FLB's previous-hop table (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine
rtl``): the generic testcases (a trace against the golden model, reset in mid-traffic, the state after reset)."""

from lbpipe.tb.lib.harness import (TB, harness_catches_a_wrong_cycle, harness_catches_a_wrong_output,  # noqa: F401
                                   reset_mid_traffic, reset_state, settings_from_env, trace)
