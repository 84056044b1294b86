"""Cold against warm nights on the demo base: training seconds, steps, golden lower bound and fresh accuracy.

    nice .venv/bin/python -m benchmarks.warm_start [--nights 4] [--tickets 200] [--clusters 90] [--out PATH]

Two tasks, each over ``--nights`` nights, every night trained twice from the same data: ``cold`` (a fresh LoRA on
the whole 7-day training window, the night's settings ``NIGHT_TRAINING`` with ``start="cold"``) and ``warm``
(``start="warm"``: from the previous warm night's adapter, on the new rows plus the replay sample,
``ratchet_assets.night.warm_start``).

- ``tickets``, the demo's task: the night's own steps (traffic -> examples -> golden split -> training set ->
  ``night.adapter.train_adapter``, with the previous warm adapter registered as certified for ``tickets``).
  Fresh accuracy is the exact-answer accuracy on the golden set to date (requests never trained on, by parent or
  child); the lower bound is its Clopper-Pearson bound at delta 0.05, what the certificate computes from the
  same rows (the certificate also calibrates a threshold; this does not).
- ``triage`` (tests/night/triage.py, five labels with near-duplicate prompts, a task the project has never seen):
  rows written straight to train.jsonl files (``--clusters`` clusters a night, 2-4 near-duplicates each), trained
  with ``train_lora`` and the same row selection; fresh accuracy and its bound on 300 fresh requests a night. The
  last night also trains cold with the older validation split (by prompt hash), to show what its validation
  accuracy promised against what fresh requests got.

Exact answer = teacher-forced argmax over the whole target, EOS included (what greedy decoding writes). Seconds
are wall time on whatever machine runs this; run it with ``nice`` on a shared machine and read them as relative.
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

REPO = Path(__file__).resolve().parents[1]


def exact_answers(base: Path, adapter: Path, rows: list[dict]) -> list[bool]:
    """Per chat row: whether the adapter's greedy answer is exactly the row's last message (teacher-forced)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ratchet_assets.night.lora_trainer import _exact_rows, scoring_rows
    from ratchet_core.chat_format import training_pair

    tok = AutoTokenizer.from_pretrained(base)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter
    )
    encoded = scoring_rows(tok, [training_pair(tok, r) for r in rows])
    return _exact_rows(model, encoded, tok.pad_token_id, 32)


def scored(right: list[bool]) -> dict[str, Any]:
    from ratchet_stats.bounds import clopper_pearson_lower

    n, k = len(right), sum(right)
    return {
        "n": n,
        "correct": k,
        "accuracy": round(k / n, 4),
        "lower_bound": round(clopper_pearson_lower(k, n, 0.05), 4),
    }


def numbers(trained: dict, seconds: float) -> dict[str, Any]:
    v = trained.get("validation") or {}
    return {
        "train_seconds": round(seconds, 1),
        "steps": trained["steps"],
        "epochs_run": trained.get("epochs_run"),
        "trained_on": trained.get("examples"),
        "validation_rows": v.get("rows"),
        "validation_accuracy": v.get("final_accuracy"),
        "initial_validation_accuracy": v.get("initial_accuracy"),
        "stopped": v.get("stopped"),
    }


def tickets(tmp: Path, nights: int, requests: int, config) -> list[dict]:
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night import adapter as step
    from ratchet_assets.night.evaluate import load_golden
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_core.control_db import make_engine
    from ratchet_core.student_model import ensure_demo_base

    base = ensure_demo_base(tmp / "demo-base")
    art, lake = tmp / "tickets-art", tmp / "tickets-lake"
    effects = EffectLedger(make_engine(f"sqlite:///{(tmp / 'control.db').as_posix()}"))
    out, parent = [], None
    for night in range(1, nights + 1):
        day = f"2026-03-{night + 1:02d}"
        write_day(lake, day, requests, seed=100 + night, workload="tickets", student_share=0.0)
        consolidate_traffic(lake, art, day)
        build_examples(art, day)
        split_golden(art, day, share=0.2)
        train = build_training_set(art, day)
        golden = [
            {"messages": [*g.messages, g.expected], "tools": g.tools, "response_format": g.response_format}
            for g in load_golden(art, day)
        ]
        row: dict[str, Any] = {
            "night": night,
            "day": day,
            "training_set_rows": train.rows,
            "golden_rows": len(golden),
        }
        for mode in ("cold", "warm"):
            release = step.ReleaseView({}, [(parent, "tickets")] if parent else [], {})
            cfg = dataclasses.asdict(dataclasses.replace(config, start=mode))
            started = time.perf_counter()
            result = step.train_adapter(art, day, base, cfg, effects, step.train_in_process, release=release)
            seconds = time.perf_counter() - started
            record = result.record
            folder = step.adapter_path(art, record)
            trained = json.loads((folder / "ratchet_train.json").read_text())
            row[mode] = {
                **numbers({**trained, "examples": record["examples"]}, record["seconds"]),
                "night_seconds": round(seconds, 1),
                "start": record["start"],
                "fresh": scored(exact_answers(base, folder, golden)),
            }
            if mode == "warm":
                parent = record["version"]
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def triage(tmp: Path, nights: int, clusters: int, config) -> list[dict]:
    sys.path.insert(0, str(REPO))
    from ratchet_assets.night import warm_start as W
    from ratchet_assets.night.lora_trainer import train_lora
    from ratchet_core.student_model import ensure_demo_base
    from tests.night import triage as T

    base = ensure_demo_base(tmp / "demo-base")
    window: list[tuple[str, dict]] = []  # (day, row)
    out, parent, parent_day = [], None, ""
    for night in range(1, nights + 1):
        day = f"2026-03-{night + 1:02d}"
        window += [(day, r) for r in T.rows(seed=night, n_clusters=clusters)]
        window = window[-7 * clusters * 4 :]
        fresh = T.fresh(seed=1000 + night, n=300)
        folder = tmp / f"triage-{night}"
        folder.mkdir(parents=True, exist_ok=True)
        full = folder / "train.jsonl"
        full.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for _, r in window))
        row: dict[str, Any] = {"night": night, "day": day, "training_set_rows": len(window)}
        modes = ["cold", "warm"] + (["cold_prompt_split"] if night == nights else [])
        for mode in modes:
            cfg = dataclasses.replace(
                config,
                start="warm" if mode == "warm" else "cold",
                validation_groups="prompt" if mode == "cold_prompt_split" else "near_duplicate",
            )
            path, init = full, None
            start: dict[str, Any] = {"mode": "cold"}
            if mode == "warm" and parent is not None:
                keys = [json.dumps(r, sort_keys=True) for _, r in window]
                held = W.held_out(full, dataclasses.asdict(cfg), base)
                rows, new, replay = W.select_rows(
                    keys, [d for d, _ in window], parent_day, cfg.replay_share, cfg.replay_cap, held
                )
                path = folder / "warm.jsonl"
                W.write_subset(full, rows, path)
                init, start = parent, {"mode": "warm", "new_rows": new, "replay_rows": replay}
            started = time.perf_counter()
            result = train_lora(base, path, folder / mode, cfg, init_adapter=init)
            seconds = time.perf_counter() - started
            row[mode] = {
                **numbers(result.to_dict(), seconds),
                "start": start,
                "fresh": scored(exact_answers(base, folder / mode, fresh)),
            }
            if mode == "warm":
                parent, parent_day = folder / mode, day
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def _commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def _public(argv: list[str]) -> list[str]:
    """The arguments as recorded: an output path becomes its file name (no path of this machine)."""
    return [Path(a).name if a.endswith(".json") else a for a in argv]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nights", type=int, default=4)
    ap.add_argument("--tickets", type=int, default=200, help="tickets requests a day")
    ap.add_argument(
        "--clusters", type=int, default=90, help="triage clusters a day (2-4 near-duplicates each)"
    )
    ap.add_argument("--tasks", default="tickets,triage")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "measured" / "warm_start.json"))
    args = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from ratchet_assets.night.adapter import NIGHT_TRAINING

    tmp = Path(tempfile.mkdtemp(prefix="warm-start-"))
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    results: dict[str, Any] = {}
    tasks = args.tasks.split(",")
    if "tickets" in tasks:
        results["tickets"] = tickets(tmp, args.nights, args.tickets, NIGHT_TRAINING)
    if "triage" in tasks:
        results["triage"] = triage(tmp, args.nights, args.clusters, NIGHT_TRAINING)
    doc = {
        "what": "cold vs warm nights on the demo base (benchmarks/warm_start.py docstring)",
        "command": " ".join(["python -m benchmarks.warm_start", *_public(sys.argv[1:])]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, one torch thread; seconds are wall time, "
        "relative on a shared machine (load average before and after below)",
        "loadavg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "code": _commit(),
        "small": f"{args.nights} nights; tickets {args.tickets} requests a day; triage {args.clusters} clusters a "
        "day; kept small for a shared 2-core machine",
        "config": {k: v for k, v in dataclasses.asdict(NIGHT_TRAINING).items() if k != "start"},
        "wall_seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
