"""Issue 11 (job-wide views at scale): ``--ranks`` ranges and ``--sample``, ranks chosen before
their files are read, the many-rank fixture generator (benchmarks/make_many_ranks.py), the
per-dimension spread over ranks and the report's rank × step heatmaps."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.errors import UsageError
from charllm_trace.core.limits import choose_ranks, parse_ranks, parse_sample, sample_ranks

ROOT = Path(__file__).resolve().parents[2]
DLRM = "param/dlrm_8ranks_v100"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "make_many_ranks", ROOT / "benchmarks" / "make_many_ranks.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def run16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import shared_trace

    src = shared_trace(DLRM)
    return _generator().make(16, tmp_path_factory.mktemp("many") / "run16", source=src, seed=3)


@pytest.fixture(scope="module")
def analysed16(run16: Path):
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.inputs import loader

    run = loader.load(run16, cache=False)
    opts = AnalyzeOptions(per_step=True, parallel={"dp": 16}, critical_path=False)
    return run, analyze_run(run, opts)


# --- --ranks and --sample ----------------------------------------------------


def test_ranks_ranges_and_lists() -> None:
    assert parse_ranks("0-7,512,1016-1023") == [*range(8), 512, *range(1016, 1024)]
    with pytest.raises(UsageError, match="runs backwards"):
        parse_ranks("7-0")
    with pytest.raises(UsageError, match="expected a list"):
        parse_ranks("0-3,x")


def test_sample_is_even_deterministic_and_keeps_first_and_last() -> None:
    assert sample_ranks(list(range(1024)), 8) == [0, 146, 292, 438, 585, 731, 877, 1023]
    assert sample_ranks(list(range(8)), 3) == [0, 4, 7]
    assert sample_ranks([3, 9, 12], 5) == [3, 9, 12]  # N >= ranks present: all of them
    assert sample_ranks([5, 0, 2], 1) == [0]
    for n in (2, 7, 64, 100):
        got = sample_ranks(list(range(1000)), n)
        assert len(got) == n and got[0] == 0 and got[-1] == 999 and got == sorted(set(got))
    # with --ranks, the sample is taken over those ranks
    assert choose_ranks(list(range(16)), [*range(4), *range(12, 16)], 3) == [0, 12, 15]
    assert choose_ranks(list(range(4)), None, None) is None
    with pytest.raises(UsageError):
        parse_sample(0)


def test_only_the_chosen_ranks_are_read(run16: Path, tmp_path: Path) -> None:
    """A rank whose profile is broken past its first bytes is never converted unless chosen:
    ``--ranks``/``--sample`` choose before reading (the old code converted every rank, then
    selected, and failed on rank 9 here)."""
    import shutil

    d = tmp_path / "run"
    shutil.copytree(run16, d)
    good = gzip.decompress((d / "kineto_rank9.json.gz").read_bytes())
    (d / "kineto_rank9.json.gz").write_bytes(gzip.compress(good[: len(good) // 2]))  # truncated JSON
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-cache", "--ranks", "0-1,15", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert '"ranks": [\n    0,\n    1,\n    15\n  ]' in r.output or '"ranks": [0, 1, 15]' in r.output
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-cache", "--sample", "4", "--format", "json"])
    assert r.exit_code == 0, r.output  # ranks 0, 5, 10, 15
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-cache", "--ranks", "8-9"])
    assert r.exit_code == 2 and "kineto_rank9.json.gz" in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-cache", "--ranks", "0,16-17"])
    assert r.exit_code == 2 and "no rank [16, 17] here (ranks present: 0-15)" in r.output
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-cache", "--sample", "0"])
    assert (
        r.exit_code == 2 and r.output.strip() == "error: --sample 0: expected a number of ranks, at least 1"
    )


def test_sample_on_the_report(run16: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(run16), "--no-cache", "--sample", "3", "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text(encoding="utf-8")
    assert (
        "3 rank(s)" in page and "<title>rank 15 · step" in page and "<title>rank 8 · step" in page
    )  # ranks 0, 8, 15


# --- the generator -------------------------------------------------------------


def test_generated_run_is_one_consistent_job(analysed16) -> None:
    run, an = analysed16
    assert run.ranks == list(range(16))
    assert {t.meta.world_size for t in run.traces.values()} == {16}
    for r, t in run.traces.items():
        assert t.meta.rank == r
        assert [(g.name, g.ranks) for g in t.meta.process_groups] == [("0", tuple(range(16)))]
    bw = an.bandwidth
    assert bw is not None
    per_rank = bw.collectives.group_by("rank").len()
    assert per_rank["len"].unique().to_list() == [8]  # each rank: the 8 collectives of its source rank
    m = bw.matched
    assert m.height == 8 and m["n_ranks"].unique().to_list() == [16]  # every collective on all 16 ranks
    sg = bw.stragglers
    assert sg.height == 16 and sg["n_matched"].unique().to_list() == [8]
    assert sg["n_last"].sum() == 8 and sg["max_late_ns"].max() > 0  # one rank last per collective


# --- per-dimension spread over ranks -------------------------------------------------------


def test_rank_spread_is_the_distribution_over_ranks(analysed16) -> None:
    _, an = analysed16
    ov = an.overlap
    sp = ov.rank_spread
    assert sp.select("dim", "measure").rows() == [
        ("all", "exposed_comm_ns"),
        ("all", "step_ns"),
        ("dp", "exposed_comm_ns"),
    ]
    whole = ov.per_rank.filter(pl.col("step").is_null()).sort("rank")
    steps = (
        ov.per_rank.filter(pl.col("step").is_not_null())
        .group_by("rank")
        .agg(pl.col("span_ns").mean())
        .sort("rank")
    )
    for (dim, measure), (ranks, vals) in {
        ("all", "exposed_comm_ns"): (whole["rank"], whole["exposed_comm_ns"]),
        ("all", "step_ns"): (steps["rank"], steps["span_ns"]),
    }.items():
        row = sp.filter((pl.col("dim") == dim) & (pl.col("measure") == measure)).row(0, named=True)
        v = vals.cast(pl.Float64).to_numpy()
        assert row["n_ranks"] == 16
        assert row["min_ns"] == v.min() and row["max_ns"] == v.max()
        assert row["median_ns"] == pytest.approx(np.median(v)) and row["p90_ns"] == pytest.approx(
            np.quantile(v, 0.9)
        )
        assert row["worst_rank"] == int(ranks[int(np.argmax(v))])
    # one data-parallel group spans the job: its exposed communication is the rank's
    dp = sp.filter(pl.col("dim") == "dp").row(0, named=True)
    al = sp.filter((pl.col("dim") == "all") & (pl.col("measure") == "exposed_comm_ns")).row(0, named=True)
    assert {k: dp[k] for k in ("min_ns", "max_ns", "worst_rank")} == {
        k: al[k] for k in ("min_ns", "max_ns", "worst_rank")
    }
    assert an.frames()["rank_spread"].equals(sp)


def test_rank_spread_round_trips_and_prints(analysed16, tmp_path: Path) -> None:
    from rich.console import Console

    from charllm_trace.render.tables import render_analysis
    from charllm_trace.store.results import load_results, save_results

    _, an = analysed16
    f = save_results(an, tmp_path / "r.zip")
    assert load_results(f).overlap.rank_spread.equals(an.overlap.rank_spread)
    con = Console(record=True, width=200)
    render_analysis(an, con)
    text = con.export_text()
    assert "Spread over ranks by dimension" in text
    worst = an.overlap.rank_spread.row(0, named=True)
    assert f"{worst['max_ns'] / 1e6:.3f}" in text


# --- the heatmap -----------------------------------------------------------------


def test_heatmap_bins_thousands_of_ranks() -> None:
    from charllm_trace.render.heatmap import heatmap

    rng = np.random.default_rng(1)
    v = rng.uniform(1e6, 2e6, (1024, 10))
    v[700, 3] = 9e6
    v[5, :] = np.nan
    svg = heatmap(v, list(range(1024)), list(range(10)), title="t", row_name="rank", col_name="step",
                  value_name="step time", scale=1e6, unit=" ms")  # fmt: skip
    assert svg.count('class="cell"') == 64 * 10 and len(svg) < 200_000
    assert "1,024 ranks in 64 rows of 16 consecutive ranks" in svg
    assert "ranks 688-703 · step 3 · largest step time 9.000 ms (rank 700, step 3)" in svg
    small = heatmap(v[:8, :2], list(range(8)), [10, 11], title="t", row_name="rank", col_name="step",
                    value_name="x", scale=1e6, unit=" ms")  # fmt: skip
    assert small.count('class="cell"') == 16 and "Binned" not in small
    assert small.count("<title>rank 5 · step 10: no value</title>") == 1  # a missing value is said, not 0


def _page_of(src: Path, tmp_path: Path, browser) -> tuple[str, object]:
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(src), "--no-cache", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text(encoding="utf-8"), browser(out, tmp_path / "r.png")


@pytest.mark.parametrize("which", ["dlrm", "collected"])
def test_rank_step_heatmaps_in_chromium(which: str, tmp_path: Path, browser) -> None:
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.inputs import loader
    from tests.conftest import shared_trace

    src = shared_trace(DLRM) if which == "dlrm" else ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo"
    an = analyze_run(loader.load(src, cache=False), AnalyzeOptions(per_step=True, critical_path=False))
    steps = an.overlap.per_rank.filter(pl.col("step").is_not_null())
    page, shown = _page_of(src, tmp_path, browser)
    assert shown.console_errors == [] and shown.page_errors == []
    assert "ranks-steps" in shown.page["sections"]
    maps = [f for f in shown.figures if f["kind"] == "heatmap"]
    assert [f["title"] for f in maps] == [
        "Step time per rank and step (ms)",
        "Exposed communication per rank and step (ms)",
    ]
    for f in maps:  # one cell per (rank, step) row of the overlap analysis, each drawn
        assert f["marks"] == f["drawn"] == steps["rank"].n_unique() * steps["step"].n_unique() == steps.height
    for r in steps.iter_rows(named=True):
        assert (
            f"<title>rank {r['rank']} · step {r['step']} · step time {r['span_ns'] / 1e6:,.3f} ms</title>"
            in page
        )
        assert (
            f"<title>rank {r['rank']} · step {r['step']} · exposed communication "
            f"{r['exposed_comm_ns'] / 1e6:,.3f} ms</title>" in page
        )
