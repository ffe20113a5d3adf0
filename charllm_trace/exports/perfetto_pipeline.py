"""The pipeline track of a rank in the Perfetto export (``exports/perfetto.py``): per step, the
stage's warm-up, steady and cool-down phases as slices, and inside them a ``bubble`` slice for
every gap of the pipeline's window not covered by one of the stage's labelled microbatches (the
microbatches themselves are the trace's own slices on their thread). Drawn as duration events
(``"ph": "B"`` / ``"E"``) so that the complete events stay exactly the trace's nodes. Drawing
only: every time comes from :class:`charllm_trace.analysis.pipeline_results.PipelineResult`.

The bubble slices are the gaps between labels; communication nested inside a label is part of
the stage's bubble figure (``pipeline_stages.bubble_ns``) but is not drawn as a gap."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.pipeline_results import PipelineResult

#: Name of the pipeline track of a rank (its thread name in the file).
PIPELINE_TRACK = "pipeline (rank {rank}, stage {stage})"


def _phases(st: pl.DataFrame) -> pl.DataFrame:
    """(start, end, name, depth 0) of each phase of each step (recognised schedules only)."""
    a, b, c = (
        pl.col("start_ns"),
        pl.col("start_ns") + pl.col("warmup_ns"),
        pl.col("end_ns") - pl.col("cooldown_ns"),
    )
    parts = [
        st.select(s0.alias("s"), s1.alias("e"), pl.lit(name).alias("name"), pl.col("step"))
        for s0, s1, name in ((a, b, "warm-up"), (b, c, "steady"), (c, pl.col("end_ns"), "cool-down"))
    ]
    return (
        pl.concat(parts)
        .filter(pl.col("s").is_not_null() & (pl.col("e") > pl.col("s")))
        .with_columns(depth=pl.lit(0))
    )


def _bubbles(mb: pl.DataFrame, st: pl.DataFrame) -> pl.DataFrame:
    """(start, end, "bubble", depth 1): the window's gaps between the stage's microbatches."""
    win = st.select("step", pl.col("start_ns").alias("_w0"), pl.col("end_ns").alias("_w1"))
    m = mb.join(win, on="step").sort("step", "start_ns")
    m = m.with_columns(_prev=pl.col("end_ns").cum_max().shift(1).over("step"))
    inner = m.select(pl.coalesce("_prev", "_w0").alias("s"), pl.col("start_ns").alias("e"), "step")
    tail = m.group_by("step").agg(pl.col("end_ns").max().alias("s"), pl.col("_w1").first().alias("e"))
    gaps = pl.concat([inner, tail.select("s", "e", "step")])
    return gaps.filter(pl.col("e") > pl.col("s")).with_columns(name=pl.lit("bubble"), depth=pl.lit(1))


def pipeline_lines(pipe: PipelineResult, rank: int, pid: int, tid: int, origin: int, us: object) -> pl.Series:
    """The B/E event lines of ``rank``'s pipeline track (empty when the rank has no microbatch).
    ``us``: the exporter's ns -> exact microseconds text expression builder."""
    st = pipe.stages.filter(pl.col("rank") == rank)
    mb = pipe.microbatches.filter((pl.col("rank") == rank) & pl.col("step").is_not_null())
    if st.height == 0:
        return pl.Series("line", [], dtype=pl.String)
    ev = pl.concat([_phases(st), _bubbles(mb, st)], how="diagonal_relaxed")
    head = pl.concat_str([pl.lit('{"name":"'), pl.col("name"), pl.lit('","cat":"pipeline","ph":"')])
    tail = pl.lit(f'","pid":{pid},"tid":{tid},"ts":')
    args = pl.concat_str([pl.lit(',"args":{"step":'), pl.col("step").cast(pl.String), pl.lit("}}")])
    b = ev.select(
        pl.col("s").alias("t"), pl.lit(1).alias("o"), pl.col("depth").alias("k"),
        pl.concat_str([head, pl.lit("B"), tail, us(pl.col("s") - origin), args]).alias("line"),  # type: ignore[operator]
    )  # fmt: skip
    e = ev.select(
        pl.col("e").alias("t"), pl.lit(0).alias("o"), (-pl.col("depth")).alias("k"),
        pl.concat_str([head, pl.lit("E"), tail, us(pl.col("e") - origin), pl.lit("}")]).alias("line"),  # type: ignore[operator]
    )  # fmt: skip
    # at one time: ends first (children before parents), then begins (parents before children)
    return pl.concat([b, e]).sort("t", "o", "k")["line"]
