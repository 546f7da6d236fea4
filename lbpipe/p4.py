"""P4 programs on bmv2: find the open toolchain, turn lbpipe control commands into ``simple_switch_CLI`` commands,
compile a program with ``p4c-bm2-ss`` and run it on frames with ``simple_switch`` (pcap file interfaces).

The programs and their tests are in ``p4/`` (p4/README.md). The toolchain (p4c and bmv2) is not a Python
dependency: :func:`find_toolchain` looks for it on ``PATH``, then in ``~/.cache/lbpipe-p4`` (or ``LBPIPE_P4_DIR``),
then installs it there from the prebuilt tarball in ``../shared/tools/p4`` (or ``LBPIPE_P4_TOOLS``) when that folder
exists. Without it the callers say so in one line (:class:`ToolchainMissing`).
"""

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time

__all__ = ["ToolchainMissing", "find_toolchain", "themis_s_commands", "compile_program", "run_switch", "PROGRAMS",
           "P4_DIR", "load_test", "run_test", "replay"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
P4_DIR = ROOT / "p4"

#: The P4 programs and the lbpipe block whose golden model they follow.
PROGRAMS = {"themis_tor": "themis-s-wire"}

_TOOLS = ("p4c-bm2-ss", "simple_switch", "simple_switch_CLI")


class ToolchainMissing(RuntimeError):
    """p4c-bm2-ss, simple_switch or simple_switch_CLI cannot be found or installed."""


def _cache_dir():
    return pathlib.Path(os.environ.get("LBPIPE_P4_DIR") or pathlib.Path.home() / ".cache" / "lbpipe-p4")


def _shared_tools():
    return pathlib.Path(os.environ.get("LBPIPE_P4_TOOLS") or ROOT.parent / "shared" / "tools" / "p4")


def find_toolchain(install=True):
    """The directory holding the three tools. Looks on PATH, then in the cache directory, then (``install``) runs
    the shared folder's ``install.sh`` into the cache directory. Raises :class:`ToolchainMissing` with one line."""
    found = [shutil.which(t) for t in _TOOLS]
    if all(found) and len({pathlib.Path(f).parent for f in found}) == 1:
        return pathlib.Path(found[0]).parent
    cached = _cache_dir() / "bin"
    if all((cached / t).exists() for t in _TOOLS):
        return cached
    script = _shared_tools() / "install.sh"
    if install and script.exists():
        # One installer at a time (pytest-xdist workers each ask): the others wait here, then find it installed.
        import fcntl
        _cache_dir().parent.mkdir(parents=True, exist_ok=True)
        with open(_cache_dir().parent / "lbpipe-p4.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if all((cached / t).exists() for t in _TOOLS):
                return cached
            done = subprocess.run(["bash", str(script), str(_cache_dir())], capture_output=True, text=True)
        if done.returncode == 0 and all((cached / t).exists() for t in _TOOLS):
            return cached
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainMissing(f"installing the P4 toolchain from {script.parent} failed: {last}")
    raise ToolchainMissing(f"P4 toolchain not found (p4c-bm2-ss, simple_switch on PATH, {cached}, or "
                           f"{script.parent} to install from): see p4/README.md")


def themis_s_commands(ctl, n_paths):
    """``simple_switch_CLI`` lines for p4/themis_tor.p4 from Themis-S control commands (the ``{"table", "index",
    "data"}`` dicts of ``lbpipe trace themis-s-wire``'s ``.ctl.jsonl``), applied in order as the golden model does:
    table 0 (PathMap) entries below ``n_paths`` set, a later write to an index replacing an earlier one, other
    tables and indices ignored. The P4 table holds the final contents."""
    if not isinstance(n_paths, int) or isinstance(n_paths, bool) or not 1 <= n_paths <= 256:
        raise ValueError(f"n_paths must be 1 to 256, not {n_paths!r}")
    pathmap = {}
    for cmd in ctl:
        try:
            table, index, data = int(cmd["table"]), int(cmd["index"]), int(cmd.get("data", 0))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"a control command has integer table, index and data, not {cmd!r}") from None
        if table == 0 and 0 <= index < n_paths:
            pathmap[index] = data & 0xFFFF
    lines = [f"table_set_default themis_config set_n_paths {n_paths}"]
    lines += [f"table_add pathmap set_delta {index} => {pathmap[index]}" for index in sorted(pathmap)]
    return lines


def compile_program(program, out_dir, tools=None):
    """Compile ``program`` (a .p4 path) with p4c-bm2-ss; returns the JSON's path. Raises RuntimeError on errors."""
    tools = tools or find_toolchain()
    program = pathlib.Path(program)
    out = pathlib.Path(out_dir) / (program.stem + ".json")
    done = subprocess.run([str(tools / "p4c-bm2-ss"), str(program), "-o", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"p4c-bm2-ss {program.name} failed: {(done.stderr or done.stdout).strip()}")
    return out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pcap_count(path):
    """Records in a pcap file written so far (a record being written is not counted)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    at, n = 24, 0
    while at + 16 <= len(data):
        caplen = int.from_bytes(data[at + 8:at + 12], "little")
        if at + 16 + caplen > len(data):
            break
        at += 16 + caplen
        n += 1
    return n


def run_switch(json_path, frames, commands, *, tools=None, expect=None, start_delay=5.0, settle=2.0, grace=15.0,
               timeout=120.0):
    """Run ``simple_switch`` on ``frames`` (into port 0) with ``commands`` loaded through ``simple_switch_CLI``;
    returns the frames that left on port 1, in order.

    The switch waits ``start_delay`` seconds before reading its input files, and the commands are loaded in that
    window (checked: a slower load raises RuntimeError, since frames would have met an empty table). It is stopped
    with SIGTERM once port 1's file holds ``expect`` frames, or has not grown for ``settle`` seconds (``grace``
    seconds while it is still empty), or after ``timeout`` seconds."""
    from .trace import read_pcap, write_pcap
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-bmv2-") as tmp:
        tmp = pathlib.Path(tmp)
        write_pcap(tmp / "port0_in.pcap", frames)
        write_pcap(tmp / "port1_in.pcap", [])
        port = _free_port()
        log = open(tmp / "switch.log", "w")
        t0 = time.monotonic()
        switch = subprocess.Popen(
            [str(tools / "simple_switch"), "--use-files", str(int(start_delay)), "-i", f"0@{tmp / 'port0'}",
             "-i", f"1@{tmp / 'port1'}", "--thrift-port", str(port), str(json_path)],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        try:
            _load(tools, port, commands, switch, deadline=t0 + start_delay)
            out = tmp / "port1_out.pcap"
            last, still = -1, time.monotonic()
            while time.monotonic() - t0 < timeout:
                time.sleep(0.2)
                n = _pcap_count(out)
                if expect is not None and n >= expect:
                    break
                if n != last:
                    last, still = n, time.monotonic()
                elif time.monotonic() - still > (settle if n else grace):
                    break
                if switch.poll() is not None:
                    raise RuntimeError(f"simple_switch exited with {switch.returncode} (log {tmp / 'switch.log'})")
        finally:
            switch.send_signal(signal.SIGTERM)
            try:
                switch.wait(10)
            except subprocess.TimeoutExpired:
                switch.kill()
                switch.wait()
            log.close()
        return read_pcap(out) if _pcap_count(out) else []


def _load(tools, port, commands, switch, deadline):
    """Load ``commands`` through simple_switch_CLI once the thrift server answers, before ``deadline``."""
    text = "".join(c + "\n" for c in commands)
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if switch.poll() is not None:
                raise RuntimeError(f"simple_switch exited with {switch.returncode} before its thrift server started")
            if time.monotonic() > deadline:
                raise RuntimeError("simple_switch's thrift server did not start in time")
            time.sleep(0.05)
    done = subprocess.run([str(tools / "simple_switch_CLI"), "--thrift-port", str(port)], input=text,
                          capture_output=True, text=True)
    errors = [line for line in done.stdout.splitlines() if "Error" in line or "Invalid" in line]
    if done.returncode != 0 or errors:
        raise RuntimeError(f"simple_switch_CLI failed: {(errors or [done.stderr.strip()])[0]}")
    if time.monotonic() > deadline:
        raise RuntimeError("loading the table entries took longer than the switch's start delay")


def load_test(name):
    """A test directory ``p4/sim/test-NAME``: its program, parameters, commands, input and expected frames."""
    import json
    from .trace import read_pcap
    where = P4_DIR / "sim" / f"test-{name}"
    if not where.is_dir():
        known = sorted(p.name[5:] for p in (P4_DIR / "sim").glob("test-*"))
        raise ValueError(f"no P4 test {name!r}; tests: {', '.join(known)}")
    spec = json.loads((where / "test.json").read_text())
    return {"dir": where, "program": P4_DIR / spec["program"], "params": spec.get("params", {}),
            "commands": (where / "commands.txt").read_text().splitlines(),
            "frames": read_pcap(where / "packets_in.pcap"), "expected": read_pcap(where / "packets_out.pcap")}


def run_test(name, tools=None, json_path=None):
    """Compile the test's program (unless ``json_path`` is its compiled JSON), run it on the test's input with its
    entries; returns ``(test, frames out)``."""
    test = load_test(name)
    tools = tools or find_toolchain()
    if json_path is not None:
        return test, run_switch(json_path, test["frames"], test["commands"], tools=tools,
                                expect=len(test["expected"]))
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(test["program"], tmp, tools)
        out = run_switch(json_path, test["frames"], test["commands"], tools=tools, expect=len(test["expected"]))
    return test, out


def replay(block, params, frames, ctl, tools=None):
    """``lbpipe replay BLOCK in.pcap --engine bmv2``: the block's P4 program on bmv2 with entries from the control
    commands ``ctl``; returns the frames out. Only the parameters the program models are accepted."""
    programs = {b: name for name, b in PROGRAMS.items()}
    if block not in programs:
        raise ValueError(f"no P4 program for {block}; blocks with one: {', '.join(sorted(programs))}")
    if params.get("cut_through", True) is not True or params.get("fcs", False) is not False:
        raise ValueError(f"{programs[block]}.p4 models {block} with cut_through=true and fcs=false only")
    tools = tools or find_toolchain()
    commands = themis_s_commands(ctl, params.get("n_paths", 256))
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / f"{programs[block]}.p4", tmp, tools)
        return run_switch(json_path, frames, commands, tools=tools, expect=len(frames))
