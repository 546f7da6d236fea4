"""Build and run cocotb testbenches on Amaranth designs under Icarus Verilog.

Each (design, parameter set) gets its own build directory, named from a hash of the generated Verilog, so parallel
test workers and different parameter sets never share a stale ``sim_build``. The Icarus build in it is made once
and reused by every later run of the same Verilog, in any process (it is compiled aside and moved into place
whole); a run's own directory is removed when its tests pass. The cache keeps the newest :data:`CACHE_ENTRIES`
designs.
"""

import hashlib
import json
import os
import pathlib
import re
import shutil
import time
import xml.etree.ElementTree as ET

__all__ = ["BUILD_ROOT", "write_verilog", "run_cocotb", "CocotbFailure"]



def _default_build_root():
    """``build/`` of the repository checkout lbpipe runs from, else the user's cache directory."""
    repo = pathlib.Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").exists():
        return repo / "build"
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "lbpipe"


#: Where generated Verilog and simulator builds go; override with ``LBPIPE_BUILD``.
BUILD_ROOT = pathlib.Path(os.environ.get("LBPIPE_BUILD") or _default_build_root())
#: Designs the simulation cache keeps (by last use); older ones are removed when a new one is written.
CACHE_ENTRIES = 64


class CocotbFailure(AssertionError):
    """A cocotb test failed; the message carries the failing tests and the log location."""


#: The register Yosys's Verilog backend declares in each module and names in every ``always @*`` so that the block
#: runs at time zero.
_KICK = re.compile(r"^(\s*)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;$", re.M)


def _kick_processes(text):
    """Make every combinational process of ``text`` run once after time zero.

    Yosys names a register initialised to 0 in each ``always @*`` so that an event-driven simulator evaluates the
    block at time zero. Under Icarus that event can come before the block waits for it: a block whose inputs are
    registers that keep their initial values then holds X until an input changes (seen on a state-decoded enable,
    which corrupted a FIFO). Setting that register to 1 with ``#0`` (after every process has started) runs each block
    once more; the register drives nothing else. Simulation builds only: ``lbpipe verilog`` writes Amaranth's output
    untouched.
    """
    return _KICK.sub(lambda m: f"{m.group(0)}\n{m.group(1)}initial #0 {m.group(2)}= 1;", text)


def write_verilog(elaboratable, *, name, ports=None, directory=None):
    """Convert ``elaboratable`` to Verilog with the built-in Yosys and write it to ``directory/name.v``.

    Returns the path. ``directory`` defaults to a content-addressed folder under :data:`BUILD_ROOT`.
    """
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import verilog
    kwargs = {"name": name}
    if ports is not None:
        kwargs["ports"] = ports
    text = _kick_processes(verilog.convert(elaboratable, **kwargs))
    cached = directory is None
    if cached:
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        directory = BUILD_ROOT / "sim" / f"{name}-{digest}"
    directory = pathlib.Path(directory)
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.v"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    if cached:
        os.utime(directory)
        if fresh:
            _prune(directory.parent)
    return path


def _prune(root, keep=None, grace=600.0):
    """Remove the least recently used designs under ``root`` beyond the newest ``keep`` (:data:`CACHE_ENTRIES`),
    sparing any used in the last ``grace`` seconds (another process may be running it)."""
    keep = CACHE_ENTRIES if keep is None else keep
    try:
        entries = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    now = time.time()
    for old in entries[keep:]:
        try:
            if now - old.stat().st_mtime > grace:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def run_cocotb(verilog_path, *, toplevel, test_module, testcase=None, extra_env=None, seed=None, waves=False):
    """Compile ``verilog_path`` with Icarus and run the cocotb ``test_module`` against it.

    Raises :class:`CocotbFailure` when any test fails or none ran, leaving the run's directory (log, results) for a
    look; a run whose tests all pass leaves nothing behind but the shared build.
    """
    from cocotb_tools.runner import get_runner
    verilog_path = pathlib.Path(verilog_path)
    # One simulator build per Verilog source, shared by every process: compiled in a directory of this process's
    # own and moved into place whole, so no process ever runs a half-written build.
    build_dir = verilog_path.parent / "icarus"
    build_args = dict(sources=[verilog_path], hdl_toplevel=toplevel, timescale=("1ns", "1ps"), waves=waves)
    runner = get_runner("icarus")
    if waves or not (build_dir / "sim.vvp").exists():
        own = verilog_path.parent / f"icarus-{os.getpid()}"
        runner.build(build_dir=own, always=True, log_file=own / "build.log", **build_args)
        if waves:
            build_dir = own
        else:
            try:
                os.rename(own, build_dir)
            except OSError:          # another process moved its build in first: use that one
                shutil.rmtree(own, ignore_errors=True)
            runner = get_runner("icarus")
    if build_dir.name == "icarus":
        runner.build(build_dir=build_dir, always=False, log_file=build_dir / "reuse.log", **build_args)
    tag = hashlib.sha256(json.dumps([test_module, testcase, sorted((extra_env or {}).items()), seed],
                                    default=str).encode()).hexdigest()[:12]
    test_dir = build_dir / f"run-{tag}-{os.getpid()}"
    test_dir.mkdir(parents=True, exist_ok=True)
    results = test_dir / "results.xml"
    env = {"PYTHONWARNINGS": "ignore"}
    env.update(extra_env or {})
    log = test_dir / "sim.log"
    try:
        runner.test(
            test_module=test_module,
            hdl_toplevel=toplevel,
            testcase=testcase,
            seed=seed,
            extra_env=env,
            build_dir=build_dir,
            test_dir=test_dir,
            results_xml=str(results),
            waves=waves,
            log_file=log,
        )
    except SystemExit:
        # Under pytest the cocotb runner exits on a failing test; report which tests failed and the log instead.
        pass
    _check_results(results, log)
    if not waves:
        shutil.rmtree(test_dir, ignore_errors=True)


def _check_results(results, log):
    if not pathlib.Path(results).exists():
        raise CocotbFailure(f"cocotb wrote no results; see {log}")
    root = ET.parse(results).getroot()
    cases = list(root.iter("testcase"))
    if not cases:
        raise CocotbFailure(f"no cocotb test ran; see {log}")
    failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    if failed:
        tail = ""
        try:
            tail = "\n".join(pathlib.Path(log).read_text().splitlines()[-60:])
        except OSError:
            pass
        raise CocotbFailure(f"cocotb tests failed: {', '.join(failed)}; log {log}\n{tail}")
