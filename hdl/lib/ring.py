"""Ring buffers: the queue primitive shared by lbpipe blocks.

Blocks keep many small rings (a PSN queue per QP, a send record per path, a reorder buffer per flow) in one memory,
with each ring's pointers in a per-flow table entry. This module gives the pieces:

* :func:`RingState` is the pointer layout (head, tail, count) for a ring of ``depth`` entries; :func:`ring_push` and
  :func:`ring_drop` are its updates, for any depth (not only powers of two).
* :class:`RingMemory` holds ``n_rings`` rings of ``depth`` entries, addressed by a ring's base (``ring x depth``,
  from :func:`ring_base`, which a pipeline can compute a stage early) plus a position.

The golden-model twin is :class:`lbpipe.sim.lib.ring.Ring`.
"""

from amaranth import Module, Mux, Shape, Signal
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

    Addresses are ``base + pos`` with ``base`` from :func:`ring_base`. The memory is built as banks of at most one
    RAMB36 each (4,096 entries of up to 9 bits, 2,048 of up to 18, ...); each bank's read data goes straight into a
    register (which Vivado packs into the block RAM's output register), and the bank multiplexer is two registered
    stages (groups of 16 banks, then the groups: at most 3 to 4 logic levels each, for any size up to 65536 rings):
    the read data appears four cycles after the read address (``read_latency``). A read of the
    entry written in the same cycle returns the old entry. With ``write_register`` the write address (``wr_base +
    wr_pos``), data and enable are registered before the block RAMs, so the write lands a cycle later (a read issued
    in the cycle after the write also returns the old entry) and the address adder and bank decode are on separate
    register-to-register paths.

    Parameters
    ----------
    n_rings : int
    depth : int
        Entries per ring; any value from 1.
    shape : shape-like
        Entry shape.
    write_register : bool
        Register the write port before the memories (default ``False``).

    Members
    -------
    wr_base, wr_pos, wr_data, wr_en : In
        Write ``wr_data`` at entry ``wr_pos`` of the ring at ``wr_base`` when ``wr_en``.
    rd_base, rd_pos : In
        Read address; sampled every cycle.
    rd_data : Out
        The entry read ``read_latency`` cycles earlier.
    """

    read_latency = 4
    #: Banks per group in the first multiplexer stage.
    GROUP = 16

    def __init__(self, *, n_rings, depth, shape, write_register=False):
        for name, value in (("n_rings", n_rings), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self._n_rings = n_rings
        self._depth = depth
        self._shape = shape
        self._write_register = bool(write_register)
        size = n_rings * depth
        super().__init__({
            "wr_base": In(range(max(2, size))), "wr_pos": In(_pos_bits(depth)), "wr_data": In(shape),
            "wr_en": In(1),
            "rd_base": In(range(max(2, size))), "rd_pos": In(_pos_bits(depth)), "rd_data": Out(shape),
        })

    @property
    def size(self):
        return self._n_rings * self._depth

    @property
    def bank_depth(self):
        """Entries per bank: what one RAMB36 holds at this entry width (a power of two)."""
        width = Shape.cast(self._shape).width
        for depth, max_width in ((32768, 1), (16384, 2), (8192, 4), (4096, 9), (2048, 18), (1024, 36)):
            if width <= max_width:
                return depth
        return 512

    def elaborate(self, platform):
        m = Module()
        size, bank_depth = self.size, self.bank_depth
        n_banks = -(-size // bank_depth)
        low = max(1, (bank_depth - 1).bit_length())
        wr_addr = Signal(range(max(2, size)))
        rd_addr = Signal(range(max(2, size)))
        wr_data = Signal.like(self.wr_data)
        wr_en = Signal()
        m.d.comb += rd_addr.eq(self.rd_base + self.rd_pos)
        domain = m.d.sync if self._write_register else m.d.comb
        domain += [wr_addr.eq(self.wr_base + self.wr_pos), wr_data.eq(self.wr_data), wr_en.eq(self.wr_en)]
        bank_q = []
        for b in range(n_banks):
            depth = min(bank_depth, size - b * bank_depth)
            mem = memory.Memory(shape=self._shape, depth=depth, init=[])
            m.submodules[f"mem{b}" if n_banks > 1 else "mem"] = mem
            wr = mem.write_port()
            rd = mem.read_port()
            sel_wr = (wr_addr[low:] == b) if n_banks > 1 else 1
            m.d.comb += [
                wr.addr.eq(wr_addr[:low]), wr.data.eq(wr_data), wr.en.eq(wr_en & sel_wr),
                rd.addr.eq(rd_addr[:low]),
            ]
            q = Signal.like(self.rd_data, name=f"bank{b}_q")
            m.d.sync += q.eq(rd.data)
            bank_q.append(q)
        # The bank of the read, delayed to line up with the banks' registered data, then with the groups'.
        sel1 = Signal(range(max(2, n_banks)))
        sel2 = Signal.like(sel1)
        sel3 = Signal.like(sel1)
        m.d.sync += [sel1.eq(rd_addr[low:] if n_banks > 1 else 0), sel2.eq(sel1), sel3.eq(sel2)]
        g = self.GROUP
        group_q = []
        for k in range(-(-n_banks // g)):
            q = Signal.like(self.rd_data, name=f"group{k}_q")
            members = bank_q[k * g:(k + 1) * g]
            with m.Switch(sel2 % g if len(members) > 1 else 0):
                for i, bank in enumerate(members):
                    with m.Case(i):
                        m.d.sync += q.eq(bank)
            group_q.append(q)
        with m.Switch(sel3 // g if len(group_q) > 1 else 0):
            for k, q in enumerate(group_q):
                with m.Case(k):
                    m.d.sync += self.rd_data.eq(q)
        return m
