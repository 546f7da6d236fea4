"""What the test profiles (tests/conftest.py) share: the blocks too large for CI's profile at their defaults."""

__all__ = ["LARGE"]

#: The large pipelines (9,000 to 37,000 LUTs at their defaults): their synthesis takes several minutes to a quarter of
#: an hour on one core and generating their Verilog alone a minute or more. At the defaults their synthesis checks
#: run in the synthesis profile and their lint in the deep one, not in CI's; ``lbpipe synth`` (``./run main``)
#: synthesizes them and exits non-zero when one is over the budget of 6 levels.
LARGE = frozenset({"deparser", "laps-editor", "laps-rx-wire", "laps-tx-wire", "pro-rx-wire", "pro-tx-wire",
                   "themis-d-wire", "themis-s-wire"})
