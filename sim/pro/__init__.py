"""PRO (paper 003): the orchestrated round-robin path scheduler of the sender and the out-of-order window of the receiver."""
