"""The terminal UI (Textual). Nothing outside this package imports Textual."""

from infertop.tui.app import InfertopApp, create_app

__all__ = ["InfertopApp", "create_app"]
