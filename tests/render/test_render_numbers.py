"""Numbers are never cut at 80 columns, names are shortened from the middle (and kept apart),
notes wrap with an indent, and ``info`` keeps each date whole (issue 27 item 5)."""

from __future__ import annotations

import re

from click.testing import CliRunner
from rich.console import Console

from charllm_trace.cli.app import main
from charllm_trace.render.fit import shorten_middle, shorten_names
from charllm_trace.render.table_style import dim_line, plain_table
from tests.conftest import shared_trace

CUT_NUMBER = re.compile(r"(?:^|\s)[\d.,]+…")  # a number (a whole cell of digits) cut short


def _analyze(path: str, *extra: str) -> str:
    r = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["analyze", path, "--no-cache", *extra])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_shorten_keeps_both_ends_and_tells_names_apart() -> None:
    assert shorten_middle("at::native::(anonymous namespace)::CatArrayBatchedCopy<int>", 20) == (
        "at::nativ…dCopy<int>"
    )
    a = "void at::native::elementwise_kernel<128, 4, BinaryFunctor<float, MulFunctor<float>>>(int)"
    b = "void at::native::elementwise_kernel<128, 4, BinaryFunctor<float, AddFunctor<float>>>(int)"
    sa, sb, sa2 = shorten_names([a, b, a], 30)
    assert sa == sa2 and sa != sb and len(sa) <= 30 and len(sb) <= 30 and "Mul" in sa and "Add" in sb
    assert shorten_names(["short", "names"], 30) == ["short", "names"]


def test_a_table_too_wide_splits_rather_than_cut_a_number() -> None:
    t = plain_table("launch", [("rank", "right"), ("kernel", "left")] + [(f"p{i}", "right") for i in range(9)],
                    shrink=1)  # fmt: skip
    nums = [f"{10976543.25 + i:.2f}" for i in range(9)]
    t.add_row("0", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", *nums)
    con = Console(width=80, record=True)
    con.print(t)
    text = con.export_text()
    assert all(n in text for n in nums) and not CUT_NUMBER.search(text)
    assert max(len(line) for line in text.splitlines()) <= 80


def test_notes_wrap_with_an_indent() -> None:
    con = Console(width=80, record=True)
    dim_line(con, "  note: " + "a long note about what was ignored and why " * 4)
    lines = con.export_text().splitlines()
    assert len(lines) > 1 and lines[0].startswith("  note: ")
    assert all(line.startswith("    ") and len(line) <= 80 for line in lines[1:])


def test_resnet_launch_table_numbers_whole_at_80_columns() -> None:
    """The launch table's p99 column printed ``11247…`` at 80 columns (issue 27)."""
    out = _analyze(str(shared_trace("param/resnet_kineto.json.gz")))
    assert not CUT_NUMBER.search(out)
    assert "112470.2" in out  # the rank's p99 launch delay (µs), whole
    body = [line for line in out.splitlines() if not line.startswith("  ")]
    assert max(len(line) for line in body) <= 80


def test_h100_kernel_names_stay_apart() -> None:
    """Two distinct kernels both read ``at::native::(anonymous names…``; now every shown name of
    the top-kernel table is distinct and every number whole."""
    out = _analyze(str(shared_trace("tracelens/h100_qwen1.5-0.5b_inference.json.gz")))
    assert not CUT_NUMBER.search(out)
    top = out[out.index("Top kernels by GPU time") :].splitlines()[3:13]
    names = [line[6:36] for line in top]
    assert len(set(names)) == len(names), names
    notes = out.splitlines()
    for prev, line in zip(notes, notes[1:], strict=False):
        if prev.startswith("  note: ") and line and not line.startswith("  "):
            raise AssertionError(f"a note's continuation at column 0: {line!r}")


def test_info_keeps_each_date_whole() -> None:
    r = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["info", str(shared_trace("hta/trace_filter_2ranks"))])
    assert r.exit_code == 0, r.output
    assert "from        2023-04-28 23:51:38.079292 UTC" in r.stdout
    assert "to          2023-04-28 23:51:39.318077 UTC" in r.stdout
