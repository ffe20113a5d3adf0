"""Saved analysis results (issue 12 item 5): load(save(r)) == r, frames and scalars; tables, JSON and
the HTML report drawn from loaded results byte-identical to those drawn from fresh ones; damaged,
foreign and other-version files refused with one line naming the file (exit 2 in the CLI)."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.cli.app import main
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run
from charllm_trace.inputs import loader
from charllm_trace.render.export import to_json
from charllm_trace.render.report import drawn_run, render_report, report_data, report_data_from, report_views
from charllm_trace.render.tables import render_analysis
from charllm_trace.store.results import (
    MANIFEST,
    is_results_file,
    load_results,
    read_results,
    results_bytes,
    save_results,
)
from tests.conftest import FIXTURES, shared_trace
from tests.helpers.results_helpers import differences, n_frames, with_telemetry

GLOO = FIXTURES / "cpu-2rank-gloo"
FULL = AnalyzeOptions(per_step=True, what_if={"comm": 0.5, "launch": 0.0}, parallel={"dp": 2})


def _tables(res) -> str:
    buf = io.StringIO()
    render_analysis(res, Console(file=buf, width=120, force_terminal=False, color_system=None))
    return buf.getvalue()


def _round_trip(run: Run, options: AnalyzeOptions, tmp_path: Path) -> None:
    an = analyze_run(run, options)
    views = report_views(drawn_run(run, an), an.classified)
    tmp_path.mkdir(exist_ok=True)
    path = save_results(an, tmp_path / "r.zip", views=views)
    assert is_results_file(path)
    saved = read_results(path)
    back = saved.analysis
    assert differences(an, back) == []
    assert n_frames(back) == n_frames(an) > 0
    assert to_json(back) == to_json(an)
    assert _tables(back) == _tables(an)
    fresh = render_report(report_data(drawn_run(run, an), an, "T"))  # as the CLI draws it
    again = render_report(report_data_from(saved.views(), back, "T"))
    assert again == fresh


def test_gloo_round_trip(tmp_path: Path) -> None:
    _round_trip(loader.load(GLOO, cache=False), FULL, tmp_path)


def test_gloo_with_telemetry_round_trip(tmp_path: Path) -> None:
    """Energy, power, throttle frames and the report's device charts (with throttle spans)."""
    run = with_telemetry(loader.load(GLOO, cache=False))
    an = analyze_run(run, FULL)
    assert an.energy is not None and an.power is not None and an.power.throttle.height
    views = report_views(run, an.classified)
    assert views.devices and any(d.throttle for d in views.devices)
    _round_trip(run, FULL, tmp_path)


@pytest.mark.parametrize(
    "rel",
    ["hta/a100_ddp_nccl_rank0.json.gz", "hta/trace_filter_2ranks", "hta/mi250_minitoy_kineto.json.gz"],
)
def test_shared_round_trip(rel: str, tmp_path: Path) -> None:
    run = loader.load(shared_trace(rel), cache=False)
    _round_trip(run, FULL, tmp_path)
    _round_trip(with_telemetry(run), AnalyzeOptions(critical_path=False, hta_compat=True), tmp_path / "b")


def test_untimed_simulated_round_trip(tmp_path: Path) -> None:
    """A Chakra-written ET without timestamps: skipped reasons kept; simulated, the lanes drawn."""
    run = loader.load(shared_trace("chakra/feeder_tests_chakra.0.et"), cache=False)
    _round_trip(run, AnalyzeOptions(critical_path=False), tmp_path)
    _round_trip(run, AnalyzeOptions(simulate=True, per_step=True), tmp_path / "sim")


@pytest.fixture(scope="module")
def saved_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gloo run analysed with every option and saved, once for the module (1.3 s of CPU)."""
    run = loader.load(GLOO, cache=False)
    an = analyze_run(run, FULL)
    return save_results(
        an, tmp_path_factory.mktemp("saved") / "r.zip", views=report_views(run, an.classified)
    )


@pytest.fixture
def saved(saved_once: Path, tmp_path: Path) -> Path:
    """A copy of the saved results of the test's own (a test may replace or damage it)."""
    copy = tmp_path / "r.zip"
    shutil.copyfile(saved_once, copy)
    return copy


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """A copy of the zip ``src`` with its manifest passed through ``edit`` (members otherwise kept)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name == MANIFEST:
                body = json.loads(data)
                edit(body)
                data = json.dumps(body).encode()
            zout.writestr(name, data)
    return dst


def _bad_files(saved: Path, d: Path) -> dict[str, Path]:
    data = saved.read_bytes()
    out = {}

    def put(name: str, content: bytes) -> None:
        out[name] = d / f"{name}.zip"
        out[name].write_bytes(content)

    put("empty", b"")
    put("truncated", data[: len(data) // 2])
    put("truncated-end", data[:-10])
    put("not-zip", b"PK\x03\x04 but nothing else")
    with zipfile.ZipFile(saved) as zf:
        frame = next(n for n in zf.namelist() if n.startswith("frames/"))
        info = zf.getinfo(frame)
    at = info.header_offset + 30 + len(info.filename) + info.file_size // 2  # inside the member's data
    flipped = bytearray(data)
    flipped[at] ^= 0xFF
    put("flipped", bytes(flipped))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("something.txt", "hello")
    put("foreign-zip", buf.getvalue())
    out["other-version"] = _rewrite(saved, d / "v.zip", lambda b: b.update(version=99))
    out["other-format"] = _rewrite(saved, d / "f.zip", lambda b: b.update(format="x"))
    out["member-sum"] = _rewrite(
        saved, d / "s.zip", lambda b: b["members"][next(iter(b["members"]))].update(sha256="0" * 64)
    )
    out["extra-field"] = _rewrite(saved, d / "e.zip", lambda b: b["analysis"].update(extra=1))
    out["missing-field"] = _rewrite(saved, d / "m.zip", lambda b: b["analysis"].pop("ranks"))
    out["option-field"] = _rewrite(saved, d / "o.zip", lambda b: b["analysis"]["options"].update(new=1))
    out["wrong-type"] = _rewrite(saved, d / "t.zip", lambda b: b["analysis"].update(ranks="0,1"))
    out["wrong-option-type"] = _rewrite(
        saved, d / "ot.zip", lambda b: b["analysis"]["options"].update(what_if={"comm": "fast"})
    )
    out["wrong-note-type"] = _rewrite(
        saved, d / "nt.zip", lambda b: b["analysis"]["overlap"]["values"].update(notes=[1])
    )
    return out


def test_damaged_and_foreign_files_refused(saved: Path, tmp_path: Path) -> None:
    for name, p in _bad_files(saved, tmp_path).items():
        with pytest.raises(InputError) as err:
            load_results(p)
        line = err.value.one_line()
        assert str(p) in line and "\n" not in line, (name, line)


def test_every_flipped_byte_is_caught_or_harmless(saved: Path, tmp_path: Path) -> None:
    """Flip bytes across the whole file: each copy is refused (InputError) or, where the byte is
    zip bookkeeping no reader uses (a time stamp, an attribute), loads the same analysis."""
    data = saved.read_bytes()
    fresh = read_results(saved)
    want = to_json(fresh.analysis)
    refused = 0
    for at in range(0, len(data), max(1, len(data) // 400)):
        bad = bytearray(data)
        bad[at] ^= 0x5A
        p = tmp_path / "x.zip"
        p.write_bytes(bytes(bad))
        try:
            got = read_results(p)
        except InputError as exc:
            assert "\n" not in exc.one_line()
            refused += 1
            continue
        assert to_json(got.analysis) == want, at
        assert len(got.views().lanes) == len(fresh.views().lanes)
    assert refused > 0


def test_no_views_saved(tmp_path: Path) -> None:
    an = analyze_run(loader.load(GLOO, cache=False), AnalyzeOptions())
    p = save_results(an, tmp_path / "r.zip")
    s = read_results(p)
    assert not s.has_views and differences(an, s.analysis) == []
    with pytest.raises(InputError, match="no report data"):
        s.views()
    r = CliRunner().invoke(main, ["report", str(p), "-o", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "no report data" in r.output


def test_save_refuses_existing(saved: Path) -> None:
    with pytest.raises(InputError, match="already exists"):
        save_results(load_results(saved), saved)
    save_results(load_results(saved), saved, force=True)
    assert read_results(saved).has_views is False  # replaced (without views)


def test_read_from_bytes() -> None:
    an = analyze_run(loader.load(GLOO, cache=False), AnalyzeOptions())
    data = results_bytes(an)
    assert data[:4] == b"PK\x03\x04"
    assert differences(an, read_results("in-memory", data).analysis) == []


# --- the command line -------------------------------------------------------------


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_cli_save_and_redraw(tmp_path: Path) -> None:
    r = str(tmp_path / "r.zip")
    a = _cli("analyze", str(GLOO), "--per-step", "--format", "json", "--save", r, "--no-cache")
    assert a.exit_code == 0, a.output
    b = _cli("analyze", r, "--format", "json")
    assert b.exit_code == 0, b.output
    assert b.stdout == a.stdout and f"wrote {r}" in a.stderr
    t1 = _cli("analyze", str(GLOO), "--per-step", "--no-cache")
    t2 = _cli("analyze", r)
    assert t1.exit_code == t2.exit_code == 0 and t1.stdout == t2.stdout
    csv1, csv2 = tmp_path / "a.csv", tmp_path / "b.csv"
    assert _cli("analyze", str(GLOO), "--per-step", "--format", "csv", "-o", str(csv1)).exit_code == 0
    assert _cli("analyze", r, "--format", "csv", "-o", str(csv2)).exit_code == 0
    for f in tmp_path.glob("a.*.csv"):
        assert f.read_bytes() == (tmp_path / f.name.replace("a.", "b.", 1)).read_bytes()
    # the report from analyze's saved results: the same page as a report of the trace with the same analysis
    h1, h2 = tmp_path / "1.html", tmp_path / "2.html"
    rep = _cli("report", r, "-o", str(h1))
    assert rep.exit_code == 0, rep.output
    s2 = str(tmp_path / "s2.zip")
    assert _cli("report", str(GLOO), "-o", str(h2), "--save", s2, "--no-cache").exit_code == 0
    h3 = tmp_path / "3.html"
    assert _cli("report", s2, "-o", str(h3)).exit_code == 0
    assert h3.read_bytes() == h2.read_bytes()
    assert h1.read_bytes() == h2.read_bytes()  # analyze --per-step analyses as report does
    assert "cpu-2rank-gloo" in h1.read_text()  # the default title names the analysed input


def test_cli_refuses_analysis_options_on_results(saved: Path, tmp_path: Path) -> None:
    for args in (
        ["analyze", str(saved), "--per-step"],
        ["analyze", str(saved), "--ranks", "0"],
        ["analyze", str(saved), "--what-if", "comm=0.5"],
        ["analyze", str(saved), "--save", str(tmp_path / "again.zip")],
        ["report", str(saved), "-o", str(tmp_path / "x.html"), "--simulate"],
        ["report", str(saved), "-o", str(tmp_path / "x.html"), "--peak-gbps", "10"],
    ):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.count("\n") == 1 and str(saved) in r.output and "cannot change" in r.output


def test_cli_bad_results_file(saved: Path, tmp_path: Path) -> None:
    for name, p in _bad_files(saved, tmp_path).items():
        if name == "empty":
            continue  # an empty file is not a zip: the trace loader's "file is empty"
        for args in (["analyze", str(p)], ["report", str(p), "-o", str(tmp_path / "x.html")]):
            r = CliRunner().invoke(main, args)
            assert r.exit_code == 2, (name, args, r.output)
            assert r.output.startswith("error: ") and r.output.count("\n") == 1 and str(p) in r.output


def test_cli_save_refuses_existing_before_analysing(saved: Path) -> None:
    r = CliRunner().invoke(main, ["analyze", str(GLOO), "--save", str(saved), "--no-cache"])
    assert r.exit_code == 2 and "already exists" in r.output


def test_other_commands_name_a_results_file(saved: Path, tmp_path: Path) -> None:
    for args in (
        ["info", str(saved)],
        ["baseline", str(saved), "-o", str(tmp_path / "b.json")],
        ["export", "perfetto", str(saved), "-o", str(tmp_path / "p.json")],
    ):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and r.output.count("\n") == 1, (args, r.output)
        assert str(saved) in r.output and "'analyze' and 'report'" in r.output
