"""One option name per meaning across the whole `ratchet` CLI: `--key` is a public key in every subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import click

from ratchet_cli.main import cli
from ratchet_stats.cli import build_parser

# Each name that says "key", and the one meaning it has wherever it appears.
KEY_OPTIONS = {
    "--key": "public key",
    "--key-file": "public key",
    "--example-key": "example key",
    "--api-key": "bearer",
    "--teacher-api-key": "api key",
    "--effects-api-key": "api key",
    "--signing-key-file": "",
    "--keys": "key list",
    "--train-keys": "",
    "--golden-keys": "",
    "--keyring-out": "",
}


def _click_options(command: click.Command, path: str) -> Iterator[tuple[str, str, str]]:
    for param in command.params:
        if isinstance(param, click.Option):
            for name in param.opts:
                yield path, name, param.help or ""
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from _click_options(sub, f"{path} {name}")


def _argparse_options(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, str, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _argparse_options(sub, f"{path} {name}")
        else:
            for name in action.option_strings:
                yield path, name, action.help or ""


def every_option() -> list[tuple[str, str, str]]:
    """(command path, option name, help) of every option of `ratchet`, the auditor's argparse commands too."""
    return [*_click_options(cli, "ratchet"), *_argparse_options(build_parser("ratchet"), "ratchet")]


def test_every_key_option_has_its_one_meaning():
    seen = [(path, name, help_) for path, name, help_ in every_option() if "key" in name]
    assert {name for _, name, _ in seen} >= {"--key", "--example-key", "--key-file"}
    unknown = sorted({name for _, name, _ in seen} - set(KEY_OPTIONS))
    assert not unknown, f"new key option(s) {unknown}: reuse a name in KEY_OPTIONS with the same meaning"
    wrong = [
        f"{path} {name}: {help_!r}"
        for path, name, help_ in seen
        if KEY_OPTIONS[name] and KEY_OPTIONS[name] not in help_.lower()
    ]
    assert not wrong, "options whose help says another meaning than their name:\n" + "\n".join(wrong)


def test_the_walk_sees_the_auditor_and_the_operator_commands():
    paths = {path for path, _, _ in every_option()}
    assert {
        "ratchet verify manifest",
        "ratchet proof make",
        "ratchet admin erase",
        "ratchet liverun verify",
    } <= paths


def _click_params(command: click.Command, path: str) -> Iterator[tuple[str, click.Parameter]]:
    for param in command.params:
        yield path, param
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from _click_params(sub, f"{path} {name}")


def test_every_actor_option_follows_the_name_rule():
    """``--actor`` is logged and signed into the audit log: every command's checks it (ratchet_core/names.py)."""
    from ratchet_assets.cli_names import actor_checked

    actors = [(path, p) for path, p in _click_params(cli, "ratchet") if "--actor" in getattr(p, "opts", ())]
    assert len(actors) >= 5  # the release, key and erase commands
    for path, param in actors:
        assert param.callback is actor_checked, path
    ctx = click.Context(cli)
    param = actors[0][1]
    assert actor_checked(ctx, param, "") == "" and actor_checked(ctx, param, None) is None
    assert actor_checked(ctx, param, "ops.bot+ci@example.com") == "ops.bot+ci@example.com"
    for bad in ("alice\n[signed] bob", "\x1b[2Jroot", "-rf", "a" * 129, "<script>"):
        try:
            actor_checked(ctx, param, bad)
        except click.BadParameter as exc:
            assert "actor" in exc.message
        else:
            raise AssertionError(f"{bad!r} was accepted")
