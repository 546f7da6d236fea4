"""cocotb testbench of PRO's sender in the wire (parser -> QP classifier -> round robin -> deparser).

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.pro.wire.ProTxWire`, parameters in
``LBPIPE_PARAMS`` (JSON). Every output frame is compared with the golden model; a RoCEv2 frame's ICRC is checked with
``tb/lib/packets.py``'s :func:`icrc` (computed from the frame's bytes, not by the deparser's CRC), and
:func:`hand_algorithm1` re-derives Algorithm 1 for a hand-set QP set to predict the source ports' low 12 bits.
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from lbpipe.sim.pro.wire import ProTxWireModel, TxControlPlane
from lbpipe.tb.lib.harness import AxisBench
from lbpipe.tb.lib.packets import RC_RDMA_WRITE_MIDDLE, RC_SEND_ONLY, icrc, roce_ack, roce_cnp, roce_data, sized_data

BEAT = 64


def _params():
    return json.loads(os.environ["LBPIPE_PARAMS"])


def program(rng, *, n_qps, n_tors, m_paths, buckets, ways, ipv6, **_):
    """Random seeds and PathIDs, then up to 5 QPs installed and joined, one installed but never joined (its
    frames miss in the round robin), and forged commands. Returns ``(commands, qps)``, ``qps`` a list of (dst_ip, dqpn, sport,
    joined)."""
    cp = TxControlPlane(n_qps=n_qps, n_tors=n_tors, buckets=buckets, ways=ways, ipv6=ipv6)
    cmds = []
    for t in range(n_tors):
        cmds += cp.seed(t, rng.randrange(m_paths))
    for t in range(n_tors):                  # every PathID: the table outlives reset and earlier tests
        for p in range(m_paths):
            cmds += cp.path_id(t, p, rng.randrange(1 << 12))
    qps = []
    for k, q in enumerate(rng.sample(range(n_qps), min(n_qps, 6))):
        dst = f"10.{1 + k}.0.{rng.randrange(1, 250)}" if (k != 4 or not ipv6) else "fd00::9"
        dqpn, sport = rng.randrange(1 << 24), rng.randrange(1 << 16)
        tor = rng.randrange(n_tors)
        add = cp.add_qp(q, tor, dst, dqpn)
        joined = k != 5
        cmds += add if joined else add[:-1]
        qps.append((dst, dqpn, sport, joined))
    # forged or stale commands, each ignored (or counted as rejected by the round robin): a KEY word above 4, an
    # INSERT and a DELETE out of range, classifier tables 4 to 15, round-robin tables 20 to 31, tables above 31
    cmds += [{"table": 0, "index": rng.randrange(5, 1 << 24), "data": rng.randrange(1 << 64)},
             {"table": 1, "index": rng.randrange(ways * buckets, 1 << 24), "data": rng.randrange(1 << 24)},
             {"table": 2, "index": rng.randrange(ways * buckets, 1 << 24), "data": 0},
             {"table": rng.randrange(4, 16), "index": rng.randrange(1 << 24), "data": rng.randrange(1 << 64)},
             {"table": rng.randrange(20, 32), "index": rng.randrange(1 << 24), "data": rng.randrange(1 << 64)},
             {"table": rng.randrange(32, 256), "index": rng.randrange(1 << 24), "data": rng.randrange(1 << 64)}]
    return cmds, qps


def frames_for(rng, count, qps, sizes=None):
    """Data frames of the QPs (many sizes, VLAN, non-zero UDP checksums), of unknown QPs, ACKs, CNPs, non-RoCE."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    frames = []
    for n in range(count):
        dst, dqpn, sport, _ = qps[rng.randrange(len(qps))]
        size = sizes[n % len(sizes)] if sizes else rng.choice([0, 0, 3, 16, 200, 1024, 4096])
        src = "fd00::1" if ":" in dst else "10.0.0.1"
        r = rng.random()
        if r < 0.7:
            opts = {}
            if rng.random() < 0.15:
                opts["vlan"] = 5
            if rng.random() < 0.15 and ":" not in dst:
                opts["udp_chksum"] = rng.randrange(1, 1 << 16)
            frame = roce_data(src, dst, sport, dqpn, rng.randrange(1 << 24),
                              opcode=rng.choice([RC_SEND_ONLY, RC_RDMA_WRITE_MIDDLE]), payload_len=size, **opts)
        elif r < 0.8:
            frame = roce_data(src, dst, sport, (dqpn + 1) % (1 << 24), 7, payload_len=size)   # unknown QP
        elif r < 0.87:
            frame = roce_ack(src, dst, sport, dqpn, 3)
        elif r < 0.92:
            frame = roce_cnp(src, dst, sport, dqpn)
        else:
            frame = Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / \
                rng.choice([TCP(sport=80, dport=1234), UDP(sport=1, dport=53)]) / Raw(b"y" * size)
        frames.append(bytes(frame))
    return frames


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace pro-tx-wire``: :func:`program`'s commands and ``n_frames`` frames of :func:`frames_for`."""
    rng = random.Random(seed)
    cmds, qps = program(rng, **params)
    return cmds, frames_for(rng, n_frames, qps)


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True)

    async def check_frames(self, expected):
        """As the harness's, and a frame that differs says where (the source port and the first byte)."""
        from lbpipe.tb.lib.packets import classify
        errors = []
        for i, want in enumerate(expected):
            got = bytes((await self.recv(f"output frame {i}")).tdata)
            if got != want:
                at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), None)
                errors.append(f"output frame {i} ({len(want)} bytes): differs from the golden model at byte {at} "
                              f"({len(got)} bytes; {got[30:40].hex()} against {want[30:40].hex()})")
            elif classify(got)["kind"] != 0 and got[-4:] != icrc(got):
                errors.append(f"output frame {i}: ICRC {got[-4:].hex()} is not the frame's {icrc(got).hex()}")
        return errors


async def _setup(dut, *, stalls, seed):
    params = _params()
    tb = TB(dut, stalls=stalls, seed=seed)
    await tb.reset()
    await ClockCycles(dut.clk, params["n_qps"] + 4)          # the round robin's sweep
    model = ProTxWireModel(**params)
    cmds, qps = program(tb.rng, **params)
    for cmd in cmds:
        await tb.control(cmd)
        model.control(cmd)
    return tb, model, params, cmds, qps


@cocotb.test()
async def frames_with_stalls(dut):
    """Mixed traffic with random idle input and output back-pressure: every frame and counter as the golden model."""
    tb, model, _, _, qps = await _setup(dut, stalls=True, seed=1)
    frames = frames_for(tb.rng, 120, qps)
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, no stalls: one beat accepted per clock, every frame as the golden model."""
    tb, model, _, _, qps = await _setup(dut, stalls=False, seed=2)
    frames = frames_for(tb.rng, 100, qps, sizes=[0, 1, 3, 50, 200, 960, 1400, 4000, 8000])
    expected = [model.process(f) for f in frames]
    accepted = tb.count_accepted(sum((len(f) + BEAT - 1) // BEAT for f in frames))
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])
    rate = sum(accepted) / len(accepted)
    assert rate == 1.0, f"{rate} beats per clock"


@cocotb.test()
async def replay(dut):
    """``lbpipe replay pro-tx-wire IN.pcap --engine rtl``."""
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    await ClockCycles(dut.clk, _params()["n_qps"] + 4)
    await tb.replay()


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight. Right after it, before anything is written, a data frame of a QP that was
    joined must pass unchanged (reset clears the round robin's QP state; the classifier keeps its table) and count
    as a round-robin miss; after the joins and seeds are written again every frame is as the golden model says."""
    tb, model, params, cmds, qps = await _setup(dut, stalls=False, seed=5)
    await tb.reset_in_flight(frames_for(tb.rng, 30, qps), 30 + tb.rng.randrange(60))
    await ClockCycles(dut.clk, params["n_qps"] + 4)
    model.reset()
    dst, dqpn, sport, _ = next(q for q in qps if q[3])
    probe = bytes(roce_data("fd00::1" if ":" in dst else "10.0.0.1", dst, sport, dqpn, 1, payload_len=100))
    tb.send(probe)
    got = bytes((await tb.recv("the data frame sent after reset")).tdata)
    errors = []
    if got != probe:
        errors.append("a data frame right after reset was rewritten: the round robin's QP state survived")
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(11)]
    if counters != [1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]:
        errors.append(f"counters after reset and one frame {counters}, expected [1,0,0, 0,1,0, 0,0,0, 0,0]")
    assert model.process(probe) == probe
    for cmd in cmds:
        if cmd["table"] >= 16:                 # joins, seeds, PathIDs again; the classifier kept its table
            await tb.control(cmd)
            model.control(cmd)
    frames = frames_for(tb.rng, 40, qps)
    expected = [model.process(f) for f in frames]
    for f in frames:
        tb.send(f)
    errors += await tb.check_frames(expected)
    errors += await tb.check_counters(model)
    await ClockCycles(dut.clk, 50)
    if not tb.sink.empty():
        errors.append("frames left over after the reset")
    assert not errors, "\n".join(errors[:10])


def hand_algorithm1(sends, qp_tor, seeds, m):
    """Algorithm 1 (batch 1, M a power of two) written again from the paper: the path index of every send, in
    order. ``sends`` is a list of QP names; every QP in ``qp_tor`` (QP name -> ToR joined) is active, whether it
    sends or not."""
    counter = dict(seeds)
    active = {}
    for q, t in qp_tor.items():
        active[t] = active.get(t, 0) + 1
    current, out = {}, []
    for q in sends:
        t = qp_tor[q]
        if q not in current:
            path = counter[t] % m
        else:
            span = active[t] if active[t] % 2 else active[t] + 1
            path = (current[q] + span) % m
        current[q] = path
        counter[t] = (path + 1) % m
        out.append(path)
    return out


@cocotb.test()
async def algorithm1_ports(dut):
    """A hand-set QP set (batch 1): QPs a, b, c toward ToR 1, d toward ToR 2, e in the classifier as ToR 1 but
    joined toward ToR 2 (a stale entry: passes unchanged), and frames of every size class (64 B, odd sizes, 9,216 B),
    interleaved with ACKs, CNPs, non-RoCE and unknown-QP frames, idle input and back-pressure. Every scheduled
    frame's source port keeps its high 4 bits and carries in its low 12 the PathID of the path the re-derived
    Algorithm 1 predicts; its ICRC (test-side CRC) is right; every other frame leaves unchanged; counters by hand."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    params = _params()
    m, qb = params["m_paths"], max(1, (params["n_qps"] - 1).bit_length())
    assert params["batch"] == 1 and m & (m - 1) == 0 and params["n_tors"] >= 3 and params["n_qps"] >= 8
    tb = TB(dut, stalls=True, seed=9)
    await tb.reset()
    await ClockCycles(dut.clk, params["n_qps"] + 4)
    # name: (qp index, ToR in the classifier, ToR joined, dst, dqpn, sport)
    qps = {"a": (1, 1, 1, "10.9.0.1", 0x000011, 0xC123), "b": (2, 1, 1, "10.9.0.2", 0xABCDEF, 0x0FFF),
           "c": (6, 1, 1, "10.9.0.1", 0x000012, 0x8000), "d": (3, 2, 2, "10.9.1.7", 0x000011, 0x1234),
           "e": (7, 1, 2, "10.9.0.9", 0x000100, 0x4321)}
    seeds = {1: 5, 2: m - 1}
    pid = {(t, p): ((0x15 + 3 * p + t) & 63) << 6 | ((p * 5 + t) & 63) for t in (1, 2) for p in range(m)}
    cp = TxControlPlane(n_qps=params["n_qps"], n_tors=params["n_tors"], buckets=params["buckets"],
                        ways=params["ways"], ipv6=params["ipv6"])
    cmds = [{"table": 18, "index": t, "data": c} for t, c in seeds.items()]
    cmds += [{"table": 19, "index": t << 6 | p, "data": v} for (t, p), v in pid.items()]
    for q, (idx, ctor, jtor, dst, dqpn, _) in qps.items():
        install = cp.add_qp(idx, ctor, dst, dqpn)[:-1]          # the classifier's key and slot
        assert install[-1]["table"] == 1 and install[-1]["data"] == ctor << qb | idx
        cmds += install + [{"table": 16, "index": idx, "data": jtor}]     # the join, by hand
    for c in cmds:
        await tb.control(c)
    rng = random.Random(3)
    order = [rng.choice("aabbccdde") for _ in range(60)]
    sizes = [64, 65, 127, 9216, 129, 333, 1518, 64, 1001, 9216]
    frames, kinds = [], []
    for n, q in enumerate(order):
        idx, ctor, jtor, dst, dqpn, sport = qps[q]
        size = sizes[n % len(sizes)]
        frame = sized_data(size, "10.0.0.1", dst, sport, dqpn, n)
        base = len(roce_data("10.0.0.1", dst, sport, dqpn, n, opcode=RC_SEND_ONLY, payload_len=0))
        frames.append(frame)
        kinds.append((q, base + (size - base) // 4 * 4))
        if n % 7 == 3:
            frames.append(bytes(roce_ack("10.0.0.1", dst, sport, dqpn, n)))
            kinds.append((None, 0))
            frames.append(bytes(Ether() / IP(src="1.2.3.4", dst=dst) / UDP(sport=sport, dport=4791) /
                                Raw(b"z" * 40)))
            kinds.append((None, 0))
            frames.append(bytes(roce_data("10.0.0.1", dst, sport, dqpn ^ 0x800000, n, payload_len=8)))
            kinds.append((None, 0))
    for f in frames:
        tb.send(f)
    sched = [q for q, _ in kinds if q in ("a", "b", "c", "d")]
    paths = iter(hand_algorithm1(sched, {q: qps[q][2] for q in "abcde"}, seeds, m))
    errors = []
    for n, (f, (q, real)) in enumerate(zip(frames, kinds)):
        got = bytes((await tb.recv(f"output frame {n}")).tdata)
        if q in ("a", "b", "c", "d"):
            want = pid[(qps[q][2], next(paths))]
            old = qps[q][5]
            port = int.from_bytes(got[34:36], "big")
            if port != (old & 0xF000) | want:
                errors.append(f"frame {n} (QP {q}): source port {port:#06x}, Algorithm 1 says "
                              f"{(old & 0xF000) | want:#06x}")
            if got[:34] != f[:34] or got[36:real - 4] != f[36:real - 4] or got[real:] != f[real:]:
                errors.append(f"frame {n} (QP {q}): bytes other than the port and the ICRC changed")
            if got[real - 4:real] != icrc(got[:real]):
                errors.append(f"frame {n} (QP {q}): ICRC {got[real - 4:real].hex()} is not {icrc(got[:real]).hex()}")
        elif got != f:
            errors.append(f"frame {n} ({q or 'not scheduled'}): changed")
    n_e = order.count("e")
    n_other = sum(1 for q, _ in kinds if q is None)
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(11)]
    want_rr = [len(sched), n_e, 0]
    if counters[3:6] != want_rr or counters[9] != n_other or counters[10] != 0 or counters[0] != len(order):
        errors.append(f"counters {counters}: expected classifier hits {len(order)}, round robin {want_rr}, "
                      f"unscheduled {n_other}, declines 0)")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def bench(dut):
    """``lbpipe bench pro-tx-wire``: per size of ``LBPIPE_BENCH_SIZES``, one frame alone then 48 back to back, all
    RoCEv2 data frames of two scheduled QPs, every output checked against the golden model; beats accepted per
    clock and first-beat latency (alone and the maximum back to back) to ``LBPIPE_BENCH_OUT``."""
    params = _params()
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    await ClockCycles(dut.clk, params["n_qps"] + 4)
    model = ProTxWireModel(**params)
    cp = TxControlPlane(n_qps=params["n_qps"], n_tors=params["n_tors"], buckets=params["buckets"],
                        ways=params["ways"], ipv6=params["ipv6"])
    cmds = cp.add_qp(1, 0, "10.0.0.2", 0x123) + cp.add_qp(0, 0, "10.0.0.3", 0x77) + cp.seed(0, 3 % params["m_paths"])
    for c in cmds:
        await tb.control(c)
        model.control(c)
    psn = 0

    def make_frame(size, k):
        nonlocal psn
        psn += 1
        return sized_data(size, "10.0.0.1", "10.0.0.2" if psn % 2 else "10.0.0.3", 0xC000,
                          0x123 if psn % 2 else 0x77, psn)
    results = await tb.size_bench(model, make_frame, latency=True)
    assert model.stats()[3] == 49 * len(results)          # every frame scheduled
