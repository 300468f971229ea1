"""The formats ``infertop export`` writes (docs/export.md), in ``--help`` order."""

FORMATS = ("chrome", "speedscope", "kineto", "pprof", "pprof-ops")
