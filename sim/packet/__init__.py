"""Golden models of the packet I/O stages: parser, deparser, QP classifier, compensator, LAPS header editor."""
