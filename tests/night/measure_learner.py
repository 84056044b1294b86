"""Measure the night's learner on a task it has never seen (not a test; run by hand, minutes on 2 CPU cores).

    .venv/bin/python -m tests.night.measure_learner [--requests 700] [--nights 2] [--out measure.json]

Two nights of ``moods`` traffic (tests/night/moods.py, five labels), each through the night's own steps (traffic,
examples, golden split at the default share, the 7-day training window) and a training with the night's settings
(``night.adapter.NIGHT_TRAINING``: early stopping on a validation split of the training rows). Each night's adapter
is scored on the golden set to date, exact answer (teacher-forced argmax = greedy decoding, EOS included; the
certificate's label comparator is no stricter), with the certificate's Clopper-Pearson lower bound at delta 0.05.
Prints one JSON object per night: steps, epochs, validation accuracy per epoch, seconds, golden n/correct/lower.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path


def _moods():
    from tests.night.moods import MOODS_WORKLOAD

    return MOODS_WORKLOAD


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=700)
    ap.add_argument("--nights", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--golden-share", type=float, default=0.2)
    ap.add_argument(
        "--workload", default="moods", help="moods, or a built-in workload of the fixtures (mixed)"
    )
    ap.add_argument("--config", default="{}", help="JSON overrides of NIGHT_TRAINING's fields")
    ap.add_argument("--fields", action="store_true", help="per JSON key: golden rows with that value right")
    args = ap.parse_args()

    from ratchet_assets.night.adapter import NIGHT_TRAINING, row_tasks
    from ratchet_assets.night.evaluate import load_golden
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.lora_trainer import train_lora
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_core import workloads
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_stats.bounds import clopper_pearson_lower

    workloads.WORKLOADS["moods"] = _moods()
    config = dataclasses.replace(NIGHT_TRAINING, **json.loads(args.config))
    tmp = Path(tempfile.mkdtemp(prefix="measure-learner-"))
    base = ensure_demo_base(tmp / "demo-base")
    art, lake = tmp / "art", tmp / "lake"
    results = []
    for night in range(1, args.nights + 1):
        day = f"2026-03-{night + 1:02d}"
        write_day(lake, day, args.requests, seed=100 + night, workload=args.workload, student_share=0.0)
        consolidate_traffic(lake, art, day)
        build_examples(art, day)
        split_golden(art, day, share=args.golden_share)
        train = build_training_set(art, day)
        started = time.perf_counter()
        tasks = row_tasks(art, day)
        res = train_lora(base, train.path, tmp / f"adapter-{night}", config, row_tasks=tasks)
        seconds = time.perf_counter() - started
        golden = load_golden(art, day)
        right = golden_exact(base, tmp / f"adapter-{night}", golden)
        n, correct = len(right), sum(right)
        out = {
            "night": night,
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
        if args.fields:
            out["fields"] = field_exact(base, tmp / f"adapter-{night}", golden)
        results.append(out)
        print(json.dumps(out), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"config": config.to_dict(), "nights": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
