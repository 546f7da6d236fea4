"""cocotb testbench of Themis-S in the wire (parser -> Themis-S -> deparser), against its golden model.

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.themis.wire.ThemisSWire`: ``s_axis_*`` and
``m_axis_*`` (cocotbext-axi AxiStreamSource/Sink) and ``s_axil_*`` (AxiLiteMaster, the PathMap). Frames come from
``tb/lib/packets.py``'s scapy builders; each output frame must equal the golden model's, bit for bit, and every RoCEv2
output frame must carry a correct ICRC.
"""

import os

import cocotb
from cocotb.triggers import ClockCycles

from lbpipe.sim.themis.wire import ThemisSWireModel
from lbpipe.tb.lib.packets import RC_RDMA_WRITE_MIDDLE, RC_SEND_ONLY, roce_ack, roce_cnp, roce_data, roce_nak, sized_data
from lbpipe.tb.lib.harness import AxisBench

BEAT = 64


def frames_for(rng, count, sizes=None):
    """RoCEv2 traffic of a few QPs (data of many sizes, ACKs, NAKs, CNPs, IPv6, VLAN, non-zero UDP checksums) and
    non-RoCE frames."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    flows = [("10.0.0.%d" % (1 + q), "10.0.1.%d" % (1 + q), 0xC000 + q, 0x100 + q, rng.randrange(1 << 24))
             for q in range(4)]
    flows.append(("fd00::1", "fd00::2", 0xC100, 0x200, (1 << 24) - 3))
    frames = []
    for n in range(count):
        src, dst, sport, dqpn, psn = flows[rng.randrange(len(flows))]
        size = sizes[n % len(sizes)] if sizes else rng.choice([0, 0, 16, 200, 1024, 4096])
        r = rng.random()
        if r < 0.7:
            opts = {}
            if rng.random() < 0.2:
                opts["vlan"] = 7
            if rng.random() < 0.2 and ":" not in src:
                opts["udp_chksum"] = rng.randrange(1, 1 << 16)
            frame = roce_data(src, dst, sport, dqpn, (psn + n) % (1 << 24),
                              opcode=rng.choice([RC_SEND_ONLY, RC_RDMA_WRITE_MIDDLE]), payload_len=size, **opts)
        elif r < 0.8:
            frame = roce_ack(dst, src, sport, dqpn, psn)
        elif r < 0.85:
            frame = roce_nak(dst, src, sport, dqpn, psn)
        elif r < 0.9:
            frame = roce_cnp(dst, src, sport, dqpn)
        else:
            frame = Ether() / IP(src=src if ":" not in src else "1.2.3.4", dst="5.6.7.8") / \
                rng.choice([TCP(sport=80, dport=1234), UDP(sport=1, dport=53)]) / Raw(b"x" * size)
        frames.append(bytes(frame))
    return frames


def pcap_trace(seed, n_frames, *, n_paths, depth):
    """``lbpipe trace themis-s-wire``: a random PathMap and ``n_frames`` frames of :func:`frames_for`:
    ``(commands, frames)``."""
    import random
    rng = random.Random(seed)
    cmds = [{"table": 0, "index": p, "data": rng.randrange(1 << 16)} for p in range(n_paths)]
    return cmds, frames_for(rng, n_frames)


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True)


async def _run(dut, *, stalls, seed, count, sizes=None, measure=False):
    n_paths = int(os.environ.get("LBPIPE_WIRE_PATHS", "8"))
    tb = TB(dut, stalls=stalls, seed=seed)
    await tb.reset()
    model = ThemisSWireModel(n_paths=n_paths)
    for p in range(n_paths):
        value = tb.rng.randrange(1 << 16)
        await tb.control({"table": 0, "index": p, "data": value})
        model.control({"table": 0, "index": p, "data": value})
    frames = frames_for(tb.rng, count, sizes)
    expected = [model.process(f) for f in frames]
    if measure:
        accepted = tb.count_accepted(sum((len(f) + BEAT - 1) // BEAT for f in frames))
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])
    if measure:
        rate = sum(accepted) / len(accepted)
        dut._log.info("beats accepted per clock: %.4f over %d cycles", rate, len(accepted))
        assert rate == 1.0, f"{rate} beats per clock"
    return frames


@cocotb.test()
async def frames_with_stalls(dut):
    """Mixed traffic with random idle input and output back-pressure: every frame as the golden model says."""
    await _run(dut, stalls=True, seed=1, count=150)


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, no stalls: one beat accepted per clock."""
    await _run(dut, stalls=False, seed=2, count=120, sizes=[0, 1, 50, 200, 960, 1400, 4000, 8000], measure=True)


@cocotb.test()
async def replay(dut):
    """``lbpipe replay themis-s-wire IN.pcap --engine rtl``: control commands, then the frames, then the frames out."""
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    await tb.replay()


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight: afterwards the pipeline behaves as freshly reset (the PathMap kept, as a
    memory), every frame as the golden model says."""
    n_paths = int(os.environ.get("LBPIPE_WIRE_PATHS", "8"))
    tb = TB(dut, stalls=False, seed=5)
    await tb.reset()
    model = ThemisSWireModel(n_paths=n_paths)
    for p in range(n_paths):
        value = tb.rng.randrange(1 << 16)
        await tb.control({"table": 0, "index": p, "data": value})
        model.control({"table": 0, "index": p, "data": value})
    await tb.reset_in_flight(frames_for(tb.rng, 30), 40 + tb.rng.randrange(40))
    model.reset()
    frames = frames_for(tb.rng, 40)
    for f in frames:
        tb.send(f)
    errors = []
    for i, f in enumerate(frames):
        got = bytes((await tb.sink.recv()).tdata)
        if got != model.process(f):
            errors.append(f"frame {i} after reset differs from the golden model")
    await ClockCycles(dut.clk, 50)
    if not tb.sink.empty():
        errors.append("frames left over after the reset")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def bench(dut):
    """``lbpipe bench themis-s-wire``: RoCEv2 data of one QP, sprayed, back to back, per frame size."""
    import json
    import random
    params = json.loads(os.environ["LBPIPE_PARAMS"])
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    model = ThemisSWireModel(**params)
    rng = random.Random(1)
    for p in range(params["n_paths"]):
        cmd = {"table": 0, "index": p, "data": rng.randrange(1 << 16)}
        await tb.control(cmd)
        model.control(cmd)
    await tb.size_bench(model, lambda size, k: sized_data(size, "10.0.0.1", "10.0.0.2", 0xC000, 0x123, k))
