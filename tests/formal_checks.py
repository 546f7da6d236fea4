"""Checks shared by the formal tests (tests/test_formal*.py): a planted fault must make the prover fail, with a
counterexample, for the planted reason."""

import pathlib
import re

from lbpipe.formal.lib.harness import Proof
from lbpipe.prove import run_proof

__all__ = ["failed_asserts", "expect_fail"]


def failed_asserts(result):
    """Source lines of the assertions the solver's log says failed."""
    text = pathlib.Path(result.log).read_text()
    return [pathlib.Path(path).read_text().splitlines()[int(line) - 1]
            for path, line in re.findall(r"Assert failed in \S+: (\S+?\.py):(\d+)", text)]


def expect_fail(tmp_path, harness, reason, *, method="bmc", depth=16):
    """Run ``harness`` (a planted fault) to ``depth``: the prover fails, writes a VCD, and a failed assertion's
    source line contains ``reason`` (or one of them, for a tuple)."""
    proof = Proof("broken", "planted fault", lambda: harness, method=method, depth=depth, cover=False)
    result = run_proof(proof, outdir=tmp_path, harness=harness)
    assert result.result == "FAIL", f"the prover missed the planted fault ({result.result})"
    assert result.vcd and pathlib.Path(result.vcd).exists(), "no counterexample VCD"
    failed = failed_asserts(result)
    reasons = (reason,) if isinstance(reason, str) else reason
    assert any(r in line for line in failed for r in reasons), f"failed for another reason: {failed}"
