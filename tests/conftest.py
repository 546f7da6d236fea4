"""pytest configuration: the test profiles.

* default: everything but the three groups below;
* ``LBPIPE_FULL=1`` (or ``-m regression``): also the long randomized regressions (random parameter sets, long random
  traces, fuzzing, end-to-end replays on bmv2): CI's profile, which must finish within 90 minutes;
* ``LBPIPE_DEEP=1`` (or ``-m deep``): also every formal proof (``lbpipe prove all --deep``) and every planted-fault
  check of the formal properties (the ``..._caught`` tests), the fast engine's regressions (its metadata blocks,
  million-item runs and wire pipelines), the Verilator lint of every block and box at its defaults, and the RTL test
  variants CI's time cannot hold: about three hours on one core (estimated);
* ``LBPIPE_SYNTH=1`` (or ``-m synthesis``): also the synthesis checks (logic levels against the datasheets), under a
  minute to a quarter of an hour of Yosys each on one core, about two hours for all (estimated). ``lbpipe synth``
  (``./run main``) synthesizes the same designs and exits non-zero when one is over the logic-level budget.
"""

import os

import pytest

_PROFILES = (("regression", "LBPIPE_FULL", "long regression: set LBPIPE_FULL=1 or run with -m regression"),
             ("deep", "LBPIPE_DEEP", "deep checks: set LBPIPE_DEEP=1 or run with -m deep"),
             ("synthesis", "LBPIPE_SYNTH", "long synthesis: set LBPIPE_SYNTH=1 or run with -m synthesis"))


def _planted_fault_proof(item):
    """A formal test that runs a proof on a deliberately broken design (tests/test_formal*.py, named ``..._caught``):
    it shows once that a property can fail, so it belongs with the deep proofs rather than in every CI run."""
    return item.path.name.startswith("test_formal") and getattr(item, "originalname", "").endswith("_caught")


@pytest.hookimpl(tryfirst=True)      # before ``-m`` selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _planted_fault_proof(item):
            item.add_marker(pytest.mark.deep)
    chosen = config.getoption("-m") or ""
    for marker, variable, reason in _PROFILES:
        if os.environ.get(variable) == "1" or marker in chosen:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
