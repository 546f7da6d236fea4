"""Proofs of the packet I/O stages: the parser's frame contract and that it reads nothing past a frame's end
(:mod:`.parser`); the deparser's checksum adder and what its rewrite changes (:mod:`.deparser`). The CRC primitive's
proofs are :mod:`lbpipe.formal.lib.crc` (block ``lib-crc``)."""

from lbpipe.hdl.packet.parser import Parser

from lbpipe.formal.lib.harness import Proof

from .deparser import DeparserRewrite, OnesComplementAdd
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


def _deparser():
    from lbpipe.hdl.packet.deparser import Deparser
    return Deparser(depth=4, pending=2)


# The deparser: its checksum adder (every sum of the UDP checksum update is one) for any two words, combinational.
# The whole deparser at its smallest instance (depth 4, pending 2, store-and-forward): a frame taken at step 1 can
# leave at step 31 (tail FIFO 2, join 18, edit FIFO 2, output 8), so its row is deep (243 s). The frame
# contract on the same instance (depth 34) had reached only step 22 to 27 after 6 to 10 minutes: not a row.
DEPARSER_REWRITE_DEPTH = 32
PROOFS += [
    Proof("deparser", "ones'-complement adder of the UDP checksum update = RFC 1071 end-around carry",
          OnesComplementAdd, depth=1),
    Proof("deparser", "a rewrite changes only the port (old ^ sport_xor), checksum and ICRC; a refused one nothing "
                      "(one-beat frames)",
          lambda: DeparserRewrite(_deparser), depth=DEPARSER_REWRITE_DEPTH, deep=True, timeout=600),
]

# The QP classifier's rows (standard metadata rows and its lookup property) are kept beside its harness.
from .qp_classifier import PROOFS as _QP_CLASSIFIER_PROOFS  # noqa: E402

PROOFS += _QP_CLASSIFIER_PROOFS
