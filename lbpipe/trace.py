"""Trace files and payload packing shared by the golden engine, the RTL engine and the tests.

A trace is JSON Lines. Each input line is one event:

* ``{"ctl": {"table": T, "index": I, "data": D}}``: a control command, applied after every earlier item has left
  the block (the RTL engine drains the pipeline first, so both engines see the same order);
* ``{"item": {field: value, ...}}``: one metadata item; fields are the block's input layout's, as integers (enum
  fields by value). Other keys on the line (``"t"``, comments) are ignored.

Each output line is ``{"item": {...}}`` with the block's output layout's fields, one per output item, in order.

Packet pipelines read and write pcap files of Ethernet frames (:func:`read_pcap`, :func:`write_pcap`), byte for
byte: runts and malformed frames included.
"""

import json

__all__ = ["read_events", "write_events", "pack", "unpack", "layout_fields", "TraceError", "read_pcap",
           "write_pcap"]

#: pcap link type of Ethernet frames.
_LINKTYPE_ETHERNET = 1


def read_pcap(path):
    """The frames of a pcap file, as ``bytes``."""
    import scapy.layers.l2  # noqa: F401  (registers the Ethernet link type with the reader)
    from scapy.utils import rdpcap
    return [bytes(p) for p in rdpcap(str(path))]


def write_pcap(path, frames):
    """Write ``frames`` (``bytes`` each) to a pcap file as Ethernet frames, unparsed, so that a frame scapy could
    not dissect (a runt) is written as it is."""
    from scapy.utils import wrpcap
    wrpcap(str(path), [bytes(f) for f in frames], linktype=_LINKTYPE_ETHERNET)


class TraceError(ValueError):
    """A trace line that is not a valid event for the block."""


def layout_fields(layout):
    """``[(name, offset, width)]`` of a flat :class:`amaranth.lib.data.StructLayout`."""
    return [(name, field.offset, field.width) for name, field in layout]


def pack(layout, values):
    """Pack a dict of field values into the integer a stream payload carries. Missing fields are 0; a value that
    does not fit its field, or an unknown field, raises :class:`TraceError`."""
    fields = {name: (offset, width) for name, offset, width in layout_fields(layout)}
    unknown = set(values) - set(fields)
    if unknown:
        raise TraceError(f"unknown fields {sorted(unknown)}; the layout has {sorted(fields)}")
    word = 0
    for name, value in values.items():
        offset, width = fields[name]
        value = int(value)
        if not 0 <= value < (1 << width):
            raise TraceError(f"field {name}={value} does not fit in {width} bits")
        word |= value << offset
    return word


def unpack(layout, word):
    """The dict of field values packed in ``word``."""
    word = int(word)
    return {name: (word >> offset) & ((1 << width) - 1) for name, offset, width in layout_fields(layout)}


def read_events(path):
    """Read a JSONL trace into a list of events, checking each has exactly one of ``ctl`` or ``item``."""
    events = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(event, dict) or ("ctl" in event) == ("item" in event):
                raise TraceError(f"{path}:{number}: an event has exactly one of 'ctl' or 'item'")
            events.append(event)
    return events


def write_events(path, events):
    """Write events (or output items wrapped as ``{"item": ...}``) as JSON Lines."""
    with open(path, "w") as f:
        for event in events:
            f.write(json.dumps(event, sort_keys=True) + "\n")
