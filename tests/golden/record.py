"""Record (or check) the golden outputs of every fixture and shared trace.

    python -m tests.golden.record            # record all cases into tests/golden/data
    python -m tests.golden.record --check    # recompute and compare, print a diff, exit 1 on a change
    python -m tests.golden.record --only cpu-2rank-gloo --only hta-a100-ddp

Each case runs, in this process with a fresh cache directory and default options, in a scratch
directory holding a link to the input under its own name: ``analyze --format json`` (plain and
``--per-step``), ``info --json``, ``report``, ``convert`` (and ``convert --host-et`` for a linked pair),
``export perfetto`` and ``export astra-sim``. Stored per case in tests/golden/data/<case>/:
``golden.json`` (exit codes, console lines, a SHA-256 of every output and written file, ``info``'s
JSON, the report's outline, a summary of the Perfetto trace, the ASTRA-sim communicator groups)
and the two analyze outputs as ``analyze.json.gz`` / ``analyze-per-step.json.gz``. The shared traces
themselves are never stored, only our outputs. Normalisations: tests/golden/normalise.py.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner

from charllm_trace.cli.app import main as cli_main

from . import normalise as N
from .cases import ALL_CASES, BY_NAME, ROOT, SHARED_TRACES, Case

DATA = Path(__file__).resolve().parent / "data"
#: console width and colour fixed so that the console lines do not depend on the terminal
ENV = {"COLUMNS": "100", "NO_COLOR": "1", "CHARLLM_TRACE_NO_CACHE": None}
#: analyze outputs stored whole (gzip'd JSON) for a readable diff
STORED = ("analyze", "analyze-per-step")
#: floats in JSON outputs compare within this relative difference (normalise.py)
FLOAT_REL_TOL = 1e-9


@dataclass
class Outputs:
    """What one case produced, normalised."""

    golden: dict[str, Any]
    stored: dict[str, bytes] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def _commands(case: Case, name: str) -> list[tuple[str, list[str]]]:
    host = ["--host-et", Path(case.host_et).name] if case.host_et else []
    return [
        ("analyze", ["analyze", name, "--format", "json"]),
        ("analyze-per-step", ["analyze", name, "--format", "json", "--per-step"]),
        ("info", ["info", name, "--json"]),
        ("report", ["report", name, "-o", "out/report.html"]),
        ("convert", ["convert", name, "-o", "out/ets"]),
        *([("convert-host-et", ["convert", name, "-o", "out/ets-host-et", *host])] if host else []),
        ("perfetto", ["export", "perfetto", name, "-o", "out/perfetto.json"]),
        ("astra-sim", ["export", "astra-sim", name, "-o", "out/astra"]),
        # the same analysis again, now answered from the results cache: the same bytes expected
        ("analyze-cached", ["analyze", name, "--format", "json"]),
    ]


def _link_inputs(case: Case, work: Path) -> str:
    src = case.source()
    (work / src.name).symlink_to(src, target_is_directory=src.is_dir())
    h = case.host_et_source()
    if h is not None:
        (work / h.name).symlink_to(h)
    return src.name


def run_case(case: Case, work: Path, cache: Path) -> Outputs:
    """Run every command of ``case`` in ``work`` (cwd switched there and back) with ``cache`` as the
    cache directory (environment restored afterwards)."""
    (work / "out").mkdir(parents=True, exist_ok=True)
    name = _link_inputs(case, work)
    repl = [(work, "<work>"), (cache, "<cache>"), (SHARED_TRACES, "<shared>"), (ROOT, "<repo>")]
    saved_env = {k: os.environ.get(k) for k in ("CHARLLM_TRACE_CACHE_DIR", "CHARLLM_TRACE_NO_CACHE")}
    cwd = os.getcwd()
    os.environ["CHARLLM_TRACE_CACHE_DIR"] = str(cache)
    os.environ.pop("CHARLLM_TRACE_NO_CACHE", None)
    from charllm_trace.et import cache as et_cache

    et_cache.set_enabled(None)
    try:
        os.chdir(work)
        return _run_all(case, name, work, repl)
    finally:
        os.chdir(cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        et_cache.set_enabled(None)


def _run_all(case: Case, name: str, work: Path, repl: list[tuple[Path, str]]) -> Outputs:
    out = Outputs(golden={"case": case.name, "input": f"<{case.root}>/{case.path}", "commands": {}})
    runner = CliRunner(env=ENV)
    for key, argv in _commands(case, name):
        t0 = time.perf_counter()
        r = runner.invoke(cli_main, argv, catch_exceptions=True)
        out.seconds[key] = time.perf_counter() - t0
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise RuntimeError(f"{case.name}: {' '.join(argv)} raised {r.exception!r}") from r.exception
        stdout = N.paths(r.stdout_bytes, repl)
        entry: dict[str, Any] = {
            "argv": argv,
            "exit": r.exit_code,
            "stderr": N.paths(r.stderr_bytes, repl).decode("utf-8", "replace").splitlines(),
        }
        out.golden["commands"][key] = entry
        if key in STORED:
            out.stored[key] = stdout
        elif key == "info" and r.exit_code == 0:
            out.golden["info"] = json.loads(stdout)
        elif key == "analyze-cached":  # exact bytes: the same process, the same thread count
            entry["stdout_same_as_analyze"] = stdout == out.stored["analyze"]
        else:  # console lines ("wrote ..."), shown whole
            entry["stdout"] = stdout.decode("utf-8", "replace").splitlines()
    _files(out, work / "out", repl)
    return out


def _files(out: Outputs, d: Path, repl: list[tuple[Path, str]]) -> None:
    files: dict[str, str] = {}
    for p in sorted(d.rglob("*")) if d.is_dir() else []:
        if not p.is_file():
            continue
        rel = p.relative_to(d).as_posix()
        data = N.paths(p.read_bytes(), repl)
        if rel == "report.html":
            data = N.report_html(data)
            out.golden["report_outline"] = N.html_outline(data)
        elif rel == "perfetto.json":
            out.golden["perfetto_summary"] = N.perfetto_summary(orjson.loads(data))
        elif rel.endswith(".json") and len(data) < 4096:
            out.golden.setdefault("small_files", {})[rel] = data.decode("utf-8", "replace")
        files[rel] = N.sha256(data)
    out.golden["files"] = files


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def write(out: Outputs, d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "golden.json").write_text(_dump(out.golden), encoding="utf-8")
    for key, data in out.stored.items():
        (d / f"{key}.json.gz").write_bytes(_gz(data))


def _pretty_lines(data: bytes) -> list[str]:
    try:
        return _dump(orjson.loads(data)).splitlines()
    except ValueError:
        return data.decode("utf-8", "replace").splitlines()


def _diff(a: list[str], b: list[str], what: str, limit: int = 60) -> str:
    lines = list(difflib.unified_diff(a, b, f"golden/{what}", f"now/{what}", lineterm="", n=2))
    if not lines:
        return "(the same lines pretty-printed with sorted keys: the key order or the formatting changed)"
    more = f"\n... {len(lines) - limit} more diff lines" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def close(a: Any, b: Any) -> bool:
    """``a == b``, floats within a relative 1e-9 (see normalise.py: polars' float sums depend on its
    thread count in the last bits); ints, strings, keys and their order exactly."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=FLOAT_REL_TOL, abs_tol=0.0) or (a != a and b != b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _same_json(a: bytes, b: bytes) -> bool:
    if a == b:
        return True
    try:
        return close(orjson.loads(a), orjson.loads(b))
    except ValueError:
        return False


def compare(out: Outputs, d: Path) -> list[str]:
    """Differences between ``out`` and the golden files in ``d``, each with a readable diff."""
    if not (d / "golden.json").exists():
        return [f"{d}/golden.json is missing: record it with python -m tests.golden.record --only {d.name}"]
    old = json.loads((d / "golden.json").read_text(encoding="utf-8"))
    new = json.loads(_dump(out.golden))  # keys sorted as stored
    problems = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if not close(a, b):
            problems.append(f"{key} differs:\n" + _diff(_dump(a).splitlines(), _dump(b).splitlines(), key))
    for key, data in out.stored.items():
        p = d / f"{key}.json.gz"
        was = gzip.decompress(p.read_bytes()) if p.exists() else b""
        if not _same_json(was, data):
            problems.append(f"{key} output differs:\n" + _diff(_pretty_lines(was), _pretty_lines(data), key))
    return problems


def record_case(case: Case, check: bool) -> tuple[list[str], Outputs]:
    with tempfile.TemporaryDirectory(prefix=f"golden-{case.name}-") as tmp:
        out = run_case(case, Path(tmp) / "work", Path(tmp) / "cache")
    if check:
        return compare(out, DATA / case.name), out
    write(out, DATA / case.name)
    return [], out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.golden.record", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the stored goldens instead of writing")
    ap.add_argument("--only", action="append", choices=sorted(BY_NAME), help="only this case (repeatable)")
    args = ap.parse_args(argv)
    cases = [BY_NAME[n] for n in args.only] if args.only else list(ALL_CASES)
    failed = 0
    for case in cases:
        if case.root == "shared" and not SHARED_TRACES.is_dir():
            print(f"{case.name}: skipped, {SHARED_TRACES} is absent")
            continue
        problems, out = record_case(case, args.check)
        took = " ".join(f"{k} {v:.2f}s" for k, v in out.seconds.items())
        print(f"{case.name}: {'DIFFERS' if problems else 'ok'} ({took})")
        for p in problems:
            print(p)
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
