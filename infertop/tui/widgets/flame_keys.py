"""The flame's keys (``FlameList.BINDINGS``): one binding per action, with the tooltip the
help screen and the footer show."""

from __future__ import annotations

from textual.binding import Binding, BindingType

FLAME_BINDINGS: list[BindingType] = [
    Binding(
        "up",
        "up",
        "Up",
        show=False,
        tooltip="flame: the caller (icicle) · the row above (list)",
        key_display="↑",
    ),
    Binding(
        "down",
        "down",
        "Down",
        show=False,
        tooltip="flame: a callee — the one you came up from, else the widest (icicle) · "
        "the row below (list)",
        key_display="↓",
    ),
    Binding(
        "left",
        "side(-1)",
        "Left",
        show=False,
        tooltip="flame: the frame to the left on the same row (icicle) · the caller (list)",
        key_display="←",
    ),
    Binding(
        "right",
        "side(1)",
        "Right",
        show=False,
        tooltip="flame: the frame to the right on the same row (icicle) · the widest callee (list)",
        key_display="→",
    ),
    Binding(
        "pageup",
        "page(-1)",
        "PgUp",
        show=False,
        tooltip="flame: a page up (list) · as many callers up (icicle)",
        key_display="pgup",
    ),
    Binding(
        "pagedown",
        "page(1)",
        "PgDn",
        show=False,
        tooltip="flame: a page down (list) · as many callees down (icicle)",
        key_display="pgdn",
    ),
    Binding(
        "enter",
        "zoom_in",
        "Zoom",
        tooltip="flame: zoom into the selected frame (it becomes the root); a click "
        "selects a frame, a second click zooms",
    ),
    Binding(
        "escape",
        "escape",
        "Out",
        key_display="esc",
        tooltip="flame: clear the search highlight, else zoom out one level",
    ),
    Binding("backspace", "zoom_out", "Out", show=False, tooltip="flame: zoom out one level"),
    Binding(
        "t",
        "toggle_style",
        "Tree",
        show=False,
        tooltip="flame: icicle graph ↔ indented list (the zoom and the selection stay)",
    ),
    Binding(
        "slash",
        "search",
        "Find",
        show=False,
        key_display="/",
        tooltip="flame: search frames by function or file, a substring or a glob "
        "(tokeniz*): matches are highlighted and the header gives their share; enter "
        "keeps the highlight, esc clears it",
    ),
]
