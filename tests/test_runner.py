"""The cocotb runner's Verilog: every combinational process runs after time zero (see ``_kick_processes``)."""

from amaranth.back import verilog

from lbpipe.tb.lib.runner import _kick_processes, run_cocotb, write_verilog
from lbpipe.tb.lib.test_runner import StateDecoded


def test_kick_adds_one_initial_per_module():
    text = verilog.convert(StateDecoded(), name="state_decoded")
    kicked = _kick_processes(text)
    assert text.count("dump_module") > 0
    assert kicked.count("initial #0 ") == text.count("  reg \\$auto$verilog_backend")
    assert kicked.replace("\n", "").count("= 1;") >= 1


def test_state_decoded_output_is_not_x():
    path = write_verilog(StateDecoded(), name="state_decoded")
    run_cocotb(path, toplevel="state_decoded", test_module="lbpipe.tb.lib.test_runner")


def test_cached_verilog_is_made_once_per_source_state(tmp_path, monkeypatch):
    """A replay's design is generated once; a change in the hardware sources (a new digest) makes it again, and a
    design whose files were pruned is made again rather than returned missing."""
    from lbpipe.tb.lib import runner
    monkeypatch.setattr(runner, "BUILD_ROOT", tmp_path)
    made = []

    def make():
        made.append(1)
        return write_verilog(StateDecoded(), name="state_decoded", directory=tmp_path / f"design{len(made)}")
    key = {"block": "state-decoded", "params": {}}
    first = runner.cached_verilog(key, make)
    assert runner.cached_verilog(key, make) == first and len(made) == 1
    assert runner.cached_verilog({"block": "state-decoded", "params": {"n": 1}}, make) != first and len(made) == 2
    monkeypatch.setattr(runner, "source_digest", lambda: "edited")
    assert runner.cached_verilog(key, make) != first and len(made) == 3
    monkeypatch.undo()
    monkeypatch.setattr(runner, "BUILD_ROOT", tmp_path)
    import shutil
    shutil.rmtree(first.parent)
    assert runner.cached_verilog(key, make).exists() and len(made) == 4


def test_source_digest_follows_hardware_sources(tmp_path, monkeypatch):
    """The digest covers the hardware packages: a byte changed in an hdl/ file changes it."""
    import pathlib

    import lbpipe.hdl.lib
    from lbpipe.tb.lib import runner
    before = runner.source_digest()
    target = pathlib.Path(lbpipe.hdl.lib.__file__)
    real = pathlib.Path.read_bytes

    def edited(path):
        data = real(path)
        return data + b"#" if path == target else data
    monkeypatch.setattr(pathlib.Path, "read_bytes", edited)
    assert runner.source_digest() != before
