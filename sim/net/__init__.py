"""Network models shared by the mechanisms' closed-loop runs: the receiving RNIC (``rnic``)."""
