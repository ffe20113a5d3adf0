"""Errors a user can cause, and the one-line message each gets.

Anything raised for bad input (a missing, empty, truncated, corrupt or
wrong-format file; ranks that do not belong together) is an ``InputError``. The
CLI prints ``error: <path>: <problem>`` and exits with code 2; ``--debug``
shows the traceback.
"""

from __future__ import annotations

import os


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
