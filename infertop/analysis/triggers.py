"""The incident triggers of ``infertop watch``: from stage spans to "write an incident now?".

Pure: a ``Triggers`` is fed ``StageSpan`` events (``add``) and asked ``check(now)``; it answers
a ``Firing`` (which trigger, and why in words) or None. Two kinds (docs/watch.md):

- **auto**: a stage's p95 over the last ``window_s`` (2 s) above 2× its p95 over the 60 s
  before, or its call rate over the last ``RATE_WINDOW_S`` (5 s) below half of that 60 s
  rate. It needs data first: 20 s of the stage's history, enough calls in both windows, at
  least 3 calls over the threshold that ended at least 1 s apart (one slow call, or a burst of
  late ones from a moment's CPU starvation, is not a spell) and a difference of at least 1 ms,
  so a steady load never fires. And the slow calls must be more than the stage's own mix
  makes likely: a workload whose normal holds a rare slow path (a tokenizer's 60 ms in 3 % of
  its calls, a collection every few seconds) lifts a 2 s window's p95 past twice the minute's
  now and then, a 5 % quantile on the edge of a 3 % mode; the window's count of calls over the
  threshold is judged against the baseline's share of such calls (a binomial tail under
  ``SURPRISE``), so its normal never fires and a spell, which makes most calls slow, does.
- **rules** (``parse_rule``): ``forward.p99>250ms``, ``preprocess.p95>40ms``,
  ``forward.rate<5/s``, evaluated over the last ``window_s``.

At most one firing per ``cooldown_s`` (``note`` counts a manual capture too).

A firing says so when the machine, not the target, is the likelier cause: fed the kernel's
accounting of the target's threads (``add_cpu``: nanoseconds on a CPU and waiting on a run
queue), a firing whose calls had the threads waiting for a CPU ``STARVED_SHARE`` of the time
they were ready to run, and twice the minute before's wait per second on a CPU (so 40 % of
the runnable time before and 75 % now counts: 0.67 s a CPU second to 3 s), adds "waited for a
CPU 48 % of their runnable time (5 % before): the machine is short of CPU"; one that waited
as long on a machine as busy the minute before says that instead ("... (40 % before): the
machine was as short of CPU the minute before"). A latency firing judges the CPU from the
start of its first slow call (a spell that began halfway through the window is not diluted
by the quiet half before it); a rate firing over its whole window. It still fires: a
neighbour taking the CPUs slows the requests as surely as a slow forward does, and the
recording shows it.

Spans reach infertop in batches (the agent sends them about twice a second), so the windows
end at the newest span seen rather than at ``now``; when no span comes at all (every stage
stalled) the end moves on with ``now - LAG_S`` and the rates fall to zero, as they should.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from infertop.analysis.shares import percentile
from infertop.model.events import CpuWait, StageSpan, waited_share

#: how far behind ``now`` the spans may be before a window's end stops waiting for them
LAG_S = 1.0
#: the auto trigger's baseline: the stage's calls over this many seconds before the window
BASELINE_S = 60.0
#: the auto trigger never looks at a stage with less history than this
MIN_HISTORY_S = 20.0
AUTO_FACTOR = 2.0  # p95 above AUTO_FACTOR × the baseline's p95
MIN_CALLS_NOW = 10  # calls in the window before its p95 means anything
MIN_CALLS_BASE = 50  # calls in the baseline before its p95 means anything
MIN_SLOW_CALLS = 3  # calls over the threshold: a spell, not one slow call
#: and they ended this far apart at least: a spell, not a burst. A target starved of the CPU for
#: a fraction of a second (its machine busy) finishes a few calls late together; measured on a
#: test run beside three others: a quiet target's 8 ms calls at p95 28 ms for one window
MIN_SPELL_S = 1.0
MIN_DELTA_MS = 1.0  # a p95 that grew by less than this is noise, whatever the factor
#: the window's slow calls must be this unlikely (or less) from the baseline's share of calls
#: over the same threshold: at a check a second, about one chance firing in a day of a
#: workload whose mix does not change
SURPRISE = 1e-5
RATE_FACTOR = 0.5  # a call rate below RATE_FACTOR × the baseline's rate
#: the auto trigger's rate is counted over this many seconds, not the 2 s window: on a shared
#: machine a target starved of CPU for a second or two halves a 2 s rate (measured on a CI run
#: with two other workloads: 16/s against 37/s in a quiet target); a stage that stops altogether
#: still fires within this time
RATE_WINDOW_S = 5.0
MIN_EXPECTED_CALLS = 30  # baseline rate × window: fewer and a halved rate is chance
BASELINE_EVERY_S = 1.0  # the baseline's p95 is computed again at most this often
#: a firing's window with the target's threads waiting for a CPU this share of their runnable
#: time (and twice the baseline's wait per CPU second) says the machine was short of CPU
STARVED_SHARE = 0.25
BIG_BASELINE = 100_000  # calls: past this many, only every 5 s (sorting them costs ~10 ms)
MAX_SPANS_PER_STAGE = 500_000  # a defensive bound on what one stage keeps

_RULE = re.compile(
    r"^\s*(?P<stage>[A-Za-z_][A-Za-z0-9_.-]*)\.(?P<metric>p\d+(?:\.\d+)?|max|mean|rate)\s*"
    r"(?P<op>[<>])\s*(?P<value>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[^\s\d.]*)\s*$"
)
_TIME_UNITS = {"ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3}
_RATE_UNITS = {"/s": 1.0, "/min": 1 / 60.0}
RULE_HELP = (
    "a rule is STAGE.METRIC>TIME or STAGE.rate<N/s, e.g. 'forward.p99>250ms', "
    "'preprocess.p95>40ms', 'forward.rate<5/s' (METRIC: p50, p95, p99, any pNN, max, mean; "
    "TIME in us, ms or s; rates per /s or /min)"
)


class RuleError(ValueError):
    """A rule that does not parse; the message says why and what a rule looks like."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One explicit trigger: ``stage``'s ``metric`` over the window ``op`` ``threshold``
    (ms for latencies, calls/s for ``rate``)."""

    stage: str
    metric: str  # "p95" (any percentile), "max", "mean" or "rate"
    op: str  # ">" or "<"
    threshold: float
    text: str  # as the user wrote it (spaces taken out)

    def value(self, durations_ms: list[float], window_s: float) -> float | None:
        """The metric over one window's calls (sorted durations); None: no calls to say."""
        if self.metric == "rate":
            return len(durations_ms) / window_s
        if not durations_ms:
            return None
        if self.metric == "max":
            return durations_ms[-1]
        if self.metric == "mean":
            return sum(durations_ms) / len(durations_ms)
        return percentile(durations_ms, float(self.metric[1:]))

    def broken(self, value: float) -> bool:
        return value > self.threshold if self.op == ">" else value < self.threshold

    def show(self, value: float) -> str:
        return rate_text(value) if self.metric == "rate" else ms_text(value)


def parse_rule(text: str) -> Rule:
    """``'forward.p99>250ms'`` → a ``Rule``; a ``RuleError`` naming what is wrong otherwise."""
    m = _RULE.match(text)
    if m is None:
        raise RuleError(f"cannot read the trigger {text!r}: {RULE_HELP}")
    stage, metric, op, unit = m["stage"], m["metric"], m["op"], m["unit"]
    value = float(m["value"])
    if metric == "rate":
        scale = _RATE_UNITS.get(unit)
        if scale is None:
            raise RuleError(
                f"trigger {text!r}: a rate needs /s or /min after its number ({RULE_HELP})"
            )
    else:
        if metric.startswith("p") and not 0 < float(metric[1:]) <= 100:
            raise RuleError(f"trigger {text!r}: {metric} is no percentile ({RULE_HELP})")
        scale = _TIME_UNITS.get(unit)
        if scale is None:
            what = f"unit {unit!r}" if unit else "no unit"
            raise RuleError(f"trigger {text!r}: {what}; a time needs us, ms or s ({RULE_HELP})")
    return Rule(stage, metric, op, value * scale, "".join(text.split()))


def ms_text(ms: float) -> str:
    if ms >= 10:
        return f"{ms:.0f} ms"
    return f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"


def rate_text(per_s: float) -> str:
    return f"{per_s:.0f}/s" if per_s >= 10 else f"{per_s:.1f}/s"


@dataclass(frozen=True, slots=True)
class Firing:
    """A trigger that fired at ``t``: ``trigger`` names it ("auto", a rule's text, "manual"),
    ``reason`` says what was seen ("forward.p95 212 ms > 2× 60 s p95 (98 ms)")."""

    t: float
    trigger: str
    reason: str
    stage: str | None = None
    window_s: float = 0.0  # the seconds of calls it judged (to the newest span)
    slow_from: float | None = None  # unix s: the first slow call's start (a latency firing)


@dataclass
class _Stage:
    """One stage's recent calls, ordered by end: ends (unix s) and durations (ms)."""

    first_end: float
    ends: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    base_p95: float | None = None  # the baseline's p95, as of base_at
    base_at: float = -math.inf
    base_sorted: list[float] = field(default_factory=list)  # the baseline's durations, as of base_at

    def add(self, end: float, ms: float) -> None:
        if not self.ends or end >= self.ends[-1]:
            self.ends.append(end)
            self.ms.append(ms)
        else:  # a batch of another thread's calls, a little older
            i = bisect.bisect_right(self.ends, end)
            self.ends.insert(i, end)
            self.ms.insert(i, ms)
        self.first_end = min(self.first_end, end)

    def trim(self, before: float) -> None:
        n = bisect.bisect_left(self.ends, before)
        n = max(n, len(self.ends) - MAX_SPANS_PER_STAGE)
        if n > 0:
            del self.ends[:n]
            del self.ms[:n]

    def slow(self, t0: float, t1: float, limit: float) -> list[int]:
        """The indices of the calls over ``limit`` ms that ended in (t0, t1], oldest first."""
        lo, hi = bisect.bisect_right(self.ends, t0), bisect.bisect_right(self.ends, t1)
        return [k for k in range(lo, hi) if self.ms[k] > limit]

    def slow_span(self, slow: list[int]) -> float:
        """Seconds between the first and the last end of the calls ``slow`` (indices)."""
        return self.ends[slow[-1]] - self.ends[slow[0]] if slow else 0.0

    def start(self, k: int) -> float:
        return self.ends[k] - self.ms[k] / 1000.0

    def durations(self, t0: float, t1: float) -> list[float]:
        """Sorted durations of the calls that ended in (t0, t1]."""
        lo, hi = bisect.bisect_right(self.ends, t0), bisect.bisect_right(self.ends, t1)
        return sorted(self.ms[lo:hi])


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed from k up (a small tail keeps its precision)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k, n + 1):
        ways = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
        term = math.exp(ways + i * log_p + (n - i) * log_q)
        total += term
        if term < total * 1e-12:
            break
    return min(1.0, total)


def _odds(share: float) -> float:
    """A share of runnable time spent waiting as seconds waited per second on a CPU: a share
    saturates at 1 (40 % before cannot double), the waits per CPU second do not (0.67 -> 3)."""
    return share / (1.0 - share) if share < 1.0 else math.inf


class Triggers:
    """The auto trigger and the rules over a live session's stage spans (see the module)."""

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        auto: bool = True,
        window_s: float = 2.0,
        cooldown_s: float = 60.0,
    ) -> None:
        self.rules = tuple(rules)
        self.auto = auto
        self.window_s = window_s
        self.cooldown_s = cooldown_s
        self.stages: dict[str, _Stage] = {}
        self.newest = -math.inf  # the newest span end seen
        self.last_fired = -math.inf
        self._trimmed = -math.inf
        # the target's threads, by interval: (end, ns on CPU, ns waiting for one), oldest first
        self.cpu: list[tuple[float, int, int]] = []

    # -- feeding ----------------------------------------------------------------------------
    def add(self, events: Iterable[object]) -> None:
        """Take the stage spans and the CPU waits among ``events`` (anything else is ignored)."""
        for sp in events:
            if isinstance(sp, CpuWait):
                self.add_cpu(sp.t_end, sp.run_ns, sp.wait_ns)
                continue
            if not isinstance(sp, StageSpan) or not sp.t_end >= sp.t_start:
                continue
            st = self.stages.get(sp.stage)
            if st is None:
                st = self.stages[sp.stage] = _Stage(sp.t_end)
            st.add(sp.t_end, (sp.t_end - sp.t_start) * 1000.0)
            if sp.t_end > self.newest:
                self.newest = sp.t_end

    def add_cpu(self, t: float, run_ns: int, wait_ns: int) -> None:
        """The target's threads ran ``run_ns`` and waited on a run queue ``wait_ns`` in the
        interval that ended at ``t`` (unix s)."""
        if run_ns >= 0 and wait_ns >= 0:  # several processes' readings may come out of order
            bisect.insort(self.cpu, (t, run_ns, wait_ns))

    def waited(self, t0: float, t1: float) -> float | None:
        """The share of their runnable time the target's threads spent waiting for a CPU over
        the intervals that ended in (t0, t1]; None without readings there."""
        ends = [c[0] for c in self.cpu]
        lo, hi = bisect.bisect_right(ends, t0), bisect.bisect_right(ends, t1)
        run = sum(c[1] for c in self.cpu[lo:hi])
        wait = sum(c[2] for c in self.cpu[lo:hi])
        return waited_share(run, wait)

    def _starved(self, firing: Firing, end: float) -> Firing:
        """``firing`` with the machine's share in it when its window was starved of CPU."""
        t0 = end - firing.window_s
        if firing.slow_from is not None:
            t0 = max(t0, firing.slow_from)
        now, before = self.waited(t0, end), self.waited(t0 - BASELINE_S, t0)
        if now is None or now < STARVED_SHARE:
            return firing
        was = f" ({before:.0%} before)" if before is not None else ""
        if before is not None and _odds(now) < 2 * _odds(before):
            why = "the machine was as short of CPU the minute before"  # busy all along
        else:
            why = "the machine is short of CPU"
        reason = (f"{firing.reason}; its threads waited for a CPU {now:.0%} of their runnable "
                  f"time{was}: {why}")  # fmt: skip
        return replace(firing, reason=reason)

    def note(self, t: float) -> None:
        """An incident was written at ``t`` (a manual one too): the cooldown starts again."""
        self.last_fired = t

    # -- asking -----------------------------------------------------------------------------
    def end(self, now: float) -> float:
        """Where the windows end: the newest span, unless it lags ``now`` by over LAG_S."""
        return min(now, max(self.newest, now - LAG_S))

    def cooling(self, now: float) -> bool:
        return now - self.last_fired < self.cooldown_s

    def armed(self, now: float) -> list[str]:
        """The stages the auto trigger watches by now (enough history)."""
        end = self.end(now) - self.window_s
        return sorted(n for n, st in self.stages.items() if end - st.first_end >= MIN_HISTORY_S)

    def check(self, now: float) -> Firing | None:
        """A firing when a trigger holds and the cooldown is over (then it starts again)."""
        end = self.end(now)
        if end - self._trimmed >= 1.0:
            self._trimmed = end
            keep = end - self.window_s - BASELINE_S - 1.0
            for st in self.stages.values():
                st.trim(keep)
            n = bisect.bisect_left([c[0] for c in self.cpu], keep - RATE_WINDOW_S)
            del self.cpu[:n]
        if self.cooling(now):
            return None
        firing = self._rules(now, end) or (self._auto(now, end) if self.auto else None)
        if firing is not None:
            self.last_fired = now
            firing = self._starved(firing, end)
        return firing

    @staticmethod
    def _unlikely(base_sorted: list[float], limit: float, slow: int, n: int) -> bool:
        """``slow`` of ``n`` calls over ``limit`` ms is more than the baseline's own share of
        such calls makes likely (a baseline with none counts half a call: its share is
        unknown below that)."""
        over = len(base_sorted) - bisect.bisect_right(base_sorted, limit)
        share = max(over, 0.5) / max(1, len(base_sorted))
        return binomial_tail(slow, n, share) < SURPRISE

    def _rules(self, now: float, end: float) -> Firing | None:
        w = self.window_s
        for rule in self.rules:
            st = self.stages.get(rule.stage)
            if st is None:
                continue  # never seen: not a stage of this target (yet)
            if rule.metric == "rate" and end - st.first_end < w:
                continue  # not a whole window of it yet
            value = rule.value(st.durations(end - w, end), w)
            if value is not None and rule.broken(value):
                seen, limit = rule.show(value), rule.show(rule.threshold)
                reason = f"{rule.stage}.{rule.metric} {seen} {rule.op} {limit}"
                slow = st.slow(end - w, end, rule.threshold) if rule.op == ">" else []
                since = min(map(st.start, slow)) if slow and rule.metric != "rate" else None
                return Firing(now, rule.text, reason, rule.stage, w, since)
        return None

    def _auto(self, now: float, end: float) -> Firing | None:
        w = self.window_s
        split = end - w
        for name in sorted(self.stages):
            st = self.stages[name]
            history = split - st.first_end
            if history < MIN_HISTORY_S:
                continue
            current = st.durations(split, end)
            base_s = min(BASELINE_S, history)
            lo = bisect.bisect_right(st.ends, split - base_s)
            hi = bisect.bisect_right(st.ends, split)
            n_base = hi - lo
            # latency: a spell of slow calls
            if len(current) >= MIN_CALLS_NOW and n_base >= MIN_CALLS_BASE:
                every = BASELINE_EVERY_S * (5 if n_base > BIG_BASELINE else 1)
                if st.base_p95 is None or now - st.base_at >= every:
                    st.base_sorted = sorted(st.ms[lo:hi])
                    st.base_p95 = percentile(st.base_sorted, 95)
                    st.base_at = now
                base = st.base_p95
                p95 = percentile(current, 95)
                limit = AUTO_FACTOR * base
                slow = st.slow(split, end, limit) if p95 > limit else []
                if (
                    p95 - base >= MIN_DELTA_MS
                    and len(slow) >= MIN_SLOW_CALLS
                    and st.slow_span(slow) >= MIN_SPELL_S
                    and self._unlikely(st.base_sorted, limit, len(slow), len(current))
                ):
                    reason = (
                        f"{name}.p95 {ms_text(p95)} > {AUTO_FACTOR:g}× {base_s:.0f} s p95 "
                        f"({ms_text(base)})"
                    )
                    return Firing(now, "auto", reason, name, w, min(map(st.start, slow)))
            # rate: calls that stopped coming, over a longer window than the latency's
            rw = max(w, RATE_WINDOW_S)
            base_rate = n_base / base_s
            rate = (len(st.ends) - bisect.bisect_right(st.ends, end - rw)) / rw
            if base_rate * rw >= MIN_EXPECTED_CALLS and rate < RATE_FACTOR * base_rate:
                reason = (
                    f"{name}.rate {rate_text(rate)} < ½ of its {base_s:.0f} s rate "
                    f"({rate_text(base_rate)})"
                )
                return Firing(now, "auto", reason, name, rw)
        return None
