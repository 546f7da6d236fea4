
import pytest
from amaranth.lib import data

from lbpipe.blocks import BLOCKS, get_block, parse_params
from lbpipe.engine import run_golden
from lbpipe.trace import TraceError, pack, read_events, unpack

LAYOUT = data.StructLayout({"a": 3, "b": 8, "c": 1})


def test_pack_unpack_roundtrip():
    word = pack(LAYOUT, {"a": 5, "b": 0xA5, "c": 1})
    assert word == 5 | (0xA5 << 3) | (1 << 11)
    assert unpack(LAYOUT, word) == {"a": 5, "b": 0xA5, "c": 1}
    assert pack(LAYOUT, {}) == 0


@pytest.mark.parametrize("values", [{"a": 8}, {"b": -1}, {"zz": 1}])
def test_pack_rejects(values):
    with pytest.raises(TraceError):
        pack(LAYOUT, values)


def test_read_events_checks_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"ctl": {"table": 0}}\n# comment\n\n{"item": {"a": 1}, "t": 5}\n')
    assert read_events(path) == [{"ctl": {"table": 0}}, {"item": {"a": 1}, "t": 5}]
    path.write_text('{"ctl": {}, "item": {}}\n')
    with pytest.raises(TraceError):
        read_events(path)
    path.write_text("not json\n")
    with pytest.raises(TraceError):
        read_events(path)


def test_golden_engine_rejects_values_the_hardware_cannot_carry():
    with pytest.raises(TraceError):
        run_golden("themis-d", {"n_qps": 4}, [{"item": {"qp": 4, "psn": 1 << 24}}])


def test_params():
    block = get_block("themis-d")
    assert parse_params(block, ["n_qps=0x10", "n_paths=3"]) == {"n_qps": 16, "n_paths": 3}
    with pytest.raises(ValueError):
        parse_params(block, ["nope=1"])
    with pytest.raises(ValueError):
        parse_params(block, ["n_qps=many"])
    with pytest.raises(ValueError):
        parse_params(get_block("themis-s"), ["mode=mesh"])
    with pytest.raises(KeyError):
        get_block("no-such-block")


def test_every_block_is_complete():
    """Each block has its five parts: golden model, RTL, cocotb testbench, synthesis entry, datasheet."""
    import importlib
    import pathlib
    root = pathlib.Path(__file__).resolve().parent.parent
    for block in BLOCKS.values():
        params = block.defaults()
        module = importlib.import_module(block.tb_module)
        assert (root / block.doc).exists()
        if not block.is_meta:
            # Packet I/O stages: a golden function, a component with a latency, their own cocotb tests.
            golden_module, golden_name = block.golden_ref.split(":")
            assert callable(getattr(importlib.import_module(golden_module), golden_name))
            component = block.build(**params)
            component._MustUse__silence = True
            assert component.latency >= 1
            assert hasattr(module, "reset_mid_traffic")    # its own cocotb tests, reset among them
            continue
        model = block.golden(**params)
        assert callable(model.process) and callable(model.control) and callable(model.reset)
        _, _, _, component = block.layouts(params)
        assert component.latency >= 1
        assert hasattr(module, "trace") and hasattr(module, "reset_mid_traffic")
        assert block.paper
