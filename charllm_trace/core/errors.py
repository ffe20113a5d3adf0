"""Errors a user can cause, and the one-line message each gets.

Anything raised for bad input (a missing, empty, truncated, corrupt or
wrong-format file; ranks that do not belong together) is an ``InputError``. The
CLI prints ``error: <path>: <problem>`` and exits with code 2; ``--debug``
shows the traceback.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Mapping
from typing import Any


class InputError(Exception):
    """A problem with a file or directory the user gave us."""

    exit_code = 2

    def __init__(self, path: str | os.PathLike[str] | None, problem: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        super().__init__(self.one_line())

    def one_line(self) -> str:
        problem = " ".join(self.problem.split())  # never more than one line
        return f"{self.path}: {problem}" if self.path else problem


class UsageError(InputError):
    """Options that do not make sense together (no file involved)."""

    def __init__(self, problem: str) -> None:
        super().__init__(None, problem)


def print_traceback(debug: bool) -> None:
    """With ``--debug``, the traceback of the exception being handled, on stderr."""
    if debug:
        traceback.print_exc()


def debug_first(args: list[str], commands: Mapping[str, Any]) -> list[str]:
    """The command line with ``--debug`` moved before the subcommand, so that it is accepted
    after it too (``charllm-trace analyze RUN --debug``). Not from after ``--``, nor from the
    arguments of a subcommand of ``commands`` (click commands) that takes no options among its
    arguments (``collect``: what follows its options is the user's program, with its own)."""
    cut = args.index("--") if "--" in args else len(args)
    sub = next((i for i, a in enumerate(args[:cut]) if not a.startswith("-")), cut)
    cmd = commands.get(args[sub]) if sub < cut else None
    if cmd is not None and not cmd.context_settings.get("allow_interspersed_args", True):
        cut = sub
    if "--debug" not in args[:cut]:
        return args
    return ["--debug"] + [a for a in args[:cut] if a != "--debug"] + args[cut:]
