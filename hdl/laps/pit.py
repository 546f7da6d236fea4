"""LAPS decomposed Path Information Table with active probing (LAPS, IEEE ToN: sections II-B, III-C, III-D, III-H,
Algorithm 1; datasheet docs/laps_pit.md).

The PIT of ``n_entries`` paths is split into ``k`` sub-tables of ``n_entries // k`` entries; pid =
``sub_table * (n_entries // k) + index`` and index 0 of every sub-table is "no path" (never valid, realVal infinity,
paper III-H). A lookup carries the ``k`` pids of one destination, slot ``j`` a pid of sub-table ``j``, and reads all
``k`` sub-tables in one pass. An update (an ACK or probe reply) writes ``real_val = owd`` and ``time = now``.

Two input streams, one item per clock each: ``i`` (lookups) and ``upd`` (updates). Both advance together: they are
ready in the same cycles, so an update never overtakes or lags a lookup offered with it. The serial order the golden
model states is: in one clock, the update first, then the lookup, then the lookup's probe write-back; everything of a
later clock after. Forwarding makes every lookup see exactly that order (datasheet, "Read after write").

Pipeline (one register stage per cycle, all moved by one ``adv``; latency 5)::

    X0 accept      X1            X2             X3                  X4 (decide)          X5 (write back, output)
    i, upd ------> dstale, V --> elapsed time -> stale test, hold -> hold, pick -------> views, D_j written, o
    dstale read    data regs     in halves      dval, S_j read      dval/S data regs     (own update > snoop >
    V read                                                           snoop                dval data)

The stale test reads its own copy of ``D_j`` (``dstale``) at X0 and spends X2 and X3 on the 48-bit modular
elapsed time and the comparison with ``2 x real_val``, in 24-bit halves. That copy misses the writes still in flight
(groups in X1 to X5), so a lookup does not probe a path that one of the last ``HOLDOFF`` = 5 updates (and its own
clock's) wrote or one of the last 5 lookups probed (the hold-off, datasheet): such a path was just measured or
probed, and every in-flight write is one of those. The values a result shows come from a second copy (``dval``)
read at X3, the writes it missed snooped into X4/X5 registers, and the lookup's own clock's update on top: exactly
the serial order. ``S_j`` (base_val, anchors: written by the control plane only) is read at X3; ``V`` (valid per
pid) is read by the update stream to reject updates of invalid entries. Every memory output goes straight into a
register. An update and a probe of the same clock writing different pids of one sub-table (one write port) hold the
pipeline one extra cycle (``held`` in the result).

Choices where the paper is silent (all in the datasheet): nanoseconds; modular 48-bit elapsed time (a ``now``
behind ``time`` counts as a long elapsed time, so the path is probed and its time restarts); the probe hold-off; a
16-bit LFSR picks the probed path; the ``max`` probe rule of the authors' simulator; staged control writes with a
commit command.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from lbpipe.hdl.lib.control import ControlSignature, check_int
from lbpipe.hdl.lib.meta import PacketKind, TAG_BITS
from lbpipe.hdl.lib.uram import URAM_DEPTH, UltraRAM

__all__ = ["Pit", "PitItem", "PitUpdate", "PitResult", "check_parameters", "PROBE_RULES", "INFINITY",
           "TABLE_VALUES", "TABLE_ANCHORS01", "TABLE_ANCHORS23", "TABLE_TIME", "TABLE_COMMIT", "N_STATS",
           "LFSR_SEED", "HOLDOFF", "URAM_CHOICES"]

TIME_BITS = 48
VAL_BITS = 32
PID_BITS = 16
N_ANCHORS = 4
#: real_val that means "infinity": never chosen; doubling keeps it.
INFINITY = (1 << VAL_BITS) - 1
PROBE_RULES = ("paper", "max")
#: Where D and S live: ``off`` lets the tools choose (block RAM below 4K-deep sub-tables), ``infer`` asks for
#: UltraRAM (``ram_style = "ultra"``), ``instance`` instantiates URAM288_BASE tiles (``lib.uram``; datasheet).
URAM_CHOICES = ("off", "infer", "instance")
LFSR_SEED = 0xACE1

TABLE_VALUES = 0        # staging: data[31:0] base_val, data[63:32] real_val
TABLE_ANCHORS01 = 1     # staging: data[31:0] anchor 0, data[63:32] anchor 1
TABLE_ANCHORS23 = 2     # staging: data[31:0] anchor 2, data[63:32] anchor 3
TABLE_TIME = 3          # staging: data[47:0] time
TABLE_COMMIT = 4        # index = pid: data[0] valid, data[3:1] anchor count; writes the staged entry at once
N_STATS = 4             # lookups, updates, rejected updates, probes


def check_parameters(*, n_entries, k, probe_rule, lfsr_seed, uram="off"):
    """Raise ``TypeError``/``ValueError`` for parameters the block cannot be built with."""
    check_int("n_entries", n_entries)
    check_int("k", k)
    check_int("lfsr_seed", lfsr_seed)
    if not 1 <= k <= 32:
        raise ValueError(f"k must be 1 to 32, not {k}")
    if not 2 * k <= n_entries <= 1 << PID_BITS or n_entries % k:
        raise ValueError(f"n_entries must be a multiple of k from 2k to 65536, not {n_entries}")
    sub = n_entries // k
    if sub & (sub - 1):
        raise ValueError(f"n_entries // k must be a power of two, not {sub}")
    if probe_rule not in PROBE_RULES:
        raise ValueError(f"probe_rule must be one of {PROBE_RULES}, not {probe_rule!r}")
    if not 1 <= lfsr_seed < 1 << 16:
        raise ValueError(f"lfsr_seed must be 1 to 65535, not {lfsr_seed}")
    if uram not in URAM_CHOICES:
        raise ValueError(f"uram must be one of {URAM_CHOICES}, not {uram!r}")
    if uram == "instance" and sub > URAM_DEPTH:
        raise ValueError(f"uram='instance' takes sub-tables up to {URAM_DEPTH} entries (n_entries // k), not {sub}: "
                         f"deeper ones are UltraRAM under synth_xilinx -uram anyway, or use uram='infer'")


def _bits(n):
    return max(1, (n - 1).bit_length())


def PitItem(*, k=8):
    """A lookup: the ``k`` pids of one destination (slot ``j`` a pid of sub-table ``j`` or 0), the NIC's ``now``."""
    return data.StructLayout({"kind": PacketKind, **{f"pid{j}": PID_BITS for j in range(k)}, "now": TIME_BITS,
                              "tag": TAG_BITS})


def PitUpdate():
    """An update (ACK or probe reply): ``real_val = owd``, ``time = now`` of entry ``pid``."""
    return data.StructLayout({"pid": PID_BITS, "owd": VAL_BITS, "now": TIME_BITS})


def PitResult(*, k=8):
    """A lookup's result: per slot the entry as the lookup leaves it (its own probe applied), and the probe."""
    fields = {"kind": PacketKind, "tag": TAG_BITS}
    for j in range(k):
        fields.update({f"valid{j}": 1, f"real_val{j}": VAL_BITS, f"base_val{j}": VAL_BITS, f"time{j}": TIME_BITS,
                       f"n_anchors{j}": 3, **{f"anchor{j}_{a}": 32 for a in range(N_ANCHORS)}})
    fields.update({"probe_valid": 1, "probe_slot": _bits(k), "probe_pid": PID_BITS, "held": 1})
    return data.StructLayout(fields)


def _dynamic_layout():
    return data.StructLayout({"valid": 1, "time": TIME_BITS, "real": VAL_BITS})


def _static_layout():
    return data.StructLayout({"base": VAL_BITS, "n_anchors": 3, "anchors": 32 * N_ANCHORS})


def _double(real):
    """2 x real_val, saturating at infinity."""
    return Mux(real[VAL_BITS - 1], INFINITY, (real << 1)[:VAL_BITS])


HOLDOFF = 5     # updates and lookups in flight ahead of a lookup's D_stale read (stages X1 to X5)
_HALF = 24      # the modular elapsed-time test works in two 24-bit halves a clock apart


class Pit(wiring.Component):
    """Decomposed PIT with active probing.

    Parameters
    ----------
    n_entries : int
        Paths, a multiple of ``k`` with ``n_entries // k`` a power of two, up to 65536.
    k : int
        Sub-tables (candidate paths per destination), 1 to 32.
    probe_rule : str
        ``"paper"``: stale when ``now - time > 2 x real_val`` (Algorithm 1); ``"max"``: stale when
        ``now - time > 2 x`` the largest finite real_val of the destination's valid, not held-off paths (the
        authors' simulator; every slot's elapsed time is compared with twice every slot's real_val in X3, and is 8
        logic levels deep at k = 8, over the budget: datasheet).
    lfsr_seed : int
        Reset value of the 16-bit LFSR that picks the probed path.
    uram : str
        Where ``D_j`` and ``S_j`` live (:data:`URAM_CHOICES`): ``"off"`` plain memories, ``"infer"`` memories marked
        ``ram_style = "ultra"``, ``"instance"`` URAM288_BASE tiles (sub-tables up to 4,096 entries). Same cycle
        behaviour in all three (datasheet, "UltraRAM").

    Members
    -------
    i : In(stream.Signature(PitItem(k)))
    upd : In(stream.Signature(PitUpdate()))
    o : Out(stream.Signature(PitResult(k)))
    ctl : In(ControlSignature())
        Tables 0-3 load staging registers, table 4 commits the staged entry to pid ``index`` (datasheet).
    stats : Out(32 * 4)
        Lookups, updates, rejected updates, probes (wrapping at 2**32; cleared by reset).
    """

    latency = 5

    def __init__(self, *, n_entries=8192, k=8, probe_rule="paper", lfsr_seed=LFSR_SEED, uram="off"):
        check_parameters(n_entries=n_entries, k=k, probe_rule=probe_rule, lfsr_seed=lfsr_seed, uram=uram)
        self._uram = uram
        self._n_entries = n_entries
        self._k = k
        self._probe_rule = probe_rule
        self._seed = lfsr_seed
        self._sub = n_entries // k
        self._ib = (self._sub - 1).bit_length()          # index bits
        self._kp = 1 << (k - 1).bit_length()              # k rounded up to a power of two (the pick's ring)
        super().__init__({
            "i": In(stream.Signature(PitItem(k=k))),
            "upd": In(stream.Signature(PitUpdate())),
            "o": Out(stream.Signature(PitResult(k=k))),
            "ctl": In(ControlSignature()),
            "stats": Out(32 * N_STATS),
        })

    @property
    def memory_bits(self):
        """Bits held in memories: two copies of D (stale test, values), S per entry, and V."""
        return self._n_entries * (2 * _dynamic_layout().size + _static_layout().size + 1)

    def item_cycles(self, result):
        """Cycles a lookup holds the output stage: 2 when its probe waited behind its clock's update, else 1."""
        return 1 + result["held"]

    # -- decode helpers --------------------------------------------------------------------------------------------

    def _index(self, pid):
        return pid[:self._ib]

    def _slot_ok(self, pid, j):
        """pid names a path of sub-table ``j``: in range, the right sub-table, index not 0."""
        return (pid < self._n_entries) & ((pid >> self._ib) == j) & (pid[:self._ib] != 0)

    def _row(self, pid, j):
        """The pid of the entry slot ``j`` reads: sub-table ``j``, the index bits of ``pid`` (``pid`` itself when the
        slot names a path). Forwarding compares rows, so a slot that names no path sees the writes of its row too."""
        return Cat(pid[:self._ib], Const(j, PID_BITS - self._ib))

    def _pid_ok(self, pid):
        return (pid < self._n_entries) & (pid[:self._ib] != 0)

    def elaborate(self, platform):
        """The datasheet's block diagram: memories, X0 -> X1 -> ... -> X5 (module docstring), control, counters."""
        m = Module()
        dstale, dval, stat, vmem = self._memories(m)
        adv = Signal()
        ctl_go = Signal()           # a control command is applied this cycle (the pipeline is empty)
        st = self._stage_registers()
        views = self._views(m, st["x5"])
        wr = self._write_ports(m, dstale, dval, st["x5"], views)
        self._accept_stage(m, adv, dstale, vmem, st)
        self._read_stage(m, adv, dstale, vmem, st)
        self._elapsed_stage(m, adv, st)
        self._stale_stage(m, adv, dval, stat, st)
        h5 = self._snoop(m, adv, st, wr)
        self._decide_stage(m, adv, dval, stat, st, h5)
        self._output_stage(m, adv, ctl_go, st, views)
        self._control(m, ctl_go, dstale, dval, stat, vmem)
        return m

    # -- memories and registers -------------------------------------------------------------------------------------

    def _memories(self, m):
        """``D_j`` twice (``dstale`` read at X0 for the stale test, ``dval`` read at X3 for the values), ``S_j``
        (base_val, anchors) per sub-table, ``V`` (valid per pid)."""
        dstale, dval, stat = [], [], []

        def table(shape):
            if self._uram == "off":
                return memory.Memory(shape=shape, depth=self._sub, init=[])
            # registered: the read register below (_load) is the UltraRAM's own (OREG) in "instance" mode
            return UltraRAM(shape=shape, depth=self._sub, mode="infer" if self._uram == "infer" else "instance",
                            registered=True)
        for j in range(self._k):
            a, b, s = table(_dynamic_layout()), table(_dynamic_layout()), table(_static_layout())
            m.submodules[f"dstale{j}"] = a
            m.submodules[f"dval{j}"] = b
            m.submodules[f"stat{j}"] = s
            dstale.append((a.read_port(), a.write_port()))
            dval.append((b.read_port(), b.write_port()))
            stat.append((s.read_port(), s.write_port()))
        v = memory.Memory(shape=1, depth=1 << (self._n_entries - 1).bit_length(), init=[])
        m.submodules.valid = v
        return dstale, dval, stat, (v.read_port(), v.write_port())

    def _stage_registers(self):
        """Registers of X1 to X5 (plain Signals; each stage method says what it loads)."""
        k, item, lay = self._k, PitItem(k=self._k), _dynamic_layout()

        def group(name):
            return dict(
                lk=Signal(name=f"{name}_lk"), up=Signal(name=f"{name}_up"),
                item=Signal(item, name=f"{name}_item"), upd=Signal(PitUpdate(), name=f"{name}_upd"),
                slot_ok=Signal(k, name=f"{name}_slot_ok"), u_range=Signal(name=f"{name}_u_range"),
                u_sub=Signal(k, name=f"{name}_u_sub"), own=Signal(k, name=f"{name}_own"),
                hu=Signal(k, name=f"{name}_hold_upd"))
        st = {n: group(n) for n in ("r1", "x2", "x3", "x4", "x5")}
        st["x2"].update(d=[Signal(lay, name=f"x2_d{j}") for j in range(k)], v=Signal(name="x2_v"),
                        hu_eq=Signal(HOLDOFF + 1, name="x2_hold_upd_eq"),
                        hu_sub=[Signal(k, name=f"x2_hold_upd_sub{n}") for n in range(HOLDOFF + 1)])
        for n in ("x3", "x4", "x5"):
            st[n].update(v=Signal(name=f"{n}_v"), live=Signal(k, name=f"{n}_live"))
        st["x3"].update(e_lo=[Signal(_HALF, name=f"x3_e_lo{j}") for j in range(k)],
                        nb=Signal(k, name="x3_no_borrow"),
                        hi0=[Signal(TIME_BITS - _HALF, name=f"x3_e_hi0_{j}") for j in range(k)],
                        hi1=[Signal(TIME_BITS - _HALF, name=f"x3_e_hi1_{j}") for j in range(k)],
                        real=[Signal(VAL_BITS, name=f"x3_real{j}") for j in range(k)],
                        phe=Signal(HOLDOFF + 1, name="x3_ph_eq"), ph_shift=Signal(name="x3_ph_shift"),
                        phs=[Signal(k, name=f"x3_ph{n}_slot") for n in range(HOLDOFF + 1)],
                        peq=Signal(k, name="x3_x5_index_eq"), ueq=Signal(k, name="x3_x5_upd_index_eq"))
        st["x4"].update(stale=Signal(k, name="x4_stale_mem"), hold=Signal(k, name="x4_hold"),
                        eqp=Signal(k, name="x4_eqp"), ueq=Signal(k, name="x4_x5_upd_index_eq"),
                        amask=Signal(k, name="x4_ahead_of_upd"), fin=Signal(k, name="x4_finite"),
                        cmp=[Signal(k, name=f"x4_exceeds{j}") for j in range(k)],
                        cinf=Signal(k, name="x4_exceeds_inf"), ahead=[Signal(k, name=f"x4_ahead{j}") for j in range(k)])
        st["x5"].update(valid=Signal(name="x5_valid"), u_ok=Signal(name="x5_u_ok"), u_we=Signal(k, name="x5_u_we"),
                        p_we=Signal(k, name="x5_p_we"), p_valid=Signal(name="x5_p_valid"),
                        conflict=Signal(name="x5_conflict"), phase=Signal(name="x5_phase"),
                        mem=[Signal(lay, name=f"x5_mem{j}") for j in range(k)],
                        s=[Signal(_static_layout(), name=f"x5_s{j}") for j in range(k)])
        # the last HOLDOFF updates' pids and the last HOLDOFF lookups' probes that left X5 (0 = none)
        # (sub-table one-hot, index): a slot's pid matches when its own sub-table bit is set and the index is equal
        # and the same sub-table (slot) as a binary number, which selects the one slot an entry can match
        kb = max(1, (k - 1).bit_length())
        st["uh"] = [(Signal(k, name=f"uh{n}_sub"), Signal(self._ib, name=f"uh{n}_index"),
                     Signal(kb, name=f"uh{n}_sub_bin")) for n in range(HOLDOFF)]
        st["ph"] = [(Signal(k, name=f"ph{n}_slot"), Signal(self._ib, name=f"ph{n}_index"),
                     Signal(kb, name=f"ph{n}_slot_bin")) for n in range(HOLDOFF)]
        st["lfsr"] = Signal(16, init=self._seed, name="lfsr")
        return st

    def _slot_index(self, item, sbin):
        """The index of ``item``'s pid in slot ``sbin`` (a binary slot number; 0 beyond ``k``)."""
        if self._k == 1:
            return self._index(item["pid0"])
        return Cat(*(self._index(item[f"pid{j}"]) for j in range(self._k))).word_select(sbin, self._ib)

    def _probe_index(self, x5):
        """The index X5's probe writes (0 without one) and its slot as a binary number (``p_we`` is one-hot)."""
        idx = Const(0, self._ib)
        for j in range(self._k):
            idx = idx | Mux(x5["p_we"][j], self._index(x5["item"][f"pid{j}"]), 0)
        kb = max(1, (self._k - 1).bit_length())
        sbin = Cat(*(Cat(*(x5["p_we"][j] for j in range(self._k) if (j >> b) & 1)).any() for b in range(kb)))
        return idx, sbin

    def _carry(self, m, adv, src, dst, names):
        with m.If(adv):
            for n in names:
                m.d.sync += dst[n].eq(src[n])

    _COMMON = ("lk", "up", "item", "upd", "slot_ok", "u_range", "u_sub", "own", "hu")

    # -- the write side (X5) -----------------------------------------------------------------------------------------

    def _views(self, m, x5):
        """X5's view of each slot before its own probe (driven in ``_output_stage``), in the serial order: its
        clock's update > writes snooped since its ``dval`` read > the ``dval`` data."""
        return [Signal(_dynamic_layout(), name=f"view{j}") for j in range(self._k)]

    def _write_ports(self, m, dstale, dval, x5, views):
        """The one write port of each ``D_j`` (both copies), driven from X5: the update first, the probe in the
        same cycle unless both go to sub-table ``j``, then in X5's second cycle. Writes repeat while X5 holds (same
        data, harmless). Returns per sub-table ``(en, addr, data, use_p, addr_u, addr_p)``."""
        ports = []
        for j in range(self._k):
            use_p = Signal(name=f"wr{j}_probe")
            en = Signal(name=f"wr{j}_en")
            addr = Signal(self._ib, name=f"wr{j}_addr")
            dat = Signal(_dynamic_layout(), name=f"wr{j}_data")
            m.d.comb += [
                use_p.eq(x5["p_we"][j] & (x5["phase"] | ~x5["u_we"][j])),
                en.eq(x5["u_we"][j] | x5["p_we"][j]),
                # a probe of slot j writes sub-table j at the slot's own pid: time = now, real_val doubled
                addr.eq(Mux(use_p, self._index(x5["item"][f"pid{j}"]), self._index(x5["upd"].pid))),
                dat.valid.eq(1),
                dat.time.eq(Mux(use_p, x5["item"].now, x5["upd"].now)),
                dat.real.eq(Mux(use_p, _double(views[j].real), x5["upd"].owd)),
            ]
            for _, w in (dstale[j], dval[j]):
                m.d.comb += [w.en.eq(en), w.addr.eq(addr), w.data.eq(dat)]
            ports.append((en, addr, dat, use_p))
        return ports

    # -- X0 to X3: reads and the stale test -------------------------------------------------------------------------

    def _accept_stage(self, m, adv, dstale, vmem, st):
        """X0: accept a lookup and an update together; issue the ``dstale`` reads (slot ``j``'s index) and the
        ``V`` read (the update's pid); load r1 with the items, their decode, the own-update match per slot and the
        update hold-off (the slot's pid is this clock's update or one of the last HOLDOFF updates)."""
        i, u, r1 = self.i.payload, self.upd.payload, st["r1"]
        self._commit = Signal(name="commit")      # a registered commit writes the memories this clock
        take = adv & ~self.ctl.valid & ~self._commit
        m.d.comb += [self.i.ready.eq(take), self.upd.ready.eq(take)]
        for j, (rd, _) in enumerate(dstale):
            m.d.comb += [rd.addr.eq(self._index(i[f"pid{j}"])), rd.en.eq(adv)]
        vrd, _ = vmem
        m.d.comb += [vrd.addr.eq(u.pid), vrd.en.eq(adv)]
        rows = [self._row(i[f"pid{j}"], j) for j in range(self._k)]
        with m.If(adv):
            m.d.sync += [
                r1["lk"].eq(self.i.valid & take), r1["up"].eq(self.upd.valid & take),
                r1["item"].eq(i), r1["upd"].eq(u), r1["u_range"].eq(self._pid_ok(u.pid)),
                r1["u_sub"].eq(Cat((u.pid >> self._ib) == j for j in range(self._k))),
                r1["slot_ok"].eq(Cat(self._slot_ok(i[f"pid{j}"], j) for j in range(self._k))),
                r1["own"].eq(Cat(rows[j] == u.pid for j in range(self._k))),
            ]

    def _read_stage(self, m, adv, dstale, vmem, st):
        """X1: register the ``dstale`` and ``V`` read data as they leave the memories; the update hold-off's
        comparisons (its clock's update and the HOLDOFF updates before it, kept in ``uh``: one each, against the
        slot of the update's sub-table), which X2 turns into per-slot bits."""
        k, ib, r1, x2, uh = self._k, self._ib, st["r1"], st["x2"], st["uh"]
        self._carry(m, adv, r1, x2, [n for n in self._COMMON if n != "hu"])
        # One index comparison per update (this clock's and the HOLDOFF before it), against the lookup's slot of
        # the update's sub-table, chosen by the sub-table number: the only slot a pid of that sub-table can be.
        # X2 turns the comparisons into per-slot bits (``_elapsed_stage``).
        kb = len(uh[0][2])
        u_bin = (r1["upd"].pid >> ib)[:kb]
        entries = [(Mux(r1["up"], r1["u_sub"], 0), self._index(r1["upd"].pid), u_bin)] + list(uh)
        with m.If(adv):
            for n, (sub, idx, sbin) in enumerate(entries):
                m.d.sync += [x2["hu_eq"][n].eq(self._slot_index(r1["item"], sbin) == idx), x2["hu_sub"][n].eq(sub)]
            with m.If(r1["up"]):
                m.d.sync += [uh[0][0].eq(r1["u_sub"]), uh[0][1].eq(self._index(r1["upd"].pid)), uh[0][2].eq(u_bin)]
                for n in range(1, HOLDOFF):
                    m.d.sync += [a.eq(b) for a, b in zip(uh[n], uh[n - 1])]
        with m.If(adv):
            m.d.sync += x2["v"].eq(vmem[0].data)
        for j, (rd, _) in enumerate(dstale):
            self._load(m, adv, x2["d"][j], rd)

    @staticmethod
    def _load(m, adv, reg, rd):
        """``reg`` loads read port ``rd``'s data when ``adv``: a register of its own after a memory, or, for an
        ``UltraRAM`` with its read register (``reg_en``), that register (same clock, same enable, same reset)."""
        if getattr(rd, "reg_en", None) is None:
            with m.If(adv):
                m.d.sync += reg.eq(rd.data)
        else:
            m.d.comb += [rd.reg_en.eq(adv), reg.eq(rd.data)]

    def _elapsed_stage(self, m, adv, st):
        """X2: the elapsed time ``(now - time) mod 2**48`` of each slot in two 24-bit halves: the low half with its
        no-borrow bit, and the high half both without and with the borrow (the next stage picks one)."""
        x2, x3 = st["x2"], st["x3"]
        self._carry(m, adv, x2, x3, [n for n in self._COMMON if n != "hu"])
        now = x2["item"].now
        # Probe history matches for X3, against ph as it will be then: shifted if the lookup in X5 leaves now.
        x5, ph = st["x5"], st["ph"]
        # One index comparison per history entry (and for the probe leaving X5), against the lookup's slot the
        # entry's probe was in; X3 ANDs each with the entry's slot bits, shifted by one entry if the lookup in X5
        # left when these were registered (``ph_shift``: ph as it is when the lookup is in X3).
        p_idx, p_bin = self._probe_index(x5)
        slots = [x5["p_we"]] + [slot for slot, _, _ in ph]
        eqs = [self._slot_index(x2["item"], sbin) == idx for _, idx, sbin in [(None, p_idx, p_bin)] + list(ph)]
        with m.If(adv):
            m.d.sync += [x3["phe"].eq(Cat(*eqs)), x3["ph_shift"].eq(x5["lk"])]
            m.d.sync += [reg.eq(slot) for reg, slot in zip(x3["phs"], slots)]
        # The update hold-off's comparisons (X1) become per-slot bits.
        with m.If(adv):
            m.d.sync += x3["hu"].eq(Cat(*(
                Cat(*(sub[j] & x2["hu_eq"][n] for n, sub in enumerate(x2["hu_sub"]))).any() for j in range(self._k))))
        # Index matches X5 will need against this lookup once it is in X3 (the snoop, the hold-off): the stages
        # move together, so X4 against X2 now is X5 against X3 then, and stays so while they hold.
        x4 = st["x4"]
        with m.If(adv):
            for j in range(self._k):
                index = self._index(x2["item"][f"pid{j}"])
                m.d.sync += [x3["peq"][j].eq(self._index(x4["item"][f"pid{j}"]) == index),
                             x3["ueq"][j].eq(self._index(x4["upd"].pid) == index)]
        with m.If(adv):
            m.d.sync += [x3["v"].eq(x2["v"]),
                         x3["live"].eq(Cat(x2["slot_ok"][j] & x2["d"][j].valid for j in range(self._k)))]
            for j in range(self._k):
                t = x2["d"][j].time
                lo = Cat(now[:_HALF], Const(1, 1)) - t[:_HALF]
                m.d.sync += [
                    x3["e_lo"][j].eq(lo[:_HALF]), x3["nb"][j].eq(lo[_HALF]),
                    x3["hi0"][j].eq(now[_HALF:] - t[_HALF:]),
                    x3["hi1"][j].eq(now[_HALF:] + ~t[_HALF:]),        # now - time - 1
                    x3["real"][j].eq(x2["d"][j].real),
                ]

    @staticmethod
    def _exceeds(x3, j, r):
        """Slot ``j``'s elapsed time > ``2 x r`` (``r`` 32 bits), from X3's halves: the high half compared both ways
        (without and with the low half's borrow), one picked, then the low half."""
        r_lo, r_hi = Cat(Const(0, 1), r[:_HALF - 1]), r[_HALF - 1:]          # 2 x r, 33 bits
        w = len(r_hi)
        gt, eq = [], []
        for hi in (x3["hi0"][j], x3["hi1"][j]):
            top = hi[w:] != 0
            gt.append(top | (hi[:w] > r_hi))
            eq.append(~top & (hi[:w] == r_hi))
        nb = x3["nb"][j]
        return Mux(nb, gt[0], gt[1]) | (Mux(nb, eq[0], eq[1]) & (x3["e_lo"][j] > r_lo))

    def _stale_stage(self, m, adv, dval, stat, st):
        """X3: the stale test of each slot on its ``dstale`` data, ``elapsed > 2 x real_val`` as a 24-bit high-half
        and a 24-bit low-half comparison; the probe hold-off of the lookups ahead; the ``dval`` and ``S_j`` reads."""
        k, x3, x4, x5 = self._k, st["x3"], st["x4"], st["x5"]
        self._carry(m, adv, x3, x4, self._COMMON)
        for j in range(k):
            for rd in (dval[j][0], stat[j][0]):
                m.d.comb += [rd.addr.eq(self._index(x3["item"][f"pid{j}"])), rd.en.eq(adv)]
        stale = [self._exceeds(x3, j, x3["real"][j]) for j in range(k)]
        if self._probe_rule == "max":
            # every slot's elapsed time against twice every slot's real_val (and twice infinity): X4 then needs
            # no maximum, only which slots count (``_decide_stage``)
            with m.If(adv):
                for j in range(k):
                    m.d.sync += [x4["cmp"][j].eq(Cat(self._exceeds(x3, j, x3["real"][i]) for i in range(k))),
                                 x4["cinf"][j].eq(self._exceeds(x3, j, Const(INFINITY, VAL_BITS)))]
        # Probe hold-off: the HOLDOFF lookups before this one are, when it decides in X4, the one then in X5 (the
        # lookup now in X4, if any), the one leaving X5 now (if any), then the history ph. A probe of slot j is a
        # pid of sub-table j: comparing the index is enough.
        a, b = x4["lk"], x5["lk"]
        hold, eqp, ueq = [], [], []
        for j in range(k):
            index = self._index(x3["item"][f"pid{j}"])
            h = x3["hu"][j] | (b & x5["p_we"][j] & x3["peq"][j])
            for n in range(HOLDOFF):
                hit = Mux(x3["ph_shift"], x3["phs"][n][j] & x3["phe"][n], x3["phs"][n + 1][j] & x3["phe"][n + 1])
                if n + 2 < HOLDOFF:
                    h = h | hit
                elif n + 1 < HOLDOFF:
                    h = h | (hit & ~(a & b))
                else:
                    h = h | (hit & ~a & ~b)
            hold.append(h)
            eqp.append(a & (self._index(x4["item"][f"pid{j}"]) == index))
            ueq.append(self._index(x4["upd"].pid) == index)
        # The pick's start when this lookup decides: the LFSR, stepped once more if the lookup in X4 decides first.
        # ahead[j][i]: slot i comes before slot j going round from the start.
        lfsr, kp = st["lfsr"], self._kp
        kb = (kp - 1).bit_length()
        start = Signal(max(kb, 1), name="next_start")
        if kb:
            step = Cat(lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10], lfsr[:15])
            m.d.comb += start.eq(Mux(a, step[:kb], lfsr[:kb]))
        ahead = []
        for j in range(k):
            row = []
            for i in range(k):
                bit = Const(0, 1)
                for s0 in range(kp):
                    if i != j and (i - s0) % kp < (j - s0) % kp:
                        bit = bit | (start == s0)
                row.append(bit)
            ahead.append(Cat(*row))
        # the slots ahead of the update's sub-table u (the conflict flag, a probe landing in the update's
        # sub-table, then needs no pick of its own): going round from the start, the slots i with start <= i < u,
        # or, when the start is past u, i >= start or i < u. From two thermometer codes (i >= start, i >= u) and
        # one comparison: a few inputs a bit, not a multiplexer over the 64 ahead bits.
        amask = Const(0, k)
        if kb:
            u_bin = (x3["upd"].pid >> self._ib)[:kb]
            past = Signal(name="start_past_upd")
            m.d.comb += past.eq(start > u_bin)
            ge_s = [start <= i for i in range(k)]
            ge_u = [u_bin <= i for i in range(k)]
            amask = Cat(*(x3["u_sub"].any() & Mux(past, ge_s[i] | ~ge_u[i], ge_s[i] & ~ge_u[i]) for i in range(k)))
        with m.If(adv):
            m.d.sync += [x4["ahead"][j].eq(ahead[j]) for j in range(k)]
            m.d.sync += x4["amask"].eq(amask)
        with m.If(adv):
            m.d.sync += [x4["v"].eq(x3["v"]), x4["live"].eq(x3["live"]), x4["stale"].eq(Cat(*stale)),
                         x4["hold"].eq(Cat(*hold)), x4["eqp"].eq(Cat(*eqp)), x4["ueq"].eq(Cat(*ueq))]
            if self._probe_rule == "max":
                m.d.sync += x4["fin"].eq(Cat(x3["real"][j] != INFINITY for j in range(k)))
            with m.If(b):
                # the lookup leaving X5 enters the probe history (slot one-hot, index; all 0 without a probe)
                idx, sbin = self._probe_index(x5)
                m.d.sync += [st["ph"][0][0].eq(x5["p_we"]), st["ph"][0][1].eq(idx), st["ph"][0][2].eq(sbin)]
                for n in range(1, HOLDOFF):
                    m.d.sync += [a.eq(b) for a, b in zip(st["ph"][n], st["ph"][n - 1])]

    # -- X4: decide ----------------------------------------------------------------------------------------------------

    def _snoop(self, m, adv, st, wr):
        """Writes a lookup's ``dval`` read cannot see (the clock it is issued, read-first, and the clocks in X4),
        latest winning: ``h4`` for the lookup in X4, ``h5`` for the one in X5 (hit flag and data per slot). ``h5``
        also takes the lookup's own clock's update of the slot's row (accepted: in range, valid), which comes last
        in the serial order before the lookup: X5 then picks between two sources per slot, not three."""
        k, lay, x3, x4 = self._k, _dynamic_layout(), st["x3"], st["x4"]
        h4 = [(Signal(name=f"h4_hit{j}"), Signal(lay, name=f"h4_d{j}")) for j in range(k)]
        h5 = [(Signal(name=f"h5_hit{j}"), Signal(lay, name=f"h5_d{j}")) for j in range(k)]
        x5 = st["x5"]
        own_upd = Signal(lay, name="x4_own_upd")
        own_ok = Signal(name="x4_own_ok")
        m.d.comb += [own_upd.valid.eq(1), own_upd.time.eq(x4["upd"].now), own_upd.real.eq(x4["upd"].owd),
                     own_ok.eq(x4["up"] & x4["u_range"] & x4["v"])]
        for j in range(k):
            en, _, dat, use_p = wr[j]
            # the address matches against both write sources were registered a stage early (X2, X3), so only
            # the choice waits for use_p (a probe write implies a lookup in X5, which x4 eqp includes)
            new = en & Mux(use_p, x3["peq"][j], x3["ueq"][j])
            in_x4 = en & Mux(use_p, x4["eqp"][j], x4["ueq"][j])
            (hit4, d4), (hit5, d5) = h4[j], h5[j]
            own = x4["own"][j] & own_ok
            with m.If(adv):
                m.d.sync += [hit4.eq(new), hit5.eq(own | in_x4 | hit4),
                             d5.eq(Mux(own, own_upd, Mux(in_x4, dat, d4)))]
            with m.Elif(in_x4):
                m.d.sync += hit4.eq(1)
            with m.If(adv | in_x4):
                m.d.sync += d4.eq(dat)
        return h5

    def _pick(self, m, adv, st, stale):
        """The probed slot: the first stale slot at or after ``lfsr mod kp`` going round the ``kp`` slots, from the
        ``ahead`` masks X3 registered (slot ``j`` is chosen when it is stale and no slot ahead of it is); the LFSR
        (x^16 + x^14 + x^13 + x^11 + 1, Fibonacci, shifting left) steps once per lookup leaving X4."""
        k, x4, lfsr = self._k, st["x4"], st["lfsr"]
        with m.If(adv & x4["lk"]):
            m.d.sync += lfsr.eq(Cat(lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10], lfsr[:15]))
        chosen = Signal(k, name="chosen")
        for j in range(k):
            m.d.comb += chosen[j].eq(stale[j] & ((stale & x4["ahead"][j]) == 0))
        return chosen

    def _decide_stage(self, m, adv, dval, stat, st, h5):
        """X4: the stale bits less the held-off slots (the late part: the lookup in X5 probed this slot's pid),
        the pick; load X5 with the ``dval`` and ``S_j`` data as they leave the memories, the update and probe
        write enables and the conflict flag."""
        k, x4, x5 = self._k, st["x4"], st["x5"]
        hold = Signal(k, name="hold")
        m.d.comb += hold.eq(x4["hold"] | (x4["eqp"] & x5["p_we"]))
        live = x4["live"]
        if self._probe_rule == "max":
            # stale when elapsed > 2 x every eligible slot's real_val (= 2 x their largest), or > 2 x infinity when
            # no slot is eligible; the comparisons were made in X3, here only eligibility (the late hold-off) joins
            elig = Signal(k, name="max_eligible")
            m.d.comb += elig.eq(live & ~hold & x4["fin"])
            raw = Cat(((~elig | x4["cmp"][j]).all() & (x4["cinf"][j] | elig.any())) for j in range(k))
        else:
            raw = x4["stale"]
        stale = Signal(k, name="stale")
        m.d.comb += stale.eq(Mux(x4["lk"], raw & live & ~hold, 0))
        chosen = self._pick(m, adv, st, stale)
        probe = stale != 0
        u_ok = x4["up"] & x4["u_range"] & x4["v"]
        u_we = Mux(u_ok, x4["u_sub"], 0)
        self._carry(m, adv, x4, x5, self._COMMON)
        with m.If(adv):
            m.d.sync += [
                x5["valid"].eq(x4["lk"] | x4["up"]), x5["v"].eq(x4["v"]), x5["live"].eq(live),
                x5["u_ok"].eq(u_ok), x5["u_we"].eq(u_we), x5["p_we"].eq(chosen), x5["p_valid"].eq(probe),
                # (u_we & chosen) != 0, without waiting for the pick: u_we is one-hot
                x5["conflict"].eq(u_ok & ((stale & x4["u_sub"]) != 0) & ((stale & x4["amask"]) == 0)),
            ]
        for j in range(k):
            self._load(m, adv, x5["mem"][j], dval[j][0])
            self._load(m, adv, x5["s"][j], stat[j][0])
        self._h5_regs = h5

    # -- X5: write back and output --------------------------------------------------------------------------------

    def _output_stage(self, m, adv, ctl_go, st, views):
        """X5: the views, the result (``o``), ``adv``, the held cycle of a conflict, the counters, ``ctl`` ready."""
        k, out, x5 = self._k, self.o.payload, st["x5"]
        for j in range(k):
            hit, hd = self._h5_regs[j]      # the lookup's own clock's update included (``_snoop``)
            m.d.comb += views[j].eq(Mux(hit, hd, x5["mem"][j]))
        conflict = x5["conflict"]     # the probe and the update write one sub-table: two clocks (held)
        last = x5["phase"] | ~conflict
        m.d.comb += [
            adv.eq(~x5["valid"] | (last & (~x5["lk"] | self.o.ready))),
            self.o.valid.eq(x5["lk"] & last),
            out.kind.eq(x5["item"].kind), out.tag.eq(x5["item"].tag),
            out.probe_valid.eq(x5["p_valid"]), out.probe_slot.eq(self._probe_slot(x5)),
            out.probe_pid.eq(self._probe_pid(x5)),
            out.held.eq(conflict),
        ]
        m.d.sync += x5["phase"].eq(~adv)
        for j in range(k):
            # A slot naming no path of sub-table j reads valid 0 and real_val infinity; its other fields are what
            # is stored at its index of sub-table j (zeros for index 0, never written).
            p, v, s = x5["p_we"][j], views[j], x5["s"][j]
            m.d.comb += [
                out[f"valid{j}"].eq(x5["live"][j]),
                out[f"real_val{j}"].eq(Mux(p, _double(v.real), Mux(x5["slot_ok"][j], v.real, INFINITY))),
                out[f"time{j}"].eq(Mux(p, x5["item"].now, v.time)),
                out[f"base_val{j}"].eq(s.base), out[f"n_anchors{j}"].eq(s.n_anchors),
                *[out[f"anchor{j}_{a}"].eq(s.anchors[32 * a:32 * a + 32]) for a in range(N_ANCHORS)],
            ]
        # Whether r1 to x4 hold a lookup or an update, registered: their OR as it will be after this clock (they
        # all load on ``adv``, and reset clears them and this alike), so ``ctl.ready`` is two register bits and
        # the AXI4-Lite bridge's path through it to the staging registers stays short.
        busy = Signal(name="busy")
        fill = (self.i.valid | self.upd.valid) & self.i.ready
        for n in ("r1", "x2", "x3"):
            fill = fill | st[n]["lk"] | st[n]["up"]
        with m.If(adv):
            m.d.sync += busy.eq(fill)
        empty = ~busy & ~x5["valid"]
        m.d.comb += [ctl_go.eq(self.ctl.valid & empty), self.ctl.ready.eq(empty)]
        self._counters(m, adv, x5)

    def _probe_slot(self, x5):
        """The probed slot's number (0 without a probe), encoded from the one-hot probe flags."""
        acc = Const(0, _bits(self._k))
        for j in range(self._k):
            acc = acc | Mux(x5["p_we"][j], j, 0)
        return acc

    def _probe_pid(self, x5):
        """The probed slot's pid (0 without a probe): an OR of the slots gated by their one-hot probe flags."""
        acc = Const(0, PID_BITS)
        for j in range(self._k):
            acc = acc | Mux(x5["p_we"][j], x5["item"][f"pid{j}"], 0)
        return acc

    def _counters(self, m, adv, x5):
        """``stats``: lookups, updates, rejected updates, probes, counted as a group leaves X5 (from registers,
        so the 32-bit increments start a clock path of their own)."""
        counts = [Signal(32, name=n) for n in ("n_lookups", "n_updates", "n_rejected", "n_probes")]
        with m.If(adv):
            m.d.sync += [
                counts[0].eq(counts[0] + x5["lk"]), counts[1].eq(counts[1] + x5["up"]),
                counts[2].eq(counts[2] + (x5["up"] & ~x5["u_ok"])), counts[3].eq(counts[3] + x5["p_valid"]),
            ]
        m.d.comb += self.stats.eq(Cat(*counts))

    def _control(self, m, ctl_go, dstale, dval, stat, vmem):
        """``ctl``: tables 0-3 load the staging registers; table 4 writes the staged entry (both D copies, S and V
        at once) to pid ``index`` when it names a path (in range, index not 0). Applied only with the pipeline
        empty."""
        cmd = self.ctl.payload
        st_base, st_real = Signal(VAL_BITS), Signal(VAL_BITS)
        st_anchors, st_time = Signal(32 * N_ANCHORS), Signal(TIME_BITS)
        with m.If(ctl_go):
            with m.Switch(cmd.table):
                with m.Case(TABLE_VALUES):
                    m.d.sync += [st_base.eq(cmd.data[:32]), st_real.eq(cmd.data[32:])]
                with m.Case(TABLE_ANCHORS01):
                    m.d.sync += st_anchors[:64].eq(cmd.data)
                with m.Case(TABLE_ANCHORS23):
                    m.d.sync += st_anchors[64:].eq(cmd.data)
                with m.Case(TABLE_TIME):
                    m.d.sync += st_time.eq(cmd.data[:TIME_BITS])
        # The commit is registered and written the next clock (no lookup or update is taken in that clock, so
        # none reads the entry being written); the decode stays off the memory write ports.
        commit, pid, cm_data, cm_sub = self._commit, Signal(PID_BITS), Signal(4), Signal(self._k)
        m.d.sync += commit.eq(ctl_go & (cmd.table == TABLE_COMMIT) & (cmd.index < self._n_entries)
                              & (cmd.index[:self._ib] != 0))
        with m.If(ctl_go):
            m.d.sync += [pid.eq(cmd.index), cm_data.eq(cmd.data[:4]),
                         cm_sub.eq(Cat((cmd.index >> self._ib) == j for j in range(self._k)))]
        count = cm_data[1:4]
        for j in range(self._k):
            _, sw = stat[j]
            here = commit & cm_sub[j]
            for _, dw in (dstale[j], dval[j]):
                with m.If(here):
                    m.d.comb += [dw.en.eq(1), dw.addr.eq(self._index(pid)), dw.data.valid.eq(cm_data[0]),
                                 dw.data.time.eq(st_time), dw.data.real.eq(st_real)]
            m.d.comb += [sw.en.eq(here), sw.addr.eq(self._index(pid)), sw.data.base.eq(st_base),
                         sw.data.n_anchors.eq(Mux(count > N_ANCHORS, N_ANCHORS, count)),
                         sw.data.anchors.eq(st_anchors)]
        _, vw = vmem
        m.d.comb += [vw.en.eq(commit), vw.addr.eq(pid), vw.data.eq(cm_data[0])]
