"""What the FLOP/s and MFU analysis adds to ``analyze`` (issue 13 item 3: at most 20 %).

Loads one Kineto profile (no cache) and times, ``--repeat`` times in this process:

- ``load``: ``charllm_trace.load`` (the Kineto reader, which now keeps the shapes of FLOP ops);
- ``analyze``: ``analyze_run`` with the ``analyze`` command's defaults (critical path on), which
  includes the FLOP/s analysis when this checkout has it;
- ``flops``: ``analysis.flops.run_flops`` alone on the same classified frames.

Run it with ``PYTHONPATH`` set to another checkout (one without ``analysis/flops.py``) to time
that checkout's ``load`` and ``analyze`` for comparison. Usage::

    python benchmarks/bench_flops.py PROFILE.json [--repeat 3] [--per-step]

A large profile with shapes: repeat the TraceLens H100 profile (``bench_analyze.make_trace`` with
``source=../shared/traces/tracelens/h100_qwen1.5-0.5b_inference.json.gz``).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("CHARLLM_TRACE_CACHE", "0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-step", action="store_true")
    ap.add_argument(
        "--alternate-shapes",
        action="store_true",
        help="time the load twice per rep: with the reader keeping the shapes of FLOP ops, and without",
    )
    args = ap.parse_args()
    import charllm_trace as ct
    from charllm_trace.analysis import AnalyzeOptions, analyze_run

    try:
        from charllm_trace.analysis.flops import run_flops
    except ImportError:
        run_flops = None  # type: ignore[assignment]
    opts = AnalyzeOptions(per_step=args.per_step)
    if args.alternate_shapes:
        _alternate(args.profile, args.repeat)
        return
    for i in range(args.repeat):
        t, c = time.perf_counter(), time.process_time()
        run = ct.load(args.profile, cache=False)
        t_load, c_load = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        res = analyze_run(run, opts)
        t_an, c_an = time.perf_counter() - t, time.process_time() - c
        line = (
            f"rep {i}: nodes {sum(tr.nodes.height for tr in run):,} load {t_load:.3f} s ({c_load:.3f} CPU) "
            f"analyze {t_an:.3f} s ({c_an:.3f} CPU)"
        )
        if run_flops is not None:
            t, c = time.perf_counter(), time.process_time()
            fl, _ = run_flops(
                dict(run.traces), res.classified, per_step=args.per_step, simulated=False, skipped={}
            )
            t_fl, c_fl = time.perf_counter() - t, time.process_time() - c
            n = 0 if fl is None else int(fl.total().filter(fl.total()["op_class"] == "all")["n_ops"].sum())
            line += (
                f" flops {t_fl:.3f} s ({c_fl:.3f} CPU; {100 * t_fl / (t_load + t_an):.1f} % of load+analyze wall, "
                f"{100 * c_fl / (c_load + c_an):.1f} % CPU; {n:,} ops counted)"
            )
        print(line, flush=True)


def _alternate(profile: str, repeat: int) -> None:
    """Load time with and without the shape rows (the reader's ``_shape_rows`` made empty), alternating."""
    import numpy as np

    import charllm_trace as ct
    from charllm_trace.converters import kineto_columns

    keep = kineto_columns.Columns._shape_rows
    for i in range(repeat):
        for label, fn in (("shapes kept", keep), ("no shapes", lambda self, n, c: np.zeros(0, np.int64))):
            kineto_columns.Columns._shape_rows = fn  # type: ignore[method-assign]
            t, c = time.perf_counter(), time.process_time()
            ct.load(profile, cache=False)
            print(
                f"rep {i}: load ({label}) {time.perf_counter() - t:.3f} s wall, {time.process_time() - c:.3f} s CPU",
                flush=True,
            )
    kineto_columns.Columns._shape_rows = keep  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
