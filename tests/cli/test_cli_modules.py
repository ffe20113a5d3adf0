"""cli/ holds one module per command (issue 23 item 3): cli/app.py keeps only the group, the exit
codes and the registration, so no command's function is defined there."""

from __future__ import annotations

import click

from charllm_trace.cli.app import main


def _commands(group: click.Group, path: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, cmd in group.commands.items():
        out[f"{path}{name}"] = cmd
        if isinstance(cmd, click.Group):
            out.update(_commands(cmd, f"{path}{name} "))
    return out


def test_no_command_is_defined_in_app() -> None:
    where = {name: cmd.callback.__module__ for name, cmd in _commands(main).items() if cmd.callback}
    assert {"info", "convert", "collect", "export", "export perfetto", "export astra-sim", "sanitize"} <= set(
        where
    )
    in_app = sorted(name for name, module in where.items() if module == "charllm_trace.cli.app")
    assert in_app == [], in_app
    assert all(module.startswith("charllm_trace.cli.") for module in where.values()), where


def test_each_moved_command_lives_in_its_module() -> None:
    where = {name: cmd.callback.__module__ for name, cmd in _commands(main).items() if cmd.callback}
    assert where["info"] == "charllm_trace.cli.info"
    assert where["convert"] == "charllm_trace.cli.convert"
    assert where["collect"] == "charllm_trace.cli.collect"
    assert where["export"] == where["export perfetto"] == "charllm_trace.cli.export"
    assert where["export astra-sim"] == "charllm_trace.cli.astra"
    assert where["sanitize"] == "charllm_trace.cli.sanitize"
