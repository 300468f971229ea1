"""The differential flame's arithmetic: shares of each profile's own total, call paths matched
by function and file (lines move between builds), gone paths outermost only."""

from __future__ import annotations

from infertop.analysis.flame import build_flame
from infertop.analysis.flame_diff import BaseShares, diff_rows, gone_frames
from infertop.compare.flame_render import render_flame_diff
from infertop.model.events import Frame


def _f(name: str, line: int = 1) -> Frame:
    return Frame(name, f"/srv/app/{name}.py", line)


def _tree(stacks: dict[tuple[Frame, ...], int]):
    ids = list(stacks)
    return build_flame(
        [(i, stacks[s]) for i, s in enumerate(ids)], lambda i: list(ids[i]), lambda i: "forward"
    )


MAIN = _f("main")


def test_growth_is_in_points_of_each_profiles_own_total() -> None:
    # the base: 200 samples, tokenize a quarter; the new: 1000 samples, tokenize half
    base = _tree({(MAIN, _f("tokenize")): 50, (MAIN, _f("forward")): 150})
    new = _tree({(MAIN, _f("tokenize", 7)): 500, (MAIN, _f("forward", 9)): 500})  # lines moved
    rows = {r.frame.function: r for r in diff_rows(new, BaseShares(base))}
    assert rows["tokenize"].new_share == 0.5 and rows["tokenize"].base_share == 0.25
    assert round(rows["tokenize"].change, 6) == 0.25
    assert round(rows["forward"].change, 6) == -0.25
    assert rows["main"].change == 0


def test_a_call_path_that_vanished_is_listed_once_at_its_top() -> None:
    base = _tree({(MAIN, _f("cache_miss"), _f("load")): 40, (MAIN, _f("forward")): 60})
    new = _tree({(MAIN, _f("forward")): 100})
    gone = gone_frames(new, BaseShares(base))
    assert [(p[-1][0], round(s, 2)) for p, s in gone] == [("cache_miss", 0.4)]
    text = render_flame_diff(new, base, "a", "b")
    assert "cache_miss" in text.split("gone")[1] and "(under main)" in text
    # a frame new in this profile says so; a steady one shows a dot
    new2 = _tree({(MAIN, _f("forward")): 60, (MAIN, _f("retry")): 40})
    lines = render_flame_diff(new2, base, "a", "b", colour=True).splitlines()
    retry = next(ln for ln in lines if "retry" in ln)
    assert "new" in retry and "\x1b[31m" in retry  # red: it grew from nothing
    forward = next(ln for ln in lines if "·forward" in ln)
    assert "+" not in forward and "-" not in forward.split("%")[1].split("·")[0]  # 60 % both
