"""`ratchet admin`: the operator's group. Subcommands come from the sibling modules in ADMIN_MODULES.

Each module exposes ``COMMANDS``: a list of click commands/groups added to ``admin`` as they are (or
``register(group)`` for anything fancier). A module not present in this install is skipped.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

ADMIN_MODULES = (
    "ratchet_assets.admin.effect_ledger_cmd",
    "ratchet_assets.admin.approve_cmd",
    "ratchet_assets.admin.erase_cmd",
    "ratchet_assets.admin.release_cmd",
    "ratchet_assets.admin.export_cmd",
    "ratchet_assets.admin.keys_cmd",
    "ratchet_assets.admin.task_cmd",
    "ratchet_assets.admin.client_cmd",
)


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def admin() -> None:
    """Operate releases: versions, promote, rollback, flags, effects, erasures, trusted keys, client limits, audit log."""


for _name in ADMIN_MODULES:
    if not _present(_name):
        continue
    _module = importlib.import_module(_name)
    if hasattr(_module, "register"):
        _module.register(admin)
    for _command in getattr(_module, "COMMANDS", ()):
        admin.add_command(_command)
