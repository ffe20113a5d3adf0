"""``charllm-trace sanitize`` (issue 6): the click command (registered in cli/app.py).

The work is :func:`charllm_trace.sanitize.sanitize_run` (docs/sharing.md).
"""

from __future__ import annotations

import click


@click.command("sanitize")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), help="Where to write the clean copy.")
@click.option("--redact", multiple=True, metavar="WORD", help="Also replace WORD everywhere (repeatable).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def sanitize_cmd(run: str, output: str, redact: tuple[str, ...], force: bool) -> None:
    """Write a copy of RUN without host names, user names, file paths, Python stack frames
    and environment, for sharing. RUN itself is never modified (see docs/sharing.md)."""
    from charllm_trace.sanitize import sanitize_run  # imported when run: `--help` loads no polars

    r = sanitize_run(run, output, force=force, redact=redact)
    click.echo(
        f"wrote {output}: {len(r.written)} files; {r.hosts} host names pseudonymised, {r.users} user names, "
        f"{r.paths_replaced} paths, {r.env_dropped} environment blocks and {r.keys_dropped} other private "
        f"fields removed; {r.ids} process/thread ids remapped; {r.python_frames_cleaned} Python stack "
        "events kept without their file paths"
    )
    if r.left_out:
        click.echo(f"left out (unknown file type, not copied): {', '.join(r.left_out)}")
