"""``python -m infertop.agent.inject --ptrace-session``: the ptrace helper process
(``ptrace.via_ptrace`` starts it in a session of its own; see ``ptrace.session_main``)."""

from __future__ import annotations

import sys

from infertop.agent.inject.ptrace import HELPER_FLAG, session_main

if sys.argv[1:] == [HELPER_FLAG]:
    sys.exit(session_main())
