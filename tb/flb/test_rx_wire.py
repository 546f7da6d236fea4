"""cocotb testbench of FLB's receive side in the wire (CNM tap -> parser -> flb-owd -> clear).

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.flb.rx_wire.FlbRxWire`, parameters in
``LBPIPE_PARAMS`` (JSON). Every output frame, every item on ``meas``, ``dly`` and ``cnm``, every CNM frame sent on
``m_cnm`` and every counter is compared with the golden model, or (``by_hand``, ``notify_by_hand``) with the
hand-worked scenarios of ``tb/flb/rx_frames.py`` and ``tb/flb/rx_notify.py``. Marked frames and CNM frames are built
by ``tb/flb/rx_frames.py`` from the datasheet's formats.

Dequeues (``deq``) race the frames' enqueues into flb-cnm; the testbench records the order the wire took them in
(its round robin's choices) and gives it to the golden model, which checks what each event did.

The clock is stopped (``ctl`` table 48) except in ``clock_running``, so the measurements do not depend on the
cycle.
"""

import random

import copy
import os

import cocotb
from amaranth.lib import data
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.flb.rx_wire import FlbRxWireModel
from lbpipe.tb.flb.rx_frames import clocked_steps, cnm_frame, hand_scenarios, mark
from lbpipe.tb.flb.test_wire import _bits, _params, flows_for as tx_flows_for, stop_clock
from lbpipe.tb.lib.harness import AxisBench, FirstBeats, StreamSink, StreamSource
from lbpipe.tb.lib.packets import classify, mixed_roce_frames, sized_data

BEAT = 64
# The wire's control map and counters, from docs/flb_rx_wire.md.
FORGET, FORGET_ALL, CLOCK, EDGE, THRESHOLD, MAC = 0, 1, 48, 49, 50, 51
N_COUNTERS = 17


def output_layouts(p):
    """The three output streams' payloads, from the datasheet's widths (first field lowest)."""
    eb, pb = _bits(p["n_edges"]), _bits(p["n_paths"])
    return {
        "meas": data.StructLayout({"edge": eb, "path": pb, "delay": p["delay_bits"]}),
        "dly": data.StructLayout({"dest": eb, "path": pb, "delay": p["delay_bits"]}),
        "cnm": data.StructLayout({"flow": _bits(p["n_flows"]), "dest": eb, "cp": _bits(p["n_ports"]), "n": 4,
                                  "cong": 1}),
    }


def flows_for(rng, p, count=8):
    """(src, dst, sport, dqpn) of ``count`` flows from source edges over every value of the edge's bits (some
    beyond ``n_edges`` when the field has room), one over IPv6: flb-tx-wire's flows, the edge in the source."""
    return tx_flows_for(rng, p["n_edges"], p["edge_shift"], count, source=True)


def frames_for(rng, count, flows, p, *, now=0, sizes=None):
    """:func:`mixed_roce_frames` with FLB marks on most RoCEv2 frames: samples (stamps a random queueing delay
    before ``now`` with a per-source offset, some below every earlier one, some across the wrap), piggybacks
    (any path field, delays up to 16 bits), both marks; CNM frames, for this edge and not, with fields in and out
    of range, some cut short; some non-RoCE frames with the mark bits in the same byte."""
    frames = []
    mod = 1 << p["time_bits"]
    offsets = {}
    for f in mixed_roce_frames(rng, count, flows, sizes):
        r = rng.random()
        if classify(f)["kind"] != PacketKind.OTHER.value:
            if r < 0.4:
                key = f[26:30] if f[12:14] == b"\x08\x00" else f[22:38]
                base = offsets.setdefault(key, rng.randrange(mod))
                stamp = (now - base - rng.choice([0, 0, 1, 5, 40, 300, rng.randrange(mod // 2)])) % mod
                f = mark(f, s=1, value=stamp | rng.choice([0, 0, 0, mod]) % 65536)
            elif r < 0.7:
                f = mark(f, p=1, path=rng.randrange(16) if rng.random() < 0.2 else rng.randrange(p["n_paths"]),
                         value=rng.choice([rng.randrange(1 << 16), rng.randrange(1 << p["delay_bits"])]))
            elif r < 0.75:
                f = mark(f, s=1, p=1, path=rng.randrange(16), value=rng.randrange(1 << 16))
        if rng.random() < 0.12:
            frames.append(cnm_frame(**_cnm_fields(rng, p), length=rng.choice([60, 60, 60, 23, 24, 100, 200])))
        frames.append(f)
    return frames


def _cnm_fields(rng, p, edge=None):
    good = rng.random() < 0.7
    pick = rng.randrange(6)
    fields = {
        "to": (p["edge"] if edge is None else edge) if good or pick != 0 else rng.randrange(1 << 16),
        "frm": rng.randrange(p["n_edges"]) if good or pick != 1 else rng.randrange(p["n_edges"], 1 << 16),
        "flow": rng.randrange(1 << 16),
        "cp": rng.randrange(p["n_ports"]) if good or pick != 2 else rng.randrange(p["n_ports"], 256)
        if p["n_ports"] < 256 else 0,
        "n": rng.randrange(16) if good or pick != 3 else rng.randrange(16, 256),
        "cong": rng.randrange(2),
        "version": 1 if good or pick != 4 else rng.choice([0, 2, 255]),
    }
    return fields


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace flb-rx-wire``: the clock stopped at a random tick, then ``n_frames`` frames of
    :func:`frames_for`."""
    rng = random.Random(seed)
    p = dict(_defaults(), **params)
    at = rng.randrange(1 << p["time_bits"])
    return stop_clock(at), frames_for(rng, n_frames, flows_for(rng, p), p, now=at)


def _defaults():
    return dict(n_edges=16, n_paths=8, n_flows=65536, n_ports=8, time_bits=16, delay_bits=16, edge_shift=8, edge=0,
                tick_cycles=64, n_slots=4, q_bits=16, threshold=512, port_shift=0, hop_timeout=4096)


def deq_layout(p):
    """``deq``'s payload, from the datasheet: ``port`` (log2 n_ports), ``amount`` (8)."""
    return data.StructLayout({"port": _bits(p["n_ports"]), "amount": 8})


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed, out_backpressure=None, deq_idle=0.0):
        from cocotbext.axi import AxiStreamBus, AxiStreamSink
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True)
        self.params = dict(_defaults(), **_params())
        bp = (0.3 if stalls else 0.0) if out_backpressure is None else out_backpressure
        self.outs = {name: StreamSink(dut, name, layout, backpressure=bp, rng=random.Random(self.rng.random()))
                     for name, layout in output_layouts(self.params).items()}
        self.cnm_bp = bp
        self.cnm_sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_cnm"), dut.clk, dut.rst)
        self.cnm_sink.log.setLevel("WARNING")
        self.cnm_sink.set_pause_generator(self._cnm_pauses(random.Random(self.rng.random())))
        self.cnm_got = []
        self.deq = StreamSource(dut, "deq", deq_layout(self.params), idle=deq_idle,
                                rng=random.Random(self.rng.random()))
        self.order = []

    def _cnm_pauses(self, rng):
        while True:
            pause = rng.random() < self.cnm_bp
            for _ in range(rng.randint(1, 6)):
                yield pause

    def watch_events(self):
        """Record, clock by clock, which event flb-cnm's input register takes (``e`` an enqueue, ``d`` a dequeue):
        the round robin's order, for the golden model; count the takes that broke the datasheet's rule (both
        waiting, and the same kind as the event taken before) in ``unfair``."""
        self.unfair = 0

        async def watch():
            core = self.dut.block
            while True:
                await RisingEdge(self.dut.clk)
                if not int(self.dut.rst.value) and int(core.e0_valid.value) and int(core.e0_ready.value):
                    kind = "d" if int(core.e0_pick_deq.value) else "e"
                    both = int(core.e0_enq.value) and int(self.dut.deq_valid.value)
                    if both and self.order and self.order[-1] == kind:
                        self.unfair += 1
                    self.order.append(kind)
        cocotb.start_soon(watch())

    async def settle(self):
        """Reset, then flb-owd's sweep (one clock per (edge, 16 path slots)) and flb-prevhop's (one clock per
        entry of a bank), and a margin."""
        await self.reset()
        p = self.params
        await ClockCycles(self.dut.clk, max(16 * p["n_edges"], min(p["n_flows"], 4096)) + 64)

    def clear_outputs(self):
        for sink in self.outs.values():
            sink.items.clear()
        self.cnm_sink.clear()
        self.cnm_got.clear()
        self.order.clear()

    def cnm_frames(self):
        """Every CNM frame ``m_cnm`` has sent so far (bytes, in order)."""
        while not self.cnm_sink.empty():
            self.cnm_got.append(bytes(self.cnm_sink.recv_nowait().tdata))
        return self.cnm_got

    async def counters(self):
        return [await self.axil.read_dword(0x40 + 4 * i) for i in range(N_COUNTERS)]

    async def check_counters(self, model):
        counters = await self.counters()
        want = model.stats()
        return [] if counters == want else [f"counters {counters}, golden model {want}"]

    async def check_outputs(self, want, cycles=200):
        """Every output stream's items as ``want`` (``{name: [dict]}``), after ``cycles`` quiet clocks."""
        await ClockCycles(self.dut.clk, cycles)
        errors = []
        for name, sink in self.outs.items():
            errors += sink.errors
            got = sink.items
            if got != want[name]:
                first = next((k for k, (a, b) in enumerate(zip(got, want[name])) if a != b),
                             min(len(got), len(want[name])))
                errors.append(f"{name}: {len(got)} items, expected {len(want[name])}; first difference at {first}: "
                              f"{got[first:first + 1]} against {want[name][first:first + 1]}")
        if "m_cnm" in want:
            got, exp = self.cnm_frames(), want["m_cnm"]
            if got != exp:
                first = next((k for k, (a, b) in enumerate(zip(got, exp)) if a != b), min(len(got), len(exp)))
                errors.append(f"m_cnm: {len(got)} CNM frames, expected {len(exp)}; first difference at {first}: "
                              f"{[f.hex() for f in got[first:first + 1]]} against "
                              f"{[f.hex() for f in exp[first:first + 1]]}")
        return errors


def _want(model):
    return {"meas": model.meas, "dly": model.dly, "cnm": model.cnm, "m_cnm": model.cnm_frames}


async def _setup(dut, *, stalls, seed, out_backpressure=None):
    tb = TB(dut, stalls=stalls, seed=seed, out_backpressure=out_backpressure)
    p = tb.params
    await tb.settle()
    model = FlbRxWireModel(**p)
    at = tb.rng.randrange(1 << p["time_bits"])
    # K low enough that the traffic crosses it (no dequeues: the estimates only rise), this switch's MAC
    k = tb.rng.randrange(20, 200) % ((1 << p["q_bits"]) - 1) + 1
    mac = 0x02AA00000000 | tb.rng.randrange(1 << 24)
    await tb.program(model, stop_clock(at) + [{"table": THRESHOLD, "index": 0, "data": k},
                                              {"table": MAC, "index": 0, "data": mac}])
    return tb, model, p, flows_for(tb.rng, p), at


async def _run(tb, model, frames):
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected, inputs=frames)
    errors += await tb.check_outputs(_want(model))
    errors += await tb.check_counters(model)
    return errors


def _covered(model):
    s = model.stats()
    return s[0] > 0 and s[3] > 0 and s[5] > 0 and s[8] > 0 and s[13] > 0


@cocotb.test()
async def frames_with_stalls(dut):
    """Mixed traffic (samples, piggybacks, CNM frames good and bad) with idle input, output back-pressure on
    ``m_axis`` and on the three item outputs: every frame, item and counter as the golden model."""
    tb, model, p, flows, at = await _setup(dut, stalls=True, seed=1)
    errors = await _run(tb, model, frames_for(tb.rng, 200, flows, p, now=at))
    assert _covered(model), f"the trace covers too little: counters {model.stats()}"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, no stalls: one beat accepted per clock; every output as the golden
    model."""
    tb, model, p, flows, at = await _setup(dut, stalls=False, seed=2)
    frames = frames_for(tb.rng, 150, flows, p, now=at, sizes=[0, 1, 3, 50, 200, 960, 1400, 4000, 8000])
    accepted = tb.count_accepted(sum((len(f) + BEAT - 1) // BEAT for f in frames))
    errors = await _run(tb, model, frames)
    assert not errors, "\n".join(errors[:10])
    rate = sum(accepted) / len(accepted)
    assert rate == 1.0, f"{rate} beats per clock"


@cocotb.test()
async def outputs_held(dut):
    """``meas``, ``dly`` and ``cnm`` not taken for 2,000 clocks while 120 frames come in: their FIFOs fill and the
    frames stop (nothing dropped); released, every frame, item and counter as the golden model."""
    tb, model, p, flows, at = await _setup(dut, stalls=False, seed=3, out_backpressure=0.0)

    def hold(backpressure):
        return lambda: [setattr(sink, "backpressure", backpressure) for sink in tb.outs.values()]
    frames = frames_for(tb.rng, 120, flows, p, now=at, sizes=[0, 3, 16])
    expected = [model.process(f) for f in frames]
    errors = await tb.stall_then_check(frames, expected, cycles=2000, hold=hold(1.0), release=hold(0.0))
    errors += await tb.check_outputs(_want(model))
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def commands_between_frames(dut):
    """FORGET of a measured (edge, path), FORGET_ALL, a new edge number and a new stopped clock between bursts of
    traffic: every output as the golden model given the same commands."""
    tb, model, p, flows, at = await _setup(dut, stalls=True, seed=4)
    errors = []
    for burst in range(4):
        frames = frames_for(tb.rng, 40, flows, p, now=at)
        errors += await _run(tb, model, frames)
        edge = tb.rng.randrange(p["n_edges"])
        at = tb.rng.randrange(1 << p["time_bits"])
        cmds = [{"table": FORGET, "index": edge << 4 | tb.rng.randrange(p["n_paths"]), "data": 0},
                {"table": EDGE, "index": 0, "data": tb.rng.choice([p["edge"], edge])}] + stop_clock(at)
        if burst == 2:
            cmds.append({"table": FORGET_ALL, "index": 0, "data": 0})
        cmds.append({"table": 77, "index": 3, "data": 5})                 # another table: ignored
        await tb.program(model, cmds)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight, then the stopped clock again: every frame, item and counter after it as the
    golden model (reset sweeps flb-owd's bases, empties the FIFOs, restores the edge number)."""
    tb, model, p, flows, at = await _setup(dut, stalls=False, seed=5)
    await tb.program(model, [{"table": EDGE, "index": 0, "data": (p["edge"] + 1) % (1 << 16)}])
    await tb.reset_in_flight(frames_for(tb.rng, 30, flows, p, now=at), 30 + tb.rng.randrange(80))
    await ClockCycles(dut.clk, max(16 * p["n_edges"], min(p["n_flows"], 4096)) + 64)
    model.reset()
    tb.clear_outputs()
    await tb.program(model, stop_clock(at))
    errors = await _run(tb, model, frames_for(tb.rng, 60, flows, p, now=at))
    await ClockCycles(dut.clk, 50)
    if not tb.sink.empty():
        errors.append("frames left over after the reset")
    assert model.stats()[1] > 0, "no base set after the reset: the sweep is not checked"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def long_stall(dut):
    """``m_axis`` held for 3,000 clocks while 200 short frames come in, then released: the stall fills the beat
    FIFO and reaches ``s_axis``; afterwards every output as the golden model."""
    tb, model, p, flows, at = await _setup(dut, stalls=False, seed=6)
    frames = frames_for(tb.rng, 200, flows, p, now=at, sizes=[0, 3, 16, 40])
    expected = [model.process(f) for f in frames]
    errors = await tb.stall_then_check(frames, expected)
    errors += await tb.check_outputs(_want(model))
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def by_hand(dut):
    """The hand-worked scenarios of ``tb/flb/rx_frames.py`` whose parameters are this build's, each from reset: its
    commands and frames in order (the clock stopped, set before each frame to its ``now``); frames, items and
    counters as worked by hand (no golden model)."""
    tb = TB(dut, stalls=True, seed=7)
    p = tb.params
    errors, ran = [], 0
    for sc in hand_scenarios():
        if dict(_defaults(), **sc.params) != p:
            continue
        ran += 1
        await tb.settle()
        tb.clear_outputs()
        k = 0
        for step in clocked_steps(sc):
            if step[0] == "ctl":
                await tb.control(step[1])
                await ClockCycles(dut.clk, 8)
                continue
            _, frame, want = step
            tb.send(frame)
            got = bytes((await tb.recv(f"scenario {sc.name} frame {k}")).tdata)
            if got != want:
                errors.append(f"scenario {sc.name} frame {k}: {got.hex()} by hand {want.hex()}")
            k += 1
        errors += [f"scenario {sc.name}: {e}" for e in await tb.check_outputs(
            {"meas": sc.meas, "dly": sc.dly, "cnm": sc.cnm}, cycles=50)]
        counters = (await tb.counters())[:len(sc.stats)]
        if counters != sc.stats:
            errors.append(f"scenario {sc.name}: counters {counters}, by hand {sc.stats}")
    assert ran, f"no hand-worked scenario for {p}"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def clock_running(dut):
    """The clock running (one tick every 4 clocks): three samples of one (edge, path) carrying the same stamp, the
    second entering 400 clocks after the first, the third right behind the second: the first sets the base (delay
    0), the second measures 100 ticks (99 to 101: the prescaler's phase), the third no less than the second."""
    tb = TB(dut, stalls=False, seed=8)
    p = tb.params
    await tb.settle()
    await tb.program(None, [{"table": CLOCK, "index": 0, "data": 1000}, {"table": CLOCK, "index": 1, "data": 4}])
    src = f"10.0.{1 % p['n_edges']}.5" if p["edge_shift"] == 8 else "10.0.0.5"
    sample = mark(sized_data(100, src, "10.0.0.9", 0x1230, 0x42, 1), s=1, value=990)
    first = FirstBeats(dut)
    tb.send(sample)
    await ClockCycles(dut.clk, 400)
    tb.send(sample)
    tb.send(sample)
    for k in range(3):
        await tb.recv(f"sample {k}")
    await ClockCycles(dut.clk, 20)
    delays = [item["delay"] for item in tb.outs["meas"].items]
    assert len(first.ins) == 3 and first.ins[1] - first.ins[0] == 400, f"first beats in at {first.ins}"
    assert len(delays) == 3, f"{len(delays)} measurements"
    assert delays[0] == 0, f"the first sample sets the base: delay {delays[0]}"
    assert 99 <= delays[1] <= 101, f"delays {delays}: 400 clocks at 4 per tick are 100 ticks"
    assert delays[1] <= delays[2] <= delays[1] + 1, f"delays {delays}"


async def _drain_deq(tb, limit=100_000):
    for _ in range(limit):
        if tb.deq.idle_now():
            return
        await RisingEdge(tb.dut.clk)
    raise AssertionError("deq never drained")


def _deqs(rng, p, frames):
    """Dequeue reports for ``frames``: for most RoCEv2 frames one of its egress port (the datasheet's rule, on the
    test side's classifier) and its beats, a few larger ones (the estimate clamped at 0), a few forged ports where
    ``n_ports`` leaves the field room; shuffled in runs."""
    n, room = p["n_ports"], 1 << _bits(p["n_ports"])
    out = []
    for f in frames:
        c = classify(f)
        if c["kind"] == PacketKind.OTHER.value or rng.random() < 0.1:
            continue
        port = (c["dst_ip"] >> p["port_shift"]) % room if n > 1 else 0
        out.append((port, (len(f) + BEAT - 1) // BEAT))
        if rng.random() < 0.04:
            out.append((rng.randrange(n), rng.randrange(256)))
        if n < room and rng.random() < 0.04:
            out.append((rng.randrange(n, room), rng.randrange(256)))
    for k in range(0, len(out) - 8, 8):
        run = out[k:k + 8]
        rng.shuffle(run)
        out[k:k + 8] = run
    return out


@cocotb.test()
async def congestion_with_dequeues(dut):
    """Frames and the switch's dequeue reports together (``deq`` idle 0.3 of the clocks; some amounts large
    enough to clamp the estimate at 0), K low, every output back-pressured: the order the wire took enqueues and
    dequeues in is recorded, and the golden model run in that order gives every CNM frame (congestion, release,
    refresh) and every counter; every frame out as the golden model."""
    tb, model, p, flows, at = await _setup(dut, stalls=True, seed=9)
    tb.deq.idle = 0.3
    tb.watch_events()
    frames = frames_for(tb.rng, 300, flows, p, now=at)
    deqs = _deqs(tb.rng, p, frames)
    expected = [f for f in map(copy.deepcopy(model).process, frames)]
    for f in frames:
        tb.send(f)
    await ClockCycles(dut.clk, 600)          # the estimates rise first, then the dequeues race the frames
    for port, amount in deqs:
        tb.deq.send({"port": port, "amount": amount})
    errors = await tb.check_frames(expected, inputs=frames)
    await _drain_deq(tb)
    await ClockCycles(dut.clk, 100)
    order = "".join(tb.order)
    assert order.count("e") == sum(map(model.enqueues, frames)) and order.count("d") == len(deqs), \
        f"events taken: {order.count('e')} enqueues, {order.count('d')} dequeues"
    model.run(frames, deqs, order)
    errors += await tb.check_outputs(_want(model))
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])
    s = model.stats()
    assert s[8] and s[9] and s[11] and s[13] and "ed" in order and "de" in order, f"too little covered: {s}"
    assert not tb.unfair, f"{tb.unfair} events taken out of turn while an enqueue and a dequeue both waited"


@cocotb.test()
async def reset_forgets_notify(dut):
    """A port pushed to one cell below K and its flow's previous hop recorded; reset; then the same flow's frames
    with a group-bit source address (not recorded) push the port past K: the congestion CNM comes only at the K-th
    cell since the reset and finds no previous hop (no frame, counted), as the golden model reset at the same
    point (a stale estimate notifies early, a stale previous hop sends a frame)."""
    tb, model, p, flows, at = await _setup(dut, stalls=False, seed=10)
    src, dst, sport, dqpn = flows[0]
    k = 12
    await tb.program(model, [{"table": THRESHOLD, "index": 0, "data": k}])
    one = sized_data(60, src, dst, sport, dqpn, 1)              # one cell
    errors = await _run(tb, model, [one] * (k - 1))
    assert model.stats()[8] == 0, "K crossed before the reset"
    await tb.reset()
    await ClockCycles(dut.clk, max(16 * p["n_edges"], min(p["n_flows"], 4096)) + 64)
    model.reset()
    tb.clear_outputs()
    await tb.program(model, stop_clock(at) + [{"table": THRESHOLD, "index": 0, "data": k}])
    group = one[:6] + b"\x03" + one[7:]                           # source MAC with the group bit
    # K - 1 cells first: no CNM yet (a stale estimate would have crossed K on the first, counted by STATUS_8)
    errors += await _run(tb, model, [group] * (k - 1))
    assert model.stats()[8] == 0, f"model: {model.stats()}"
    errors += await _run(tb, model, [group])
    s = model.stats()
    assert s[8] == 1 and s[14] == 1 and s[16] == k and not model.cnm_frames, f"model: {s}"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def notify_by_hand(dut):
    """The hand-worked scenarios of ``tb/flb/rx_notify.py`` whose parameters are this build's, each from reset:
    commands, frames and dequeues one at a time, the wire drained between them (so the order is the
    scenario's); every frame out, every CNM frame on ``m_cnm`` and the scenario's counters as worked by hand."""
    from lbpipe.tb.flb.rx_notify import notify_scenarios
    tb = TB(dut, stalls=True, seed=11)
    p = tb.params
    errors, ran = [], 0
    for sc in notify_scenarios():
        if dict(_defaults(), **sc.params) != p:
            continue
        ran += 1
        await tb.settle()
        # this switch's MAC is kept across reset: 0 as at power-on, which the scenarios start from
        await tb.control({"table": MAC, "index": 0, "data": 0})
        await ClockCycles(dut.clk, 8)
        tb.clear_outputs()
        for k, step in enumerate(sc.steps):
            where = f"scenario {sc.name} step {k} ({step.get('note', '')})"
            seen = len(tb.cnm_frames())
            if step["op"] == "ctl":
                await tb.control(step["cmd"])
                await ClockCycles(dut.clk, 8)
                continue
            if step["op"] == "frame":
                tb.send(step["frame"])
                got = bytes((await tb.recv(where)).tdata)
                if got != step["out"]:
                    errors.append(f"{where}: {got.hex()} by hand {step['out'].hex()}")
            else:
                tb.deq.send({"port": step["port"], "amount": step["amount"]})
            await ClockCycles(dut.clk, 60)
            sent = tb.cnm_frames()[seen:]
            if sent != list(step["cnm"]):
                errors.append(f"{where}: CNM frames {[f.hex() for f in sent]} by hand "
                              f"{[bytes(f).hex() for f in step['cnm']]}")
        counters = await tb.counters()
        for index, value in sc.totals.items():
            if counters[index] != value:
                errors.append(f"scenario {sc.name}: counter {index} {counters[index]}, by hand {value}")
    assert ran, f"no hand-worked notification scenario for {p}"
    assert not errors, "\n".join(errors[:10])


#: docs/flb_rx_wire.md, "Performance": first beat in to the CNM frame's beat out, a frame of two beats or more
#: that crosses K alone on the idle wire (one beat: a cycle less).
NOTIFY_LATENCY = 29


@cocotb.test()
async def notify_latency(dut):
    """Frames of 64, 128 and 1,024 bytes, each of a new flow, alone on the idle wire with K at 1 cell (each joins
    its port's set): cycles from the edge that takes a frame's first beat on ``s_axis`` to the one that hands its
    CNM frame on at ``m_cnm``, as the datasheet states."""
    tb = TB(dut, stalls=False, seed=12, out_backpressure=0.0)
    await tb.settle()
    await tb.program(None, stop_clock(0) + [{"table": THRESHOLD, "index": 0, "data": 1}])
    cycle, ins, outs = 0, [], []

    async def watch():
        nonlocal cycle
        first = True
        while True:
            await RisingEdge(dut.clk)
            cycle += 1
            if int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                if first:
                    ins.append(cycle)
                first = bool(int(dut.s_axis_tlast.value))
            if int(dut.m_cnm_tvalid.value) and int(dut.m_cnm_tready.value):
                outs.append(cycle)
    cocotb.start_soon(watch())
    took = {}
    for k, size in enumerate((64, 128, 1024)):
        tb.send(sized_data(size, "10.0.0.1", f"10.0.0.{2 + k}", 0xC000, 0x100 + k, 1))
        await tb.recv(f"frame of {size} bytes")
        await ClockCycles(dut.clk, 80)
        assert len(outs) == k + 1, f"{len(outs)} CNM frames after {k + 1} frames"
        took[size] = outs[k] - ins[k]
    dut._log.warning(f"CNM frame latency (first beat in to CNM beat out): {took}")
    if NOTIFY_LATENCY is not None:
        assert took == {64: NOTIFY_LATENCY - 1, 128: NOTIFY_LATENCY, 1024: NOTIFY_LATENCY}, took


@cocotb.test()
async def replay(dut):
    """``lbpipe replay flb-rx-wire IN.pcap --engine rtl`` (the item outputs always taken): the frames on ``m_axis``
    and the CNM frames on ``m_cnm``, merged in the golden model's order (each frame, then the CNM frames its
    enqueue made)."""
    from lbpipe.fast import merge_streams
    from lbpipe.trace import read_events, read_pcap, write_pcap
    tb = TB(dut, stalls=False, seed=1, out_backpressure=0.0)
    await tb.settle()
    await tb.replay()
    host = read_pcap(os.environ["LBPIPE_PCAP_OUT"])
    await ClockCycles(dut.clk, 100)
    model = FlbRxWireModel(**tb.params)
    for event in read_events(os.environ["LBPIPE_CTL"], allow_empty=True):
        model.control(dict({"index": 0, "data": 0}, **event["ctl"]))
    plan = [port for frame in read_pcap(os.environ["LBPIPE_PCAP_IN"]) for port, _ in model.process_ports(frame)]
    write_pcap(os.environ["LBPIPE_PCAP_OUT"], merge_streams({"m_axis": host, "m_cnm": tb.cnm_frames()}, plan))


@cocotb.test()
async def bench(dut):
    """``lbpipe bench flb-rx-wire``: per size of ``LBPIPE_BENCH_SIZES``, one frame alone then 48 back to back, every
    frame marked (samples and piggybacks in turn), every output checked against the golden model; beats accepted
    per clock and first-beat latency to ``LBPIPE_BENCH_OUT``."""
    tb = TB(dut, stalls=False, seed=1, out_backpressure=0.0)
    p = tb.params
    await tb.settle()
    model = FlbRxWireModel(**p)
    await tb.program(model, stop_clock(500))
    seq = 0

    def make_frame(size, k):
        nonlocal seq
        seq += 1
        frame = sized_data(size, "10.0.0.1", "10.0.0.2", 0xC000 + seq % p["n_paths"], 0x123, seq)
        return mark(frame, s=1, value=480 - seq % 7) if seq % 2 else mark(frame, p=1, path=seq % p["n_paths"],
                                                                           value=seq)
    results = await tb.size_bench(model, make_frame, latency=True)
    assert results and model.stats()[0] > 0 and model.stats()[3] > 0
