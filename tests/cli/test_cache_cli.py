"""`charllm-trace cache info|clear` and `--no-cache` on the reading commands."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.et import cache as et_cache

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/traces/cpu-2rank-gloo/rank-0.kineto.json.gz"


def cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def _info(*extra: str) -> dict:
    code, out = cli("cache", "info", "--json", *extra)
    assert code == 0, out
    return orjson.loads(out)


def test_info_clear_and_foreign_files(cache_dir: Path) -> None:
    code, out = cli("cache", "info")
    assert code == 0 and str(cache_dir) in out and "not created yet" in out
    assert _info()["entries"] == 0
    code, out = cli("analyze", str(FIXTURE), "--format", "json", "--no-critical-path")
    assert code == 0, out
    d = _info()
    # the converted input, the results and the printed output
    assert d["root"] == str(cache_dir) and d["entries"] == 3
    assert d["kinds"]["kineto"]["entries"] == 1 and d["kinds"]["kineto"]["bytes"] > 0
    assert d["kinds"]["results"]["entries"] == 1 and d["kinds"]["results"]["bytes"] > 0
    assert d["kinds"]["outputs"]["entries"] == 1 and d["kinds"]["outputs"]["bytes"] > 0
    assert d["kinds"]["file-index"]["entries"] >= 1
    code, out = cli("cache", "info")
    assert code == 0 and "kineto" in out and "results" in out and "1 entries" in out
    foreign = cache_dir / "my-notes.txt"
    foreign.write_text("not the tool's")
    foreign_in_kind = cache_dir / "kineto" / "keep-me"
    foreign_in_kind.write_text("not the tool's either")
    code, out = cli("cache", "clear")
    assert code == 0 and "removed 3 entries" in out, out
    assert foreign.read_text() == "not the tool's" and foreign_in_kind.exists()
    assert _info()["entries"] == 0
    assert not (cache_dir / "file-index").exists()  # emptied directories of ours go


def test_no_cache_bypasses_and_is_reset(cache_dir: Path) -> None:
    code, out = cli("analyze", str(FIXTURE), "--format", "json", "--no-critical-path", "--no-cache")
    assert code == 0, out
    assert not cache_dir.exists()
    assert et_cache.enabled()  # the flag lasts for its command only
    code, cached = cli("analyze", str(FIXTURE), "--format", "json", "--no-critical-path")
    assert code == 0 and _info()["entries"] == 3  # input, results, printed output
    code, again = cli("analyze", str(FIXTURE), "--format", "json", "--no-critical-path", "--no-cache")
    assert code == 0 and again == cached


def test_no_cache_on_report_and_info(tmp_path: Path, cache_dir: Path) -> None:
    code, out = cli("report", str(FIXTURE), "-o", str(tmp_path / "r.html"), "--no-cache")
    assert code == 0, out
    code, out = cli("info", str(FIXTURE), "--no-cache")
    assert code == 0, out
    assert not cache_dir.exists()


@pytest.mark.parametrize(
    "command",
    [
        ["analyze"],
        ["info"],
        ["report"],
        ["baseline"],
        ["check"],
        ["diff"],
        ["compare"],
        ["export", "perfetto"],
        ["export", "astra-sim"],
    ],
)
def test_every_reading_command_has_no_cache(command: list[str]) -> None:
    code, out = cli(*command, "--help")
    assert code == 0 and "--no-cache" in out


def test_prune_covers_every_kind_through_the_one_store(cache_dir: Path) -> None:
    """``cache prune --max-gb``: the least recently used entries go, of whatever kind (an input's
    tables, its results, its printed output); ``cache info`` counts every kind."""
    import os
    import time

    assert cli("analyze", str(FIXTURE), "--format", "json")[0] == 0
    kinds = _info()["kinds"]
    assert [kinds[k]["entries"] for k in ("kineto", "results", "outputs")] == [1, 1, 1]
    old = time.time() - 1000
    (entry,) = (cache_dir / "kineto").iterdir()
    os.utime(entry / "meta.json", (old, old))  # the tables: least recently used
    keep = _info()["bytes"] - kinds["kineto"]["bytes"]
    code, out = cli("cache", "prune", "--max-gb", str(keep / 1e9))
    assert code == 0 and out.startswith("removed 1 entries"), out
    kinds = _info()["kinds"]
    assert [kinds[k]["entries"] for k in ("kineto", "results", "outputs")] == [0, 1, 1]
    code, out = cli("cache", "prune", "--max-gb", "0")
    assert code == 0 and _info()["entries"] == 0, out
    assert cli("cache", "prune", "--max-gb", "-1")[0] == 2  # not a size: usage error
    code, out = cli("cache", "prune", "--max-gb", "nan")  # a float to click, but no size: refused
    assert code == 2 and "is not a size in GB" in out, out
