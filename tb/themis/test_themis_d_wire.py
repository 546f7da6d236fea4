"""cocotb testbench of Themis-D in the wire (parser -> QP classifier -> Themis-D -> compensator), against its golden
model.

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.themis.wire.ThemisDWire`: ``s_axis_*`` and
``m_axis_*`` (cocotbext-axi AxiStreamSource/Sink) and ``s_axil_*`` (AxiLiteMaster: the classifier's table, QP
set-up, and the 17 counters as STATUS_0..16). Traffic is a closed-loop Themis run
(:func:`lbpipe.sim.themis.net.generate`: spraying over N paths, losses, a NIC-SR receiver that NACKs) turned into
scapy RoCEv2 frames by :func:`closed_loop_traffic`, with foreign, malformed and truncated frames mixed in. Every
output frame must equal the golden model's, bit for bit, every RoCEv2 output frame must carry a correct ICRC, and
the counters must agree.
"""

import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.hdl.themis.wire import TABLE_THEMIS_D_BASE
from lbpipe.sim.packet.qp_classifier import QpTable
from lbpipe.sim.themis.net import generate
from lbpipe.sim.themis.wire import ThemisDWireModel
from lbpipe.tb.lib.harness import AxisBench
from lbpipe.tb.lib.packets import RC_RDMA_WRITE_MIDDLE, RC_SEND_ONLY, roce_ack, roce_cnp, roce_data, roce_nak, sized_data

BEAT = 64

#: The parameters the testbench builds the pipeline with (small tables, fast to simulate); the closed loop uses the
#: Themis-D ones.
WIRE_PARAMS = dict(n_qps=8, queue_depth=40, n_paths=3, entry_bits=10, buckets=64, ways=2, ipv6=True, depth=256)


def _env_params():
    """The build's parameters: WIRE_PARAMS, overridden by the runner's environment (``LBPIPE_WIRE_<NAME>``)."""
    params = dict(WIRE_PARAMS)
    for name, value in params.items():
        text = os.environ.get(f"LBPIPE_WIRE_{name.upper()}")
        if text is not None:
            params[name] = (text == "1") if isinstance(value, bool) else int(text)
    return params


class Qp:
    """Addresses of one QP at the destination ToR: ``local`` is the NIC below it (the responder), ``remote`` the
    sender; data flows remote -> local with ``local_qpn``, NACKs local -> remote with ``remote_qpn``."""

    def __init__(self, q):
        self.ipv6 = q % 3 == 2
        self.local = f"fd00::1:{q + 1:x}" if self.ipv6 else f"10.1.0.{q + 1}"
        self.remote = f"fd00::2:{q + 1:x}" if self.ipv6 else f"10.2.0.{q + 1}"
        self.local_qpn = 0x1000 + 7 * q
        self.remote_qpn = 0x2000 + 5 * q
        self.sport = 0xC000 + q
        self.vlan = 10 + q if q % 4 == 1 else None

    def options(self):
        return {"vlan": self.vlan} if self.vlan is not None else {}

    def data(self, psn, rng):
        return roce_data(self.remote, self.local, self.sport, self.local_qpn, psn,
                         opcode=rng.choice([RC_SEND_ONLY, RC_RDMA_WRITE_MIDDLE]),
                         payload_len=rng.choice([0, 16, 64, 200, 512]), **self.options())

    def nack(self, epsn, msn):
        return roce_nak(self.local, self.remote, self.sport, self.remote_qpn, epsn, msn=msn, **self.options())


def setup_commands(qps, *, n_qps, buckets, ways, ipv6):
    """The control commands that install ``qps`` (index ``q`` for ``qps[q]``) in the classifier and set them up in
    Themis-D."""
    table = QpTable(n_entries=n_qps, buckets=buckets, ways=ways, ipv6=ipv6)
    cmds = []
    for q, qp in enumerate(qps):
        cmds += table.add_qp(qp.local, qp.remote, qp.local_qpn, qp.remote_qpn, q)
        cmds.append({"table": TABLE_THEMIS_D_BASE + 0, "index": q, "data": 0})
    return cmds


def foreign_frame(rng, qps):
    """A frame Themis-D must not act on, or that the parser must pass untouched: ACKs and CNPs of known QPs, data
    and NACKs of unknown QPs, other NAK codes, non-RoCE traffic, truncated and malformed RoCEv2 frames, runts."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    qp = rng.choice(qps)
    r = rng.randrange(10)
    if r == 0:
        return bytes(roce_ack(qp.local, qp.remote, qp.sport, qp.remote_qpn, rng.randrange(1 << 24), msn=3))
    if r == 1:
        return bytes(roce_cnp(qp.remote, qp.local, qp.sport, qp.local_qpn))
    if r == 2:     # a QP the classifier does not know
        return bytes(roce_data(qp.remote, qp.local, qp.sport, 0x7777, rng.randrange(1 << 24), payload_len=32))
    if r == 3:
        return bytes(roce_nak(qp.local, "fd00::9" if qp.ipv6 else "10.9.9.9", qp.sport, qp.remote_qpn,
                              rng.randrange(1 << 24)))
    if r == 4:     # a NAK that is not a PSN sequence error
        return bytes(roce_nak(qp.local, qp.remote, qp.sport, qp.remote_qpn, rng.randrange(1 << 24), syndrome=0x62))
    if r == 5:
        return bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / rng.choice([TCP(dport=80), UDP(dport=53)]) /
                     Raw(b"z" * rng.randrange(0, 300)))
    if r == 6:     # a NACK of a known QP cut inside its AETH: must pass untouched, not be filtered
        frame = bytes(qp.nack(rng.randrange(1 << 24), 1))
        return frame[:len(frame) - 4 - rng.randrange(1, 5)]
    if r == 7:     # a data frame of a known QP cut in its payload
        frame = bytes(qp.data(rng.randrange(1 << 24), rng))
        return frame[:max(1, len(frame) - 40)]
    if r == 8:     # a runt
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60)))
    frame = bytearray(bytes(qp.nack(rng.randrange(1 << 24), 1)))   # a NACK whose UDP length is wrong
    l4 = 14 + (4 if qp.vlan is not None else 0) + (40 if qp.ipv6 else 20)
    frame[l4 + 4:l4 + 6] = (int.from_bytes(frame[l4 + 4:l4 + 6], "big") + 4).to_bytes(2, "big")
    return bytes(frame)


def closed_loop_traffic(seed, *, n_flows=4, packets_per_flow=50, loss=0.03, params=None):
    """``(commands, frames, scenario)``: a closed-loop Themis run on QPs 0 to ``n_flows - 1`` as frames, its
    foreign items replaced by :func:`foreign_frame` frames, and the control commands that set the QPs up."""
    params = dict(WIRE_PARAMS if params is None else params)
    sc = generate(seed, n_paths=params["n_paths"], n_qps=params["n_qps"], queue_depth=params["queue_depth"],
                  entry_bits=params["entry_bits"], n_flows=n_flows, packets_per_flow=packets_per_flow, loss=loss,
                  gap_ns=100, path_delay_ns=(1000, 4000), last_hop_ns=200, foreign=0.08)
    rng = random.Random(f"frames-{seed}")
    qps = [Qp(q) for q in range(n_flows)]
    cmds = setup_commands(qps, n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"],
                          ipv6=params["ipv6"])
    frames = []
    for ev, info in zip(sc.items, sc.info):
        item = ev["item"]
        if info["origin"] == "data":
            frames.append(bytes(qps[item["qp"]].data(item["psn"], rng)))
        elif info["origin"] == "nack":
            frames.append(bytes(qps[item["qp"]].nack(item["psn"], item["msn"])))
        else:
            frames.append(foreign_frame(rng, qps))
    return cmds, frames, sc


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace themis-d-wire``: about ``n_frames`` frames of a closed-loop run on four QPs (the data, the NIC's
    NACKs, foreign and malformed frames) and the commands that install the QPs: ``(commands, frames)``."""
    cmds, frames, _ = closed_loop_traffic(seed, packets_per_flow=max(1, round(n_frames / 4 / 1.13)), params=params)
    return cmds, frames


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True, quiet=True)

    async def setup(self, model, cmds):
        for cmd in cmds:
            await self.control(cmd)
            model.control(cmd)

    async def play(self, model, frames, settle):
        """Send ``frames``, check what leaves against ``model`` (which processes them here) and that nothing more
        does within ``settle`` cycles, then the counters; returns ``(error messages, frames expected)``."""
        expected = [f for frame in frames for f in model.process(frame)]
        for f in frames:
            self.send(f)
        errors = await self.check_frames(expected)
        await ClockCycles(self.dut.clk, settle)
        if not self.sink.empty():
            errors.append("more frames than the golden model sends")
        errors += await self.check_counters(model)
        return errors, expected



async def _closed_loop(dut, *, stalls, seed):
    params = _env_params()
    tb = TB(dut, stalls=stalls, seed=seed)
    await tb.reset()
    model = ThemisDWireModel(**params)
    cmds, frames, _ = closed_loop_traffic(seed, params=params)
    await tb.setup(model, cmds)
    errors, expected = await tb.play(model, frames, settle=20)
    sent = model.comp.stats()[3]
    dut._log.info("%d frames in, %d out, %d compensation NACKs, counters %s", len(frames), len(expected), sent,
                  model.stats())
    assert sent > 0 and model.comp.stats()[0] > 0, "the traffic must exercise drops and compensation"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def closed_loop(dut):
    """A closed-loop run (spraying, losses, NIC NACKs) with foreign and malformed frames, no stalls."""
    await _closed_loop(dut, stalls=False, seed=1)


@cocotb.test()
async def closed_loop_with_stalls(dut):
    """The same with random idle input and output back-pressure, another seed."""
    await _closed_loop(dut, stalls=True, seed=5)


@cocotb.test()
async def line_rate(dut):
    """In-order data of known QPs, back-to-back frames of many sizes, no stalls: one beat accepted per clock."""
    params = _env_params()
    tb = TB(dut, stalls=False, seed=3)
    await tb.reset()
    model = ThemisDWireModel(**params)
    qps = [Qp(q) for q in range(4)]
    await tb.setup(model, setup_commands(qps, n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"],
                                         ipv6=params["ipv6"]))
    rng = random.Random(3)
    sizes = [0, 1, 50, 200, 960, 1400, 4000, 9000]
    frames = []
    psn = [rng.randrange(1 << 24) for _ in qps]
    for n in range(100):
        q = n % len(qps)
        frames.append(bytes(roce_data(qps[q].remote, qps[q].local, qps[q].sport, qps[q].local_qpn, psn[q],
                                      payload_len=sizes[n % len(sizes)], **qps[q].options())))
        psn[q] = (psn[q] + 1) % (1 << 24)
    expected = [f for frame in frames for f in model.process(frame)]
    accepted = tb.count_accepted(sum((len(f) + BEAT - 1) // BEAT for f in frames))
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected)
    assert not errors, "\n".join(errors[:10])
    rate = sum(accepted) / len(accepted)
    dut._log.info("beats accepted per clock: %.4f over %d cycles", rate, len(accepted))
    assert rate == 1.0, f"{rate} beats per clock"


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight: afterwards the pipeline behaves as freshly reset (Themis-D's flow table cleared,
    the classifier's table kept), every frame as the golden model says."""
    params = _env_params()
    tb = TB(dut, stalls=False, seed=6)
    await tb.reset()
    model = ThemisDWireModel(**params)
    cmds, frames, _ = closed_loop_traffic(6, params=params)
    await tb.setup(model, cmds)
    await tb.reset_in_flight(frames[:60], 100 + tb.rng.randrange(60))
    model.reset()
    # First without a new set-up: Themis-D's flow table must be clear (its QPs idle, their frames passed as the
    # golden model's reset says) and the classifier's table kept; stale state shows here.
    errors, _ = await tb.play(model, frames[60:90], settle=50)
    # Then the QPs set up again (the classifier's table is kept) and the rest of the traffic.
    await tb.setup(model, [c for c in cmds if c["table"] >= TABLE_THEMIS_D_BASE])
    more, _ = await tb.play(model, frames[90:], settle=50)
    errors += more
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def replay(dut):
    """``lbpipe replay themis-d-wire IN.pcap --ctl CTL --engine rtl``: control commands, the frames, the frames out
    (the run ends when no frame has come out for 2,000 cycles after the last one went in)."""
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    await tb.replay()


@cocotb.test()
async def bench(dut):
    """``lbpipe bench themis-d-wire``: in-order data of four set-up IPv4 QPs (one VLAN-tagged), back to back, per
    frame size."""
    import json
    params = json.loads(os.environ["LBPIPE_PARAMS"])
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    model = ThemisDWireModel(**params)
    qps = [qp for qp in map(Qp, range(8)) if not qp.ipv6][:min(4, params["n_qps"])]
    await tb.setup(model, setup_commands(qps, n_qps=params["n_qps"], buckets=params["buckets"],
                                         ways=params["ways"], ipv6=params["ipv6"]))
    psn = [0] * len(qps)

    def make_frame(size, k):
        qp = qps[k % len(qps)]
        psn[k % len(qps)] += 1
        return sized_data(size, qp.remote, qp.local, qp.sport, qp.local_qpn, psn[k % len(qps)], **qp.options())
    await tb.size_bench(model, make_frame)
