"""The report document (schema in docs/report.md), its text and markdown renderings, the per-
process section and trace reports (layer: report). Import the modules by name."""

__all__ = [
    "bars",
    "build",
    "processes",
    "schema",
    "text",
    "trace",
]
