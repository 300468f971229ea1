"""The processes of a session followed with ``--children``, an imported rank directory or a
merged recording: ``roles`` (rank, merged host, router, worker), ``shares`` (each process's
samples, stages and share of the whole), ``ops`` (its torch ops), ``table`` (the rows of the
processes view and the report's section), ``view`` (one process's windows for the process
view). Import the modules by name."""

__all__ = ["ops", "roles", "shares", "table", "view"]
