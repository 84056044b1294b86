"""The learner's sweep: the night's trainer over a grid of settings on tasks of several shapes (not a test).

    .venv/bin/python -m benchmarks.learner_sweep --tiny --out /tmp/sweep.json          # minutes: a smoke run
    .venv/bin/python -m benchmarks.learner_sweep build --data DIR [--requests 700]     # the nights' data
    .venv/bin/python -m benchmarks.learner_sweep train --data DIR --out sweep.json [--grid full] [--workers 16]

Two phases, so the training can run where the project's data plane is not installed (a machine with many cores):

- ``build`` writes one cold night per task with the project's own steps (``night.fixtures.write_day`` traffic,
  ``consolidate_traffic``, ``build_examples``, ``split_golden`` at the default share, ``build_training_set``,
  ``adapter.row_tasks``), as ``tests/night/measure_learner.py`` does: ``DIR/<task>/train.jsonl``,
  ``row_tasks.json`` and ``golden.json`` (the golden rows the certificate would score). Tasks (``TASK_SHAPES``):
  ``tickets`` (six labels, 300 requests: the smallest night that must certify), ``moods`` (five labels, a task the
  project has never seen, ``tests/night/moods.py``), ``topics`` (sixteen labels, generated here, never seen either),
  ``extract`` (JSON values copied from the request) and ``tools`` (a tool call whose arguments are copied).
- ``train`` runs every job of the grid (``grid``), one process per job with one torch thread, ``--workers`` at a
  time, on the CPU. A job is ``train_lora`` with the night's settings ``night.adapter.NIGHT_TRAINING`` (a cold
  night: early stopping on the validation split, then the refit on every row) and the job's overrides, over a base
  built here: the demo base (``ratchet_core.student_model.build_demo_base``, pretrained; the grid's
  numbers in ``benchmarks/measured/learner_sweep.json`` are of the random base it replaced) or a differently shaped
  variant of it (``BASES``: the same builder with another ``DEMO_CONFIG``, random weights) or the ChatML base (``ratchet_core.chatml_base``: a
  BPE tokenizer, LoRA only). Each adapter is scored on the night's golden rows: exact answer (teacher-forced
  argmax over the whole answer, EOS included: what greedy decoding writes; the certificate's comparators are no
  stricter) with the Clopper-Pearson lower bound at delta 0.05, and for ``extract``/``tools`` per JSON key
  (``tests.night.measure_learner.field_exact``: a value is right when every one of its characters is).

The JSON (``--out``) is rewritten after every finished job, so a run cut short keeps what it finished. Each run
records its wall seconds and CPU seconds (one thread: about the same unless the machine is oversubscribed): they
are the seconds of the machine that ran it, not the product's (the night trains on the 2-core CPU it runs on).
``--tiny``: 60 requests of two tasks and two 4-step jobs, to check the script end to end
(``tests/benchmarks/test_learner_sweep.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# task -> (workload, requests of its night). `topics` and `moods` are registered by `_register_workloads`.
TASK_SHAPES: dict[str, tuple[str, int]] = {
    "tickets": ("tickets", 300),
    "moods": ("moods", 700),
    "topics": ("topics", 700),
    "extract": ("extract", 700),
    "tools": ("tools", 700),
}
COPY_TASKS = ("extract", "tools")

# Base name -> DEMO_CONFIG overrides (the demo base's builder, another shape) or "chatml" (the ChatML base).
BASES: dict[str, dict[str, Any] | str] = {
    "demo": {},
    "demo-4layer": {"num_hidden_layers": 4},
    "demo-wide": {
        "hidden_size": 384,
        "intermediate_size": 1024,
        "num_attention_heads": 6,
        "num_key_value_heads": 6,
    },
    "chatml": "chatml",
}

TOPICS = (
    "billing",
    "shipping",
    "returns",
    "warranty",
    "login",
    "privacy",
    "pricing",
    "stock",
    "delivery",
    "damage",
    "invoice",
    "coupon",
    "gift",
    "repair",
    "account",
    "feedback",
)


def topics_workload():
    """``topics``: sixteen labels, each said by its own keywords in four phrasings (a many-label task no built-in
    workload has; generated here like ``tests/night/moods.py``)."""
    from ratchet_core.workloads.base import Intent, TaskDescription, Workload

    words = {
        "billing": ("charged", "billed"),
        "shipping": ("shipped", "carrier"),
        "returns": ("return", "send back"),
        "warranty": ("warranty", "guarantee"),
        "login": ("login", "password"),
        "privacy": ("privacy", "my data"),
        "pricing": ("price", "cost"),
        "stock": ("stock", "available"),
        "delivery": ("delivery", "arrive"),
        "damage": ("broken", "cracked"),
        "invoice": ("invoice", "receipt"),
        "coupon": ("coupon", "discount code"),
        "gift": ("gift", "present"),
        "repair": ("repair", "fix"),
        "account": ("account", "profile"),
        "feedback": ("suggestion", "idea"),
    }
    intents = tuple(
        Intent(
            label,
            (
                f"A question about the {{product}}: {a}, please.",
                f"Order {{order_id}}: {b}?",
                f"Hi, {a} for my {{product}} in {{city}}.",
                f"Can you help, {b} with the {{product}}.",
            ),
            (a, b),
            label,
        )
        for label, (a, b) in words.items()
    )
    topics = TaskDescription(
        name="topics",
        comparator="label",
        description="Customer message -> one of sixteen topics.",
        system_prompt="Name the topic of the message, one of: "
        + ", ".join(TOPICS)
        + ". Answer with the topic only.",
        intents=intents,
        fallback_answer="feedback",
        slots={
            "product": ("heater", "blender", "backpack", "tent", "drone", "monitor"),
            "city": ("Porto", "Dallas", "York", "Kyoto", "Accra", "Boise"),
        },
        prefixes=("", "", "Hey. ", "Hello, "),
        suffixes=("", "", " Cheers.", " Thanks!"),
    )
    return Workload("topics", (topics,))


def _register_workloads() -> None:
    from ratchet_core import workloads
    from tests.night.moods import MOODS_WORKLOAD

    workloads.WORKLOADS.setdefault("moods", MOODS_WORKLOAD)
    workloads.WORKLOADS.setdefault("topics", topics_workload())


def build(data: Path, tasks: dict[str, tuple[str, int]], golden_share: float = 0.2) -> dict[str, Any]:
    """One cold night per task with the night's own steps (module docstring); returns rows per task."""
    from ratchet_assets.night.adapter import row_tasks
    from ratchet_assets.night.evaluate import load_golden
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set

    _register_workloads()
    summary: dict[str, Any] = {}
    day = "2026-03-02"
    for task, (workload, requests) in tasks.items():
        work = Path(tempfile.mkdtemp(prefix=f"sweep-{task}-"))
        lake, art = work / "lake", work / "art"
        write_day(lake, day, requests, seed=101, workload=workload, student_share=0.0)
        consolidate_traffic(lake, art, day)
        build_examples(art, day)
        split_golden(art, day, share=golden_share)
        train = build_training_set(art, day)
        out = data / task
        out.mkdir(parents=True, exist_ok=True)
        (out / "train.jsonl").write_bytes(Path(train.path).read_bytes())
        (out / "row_tasks.json").write_text(json.dumps(row_tasks(art, day)))
        golden = [
            {
                "task": g.task,
                "messages": g.messages,
                "tools": g.tools,
                "response_format": g.response_format,
                "expected": g.expected,
            }
            for g in load_golden(art, day)
        ]
        (out / "golden.json").write_text(json.dumps(golden))
        summary[task] = {
            "workload": workload,
            "requests": requests,
            "train_rows": train.rows,
            "golden": len(golden),
        }
    (data / "data.json").write_text(json.dumps(summary, indent=2))
    return summary


def build_base(path: Path, name: str) -> Path:
    """The base `name` of ``BASES`` at `path` (built once; deterministic from the project's seeds)."""
    if (path / "config.json").exists():
        return path
    shape = BASES[name]
    if shape == "chatml":
        from ratchet_core.chatml_base import build_chatml_base

        return build_chatml_base(path)
    from ratchet_core import student_model

    default = dict(student_model.DEMO_CONFIG)
    student_model.DEMO_CONFIG = {**default, **shape}  # type: ignore[dict-item]
    try:
        return student_model.build_demo_base(path, pretrained=not shape)
    finally:
        student_model.DEMO_CONFIG = default


def job(label: str, task: str, base: str = "demo", device: str = "", **overrides: Any) -> dict[str, Any]:
    """One training of the grid: `overrides` of ``NIGHT_TRAINING`` on `task` over base `base`; `device` "cpu"
    pins it to the CPU whatever ``--device`` says (the cross-check of the accelerator's numbers)."""
    return {"label": label, "task": task, "base": base, "overrides": overrides, "device": device}


STEPS_2X = {"min_steps": 300, "max_epochs": 16}
STEPS_4X = {"min_steps": 600, "max_epochs": 24, "patience": 4}
STEPS_8X = {"min_steps": 1200, "max_epochs": 32, "patience": 6}
STEPS_16X = {"min_steps": 2400, "max_epochs": 48, "patience": 8}


def grid(name: str, tasks: list[str], copy_first: bool = False) -> list[dict[str, Any]]:
    """The jobs of grid `name`, most telling first (a run cut short keeps those); `copy_first`: the long jobs of
    the copy tasks right after the nights (on an accelerator, where they fit), else last.

    ``full``: on every task the night's settings (also pinned to the CPU: the product's numerics), then lr
    1e-3..1.6e-2, rank 8..64, rank 64 at lr 8e-3, two and four times the steps (``STEPS_2X``, ``STEPS_4X``: more
    ``min_steps`` and ``max_epochs``, more patience), batch 8; on ``extract``/``tools`` also what could make the
    base copy values: eight and sixteen times the steps, rank 64 at lr 8e-3 with four times the steps, the demo
    base's variants (``BASES``: 4 layers; twice as wide) and the ChatML base (another tokenizer). ``tiny``: one
    4-step job a task."""
    jobs: list[dict[str, Any]] = []
    if name == "tiny":
        for task in tasks:
            jobs.append(job("tiny", task, min_steps=4, max_epochs=1, rank=4, alpha=4, validation_min_rows=0))
        return jobs
    jobs += [job("night-cpu", task, device="cpu") for task in tasks]
    jobs += [job("night", task) for task in tasks]
    shapes: list[dict[str, Any]] = []
    for task in tasks:
        shapes += [
            job("lr2e-3", task, lr=2e-3),
            job("lr8e-3", task, lr=8e-3),
            job("rank16", task, rank=16, alpha=16),
            job("rank64", task, rank=64, alpha=64),
            job("steps2x", task, **STEPS_2X),
            job("steps4x", task, **STEPS_4X),
            job("rank64-lr8e-3", task, rank=64, alpha=64, lr=8e-3),
            job("lr1e-3", task, lr=1e-3),
            job("lr1.6e-2", task, lr=1.6e-2),
            job("rank8", task, rank=8, alpha=8),
            job("batch8", task, batch_size=8),
        ]
    copies: list[dict[str, Any]] = []
    for task in [t for t in tasks if t in COPY_TASKS]:
        copies += [
            job("steps8x", task, **STEPS_8X),
            job("rank64-lr8e-3-steps4x", task, rank=64, alpha=64, lr=8e-3, **STEPS_4X),
            job("4layer", task, "demo-4layer"),
            job("4layer-steps4x", task, "demo-4layer", **STEPS_4X),
            job("wide", task, "demo-wide"),
            job("wide-steps4x", task, "demo-wide", **STEPS_4X),
            job("chatml-steps4x", task, "chatml", **STEPS_4X),
            job("steps16x", task, **STEPS_16X),
            job("4layer-steps8x", task, "demo-4layer", **STEPS_8X),
        ]
    return jobs + (copies + shapes if copy_first else shapes + copies)


def use_device(device: str) -> None:
    """Train and score on `device` in this process without touching the trainer: torch's default device (the
    batches the trainer builds, the LoRA weights peft makes) and every base loaded there."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_default_device(device)
    load = AutoModelForCausalLM.from_pretrained

    def on_device(*args: Any, **kwargs: Any):
        return load(*args, **kwargs).to(device)

    AutoModelForCausalLM.from_pretrained = on_device  # type: ignore[method-assign]


def run_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one job and score it (runs in its own process; module docstring)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    device = spec.get("device") or spec.get("default_device") or "cpu"
    use_device(device)
    from ratchet_assets.night.adapter import NIGHT_TRAINING
    from ratchet_assets.night.lora_trainer import train_lora
    from ratchet_stats.bounds import clopper_pearson_lower
    from tests.night.measure_learner import field_exact, golden_exact

    data = Path(spec["data"])
    task_dir = data / spec["task"]
    base = Path(spec["bases"]) / spec["base"]
    golden = [_Golden(**g) for g in json.loads((task_dir / "golden.json").read_text())]
    out: dict[str, Any] = {k: spec[k] for k in ("label", "task", "base", "overrides")}
    out["device"] = device
    with tempfile.TemporaryDirectory(prefix="sweep-adapter-") as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            config = dataclasses.replace(NIGHT_TRAINING, start="cold", num_threads=1, **spec["overrides"])
            res = train_lora(
                base,
                task_dir / "train.jsonl",
                Path(tmp) / "adapter",
                config,
                row_tasks=json.loads((task_dir / "row_tasks.json").read_text()),
            )
        except Exception as exc:  # noqa: BLE001 - a failed job is a result, the sweep goes on
            return {**out, "error": f"{type(exc).__name__}: {exc}"}
        out["train_seconds"] = round(time.perf_counter() - wall, 1)
        out["train_cpu_seconds"] = round(time.process_time() - cpu, 1)
        right = golden_exact(base, Path(tmp) / "adapter", golden)
        n, k = len(right), sum(right)
        v = res.validation or {}
        lower = float(clopper_pearson_lower(k, n, 0.05))
        out.update(
            {
                "steps": res.steps,
                "selection_steps": (v.get("refit") or {}).get("selection_steps", res.steps),
                "epochs_chosen": v.get("best_epoch"),
                "epochs_run": v.get("epochs_run"),
                "validation_rows": v.get("rows"),
                "validation_accuracy": v.get("final_accuracy"),
                "stopped": v.get("stopped"),
                "rows_left_out": res.rows_left_out,
                "max_len": res.max_len,
                "final_loss": round(res.final_loss, 4),
                "golden_n": n,
                "golden_correct": k,
                "golden_accuracy": round(k / n, 4),
                "lower_bound": round(lower, 4),
                "certified_095": lower >= 0.95,
            }
        )
        if spec["task"] in COPY_TASKS:
            out["fields"] = field_exact(base, Path(tmp) / "adapter", golden)
    return out


@dataclasses.dataclass
class _Golden:
    task: str
    messages: list
    tools: list | None
    response_format: dict | None
    expected: dict


def train(
    data: Path, out: Path, jobs: list[dict[str, Any]], workers: int, device: str = "cpu"
) -> dict[str, Any]:
    """Run `jobs` `workers` at a time (a fresh process each; on `device` unless a job pins one), rewriting `out`
    after each one finishes."""
    import multiprocessing

    bases = data / "bases"
    for name in sorted({j["base"] for j in jobs}):
        build_base(bases / name, name)
    specs = [{**j, "data": str(data), "bases": str(bases), "default_device": device} for j in jobs]
    doc: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "workers": workers,
            "torch_threads_per_job": 1,
            "device": device,
        },
        "data": json.loads((data / "data.json").read_text()) if (data / "data.json").exists() else {},
        "jobs": len(jobs),
        "runs": [],
    }
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, maxtasksperchild=1) as pool:
        for result in pool.imap_unordered(run_job, specs):
            result["finished_at_s"] = round(time.perf_counter() - started, 1)
            doc["runs"].append(result)
            print(json.dumps(result), flush=True)
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc, indent=2))
            tmp.replace(out)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", nargs="?", default="all", choices=("all", "build", "train"))
    ap.add_argument("--data", default="", help="the nights' data folder (default: a temporary one)")
    ap.add_argument("--out", default="", help="the sweep's JSON")
    ap.add_argument("--grid", default="full", choices=("full", "tiny"))
    ap.add_argument("--tasks", default=",".join(TASK_SHAPES), help="comma-separated tasks of TASK_SHAPES")
    ap.add_argument(
        "--requests", type=int, default=0, help="requests a night for every task (0 = TASK_SHAPES')"
    )
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--device", default="cpu", help="where jobs train: cpu, or a torch device such as cuda")
    ap.add_argument("--tiny", action="store_true", help="60 requests of tickets and extract, the tiny grid")
    args = ap.parse_args(argv)

    names = [t for t in args.tasks.split(",") if t]
    if args.tiny:
        names, args.requests, args.grid = ["tickets", "extract"], 60, "tiny"
    unknown = [t for t in names if t not in TASK_SHAPES]
    if unknown:
        ap.error(f"unknown task(s) {', '.join(unknown)}: choose from {', '.join(TASK_SHAPES)}")
    tasks = {t: (TASK_SHAPES[t][0], args.requests or TASK_SHAPES[t][1]) for t in names}
    data = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="learner-sweep-"))
    if args.phase in ("all", "build"):
        print(json.dumps(build(data, tasks)), flush=True)
    if args.phase in ("all", "train"):
        if not args.out:
            ap.error("train needs --out")
        doc = train(
            data,
            Path(args.out),
            grid(args.grid, names, copy_first=args.device != "cpu"),
            args.workers,
            args.device,
        )
        if all("error" in r for r in doc["runs"]):
            print("every job failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
