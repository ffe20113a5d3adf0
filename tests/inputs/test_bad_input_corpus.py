"""The bad-input corpus (issue 15): every case gives exit code 2 and one line ``error: ...``
naming the file and the problem, with no hang, no crash, no traceback and no wrong success.

Cases are built in tests/bad_inputs/cases.py and run through the CLI by
tests/bad_inputs/runner.py: each input's cases in a fresh process whose address space is capped
(3 GiB, so a memory bomb fails its case instead of taking the machine down) with a time limit per
case (a blocking read of a FIFO is a hang, recorded as such)."""

from __future__ import annotations

import pytest

from tests.bad_inputs.cases import CASES


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 150
    assert len({c.name for c in CASES}) == len(CASES)  # names are unique


# run_all() is one module fixture for every case: on one xdist worker, not repeated on each
pytestmark = pytest.mark.xdist_group("bad_input_corpus")


@pytest.fixture(scope="module")
def results(spawn) -> dict[str, dict]:
    from tests.bad_inputs.runner import run_all

    return {r["name"]: r for r in run_all()}


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_bad_input_gives_one_line_and_exit_2(results: dict[str, dict], name: str) -> None:
    r = results[name]
    lines = r.get("stderr") or []
    assert r["exit"] == 2, (r["exit"], lines, r.get("exception"), r.get("stdout_tail"))
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in lines[0]
    for needle in r["needles"]:
        assert needle in lines[0], (needle, lines[0])
