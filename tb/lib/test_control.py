"""cocotb tests of :class:`lbpipe.hdl.lib.axil.ControlBridge` through its AXI4-Lite port.

The DUT is ``control_top`` from ``tests/test_control.py``: a ControlBridge with ``status_words=2`` whose AXI4-Lite
port is exposed as ``s_axil_*`` (driven by cocotbext-axi's ``AxiLiteMaster``), whose control stream is exposed as
``ctl_valid``/``ctl_ready``/``ctl_payload`` (consumed by :class:`CtlSink` below, with a back-pressure generator and
a stream-rule checker) and whose status inputs are ``status_0`` and ``status_1``.

The host side is modelled by :class:`RegModel`, which tracks the staging registers through byte-strobed writes, so
every committed command can be predicted.
"""

import itertools
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, ClockCycles
from cocotb.utils import get_sim_time

from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp

from lbpipe.hdl.lib.control import CONTROL_TABLE_BITS, CONTROL_INDEX_BITS, CONTROL_DATA_BITS

CLK_NS = 4
IDENT = 0x4C425031

ID, STATUS, TABLE, INDEX, DATA_LO, DATA_HI, COMMIT = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x14, 0x18
STATUS_BASE = 0x40
STATUS_WORDS = 2
PENDING = 1 << 0

#: Width in bits of each RW register, for modelling strobed writes.
RW_WIDTH = {TABLE: CONTROL_TABLE_BITS, INDEX: CONTROL_INDEX_BITS, DATA_LO: 32, DATA_HI: 32}


def unpack_command(value):
    """Split a packed ``ControlWrite`` payload (table in the low bits, as ``data.StructLayout`` packs it)."""
    table = value & ((1 << CONTROL_TABLE_BITS) - 1)
    value >>= CONTROL_TABLE_BITS
    index = value & ((1 << CONTROL_INDEX_BITS) - 1)
    value >>= CONTROL_INDEX_BITS
    data = value & ((1 << CONTROL_DATA_BITS) - 1)
    return {"table": table, "index": index, "data": data}


class RegModel:
    """Golden model of the staging registers."""

    def __init__(self):
        self.regs = {TABLE: 0, INDEX: 0, DATA_LO: 0, DATA_HI: 0}

    def write(self, addr, payload):
        """Apply a write of ``payload`` (bytes) at byte address ``addr`` within one word."""
        word = addr & ~3
        if word not in self.regs:
            return
        value = self.regs[word]
        for i, byte in enumerate(payload):
            lane = (addr & 3) + i
            value = (value & ~(0xFF << (8 * lane))) | (byte << (8 * lane))
        self.regs[word] = value & ((1 << RW_WIDTH[word]) - 1)

    def command(self):
        return {"table": self.regs[TABLE], "index": self.regs[INDEX],
                "data": self.regs[DATA_LO] | (self.regs[DATA_HI] << 32)}


class CtlSink:
    """Consumes ``ctl`` with a back-pressure pattern and checks the stream rules.

    ``received`` holds ``(cycle, command)`` for every transfer. A beat offered and not taken must be offered again,
    unchanged, on the next cycle (unless reset intervenes).
    """

    def __init__(self, tb):
        self.tb = tb
        self.dut = tb.dut
        self.received = []
        self._ready = itertools.repeat(1)
        self.dut.ctl_ready.value = 0
        cocotb.start_soon(self._run())

    def set_ready(self, pattern):
        """``pattern``: a constant (0/1) or an iterator of 0/1, one value per cycle."""
        self._ready = itertools.repeat(int(pattern)) if isinstance(pattern, (int, bool)) else iter(pattern)

    @property
    def commands(self):
        return [cmd for _, cmd in self.received]

    async def _run(self):
        dut = self.dut
        stalled = None
        while True:
            await RisingEdge(dut.clk)
            if int(dut.rst.value):
                stalled = None
            else:
                valid = bool(dut.ctl_valid.value)
                ready = bool(dut.ctl_ready.value)
                payload = dut.ctl_payload.value.to_unsigned() if valid else None
                if stalled is not None:
                    assert valid, "ctl.valid dropped before the beat was accepted"
                    assert payload == stalled, "ctl.payload changed while ctl.valid was waiting for ready"
                if valid and ready:
                    self.received.append((self.tb.cycle, unpack_command(payload)))
                    stalled = None
                else:
                    stalled = payload
            dut.ctl_ready.value = next(self._ready, 1)


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log
        self.cycle = 0
        dut.rst.value = 1
        dut.status_0.value = 0
        dut.status_1.value = 0
        Clock(dut.clk, CLK_NS, unit="ns").start()
        cocotb.start_soon(self._count_cycles())
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.sink = CtlSink(self)

    async def _count_cycles(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1

    async def reset(self, cycles=4):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def read32(self, addr):
        resp = await self.axil.read(addr, 4)
        assert resp.resp == AxiResp.OKAY, f"read {addr:#x}: {resp.resp!r}"
        return int.from_bytes(resp.data, "little")

    async def write32(self, addr, value):
        await self.write(addr, value.to_bytes(4, "little"))

    async def write(self, addr, payload):
        resp = await self.axil.write(addr, payload)
        assert resp.resp == AxiResp.OKAY, f"write {addr:#x}: {resp.resp!r}"

    async def stage(self, model, table, index, data):
        for addr, value in ((TABLE, table), (INDEX, index), (DATA_LO, data & 0xFFFFFFFF), (DATA_HI, data >> 32)):
            await self.write32(addr, value)
            model.write(addr, value.to_bytes(4, "little"))

    async def wait_for(self, condition, limit=100):
        for _ in range(limit):
            if condition():
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"condition not met within {limit} cycles")


async def started(dut):
    tb = TB(dut)
    await tb.reset()
    return tb


@cocotb.test()
async def test_ident(dut):
    tb = await started(dut)
    assert await tb.read32(ID) == IDENT
    assert await tb.read32(STATUS) == 0


@cocotb.test()
async def test_staging_registers_strobes(dut):
    tb = await started(dut)
    model = RegModel()
    for addr in RW_WIDTH:
        assert await tb.read32(addr) == 0
    # Full words, wider than the register where it is narrower than 32 bits.
    for addr, value in ((TABLE, 0xDEADBEA5), (INDEX, 0xCAFE1234), (DATA_LO, 0x01234567), (DATA_HI, 0x89ABCDEF)):
        await tb.write32(addr, value)
        model.write(addr, value.to_bytes(4, "little"))
    # Partial strobes: single bytes, half words, an upper byte of a narrow register.
    for addr, payload in ((INDEX + 1, b"\x5A"), (DATA_LO + 2, b"\xAA\xBB"), (DATA_HI + 3, b"\x11"),
                          (TABLE + 1, b"\xFF"), (INDEX + 3, b"\xFF"), (TABLE, b"\x3C"), (DATA_LO, b"\x77\x66\x55")):
        await tb.write(addr, payload)
        model.write(addr, payload)
    for addr in RW_WIDTH:
        got = await tb.read32(addr)
        assert got == model.regs[addr], f"register {addr:#x}: read {got:#x}, expected {model.regs[addr]:#x}"
    # Worked by hand, so the model itself is checked too.
    assert model.regs == {TABLE: 0x3C, INDEX: 0xFE5A34, DATA_LO: 0xBB556677, DATA_HI: 0x11ABCDEF}
    assert tb.sink.received == []


@cocotb.test()
async def test_aw_w_either_order(dut):
    tb = await started(dut)
    model = RegModel()
    for late, value in (("w", 0x11223344), ("aw", 0x55667788)):
        channel = tb.axil.write_if.w_channel if late == "w" else tb.axil.write_if.aw_channel
        channel.set_pause_generator(itertools.chain([1] * 6, itertools.repeat(0)))
        await tb.write32(DATA_LO, value)
        model.write(DATA_LO, value.to_bytes(4, "little"))
        channel.clear_pause_generator()
        channel.pause = False
        assert await tb.read32(DATA_LO) == value, f"{late} late"
    # And a COMMIT whose W beat arrives well before its AW beat.
    tb.axil.write_if.aw_channel.set_pause_generator(itertools.chain([1] * 8, itertools.repeat(0)))
    await tb.write32(COMMIT, 0)
    tb.axil.write_if.aw_channel.clear_pause_generator()
    tb.axil.write_if.aw_channel.pause = False
    assert tb.sink.commands == [model.command()]


@cocotb.test()
async def test_commit_one_transfer(dut):
    tb = await started(dut)
    model = RegModel()
    await tb.stage(model, 0xA5, 0xC0FFEE, 0x0123456789ABCDEF)
    assert tb.sink.received == []
    await tb.write32(COMMIT, 0xFFFFFFFF)
    # The write has returned, so the command is already in the block.
    assert tb.sink.commands == [{"table": 0xA5, "index": 0xC0FFEE, "data": 0x0123456789ABCDEF}]
    await ClockCycles(dut.clk, 20)
    assert len(tb.sink.received) == 1
    assert await tb.read32(STATUS) == 0
    # Staging registers survive the commit.
    assert await tb.read32(INDEX) == 0xC0FFEE
    # A second COMMIT resends the same staged command.
    await tb.write32(COMMIT, 0)
    assert tb.sink.commands == [model.command()] * 2


@cocotb.test()
async def test_commit_waits_for_ready(dut):
    tb = await started(dut)
    model = RegModel()
    hold = 25
    tb.sink.set_ready(0)
    await tb.stage(model, 7, 0x123456, 0xFEEDFACE00000001)
    commit = cocotb.start_soon(tb.write32(COMMIT, 0))
    await tb.wait_for(lambda: bool(dut.ctl_valid.value))
    offered = tb.cycle
    await ClockCycles(dut.clk, hold)
    assert not commit.done(), "COMMIT completed while ctl_ready was low"
    # A read is served while the COMMIT's response is held back.
    status = await tb.read32(STATUS)
    assert status & PENDING, f"STATUS={status:#x} while a command waits"
    # Writing the staging registers meanwhile must not disturb the pending payload (checked by the sink too).
    late = cocotb.start_soon(tb.write32(DATA_LO, 0xBAD0BAD0))
    await ClockCycles(dut.clk, 5)
    assert not commit.done()
    assert unpack_command(dut.ctl_payload.value.to_unsigned()) == model.command()
    ready_ns = get_sim_time(unit="ns")
    tb.sink.set_ready(1)
    await commit
    done_ns = get_sim_time(unit="ns")
    await late
    latency = (done_ns - ready_ns) / CLK_NS
    tb.log.info("COMMIT held %d cycles with ctl_ready low; completed %.1f cycles after ctl_ready rose",
                tb.cycle - offered, latency)
    assert done_ns > ready_ns
    assert latency <= 4, f"COMMIT took {latency} cycles to complete after ctl_ready rose"
    assert tb.sink.commands == [model.command()]
    assert await tb.read32(STATUS) == 0
    assert await tb.read32(DATA_LO) == 0xBAD0BAD0


async def check_commit_returns(tb, commits):
    """Each COMMIT's write must return only after its command (and all earlier ones) reached the sink."""
    for n, event in commits:
        await event.wait()
        assert event.data is not None and event.data.resp == AxiResp.OKAY
        assert len(tb.sink.received) >= n + 1, f"COMMIT {n} returned with {len(tb.sink.received)} transfers"


@cocotb.test()
async def test_random_commands_backpressure(dut):
    tb = await started(dut)
    rng = random.Random(0x4C4250)
    ready_rng = random.Random(0x31)
    tb.sink.set_ready(int(ready_rng.random() < 0.55) for _ in itertools.count())
    model = RegModel()
    expected, commits = [], []
    n_commands = 150
    for n in range(n_commands):
        for addr in RW_WIDTH:
            roll = rng.random()
            if roll < 0.3:
                continue  # staging registers keep their value across commits
            if roll < 0.8:
                payload = rng.getrandbits(32).to_bytes(4, "little")
                offset = 0
            else:
                offset = rng.randrange(4)
                payload = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4 - offset)))
            tb.axil.init_write(addr + offset, payload)
            model.write(addr + offset, payload)
        if rng.random() < 0.1:
            tb.axil.init_write(0x20 + 4 * rng.randrange(8), b"\xFF\xFF\xFF\xFF")  # unmapped: ignored
        commits.append((n, tb.axil.init_write(COMMIT, b"\x00\x00\x00\x00")))
        expected.append(model.command())
    checker = cocotb.start_soon(check_commit_returns(tb, commits))
    await checker
    await tb.axil.wait()
    await ClockCycles(dut.clk, 10)
    got = tb.sink.commands
    assert len(got) == n_commands, f"{len(got)} transfers for {n_commands} commits"
    for n, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"command {n}: got {g}, expected {e}"
    tb.log.info("%d commands in %d cycles", n_commands, tb.cycle)


@cocotb.test()
async def test_status_words(dut):
    tb = await started(dut)
    rng = random.Random(7)
    for _ in range(4):
        values = [rng.getrandbits(32) for _ in range(STATUS_WORDS)]
        dut.status_0.value = values[0]
        dut.status_1.value = values[1]
        await RisingEdge(dut.clk)
        for i, value in enumerate(values):
            assert await tb.read32(STATUS_BASE + 4 * i) == value


@cocotb.test()
async def test_unmapped(dut):
    tb = await started(dut)
    dut.status_0.value = 0xFFFFFFFF
    dut.status_1.value = 0xFFFFFFFF
    model = RegModel()
    await tb.stage(model, 0x12, 0x345678, 0x9ABCDEF012345678)
    unmapped = [COMMIT, 0x1C, 0x20, 0x3C, STATUS_BASE + 4 * STATUS_WORDS, 0x80, 0x1000, 0xFFFC]
    for addr in unmapped:
        assert await tb.read32(addr) == 0, f"read {addr:#x}"
    # Writes to unmapped and read-only addresses are accepted (OKAY) and change nothing.
    for addr in unmapped[1:] + [ID, STATUS, STATUS_BASE, STATUS_BASE + 4]:
        await tb.write32(addr, 0xFFFFFFFF)
    assert await tb.read32(ID) == IDENT
    assert await tb.read32(STATUS) == 0
    for addr in RW_WIDTH:
        assert await tb.read32(addr) == model.regs[addr]
    await ClockCycles(dut.clk, 5)
    assert tb.sink.received == []


@cocotb.test()
async def test_reset_mid_command(dut):
    tb = await started(dut)
    model = RegModel()
    tb.sink.set_ready(0)
    await tb.stage(model, 0x55, 0xABCDEF, 0x1111222233334444)
    commit = cocotb.start_soon(tb.axil.write(COMMIT, bytes(4)))
    await tb.wait_for(lambda: bool(dut.ctl_valid.value))
    await ClockCycles(dut.clk, 3)
    await tb.reset()
    assert await commit is None, "the master flushes the interrupted write"
    assert not bool(dut.ctl_valid.value), "ctl.valid still high after reset"
    tb.sink.set_ready(1)
    await ClockCycles(dut.clk, 20)
    assert tb.sink.received == [], f"spurious transfer after reset: {tb.sink.received}"
    assert await tb.read32(STATUS) == 0
    model = RegModel()
    for addr in RW_WIDTH:
        assert await tb.read32(addr) == 0
    # The bridge works normally afterwards.
    await tb.stage(model, 3, 4, 5)
    await tb.write32(COMMIT, 0)
    assert tb.sink.commands == [{"table": 3, "index": 4, "data": 5}]
