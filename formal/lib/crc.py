"""The CRC-32 matrices (:mod:`lbpipe.hdl.lib.crc`) against a bit-serial CRC-32 written here, and the incremental
update of a rewritten field against recomputation, for every message of a bounded width (a combinational proof).

The reference is the reflected bit-serial CRC-32 of IEEE 802.3 (polynomial 0x04C11DB7, reflected 0xEDB88320): for
each bit, least significant first, ``crc = (crc >> 1) ^ (poly if (crc ^ bit) & 1 else 0)``, on the library's state
convention (the running register before the final XOR). :class:`CrcIncremental` asserts, for a free 32-bit state, a
free ``n_bytes`` message and a free new value of a ``field_bytes`` field at every offset:

* **update**: ``crc32_update(state, message)`` equals the bit-serial CRC;
* **incremental**: the bit-serial CRC of the message with the field rewritten equals
  ``crc32_update(state, message) ^ crc32_shift(crc32_update(None, old ^ new), bytes after the field)``, the update a
  deparser applies when it rewrites one field (the UDP source port) without reading the frame again.

Covers: a rewrite that changes the field (so the proof is not only about unchanged messages).

Run with the ``gf2`` method (:mod:`.gf2`, ``lbpipe prove lib-crc``): both sides are wide XOR networks of different
structure, which the CDCL solvers on hand do not close in minutes (Yices 2 through SymbiYosys and MiniSAT through
Yosys's ``sat`` not even for a 1-byte message, ABC's ``iprove`` not for 8 bytes). Evaluated exactly as affine forms
over GF(2) from Yosys's gate netlist, they are compared in seconds (8 bytes); no linearity is assumed (a gate that
is not affine makes the method report ``ERROR``).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import Assert, Cover

from lbpipe.hdl.lib.crc import crc32_shift, crc32_update

from .harness import Harness, free

__all__ = ["CrcIncremental", "serial_crc32", "POLY_REFLECTED"]

#: IEEE 802.3 CRC-32 polynomial 0x04C11DB7, bit-reversed.
POLY_REFLECTED = 0xEDB88320


def serial_crc32(m, state, message, n_bytes, name="serial"):
    """The register after ``message`` (byte 0 in bits 7..0), one bit at a time (combinational, a signal per step
    so the expression stays a chain and not a tree)."""
    crc = state
    for bit in range(8 * n_bytes):
        step = Signal(32, name=f"{name}_{bit}")
        m.d.comb += step.eq(((crc >> 1) ^ Mux(crc[0] ^ message[bit], POLY_REFLECTED, 0))[:32])
        crc = step
    return crc


class CrcIncremental(Harness):
    """Combinational proof harness; see the module documentation.

    Parameters
    ----------
    n_bytes : int
        Message bytes.
    field_bytes : int
        Width of the rewritten field.
    update, shift : callable
        The functions under proof (default the library's; the tests pass broken ones).
    """

    def __init__(self, *, n_bytes=8, field_bytes=2, update=crc32_update, shift=crc32_shift):
        super().__init__(reset="start")
        self._n = n_bytes
        self._w = field_bytes
        self._update = update
        self._shift = shift

    def elaborate(self, platform):
        m = Module()
        self.domain(m)
        n, w = self._n, self._w
        state = free(self, 32, "state")
        message = free(self, 8 * n, "message")
        new = free(self, 8 * w, "field")
        full = Signal(32)
        m.d.comb += full.eq(self._update(state, message))
        m.d.comb += Assert(full == serial_crc32(m, state, message, n), "crc32_update differs from bit-serial CRC-32")
        for offset in range(n - w + 1):
            lo, hi = 8 * offset, 8 * (offset + w)
            rewritten = Cat(message[:lo], new, message[hi:]) if lo else Cat(new, message[hi:])
            # Intermediate results in signals: a slice of an expression is compiled anew for every bit.
            delta = Signal(8 * w, name=f"delta{offset}")
            term = Signal(32, name=f"term{offset}")
            incremental = Signal(32, name=f"incremental{offset}")
            m.d.comb += [
                delta.eq(message[lo:hi] ^ new),
                term.eq(self._update(None, delta)),
                incremental.eq(full ^ self._shift(term, n - offset - w)),
            ]
            m.d.comb += Assert(incremental == serial_crc32(m, state, rewritten, n, f"serial{offset}"),
                               f"incremental update of the field at byte {offset} differs from recomputation")
        m.d.comb += Cover(new != message[:8 * w])
        return m
