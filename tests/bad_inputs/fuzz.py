"""A bounded fuzz job over every reader of untrusted input (issue 15).

``python -m tests.bad_inputs.fuzz`` mutates small inputs (real ones where ``../shared`` holds them:
an A100 Kineto profile and a Chakra-made ET; the collected fixture run's host ET, manifest and
telemetry; a baseline; a small Kineto profile and ET made here) byte by byte and value by value with hypothesis
(derandomized: the same examples on every run) and feeds each mutant to its reader. Each must
end in a result or an ``InputError``/``UsageError``; any other exception fails the job with the
example, and a crash (a signal) fails the test that runs this module in a subprocess. The
process's address space is capped (``FUZZ_MEMORY_CAP``, default 3 GiB) so a memory blow-up is a
``MemoryError`` failure, not a machine taken down. ``FUZZ_EXAMPLES`` (default 60 per reader)
sets the length of the run; raise it locally for a longer search.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from charllm_trace.core.errors import InputError
from tests.bad_inputs import valid

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

NASTY = st.sampled_from(
    [None, True, -1, 0, 2**63, 2**70, -(2**70), 1e308, -1e308, 1.5, "", "NaN", "x" * 300, [], {}, [[[[]]]],
     {"a": {"b": {"c": 1}}}, "\u0000", "\ud7ff", [1, "2", None]]
)  # fmt: skip


def byte_mutants(seed: bytes) -> st.SearchStrategy[bytes]:
    """``seed`` with a few byte edits: flips, cuts, insertions, deletions, repeats."""
    n = len(seed)
    edit = st.one_of(
        st.tuples(st.just("flip"), st.integers(0, n - 1), st.integers(1, 255)),
        st.tuples(st.just("cut"), st.integers(0, n - 1), st.just(0)),
        st.tuples(st.just("insert"), st.integers(0, n), st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("delete"), st.integers(0, n - 1), st.integers(1, 64)),
        st.tuples(st.just("repeat"), st.integers(0, n - 1), st.integers(1, 64)),
    )

    def apply(edits: list[tuple[str, int, Any]]) -> bytes:
        b = bytearray(seed)
        for op, i, v in edits:
            i = min(i, len(b))
            if op == "flip" and i < len(b):
                b[i] ^= v
            elif op == "cut":
                del b[i:]
            elif op == "insert":
                b[i:i] = v
            elif op == "delete":
                del b[i : i + v]
            elif op == "repeat":
                b[i:i] = b[i : i + v] * 4
        return bytes(b)

    return st.lists(edit, min_size=1, max_size=4).map(apply)


def _paths(doc: Any, prefix: tuple = (), out: list | None = None, limit: int = 400) -> list[tuple]:
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    out.append(prefix)
    if isinstance(doc, dict):
        for k, v in doc.items():
            _paths(v, (*prefix, k), out, limit)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:20]):
            _paths(v, (*prefix, i), out, limit)
    return out


def value_mutants(seed: Any) -> st.SearchStrategy[bytes]:
    """The JSON document ``seed`` with a few values replaced by nasty ones (or keys deleted)."""
    paths = [p for p in _paths(seed) if p]

    def apply(edits: list[tuple[int, Any, bool]]) -> bytes:
        doc = json.loads(json.dumps(seed))
        for k, v, delete in edits:
            path = paths[k % len(paths)]
            parent = doc
            try:
                for p in path[:-1]:
                    parent = parent[p]
                if delete and isinstance(parent, dict):
                    parent.pop(path[-1], None)
                else:
                    parent[path[-1]] = v
            except (KeyError, IndexError, TypeError):
                continue
        return json.dumps(doc).encode()

    return st.lists(st.tuples(st.integers(0, 10**6), NASTY, st.booleans()), min_size=1, max_size=3).map(apply)


def _check(read: Callable[[Path], Any], data: bytes, name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        p = Path(tmp) / name
        p.write_bytes(data)
        try:
            read(p)
        except InputError:
            pass


def _readers(tmp: Path) -> list[tuple[str, Callable[[Path], Any], str, st.SearchStrategy[bytes]]]:
    from charllm_trace.collectors.run_checks import check_manifest
    from charllm_trace.converters import host_et as host_et_mod
    from charllm_trace.converters._io import load_json
    from charllm_trace.converters.kineto import read_kineto
    from charllm_trace.converters.run_dir import read_manifest
    from charllm_trace.et.reader import read_et
    from charllm_trace.regress.baseline import read_baseline

    kdoc = valid.kineto_doc()
    kbytes = json.dumps(kdoc).encode()
    et_bytes = valid.et(tmp, "seed.et").read_bytes()
    host = valid.load(valid.FIXTURE_RUN / "rank-0.host_et.json.gz")
    host["nodes"] = host["nodes"][:40]
    man = json.loads((valid.FIXTURE_RUN / "manifest.json").read_text())
    base = json.loads(valid.FIXTURE_BASELINE.read_text())
    base["metrics"] = base["metrics"][:5]

    from charllm_trace.collectors.telemetry.format import CSV_COLUMNS
    from charllm_trace.collectors.telemetry.reader import rank_devices, read_telemetry

    tmeta = json.loads((valid.FIXTURE_RUN / "telemetry-vm.meta.json").read_text())
    tmeta.update(file="telemetry-vm.csv", devices=[{"index": 0, "uuid": "GPU-abc", "name": "NVIDIA H100"}])
    rows = [
        f"{valid.T0 * 1000 + i * 50_000_000},0,{300 + i}.5,{i * 15.0},61,70,1980,2619,99,700,0"
        for i in range(4)
    ]
    tcsv = (",".join(CSV_COLUMNS) + "\n" + "\n".join(rows) + "\n").encode()

    def telemetry_meta(p: Path) -> Any:
        (p.parent / "telemetry-vm.csv").write_bytes(tcsv)
        return read_telemetry(p.parent), rank_devices(p.parent)

    def telemetry_csv(p: Path) -> Any:
        (p.parent / "telemetry-vm.meta.json").write_text(json.dumps(tmeta))
        return read_telemetry(p.parent)

    def manifest(p: Path) -> Any:
        d = p.parent
        m = read_manifest(d)
        return check_manifest(d / "manifest.json", m)

    imported = _imported_log_readers()
    res_doc, results_manifest = _results_reader(tmp)
    frame_seed, results_frame = _results_frame_reader(tmp)
    real: list[tuple[str, Callable[[Path], Any], str, st.SearchStrategy[bytes]]] = []
    if SHARED.is_dir():  # real traces others recorded (skipped where ../shared is absent)
        import gzip

        a100 = gzip.decompress((SHARED / "hta" / "simple_add_kineto.json.gz").read_bytes())
        feeder = (SHARED / "chakra" / "feeder_tests_chakra.0.et").read_bytes()
        real = [
            ("kineto-real-bytes", read_kineto, "rank-0.json", byte_mutants(a100)),
            ("kineto-real-values", read_kineto, "rank-0.json", value_mutants(json.loads(a100))),
            ("et-real-bytes", lambda p: read_et(p, cache=False), "rank-0.et", byte_mutants(feeder)),
        ]
    return real + [
        ("kineto-bytes", read_kineto, "rank-0.json", byte_mutants(kbytes)),
        ("kineto-values", read_kineto, "rank-0.json", value_mutants(kdoc)),
        ("et-bytes", lambda p: read_et(p, cache=False), "rank-0.et", byte_mutants(et_bytes)),
        (
            "host-et-values",
            lambda p: host_et_mod.parse_host_et(load_json(p), p),
            "h.json",
            value_mutants(host),
        ),
        ("manifest-values", manifest, "manifest.json", value_mutants(man)),
        ("baseline-values", read_baseline, "b.json", value_mutants(base)),
        ("telemetry-meta-values", telemetry_meta, "telemetry-vm.meta.json", value_mutants(tmeta)),
        ("telemetry-csv-bytes", telemetry_csv, "telemetry-vm.csv", byte_mutants(tcsv)),
        ("baseline-bytes", read_baseline, "b.json", byte_mutants(json.dumps(base).encode())),
        *imported,
        ("results-manifest-values", results_manifest, "charllm-results.json", value_mutants(res_doc)),
        ("results-frame-bytes", results_frame, "frame.arrow", byte_mutants(frame_seed)),
    ]


LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "telemetry_logs"


def _imported_log_readers() -> list[tuple[str, Callable[[Path], Any], str, st.SearchStrategy[bytes]]]:
    """``telemetry import``'s readers of the five tools' logs (issue 28), byte by byte."""
    from charllm_trace.telemetry_import import read_log
    from charllm_trace.telemetry_import.common import ParseOptions

    opts = ParseOptions(tz="UTC", start="1716423322", interval_ms=100.0)
    logs = [("nvidia-smi", "nvidia-smi-a100.csv"), ("dcgm", "dcgmi-dmon-ts.log"), ("amd-smi", "amd-smi-metric.csv"),
            ("rocm-smi", "rocm-smi-ts.log"), ("zeus", "zeus-powermonitor.csv")]  # fmt: skip
    return [
        (
            f"telemetry-import-{fmt}-bytes",
            lambda p, fmt=fmt: read_log(p, fmt, opts),
            name,
            byte_mutants((LOGS / name).read_bytes()),
        )
        for fmt, name in logs
    ]


def _results_reader(tmp: Path) -> tuple[Any, Callable[[Path], Any]]:
    """A saved results file of a small profile (with the report's views), and a reader that puts a
    mutated manifest into it with the member table recomputed (as a sender can) and reads it all."""
    import hashlib
    import zipfile

    from click.testing import CliRunner

    from charllm_trace.cli.app import main
    from charllm_trace.store.results import MANIFEST, read_results

    seed = tmp / "seed-results.zip"
    r = CliRunner().invoke(
        main, ["analyze", str(valid.kineto(tmp, "seed.json")), "--save", str(seed), "--no-cache"]
    )
    assert r.exit_code == 0, r.output
    with zipfile.ZipFile(seed) as zf:
        members = {n: zf.read(n) for n in zf.namelist() if n != MANIFEST}
        doc = json.loads(zf.read(MANIFEST))

    def read(p: Path) -> Any:
        try:
            body = json.loads(p.read_bytes())
        except ValueError:
            body = None
        if isinstance(body, dict):
            body["members"] = {
                n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in members.items()
            }
        out = p.with_name("r.zip")
        with zipfile.ZipFile(out, "w") as zf:
            zf.writestr(MANIFEST, json.dumps(body) if isinstance(body, dict) else p.read_bytes())
            for n, b in members.items():
                zf.writestr(n, b)
        saved = read_results(out)
        return saved.views() if saved.has_views else saved.analysis

    return doc, read


def _results_frame_reader(tmp: Path) -> tuple[bytes, Callable[[Path], Any]]:
    """The first Arrow frame of a saved results file, and a reader that puts a mutated frame back
    with the member table recomputed (as a sender can) and reads the results and their views."""
    import hashlib
    import zipfile

    from charllm_trace.store.results import MANIFEST, read_results

    with zipfile.ZipFile(tmp / "seed-results.zip") as zf:  # made by _results_reader
        members = {n: zf.read(n) for n in zf.namelist() if n != MANIFEST}
        doc = json.loads(zf.read(MANIFEST))
    frame = min(n for n in members if n.endswith(".arrow"))

    def read(p: Path) -> Any:
        got = {**members, frame: p.read_bytes()}
        doc["members"] = {
            n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in got.items()
        }
        out = p.with_name("r.zip")
        with zipfile.ZipFile(out, "w") as zf:
            zf.writestr(MANIFEST, json.dumps(doc))
            for n, b in got.items():
                zf.writestr(n, b)
        saved = read_results(out)
        return saved.views() if saved.has_views else saved.analysis

    return members[frame], read


def main() -> int:
    cap = int(os.environ.get("FUZZ_MEMORY_CAP", str(3 << 30)))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    only = sys.argv[1:]
    failed = []
    with tempfile.TemporaryDirectory(prefix="fuzz-seeds-") as tmp:
        for name, read, fname, strategy in _readers(Path(tmp)):
            if only and name not in only:
                continue

            def make(read: Callable[[Path], Any], fname: str, strategy: Any) -> Callable[[], None]:
                @SETTINGS
                @given(strategy)
                def one(data: bytes) -> None:
                    _check(read, data, fname)

                return one

            run = make(read, fname, strategy)
            try:
                run()
                print(f"{name}: {EXAMPLES} examples, ok", flush=True)
            except Exception as exc:  # the falsifying example is in hypothesis's report (stderr)
                failed.append(name)
                import traceback

                print(f"{name}: FAILED: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
                print("".join(traceback.format_exception(exc)[-6:])[-3000:], file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
