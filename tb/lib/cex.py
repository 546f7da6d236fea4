"""The cocotb side of ``lbpipe replay-cex`` (:mod:`lbpipe.cex`): drive a formal harness's free inputs from a
solver's trace, cycle by cycle, and record the first cycle where one of its assertions fails.

``LBPIPE_CEX`` names a JSON file: ``clock`` (the harness's clock input), ``steps`` (per step, every free input's
value), ``checks`` (per check wire: ``wire``, ``kind`` assert/assume, ``message``) and ``result`` (where to write
what happened). Step ``k``: set the inputs with the clock low, settle, read the check wires (a wire is 1 while its
check holds), then one rising edge. The test itself passes either way; the result file says what failed.
"""

import json
import os
import pathlib

import cocotb
from cocotb.triggers import ReadOnly, Timer


def _holds(handle):
    value = handle.value
    if not value.is_resolvable:      # an X or Z in a check: it does not hold
        return False
    return int(value) == 1


@cocotb.test()
async def replay_counterexample(dut):
    spec = json.loads(pathlib.Path(os.environ["LBPIPE_CEX"]).read_text())
    clock = getattr(dut, spec["clock"])
    checks = [(getattr(dut, c["wire"]), c) for c in spec["checks"]]
    ports = {name: getattr(dut, name) for name in spec["inputs"]}
    result = {"failed_cycle": None, "failed": [], "assumption_cycle": None, "assumptions": []}
    clock.value = 0
    for name, port in ports.items():
        port.value = 0
    await Timer(1, "ns")
    for cycle, inputs in enumerate(spec["steps"]):
        for name, value in inputs.items():
            ports[name].value = value
        await Timer(1, "ns")
        await ReadOnly()
        broken = [c for handle, c in checks if not _holds(handle)]
        assumed = [c["message"] for c in broken if c["kind"] == "assume"]
        failed = [c["message"] for c in broken if c["kind"] == "assert"]
        if assumed and result["assumption_cycle"] is None:
            result["assumption_cycle"], result["assumptions"] = cycle, assumed
        if failed:
            result["failed_cycle"], result["failed"] = cycle, failed
            break
        await Timer(1, "ns")
        clock.value = 1
        await Timer(1, "ns")
        clock.value = 0
    dut._log.info("replay: %s", result)
    pathlib.Path(spec["result"]).write_text(json.dumps(result))
