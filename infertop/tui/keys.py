"""The UI's keys: one binding per action, each with the tooltip the help screen (``?``) and
the footer show. ``APP_BINDINGS`` are every view's; live and replay add theirs before the
``TAIL_BINDINGS`` (the views and screens every app has)."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding, BindingType

SEEK = Binding.Group("Seek", compact=True)
SPEED = Binding.Group("Speed", compact=True)
#: the history key ``m`` records before its CUDA memory snapshot
MEMORY_SNAPSHOT_S = 10.0


def _b(key: str, action: str, text: str, help_text: str, **kw: Any) -> Binding:
    return Binding(key, action, text, tooltip=help_text, **kw)


APP_BINDINGS: list[BindingType] = [
    _b("q", "quit", "Quit", "quit (a recording in progress is closed cleanly)"),
]
TAIL_BINDINGS = [
    _b(
        "s",
        "stage_filter",
        "Stage",
        "cycle the lower panel's stage filter (all, then each stage)",
    ),
    _b(
        "c",
        "time_view",
        "Wall/CPU",
        "stage panel: wall time of the pipeline threads (idle waits inside a stage count) "
        "or CPU (active samples only)",
        show=False,  # the footer is full at 80 columns: the panel's header says the view
    ),
    _b(
        "o",
        "cycle_view",
        "Ops",
        "lower panel: Python flame → torch-ops flame → ops table (torch.profiler windows)",
    ),
    _b(
        "z",
        "toggle_fold",
        "Fold",
        "flame: fold call plumbing (Module._call_impl, decorator wrappers, thread "
        "bootstrap) into its caller, or show every frame ([flame] fold in the config)",
        show=False,
    ),
    _b(
        "n",
        "toggle_lines",
        "Lines",
        "flame: one frame per function (lines merged) or per line of a function",
        show=False,
    ),
    _b("f", "toggle_flame", "Flame", "flame view only, for more rows (f again: both panels)"),
    _b(
        "i",
        "findings",
        "Findings",
        "findings: ranked bottlenecks with evidence and fix; enter goes to the frame or op",
        show=False,  # the footer is full at 80 columns: the flame panel's corner shows it
    ),
    _b(
        "l",
        "tail",
        "Tail",
        "tail view: a stage's slow calls against its typical ones — the frames they have "
        "more of, the slowest calls, what they overlapped (GC, GIL, queue, sync, our own "
        "profiler), the slow-vs-typical flame; s: next stage",
        show=False,
    ),
    _b("g", "next_gpu", "GPU", "GPU panel: next GPU (the target's GPUs come first)", show=False),
    _b(
        "w",
        "next_process",
        "Process",
        "with --children: stages and flame of all processes merged, then of each process",
        show=False,
    ),
    _b(
        "W",
        "processes",
        "Processes",
        "many processes (--children, several PIDs, ranks): the process selector — pid, "
        "role, CPU, GPU memory, samples/s of each; enter shows one (or all merged)",
        show=False,
    ),
    _b("question_mark", "help", "Help", "this help", key_display="?"),
]

LIVE_BINDINGS: list[BindingType] = [
    _b("p", "pause", "Pause", "freeze the display; collecting (and recording) goes on"),
    _b("r", "record", "Record", "start / stop recording to ./infertop-PID-TIME.infertop"),
    _b(
        "x",
        "save_incident",
        "Save incident",
        "save the incident the trigger marked (a stage's p95 doubled, or its call rate "
        "halved) as ./incident-TIME.infertop: 30 s before it and 10 s after, as infertop "
        "watch writes them",
        show=False,
    ),
    _b(
        "m",
        "memory_snapshot",
        "Mem snapshot",
        f"CUDA memory snapshot: {MEMORY_SNAPSHOT_S:g} s of the allocator's history, then "
        "PyTorch's snapshot written to ./memory-snapshot-PID-TIME.pickle (open it at "
        "pytorch.org/memory_viz); the agent's status line says when, or why not (no CUDA)",
        show=False,
    ),
    *TAIL_BINDINGS,
]

REPLAY_BINDINGS: list[BindingType] = [
    _b("space,p", "play", "Play", "play / pause"),
    _b(
        "comma,less_than_sign,left",
        "seek(-5)",
        "-5s",
        "back 5 s (← only where the focused view does not take it: the flame does)",
        key_display=",",
        group=SEEK,
    ),
    _b(
        "full_stop,greater_than_sign,right",
        "seek(5)",
        "+5s",
        "forward 5 s (→ likewise)",
        key_display=".",
        group=SEEK,
    ),
    _b("home", "seek_to(0)", "Start", "go to the start", show=False),
    _b("end", "seek_end", "End", "go to the end", show=False),
    _b("left_square_bracket", "speed(0.5)", "½×", "half speed", key_display="[", group=SPEED),
    _b("right_square_bracket", "speed(2)", "2×", "double speed", key_display="]", group=SPEED),
    *TAIL_BINDINGS,
]

KEY_NAMES = {
    "escape": "esc",
    "comma": ",",
    "full_stop": ".",
    "less_than_sign": "<",
    "greater_than_sign": ">",
    "left": "←",
    "right": "→",
}
