"""cocotb testbench of Themis-D (run through lbpipe.engine.run_rtl or ``lbpipe replay --engine rtl``).

Themis-D's own properties (the NACK cost, the closed-loop properties, real packets) are checked by the pytest
entry points on the outputs these tests produce; this module runs the generic tests.
"""

# The generic tests every block runs, defined once in the harness.
from lbpipe.tb.lib.harness import reset_mid_traffic, reset_state, trace  # noqa: F401
