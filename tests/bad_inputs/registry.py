"""The corpus's registry: a case, the commands each kind of input is given to, and the
helpers the case modules share (raw files, gzip bombs, FIFOs)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bad_inputs import valid


@dataclass(frozen=True)
class Case:
    name: str  # "<input>/<command>"
    build: Callable[[Path], list[str]]  # makes the input under the directory, returns argv
    needles: tuple[str, ...]  # the error line holds each of these


# --- the commands a single input file is given to -------------------------------------------


def _cmds(kind: str) -> dict[str, Callable[[Path, Path], list[str]]]:
    """Command lines for an input of ``kind`` at ``p`` (outputs go under ``d``)."""
    common = {
        "info": lambda p, d: ["info", str(p)],
        "analyze": lambda p, d: ["analyze", str(p)],
        "report": lambda p, d: ["report", str(p), "-o", str(d / "out.html")],
        "perfetto": lambda p, d: ["export", "perfetto", str(p), "-o", str(d / "out.json")],
    }
    if kind == "kineto":
        return {**common, "convert": lambda p, d: ["convert", str(p), "-o", str(d / "ets")]}
    if kind == "et":
        return {
            **common,
            "astra-sim": lambda p, d: ["export", "astra-sim", str(p), "-o", str(d / "astra")],
            "sanitize": lambda p, d: ["sanitize", str(p), "-o", str(d / "clean")],
        }
    if kind == "run":
        return {
            "info": common["info"],
            "analyze": common["analyze"],
            "convert": lambda p, d: ["convert", str(p), "-o", str(d / "ets")],
            "baseline": lambda p, d: ["baseline", str(p), "-o", str(d / "base.json")],
        }
    raise ValueError(kind)


CASES: list[Case] = []


def bad_input(kind: str, needles: tuple[str, ...] = (), only: tuple[str, ...] | None = None):
    """Register ``make(dir) -> path`` as one bad input, given to every command of ``kind``."""

    def register(make: Callable[[Path], Path]) -> Callable[[Path], Path]:
        for cmd, argv in _cmds(kind).items():
            if only is not None and cmd not in only:
                continue

            def build(d: Path, make=make, argv=argv) -> list[str]:
                return argv(make(d), d)

            CASES.append(Case(f"{kind}:{make.__name__}/{cmd}", build, needles))
        return make

    return register


def _events(d: Path, mutate: Callable[[list[dict[str, Any]]], None], name: str = "rank-0.json") -> Path:
    doc = valid.kineto_doc()
    mutate(doc["traceEvents"])
    return valid.dump(d / name, doc)


def _kernel(ev: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in ev if e.get("cat") == "kernel")


def _raw(d: Path, name: str, data: bytes) -> Path:
    p = d / name
    p.write_bytes(data)
    return p


_BOMBS: dict[tuple[bytes, bytes], bytes] = {}


def gzip_bomb(byte: bytes, head: bytes = b"", n: int = 1 << 30) -> bytes:
    """``head`` then ``n`` copies of ``byte``, gzip-compressed (about 1 MB for 1 GiB), made once."""
    import zlib

    key = (byte, head)
    if key not in _BOMBS:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [c.compress(head)]
        block = byte * (16 << 20)
        parts += [c.compress(block) for _ in range(n // len(block))]
        parts.append(c.flush())
        _BOMBS[key] = b"".join(parts)
    return _BOMBS[key]


def _gzip_bomb(path: Path, byte: bytes, head: bytes = b"") -> Path:
    path.write_bytes(gzip_bomb(byte, head))
    return path


def _fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)
