"""``charllm-trace cache info|clear``: the cache of decoded and converted inputs and of analysis
results (docs/cache.md)."""

from __future__ import annotations

import math
from typing import Any

import click


def no_cache_option(f: Any) -> Any:
    """``--no-cache`` for a reading command: turns the cache off for the whole process (also for
    the library calls the command makes), without changing the command's signature."""

    def turn_off(ctx: click.Context) -> None:
        from charllm_trace.core.cas import set_enabled

        set_enabled(False)
        ctx.call_on_close(lambda: set_enabled(None))  # in-process callers (tests) get it back

    return _process_flag(
        f,
        "--no-cache",
        turn_off,
        "Read, convert and analyse the input again; neither use nor fill the cache.",
    )


def allow_partial_option(f: Any) -> Any:
    """``--allow-partial`` for a reading command: analyse the ranks a run holds when some are
    missing (labelled), instead of refusing the run (see charllm_trace.collectors.run_checks)."""

    def turn_on(ctx: click.Context) -> None:
        from charllm_trace.collectors.run_checks import set_allow_partial

        set_allow_partial(True)
        ctx.call_on_close(lambda: set_allow_partial(None))

    return _process_flag(
        f,
        "--allow-partial",
        turn_on,
        "Analyse the ranks present when a run lacks some (labelled); by default such a run is refused.",
    )


def _process_flag(f: Any, name: str, apply: Any, help_text: str) -> Any:
    """A flag that sets process-wide state when given (``apply(ctx)``, which undoes it when the
    command closes), without changing the command's signature."""

    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            apply(ctx)
        return value

    return click.option(name, is_flag=True, expose_value=False, callback=callback, help=help_text)(f)


def json_flag(f: Any) -> Any:
    """``--json``: the same as ``--format json`` (``info`` has had it; now every command with a
    JSON format takes it). With another explicit ``--format`` it is a usage error."""
    import functools

    @functools.wraps(f)
    def wrapper(*args: Any, as_json: bool = False, **kw: Any) -> Any:
        if as_json:
            if kw.get("fmt") not in ("table", "json"):
                from charllm_trace.core.errors import UsageError

                raise UsageError(f"--json and --format {kw.get('fmt')} ask for two formats; give one")
            kw["fmt"] = "json"
        return f(*args, **kw)

    return click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(wrapper)


def wide_option(f: Any) -> Any:
    """``--wide``: print every table whole, however wide (by default a table wider than the
    terminal, or than 80 columns when piped, is split into parts; no number is cut)."""
    return click.option(
        "--wide", is_flag=True, help="Print every table whole, however wide (default: fit the terminal)."
    )(f)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


@click.group("cache")
def cache_group() -> None:
    """The one store behind every cache: decoded ETs, converted Kineto profiles and run
    directories, analysis results, compare rows and printed outputs."""


@cache_group.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (sizes in bytes).")
def cache_info(as_json: bool) -> None:
    """Where the cache is, how many entries of each kind it holds and their size."""
    from charllm_trace.core import cas as cache

    d = cache.info()
    if as_json:
        import orjson

        click.echo(orjson.dumps(d, option=orjson.OPT_INDENT_2).decode())
        return
    state = "" if d["exists"] else " (not created yet)"
    click.echo(f"cache: {d['root']}{state}")
    click.echo(
        f"{d['entries']} entries, {_size(d['bytes'])} (cap {d['max_gb']:g} GB"
        f"{'' if d['enabled'] else '; turned off by CHARLLM_TRACE_NO_CACHE'})"
    )
    for kind, what in cache.KINDS.items():
        k = d["kinds"][kind]
        click.echo(f"  {kind:<7} {k['entries']:>5} entries  {_size(k['bytes']):>9}  {what}")
    n_index = sum(d["kinds"][i]["entries"] for i in cache.INDEXES)
    click.echo(f"  index   {n_index:>5} records")
    if d["temporaries"]:
        click.echo(f"  {d['temporaries']} temporaries of interrupted or running stores")


@cache_group.command("clear")
def cache_clear() -> None:
    """Delete every cache entry this tool wrote (other files in the directory stay)."""
    from charllm_trace.core import cas

    before = cas.info()
    removed = cas.clear()
    n = sum(v for k, v in removed.items() if k in cas.KINDS)
    click.echo(f"removed {n} entries ({_size(before['bytes'])}) from {before['root']}")


@cache_group.command("prune")
@click.option("--max-gb", type=click.FloatRange(min=0), default=None, metavar="GB",
              help="Keep at most this many GB (default: $CHARLLM_TRACE_CACHE_MAX_GB, else 20).")  # fmt: skip
def cache_prune(max_gb: float | None) -> None:
    """Remove temporaries of interrupted stores and, above the size cap, the least recently used
    entries of every kind (what every store does after writing)."""
    from charllm_trace.core import cas

    # click's range lets nan through; inf means no cap, as in $CHARLLM_TRACE_CACHE_MAX_GB
    if max_gb is not None and math.isnan(max_gb):
        raise click.BadParameter(f"{max_gb} is not a size in GB", param_hint="'--max-gb'")

    before = cas.info()
    cas.prune(max_gb)
    after = cas.info()
    click.echo(
        f"removed {before['entries'] - after['entries']} entries "
        f"({_size(before['bytes'] - after['bytes'])}); {after['entries']} entries, {_size(after['bytes'])} left"
    )
