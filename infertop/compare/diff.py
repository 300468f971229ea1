"""Two profiles compared: what moved, and which of the gated numbers regressed.

Gated (``--fail-above PCT``): every latency group in both (p50 and p95), every stage share
(idle excluded), GPU time per step, host memory's peak and growth, and the largest peak of a
forward call torch's allocator reported (``--profile-memory``). A number regresses when
it grows by more than PCT % of its base value. Shares are zero-sum (when one stage shrinks the
others' shares grow), so a stage share regresses only when, besides its share growing by more than PCT % and by at least
``SHARE_FLOOR`` of active time (a stage going from 0.4 % to 0.9 % of samples is sampling noise),
the stage's own busy time per wall second grew by more than PCT % as well. Host memory's peak
(and torch's forward peak) regresses only when it also grew by ``PEAK_FLOOR`` bytes, its growth rate only by
``GROWTH_FLOOR`` bytes/s (a flat process's slope is noise around zero, its peak moves by a few
MB from run to run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infertop.analysis.shares import percentile
from infertop.compare.profile import Profile
from infertop.report.records import Finding
from infertop.report.records import as_json as record_json

SHARE_FLOOR = 0.01  # a stage share must grow by at least one point of active time to regress
PEAK_FLOOR = 16 * 2**20  # bytes: host memory's peak must grow by at least this much to regress
GROWTH_FLOOR = 64 * 1024  # bytes/s (225 MiB an hour): and its growth rate by at least this
TOP = 10
DIFF_VERSION = 1


@dataclass(eq=False)
class Row:
    what: str  # "latency" | "stage share" | "gpu per step" | "memory" | "torch memory"
    name: str
    base: float | None
    new: float | None
    unit: str
    gated: bool = True
    rates: tuple[float, float] | None = None  # stage share rows: busy s per wall s, base and new

    @property
    def change_pct(self) -> float | None:
        if self.base is None or self.new is None:
            return None
        if self.base == 0:
            return None if self.new == 0 else float("inf")
        return 100.0 * (self.new - self.base) / self.base


@dataclass
class Mover:
    name: str
    base: float
    new: float  # per step (µs) or share


@dataclass
class DiffResult:
    base: Profile
    new: Profile
    per: str  # "step" | "s"
    rows: list[Row] = field(default_factory=list)
    ops: list[Mover] = field(default_factory=list)
    kernels: list[Mover] = field(default_factory=list)
    frames: list[Mover] = field(default_factory=list)
    findings_new: list[Finding] = field(default_factory=list)
    findings_gone: list[Finding] = field(default_factory=list)
    fail_above: float | None = None
    regressions: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _per(p: Profile, per: str) -> float:
    return p.steps if per == "step" else p.seconds


def _movers(base: dict[str, float], new: dict[str, float], db: float, dn: float) -> list[Mover]:
    rows = [
        Mover(k, base.get(k, 0.0) / db if db else 0.0, new.get(k, 0.0) / dn if dn else 0.0)
        for k in set(base) | set(new)
    ]
    rows.sort(key=lambda m: -abs(m.new - m.base))
    return [m for m in rows if m.new != m.base][:TOP]


def compare(base: Profile, new: Profile, fail_above: float | None = None) -> DiffResult:
    per = "step" if base.steps and new.steps else "s"
    res = DiffResult(base, new, per, fail_above=fail_above)
    if (base.steps or new.steps) and per == "s":
        res.notes.append(
            "only one side has ProfilerStep ranges: op and GPU time compared per profiled second"
        )
    for name in sorted(set(base.latencies) | set(new.latencies)):
        b, n = sorted(base.latencies.get(name, ())), sorted(new.latencies.get(name, ()))
        both = bool(b and n)
        for q in (50, 95):
            res.rows.append(
                Row(
                    "latency",
                    f"{name} p{q}",
                    percentile(b, q) if b else None,
                    percentile(n, q) if n else None,
                    "ms",
                    gated=both,
                )
            )
    # like with like: wall shares when both have them, else both CPU shares
    wall = base.wall and new.wall
    b_shares = base.stage_shares if wall else (base.cpu_shares if base.wall else base.stage_shares)
    n_shares = new.stage_shares if wall else (new.cpu_shares if new.wall else new.stage_shares)
    if base.wall != new.wall and b_shares and n_shares:
        res.notes.append("stage shares compared as CPU time: one recording has no wall windows")
    sampled = bool(b_shares and n_shares)  # a trace has no samples
    for name in sorted(set(b_shares) | set(n_shares)):
        if name == "idle":
            continue
        res.rows.append(
            Row(
                "stage share" if wall else "stage share (cpu)",
                name,
                b_shares.get(name, 0.0) if b_shares else None,
                n_shares.get(name, 0.0) if n_shares else None,
                "share",
                gated=sampled,
                # busy thread-seconds per second, of the view compared (none when views mix)
                rates=(base.stage_rates.get(name, 0.0), new.stage_rates.get(name, 0.0))
                if base.wall == new.wall
                else None,
            )
        )
    db, dn = _per(base, per), _per(new, per)
    if (base.gpu_us or new.gpu_us) and db and dn:
        res.rows.append(
            Row(
                "gpu per step" if per == "step" else "gpu per s",
                "GPU time",
                base.gpu_us / db,
                new.gpu_us / dn,
                "µs",
            )
        )
    for name, unit, b_value, n_value in (
        ("peak RSS", "bytes", base.memory_peak, new.memory_peak),
        ("growth past warm-up", "B/s", base.memory_growth, new.memory_growth),
    ):
        if b_value is not None or n_value is not None:
            both = b_value is not None and n_value is not None
            res.rows.append(Row("memory", name, b_value, n_value, unit, gated=both))
    if base.torch_peak is not None or new.torch_peak is not None:
        both = base.torch_peak is not None and new.torch_peak is not None
        res.rows.append(Row("torch memory", "forward peak per call", base.torch_peak, new.torch_peak, "bytes",
                            gated=both))  # fmt: skip
    res.ops = _movers(base.ops, new.ops, db, dn)
    res.kernels = _movers(base.kernels, new.kernels, db, dn)
    res.frames = _movers(base.frames, new.frames, 1.0, 1.0)
    res.findings_new = [f for r, f in new.findings.items() if r not in base.findings]
    res.findings_gone = [f for r, f in base.findings.items() if r not in new.findings]
    if fail_above is not None:
        res.regressions = [r for r in res.rows if _regressed(r, fail_above)]
    return res


def _regressed(row: Row, pct: float) -> bool:
    if not row.gated or row.base is None or row.new is None:
        return False
    change = row.change_pct
    if change is None or change <= pct:
        return False
    if row.what == "memory" or row.what == "torch memory":
        floor = PEAK_FLOOR if row.unit == "bytes" else GROWTH_FLOOR
        return row.new - row.base >= floor
    if row.what.startswith("stage share"):
        if row.new - row.base < SHARE_FLOOR:
            return False
        if row.rates is not None:
            b, n = row.rates
            if b > 0 and 100.0 * (n - b) / b <= pct:
                return False
    return True


def as_json(res: DiffResult) -> dict[str, Any]:
    def num(x: float | None, nd: int = 6) -> float | None:
        if x is None:
            return None
        return round(x, nd) if x != float("inf") else None

    return {
        "infertop_diff": DIFF_VERSION,
        "base": {
            "kind": res.base.kind,
            "path": res.base.path,
            "steps": res.base.steps,
            "seconds": num(res.base.seconds, 3),
        },
        "new": {
            "kind": res.new.kind,
            "path": res.new.path,
            "steps": res.new.steps,
            "seconds": num(res.new.seconds, 3),
        },
        "per": res.per,
        "compared": [
            {
                "what": r.what,
                "name": r.name,
                "base": num(r.base),
                "new": num(r.new),
                "unit": r.unit,
                "change_pct": num(r.change_pct, 2),
                "gated": r.gated,
                "regressed": r in res.regressions,
            }
            for r in res.rows
        ],
        "ops": [
            {"name": m.name, "base_us": num(m.base, 3), "new_us": num(m.new, 3)} for m in res.ops
        ],
        "kernels": [
            {"name": m.name, "base_us": num(m.base, 3), "new_us": num(m.new, 3)}
            for m in res.kernels
        ],
        "frames": [
            {"name": m.name, "base_self_share": num(m.base), "new_self_share": num(m.new)}
            for m in res.frames
        ],
        "findings": {"new": [record_json(f) for f in res.findings_new],
                     "gone": [record_json(f) for f in res.findings_gone]},
        "fail_above_pct": res.fail_above,
        "regressions": [
            {"what": r.what, "name": r.name, "change_pct": num(r.change_pct, 2)}
            for r in res.regressions
        ],
        "notes": res.notes,
    }
