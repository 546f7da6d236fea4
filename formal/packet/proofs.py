"""Proofs of the packet I/O stages: the parser's frame contract and that it reads nothing past a frame's end
(:mod:`.parser`). The CRC primitive's
proofs are :mod:`lbpipe.formal.lib.crc` (block ``lib-crc``)."""

from lbpipe.hdl.packet.parser import Parser

from lbpipe.formal.lib.harness import Proof

from .parser import ParserFrames, ParserPastLast

__all__ = ["PROOFS"]


def _parser():
    return Parser()


# The parser at its only width (512-bit beats, 1-bit tuser), late items. Past the end: frames of one beat (1 to 64
# bytes: every header the parser knows can be cut by tlast/tkeep), depth 9 (a frame accepted at step 1 has its item at
# step 8); two copies of the parser, 48 to 73 s on the shared machine, so a deep row (regression profile); frames of
# two beats (depth 10) had not finished BMC step 9 after 4 minutes. The frame contract: one copy, frames of any
# length, depth 10 (a two-beat frame's item at step 9), 109 s, deep as well.
_FRAMES = "m_axis passes every beat unchanged, in order; one item per frame, in order (frames of any length)"
PROOFS = [
    Proof("parser", "meta, tready and m_axis never depend on bytes past tlast / tkeep (one-beat frames)",
          lambda: ParserPastLast(_parser, one_beat=True), depth=9, deep=True, timeout=600),
    Proof("parser", _FRAMES, lambda: ParserFrames(_parser), depth=10, deep=True, timeout=600),
]
