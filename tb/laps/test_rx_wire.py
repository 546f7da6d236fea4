"""cocotb testbench of the LAPS receiver in the wire (:class:`lbpipe.hdl.laps.rx_wire.LapsRxWire`).

The DUT is :class:`lbpipe.boards.top.FlatTop` around it, parameters in ``LBPIPE_PARAMS`` (JSON). The testbench drives
``now`` (4 ns a clock from ``NOW0`` plus an offset), records ``now`` at every frame's first beat taken, and checks
all four outputs (``m_axis``, ``m_ack``, ``upd``, ``loss``) against the golden model run with those times; frames are
built with scapy. Back-pressure is applied on every output. With ``ipv6`` in the parameters the traffic carries IPv6
data frames, probes and ACKs (random addresses, VLAN tags), which the DUT then answers.
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.sim.laps.rx_wire import LapsRxWireModel
from lbpipe.tb.lib.harness import AxisBench, pause_pattern

#: The NIC clock at the testbench's first cycle.
NOW0 = 1 << 40
LAPS_PORT = 0xC1A5


def _params():
    return json.loads(os.environ["LBPIPE_PARAMS"])


def data_frame(rng, *, probe=0, ack=0, pid=None, time=None, anchors=None, v6=False, tags=(), ip_options=0,
               payload_len=None, n_entries=64, k=8, flow=None, seq=None, inner=True, addrs=None):
    """A LAPS frame built with scapy: inner RoCEv2 BTH (flow = destination QP, seq = PSN) after the LAPS header
    (none without ``inner``), the inner port 4791 in the header's reserved bytes. ``addrs``: (source,
    destination) instead of the fixed IPv6 pair or the random IPv4 one."""
    from scapy.contrib.roce import BTH
    from scapy.packet import Raw
    from lbpipe.tb.lib.packets import LapsHeader, laps_frame
    sub = n_entries // k
    if pid is None:
        pid = rng.randrange(k) * sub + rng.randrange(1, sub)
    if time is None:
        time = NOW0 - rng.randrange(0, 200_000)
    if anchors is None:
        anchors = [rng.randrange(1 << 32) for _ in range(rng.randrange(5))]
    if addrs is not None:
        src, dst = addrs
    else:
        src, dst = ("fd00::1", "fd00::2") if v6 else (f"10.0.{rng.randrange(256)}.1", f"10.1.{rng.randrange(256)}.2")
    pkt = laps_frame(src, dst, probe=probe, ack=ack, pid=pid, time=time, anchors=anchors, tags=tags,
                     ip_options=ip_options, sport=rng.randrange(1 << 16),
                     src_mac=f"02:00:00:00:{rng.randrange(256):02x}:01", dst_mac="02:00:00:00:00:02")
    pkt[LapsHeader].reserved2 = 4791
    if not inner:
        return bytes(pkt)
    n = rng.choice([0, 8, 100, 1000]) if payload_len is None else payload_len
    inner = BTH(opcode=4, dqpn=rng.randrange(1 << 24) if flow is None else flow,
                psn=rng.randrange(1 << 24) if seq is None else seq) / Raw(bytes(rng.randrange(256) for _ in range(n)))
    return bytes(pkt / inner)


def _v6_addrs(rng):
    """A random IPv6 source and destination (every 16-bit group drawn, so a swapped or cut address shows)."""
    return tuple(":".join(f"{rng.randrange(1 << 16):x}" for _ in range(8)) for _ in range(2))


def mixed_frames(rng, count, *, n_entries, k, sizes=None, long_probes=False, ipv6=False):
    """Data, probes, ACKs, probe ACKs (some duplicated), non-LAPS, malformed and truncated LAPS, IPv6, bad pids,
    send times from the future, tags and IPv4 options. ``long_probes``: probes of two beats (3 or 4 anchors), so
    that no one-beat frame asks for a two-beat ACK (what limits line rate, datasheet). ``ipv6``: 40 % of the data
    frames, probes, ACKs, bad-pid and future-time frames are IPv6 with random addresses (some VLAN-tagged); without
    it the same draws as before (the IPv6 frames fixed-address data frames only)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    frames = []
    for n in range(count):
        r = rng.random()
        six = {}
        if ipv6 and rng.random() < 0.4:
            six = dict(v6=True, addrs=_v6_addrs(rng), tags=rng.choice([(), (), (0x8100,), (0x88A8, 0x8100)]))
        opts = dict(n_entries=n_entries, k=k, **(six if r < 0.8 else {}))
        if sizes:
            opts["payload_len"] = sizes[n % len(sizes)]
        if r < 0.35:
            f = data_frame(rng, **opts)
        elif r < 0.45:
            anchors = [rng.randrange(1 << 32) for _ in range(rng.randrange(3, 5) if long_probes else rng.randrange(5))]
            f = data_frame(rng, probe=1, anchors=anchors, inner=False, n_entries=n_entries, k=k, **six)
        elif r < 0.6:
            f = data_frame(rng, ack=1, **opts)
            if rng.random() < 0.3:
                frames.append(f)                   # a duplicated ACK
        elif r < 0.65:
            f = data_frame(rng, probe=1, ack=1, inner=False, n_entries=n_entries, k=k, **six)
        elif r < 0.7:
            f = data_frame(rng, ack=rng.randrange(2), pid=rng.choice([0, n_entries, 0xFFFF, n_entries // k]), **opts)
        elif r < 0.75:
            f = data_frame(rng, ack=rng.randrange(2), time=NOW0 + rng.randrange(1, 1 << 30), **opts)
        elif r < 0.8:
            f = data_frame(rng, **dict(opts, v6=True))
        elif r < 0.85:
            f = data_frame(rng, tags=rng.choice([(0x8100,), (0x88A8, 0x8100)]), ip_options=rng.choice([0, 8, 40]),
                           **opts)
        elif r < 0.9:                              # malformed count, or a header cut short
            f = bytearray(data_frame(rng, **opts))
            if rng.random() < 0.5:
                f[42] = (f[42] & 0xF0) | rng.randrange(5, 16)
            else:
                f = f[:42 + rng.randrange(1, 12)]
            f = bytes(f)
        else:
            f = bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=1, dport=rng.choice([53, 4791])) /
                      Raw(b"x" * rng.randrange(20, 300)))
        frames.append(f)
    return frames


class TB(AxisBench):
    """The harness's source/sink on ``s_axis``/``m_axis`` and AXI4-Lite, plus a sink on ``m_ack``, ready
    generators and collectors on ``upd`` and ``loss``, and the ``now`` driver."""

    def __init__(self, dut, *, stalls, seed, offset=0, frozen=False):
        from cocotbext.axi import AxiStreamBus, AxiStreamSink
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True, quiet=True)
        self.ack_sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_ack"), dut.clk, dut.rst)
        self.ack_sink.log.setLevel("WARNING")
        if stalls:
            self.ack_sink.set_pause_generator(pause_pattern(random.Random(self.rng.random()), 0.4, 6))
        self.stalls = stalls
        self.offset = offset
        self.frozen = frozen
        self.arrivals = []
        self.upd, self.loss = [], []
        dut.now.value = NOW0 + offset
        dut.upd_ready.value = 1
        dut.loss_ready.value = 1
        cocotb.start_soon(self._clock_and_arrivals())
        cocotb.start_soon(self._collect("upd", self.upd, ((16, "pid"), (32, "owd"), (48, "now"))))
        cocotb.start_soon(self._collect("loss", self.loss,
                                        ((24, "flow"), (24, "seq"), (16, "pid"), (32, "owd"), (48, "now"))))

    async def _clock_and_arrivals(self):
        dut = self.dut
        cycle, first, now = 0, True, NOW0 + self.offset
        while True:
            await RisingEdge(dut.clk)
            if int(dut.rst.value):
                first = True
            elif int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                if first:
                    self.arrivals.append(now)
                first = bool(int(dut.s_axis_tlast.value))
            cycle += 0 if self.frozen else 1
            now = (NOW0 + self.offset + 4 * cycle) & ((1 << 48) - 1)
            dut.now.value = now

    async def _collect(self, name, out, fields):
        dut = self.dut
        valid, ready, payload = (getattr(dut, f"{name}_{s}") for s in ("valid", "ready", "payload"))
        rng = random.Random(self.rng.random())
        while True:
            await RisingEdge(dut.clk)
            if int(valid.value) and int(ready.value) and not int(dut.rst.value):
                v, item = int(payload.value), {}
                for width, field in fields:
                    item[field] = v & ((1 << width) - 1)
                    v >>= width
                out.append(item)
            ready.value = 0 if (self.stalls and rng.random() < 0.4) else 1

    def clear_outputs(self):
        self.arrivals.clear()
        self.upd.clear()
        self.loss.clear()
        self.ack_sink.clear()

    async def run_and_check(self, model, frames, *, extra_cycles=300):
        """Send ``frames``, wait for everything to leave, and compare all four outputs with ``model`` run at the
        recorded arrival times. Returns (errors, golden outputs per frame)."""
        start = len(self.arrivals)
        for f in frames:
            self.send(f)
        deadline = self.bench_cycle + self.wait_budget([bytes(len(f)) for f in frames])
        while len(self.arrivals) < start + len(frames) or not self.source.empty():
            assert self.bench_cycle < deadline, f"input stalled: {len(self.arrivals) - start} of {len(frames)} in"
            await RisingEdge(self.dut.clk)
        outs = [model.step(f, t) for f, t in zip(frames, self.arrivals[start:])]
        errors = []
        hosts = [o["host"] for o in outs if o["host"] is not None]
        acks = [o["ack"] for o in outs if o["ack"] is not None]
        deadline = self.bench_cycle + self.wait_budget(hosts + acks)
        for i, want in enumerate(hosts):
            got = bytes((await self.recv_frame(deadline, f"host frame {i}")).tdata)
            if got != want:
                errors.append(f"host frame {i} differs: {got[:60].hex()} against {want[:60].hex()}")
        for i, want in enumerate(acks):
            while self.ack_sink.empty():
                assert self.bench_cycle < deadline, f"ACK frame {i} of {len(acks)} never left m_ack"
                await RisingEdge(self.dut.clk)
            got = bytes(self.ack_sink.recv_nowait().tdata)
            if got != want:
                errors.append(f"ACK frame {i} differs: {got.hex()} against {want.hex()}")
        await ClockCycles(self.dut.clk, extra_cycles)
        for name, got in (("upd", self.upd), ("loss", self.loss)):
            want = [o[name] for o in outs if o[name] is not None]
            if got != want:
                errors.append(f"{name}: {len(got)} items, golden {len(want)}; first difference at "
                              f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)}")
            got.clear()
        if not self.ack_sink.empty() or not self.sink.empty():
            errors.append("frames left over")
        errors += await self.check_counters(model)
        return errors, outs


async def _setup(dut, *, stalls, seed, offset=0):
    tb = TB(dut, stalls=stalls, seed=seed, offset=offset)
    await tb.reset()
    return tb, LapsRxWireModel(**_params())


@cocotb.test()
async def frames_with_stalls(dut):
    """Mixed traffic (every bad input of the datasheet among it) with idle input and back-pressure on all four
    outputs: every output and counter as the golden model."""
    tb, model = await _setup(dut, stalls=True, seed=1)
    p = _params()
    frames = mixed_frames(tb.rng, 150, n_entries=p["n_entries"], k=p["k"], ipv6=p.get("ipv6", False))
    errors, outs = await tb.run_and_check(model, frames)
    v6 = [o["ack"][62] >> 7 for o in outs if o["ack"] and o["ack"][12:14] == b"\x86\xdd"]
    dut._log.info("%d ACKs, %d IPv6 (%d of probes)", sum(1 for o in outs if o["ack"]), len(v6), sum(v6))
    if p.get("ipv6") and not (0 < sum(v6) < len(v6)):
        errors.append(f"IPv6 ACKs of data and of probes expected, not {len(v6) - sum(v6)} and {sum(v6)}")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def clock_offset(dut):
    """The receiver's clock 3 us behind the sender's (a moderate offset): latencies below 3 us become "future"
    (latency 0, counted), the others are 3 us short; then a config write: ACKs off (counted), TTL 9."""
    p = _params()
    tb, model = await _setup(dut, stalls=False, seed=4, offset=-3000)
    rng = random.Random(7)
    frames = [data_frame(rng, time=NOW0 - rng.randrange(0, 6000), n_entries=p["n_entries"], k=p["k"])
              for _ in range(40)]
    errors, outs = await tb.run_and_check(model, frames)
    n_future = sum(1 for o in outs if o["ack"] and int.from_bytes(o["ack"][46:52], "big") == 0)
    if not n_future:
        errors.append("no sample came out as from the future: the test does not exercise the offset")
    cmd = {"table": 0, "index": 0, "data": 9 << 8}
    await tb.control(cmd)
    model.control(cmd)
    e2, _ = await tb.run_and_check(model, frames[:10])
    await tb.control({"table": 0, "index": 0, "data": 1 | 64 << 8})
    model.control({"table": 0, "index": 0, "data": 1 | 64 << 8})
    e3, _ = await tb.run_and_check(model, frames[10:20])
    assert not errors + e2 + e3, "\n".join((errors + e2 + e3)[:10])


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, no stalls: one beat taken per clock, every output as the golden model, and
    the ACK's first beat ``latency`` cycles after its data frame's first beat."""
    p = _params()
    tb, model = await _setup(dut, stalls=False, seed=2)
    frames = mixed_frames(tb.rng, 80, n_entries=p["n_entries"], k=p["k"], sizes=[0, 3, 60, 200, 1400, 4000],
                          long_probes=True, ipv6=p.get("ipv6", False))
    total = sum(-(-len(f) // 64) for f in frames)
    accepted = tb.count_accepted(total)
    errors, _ = await tb.run_and_check(model, frames)
    rate = sum(accepted) / len(accepted)
    if rate != 1.0:
        errors.append(f"{rate} beats per clock")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def ack_latency(dut):
    """One data frame alone per size: cycles from its first beat in to its ACK's first beat out."""
    tb, model = await _setup(dut, stalls=False, seed=3)
    p = _params()
    rng = random.Random(5)
    seen = []
    for size in (0, 10, 100, 1000):
        frame = data_frame(rng, payload_len=size, n_entries=p["n_entries"], k=p["k"])
        t_in = None
        tb.send(frame)
        for cycle in range(200):
            await RisingEdge(dut.clk)
            if t_in is None and int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                t_in = cycle
            if int(dut.m_ack_tvalid.value) and int(dut.m_ack_tready.value):
                seen.append(cycle - t_in)
                break
        await ClockCycles(dut.clk, 100)
        while not tb.sink.empty():
            tb.sink.recv_nowait()
        tb.ack_sink.clear()
    want = int(os.environ.get("LBPIPE_ACK_LATENCY", "0"))
    assert len(set(seen[1:])) == 1 and (not want or seen[1] == want), f"ACK first-beat latencies {seen}"
    dut._log.info("ACK first-beat latency %s", seen)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight: afterwards the counters read 0, no item or frame of before leaves, the ctl
    configuration written before survives (the TTL in IPv4 ACKs, the hop limit in IPv6 ones), and the rest of the
    traffic matches a freshly reset golden model."""
    p = _params()
    tb, model = await _setup(dut, stalls=True, seed=5)
    cmd = {"table": 0, "index": 0, "data": 1 | 33 << 8}
    await tb.control(cmd)
    model.control(cmd)
    await tb.reset_in_flight(mixed_frames(tb.rng, 30, n_entries=p["n_entries"], k=p["k"], ipv6=p.get("ipv6", False)),
                             20 + tb.rng.randrange(60))
    await ClockCycles(dut.clk, 5)
    tb.clear_outputs()
    model.reset()
    errors = []
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(len(model.stats()))]
    if any(counters):
        errors.append(f"counters after reset {counters}")
    frames = mixed_frames(tb.rng, 40, n_entries=p["n_entries"], k=p["k"], ipv6=p.get("ipv6", False))
    e, outs = await tb.run_and_check(model, frames)
    errors += e
    ttls = {o["ack"][21 if o["ack"][12:14] == b"\x86\xdd" else 22] for o in outs if o["ack"]}
    if ttls and ttls != {33}:
        errors.append(f"ACK TTLs after reset {ttls}: the configuration did not survive")
    assert not errors, "\n".join(errors[:10])


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace laps-rx-wire``: no commands, ``n_frames`` of :func:`mixed_frames` (send times around
    :data:`NOW0`, the clock value replay holds ``now`` at)."""
    return [], mixed_frames(random.Random(seed), n_frames, n_entries=params["n_entries"], k=params["k"],
                            ipv6=params.get("ipv6", False))


@cocotb.test()
async def replay(dut):
    """``lbpipe replay laps-rx-wire IN.pcap --engine rtl``: ``now`` held at :data:`NOW0` (the golden model's
    ``REPLAY_NOW``); the host frames and the ACK frames are written in the golden model's order (per input frame:
    its host frame, then its ACK), each stream in the order it left."""
    from lbpipe.sim.laps.rx_wire import REPLAY_NOW
    from lbpipe.trace import read_events, write_pcap
    assert REPLAY_NOW == NOW0
    tb = TB(dut, stalls=False, seed=1, frozen=True)
    rng = random.Random(int(os.environ.get("LBPIPE_SEED", "1") or 1))
    idle = float(os.environ.get("LBPIPE_IDLE", "0") or 0)
    bp = float(os.environ.get("LBPIPE_BACKPRESSURE", "0") or 0)
    if idle:
        tb.source.set_pause_generator(pause_pattern(random.Random(rng.random()), idle))
    if bp:
        tb.sink.set_pause_generator(pause_pattern(random.Random(rng.random()), bp))
        tb.ack_sink.set_pause_generator(pause_pattern(random.Random(rng.random()), bp))
    await tb.reset()
    model = LapsRxWireModel(**_params())
    for event in read_events(os.environ["LBPIPE_CTL"], allow_empty=True):
        model.control(event["ctl"])
    frames = await tb.replay_setup()
    plan = [model.step(f, NOW0) for f in frames]
    hosts, acks, quiet = [], [], 0
    deadline = tb.bench_cycle + int(tb.wait_budget(frames) / max(0.05, 1 - max(idle, bp))) + 2000
    while (quiet < 2000 or not tb.source.empty()) and tb.bench_cycle < deadline:
        await RisingEdge(dut.clk)
        quiet += 1
        for sink, out in ((tb.sink, hosts), (tb.ack_sink, acks)):
            if not sink.empty():
                out.append(bytes(sink.recv_nowait().tdata))
                quiet = 0
    for port, sent, key in (("m_axis", hosts, "host"), ("m_ack", acks, "ack")):
        want = sum(o[key] is not None for o in plan)
        # a frame on the wrong output would otherwise merge into the golden order unseen
        assert len(sent) == want, f"the RTL sent {len(sent)} frames on {port}, the golden model {want}"
    out, h, a = [], iter(hosts), iter(acks)
    for o in plan:
        for want, it in ((o["host"], h), (o["ack"], a)):
            if want is not None:
                out += [f for f in [next(it, None)] if f is not None]
    out += list(h) + list(a)
    write_pcap(os.environ["LBPIPE_PCAP_OUT"], out)


class _HostOnly:
    """The bench's view of the model: host frames on ``m_axis`` (ACKs leave on ``m_ack``, drained)."""

    def __init__(self, model, tb):
        self.model, self.tb = model, tb

    def process(self, frame):
        self.tb.ack_sink.clear()
        return [f for f in [self.model.step(frame, NOW0)["host"]] if f is not None]


@cocotb.test()
async def bench(dut):
    """``lbpipe bench laps-rx-wire``: per size, LAPS data frames back to back (each answered by an ACK on m_ack):
    beats per clock and host-frame first-beat latency (store-and-forward: grows with the size)."""
    p = _params()
    tb, model = await _setup(dut, stalls=False, seed=1)
    rng = random.Random(1)
    base = len(data_frame(rng, payload_len=0, anchors=[1, 2], n_entries=p["n_entries"], k=p["k"]))

    def make_frame(size, k):
        if size < base:          # no inner header: the LAPS frame padded (a trailer after its IP packet)
            f = data_frame(rng, anchors=[], inner=False, n_entries=p["n_entries"], k=p["k"])
            return f + bytes(size - len(f))
        return data_frame(rng, payload_len=size - base, anchors=[1, 2], n_entries=p["n_entries"], k=p["k"])
    await tb.size_bench(_HostOnly(model, tb), make_frame, latency=True)
