"""Ring buffers: the queue primitive shared by lbpipe blocks.

Blocks keep many small rings (a PSN queue per QP, a send record per path, a reorder buffer per flow) in one memory,
with each ring's pointers in a per-flow table entry. This module gives the pieces:

* :func:`RingState` is the pointer layout (head, tail, count) for a ring of ``depth`` entries; :func:`ring_push` and
  :func:`ring_drop` are its updates, for any depth (not only powers of two).
* :class:`RingMemory` holds ``n_rings`` rings of ``depth`` entries, addressed by a ring's base (``ring x depth``,
  from :func:`ring_base`, which a pipeline can compute a stage early) plus a position.

The golden-model twin is :class:`lbpipe.sim.lib.ring.Ring`.
"""

from amaranth import Module, Mux
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RingState", "ring_push", "ring_drop", "ring_base", "wrap_inc", "wrap_add", "mul_const", "RingMemory"]


def _pos_bits(depth):
    return max(1, (depth - 1).bit_length())


def RingState(depth):
    """Pointers of one ring of ``depth`` entries: ``head`` (oldest entry), ``tail`` (next free slot), ``count``."""
    return data.StructLayout({
        "head":  _pos_bits(depth),
        "tail":  _pos_bits(depth),
        "count": depth.bit_length(),
    })


def wrap_inc(value, depth):
    """``(value + 1) mod depth`` for ``value < depth``."""
    return Mux(value == depth - 1, 0, value + 1)


def wrap_add(a, b, depth):
    """``(a + b) mod depth`` for ``a, b < depth``."""
    total = a + b
    return Mux(total >= depth, total - depth, total)


def mul_const(value, constant):
    """``value * constant`` as shifts and adds, so synthesis spends no DSP on a constant multiply."""
    terms = [value << k for k in range(constant.bit_length()) if (constant >> k) & 1]
    if not terms:
        return value & 0
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def ring_base(ring, depth):
    """Address of entry 0 of ``ring`` in a :class:`RingMemory` of ``depth``-entry rings."""
    return mul_const(ring, depth)


def ring_push(state, depth, *, overwrite=True):
    """The state after writing one entry at ``state.tail``.

    Returns ``(new_state, accepted)`` where ``new_state`` is a dict of field expressions. A full ring drops its
    oldest entry when ``overwrite`` (``accepted`` is always 1), and otherwise refuses the push (state unchanged,
    ``accepted`` 0) so the caller must not write the entry.
    """
    full = state.count == depth
    if overwrite:
        return {
            "head":  Mux(full, wrap_inc(state.head, depth), state.head),
            "tail":  wrap_inc(state.tail, depth),
            "count": Mux(full, state.count, state.count + 1),
        }, 1
    return {
        "head":  state.head,
        "tail":  Mux(full, state.tail, wrap_inc(state.tail, depth)),
        "count": Mux(full, state.count, state.count + 1),
    }, ~full


def ring_drop(state, n, depth):
    """The state after dropping the ``n`` oldest entries (``n <= count``)."""
    return {
        "head":  wrap_add(state.head, n, depth),
        "tail":  state.tail,
        "count": state.count - n,
    }


class RingMemory(wiring.Component):
    """``n_rings`` rings of ``depth`` entries of ``shape`` in one memory, one write and one read port.

    Addresses are ``base + pos`` with ``base`` from :func:`ring_base`. The read data is registered (the memory may
    span many block RAMs and their output multiplexer is deep): it appears two cycles after the read address.

    Parameters
    ----------
    n_rings : int
    depth : int
        Entries per ring; any value from 1.
    shape : shape-like
        Entry shape.

    Members
    -------
    wr_base, wr_pos, wr_data, wr_en : In
        Write ``wr_data`` at entry ``wr_pos`` of the ring at ``wr_base`` when ``wr_en``.
    rd_base, rd_pos : In
        Read address; sampled every cycle.
    rd_data : Out
        The entry read two cycles earlier.
    """

    read_latency = 2

    def __init__(self, *, n_rings, depth, shape):
        for name, value in (("n_rings", n_rings), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self._n_rings = n_rings
        self._depth = depth
        self._shape = shape
        size = n_rings * depth
        super().__init__({
            "wr_base": In(range(max(2, size))), "wr_pos": In(_pos_bits(depth)), "wr_data": In(shape),
            "wr_en": In(1),
            "rd_base": In(range(max(2, size))), "rd_pos": In(_pos_bits(depth)), "rd_data": Out(shape),
        })

    @property
    def size(self):
        return self._n_rings * self._depth

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self._shape, depth=self.size, init=[])
        wr = mem.write_port()
        rd = mem.read_port()
        m.d.comb += [
            wr.addr.eq(self.wr_base + self.wr_pos), wr.data.eq(self.wr_data), wr.en.eq(self.wr_en),
            rd.addr.eq(self.rd_base + self.rd_pos),
        ]
        m.d.sync += self.rd_data.eq(rd.data)
        return m
