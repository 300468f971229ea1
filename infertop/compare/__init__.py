"""``infertop diff``: two recordings or traces compared, as a CI gate (docs/export.md)."""
