"""``compare RUN RUN RUN ...``: a configuration sweep in one table, one row per run.

Pure functions of the runs' analyses (:class:`~charllm_trace.analysis.results.RunAnalysis`, with
per-step rows): no I/O. Every column is declared once in :data:`COLUMNS` (name, header, unit,
which direction is better, group); each figure is computed in one function below. A new metric
is one :class:`Col` entry and one line in :func:`run_row`.

Definitions (docs/analyses.md, "Comparing runs"):

- **step time**: per ``ProfilerStep``, the slowest rank's span of that step (``diff``'s
  ``step_totals``: the overlap analysis' per-step ``span_ns``); the mean over steps, steps cut by
  the trace's end left out (``analysis.step_cuts``; a note counts them) as in every step mean;
- **throughput**: steps/s = 1 / step time; tokens/s = tokens per step × steps/s (tokens per step
  from the run's configuration, null when unknown);
- **overlap %**: pooled over ranks, whole trace: 100 · Σ overlap / Σ communication;
- **exposed communication per step**: per step the mean over ranks, then the mean over steps;
- **busbw**: time-weighted over the collective instances of a dimension (tp/cp/dp/pp/ep), of a
  message-size bucket, or all: Σ(busbw × duration) / Σ duration over the instances with a busbw,
  i.e. Σ(bytes × bus factor) / Σ duration (null when no collective there has a size);
- **TFLOP/s**: when the analysis has a FLOP/s result (``flops``): Σ FLOP / Σ kernel time over
  the ranks' whole-trace rows of every op class (achieved per GPU while its FLOP kernels run);
  null otherwise;
- **power**: per GPU (each (rank, device) of the power analysis, whole telemetry window): average
  = mean of the devices' time-weighted averages, peak = the highest sample of any device;
- **energy per step**: per step Σ over devices of avg power × step window (∫P dt over the
  window), the mean over steps; per token: energy per step / tokens per step;
- **throttled %**: Σ throttled time / Σ telemetry window over the devices × 100.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from charllm_trace.analysis.dims import busbw_weighted
from charllm_trace.analysis.results import CONFIG_SCHEMA, RunAnalysis
from charllm_trace.analysis.runconfig import tokens_per_step
from charllm_trace.regress.diff import step_totals
from charllm_trace.regress.dim_columns import dim_column_specs, dim_figures
from charllm_trace.regress.records import fields_dict

LOWER, HIGHER = "lower", "higher"
#: a row's notes on its configuration (one string: rows hold plain values), not a column
NOTES = "_notes"
#: how many steps the trace's end cut, left out of the row's step means (a note, not a column)
CUT = "_cut_steps"
DIMS = ("tp", "cp", "dp", "pp", "ep")


@dataclass(frozen=True)
class Col:
    """One column of the comparison: ``better`` is ``"lower"``, ``"higher"`` or None (not ranked)."""

    name: str
    title: str
    unit: str = ""
    better: str | None = None
    group: str = "config"
    digits: int = 2

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self, ("name", "title", "unit", "better", "group"))


#: The configuration columns (from ``RunAnalysis.config``), in table order.
CONFIG_COLUMNS: tuple[Col, ...] = (
    Col("model", "model"),
    Col("device", "device"),
    Col("world_size", "world"),
    Col("nodes", "nodes"),
    Col("gpus", "gpus"),
    *(Col(d, d) for d in ("tp", "cp", "pp", "dp", "ep")),
    Col("micro_batch", "mbs"),
    Col("global_batch", "gbs"),
    Col("seq_len", "seq"),
    Col("tokens_per_step", "tok/step"),
    Col("cpus_per_rank", "cores/rank"),
    Col("run_id", "run id"),
)
#: configuration columns that are not in the analysis' configuration (collect --cpus: the manifest)
RUN_SCHEMA = {**CONFIG_SCHEMA, "cpus_per_rank": pl.Int64}

#: The metric columns and the direction in which each is better: the one table of directions.
METRIC_COLUMNS: tuple[Col, ...] = (
    Col("step_time_ms", "step ms", "ms", LOWER, "speed", 3),
    Col("steps_per_s", "steps/s", "1/s", HIGHER, "speed", 3),
    Col("tokens_per_s", "tokens/s", "1/s", HIGHER, "speed", 0),
    Col("tflops", "TFLOP/s", "TFLOP/s", HIGHER, "speed", 1),
    Col("overlap_pct", "overlap %", "%", HIGHER, "comm", 1),
    Col("exposed_comm_ms", "exposed ms/step", "ms", LOWER, "comm", 3),
    Col("busbw_gbps", "busbw all", "GB/s", HIGHER, "busbw", 2),
    *(Col(f"busbw_{d}_gbps", f"busbw {d}", "GB/s", HIGHER, "busbw", 2) for d in DIMS),
    *(Col(n, t, u, b, "by dimension", k) for n, t, u, b, k in dim_column_specs()),
    Col("avg_power_w", "avg W", "W", LOWER, "power", 1),
    Col("peak_power_w", "peak W", "W", LOWER, "power", 1),
    Col("energy_per_step_j", "J/step", "J", LOWER, "power", 2),
    Col("energy_per_token_j", "J/token", "J", LOWER, "power", 4),
    Col("throttled_pct", "throttled %", "%", LOWER, "power", 1),
    Col("iter_ms", "iteration ms", "ms", LOWER, "cpu", 3),  # regress.cpu_sweep
    Col("gpu_idle_ms", "GPU idle ms/step", "ms", LOWER, "cpu", 3),
    Col("cpu_wait_ms", "CPU wait ms/step", "ms", LOWER, "cpu", 3),
    Col("idle_wait_ms", "wait in idle ms/step", "ms", LOWER, "cpu", 3),
)

#: Short label keys for configuration columns (``--label gbs=512`` sets ``global_batch``).
LABEL_ALIASES = {"mbs": "micro_batch", "gbs": "global_batch", "seq": "seq_len", "world": "world_size",
                 "cores": "cpus_per_rank"}  # fmt: skip

BUCKET_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def bucket_column(bucket: str) -> Col:
    """The column of the busbw of one message-size bucket (e.g. ``1MiB-4MiB``)."""
    return Col(f"busbw_{bucket}_gbps", f"busbw {bucket}", "GB/s", HIGHER, "busbw by size", 2)


def bucket_low(bucket: str) -> int:
    """The lower bound in bytes of a bucket label (``1MiB-4MiB`` -> 1048576), for ordering."""
    head = bucket.split("-", 1)[0]
    digits = "".join(c for c in head if c.isdigit())
    unit = head[len(digits) :]
    return int(digits or 0) * BUCKET_UNITS.get(unit, 1)


# ---------------------------------------------------------------------------
# One run's figures (each computed once, here)
# ---------------------------------------------------------------------------


def _mean(values: list[Any]) -> float | None:
    vs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(vs) / len(vs) if vs else None


def _cut_steps(an: RunAnalysis) -> list[int]:
    """The steps cut by the trace's end on any rank (``analysis.step_cuts``)."""
    if an.overlap is None:
        return []
    pr = an.overlap.per_rank
    return pr.filter(pl.col("step").is_not_null() & pl.col("cut").fill_null(False))["step"].unique().to_list()


def step_figures(an: RunAnalysis) -> dict[str, Any]:
    """Step time, exposed communication per step (ms), overlap % (whole trace) and the step count."""
    st = step_totals(an)
    out: dict[str, Any] = {"step_time_ms": None, "exposed_comm_ms": None, "overlap_pct": None, "n_steps": 0}
    if st is None:
        return out
    steps = st.filter(pl.col("step").is_not_null() & pl.col("step_time").is_not_null())
    cut = _cut_steps(an)
    if cut and steps.filter(~pl.col("step").is_in(cut)).height:  # whole steps only (step_cuts)
        steps = steps.filter(~pl.col("step").is_in(cut))
        out[CUT] = len(cut)
    out["n_steps"] = steps.height
    out["step_time_ms"] = _mean(steps["step_time"].to_list())
    out["exposed_comm_ms"] = _mean(steps["exposed_comm"].to_list())
    whole = st.filter(pl.col("step").is_null())
    out["overlap_pct"] = whole["overlap"][0] if whole.height else None
    return out


def busbw_by(an: RunAnalysis, key: str | None) -> dict[Any, float | None]:
    """Time-weighted busbw (GB/s) of the collective instances grouped by ``key`` (``dim``,
    ``size_bucket``; None: all in one, under the key None): Σ(busbw × duration) / Σ duration over
    the instances with a busbw (a size and a bus factor), i.e. Σ(bytes × factor) / Σ duration."""
    if an.bandwidth is None or an.bandwidth.collectives.height == 0:
        return {}
    agg = busbw_weighted(an.bandwidth.collectives, [] if key is None else [key])
    return dict(
        zip(
            [None] * agg.height if key is None else agg[key].to_list(),
            agg["busbw_gbps"].to_list(),
            strict=True,
        )
    )


def achieved_tflops(an: RunAnalysis) -> float | None:
    """Achieved TFLOP/s per GPU when the run's analysis has a FLOP/s result (``RunAnalysis.flops``,
    issue 13 item 3: ``per_step`` rows per rank, step and op class): over the whole-trace rows of
    every op class (step null, ``op_class`` "all") of all ranks, Σ FLOP / Σ time of the kernels
    that ran them. Null without that result or without counted FLOPs."""
    df = getattr(getattr(an, "flops", None), "per_step", None)
    if not isinstance(df, pl.DataFrame) or not {"step", "op_class", "flop", "kernel_ns"} <= set(df.columns):
        return None
    w = df.filter(
        pl.col("step").is_null()
        & (pl.col("op_class") == "all")
        & pl.col("flop").is_not_null()
        & (pl.col("kernel_ns") > 0)
    )
    if w.height == 0:
        return None
    return float(w["flop"].sum()) / float(w["kernel_ns"].sum()) / 1e3  # FLOP/ns = 1e9 FLOP/s


def power_figures(an: RunAnalysis) -> dict[str, Any]:
    """Average and peak power per GPU, energy per step, throttled % (see the module's docstring)."""
    out: dict[str, Any] = {
        "avg_power_w": None,
        "peak_power_w": None,
        "energy_per_step_j": None,
        "throttled_pct": None,
    }
    if an.power is None or an.power.per_step.height == 0:
        return out
    ps = an.power.per_step.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("_win"))
    whole = ps.filter(pl.col("step").is_null())
    out["avg_power_w"] = _mean(whole["avg_w"].to_list())
    out["peak_power_w"] = whole["peak_w"].max()
    win = whole.filter(pl.col("throttled_ns").is_not_null())["_win"].sum()
    if win:
        out["throttled_pct"] = 100.0 * whole["throttled_ns"].sum() / win
    steps = (
        ps.filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            (pl.col("avg_w") * pl.col("_win") / 1e9).sum().alias("j"),
            pl.col("avg_w").is_null().any().alias("_u"),
        )
        .filter(~pl.col("_u"))
    )
    cut = _cut_steps(an)
    if cut and steps.filter(~pl.col("step").is_in(cut)).height:
        steps = steps.filter(~pl.col("step").is_in(cut))
    out["energy_per_step_j"] = _mean(steps["j"].to_list())
    return out


def run_row(an: RunAnalysis) -> dict[str, Any]:
    """Every figure of one run: configuration and metrics (null where unknown)."""
    cfg = an.config.table.row(0, named=True) if an.config is not None and an.config.table.height else {}
    row: dict[str, Any] = {c.name: cfg.get(c.name) for c in CONFIG_COLUMNS}
    row[NOTES] = "; ".join(an.config.notes) if an.config is not None and an.config.notes else None
    row.update(step_figures(an))
    t = row["step_time_ms"]
    row["steps_per_s"] = 1e3 / t if t else None
    row["tflops"] = achieved_tflops(an)
    row["busbw_gbps"] = busbw_by(an, None).get(None)
    dims = busbw_by(an, "dim")
    for d in DIMS:
        row[f"busbw_{d}_gbps"] = dims.get(d)
    row.update(dim_figures(an))
    row.update(power_figures(an))
    per_token(row)
    for b, v in busbw_by(an, "size_bucket").items():
        if b is not None:
            row[bucket_column(b).name] = v
    return row


def per_token(row: dict[str, Any]) -> None:
    """Tokens/s and energy per token of ``row`` from its tokens per step (in place)."""
    tok, s, e = row["tokens_per_step"], row["steps_per_s"], row["energy_per_step_j"]
    row["tokens_per_s"] = tok * s if tok is not None and s is not None else None
    row["energy_per_token_j"] = e / tok if e is not None and tok else None


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------


@dataclass
class Sweep:
    """The comparison: ``table`` (one row per run, columns in ``columns`` order) and notes."""

    table: pl.DataFrame
    columns: list[Col]
    notes: list[str] = field(default_factory=list)

    def column(self, name: str) -> Col | None:
        return next((c for c in self.columns if c.name == name), None)

    def best(self) -> dict[str, list[int]]:
        """Per ranked column, the rows holding its best value (ties all; none when all null)."""
        out: dict[str, list[int]] = {}
        for c in self.columns:
            if c.better is None:
                continue
            vals = self.table[c.name].to_list()
            ok = [v for v in vals if v is not None and math.isfinite(v)]
            if not ok:
                continue
            target = min(ok) if c.better == LOWER else max(ok)
            out[c.name] = [i for i, v in enumerate(vals) if v == target]
        return out

    def sorted_by(self, name: str) -> Sweep:
        """Rows ordered by ``name``: best first for a ranked column, ascending otherwise; nulls last."""
        col = self.column(name)
        if col is None:
            raise KeyError(name)
        df = self.table.sort(name, descending=col.better == HIGHER, nulls_last=True, maintain_order=True)
        return replace(self, table=df)

    def to_dict(self) -> dict[str, Any]:
        runs = self.table["run"].to_list()
        """The table as a JSON document (render.contract.stamp adds its schema and version)."""
        return {
            "columns": [c.to_dict() for c in self.columns],
            "rows": self.table.to_dicts(),
            "best": {k: [runs[i] for i in v] for k, v in self.best().items()},
            "notes": list(self.notes),
        }


def _label_value(v: str) -> int | float | str:
    """A label's value as a number where it is one: an int within int64, else a float, else text."""
    try:
        i = int(v)
        if -(1 << 63) <= i < 1 << 63:
            return i
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def sweep(
    analyses: Sequence[RunAnalysis],
    names: Sequence[str],
    labels: Sequence[Mapping[str, str]] | None = None,
) -> Sweep:
    """The comparison of ``analyses`` (each analysed with per-step rows), named ``names`` (the
    ``run`` column; a ``run`` label renames one). ``labels[i]`` are run i's ``key=value`` labels: a
    configuration column's name sets that column (an integer where the column is one; ValueError
    otherwise), any other key adds a column (numbers where every run's value is one)."""
    return sweep_rows([run_row(an) for an in analyses], names, labels)


def sweep_rows(
    run_rows: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    labels: Sequence[Mapping[str, str]] | None = None,
) -> Sweep:
    """:func:`sweep` of the runs' rows (:func:`run_row`, e.g. cached)."""
    labels = list(labels) if labels is not None else [{} for _ in run_rows]
    if len(labels) != len(run_rows) or len(names) != len(run_rows):
        raise ValueError("one name and one set of labels per run")
    rows = [dict(r) for r in run_rows]
    metric_names = {c.name for c in METRIC_COLUMNS}
    extra: list[str] = []
    for i, (row, lab) in enumerate(zip(rows, labels, strict=True)):
        row["run"] = names[i]
        for k, v in lab.items():
            _put_label(row, LABEL_ALIASES.get(k, k), v, metric_names, extra)
    for row, lab in zip(rows, labels, strict=True):
        _tokens_from_labels(row, {LABEL_ALIASES.get(k, k) for k in lab})
    for k in extra:  # numbers where every run's value is one
        vals = [r.get(k) for r in rows]
        parsed = [_label_value(v) if v is not None else None for v in vals]
        if all(p is None or not isinstance(p, str) for p in parsed):
            for r, p in zip(rows, parsed, strict=True):
                r[k] = p
    notes = [note for row in rows for note in _row_notes(row)]
    buckets = sorted({k for r in rows for k in r if k.startswith("busbw_") and k not in metric_names},
                     key=lambda n: bucket_low(n[len("busbw_") : -len("_gbps")]))  # fmt: skip
    cols = [Col("run", "run", group="run")]
    cols += (
        list(CONFIG_COLUMNS)
        + [Col(k, k, group="label") for k in extra]
        + [Col("n_steps", "steps", group="speed")]
    )
    cols += list(METRIC_COLUMNS) + [bucket_column(n[len("busbw_") : -len("_gbps")]) for n in buckets]
    data = {c.name: [r.get(c.name) for r in rows] for c in cols}
    schema = {c.name: _dtype(c, data[c.name]) for c in cols}
    return Sweep(table=pl.DataFrame(data, schema=schema), columns=cols, notes=notes)


def _put_label(row: dict[str, Any], k: str, v: str, metric_names: set[str], extra: list[str]) -> None:
    """One ``k=v`` label on a run's row: the run's name, a configuration column (checked), or a
    new column (listed in ``extra``); a measured column is refused (ValueError)."""
    if k == "run":
        row["run"] = v
    elif k in RUN_SCHEMA:
        if RUN_SCHEMA[k] == pl.Int64:
            if not (v.strip().isascii() and v.strip().isdigit() and int(v) < 1 << 63):
                raise ValueError(f"label {k}={v}: {k} is a whole number (below 2**63)")
            row[k] = int(v)
        else:
            row[k] = v
    elif k in metric_names or k.startswith("busbw_") or k == "n_steps":
        raise ValueError(f"label {k}={v}: {k} is a measured column, not a label")
    else:
        row[k] = v
        if k not in extra:
            extra.append(k)


def _tokens_from_labels(row: dict[str, Any], keys: set[str]) -> None:
    """Where labels give the tokens (batch, sequence length or tokens per step), the per-token
    figures from them."""
    if not keys & {"tokens_per_step", "global_batch", "seq_len"}:
        return
    if "tokens_per_step" not in keys:
        row["tokens_per_step"] = tokens_per_step(row["global_batch"], row["seq_len"])
        if (row["tokens_per_step"] or 0) >= 1 << 63:
            raise ValueError(
                f"labels gbs={row['global_batch']} and seq={row['seq_len']}: tokens per step "
                "(their product) is 2**63 or more"
            )
    per_token(row)


def _row_notes(row: Mapping[str, Any]) -> list[str]:
    notes = []
    if row.get(NOTES):
        notes.append(f"{row['run']}: {row[NOTES]}")
    if row.get(CUT):
        notes.append(
            f"{row['run']}: {row[CUT]} step(s) cut by the trace's end left out of the step means "
            f"(step time over {row['n_steps']} whole step(s))"
        )
    if row["n_steps"] == 0:
        notes.append(
            f"{row['run']}: no per-step overlap rows: step time, throughput and per-step figures unknown"
        )
    return notes


def _dtype(c: Col, values: list[Any]) -> pl.DataType:
    if c.name in RUN_SCHEMA:
        return RUN_SCHEMA[c.name]
    if c.better is not None:
        return pl.Float64()
    if c.name == "n_steps":
        return pl.Int64()
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) for v in present):
        return pl.Int64()
    if present and all(isinstance(v, (int, float)) for v in present):
        return pl.Float64()
    return pl.String()
