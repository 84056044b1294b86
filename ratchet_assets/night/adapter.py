"""The ``lora_adapter`` step: train the night's LoRA adapter once per (training set, config, base), or reuse it.

Plain functions (no Dagster): the ``lora_adapter`` asset calls ``train_adapter`` with a launcher that runs
``python -m ratchet_assets.night.train_job`` through Dagster Pipes; anything else (the simulator, a script) can
pass ``train_in_process``, which runs the same training code in this process.

Once per (training-set root, config hash, base identity): the launch goes through the effect ledger (effect
``training.launch``, policy ``block``), so rerunning a night, or a second run racing this one, reuses the adapter
instead of training again. The training-set root is the one ``training_set`` committed
(``train/day=D/commitment.json``), read, not recomputed. The version is ``v<N>-<first 8 hex of the adapter
digest>``, where N is this launch's rank among all training launches in the ledger (creation order): stable
across reruns, never reused.

Where the weights start (``night.warm_start``): from the tasks' newest live or certified adapter when the base,
the LoRA's shape and the tasks' policies are unchanged, on the new rows plus a replay sample; else cold, on the
whole training set. The record's ``start`` says which, why, and the parent (version, digest, day); the BOM carries
it. The launch key does not name the parent: a rerun reuses what the first launch trained.

Files: ``adapters/<version>/`` holds only the PEFT files (``adapter_config.json``, ``adapter_model.safetensors``,
``ratchet_train.json``) so its digest is the adapter's; ``adapters/day=D/adapter.json`` (the *record*) says which
version the night produced and how (base identity and licence, config, training numbers, effect key). Later steps
(``night.certificate``, ``night.bom_writer``) start from that record.

The record, and the ``training.launch`` result in the effect ledger it is reused from, hold no absolute path, so a
home moved or restored elsewhere reuses its adapters: ``adapter_dir`` is the adapter's name in the artifacts tree
(``adapters/<version>``, read with :func:`adapter_path`; ``ratchet_core.layout``, "Stored names"), and the base
model is named by its identity (name, sha256, files) and ``base_license``, what the BOM needs from it, taken from
the base this run used. A record written before then holds absolute paths (``adapter_dir``, ``base_path``): it is
read the same way, and a rerun of the step rewrites it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet_assets.night import warm_start
from ratchet_assets.night.commitments import training_commitment
from ratchet_assets.night.lora_trainer import LoraTrainConfig
from ratchet_assets.release.content import content_digest, existing_version, record_content
from ratchet_core.chat_encoding import TRAIN_META_FILE
from ratchet_core.layout import ArtifactLayout
from ratchet_stats.certificate import BASE_KEYS, adapter_digest, adapter_file_hashes

EFFECT = "training.launch"
LEASE_SECONDS = 6 * 3600

# The night's training settings: the ones the demo certifies with, and the ``lora_adapter`` asset's defaults (so a
# run without run config, e.g. the UI's "Materialize all", computes the same config hash and reuses the adapter).
# They are the trainer's defaults (``ratchet_assets.night.lora_trainer``: rank 32, lr 4e-3, max_len 0 = the base's
# context, min_steps 150)
# except: one epoch, since the 7-day window grows every night and 4 epochs made each night longer than the last
# (``min_steps`` still gives a small set enough steps); half the rows trained with made-up e-mails/phones in place
# of placeholders (``pii_surrogates``); one torch thread, measured 3.6x faster than two spinning threads on the
# embedded default's shared 2-core machine (10 steps: 6.9 s vs 24.9 s), and not part of the config hash (the count
# moves the last bits of the weights, not what was asked; ``LoraTrainConfig.num_threads``). The demo, whose nights
# have the machine to themselves, passes 0: every CPU, idle threads sleeping.
#
# The learner adapts (issue 16): the night trains until a validation split held out of the training rows (never
# golden rows: the training set has none) stops improving, instead of a fixed step count. Defaults:
# - validation_share 0.2, validation_min_rows 100: a fifth of the training rows, at least 100 (at most 0.3 of them),
#   chosen by a hash of their near-duplicate group (``lora_trainer.near_duplicate_key``: no near-duplicate on both
#   sides); the refit below trains on them once the split has chosen;
# - patience 2: stop after 2 epochs without a better validation accuracy (the best epoch's weights are kept);
# - max_epochs 8: at most 8 epochs (the learning rate decays linearly over them); a split all right stops at once;
# - time_budget_s 1800: stop after the epoch that passes 30 min (a safety net on a busy machine; a run cut by it
#   is the only one whose bytes depend on the machine's speed: its ``stopped`` says so).
# Patience counts only once the fixed schedule (``epochs``, ``min_steps``: at least 150 steps) has run, so a small
# set, whose validation split is a handful of rows, still gets enough steps. The choices (steps, epochs, validation accuracy per
# task, why it stopped) are in the adapter's ``ratchet_train.json``, its record, the asset's metadata and the BOM.
#
# The split chooses, then every row teaches (``refit``, ARCHITECTURE.md, the night): once the validation split has
# chosen the steps, a cold night's adapter is trained again from the same seed on every training row, held-out
# groups included, for that many steps. Golden rows are never in the training set, so the certificate is as honest
# as before; the split only picks a number. A warm night is never refit: it saves the epoch that beat its parent on
# the held-out groups (the new rows' and the old ones'), or keeps the parent (``lora_trainer``, "Refit"). With every row teaching in the end,
# the split can be larger: a fifth of the rows, at least 100 (``validation_min_rows``; at most 0.3), so a good
# parent no longer scores 1.0 on a split of a dozen rows and warm nights can tell better from equal.
#
# Short of steps (``extend_below`` 0.95, ``extend_delta`` 0.05, ``max_extensions`` 2; ``lora_trainer``, "Short of
# steps"): a cold night whose schedule runs out while a task's split accuracy is below what that split would need
# to certify 0.95 at delta 0.05 (the certificate's bound: every row under 94 rows, 0.99 at 100) and still rising
# runs again on a schedule twice as long, up to 4x: `departments` night 1 ended its 8 epochs at 0.52 and rising
# (stop_2); `make demo`-sized `tickets` nights ended at 0.967-0.987 on 76-91 rows and did not certify (stop_4). A
# task whose split reached it or stays flat (`extract`) does not trigger it. ``extend_by`` "refit": the doubled
# schedule is not run again as a selection; the refit trains every row for the whole of it (stop_5: on the same ten
# nights, golden rows right 931 -> 945 of 956, certified 5 -> 6, each doubled night ~0.6x as long).
#
# Warm start (``night.warm_start``): a night starts from its tasks' newest live or certified adapter when the base,
# the LoRA's shape and the tasks' policies are unchanged, and trains on the rows new since the parent's day plus a
# replay sample of older ones (a quarter of them by hash, at most 1000); the validation split still decides when to
# stop. ``start="cold"`` forces a fresh LoRA every night.
NIGHT_TRAINING = LoraTrainConfig(
    start="warm",
    epochs=1,
    pii_surrogates=0.5,
    num_threads=1,
    validation_share=0.2,
    validation_min_rows=100,
    refit=True,
    extend_below=0.95,
    extend_delta=0.05,
    extend_by="refit",
    refit_floor=True,
    patience_on_loss=True,
    max_extensions=2,
    patience=2,
    max_epochs=8,
    time_budget_s=1800.0,
)

# extras (base_path, train_jsonl, out_dir, result_path, config) -> (the TrainResult as a dict, as the training
# process wrote it to result_path; metadata it reported for the UI)
Launcher = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]]


class AdapterError(RuntimeError):
    """The adapter cannot be trained or reused; the message says what to do."""


@dataclass(frozen=True)
class ReleaseView:
    """What the release state says about parents: the live version per task, the (version, task) pairs the
    versions registry holds as certified, and the signed per-task policies."""

    live: dict[str, str | None]
    certified: list[tuple[str, str]]
    policies: dict[str, Any]


def release_view(engine: Any, public_key: Any) -> ReleaseView:
    """The :class:`ReleaseView` of the control DB: the newest verified manifest and the versions registry."""
    import sqlalchemy as sa

    from ratchet_core.control_db import ensure_schema, versions
    from ratchet_core.manifest import latest_verified

    ensure_schema(engine)
    manifest, _ = latest_verified(engine, public_key)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(versions.c.version, versions.c.task).where(
                versions.c.status.notin_(("rejected", "rolled_back"))
            )
        ).all()
    if manifest is None:
        return ReleaseView({}, [(v, t) for v, t in rows], {})
    live = {task: release.live_version for task, release in manifest.tasks.items()}
    return ReleaseView(live, [(v, t) for v, t in rows], dict(manifest.policies))


@dataclass
class AdapterResult:
    """What ``train_adapter`` did: the record (also written to ``adapters/day=D/adapter.json``)."""

    record: dict[str, Any]
    reused: bool
    # what the training process reported for the UI (Pipes metadata); empty when reused
    reported: dict[str, Any] = field(default_factory=dict)


def read_record(artifacts: str | Path, day: str, needed_by: str = "this step") -> dict[str, Any]:
    """The adapter record of night ``day`` (what ``train_adapter`` wrote to ``adapters/day=D/adapter.json``)."""
    pointer = ArtifactLayout(artifacts).adapter_pointer(day)
    if not pointer.exists():
        raise AdapterError(
            f"no adapter for {day} ({pointer} is missing): materialise `lora_adapter` for {day} before {needed_by}"
        )
    return json.loads(pointer.read_text())


def adapter_path(artifacts: str | Path | ArtifactLayout, record: dict[str, Any]) -> Path:
    """The adapter folder a record names, under the artifacts root we have now (a name, or an older record's
    absolute path: ``ArtifactLayout.resolve``)."""
    layout = artifacts if isinstance(artifacts, ArtifactLayout) else ArtifactLayout(artifacts)
    return layout.resolve(record.get("adapter_dir") or layout.adapter_dir(record["version"]))


def base_license_of(base: Path) -> str:
    """The base model's licence as the BOM states it (``bom_document.base_license``), read from the base itself."""
    from ratchet_assets.night.bom_document import base_license
    from ratchet_core.student_model import is_demo_base

    return base_license(base, is_demo_base(base))


def require_training_set(artifacts: str | Path, day: str) -> Path:
    """``train/day=D/train.jsonl``, which must exist and hold at least one row."""
    train_jsonl = ArtifactLayout(artifacts).train_jsonl(day)
    if not train_jsonl.exists():
        raise AdapterError(
            f"no training set at {train_jsonl.parent}: materialise `training_set` for {day} first"
        )
    with open(train_jsonl, "rb") as fh:
        if not any(line.strip() for line in fh):
            raise AdapterError(
                f"the training set of {day} is empty: no teacher-answered traffic to learn from yet"
            )
    return train_jsonl


def resolve_base(chosen: str, home: Path) -> Path:
    """The base model folder: ``chosen`` (config or RATCHET_STUDENT_BASE_MODEL), else the demo base (built once)."""
    from ratchet_core.student_model import ensure_demo_base

    if chosen:
        path = Path(chosen).expanduser()
        if not (path / "config.json").exists():
            raise AdapterError(
                f"base model {path} has no config.json: set RATCHET_STUDENT_BASE_MODEL to a local Hugging Face "
                "model folder (nothing is downloaded at run time)"
            )
        return path
    return ensure_demo_base(Path(home) / "models" / "demo-base")


def training_paused(engine: Any, public_key: Any) -> bool:
    """The ``training_paused`` flag of the newest verified release manifest (False when there is none)."""
    from ratchet_core.manifest import latest_verified

    manifest, _rejected = latest_verified(engine, public_key)
    return bool(manifest is not None and manifest.flags.training_paused)


def config_hash(train_config: dict[str, Any]) -> str:
    """Digest of the training config without ``num_threads``: the thread count moves the last bits of the weights,
    not what was asked for, so a rerun with another count reuses the night's adapter (the adapter's
    ``ratchet_train.json`` records the count it trained with)."""
    from ratchet_stats.canonical import digest

    return digest({k: v for k, v in train_config.items() if k != "num_threads"})


def extend_targets(
    tasks: Sequence[str],
    policies: dict[str, Any] | None,
    certify: tuple[float, float] | None,
    train_config: dict,
) -> dict[str, list[float]]:
    """task -> [target, delta] of the certificate that will judge it (``task_policy.resolve``: its policy's, else
    the night's ``certify``), for the "short of steps" rule (``lora_trainer.short_of_steps``), naming only the tasks
    whose pair differs from the config's ``extend_below``/``extend_delta``: a night at the defaults keeps its
    config hash. Empty when the rule is off or reads ``extend_below`` as a split accuracy (``extend_delta`` 0),
    and when neither the night nor a policy says what certifies (``certify`` None, no policies)."""
    from ratchet_core.task_policy import resolve

    below = float(train_config.get("extend_below") or 0.0)
    delta = float(train_config.get("extend_delta") or 0.0)
    if below <= 0 or delta <= 0 or (certify is None and not policies):
        return {}
    night_target, night_delta = certify if certify is not None else (below, delta)
    out: dict[str, list[float]] = {}
    for task in sorted(set(tasks)):
        r = resolve(task, policies or None, target=night_target, delta=night_delta)
        if (float(r.target), float(r.delta)) != (below, delta):
            out[task] = [float(r.target), float(r.delta)]
    return out


def launch_rank(effects: Any, key: str) -> int:
    """1-based rank of ``key`` among all training launches, by creation time: the N of ``v<N>-...``."""
    rows = effects.list_effects(effect_type=EFFECT, limit=1_000_000)
    ordered = sorted(rows, key=lambda r: (r.created_at, r.key))
    return next(i for i, r in enumerate(ordered, 1) if r.key == key)


def effective_hyperparameters(adapter_dir: Path, train_config: dict[str, Any]) -> dict[str, Any]:
    """Every hyper-parameter the run used (the trainer's own record when present), for the BOM."""
    meta_file = Path(adapter_dir) / "ratchet_train.json"
    data = dict(train_config)
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
        data.update(meta.get("config") or {})
        for key in (
            "max_len",
            "prompt_window",
        ):  # max_len as resolved (0 = the base's context); older: the cut
            if key in meta:
                data[key] = meta[key]
    return {k: v for k, v in data.items() if v is not None and k != "num_threads"}


def row_tasks(artifacts: str | Path, day: str) -> list[str]:
    """The task of each row of ``train/day=D/train.jsonl`` (its ``keys.txt`` is in the same order), read from the
    examples of the set's window and the imports (``"?"`` for a key found in neither)."""
    from ratchet_assets.night import connect, sql_list

    layout = ArtifactLayout(artifacts)
    keys = layout.train_keys(day).read_text(encoding="ascii").split()
    days = json.loads(layout.train_commitment(day).read_text()).get("days") or [day]
    files = [p for d in days if (p := layout.examples_file(d)).exists()] + layout.import_files(until=day)
    if not files:
        return ["?"] * len(keys)
    con = connect()
    try:
        pairs = con.execute(
            f"SELECT DISTINCT example_key, task FROM read_parquet({sql_list(files)}, union_by_name = true)"
        ).fetchall()
    finally:
        con.close()
    task_of = dict(pairs)
    return [task_of.get(k, "?") for k in keys]


def learner_numbers(trained: dict[str, Any]) -> dict[str, Any]:
    """The learner's choices from a TrainResult dict: epochs, stop reason, validation accuracy (all and per task)."""
    v = trained.get("validation") or {}
    out: dict[str, Any] = {"epochs_run": v.get("epochs_run", trained.get("epochs_run"))}
    if v:
        out.update(
            validation_rows=v["rows"],
            validation_accuracy=v["final_accuracy"],
            validation_accuracy_per_epoch=v["accuracy_per_epoch"],
            best_epoch=v["best_epoch"],
            stopped=v["stopped"],
            validation_per_task=v.get("per_task", {}),
        )
        # only when set, so the learner properties of older records keep their bytes
        for name, field_ in (
            ("validation_groups", "groups"),
            ("initial_validation_accuracy", "initial_accuracy"),
            ("initial_train_accuracy", "initial_train_accuracy"),
        ):
            if v.get(field_) is not None:
                out[name] = v[field_]
        if v.get("short_of_steps"):  # the schedule doubled this many times (lora_trainer, "Short of steps")
            out["schedule_doublings"] = len(v["short_of_steps"])
        refit = v.get("refit")
        if refit and refit.get("kept") == "selection":
            # the refit fell short on the split's rows (lora_trainer, "Refit"): the adapter saved is the chosen
            # epoch's, trained on every row but the split's (BOM provenance)
            out["refit_short_on"] = ",".join(refit.get("short_on") or [])
        elif refit:  # the adapter saved was trained on every row for the chosen epochs (BOM provenance)
            out.update(
                refit_rows=refit["rows"],
                refit_epochs=refit["epochs"],
                selection_steps=refit["selection_steps"],
            )
    return out


def train_in_process(extras: dict[str, Any], log: Callable[[str], None] = print) -> tuple[dict, dict]:
    """A ``Launcher`` that trains in this process (``train_job.run_training``), for callers without Dagster."""
    from ratchet_assets.night.train_job import run_training

    return run_training(extras, log)


def _start_plan(
    artifacts: str | Path,
    day: str,
    base: Path,
    base_sha256: str,
    train_config: dict[str, Any],
    effects: Any,
    release: ReleaseView | None,
    tasks: list[str],
) -> tuple[warm_start.StartPlan, str | None]:
    """(how the night starts, the digest of its tasks' policies); ``night.warm_start``."""
    if release is None:
        return warm_start.cold("no release state was given to this run"), None
    names = sorted({t for t in tasks if t != "?"})
    digest = warm_start.policies_sha256(release.policies, names)
    records = warm_start.launch_records(effects, EFFECT) if train_config.get("start") == "warm" else {}
    plan = warm_start.plan_start(
        artifacts,
        day,
        base=base,
        tasks=names,
        base_sha256=base_sha256,
        train_config=train_config,
        policies_digest=digest,
        records=records,
        live=release.live,
        certified=release.certified,
    )
    return plan, digest


def weights_digest(files: dict[str, str]) -> str:
    """The adapter digest of its weights and adapter config: every file but the night's training record
    (``ratchet_train.json`` names the night's rows, steps and validation, so it differs between two nights that keep
    the same weights). What ``release.content`` calls the adapter's part of a version's content."""
    return adapter_digest({name: sha for name, sha in files.items() if name != TRAIN_META_FILE})


def known_contents(artifacts: str | Path | ArtifactLayout, day: str) -> list[tuple[str, str]]:
    """(version, content digest) of every other night's adapter record, oldest night first
    (``release.content.existing_version`` reads it)."""
    layout = artifacts if isinstance(artifacts, ArtifactLayout) else ArtifactLayout(artifacts)
    out: list[tuple[str, str]] = []
    for other in layout.days("adapters"):
        pointer = layout.adapter_pointer(other)
        if other == day or not pointer.is_file():
            continue
        try:
            record = json.loads(pointer.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if record.get("version") and record.get("adapter_sha256"):
            out.append((str(record["version"]), record_content(record)))
    return out


def train_adapter(
    artifacts: str | Path,
    day: str,
    base: Path,
    train_config: dict[str, Any],
    effects: Any,
    launch: Launcher,
    log: Callable[[str], None] = lambda line: None,
    release: ReleaseView | None = None,
    public_keys: Any = None,
    certify: tuple[float, float] | None = None,
) -> AdapterResult:
    """Train (or reuse) the adapter for night ``day`` and write its record; see the module docstring.

    ``release``: the live and certified versions and the policies (``release_view``), which a warm start needs to
    find its parent (``night.warm_start``); None = a cold start. ``public_keys``: the keys earlier nights'
    certificates are verified with; a night after nights that did not certify one of its tasks trains with a
    larger step budget (``night.step_budget``); None = the config's budget. ``certify``: the night's certificate
    target and delta (``NightConfig``), which with the policies' own targets say how accurate a task's split must
    be before its run stops being short of steps (``extend_targets``); None = the config's ``extend_below``."""
    from ratchet_assets.night.step_budget import step_budget
    from ratchet_core.student_model import base_identity

    layout = ArtifactLayout(artifacts)
    train_jsonl = require_training_set(artifacts, day)
    tasks = row_tasks(artifacts, day)
    budget = step_budget(artifacts, day, sorted(set(tasks)), public_keys)
    if budget.factor > 1:
        train_config = budget.apply(train_config)
        log(budget.describe())
    targets = extend_targets(tasks, release.policies if release else None, certify, train_config)
    if targets:  # part of the config, so of its hash: another target is another training
        train_config = {**train_config, "extend_targets": targets}
    identity = base_identity(base)
    chash = config_hash(train_config)
    rows_root = training_commitment(artifacts, day).rows.root
    key = f"{rows_root}:{chash}:{identity['sha256']}"
    fingerprint = hashlib.sha256(key.encode()).hexdigest()
    begin = effects.begin(EFFECT, key, fingerprint, lease_seconds=LEASE_SECONDS)
    if begin.outcome == "execute":
        staging = layout.adapter_staging(fingerprint)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        plan, policies_digest = _start_plan(
            artifacts, day, base, identity["sha256"], train_config, effects, release, tasks
        )
        log(f"{plan.mode} start: {plan.reason}")
        extras = {
            "base_path": str(base),
            "train_jsonl": str(train_jsonl),
            "out_dir": str(staging / "adapter"),
            "result_path": str(staging / "result.json"),
            "config": train_config,
            "row_tasks_path": str(staging / "row_tasks.json"),
        }
        if plan.mode == "warm":
            assert plan.parent is not None and plan.rows is not None
            extras["init_adapter"] = str(adapter_path(layout, plan.parent.record))
            extras["train_jsonl"] = str(staging / "train.jsonl")
            warm_start.write_subset(train_jsonl, plan.rows, staging / "train.jsonl")
            tasks = [tasks[i] for i in plan.rows]
            if plan.held is not None:  # the window's held-out groups (night.warm_start): the trainer's split
                extras["held_out_path"] = str(staging / "held_out.json")
                (staging / "held_out.json").write_text(json.dumps(list(plan.held)), encoding="utf-8")
        (staging / "row_tasks.json").write_text(json.dumps(tasks), encoding="utf-8")
        try:
            trained, reported = launch(extras)
            content = content_digest(
                weights_digest(trained["files"]),
                identity["sha256"],
                identity.get("chat_template_sha256", ""),
                chash,
            )
            # A version is its content (release.content): the same weights, base, template and config as an
            # earlier night's are that night's version, re-certified on this night's golden set, not a new one.
            same = existing_version(known_contents(layout, day), content)
            version = same or f"v{launch_rank(effects, key)}-{trained['adapter_sha256'][:8]}"
            target = layout.adapter_dir(version)
            if same and target.is_dir():
                log(f"{version} again: the adapter equals {version}'s (same weights, base, template, config)")
                # the version's folder is kept as it is (its training record names the night that made it): the
                # record, the certificate and the BOM name the files that are there
                trained = {**trained, "files": adapter_file_hashes(target)}
                trained["adapter_sha256"] = adapter_digest(trained["files"])
            else:
                shutil.rmtree(target, ignore_errors=True)
                (staging / "adapter").replace(target)
            shutil.rmtree(staging, ignore_errors=True)
        except Exception as exc:
            effects.fail(begin.token, f"{type(exc).__name__}: {exc}"[:1000])
            raise
        record = {
            "version": version,
            "adapter_dir": layout.name_of(target),
            "adapter_sha256": trained["adapter_sha256"],
            "files": trained["files"],
            "base": {k: identity[k] for k in BASE_KEYS},  # what the certificate and BOM name: no path
            "base_license": base_license_of(base),
            "config": train_config,
            "hyperparameters": effective_hyperparameters(target, train_config),
            "config_hash": chash,
            "train_rows_root": rows_root,
            "train_day": day,
            "steps": trained["steps"],
            "final_loss": trained["final_loss"],
            "seconds": trained["seconds"],
            "cpu_seconds": trained.get("cpu_seconds"),
            "examples": trained.get("examples", 0),
            "rows_left_out": trained.get("rows_left_out", 0),  # longer than max_len: never cut, left out
            "learner": learner_numbers(trained),
            "effect_key": key,
            "content_sha256": content,
            "recertifies": same or "",
            "start": plan.to_record(
                float(train_config.get("replay_share", 0.25)), int(train_config.get("replay_cap", 1000))
            ),
        }
        if policies_digest is not None:
            record["policies_sha256"] = policies_digest
        if budget.factor > 1:  # only when it grew, so the records of other nights keep their bytes
            record["step_budget"] = budget.to_record()
        effects.report(begin.token, record)
        result = AdapterResult(record, reused=False, reported=dict(reported))
    elif begin.outcome == "duplicate":
        record = dict(begin.result or {})
        folder = adapter_path(layout, record)
        if not folder.is_dir():
            raise AdapterError(
                f"the effect ledger says {record.get('version')} was trained for this training set, but "
                f"{folder} is gone: restore it, or forget the launch with `ratchet admin effects "
                f"resolve {EFFECT} '{key}' forget --reason ...` to train again"
            )
        # An older launch recorded absolute paths: its record is rewritten with names (module docstring). The
        # base is the one this run resolved, the same bytes (its sha256 is part of the launch key).
        record.pop("base_path", None)
        record.update(adapter_dir=layout.name_of(folder), base_license=base_license_of(base))
        log(f"reusing {record['version']}: trained before for this training set, config and base")
        result = AdapterResult(record, reused=True)
    else:
        raise AdapterError(
            f"training launch is {begin.outcome}: {begin.detail or 'another run holds it'}; wait for that run, or "
            f"inspect with `ratchet admin effects show {EFFECT} '{key}'`"
        )
    pointer = layout.adapter_pointer(day)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(json.dumps(result.record, indent=2, sort_keys=True), encoding="utf-8")
    return result
