"""Compensator: the golden model against the rules of its module docstring (expected values worked out by hand),
the RTL's signature and parameters, and the cocotb tests of the RTL against the golden model."""

import random

import pytest
from amaranth import Shape
from amaranth.lib import data, stream
from amaranth.lib.wiring import In, Out

from lbpipe.blocks import get_block
from lbpipe.boards.top import FlatTop
from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.packet.compensator import N_COUNTERS, CompAction, Compensator
from lbpipe.sim.packet.compensator import Compensator as Golden
from lbpipe.tb.lib.packets import roce_nak
from lbpipe.tb.lib.runner import CocotbFailure, run_cocotb, write_verilog
from lbpipe.tb.packet.test_compensator import FrameMaker, directed_cases

DROPPED, RECORDED, TOO_LONG, SENT, MISSED, CUT = range(6)


def _nak(psn=0x123, **options):
    return bytes(roce_nak("10.0.0.1", "10.0.0.2", 0xC001, 0x456, psn, msn=7, **options))


def _act(qp=0, **flags):
    return {"tag": 0x55, "qp": qp, **flags}


def _counts(**values):
    counts = [0] * N_COUNTERS
    for name, value in values.items():
        counts[{"dropped": DROPPED, "recorded": RECORDED, "too_long": TOO_LONG, "sent": SENT,
                "missed": MISSED, "cut": CUT}[name]] = value
    return counts


# --- golden model ----------------------------------------------------------------------------------------------------

def test_golden_passes_a_frame_without_flags():
    model = Golden(n_qps=16, depth=64)
    frame = bytes(range(200))
    assert model.process(frame, _act(3)) == [frame]
    assert model.process(bytearray(frame), {}) == [frame]
    assert model.stats() == [0] * 6


def test_golden_record_then_comp_sends_the_recorded_frame_after_the_trigger():
    model = Golden(n_qps=16, depth=64)
    nak = _nak()
    assert len(nak) == 62                                      # IPv4 RoCEv2 NAK: 14 + 20 + 8 + 12 + 4 + 4
    assert model.process(nak, _act(3, record=1)) == [nak]      # the recorded frame itself still leaves
    trigger = bytes(range(100))
    out = model.process(trigger, _act(3, comp=1))
    assert out == [trigger, nak]
    assert model.process(bytes(5), _act(3, comp=1)) == [bytes(5), nak]   # a template is sent any number of times
    assert model.stats() == _counts(recorded=1, sent=2)


def test_golden_drop():
    model = Golden(n_qps=16, depth=64)
    assert model.process(bytes(range(70)), _act(0, drop=1)) == []
    assert model.process(bytes(1), _act(15, drop=1)) == []
    assert model.stats() == _counts(dropped=2)


def test_golden_drop_with_record_and_with_comp():
    """A dropped frame is still recorded, and a dropped trigger's compensation NACK is still sent."""
    model = Golden(n_qps=16, depth=64)
    nak = _nak()
    assert model.process(nak, _act(2, drop=1, record=1)) == []
    assert model.process(bytes(9), _act(2, drop=1, comp=1)) == [nak]
    assert model.stats() == _counts(dropped=2, recorded=1, sent=1)


def test_golden_record_and_comp_in_one_action_send_the_frame_twice():
    model = Golden(n_qps=16, depth=64)
    nak = _nak()
    assert model.process(nak, _act(4, record=1, comp=1)) == [nak, nak]
    assert model.stats() == _counts(recorded=1, sent=1)


@pytest.mark.parametrize("size", [1, 63, 64, 65, 127, 128])
def test_golden_records_frames_of_up_to_two_beats(size):
    model = Golden(n_qps=16, depth=64)
    frame = bytes((7 * i + size) & 0xFF for i in range(size))
    assert model.process(frame, _act(9, record=1)) == [frame]
    assert model.process(b"\x01", _act(9, comp=1)) == [b"\x01", frame]
    assert model.stats() == _counts(recorded=1, sent=1)


@pytest.mark.parametrize("size", [129, 192, 193, 600])
def test_golden_frame_over_two_beats_is_too_long(size):
    model = Golden(n_qps=16, depth=64)
    frame = bytes(size)
    assert model.process(frame, _act(9, record=1)) == [frame]
    assert model.stats() == _counts(too_long=1)
    assert model.process(b"\x02", _act(9, comp=1)) == [b"\x02"]
    assert model.stats() == _counts(too_long=1, missed=1)


def test_golden_too_long_record_empties_a_good_template():
    model = Golden(n_qps=16, depth=64)
    nak = _nak()
    model.process(nak, _act(5, record=1))
    model.process(bytes(129), _act(5, record=1))
    assert model.process(b"\x03", _act(5, comp=1)) == [b"\x03"]
    # Another QP's template is untouched by either record.
    model.process(_nak(psn=9), _act(6, record=1))
    model.process(bytes(300), _act(5, record=1))
    assert model.process(b"\x04", _act(6, comp=1)) == [b"\x04", _nak(psn=9)]
    assert model.stats() == _counts(recorded=2, too_long=2, sent=1, missed=1)


def test_golden_comp_without_template_misses():
    model = Golden(n_qps=16, depth=64)
    assert model.process(bytes(64), _act(0, comp=1)) == [bytes(64)]
    assert model.process(bytes(64), _act(15, drop=1, comp=1)) == []
    model.process(_nak(), _act(1, record=1))                   # another QP's template does not help
    assert model.process(bytes(3), _act(2, comp=1)) == [bytes(3)]
    assert model.stats() == _counts(dropped=1, recorded=1, missed=3)


def test_golden_record_overwrites_the_older_template():
    model = Golden(n_qps=16, depth=64)
    old, new = _nak(psn=1), _nak(psn=2, vlan=5)
    assert len(new) == 66
    model.process(old, _act(7, record=1))
    assert model.process(bytes(2), _act(7, comp=1)) == [bytes(2), old]
    model.process(new, _act(7, record=1))
    assert model.process(bytes(2), _act(7, comp=1)) == [bytes(2), new]
    assert model.stats() == _counts(recorded=2, sent=2)


def test_golden_qp_out_of_range_records_nothing_and_misses():
    """n_qps = 10: the qp field has 4 bits, so qp 10 .. 15 can be sent; they record nothing and send nothing."""
    model = Golden(n_qps=10, depth=64)
    nak = _nak()
    assert model.process(nak, _act(12, record=1)) == [nak]
    assert model.stats() == _counts()                          # not counted as recorded
    assert model.process(bytes(200), _act(12, record=1)) == [bytes(200)]
    assert model.stats() == _counts()                          # nor as too long
    assert model.process(b"\x05", _act(12, comp=1)) == [b"\x05"]
    assert model.process(b"\x06", _act(12, record=1, comp=1)) == [b"\x06"]
    assert model.process(b"\x07", _act(15, drop=1, comp=1)) == []
    assert model.stats() == _counts(dropped=1, missed=3)
    # qp 12 does not alias qp 2 (12 mod 10) or qp 4 (12 mod 8).
    model.process(nak, _act(9, record=1))
    assert model.process(b"\x08", _act(2, comp=1)) == [b"\x08"]
    assert model.process(b"\x09", _act(4, comp=1)) == [b"\x09"]
    assert model.process(b"\x0a", _act(9, comp=1)) == [b"\x0a", nak]


def test_golden_counters_in_order():
    model = Golden(n_qps=4, depth=64)
    nak = _nak()
    model.process(nak, _act(0, record=1))                      # recorded
    model.process(bytes(130), _act(1, record=1))               # too long
    model.process(bytes(10), _act(0, comp=1))                  # sent
    model.process(bytes(10), _act(1, comp=1))                  # missed
    model.process(bytes(10), _act(2, comp=1))                  # missed
    model.process(bytes(10), _act(0, drop=1))                  # dropped
    model.process(bytes(10), _act(0, drop=1, comp=1))          # dropped, sent
    model.process(bytes(10), _act(3, drop=1, record=1))        # dropped, recorded
    model.process(bytes(64 * 64 + 1), _act(0))                  # cut
    assert model.stats() == [3, 2, 1, 2, 2, 1]


def test_golden_counters_wrap_modulo_2_to_the_32():
    model = Golden(n_qps=4, depth=64)
    model.counts = [(1 << 32) - 1, (1 << 32) - 2, 5, (1 << 33) - 1, 0, (1 << 32) - 1]
    assert model.stats() == [(1 << 32) - 1, (1 << 32) - 2, 5, (1 << 32) - 1, 0, (1 << 32) - 1]
    model.process(bytes(1), _act(0, drop=1))
    model.process(bytes(1), _act(1, record=1))
    model.process(bytes(1), _act(1, comp=1))
    model.process(bytes(64 * 64 + 1), _act(2))
    assert model.stats() == [0, (1 << 32) - 1, 5, 0, 0, 0]
    assert all(0 <= c < 1 << 32 for c in model.stats())


def test_golden_reset_clears_counters_and_keeps_templates():
    model = Golden(n_qps=16, depth=64)
    nak = _nak()
    model.process(nak, _act(11, record=1))
    model.process(bytes(129), _act(12, record=1))
    model.process(bytes(1), _act(13, drop=1, comp=1))
    assert model.stats() == _counts(dropped=1, recorded=1, too_long=1, missed=1)
    model.reset()
    assert model.stats() == [0] * 6
    assert model.process(b"\x01", _act(11, comp=1)) == [b"\x01", nak]
    assert model.process(b"\x02", _act(12, comp=1)) == [b"\x02"]       # an empty template stays empty
    assert model.stats() == _counts(sent=1, missed=1)


def test_golden_directed_cases_reach_every_rule():
    """The testbench's directed prologue, worked through by hand: 23 frames for n_qps = 10 (19 when every qp is
    in range), with the counters and compensation NACKs below."""
    for n_qps, counts, outputs in ((10, [2, 7, 2, 9, 4, 0], 30), (16, [2, 7, 2, 9, 2, 0], 26)):
        rng = random.Random(1)
        maker = FrameMaker(random.Random(2))
        pairs = directed_cases(rng, maker, n_qps)
        assert len(pairs) == (23 if n_qps == 10 else 19)
        model = Golden(n_qps=n_qps, depth=64)
        outs = [model.process(frame, action) for frame, action in pairs]
        assert model.stats() == counts
        assert sum(map(len, outs)) == outputs
        frames = [frame for frame, _ in pairs]
        # Records of 1, 64, 65 and 128 bytes each come back after the next frame.
        for k in range(4):
            assert outs[2 * k + 1] == [frames[2 * k + 1], frames[2 * k]]
            assert len(frames[2 * k]) == (1, 64, 65, 128)[k]
        assert outs[10] == [frames[10], frames[8]]                  # QP 0's NAK survives QP last's 129 bytes
        assert outs[12] == [frames[12]] and outs[13] == [frames[13]]
        assert outs[14] == [frames[14], frames[14]] and outs[15] == [frames[14]]
        assert outs[16] == [] and outs[17] == [frames[17], frames[16]]
        assert outs[-1] == [frames[-1], frames[16]]


# Frames longer than the beat FIFO: depth 4 keeps 256 bytes.

def test_golden_frame_of_depth_beats_passes_whole_and_one_byte_more_is_cut():
    model = Golden(n_qps=16, depth=4)
    whole = bytes(range(256))
    assert model.process(whole, _act(1)) == [whole]
    assert model.stats() == _counts()
    longer = whole + b"\xaa"
    assert model.process(longer, _act(1)) == [whole]
    assert model.stats() == _counts(cut=1)


@pytest.mark.parametrize("size", [257, 320, 321, 3 * 256 + 7])
def test_golden_long_frame_leaves_as_its_first_depth_beats(size):
    model = Golden(n_qps=16, depth=4)
    frame = bytes((3 * i + 1) & 0xFF for i in range(size))
    assert model.process(frame, _act(0)) == [frame[:256]]
    assert model.stats() == _counts(cut=1)


def test_golden_long_frame_with_drop_is_dropped_and_counted_twice():
    model = Golden(n_qps=16, depth=4)
    assert model.process(bytes(300), _act(0, drop=1)) == []
    assert model.stats() == _counts(dropped=1, cut=1)


def test_golden_long_frame_comp_is_served():
    """The template follows a cut frame, and takes a dropped cut frame's place."""
    model = Golden(n_qps=16, depth=4)
    nak = _nak()
    model.process(nak, _act(3, record=1))
    trigger = bytes(range(256)) * 2
    assert model.process(trigger, _act(3, comp=1)) == [trigger[:256], nak]
    assert model.process(trigger[1:], _act(3, drop=1, comp=1)) == [nak]
    assert model.stats() == _counts(dropped=1, recorded=1, sent=2, cut=2)


def test_golden_long_frame_is_never_recorded():
    """depth 2: a cut frame leaves as two beats, which a frame that came whole would be recorded in, but it empties
    its QP's template and counts as too long; with ``comp`` in the same action the comp then misses."""
    model = Golden(n_qps=16, depth=2)
    nak = _nak()
    model.process(nak, _act(4, record=1))
    model.process(nak[:-1], _act(5, record=1))
    frame = bytes(range(129))
    assert model.process(frame, _act(4, record=1)) == [frame[:128]]
    assert model.process(b"\x01", _act(4, comp=1)) == [b"\x01"]
    assert model.process(frame[::-1], _act(5, record=1, comp=1)) == [frame[::-1][:128]]
    assert model.process(bytes(200), _act(6, drop=1, record=1)) == []
    assert model.stats() == _counts(dropped=1, recorded=2, too_long=3, missed=2, cut=3)
    exact = bytes(range(128))                                   # two beats exactly: recorded
    model.process(exact, _act(4, record=1))
    assert model.process(b"\x02", _act(4, comp=1)) == [b"\x02", exact]


def test_golden_long_frame_qp_out_of_range():
    """Cut and counted whatever the qp; an out-of-range qp records and sends nothing, as for any frame."""
    model = Golden(n_qps=10, depth=2)
    assert model.process(bytes(130), _act(12, record=1, comp=1)) == [bytes(128)]
    assert model.stats() == _counts(missed=1, cut=1)


@pytest.mark.parametrize("cls", [Golden, Compensator], ids=["golden", "rtl"])
@pytest.mark.parametrize("kwargs, exc, message", [
    ({"n_qps": 0}, ValueError, r"^n_qps must be from 1 to 65536, not 0$"),
    ({"n_qps": 65537}, ValueError, r"^n_qps must be from 1 to 65536, not 65537$"),
    ({"n_qps": True}, TypeError, r"^n_qps must be an integer, not True$"),
    ({"n_qps": 16.0}, TypeError, r"^n_qps must be an integer, not 16\.0$"),
    ({"depth": 1}, ValueError, r"^depth must be from 2 to 4096, not 1$"),
    ({"depth": 4097}, ValueError, r"^depth must be from 2 to 4096, not 4097$"),
    ({"depth": "64"}, TypeError, r"^depth must be an integer, not '64'$"),
    ({"user_width": 0}, ValueError, r"^user_width must be from 1 to 64, not 0$"),
    ({"user_width": 65}, ValueError, r"^user_width must be from 1 to 64, not 65$"),
    ({"user_width": None}, TypeError, r"^user_width must be an integer, not None$"),
])
def test_bad_parameters(cls, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        cls(**kwargs)


@pytest.mark.parametrize("cls", [Golden, Compensator], ids=["golden", "rtl"])
def test_parameter_limits_accepted_and_keyword_only(cls):
    for kwargs in ({"n_qps": 1}, {"n_qps": 65536}, {"depth": 2}, {"depth": 4096}, {"user_width": 64}):
        obj = cls(**kwargs)
        obj._MustUse__silence = True
    with pytest.raises(TypeError):
        cls(16)


# --- RTL: signature, layout, registry --------------------------------------------------------------------------------

@pytest.mark.parametrize("n_qps, bits", [(1, 1), (2, 1), (3, 2), (10, 4), (16, 4), (17, 5), (1600, 11),
                                         (65536, 16)])
def test_action_layout(n_qps, bits):
    layout = CompAction(n_qps=n_qps)
    assert isinstance(layout, data.StructLayout)
    assert [(name, field.offset, field.width) for name, field in layout] == [
        ("tag", 0, 16), ("drop", 16, 1), ("record", 17, 1), ("comp", 18, 1), ("qp", 19, bits)]
    assert layout.size == 19 + bits


def test_signature():
    dut = Compensator()
    dut._MustUse__silence = True
    assert (dut.n_qps, dut.depth) == (1600, 256)
    assert dut.max_frame_bytes == 256 * 64
    assert Compensator.RECORD_BEATS == 2
    members = dut.signature.members
    assert set(members) == {"s_axis", "m_axis", "act", "stats"}
    assert members["s_axis"] == In(AXI4StreamSignature(data_width=512, user_width=1))
    assert members["m_axis"] == Out(AXI4StreamSignature(data_width=512, user_width=1))
    assert members["act"] == In(stream.Signature(CompAction(n_qps=1600)))
    assert members["stats"].flow == Out and Shape.cast(members["stats"].shape).width == 32 * 6
    assert N_COUNTERS == 6
    small = Compensator(n_qps=10, depth=64, user_width=4)
    small._MustUse__silence = True
    assert (small.n_qps, small.depth) == (10, 64)
    assert small.signature.members["s_axis"] == In(AXI4StreamSignature(data_width=512, user_width=4))
    assert small.signature.members["m_axis"] == Out(AXI4StreamSignature(data_width=512, user_width=4))
    assert small.signature.members["act"] == In(stream.Signature(CompAction(n_qps=10)))
    assert Shape.cast(small.signature.members["act"].signature.members["payload"].shape).width == 23


def test_template_bits():
    """Per QP: two 512-bit beats, then the last beat's 64 tkeep bits, two flags and two tusers."""
    for n_qps, user_width, per_qp in ((16, 1, 1024 + 64 + 2 + 2), (16, 4, 1024 + 64 + 2 + 8), (1600, 1, 1092)):
        dut = Compensator(n_qps=n_qps, user_width=user_width)
        dut._MustUse__silence = True
        assert dut.template_bits == n_qps * per_qp


def test_registry_entry():
    import importlib
    block = get_block("compensator")
    assert not block.is_meta
    assert block.defaults() == {"n_qps": 1600, "depth": 256, "user_width": 1}
    dut = block.build(n_qps=10, depth=64, user_width=1)
    dut._MustUse__silence = True
    assert isinstance(dut, Compensator)
    module, name = block.golden_ref.split(":")
    assert getattr(importlib.import_module(module), name) is Golden
    tb = importlib.import_module(block.tb_module)
    assert hasattr(tb, "reset_mid_traffic")


def test_top_ports():
    """FlatTop flattens the streams and, the compensator having no ``ctl``, keeps ``stats`` as an output port named
    ``stats`` (no control bridge, no ``s_axil_*``)."""
    top = FlatTop(Compensator(n_qps=10, depth=64))
    top.block._MustUse__silence = True
    top._MustUse__silence = True
    assert top.bridge is None and top.axil == {}
    members = ["tdata", "tkeep", "tvalid", "tready", "tlast", "tuser"]
    names = {port.name: len(port) for port in top.ports()}
    assert set(names) == ({f"s_axis_{n}" for n in members} | {f"m_axis_{n}" for n in members} |
                          {"act_valid", "act_ready", "act_payload", "stats"})
    assert (names["s_axis_tdata"], names["m_axis_tkeep"], names["act_payload"], names["stats"]) == (512, 64, 23, 192)


# --- RTL: cocotb under Icarus ----------------------------------------------------------------------------------------

def _run(testcase, *, n_qps=10, depth=64, user_width=1, env=None):
    top = FlatTop(Compensator(n_qps=n_qps, depth=depth, user_width=user_width))
    path = write_verilog(top, name="compensator_top", ports=top.ports())
    text = path.read_text()
    for name in ["clk", "rst", "s_axis_tdata", "s_axis_tready", "m_axis_tuser", "act_payload", "act_ready",
                 "stats"]:
        assert f" {name};" in text, f"port {name} missing from {path}"
    run_cocotb(path, toplevel="compensator_top", test_module="lbpipe.tb.packet.test_compensator", testcase=testcase,
               extra_env={"COMP_N_QPS": str(n_qps), "COMP_DEPTH": str(depth), **(env or {})})


@pytest.mark.parametrize("testcase", ["random_traffic", "random_traffic_pauses", "line_rate", "comp_timing",
                                      "sink_stopped", "actions_ahead", "action_latency", "reset_mid_traffic",
                                      "reset_cuts_record"])
def test_compensator_cocotb(testcase):
    """n_qps = 10 (qp 10 .. 15 out of range), a 64-beat FIFO, 1-bit tuser."""
    _run(testcase)


@pytest.mark.parametrize("testcase, depth", [("long_frames", 64), ("long_frames_pauses", 64), ("long_frames", 2)])
def test_compensator_cocotb_long_frames(testcase, depth):
    """Frames longer than the beat FIFO are cut (no deadlock), early and late actions, every kind of action; depth 2
    is where a cut frame would otherwise fit a template's two beats."""
    _run(testcase, depth=depth)


def test_compensator_cocotb_wide_tuser():
    """Every qp in range (n_qps = 16), 4-bit tuser, with pauses."""
    _run("random_traffic_pauses", n_qps=16, user_width=4)


def test_compensator_cocotb_one_qp():
    """One template (a one-entry memory, qp 1 out of range) and the smallest FIFO that holds a 600-byte frame."""
    _run("random_traffic", n_qps=1, depth=10, env={"COMP_FRAMES": "150"})


def test_compensator_cocotb_catches_a_wrong_frame():
    """The scoreboard flags an output that differs from its expectation by one bit (harness self-test)."""
    with pytest.raises(CocotbFailure, match="output 7, frame .* m_axis differs from golden"):
        _run("random_traffic", env={"COMP_FRAMES": "10", "COMP_CORRUPT": "7"})


@pytest.mark.regression
@pytest.mark.parametrize("seed", [21, *(pytest.param(seed, marks=pytest.mark.deep) for seed in (22, 23))])
def test_compensator_cocotb_long(seed):
    """Thousands of random frames per run, with and without pauses."""
    _run("random_traffic", env={"COMP_FRAMES": "3000", "COMP_SEED": str(seed)})
    _run("random_traffic_pauses", n_qps=16, user_width=3, env={"COMP_FRAMES": "3000", "COMP_SEED": str(seed)})
