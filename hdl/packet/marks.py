"""Byte edits on frames in flight, joined to one entry per frame: the last stage of the wires that mark or clear
fields under the ICRC's mask (the UDP checksum, BTH byte 4), which need no CRC update and so no deparser.

:func:`edit_beats` takes the beats of frames from a stream and a stream of entries, one per frame in frame order,
and hands the beats on to an AXI4-Stream through a register slice; a frame's first beat waits for its entry, the
entry is taken with the frame's last beat, and every beat passes through ``edit``, which sees the beat's index in
its frame (0, 1, 2, then 3 for every later beat) and the entry. The wires using it: ``selb-tx-wire`` (the tail mark
and epoch), ``flb-rx-wire`` (FLB's marks cleared), ``flb-tx-wire`` (FLB's marks written).

:func:`field_lanes` gives, for a field at a fixed offset from the L4 header, the byte lanes it can fall in and
when: the parser's L4 offset takes one of 13 values (:data:`L4_OFFSETS`), so an edit needs byte multiplexers only
in those lanes (about a fifth of the 64), not in every lane.
"""

from amaranth import Mux, Signal
from amaranth.lib import data, stream

from lbpipe.hdl.lib.stage import register_slice

__all__ = ["BEAT", "L4_OFFSETS", "edit_axis", "edit_beats", "field_lanes"]

#: One beat of a 512-bit AXI4-Stream with a 1-bit ``tuser``, as a payload.
BEAT = data.StructLayout({"tdata": 512, "tkeep": 64, "tlast": 1, "tuser": 1})

#: The L4 offsets the parser gives an IP frame (docs/packet_io.md): the IP header at 14, 18 or 22 (0 to 2 tags),
#: then IPv4 with 20 to 60 bytes of header, or IPv6's 40.
L4_OFFSETS = tuple(sorted({l3 + 4 * ihl for l3 in (14, 18, 22) for ihl in range(5, 16)}
                          | {l3 + 40 for l3 in (14, 18, 22)}))


def field_lanes(index, l4_off, offset, width=1):
    """``{lane: [(select, k), ...]}`` for a ``width``-byte field at ``l4_off + offset``: for every L4 offset the
    parser can give, each byte ``k`` of the field, the lane it falls in and ``select``, high in the beat of index
    ``index`` (from :func:`edit_beats`) that holds it when ``l4_off`` is that offset. Fields end before byte 192
    (the index saturates at 3)."""
    lanes = {}
    for l4 in L4_OFFSETS:
        at = l4_off == l4
        for k in range(width):
            pos = l4 + offset + k
            assert pos < 192, f"byte {pos} is past the beats edit_beats tells apart"
            lanes.setdefault(pos % 64, []).append((at & (index == pos // 64), k))
    return lanes


def edit_axis(m, name, src, entries, edit, dst):
    """:func:`edit_beats` from the AXI4-Stream ``src`` (a deparser's ``m_axis``) to ``dst``."""
    beat = Signal(BEAT, name=f"{name}_in")
    m.d.comb += [beat.tdata.eq(src.tdata), beat.tkeep.eq(src.tkeep), beat.tlast.eq(src.tlast),
                 beat.tuser.eq(src.tuser)]
    edit_beats(m, name, src.tvalid, beat, src.tready, entries, edit, dst)


def edit_beats(m, name, valid, beat, ready, entries, edit, dst):
    """Beats (``valid``, ``beat`` a :data:`BEAT` value; ``ready`` is driven here) to the AXI4-Stream ``dst``
    through a register slice, each frame's beats after its entry from the stream ``entries``; ``edit(index, entry,
    tdata)`` returns the beat's new ``tdata`` (``index`` 2 bits, saturating at 3). One beat per clock while ``dst``
    is ready and entries come in time."""
    index = Signal(2, name=f"{name}_beat")
    first = Signal(init=1, name=f"{name}_first")          # index == 0, in a flip-flop of its own
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
        m.d.sync += [index.eq(Mux(beat.tlast, 0, Mux(index == 3, 3, index + 1))), first.eq(beat.tlast)]
