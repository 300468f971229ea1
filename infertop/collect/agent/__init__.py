"""The agent, seen from infertop's side: ``client`` its socket client (the collector of its
windows, spans and pauses; the socket and message checks), ``attach`` getting it into a live
session off the UI's critical path (inject, or find an armed one, then run the client), and
``children`` one agent per Python process of a ``--children`` tree. Import the modules by name.
"""

__all__ = ["attach", "children", "client"]
