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

__all__ = ["ToolchainMissing", "find_toolchain", "themis_s_commands", "themis_d_commands", "compile_program",
           "run_switch", "PROGRAMS", "P4_DIR", "load_test", "run_test", "replay", "themis_d_params",
           "themis_d_classes", "compare", "crc16", "flb_edge_params", "flb_edge_commands", "flb_tick",
           "flb_decision", "flb_route_frames", "replay_items", "ctl_positions", "themis_d_inband",
           "themis_d_golden", "compare_classes", "themis_d_ctl_frame", "themis_s_inband", "golden_between",
           "selb_tor_params", "selb_tor_commands", "selb_cluster_commands", "selb_tick", "selb_decision",
           "selb_reroute_frames", "flb_owd_params", "flb_owd_commands", "flb_owd_tick", "flb_owd_result",
           "flb_owd_frames", "flb_isolate_params", "flb_isolate_commands", "flb_isolate_tick",
           "flb_isolate_result", "flb_isolate_frames", "flb_cnm_params", "flb_cnm_commands", "flb_cnm_tick",
           "flb_cnm_result", "flb_cnm_frames", "selb_reorder_params", "selb_reorder_commands", "selb_reorder_tick",
           "selb_reorder_result", "selb_reorder_frames", "selb_reorder_classes"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
P4_DIR = ROOT / "p4"

#: The P4 programs and the lbpipe block whose golden model they follow.
PROGRAMS = {"themis_tor": "themis-s-wire", "themis_d": "themis-d-wire", "flb_edge": "flb-route",
            "selb_tor": "selb-reroute", "flb_owd": "flb-owd", "flb_isolate": "flb-isolate",
            "flb_cnm": "flb-cnm", "selb_reorder": "selb-reorder"}

#: The largest tables p4/themis_d.p4 is built with (its MAX_QPS and MAX_DEPTH).
THEMIS_D_MAX_QPS = 2048
THEMIS_D_MAX_DEPTH = 128
THEMIS_D_MAX_KEYS = 4096
#: The QP-classifier staging and Themis-D set-up tables (lbpipe.hdl.themis.wire: classifier 0 to 15, Themis-D from
#: 16, set-up 16 and tear-down 17).
_THEMIS_D_BASE = 16

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
    return themis_s_inband([{"ctl": cmd} for cmd in ctl], n_paths, [])[0]


def themis_s_inband(events, n_paths, frames):
    """p4/themis_tor.p4's input for Themis-S control events and frames: ``(simple_switch_CLI lines, frames with
    in-band command frames)``. The commands before the first frame become ``r_pathmap`` words (table 0 entries below
    ``n_paths``, the last write to an index winning, data masked to 16 bits, other tables and indices ignored, as
    the golden model does); the later ones go in-band as they are (op 1), each before the frame its event names
    (:func:`ctl_positions`), and the program applies the same rules."""
    if not isinstance(n_paths, int) or isinstance(n_paths, bool) or not 1 <= n_paths <= 256:
        raise ValueError(f"n_paths must be 1 to 256, not {n_paths!r}")
    placed = ctl_positions(events, len(frames))
    pathmap = {}
    for at, cmd in placed:
        if at == 0 and cmd["table"] == 0 and 0 <= cmd["index"] < n_paths:
            pathmap[cmd["index"]] = cmd["data"] & 0xFFFF
    lines = [f"table_set_default themis_config set_n_paths {n_paths}"]
    lines += [f"register_write r_pathmap {index} {pathmap[index]}" for index in sorted(pathmap)]
    out, k = [], 0
    later = [(at, cmd) for at, cmd in placed if at > 0]
    for at, frame in enumerate(list(frames) + [None]):
        while k < len(later) and later[k][0] == at:
            cmd = later[k][1]
            k += 1
            out.append(themis_d_ctl_frame(1, cmd["table"], cmd["index"], cmd["data"]))
        if frame is not None:
            out.append(bytes(frame))
    return lines, out


def golden_between(block, params, events, frames):
    """A packet block's golden model with control events placed between frames (:func:`ctl_positions`): the frames
    out."""
    from .engine import resolve_block
    block = resolve_block(block)
    model = block.golden(**block.resolve(params))
    placed, out, k = ctl_positions(events, len(frames)), [], 0
    for at, frame in enumerate(frames):
        while k < len(placed) and placed[k][0] == at:
            model.control(placed[k][1])
            k += 1
        result = model.process(frame)
        out += result if isinstance(result, list) else [] if result is None else [result]
    return out


def themis_d_params(params):
    """The ``themis-d-wire`` parameters with their defaults, checked against what p4/themis_d.p4 models; raises
    ValueError with one line for the others."""
    full = {"n_qps": 1600, "queue_depth": 100, "n_paths": 256, "entry_bits": 9, "buckets": 4096, "ways": 4,
            "ipv6": True, "depth": 256}
    unknown = set(params) - set(full)
    if unknown:
        raise ValueError(f"themis-d-wire has no parameter {sorted(unknown)[0]!r}")
    full.update(params)
    from .hdl.themis.themis_d import check_parameters
    check_parameters(n_qps=full["n_qps"], queue_depth=full["queue_depth"], n_paths=full["n_paths"],
                     entry_bits=full["entry_bits"])
    if full["n_qps"] > THEMIS_D_MAX_QPS or full["queue_depth"] > THEMIS_D_MAX_DEPTH:
        raise ValueError(f"themis_d.p4 is built for n_qps <= {THEMIS_D_MAX_QPS} and queue_depth <= "
                         f"{THEMIS_D_MAX_DEPTH} (not {full['n_qps']}, {full['queue_depth']}): raise MAX_QPS/MAX_DEPTH")
    return full


def themis_d_commands(ctl, params):
    """``simple_switch_CLI`` lines for p4/themis_d.p4 from ``themis-d-wire`` control commands all applied before the
    first frame (``lbpipe trace themis-d-wire``'s ``.ctl.jsonl``): :func:`themis_d_inband` with no frames."""
    return themis_d_inband([{"ctl": cmd} for cmd in ctl], params, [])[0]


def _ctl_int(cmd):
    try:
        return {"table": int(cmd["table"]), "index": int(cmd["index"]), "data": int(cmd.get("data", 0))}
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"a control command has integer table, index and data, not {cmd!r}") from None


def ctl_positions(events, n_frames):
    """``[(position, command)]`` of control events: an event ``{"ctl": {...}, "before": K}`` is applied before input
    frame K (counted from 0; absent: before the first frame; K = ``n_frames``: after the last). Positions must not
    go down through the file; raises ValueError with one line otherwise."""
    out, last = [], 0
    for number, event in enumerate(events, 1):
        if set(event) - {"ctl", "before"} or "ctl" not in event:
            raise ValueError(f"control event {number}: holds \"ctl\" and optionally \"before\", not {event!r}")
        at = event.get("before", 0)
        if not isinstance(at, int) or isinstance(at, bool) or not last <= at <= n_frames:
            raise ValueError(f"control event {number}: \"before\" must be an integer from {last} (the previous "
                             f"event's) to {n_frames} (the frames), not {at!r}")
        last = at
        out.append((at, _ctl_int(event["ctl"])))
    return out


def themis_d_ctl_frame(op, table, index, data):
    """An in-band command frame for p4/themis_d.p4 (EtherType 0x88B5, p4/README.md), padded to 60 bytes."""
    import struct
    head = bytes.fromhex("020000000002" "020000000001") + struct.pack("!HBB", THEMIS_D_CTL_TYPE, op, table)
    return head + (index & 0xFFFFFF).to_bytes(3, "big") + struct.pack("!Q", data & (1 << 64) - 1) + bytes(33)


#: The EtherType of themis_d.p4's in-band command frames (IEEE 802 local experimental, as flb_edge.p4's).
THEMIS_D_CTL_TYPE = 0x88B5


def themis_d_inband(events, params, frames):
    """p4/themis_d.p4's input for ``themis-d-wire`` control events and frames: ``(simple_switch_CLI lines, frames
    with in-band command frames)``. The commands before the first frame go to the control plane, the later ones
    in-band, each before the frame the event names (:func:`ctl_positions`). The QP classifier's commands (tables 0
    to 15) run through lbpipe's classifier model: every key it ever stores gets an id (a ``qp_classifier`` entry,
    ``set_key ID``) and the lookup result of each key (``r_key_qp[ID]``: bit 16 hit, the QP below) is written at
    the start and, in-band (op 2), whenever a command changes it (the cuckoo placement is the FPGA table's
    business; a lookup hits exactly when the FPGA's does). Themis-D's set-up and tear-down (tables 16, 17) go as
    they are: initially as ``r_active`` words (indices below ``n_qps``), in-band as op 1 with the command's table
    and index (the program applies the range rule; other tables in-band too, which it ignores)."""
    from .sim.packet.qp_classifier import QpClassifier
    p = themis_d_params(params)
    placed = ctl_positions(events, len(frames))

    def classifier():
        return QpClassifier(n_entries=p["n_qps"], buckets=p["buckets"], ways=p["ways"], ipv6=p["ipv6"])

    universe, probe = set(), classifier()
    for _, cmd in placed:
        if cmd["table"] < _THEMIS_D_BASE:
            probe.control(cmd)
            universe.update(slot[0] for way in probe.slots for slot in way if slot is not None)
    if len(universe) > THEMIS_D_MAX_KEYS:
        raise ValueError(f"themis_d.p4 holds {THEMIS_D_MAX_KEYS} classifier keys, the commands store "
                         f"{len(universe)}")
    keys = sorted(universe)
    ids = {key: i for i, key in enumerate(keys)}
    model, active = classifier(), set()

    def words():
        out = {}
        for key in keys:
            hit, qp = model.lookup(key)
            out[ids[key]] = (1 << 16 | qp) if hit else 0
        return out

    start = [cmd for at, cmd in placed if at == 0]
    for cmd in start:
        if cmd["table"] < _THEMIS_D_BASE:
            model.control(cmd)
        elif cmd["index"] < p["n_qps"] and cmd["table"] == _THEMIS_D_BASE:
            active.add(cmd["index"])
        elif cmd["index"] < p["n_qps"] and cmd["table"] == _THEMIS_D_BASE + 1:
            active.discard(cmd["index"])
    bits = p["entry_bits"]
    lines = [f"table_set_default themis_d_config set_config {p['n_paths']} {p['n_qps']} {p['queue_depth']} "
             f"{(1 << bits) - 1} {1 << (bits - 1)}", "mirroring_add 1 1"]
    lines += [f"table_add qp_classifier set_key {key.qpn:#x} {key.dir} {key.ipv6} {key.local:#x} {key.remote:#x} => "
              f"{ids[key]}" for key in keys]
    now = words()
    lines += [f"register_write r_key_qp {i} {w}" for i, w in sorted(now.items()) if w]
    lines += [f"register_write r_active {q} 1" for q in sorted(active)]
    out, later = [], [(at, cmd) for at, cmd in placed if at > 0]
    k = 0
    for at, frame in enumerate(list(frames) + [None]):
        while k < len(later) and later[k][0] == at:
            cmd = later[k][1]
            k += 1
            if cmd["table"] < _THEMIS_D_BASE:
                model.control(cmd)
                new = words()
                out += [themis_d_ctl_frame(2, 0, i, w) for i, w in sorted(new.items()) if w != now[i]]
                now = new
            else:
                out.append(themis_d_ctl_frame(1, cmd["table"], cmd["index"], cmd["data"]))
        if frame is not None:
            out.append(bytes(frame))
    return lines, out


def themis_d_golden(events, params, frames):
    """The golden model's frames out for control events placed between frames (:func:`ctl_positions`), and for each
    frame out the QP whose order it keeps: the QP the golden classifier gave the input frame it came from, at that
    frame's time (a data frame or NACK classified to a QP below ``n_qps``, set up or not), else None."""
    from .hdl.lib.meta import PacketKind
    from .sim.packet.parser import parse
    from .sim.packet.qp_classifier import item_key
    from .sim.themis.wire import ThemisDWireModel
    p = themis_d_params(params)
    placed = ctl_positions(events, len(frames))
    model = ThemisDWireModel(**p)
    out, classes, k = [], [], 0
    kinds = (PacketKind.DATA.value, PacketKind.NACK.value)
    for at, frame in enumerate(frames):
        while k < len(placed) and placed[k][0] == at:
            model.control(placed[k][1])
            k += 1
        meta = parse(bytes(frame))
        item = {n: meta[n] for n in ("kind", "ipv6", "src_ip", "dst_ip", "dqpn", "psn", "msn", "tag")}
        hit, qp = model.classifier.lookup(item_key(item)) if item["kind"] in kinds else (0, 0)
        qp = qp if hit and qp < p["n_qps"] else None
        sent = model.process(frame)
        out += sent
        classes += [qp] * len(sent)
    return out, classes


def compare_classes(expected, classes, out):
    """None when ``out`` (bmv2's frames) holds the frames ``expected`` (the golden model's) byte for byte, in the
    golden order within each class (``classes``: one per expected frame, e.g. :func:`themis_d_golden`'s); else one
    line saying how it differs. bmv2's frames are given the classes of the equal expected frames in turn."""
    if len(out) != len(expected):
        return f"bmv2 sent {len(out)} frames, the golden model {len(expected)}"
    if sorted(out) != sorted(expected):
        return "bmv2 sent other frames than the golden model"
    pending = {}
    for frame, c in zip(expected, classes):
        pending.setdefault(frame, []).append(c)
    got = [pending[frame].pop(0) for frame in out]
    for qp in sorted(set(classes), key=lambda q: -1 if q is None else q):
        a = [f for f, c in zip(out, got) if c == qp]
        b = [f for f, c in zip(expected, classes) if c == qp]
        if a != b:
            first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            return f"{'QP ' + str(qp) if qp is not None else 'frames of no QP'}: order differs at its frame #{first}"
    return None


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
               timeout=120.0, after=None, spacing=None):
    """Run ``simple_switch`` on ``frames`` (into port 0) with ``commands`` loaded through ``simple_switch_CLI``;
    returns the frames that left on port 1, in order.

    The switch waits ``start_delay`` seconds before reading its input files, and the commands are loaded in that
    window (checked: a slower load raises RuntimeError, since frames would have met an empty table). It is stopped
    with SIGTERM once port 1's file holds ``expect`` frames, or has not grown for ``settle`` seconds (``grace``
    seconds while it is still empty), or after ``timeout`` seconds. With ``after`` (simple_switch_CLI commands, e.g.
    ``register_read``), returns ``(frames, the CLI's output for them)``, run before the switch is stopped."""
    from .trace import read_pcap, write_pcap
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-bmv2-") as tmp:
        tmp = pathlib.Path(tmp)
        if spacing is None:
            write_pcap(tmp / "port0_in.pcap", frames)
        else:
            _write_spaced(tmp / "port0_in.pcap", frames, spacing)
        write_pcap(tmp / "port1_in.pcap", [])
        port = _free_port()
        log = open(tmp / "switch.log", "w")
        t0 = time.monotonic()
        switch = subprocess.Popen(
            [str(tools / "simple_switch"), "--use-files", str(int(start_delay)), "-i", f"0@{tmp / 'port0'}",
             "-i", f"1@{tmp / 'port1'}", "--thrift-port", str(port),
             # a notifications socket of this run's own (the default is one per device id in /tmp, shared by
             # switches started side by side, as parallel tests do: a second start failed "address already in use")
             "--notifications-addr", f"ipc://{tmp / 'notifications.ipc'}", str(json_path)],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        try:
            # egress queues deep enough for the whole input: with the default 64 frames, a loaded machine lost runs
            # of frames when a short program outran the output file's writer
            commands = [*commands, f"set_queue_depth {max(4096, len(frames))}"]
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
            if after is not None:
                done = subprocess.run([str(tools / "simple_switch_CLI"), "--thrift-port", str(port)],
                                      input="".join(c + "\n" for c in after), capture_output=True, text=True)
                after_out = done.stdout
        finally:
            switch.send_signal(signal.SIGTERM)
            try:
                switch.wait(10)
            except subprocess.TimeoutExpired:
                switch.kill()
                switch.wait()
            log.close()
        frames_out = read_pcap(out) if _pcap_count(out) else []
        return frames_out if after is None else (frames_out, after_out)


def _write_spaced(path, frames, spacing):
    """A pcap file of ``frames`` whose timestamps are ``spacing`` seconds apart (bmv2's file interface sends each
    frame at its timestamp, relative to the first)."""
    import struct
    step = round(spacing * 1_000_000)
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, frame in enumerate(frames):
            t = i * step
            f.write(struct.pack("<IIII", t // 1_000_000, t % 1_000_000, len(frame), len(frame)) + bytes(frame))


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
    frames = read_pcap(where / "packets_in.pcap")
    # trace.pcap: the frames without in-band command frames, when the test has commands between frames.
    trace = read_pcap(where / "trace.pcap") if (where / "trace.pcap").exists() else frames
    return {"dir": where, "program": P4_DIR / spec["program"], "params": spec.get("params", {}),
            "commands": (where / "commands.txt").read_text().splitlines(),
            "frames": frames, "trace": trace, "expected": read_pcap(where / "packets_out.pcap")}


def _run(json_path, frames, commands, tools, expect, stats):
    """run_switch, reading themis_d.p4's diagnostics into ``stats`` (a dict) when given."""
    if stats is None:
        return run_switch(json_path, frames, commands, tools=tools, expect=expect)
    out, text = run_switch(json_path, frames, commands, tools=tools, expect=expect,
                           after=["register_read r_stats"])
    for line in text.splitlines():
        if "r_stats=" in line:
            values = [int(v) for v in line.split("=", 1)[1].split(",")]
            stats.update(nack_scans=values[0], nack_passes=values[1], pushed_behind=values[2])
    return out


def run_test(name, tools=None, json_path=None, stats=None):
    """Compile the test's program (unless ``json_path`` is its compiled JSON), run it on the test's input with its
    entries; returns ``(test, frames out)``. ``stats`` (a dict, themis_d.p4 only) receives the program's
    diagnostics: ``nack_scans``, ``nack_passes`` (extra passes of NACKs), ``pushed_behind`` (recirculations of
    frames behind a busy QP)."""
    test = load_test(name)
    tools = tools or find_toolchain()
    if json_path is not None:
        return test, _run(json_path, test["frames"], test["commands"], tools, len(test["expected"]), stats)
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(test["program"], tmp, tools)
        out = _run(json_path, test["frames"], test["commands"], tools, len(test["expected"]), stats)
    return test, out


def themis_d_classes(frames, params, ctl):
    """For each frame, the QP whose order themis_d.p4 keeps (a data frame or NACK of a set-up QP, by the golden
    model's classifier after ``ctl``), or None (every other frame)."""
    from .hdl.lib.meta import PacketKind
    from .sim.packet.parser import parse
    from .sim.themis.wire import ThemisDWireModel
    model = ThemisDWireModel(**themis_d_params(params))
    for cmd in ctl:
        model.control(cmd)
    out = []
    for frame in frames:
        meta = parse(bytes(frame))
        item = {k: meta[k] for k in ("kind", "ipv6", "src_ip", "dst_ip", "dqpn", "psn", "msn", "tag")}
        hit = model.classifier.process(item)
        qp = hit["qp"] if hit["qp_hit"] else None
        kinds = (PacketKind.DATA.value, PacketKind.NACK.value)
        if qp is not None and item["kind"] in kinds and qp < model.themis.n_qps and model.themis.flows[qp].active:
            out.append(qp)
        else:
            out.append(None)
    return out


def compare(block, params, ctl, expected, out, events=None, frames=None):
    """None when ``out`` (bmv2's frames) is what the golden model sent (``expected``) as the program models it, else
    one line saying how it differs. themis-s-wire: byte for byte, in order. themis-d-wire: the same frames, and
    byte for byte in order within each QP and among the frames of no QP; frames of different QPs may leave in
    another interleaving, since a recirculated NACK and the frames pushed behind it leave later (p4/README.md).
    selb-reorder: the same frames, each flow's DATA packets in the golden model's order, the other frames in theirs
    (:func:`selb_reorder_classes`)."""
    if len(out) != len(expected):
        return f"bmv2 sent {len(out)} frames, the golden model {len(expected)}"
    if block == "selb-reorder":
        # each flow's DATA packets in the golden model's release order; flows interleave as bmv2 serves them
        return compare_classes(expected, selb_reorder_classes(expected, selb_reorder_params(params)["n_flows"]), out)
    if block != "themis-d-wire":
        wrong = [i for i, (a, b) in enumerate(zip(out, expected)) if a != b]
        return f"{len(wrong)} frames differ, first #{wrong[0]}" if wrong else None
    if events is not None and frames is not None:
        # The QP of each frame at its time (commands between frames: lbpipe/p4.py themis_d_golden).
        return compare_classes(expected, themis_d_golden(events, params, frames)[1], out)
    if sorted(out) != sorted(expected):
        return "bmv2 sent other frames than the golden model"
    got, want = themis_d_classes(out, params, ctl), themis_d_classes(expected, params, ctl)
    for qp in sorted(set(want), key=lambda q: -1 if q is None else q):
        a = [f for f, c in zip(out, got) if c == qp]
        b = [f for f, c in zip(expected, want) if c == qp]
        if a != b:
            first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            return f"{'QP ' + str(qp) if qp is not None else 'frames of no QP'}: order differs at its frame #{first}"
    return None


def replay(block, params, frames, ctl, tools=None):
    """``lbpipe replay BLOCK in.pcap --engine bmv2``: the block's P4 program on bmv2 with entries from the control
    commands ``ctl`` (commands, or control events whose ``"before"`` places them between frames: those go in-band,
    :func:`ctl_positions`); returns the frames out. Only the parameters the program models are accepted."""
    programs = {b: name for name, b in PROGRAMS.items()}
    if block not in programs:
        raise ValueError(f"no P4 program for {block}; blocks with one: {', '.join(sorted(programs))}")
    if block in ("flb-route", "selb-reroute", "flb-owd", "flb-isolate", "flb-cnm", "selb-reorder"):
        raise ValueError(f"{block} is a metadata block: its bmv2 engine replays a metadata trace (replay_items)")
    expect = len(frames)
    if block == "themis-d-wire":
        full = themis_d_params(params)
        longest = max((len(f) for f in frames), default=0)
        if longest > 64 * full["depth"]:
            raise ValueError(f"themis_d.p4 does not cut frames longer than depth x 64 = {64 * full['depth']} bytes "
                             f"(a frame of {longest})")
        events = [c if "ctl" in c else {"ctl": c} for c in ctl]
        commands, frames = themis_d_inband(events, params, frames)
    else:
        if params.get("cut_through", True) is not True or params.get("fcs", False) is not False:
            raise ValueError(f"{programs[block]}.p4 models {block} with cut_through=true and fcs=false only")
        events = [c if "ctl" in c else {"ctl": c} for c in ctl]
        commands, frames = themis_s_inband(events, params.get("n_paths", 256), frames)
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / f"{programs[block]}.p4", tmp, tools)
        return run_switch(json_path, frames, commands, tools=tools, expect=expect)


# -- FLB (p4/flb_edge.p4, block flb-route) ----------------------------------------------------------------------------

#: The largest tables p4/flb_edge.p4 is built with (its MAX_PATHS and MAX_DESTS); its flow table is 2^16 (CRC16).
FLB_MAX_PATHS = 8
FLB_MAX_DESTS = 256
#: The test harness header of flb_edge.p4 (p4/README.md): its EtherType and its layout (offsets from the header).
FLB_TICK_TYPE = 0x88B5
FLB_TICK_LEN = 28


def crc16(data):
    """v1model's ``crc16`` (bmv2): CRC-16/ARC, polynomial 0x8005 reflected (0xA001), initial value 0, no final XOR."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def flb_edge_params(params):
    """The ``flb-route`` parameters with their defaults, checked against what p4/flb_edge.p4 models (every
    ``margin`` the block takes at 16-bit ticks); raises ValueError with one line for the others."""
    full = {"n_flows": 65536, "n_dests": 16, "n_paths": 8, "time_bits": 16, "delay_bits": 16, "timeout": 4096,
            "margin": 0}
    if params.get("upd"):
        raise ValueError("flb_edge.p4 models flb-route without its upd stream (upd=false): delays and isolated sets "
                         "come as control commands")
    if params.get("force"):
        raise ValueError("flb_edge.p4 models flb-route without forced paths (force=false): it decides every packet")
    params = {k: v for k, v in params.items() if k not in ("upd", "force")}
    unknown = set(params) - set(full)
    if unknown:
        raise ValueError(f"flb-route has no parameter {sorted(unknown)[0]!r}")
    full.update(params)
    from .hdl.flb.route import check_parameters
    check_parameters(**full)
    if (full["n_flows"], full["time_bits"], full["delay_bits"]) != (65536, 16, 16) or \
            full["n_paths"] > FLB_MAX_PATHS or full["n_dests"] > FLB_MAX_DESTS:
        raise ValueError(f"flb_edge.p4 models n_flows 65536 (CRC16), 16-bit ticks and delays, n_paths <= "
                         f"{FLB_MAX_PATHS} and n_dests <= {FLB_MAX_DESTS}")
    return full


def _flb_ctl(cmd):
    try:
        table, index, data = int(cmd["table"]), int(cmd["index"]), int(cmd.get("data", 0))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"a control command has integer table, index and data, not {cmd!r}") from None
    if not (0 <= table < 1 << 8 and 0 <= index < 1 << 24 and 0 <= data < 1 << 64):
        raise ValueError(f"a ctl command has an 8-bit table, 24-bit index and 64-bit data, not {cmd!r}")
    return table, index, data


def flb_edge_commands(ctl, params, routes):
    """``simple_switch_CLI`` lines for p4/flb_edge.p4: the configuration (``margin`` last), the routes (``(prefix,
    length, dest)``: ``dest_edge`` LPM entries), and the delay and isolation registers from ``flb-route`` control
    commands applied in order with the block's rules (table 0 DELAY ``dest << 4 | path``, table 1 ISOLATE ``dest``;
    an out-of-range destination, path or value, or another table, changes nothing; the last write wins)."""
    p = flb_edge_params(params)
    delay, isolated = {}, {}
    for cmd in ctl:
        table, index, data = _flb_ctl(cmd)
        if table == 0 and index >> 4 < p["n_dests"] and index & 15 < p["n_paths"] and data < 1 << 16:
            delay[(index >> 4) * FLB_MAX_PATHS + (index & 15)] = data
        elif table == 1 and index < p["n_dests"] and data < 1 << p["n_paths"]:
            isolated[index] = data
    lines = [f"table_set_default flb_config set_config {p['n_paths']} {p['n_dests']} {p['timeout']} {p['margin']}"]
    lines += [f"table_add dest_edge set_dest {prefix}/{length} => {dest}" for prefix, length, dest in routes]
    lines += [f"register_write r_delay {i} {delay[i]}" for i in sorted(delay)]
    lines += [f"register_write r_isolated {i} {isolated[i]}" for i in sorted(isolated)]
    return lines


def flb_tick(op=0, *, kind=0, tag=0, now=0, table=0, index=0, data=0, ether_type=0x0800):
    """The test harness header of flb_edge.p4 as it goes in (the output fields zero)."""
    import struct
    return struct.pack("!BBHIB", op, kind, tag, now, table) + index.to_bytes(3, "big") + \
        struct.pack("!QHHBBH", data, 0, 0, 0, 0, ether_type)


def flb_decision(frame):
    """The decision flb_edge.p4 wrote into a frame's harness header: ``{kind, tag, now, flow, dest, path, ok, new,
    rerouted}``, or None for a frame without it."""
    import struct
    if len(frame) < 14 + FLB_TICK_LEN or struct.unpack_from("!H", frame, 12)[0] != FLB_TICK_TYPE:
        return None
    _, kind, tag, now = struct.unpack_from("!BBHI", frame, 14)
    flow, dest, path, flags = struct.unpack_from("!HHBB", frame, 14 + 20)
    return {"kind": kind, "tag": tag, "now": now, "flow": flow, "dest": dest, "path": path, "ok": flags & 1,
            "new": flags >> 1 & 1, "rerouted": flags >> 2 & 1}


_CRC_INVERSE = []


def _port_for(prefix, flow):
    """The last two bytes ``x`` with ``crc16(prefix + x) == flow``. CRC-16/ARC is linear with initial value 0 and
    no final XOR, so ``crc16(prefix + x) = crc16(prefix + 00) ^ crc16(x)``, and ``x -> crc16(x)`` is a bijection."""
    if not _CRC_INVERSE:
        basis = [crc16((1 << b).to_bytes(2, "big")) for b in range(16)]
        table = [0] * 65536
        for x in range(1, 65536):
            low = x & -x
            table[x] = table[x ^ low] ^ basis[low.bit_length() - 1]
        inverse = [0] * 65536
        for x, c in enumerate(table):
            inverse[c] = x
        _CRC_INVERSE.extend(inverse)
    return _CRC_INVERSE[flow ^ crc16(prefix + b"\0\0")]


def flb_route_frames(events, params):
    """A ``flb-route`` metadata trace (``lbpipe trace flb-route``) as p4/flb_edge.p4's input: ``(commands, frames,
    n_items)``. Commands before the first item go to the control plane (:func:`flb_edge_commands`), later ones
    in-band (harness op 1, in trace order). Each item becomes an IPv4/UDP frame from 10.255.0.1 port 4096 to
    10.0.DEST.1 (DEST's /24 routed to DEST, for every DEST the item field can hold) whose destination port makes
    the CRC16 of its 5-tuple the item's flow; its tick, kind and tag ride in the harness header."""
    import ipaddress
    import struct
    p = flb_edge_params(params)
    dest_values = min(1 << max(1, (p["n_dests"] - 1).bit_length()), FLB_MAX_DESTS)
    routes = [(f"10.0.{d}.0", 24, d) for d in range(dest_values)]
    first = next((i for i, e in enumerate(events) if "item" in e), len(events))
    commands = flb_edge_commands([e["ctl"] for e in events[:first] if "ctl" in e], p, routes)
    src = ipaddress.IPv4Address("10.255.0.1").packed
    eth = bytes.fromhex("020000000002" "020000000001") + struct.pack("!H", FLB_TICK_TYPE)
    frames, n_items = [], 0
    for event in events[first:]:
        if "ctl" in event:
            table, index, data = _flb_ctl(event["ctl"])
            frames.append(eth + flb_tick(1, table=table, index=index, data=data) + bytes(32))
            continue
        item = event["item"]
        dest, flow, now = item.get("dest", 0), item.get("flow", 0), item.get("now", 0)
        if not (0 <= dest < dest_values and 0 <= flow < 65536 and 0 <= now < 65536):
            raise ValueError(f"flb_edge.p4 takes flows below 65536, ticks below 65536 and destinations below "
                             f"{dest_values}, not {item!r}")
        dst = ipaddress.IPv4Address(f"10.0.{dest}.1").packed
        dport = _port_for(src + dst + bytes([17]) + struct.pack("!H", 4096), flow)
        udp = struct.pack("!HHHH", 4096, dport, 8 + 18, 0) + bytes(18)
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, src, dst))
        total = sum(struct.unpack("!10H", ip))
        total = (total & 0xFFFF) + (total >> 16)
        struct.pack_into("!H", ip, 10, ~((total & 0xFFFF) + (total >> 16)) & 0xFFFF)
        frames.append(eth + flb_tick(0, kind=item.get("kind", 0), tag=item.get("tag", 0), now=now) + bytes(ip) + udp)
        n_items += 1
    return commands, frames, n_items


def replay_items(block, params, events, tools=None):
    """``lbpipe replay flb-route TRACE --engine bmv2``: the metadata trace through p4/flb_edge.p4 on bmv2
    (:func:`flb_route_frames`); returns the output items, the golden model's fields read off the frames."""
    if block == "selb-reroute":
        return _selb_replay_items(params, events, tools)
    if block == "flb-owd":
        return _owd_replay_items(params, events, tools)
    if block == "flb-isolate":
        return _isolate_replay_items(params, events, tools)
    if block == "flb-cnm":
        return _cnm_replay_items(params, events, tools)
    if block == "selb-reorder":
        return _reorder_replay_items(params, events, tools)
    if block != "flb-route":
        raise ValueError(f"--engine bmv2 runs metadata traces of flb-route (flb_edge.p4), selb-reroute "
                         f"(selb_tor.p4), flb-owd (flb_owd.p4), flb-isolate (flb_isolate.p4), flb-cnm "
                         f"(flb_cnm.p4) and selb-reorder (selb_reorder.p4) only, not {block}")
    commands, frames, n_items = flb_route_frames(events, params)
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / "flb_edge.p4", tmp, tools)
        out = run_switch(json_path, frames, commands, tools=tools, expect=n_items)
    items = []
    for frame in out:
        d = flb_decision(frame)
        items.append({"kind": d["kind"], "flow": d["flow"], "dest": d["dest"], "now": d["now"], "tag": d["tag"],
                      "path": d["path"], "new": d["new"], "rerouted": d["rerouted"], "ok": d["ok"]})
    return items


# -- SELB (p4/selb_tor.p4, block selb-reroute) -------------------------------------------------------------------------

#: The test harness header of selb_tor.p4 (p4/README.md): its EtherType and length; its flow table is built with
#: 4,096 entries, its cluster tables with 64 paths and 64 clusters.
SELB_TICK_TYPE = 0x88B5
SELB_TICK_LEN = 37
SELB_MAX_CLUSTERS = 64
#: The control plane's register tables (harness op 2, ``table``): the register each writes.
SELB_REGISTERS = {0: "r_cluster", 1: "r_congested", 2: "r_alt", 3: "r_shortest"}


def selb_tor_params(params):
    """The ``selb-reroute`` parameters with their defaults, checked against what p4/selb_tor.p4 models (every
    value the block takes, but ``time_bits`` 16 only); raises ValueError with one line for the others."""
    full = {"n_flows": 1024, "n_paths": 64, "time_bits": 16, "hold": 32, "lfsr_seed": 0xB5AD}
    unknown = set(params) - set(full)
    if unknown:
        raise ValueError(f"selb-reroute has no parameter {sorted(unknown)[0]!r}")
    full.update(params)
    from .hdl.selb.reroute import check_parameters
    check_parameters(**full)
    if full["time_bits"] != 16:
        raise ValueError("selb_tor.p4 models time_bits 16 only (16-bit ticks)")
    return full


def _selb_cp_ok(table, index, data, n_paths):
    """selb_tor.p4's range rules for a control-plane register write (harness op 2)."""
    return (table == 0 and index < n_paths and data < SELB_MAX_CLUSTERS) or \
        (table == 1 and index < n_paths and data < 2) or \
        (table == 2 and index < SELB_MAX_CLUSTERS and data < 1 << n_paths) or \
        (table == 3 and index == 0 and data < n_paths)


def selb_cluster_commands(published, k):
    """The control plane's translation of ``selb-cluster``'s published result (sim/selb/cluster.py ``Cluster``'s
    ``published``: per path its cluster, backup flag, congested flag; the shortest path) into selb_tor.p4 register
    writes (``{table, index, data}``, harness op 2): every path's cluster and congested flag, each of the ``k``
    clusters' ``alt`` mask (its paths not congested; for a wholly congested cluster, the backup set's paths not
    congested, as the block publishes it), the shortest path."""
    cluster, backup, congested, shortest = published
    cmds = [{"table": 0, "index": p, "data": c} for p, c in enumerate(cluster)]
    cmds += [{"table": 1, "index": p, "data": int(c)} for p, c in enumerate(congested)]
    spare = sum(1 << p for p, b in enumerate(backup) if b and not congested[p])
    for j in range(k):
        mask = sum(1 << p for p, c in enumerate(cluster) if c == j and not congested[p])
        cmds.append({"table": 2, "index": j, "data": mask or spare})
    cmds.append({"table": 3, "index": 0, "data": shortest})
    return cmds


def selb_tor_commands(params, writes=()):
    """``simple_switch_CLI`` lines for p4/selb_tor.p4: the configuration (n_paths, n_flows - 1 as the flow mask,
    hold), the LFSR's seed, then the control-plane register writes ``writes`` (``{table, index, data}``) applied in
    order with the program's range rules (out of range or another table: nothing; the last write wins)."""
    p = selb_tor_params(params)
    state = {("r_lfsr", 0): p["lfsr_seed"]}
    for cmd in writes:
        table, index, data = _flb_ctl(cmd)
        if _selb_cp_ok(table, index, data, p["n_paths"]):
            state[(SELB_REGISTERS[table], index)] = data
    lines = [f"table_set_default selb_config set_config {p['n_paths']} {p['n_flows'] - 1} {p['hold']}"]
    return lines + [f"register_write {name} {index} {data}" for (name, index), data in state.items()]


def selb_tick(op=0, *, kind=0, tag=0, now=0, path=0, table=0, index=0, data=0, ether_type=0x0800):
    """The test harness header of selb_tor.p4 as it goes in (the output fields zero)."""
    import struct
    return struct.pack("!BBHIBB", op, kind, tag, now, path, table) + index.to_bytes(3, "big") + \
        struct.pack("!Q", data) + bytes(14) + struct.pack("!H", ether_type)


def selb_decision(frame):
    """What selb_tor.p4 wrote into a frame's harness header: ``{kind, tag, now, path_in, flow, path, ok, tail,
    epoch, stale, congested, new, cluster, shortest, alt}``, or None for a frame without it."""
    import struct
    if len(frame) < 14 + SELB_TICK_LEN or struct.unpack_from("!H", frame, 12)[0] != SELB_TICK_TYPE:
        return None
    _, kind, tag, now, path_in = struct.unpack_from("!BBHIB", frame, 14)
    flow, path, flags, cluster, shortest, alt = struct.unpack_from("!HBBBBQ", frame, 14 + 21)
    return {"kind": kind, "tag": tag, "now": now, "path_in": path_in, "flow": flow, "path": path,
            "ok": flags & 1, "tail": flags >> 1 & 1, "epoch": flags >> 2 & 1, "stale": flags >> 3 & 1,
            "congested": flags >> 4 & 1, "new": flags >> 5 & 1, "cluster": cluster, "shortest": shortest, "alt": alt}


def _ipv4_udp(src, dst, sport, flow):
    """An IPv4/UDP packet (18 zero bytes of payload) whose destination port makes the CRC16 of its 5-tuple
    ``flow``."""
    import struct
    dport = _port_for(src + dst + bytes([17]) + struct.pack("!H", sport), flow)
    udp = struct.pack("!HHHH", sport, dport, 8 + 18, 0) + bytes(18)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, src, dst))
    total = sum(struct.unpack("!10H", ip))
    total = (total & 0xFFFF) + (total >> 16)
    struct.pack_into("!H", ip, 10, ~((total & 0xFFFF) + (total >> 16)) & 0xFFFF)
    return bytes(ip) + udp


def selb_reroute_frames(events, params):
    """A ``selb-reroute`` metadata trace (``lbpipe trace selb-reroute``) as p4/selb_tor.p4's input: ``(commands,
    frames, n_items)``. The fixed encoding (p4/README.md): the control plane puts every path in its own cluster
    (``r_cluster[p] = p``); before each item, op-2 register writes set what differs of the item's ``congested``
    (``r_congested[path]``), ``alt`` (``r_alt[path]``) and ``shortest``, so the program's lookup gives the item's
    fields; the block's own ``ctl`` commands go in-band as op 1 (ignored, as by the block). Each item becomes an
    IPv4/UDP frame from 10.255.0.1 port 4096 to 10.0.0.1 whose destination port makes the CRC16 of its 5-tuple the
    item's flow; its tick, lookup path, kind and tag ride in the harness header."""
    import ipaddress
    import struct
    p = selb_tor_params(params)
    n = p["n_paths"]
    commands = selb_tor_commands(p, [{"table": 0, "index": q, "data": q} for q in range(n)])
    src, dst = ipaddress.IPv4Address("10.255.0.1").packed, ipaddress.IPv4Address("10.0.0.1").packed
    eth = bytes.fromhex("020000000002" "020000000001") + struct.pack("!H", SELB_TICK_TYPE)
    congested, alt, shortest = [0] * n, [0] * n, 0
    frames, n_items = [], 0

    def write(table, index, data):
        frames.append(eth + selb_tick(2, table=table, index=index, data=data) + bytes(32))

    for event in events:
        if "ctl" in event:
            table, index, data = _flb_ctl(event["ctl"])
            frames.append(eth + selb_tick(1, table=table, index=index, data=data) + bytes(32))
            continue
        item = event["item"]
        flow, now, path = item.get("flow", 0), item.get("now", 0), item.get("path", 0)
        cg, mask, sh = item.get("congested", 0), item.get("alt", 0), item.get("shortest", 0)
        if not (0 <= flow < p["n_flows"] and 0 <= now < 65536 and 0 <= path < n and cg in (0, 1)
                and 0 <= mask < 1 << n and 0 <= sh < n):
            raise ValueError(f"selb_tor.p4 takes flows below n_flows, 16-bit ticks, paths below n_paths, an "
                             f"n_paths-bit alt, not {item!r}")
        if congested[path] != cg:
            congested[path] = cg
            write(1, path, cg)
        if alt[path] != mask:
            alt[path] = mask
            write(2, path, mask)
        if shortest != sh:
            shortest = sh
            write(3, 0, sh)
        tick = selb_tick(0, kind=item.get("kind", 0), tag=item.get("tag", 0), now=now, path=path)
        frames.append(eth + tick + _ipv4_udp(src, dst, 4096, flow))
        n_items += 1
    return commands, frames, n_items


def _selb_replay_items(params, events, tools):
    commands, frames, n_items = selb_reroute_frames(events, params)
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / "selb_tor.p4", tmp, tools)
        out = run_switch(json_path, frames, commands, tools=tools, expect=n_items)
    items = []
    for frame in out:
        d = selb_decision(frame)
        items.append({"kind": d["kind"], "tag": d["tag"], "flow": d["flow"], "path": d["path"], "tail": d["tail"],
                      "epoch": d["epoch"]})
    return items


# -- FLB one-way delay (p4/flb_owd.p4, block flb-owd) ------------------------------------------------------------------

#: The test harness header of flb_owd.p4 (p4/README.md): its EtherType and length; its tables are built for 1,024
#: source edges of 16 paths.
OWD_TICK_TYPE = 0x88B5
OWD_TICK_LEN = 42
OWD_ETH = bytes.fromhex("020000000002" "020000000001") + OWD_TICK_TYPE.to_bytes(2, "big")


def flb_owd_params(params):
    """The ``flb-owd`` parameters with their defaults, checked by the block's own rules (flb_owd.p4 models every
    value the block takes); raises ValueError with one line for the others."""
    full = {"n_edges": 16, "n_paths": 8, "time_bits": 16, "delay_bits": 16}
    unknown = set(params) - set(full)
    if unknown:
        raise ValueError(f"flb-owd has no parameter {sorted(unknown)[0]!r}")
    full.update(params)
    from .hdl.flb.owd import check_parameters
    check_parameters(**full)
    return full


def flb_owd_commands(params, n_frames=0):
    """``simple_switch_CLI`` lines for p4/flb_owd.p4: its configuration (n_edges, n_paths, the tick mask, the
    largest delay), then the egress queue's depth: at least 4,096 frames and ``n_frames`` (bmv2's default, 64,
    drops frames when the ingress of this short program outruns the output file's writer on a loaded machine).
    The block's ``ctl`` commands all go in-band (harness op 1): a FORGET or FORGET_ALL before the first packet meets
    the empty tables, as on the RTL after reset."""
    p = flb_owd_params(params)
    return [f"table_set_default owd_config set_config {p['n_edges']} {p['n_paths']} {(1 << p['time_bits']) - 1} "
            f"{(1 << p['delay_bits']) - 1}", f"set_queue_depth {max(4096, n_frames)}"]


def flb_owd_tick(op=0, *, kind=0, tag=0, sampled=0, reverse=0, edge=0, path=0, to_edge=0, stamp=0, now=0,
                 table=0, index=0, data=0):
    """The test harness header of flb_owd.p4 as it goes in (the output fields zero), with Ethernet before it."""
    import struct
    return OWD_ETH + struct.pack("!BBHBBHHIIB", op, kind, tag, sampled | reverse << 1, path, edge, to_edge, stamp,
                                 now, table) + index.to_bytes(3, "big") + struct.pack("!Q", data) + bytes(10) + \
        bytes(2)


def flb_owd_result(frame):
    """The item flb_owd.p4 wrote back: the block's output fields (``kind``, ``sampled``, ``edge``, ``path``,
    ``reverse``, ``to_edge``, ``tag``, ``ok``, ``qdelay``, ``base_set``, ``pb_valid``, ``pb_path``, ``pb_delay``),
    or None for a frame without the harness header."""
    import struct
    if len(frame) < 14 + OWD_TICK_LEN or struct.unpack_from("!H", frame, 12)[0] != OWD_TICK_TYPE:
        return None
    _, kind, tag, flags, path, edge, to_edge = struct.unpack_from("!BBHBBHH", frame, 14)
    out, pb_path, qdelay, pb_delay = struct.unpack_from("!BBII", frame, 14 + 30)
    return {"kind": kind, "sampled": flags & 1, "edge": edge, "path": path, "reverse": flags >> 1 & 1,
            "to_edge": to_edge, "tag": tag, "ok": out & 1, "qdelay": qdelay, "base_set": out >> 1 & 1,
            "pb_valid": out >> 2 & 1, "pb_path": pb_path, "pb_delay": pb_delay}


def flb_owd_frames(events, params):
    """A ``flb-owd`` metadata trace (``lbpipe trace flb-owd``) as p4/flb_owd.p4's input: ``(commands, frames,
    n_items)``. Each item is one harness frame (op 0) carrying its fields; each command one frame (op 1), in trace
    order. Items whose fields do not fit the header (kind over 8 bits, edges over 16, stamps over 32) are refused."""
    p = flb_owd_params(params)
    frames, n_items = [], 0
    for event in events:
        if "ctl" in event:
            table, index, data = _flb_ctl(event["ctl"])
            frames.append(flb_owd_tick(1, table=table, index=index, data=data))
            continue
        g = event["item"].get
        fields = dict(kind=g("kind", 0), tag=g("tag", 0), sampled=g("sampled", 0), reverse=g("reverse", 0),
                      edge=g("edge", 0), path=g("path", 0), to_edge=g("to_edge", 0), stamp=g("stamp", 0),
                      now=g("now", 0))
        limits = dict(kind=256, tag=1 << 16, sampled=2, reverse=2, edge=1 << 16, path=256, to_edge=1 << 16,
                      stamp=1 << p["time_bits"], now=1 << p["time_bits"])
        if not all(0 <= fields[k] < limits[k] for k in limits):
            raise ValueError(f"flb_owd.p4 takes 16-bit tags and edges, 8-bit paths, time_bits-bit stamps and ticks, "
                             f"not {event['item']!r}")
        frames.append(flb_owd_tick(0, **fields))
        n_items += 1
    return flb_owd_commands(p, len(frames)), frames, n_items


def _owd_replay_items(params, events, tools):
    commands, frames, n_items = flb_owd_frames(events, params)
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / "flb_owd.p4", tmp, tools)
        out = run_switch(json_path, frames, commands, tools=tools, expect=n_items)
    return [flb_owd_result(frame) for frame in out]


# -- FLB isolation table (p4/flb_isolate.p4, block flb-isolate) --------------------------------------------------------

#: The test harness header of flb_isolate.p4 (p4/README.md): its EtherType and length.
ISO_TICK_TYPE = 0x88B5
ISO_TICK_LEN = 34


def flb_isolate_params(params):
    """The ``flb-isolate`` parameters with their defaults, checked by the block's own rules (flb_isolate.p4 models
    every value the block takes); raises ValueError with one line for the others."""
    full = {"n_flows": 65536, "n_dests": 16, "n_paths": 8, "n_slots": 8, "time_bits": 16, "timeout": 4096,
            "n_ports": 8}
    unknown = set(params) - set(full)
    if unknown:
        raise ValueError(f"flb-isolate has no parameter {sorted(unknown)[0]!r}")
    full.update(params)
    from .hdl.flb.isolate import check_parameters
    check_parameters(**full)
    return full


def flb_isolate_commands(params, n_frames=0):
    """``simple_switch_CLI`` lines for p4/flb_isolate.p4: its configuration, then the egress queue's depth (as
    :func:`flb_owd_commands`). The block has no tables: its ``ctl`` commands and the CNMs go in-band."""
    p = flb_isolate_params(params)
    return [f"table_set_default iso_config set_config {p['n_flows']} {p['n_dests']} {p['n_paths']} {p['n_slots']} "
            f"{(1 << p['time_bits']) - 1} {p['timeout']} {p['n_ports']}", f"set_queue_depth {max(4096, n_frames)}"]


def flb_isolate_tick(op=0, *, tag=0, flow=0, dest=0, now=0, n=0, cong=0, cp=0, table=0, index=0, data=0):
    """The test harness header of flb_isolate.p4 as it goes in (the output fields zero), with Ethernet before it."""
    import struct
    return OWD_ETH + struct.pack("!BHIHIBBBB", op, tag, flow, dest, now, n, cong, cp, table) + \
        index.to_bytes(3, "big") + struct.pack("!Q", data) + bytes(6)


def flb_isolate_result(frame):
    """The packet's result flb_isolate.p4 wrote back (``flow``, ``dest``, ``now``, ``tag``, ``ok``, ``isolated``,
    ``path``, ``mask``, ``held``), or None for a frame without the harness header."""
    import struct
    if len(frame) < 14 + ISO_TICK_LEN or struct.unpack_from("!H", frame, 12)[0] != ISO_TICK_TYPE:
        return None
    _, tag, flow, dest, now = struct.unpack_from("!BHIHI", frame, 14)
    flags, path, mask = struct.unpack_from("!BBH", frame, 14 + 28)
    return {"flow": flow, "dest": dest, "now": now, "tag": tag, "ok": flags & 1, "isolated": flags >> 1 & 1,
            "path": path, "mask": mask, "held": flags >> 2 & 1}


def flb_isolate_frames(events, params):
    """A ``flb-isolate`` trace (``lbpipe trace flb-isolate``: packets, ``upd`` CNMs and ``ctl`` commands) as
    p4/flb_isolate.p4's input: ``(commands, frames, n_items)``, one harness frame per event in trace order (packets
    op 0, commands op 1, CNMs op 2). Events whose fields do not fit the header are refused in one line."""
    p = flb_isolate_params(params)
    frames, n_items = [], 0
    tmax = 1 << p["time_bits"]
    for event in events:
        if "ctl" in event:
            table, index, data = _flb_ctl(event["ctl"])
            frames.append(flb_isolate_tick(1, table=table, index=index, data=data))
            continue
        cnm = "upd" in event
        g = (event["upd"] if cnm else event["item"]).get
        fields = dict(flow=g("flow", 0), dest=g("dest", 0), now=g("now", 0))
        limits = dict(flow=1 << 32, dest=1 << 16, now=tmax)
        if cnm:
            fields.update(n=g("n", 0), cong=g("cong", 0), cp=g("cp", 0))
            limits.update(n=256, cong=2, cp=256)
        else:
            fields["tag"] = g("tag", 0)
            limits["tag"] = 1 << 16
        if not all(0 <= fields[k] < limits[k] for k in limits):
            raise ValueError(f"flb_isolate.p4 takes 32-bit flows, 16-bit destinations and tags, 8-bit n and cp, "
                             f"time_bits-bit ticks, not {event!r}")
        frames.append(flb_isolate_tick(2 if cnm else 0, **fields))
        n_items += not cnm
    return flb_isolate_commands(p, len(frames)), frames, n_items


def _isolate_replay_items(params, events, tools):
    commands, frames, n_items = flb_isolate_frames(events, params)
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / "flb_isolate.p4", tmp, tools)
        out = run_switch(json_path, frames, commands, tools=tools, expect=n_items)
    return [flb_isolate_result(frame) for frame in out]


# -- FLB congestion detection (p4/flb_cnm.p4, block flb-cnm) -----------------------------------------------------------

#: The test harness header of flb_cnm.p4 (p4/README.md): its EtherType and length.
CNM_TICK_TYPE = 0x88B5
CNM_TICK_LEN = 42


def flb_cnm_params(params):
    """The ``flb-cnm`` parameters with their defaults, checked by the block's own rules (flb_cnm.p4 models every
    value the block takes); raises ValueError with one line for the others."""
    full = {"n_ports": 8, "n_slots": 4, "n_edges": 16, "flow_bits": 16, "amount_bits": 8, "q_bits": 16,
            "threshold": 512}
    unknown = set(params) - set(full)
    if unknown:
        raise ValueError(f"flb-cnm has no parameter {sorted(unknown)[0]!r}")
    full.update(params)
    from .hdl.flb.cnm import check_parameters
    check_parameters(**full)
    return full


def flb_cnm_commands(params, n_frames=0):
    """``simple_switch_CLI`` lines for p4/flb_cnm.p4: its configuration, then the egress queue's depth (as
    :func:`flb_owd_commands`). The block's ``ctl`` commands (a new K) go in-band."""
    p = flb_cnm_params(params)
    return [f"table_set_default cnm_config set_config {p['n_ports']} {p['n_slots']} {(1 << p['q_bits']) - 1} "
            f"{p['threshold']}", f"set_queue_depth {max(4096, n_frames)}"]


def flb_cnm_tick(op=0, *, tag=0, port=0, deq=0, amount=0, flow=0, src=0, table=0, index=0, data=0):
    """The test harness header of flb_cnm.p4 as it goes in (the output fields zero), with Ethernet before it."""
    import struct
    return OWD_ETH + struct.pack("!BHBBIIHB", op, tag, port, deq, amount, flow, src, table) + \
        index.to_bytes(3, "big") + struct.pack("!Q", data) + bytes(15)


def flb_cnm_result(frame):
    """The result flb_cnm.p4 wrote back (the block's output fields), or None for a frame without the header."""
    import struct
    if len(frame) < 14 + CNM_TICK_LEN or struct.unpack_from("!H", frame, 12)[0] != CNM_TICK_TYPE:
        return None
    _, tag, port, deq, _, flow, src = struct.unpack_from("!BHBBIIH", frame, 14)
    flags, qlen, cnm_flow, cnm_src, cnm_n, cnm_cp = struct.unpack_from("!BIIHBB", frame, 14 + 27)
    return {"port": port, "deq": deq, "flow": flow, "src": src, "tag": tag, "ok": flags & 1, "qlen": qlen,
            "cnm": flags >> 1 & 1, "cnm_cong": flags >> 2 & 1, "cnm_flow": cnm_flow, "cnm_src": cnm_src,
            "cnm_n": cnm_n, "cnm_cp": cnm_cp}


def flb_cnm_frames(events, params):
    """A ``flb-cnm`` metadata trace (``lbpipe trace flb-cnm``) as p4/flb_cnm.p4's input: ``(commands, frames,
    n_items)``, one harness frame per item (op 0) and per command (op 1), in trace order. Items whose fields do not
    fit the header are refused in one line."""
    p = flb_cnm_params(params)
    frames, n_items = [], 0
    for event in events:
        if "ctl" in event:
            table, index, data = _flb_ctl(event["ctl"])
            frames.append(flb_cnm_tick(1, table=table, index=index, data=data))
            continue
        g = event["item"].get
        fields = dict(tag=g("tag", 0), port=g("port", 0), deq=g("deq", 0), amount=g("amount", 0),
                      flow=g("flow", 0), src=g("src", 0))
        limits = dict(tag=1 << 16, port=256, deq=2, amount=1 << p["amount_bits"], flow=1 << 32, src=1 << 16)
        if not all(0 <= fields[k] < limits[k] for k in limits):
            raise ValueError(f"flb_cnm.p4 takes 16-bit tags and sources, 8-bit ports, amount_bits-bit amounts, not "
                             f"{event['item']!r}")
        frames.append(flb_cnm_tick(0, **fields))
        n_items += 1
    return flb_cnm_commands(p, len(frames)), frames, n_items


def _cnm_replay_items(params, events, tools):
    commands, frames, n_items = flb_cnm_frames(events, params)
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / "flb_cnm.p4", tmp, tools)
        out = run_switch(json_path, frames, commands, tools=tools, expect=n_items)
    return [flb_cnm_result(frame) for frame in out]


# -- SELB reordering (p4/selb_reorder.p4, block selb-reorder) ----------------------------------------------------------

#: selb_reorder.p4 reads selb_tor.p4's harness header (SELB_TICK_TYPE, SELB_TICK_LEN): the tail and epoch in its
#: flags (bits 1 and 2, as selb_tor.p4 writes them), and writes the flow and ``held`` (flags bit 6) back.
SELB_REORDER_HELD = 6
#: The hold port (its HOLD_PORT) and the pace set on its egress queue, in packets per second: a held packet comes
#: back to read its buffer's release record once per lap of that queue.
SELB_REORDER_HOLD_PORT = 2
SELB_REORDER_RATE = 2000


def selb_reorder_params(params):
    """The ``selb-reorder`` parameters with their defaults, checked by the block's own rules (selb_reorder.p4 models
    every value the block takes); raises ValueError with one line for the others."""
    full = {"n_flows": 1024, "n_buffers": 8, "depth": 32, "time_bits": 16, "timeout": 1024}
    unknown = set(params) - set(full)
    if unknown:
        raise ValueError(f"selb-reorder has no parameter {sorted(unknown)[0]!r}")
    full.update(params)
    from .hdl.selb.reorder import check_parameters
    try:
        check_parameters(**full)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    return full


def selb_reorder_commands(params, rate=SELB_REORDER_RATE):
    """``simple_switch_CLI`` lines for p4/selb_reorder.p4: the configuration (n_flows - 1 as the flow mask,
    n_buffers, depth, the tick mask, timeout), then the hold port's pace (``rate`` packets per second)."""
    p = selb_reorder_params(params)
    return [f"table_set_default reorder_config set_config {p['n_flows'] - 1} {p['n_buffers']} {p['depth']} "
            f"{(1 << p['time_bits']) - 1} {p['timeout']}",
            f"set_queue_rate {rate} {SELB_REORDER_HOLD_PORT}"]


def selb_reorder_tick(op=0, *, kind=0, tag=0, now=0, epoch=0, tail=0, table=0, index=0, data=0,
                      ether_type=0x0800):
    """selb_tor.p4's harness header as selb_tor.p4 leaves it for selb_reorder.p4: ``ok``, ``tail`` and ``epoch``
    in its flags (the other output fields zero)."""
    import struct
    flags = 1 | tail << 1 | epoch << 2
    return struct.pack("!BBHIBB", op, kind, tag, now, 0, table) + index.to_bytes(3, "big") + \
        struct.pack("!QHBBBBQH", data, 0, 0, flags, 0, 0, 0, ether_type)


def selb_reorder_result(frame):
    """What a frame out of selb_reorder.p4 carries in its harness header: ``{kind, tag, flow, epoch, tail, held,
    now}``, or None for a frame without it."""
    import struct
    if len(frame) < 14 + SELB_TICK_LEN or struct.unpack_from("!H", frame, 12)[0] != SELB_TICK_TYPE:
        return None
    _, kind, tag, now = struct.unpack_from("!BBHI", frame, 14)
    flow, _, flags = struct.unpack_from("!HBB", frame, 14 + 21)
    return {"kind": kind, "tag": tag, "flow": flow, "epoch": flags >> 2 & 1, "tail": flags >> 1 & 1,
            "held": flags >> SELB_REORDER_HELD & 1, "now": now}


def selb_reorder_frames(events, params):
    """A ``selb-reorder`` metadata trace (``lbpipe trace selb-reorder``) as p4/selb_reorder.p4's input: ``(commands,
    frames, n_items)``. Each item becomes an IPv4/UDP frame from 10.255.0.1 port 4096 to 10.0.0.1 whose destination
    port makes the CRC16 of its 5-tuple the item's flow, with its kind, tag, tick, epoch and tail in the harness
    header; each ``ctl`` command an op-1 frame (the block has no tables: dropped)."""
    import ipaddress
    import struct
    p = selb_reorder_params(params)
    src, dst = ipaddress.IPv4Address("10.255.0.1").packed, ipaddress.IPv4Address("10.0.0.1").packed
    eth = bytes.fromhex("020000000002" "020000000001") + struct.pack("!H", SELB_TICK_TYPE)
    frames, n_items = [], 0
    for event in events:
        if "ctl" in event:
            table, index, data = _flb_ctl(event["ctl"])
            frames.append(eth + selb_reorder_tick(1, table=table, index=index, data=data) + bytes(32))
            continue
        g = event["item"].get
        fields = dict(kind=g("kind", 0), tag=g("tag", 0), now=g("now", 0), epoch=g("epoch", 0), tail=g("tail", 0))
        flow = g("flow", 0)
        if not (0 <= flow < p["n_flows"] and 0 <= fields["now"] < 1 << p["time_bits"] and 0 <= fields["kind"] < 8
                and 0 <= fields["tag"] < 1 << 16 and fields["epoch"] in (0, 1) and fields["tail"] in (0, 1)):
            raise ValueError(f"selb_reorder.p4 takes flows below n_flows, time_bits-bit ticks, 3-bit kinds, 16-bit "
                             f"tags, 1-bit epoch and tail, not {event['item']!r}")
        frames.append(eth + selb_reorder_tick(0, **fields) + _ipv4_udp(src, dst, 4096, flow))
        n_items += 1
    return selb_reorder_commands(p), frames, n_items


def selb_reorder_classes(frames, n_flows=1024):
    """For each frame, the order selb_reorder.p4 keeps: the flow of a DATA packet of an IPv4 flow (a harness frame:
    its header's flow, as the program writes it; a RoCEv2 request without the header, as from a source marking the
    BTH: behind 0 to 2 tags (outer 0x8100 or 0x88A8, inner 0x8100), IPv4 not a fragment or IPv6 with UDP next, the
    low log2 ``n_flows`` bits of the CRC16 of its two addresses and destination QP), or None (every other frame:
    those pass at once, so keep their order among themselves). Frames of different classes may interleave otherwise
    (p4/README.md)."""
    import struct
    out = []
    for frame in frames:
        r = selb_reorder_result(frame)
        if r is not None:
            ipv4 = frame[14 + SELB_TICK_LEN - 2:14 + SELB_TICK_LEN] == b"\x08\x00"
            out.append(r["flow"] if ipv4 and r["kind"] == 1 else None)
            continue
        out.append(_selb_reorder_bth_flow(bytes(frame), n_flows))
    return out


def _selb_reorder_bth_flow(frame, n_flows):
    """The flow of a RoCEv2 request without the harness header as selb_reorder.p4 keys it, or None."""
    import struct
    l3, ether_type = 14, frame[12:14]
    if ether_type in (b"\x81\x00", b"\x88\xa8") and len(frame) >= 18:
        l3, ether_type = 18, frame[16:18]
        if ether_type == b"\x81\x00" and len(frame) >= 22:
            l3, ether_type = 22, frame[20:22]
    if ether_type == b"\x08\x00" and len(frame) >= l3 + 20 and frame[l3] & 15 >= 5 and frame[l3 + 9] == 17 and \
            struct.unpack_from("!H", frame, l3 + 6)[0] & 0x3FFF == 0:
        l4, addresses = l3 + (frame[l3] & 15) * 4, frame[l3 + 12:l3 + 20]
    elif ether_type == b"\x86\xdd" and len(frame) >= l3 + 40 and frame[l3] >> 4 == 6 and frame[l3 + 6] == 17:
        l4, addresses = l3 + 40, frame[l3 + 8:l3 + 40]
    else:
        return None
    if len(frame) < l4 + 8 + 12 or struct.unpack_from("!H", frame, l4 + 2)[0] != 4791:
        return None
    opcode, tver = frame[l4 + 8], frame[l4 + 9] & 15
    if tver != 0 or not (opcode <= 0x0C or opcode in (0x16, 0x17)):
        return None
    return crc16(addresses + frame[l4 + 13:l4 + 16]) & (n_flows - 1)


def _reorder_replay_items(params, events, tools):
    commands, frames, n_items = selb_reorder_frames(events, params)
    tools = tools or find_toolchain()
    with tempfile.TemporaryDirectory(prefix="lbpipe-p4c-") as tmp:
        json_path = compile_program(P4_DIR / "selb_reorder.p4", tmp, tools)
        out = run_switch(json_path, frames, commands, tools=tools, expect=n_items)
    return [{k: v for k, v in selb_reorder_result(frame).items() if k != "now"} for frame in out]
