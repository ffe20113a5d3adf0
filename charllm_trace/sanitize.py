"""Remove private information from a run before it is shared.

``sanitize_run(src, dst)`` writes a cleaned copy of a run directory (or of one file)
and never touches the input. What it does to every file (see ``docs/sharing.md``):

- **environment**: any mapping stored under ``env`` / ``environ`` / ``environment``
  (and similar keys, :data:`DROP_KEYS`) is dropped whole;
- **host names**: every value under a host key (``hostname``, ``hostnames``, ``host``,
  ``nodename``, ``master_addr`` ...) is replaced by a pseudonym ``host0``, ``host1`` ...
  (the same host gets the same pseudonym in every file, so which ranks share a node is
  kept), and every other occurrence of those names (and of their short forms) in any
  string is replaced too;
- **user names**: values under user keys (``user``, ``username``, ``started_by`` ...) and
  their occurrences in any string become ``user``;
- **file paths**: absolute paths, ``~/``, ``./`` and ``../`` paths, ``file://`` URIs,
  Windows paths and relative paths ending in a source/data file name become ``<path>``;
  Kineto's ``traceName`` (the profile's own path) and ``INFO`` log lines are dropped;
- **Python stack frames**: Kineto ``python_function`` events, the ``Call stack``,
  ``Python id``, ``Python parent id``, ``Python module id`` args, and stack attributes
  of Chakra ET nodes are dropped;
- extra words given with ``redact=`` are replaced by ``<redacted>`` everywhere.

Everything else (timestamps, ids, names of operators and kernels, collective args,
process-group configs, device properties, telemetry values) is kept as is, so every
analysis gives the same numbers before and after.

Files handled: JSON (``.json``, ``.json.gz``: manifests, host execution traces, Kineto
profiles), line-delimited JSON (``.jsonl``, ``.ndjson``, optionally ``.gz``), CSV,
Parquet and Arrow IPC tables, and Chakra ET protobuf files (``.et``, ``.et.gz``). Any
other file is left out of the output and listed in the report: copying it unread could
leak what it holds. After writing, every output file is read back (decompressed) and
checked to hold none of the removed host names, user names, redacted words or paths.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.errors import InputError

#: Keys whose whole value is removed (compared lower-case).
DROP_KEYS = frozenset(
    {
        "env",
        "environ",
        "environment",
        "env_vars",
        "envvars",
        "environment_variables",
        "cwd",
        "pwd",
        "home",
        "call stack",
        "call_stack",
        "callstack",
        "stack",
        "py_stack",
        "python_stack",
        "stack_trace",
        "python id",
        "python parent id",
        "python module id",
        "python thread",
    }
)
#: Keys whose value names a host (compared lower-case).
HOST_KEYS = frozenset(
    {
        "hostname",
        "hostnames",
        "host",
        "hosts",
        "host_name",
        "nodename",
        "node_name",
        "node",
        "fqdn",
        "master_addr",
        "master_address",
        "ip",
        "ip_address",
    }
)
#: Keys whose value names a user (compared lower-case).
USER_KEYS = frozenset({"user", "username", "user_name", "started_by", "owner", "login", "logname"})
#: Environment variables that name a user or a host (their values are collected before env is dropped).
USER_ENV = ("USER", "LOGNAME", "USERNAME", "SUDO_USER", "SLURM_JOB_USER")
HOST_ENV = ("HOSTNAME", "HOST", "SLURMD_NODENAME", "MASTER_ADDR", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
#: Top-level keys of a Kineto profile that are dropped.
KINETO_DROP = frozenset({"traceName", "INFO"})
#: Kineto event categories that are Python stack frames.
PY_CATS = frozenset({"python_function", "python_function_call"})

PATH_TOKEN = "<path>"
USER_TOKEN = "user"
REDACT_TOKEN = "<redacted>"
_NOT_NAMES = frozenset({"", "localhost", "127.0.0.1", "::1", "0.0.0.0", "none", "null", "unknown"})

_PC = r"[\w.@+~%-]"  # characters of a path component
_FILE_EXT = (
    r"py|pyc|pyx|ipynb|json|jsonl|ndjson|gz|zst|pt|pth|et|log|txt|yaml|yml|toml|cfg|ini|sh|csv|parquet|"
    r"arrow|so|cu|cuh|cpp|cc|c|h|hpp|bin|ckpt|safetensors|npz|npy|pkl|out|err"
)
_PATH_RE = re.compile(
    "|".join(
        [
            r"file://\S+",
            r"[A-Za-z]:\\(?:[^\\\s\"']+\\)*[^\\\s\"']*",  # C:\Users\x
            rf"(?:~|\.\.?)/(?:{_PC}+/?)*",  # ~/x ./x ../x
            rf"(?<![\w.:/-])/(?:{_PC}+/)*{_PC}+/?",  # /abs/path
            rf"(?<![\w.:/-])(?:{_PC}+/)+{_PC}*\.(?:{_FILE_EXT})\b",  # rel/dir/file.py
        ]
    )
)


@dataclass
class SanitizeReport:
    """What ``sanitize_run`` did; counts are over all files."""

    written: list[str] = field(default_factory=list)  # output paths, relative to the output root
    left_out: list[str] = field(default_factory=list)  # input files not copied (unknown type)
    hosts: int = 0  # distinct host names pseudonymised
    users: int = 0  # distinct user names replaced
    env_dropped: int = 0  # environment mappings dropped
    keys_dropped: int = 0  # other private keys dropped (stacks, cwd, traceName, INFO ...)
    python_events_dropped: int = 0  # Kineto python_function events
    paths_replaced: int = 0  # distinct path strings replaced
    renamed: int = 0  # files whose name held a host or user name


class _Scrubber:
    """Holds what to remove and rewrites strings and JSON trees (memoised: names repeat a lot)."""

    def __init__(self, redact: Iterable[str]) -> None:
        self.hosts: dict[str, str] = {}  # lower-case name -> pseudonym
        self.users: set[str] = set()
        self.redact = {w for w in redact if w}
        self.paths: set[str] = set()
        self.report = SanitizeReport()
        self._memo: dict[str, str] = {}
        self._keys: dict[Any, tuple[int, str]] = {}  # key -> (action, clean key), see _key
        self._re: re.Pattern[str] | None = None

    # ---- collecting -------------------------------------------------------
    def add_host(self, name: Any) -> None:
        if not isinstance(name, str):
            return
        for part in re.split(r"[\s,]+", name.strip()):
            low = part.lower()
            if low in _NOT_NAMES or len(low) < 2 or low in self.hosts or low.isdigit():
                continue
            self.hosts[low] = f"host{len(set(self.hosts.values()))}"
            short = low.split(".", 1)[0]
            if short != low and len(short) >= 2 and short not in self.hosts and not short.isdigit():
                self.hosts[short] = self.hosts[low]
            self._re = None
            self._memo.clear()
            self._keys.clear()

    def add_user(self, name: Any) -> None:
        if isinstance(name, str) and name.strip().lower() not in _NOT_NAMES and len(name.strip()) >= 2:
            if name.strip() not in self.users:
                self.users.add(name.strip())
                self._re = None
                self._memo.clear()
                self._keys.clear()

    def collect(self, obj: Any, key: str = "") -> None:
        """Find host and user names in a JSON tree (keys and environment variables)."""
        kl = key.lower()
        if isinstance(obj, dict):
            if kl in ("env", "environ", "environment", "env_vars", "envvars", "environment_variables"):
                for k, v in obj.items():
                    if k in USER_ENV:
                        self.add_user(v)
                    elif k in HOST_ENV:
                        self.add_host(v)
                return
            if kl == "uname":
                self.add_host(obj.get("node") or obj.get("nodename"))
            if kl in HOST_KEYS or kl in USER_KEYS:
                for v in obj.values():
                    self.collect(v, key)
                return
            for k, v in obj.items():
                self.collect(v, str(k))
        elif isinstance(obj, list):
            if kl in HOST_KEYS or kl in USER_KEYS:
                for v in obj:
                    self.collect(v, key)
            elif len(obj) < 10_000:  # event lists hold no host/user keys worth a walk
                for v in obj:
                    self.collect(v, "")
        elif isinstance(obj, str):
            if kl in HOST_KEYS and kl != "node":
                self.add_host(obj)
            elif kl in USER_KEYS:
                self.add_user(obj)

    # ---- rewriting --------------------------------------------------------
    def _pattern(self) -> re.Pattern[str] | None:
        if self._re is None:
            words = sorted(set(self.hosts) | self.users, key=len, reverse=True)
            if not words:
                return None
            alt = "|".join(re.escape(w) for w in words)
            self._re = re.compile(rf"(?<![A-Za-z0-9_])(?:{alt})(?![A-Za-z0-9_])", re.IGNORECASE)
        return self._re

    def _word(self, m: re.Match[str]) -> str:
        w = m.group(0)
        host = self.hosts.get(w.lower())
        return host if host is not None else USER_TOKEN

    def _path(self, m: re.Match[str]) -> str:
        self.paths.add(m.group(0))
        return PATH_TOKEN

    def text(self, s: str) -> str:
        out = self._memo.get(s)
        if out is not None:
            return out
        out = s
        for w in self.redact:
            if w in out:
                out = out.replace(w, REDACT_TOKEN)
        if "/" in out or "\\" in out:
            out = _PATH_RE.sub(self._path, out)
        pat = self._pattern()
        if pat is not None:
            out = pat.sub(self._word, out)
        if len(self._memo) < 2_000_000:
            self._memo[s] = out
        return out

    def host_value(self, v: Any) -> Any:
        if isinstance(v, str):
            self.add_host(v)
            low = v.strip().lower()
            if low in self.hosts:
                return self.hosts[low]
            return self.text(v)
        if isinstance(v, list):
            return [self.host_value(x) for x in v]
        if isinstance(v, dict):
            return {self.text(str(k)): self.host_value(x) for k, x in v.items()}
        return v

    def _key(self, k: Any) -> tuple[int, str]:
        """What to do with a key (0 keep, 1 drop env, 2 drop other, 3 host, 4 user) and its clean form."""
        kl = str(k).lower()
        if kl in DROP_KEYS:
            act = 1 if kl.startswith("env") else 2
        elif kl in HOST_KEYS:
            act = 3
        elif kl in USER_KEYS:
            act = 4
        else:
            act = 0
        return act, self.text(str(k))

    def clean(self, obj: Any, key: str = "") -> Any:
        t = type(obj)
        if t is str:
            out = self._memo.get(obj)
            return out if out is not None else self.text(obj)
        if t is dict:
            res: dict[str, Any] = {}
            keys = self._keys
            for k, v in obj.items():
                kk = keys.get(k)
                if kk is None:
                    kk = keys[k] = self._key(k)
                act, ck = kk
                tv = type(v)
                if act == 0:
                    if tv is int or tv is float or tv is bool or v is None:
                        res[ck] = v
                    else:
                        res[ck] = self.clean(v, k)
                elif act == 1:
                    self.report.env_dropped += 1
                elif act == 2:
                    self.report.keys_dropped += 1
                elif act == 3 and (str(k).lower() != "node" or tv is str):
                    res[ck] = self.host_value(v)
                elif act == 4 and tv is str:
                    res[ck] = USER_TOKEN
                else:
                    res[ck] = self.clean(v, k)
            return res
        if t is list:
            out_l = []
            for x in obj:
                if type(x) is dict and x.get("cat") in PY_CATS:
                    self.report.python_events_dropped += 1
                    continue
                out_l.append(self.clean(x, key))
            return out_l
        return obj

    def leftovers(self, data: bytes) -> list[str]:
        """Removed strings still present in ``data`` (case-insensitive for names)."""
        low = data.lower()
        names = [*self.hosts, *(u.lower() for u in self.users)]
        found = [
            n for n in names if re.search(rb"(?<![a-z0-9_])" + re.escape(n.encode()) + rb"(?![a-z0-9_])", low)
        ]
        found += [w for w in self.redact if w.encode() in data]
        found += [p for p in self.paths if len(p) > 3 and p.encode() in data]
        return found


# ---------------------------------------------------------------------------
# File kinds
# ---------------------------------------------------------------------------


def _kind(name: str) -> str | None:
    n = name.lower()
    if n.endswith(".gz"):
        n = n[:-3]
    for ext, kind in (
        (".json", "json"),
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".csv", "csv"),
        (".parquet", "parquet"),
        (".arrow", "ipc"),
        (".ipc", "ipc"),
        (".feather", "ipc"),
        (".et", "et"),
    ):
        if n.endswith(ext):
            return kind
    return None


def _read(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(path, f"corrupt gzip data ({exc})") from exc
    return raw


def _write(path: Path, data: bytes, gz: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, compresslevel=6, mtime=0) if gz else data)


def _load_json(path: Path, data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc})") from exc


def _clean_json_doc(sc: _Scrubber, doc: Any) -> Any:
    if isinstance(doc, dict) and "traceEvents" in doc:
        for k in KINETO_DROP:
            if k in doc:
                doc = {kk: vv for kk, vv in doc.items() if kk != k}
                sc.report.keys_dropped += 1
    return sc.clean(doc)


def _collect_json(sc: _Scrubber, doc: Any) -> None:
    if not isinstance(doc, dict):
        sc.collect(doc)
    else:
        for k, v in doc.items():
            if k in ("traceEvents", "nodes") and isinstance(v, list):
                continue  # the event lists: host/user keys live in the headers
            sc.collect(v, str(k))


# ---- Chakra ET (length-delimited protobuf) --------------------------------


def _et_messages(path: Path, data: bytes) -> list[bytes]:
    from google.protobuf.internal.decoder import _DecodeVarint32  # type: ignore[attr-defined]

    out = []
    pos = 0
    while pos < len(data):
        try:
            size, pos = _DecodeVarint32(data, pos)
        except Exception as exc:
            raise InputError(path, f"not a Chakra ET (bad length prefix at byte {pos})") from exc
        if pos + size > len(data):
            raise InputError(path, f"truncated Chakra ET (message at byte {pos} runs past the end)")
        out.append(data[pos : pos + size])
        pos += size
    return out


def _clean_attr_list(sc: _Scrubber, attrs: Any, collect_only: bool = False) -> None:
    keep = []
    for a in attrs:
        nl = a.name.lower()
        which = a.WhichOneof("value")
        if collect_only:
            if which == "string_val":
                if nl in HOST_KEYS and nl != "node":
                    sc.add_host(a.string_val)
                elif nl in USER_KEYS:
                    sc.add_user(a.string_val)
                elif a.string_val[:1] in "{[":
                    try:
                        _collect_json(sc, orjson.loads(a.string_val))
                    except orjson.JSONDecodeError:
                        pass
            continue
        if nl in DROP_KEYS:
            sc.report.keys_dropped += 1
            continue
        if which == "string_val":
            s = a.string_val
            if nl in HOST_KEYS:
                a.string_val = sc.host_value(s)
            elif nl in USER_KEYS:
                a.string_val = USER_TOKEN
            elif s[:1] in "{[":
                try:
                    a.string_val = orjson.dumps(sc.clean(orjson.loads(s))).decode()
                except orjson.JSONDecodeError:
                    a.string_val = sc.text(s)
            else:
                a.string_val = sc.text(s)
        elif which == "string_list":
            vals = [sc.text(v) for v in a.string_list.values]
            del a.string_list.values[:]
            a.string_list.values.extend(vals)
        keep.append(a)
    if not collect_only and len(keep) != len(attrs):
        kept = [type(a)() for a in keep]
        for dst, src in zip(kept, keep, strict=True):
            dst.CopyFrom(src)
        del attrs[:]
        attrs.extend(kept)


def _et_collect(sc: _Scrubber, path: Path, data: bytes) -> None:
    from charllm_trace.et.schema import GlobalMetadata

    msgs = _et_messages(path, data)
    if msgs:
        gm = GlobalMetadata()
        gm.ParseFromString(msgs[0])
        _clean_attr_list(sc, gm.attr, collect_only=True)


def _et_clean(sc: _Scrubber, path: Path, data: bytes) -> bytes:
    from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]

    from charllm_trace.et.schema import GlobalMetadata, Node

    msgs = _et_messages(path, data)
    out = io.BytesIO()
    for i, raw in enumerate(msgs):
        msg = GlobalMetadata() if i == 0 else Node()
        try:
            msg.ParseFromString(raw)
        except Exception as exc:
            raise InputError(path, f"not a Chakra ET (message {i} does not parse)") from exc
        if i > 0:
            msg.name = sc.text(msg.name)
            for io_ in (msg.inputs, msg.outputs):
                io_.values = sc.text(io_.values)
                io_.shapes = sc.text(io_.shapes)
                io_.types = sc.text(io_.types)
        _clean_attr_list(sc, msg.attr)
        body = msg.SerializeToString()
        out.write(_VarintBytes(len(body)))
        out.write(body)
    return out.getvalue()


# ---- tables ---------------------------------------------------------------


def _table_read(kind: str, data: bytes):  # -> pl.DataFrame
    import polars as pl

    if kind == "parquet":
        return pl.read_parquet(io.BytesIO(data))
    return pl.read_ipc(io.BytesIO(data))


def _table_clean(sc: _Scrubber, kind: str, path: Path, data: bytes) -> bytes:
    import polars as pl

    try:
        df = _table_read(kind, data)
    except Exception as exc:
        raise InputError(path, f"cannot read as {kind} ({type(exc).__name__})") from exc
    drop = [c for c in df.columns if c.lower() in DROP_KEYS]
    if drop:
        sc.report.keys_dropped += len(drop)
        df = df.drop(drop)
    exprs = []
    for c, dt in df.schema.items():
        if dt == pl.String:
            if c.lower() in HOST_KEYS:
                for v in df[c].drop_nulls().unique().to_list():
                    sc.add_host(v)
                exprs.append(pl.col(c).map_elements(sc.host_value, return_dtype=pl.String))
            elif c.lower() in USER_KEYS:
                exprs.append(pl.when(pl.col(c).is_not_null()).then(pl.lit(USER_TOKEN)).alias(c))
            else:
                exprs.append(pl.col(c).map_elements(sc.text, return_dtype=pl.String))
    if exprs:
        df = df.with_columns(exprs)
    df = df.rename({c: sc.text(c) for c in df.columns})
    buf = io.BytesIO()
    if kind == "parquet":
        df.write_parquet(buf)
    else:
        df.write_ipc(buf)
    return buf.getvalue()


def _table_collect(sc: _Scrubber, kind: str, data: bytes) -> None:
    import polars as pl

    try:
        df = _table_read(kind, data)
    except Exception:
        return  # reported when cleaned
    for c in df.columns:
        if c.lower() in HOST_KEYS and df.schema[c] == pl.String:
            for v in df[c].drop_nulls().unique().to_list():
                sc.add_host(v)


def _text_clean(sc: _Scrubber, data: bytes) -> bytes:
    """CSV and other line text: every line scrubbed as a string (numbers pass unchanged)."""
    text = data.decode("utf-8", errors="surrogateescape")
    return "".join(sc.text(ln) for ln in text.splitlines(keepends=True)).encode(
        "utf-8", errors="surrogateescape"
    )


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


def _scrub_name(sc: _Scrubber, rel: str) -> str:
    """A file's relative path with host names (in their file-name-safe form) and user names replaced."""
    out = rel
    names = sorted(
        [(re.sub(r"[^A-Za-z0-9._-]", "_", h), p) for h, p in sc.hosts.items()]
        + [(u, USER_TOKEN) for u in sc.users],
        key=lambda x: len(x[0]),
        reverse=True,
    )
    for name, repl in names:
        out = re.sub(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", repl, out, flags=re.IGNORECASE)
    for w in sc.redact:
        out = out.replace(w, REDACT_TOKEN)
    return out


_BIG = 64 << 20  # bytes: JSON files at least this big are parsed once only


def _files(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    # symbolic links are listed too, and left out: their target may lie outside the run
    return sorted(p for p in src.rglob("*") if p.is_symlink() or p.is_file())


def sanitize_run(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    force: bool = False,
    redact: Iterable[str] = (),
) -> SanitizeReport:
    """Write a sanitized copy of run directory (or file) ``src`` to ``dst``.

    ``dst`` must not exist unless ``force`` (then it is replaced whole, after the new
    copy was written). ``src`` is only read. Raises :class:`InputError` for bad input.
    """
    s = Path(src)
    d = Path(dst)
    if not s.exists():
        raise InputError(s, "no such file or directory")
    rs, rd = s.resolve(), d.resolve()
    if rs == rd or rd in rs.parents or (s.is_dir() and rs in rd.parents):
        raise InputError(d, "output must be outside the input (the input is never modified)")
    if d.exists() or d.is_symlink():
        if not force:
            raise InputError(d, "already exists; pass --force to replace it")
    files = _files(s)
    if not files:
        raise InputError(s, "directory is empty")
    sc = _Scrubber(redact)
    kinds = {f: (None if f.is_symlink() else _kind(f.name)) for f in files}
    datas: dict[Path, bytes] = {}

    # pass 1: learn the host and user names from every file's headers. Big JSON files (profiles)
    # are parsed once, in pass 2, which learns their headers' names before cleaning them.
    for f, kind in kinds.items():
        if kind is None:
            continue
        if kind == "json" and f.stat().st_size >= _BIG:
            continue
        data = _read(f)
        if kind == "json":
            if len(data) < 1 << 22:  # small headers (manifest, metadata) are kept for pass 2
                datas[f] = data
            _collect_json(sc, _load_json(f, data))
        elif kind == "jsonl":
            for line in data.splitlines():
                if line.strip():
                    sc.collect(_load_json(f, line))
        elif kind == "et":
            _et_collect(sc, f, data)
        elif kind != "csv":
            _table_collect(sc, kind, data)

    def write_all(tmp: Path, keep: bool) -> None:
        """Pass 2: cleaned copies of every file into ``tmp``."""
        sc.report = SanitizeReport()
        for f, kind in kinds.items():
            rel = f.name if s.is_file() else f.relative_to(s).as_posix()
            if kind is None:
                sc.report.left_out.append(rel)
                continue
            data = datas.get(f) if keep else datas.pop(f, None)
            if data is None:
                data = _read(f)
            gz = f.name.lower().endswith(".gz")
            if kind == "json":
                doc = _load_json(f, data)
                _collect_json(sc, doc)
                out = orjson.dumps(_clean_json_doc(sc, doc))
                del doc
            elif kind == "jsonl":
                lines = [orjson.dumps(sc.clean(_load_json(f, ln))) for ln in data.splitlines() if ln.strip()]
                out = b"\n".join(lines) + (b"\n" if lines else b"")
            elif kind == "et":
                out = _et_clean(sc, f, data)
            elif kind == "csv":
                out = _text_clean(sc, data)
            else:
                out = _table_clean(sc, kind, f, data)
            new_rel = _scrub_name(sc, rel)
            sc.report.renamed += new_rel != rel
            target = tmp / ("out" if s.is_file() else new_rel)
            _write(target, out, gz)
            sc.report.written.append(d.name if s.is_file() else new_rel)

    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.", dir=d.parent))
    try:
        known = (len(sc.hosts), len(sc.users))
        write_all(tmp, keep=True)
        if (len(sc.hosts), len(sc.users)) != known:
            # a big file named a host or user that files written before it may hold: once more
            shutil.rmtree(tmp)
            tmp.mkdir()
            write_all(tmp, keep=False)
        datas.clear()
        # read everything back: nothing removed may remain, in names or bytes
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                left = sc.leftovers(_read(p)) + sc.leftovers(p.relative_to(tmp).as_posix().encode())
                if left:
                    raise RuntimeError(
                        f"sanitize self-check failed: {p.relative_to(tmp)} still holds {len(left)} removed strings"
                    )
        if d.exists() or d.is_symlink():
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d)
            else:
                d.unlink()
        if s.is_file():
            (tmp / "out").rename(d)
            tmp.rmdir()
        else:
            tmp.rename(d)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    r = sc.report
    r.hosts = len(set(sc.hosts.values()))
    r.users = len(sc.users)
    r.paths_replaced = len(sc.paths)
    r.host_map = {v: v for v in sorted(set(sc.hosts.values()))}
    return r
