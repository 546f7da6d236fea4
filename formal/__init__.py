"""Formal harnesses for lbpipe's blocks, run by ``lbpipe prove`` (docs/formal.md).

Grouped like ``hdl/``: ``lib`` (the harness conventions, the stream contract, the primitives' proofs), then one
package per mechanism. Harnesses import ``hdl`` and never ``sim`` or ``tb``: a proof states what the design must
do without asking a golden model.
"""
