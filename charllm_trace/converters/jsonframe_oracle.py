"""The numpy twin of the C JSON scanner (``_jsonframe.c``'s ``jf_scan``): the tests' oracle.

Used only when ``CHARLLM_TRACE_NATIVE=0`` (the tests compare the two scanners event by event on
random JSON cut at random points); the package never falls back to it on its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: events the numpy scanner handles at once (bounds its temporary arrays)
NP_BLOCK = 1 << 20


def scan(chunk: np.ndarray, state: Any, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same as :func:`charllm_trace.converters.jsonframe.scan`, in numpy (``state``: its
    ``State``, updated the same way)."""
    parts = [_scan_np(chunk[i : i + NP_BLOCK], state, base + i) for i in range(0, len(chunk), NP_BLOCK)]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int8)
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[j] for p in parts]) for j in range(3))  # type: ignore[return-value]


#: byte classes for the numpy scanner: 1 quote, 2 backslash, 3 open, 4 close, 5 comma, 6 colon
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[ord('"')] = 1
_CLASS[ord("\\")] = 2
_CLASS[[ord("{"), ord("[")]] = 3
_CLASS[[ord("}"), ord("]")]] = 4
_CLASS[ord(",")] = 5
_CLASS[ord(":")] = 6


def _scan_np(b: np.ndarray, state: Any, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numpy scanner: the same events as ``jf_scan`` (for valid JSON). Works on the few
    bytes that matter (quotes, backslashes, brackets, commas, colons) only."""
    n = len(b)
    depth0, in0, esc0 = (int(x) for x in state.a)
    cls = _CLASS[b]
    idx = np.flatnonzero(cls)
    k = cls[idx]
    if n == 0 or idx.size == 0:
        if n and in0 and esc0:
            state.a[2] = 0  # the carried backslash escaped this chunk's first byte
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int8)
    # backslash runs: a quote is escaped when an odd number of backslashes precede it
    isbs = k == 2
    bsl = idx[isbs]
    run_len = np.zeros(idx.size, dtype=np.int64)  # backslashes right before each element
    if bsl.size:
        new = np.ones(bsl.size, dtype=bool)
        new[1:] = np.diff(bsl) != 1
        first = np.maximum.accumulate(np.where(new, np.arange(bsl.size), 0))
        ending = np.arange(bsl.size) - first + 1  # run length ending at each backslash
        ending += (bsl[first] == 0) & (esc0 == 1)
        j = np.searchsorted(bsl, idx - 1)  # the backslash at idx - 1, if any
        jc = np.minimum(j, bsl.size - 1)
        hit = (j < bsl.size) & (bsl[jc] == idx - 1)
        run_len = np.where(hit, ending[jc], 0)
    run_len += (idx == 0) & (esc0 == 1)
    quote = (k == 1) & ((run_len & 1) == 0)
    qc = np.cumsum(quote, dtype=np.int64)
    in_before = ((in0 + qc - quote) & 1).astype(bool)
    outside = ~in_before & (k >= 3)
    delta = np.where(outside & (k == 3), 1, 0) - np.where(outside & (k == 4), 1, 0)
    d_after = depth0 + np.cumsum(delta)
    d_before = d_after - delta
    emit = (
        (quote & (d_before == 1))
        | ((delta == 1) & (d_before <= 1))
        | ((delta == -1) & (d_before <= 2))
        | (outside & (k == 5) & (d_before <= 2))
        | (outside & (k == 6) & (d_before == 1))
    )
    in_end = (in0 + int(qc[-1])) & 1
    esc_end = 0
    if in_end and b[-1] == 92:
        esc_end = int(ending[-1] & 1)  # the run of backslashes the chunk ends with
    state.a[0] = int(d_after[-1])
    state.a[1] = in_end
    state.a[2] = esc_end
    where = idx[emit]
    return where + base, b[where].copy(), np.clip(d_before[emit], -1, 3).astype(np.int8)
