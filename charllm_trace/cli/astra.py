"""``charllm-trace export astra-sim``: the click command (registered under ``export`` in cli/export.py).

Kept in its own module; the work is :func:`charllm_trace.exports.astra_sim.export_astra_sim`.
"""

from __future__ import annotations

import click

from charllm_trace.core.errors import InputError


@click.command("astra-sim")
@click.argument("path", type=click.Path())
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(),
    help="Directory for <prefix>.<rank>.et and <prefix>.comm_group.json (created if needed).",
)
@click.option(
    "--prefix",
    default="trace",
    show_default=True,
    help="File name prefix: ASTRA-sim's --workload-configuration is DIR/PREFIX.",
)
@click.option(
    "--no-host-gaps",
    is_flag=True,
    help="Leave out the intervals in which no exported op ran (GPU runs: the GPU waited for the host; "
    "CPU runs: no traced op).",
)
@click.option(
    "--align-starts",
    is_flag=True,
    help="Start every rank at time 0 (default: a rank that started later begins with a charllm.start_offset node).",
)
@click.option("--force", is_flag=True, help="Replace existing files of the same names.")
@click.pass_context
def astra_sim_command(
    ctx: click.Context,
    path: str,
    out_dir: str,
    prefix: str,
    no_host_gaps: bool,
    align_starts: bool,
    force: bool,
) -> None:
    """Write PATH as Chakra ETs that ASTRA-sim (astra-sim 518bd51) simulates: one
    <prefix>.<rank>.et per rank (GPU kernels or, in CPU runs, CPU ops with exclusive times as
    compute; collectives and send/recv as communication; order as data dependencies) and the
    communicator groups for --comm-group-configuration. See docs/et-conventions.md."""
    import polars as pl

    from charllm_trace.exports.astra_sim import export_astra_sim
    from charllm_trace.inputs import loader

    try:
        run = loader.load(path)
        res = export_astra_sim(
            run, out_dir, prefix, force=force, host_gaps=not no_host_gaps, align_starts=align_starts
        )
    except InputError as exc:
        root = ctx.find_root()
        if root is not ctx and root.params.get("debug"):
            raise  # the main group prints the traceback
        click.echo(f"error: {exc.one_line()}", err=True)
        ctx.exit(2)
    ranks = sorted(res.plans)
    groups = (
        ", ".join(f"{k}: {v}" for k, v in res.comm_groups.items()) or "none besides the default (all ranks)"
    )
    click.echo(
        f"wrote {len(res.files)} ASTRA-sim ETs {res.out_dir / res.prefix}.{{{ranks[0]}..{ranks[-1]}}}.et "
        f"and {res.comm_group_file} (communicator groups: {groups})"
    )
    for r in ranks:
        p = res.plans[r]
        n = p.nodes
        comm = int(n["is_comm"].sum())
        gaps = int((n["name"] == "charllm.host_gap").sum())
        offset = n.filter(pl.col("name") == "charllm.start_offset")["dur_ns"].sum()
        click.echo(
            f"rank {r}: {p.mode} run, {n.height} nodes ({comm} communication"
            + (f", {gaps} host gaps" if gaps else "")
            + (f", start offset {offset / 1e6:.3f} ms" if offset else "")
            + f"), {p.deps.height} dependencies, {p.dependency_free} without any; "
            f"measured end {p.span_ns / 1e6:.3f} ms"
        )
    for note in res.notes:
        click.echo(f"note: {note}")
    click.echo(
        "run: AstraSim_Analytical_Congestion_Unaware "
        f"--workload-configuration={res.out_dir / res.prefix} --comm-group-configuration={res.comm_group_file} "
        "--system-configuration=... --network-configuration=... --remote-memory-configuration=..."
    )
