"""Shared test fixtures: paths to the team's real traces and our own fixtures."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest

# Python's bytecode cache on for the test session and every process it starts (xdist workers,
# CLI children, collectors), even where the environment turns it off (PYTHONDONTWRITEBYTECODE=1,
# as on our development machines): otherwise every process compiles the package and pytest
# rewrites and compiles every test module again — 5.3 s of CPU per worker to collect the fast tier
# without the cache, 1.65 s with it (docs/benchmarks.md "The test suite in tiers"). The files go
# to __pycache__/ (ignored by git). CHARLLM_TEST_NO_BYTECODE=1 keeps the environment's choice.
if not os.environ.get("CHARLLM_TEST_NO_BYTECODE"):
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
# ../shared beside the project root; CHARLLM_SHARED overrides it.
SHARED = Path(os.environ.get("CHARLLM_SHARED", ROOT.parent / "shared"))
SHARED_TRACES = SHARED / "traces"

# The suite never writes to the user's own cache (~/.cache/charllm-trace): one directory per test
# session, unless the caller chose one. Set before any charllm_trace module reads it; child
# processes (CLI runs, collectors) inherit it.
_SESSION_CACHE: str | None = None
if "CHARLLM_TRACE_CACHE_DIR" not in os.environ:
    import tempfile

    _SESSION_CACHE = tempfile.mkdtemp(prefix="charllm-trace-test-cache-")
    os.environ["CHARLLM_TRACE_CACHE_DIR"] = _SESSION_CACHE


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SESSION_CACHE is not None:
        import shutil

        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def shared_trace(rel: str) -> Path:
    """Path of a file under ../shared/traces; skips the test when ../shared is absent."""
    p = SHARED_TRACES / rel
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} is absent (the team's shared traces); skipping")
    if not p.exists():
        raise FileNotFoundError(f"shared trace {p} is missing although ../shared exists")
    return p


@pytest.fixture
def shared() -> type:
    class _S:
        path = staticmethod(shared_trace)

    return _S


def _torch_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except Exception:
        return False


HAVE_TORCH = _torch_available()


# Hypothesis: no per-example deadline (a loaded 2-core CI machine is slow, not wrong); under CI the
# examples are derandomized so a run is reproducible. Locally the random search goes on.
try:
    from hypothesis import settings as _hsettings

    _hsettings.register_profile("charllm", deadline=None)
    _hsettings.register_profile("charllm-ci", deadline=None, derandomize=True, print_blob=True)
    _hsettings.load_profile("charllm-ci" if os.environ.get("CI") else "charllm")
except ImportError:  # hypothesis is a dev dependency
    pass


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of the test's own, with the cache switched on (and back to the
    environment's choice afterwards)."""
    from charllm_trace.et import cache as et_cache

    d = tmp_path / "cache"
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(d))
    monkeypatch.delenv("CHARLLM_TRACE_NO_CACHE", raising=False)
    et_cache.set_enabled(None)
    yield d
    et_cache.set_enabled(None)


@pytest.fixture(scope="session")
def gloo_ets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 2-rank gloo fixture run converted to one ET per rank (once per session)."""
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    out = tmp_path_factory.mktemp("gloo") / "ets"
    r = CliRunner().invoke(
        main, ["convert", str(FIXTURES / "cpu-2rank-gloo"), "-o", str(out), "--workers", "1"]
    )
    assert r.exit_code == 0, r.output
    return out


#: the shared A100 DDP profile (HTA's test data)
A100_DDP = "hta/a100_ddp_nccl_rank0.json.gz"


@pytest.fixture(params=["a100", "gloo"])
def a100_or_gloo(request: pytest.FixtureRequest, gloo_ets: Path) -> Path:
    """The shared A100 DDP profile (skipped when absent), then the 2-rank gloo ETs."""
    return shared_trace(A100_DDP) if request.param == "a100" else gloo_ets


def invoke(*args: str):
    """``charllm-trace ARGS`` in this process (exceptions raised, not caught)."""
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(params=["c", "numpy"])
def et_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Run a test with the C scanner of ETs and with the pure numpy decoder (``c`` skipped where the
    C scanner is not built)."""
    from charllm_trace.et import _native

    if request.param == "numpy":
        monkeypatch.setenv("CHARLLM_TRACE_NATIVE", "0")
    _native.reset()
    if request.param == "c" and _native.lib() is None:
        pytest.skip("the native C scanner is not built here (reinstall with a C compiler)")
    yield request.param
    monkeypatch.undo()
    _native.reset()


# -- markers set by what a test uses (issue 23, item 6) -------------------------------------------
# A test is marked by the fixtures it requests (directly or through other fixtures), so the fast
# tier (-m "not (subprocess or cluster or browser or slow)") follows from the code, not from marks
# written by hand: a test that starts processes requests `spawn`, one that drives Chromium
# `browser`, one on a Dask cluster `dask_cluster`, one on the team's traces `shared`.
FIXTURE_MARKERS = {
    "spawn": "subprocess",
    "browser": "browser",
    "dask_cluster": "cluster",
    "shared": "shared",
}


@pytest.fixture(scope="session")
def spawn():
    """The ``subprocess`` module, for tests that start processes (a CLI in a child interpreter,
    torchrun, a collector): requesting it marks the test ``subprocess``."""
    import subprocess

    return subprocess


@pytest.fixture(scope="session")
def browser():
    """``open_page(html_file, screenshot)`` in headless Chromium; the call skips the test when
    Chromium or playwright is absent (so what the test checked before still ran). Requesting it
    marks the test ``browser``."""
    from tests.helpers.browser import open_page, require_browser

    def _open(html_file: Path, screenshot: Path):
        require_browser()
        return open_page(html_file, screenshot)

    return _open


def _uses_shared_trace(item: pytest.Item) -> bool:
    """The test's function, or a module-level function it names, calls ``shared_trace``."""
    fn = getattr(item, "function", None)
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    if _names_shared_trace(code):
        return True
    glb = getattr(fn, "__globals__", {})
    return any(_names_shared_trace(getattr(glb.get(n), "__code__", None)) for n in code.co_names)


def _names_shared_trace(code) -> bool:
    """``shared_trace`` is read as a global or imported in the function."""
    return code is not None and ("shared_trace" in code.co_names or "shared_trace" in code.co_varnames)


def _is_hypothesis(item: pytest.Item) -> bool:
    fn = getattr(item, "function", None)
    return bool(getattr(fn, "is_hypothesis_test", False))


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    """The test requests (directly or through other fixtures) a fixture of module scope."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        defs and defs[-1].scope == "module"
        for defs in (info.name2fixturedefs.get(n) for n in info.names_closure)
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks and xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # a module fixture is computed once per worker that runs one of its tests: its tests go to
        # one worker (xdist_group, --dist loadgroup) unless the test names a group of its own
        if _uses_a_module_fixture(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in names:
                item.add_marker(marker)
        if "shared" not in names and ("a100_or_gloo" in names or _uses_shared_trace(item)):
            item.add_marker("shared")
        if _is_hypothesis(item):
            item.add_marker("fuzz")


#: the tier for the edit-test loop: no processes started, no cluster, no browser, nothing slow
FAST_TIER = "not (subprocess or cluster or browser or slow)"


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (every test module, its items and fixtures: about a million objects)
    lives to the end of the session: moved out of the collector's reach, so that the full
    collections the tests' own allocations trigger do not walk it each time
    (docs/benchmarks.md, "The collector and the test suite")."""
    gc.collect()
    gc.freeze()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help=f'the fast tier: only tests marked -m "{FAST_TIER}" (markers set from fixtures, conftest.py)',
    )


def pytest_configure(config: pytest.Config) -> None:
    # under pytest-xdist, tests that share one expensive module fixture (the bad-input corpus runs
    # every case once, in processes of its own) stay on one worker: xdist_group + loadgroup
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    # a worker parses the command line again (where -n alone leaves --dist at "no") and groups the
    # tests' ids only with loadgroup on: the controller says so in the worker's input
    if getattr(config, "workerinput", {}).get("charllm_loadgroup"):
        config.option.loadgroup = True
        config.pluginmanager.register(_GroupIds(), "charllm-xdist-group-ids")
    if config.getoption("--fast"):
        own = config.option.markexpr
        config.option.markexpr = f"({own}) and {FAST_TIER}" if own else FAST_TIER
        _fewer_examples()


def _fewer_examples() -> None:
    """The fast tier runs a quarter of each hypothesis test's examples (tests/helpers/fuzz_budget.py;
    set before the test modules are imported); everything runs the full count."""
    from tests.helpers import fuzz_budget

    fuzz_budget.FAST = True
    try:
        from hypothesis import settings
    except ImportError:
        return
    settings.register_profile("charllm-fast", settings(), max_examples=fuzz_budget.examples(100))
    settings.load_profile("charllm-fast")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # noqa: ANN001 (xdist's WorkerController)
    """pytest-xdist, on the controller: tell each worker that the tests are grouped."""
    if node.config.option.dist == "loadgroup":
        node.workerinput["charllm_loadgroup"] = True


class _GroupIds:
    """On a worker: the test ids carry their ``xdist_group`` (``ID@GROUP``), which is how the
    controller keeps a group on one worker. xdist 3.8 writes the suffix to ``Item._nodeid``, which
    pytest 9 no longer reads (it keeps the id in ``Item._id``): without this no group held."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        for item in items:
            names = sorted(
                {
                    str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")
                }
            )
            if names and "@" not in item.nodeid.rpartition("]")[2] and hasattr(item, "_id"):
                item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_process(request: pytest.FixtureRequest):
    """Under ``--fast``: a test that started (and waited for) a child process without requesting
    ``spawn`` fails, so the tier's rule holds by measurement, not by review (nine such tests were
    found this way: 9.8 s of child CPU in the tier). Processes started by a module or session
    fixture set up before this one are not seen."""
    if not request.config.getoption("--fast") or "spawn" in request.fixturenames:
        yield
        return
    from tests.helpers.cpu_times import children_cpu

    before = children_cpu()
    yield
    if children_cpu() > before:
        pytest.fail(
            f"{request.node.nodeid} started a child process in the fast tier: request the `spawn` "
            "fixture (tests/conftest.py FIXTURE_MARKERS), which moves it to the subprocess tier"
        )
