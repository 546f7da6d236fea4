"""RoCEv2 packet sequence number arithmetic, modulo 2**24, shared by the golden models and the testbenches."""

__all__ = ["PSN_BITS", "PSN_MOD", "psn_add", "psn_sub", "psn_after", "serial_after"]

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS


def psn_add(a, b):
    """``a + b`` modulo 2**24."""
    return (a + b) % PSN_MOD


def psn_sub(a, b):
    """Distance from ``b`` to ``a``, modulo 2**24 (in ``0 .. 2**24 - 1``)."""
    return (a - b) % PSN_MOD


def serial_after(a, b, bits):
    """Serial-number order on ``bits``-bit values: ``a`` is after ``b`` when ``0 < (a - b) mod 2**bits < 2**(bits-1)``."""
    d = (a - b) % (1 << bits)
    return 0 < d < (1 << (bits - 1))


def psn_after(a, b):
    """True when PSN ``a`` is after PSN ``b`` (RoCEv2 rule, modulo 2**24)."""
    return serial_after(a, b, PSN_BITS)
