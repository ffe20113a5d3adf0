"""The opt-in allocator setting (charllm_trace/core/alloc.py): polars' jemalloc returns freed pages
after 100 ms when the ``charllm-trace`` command runs, never because a library was imported.

These tests check what jemalloc was configured with (its own ``stats_print`` report at exit),
not how fast memory goes back: that is a real-time figure, measured by
``benchmarks/bench_analyze.py --tools ours,ours-untuned`` (peak RSS at 1 M events).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo" / "rank-0.kineto.json.gz"

# Records the variable polars sees when it is imported (jemalloc reads it then).
HOOK = """
import os, sys
SEEN = []
def _hook(event, args):
    if event == "import" and args[0] == "polars" and not SEEN:
        SEEN.append(os.environ.get("_RJEM_MALLOC_CONF"))
sys.addaudithook(_hook)
"""


def _env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("_RJEM_MALLOC_CONF", "CHARLLM_TRACE_ALLOC")}
    return {**e, **extra}


def _run(code: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(**extra), cwd=ROOT, capture_output=True, text=True, check=True
    )


def _jemalloc_opts(stderr: str) -> dict[str, str]:
    """``opt.NAME: VALUE`` lines of jemalloc's statistics report."""
    out = {}
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("opt.") and ":" in line:
            name, value = line[4:].split(":", 1)
            out[name] = value.split()[0]
    return out


def test_import_has_no_side_effects(spawn) -> None:
    code = (
        "import os, sys; before = dict(os.environ); import charllm_trace; "
        "assert dict(os.environ) == before, 'environment changed'; "
        "assert 'polars' not in sys.modules, 'polars imported'; "
        "import charllm_trace.cli.app; assert dict(os.environ) == before and 'polars' not in sys.modules; "
        "print('ok')"
    )
    assert _run(code).stdout.split() == ["ok"]


def test_opt_in_configures_jemalloc_and_leaves_the_environment(spawn) -> None:
    code = (
        "import os, charllm_trace; from charllm_trace.core import alloc as _alloc; "
        "_alloc.POLARS_MALLOC_CONF += ',stats_print:true'; "  # jemalloc reports its options at exit
        "print(charllm_trace.tune_polars_allocator(), os.environ.get('_RJEM_MALLOC_CONF'))"
    )
    r = _run(code)
    applied, var = r.stdout.split()
    assert applied == "True"
    assert "dirty_decay_ms:100" not in var  # set for polars' import only: children are not affected
    opts = _jemalloc_opts(r.stderr)
    assert opts["dirty_decay_ms"] == "100" and opts["muzzy_decay_ms"] == "0", opts
    assert opts["background_thread"] == "true"


def test_without_opt_in_polars_keeps_its_own_settings(spawn) -> None:
    r = _run("import charllm_trace, polars", _RJEM_MALLOC_CONF="stats_print:true")
    opts = _jemalloc_opts(r.stderr)
    assert opts["dirty_decay_ms"] == "500" and opts["muzzy_decay_ms"] == "1000", opts


def test_the_command_opts_in_before_polars_loads(spawn, tmp_path: Path) -> None:
    """The command asks for the setting first thing, and it is applied when polars is imported
    (by the subcommand, if at all: a repeated analysis printed from the cache imports none);
    jemalloc's own report says what it was configured with; the variable is left as polars sets it."""
    code = (
        "import os, sys\n"
        "from charllm_trace.core import alloc as _alloc\nfrom charllm_trace.cli.app import main\n"
        "_alloc.POLARS_MALLOC_CONF += ',stats_print:true'\n"
        f"try:\n    main(['info', {str(FIXTURE)!r}], standalone_mode=False)\n"
        "finally:\n    print('POLARS', 'polars' in sys.modules, 'VAR', os.environ.get('_RJEM_MALLOC_CONF'))\n"
    )
    r = _run(code, CHARLLM_TRACE_CACHE_DIR=str(tmp_path / "cache"))
    assert "POLARS True VAR" in r.stdout, r.stdout
    assert "dirty_decay_ms:100" not in r.stdout.split("POLARS True VAR", 1)[1]  # children: polars' own
    opts = _jemalloc_opts(r.stderr)
    assert opts["dirty_decay_ms"] == "100" and opts["muzzy_decay_ms"] == "0", opts
    assert opts["background_thread"] == "true"
    assert opts["narenas"] != "1"  # jemalloc's own number (4 per CPU): one is for a driver only
    # a command that never imports polars (a repeated analysis, printed from the output cache)
    # leaves it out, and the environment alone
    again = (
        "import os, sys\nbefore = dict(os.environ)\nfrom charllm_trace.cli.app import main\n"
        f"try:\n    main(['analyze', {str(FIXTURE)!r}, '--format', 'json'], standalone_mode=False)\n"
        "finally:\n    print('POLARS', 'polars' in sys.modules, 'ENV', dict(os.environ) == before)\n"
    )
    first = _run(again, CHARLLM_TRACE_CACHE_DIR=str(tmp_path / "cache"))
    assert "POLARS True" in first.stdout
    r = _run(again, CHARLLM_TRACE_CACHE_DIR=str(tmp_path / "cache"))
    assert "POLARS False ENV True" in r.stdout, r.stdout
    # a library user who does not opt in gets polars' defaults
    r = _run(HOOK + "import charllm_trace as ct\nct.load(" + repr(str(FIXTURE)) + ")\nprint('SEEN', SEEN)",
             CHARLLM_TRACE_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    assert "SEEN [None]" in r.stdout, r.stdout


def test_a_command_driving_workers_loads_polars_with_one_arena(spawn, tmp_path: Path) -> None:
    """``--scheduler``: the process that drives the workers (and merges their small frames) asks
    for one jemalloc arena before polars loads (``core/alloc.one_arena_for_driver``); its
    output is what it was, and the variable is left as polars sets it."""
    code = (
        "import os, sys\n"
        "from charllm_trace.core import alloc as _alloc\nfrom charllm_trace.cli.app import main\n"
        "_alloc.POLARS_MALLOC_CONF += ',stats_print:true'\n"
        f"try:\n    main(['info', {str(FIXTURE)!r}, '--scheduler', 'local:1'], standalone_mode=False)\n"
        "finally:\n    print('VAR', os.environ.get('_RJEM_MALLOC_CONF'))\n"
    )
    r = _run(code, CHARLLM_TRACE_CACHE_DIR=str(tmp_path / "cache"))
    assert "narenas:1" not in r.stdout.split("VAR", 1)[1]  # the workers and children: polars' own
    assert r.stderr.count("Begin jemalloc statistics") == 1  # this process's (workers: no report)
    opts = _jemalloc_opts(r.stderr)
    assert opts["narenas"] == "1" and opts["dirty_decay_ms"] == "100", opts
    here = _run(code.replace(", '--scheduler', 'local:1'", ""), CHARLLM_TRACE_CACHE_DIR=str(tmp_path / "c2"))
    assert _jemalloc_opts(here.stderr)["narenas"] != "1"
    assert here.stdout.split("VAR")[0] == r.stdout.split("VAR")[0]  # the same summary either way
    # asked for after polars is in, or with the user's own setting: nothing changes
    late = _run("import polars; from charllm_trace.core import alloc; print(alloc.one_arena_for_driver())")
    assert late.stdout.split() == ["False"]
    mine = _run(
        "from charllm_trace.core import alloc; print(alloc.one_arena_for_driver())",
        _RJEM_MALLOC_CONF="narenas:4",
    )
    assert mine.stdout.split() == ["False"]


def test_a_users_own_setting_or_opt_out_wins(spawn) -> None:
    code = (
        "import os, sys; import charllm_trace; from charllm_trace.core import alloc as _alloc; "
        "print(_alloc.tune_polars_allocator(), os.environ.get('_RJEM_MALLOC_CONF'))"
    )
    mine = _run(code, _RJEM_MALLOC_CONF="dirty_decay_ms:5000").stdout.split()
    assert mine == ["False", "dirty_decay_ms:5000"]  # charllm-trace added nothing
    off = _run(code, CHARLLM_TRACE_ALLOC="default").stdout.split()
    assert off == ["False", "None"]
    late = _run("import polars, charllm_trace; print(charllm_trace.tune_polars_allocator())").stdout.split()
    assert late == ["False"]  # nothing to do once polars is in


# Reading a Kineto profile calls malloc_trim only where the process opted in (the command does).
TRIM_PROBE = r"""
import ctypes, sys
import charllm_trace as ct
from charllm_trace.core import alloc as _alloc
calls = []
class Fake:
    def __call__(self, pad):
        calls.append(pad)
        return 1
_alloc._MALLOC_TRIM = Fake()
if sys.argv[2] == "opt-in":
    ct.trim_heap_after_reads()
ct.load(sys.argv[1], cache=False)
print("TRIMS", len(calls), _alloc.trim_heap_enabled())
"""


@pytest.mark.parametrize("mode", ["library", "opt-in"])
def test_heap_trim_only_after_opt_in(spawn, mode: str) -> None:
    kineto = ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo" / "rank-0.kineto.json.gz"
    r = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE, str(kineto), mode],
        env=_env(), cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("TRIMS ")]
    _, n, enabled = line.split()
    if mode == "library":
        assert (n, enabled) == ("0", "False")
    else:
        assert int(n) >= 2 and enabled == "True"  # after the read and after the build


def test_the_command_opts_in_to_heap_trim(spawn) -> None:
    code = (
        "from click.testing import CliRunner; from charllm_trace.cli import app as cli; from charllm_trace.core import alloc as _alloc; "
        "r = CliRunner().invoke(cli.main, ['cache', '--help']); "
        "print(r.exit_code, _alloc.trim_heap_enabled())"
    )
    assert _run(code).stdout.split() == ["0", "True"]
