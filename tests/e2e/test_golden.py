"""Golden outputs (issue 23, item 7): every fixture and shared trace gives, at this code, the outputs
recorded in tests/golden/data by ``python -m tests.golden.record`` (analyze JSON plain and per step,
info JSON, the report's outline and normalised bytes, the converted ETs, the Perfetto and ASTRA-sim
exports). A difference fails with a readable diff; an intended change is recorded again with
``python -m tests.golden.record --only CASE`` and explained in its commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import record
from tests.golden.cases import ALL_CASES, FIXTURE_CASES, FIXTURES, SHARED_CASES, Case


def _check(case: Case, tmp_path: Path) -> None:
    out = record.run_case(case, tmp_path / "work", tmp_path / "cache")
    problems = record.compare(out, record.DATA / case.name)
    assert not problems, f"{case.name}: outputs differ from tests/golden/data/{case.name}\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize("name", [c.name for c in FIXTURE_CASES])
def test_golden_fixture(name: str, tmp_path: Path) -> None:
    _check(next(c for c in FIXTURE_CASES if c.name == name), tmp_path)


@pytest.mark.parametrize("name", [c.name for c in SHARED_CASES])
def test_golden_shared(name: str, shared, tmp_path: Path) -> None:
    case = next(c for c in SHARED_CASES if c.name == name)
    shared.path(case.path)  # skips when ../shared is absent
    _check(case, tmp_path)


def test_every_fixture_run_and_shared_trace_has_a_golden() -> None:
    """A fixture run added without a golden case fails here (the shared traces' list is checked
    against PROVENANCE.md's files by name)."""
    runs = {p.parent for p in FIXTURES.rglob("manifest.json")}
    covered = {c.source() for c in FIXTURE_CASES}
    assert runs == covered, f"fixture runs without a golden case: {sorted(map(str, runs - covered))}"
    for c in ALL_CASES:
        assert (record.DATA / c.name / "golden.json").is_file(), f"no golden recorded for {c.name}"


def test_a_change_is_reported_with_a_diff(tmp_path: Path) -> None:
    """The comparison is not vacuous: an altered analyze figure and an altered file hash are both
    reported, with the changed lines shown; a float that moved only in its last bits (polars' sums
    under another thread count) is not a change."""
    golden = tmp_path / "g"
    out = record.Outputs(
        golden={"case": "x", "files": {"ets/rank-0.et": "aa"}},
        stored={"analyze": b'{"frames": {"overlap": [{"rank": 0, "overlap_pct": 14.31}]}}'},
    )
    record.write(out, golden)
    assert record.compare(out, golden) == []
    out.stored["analyze"] = b'{"frames": {"overlap": [{"rank": 0, "overlap_pct": 14.310000000000002}]}}'
    assert record.compare(out, golden) == []
    out.golden["files"]["ets/rank-0.et"] = "bb"
    out.stored["analyze"] = b'{"frames": {"overlap": [{"rank": 0, "overlap_pct": 14.3100001}]}}'
    problems = record.compare(out, golden)
    assert len(problems) == 2
    assert '- "ets/rank-0.et": "aa"' in problems[0] and '+ "ets/rank-0.et": "bb"' in problems[0]
    assert '-    "overlap_pct": 14.31' in problems[1] and '+    "overlap_pct": 14.3100001' in problems[1]
    out.stored["analyze"] = b'{"frames": {"overlap": [{"overlap_pct": 14.31, "rank": 0}]}}'
    assert record.compare(out, golden)[1:], "a change of key order is a change of the output"
