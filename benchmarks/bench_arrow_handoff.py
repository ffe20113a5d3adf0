"""Handing numpy buffers to polars as Arrow arrays: the package's path (pyarrow) vs nanoarrow.

Builds, from 1 M rows, an Int64 column with a validity bitmap and a String column of binary views
into a 64 MiB byte buffer (the shapes the ET decoder produces), 20 times, and prints the best
time, the import time of the Arrow library (numpy and polars already imported) and peak RSS.
Each mode runs in its own process:

  package    charllm_trace.et._arrow (pyarrow since issue 12; run it with PYTHONPATH set to a
             checkout of an older commit to measure the ctypes code it replaced)
  pyarrow    pa.Array.from_buffers + pl.Series
  nanoarrow  na.c_array_from_buffers + pl.Series: the Int64 column only. A string-view array
             built from buffers crashes nanoarrow 0.9 when exported (SIGSEGV; see docs/native.md),
             so that mode cannot build the String column.

Usage::

    python benchmarks/bench_arrow_handoff.py [--modes package,pyarrow,nanoarrow]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

N = 1_000_000


def child(mode: str) -> dict:
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(0)
    data = np.frombuffer(rng.integers(97, 122, (64 << 20) + 16, dtype=np.uint8).tobytes(), np.uint8)
    starts = rng.integers(0, (64 << 20) - 64, N).astype(np.int64)
    lengths = rng.integers(0, 40, N).astype(np.int64)
    values = np.arange(N, dtype=np.int64)
    present = rng.random(N) > 0.1
    t0 = time.perf_counter()
    if mode == "package":
        from charllm_trace.et import _arrow
    elif mode == "pyarrow":
        import pyarrow as pa
    else:
        import nanoarrow as na
    import_s = time.perf_counter() - t0
    try:
        from charllm_trace.et.oracle import views_numpy
    except ImportError:  # a checkout from before issue 12's split: the same function, then private
        from charllm_trace.et._arrow import _views_numpy as views_numpy  # noqa: PLC2701

    views = views_numpy(data, starts, lengths)
    valid = np.packbits(present, bitorder="little")
    nulls = int(N - present.sum())
    best = float("inf")
    for _ in range(20):
        t = time.perf_counter()
        if mode == "package":
            a = _arrow.primitive_column("x", values, present)
            b = _arrow.view_column(views, data, "s")
        elif mode == "pyarrow":
            a = pl.Series(
                "x", pa.Array.from_buffers(pa.int64(), N, [pa.py_buffer(valid), pa.py_buffer(values)], nulls)
            )
            b = pl.Series(
                "s",
                pa.Array.from_buffers(pa.string_view(), N, [None, pa.py_buffer(views), pa.py_buffer(data)]),
            )
        else:
            a = pl.Series("x", na.c_array_from_buffers(na.int64(), N, [valid, values], null_count=nulls))
            b = None
        best = min(best, time.perf_counter() - t)
    assert a.null_count() == nulls
    if b is not None:
        assert b[5] == data[starts[5] : starts[5] + lengths[5]].tobytes().decode()
    return {
        "mode": mode,
        "import_ms": import_s * 1e3,
        "build_ms": best * 1e3,
        "columns": "int64+string" if b is not None else "int64",
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="package,pyarrow,nanoarrow")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    for _ in range(args.repeat):
        for mode in args.modes.split(","):
            load = os.getloadavg()[0]
            r = subprocess.run([sys.executable, __file__, "--child", mode], capture_output=True, text=True)
            if r.returncode:
                print(f"{mode}: failed ({r.returncode}) {r.stderr[-300:]}")
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
            print(
                f"{mode:<10} import {d['import_ms']:6.1f} ms  build ({d['columns']}, 1 M rows) "
                f"{d['build_ms']:7.3f} ms  peak RSS {d['peak_rss_mib']:5.0f} MiB  load {load:.2f}"
            )


if __name__ == "__main__":
    main()
