"""The clock anchor a recording starts with: which host wrote it and how far its wall clock can
be trusted, so that recordings from different hosts can be laid on one timeline (``merge``).

Every time in a recording is the recording host's ``time.time()``. The kernel knows how good
that clock is: ``adjtimex(2)`` with ``modes = 0`` (read only, no privilege needed) gives
``maxerror`` (µs, the bound the kernel guarantees while NTP/PTP disciplines the clock; it
grows by 500 ppm while nobody does) and ``esterror`` (µs, the estimate), and the ``STA_UNSYNC``
status bit says whether any daemon keeps it synchronised at all. The anchor is written as the
extras of the ``recording started`` marker (docs/recording-format.md):
``{"host", "clock": "synchronised" | "not synchronised" | "unknown", "maxerror_us", "esterror_us"}``.
"""

from __future__ import annotations

import ctypes
import socket
import sys
from dataclasses import dataclass

from infertop.model.events import Event, Marker

STARTED = "recording started"
STA_UNSYNC = 0x0040
TIME_ERROR = 5
SYNCED, UNSYNCED, UNKNOWN = "synchronised", "not synchronised", "unknown"


class _Timex(ctypes.Structure):  # struct timex, <sys/timex.h> (Linux, LP64 and ILP32 alike)
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
        ("_slack", ctypes.c_char * 64),  # room for fields a newer kernel/libc might add
    ]


@dataclass(frozen=True)
class ClockAnchor:
    host: str | None
    t: float  # the host's unix time when the recording started
    state: str  # SYNCED | UNSYNCED | UNKNOWN
    maxerror_us: int | None
    esterror_us: int | None

    @property
    def bound_us(self) -> int | None:
        """The error this clock can be trusted to: maxerror while synchronised, else None."""
        return self.maxerror_us if self.state == SYNCED else None


def kernel_clock() -> tuple[str, int | None, int | None]:
    """(state, maxerror µs, esterror µs) from a read-only ``adjtimex``; unknown off Linux or
    where the call is refused (a seccomp profile)."""
    if not sys.platform.startswith("linux"):
        return UNKNOWN, None, None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        tx = _Timex()
        tx.modes = 0  # read only: nothing is adjusted
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return UNKNOWN, None, None
    if state < 0:
        return UNKNOWN, None, None
    synced = not (tx.status & STA_UNSYNC) and state != TIME_ERROR
    return (SYNCED if synced else UNSYNCED), int(tx.maxerror), int(tx.esterror)


def anchor_extra() -> dict[str, str]:
    """The extras of a ``recording started`` marker written now."""
    state, maxerror, esterror = kernel_clock()
    out = {"host": socket.gethostname(), "clock": state}
    if maxerror is not None:
        out["maxerror_us"] = str(maxerror)
    if esterror is not None:
        out["esterror_us"] = str(esterror)
    return out


def started_marker(t: float) -> Marker:
    return Marker(t, STARTED, anchor_extra())


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def anchor_of(events: list[Event]) -> ClockAnchor | None:
    """The first clock anchor in a recording; None for recordings older than anchors (and
    imports, which have no host)."""
    for ev in events:
        if isinstance(ev, Marker) and ev.text == STARTED and "host" in ev.extra:
            x = ev.extra
            state = x.get("clock", UNKNOWN)
            if state not in (SYNCED, UNSYNCED):
                state = UNKNOWN
            return ClockAnchor(
                x["host"] or None, ev.t, state, _int(x.get("maxerror_us")), _int(x.get("esterror_us"))
            )
    return None
