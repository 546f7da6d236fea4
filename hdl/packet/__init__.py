"""Packet I/O: the stages between 512-bit AXI4-Stream frames and the blocks' metadata streams (datasheets:
docs/packet_io.md, docs/qp_classifier.md): the parser, the deparser, the QP classifier, Themis-D's compensator and
the LAPS header editor."""
