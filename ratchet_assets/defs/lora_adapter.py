"""``lora_adapter``: the night's LoRA adapter, trained outside Dagster's process through Dagster Pipes.

Once per (training-set root, config hash, base identity): the launch goes through the effect ledger (effect
``training.launch``, policy ``block``), so rerunning a night, or a second run racing this one, reuses the adapter
instead of training again. The version is ``v<N>-<first 8 hex of the adapter digest>``, where N is this launch's
rank among all training launches in the ledger (creation order): stable across reruns, never reused.

Files: ``adapters/<version>/`` holds only the PEFT files (``adapter_config.json``, ``adapter_model.safetensors``,
``ratchet_train.json``) so its digest is the adapter's; ``adapters/day=D/adapter.json`` says which version the
night produced and how (base identity, config, training numbers, effect key). The ``training_paused`` flag of the
signed release manifest skips training (and so everything downstream) with a log line.

Scale-out (documented path, not exercised in tests): replace ``PipesSubprocessClient`` with
``dagster_k8s.PipesK8sClient`` and run ``python -m ratchet_assets.night.train_job`` in the image described by
``infra/k8s/training-job.yaml`` on a GPU node::

    from dagster_k8s import PipesK8sClient
    PipesK8sClient().run(context=context, image="ratchet-train:latest",
                         base_pod_spec=yaml.safe_load(open("infra/k8s/training-job.yaml"))["spec"]["template"]["spec"],
                         command=["python", "-m", "ratchet_assets.night.train_job"], extras=extras)

The extras carry paths: at scale they are object-store URLs or a shared volume mounted in the pod (the template
mounts a PVC at /ratchet), and ``RATCHET_STUDENT_BASE_MODEL`` points at a real base (e.g. Qwen2.5-0.5B) there.
"""

# No `from __future__ import annotations`: Dagster resolves the Config annotation at definition time.
import hashlib
import json
import shutil
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, RatchetPaths, Signer
from ratchet_core.lora_trainer import LoraTrainConfig

EFFECT = "training.launch"
_DEFAULTS = LoraTrainConfig()


class LoraAdapterConfig(dg.Config):
    """Training hyper-parameters (defaults: ``ratchet_core.lora_trainer.LoraTrainConfig``) and the base model."""

    base_model: str = ""  # local HF model folder; "" = RATCHET_STUDENT_BASE_MODEL, else the demo base
    rank: int = _DEFAULTS.rank
    alpha: int = _DEFAULTS.alpha
    dropout: float = _DEFAULTS.dropout
    lr: float = _DEFAULTS.lr
    epochs: int = _DEFAULTS.epochs
    batch_size: int = _DEFAULTS.batch_size
    max_len: int = _DEFAULTS.max_len
    min_steps: int = _DEFAULTS.min_steps  # at least this many steps: small training sets run more epochs
    seed: int = _DEFAULTS.seed
    pii_surrogates: float = _DEFAULTS.pii_surrogates  # share of rows trained with made-up e-mails/phones
    num_threads: int = 0  # 0 = torch's default; does not change the adapter, so not part of the config hash

    def train_config(self) -> dict[str, Any]:
        names = {f.name for f in fields(LoraTrainConfig)}
        data = {k: v for k, v in self.model_dump().items() if k in names}
        data["num_threads"] = self.num_threads or None
        return data


def train_dir(artifacts: Path, day: str) -> Path:
    return artifacts / "train" / f"day={day}"


def day_pointer(artifacts: Path, day: str) -> Path:
    """``adapters/day=D/adapter.json``: the version the night ``day`` trained (or reused)."""
    return artifacts / "adapters" / f"day={day}" / "adapter.json"


def resolve_base(config_base: str, paths: RatchetPaths) -> Path:
    """The base model folder: the asset config, else RATCHET_STUDENT_BASE_MODEL, else the demo base (built once)."""
    from ratchet_core.settings import load_settings
    from ratchet_core.student_model import ensure_demo_base

    chosen = config_base or (load_settings().student_base_model or "")
    if chosen:
        path = Path(chosen).expanduser()
        if not (path / "config.json").exists():
            raise dg.Failure(
                f"base model {path} has no config.json: set RATCHET_STUDENT_BASE_MODEL to a local Hugging Face "
                "model folder (nothing is downloaded at run time)"
            )
        return path
    return ensure_demo_base(paths.home_path() / "models" / "demo-base")


def training_paused(control_db: ControlDB, signer: Signer) -> bool:
    """The ``training_paused`` flag of the newest verified release manifest (False when there is none)."""
    try:
        from ratchet_core.manifest import latest_verified
    except ImportError:  # release control not installed
        return False
    manifest, _rejected = latest_verified(control_db.engine(), signer.public_key())
    return bool(manifest is not None and manifest.flags.training_paused)


def _rows_root(folder: Path) -> str:
    commitment = folder / "commitment.json"
    if commitment.exists():
        return json.loads(commitment.read_text())["rows"]["root"]
    from ratchet_stats import merkle

    lines = (folder / "train.jsonl").read_bytes().splitlines()
    return merkle.MerkleTree(lines).root().hex()


def launch_rank(effects: Any, key: str) -> int:
    """1-based rank of ``key`` among all training launches, by creation time: the N of ``v<N>-...``."""
    rows = effects.list_effects(effect_type=EFFECT, limit=1_000_000)
    ordered = sorted(rows, key=lambda r: (r.created_at, r.key))
    return next(i for i, r in enumerate(ordered, 1) if r.key == key)


def _effective_hyperparameters(adapter_dir: Path, train_config: dict[str, Any]) -> dict[str, Any]:
    """Every hyper-parameter the run used (the trainer's own record when present), for the BOM."""
    meta_file = adapter_dir / "ratchet_train.json"
    data = dict(train_config)
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
        data.update(meta.get("config") or {})
        if "prompt_window" in meta:
            data["prompt_window"] = meta["prompt_window"]
    return {k: v for k, v in data.items() if v is not None and k != "num_threads"}


def pipes_client() -> dg.PipesSubprocessClient:
    """The Pipes client that runs training (swap for ``dagster_k8s.PipesK8sClient`` at scale; module docstring)."""
    return dg.PipesSubprocessClient()


def _train(
    context: dg.AssetExecutionContext, extras: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    invocation = pipes_client().run(
        command=[sys.executable, "-m", "ratchet_assets.night.train_job"], context=context, extras=extras
    )
    reported = {}
    for result in invocation.get_results():
        reported.update(dict(getattr(result, "metadata", None) or {}))
    data = json.loads(Path(extras["result_path"]).read_text())
    return data, reported


@dg.asset(
    partitions_def=daily_partitions,
    deps=["training_set"],
    kinds={"pytorch", "peft"},
    group_name="night_school",
    output_required=False,
)
def lora_adapter(
    context: dg.AssetExecutionContext,
    config: LoraAdapterConfig,
    paths: RatchetPaths,
    control_db: ControlDB,
    signer: Signer,
):
    """The night's LoRA adapter for the student, trained once per training set, config and base."""
    day = context.partition_key
    artifacts = paths.artifacts_root()
    folder = train_dir(artifacts, day)
    if not (folder / "train.jsonl").exists():
        raise dg.Failure(f"no training set at {folder}: materialise `training_set` for {day} first")
    if not (folder / "train.jsonl").read_bytes().strip():
        raise dg.Failure(f"the training set of {day} is empty: no teacher-answered traffic to learn from yet")
    if training_paused(control_db, signer):
        context.log.warning(
            "training is paused by the release manifest (training_paused): no adapter tonight; resume with "
            "`ratchet admin flag training_paused false --reason ...`"
        )
        return
    base = resolve_base(config.base_model, paths)
    from ratchet_core.student_model import base_identity
    from ratchet_stats.canonical import digest

    identity = base_identity(base)
    train_config = config.train_config()
    config_hash = digest({k: v for k, v in train_config.items() if k != "num_threads"})
    rows_root = _rows_root(folder)
    key = f"{rows_root}:{config_hash}:{identity['sha256']}"
    fingerprint = hashlib.sha256(key.encode()).hexdigest()
    effects = control_db.effects()
    begin = effects.begin(EFFECT, key, fingerprint, lease_seconds=6 * 3600)
    reported: dict[str, Any] = {}
    if begin.outcome == "execute":
        staging = artifacts / "adapters" / f".staging-{fingerprint[:16]}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        extras = {
            "base_path": str(base),
            "train_jsonl": str(folder / "train.jsonl"),
            "out_dir": str(staging / "adapter"),
            "result_path": str(staging / "result.json"),
            "config": train_config,
        }
        try:
            trained, reported = _train(context, extras)
            version = f"v{launch_rank(effects, key)}-{trained['adapter_sha256'][:8]}"
            target = artifacts / "adapters" / version
            shutil.rmtree(target, ignore_errors=True)
            (staging / "adapter").replace(target)
            shutil.rmtree(staging, ignore_errors=True)
        except Exception as exc:
            effects.fail(begin.token, f"{type(exc).__name__}: {exc}"[:1000])
            raise
        record = {
            "version": version,
            "adapter_dir": str(target),
            "adapter_sha256": trained["adapter_sha256"],
            "files": trained["files"],
            "base": {k: identity[k] for k in ("name", "sha256", "files")},
            "base_path": str(base),
            "config": train_config,
            "hyperparameters": _effective_hyperparameters(target, train_config),
            "config_hash": config_hash,
            "train_rows_root": rows_root,
            "train_day": day,
            "steps": trained["steps"],
            "final_loss": trained["final_loss"],
            "seconds": trained["seconds"],
            "cpu_seconds": trained.get("cpu_seconds"),
            "examples": trained.get("examples", 0),
            "effect_key": key,
        }
        effects.report(begin.token, record)
        reused = False
    elif begin.outcome == "duplicate":
        record = dict(begin.result or {})
        if not Path(record.get("adapter_dir", "")).is_dir():
            raise dg.Failure(
                f"the effect ledger says {record.get('version')} was trained for this training set, but "
                f"{record.get('adapter_dir')} is gone: restore it, or forget the launch with `ratchet admin effects "
                f"resolve {EFFECT} '{key}' forget --reason ...` to train again"
            )
        context.log.info(
            f"reusing {record['version']}: trained before for this training set, config and base"
        )
        reused = True
    else:
        raise dg.Failure(
            f"training launch is {begin.outcome}: {begin.detail or 'another run holds it'}; wait for that run, or "
            f"inspect with `ratchet admin effects show {EFFECT} '{key}'`"
        )
    pointer = day_pointer(artifacts, day)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    metadata: dict[str, Any] = {
        "version": record["version"],
        "adapter_sha256": dg.MetadataValue.text(record["adapter_sha256"]),
        "base": record["base"]["name"],
        "final_loss": dg.MetadataValue.float(float(record["final_loss"])),
        "steps": dg.MetadataValue.int(int(record["steps"])),
        "train_seconds": dg.MetadataValue.float(float(record["seconds"])),
        "reused": reused,
        "training_set_root": dg.MetadataValue.text(rows_root),
        "dagster/uri": dg.MetadataValue.path(record["adapter_dir"]),
    }
    for name, value in reported.items():
        metadata.setdefault(f"pipes/{name}", value)
    yield dg.MaterializeResult(metadata=metadata)
