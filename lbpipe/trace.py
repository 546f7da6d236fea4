"""Trace files and payload packing shared by the golden engine, the RTL engine and the tests.

A trace is JSON Lines. Each input line is one event:

* ``{"ctl": {"table": T, "index": I, "data": D}}``: a control command, applied after every earlier item has left
  the block (the RTL engine drains the pipeline first, so both engines see the same order);
* ``{"item": {field: value, ...}}``: one metadata item; fields are the block's input layout's, as integers (enum
  fields by value). Other keys on the line (``"t"``, comments) are ignored;
* ``{"<stream>": {field: value, ...}}``: one item of a block's extra input stream (``Block.streams``, e.g. the PIT's
  ``"upd"``), driven on the port of that name. Such events just before an ``item`` event (one per stream at most)
  are offered in the same clock as the item and apply before it; the next group waits until the block has taken
  the whole group. The golden model sees the events in trace order (``process_stream(name, values)``), which is
  therefore the exact serial order the RTL keeps, with idle cycles and back-pressure alike.

Each output line is ``{"item": {...}}`` with the block's output layout's fields, one per output item, in order.

Packet pipelines read and write pcap files of Ethernet frames (:func:`read_pcap`, :func:`write_pcap`), byte for
byte: runts and malformed frames included.
"""

import json

__all__ = ["Events", "where", "read_events", "stream_kinds", "write_events", "pack", "unpack", "layout_fields", "is_integer",
           "TraceError", "read_pcap", "write_pcap"]

#: pcap link type of Ethernet frames.
_LINKTYPE_ETHERNET = 1


def read_pcap(path):
    """The frames of a pcap file, as ``bytes``.

    Raises :class:`TraceError` for a file that is not a pcap file, holds no frames, or is cut: inside a frame, inside
    a record header, or a frame captured shorter than it was on the wire (a snap length), since replaying a cut
    frame would test something the file does not hold."""
    import logging
    import os
    from scapy.error import Scapy_Exception
    from scapy.utils import RawPcapReader
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    try:
        reader = RawPcapReader(str(path))
    except Scapy_Exception as exc:
        raise TraceError(f"{path}: not a pcap file ({exc})") from None
    frames, used = [], 24
    with reader:
        for number, (data, meta) in enumerate(reader, 1):
            if len(data) < meta.caplen:
                raise TraceError(f"{path}: frame {number} is cut: {len(data)} of its {meta.caplen} bytes")
            if meta.caplen < meta.wirelen:
                raise TraceError(f"{path}: frame {number} was captured cut to {meta.caplen} of {meta.wirelen} bytes")
            frames.append(bytes(data))
            used += 16 + len(data)
    if type(reader) is RawPcapReader and used != os.path.getsize(path):
        raise TraceError(f"{path}: {os.path.getsize(path) - used} bytes after frame {len(frames)} are not a whole "
                         f"record (the file is cut)")
    return frames


def write_pcap(path, frames):
    """Write ``frames`` (``bytes`` each) to a pcap file as Ethernet frames, unparsed, so that a frame scapy could
    not dissect (a runt) is written as it is."""
    from scapy.utils import wrpcap
    wrpcap(str(path), [bytes(f) for f in frames], linktype=_LINKTYPE_ETHERNET)


class TraceError(ValueError):
    """A trace line that is not a valid event for the block."""


class Events(list):
    """Events read from a file: a list that also knows the file (``path``) and each event's line (``lines``), so a
    later check can name the line of a bad event."""

    def __init__(self, path=None):
        super().__init__()
        self.path = path
        self.lines = []

    def where(self, index):
        """``"FILE:LINE"`` of event ``index`` (from 0), or ``"event N"`` (from 1) for events built in memory."""
        if self.path is not None and index < len(self.lines):
            return f"{self.path}:{self.lines[index]}"
        return f"event {index + 1}"


def where(events, index):
    """Where event ``index`` of ``events`` came from, for an error message."""
    return events.where(index) if isinstance(events, Events) else f"event {index + 1}"


def layout_fields(layout):
    """``[(name, offset, width)]`` of a flat :class:`amaranth.lib.data.StructLayout`."""
    return list(_fields(layout)[0])


_FIELDS = {}


def _fields(layout):
    """:func:`layout_fields` as a tuple and as ``{name: (offset, width)}``, once per layout object (pack and unpack
    run per item: a million-item trace spent most of its packing time walking the layout). Keyed by identity:
    Amaranth's equal layouts may list their fields in another order."""
    entry = _FIELDS.get(id(layout))
    if entry is None or entry[0] is not layout:
        if len(_FIELDS) > 4096:
            _FIELDS.clear()
        fields = tuple((name, field.offset, field.width) for name, field in layout)
        entry = _FIELDS[id(layout)] = (layout, fields, {name: (offset, width) for name, offset, width in fields})
    return entry[1:]


def is_integer(value):
    """Whether a trace value is an integer: JSON's ``true``, ``7.9`` and ``null`` are not."""
    return isinstance(value, int) and not isinstance(value, bool)


def pack(layout, values):
    """Pack a dict of field values into the integer a stream payload carries. Missing fields are 0; a value that
    does not fit its field, or an unknown field, raises :class:`TraceError`."""
    fields = _fields(layout)[1]
    unknown = set(values) - set(fields)
    if unknown:
        raise TraceError(f"unknown fields {sorted(unknown)}; the layout has {sorted(fields)}")
    if not isinstance(values, dict):
        raise TraceError(f"expected an object of fields, not {json.dumps(values)}")
    word = 0
    for name, value in values.items():
        offset, width = fields[name]
        if not is_integer(value):
            raise TraceError(f"field {name}={json.dumps(value)} is not an integer")
        if not 0 <= value < (1 << width):
            raise TraceError(f"field {name}={value} does not fit in {width} bits")
        word |= value << offset
    return word


def unpack(layout, word):
    """The dict of field values packed in ``word``."""
    word = int(word)
    return {name: (word >> offset) & ((1 << width) - 1) for name, offset, width in _fields(layout)[0]}


def stream_kinds():
    """Event keys of a metadata trace: ``ctl``, ``item`` and every registered block's extra stream names."""
    from .blocks import BLOCKS
    extra = sorted({name for block in BLOCKS.values() for name in block.streams})
    return ("ctl", "item", *extra)


def read_events(path, *, allow_empty=False, kinds=None):
    """Read a JSONL trace into a list of events.

    Each event has exactly one key of ``kinds`` (by default :func:`stream_kinds`: ``ctl``, ``item`` or an extra
    stream's name; an action file's is ``act``), whose value is an
    object of integer fields; anything else
    raises :class:`TraceError` naming the file and line, as does a file with no events (empty, or only comments)
    unless ``allow_empty``."""
    if kinds is None:
        kinds = stream_kinds()
    events = Events(path)
    try:
        with open(path) as f:
            lines = list(f)
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a JSON Lines text file") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{number}: not JSON: {exc}") from None
        present = [k for k in kinds if isinstance(event, dict) and k in event]
        if len(present) != 1:
            raise TraceError(f"{path}:{number}: an event has exactly one of {' or '.join(map(repr, kinds))}")
        kind = present[0]
        body = event[kind]
        if not isinstance(body, dict):
            raise TraceError(f"{path}:{number}: '{kind}' takes an object of fields, not {json.dumps(body)}")
        for name, value in body.items():
            if not is_integer(value):
                raise TraceError(f"{path}:{number}: {kind} field {name}={json.dumps(value)} is not an integer")
        events.append(event)
        events.lines.append(number)
    if not events and not allow_empty:
        raise TraceError(f"{path}: no events (the file is empty)")
    return events


def write_events(path, events):
    """Write events (or output items wrapped as ``{"item": ...}``) as JSON Lines."""
    with open(path, "w") as f:
        for event in events:
            f.write(json.dumps(event, sort_keys=True) + "\n")
