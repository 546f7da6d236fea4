"""cocotb testbench of PRO's receiver in the wire (parser -> QP classifier -> pro-ooo -> pro-nak).

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.pro.rx_wire.ProRxWire`, parameters in
``LBPIPE_PARAMS`` (JSON): frames on ``s_axis_*``, host frames from ``m_axis_*``, NAK frames from ``m_axis_nak_*``,
QP timeouts on ``tmo_*``, tables and counters through ``s_axil_*``.

Stimulus (:func:`loss_scenario`): a few QPs, each sending its PSNs in order over paths of different delays (so they
arrive reordered), some lost on their first transmission, every NACKed PSN retransmitted a round trip later, a few
duplicates, with non-RoCE, ACK, unknown-QP, truncated and runt frames mixed in; then QP timeouts until every loss
is recovered. Checks that do not come from the golden model: every frame leaves ``m_axis`` bit for bit and in order;
every NAK is well formed (scapy, test-side ICRC: :func:`lbpipe.tb.pro.test_nak.check_nak`) and addressed from its
QP's context; the NACKed (QP, PSN) pairs are exactly the lost ones, each once (so no PSN that arrived is NACKed);
the counters the scenario's construction predicts. Besides, every NAK and counter equals the golden model's.
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from lbpipe.sim.pro.rx_wire import ProRxWireModel, RxControlPlane
from lbpipe.tb.lib.harness import CLOCK_NS, pause_pattern, write_command
from lbpipe.tb.lib.packets import roce_ack, roce_data, sized_data
from lbpipe.tb.pro.test_nak import check_nak

BEAT = 64
QUIET = 64          # cycles with nothing moving that mean the wire is empty (more than its 33-cycle NAK latency)
N_COUNTERS = 14


def _params():
    return json.loads(os.environ["LBPIPE_PARAMS"])


# -- stimulus --------------------------------------------------------------------------------------------------------

def _qp_set(rng, params):
    """Four QPs with windows (one starting just below the PSN wrap, one IPv6 when the classifier holds IPv6), one
    QP installed in the classifier whose window is never created; NAK contexts with distinct requester QPNs."""
    n = params["n_qps"]
    idx = rng.sample(range(n - 1), 3) + [n - 1]
    qps = {}
    for k, q in enumerate(idx):
        ip6 = params["ipv6"] and k == 2
        qps[q] = dict(local_ip="fd00::7" if ip6 else f"10.0.{k}.2", remote_ip="fd00::1" if ip6 else f"10.1.{k}.1",
                      local_qpn=rng.randrange(1 << 24), first_psn=(1 << 24) - 5 if k == 1 else rng.randrange(1 << 20),
                      wnd=params["bitmap_len"] // 2, sport=rng.randrange(1 << 16),
                      ctx=dict(dmac=rng.getrandbits(48), smac=rng.getrandbits(48), sip=rng.getrandbits(32),
                               dip=rng.getrandbits(32), sport=rng.randrange(1 << 16), dqpn=0x100 * (k + 1) + k,
                               pkey=0xFFFF))
    return qps


def setup_commands(params, qps, rng):
    cp = RxControlPlane(n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"], ipv6=params["ipv6"])
    cmds = []
    for q, d in qps.items():
        cmds += cp.add_qp(q, local_ip=d["local_ip"], local_qpn=d["local_qpn"], first_psn=d["first_psn"], wnd=d["wnd"],
                          **d["ctx"])
    orphan = next(q for q in range(params["n_qps"]) if q not in qps)
    cmds += cp.classify(orphan, "10.0.9.9", 0x4242)        # a key whose window is never created
    # forged or stale commands: a KEY word above 4, tables 4 and 20 (nobody's), pro-ooo and pro-nak indices out
    # of range, pro-nak table 4 (counted as ignored), a table above 47
    cmds += [{"table": 0, "index": 7, "data": rng.getrandbits(64)},
             {"table": 4, "index": 0, "data": rng.getrandbits(64)},
             {"table": 20, "index": 1, "data": rng.getrandbits(64)},
             {"table": 16, "index": (1 << 24) - 1, "data": 5},
             {"table": 33, "index": params["n_qps"], "data": 1},
             {"table": 36, "index": 0, "data": 1},
             {"table": 200, "index": 0, "data": 1}]
    return cmds, orphan


def _data(d, psn, size=None, rng=None):
    psn %= 1 << 24
    if size is None:
        size = rng.choice([0, 8, 100, 300, 1024]) if rng else 16
        return bytes(roce_data(d["remote_ip"], d["local_ip"], d["sport"], d["local_qpn"], psn, payload_len=size))
    return sized_data(size, d["remote_ip"], d["local_ip"], d["sport"], d["local_qpn"], psn)


def _junk(rng, qps, orphan_frame):
    """A frame that does not reach a window (returns ``(frame, reaches_window)``): non-RoCE, an ACK, a data frame
    of an unknown QPN, a truncated data frame, a runt; or a data frame of the QP without a window (it reaches the
    window stage, which counts it unknown)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    d = rng.choice(list(qps.values()))
    r = rng.randrange(6)
    if r == 0:
        return bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=9, dport=53) / Raw(b"q" * 30)), False
    if r == 1:
        return bytes(roce_ack(d["remote_ip"], d["local_ip"], d["sport"], d["local_qpn"], 5)), False
    if r == 2:
        return bytes(roce_data(d["remote_ip"], d["local_ip"], d["sport"], d["local_qpn"] ^ 0x800000, 3)), False
    if r == 3:
        whole = _data(d, rng.randrange(1 << 24), rng=rng)
        return whole[:rng.randrange(1, len(whole) - 3)], False
    if r == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 14))), False
    return orphan_frame, True


def loss_scenario(seed, params, *, n_slots=160, loss=0.05, delays=(0, 1, 2, 4, 6), rtt=5, junk=0.08):
    """``(commands, events, truth)``: ``events`` a list of ``("frame", bytes)`` and ``("tmo", qp)``; ``truth``
    what the construction says: the lost (QP, PSN) pairs, the QPs, counts of frames by fate.

    The golden model is used here only to know when a PSN is NACKed, so that its retransmission can be sent a round
    trip later (the stimulus); what the test expects of the NAKs comes from ``truth``."""
    rng = random.Random(seed)
    qps = _qp_set(rng, params)
    cmds, orphan = setup_commands(params, qps, rng)
    model = ProRxWireModel(**params)
    for c in cmds:
        model.control(c)
    by_dqpn = {d["ctx"]["dqpn"]: q for q, d in qps.items()}
    orphan_frame = bytes(roce_data("10.1.9.1", "10.0.9.9", 77, 0x4242, 1))
    events, lost, nacked, dups = [], set(), set(), 0
    truth = {"qps": qps, "lost": lost, "passed": 0, "orphan": 0, "tmo_known": 0, "tmo_unknown": 0}
    nxt = {q: d["first_psn"] for q, d in qps.items()}
    pending = []          # (slot, order, qp, psn)
    order = 0
    now = 0

    def retransmit(naks):
        nonlocal order
        for nak in naks:
            q, psn = by_dqpn[int.from_bytes(nak[47:50], "big")], int.from_bytes(nak[51:54], "big")
            nacked.add((q, psn))
            pending.append((now + rtt, order, q, psn))
            order += 1

    def deliver(due):
        for _, _, dq, dpsn in sorted(due):
            frame = _data(qps[dq], dpsn, rng=rng)
            events.append(("frame", frame))
            retransmit(model.receive(frame)[1])

    qlist = list(qps)
    for now in range(n_slots):
        q = qlist[rng.randrange(len(qlist))]
        psn = nxt[q]
        nxt[q] = (psn + 1) % (1 << 24)
        if rng.random() < loss:
            lost.add((q, psn))
        else:
            pending.append((now + rng.choice(delays), order, q, psn))
            order += 1
            if rng.random() < 0.03:
                pending.append((now + rng.choice(delays) + 2, order, q, psn))
                order += 1
                dups += 1
        due = [p for p in pending if p[0] <= now]
        pending = [p for p in pending if p[0] > now]
        deliver(due)
        if rng.random() < junk:
            frame, window = _junk(rng, qps, orphan_frame)
            truth["orphan" if window else "passed"] += 1
            events.append(("frame", frame))
            model.receive(frame)
    # each QP's last two PSNs arrive (a loss at the very tail has nothing after it to be older than: the sender's
    # own timer resends it, no NACK can name it)
    for q in qlist:
        for _ in range(2):
            pending.append((n_slots + 1, order, q, nxt[q]))
            order += 1
            nxt[q] = (nxt[q] + 1) % (1 << 24)
    # recovery: deliver what is in flight; then, while a loss has not been NACKed, time its QP out
    idle = qlist[0]           # after the recovery no QP misses a PSN
    for now in range(n_slots, n_slots + 400):
        due, pending = pending, []
        deliver(due)
        waiting = sorted({q for q, psn in lost if (q, psn) not in nacked})
        if not waiting and not pending:
            break
        for q in waiting:
            events.append(("tmo", q))
            truth["tmo_known"] += 1
            retransmit(model.timeout(q))
    # a timeout of an idle QP (no loss: harmless) and of a QP index without a window (counted unknown)
    events += [("tmo", idle), ("tmo", orphan)]
    truth["tmo_known"] += 1
    truth["tmo_unknown"] += 1
    truth["dups"] = dups
    return cmds, events, truth


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace pro-rx-wire``: :func:`loss_scenario`'s commands and frames (its timeouts left out: a pcap
    file holds frames only), about ``n_frames`` of them."""
    cmds, events, _ = loss_scenario(seed, params, n_slots=max(8, n_frames), loss=0.1)
    return cmds, [e[1] for e in events if e[0] == "frame"][:n_frames]


# -- bench -----------------------------------------------------------------------------------------------------------

class RxBench:
    """Clock, reset, cocotbext-axi source on ``s_axis``, sinks on ``m_axis`` (host) and ``m_axis_nak``, the
    AXI4-Lite master, and a driver of ``tmo``. ``pauses`` = (input, host sink, NAK sink) pause probabilities."""

    def __init__(self, dut, *, seed=1, pauses=None):
        from cocotb.clock import Clock
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink, AxiStreamSource
        self.dut = dut
        self.rng = random.Random(seed)
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        dut.rst.value = 1
        dut.tmo_valid.value = 0
        dut.tmo_payload.value = 0
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.host = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.naks = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_nak"), dut.clk, dut.rst)
        for side in (self.source, self.host, self.naks):
            side.log.setLevel("WARNING")
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        if pauses:
            for side, p in zip((self.source, self.host, self.naks), pauses):
                if p:
                    side.set_pause_generator(pause_pattern(random.Random(self.rng.random()), p))
        self.cycle = 0
        self.log = {"in_first": [], "in_last": [], "out_first": [], "nak": [], "accepted": []}
        cocotb.start_soon(self._watch())

    async def _watch(self):
        dut = self.dut
        first_in, first_out = True, True
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                self.log["accepted"].append(self.cycle)
                if first_in:
                    self.log["in_first"].append(self.cycle)
                first_in = bool(int(dut.s_axis_tlast.value))
                if first_in:
                    self.log["in_last"].append(self.cycle)
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
                if first_out:
                    self.log["out_first"].append(self.cycle)
                first_out = bool(int(dut.m_axis_tlast.value))
            if int(dut.m_axis_nak_tvalid.value) and int(dut.m_axis_nak_tready.value):
                self.log["nak"].append(self.cycle)

    async def reset(self, cycles=4):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)
        await ClockCycles(self.dut.clk, min(_params()["n_qps"], 1024) + 4)     # pro-ooo's sweep

    async def control(self, cmds, model=None):
        for cmd in cmds:
            await write_command(self.axil, cmd)
            if model is not None:
                model.control(cmd)

    async def counters(self):
        return [await self.axil.read_dword(0x40 + 4 * i) for i in range(N_COUNTERS)]

    async def quiet(self, cycles=QUIET, limit=200_000):
        """Wait until nothing has moved for ``cycles`` cycles (no beat offered at any port, ``tmo`` idle)."""
        dut, still = self.dut, 0
        for _ in range(limit):
            await RisingEdge(dut.clk)
            busy = (int(dut.s_axis_tvalid.value) or int(dut.m_axis_tvalid.value) or int(dut.m_axis_nak_tvalid.value)
                    or not self.source.empty())
            still = 0 if busy else still + 1
            if still >= cycles:
                return
        raise AssertionError("the wire never went quiet")

    async def timeout(self, qp):
        dut = self.dut
        dut.tmo_payload.value = qp
        dut.tmo_valid.value = 1
        while True:
            await RisingEdge(dut.clk)
            if int(dut.tmo_ready.value):
                break
        dut.tmo_valid.value = 0

    def send(self, frame):
        from cocotbext.axi import AxiStreamFrame
        self.source.send_nowait(AxiStreamFrame(frame, tuser=0))

    async def play(self, events):
        """Frames back to back (as the source's pauses allow); a timeout only on a quiet wire, so its place among
        the frames' events is the one in ``events``."""
        for kind, value in events:
            if kind == "frame":
                self.send(value)
            else:
                await self.quiet()
                await self.timeout(value)
                await self.quiet(8)

    async def collect(self, n_host, cycles=QUIET):
        """Wait for ``n_host`` host frames and the wire to go quiet; returns ``(host frames, NAK frames)``."""
        host, naks = [], []
        deadline = self.cycle + 50 * (n_host + 100) + 20_000
        while len(host) < n_host:
            if self.cycle > deadline:
                raise AssertionError(f"only {len(host)} of {n_host} frames left m_axis by cycle {self.cycle}")
            while not self.host.empty():
                host.append(bytes(self.host.recv_nowait().tdata))
            await RisingEdge(self.dut.clk)
        await self.quiet(cycles)
        while not self.host.empty():
            host.append(bytes(self.host.recv_nowait().tdata))
        while not self.naks.empty():
            naks.append(bytes(self.naks.recv_nowait().tdata))
        return host, naks


def check_against_truth(params, truth, frames, host, naks):
    """The checks that do not come from the golden model (see the module docstring)."""
    errors = []
    if host != frames:
        bad = next((i for i, (a, b) in enumerate(zip(host, frames)) if a != b), min(len(host), len(frames)))
        errors.append(f"m_axis: {len(host)} frames for {len(frames)} in, first difference at frame {bad}")
    by_dqpn = {d["ctx"]["dqpn"]: (q, d) for q, d in truth["qps"].items()}
    seen = []
    for k, nak in enumerate(naks):
        dqpn = int.from_bytes(nak[47:50], "big") if len(nak) >= 50 else None
        if dqpn not in by_dqpn:
            errors.append(f"NAK {k}: requester QPN {dqpn} is no QP's")
            continue
        q, d = by_dqpn[dqpn]
        psn = int.from_bytes(nak[51:54], "big")
        ip = lambda v: ".".join(str(v >> s & 0xFF) for s in (24, 16, 8, 0))  # noqa: E731
        errors += [f"NAK {k}: {e}" for e in check_nak(nak, psn=psn, dqpn=dqpn, sip=ip(d["ctx"]["sip"]),
                                                        dip=ip(d["ctx"]["dip"]))]
        if nak[:6] != d["ctx"]["dmac"].to_bytes(6, "big") or nak[34:36] != d["ctx"]["sport"].to_bytes(2, "big"):
            errors.append(f"NAK {k}: MAC or UDP port not the context's")
        seen.append((q, psn))
    if len(seen) != len(set(seen)):
        errors.append(f"a PSN NACKed twice: {sorted(p for p in seen if seen.count(p) > 1)[:5]}")
    if set(seen) != truth["lost"]:
        errors.append(f"NACKed but not lost (had arrived): {sorted(set(seen) - truth['lost'])[:5]}; lost but not "
                      f"NACKed: {sorted(truth['lost'] - set(seen))[:5]}")
    return errors


def truth_counters(truth, counters):
    """Counters the construction predicts: pro-ooo NACKs and pro-nak frames = losses, timeouts, unknown-QP events
    (the orphan QP's frames and its timeout), frames not given to the window (the junk)."""
    errors = []
    n = len(truth["lost"])
    want = {5: truth["tmo_known"], 6: n, 9: truth["orphan"] + truth["tmo_unknown"], 10: n, 11: 0, 13: truth["passed"]}
    for i, v in want.items():
        if counters[i] != v:
            errors.append(f"counter {i} is {counters[i]}, the scenario says {v}")
    if counters[12] != 2:
        errors.append(f"pro-nak ignored commands {counters[12]}, expected 2 (the forged index and table)")
    return errors


async def _run_scenario(tb, params, seed, **kw):
    cmds, events, truth = loss_scenario(seed, params, **kw)
    model = ProRxWireModel(**params)
    await tb.control(cmds, model)
    frames = [v for k, v in events if k == "frame"]
    expected = []
    for kind, value in events:
        expected += model.receive(value)[1] if kind == "frame" else model.timeout(value)
    await tb.play(events)
    host, naks = await tb.collect(len(frames))
    errors = check_against_truth(params, truth, frames, host, naks)
    if naks != expected:
        errors.append(f"{len(naks)} NAK frames, the golden model {len(expected)}; first difference at "
                      f"{next((i for i, (a, b) in enumerate(zip(naks, expected)) if a != b), None)}")
    counters = await tb.counters()
    if counters != model.stats():
        errors.append(f"counters {counters}, golden model {model.stats()}")
    errors += truth_counters(truth, counters)
    return errors, truth, model


@cocotb.test()
async def recovery(dut):
    """Reordering and loss, no pauses: frames, NAKs, counters as the scenario says and as the golden model."""
    params = _params()
    tb = RxBench(dut, seed=1)
    await tb.reset()
    errors, truth, _ = await _run_scenario(tb, params, seed=int(os.environ.get("RX_SEED", "1")))
    assert len(truth["lost"]) >= 3, "the scenario lost too little to test anything"
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def recovery_stalls(dut):
    """The same with idle input and back-pressure on both outputs (the NAK side harder than the host side)."""
    params = _params()
    tb = RxBench(dut, seed=2, pauses=(0.3, 0.3, 0.6))
    await tb.reset()
    errors, _, _ = await _run_scenario(tb, params, seed=int(os.environ.get("RX_SEED", "1")) + 1)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def nak_output_blocked(dut):
    """``m_axis_nak`` not ready for 3,000 cycles while a QP (wnd 0, first PSN 0) receives 1, 0, 3, 2, 5, 4, ...: each
    odd PSN finds the head (the even PSN before it) missing and older than the tail, so NACKs it; each even PSN lets
    the head pass two. By hand: NAKs for 0, 2, 4, ..., 198, in order, each once. The NAKs fill the event FIFO and
    pro-nak, the wire stops taking frames (``s_axis`` waits, nothing is dropped), the frames already taken reach
    the host; when the NAK output opens, every NAK leaves and every frame is as it came."""
    params = _params()
    tb = RxBench(dut, seed=3)
    await tb.reset()
    blocked = [True]

    def gate():
        while True:
            yield blocked[0]
    tb.naks.set_pause_generator(gate())
    qps = _qp_set(random.Random(3), params)
    q, d = next(iter(qps.items()))
    cp = RxControlPlane(n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"], ipv6=params["ipv6"])
    cmds = cp.add_qp(q, local_ip=d["local_ip"], local_qpn=d["local_qpn"], first_psn=0, wnd=0, **d["ctx"])
    model = ProRxWireModel(**params)
    await tb.control(cmds, model)
    frames = [_data(d, 2 * k + 1 - j, 64 if j else 200) for k in range(100) for j in (0, 1)]
    expected = []
    for f in frames:
        expected += model.receive(f)[1]
        tb.send(f)
    await ClockCycles(dut.clk, 3000)
    errors = []
    if not int(dut.m_axis_nak_tvalid.value):
        errors.append("no NAK waiting while the NAK output is blocked")
    if tb.source.empty():
        errors.append("every frame was taken while no NAK could leave: NAKs were dropped or buffered without bound")
    blocked[0] = False
    host, naks = await tb.collect(len(frames))
    if host != frames:
        errors.append("m_axis frames differ from the frames sent")
    got = [int.from_bytes(n[51:54], "big") for n in naks]
    if got != list(range(0, 200, 2)):
        errors.append(f"NACKed PSNs {got[:8]}... ({len(got)}), by hand 0, 2, ..., 198")
    if naks != expected:
        errors.append(f"{len(naks)} NAKs, golden model {len(expected)}")
    errors += [f"NAK {k}: {e}" for k, n in enumerate(naks[:3]) for e in check_nak(n, psn=2 * k, dqpn=d["ctx"]["dqpn"])]
    assert not errors, "\n".join(errors)


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames and NAKs in flight. Right after it, before anything is written: counters 0, and a data frame
    of a QP that had a window passes unchanged and counts as an unknown QP (pro-ooo swept its windows; the
    classifier kept its key). Then the windows are created again (NAK contexts and keys are not rewritten: they
    survived) and a lossy run gives the NAKs the scenario and the golden model say."""
    params = _params()
    tb = RxBench(dut, seed=5)
    await tb.reset()
    cmds, events, _ = loss_scenario(21, params, n_slots=80, loss=0.1)
    await tb.control(cmds)
    for k, v in events:
        if k == "frame":
            tb.send(v)
    await ClockCycles(dut.clk, 40 + tb.rng.randrange(80))
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    tb.source.clear()
    tb.host.clear()
    tb.naks.clear()
    dut.rst.value = 0
    await ClockCycles(dut.clk, min(params["n_qps"], 1024) + 4)
    errors = []
    counters = await tb.counters()
    if counters != [0] * N_COUNTERS:
        errors.append(f"counters after reset {counters}")
    qps = _qp_set(random.Random(21), params)
    q, d = next(iter(qps.items()))
    probe = _data(d, d["first_psn"] + 1)
    tb.send(probe)
    host, naks = await tb.collect(1)
    counters = await tb.counters()
    if host != [probe] or naks:
        errors.append(f"after reset: {len(host)} host frames (probe {'equal' if host == [probe] else 'changed'}), "
                      f"{len(naks)} NAKs")
    if counters[0] != 1 or counters[9] != 1 or counters[3:9] != [0] * 6:
        errors.append(f"after reset the probe counted {counters}: expected a classifier hit and an unknown QP")
    # windows again, nothing else: contexts and keys survived
    model = ProRxWireModel(**params)
    for c in cmds:
        model.control(c)
    model.reset()
    model.receive(probe)
    windows = [c for c in cmds if 16 <= c["table"] < 32]
    await tb.control(windows, model)
    cmds2, events2, truth2 = loss_scenario(21, params, n_slots=80, loss=0.1)
    assert cmds2 == cmds
    frames = [v for k, v in events2 if k == "frame"]
    expected = []
    for kind, value in events2:
        expected += model.receive(value)[1] if kind == "frame" else model.timeout(value)
    await tb.play(events2)
    host, naks = await tb.collect(len(frames))
    errors += check_against_truth(params, truth2, frames, host, naks)
    if naks != expected:
        errors.append(f"after reset: {len(naks)} NAKs, golden {len(expected)}")
    if await tb.counters() != model.stats():
        errors.append("counters after the rerun differ from the golden model's")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def timing(dut):
    """Unthrottled: a frame's first beat leaves ``latency`` (1) cycles after it came, at 64 B and 1,500 B, alone;
    a frame whose event NACKs gets its NAK ``LBPIPE_NAK_LATENCY`` cycles after its last beat was taken; a timeout's
    NAK 18 cycles after ``tmo`` was taken. Window by hand: QP created expecting PSN 100 with wnd 0, so PSN 101
    NACKs 100, PSN 103 after 100's retransmission NACKs nothing (101 arrived; 102 is the head, missing, 103 - 102 =
    1 > 0: NACK 102), and a timeout then has nothing new to NACK."""
    params = _params()
    tb = RxBench(dut, seed=4)
    await tb.reset()
    qps = _qp_set(random.Random(4), params)
    q, d = next(iter(qps.items()))
    d = dict(d, first_psn=100, wnd=0)
    cp = RxControlPlane(n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"], ipv6=params["ipv6"])
    await tb.control(cp.add_qp(q, local_ip=d["local_ip"], local_qpn=d["local_qpn"], first_psn=100, wnd=0, **d["ctx"]))
    errors = []
    want_nak = int(os.environ["LBPIPE_NAK_LATENCY"])
    for psn, size, nack in ((101, 64, 100), (100, 1500, None), (103, 1500, 102), (102, 64, None)):
        n_in, n_nak = len(tb.log["in_first"]), len(tb.log["nak"])
        frame = _data(d, psn, size)
        tb.send(frame)
        host, naks = await tb.collect(1)
        span = tb.log["out_first"][n_in] - tb.log["in_first"][n_in]
        if span != 1 or host != [frame]:
            errors.append(f"PSN {psn}: first beat out {span} cycles after in (datasheet: 1)")
        got = [int.from_bytes(n[51:54], "big") for n in naks]
        if got != ([nack] if nack is not None else []):
            errors.append(f"PSN {psn}: NACKs {got}, by hand {nack}")
        elif nack is not None and tb.log["nak"][n_nak] - tb.log["in_last"][n_in] != want_nak:
            errors.append(f"PSN {psn}: NAK {tb.log['nak'][n_nak] - tb.log['in_last'][n_in]} cycles after the last "
                          f"beat (datasheet: {want_nak})")
    await tb.timeout(q)
    host, naks = await tb.collect(0)
    if naks:
        errors.append("a timeout of a QP with nothing missing sent a NAK")
    assert not errors, "\n".join(errors)


@cocotb.test()
async def replay(dut):
    """``lbpipe replay pro-rx-wire IN.pcap --engine rtl``: the commands, then one frame at a time (each frame, then
    the NAK frames its event sent, the golden model's order), idle input and back-pressure on both outputs as
    ``LBPIPE_IDLE`` and ``LBPIPE_BACKPRESSURE`` say."""
    from lbpipe.trace import read_events, read_pcap, write_pcap
    idle = float(os.environ.get("LBPIPE_IDLE", "0") or 0)
    bp = float(os.environ.get("LBPIPE_BACKPRESSURE", "0") or 0)
    tb = RxBench(dut, seed=int(os.environ.get("LBPIPE_SEED", "1") or 1), pauses=(idle, bp, bp))
    await tb.reset()
    await tb.control([e["ctl"] for e in read_events(os.environ["LBPIPE_CTL"], allow_empty=True)])
    out = []
    for frame in read_pcap(os.environ["LBPIPE_PCAP_IN"]):
        tb.send(frame)
        host, naks = await tb.collect(1)
        out += host + naks
    write_pcap(os.environ["LBPIPE_PCAP_OUT"], out)


@cocotb.test()
async def bench(dut):
    """``lbpipe bench pro-rx-wire``: per size of ``LBPIPE_BENCH_SIZES``, one frame alone then 48 back to back, in-order
    data frames of two QPs with windows of ``wnd`` 0, each QP's PSNs in swapped pairs (p + 1, p, p + 3, p + 2, ...:
    every other frame of a QP NACKs the PSN before it, so NAKs leave as the frames pass); every frame and NAK
    checked against the golden model; beats accepted per clock, first-beat latency and NAKs to
    ``LBPIPE_BENCH_OUT``."""
    params = _params()
    tb = RxBench(dut, seed=1)
    await tb.reset()
    qps = _qp_set(random.Random(7), params)
    pair = list(qps.items())[:2]
    model = ProRxWireModel(**params)
    cp = RxControlPlane(n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"], ipv6=params["ipv6"])
    for q, d in pair:
        await tb.control(cp.add_qp(q, local_ip=d["local_ip"], local_qpn=d["local_qpn"], first_psn=d["first_psn"],
                                   wnd=0, **d["ctx"]), model)
    sent = {q: 0 for q, _ in pair}
    results, k = [], 0

    def make(size):
        nonlocal k
        q, d = pair[k % 2]
        k += 1
        psn = d["first_psn"] + (sent[q] ^ 1)
        sent[q] += 1
        return _data(d, psn, max(size, 64 if ":" not in d["local_ip"] else 84))
    for size in json.loads(os.environ["LBPIPE_BENCH_SIZES"]):
        first = len(tb.log["in_first"])
        frame = make(size)
        want = model.receive(frame)[1]
        tb.send(frame)
        host, naks = await tb.collect(1)
        assert host == [frame] and naks == want, f"{size}-byte frame alone"
        alone = tb.log["out_first"][first] - tb.log["in_first"][first]
        count = 48
        first, first_beat = len(tb.log["in_first"]), len(tb.log["accepted"])
        frames = [make(size) for _ in range(count)]
        want = []
        for f in frames:
            want += model.receive(f)[1]
            tb.send(f)
        host, naks = await tb.collect(count)
        assert host == frames and naks == want, f"{size}-byte frames differ from the golden model"
        accepted = tb.log["accepted"][first_beat:]
        spans = [o - i for i, o in zip(tb.log["in_first"][first:], tb.log["out_first"][first:])]
        beats = sum(-(-len(f) // BEAT) for f in frames)
        cycles = accepted[-1] - accepted[0] + 1
        results.append({"size": size, "frames": count, "beats": beats, "cycles": cycles,
                        "beats_per_clock": beats / cycles, "first_beat_latency": alone,
                        "first_beat_latency_max": max(spans), "naks": len(naks)})
    with open(os.environ["LBPIPE_BENCH_OUT"], "w") as f:
        json.dump(results, f)
