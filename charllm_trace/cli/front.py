"""The ``charllm-trace`` program's entry point (``python -m charllm_trace`` too): a repeated
``analyze`` whose printed output is stored (``store/output_cache.py``) is answered here, before
click, the command modules, polars or numpy are imported (issue 26 item 2: they were ~60 ms of
the ~80 ms a hit cost); everything else goes to the click group (``cli/app.py``).

The front reads the command line only to decide whether to look: ``analyze`` as the command
(``--debug`` may come first), no ``--no-cache``, no help or version, the cache not turned off. The
key is the command line as given (``output_cache.output_key``), so a hit needs no parsing; the
entry's conditions (the input's files unchanged, the same terminal for a table) are checked
against the present. Any failure here falls through to the group, which looks again and
reports errors as usual.

The program (``program``: the installed script, ``python -m charllm_trace``) leaves at once when
``main`` is done (``_leave``): the standard streams flushed and the ``atexit`` functions run, as at a
normal exit, but without the interpreter's teardown of every module and object (after a cold
``analyze`` that is freeing the analysed tables one by one: ~0.1 s of CPU, docs/benchmarks.md).
Only when no other Python thread is alive and the exit code is a number; otherwise, or when a
standard stream cannot be flushed, the interpreter exits as usual. ``main`` itself raises
``SystemExit`` as click does, for callers in a Python process.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

_SKIP = ("--no-cache", "-h", "--help", "--version")


def _hit(argv: list[str]) -> bytes | None:
    """The stored output of ``argv`` when there is one whose conditions hold (its reader note,
    for a run directory, goes to stderr as on a results-cache hit)."""
    args = argv[1:] if argv[:1] == ["--debug"] else argv
    if args[:1] != ["analyze"] or any(a in _SKIP for a in argv):
        return None
    if os.environ.get("CHARLLM_TRACE_NO_CACHE", "") not in ("", "0"):
        return None
    from charllm_trace.store import output_cache

    got = output_cache.lookup(output_cache.output_key(argv))
    if got is None:
        return None
    path, data = got
    if os.path.isdir(path):
        from charllm_trace.collectors.run_checks import note_on_results_hit

        note_on_results_hit(path)
    return data


def main() -> None:
    """``charllm-trace``: a stored output, else the click group."""
    try:
        data = _hit(sys.argv[1:])
    except Exception:  # noqa: BLE001 - the front only saves time; the group handles everything
        data = None
    if data is None:
        from charllm_trace.cli.app import main as group

        group(prog_name="charllm-trace")
        return
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has gone; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def program() -> NoReturn:
    """The ``charllm-trace`` program: ``main``, then the process leaves (see the module's docstring)."""
    try:
        main()
    except SystemExit as exc:  # click ends every command so (standalone mode)
        _leave(exc)
    _leave(SystemExit(0))


def _leave(exc: SystemExit) -> NoReturn:
    """Exit with ``exc``'s code without the interpreter's teardown, or raise ``exc`` (the usual exit)."""
    import atexit

    code = 0 if exc.code is None else exc.code
    threading = sys.modules.get("threading")  # not imported (a cache hit): no other thread was started by it
    if not isinstance(code, int) or (threading is not None and threading.active_count() > 1):
        raise exc
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe, a full disk: the interpreter words it as usual
        raise exc from None
    atexit._run_exitfuncs()  # what the interpreter runs at exit (logging, temporary copies, ...)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    program()
