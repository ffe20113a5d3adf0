"""Benchmark: ``read_kineto`` alone (the Kineto reader: framing, the C decoder, the columns), old
code against new, on the shared A100 profile and on a big profile with absolute-µs timestamps
carrying three decimals (the form whose nanoseconds the float reader lost, issue 13).

The big profile is the A100 DDP profile (``../shared/traces/hta/a100_ddp_nccl_rank0.json.gz``)
repeated by ``bench_convert.make_big_profile``, then rewritten with each event's ``ts`` made
absolute (``baseTimeNanoseconds`` added, the field dropped) and written as decimal text with three
decimals, e.g. ``1711969104676522690.655`` ns -> ``"ts": 1711969104676522.690``.

Each code version is a checkout (``--code NAME=DIR``: a worktree with its C extension built);
every measurement is a fresh subprocess with ``PYTHONPATH=DIR`` that reads the file ``--inner``
times and reports the fastest wall time, CPU time (``process_time``: all threads) and CPU time
inside the C decoder (``thread_time`` around ``NativeDecoder.decode``) of one read; versions are
interleaved. Files: the A100 profile, the big profile as made (relative µs + base), the big
profile with absolute µs, and the A100 profile read by the msgspec reader alone.

    python benchmarks/bench_kineto_read.py --code before=../charllm-before --code after=. \
        [--events 1000000] [--rounds 3] [--inner 1] [--workdir DIR]

``--decoders`` instead times ``jd_decode`` alone, the builds named (copies of the
``_jsonframe`` extension of each checkout) loaded side by side in one process and run in turn
on the same captured batches (fastest of ``--rounds`` passes, ``thread_time``): the machine's
load moves both alike.

    python benchmarks/bench_kineto_read.py --decoders before=/tmp/old.so --decoders after=/tmp/new.so
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_convert import SHARED, make_big_profile  # noqa: E402

A100 = SHARED / "hta" / "a100_ddp_nccl_rank0.json.gz"
_SENTINEL = 7_770_000_000_000_000_001
_TS_RE = re.compile(rb'"ts":(\d+(?:\.\d+)?)')

CHILD = r"""
import json, os, sys, time
from charllm_trace.converters import kineto_native
from charllm_trace.converters.kineto import read_kineto
acc = [0.0]
if os.environ.get("BENCH_MSGSPEC") == "1":  # the msgspec reader alone (the C decoder's oracle)
    kineto_native.decoder = lambda: None
else:
    orig = kineto_native.NativeDecoder.decode
    def decode(self, data, count):
        t = time.thread_time()
        try:
            return orig(self, data, count)
        finally:
            acc[0] += time.thread_time() - t
    kineto_native.NativeDecoder.decode = decode
best = {}
for _ in range(int(sys.argv[2])):
    acc[0] = 0.0
    t0 = time.perf_counter(); c0 = time.process_time()
    prof = read_kineto(sys.argv[1])
    got = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "decode_cpu_s": acc[0]}
    best = {k: min(v, best.get(k, v)) for k, v in got.items()}
    n = prof.events.height
    del prof
print(json.dumps({**best, "events": n}))
"""


def make_absolute(src: Path, out: Path) -> int:
    """Rewrite profile ``src`` (relative µs + baseTimeNanoseconds) with absolute-µs ``ts`` texts
    of three decimals; returns the number of rewritten timestamps."""
    doc = orjson.loads(src.read_bytes())
    base = int(doc.pop("baseTimeNanoseconds"))
    events = doc.pop("traceEvents")
    n = 0
    with open(out, "wb") as fh:
        fh.write(orjson.dumps(doc)[:-1] + b',"traceEvents":[')
        for i, e in enumerate(events):
            ts = e.get("ts")
            text = orjson.dumps(e)
            if isinstance(ts, (int, float)):
                ns = base + round(ts * 1000)
                e = dict(e, ts=_SENTINEL)
                text = orjson.dumps(e).replace(
                    b'"ts":%d' % _SENTINEL, b'"ts":%d.%03d' % (ns // 1000, ns % 1000)
                )
                n += 1
            fh.write((b"," if i else b"") + text)
        fh.write(b"]}")
    return n


def run(code: Path, path: Path, inner: int, msgspec_only: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code), BENCH_MSGSPEC="1" if msgspec_only else "0")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(inner)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


MICRO = r"""
import ctypes, json, sys, time
from charllm_trace.converters import jsonframe, kineto_native
from charllm_trace.converters.kineto import read_kineto
batches = []
orig = kineto_native.NativeDecoder.decode
def capture(self, data, count):
    batches.append((bytes(data), count))
    return orig(self, data, count)
kineto_native.NativeDecoder.decode = capture
read_kineto(sys.argv[1])
kineto_native.NativeDecoder.decode = orig
libs = {}
for spec in sys.argv[3:]:
    name, path = spec.split("=", 1)
    so = ctypes.CDLL(path)
    jsonframe._declare(so)
    libs[name] = so
best = {k: None for k in libs}
for _ in range(int(sys.argv[2])):
    for name, so in libs.items():
        d = kineto_native.NativeDecoder(so)
        t = time.thread_time()
        for data, count in batches:
            assert d.decode(data, count) is not None
        dt = time.thread_time() - t
        best[name] = dt if best[name] is None else min(best[name], dt)
        d.close()
print(json.dumps({"batches": len(batches), **best}))
"""


def decoders(specs: list[str], files: list[tuple[str, Path]], rounds: int) -> None:
    for fname, path in files:
        out = subprocess.run(
            [sys.executable, "-c", MICRO, str(path), str(rounds), *specs],
            capture_output=True,
            text=True,
            check=True,
        )
        print(f"{fname:8s} jd_decode {out.stdout.strip()}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", action="append", default=[], help="NAME=DIR of a checkout to time")
    ap.add_argument("--decoders", action="append", default=[], help="NAME=PATH of a _jsonframe build")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inner", type=int, default=1, help="reads per subprocess (the fastest is kept)")
    ap.add_argument("--small-inner", type=int, default=10, help="reads per subprocess for the A100 profile")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    codes = [(k, Path(v).resolve()) for k, v in (c.split("=", 1) for c in args.code)]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_kread_"))
    work.mkdir(parents=True, exist_ok=True)
    rel, absolute = work / "big_rel.json", work / "big_abs.json"
    if not absolute.exists():
        total, size = make_big_profile(A100, args.events, rel)
        n = make_absolute(rel, absolute)
        print(
            f"made {rel}: {total:,} events; {absolute}: {n:,} absolute ts, {absolute.stat().st_size / 1e6:.0f} MB"
        )
    if args.decoders:
        decoders(args.decoders, [("a100", A100), ("big_rel", rel), ("big_abs", absolute)], args.rounds)
        return
    files = [("a100", A100, args.small_inner, False), ("big_rel", rel, args.inner, False)]
    files += [("big_abs", absolute, args.inner, False), ("a100 msgspec", A100, args.small_inner, True)]
    res: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for fname, path, inner, ms in files:
            for name, code in codes:
                got = run(code, path, inner, ms)
                res.setdefault((fname, name), []).append(got)
                print(
                    f"round {r} {fname:12s} {name:8s} wall {got['wall_s']:.3f} s cpu {got['cpu_s']:.3f} s "
                    f"decoder cpu {got['decode_cpu_s']:.3f} s",
                    flush=True,
                )
    print(f"load average: {os.getloadavg()}")
    for fname, _path, _inner, _ms in files:
        for name, _code in codes:
            g = res[(fname, name)]
            print(
                f"{fname:12s} {name:8s} events {g[0]['events']:,}: "
                + "; ".join(
                    f"{k} min {min(x[k] for x in g):.4f} median {statistics.median(x[k] for x in g):.4f}"
                    for k in ("wall_s", "cpu_s", "decode_cpu_s")
                )
            )


if __name__ == "__main__":
    main()
