"""A synchronous FIFO whose stream ports carry a layout.

``amaranth.lib.fifo`` FIFOs carry plain-width data; blocks pass metadata items with a ``data.StructLayout``, so this
wraps a buffered synchronous FIFO with ``stream.Signature(shape)`` ports on both sides (valid/ready/payload, the
stream rule that ``valid`` never waits on ``ready`` holds on the output).

Block RAM output register
-------------------------
A deep FIFO's storage lands in block RAM. ``SyncFIFOBuffered`` hands the RAM's read data straight to the consumer,
so every path out of the FIFO starts at an unregistered RAM read (about 1.5-2 ns of clock-to-out on a -2
UltraScale+ part instead of 0.3 ns; docs/architecture.md, "Synthesis report"). When the storage is deeper than
:data:`LUTRAM_DEPTH` entries (what a RAM64M column holds; shallower storage is LUTRAM, read in one level from the
address register), :class:`StreamFIFO` uses :class:`RegisteredReadFIFO` instead: the same ports and the same
cycle-by-cycle behaviour as ``SyncFIFOBuffered`` (``w_rdy``, ``r_rdy``, ``level`` and the data offered are equal on
every cycle for any input), with the RAM's read data going straight into a register that Vivado absorbs into the
RAM's output register (``DOA_REG``/``DOB_REG``). The price is registers: three slots and the output register of
the payload's width (the read-data register goes into the RAM), where ``SyncFIFOBuffered`` offers the RAM's own
output latch.
"""

from amaranth import Module, Mux, Shape, Signal
from amaranth.lib import fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFIFO", "RegisteredReadFIFO", "LUTRAM_DEPTH"]

#: Storage depth up to which Yosys maps a FIFO's memory to LUTRAM; deeper storage is block RAM.
LUTRAM_DEPTH = 64


class RegisteredReadFIFO(wiring.Component):
    """``SyncFIFOBuffered``'s behaviour with the storage's read data registered before any logic.

    Parameters
    ----------
    width : int
    depth : int
        At least 2. As in ``SyncFIFOBuffered``: ``depth - 1`` items wait behind the output register.

    Members
    -------
    w_data, w_en, w_rdy, r_data, r_en, r_rdy, level
        As ``amaranth.lib.fifo.SyncFIFOBuffered``.

    Structure
    ---------
    The bookkeeping (``inner_level``, ``r_rdy``, hence ``w_rdy``, ``r_rdy``, ``level``) is ``SyncFIFOBuffered``'s.
    The items behind the output register are held in order by three *slots* (registers) and the block RAM. A slot
    is reserved, in order, either by a write that finds the RAM holding nothing unfetched (the item goes straight
    into the slot, bypassing the RAM) or by a RAM read; a RAM read returns its data two cycles later through
    ``ram_q``, a register fed by the RAM's data and nothing else (the one Vivado packs into the RAM), and that data
    lands in its slot (or leaves directly from ``ram_q`` if it is already the head). Three slots cover the two
    cycles a RAM read is in flight, so the head is in a slot or in ``ram_q`` whenever the output register takes it,
    and the FIFO keeps one item per clock.
    """

    SLOTS = 3

    def __init__(self, *, width, depth):
        if depth < 2:
            raise ValueError(f"depth must be at least 2, not {depth}")
        self.width = width
        self.depth = depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        k = self.SLOTS
        inner_depth = self.depth - 1

        # SyncFIFOBuffered's bookkeeping, with "not empty" and "not full" kept in registers rather than compared
        # from the count each cycle (the comparisons move beside the count, off the handshake's path).
        inner_level = Signal(range(inner_depth + 1))
        inner_any = Signal()                      # inner_level != 0
        inner_room = Signal(init=1)               # inner_level != inner_depth
        do_write = Signal()
        do_inner_read = Signal()
        up, down = Signal(), Signal()
        m.d.comb += [
            self.w_rdy.eq(inner_room),
            do_write.eq(self.w_en & inner_room),
            do_inner_read.eq(inner_any & (~self.r_rdy | self.r_en)),
            self.level.eq(inner_level + self.r_rdy),
            up.eq(do_write & ~do_inner_read),
            down.eq(do_inner_read & ~do_write),
        ]
        with m.If(up):
            m.d.sync += [inner_level.eq(inner_level + 1), inner_any.eq(1),
                         inner_room.eq(inner_level != inner_depth - 1)]
        with m.If(down):
            m.d.sync += [inner_level.eq(inner_level - 1), inner_room.eq(1), inner_any.eq(inner_level != 1)]
        with m.If(do_inner_read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)

        # Storage: items not yet fetched into a slot.
        m.submodules.storage = storage = memory.Memory(shape=self.width, depth=inner_depth, init=[])
        wp, rp = storage.write_port(), storage.read_port(domain="sync")
        produce, consume = Signal(range(inner_depth)), Signal(range(inner_depth))
        unfetched = Signal(range(inner_depth + 1))
        unfetched_any = Signal()                  # unfetched != 0
        ram_q = Signal(self.width, reset_less=True)
        m.d.sync += ram_q.eq(rp.data)

        # Slots: a ring of k registers, reserved in order at ``slot_w``, read at ``slot_r``.
        slots = [Signal(self.width, name=f"slot{i}", reset_less=True) for i in range(k)]
        full = [Signal(name=f"slot{i}_full") for i in range(k)]
        reserved = Signal(range(k + 1))
        slot_w, slot_r = Signal(range(k)), Signal(range(k))
        # RAM reads in flight: read issued (data in the RAM's latch next cycle), then data in ram_q.
        fly1, fly2 = Signal(), Signal()
        fly1_slot, fly2_slot = Signal(range(k)), Signal(range(k))

        free = reserved != k
        bypass = Signal()
        issue = Signal()
        m.d.comb += [
            bypass.eq(do_write & ~unfetched_any & free),
            issue.eq(unfetched_any & free),
            wp.addr.eq(produce), wp.data.eq(self.w_data), wp.en.eq(do_write & ~bypass),
            rp.addr.eq(consume), rp.en.eq(issue),
        ]
        with m.If(wp.en):
            m.d.sync += produce.eq(Mux(produce == inner_depth - 1, 0, produce + 1))
        with m.If(issue):
            m.d.sync += consume.eq(Mux(consume == inner_depth - 1, 0, consume + 1))
        m.d.sync += unfetched.eq(unfetched + wp.en - issue)
        with m.If(wp.en & ~issue):
            m.d.sync += unfetched_any.eq(1)
        with m.If(issue & ~wp.en):
            m.d.sync += unfetched_any.eq(unfetched != 1)
        m.d.sync += reserved.eq(reserved + (bypass | issue) - do_inner_read)
        with m.If(bypass | issue):
            m.d.sync += slot_w.eq(Mux(slot_w == k - 1, 0, slot_w + 1))
        m.d.sync += [fly1.eq(issue), fly1_slot.eq(slot_w), fly2.eq(fly1), fly2_slot.eq(fly1_slot)]

        # The head is in its slot, or still in ram_q in the cycle its read lands.
        head_full = Signal()
        head = Signal(self.width)
        m.d.comb += head_full.eq(Mux(slot_r == 0, full[0], Mux(slot_r == 1, full[1], full[2])))
        m.d.comb += head.eq(Mux(head_full, Mux(slot_r == 0, slots[0], Mux(slot_r == 1, slots[1], slots[2])), ram_q))
        # Like the reference's RAM latch, the data offered is not reset: it holds the last item read.
        out_data = Signal(self.width, reset_less=True)
        m.d.comb += self.r_data.eq(out_data)
        with m.If(do_inner_read):
            m.d.sync += [out_data.eq(head), slot_r.eq(Mux(slot_r == k - 1, 0, slot_r + 1))]
        for i in range(k):
            with m.If(bypass & (slot_w == i)):
                m.d.sync += [slots[i].eq(self.w_data), full[i].eq(1)]
            with m.If(fly2 & (fly2_slot == i)):
                m.d.sync += [slots[i].eq(ram_q), full[i].eq(1)]
            with m.If(do_inner_read & (slot_r == i)):
                m.d.sync += full[i].eq(0)
        return m


class StreamFIFO(wiring.Component):
    """``depth`` items of ``shape`` between a stream input ``i`` and a stream output ``o``.

    Parameters
    ----------
    shape : shape-like
        Payload shape (for example a ``data.StructLayout``).
    depth : int
        Capacity in items, at least 1. The output is registered (``SyncFIFOBuffered``'s timing): an item written
        into an empty FIFO is offered two cycles later. Storage deeper than :data:`LUTRAM_DEPTH` (``depth - 1``
        items behind the output register) uses :class:`RegisteredReadFIFO`, whose block RAM read is registered,
        with the same timing.

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
        if self._depth - 1 > LUTRAM_DEPTH:
            m.submodules.fifo = q = RegisteredReadFIFO(width=width, depth=self._depth)
        else:
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
