"""cocotb tests of :class:`lbpipe.hdl.packet.laps_editor.LapsEditor` against its golden model
(:class:`lbpipe.sim.packet.laps_editor.LapsEditor`).

The DUT is :class:`lbpipe.boards.top.FlatTop` around the editor: ``s_axis_*``/``m_axis_*`` for cocotbext-axi,
``act_*`` in ``LapsEdit`` packing, the seven counters on ``stats``. ``depth`` comes from ``LAPS_DEPTH``. Frames are
UDP frames (INSERT) and LAPS frames (UPDATE, REMOVE) over IPv4 (with options) and IPv6 with 0 to 2 VLAN tags,
random bytes (refused edits), and frames longer than the beat FIFO (dropped). Each frame is sent with one random
``tuser`` on all its beats; every ``m_axis`` frame must equal the golden model's byte for byte (the kept lanes),
carry that ``tuser`` on every beat, and come in order; ``stats`` must equal the golden model's counters. Actions
are offered as soon as the previous one was taken.
"""

import os
import random
from collections import deque

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.hdl.packet.laps_editor import N_COUNTERS, LapsEdit
from lbpipe.sim.packet.laps_editor import LapsEditor as Golden
from lbpipe.trace import pack
from lbpipe.tb.lib.harness import AxisBench

__all__ = ["random_items", "pcap_trace"]

BEAT = 64
COUNTER_NAMES = ("passed", "updated", "inserted", "removed", "dropped", "refused", "too_long")


def _frame(rng, size_range, *, laps, port):
    """A frame and its offsets: a LAPS frame (``laps``) or a plain UDP one, random family, tags and options."""
    from lbpipe.tb.lib.packets import laps_frame
    from scapy.layers.inet import UDP
    v6 = rng.random() < 0.5
    tags = rng.choice(((), (0x8100,), (0x88A8, 0x8100)))
    opts = 0 if v6 else rng.choice((0, 0, 4, 40))
    l3 = 14 + 4 * len(tags)
    l4 = l3 + (40 if v6 else 20 + opts)
    count = rng.randint(0, 4)
    src, dst = ("2001:db8::1", "2001:db8::2") if v6 else ("10.0.0.1", "10.0.0.2")
    base = l4 + 8 + 12 + 4 * count      # a plain UDP frame carries the same bytes as payload
    size = max(base, rng.randint(*size_range))
    pkt = laps_frame(src, dst, anchors=[rng.getrandbits(32) for _ in range(count)], pid=rng.getrandbits(16),
                     time=rng.getrandbits(48), sr_idx=rng.getrandbits(8), probe=rng.getrandbits(1),
                     ack=rng.getrandbits(1), reserved=rng.getrandbits(2), dport=port, tags=tags, ip_options=opts,
                     payload=rng.randbytes(size - base))
    if rng.random() < 0.5:
        pkt[UDP].chksum = None          # scapy fills in a valid checksum (IPv4 INSERT then zeroes it)
    frame = bytes(pkt)
    if not laps:
        # A plain UDP frame: the same bytes with the LAPS header's place taken by payload, any destination port.
        frame = bytearray(frame)
        frame[l4 + 2:l4 + 4] = rng.randrange(1, 65536).to_bytes(2, "big")
        frame = bytes(frame)
    return frame, dict(ipv6=int(v6), l3_off=l3, l4_off=l4, count=count)


def random_items(rng, n, *, port, size_range=(60, 2000), p_drop=0.1, ops=(0, 1, 2, 3)):
    """``n`` random ``(frame, action)`` pairs: each op on frames it applies to, some refused ones (random bytes or
    a bad offset), drops."""
    items = []
    for _ in range(n):
        op = rng.choice(ops)
        r = rng.random()
        if r < 0.08:
            frame, fields = rng.randbytes(rng.randint(*size_range)), dict(l3_off=14, l4_off=34, count=1)
        else:
            frame, fields = _frame(rng, size_range, laps=op in (1, 3), port=port)
            if r < 0.12:
                fields["l4_off"] += 1
        action = {"tag": rng.getrandbits(16), "op": op, "drop": int(rng.random() < p_drop), **fields,
                  "probe": rng.getrandbits(1), "ack": rng.getrandbits(1), "sr_idx": rng.getrandbits(8),
                  "pid": rng.getrandbits(16), "time": rng.getrandbits(48), "anchors": rng.getrandbits(128)}
        if op == 2:
            action["count"] = rng.randint(0, 4)
        items.append((frame, action))
    return items


def pcap_trace(seed, n_frames, *, depth, user_width, laps_port, cut_through=False):
    """``lbpipe trace laps-editor``: ``n_frames`` of :func:`random_items` that fit the buffer, ``(frames, actions)``
    (the same in both modes: such frames are edited alike)."""
    rng = random.Random(seed)
    items = random_items(rng, n_frames, port=laps_port, size_range=(60, min(2000, depth * BEAT)))
    return [f for f, _ in items], [a for _, a in items]


def sized_item(rng, size, op, *, port):
    """A frame of exactly ``size`` bytes (IPv4, no tags) with an action ``op`` that applies."""
    from lbpipe.tb.lib.packets import laps_frame
    count = rng.randint(0, 4)
    laps = op in (1, 3)
    base = 42 + (12 + 4 * count if laps else 0)
    frame = bytes(laps_frame("10.0.0.1", "10.0.0.2", anchors=list(range(count)), dport=port,
                             payload=rng.randbytes(max(0, size - base))))
    if not laps:
        frame = frame[:42] + rng.randbytes(size - 42)
    return frame, {"tag": 1, "op": op, "ipv6": 0, "l3_off": 14, "l4_off": 34, "count": count, "pid": 7,
                   "time": 9, "anchors": rng.getrandbits(128)}


class TB(AxisBench):
    """Clock, reset, source and sink, an action driver, the golden model and the scoreboard."""

    def __init__(self, dut, *, pauses=None, seed=1, depth=None, port=None, cut_through=None):
        super().__init__(dut, seed=seed, pauses=pauses, quiet=True)
        self.depth = depth or int(os.environ.get("LAPS_DEPTH", "64"))
        self.port = port or int(os.environ.get("LAPS_PORT", str(0xC1A5)))
        self.cut_through = bool(int(os.environ.get("LAPS_CT", "0"))) if cut_through is None else cut_through
        self.user_width = len(dut.s_axis_tuser)
        self.layout = LapsEdit()
        self.model = Golden(depth=self.depth, user_width=self.user_width, laps_port=self.port,
                            cut_through=self.cut_through)
        self.pending = deque()      # actions for frames sent without one (``lbpipe bench``)
        self.actions = deque()
        self.expected = deque()
        self.taken = 0
        self.queued = 0
        self.in_beats = []
        self.out_beats = []
        self.cycle = 0
        self.errors = []
        dut.act_valid.value = 0
        dut.act_payload.value = 0
        cocotb.start_soon(self._drive())

    async def _drive(self):
        dut = self.dut
        offered = False
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if int(dut.rst.value):
                offered = False
                self.actions.clear()
                self.taken = self.queued = 0
                dut.act_valid.value = 0
                continue
            if int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                self.in_beats.append(self.cycle)
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
                self.out_beats.append((self.cycle, int(dut.m_axis_tlast.value)))
            if offered and str(dut.act_ready.value) == "1":
                self.taken += 1
                offered = False
            if not offered and self.actions:
                dut.act_payload.value = pack(self.layout, self.actions.popleft())
                offered = True
            dut.act_valid.value = int(offered)

    def send(self, frame, action=None):
        from cocotbext.axi import AxiStreamFrame
        action = self.pending.popleft() if action is None else action
        user = self.rng.getrandbits(self.user_width)
        self.actions.append(dict(action))
        self.queued += 1
        beats = -(-len(frame) // BEAT)
        self.source.send_nowait(AxiStreamFrame(frame, tuser=[user] * (beats * BEAT)))
        for out in self.model.process(frame, action):
            self.expected.append((f"frame {self.queued - 1} ({len(frame)} bytes, op {action.get('op', 0)}, "
                                  f"drop {action.get('drop', 0)})", out, user))

    def read_stats(self):
        word = int(self.dut.stats.value)
        return [(word >> (32 * i)) & 0xFFFFFFFF for i in range(N_COUNTERS)]

    async def check(self, *, idle_limit=20_000):
        errors = []
        idle = 0
        n = 0
        while self.expected:
            if self.sink.empty():
                idle += 1
                if idle > idle_limit:
                    errors.append(f"{len(self.expected)} expected frames never came out; next: "
                                  f"{self.expected[0][0]}")
                    self.expected.clear()
                    break
                await RisingEdge(self.dut.clk)
                continue
            idle = 0
            got = self.sink.recv_nowait(compact=True)
            what, want, user = self.expected.popleft()
            data, users = bytes(got.tdata), set(got.tuser if isinstance(got.tuser, list) else [got.tuser])
            if data != want:
                diff = [i for i, (p, q) in enumerate(zip(data, want)) if p != q][:8]
                errors.append(f"output {n}, {what}: {len(data)} bytes for {len(want)}, bytes {diff} differ")
            elif users != {user}:
                errors.append(f"output {n}, {what}: tuser {users}, expected {user}")
            n += 1
        # The action FIFO takes actions well ahead of their frames, and a frame that leaves nothing (dropped, too
        # long) is counted only once its first beat is through: wait for the source to finish too.
        for _ in range(20_000):
            if self.taken == self.queued and self.source.idle():
                break
            await RisingEdge(self.dut.clk)
        await ClockCycles(self.dut.clk, 30)
        extra = 0
        while not self.sink.empty():
            self.sink.recv_nowait()
            extra += 1
        if extra:
            errors.append(f"{extra} unexpected frames on m_axis")
        stats, want = self.read_stats(), self.model.stats()
        if stats != want:
            errors.append(f"stats {dict(zip(COUNTER_NAMES, stats))}; golden {dict(zip(COUNTER_NAMES, want))}")
        return errors


def _fail_on(errors):
    assert not errors, f"{len(errors)} errors:\n" + "\n".join(errors[:20])


async def _random_run(dut, *, pauses, seed):
    tb = TB(dut, pauses=pauses, seed=seed)
    await tb.reset()
    rng = random.Random(int(os.environ.get("LAPS_SEED", seed)))
    # Up to the beat FIFO: with a small depth some INSERTs would make frames too long and are refused.
    size_max = min(2000, tb.depth * BEAT)
    items = random_items(rng, int(os.environ.get("LAPS_FRAMES", "150")), port=tb.port, size_range=(60, size_max))
    # Growth across a beat boundary and shrinking by a beat, for every op.
    for size in (60, 64, 100, 116, 128, 140, 180, 192, 200):
        for op in (1, 2, 3):
            items.append(sized_item(rng, size, op, port=tb.port))
    # Always some refused edits (a bad IP offset, an odd UDP offset) and drops.
    for op in (1, 2, 3):
        items.append((rng.randbytes(rng.randint(60, 300)), {"op": op, "l3_off": 16, "l4_off": 36}))
        items.append((rng.randbytes(rng.randint(60, 300)), {"op": op, "l3_off": 14, "l4_off": 35}))
        items.append((rng.randbytes(rng.randint(60, 300)), {"op": op, "drop": 1}))
    # And frames longer than the beat FIFO, dropped whatever their action.
    for op in (0, 1, 2, 3):
        items.append(sized_item(rng, tb.depth * BEAT + rng.choice((1, 63, BEAT, 300)), op, port=tb.port))
    rng.shuffle(items)
    for frame, action in items:
        tb.send(frame, action)
    errors = await tb.check()
    dut._log.info("counters %s", dict(zip(COUNTER_NAMES, tb.read_stats())))
    # Cut-through never counts a frame too long (there is no buffer to overflow).
    errors += [f"the run never counted {name}" for name, c in zip(COUNTER_NAMES, tb.model.stats())
               if not c and not (tb.cut_through and name == "too_long")]
    _fail_on(errors)


@cocotb.test()
async def random_traffic(dut):
    """Random frames and ops, no pauses: every output frame and the counters as golden."""
    await _random_run(dut, pauses=None, seed=1)


@cocotb.test()
async def random_traffic_pauses(dut):
    """As random_traffic, with idle cycles on s_axis and back-pressure on m_axis."""
    await _random_run(dut, pauses=(0.3, 0.4), seed=2)


@cocotb.test()
async def line_rate(dut):
    """Frames queued (the sink held until the beat FIFO is full, then always ready): PASS and UPDATE leave at one
    beat per clock and s_axis takes one beat per clock from then on; INSERT: the cycles from the first output beat
    to the last equal the beats sent (the beat a frame grows by costs one cycle, while the input waits); REMOVE: the
    same plus at most one idle output cycle per frame that shrinks by a beat (the output FIFO hides some)."""
    tb = TB(dut, seed=3)
    await tb.reset()
    rng = random.Random(13)
    errors = []
    sizes = (60, 64, 65, 100, 128, 129, 200, 300, 500)
    for label, ops in (("pass/update", (0, 1)), ("insert", (2,)), ("remove", (3,))):
        first_out = len(tb.out_beats)
        items = [sized_item(rng, s, rng.choice(ops), port=tb.port) for s in sizes for _ in range(5)]
        rng.shuffle(items)
        tb.sink.pause = True
        for frame, action in items:
            tb.send(frame, action)
        for _ in range(2000):
            await RisingEdge(dut.clk)
            if not int(dut.s_axis_tready.value):
                break
        first_in = len(tb.in_beats)
        tb.sink.pause = False
        errors += await tb.check()
        # Input beats accepted once the sink runs, until the source has sent everything.
        ins = tb.in_beats[first_in:]
        outs = [c for c, _ in tb.out_beats[first_out:]]
        span_out = outs[-1] - outs[0] + 1
        in_rate = len(ins) / (ins[-1] - ins[0] + 1)
        shrinks = 0
        if label == "remove":
            # The last frame's idle cycle comes after the last beat, outside the span.
            shrinks = sum(1 for f, a in items[:-1]
                          if -(-(len(f) - 12 - 4 * a["count"]) // BEAT) < -(-len(f) // BEAT))
        dut._log.info("%s: %d beats out in %d cycles (%d frames shrink); input %.4f beats per clock over %d beats",
                      label, len(outs), span_out, shrinks, in_rate, len(ins))
        # REMOVE's idle cycles are at most one per frame that shrinks: the output FIFO hides those it can.
        if not len(outs) <= span_out <= len(outs) + shrinks or (not shrinks and span_out != len(outs)):
            errors.append(f"{label}: {len(outs)} beats out in {span_out} cycles, expected {len(outs)} "
                          f"to {len(outs) + shrinks}")
        if label == "pass/update" and in_rate != 1.0:
            errors.append(f"{label}: {in_rate:.4f} beats accepted per clock")
        if len(ins) < 20:
            errors.append(f"{label}: only {len(ins)} beats in after the FIFO filled")
    _fail_on(errors)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames and actions in flight, pauses on both sides: outputs before the reset are a prefix of the
    golden ones, none come after it until new traffic, which then matches a golden model whose counters were
    reset."""
    tb = TB(dut, pauses=(0.2, 0.3), seed=6)
    await tb.reset()
    rng = random.Random(16)
    for frame, action in random_items(rng, 60, port=tb.port, size_range=(60, 600)):
        tb.send(frame, action)
    before_expected = list(tb.expected)
    await ClockCycles(dut.clk, 200)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    tb.source.clear()
    before = []
    while not tb.sink.empty():
        before.append(bytes(tb.sink.recv_nowait(compact=True).tdata))
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    errors = []
    for k, got in enumerate(before):
        if got != before_expected[k][1]:
            errors.append(f"before the reset: output {k} differs from golden")
    if not 0 < len(before) < len(before_expected):
        errors.append(f"{len(before)} of {len(before_expected)} frames out before the reset: not mid-traffic")
    tb.expected.clear()
    if tb.read_stats() != [0] * N_COUNTERS:
        errors.append(f"stats {tb.read_stats()} after reset")
    await ClockCycles(dut.clk, 40)
    if not tb.sink.empty():
        errors.append("m_axis frames after the reset")
    tb.model.reset()
    for frame, action in random_items(rng, 60, port=tb.port, size_range=(60, 600)):
        tb.send(frame, action)
    errors += await tb.check()
    _fail_on(errors)


@cocotb.test()
async def long_frames(dut):
    """Frames longer than ``depth`` beats (one byte, one beat and three buffers too many), with every op and with
    drop, between frames that must come out (exactly ``depth`` beats among them, one with an INSERT refused because
    its result would be too long): the long ones are dropped and counted in ``too_long`` (counter 6) and in no other
    counter, the others are as golden. A time limit makes an editor that deadlocks on them fail rather than hang."""
    from cocotb.triggers import SimTimeoutError, with_timeout
    from lbpipe.tb.lib.harness import CLOCK_NS
    tb = TB(dut, pauses=(0.2, 0.2), seed=7)
    await tb.reset()
    rng = random.Random(27)
    size = tb.depth * BEAT
    plan = [(size, 0, 0), (size + 1, 0, 0), (100, 2, 0), (size + BEAT, 1, 0), (size, 2, 0), (3 * size + 7, 2, 0),
            (64, 3, 0), (size + 1, 3, 0), (size, 1, 0), (size + 1, 2, 1), (200, 1, 0), (size + BEAT, 2, 0),
            (size, 3, 0), (size, 1, 1), (2 * size, 0, 1), (130, 0, 0), (size + 1, 1, 0)]
    for n, op, drop in plan:
        frame, action = sized_item(rng, n, op, port=tb.port)
        action["drop"] = drop
        tb.send(frame, action)
    beats = sum(-(-n // BEAT) for n, _, _ in plan)
    try:
        errors = await with_timeout(tb.check(), (4 * beats + 3000) * CLOCK_NS, "ns")
    except SimTimeoutError:
        last_in = tb.in_beats[-1] if tb.in_beats else 0
        _fail_on([f"timed out: {len(tb.in_beats)} of {beats} beats taken, the last at cycle {last_in} of "
                  f"{tb.cycle}; s_axis_tready {dut.s_axis_tready.value}; {len(tb.out_beats)} beats out; "
                  f"{tb.taken} of {tb.queued} actions taken"])
    stats = tb.read_stats()
    # By hand, from the plan: 8 frames over the buffer (the two with drop among them: they count there, not as
    # dropped); passed: the PASS frames of depth beats and of 130 bytes; updated: depth beats and 200 bytes;
    # inserted: 100 bytes; removed: 64 and depth beats; dropped: the UPDATE of depth beats with drop; refused: the
    # INSERT of depth beats (its result would be too long).
    want = [2, 2, 1, 2, 1, 1, 8]
    if stats != want:
        errors.append(f"stats {dict(zip(COUNTER_NAMES, stats))}; by hand {dict(zip(COUNTER_NAMES, want))}")
    _fail_on(errors)


#: Cycles from the edge that takes a frame's last beat on ``s_axis`` to the edge that takes its first beat on
#: ``m_axis`` (the sink always ready, the editor empty), as docs/packet_io.md states it: the beat FIFO (its write
#: and registered read, 3) and the eleven stages of the editor's latency (pairing, pre-shift, E1, E2, E2b, E2c,
#: E3, E4, the merge, the output stage writing the output FIFO, the output FIFO's register).
LAST_IN_TO_FIRST_OUT = 14


async def _latency_over_sizes(dut, tb, rng, sizes, fits, *, since_first, want, what):
    """Each frame alone, every op at every size in ``sizes`` (those ``fits`` accepts): the cycles from its first
    (``since_first``) or last beat in to its first beat out must all be ``want``, and the frames as golden."""
    errors, seen = [], {}
    for size in sizes:
        for op in (0, 1, 2, 3):
            frame, action = sized_item(rng, size, op, port=tb.port)
            if not fits(size, op, action):
                continue
            first_in, first_out = len(tb.in_beats), len(tb.out_beats)
            tb.send(frame, action)
            errors += await tb.check()
            ins, outs = tb.in_beats[first_in:], tb.out_beats[first_out:]
            if not ins or not outs:
                errors.append(f"{size} bytes, op {op}: {len(ins)} beats in, {len(outs)} out")
                continue
            seen[(size, op)] = outs[0][0] - (ins[0] if since_first else ins[-1])
    bad = {k: v for k, v in seen.items() if v != want}
    dut._log.info("%s: %s", what, sorted(set(seen.values())))
    if bad:
        errors.append(f"latency not {want} for (size, op): {bad}")
    _fail_on(errors)


@cocotb.test()
async def first_beat_latency(dut):
    """Each frame alone (the editor empty, ``m_axis`` always ready), every op, sizes from 60 bytes to the beat
    FIFO's size: the cycles from its last beat in to its first beat out are ``LAST_IN_TO_FIRST_OUT`` for all
    (store-and-forward: the frame waits for its last beat, then a constant pipeline)."""
    tb = TB(dut, seed=9)
    await tb.reset()
    sizes = (60, 64, 65, 128, 200, 1500, tb.depth * BEAT - 64, tb.depth * BEAT)
    # an INSERT that would not fit the beat FIFO is refused: not a latency case
    fits = lambda size, op, action: not (op == 2 and size + 12 + 4 * action["count"] > tb.depth * BEAT)
    await _latency_over_sizes(dut, tb, random.Random(19), sizes, fits, since_first=False,
                              want=LAST_IN_TO_FIRST_OUT, what="last beat in to first beat out")


#: Cut-through (docs/packet_io.md, "Latency"): cycles from the edge that takes a frame's first beat on ``s_axis`` to
#: the edge that takes its first beat on ``m_axis``, the frame sent back to back, its action already offered, the
#: editor empty and the sink always ready. By the datasheet's count: the beat FIFO (its write and registered read,
#: 2; no length FIFO to wait for, unlike store-and-forward's 3), then the eleven stages of ``latency``. The pairing
#: register waits for the second beat, which reaches the FIFO's head the edge the first one is taken: no cycle.
FIRST_IN_TO_FIRST_OUT_CT = 13
#: The sizes the constant is checked at: the minimum, around one and two beats, 1,500, and 9,216 (jumbo).
CT_SIZES = (60, 64, 65, 100, 127, 128, 129, 200, 1500, 4096, 9216)


@cocotb.test()
async def ct_latency_constant(dut):
    """Cut-through: each frame alone, every op, sizes from 60 to 9,216 bytes (longer than the beat FIFO): the
    cycles from its first beat in to its first beat out are ``FIRST_IN_TO_FIRST_OUT_CT`` for every one of them,
    and the frames are as golden."""
    tb = TB(dut, seed=10)
    assert tb.cut_through, "run with LAPS_CT=1"
    await tb.reset()
    await _latency_over_sizes(dut, tb, random.Random(20), CT_SIZES, lambda size, op, action: True,
                              since_first=True, want=FIRST_IN_TO_FIRST_OUT_CT, what="first beat in to first beat out")


@cocotb.test()
async def ct_growth_pauses(dut):
    """Cut-through, idle cycles on ``s_axis`` and back-pressure on ``m_axis``: INSERTs on frames whose last beat
    spills past a beat boundary (the output one beat longer than the input: the input waits for that beat), and
    REMOVEs whose last beat empties (one beat shorter), each count of anchors, mixed with UPDATE and PASS, and a
    9,216-byte INSERT and REMOVE: every frame as golden. By hand, the test counts the frames that cross a boundary
    (``ceil((n + K) / 64) != ceil(n / 64)``) and requires some of each kind."""
    tb = TB(dut, pauses=(0.3, 0.4), seed=11)
    assert tb.cut_through, "run with LAPS_CT=1"
    await tb.reset()
    rng = random.Random(21)
    grew = shrank = 0
    items = []
    for size in list(range(50, 140, 3)) + [9216 - 7, 9216]:
        for op in (2, 3, rng.choice((0, 1))):
            frame, action = sized_item(rng, size, op, port=tb.port)
            k = 12 + 4 * action["count"]
            beats = lambda n: -(-n // BEAT)
            if op == 2 and beats(size + k) > beats(size):
                grew += 1
            if op == 3 and beats(size - k) < beats(size):
                shrank += 1
            items.append((frame, action))
    for frame, action in items:
        tb.send(frame, action)
    errors = await tb.check()
    if grew < 10 or shrank < 10:
        errors.append(f"only {grew} frames grew and {shrank} shrank across a beat boundary")
    _fail_on(errors)


@cocotb.test()
async def bench(dut):
    """``lbpipe bench laps-editor``: for each size of ``LBPIPE_BENCH_SIZES``, INSERTs (one anchor, ``K`` = 16, as
    the LAPS sender's) on IPv4 frames of that size, one alone then 48 back to back, every frame out checked
    against the golden model; beats accepted per clock and first-beat latency (alone, and the maximum back to
    back). Results to ``LBPIPE_BENCH_OUT``."""
    import json
    params = json.loads(os.environ["LBPIPE_PARAMS"])
    tb = TB(dut, seed=1, depth=params["depth"], port=params["laps_port"], cut_through=params["cut_through"])
    await tb.reset()
    rng = random.Random(1)
    golden = Golden(**params)
    for_model = deque()

    class Model:
        @staticmethod
        def process(frame):
            return golden.process(frame, for_model.popleft())

    def make_frame(size, k):
        from lbpipe.tb.lib.packets import laps_frame
        frame = bytes(laps_frame("10.0.0.1", "10.0.0.2", anchors=[], dport=4791))[:42]
        frame += rng.randbytes(size - len(frame))
        action = {"tag": k & 0xFFFF, "op": 2, "ipv6": 0, "l3_off": 14, "l4_off": 34, "count": 1, "pid": k & 0xFFFF,
                  "time": 9, "anchors": 0x0A000001}
        tb.pending.append(action)
        for_model.append(action)
        return frame
    await tb.size_bench(Model, make_frame, latency=True)


@cocotb.test()
async def replay(dut):
    """``lbpipe replay laps-editor IN.pcap --actions ACTS --engine rtl``: each frame with its action, pauses on
    ``s_axis`` and back-pressure on ``m_axis`` as ``LBPIPE_IDLE`` and ``LBPIPE_BACKPRESSURE`` say; every frame that
    leaves until none has for 2,000 cycles after the last action was taken goes to ``LBPIPE_PCAP_OUT``."""
    import json
    from lbpipe.trace import read_events, read_pcap, write_pcap
    params = json.loads(os.environ["LBPIPE_PARAMS"])
    idle = float(os.environ.get("LBPIPE_IDLE", "0"))
    backpressure = float(os.environ.get("LBPIPE_BACKPRESSURE", "0"))
    pauses = (idle, backpressure) if idle or backpressure else None
    tb = TB(dut, pauses=pauses, seed=int(os.environ.get("LBPIPE_SEED", "1")), depth=params["depth"],
            port=params["laps_port"])
    await tb.reset()
    frames = read_pcap(os.environ["LBPIPE_PCAP_IN"])
    actions = [event["act"] for event in read_events(os.environ["LBPIPE_ACTIONS"], kinds=("act",),
                                                     allow_empty=True)]
    for frame, action in zip(frames, actions):
        tb.send(frame, action)
    out = []
    quiet = 0
    while quiet < 2000 or tb.taken < tb.queued or not tb.source.empty():
        await RisingEdge(dut.clk)
        if tb.sink.empty():
            quiet += 1
        else:
            out.append(bytes(tb.sink.recv_nowait(compact=True).tdata))
            quiet = 0
    write_pcap(os.environ["LBPIPE_PCAP_OUT"], out)
