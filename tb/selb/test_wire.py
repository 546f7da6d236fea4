"""cocotb testbench of SELB's source ToR in the wire (parser -> path mirror -> selb-cluster -> selb-reroute ->
deparser -> mark).

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.selb.wire.SelbTxWire`, parameters in
``LBPIPE_PARAMS`` (JSON). Every output frame is compared with the golden model and every RoCEv2 frame's ICRC is
checked with ``tb/lib/packets.py``'s :func:`icrc` (computed from the frame's bytes). :func:`reroute_by_hand` and
:func:`reset_sweeps_the_mirror` predict the frames from hand-worked clusterings and draws, without the golden model.

The clock is stopped in every test (``ctl`` table 48), so a flow is rerouted at most once and the frames do not
depend on the cycle (sim/selb/wire.py, "The mirror's timing"); the stale count (STATUS_9) is not compared with the
golden model's (the mirror's timing and flow-index collisions move it either way); the hand-worked tests count it.
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.sim.selb.wire import SelbTxWireModel
from lbpipe.tb.lib.harness import AxisBench
from lbpipe.tb.lib.packets import RC_SEND_ONLY, icrc, mixed_roce_frames, roce_ack, roce_data, sized_data

BEAT = 64
# The wire's control map, from docs/selb_tx_wire.md.
CLOCK, SAMPLE, TICK = 48, 49, 50
#: Counters: selb-cluster 0-5, selb-reroute 6-9 (packets, tails, to the shortest path, stale), deparser 10-12,
#: frames not given to selb-reroute 13 (the datasheet's).
N_COUNTERS, STALE = 14, 9


def _params():
    return json.loads(os.environ["LBPIPE_PARAMS"])


def stop_clock(at=0):
    return [{"table": CLOCK, "index": 1, "data": 0}, {"table": CLOCK, "index": 0, "data": at}]


def period(qlens):
    """One sample period: a sample per path, then the period's tick."""
    return ([{"table": SAMPLE, "index": p, "data": q} for p, q in enumerate(qlens)]
            + [{"table": TICK, "index": 0, "data": 0}])


def program(rng, *, n_paths, q_bits, theta, **_):
    """The clock stopped at a random time, then three sample periods: random queue lengths, the same with about a
    third of the paths grown by more than theta (congested), then anything; after the third tick selb-cluster
    publishes the second period's clustering and congestion."""
    top = (1 << q_bits) - 1
    first = [rng.randrange(top // 2) for _ in range(n_paths)]
    second = [min(top, q + theta + 1 + rng.randrange(50)) if rng.random() < 0.35 else q for q in first]
    third = [rng.randrange(top) for _ in range(n_paths)]
    return stop_clock(rng.randrange(1 << 16)) + period(first) + period(second) + period(third)


def flows_for(rng, count=6):
    """(src, dst, sport, dqpn) of ``count`` flows, one over IPv6."""
    flows = []
    for k in range(count):
        v6 = k == 3
        flows.append(("fd00::1" if v6 else "10.0.0.1", f"fd00::{k + 2}" if v6 else f"10.{k}.0.{rng.randrange(1, 250)}",
                      rng.randrange(1 << 16), rng.randrange(1 << 24)))
    return flows


def frames_for(rng, count, flows, sizes=None):
    """SELB data frames of the flows (many sizes, VLAN), and frames that are not SELB traffic: data with a non-zero
    UDP checksum, ACKs, CNPs, non-RoCE, a runt (:func:`mixed_roce_frames`)."""
    return mixed_roce_frames(rng, count, flows, sizes, shares=(0.72, 0.78, 0.85, 0.9, 0.98))


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace selb-tx-wire``: :func:`program`'s commands (clock stopped, three sample periods) and
    ``n_frames`` frames of :func:`frames_for`."""
    rng = random.Random(seed)
    cmds = program(rng, **params)
    return cmds, frames_for(rng, n_frames, flows_for(rng))


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True)
        dut.smp_valid.value = 0
        dut.smp_payload.value = 0

    async def settle(self):
        """Reset, then the mirror's and selb-reroute's sweeps."""
        await self.reset()
        await ClockCycles(self.dut.clk, _params()["n_flows"] + 8)

    async def sample(self, path, qlen, tick=0):
        """One item on ``smp`` (path, q_bits of queue length, tick; first field lowest)."""
        params = _params()
        pb = max(1, (params["n_paths"] - 1).bit_length())
        self.dut.smp_payload.value = path | qlen << pb | tick << (pb + params["q_bits"])
        self.dut.smp_valid.value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if int(self.dut.smp_ready.value):
                break
        self.dut.smp_valid.value = 0

    async def check_counters(self, model):
        """The counters against the golden model's, all but the stale count (STATUS_9), which the mirror's timing
        and flow-index collisions move either way (docs/selb_tx_wire.md)."""
        counters = [await self.axil.read_dword(0x40 + 4 * i) for i in range(N_COUNTERS)]
        want = model.stats()
        if [c for i, c in enumerate(counters) if i != STALE] != [c for i, c in enumerate(want) if i != STALE]:
            return [f"counters {counters}, golden model {want} (STATUS_{STALE} not compared)"]
        return []


async def _setup(dut, *, stalls, seed):
    params = _params()
    tb = TB(dut, stalls=stalls, seed=seed)
    await tb.settle()
    model = SelbTxWireModel(**params)
    await tb.program(model, program(tb.rng, **params))
    return tb, model, params


@cocotb.test()
async def frames_with_stalls(dut):
    """Mixed traffic with random idle input and output back-pressure after three sample periods (a third of the
    paths congested): every frame and counter as the golden model."""
    tb, model, _ = await _setup(dut, stalls=True, seed=1)
    frames = frames_for(tb.rng, 150, flows_for(tb.rng))
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected, inputs=frames)
    errors += await tb.check_counters(model)
    assert model.stats()[7] > 0, "the trace rerouted nothing: it checks nothing of the reroute"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, no stalls: one beat accepted per clock, every frame as the golden model."""
    tb, model, _ = await _setup(dut, stalls=False, seed=2)
    frames = frames_for(tb.rng, 100, flows_for(tb.rng), sizes=[0, 1, 3, 50, 200, 960, 1400, 4000, 8000])
    expected = [model.process(f) for f in frames]
    accepted = tb.count_accepted(sum((len(f) + BEAT - 1) // BEAT for f in frames))
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected, inputs=frames)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])
    rate = sum(accepted) / len(accepted)
    assert rate == 1.0, f"{rate} beats per clock"


@cocotb.test()
async def samples_on_smp(dut):
    """The same three sample periods on the ``smp`` port instead of ``ctl``, then mixed traffic with stalls: every
    frame and counter as the golden model fed the same samples."""
    params = _params()
    tb = TB(dut, stalls=True, seed=3)
    await tb.settle()
    model = SelbTxWireModel(**params)
    cmds = program(tb.rng, **params)
    for cmd in cmds:
        if cmd["table"] == CLOCK:
            await tb.control(cmd)
            model.control(cmd)
        else:
            tick = int(cmd["table"] == TICK)
            item = {"path": 0 if tick else cmd["index"], "qlen": 0 if tick else cmd["data"], "tick": tick}
            await tb.sample(**item)
            model.sample(item)
    await ClockCycles(dut.clk, 8)
    frames = frames_for(tb.rng, 80, flows_for(tb.rng))
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected, inputs=frames)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def replay(dut):
    """``lbpipe replay selb-tx-wire IN.pcap --engine rtl``."""
    tb = TB(dut, stalls=False, seed=1)
    await tb.settle()
    await tb.replay()


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight, then the stopped clock and the sample periods again: every frame after it as
    the golden model (reset clears the clusters, both flow tables and the LFSRs)."""
    tb, model, params = await _setup(dut, stalls=False, seed=5)
    flows = flows_for(tb.rng)
    await tb.reset_in_flight(frames_for(tb.rng, 30, flows), 30 + tb.rng.randrange(80))
    await ClockCycles(dut.clk, params["n_flows"] + 8)
    model.reset()
    await tb.program(model, program(tb.rng, **params))
    frames = frames_for(tb.rng, 60, flows)
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected, inputs=frames)
    errors += await tb.check_counters(model)
    await ClockCycles(dut.clk, 50)
    if not tb.sink.empty():
        errors.append("frames left over after the reset")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def long_stall(dut):
    """``m_axis`` held for 3,000 clocks while 200 short SELB and other frames come in, then released: the stall
    fills the deparser, the mark FIFO and the side FIFOs and reaches ``s_axis``; afterwards every frame and counter
    as the golden model (a join that gave the deparser an action with the mark FIFO full would lose a mark)."""
    tb, model, _ = await _setup(dut, stalls=False, seed=6)
    frames = frames_for(tb.rng, 200, flows_for(tb.rng), sizes=[0, 3, 16, 40])
    expected = [model.process(f) for f in frames]
    errors = await tb.stall_then_check(frames, expected)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


# -- hand-worked ------------------------------------------------------------------------------------------------------
# 8 paths, k = 2, theta 64. Period 1: paths 0-3 at 10 packets, 4-7 at 1,000; period 2: the same but path 5 at
# 1,100. After the third tick the published clustering is period 2's: {0-3} and {4-7} (whatever the initial
# centroids: two distinct values start one centroid in each group, or both in the high group and the low group's
# mean pulls one back), and only path 5 grew by more than theta (100 > 64). A flow whose source port's low 3 bits are 5
# is looked up on path 5: congested, its cluster's free paths are 4, 6 and 7 (m = 3). Its first frame is the first
# SELB frame since reset, so selb-reroute's draw is its LFSR seed 0xB5AD = 46,509: rank floor(46,509 x 3 / 65,536)
# = floor(2.129) = 2, the third mate, path 7. So: that frame is the tail (leaves on path 5, port unchanged, BTH byte 4
# bits 1..0 = epoch 0, tail 1 -> 0b01); every later frame of the flow leaves on path 7 (port low bits 7) with epoch
# 1, no tail (0b10). A flow on path 1 (not congested) never moves: port unchanged, mark 0b00.
HAND = dict(n_paths=8, k=2, theta=64, reroute_seed=0xB5AD)
HAND_PERIODS = ([10] * 4 + [1000] * 4, [10] * 4 + [1000, 1100, 1000, 1000], [0] * 8)


def _bth4(frame, l4_off):
    return frame[l4_off + 12]


@cocotb.test()
async def reroute_by_hand(dut):
    params = _params()
    assert all(params[k] == v for k, v in HAND.items()), f"reroute_by_hand needs {HAND}"
    tb = TB(dut, stalls=True, seed=9)
    await tb.settle()
    for cmd in stop_clock(100) + period(HAND_PERIODS[0]) + period(HAND_PERIODS[1]) + period(HAND_PERIODS[2]):
        await tb.control(cmd)
    await ClockCycles(dut.clk, 8)
    hot = ("10.0.0.1", "10.1.0.9", 0xC3A5, 0x000123)         # 0xC3A5: low 3 bits 0b101 = path 5
    cool = ("10.0.0.1", "10.1.0.8", 0x7001, 0x000456)        # low bits 1
    sends = ["hot", "cool", "hot", "ack", "hot", "cool", "csum", "hot", "other"]
    frames, what = [], []
    for n, s in enumerate(sends):
        if s in ("hot", "cool"):
            src, dst, sport, dqpn = hot if s == "hot" else cool
            frames.append(bytes(roce_data(src, dst, sport, dqpn, n, opcode=RC_SEND_ONLY, payload_len=40 + 300 * n)))
        elif s == "ack":
            frames.append(bytes(roce_ack(hot[0], hot[1], hot[2], hot[3], 1)))
        elif s == "csum":
            frames.append(bytes(roce_data(*hot, 77, payload_len=8, udp_chksum=0x1234)))
        else:
            from scapy.layers.inet import IP, UDP
            from scapy.layers.l2 import Ether
            from scapy.packet import Raw
            frames.append(bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=0xC3A5, dport=53) /
                                Raw(b"q" * 30)))
        what.append(s)
    for f in frames:
        tb.send(f)
    l4 = 14 + 20
    errors = []
    first_hot = True
    for n, (f, s) in enumerate(zip(frames, what)):
        got = bytes((await tb.recv(f"output frame {n}")).tdata)
        if s not in ("hot", "cool"):
            if got != f:
                errors.append(f"frame {n} ({s}): not SELB traffic, but changed")
            continue
        port = int.from_bytes(got[l4:l4 + 2], "big")
        if s == "cool":
            want_port, want_mark = 0x7001, 0b00
        elif first_hot:
            want_port, want_mark = 0xC3A5, 0b01
            first_hot = False
        else:
            want_port, want_mark = 0xC3A0 | 7, 0b10
        if port != want_port:
            errors.append(f"frame {n} ({s}): source port {port:#06x}, by hand {want_port:#06x}")
        if _bth4(got, l4) != (_bth4(f, l4) & 0xFC) | want_mark:
            errors.append(f"frame {n} ({s}): BTH byte 4 {_bth4(got, l4):#04x}, by hand {want_mark:#04x}")
        if got[-4:] != icrc(got):
            errors.append(f"frame {n} ({s}): ICRC {got[-4:].hex()} is not the frame's {icrc(got).hex()}")
        if got[:l4] != f[:l4] or got[l4 + 2:l4 + 12] != f[l4 + 2:l4 + 12] or got[l4 + 13:-4] != f[l4 + 13:-4]:
            errors.append(f"frame {n} ({s}): bytes other than the port, the mark and the ICRC changed")
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(N_COUNTERS)]
    selb = sends.count("hot") + sends.count("cool")
    if counters[6:8] != [selb, 1] or counters[8] != 0 or counters[13] != len(sends) - selb:
        errors.append(f"counters {counters}: by hand {selb} SELB frames, 1 reroute, none to the shortest path, "
                      f"{len(sends) - selb} not SELB")
    if counters[0] != len(sends):
        errors.append(f"selb-cluster looked up {counters[0]} frames, not every frame ({len(sends)})")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def reset_sweeps_the_mirror(dut):
    """The hand-worked reroute (the flow on path 5 moves to path 7; one stale frame, the one right after the tail),
    then a reset. After it nothing is published
    (every path in cluster 0, none congested) and both flow tables are swept, so the flow is new: looked up on its
    own port's path 5, it stays there: port unchanged, mark 0b00 (epoch 0). A mirror left at path 7 would send it
    on path 7 (selb-reroute takes a new flow's lookup path)."""
    params = _params()
    assert all(params[k] == v for k, v in HAND.items())
    tb = TB(dut, stalls=False, seed=10)
    await tb.settle()
    for cmd in stop_clock(100) + period(HAND_PERIODS[0]) + period(HAND_PERIODS[1]) + period(HAND_PERIODS[2]):
        await tb.control(cmd)
    await ClockCycles(dut.clk, 8)
    hot = ("10.0.0.1", "10.1.0.9", 0xC3A5, 0x000123)
    frames = [bytes(roce_data(*hot, n, opcode=RC_SEND_ONLY, payload_len=100)) for n in range(3)]
    l4 = 14 + 20
    errors = []
    for n, f in enumerate(frames):          # one at a time: each frame's path is in the mirror before the next
        tb.send(f)
        got = bytes((await tb.recv(f"frame {n} before the reset")).tdata)
        if int.from_bytes(got[l4:l4 + 2], "big") != (0xC3A5 if n == 0 else 0xC3A7):
            errors.append(f"frame {n} before the reset: port {got[l4:l4 + 2].hex()} (the hand-worked reroute)")
    # The tail's frame writes the old path 5 into the mirror, so the next frame is looked up on 5 and is stale
    # (it leaves on 7 and writes 7); the third is looked up on 7: not stale. One stale frame.
    stale = await tb.axil.read_dword(0x40 + 4 * 9)
    if stale != 1:
        errors.append(f"{stale} stale frames before the reset, by hand 1: the mirror did not take the new path")
    await tb.settle()
    await ClockCycles(dut.clk, 8)
    for cmd in stop_clock(100):
        await tb.control(cmd)
    after = bytes(roce_data(*hot, 9, opcode=RC_SEND_ONLY, payload_len=100))
    tb.send(after)
    got = bytes((await tb.recv("the frame after the reset")).tdata)
    if int.from_bytes(got[l4:l4 + 2], "big") != 0xC3A5:
        errors.append(f"after the reset the flow left with port {got[l4:l4 + 2].hex()}, not c3a5: the mirror or the "
                      "flow table kept its path")
    if _bth4(got, l4) & 3 != 0:
        errors.append(f"after the reset the mark is {_bth4(got, l4) & 3:#04b}, not 0b00")
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(N_COUNTERS)]
    if counters[6:10] != [1, 0, 0, 0]:
        errors.append(f"selb-reroute's counters after the reset and one frame: {counters[6:10]}, not [1, 0, 0, 0]")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def bench(dut):
    """``lbpipe bench selb-tx-wire``: per size of ``LBPIPE_BENCH_SIZES``, one frame alone then 48 back to back, all
    SELB data frames of two flows (one on a congested path), every output checked against the golden model; beats
    accepted per clock and first-beat latency to ``LBPIPE_BENCH_OUT``."""
    params = _params()
    tb = TB(dut, stalls=False, seed=1)
    await tb.settle()
    model = SelbTxWireModel(**params)
    await tb.program(model, program(random.Random(4), **params))
    psn = 0

    def make_frame(size, k):
        nonlocal psn
        psn += 1
        return sized_data(size, "10.0.0.1", "10.0.0.2" if psn % 2 else "10.0.0.3", 0xC005,
                          0x123 if psn % 2 else 0x77, psn)
    results = await tb.size_bench(model, make_frame, latency=True)
    assert model.stats()[6] == 49 * len(results)          # every frame given to selb-reroute
