"""lbpipe's golden models, grouped like :mod:`lbpipe.hdl`: ``lib``, ``packet``, one package per mechanism, and
``net`` for the network models the closed-loop runs share.

A golden model may import layouts and parameter checks from :mod:`lbpipe.hdl` (one definition of a field), and
protocol facts from :mod:`lbpipe.protocol`, but no behaviour: what decides an outcome is written here again.
"""
