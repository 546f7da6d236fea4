"""A synchronous FIFO whose stream ports carry a layout.

``amaranth.lib.fifo`` FIFOs carry plain-width data; blocks pass metadata items with a ``data.StructLayout``, so this
wraps ``SyncFIFOBuffered`` with ``stream.Signature(shape)`` ports on both sides (valid/ready/payload, the stream rule
that ``valid`` never waits on ``ready`` holds on the output).
"""

from amaranth import Module, Shape
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFIFO"]


class StreamFIFO(wiring.Component):
    """``depth`` items of ``shape`` between a stream input ``i`` and a stream output ``o``.

    Parameters
    ----------
    shape : shape-like
        Payload shape (for example a ``data.StructLayout``).
    depth : int
        Capacity in items, at least 1. The output is registered (``SyncFIFOBuffered``): an item written into an
        empty FIFO is offered one cycle later.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    level : Out(range(depth + 1))
        Items held.
    """

    def __init__(self, *, shape, depth):
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise TypeError(f"depth must be an integer, not {depth!r}")
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        self._shape = shape
        self._depth = depth
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self._shape).width
        m.submodules.fifo = q = fifo.SyncFIFOBuffered(width=width, depth=self._depth)
        m.d.comb += [
            q.w_data.eq(self.i.payload.as_value() if hasattr(self.i.payload, "as_value") else self.i.payload),
            q.w_en.eq(self.i.valid),
            self.i.ready.eq(q.w_rdy),
            self.o.payload.eq(q.r_data),
            self.o.valid.eq(q.r_rdy),
            q.r_en.eq(self.o.ready),
            self.level.eq(q.level),
        ]
        return m
