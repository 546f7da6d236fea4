"""Golden model of :class:`lbpipe.hdl.packet.compensator.Compensator`: frames and their actions in, frames out.

The rules (the hardware's module docstring explains the choices): a frame with ``record`` becomes its QP's
template if it has at most two 64-byte beats, else the QP's template becomes empty; a frame with ``drop`` is not
sent; a frame with ``comp`` is followed by its QP's template, if there is one. A ``qp`` at or above ``n_qps`` records
nothing and sends nothing. A frame longer than ``depth`` 64-byte beats is cut: only its first ``depth * 64`` bytes
are sent (unless ``drop``), it is never recorded (``record`` empties the template, counted as too long, as it is over
two beats), its ``comp`` is served as any frame's, and counter 5 counts it whatever its action. Templates survive
reset (they are memories); the counters do not.
"""

from lbpipe.hdl.packet.compensator import N_COUNTERS, check_parameters

__all__ = ["Compensator"]

#: A NACK template holds two 64-byte beats (docs/packet_io.md, the compensator).
_RECORD_BYTES = 128

_BEAT = 64


class Compensator:
    """Parameters as :class:`lbpipe.hdl.packet.compensator.Compensator`."""

    def __init__(self, *, n_qps=1600, depth=256, user_width=1):
        check_parameters(n_qps=n_qps, depth=depth, user_width=user_width)
        self.n_qps = n_qps
        self.depth = depth
        self.templates = {}
        self.counts = [0] * N_COUNTERS

    def reset(self):
        """Hardware reset: the counters clear; the templates stay."""
        self.counts = [0] * N_COUNTERS

    def stats(self):
        """Counters as the RTL's ``stats`` holds them: dropped, recorded, too long to record, sent, missed, cut."""
        return [c % (1 << 32) for c in self.counts]

    def process(self, frame, action):
        """The frames (a list of ``bytes``) that leave for ``frame`` and its action (a dict of ``CompAction``
        fields)."""
        frame = bytes(frame)
        qp = action.get("qp", 0)
        in_range = qp < self.n_qps
        kept = _BEAT * self.depth
        out = []
        if action.get("record") and in_range:
            # A cut frame is longer than depth >= 2 beats, so too long to record like any frame over two beats.
            if len(frame) <= _RECORD_BYTES:
                self.templates[qp] = frame
                self.counts[1] += 1
            else:
                self.templates[qp] = None
                self.counts[2] += 1
        if len(frame) > kept:
            self.counts[5] += 1
        if action.get("drop"):
            self.counts[0] += 1
        else:
            out.append(frame[:kept])
        if action.get("comp"):
            template = self.templates.get(qp) if in_range else None
            if template is None:
                self.counts[4] += 1
            else:
                out.append(template)
                self.counts[3] += 1
        return out
