"""The per-rank graph step's pair search against K collectives per rank (issue 26 item 3): the
(V_j, V_k) pairs a rank sends (``analysis/virtual_pairs.py`` ``kept_pairs``: one tagged
longest-path pass per V) against the K^3 comparison it replaced (K passes for ``D``, then
``rank_graph.reduce_pairs``). Runnable by hand, not in CI.

The graph is a rank's share as ``rank_graph.join`` makes it, generated: K collectives, each a
start and an end point with its span (transfer 5 ns), a V (start -> V, V -> end), and two streams
of work between them (end_i -> start_(i+1), 3 ns, and end_i -> start_(i+2), 12 ns: longer than the 11 ns
through V_(i+1), so about 2K pairs are kept). Both give the same rows (checked). Best of
``--rounds``; the machine's 1-minute load average is printed (shared machine: compare with it).

    python benchmarks/bench_virtual_pairs.py [--ks 125,250,500,1000] [--new-only 2000,4000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from charllm_trace.analysis.rank_graph import reduce_pairs
from charllm_trace.analysis.virtual_pairs import kept_pairs
from charllm_trace.core import dag as engine


def chain(k: int) -> tuple:
    i = np.arange(k)
    s, e, v = 2 * i, 2 * i + 1, 2 * k + i
    src = np.r_[s, s, v, e[:-1], e[:-2]]
    dst = np.r_[e, v, e, s[1:], s[2:]]
    lag = np.r_[np.full(k, 5), np.zeros(k), np.full(k, 5), np.full(k - 1, 3), np.full(max(k - 2, 0), 12)]
    n = 3 * k
    return (
        n,
        src.astype(np.int32),
        dst.astype(np.int32),
        lag.astype(np.int64),
        np.zeros(len(src), np.int8),
        2 * k,
        s,
    )


def cubic(n, src, dst, lag, prio, n_real, starts) -> np.ndarray:
    k = len(starts)
    d = np.full((k, k), engine.NONE, np.int64)
    for j in range(k):
        root = np.full(n, engine.NONE, np.int64)
        root[n_real + j] = 0
        d[j] = engine.longest_path(n, src, dst, lag, prio, root)[0][starts]
    return reduce_pairs(d)


def best(f, args, rounds: int) -> tuple[float, np.ndarray]:
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = f(*args)
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="125,250,500,1000")
    ap.add_argument("--new-only", default="2000,4000")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    print(f"{'K':>5} {'pairs':>6} {'K^3 s':>8} {'tagged s':>9} {'load1':>6}")
    for k in [int(x) for x in a.ks.split(",") if x] + [-int(x) for x in a.new_only.split(",") if x]:
        args = chain(abs(k))
        load1 = os.getloadavg()[0]
        t_new, new = best(kept_pairs, args, a.rounds)
        old = "-"
        if k > 0:
            t_old, want = best(cubic, args, 1 if k >= 1000 else a.rounds)
            assert np.array_equal(new, want)
            old = f"{t_old:.3f}"
        print(f"{abs(k):>5} {len(new):>6} {old:>8} {t_new:>9.3f} {load1:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
