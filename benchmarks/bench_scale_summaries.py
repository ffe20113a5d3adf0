"""What ``--scheduler`` moves to the driver per rank, and the driver's time to merge (docs/scale.md).

For each input (default: the shared 8-rank DLRM set and the 2-rank gloo fixture run) every rank
is read and analysed in this process exactly as a worker does (``engine/tasks.py``), and the
pickled size of what a worker sends back is measured: the rank's metadata (``RankMeta``), its
analysis part (``RankPart``: overlap rows, the collective table, energy/power rows, idle-time,
launch, breakdown and FLOP/s rows, notes) and
its ``info`` part; next to the rank's input bytes and its pickled node tables (what would travel
if the driver read the trace).

Then the driver's merge (``analysis/rank_parts.merge_parts``: concatenation, the bandwidth
summary and the matching of collectives across ranks, notes) is timed on N ranks built from the
real parts (rank numbers shifted per copy, process groups and sequence numbers kept, so every
collective matches across all N ranks, as in a job with one data-parallel group), best of
``--repeat``.

Usage::

    python benchmarks/bench_scale_summaries.py                      # N = 8, 1024, 10000
    python benchmarks/bench_scale_summaries.py --ranks 1024 --repeat 1
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from charllm_trace.analysis.api import dims_of  # noqa: E402
from charllm_trace.analysis.bandwidth import hosts_of  # noqa: E402
from charllm_trace.analysis.rank_parts import RankPart, merge_parts  # noqa: E402
from charllm_trace.analysis.results import AnalyzeOptions  # noqa: E402
from charllm_trace.engine.plan import plan  # noqa: E402
from charllm_trace.engine.tasks import Loaded, analyze_task, info_task, load_rank, rank_meta  # noqa: E402

SHARED = Path(os.environ.get("CHARLLM_SHARED", ROOT.parent / "shared")) / "traces"
DEFAULT_INPUTS = [
    SHARED / "param" / "dlrm_8ranks_v100",
    ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo",
]


def _size(obj: object) -> int:
    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def measure(path: Path, options: AnalyzeOptions) -> list[RankPart]:
    p = plan(str(path))
    loaded = [load_rank(s, cache=False) for s in p.specs]
    assert all(isinstance(x, Loaded) for x in loaded), loaded
    metas = [rank_meta(x) for x in loaded]
    dims = dims_of([m.groups for m in metas], p.manifest, options)
    hosts = hosts_of(p.manifest, {m.rank: m.hostname for m in metas})
    parts = []
    rows = []
    for spec, x, m in zip(p.specs, loaded, metas, strict=True):
        part = analyze_task(x, options, dims, hosts)
        parts.append(part)
        in_bytes = sum(Path(f).stat().st_size for f in spec.files.values())
        tables = _size((x.trace.nodes, x.trace.deps, x.trace.telemetry))
        rows.append(
            (
                x.rank,
                in_bytes,
                tables,
                _size(m),
                _size(part),
                _size(info_task(x)),
                part.parts["bandwidth"].coll.height,
            )
        )
    print(f"\n{path.name}: {len(rows)} ranks (bytes per rank, pickled)")
    print(
        f"{'rank':>4} {'input':>9} {'node tables':>12} {'meta':>6} {'analysis':>9} {'info':>6} {'collectives':>11}"
    )
    for r in rows:
        print(f"{r[0]:>4} {r[1]:>9,} {r[2]:>12,} {r[3]:>6,} {r[4]:>9,} {r[5]:>6,} {r[6]:>11,}")
    n = len(rows)
    mean = [sum(r[i] for r in rows) / n for i in range(1, 7)]
    print(
        f"mean {mean[0]:>9,.0f} {mean[1]:>12,.0f} {mean[2]:>6,.0f} {mean[3]:>9,.0f} {mean[4]:>6,.0f} {mean[5]:>11,.1f}"
        f"   -> to the driver {mean[2] + mean[3]:,.0f} B/rank for analyze, {mean[2] + mean[4]:,.0f} for info"
    )
    c = next(p.parts["bandwidth"].coll for p in parts if p.parts["bandwidth"].coll.height)
    big = pl.concat([c] * (10_000 // c.height + 1)).rechunk()
    per_row = (_size(big) - _size(c)) / (big.height - c.height)
    print(f"marginal size of a collective row (pickled, uncompressed): {per_row:,.1f} B")
    return parts


def replicate(parts: list[RankPart], n: int) -> list[RankPart]:
    """``n`` rank parts from the real ones: copy k shifts every rank number by k x len(parts)."""
    out = []
    width = len(parts)
    for k in range(-(-n // width)):
        for p in parts:
            if len(out) == n:
                break
            r = p.rank + k * width
            shift = pl.col("rank") + k * width
            ov, bw = p.parts.get("overlap"), p.parts["bandwidth"]
            per = {
                **p.parts,
                "bandwidth": dataclasses.replace(bw, coll=bw.coll.with_columns(shift)),
                "overlap": dataclasses.replace(
                    ov,
                    per_rank=ov.per_rank.with_columns(shift),
                    per_group=ov.per_group.with_columns(shift),
                    per_dim=ov.per_dim.with_columns(shift),
                )
                if ov is not None
                else None,
            }
            out.append(dataclasses.replace(p, rank=r, parts=per))
    return out


def time_merge(parts: list[RankPart], options: AnalyzeOptions, n: int, repeat: int) -> None:
    many = replicate(parts, n)
    best = float("inf")
    res = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = merge_parts(
            many, options, manifest={}, source="bench", graph_step=lambda s, n_, sim: (None, None)
        )
        best = min(best, time.perf_counter() - t0)
    assert res is not None and res.bandwidth is not None
    print(
        f"merge of {n:>6,} ranks: {best:7.3f} s  ({res.bandwidth.collectives.height:,} collective rows, "
        f"{res.bandwidth.matched.height:,} matched collectives, {res.overlap.per_rank.height:,} overlap rows)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", type=Path, default=DEFAULT_INPUTS)
    ap.add_argument("--ranks", default="8,1024,10000", help="rank counts for the merge timing")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    options = AnalyzeOptions(per_step=True, critical_path=False)
    first = None
    for path in a.inputs:
        parts = measure(path, options)
        first = first or parts
    print(f"\ndriver merge, parts of {a.inputs[0].name} replicated:")
    for n in (int(x) for x in a.ranks.split(",")):
        time_merge(first, options, n, a.repeat)


if __name__ == "__main__":
    main()
