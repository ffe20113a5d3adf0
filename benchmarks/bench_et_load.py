"""Chakra ET loading speed: Chakra's own protolib loop vs charllm-trace's loader.

Builds a large ET (default >= 1,000,000 nodes) by repeating a real one (node ids
renumbered per copy, dependencies follow), then, each in a fresh subprocess so
that timings and peak memory do not mix:

  (a) protolib:  Chakra's ``protolib.openFileRd`` + ``decodeMessage`` per node
                 (what ``chakra_jsonizer`` does, without the JSON part);
  (b) cold:      ``charllm_trace.et.reader.read_et(path, cache=False)`` into polars tables;
  (b') cold+cache: the same with the cache on and empty (decodes, then writes the cache);
  (c) cached:    ``read_et(path)`` again: the cached tables.

Usage::

    python benchmarks/bench_et_load.py [--src ../shared/traces/chakra/feeder_tests_chakra.0.et]
                                       [--nodes 1000000] [--repeat 3] [--et big.et]

Runs of (a) and (b) alternate so that both see the same machine load. Prints the best
run of each mode: wall time, nodes/s and the ratio to (a), the least CPU time (user +
system, all threads) and its ratio, peak RSS, and the 1-minute load average before the
runs (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SRC = ROOT.parent / "shared" / "traces" / "chakra" / "feeder_tests_chakra.0.et"


def build_big_et(src: Path, dst: Path, min_nodes: int) -> int:
    """Write ``dst``: ``src``'s GlobalMetadata, then its nodes repeated until >= min_nodes."""
    from chakra.schema.protobuf import et_def_pb2 as pb
    from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage, openFileRd

    f = openFileRd(str(src))
    gm = pb.GlobalMetadata()
    decodeMessage(f, gm)
    nodes = []
    while True:
        n = pb.Node()
        if not decodeMessage(f, n):
            break
        nodes.append(n)
    f.close()
    stride = max(n.id for n in nodes) + 1
    copies = -(-min_nodes // len(nodes))
    with open(dst, "wb") as out:
        encodeMessage(out, gm)
        for k in range(copies):
            shift = k * stride
            for n in nodes:
                m = pb.Node()
                m.CopyFrom(n)
                m.id = n.id + shift
                del m.ctrl_deps[:]
                m.ctrl_deps.extend(d + shift for d in n.ctrl_deps)
                del m.data_deps[:]
                m.data_deps.extend(d + shift for d in n.data_deps)
                encodeMessage(out, m)
    return copies * len(nodes)


# --- the measured runs (each in its own process) ------------------------------------


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_seconds() -> float:
    """User + system CPU time of this process (all threads)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_protolib(path: str) -> dict:
    from chakra.schema.protobuf import et_def_pb2 as pb
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    c0 = _cpu_seconds()
    t0 = time.perf_counter()
    f = openFileRd(path)
    gm = pb.GlobalMetadata()
    decodeMessage(f, gm)
    node = pb.Node()
    count = 0
    while decodeMessage(f, node):
        count += 1
    f.close()
    return {"nodes": count, "seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0}


def run_ours(path: str, cache: bool) -> dict:
    t_import = time.perf_counter()
    from charllm_trace.et.reader import read_et

    c0 = _cpu_seconds()
    t0 = time.perf_counter()
    trace = read_et(path, cache=cache)
    n = trace.nodes.height
    return {
        "nodes": n,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": _cpu_seconds() - c0,
        "import_seconds": t0 - t_import,
        "dependencies": trace.deps.height,
    }


def _child(mode: str, path: str) -> None:
    if mode == "protolib":
        out = run_protolib(path)
    elif mode == "cold":
        out = run_ours(path, cache=False)
    else:
        out = run_ours(path, cache=True)
    out["peak_rss_mib"] = _peak_rss_mib()
    print(json.dumps(out))


def measure(mode: str, path: Path, env: dict) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC, help="a real Chakra ET to repeat")
    ap.add_argument("--nodes", type=int, default=1_000_000, help="at least this many nodes")
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode (the best is reported)")
    ap.add_argument("--et", type=Path, default=None, help="use this ET as it is instead of building one")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="charllm-bench-et-") as tmp:
        if args.et is not None:
            big = args.et
            n = None  # taken from the protolib run
            print(f"using {big}: {big.stat().st_size / 1e6:,.0f} MB")
        else:
            if not args.src.exists():
                raise SystemExit(f"{args.src} not found (the team's shared traces); pass --src")
            big = Path(tmp) / "big.et"
            t0 = time.perf_counter()
            n = build_big_et(args.src, big, args.nodes)
            print(
                f"built {big.name}: {n:,} nodes, {big.stat().st_size / 1e6:,.0f} MB "
                f"in {time.perf_counter() - t0:.1f} s"
            )
        env = dict(os.environ)
        env["CHARLLM_TRACE_CACHE_DIR"] = str(Path(tmp) / "cache")
        runs: dict[str, list[dict]] = {m: [] for m in ("protolib", "cold", "cold+cache", "cached")}

        def run(mode: str) -> None:
            nonlocal n
            load = os.getloadavg()[0]
            r = measure("cache" if mode in ("cold+cache", "cached") else mode, big, env)
            r["load_before"] = load
            if n is None:
                n = r["nodes"]
            if r["nodes"] != n:
                raise SystemExit(f"{mode}: read {r['nodes']} nodes, expected {n}")
            runs[mode].append(r)

        # protolib and the cold load alternate, so that both see the same machine load
        for _ in range(args.repeat):
            run("protolib")
            run("cold")
        import shutil

        shutil.rmtree(Path(tmp) / "cache", ignore_errors=True)
        run("cold+cache")
        for _ in range(args.repeat):
            run("cached")
        results = {m: min(rs, key=lambda r: r["seconds"]) for m, rs in runs.items()}
        base = results["protolib"]["nodes"] / results["protolib"]["seconds"]
        base_cpu = results["protolib"]["nodes"] / min(r["cpu_seconds"] for r in runs["protolib"])
        print(
            f"{'mode':<12} {'wall s':>8} {'nodes/s':>12} {'vs protolib':>12} "
            f"{'CPU s':>8} {'nodes/CPU-s':>12} {'vs protolib':>12} {'peak RSS MiB':>13} {'load':>10}"
        )
        for mode, r in results.items():
            cpu = min(x["cpu_seconds"] for x in runs[mode])
            loads = [x["load_before"] for x in runs[mode]]
            rate = r["nodes"] / r["seconds"]
            crate = r["nodes"] / cpu
            print(
                f"{mode:<12} {r['seconds']:>8.3f} {rate:>12,.0f} {rate / base:>11.2f}x "
                f"{cpu:>8.3f} {crate:>12,.0f} {crate / base_cpu:>11.2f}x {r['peak_rss_mib']:>13,.0f} "
                f"{min(loads):>4.2f}-{max(loads):<4.2f}"
            )
        for mode in ("protolib", "cold"):
            walls = ", ".join(f"{x['seconds']:.2f}" for x in runs[mode])
            print(f"  {mode} runs (wall s): {walls}")
        print(f"machine load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(json.dumps({"nodes": n, "file_mb": big.stat().st_size / 1e6, "runs": runs}))


if __name__ == "__main__":
    main()
