"""The engines a trace runs through: the golden model, the RTL under cocotb (Icarus or Verilator), and the fast RTL
engine (Verilator with a C++ harness, :mod:`lbpipe.fast`).

All take the same events (see :mod:`lbpipe.trace`) and return the output items, so ``lbpipe replay`` and the tests
can compare them item for item.
"""

import json
import pathlib
import tempfile

from .blocks import Block, get_block
from .trace import TraceError, pack, read_events, read_pcap, where, write_events, write_pcap

__all__ = ["resolve_block", "check_ctl_events", "check_actions", "run_golden", "golden_run", "run_rtl", "run_fast",
           "replay_pcap",
           "check_events", "build_top", "top_verilog", "apply_event"]


def resolve_block(block):
    """The :class:`Block` for ``block``, a registered name or a :class:`Block` already resolved.

    The engines resolve a name once at their entry and pass the Block on; a name that is not registered raises
    ``KeyError`` listing the known blocks."""
    return block if isinstance(block, Block) else get_block(block)


def check_events(block, params, events):
    """Reject events the hardware cannot represent, so both engines see identical inputs."""
    layout, _, ctl_layout, _ = block.layouts(params)
    streams = block.stream_layouts(params)
    for number, event in enumerate(events):
        try:
            if "item" in event:
                pack(layout, event["item"])
            elif "ctl" in event:
                pack(ctl_layout, event["ctl"])
            elif len(event) == 1 and next(iter(event)) in streams:
                name = next(iter(event))
                pack(streams[name], event[name])
            else:
                kinds = ["ctl", "item", *streams]
                raise TraceError(f"an event has exactly one of {' or '.join(map(repr, kinds))}")
        except TraceError as exc:
            raise TraceError(f"{where(events, number)}: {exc}") from None
    return layout


def check_ctl_events(block, params, events):
    """Reject control commands a packet pipeline's control port cannot carry (a negative or too wide table, index or
    data, a field that is not an integer, an event that is not a command), naming the file and line; both engines
    call this before any command is applied."""
    component = block.build(**params)
    component._MustUse__silence = True
    members = component.signature.members
    if "ctl" not in members:
        if events:
            raise ValueError(f"{block.name} has no control port: --ctl does not apply")
        return
    ctl_layout = members["ctl"].signature.members["payload"].shape
    for number, event in enumerate(events):
        try:
            if set(event) != {"ctl"}:
                raise TraceError("a control file holds only {\"ctl\": {...}} events")
            pack(ctl_layout, event["ctl"])
        except TraceError as exc:
            raise TraceError(f"{where(events, number)}: {exc}") from None


def _complete(layout, item):
    values = {name: 0 for name, _ in layout}
    values.update(item)
    return values


def run_golden(block, params, events):
    """Run ``events`` through the golden model of ``block`` (a name or a :class:`Block`); returns the list of
    output items."""
    return golden_run(block, params, events)[0]


def golden_run(block, params, events):
    """Like :func:`run_golden`, and also return the model in its final state (for its statistics counters)."""
    block = resolve_block(block)
    if not block.is_meta:
        raise ValueError(f"{block.name} is a packet I/O stage: replay takes metadata blocks (pcap replay comes with "
                         f"the Themis pipeline)")
    params = block.resolve(params)
    layout = check_events(block, params, events)
    model = block.golden(**params)
    streams = block.stream_layouts(params)
    outputs = []
    for event in events:
        out = apply_event(model, layout, streams, event)
        if "item" in event:
            outputs.append(out)
    return outputs, model


def apply_event(model, layout, streams, event):
    """Apply one trace event to a golden model: a command, an item (returns its output) or an item of the extra
    stream ``name`` (``model.process_stream(name, values)``); ``streams`` maps extra stream names to layouts."""
    if "ctl" in event:
        return model.control(_complete_ctl(event["ctl"]))
    if "item" in event:
        return model.process(_complete(layout, event["item"]))
    name = next(iter(event))
    return model.process_stream(name, _complete(streams[name], event[name]))


def _complete_ctl(cmd):
    values = {"table": 0, "index": 0, "data": 0}
    values.update(cmd)
    return values


def build_top(block, params, *, registered=False):
    """The block with flat, named ports (and its AXI4-Lite control bridge), as the RTL engine and ``lbpipe verilog``
    build it: :class:`AxiLiteTop` for metadata blocks (:class:`StreamsTop` when they take extra input streams),
    :class:`FlatTop` for packet I/O stages. ``registered`` (packet stages, for the fast engine): the block behind
    :class:`RegisteredPorts` with a :class:`PowerOnReset`, the same ports but no reset input."""
    from lbpipe.boards.top import AxiLiteTop, FlatTop, PowerOnReset, RegisteredPorts, StreamsTop
    block = resolve_block(block)
    component = block.build(**block.resolve(params))
    streams = [name for name in block.streams if name in component.signature.members]
    if block.is_meta and streams:
        return StreamsTop(component, streams)
    if block.is_meta:
        return AxiLiteTop(component)
    if registered:
        from .fast import RESET_CYCLES
        return PowerOnReset(FlatTop(RegisteredPorts(component)), cycles=RESET_CYCLES)
    return FlatTop(component)


def top_verilog(block, params, directory=None, *, registered=False):
    """Write the wrapped block's Verilog (content-addressed build directory unless given, and then not written again
    while the design's sources are unchanged: :func:`lbpipe.tb.lib.runner.cached_verilog`); returns the path.
    ``registered``: :func:`build_top`'s, the fast engine's top of a packet stage."""
    from lbpipe.tb.lib.runner import cached_verilog, write_verilog

    def make():
        top = build_top(block, params, registered=registered)
        return write_verilog(top, name="lbpipe_top", ports=top.ports(), directory=directory)
    if directory is not None:
        return make()
    block = resolve_block(block)
    return cached_verilog({"block": block.name, "params": block.resolve(params), "top": "lbpipe_top",
                           **({"registered": True} if registered else {})}, make)


def run_rtl(block, params, events, *, idle=0.0, backpressure=0.0, seed=1, compare=True, testcase="trace",
            stats=None):
    """Run ``events`` through the RTL under Icarus with the block's cocotb testbench.

    With ``compare`` the testbench also checks every output against the golden model as it appears, and the
    cycle timing the golden model predicts when neither ``idle`` nor ``backpressure`` is set. ``stats``, if a
    dict, receives the testbench's measurements (cycles, items per clock). Returns the output items.
    """
    from lbpipe.tb.lib.runner import run_cocotb
    block = resolve_block(block)
    if not block.is_meta:
        raise ValueError(f"{block.name} is a packet I/O stage: replay takes metadata blocks")
    params = block.resolve(params)
    check_events(block, params, events)
    path = top_verilog(block, params)
    with tempfile.TemporaryDirectory(prefix="lbpipe-") as tmp:
        tmp = pathlib.Path(tmp)
        write_events(tmp / "trace.jsonl", events)
        env = {
            "LBPIPE_BLOCK": block.name,
            "LBPIPE_PARAMS": json.dumps(params),
            "LBPIPE_TRACE": str(tmp / "trace.jsonl"),
            "LBPIPE_OUT": str(tmp / "out.jsonl"),
            "LBPIPE_STATS": str(tmp / "stats.json"),
            "LBPIPE_IDLE": str(idle),
            "LBPIPE_BACKPRESSURE": str(backpressure),
            "LBPIPE_SEED": str(seed),
            "LBPIPE_COMPARE": "1" if compare else "0",
        }
        run_cocotb(path, toplevel="lbpipe_top", test_module=block.tb_module, testcase=testcase, extra_env=env,
                   seed=seed)
        # Only the generic trace test records outputs and measurements; other testcases check by themselves.
        outputs = [event["item"] for event in read_events(tmp / "out.jsonl")] if (tmp / "out.jsonl").exists() else []
        if stats is not None and (tmp / "stats.json").exists():
            stats.update(json.loads((tmp / "stats.json").read_text()))
    return outputs


def run_fast(block, params, events, *, idle=0.0, backpressure=0.0, seed=1, stats=None):
    """Run ``events`` through the RTL compiled by Verilator with the C++ harness of :mod:`lbpipe.fast` (no Python
    per clock cycle, no scoreboard: compare with :func:`run_golden`). ``stats``, if a dict, receives the
    measurements (cycles, seconds, cycles per second). Returns the output items."""
    from .fast import run_items
    outputs, measured = run_items(block, params, events, idle=idle, backpressure=backpressure, seed=seed)
    if stats is not None:
        stats.update(measured)
    return outputs


def check_actions(block, frames, actions):
    """A per-frame action file must hold one action per frame, each fitting the block's action layout."""
    layout = block.action_layout()
    if layout is None:
        if actions:
            raise ValueError(f"{block.name} takes no per-frame actions")
        return
    if actions is None:
        raise ValueError(f"{block.name} needs its per-frame actions: --actions FILE (one {{\"act\": ...}} line per "
                         f"frame)")
    if len(actions) != len(frames):
        raise TraceError(f"{getattr(actions, 'path', 'actions')}: {len(actions)} actions for {len(frames)} frames")
    for number, event in enumerate(actions):
        try:
            pack(layout, event["act"])
        except TraceError as exc:
            raise TraceError(f"{where(actions, number)}: {exc}") from None


def _golden_frames(block, params, frames, ctl_events, actions=None):
    return [frame for _, frame in golden_ports(block, params, frames, ctl_events, actions)]


def golden_ports(block, params, frames, ctl_events, actions=None):
    """``[(port, frame)]``: the frames the golden model sends for ``frames`` after the commands, in its order, each
    with the AXI4-Stream output it leaves on (``process_ports`` of a model with several; ``m_axis`` otherwise)."""
    model = block.golden(**params)
    for event in ctl_events:
        model.control(_complete_ctl(event["ctl"]))
    out = []
    for k, frame in enumerate(frames):
        if hasattr(model, "process_ports"):
            if actions is not None:
                raise ValueError(f"{block.name}: a model with several outputs takes no per-frame actions here")
            out += model.process_ports(frame)
            continue
        result = model.process(frame, actions[k]["act"]) if actions is not None else model.process(frame)
        # A pipeline sends nothing (None or []), one frame, or a list of frames for each frame in.
        out += [("m_axis", f) for f in (result if isinstance(result, list) else [] if result is None else [result])]
    return out


def replay_pcap(block, params, pcap_in, pcap_out, ctl_events, *, engine="golden", idle=0.0, backpressure=0.0,
                seed=1, actions=None, stats=None):
    """Run the frames of ``pcap_in`` through a packet pipeline after its control commands; write ``pcap_out``.

    Only packet blocks with a golden model of whole frames (``process(frame)`` returning a frame, None or a list of
    frames) replay pcap files; the RTL engine runs the block's cocotb ``replay`` test, with ``idle`` and
    ``backpressure`` the probabilities of pauses on its input and output, and raises ``RuntimeError`` when the RTL
    sends a different number of frames than the golden model (an extra or a missing frame). The fast engine
    (:mod:`lbpipe.fast`, Verilator) does the same without Python in the clock loop; ``stats``, if a dict, receives
    its measurements (cycles, seconds). Returns the number of frames written.
    """
    block = resolve_block(block)
    if block.is_meta or block.golden is None:
        raise ValueError(f"{block.name} does not replay pcap files")
    params = block.resolve(params)
    check_ctl_events(block, params, ctl_events)
    frames = read_pcap(pcap_in)
    check_actions(block, frames, actions)
    labelled = golden_ports(block, params, frames, ctl_events, actions)
    expected = [frame for _, frame in labelled]
    if engine == "golden":
        write_pcap(pcap_out, expected)
        return len(expected)
    if engine == "fast":
        from .fast import replay_frames
        got, measured = replay_frames(block, params, frames, ctl_events, actions=actions,
                                      plan=[port for port, _ in labelled], idle=idle, backpressure=backpressure,
                                      seed=seed)
        write_pcap(pcap_out, got)
        if stats is not None:
            stats.update(measured)
        for port, sent, want in measured["wrong_outputs"]:
            raise RuntimeError(f"{block.name}: the RTL sent {sent} frames on {port}, the golden model {want} "
                               f"(frames written to {pcap_out})")
        if len(got) != len(expected):
            raise RuntimeError(f"{block.name}: the RTL sent {len(got)} frames, the golden model {len(expected)} "
                               f"(frames written to {pcap_out})")
        return len(got)
    from lbpipe.tb.lib.runner import run_cocotb
    path = top_verilog(block, params)
    with tempfile.TemporaryDirectory(prefix="lbpipe-") as tmp:
        ctl = pathlib.Path(tmp) / "ctl.jsonl"
        write_events(ctl, ctl_events)
        acts = pathlib.Path(tmp) / "actions.jsonl"
        write_events(acts, actions or [])
        env = {"LBPIPE_CTL": str(ctl), "LBPIPE_ACTIONS": str(acts), "LBPIPE_PARAMS": json.dumps(params),
               "LBPIPE_PCAP_IN": str(pathlib.Path(pcap_in).resolve()),
               "LBPIPE_PCAP_OUT": str(pathlib.Path(pcap_out).resolve()), "LBPIPE_IDLE": str(idle),
               "LBPIPE_BACKPRESSURE": str(backpressure), "LBPIPE_SEED": str(seed)}
        run_cocotb(path, toplevel="lbpipe_top", test_module=block.tb_module, testcase="replay", extra_env=env)
    got = read_pcap(pcap_out)
    if len(got) != len(expected):
        raise RuntimeError(f"{block.name}: the RTL sent {len(got)} frames, the golden model {len(expected)} "
                           f"(frames written to {pcap_out})")
    return len(got)
