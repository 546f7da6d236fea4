"""The OpenNIC box around the pipelines that add, drop or resize frames (themis-d-wire, laps-tx-wire, laps-rx-wire,
pro-rx-wire): the shell's port list, the plan, and frames through the box in the Amaranth simulator.

Expected values: the shell's port list is tests/test_build.py's (typed in from the shell's source); directions and
``tuser`` values are the shell's (its README and ``packet_adapter_tx.sv``/``qdma_subsystem_c2h.sv``: the adapter reads
``tuser_size`` on a frame's last beat, the C2H path on every beat as the frame's length); frames are built with scapy
(the testbenches' builders), and what a pipeline itself does to a frame comes from its golden model. Sizes are
checked against the bytes that actually leave (``len``), never against the box's own arithmetic.
"""

import json
import random

import pytest

from test_build import _axil_write, _cycle, _edge, _simulate, amaranth_ports, header_ports, shell_ports, SHELL_PARAMS
from lbpipe.cli import main

H2C, TX, RX, C2H = "s_axis_qdma_h2c", "m_axis_adap_tx_250mhz", "s_axis_adap_rx_250mhz", "m_axis_qdma_c2h"
CMAC0, PF0 = 1 << 6, 1 << 0     # tuser_dst bits (shell README, "Shell Interface")

#: Small tables, fast to generate and simulate. pro-rx-wire keeps two NAK-context banks (n_qps over 1,024).
SMALL = {
    "themis-d-wire": dict(n_qps=8, queue_depth=8, n_paths=3, entry_bits=10, buckets=16, ways=2, ipv6=True, depth=32),
    "laps-tx-wire": dict(n_dests=16, k=2, buckets=16, n_entries=32, depth=32),
    "laps-rx-wire": dict(n_entries=64, depth=32),
    "pro-rx-wire": dict(n_qps=2048, buckets=16, ways=2),
}
#: Where each goes (docs/nic_build.md) and its STATUS words (the pipelines' datasheets).
PLACED = {"themis-d-wire": ("both", 18), "laps-tx-wire": ("tx", 22), "laps-rx-wire": ("rx", 17),
          "pro-rx-wire": ("rx", 14)}


def _argv(pipeline):
    return [arg for name, value in SMALL[pipeline].items() for arg in ("--param", f"{name}={int(value)}")]


@pytest.fixture(scope="module", params=sorted(SMALL))
def built(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    assert main(["build", "--board", "alveo-u280", "--shell", "opennic", request.param, *_argv(request.param),
                 "-o", str(out)]) == 0
    return request.param, out


def test_box_header_and_ports_match_the_shell(built):
    pipeline, out = built
    params, ports = header_ports((out / "src" / "box_250mhz.v").read_text(), "box_250mhz")
    assert params == SHELL_PARAMS
    assert ports == shell_ports()
    got = amaranth_ports((out / "src" / "lbpipe_box_250mhz.v").read_text(), "lbpipe_box_250mhz")
    want = {name: (d, w) for d, w, name in shell_ports() if name not in ("box_rstn", "box_rst_done")}
    want["mod_rstn"], want["mod_rst_done"] = ("input", 1), ("output", 1)
    assert got == want


def test_plan_direction_files_and_registers(built):
    pipeline, out = built
    plan = json.loads((out / "plan.json").read_text())
    direction, n_status = PLACED[pipeline]
    assert plan["direction"] == direction and plan["pipeline"] == pipeline
    for group in plan["files"].values():
        for path in group:
            assert (out / path).is_file(), path
    text = (out / "registers.md").read_text()
    assert f"STATUS_{n_status - 1} |" in text and f"STATUS_{n_status} |" not in text


@pytest.mark.parametrize("pipeline, direction", [("themis-d-wire", "tx"), ("laps-rx-wire", "tx"),
                                                 ("pro-rx-wire", "tx"), ("laps-tx-wire", "rx")])
def test_fixed_placement_refuses_another_direction(pipeline, direction, tmp_path, capsys):
    assert main(["build", pipeline, "--direction", direction, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lbpipe: ") and "--direction" in err[0], err
    assert not (tmp_path / "o").exists()


# -- frames through the box ----------------------------------------------------------------------------------------

def _box(pipeline):
    from lbpipe.blocks import get_block
    from lbpipe.boards.opennic import Box250
    block = get_block(pipeline)
    params = block.resolve(SMALL[pipeline])
    direction = PLACED[pipeline][0]
    return Box250(block.build(**params), direction=direction, keeps_frames=pipeline == "pro-rx-wire")


async def _reset(ctx, p):
    ctx.set(p["mod_rstn"], 0)
    for _ in range(4):
        await _edge(ctx, p["axil_aclk"])
    ctx.set(p["mod_rstn"], 1)
    for _ in range(20):
        await _edge(ctx, p["axil_aclk"])
    assert ctx.get(p["mod_rst_done"]) == 1


async def _command(ctx, p, cmd):
    for addr, value in ((0x08, cmd["table"]), (0x0C, cmd["index"]), (0x10, cmd["data"] & 0xFFFFFFFF),
                        (0x14, cmd["data"] >> 32), (0x18, 1)):
        await _axil_write(ctx, p, addr, value)


def _beats(frame, src):
    out = []
    for k in range(0, len(frame), 64):
        chunk = frame[k:k + 64]
        out.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, k + 64 >= len(frame), len(frame), src))
    return out


class Traffic:
    """Drives the box's two inputs beat by beat and collects its two outputs, one ``axis_aclk`` cycle at a time.

    Output frames are ``(bytes, [tuser_size of each beat], {tuser_src}, {tuser_dst})``; ``watch`` names extra
    signals sampled each cycle (``self.seen``)."""

    SRC = {H2C: PF0, RX: CMAC0}

    def __init__(self, ctx, p, *, ready=lambda out, cycle: True, watch=()):
        self.ctx, self.p, self.ready, self.watch = ctx, p, ready, list(watch)
        self.queues = {H2C: [], RX: []}
        self.got = {TX: [], C2H: []}
        self._cur = {TX: (b"", [], set(), set()), C2H: (b"", [], set(), set())}
        self.seen = []
        self.cycle = 0

    def send(self, port, frame):
        self.queues[port] += _beats(bytes(frame), self.SRC[port])

    async def wait(self, cycles):
        """Run ``cycles`` cycles, whatever happens."""
        await self.run(lambda t: False, limit=cycles, must=False)

    async def run(self, until, limit=4000, must=True):
        ctx, p = self.ctx, self.p
        for _ in range(limit):
            if until(self):
                return
            for port, q in self.queues.items():
                if q:
                    tdata, tkeep, tlast, size, src = q[0]
                    for name, value in (("tdata", tdata), ("tkeep", tkeep), ("tlast", tlast), ("tuser_size", size),
                                        ("tuser_src", src), ("tuser_dst", 0), ("tvalid", 1)):
                        ctx.set(p[f"{port}_{name}"], value)
                else:
                    ctx.set(p[f"{port}_tvalid"], 0)
            for out in self.got:
                ctx.set(p[f"{out}_tready"], int(self.ready(out, self.cycle)))
            names = [f"{port}_tready" for port in self.queues]
            for out in self.got:
                names += [f"{out}_{m}" for m in ("tvalid", "tready", "tdata", "tkeep", "tlast", "tuser_size",
                                                  "tuser_src", "tuser_dst")]
            values = await _cycle(ctx, p["axis_aclk"], *[p[n] for n in names], *self.watch)
            v = dict(zip(names, values))
            self.seen.append(values[len(names):])
            self.cycle += 1
            for port, q in self.queues.items():
                if q and v[f"{port}_tready"]:
                    q.pop(0)
            for out in self.got:
                if v[f"{out}_tvalid"] and v[f"{out}_tready"]:
                    data, sizes, srcs, dsts = self._cur[out]
                    data += v[f"{out}_tdata"].to_bytes(64, "little")[:bin(v[f"{out}_tkeep"]).count("1")]
                    sizes = sizes + [v[f"{out}_tuser_size"]]
                    srcs, dsts = srcs | {v[f"{out}_tuser_src"]}, dsts | {v[f"{out}_tuser_dst"]}
                    if v[f"{out}_tlast"]:
                        self.got[out].append((data, sizes, srcs, dsts))
                        data, sizes, srcs, dsts = b"", [], set(), set()
                    self._cur[out] = (data, sizes, srcs, dsts)
        if not must:
            return
        raise AssertionError(f"timed out: {[len(q) for q in self.queues.values()]} beats unsent, "
                             f"{ {k: len(v) for k, v in self.got.items()} } frames out")


def check_c2h(frames):
    """Towards the QDMA: the frame's length on every beat, PCIe function 0 as destination."""
    for data, sizes, _, dsts in frames:
        assert sizes == [len(data)] * len(sizes), (len(data), sizes)
        assert dsts == {PF0}


def check_tx(frames):
    """Towards the adapter: its bytes on the last beat (what the adapter reads), CMAC port 0 as destination."""
    for data, sizes, _, dsts in frames:
        assert sizes[-1] == len(data), (len(data), sizes)
        assert dsts == {CMAC0}


def _frames(got):
    return [data for data, *_ in got]


def _udp(rng, size, src="10.9.0.1", dst="10.9.0.2"):
    from lbpipe.tb.laps.test_tx_wire import udp_frame
    return udp_frame(src, dst, size, sport=rng.randrange(1024, 60000), dport=rng.randrange(1024, 5000))


# themis-d-wire ---------------------------------------------------------------------------------------------------

def test_themis_d_box_merges_fairly_and_steers_back():
    """Both directions at once, no QP set up (Themis-D passes everything): each direction's frames come back out on
    their own side, whole, in order, with the shell's tuser; the pipeline's input alternates between the two
    directions a whole frame at a time while both have frames waiting."""
    from lbpipe.sim.themis.wire import ThemisDWireModel
    rng = random.Random(5)
    rx = [_udp(rng, n) for n in (60, 64, 65, 200, 128, 300, 1000)]
    h2c = [_udp(rng, n, src="10.8.0.1") for n in (1400, 60, 129, 64, 77, 500, 90)]
    model = ThemisDWireModel(**SMALL["themis-d-wire"])
    assert all(model.process(f) == [f] for f in rx + h2c)      # the model passes them: the reference
    box = _box("themis-d-wire")
    s = box.block.s_axis
    seen = {}

    async def bench(ctx, p):
        await _reset(ctx, p)
        t = Traffic(ctx, p, ready=lambda out, c: (c * 7 + (out == TX)) % 5 != 0,
                    watch=[s.tvalid, s.tready, s.tlast, s.tuser])
        for f in rx:
            t.send(RX, f)
        for f in h2c:
            t.send(H2C, f)
        await t.run(lambda t: len(t.got[TX]) == len(h2c) and len(t.got[C2H]) == len(rx))
        seen["t"] = t

    _simulate(box, bench)
    t = seen["t"]
    assert _frames(t.got[C2H]) == rx and _frames(t.got[TX]) == h2c
    check_c2h(t.got[C2H])
    check_tx(t.got[TX])
    # frames into the pipeline: tags per frame, never mixed inside a frame
    tags, cur = [], set()
    for valid, ready, last, user in t.seen:
        if valid and ready:
            cur.add(user & 1)
            if last:
                assert len(cur) == 1, "a frame of mixed directions entered the pipeline"
                tags.append(cur.pop())
    assert sorted(tags) == [0] * len(rx) + [1] * len(h2c)
    n = min(len(rx), len(h2c))
    assert tags[:2 * n] in ([0, 1] * n, [1, 0] * n), tags


def test_themis_d_box_nacks_go_to_the_network():
    """A set-up QP: data from the network (PSNs 0, 1, 3), the NIC's NACK for PSN 2 from the host, then data PSN 5
    on the missing PSN's path. The golden model says the NACK is blocked and a compensation NACK follows PSN 5: the
    box must deliver the four data frames to the host and exactly that compensation NACK to the network."""
    from lbpipe.sim.themis.wire import ThemisDWireModel
    from lbpipe.tb.themis.test_themis_d_wire import Qp, setup_commands
    params = SMALL["themis-d-wire"]
    qp = Qp(0)
    rng = random.Random(1)
    cmds = setup_commands([qp], n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"],
                          ipv6=params["ipv6"])
    seq = [(RX, bytes(qp.data(0, rng))), (RX, bytes(qp.data(1, rng))), (RX, bytes(qp.data(3, rng))),
           (H2C, bytes(qp.nack(2, 1))), (RX, bytes(qp.data(5, rng)))]
    model = ThemisDWireModel(**params)
    for c in cmds:
        model.control(c)
    outs = [model.process(f) for _, f in seq]
    assert outs[3] == [] and len(outs[4]) == 2        # the scenario is what the docstring says
    nack = outs[4][1]
    from scapy.contrib.roce import AETH, BTH
    from scapy.layers.l2 import Ether
    assert Ether(nack)[BTH].opcode == 0x11 and Ether(nack)[AETH].msn == 1 and Ether(nack)[BTH].psn == 2
    box = _box("themis-d-wire")
    seen = {}

    async def bench(ctx, p):
        await _reset(ctx, p)
        for c in cmds:
            await _command(ctx, p, c)
        t = Traffic(ctx, p)
        want = 0
        for port, frame in seq:           # one at a time: the pipeline sees the model's order
            t.send(port, frame)
            want += 1 if port == RX else 0
            await t.run(lambda t: not t.queues[port] and len(t.got[C2H]) == want)
            await t.wait(60)              # and whatever the frame makes leaves
        seen["t"] = t

    _simulate(box, bench)
    t = seen["t"]
    assert _frames(t.got[C2H]) == [f for port, f in seq if port == RX]
    assert _frames(t.got[TX]) == [nack]
    check_c2h(t.got[C2H])
    check_tx(t.got[TX])


def _first_beats(seen):
    """From ``(valid, ready, last, extra)`` samples of the pipeline's input: ``extra`` at each frame's first beat."""
    out, first = [], True
    for valid, ready, last, extra in seen:
        if valid and ready:
            if first:
                out.append(extra)
            first = bool(last)
    return out


def _split_tx(tx, host_frames):
    """The adapter's frames split into those the host sent (in their order) and the others."""
    mine = set(host_frames)
    return [f for f in tx if f in mine], [f for f in tx if f not in mine]


# laps-rx-wire ------------------------------------------------------------------------------------------------------

def test_laps_rx_box_acks_to_the_network_headers_off_for_the_host():
    """LAPS data frames and a probe from the network while the host sends frames: the host gets each data frame
    without its LAPS header (the length on every beat is the shorter frame's), the probe never; each data frame and
    the probe are answered by an ACK on the adapter's TX, merged whole with the host's frames, which pass intact.
    The golden model, given ``now`` as the pipeline saw it at each frame's first beat, is the reference for the
    pipeline's frames."""
    from lbpipe.sim.laps.rx_wire import LapsRxWireModel
    from lbpipe.tb.laps.test_rx_wire import data_frame
    params = SMALL["laps-rx-wire"]
    rng = random.Random(7)
    rx = [data_frame(rng, time=0, payload_len=n, n_entries=params["n_entries"], k=8) for n in (0, 100, 1000)]
    rx.insert(1, data_frame(rng, probe=1, time=0, payload_len=8, n_entries=params["n_entries"], k=8))
    rx.append(_udp(rng, 150))               # not LAPS: to the host unchanged, no ACK
    h2c = [_udp(rng, n, src="10.8.0.1") for n in (300, 64, 1200, 61)]
    box = _box("laps-rx-wire")
    s = box.block.s_axis
    seen = {}

    async def bench(ctx, p):
        await _reset(ctx, p)
        t = Traffic(ctx, p, ready=lambda out, c: c % 4 != (1 if out == TX else 2),
                    watch=[s.tvalid, s.tready, s.tlast, box.block.now])
        for f in rx:
            t.send(RX, f)
        for f in h2c:
            t.send(H2C, f)
        await t.run(lambda t: len(t.got[TX]) == len(h2c) + 4 and len(t.got[C2H]) == 4)
        await t.wait(100)
        seen["t"] = t

    _simulate(box, bench)
    t = seen["t"]
    nows = _first_beats(t.seen)
    assert len(nows) == len(rx) and nows == sorted(nows) and nows[0] > 0
    model = LapsRxWireModel(**params)
    host, acks = [], []
    for frame, now in zip(rx, nows):
        out = model.step(frame, now)
        host += [out["host"]] if out["host"] is not None else []
        acks += [out["ack"]] if out["ack"] is not None else []
    assert len(host) == 4 and len(acks) == 4                         # 3 data + the non-LAPS; 3 data + the probe
    assert [len(h) for h in host[:3]] == [len(f) - n for f, n in zip([rx[0], rx[2], rx[3]], _laps_lengths(rx))]
    assert _frames(t.got[C2H]) == host
    passed, made = _split_tx(_frames(t.got[TX]), h2c)
    assert passed == h2c and made == acks
    check_c2h(t.got[C2H])
    check_tx(t.got[TX])


def _laps_lengths(rx):
    """LAPS header bytes of the data frames (fixed part and 4 per anchor), read with scapy's view of the header."""
    from lbpipe.tb.lib.packets import LapsHeader
    out = []
    for f in (rx[0], rx[2], rx[3]):
        h = LapsHeader(f[14 + 20 + 8:])          # untagged IPv4 without options, as data_frame builds them
        out.append(len(h) - len(h.payload))
    return out


# pro-rx-wire -------------------------------------------------------------------------------------------------------

def test_pro_rx_box_naks_to_the_network_frames_to_the_host():
    """A QP's data with a gap (PSN 102 missing, window 8), from the network, while the host sends: every frame
    reaches the host intact with its own tuser_size and tuser_src; the NAK the golden model sends for the gap leaves
    on the adapter's TX, whole between the host's frames, which pass intact; ``tmo`` tied idle sends none of its
    own."""
    from lbpipe.sim.pro.rx_wire import ProRxWireModel, RxControlPlane
    from lbpipe.tb.lib.packets import roce_data
    params = SMALL["pro-rx-wire"]
    cp = RxControlPlane(n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"], ipv6=True)
    cmds = cp.add_qp(5, local_ip="10.0.0.2", local_qpn=0x123, first_psn=100, wnd=8, dmac=0x020000000001,
                     smac=0x020000000002, sip=0x0A000002, dip=0x0A010001, sport=0x4000, dqpn=0x456, pkey=0xFFFF)
    rx = [bytes(roce_data("10.1.0.1", "10.0.0.2", 999, 0x123, psn, payload_len=n))
          for psn, n in zip([100, 101] + list(range(103, 113)), [64, 300, 0, 1000] * 3)]
    h2c = [_udp(rng, n, src="10.8.0.1") for rng in [random.Random(3)] for n in (200, 64, 700)]
    model = ProRxWireModel(**params)
    for c in cmds:
        model.control(c)
    outs = [model.process(f) for f in rx]
    assert [o[0] for o in outs] == rx
    naks = [n for o in outs for n in o[1:]]
    assert len(naks) >= 1
    box = _box("pro-rx-wire")
    seen = {}

    async def bench(ctx, p):
        await _reset(ctx, p)
        for c in cmds:
            await _command(ctx, p, c)
        t = Traffic(ctx, p, ready=lambda out, c: c % 3 != 0)
        for f in rx:
            t.send(RX, f)
        for f in h2c:
            t.send(H2C, f)
        await t.run(lambda t: len(t.got[TX]) == len(h2c) + len(naks) and len(t.got[C2H]) == len(rx))
        await t.wait(100)
        seen["t"] = t

    _simulate(box, bench)
    t = seen["t"]
    assert _frames(t.got[C2H]) == rx
    check_c2h(t.got[C2H])
    assert all(srcs == {CMAC0} for _, _, srcs, _ in t.got[C2H])       # kept from the adapter's RX
    passed, made = _split_tx(_frames(t.got[TX]), h2c)
    assert passed == h2c and made == naks
    check_tx(t.got[TX])


# laps-tx-wire ------------------------------------------------------------------------------------------------------

def test_laps_tx_box_inserts_headers_and_sizes_them():
    """A destination table loaded over AXI4-Lite (the clock stopped at 0, as the testbench's set-up does): the
    host's UDP frames to known destinations leave with a LAPS header, longer, with their new length on the last beat;
    others leave unchanged; frames from the network reach the host untouched; ``upd`` tied idle."""
    from lbpipe.sim.laps.tx_wire import LapsTxWireModel, tx_wire_commands
    from lbpipe.tb.laps.test_tx_wire import table_for
    params = _box_params("laps-tx-wire")
    rng = random.Random(11)
    table, dests = table_for(rng, params, n_dests=3)
    cmds = tx_wire_commands(table, beta_q=8389, seed=12345, exp_entries=64, **params)
    h2c = [_udp(rng, n, src="10.0.0.1", dst=dests[i % len(dests)]) for i, n in enumerate((100, 64, 1300, 200))]
    h2c.insert(2, _udp(rng, 90, dst="10.7.7.7"))            # unknown: the miss record's pid set
    rx = [_udp(rng, n, src="10.8.0.1") for n in (80, 900)]
    model = LapsTxWireModel(**params)
    for c in cmds:
        model.control(c)
    want = [f for frame in h2c for f in model.process(frame)]
    assert sum(len(w) > len(f) for w, f in zip(want, h2c)) >= 3
    box = _box("laps-tx-wire")
    seen = {}

    async def bench(ctx, p):
        await _reset(ctx, p)
        for c in cmds:
            await _command(ctx, p, c)
        t = Traffic(ctx, p, ready=lambda out, c: c % 5 != 3)
        for f in h2c:
            t.send(H2C, f)
        for f in rx:
            t.send(RX, f)
        await t.run(lambda t: len(t.got[TX]) == len(want) and len(t.got[C2H]) == len(rx))
        await t.wait(50)
        seen["t"] = t

    _simulate(box, bench)
    t = seen["t"]
    assert _frames(t.got[TX]) == want
    check_tx(t.got[TX])
    assert _frames(t.got[C2H]) == rx
    assert all(sizes == [len(f)] * len(sizes) for f, sizes, _, _ in t.got[C2H])   # the adapter's own tuser_size


def _box_params(pipeline):
    from lbpipe.blocks import get_block
    return get_block(pipeline).resolve(SMALL[pipeline])


# the box's parts on their own: what the pipelines above never send ---------------------------------------------------

def _run_part(dut, bench):
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()


async def _stream(ctx, i, o, frames, *, ready=lambda c: True, extra=(), limit=500, n_out=None):
    """Offer ``frames`` (bytes) on AXI4-Stream ``i`` beat by beat while taking ``o`` when ``ready(cycle)``; returns
    the frames out as ``(bytes, [extra signals' values on each beat])``."""
    beats = [b for f in frames for b in _beats(f, 0)]
    got, cur, vals = [], b"", []
    n_out = len(frames) if n_out is None else n_out
    for c in range(limit):
        if len(got) == n_out:
            return got
        if beats:
            tdata, tkeep, tlast, _, _ = beats[0]
            ctx.set(i.tdata, tdata); ctx.set(i.tkeep, tkeep); ctx.set(i.tlast, tlast); ctx.set(i.tvalid, 1)
        else:
            ctx.set(i.tvalid, 0)
        ctx.set(o.tready, int(ready(c)))
        taken = beats and ctx.get(i.tready)
        if ready(c) and ctx.get(o.tvalid):
            cur += ctx.get(o.tdata).to_bytes(64, "little")[:bin(ctx.get(o.tkeep)).count("1")]
            vals.append(tuple(ctx.get(x) for x in extra))
            if ctx.get(o.tlast):
                got.append((cur, vals))
                cur, vals = b"", []
        if taken:
            beats.pop(0)
        await ctx.tick()
    raise AssertionError(f"timed out with {len(got)} frames out")


def test_c2h_sizer_cuts_what_it_cannot_hold_and_resets_clean():
    """A 4-beat sizer: frames of up to 4 beats leave whole with their length on every beat, under back-pressure; a
    6-beat frame leaves as its first 4 beats with length 256 and is counted; the frame after it is intact. A reset
    in the middle of a frame empties the sizer: the frames sent after it leave intact, nothing of the cut-off one."""
    from lbpipe.boards.opennic import C2hSizer
    rng = random.Random(2)
    frames = [bytes(rng.randrange(256) for _ in range(n)) for n in (60, 256, 200, 6 * 64 - 10, 130, 1)]
    want = [f if len(f) <= 256 else f[:256] for f in frames]
    from amaranth import ResetInserter, Signal
    dut = C2hSizer(depth=4)
    rst = Signal()
    seen = {}

    async def bench(ctx):
        seen["got"] = await _stream(ctx, dut.i, dut.o, frames, ready=lambda c: c % 3 != 1, extra=[dut.size])
        seen["cut"] = ctx.get(dut.cut)
        # a reset with half a frame in: what comes after it leaves whole
        ctx.set(dut.o.tready, 0)
        for tdata, tkeep, tlast, _, _ in _beats(frames[1], 0)[:2]:
            ctx.set(dut.i.tdata, tdata); ctx.set(dut.i.tkeep, tkeep); ctx.set(dut.i.tlast, tlast)
            ctx.set(dut.i.tvalid, 1)
            assert ctx.get(dut.i.tready)
            await ctx.tick()
        ctx.set(dut.i.tvalid, 0)
        ctx.set(rst, 1)
        await ctx.tick()
        ctx.set(rst, 0)
        seen["after"] = await _stream(ctx, dut.i, dut.o, frames[:2], extra=[dut.size])

    _run_part(ResetInserter(rst)(dut), bench)
    assert [f for f, _ in seen["got"]] == want
    assert all(sizes == [(len(f),)] * len(sizes) for f, sizes in seen["got"])
    assert seen["cut"] == 1
    assert [f for f, _ in seen["after"]] == frames[:2]


def test_tx_sizer_counts_bytes_to_the_last_beat():
    """Frames of 1 to 3 beats under back-pressure: each beat carries the frame's bytes up to and including it."""
    from lbpipe.boards.opennic import TxSizer
    rng = random.Random(4)
    frames = [bytes(rng.randrange(256) for _ in range(n)) for n in (64, 65, 1, 190, 128)]
    dut = TxSizer()
    seen = {}

    async def bench(ctx):
        seen["got"] = await _stream(ctx, dut.i, dut.o, frames, ready=lambda c: c % 4 != 2, extra=[dut.size])

    _run_part(dut, bench)
    assert [f for f, _ in seen["got"]] == frames
    for f, sizes in seen["got"]:
        assert [s for s, in sizes] == [min(len(f), 64 * (k + 1)) for k in range(len(sizes))]
