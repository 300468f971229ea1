"""The clock anchor: the kernel's own word on the wall clock, written when a recording starts."""

from __future__ import annotations

import socket
import sys

import pytest

from infertop.model.events import Marker
from infertop.record.clock import SYNCED, UNKNOWN, UNSYNCED, anchor_of, kernel_clock, started_marker


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="adjtimex is Linux's")
def test_the_kernel_answers_a_read_only_adjtimex() -> None:
    state, maxerror, esterror = kernel_clock()
    assert state in (SYNCED, UNSYNCED)
    assert maxerror is not None and maxerror >= 0
    assert esterror is not None and 0 <= esterror
    if state == UNSYNCED:  # the kernel's "nobody disciplines me" bound, 16 s
        assert maxerror >= 0


def test_the_started_marker_carries_the_anchor_and_reads_back() -> None:
    m = started_marker(1_700_000_000.5)
    assert m.text == "recording started" and m.extra["host"] == socket.gethostname()
    a = anchor_of([Marker(1.0, "something else"), m])
    assert a is not None and a.host == socket.gethostname() and a.t == 1_700_000_000.5
    assert a.state == m.extra["clock"]
    assert a.bound_us == (a.maxerror_us if a.state == SYNCED else None)


def test_older_recordings_have_no_anchor_and_odd_values_read_as_unknown() -> None:
    assert anchor_of([Marker(1.0, "recording started")]) is None
    a = anchor_of([Marker(1.0, "recording started", {"host": "h", "clock": "??", "maxerror_us": "x"})])
    assert a is not None and a.state == UNKNOWN and a.maxerror_us is None and a.bound_us is None
