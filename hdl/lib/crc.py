"""Parallel CRC-32 (Ethernet FCS, RoCEv2 ICRC) over wide stream beats, one beat per clock, and its XOR-matrix
building blocks.

The deparser regenerates the RoCEv2 ICRC at line rate on the OpenNIC 512-bit AXI4-Stream (IBA annex A17; the
reference facts in shared/reference/README.md). CRC-32 is linear over GF(2), so everything here is XOR matrices
computed at elaboration time from unit vectors and emitted as XOR trees. The golden model is
:mod:`lbpipe.sim.lib.crc`, written independently (a byte table rather than these matrices).

**State convention.** The state is the running register of the reflected byte-table algorithm before the final XOR
(:func:`lbpipe.sim.lib.crc.crc32_state`): it starts at ``init`` and after a prefix ``p`` of a frame it is
``zlib.crc32(p) ^ 0xFFFFFFFF`` (with the default ``init``). A beat of ``n`` bytes updates it as
``state' = A**n @ state ^ D_n(bytes)``, with ``A`` the zero-byte step.

**The partial last beat** (choice where the brief leaves it open; no per-length matrices). Its invalid bytes are
zeroed and the beat goes through the same full-beat update as every other beat. Trailing zero bytes only advance
the state, so the state after the ``k`` valid bytes is the full-beat result *un-advanced* by the ``j = n - k``
zeros: ``state_k = A**-j @ (A**n @ state ^ D_n(masked beat))``. ``A`` is invertible, and ``A**-j`` for ``j`` in
``0 .. n-1`` is applied after the loop, one register stage per bit of ``j``: ``x = j[b] ? A**-(2**b) @ x : x``.
Each of those matrices is 32 x 32 with at most 22 taps a row, so a stage is two LUT6 levels in principle; the six
stages of the 512-bit instance cost about 700 LUT cells (Yosys), where per-length updates would need 64 data
matrices of up to 32 x 512. Unlike moving the valid bytes to the end of the beat (a 512-bit barrel shifter, and
``A**k`` on the state still depending on ``k``), it works on 32 bits only, and it keeps the loop, the only part
that cannot be pipelined, to one fixed matrix. ``j`` comes from ``keep`` as a thermometer-to-binary XOR
(:func:`_invalid_count`); ``keep`` must be ``2**k - 1`` with ``k >= 1`` on a last beat (anything else gives an
undefined CRC), and is ignored on other beats.

**Pipeline** (``latency`` = 4 + ceil(log2(n)) register stages; 10 for 512 bits, 7 for 64):

1. input registers, the last beat's invalid bytes cleared (a synchronous reset of the data flip-flops);
2. the data term ``D_n`` as XOR chunks of at most :attr:`CRC32Stream.CHUNK` inputs per row (it does not depend on
   the state), and ``j``;
3. the chunks summed into one 32-bit term, ``A**n @ init`` folded in on the first beat of a frame;
4. the loop: ``state' = term ^ (first ? 0 : A**n @ state)``, at most 21 state taps a row;
5. and on: ``A**-j``, one bit of ``j`` per stage; the last stage also applies ``xorout`` and is the output
   register.

Every stage is two LUT6 levels if each XOR were mapped as a balanced LUT6 tree. Yosys's ABC9 maps for its own
per-pin delay model and builds chains of small LUTs instead, so the synthesis report counts four or five (and
moves the deepest path between stages from one run to another); keeping the tree's inner nets (``keep``) does not
stop it. Vivado would do better.

**Framing** (choice): a frame is a run of beats ending with ``last``, as AXI4-Stream's ``tlast`` delimits it; the
first beat is the one after a ``last`` (or after reset), tracked inside, so there is no separate ``first`` input to
disagree with ``last``. No per-frame ``init`` input either: a deparser computes the ICRC by feeding the frame in
place with ``init=0``, the Ethernet header replaced by zeros and four 0xFF bytes (see
:func:`lbpipe.sim.lib.crc.icrc_stream_bytes`).

**Flow control** (choice): the whole pipeline advances together; it stalls only while a result is offered on ``o``
and not taken (``i.ready = ~o.valid | o.ready``). Without back-pressure on ``o`` it takes one beat per clock,
back-to-back frames of any length included.
"""

import zlib

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "CRC32_INIT", "CRC32_XOROUT",
    "crc32_matrix", "crc32_shift_matrix", "xor_matrix", "crc32_update", "crc32_shift",
    "CRCBeat", "CRC32Stream",
]

#: Initial register of the Ethernet FCS.
CRC32_INIT = 0xFFFFFFFF
#: Final XOR of the Ethernet FCS.
CRC32_XOROUT = 0xFFFFFFFF

_MASK = 0xFFFFFFFF


def _register_after(state, raw):
    # zlib takes and returns the register complemented.
    return zlib.crc32(raw, state ^ _MASK) ^ _MASK


def _rows_from_columns(columns):
    rows = [0] * 32
    for c, column in enumerate(columns):
        for o in range(32):
            if column >> o & 1:
                rows[o] |= 1 << c
    return rows


def _mat_mul(a, b):
    """Rows of ``a @ b`` for 32 x 32 row-mask matrices."""
    out = []
    for row in a:
        acc = 0
        for c in range(32):
            if row >> c & 1:
                acc ^= b[c]
        out.append(acc)
    return out


def _mat_inv(rows):
    """Rows of the inverse of a 32 x 32 matrix over GF(2) (Gauss-Jordan)."""
    aug = [(row, 1 << i) for i, row in enumerate(rows)]
    for col in range(32):
        pivot = next((r for r in range(col, 32) if aug[r][0] >> col & 1), None)
        if pivot is None:
            raise ArithmeticError("singular matrix")
        aug[col], aug[pivot] = aug[pivot], aug[col]
        for r in range(32):
            if r != col and aug[r][0] >> col & 1:
                aug[r] = (aug[r][0] ^ aug[col][0], aug[r][1] ^ aug[col][1])
    return [inv for _, inv in aug]


def _check_n_bytes(n_bytes, *, name="n_bytes", minimum=0):
    if not isinstance(n_bytes, int) or isinstance(n_bytes, bool):
        raise TypeError(f"{name} must be an integer, not {n_bytes!r}")
    if n_bytes < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {n_bytes}")


def crc32_matrix(n_bytes):
    """The update of the CRC-32 state by ``n_bytes`` bytes, as XOR masks: ``state' = A**n @ state ^ D_n(data)``.

    Parameters
    ----------
    n_bytes : int
        Bytes per update (0 or more).

    Returns
    -------
    (list of int, list of int)
        ``state_rows`` and ``data_rows``, 32 each: bit ``o`` of the new state is the XOR of the state bits set in
        ``state_rows[o]`` and of the data bits set in ``data_rows[o]`` (data bit ``8*i + t`` is bit ``t`` of byte
        ``i``, byte 0 first on the wire).
    """
    _check_n_bytes(n_bytes)
    zeros = bytes(n_bytes)
    state_cols = [_register_after(1 << c, zeros) for c in range(32)]
    data_cols = []
    for i in range(n_bytes):
        for t in range(8):
            raw = bytearray(n_bytes)
            raw[i] = 1 << t
            data_cols.append(_register_after(0, bytes(raw)))
    return _rows_from_columns(state_cols), _rows_from_columns(data_cols)


_SHIFT_CACHE = {}


def crc32_shift_matrix(n):
    """Rows of ``A**n``: the state after ``n`` zero bytes; a negative ``n`` undoes ``-n`` zero bytes.

    Parameters
    ----------
    n : int

    Returns
    -------
    list of int
        32 row masks over the 32 state bits.
    """
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"n must be an integer, not {n!r}")
    if n not in _SHIFT_CACHE:
        if n >= 0:
            _SHIFT_CACHE[n] = crc32_matrix(n)[0]
        else:
            _SHIFT_CACHE[n] = _mat_inv(crc32_shift_matrix(-n))
    return list(_SHIFT_CACHE[n])


def xor_matrix(rows, value):
    """Combinational ``rows @ value`` over GF(2): one XOR reduction per row.

    Parameters
    ----------
    rows : list of int
        Row masks over the bits of ``value``.
    value : Value
        Input vector.

    Returns
    -------
    Value
        ``len(rows)`` bits; bit ``o`` is the XOR of the bits of ``value`` set in ``rows[o]`` (0 for an empty row).
    """
    width = len(value)
    bits = []
    for o, row in enumerate(rows):
        if row >> width:
            raise ValueError(f"row {o} selects bits beyond the {width}-bit input")
        taps = [value[c] for c in range(width) if row >> c & 1]
        bits.append(Cat(*taps).xor() if taps else C(0, 1))
    return Cat(*bits)


def crc32_update(state, data_bytes):
    """Combinational CRC-32 update by one word: ``A**n @ state ^ D_n(data_bytes)``.

    This is the building block for incremental updates (a deparser applying the change of a rewritten field and
    its distance to the end of the packet, for example with :func:`crc32_shift`).

    Parameters
    ----------
    state : Value or None
        32-bit state before the word (see the module's state convention); None means zero.
    data_bytes : Value or None
        The word, ``8 * n`` bits, byte 0 (first on the wire) in bits 7..0; None means no bytes.

    Returns
    -------
    Value
        The 32-bit state after the word.
    """
    n_bytes = 0 if data_bytes is None else len(data_bytes) // 8
    if data_bytes is not None and len(data_bytes) != 8 * n_bytes:
        raise ValueError(f"data width {len(data_bytes)} is not a whole number of bytes")
    if state is not None and len(state) != 32:
        raise ValueError(f"state must be 32 bits wide, not {len(state)}")
    state_rows, data_rows = crc32_matrix(n_bytes)
    terms = []
    if state is not None:
        terms.append(xor_matrix(state_rows, state))
    if data_bytes is not None and n_bytes:
        terms.append(xor_matrix(data_rows, data_bytes))
    if not terms:
        return C(0, 32)
    out = terms[0]
    for term in terms[1:]:
        out = out ^ term
    return out


def crc32_shift(state, n):
    """Combinational ``A**n @ state``: the state advanced over ``n`` zero bytes (undone for negative ``n``)."""
    if len(state) != 32:
        raise ValueError(f"state must be 32 bits wide, not {len(state)}")
    return xor_matrix(crc32_shift_matrix(n), state)


def CRCBeat(data_width):
    """Payload of one beat: ``data`` (byte ``i`` in bits ``8i+7 .. 8i``), ``keep`` (bit ``i`` marks byte ``i``
    valid; read on the last beat only, whose valid bytes are the low ones, at least one) and ``last``."""
    return data.StructLayout({"data": data_width, "keep": data_width // 8, "last": 1})


def _invalid_count(keep, last_bits):
    """``j = n - k`` for a thermometer ``keep`` of ``k`` ones (1 <= k <= n), as ``last_bits`` bits.

    Bit ``b`` of ``j`` is ``floor(j / 2**b) mod 2``, and ``floor(j / 2**b)`` counts the multiples ``p`` of ``2**b``
    with ``p <= j``, that is those with byte ``n - p`` invalid: an XOR of ``~keep`` at those bytes.
    """
    n = len(keep)
    bits = []
    for b in range(last_bits):
        taps = [~keep[n - (q << b)] for q in range(1, (n - 1 >> b) + 1)]
        bits.append(Cat(*taps).xor() if taps else C(0, 1))
    return Cat(*bits)


class CRC32Stream(wiring.Component):
    """CRC-32 of each frame of a beat stream, one beat per clock, one result per frame.

    See the module documentation for the state convention, the partial last beat and the pipeline.

    Parameters
    ----------
    data_width : int
        Beat width in bits: a multiple of 8 from 64 to 512 (default 512, OpenNIC's ``tdata``).
    init : int
        Initial register, 32 bits (default 0xFFFFFFFF, the Ethernet FCS; 0 for the ICRC fed in place).
    xorout : int
        Final XOR, 32 bits (default 0xFFFFFFFF).

    Members
    -------
    i : In(stream.Signature(CRCBeat(data_width)))
        Beats. A frame ends with ``last``; ``keep`` is read on the last beat only.
    o : Out(stream.Signature(32))
        One CRC per frame, in frame order, ``latency`` clocks after its last beat is taken when ``o`` is not
        back-pressured; transmitted least significant byte first.

    Raises
    ------
    TypeError
        If a parameter is not an integer.
    ValueError
        If ``data_width`` is not a multiple of 8 from 64 to 512, or ``init`` or ``xorout`` does not fit 32 bits.
    """

    #: Largest XOR the data-term stage computes per register (two LUT6 levels: 6 x 6 inputs).
    CHUNK = 36
    #: Bits of ``j`` per stage of the un-advance cascade. Measured with Yosys for 512 bits: 1 gives 3,004 LUT
    #: cells and 5 levels (latency 10), 2 gives 3,245 and 5 (latency 7), 3 gives 3,669 and 6 (latency 6, an 8-way
    #: choice of matrices being the deepest stage). One bit is the cheapest and the shallowest in principle; the
    #: longer latency is cheap for a deparser, whose beat delay line costs the same in SRLs up to 32 deep.
    CASCADE_BITS = 1

    def __init__(self, *, data_width=512, init=CRC32_INIT, xorout=CRC32_XOROUT):
        for name, value in (("data_width", data_width), ("init", init), ("xorout", xorout)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
        if data_width % 8 or not 64 <= data_width <= 512:
            raise ValueError(f"data_width must be a multiple of 8 from 64 to 512, not {data_width}")
        for name, value in (("init", init), ("xorout", xorout)):
            if not 0 <= value <= _MASK:
                raise ValueError(f"{name} must fit 32 bits, not {value:#x}")
        self._data_width = data_width
        self._init = init
        self._xorout = xorout
        super().__init__({
            "i": In(stream.Signature(CRCBeat(data_width))),
            "o": Out(stream.Signature(32)),
        })

    @property
    def data_width(self):
        return self._data_width

    @property
    def n_bytes(self):
        return self._data_width // 8

    @property
    def init(self):
        return self._init

    @property
    def xorout(self):
        return self._xorout

    @property
    def _j_bits(self):
        return (self.n_bytes - 1).bit_length()

    @property
    def _groups(self):
        """(lo, hi) bit ranges of ``j``, one per cascade stage."""
        step = self.CASCADE_BITS
        return [(lo, min(lo + step, self._j_bits)) for lo in range(0, self._j_bits, step)]

    @property
    def cascade_stages(self):
        """Register stages of the un-advance cascade."""
        return len(self._groups)

    @property
    def latency(self):
        """Clock edges from the one that takes a frame's last beat to the one that hands over its CRC, when ``o``
        is not back-pressured."""
        return 4 + self.cascade_stages

    def elaborate(self, platform):
        m = Module()
        n, w = self.n_bytes, self._data_width
        state_rows, data_rows = crc32_matrix(n)
        j_bits = self._j_bits

        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]

        # Framing: the beat after a last beat (or reset) starts a frame.
        first = Signal(init=1)
        with m.If(self.i.valid & advance):
            m.d.sync += first.eq(self.i.payload.last)

        # Stage 1: input registers; invalid bytes of a last beat cleared (maps to the flip-flops' synchronous reset).
        s1_valid = Signal()
        s1_first, s1_last = Signal(reset_less=True), Signal(reset_less=True)
        s1_data = Signal(w, reset_less=True)
        s1_keep = Signal(n, reset_less=True)
        beat = self.i.payload
        with m.If(advance):
            m.d.sync += [
                s1_valid.eq(self.i.valid), s1_first.eq(first), s1_last.eq(beat.last), s1_keep.eq(beat.keep),
            ]
            for b in range(n):
                with m.If(beat.last & ~beat.keep[b]):
                    m.d.sync += s1_data[8 * b:8 * b + 8].eq(0)
                with m.Else():
                    m.d.sync += s1_data[8 * b:8 * b + 8].eq(beat.data[8 * b:8 * b + 8])

        # Stage 2: the data term in chunks, and the invalid-byte count j of a last beat.
        s2_valid = Signal()
        s2_first, s2_last = Signal(reset_less=True), Signal(reset_less=True)
        s2_j = Signal(j_bits, reset_less=True)
        chunks = []
        for o, row in enumerate(data_rows):
            taps = [c for c in range(w) if row >> c & 1]
            row_chunks = []
            for k in range(0, len(taps), self.CHUNK):
                name = f"d{o}_{k // self.CHUNK}"
                part = Signal(name=name, reset_less=True)
                with m.If(advance):
                    m.d.sync += part.eq(Cat(*(s1_data[c] for c in taps[k:k + self.CHUNK])).xor())
                row_chunks.append(part)
            chunks.append(row_chunks)
        with m.If(advance):
            m.d.sync += [
                s2_valid.eq(s1_valid), s2_first.eq(s1_first), s2_last.eq(s1_last),
                s2_j.eq(_invalid_count(s1_keep, j_bits)),
            ]

        # Stage 3: the chunks summed into the data term, with the start of a frame folded in (A**n @ init).
        start = crc32_shift_matrix(n)
        start_term = 0
        for o in range(32):
            start_term |= (bin(start[o] & self._init).count("1") & 1) << o
        s3_valid = Signal()
        s3_first, s3_last = Signal(reset_less=True), Signal(reset_less=True)
        s3_j = Signal(j_bits, reset_less=True)
        s3_term = Signal(32, reset_less=True)
        with m.If(advance):
            m.d.sync += [s3_valid.eq(s2_valid), s3_first.eq(s2_first), s3_last.eq(s2_last), s3_j.eq(s2_j)]
            for o in range(32):
                data_term = Cat(*chunks[o]).xor() if chunks[o] else C(0, 1)
                m.d.sync += s3_term[o].eq(data_term ^ (s2_first & (start_term >> o & 1)))

        # Stage 4: the loop. Only A**n @ state, gated off at the start of a frame, and the term are in it.
        state = Signal(32, reset_less=True)
        with m.If(advance & s3_valid):
            m.d.sync += state.eq(s3_term ^ Mux(s3_first, 0, xor_matrix(state_rows, state)))
        s4_valid = Signal()
        s4_j = Signal(j_bits, reset_less=True)
        with m.If(advance):
            m.d.sync += [s4_valid.eq(s3_valid & s3_last), s4_j.eq(s3_j)]

        # Stages 5..: state_k = A**-j @ state, CASCADE_BITS of j a stage; the last stage applies xorout.
        x, x_valid, x_j = state, s4_valid, s4_j
        for stage, (lo, hi) in enumerate(self._groups):
            final = stage == self.cascade_stages - 1
            out = self.o.payload if final else Signal(32, name=f"unshift{stage}", reset_less=True)
            out_valid = self.o.valid if final else Signal(name=f"unshift{stage}_valid")
            out_j = None if final else Signal(j_bits, name=f"unshift{stage}_j", reset_less=True)
            flip = self._xorout if final else 0
            with m.If(advance):
                m.d.sync += out_valid.eq(x_valid)
                if not final:
                    m.d.sync += out_j.eq(x_j)
                with m.Switch(x_j[lo:hi]):
                    for v in range(1 << (hi - lo)):
                        with m.Case(v):
                            m.d.sync += out.eq(crc32_shift(x, -(v << lo)) ^ flip)
            x, x_valid, x_j = out, out_valid, out_j
        return m
