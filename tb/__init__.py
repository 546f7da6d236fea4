"""lbpipe's cocotb testbenches, grouped like :mod:`lbpipe.hdl`: the shared harness in ``lib``, then one module per
block under ``packet`` and each mechanism's package."""
