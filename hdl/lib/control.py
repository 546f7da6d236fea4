"""Control-port conventions shared by every lbpipe block.

A block's tables are written through one ``ctl`` port: a stream of :func:`ControlWrite` commands. The command
names a table (block-specific number), an index into it and up to 64 bits of data; what the data means is given in
the block's datasheet. At the top level the stream is driven by :class:`lbpipe.hdl.lib.axil.ControlBridge` from an
AXI4-Lite register file, so a host writes TABLE, INDEX, DATA_LO, DATA_HI and then COMMIT.

Blocks serialize control commands with packet items at their pipeline entry, so a command takes effect between two
packets and never races a packet's read-modify-write of the same entry.
"""

from amaranth import C
from amaranth.lib import data, stream

__all__ = ["check_int", "below", "CONTROL_TABLE_BITS", "CONTROL_INDEX_BITS", "CONTROL_DATA_BITS", "ControlWrite", "ControlSignature"]

CONTROL_TABLE_BITS = 8
CONTROL_INDEX_BITS = 24
CONTROL_DATA_BITS = 64


def below(value, limit):
    """``value < limit`` for an unsigned field and a constant ``limit``: constant true when the field cannot reach
    ``limit`` (a range check on a field that any of its values passes)."""
    if limit >= 1 << len(value):
        return C(1, 1)
    return value < limit


def check_int(name, value):
    """Raise ``TypeError`` unless ``value`` is an integer (``bool`` is not); shared by the parameter checks."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")


def ControlWrite():
    """Layout of one control command.

    Members
    -------
    table : unsigned(8)
        Block-specific table or operation number.
    index : unsigned(24)
        Entry index within the table.
    data : unsigned(64)
        Entry contents, little-endian packed as the block's datasheet describes.
    """
    return data.StructLayout({
        "table": CONTROL_TABLE_BITS,
        "index": CONTROL_INDEX_BITS,
        "data":  CONTROL_DATA_BITS,
    })


def ControlSignature():
    """Stream signature of a block's control port (the block is the sink: ``In(ControlSignature())``)."""
    return stream.Signature(ControlWrite())
