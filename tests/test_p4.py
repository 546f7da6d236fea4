"""P4 programs (p4/) on bmv2 against lbpipe's golden models.

Each test directory p4/sim/test-<name>/ holds lbpipe control commands, the simple_switch_CLI commands made from them,
input frames and the expected output frames. The tests without the toolchain check that those files are what the
golden model and lbpipe/p4.py derive; the others compile the program with p4c-bm2-ss, run simple_switch on the input
pcap with the commands loaded, and compare its output byte for byte with the golden model's. Independently of both,
every frame that came in with a valid ICRC must leave with one (tb/lib/packets.py ``icrc``, zlib) and every sprayed
frame's new UDP source port is re-derived here from the control commands and Equation 1.

The toolchain is found by :func:`lbpipe.p4.find_toolchain` (PATH, ~/.cache/lbpipe-p4, or installed there from
../shared/tools/p4); without it these tests skip with one line saying why.
"""

import importlib.util
import os
import pathlib
import struct
import subprocess
import sys

import pytest

from lbpipe import p4
from lbpipe.sim.themis.wire import ThemisSWireModel
from lbpipe.tb.lib import packets as pk
from lbpipe.trace import read_events, read_pcap

P4 = pathlib.Path(__file__).resolve().parent.parent / "p4"
TESTS = sorted(d.name[5:] for d in (P4 / "sim").glob("test-*"))


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
        "table_add pathmap set_delta 0 => 65535",
        "table_add pathmap set_delta 2 => 6",
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
        p4.replay("themis-d-wire", {}, [], [])
    for params in ({"cut_through": False}, {"fcs": True}):
        with pytest.raises(ValueError, match="cut_through=true and fcs=false"):
            p4.replay("themis-s-wire", dict(params, n_paths=8), [], [])
    done = subprocess.run([sys.executable, "-m", "lbpipe.cli", "replay", "themis-s", "x.jsonl", "--engine", "bmv2"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr


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
