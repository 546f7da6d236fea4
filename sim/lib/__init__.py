"""Golden-model primitives: CRC-32 (``crc``), the ring buffer (``ring``) and 24-bit PSN arithmetic (``psn``)."""
