"""`infertop diff`: what is compared, the comparison and its gate, its text (layer: views). Import
the modules by name."""

__all__ = [
    "diff",
    "profile",
    "render",
]
