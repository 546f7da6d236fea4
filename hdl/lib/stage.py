"""Small pipeline pieces the blocks share: a skid register between two stages, a 32-bit statistics counter short
enough for the logic-level budget, and the register banks of a pipeline that moves as one."""

from amaranth import Cat, Mux, Signal

__all__ = ["skid", "counter32", "RegisterBanks"]


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


def register_slice(m, name, valid, payload, ready, sink):
    """Hand ``payload`` (offered with ``valid``) to the stream ``sink`` through a register slice, driving ``ready``:
    ``sink``'s valid and payload come straight from flip-flops (no logic between a producer's output and a
    consumer's first stage) and ``ready`` is a flip-flop too. One clock of latency; one item per clock while ``sink``
    is ready (a second register catches the item taken in the clock ``sink`` first refuses)."""
    out_v, spare_v = Signal(name=f"{name}_v"), Signal(name=f"{name}_spare_v")
    free = Signal(init=1, name=f"{name}_free")                          # free == ~spare_v, its own FF
    out = Signal.like(payload, name=f"{name}_q", reset_less=True)
    spare = Signal.like(payload, name=f"{name}_spare", reset_less=True)
    m.d.comb += [ready.eq(free), sink.valid.eq(out_v), sink.payload.eq(out)]
    with m.If(sink.ready | ~out_v):
        with m.If(spare_v):
            m.d.sync += [out.eq(spare), out_v.eq(1), spare_v.eq(0), free.eq(1)]
        with m.Else():
            m.d.sync += [out.eq(payload), out_v.eq(valid)]
    with m.Elif(valid & free):
        m.d.sync += [spare.eq(payload), spare_v.eq(1), free.eq(0)]


def counter32(m, name, inc):
    """A 32-bit wrapping counter of ``inc`` (1 bit) in two 16-bit halves, the carry registered between them (short
    carry chains); the increment is registered first, so the count trails its event by a clock and the event's
    logic ends at a flip-flop. Returns the count (cleared by the domain's reset)."""
    lo, hi, carry = Signal(16, name=f"{name}_lo"), Signal(16, name=f"{name}_hi"), Signal(name=f"{name}_c")
    inc_r = Signal(name=f"{name}_inc")
    m.d.sync += [inc_r.eq(inc), Cat(lo, carry).eq(lo + inc_r), hi.eq(hi + carry)]
    return Cat(lo, hi)


class RegisterBanks:
    """Register banks ``b0`` .. ``b<last>`` of a pipeline whose stages all move on one ``adv``. :meth:`put` loads a
    field into bank ``at`` (from an expression over bank ``at - 1`` or the input) and carries it on, unchanged,
    through bank ``until`` (default the last); ``banks[n][name]`` is the field's register in bank ``n``."""

    def __init__(self, m, adv, last):
        self.m, self.adv, self.last = m, adv, last
        self.banks = [dict() for _ in range(last + 1)]

    def put(self, name, at, value, shape, until=None):
        for n in range(at, (self.last if until is None else until) + 1):
            sig = Signal(shape, name=f"b{n}_{name}")
            src = value if n == at else self.banks[n - 1][name]
            with self.m.If(self.adv):
                self.m.d.sync += sig.eq(src)
            self.banks[n][name] = sig
        return self.banks[at][name]

    def __getitem__(self, at):
        return self.banks[at]


def tick_clock(m, name, time_bits, tick_cycles):
    """A wire's clock: ``now`` (``time_bits``) steps once every ``period`` clocks (``period`` 0: stopped; reset value
    ``tick_cycles``), counted by a prescaler ``pre``. Returns ``(now, period, pre)``: a control command sets ``now``
    directly, or ``period`` with ``pre`` 0 so the next tick is one clock away."""
    now = Signal(time_bits, name=name)
    period = Signal(16, init=tick_cycles, name=f"{name}_tick_period")
    pre = Signal(16, name=f"{name}_tick_pre")
    step = Signal(name=f"{name}_tick_step")
    m.d.comb += step.eq((period != 0) & (pre == 0))
    with m.If(step):
        m.d.sync += [pre.eq(period - 1), now.eq(now + 1)]
    with m.Elif(pre != 0):
        m.d.sync += pre.eq(pre - 1)
    return now, period, pre
