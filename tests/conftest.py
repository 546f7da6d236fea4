"""pytest configuration: the long randomized regressions run only with LBPIPE_FULL=1 or ``-m regression``."""

import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.environ.get("LBPIPE_FULL") == "1" or "regression" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="long regression: set LBPIPE_FULL=1 or run with -m regression")
    for item in items:
        if "regression" in item.keywords:
            item.add_marker(skip)
