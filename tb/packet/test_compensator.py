"""cocotb tests of :class:`lbpipe.hdl.packet.compensator.Compensator` against its golden model
(:class:`lbpipe.sim.packet.compensator.Compensator`), and the traffic they (and ``tests/test_compensator.py``) use.

The DUT is :class:`lbpipe.boards.top.FlatTop` around the compensator: ``s_axis_*`` and ``m_axis_*`` for
cocotbext-axi's ``AxiStreamSource``/``AxiStreamSink``, ``act_valid``/``act_ready``/``act_payload`` in ``CompAction``
packing (first field in the low bits), and the six counters on the output port ``stats`` (FlatTop keeps ``stats``
as a port for a block without ``ctl``). ``n_qps`` and ``depth`` come from the environment (``COMP_N_QPS``,
``COMP_DEPTH``); ``tuser``'s width is read from the DUT.

Every frame is sent with random bytes in its last beat's unused lanes and a random ``tuser`` per beat, and every
frame's bytes are unique in a test, so a template the golden model sends names the frame it was recorded from. Each
``m_axis`` frame must equal, in order, the golden model's output lane for lane: ``tdata`` (the unused lanes too, as
sent), ``tkeep`` and ``tuser`` of every beat, a compensation NACK carrying the lanes and ``tuser`` of the frame it
was recorded from, a frame cut for being longer than ``depth`` beats the first ``depth`` beats of its lanes; no frame
more; and ``stats`` must equal the golden model's counters at the end. The action
driver offers the actions in frame order and holds each until ``act_ready``; the scoreboard is what shows that the
DUT kept them in order and lost none (a frame paired with another frame's action comes out wrong, and one left
without an action never comes out). The driver also checks that ``act_ready`` is 0 or 1 at every edge after reset
(it is the action FIFO's ``w_rdy``, a register compare), that no more actions are taken ahead of the frames than
the action FIFO's ``depth`` entries hold, and that an offered ``m_axis`` beat is neither withdrawn nor changed.

Each action is offered either *early* (as soon as the previous action was taken, usually before its frame has
arrived: the action FIFO takes it and holds it until its frame reaches the head of the beat FIFO) or *late*, a given
number of cycles after its frame's last beat was accepted on ``s_axis`` (1: the earliest edge that can take it is the
one after).
"""

import copy
import os
import random
from collections import deque

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.hdl.packet.compensator import N_COUNTERS, CompAction
from lbpipe.sim.packet.compensator import Compensator as Golden
from lbpipe.trace import pack
from lbpipe.tb.lib.harness import AxisBench

__all__ = ["FrameMaker", "directed_cases", "random_traffic_items", "random_delay", "BEAT", "SPECIAL_SIZES"]

BEAT = 64
#: Sizes every random run includes: a runt, one full beat, just over one, exactly two beats, just over two.
SPECIAL_SIZES = (1, 64, 65, 128, 129)
#: The counters in ``stats``, in order.
COUNTER_NAMES = ("dropped", "recorded", "too long", "sent", "missed", "cut")


# -- traffic ----------------------------------------------------------------------------------------------------------

class FrameMaker:
    """Frames of given sizes, each one's bytes unique among those this maker made: random bytes, or a RoCEv2 NAK
    from :func:`lbpipe.tb.lib.packets.roce_nak` (IPv4 or IPv6, with or without a VLAN tag) when ``nak`` is asked for."""

    def __init__(self, rng):
        self.rng = rng
        self.made = set()
        self._psn = rng.randrange(1 << 24)

    def sized(self, size):
        for _ in range(10_000):
            frame = self.rng.randbytes(size)
            if frame not in self.made:
                self.made.add(frame)
                return frame
        raise RuntimeError(f"no unused frame of {size} bytes left")

    def nak(self):
        from lbpipe.tb.lib.packets import roce_nak
        rng = self.rng
        self._psn = (self._psn + 1) % (1 << 24)
        opts = {"vlan": rng.randrange(1, 4095)} if rng.random() < 0.3 else {}
        if rng.random() < 0.3:
            src, dst = "2001:db8::1", "2001:db8::2"
        else:
            src, dst = "10.0.0.1", "10.0.0.2"
        frame = bytes(roce_nak(src, dst, 0xC000 + rng.randrange(256), rng.randrange(1 << 24), self._psn,
                               msn=rng.randrange(1 << 24), **opts))
        self.made.add(frame)
        return frame

    def random(self):
        """A NAK (30 %), one of :data:`SPECIAL_SIZES` (20 %), 1 to 128 bytes (20 %) or 1 to 600 bytes (30 %)."""
        r = self.rng.random()
        if r < 0.3:
            return self.nak()
        if r < 0.5:
            return self.sized(self.rng.choice(SPECIAL_SIZES))
        if r < 0.7:
            return self.sized(self.rng.randint(1, 2 * BEAT))
        return self.sized(self.rng.randint(1, 600))


def _action(rng, *, qp, drop=0, record=0, comp=0):
    return {"tag": rng.getrandbits(16), "drop": int(drop), "record": int(record), "comp": int(comp), "qp": qp}


def random_delay(rng):
    """None (early), or the cycles from a frame's last beat to its action's offer: 1, a few, or tens."""
    r = rng.random()
    if r < 0.3:
        return None
    if r < 0.5:
        return 1
    if r < 0.75:
        return rng.randint(2, 6)
    return rng.randint(8, 40)


def directed_cases(rng, maker, n_qps):
    """``(frame, action)`` pairs that reach each rule of the module docstring once, in an order that makes each
    matter: records of 1, 64, 65 and 128 bytes then a ``comp`` of their QP; a 129-byte record over a good template
    then a ``comp`` (missed); ``comp`` of a QP never recorded; ``record`` and ``comp`` in one action; ``drop`` with
    ``comp`` and with ``record``; a ``qp`` out of range (when ``n_qps`` is not a power of two), and a record of
    one QP that must leave another's template alone."""
    qp_span = 1 << max(1, (n_qps - 1).bit_length())
    last = n_qps - 1
    pairs = []

    def add(frame, **action):
        pairs.append((frame, _action(rng, **action)))

    for size in (1, 64, 65, 128):
        add(maker.sized(size), qp=0, record=1)
        add(maker.random(), qp=0, comp=1)
    add(maker.nak(), qp=0, record=1)
    add(maker.sized(129), qp=last, record=1)           # the last QP: too long, stays empty
    add(maker.random(), qp=0, comp=1)                   # QP 0's NAK, untouched by QP last's record
    add(maker.sized(129), qp=0, record=1)               # empties QP 0's template
    add(maker.sized(100), qp=0, comp=1)                 # missed
    add(maker.sized(300), qp=last, comp=1)              # missed: never recorded a frame that fits
    add(maker.nak(), qp=last, record=1, comp=1)         # its own frame's template
    add(maker.sized(65), qp=last, drop=1, comp=1)       # dropped, then QP last's template
    add(maker.sized(2), qp=0, drop=1, record=1)         # dropped, recorded
    add(maker.sized(64), qp=0, comp=1)
    if qp_span > n_qps:
        add(maker.sized(64), qp=n_qps, record=1)        # out of range: records nothing
        add(maker.sized(64), qp=n_qps, comp=1)          # and sends nothing
        add(maker.sized(64), qp=qp_span - 1, record=1, comp=1)
        add(maker.sized(129), qp=n_qps, record=1)       # not counted as too long either
    add(maker.sized(1), qp=0, comp=1)                   # QP 0's 2-byte record still holds
    return pairs


def random_traffic_items(rng, maker, n_qps, count, *, qps=None, p_drop=0.2, p_record=0.35, p_comp=0.3,
                         may_comp=None):
    """``count`` random ``(frame, action)`` pairs. ``qp`` is drawn from ``qps`` (default: every value of the
    field, which includes out-of-range ones when ``n_qps`` is not a power of two, in range three times in four).
    ``may_comp(qp, recorded)`` can forbid a ``comp`` (``recorded``: the QPs this call has recorded so far)."""
    qp_span = 1 << max(1, (n_qps - 1).bit_length())
    recorded = set()
    pairs = []
    for _ in range(count):
        if qps is not None:
            qp = rng.choice(qps)
        elif qp_span > n_qps and rng.random() < 0.25:
            qp = rng.randrange(n_qps, qp_span)
        else:
            qp = rng.randrange(n_qps)
        record = rng.random() < p_record
        if record:
            recorded.add(qp)
        comp = rng.random() < p_comp and (may_comp is None or may_comp(qp, recorded))
        pairs.append((maker.random(), _action(rng, qp=qp, drop=rng.random() < p_drop, record=record, comp=comp)))
    return pairs


# -- testbench --------------------------------------------------------------------------------------------------------

class ActionDriver:
    """Offers each queued action, in queue order, early or ``delay`` cycles after its frame's last beat is accepted
    on ``s_axis`` (see the module docstring), holding it (``act_valid`` and ``act_payload`` unchanged) until
    ``act_ready``. Records the cycles of beat transfers on ``s_axis`` and ``m_axis`` (with ``tlast``) and the cycles
    ``s_axis`` waited. Checks, at every edge after reset: ``act_ready`` is 0 or 1; the actions taken exceed the
    frames whose last beat has been accepted by at most ``depth`` (an action leaves the action FIFO only with its
    frame's last beat, so the excess is at most what the FIFO holds); an offered ``m_axis`` beat is neither
    withdrawn nor changed."""

    def __init__(self, dut, layout, depth):
        self.dut = dut
        self.layout = layout
        self.depth = depth
        self.pending = deque()          # (action, delay)
        self.last_in = []               # cycle each frame's last beat was accepted, since reset
        self.taken = 0                  # actions taken since reset
        self.queued = 0                 # actions queued since reset
        self.in_cycles, self.out_beats = [], []
        self.waits = 0
        self.errors = []
        self.cycle = 0
        dut.act_valid.value = 0
        dut.act_payload.value = 0
        self._task = cocotb.start_soon(self._run())

    def queue(self, action, delay):
        self.pending.append((dict(action), delay))
        self.queued += 1

    def idle(self):
        return self.taken == self.queued

    async def _run(self):
        dut = self.dut
        offered, held = None, None
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if int(dut.rst.value):
                offered, held = None, None
                self.pending.clear()
                self.last_in.clear()
                self.taken = self.queued = 0
                dut.act_valid.value = 0
                continue
            if int(dut.s_axis_tvalid.value):
                if int(dut.s_axis_tready.value):
                    self.in_cycles.append(self.cycle)
                    if int(dut.s_axis_tlast.value):
                        self.last_in.append(self.cycle)
                else:
                    self.waits += 1
            m_valid = int(dut.m_axis_tvalid.value)
            beat = (int(dut.m_axis_tdata.value), int(dut.m_axis_tkeep.value), int(dut.m_axis_tlast.value),
                    int(dut.m_axis_tuser.value)) if m_valid else None
            if held is not None and beat != held:
                self.errors.append(f"cycle {self.cycle}: m_axis beat withdrawn or changed while waiting for ready")
            held = None
            if m_valid:
                if int(dut.m_axis_tready.value):
                    self.out_beats.append((self.cycle, beat[2]))
                else:
                    held = beat
            ready = str(dut.act_ready.value)
            if ready not in ("0", "1"):
                self.errors.append(f"cycle {self.cycle}: act_ready is {ready}")
            if offered is not None and ready == "1":
                self.taken += 1
                offered = None
                if self.taken - len(self.last_in) > self.depth:
                    self.errors.append(f"cycle {self.cycle}: {self.taken} actions taken for {len(self.last_in)} "
                                       f"complete frames: more than the action FIFO's {self.depth} entries ahead")
            if offered is None and self.pending:
                action, delay = self.pending[0]
                due = delay is None or (self.taken < len(self.last_in)
                                        and self.cycle >= self.last_in[self.taken] + delay - 1)
                if due:
                    self.pending.popleft()
                    offered = action
                    dut.act_payload.value = pack(self.layout, action)
            dut.act_valid.value = int(offered is not None)


class TB(AxisBench):
    """Clock, reset, the AXI4-Stream source and sink, the action driver, the golden model and the scoreboard
    around ``compensator_top``."""

    def __init__(self, dut, *, pauses=None, seed=1):
        super().__init__(dut, seed=seed, pauses=pauses, quiet=True)
        self.n_qps = int(os.environ.get("COMP_N_QPS", "10"))
        self.depth = int(os.environ.get("COMP_DEPTH", "64"))
        self.user_width = len(dut.s_axis_tuser)
        self.layout = CompAction(n_qps=self.n_qps)
        assert len(dut.act_payload) == self.layout.size, "COMP_N_QPS does not match the DUT's act_payload"
        self.driver = ActionDriver(dut, self.layout, self.depth)
        self.model = Golden(n_qps=self.n_qps, depth=self.depth, user_width=self.user_width)
        self.maker = FrameMaker(random.Random(self.rng.random()))
        self.lanes = {}                 # frame bytes -> (tdata, tkeep, tuser) as sent
        self.expected = deque()         # (description, is a template, tdata, tkeep, tuser)
        self.checked = 0
        self.two_user_templates = 0     # two-beat templates checked whose beats carry different tuser values
        # Harness self-test: the expected frame with this index gets one data bit flipped, which must be flagged.
        self.corrupt = int(os.environ.get("COMP_CORRUPT", "-1"))

    def send(self, frame, action, delay=None, *, outputs=None):
        """Queue ``frame`` (random bytes in its last beat's unused lanes, a random ``tuser`` per beat) and its
        action, and the golden model's outputs for it; or ``outputs`` (frames already sent in this test), written
        by hand where the golden model cannot follow the DUT, which leaves the golden model untouched."""
        from cocotbext.axi import AxiStreamFrame
        pad = -len(frame) % BEAT
        tdata = bytes(frame) + self.rng.randbytes(pad)
        tkeep = [1] * len(frame) + [0] * pad
        tuser = []
        for _ in range(len(tdata) // BEAT):
            tuser += [self.rng.getrandbits(self.user_width)] * BEAT
        assert frame not in self.lanes, "frames of a test must be unique"
        self.lanes[frame] = (tdata, tkeep, tuser)
        index = self.driver.queued
        self.driver.queue(action, delay)
        self.source.send_nowait(AxiStreamFrame(tdata, tkeep=list(tkeep), tuser=list(tuser)))
        if outputs is None:
            outputs = self.model.process(frame, action)
        for k, out in enumerate(outputs):
            template = k > 0 or bool(action.get("drop"))
            what = f"template of {len(out)} bytes" if template else "its frame"
            lanes = self.lanes[out] if template or out == frame else None
            if lanes is None:
                # A frame cut for being longer than the beat FIFO: its first beats, lanes and tuser as sent.
                assert frame.startswith(out) and len(out) % BEAT == 0, "an output frame that was never sent"
                lanes = tuple(lane[:len(out)] for lane in self.lanes[frame])
                what = f"its frame cut to {len(out)} bytes"
            self.expected.append((f"frame {index} ({len(frame)} bytes, action {action}): {what}", template, *lanes))

    def send_all(self, pairs, delay=random_delay):
        """Send ``(frame, action)`` pairs, each action with ``delay(rng)``."""
        rng = random.Random(self.rng.random())
        for frame, action in pairs:
            self.send(frame, action, delay(rng))

    def read_stats(self):
        word = int(self.dut.stats.value)
        return [(word >> (32 * i)) & 0xFFFFFFFF for i in range(N_COUNTERS)]

    async def quiesce(self, limit=200_000):
        """Wait until every queued action has been taken and the pipeline has had time to settle."""
        for _ in range(limit):
            if self.driver.idle():
                break
            await RisingEdge(self.dut.clk)
        else:
            raise AssertionError(f"{self.driver.queued - self.driver.taken} actions never taken")
        await ClockCycles(self.dut.clk, 16)

    def _compare(self, got, want):
        description, template, tdata, tkeep, tuser = want
        if self.checked == self.corrupt:
            tdata = bytes([tdata[0] ^ 1]) + tdata[1:]
        self.checked += 1
        if template and len(tdata) == 2 * BEAT and tuser[0] != tuser[BEAT]:
            self.two_user_templates += 1
        got = (bytes(got.tdata), list(got.tkeep), list(got.tuser))
        if got == (tdata, tkeep, tuser):
            return None
        lanes = [k for k, (a, b) in enumerate(zip(got[0], tdata)) if a != b][:8]
        return (f"output {self.checked - 1}, {description}: m_axis differs from golden ({len(got[0]) // BEAT} beats "
                f"for {len(tdata) // BEAT}; lanes {lanes} differ; tkeep {'equal' if got[1] == tkeep else 'differs'}, "
                f"tuser {'equal' if got[2] == tuser else f'{got[2][::BEAT]} for {tuser[::BEAT]}'})")

    async def check(self, *, idle_limit=20_000, stats=None):
        """Receive every expected frame, then check that no frame more comes, the driver's checks and the
        counters (the golden model's, or ``stats`` written by hand). Returns the errors."""
        errors = []
        idle = 0
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
            error = self._compare(self.sink.recv_nowait(compact=False), self.expected.popleft())
            if error:
                errors.append(error)
        await self.quiesce()
        extra = 0
        while not self.sink.empty():
            self.sink.recv_nowait()
            extra += 1
        if extra:
            errors.append(f"{extra} unexpected frames on m_axis")
        errors += self.driver.errors
        self.driver.errors = []
        stats, want = self.read_stats(), self.model.stats() if stats is None else list(stats)
        if stats != want:
            errors.append("stats " + ", ".join(f"{n} {s}" for n, s in zip(COUNTER_NAMES, stats)) +
                          "; golden " + ", ".join(f"{n} {w}" for n, w in zip(COUNTER_NAMES, want)))
        return errors


def _fail_on(errors):
    assert not errors, f"{len(errors)} errors:\n" + "\n".join(errors[:20])


def _env_int(name, default):
    return int(os.environ.get(name, default))


# -- tests ------------------------------------------------------------------------------------------------------------

async def _random_run(dut, *, pauses, seed):
    tb = TB(dut, pauses=pauses, seed=seed)
    await tb.reset()
    rng = random.Random(_env_int("COMP_SEED", seed))
    tb.send_all(directed_cases(rng, tb.maker, tb.n_qps))
    tb.send_all(random_traffic_items(rng, tb.maker, tb.n_qps, _env_int("COMP_FRAMES", 300)))
    errors = await tb.check()
    dut._log.info("%d frames out; counters %s; %d two-beat templates with a different tuser per beat", tb.checked,
                  dict(zip(COUNTER_NAMES, tb.read_stats())), tb.two_user_templates)
    # Frames longer than the beat FIFO are long_frames' business: the random traffic stays within it.
    errors += [f"the run never counted {name}" for name, c in zip(COUNTER_NAMES, tb.model.stats())
               if not c and name != "cut"]
    if not tb.two_user_templates:
        errors.append("no two-beat template with a different tuser per beat was checked")
    _fail_on(errors)


@cocotb.test()
async def random_traffic(dut):
    """Directed cases, then random frames and actions (early and late), no pauses: every output frame, lane for
    lane with its tuser, and the counters as golden."""
    await _random_run(dut, pauses=None, seed=1)


@cocotb.test()
async def random_traffic_pauses(dut):
    """As random_traffic, with idle cycles on s_axis and back-pressure on m_axis."""
    await _random_run(dut, pauses=(0.3, 0.4), seed=2)


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, actions always offered (early), no comp: s_axis takes one beat per clock
    and never waits; without drops m_axis also sends one beat per clock."""
    tb = TB(dut, seed=3)
    await tb.reset()
    rng = random.Random(13)
    sizes = (1, 2, 63, 64, 65, 127, 128, 129, 200, 600)
    errors = []
    for label, p_drop in (("no drops", 0.0), ("drops", 0.3)):
        first_in, first_out, waits = len(tb.driver.in_cycles), len(tb.driver.out_beats), tb.driver.waits
        order = [s for s in sizes for _ in range(8)]
        rng.shuffle(order)
        pairs = [(tb.maker.sized(s), _action(rng, qp=rng.randrange(tb.n_qps), drop=rng.random() < p_drop,
                                             record=rng.random() < 0.4)) for s in order]
        tb.send_all(pairs, delay=lambda _: None)
        errors += await tb.check()
        ins = tb.driver.in_cycles[first_in:]
        outs = [c for c, _ in tb.driver.out_beats[first_out:]]
        beats = sum(-(-s // BEAT) for s in order)
        in_rate = len(ins) / (ins[-1] - ins[0] + 1)
        out_rate = len(outs) / (outs[-1] - outs[0] + 1)
        dut._log.info("%s: %d beats in, %.4f beats per clock in, %.4f out", label, len(ins), in_rate, out_rate)
        if len(ins) != beats:
            errors.append(f"{label}: {len(ins)} beats accepted, {beats} sent")
        if tb.driver.waits != waits:
            errors.append(f"{label}: s_axis waited {tb.driver.waits - waits} cycles")
        if in_rate != 1.0:
            errors.append(f"{label}: {in_rate:.4f} beats accepted per clock")
        if not p_drop and out_rate != 1.0:
            errors.append(f"{label}: {out_rate:.4f} beats sent per clock")
    _fail_on(errors)


@cocotb.test()
async def comp_timing(dut):
    """Back-to-back frames, actions always offered, every ``comp`` of a QP with a template of one or two beats: on
    m_axis each compensation NACK starts three cycles after its frame's last beat (the two fetch cycles between),
    its beats follow one per clock, and the next frame follows at once; the whole run takes exactly one cycle per
    beat plus two per compensation.

    The action FIFO's registered output does not show here: the actions are offered early, one per clock, and a
    frame has at least one beat, so each action is in the action FIFO before its frame's first beat reaches the
    head of the beat FIFO (``action_latency`` measures the stage where it does show)."""
    tb = TB(dut, seed=4)
    await tb.reset()
    rng = random.Random(14)
    n = tb.n_qps
    for qp in range(n):                 # one-beat templates on even QPs, two-beat ones on odd QPs
        tb.send(tb.maker.sized(rng.randint(1, 64) if qp % 2 == 0 else rng.randint(65, 128)),
                _action(rng, qp=qp, record=1))
    errors = await tb.check()
    first_out = len(tb.driver.out_beats)
    pairs = [(tb.maker.sized(rng.randint(1, 300)), _action(rng, qp=rng.randrange(n), comp=rng.random() < 0.4))
             for _ in range(80)]
    tb.send_all(pairs, delay=lambda _: None)
    is_template = [template for _, template, *_ in tb.expected]
    errors += await tb.check()
    if errors:
        _fail_on(errors)
    # Group the beats into frames, each marked as a template or not.
    beats = tb.driver.out_beats[first_out:]
    frames, current = [], []
    for cycle, last in beats:
        current.append(cycle)
        if last:
            frames.append(current)
            current = []
    if len(frames) != len(is_template):
        _fail_on([f"{len(frames)} frames out, {len(is_template)} expected"])
    comps = sum(is_template)
    for k, (cycles, template) in enumerate(zip(frames, is_template)):
        if cycles != list(range(cycles[0], cycles[0] + len(cycles))):
            errors.append(f"output {k}: beats at cycles {cycles}, not one per clock")
        if k:
            gap = cycles[0] - frames[k - 1][-1]
            # The edge that takes the trigger's last beat (PASS) moves to FETCH (template memories read), then LOAD
            # (their registered outputs into the send registers), then EMIT0 puts the first template beat in the
            # m_axis register: three edges after the one that put the trigger's last beat there. The action FIFO
            # is not on this path (the FSM does not wait for the next action before it fetches), so three as
            # before it was added; a frame follows the previous frame or template on the next edge, its action
            # being at the head of the action FIFO already (the FIFO pops its head and offers the next on the same
            # edge, SyncFIFOBuffered's output register reloading from its memory as it is read).
            want = 3 if template else 1
            if gap != want:
                errors.append(f"output {k} ({'template' if template else 'frame'}): first beat {gap} cycles after "
                              f"the previous frame's last, expected {want}")
    span = frames[-1][-1] - frames[0][0] + 1
    if span != len(beats) + 2 * comps:
        errors.append(f"{len(beats)} beats with {comps} compensations in {span} cycles, expected "
                      f"{len(beats) + 2 * comps}")
    dut._log.info("%d frames out, %d compensations, %d beats in %d cycles", len(frames), comps, len(beats), span)
    _fail_on(errors)


@cocotb.test()
async def sink_stopped(dut):
    """With m_axis stopped, s_axis takes the beat FIFO's ``depth`` beats and one for the m_axis register, then
    waits, and every action has been taken (the action FIFO holds all of them); nothing is lost when m_axis
    resumes."""
    tb = TB(dut, seed=5)
    await tb.reset()
    rng = random.Random(15)
    tb.sink.pause = True
    count = tb.depth // 2 + 8
    tb.send_all([(tb.maker.sized(128), _action(rng, qp=rng.randrange(tb.n_qps), record=rng.random() < 0.5))
                 for _ in range(count)], delay=lambda _: None)
    await ClockCycles(dut.clk, 3 * tb.depth)
    errors = []
    taken = len(tb.driver.in_cycles)
    # Unchanged by the action FIFO: the first frame's action is taken into it no later than the edge its first
    # beat enters the beat FIFO (both are offered at once, nothing ahead), so it is at the action FIFO's output
    # when that beat reaches the beat FIFO's, and that beat is taken into the m_axis register, which then stays
    # full. The beat FIFO then fills: SyncFIFOBuffered of depth D holds D - 1 beats in its memory and one in its
    # output register, and its w_rdy (s_axis_tready) falls when the memory is full. The actions do not limit
    # this: there are count <= depth of them.
    if taken != tb.depth + 1:
        errors.append(f"{taken} beats taken with m_axis stopped, expected the FIFO's {tb.depth} and one in the "
                      f"m_axis register")
    if int(dut.s_axis_tready.value):
        errors.append("s_axis ready with m_axis stopped and the FIFO full")
    if tb.driver.out_beats:
        errors.append("m_axis transfers while tready is low")
    if tb.driver.taken != count:
        errors.append(f"{tb.driver.taken} of {count} actions taken with m_axis stopped, expected all: the action "
                      f"FIFO has {tb.depth} entries and only the frames' last beats take actions out")
    tb.sink.pause = False
    errors += await tb.check()
    _fail_on(errors)


@cocotb.test()
async def actions_ahead(dut):
    """Actions before their frames: with s_axis held idle, act takes exactly ``depth`` actions (the action FIFO's
    entries) and then holds act_ready low; once the frames come, each leaves as its own action says, in order, and
    no action is lost."""
    tb = TB(dut, seed=7)
    await tb.reset()
    rng = random.Random(17)
    count = tb.depth + 8
    tb.source.pause = True
    tb.send_all(random_traffic_items(rng, tb.maker, tb.n_qps, count), delay=lambda _: None)
    await ClockCycles(dut.clk, 2 * count)
    errors = []
    # SyncFIFOBuffered of depth D holds D - 1 actions in its memory and one in its output register; none leaves,
    # as no frame has come.
    if tb.driver.taken != tb.depth:
        errors.append(f"{tb.driver.taken} actions taken with no frame in, expected the action FIFO's {tb.depth}")
    if str(dut.act_ready.value) != "0":
        errors.append(f"act_ready is {dut.act_ready.value} with the action FIFO full")
    if tb.driver.in_cycles or tb.driver.out_beats:
        errors.append("beats moved while s_axis was idle")
    tb.source.pause = False
    errors += await tb.check()
    _fail_on(errors)


@cocotb.test()
async def action_latency(dut):
    """One frame at a time through an idle pipeline (one beat or three), its action offered early or late: on
    m_axis the frame's first beat is sent three cycles after its first beat was accepted on s_axis when its action
    was there first, and ``delay + 3`` cycles after its last beat was accepted when its action is offered ``delay``
    cycles after that; the other beats follow one per clock."""
    tb = TB(dut, seed=9)
    await tb.reset()
    rng = random.Random(19)
    errors = []
    for size in (1, 3 * BEAT - 7):
        for delay in (None, 1, 2, 7):
            first_in, first_out = len(tb.driver.in_cycles), len(tb.driver.out_beats)
            tb.send(tb.maker.sized(size), _action(rng, qp=rng.randrange(tb.n_qps)), delay)
            errors += await tb.check()
            ins = tb.driver.in_cycles[first_in:]
            outs = [c for c, _ in tb.driver.out_beats[first_out:]]
            # Cycles are the driver's edge count; a value driven after edge c is taken at edge c + 1. A beat taken
            # at edge F enters the beat FIFO's memory, is in its output register after F + 1, is taken into the
            # m_axis register at F + 2 and sent at F + 3 (the sink never pauses). An early action is in the action
            # FIFO no later than the frame's first beat is in the beat FIFO, so it holds nothing up. A late one is
            # offered after edge L + delay - 1 (L: the frame's last beat taken), taken into the action FIFO at
            # L + delay, in its output register after L + delay + 1, so the first beat moves at L + delay + 2 and is
            # sent at L + delay + 3. Before the action FIFO the action went straight to the take logic: L + delay
            # + 2 (for a one-beat frame and delay 1 that was F + 3, the early case; the action FIFO's registered
            # output makes it one more).
            want = ins[0] + 3 if delay is None else ins[-1] + delay + 3
            label = f"{size} bytes, action {'early' if delay is None else f'{delay} cycles late'}"
            if len(ins) != -(-size // BEAT) or len(outs) != len(ins):
                errors.append(f"{label}: {len(ins)} beats in, {len(outs)} out")
            elif outs != list(range(want, want + len(outs))):
                errors.append(f"{label}: beats in at cycles {ins}, out at {outs}; expected out from {want}, one per "
                              f"clock")
    _fail_on(errors)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames and actions in flight, with pauses on s_axis and m_axis.

    Templates of QPs 0 .. n/2-1 are recorded first; the traffic cut by the reset uses only the other QPs: a record
    cut by reset leaves its QP's template empty, and which records the reset cuts, and which it prevents, depends on
    where it falls, which the golden model cannot know (``reset_cuts_record`` checks one cut record on its own; the
    module docstring's argument makes it harmless: Themis-D records again before it asks for a comp). Outputs before
    the reset are a prefix of the golden ones; none come after it until new traffic; the new traffic matches a
    golden model whose counters were reset and whose templates were kept: comps of QPs 0 .. n/2-1 send the templates
    recorded before the reset, other QPs are compensated only after a new record."""
    tb = TB(dut, pauses=(0.2, 0.3), seed=6)
    await tb.reset()
    rng = random.Random(16)
    n = tb.n_qps
    stable = list(range(max(1, n // 2)))
    qp_span = 1 << max(1, (n - 1).bit_length())
    volatile = [q for q in range(qp_span) if q not in stable]
    for qp in stable:
        tb.send(tb.maker.nak(), _action(rng, qp=qp, record=1))
    tb.send_all(random_traffic_items(rng, tb.maker, n, 20, qps=stable, p_record=0.0))
    errors = await tb.check()
    kept = copy.deepcopy(tb.model)
    # Traffic to cut: the other QPs only, early and late actions.
    tb.send_all(random_traffic_items(rng, tb.maker, n, 120, qps=volatile))
    before_expected = list(tb.expected)
    await ClockCycles(dut.clk, 150)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    tb.source.clear()
    before = []
    while not tb.sink.empty():
        before.append(tb.sink.recv_nowait(compact=False))
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    for k, got in enumerate(before):
        error = tb._compare(got, before_expected[k])
        if error:
            errors.append(f"before the reset: {error}")
    if not 0 < len(before) < len(before_expected):
        errors.append(f"{len(before)} of {len(before_expected)} frames out before the reset: not mid-traffic")
    tb.expected.clear()
    if tb.read_stats() != [0] * N_COUNTERS:
        errors.append(f"stats {tb.read_stats()} after reset")
    await ClockCycles(dut.clk, 40)
    if not tb.sink.empty() or any(c > tb.driver.cycle - 40 for c, _ in tb.driver.out_beats[-1:]):
        errors.append("m_axis transfers after the reset")
    kept.reset()
    tb.model = kept
    checked = tb.checked
    # New traffic: directed comps of the kept templates first, then random traffic on every QP, comp of a volatile
    # QP only once this traffic has recorded it.
    tb.send_all([(tb.maker.random(), _action(rng, qp=qp, comp=1)) for qp in stable])
    tb.send_all(random_traffic_items(rng, tb.maker, n, 150,
                                     may_comp=lambda qp, recorded: qp in stable or qp >= n or qp in recorded))
    errors += await tb.check()
    sent_after = tb.model.stats()[3]
    if sent_after < len(stable):
        errors.append(f"only {sent_after} compensations sent after the reset")
    dut._log.info("%d of %d frames out before the reset; after it %d frames out, counters %s", len(before),
                  len(before_expected), tb.checked - checked, dict(zip(COUNTER_NAMES, tb.read_stats())))
    _fail_on(errors)


@cocotb.test()
async def reset_cuts_record(dut):
    """A record cut short by reset leaves its QP's template empty (module docstring: the flags are written empty
    with a record's first beat and for good with its last). A one-beat frame A is recorded on QP 3 and a comp of
    QP 3 sends it; then a three-beat frame B is recorded (and dropped) on QP 3, only its first beat is sent, and
    reset comes once that beat has left the beat FIFO. After the reset a comp of QP 3 sends nothing after its frame
    and counts one miss (written by hand: the golden model cannot cut a frame). Were the flags written only with
    a record's last beat, B's first beat would be sent with A's flags."""
    tb = TB(dut, seed=8)
    await tb.reset()
    rng = random.Random(18)
    qp = 3
    assert tb.n_qps > qp, "reset_cuts_record needs n_qps > 3"
    frame_a = tb.maker.sized(rng.randint(1, BEAT))
    tb.send(frame_a, _action(rng, qp=qp, record=1))
    tb.send(tb.maker.sized(rng.randint(1, 300)), _action(rng, qp=qp, comp=1))
    assert tb.model.templates[qp] == frame_a and tb.model.stats()[3] == 1
    errors = await tb.check()

    # B by hand on s_axis (the source is idle): its first beat only, the two others never come.
    frame_b = tb.maker.sized(rng.randint(2 * BEAT + 1, 3 * BEAT))
    tb.driver.queue(_action(rng, qp=qp, drop=1, record=1), None)
    out_before = len(tb.driver.out_beats)
    dut.s_axis_tdata.value = int.from_bytes(frame_b[:BEAT], "little")
    dut.s_axis_tkeep.value = (1 << BEAT) - 1
    dut.s_axis_tlast.value = 0
    dut.s_axis_tuser.value = rng.getrandbits(tb.user_width)
    dut.s_axis_tvalid.value = 1
    for _ in range(100):
        await RisingEdge(dut.clk)
        if int(dut.s_axis_tready.value):
            break
    else:
        _fail_on(errors + ["B's first beat not accepted in 100 cycles"])
    dut.s_axis_tvalid.value = 0
    # The beat leaves the beat FIFO (SyncFIFOBuffered) on an edge with its r_rdy (the output register holds it)
    # and r_en (the compensator takes it, B's action being at the head of the action FIFO).
    beats = dut.block.beats.fifo
    for _ in range(100):
        await RisingEdge(dut.clk)
        if int(beats.r_rdy.value) and int(beats.r_en.value):
            break
    else:
        _fail_on(errors + ["B's first beat never left the beat FIFO"])
    if tb.driver.taken != 3:
        errors.append(f"{tb.driver.taken} actions taken before the reset, expected A's, the comp's and B's")
    await tb.reset()
    if len(tb.driver.out_beats) != out_before or not tb.sink.empty():
        errors.append("m_axis sent something of B (dropped)")
    if tb.read_stats() != [0] * N_COUNTERS:
        errors.append(f"stats {tb.read_stats()} after reset")

    frame_c = tb.maker.sized(rng.randint(1, 300))
    tb.send(frame_c, _action(rng, qp=qp, comp=1), outputs=[frame_c])
    # dropped, recorded, too long, sent: 0; missed: 1; cut: 0.
    errors += await tb.check(stats=[0, 0, 0, 0, 1, 0])
    _fail_on(errors)


async def _long_frames(dut, *, pauses, seed):
    """Frames longer than the beat FIFO (``D = depth * 64`` bytes) between frames that must pass, each action early
    or 4 cycles late, with every kind of action on the long ones; under a time limit, so an input that deadlocks
    fails instead of hanging the run. Outputs as golden, and the counters written by hand below."""
    from cocotb.triggers import with_timeout
    tb = TB(dut, pauses=pauses, seed=seed)
    await tb.reset()
    rng = random.Random(seed + 40)
    size = tb.depth * BEAT
    late, early = 4, None
    nak = tb.maker.nak()
    assert len(nak) <= 2 * BEAT
    steps = [
        # frame, action, delay                                                 what leaves; counters that move
        (nak, dict(qp=1, record=1), late),                                   # the NAK; recorded
        (tb.maker.sized(size + 1), dict(qp=1, comp=1), late),                # D bytes, the NAK; cut, sent
        (tb.maker.sized(100), dict(qp=1), early),                            # it
        (tb.maker.sized(size + BEAT), dict(qp=1, drop=1, comp=1), late),     # the NAK; dropped, cut, sent
        (tb.maker.sized(size), dict(qp=1, comp=1), late),                    # it whole, the NAK; sent
        (tb.maker.sized(3 * size + 7), dict(qp=1, record=1), late),          # D bytes; too long, cut
        (tb.maker.sized(64), dict(qp=1, comp=1), early),                     # it; missed
        (tb.maker.sized(size + 1), dict(qp=2, record=1, comp=1), late),      # D bytes; too long, cut, missed
        (tb.maker.sized(1), dict(qp=2, record=1), late),                     # it; recorded
        (tb.maker.sized(size + 1), dict(qp=2), early),                       # D bytes (cut through); cut
        (tb.maker.sized(2 * size + 5), dict(qp=2, drop=1), early),           # nothing; dropped, cut
        (tb.maker.sized(1), dict(qp=2, comp=1), late),                       # it, the 1-byte record; sent
        (tb.maker.sized(size + 1), dict(qp=2, drop=1, record=1), late),      # nothing; dropped, too long, cut
        (tb.maker.sized(64), dict(qp=2, comp=1), late),                      # it; missed
        (tb.maker.sized(size), dict(qp=3), early),                           # it whole
    ]
    for frame, action, delay in steps:
        tb.send(frame, _action(rng, **action), delay)
    beats = sum(-(-len(frame) // BEAT) for frame, _, _ in steps)
    # Every beat in and out once at one per clock, with the pauses' slowdown, and the actions' delays: a generous
    # limit, well under check's own 20,000 idle cycles (4 ns a cycle).
    errors = await with_timeout(tb.check(), 4 * (4 * beats + 100 * len(steps) + 2_000), "ns")
    # dropped 3, recorded 2, too long 3, sent 4, missed 3, cut 7 (the comments above, summed by hand).
    want = [3, 2, 3, 4, 3, 7]
    if tb.read_stats() != want:
        errors.append(f"stats {tb.read_stats()}, by hand {want}")
    dut._log.info("%d frames out for %d in (%d beats); counters %s", tb.checked, len(steps), beats,
                  dict(zip(COUNTER_NAMES, tb.read_stats())))
    _fail_on(errors)


@cocotb.test()
async def long_frames(dut):
    """Frames of ``D + 1``, ``D + 64``, ``2D + 5`` and ``3D + 7`` bytes (``D = depth * 64``) are cut to ``D`` bytes,
    whatever their action, and their actions applied to what is left (module docstring); frames of ``D`` bytes and
    less around them pass; ``s_axis`` never deadlocks."""
    await _long_frames(dut, pauses=None, seed=10)


@cocotb.test()
async def long_frames_pauses(dut):
    """As long_frames, with idle cycles on s_axis and back-pressure on m_axis."""
    await _long_frames(dut, pauses=(0.3, 0.4), seed=11)
