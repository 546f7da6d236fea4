"""The fast replay engine: a block's Verilog compiled by Verilator with a C++ harness that streams a trace file
through it, with no Python call per clock cycle.

``lbpipe replay BLOCK ... --engine fast`` uses it. The harness (``lbpipe/csrc/replay.cpp``) drives the same wrapped
top as the cocotb engine (:func:`lbpipe.engine.top_verilog`: AXI4-Lite control, flat stream ports), writes control
commands through the AXI4-Lite bridge, pauses the input and the output with the same kind of random runs as the
cocotb harness (``--idle``, ``--backpressure``), and writes what leaves the block to a file. The cocotb engine stays
the reference: its scoreboard checks every output and the cycle timing as it runs; the fast engine only moves data,
and ``tests/test_fast_engine.py`` checks that both give the same bytes. docs/simulation.md has the speeds.

Each build is cached by content: the Verilog, the harness source, the compiler flags and the Verilator version name
a directory beside the Verilog, compiled aside and moved into place whole, so a design is compiled once for every
later replay in any process.
"""

import hashlib
import json
import os
import pathlib
import shutil
import struct
import subprocess
import tempfile

from amaranth import Shape

from .trace import layout_fields

__all__ = ["HARNESS", "FastError", "supports", "packet_ports", "build_replay", "replay_streams", "merge_streams",
           "port_counts", "replay_frames", "run_items", "settle_cycles", "engine_speeds"]

#: The C++ harness, shipped as package data.
HARNESS = pathlib.Path(__file__).parent / "csrc" / "replay.cpp"

#: Verilator options of a replay build: no timing (the Verilog has none; the ``#0`` kicks the runner adds for
#: Icarus are ignored), X given whatever value is fastest (Amaranth gives every register an initial value, so no
#: state starts unknown), assertions off, lint warnings not fatal (they concern Amaranth's output, not the harness).
VERILATOR_FLAGS = ("--cc", "--exe", "--build", "--no-timing", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                   "--noassert", "-Wno-fatal", "-Wno-lint", "-Wno-style", "--top-module", "lbpipe_top",
                   "--prefix", "Vtop")
#: C++ optimisation of the evaluated code (``OPT_FAST``) and of the code run once (``OPT_SLOW``).
MAKE_OPT = "OPT_FAST=-O2 OPT_SLOW=-O1"

#: Cycles without an output beat after the last input that end a packet replay (as the cocotb replay).
QUIET_CYCLES = 2000


class FastError(RuntimeError):
    """The Verilator build failed or the harness stopped (a stalled pipeline, a cut file); the message says which
    and where its log is."""


#: The ports every packet pipeline has or may have, which the harness always drives.
PACKET_PORTS = {"s_axis", "m_axis", "ctl", "stats"}


#: Clocks the fast top's power-on reset lasts (boards/top.py PowerOnReset; the harness waits as many).
RESET_CYCLES = 4

#: Extra input streams a metadata build carries at most (the file gives each group one byte of stream bits).
MAX_STREAMS = 7


def supports(block):
    """Whether the fast engine replays ``block``: every metadata block with at most :data:`MAX_STREAMS` extra input
    streams, and every packet pipeline with a frame golden model whose further ports :func:`packet_ports` sorts
    (more AXI4-Stream outputs, metadata streams, an action stream, plain inputs held at a registry value)."""
    if block.is_meta:
        return len(block.streams) <= MAX_STREAMS
    if block.golden is None:
        return False
    try:
        ports = packet_ports(block, block.resolve({}))
    except ValueError:
        return False
    # frames of several outputs are put in order by the golden model's process_ports
    return not ports["axis_out"] or _has_process_ports(block)


def _has_process_ports(block):
    """Whether the block's golden model class names each frame's output (``process_ports``)."""
    import importlib
    if block.golden_ref is None:
        return False
    module, name = block.golden_ref.split(":")
    return hasattr(getattr(importlib.import_module(module), name), "process_ports")


def packet_ports(block, params):
    """The packet top's ports beside ``s_axis``, ``m_axis``, ``ctl`` and ``stats``, as the harness drives them:
    ``axis_out`` (more AXI4-Stream outputs, written as streams 1, 2, ...), ``sinks`` (metadata outputs, always
    ready, counted), ``idle_in`` (metadata inputs, never valid), ``held`` (plain inputs and their values from
    ``Block.held_inputs``), ``act`` (the per-frame action stream, or None) and ``axil`` (the control bridge is
    there). Raises ``ValueError`` naming a port the harness cannot drive."""
    from amaranth.lib import wiring
    members = block.check(params).signature.members
    ports = {"axis_out": [], "sinks": [], "idle_in": [], "held": {}, "act": None, "axil": "ctl" in members}
    values = block.held_values()
    for name, member in members.items():
        if name in PACKET_PORTS:
            continue
        if member.is_port:
            if member.flow != wiring.In:
                continue                 # a plain output (status) the replay does not read
            if name not in values:
                raise ValueError(f"{block.name}: input {name!r} has no replay value (Block.held_inputs)")
            width = Shape.cast(member.shape).width
            if not 0 <= values[name] < 1 << min(width, 64):
                raise ValueError(f"{block.name}: replay value {values[name]} of input {name!r} does not fit its "
                                 f"{width} bits (or 64)")
            ports["held"][name] = values[name]
            continue
        sub = member.signature.members
        if "tdata" in sub and sub["tvalid"].flow == wiring.Out:
            ports["axis_out"].append(name)
        elif "payload" in sub and sub["valid"].flow == wiring.Out:
            ports["sinks"].append(name)
        elif "payload" in sub and block.actions is not None and name == "act":
            ports["act"] = name
        elif "payload" in sub:
            ports["idle_in"].append(name)
        else:
            raise ValueError(f"{block.name}: the fast engine drives no second AXI4-Stream input ({name!r})")
    return ports


def _ports_header(ports):
    """The harness's ``lbpipe_ports.h`` of a packet build (see lbpipe/csrc/replay.cpp)."""
    names = [*ports["axis_out"], *ports["sinks"], *ports["idle_in"], *ports["held"], *filter(None, [ports["act"]])]
    for name in names:
        if not name.isidentifier():
            raise ValueError(f"port {name!r} is not a C identifier")

    def macro(kind, items):
        return f"#define LBPIPE_{kind}(X) {' '.join(f'X({n})' for n in items)}\n"
    return ("// Written by lbpipe/fast.py for this build: the packet top's further ports.\n"
            + macro("AXIS_OUT", ports["axis_out"]) + macro("SINKS", ports["sinks"])
            + macro("IDLE_IN", ports["idle_in"]) + macro("HELD", ports["held"])
            + (f"#define LBPIPE_ACT(field) {ports['act']}_##field\n" if ports["act"] else "")
            + f"#define LBPIPE_AXIL {int(ports['axil'])}\n"
            + f"#define LBPIPE_RST {int(ports.get('rst', True))}\n"      # 0: boards/top.py PowerOnReset
            + f"#define LBPIPE_RESET_CYCLES {RESET_CYCLES}\n")


def settle_cycles(params):
    """Cycles after reset before the first control command: blocks that sweep a per-QP table after reset (Themis-D,
    the PRO round robin) take one cycle per QP; 4 more as margin. The cocotb testbenches wait the same."""
    return int(params.get("n_qps", 0)) + 4


def _port_bytes(width):
    """Bytes Verilator uses for a port of ``width`` bits: 1, 2, 4 or 8 up to 64 bits, whole 32-bit words above."""
    for size in (1, 2, 4, 8):
        if width <= 8 * size:
            return size
    return -(-width // 32) * 4


def _streams_header(streams):
    """The harness's ``lbpipe_streams.h`` of a metadata build: the extra input streams' port prefixes, in the
    order of the file's stream bits (``LBPIPE_STREAMS(X)`` expands ``X(name)`` for each)."""
    for name in streams:
        if not name.isidentifier():
            raise ValueError(f"stream {name!r} is not a port name")
    return ("// Written by lbpipe/fast.py for this build: the block's extra input streams.\n"
            f"#define LBPIPE_STREAMS(X) {' '.join(f'X({name})' for name in streams)}\n")


def build_replay(verilog_path, *, meta, streams=(), ports=None, jobs=None):
    """The path of the replay executable of ``verilog_path`` (a metadata top with ``meta``, whose extra input
    streams are ``streams``; a packet top whose further ports are ``ports``, :func:`packet_ports`, none if None),
    compiling it with ``nice -n 5`` and ``jobs`` make jobs (``LBPIPE_SIM_JOBS``, default 2) the first time."""
    from lbpipe.tb.lib.runner import verilator_environment, verilator_version
    verilog_path = pathlib.Path(verilog_path)
    if ports is None:
        ports = {"axis_out": [], "sinks": [], "idle_in": [], "held": {}, "act": None, "axil": True}
    header = _streams_header(streams) if meta else _ports_header(ports)
    digest = hashlib.sha256()
    for part in (verilog_path.read_bytes(), HARNESS.read_bytes(), " ".join(VERILATOR_FLAGS).encode(),
                 MAKE_OPT.encode(), b"meta" if meta else b"packet", header.encode(),
                 verilator_version().encode()):
        digest.update(part + b"\0")
    build_dir = verilog_path.parent / f"fast-{digest.hexdigest()[:16]}"
    exe = build_dir / "replay"
    if exe.exists():
        os.utime(build_dir)
        return exe
    jobs = int(jobs or os.environ.get("LBPIPE_SIM_JOBS", "2"))
    own = verilog_path.parent / f"fast-build-{os.getpid()}"
    shutil.rmtree(own, ignore_errors=True)
    own.mkdir(parents=True)
    # found through the build's -I. (the make directory)
    (own / ("lbpipe_streams.h" if meta else "lbpipe_ports.h")).write_text(header)
    env = verilator_environment()
    cmd = ["nice", "-n", "5", str(pathlib.Path(env["VERILATOR_ROOT"]) / "bin" / "verilator"), *VERILATOR_FLAGS,
           "-j", str(jobs), "-MAKEFLAGS", MAKE_OPT, "-Mdir", str(own), "-o", "replay",
           *(["-CFLAGS", "-DLBPIPE_META"] if meta else []), str(verilog_path), str(HARNESS)]
    log = own / "build.log"
    with open(log, "w") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if done.returncode or not (own / "replay").exists():
        raise FastError(f"Verilator build failed ({' '.join(cmd)}); log {log}")
    # Keep only the executable and the log: the object files are large and never reused.
    for path in own.iterdir():
        if path.name not in ("replay", "build.log"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    try:
        os.rename(own, build_dir)
    except OSError:          # another process moved its build in first: use that one
        shutil.rmtree(own, ignore_errors=True)
    _prune_builds(build_dir)
    return exe


def _prune_builds(keep, grace=600.0):
    """Remove this design's other replay builds (an older harness or Verilator) unused for ``grace`` seconds."""
    import time
    for old in keep.parent.glob("fast-*"):
        try:
            if (old != keep and not old.name.startswith("fast-build-")
                    and time.time() - old.stat().st_mtime > grace):
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def _run(exe, infile, outfile, *, idle, backpressure, seed, settle):
    done = subprocess.run([str(exe), str(infile), str(outfile), repr(float(idle)), repr(float(backpressure)),
                           str(int(seed)), str(int(settle))], capture_output=True, text=True)
    if done.returncode:
        raise FastError(f"{exe}: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stats(stats):
    """Add ``cycles_per_second`` (wall clock) and ``cycles_per_cpu_second`` (the harness's own CPU time: the figure
    that does not depend on what else the machine runs) over the cycles the timed loop ran."""
    cycles = stats.get("stream_cycles", stats["cycles"])
    stats["cycles_per_second"] = cycles / stats["seconds"] if stats["seconds"] else 0.0
    stats["cycles_per_cpu_second"] = cycles / stats["cpu_seconds"] if stats["cpu_seconds"] else 0.0
    return stats


def replay_streams(block, params, frames, ctl_events, *, actions=None, idle=0.0, backpressure=0.0, seed=1,
                   verilog=None):
    """Run ``frames`` (bytes) through packet pipeline ``block`` after its control commands, each with its action
    (``actions``: ``{"act": {...}}`` events, one per frame) if the block takes them; returns ``({port: frames out},
    measurements)``, every AXI4-Stream output of the block a key (``m_axis`` first). Measurements: ``cycles`` (all,
    from reset), ``stream_cycles`` (from the first frame offered until :data:`QUIET_CYCLES` after the last output),
    ``seconds`` (wall time of that streaming loop), ``cycles_per_second``, frames and beats in and out (every
    output), ``sink_items`` (items the metadata outputs gave), ``actions_in``. ``verilog``: another top's Verilog
    (``lbpipe verilog``'s, with a reset input) instead of the fast top."""
    from .engine import resolve_block, top_verilog
    from .trace import pack
    block = resolve_block(block)
    if block.is_meta or not supports(block):
        raise ValueError(f"{block.name}: the fast engine replays packet pipelines with a frame golden model "
                         f"(metadata blocks: run_items)")
    params = block.resolve(params)
    ports = packet_ports(block, params)
    if ports["act"] and (actions is None or len(actions) != len(frames)):
        raise ValueError(f"{block.name} needs one action per frame: {len(frames)} frames, "
                         f"{'no' if actions is None else len(actions)} actions")
    if not ports["act"] and actions:
        raise ValueError(f"{block.name} takes no per-frame actions")
    # The fast top (engine.build_top's ``registered``): registered ports and a power-on reset, so Verilator
    # evaluates the block once per clock; the frames are the block's own (docs/simulation.md, "Speed").
    exe = build_replay(verilog or top_verilog(block, params, registered=True), meta=False,
                       ports=dict(ports, rst=verilog is not None))
    names = ["m_axis", *ports["axis_out"]]
    with tempfile.TemporaryDirectory(prefix="lbpipe-fast-") as tmp:
        infile, outfile = pathlib.Path(tmp) / "in.bin", pathlib.Path(tmp) / "out.bin"
        with open(infile, "wb") as f:
            f.write(b"LBPF" + struct.pack(f"<I{len(ports['held'])}Q", len(ports["held"]), *ports["held"].values()))
            f.write(struct.pack("<I", len(ctl_events)))
            for event in ctl_events:
                cmd = event["ctl"]
                f.write(struct.pack("<IIQ", cmd.get("table", 0), cmd.get("index", 0), cmd.get("data", 0)))
            if ports["act"]:
                layout = block.action_layout()
                size = _port_bytes(Shape.cast(layout).width)
                f.write(struct.pack("<II", size, len(actions)))
                f.write(b"".join(pack(layout, event["act"]).to_bytes(size, "little") for event in actions))
            else:
                f.write(struct.pack("<II", 0, 0))
            for frame in frames:
                f.write(struct.pack("<I", len(frame)))
                f.write(frame)
        stats = _run(exe, infile, outfile, idle=idle, backpressure=backpressure, seed=seed,
                     settle=settle_cycles(params))
        out = {name: [] for name in names}
        data = outfile.read_bytes()
        at = 0
        while at < len(data):
            stream, length = struct.unpack_from("<BI", data, at)
            out[names[stream]].append(data[at + 5:at + 5 + length])
            at += 5 + length
    return out, _stats(stats)


def merge_streams(streams, plan):
    """One list of the frames of ``streams`` (``{port: frames}``, each in its own order) in the order of ``plan``,
    the port of each frame the golden model sends (:func:`lbpipe.engine.golden_ports`); frames beyond the plan
    follow, port by port. The order alone does not show a frame sent on the wrong output: compare
    :func:`port_counts` first (``lbpipe replay`` does)."""
    left = {port: iter(frames) for port, frames in streams.items()}
    out = []
    for port in plan:
        frame = next(left[port], None) if port in left else None
        if frame is not None:
            out.append(frame)
    for frames in left.values():
        out += list(frames)
    return out


def port_counts(streams, plan):
    """``[(port, frames sent, frames the plan has)]`` for each port where the two differ (empty: every output sent
    as many frames as the golden model's plan gives it)."""
    from collections import Counter
    want = Counter(plan)
    return [(port, len(streams.get(port, [])), want[port]) for port in sorted(set(streams) | set(want))
            if len(streams.get(port, [])) != want[port]]


def replay_frames(block, params, frames, ctl_events, *, actions=None, plan=None, idle=0.0, backpressure=0.0, seed=1,
                  verilog=None):
    """:func:`replay_streams` as one list of frames: ``m_axis``'s alone, or for a block with more AXI4-Stream
    outputs every output's in the order of ``plan`` (:func:`merge_streams`), which such a block needs. With a
    plan, the measurements' ``wrong_outputs`` lists the outputs that sent another number of frames than the plan
    gives them (:func:`port_counts`)."""
    streams, stats = replay_streams(block, params, frames, ctl_events, actions=actions, idle=idle,
                                    backpressure=backpressure, seed=seed, verilog=verilog)
    if len(streams) > 1 and plan is None:
        raise ValueError(f"{getattr(block, 'name', block)} has {len(streams)} AXI4-Stream outputs: give the golden "
                         f"model's plan of ports")
    if plan is None:
        return streams["m_axis"], stats
    stats["wrong_outputs"] = port_counts(streams, plan)
    return merge_streams(streams, plan), stats


def run_items(block, params, events, *, idle=0.0, backpressure=0.0, seed=1):
    """Run a metadata trace (``events``, checked by :func:`lbpipe.engine.check_events`) through ``block``; returns
    ``(output items, measurements)`` (``cycles``, all from reset; ``stream_cycles``, from the first item offered
    to the last out; ``seconds``, the wall time of that loop; ``cycles_per_second``; items in and out; and
    ``extras_in``, the items taken on the extra input streams).

    Events of the extra streams (``{"upd": {...}}``) are grouped as the cocotb engine groups them
    (:func:`lbpipe.tb.lib.harness.trace_groups`): a group's items are offered in one clock on their streams, the next
    group once the whole group is taken, a command once every earlier group is taken and every item has left."""
    from lbpipe.tb.lib.harness import trace_groups
    from .engine import check_events, resolve_block, top_verilog
    block = resolve_block(block)
    if not block.is_meta or not supports(block):
        raise ValueError(f"{block.name}: the fast engine replays metadata blocks with at most {MAX_STREAMS} extra "
                         f"input streams")
    params = block.resolve(params)
    layout = check_events(block, params, events)
    streams = block.stream_layouts(params)
    _, out_layout, _, _ = block.layouts(params)
    # Stream k of the file: 0 the items (in_*), then the extra streams in the registry's order (StreamsTop's).
    kinds = ["item", *streams]
    layouts = [layout, *streams.values()]
    sizes = [_port_bytes(Shape.cast(lay).width) for lay in layouts]
    bit = {kind: k for k, kind in enumerate(kinds)}
    # check_events has packed every event once (fields known, values fitting): pack again without the checks.
    offsets = [{name: offset for name, offset, _ in layout_fields(lay)} for lay in layouts]
    out_width = Shape.cast(out_layout).width
    out_bytes = _port_bytes(out_width)
    exe = build_replay(top_verilog(block, params), meta=True, streams=list(streams))
    with tempfile.TemporaryDirectory(prefix="lbpipe-fast-") as tmp:
        infile, outfile = pathlib.Path(tmp) / "in.bin", pathlib.Path(tmp) / "out.bin"
        with open(infile, "wb") as f:
            f.write(b"LBPM" + struct.pack(f"<{1 + len(sizes)}I", len(sizes), *sizes))
            chunk = bytearray()
            for group in trace_groups(events):
                if "ctl" in group:
                    cmd = group["ctl"]
                    chunk += b"\0" + struct.pack("<IIQ", cmd.get("table", 0), cmd.get("index", 0), cmd.get("data", 0))
                    continue
                present = sorted(bit[kind] for kind in group)
                chunk += bytes((1, sum(1 << k for k in present)))
                for k in present:
                    word, at = 0, offsets[k]
                    for name, value in group[kinds[k]].items():
                        word |= value << at[name]
                    chunk += word.to_bytes(sizes[k], "little")
                if len(chunk) > 1 << 20:
                    f.write(chunk)
                    chunk = bytearray()
            f.write(chunk)
        stats = _run(exe, infile, outfile, idle=idle, backpressure=backpressure, seed=seed,
                     settle=settle_cycles(params))
        data = outfile.read_bytes()
    fields = [(name, offset, (1 << width) - 1) for name, offset, width in layout_fields(out_layout)]
    outputs = []
    for at in range(0, len(data), out_bytes):
        word = int.from_bytes(data[at:at + out_bytes], "little")
        outputs.append({name: word >> offset & mask for name, offset, mask in fields})
    return outputs, _stats(stats)


def _fast_row(stats, **count):
    return dict(count, engine="fast (Verilator, C++ harness)", cycles=stats.get("stream_cycles", stats["cycles"]),
                seconds=stats["seconds"], cycles_per_second=stats["cycles_per_second"],
                cpu_seconds=stats["cpu_seconds"], cycles_per_cpu_second=stats["cycles_per_cpu_second"])


def _cocotb_row(run, short_cycles, long_cycles, **count):
    """Time ``run(short)`` then ``run(long)`` (the cocotb engine, built by a first untimed ``run(short)``); the row
    has the cycles the long trace adds over the short one (the fast engine's count of each) and the time they add,
    so cocotb's start-up (seconds, the same for both) is not in its rate."""
    import time
    from lbpipe.tb.lib.runner import simulator
    run(False)                                                       # builds (or finds) the build, untimed
    times = []
    for long in (False, True):
        start, cpu = time.perf_counter(), _child_cpu()
        run(long)
        times.append((time.perf_counter() - start, _child_cpu() - cpu))
    cycles = long_cycles - short_cycles
    seconds, cpu = times[1][0] - times[0][0], times[1][1] - times[0][1]
    return dict(count, engine=f"rtl (cocotb, {simulator()})", cycles=cycles, seconds=seconds,
                cycles_per_second=cycles / seconds if seconds > 0 else 0.0, cpu_seconds=cpu,
                cycles_per_cpu_second=cycles / cpu if cpu > 0 else 0.0)


def engine_speeds(block, params, *, fast_frames=5000, cocotb_frames=200, seed=1):
    """``lbpipe bench``'s simulation speed of a packet pipeline, per engine: the block's own pcap trace
    (``Block.pcap_trace``) replayed without pauses. Returns one dict per engine: ``engine``, ``frames``,
    ``cycles``, ``seconds`` and ``cycles_per_second`` (wall clock), ``cpu_seconds`` and ``cycles_per_cpu_second``
    (the harness's CPU time; for cocotb, the simulator process's). The fast engine counts and times its own clock
    loop. The cocotb engine has no cycle count of its own: its row is the cycles the fast engine needs for
    ``cocotb_frames`` frames less those for the first frame alone, over the time the whole replay takes more than
    the one-frame replay (so start-up is left out, as it is of the fast row). Builds are not timed (cached)."""
    import functools
    import importlib
    import inspect
    from .engine import replay_pcap, resolve_block
    from .trace import write_pcap
    block = resolve_block(block)
    params = block.resolve(params)
    module, name = block.pcap_trace.split(":")
    trace = getattr(importlib.import_module(module), name)
    # Pass the parameters the generator takes (some take only those that shape the traffic).
    taken = inspect.signature(trace).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in taken.values()):
        trace = functools.partial(trace, **{k: v for k, v in params.items() if k in taken})
    else:
        trace = functools.partial(trace, **params)

    def traffic(n_frames):
        """``(commands, frames, actions)``: a stage driven by actions has no commands and one action per frame."""
        if block.actions is not None:
            frames, actions = trace(seed, n_frames)
            return [], frames, [{"act": a} for a in actions]
        cmds, frames = trace(seed, n_frames)
        return [{"ctl": c} for c in cmds], frames, None
    ctl, frames, actions = traffic(fast_frames)
    _, stats = replay_streams(block, params, frames, ctl, actions=actions)
    rows = [_fast_row(stats, frames=len(frames))]
    ctl, frames, actions = traffic(cocotb_frames)
    short = frames[:1], actions and actions[:1]
    cycles = [replay_streams(block, params, f, ctl, actions=a)[1]["stream_cycles"] for f, a in (short, (frames,
                                                                                                       actions))]
    with tempfile.TemporaryDirectory(prefix="lbpipe-speed-") as tmp:
        tmp = pathlib.Path(tmp)
        write_pcap(tmp / "long.pcap", frames)
        write_pcap(tmp / "short.pcap", short[0])

        def run(long):
            replay_pcap(block, params, tmp / ("long.pcap" if long else "short.pcap"), tmp / "out.pcap", ctl,
                        engine="rtl", actions=actions if long else short[1])
        rows.append(_cocotb_row(run, *cycles, frames=len(frames)))
    return [dict(row, block=block.name, kind="speed") for row in rows]


def item_speeds(block, params, *, fast_items=20000, cocotb_items=5000, seed=1):
    """:func:`engine_speeds` for a metadata block: its own seeded trace (``Block.trace_generator``) without pauses,
    ``fast_items`` trace clocks on the fast engine and ``cocotb_items`` on the cocotb one, the cocotb row less a run
    of the trace up to its first item. Rows carry ``items`` (the trace's items; commands and extra-stream items not
    counted) where a pipeline's carry ``frames``."""
    from .engine import resolve_block, run_rtl
    block = resolve_block(block)
    params = block.resolve(params)
    trace = block.trace_generator()

    def items(events):
        return sum(1 for event in events if "item" in event)

    events = trace(seed, fast_items, **params)
    rows = [_fast_row(run_items(block, params, events)[1], items=items(events))]
    events = trace(seed, cocotb_items, **params)
    first = next((k for k, event in enumerate(events) if "item" in event), None)
    if first is None:
        raise ValueError(f"{block.name}: its trace of {cocotb_items} clocks has no item")
    short = events[:first + 1]
    cycles = [run_items(block, params, e)[1].get("stream_cycles") for e in (short, events)]

    def run(long):
        run_rtl(block, params, events if long else short, compare=False)
    rows.append(_cocotb_row(run, *cycles, items=items(events)))
    return [dict(row, block=block.name, kind="speed") for row in rows]


def _child_cpu():
    """CPU seconds (user and system) of this process's finished child processes: the simulator cocotb runs."""
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
