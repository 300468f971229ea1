"""Types only: events, their field-list forms, the numbers a recording may hold, symbols, NVML
readings, table rows, findings (the bottom layer with config). Import the modules by name."""

__all__ = [
    "events",
    "fields",
    "findings",
    "gpu",
    "numbers",
    "pprof_build",
    "pprof_schema",
    "rows",
    "symbols",
]
