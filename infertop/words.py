"""Counts in the words people read: ``1 window``, ``2 windows``; used wherever a report, the UI
or a command's progress line prints how many windows, samples or processes there are."""

from __future__ import annotations


def plural(n: float, noun: str) -> str:
    """``noun`` as it goes after the number ``n``: as given for one, else its plural (the last
    word's: ``op window`` → ``op windows``, ``process`` → ``processes``)."""
    if n == 1:
        return noun
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def counted(n: int, noun: str) -> str:
    """``1,204 samples``, ``1 sample``: the number with thousands separators, then the noun."""
    return f"{n:,} {plural(n, noun)}"
