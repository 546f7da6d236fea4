"""pytest configuration: the test profiles.

* default: everything but the two groups below;
* ``LBPIPE_FULL=1`` (or ``-m regression``): also the long randomized regressions, every proof at its own depth, and the
  synthesis checks of the smaller blocks (CI's profile, which must finish within 90 minutes);
* ``LBPIPE_DEEP=1`` (or ``-m deep``): also the deep proofs (``lbpipe prove all --deep``), the million-item runs of
  the fast engine, its wire pipelines, and the Verilator lint of the packet blocks, pipelines and boxes at their defaults: each one to
  eight minutes, together about an hour and a half on one core;
* ``LBPIPE_SYNTH=1`` (or ``-m synthesis``): also the synthesis checks of the large pipelines, each several minutes
  to a quarter of an hour of Yosys on one core. ``lbpipe synth`` (``./run main``) synthesizes the same designs and
  exits non-zero when one is over the logic-level budget.
"""

import os

import pytest

_PROFILES = (("regression", "LBPIPE_FULL", "long regression: set LBPIPE_FULL=1 or run with -m regression"),
             ("deep", "LBPIPE_DEEP", "deep checks: set LBPIPE_DEEP=1 or run with -m deep"),
             ("synthesis", "LBPIPE_SYNTH", "long synthesis: set LBPIPE_SYNTH=1 or run with -m synthesis"))


def pytest_collection_modifyitems(config, items):
    chosen = config.getoption("-m") or ""
    for marker, variable, reason in _PROFILES:
        if os.environ.get(variable) == "1" or marker in chosen:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
