"""``compare --label`` values that parse as KEY=VALUE but are no usable value: one line, exit 2,
never an internal error or a layout of more ranks than memory holds (cli/compare.py, the sweep's
labels, analysis/parallel.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from tests.conftest import FIXTURES

GLOO = str(FIXTURES / "cpu-2rank-gloo")


@pytest.mark.parametrize(
    ("label", "why"),
    [
        ("tp=²", "whole numbers ≥ 1"),  # str.isdigit() is true, int() refuses it
        ("dp=٣", "whole numbers ≥ 1"),  # an Arabic-Indic digit: not the layout's syntax
        ("tp=0", "whole numbers ≥ 1"),
        ("2:pp=99999999999999999999999", "past the largest job read (1,048,576 ranks)"),
        ("tp=1024", None),  # with dp=1025 below: a world of 1,049,600 ranks
        ("gbs=99999999999999999999999", "global_batch is a whole number"),  # past Int64
        ("seq=³", "seq_len is a whole number"),
    ],
)
def test_malformed_label_values_are_one_line(label: str, why: str | None) -> None:
    args = ["compare", GLOO, GLOO, "--json", "--no-cache", "--label", label]
    if why is None:
        args += ["--label", "dp=1025"]
        why = "a layout of 1,049,600 ranks"
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --label") and r.output.count("\n") == 1, r.output
    assert why in r.output, r.output


def test_parallel_option_bounded_too() -> None:
    for value, why in (
        ("tp=99999999999999999999999", "past the largest job read"),
        ("tp=²", "must be an integer"),
    ):
        r = CliRunner().invoke(main, ["analyze", GLOO, "--no-cache", "--parallel", value])
        assert r.exit_code == 2 and r.output.count("\n") == 1 and why in r.output, r.output


def test_large_but_possible_layout_label_still_works() -> None:
    r = CliRunner().invoke(main, ["compare", GLOO, GLOO, "--json", "--no-cache", "--label", "2:tp=2048"])
    assert r.exit_code == 0, r.output


def test_a_free_label_past_int64_is_a_float_column() -> None:
    """``--label x=99999999999999999999 --label x=1`` (issue 28: an Int128 column, exit 3): the
    values are numbers beyond int64, so the column is Float64, each value as given."""
    import json

    args = ["compare", GLOO, GLOO, "--json", "--no-cache", "--label", "x=99999999999999999999"]
    r = CliRunner().invoke(main, [*args, "--label", "x=1"])
    assert r.exit_code == 0, r.output
    assert [row["x"] for row in json.loads(r.stdout)["rows"]] == [1e20, 1.0]
