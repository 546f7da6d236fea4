"""flb-tx-wire's marks (samples and piggybacks): the golden model against hand-worked scenarios.

Expectations come from ``tb/flb/tx_marks.py`` (frames built with tb/lib/packets.py, the path and the marks written
by hand from docs/flb_tx_wire.md and docs/flb_rx_wire.md, the counters tallied per step) and from the literal
values below, never from lbpipe.sim.flb. The expected frames themselves are checked against scapy's dissection and
against tb/lib/packets.py's incremental port rewrite (an ICRC reached two ways)."""

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.flb.wire import FlbTxWireModel
from lbpipe.tb.flb.tx_marks import SMALL, WIDE, garbage, hand_scenarios, routed, udp_offset
from lbpipe.tb.lib.packets import RC_SEND_ONLY, classify, icrc, rewrite_udp_sport, roce_data

SCENARIOS = {sc.name: sc for sc in hand_scenarios()}
OTHER = PacketKind.OTHER.value
A = ("10.0.0.1", "10.0.1.7", 0x1230, 0x000111)            # destination 1 (small): path 3 with route_by_hand's delays


def _send(flow, psn, **options):
    return bytes(roce_data(*flow, psn, opcode=RC_SEND_ONLY, payload_len=16, **options))


def _replay(sc, model):
    """Every step in order; returns the frames that left."""
    outs = []
    for step in sc.steps:
        if step[0] == "ctl":
            model.control(step[1])
        elif step[0] == "meas":
            model.measurement(step[1])
        else:
            outs.append(model.process(step[1]))
    return outs


def _marks(frame):
    """(BTH byte 4, UDP checksum) of a frame, found by the test's own offsets."""
    l4 = udp_offset(frame)
    return frame[l4 + 12], int.from_bytes(frame[l4 + 6:l4 + 8], "big")


# -- the expected frames checked from outside --------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_expected_frames_by_scapy(name):
    """Every expected routed frame, dissected by scapy: the port's low bits are a path, the other port bits, FECN,
    BECN, the opcode and the payload as sent; bits 5..0 of byte 4 (scapy's resv6) and the UDP checksum say at most
    one of S and P; the ICRC is the bytes' and equals tb/lib/packets.py's incremental rewrite of the port."""
    sc = SCENARIOS[name]
    low = (1 << (sc.params["n_paths"] - 1).bit_length()) - 1
    routed_frames = 0
    for frame, want, note in sc.frames:
        if want == frame:
            continue
        routed_frames += 1
        sent, out = Ether(frame), Ether(want)
        assert out[UDP].sport & ~low == sent[UDP].sport & ~low, note
        assert (out[BTH].fecn, out[BTH].becn, out[BTH].opcode) == (sent[BTH].fecn, sent[BTH].becn,
                                                                  sent[BTH].opcode), note
        resv6 = out[BTH].resv6
        assert resv6 >> 4 in (0, 1, 2), note
        if resv6 >> 4 == 2:
            assert resv6 == 0b100000, note
        if resv6 == 0:
            assert out[UDP].chksum == 0, note
        xor = out[UDP].sport ^ sent[UDP].sport
        assert want[-4:] == icrc(want) == rewrite_udp_sport(frame, xor)[-4:], note
    assert routed_frames >= 20


def test_golden_mark_offsets_by_hand():
    """Byte positions worked by hand from the layouts: untagged IPv4, UDP at 14 + 20 = 34 (port 34..35, checksum
    40..41, BTH byte 4 at 34 + 8 + 4 = 46); one 802.1Q tag, +4 (44..45, 50); IPv6, UDP at 14 + 40 = 54 (60..61,
    66)."""
    out = routed(_send(A, 1, fecn=1), 3, 4, p=1, mpath=2, value=0x0102)
    assert (out[34:36], out[40:42], out[46]) == (b"\x12\x33", b"\x01\x02", 0x92)
    out = routed(_send(A, 1, vlan=5), 3, 4, s=1, value=0x0ABC)
    assert (out[38:40], out[44:46], out[50]) == (b"\x12\x33", b"\x0a\xbc", 0x20)
    out = routed(_send(("fd00::1", "fd00::209", 0x6662, 7), 1), 1, 4, p=1, mpath=2, value=0xF0)
    assert (out[54:56], out[60:62], out[66]) == (b"\x66\x61", b"\x00\xf0", 0x12)


# -- the golden model on the hand-worked scenarios ---------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_hand_scenarios(name):
    """Every frame and the 16 counters of the scenario (tb/flb/tx_marks.py)."""
    sc = SCENARIOS[name]
    model = FlbTxWireModel(**sc.params)
    outs = _replay(sc, model)
    errors = [f"frame {k} ({note}): got {got.hex()}, want {want.hex()}"
              for k, (got, (_, want, note)) in enumerate(zip(outs, sc.frames)) if got != want]
    if len(outs) != len(sc.frames):
        errors.append(f"{len(outs)} frames out, {len(sc.frames)} expected")
    if list(model.stats()) != sc.stats:
        errors.append(f"counters: got {list(model.stats())}, want {sc.stats}")
    assert not errors, "\n".join(errors[:12])
    # each back-to-back pair: a frame step right behind another, the first sampled, the second not
    for k in sc.back_to_back:
        assert sc.steps.index(("frame",) + sc.frames[k]) == sc.steps.index(("frame",) + sc.frames[k - 1]) + 1
        assert (_marks(outs[k - 1])[0] & 0x20, _marks(outs[k])[0] & 0x20) == (0x20, 0)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_icrc_on_every_output(name):
    """Every RoCEv2 frame the model sends carries the ICRC its bytes give (the marks are under the mask)."""
    sc = SCENARIOS[name]
    outs = _replay(sc, FlbTxWireModel(**sc.params))
    roce = [o for o in outs if classify(o)["kind"] != OTHER]
    assert len(roce) >= len(outs) - 2
    assert all(o[-4:] == icrc(o) for o in roce)


def test_golden_sampled_frame_literal():
    """The small scenario's A at 105 (FECN and BECN set, sampled), written out: port 0x1230 -> 0x1233, checksum
    105 = 0x0069, byte 4 0xC0 -> 0xE0, the ICRC of the new port (the sent frame's ends 2bff35f8)."""
    sc = SCENARIOS["small"]
    outs = _replay(sc, FlbTxWireModel(**sc.params))
    k = next(k for k, (_, _, note) in enumerate(sc.frames) if note.startswith("A at 105: (1, 3) 105 - 100"))
    sent = bytes.fromhex("020000000002020000000001080045020" "03c00004000401125a80a0000010a000107"
                         "123012b7002800000400ffffc000011100000006" "060708090a0b0c0d0e0f101112131415"
                         "2bff35f8")
    assert sc.frames[k][0] == sent
    assert outs[k] == bytes.fromhex("020000000002020000000001080045020" "03c00004000401125a80a0000010a000107"
                                    "123312b7002800690400ffffe000011100000006" "060708090a0b0c0d0e0f101112131415"
                                    "32c1e673")


# -- further hand-worked cases -----------------------------------------------------------------------------------------

def _small_model(**over):
    """SMALL with the clock stopped at 100 and destination 1's delays 50, 20, 30, 5 (path 3)."""
    model = FlbTxWireModel(**dict(SMALL, **over))
    for cmd in [{"table": 48, "index": 1, "data": 0}, {"table": 48, "index": 0, "data": 100}] + \
            [{"table": 0, "index": 1 << 4 | p, "data": d} for p, d in enumerate((50, 20, 30, 5))]:
        model.control(cmd)
    return model


def test_golden_stamp_low_16_bits():
    """time_bits 20: the stamp is `now`'s low 16 bits (0x12345 -> 0x2345); the period test wraps at 2^20: last
    0xFFFF0, now 0x30 is 64 ticks (sampled at period 64), 0x2F is 63 (not)."""
    model = _small_model(time_bits=20, sample_ticks=64)
    model.control({"table": 48, "index": 0, "data": 0x12345})
    assert _marks(model.process(_send(A, 1))) == (0x20, 0x2345)
    model.control({"table": 48, "index": 0, "data": 0xFFFF0})
    assert _marks(model.process(_send(A, 2))) == (0x20, 0xFFF0)
    model.control({"table": 48, "index": 0, "data": 0x2F})
    assert _marks(model.process(_send(A, 3))) == (0x00, 0)
    model.control({"table": 48, "index": 0, "data": 0x30})
    assert _marks(model.process(_send(A, 4))) == (0x20, 0x0030)
    assert model.stats()[14:16] == [3, 0]


def test_golden_table50_and_meas_fields():
    """Table 50's index is cut to its low log2 n_dests bits before the range test: 0x105 -> edge 1 (3 edges, 2 bits),
    0x107 -> 3, ignored. Its delay is data bits 0-15 (0x0123 with junk above bit 19), cut to the field's
    min(delay_bits, 16) bits as ``meas``'s is (datasheet, table 50)."""
    model = _small_model()
    assert _marks(model.process(_send(A, 1))) == (0x20, 100)
    model.control({"table": 50, "index": 0x105, "data": 0x0123 | 3 << 16 | 0xFFF << 20})
    assert _marks(model.process(_send(A, 2))) == (0x13, 0x0123)
    model.control({"table": 50, "index": 0x107, "data": 5 | 1 << 16})
    assert _marks(model.process(_send(A, 3))) == (0x00, 0)
    # the delay's low min(delay_bits, 16) = 12 bits (the field's width), by either input: 0xF123 -> 0x123
    model.control({"table": 50, "index": 1, "data": 0xF123 | 1 << 16})
    assert _marks(model.process(_send(A, 4))) == (0x11, 0x0123)
    model.measurement({"edge": 1, "path": 2, "delay": 0xFABC})
    assert _marks(model.process(_send(A, 5))) == (0x12, 0x0ABC)
    assert model.stats()[14:16] == [1, 3]


def test_golden_reset_samples_again():
    """After a reset (the sampler's memory swept, the period back to sample_ticks after table 48 made it 0, the
    counters 0): the pair sampled at 100 before is sampled again at 100."""
    model = _small_model()
    assert _marks(model.process(_send(A, 1))) == (0x20, 100)
    model.control({"table": 48, "index": 2, "data": 0})
    model.reset()
    assert list(model.stats()) == [0] * 16
    for cmd in ({"table": 48, "index": 1, "data": 0}, {"table": 48, "index": 0, "data": 100}):
        model.control(cmd)
    assert _marks(model.process(_send(A, 2))) == (0x20, 100)
    assert _marks(model.process(_send(A, 3))) == (0x00, 0)
    assert model.stats()[13:16] == [1, 1, 0]


def test_golden_garbage_never_leaks():
    """A host frame with S and P both set and a path in bits 3..0 (0x3F), checksum 0: FLB traffic, so the wire owns
    the fields: sampled -> 0x20 and the stamp; then nothing -> 0x00 and 0 (not the host's bits)."""
    model = _small_model()
    assert _marks(model.process(garbage(_send(A, 1, fecn=1), 0x3F))) == (0xA0, 100)
    assert _marks(model.process(garbage(_send(A, 2, becn=1), 0x3F))) == (0x40, 0)
    assert model.stats()[14:16] == [1, 0]


@pytest.mark.parametrize("params", [SMALL, WIDE], ids=["small", "wide"])
def test_golden_parameters_of_the_scenarios(params):
    """The two parameter sets are the brief's (n_flows a power of two; the wide one 8 paths, 16 destinations, 16-bit
    ticks and delays, period 64)."""
    assert params["n_flows"] & (params["n_flows"] - 1) == 0
    if params is WIDE:
        assert (params["n_paths"], params["n_dests"], params["time_bits"], params["delay_bits"],
                params["sample_ticks"]) == (8, 16, 16, 16, 64)
    else:
        assert params["sample_ticks"] == 5 and params["time_bits"] == 12
