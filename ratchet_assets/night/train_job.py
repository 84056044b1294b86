"""The training process: ``python -m ratchet_assets.night.train_job``, launched by the ``lora_adapter`` asset
through Dagster Pipes (``night.adapter.train_adapter`` with the asset's Pipes launcher); callers without Dagster
run the same ``run_training`` in their own process (``night.adapter.train_in_process``).

Pipes hands it ``extras`` = {base_path, train_jsonl, out_dir, result_path, config (LoraTrainConfig fields), and for
a warm start init_adapter, the parent adapter's folder};
it trains with ``ratchet_assets.night.lora_trainer.train_lora``, streams progress to the Dagster UI as log lines (about 20
per run, each with step/total/loss), writes the ``TrainResult`` as JSON to ``result_path`` and reports the run's
numbers as materialization metadata (final loss, steps, seconds, adapter sha256).

Same code at scale: the image of ``infra/k8s/training-job.yaml`` runs this module on a GPU node, launched by
``dagster_k8s.PipesK8sClient`` instead of ``PipesSubprocessClient`` (see ``ratchet_assets.defs.lora_adapter``).
Without Pipes (``--no-pipes BASE TRAIN_JSONL OUT_DIR``) it trains with the default config and prints progress,
which is handy for a manual check of a base model.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRESS_LINES = 20


def _cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads) so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def passive_threads(config: dict[str, Any], environ: dict[str, str]) -> None:
    """More than one torch thread: let OpenMP's idle threads sleep rather than spin (``OMP_WAIT_POLICY=PASSIVE``,
    read when torch loads, so before it is imported) unless the environment already chooses. Spinning threads
    were measured 3x slower than one thread with another process busy (``LoraTrainConfig.num_threads``)."""
    from ratchet_assets.night.lora_trainer import resolved_threads

    threads = resolved_threads(config.get("num_threads"))
    if threads is not None and threads > 1:
        environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run_training(extras: dict[str, Any], log: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train per ``extras``; return (the TrainResult as a dict, metadata for the UI)."""
    import os

    passive_threads(extras.get("config", {}), os.environ)  # a no-op once torch is loaded (train_in_process)
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora

    config = LoraTrainConfig(**extras.get("config", {}))
    every = {"n": 1}

    def on_progress(step: int, total: int, loss: float) -> None:
        every["n"] = max(1, total // PROGRESS_LINES)
        if step == 1 or step == total or step % every["n"] == 0:
            log(f"step {step}/{total} loss {loss:.4f}")

    log(f"training LoRA on {extras['train_jsonl']} over base {extras['base_path']} ({config.to_dict()})")
    cpu_before = _cpu_seconds()
    tasks_path = extras.get("row_tasks_path")
    tasks = json.loads(Path(tasks_path).read_text()) if tasks_path and Path(tasks_path).exists() else None
    held_path = extras.get("held_out_path")
    held = json.loads(Path(held_path).read_text()) if held_path and Path(held_path).exists() else None
    result = train_lora(
        extras["base_path"],
        extras["train_jsonl"],
        extras["out_dir"],
        config,
        on_progress,
        row_tasks=tasks,
        init_adapter=extras.get("init_adapter"),
        held_out=held,
    )
    data = result.to_dict()
    data.pop("losses", None)
    # CPU time says what the run costs on idle cores, whatever else shares the machine (wall time does not).
    data["cpu_seconds"] = round(_cpu_seconds() - cpu_before, 2)
    Path(extras["result_path"]).write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    metadata = {
        "final_loss": {"raw_value": float(result.final_loss), "type": "float"},
        "steps": {"raw_value": int(result.steps), "type": "int"},
        "train_seconds": {"raw_value": round(float(result.seconds), 2), "type": "float"},
        "train_cpu_seconds": {"raw_value": data["cpu_seconds"], "type": "float"},
        "train_examples": {"raw_value": int(result.examples), "type": "int"},
        "train_rows_left_out": {"raw_value": int(result.rows_left_out), "type": "int"},
        "adapter_sha256": {"raw_value": result.adapter_sha256, "type": "text"},
    }
    v = result.validation
    if v:  # the learner's choices (early stopping on the validation split), numeric so the UI plots them
        metadata["epochs_run"] = {"raw_value": int(v["epochs_run"]), "type": "int"}
        metadata["validation_accuracy"] = {"raw_value": float(v["final_accuracy"]), "type": "float"}
        for task, t in v.get("per_task", {}).items():
            metadata[f"validation_accuracy/{task}"] = {"raw_value": float(t["accuracy"]), "type": "float"}
        log(
            f"validation accuracy per epoch {v['accuracy_per_epoch']}; best epoch {v['best_epoch']}; {v['stopped']}"
        )
    if result.rows_left_out:
        log(f"{result.rows_left_out} rows longer than max_len {result.max_len} tokens left out (never cut)")
    log(f"done: {result.steps} steps, final loss {result.final_loss:.4f}, {result.seconds:.1f} s")
    return data, metadata


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--no-pipes"]:
        if len(argv) != 4:
            print(
                "usage: python -m ratchet_assets.night.train_job --no-pipes BASE TRAIN_JSONL OUT_DIR",
                file=sys.stderr,
            )
            return 2
        base, train, out = argv[1:]
        Path(out).mkdir(parents=True, exist_ok=True)
        extras = {
            "base_path": base,
            "train_jsonl": train,
            "out_dir": out,
            "result_path": str(Path(out) / "result.json"),
        }
        run_training(extras, lambda line: print(line, flush=True))
        return 0
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        _, metadata = run_training(dict(pipes.extras), pipes.log.info)
        pipes.report_asset_materialization(metadata=metadata)
    return 0


if __name__ == "__main__":
    sys.exit(main())
