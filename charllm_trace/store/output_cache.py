"""The printed-output cache: a repeated ``analyze`` (``--format json`` or ``table``, to stdout) of an
unchanged input with the same command line prints the bytes the first run printed, before click,
the commands, polars, numpy or the analyses are imported (issue 26 item 2; ``cli/front.py``).

It sits in front of the results cache (``store/results_cache.py``), which it does not replace: a
miss here goes through the results cache as before, and what was printed is then stored here.

An entry is the ``outputs`` namespace's of the one store (``core/cas.py``: head with checksum,
atomic write, ownership, housekeeping). Its key is the SHA-256 of

- the command line as given (``sys.argv[1:]``; click's parsing is not needed to find it), and
  the ``CHARLLM_TRACE_*`` variables of the environment other than the cache's own;
- a fingerprint of the whole package's sources (``.py``, ``.c``, ``.h``) and of the installed
  versions of Python, polars, numpy, rich (it draws the tables) and click (their ``.dist-info``
  names: no import).

Its payload is one line of JSON, the *conditions* under which the output holds, then the output
byte for byte. The conditions are the input as named, the identity of every file it is made of
(resolved path, device, inode, size, modification and change times; a directory: each of its
non-hidden files) and, for a table, the terminal (:func:`terminal`: whether stdout is one, its
size, its encoding and the variables that change colour and width). A hit needs every condition
to hold now; otherwise the command runs and its output replaces the entry.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from charllm_trace.core import cas

KIND = "outputs"
#: environment variables that never change what is printed (the cache's own switches)
_ENV_IGNORED = ("CHARLLM_TRACE_CACHE_DIR", "CHARLLM_TRACE_NO_CACHE", "CHARLLM_TRACE_CACHE_MAX_GB")
#: variables that change how a table is drawn (rich's width, colour and terminal detection)
_TERMINAL_ENV = (
    "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS",
    "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES", "DATABRICKS_RUNTIME_VERSION", "CLICOLOR",
    "CLICOLOR_FORCE", "TERM_PROGRAM", "FORCE_TERMINAL",
)  # fmt: skip
#: the formats whose printed output is kept
FORMATS = ("json", "table")


def enabled() -> bool:
    return cas.enabled()


def code_fingerprint() -> str:
    """SHA-256 of every source of the package and the library versions (once per process)."""
    return cas.fingerprint(KIND, ("",), versions=(*cas.VERSIONED, "rich", "click"))


def output_key(argv: list[str]) -> str:
    """The key of what the command line ``argv`` (without the program's name) prints."""
    env = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith("CHARLLM_TRACE_") and k not in _ENV_IGNORED
    )
    return cas.key(cas.OUTPUTS, json.dumps(argv), json.dumps(env), code_fingerprint())


def input_identity(path: str) -> list[str]:
    """The identity of the files of the input ``path`` (OSError when it cannot be read)."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith("."))
        files = [n for n in names if os.path.isfile(os.path.join(path, n))]
        return [cas.identity(path), *(f"{n}\0{cas.identity(os.path.join(path, n))}" for n in files)]
    if not os.path.isfile(path):
        raise OSError(f"{path}: not a file")
    return [cas.identity(path)]


def terminal() -> list[Any]:
    """What decides how a table is drawn: stdout a terminal or not, the size of each standard
    stream that is one, stdout's encoding, and the variables of :data:`_TERMINAL_ENV`."""
    sizes: list[Any] = []
    for fd in (0, 1, 2):
        try:
            sizes.append(list(os.get_terminal_size(fd)))
        except (OSError, ValueError):
            sizes.append(None)
    out = sys.stdout
    isatty = getattr(out, "isatty", None)
    return [
        bool(isatty and isatty()),
        sizes,
        getattr(out, "encoding", None),
        [os.environ.get(k) for k in _TERMINAL_ENV],
    ]


def conditions(path: str, fmt: str) -> dict[str, Any] | None:
    """The conditions an output of ``path`` in ``fmt`` holds under (None: the input cannot be read)."""
    try:
        ident = input_identity(path)
    except OSError:
        return None
    return {"input": path, "identity": ident, "terminal": terminal() if fmt == "table" else None}


def lookup(key: str) -> tuple[str, bytes] | None:
    """(the input, the output) stored under ``key`` when its conditions hold now (None: none,
    another input or terminal, or damaged: deleted with a note)."""
    try:
        data = cas.read(cas.OUTPUTS, key)
    except cas.Corrupt:
        data = b""
    if data is None:
        return None
    nl = data.find(b"\n")
    try:
        cond = json.loads(data[:nl]) if nl > 0 else None
        path = cond["input"]
        ok = isinstance(path, str)
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        if cas.discard(cas.OUTPUTS, key):
            cas.note(f"the cached output {key[:16]}... was corrupt; deleted, analysing again", once=False)
        return None
    if cond != conditions(path, "table" if cond.get("terminal") is not None else "json"):
        return None
    return path, data[nl + 1 :]


def store(key: str, cond: dict[str, Any], payload: bytes) -> None:
    """Remember ``payload`` under ``key`` with its conditions (best effort: errors ignored; never
    over a file that is not this tool's)."""
    try:
        data = json.dumps(cond).encode() + b"\n" + payload
        cas.write(cas.OUTPUTS, key, data)
        cas.stored(len(data))
    except Exception:  # noqa: BLE001 - caching is best effort
        return
