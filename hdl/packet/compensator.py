"""Compensator: the frame end of Themis-D in the wire. It drops blocked NACKs, records the NACK that armed
compensation, and sends that NACK again when Themis-D asks for compensation (paper 001, section 3.4).

Themis-D (:mod:`lbpipe.hdl.themis.themis_d`) decides per packet; this stage applies the decisions to frames. Frames come
unchanged from the parser on ``s_axis``; one :func:`CompAction` per frame comes, in frame order, on ``act``.

**The compensation NACK is the blocked NACK, sent again** (choice; the paper says only that the ToR "generates a
NACK for the BePSN"). The NACK Themis-D must send on the NIC's behalf carries ePSN = BePSN and the MSN the NIC
would have sent; BePSN and that MSN are the PSN and MSN of the NACK that armed compensation (``arm`` in
:func:`lbpipe.hdl.themis.themis_d.ThemisDResult`), which the NIC built from the QP's real addresses, ports, P_Key, IP
fields and ICRC. So the stage records the frame of each NACK that arms (``record``) in a per-QP template, and on
``comp`` sends the QP's template unchanged: the NACK the NIC sent, byte for byte, with a valid ICRC and IPv4
checksum, and nothing for the control plane to configure or keep in step with the NIC. The cost is the template
memory: :attr:`Compensator.RECORD_BEATS` (2) beats per QP, 128 bytes, which holds any RoCEv2 NAK (62 bytes over
IPv4, 82 over IPv6, plus up to two VLAN tags, 40 bytes of IPv4 options, and Ethernet padding). A NACK frame longer
than that is not recorded: the QP's template becomes empty and a later ``comp`` sends nothing (counted). Which
frame a ``comp`` sends is decided when it is served: the template last recorded for its QP by an earlier frame (or
by its own frame, if one action carried both, which Themis-D never emits).

**Where the NACK goes** (choice): it leaves on ``m_axis`` right after the frame whose action asked for it, as a
frame of its own; the switch or NIC shell behind the pipeline forwards it by its addresses like any NACK from the
NIC. ``tuser`` of its beats is the recorded frame's.

**Bad input** (choice): ``qp`` at or above ``n_qps`` records nothing and sends nothing (a ``comp`` is then counted
as missed). The template memories are not reset (reset clears the counters, the frame buffer and the state
machine): a template recorded before a reset is still sent by a ``comp`` after it, except that a record cut short
by the reset leaves its QP's template empty (the flags are cleared with the frame's first beat and set with its
last). Themis-D clears its flow table on reset and a QP set-up disarms, so in the wire pipeline a ``comp`` always
follows a ``record`` of its QP made since.

**Frames longer than the beat FIFO** (choice). A frame of more than ``depth`` beats cannot wait in the beat FIFO for
an action that comes after its last beat (as every action does in the wire pipeline): its own beats would fill the
FIFO and hold ``s_axis.tready`` low for ever. So its ``depth``-th beat is written as its last and marked *cut*, and
the rest of it is taken from ``s_axis`` and discarded. Its first ``depth`` beats are then a frame like any other,
under the frame's action: ``drop`` drops them, otherwise they leave (the ``depth``-th with ``tlast``), and ``comp``
sends the QP's template after them (the compensation concerns another packet and Themis-D has already disarmed, so
losing it would leave the sender to its timeout). A cut frame is never recorded: ``record`` empties the QP's template
and counts as too long to record, as for any frame over two beats (a cut frame has more than ``depth`` >= 2).
Counter 5 counts cut frames whatever their action (one with ``drop`` counts in counter 0 as well).

Why cut short and not dropped whatever the action, as the deparser drops: this stage is cut-through when the action
is there first (a frame's first beat leaves one cycle after it reaches the head of the beat FIFO), so a frame's first
beats may have left before its ``depth``-th beat shows that it is too long. Dropping it always would mean holding
every frame until its last beat is in, which costs latency and throughput when actions come early; a rule that
depended on when the action came would make the output depend on timing. In the wire pipeline, where the action
always comes after the last beat, the two rules differ only in whether the ``depth`` beats leave.

**Buffers and flow control.** The *beat FIFO* (``depth`` beats, block RAM) holds frames until their action arrives,
as the deparser's does: a frame must fit in it to leave whole (the action comes after its last beat), and for one
beat per clock it must also hold what arrives while a frame waits for its action: ``depth`` at least the largest
frame's beats plus the action latency (about 20 cycles in the Themis-D pipeline). The *action FIFO* (``depth``
entries) holds the actions of frames still in the beat FIFO, so the stages that decide them never wait for a long
frame ahead to leave; when actions come after their frames' last beats (as in the wire pipeline) it cannot fill
while the beat FIFO has room, since an action leaves with its frame's last beat. ``s_axis.tready`` is high while the
beat FIFO has room or the rest of a cut frame is being discarded, ``act.ready`` while the action FIFO has room.
The action FIFO is a FIFO of ``depth - 1`` entries followed by a skid register of one (``depth`` actions in all):
the register takes the FIFO's head at once and offers it, the same cycle, to the frame logic, and keeps it until the
frame's last beat leaves. The FIFO's read enable is then a flip-flop (register empty) rather than the frame logic's
``take``, so the state, the head beat and ``m_axis`` room reach one register enable and not the FIFO's count
(that path was 7 logic levels in the wire pipeline; no cycle added: an action offered at the FIFO's output is used
in that cycle, and the FIFO reloads its output while the register holds the action).
Actions are paired with frames in order only: an action may arrive before its frame (pairing it with the right frame
is the sender's business; in the wire pipeline it cannot, as the parser emits a frame's item after its last beat). A
beat leaves the beat FIFO when its frame's action is at the head of the action FIFO and the ``m_axis`` register can
take it (or the frame is dropped); the action leaves with the frame's last beat. Frames pass at one beat per clock.
A compensation NACK costs two cycles to fetch its template (the memory read, then its registered output, as block
RAM outputs are registered) and one cycle per beat sent; frames behind it wait.

Counters (``stats``, 32 bits each, wrapping; cleared by reset): 0 frames dropped (by their action), 1 NACK frames
recorded, 2 NACK frames too long to record, 3 compensation NACKs sent, 4 compensations missed (no template), 5 frames
cut for being longer than ``depth`` beats.
"""

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature, AxisBeat
from lbpipe.hdl.lib.control import check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.lib.meta import TAG_BITS

__all__ = ["Compensator", "CompAction", "N_COUNTERS", "check_parameters"]

_BEAT_BYTES = 64
#: Counters in ``stats``.
N_COUNTERS = 6


def _qp_bits(n_qps):
    return max(1, (n_qps - 1).bit_length())


def CompAction(*, n_qps):
    """What to do with one frame (first field in the low bits).

    =======  =====  =========================================================================================
    field    bits   meaning
    =======  =====  =========================================================================================
    tag      16     opaque, not interpreted (the pipeline's frame tag)
    drop     1      discard the frame (a blocked NACK)
    record   1      the frame is the NACK that armed compensation: make it QP ``qp``'s template
    comp     1      after the frame, send QP ``qp``'s template
    qp       *      flow-table index, ``ceil(log2(n_qps))`` bits
    =======  =====  =========================================================================================
    """
    return data.StructLayout({"tag": TAG_BITS, "drop": 1, "record": 1, "comp": 1, "qp": _qp_bits(n_qps)})


def check_parameters(*, n_qps, depth, user_width):
    """Raise ``TypeError``/``ValueError`` for parameters the block does not take (shared with the golden model)."""
    for name, value, lo, hi in (("n_qps", n_qps, 1, 65536), ("depth", depth, 2, 4096),
                                ("user_width", user_width, 1, 64)):
        check_int(name, value)
        if not lo <= value <= hi:
            raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")


class Compensator(wiring.Component):
    """Frame drop, NACK recording and compensation-NACK insertion (see the module docstring).

    Parameters
    ----------
    n_qps : int
        Templates (Themis-D's flow-table entries), 1 to 65536.
    depth : int
        Beat FIFO, in beats, 2 to 4096; a longer frame is cut to ``depth`` beats (module docstring).
    user_width : int
        Width of ``tuser``.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, user_width))
    m_axis : Out(AXI4StreamSignature(512, user_width))
    act : In(stream.Signature(CompAction(n_qps=n_qps)))
    stats : Out(32 * N_COUNTERS)
        The counters of the module docstring; counter ``i`` in bits ``32i+31:32i``; counter 5 (frames cut for being
        longer than ``depth`` beats) is the last.

    Raises
    ------
    TypeError, ValueError
        For parameters of the wrong type or out of range.
    """

    #: Beats a template holds.
    RECORD_BEATS = 2
    #: Cycles from the edge that takes a beat out of the frame buffer to the one that offers it on ``m_axis``
    #: (the beat FIFO's own registered output adds one more after ``s_axis``).
    latency = 1

    def __init__(self, *, n_qps=1600, depth=256, user_width=1):
        check_parameters(n_qps=n_qps, depth=depth, user_width=user_width)
        self._n_qps = n_qps
        self._depth = depth
        self._user_width = user_width
        axis = AXI4StreamSignature(data_width=8 * _BEAT_BYTES, user_width=user_width)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "act": In(stream.Signature(CompAction(n_qps=n_qps))),
            "stats": Out(32 * N_COUNTERS),
        })

    @property
    def n_qps(self):
        return self._n_qps

    @property
    def depth(self):
        return self._depth

    @property
    def max_frame_bytes(self):
        """The longest frame that leaves whole (longer ones are cut to this and counted in ``stats``)."""
        return self._depth * _BEAT_BYTES

    @property
    def template_bits(self):
        """Bits of template memory: two beats of data and ``tuser``, the last beat's ``tkeep`` and two flags, per
        QP."""
        return self._n_qps * _template_meta(self._user_width).size + \
            self._n_qps * self.RECORD_BEATS * (8 * _BEAT_BYTES)

    def elaborate(self, platform):
        m = Module()
        uw = self._user_width
        s, o, act = self.s_axis, self.m_axis, self.act
        m.submodules.beats = beats = StreamFIFO(shape=_buffered_beat(uw), depth=self._depth)
        self._cut_input(m, s, beats.i)

        # Actions wait in their own FIFO for their frames to reach the head of the beat FIFO, so that Themis-D and
        # the stages before it never wait for the frame end: behind a long frame, the short frames after it have
        # their actions decided and queued. When each action comes after its frame's last beat has entered the beat
        # FIFO (the parser's contract), it cannot fill while the beat FIFO has room: an action leaves with its frame's
        # last beat, and every frame has at least one beat.
        # The FIFO holds ``depth - 1`` actions and the skid register after it (``_act_skid``) one more: ``depth`` in all.
        m.submodules.acts = acts = StreamFIFO(shape=CompAction(n_qps=self._n_qps), depth=self._depth - 1)
        wiring.connect(m, wiring.flipped(act), acts.i)
        act = self._act_skid(m, acts.o)

        meta_layout = _template_meta(uw)
        # Beat 0 and beat 1 of each QP's template in two memories (each beat is written as it passes), the flags
        # and the last beat's keep in a third, written with the frame's last beat.
        m.submodules.tpl0 = tpl0 = memory.Memory(shape=8 * _BEAT_BYTES, depth=self._n_qps, init=[])
        m.submodules.tpl1 = tpl1 = memory.Memory(shape=8 * _BEAT_BYTES, depth=self._n_qps, init=[])
        m.submodules.tmeta = tmeta = memory.Memory(shape=meta_layout, depth=self._n_qps, init=[])
        w0, w1, wm = tpl0.write_port(), tpl1.write_port(), tmeta.write_port()
        r0, r1, rm = tpl0.read_port(), tpl1.read_port(), tmeta.read_port()

        head, a = beats.o.payload, act.payload
        out_free = Signal()
        m.d.comb += out_free.eq(~o.tvalid | o.tready)
        with m.If(o.tvalid & o.tready):
            m.d.sync += o.tvalid.eq(0)

        in_range = Signal()
        m.d.comb += in_range.eq(a.qp < self._n_qps)
        idx = Signal(range(3))          # beat index in the frame, saturating at 2
        user0 = Signal(uw)              # the recorded frame's first tuser
        gen_qp = Signal.like(a.qp)
        t_meta = Signal(meta_layout)
        t_data0 = Signal(8 * _BEAT_BYTES)
        t_data1 = Signal(8 * _BEAT_BYTES)
        counters = [self.stats.word_select(i, 32) for i in range(N_COUNTERS)]

        def count(i):
            return counters[i].eq(counters[i] + 1)

        m.d.comb += [r0.addr.eq(gen_qp), r1.addr.eq(gen_qp), rm.addr.eq(gen_qp)]
        record = a.record & in_range
        m.d.comb += [
            w0.addr.eq(a.qp), w1.addr.eq(a.qp), wm.addr.eq(a.qp),
            w0.data.eq(head.data), w1.data.eq(head.data),
            wm.data.ok.eq(head.last & (idx < 2) & ~head.cut), wm.data.two.eq(idx == 1), wm.data.keep.eq(head.keep),
            wm.data.user0.eq(Mux(idx == 0, head.user, user0)), wm.data.user1.eq(head.user),
        ]

        # The enables are unconditional assignments from the state (not assignments inside the FSM's cases): the
        # Verilog is then continuous assignments, which an event-driven simulator evaluates at time zero, where a
        # combinational process may miss its first evaluation and hold X until an input changes.
        # ``in_pass`` is a flip-flop kept beside the state machine (set with every move to PASS, cleared with the
        # move out of it) rather than decoded from the state: ``take`` is then one LUT of flip-flops and m_axis.tready.
        in_pass = Signal(init=1)
        fetch = Signal()
        take = Signal()
        m.d.comb += [
            take.eq(in_pass & beats.o.valid & act.valid & out_free),
            beats.o.ready.eq(take),
            act.ready.eq(take & head.last),
            w0.en.eq(take & record & (idx == 0)),
            w1.en.eq(take & record & (idx == 1)),
            # The flags are written empty with the first beat and for good with the last, so a record cut short by
            # reset leaves the template empty rather than half old, half new.
            wm.en.eq(take & record & (head.last | (idx == 0))),
            r0.en.eq(fetch), r1.en.eq(fetch), rm.en.eq(fetch),
        ]

        with m.FSM(init="PASS") as fsm:
            with m.State("PASS"):
                with m.If(take):
                    with m.If(~a.drop):
                        m.d.sync += [o.tvalid.eq(1), o.tdata.eq(head.data), o.tkeep.eq(head.keep),
                                     o.tlast.eq(head.last), o.tuser.eq(head.user)]
                    with m.If(idx == 0):
                        m.d.sync += user0.eq(head.user)
                    with m.If(head.last):
                        m.d.sync += idx.eq(0)
                        with m.If(a.drop):
                            m.d.sync += count(0)
                        with m.If(head.cut):
                            m.d.sync += count(5)
                        with m.If(record):
                            with m.If((idx < 2) & ~head.cut):
                                m.d.sync += count(1)
                            with m.Else():
                                m.d.sync += count(2)
                        with m.If(a.comp):
                            with m.If(in_range):
                                m.d.sync += [gen_qp.eq(a.qp), in_pass.eq(0)]
                                m.next = "FETCH"
                            with m.Else():
                                m.d.sync += count(4)
                    with m.Elif(idx != 2):
                        m.d.sync += idx.eq(idx + 1)

            with m.State("FETCH"):
                m.next = "LOAD"

            with m.State("LOAD"):
                m.d.sync += [t_meta.eq(rm.data), t_data0.eq(r0.data), t_data1.eq(r1.data)]
                m.next = "EMIT0"

            with m.State("EMIT0"):
                with m.If(~t_meta.ok):
                    m.d.sync += [count(4), in_pass.eq(1)]
                    m.next = "PASS"
                with m.Elif(out_free):
                    m.d.sync += [
                        o.tvalid.eq(1), o.tdata.eq(t_data0),
                        o.tkeep.eq(Mux(t_meta.two, Const(-1, _BEAT_BYTES), t_meta.keep)),
                        o.tlast.eq(~t_meta.two), o.tuser.eq(t_meta.user0), count(3),
                    ]
                    with m.If(t_meta.two):
                        m.next = "EMIT1"
                    with m.Else():
                        m.d.sync += in_pass.eq(1)
                        m.next = "PASS"

            with m.State("EMIT1"):
                with m.If(out_free):
                    m.d.sync += [o.tvalid.eq(1), o.tdata.eq(t_data1), o.tkeep.eq(t_meta.keep), o.tlast.eq(1),
                                 o.tuser.eq(t_meta.user1), in_pass.eq(1)]
                    m.next = "PASS"
        m.d.comb += fetch.eq(fsm.ongoing("FETCH"))
        return m

    @staticmethod
    def _act_skid(m, fifo_out):
        """The action FIFO's output through a skid register; returns the stream the frame logic takes actions from.

        Registers ``act_held`` and ``act_held_payload``. The FIFO's ``ready`` is ``~act_held``, a flip-flop: the
        action at the FIFO's head is taken at once, passed straight on (no latency) and, if the frame logic does not
        take it in that cycle (its frame's last beat has not left), held in the register and offered from there
        until it does. So the frame logic's decision (state, beat at the head, ``m_axis`` room) reaches the register's
        enable and no further, never the FIFO's level and pointers. Actions stay in order and one per clock:
        the FIFO reloads its output while the held action waits."""
        out = stream.Signature(fifo_out.payload.shape()).create(path=("act_skid",))
        held = Signal(name="act_held")
        held_payload = Signal.like(fifo_out.payload, name="act_held_payload", reset_less=True)
        m.d.comb += [
            fifo_out.ready.eq(~held),
            out.valid.eq(held | fifo_out.valid),
            out.payload.eq(Mux(held, held_payload, fifo_out.payload)),
        ]
        with m.If(~held & fifo_out.valid & ~out.ready):
            m.d.sync += [held.eq(1), held_payload.eq(fifo_out.payload)]
        with m.If(held & out.ready):
            m.d.sync += held.eq(0)
        return out

    def _cut_input(self, m, s, w):
        """``s_axis`` into the beat FIFO's input ``w``, cutting frames longer than the FIFO (module docstring).

        Registers ``n_in`` (beats of the frame on ``s_axis`` written so far, up to ``depth - 1``), ``at_limit``
        (``n_in == depth - 1``, registered so that no compare lies between ``s_axis`` and the FIFO) and
        ``discarding`` (the rest of a cut frame is being taken and thrown away). The ``depth``-th beat of a frame
        without ``tlast`` is written with ``last`` and ``cut``: a frame that waited for its room in the FIFO would
        wait for ever, as its own beats hold it."""
        n_in = Signal(range(self._depth))
        at_limit = Signal()           # the next beat taken is the frame's depth-th (n_in == depth - 1)
        discarding = Signal()
        cut = Signal()
        m.d.comb += [
            cut.eq(~s.tlast & at_limit),
            w.payload.data.eq(s.tdata), w.payload.keep.eq(s.tkeep), w.payload.user.eq(s.tuser),
            w.payload.last.eq(s.tlast | cut), w.payload.cut.eq(cut),
            w.valid.eq(s.tvalid & ~discarding),
            s.tready.eq(discarding | w.ready),
        ]
        with m.If(s.tvalid & s.tready):
            with m.If(discarding):
                m.d.sync += discarding.eq(~s.tlast)
            with m.Elif(s.tlast | at_limit):
                m.d.sync += [n_in.eq(0), at_limit.eq(0), discarding.eq(cut)]
            with m.Else():
                m.d.sync += [n_in.eq(n_in + 1), at_limit.eq(n_in == self._depth - 2)]


def _buffered_beat(user_width):
    """A beat in the beat FIFO: :func:`lbpipe.hdl.lib.axis.AxisBeat` and ``cut`` (set on the last beat written of a
    frame longer than the FIFO)."""
    beat = AxisBeat(data_width=8 * _BEAT_BYTES, user_width=user_width)
    return data.StructLayout({**{name: field.shape for name, field in beat}, "cut": 1})


def _template_meta(user_width):
    """A template's flags: ``ok`` (a frame of at most two beats was recorded), ``two`` (it has two beats), the last
    beat's ``keep``, and the ``tuser`` of each beat."""
    return data.StructLayout({"ok": 1, "two": 1, "keep": _BEAT_BYTES, "user0": user_width, "user1": user_width})
