"""Packet-metadata conventions shared by lbpipe blocks.

Blocks never see packet bytes: the parser stage classifies each packet and hands the block one metadata item per
packet. Every item carries a ``tag`` that the block returns unchanged, so the deparser (and a testbench) can pair an
output item with the packet it describes. Blocks return exactly one item per input item, in input order, unless a
block's datasheet says otherwise.
"""

from amaranth.lib import enum

__all__ = ["PacketKind", "TAG_BITS", "PSN_BITS"]

#: Width of the opaque per-packet handle carried through every block.
TAG_BITS = 16

#: RoCEv2 packet sequence numbers are 24 bits and wrap.
PSN_BITS = 24


class PacketKind(enum.Enum, shape=3):
    """What the parser found, as far as the load-balancing blocks care.

    ``DATA`` is a RoCEv2 request packet (SEND, RDMA WRITE, RDMA READ request) whose BTH PSN orders it within its QP;
    ``NACK`` is an RC acknowledge whose AETH syndrome is NAK *PSN sequence error* (0x60), whose BTH PSN is the
    receiver's expected PSN; ``ACK`` a positive acknowledge; ``ROCE_OTHER`` any other RoCEv2 packet (CNP, RNR NAK,
    other NAK codes, read responses); ``OTHER`` everything else, which every block passes untouched.
    """
    OTHER      = 0
    DATA       = 1
    ACK        = 2
    NACK       = 3
    ROCE_OTHER = 4
