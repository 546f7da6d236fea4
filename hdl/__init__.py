"""lbpipe's hardware: Amaranth 0.5 components, one package per concern.

``lib`` holds the shared primitives, ``packet`` the packet I/O stages, and each mechanism has its own package
(``themis``). Imports go downward only: ``lib`` imports nothing of the project but :mod:`lbpipe.protocol`;
``packet`` imports ``lib``; a mechanism imports ``lib`` and ``packet``.
"""
