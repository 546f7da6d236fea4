"""Themis-D in the wire: the golden model against Themis-D's own decisions and the paper's compensation example,
then the cocotb tests of parser -> QP classifier -> Themis-D -> compensator, and pcap replay through both engines.

The golden-model checks derive what must leave from Themis-D's decisions (``drop``, ``arm``, ``comp``) and the
input frames alone, not from the compensator's model: a dropped frame is absent, a compensation NACK is the frame of
the last NACK that armed its QP, and it parses as a NAK for ``comp_psn`` with MSN ``comp_msn`` and a correct ICRC.
"""

import json
import random

import pytest

from lbpipe.boards.top import FlatTop
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.themis.wire import TABLE_THEMIS_D_BASE, ThemisDWire
from lbpipe.sim.themis.themis_d import Verdict
from lbpipe.sim.themis.net import check_properties
from lbpipe.sim.themis.wire import ThemisDWireModel
from lbpipe.tb.lib.packets import RC_SEND_ONLY, classify, icrc, roce_data
from lbpipe.tb.lib.runner import run_cocotb, write_verilog
from lbpipe.tb.themis.test_themis_d_wire import WIRE_PARAMS, Qp, closed_loop_traffic, setup_commands

NAK_PSN_SEQUENCE_ERROR = 0x60


def _model(cmds, params=WIRE_PARAMS):
    model = ThemisDWireModel(**params)
    for cmd in cmds:
        model.control(cmd)
    return model


@pytest.mark.parametrize("seed", [1, 5, 6, 7])
def test_golden_matches_themis_d_and_the_closed_loop(seed):
    """The wire's decisions for the closed loop's frames are the closed loop's own Themis-D decisions (so the parser
    and the classifier hand Themis-D the right items), the properties P1 and P2 hold, and the frames that leave are
    exactly those the decisions call for."""
    cmds, frames, sc = closed_loop_traffic(seed)
    model = _model(cmds)
    outputs, sent = [], []
    armed = {}
    for frame, info, want in zip(frames, sc.info, sc.outputs):
        result = model.decide(frame)
        out = model.comp.process(frame, {"drop": result["drop"], "record": result["arm"], "comp": result["comp"],
                                         "qp": result["qp"]})
        if info["origin"] == "foreign":
            assert (result["drop"], result["arm"], result["comp"]) == (0, 0, 0)
            assert result["verdict"] == Verdict.PASS
            result = want          # the closed loop's foreign item stands in for the frame that replaced it
        else:
            fields = ("kind", "qp_hit", "qp", "psn", "msn", "drop", "arm", "comp", "comp_psn", "comp_msn", "verdict")
            assert {k: result[k] for k in fields} == {k: want[k] for k in fields}
        outputs.append(result)
        expect = [] if result["drop"] else [frame]
        if result["comp"]:
            nack = armed[result["qp"]]
            meta = classify(nack)
            assert (meta["kind"], meta["syndrome"]) == (PacketKind.NACK.value, NAK_PSN_SEQUENCE_ERROR)
            assert (meta["psn"], meta["msn"]) == (result["comp_psn"], result["comp_msn"])
            assert nack[-4:] == icrc(nack)
            expect.append(nack)
        if result["arm"]:
            armed[result["qp"]] = frame
        assert out == expect
        sent += out
    assert check_properties(sc, outputs) == []
    counts = model.comp.stats()
    assert counts[0] == sum(o["drop"] for o in outputs) > 0
    assert counts[3] == sum(o["comp"] for o in outputs) > 0 and counts[4] == 0


def test_golden_paper_compensation_example():
    """Section 3.4, Figure 4c with N = 2 on frames: 0, 1, 3 leave; the NIC NACKs ePSN 2 (MSN 7); the NACK is
    blocked (tPSN 3 is on the other path) and its frame recorded; 5 (other path) passes alone; 4 (2's path) passes
    and is followed by the blocked NACK's frame, byte for byte; 6 passes alone."""
    params = dict(WIRE_PARAMS, n_paths=2)
    qp = Qp(0)
    model = _model(setup_commands([qp], n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"],
                                  ipv6=params["ipv6"]), params)
    rng = random.Random(1)
    data = {p: bytes(qp.data(p, rng)) for p in range(7)}
    nack = bytes(qp.nack(2, 7))
    assert [model.process(data[p]) for p in (0, 1, 3)] == [[data[0]], [data[1]], [data[3]]]
    assert model.process(nack) == []
    assert model.process(data[5]) == [data[5]]
    assert model.process(data[4]) == [data[4], nack]
    assert model.process(data[6]) == [data[6]]
    # The compensator's six counters, then Themis-D's out-of-range NACKs (none here).
    assert model.stats()[3 + 8:] == [1, 1, 0, 1, 0, 0, 0]


def test_golden_control_routing():
    """Tables 0 to 15 reach the classifier, 16 to 31 Themis-D (as table - 16); others are ignored: a QP set up
    with table 16 is active, table 17 tears it down, table 32 does nothing."""
    qp = Qp(1)
    params = WIRE_PARAMS
    cmds = setup_commands([Qp(0), qp], n_qps=params["n_qps"], buckets=params["buckets"], ways=params["ways"],
                          ipv6=params["ipv6"])
    model = _model(cmds)
    rng = random.Random(2)
    model.process(bytes(qp.data(10, rng)))
    assert model.themis.flows[1].queue.count == 1
    model.control({"table": 2 * TABLE_THEMIS_D_BASE, "index": 1, "data": 0})
    assert model.themis.flows[1].active == 1
    model.control({"table": TABLE_THEMIS_D_BASE + 1, "index": 1, "data": 0})
    assert model.themis.flows[1].active == 0


def test_signature_and_parameters():
    wire = ThemisDWire(n_qps=8, queue_depth=4, n_paths=2, buckets=16, ways=2)
    wire._MustUse__silence = True
    members = wire.signature.members
    assert set(members) == {"s_axis", "m_axis", "ctl", "stats"}
    assert members["stats"].shape == 32 * 18      # classifier 3, Themis-D 8 + 1 (out of range), compensator 6
    with pytest.raises(ValueError):
        ThemisDWire(n_qps=0)
    with pytest.raises(ValueError):
        ThemisDWire(buckets=3)
    with pytest.raises(ValueError):
        ThemisDWire(depth=1)
    with pytest.raises(TypeError):
        ThemisDWireModel(n_paths=2.0)


def test_latency_one_frame():
    """One data frame of a set-up QP into an idle pipeline: its first beat is offered ``latency`` cycles after the
    edge that takes its last beat (Amaranth's simulator, no cocotb)."""
    from amaranth.sim import Simulator
    dut = ThemisDWire(**WIRE_PARAMS)
    qp = Qp(0)
    cmds = setup_commands([qp], n_qps=WIRE_PARAMS["n_qps"], buckets=WIRE_PARAMS["buckets"],
                          ways=WIRE_PARAMS["ways"], ipv6=WIRE_PARAMS["ipv6"])
    frame = bytes(roce_data(qp.remote, qp.local, qp.sport, qp.local_qpn, 5, opcode=RC_SEND_ONLY, payload_len=0))
    assert len(frame) <= 64
    measured = []

    async def bench(ctx):
        for cmd in cmds:
            ctx.set(dut.ctl.payload, cmd)
            ctx.set(dut.ctl.valid, 1)
            await ctx.tick().until(dut.ctl.ready)
            ctx.set(dut.ctl.valid, 0)
        await ctx.tick().repeat(30)
        ctx.set(dut.m_axis.tready, 1)
        ctx.set(dut.s_axis.tdata, int.from_bytes(frame, "little"))
        ctx.set(dut.s_axis.tkeep, (1 << len(frame)) - 1)
        ctx.set(dut.s_axis.tlast, 1)
        ctx.set(dut.s_axis.tvalid, 1)
        await ctx.tick().until(dut.s_axis.tready)
        ctx.set(dut.s_axis.tvalid, 0)
        for n in range(1, 100):
            await ctx.tick()
            if ctx.get(dut.m_axis.tvalid):
                measured.append(n)
                return

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert measured == [dut.latency]


def _wire_env(params):
    return {f"LBPIPE_WIRE_{k.upper()}": str(int(v)) for k, v in params.items()}


@pytest.mark.parametrize("testcase", [pytest.param("closed_loop", marks=pytest.mark.deep), "closed_loop_with_stalls",
                                      "line_rate", "reset_mid_traffic"])
def test_rtl(testcase):
    top = FlatTop(ThemisDWire(**WIRE_PARAMS))
    path = write_verilog(top, name="themis_d_wire_top", ports=top.ports())
    run_cocotb(path, toplevel="themis_d_wire_top", test_module="lbpipe.tb.themis.test_themis_d_wire", testcase=testcase,
               extra_env=_wire_env(WIRE_PARAMS))


def test_pcap_replay_golden_and_rtl_identical(tmp_path):
    """``lbpipe replay themis-d-wire`` on a pcap of a closed-loop run: the golden model and the RTL write the same
    frames, blocked NACKs missing and compensation NACKs added."""
    from lbpipe.cli import main
    from lbpipe.trace import read_pcap
    params = [arg for k, v in WIRE_PARAMS.items() for arg in ("--param", f"{k}={int(v)}")]
    assert main(["trace", "themis-d-wire", *params, "--seed", "8", "-n", "150", "-o", str(tmp_path / "in.pcap")]) == 0
    frames = read_pcap(tmp_path / "in.pcap")
    cmds = [json.loads(line)["ctl"] for line in (tmp_path / "in.ctl.jsonl").read_text().splitlines()]
    want_frames, want_cmds = closed_loop_traffic(8, packets_per_flow=33)[:2][::-1]
    assert (frames, cmds) == (want_frames, want_cmds)          # runts and cut frames byte for byte
    assert any(len(f) < 60 for f in frames)
    args = [*params, "--ctl", str(tmp_path / "in.ctl.jsonl")]
    assert main(["replay", "themis-d-wire", str(tmp_path / "in.pcap"), *args, "-o", str(tmp_path / "g.pcap")]) == 0
    assert main(["replay", "themis-d-wire", str(tmp_path / "in.pcap"), *args, "--engine", "rtl",
                 "-o", str(tmp_path / "r.pcap")]) == 0
    golden = read_pcap(tmp_path / "g.pcap")
    assert golden == read_pcap(tmp_path / "r.pcap")
    model = _model(cmds)
    assert golden == [f for frame in frames for f in model.process(frame)]
    assert model.comp.stats()[0] > 0 and model.comp.stats()[3] > 0      # NACKs dropped, compensation sent
