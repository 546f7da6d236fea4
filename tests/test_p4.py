"""P4 programs (p4/) on bmv2 against lbpipe's golden models.

Each test directory p4/sim/test-<name>/ holds lbpipe control commands, the simple_switch_CLI commands made from them,
input frames and the expected output frames. The tests without the toolchain check that those files are what the
golden model and lbpipe/p4.py derive; the others compile the program with p4c-bm2-ss, run simple_switch on the input
pcap with the commands loaded, and compare its output byte for byte with the golden model's. Independently of both,
every frame that came in with a valid ICRC must leave with one (tb/lib/packets.py ``icrc``, zlib) and every sprayed
frame's new UDP source port is re-derived here from the control commands and Equation 1.

Themis-D (themis_d.p4, tests ``themis-d-*``): bmv2's frames are the golden model's byte for byte, in its order within
each QP (recirculation may interleave QPs otherwise: p4/README.md); the NACK scans' extra passes are re-derived from
the golden model's scan lengths; and the closed loop's NACK properties (sim/themis/net.py) are checked on the fates
of the frames read off bmv2's output.

Commands between frames (tests with a ``trace.pcap``, ``themis-ctl`` and ``themis-d-ctl``): the programs take them
in-band; the expected frames are the golden model's with each command applied before the frame its event names,
written again here.

FLB (flb_edge.p4, tests ``flb-*``): every packet's decision, and the flow (CRC16 of its 5-tuple), as the golden model
sim/flb/route.py makes it when fed what this file re-derives from the input frames alone (its own CRC16 and LPM).

SELB reordering (selb_reorder.p4, tests ``selb-reorder-*``): the program holds packets by recirculation, so bmv2's
frames are the golden model's byte for byte in its order within each flow (flows may interleave otherwise:
p4/README.md), its counters the golden model's; properties of the delivered order are checked from the input frames
alone.

The toolchain is found by :func:`lbpipe.p4.find_toolchain` (PATH, ~/.cache/lbpipe-p4, or installed there from
../shared/tools/p4); without it these tests skip with one line saying why.
"""

import importlib.util
import json
import math
import os
import pathlib
import struct
import subprocess
import sys

import pytest

from lbpipe import p4
from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.packet.parser import parse
from lbpipe.sim.themis.themis_d import Verdict
from lbpipe.sim.themis.net import check_properties
from lbpipe.sim.themis.wire import ThemisDWireModel, ThemisSWireModel
from lbpipe.tb.themis.test_themis_d_wire import closed_loop_traffic
from lbpipe.tb.lib import packets as pk
from lbpipe.trace import read_events, read_pcap

P4 = pathlib.Path(__file__).resolve().parent.parent / "p4"
ALL_TESTS = sorted(d.name[5:] for d in (P4 / "sim").glob("test-*"))
#: Themis-S tests (themis_tor.p4) and Themis-D tests (themis_d.p4).
TESTS_S_ALL = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
               == "themis-s-wire"]
#: Themis-S tests with PathMap writes between frames (trace.pcap: the frames without the in-band commands).
TESTS_S_CTL = [n for n in TESTS_S_ALL if (P4 / "sim" / f"test-{n}" / "trace.pcap").exists()]
TESTS = [n for n in TESTS_S_ALL if n not in TESTS_S_CTL]
TESTS_D_ALL = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
               == "themis-d-wire"]
#: Themis-D tests with control commands between frames (trace.pcap: the frames without the in-band commands).
TESTS_D_CTL = [n for n in TESTS_D_ALL if (P4 / "sim" / f"test-{n}" / "trace.pcap").exists()]
TESTS_D = [n for n in TESTS_D_ALL if n not in TESTS_D_CTL]
#: FLB tests (flb_edge.p4).
TESTS_FLB = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
             == "flb-route"]
#: SELB tests (selb_tor.p4).
TESTS_SELB = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
              == "selb-reroute"]


@pytest.fixture(scope="module")
def tools():
    try:
        return p4.find_toolchain()
    except p4.ToolchainMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def compiled(tools, tmp_path_factory):
    """Each program compiled once for the module: {program path: JSON path}."""
    out = tmp_path_factory.mktemp("p4c")
    return {P4 / f"{name}.p4": p4.compile_program(P4 / f"{name}.p4", out, tools) for name in p4.PROGRAMS}


def _ctl(name):
    return [e["ctl"] for e in read_events(P4 / "sim" / f"test-{name}" / "ctl.jsonl", allow_empty=True)]


def _golden(frames, ctl, n_paths):
    model = ThemisSWireModel(n_paths=n_paths)
    for cmd in ctl:
        model.control(cmd)
    return [model.process(f) for f in frames]


def test_icrc_include_is_generated():
    """p4/icrc_delta.p4 is what p4/gen_icrc.py writes, and the generator's rule is the ICRC change zlib sees."""
    spec = importlib.util.spec_from_file_location("gen_icrc", P4 / "gen_icrc.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (P4 / "icrc_delta.p4").read_text() == gen.p4_text()
    import zlib
    for x, dist in ((1, 0), (0x8000, 1), (0xABCD, 37), (0xFFFF, 1000), (0x1234, 9150)):
        length = 2 + dist
        changed = x.to_bytes(2, "big") + bytes(dist)
        assert gen.delta(x, dist) == zlib.crc32(changed) ^ zlib.crc32(bytes(length))


def test_commands_from_ctl():
    """Hand-worked: the last write to an index wins, indices at or above N and other tables are ignored, data is
    masked to 16 bits; N is the config table's default action."""
    ctl = [{"table": 0, "index": 2, "data": 5}, {"table": 0, "index": 0, "data": 0x1FFFF},
           {"table": 0, "index": 2, "data": 6}, {"table": 0, "index": 4, "data": 9},
           {"table": 3, "index": 1, "data": 1}]
    assert p4.themis_s_commands(ctl, 4) == [
        "table_set_default themis_config set_n_paths 4",
        "register_write r_pathmap 0 65535",
        "register_write r_pathmap 2 6",
    ]
    for bad in (0, 257, "8"):
        with pytest.raises(ValueError):
            p4.themis_s_commands([], bad)
    with pytest.raises(ValueError):
        p4.themis_s_commands([{"table": 0}], 4)


@pytest.mark.parametrize("name", TESTS)
def test_stored_files_match_golden(name):
    """commands.txt comes from ctl.jsonl through lbpipe/p4.py, packets_out.pcap from the golden model."""
    test = p4.load_test(name)
    ctl = _ctl(name)
    n_paths = test["params"]["n_paths"]
    assert test["commands"] == p4.themis_s_commands(ctl, n_paths)
    assert test["expected"] == _golden(test["frames"], ctl, n_paths)


def _sport_rule(frame_in, frame_out, ctl, n_paths):
    """Re-derived here: a whole RoCEv2 data frame with UDP checksum 0 leaves with its port XORed with the last
    PathMap write to index PSN mod N (0 when none); every other byte before the ICRC is unchanged."""
    meta = pk.classify(frame_in)
    if meta["kind"] != 1:
        return
    pathmap = {}
    for cmd in ctl:
        if cmd["table"] == 0 and cmd["index"] < n_paths:
            pathmap[cmd["index"]] = cmd["data"] & 0xFFFF
    l3 = 18 if frame_in[12:14] == b"\x81\x00" else 14
    l4 = l3 + (40 if meta["ip_version"] == 6 else (frame_in[l3] & 0xF) * 4)
    (checksum,) = struct.unpack_from("!H", frame_in, l4 + 6)
    delta = pathmap.get(meta["psn"] % n_paths, 0) if checksum == 0 else 0
    (port,) = struct.unpack_from("!H", frame_out, l4)
    assert port == meta["udp_sport"] ^ delta, f"port {port:#x}, re-derived {meta['udp_sport'] ^ delta:#x}"
    assert len(frame_out) == len(frame_in)
    assert frame_out[:l4] + frame_out[l4 + 2:-4] == frame_in[:l4] + frame_in[l4 + 2:-4]


@pytest.mark.parametrize("name", TESTS)
def test_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs the program on the test's frames: byte for byte the golden model's output; ICRCs valid; ports as
    re-derived."""
    program = p4.load_test(name)["program"]
    test, out = p4.run_test(name, tools, compiled[program])
    ctl = _ctl(name)
    n_paths = test["params"]["n_paths"]
    expected = _golden(test["frames"], ctl, n_paths)
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    wrong = [i for i, (a, b) in enumerate(zip(out, expected)) if a != b]
    assert not wrong, f"{len(wrong)} frames differ from the golden model, first #{wrong[0]}: " \
                      f"bmv2 {out[wrong[0]].hex()} golden {expected[wrong[0]].hex()}"
    rewritten = 0
    for frame_in, frame_out in zip(test["frames"], out):
        try:
            valid_in = pk.icrc(frame_in) == frame_in[-4:]
        except ValueError:
            valid_in = False
        if valid_in:
            assert pk.icrc(frame_out) == frame_out[-4:], f"ICRC broken: {frame_out.hex()}"
            rewritten += frame_out != frame_in
            _sport_rule(frame_in, frame_out, ctl, n_paths)
    assert rewritten > 0


# -- Themis-D (themis_d.p4) ----------------------------------------------------------------------------------------

def _golden_d(frames, ctl, params):
    """The golden model's output frames and, per input frame, its Themis-D result; and the model."""
    model = ThemisDWireModel(**params)
    for cmd in ctl:
        model.control(cmd)
    out, results = [], []
    for frame in frames:
        result = model.decide(frame)
        results.append(result)
        out += model.comp.process(frame, {"tag": result["tag"], "drop": result["drop"], "record": result["arm"],
                                          "comp": result["comp"], "qp": result["qp"]})
    return out, results, model


def _qp_of(model):
    """The QP whose frames must keep their order (data and NACKs of set-up QPs, by the golden classifier), else
    None: re-derived here from the frame's bytes."""
    def qp_of(frame):
        meta = parse(frame)
        if meta["kind"] not in (PacketKind.DATA.value, PacketKind.NACK.value):
            return None
        hit = model.classifier.process({k: meta[k] for k in ("kind", "ipv6", "src_ip", "dst_ip", "dqpn")})
        if not hit["qp_hit"] or hit["qp"] >= model.themis.n_qps or not model.themis.flows[hit["qp"]].active:
            return None
        return hit["qp"]
    return qp_of


def test_themis_d_commands_from_ctl():
    """Hand-worked: the classifier's final keys become exact entries with their QP (a key inserted, one deleted),
    the last set-up or tear-down of a QP wins, indices at or above n_qps are ignored, the config line carries N,
    the depth and entry_bits as a mask and half range; parameters the program does not model are refused."""
    from lbpipe.sim.packet.qp_classifier import QpTable
    params = dict(n_qps=4, queue_depth=8, n_paths=5, entry_bits=7, buckets=16, ways=2, ipv6=True, depth=256)
    table = QpTable(n_entries=4, buckets=16, ways=2)
    ctl = table.add_qp("10.0.0.1", "10.0.0.2", 0x11, 0x22, 1)
    ctl += table.add_qp("fd00::1", "fd00::2", 0x33, 0x44, 2)
    ctl += table.remove_qp(2)
    ctl += [{"table": 16, "index": 1, "data": 0}, {"table": 16, "index": 3, "data": 0},
            {"table": 17, "index": 3, "data": 0}, {"table": 16, "index": 4, "data": 0},
            {"table": 16, "index": 2, "data": 0}]
    lines = p4.themis_d_commands(ctl, params)
    assert lines[:2] == ["table_set_default themis_d_config set_config 5 4 8 127 64", "mirroring_add 1 1"]
    # Every key ever stored has an id (sorted keys); the removed IPv6 QP's keys have no hit word.
    assert lines[2:6] == ["table_add qp_classifier set_key 0x11 0 0 0xa000001 0x0 => 0",
                          "table_add qp_classifier set_key 0x22 1 0 0xa000001 0xa000002 => 1",
                          "table_add qp_classifier set_key 0x33 0 1 0xfd000000000000000000000000000001 0x0 => 2",
                          "table_add qp_classifier set_key 0x44 1 1 0xfd000000000000000000000000000001 "
                          "0xfd000000000000000000000000000002 => 3"]
    assert lines[6:] == ["register_write r_key_qp 0 65537", "register_write r_key_qp 1 65537",
                         "register_write r_active 1 1", "register_write r_active 2 1"]
    for bad in (dict(n_qps=2049), dict(queue_depth=129), dict(entry_bits=1), dict(colour=1)):
        with pytest.raises(ValueError):
            p4.themis_d_commands([], dict(params, **bad))


@pytest.mark.parametrize("name", TESTS_D)
def test_themis_d_stored_files_match_golden(name):
    """commands.txt comes from ctl.jsonl through lbpipe/p4.py, packets_out.pcap from the golden model."""
    test = p4.load_test(name)
    ctl = _ctl(name)
    assert test["commands"] == p4.themis_d_commands(ctl, test["params"])
    assert test["expected"] == _golden_d(test["frames"], ctl, test["params"])[0]


@pytest.mark.parametrize("name", TESTS_D)
def test_themis_d_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs themis_d.p4 on the test's frames: the golden model's frames byte for byte, in the golden model's
    order within each QP and among the frames of no QP (across QPs a recirculated NACK and the frames pushed
    behind it may leave later: p4/README.md); blocked NACKs dropped and compensation NACKs sent as the golden model
    does; and the NACK scans took the passes the golden model's scan lengths call for (K = 4 entries a pass)."""
    stats = {}
    test, out = p4.run_test(name, tools, compiled[P4 / "themis_d.p4"], stats=stats)
    ctl = _ctl(name)
    expected, results, model = _golden_d(test["frames"], ctl, test["params"])
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    assert sorted(out) == sorted(expected), "bmv2 sent other frames than the golden model"
    qp_of = _qp_of(model)
    got, want = [qp_of(f) for f in out], [qp_of(f) for f in expected]
    for qp in set(want):
        a = [f for f, q in zip(out, got) if q == qp]
        b = [f for f, q in zip(expected, want) if q == qp]
        assert a == b, f"QP {qp}: bmv2's frames leave in another order than the golden model's"
    nacks = [r for r in results if r["verdict"] >= Verdict.NACK_VALID]
    assert stats["nack_scans"] == len(nacks)
    extra = sum(math.ceil(r["scanned"] / 4) - 1 for r in nacks if r["scanned"] and not r["out_of_range"])
    assert stats["nack_passes"] == extra
    assert model.comp.stats()[0] > 0 and any(r["comp"] for r in results), "the trace must drop and compensate"
    # The closed loop's NACK properties (sim/themis/net.py check_properties: P0 well-formed, P1 only NACKs of lost
    # packets reach the sender, P2 a lost packet's NACK reaches it by the next packet on its path) on bmv2's frames.
    spec = json.loads((P4 / "sim" / f"test-{name}" / "test.json").read_text())["trace"]
    if spec is None:
        return      # hand-picked frames: no closed loop behind them
    _, frames, scenario = closed_loop_traffic(
        spec["seed"], packets_per_flow=max(1, round(spec["n_frames"] / 4 / 1.13)), params=test["params"])
    assert frames == test["frames"]
    decisions = _decisions(test["frames"], out, qp_of)
    for d, event in zip(decisions, scenario.items):
        d["tag"] = event["item"]["tag"]     # frames carry no tag: one decision per input frame, in order
    violations = check_properties(scenario, decisions)
    # With narrow entries the golden model forwards out-of-range NACKs by design (sim/themis/themis_d.py): the
    # only violations allowed are P1 for those, the very ones the golden model's own decisions show.
    assert violations == check_properties(scenario, results)
    allowed = {f"item {i} " for i, r in enumerate(results) if r["out_of_range"]}
    assert all(v.startswith("P1: ") and v[4:].split("(")[0] in allowed for v in violations), violations


def _decisions(frames, out, qp_of):
    """Each input frame's fate read off bmv2's output (whose per-QP order is the arrival order, checked above): in
    ``check_properties``' fields, ``drop`` when the frame did not leave, ``comp``/``comp_psn`` when a NACK that is
    not the QP's next input frame left right after it."""
    by_qp = {}
    for frame in out:
        by_qp.setdefault(qp_of(frame), []).append(frame)
    at = {}
    qps = [qp_of(f) for f in frames]
    decisions = []
    for i, frame in enumerate(frames):
        q = qps[i]
        seq, k = by_qp.get(q, []), at.get(q, 0)
        left = k < len(seq) and seq[k] == frame
        k += left
        # The QP's next input frames up to its next data frame: a NACK among them may leave next.
        upcoming = []
        for f, c in zip(frames[i + 1:], qps[i + 1:]):
            if c == q:
                if pk.classify(f)["kind"] == PacketKind.DATA.value:
                    break
                upcoming.append(f)
        d = {"drop": int(not left), "comp": 0, "comp_psn": 0}
        meta = pk.classify(frame) if q is not None else None
        if meta is not None and meta["kind"] == PacketKind.DATA.value and k < len(seq) and seq[k] not in upcoming:
            nack = pk.classify(seq[k])
            if nack["kind"] == PacketKind.NACK.value:
                d.update(comp=1, comp_psn=nack["psn"])
                k += 1
        at[q] = k
        decisions.append(d)
    assert all(at.get(q, 0) == len(seq) for q, seq in by_qp.items()), "frames out that no input frame explains"
    return decisions


def test_cli_p4_test_bad_name():
    """``lbpipe p4 test`` with an unknown test: one line, exit status 2."""
    done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "p4", "test", "no-such-test"], capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no P4 test" in done.stderr


def test_replay_rejects_what_the_program_does_not_model():
    """p4.replay: a block without a P4 program, and parameters the program does not model, raise before any tool
    runs; the CLI says so in one line."""
    with pytest.raises(ValueError, match="no P4 program"):
        p4.replay("themis-s", {}, [], [])
    with pytest.raises(ValueError, match="n_qps <= 2048 and queue_depth <= 128"):
        p4.replay("themis-d-wire", dict(queue_depth=129), [], [])
    with pytest.raises(ValueError, match="longer than depth"):
        p4.replay("themis-d-wire", dict(n_qps=8, queue_depth=40, depth=2), [bytes(129)], [])
    for params in ({"cut_through": False}, {"fcs": True}):
        with pytest.raises(ValueError, match="cut_through=true and fcs=false"):
            p4.replay("themis-s-wire", dict(params, n_paths=8), [], [])
    done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "themis-s", "x.jsonl", "--engine", "bmv2"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr


@pytest.mark.parametrize("index", [-5, 1 << 24])
def test_commands_between_frames_are_checked(tmp_path, index):
    """A control file with positions ("before") gets the same checks as one without: a negative or too wide index
    is refused in one line naming the event (24-bit index: the ctl layout, docs/architecture.md), before any frame
    runs, on the golden engine too (which would otherwise index Python lists with it)."""
    where = P4 / "sim" / "test-themis-d-ctl"
    events = read_events(where / "ctl.jsonl")
    events.append({"ctl": {"table": 1, "index": index, "data": 1}, "before": events[-1]["before"]})
    bad = tmp_path / "ctl.jsonl"
    bad.write_text("".join(json.dumps(e) + "\n" for e in events))
    params = json.loads((where / "test.json").read_text())["params"]
    args = [f"--param={k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items()]
    done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "themis-d-wire",
                           str(where / "packets_in.pcap"), "--ctl", str(bad), "--engine", "golden", "-o", str(tmp_path / "out.pcap"), *args],
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"event {len(events)}" in last and "index" in last, done.stderr
    assert not (tmp_path / "out.pcap").exists()


@pytest.mark.skipif(not os.environ.get("LBPIPE_FULL"), reason="LBPIPE_FULL=1: the CLI's bmv2 engine end to end")
def test_cli_replay_bmv2(tools, tmp_path):
    """``lbpipe replay themis-s-wire IN --engine bmv2`` writes what the golden engine writes (the edge test)."""
    where = P4 / "sim" / "test-themis-edge"
    outs = {}
    for engine in ("bmv2", "golden"):
        outs[engine] = tmp_path / f"{engine}.pcap"
        done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "themis-s-wire",
                               str(where / "packets_in.pcap"), "--param", "n_paths=3",
                               "--ctl", str(where / "ctl.jsonl"),
                               "--engine", engine, "-o", str(outs[engine])], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert read_pcap(outs["bmv2"]) == read_pcap(outs["golden"]) == read_pcap(where / "packets_out.pcap")


# -- FLB (flb_edge.p4) ------------------------------------------------------------------------------------------------

def _crc16_arc(data):
    """CRC-16/ARC (bmv2's crc16) written again here, MSB-first on reflected bytes: polynomial 0x8005, initial 0, no
    final XOR, input and output reflected. The catalogue's check value pins it (test_flb_crc16)."""
    reg = 0
    for byte in data:
        reg ^= int(f"{byte:08b}"[::-1], 2) << 8
        for _ in range(8):
            reg = ((reg << 1) ^ 0x8005) & 0xFFFF if reg & 0x8000 else (reg << 1) & 0xFFFF
    return int(f"{reg:016b}"[::-1], 2)


def test_flb_crc16():
    """The test's CRC16 gives the CRC catalogue's check value for CRC-16/ARC; lbpipe/p4.py's (which writes the test
    frames) agrees; bmv2's agrees too, checked frame by frame by test_flb_bmv2_matches_golden (the flow it writes)."""
    import random
    assert _crc16_arc(b"123456789") == 0xBB3D
    rng = random.Random(1)
    for n in (0, 1, 2, 13, 13, 13, 40):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert p4.crc16(data) == _crc16_arc(data)


def _flb_expected(name):
    """Re-derived here from the test's input frames, routes and initial commands: each packet frame's decision by
    the golden model fed the CRC16 of its 5-tuple (scapy's fields, ports 0 unless an unfragmented TCP/UDP packet),
    its longest-prefix destination (none: 0xFFFF) and the tick of its harness header; in-band commands applied in
    order. Returns ``(test, expected frames, golden outputs)``."""
    import ipaddress
    from scapy.layers.inet import IP, TCP, UDP
    from lbpipe.sim.flb.route import Route
    test = p4.load_test(name)
    routes = json.loads((test["dir"] / "test.json").read_text())["routes"]
    model = Route(**test["params"])
    for cmd in _ctl(name):
        model.control(cmd)
    frames, outs = [], []
    for frame in test["frames"]:
        assert struct.unpack_from("!H", frame, 12)[0] == 0x88B5
        op, kind, tag, now, table = struct.unpack_from("!BBHIB", frame, 14)
        if op == 1:
            index = int.from_bytes(frame[23:26], "big")
            (data,) = struct.unpack_from("!Q", frame, 26)
            model.control({"table": table, "index": index, "data": data})
            continue
        flow, dest = 0, 0xFFFF
        if struct.unpack_from("!H", frame, 40)[0] == 0x0800:
            ip = IP(frame[42:])
            ports = (0, 0)
            if ip.flags.MF == 0 and ip.frag == 0 and (TCP in ip or UDP in ip):
                l4 = ip[TCP] if TCP in ip else ip[UDP]
                ports = (l4.sport, l4.dport)
            flow = _crc16_arc(ipaddress.IPv4Address(ip.src).packed + ipaddress.IPv4Address(ip.dst).packed
                              + struct.pack("!BHH", ip.proto, *ports))
            best = -1
            for prefix, length, d in routes:
                if length > best and ipaddress.IPv4Address(ip.dst) in ipaddress.IPv4Network(f"{prefix}/{length}"):
                    best, dest = length, d
        out = model.process({"kind": kind, "flow": flow, "dest": dest, "now": now & 0xFFFF, "tag": tag})
        outs.append(out)
        flags = out["ok"] | out["new"] << 1 | out["rerouted"] << 2
        frames.append(frame[:34] + struct.pack("!HHBB", flow, dest, out["path"], flags) + frame[40:])
    return test, frames, outs


def test_flb_commands_from_ctl():
    """Hand-worked: configuration, routes, the last delay and isolation write wins, out-of-range destinations,
    paths, values and other tables ignored, a delay register at dest * 8 + path; parameters refused."""
    params = dict(n_paths=4, n_dests=3, timeout=50)
    ctl = [{"table": 0, "index": 2 << 4 | 3, "data": 7}, {"table": 0, "index": 2 << 4 | 3, "data": 9},
           {"table": 0, "index": 1 << 4 | 4, "data": 1}, {"table": 0, "index": 3 << 4, "data": 1},
           {"table": 0, "index": 0, "data": 1 << 16}, {"table": 0, "index": 1, "data": 0xFFFF},
           {"table": 1, "index": 1, "data": 0b1010}, {"table": 1, "index": 2, "data": 0b10000},
           {"table": 1, "index": 3, "data": 1}, {"table": 2, "index": 0, "data": 5}]
    assert p4.flb_edge_commands(ctl, params, [("10.0.0.0", 8, 2)]) == [
        "table_set_default flb_config set_config 4 3 50 0",
        "table_add dest_edge set_dest 10.0.0.0/8 => 2",
        "register_write r_delay 1 65535",
        "register_write r_delay 19 9",
        "register_write r_isolated 1 10",
    ]
    for bad in (dict(n_paths=9), dict(n_dests=257), dict(n_flows=4096), dict(time_bits=32), dict(delay_bits=8),
                dict(timeout=0), dict(colour=1)):
        with pytest.raises(ValueError):
            p4.flb_edge_commands([], dict(params, **bad), [])
    with pytest.raises(ValueError, match="without its upd stream"):      # the program has no upd stream
        p4.flb_edge_commands([], dict(params, upd=True), [])
    assert p4.flb_edge_commands([], dict(params, upd=False), [])[0] == \
        "table_set_default flb_config set_config 4 3 50 0"
    with pytest.raises(ValueError, match="without forced paths"):     # nor flb-tx-wire's forced paths
        p4.flb_edge_commands([], dict(params, force=True), [])
    assert p4.flb_edge_commands([], dict(params, force=False), [])[0] == \
        "table_set_default flb_config set_config 4 3 50 0"
    # flb-route's margin is set_config's last argument: 0 to 2^16 - 1 at 16-bit ticks (docs/flb_route.md)
    for margin in (1, 2, 65535):
        line = p4.flb_edge_commands([], dict(params, margin=margin), [])[0]
        assert line == f"table_set_default flb_config set_config 4 3 50 {margin}"
    for margin in (-1, 65536):
        with pytest.raises(ValueError, match="margin") as info:
            p4.flb_edge_commands([], dict(params, margin=margin), [])
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError):
        p4.flb_edge_commands([{"table": 0, "index": 1 << 24, "data": 0}], params, [])
    with pytest.raises(ValueError, match="metadata block"):
        p4.replay("flb-route", {}, [], [])
    with pytest.raises(ValueError, match="metadata traces of flb-route"):
        p4.replay_items("themis-s-wire", {}, [])


@pytest.mark.parametrize("name", TESTS_FLB)
def test_flb_stored_files_match_golden(name):
    """commands.txt comes from ctl.jsonl and the routes through lbpipe/p4.py; packets_out.pcap and trace.jsonl are
    what this file re-derives from packets_in.pcap (``flb-margin*``: packets_out.pcap holds the decisions worked by
    hand in make_flb_tests.py ``margin_cases``, so the golden model is checked against them here)."""
    test, frames, outs = _flb_expected(name)
    routes = [tuple(r) for r in json.loads((test["dir"] / "test.json").read_text())["routes"]]
    assert test["commands"] == p4.flb_edge_commands(_ctl(name), test["params"], routes)
    assert test["expected"] == frames
    items = [e["item"] for e in read_events(test["dir"] / "trace.jsonl") if "item" in e]
    assert [{k: o[k] for k in ("kind", "flow", "dest", "now", "tag")} for o in outs] == items


@pytest.mark.parametrize("name", TESTS_FLB)
def test_flb_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs flb_edge.p4 on the test's frames: every packet leaves with the decision (and the flow, the CRC16
    of its 5-tuple) the golden model makes when fed what this file re-derives; commands in-band are dropped."""
    test, out = p4.run_test(name, tools, compiled[P4 / "flb_edge.p4"])
    _, expected, outs = _flb_expected(name)
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    for i, (a, b) in enumerate(zip(out, expected)):
        assert a == b, f"packet #{i}: bmv2 {p4.flb_decision(a)}, golden {p4.flb_decision(b)}"
    assert all(sum(o[k] for o in outs) > 0 for k in ("new", "rerouted")), "the test must create and move flows"


@pytest.mark.skipif(not os.environ.get("LBPIPE_FULL"), reason="LBPIPE_FULL=1: the CLI's bmv2 engine on metadata traces")
@pytest.mark.parametrize("block, test_dir", [("flb-route", "flb-mixed"), ("selb-reroute", "selb-mixed"),
                                             ("flb-owd", "flb-owd-mixed"), ("flb-isolate", "flb-isolate-mixed"),
                                             ("flb-cnm", "flb-cnm-wide")])
def test_cli_replay_items_bmv2(tools, tmp_path, block, test_dir):
    """``lbpipe replay BLOCK TRACE --engine bmv2`` writes the items the golden engine writes, for each metadata block
    with a P4 program (its stored random trace)."""
    where = P4 / "sim" / f"test-{test_dir}"
    test = json.loads((where / "test.json").read_text())
    outs = {}
    for engine in ("bmv2", "golden"):
        outs[engine] = tmp_path / f"{engine}.jsonl"
        flags = [a for k, v in test["params"].items() for a in ("--param", f"{k}={v}")]
        done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", block, str(where / "trace.jsonl"), *flags,
                               "--engine", engine, "-o", str(outs[engine])], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert read_events(outs["bmv2"]) == read_events(outs["golden"])


def test_cli_replay_flb_margin_bmv2(tools, tmp_path):
    """A random ``lbpipe trace flb-route --param margin=1`` trace (seed 20, 400 packets, 4 paths, timeout 16: chosen
    for the packets whose decision the margin changes: 13 against margin 0, at least 8 checked) through ``lbpipe
    replay --engine bmv2``: the items the golden engine writes (one bmv2 run; about 11 s in all)."""
    flags = [a for kv in ("n_paths=4", "n_dests=2", "timeout=16") for a in ("--param", kv)]
    trace = tmp_path / "trace.jsonl"
    done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "trace", "flb-route", *flags, "--param", "margin=1",
                           "--seed", "20", "-n", "400", "-o", str(trace)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    outs = {}
    for engine, margin in (("bmv2", 1), ("golden", 1), ("golden", 0)):
        outs[engine, margin] = tmp_path / f"{engine}{margin}.jsonl"
        done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "flb-route", str(trace), *flags,
                               "--param", f"margin={margin}", "--engine", engine, "-o", str(outs[engine, margin])],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    got, want = read_events(outs["bmv2", 1]), read_events(outs["golden", 1])
    assert got == want
    assert sum(a != b for a, b in zip(want, read_events(outs["golden", 0]))) >= 8, "the margin must decide packets"


# -- Themis-D with control commands between frames (in-band command frames) ----------------------------------------

def _golden_ctl(frames, events, params):
    """Written here: the golden model with each event's command applied before frame ``before`` (0 when absent);
    its frames out, for each the QP whose order it keeps (the classifier's QP below n_qps for the data frame or
    NACK it came from, at that frame's time, set up or not; else None), and per input frame its Themis-D result."""
    from lbpipe.sim.packet.qp_classifier import item_key
    model = ThemisDWireModel(**params)
    out, classes, results = [], [], []
    pending = list(events)
    for at, frame in enumerate(frames):
        while pending and pending[0].get("before", 0) <= at:
            model.control(pending.pop(0)["ctl"])
        meta = parse(frame)
        qp = None
        if meta["kind"] in (PacketKind.DATA.value, PacketKind.NACK.value):
            hit, q = model.classifier.lookup(item_key({k: meta[k] for k in ("kind", "ipv6", "src_ip", "dst_ip",
                                                                            "dqpn")}))
            qp = q if hit and q < params["n_qps"] else None
        result = model.decide(frame)
        results.append(result)
        sent = model.comp.process(frame, {"tag": result["tag"], "drop": result["drop"], "record": result["arm"],
                                          "comp": result["comp"], "qp": result["qp"]})
        out += sent
        classes += [qp] * len(sent)
    return out, classes, results


def _inband(frame):
    """A themis_d.p4 in-band command frame's ``(op, table, index, data)`` (p4/README.md layout), else None."""
    if struct.unpack_from("!H", frame, 12)[0] != 0x88B5:
        return None
    op, table = frame[14], frame[15]
    return op, table, int.from_bytes(frame[16:19], "big"), struct.unpack_from("!Q", frame, 19)[0]


@pytest.mark.parametrize("name", TESTS_D_CTL)
def test_themis_d_ctl_stored_files(name):
    """packets_out.pcap is the golden model's output with the commands between the frames; packets_in.pcap is the
    trace's frames in order with command frames between them: the Themis-D commands (tables 16 and up) exactly at
    their events' positions, classifier changes as op 2 words; commands.txt and the frames are what lbpipe/p4.py
    derives."""
    test = p4.load_test(name)
    events = read_events(test["dir"] / "ctl.jsonl")
    assert any(e.get("before", 0) > 0 for e in events)
    assert test["expected"] == _golden_ctl(test["trace"], events, test["params"])[0]
    assert (test["commands"], test["frames"]) == p4.themis_d_inband(events, test["params"], test["trace"])
    at, seen = 0, []
    for frame in test["frames"]:
        cmd = _inband(frame)
        if cmd is None:
            assert frame == test["trace"][at]
            at += 1
        elif cmd[0] == 1:
            seen.append({"before": at, "ctl": {"table": cmd[1], "index": cmd[2], "data": cmd[3]}})
        else:
            assert cmd[0] == 2 and cmd[3] >> 17 == 0
    assert at == len(test["trace"])
    want = [e for e in events if e.get("before", 0) > 0 and e["ctl"]["table"] >= 16]
    assert seen == want


def test_ctl_positions_refused():
    """Positions that go down, lie past the frames, or are not integers, and other keys, are refused in one line."""
    cmd = {"table": 16, "index": 0, "data": 0}
    assert p4.ctl_positions([{"ctl": cmd}, {"ctl": cmd, "before": 2}, {"ctl": cmd, "before": 2}], 2) == \
        [(0, cmd), (2, cmd), (2, cmd)]
    for bad in ([{"ctl": cmd, "before": 2}, {"ctl": cmd, "before": 1}], [{"ctl": cmd, "before": 3}],
                [{"ctl": cmd, "before": "1"}], [{"ctl": cmd, "at": 1}], [{"before": 1}]):
        with pytest.raises(ValueError):
            p4.ctl_positions(bad, 2)


def _check_order(out, expected, classes):
    """bmv2's frames: the expected frames byte for byte, in the golden order within each QP class (equal frames take
    the classes of their expected copies in turn)."""
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    assert sorted(out) == sorted(expected), "bmv2 sent other frames than the golden model"
    pending = {}
    for frame, c in zip(expected, classes):
        pending.setdefault(frame, []).append(c)
    got = [pending[frame].pop(0) for frame in out]
    for qp in set(classes):
        a = [f for f, q in zip(out, got) if q == qp]
        b = [f for f, q in zip(expected, classes) if q == qp]
        assert a == b, f"QP {qp}: bmv2's frames leave in another order than the golden model's"


@pytest.mark.parametrize("name", TESTS_D_CTL)
def test_themis_d_ctl_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs themis_d.p4 on the frames with in-band commands between them: the golden model's frames (commands
    applied between the same frames) byte for byte, in its order within each QP; command frames dropped; the NACK
    scans' passes as the golden model's scan lengths call for."""
    stats = {}
    test, out = p4.run_test(name, tools, compiled[P4 / "themis_d.p4"], stats=stats)
    events = read_events(test["dir"] / "ctl.jsonl")
    expected, classes, results = _golden_ctl(test["trace"], events, test["params"])
    assert not [f for f in out if _inband(f) is not None], "in-band command frames left the switch"
    _check_order(out, expected, classes)
    nacks = [r for r in results if r["verdict"] >= Verdict.NACK_VALID]
    assert stats["nack_scans"] == len(nacks)
    extra = sum(math.ceil(r["scanned"] / 4) - 1 for r in nacks if r["scanned"] and not r["out_of_range"])
    assert stats["nack_passes"] == extra and extra >= 2
    assert sum(r["comp"] for r in results) >= 3


@pytest.mark.regression
def test_cli_replay_themis_d_bmv2_long(tools, tmp_path):
    """``lbpipe replay themis-d-wire IN --ctl CTL --engine bmv2`` on a longer closed-loop trace (about 3,000 frames,
    N = 8, 40 entries of 10 bits) with QPs torn down (behind their NACKs) and set up again between frames: the
    frames ``--engine golden`` writes, in its order within each QP."""
    from lbpipe.tb.themis import test_themis_d_wire as dwire
    from lbpipe.trace import write_events, write_pcap
    params = dict(dwire.WIRE_PARAMS, n_paths=8)
    cmds, frames = dwire.pcap_trace(5, 3000, **params)
    events = [{"ctl": c} for c in cmds]
    # Every 250 frames, QP (k mod 4) torn down right behind one of its NACKs (so often during its scan) and set up
    # again 40 frames later.
    model = ThemisDWireModel(**params)
    for cmd in cmds:
        model.control(cmd)
    qp_of = _qp_of(model)
    nacks = [i for i, f in enumerate(frames) if parse(f)["kind"] == PacketKind.NACK.value and qp_of(f) is not None]
    for k, start in enumerate(range(250, len(frames) - 300, 250)):
        i = next(i for i in nacks if i >= start)
        q = qp_of(frames[i])
        events += [{"ctl": {"table": 17, "index": q, "data": 0}, "before": i + 1},
                   {"ctl": {"table": 16, "index": q, "data": 0}, "before": i + 41}]
    events.sort(key=lambda e: e.get("before", 0))
    write_pcap(tmp_path / "in.pcap", frames)
    write_events(tmp_path / "in.ctl.jsonl", events)
    flags = [a for k, v in params.items() for a in ("--param", f"{k}={str(v).lower()}")]
    outs = {}
    for engine in ("bmv2", "golden"):
        outs[engine] = tmp_path / f"{engine}.pcap"
        done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "themis-d-wire",
                               str(tmp_path / "in.pcap"), "--ctl", str(tmp_path / "in.ctl.jsonl"), *flags,
                               "--engine", engine, "-o", str(outs[engine])], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    expected, classes, results = _golden_ctl(frames, events, params)
    assert read_pcap(outs["golden"]) == expected
    _check_order(read_pcap(outs["bmv2"]), expected, classes)
    assert sum(r["comp"] for r in results) > 0


# -- Themis-S with PathMap writes between frames ----------------------------------------------------------------------

def _golden_s_ctl(frames, events, n_paths):
    """Written here: the golden model with each event's command applied before frame ``before`` (0 when absent);
    its frames out and, per frame, the commands applied so far."""
    model = ThemisSWireModel(n_paths=n_paths)
    out, applied, so_far, pending = [], [], [], list(events)
    for at, frame in enumerate(frames):
        while pending and pending[0].get("before", 0) <= at:
            so_far.append(pending[0]["ctl"])
            model.control(pending.pop(0)["ctl"])
        out.append(model.process(frame))
        applied.append(list(so_far))
    return out, applied


@pytest.mark.parametrize("name", TESTS_S_CTL)
def test_themis_s_ctl_stored_files(name):
    """packets_out.pcap is the golden model's output with the writes between the frames; packets_in.pcap is the
    trace's frames with every later command in-band (op 1, as it is) before the frame its event names."""
    test = p4.load_test(name)
    events = read_events(test["dir"] / "ctl.jsonl")
    n_paths = test["params"]["n_paths"]
    assert test["expected"] == _golden_s_ctl(test["trace"], events, n_paths)[0]
    assert (test["commands"], test["frames"]) == p4.themis_s_inband(events, n_paths, test["trace"])
    at, seen = 0, []
    for frame in test["frames"]:
        cmd = _inband(frame)
        if cmd is None:
            assert frame == test["trace"][at]
            at += 1
        else:
            assert cmd[0] == 1
            seen.append({"before": at, "ctl": {"table": cmd[1], "index": cmd[2], "data": cmd[3]}})
    assert seen == [e for e in events if e.get("before", 0) > 0]


@pytest.mark.parametrize("name", TESTS_S_CTL)
def test_themis_s_ctl_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs themis_tor.p4 with PathMap writes in-band: byte for byte the golden model's output in order
    (command frames dropped), every ICRC valid, every port as re-derived from the writes made before its frame."""
    test, out = p4.run_test(name, tools, compiled[P4 / "themis_tor.p4"])
    events = read_events(test["dir"] / "ctl.jsonl")
    n_paths = test["params"]["n_paths"]
    expected, applied = _golden_s_ctl(test["trace"], events, n_paths)
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    wrong = [i for i, (a, b) in enumerate(zip(out, expected)) if a != b]
    assert not wrong, f"{len(wrong)} frames differ from the golden model, first #{wrong[0]}"
    ports = set()
    for frame_in, frame_out, ctl in zip(test["trace"], out, applied):
        assert pk.icrc(frame_out) == frame_out[-4:]
        _sport_rule(frame_in, frame_out, ctl, n_paths)
        ports.add(frame_out[14 + 20:14 + 22])
    assert len(ports) > 4, "the writes between frames must change the ports"


@pytest.mark.regression
def test_cli_replay_themis_d_bmv2_defaults(tools, tmp_path):
    """``lbpipe replay themis-d-wire --engine bmv2`` at the block's defaults (1,600 QPs of 100 entries, N = 256:
    themis_d.p4 holds 2,048 of 128): the frames ``--engine golden`` writes, in its order within each QP."""
    done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "trace", "themis-d-wire", "--seed", "9", "-n", "1000",
                           "-o", str(tmp_path / "in.pcap")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    outs = {}
    for engine in ("bmv2", "golden"):
        outs[engine] = tmp_path / f"{engine}.pcap"
        done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "themis-d-wire",
                               str(tmp_path / "in.pcap"), "--ctl", str(tmp_path / "in.ctl.jsonl"),
                               "--engine", engine, "-o", str(outs[engine])], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    from lbpipe.blocks import get_block
    params = get_block("themis-d-wire").resolve({})
    frames = read_pcap(tmp_path / "in.pcap")
    events = read_events(tmp_path / "in.ctl.jsonl")
    expected, classes, results = _golden_ctl(frames, events, params)
    assert params["n_qps"] == 1600 and params["queue_depth"] == 100
    assert read_pcap(outs["golden"]) == expected
    _check_order(read_pcap(outs["bmv2"]), expected, classes)
    assert sum(r["verdict"] >= Verdict.NACK_VALID for r in results) > 10 and len(expected) < len(frames)


@pytest.mark.regression
def test_cli_replay_themis_s_between_bmv2(tools, tmp_path):
    """``lbpipe replay themis-s-wire trace.pcap --ctl ctl.jsonl --engine bmv2`` with PathMap writes between frames
    (test-themis-ctl): the stored golden frames, as ``--engine golden`` writes them."""
    where = P4 / "sim" / "test-themis-ctl"
    outs = {}
    for engine in ("bmv2", "golden"):
        outs[engine] = tmp_path / f"{engine}.pcap"
        done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "themis-s-wire",
                               str(where / "trace.pcap"), "--param", "n_paths=4", "--ctl", str(where / "ctl.jsonl"),
                               "--engine", engine, "-o", str(outs[engine])], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    expected = _golden_s_ctl(read_pcap(where / "trace.pcap"), read_events(where / "ctl.jsonl"), 4)[0]
    assert read_pcap(outs["bmv2"]) == read_pcap(outs["golden"]) == expected


# -- SELB (selb_tor.p4) -----------------------------------------------------------------------------------------------

def _selb_expected(name):
    """Re-derived here from the test's commands.txt and input frames alone: the configuration and registers the
    CLI lines set, each in-band register write (op 2) applied with the program's range rules (written again here:
    cluster < 64 for a path below n_paths, congested 0/1, an alt mask of n_paths bits for a cluster below 64, a
    shortest path below n_paths at index 0), each packet's flow the low log2 n_flows bits of this file's CRC16 of
    its 5-tuple, its cluster fields the registers' for its lookup path; the golden model sim/selb/reroute.py fed
    that. Returns ``(test, expected frames, [(item, golden output, stale)])``."""
    import ipaddress
    from scapy.layers.inet import IP, TCP, UDP
    from lbpipe.sim.selb.reroute import Reroute
    test = p4.load_test(name)
    regs = {"r_cluster": {}, "r_congested": {}, "r_alt": {}, "r_shortest": {}, "r_lfsr": {}}
    for line in test["commands"]:
        words = line.split()
        if words[:3] == ["table_set_default", "selb_config", "set_config"]:
            n, mask, hold = (int(w) for w in words[3:])
        else:
            assert words[0] == "register_write", line
            regs[words[1]][int(words[2])] = int(words[3])
    model = Reroute(n_flows=mask + 1, n_paths=n, hold=hold, lfsr_seed=regs["r_lfsr"][0])
    frames, rows = [], []
    for frame in test["frames"]:
        assert struct.unpack_from("!H", frame, 12)[0] == 0x88B5
        op, kind, tag, now, path, table = struct.unpack_from("!BBHIBB", frame, 14)
        index, (data,) = int.from_bytes(frame[24:27], "big"), struct.unpack_from("!Q", frame, 27)
        if op == 1:
            model.control({"table": table, "index": index, "data": data})
        if op == 2:
            if (table == 0 and index < n and data < 64) or (table == 1 and index < n and data < 2) or \
                    (table == 2 and index < 64 and data >> n == 0) or (table == 3 and index == 0 and data < n):
                regs[("r_cluster", "r_congested", "r_alt", "r_shortest")[table]][index] = data
        if op != 0:
            continue
        if struct.unpack_from("!H", frame, 49)[0] != 0x0800:
            frames.append(frame)                        # not a flow: the header's output fields stay 0
            continue
        ip = IP(frame[51:])
        ports = (0, 0)
        if ip.flags.MF == 0 and ip.frag == 0 and (TCP in ip or UDP in ip):
            l4 = ip[TCP] if TCP in ip else ip[UDP]
            ports = (l4.sport, l4.dport)
        flow = _crc16_arc(ipaddress.IPv4Address(ip.src).packed + ipaddress.IPv4Address(ip.dst).packed
                          + struct.pack("!BHH", ip.proto, *ports)) & mask
        path &= n - 1
        cluster = regs["r_cluster"].get(path, 0)
        cg, alt, sh = regs["r_congested"].get(path, 0), regs["r_alt"].get(cluster, 0), regs["r_shortest"].get(0, 0)
        item = {"kind": kind, "tag": tag, "flow": flow, "now": now & 0xFFFF, "path": path, "congested": cg,
                "alt": alt, "shortest": sh}
        entry = model.flows.get(flow)
        stale, new = int(entry is not None and entry[0] != path), int(entry is None)
        out = model.process(item)
        rows.append((item, out, stale))
        flags = 1 | out["tail"] << 1 | out["epoch"] << 2 | stale << 3 | cg << 4 | new << 5
        frames.append(frame[:35] + struct.pack("!HBBBBQ", flow, out["path"], flags, cluster, sh, alt) + frame[49:])
    return test, frames, rows


#: selb-cases, worked by hand (make_selb_tests.py's comments): tag -> (path out, tail). The moves' destinations
#: follow the LFSR from 0xACE1, uniform among alt's m set bits (docs/selb_reroute.md): the first packet's state
#: 0xACE1 = 44257, 44257 x 3 // 65536 = 2, the third of {0, 1, 3}: path 3; the third packet's 0xB387 = 45959,
#: 45959 x 3 // 65536 = 2, the third of {4, 6, 7}: path 7. Cluster {4..7} wholly congested publishes the backup
#: set's free paths {0..3} as its alt (docs/selb_cluster.md): tag 26's state 0x3879 = 14457, x 4 < 65536: path 0.
SELB_CASES = {0: (2, 1), 1: (3, 0), 2: (5, 1), 3: (7, 0), 24: (7, 0), 25: (7, 0), 26: (7, 1), 27: (0, 0),
              28: (1, 0), 31: (1, 0), 34: (0, 1), 38: (3, 0), 39: (3, 0), 40: (3, 1), 50: (6, 1), 51: (0, 0),
              52: (3, 1), 56: (1, 0)}


def test_selb_commands():
    """Hand-worked: the configuration, the seed, the last register write wins, out-of-range writes ignored; the
    translation of a published clustering; parameters refused."""
    params = dict(n_paths=4, n_flows=8, hold=4, lfsr_seed=7)
    writes = [{"table": 0, "index": 3, "data": 1}, {"table": 0, "index": 3, "data": 2},
              {"table": 0, "index": 4, "data": 1}, {"table": 1, "index": 0, "data": 2},
              {"table": 2, "index": 63, "data": 0b1111}, {"table": 2, "index": 1, "data": 0b10000},
              {"table": 3, "index": 0, "data": 4}, {"table": 3, "index": 0, "data": 3}, {"table": 5, "index": 0}]
    assert p4.selb_tor_commands(params, writes) == [
        "table_set_default selb_config set_config 4 7 4", "register_write r_lfsr 0 7",
        "register_write r_cluster 3 2", "register_write r_alt 63 15", "register_write r_shortest 0 3"]
    # cluster 1 = {0, 2, 3} all congested, cluster 0 = {1} (the backup set) free: cluster 1 takes the backup set's
    # free path 1; with path 1 congested too there is no free path: 0 for both
    assert [c["data"] for c in p4.selb_cluster_commands(([1, 0, 1, 1], [0, 1, 0, 0], [1, 0, 1, 1], 2), 2)
            if c["table"] == 2] == [0b0010, 0b0010]
    assert [c["data"] for c in p4.selb_cluster_commands(([1, 0, 1, 1], [0, 1, 0, 0], [1, 1, 1, 1], 2), 2)
            if c["table"] == 2] == [0, 0]
    published = ([1, 0, 1, 1], [0, 1, 0, 0], [0, 0, 1, 0], 2)
    assert p4.selb_cluster_commands(published, 2) == [
        {"table": 0, "index": 0, "data": 1}, {"table": 0, "index": 1, "data": 0}, {"table": 0, "index": 2, "data": 1},
        {"table": 0, "index": 3, "data": 1}, {"table": 1, "index": 0, "data": 0}, {"table": 1, "index": 1, "data": 0},
        {"table": 1, "index": 2, "data": 1}, {"table": 1, "index": 3, "data": 0},
        {"table": 2, "index": 0, "data": 0b0010}, {"table": 2, "index": 1, "data": 0b1001},
        {"table": 3, "index": 0, "data": 2}]
    for bad in (dict(time_bits=20), dict(n_paths=128), dict(n_flows=8192), dict(hold=3), dict(colour=1)):
        with pytest.raises(ValueError):
            p4.selb_tor_commands(dict(params, **bad))
    with pytest.raises(ValueError, match="metadata block"):
        p4.replay("selb-reroute", {}, [], [])
    with pytest.raises(ValueError, match="selb_tor.p4 takes"):
        p4.selb_reroute_frames([{"item": {"flow": 8, "path": 0}}], params)


@pytest.mark.parametrize("name", TESTS_SELB)
def test_selb_stored_files_match_golden(name):
    """commands.txt comes from ctl.jsonl through lbpipe/p4.py; packets_out.pcap and trace.jsonl are what this file
    re-derives from packets_in.pcap and commands.txt; selb-cases' decisions are the hand-worked ones."""
    test, frames, rows = _selb_expected(name)
    assert test["commands"] == p4.selb_tor_commands(test["params"], _ctl(name))
    assert test["expected"] == frames
    items = [e["item"] for e in read_events(test["dir"] / "trace.jsonl") if "item" in e]
    assert [item for item, _, _ in rows] == items
    if name == "selb-cases":
        assert {o["tag"]: (o["path"], o["tail"]) for _, o, _ in rows if o["tag"] in SELB_CASES} == SELB_CASES
    tails = [(item, out) for item, out, _ in rows if out["tail"]]
    assert tails and any(item["alt"] == 0 for item, _ in tails), "moves, and moves to the shortest path"
    assert any(stale for _, _, stale in rows)


@pytest.mark.parametrize("name", TESTS_SELB)
def test_selb_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs selb_tor.p4 on the test's frames: every packet leaves with the decision the golden model makes
    when fed what this file re-derives (and the flow, and the cluster fields the registers gave); the in-band
    register writes and block commands are dropped."""
    test, out = p4.run_test(name, tools, compiled[P4 / "selb_tor.p4"])
    _, expected, _ = _selb_expected(name)
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    for i, (a, b) in enumerate(zip(out, expected)):
        assert a == b, f"packet #{i}: bmv2 {p4.selb_decision(a)}, golden {p4.selb_decision(b)}"




# -- FLB one-way delay (flb_owd.p4) ------------------------------------------------------------------------------------

#: flb-owd tests (flb_owd.p4).
TESTS_OWD = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
             == "flb-owd"]


def _on_bmv2(names, default):
    """The bmv2 runs of ``names``: those in ``default`` in the default profile, the others with LBPIPE_FULL=1 (each
    run is about 7 s of wall time, mostly the switch's start delay)."""
    full = pytest.mark.skipif(not os.environ.get("LBPIPE_FULL"), reason="LBPIPE_FULL=1: the longer P4 tests")
    return [n if n in default else pytest.param(n, marks=full) for n in names]


def _owd_expected(name):
    """Re-derived here from the test's commands.txt and input frames alone (the harness header's layout written
    again: op, kind, tag, flags, path, edge, to_edge, stamp, now, then table, index, data; the result at byte 30):
    the configuration the CLI line sets, each frame's item or command fed in order to the golden model
    sim/flb/owd.py. Returns ``(test, expected frames, [(item, golden output)])``."""
    from lbpipe.sim.flb.owd import Owd
    test = p4.load_test(name)
    line, depth = test["commands"]
    assert depth == "set_queue_depth 4096"
    words = line.split()
    assert words[:3] == ["table_set_default", "owd_config", "set_config"], line
    n_edges, n_paths, tmask, dmax = (int(w) for w in words[3:])
    model = Owd(n_edges=n_edges, n_paths=n_paths, time_bits=tmask.bit_length(), delay_bits=dmax.bit_length())
    frames, rows = [], []
    for frame in test["frames"]:
        assert struct.unpack_from("!H", frame, 12)[0] == 0x88B5 and len(frame) == 14 + 42
        op, kind, tag, flags, path, edge, to_edge, stamp, now, table = struct.unpack_from("!BBHBBHHIIB", frame, 14)
        if op == 1:
            model.control({"table": table, "index": int.from_bytes(frame[33:36], "big"),
                           "data": struct.unpack_from("!Q", frame, 36)[0]})
            continue
        assert op == 0 and frame[44:] == bytes(12)
        item = {"kind": kind, "sampled": flags & 1, "edge": edge, "path": path, "stamp": stamp, "now": now,
                "reverse": flags >> 1 & 1, "to_edge": to_edge, "tag": tag}
        out = model.process(item)
        rows.append((item, out))
        bits = out["ok"] | out["base_set"] << 1 | out["pb_valid"] << 2
        frames.append(frame[:44] + struct.pack("!BBII", bits, out["pb_path"], out["qdelay"], out["pb_delay"])
                      + frame[54:])
    return test, frames, rows


#: flb-owd-cases worked by hand (make_flb_owd_tests.py's comments; 3 edges, 3 paths, 8-bit ticks, 6-bit delays):
#: tag -> (ok, qdelay, base_set, pb_valid, pb_path, pb_delay).
OWD_CASES = {0: (1, 0, 1, 0, 0, 0), 1: (1, 5, 0, 0, 0, 0), 2: (1, 0, 0, 1, 0, 5), 3: (1, 0, 0, 0, 0, 0),
             4: (1, 0, 1, 0, 0, 0), 5: (1, 0, 1, 0, 0, 0), 6: (1, 10, 0, 0, 0, 0), 7: (1, 0, 1, 0, 0, 0),
             8: (1, 63, 0, 0, 0, 0), 9: (1, 0, 1, 0, 0, 0), 10: (1, 0, 0, 1, 2, 0), 11: (1, 0, 1, 0, 0, 0),
             12: (1, 1, 0, 0, 0, 0), 13: (0, 0, 0, 0, 0, 0), 14: (0, 0, 0, 0, 0, 0), 15: (0, 0, 0, 0, 0, 0),
             16: (0, 0, 0, 0, 0, 0), 17: (1, 0, 0, 0, 0, 0), 18: (1, 0, 0, 1, 0, 1), 19: (1, 0, 1, 0, 0, 0),
             20: (1, 12, 0, 0, 0, 0), 21: (1, 10, 0, 0, 0, 0), 22: (1, 3, 0, 0, 0, 0), 23: (1, 0, 0, 0, 0, 0),
             24: (1, 0, 1, 0, 0, 0), 25: (1, 0, 1, 0, 0, 0), 26: (1, 0, 0, 0, 0, 0), 27: (1, 0, 1, 0, 0, 0),
             28: (1, 5, 0, 0, 0, 0), 29: (1, 0, 0, 1, 2, 5), 30: (1, 0, 0, 1, 0, 0)}


def test_owd_commands():
    """Hand-worked: the configuration line (masks of 8 and 6 bits); parameters and items refused."""
    assert p4.flb_owd_commands(dict(n_edges=3, n_paths=3, time_bits=8, delay_bits=6)) == [
        "table_set_default owd_config set_config 3 3 255 63", "set_queue_depth 4096"]
    assert p4.flb_owd_commands({}, 5000) == ["table_set_default owd_config set_config 16 8 65535 65535",
                                             "set_queue_depth 5000"]
    for bad in (dict(n_edges=1025), dict(n_paths=17), dict(time_bits=33), dict(delay_bits=20), dict(colour=1)):
        with pytest.raises(ValueError):
            p4.flb_owd_commands(bad)
    with pytest.raises(ValueError, match="flb_owd.p4 takes"):
        p4.flb_owd_frames([{"item": {"sampled": 1, "stamp": 1 << 16}}], {})
    with pytest.raises(ValueError, match="metadata block"):
        p4.replay("flb-owd", {}, [], [])


@pytest.mark.parametrize("name", TESTS_OWD)
def test_owd_stored_files_match_golden(name):
    """commands.txt is lbpipe/p4.py's for the parameters; packets_out.pcap and trace.jsonl are what this file
    re-derives from packets_in.pcap; flb-owd-cases' results are the hand-worked ones."""
    test, frames, rows = _owd_expected(name)
    assert test["commands"] == p4.flb_owd_commands(test["params"])
    assert test["expected"] == frames
    assert [item for item, _ in rows] == [e["item"] for e in read_events(test["dir"] / "trace.jsonl") if "item" in e]
    if name == "flb-owd-cases":
        keys = ("ok", "qdelay", "base_set", "pb_valid", "pb_path", "pb_delay")
        assert {o["tag"]: tuple(o[k] for k in keys) for _, o in rows} == OWD_CASES
    assert all(any(o[k] for _, o in rows) for k in ("base_set", "pb_valid", "qdelay")), "the test must measure"


@pytest.mark.parametrize("name", _on_bmv2(TESTS_OWD, ("flb-owd-cases", "flb-owd-mixed")))
def test_owd_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs flb_owd.p4 on the test's frames: every item leaves with the result the golden model gives when fed
    what this file re-derives; the in-band commands are dropped."""
    test, out = p4.run_test(name, tools, compiled[P4 / "flb_owd.p4"])
    _, expected, _ = _owd_expected(name)
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    for i, (a, b) in enumerate(zip(out, expected)):
        assert a == b, f"item #{i}: bmv2 {p4.flb_owd_result(a)}, golden {p4.flb_owd_result(b)}"




# -- FLB isolation table (flb_isolate.p4) ------------------------------------------------------------------------------

#: flb-isolate tests (flb_isolate.p4).
TESTS_ISO = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
             == "flb-isolate"]


def _iso_expected(name):
    """Re-derived here from the test's commands.txt and input frames alone (the harness header's layout written
    again: op, tag, flow, dest, now, n, cong, cp, then table, index, data; the result at byte 28): the configuration
    the CLI line sets, each frame's packet, CNM or command fed in order to the golden model sim/flb/isolate.py. Returns
    ``(test, expected frames, [(item, golden output)])``."""
    from lbpipe.sim.flb.isolate import Isolate
    test = p4.load_test(name)
    line, depth = test["commands"]
    assert depth == "set_queue_depth 4096"
    words = line.split()
    assert words[:3] == ["table_set_default", "iso_config", "set_config"], line
    n_flows, n_dests, n_paths, n_slots, tmask, timeout, n_ports = (int(w) for w in words[3:])
    model = Isolate(n_flows=n_flows, n_dests=n_dests, n_paths=n_paths, n_slots=n_slots,
                    time_bits=tmask.bit_length(), timeout=timeout, n_ports=n_ports)
    frames, rows = [], []
    for frame in test["frames"]:
        assert struct.unpack_from("!H", frame, 12)[0] == 0x88B5 and len(frame) == 14 + 34
        op, tag, flow, dest, now, n, cong, cp, table = struct.unpack_from("!BHIHIBBBB", frame, 14)
        assert frame[42:] == bytes(6)
        if op == 1:
            model.control({"table": table, "index": int.from_bytes(frame[31:34], "big"),
                           "data": struct.unpack_from("!Q", frame, 34)[0]})
            continue
        if op == 2:
            model.process_stream("upd", {"flow": flow, "dest": dest, "cp": cp, "n": n, "cong": cong, "now": now})
            continue
        assert op == 0
        item = {"flow": flow, "dest": dest, "now": now, "tag": tag}
        out = model.process(item)
        rows.append((item, out))
        bits = out["ok"] | out["isolated"] << 1 | out["held"] << 2
        frames.append(frame[:42] + struct.pack("!BBH", bits, out["path"], out["mask"]) + frame[46:])
    return test, frames, rows


#: flb-isolate-cases worked by hand (make_flb_isolate_tests.py's comments; 4 paths, 4 entries, timeout 50, 3 points):
#: tag -> (ok, isolated, path, mask, held).
ISO_CASES = {0: (1, 0, 0, 0, 0), 1: (1, 1, 3, 8, 1), 2: (1, 1, 3, 8, 0), 3: (1, 1, 3, 12, 1), 4: (1, 1, 2, 12, 0),
             5: (1, 1, 3, 8, 0), 6: (1, 0, 0, 12, 0), 7: (1, 0, 0, 0, 1), 8: (1, 1, 3, 12, 1), 9: (1, 1, 3, 8, 1),
             10: (1, 0, 0, 8, 0), 11: (1, 1, 2, 12, 1), 12: (1, 1, 1, 14, 1), 13: (1, 1, 2, 14, 0),
             14: (1, 1, 3, 14, 0), 15: (1, 0, 0, 0, 0), 16: (1, 0, 0, 0, 0), 17: (1, 0, 0, 8, 0), 18: (1, 1, 3, 8, 1),
             19: (1, 1, 3, 8, 0), 20: (1, 0, 0, 0, 0), 21: (1, 0, 0, 0, 0), 22: (0, 0, 0, 0, 1), 23: (0, 0, 0, 0, 0)}


def test_isolate_commands():
    """Hand-worked: the configuration line; parameters and events refused."""
    assert p4.flb_isolate_commands(dict(n_flows=64, n_dests=4, n_paths=4, n_slots=4, time_bits=8, timeout=50,
                                        n_ports=3)) == [
        "table_set_default iso_config set_config 64 4 4 4 255 50 3", "set_queue_depth 4096"]
    assert p4.flb_isolate_commands({})[0] == "table_set_default iso_config set_config 65536 16 8 8 65535 4096 8"
    for bad in (dict(n_slots=9), dict(n_paths=17), dict(n_dests=4097), dict(timeout=0), dict(n_ports=33),
                dict(colour=1)):
        with pytest.raises(ValueError):
            p4.flb_isolate_commands(bad)
    with pytest.raises(ValueError, match="flb_isolate.p4 takes"):
        p4.flb_isolate_frames([{"upd": {"flow": 1, "dest": 0, "n": 1, "cong": 2, "now": 0}}], {})
    with pytest.raises(ValueError, match="metadata block"):
        p4.replay("flb-isolate", {}, [], [])


@pytest.mark.parametrize("name", TESTS_ISO)
def test_isolate_stored_files_match_golden(name):
    """commands.txt is lbpipe/p4.py's for the parameters; packets_out.pcap and trace.jsonl's packets are what this
    file re-derives from packets_in.pcap; flb-isolate-cases' results are the hand-worked ones."""
    test, frames, rows = _iso_expected(name)
    assert test["commands"] == p4.flb_isolate_commands(test["params"])
    assert test["expected"] == frames
    assert [item for item, _ in rows] == [e["item"] for e in read_events(test["dir"] / "trace.jsonl") if "item" in e]
    if name == "flb-isolate-cases":
        keys = ("ok", "isolated", "path", "mask", "held")
        assert {o["tag"]: tuple(o[k] for k in keys) for _, o in rows} == ISO_CASES
    assert all(any(o[k] for _, o in rows) for k in ("isolated", "held")), "the test must isolate flows"


@pytest.mark.parametrize("name", _on_bmv2(TESTS_ISO, ("flb-isolate-cases",)))
def test_isolate_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs flb_isolate.p4 on the test's frames: every packet leaves with the result the golden model gives
    when fed what this file re-derives; CNM and command frames are dropped."""
    test, out = p4.run_test(name, tools, compiled[P4 / "flb_isolate.p4"])
    _, expected, _ = _iso_expected(name)
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    for i, (a, b) in enumerate(zip(out, expected)):
        assert a == b, f"packet #{i}: bmv2 {p4.flb_isolate_result(a)}, golden {p4.flb_isolate_result(b)}"




# -- FLB congestion detection (flb_cnm.p4) -----------------------------------------------------------------------------

#: flb-cnm tests (flb_cnm.p4).
TESTS_CNM = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
             == "flb-cnm"]


def _cnm_expected(name):
    """Re-derived here from the test's commands.txt and input frames alone (the harness header's layout written
    again: op, tag, port, deq, amount, flow, src, then table, index, data; the result at byte 27): the configuration
    the CLI line sets, each frame's item or command fed in order to the golden model sim/flb/cnm.py. Returns
    ``(test, expected frames, [(item, golden output)])``."""
    from lbpipe.sim.flb.cnm import Cnm
    test = p4.load_test(name)
    line, depth = test["commands"]
    assert depth == "set_queue_depth 4096"
    words = line.split()
    assert words[:3] == ["table_set_default", "cnm_config", "set_config"], line
    n_ports, n_slots, qmask, threshold = (int(w) for w in words[3:])
    params = dict(test["params"])
    model = Cnm(**dict(params, n_ports=n_ports, n_slots=n_slots, q_bits=qmask.bit_length(), threshold=threshold))
    frames, rows = [], []
    for frame in test["frames"]:
        assert struct.unpack_from("!H", frame, 12)[0] == 0x88B5 and len(frame) == 14 + 42
        op, tag, port, deq, amount, flow, src, table = struct.unpack_from("!BHBBIIHB", frame, 14)
        assert frame[41:] == bytes(15)
        if op == 1:
            model.control({"table": table, "index": int.from_bytes(frame[30:33], "big"),
                           "data": struct.unpack_from("!Q", frame, 33)[0]})
            continue
        assert op == 0
        item = {"port": port, "deq": deq, "amount": amount, "flow": flow, "src": src, "tag": tag}
        out = model.process(item)
        rows.append((item, out))
        bits = out["ok"] | out["cnm"] << 1 | out["cnm_cong"] << 2
        frames.append(frame[:41] + struct.pack("!BIIHBB", bits, out["qlen"], out["cnm_flow"], out["cnm_src"],
                                               out["cnm_n"], out["cnm_cp"]) + frame[54:])
    return test, frames, rows


#: flb-cnm-cases worked by hand (make_flb_cnm_tests.py's comments; 2 ports, 2 slots, top 63, K 20 then 5 then 30;
#: tag 4 a refresh):
#: tag -> (ok, qlen, cnm, cnm_cong, cnm_flow, cnm_src, cnm_n, cnm_cp).
CNM_CASES = {0: (1, 10, 0, 0, 0, 0, 0, 0), 1: (1, 20, 1, 1, 1, 3, 1, 0), 2: (1, 25, 0, 0, 0, 0, 0, 0),
             3: (1, 30, 1, 1, 2, 4, 2, 0), 4: (1, 35, 1, 1, 1, 3, 2, 0), 5: (1, 25, 0, 0, 0, 0, 0, 0),
             6: (1, 63, 1, 1, 7, 1, 1, 1), 7: (1, 63, 0, 0, 0, 0, 0, 0), 8: (1, 19, 1, 0, 1, 3, 2, 0),
             9: (1, 19, 1, 0, 2, 4, 1, 0), 10: (1, 0, 0, 0, 0, 0, 0, 0), 11: (0, 0, 0, 0, 0, 0, 0, 0),
             12: (1, 5, 1, 1, 8, 2, 1, 0), 13: (1, 6, 1, 1, 9, 9, 2, 0), 14: (1, 4, 1, 0, 8, 2, 2, 0),
             15: (1, 7, 1, 1, 10, 1, 2, 0), 16: (1, 0, 1, 0, 10, 1, 2, 0), 17: (1, 0, 1, 0, 9, 9, 1, 0),
             18: (1, 23, 1, 0, 7, 1, 1, 1)}


def test_cnm_commands():
    """Hand-worked: the configuration line; parameters and items refused."""
    assert p4.flb_cnm_commands(dict(n_ports=2, n_slots=2, amount_bits=6, q_bits=6, threshold=20)) == [
        "table_set_default cnm_config set_config 2 2 63 20", "set_queue_depth 4096"]
    assert p4.flb_cnm_commands({})[0] == "table_set_default cnm_config set_config 8 4 65535 512"
    for bad in (dict(n_ports=33), dict(n_slots=9), dict(q_bits=33), dict(threshold=0), dict(colour=1)):
        with pytest.raises(ValueError):
            p4.flb_cnm_commands(bad)
    with pytest.raises(ValueError, match="flb_cnm.p4 takes"):
        p4.flb_cnm_frames([{"item": {"port": 0, "amount": 256}}], {})
    with pytest.raises(ValueError, match="metadata block"):
        p4.replay("flb-cnm", {}, [], [])


@pytest.mark.parametrize("name", TESTS_CNM)
def test_cnm_stored_files_match_golden(name):
    """commands.txt is lbpipe/p4.py's for the parameters; packets_out.pcap and trace.jsonl are what this file
    re-derives from packets_in.pcap; flb-cnm-cases' results are the hand-worked ones."""
    test, frames, rows = _cnm_expected(name)
    assert test["commands"] == p4.flb_cnm_commands(test["params"])
    assert test["expected"] == frames
    assert [item for item, _ in rows] == [e["item"] for e in read_events(test["dir"] / "trace.jsonl") if "item" in e]
    if name == "flb-cnm-cases":
        keys = ("ok", "qlen", "cnm", "cnm_cong", "cnm_flow", "cnm_src", "cnm_n", "cnm_cp")
        assert {o["tag"]: tuple(o[k] for k in keys) for _, o in rows} == CNM_CASES
    assert any(o["cnm_cong"] for _, o in rows) and any(o["cnm"] and not o["cnm_cong"] for _, o in rows)


@pytest.mark.parametrize("name", _on_bmv2(TESTS_CNM, ("flb-cnm-cases",)))
def test_cnm_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs flb_cnm.p4 on the test's frames: every item leaves with the result the golden model gives when fed
    what this file re-derives; the in-band commands are dropped."""
    test, out = p4.run_test(name, tools, compiled[P4 / "flb_cnm.p4"])
    _, expected, _ = _cnm_expected(name)
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    for i, (a, b) in enumerate(zip(out, expected)):
        assert a == b, f"item #{i}: bmv2 {p4.flb_cnm_result(a)}, golden {p4.flb_cnm_result(b)}"




# -- SELB reordering (selb_reorder.p4) ---------------------------------------------------------------------------------

#: selb-reorder tests (selb_reorder.p4) with the harness header (the selb-reorder-bth* frames have none: below).
TESTS_REORDER = [n for n in ALL_TESTS if json.loads((P4 / "sim" / f"test-{n}" / "test.json").read_text())["block"]
                 == "selb-reorder" and not n.startswith("selb-reorder-bth")]


def _reorder_flow(frame, mask):
    """The flow of a harness frame's IPv4 packet: this file's CRC16 of its 5-tuple (ports 0 unless an unfragmented
    TCP or UDP packet), its low bits."""
    import ipaddress
    from scapy.layers.inet import IP, TCP, UDP
    ip = IP(frame[51:])
    ports = (0, 0)
    if ip.flags.MF == 0 and ip.frag == 0 and (TCP in ip or UDP in ip):
        l4 = ip[TCP] if TCP in ip else ip[UDP]
        ports = (l4.sport, l4.dport)
    return _crc16_arc(ipaddress.IPv4Address(ip.src).packed + ipaddress.IPv4Address(ip.dst).packed
                      + struct.pack("!BHH", ip.proto, *ports)) & mask


def _reorder_expected(name):
    """Re-derived here from the test's commands.txt and input frames alone (selb_tor.p4's harness header written
    again: op, kind, tag, now at its start, flags at its byte 24 with the tail in bit 1 and the epoch in bit 2, the
    EtherType after it at byte 35; the output: the flow at byte 21, ``held`` flags bit 6): the configuration the CLI
    line sets, each packet's flow the low log2 n_flows bits of this file's CRC16 of its 5-tuple, a frame that is not
    IPv4 an item of another kind; the golden model sim/selb/reorder.py fed the items in order. Returns ``(test,
    items, expected frames in the golden release order, {tag: class}, golden counters)``: a frame's class is its flow
    for a DATA packet of an IPv4 flow, None for the others."""
    from lbpipe.sim.selb.reorder import Reorder
    test = p4.load_test(name)
    words = test["commands"][0].split()
    assert words[:3] == ["table_set_default", "reorder_config", "set_config"], test["commands"]
    mask, n_buffers, depth, tmask, timeout = (int(w) for w in words[3:])
    assert test["commands"][1:] == ["set_queue_rate 2000 2"]
    model = Reorder(n_flows=mask + 1, n_buffers=n_buffers, depth=depth, time_bits=tmask.bit_length(),
                    timeout=timeout)
    items, frames_of, classes, out = [], {}, {}, []
    for frame in test["frames"]:
        assert struct.unpack_from("!H", frame, 12)[0] == 0x88B5
        op, kind, tag, now = struct.unpack_from("!BBHI", frame, 14)
        if op == 1:
            model.control({"table": frame[23], "index": int.from_bytes(frame[24:27], "big"),
                           "data": struct.unpack_from("!Q", frame, 27)[0]})
        if op != 0:
            continue
        flags = frame[14 + 24]
        is_flow = struct.unpack_from("!H", frame, 14 + 35)[0] == 0x0800
        flow = _reorder_flow(frame, mask) if is_flow else 0
        item = {"kind": kind if is_flow else 0, "tag": tag, "flow": flow, "epoch": flags >> 2 & 1,
                "tail": flags >> 1 & 1, "now": now & tmask}
        items.append(item)
        frames_of[tag] = frame
        classes[tag] = flow if is_flow and kind == PacketKind.DATA.value else None
        for res in model.step(item):
            f = bytearray(frames_of[res["tag"]])
            struct.pack_into("!H", f, 14 + 21, res["flow"])
            f[14 + 24] |= res["held"] << 6
            out.append(bytes(f))
    assert not model.held()
    return test, items, out, classes, model.stats()


def _by_class(frames, classes):
    groups = {}
    for f in frames:
        groups.setdefault(classes[struct.unpack_from("!H", f, 16)[0]], []).append(f)
    return groups


def _reorder_properties(frames_in, out, mask):
    """Properties of bmv2's output re-derived from the input frames alone (not from any model): every packet leaves
    once, as it came but for its flow field (its CRC16's low bits for an IPv4 frame, 0 for another) and flags bit 6
    (``held``); within a flow (the DATA packets of an IPv4 flow), only a held packet is overtaken, and never by a
    packet of its own epoch; and a held packet leaves after every packet of its flow of the other epoch that arrived
    before it (the old path's packets before the tail leave before the new path's held ones). Returns the number of
    frames out with ``held`` set."""
    arrived = [f for f in frames_in if f[14] == 0]
    order = {struct.unpack_from("!H", f, 16)[0]: i for i, f in enumerate(arrived)}
    assert sorted(struct.unpack_from("!H", f, 16)[0] for f in out) == sorted(order), "every packet leaves once"
    flows, n_held = {}, 0
    for f in out:
        tag = struct.unpack_from("!H", f, 16)[0]
        a = arrived[order[tag]]
        held = f[38] >> 6 & 1
        n_held += held
        ipv4 = a[49:51] == b"\x08\x00"
        flow = _reorder_flow(a, mask) if ipv4 else 0
        assert f == a[:35] + struct.pack("!H", flow) + a[37:38] + bytes([a[38] | held << 6]) + a[39:], f"tag {tag}"
        if ipv4 and a[15] == PacketKind.DATA.value:
            flows.setdefault(flow, []).append((order[tag], a[38] >> 2 & 1, held))
    for flow, seq in flows.items():
        for j, (arr_b, epoch_b, _) in enumerate(seq):
            for arr_a, epoch_a, held_a in seq[j + 1:]:
                if arr_a < arr_b:       # a arrived first and left after b: overtaken
                    assert held_a and epoch_a != epoch_b, f"flow {flow}: arrival {arr_a} overtaken by {arr_b}"
        for j, (arr_x, epoch_x, held_x) in enumerate(seq):
            if held_x:
                assert all(not (arr_y < arr_x and epoch_y != epoch_x) for arr_y, epoch_y, _ in seq[j + 1:]), \
                    f"flow {flow}: held arrival {arr_x} left before an earlier packet of the other epoch"
    return n_held


#: selb-reorder-cases worked by hand (make_selb_reorder_tests.py's comments; 2 buffers of 4, timeout 32, 8-bit
#: ticks): each flow's DATA packets as they must leave, (tag, held); then the frames of no flow's order in theirs.
REORDER_CASES = {1: [(0, 0), (1, 0), (5, 0), (6, 0), (2, 1), (4, 1), (7, 0), (17, 1), (18, 1), (19, 1), (20, 1),
                     (21, 0)],
                 2: [(8, 1), (22, 1), (23, 1), (24, 0)], 3: [(16, 0), (9, 1)], 4: [(10, 0), (28, 1), (30, 1)],
                 5: [(11, 0)], 6: [(12, 0), (13, 0)], 7: [(26, 0), (27, 0), (25, 1)],
                 None: [(3, 0), (14, 0), (15, 0), (29, 0), (31, 0)]}
#: Its counters, by hand: items, held, reorders (tags 6, 16, 27), timeouts (at 15 and 31), overflows (20), second
#: reroutes (23), fallbacks (10), stale tails (11, 21).
REORDER_CASES_STATS = [32, 13, 3, 2, 1, 1, 1, 2]


def test_reorder_commands():
    """Hand-worked: the configuration line and the hold port's pace; parameters and items refused."""
    assert p4.selb_reorder_commands(dict(n_flows=16, n_buffers=2, depth=4, time_bits=8, timeout=32)) == [
        "table_set_default reorder_config set_config 15 2 4 255 32", "set_queue_rate 2000 2"]
    assert p4.selb_reorder_commands({}, rate=500) == [
        "table_set_default reorder_config set_config 1023 8 32 65535 1024", "set_queue_rate 500 2"]
    for bad in (dict(n_flows=8192), dict(n_buffers=17), dict(depth=2048), dict(depth=6), dict(time_bits=33),
                dict(timeout=3), dict(timeout=256, time_bits=8), dict(colour=1), dict(depth="8")):
        with pytest.raises(ValueError):
            p4.selb_reorder_commands(bad)
    for item in ({"flow": 16}, {"now": 256}, {"epoch": 2}, {"kind": 8}, {"tag": 1 << 16}):
        with pytest.raises(ValueError, match="selb_reorder.p4 takes"):
            p4.selb_reorder_frames([{"item": item}], dict(n_flows=16, time_bits=8, timeout=32))
    with pytest.raises(ValueError, match="metadata block"):
        p4.replay("selb-reorder", {}, [], [])


@pytest.mark.parametrize("name", TESTS_REORDER)
def test_reorder_stored_files_match_golden(name):
    """commands.txt is lbpipe/p4.py's for the parameters; packets_out.pcap, trace.jsonl and the counters in
    test.json are what this file re-derives from packets_in.pcap; selb-reorder-cases' orders and counters are the
    hand-worked ones."""
    test, items, frames, classes, stats = _reorder_expected(name)
    assert test["commands"] == p4.selb_reorder_commands(test["params"])
    assert test["expected"] == frames
    assert items == [e["item"] for e in read_events(test["dir"] / "trace.jsonl") if "item" in e]
    assert json.loads((test["dir"] / "test.json").read_text())["stats"] == stats
    if name == "selb-reorder-cases":
        got = {c: [(struct.unpack_from("!H", f, 16)[0], f[38] >> 6 & 1) for f in fs]
               for c, fs in _by_class(frames, classes).items()}
        assert got == REORDER_CASES
        assert stats == REORDER_CASES_STATS
    assert _reorder_properties(test["frames"], frames, test["params"]["n_flows"] - 1) == stats[1]
    assert stats[1] and stats[2] and stats[3], "the test must hold, release by a tail and time out"
    if name != "selb-reorder-defaults":
        assert all(stats), "and fill a buffer, reroute twice, fall back and see stale tails"


@pytest.mark.parametrize("name", _on_bmv2(TESTS_REORDER, ("selb-reorder-cases", "selb-reorder-mixed")))
def test_reorder_bmv2_matches_golden(name, tools, compiled):
    """bmv2 runs selb_reorder.p4 on the test's frames, holding packets by recirculation: the frames out are the
    golden model's byte for byte (flow and ``held`` written), each flow's DATA packets in the golden model's release
    order and the other frames in theirs; flows may interleave otherwise (p4/README.md). Independently, the
    properties of :func:`_reorder_properties` hold on bmv2's output; the program's counters are the golden model's
    (and for the hand-picked test the hand-worked ones), none of its release records lost."""
    test = p4.load_test(name)
    _, _, expected, classes, stats = _reorder_expected(name)
    out, text = p4.run_switch(compiled[P4 / "selb_reorder.p4"], test["frames"], test["commands"], tools=tools,
                              expect=len(expected), after=["register_read r_stats"])
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    assert sorted(out) == sorted(expected), "bmv2 sent other frames than the golden model"
    want, got = _by_class(expected, classes), _by_class(out, classes)
    for c in want:
        if got[c] != want[c]:
            first = next(i for i, (a, b) in enumerate(zip(got[c], want[c])) if a != b)
            pytest.fail(f"flow {c}: its packet #{first} is {p4.selb_reorder_result(got[c][first])}, golden "
                        f"{p4.selb_reorder_result(want[c][first])}")
    counters = [int(v) for v in next(line for line in text.splitlines() if "r_stats=" in line).split("=")[1]
                .split(",")]
    assert counters[:8] == stats and counters[10] == 0, counters
    assert _reorder_properties(test["frames"], out, test["params"]["n_flows"] - 1) == stats[1]
    if name == "selb-reorder-cases":
        assert counters[:8] == REORDER_CASES_STATS
        assert out != expected, "the test must show flows interleaved otherwise than the golden model's"


@pytest.mark.regression
def test_cli_replay_reorder_bmv2(tools, tmp_path):
    """``lbpipe replay selb-reorder --engine bmv2`` end to end against ``--engine golden`` on a fresh trace: the
    same items, each flow's in the golden order (the DATA items of a flow; the others in theirs)."""
    trace, gold, bm = tmp_path / "t.jsonl", tmp_path / "g.jsonl", tmp_path / "b.jsonl"
    params = ["--param", "n_buffers=3", "--param", "depth=4", "--param", "timeout=512"]
    run = [sys.executable, "-m", "lbpipe.cli"]
    subprocess.run([*run, "trace", "selb-reorder", *params, "--seed", "21", "-n", "400", "-o", str(trace)],
                   check=True, capture_output=True)
    for engine, out in (("golden", gold), ("bmv2", bm)):
        done = subprocess.run([*run, "replay", "selb-reorder", str(trace), *params, "--engine", engine, "-o",
                               str(out)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    g, b = [e["item"] for e in read_events(gold)], [e["item"] for e in read_events(bm)]
    assert sorted(map(json.dumps, g)) == sorted(map(json.dumps, b))

    def key(item):
        return item["flow"] if item["kind"] == PacketKind.DATA.value else None
    for c in {key(i) for i in g}:
        assert [i for i in g if key(i) == c] == [i for i in b if key(i) == c], f"flow {c}"


def _reorder_bth_expected(name):
    """Re-derived from the input frames alone for a test of frames without the harness header (RoCEv2, the tail
    and epoch in the BTH's reserved byte, bits 0 and 1; a request opcode is DATA): each frame's flow by this file's
    CRC16 of its addresses and destination QP, the golden model fed them with ``now`` 0 (the test's timeout is out
    of reach of bmv2's clock). Returns ``(test, expected frames in the golden order, {frame: (class, PSN)}, golden
    counters)``."""
    from scapy.layers.inet import IP, UDP
    from lbpipe.sim.selb.reorder import Reorder
    test = p4.load_test(name)
    mask, n_buffers, depth, tmask, timeout = (int(w) for w in test["commands"][0].split()[3:])
    model = Reorder(n_flows=mask + 1, n_buffers=n_buffers, depth=depth, time_bits=tmask.bit_length(),
                    timeout=timeout)
    out, info = [], {}
    for tag, frame in enumerate(test["frames"]):
        ip = IP(frame[14:])
        bth = bytes(ip[UDP].payload)[:12]
        data = bth[0] <= 0x0C or bth[0] in (0x16, 0x17)
        # the no-header key: this file's CRC16 of the addresses and the destination QP (not the source port)
        flow = _crc16_arc(bytes(ip)[12:20] + bth[5:8]) & mask
        info[frame] = (flow if data else None, int.from_bytes(bth[9:12], "big"))
        item = {"kind": 1 if data else 4, "tag": tag, "flow": flow, "epoch": bth[4] >> 1 & 1, "tail": bth[4] & 1,
                "now": 0}
        out += [test["frames"][res["tag"]] for res in model.step(item)]
    return test, out, info, model.stats()


def test_reorder_bth_stored_files():
    """selb-reorder-bth: packets_out.pcap is what this file re-derives; by hand, flow A's PSNs leave 0 to 6 in order
    (4 and 5 held until the tail, 3), flow B's 0 and 1, the marked ACK passes; two held, one reorder."""
    test, out, info, stats = _reorder_bth_expected("selb-reorder-bth")
    assert test["expected"] == out
    flows = {}
    for f in out:
        flows.setdefault(info[f][0], []).append(info[f][1])
    assert sorted(flows.values()) == [[0, 1], [0, 1, 2, 3, 4, 5, 6], [7]]
    assert stats == [10, 2, 1, 0, 0, 0, 0, 0]


def test_reorder_bth_bmv2(tools, compiled):
    """bmv2 runs selb_reorder.p4 on RoCEv2 frames marked in the BTH (no harness header): they leave unchanged, each
    flow's in the golden model's order (so its PSNs in sequence), with the golden model's counters."""
    test, expected, info, stats = _reorder_bth_expected("selb-reorder-bth")
    out, text = p4.run_switch(compiled[P4 / "selb_reorder.p4"], test["frames"], test["commands"], tools=tools,
                              expect=len(expected), after=["register_read r_stats"])
    assert sorted(out) == sorted(expected)
    for c in {info[f][0] for f in expected}:
        assert [f for f in out if info[f][0] == c] == [f for f in expected if info[f][0] == c], f"flow {c}"
    counters = [int(v) for v in next(line for line in text.splitlines() if "r_stats=" in line).split("=")[1]
                .split(",")]
    assert counters[:8] == stats


def test_reorder_after_selb_tor_bmv2(tools, compiled):
    """The two ToRs chained on bmv2: a selb-reroute trace (seed 33, 200 packets, all DATA, 8 paths, 64 flows, hold
    8) through selb_tor.p4, its frames as they left delayed by their path (0 to 6 ticks: less than ``hold``, so no
    flow is rerouted again within the paths' spread) with the tick set to the arrival's, then through
    selb_reorder.p4 (the block's defaults but 64 flows) as they are: the tail and epoch marks selb_tor.p4 wrote are
    the ones read. Three flows arrive out of the order the source sent them (their tags; six before
    selb-reroute's traces became 80% data); every flow leaves in it."""
    from lbpipe.sim.selb.reroute import reroute_trace
    params = dict(n_paths=8, n_flows=64, hold=8, lfsr_seed=0x1234)
    events = reroute_trace(33, 200, **params)
    for event in events:
        if "item" in event:
            event["item"]["kind"] = PacketKind.DATA.value
    commands, frames, n = p4.selb_reroute_frames(events, params)
    sent = p4.run_switch(compiled[P4 / "selb_tor.p4"], frames, commands, tools=tools, expect=n)
    assert len(sent) == n
    delay = [0, 6, 2, 4, 1, 5, 3, 6]
    arrival = []
    for i, frame in enumerate(sent):
        d = p4.selb_decision(frame)
        tick = (d["now"] + delay[d["path"]]) & 0xFFFF
        arrival.append((tick, i, frame[:18] + struct.pack("!I", tick) + frame[22:]))
    arrival = [f for _, _, f in sorted(arrival, key=lambda a: a[:2])]

    def misordered(frames_):
        by = {}
        for f in frames_:
            by.setdefault(struct.unpack_from("!H", f, 14 + 21)[0] & 63, []).append(struct.unpack_from("!H", f, 16)[0])
        return sum(v != sorted(v) for v in by.values())
    assert sum(f[38] >> 1 & 1 for f in sent) > 0 and misordered(arrival) == 3
    out, text = p4.run_switch(compiled[P4 / "selb_reorder.p4"], arrival, p4.selb_reorder_commands(dict(n_flows=64)),
                              tools=tools, expect=n, after=["register_read r_stats"])
    assert len(out) == n and misordered(out) == 0
    counters = [int(v) for v in next(line for line in text.splitlines() if "r_stats=" in line).split("=")[1]
                .split(",")]
    assert counters[1] > 0 and counters[2] > 0 and counters[3:8] == [0] * 5, counters


#: No-header tests beyond untagged IPv4 (p4/sim/make_selb_reorder_bth_tests.py): tagged IPv4, and IPv6.
TESTS_REORDER_FORMS = ["selb-reorder-bth-tags", "selb-reorder-bth-ipv6"]


def _selb_reorder_form_item(frame):
    """A frame without the harness header read again here with scapy, by lbpipe's parser rules for tags and IP
    (docs/packet_io.md: an outer tag 0x8100 or 0x88A8, an inner 0x8100; IPv4 not a fragment, or IPv6 with UDP as its
    next header) and selb_reorder.p4's for data (UDP port 4791, BTH TVer 0, a request opcode): ``(key, epoch, tail,
    PSN)`` for a DATA packet, its key the two addresses and the destination QP as bytes; None for another frame."""
    import ipaddress
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    at, ether_type = 14, struct.unpack_from("!H", frame, 12)[0]
    if ether_type in (0x8100, 0x88A8):
        at, ether_type = 18, struct.unpack_from("!H", frame, 16)[0]
        if ether_type == 0x8100:
            at, ether_type = 22, struct.unpack_from("!H", frame, 20)[0]
    if ether_type == 0x0800:
        ip = IP(frame[at:])
        if ip.flags.MF or ip.frag or ip.proto != 17:
            return None
        addresses = ipaddress.IPv4Address(ip.src).packed + ipaddress.IPv4Address(ip.dst).packed
    elif ether_type == 0x86DD:
        ip = IPv6(frame[at:])
        if ip.version != 6 or ip.nh != 17:
            return None
        addresses = ipaddress.IPv6Address(ip.src).packed + ipaddress.IPv6Address(ip.dst).packed
    else:
        return None
    if ip[UDP].dport != 4791:
        return None
    bth = bytes(ip[UDP].payload)[:12]
    if bth[1] & 15 != 0 or not (bth[0] <= 0x0C or bth[0] in (0x16, 0x17)):
        return None
    return addresses + bth[5:8], bth[4] >> 1 & 1, bth[4] & 1, int.from_bytes(bth[9:12], "big")


def _selb_reorder_form_expected(name):
    """Re-derived from the test's input frames alone: each frame read by :func:`_selb_reorder_form_item`, a DATA
    packet's flow the low bits of this file's CRC16 of its key, the golden model fed the items (``now`` 0: the
    timeout is out of reach of bmv2's clock). Returns ``(test, expected frames in the golden order, {frame: (class,
    PSN)}, golden counters)``, a class the flow of a DATA packet, None for the others."""
    from lbpipe.sim.selb.reorder import Reorder
    test = p4.load_test(name)
    mask, n_buffers, depth, tmask, timeout = (int(w) for w in test["commands"][0].split()[3:])
    model = Reorder(n_flows=mask + 1, n_buffers=n_buffers, depth=depth, time_bits=tmask.bit_length(),
                    timeout=timeout)
    out, info = [], {}
    for tag, frame in enumerate(test["frames"]):
        got = _selb_reorder_form_item(frame)
        if got is None:
            item = {"kind": 0, "tag": tag, "flow": 0, "epoch": 0, "tail": 0, "now": 0}
            info[frame] = (None, None)
        else:
            key, epoch, tail, psn = got
            flow = _crc16_arc(key) & mask
            item = {"kind": PacketKind.DATA.value, "tag": tag, "flow": flow, "epoch": epoch, "tail": tail, "now": 0}
            info[frame] = (flow, psn)
        out += [test["frames"][res["tag"]] for res in model.step(item)]
    assert not model.held()
    return test, out, info, model.stats()


#: Worked by hand (make_selb_reorder_bth_tests.py's rows): the input frames' indices in the order they must leave
#: (each tail followed by the packets its buffer held), the indices held, and the counters (items, held, reorders,
#: then no timeout, full buffer, second reroute, fallback or stale tail).
#: bth-tags: A (one C-tag) 0 A0, 2 A1, 3 A4 early, 6 A5, 9 A2 old path, 10 A3 tail, 16 A6; B (S-tag, C-tag) 1, 5 B2
#: early, 15 B1 tail, 20; C (a lone S-tag) 7, 12 C2 early, 18 C1 tail, 21; D (two C-tags) 13, 17 D2 early, 19 D1 tail,
#: 22; passing: 4 (three tags), 8 (an inner S-tag), 11 (TPID 0x9100), 14 (an ACK marked epoch 1 and tail).
#: bth-ipv6: P (untagged) 0, 2 P2 early, 6 P3, 8 P1 tail, 16; Q (P's addresses, another QP) 1, 4, 9, 17 in order;
#: R (one C-tag) 5, 7 R2 early, 12 R1 tail, 18; S (S-tag, C-tag) 11, 13 S2 early, 15 S1 tail, 19; passing: 3 (a
#: hop-by-hop header), 10 (TCP), 14 (version 4).
REORDER_FORMS = {
    "selb-reorder-bth-tags": ([0, 1, 2, 4, 7, 8, 9, 10, 3, 6, 11, 13, 14, 15, 5, 16, 18, 12, 19, 17, 20, 21, 22],
                              {3, 5, 6, 12, 17}, [23, 5, 4, 0, 0, 0, 0, 0]),
    "selb-reorder-bth-ipv6": ([0, 1, 3, 4, 5, 8, 2, 6, 9, 10, 11, 12, 7, 14, 15, 13, 16, 17, 18, 19],
                              {2, 6, 7, 13}, [20, 4, 3, 0, 0, 0, 0, 0])}


@pytest.mark.parametrize("name", TESTS_REORDER_FORMS)
def test_selb_reorder_forms_stored_files(name):
    """packets_out.pcap, test.json's counters and commands.txt are what this file re-derives from packets_in.pcap,
    and the order and counters are the hand-worked ones; lbpipe's parser golden model (sim/packet/parser.py) finds
    DATA in exactly the frames read as DATA here, with the same destination QP and PSN; each flow's PSNs leave in
    sequence; the flows have distinct indices; lbpipe/p4.py's classes (what `lbpipe p4 test` compares by) are this
    file's flows."""
    test, out, info, stats = _selb_reorder_form_expected(name)
    order, held, hand_stats = REORDER_FORMS[name]
    assert test["commands"] == p4.selb_reorder_commands(test["params"])
    assert out == [test["frames"][i] for i in order] == test["expected"]
    assert stats == hand_stats == json.loads((test["dir"] / "test.json").read_text())["stats"]
    assert stats[1] == len(held)
    for i, frame in enumerate(test["frames"]):
        meta = parse(frame)
        assert (meta["kind"] == PacketKind.DATA.value) == (info[frame][0] is not None), f"frame {i}"
        if info[frame][0] is not None:
            key = _selb_reorder_form_item(frame)[0]
            half = (len(key) - 3) // 2
            assert (meta["src_ip"], meta["dst_ip"], meta["dqpn"], meta["psn"]) == (
                int.from_bytes(key[:half], "big"), int.from_bytes(key[half:-3], "big"),
                int.from_bytes(key[-3:], "big"), info[frame][1]), f"frame {i}"
    flows = {}
    for f in out:
        if info[f][0] is not None:
            flows.setdefault(info[f][0], []).append(info[f][1])
    assert all(psns == list(range(len(psns))) for psns in flows.values()), flows
    assert len(flows) == 4
    assert p4.selb_reorder_classes(test["frames"], test["params"]["n_flows"]) == [info[f][0] for f in test["frames"]]


@pytest.mark.parametrize("name", TESTS_REORDER_FORMS)
def test_selb_reorder_forms_bmv2(name, tools, compiled):
    """bmv2 runs selb_reorder.p4 on tagged IPv4 and on IPv6 RoCEv2 frames marked in the BTH: every frame leaves
    unchanged, each flow's in the golden (and hand-worked) order, so its PSNs in sequence, the frames the program
    does not take in their arrival order; the counters are the golden model's, no release record lost; and `lbpipe p4
    test`'s comparison (lbpipe/p4.py compare) accepts the output."""
    test, expected, info, stats = _selb_reorder_form_expected(name)
    out, text = p4.run_switch(compiled[P4 / "selb_reorder.p4"], test["frames"], test["commands"], tools=tools,
                              expect=len(expected), after=["register_read r_stats"])
    assert len(out) == len(expected), f"{len(out)} frames out of bmv2, {len(expected)} expected"
    assert sorted(out) == sorted(expected), "bmv2 sent other frames than came in"
    for c in {info[f][0] for f in expected}:
        got = [test["frames"].index(f) for f in out if info[f][0] == c]
        want = [test["frames"].index(f) for f in expected if info[f][0] == c]
        assert got == want, f"flow {c}: left as frames {got}, golden {want}"
    counters = [int(v) for v in next(line for line in text.splitlines() if "r_stats=" in line).split("=")[1]
                .split(",")]
    assert counters[:8] == stats == REORDER_FORMS[name][2] and counters[10] == 0, counters
    assert counters[8] > 0, "held packets circulate"
    assert p4.compare("selb-reorder", test["params"], [], test["expected"], out) is None
