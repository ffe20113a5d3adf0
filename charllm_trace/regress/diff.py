"""``diff A B``: two runs side by side, for "what changed between these two configs?".

Sections (each a polars frame: key columns, then for every value ``<v>_a``,
``<v>_b``, ``<v>_delta`` = b - a and ``<v>_rel`` = (b - a) / |a|):

- **collectives**, per collective type: calls, total time, median bus bandwidth
  (from the bandwidth analysis; sums over all ranks);
- **operators**, per operator (GPU kernels / memcpys by name, or CPU operators by
  name for CPU-only traces, with their exclusive time so nested ops do not count twice):
  calls and total time, sums over all ranks, the top ``top`` by time in either run;
- **steps**, per ``ProfilerStep`` (and ``all``): step time (slowest rank),
  exposed communication (mean over ranks), overlap % (pooled over ranks), mean and
  peak power (when telemetry exists). Steps are matched by number; when the two
  runs share no step number they are matched in order, and a note says so;
- **energy**, per phase, when both runs have energy.

Pure functions of runs and their analyses: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.core.model import Run
from charllm_trace.regress.records import fields_dict

NS_PER_MS = 1e6


@dataclass
class DiffSection:
    name: str
    title: str
    keys: list[str]
    values: list[str]
    units: dict[str, str]
    frame: pl.DataFrame
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **fields_dict(self, ("name", "title", "keys", "values", "units", "note")),
            "rows": self.frame.to_dicts(),
        }


@dataclass
class RunDiff:
    sections: list[DiffSection]
    notes: list[str] = field(default_factory=list)

    def section(self, name: str) -> DiffSection | None:
        return next((s for s in self.sections if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"sections": [s.to_dict() for s in self.sections], "notes": list(self.notes)}


def side_by_side(
    a: pl.DataFrame | None, b: pl.DataFrame | None, keys: Sequence[str], values: Sequence[str]
) -> pl.DataFrame:
    """Full outer join of two frames on ``keys``, with ``_a``, ``_b``, ``_delta`` and ``_rel`` per value."""
    keys = list(keys)

    def prep(df: pl.DataFrame | None, suffix: str) -> pl.DataFrame:
        if df is None:
            df = pl.DataFrame(schema={**{k: pl.String for k in keys}, **{v: pl.Float64 for v in values}})
        return df.select(
            [pl.col(k).cast(pl.String) for k in keys]
            + [pl.col(v).cast(pl.Float64).alias(f"{v}{suffix}") for v in values]
        )

    j = prep(a, "_a").join(prep(b, "_b"), on=keys, how="full", coalesce=True, nulls_equal=True)
    exprs = []
    for v in values:
        d = pl.col(f"{v}_b") - pl.col(f"{v}_a")
        exprs.append(d.alias(f"{v}_delta"))
        exprs.append(
            pl.when(pl.col(f"{v}_a") != 0).then(d / pl.col(f"{v}_a").abs()).otherwise(None).alias(f"{v}_rel")
        )
    j = j.with_columns(exprs)
    cols = keys + [f"{v}_{s}" for v in values for s in ("a", "b", "delta", "rel")]
    return j.select(cols)


# ---------------------------------------------------------------------------
# Per-section aggregates of one run
# ---------------------------------------------------------------------------


def collective_totals(an: RunAnalysis) -> pl.DataFrame | None:
    if an.bandwidth is None:
        return None
    return (
        an.bandwidth.collectives.group_by("coll_type")
        .agg(
            pl.len().alias("calls"),
            (pl.col("dur_ns").sum() / NS_PER_MS).alias("time"),
            pl.col("busbw_gbps").filter(pl.col("busbw_gbps").is_finite()).median().alias("busbw_median"),
        )
        .with_columns(pl.col("coll_type").fill_null("unknown"))
    )


def operator_totals(run: Run) -> pl.DataFrame:
    """Calls and time per operator over all ranks: GPU activity by name, else CPU operators by
    name with their exclusive time (``self_ns``: a nested op's time is not counted twice)."""
    frames = [t.nodes.select("name", "kind", "on_gpu", "dur_ns", "self_ns") for t in run]
    if not frames:
        return pl.DataFrame(
            schema={"where": pl.String, "name": pl.String, "calls": pl.Int64, "time": pl.Float64}
        )
    nodes = pl.concat(frames)
    gpu = nodes.filter(pl.col("on_gpu") & pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    if gpu.height:
        sel, where = gpu, "gpu"
    else:
        cpu = nodes.filter(~pl.col("on_gpu") & (pl.col("kind") == "cpu_op"))
        sel, where = cpu.with_columns(pl.col("self_ns").alias("dur_ns")), "cpu"
    return (
        sel.filter(pl.col("dur_ns").is_not_null())
        .group_by("name")
        .agg(pl.len().alias("calls"), (pl.col("dur_ns").sum() / NS_PER_MS).alias("time"))
        .with_columns(pl.lit(where).alias("where"))
    )


def step_totals(an: RunAnalysis) -> pl.DataFrame | None:
    if an.overlap is None:
        return None
    ov = an.overlap.per_rank.group_by("step").agg(
        (pl.col("span_ns").max() / NS_PER_MS).alias("step_time"),
        (pl.col("exposed_comm_ns").mean() / NS_PER_MS).alias("exposed_comm"),
        pl.when(pl.col("comm_ns").sum() > 0)
        .then(100.0 * pl.col("overlap_ns").sum() / pl.col("comm_ns").sum())
        .otherwise(None)
        .alias("overlap"),
    )
    if an.power is not None and an.power.per_step.height:
        pw = an.power.per_step.group_by("step").agg(
            pl.col("avg_w").mean().alias("mean_power"), pl.col("peak_w").max().alias("peak_power")
        )
        ov = ov.join(pw, on="step", how="left", nulls_equal=True)
    else:
        ov = ov.with_columns(
            pl.lit(None, pl.Float64).alias("mean_power"), pl.lit(None, pl.Float64).alias("peak_power")
        )
    return ov


def energy_totals(an: RunAnalysis) -> pl.DataFrame | None:
    if an.energy is None:
        return None
    return (
        an.energy.group("phase")
        .group_by("key")
        .agg(pl.col("energy_j").sum().alias("energy"))
        .rename({"key": "phase"})
        .with_columns(pl.col("phase").fill_null("none"))
    )


def _align_steps(a: pl.DataFrame, b: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, str | None]:
    """Step keys as strings; match by order when the runs share no step number."""
    sa = set(a["step"].drop_nulls().to_list())
    sb = set(b["step"].drop_nulls().to_list())
    note = None

    def label(df: pl.DataFrame, mapping: dict[int, str] | None) -> pl.DataFrame:
        col = pl.col("step")
        if mapping is None:
            e = col.cast(pl.String)
        else:
            e = col.replace_strict(mapping, default=None, return_dtype=pl.String)
        return df.with_columns(pl.when(col.is_null()).then(pl.lit("all")).otherwise(e).alias("step"))

    if sa and sb and not (sa & sb):
        oa, ob = sorted(sa), sorted(sb)
        n = min(len(oa), len(ob))
        ma = {s: f"{s}|{ob[i]}" if i < n else f"{s}|-" for i, s in enumerate(oa)}
        mb = {s: f"{oa[i]}|{s}" if i < n else f"-|{s}" for i, s in enumerate(ob)}
        note = (
            "the runs share no ProfilerStep number; steps matched in order (A step|B step): "
            f"A {oa[0]}..{oa[-1]}, B {ob[0]}..{ob[-1]}"
        )
        return label(a, ma), label(b, mb), note
    return label(a, None), label(b, None), note


def _step_order(df: pl.DataFrame) -> pl.DataFrame:
    first = pl.col("step").str.split("|").list.first()
    return (
        df.with_columns(
            (pl.col("step") == "all").alias("_all"), first.cast(pl.Int64, strict=False).alias("_n")
        )
        .sort(["_all", "_n"], nulls_last=True)
        .drop("_all", "_n")
    )


def diff_runs(run_a: Run, an_a: RunAnalysis, run_b: Run, an_b: RunAnalysis, *, top: int = 15) -> RunDiff:
    """Two runs side by side. ``top`` limits the operators section (by time in either run)."""
    sections: list[DiffSection] = []
    notes: list[str] = []

    ca, cb = collective_totals(an_a), collective_totals(an_b)
    if ca is not None or cb is not None:
        vals = ["calls", "time", "busbw_median"]
        f = side_by_side(ca, cb, ["coll_type"], vals).sort("coll_type")
        sections.append(
            DiffSection(
                "collectives",
                "per collective type (all ranks)",
                ["coll_type"],
                vals,
                {"calls": "count", "time": "ms", "busbw_median": "GB/s"},
                f,
                note=None if ca is not None and cb is not None else "bandwidth analysis missing in one run",
            )
        )
    else:
        notes.append(
            "no collectives in either run: " + (an_a.skipped.get("bandwidth") or "bandwidth skipped")
        )

    oa, ob = operator_totals(run_a), operator_totals(run_b)
    vals = ["calls", "time"]
    f = side_by_side(oa, ob, ["where", "name"], vals)
    n_all = f.height
    f = (
        f.with_columns(
            pl.max_horizontal(pl.col("time_a").fill_null(0), pl.col("time_b").fill_null(0)).alias("_t")
        )
        .sort("_t", descending=True)
        .head(top)
        .drop("_t")
    )
    sections.append(
        DiffSection(
            "operators",
            "per operator (all ranks; CPU ops: exclusive time)",
            ["where", "name"],
            vals,
            {"calls": "count", "time": "ms"},
            f,
            note=f"top {f.height} of {n_all} operators by time in either run" if n_all > f.height else None,
        )
    )

    sa, sb = step_totals(an_a), step_totals(an_b)
    if sa is not None and sb is not None:
        sa2, sb2, note = _align_steps(sa, sb)
        vals = ["step_time", "exposed_comm", "overlap", "mean_power", "peak_power"]
        f = _step_order(side_by_side(sa2, sb2, ["step"], vals))
        # drop power columns when neither run has telemetry
        if f["mean_power_a"].null_count() == f.height and f["mean_power_b"].null_count() == f.height:
            vals = vals[:3]
            f = f.select([c for c in f.columns if not c.startswith(("mean_power", "peak_power"))])
        sections.append(
            DiffSection(
                "steps",
                "per step (time: slowest rank; exposed: mean over ranks; overlap: pooled)",
                ["step"],
                vals,
                {
                    "step_time": "ms",
                    "exposed_comm": "ms",
                    "overlap": "%",
                    "mean_power": "W",
                    "peak_power": "W",
                },
                f,
                note=note,
            )
        )
    else:
        missing = [n for n, an in (("A", an_a), ("B", an_b)) if an.overlap is None]
        notes.append(f"no per-step comparison: overlap analysis skipped in {' and '.join(missing)}")

    ea, eb = energy_totals(an_a), energy_totals(an_b)
    if ea is not None and eb is not None:
        f = side_by_side(ea, eb, ["phase"], ["energy"]).sort("phase")
        sections.append(
            DiffSection("energy", "energy per phase (all ranks)", ["phase"], ["energy"], {"energy": "J"}, f)
        )
    elif ea is not None or eb is not None:
        notes.append("energy only in one run (the other has no telemetry)")
    return RunDiff(sections=sections, notes=notes)
