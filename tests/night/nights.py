"""What the end-to-end night tests share: sign a task's policy with ``ratchet admin task set`` and run the real
night's Dagster assets on a test home (traffic -> examples -> golden_split -> training_set -> lora_adapter ->
evaluation_certificate, the BOM and the daily receipt when asked) against a student server on loopback, with the
``lora_adapter`` defaults on one torch thread. Imported by name (``from tests.night.nights import ...``).

:func:`run_night` is the night on a home with the demo base and a loopback student (the base served and trained
on); :func:`materialize_night` is the same night against a student the caller serves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# A night that certifies cheaply, for tests about where things are rather than the adapter's quality (a moved home,
# a night on S3): a few optimiser steps, enough for some golden answers to be right, and a target they reach.
TINY_TRAINING: dict[str, Any] = {"epochs": 1, "min_steps": 30, "validation_share": 0.0, "num_threads": 1}
LOW_TARGET: dict[str, Any] = {"target": 0.01, "delta": 0.5, "max_tokens": 16}
# The night's own learner (epochs chosen by early stopping on its validation split) without refit's second training
# on every row: for tests that certify at a task's own target and test what the night does around the adapter
# (a new task's policy, imported rows, people's labels, the Responses API), not how good the learner is. Refit is
# tested in test_adaptive_learner.py, and the product's defaults certify in test_night_e2e.py's good adapter.
# Nor does it double a run short of steps (``max_extensions`` 0): one training, as the name says.
ONE_TRAINING: dict[str, Any] = {"refit": False, "max_extensions": 0}


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


def night_assets(*, bom: bool = False, receipt: bool = False) -> list:
    """The night's assets, traffic to the certificate; the BOM and the daily receipt when asked."""
    from ratchet_assets.defs.bom import bom as bom_asset
    from ratchet_assets.defs.daily_receipt import daily_receipt
    from ratchet_assets.defs.evaluation_certificate import evaluation_certificate
    from ratchet_assets.defs.examples import examples
    from ratchet_assets.defs.golden_split import golden_split
    from ratchet_assets.defs.lora_adapter import lora_adapter
    from ratchet_assets.defs.traffic import traffic
    from ratchet_assets.defs.training_set import training_set

    assets = [traffic, examples, golden_split, training_set, lora_adapter, evaluation_certificate]
    return assets + ([bom_asset] if bom else []) + ([daily_receipt] if receipt else [])


def day_training_set(root: Path, day: str, requests: int, *, seed: int, workload: str) -> Any:
    """A day of ``requests`` teacher-answered ``workload`` requests in ``root/lake``, and the night's steps before
    training run as plain functions in ``root/art`` (traffic, examples, the golden split at a share of 0.2, the
    training set): the training set's result (``.path``: its train.jsonl, ``.rows``). For tests of the learner
    itself (``train_lora`` on that file)."""
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set

    write_day(root / "lake", day, requests, seed=seed, workload=workload, student_share=0.0)
    art = root / "art"
    consolidate_traffic(root / "lake", art, day)
    build_examples(art, day)
    split_golden(art, day, share=0.2)
    return build_training_set(art, day)


def demo_base_of(home: Path) -> Path:
    """The home's demo base (models/demo-base), written when missing: what ``lora_adapter`` trains by default."""
    from ratchet_core.student_model import ensure_demo_base

    return ensure_demo_base(home / "models" / "demo-base")


@contextmanager
def loopback_student(base: Path, **options: Any) -> Iterator[str]:
    """Ratchet's student server on ``base`` on loopback; yields its root URL (``/v1`` not added)."""
    from ratchet_gateway.student_server.app import create_app
    from tests.serve import serve_in_thread

    with serve_in_thread(create_app(base, **options)) as url:
        yield url


def materialize_night(
    home: Path,
    day: str,
    base: Path | None = None,
    student_url: str | None = None,
    *,
    training: dict[str, Any] | None = None,
    certificate: dict[str, Any] | None = None,
    bom: bool = False,
    receipt: bool = False,
    assets: list | None = None,
    instance: Any = None,
    resources: dict[str, Any] | None = None,
    paths: Any = None,
) -> Any:
    """The night of ``day`` on ``home`` (never raising: the caller asserts on the result).

    ``base``: the base ``lora_adapter`` trains on (None: its default, the home's demo base; the config then names
    no folder of the home, so a moved home keeps its config hash); ``student_url``: the student server's root
    (``/v1`` is added); ``training``: ``lora_adapter`` config beyond the base and one torch thread;
    ``certificate``: ``evaluation_certificate`` config beyond the student's URL; ``assets``: another selection
    than :func:`night_assets` (config goes only to the selected ones); ``instance``: a Dagster instance (default:
    an ephemeral one); ``resources``: ``night_resources`` options (``certify_target``, ``golden_share``...);
    ``paths``: a ``RatchetPaths`` in place of the home's (a lake or artifacts on a store)."""
    import dagster as dg

    from ratchet_assets.defs.resources import night_resources

    chosen = night_assets(bom=bom, receipt=receipt) if assets is None else assets
    names = {key.to_user_string() for a in chosen for key in a.keys}
    ops: dict[str, Any] = {}
    if "lora_adapter" in names:
        base_config = {} if base is None else {"base_model": str(base)}
        ops["lora_adapter"] = {"config": {**base_config, "num_threads": 1, **(training or {})}}
    if "evaluation_certificate" in names:
        assert student_url is not None, "evaluation_certificate needs a student server"
        ops["evaluation_certificate"] = {
            "config": {"student_base_url": f"{student_url}/v1", **(certificate or {})}
        }
    night = night_resources(home, **(resources or {}))
    if paths is not None:
        night["paths"] = paths
    return dg.materialize(
        chosen,
        partition_key=day,
        instance=dg.DagsterInstance.ephemeral() if instance is None else instance,
        resources=night,
        run_config={"ops": ops},
        raise_on_error=False,
    )


def run_night(home: Path, day: str, *, base: Path | None = None, **options: Any) -> Any:
    """The night of ``day`` on ``home`` with a loopback student serving ``base`` (None: the home's demo base, left
    to ``lora_adapter``'s default) for the certificate; ``options`` as :func:`materialize_night`'s."""
    served = demo_base_of(home) if base is None else base
    with loopback_student(served) as url:
        return materialize_night(home, day, base, url, **options)
