"""The UI's modal screens: help, findings, processes. Import the modules by name."""

__all__ = [
    "findings",
    "help",
    "processes",
]
