"""The icicle graph's layout and the flame search, as pure functions (no Textual)."""

from __future__ import annotations

import itertools
import random
import threading

from flame_trees import frame, loop_tree, node, tree

from infertop.analysis.flame import FlameNode
from infertop.model.events import Frame
from infertop.tui.flame_search import Finisher, frame_matcher, matched_total, search, search_text
from infertop.tui.icicle import IcicleLayout, Span, deepest_shown, fit_label, ordered_children


def names(spans: list[Span]) -> list[str | None]:
    return [s.node.frame.function if s.node is not None else None for s in spans]


def test_three_siblings_side_by_side_in_proportion_and_in_name_order() -> None:
    root = loop_tree()  # 26 + 47 + 24 + 3 = 100 samples
    lay = IcicleLayout(root, zoomed=False, width=116)
    assert [names(r) for r in lay.rows[:3]] == [
        ["main"],
        ["loop"],
        ["forward", "log", "serialize", "tokenize"],
    ]
    spans = {s.node.frame.function: s for s in lay.rows[2]}
    assert lay.rows[0][0] == Span(root.children[frame("main")], 0, 116)
    assert [spans[n].width for n in ("forward", "log", "serialize", "tokenize")] == [55, 3, 28, 30]
    assert [spans[n].x for n in ("forward", "log", "serialize", "tokenize")] == [0, 55, 58, 86]
    assert names(lay.rows[3]) == ["Linear.forward", "dumps", "Tokenizer.encode"]
    assert lay.depth == 4


def test_children_stay_inside_their_parent_and_siblings_never_overlap() -> None:
    rng = random.Random(5)
    words = ["a", "b", "c", "d", "e"]
    stacks = []
    for _ in range(300):
        path = ";".join(rng.choice(words) + str(d) for d in range(rng.randint(1, 7)))
        stacks.append((path, rng.randint(1, 50), rng.choice(["forward", "queue"])))
    root = tree(stacks)
    for width in (1, 7, 80, 157):
        lay = IcicleLayout(root, zoomed=False, width=width)
        for r, row in enumerate(lay.rows):
            assert all(a.end <= b.x for a, b in itertools.pairwise(row))  # in order, apart
            assert all(s.width >= 1 and 0 <= s.x and s.end <= width for s in row)
            for s in row:
                if s.node is None:
                    continue
                assert s.node.total * width / root.total >= 1  # narrower than a cell: not drawn
                if r:
                    parent = lay.span(s.node.parent)
                    assert parent is not None and parent.x <= s.x and s.end <= parent.end
                    assert lay.row_of(s.node.parent) == r - 1


def test_narrow_frames_merge_into_one_filler_and_their_children_are_left_out() -> None:
    stacks = [("main;big;leaf", 90, "forward")]
    stacks += [(f"main;tiny{i};deeper", 1, "queue") for i in range(10)]
    root = tree(stacks)
    lay = IcicleLayout(root, zoomed=False, width=20)  # a sample is 0.2 of a cell
    assert names(lay.rows[1]) == ["big", None]  # "tiny0".."tiny9" sort after "big": one filler
    assert lay.rows[1][1] == Span(None, 18, 2)
    assert names(lay.rows[2]) == ["leaf"]
    assert not lay.drawn(node(root, "main;tiny3"))
    assert lay.at(1, 19) is None and lay.at(1, 3) is node(root, "main;big")


def test_small_changes_move_edges_by_a_cell_at_most_and_never_reorder() -> None:
    # four samples in a thousand move from forward to tokenize: half a cell
    before = IcicleLayout(loop_tree(260, 470, 240), zoomed=False, width=116)
    after = IcicleLayout(loop_tree(264, 466, 240), zoomed=False, width=116)
    for a, b in zip(before.rows, after.rows):
        assert names(a) == names(b)
        assert all(abs(x.x - y.x) <= 1 and abs(x.end - y.end) <= 1 for x, y in zip(a, b))
    flipped = IcicleLayout(loop_tree(600, 100, 270), zoomed=False, width=116)
    assert names(flipped.rows[2]) == names(before.rows[2])  # order is by name, not by size
    assert names(before.rows[2]) == ["forward", "serialize", "tokenize"]  # log: under a cell


def test_a_zoomed_frame_is_the_whole_top_row() -> None:
    root = loop_tree()
    fwd = node(root, "main;loop;forward")
    lay = IcicleLayout(fwd, zoomed=True, width=50)
    assert lay.rows[0] == [Span(fwd, 0, 50)]
    assert lay.rows[1] == [Span(node(root, "main;loop;forward;Linear.forward"), 0, 50)]
    assert lay.first() is fwd and lay.parent(fwd) is None  # its caller is not on screen
    assert IcicleLayout(FlameNode(None), zoomed=False, width=50).rows == []


def test_moving_parent_child_and_along_a_row() -> None:
    root = loop_tree()
    lay = IcicleLayout(root, zoomed=False, width=116)
    loop = node(root, "main;loop")
    assert lay.first() is node(root, "main")
    assert lay.child(loop) is node(root, "main;loop;forward")  # the widest
    assert lay.child(loop, prefer=frame("serialize")) is node(root, "main;loop;serialize")
    fwd, ser = node(root, "main;loop;forward"), node(root, "main;loop;serialize")
    assert lay.parent(fwd) is loop and lay.parent(node(root, "main")) is None
    assert lay.neighbour(fwd, 1) is node(root, "main;loop;log")
    assert lay.neighbour(fwd, -1) is None
    # the next frame on a row may have another caller
    linear, dumps = (
        node(root, "main;loop;forward;Linear.forward"),
        node(root, "main;loop;serialize;dumps"),
    )
    assert lay.neighbour(linear, 1) is dumps and lay.neighbour(dumps, -1) is linear
    assert lay.child(linear) is None and lay.neighbour(ser, 1) is node(root, "main;loop;tokenize")


def test_deepest_shown_falls_back_to_the_nearest_ancestor() -> None:
    root = loop_tree()
    lay = IcicleLayout(root, zoomed=False, width=116)
    gone = [frame(n) for n in ("main", "loop", "tokenize", "Tokenizer.encode", "_bpe")]
    assert deepest_shown(root, gone, lay.drawn) is node(root, "main;loop;tokenize;Tokenizer.encode")
    other = [frame(n) for n in ("main", "elsewhere", "x")]
    assert deepest_shown(root, other, lay.drawn) is node(root, "main")
    assert deepest_shown(root, [frame("nothing")], lay.drawn) is None


def test_ordered_children_and_labels() -> None:
    root = tree([("b", 1, "other"), ("B", 1, "other"), ("a", 1, "other"), ("_x", 1, "other")])
    assert [c.frame.function for c in ordered_children(root)] == ["_x", "a", "B", "b"]
    assert fit_label("Tokenizer.encode_batch", 30) == "Tokenizer.encode_batch"
    assert fit_label("Tokenizer.encode_batch", 14) == "encode_batch"  # the method first
    assert fit_label("Tokenizer.encode_batch", 8) == "encode_…"
    assert fit_label("forward", 1) == "f" and fit_label("forward", 0) == ""


# -- search ------------------------------------------------------------------------------------
def test_a_glob_or_a_substring_matches_function_or_file_ignoring_case() -> None:
    f = frame("Tokenizer.encode")  # in /srv/app/tokenizer.py
    assert frame_matcher("tokeniz*")(f) and frame_matcher("*ENCODE")(f)
    assert frame_matcher("izer.enc")(f) and frame_matcher("app/tok")(f)  # substring of the file
    assert frame_matcher("tokenizer.py")(Frame("x", "/a/tokenizer.py", 1))
    assert not frame_matcher("encode*")(f)  # a glob matches the whole name
    assert not frame_matcher("forward")(f)


def test_the_share_counts_each_stack_once() -> None:
    root = tree(
        [
            ("main;encode_batch;encode", 20, "preprocess"),  # encode under encode_batch
            ("main;encode_batch", 6, "preprocess"),
            ("main;decode;encode", 4, "postprocess"),
            ("main;forward", 70, "forward"),
        ]
    )
    found = search(root, "encode*")
    assert found is not None and found.total == 30 and found.of == 100
    assert search_text(found) == "encode*: 30.0 %"
    assert found.hit(node(root, "main;decode;encode")) and not found.hit(node(root, "main"))
    assert matched_total(node(root, "main;decode"), found.matches) == 4
    # a tree too big to count at once: the highlight is there at once, the share comes later
    slow = search(root, "encode*", budget=2)
    assert not slow.done and slow.total is None and search_text(slow) == "encode*: …"
    assert slow.hit(node(root, "main;decode;encode"))
    slow.finish()
    assert slow.total == 30 and search_text(slow) == "encode*: 30.0 %"
    assert search(root, "  ") is None and search_text(None) == ""
    assert search(root, "nothing").total == 0


def test_tokenize_share_of_the_loop() -> None:
    found = search(loop_tree(), "tokeniz*")
    assert search_text(found) == "tokeniz*: 26.0 %"


def test_big_searches_are_finished_on_a_thread_newest_first() -> None:
    root = loop_tree()
    done: list[object] = []
    finished = threading.Event()

    def told(found: object) -> None:
        done.append(found)
        finished.set()

    finisher = Finisher(told)
    slow = search(root, "tokeniz*", budget=1)
    finisher.submit(slow)
    assert finished.wait(5) and done == [slow] and slow.total == 26
