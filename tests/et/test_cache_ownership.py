"""The cache deletes only what it wrote (issue 28): ``CHARLLM_TRACE_CACHE_DIR`` may be a folder of
the user's holding files named like entries (64 hex digits) and temporaries (``.<16 hex>-...``).
``cache clear``, the size cap and the damaged-entry clean-up look for the marker the tool writes
(charllm_trace/et/cache_owner.py) before deleting; a bad size cap is a one-line error."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.et import cache as et_cache

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/traces/cpu-2rank-gloo/rank-0.kineto.json.gz"
HEX = "ab" * 32


def _users_files(root: Path) -> dict[Path, str]:
    """The files of the issue's report: named like entries and a temporary, none written by us."""
    files = {
        root / "et" / HEX: "my et notes",
        root / "run" / HEX / "data.txt": "my data",
        root / "kineto" / ".0123456789abcdef-draft" / "x.txt": "my draft",
        root / "results" / HEX: "my results",
        root / "compare" / HEX: '{"mine": 1}',
        root / "outputs" / HEX: '{"my": "output"}',
        root / "et-index" / HEX: "not an index record",
    }
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    old = time.time() - 2 * et_cache.STALE_S  # "stale", were it a temporary of ours
    os.utime(root / "kineto" / ".0123456789abcdef-draft", (old, old))
    return files


def _analyze() -> None:
    r = CliRunner().invoke(main, ["analyze", str(FIXTURE), "--format", "json", "--no-critical-path"])
    assert r.exit_code == 0, r.output


def test_clear_removes_only_marked_entries(cache_dir: Path) -> None:
    files = _users_files(cache_dir)
    _analyze()
    # the converted profile, its results and the printed output; none of the user's
    assert et_cache.info()["entries"] == 3
    r = CliRunner().invoke(main, ["cache", "clear"])
    assert r.exit_code == 0 and "removed 3 entries" in r.output, r.output
    for p, text in files.items():
        assert p.read_text() == text, p
    assert et_cache.info()["entries"] == 0


def test_size_cap_prunes_only_marked_entries(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _users_files(cache_dir)
    _analyze()
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_MAX_GB", "0")
    et_cache.prune()
    for p, text in files.items():
        assert p.read_text() == text, p
    assert et_cache.info()["entries"] == 0  # ours went


def test_an_entry_without_marker_is_never_deleted_as_corrupt(cache_dir: Path) -> None:
    """A directory under our kind's folder, at the very key of an input, without our marker: the
    input is converted without the cache, the directory stays."""
    _analyze()
    (entry,) = (cache_dir / "kineto").iterdir()
    for f in entry.iterdir():
        f.unlink()
    (entry / "meta.json").write_text("my own meta")
    r = CliRunner().invoke(main, ["info", str(FIXTURE)])  # reads the converted profile
    assert r.exit_code == 0, r.output
    assert "not a cache entry of charllm-trace; left alone" in r.stderr
    assert (entry / "meta.json").read_text() == "my own meta"


@pytest.mark.parametrize("value", ["lots", "-1", "nan"])
def test_a_bad_size_cap_is_one_line(cache_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_MAX_GB", value)
    for argv in (["cache", "info"], ["analyze", str(FIXTURE), "--no-critical-path"]):
        r = CliRunner().invoke(main, argv)
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2, (argv, r.output)
        assert len(lines) == 1 and lines[0].startswith("error: ") and "CHARLLM_TRACE_CACHE_MAX_GB" in lines[0]
