"""The host memory panel, beside the GPU panel: one process's RSS (anonymous / file / shared),
swap, major faults and growth, and its memory cgroup's headroom to the limit as a bar — read
outside the target from ``/proc`` and the cgroup (``collect/host_memory.py``). Hidden when
nothing was read (a recording made before format 1.8)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from infertop.analysis.host_memory import ProcessMemory
from infertop.analysis.snapshot import Snapshot
from infertop.tui.palette import human_bytes

USED_COLOR, WARN_COLOR, FULL_COLOR = "#87d75f", "#d7af5f", "#ff6f6f"
FREE_STYLE = "on #303030"
WARN_AT, FULL_AT = 0.75, 0.9  # the bar's colour: the share of the limit used
LABEL_W = 7


def shown_process(snap: Snapshot) -> ProcessMemory | None:
    """The process the panel shows: the one the UI selected (--children), else the first read
    (the target)."""
    hm = snap.host_memory
    if hm is None or not hm.processes:
        return None
    return next((p for p in hm.processes if p.pid == snap.process), hm.processes[0])


def _label(text: str) -> Text:
    return Text(text.ljust(LABEL_W), style="bold")


def _signed(n: float) -> str:
    return ("+" if n >= 0 else "-") + human_bytes(int(abs(n)))


def limit_row(p: ProcessMemory, bar_w: int) -> Text:
    """limit [████░░░░] 88% of 8.0 GB · 1.0 GB left (or: none, X used)."""
    row = _label("limit")
    cg = p.cgroup
    if cg is None:
        return row.append("not in a memory cgroup", style="dim")
    if cg.limit is None or cg.usage is None:
        used = f", {human_bytes(cg.usage)} used" if cg.usage is not None else ""
        return row.append(f"none (cgroup v{cg.version}{used})", style="dim")
    share = min(1.0, cg.usage / cg.limit) if cg.limit > 0 else 1.0
    color = FULL_COLOR if share >= FULL_AT else WARN_COLOR if share >= WARN_AT else USED_COLOR
    filled = round(share * bar_w)
    row.append("█" * filled, style=color)
    row.append(" " * (bar_w - filled), style=FREE_STYLE)
    row.append(f" {100 * share:.0f}% of {human_bytes(cg.limit)} · ")
    row.append(f"{human_bytes(max(0, cg.limit - cg.usage))} left", style=f"bold {color}")
    return row


def torch_row(snap: Snapshot) -> Text | None:
    """torch  forward peak 8.0 MB/call · 8.4 MB allocated/call (--profile-memory's calls; the
    device with the most bytes); None without them."""
    t = snap.torch.memory
    fwd = [st for st in t.stages if st.stage == "forward" and st.calls] if t is not None else []
    if not fwd:
        return None
    st = max(fwd, key=lambda s: s.alloc_bytes)
    row = _label("torch").append(f"forward peak {human_bytes(st.peak_max)}/call", style="bold")
    row.append(f" · {human_bytes(st.alloc_bytes // st.calls)} allocated/call · {st.device}", style="dim")
    row.no_wrap, row.overflow = True, "ellipsis"
    return row


def render_memory(snap: Snapshot | None, width: int, compact: bool = False) -> Text:
    """The panel's text: RSS and its split, swap and faults, growth, the limit's headroom."""
    p = shown_process(snap) if snap is not None else None
    if p is None:
        return Text("host memory: nothing read", style="dim italic")
    rss = _label("rss").append(human_bytes(p.rss_last), style="bold")
    split = [
        (k, v)
        for k, v in (("anon", p.rss_anon), ("file", p.rss_file), ("shm", p.rss_shmem))
        if v is not None
    ]
    if split:
        rss.append("  " + " · ".join(f"{k} {human_bytes(v)}" for k, v in split), style="dim")
    bar_w = max(6, min(20, width - LABEL_W - 32))
    limit = limit_row(p, bar_w)
    if compact:
        return Text("\n").join([rss, limit])
    paging = _label("swap").append(human_bytes(p.swap_last or 0))
    faults = p.recent_major_faults_per_s
    if faults is not None:
        style = f"bold {WARN_COLOR}" if faults >= 1 else "dim"
        paging.append(f" · major faults {faults:.1f}/s", style=style)
    if p.cgroup is not None and p.cgroup.oom_kills:
        paging.append(f" · OOM kills {p.cgroup.oom_kills}", style=f"bold {FULL_COLOR}")
    growth = _label("growth")
    if p.growth_bytes_per_s is None:
        growth.append("not yet (needs a few seconds past warm-up)", style="dim")
    else:
        steady = p.growth_bytes_per_s > 0 and (p.growth_r2 or 0) >= 0.8
        growth.append(
            f"{_signed(p.growth_bytes_per_s)}/s", style=f"bold {WARN_COLOR}" if steady else ""
        )
        growth.append(f" · peak {human_bytes(p.rss_max)}", style="dim")
    if p.growing:  # what grows, from the agent's object censuses: the first, on this row
        g = p.growing[0]
        what = (g.name or f"a {g.type}") if g.what == "container" else g.type
        unit = "items" if g.what == "container" else "objects"
        growth.append(f" · {what} +{g.count_per_s:.0f} {unit}/s", style=WARN_COLOR)
        growth.no_wrap, growth.overflow = True, "ellipsis"
    torch = torch_row(snap) if snap is not None else None
    return Text("\n").join([rss, paging, growth, limit] + ([torch] if torch is not None else []))


class MemoryPanel(Widget):
    """Host memory of the process shown; hidden until a reading comes."""

    DEFAULT_CSS = """
    MemoryPanel { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.border_title = "host memory"
        self.display = False

    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        p = shown_process(snapshot)
        self.display = p is not None and self.visible_wanted
        if p is not None:
            hm = snapshot.host_memory
            more = (
                f" (+{len(hm.processes) - 1})" if hm is not None and len(hm.processes) > 1 else ""
            )
            self.border_title = f"host memory · pid {p.pid}{more}"
        self.refresh(layout=True)

    #: the stage and GPU panels hidden (key f): so is this one
    visible_wanted = True

    @property
    def compact(self) -> bool:
        return self.screen.has_class("-compact") if self.is_mounted else False

    def render(self) -> Text:
        return render_memory(self.snapshot, self.content_region.width or 48, self.compact)
