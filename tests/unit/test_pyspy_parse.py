from __future__ import annotations

from infertop.collect.pyspy import parse_frame, parse_raw

RAW = """\
thread (2049): waiter;Thread._bootstrap (/usr/lib/python3.11/threading.py:1002);waiter (/tmp/t.py:8);Queue.get (/usr/lib/python3.11/queue.py:180) 99
thread (2007): MainThread;<module> (/tmp/t.py:11);work (/tmp/t.py:5) 31
thread (0x7f00aa);<module> (/tmp/t.py:11) 2
garbage line without count
thread (2007): MainThread;odd frame 4
"""


def test_parse_raw_rows() -> None:
    rows, bad = parse_raw(RAW)
    assert bad == 1
    assert rows[0][0] == 2049 and rows[0][1] == "waiter" and rows[0][3] == 99
    assert [f.function for f in rows[0][2]] == ["Thread._bootstrap", "waiter", "Queue.get"]
    assert rows[0][2][2].file == "/usr/lib/python3.11/queue.py" and rows[0][2][2].line == 180
    assert rows[2][0] == 0x7F00AA and rows[2][1] == ""
    assert rows[3][2][0].function == "odd frame" and rows[3][2][0].line == 0


def test_parse_frame_with_parentheses_in_name() -> None:
    f = parse_frame("<lambda> (/a (copy)/b.py:3)")
    assert f.function == "<lambda>" and f.file == "/a (copy)/b.py" and f.line == 3


def test_parse_raw_never_raises_on_noise() -> None:
    import random

    rnd = random.Random(1)
    for _ in range(200):
        text = "".join(rnd.choice("thread ();:0123 abc\n") for _ in range(200))
        parse_raw(text)
