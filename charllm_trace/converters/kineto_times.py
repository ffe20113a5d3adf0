"""Kineto ``ts`` / ``dur`` microseconds to integer nanoseconds, exactly from their JSON text.

A float64 cannot hold absolute Unix microseconds with three decimals: at 1.7e15 µs its spacing
is 0.25 µs, so ``1712195495519689.047`` read as a float is off by up to ±125 ns. The reader
therefore never makes a float of a time: the value is taken from the decimal text, multiplied by
1000 exactly and rounded to the nearest nanosecond, ties to even (more than three decimals are
rare; an exponent is allowed). The C decoder (``jd_us_to_ns`` in ``_jsondecode.c``) does the same
in C; this module is the msgspec reader's version and the tests' oracle.

The strictness is the float reader's (``kineto_profile.strict_us_to_ns``): a value that is
missing, not a JSON number (``true`` included), not below :data:`~.kineto_profile.MAX_US` in
magnitude, or (``dur``) negative is an ``InputError`` naming the first such event.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import msgspec
import numpy as np
import polars as pl

from charllm_trace.converters.kineto_profile import MAX_US, time_error

#: a plain number: sign, at most 16 integer digits (|value| < 9e15 needs 16), decimals
_PLAIN = r"^(-?)(\d{1,16})(?:\.(\d+))?$"
#: a byte no JSON text holds outside a string escape (raw control characters are invalid JSON)
_SEP = "\x1f"


def plain_us_to_ns(texts: pl.Series) -> pl.DataFrame:
    """Vectorised exact conversion of number texts: columns ``ns`` (Int64; null where the text
    is not a plain decimal number, ``-?digits[.digits]``, or its magnitude is not below MAX_US)
    and ``negative`` (a plain number below zero)."""
    g = texts.str.extract_groups(_PLAIN).struct.unnest()
    sign, ip, frac = (g.get_column(c) for c in g.columns)
    ip = ip.cast(pl.Int64)
    df = pl.DataFrame(
        {
            "neg": sign == "-",
            "ip": pl.Series(ip).set(ip >= int(MAX_US), None),  # out of range: the per-value path
            "frac": frac.fill_null(""),
            "t": texts,
        }
    )
    q = pl.col("ip") * 1000 + (pl.col("frac") + "000").str.slice(0, 3).cast(pl.Int64)
    r = (pl.col("frac") + "0000").str.slice(3, 1).cast(pl.Int64)
    sticky = pl.col("frac").str.slice(4).str.contains("[1-9]")
    up = (r > 5) | ((r == 5) & (sticky | (q % 2 == 1)))
    mag = q + up.cast(pl.Int64)
    return df.select(
        pl.when(pl.col("neg")).then(-mag).otherwise(mag).alias("ns"),
        (pl.col("neg").fill_null(False) & pl.col("t").str.contains("[1-9]")).alias("negative"),
    )


def _decoded(raw: Any) -> Any:
    """The JSON value ``raw`` (None when missing); a number past float64 (``1e999``) as its text."""
    try:
        return msgspec.json.decode(raw) if len(raw) else None
    except msgspec.ValidationError:
        return bytes(raw).decode(errors="replace")[:40]


def _one(raw: Any) -> tuple[Any, int | None, bool]:
    """One value the vectorised path did not take: (its decoded value, its exact ns or None
    when it is not a number of microseconds below MAX_US, whether it is negative)."""
    v = _decoded(raw)
    if type(v) not in (int, float):
        return v, None, False
    f = Fraction(bytes(raw).decode())
    if not abs(f) < int(MAX_US):
        return v, None, f < 0
    return v, round(f * 1000), f < 0


def strict_text_us_to_ns(
    path: str | os.PathLike[str], raws: Sequence[Any], key: str, name_of: Callable[[int], Any]
) -> np.ndarray:
    """The ``ts`` or ``dur`` values of complete events, given as their raw JSON texts
    (``msgspec.Raw``; empty when the field is missing), as exact int64 nanoseconds; ``InputError``
    naming the first event whose value is missing, not a number, not below MAX_US in magnitude,
    or (dur) negative."""
    n = len(raws)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    texts = pl.Series([_SEP.encode().join(raws).decode()]).str.split(_SEP).explode()
    out = plain_us_to_ns(texts)
    good = out.get_column("ns").is_not_null().to_numpy()
    ns = out.get_column("ns").fill_null(0).to_numpy().copy()
    negative = out.get_column("negative").to_numpy().copy()
    bad = np.zeros(n, dtype=bool)
    for i in np.flatnonzero(~good).tolist():
        _v, got, neg = _one(raws[i])
        negative[i] = neg
        if got is None:
            bad[i] = True
        else:
            ns[i] = got
    if key == "dur":
        bad |= negative
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise time_error(path, key, name_of(i), _decoded(raws[i]))
    return ns
