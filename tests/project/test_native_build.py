"""The compiled helpers are built with the package, never at run time (issue 12 item 1).

``charllm_trace.et._etscan`` (the ET scanner) and ``charllm_trace.converters._jsonframe`` (the
Kineto JSON framer) are extension modules built by setuptools (``setup.py``) and called through
ctypes (docs/native.md). Reading a trace runs no compiler, writes nothing executable and loads
nothing from a cache directory. A missing helper is one error naming it and the fix, every time
a trace is read (there is no slow path; the numpy oracles, ``CHARLLM_TRACE_NATIVE=0``, are the
tests' switch).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import charllm_trace
from charllm_trace.converters import jsonframe
from charllm_trace.core import native_libs as _native_libs
from charllm_trace.et import _native
from charllm_trace.et.writer import write_et
from charllm_trace.inputs.loader import load

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(charllm_trace.__file__).resolve().parent
KINETO = ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo" / "rank-0.kineto.json.gz"
# each helper's sources then headers, in setup.py's order (its SOURCE_SHA256 covers them all)
HELPERS = {
    "charllm_trace.et._etscan": [
        PKG / "et" / "_etscan.c",
        PKG / "et" / "_etwrite.c",
        PKG / "core" / "_ctypes_stub.h",
    ],
    "charllm_trace.converters._jsonframe": [
        PKG / "converters" / "_jsonframe.c",
        PKG / "converters" / "_jsondecode.c",
        PKG / "converters" / "_swar.h",
        PKG / "core" / "_ctypes_stub.h",
    ],
}
COMPILERS = {"cc", "gcc", "clang", "c++", "g++", "clang++", "tcc", "false"}

# Loads an ET and a Kineto profile twice each and reports what it ran, opened and used. Audit
# hooks see every process started and every shared library opened through ctypes.
PROBE = r"""
import json, os, sys
from pathlib import Path
events = {"spawned": [], "dlopen": []}
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system"):
        events["spawned"].append(str(args[0]))
    elif event == "ctypes.dlopen":
        events["dlopen"].append(None if args[0] is None else str(args[0]))
sys.addaudithook(hook)
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import charllm_trace as ct
    from charllm_trace.converters import jsonframe
    from charllm_trace.et import _native
    out = Path(sys.argv[3])
    for name, path in (("et", sys.argv[1]), ("kineto", sys.argv[2])):
        for _ in range(2):
            (tr,) = ct.load(path).traces.values()
        for table in ("nodes", "deps", "telemetry"):
            getattr(tr, table).write_ipc(out / f"{name}.{table}.arrow")
        (out / f"{name}.meta.json").write_text(json.dumps(tr.meta.to_dict(), default=str))
events["native"] = {"etscan": _native.lib() is not None, "jsonframe": jsonframe.lib() is not None}
events["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
print("PROBE " + json.dumps(events))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("CHARLLM_TRACE_CACHE_DIR", "CHARLLM_TRACE_NATIVE", "XDG_CACHE_HOME", "CC", "PYTHONWARNINGS")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def _probe(et: Path, out: Path, env: dict[str, str], *, pythonpath: Path | None = None) -> dict:
    if pythonpath is not None:
        env = {**env, "PYTHONPATH": str(pythonpath)}
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(et), str(KINETO), str(out)],
        env=env,
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("PROBE "))
    return json.loads(line[len("PROBE ") :])


def _oracle(path: Path, monkeypatch: pytest.MonkeyPatch) -> charllm_trace.Trace:
    """The trace as the numpy code reads it (no cache)."""
    with monkeypatch.context() as m:
        m.setenv("CHARLLM_TRACE_NATIVE", "0")
        _native.reset()
        jsonframe.reset()
        try:
            (tr,) = load(path, cache=False).traces.values()
        finally:
            _native.reset()
            jsonframe.reset()
    return tr


def _same_as_oracle(out: Path, name: str, oracle: charllm_trace.Trace) -> None:
    meta = json.loads((out / f"{name}.meta.json").read_text())
    assert meta == json.loads(json.dumps(oracle.meta.to_dict(), default=str))
    keys = {"nodes": ["id"], "deps": ["node", "dep", "kind"], "telemetry": ["device", "time_ns"]}
    for table, key in keys.items():
        got = pl.read_ipc(out / f"{name}.{table}.arrow").sort(key)
        want = getattr(oracle, table).sort(key)
        assert got.schema == want.schema, table
        assert got.equals(want, null_equal=True), f"{name} {table} differs from the numpy oracle"


def _tree(d: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(d)), p.stat().st_mode) for p in d.rglob("*"))


@pytest.fixture(scope="module")
def et_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Chakra ET written from the fixture profile (the scanner's input)."""
    (tr,) = load(KINETO, cache=False).traces.values()
    p = tmp_path_factory.mktemp("et") / "rank-0.et"
    write_et(tr, p)
    return p


@pytest.mark.parametrize("module", sorted(HELPERS))
def test_helper_is_an_installed_extension_module_built_from_this_source(module: str) -> None:
    path = _native_libs.module_path(module)
    assert path is not None, f"{module} is not built: run pip install -e . (with a C compiler)"
    srcs = HELPERS[module]
    assert Path(path).resolve().parent == srcs[0].parent  # inside the package, nowhere else
    mod = importlib.import_module(module)  # the stub PyInit works
    assert not [n for n in dir(mod) if not n.startswith("__") and n != "SOURCE_SHA256"]
    if all(s.exists() for s in srcs):  # a checkout: the build must be from the sources there now
        digest = hashlib.sha256(b"".join(s.read_bytes() for s in srcs)).hexdigest()
        assert mod.SOURCE_SHA256 == digest, (
            f"{path} was built from other versions of {', '.join(s.name for s in srcs)}: "
            "rebuild with pip install -e ."
        )


def test_no_compiler_and_no_writable_cache_change_nothing(
    spawn, tmp_path: Path, et_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only cache directory, and (root ignores permissions) one that cannot even be made.
    ro = tmp_path / "ro"
    (ro / "home").mkdir(parents=True)
    (ro / "blocker").write_text("a file where the cache directory would go")
    for d in (ro / "home", ro):
        d.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    before = _tree(ro)
    outs = {}
    try:
        for case, cache in (("read-only", ro), ("not-a-directory", ro / "blocker" / "cache")):
            out = tmp_path / case
            out.mkdir()
            env = _clean_env(CC="/bin/false", XDG_CACHE_HOME=str(cache), HOME=str(ro / "home"))
            outs[case] = (out, _probe(et_file, out, env))
        if os.geteuid() != 0:
            assert _tree(ro) == before  # nothing written into the read-only directory
        executables = [p for p, _ in _tree(ro) if p.endswith((".so", ".dylib", ".dll")) or "native" in p]
    finally:
        for d in (ro, ro / "home"):
            d.chmod(stat.S_IRWXU)
    assert executables == []
    oracle = {"et": _oracle(et_file, monkeypatch), "kineto": _oracle(KINETO, monkeypatch)}
    for case, (out, ev) in outs.items():
        assert ev["native"] == {"etscan": True, "jsonframe": True}, case
        assert ev["warnings"] == [], case
        ran = [Path(p).name for p in ev["spawned"]]
        assert not COMPILERS & set(ran), f"{case}: ran {ran}"
        helpers = {
            str(Path(p).resolve())
            for p in ev["dlopen"]
            if p and Path(p).name.startswith(("_etscan", "_jsonframe"))
        }
        assert helpers == {str(Path(_native_libs.module_path(m)).resolve()) for m in HELPERS}, ev["dlopen"]
        for p in ev["dlopen"]:  # nothing from a cache directory or a temporary place
            assert p is None or "cache" not in Path(p).parts and not str(p).startswith(str(tmp_path)), p
        for name in ("et", "kineto"):
            _same_as_oracle(out, name, oracle[name])


# The unbuilt package fails on an ET and on a Kineto profile with one error each (both helpers
# are required: no slow path), and warns nothing.
UNBUILT_PROBE = r"""
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import charllm_trace as ct
    from charllm_trace.core import native_libs as _native_libs
    errors = {"et": [], "kineto": []}
    for name, path in (("et", sys.argv[1]), ("kineto", sys.argv[2])):
        for _ in range(2):
            try:
                ct.load(path, cache=False)
            except _native_libs.NativeModuleMissing as exc:
                errors[name].append(str(exc))
print("PROBE " + json.dumps({"errors": errors, "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
"""


def test_missing_modules_are_one_error_each(spawn, tmp_path: Path, et_file: Path) -> None:
    # The package as a checkout that was never built: its Python files, no compiled modules.
    site = tmp_path / "unbuilt"
    shutil.copytree(
        PKG, site / "charllm_trace", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    )
    out = tmp_path / "out"
    out.mkdir()
    env = {**_clean_env(CHARLLM_TRACE_CACHE_DIR=str(tmp_path / "cache")), "PYTHONPATH": str(site)}
    r = subprocess.run(
        [sys.executable, "-c", UNBUILT_PROBE, str(et_file), str(KINETO)],
        env=env, cwd=out, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    ev = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("PROBE "))[len("PROBE ") :])
    assert ev["warnings"] == []
    for name, module in (
        ("et", "charllm_trace.et._etscan"),
        ("kineto", "charllm_trace.converters._jsonframe"),
    ):
        assert len(ev["errors"][name]) == 2, ev  # every read fails the same way
        for e in ev["errors"][name]:
            assert f"{module} is not built" in e and "pip install -e ." in e and "\n" not in e
    # the command line: one line, no traceback, exit 3 (a broken install, not bad input)
    for path, module in (
        (et_file, "charllm_trace.et._etscan"),
        (KINETO, "charllm_trace.converters._jsonframe"),
    ):
        cli = subprocess.run(
            [sys.executable, "-m", "charllm_trace.cli.app", "analyze", "--no-cache", str(path)],
            env=env, cwd=out, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert cli.returncode == 3, cli.stderr
        (line,) = cli.stderr.strip().splitlines()
        assert line.startswith(f"error: the compiled module {module} is not built"), line


def test_a_broken_module_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    bad = tmp_path / "_etscan.cpython-bad.so"
    bad.write_bytes(b"not a shared library")
    monkeypatch.setattr(_native_libs, "module_path", lambda module: str(bad))
    monkeypatch.delenv("CHARLLM_TRACE_NATIVE", raising=False)
    _native.reset()
    jsonframe.reset()
    try:
        for _ in range(2):  # asked again: the same error, no warning
            with pytest.raises(_native.ScannerMissing, match="charllm_trace.et._etscan cannot be loaded"):
                _native.lib()
            with pytest.raises(
                _native_libs.NativeModuleMissing, match="charllm_trace.converters._jsonframe cannot be loaded"
            ):
                jsonframe.lib()
    finally:
        _native.reset()
        jsonframe.reset()
    assert not recwarn.list


def test_native_0_selects_numpy_without_a_warning(
    monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    monkeypatch.setenv("CHARLLM_TRACE_NATIVE", "0")
    _native.reset()
    jsonframe.reset()
    try:
        assert _native.lib() is None and jsonframe.lib() is None
    finally:
        _native.reset()
        jsonframe.reset()
    assert not recwarn.list


def test_nothing_compiles_at_run_time() -> None:
    """No run-time build machinery is left in the package's code."""
    for p in PKG.rglob("*.py"):
        text = p.read_text()
        for needle in ("_cbuild", '"-shared"', "'-shared'", "CDLL(str(target"):
            assert needle not in text, f"{p.relative_to(ROOT)} contains {needle}"
