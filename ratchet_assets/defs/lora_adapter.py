"""``lora_adapter``: the night's LoRA adapter, trained outside Dagster's process through Dagster Pipes.

Dagster wiring only: the config, the resources, the Pipes launch and the materialisation's metadata. What the
step does (once per training set, config and base, through the effect ledger; versions; files) is
``ratchet_assets.night.adapter``. The ``training_paused`` flag of the signed release manifest skips training (and
so everything downstream) with a log line.

The config's defaults are the settings the demo certifies with (``night.adapter.NIGHT_TRAINING``), so a run
without run config (the UI's "Materialize all", ``dagster asset materialize --select '*'``) computes the same
config hash as the night that trained, and reuses its adapter instead of training again.

Where training runs is the ``training`` resource (``defs/training_launcher.py``): a Pipes subprocess here, or with
``RATCHET_TRAINING_LAUNCHER=k8s`` a GPU pod from ``infra/k8s/training-job.yaml`` through
``dagster_k8s.PipesK8sClient``; the extras are paths on the volume both sides mount, and
``RATCHET_STUDENT_BASE_MODEL`` points at a real base (e.g. Qwen2.5-0.5B) there.
"""

# No `from __future__ import annotations`: Dagster resolves the Config annotation at definition time.
from dataclasses import fields
from typing import Any

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, ModelEndpoints, NightConfig, RatchetPaths, Signer
from ratchet_assets.defs.training_launcher import TrainingLauncher
from ratchet_assets.night import adapter as step
from ratchet_assets.night.commitments import CommitmentMissing
from ratchet_assets.night.lora_trainer import LoraTrainConfig  # its fields are the config's training fields
from ratchet_core.artifact_store import publishes_artifacts

_DEFAULTS = step.NIGHT_TRAINING


class LoraAdapterConfig(dg.Config):
    """Training hyper-parameters and the base model. Defaults: ``night.adapter.NIGHT_TRAINING``, the settings the
    demo certifies with (run config is only for deliberate experiments: another config is another training)."""

    base_model: str = ""  # local HF model folder; "" = RATCHET_STUDENT_BASE_MODEL, else the demo base
    rank: int = _DEFAULTS.rank
    alpha: int = _DEFAULTS.alpha
    dropout: float = _DEFAULTS.dropout
    lr: float = _DEFAULTS.lr
    epochs: int = _DEFAULTS.epochs
    batch_size: int = _DEFAULTS.batch_size
    # the longest row trained on (a longer one is left out, never cut); 0 = the base's context
    max_len: int = _DEFAULTS.max_len
    min_steps: int = _DEFAULTS.min_steps  # at least this many steps: small training sets run more epochs
    seed: int = _DEFAULTS.seed
    pii_surrogates: float = _DEFAULTS.pii_surrogates  # share of rows trained with made-up e-mails/phones
    # Early stopping (the learner adapts; defaults and why: ``night.adapter.NIGHT_TRAINING``): the share of training
    # rows held out as a validation split (0 = off: a fixed schedule of `epochs`/`min_steps`), epochs without a
    # better validation accuracy before stopping, the most epochs, and a time budget in seconds (0 = none).
    validation_share: float = _DEFAULTS.validation_share
    patience: int = _DEFAULTS.patience
    max_epochs: int = _DEFAULTS.max_epochs
    time_budget_s: float = _DEFAULTS.time_budget_s
    # at equal validation accuracy, an epoch is better only with a loss lower by this (nats per target token)
    min_loss_delta: float = _DEFAULTS.min_loss_delta
    # validation split by near-duplicate groups ("near_duplicate") or by each prompt's hash ("prompt")
    validation_groups: str = _DEFAULTS.validation_groups
    # "warm": start from the tasks' newest live or certified adapter when nothing forbids it, training on the new
    # rows plus a replay sample (`replay_share` of the older rows by hash, at most `replay_cap`); "cold": a fresh LoRA
    start: str = _DEFAULTS.start
    replay_share: float = _DEFAULTS.replay_share
    replay_cap: int = _DEFAULTS.replay_cap
    warm_lr: float = _DEFAULTS.warm_lr  # the peak learning rate of a warm start
    # the split chooses the epochs, then every training row (held-out ones included) teaches the adapter saved
    refit: bool = _DEFAULTS.refit
    # the validation split holds out at least this many rows (its share raised, never above 0.3); 0 = the share
    validation_min_rows: int = _DEFAULTS.validation_min_rows
    # a cold run whose schedule ran out with a task below this split accuracy and still rising runs again on a
    # schedule twice as long, at most `max_extensions` times (``lora_trainer``, "Short of steps"); 0 = off
    extend_below: float = _DEFAULTS.extend_below
    # > 0: `extend_below` is a certificate's target at this delta, and a task must reach the split accuracy that
    # would certify it on its split's rows (0.99 on ~100 rows); 0: `extend_below` is that accuracy itself
    extend_delta: float = _DEFAULTS.extend_delta
    # how a run short of steps gets them: "refit" = every row teaches for the whole doubled schedule, no second
    # selection run; "rerun" = a new selection run on the doubled schedule chooses the refit's steps
    extend_by: str = _DEFAULTS.extend_by
    # a refit trains at least the fixed schedule's floor (`epochs`, `min_steps`), the steps patience never cuts
    refit_floor: bool = _DEFAULTS.refit_floor
    # patience counts a new lowest validation loss as progress too (the best epoch is still chosen by accuracy)
    patience_on_loss: bool = _DEFAULTS.patience_on_loss
    max_extensions: int = _DEFAULTS.max_extensions
    # torch threads: 0 = every CPU this process may use, idle threads sleeping (``LoraTrainConfig.num_threads``).
    # Not part of the config hash (a rerun reuses the night's adapter); the adapter records the count it trained with.
    num_threads: int = _DEFAULTS.num_threads or 0

    def train_config(self) -> dict[str, Any]:
        names = {f.name for f in fields(LoraTrainConfig)}
        data = {k: v for k, v in self.model_dump().items() if k in names}
        return data


@dg.asset(
    partitions_def=daily_partitions,
    deps=["training_set"],
    kinds={"pytorch", "peft"},
    group_name="night",
    output_required=False,
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def lora_adapter(
    context: dg.AssetExecutionContext,
    config: LoraAdapterConfig,
    paths: RatchetPaths,
    control_db: ControlDB,
    signer: Signer,
    models: ModelEndpoints,
    training: TrainingLauncher,
    night: NightConfig,
):
    """The night's LoRA adapter for the student, trained once per training set, config and base."""
    day = context.partition_key
    artifacts = paths.artifacts_root()
    try:
        step.require_training_set(artifacts, day)
    except step.AdapterError as exc:
        raise dg.Failure(str(exc)) from None
    if step.training_paused(control_db.engine(), signer.public_key()):
        context.log.warning(
            "training is paused by the release manifest (training_paused): no adapter tonight; resume with "
            "`ratchet admin flag training_paused false --reason ...`"
        )
        return
    try:
        base = step.resolve_base(config.base_model or models.base_model(), paths.home_path())
        result = step.train_adapter(
            artifacts,
            day,
            base,
            config.train_config(),
            control_db.effects(),
            training.launcher(context),
            log=context.log.info,
            release=step.release_view(control_db.engine(), signer.public_key()),
            public_keys=signer.verify_keys(),  # earlier nights' certificates: a larger budget after a miss
            # what a task's split must reach before its run stops being short of steps
            certify=(night.certify_target, night.certify_delta),
        )
    except (step.AdapterError, CommitmentMissing) as exc:
        raise dg.Failure(str(exc)) from None
    record = result.record
    metadata: dict[str, Any] = {
        "version": record["version"],
        "adapter_sha256": dg.MetadataValue.text(record["adapter_sha256"]),
        "base": record["base"]["name"],
        "final_loss": dg.MetadataValue.float(float(record["final_loss"])),
        "steps": dg.MetadataValue.int(int(record["steps"])),
        "train_seconds": dg.MetadataValue.float(float(record["seconds"])),
        "train_examples": dg.MetadataValue.int(int(record.get("examples") or 0)),
        "reused": result.reused,
        "start": str((record.get("start") or {}).get("mode", "cold")),
        "start_reason": str((record.get("start") or {}).get("reason", "")),
        "step_budget_factor": dg.MetadataValue.int(int((record.get("step_budget") or {}).get("factor", 1))),
        "training_set_root": dg.MetadataValue.text(record["train_rows_root"]),
        "dagster/uri": dg.MetadataValue.path(str(step.adapter_path(artifacts, record))),
    }
    learner = record.get("learner") or {}  # the learner's choices (numeric: the UI plots them per partition)
    if learner.get("epochs_run") is not None:
        metadata["epochs_run"] = dg.MetadataValue.int(int(learner["epochs_run"]))
    if "validation_accuracy" in learner:
        metadata["validation_accuracy"] = dg.MetadataValue.float(float(learner["validation_accuracy"]))
        metadata["best_epoch"] = dg.MetadataValue.int(int(learner["best_epoch"]))
        metadata["stopped"] = dg.MetadataValue.text(str(learner["stopped"]))
        for task, t in sorted(learner.get("validation_per_task", {}).items()):
            metadata[f"validation_accuracy/{task}"] = dg.MetadataValue.float(float(t["accuracy"]))
    for name, value in result.reported.items():
        metadata.setdefault(f"pipes/{name}", value)
    yield dg.MaterializeResult(metadata=metadata)
