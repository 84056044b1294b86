"""Measure the night's learner on a task it has never seen (not a test; run by hand, minutes on 2 CPU cores).

    .venv/bin/python -m tests.night.measure_learner [--requests 700] [--nights 2] [--warm] [--out measure.json]

Two nights of ``moods`` traffic (tests/night/moods.py, five labels), each through the night's own steps (traffic,
examples, golden split at the default share, the 7-day training window) and a training with the night's settings
(``night.adapter.NIGHT_TRAINING``: early stopping on a validation split of the training rows). Each night's adapter
is scored on the golden set to date, exact answer (teacher-forced argmax = greedy decoding, EOS included; the
certificate's label comparator is no stricter), with the certificate's Clopper-Pearson lower bound at delta 0.05.
Prints one JSON object per night: steps, epochs, validation accuracy per epoch, seconds, golden n/correct/lower.

``--warm``: nights after the first start as the product's do (``night.warm_start``): from the newest night whose
adapter certified (lower bound >= 0.95), on its rows since the parent's day plus the replay sample, validated on the
new rows' held-out groups; cold while none has certified (``--parent-bound``: the bound that counts as
certified here, 0.95 by default). Each warm night also scores its parent on the same golden
rows (``parent_golden_correct``). ``--base DIR`` trains over another base folder (a pretrained demo base: benchmarks/pretrain_demo_base.py) instead
of the demo base. ``--workload tickets --requests 600 --nights 4 --warm`` is ``make demo``'s
learning (the demo's workload, requests a day and base; its golden split also has a per-task floor:
``--golden-floor``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path


def _unseen() -> dict:
    """The tasks the project has never seen, by workload name (tests/night/moods.py, tests/night/departments.py)."""
    from tests.night.departments import DEPARTMENTS_WORKLOAD
    from tests.night.moods import MOODS_WORKLOAD

    return {"moods": MOODS_WORKLOAD, "departments": DEPARTMENTS_WORKLOAD}


def golden_exact(base: Path, adapter: Path, golden) -> list[bool]:
    """Per golden row: whether the adapter's greedy answer is exactly the teacher's (teacher-forced argmax)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ratchet_assets.night.lora_trainer import _exact_rows
    from ratchet_core.chat_encoding import encode, encode_answer
    from ratchet_core.chat_format import render_answer, render_prompt, structured_answer

    tok = AutoTokenizer.from_pretrained(base)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter
    )
    rows = []
    for g in golden:
        p = encode(tok, render_prompt(tok, g.messages, g.tools))
        answer = structured_answer(g.expected, g.response_format)
        t = encode_answer(tok, render_answer(tok, g.messages, g.tools, answer))
        rows.append((p + t, [-100] * len(p) + t))
    return _exact_rows(model, rows, tok.pad_token_id, 32)


def field_exact(base: Path, adapter: Path, golden) -> dict[str, str]:
    """Per JSON key of the answers (an ``extract`` field, a tool argument): how many golden rows have that value's
    every character right (teacher-forced argmax over the value's tokens), as "right/n". Where a copied span
    (order id, amount) fails while a label (intent, currency) is right, the base does not copy."""
    import re

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ratchet_core.chat_encoding import encode, encode_answer
    from ratchet_core.chat_format import render_answer, render_prompt, structured_answer

    value = re.compile(r'\\?"(\w+)\\?":\s*(\\?"[^"\\]*\\?"|-?[0-9][0-9.]*)')
    tok = AutoTokenizer.from_pretrained(base)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter
    )
    model.eval()
    counts: dict[str, list[int]] = {}
    for g in golden:
        p = encode(tok, render_prompt(tok, g.messages, g.tools))
        text = render_answer(tok, g.messages, g.tools, structured_answer(g.expected, g.response_format))
        t = encode_answer(tok, text)
        pieces = [tok.decode([i]) for i in t]
        starts, at = [], 0
        for piece in pieces:
            starts.append(at)
            at += len(piece)
        with torch.no_grad():
            pred = model(input_ids=torch.tensor([p + t])).logits[0].argmax(-1)
        right = [int(pred[len(p) + j - 1]) == t[j] for j in range(len(t))]
        for m in value.finditer(text):
            lo, hi = m.span(2)
            ok = all(r for r, s in zip(right, starts, strict=True) if lo <= s < hi)
            c = counts.setdefault(m.group(1), [0, 0])
            c[0] += int(ok)
            c[1] += 1
    return {k: f"{r}/{n}" for k, (r, n) in sorted(counts.items())}


def _demo_day(
    lake: Path, day: str, index: int, n: int, workload: str, bursts: int = 6, traffic_seed: int = 0
) -> None:
    """Day ``index`` (0-based) of ``make demo``'s traffic (``ratchet_cli.demo.runner``: ``bursts`` bursts, burst j
    the workload's examples for seed ``index * 1000 + j`` and day ``index``), every answer the teacher's, written
    to the lake as sealed segments (no failures or resends: the gateway's loadgen sends each example once).
    ``traffic_seed`` > 0 draws another day of the same shape (seeds ``traffic_seed * 100000`` on)."""
    from datetime import UTC, datetime, timedelta

    from ratchet_assets.night.fixtures import (
        request_row,
        request_rows,
        segment_relpath,
        write_segment,
        write_segments,
    )

    rows = []
    for j in range(bursts):
        size = n // bursts + (1 if j < n % bursts else 0)
        rows += request_rows(
            day,
            size,
            seed=traffic_seed * 100_000 + index * 1000 + j,
            workload=workload,
            student_share=0.0,
            failure_share=0.0,
            repeat_share=0.0,
            day_index=index,
        )
    seqs: dict[str, int] = {}
    for row in rows:  # one sequence per replica over the bursts
        seqs[row["replica"]] = seqs.get(row["replica"], 0) + 1
        row["seq"] = seqs[row["replica"]]
    day_end = datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(days=1)
    write_segments(lake, rows, mtime=day_end + timedelta(minutes=1))
    # an early segment of the next day per replica seals this one (as fixtures.write_day writes it)
    next_day = day_end.date().isoformat()
    for replica, last in sorted(seqs.items()):
        seal = request_row(
            request_id=f"seal-{next_day}-{replica}",
            ts=day_end + timedelta(seconds=1),
            day=next_day,
            replica=replica,
            seq=last + 1,
            client="acme",
            task=workload,
            served_by="teacher",
            status_code=200,
        )
        write_segment(lake / segment_relpath(next_day, replica, last + 1), [seal])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=700)
    ap.add_argument("--nights", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--golden-share", type=float, default=0.2)
    ap.add_argument(
        "--workload",
        default="moods",
        help="moods, departments, or a built-in workload of the fixtures (tickets, mixed)",
    )
    ap.add_argument("--config", default="{}", help="JSON overrides of NIGHT_TRAINING's fields")
    ap.add_argument("--fields", action="store_true", help="per JSON key: golden rows with that value right")
    ap.add_argument("--warm", action="store_true", help="warm nights from the newest certified night")
    ap.add_argument(
        "--also",
        default="",
        help="JSON overrides: warm nights also train this variant from the same parent and rows and score it",
    )
    ap.add_argument(
        "--parent-bound",
        type=float,
        default=0.95,
        help="--warm: a night whose golden lower bound reaches this is a parent (the product: the target)",
    )
    ap.add_argument(
        "--fresh",
        type=int,
        default=0,
        help="score every night's adapter on this many fresh requests of a later day (0: none)",
    )
    ap.add_argument(
        "--demo-traffic",
        action="store_true",
        help="each day's requests as make demo sends them: 6 bursts, seed index*1000+burst, the day's index",
    )
    ap.add_argument(
        "--step-budget",
        action="store_true",
        help="a night after nights that did not certify (bound < 0.95) trains with the larger budget "
        "night.step_budget gives it (x2 a night, at most x4), as the product's night does",
    )
    ap.add_argument(
        "--traffic-seed",
        type=int,
        default=0,
        help="0: the nights' usual traffic; N > 0: another draw of the same shape (seeds you did not tune on)",
    )
    ap.add_argument("--golden-floor", type=int, default=0, help="golden rows per task at least (0: none)")
    ap.add_argument(
        "--base",
        default="",
        help="a base model folder to train over (default: the demo base, built in the run's temporary folder)",
    )
    ap.add_argument(
        "--train-from",
        type=int,
        default=1,
        help="train nights from this one on; earlier nights build their day (traffic, golden, training set) and "
        "count as not certified (a night already measured: its numbers are known)",
    )
    args = ap.parse_args()

    from ratchet_assets.night import warm_start
    from ratchet_assets.night.adapter import NIGHT_TRAINING, row_tasks
    from ratchet_assets.night.evaluate import load_golden
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.step_budget import budget_of
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_core import workloads
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_stats.bounds import clopper_pearson_lower

    workloads.WORKLOADS.update(_unseen())
    night_config = config = dataclasses.replace(NIGHT_TRAINING, **json.loads(args.config))
    tmp = Path(tempfile.mkdtemp(prefix="measure-learner-"))
    base = Path(args.base) if args.base else ensure_demo_base(tmp / "demo-base")
    art, lake = tmp / "art", tmp / "lake"
    fresh = []
    if args.fresh:
        # requests of a day no night trains on, every distinct example scored (a later day's traffic, as served)
        flake, fart, fday = tmp / "fresh-lake", tmp / "fresh-art", "2026-04-01"
        write_day(flake, fday, args.fresh, seed=999, workload=args.workload, student_share=0.0)
        consolidate_traffic(flake, fart, fday)
        build_examples(fart, fday)
        split_golden(fart, fday, share=0.999999)
        fresh = load_golden(fart, fday)
    results = []
    parent: tuple[str, Path] | None = None  # (its day, its folder): the newest night that certified
    for night in range(1, args.nights + 1):
        day = f"2026-03-{night + 1:02d}"
        if args.demo_traffic:
            _demo_day(lake, day, night - 1, args.requests, args.workload, traffic_seed=args.traffic_seed)
        else:
            seed = 100 + night + 1000 * args.traffic_seed
            write_day(lake, day, args.requests, seed=seed, workload=args.workload, student_share=0.0)
        consolidate_traffic(lake, art, day)
        build_examples(art, day)
        split_golden(art, day, share=args.golden_share, floor=args.golden_floor)
        train = build_training_set(art, day)
        if night < args.train_from:
            results.append({"night": night, "trained": False, "certified_095": False})
            print(json.dumps(results[-1]), flush=True)
            continue
        started = time.perf_counter()
        tasks = row_tasks(art, day)
        config = night_config
        if args.step_budget:
            earlier = (None if e["certified_095"] else {"night": e["night"]} for e in reversed(results))
            config = LoraTrainConfig(**budget_of(earlier).apply(night_config.to_dict()))
        start: dict = {"mode": "cold"}
        if args.warm and parent is not None:
            # the rows and split of a warm night, as night.adapter.train_adapter picks them (night.warm_start)
            parent_day, parent_dir = parent
            first_days = warm_start.row_first_days(art, day)
            new_rows = sum(d > parent_day for d in first_days)
            held = warm_start.held_out(Path(train.path), config.to_dict(), base, sized_for=new_rows)
            keys = Path(train.keys_path).read_text(encoding="ascii").split()
            rows, new, replay = warm_start.select_rows(
                keys, first_days, parent_day, config.replay_share, config.replay_cap, held
            )
            subset = tmp / f"train-{night}.jsonl"
            warm_start.write_subset(Path(train.path), rows, subset)
            warm_rows = {
                "row_tasks": [tasks[i] for i in rows],
                "init_adapter": parent_dir,
                "held_out": [held[i] for i in rows],
            }
            res = train_lora(base, subset, tmp / f"adapter-{night}", config, **warm_rows)
            start = {"mode": "warm", "parent_day": parent_day, "new_rows": new, "replay_rows": replay}
            if args.also:
                began = time.perf_counter()
                variant = train_lora(
                    base,
                    subset,
                    tmp / f"variant-{night}",
                    dataclasses.replace(config, **json.loads(args.also)),
                    **warm_rows,
                )
                variant_right = sum(golden_exact(base, tmp / f"variant-{night}", load_golden(art, day)))
                start["also"] = {
                    "overrides": json.loads(args.also),
                    "steps": variant.steps,
                    # training and scoring the variant, left out of the night's own seconds
                    "seconds": round(time.perf_counter() - began, 1),
                    "validation": variant.validation,
                    "golden_correct": variant_right,
                }
        else:
            res = train_lora(base, train.path, tmp / f"adapter-{night}", config, row_tasks=tasks)
        seconds = time.perf_counter() - started - start.get("also", {}).get("seconds", 0.0)
        golden = load_golden(art, day)
        right = golden_exact(base, tmp / f"adapter-{night}", golden)
        n, correct = len(right), sum(right)
        if start["mode"] == "warm":
            start["parent_golden_correct"] = sum(golden_exact(base, parent[1], golden))  # type: ignore[index]
        out = {
            "night": night,
            "start": start,
            "min_steps": config.min_steps,
            "max_epochs": config.max_epochs,
            "train_rows": train.rows,
            "trained_on": res.examples,
            "steps": res.steps,
            "seconds": round(seconds, 1),
            "validation": res.validation,
            "golden_n": n,
            "golden_correct": correct,
            "golden_precision": round(correct / n, 4),
            "lower_bound": round(float(clopper_pearson_lower(correct, n, 0.05)), 4),
            "certified_095": bool(clopper_pearson_lower(correct, n, 0.05) >= 0.95),
            "golden_per_task": {
                t: f"{sum(r for r, g in zip(right, golden, strict=True) if g.task == t)}/"
                f"{sum(g.task == t for g in golden)}"
                for t in sorted({g.task for g in golden})
            },
            "adapter_sha256": res.adapter_sha256,
        }
        if fresh:
            fresh_right = sum(golden_exact(base, tmp / f"adapter-{night}", fresh))
            out["fresh"] = f"{fresh_right}/{len(fresh)}"
            out["fresh_accuracy"] = round(fresh_right / len(fresh), 4)
        if args.fields:
            out["fields"] = field_exact(base, tmp / f"adapter-{night}", golden)
        results.append(out)
        print(json.dumps(out), flush=True)
        if out["lower_bound"] >= args.parent_bound:
            parent = (day, tmp / f"adapter-{night}")
    if args.out:
        Path(args.out).write_text(json.dumps({"config": night_config.to_dict(), "nights": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
