"""``--push URL``: the live session's CPU samples, one pprof profile per interval, sent to a
continuous-profiling backend (Pyroscope, Parca) without ever holding the sampling up
(layer: under the views that push, over report). Import the modules by name.

- ``backends``: the request each backend takes (URL path, body, headers, labels);
- ``spool``: the requests kept on disk while the backend is down;
- ``sender``: the thread that sends them, with a bounded queue, backoff and drops;
- ``live``: a LiveSource's windows cut into one profile per interval and handed to the sender.
"""

__all__ = ["backends", "live", "sender", "spool"]
