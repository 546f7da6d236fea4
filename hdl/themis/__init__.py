"""Themis (APNet 2025; datasheet docs/themis.md): Themis-S (``themis_s``), Themis-D (``themis_d``) and both in the
wire (``wire``)."""
