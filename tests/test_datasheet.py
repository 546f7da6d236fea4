"""The datasheets' timing figures, pinned: a change of latency or logic depth must change the datasheet on purpose.

The numbers below are transcribed from the datasheets (docs/themis.md, docs/packet_io.md, docs/qp_classifier.md),
not read from the RTL. The cocotb harness measures every unthrottled run's latency against the block's ``latency``
attribute, so pinning that attribute here pins what the simulation measures to the datasheet.
"""

import os

import pytest

from lbpipe.blocks import BLOCKS

#: Latency in cycles, as each datasheet states it.
DATASHEET_LATENCY = {
    "themis-s": 5,          # docs/themis.md: "5 cycles"
    "themis-d": 5,          # docs/themis.md: "5 cycles"
    "qp-classifier": 6,     # docs/qp_classifier.md: "latency 6"
    "parser": 7,            # docs/packet_io.md: "7 cycles after the frame's last beat"
    "deparser": 28,         # docs/packet_io.md: "28 cycles from a frame's action to its first beat out"
    "themis-s-wire": 41,    # docs/packet_io.md: "cut-through: 41 cycles from a frame's first beat in to ..."
    "compensator": 1,       # docs/packet_io.md: "1 cycle from the frame buffer to m_axis"
    "laps-editor": 11,      # docs/packet_io.md: "11 stages from the frame buffer to m_axis"
    "themis-d-wire": 20,    # docs/packet_io.md: "20 cycles from a data frame's last beat to its first beat out"
    "laps-pst": 6,          # docs/laps_pst.md: "6 cycles"
    "laps-pit": 5,          # docs/laps_pit.md: "5 cycles"
    "laps-softmax": 19,     # docs/laps_softmax.md: "19 cycles" (16 + ceil(log2 K) at K = 8)
    "laps-aimd": 8,         # docs/laps_aimd.md: "8 cycles"
    "laps-pacer": 11,       # docs/laps_pacer.md: "11 cycles"
    "laps-loss": 13,        # docs/laps_loss.md: "13 cycles"
    "pro-rr": 5,            # docs/pro_rr.md: "5 cycles"
    "pro-ooo": 8,           # docs/pro_ooo.md: "8 cycles"
    "pro-tx-wire": 47,      # docs/pro_wire.md: "47 cycles (cut-through ...)" first beat in to first beat out
    "pro-nak": 8,           # docs/pro_rx_wire.md: "8 cycles from a NACK event to its frame on m_axis"
    "laps-tx-wire": 51,     # docs/laps_tx_wire.md: "51 cycles from a one-beat frame's beat in to its first beat out"
    "pro-rx-wire": 1,       # docs/pro_rx_wire.md: "1 cycle first beat in to first beat out"
    "laps-rx-wire": 16,     # docs/laps_rx_wire.md: "16 cycles from a data frame's first beat in to its ACK's"
    "flb-route": 7,         # docs/flb_route.md: "7 cycles"
    "flb-owd": 4,           # docs/flb_owd.md: "4 cycles"
    "flb-cnm": 6,           # docs/flb_cnm.md: "6 cycles"
    "flb-isolate": 6,       # docs/flb_isolate.md: "6 cycles"
    "flb-prevhop": 5,       # docs/flb_prevhop.md: "5 cycles"
    "selb-cluster": 3,      # docs/selb_cluster.md: "3 cycles"
    "selb-reroute": 7,      # docs/selb_reroute.md: "7 cycles"
    "selb-reorder": 3,      # docs/selb_reorder.md: "3 cycles"
    "selb-tx-wire": 51,     # docs/selb_tx_wire.md: "51 cycles (cut-through ...)" first beat in to first beat out
    "flb-tx-wire": 58,      # docs/flb_tx_wire.md: "58 cycles (cut-through ...)" first beat in to first beat out
    "flb-rx-wire": 17,      # docs/flb_rx_wire.md: "17 cycles first beat in to first beat out for a sample"
}

#: Logic levels on the deepest path at the defaults (Yosys synth_xilinx -family xcup), as each datasheet states it.
DATASHEET_LEVELS = {
    "themis-s": 4, "themis-d": 6, "qp-classifier": 5, "parser": 5, "deparser": 6, "compensator": 4,
    "laps-editor": 5, "themis-s-wire": 6, "themis-d-wire": 6,
    "laps-pst": 4, "laps-pit": 6, "laps-softmax": 4,
    "laps-aimd": 6,
    "laps-pacer": 6,
    "laps-loss": 5,         # docs/laps_loss.md: 5 core, 6 top
    "pro-rr": 5,
    "pro-ooo": 6,
    "pro-nak": 5,
    "pro-tx-wire": 6,
    "pro-rx-wire": 6,
    "laps-rx-wire": 6,
    "laps-tx-wire": 6,      # docs/laps_tx_wire.md: 6 core (stamps written from registers, a command register per stage)
    "flb-route": 6,         # docs/flb_route.md: 6, core and top
    "flb-owd": 4,           # docs/flb_owd.md: 4, core and top
    "flb-cnm": 6,           # docs/flb_cnm.md: 6, core and top
    "flb-isolate": 6,       # docs/flb_isolate.md: 6, core and top
    "flb-prevhop": 5,       # docs/flb_prevhop.md: 5, core and top
    "selb-cluster": 5,      # docs/selb_cluster.md: 5, core and top
    "selb-reroute": 6,      # docs/selb_reroute.md: 6 core, 5 top
    "selb-reorder": 5,      # docs/selb_reorder.md: 5, core and top
    "selb-tx-wire": 6,      # docs/selb_tx_wire.md: 6, core and top
    "flb-tx-wire": 6,       # docs/flb_tx_wire.md: 6, core and top
    "flb-rx-wire": 6,       # docs/flb_rx_wire.md: 6, core and top
}


def test_every_block_has_pinned_figures():
    assert set(DATASHEET_LEVELS) == set(BLOCKS)
    assert set(DATASHEET_LATENCY) <= set(BLOCKS)


@pytest.mark.parametrize("name", sorted(DATASHEET_LATENCY))
def test_latency_is_the_datasheets(name):
    block = BLOCKS[name]
    component = block.check(block.defaults())
    assert component.latency == DATASHEET_LATENCY[name], (
        f"{name}: latency {component.latency}, the datasheet says {DATASHEET_LATENCY[name]}: change both")


#: Synthesis at the defaults takes under a minute for the smaller blocks and several minutes to a quarter of an hour
#: on one core for the large pipelines (9,000 to 37,000 LUTs), about two hours for all (estimated): the synthesis
#: profile (LBPIPE_SYNTH=1), not CI's. ``lbpipe synth`` synthesizes the same designs in ``./run main`` and exits
#: non-zero when one is over the budget of 6 levels.
@pytest.mark.synthesis
@pytest.mark.parametrize("name", sorted(DATASHEET_LEVELS))
def test_logic_levels_are_the_datasheets(name, tmp_path):
    """Synthesis at the defaults: the logic levels (core and top) are the datasheet's."""
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from lbpipe.synth import synthesize
    block = BLOCKS[name]
    report = synthesize(block.build(**block.defaults()), name=name.replace("-", "_"), workdir=tmp_path / name,
                        nolutram=block.synth_nolutram, wrapped=False)
    assert report["logic_levels"] == DATASHEET_LEVELS[name], (
        f"{name}: {report['logic_levels']} levels, the datasheet says {DATASHEET_LEVELS[name]}: "
        f"{report.get('critical_path')}")


def test_themis_d_hold_cycles_are_the_datasheets():
    """docs/themis.md: a NACK with a flow-table hit holds the read-modify-write stage ``scanned + 8`` cycles (3 when
    its queue is empty); every other item 1. The harness checks the RTL cycle by cycle against the golden model's
    ``cycles``, so pinning ``cycles`` here to the datasheet's formula pins the RTL's timing to it."""
    from lbpipe.sim.themis.themis_d import ThemisD
    model = ThemisD(n_qps=4, queue_depth=8, n_paths=4, entry_bits=8)
    model.control({"table": 0, "index": 1, "data": 0})
    data, nack = 1, 3            # PacketKind values, as the parser datasheet numbers them
    seen = []
    for psn in (10, 12, 11, 13, 14):
        seen.append(model.process({"kind": data, "qp_hit": 1, "qp": 1, "psn": psn}))
    seen.append(model.process({"kind": nack, "qp_hit": 1, "qp": 1, "psn": 11}))
    seen.append(model.process({"kind": nack, "qp_hit": 1, "qp": 0, "psn": 11}))    # idle QP: the scan state only
    seen.append(model.process({"kind": nack, "qp_hit": 0, "qp": 1, "psn": 11}))    # no hit: one cycle
    cycles = [model.cycles(out) for out in seen]
    nack_out = seen[5]
    assert nack_out["scanned"] > 0
    assert cycles == [1] * 5 + [nack_out["scanned"] + 8, 3, 1]


#: Datasheets of the shared primitives' proofs (``lib-*`` rows of ``PROOFS``, which have no registry entry): the
#: ring's pointers are those of Themis-D's PSN queues, the CRC is the packet I/O layer's, the AXI4-Lite bridge is
#: the top level's (docs/architecture.md). A ``lib-*`` block must be listed here.
LIB_DATASHEETS = {"lib-ring": "docs/themis.md", "lib-crc": "docs/packet_io.md", "lib-axil": "docs/architecture.md"}


def _formal_section(text):
    """The datasheet's "Formal proofs" section: from its heading to the next heading of the same or a higher level."""
    import re
    head = re.search(r"^(#+) Formal proofs\s*$", text, re.M)
    if head is None:
        return None
    level = len(head[1])
    rest = text[head.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


def _proof_datasheets():
    """``{datasheet: {block: [property, ...]}}`` for every block with proofs that has a datasheet."""
    from lbpipe.prove import all_proofs
    sheets = {}
    for proof in all_proofs():
        doc = BLOCKS[proof.block].doc if proof.block in BLOCKS else LIB_DATASHEETS.get(proof.block)
        if doc:
            sheets.setdefault(doc, {}).setdefault(proof.block, []).append(proof.prop)
    return sheets


@pytest.mark.parametrize("doc", sorted(_proof_datasheets()))
def test_datasheet_lists_its_proofs(doc):
    """Each datasheet of a block with proofs has a "Formal proofs" section naming every property of ``PROOFS`` for
    its blocks (as written there), and links docs/formal.md: a proof added, renamed or dropped changes the
    datasheet on purpose."""
    import pathlib
    text = (pathlib.Path(__file__).resolve().parent.parent / doc).read_text()
    section = _formal_section(text)
    assert section is not None, f"{doc}: no 'Formal proofs' section"
    assert "formal.md" in section, f"{doc}: the 'Formal proofs' section does not link docs/formal.md"
    missing = [f"{block}: {prop}" for block, props in _proof_datasheets()[doc].items() for prop in props
               if f"`{prop}`" not in section]
    assert not missing, f"{doc}: the 'Formal proofs' section does not name {missing}"


def test_every_proven_primitive_has_a_datasheet():
    """A ``lib-*`` block with proofs is mapped to the datasheet that carries its proof table (no registry entry
    names it), so a new primitive's proofs cannot stay out of the datasheets."""
    from lbpipe.prove import all_proofs
    unmapped = sorted({p.block for p in all_proofs() if p.block not in BLOCKS and p.block not in LIB_DATASHEETS})
    assert not unmapped, f"proofs of {unmapped} have no datasheet in LIB_DATASHEETS"
