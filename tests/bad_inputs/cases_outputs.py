"""Output places and options of the writers (issue 28): a user's directory or dangling link where
an output goes, a parent that is a file, names too long for the file system, labels whose values
overflow int64 or hold terminal escapes. Each is one line, exit 2, and nothing of the user's is
replaced (a dangling link is the user's too: ``--force`` is needed to replace it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tests.bad_inputs import valid
from tests.bad_inputs.registry import CASES, Case

RUN = str(valid.FIXTURE_RUN)


def _case(name: str, needles: tuple[str, ...]) -> Callable[[Callable[[Path], list[str]]], None]:
    def register(build: Callable[[Path], list[str]]) -> None:
        CASES.append(Case(f"outputs:{name}/{build.__name__.lstrip('_').split('__')[0]}", build, needles))

    return register


@_case("astra_output_is_a_directory", ("trace.0.et", "is a directory"))
def _astra(d: Path) -> list[str]:
    (d / "astra" / "trace.0.et").mkdir(parents=True)
    return ["export", "astra-sim", RUN, "-o", str(d / "astra"), "--force"]


@_case("astra_prefix_300_characters", ("astra", "longer than 255 bytes"))
def _astra__prefix(d: Path) -> list[str]:
    return ["export", "astra-sim", RUN, "-o", str(d / "astra"), "--prefix", "p" * 300]


@_case("astra_dangling_link", ("trace.comm_group.json", "already exists"))
def _astra__link(d: Path) -> list[str]:
    (d / "astra").mkdir()
    os.symlink(d / "nowhere", d / "astra" / "trace.comm_group.json")
    return ["export", "astra-sim", RUN, "-o", str(d / "astra")]


@_case("json_dangling_link", ("L.json", "already exists"))
def _analyze(d: Path) -> list[str]:
    os.symlink(d / "nowhere", d / "L.json")
    return ["analyze", RUN, "--format", "json", "-o", str(d / "L.json")]


@_case("json_under_a_file", ("file.tex", "not a directory"))
def _analyze__json(d: Path) -> list[str]:
    (d / "file.tex").write_text("mine")
    return ["analyze", RUN, "--format", "json", "-o", str(d / "file.tex" / "x")]


@_case("csv_under_a_file", ("file.tex", "not a directory"))
def _analyze__csv(d: Path) -> list[str]:
    (d / "file.tex").write_text("mine")
    return ["analyze", RUN, "--format", "csv", "-o", str(d / "file.tex" / "x")]


@_case("json_name_300_characters", ("longer than 255 bytes",))
def _analyze__long(d: Path) -> list[str]:
    return ["analyze", RUN, "--format", "json", "-o", str(d / ("p" * 300 + ".json"))]


@_case("label_gbs_2_62", ("gbs=4611686018427387904", "2**63"))
def _compare(d: Path) -> list[str]:
    return ["compare", RUN, RUN, "--label", "gbs=4611686018427387904", "--label", "seq=4"]


@_case("label_terminal_escape", ("--label", "control characters"))
def _compare__escape(d: Path) -> list[str]:
    return ["compare", RUN, RUN, "--label", "run=\x1b[31mred"]
