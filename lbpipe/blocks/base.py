"""What lbpipe knows about a block: :class:`Param`, :class:`Block`, and the helpers the mechanisms' registry
modules share."""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

__all__ = ["Param", "Block", "parse_params", "load"]


@dataclass(frozen=True)
class Param:
    """One elaboration parameter of a block."""
    name: str
    default: Any
    help: str
    choices: Optional[tuple] = None

    def parse(self, text):
        """Convert a command-line string to this parameter's type."""
        if isinstance(self.default, bool):
            words = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False,
                     "off": False}
            if text.lower() not in words:
                raise ValueError(f"parameter {self.name} takes true or false, not {text!r}")
            value = words[text.lower()]
        elif isinstance(self.default, int):
            try:
                value = int(text, 0)
            except ValueError:
                raise ValueError(f"parameter {self.name} takes an integer, not {text!r}") from None
        else:
            value = text
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"parameter {self.name} must be one of {self.choices}, not {value!r}")
        return value


@dataclass(frozen=True)
class Block:
    """Everything lbpipe knows about one block.

    ``build(**params)`` returns the Amaranth component (ports ``i``, ``o``, ``ctl``); ``golden(**params)`` the
    golden model (``control``, ``process``, ``reset`` and optionally ``cycles``); ``tb_module`` is the cocotb module
    with the generic ``trace``, ``reset_mid_traffic`` and ``reset_state`` tests; ``paper`` holds the paper's figures
    for the synthesis report; ``report_extra(params, component)`` returns extra report lines (label -> text).
    """
    name: str
    summary: str
    paper_ref: str
    params: List[Param]
    build: Callable
    golden: Optional[Callable]
    tb_module: str
    doc: str
    #: ``"meta"``: ports ``i``/``o``/``ctl`` carrying metadata items (traces, replay, generic tests, benchmarks);
    #: ``"packet"``: AXI4-Stream packet I/O stages, with their own testbenches (Verilog and synthesis only here).
    interface: str = "meta"
    #: Where a packet block's golden model lives (documentation and the completeness test).
    golden_ref: Optional[str] = None
    paper: Dict[str, Any] = field(default_factory=dict)
    #: Small parameter sets the generic tests run RTL against golden on (fast to simulate, corner values).
    test_params: List[Dict[str, Any]] = field(default_factory=list)
    #: ``f(random.Random) -> params`` for the long random regression.
    random_params: Optional[Callable] = None
    #: Items per trace of the long random regression (12 seeds, tests/test_blocks.py): the default suits the small
    #: blocks; a block whose simulation is slow (wide memories written through ``ctl`` first) takes fewer, so the
    #: full profile stays within CI's time.
    regression_items: int = 4000
    report_extra: Optional[Callable] = None
    synth_nolutram: bool = False
    #: Packet pipelines: ``"module:function"`` of ``f(seed, n_frames, **params) -> (commands, frames)``, the seeded
    #: traffic ``lbpipe trace`` writes as a pcap file and its control commands.
    pcap_trace: Optional[str] = None
    #: Packet stages driven by one action per frame (the LAPS header editor): ``"module:function"`` of the action
    #: layout; ``lbpipe replay`` then takes the actions from a JSON Lines file of ``{"act": {...}}`` lines, one per
    #: frame, and the golden model is ``process(frame, action) -> [frames]``.
    actions: Optional[str] = None
    #: Metadata blocks: ``"module:function"`` of ``f(seed, n_items, **params) -> events``, the seeded random trace
    #: ``lbpipe trace`` writes and the generic tests replay.
    trace: Optional[str] = None
    #: Metadata blocks with input streams beside ``i`` (the PIT's ``upd``): their port names. A trace event
    #: ``{"<name>": {...}}`` is driven on that port; the golden model takes it as ``process_stream(name, values)``;
    #: an event of such a stream just before an ``item`` event is offered in the same clock as the item and
    #: applies before it (see lbpipe/trace.py).
    streams: tuple = ()
    #: Packet pipelines with plain input ports beside the streams (``laps-rx-wire``'s ``now``): per port,
    #: ``"module:NAME"`` of the value a pcap replay holds it at (the golden model's replay assumes the same).
    held_inputs: Dict[str, str] = field(default_factory=dict)

    def held_values(self):
        """``{port: value}`` of :attr:`held_inputs`."""
        import importlib
        out = {}
        for port, path in self.held_inputs.items():
            module, name = path.split(":")
            out[port] = int(getattr(importlib.import_module(module), name))
        return out

    def stream_layouts(self, params):
        """``{name: payload layout}`` of the block's extra input streams (empty for the single-stream blocks)."""
        if not self.streams:
            return {}
        component = self.build(**params)
        component._MustUse__silence = True
        members = component.signature.members
        # a stream a parameter leaves out (flb-route's ``upd`` with ``upd=False``) is not a port of that build
        return {name: members[name].signature.members["payload"].shape for name in self.streams if name in members}

    def action_layout(self):
        """The layout of the block's per-frame action, or None."""
        if self.actions is None:
            return None
        import importlib
        module, name = self.actions.split(":")
        return getattr(importlib.import_module(module), name)()

    def trace_generator(self):
        """The block's random trace generator ``f(seed, n_items, **params)``, or None."""
        if self.trace is None:
            return None
        import importlib
        module, name = self.trace.split(":")
        return getattr(importlib.import_module(module), name)

    @property
    def is_meta(self):
        return self.interface == "meta"

    def layouts(self, params):
        """``(input layout, output layout, control layout, component)`` of the block built with ``params``.

        The component is built only to read its signature, so Amaranth's unused-elaboratable warning is silenced.
        """
        component = self.build(**params)
        component._MustUse__silence = True
        members = component.signature.members
        return (members["i"].signature.members["payload"].shape,
                members["o"].signature.members["payload"].shape,
                members["ctl"].signature.members["payload"].shape,
                component)

    def check(self, params):
        """Build the block with ``params`` to run its parameter checks; raises ``ValueError`` (or ``TypeError``,
        turned into ``ValueError``) naming the block when they fail, before anything is written."""
        try:
            component = self.build(**params)
        except TypeError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        _silence(component)
        return component

    @property
    def commands(self):
        """The ``lbpipe`` commands this block supports."""
        out = ["verilog", "synth"]
        from lbpipe.bench import BENCHES, PACKET_BENCHES
        if self.name in BENCHES or self.name in PACKET_BENCHES:
            out.append("bench")
        if self.trace is not None or self.pcap_trace is not None:
            out.append("trace")
        if self.is_meta or self.golden is not None:
            out.append("replay")
        return out

    def defaults(self):
        return {p.name: p.default for p in self.params}

    def resolve(self, overrides=None):
        """Defaults updated with ``overrides`` (a dict of already-typed values); unknown names raise."""
        params = self.defaults()
        for name, value in (overrides or {}).items():
            if name not in params:
                raise ValueError(f"block {self.name} has no parameter {name!r}; it has {sorted(params)}")
            params[name] = value
        return params


def parse_params(block, assignments):
    """Parse ``["NAME=VALUE", ...]`` for ``block`` into a typed dict."""
    by_name = {p.name: p for p in block.params}
    out = {}
    for text in assignments or []:
        if "=" not in text:
            raise ValueError(f"--param takes NAME=VALUE, not {text!r}")
        name, value = text.split("=", 1)
        if name not in by_name:
            raise ValueError(f"block {block.name} has no parameter {name!r}; it has {sorted(by_name)}")
        out[name] = by_name[name].parse(value)
    return out


def load(path):
    """``"lbpipe.hdl.themis.themis_s:ThemisS"`` -> a callable that imports and calls it (imports stay lazy, so listing
    blocks does not load Amaranth)."""
    module, name = path.split(":")

    def make(**params):
        import importlib
        return getattr(importlib.import_module(module), name)(**params)
    make.__qualname__ = path
    return make


def _silence(component, seen=None):
    """Mark ``component`` and the sub-components it made in its constructor (attributes, lists of them) as used: a
    block built only to check its parameters is never elaborated, and Amaranth would warn for each of them."""
    from amaranth.hdl import Elaboratable
    seen = set() if seen is None else seen
    if id(component) in seen:
        return
    seen.add(id(component))
    component._MustUse__silence = True
    for value in vars(component).values():
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(item, Elaboratable):
                _silence(item, seen)
