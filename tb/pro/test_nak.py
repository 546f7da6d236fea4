"""cocotb tests of :class:`lbpipe.hdl.pro.nak.NakGen` (inside :class:`lbpipe.boards.top.FlatTop`): NACK events on
``i_*``, contexts written through ``s_axil_*``, NAK frames taken from ``m_axis_*``.

Every frame out is compared byte for byte with the golden model (:mod:`lbpipe.sim.pro.nak`) and, independently of
both, its ICRC, IPv4 checksum, lengths, opcode, syndrome and PSN are checked with scapy and
:func:`lbpipe.tb.lib.packets.icrc` (:func:`check_nak`). Settings from the environment: ``NAK_N_QPS``, ``NAK_SEED``,
``NAK_EVENTS``.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.hdl.pro.nak import NakEvent
from lbpipe.sim.pro.nak import NakGen as Golden
from lbpipe.sim.pro.nak import nak_trace, ooo_nak_events
from lbpipe.tb.lib.harness import CLOCK_NS, StreamSource, pause_pattern, write_command

_REG_STATUS_BASE = 0x40


def check_nak(frame, *, psn, dqpn=None, sip=None, dip=None):
    """Independent checks of one NAK frame (scapy parses it; ICRC from tb/lib/packets.py); returns error strings."""
    from scapy.layers.inet import IP, UDP, checksum
    from scapy.layers.l2 import Ether
    from scapy.contrib.roce import AETH, BTH
    from lbpipe.tb.lib.packets import icrc
    errors = []
    pkt = Ether(frame)
    if len(frame) != 62:
        errors.append(f"length {len(frame)}, not 62")
    if IP not in pkt or UDP not in pkt or BTH not in pkt or AETH not in pkt:
        return errors + [f"not Ether/IP/UDP/BTH/AETH: {pkt.summary()}"]
    ip, udp, bth, aeth = pkt[IP], pkt[UDP], pkt[BTH], pkt[AETH]
    if ip.len != 48 or udp.len != 28 or ip.ihl != 5:
        errors.append(f"IP length {ip.len}, UDP length {udp.len}, IHL {ip.ihl}")
    if checksum(bytes(frame[14:34])) != 0:
        errors.append(f"IPv4 header checksum {ip.chksum:#06x} does not sum to 0xffff")
    if udp.dport != 4791 or bth.opcode != 0x11 or aeth.syndrome != 0x60:
        errors.append(f"dport {udp.dport}, opcode {bth.opcode:#x}, syndrome {aeth.syndrome:#x}")
    if bth.psn != psn:
        errors.append(f"PSN {bth.psn:#x}, expected {psn:#x}")
    if dqpn is not None and bth.dqpn != dqpn:
        errors.append(f"QPN {bth.dqpn:#x}, expected {dqpn:#x}")
    if sip is not None and (ip.src, ip.dst) != (sip, dip):
        errors.append(f"addresses {ip.src} -> {ip.dst}, expected {sip} -> {dip}")
    if frame[-4:] != icrc(frame):
        errors.append(f"ICRC {frame[-4:].hex()}, the frame's is {icrc(frame).hex()}")
    return errors


class NakBench:
    def __init__(self, dut, *, n_qps, seed=1, idle=0.0, backpressure=0.0):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink
        self.dut = dut
        self.rng = random.Random(seed)
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        dut.rst.value = 1
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.source = StreamSource(dut, "i", NakEvent(n_qps=n_qps), idle=idle, rng=random.Random(seed + 1))
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.sink.log.setLevel("WARNING")
        if backpressure:
            self.sink.set_pause_generator(pause_pattern(random.Random(seed + 2), backpressure))
        self.model = Golden(n_qps=n_qps)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def control(self, cmds):
        for cmd in cmds:
            await write_command(self.axil, cmd)
            self.model.control(cmd)

    def send(self, events):
        want = []
        for ev in events:
            self.source.send(ev)
            want += [(f, ev["psn"]) for f in self.model.process(ev)]
        return want

    async def check(self, want, *, limit=20000):
        errors = []
        for k, (frame, psn) in enumerate(want):
            waited = 0
            while self.sink.empty():
                if waited == limit:
                    errors.append(f"frame {k} of {len(want)} never left m_axis within {limit} cycles")
                    return errors
                await RisingEdge(self.dut.clk)
                waited += 1
            got = self.sink.recv_nowait()
            data = bytes(got.tdata)
            if data != frame:
                errors.append(f"frame {k}: {data.hex()} differs from the golden model's {frame.hex()}")
            errors += [f"frame {k}: {e}" for e in check_nak(data, psn=psn)]
            if errors:
                break
        await ClockCycles(self.dut.clk, 40)
        if not self.sink.empty():
            errors.append("frames beyond the expected ones")
        counters = [await self.axil.read_dword(_REG_STATUS_BASE + 4 * k) for k in range(4)]
        if counters != self.model.stats():
            errors.append(f"counters {counters}, golden model {self.model.stats()}")
        return errors


def _env(name, default):
    return int(os.environ.get(name, default))


async def _random_run(dut, *, idle, backpressure, ooo=False):
    n_qps, seed = _env("NAK_N_QPS", 16), _env("NAK_SEED", 1)
    tb = NakBench(dut, n_qps=n_qps, seed=seed, idle=idle, backpressure=backpressure)
    await tb.reset()
    commands, events = nak_trace(seed, _env("NAK_EVENTS", 300), n_qps=n_qps)
    if ooo:
        events = ooo_nak_events(seed, _env("NAK_EVENTS", 300), n_qps=n_qps)
        assert sum(ev["nack"] for ev in events) >= 5, "the trace should lose packets"
    commands.append({"table": 7, "index": 0, "data": 1})                # forged: no such table
    commands.append({"table": 0, "index": (1 << 24) - 1, "data": 1})    # forged: index out of range
    await tb.control(commands)
    errors = await tb.check(tb.send(events))
    assert not errors, "\n".join(errors[:5])


@cocotb.test()
async def random_events(dut):
    await _random_run(dut, idle=0.0, backpressure=0.0)


@cocotb.test()
async def random_events_pauses(dut):
    """Idle input cycles and back-pressure on ``m_axis``."""
    await _random_run(dut, idle=0.3, backpressure=0.4)


@cocotb.test()
async def ooo_events(dut):
    """Events as pro-ooo's golden model emits them on reordered, lossy traffic (its ``ooo_trace``), with pauses."""
    await _random_run(dut, idle=0.2, backpressure=0.3, ooo=True)


@cocotb.test()
async def one_per_clock(dut):
    """Back-to-back NACK events of one set-up QP: one event taken and one frame sent per clock, the first frame
    8 cycles after its event."""
    n_qps = _env("NAK_N_QPS", 16)
    tb = NakBench(dut, n_qps=n_qps)
    await tb.reset()
    from lbpipe.hdl.pro.nak import nak_context_commands
    await tb.control(nak_context_commands(1, dmac=1, smac=2, sip=3, dip=4, sport=5, dqpn=6))
    want = tb.send([{"qp": 1, "nack": 1, "psn": k} for k in range(32)])
    cycles, taken = [], []

    async def watch():
        n = 0
        while len(cycles) < 32:
            await RisingEdge(dut.clk)
            n += 1
            if int(dut.i_valid.value) and int(dut.i_ready.value):
                taken.append(n)
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
                cycles.append(n)
    cocotb.start_soon(watch())
    errors = await tb.check(want)
    assert not errors, "\n".join(errors[:5])
    assert taken[-1] - taken[0] == 31, f"32 events taken over {taken[-1] - taken[0] + 1} cycles"
    assert cycles[-1] - cycles[0] == 31, f"32 frames over {cycles[-1] - cycles[0] + 1} cycles"
    # The datasheet's latency, stated here: 8 edges from the one that takes an event to the one that hands its
    # frame on (the edge that takes it is counted as the first of the nine).
    assert cycles[0] - taken[0] == 8, f"first frame {cycles[0] - taken[0]} cycles after its event"


@cocotb.test()
async def reset_mid_traffic(dut):
    """A one-cycle reset with frames in the pipeline: nothing of them leaves, counters read 0, contexts survive."""
    n_qps = _env("NAK_N_QPS", 16)
    tb = NakBench(dut, n_qps=n_qps, backpressure=0.5)
    await tb.reset()
    from lbpipe.hdl.pro.nak import nak_context_commands
    await tb.control(nak_context_commands(2, dmac=1, smac=2, sip=3, dip=4, sport=5, dqpn=6))
    for k in range(20):
        tb.source.send({"qp": 2, "nack": 1, "psn": k})
    await ClockCycles(dut.clk, 9)
    dut.rst.value = 1               # a single-cycle pulse: every stage must clear at once
    await RisingEdge(dut.clk)
    tb.source.flush()
    tb.sink.clear()
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 2)
    assert not int(dut.m_axis_tvalid.value), "a frame is offered after reset"
    tb.model.reset()
    await ClockCycles(dut.clk, 20)
    assert tb.sink.empty(), "frames left after reset"
    errors = await tb.check(tb.send([{"qp": 2, "nack": 1, "psn": 0xABCDEF}]))
    assert not errors, "\n".join(errors[:5])
