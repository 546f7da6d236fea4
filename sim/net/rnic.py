"""Receiving RNIC running NIC-SR, the commodity selective-repeat receiver of paper 001, section 2.2.

The model is the receive side of one RC QP as the paper describes it, reduced to what Themis-D sees: which data PSNs
arrive and which NACKs (carrying only the ePSN) come back. Choices made where the paper is silent:

* The bitmap of out-of-order PSNs is unbounded (a set): real NICs bound it by their window, which the closed-loop
  scenarios in :mod:`lbpipe.sim.themis.net` never exceed.
* "At most one NACK per ePSN" is a flag cleared whenever ePSN advances, so a NACK is raised by the first packet
  after ePSN that arrives while ePSN holds that value. Since ePSN only moves forward, no ePSN value is NACKed twice
  before the PSN space wraps.
* A duplicate (already received, or before ePSN) is ignored: no NACK, no ACK (ACKs are not modelled).
"""

from lbpipe.sim.lib.psn import PSN_MOD, psn_add, psn_after

__all__ = ["SelectiveRepeatReceiver"]


class SelectiveRepeatReceiver:
    """NIC-SR receiver for one QP: ePSN, a bitmap of PSNs received after it, and one NACK per ePSN value.

    Parameters
    ----------
    start_psn : int
        The first PSN the sender will send (the initial ePSN), 0 to 2**24 - 1.

    Members
    -------
    epsn : int
        The expected PSN: every PSN before it has been received.
    received : set of int
        PSNs after ``epsn`` already received (the bitmap).
    nacked : bool
        A NACK has been raised for the current ``epsn``.
    """

    def __init__(self, start_psn=0):
        if not 0 <= start_psn < PSN_MOD:
            raise ValueError(f"start_psn must be 0 to 2**24 - 1, not {start_psn}")
        self.epsn = start_psn
        self.received = set()
        self.nacked = False

    def receive(self, psn):
        """Take one data packet; return ``None`` or ``("nack", epsn)``, the NACK the NIC sends back.

        ``psn == epsn`` advances ePSN past every PSN the bitmap holds; a PSN after ePSN (modulo 2**24) is recorded and
        raises a NACK carrying ePSN unless one was already raised for this ePSN; any other PSN is a duplicate.
        """
        if not 0 <= psn < PSN_MOD:
            raise ValueError(f"psn must be 0 to 2**24 - 1, not {psn}")
        if psn == self.epsn:
            self.epsn = psn_add(self.epsn, 1)
            while self.epsn in self.received:
                self.received.remove(self.epsn)
                self.epsn = psn_add(self.epsn, 1)
            self.nacked = False
            return None
        if psn_after(psn, self.epsn):
            if psn in self.received:
                return None
            self.received.add(psn)
            if not self.nacked:
                self.nacked = True
                return ("nack", self.epsn)
        return None
