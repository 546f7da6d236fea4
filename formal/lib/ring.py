"""Invariants of the ring-buffer pointer updates (:mod:`lbpipe.hdl.lib.ring`), proven by k-induction.

:class:`RingInvariants` keeps one :func:`~lbpipe.hdl.lib.ring.RingState` register and applies, each cycle, the
solver's choice of nothing, a push (:func:`~lbpipe.hdl.lib.ring.ring_push`, with or without ``overwrite``) or a
drop of ``n <= count`` entries (:func:`~lbpipe.hdl.lib.ring.ring_drop`), with a reset at any time. Beside it, a
shadow bit per slot records whether the slot was written since reset. It asserts in every cycle:

* ``head < depth``, ``tail < depth``, ``count <= depth``;
* ``tail == (head + count) mod depth`` (written here as its own arithmetic, not with the module's helpers);
* every slot inside the ring (``(slot - head) mod depth < count``) was written since reset: a reader that only
  reads slots inside the ring never reads a slot that was never written;
* a push without ``overwrite`` is refused exactly when the ring is full.

Covers: a full ring, a push that overwrites the oldest entry, a wrap of ``tail`` to slot 0, a drop of more than one.
"""

from amaranth import Module, Mux, Signal
from amaranth.hdl import Assert, Assume, Cover

from lbpipe.hdl.lib.ring import RingState, ring_drop, ring_push

from .harness import Harness, free

__all__ = ["RingInvariants"]


class RingInvariants(Harness):
    """Harness for one ring of ``depth`` entries.

    Parameters
    ----------
    depth : int
    overwrite : bool
        Which :func:`ring_push` variant the pushes use.
    push, drop : callable
        The updates under proof (default the library's; the tests pass broken ones).
    """

    def __init__(self, *, depth, overwrite=True, push=ring_push, drop=ring_drop):
        super().__init__(reset="free")
        self._depth = depth
        self._overwrite = overwrite
        self._push = push
        self._drop = drop

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        depth = self._depth
        layout = RingState(depth)
        state = Signal(layout)
        op = free(self, 2, "op")                    # 0 nothing, 1 push, 2 drop, 3 nothing
        n = Signal(layout.members["count"], name="drop_n")
        m.d.comb += n.eq(free(self, len(n), "n_any"))
        m.d.comb += Assume((op != 2) | (n <= state.count))

        written = Signal(depth)
        pushed, accepted = self._push(state, depth, overwrite=self._overwrite)
        dropped = self._drop(state, n, depth)
        with m.Switch(op):
            with m.Case(1):
                m.d.sync += [state.head.eq(pushed["head"]), state.tail.eq(pushed["tail"]),
                             state.count.eq(pushed["count"])]
                with m.If(accepted):
                    for slot in range(depth):
                        with m.If(state.tail == slot):
                            m.d.sync += written[slot].eq(1)
            with m.Case(2):
                m.d.sync += [state.head.eq(dropped["head"]), state.tail.eq(dropped["tail"]),
                             state.count.eq(dropped["count"])]

        full = state.count == depth
        m.d.comb += [
            Assert(state.head < depth, "head out of range"),
            Assert(state.tail < depth, "tail out of range"),
            Assert(state.count <= depth, "count above depth"),
            Assert(self._tail_expected(state) == state.tail, "tail != (head + count) mod depth"),
        ]
        for slot in range(depth):
            # slot - head + depth, in 0 .. 2 depth - 1: its residue is the slot's age rank in the ring.
            offset = Signal(range(2 * depth), name=f"offset{slot}")
            m.d.comb += offset.eq(slot + depth - state.head)
            inside = Signal(name=f"inside{slot}")
            m.d.comb += inside.eq(_mod(offset, depth) < state.count)
            m.d.comb += Assert(~inside | written[slot], f"slot {slot} inside the ring but never written")
        if not self._overwrite:
            m.d.comb += Assert((op != 1) | (accepted == ~full), "a push refused though not full, or taken when full")
        m.d.comb += [
            Cover(full),
            Cover((op == 1) & full & (state.head == depth - 1)),
            Cover((op == 1) & (state.tail == depth - 1)),
        ]
        if depth >= 2:
            m.d.comb += Cover((op == 2) & (n >= 2))
        return m

    def _tail_expected(self, state):
        return _mod(state.head + state.count, self._depth)


def _mod(value, depth):
    """``value mod depth`` for ``value < 2 * depth``, written without the ring module's helpers."""
    return Mux(value >= depth, value - depth, value)
