"""Byte edits on frames in flight, joined to one entry per frame: the last stage of the wires that mark or clear
fields under the ICRC's mask (the UDP checksum, BTH byte 4), which need no CRC update and so no deparser.

:func:`edit_beats` takes the beats of frames from a stream and a stream of entries, one per frame in frame order,
and hands the beats on to an AXI4-Stream through a register slice; a frame's first beat waits for its entry, the
entry is taken with the frame's last beat, and every beat passes through ``edit``, which sees the beat's index in
its frame (0, 1, 2, then 3 for every later beat) and the entry. The wires using it: ``selb-tx-wire`` (the tail mark
and epoch), ``flb-rx-wire`` (FLB's marks cleared), ``flb-tx-wire`` (FLB's marks written).
"""

from amaranth import Mux, Signal
from amaranth.lib import data, stream

from lbpipe.hdl.lib.stage import register_slice

__all__ = ["BEAT", "edit_beats", "lane_of"]

#: One beat of a 512-bit AXI4-Stream with a 1-bit ``tuser``, as a payload.
BEAT = data.StructLayout({"tdata": 512, "tkeep": 64, "tlast": 1, "tuser": 1})


def lane_of(index, pos):
    """Whether byte ``pos`` of the frame (a 9-bit offset or wider) is in the beat of ``index`` (from
    :func:`edit_beats`) and, if so, its lane: ``(hit, lane)``."""
    return index == pos[6:], pos[:6]


def edit_beats(m, name, valid, beat, ready, entries, edit, dst):
    """Beats (``valid``, ``beat`` a :data:`BEAT` value; ``ready`` is driven here) to the AXI4-Stream ``dst``
    through a register slice, each frame's beats after its entry from the stream ``entries``; ``edit(index, entry,
    tdata)`` returns the beat's new ``tdata`` (``index`` 2 bits, saturating at 3). One beat per clock while ``dst``
    is ready and entries come in time."""
    index = Signal(2, name=f"{name}_beat")
    first = index == 0
    edited = Signal(BEAT, name=f"{name}_edited")
    m.d.comb += [edited.tdata.eq(edit(index, entries.payload, beat.tdata)), edited.tkeep.eq(beat.tkeep),
                 edited.tlast.eq(beat.tlast), edited.tuser.eq(beat.tuser)]
    sink = stream.Signature(BEAT).flip().create()
    offer, taken = Signal(name=f"{name}_offer"), Signal(name=f"{name}_taken")
    slice_ready = Signal(name=f"{name}_ready")
    go = ~first | entries.valid
    m.d.comb += offer.eq(valid & go)
    register_slice(m, f"{name}_out", offer, edited, slice_ready, sink)
    m.d.comb += [ready.eq(slice_ready & go), taken.eq(valid & ready), entries.ready.eq(taken & beat.tlast),
                 dst.tdata.eq(sink.payload.tdata), dst.tkeep.eq(sink.payload.tkeep),
                 dst.tlast.eq(sink.payload.tlast), dst.tuser.eq(sink.payload.tuser),
                 dst.tvalid.eq(sink.valid), sink.ready.eq(dst.tready)]
    with m.If(taken):
        m.d.sync += index.eq(Mux(beat.tlast, 0, Mux(index == 3, 3, index + 1)))
