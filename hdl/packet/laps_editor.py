"""LAPS header editor: the deparser side of the LAPS shim. It inserts a LAPS header into a UDP frame, removes one,
or updates one in place, and keeps the IP and UDP lengths, the UDP destination port and the checksums right (LAPS,
IEEE ToN, section III-B; the encapsulation is the parser's, ``docs/packet_io.md``, "LAPS encapsulation").

Frames come on ``s_axis``; one :func:`LapsEdit` per frame comes, in frame order, on ``act``, with the offsets the
parser found (``l3_off``, ``l4_off``, ``ipv6``, and for UPDATE and REMOVE the frame's ``laps_count`` as ``count``).
The LAPS header is at ``h = l4_off + 8``; ``K = 12 + 4 * count`` bytes long.

* **UPDATE**: byte ``h`` bits 7 and 6 become ``probe`` and ``ack`` (bits 5 to 0 kept), byte ``h+1`` ``sr_idx``,
  ``h+2..3`` ``pid``, ``h+4..9`` ``time``. Anchors, count and lengths unchanged; the IPv4 header is not touched.
* **INSERT**: ``K`` bytes go in at ``h``: byte 0 ``probe<<7 | ack<<6 | count``, ``sr_idx``, ``pid``, ``time``,
  then in bytes 10-11 the frame's original UDP destination port (the *inner port*: a documented use of the
  reserved bytes, so that REMOVE can restore it), then anchors 0 to ``count - 1`` (anchor ``i`` in bits
  ``32i+31:32i`` of ``anchors``). The UDP destination port becomes ``laps_port``; the UDP length grows by ``K``;
  IPv4: the total length grows by ``K`` and the header checksum is updated incrementally (RFC 1624 eqn 3, the
  total-length word the only one changed); IPv6: the payload length grows by ``K``.
* **REMOVE**: the ``K`` bytes at ``h`` go; the UDP destination port becomes the inner port (header bytes 10-11);
  lengths shrink by ``K``; the IPv4 checksum is updated likewise.
* **UDP checksum** (all three): IPv4: set to 0 (no checksum, RoCEv2 practice). IPv6: updated incrementally: the
  UDP length counts twice (datagram and pseudo-header), the port change, and the words of the inserted header
  (added), of the removed one (subtracted) or the five changed words (UPDATE), the old values read from the frame.
  ``K`` is a multiple of 4 and ``h`` even, so the payload keeps its 16-bit alignment and its sum. A computed 0 is
  sent as 0xFFFF; a zero IPv6 checksum stays 0 (treated as "none": a zero checksum is invalid in IPv6, so such a
  frame was not checkable before either).
* **drop** discards the frame, whatever ``op`` says (so does a frame longer than ``depth`` beats, below).

**When an edit applies** (the golden model's :func:`lbpipe.sim.packet.laps_editor.edit_applies`, written
there again; otherwise the frame passes unchanged and is counted as refused):
``l4_off`` even, ``l3_off`` 14, 18 or 22, ``count`` at most 4; and, where the brief that fixed the rules was
silent, ``l4_off >= l3_off + 20`` (the UDP header after the IP fields written) and ``h + K <= 128`` (every byte read
or written, and the header removed, within the frame's first two beats; a real header gives at most 118); the frame
long enough (INSERT: ``h`` at most its length; UPDATE, REMOVE: ``h + K`` at most its length: both decided from the
first two beats' byte counts, since ``h + K <= 128``); store-and-forward only, the result at most ``depth`` beats.
UPDATE and REMOVE trust ``count`` and do not check the destination port (the parser did).

**Cut-through** (``cut_through=True``; docs/packet_io.md, "Cut-through"): no length FIFO and no cut; a frame's
first beat enters the pipeline as soon as its action is there, and its first beat leaves a constant 13 cycles
after it came in, whatever its size. Nothing the editor writes depends on the frame's end (the lengths are the
header's plus or minus ``K``; the checksums' old values are header bytes), and ``tkeep``/``tlast`` are made beat by
beat from the frame's own end (below), so no stage needs the whole frame. Frames of any length pass (no too-long
rule, no "result fits" rule: nothing holds them whole).

**Frames longer than the buffer** (store-and-forward; more than ``depth`` beats, ``depth * 64`` bytes) are dropped,
whatever their action says (PASS, an edit, drop or not), and counted in ``stats`` counter 6 (``too_long``) and in no
other counter. Store-and-forward, such a frame cannot wait in the beat FIFO for its length, known only after its
last beat (it would fill the FIFO and hold ``s_axis.tready`` low for good): its ``depth``-th beat is written as its
last with its length entry marked cut, the rest of it is taken (one beat per clock) and discarded, and when its
action pairs with it the action becomes a drop; its beats in the FIFO leave as a dropped frame's do. So no input
deadlocks the editor. A frame of exactly ``depth`` beats passes as before (an INSERT on it is refused: its result
would be too long).

**Structure.** A beat FIFO (``depth`` beats, each beat with its byte count), an action FIFO (``depth`` entries)
and, store-and-forward, a FIFO of frame lengths, counted as frames come in (with the cut mark of a frame longer than
the beat FIFO): the rule "the result at most ``depth`` beats" needs the length at a frame's first beat, so in that
mode a frame leaves only once its last beat is in. Then a pipeline: a pairing register sends each beat with the next
beat of its frame (so the first two beats, the edit window, are seen together) and precomputes from the FIFO heads
what the decision needs (``h``, ``K``, ``h + K``, "the result fits", the checks by constant comparison); the
pre-shift stage registers the pair with the 25 words of the window from word ``8 * (l4_off >> 4)`` on (the coarse
half of the shift by ``l4_off / 2`` words) and the window checks; E1 decides and reads the fields (IP words at
three possible offsets, the UDP header and 28 bytes at ``h``, by the fine half of the shift: an 8-position mux);
E2 builds
the new header, lengths, port and the checksum terms; E2b and E2c reduce the sums' operands by carry-save adders
modulo 0xFFFF (the carry out of bit 15 goes round to bit 0) and E2b shifts the new header to ``h``; E3 adds the
last two operands with an end-around carry and registers, per 16-bit word, what E4 writes there; E4 writes the
window (frame bytes 0 to 127) and registers the merge's byte masks and ``keep`` shifted by ``K`` lanes; on the way
out of E4, INSERT's header is merged in and each beat's output ``tkeep``/``tlast`` chosen (from its own and the next
beat's ``tkeep``/``tlast``: no frame length); the output stage shifts the rest of the frame by ``K`` bytes: ``K/4``
(3 to 7) four-byte lanes, from the previous beat (INSERT: a carry register) or the next one (REMOVE: the paired
beat), and writes the beat into the output FIFO (``OUT_DEPTH`` beats), which drives ``m_axis``. Every stage from
the pre-shift on loads on one register, ``go``: set while the output FIFO has room for every beat the pipeline may
still write, clear for the one cycle INSERT's extra beat is written. No path runs from ``m_axis.tready`` into the
pipeline's enables, and each path is within 6 logic levels (the datasheet's figures).

**Throughput.** One beat per clock for PASS, UPDATE, refused and dropped frames (frames queued), and for frames
longer than the buffer (their first ``depth`` beats leave the FIFO as a dropped frame's, the rest is discarded as
it comes). An INSERT that makes the frame a beat longer costs one extra output cycle, during which the input waits; a
REMOVE that makes it a beat shorter leaves one idle cycle at the output FIFO's input (on ``m_axis`` only when the
FIFO has run empty). Each output beat carries the ``tuser`` of the
input beat it is made with (the extra INSERT beat: the last one's); lanes outside ``tkeep`` are not defined.

Counters (``stats``, 32 bits each, wrapping; cleared by reset), one per frame, counted as its first beat leaves
the merge stage: 0 frames passed unchanged (op PASS), 1 updated, 2 inserted, 3 removed, 4 dropped (by the action),
5 refused (the edit did not apply; the frame passed unchanged), 6 too long (longer than ``depth`` beats: dropped,
whatever the action).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature, AxisBeat
from lbpipe.hdl.lib.control import check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import TAG_BITS
from lbpipe.hdl.packet.parser import LAPS_PORT, check_laps_port

__all__ = ["LapsEditor", "LapsEdit", "N_COUNTERS", "OP_PASS", "OP_UPDATE", "OP_INSERT", "OP_REMOVE", "WINDOW",
           "check_parameters"]

_BEAT = 64
#: Bytes at the frame start an edit may touch (two beats): the bytes read and written, and the header removed.
WINDOW = 2 * _BEAT
#: Beats of the output FIFO between the output stage and ``m_axis`` (room for the beats in flight when it stops).
OUT_DEPTH = 16
#: Counters in ``stats``.
N_COUNTERS = 7
OP_PASS, OP_UPDATE, OP_INSERT, OP_REMOVE = range(4)
#: The offsets of the IP header an edit accepts (Ethernet with 0, 1 or 2 VLAN tags).
L3_OFFSETS = (14, 18, 22)


def LapsEdit():
    """What to do with one frame (first field in the low bits).

    =======  =====  ==========================================================================================
    field    bits   meaning
    =======  =====  ==========================================================================================
    tag      16     opaque, not interpreted (the pipeline's frame tag)
    op       2      0 PASS, 1 UPDATE, 2 INSERT, 3 REMOVE
    drop     1      discard the frame (wins over ``op``)
    ipv6     1      the IP header is IPv6 (else IPv4)
    l3_off   8      offset of the IP header
    l4_off   8      offset of the UDP header
    count    3      anchors: of the header to insert (INSERT), of the frame's header (UPDATE, REMOVE)
    probe    1      LAPS byte 0 bit 7 (INSERT, UPDATE)
    ack      1      LAPS byte 0 bit 6 (INSERT, UPDATE)
    sr_idx   8      LAPS byte 1 (INSERT, UPDATE)
    pid      16     LAPS bytes 2-3 (INSERT, UPDATE)
    time     48     LAPS bytes 4-9 (INSERT, UPDATE)
    anchors  128    anchor ``i`` in bits ``32i+31:32i`` (INSERT, anchors 0 to ``count - 1``)
    =======  =====  ==========================================================================================
    """
    return data.StructLayout({"tag": TAG_BITS, "op": 2, "drop": 1, "ipv6": 1, "l3_off": 8, "l4_off": 8,
                              "count": 3, "probe": 1, "ack": 1, "sr_idx": 8, "pid": 16, "time": 48, "anchors": 128})


def check_parameters(*, depth, user_width, laps_port, cut_through=False):
    """Raise ``TypeError``/``ValueError`` for parameters the block does not take (shared with the golden model)."""
    if not isinstance(cut_through, bool):
        raise TypeError(f"cut_through must be a bool, not {cut_through!r}")
    for name, value, lo, hi in (("depth", depth, 2, 4096), ("user_width", user_width, 1, 64)):
        check_int(name, value)
        if not lo <= value <= hi:
            raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")
    check_laps_port(laps_port)


def _byte(value, index):
    return value[8 * index:8 * index + 8]


def _be(value, offset, size):
    """The big-endian ``size``-byte field at byte ``offset`` of a little-endian-laned byte vector."""
    return Cat(*[_byte(value, offset + size - 1 - k) for k in range(size)])


def _be_bytes(field, size):
    """``field`` (an integer value of ``size`` bytes) as bytes in lane order, most significant byte first."""
    return Cat(*[field[8 * (size - 1 - k):8 * (size - k)] for k in range(size)])


def _ones(keep):
    """Bytes a contiguous ``tkeep`` (lanes 0 to c-1) holds, c in 0 to 64, with no adder: bit k of c is set when c
    lies in one of the runs ``[j * 2**k, (j + 1) * 2**k)``, j odd, and c lies in such a run when lane ``j * 2**k - 1``
    is kept and lane ``(j + 1) * 2**k - 1`` is not (or lies past the beat). So bit k is an OR of ``n / 2**(k + 1)``
    pairs of lanes: 32 pairs for bit 0, one lane for bit 6 (a pair per value of c for every bit gave synthesis
    64-input ORs to chain: 7 logic levels in ``laps-tx-wire``)."""
    n = len(keep)
    bits = []
    for k in range((n).bit_length()):
        run = 1 << k
        terms = [keep[lo - 1] & (~keep[lo + run - 1] if lo + run - 1 < n else 1)
                 for lo in range(run, n + 1, 2 * run)]
        bits.append(Cat(*terms).any() if terms else Const(0, 1))
    return Cat(*bits)


def _sig(m, value, name):
    """``value`` through a named combinational signal (keeps the expression trees small)."""
    sig = Signal(len(value), name=name)
    m.d.comb += sig.eq(value)
    return sig


#: The LAPS header lengths ``K`` (0 to 4 anchors).
_KS = (12, 16, 20, 24, 28)


def _csa_reduce(m, operands, n_out, name):
    """Reduce 16-bit ``operands`` to ``n_out`` whose sum is congruent to theirs modulo 0xFFFF, by 3:2 carry-save
    adders whose carry out of bit 15 goes round to bit 0 (2**16 is 1 modulo 0xFFFF). One LUT level per round;
    the outputs are all 0 only if the operands are all 0 (a sum bit and a carry bit are both 0 only when all
    three inputs are), so a zero sum stays distinguishable from 0xFFFF."""
    ops = list(operands)
    level = 0
    while len(ops) > n_out:
        nxt = []
        while len(ops) >= 3 and len(nxt) + len(ops) > n_out:
            a, b, c = ops.pop(0), ops.pop(0), ops.pop(0)
            s = _sig(m, a ^ b ^ c, f"{name}_s{level}_{len(nxt)}")
            maj = (a & b) | (a & c) | (b & c)
            cy = _sig(m, Cat(maj[15], maj[:15]), f"{name}_c{level}_{len(nxt)}")
            nxt += [s, cy]
        ops = nxt + ops
        level += 1
    return ops


def _thermo_decode(value):
    """The first half of a thermometer of a 7-bit ``value`` (:func:`_thermo`), registered by the caller so that the
    synthesis cannot fold the two halves into a ripple: ``value``'s high four bits greater than and equal to each
    of 0..15, its low three bits greater than each of 0..7 (40 bits, one LUT each)."""
    hi, lo = value[3:7], value[:3]
    return Cat(*[hi > v for v in range(16)], *[hi == v for v in range(16)], *[lo > v for v in range(8)])


def _thermo(dec, n):
    """``Cat(g < value for g in range(n))`` from :func:`_thermo_decode`'s register, one LUT per bit."""
    gt_hi, eq_hi, gt_lo = dec[:16], dec[16:32], dec[32:40]
    return Cat(*[gt_hi[g >> 3] | (eq_hi[g >> 3] & gt_lo[g & 7]) for g in range(n)])


def _ones_add(m, a, b, name):
    """Ones' complement sum of two 16-bit operands by an end-around carry: ``a + b`` and ``a + b + 1`` side by
    side, the carry out of the first choosing. 0 only if both are 0 (else 1 to 0xFFFF)."""
    s0 = _sig(m, a + b, f"{name}_0")
    s1 = _sig(m, a + b + 1, f"{name}_1")
    return _sig(m, Mux(s0[16], s1[:16], s0[:16]), name)


class LapsEditor(wiring.Component):
    """LAPS header insert, remove and update (see the module docstring).

    Parameters
    ----------
    depth : int
        Beat FIFO, in beats, 2 to 4096; the longest frame in and out is ``depth`` beats (longer ones are dropped
        and counted in ``stats`` counter 6).
    user_width : int
        Width of ``tuser``.
    laps_port : int
        UDP destination port INSERT writes (1 to 65535, not 4791).

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, user_width))
    m_axis : Out(AXI4StreamSignature(512, user_width))
    act : In(stream.Signature(LapsEdit()))
    stats : Out(32 * N_COUNTERS)
        The counters of the module docstring; counter ``i`` in bits ``32i+31:32i``.

    Raises
    ------
    TypeError, ValueError
        For parameters of the wrong type or out of range.
    """

    #: Register stages from the edge that takes a frame's first beat out of the beat FIFO to the one that puts its
    #: first output beat in the ``m_axis`` register (pairing, pre-shift, extraction, terms, two carry-save rounds,
    #: checksums, write, merge, output stage into the output FIFO, the output FIFO's register).
    latency = 11

    def __init__(self, *, depth=256, user_width=1, laps_port=LAPS_PORT, cut_through=False):
        check_parameters(depth=depth, user_width=user_width, laps_port=laps_port, cut_through=cut_through)
        self._cut_through = cut_through
        self._depth = depth
        self._user_width = user_width
        self._laps_port = laps_port
        axis = AXI4StreamSignature(data_width=8 * _BEAT, user_width=user_width)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "act": In(stream.Signature(LapsEdit())),
            "stats": Out(32 * N_COUNTERS),
        })

    @property
    def depth(self):
        return self._depth

    @property
    def laps_port(self):
        return self._laps_port

    @property
    def cut_through(self):
        return self._cut_through


    def elaborate(self, platform):
        """The block diagram of the datasheet, one helper per stage; (n) is the register stage, as in ``latency``::

            s_axis -> beat FIFO ---+
            act -> action FIFO ----+-> pairing -> pre-shift -> E1 -> E2 -> E2b -> E2c -> E3 -> E4 -> merge -> out -+
            (frame lengths FIFO) --+     (1)         (2)       (3)   (4)   (5)    (6)    (7)   (8)    (9)    (10)  |
                                                                                               |              |
                                                                 stats <- counters <-----------+ m_axis <- out FIFO (11)

        Every stage from the pre-shift on loads on ``go``, one register (:meth:`_output`): set while the output FIFO
        has room for every beat in flight, clear for the cycle INSERT's extra beat is written.
        """
        m = Module()
        beats, acts = self._buffers(m)
        lens = self._input(m, beats)
        # One load enable for every stage from E1 on, ``go``: a register AND a register (see :meth:`_output`).
        go = Signal(init=1)
        p = self._pairing(m, beats, acts, lens, go)
        q = self._preshift(m, p, go)
        e1 = self._e1(m, q, go)
        e2 = self._e2(m, e1, go)
        sb = self._e2b(m, e2, go)
        sc = self._e2c(m, sb, go)
        e3 = self._e3(m, sc, go)
        e4 = self._e4(m, e3, go)
        x, m1_merged = self._merge(m, e4, go)
        is_ins, is_rem = self._output(m, x, m1_merged, go)
        x_leaves = go
        self._counters(m, x, x_leaves, is_ins, is_rem)
        return m

    # -- fields and helpers shared by the stages -------------------------------------------------------------------

    @property
    def _len_bits(self):
        """Width of a frame length in bytes (``depth`` beats at most)."""
        return (self._depth * _BEAT).bit_length()

    def _beat_fields(self):
        """The fields each stage register keeps of its beat: the beat (``cur``) and the next one of its frame
        (``nxt``), ``keep``, ``last``, ``user``, the beat's index in the frame (0, 1, then 2 for all later) and the next
        beat's ``keep`` and ``last`` (``nkeep``, ``nlast``; 0 after the frame's last beat), from which the output
        stage makes ``tkeep`` and ``tlast`` beat by beat (no frame length needed)."""
        return dict(valid=1, cur=8 * _BEAT, nxt=8 * _BEAT, keep=_BEAT, last=1, user=self._user_width, idx=2,
                    nkeep=_BEAT, nlast=1)

    def _edit_fields(self):
        """The edit context E2 to E3 carry along: the op to apply (PASS if refused), ``drop``, ``refused``, ``cut``
        (the frame was longer than the beat FIFO), whether the action was PASS, IPv6, ``h``, ``K``, the IP offset
        (one-hot) and ``l4_off / 2``."""
        return dict(op=2, drop=1, refused=1, cut=1, is_pass=1, ipv6=1, h=7, k=6, hk=8, l3_sel=3, l4w=6)

    @staticmethod
    def _stage(name, **fields):
        """A stage register: one ``Signal`` named ``{name}_{field}`` per field (``fields`` gives the widths)."""
        return {k: Signal(v, name=f"{name}_{k}") for k, v in fields.items()}

    # -- buffers ---------------------------------------------------------------------------------------------------

    def _buffers(self, m):
        """The beat FIFO (``depth`` beats, filled by :meth:`_input`) and the action FIFO (``act``, ``depth``
        entries)."""
        m.submodules.beats = beats = StreamFIFO(shape=AxisBeat(data_width=8 * _BEAT,
                                                               user_width=self._user_width + 7),
                                                depth=self._depth)
        m.submodules.acts = acts = StreamFIFO(shape=LapsEdit(), depth=self._depth)
        wiring.connect(m, wiring.flipped(self.act), acts.i)
        return beats, acts

    def _input(self, m, beats):
        """``s_axis`` into the beat FIFO, and each frame's length, counted as it comes in, into the length FIFO:
        the edit is decided at a frame's first beat and needs its length (a frame waits in the beat FIFO until its
        last beat has come in). A frame longer than the beat FIFO would wait forever for room its own beats hold:
        its ``depth``-th beat is written as its last, its length entry is marked ``cut``, and the rest of it is
        taken and discarded. Registers the beats of the frame written so far, whether the rest of a cut frame is
        being discarded, and the length pending for the FIFO (``pend``). The FIFO has one entry per frame whose
        first beat is still in the beat FIFO, so ``depth`` entries are enough: while ``pend`` waits, its frame's
        first beat is in the beat FIFO too, so the FIFO holds at most ``depth - 1`` entries and takes it within
        a cycle (a FIFO of ``depth`` items may refuse for one cycle while its output register refills), and no
        other frame can end meanwhile unless the beat FIFO has room, which it has not when all its beats are
        first beats. (A power-of-two depth keeps the FIFO's counters one carry block shorter.) Not in the
        pipeline's latency. Each beat's byte count (``tkeep``'s ones, 1 to 64) rides in the beat FIFO above its
        ``tuser`` (for the decision's window checks). Cut-through: no length FIFO and no cut, the beats go
        straight into the beat FIFO. Returns the length FIFO (``None`` cut-through)."""
        s = self.s_axis
        cnt_in = _sig(m, _ones(s.tkeep), "in_cnt")
        m.d.comb += [beats.i.payload.data.eq(s.tdata), beats.i.payload.keep.eq(s.tkeep),
                     beats.i.payload.user.eq(Cat(s.tuser, cnt_in))]
        if self._cut_through:
            m.d.comb += [beats.i.payload.last.eq(s.tlast), beats.i.valid.eq(s.tvalid), s.tready.eq(beats.i.ready)]
            return None
        m.submodules.lens = lens = StreamFIFO(shape=data.StructLayout({"len": self._len_bits, "cut": 1}),
                                              depth=self._depth)
        in_beats = Signal(range(self._depth))   # beats of the frame on s_axis written so far (to depth - 1)
        discarding = Signal()                   # taking the rest of a cut frame
        cut = Signal()                          # this beat is the depth-th of a longer frame
        ends = Signal()                         # this beat ends the frame in the beat FIFO
        pend = Signal()
        pend_beats = Signal(range(self._depth))
        pend_cnt = Signal(7)                    # bytes of the frame's last beat, counted as it is taken
        pend_cut = Signal()
        in_xfer = Signal()
        m.d.comb += [
            cut.eq(~s.tlast & (in_beats == self._depth - 1)),
            ends.eq(s.tlast | cut),
            beats.i.payload.last.eq(ends),
            beats.i.valid.eq(s.tvalid & ~discarding), s.tready.eq(discarding | beats.i.ready),
            in_xfer.eq(s.tvalid & s.tready),
            lens.i.valid.eq(pend),
            # ``pend_cnt`` is 1 to 64: its bit 6 is the only carry into the beat count.
            lens.i.payload.len.eq(Cat(pend_cnt[:6], pend_beats + pend_cnt[6])),
            lens.i.payload.cut.eq(pend_cut),
        ]
        with m.If(pend & lens.i.ready):
            m.d.sync += pend.eq(0)
        with m.If(in_xfer):
            with m.If(discarding):
                m.d.sync += discarding.eq(~s.tlast)
            with m.Elif(ends):
                m.d.sync += [in_beats.eq(0), pend.eq(1), pend_beats.eq(in_beats), pend_cnt.eq(cnt_in),
                             pend_cut.eq(cut), discarding.eq(cut)]
            with m.Else():
                m.d.sync += in_beats.eq(in_beats + 1)
        return lens

    # -- the pipeline ----------------------------------------------------------------------------------------------

    def _pairing(self, m, beats, acts, lens, en1):
        """Pairing (stage 1): each beat leaves with the beat after it in its frame (zero after the last), so E1 sees
        the first two beats, the edit window, together. Registers a beat (``p_data``, ``p_keep``, ``p_last``,
        ``p_user``, its byte count ``p_cnt``), its index (``p_idx``) and, at a frame's first beat, the frame's
        action (``p_act``) and, store-and-forward, its ``cut`` mark (``p_cut``; a cut frame's action becomes a
        drop) and whether INSERT's result fits the buffer (``p_room``, length + ``K`` at most ``depth`` beats),
        with what E1's
        decision needs, computed from the FIFO heads: ``h``, ``K``, ``h + K`` and ``p_static``, the checks that do
        not involve the frame's bytes (constant comparisons only); the next beat is read from the beat FIFO's head
        (``nxt``). A first beat is taken when its action is there (store-and-forward: and its length, known once
        its last beat is in; cut-through: at once). Returns the stage's fields."""
        dbits, uw, depth_bytes = 8 * _BEAT, self._user_width, self._depth * _BEAT
        head = beats.o.payload
        in_first = Signal(init=1)
        p_valid, p_last, p_idx = Signal(), Signal(), Signal(2)
        p_data, p_keep, p_user, p_cnt = Signal(dbits), Signal(_BEAT), Signal(uw), Signal(7, name="p_cnt")
        p_act = Signal(LapsEdit())
        p_cut = Signal()
        p_h, p_k, p_hk = Signal(9, name="p_h"), Signal(6, name="p_k"), Signal(9, name="p_hk")
        p_room = Signal(name="p_room")
        p_static = Signal(name="p_static")
        p_move, take = Signal(), Signal()
        known = acts.o.valid if lens is None else acts.o.valid & lens.o.valid
        m.d.comb += [
            p_move.eq(p_valid & en1 & (p_last | beats.o.valid)),
            take.eq(beats.o.valid & (~in_first | known) & (~p_valid | p_move)),
            beats.o.ready.eq(take),
            acts.o.ready.eq(take & in_first),
        ]
        if lens is not None:
            m.d.comb += lens.o.ready.eq(take & in_first)
        a = acts.o.payload
        k8 = Signal(6)          # 8 + K
        kk = Signal(6)          # K = 12 + 4 * count (12 for a count over 4, refused anyway): bits 2-5 count + 3
        m.d.comb += [kk.eq(Cat(Const(0, 2), Mux(a.count > 4, 3, a.count[:3] + 3)[:4])),
                     k8.eq(Cat(Const(0, 2), Mux(a.count > 4, 5, a.count[:3] + 5)[:4]))]
        # l4_off >= l3_off + 20 and h + K <= 128, each as constant comparisons per l3_off and per count.
        l4_after = ((a.l3_off == 14) & (a.l4_off >= 34)) | ((a.l3_off == 18) & (a.l4_off >= 38)) | \
                   ((a.l3_off == 22) & (a.l4_off >= 42))
        in_window = Cat(*[(a.count == c) & (a.l4_off <= WINDOW - 20 - 4 * c) for c in range(5)]).any()
        with m.If(p_move):
            m.d.sync += p_valid.eq(0)
        with m.If(take):
            m.d.sync += [p_valid.eq(1), p_data.eq(head.data), p_keep.eq(head.keep), p_last.eq(head.last),
                         p_user.eq(head.user[:uw]), p_cnt.eq(head.user[uw:]), in_first.eq(head.last)]
            with m.If(in_first):
                m.d.sync += [p_act.eq(a), p_idx.eq(0),
                             p_h.eq(a.l4_off + 8), p_k.eq(kk), p_hk.eq(a.l4_off + k8),
                             p_static.eq(~a.l4_off[0] & l4_after & in_window)]
                if lens is not None:
                    m.d.sync += [p_act.drop.eq(a.drop | lens.o.payload.cut), p_cut.eq(lens.o.payload.cut),
                                 p_room.eq(Cat(*[(a.count == c) & (lens.o.payload.len <= depth_bytes - kc)
                                                 for c, kc in enumerate(_KS)]).any())]
            with m.Elif(p_idx != 2):
                m.d.sync += p_idx.eq(p_idx + 1)
        p_nxt = Mux(p_last, 0, head.data)
        return dict(valid=p_valid, move=p_move, data=p_data, nxt=p_nxt, head=head, keep=p_keep, last=p_last,
                    user=p_user, cnt=p_cnt, idx=p_idx, act=p_act, cut=p_cut, h=p_h, k=p_k, hk=p_hk, room=p_room,
                    static=p_static)

    def _preshift(self, m, p, en):
        """Pre-shift (stage 2): the pairing register's beat with the beat after it (``nxt``, with its ``keep`` and
        ``last``: ``nkeep``, ``nlast``), as E1 used to read them from the beat FIFO's head, and the coarse half of
        E1's shift by ``l4_off / 2`` words: the 25 words (400 bits) of the window (frame bytes 0 to 127, zero
        beyond) from word ``8 * (l4_off >> 4)`` on (``coarse``), so that E1 shifts by the low three bits only (an
        8-position mux instead of a 64-position one: the barrel shift is split across the two registers). And
        the window checks of the decision, from the byte counts of the beat and the next one (the frame's bytes
        in the window, ``wlen``, 1 to 128): ``h <= wlen`` (``fit_h``) and ``h + K <= wlen`` (``fit_hk``), exact at
        a frame's first beat and kept for the frame's later beats, so that E1 decides the same for each beat of a frame
(``h + K <= 128`` is one of the static checks). Everything else
        of the pairing register passes on; ``valid`` is the pairing register's move."""
        dbits, uw = 8 * _BEAT, self._user_width
        head = p["head"]
        win = _sig(m, Cat(p["data"], head.data, Const(0, 512)), "pre_win")
        coarse = _sig(m, win.bit_select(p["act"].l4_off[4:7] * 128, 400), "pre_coarse")
        ncnt = head.user[uw:]
        # 64 + ncnt for ncnt 1 to 64 (bit 6 set only for 64).
        wlen = _sig(m, Mux(p["last"], p["cnt"], Mux(head.last, Cat(ncnt[:6], ~ncnt[6], ncnt[6]), 128)), "pre_wlen")
        passed = ("data", "keep", "last", "user", "idx", "act", "cut", "h", "k", "hk", "room", "static")
        q = {n: Signal.like(p[n], name=f"q_{n}") for n in passed}
        q.update(valid=Signal(name="q_valid"), nxt=Signal(dbits, name="q_nxt"), coarse=Signal(400, name="q_coarse"),
                 nkeep=Signal(_BEAT, name="q_nkeep"), nlast=Signal(name="q_nlast"), fit_h=Signal(name="q_fit_h"),
                 fit_hk=Signal(name="q_fit_hk"))
        with m.If(en):
            m.d.sync += [q[n].eq(p[n]) for n in passed]
            m.d.sync += [q["valid"].eq(p["move"]), q["nxt"].eq(p["nxt"]), q["coarse"].eq(coarse),
                         q["nkeep"].eq(Mux(p["last"], 0, head.keep)), q["nlast"].eq(~p["last"] & head.last)]
            # Kept from the frame's first beat, so that every beat of a frame carries the frame's decision.
            with m.If(p["move"] & (p["idx"] == 0)):
                m.d.sync += [q["fit_h"].eq(p["h"] <= wlen), q["fit_hk"].eq(p["hk"] <= wlen)]
        return q

    def _e1(self, m, p, en1):
        """E1 (stage 3): the decision and the fields the edit reads. Registers the beat pair, the op to apply (PASS
        if the edit is refused or the frame dropped), ``drop``, ``refused``, ``cut``, ``h``, ``K``, ``h + K``, the
        IP offset (one-hot ``l3_sel``), the IP words (total length, payload length, header
        checksum, at three possible offsets), the UDP header's port, length and checksum, and the 28 bytes at
        ``h`` (the fine half of the shift by ``l4_off / 2`` words). The fields are read from the window as the
        pre-shift stage registered it (the next beat as the FIFO offered it): an edit applies only when every byte
        it reads is inside the frame."""
        a = p["act"]
        applies = Signal()
        room = 1 if self._cut_through else p["room"]
        fits = Mux(a.op == OP_INSERT, p["fit_h"] & room, p["fit_hk"])
        m.d.comb += applies.eq((a.op != OP_PASS) & p["static"] & fits)
        win = _sig(m, Cat(p["data"], p["nxt"]), "win")
        # The fine half of the shift by ``l4_off / 2`` words: the low three bits of it, within the coarse
        # window the pre-shift stage registered.
        fine = a.l4_off[1:4]
        udp = _sig(m, p["coarse"].bit_select(fine * 16, 64), "udp")
        hdr_old = _sig(m, p["coarse"][64:].bit_select(fine * 16, 224), "hdr_old")
        l3_fields = [Cat(_be(win, l3 + 2, 2), _be(win, l3 + 4, 2), _be(win, l3 + 10, 2)) for l3 in L3_OFFSETS]
        l3_sel = Cat(a.l3_off == 14, a.l3_off == 18, a.l3_off == 22)
        l3_words = _sig(m, Mux(l3_sel[0], l3_fields[0], Mux(l3_sel[1], l3_fields[1], l3_fields[2])), "l3_words")

        e1 = self._stage("e1", **self._beat_fields(), act=LapsEdit(), op=2, drop=1, refused=1, cut=1, h=7, k=6,
                         hk=8, l3_sel=3, tot=16, plen=16, ipc=16, dport=16, ulen=16,
                         ucsum=16, hdr=224)
        with m.If(en1):
            m.d.sync += [
                e1["valid"].eq(p["valid"]), e1["cur"].eq(p["data"]), e1["nxt"].eq(p["nxt"]), e1["keep"].eq(p["keep"]),
                e1["last"].eq(p["last"]), e1["user"].eq(p["user"]), e1["idx"].eq(p["idx"]), e1["act"].eq(a),
                e1["nkeep"].eq(p["nkeep"]), e1["nlast"].eq(p["nlast"]),
                e1["op"].eq(Mux(applies & ~a.drop, a.op, OP_PASS)), e1["drop"].eq(a.drop),
                e1["refused"].eq(~a.drop & (a.op != OP_PASS) & ~applies), e1["cut"].eq(p["cut"]),
                e1["h"].eq(p["h"]), e1["k"].eq(p["k"]), e1["hk"].eq(p["hk"]),
                e1["l3_sel"].eq(l3_sel), e1["tot"].eq(l3_words[0:16]), e1["plen"].eq(l3_words[16:32]),
                e1["ipc"].eq(l3_words[32:48]), e1["dport"].eq(_be(udp, 2, 2)), e1["ulen"].eq(_be(udp, 4, 2)),
                e1["ucsum"].eq(_be(udp, 6, 2)), e1["hdr"].eq(hdr_old),
            ]
        return e1

    def _e2(self, m, e1, en2):
        """E2 (stage 4): the new header, lengths and port, and the checksum terms. Registers the new header
        (``hdr``: INSERT's header, UPDATE's changed bytes), the new UDP port and length, the new IP lengths, whether
        the old UDP checksum is 0, the 14 terms of the header words (added, subtracted or both for UPDATE's five
        changed words) and the inverted old values the checksums drop; the beat and the edit context pass on."""
        a1 = e1["act"]
        op1 = e1["op"]
        b0 = Cat(Mux(op1 == OP_UPDATE, _byte(e1["hdr"], 0)[:6], a1.count), a1.ack, a1.probe)
        anchors = Cat(*[_be_bytes(a1.anchors[32 * i:32 * i + 32], 4) for i in range(4)])
        hdr_new = _sig(m, Cat(b0, a1.sr_idx, _be_bytes(a1.pid, 2), _be_bytes(a1.time, 6),
                              _be_bytes(e1["dport"], 2), anchors), "hdr_new")
        delta = Mux(op1 == OP_INSERT, e1["k"], Mux(op1 == OP_REMOVE, -e1["k"], 0))
        new_dport = Mux(op1 == OP_INSERT, self._laps_port,
                        Mux(op1 == OP_REMOVE, _be(e1["hdr"], 10, 2), e1["dport"]))
        new_ulen = Signal(16)
        m.d.comb += new_ulen.eq(e1["ulen"] + delta)
        terms = []
        for i in range(14):
            old_w, new_w = _be(e1["hdr"], 2 * i, 2), _be(hdr_new, 2 * i, 2)
            inside = 2 * i < e1["k"]
            # UPDATE's five changed words count twice: the old one out (here) and the new one in (``u{i}``).
            upd = (~old_w)[:16] if i < 5 else Const(0, 16)
            term = Mux(op1 == OP_UPDATE, upd, Mux(inside, Mux(op1 == OP_INSERT, new_w, (~old_w)[:16]), 0))
            terms.append(_sig(m, term, f"term{i}"))
        upd_new = [_sig(m, Mux(op1 == OP_UPDATE, _be(hdr_new, 2 * i, 2), 0), f"term_u{i}") for i in range(5)]
        inv = lambda v: (~v)[:16]
        new_tot = (e1["tot"] + delta)[:16]

        elem = self._beat_fields()
        e2 = self._stage("e2", **elem, **self._edit_fields(), hdr=224, dport=16, ulen=16, uc0=1, plen=16,
                         tot=16, **{f"t{i}": 16 for i in range(14)}, **{f"u{i}": 16 for i in range(5)}, inv_uc=16,
                         inv_dp=16, inv_ul=16, inv_ipc=16, inv_tot=16)
        with m.If(en2):
            m.d.sync += [e2[n].eq(e1[n]) for n in (*elem, "op", "drop", "refused", "cut", "h", "k", "hk", "l3_sel")]
            m.d.sync += [
                e2["is_pass"].eq(a1.op == OP_PASS), e2["ipv6"].eq(a1.ipv6), e2["l4w"].eq(a1.l4_off[1:7]),
                e2["hdr"].eq(hdr_new), e2["dport"].eq(new_dport), e2["ulen"].eq(new_ulen),
                e2["uc0"].eq(e1["ucsum"] == 0), e2["plen"].eq(e1["plen"] + delta), e2["tot"].eq(new_tot),
                e2["inv_uc"].eq(inv(e1["ucsum"])), e2["inv_dp"].eq(inv(e1["dport"])), e2["inv_ul"].eq(inv(e1["ulen"])),
                e2["inv_ipc"].eq(inv(e1["ipc"])), e2["inv_tot"].eq(inv(e1["tot"])),
            ]
            m.d.sync += [e2[f"t{i}"].eq(t) for i, t in enumerate(terms)]
            m.d.sync += [e2[f"u{i}"].eq(t) for i, t in enumerate(upd_new)]
        return e2

    def _e2b(self, m, e2, ens):
        """E2b (stage 5): the checksum sums, reduced. The ones' complement sums are kept modulo 0xFFFF as 16-bit
        carry-save operands (:func:`_csa_reduce`, the carry out of bit 15 going round to bit 0). Registers the UDP
        sum's 26 operands (header terms, UPDATE's new words, old checksum, port and length out, port and length
        in, the lengths twice) reduced to 6, the IPv4 header sum's three (old checksum and total length out, total
        length in) reduced to 2, and INSERT's and UPDATE's header shifted to ``h`` in the 128-byte window
        (``hdr``); the beat, the edit context and the new values pass on."""
        passed = (*self._beat_fields(), *self._edit_fields(), "dport", "ulen", "uc0", "plen", "tot")
        sb = self._stage("sb", **{n: len(e2[n]) for n in passed}, hdr=WINDOW * 8,
                         **{f"u{i}": 16 for i in range(6)}, **{f"i{i}": 16 for i in range(2)})
        udp = [e2[f"t{i}"] for i in range(14)] + [e2[f"u{i}"] for i in range(5)] + [
            e2["inv_uc"], e2["inv_dp"], e2["inv_ul"], e2["inv_ul"], e2["dport"], e2["ulen"], e2["ulen"]]
        udp = _csa_reduce(m, udp, 6, "usum")
        ip = _csa_reduce(m, [e2["inv_ipc"], e2["inv_tot"], e2["tot"]], 2, "isum")
        shifted = _sig(m, (e2["hdr"] << (e2["h"][1:7] * 16))[:WINDOW * 8], "shifted")
        with m.If(ens):
            m.d.sync += [sb[n].eq(e2[n]) for n in passed]
            m.d.sync += [sb[f"u{i}"].eq(v) for i, v in enumerate(udp)]
            m.d.sync += [sb[f"i{i}"].eq(v) for i, v in enumerate(ip)]
            m.d.sync += sb["hdr"].eq(shifted)
        return sb

    def _e2c(self, m, sb, ens):
        """E2c (stage 6): the UDP sum's six carry-save operands reduced to two, and the first half of E3's
        thermometers of ``h`` and ``h + K`` (``dh``, ``dhk``: :func:`_thermo_decode`; ``hk_big``: ``h + K`` is
        128); everything else passes on."""
        passed = (*self._beat_fields(), *self._edit_fields(), "dport", "ulen", "uc0", "plen", "tot", "hdr", "i0",
                  "i1")
        sc = self._stage("sc", **{n: len(sb[n]) for n in passed}, u0=16, u1=16, dh=40, dhk=40, hk_big=1)
        udp = _csa_reduce(m, [sb[f"u{i}"] for i in range(6)], 2, "usum2")
        with m.If(ens):
            m.d.sync += [sc[n].eq(sb[n]) for n in passed]
            m.d.sync += [sc["u0"].eq(udp[0]), sc["u1"].eq(udp[1]), sc["dh"].eq(_thermo_decode(sb["h"])),
                         sc["dhk"].eq(_thermo_decode(sb["hk"][:7])), sc["hk_big"].eq(sb["hk"][7])]
        return sc

    def _e3(self, m, sc, en3):
        """E3 (stage 7): the checksums and the write selects. Registers the UDP sum (``usum``, 16 bits, 0 only for
        a zero sum: a ones' complement end-around addition of the two operands) and the IPv4 header checksum
        (the inverted sum); whether the UDP checksum is written 0 (``uc_zero``: IPv4, or a zero IPv6 checksum);
        and, per 16-bit word of the window, whether E4 writes there the UDP port, length or checksum, UPDATE's
        header bytes (``s_dp``, ``s_ul``, ``s_uc``, ``s_fx``), and at the IP offset the total length, header
        checksum or payload length (``s_tot``, ``s_ipc``, ``s_plen``): constant comparisons, gated by the edit
        and by the frame's first beat pair; the bytes before ``h`` and before ``h + K`` as thermometers (``t_h``,
        ``t_hk``: E4's masks) and ``K`` one-hot (``k1h``); the beat, the edit context and the new values pass on."""
        elem, ctx = self._beat_fields(), self._edit_fields()
        nw = WINDOW // 2
        e3 = self._stage("e3", **elem, **ctx, hdr=WINDOW * 8, dport=16, ulen=16, usum=16, uc_zero=1, plen=16,
                         tot=16, ipc=16, s_dp=nw, s_ul=nw, s_uc=nw, s_fx=nw, s_tot=3, s_ipc=3, s_plen=3,
                         t_h=WINDOW, t_hk=WINDOW, k1h=5)
        edit = _sig(m, (sc["op"] != OP_PASS) & ~sc["drop"] & (sc["idx"] == 0), "e3_edit")
        l4w, hb = sc["l4w"], sc["h"][1:7]
        upd = sc["op"] == OP_UPDATE
        v4 = ~sc["ipv6"] & ~upd
        with m.If(en3):
            m.d.sync += [e3[n].eq(sc[n]) for n in (*elem, *ctx, "hdr", "dport", "ulen", "plen", "tot")]
            m.d.sync += [e3["k1h"].eq(Cat(*[sc["k"] == kk for kk in _KS])),
                         e3["t_h"].eq(_thermo(sc["dh"], WINDOW)),
                         e3["t_hk"].eq(_thermo(sc["dhk"], WINDOW) | Mux(sc["hk_big"], (1 << WINDOW) - 1, 0))]
            m.d.sync += [
                e3["usum"].eq(_ones_add(m, sc["u0"], sc["u1"], "usum_add")),
                e3["ipc"].eq(~_ones_add(m, sc["i0"], sc["i1"], "isum_add")),
                e3["uc_zero"].eq(~sc["ipv6"] | sc["uc0"]),
                e3["s_dp"].eq(Cat(*[edit & (l4w == wi - 1) for wi in range(nw)])),
                e3["s_ul"].eq(Cat(*[edit & (l4w == wi - 2) for wi in range(nw)])),
                e3["s_uc"].eq(Cat(*[edit & (l4w == wi - 3) for wi in range(nw)])),
                e3["s_fx"].eq(Cat(*[edit & upd & (hb <= wi) & (hb >= wi - 4) for wi in range(nw)])),
                e3["s_tot"].eq(Cat(*[edit & v4 & sc["l3_sel"][n] for n in range(3)])),
                e3["s_ipc"].eq(Cat(*[edit & v4 & sc["l3_sel"][n] for n in range(3)])),
                e3["s_plen"].eq(Cat(*[edit & sc["ipv6"] & sc["l3_sel"][n] for n in range(3)])),
            ]
        return e3

    def _e4(self, m, e3, en4):
        """E4 (stage 8): the edited window (frame bytes 0 to 127). Registers, for a frame's first beat pair, the
        window with the UDP port, length and checksum, the IP length and checksum fields and UPDATE's header bytes
        written where E3's selects say (later beats pass unchanged; the places never overlap, so each word is an
        AND-OR of its choices); INSERT's header (``hdr``), the op and the lengths pass on, with the merge's byte
        masks: bytes before ``h`` (``bh``), bytes of the header (``ih``, ``h`` to ``h + K``) and ``K`` one-hot
        (``k1h``: 12, 16, 20, 24, 28), and the ``keep`` lanes of the output's ``tkeep`` (:meth:`_keep_lanes`)."""
        dbits = 8 * _BEAT
        wwin = _sig(m, Cat(e3["cur"], e3["nxt"]), "wwin")
        r = e3["usum"]
        usum_zero = (r == 0) | (r == 0xFFFF)
        ucsum = _sig(m, Mux(e3["uc_zero"], 0, Mux(usum_zero, 0xFFFF, ~r)), "ucsum_new")
        new_words = []
        for wi in range(WINDOW // 2):
            word = _be(wwin, 2 * wi, 2)
            choices = [(e3["s_dp"][wi], e3["dport"]), (e3["s_ul"][wi], e3["ulen"]), (e3["s_uc"][wi], ucsum),
                       (e3["s_fx"][wi], _be(e3["hdr"], 2 * wi, 2))]
            for n, l3 in enumerate(L3_OFFSETS):
                w3 = l3 // 2
                if wi == w3 + 1:
                    choices.append((e3["s_tot"][n], e3["tot"]))
                if wi == w3 + 5:
                    choices.append((e3["s_ipc"][n], e3["ipc"]))
                if wi == w3 + 2:
                    choices.append((e3["s_plen"][n], e3["plen"]))
            any_sel = Cat(*[c for c, _ in choices]).any()
            new = Mux(any_sel, 0, word)
            for cond, value in choices:
                new = new | Mux(cond, value, 0)
            new_words.append(_sig(m, new, f"word{wi}"))
        w_edit = _sig(m, Cat(*[Cat(w[8:16], w[0:8]) for w in new_words]), "w_edit")
        e4_fields = (*self._beat_fields(), "op", "drop", "refused", "cut", "is_pass", "h", "k", "hdr")
        e4 = self._stage("e4", **{n: len(e3[n]) for n in e4_fields}, bh=WINDOW, ih=WINDOW, k1h=5, ins_keep=_BEAT,
                         ins_ext=_BEAT, rem_lkeep=_BEAT, rem_nkeep=_BEAT, spill=1, c_big=1, n_big=1)
        k1h = e3["k1h"]
        lanes = self._keep_lanes(m, e3, k1h)
        with m.If(en4):
            m.d.sync += [e4[n].eq(e3[n]) for n in e4_fields if n not in ("cur", "nxt")]
            m.d.sync += [e4["cur"].eq(w_edit[:dbits]), e4["nxt"].eq(w_edit[dbits:])]
            m.d.sync += [
                e4["bh"].eq(e3["t_h"]),
                e4["ih"].eq(~e3["t_h"] & e3["t_hk"]),
                e4["k1h"].eq(k1h),
            ]
            m.d.sync += [e4[n].eq(v) for n, v in lanes.items()]
        return e4

    def _merge(self, m, e4, enx):
        """The INSERT merge (stage 9), on the way out of E4: the written window with ``K`` header bytes at ``h``
        and the bytes from ``h`` on moved up by ``K`` (an AND-OR by E4's masks). Registers the beat (``x``) with
        its output for beats 0 and 1 (``pre``: the merged window's half) and, for the output stage, the lanes
        REMOVE keeps in place (``rem_keep``: before ``h``); at a frame's first beat, it keeps the window's second
        half, written and merged (``m1_edit``, ``m1_merged``: beat 1's data, and the extra beat's when INSERT
        grows a one-beat frame) and the frame's edit context (``f_*``), which the frame's later beats take.
        It also registers the output beat's ``tkeep`` and ``tlast`` (``o_keep``, ``o_last``), made from the beat's
        and the next beat's ``tkeep`` and ``tlast`` by the frame's op and ``K`` (:meth:`_out_keep`): whether an
        INSERT's last beat spills into an extra beat (``o_hold``, with that beat's ``tkeep``, ``ext_keep``) and
        whether a REMOVE's last beat has nothing left to send (``o_skip``). Returns ``x`` and ``m1_merged``."""
        dbits = 8 * _BEAT
        w_edit = Cat(e4["cur"], e4["nxt"])

        merged = []
        for g in range(WINDOW):
            moved = Const(0, 8)
            for j, kk in enumerate(_KS):
                if g >= kk:
                    moved = moved | Mux(e4["k1h"][j], _byte(w_edit, g - kk), 0)
            merged.append(Mux(e4["bh"][g], _byte(w_edit, g), 0) | Mux(e4["ih"][g], _byte(e4["hdr"], g), 0) |
                          Mux(e4["bh"][g] | e4["ih"][g], 0, moved))
        merged = _sig(m, Cat(*merged), "merged")

        m1_edit = Signal(dbits)
        m1_merged = Signal(dbits)
        is0 = e4["idx"] == 0
        is1 = e4["idx"] == 1
        with m.If(enx & e4["valid"] & is0):
            m.d.sync += [m1_edit.eq(w_edit[dbits:]), m1_merged.eq(merged[dbits:])]
        fctx = self._stage("f", op=2, drop=1, refused=1, cut=1, is_pass=1, h=7, k=6, k1h=5)
        with m.If(enx & e4["valid"] & is0):
            m.d.sync += [fctx[n].eq(e4[n]) for n in fctx]

        x = self._stage("x", **self._beat_fields(), pre=dbits, rem_keep=_BEAT, o_keep=_BEAT, o_last=1, o_hold=1,
                        o_skip=1, ext_keep=_BEAT, sends=1, **{n: len(v) for n, v in fctx.items()})
        # E1 decided every beat of a frame as its first one: each beat carries the frame's op and K.
        outk = self._out_keep(e4)
        with m.If(enx):
            m.d.sync += [x[n].eq(e4[n]) for n in ("valid", "keep", "last", "user", "idx", "nkeep", "nlast")]
            m.d.sync += [x[n].eq(Mux(is0, e4[n], fctx[n])) for n in fctx]
            m.d.sync += [x[n].eq(v) for n, v in outk.items()]
            # The beat is written into the output FIFO (the output stage's ``emit`` from one register).
            m.d.sync += x["sends"].eq(e4["valid"] & ~Mux(is0, e4["drop"], fctx["drop"]) & ~outk["o_skip"])
            m.d.sync += [
                x["cur"].eq(Mux(is0, w_edit[:dbits], Mux(is1, m1_edit, e4["cur"]))),
                x["nxt"].eq(Mux(is0, w_edit[dbits:], e4["nxt"])),
                x["pre"].eq(Mux(is0, merged[:dbits], m1_merged)),
                # ``h`` is the frame's on every beat of it, and so are E4's masks.
                x["rem_keep"].eq(Mux(is0, e4["bh"][:_BEAT], Mux(is1, e4["bh"][_BEAT:], 0))),
            ]
        return x, m1_merged

    @staticmethod
    def _keep_lanes(m, e3, k1h):
        """E4's half of the output ``tkeep``/``tlast`` (:meth:`_out_keep`): the beat's and the next beat's
        ``keep`` shifted by ``K`` lanes, and the byte-count comparisons with ``K``. ``tkeep`` is contiguous, so a
        byte count ``c`` is a thermometer and ``c + K``, ``c - K`` are ``keep`` shifted by ``K`` lanes (AND-OR by
        the one-hot ``k1h``, no adder): ``ins_keep`` (``c + K``, at most 64), ``ins_ext`` (``c + K - 64``),
        ``rem_keep`` (``c - K``), ``rem_nkeep`` (``64 + c' - K`` for the next beat's ``c'``), ``spill`` (``c > 64 -
        K``), ``c_big`` (``c > K``), ``n_big`` (``c' > K``)."""
        keep, nkeep = e3["keep"], e3["nkeep"]

        def lanes(vec, shift_of, fill, name):
            out = []
            for i in range(_BEAT):
                terms = []
                for j, kk in enumerate(_KS):
                    t = i + shift_of(kk)
                    terms.append(k1h[j] & (vec[t] if 0 <= t < _BEAT else Const(fill, 1)))
                out.append(Cat(*terms).any())
            return _sig(m, Cat(*out), name)

        return {
            "ins_keep": lanes(keep, lambda kk: -kk, 1, "ins_last_keep"),
            "ins_ext": lanes(keep, lambda kk: _BEAT - kk, 0, "ins_ext_keep"),
            "rem_lkeep": lanes(keep, lambda kk: kk, 0, "rem_last_keep"),
            "rem_nkeep": lanes(nkeep, lambda kk: kk - _BEAT, 1, "rem_next_keep"),
            "spill": Cat(*[k1h[j] & keep[_BEAT - kk] for j, kk in enumerate(_KS)]).any(),
            "c_big": Cat(*[k1h[j] & keep[kk] for j, kk in enumerate(_KS)]).any(),
            "n_big": Cat(*[k1h[j] & nkeep[kk] for j, kk in enumerate(_KS)]).any(),
        }

    @staticmethod
    def _out_keep(e4):
        """The output beat's ``tkeep`` and ``tlast`` beat by beat, from E4's lanes (:meth:`_keep_lanes`) and the
        frame's op (every beat carries it). INSERT: a beat before the last is full; the last one (``c`` bytes)
        ends the frame with ``c + K`` bytes, or, when ``c + K > 64``, is full and spills ``c + K - 64`` bytes into
        an extra beat (``o_hold``, ``ext_keep``). REMOVE: the output beat ``j`` holds input bytes from ``64 j + K``
        on: it is the last when the input beat is (``c - K`` bytes), or when the next input beat is the last and
        holds at most ``K`` bytes (``64 + c' - K``); such a next beat then sends nothing (``o_skip``). Other ops:
        as the input."""
        last, nlast = e4["last"], e4["nlast"]
        is_ins, is_rem = e4["op"] == OP_INSERT, e4["op"] == OP_REMOVE
        rem_ends = nlast & ~e4["n_big"]
        ones = Const((1 << _BEAT) - 1, _BEAT)
        return {
            "o_keep": Mux(is_ins, Mux(last & ~e4["spill"], e4["ins_keep"], ones),
                          Mux(is_rem, Mux(last, e4["rem_lkeep"], Mux(rem_ends, e4["rem_nkeep"], ones)), e4["keep"])),
            "o_last": Mux(is_ins, last & ~e4["spill"], Mux(is_rem, last | rem_ends, last)),
            "o_hold": is_ins & last & e4["spill"],
            "o_skip": is_rem & last & (e4["idx"] != 0) & ~e4["c_big"],
            "ext_keep": e4["ins_ext"],
        }

    def _output(self, m, x, m1_merged, go):
        """The output stage (stage 10): the shift by ``K`` four-byte lanes, with the merge's ``tkeep`` and
        ``tlast``, written into the output FIFO (``OUT_DEPTH`` beats, registered output: ``m_axis``). Registers
        the previous beat (``prev``: INSERT's carry), ``extra`` (INSERT: the beat the frame grew by is being
        written: the pipeline holds for that cycle) with that beat (``ext_data``, ``ext_keep``, ``ext_user``), the
        beats the output FIFO holds (``occ``) and ``go``, the load enable of every stage: room in the output FIFO
        for every beat the pipeline can write before it stops, and not the extra beat's cycle. ``go`` is a
        register, so no path runs from ``m_axis.tready`` or the output logic into the stage enables. Returns the
        op decodes ``is_ins`` and ``is_rem`` (shared with the counters)."""
        o = self.m_axis
        dbits = 8 * _BEAT
        m.submodules.out = out = StreamFIFO(shape=AxisBeat(data_width=dbits, user_width=self._user_width),
                                            depth=OUT_DEPTH)
        m.d.comb += [
            o.tvalid.eq(out.o.valid), o.tdata.eq(out.o.payload.data), o.tkeep.eq(out.o.payload.keep),
            o.tlast.eq(out.o.payload.last), o.tuser.eq(out.o.payload.user), out.o.ready.eq(o.tready),
        ]
        prev = Signal(dbits)
        extra = Signal()        # INSERT: the beat the frame grew by is written this cycle
        # The extra beat, made while the last beat leaves (that beat and its K have moved on by the next cycle):
        # the merged window's second half (a one-beat frame) or the last beat's top K bytes; and its tuser.
        ext_data, ext_keep, ext_user = Signal(dbits), Signal(_BEAT), Signal(self._user_width)
        occ = Signal(range(OUT_DEPTH + 1))
        k1h = x["k1h"]

        def lane_shift(lo, hi, down, name):
            """Bytes ``i + down`` of ``Cat(lo, hi)`` for i in 0..63, ``down`` one of 64 - K (INSERT) or K."""
            both = Cat(lo, hi)
            out = Const(0, dbits)
            for j, kk in enumerate(_KS):
                out = out | Mux(k1h[j], both[8 * (64 - kk if down == "ins" else kk):][:dbits], 0)
            return _sig(m, out, name)

        ins_shift = lane_shift(prev, x["cur"], "ins", "shift_ins")
        rem_shift = lane_shift(x["cur"], x["nxt"], "rem", "shift_rem")
        ext_shift = lane_shift(x["cur"], Const(0, dbits), "ins", "shift_ext")
        rem_out = _sig(m, Cat(*[Mux(x["rem_keep"][i], _byte(x["cur"], i), _byte(rem_shift, i))
                                for i in range(_BEAT)]), "rem_out")

        hold = Signal()
        emit = Signal()
        is_ins = x["op"] == OP_INSERT
        is_rem = x["op"] == OP_REMOVE
        shifts = is_ins | is_rem
        s_pre = _sig(m, ~extra & is_ins & (x["idx"] < 2), "s_pre")
        s_ins = _sig(m, ~extra & is_ins & (x["idx"] == 2), "s_ins")
        s_rem = _sig(m, ~extra & is_rem, "s_rem")
        s_cur = _sig(m, ~extra & ~shifts, "s_cur")
        m.d.comb += [
            hold.eq(x["valid"] & ~x["drop"] & x["o_hold"]),
            # A REMOVE beat with no bytes left (the frame shrank by a beat) is not sent.
            emit.eq(extra | (go & x["sends"])),
            out.i.valid.eq(emit),
            out.i.payload.user.eq(Mux(extra, ext_user, x["user"])),
            out.i.payload.data.eq(Mux(extra, ext_data, 0) | Mux(s_pre, x["pre"], 0) | Mux(s_ins, ins_shift, 0) |
                                  Mux(s_rem, rem_out, 0) | Mux(s_cur, x["cur"], 0)),
            out.i.payload.keep.eq(Mux(extra, ext_keep, x["o_keep"])),
            out.i.payload.last.eq(extra | x["o_last"]),
        ]
        # The output FIFO never refuses a beat: ``go`` is set only with room for the beat written while it holds
        # and for the extra beat after it (at most one beat per cycle; ``occ`` stays below OUT_DEPTH).
        taken = o.tvalid & o.tready
        m.d.sync += occ.eq(occ + emit - taken)
        room = Mux(emit & ~taken, occ <= OUT_DEPTH - 4, Mux(~emit & taken, occ <= OUT_DEPTH - 2,
                                                            occ <= OUT_DEPTH - 3))
        m.d.sync += go.eq(room & ~(go & hold))
        with m.If(go & x["valid"]):
            m.d.sync += prev.eq(x["cur"])
        with m.If(extra):
            m.d.sync += extra.eq(0)
        with m.If(hold & go):
            m.d.sync += [extra.eq(1), ext_data.eq(Mux(x["idx"] == 0, m1_merged, ext_shift)),
                         ext_keep.eq(x["ext_keep"]), ext_user.eq(x["user"])]
        return is_ins, is_rem

    def _counters(self, m, x, x_leaves, is_ins, is_rem):
        """The ``stats`` counters, counted as a frame's first beat leaves the merge stage (no latency)."""
        counters = [self.stats.word_select(i, 32) for i in range(N_COUNTERS)]
        first = x_leaves & x["valid"] & (x["idx"] == 0)
        which = [
            ~x["drop"] & x["is_pass"],
            ~x["drop"] & (x["op"] == OP_UPDATE),
            ~x["drop"] & is_ins,
            ~x["drop"] & is_rem,
            x["drop"] & ~x["cut"],
            x["refused"],
            x["cut"],
        ]
        for counter, cond in zip(counters, which):
            with m.If(first & cond):
                m.d.sync += counter.eq(counter + 1)
