"""The QP classifier (:mod:`lbpipe.hdl.packet.qp_classifier`), small sizes: the standard metadata rows (stream
contract with free commands, valid independence, reset), and :class:`QpLookup`: a lookup hits only a key that an
INSERT staged before the item was accepted.

:class:`QpLookup` runs a classifier with 32-bit keys (``ipv6=False``; free items, free commands of any table, index
and data, free back-pressure, a reset at any time) and keeps its own copy of the staging register, written from the
datasheet's KEY format (docs/qp_classifier.md, "Control port": table 0, word 0 ``qpn`` 23:0 and ``dir`` 24, word 1
the local address, word 3 the remote one; with 32-bit keys only their low 32 bits are stored) at the clock the block
accepts the command. For a key ``K`` the solver picks (free, constant after the first cycle), a flag records that an
INSERT (table 1) was accepted while the copy held ``K``. Neither is reset: the table, the staging register and an
accepted command survive a reset (the datasheet). The flag over-approximates "``K`` is in the table" (DELETE, CLEAR,
an index out of range and a key that does not fit are ignored), which keeps the check sound.

The solver marks one accepted item (the n-th since reset; the n-th output is it, by the stream contract) and the
flag is snapshotted then (commands take effect between two items). When the item leaves, asserted:

* **looked up only where the datasheet says**: ``qp_hit`` only for DATA, ACK and NACK, only for an IPv4 item
  (``ipv6`` 0, no address bits above 31 in the addresses its key takes);
* **no hit without an insert**: a hit on the item's key (built from the output's fields by the datasheet's "Keys"
  table: DATA ``dqpn``, ``dir`` 0, the destination address, remote 0; ACK and NACK ``dqpn``, ``dir`` 1, the source
  address, the destination address) only if an INSERT of that key was accepted before the item; in particular a
  key never staged misses.

Covers: a hit on ``K``; a miss on ``K`` after ``K`` was inserted (a later DELETE or CLEAR, or an insert the block
ignored).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert, Assume, Cover

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.hdl.packet.qp_classifier import QpClassifier

from lbpipe.formal.lib.harness import Harness, Proof, drive_source, free
from lbpipe.formal.lib.standard import metadata_block_proofs

__all__ = ["PROOFS", "QP_CLASSIFIER_SMALL", "QpLookup"]

_COUNT = 8
# From the datasheet, not the block: the KEY and INSERT table numbers, the QPN width, 32-bit addresses.
_KEY, _INSERT = 0, 1
_QPN, _ADDR = 24, 32


class QpLookup(Harness):
    """Lookup harness around a classifier built with ``ipv6=False``; see the module documentation.

    Parameters
    ----------
    build : callable
        Returns a fresh block.
    """

    def __init__(self, build):
        super().__init__(reset="free")
        self._build = build

    def elaborate(self, platform):
        m = Module()
        _, started = self.domain(m)
        m.submodules.dut = dut = self._build()
        drive_source(self, m, dut.i, "i")
        drive_source(self, m, dut.ctl, "ctl")
        m.d.comb += dut.o.ready.eq(free(self, 1, "o_ready"))
        took_in = dut.i.valid & dut.i.ready
        took_out = dut.o.valid & dut.o.ready
        cmd = dut.ctl.payload
        took_cmd = dut.ctl.valid & dut.ctl.ready

        # The staging register's copy: qpn, dir, local, remote (low 32 bits of words 1 and 3).
        width = _QPN + 1 + 2 * _ADDR
        staged = Signal(width, reset_less=True)
        with m.If(took_cmd & (cmd.table == _KEY)):
            with m.Switch(cmd.index):
                with m.Case(0):
                    m.d.sync += staged[:_QPN + 1].eq(cmd.data[:_QPN + 1])
                with m.Case(1):
                    m.d.sync += staged[_QPN + 1:_QPN + 1 + _ADDR].eq(cmd.data[:_ADDR])
                with m.Case(3):
                    m.d.sync += staged[_QPN + 1 + _ADDR:].eq(cmd.data[:_ADDR])
        key = free(self, width, "key")
        key_last = Signal(width, reset_less=True)
        m.d.sync += key_last.eq(key)
        m.d.comb += Assume(~started | (key == key_last))
        inserted = Signal(reset_less=True)
        with m.If(took_cmd & (cmd.table == _INSERT) & (staged == key)):
            m.d.sync += inserted.eq(1)

        # The watched item: the n-th accepted since reset, the flag as it stood then.
        accepted, delivered = Signal(_COUNT), Signal(_COUNT)
        with m.If(took_in):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(took_out):
            m.d.sync += delivered.eq(delivered + 1)
        armed = Signal()
        seq = Signal(_COUNT, reset_less=True)
        snap = Signal(reset_less=True)
        with m.If(took_in & free(self, 1, "watch") & ~armed):
            m.d.sync += [armed.eq(1), seq.eq(accepted), snap.eq(inserted)]
        its_turn = armed & took_out & (delivered == seq)

        o = dut.o.payload
        data = o.kind == PacketKind.DATA
        ack = (o.kind == PacketKind.ACK) | (o.kind == PacketKind.NACK)
        fits = ~o.ipv6 & ~o.dst_ip[_ADDR:].any() & (data | ~o.src_ip[_ADDR:].any())
        item_key = Mux(data, Cat(o.dqpn, Const(0, 1), o.dst_ip[:_ADDR], Const(0, _ADDR)),
                       Cat(o.dqpn, Const(1, 1), o.src_ip[:_ADDR], o.dst_ip[:_ADDR]))
        on_key = its_turn & (item_key == key)
        m.d.comb += [
            Assert(~its_turn | ~o.qp_hit | ((data | ack) & fits), "a hit for an item the table cannot hold"),
            Assert(~on_key | ~o.qp_hit | snap, "a hit on a key no INSERT staged before the item"),
            Cover(on_key & o.qp_hit),
            Cover(on_key & (data | ack) & fits & snap & ~o.qp_hit),
        ]
        return m


#: The small classifier: 2 flow-table entries, 2 ways of 2 buckets, 32-bit keys (89 bits), no user field.
QP_CLASSIFIER_SMALL = dict(n_entries=2, buckets=2, ways=2, ipv6=False)
_LABEL = "n_entries=2, buckets=2, ways=2, ipv6=False"


def _classifier():
    return QpClassifier(**QP_CLASSIFIER_SMALL)


# docs/qp_classifier.md: latency 6, the whole pipeline moves with the output register (at most 6 inside, an output
# within 6 ready cycles); reset empties the pipeline and clears the counters. "Input ready again" is not asserted:
# a command the reset does not cancel (a CLEAR's sweep) holds the input at any time, and commands go first.
PROOFS = metadata_block_proofs(
    "qp-classifier", _LABEL, _classifier, QpClassifier.latency, contract_depth=12, valid_depth=10,
    stats_cleared=True, ready_within=None, deep_depth=16)
PROOFS += [
    Proof("qp-classifier", f"a hit only on a key an INSERT staged before the item, only for DATA/ACK/NACK that fit "
          f"({_LABEL})", lambda: QpLookup(_classifier), depth=11),
    Proof("qp-classifier", f"a hit only on a key an INSERT staged before the item ({_LABEL}), deep",
          lambda: QpLookup(_classifier), depth=12, deep=True),
]
# BMC step 10 of the lookup row ends after 15 to 38 s, step 11 after 100 to 150 s more (the deep row); its covers (a
# hit on the watched key, a miss after an insert) are reached at step 7.
