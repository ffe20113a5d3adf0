"""Results files saved before a result type (or a field of one) existed: the missing results load as
None with the reason in ``skipped``; a result saved without a field this version has is refused with
one line naming the file and the field (exit 2 in the CLI), never an internal error."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.cli.app import main
from charllm_trace.core.errors import InputError
from charllm_trace.inputs import loader
from charllm_trace.render.export import to_json
from charllm_trace.store.results import MANIFEST, load_results, save_results
from tests.conftest import FIXTURES

GLOO = FIXTURES / "cpu-2rank-gloo"
#: what a file of charllm-trace 0.1.0 before issue 13 lacks (commit ff777a1 wrote such files)
LATER = ("idle_time", "launch", "config", "breakdown", "flops")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = loader.load(GLOO, cache=False)
    an = analyze_run(run, AnalyzeOptions(per_step=True))
    assert an.overlap is not None and an.flops is not None
    return save_results(an, tmp_path_factory.mktemp("old") / "r.zip")


def _older(src: Path, dst: Path, drop: tuple[str, ...], drop_fields: dict[str, str] | None = None) -> Path:
    """A copy of ``src`` as an older version wrote it: without the results ``drop`` (their frames
    and manifest entries), the option ``breakdown_top``, and the fields ``drop_fields`` (result ->
    field) of the results it keeps."""
    with zipfile.ZipFile(src) as zin:
        body = json.loads(zin.read(MANIFEST))
        members = {n: zin.read(n) for n in zin.namelist() if n != MANIFEST}
    an = body["analysis"]
    for k in drop:
        del an[k]
        an["skipped"].pop(k, None)  # nor a reason for a result that did not exist
    del an["options"]["breakdown_top"]
    for res, fld in (drop_fields or {}).items():
        an[res]["frames"].pop(fld, None)
        an[res]["values"].pop(fld, None)
    used = {m for part in an.values() if isinstance(part, dict) for m in part.get("frames", {}).values()}
    members = {n: b for n, b in members.items() if n in used or not n.startswith("frames/")}
    body["members"] = {n: v for n, v in body["members"].items() if n in members}
    body["written_by"] = "charllm-trace 0.1.0"
    with zipfile.ZipFile(dst, "w") as zout:
        zout.writestr(MANIFEST, json.dumps(body))
        for n, b in members.items():
            zout.writestr(n, b)
    return dst


def test_results_added_later_load_as_none_with_a_reason(saved: Path, tmp_path: Path) -> None:
    new = load_results(saved)
    old = load_results(_older(saved, tmp_path / "old.zip", LATER))
    for k in LATER:
        assert getattr(old, k) is None
    for k in ("idle_time", "launch", "breakdown", "flops"):
        assert old.skipped[k].startswith("not in this results file (written by charllm-trace 0.1.0)")
    assert "config" not in old.skipped  # an unknown configuration is None, as for a trace without one
    assert old.options.breakdown_top is None
    # what the file has is read as saved
    assert old.overlap is not None and old.overlap.per_rank.equals(new.overlap.per_rank)
    assert old.bandwidth is not None and old.bandwidth.summary.equals(new.bandwidth.summary)
    r = CliRunner().invoke(main, ["analyze", str(tmp_path / "old.zip")])
    assert r.exit_code == 0, r.output
    assert "Compute / communication overlap" in r.output and "not in this results file" in r.output
    assert b"frames" in to_json(old)


def test_result_without_a_later_field_is_one_line(saved: Path, tmp_path: Path) -> None:
    p = _older(saved, tmp_path / "old.zip", LATER, {"overlap": "rank_spread"})
    with pytest.raises(InputError) as exc:
        load_results(p)
    assert "overlap: saved without rank_spread" in str(exc.value) and str(p) in str(exc.value)
    for args in (["analyze", str(p)], ["report", str(p), "-o", str(tmp_path / "x.html")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.startswith("error: ") and r.output.count("\n") == 1
        assert "saved without rank_spread" in r.output and "analyse the trace again" in r.output


def test_json_flag_draws_saved_results(saved: Path) -> None:
    """``analyze RESULTS --json`` is ``--format json`` (a format, not an analysis option): it was
    refused as an option that would change the saved analysis."""
    a = CliRunner().invoke(main, ["analyze", str(saved), "--json"])
    b = CliRunner().invoke(main, ["analyze", str(saved), "--format", "json"])
    assert a.exit_code == b.exit_code == 0, a.output
    assert a.output == b.output and a.output.startswith("{")
