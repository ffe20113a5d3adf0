"""How many bytes a Parquet file decodes to, estimated from its own footer before decoding it.

A Parquet column can hold 50 M equal values in a few KB (dictionary and run-length encoding, then
zstd): decoding allocates every value. The footer (read by pyarrow without touching the pages)
gives each row group's row count and each column chunk's physical type and uncompressed page bytes;
:func:`decoded_bytes` adds, per column chunk, ``rows x`` the type's width (variable-length values:
a 16-byte view each, plus their uncompressed page bytes). That bounds what reading allocates, as
``ipc_bounds`` does for Arrow IPC files.
"""

from __future__ import annotations

#: bytes a decoded value takes, by Parquet physical type (variable-length ones: a 16-byte view)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 16}


class NotParquet(ValueError):
    """Not a Parquet file, or a footer pyarrow cannot read."""


def decoded_bytes(data: bytes) -> int:
    """The bytes the Parquet file ``data`` decodes to, at least; NotParquet when it is not one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(data) < 12 or not data.startswith(b"PAR1") or not data.endswith(b"PAR1"):
        raise NotParquet("no Parquet magic")
    try:
        meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise NotParquet(f"unreadable footer ({str(exc)[:120]})") from None
    total = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            kind = col.physical_type
            width = _WIDTH.get(kind, 0)
            if kind == "FIXED_LEN_BYTE_ARRAY":
                width = max(int(meta.schema.column(c).length or 0), 1)
            total += rg.num_rows * max(width, 1)
            if kind == "BYTE_ARRAY":
                total += max(int(col.total_uncompressed_size or 0), 0)
    return total
