"""What every formal harness shares: free inputs, a stream source that keeps its own contract, the proof record.

A harness is an Amaranth ``Elaboratable`` that instantiates the design under proof and states ``Assert``,
``Assume`` and ``Cover`` statements about it. Its free inputs (``ports``) become the top-level inputs of the RTLIL
module handed to SymbiYosys, so the solver chooses them freely in every cycle. The harness owns the ``sync``
domain: its reset is a free input too, or held high in the first cycle only (``reset="start"``), so every proof
starts from the state reset gives, never from the flip-flops' power-up values alone.

:class:`Proof` is one row of ``lbpipe prove``: a block name, a property name, the harness factory, the method
(``bmc``: bounded model check to ``depth`` cycles; ``prove``: k-induction with k = ``depth``, which also runs the
base case), and whether the proof is deep (run by the regression profile only). :mod:`lbpipe.prove` runs them.
"""

from dataclasses import dataclass, field
from typing import Callable, Optional

from amaranth import ClockDomain, ClockSignal, ResetSignal, Shape, Signal
from amaranth.hdl import Elaboratable

__all__ = ["Harness", "Proof", "free", "drive_source"]


def free(harness, shape, name):
    """A free input of ``harness``: a top-level port the solver sets to any value in every cycle."""
    sig = Signal(Shape.cast(shape).width, name=name)
    harness.ports.append(sig)
    return sig


class Harness(Elaboratable):
    """Base of the harnesses: the ``sync`` domain, its reset, and the list of free inputs.

    Parameters
    ----------
    reset : str
        ``"start"``: reset is high in the first cycle only; ``"free"``: reset is a free input, high in the first
        cycle and any value after it (a reset at any time, in any state).

    Members
    -------
    ports : list of Signal
        Free inputs, in the order they were made.
    """

    def __init__(self, *, reset="start"):
        if reset not in ("start", "free"):
            raise ValueError(f"reset must be 'start' or 'free', not {reset!r}")
        self._reset = reset
        self.ports = []
        self.clk = Signal(name="clk")
        self.ports.append(self.clk)

    def domain(self, m):
        """Make the ``sync`` domain; returns ``(rst, started)``: the domain's reset and a flag low in cycle 0 only."""
        m.domains.sync = ClockDomain("sync")
        started = Signal(reset_less=True, name="started")
        m.d.sync += started.eq(1)
        rst = Signal(name="rst_any")
        if self._reset == "free":
            rst_in = free(self, 1, "rst_in")
            m.d.comb += rst.eq(rst_in | ~started)
        else:
            m.d.comb += rst.eq(~started)
        m.d.comb += [ClockSignal("sync").eq(self.clk), ResetSignal("sync").eq(rst)]
        return rst, started


def drive_source(harness, m, port, name):
    """Drive the sink ``port`` (a block's ``In(stream.Signature(...))``) from free inputs, keeping the stream rule
    a producer must keep: once ``valid`` is offered it stays, with the same payload, until ``ready`` takes it.

    Idle cycles and any payload are the solver's choice. Returns the free ``valid`` (for covers)."""
    width = Shape.cast(port.payload.shape()).width
    any_valid = free(harness, 1, f"{name}_any_valid")
    any_payload = free(harness, width, f"{name}_any_payload")
    hold = Signal(name=f"{name}_hold")
    held = Signal(width, name=f"{name}_held", reset_less=True)
    m.d.sync += [hold.eq(port.valid & ~port.ready), held.eq(port.payload.as_value())]
    with m.If(hold):
        m.d.comb += [port.valid.eq(1), port.payload.eq(held)]
    with m.Else():
        m.d.comb += [port.valid.eq(any_valid), port.payload.eq(any_payload)]
    return any_valid


@dataclass(frozen=True)
class Proof:
    """One property of one block, as ``lbpipe prove`` runs it.

    ``build()`` returns a fresh harness; ``method`` is ``"bmc"`` or ``"prove"`` (k-induction); ``depth`` the
    default bound (cycles for BMC, k for induction); ``cover`` whether the harness's ``Cover`` statements are
    checked reachable (a separate solver run) within ``cover_depth`` cycles (default ``depth``; an induction's k is
    often shorter than the run that reaches every cover); ``deep`` marks a proof for the regression profile;
    ``timeout`` the wall-clock seconds the proof may take (its runs together; ``None``: the runner's default,
    :data:`lbpipe.prove.DEFAULT_TIMEOUT`; ``lbpipe prove --timeout`` overrides it), past which it is killed and reported ``TIMEOUT``.
    """
    block: str
    prop: str
    build: Callable
    method: str = "bmc"
    depth: int = 20
    cover: bool = True
    cover_depth: Optional[int] = None
    deep: bool = False
    note: Optional[str] = None
    params: dict = field(default_factory=dict)
    timeout: Optional[float] = None
