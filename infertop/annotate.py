"""Explicit stage annotations for user code: ``infertop.stage("name")``.

Used as a decorator, the wrapped call runs inside a frame whose code is named
``infertop:NAME`` so that an external sampler (py-spy) sees the stage on the stack, the same
spelling as ``torch.profiler.record_function("infertop:NAME")``. Used as a context manager, it
records a span (thread, name, start, end) into a sink that an armed in-process agent installs;
with no agent armed it does nothing but two clock reads.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: Prefix of frame / record_function names that name a stage explicitly.
STAGE_FRAME_PREFIX = "infertop:"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class SpanSink(Protocol):
    def __call__(self, thread_id: int, name: str, start_ns: int, end_ns: int, *request: str) -> None: ...


_sink: SpanSink | None = None


def set_span_sink(sink: SpanSink | None) -> None:
    """Install (or remove, with None) the receiver of context-manager spans."""
    global _sink
    _sink = sink


def _stage_wrapper(name: str, func: F) -> F:
    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return func(*args, **kwargs)
        finally:
            sink = _sink
            if sink is not None:
                sink(threading.get_ident(), name, start, time.perf_counter_ns())

    frame_name = STAGE_FRAME_PREFIX + name
    code = call.__code__
    if sys.version_info >= (3, 11):  # co_qualname: what 3.11+ tracebacks and py-spy show
        call.__code__ = code.replace(co_name=frame_name, co_qualname=frame_name)
    else:
        call.__code__ = code.replace(co_name=frame_name)
    return functools.wraps(func)(call)  # type: ignore[return-value]


class stage:  # noqa: N801 - reads as a function at the call site
    """Mark code as belonging to pipeline stage ``name``.

    >>> @infertop.stage("preprocess")
    ... def encode(batch): ...
    >>> with infertop.stage("serialize"):
    ...     body = json.dumps(result)

    ``request=ID`` (the context manager) names the request the span is of: spans with one id
    are one request, whose latency runs from its first span's start to its last one's end
    (``report``'s ``requests``: p50/p95/p99 and the stage breakdown of the slowest).
    """

    __slots__ = ("name", "request", "_start")

    def __init__(self, name: str, request: object = None) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(
                f"infertop.stage: bad stage name {name!r}; use letters, digits, '_', '.', '-'"
            )
        self.name = name
        self.request = None if request is None else str(request)[:200]
        self._start = 0

    def __call__(self, func: F) -> F:
        return _stage_wrapper(self.name, func)

    def __enter__(self) -> stage:
        self._start = time.perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        sink = _sink
        if sink is None:
            return
        end = time.perf_counter_ns()
        if self.request is None:
            sink(threading.get_ident(), self.name, self._start, end)
            return
        try:
            sink(threading.get_ident(), self.name, self._start, end, self.request)
        except TypeError:  # an agent from before request ids: the span without its id
            sink(threading.get_ident(), self.name, self._start, end)
