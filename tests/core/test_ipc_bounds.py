"""``ipc_bounds.decoded_bytes``: what an Arrow IPC file decodes to, read from its metadata (issue 28).

Ground truth: the same frame written uncompressed holds its buffers as they are, so the bytes
counted from a zstd or LZ4 file's length prefixes must equal the uncompressed file's buffer bytes
(which are at most that file's size); frames of several batches, dictionaries (categoricals) and
strings are counted; anything that is not an IPC file, or whose metadata points outside it, is
refused."""

from __future__ import annotations

import io

import numpy as np
import polars as pl
import pytest

from charllm_trace.core.ipc_bounds import NotIpc, decoded_bytes


def _ipc(df: pl.DataFrame, compression: str) -> bytes:
    b = io.BytesIO()
    df.write_ipc(b, compression=compression)  # type: ignore[arg-type]
    return b.getvalue()


FRAMES = {
    "numbers": pl.DataFrame({"a": np.arange(200_000), "f": np.linspace(0, 1, 200_000)}),
    "strings": pl.DataFrame({"s": [f"kernel_{i % 977}" * (i % 5) for i in range(50_000)]}),
    "categorical": pl.DataFrame({"c": pl.Series(["x", "y", "z"] * 1000, dtype=pl.Categorical)}),
    "batches": pl.concat([pl.DataFrame({"a": np.arange(1000) + k}) for k in range(5)], rechunk=False),
    "empty": pl.DataFrame({"a": pl.Series([], dtype=pl.Int64)}),
}


@pytest.mark.parametrize("name", list(FRAMES))
def test_compressed_counts_equal_the_uncompressed_buffers(name: str) -> None:
    df = FRAMES[name]
    plain = _ipc(df, "uncompressed")
    want = decoded_bytes(plain)
    assert want <= len(plain)
    if df.height:
        assert want >= df.estimated_size() // 2  # the values are in there
    for comp in ("zstd", "lz4"):
        data = _ipc(df, comp)
        assert decoded_bytes(data) == want, comp
        assert pl.read_ipc(io.BytesIO(data)).equals(df)


def test_a_small_file_of_a_large_frame_is_counted_large() -> None:
    data = _ipc(pl.DataFrame({"z": np.zeros(20_000_000, dtype=np.int64)}), "zstd")
    assert len(data) < 200_000 and decoded_bytes(data) == 160_000_000


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: b"not arrow at all",
        lambda d: d[: len(d) // 2],  # cut: no closing magic
        lambda d: d[:-10] + (2**30).to_bytes(4, "little") + d[-6:],  # footer length past the start
        lambda d: d[:8] + b"\xff" * (len(d) - 18) + d[-10:],  # every offset garbage
    ],
)
def test_what_is_not_an_ipc_file_is_refused(mangle) -> None:
    data = _ipc(FRAMES["numbers"], "zstd")
    with pytest.raises(NotIpc):
        decoded_bytes(mangle(data))
