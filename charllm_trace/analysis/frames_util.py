"""``frame``: a polars frame with exactly the columns of a result schema (used by every analysis;
re-exported by ``analysis.results``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl


def frame(rows: Any, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """Build a frame with exactly ``schema`` from a dict of columns or a frame."""
    if isinstance(rows, pl.DataFrame):
        df = rows
    else:
        df = pl.DataFrame(rows) if rows else pl.DataFrame()
    exprs = []
    for name, dtype in schema.items():
        if name in df.columns:
            exprs.append(pl.col(name).cast(dtype))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    if df.width == 0:
        return pl.DataFrame(schema=dict(schema))
    return df.select(exprs)
