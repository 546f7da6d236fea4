"""LAPS receiver in the wire (``laps-rx-wire``): the NIC's receive path for LAPS frames (LAPS, IEEE ToN, sections
III-B to III-G, Figures 3 and 5; datasheet docs/laps_rx_wire.md).

Frames from the network enter on ``s_axis``. The pipeline plays both LAPS roles on them:

* **Receiving host**, a LAPS data frame (``probe`` 0, ``ack`` 0): its LAPS header is removed before the host sees
  it (``m_axis``), and the pipeline builds the LAPS ACK itself and sends it on ``m_ack`` (towards the network):
  the data's ``pid``, the one-way latency ``now - time`` in the header's time field, the source route reversed
  (anchors in reverse order, ``sr_idx`` 0), the type bit kept. A probe (``probe`` 1, ``ack`` 0) is answered the
  same way with ``probe`` 1 and is not delivered (probes are generated and terminated at the NIC, III-B).
* **Sending host**, a LAPS ACK (``ack`` 1): a PIT update ``{pid, owd, now}`` (the layout of the PIT's ``upd``
  stream, :func:`lbpipe.hdl.laps.pit.PitUpdate`) leaves on ``upd`` and, for an ACK of data (not of a probe), a
  loss-detection item ``{flow, seq, pid, owd, now}`` on ``loss``; the ACK's LAPS header is removed before the host
  sees it; a probe ACK is not delivered.

**Where the ACK is generated** (choice; the issue leaves it open): in the pipeline, as a frame of its own on
``m_ack``. One ACK per data frame, a fixed number of cycles after the data's second beat, whatever the host does: a
RoCEv2 host coalesces its ACKs and sends them when its transport decides, so per-path ACK order (the loss rule of
III-G) and the latency sample would depend on the host; the pipeline keeps both exact, needs no state shared with
the transmit path, and answers probes the same way (the paper terminates probes at the NIC). The ACK carries 12
*echo* bytes: the first 12 bytes after the data's LAPS header (for a RoCEv2 payload, the BTH: destination QP at
echo bytes 5-7 is the ``flow``, the PSN at bytes 9-11 the ``seq`` the sender's loss detection reads back).

**ACK frame** (66 + 4 ``count`` bytes, two beats): Ethernet with the data's MACs swapped, untagged; IPv4 (TOS 0,
identification 0, DF, TTL from ``ctl``, default 64, checksum computed) from the data's destination to its source;
UDP from the data's source port to ``laps_port``, checksum 0; LAPS ``probe``, ``ack`` 1, ``count`` as the data's,
``sr_idx`` 0, ``pid``, ``time`` = latency, bytes 10-11 the data's (its inner port), anchors reversed; the 12 echo
bytes. With ``ipv6`` an IPv6 data frame or probe (UDP right after the fixed header, as the parser finds LAPS) is
answered by an IPv6 ACK (86 + 4 ``count`` bytes, still two beats): EtherType 0x86DD, version 6, traffic class and
flow label 0, payload length = the UDP length, next header UDP, hop limit = the ``ctl`` TTL, the data's 128-bit
addresses swapped; UDP checksum 0 (as ``laps-tx-wire``'s IPv6 probes: a closed LAPS fabric, RFC 6935/6936); the
rest as for IPv4. Without ``ipv6`` (the default, the same design as before) IPv6 frames are delivered but not
acknowledged (counted).

**Time.** ``now`` is the NIC's free-running 48-bit nanosecond clock (an input, as a shell's PTP timer gives it);
the frame's arrival time is ``now`` at its first beat. Latency = arrival - send time, modulo 2**48; a send time
after the arrival time (an offset between the clocks larger than the path latency, or a forged time) gives latency
0 and is counted, never a wrapped-around value. ``owd`` is the latency saturated at 0xFFFF_FFFE (0xFFFF_FFFF is
the PIT's infinity).

**Pipeline** (``latency`` cycles from a frame's first beat to its ACK's first beat on ``m_ack``)::

    s_axis -> Parser(early) --meta--> D1 take -> D2 classify, e, low half -> D3 high half, coarse picks
       |  window FIFO (first 2 beats, arrival time) -^        -> D4 fine picks, addresses -> D5 frame, sum
       '-> LapsEditor (REMOVE / drop / PASS) -> m_axis          -> D6 + constant -> D7 fold -> D8 outputs

The editor is cut-through (docs/packet_io.md): a host frame's first beat leaves 13 cycles after its action
reaches the editor, whatever the frame's size. Every D stage moves on one enable, ``adv``: every output register
(``m_ack``, ``upd``, ``loss``, the editor's action) free or being emptied.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.laps.pit import PitUpdate
from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.fifo import StreamFIFO
from lbpipe.hdl.packet.laps_editor import LapsEditor, N_COUNTERS as N_EDITOR_COUNTERS, OP_PASS, OP_REMOVE
from lbpipe.hdl.packet.parser import LAPS_PORT, Parser, check_laps_port

__all__ = ["LapsRxWire", "LossItem", "check_parameters", "N_STATS", "ECHO_BYTES", "ACK_TTL", "TABLE_CONFIG",
           "STAT_NAMES"]

TIME_BITS = 48
VAL_BITS = 32
OWD_MAX = (1 << VAL_BITS) - 2
#: Bytes after the data's LAPS header copied into its ACK.
ECHO_BYTES = 12
#: The ACK's IPv4 TTL at power-up.
ACK_TTL = 64
#: ``ctl`` table 0, index 0: ``data[0]`` ACKs enabled (1 at power-up), ``data[15:8]`` the ACKs' TTL.
TABLE_CONFIG = 0
STAT_NAMES = ("acked", "probes_answered", "acks", "probe_acks", "bad_pid", "future", "not_acked", "no_echo",
              "not_laps", "laps_bad")
N_STATS = len(STAT_NAMES)
_WIN = 128
_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_IP_UDP = 17


def LossItem():
    """A LAPS ACK for the loss detection and the AIMD controller: ``flow`` (echo bytes 5-7), ``seq`` (echo bytes
    9-11), ``pid``, ``owd`` (the ACK's latency, saturated), ``now`` (its arrival time)."""
    return data.StructLayout({"flow": 24, "seq": 24, "pid": 16, "owd": VAL_BITS, "now": TIME_BITS})


def _window_layout():
    return data.StructLayout({"w": 8 * _WIN, "t_rx": TIME_BITS})


def check_parameters(*, n_entries, k, depth, laps_port, ipv6=False):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with (shared with the model)."""
    if not isinstance(ipv6, bool):
        raise TypeError(f"ipv6 must be a bool, not {ipv6!r}")
    for name, value in (("n_entries", n_entries), ("k", k), ("depth", depth)):
        check_int(name, value)
    if not 1 <= k <= 32:
        raise ValueError(f"k must be 1 to 32, not {k}")
    if not 2 * k <= n_entries <= 1 << 16 or n_entries % k or (n_entries // k) & (n_entries // k - 1):
        raise ValueError(f"n_entries must be a multiple of k from 2k to 65536 with n_entries // k a power of two, "
                         f"not {n_entries}")
    if not 2 <= depth <= 4096:
        raise ValueError(f"depth must be from 2 to 4096, not {depth}")
    check_laps_port(laps_port)


def _be(value, n_bytes):
    """Wire bytes (most significant first) of a big-endian field."""
    return [value[8 * (n_bytes - 1 - k):8 * (n_bytes - k)] for k in range(n_bytes)]


def _raw(vec, first, n):
    """``n`` bytes of a little-endian-laned byte vector from byte ``first``, in wire order."""
    return [vec[8 * (first + k):8 * (first + k + 1)] for k in range(n)]


def _pick(m, adv, vec, off, size, name):
    """``size`` bytes of ``vec`` (lane order) at byte offset ``off`` (even), in two registered steps: 32 bytes at
    ``16 * (off >> 4)`` (an 8-way choice), then ``size`` at ``off & 15`` (an 8-way choice of even offsets).
    Returns the second step's register (two stages after ``off``)."""
    padded = Cat(vec, Const(0, 8 * 32))
    coarse = Signal(256, name=f"{name}_coarse")
    low = Signal(4, name=f"{name}_low")
    fine = Signal(8 * size, name=f"{name}_fine")
    with m.If(adv):
        m.d.sync += low.eq(off[:4])
        with m.Switch(off[4:8]):
            for c in range(len(vec) // 128):
                with m.Case(c):
                    m.d.sync += coarse.eq(padded[128 * c:128 * c + 256])
            with m.Default():
                m.d.sync += coarse.eq(0)
        with m.Switch(low[1:]):
            for k in range(8):
                with m.Case(k):
                    m.d.sync += fine.eq(coarse[16 * k:16 * k + 8 * size])
    return fine


class LapsRxWire(wiring.Component):
    """LAPS receiver in the wire (see the module docstring).

    Parameters
    ----------
    n_entries, k : int
        The PIT's size and sub-tables (``pid = sub_table * (n_entries // k) + index``, index 0 is no path): an ACK
        whose pid is out of range or has index 0 updates nothing (counted).
    depth : int
        The LAPS editor's beat FIFO, in beats (the editor is cut-through: frames of any length pass).
    laps_port : int
        UDP destination port of the LAPS shim.
    ipv6 : bool
        Answer IPv6 data frames and probes too (IPv6 ACKs); False: IPv4 only, IPv6 frames counted ``not_acked``.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
        Frames from the network.
    m_axis : Out(AXI4StreamSignature(512, 1))
        Frames to the host, LAPS headers removed.
    m_ack : Out(AXI4StreamSignature(512, 1))
        ACK and probe-ACK frames built here, towards the network.
    upd : Out(stream.Signature(PitUpdate()))
        PIT updates, one per LAPS ACK or probe ACK of a valid pid.
    loss : Out(stream.Signature(LossItem()))
        One per LAPS ACK of data of a valid pid.
    now : In(48)
        The NIC's clock, ns.
    ctl : In(ControlSignature())
        Table 0 index 0: ``data[0]`` ACKs on, ``data[15:8]`` TTL; other commands ignored.
    stats : Out(32 * (N_STATS + 7))
        :data:`STAT_NAMES`, then the LAPS editor's seven counters.
    """

    #: D stages from the parser's item to the output registers.
    STAGES = 8

    def __init__(self, *, n_entries=8192, k=8, depth=256, laps_port=LAPS_PORT, ipv6=False):
        check_parameters(n_entries=n_entries, k=k, depth=depth, laps_port=laps_port, ipv6=ipv6)
        self._n_entries, self._k, self._depth, self._laps_port = n_entries, k, depth, laps_port
        self._ipv6 = ipv6
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({
            "s_axis": In(axis),
            "m_axis": Out(axis),
            "m_ack": Out(axis),
            "upd": Out(stream.Signature(PitUpdate())),
            "loss": Out(stream.Signature(LossItem())),
            "now": In(TIME_BITS),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * (N_STATS + N_EDITOR_COUNTERS)),
        })

    @property
    def latency(self):
        """Edges from the one that takes a frame's first beat to the one after which its ACK's first beat is on
        ``m_ack``, unthrottled, for a frame of two beats or more: the second beat, the parser, the window FIFO's
        hand-over (the parser's item is the later) and the D stages."""
        return 1 + Parser.latency + self.STAGES

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = Parser(early=True, laps_port=self._laps_port)
        m.submodules.editor = editor = LapsEditor(depth=self._depth, laps_port=self._laps_port, cut_through=True)
        m.submodules.win = win = StreamFIFO(shape=_window_layout(), depth=16)
        wiring.connect(m, parser.m_axis, editor.s_axis)
        wiring.connect(m, editor.m_axis, wiring.flipped(self.m_axis))
        counters = [self.stats.word_select(i, 32) for i in range(N_STATS)]
        m.d.comb += self.stats[32 * N_STATS:].eq(editor.stats)
        self._capture(m, parser, win)
        cfg = self._config(m)
        adv = Signal()
        d1 = self._take(m, adv, parser, win)
        d2 = self._classify(m, adv, d1)
        d3 = self._high_half(m, adv, d2)
        d4 = self._fine(m, adv, d3, cfg)
        d5 = self._frame(m, adv, d4)
        d7 = self._checksum(m, adv, d5)
        self._outputs(m, adv, d7, editor, counters)
        return m

    def _capture(self, m, parser, win):
        """The window FIFO: a frame's first two beats (bytes beyond ``tkeep`` zeroed) and ``now`` at its first beat,
        written with its second beat (or its only one). ``s_axis`` moves only while the FIFO has room, so every
        window in it belongs to a frame whose item needs no more input."""
        s = self.s_axis
        first = Signal(init=1)
        second = Signal()
        beat0 = Signal(512)
        t0 = Signal(TIME_BITS)
        masked = Cat(*[Mux(s.tkeep[b], s.tdata[8 * b:8 * b + 8], 0) for b in range(64)])
        take = Signal()
        m.d.comb += [
            parser.s_axis.tdata.eq(s.tdata), parser.s_axis.tkeep.eq(s.tkeep), parser.s_axis.tlast.eq(s.tlast),
            parser.s_axis.tuser.eq(s.tuser),
            parser.s_axis.tvalid.eq(s.tvalid & win.i.ready),
            s.tready.eq(parser.s_axis.tready & win.i.ready),
            take.eq(s.tvalid & s.tready),
            win.i.valid.eq(take & (second | (first & s.tlast))),
            win.i.payload.w.eq(Mux(first, Cat(masked, Const(0, 512)), Cat(beat0, masked))),
            win.i.payload.t_rx.eq(Mux(first, self.now, t0)),
        ]
        with m.If(take):
            m.d.sync += [first.eq(s.tlast), second.eq(first & ~s.tlast)]
            with m.If(first):
                m.d.sync += [beat0.eq(masked), t0.eq(self.now)]

    def _config(self, m):
        """The ``ctl`` configuration register (survives reset: a control-plane setting)."""
        ack_on = Signal(init=1, reset_less=True)
        ttl = Signal(8, init=ACK_TTL, reset_less=True)
        c = self.ctl.payload
        m.d.comb += self.ctl.ready.eq(1)
        with m.If(self.ctl.valid & (c.table == TABLE_CONFIG) & (c.index == 0)):
            m.d.sync += [ack_on.eq(c.data[0]), ttl.eq(c.data[8:16])]
        return {"ack_on": ack_on, "ttl": ttl}

    def _take(self, m, adv, parser, win):
        """D1: the parser's item and its window, taken together, registered. Before D1, a skid register on the
        joined hand-over: the parser's and the window FIFO's ``ready`` are a flip-flop (``~held``), so no path runs
        from the outputs' ``ready`` through ``adv`` to ``s_axis.tready``; an item passes it without latency."""
        meta, wp = parser.meta.payload, win.o.payload
        fields = ("tag", "ipv4", "ipv6", "l3_off", "l4_off", "src_ip", "dst_ip", "udp_sport", "laps", "laps_bad",
                  "laps_probe", "laps_ack", "laps_count", "laps_pid", "laps_time", "laps_anchors", "laps_off")
        d1 = {f: Signal(len(getattr(meta, f)), name=f"d1_{f}") for f in fields}
        d1["w"], d1["t_rx"] = Signal(8 * _WIN, name="d1_w"), Signal(TIME_BITS, name="d1_t_rx")
        names = list(fields) + ["w", "t_rx"]
        src = Cat(*[getattr(meta, f) for f in fields], wp.w, wp.t_rx)
        held = Signal(name="d0_held")
        held_payload = Signal(len(src), name="d0_held_payload", reset_less=True)
        in_valid = parser.meta.valid & win.o.valid
        m.d.comb += [parser.meta.ready.eq(~held & win.o.valid), win.o.ready.eq(~held & parser.meta.valid)]
        with m.If(~held & in_valid & ~adv):
            m.d.sync += [held.eq(1), held_payload.eq(src)]
        with m.If(held & adv):
            m.d.sync += held.eq(0)
        cur = Mux(held, held_payload, src)
        d1["v"] = Signal(name="d1_v")
        with m.If(adv):
            at = 0
            for name in names:
                m.d.sync += d1[name].eq(cur[at:at + len(d1[name])])
                at += len(d1[name])
            m.d.sync += d1["v"].eq(held | in_valid)
        return d1

    def _classify(self, m, adv, d1):
        """D2: the frame's role, the pid check, the echo and inner-port offsets, the latency's low half."""
        sub = self._n_entries // self._k
        d2 = {name: Signal.like(sig, name=f"d2_{name}") for name, sig in d1.items()}
        extra = {"e": 8, "p": 8, "lo": 25, "pid_ok": 1, "echo_ok": 1}
        d2.update({name: Signal(w, name=f"d2_{name}") for name, w in extra.items()})
        pid = d1["laps_pid"]
        with m.If(adv):
            m.d.sync += [d2[n].eq(d1[n]) for n in d1]
            m.d.sync += [
                d2["e"].eq(d1["laps_off"] + 12 + (d1["laps_count"] << 2)),
                d2["p"].eq(d1["laps_off"] + 10),
                d2["lo"].eq(d1["t_rx"][:24] - d1["laps_time"][:24]),
                d2["pid_ok"].eq((pid < self._n_entries) & (pid[:(sub - 1).bit_length()] != 0)),
                d2["echo_ok"].eq(d1["laps_off"] + 12 + (d1["laps_count"] << 2) <= _WIN - ECHO_BYTES),
            ]
        return d2

    def _high_half(self, m, adv, d2):
        """D3: the latency's high half with the low half's borrow (bit 24: a send time from the future)."""
        d3 = {name: Signal.like(sig, name=f"d3_{name}") for name, sig in d2.items() if name != "w"}
        d3["hi"] = Signal(25, name="d3_hi")
        with m.If(adv):
            m.d.sync += [d3[n].eq(d2[n]) for n in d3 if n in d2]
            m.d.sync += d3["hi"].eq(d2["t_rx"][24:] - d2["laps_time"][24:] - d2["lo"][24])
        d3["echo"] = _pick(m, adv, d2["w"], d2["e"], ECHO_BYTES, "echo")
        d3["inner"] = _pick(m, adv, d2["w"], d2["p"], 2, "inner")
        d3["macs"] = Signal(96, name="d3_macs")
        mac1 = Signal(96, name="d2b_macs")
        with m.If(adv):
            m.d.sync += [mac1.eq(d2["w"][:96]), d3["macs"].eq(mac1)]
        return d3

    def _fine(self, m, adv, d3, cfg):
        """D4 (the picks' second step lands here): the latency saturated, the address sums, the checksum constant."""
        d4 = {name: Signal.like(sig, name=f"d4_{name}") for name, sig in d3.items()
              if name not in ("echo", "inner", "macs", "lo", "hi")}
        lat = Cat(d3["lo"][:24], d3["hi"][:24])
        future = d3["hi"][24]
        d4.update(lat=Signal(TIME_BITS, name="d4_lat"), owd=Signal(VAL_BITS, name="d4_owd"),
                  future=Signal(name="d4_future"), a=Signal(17, name="d4_a"), b=Signal(17, name="d4_b"),
                  k=Signal(17, name="d4_k"), ack_on=Signal(name="d4_ack_on"), ttl=Signal(8, name="d4_ttl"))
        with m.If(adv):
            m.d.sync += [d4[n].eq(d3[n]) for n in d4 if n in d3]
            m.d.sync += [
                d4["future"].eq(future),
                d4["lat"].eq(Mux(future, 0, lat)),
                # an ACK carries its latency in its time field: that is the PIT's real_val, saturated
                d4["owd"].eq(Mux(d3["laps_time"][VAL_BITS:].any() | (d3["laps_time"][:VAL_BITS] > OWD_MAX),
                                 OWD_MAX, d3["laps_time"][:VAL_BITS])),
                # the ACK's IPv4 source is the data's destination and vice versa; the sum is symmetric anyway
                d4["a"].eq(d3["dst_ip"][16:32] + d3["dst_ip"][:16]),
                d4["b"].eq(d3["src_ip"][16:32] + d3["src_ip"][:16]),
                d4["k"].eq(0x4500 + 52 + 0x4000 + _IP_UDP + (d3["laps_count"] << 2) + (cfg["ttl"] << 8)),
                d4["ack_on"].eq(cfg["ack_on"]), d4["ttl"].eq(cfg["ttl"]),
            ]
        # the picks and the MACs are registered two stages after D2, as D4's fields are
        d4["echo"], d4["inner"], d4["macs"] = d3["echo"], d3["inner"], d3["macs"]
        return d4

    def _frame(self, m, adv, d4):
        """D5: the ACK frame (checksum bytes 0) for its anchor count (and, with ``ipv6``, its family), and the first
        sum of the checksum."""
        keep = [n for n in d4 if n not in ("echo", "inner", "a", "b", "k", "w", "macs", "ttl")] + ["echo"]
        d5 = {n: Signal.like(d4[n], name=f"d5_{n}") for n in keep}
        size = 102 if self._ipv6 else 82
        d5["frame"] = Signal(8 * size, name="d5_frame")
        d5["c"] = Signal(18, name="d5_c")
        d5["k"] = Signal(17, name="d5_k")
        frames = {}
        for v6 in ((False, True) if self._ipv6 else (False,)):
            for c in range(5):
                out = _ack_bytes(d4, c, self._laps_port, ipv6=v6)
                frames[c | v6 << 3] = Cat(*out, Const(0, 8 * (size - len(out))))
        with m.If(adv):
            m.d.sync += [d5[n].eq(d4[n]) for n in keep]
            m.d.sync += [d5["c"].eq(d4["a"] + d4["b"]), d5["k"].eq(d4["k"])]
            with m.Switch(Cat(d4["laps_count"], d4["ipv6"]) if self._ipv6 else d4["laps_count"]):
                for case, frame in frames.items():
                    with m.Case(case):
                        m.d.sync += d5["frame"].eq(frame)
        return d5

    def _checksum(self, m, adv, d5):
        """D6: plus the constant words; D7: the first end-around carry."""
        keep = [n for n in d5 if n not in ("c", "k")]
        d6 = {n: Signal.like(d5[n], name=f"d6_{n}") for n in keep}
        d7 = {n: Signal.like(d5[n], name=f"d7_{n}") for n in keep}
        d6["d"] = Signal(19, name="d6_d")
        d7["e"] = Signal(17, name="d7_e")
        with m.If(adv):
            m.d.sync += [d6[n].eq(d5[n]) for n in keep] + [d7[n].eq(d6[n]) for n in keep]
            m.d.sync += [d6["d"].eq(d5["c"] + d5["k"]), d7["e"].eq(d6["d"][:16] + d6["d"][16:])]
        return d7

    def _outputs(self, m, adv, d7, editor, counters):
        """D8: the checksum's complement into the ACK frame; the output registers (``m_ack``, ``upd``, ``loss``, the
        editor's action) and the counters."""
        o, u, lo, act = self.m_ack, self.upd, self.loss, editor.act
        beat = Signal()
        hi = Signal(512)
        n1 = Signal(3)
        v6 = Signal()           # the ACK in the output register is IPv6 (20 bytes more in its second beat)
        ack_free = ~o.tvalid | (o.tready & beat)
        with m.If(o.tvalid & o.tready):
            m.d.sync += beat.eq(~beat)
            with m.If(beat):
                m.d.sync += o.tvalid.eq(0)
        with m.If(u.valid & u.ready):
            m.d.sync += u.valid.eq(0)
        with m.If(lo.valid & lo.ready):
            m.d.sync += lo.valid.eq(0)
        with m.If(act.valid & act.ready):
            m.d.sync += act.valid.eq(0)
        keep1 = Signal(64)
        m.d.comb += [keep1.eq(Mux(n1 == 0, (1 << 2) - 1, 0)), o.tuser.eq(0), o.tlast.eq(beat)]
        for c in range(1, 5):
            with m.If(n1 == c):
                m.d.comb += keep1.eq((1 << (2 + 4 * c)) - 1)
        if self._ipv6:
            for c in range(5):
                with m.If(v6 & (n1 == c)):
                    m.d.comb += keep1.eq((1 << (22 + 4 * c)) - 1)
        lo512 = Signal(512)
        m.d.comb += [o.tdata.eq(Mux(beat, hi, lo512)), o.tkeep.eq(Mux(beat, keep1, (1 << 64) - 1))]

        v = d7["v"]
        laps, probe, ack = d7["laps"], d7["laps_probe"], d7["laps_ack"]
        is_req = v & laps & ~ack                    # data or probe: answered
        is_ack = v & laps & ack                     # ACK or probe ACK: taken
        family = (d7["ipv4"] | d7["ipv6"]) if self._ipv6 else d7["ipv4"]
        make_ack = is_req & family & d7["ack_on"]
        chk = Signal(16)
        m.d.comb += chk.eq(~(d7["e"][:16] + d7["e"][16]))
        if self._ipv6:
            # bytes 24-25 of an IPv6 ACK are its source address: no IPv4 header checksum there
            frame = d7["frame"] | (Mux(d7["ipv6"], 0, Cat(chk[8:], chk[:8])) << (8 * 24))
        else:
            frame = d7["frame"] | (Cat(chk[8:], chk[:8]) << (8 * 24))
        want_upd = is_ack & d7["pid_ok"]
        want_loss = want_upd & ~probe
        # D8 waits only for the registers it loads; a bubble in D8 never waits
        m.d.comb += adv.eq(~v | ((~make_ack | ack_free) & (~want_upd | ~u.valid | u.ready)
                                 & (~want_loss | ~lo.valid | lo.ready) & (~act.valid | act.ready)))
        with m.If(adv):
            with m.If(make_ack):
                m.d.sync += [o.tvalid.eq(1), beat.eq(0), lo512.eq(frame[:512]), hi.eq(frame[512:]),
                             n1.eq(d7["laps_count"])]
                if self._ipv6:
                    m.d.sync += v6.eq(d7["ipv6"])
            with m.If(is_ack & d7["pid_ok"]):
                m.d.sync += [u.valid.eq(1), u.payload.pid.eq(d7["laps_pid"]), u.payload.owd.eq(d7["owd"]),
                             u.payload.now.eq(d7["t_rx"])]
            with m.If(is_ack & ~probe & d7["pid_ok"]):
                echo = d7["echo"]
                m.d.sync += [lo.valid.eq(1), lo.payload.pid.eq(d7["laps_pid"]), lo.payload.owd.eq(d7["owd"]),
                             lo.payload.now.eq(d7["t_rx"]),
                             lo.payload.flow.eq(Cat(*reversed(_raw(echo, 5, 3)))),
                             lo.payload.seq.eq(Cat(*reversed(_raw(echo, 9, 3))))]
            with m.If(v):
                a = act.payload
                m.d.sync += [act.valid.eq(1), a.tag.eq(d7["tag"]), a.ipv6.eq(d7["ipv6"]), a.l3_off.eq(d7["l3_off"]),
                             a.l4_off.eq(d7["l4_off"]), a.count.eq(d7["laps_count"]),
                             a.op.eq(Mux(laps & ~probe, OP_REMOVE, OP_PASS)), a.drop.eq(laps & probe)]
            bump = {
                0: make_ack & ~probe, 1: make_ack & probe, 2: is_ack & ~probe & d7["pid_ok"],
                3: is_ack & probe & d7["pid_ok"], 4: v & laps & ~d7["pid_ok"], 5: is_req & d7["future"],
                6: is_req & ~make_ack, 7: is_req & ~probe & ~d7["echo_ok"], 8: v & ~laps & ~d7["laps_bad"],
                9: v & d7["laps_bad"],
            }
            for i, cond in bump.items():
                with m.If(cond):
                    m.d.sync += counters[i].eq(counters[i] + 1)


def _ack_bytes(f, c, laps_port, *, ipv6=False):
    """The ACK frame's 66 + 4c bytes (IPv4, checksum 0) or 86 + 4c bytes (``ipv6``) from the D4 fields, for an
    anchor count ``c``."""
    w_mac = f["macs"]
    total, udp_len = 52 + 4 * c, 32 + 4 * c
    anchors = [f["laps_anchors"][32 * (c - 1 - i):32 * (c - i)] for i in range(c)]
    # the EtherType and the IP header
    if ipv6:
        # version 6, traffic class 0, flow label 0, payload length = the UDP length, UDP, hop limit = the TTL
        l3 = ([Const(_ETH_IPV6 >> 8, 8), Const(_ETH_IPV6 & 0xFF, 8), Const(0x60, 8), Const(0, 8), Const(0, 8),
               Const(0, 8), Const(udp_len >> 8, 8), Const(udp_len & 0xFF, 8), Const(_IP_UDP, 8), f["ttl"]]
              + _be(f["dst_ip"], 16) + _be(f["src_ip"], 16))
    else:
        l3 = ([Const(_ETH_IPV4 >> 8, 8), Const(_ETH_IPV4 & 0xFF, 8)]
              + [Const(0x45, 8), Const(0, 8), Const(total >> 8, 8), Const(total & 0xFF, 8), Const(0, 8),
                 Const(0, 8), Const(0x40, 8), Const(0, 8), f["ttl"], Const(_IP_UDP, 8), Const(0, 8), Const(0, 8)]
              + _be(f["dst_ip"][:32], 4) + _be(f["src_ip"][:32], 4))
    out = (_raw(w_mac, 6, 6) + _raw(w_mac, 0, 6) + l3
           + _be(f["udp_sport"], 2) + [Const(laps_port >> 8, 8), Const(laps_port & 0xFF, 8),
                                       Const(udp_len >> 8, 8), Const(udp_len & 0xFF, 8), Const(0, 8), Const(0, 8)]
           + [Cat(Const(c, 4), Const(0, 2), Const(1, 1), f["laps_probe"]), Const(0, 8)]
           + _be(f["laps_pid"], 2) + _be(f["lat"], 6) + _raw(f["inner"], 0, 2)
           + [b for a in anchors for b in _be(a, 4)] + _raw(f["echo"], 0, ECHO_BYTES))
    assert len(out) == (86 if ipv6 else 66) + 4 * c
    return out
