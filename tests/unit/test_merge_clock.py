"""The merge's clock arithmetic on its own: what alignment a merged recording may claim from
its inputs' clock anchors and offsets given by hand, and how ``--offset`` flags are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertop.errors import UsageError
from infertop.model.events import Marker
from infertop.record.clock import STARTED, SYNCED, UNSYNCED, anchor_of
from infertop.record.merge import InputReport, accuracy_of, parse_offsets


def _input(path: str, bound_us: int | None, clock: str = "clock synchronised",
           given: bool = False) -> InputReport:  # fmt: skip
    return InputReport(path, "h", (1,), 0.0, clock, bound_us, None, offset_given=given)


def test_synchronised_clocks_claim_their_maxerrors_summed() -> None:
    us, line = accuracy_of([_input("/r/a.infertop", 12_000), _input("/r/b.infertop", 3_500)])
    assert us == 15_500 and "±15.5 ms" in line and "maxerror summed" in line


def test_one_unsynchronised_clock_makes_the_accuracy_unknown_and_says_whose() -> None:
    us, line = accuracy_of([
        _input("/r/a.infertop", 12_000), _input("/r/b.infertop", None, "clock not synchronised"),
    ])  # fmt: skip
    assert us is None and "accuracy unknown" in line
    assert "b.infertop: clock not synchronised" in line and "a.infertop" not in line


def test_an_offset_given_by_hand_claims_no_bound_but_reports_the_others() -> None:
    us, line = accuracy_of([
        _input("/r/a.infertop", 1_000), _input("/r/b.infertop", 2_000),
        _input("/r/c.infertop", 9_000, given=True),
    ])  # fmt: skip
    assert us is None and "c.infertop shifted by hand" in line
    assert "the other inputs, on their clocks: ±3.0 ms" in line
    # with one clocked input left there is no pair to bound
    us, line = accuracy_of([_input("/r/a.infertop", 1_000), _input("/r/c.infertop", 0, given=True)])
    assert us is None and "on their clocks" not in line


def test_offsets_name_an_input_by_path_or_by_the_same_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.infertop", tmp_path / "b.infertop"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    paths = [str(a), str(b)]
    assert parse_offsets([f"{b}=-0.35"], paths) == {1: -0.35}
    # another spelling of the same file (relative, through ..) is the same input
    other = tmp_path / "sub"
    other.mkdir()
    assert parse_offsets([f"{other}/../a.infertop=2"], paths) == {0: 2.0}
    # seconds as Python reads a float
    assert parse_offsets([f"{a}=1e-3"], paths) == {0: 0.001}


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("a.infertop", "is not FILE=SECONDS"),
        ("=3", "is not FILE=SECONDS"),
        ("a.infertop=soon", "is not FILE=SECONDS"),
        ("a.infertop=nan", "is not FILE=SECONDS"),
        ("a.infertop=1e9", "is not FILE=SECONDS"),  # a million seconds off is not a clock skew
        ("c.infertop=1", "is not one of the recordings merged"),
    ],
)
def test_bad_offsets_are_one_usage_error(tmp_path: Path, spec: str, needle: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_offsets([spec], [str(tmp_path / "a.infertop"), str(tmp_path / "b.infertop")])
    assert needle in str(err.value)


def test_the_clock_anchor_is_read_from_the_started_marker() -> None:
    synced = Marker(100.0, STARTED, {"host": "web1", "clock": SYNCED, "maxerror_us": "1500"})
    anchor = anchor_of([Marker(99.0, "other", {}), synced])
    assert anchor is not None and anchor.host == "web1" and anchor.t == 100.0
    assert anchor.bound_us == 1500
    loose = anchor_of([Marker(1.0, STARTED, {"host": "", "clock": UNSYNCED, "maxerror_us": "9"})])
    assert loose is not None and loose.host is None and loose.bound_us is None  # not trusted
    odd = anchor_of([Marker(1.0, STARTED, {"host": "h", "clock": "weird", "maxerror_us": "x"})])
    assert odd is not None and odd.state == "unknown" and odd.maxerror_us is None
    assert anchor_of([Marker(1.0, STARTED, {})]) is None  # an import: no host, no anchor
