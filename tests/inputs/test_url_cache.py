"""URLs with the cache on (issue 28): ``analyze``, ``report`` and ``compare`` of a ``file://`` URL
give what they give with ``--no-cache`` (they used to look the URL up as a local path and say
``file:/...: no such file or directory``), and an error names the URL as given (``//`` kept)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from tests.conftest import FIXTURES

pytest.importorskip("fsspec")
KINETO = FIXTURES / "cpu-2rank-gloo" / "rank-0.kineto.json.gz"


def _ok(*args: str) -> str:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.stdout


def test_analyze_and_compare_of_a_url_with_the_cache_on(cache_dir: Path) -> None:
    url = KINETO.resolve().as_uri()
    assert url.startswith("file:///")
    opts = ("--format", "json", "--no-critical-path")
    cached = _ok("analyze", url, *opts)
    assert cached == _ok("analyze", url, *opts, "--no-cache")
    assert cached == _ok("analyze", url, *opts)  # again, with whatever the first run stored
    table = _ok("compare", url, str(KINETO))
    assert table == _ok("compare", url, str(KINETO), "--no-cache")


def test_report_of_a_url_with_the_cache_on(cache_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    _ok("report", KINETO.resolve().as_uri(), "-o", str(out))
    assert out.stat().st_size > 0


def test_a_missing_url_is_named_as_given(cache_dir: Path, tmp_path: Path) -> None:
    url = (tmp_path / "absent.json").as_uri()
    r = CliRunner().invoke(main, ["analyze", url])
    assert r.exit_code == 2 and r.stderr.strip().splitlines() == [f"error: {url}: no such file or directory"]
