"""Op windows in a recording: code 21, one mapping of fields by name (``model/fields.py``,
the agent's ``window`` message's own), and code 11, the same fields by position, which
recordings before code 21 hold and which are still read (docs/recording-format.md)."""

from __future__ import annotations

from typing import Any

from infertop.model.events import OpWindow
from infertop.model.fields import (
    GPU_FIELDS,
    OP_TIME_FIELDS,
    OP_WINDOW_FIELDS,
    decode_op_window,
    op_window_fields,
)

OPS = 11  # 1.1 to 1.8: the fields by position (op_time added in 1.2, pid in 1.4)
OPS_BY_NAME = 21  # 1.9: the fields by name


def encode_ops(w: OpWindow) -> list[Any]:
    return [OPS_BY_NAME, op_window_fields(w)]


def decode_ops(code: int, f: list[Any]) -> OpWindow:
    if code == OPS_BY_NAME:
        if len(f) != 1:
            raise ValueError("an op window by name is one mapping")
        return decode_op_window(f[0])
    return decode_op_window(_by_name(f))


def _by_name(f: list[Any]) -> dict[str, Any]:
    """A code-11 window's fields by name. Its gpu and op_time are rows too (op_time's last
    two fields from agents that sent them)."""
    if len(f) < OP_WINDOW_FIELDS.index("gpu") + 1:
        raise ValueError(f"an op window of {len(f)} fields")
    fields = dict(zip(OP_WINDOW_FIELDS, f))
    fields["gpu"] = _row(fields["gpu"], GPU_FIELDS)
    fields["op_time"] = _row(fields.get("op_time"), OP_TIME_FIELDS)
    return fields


def _row(row: Any, names: tuple[str, ...]) -> dict[str, Any] | None:
    if row is None:
        return None
    if not isinstance(row, list):
        raise ValueError("an op window's gpu or op_time is not a row")
    return dict(zip(names, row))
