"""The AXI4-Lite control bridge (:class:`lbpipe.hdl.lib.axil.ControlBridge`) against the AXI4-Lite handshake rules
and its datasheet, with a free manager and a free block behind ``ctl``.

:class:`AxilBridgeContract` drives the bridge's AW, W and AR channels from free inputs that keep the manager's half
of the rules (an offered VALID stays, with the same payload, until READY takes it), sets BREADY, RREADY and
``ctl.ready`` freely in every cycle (any back-pressure, a block that never takes a command included), and lets
reset come at any time after the first cycle. It asserts, in every cycle within the depth:

* **B stable / R stable**: BVALID (RVALID) offered and not taken stays offered in the next cycle with the same BRESP
  (RDATA, RRESP), unless a reset came between; the same for ``ctl.valid`` and its payload (the stream rule on the
  bridge's output);
* **one B per AW + W pair, one R per AR, none spurious**: counted since the last reset, BVALID is offered only while
  the B responses given are fewer than both the AW and the W beats accepted, RVALID only while the R responses are
  fewer than the AR beats; and none is lost: at most two AW (two W) beats wait for their B (the one in service and
  the one in the skid register), an accepted AR is answered in the next cycle (RVALID exactly while an R is owed),
  and a B owed with no command waiting on ``ctl`` is offered within one clock;
* **RESP**: BRESP and RRESP are OKAY (``0b00``) whenever offered (the datasheet: every response is OKAY);
* **reset**: in the cycle after a reset BVALID, RVALID and ``ctl.valid`` are low;
* **writes reach ctl in issue order**: the harness keeps its own copy of TABLE (0x08, bits 7:0), INDEX (0x0C, bits
  23:0), DATA_LO (0x10) and DATA_HI (0x14), applying each write, byte strobes honoured, when its B is given (the
  i-th AW with the i-th W, as AXI4-Lite pairs them); while ``ctl.valid`` is high its payload must equal that copy
  (a COMMIT takes the registers as every earlier write left them and no later write), a COMMIT (0x18) write's B
  comes only after ``ctl`` took its command, and ``ctl`` hands over no more commands than COMMIT writes given;
* **reads**: a read of ID (0x00) returns ``ident``, a read of an unmapped word (0x1C) returns 0.

The addresses, widths and the OKAY code are written here from the datasheet, not taken from the bridge.

Covers: a B and an R waiting on READY; two writes outstanding (the skid register used); W accepted before its AW
and AW before its W; a COMMIT waiting on ``ctl``; a COMMIT's B; a reset with a B waiting; a read served while a
COMMIT is pending.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert, Cover

from .harness import Harness, free

__all__ = ["AxilBridgeContract"]

OKAY = 0b00
TABLE, INDEX, DATA_LO, DATA_HI, COMMIT, UNMAPPED = 0x08 >> 2, 0x0C >> 2, 0x10 >> 2, 0x14 >> 2, 0x18 >> 2, 0x1C >> 2
ID = 0x00


def _manager_channel(harness, m, valid, ready, fields, name):
    """A free manager channel: ``valid`` and the payload ``fields`` (list of (port, width)) from free inputs, held
    while offered and not taken (not across a reset)."""
    any_valid = free(harness, 1, f"{name}_any_valid")
    hold = Signal(name=f"{name}_hold")
    m.d.sync += hold.eq(valid & ~ready)       # cleared by reset: a manager may withdraw at reset
    m.d.comb += valid.eq(hold | any_valid)
    for port, width in fields:
        anyp = free(harness, width, f"{name}_any_{port.name}")
        held = Signal(width, name=f"{name}_held_{port.name}", reset_less=True)
        m.d.sync += held.eq(port)
        m.d.comb += port.eq(Mux(hold, held, anyp))
    return any_valid


class AxilBridgeContract(Harness):
    """Harness for one :class:`ControlBridge`; see the module documentation.

    Parameters
    ----------
    build : callable
        Returns a fresh bridge (or a wrapper with the same ports; the tests pass broken ones).
    ident : int
        The ID register's value the bridge was built with.
    part : str
        ``"handshake"``: the handshake rules, counts, RESP, reset and reads; ``"order"``: the writes reaching
        ``ctl`` in issue order (the register copy); ``"all"``: both (two smaller solver problems go deeper).
    invariants : bool
        Also assert the invariants that make the handshake rules inductive (k-induction closes on them): the
        harness's counts agree with what the ports show of the bridge's state (see :meth:`_inductive`).
    """

    def __init__(self, build, *, ident, part="all", invariants=False):
        super().__init__(reset="free")
        if part not in ("handshake", "order", "all"):
            raise ValueError(f"part must be 'handshake', 'order' or 'all', not {part!r}")
        self._build = build
        self._ident = ident
        self._part = part
        self._invariants = invariants

    def elaborate(self, platform):
        m = Module()
        rst, _ = self.domain(m)
        self._rst = rst
        m.submodules.dut = dut = self._build()
        bus, ctl = dut.axil, dut.ctl
        _manager_channel(self, m, bus.awvalid, bus.awready, [(bus.awaddr, len(bus.awaddr)), (bus.awprot, 3)], "aw")
        _manager_channel(self, m, bus.wvalid, bus.wready, [(bus.wdata, 32), (bus.wstrb, 4)], "w")
        _manager_channel(self, m, bus.arvalid, bus.arready, [(bus.araddr, len(bus.araddr)), (bus.arprot, 3)], "ar")
        bready, rready, ctl_ready = free(self, 1, "bready"), free(self, 1, "rready"), free(self, 1, "ctl_ready")
        m.d.comb += [bus.bready.eq(bready), bus.rready.eq(rready), ctl.ready.eq(ctl_ready)]

        aw_fire = bus.awvalid & bus.awready
        w_fire = bus.wvalid & bus.wready
        b_fire = bus.bvalid & bus.bready
        ar_fire = bus.arvalid & bus.arready
        r_fire = bus.rvalid & bus.rready
        ctl_fire = ctl.valid & ctl.ready

        handshake = self._part in ("handshake", "all")
        aw_out, w_out = self._counts(m, bus, ctl, aw_fire, w_fire, b_fire, ar_fire, r_fire, handshake)
        if self._part in ("order", "all"):
            self._order(m, bus, ctl, aw_fire, w_fire, b_fire, ctl_fire, aw_out, w_out)
        if not handshake:
            return m
        self._stability(m, bus, ctl)
        m.d.comb += [
            Assert(~bus.bvalid | (bus.bresp == OKAY), "BRESP not OKAY"),
            Assert(~bus.rvalid | (bus.rresp == OKAY), "RRESP not OKAY"),
        ]
        after_reset = Signal(reset_less=True)
        m.d.sync += after_reset.eq(rst)
        m.d.comb += Assert(~after_reset | ~(bus.bvalid | bus.rvalid | ctl.valid), "a VALID high after reset")

        m.d.comb += [
            Cover(bus.bvalid & ~bready & (aw_out == 2)),
            Cover(bus.rvalid & ~rready),
            Cover(~rst & w_fire & ~aw_fire & (w_out >= aw_out)),
            Cover(~rst & aw_fire & ~w_fire & (aw_out >= w_out)),
            Cover(ctl.valid & ~ctl_ready & ~bus.bvalid),
            Cover(rst & bus.bvalid),
            Cover(r_fire & ctl.valid),
        ]
        return m

    def _stability(self, m, bus, ctl):
        def stable(name, valid, ready, payload):
            waited = Signal(name=f"{name}_waited")           # cleared by reset: no check across a reset
            before = Signal(len(payload), name=f"{name}_before", reset_less=True)
            m.d.sync += [waited.eq(valid & ~ready), before.eq(payload)]
            return ~waited | (valid & (payload == before))
        m.d.comb += [
            Assert(stable("b", bus.bvalid, bus.bready, bus.bresp), "B not stable while waiting"),
            Assert(stable("r", bus.rvalid, bus.rready, Cat(bus.rdata, bus.rresp)), "R not stable while waiting"),
            Assert(stable("ctl", ctl.valid, ctl.ready, ctl.payload.as_value()), "ctl not stable while waiting"),
        ]

    def _counts(self, m, bus, ctl, aw_fire, w_fire, b_fire, ar_fire, r_fire, check):
        # Beats outstanding, since the last reset: AW and W accepted and not yet answered by a B, AR not yet by an R.
        aw_out, w_out, ar_out = Signal(3), Signal(3), Signal(2)
        m.d.sync += [aw_out.eq(aw_out + aw_fire - b_fire), w_out.eq(w_out + w_fire - b_fire),
                     ar_out.eq(ar_out + ar_fire - r_fire)]
        if not check:
            return aw_out, w_out
        m.d.comb += [
            Assert(~bus.bvalid | ((aw_out > 0) & (w_out > 0)), "B without an accepted AW and W"),
            Assert((aw_out <= 2) & (w_out <= 2), "more than two writes waiting for their B"),
            Assert(bus.rvalid == (ar_out > 0), "R spurious, or not given the cycle after AR"),
        ]
        # A B owed and not offered, with no command waiting on ctl: at most one such cycle in a row.
        stall = Signal(2)
        owed = (aw_out > 0) & (w_out > 0) & ~bus.bvalid & ~ctl.valid
        m.d.sync += stall.eq(Mux(owed, stall + (stall < 3), 0))
        m.d.comb += Assert(stall < 2, "a B owed and not offered")
        if self._invariants:
            self._inductive(m, bus, ctl, aw_out, w_out, ar_out)
        # Reads of ID and of an unmapped word.
        ar_word = Signal(len(bus.araddr) - 2, name="ar_word")
        with m.If(ar_fire):
            m.d.sync += ar_word.eq(bus.araddr[2:])
        m.d.comb += [
            Assert(~bus.rvalid | (ar_word != ID) | (bus.rdata == Const(self._ident, 32)), "ID read wrong"),
            Assert(~bus.rvalid | (ar_word != UNMAPPED) | (bus.rdata == 0), "unmapped read not 0"),
            Cover(~self._rst & bus.rvalid & (ar_word == ID)),
            Cover(~self._rst & bus.rvalid & (ar_word == UNMAPPED)),
        ]
        return aw_out, w_out

    def _order(self, m, bus, ctl, aw_fire, w_fire, b_fire, ctl_fire, aw_out, w_out):
        # The harness's own copy of the registers, and queues of the outstanding AW (address word) and W beats
        # (two each), applied in order when each B is given.
        words = len(bus.awaddr) - 2
        aw_q = [Signal(words, name=f"aw_q{i}") for i in range(2)]
        w_q = [Signal(36, name=f"w_q{i}") for i in range(2)]
        for queue, out, fire, value in ((aw_q, aw_out, aw_fire, bus.awaddr[2:]),
                                        (w_q, w_out, w_fire, Cat(bus.wdata, bus.wstrb))):
            # Entry 0 is the oldest; a B pops it, a new beat goes behind what stays.
            stay = Signal(3, name=f"{queue[0].name}_stay")
            m.d.comb += stay.eq(out - b_fire)
            with m.If(b_fire):
                m.d.sync += queue[0].eq(queue[1])
            with m.If(fire):
                with m.If(stay == 0):
                    m.d.sync += queue[0].eq(value)
                with m.Else():
                    m.d.sync += queue[1].eq(value)
        shadow = {TABLE: Signal(8, name="shadow_table"), INDEX: Signal(24, name="shadow_index"),
                  DATA_LO: Signal(32, name="shadow_data_lo"), DATA_HI: Signal(32, name="shadow_data_hi")}
        head_word, head_data, head_strb = aw_q[0], w_q[0][:32], w_q[0][32:]
        with m.If(b_fire):
            for word, reg in shadow.items():
                with m.If(head_word == word):
                    lanes = [Mux(head_strb[i], head_data[8 * i:8 * i + 8], reg[8 * i:8 * i + 8])
                             for i in range(len(reg) // 8)]
                    m.d.sync += reg.eq(Cat(*lanes))
        commits_b, commands = Signal(4), Signal(4)
        commit_b = b_fire & (head_word == COMMIT)
        m.d.sync += [commits_b.eq(commits_b + commit_b), commands.eq(commands + ctl_fire)]
        commit_waits = (aw_out > 0) & (w_out > 0) & (head_word == COMMIT)
        expected = ((ctl.payload.table == shadow[TABLE]) & (ctl.payload.index == shadow[INDEX]) &
                    (ctl.payload.data == Cat(shadow[DATA_LO], shadow[DATA_HI])))
        m.d.comb += [
            Assert(~ctl.valid | expected, "ctl payload is not the registers as the earlier writes left them"),
            Assert(~commit_b | (commands == commits_b + 1), "COMMIT answered before ctl took its command"),
            Assert(commands <= commits_b + 1, "more ctl commands than COMMIT writes"),
            Assert(~ctl.valid | commit_waits, "ctl command offered with no COMMIT waiting for its B"),
            Cover(commit_b),
            Cover(ctl.valid & ~ctl.ready & (ctl.payload.table != 0) & (ctl.payload.data[32:] != 0)),
        ]

    def _inductive(self, m, bus, ctl, aw_out, w_out, ar_out):
        """The counts against the ports, from the datasheet's structure (one write in service, a one-entry skid
        register per channel, READY from registered state): an AW (W) beat waits in the skid register exactly
        while AWREADY (WREADY) is low, and a write in service (its B offered, or its COMMIT's command waiting on
        ``ctl``) is the other one owed; B and ``ctl.valid`` never together; at most one R owed. With these, every
        handshake assertion above follows from the state k cycles back, so k-induction proves them for all time."""
        in_service = bus.bvalid | ctl.valid
        m.d.comb += [
            Assert(aw_out == (~bus.awready + in_service), "AW beats owed != skid register + write in service"),
            Assert(w_out == (~bus.wready + in_service), "W beats owed != skid register + write in service"),
            Assert(~(bus.bvalid & ctl.valid), "a B offered while a COMMIT's command waits"),
            Assert(ar_out <= 1, "more than one R owed"),
        ]
