"""Small pipeline pieces the wire pipelines share: a skid register between two stages, and a 32-bit statistics
counter short enough for the logic-level budget."""

from amaranth import Cat, Mux, Signal

__all__ = ["skid", "counter32"]


def skid(m, name, valid, payload, ready, sink):
    """Hand ``payload`` (offered with ``valid``) to the stream ``sink`` through one skid register, driving ``ready``.

    An item passes straight through when ``sink`` takes it (no latency); one that ``sink`` refuses is held in the
    register and offered from there. ``ready`` is a flip-flop of its own (high while the register is empty), so
    ``sink``'s ready never reaches the producer combinationally. One item per clock while ``sink`` is ready."""
    held, free = Signal(name=f"{name}_held"), Signal(init=1, name=f"{name}_free")     # free == ~held, its own FF
    keep = Signal.like(payload, name=f"{name}_keep", reset_less=True)
    m.d.comb += [ready.eq(free), sink.valid.eq(held | valid), sink.payload.eq(Mux(held, keep, payload))]
    with m.If(~held & valid & ~sink.ready):
        m.d.sync += [held.eq(1), free.eq(0), keep.eq(payload)]
    with m.If(held & sink.ready):
        m.d.sync += [held.eq(0), free.eq(1)]


def counter32(m, name, inc):
    """A 32-bit wrapping counter of ``inc`` (1 bit) in two 16-bit halves, the carry registered between them (short
    carry chains); the increment is registered first, so the count trails its event by a clock and the event's
    logic ends at a flip-flop. Returns the count (cleared by the domain's reset)."""
    lo, hi, carry = Signal(16, name=f"{name}_lo"), Signal(16, name=f"{name}_hi"), Signal(name=f"{name}_c")
    inc_r = Signal(name=f"{name}_inc")
    m.d.sync += [inc_r.eq(inc), Cat(lo, carry).eq(lo + inc_r), hi.eq(hi + carry)]
    return Cat(lo, hi)
