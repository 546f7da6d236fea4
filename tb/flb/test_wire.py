"""cocotb testbench of FLB's source edge switch in the wire (parser -> flb-isolate -> mask filter -> flb-route ->
deparser).

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.flb.wire.FlbTxWire`, parameters in
``LBPIPE_PARAMS`` (JSON). Every output frame is compared with the golden model and every RoCEv2 frame's ICRC is
checked with ``tb/lib/packets.py``'s :func:`icrc` (computed from the frame's bytes). :func:`route_by_hand` and
:func:`reset_sweeps_the_sets` predict the frames from hand-worked decisions, without the golden model; flow indices
come from ``tb/lib/packets.py``'s own CRC-16 (:func:`flow_hash`).

The clock is stopped in every test (``ctl`` table 48), so the decisions do not depend on the cycle.
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge

from lbpipe.sim.flb.wire import FlbTxWireModel
from lbpipe.tb.lib.harness import AxisBench
from lbpipe.tb.lib.packets import RC_SEND_ONLY, flow_hash, icrc, mixed_roce_frames, roce_data, sized_data

BEAT = 64
# The wire's control map, from docs/flb_tx_wire.md.
DELAY, CLOCK, CNM, MEAS = 0, 48, 49, 50
#: Counters: flb-isolate 0-7 (isolated packets, congestion CNMs, release CNMs, timeouts, full, forged, stale,
#: rejected), deparser 8-10, not FLB 11, no route 12, set updates 13, samples 14, piggybacks 15 (the datasheet's).
N_COUNTERS = 16
#: Sampling off (table 48 index 2 = 0): the tests of the routing alone, whose frames change only in the port.
SAMPLING_OFF = {"table": CLOCK, "index": 2, "data": 0}


def _params():
    return json.loads(os.environ["LBPIPE_PARAMS"])


def _bits(n):
    return max(1, (n - 1).bit_length())


def stop_clock(at=0):
    return [{"table": CLOCK, "index": 1, "data": 0}, {"table": CLOCK, "index": 0, "data": at}]


def delay_cmd(dest, path, delay):
    return {"table": DELAY, "index": dest << 4 | path, "data": delay}


def meas_cmd(edge, path, delay):
    """Table 50, as the datasheet packs it: index the edge; data the delay in bits 0-15, the path 16-19."""
    return {"table": MEAS, "index": edge, "data": delay | path << 16}


def cnm_cmd(flow, dest, cp, n, cong):
    """Table 49, packed as the datasheet says: index the flow; data dest bits 0-15, cp 16-23, n 24-27, cong 28."""
    return {"table": CNM, "index": flow, "data": dest | cp << 16 | n << 24 | cong << 28}


def flows_for(rng, n_dests, dest_shift, count=8, *, source=False):
    """(src, dst, sport, dqpn) of ``count`` flows over IPv4, destinations spread over the edges (and one beyond
    ``n_dests`` when the field has room), one over IPv6; with ``source``, the edges in the source addresses instead
    (to 10.0.0.9: flb-rx-wire's source edges)."""
    flows = []
    for k in range(count):
        if k == 3:
            flows.append(("fd00::1", f"fd00::{k + 2}", rng.randrange(1 << 16), rng.randrange(1 << 24)))
            continue
        dest = rng.randrange(1 << _bits(n_dests))
        addr = (10 << 24) | (dest << dest_shift) | rng.randrange(1, 1 << min(dest_shift, 8)) if dest_shift else \
            (10 << 24) | dest
        edge_ip = ".".join(str(addr >> s & 255) for s in (24, 16, 8, 0))
        ends = (edge_ip, "10.0.0.9") if source else ("10.0.0.1", edge_ip)
        flows.append((*ends, rng.randrange(1 << 16), rng.randrange(1 << 24)))
    return flows


def flow_index(flow, n_flows):
    src, dst, _, dqpn = flow
    return flow_hash(src, dst, dqpn) % n_flows


def dest_of(flow, params):
    """The destination edge switch the datasheet's rule gives an IPv4 flow: ``n_dests``' bits of the destination
    address from ``dest_shift`` (None over IPv6)."""
    if ":" in flow[1]:
        return None
    addr = int.from_bytes(bytes(int(x) for x in flow[1].split(".")), "big")
    return addr >> params["dest_shift"] & ((1 << _bits(params["n_dests"])) - 1)


def program_for_flows(rng, flows, params):
    """The clock stopped at a random time; random delays for every (destination, path); congestion CNMs for three
    of the flows (each naming the flow's own destination, at random congestion points), then a release of the third
    and a forged CNM (``n`` 0) for the first."""
    cmds = stop_clock(rng.randrange(1 << 12))
    for d in range(params["n_dests"]):
        for p in range(params["n_paths"]):
            cmds.append(delay_cmd(d, p, rng.randrange(min(1 << params["delay_bits"], 400))))
    picked = rng.sample(flows, 3)
    for f in picked:
        dest = dest_of(f, params)
        cmds.append(cnm_cmd(flow_index(f, params["n_flows"]), rng.randrange(params["n_dests"]) if dest is None
                            else dest, rng.randrange(params["n_ports"]), rng.randrange(1, 5), 1))
    third = dest_of(picked[2], params)
    cmds.append(cnm_cmd(flow_index(picked[2], params["n_flows"]), third or 0, 0, 0, 0))
    cmds.append(cnm_cmd(flow_index(picked[0], params["n_flows"]), 0, 0, 0, 1))
    cmds += measurements(rng, params)
    return cmds


def measurements(rng, params, count=6):
    """Table-50 measurements to piggyback: random edges (one beyond ``n_dests`` when the field has room), paths and
    16-bit delays; some edges twice (the newer is carried)."""
    edges = 1 << _bits(params["n_dests"])
    return [meas_cmd(rng.randrange(edges), rng.randrange(1 << _bits(params["n_paths"])), rng.randrange(1 << 16))
            for _ in range(count)]


def frames_for(rng, count, flows, sizes=None):
    """RoCEv2 frames of the flows (data of many sizes, VLAN, ACKs, CNPs: all FLB traffic), and frames that are not
    FLB traffic: data with a non-zero UDP checksum, non-RoCE, a runt (:func:`mixed_roce_frames`); one frame in
    twenty of 100 bytes or more cut short by 1 to 40 bytes (its headers then claim more than it holds)."""
    frames = mixed_roce_frames(rng, count, flows, sizes, shares=(0.7, 0.76, 0.84, 0.9, 0.98))
    return [f[:len(f) - rng.randrange(1, 41)] if len(f) >= 100 and rng.random() < 0.05 else f for f in frames]


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace flb-tx-wire``: :func:`program_for_flows`'s commands (clock stopped, delays, CNMs) and
    ``n_frames`` frames of :func:`frames_for`."""
    rng = random.Random(seed)
    flows = flows_for(rng, params["n_dests"], params["dest_shift"])
    return program_for_flows(rng, flows, params), frames_for(rng, n_frames, flows)


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True)
        for port in ("cnm", "dly", "meas"):
            getattr(dut, f"{port}_valid").value = 0
            getattr(dut, f"{port}_payload").value = 0

    async def settle(self):
        """Reset, then flb-route's and the filter's sweeps."""
        await self.reset()
        await ClockCycles(self.dut.clk, min(_params()["n_flows"], 4096) + 64)

    async def _put(self, port, value):
        getattr(self.dut, f"{port}_payload").value = value
        getattr(self.dut, f"{port}_valid").value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if int(getattr(self.dut, f"{port}_ready").value):
                break
        getattr(self.dut, f"{port}_valid").value = 0

    async def cnm(self, flow, dest, cp, n, cong):
        """One item on ``cnm`` (flow, dest, cp, n, cong; first field lowest)."""
        p = _params()
        fb, db, cb = _bits(p["n_flows"]), _bits(p["n_dests"]), _bits(p["n_ports"])
        await self._put("cnm", flow | dest << fb | cp << (fb + db) | n << (fb + db + cb) | cong << (fb + db + cb + 4))

    async def delay(self, dest, path, delay):
        """One item on ``dly`` (dest, path, delay; first field lowest)."""
        p = _params()
        db, pb = _bits(p["n_dests"]), _bits(p["n_paths"])
        await self._put("dly", dest | path << db | delay << (db + pb))

    async def measurement(self, edge, path, delay):
        """One item on ``meas`` (edge, path, delay; first field lowest), each value cut to its field (the delay's is
        min(delay_bits, 16) bits wide)."""
        p = _params()
        db, pb = _bits(p["n_dests"]), _bits(p["n_paths"])
        delay %= 1 << min(p["delay_bits"], 16)
        await self._put("meas", edge % (1 << db) | (path % (1 << pb)) << db | delay << (db + pb))

    async def counters(self):
        return [await self.axil.read_dword(0x40 + 4 * i) for i in range(N_COUNTERS)]

    async def check_counters(self, model):
        counters = await self.counters()
        want = model.stats()
        return [] if counters == want else [f"counters {counters}, golden model {want}"]


async def _setup(dut, *, stalls, seed):
    params = _params()
    tb = TB(dut, stalls=stalls, seed=seed)
    await tb.settle()
    model = FlbTxWireModel(**params)
    flows = flows_for(tb.rng, params["n_dests"], params["dest_shift"])
    await tb.program(model, program_for_flows(tb.rng, flows, params))
    return tb, model, params, flows


def _moved(model, frames, expected):
    """Frames of FLB traffic whose source port changed (the trace checks a decision)."""
    return sum(1 for f, e in zip(frames, expected) if e is not None and f != e)


@cocotb.test()
async def frames_with_stalls(dut):
    """Mixed traffic with random idle input and output back-pressure after random delays and CNMs: every frame and
    counter as the golden model."""
    tb, model, _, flows = await _setup(dut, stalls=True, seed=1)
    frames = frames_for(tb.rng, 150, flows)
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected, inputs=frames)
    errors += await tb.check_counters(model)
    assert _moved(model, frames, expected) > 0, "no frame's port changed: the trace checks no decision"
    assert model.stats()[14] > 0 and model.stats()[15] > 0, f"no sample or no piggyback: {model.stats()}"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def samples_over_time(dut):
    """Eight bursts of frames with stalls (every other one of one-beat frames), the stopped clock moved between them
    by 0 to twice the sampling period (and once across its wrap), new measurements and once a new period between
    bursts: every frame (its marks) and counter as the golden model."""
    tb, model, params, flows = await _setup(dut, stalls=True, seed=11)
    rng = tb.rng
    mod = 1 << params["time_bits"]
    now = rng.randrange(mod)
    period = params.get("sample_ticks", 64)
    errors = []
    for burst in range(8):
        step = mod - now + rng.randrange(3) if burst == 5 else rng.randrange(2 * period + 1)
        now = (now + step) % mod
        cmds = [{"table": CLOCK, "index": 0, "data": now}] + measurements(rng, params, 3)
        if burst == 3:
            period = rng.randrange(1, 2 * period + 2)
            cmds.append({"table": CLOCK, "index": 2, "data": period})
        await tb.program(model, cmds)
        # every other burst one-beat frames: a pair's frames then reach the sampler in consecutive clocks
        frames = frames_for(rng, 30, flows, sizes=[0] if burst % 2 else None)
        expected = [model.process(f) for f in frames]
        for f in frames:
            tb.send(f)
        errors += await tb.check_frames(expected, inputs=frames)
    errors += await tb.check_counters(model)
    assert model.stats()[14] > len(flows), f"too few samples: {model.stats()}"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, no stalls: one beat accepted per clock, every frame as the golden model."""
    tb, model, _, flows = await _setup(dut, stalls=False, seed=2)
    frames = frames_for(tb.rng, 100, flows, sizes=[0, 1, 3, 50, 200, 960, 1400, 4000, 8000])
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
async def ports_cnm_and_dly(dut):
    """The delays on ``dly``, the CNMs on ``cnm`` and the measurements on ``meas`` instead of ``ctl``, then mixed
    traffic with stalls, with every
    delay written again (its own value) on ``dly`` while the frames flow; then new delays on ``dly`` and a new flow
    to each destination: every frame and counter as the golden model fed the same items."""
    params = _params()
    tb = TB(dut, stalls=True, seed=3)
    await tb.settle()
    model = FlbTxWireModel(**params)
    flows = flows_for(tb.rng, params["n_dests"], params["dest_shift"])
    table = {}
    for cmd in program_for_flows(tb.rng, flows, params):
        if cmd["table"] == CLOCK:
            await tb.control(cmd)
            model.control(cmd)
        elif cmd["table"] == DELAY:
            item = {"dest": cmd["index"] >> 4, "path": cmd["index"] & 15, "delay": cmd["data"]}
            table[item["dest"], item["path"]] = item["delay"]
            await tb.delay(**item)
            model.delay(item)
        elif cmd["table"] == MEAS:
            item = {"edge": cmd["index"], "path": cmd["data"] >> 16 & 15, "delay": cmd["data"] & 0xFFFF}
            await tb.measurement(**item)
            model.measurement(item)
        else:
            d = cmd["data"]
            item = {"flow": cmd["index"], "dest": d & 0xFFFF, "cp": d >> 16 & 0xFF, "n": d >> 24 & 15,
                    "cong": d >> 28 & 1}
            await tb.cnm(**item)
            model.cnm(item)
    await ClockCycles(dut.clk, 8)
    frames = frames_for(tb.rng, 80, flows)
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    # while the frames flow: every delay written again with its value (no decision can change with their clock)
    for (dest, path), value in sorted(table.items()):
        await tb.delay(dest, path, value)
    errors = await tb.check_frames(expected, inputs=frames)
    # then new values, and a new flow per destination: a delay lost or corrupted on the way shows in its choice
    for (dest, path), value in sorted(table.items()):
        await tb.delay(dest, path, (value * 7 + 13) % 400)
        model.delay({"dest": dest, "path": path, "delay": (value * 7 + 13) % 400})
    await ClockCycles(dut.clk, 8)
    for d in range(params["n_dests"]):
        frame = bytes(roce_data("10.0.0.9", f"10.0.{d}.99", 0x9990, 0x999, 1, opcode=RC_SEND_ONLY, payload_len=8))
        want = model.process(frame)
        tb.send(frame)
        if bytes((await tb.recv(f"new flow to destination {d}")).tdata) != want:
            errors.append(f"new flow to destination {d} after the delays on dly: differs from the golden model")
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def delay_waits_for_the_set(dut):
    """A delay from ``dly`` and a packet's changed set want the update register UR in the same clock: the set goes
    in (it must reach flb-route with its packet), the delay waits and follows, and neither is lost. Set up from a
    reset (flb-route then sweeps its flow table for a while, taking nothing): G's packet (destination 1's first set
    since the reset) is watched through the filter's input slice and the delay (destination 1, path 0, 1 tick) is
    offered so that it reaches ``dly``'s slice output in the clock G's packet is in U0 (checked, not assumed).
    Hand-worked with the delays of :data:`HAND_DELAYS` (kept across the reset): G is new and decided before the
    delay lands, so it takes the fastest path, 3 (5 ticks); then a new flow H takes path 0 (1 tick). A delay taken
    from ``dly`` in the set's clock is dropped: path 0 stays at 50 and H takes path 3."""
    params = _params()
    assert all(params[k] == v for k, v in HAND.items())
    tb = TB(dut, stalls=False, seed=12)
    await tb.settle()
    await _hand_program(tb)
    f, g, h = _hand_flows(params["n_flows"])
    block = dut.block
    await tb.reset()
    tb.send(bytes(roce_data(*g, 1, opcode=RC_SEND_ONLY, payload_len=0)))
    for _ in range(200):
        await FallingEdge(dut.clk)
        if int(block.isolate_out_v.value):
            break
    db, pb = _bits(params["n_dests"]), _bits(params["n_paths"])
    assert int(dut.dly_ready.value), "dly's slice is not ready"
    dut.dly_payload.value = 1 | 0 << db | 1 << (db + pb)
    dut.dly_valid.value = 1
    await RisingEdge(dut.clk)               # taken on this edge (ready was 1): offered exactly once
    dut.dly_valid.value = 0
    await FallingEdge(dut.clk)
    met = int(block.u0_valid.value) and int(block.u0_need.value) and int(block.dly_v.value)
    assert met, "the delay and G's set did not meet in one clock: the test could not set up the case"
    errors = []
    got = bytes((await tb.recv("G after the reset")).tdata)
    if _port(got) & 3 != 3:
        errors.append(f"G left on path {_port(got) & 3}, by hand 3 (decided before the delay landed)")
    c = await tb.counters()
    if c[13] != 1:
        errors.append(f"{c[13]} set updates, by hand 1 (G's)")
    tb.send(bytes(roce_data(*h, 2, opcode=RC_SEND_ONLY, payload_len=0)))
    got = bytes((await tb.recv("H")).tdata)
    if _port(got) & 3 != 0:
        errors.append(f"H left on path {_port(got) & 3}, by hand 0: the delay of path 0 was lost")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def commands_beside_frames(dut):
    """Table-0 commands written while frames flow at line rate (not drained first, as the harness does for a trace):
    each takes one of flb-route's packet clocks, so flb-route refuses the filter's offer for a clock and O's spare
    copy catches what moved meanwhile. The commands rewrite the delays already programmed (no decision changes):
    every frame and counter as the golden model."""
    tb, model, params, flows = await _setup(dut, stalls=False, seed=13)
    frames = frames_for(tb.rng, 120, flows, sizes=[0, 0, 1, 3, 50])
    expected = [model.process(f) for f in frames]

    async def rewrite():
        for _ in range(3):
            for d in range(params["n_dests"]):
                for p in range(params["n_paths"]):
                    await tb.control(delay_cmd(d, p, model.route.delay[d][p]))
    writer = cocotb.start_soon(rewrite())
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected, inputs=frames)
    await writer
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def replay(dut):
    """``lbpipe replay flb-tx-wire IN.pcap --engine rtl``."""
    tb = TB(dut, stalls=False, seed=1)
    await tb.settle()
    await tb.replay()


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight, then the stopped clock, delays and CNMs again: every frame after it as the
    golden model (reset clears flb-isolate, flb-route's flow table and the filter; flb-route's delays and sets stay)."""
    tb, model, params, flows = await _setup(dut, stalls=False, seed=5)
    await tb.reset_in_flight(frames_for(tb.rng, 30, flows), 30 + tb.rng.randrange(80))
    await ClockCycles(dut.clk, min(params["n_flows"], 4096) + 64)
    model.reset()
    await tb.program(model, program_for_flows(tb.rng, flows, params))
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
    """``m_axis`` held for 3,000 clocks while 200 short frames come in, then released: the stall fills the deparser
    and the side FIFO and reaches ``s_axis``; afterwards every frame and counter as the golden model."""
    tb, model, _, flows = await _setup(dut, stalls=False, seed=6)
    frames = frames_for(tb.rng, 200, flows, sizes=[0, 3, 16, 40])
    expected = [model.process(f) for f in frames]
    errors = await tb.stall_then_check(frames, expected)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


# -- hand-worked ------------------------------------------------------------------------------------------------------
# 4 paths, 3 destinations (2 bits: destination 3 is out of range), the clock stopped at 100. Destination 1's delays:
# path 0 50, path 1 20, path 2 30, path 3 5 ticks. Flows to 10.0.1.x are destination 1 (dest_shift 8).
#  1. G's first packet: new, the fastest path, 3 (nothing isolated).          port low bits 3
#  2. CNM: F congested (point 0, n 1): k = ceil(1/1) = 1 isolation path, the highest: {3}.
#  3. F's packet: isolated, rank 0: path 4 - 1 - 0 = 3.                         port low bits 3
#  4. H's first packet: new, the fastest outside {3}: path 1 (20).             port low bits 1
#  5. G's packet: existing on path 3, now isolated; the clock is stopped, gap 0, so the window bound is gap - 1 =
#     -1 and only a slower path cannot overtake: all of 0, 1, 2 are slower than 5 ticks; the fastest, path 1.
#                                                                              port low bits 1
#  6. CNM: F released (non-congestion): nothing isolated.
#  7. F's packet: flb-route recorded F's path as 3 (its isolated packet 3 took the isolation path, which the wire
#     forces on flb-route); not isolated now; window 0 < d(3) - d(q) <= -1: none, F stays on path 3.
#                                                                              port low bits 3
#  8. A frame to destination 3 (out of range): unchanged, "no route".
#  9. A data frame with a non-zero UDP checksum: not FLB, unchanged.
# Set updates: packet 1 sends destination 1's set (first since reset, 0), packet 3 sends {3}, packet 7 sends {}:
# 3. flb-isolate: 1 isolated packet, 1 congestion CNM, 1 release.
HAND = dict(n_paths=4, n_dests=3, dest_shift=8)
HAND_DELAYS = {0: 50, 1: 20, 2: 30, 3: 5}


def _hand_flows(n_flows):
    f = ("10.0.0.1", "10.0.1.7", 0x1230, 0x000111)
    g = ("10.0.0.2", "10.0.1.8", 0x4560, 0x000222)
    h = ("10.0.0.3", "10.0.1.9", 0x7890, 0x000333)
    idx = [flow_index(x, n_flows) for x in (f, g, h)]
    assert len(set(idx)) == 3, "the three hand-worked flows share a flow index"
    return f, g, h


async def _hand_program(tb):
    for cmd in stop_clock(100) + [SAMPLING_OFF] + [delay_cmd(1, p, d) for p, d in HAND_DELAYS.items()]:
        await tb.control(cmd)
    await ClockCycles(tb.dut.clk, 8)


def _port(frame):
    l4 = 14 + 20
    return int.from_bytes(frame[l4:l4 + 2], "big")


@cocotb.test()
async def route_by_hand(dut):
    params = _params()
    assert all(params[k] == v for k, v in HAND.items()), f"route_by_hand needs {HAND}"
    nf = params["n_flows"]
    tb = TB(dut, stalls=False, seed=9)
    await tb.settle()
    await _hand_program(tb)
    f, g, h = _hand_flows(nf)
    errors = []

    async def one(flow, n, want_low, what):
        frame = bytes(roce_data(*flow, n, opcode=RC_SEND_ONLY, payload_len=32 + 100 * n))
        tb.send(frame)
        got = bytes((await tb.recv(what)).tdata)
        want = (flow[2] & ~3) | want_low if want_low is not None else flow[2]
        if _port(got) != want:
            errors.append(f"{what}: source port {_port(got):#06x}, by hand {want:#06x}")
        if got[-4:] != icrc(got):
            errors.append(f"{what}: ICRC {got[-4:].hex()} is not the frame's {icrc(got).hex()}")
        if got[:34] != frame[:34] or got[36:-4] != frame[36:-4]:
            errors.append(f"{what}: bytes other than the port and the ICRC changed")

    await one(g, 1, 3, "1: G new")
    await tb.control(cnm_cmd(flow_index(f, nf), 1, 0, 1, 1))
    await one(f, 3, 3, "3: F isolated")
    await one(h, 4, 1, "4: H new")
    await one(g, 5, 1, "5: G off the isolated path")
    await tb.control(cnm_cmd(flow_index(f, nf), 1, 0, 1, 0))
    await one(f, 7, 3, "7: F released, stays on its isolation path")
    await one(("10.0.0.1", "10.0.3.7", 0x1233, 0x444), 8, None, "8: destination 3")
    csum = bytes(roce_data(*g, 9, payload_len=8, udp_chksum=0x1234))
    tb.send(csum)
    if bytes((await tb.recv("9: checksum")).tdata) != csum:
        errors.append("9: a frame with a UDP checksum changed")
    c = await tb.counters()
    if c[0:3] != [1, 1, 1] or c[11:14] != [1, 1, 3]:
        errors.append(f"counters {c}: by hand flb-isolate 1 isolated packet, 1 congestion, 1 release; 1 not FLB, "
                      "1 with no route, 3 set updates")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def release_from_a_slow_isolation_path(dut):
    """Hand-worked (4 paths, the clock stopped at 100; destination 1's delays 50, 5, 30, 60: the isolation path 3 is
    the slowest): F new on path 1; a congestion CNM for F (n 1): its packet on 3; a release CNM: its next packet,
    gap 0, stays on 3 (flb-route recorded the isolation path; any faster path could overtake the isolated packet);
    the clock moved to 200: gap 100, the window 0 < 60 - d(q) <= 99 holds 0, 1, 2: the fastest, 1."""
    params = _params()
    assert all(params[k] == v for k, v in HAND.items()), f"this test needs {HAND}"
    nf = params["n_flows"]
    tb = TB(dut, stalls=False, seed=10)
    await tb.settle()
    for cmd in stop_clock(100) + [SAMPLING_OFF] + [delay_cmd(1, p, d) for p, d in {0: 50, 1: 5, 2: 30, 3: 60}.items()]:
        await tb.control(cmd)
    await ClockCycles(dut.clk, 8)
    f = _hand_flows(nf)[0]
    lows = []

    async def one(n):
        tb.send(bytes(roce_data(*f, n, opcode=RC_SEND_ONLY, payload_len=40)))
        lows.append(_port(bytes((await tb.recv(f"F's packet {n}")).tdata)) & 3)
    await one(1)
    await tb.control(cnm_cmd(flow_index(f, nf), 1, 0, 1, 1))
    await one(2)
    await tb.control(cnm_cmd(flow_index(f, nf), 1, 0, 1, 0))
    await one(3)
    for cmd in stop_clock(200):
        await tb.control(cmd)
    await ClockCycles(dut.clk, 8)
    await one(4)
    assert lows == [1, 3, 3, 1], f"paths {lows}, by hand [1, 3, 3, 1]"


@cocotb.test()
async def reset_sweeps_the_sets(dut):
    """The filter's memory is swept at reset, so the first packet of each destination after a reset sends its set
    again (flb-route keeps its sets across a reset and flb-isolate does not; a reset that lands between the filter's
    write and flb-route's take would otherwise leave the two disagreeing for good). G's two back-to-back packets
    (destination 1, empty set) send one set update; after a reset the counters are 0 and G's next packet sends one
    again (STATUS_13 = 1). A filter that kept its memory would still hold destination 1's empty set and send nothing
    (STATUS_13 = 0)."""
    params = _params()
    assert all(params[k] == v for k, v in HAND.items())
    tb = TB(dut, stalls=False, seed=10)
    await tb.settle()
    await _hand_program(tb)
    f, g, h = _hand_flows(params["n_flows"])
    errors = []
    # two one-beat frames back to back: their items meet in the filter in consecutive clocks, so the second reads
    # the set the first wrote in the same clock (a read not transparent to the write would send the set twice)
    for n in range(2):
        tb.send(bytes(roce_data(*g, n, opcode=RC_SEND_ONLY, payload_len=0)))
    for n in range(2):
        got = bytes((await tb.recv(f"G {n} before the reset")).tdata)
        if _port(got) & 3 != 3:
            errors.append(f"G {n} before the reset left on path {_port(got) & 3}, not 3")
    before = (await tb.counters())[13]
    if before != 1:
        errors.append(f"{before} set updates for two back-to-back packets of one destination, by hand 1")
    await tb.settle()
    await _hand_program(tb)
    if (await tb.counters())[13] != 0:
        errors.append("the set-update count is not 0 after the reset")
    tb.send(bytes(roce_data(*g, 5, opcode=RC_SEND_ONLY, payload_len=64)))
    got = bytes((await tb.recv("G after the reset")).tdata)
    after = (await tb.counters())[13]
    if after != 1:
        errors.append(f"after the reset G's packet sent {after} set updates, not 1: the filter kept its memory")
    if _port(got) & 3 != 3:
        errors.append(f"G after the reset left on path {_port(got) & 3}: new again (flow table swept), the fastest "
                      "is 3")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def clock_by_hand(dut):
    """``now`` reaches both blocks: the clock set through table 48 between frames (stopped), so each gap is known.
    Destination 1, delays 50, 20, 30, 5; flb-route's timeout and flb-isolate's release 1,000 ticks (the test's
    parameters). Flow K:
      now 100: new, the fastest, path 3.              Then path 3's delay is raised to 60.
      now 100: gap 0, the window d(3) - d(q) <= -1 holds for none: stays on 3.
      now 200: gap 100: every q within 60 - d(q) <= 99: the fastest of 0, 1, 2: path 1.
               Then path 1's delay is raised to 3,000 (the others 50, 30, 60).
      now 300: gap 100: no q within 3,000 - d(q) <= 99: stays on 1.
      now 1,299: gap 999 (< timeout): no q within 998: stays on 1.
      now 2,299: gap 1,000 (>= timeout): new again: the fastest, path 2 (30).
    Flow J, isolated by a CNM at now 2,299 (n 1: the isolation path 3): its packet at 2,299 takes path 3; at 3,299
    (1,000 ticks idle, >= release) flb-isolate has released it (one timeout) and flb-route, J idle as long, takes it
    as new: path 2. Flow W across the clock's wrap (below). A ``now`` not reaching flb-route (every gap 0) keeps K on
    path 3; timeouts not working keep K on 1 and J on 3."""
    params = _params()
    assert all(params[k] == v for k, v in HAND.items()) and params["timeout"] == params["release"] == 1000
    nf = params["n_flows"]
    tb = TB(dut, stalls=False, seed=14)
    await tb.settle()
    await _hand_program(tb)
    k = ("10.0.0.4", "10.0.1.20", 0x2220, 0x000444)
    j = ("10.0.0.5", "10.0.1.21", 0x3330, 0x000555)
    assert flow_index(k, nf) != flow_index(j, nf)
    errors = []
    steps = [(100, None, k, 3, "K new"), (100, (3, 60), k, 3, "K gap 0"), (200, None, k, 1, "K gap 100"),
             (300, (1, 3000), k, 1, "K gap 100, none within"), (1299, None, k, 1, "K gap 999"),
             (2299, None, k, 2, "K gap 1,000: new")]

    async def one(flow, n, at, want, what):
        """The clock set to ``at``, one frame of ``flow``: its path (the port's low bits) must be ``want``."""
        await tb.control({"table": CLOCK, "index": 0, "data": at})
        tb.send(bytes(roce_data(*flow, n, opcode=RC_SEND_ONLY, payload_len=16)))
        got = bytes((await tb.recv(what)).tdata)
        if _port(got) & 3 != want:
            errors.append(f"{what} (now {at}): path {_port(got) & 3}, by hand {want}")

    for n, (at, delay, flow, want, what) in enumerate(steps):
        if delay is not None:
            await tb.control(delay_cmd(1, *delay))
        await one(flow, n, at, want, what)
    await tb.control(cnm_cmd(flow_index(j, nf), 1, 0, 1, 1))
    for n, (at, want, what) in enumerate([(2299, 3, "J isolated"), (3299, 2, "J released by the timeout")]):
        await one(j, n, at, want, what)
    # across the wrap of the 12-bit clock: W new at 4,000 (delays 50, 3,000, 30, 60: path 2); then path 2 at 100
    # and path 0 at 0; at now 4 the gap is 100 (not 4 - 4,000): within the window 100 - d(q) <= 99 only path 3
    # (40): W moves to 3. A gap taken without the wrap would be over the timeout: new, the fastest, path 0.
    w = ("10.0.0.6", "10.0.1.22", 0x4440, 0x000666)
    for n, (at, delays, want, what) in enumerate([(4000, (), 2, "W new before the wrap"),
                                                  (4, ((2, 100), (0, 0)), 3, "W gap 100 across the wrap")]):
        for delay in delays:
            await tb.control(delay_cmd(1, *delay))
        await one(w, n, at, want, what)
    c = await tb.counters()
    if c[0:4] != [1, 1, 0, 1]:
        errors.append(f"flb-isolate's counters {c[0:4]}, by hand [1 isolated, 1 congestion, 0 release, 1 timeout]")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def cnm_with_a_running_clock(dut):
    """The clock running (one tick a clock): F's packet, and a congestion CNM for F offered on ``cnm`` in the clock
    after F's item enters the wire's first stage, so the CNM and the packet reach flb-isolate about together. Both
    are stamped as flb-isolate takes them, so whichever goes first, F stays isolated: its next packet takes the
    isolation path 3 and nothing times out (destination 1's delays 50, 20, 30, 60: F is new on path 1, and path 3 is
    the slowest, so only isolation sends it there). A CNM stamped before the packet it overtakes would look 4,095
    ticks old to it and be expired at once (flb-isolate's age is modular): F not isolated, one timeout."""
    params = _params()
    assert all(params[k] == v for k, v in HAND.items())
    nf = params["n_flows"]
    tb = TB(dut, stalls=False, seed=15)
    await tb.settle()
    await _hand_program(tb)
    await tb.control(delay_cmd(1, 3, 60))
    f, g, h = _hand_flows(nf)
    await tb.control({"table": CLOCK, "index": 1, "data": 1})
    block = dut.block
    tb.send(bytes(roce_data(*f, 1, opcode=RC_SEND_ONLY, payload_len=0)))
    for _ in range(200):
        await FallingEdge(dut.clk)
        if int(block.f0_valid.value):
            break
    # offered now (mid-clock), the CNM is in its slice when the packet is in flb-isolate's input slice: flb-isolate
    # is offered both in the same clock and takes the CNM first
    await tb.cnm(flow_index(f, nf), 1, 0, 1, 1)
    first = bytes((await tb.recv("F's first packet")).tdata)
    tb.send(bytes(roce_data(*f, 2, opcode=RC_SEND_ONLY, payload_len=0)))
    second = bytes((await tb.recv("F's second packet")).tdata)
    await tb.control({"table": CLOCK, "index": 1, "data": 0})
    errors = []
    if _port(first) & 3 not in (1, 3):
        errors.append(f"F's first packet on path {_port(first) & 3}: by hand 1 (before the CNM) or 3 (after)")
    if _port(second) & 3 != 3:
        errors.append(f"F's second packet on path {_port(second) & 3}, not the isolation path 3")
    c = await tb.counters()
    if c[1] != 1 or c[3] != 0:
        errors.append(f"flb-isolate's counters {c[0:4]}: by hand 1 congestion CNM and no timeout")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def measurements_race_frames(dut):
    """Sampling off; per round, one-beat frames to one destination back to back while measurements to it arrive on
    ``meas`` every clock, with rising delays, until a random clock; then one more frame. By the datasheet's rule (the
    newest waiting measurement rides on the next frame, once; one arriving in the clock a frame takes the slot is
    newer and stays): the delays the frames carry rise, and the last measurement given is carried exactly once
    (no golden model; a rule that let the frame's take win over that clock's measurement loses it)."""
    params = _params()
    tb = TB(dut, stalls=False, seed=13)
    await tb.settle()
    await _hand_program(tb)                                 # sampling off, destination 1's delays
    l4 = 14 + 20
    mask = (1 << min(params["delay_bits"], 16)) - 1
    value, errors = 0, []
    for rnd in range(16):
        frames = [bytes(roce_data("10.0.0.1", "10.0.1.7", 0x1230, 0x111, (rnd << 6) + k, opcode=RC_SEND_ONLY,
                                  payload_len=0)) for k in range(40)]
        assert len(frames[0]) <= BEAT
        stop = tb.rng.randrange(25, 75)          # the frames reach the sampler about 30 clocks after they start
        for f in frames:
            tb.send(f)
        for _ in range(stop):
            value = (value + 1) & mask or 1
            await tb.measurement(1, value & 3, value)
        last = value
        got = [bytes((await tb.recv(f"round {rnd} frame {k}")).tdata) for k in range(len(frames))]
        tb.send(frames[0])
        got.append(bytes((await tb.recv(f"round {rnd} last frame")).tdata))
        carried = [int.from_bytes(g[l4 + 6:l4 + 8], "big") for g in got if g[l4 + 12] & 0x10]
        if any(b <= a for a, b in zip(carried, carried[1:])):
            errors.append(f"round {rnd}: carried delays not rising: {carried}")
        if carried.count(last) != 1:
            errors.append(f"round {rnd}: the last measurement ({last}) carried {carried.count(last)} times")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def reset_forgets_samples(dut):
    """The sampler's memory is swept at reset (docs/flb_tx_wire.md): with the clock stopped at 100 and a period of 5,
    G's first frame is sampled (``S``, stamp 100), its second is not; after a reset, at the same tick, G's next frame
    is sampled again (a pair not sampled since reset). By hand."""
    tb = TB(dut, stalls=False, seed=14)
    l4 = 14 + 20
    g = ("10.0.0.2", "10.0.1.8", 0x4560, 0x000222)
    marks = []
    for phase in range(2):
        await tb.settle()
        for cmd in stop_clock(100) + [{"table": CLOCK, "index": 2, "data": 5}] + \
                [delay_cmd(1, p, d) for p, d in HAND_DELAYS.items()]:
            await tb.control(cmd)
        await ClockCycles(dut.clk, 8)
        for k in range(2 - phase):
            tb.send(bytes(roce_data(*g, 10 * phase + k, opcode=RC_SEND_ONLY, payload_len=0)))
            got = bytes((await tb.recv(f"phase {phase} frame {k}")).tdata)
            marks.append((got[l4 + 12] & 0x3F, int.from_bytes(got[l4 + 6:l4 + 8], "big")))
    assert marks == [(0x20, 100), (0, 0), (0x20, 100)], f"marks (byte 4 bits 5..0, checksum) {marks}"


@cocotb.test()
async def samples_with_a_running_clock(dut):
    """The clock running (one tick a clock), a sampling period of 2: three one-beat frames of one new pair back to
    back reach flb-isolate at ticks t, t + 1, t + 2 and the sampler in consecutive clocks. By the datasheet: the
    first is sampled (stamp t); the second is 1 tick after it (1 < 2, not sampled; its difference comes from the
    first frame's tick, forwarded, since the memory's read missed that write); the third is 2 ticks after the last
    sample (sampled, stamp t + 2). By hand, from the stamps the frames carry."""
    tb = TB(dut, stalls=False, seed=15)
    await tb.settle()
    await _hand_program(tb)
    for cmd in ({"table": CLOCK, "index": 2, "data": 2}, {"table": CLOCK, "index": 1, "data": 1}):
        await tb.control(cmd)
    await ClockCycles(dut.clk, 8)
    l4 = 14 + 20
    g = ("10.0.0.2", "10.0.1.8", 0x4560, 0x000222)
    for k in range(3):
        tb.send(bytes(roce_data(*g, k, opcode=RC_SEND_ONLY, payload_len=0)))
    got = [bytes((await tb.recv(f"frame {k}")).tdata) for k in range(3)]
    marks = [(f[l4 + 12] & 0x3F, int.from_bytes(f[l4 + 6:l4 + 8], "big")) for f in got]
    t = marks[0][1]
    mask = (1 << _params()["time_bits"]) - 1
    assert marks == [(0x20, t), (0, 0), (0x20, (t + 2) & mask)], f"marks (bits 5..0, checksum) {marks}"


@cocotb.test()
async def marks_by_hand(dut):
    """The hand-worked scenarios of ``tb/flb/tx_marks.py`` whose parameters are this build's, each from reset: its
    commands, measurements (on ``meas``) and frames in order, draining between steps except where a frame must
    follow the one before right behind it (a sampled pair's second frame, the sampler's read-after-write case);
    frames and the 16 counters as worked by hand (no golden model)."""
    from lbpipe.tb.flb.tx_marks import hand_scenarios
    params = _params()
    tb = TB(dut, stalls=False, seed=12)
    errors, ran = [], 0
    for sc in hand_scenarios():
        if sc.params != params:
            continue
        ran += 1
        await tb.settle()
        b2b = set(sc.back_to_back)
        steps = sc.steps
        k, i = 0, 0
        while i < len(steps):
            step = steps[i]
            if step[0] == "ctl":
                await tb.control(step[1])
                await ClockCycles(dut.clk, 8)
            elif step[0] == "meas":
                await tb.measurement(**step[1])
                await ClockCycles(dut.clk, 8)
            else:
                group = [step]
                while i + 1 < len(steps) and steps[i + 1][0] == "frame" and k + len(group) in b2b:
                    i += 1
                    group.append(steps[i])
                for _, frame, _, _ in group:
                    tb.send(frame)
                for _, _, want, note in group:
                    got = bytes((await tb.recv(f"{sc.name} frame {k}")).tdata)
                    if got != want:
                        at = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), len(got))
                        errors.append(f"{sc.name} frame {k} ({note}): differs from byte {at}: "
                                      f"{got[at:at + 4].hex()} by hand {want[at:at + 4].hex()}")
                    k += 1
            i += 1
        counters = await tb.counters()
        if counters != sc.stats:
            errors.append(f"{sc.name}: counters {counters}, by hand {sc.stats}")
    assert ran, f"no hand-worked scenario for {params}"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def bench(dut):
    """``lbpipe bench flb-tx-wire``: per size of ``LBPIPE_BENCH_SIZES``, one frame alone then 48 back to back, all
    FLB frames of two flows (one isolated), every output checked against the golden model; beats accepted per clock
    and first-beat latency to ``LBPIPE_BENCH_OUT``."""
    params = _params()
    tb = TB(dut, stalls=False, seed=1)
    await tb.settle()
    model = FlbTxWireModel(**params)
    cmds = stop_clock(100) + [delay_cmd(0, p, 10 * (params["n_paths"] - p)) for p in range(params["n_paths"])]
    iso = ("10.0.0.1", "10.0.0.3", 0xC005, 0x77)
    cmds.append(cnm_cmd(flow_index(iso, params["n_flows"]), 0, 0, 2, 1))
    await tb.program(model, cmds)
    psn = 0

    def make_frame(size, k):
        nonlocal psn
        psn += 1
        return sized_data(size, "10.0.0.1", "10.0.0.2" if psn % 2 else "10.0.0.3", 0xC005,
                          0x123 if psn % 2 else 0x77, psn)
    results = await tb.size_bench(model, make_frame, latency=True)
    assert results and model.stats()[0] > 0 and model.stats()[11] == 0   # an isolated flow; all FLB traffic
