"""The demo's prices and its last lines: each day's signed receipt and its cost report, side by side.

The two answer different questions from the same day's rows. The receipt (verified here with the home's public
key, as ``ratchet verify receipt`` does) says what the day saved against sending everything to the teacher:
the teacher-equivalent minus what was paid (the teacher, the student at the gateway's price per token, the audit
calls). The cost report (``ratchet_assets.cost``) prices the student by a stated model, charges the night's
training too, and says at what daily volume the student pays for that training.

The demo's cost settings (``DEMO_PRICES``, each unless the environment sets it) describe the deployment the demo
stands for, not the laptop it runs on: a vLLM student priced by its batched throughput on one GPU, and training
priced at the machine that trained (this one's CPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# vLLM serving a 0.5B student (Qwen2.5-0.5B-Instruct, infra/vllm/launch.sh) with continuous batching on one L4
# GPU (about $0.80 an hour on demand) processes well over 5,000 prompt + completion tokens a second on requests
# this short: $0.044 per million tokens, the order of the gateway's own student price per token. The demo trains
# on this machine's CPUs; a rented 2-4 vCPU machine costs about $0.10 an hour.
DEMO_PRICES = {
    "RATCHET_STUDENT_TOKENS_PER_SECOND": "5000",
    "RATCHET_STUDENT_GPU_PRICE_PER_HOUR": "0.80",
    "RATCHET_TRAINING_PRICE_PER_HOUR": "0.10",
}


def demo_price_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The demo's cost settings that `environ` does not set itself."""
    return {k: v for k, v in DEMO_PRICES.items() if k not in environ}


def receipt_totals(home: Path, day: str) -> dict[str, Any] | str | None:
    """The day's receipt totals, verified (signature, then the client, estimate and pair lines beside it) with the
    home's public key; None when the day has no receipt, the failed check's message when it does not verify."""
    from ratchet_core.layout import ArtifactLayout
    from ratchet_stats.keys import load_public_key
    from ratchet_stats.receipt import ReceiptError, verify_receipt
    from ratchet_stats.receipt.v3 import PAIRS_FILE

    layout = ArtifactLayout(home / "artifacts")
    envelope = layout.receipt_envelope(day)
    if not envelope.exists():
        return None

    def lines(path: Path) -> list[bytes] | None:
        return [x for x in path.read_bytes().splitlines() if x.strip()] if path.exists() else None

    try:
        report = verify_receipt(
            envelope.read_bytes(),
            [load_public_key((home / "keys" / "signing.pub").read_bytes())],
            clients=lines(layout.receipt_clients(day)),
            estimates=lines(layout.receipt_estimates(day)),
            pairs=lines(layout.receipt_dir(day) / PAIRS_FILE),
        )
    except ReceiptError as exc:
        return f"does not verify: {exc}"
    return report.get("totals") or "verified, but its client lines are missing"


def side_by_side(home: Path, days: list[str]) -> list[str]:
    """The demo's last lines: per day, the receipt's numbers beside the cost report's, and the pricing used."""
    from ratchet_assets.cost import (
        break_even_requests_per_day,
        break_even_text,
        cost_config,
        cost_report,
        describe_pricing,
        totals,
    )
    from ratchet_core.settings import load_settings

    settings = load_settings()
    config = cost_config(settings)
    every = []
    out = [
        "",
        "receipt and cost report, day by day (USD):",
        f"{'':<10} | {'receipt (signed)':<44} | cost report",
        f"{'day':<10} | {'requests':>8} {'student':>7} {'teacher-eq':>10} {'paid':>8} {'saved':>8} | "
        f"{'student':>8} {'training':>8} {'saved':>8} {'break-even':>12}",
    ]
    for day in days:
        receipt = receipt_totals(home, day)
        rows = cost_report(settings.lake_root, settings.artifacts_root, day, config)
        every += rows
        t = totals(rows)
        be = break_even_requests_per_day(
            t["requests"], t["teacher_equivalent_usd"], t["teacher_paid_usd"], t["student_cost_usd"],
            t["training_cost_usd"],
        )  # fmt: skip
        if receipt is None or isinstance(receipt, str):
            left = f"{receipt or 'no receipt':<44.44}"
        else:
            student = (receipt.get("served_by") or {}).get("student", 0)
            share = student / receipt["requests"] if receipt["requests"] else 0.0
            left = (
                f"{receipt['requests']:>8} {share:>7.1%} {receipt['teacher_cost_micro_usd'] / 1e6:>10.4f} "
                f"{receipt['actual_cost_micro_usd'] / 1e6:>8.4f} {receipt['saved_micro_usd'] / 1e6:>8.4f}"
            )
        right = (
            f"{t['student_cost_usd']:>8.4f} {t['training_cost_usd']:>8.4f} {t['saved_usd']:>8.4f} "
            f"{'never' if be is None else break_even_text(be) + '/day':>12}"
        )
        out.append(f"{day:<10} | {left} | {right}")
        if isinstance(receipt, str) and len(receipt) > 44:
            out.append(f"  receipt of {day} {receipt}")
    out += [
        f"  {describe_pricing(config, every)}",
        "  receipt: saved = teacher-equivalent - paid (teacher, student at the gateway's token price, audits); "
        "cost report: saved also charges the night's training; break-even = requests a day at which the "
        "student pays for its training",
        "  again: ratchet cost report "
        + " ".join(
            f"--{flag} {value:g}"
            for flag, value in (
                ("tokens-per-second", config.tokens_per_second),
                ("gpu-price-per-hour", config.gpu_price_per_hour),
                ("training-price-per-hour", config.training_price_per_hour),
            )
        )
        + f"   (RATCHET_HOME={home})",
    ]
    return out
