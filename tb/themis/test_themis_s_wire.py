"""cocotb testbench of Themis-S in the wire (parser -> Themis-S -> deparser), against its golden model.

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.themis.wire.ThemisSWire`: ``s_axis_*`` and
``m_axis_*`` (cocotbext-axi AxiStreamSource/Sink) and ``s_axil_*`` (AxiLiteMaster, the PathMap). Frames come from
``tb/lib/packets.py``'s scapy builders; each output frame must equal the golden model's, bit for bit, and every RoCEv2
output frame must carry a correct ICRC. ``LBPIPE_WIRE_CT`` (default 1) says whether the DUT is cut-through, so the
golden model is built to match.
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


def pcap_trace(seed, n_frames, *, n_paths, **_shape):
    """``lbpipe trace themis-s-wire``: a random PathMap and ``n_frames`` frames of :func:`frames_for`:
    ``(commands, frames)``. The other parameters (buffer depth, cut-through, FCS) do not change the traffic."""
    import random
    rng = random.Random(seed)
    cmds = [{"table": 0, "index": p, "data": rng.randrange(1 << 16)} for p in range(n_paths)]
    return cmds, frames_for(rng, n_frames)


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True)


def _cut_through():
    return os.environ.get("LBPIPE_WIRE_CT", "1") == "1"


async def _run(dut, *, stalls, seed, count, sizes=None, measure=False):
    n_paths = int(os.environ.get("LBPIPE_WIRE_PATHS", "8"))
    tb = TB(dut, stalls=stalls, seed=seed)
    await tb.reset()
    model = ThemisSWireModel(n_paths=n_paths, cut_through=_cut_through())
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
    model = ThemisSWireModel(n_paths=n_paths, cut_through=_cut_through())
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
        got = bytes((await tb.recv(f"frame {i} after reset")).tdata)
        if got != model.process(f):
            errors.append(f"frame {i} after reset differs from the golden model")
    await ClockCycles(dut.clk, 50)
    if not tb.sink.empty():
        errors.append("frames left over after the reset")
    assert not errors, "\n".join(errors[:10])


async def _program(tb, model, n_paths, rng):
    for p in range(n_paths):
        cmd = {"table": 0, "index": p, "data": rng.randrange(1 << 16)}
        await tb.control(cmd)
        model.control(cmd)


@cocotb.test()
async def bench(dut):
    """``lbpipe bench themis-s-wire``: for each size of ``LBPIPE_BENCH_SIZES``, RoCEv2 data frames of one QP,
    sprayed, one alone then 48 back to back, every frame out checked against the golden model; beats accepted per
    clock and first-beat latency (alone, and the maximum back to back). Results to ``LBPIPE_BENCH_OUT``."""
    import json
    import random
    params = json.loads(os.environ["LBPIPE_PARAMS"])
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    model = ThemisSWireModel(**params)
    await _program(tb, model, params["n_paths"], random.Random(1))
    psn = 0

    def make_frame(size, k):
        nonlocal psn
        psn += 1
        return sized_data(size, "10.0.0.1", "10.0.0.2", 0xC000, 0x123, psn)
    await tb.size_bench(model, make_frame, latency=True)


@cocotb.test()
async def contradicting_frames(dut):
    """Frames whose real end contradicts their headers, worked by hand (cut-through; store-and-forward in brackets):
    (1) a whole RoCEv2 WRITE of 1,000 payload bytes: sprayed; (2) the same cut to 600 bytes: cut-through predicts it
    whole, rewrites its port and sends it bad, ``tuser`` bit 0 on its last beat (store-and-forward: OTHER,
    unchanged); (3) the whole frame with 4 bytes after it (a kept FCS): sprayed, the 4 bytes untouched (the same);
    (4) a non-zero UDP checksum: left unchanged (store-and-forward: sprayed, checksum updated). Counters: sprayed 4
    (3), passed 0 (1: the cut frame is OTHER), bad 1 (0), checksum declines 1 (0)."""
    import random
    from lbpipe.tb.lib.packets import icrc
    cut_through = _cut_through()
    tb = TB(dut, stalls=False, seed=7)
    await tb.reset()
    n_paths = int(os.environ.get("LBPIPE_WIRE_PATHS", "8"))
    deltas = [0x1111 * (p + 1) & 0xFFFF for p in range(n_paths)]
    for p, d in enumerate(deltas):
        await tb.control({"table": 0, "index": p, "data": d})
    psns = [3, 4, 5, 6]
    whole = [bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x123, psn, payload_len=1000)) for psn in psns]
    summed = bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x123, psns[3], payload_len=1000, udp_chksum=0x4321))
    frames = [whole[0], whole[1][:600], whole[2] + b"\x11\x22\x33\x44", summed]
    for frame in frames:
        tb.send(frame)
    errors = []
    outs = []
    for i in range(4):
        got = await tb.sink.recv(compact=False)
        outs.append((bytes(got.tdata)[:sum(got.tkeep)], list(got.tuser)))    # tuser per byte, last beat's last
    port = [int.from_bytes(o[34:36], "big") for o, _ in outs]
    sprayed = [0xC000 ^ deltas[psn % n_paths] for psn in psns]
    if port[0] != sprayed[0] or outs[0][0][-4:] != icrc(outs[0][0]):
        errors.append(f"frame 1: port {port[0]:#x} (expected {sprayed[0]:#x}), ICRC {outs[0][0][-4:].hex()} "
                      f"(the frame's {icrc(outs[0][0]).hex()}), {len(outs[0][0])} bytes")
    bad_last = [bool(u[-1] & 1) for _, u in outs]
    if cut_through:
        if port[1] != sprayed[1] or outs[1][0][36:] != frames[1][36:] or not bad_last[1]:
            errors.append(f"frame 2: port {port[1]:#x}, rest unchanged {outs[1][0][36:] == frames[1][36:]}, "
                          f"bad {bad_last[1]}")
        if outs[3][0] != summed:
            errors.append("frame 4 (checksum) changed")
    else:
        if outs[1][0] != frames[1] or bad_last[1]:
            errors.append("frame 2 (cut) changed or bad in store-and-forward")
        if port[3] != sprayed[3]:
            errors.append("frame 4 (checksum) not sprayed in store-and-forward")
    out2 = outs[2][0]
    if port[2] != sprayed[2] or out2[-4:] != b"\x11\x22\x33\x44" or out2[-8:-4] != icrc(out2[:-4]):
        errors.append("frame 3 (trailer) not sprayed with a good ICRC and its trailer untouched")
    if any(bad_last[k] for k in (0, 2, 3)):
        errors.append(f"bad frames {bad_last}")
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(6)]
    want = [4, 0, 0, 0, 1, 1] if cut_through else [3, 1, 0, 0, 0, 0]
    if counters != want:
        errors.append(f"counters (sprayed, passed, cut, refused, bad, checksum) {counters}, expected {want}")
    assert not errors, "\n".join(errors)


@cocotb.test()
async def fcs_frames(dut):
    """``fcs=True`` (``LBPIPE_WIRE_FCS=1``): frames carry an FCS computed by zlib. A RoCEv2 data frame of each of 4
    sizes (one of them padded to the 60-byte minimum before its FCS) leaves sprayed with a correct ICRC and a
    still-correct FCS (zlib again, on the frame out); one with a non-zero UDP checksum leaves unchanged; a 4-byte
    cut of the FCS makes a rewritten frame bad in cut-through. Counters by hand."""
    import struct
    import zlib
    from lbpipe.tb.lib.packets import icrc
    cut_through = _cut_through()
    tb = TB(dut, stalls=False, seed=8)
    await tb.reset()
    n_paths = int(os.environ.get("LBPIPE_WIRE_PATHS", "8"))
    deltas = [0x0101 * (p + 3) & 0xFFFF for p in range(n_paths)]
    for p, d in enumerate(deltas):
        await tb.control({"table": 0, "index": p, "data": d})

    def with_fcs(body):
        body = body + bytes(max(0, 60 - len(body)))
        return body + struct.pack("<I", zlib.crc32(body))
    sizes = [0, 4, 200, 3000]
    bodies = [bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x55, psn, opcode=RC_SEND_ONLY, payload_len=size))
              for psn, size in enumerate(sizes)]
    summed = bytes(roce_data("10.0.0.1", "10.0.0.2", 0xC000, 0x55, 4, payload_len=100, udp_chksum=0x1234))
    frames = [with_fcs(b) for b in bodies] + [with_fcs(summed)]
    for frame in frames:
        tb.send(frame)
    errors = []
    for k, frame in enumerate(frames):
        got = await tb.sink.recv(compact=False)
        out = bytes(got.tdata)[:sum(got.tkeep)]
        if len(out) != len(frame) or out[-4:] != struct.pack("<I", zlib.crc32(out[:-4])):
            errors.append(f"frame {k}: FCS no longer correct")
        if k < len(bodies):
            n = len(bodies[k])
            port = int.from_bytes(out[34:36], "big")
            if port != 0xC000 ^ deltas[k % n_paths] or out[n - 4:n] != icrc(out[:n]):
                errors.append(f"frame {k} ({len(frame)} bytes): port {port:#x}, ICRC {out[n - 4:n].hex()}")
        elif out != frame:
            errors.append("the frame with a non-zero UDP checksum was changed")
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(6)]
    want = [5, 0, 0, 0, 0, 1]
    if counters != want:
        errors.append(f"counters (sprayed, passed, cut, refused, bad, checksum) {counters}, expected {want}")
    assert not errors, "\n".join(errors)
