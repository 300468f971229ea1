"""The thread that sends the requests: never in the sampling's way.

``submit`` only appends to a bounded queue in memory; past it the oldest request goes to the
spool on disk (or is dropped, counted, when there is none or it is full). The thread sends the
oldest request first, the spool's or the queue's. A refused connection, a
timeout, 408, 429 or a 5xx is the backend being away: the request stays and the thread waits,
1 s doubling to 60 s (or the ``Retry-After`` it was given). Any other 4xx is a request the
backend will never take: dropped, with one warning per status code, not retried.
"""

from __future__ import annotations

import collections
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from infertop.push.backends import Endpoint
from infertop.push.spool import Entry, Spool

QUEUE_MAX = 4  # requests in memory; one is an interval's profile (15 s by default)
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
TIMEOUT_S = 10.0


@dataclass
class Stats:
    sent: int = 0
    sent_bytes: int = 0
    dropped: int = 0  # refused by the backend, or past the queue and the spool
    rejected: int = 0  # of ``dropped``: a 4xx
    failing: str | None = None  # why the last try failed, while it keeps failing
    retry_at: float = 0.0  # monotonic


class Transient(Exception):
    def __init__(self, why: str, retry_after: float | None = None) -> None:
        super().__init__(why)
        self.retry_after = retry_after


class Rejected(Exception):
    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


def post(endpoint: Endpoint, e: Entry, timeout: float = TIMEOUT_S) -> None:
    """One request; raises Transient or Rejected when it was not taken."""
    req = urllib.request.Request(e.url, data=e.body, method="POST")
    for k, v in endpoint.request_headers().items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read(65536)
    except urllib.error.HTTPError as exc:
        body = _text(exc)
        if exc.code in (408, 429) or exc.code >= 500:
            raise Transient(f"HTTP {exc.code}{body}", _retry_after(exc)) from None
        raise Rejected(exc.code, f"HTTP {exc.code}{body}") from None
    except urllib.error.URLError as exc:
        reason = getattr(exc.reason, "strerror", None) or str(exc.reason)
        raise Transient(str(reason).lower()) from None
    except (OSError, ValueError) as exc:  # a timeout mid-read, a reset, a bad status line
        raise Transient(str(exc) or type(exc).__name__) from None


def _text(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(300).decode("utf-8", "replace").strip().replace("\n", " ")
    except OSError:
        text = ""
    return f": {text[:200]}" if text else ""


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    value = exc.headers.get("Retry-After") if exc.headers else None
    try:
        return min(BACKOFF_MAX_S, max(0.0, float(value))) if value else None
    except ValueError:
        return None


HINTS = {
    401: "check --push-token / --push-user (or INFERTOP_PUSH_TOKEN / INFERTOP_PUSH_USER)",
    403: "check the credentials and --push-tenant (or INFERTOP_PUSH_TENANT)",
    404: "check --push URL and --push-to (pyroscope or parca)",
    413: "the backend's request size limit is lower than one interval: try a shorter "
    "--push-interval",
}


class Sender:
    """Requests to one endpoint, from a thread of its own (see the module)."""

    def __init__(
        self,
        endpoint: Endpoint,
        spool: Spool | None = None,
        queue_max: int = QUEUE_MAX,
        backoff_s: tuple[float, float] = (BACKOFF_FIRST_S, BACKOFF_MAX_S),
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s  # one request's, and what close waits for the one in flight
        self.backoff_s = backoff_s
        self.spool = spool
        self.queue_max = max(1, queue_max)
        self.stats = Stats()
        self._queue: collections.deque[Entry] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._warned: set[int] = set()
        self._warnings: list[str] = []
        self._backoff = 0.0
        self._inflight: Entry | None = None  # the queue's request being sent
        self._thread = threading.Thread(target=self._run, name="infertop-push", daemon=True)
        self._thread.start()

    # -- what the loop calls ------------------------------------------------------------------
    def submit(self, body: bytes, t: float | None = None) -> None:
        """Queue one request; never blocks on the network."""
        e = Entry(self.endpoint.url, body, time.time() if t is None else t)
        with self._lock:
            self._queue.append(e)
            while len(self._queue) > self.queue_max:
                # the oldest, unless the thread is sending it: then the one after it
                i = 1 if self._queue[0] is self._inflight else 0
                self._overflow(self._queue[i])
                del self._queue[i]
        self._wake.set()

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def spooled(self) -> int:
        return len(self.spool) if self.spool is not None else 0

    def warnings(self) -> list[str]:
        """The warnings since the last call (the loop prints them, not this thread)."""
        with self._lock:
            out, self._warnings = self._warnings, []
        return out

    def close(self, deadline_s: float = 5.0) -> None:
        """Send what is queued for up to ``deadline_s`` while the backend answers; what is left
        goes to the spool (or is counted dropped)."""
        end = time.monotonic() + deadline_s
        while self.queued and self.stats.failing is None and time.monotonic() < end:
            self._wake.set()
            time.sleep(0.05)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=max(0.5, end - time.monotonic()) + self.timeout_s)
        with self._lock:
            while self._queue:
                self._overflow(self._queue.popleft())
        if self.spool is not None:
            self.spool.close()

    # -- the thread ---------------------------------------------------------------------------
    def _overflow(self, e: Entry) -> None:
        """Past the queue: to the spool, else dropped (the lock is held)."""
        if self.spool is None or not self.spool.put(e):
            self.stats.dropped += 1

    def _next(self) -> tuple[Entry, bool] | None:
        """The oldest request, the spool's or the queue's, by when it was made: the spool's
        are older, but for the queue's first when it was being sent as the ones after it were
        spooled (``submit`` keeps it)."""
        with self._lock:
            head = self._queue[0] if self._queue else None
            if self.spool is not None and len(self.spool):
                e = self.spool.oldest()
                if e is not None and (head is None or e.t <= head.t):
                    return e, True
            self._inflight = head
            return (head, False) if head is not None else None

    def _done(self, e: Entry, spooled: bool) -> None:
        with self._lock:
            if spooled:
                assert self.spool is not None
                self.spool.remove(e)
            elif self._queue and self._queue[0] is e:
                self._queue.popleft()
            self._inflight = None

    def _run(self) -> None:
        while not self._stop.is_set():
            nxt = self._next()
            if nxt is None:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            e, spooled = nxt
            try:
                post(self.endpoint, e, self.timeout_s)
            except Transient as exc:
                with self._lock:
                    self._inflight = None  # while it waits, it may go to the spool
                first, most = self.backoff_s
                self._backoff = min(most, max(first, self._backoff * 2))
                wait = exc.retry_after if exc.retry_after is not None else self._backoff
                wait *= random.uniform(0.9, 1.1) if exc.retry_after is None else 1.0
                self.stats.failing = str(exc)
                self.stats.retry_at = time.monotonic() + wait
                self._stop.wait(wait)  # close() ends the wait
                continue
            except Rejected as exc:
                self._done(e, spooled)
                with self._lock:
                    self.stats.dropped += 1
                    self.stats.rejected += 1
                    if exc.code not in self._warned:
                        self._warned.add(exc.code)
                        hint = HINTS.get(exc.code)
                        self._warnings.append(
                            f"infertop push: {self.endpoint.url} refused a profile ({exc}); "
                            "dropped, not retried" + (f" ({hint})" if hint else "")
                            + " -- later refusals with this status are counted, not shown"
                        )  # fmt: skip
                self.stats.failing = None
                self._backoff = 0.0
                continue
            self._done(e, spooled)
            self.stats.sent += 1
            self.stats.sent_bytes += len(e.body)
            self.stats.failing = None
            self._backoff = 0.0
