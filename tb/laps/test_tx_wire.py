"""cocotb testbench of the LAPS sender in the wire (parser -> PST -> PIT -> softmax -> LAPS header INSERT, and
the probe frames merged after their triggering frames).

The DUT is :class:`lbpipe.boards.top.FlatTop` around :class:`lbpipe.hdl.laps.tx_wire.LapsTxWire`, parameters in
``LBPIPE_PARAMS`` (JSON). Frames are built with scapy; every output frame is compared with the golden model, and the
hand-worked tests (:func:`header_by_hand`, :func:`updates_steer`, :func:`running_clock`) build the frame they expect
with scapy's LAPS layer from values written in the test.
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from lbpipe.sim.laps.tx_wire import LapsTxWireModel, tx_wire_commands
from lbpipe.tb.lib.harness import AxisBench, FirstBeats
from lbpipe.tb.lib.packets import LAPS_PORT, LapsHeader, laps_frame, roce_data

BEAT = 64
# The datasheet's map, written here again.
T_CLOCK, T_SOFTMAX_CFG = 48, 33


def _params():
    return json.loads(os.environ["LBPIPE_PARAMS"])


def _pid(params, sub, index):
    return sub * (params["n_entries"] // params["k"]) + index


def table_for(rng, params, n_dests=5):
    """A control-plane table: ``n_dests`` IPv4 destinations 10.0.1.x, each with a path in every sub-table but the
    last (which is empty, pid 0), base values of 1 to 3 us, 0 to 4 anchors; path 1 of destination 0 invalid; a
    default pid set (record 0) for misses. Returns the JSON-like dict and the destinations."""
    k = params["k"]
    dests, pst, pit = [], [], []
    for d in range(n_dests):
        dst = f"10.0.1.{10 + d}"
        pids = []
        for j in range(k):
            if j == k - 1 and k > 1:
                pids.append(0)
                continue
            pid = _pid(params, j, 1 + d)
            pids.append(pid)
            anchors = [f"192.168.{j}.{a + d}" for a in range(rng.randrange(5))]
            pit.append({"pid": pid, "base_val": rng.randrange(1000, 3000), "anchors": anchors,
                        "valid": 0 if (d == 0 and j == 1) else 1})
        pst.append({"dst": dst, "pids": pids})
        dests.append(dst)
    default = [_pid(params, 0, 1 + n_dests)] + [0] * (k - 1)
    pit.append({"pid": default[0], "base_val": 500, "anchors": ["172.16.0.1"]})
    return {"pst": pst, "pit": pit, "default": default}, dests


def udp_frame(src, dst, size, *, sport=1000, dport=2000, vlan=None, chksum=0):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw
    pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if vlan is not None:
        pkt = pkt / Dot1Q(vlan=vlan)
    pkt = pkt / (IPv6(src=src, dst=dst) if ":" in dst else IP(src=src, dst=dst)) / UDP(sport=sport, dport=dport,
                                                                                         chksum=chksum)
    head = len(pkt)
    return bytes(pkt / Raw(bytes((i * 7) & 0xFF for i in range(max(0, size - head)))))


def mixed_frames(rng, count, dests, *, sizes=None):
    """Data to known destinations (most), to unknown ones (the miss action), IPv6, RoCEv2, frames that are LAPS
    already, malformed LAPS headers, truncated UDP headers, TCP, non-IP. Returns ``(frames, passes)``, ``passes[i]``
    true when frame ``i`` must leave unchanged whatever the tables say (not a LAPS candidate)."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    frames, passes = [], []
    for n in range(count):
        size = sizes[n % len(sizes)] if sizes else rng.choice([60, 64, 100, 130, 300, 1000, 1518, 3000])
        r = rng.random()
        dst = rng.choice(dests)
        if r < 0.55:
            f, p = udp_frame("10.0.0.1", dst, size, sport=rng.randrange(1 << 16), dport=rng.randrange(1, 1 << 15),
                             vlan=5 if rng.random() < 0.2 else None), False
        elif r < 0.62:
            f, p = udp_frame("10.0.0.1", f"10.0.2.{rng.randrange(256)}", size), False        # PST miss
        elif r < 0.7:
            f, p = bytes(roce_data("10.0.0.1", dst, 0xC000, 0x12, n, payload_len=rng.choice([0, 16, 256]))), False
        elif r < 0.75:
            f, p = udp_frame("fd00::1", "fd00::2", size), True           # IPv6 with an IPv4 PST
        elif r < 0.8:
            f, p = bytes(laps_frame("10.0.0.1", dst, pid=7, time=5, anchors=[1, 2], payload=b"x" * 30)), True
        elif r < 0.84:
            f, p = bytes(laps_frame("10.0.0.1", dst, anchors=[1], count=6, payload=b"x" * 30)), True   # laps_bad
        elif r < 0.88:
            whole = udp_frame("10.0.0.1", dst, 64)
            f, p = whole[:14 + 20 + rng.randrange(1, 8)], True           # cut inside the UDP header
        elif r < 0.94:
            f, p = bytes(Ether() / IP(src="10.0.0.1", dst=dst) / TCP() / Raw(b"t" * 40)), True
        else:
            f, p = bytes(rng.randrange(256) for _ in range(rng.choice([1, 20, 70]))), True
        frames.append(f)
        passes.append(p)
    return frames, passes


class TB(AxisBench):
    def __init__(self, dut, *, stalls, seed):
        super().__init__(dut, seed=seed, pauses=(0.3, 0.4) if stalls else None, longest=6, axil=True)
        dut.upd_valid.value = 0
        dut.upd_payload.value = 0

    async def update(self, pid, owd, now):
        """One update on ``upd`` (pid 16, owd 32, now 48 bits, first field lowest)."""
        self.dut.upd_payload.value = pid | owd << 16 | now << 48
        self.dut.upd_valid.value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if int(self.dut.upd_ready.value):
                break
        self.dut.upd_valid.value = 0

    async def program(self, model, cmds):
        for cmd in cmds:
            await self.control(cmd)
            if model is not None:
                model.control(cmd)


async def _recv(tb, budget=30000):
    """The next output frame, or an ``AssertionError`` if none comes within ``budget`` cycles (a stalled pipeline
    fails the test instead of hanging it)."""
    return await tb.recv_frame(tb.bench_cycle + budget, "an output frame")


async def _setup(dut, *, stalls, seed, beta_q=8389):
    params = _params()
    tb = TB(dut, stalls=stalls, seed=seed)
    await tb.reset()
    model = LapsTxWireModel(**params)
    table, dests = table_for(tb.rng, params)
    cmds = tx_wire_commands(table, beta_q=beta_q, seed=tb.rng.randrange(1, 1 << 32), exp_entries=64, **params)
    await tb.program(model, cmds)
    return tb, model, params, table, dests


async def _send_checked(tb, model, frames, passes=None):
    expected = []
    for f in frames:
        expected += model.process(f)
        tb.send(f)
    errors = await tb.check_frames(expected)
    if passes is not None:
        kept = [f for f, p in zip(frames, passes) if p]
        outs = [e for e in expected]
        missing = [i for i, f in enumerate(kept) if f not in outs]
        if missing:
            errors.append(f"frames that are no LAPS candidates did not leave unchanged: {missing[:5]}")
    return errors


@cocotb.test()
async def frames_with_stalls(dut):
    """Mixed traffic with random idle input and back-pressure, and realVal updates between bursts: every frame and
    counter as the golden model; every frame that is no candidate leaves unchanged."""
    tb, model, params, table, dests = await _setup(dut, stalls=True, seed=1)
    errors = []
    for burst in range(3):
        frames, passes = mixed_frames(tb.rng, 40, dests)
        errors += await _send_checked(tb, model, frames, passes)
        for entry in tb.rng.sample(table["pit"], 4):
            item = {"pid": entry["pid"], "owd": tb.rng.randrange(500, 5000), "now": tb.rng.randrange(1 << 48)}
            await tb.update(item["pid"], item["owd"], item["now"])
            model.update(item)
        await tb.update(0, 1, 2)                  # pid 0: rejected, counted
        model.update({"pid": 0, "owd": 1, "now": 2})
        await ClockCycles(dut.clk, 10)
    errors += await tb.check_counters(model)
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames of many sizes, no stalls: every frame as the golden model, and the output busy on every
    clock from the first beat in to the last beat out but for the pipeline's fill (the decision latency, and the
    wait for the first jumbo frame's last beat in the store-and-forward editor)."""
    tb, model, _, _, dests = await _setup(dut, stalls=False, seed=2)
    frames = [udp_frame("10.0.0.1", dests[1 + n % 4], s) for n, s in
              enumerate([9216, 64, 65, 200, 1518, 64, 64, 64, 129, 4000, 9216] * 2)]
    expected = []
    for f in frames:
        expected += model.process(f)
    span = []

    async def watch():
        start = None
        while True:
            await RisingEdge(dut.clk)
            if start is None and int(dut.s_axis_tvalid.value) and int(dut.s_axis_tready.value):
                start = tb.bench_cycle
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value) and int(dut.m_axis_tlast.value):
                span.append(tb.bench_cycle - start)
    task = cocotb.start_soon(watch())
    for f in frames:
        tb.send(f)
    errors = await tb.check_frames(expected)
    task.cancel()
    errors += await tb.check_counters(model)
    out_beats = sum(-(-len(e) // BEAT) for e in expected)
    fill = 9216 // BEAT + 80
    if span[-1] > out_beats + fill:
        errors.append(f"{span[-1]} cycles for {out_beats} output beats: more than {fill} cycles of fill")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def header_by_hand(dut):
    """Hand-set tables (k slots, one valid path for 10.0.3.1 with two anchors; 10.0.3.2 with none valid; misses
    to a default pid while the miss flag is cleared, then to normal forwarding), the clock stopped at a set time:
    each frame that gets a header equals the one scapy builds from the values written here."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    params = _params()
    k, sub = params["k"], params["n_entries"] // params["k"]
    tb = TB(dut, stalls=True, seed=3)
    await tb.reset()
    t0 = 0x1234_5678_9ABC
    p_a = 1 * sub + 3 if k > 1 else 3
    p_def = 5
    # PIT: p_a valid with anchors 192.168.7.1, 192.168.7.2; p_b (slot 0) invalid; p_def valid, no anchors.
    pit = [(p_a, 1, [0xC0A80701, 0xC0A80702]), (2, 0, [0x01020304]), (p_def, 1, [])]
    cmds = [{"table": T_CLOCK, "index": 1, "data": 0}, {"table": T_CLOCK, "index": 0, "data": t0},
            {"table": 32, "index": 0, "data": 0xFFFF}, {"table": T_SOFTMAX_CFG, "index": 0, "data": 0}]
    for pid, valid, anchors in pit:
        words = anchors + [0] * (4 - len(anchors))
        cmds += [{"table": 16, "index": 0, "data": 800 | 800 << 32},
                 {"table": 17, "index": 0, "data": words[0] | words[1] << 32},
                 {"table": 18, "index": 0, "data": words[2] | words[3] << 32},
                 {"table": 19, "index": 0, "data": t0},
                 {"table": 20, "index": pid, "data": valid | len(anchors) << 1}]
    # PST by hand: records 1 and 2 (k pids in words of 4), keys into way 0 through the control plane's encoder.
    from lbpipe.sim.laps.pst import PstTable
    pst = PstTable(n_dests=params["n_dests"], k=k, ways=params["ways"], buckets=params["buckets"],
                   n_entries=params["n_entries"])
    pids_a = [0] * k
    pids_a[1 if k > 1 else 0] = p_a
    pids_b = [2] + [0] * (k - 1)
    for dst, pids in (("10.0.3.1", pids_a), ("10.0.3.2", pids_b)):
        cmds += pst.insert(dst, pids)
    cmds += pst.miss_action(normal=False, pids=[p_def] + [0] * (k - 1))
    await tb.program(None, cmds)

    def expect(frame, pid, anchors):
        e = Ether(frame)
        ip, udp = e[IP], e[UDP]
        payload = bytes(udp.payload)
        hdr = LapsHeader(pid=pid, int_time=t0, reserved2=udp.dport, anchors=anchors)
        want = Ether(src=e.src, dst=e.dst) / IP(src=ip.src, dst=ip.dst, id=ip.id, flags=ip.flags, ttl=ip.ttl) / \
            UDP(sport=udp.sport, dport=LAPS_PORT, chksum=0) / hdr / Raw(payload)
        return bytes(want)

    f_a = udp_frame("10.0.0.1", "10.0.3.1", 200, sport=4242, dport=7)
    f_b = udp_frame("10.0.0.1", "10.0.3.2", 100)
    f_m = udp_frame("10.0.0.1", "10.0.9.9", 64, dport=99)
    f_r = bytes(roce_data("10.0.0.1", "10.0.3.1", 0xC001, 0x55, 9, payload_len=32))
    for f in (f_a, f_b, f_m, f_r):
        tb.send(f)
    got = [bytes((await _recv(tb)).tdata) for _ in range(4)]
    errors = []
    if got[0] != expect(f_a, p_a, [0xC0A80701, 0xC0A80702]):
        errors.append(f"10.0.3.1: {got[0][:80].hex()} is not {expect(f_a, p_a, [0xC0A80701, 0xC0A80702])[:80].hex()}")
    if got[1] != f_b:
        errors.append("10.0.3.2 (no valid path) did not pass unchanged")
    if got[2] != expect(f_m, p_def, []):
        errors.append("a miss with the miss flag clear did not take the default pid")
    # RoCEv2: the header goes between UDP and BTH; the BTH onwards (ICRC included) is unchanged.
    if got[3][42 + 20:] != f_r[42:] or got[3][36:38] != LAPS_PORT.to_bytes(2, "big") or \
            got[3][42 + 10:42 + 12] != (4791).to_bytes(2, "big"):
        errors.append("RoCEv2 frame: header not inserted before the BTH with the inner port 4791")
    # Now misses go to normal forwarding: unchanged.
    for c in pst.miss_action(normal=True):
        await tb.control(c)
    tb.send(f_m)
    if bytes((await _recv(tb)).tdata) != f_m:
        errors.append("a miss with the miss flag set did not pass unchanged")
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(21)]
    # own counters: not looked up, normal, no path, inserts
    if counters[17:21] != [0, 1, 1, 3]:
        errors.append(f"own counters {counters[17:21]}, expected [0, 1, 1, 3]")
    assert not errors, "\n".join(errors)


@cocotb.test()
async def updates_steer(dut):
    """Two valid paths to 10.0.4.1 (slots 0 and 1, real 1,000 ns each), beta 1/1,024 per ns and only exponent
    entries 0 to 63 written, so a path more than 1,024 ns slower than the fastest has weight 0 (u >= 1 reads an
    unwritten entry). An update makes slot 0's path 40,000 ns: every later frame takes slot 1; then slot 1's:
    every frame takes slot 0 again."""
    params = _params()
    k, sub = params["k"], params["n_entries"] // params["k"]
    if k < 2:
        return
    tb = TB(dut, stalls=False, seed=4)
    await tb.reset()
    p0, p1 = 0 * sub + 6, 1 * sub + 6
    table = {"pst": [{"dst": "10.0.4.1", "pids": [p0, p1] + [0] * (k - 2)}],
             "pit": [{"pid": p0, "base_val": 1000, "anchors": []}, {"pid": p1, "base_val": 1000, "anchors": []}]}
    await tb.program(None, tx_wire_commands(table, beta_q=1 << 14, exp_entries=64, **params))
    errors = []
    for slow, fast in ((p0, p1), (p1, p0)):
        # large now: the path just measured stays fresh (no probe doubles it) for the frames below (time 0)
        await tb.update(slow, 40000, 0)
        await tb.update(fast, 1000, 0)
        frames = [udp_frame("10.0.0.1", "10.0.4.1", 80, sport=s) for s in range(20)]
        for f in frames:
            tb.send(f)
        for n in range(20):
            got = bytes((await _recv(tb)).tdata)
            pid = int.from_bytes(got[42 + 2:42 + 4], "big")
            if pid != fast:
                errors.append(f"after the update making {slow} slow, frame {n} took pid {pid}, not {fast}")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def running_clock(dut):
    """tick 4 (reset value at the defaults): a frame's time is the clock at its first beat's acceptance, so two
    frames' times differ by 4 ns per cycle between their first beats (cycles counted here on s_axis); every frame
    as the golden model given those times."""
    params = _params()
    tb = TB(dut, stalls=True, seed=6)
    await tb.reset()
    model = LapsTxWireModel(**params)
    table, dests = table_for(tb.rng, params)
    # a seed: the softmax's generator restarts at reset from the last seed written, by an earlier test perhaps
    cmds = [c for c in tx_wire_commands(table, beta_q=8389, seed=99, exp_entries=64, **params)
            if c["table"] != T_CLOCK]
    cmds.append({"table": T_CLOCK, "index": 1, "data": 4})
    await tb.program(model, cmds)
    seen = FirstBeats(dut)
    frames = [udp_frame("10.0.0.1", dests[1 + n % 4], tb.rng.choice([64, 100, 700])) for n in range(30)]
    for f in frames:
        tb.send(f)
    # the running clock makes paths stale: a frame may leave a probe (LAPS probe bit set) right behind it
    groups = []
    while len(groups) < len(frames) or not tb.sink.empty():
        g = bytes((await _recv(tb)).tdata)
        if g[42] & 0x80:
            groups[-1].append(g)
        else:
            groups.append([g])
        if len(groups) == len(frames):
            await ClockCycles(dut.clk, 40)      # the last frame's probe, if any
    got = [g[0] for g in groups]
    times = [int.from_bytes(g[42 + 4:42 + 10], "big") for g in got]
    errors = []
    ins = seen.ins[-len(frames):]
    for n in range(1, len(frames)):
        if times[n] - times[0] != 4 * (ins[n] - ins[0]):
            errors.append(f"frame {n}: time {times[n]} - {times[0]} is not 4 x {ins[n] - ins[0]} cycles")
    for n, f in enumerate(frames):
        want = model.process(f, now=times[0] + 4 * (ins[n] - ins[0]))
        if groups[n] != want:
            errors.append(f"frame {n} (and its probe) differs from the golden model")
    if sum(len(g) - 1 for g in groups) == 0:
        errors.append("no probe: the running clock never made a path stale")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset with frames in flight; right after it the counters read 0 and the clock runs again at ``tick_ns``
    from 0 (a frame's time is below the cycles since reset x tick); the tables kept: after the clock is stopped
    again every frame is as a reset golden model says."""
    tb, model, params, table, dests = await _setup(dut, stalls=False, seed=5)
    frames, _ = mixed_frames(tb.rng, 30, dests)
    await tb.reset_in_flight(frames, 30 + tb.rng.randrange(60))
    model.reset()
    errors = []
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in range(21)]
    if any(counters):
        errors.append(f"counters after reset {counters}")
    f = udp_frame("10.0.0.1", dests[1], 64)
    start = tb.bench_cycle
    tb.send(f)
    got = bytes((await _recv(tb)).tdata)
    t = int.from_bytes(got[42 + 4:42 + 10], "big")
    if not 0 < t <= params["tick_ns"] * (tb.bench_cycle - start + 200) or t % params["tick_ns"] if \
            params["tick_ns"] else False:
        errors.append(f"time {t} after reset: the clock did not restart from 0 at tick_ns")
    want = model.process(f, now=t)
    for extra in want[1:]:              # its probe, if the running clock made a path stale
        if bytes((await _recv(tb)).tdata) != extra:
            errors.append("the probe after the first frame after reset differs from the golden model")
    await tb.program(model, [{"table": T_CLOCK, "index": 1, "data": 0}, {"table": T_CLOCK, "index": 0, "data": 77}])
    frames, _ = mixed_frames(tb.rng, 40, dests)
    errors += await _send_checked(tb, model, frames)
    errors += await tb.check_counters(model)
    await ClockCycles(dut.clk, 50)
    if not tb.sink.empty():
        errors.append("frames left over after the reset")
    assert not errors, "\n".join(errors[:10])


def pcap_trace(seed, n_frames, **params):
    """``lbpipe trace laps-tx-wire``: a random table's commands (clock stopped at 0) and mixed frames."""
    rng = random.Random(seed)
    table, dests = table_for(rng, params)
    cmds = tx_wire_commands(table, beta_q=8389, seed=rng.randrange(1, 1 << 32), exp_entries=64, **params)
    # the clock (stopped) well past every path's 2 x real_val: each path is probed at its first lookup
    cmds.append({"table": T_CLOCK, "index": 0, "data": 1_000_000})
    frames, _ = mixed_frames(rng, n_frames, dests)
    return cmds, frames


@cocotb.test()
async def replay(dut):
    """``lbpipe replay laps-tx-wire IN.pcap --engine rtl``."""
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    await tb.replay()


@cocotb.test()
async def bench(dut):
    """``lbpipe bench laps-tx-wire``: per size of ``LBPIPE_BENCH_SIZES``, one frame alone then 48 back to back, UDP
    frames to four destinations (every one gets a header), every output checked against the golden model."""
    params = _params()
    tb = TB(dut, stalls=False, seed=1)
    await tb.reset()
    model = LapsTxWireModel(**params)
    table, dests = table_for(random.Random(1), params)
    await tb.program(model, tx_wire_commands(table, beta_q=8389, seed=1, exp_entries=64, **params))

    def make_frame(size, k):
        return udp_frame("10.0.0.1", dests[1 + k % 4], size, sport=k & 0xFFFF)
    results = await tb.size_bench(model, make_frame, latency=True)
    # the clock stays at 0, where every path's time is: no probe
    assert model.stats()[17] == 0 and model.stats()[20] == 49 * len(results) and model.stats()[21] == 0
    # The datasheet's figure: decision 7 + 6 + 5 + 1 + (16 + ceil(log2 k)) cycles from the second beat, 13 in the
    # (cut-through) editor; a frame of n >= 2 beats: decision + 14, whatever n.
    decision = 7 + 6 + 5 + 1 + 16 + (params["k"] - 1).bit_length()
    for r in results:
        n = -(-r["size"] // BEAT)
        want = decision + 13 if n == 1 else decision + 14
        assert r["first_beat_latency"] == want, (r["size"], r["first_beat_latency"], want)


# -- probe frames ----------------------------------------------------------------------------------------------------

T0 = 1_000_000          # the clock, stopped: every path whose time is 0 and real_val below 500,000 ns is stale


async def _probe_tables(tb, params, base, n):
    """Destinations 10.0.7.(base + d), d < n, each with path A (slot 0, 1,000 ns, measured at T0 by an update: fresh;
    anchors 192.168.1.d) and path B (slot 1, base 40,000 ns, time 0: stale at T0; anchors 192.168.2.d and, for d = 0,
    three more). beta 1/1,024 per ns with exponent entries 0-63 only: B's weight is 0, so frames take A and the
    lookup probes B. The clock stopped at T0. Returns per destination ``(dst, pid A, pid B, anchors A, anchors B)``."""
    k, sub = params["k"], params["n_entries"] // params["k"]
    rows, pst, pit = [], [], []
    for d in range(n):
        dst = f"10.0.7.{base + d}"
        pa, pb = 0 * sub + base + d, 1 * sub + base + d
        aa = [0xC0A80100 + d]
        ab = [0xC0A80200 + d] + ([0x0A0A0A01, 0x0A0A0A02, 0x0A0A0A03] if d == 0 else [])
        pst.append({"dst": dst, "pids": [pa, pb] + [0] * (k - 2)})
        for pid, val, anchors in ((pa, 1000, aa), (pb, 40000, ab)):
            pit.append({"pid": pid, "base_val": val, "anchors": [f"{a >> 24}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"
                                                                 for a in anchors]})
        rows.append((dst, pa, pb, aa, ab))
    cmds = tx_wire_commands({"pst": pst, "pit": pit}, beta_q=1 << 14, exp_entries=64, **params)
    await tb.program(None, cmds + [{"table": T_CLOCK, "index": 0, "data": T0}])
    for _, pa, _, _, _ in rows:
        await tb.update(pa, 1000, T0)
    # the PIT's hold-off: a lookup does not probe what the last 5 updates wrote; these pass A's pid, not B's
    return rows


def _want_probe_pair(frame, pa, pb, aa, ab):
    """scapy: the data frame (A's header) and the probe (B's pid and anchors, type 1, no payload)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw
    e = Ether(frame)
    ip, udp = e[IP], e[UDP]

    def head():
        pkt = Ether(src=e.src, dst=e.dst)
        if Dot1Q in e:
            pkt = pkt / Dot1Q(vlan=e[Dot1Q].vlan)
        return pkt / IP(src=ip.src, dst=ip.dst, id=ip.id, flags=ip.flags, ttl=ip.ttl)
    data = head() / UDP(sport=udp.sport, dport=LAPS_PORT, chksum=0) / \
        LapsHeader(pid=pa, int_time=T0, reserved2=udp.dport, anchors=aa) / Raw(bytes(udp.payload))
    probe = head() / UDP(sport=udp.sport, dport=LAPS_PORT, chksum=0) / \
        LapsHeader(probe=1, pid=pb, int_time=T0, reserved2=udp.dport, anchors=ab)
    return bytes(data), bytes(probe)


class _Beats:
    """The cycle of every frame's first and last beats taken on ``m_axis``."""

    def __init__(self, dut):
        self.dut, self.frames, self.cycle, self.start = dut, [], 0, None
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            self.cycle += 1
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
                if self.start is None:
                    self.start = self.cycle
                if int(dut.m_axis_tlast.value):
                    self.frames.append((self.start, self.cycle))
                    self.start = None


def _pauses(tb, p_source, p_sink):
    from lbpipe.tb.lib.harness import pause_pattern
    for side, p in ((tb.source, p_source), (tb.sink, p_sink)):
        if p:
            side.set_pause_generator(pause_pattern(random.Random(tb.rng.random()), p))
        else:
            side.clear_pause_generator()


@cocotb.test()
async def probes_by_hand(dut):
    """Three destinations whose path B is stale, frames back to back: each leaves with path A's header and, right
    behind it, a probe frame on B (several probes in a row) equal to the one scapy builds; a second frame to each
    leaves no probe (B was just probed). Without stalls, the probe after an n-beat frame starts max(1, 8 - n)
    cycles after the frame's last beat, max(0, 7 - n) idle output cycles (the cost the datasheet states); then again
    with random idle input and back-pressure (the probe waits for the output); the PIT's and the generator's
    counters."""
    params = _params()
    if params["k"] < 2:
        return
    tb = TB(dut, stalls=False, seed=7)
    await tb.reset()
    seen = _Beats(dut)
    errors = []
    sent = 0
    for run, (base, stalls) in enumerate(((1, False), (4, True))):
        rows = await _probe_tables(tb, params, base, 3)
        if stalls:
            _pauses(tb, 0.3, 0.4)
        sizes = [60, 300, 1000]
        frames = [udp_frame("10.0.0.1", dst, sizes[n], sport=100 + n, dport=200 + n, vlan=5 if n == 1 else None)
                  for n, (dst, *_) in enumerate(rows)]
        again = [udp_frame("10.0.0.1", dst, 90, sport=300 + n) for n, (dst, *_) in enumerate(rows)]
        expected = []
        for f, (_, pa, pb, aa, ab) in zip(frames, rows):
            expected += _want_probe_pair(f, pa, pb, aa, ab)
        for f, (_, pa, pb, aa, ab) in zip(again, rows):
            expected.append(_want_probe_pair(f, pa, pb, aa, ab)[0])
        mark = len(seen.frames)
        for f in frames + again:
            tb.send(f)
        errors += [f"run {run}: {e}" for e in await tb.check_frames(expected)]
        sent += len(rows)
        if not stalls:
            # output frames in order: data, probe, data, probe, data, probe, then the three second frames
            out = seen.frames[mark:]
            for n in range(3):
                (d0, d1), (p0, _) = out[2 * n], out[2 * n + 1]
                beats = d1 - d0 + 1
                if p0 - d1 != max(1, 8 - beats):
                    errors.append(f"probe after a {beats}-beat frame started {p0 - d1} cycles after its last beat, "
                                  f"not {max(1, 8 - beats)}")
    _pauses(tb, 0, 0)
    counters = [await tb.axil.read_dword(0x40 + 4 * i) for i in (9, 21)]
    if counters != [sent, sent]:
        errors.append(f"PIT probes and probe frames sent {counters}, expected {[sent, sent]}")
    assert not errors, "\n".join(errors[:10])


@cocotb.test()
async def reset_with_probe_pending(dut):
    """A frame that leaves a probe; the output stops (tready low) right after the frame's last beat, so its probe waits
    in the generator; reset: the probe never leaves, the probe counter reads 0; then a frame to another destination
    with a stale path leaves with its own probe, as scapy builds them (the generator is not stuck in the probe it
    lost)."""
    params = _params()
    if params["k"] < 2:
        return
    tb = TB(dut, stalls=False, seed=8)
    await tb.reset()
    rows = await _probe_tables(tb, params, 8, 2)
    stopped = []

    async def stop_after_first_frame():
        while True:
            await RisingEdge(dut.clk)
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value) and int(dut.m_axis_tlast.value):
                tb.sink.pause = True
                stopped.append(tb.bench_cycle)
                return
    watch = cocotb.start_soon(stop_after_first_frame())
    f0 = udp_frame("10.0.0.1", rows[0][0], 64, sport=1, dport=2)
    tb.send(f0)
    errors = []
    for _ in range(400):
        if stopped:
            break
        await RisingEdge(dut.clk)
    watch.cancel()
    await ClockCycles(dut.clk, 20)
    if not stopped or tb.sink.empty() or bytes(tb.sink.recv_nowait().tdata) != _want_probe_pair(f0, *rows[0][1:])[0]:
        errors.append("the frame that triggers the probe did not leave as scapy builds it")
    if not int(dut.m_axis_tvalid.value):
        errors.append("no probe waiting on m_axis")
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    tb.sink.clear()
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    tb.sink.pause = False
    await ClockCycles(dut.clk, 200)
    if not tb.sink.empty():
        errors.append("the probe pending at reset left after it")
    if await tb.axil.read_dword(0x40 + 4 * 21):
        errors.append("probe counter not 0 after reset")
    # reset restarted the clock (tick_ns): stop it at T0 again; path B of destination 1 is still stale
    await tb.program(None, [{"table": T_CLOCK, "index": 1, "data": 0}, {"table": T_CLOCK, "index": 0, "data": T0}])
    f = udp_frame("10.0.0.1", rows[1][0], 64, sport=9, dport=10)
    tb.send(f)
    errors += await tb.check_frames(list(_want_probe_pair(f, *rows[1][1:])))
    assert not errors, "\n".join(errors[:10])
