"""LAPS probe frames merged into the sender's output (LAPS, IEEE ToN, Algorithm 1 lines 5-8 and section III-D,
active probing; issue 13; datasheet docs/laps_tx_wire.md, "Probe frames").

:class:`ProbeGen` sits after the LAPS header editor. Each frame that leaves the editor has one request
(:func:`ProbeRequest`, in frame order); a request with ``probe`` set turns the frame into a template: the probe
frame is the frame's bytes up to and including its UDP source port, then UDP destination port ``laps_port``, UDP
length ``8 + 12 + 4 count``, UDP checksum 0, and a LAPS header of type 1 (probe bit set, ack 0, ``sr_idx`` 0, the
probed path's pid, anchor count and anchors, ``time`` the triggering frame's time, the triggering frame's original
UDP destination port in bytes 10-11), and no payload. The IPv4 total length (and header checksum, updated by RFC
1624's rule from the frame's own) or the IPv6 payload length are set for that length.

Choices where the paper is silent:

* The probe leaves **right after its triggering frame**, never inside a frame; the next frame waits for it. The probe
  is built from the first two beats of the triggering frame as it leaves, over a 6-stage pipeline (``READY_AGE``),
  so after a frame shorter than 6 beats the output idles until the probe is ready.
* A probe waits for the output (back-pressure holds it like a frame); it is never dropped for back-pressure; reset
  drops a pending probe. A probe always fits the two captured beats: the longest is 118 bytes (two VLAN tags, an
  IPv4 header with 40 bytes of options, UDP, a LAPS header with 4 anchors), so none is ever dropped for its size.
* The UDP checksum is 0, for IPv6 too (the LAPS receiver consumes probes; RFC 6935/6936's zero checksum for a
  tunnel-like shim).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.axis import AXI4StreamSignature
from lbpipe.hdl.lib.stage import counter32
from lbpipe.hdl.packet.parser import LAPS_PORT, check_laps_port
from lbpipe.protocol import LAPS_FIXED_BYTES, LAPS_MAX_ANCHORS

__all__ = ["ProbeGen", "ProbeRequest", "N_STATS", "READY_AGE"]

#: Counters: probe frames sent.
N_STATS = 1
#: Cycles from a triggering frame's first beat out to the earliest cycle its probe can leave.
READY_AGE = 6
#: Bytes from the UDP destination port to the end of a LAPS header with four anchors.
_TAIL = 6 + LAPS_FIXED_BYTES + 4 * LAPS_MAX_ANCHORS
_BYTES = 128


def ProbeRequest():
    """One per frame, in frame order: whether it triggers a probe, the probed path's pid, anchor count and anchors
    (anchor ``a`` in bits ``32a`` up), the frame's IP family and header offsets, its time and original UDP
    destination port."""
    return data.StructLayout({"probe": 1, "pid": 16, "count": 3, "anchors": 128, "ipv6": 1, "l3_off": 8,
                              "l4_off": 8, "time": 48, "dport": 16})


def _be(value, nbytes):
    """``value``'s bytes in wire order (most significant first)."""
    return [value.word_select(nbytes - 1 - n, 8) for n in range(nbytes)]


class ProbeGen(wiring.Component):
    """Frames in, the same frames out with each requested probe frame right after its triggering frame.

    Parameters
    ----------
    laps_port : int
        UDP destination port of the LAPS shim.

    Members
    -------
    s_axis : In(AXI4StreamSignature(512, 1))
        Frames from the LAPS header editor.
    req : In(stream.Signature(ProbeRequest()))
        One request per frame, taken with the frame's first beat.
    m_axis : Out(AXI4StreamSignature(512, 1))
    stats : Out(32 * N_STATS)
        Probe frames sent.
    """

    def __init__(self, *, laps_port=LAPS_PORT):
        check_laps_port(laps_port)
        self._laps_port = laps_port
        axis = AXI4StreamSignature(data_width=512, user_width=1)
        super().__init__({"s_axis": In(axis), "req": In(stream.Signature(ProbeRequest())), "m_axis": Out(axis),
                          "stats": Out(32 * N_STATS)})

    def elaborate(self, platform):
        """capture (request and first two beats) -> offsets, tail, IPv4 sums (stages 1 to 5) -> probe register (6)
        -> merge into ``m_axis`` after the triggering frame."""
        m = Module()
        w, h, age, fresh = self._capture(m)
        t = self._stages(m, w, h)
        p, keep, two = self._assemble(m, h, t)
        sent = self._merge(m, p, keep, two, age, fresh)
        m.d.comb += self.stats.eq(counter32(m, "probes_sent", sent))
        return m

    def _capture(self, m):
        """Takes each frame's request with its first beat; for a probe, registers the request (``w``), the frame's
        first two beats (``h``) and its first beat's ``tuser``. ``age`` counts cycles since (saturating at 7);
        ``fresh`` is clear in the cycle after a beat is captured (the probe register has not seen it yet)."""
        s, r = self.s_axis, self.req
        self._first = first = Signal(init=1, name="pg_first")
        second = Signal(name="pg_second")
        self._emit = emit = Signal(name="pg_emit")
        self._pend = pend = Signal(name="pg_pend")
        w = Signal(ProbeRequest(), name="pg_w", reset_less=True)
        h = Signal(8 * _BYTES, name="pg_h", reset_less=True)
        self._user = user = Signal(len(s.tuser), name="pg_user", reset_less=True)
        age = Signal(range(8), name="pg_age")
        fresh = Signal(name="pg_fresh")
        gate = ~first | r.valid
        take = Signal(name="pg_take")
        m.d.comb += [s.tready.eq(self.m_axis.tready & ~emit & gate), take.eq(s.tvalid & s.tready),
                     r.ready.eq(take & first)]
        m.d.sync += fresh.eq(1)
        with m.If(age != 7):
            m.d.sync += age.eq(age + 1)
        new = first & r.payload.probe
        with m.If(take):
            m.d.sync += [first.eq(s.tlast), second.eq(first & ~s.tlast)]
            with m.If(new):
                m.d.sync += [w.eq(r.payload), h.eq(s.tdata), user.eq(s.tuser), pend.eq(1), age.eq(0),
                             fresh.eq(0)]
            with m.If(second & pend):
                m.d.sync += [h[512:].eq(s.tdata), fresh.eq(0)]
            with m.If(s.tlast & (new | pend)):
                m.d.sync += emit.eq(1)
        return w, h, age, fresh

    def _stages(self, m, w, h):
        """Stages 1 to 5 from the request and the captured beats: the probe's length, the head's end (the UDP
        destination port's offset), the tail (UDP destination port onwards) shifted there two offset bits a stage,
        the byte masks, and the new IPv4 header checksum (RFC 1624: ~(~HC + ~TL + TL'))."""
        t = {}

        def reg(name, value, shape=None):
            sig = Signal(shape if shape is not None else len(value), name=f"pg_{name}", reset_less=True)
            m.d.sync += sig.eq(value)
            t[name] = sig
            return sig

        # stage 1: the UDP length, the head's end, the IP header's length, the tail in wire order, the IP header
        # offset as one-hot, HC and TL
        c = w.count
        udp_len = Signal(16, name="pg_udp_len")
        m.d.comb += udp_len.eq(8 + LAPS_FIXED_BYTES + Cat(Const(0, 2), c))
        u = reg("u", udp_len, 8)
        head = reg("head", w.l4_off + 2, 8)
        l4 = reg("l4", w.l4_off, 8)
        d = reg("d", w.l4_off - w.l3_off, 8)
        anchors = []
        for a in range(LAPS_MAX_ANCHORS):
            word = w.anchors.word_select(a, 32)
            anchors += _be(Mux(c > a, word, 0), 4)
        tail = [*_be(Const(self._laps_port, 16), 2), *_be(udp_len, 2), *_be(Const(0, 16), 2),
                Cat(c, Const(0, 4), Const(1, 1)), Const(0, 8), *_be(w.pid, 2), *_be(w.time, 6), *_be(w.dport, 2),
                *anchors]
        assert len(tail) == _TAIL
        t0 = reg("t0", Cat(*tail), 8 * _TAIL)
        reg("sel", Cat(*[w.l3_off == off for off in (14, 18, 22)]), 3)
        v6 = reg("v6", w.ipv6, 1)

        def field(off):
            return _or([Mux(w.l3_off == base, Cat(*reversed(_bytes(h, base + off, 2))), 0) for base in (14, 18, 22)])
        hc, tl = reg("hc", field(10), 16), reg("tl", field(2), 16)
        # stage 2: the first shift (offset bits 0-1), the head mask, the probe's length, TL' (IPv4: the IP
        # header and the UDP length; IPv6: the UDP length), ~HC + ~TL
        t1 = reg("t1", t0 << (head[0:2] * 8), 8 * _BYTES)
        # the head mask's parts (byte p < head, as the byte mask below), combined at stage 3
        groups = _BYTES // 8
        h_lt = reg("h_lt", Cat(*[Const(g, 5) < head[3:8] for g in range(groups)]), groups)
        h_eq = reg("h_eq", Cat(*[Const(g, 5) == head[3:8] for g in range(groups)]), groups)
        hb_lt = reg("hb_lt", Cat(*[Const(b, 3) < head[0:3] for b in range(8)]), 8)
        plen = reg("plen", l4 + u, 8)
        tl_new = reg("tl_new", Mux(v6, u, d + u), 16)
        s1 = reg("s1", ~hc + ~tl, 17)
        # stage 3: offset bits 2-3; the byte mask's parts (byte p < plen: p's 8-byte group below plen's, or the same
        # group and p's byte in it below plen's); the end-around carry
        t2 = reg("t2", t1 << (head[2:4] * 32), 8 * _BYTES)
        reg("headmask", Cat(*[h_lt[p // 8] | (h_eq[p // 8] & hb_lt[p % 8]) for p in range(_BYTES)]), _BYTES)
        g_lt = reg("g_lt", Cat(*[Const(g, 5) < plen[3:8] for g in range(groups)]), groups)
        g_eq = reg("g_eq", Cat(*[Const(g, 5) == plen[3:8] for g in range(groups)]), groups)
        b_lt = reg("b_lt", Cat(*[Const(b, 3) < plen[0:3] for b in range(8)]), 8)
        reg("two", plen > 64, 1)
        f1 = reg("f1", s1[:16] + s1[16], 16)
        # stage 4: offset bits 4-5; + TL'; the byte mask (one LUT per byte from stage 3's parts)
        t3 = reg("t3", t2 << (head[4:6] * 128), 8 * _BYTES)
        s2 = reg("s2", f1 + tl_new, 17)
        reg("keep", Cat(*[g_lt[p // 8] | (g_eq[p // 8] & b_lt[p % 8]) for p in range(_BYTES)]), _BYTES)
        # stage 5: offset bit 6; the end-around carry and the complement
        reg("t4", t3 << (head[6] * 512), 8 * _BYTES)
        reg("hc_new", ~(s2[:16] + s2[16]), 16)
        return t

    def _assemble(self, m, h, t):
        """Stage 6, the probe register: per byte, a patched IP field (total or payload length, header checksum at
        the IP header offset), the captured frame's byte before the head's end, the shifted tail after it."""
        p = Signal(8 * _BYTES, name="pg_p", reset_less=True)
        out = []
        for pos in range(_BYTES):
            cands = []
            for n, base in enumerate((14, 18, 22)):
                v4 = t["sel"][n] & ~t["v6"]
                v6 = t["sel"][n] & t["v6"]
                for off, value, cond in ((2, t["tl_new"], v4), (10, t["hc_new"], v4), (4, t["tl_new"], v6)):
                    if pos in (base + off, base + off + 1):
                        byte = value[8:16] if pos == base + off else value[0:8]
                        cands.append((cond, byte))
            byte = Mux(t["headmask"][pos], h.word_select(pos, 8), t["t4"].word_select(pos, 8))
            if cands:
                hit = _or([cond for cond, _ in cands])
                byte = Mux(hit, _or([Mux(cond, v, 0) for cond, v in cands]), byte)
            out.append(byte)
        m.d.sync += p.eq(Cat(*out))
        return p, t["keep"], t["two"]

    def _merge(self, m, p, keep, two, age, fresh):
        """``m_axis``: the editor's beats, and after a frame that triggered a probe, the probe's one or two beats
        once it is ready (the editor's output waits meanwhile). Returns the strobe of a probe's last beat taken."""
        s, o = self.s_axis, self.m_axis
        emit, pend = self._emit, self._pend
        beat = Signal(name="pg_beat")
        ready = Signal(name="pg_ready")
        m.d.comb += ready.eq((age >= READY_AGE) & fresh)
        gate = ~self._first | self.req.valid
        m.d.comb += [
            o.tvalid.eq(Mux(emit, ready, s.tvalid & gate)),
            o.tdata.eq(Mux(emit, Mux(beat, p[512:], p[:512]), s.tdata)),
            o.tkeep.eq(Mux(emit, Mux(beat, keep[64:], keep[:64]), s.tkeep)),
            o.tlast.eq(Mux(emit, beat | ~two, s.tlast)),
            o.tuser.eq(Mux(emit, self._user, s.tuser)),
        ]
        sent = Signal(name="pg_sent")
        m.d.comb += sent.eq(emit & ready & o.tready & (beat | ~two))
        with m.If(emit & ready & o.tready):
            m.d.sync += beat.eq(~beat & two)
        with m.If(sent):
            m.d.sync += [emit.eq(0), pend.eq(0), beat.eq(0)]
        return sent


def _bytes(value, start, n):
    return [value.word_select(start + k, 8) for k in range(n)]


def _or(values):
    out = values[0]
    for v in values[1:]:
        out = out | v
    return out
