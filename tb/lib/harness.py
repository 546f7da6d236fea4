"""cocotb side of the lbpipe testbench harness, shared by every block.

The DUT is :class:`lbpipe.boards.top.AxiLiteTop` around a block. :func:`run_trace_test` reads a trace (see
:mod:`lbpipe.trace`) and its settings from the environment that :func:`lbpipe.engine.run_rtl` sets, then:

* writes control commands through cocotbext-axi's ``AxiLiteMaster`` after draining the pipeline;
* drives items on ``in_*`` with an idle generator, and takes items from ``out_*`` with a back-pressure generator;
* scoreboards every output item against the golden model, field by field, as it appears;
* when neither generator is active, checks the cycle timing the golden model predicts (``cycles``) and the
  block's ``latency``;
* writes the outputs (for ``lbpipe replay``) and measurements (cycles, items per clock).
"""

import json
import os
import random

import cocotb
from amaranth import Shape
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.blocks import get_block
from lbpipe.trace import pack, read_events, unpack, write_events

__all__ = ["TB", "StreamSource", "GroupSource", "trace_groups", "StreamSink", "run_trace_test", "run_reset_test", "Scoreboard", "settings_from_env",
           "pause_pattern", "AxisBench", "write_command"]

CLOCK_NS = 4  # 250 MHz, the OpenNIC user-logic clock

# ControlBridge register offsets (hdl/lib/axil.py).
_REG_TABLE, _REG_INDEX, _REG_DATA_LO, _REG_DATA_HI, _REG_COMMIT = 0x08, 0x0C, 0x10, 0x14, 0x18
_REG_STATUS_BASE = 0x40


def settings_from_env():
    """The run settings :func:`lbpipe.engine.run_rtl` passes through the environment."""
    block = get_block(os.environ["LBPIPE_BLOCK"])
    params = block.resolve(json.loads(os.environ.get("LBPIPE_PARAMS", "{}")))
    return dict(
        block=block,
        params=params,
        trace=os.environ.get("LBPIPE_TRACE"),
        out=os.environ.get("LBPIPE_OUT"),
        stats=os.environ.get("LBPIPE_STATS"),
        idle=float(os.environ.get("LBPIPE_IDLE", "0")),
        backpressure=float(os.environ.get("LBPIPE_BACKPRESSURE", "0")),
        seed=int(os.environ.get("LBPIPE_SEED", "1")),
        compare=os.environ.get("LBPIPE_COMPARE", "1") == "1",
    )


def pause_pattern(rng, p, longest=8):
    """A cocotbext-axi pause generator: runs of 1 to ``longest`` cycles, each run paused with probability ``p``
    (bursts as well as single cycles)."""
    while True:
        pause = rng.random() < p
        for _ in range(rng.randint(1, longest)):
            yield pause


def _bind_stream(port, dut, prefix, layout, rng):
    """Attach ``<prefix>_valid/_ready/_payload``, the clock and reset of ``dut`` to a source or sink."""
    port.valid = getattr(dut, f"{prefix}_valid")
    port.ready = getattr(dut, f"{prefix}_ready")
    port.payload = getattr(dut, f"{prefix}_payload")
    port.clk = dut.clk
    port.rst = dut.rst
    port.layout = layout
    port.rng = rng or random.Random(0)


class StreamSource:
    """Drives an Amaranth stream (``<prefix>_valid/_ready/_payload``). ``valid`` never waits on ``ready``; with
    probability ``idle`` per cycle the source inserts an idle cycle before offering the next item."""

    def __init__(self, dut, prefix, layout, *, idle=0.0, rng=None):
        _bind_stream(self, dut, prefix, layout, rng)
        self.idle = idle
        self.queue = []
        self.sent = 0
        self.accept_cycles = []
        self.cycle = 0
        self.valid.value = 0
        self.payload.value = 0
        self._offering = False
        self._task = cocotb.start_soon(self._run())

    def send(self, values):
        self.queue.append(pack(self.layout, values))

    def idle_now(self):
        return not self.queue and not int(self.valid.value)

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            if int(self.rst.value):
                # Nothing is offered, and so nothing is taken, while reset is asserted.
                self._offering = False
                self.valid.value = 0
                continue
            if self._offering and int(self.ready.value):
                self.queue.pop(0)
                self.sent += 1
                self.accept_cycles.append(self.cycle)
                self._offering = False
            if not self._offering:
                if self.queue and not (self.idle and self.rng.random() < self.idle):
                    self.payload.value = self.queue[0]
                    self.valid.value = 1
                    self._offering = True
                else:
                    self.valid.value = 0

    def flush(self):
        """Forget items not yet accepted (reset)."""
        self.queue.clear()
        self._offering = False
        self.valid.value = 0

    def kill(self):
        self._task.cancel()


class GroupSource:
    """Drives a block's input streams together (``i`` as ``in_*`` and each extra stream as ``<name>_*``): each
    group (``{"item": values, "upd": values, ...}``, at most one item per stream) is offered in one clock on all its
    streams; a stream whose item was taken drops ``valid`` while the rest wait; the next group is offered once the
    whole group is taken. With probability ``idle`` per cycle an idle cycle comes before a group. A lookup taken
    before an extra item of its own group is an error (the group's extras apply first). ``sent`` and
    ``accept_cycles`` count the ``i`` items, as :class:`StreamSource` does."""

    def __init__(self, dut, ports, *, idle=0.0, rng=None):
        self.ports = {}
        for kind, (prefix, layout) in ports.items():
            port = type("Port", (), {})()
            _bind_stream(port, dut, prefix, layout, None)
            port.valid.value = 0
            port.payload.value = 0
            self.ports[kind] = port
        self.clk, self.rst = dut.clk, dut.rst
        self.rng = rng or random.Random(0)
        self.idle = idle
        self.queue = []
        self.sent = 0
        self.accept_cycles = []
        self.cycle = 0
        self.errors = []
        self._pending = set()
        self._task = cocotb.start_soon(self._run())

    def send_group(self, group):
        self.queue.append({kind: pack(self.ports[kind].layout, values) for kind, values in group.items()})

    def idle_now(self):
        return not self.queue and not self._pending

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            if int(self.rst.value):
                self._drop()
                continue
            if self._pending:
                taken = {kind for kind in self._pending
                         if int(self.ports[kind].valid.value) and int(self.ports[kind].ready.value)}
                if "item" in taken and self._pending - taken:
                    self.errors.append(f"cycle {self.cycle}: the lookup was taken before "
                                       f"{sorted(self._pending - taken)} of its group")
                for kind in taken:
                    self.ports[kind].valid.value = 0
                    if kind == "item":
                        self.sent += 1
                        self.accept_cycles.append(self.cycle)
                self._pending -= taken
                if not self._pending:
                    self.queue.pop(0)
            if not self._pending and self.queue and not (self.idle and self.rng.random() < self.idle):
                for kind, word in self.queue[0].items():
                    self.ports[kind].payload.value = word
                    self.ports[kind].valid.value = 1
                self._pending = set(self.queue[0])

    def _drop(self):
        for port in self.ports.values():
            port.valid.value = 0
        self._pending = set()

    def flush(self):
        """Forget groups not yet taken (reset). A group partly taken is forgotten whole."""
        self.queue.clear()
        self._drop()

    def kill(self):
        self._task.cancel()


class StreamSink:
    """Takes items from an Amaranth stream; with probability ``backpressure`` per cycle holds ``ready`` low.
    Checks that an offered item is neither withdrawn nor changed before it is taken (the stream rule)."""

    def __init__(self, dut, prefix, layout, *, backpressure=0.0, rng=None, on_item=None):
        _bind_stream(self, dut, prefix, layout, rng)
        self.backpressure = backpressure
        self.items = []
        self.cycles = []
        self.cycle = 0
        self.on_item = on_item
        self.errors = []
        self.ready.value = 0
        self._task = cocotb.start_soon(self._run())

    async def _run(self):
        ready = 0
        held = None
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            valid = int(self.valid.value)
            if int(self.rst.value):
                held = None   # reset may withdraw an offered item
            if held is not None and (not valid or int(self.payload.value) != held):
                self.errors.append(f"cycle {self.cycle}: output withdrawn or changed while waiting for ready")
            held = None
            if valid:
                word = int(self.payload.value)
                if ready:
                    item = unpack(self.layout, word)
                    self.items.append(item)
                    self.cycles.append(self.cycle)
                    if self.on_item:
                        self.on_item(item)
                else:
                    held = word
            ready = 0 if (self.backpressure and self.rng.random() < self.backpressure) else 1
            self.ready.value = ready

    def kill(self):
        self._task.cancel()


class FirstBeats:
    """Records the cycle of every frame's first beat accepted on ``s_axis`` and handed on at ``m_axis`` (reset
    restarts the framing), and of every beat accepted on ``s_axis``."""

    def __init__(self, dut):
        self.dut = dut
        self.ins, self.outs, self.accepted = [], [], []
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        cycle, first_in, first_out = 0, True, True
        while True:
            await RisingEdge(dut.clk)
            cycle += 1
            if int(dut.rst.value):
                first_in = first_out = True
                continue
            if int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                self.accepted.append(cycle)
                if first_in:
                    self.ins.append(cycle)
                first_in = bool(int(dut.s_axis_tlast.value))
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
                if first_out:
                    self.outs.append(cycle)
                first_out = bool(int(dut.m_axis_tlast.value))


class AxisBench:
    """Clock, reset and cocotbext-axi ``AxiStreamSource``/``AxiStreamSink`` on ``s_axis_*``/``m_axis_*`` (and an
    ``AxiLiteMaster`` on ``s_axil_*`` when ``axil``), shared by the packet I/O testbenches. ``pauses`` gives the
    source's and the sink's pause probabilities (runs of 1 to ``longest`` cycles), or None for none."""

    def __init__(self, dut, *, seed=1, pauses=None, longest=8, axil=False, quiet=False):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink, AxiStreamSource
        self.dut = dut
        self.rng = random.Random(seed)
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self._cycle = 0
        cocotb.start_soon(self._count_cycles())
        dut.rst.value = 1
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        if quiet:
            for side in (self.source, self.sink):
                side.log.setLevel("WARNING")        # not one line per frame
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst) if axil else None
        if pauses:
            p_source, p_sink = pauses
            self.source.set_pause_generator(pause_pattern(random.Random(self.rng.random()), p_source, longest))
            self.sink.set_pause_generator(pause_pattern(random.Random(self.rng.random()), p_sink, longest))

    async def reset(self, cycles=4):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def control(self, cmd):
        """One control command through the AXI4-Lite bridge (see :meth:`TB.control`)."""
        await write_command(self.axil, cmd)


    #: Default budget of a wait for output frames: this many cycles per beat still to go in and per beat expected
    #: out, plus :attr:`WAIT_SLACK` (generous: sink pauses of up to 8 cycles, compensation NACKs, table scans).
    WAIT_CYCLES_PER_BEAT = 16
    WAIT_SLACK = 5000

    def wait_budget(self, expected, cycles=None):
        """Cycles to allow for ``expected`` frames to leave: ``cycles`` if given, else :attr:`WAIT_CYCLES_PER_BEAT`
        times the beats still queued in the source and the beats expected, plus :attr:`WAIT_SLACK`."""
        if cycles is not None:
            return cycles
        beats_in = -(-self.source.queue_occupancy_bytes // 64) + self.source.queue_occupancy_frames
        beats_out = sum(-(-len(frame) // 64) for frame in expected)
        return self.WAIT_CYCLES_PER_BEAT * (beats_in + beats_out) + self.WAIT_SLACK

    async def recv_frame(self, deadline, what):
        """The next frame from the sink, or an ``AssertionError`` naming ``what`` was still missing if none has come
        by cycle ``deadline`` of :attr:`bench_cycle` (a stalled pipeline fails the test rather than hanging it)."""
        while self.sink.empty():
            if self.bench_cycle >= deadline:
                raise AssertionError(
                    f"timed out at cycle {self.bench_cycle}: {what} never left m_axis; the source still holds "
                    f"{self.source.queue_occupancy_frames} frames ({self.source.queue_occupancy_bytes} bytes), "
                    f"s_axis_tready={self.dut.s_axis_tready.value}, m_axis_tvalid={self.dut.m_axis_tvalid.value}")
            await RisingEdge(self.dut.clk)
        return self.sink.recv_nowait()

    async def recv(self, what="the next frame", cycles=None):
        """The next frame from the sink, within :meth:`wait_budget` of the frames still queued (or ``cycles``): a
        stalled pipeline fails the test naming ``what`` rather than hanging it."""
        return await self.recv_frame(self.bench_cycle + self.wait_budget([], cycles), what)

    @property
    def bench_cycle(self):
        """Clock cycles since the bench was built."""
        return self._cycle

    async def _count_cycles(self):
        while True:
            await RisingEdge(self.dut.clk)
            self._cycle += 1

    async def check_frames(self, expected, *, cycles=None, inputs=None):
        """Receive ``len(expected)`` frames and compare them with ``expected``; a RoCEv2 frame must also carry a
        correct ICRC (with ``inputs``, the frames sent, one per expected frame: only where the frame sent had one,
        so a test may send frames to the RoCEv2 port whose last bytes are no ICRC). Returns the error messages.
        Fails (``AssertionError`` naming the first frame missing) if they have not all left within ``cycles``
        (default :meth:`wait_budget`)."""
        from lbpipe.tb.lib.packets import classify, icrc
        errors = []
        deadline = self.bench_cycle + self.wait_budget(expected, cycles)
        for i, want in enumerate(expected):
            what = (f"output frame {i} of {len(expected)} ({len(want)} bytes, kind {classify(want)['kind']}; "
                    f"{i} received)")
            got = bytes((await self.recv_frame(deadline, what)).tdata)
            if got != want:
                at = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                errors.append(f"output frame {i} ({len(got)} bytes, kind {classify(got)['kind']}): differs from "
                              f"the golden model's ({len(want)} bytes, kind {classify(want)['kind']}) from byte {at}: "
                              f"{got[at:at + 4].hex()} against {want[at:at + 4].hex()}")
            elif (classify(got)["kind"] != 0 and got[-4:] != icrc(got)
                  and (inputs is None or inputs[i][-4:] == icrc(inputs[i]))):
                errors.append(f"output frame {i}: ICRC {got[-4:].hex()} is not the frame's {icrc(got).hex()}")
        return errors

    async def program(self, model, cmds):
        """Write ``cmds`` through ``ctl`` (and give each to ``model``, unless None), then wait 8 clocks."""
        for cmd in cmds:
            await self.control(cmd)
            if model is not None:
                model.control(cmd)
        await ClockCycles(self.dut.clk, 8)

    async def stall_then_check(self, frames, expected, *, cycles=3000, hold=None, release=None):
        """Send ``frames`` while an output is held for ``cycles`` clocks (``hold()``/``release()``; default
        ``m_axis``), then release it and check the frames against ``expected`` (:meth:`check_frames`). Returns the
        error messages, with one if every frame was taken during the stall (it never reached ``s_axis``)."""
        (hold or (lambda: setattr(self.sink, "pause", True)))()
        for f in frames:
            self.send(f)
        await ClockCycles(self.dut.clk, cycles)
        errors = []
        if self.source.empty():
            errors.append("every frame was taken during the stall: it never reached s_axis")
        (release or (lambda: setattr(self.sink, "pause", False)))()
        return errors + await self.check_frames(expected, inputs=frames)

    async def check_counters(self, model):
        """The STATUS registers against ``model.stats()``; returns the error messages."""
        counters = [await self.axil.read_dword(0x40 + 4 * i) for i in range(len(model.stats()))]
        if counters != model.stats():
            return [f"counters {counters}, golden model {model.stats()}"]
        return []

    async def reset_in_flight(self, frames, after):
        """Send ``frames``, and ``after`` cycles later, with them in flight, hold reset for 4 cycles while the source
        and the sink drop what they hold."""
        for frame in frames:
            self.send(frame)
        await ClockCycles(self.dut.clk, after)
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.source.clear()
        self.sink.clear()
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    def count_accepted(self, total_beats):
        """From the first ``s_axis`` transfer until ``total_beats`` beats have been taken, record 1 for each cycle
        that takes a beat and 0 for each that does not; returns the list (beats per clock: sum over length)."""
        dut = self.dut
        accepted = []

        async def count():
            taken = 0
            while taken < total_beats:
                await RisingEdge(dut.clk)
                if int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                    accepted.append(1)
                    taken += 1
                elif taken:
                    accepted.append(0)
        cocotb.start_soon(count())
        return accepted

    async def size_bench(self, model, make_frame, *, count=48, latency=False):
        """``lbpipe bench`` of a packet pipeline: for each frame size of ``LBPIPE_BENCH_SIZES`` (JSON list), send
        ``count`` frames of that size back to back (``make_frame(size, k)``), check every frame that leaves against
        ``model``, and measure the beats accepted per clock; the results go to ``LBPIPE_BENCH_OUT`` as JSON.

        With ``latency``, each size first sends one frame alone on the idle pipeline (``make_frame(size, -1)``) and
        reports the cycles from its first beat in to its first beat out (``first_beat_latency``), and the largest
        such span across the back-to-back run (``first_beat_latency_max``); every frame must then leave ``m_axis``
        as one frame out per frame in. Returns the results."""
        import json
        results = []
        beats_seen = FirstBeats(self.dut) if latency else None
        for size in json.loads(os.environ["LBPIPE_BENCH_SIZES"]):
            result = {"size": size}
            if latency:
                first = len(beats_seen.ins)
                await self._bench_frames(model, [make_frame(size, -1)], f"{size}-byte frame alone")
                result["first_beat_latency"] = beats_seen.outs[first] - beats_seen.ins[first]
                await ClockCycles(self.dut.clk, 20)
                first = len(beats_seen.ins)
            frames = [make_frame(size, k) for k in range(count)]
            assert all(len(f) == size for f in frames), f"frames of {size} bytes asked for"
            beats = count * -(-size // 64)
            accepted = self.count_accepted(beats)
            await self._bench_frames(model, frames, f"{size}-byte frames")
            result.update({"frames": count, "beats": beats, "cycles": len(accepted),
                           "beats_per_clock": beats / len(accepted)})
            if latency:
                result["first_beat_latency_max"] = max(o - i for i, o in zip(beats_seen.ins[first:],
                                                                            beats_seen.outs[first:]))
                await ClockCycles(self.dut.clk, 20)
            results.append(result)
        with open(os.environ["LBPIPE_BENCH_OUT"], "w") as f:
            json.dump(results, f)
        return results

    async def _bench_frames(self, model, frames, what):
        """Send ``frames`` back to back and check what leaves against ``model``."""
        expected = []
        for frame in frames:
            out = model.process(frame)
            expected += out if isinstance(out, list) else [out]
            self.send(frame)
        deadline = self.bench_cycle + self.wait_budget(expected)
        for i, want in enumerate(expected):
            got = bytes((await self.recv_frame(deadline, f"{what}: output {i}")).tdata)
            assert got == want, f"{what}: output {i} differs from the golden model"

    async def replay_setup(self):
        """For ``lbpipe replay --engine rtl`` of a packet pipeline: write the commands of ``LBPIPE_CTL`` and queue
        the frames of ``LBPIPE_PCAP_IN``; returns the frames."""
        from lbpipe.trace import read_events, read_pcap
        for event in read_events(os.environ["LBPIPE_CTL"], allow_empty=True):
            await self.control(event["ctl"])
        frames = read_pcap(os.environ["LBPIPE_PCAP_IN"])
        for frame in frames:
            self.send(frame)
        return frames

    async def replay(self, quiet_cycles=2000):
        """``lbpipe replay BLOCK IN.pcap --engine rtl``: ``LBPIPE_IDLE`` and ``LBPIPE_BACKPRESSURE`` set the source's
        and the sink's pause probabilities; the commands, then the frames; every frame that leaves until none has
        for ``quiet_cycles`` after the last went in is written to ``LBPIPE_PCAP_OUT`` (the engine compares their
        number with the golden model's)."""
        from lbpipe.trace import write_pcap
        idle = float(os.environ.get("LBPIPE_IDLE", "0") or 0)
        backpressure = float(os.environ.get("LBPIPE_BACKPRESSURE", "0") or 0)
        seed = int(os.environ.get("LBPIPE_SEED", "1") or 1)
        rng = random.Random(seed)
        if idle:
            self.source.set_pause_generator(pause_pattern(random.Random(rng.random()), idle))
        if backpressure:
            self.sink.set_pause_generator(pause_pattern(random.Random(rng.random()), backpressure))
        frames = await self.replay_setup()
        out = []
        quiet = 0
        # Bounded: a pipeline that stops taking input would otherwise keep the source non-empty for ever. The budget
        # grows with the pauses (a fraction p of cycles paused leaves 1 - p of them to move beats).
        scale = 1 / max(0.05, 1 - max(idle, backpressure))
        deadline = self.bench_cycle + int(scale * self.wait_budget(frames)) + quiet_cycles
        while quiet < quiet_cycles or not self.source.empty():
            if self.bench_cycle >= deadline:
                raise AssertionError(f"replay timed out at cycle {self.bench_cycle}: the source still holds "
                                     f"{self.source.queue_occupancy_frames} frames, {len(out)} left m_axis")
            await RisingEdge(self.dut.clk)
            if self.sink.empty():
                quiet += 1
            else:
                out.append(bytes(self.sink.recv_nowait().tdata))
                quiet = 0
        write_pcap(os.environ["LBPIPE_PCAP_OUT"], out)

    def send(self, frame):
        from cocotbext.axi import AxiStreamFrame
        self.source.send_nowait(AxiStreamFrame(frame, tuser=0))


async def write_command(axil, cmd):
    """Write ``{"table", "index", "data"}`` through a :class:`lbpipe.hdl.lib.axil.ControlBridge`: TABLE, INDEX, DATA_LO,
    DATA_HI, then COMMIT, which returns once the block has accepted the command."""
    data = cmd.get("data", 0)
    await axil.write_dword(_REG_TABLE, cmd.get("table", 0))
    await axil.write_dword(_REG_INDEX, cmd.get("index", 0))
    await axil.write_dword(_REG_DATA_LO, data & 0xFFFFFFFF)
    await axil.write_dword(_REG_DATA_HI, (data >> 32) & 0xFFFFFFFF)
    await axil.write_dword(_REG_COMMIT, 1)


class Scoreboard:
    """Compares each RTL output with the golden model's, in order, and keeps the first mismatches."""

    def __init__(self, expected):
        self.expected = expected
        self.index = 0
        self.mismatches = []

    def __call__(self, item):
        if self.index >= len(self.expected):
            self.mismatches.append(f"output {self.index}: unexpected extra item {item}")
        else:
            want = self.expected[self.index]
            diff = {k: (item.get(k), v) for k, v in want.items() if item.get(k) != v}
            if diff:
                self.mismatches.append(f"output {self.index} (tag {want.get('tag')}): (rtl, golden) differ in {diff}")
        self.index += 1


class TB:
    """Clock, reset, AXI4-Lite master and the two metadata streams around an :class:`AxiLiteTop`."""

    def __init__(self, dut, block, params, *, idle=0.0, backpressure=0.0, seed=1, on_item=None):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster
        self.dut = dut
        self.block = block
        self.params = params
        self.in_layout, self.out_layout, _, self.component = block.layouts(params)
        rng = random.Random(seed)
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        dut.rst.value = 1
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.streams = block.stream_layouts(params)
        if self.streams:
            ports = {"item": ("in", self.in_layout), **{name: (name, lay) for name, lay in self.streams.items()}}
            self.source = GroupSource(dut, ports, idle=idle, rng=random.Random(rng.random()))
        else:
            self.source = StreamSource(dut, "in", self.in_layout, idle=idle, rng=random.Random(rng.random()))
        self.sink = StreamSink(dut, "out", self.out_layout, backpressure=backpressure,
                               rng=random.Random(rng.random()), on_item=on_item)

    async def reset(self, cycles=4):
        self.source.flush()
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await self.wait_ready()

    async def wait_ready(self, limit=1_000_000):
        """Wait until the block accepts input (blocks may clear their tables after reset)."""
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            if int(self.dut.in_ready.value):
                return
        raise AssertionError("the block never became ready after reset")

    async def control(self, cmd):
        """Write one control command through the AXI4-Lite bridge; returns when the block has accepted it."""
        await write_command(self.axil, cmd)

    async def read_status(self, count):
        """Read STATUS_0 .. STATUS_{count-1} (the block's statistics counters) over AXI4-Lite."""
        return [await self.axil.read_dword(_REG_STATUS_BASE + 4 * i) for i in range(count)]

    async def play(self, events):
        """Send a trace: items queue on the input; each control command waits for the pipeline to drain first.
        With extra streams, events are grouped as :mod:`lbpipe.trace` says (extras, then the item they share a
        clock with)."""
        if self.streams:
            return await self._play_groups(events)
        for event in events:
            if "ctl" in event:
                await self.drain()
                await self.control(event["ctl"])
            else:
                self.source.send(event["item"])

    async def _play_groups(self, events):
        for group in trace_groups(events):
            if "ctl" in group:
                await self.drain()
                await self.control(group["ctl"])
            else:
                self.source.send_group(group)

    async def drain(self, limit=1_000_000):
        """Wait until every item sent has come out (blocks return one item per item)."""
        for _ in range(limit):
            if self.source.idle_now() and len(self.sink.items) >= self.source.sent:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"drain timed out: sent {self.source.sent}, received {len(self.sink.items)}")


def trace_groups(events):
    """The clocks a trace is offered in: each extra-stream event joins the group being built (a new one when its
    stream is already in it), an ``item`` closes its group, a ``ctl`` stands alone (``{"ctl": command}``)."""
    groups, group = [], {}
    for event in events:
        if "ctl" in event:
            if group:
                groups.append(group)
            groups.append({"ctl": event["ctl"]})
            group = {}
            continue
        kind = "item" if "item" in event else next(iter(event))
        if kind in group:
            groups.append(group)
            group = {}
        group[kind] = event[kind]
        if kind == "item":
            groups.append(group)
            group = {}
    if group:
        groups.append(group)
    return groups


def _lone_groups(events):
    """Per item: the groups without an item offered since the previous item of its run (each takes a clock)."""
    out, lone = [], 0
    for group in trace_groups(events):
        if "ctl" in group:
            lone = 0
        elif "item" in group:
            out.append(lone)
            lone = 0
        else:
            lone += 1
    return out


def _timing_errors(tb, events, expected, model):
    """With no idle and no back-pressure, check latency and the gaps the golden model predicts, within each run
    of items between two control commands (the pipeline is drained at each command)."""
    errors = []
    latency = getattr(tb.component, "latency", None)
    accept, out = tb.source.accept_cycles, tb.sink.cycles
    lone = _lone_groups(events) if tb.streams else [0] * len(expected)
    index = 0
    for segment in _segments(events):
        for k in range(index, index + segment):
            if k == index and latency is not None:
                # An item that holds the pipeline for c cycles leaves c - 1 cycles later than the latency.
                want = latency + (model.cycles(expected[k]) - 1 if hasattr(model, "cycles") else 0)
                if out[k] - accept[k] != want:
                    errors.append(f"item {k}: latency {out[k] - accept[k]} cycles, datasheet says {want}")
            if k > index and (hasattr(model, "cycles") or lone[k]):
                want = (model.cycles(expected[k]) if hasattr(model, "cycles") else 1) + lone[k]
                if out[k] - out[k - 1] != want:
                    errors.append(f"item {k}: output {out[k] - out[k - 1]} cycles after the previous one, "
                                  f"golden model predicts {want}")
        index += segment
    return errors


class _SkewedTiming:
    """A golden model whose timing prediction is one cycle off for one item (harness self-test)."""

    def __init__(self, model, victim):
        self._model = model
        self._victim = victim

    def cycles(self, item):
        base = self._model.cycles(item) if hasattr(self._model, "cycles") else 1
        return base + (item is self._victim)


def _segments(events):
    sizes, run = [], 0
    for event in events:
        if "ctl" in event:
            if run:
                sizes.append(run)
            run = 0
        elif "item" in event:
            run += 1
    if run:
        sizes.append(run)
    return sizes


async def run_trace_test(dut, *, corrupt=None):
    """The generic trace test: drive the trace, scoreboard against the golden model, record outputs and stats.

    ``corrupt`` is for the harness's own tests, which must see it fail: ``"output"`` flips a bit of one expected
    output, ``"timing"`` shifts one predicted output cycle.
    """
    from lbpipe.engine import golden_run
    s = settings_from_env()
    block, params = s["block"], s["params"]
    events = read_events(s["trace"])
    expected, golden_model = golden_run(block.name, params, events) if s["compare"] else ([], None)
    if corrupt == "output":
        victim = expected[len(expected) // 2]
        victim["tag"] ^= 1
    board = Scoreboard(expected) if s["compare"] else None
    tb = TB(dut, block, params, idle=s["idle"], backpressure=s["backpressure"], seed=s["seed"], on_item=board)
    await tb.reset()
    start = tb.source.cycle
    await tb.play(events)
    await tb.drain()
    cycles = tb.source.cycle - start
    n_items = sum(1 for e in events if "item" in e)
    stats = {
        "items": n_items,
        "cycles": cycles,
        "accepted": tb.source.sent,
        "outputs": len(tb.sink.items),
    }
    acc = tb.source.accept_cycles
    if len(acc) > 1:
        stats["items_per_clock"] = (len(acc) - 1) / (acc[-1] - acc[0]) if acc[-1] > acc[0] else 1.0
    errors = list(tb.sink.errors) + list(getattr(tb.source, "errors", []))
    members = tb.component.signature.members
    if "stats" in members:
        counters = await tb.read_status(Shape.cast(members["stats"].shape).width // 32)
        stats["counters"] = counters
        if s["compare"] and counters != golden_model.stats():
            errors.append(f"statistics counters {counters}, golden model {golden_model.stats()}")
    if s["out"]:
        write_events(s["out"], [{"item": item} for item in tb.sink.items])
    if board is not None:
        errors += board.mismatches[:10]
        if board.index != len(expected):
            errors.append(f"received {board.index} items, golden model produced {len(expected)}")
        if not s["idle"] and not s["backpressure"] and not board.mismatches:
            model = block.golden(**params)
            if corrupt == "timing":
                model = _SkewedTiming(model, expected[-1])
            errors += _timing_errors(tb, events, expected, model)[:10]
    stats["errors"] = len(errors)
    if s["stats"]:
        with open(s["stats"], "w") as f:
            json.dump(stats, f)
    assert not errors, "\n".join(errors)


async def expect_failure(check, reason):
    """Run ``check`` (an awaitable that must fail) and pass only if it fails with an ``AssertionError`` whose
    message contains ``reason``: a self-test that failed for another reason (a timeout, a crash, another check)
    fails, instead of passing as cocotb's ``expect_fail`` would."""
    try:
        await check
    except AssertionError as exc:
        if reason not in str(exc):
            raise AssertionError(f"failed, but not because {reason!r}: {str(exc)[:500]}") from None
    else:
        raise AssertionError(f"did not fail: the check for {reason!r} let the planted error through")


async def run_reset_test(dut):
    """Reset in the middle of traffic: what came out before must be a prefix of the golden outputs, and after the
    reset a fresh run of the whole trace must match a freshly reset golden model exactly (no stale state, no
    spurious output)."""
    from lbpipe.engine import run_golden
    s = settings_from_env()
    block, params = s["block"], s["params"]
    events = read_events(s["trace"])
    expected = run_golden(block.name, params, events)
    tb = TB(dut, block, params, idle=s["idle"], backpressure=s["backpressure"], seed=s["seed"])
    await tb.reset()
    rng = random.Random(s["seed"])
    cut = rng.randrange(len(events) // 4, 3 * len(events) // 4)
    await tb.play(events[:cut])
    await ClockCycles(dut.clk, rng.randrange(1, 8))   # items in flight
    await tb.reset()
    before = list(tb.sink.items)
    errors = list(tb.sink.errors)
    if before != expected[:len(before)]:
        errors.append("outputs before the reset are not a prefix of the golden outputs")
    board = Scoreboard(run_golden(block.name, params, events))
    tb.sink.items.clear()
    tb.sink.on_item = board
    tb.source.sent = 0
    await tb.play(events)
    await tb.drain()
    errors += board.mismatches[:10]
    if board.index != len(board.expected):
        errors.append(f"after reset: received {board.index} items, golden model produced {len(board.expected)}")
    assert not errors, "\n".join(errors)


async def run_reset_state_test(dut):
    """Reset, then carry on without setting anything up again: after items and commands up to a random cut, a reset
    with items in flight, then the rest of the trace as it stands. The outputs after the reset must be those of a
    golden model that saw the same commands and items and then its documented ``reset()``: state the reset must
    clear (per-flow state, counters) shows as a mismatch if it survives, and state it must keep (control-plane
    tables) as a mismatch if it is lost."""
    from lbpipe.engine import apply_event, check_events
    s = settings_from_env()
    block, params = s["block"], s["params"]
    events = read_events(s["trace"])
    layout = check_events(block, params, events)
    tb = TB(dut, block, params, idle=s["idle"], backpressure=s["backpressure"], seed=s["seed"])
    await tb.reset()
    rng = random.Random(s["seed"] + 1)
    cut = rng.randrange(len(events) // 4, 3 * len(events) // 4)
    await tb.play(events[:cut])
    if tb.streams:
        # Blocks with extra streams write their memories from items (the PIT's updates and probes): which of the
        # writes in flight land before a reset depends on the cycle, so the reset comes with the pipeline empty.
        await tb.drain()
    await ClockCycles(dut.clk, rng.randrange(1, 8))   # items in flight
    await tb.reset()
    model = block.golden(**params)
    for event in events[:cut]:
        apply_event(model, layout, block.stream_layouts(params), event)
    model.reset()
    streams = block.stream_layouts(params)
    expected = [apply_event(model, layout, streams, e) for e in events[cut:]]
    expected = [out for e, out in zip(events[cut:], expected) if "item" in e]
    board = Scoreboard(expected)
    tb.sink.items.clear()
    tb.sink.on_item = board
    tb.source.sent = 0
    await tb.play(events[cut:])
    await tb.drain()
    errors = list(tb.sink.errors) + board.mismatches[:10]
    if board.index != len(board.expected):
        errors.append(f"after reset: received {board.index} items, golden model produced {len(board.expected)}")
    assert not errors, "\n".join(errors)


@cocotb.test()
async def trace(dut):
    """Drive the trace, compare every output with the golden model, check timing when unthrottled."""
    await run_trace_test(dut)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with items in flight: earlier outputs are a golden prefix, and a rerun after reset matches exactly."""
    await run_reset_test(dut)


@cocotb.test()
async def reset_state(dut):
    """Reset, then the rest of the trace without a new set-up: outputs as the golden model's documented reset."""
    await run_reset_state_test(dut)


@cocotb.test()
async def harness_catches_a_wrong_output(dut):
    """Self-test of the scoreboard: one expected output has a flipped bit, so the run must fail on it."""
    await expect_failure(run_trace_test(dut, corrupt="output"), "(rtl, golden) differ in")


@cocotb.test()
async def harness_catches_a_wrong_cycle(dut):
    """Self-test of the timing check: one predicted output cycle is off by one, so the run must fail on it."""
    await expect_failure(run_trace_test(dut, corrupt="timing"), "golden model predicts")
