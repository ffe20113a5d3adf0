"""Build an N-rank run directory from the real 8-rank DLRM set (a benchmark input, not shipped data).

    python benchmarks/make_many_ranks.py N OUT [--source DIR] [--seed S] [--jitter-us US]

Rank k is a copy of source rank ``k % 8`` (its host ET and Kineto profile, the file kinds
``convert`` pairs by rank: ``host_et_rank<k>.json.gz`` and ``kineto_rank<k>.json.gz``), renumbered:

- ``distributedInfo``: ``rank`` k, ``world_size`` N, and a ``pg_config`` naming the default
  process group (``"0"``, all N ranks, as torch writes it: ``ranks: []`` with ``pg_size`` N);
- ``record_param_comms``' rank input (the third) in the host ET is k;
- the collectives keep their order, so the per-group sequence numbers (the ordinal each rank's
  n-th collective gets) agree across all N ranks;
- every timestamp of rank k is shifted by a seeded per-rank offset (uniform in 0..``--jitter-us``
  µs, and 4x that for one rank in 16), so some ranks arrive late at the collectives: stragglers.

Files are gzip level 1. Timing (this machine, 2 cores): see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
from pathlib import Path

import orjson

SOURCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "param" / "dlrm_8ranks_v100"
N_SOURCE = 8


def _read(p: Path) -> dict:
    with gzip.open(p, "rb") as f:
        return orjson.loads(f.read())


def _write(p: Path, doc: dict) -> None:
    tmp = p.with_name(f".{p.name}.tmp")
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        f.write(orjson.dumps(doc))
    tmp.replace(p)


def offsets_us(n: int, seed: int, jitter_us: float) -> list[float]:
    """The per-rank time shift (µs): uniform in [0, jitter_us), 4x for one rank in 16."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        o = rng.uniform(0.0, jitter_us)
        if rng.random() < 1 / 16:
            o *= 4
        out.append(round(o, 3))
    return out


def kineto_for(src: dict, rank: int, world: int, shift_us: float) -> dict:
    dist = dict(src.get("distributedInfo") or {})
    dist.update(rank=rank, world_size=world)
    dist["pg_config"] = [
        {"pg_name": "0", "pg_desc": "default_pg", "backend": "nccl", "pg_size": world, "ranks": []}
    ]
    events = []
    for e in src["traceEvents"]:
        if "ts" in e and e.get("ph") != "M":
            e = {**e, "ts": e["ts"] + shift_us}
        events.append(e)
    return {**src, "distributedInfo": dist, "traceEvents": events}


def host_et_for(src: dict, rank: int) -> dict:
    nodes = []
    for n in src["nodes"]:
        if n.get("name") == "record_param_comms" and len(n.get("inputs") or ()) > 2:
            ins = list(n["inputs"])
            ins[2] = rank
            n = {**n, "inputs": ins}
        nodes.append(n)
    return {**src, "nodes": nodes}


def make(n: int, out: Path, source: Path = SOURCE, seed: int = 0, jitter_us: float = 200.0) -> Path:
    """Write the N-rank run directory ``out`` (created; must not hold files already)."""
    if n < 1:
        raise SystemExit("N must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"{out}: not empty")
    kin = [_read(source / f"kineto_rank{r}.json.gz") for r in range(N_SOURCE)]
    het = [_read(source / f"host_et_rank{r}.json.gz") for r in range(N_SOURCE)]
    shifts = offsets_us(n, seed, jitter_us)
    for k in range(n):
        s = k % N_SOURCE
        _write(out / f"kineto_rank{k}.json.gz", kineto_for(kin[s], k, n, shifts[k]))
        _write(out / f"host_et_rank{k}.json.gz", host_et_for(het[s], k))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, help="ranks to make")
    ap.add_argument("out", type=Path, help="the run directory to write")
    ap.add_argument("--source", type=Path, default=SOURCE, help="the 8-rank source set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jitter-us", type=float, default=200.0)
    a = ap.parse_args(argv)
    make(a.n, a.out, a.source.resolve(), a.seed, a.jitter_us)
    print(f"wrote {a.n} ranks to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
