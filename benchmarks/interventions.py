"""Issue 22 item 2: `analyze --what-if` against real runs in which the change was made.

``record DIR``: one ``charllm-trace collect`` per intervention around a 2-rank gloo run of
examples/train_tiny.py (each rank pinned to its own core, one thread). Every run has the switches
installed and changes odd steps only (``--change-on odd``), so each changed step has two base
neighbours that ran under the same load: the comparison is paired, which is what survives a
shared 2-core machine. The ``null`` run changes nothing: its pairs are the noise.

``compare DIR``: for each run, ``analyze RUN --per-step --what-if KEY --format json`` (the base
steps predict their changed neighbour), the naive estimate (the base step plus (factor - 1) x the
category's time in the step; for the CPU delay, plus delays x delay), and the errors against
the measured changed step. Also read from the switch log: the paired change over the steps that
were not traced. Works on the GPU runs of benchmarks/gpu_interventions.sh too (``--gpu``).

    python benchmarks/interventions.py record runs/iv --steps 40 --traced 4-9
    python benchmarks/interventions.py compare runs/iv [runs/iv2 ...] [--json out.json]

Every figure is a median over the pairs (pooled over the recordings given). "error" is the median
over pairs of |estimate - measured| / measured; "noise" is the null run's median |change| between
a step and its base neighbours (what a pair differs by when nothing was changed). The last two
columns give the estimates as a change of their base window and their error against the
untraced change (steps without the profiler, often much quieter than the traced ones).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "import sys; from charllm_trace.cli.app import main; sys.exit(main())"]
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm")
DELAY_US = 200
#: big enough that matrix products are most of a step (a step of ~0.1 s on an idle core)
MODEL = "--d-model 128 --seq 64 --batch 8"

#: name -> (switch options, what-if key or None, category the naive estimate scales, factor)
INTERVENTIONS: dict[str, tuple[list[str], str | None, str | None, float]] = {
    "null": ([], None, None, 1.0),
    "mm2": (["--mm-repeat", "2"], "gemm=2", "gemm", 2.0),
    "ar2": (["--allreduce-repeat", "2"], "comm=2", "comm", 2.0),
    "delay": (["--cpu-delay-us", str(DELAY_US)], f"cpu_op+={DELAY_US}us", "delay", 1.0),
    "cores": (["--fewer-cpus", "0"], None, None, 1.0),
}


# ---------------------------------------------------------------------------------------- record
def record(out: Path, names: list[str], steps: int, traced: str, world: int, model: list[str]) -> None:
    for name in names:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        cmd = [*CLI, "collect", "-o", str(d / "run"), "--steps", traced, "--", sys.executable, "-m",
               "torch.distributed.run", "--standalone", "--nproc_per_node", str(world),
               str(ROOT / "examples" / "train_tiny.py"), "--steps", str(steps), "--switches",
               "--change-on", "odd", "--cpus", ",".join(map(str, range(world))),
               "--switch-log", str(d / "switch_log.json"), *model, *INTERVENTIONS[name][0]]  # fmt: skip
        print(f"== {name}: {' '.join(INTERVENTIONS[name][0]) or '(no change)'}", flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
        if p.returncode != 0:
            sys.exit(f"{name}: collect failed ({p.returncode}): {p.stderr[-2000:]}")


# ----------------------------------------------------------------------------------- measure
def _union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of [start, end) intervals."""
    if starts.size == 0:
        return 0
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], np.maximum.accumulate(ends[o])
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    last = np.append(idx[1:] - 1, s.size - 1)
    return int((e[last] - s[idx]).sum())


def _category_nodes(nodes: pl.DataFrame, category: str) -> pl.DataFrame:
    from charllm_trace.core.kernel_category import name_categories

    gpu = nodes.filter(pl.col("on_gpu"))
    if category == "comm":
        g = gpu.filter(pl.col("coll_type").is_not_null())
        if g.height:
            return g
        return nodes.filter(~pl.col("on_gpu") & pl.col("name").str.starts_with("gloo:"))
    g = gpu.filter(pl.col("kind") == "kernel") if "kind" in gpu.columns else gpu
    g = g.filter(name_categories(g["name"]) == category) if g.height else g
    if g.height:
        return g
    return nodes.filter(~pl.col("on_gpu") & pl.col("name").is_in(MATMUL_OPS))


def category_ns(run: object, category: str) -> dict[tuple[int, int], int]:
    """(rank, step) -> time the category's work covers inside the step window (union)."""
    out: dict[tuple[int, int], int] = {}
    for r, tr in run.traces.items():  # type: ignore[attr-defined]
        nodes = _category_nodes(tr.nodes.filter(pl.col("start_ns").is_not_null()), category)
        s = nodes["start_ns"].to_numpy()
        e = s + nodes["dur_ns"].to_numpy()
        for step, lo, hi in tr.steps().select("step", "start_ns", "end_ns").iter_rows():
            keep = (s < hi) & (e > lo)
            out[(r, step)] = _union_ns(np.maximum(s[keep], lo), np.minimum(e[keep], hi))
    return out


def what_if_rows(path: Path, key: str | None) -> tuple[list[dict], str | None]:
    """Per-(rank, step) measured and predicted step times; the key's refusal if it was refused."""
    cmd = [*CLI, "analyze", str(path), "--per-step", "--format", "json", "--no-cache"]
    p = subprocess.run([*cmd, "--what-if", key or "comm=1"], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        return [], p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    rows = json.loads(p.stdout)["frames"]["what_if"]
    return [r for r in rows if r["step"] is not None], None


def _per_step(rows: list[dict], col: str) -> dict[int, float]:
    df = pl.DataFrame(rows).group_by("step").agg(pl.col(col).mean())
    return dict(zip(df["step"].to_list(), df[col].to_list(), strict=True))


def _naive_extra(name: str, cat: dict[tuple[int, int], int]) -> dict[int, float]:
    """Base window -> (factor - 1) x the category's time in it (mean over ranks)."""
    _, _, category, factor = INTERVENTIONS[name]
    ranks = {r for r, _ in cat}
    steps = {s for _, s in cat}
    return {b: (factor - 1) * float(np.mean([cat.get((r, b), 0) for r in ranks])) for b in steps}


def window_shift(meas: dict[int, float], log: dict) -> int:
    """0 when ``ProfilerStep`` window N holds iteration N's time, 1 when it holds iteration N-1's
    (a GPU run whose iteration ends with a sync after ``optimizer.step()``: window N waits for
    iteration N-1's kernels). Chosen as the shift under which the traced windows best match the
    per-iteration wall times of the switch log (first and last traced window left out)."""
    t = {s["step"]: s["s"] * 1e9 for s in log["steps"]}
    inner = sorted(meas)[1:-1]

    def cost(k: int) -> float:
        d = [abs(meas[w] - t[w - k]) for w in inner if w - k in t]
        return float(np.median(d)) if d else np.inf

    return min((0, 1), key=cost)


def traced_pairs(name: str, d: Path) -> dict:
    """Changed traced windows against the mean of their traced base neighbours."""
    log = json.loads((d / "switch_log.json").read_text())
    path = d / "run" if (d / "run").exists() else d / "et"
    key = INTERVENTIONS[name][1]
    rows, refused = what_if_rows(path, key)
    if not rows:
        rows, _ = what_if_rows(path, None)
    meas, pred = _per_step(rows, "measured_ns"), _per_step(rows, "predicted_ns")
    category = INTERVENTIONS[name][2]
    extra: dict[int, float] = {}
    if category not in (None, "delay"):
        from charllm_trace.inputs.loader import load

        extra = _naive_extra(name, category_ns(load(path), category))
    shift = window_shift(meas, log)
    it = {s["step"]: s for s in log["steps"]}
    pairs = []
    # with shift 1 the first traced window waits for an iteration launched before tracing began
    first = min(meas) if shift else None
    for c in sorted(w for w in meas if it.get(w - shift, {}).get("changed") and w != first):
        nb = [b for b in (c - 1, c + 1) if b in meas and not it.get(b - shift, {}).get("changed", True)]
        if not nb:
            continue
        base = float(np.mean([meas[b] for b in nb]))
        p = float(np.mean([pred[b] for b in nb])) if key and not refused else None
        if category == "delay":  # the busy-waits rank 0 ran in the changed iteration
            n = base + it[c - shift]["delays"] * DELAY_US * 1e3
        else:
            n = base + float(np.mean([extra.get(b, 0.0) for b in nb])) if category else None
        pairs.append({"step": c, "base_ns": base, "measured_ns": meas[c], "predicted_ns": p, "naive_ns": n})
    return {"key": key, "refused": refused, "shift": shift, "pairs": pairs}


def untraced_change(log: dict, traced: set[int]) -> list[float]:
    """Paired relative change of every untraced changed step against its two base neighbours
    (steps next to the traced ones, and the first two, are left out: profiler start/stop)."""
    t = {s["step"]: s["s"] for s in log["steps"]}
    skip = set(range(2)) | {x for s in traced for x in (s - 1, s, s + 1)} | {max(t)}
    out = []
    for c in sorted(t):
        if c % 2 == 1 and c not in skip and c - 1 in t and c + 1 in t and not ({c - 1, c + 1} & skip):
            base = (t[c - 1] + t[c + 1]) / 2
            out.append((t[c] - base) / base)
    return out


def recorded(name: str, d: Path) -> dict:
    """The traced pairs of one recording, and the paired changes of its untraced steps."""
    res = traced_pairs(name, d)
    log = json.loads((d / "switch_log.json").read_text())
    near = {p["step"] + k for p in res["pairs"] for k in (-1, 0, 1)}
    res["untraced_change"] = untraced_change(log, near)
    return res


def summarize(parts: list[dict]) -> dict:
    """Medians over the pairs of one or more recordings of the same intervention."""
    P = [p for r in parts for p in r["pairs"]]
    ch = [c for r in parts for c in r["untraced_change"]]
    res = {"key": parts[0]["key"], "refused": parts[0]["refused"], "pairs": P, "untraced_change": ch}
    res["window_shift"] = [r["shift"] for r in parts]
    res["n_pairs"], res["n_untraced"] = len(P), len(ch)
    res["base_ms"] = _med([p["base_ns"] for p in P]) / 1e6 if P else None
    res["measured_ms"] = _med([p["measured_ns"] for p in P]) / 1e6 if P else None
    rel = [100 * (p["measured_ns"] / p["base_ns"] - 1) for p in P]
    res["change_pct"] = _med(rel) if P else None
    res["abs_change_pct"] = _med([abs(x) for x in rel]) if P else None  # of the null run: the noise
    for k in ("predicted", "naive"):
        v = [p[f"{k}_ns"] for p in P if p[f"{k}_ns"] is not None]
        res[f"{k}_ms"] = _med(v) / 1e6 if v else None
        errs = [100 * abs(p[f"{k}_ns"] / p["measured_ns"] - 1) for p in P if p[f"{k}_ns"] is not None]
        res[f"{k}_err_pct"] = _med(errs) if errs else None
    res["untraced_change_pct"] = 100 * _med(ch) if ch else None
    # the estimates as a change of their base window, against the untraced (quieter) change
    for k in ("predicted", "naive"):
        v = [p[f"{k}_ns"] / p["base_ns"] - 1 for p in P if p[f"{k}_ns"] is not None]
        res[f"{k}_change_pct"] = 100 * _med(v) if v else None
        res[f"{k}_vs_untraced_err_pct"] = 100 * abs((1 + _med(v)) / (1 + _med(ch)) - 1) if v and ch else None
    res["untraced_iqr_pct"] = [100 * float(np.percentile(ch, q)) for q in (25, 75)] if len(ch) > 1 else None
    return res


def _med(v: list[float]) -> float:
    return float(np.median(v))


def compare(dirs: Path | list[Path]) -> dict[str, dict]:
    """Every intervention recorded under the directories (several recordings are pooled)."""
    dirs = [dirs] if isinstance(dirs, Path) else dirs
    out = {}
    for name in INTERVENTIONS:
        parts = [recorded(name, d / name) for d in dirs if (d / name / "switch_log.json").exists()]
        if parts:
            out[name] = summarize(parts)
    noise = out.get("null", {})
    for res in out.values():
        res["noise_pct"] = noise.get("abs_change_pct")
    return out


def _fmt(v: float | None, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:,.1f}{unit}"


def table(results: dict[str, dict]) -> str:
    head = ("| run | what-if | pairs | base step | measured changed | change | predicted | error | naive | "
            "naive error | noise | untraced change (IQR) | predicted / naive change | their error vs untraced |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    lines = [head]
    for name, r in results.items():
        key = r["key"] or "(none)"
        if r["refused"]:
            key += " (refused)"
        iqr = r["untraced_iqr_pct"]
        unt = f"{_fmt(r['untraced_change_pct'], ' %')} ({_fmt(iqr[0])}..{_fmt(iqr[1])})" if iqr else "n/a"
        lines.append(
            f"| {name} | {key} | {r['n_pairs']} | {_fmt(r['base_ms'], ' ms')} | {_fmt(r['measured_ms'], ' ms')} | "
            f"{_fmt(r['change_pct'], ' %')} | {_fmt(r['predicted_ms'], ' ms')} | {_fmt(r['predicted_err_pct'], ' %')} | "
            f"{_fmt(r['naive_ms'], ' ms')} | {_fmt(r['naive_err_pct'], ' %')} | {_fmt(r['noise_pct'], ' %')} | {unt} | "
            f"{_fmt(r['predicted_change_pct'], ' %')} / {_fmt(r['naive_change_pct'], ' %')} | "
            f"{_fmt(r['predicted_vs_untraced_err_pct'], ' %')} / {_fmt(r['naive_vs_untraced_err_pct'], ' %')} |"
        )  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("dir", type=Path)
    r.add_argument("--steps", type=int, default=40)
    r.add_argument("--traced", default="4-9")
    r.add_argument("--world", type=int, default=2)
    r.add_argument("--only", default=",".join(INTERVENTIONS))
    r.add_argument("--model", default=MODEL, help="train_tiny.py options (model size)")
    c = sub.add_parser("compare")
    c.add_argument("dir", type=Path, nargs="+", help="recordings (several are pooled)")
    c.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if a.cmd == "record":
        record(a.dir, a.only.split(","), a.steps, a.traced, a.world, a.model.split())
        return
    res = compare(a.dir)
    print(table(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
