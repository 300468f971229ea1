"""The key bar: the keys that work now, on the screen's last line, drawn as one line of text.

Textual's ``Footer`` shows the same keys as one widget per key and builds them anew whenever the
bindings change (a focus moves, a screen opens): at start that was 0.4 s of CPU, more than the
rest of the UI's first draw together (docs/performance.md). Here the keys are laid out as one
``Text`` and redrawn only when the line they make changes. What it shows follows the Footer's
habits: one entry per action (its first key), an action's keys in a group with other actions
side by side under the group's name (``,. Seek``), keys that do nothing now dimmed. A click on
an entry presses its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget


@dataclass(frozen=True)
class _Entry:
    key: str  # what a click presses
    shown: str  # how the key is written
    label: str  # after the key(s); "" inside a group
    enabled: bool


class KeyBar(Widget):
    """One line of key hints for the screen it is on."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"key-bar--key", "key-bar--description"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        text-wrap: nowrap;
        .key-bar--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .key-bar--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self._groups: tuple[tuple[_Entry, ...], ...] = ()
        self._spans: list[tuple[int, int, _Entry]] = []  # [start, end) cells -> entry

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        if screen is self.screen and self.is_attached:
            # after the refresh in progress: the focus that changed the bindings has moved
            self.call_after_refresh(self._update)

    def _update(self) -> None:
        if not self.is_attached:
            return
        groups = self._entries()
        if groups != self._groups:
            self._groups = groups
            self.refresh()

    def _entries(self) -> tuple[tuple[_Entry, ...], ...]:
        """The entries in display order, those of one group of several actions together."""
        first: dict[str, tuple[Binding, bool]] = {}  # action -> its first shown binding
        for _node, binding, enabled, _tip in self.screen.active_bindings.values():
            if binding.show and binding.action not in first:
                first[binding.action] = (binding, enabled)
        out: list[tuple[_Entry, ...]] = []
        for group, members in groupby(first.values(), lambda be: be[0].group):
            items = list(members)
            if group is not None and len(items) > 1:
                entries = [self._entry(b, on, "") for b, on in items]
                out.append((*entries, _Entry("", "", group.description, True)))
            else:
                out.extend((self._entry(b, on, b.description),) for b, on in items)
        return tuple(out)

    def _entry(self, binding: Binding, enabled: bool, label: str) -> _Entry:
        return _Entry(binding.key, self.app.get_key_display(binding), label, enabled)

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-bar--key")
        text_style = self.get_component_rich_style("key-bar--description")
        dim = Style(dim=True)
        line = Text(no_wrap=True, overflow="crop", end="")
        self._spans = []
        for i, group in enumerate(self._groups):
            if i:
                line.append("  " if len(group) > 1 else " ")  # a group stands apart
            for entry in group:
                start = len(line)
                line.append(entry.shown, key_style if entry.enabled else key_style + dim)
                if entry.label:
                    line.append(
                        " " + entry.label, text_style if entry.enabled else text_style + dim
                    )
                if entry.key:
                    self._spans.append((start, len(line), entry))
        return line

    def on_click(self, event: events.Click) -> None:
        for start, end, entry in self._spans:
            if start <= event.x < end:
                if entry.enabled:
                    self.app.simulate_key(entry.key)
                else:
                    self.app.bell()
                return
