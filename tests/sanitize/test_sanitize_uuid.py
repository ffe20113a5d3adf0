"""Sanitize maps device UUIDs to stable pseudonyms and drops ``pid_start`` (issue 28): a UUID
identifies a physical GPU. The H200 fixture's UUID (``GPU-8286b0b5-...`` in the manifest and the
telemetry metadata, bare in the rank info) is gone from every output file, both forms map to one
pseudonym, and the rank -> GPU mapping by UUID still gives the same energy."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from charllm_trace.analysis import analyze_run
from charllm_trace.cli.app import main
from charllm_trace.inputs.loader import load
from tests.conftest import FIXTURES

H200 = FIXTURES / "h200-1rank-nccl"
UUID = "8286b0b5-9928-5cac-a3b1-2e65b0a40879"


def _text(p: Path) -> str:
    raw = p.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode(errors="replace")


def test_uuid_pseudonym_and_no_pid_start(tmp_path: Path) -> None:
    assert (
        UUID in (H200 / "rank-0.info.json").read_text()
        and "pid_start" in (H200 / "rank-0.info.json").read_text()
    )
    out = tmp_path / "clean"
    r = CliRunner().invoke(main, ["sanitize", str(H200), "-o", str(out)])
    assert r.exit_code == 0, r.output
    texts = {p.name: _text(p) for p in out.iterdir() if p.is_file()}
    for name, t in texts.items():
        assert UUID not in t.lower() and "pid_start" not in t, name
    fake = "00000000-0000-4000-8000-000000000000"
    assert f'"GPU-{fake}"' in texts["manifest.json"] and f'"{fake}"' in texts["rank-0.info.json"]
    before = analyze_run(load(H200, cache=False)).energy
    after = analyze_run(load(out, cache=False)).energy
    assert before is not None and after is not None
    assert after.totals["total_j"].to_list() == pytest.approx(before.totals["total_j"].to_list(), rel=1e-12)
