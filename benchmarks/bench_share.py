"""Speed of the sharing commands on >= 1,000,000 events (issue 6).

- ``export perfetto`` and ``report`` on a Run made by repeating a real converted trace
  (``param/resnet_kineto.json.gz``) with shifted times until it has >= 1M nodes;
- ``sanitize`` on a Kineto profile made by repeating the same real profile's events
  until it has >= 1M events.

Each measurement runs in a fresh process (peak RSS is that process's maximum).

    python benchmarks/bench_share.py            # prints a Markdown table
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, installed or not
SHARED = Path(os.environ.get("CHARLLM_SHARED", ROOT.parent / "shared")) / "traces"
SRC = SHARED / "param" / "resnet_kineto.json.gz"
TARGET = 1_000_000


def _big_run():
    import polars as pl

    from charllm_trace.core.model import Run, Trace
    from charllm_trace.inputs import loader

    base = loader.load(SRC)
    (tr,) = list(base)
    n = tr.nodes
    span = int((n["start_ns"] + n["dur_ns"]).max() - n["start_ns"].min()) + 1_000_000
    idmax = int(n["id"].max()) + 1
    reps = -(-TARGET // n.height)
    parts = []
    for k in range(reps):
        shift_id = pl.col("id") + k * idmax
        parts.append(
            n.with_columns(
                shift_id.alias("id"),
                (pl.col("start_ns") + k * span).alias("start_ns"),
                (pl.col("parent") + k * idmax).alias("parent"),
                (pl.col("launch_id") + k * idmax).alias("launch_id"),
            )
        )
    nodes = pl.concat(parts)
    return Run({0: Trace(nodes=nodes, meta=tr.meta)}, source=str(SRC)), nodes.height


def _child(what: str, out: str) -> None:
    t0 = time.perf_counter()
    if what == "perfetto":
        from charllm_trace.exports.perfetto import write_chrome_trace

        run, n = _big_run()
        t1 = time.perf_counter()
        write_chrome_trace(run, out)
    elif what == "report":
        from charllm_trace.analysis import AnalyzeOptions, analyze_run
        from charllm_trace.render.report import render_report, report_data

        run, n = _big_run()
        t1 = time.perf_counter()
        an = analyze_run(run, AnalyzeOptions(per_step=True))
        t2 = time.perf_counter()
        Path(out).write_text(render_report(report_data(run, an)), encoding="utf-8")
        print(json.dumps({"analyze_s": t2 - t1}), file=sys.stderr)
    else:
        from charllm_trace.sanitize import sanitize_run

        src = Path(out).parent / "sanitize.in.json.gz"
        n = json.loads((Path(out).parent / "sanitize.n").read_text())
        t1 = time.perf_counter()
        sanitize_run(src, out)
    t_end = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB
    print(
        json.dumps(
            {
                "events": n,
                "prep_s": t1 - t0,
                "s": t_end - t1,
                "rss_mib": rss,
                "out_bytes": os.path.getsize(out),
            }
        )
    )


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
        return
    with tempfile.TemporaryDirectory() as d:
        # the big Kineto profile for sanitize
        doc = json.loads(gzip.decompress(SRC.read_bytes()))
        ev = doc["traceEvents"]
        reps = -(-TARGET // len(ev))
        doc["traceEvents"] = ev * reps
        src = Path(d, "sanitize.in.json.gz")
        src.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        Path(d, "sanitize.n").write_text(json.dumps(len(ev) * reps))
        del doc, ev
        rows = []
        for what, out in (("perfetto", "t.json"), ("report", "r.html"), ("sanitize", "sanitize.json.gz")):
            p = subprocess.run(
                [sys.executable, __file__, "--child", what, str(Path(d, out))],
                capture_output=True,
                text=True,
            )
            if p.returncode:
                sys.exit(f"{what} failed:\n{p.stderr[-3000:]}")
            r = json.loads(p.stdout.strip().splitlines()[-1])
            extra = p.stderr.strip().splitlines()
            rows.append((what, r, extra[-1] if extra else ""))
    print("| command | events | time (s) | events/s | peak RSS (MiB) | output (MB) |")
    print("|---|---:|---:|---:|---:|---:|")
    for what, r, extra in rows:
        note = f" (of which analyses {json.loads(extra)['analyze_s']:.1f} s)" if extra.startswith("{") else ""
        print(
            f"| {what}{note} | {r['events']:,} | {r['s']:.1f} | {r['events'] / r['s']:,.0f} | "
            f"{r['rss_mib']:,.0f} | {r['out_bytes'] / 1e6:.3f} |"
        )


if __name__ == "__main__":
    main()
