"""Deparser: buffers each frame of a 512-bit AXI4-Stream until its action arrives, then drops it, passes it, or
rewrites its UDP source port with an incremental ICRC and UDP checksum update, at one beat per clock.

The deparser is the last stage of an lbpipe packet pipeline (docs/themis.md): Themis-S in ``mode=sport`` asks it to
XOR ``udp_sport_xor`` into a RoCEv2 frame's UDP source port, Themis-D asks it to discard a blocked NACK. Frames come
unchanged from the parser; one :func:`DeparseAction` per frame comes, in frame order, on ``act``.

**The rewrite** (IBA annex A17; shared/reference/README.md):

* The UDP source port (2 bytes at ``l4_off``, big endian) becomes ``port ^ sport_xor``.
* The ICRC (4 bytes at ``icrc_off``, least significant byte first) is updated by CRC linearity. Two messages of one
  length that differ by an XOR pattern ``e`` have CRCs that differ by the *linear* CRC of ``e`` (register 0, no
  final XOR). Here ``e`` is the 2-byte delta at the port followed by ``dist = icrc_off - l4_off - 2`` zero bytes up
  to the ICRC (leading zeros leave a zero register at zero), so ``dICRC = A**dist @ D_2(delta)``: ``D_2`` is
  :func:`lbpipe.hdl.lib.crc.crc32_update` of the two delta bytes from register 0, and ``A**dist`` is applied as a
  cascade of constant 32 x 32 matrices ``A**(2**b)``, one register stage per bit of ``dist`` (as
  :class:`lbpipe.hdl.lib.crc.CRC32Stream` un-advances by ``A**-j``). The new ICRC bytes are the old ones XOR
  ``dICRC.to_bytes(4, "little")``. The ICRC's masked fields (UDP checksum, IPv4 TOS/TTL/checksum, BTH FECN/BECN)
  are not touched, so nothing else enters it.
* A non-zero UDP checksum is updated as RFC 1624 (eqn. 3) says, for the port word and for the words holding the
  ICRC, which the checksum covers: ``HC' = ~(~HC + ~m + m' + ...)`` in ones'-complement arithmetic, words counted
  from the UDP header, a computed 0 sent as 0xFFFF. The sum is a residue modulo 0xFFFF, so a word half made of an
  unchanged byte contributes only its changed byte, and the ICRC words are the ICRC bytes paired by the parity of
  ``icrc_off - l4_off`` (pairs ``(b0 b1)(b2 b3)``, or ``(b3 b0)(b1 b2)``, a byte rotation that leaves the sum
  alone). A zero checksum stays zero.

**Where the old values come from** (choice): every old value the update needs is read from the frame itself, not
from the action, so the output is always the rewrite of the frame actually sent, and the action carries only what
a block decides. The port and the checksum sit in the header and are read from the beats on the way out. The old
ICRC is needed for the checksum before the header leaves, but it sits at the end of the frame, and the action
(hence ``icrc_off``) comes only after the frame: so the input side keeps each frame's **last beat and the three
bytes before it** in a small per-frame *tail* FIFO, and the old ICRC is taken from there when the action arrives.
That is why the brief's ``udp_csum_zero`` flag is not in the action: the checksum's value is needed anyway and a
flag could only disagree with it.

**When a rewrite applies** (choice, the same rule in :func:`lbpipe.sim.packet.deparser.rewrite_applies`): ``rewrite``
and not ``drop``; ``l4_off`` even (every UDP header in an Ethernet frame is at ``14 + 4 * (tags + IP header
words)``; an even offset keeps the port and checksum words inside one beat each); ``icrc_off >= l4_off + 8``; and
the ICRC lies in the frame and **ends in its last beat** (the tail the input side kept). Every RoCEv2 frame ends
with its ICRC or with at most a few bytes of Ethernet padding after it, so every RoCEv2 frame qualifies; a frame
with a long trailer after its IP packet does not, and passes unchanged (as does any frame whose action asks for a
rewrite the rule refuses; nothing else is flagged).

**Cut-through** (``cut_through=True``; docs/packet_io.md): actions are taken as soon as they come, before their
frames' last beats (an early parser answers after the second beat), and frames leave as they arrive; there is no
tail FIFO and no cut of long frames, and a credit counter keeps the actions joined within the edit FIFO. The rule
cannot see the frame's end (``rewrite``, ``l4_off`` even, ``icrc_off >= l4_off + 8``); as the frame leaves, a
rewritten frame that ends before the ICRC's last byte, or whose UDP checksum is not zero (its update needs the old
ICRC, which comes last; the checksum is left as it came), gets ``tuser`` bit 0 set on its last beat (*bad*, the
Corundum/OpenNIC convention: the MAC aborts it) and is counted. **FCS** (``fcs=True``): frames end with their FCS;
in both modes the rewrite is decided and checked as in cut-through, the frame having to hold the ICRC and 4 bytes
after it, and the FCS is left as it is: the port and ICRC changes leave it valid (the CRC-32 of the change
pattern, whose last 4 bytes are its own CRC-32 register, is 0), which a checksum change would not.
:func:`lbpipe.sim.packet.deparser.deparse_cut_through` is the golden rule for both.

**Buffers and flow control:**

* The *beat FIFO* (``depth`` beats, block RAM) holds frames until their action is resolved. A frame longer than
  ``depth`` beats cannot wait there for its action, which comes after its last beat: its ``depth``-th beat is
  written as its last and marked cut, the rest of it is taken and discarded, and its action, when it comes, drops
  it; ``stats`` counts such frames. So no input deadlocks the deparser. For one beat per clock
  with no stall it must also hold what arrives while a frame waits for its action: ``depth >= beats of the largest
  frame + action latency + 20`` (:attr:`Deparser.DEPTH_MARGIN`, :meth:`Deparser.required_depth`), where the
  action latency counts the edges from the one that takes a frame's last beat to the first one that could take
  its action. The default 256 takes 9,216-byte frames at line rate with up to 92 cycles of action latency.
* The *tail FIFO* (``pending`` frames, LUT RAM) holds the tails of frames whose action has not arrived yet: at line
  rate with one-beat frames, ``pending >= max(action latency + 1, 3)`` (:meth:`Deparser.required_pending`). The
  default 32 allows 31 cycles.
* The *edit FIFO* (``depth`` entries, block RAM) holds resolved actions. It cannot overflow: an edit exists only
  for a frame all of whose beats are in the beat FIFO until its last beat leaves, so there are never more edits
  than beats buffered.
* ``s_axis.tready`` is high while the beat and tail FIFOs have room; ``act.ready`` while a tail waits (an action
  is never taken before its frame's last beat). The join pipeline never stalls. The output pipeline advances as
  one while ``m_axis`` can take a beat, so back-pressure on ``m_axis`` fills the FIFOs and then stalls ``s_axis``.
  ``m_axis.tvalid`` is a register and never waits on ``tready``.
* Throughput: one beat per clock in and out, back-to-back frames of any size, drops and rewrites included, when
  actions keep to the latencies above. Frames of mixed sizes are taken at one beat per clock too; on the way out a
  frame cannot start before its action, so a long frame after short ones leaves a gap of up to the difference in
  beats (store and forward).

**Pipelines** (one register per stage; each stage within 6 logic levels as Yosys maps it):

* Join (per frame, never stalls; :attr:`Deparser.join_latency` = 18 edges from the one that takes the action to
  the one that writes its edit): J0 the action, the old ICRC chosen out of the tail as it leaves the tail FIFO (a
  64-way byte choice on the low bits of ``icrc_off``: the deepest path, 6 LUTs), the ICRC's end offset; J1 the
  rule, ``dist``, word positions, ``D_2(delta)``; J2..J15 ``A**(2**b)`` for ``b = 0 .. 13``; J16 old and new ICRC
  words summed; J17 the ICRC's checksum term.
* Output (per beat; :attr:`Deparser.output_latency` = 7 edges from the one that takes a beat out of the beat FIFO
  to the one that hands it on): O1 beat and edit registered out of their FIFOs (block RAM outputs registered);
  O2 which fields this beat holds; O3 the XOR pattern for port and ICRC bytes, the old port (this beat's or held
  from an earlier one) and checksum read out of the beat; O4, O5 the checksum sum (carry-select ones'-complement
  adders); O6 the new checksum; O7 the beat XOR pattern applied, written into the skid buffer, whose registered
  output is ``m_axis`` (O8). O1 to O7 never stall (STYLE.md: a result register and a small skid buffer before the
  output multiplexers): a beat is read out of the beat FIFO only while the 16-beat skid buffer has room for it and
  every beat on its way there, so ``m_axis.tready`` drives the skid buffer's output register and a credit counter,
  not the enables of the ~5,000 pipeline flip-flops.
* :attr:`Deparser.latency` = 28: from the edge that takes an action to the one that hands on its frame's first
  beat, when the frame is buffered and nothing is ahead of it.

The action's ``tag`` is not interpreted: it travels with the action so one layout can carry a block's result to
the deparser, and a pairing check belongs to the integration.
"""

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature, AxisBeat
from lbpipe.hdl.lib.crc import crc32_shift, crc32_update
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import TAG_BITS

__all__ = ["Deparser", "DeparseAction", "ICRC_OFF_BITS", "DIST_BITS"]

_BEAT_BYTES = 64
_LANE_BITS = 6
#: Width of ``icrc_off``: frames up to 16,383 bytes.
ICRC_OFF_BITS = 14
#: Bits of ``dist = icrc_off - l4_off - 2``: the stages of the ``A**(2**b)`` cascade.
DIST_BITS = ICRC_OFF_BITS
#: Beat counters saturate here; no ICRC lies beyond beat 256 (``icrc_off < 2**14``).
_BEAT_COUNT_BITS = 9


def DeparseAction():
    """What to do with one frame (first field in the low bits).

    =============  =====  =====================================================================================
    field          bits   meaning
    =============  =====  =====================================================================================
    tag            16     opaque, not interpreted (see the module docstring)
    drop           1      discard the frame (a blocked NACK); wins over ``rewrite``
    rewrite        1      XOR ``sport_xor`` into the UDP source port, update ICRC and UDP checksum
    l4_off         8      byte offset of the UDP header (read with ``rewrite``; must be even)
    icrc_off       14     byte offset of the 4 ICRC bytes (read with ``rewrite``)
    sport_xor      16     new UDP source port = old XOR this
    =============  =====  =====================================================================================
    """
    return data.StructLayout({
        "tag":       TAG_BITS,
        "drop":      1,
        "rewrite":   1,
        "l4_off":    8,
        "icrc_off":  ICRC_OFF_BITS,
        "sport_xor": 16,
    })


#: A frame's tail, kept until its action arrives: the last beat after the three bytes before it (``window`` byte
#: ``3 + i`` is lane ``i`` of the last beat), the last beat's index and its valid byte count.
_TAIL = data.StructLayout({
    "window":   8 * (_BEAT_BYTES + 3),
    "last_idx": _BEAT_COUNT_BITS,
    "n_valid":  _LANE_BITS + 1,
    "cut":      1,          # the frame was longer than the beat FIFO: its action becomes a drop
})

#: A resolved action, waiting for its frame at the head of the beat FIFO.
_EDIT = data.StructLayout({
    "drop":       1,
    "apply":      1,
    "sport_beat": 2,        # the port word is in beat l4_off >> 6 ...
    "sport_word": 5,        # ... at 16-bit lane (l4_off >> 1) & 31
    "csum_beat":  3,
    "csum_word":  5,
    "sport_xor":  16,
    "icrc_beat":  ICRC_OFF_BITS - _LANE_BITS,
    "icrc_lane":  _LANE_BITS,
    "icrc_xor":   32,       # dICRC, ICRC byte k in bits 8k+7..8k
    "csum_icrc":  16,       # the ICRC words' checksum term, sum(new) - sum(old) modulo 0xFFFF
    "end_beat":   ICRC_OFF_BITS - _LANE_BITS + 1,   # the ICRC's last byte (cut-through: checked at tlast)
    "end_lane":   _LANE_BITS,
})


def _byte(value, index):
    return value[8 * index:8 * index + 8]


def _swap16(value):
    """A big-endian 16-bit field read from two byte lanes (first lane in the low bits), or the lanes of one."""
    return Cat(value[8:16], value[0:8])


def _oc_add(m, a, b, name):
    """Ones'-complement (end-around carry) sum of two 16-bit values, as a carry-select pair of adders: one LUT
    level, two CARRY8 and a LUT choice. The result is a residue modulo 0xFFFF (0xFFFF and 0 both stand for 0)."""
    s0 = Signal(17, name=f"{name}_s0")
    s1 = Signal(18, name=f"{name}_s1")
    out = Signal(16, name=name)
    m.d.comb += [
        s0.eq(a + b),
        s1.eq(Cat(C(1, 1), a) + Cat(C(1, 1), b)),   # 2a+1 + 2b+1 = 2 (a + b + 1): the carry-in without a 3rd term
        out.eq(Mux(s0[16], s1[1:17], s0[:16])),
    ]
    return out


def _count(value, up, down):
    """``value`` plus one (``up``), minus one (``down``) or unchanged: both sums are taken from the register alone
    and the choice is an AND-OR of them, one LUT after ``up`` and ``down``. (As a multiplexer of the two sums, Yosys
    shares one adder between them and puts the choice before the carry chain.)"""
    hold = ~(up | down)
    return (((value + 1)[:len(value)] & up.replicate(len(value)))
            | ((value - 1)[:len(value)] & down.replicate(len(value)))
            | (value & hold.replicate(len(value))))


def _thermometer_count(keep):
    """The number of ones in a thermometer ``keep`` (``2**k - 1``), ``len(keep).bit_length()`` bits.

    Bit ``b`` of ``k`` is the parity of ``floor(k / 2**b)``, which counts the multiples ``q * 2**b <= k``, that is
    the set bits ``keep[q * 2**b - 1]``."""
    n = len(keep)
    bits = []
    for b in range(n.bit_length()):
        taps = [keep[(q << b) - 1] for q in range(1, (n >> b) + 1)]
        bits.append(Cat(*taps).xor())
    return Cat(*bits)


class Deparser(wiring.Component):
    """Frame buffer and rewriter on a 512-bit AXI4-Stream (see the module docstring).

    Parameters
    ----------
    depth : int
        Beats of frame buffer, at least 4 (default 256: frames up to 16,384 bytes, and 9,216-byte frames at line
        rate with up to :meth:`max_action_latency` cycles of action latency). Also the edit FIFO's depth.
    pending : int
        Frames whose action is still awaited, at least 2 (default 32).
    user_width : int
        Width of ``tuser``, passed through beat for beat; at least 1.
    cut_through : bool
        Take each action as soon as it comes (before its frame's last beat) and send the frame as it arrives; see
        "Cut-through" in the module docstring. False (store-and-forward) by default.

    Members
    -------
    s_axis : In(AXI4StreamSignature(data_width=512, user_width=user_width))
        Frames in (byte order and framing in :mod:`lbpipe.hdl.lib.axis`).
    act : In(stream.Signature(DeparseAction()))
        One action per frame, in frame order; taken only after its frame's last beat.
    m_axis : Out(AXI4StreamSignature(data_width=512, user_width=user_width))
        The frames not dropped, rewritten where the action says; ``tkeep``, ``tlast``, ``tuser`` and the bytes
        not rewritten (undefined lanes included) exactly as they came.
    stats : Out(96)
        Three wrapping 32-bit counters, cleared by reset: bits 31-0 frames dropped for being longer than ``depth``
        beats (store-and-forward only); bits 63-32 *refused* rewrites (``rewrite`` and not ``drop`` but the rule
        refuses: the frame passes unchanged); bits 95-64 rewritten frames sent *bad* (cut-through only: ``tuser``
        bit 0 set on the last beat).

    Raises
    ------
    TypeError
        If a parameter is not an integer.
    ValueError
        If a parameter is out of range.
    """

    #: Output pipeline: edges from the one that takes a beat out of the beat FIFO to the one that hands it on.
    output_latency = 8
    #: Join pipeline: the edge that takes an action to the one that writes its edit into the edit FIFO.
    join_latency = 18
    #: ``depth - beats of the largest frame - action latency`` needed for line rate (measured; see the tests).
    DEPTH_MARGIN = 20
    #: Beats of the output skid buffer: the output pipeline's beats in flight and the buffer's own latency, with
    #: room for one beat per clock while ``m_axis`` is ready.
    SKID_DEPTH = 16
    #: ``pending - action latency`` needed for line rate with one-beat frames (measured; see the tests).
    PENDING_MARGIN = 1
    #: Edges from the one that takes an action to the one that hands its frame's first beat on (frame buffered,
    #: nothing ahead, ``m_axis`` ready): ``join_latency``, 2 through the edit FIFO, ``output_latency``.
    latency = 28

    def __init__(self, *, depth=256, pending=32, user_width=1, cut_through=False, fcs=False):
        for name, value in (("depth", depth), ("pending", pending), ("user_width", user_width)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
        if depth < 4:
            raise ValueError(f"depth must be at least 4, not {depth}")
        if pending < 2:
            raise ValueError(f"pending must be at least 2, not {pending}")
        AXI4StreamSignature.check_parameters(data_width=8 * _BEAT_BYTES, user_width=user_width)
        if not isinstance(cut_through, bool):
            raise TypeError(f"cut_through must be a bool, not {cut_through!r}")
        if not isinstance(fcs, bool):
            raise TypeError(f"fcs must be a bool, not {fcs!r}")
        self._cut_through = cut_through
        self._fcs = fcs
        # The rewrite is decided without the frame's end, and the end checked as the frame leaves.
        self._late_check = cut_through or fcs
        self._depth = depth
        self._pending = pending
        self._user_width = user_width
        axis = AXI4StreamSignature(data_width=8 * _BEAT_BYTES, user_width=user_width)
        super().__init__({
            "s_axis": In(axis),
            "act":    In(stream.Signature(DeparseAction())),
            "m_axis": Out(axis),
            "stats":  Out(96),
        })

    @property
    def depth(self):
        return self._depth

    @property
    def pending(self):
        return self._pending

    @property
    def user_width(self):
        return self._user_width

    @property
    def cut_through(self):
        return self._cut_through

    @property
    def fcs(self):
        return self._fcs

    @property
    def max_frame_bytes(self):
        """The longest frame that fits the beat FIFO (longer ones are dropped and counted in ``stats``)."""
        return self._depth * _BEAT_BYTES

    @classmethod
    def required_depth(cls, max_frame_bytes, action_latency):
        """The ``depth`` that takes back-to-back frames of up to ``max_frame_bytes`` at one beat per clock when
        each action is offered ``action_latency`` cycles after its frame's last beat is accepted."""
        return -(-max_frame_bytes // _BEAT_BYTES) + action_latency + cls.DEPTH_MARGIN

    @classmethod
    def required_pending(cls, action_latency):
        """The ``pending`` that takes back-to-back one-beat frames at one beat per clock with that action
        latency."""
        return max(action_latency + cls.PENDING_MARGIN, 3)

    def max_action_latency(self, max_frame_bytes=9216):
        """The largest action latency at which frames of up to ``max_frame_bytes`` (and one-beat frames) are taken
        at one beat per clock."""
        if self._pending < 3:
            return 0
        return min(self._depth - -(-max_frame_bytes // _BEAT_BYTES) - self.DEPTH_MARGIN,
                   self._pending - self.PENDING_MARGIN)

    def elaborate(self, platform):
        m = Module()
        s, o, act = self.s_axis, self.m_axis, self.act
        beat_layout = AxisBeat(data_width=8 * _BEAT_BYTES, user_width=self._user_width)
        m.submodules.beats = beats = StreamFIFO(shape=beat_layout, depth=self._depth)
        m.submodules.edits = edits = StreamFIFO(shape=_EDIT, depth=self._depth)
        if self._cut_through:
            self._cut_through_input(m, beats, edits)
        else:
            self._store_and_forward_input(m, beats, edits)
        self._output(m, beats, edits, o)
        return m

    def _cut_through_input(self, m, beats, edits):
        """Cut-through: beats go straight into the beat FIFO (no tail, no cut: a frame leaves as it arrives, so
        its length is not bounded by ``depth``), and an action is joined as soon as it comes, with no old ICRC
        (a rewrite's checksum is never updated; a non-zero one marks the frame bad at the output). A credit
        counter keeps the joins in flight and the edits waiting within the edit FIFO, since actions may now come
        before their frames' beats."""
        s, act = self.s_axis, self.act
        m.d.comb += [
            s.tready.eq(beats.i.ready),
            beats.i.valid.eq(s.tvalid),
            beats.i.payload.data.eq(s.tdata),
            beats.i.payload.keep.eq(s.tkeep),
            beats.i.payload.last.eq(s.tlast),
            beats.i.payload.user.eq(s.tuser),
        ]
        outstanding = Signal(range(self._depth + 1))     # edits joined or joining, not yet taken by the output
        # outstanding == depth, kept in a register so that act.ready (which the wire's Themis-S and parser stall
        # on) is a flip-flop, not a compare of the count: the same value on every cycle.
        full = Signal()
        fire = Signal()
        done = Signal()
        m.d.comb += [
            act.ready.eq(~full),
            fire.eq(act.valid & ~full),
            done.eq(edits.o.valid & edits.o.ready),
        ]
        m.d.sync += [
            outstanding.eq(_count(outstanding, fire & ~done, done & ~fire)),
            full.eq(~done & (full | (fire & (outstanding == self._depth - 1)))),
        ]
        no_tail = Signal(_TAIL)
        self._join(m, fire, act.payload, no_tail, edits)

    def _store_and_forward_input(self, m, beats, edits):
        """Store-and-forward: beats into the beat FIFO, each frame's tail into the tail FIFO, joined with its
        action once both are there."""
        s, act = self.s_axis, self.act
        m.submodules.tails = tails = StreamFIFO(shape=_TAIL, depth=self._pending)

        # -- input: beats into the beat FIFO, each frame's tail into the tail FIFO ---------------------------------
        # A frame longer than the beat FIFO would wait forever for room its own beats hold: its depth-th beat is
        # written as its last with its tail marked cut, and the rest of it is taken and discarded.
        take = Signal()
        n_in = Signal(range(self._depth))            # beats of the frame on s_axis written so far (to depth - 1)
        discarding = Signal()                        # taking the rest of a cut frame
        cut = Signal()
        ends = Signal()                              # this beat ends the frame in the FIFOs
        m.d.comb += [
            cut.eq(~s.tlast & (n_in == self._depth - 1)),
            ends.eq(s.tlast | cut),
            s.tready.eq(discarding | (beats.i.ready & tails.i.ready)),
            take.eq(s.tvalid & s.tready),
            beats.i.valid.eq(s.tvalid & tails.i.ready & ~discarding),
            beats.i.payload.data.eq(s.tdata),
            beats.i.payload.keep.eq(s.tkeep),
            beats.i.payload.last.eq(ends),
            beats.i.payload.user.eq(s.tuser),
        ]
        in_idx = Signal(_BEAT_COUNT_BITS)            # index of the beat on s_axis within its frame (saturating)
        prev3 = Signal(24, reset_less=True)          # the last three bytes of the previous beat
        with m.If(take):
            m.d.sync += prev3.eq(s.tdata[-24:])
            with m.If(discarding):
                m.d.sync += discarding.eq(~s.tlast)
            with m.Elif(ends):
                m.d.sync += [in_idx.eq(0), n_in.eq(0), discarding.eq(cut)]
            with m.Else():
                m.d.sync += n_in.eq(n_in + 1)
                with m.If(in_idx != (1 << _BEAT_COUNT_BITS) - 1):
                    m.d.sync += in_idx.eq(in_idx + 1)
        m.d.comb += [
            tails.i.valid.eq(s.tvalid & ends & beats.i.ready & ~discarding),
            tails.i.payload.window.eq(Cat(prev3, s.tdata)),
            tails.i.payload.last_idx.eq(in_idx),
            tails.i.payload.n_valid.eq(_thermometer_count(s.tkeep)),
            tails.i.payload.cut.eq(cut),
        ]

        # -- join: action and tail into an edit, 18 stages, never stalls -----------------------------------------
        fire = Signal()
        m.d.comb += [
            fire.eq(act.valid & tails.o.valid),
            act.ready.eq(tails.o.valid),
            tails.o.ready.eq(act.valid),
        ]
        self._join(m, fire, act.payload, tails.o.payload, edits)
        with m.If(fire & tails.o.payload.cut):
            m.d.sync += self.stats[:32].eq(self.stats[:32] + 1)

    def _join(self, m, fire, action, tail, edits):
        # J0: the action, and the old ICRC out of the tail as it leaves the tail FIFO. ICRC byte k is window byte
        # icrc_lane + 3 + k, less 64 when the ICRC starts in the beat before the last (icrc_lane 61 to 63: an
        # ICRC that ends in the last beat must then straddle). A 64-way byte choice on the action's low bits.
        lane = action.icrc_off[:_LANE_BITS]
        old_bytes = []
        for k in range(4):
            candidates = []
            for lane_value in range(_BEAT_BYTES):
                index = lane_value + 3 + k - (_BEAT_BYTES if lane_value > _BEAT_BYTES - 4 else 0)
                candidates.append(_byte(tail.window, index))
            old_bytes.append(Cat(*candidates).word_select(lane, 8))
        j0_valid = Signal()
        a = Signal(DeparseAction(), reset_less=True)
        j0 = {
            "old": Signal(32, name="j0_old", reset_less=True),
            "end": Signal(ICRC_OFF_BITS + 1, name="j0_end", reset_less=True),   # the ICRC's last byte
            "last_idx": Signal(_BEAT_COUNT_BITS, name="j0_last_idx", reset_less=True),
            "n_valid": Signal(_LANE_BITS + 1, name="j0_n_valid", reset_less=True),
            "cut": Signal(name="j0_cut", reset_less=True),
            # The last byte the frame must hold for a whole rewrite: the ICRC's, or with fcs the FCS's after it.
            "need": Signal(ICRC_OFF_BITS + 1, name="j0_need", reset_less=True),
        }
        m.d.sync += j0_valid.eq(fire)
        with m.If(fire):
            m.d.sync += [
                a.eq(action),
                j0["old"].eq(Cat(*old_bytes)),
                j0["end"].eq(action.icrc_off + 3),
                j0["last_idx"].eq(tail.last_idx),
                j0["n_valid"].eq(tail.n_valid),
                j0["cut"].eq(tail.cut),
                j0["need"].eq(action.icrc_off + (7 if self._fcs else 3)),
            ]

        # J1: the rule (the ICRC ends in the last beat, inside the frame; UDP header before it; l4_off even),
        # dist, word positions, and D_2(delta) with the port's bytes as they are on the wire (big endian).
        end_lane, end_beat = j0["end"][:_LANE_BITS], j0["end"][_LANE_BITS:]
        dist = Signal(ICRC_OFF_BITS + 1)
        csum_wpos = Signal(8)
        m.d.comb += [
            dist.eq(a.icrc_off - a.l4_off - 2),
            csum_wpos.eq(a.l4_off[1:] + 3),
        ]
        asked = a.rewrite & ~a.drop & ~j0["cut"]
        applies = asked & ~a.l4_off[0] & (a.icrc_off >= a.l4_off + 8)
        if not self._late_check:
            # The frame's end is known: the ICRC must end in its last beat, inside the frame.
            applies &= (end_beat == j0["last_idx"]) & (end_lane < j0["n_valid"])
        with m.If(j0_valid & asked & ~applies):
            m.d.sync += self.stats[32:64].eq(self.stats[32:64] + 1)
        widths = {
            "drop": 1, "apply": 1, "dist": DIST_BITS, "parity": 1,
            "sport_beat": 2, "sport_word": 5, "csum_beat": 3, "csum_word": 5, "sport_xor": 16,
            "icrc_beat": ICRC_OFF_BITS - _LANE_BITS, "icrc_lane": _LANE_BITS, "old": 32,
            "end_beat": ICRC_OFF_BITS - _LANE_BITS + 1, "end_lane": _LANE_BITS,
        }
        j1 = {name: Signal(width, name=f"j1_{name}", reset_less=True) for name, width in widths.items()}
        j1_valid = Signal()
        j1_x = Signal(32, reset_less=True)
        m.d.sync += [
            j1_valid.eq(j0_valid),
            j1["drop"].eq(a.drop | j0["cut"]),
            j1["apply"].eq(applies),
            j1["dist"].eq(dist[:DIST_BITS]),
            j1["parity"].eq(a.icrc_off[0]),           # icrc_off - l4_off, l4_off even
            j1["sport_beat"].eq(a.l4_off[6:8]),
            j1["sport_word"].eq(a.l4_off[1:6]),
            j1["csum_beat"].eq(csum_wpos[5:8]),
            j1["csum_word"].eq(csum_wpos[0:5]),
            j1["sport_xor"].eq(a.sport_xor),
            j1["icrc_beat"].eq(a.icrc_off[_LANE_BITS:]),
            j1["icrc_lane"].eq(a.icrc_off[:_LANE_BITS]),
            j1["end_beat"].eq(j0["need"][_LANE_BITS:]),
            j1["end_lane"].eq(j0["need"][:_LANE_BITS]),
            j1["old"].eq(j0["old"]),
            j1_x.eq(crc32_update(None, _swap16(a.sport_xor))),
        ]

        # J2 .. J(1 + DIST_BITS): x = dist[b] ? A**(2**b) @ x : x. The other fields ride along.
        x, fields, valid = j1_x, j1, j1_valid
        for b in range(DIST_BITS):
            nx = Signal(32, name=f"shift{b}", reset_less=True)
            nfields = {name: Signal(len(sig), name=f"shift{b}_{name}", reset_less=True)
                       for name, sig in fields.items() if name != "dist" or b < DIST_BITS - 1}
            nvalid = Signal(name=f"shift{b}_valid")
            m.d.sync += [
                nx.eq(Mux(fields["dist"][b], crc32_shift(x, 1 << b), x)),
                nvalid.eq(valid),
                *[nfields[name].eq(fields[name]) for name in nfields],
            ]
            x, fields, valid = nx, nfields, nvalid

        # The ICRC bytes paired into words by their parity from the UDP header, old and new, each pair summed.
        old = fields["old"]
        new = Signal(32, name="icrc_new")
        m.d.comb += new.eq(old ^ x)

        def words(v):
            b0, b1, b2, b3 = (_byte(v, k) for k in range(4))
            even = (Cat(b1, b0), Cat(b3, b2))        # (b0 b1), (b2 b3) as big-endian words
            odd = (Cat(b0, b3), Cat(b2, b1))         # (b3 b0), (b1 b2)
            return [Mux(fields["parity"], o_, e_) for e_, o_ in zip(even, odd)]

        old_w, new_w = words(old), words(new)
        sum_old = _oc_add(m, old_w[0], old_w[1], "icrc_sum_old")
        sum_new = _oc_add(m, new_w[0], new_w[1], "icrc_sum_new")
        s_valid = Signal()
        s_old = Signal(16, reset_less=True)
        s_new = Signal(16, reset_less=True)
        s_fields = {name: Signal(len(fields[name]), name=f"sum_{name}", reset_less=True)
                    for name in _EDIT_CARRIED}
        s_xor = Signal(32, reset_less=True)
        m.d.sync += [
            s_valid.eq(valid), s_old.eq(sum_old), s_new.eq(sum_new), s_xor.eq(x),
            *[s_fields[name].eq(fields[name]) for name in _EDIT_CARRIED],
        ]

        # The checksum term sum(new) - sum(old), then into the edit FIFO.
        term = _oc_add(m, s_new, ~s_old, "icrc_term")
        e_valid = Signal()
        edit = Signal(_EDIT, reset_less=True)
        m.d.sync += [
            e_valid.eq(s_valid),
            edit.icrc_xor.eq(s_xor),
            # Cut-through and fcs never write the checksum (a non-zero one sends the frame bad): no term then, which
            # takes the ICRC sums (the join's deepest stage) out of the design.
            edit.csum_icrc.eq(term if not self._late_check else 0),
            *[getattr(edit, name).eq(s_fields[name]) for name in _EDIT_CARRIED],
        ]
        m.d.comb += [edits.i.valid.eq(e_valid), edits.i.payload.eq(edit)]

    def _output(self, m, beats, edits, o):
        """O1 .. O6 never stall: every register advances every clock (bubbles where no beat was read), so no stall
        enable fans out across the 512-bit datapath. What leaves O6 is combined into the beat and written into
        the *skid buffer* (``SKID_DEPTH`` beats, LUT RAM, registered output), whose head is ``m_axis``. A beat
        is read out of the beat FIFO only while the skid buffer has room for it and for every beat already on
        its way there (a credit count), so back-pressure on ``m_axis`` stops the reads and never the pipeline."""
        nb = _BEAT_BYTES
        beat_layout = AxisBeat(data_width=8 * _BEAT_BYTES, user_width=self._user_width)
        m.submodules.skid = skid = StreamFIFO(shape=beat_layout, depth=self.SKID_DEPTH)
        credit = Signal(range(self.SKID_DEPTH + 1))     # beats read and not dropped, not yet taken on m_axis
        # room = (credit != SKID_DEPTH), kept in a register (the same value on every cycle) so that the FIFOs'
        # read enables, and through them the join's credit count, start at a flip-flop.
        room = Signal(init=1)
        read = Signal()
        sent = Signal()
        counted = Signal()
        m.d.comb += [
            read.eq(room & beats.o.valid & edits.o.valid),
            beats.o.ready.eq(room & edits.o.valid),
            edits.o.ready.eq(room & beats.o.valid & beats.o.payload.last),
            sent.eq(skid.o.valid & skid.o.ready),
            counted.eq(read & ~edits.o.payload.drop),
        ]
        m.d.sync += [
            credit.eq(_count(credit, counted & ~sent, sent & ~counted)),
            room.eq(sent | (room & ~(counted & (credit == self.SKID_DEPTH - 1)))),
        ]
        m.d.comb += [
            o.tvalid.eq(skid.o.valid),
            o.tdata.eq(skid.o.payload.data),
            o.tkeep.eq(skid.o.payload.keep),
            o.tlast.eq(skid.o.payload.last),
            o.tuser.eq(skid.o.payload.user),
            skid.o.ready.eq(o.tready),
        ]

        # O1: beat and edit out of their FIFOs; the beat's index in its frame, and that index minus one.
        idx = Signal(_BEAT_COUNT_BITS)
        idx_m1 = Signal(_BEAT_COUNT_BITS, init=(1 << _BEAT_COUNT_BITS) - 1)
        with m.If(read):
            with m.If(beats.o.payload.last):
                m.d.sync += [idx.eq(0), idx_m1.eq(idx_m1.init)]
            with m.Elif(idx != (1 << _BEAT_COUNT_BITS) - 1):
                m.d.sync += [idx.eq(idx + 1), idx_m1.eq(idx)]
        v1 = Signal()
        b1 = Signal(beat_layout, reset_less=True)
        e1 = Signal(_EDIT, reset_less=True)
        i1 = Signal(_BEAT_COUNT_BITS, reset_less=True)
        i1m = Signal(_BEAT_COUNT_BITS, reset_less=True)
        m.d.sync += [
            v1.eq(read & ~edits.o.payload.drop),
            b1.eq(beats.o.payload), e1.eq(edits.o.payload), i1.eq(idx), i1m.eq(idx_m1),
        ]

        # O2: which fields this beat holds.
        v2 = Signal()
        b2 = Signal(beat_layout, reset_less=True)
        e2 = Signal(_EDIT, reset_less=True)
        hit = {name: Signal(name=f"o2_{name}", reset_less=True) for name in ("sport", "csum", "icrc0", "icrc1")}
        on = v1 & e1.apply
        m.d.sync += [
            v2.eq(v1), b2.eq(b1), e2.eq(e1),
            hit["sport"].eq(on & (i1 == e1.sport_beat)),
            hit["csum"].eq(on & (i1 == e1.csum_beat)),
            hit["icrc0"].eq(on & (i1 == e1.icrc_beat)),       # ICRC bytes in lanes icrc_lane and up
            hit["icrc1"].eq(on & (i1m == e1.icrc_beat)),      # the bytes that wrapped into the next beat
        ]
        # Cut-through: a rewritten frame whose last beat ends before the ICRC's last byte (its real end
        # contradicts the headers the action was taken on).
        short2 = Signal()
        if self._late_check:
            before_end = (i1 < e1.end_beat) | ((i1 == e1.end_beat) & ~b1.keep.bit_select(e1.end_lane, 1))
            m.d.sync += short2.eq(on & b1.last & before_end)

        # O3: the XOR pattern for port and ICRC bytes; the old port (this beat's or held) and checksum.
        pattern = []
        for lane in range(nb):
            terms = []
            for k in range(4):
                # ICRC byte k is at lane (icrc_lane + k) mod 64, in the next beat when that wraps.
                here = (e2.icrc_lane == (lane - k) % nb) & (hit["icrc1"] if lane < k else hit["icrc0"])
                terms.append(Mux(here, _byte(e2.icrc_xor, k), 0))
            port_byte = e2.sport_xor[8:16] if lane % 2 == 0 else e2.sport_xor[0:8]
            terms.append(Mux(hit["sport"] & (e2.sport_word == lane // 2), port_byte, 0))
            acc = terms[0]
            for term in terms[1:]:
                acc = acc | term
            pattern.append(acc)
        sport_here = _swap16(b2.data.word_select(e2.sport_word, 16))
        csum_here = _swap16(b2.data.word_select(e2.csum_word, 16))
        sport_hold = Signal(16, reset_less=True)
        sport_cur = Signal(16)
        m.d.comb += sport_cur.eq(Mux(hit["sport"], sport_here, sport_hold))
        v3 = Signal()
        b3 = Signal(beat_layout, reset_less=True)
        x3 = Signal(8 * nb, reset_less=True)
        port3 = Signal(16, reset_less=True)
        csum3 = Signal(16, reset_less=True)
        xor3 = Signal(16, reset_less=True)
        term3 = Signal(16, reset_less=True)
        cword3 = Signal(nb // 2, reset_less=True)     # one-hot checksum word lane (all zero: none in this beat)
        bad3 = Signal()                # cut-through: this beat shows the frame must be sent bad
        last3 = Signal()
        if self._late_check:
            # A non-zero checksum cannot be updated without the old ICRC, which comes last. Tested on the
            # registered checksum (csum3), not on the 32-way word choice that feeds it.
            short3 = Signal()
            hit_csum3 = Signal()
            m.d.sync += [short3.eq(short2), hit_csum3.eq(hit["csum"]), last3.eq(v2 & b2.last)]
            m.d.comb += bad3.eq(short3 | (hit_csum3 & (csum3 != 0)))
        m.d.sync += [
            v3.eq(v2), b3.eq(b2), x3.eq(Cat(*pattern)),
            sport_hold.eq(sport_cur), port3.eq(sport_cur), csum3.eq(csum_here),
            xor3.eq(e2.sport_xor), term3.eq(e2.csum_icrc),
            cword3.eq(Cat(*[hit["csum"] & (e2.csum_word == j) for j in range(nb // 2)])),
        ]

        # O4: ~HC + ~m and m' + (ICRC term); O5: their sum; RFC 1624 eqn. 3.
        p = _oc_add(m, ~csum3, ~port3, "csum_p")
        q = _oc_add(m, port3 ^ xor3, term3, "csum_q")
        v4 = Signal()
        b4 = Signal(beat_layout, reset_less=True)
        x4 = Signal(8 * nb, reset_less=True)
        p4, q4, csum4 = (Signal(16, name=n, reset_less=True) for n in ("p4", "q4", "csum4"))
        cword4 = Signal(nb // 2, reset_less=True)
        m.d.sync += [v4.eq(v3), b4.eq(b3), x4.eq(x3), p4.eq(p), q4.eq(q), csum4.eq(csum3), cword4.eq(cword3)]
        bad4 = Signal()                # on the frame's last beat: send it bad
        if self._late_check:
            seen = Signal()                           # the frame on its way has shown it must be sent bad
            m.d.sync += [bad4.eq(last3 & (seen | bad3)), seen.eq(~last3 & (seen | bad3))]

        total = _oc_add(m, p4, q4, "csum_total")
        v5 = Signal()
        b5 = Signal(beat_layout, reset_less=True)
        x5 = Signal(8 * nb, reset_less=True)
        t5, csum5 = Signal(16, reset_less=True), Signal(16, reset_less=True)
        cword5 = Signal(nb // 2, reset_less=True)
        bad5 = Signal()
        m.d.sync += [v5.eq(v4), b5.eq(b4), x5.eq(x4), t5.eq(total), csum5.eq(csum4), cword5.eq(cword4),
                     bad5.eq(bad4)]
        if self._late_check:
            with m.If(bad5):
                m.d.sync += self.stats[64:].eq(self.stats[64:] + 1)

        # O6: HC' = ~total, a zero sent as 0xFFFF (both representations of zero give 0xFFFF); a zero HC stays.
        zero = (t5 == 0) | (t5 == 0xFFFF)
        new_csum = Mux(zero, 0xFFFF, ~t5)
        v6 = Signal()
        b6 = Signal(beat_layout, reset_less=True)
        x6 = Signal(8 * nb, reset_less=True)
        cx6 = Signal(16, reset_less=True)
        cword6 = Signal(nb // 2, reset_less=True)
        bad6 = Signal()
        m.d.sync += [
            v6.eq(v5), b6.eq(b5), x6.eq(x5), cword6.eq(cword5), bad6.eq(bad5),
            # Cut-through never writes the checksum (a non-zero one sends the frame bad instead).
            cx6.eq(Mux(csum5 != 0, _swap16(csum5 ^ new_csum), 0) if not self._late_check else 0),
        ]

        # O7: the beat into the skid buffer (its registered output is m_axis).
        csum_pattern = Cat(*[Mux(cword6[j], cx6, 0) for j in range(nb // 2)])
        keep_mask = Cat(*[b6.keep[k].replicate(8) for k in range(nb)])
        m.d.comb += [
            skid.i.valid.eq(v6),
            # Cut-through may be told to XOR ICRC bytes past a frame that ended early: never into the
            # undefined lanes of its last beat, which pass as they came.
            skid.i.payload.data.eq(b6.data ^ ((x6 ^ csum_pattern) & keep_mask if self._late_check
                                              else x6 ^ csum_pattern)),
            skid.i.payload.keep.eq(b6.keep),
            skid.i.payload.last.eq(b6.last),
            skid.i.payload.user.eq(b6.user | bad6),     # tuser bit 0: bad frame (the MAC aborts it)
        ]


#: Edit fields the join carries from J2 to the edit FIFO unchanged.
_EDIT_CARRIED = ("drop", "apply", "sport_beat", "sport_word", "csum_beat", "csum_word", "sport_xor", "icrc_beat",
                 "icrc_lane", "end_beat", "end_lane")
