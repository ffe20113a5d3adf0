"""Saved results (``analyze --save`` zips) edited by a sender (issue 28): each case changes a valid
results file of the collected gloo run and rewrites the manifest's member table (sizes and
SHA-256s), as a sender can, so only the checks of what the members hold stand in the way."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bad_inputs import valid
from tests.bad_inputs.registry import CASES, Case

MANIFEST = "charllm-results.json"
PER_RANK = "frames/overlap.per_rank.arrow"
_VALID: dict[str, dict[str, bytes]] = {}


def _valid_members() -> dict[str, bytes]:
    """The members of a results file of the gloo run with the report's views (made once)."""
    if not _VALID:
        import tempfile

        from click.testing import CliRunner

        from charllm_trace.cli.app import main

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.zip"
            r = CliRunner().invoke(
                main, ["analyze", str(valid.FIXTURE_RUN), "--save", str(out), "--no-cache"]
            )
            assert r.exit_code == 0, r.output
            with zipfile.ZipFile(out) as zf:
                _VALID["m"] = {n: zf.read(n) for n in zf.namelist()}
    return dict(_VALID["m"])


def _write(p: Path, members: dict[str, bytes], doc: dict[str, Any] | None = None) -> Path:
    doc = doc if doc is not None else json.loads(members[MANIFEST])
    doc["members"] = {
        n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
        for n, b in members.items()
        if n != MANIFEST
    }
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(MANIFEST, json.dumps(doc))
        for n, b in members.items():
            if n != MANIFEST:
                zf.writestr(n, b)
    return p


def _ipc(df: Any) -> bytes:
    b = io.BytesIO()
    df.write_ipc(b, compression="zstd")
    return b.getvalue()


def _frame_bomb(d: Path) -> Path:
    """A 400 MB column of zeros, zstd-compressed to a few KB, as the overlap frame."""
    import numpy as np
    import polars as pl

    m = _valid_members()
    m[PER_RANK] = _ipc(pl.DataFrame({"rank": np.zeros(50_000_000, dtype=np.int64)}))
    return _write(d / "res.zip", m)


def _frame(change: Callable[[Any], Any]) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        import polars as pl

        m = _valid_members()
        m[PER_RANK] = _ipc(change(pl.read_ipc(io.BytesIO(m[PER_RANK]))))
        return _write(d / "res.zip", m)

    return make


def _doc(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        m = _valid_members()
        doc = json.loads(m[MANIFEST])
        change(doc)
        return _write(d / "res.zip", m, doc)

    return make


def _encrypted(d: Path) -> Path:
    """The encrypted flag (bit 0) set on the first member, in its local and central headers."""
    p = _write(d / "res.zip", _valid_members())
    data = bytearray(p.read_bytes())
    data[6] |= 1  # local header: general purpose flags at offset 6
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(b"PK\x05\x06"))
    first = data.find(b"PK\x01\x02")
    assert 0 < first <= central
    data[first + 8] |= 1  # central directory header: flags at offset 8
    p.write_bytes(bytes(data))
    return p


def _deep_manifest(d: Path) -> Path:
    p = d / "res.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr(MANIFEST, "[" * 200_000 + "]" * 200_000)
    return p


def _set_window(doc: dict[str, Any]) -> None:
    doc["views"]["lanes"][0]["window"] = [float("inf"), 1]


def _set_ranks(doc: dict[str, Any]) -> None:
    doc["analysis"]["ranks"] = [10**30]


def _set_view_rank(doc: dict[str, Any]) -> None:
    doc["views"]["lanes"][0]["rank"] = -3


def _drop_rank(df: Any) -> Any:
    return df.drop("rank")


def _rank_as_text(df: Any) -> Any:
    import polars as pl

    return df.with_columns(pl.col("rank").cast(pl.String))


for _name, _make, _needles in [
    ("frame_zstd_bomb", _frame_bomb, ("res.zip", "Arrow frames decode to more than")),
    ("frame_without_rank", _frame(_drop_rank), ("res.zip", "frame overlap: no column 'rank'")),
    ("frame_rank_as_text", _frame(_rank_as_text), ("res.zip", "frame overlap: column 'rank' of type String")),
    ("encrypted_member", _encrypted, ("res.zip", "encrypted")),
    ("manifest_nested_200k", _deep_manifest, ("res.zip", "corrupt charllm-trace results")),
    ("view_window_infinity", _doc(_set_window), ("res.zip", "lane window")),
    ("analysis_rank_1e30", _doc(_set_ranks), ("res.zip", "rank 1000000000000000000000000000000 is not in")),
    ("view_rank_negative", _doc(_set_view_rank), ("res.zip", "views: rank -3")),
]:
    for _cmd in ("analyze", "report"):

        def _build(d: Path, make=_make, c=_cmd) -> list[str]:
            p = make(d)
            return [c, str(p)] + (["-o", str(d / "out.html")] if c == "report" else [])

        CASES.append(Case(f"results:{_name}/{_cmd}", _build, _needles))


def _sanitize_arrow_bomb(d: Path) -> list[str]:
    """A run folder holding a 400 MB column of zeros as a zstd Arrow file of a few KB (sanitize
    was killed within 3 s)."""
    import numpy as np
    import polars as pl

    run = valid.run_dir(d)
    (run / "extra.arrow").write_bytes(_ipc(pl.DataFrame({"z": np.zeros(50_000_000, dtype=np.int64)})))
    return ["sanitize", str(run), "-o", str(d / "clean")]


CASES.append(
    Case("results:arrow_bomb_in_a_run_folder/sanitize", _sanitize_arrow_bomb, ("extra.arrow", "decodes to"))
)


def _sanitize_parquet_bomb(d: Path) -> list[str]:
    """A run folder holding 50 M zeros as a Parquet file of a few KB (dictionary and run-length
    encoded, then zstd): bounded like the Arrow file above, from the file's own footer (issue 28)."""
    import numpy as np
    import polars as pl

    run = valid.run_dir(d)
    pl.DataFrame({"z": np.zeros(50_000_000, dtype=np.int64)}).write_parquet(
        run / "extra.parquet", compression="zstd"
    )
    return ["sanitize", str(run), "-o", str(d / "clean")]


CASES.append(
    Case(
        "results:parquet_bomb_in_a_run_folder/sanitize",
        _sanitize_parquet_bomb,
        ("extra.parquet", "decodes to"),
    )
)
