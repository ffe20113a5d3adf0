"""The ET cache's table files: our memory-mapped layout vs Arrow IPC and Parquet through polars.

For one decoded ET (default: the 1 M-node ET that ``bench_et_load.py`` builds, pass it with
``--et``), each in a fresh process:

  store:  write the trace's three tables (nodes, deps, telemetry) in the format (seconds);
  open:   open them again, every byte checked (CRC-32) as the cache does (seconds);
  query:  then a first query: ``nodes.filter(dur_ns > 0).dur_ns.sum()`` and
          ``deps.filter(kind == "data").dep.sum()`` (seconds; RSS after it).

Formats:

  custom   ``et/_colcache.py``: Arrow buffers, 64-byte aligned, in one data file per table,
           shared buffers stored once, a sealed JSON description; memory-mapped on open;
  ipc      ``DataFrame.write_ipc(compression="uncompressed")``, ``pl.read_ipc`` (polars 2.1 has
           no memory-mapped IPC read: it reads the buffers into memory);
  ipc-pa   the same files opened with pyarrow (``pa.memory_map`` + ``ipc.open_file().read_all()``,
           zero-copy) and handed to polars (``pl.from_arrow``); pyarrow must be importable;
  parquet  ``DataFrame.write_parquet()`` (zstd), ``pl.read_parquet``.

Usage::

    python benchmarks/bench_et_cache.py --et big.et [--repeat 3] [--formats custom,ipc,parquet]

Prints per format the best store/open/query time, the RSS after the first query (VmRSS),
peak RSS, entry size, and the 1-minute load average before the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

TABLES = ("nodes", "deps", "telemetry")


def _rss_mib(field: str = "VmRSS") -> float:
    """Resident memory (MiB): ``VmRSS`` all of it, ``RssAnon`` the process's own memory, ``RssFile``
    pages of mapped files (the page cache: shared, and the kernel may drop them)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _crc_file(path: Path) -> int:
    import mmap

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return zlib.crc32(b"")
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            return zlib.crc32(mm)


def store(fmt: str, et: str, out: Path) -> dict:
    from charllm_trace.et.reader import read_et

    trace = read_et(et, cache=False)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for name in TABLES:
        df = getattr(trace, name)
        if fmt == "custom":
            from charllm_trace.et._colcache import write_frame

            write_frame(df, out / f"{name}.bin", out / f"{name}.json")
        elif fmt in ("ipc", "ipc-pa"):
            df.write_ipc(out / f"{name}.arrow", compression="uncompressed")
            (out / f"{name}.crc").write_text(str(_crc_file(out / f"{name}.arrow")))
        elif fmt == "parquet":
            df.write_parquet(out / f"{name}.parquet")
            (out / f"{name}.crc").write_text(str(_crc_file(out / f"{name}.parquet")))
    return {"store_s": time.perf_counter() - t0}


def open_and_query(fmt: str, out: Path) -> dict:
    import polars as pl

    t_imp = time.perf_counter()
    if fmt == "custom":
        from charllm_trace.et._colcache import read_frame
    elif fmt == "ipc-pa":
        import pyarrow  # noqa: F401
    import_s = time.perf_counter() - t_imp
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    tables = {}
    for name in TABLES:
        if fmt == "custom":
            tables[name] = read_frame(out / f"{name}.bin", out / f"{name}.json")
            continue
        ext = "parquet" if fmt == "parquet" else "arrow"
        path = out / f"{name}.{ext}"
        if _crc_file(path) != int((out / f"{name}.crc").read_text()):
            raise SystemExit(f"{path}: checksum mismatch")
        if fmt == "ipc":
            tables[name] = pl.read_ipc(path)
        elif fmt == "ipc-pa":
            import pyarrow as pa

            with pa.memory_map(str(path)) as src:
                tables[name] = pl.from_arrow(pa.ipc.open_file(src).read_all(), rechunk=False)
        else:
            tables[name] = pl.read_parquet(path)
    open_s = time.perf_counter() - t0
    rss_open = _rss_mib()
    t1 = time.perf_counter()
    a = tables["nodes"].filter(pl.col("dur_ns") > 0)["dur_ns"].sum()
    b = tables["deps"].filter(pl.col("kind") == "data")["dep"].sum()
    query_s = time.perf_counter() - t1
    return {
        "import_s": import_s,
        "open_s": open_s,
        "query_s": query_s,
        "rss_before_mib": rss0,
        "rss_open_mib": rss_open,
        "rss_query_mib": _rss_mib(),
        "anon_query_mib": _rss_mib("RssAnon"),
        "file_query_mib": _rss_mib("RssFile"),
        "peak_mib": _peak_mib(),
        "answer": [int(a or 0), int(b or 0)],
        "rows": [tables[n].height for n in TABLES],
    }


def _child(args: list[str]) -> None:
    what, fmt, a, b = args
    out = store(fmt, a, Path(b)) if what == "store" else open_and_query(fmt, Path(b))
    print(json.dumps(out))


def run_child(*args: str, env: dict) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env, check=False
    )
    if r.returncode != 0:
        raise SystemExit(f"{args} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--et", type=Path, help="the decoded ET (e.g. the 1 M-node ET of bench_et_load.py)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", default="custom,ipc,ipc-pa,parquet")
    ap.add_argument("--dir", type=Path, default=None, help="where the entries go (default: a temporary)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child)
        return
    if args.et is None or not args.et.is_file():
        raise SystemExit("--et: an ET file is needed (bench_et_load.py builds the 1 M-node one)")
    env = dict(os.environ, CHARLLM_TRACE_NO_CACHE="1")
    base = Path(tempfile.mkdtemp(prefix="charllm-bench-cache-", dir=args.dir))
    results = {}
    try:
        for fmt in args.formats.split(","):
            out = base / fmt
            stores, opens = [], []
            for _ in range(args.repeat):
                shutil.rmtree(out, ignore_errors=True)
                load = os.getloadavg()[0]
                stores.append({**run_child("store", fmt, str(args.et), str(out), env=env), "load": load})
            size = sum(f.stat().st_size for f in out.iterdir())
            for _ in range(args.repeat):
                load = os.getloadavg()[0]
                opens.append({**run_child("open", fmt, "-", str(out), env=env), "load": load})
            answers = {json.dumps(o["answer"]) for o in opens}
            results[fmt] = {"stores": stores, "opens": opens, "size": size, "answers": answers}
            best_o = min(opens, key=lambda o: o["open_s"] + o["query_s"])
            loads = [x["load"] for x in stores + opens]
            print(
                f"{fmt:<8} store {min(s['store_s'] for s in stores):6.2f} s  "
                f"open {best_o['open_s']:6.3f} s  query {best_o['query_s']:6.3f} s  "
                f"RSS open {best_o['rss_open_mib']:6.0f} MiB  after query {best_o['rss_query_mib']:6.0f} MiB "
                f"(anon {best_o['anon_query_mib']:5.0f} + file {best_o['file_query_mib']:5.0f})  "
                f"peak {best_o['peak_mib']:7.0f} MiB  entry {size / 1e6:8.1f} MB  "
                f"load {min(loads):.2f}-{max(loads):.2f}",
                flush=True,
            )
        if len({json.dumps(sorted(r["answers"])) for r in results.values()}) != 1:
            raise SystemExit("the formats answered the query differently")
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
