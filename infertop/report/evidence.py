"""A finding's evidence as people read it (the findings view, the text and markdown reports):
numbers with their units, shares as percentages. The JSON keeps the numbers as the rules made
them (``share: 0.666``, ``threshold: 0.25``); only these renderings change their form."""

from __future__ import annotations

from typing import Any

_BYTES = ("bytes", "reserved", "allocated", "total", "device_total", "median_bytes")


def _is_share(key: str, value: Any) -> bool:
    return "share" in key and isinstance(value, float) and 0 <= value <= 1.5


def evidence_value(key: str, value: Any, siblings: dict[str, Any] | None = None) -> str:
    """One value with its unit. A share is a percentage; so is the ``threshold`` it was judged
    against (a sibling key that is a share): ``share 66.6%, threshold 25.0%``, never
    ``threshold 0.25``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if (
        key == "threshold"
        and siblings
        and 0 <= value <= 1.5
        and any(_is_share(k, v) for k, v in siblings.items() if k != key)
    ):
        return f"{100 * value:.1f}%"
    if _is_share(key, value):
        return f"{100 * value:.1f}%"
    if key.endswith("_us"):
        return f"{value / 1000:,.2f} ms" if value >= 1000 else f"{value:,.1f} µs"
    if key.endswith("_bytes_per_s"):
        return f"{value / 2**20:,.2f} MiB/s" if abs(value) >= 2**20 else f"{value / 1024:,.1f} KiB/s"
    if key in _BYTES or key.endswith("_bytes"):
        if abs(value) >= 2**20:
            return f"{value / 2**20:,.1f} MiB"
        return f"{value:,} B" if isinstance(value, int) else f"{value:,.1f} B"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def evidence_lines(evidence: dict[str, Any], indent: str = "  ") -> list[str]:
    """The evidence as ``key: value`` lines, nested tables indented, numbers with units."""
    out: list[str] = []
    for key, value in evidence.items():
        if isinstance(value, dict):
            out.append(f"{indent}{key}:")
            out += evidence_lines(value, indent + "  ")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out.append(f"{indent}{key}:")
            for item in value[:8]:
                out.append(
                    indent + "  - "
                    + ", ".join(f"{k} {evidence_value(k, v, item)}" for k, v in item.items())
                )  # fmt: skip
        elif isinstance(value, list):
            out.append(f"{indent}{key}: " + ", ".join(evidence_value(key, v) for v in value[:10]))
        else:
            out.append(f"{indent}{key}: {evidence_value(key, value, evidence)}")
    return out


def evidence_summary(evidence: dict[str, Any]) -> str:
    """The evidence's plain values on one line (``share 66.6%, threshold 25.0%``), for a
    report's finding; tables and lists are left to the JSON and the findings view. Empty when
    the evidence is all tables."""
    return ", ".join(
        f"{key} {evidence_value(key, value, evidence)}"
        for key, value in evidence.items()
        if value is not None and not isinstance(value, (dict, list))
    )
