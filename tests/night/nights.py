"""What the end-to-end night tests share: sign a task's policy with ``ratchet admin task set`` and run the real
night's Dagster assets on a home (traffic -> examples -> golden_split -> training_set -> lora_adapter ->
evaluation_certificate, the BOM when asked) against a student server on loopback, with the ``lora_adapter``
defaults on one torch thread. Imported by name (``from tests.night.nights import ...``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def set_task_policy(home: Path, task: str, options: list[str]) -> None:
    """``ratchet admin task set TASK OPTIONS...`` on the home's control DB, signed with its key."""
    from click.testing import CliRunner

    from ratchet_assets.admin.cli import admin

    res = CliRunner().invoke(
        admin,
        ["task", "set", task, *options, "--control-db", f"sqlite:///{(home / 'control.db').as_posix()}",
         "--signing-key-file", str(home / "keys" / "signing.key")],
        catch_exceptions=False,
    )  # fmt: skip
    assert res.exit_code == 0, res.output


def materialize_night(
    home: Path,
    day: str,
    base: Path,
    student_url: str,
    *,
    training: dict[str, Any] | None = None,
    bom: bool = False,
) -> Any:
    """The night of ``day`` on ``home`` in an ephemeral Dagster instance (never raising: the caller asserts on the
    result). ``student_url``: the student server's root (``/v1`` is added); ``training``: ``lora_adapter`` config
    beyond the base and one torch thread."""
    import dagster as dg

    from ratchet_assets.defs.bom import bom as bom_asset
    from ratchet_assets.defs.evaluation_certificate import evaluation_certificate
    from ratchet_assets.defs.examples import examples
    from ratchet_assets.defs.golden_split import golden_split
    from ratchet_assets.defs.lora_adapter import lora_adapter
    from ratchet_assets.defs.resources import night_resources
    from ratchet_assets.defs.traffic import traffic
    from ratchet_assets.defs.training_set import training_set

    assets = [traffic, examples, golden_split, training_set, lora_adapter, evaluation_certificate]
    run_config = {
        "ops": {
            "lora_adapter": {"config": {"base_model": str(base), "num_threads": 1, **(training or {})}},
            "evaluation_certificate": {"config": {"student_base_url": f"{student_url}/v1"}},
        }
    }
    return dg.materialize(
        [*assets, bom_asset] if bom else assets,
        partition_key=day,
        instance=dg.DagsterInstance.ephemeral(),
        resources=night_resources(home),
        run_config=run_config,
        raise_on_error=False,
    )
