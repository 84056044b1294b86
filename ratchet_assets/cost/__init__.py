"""The cost report: teacher spend, student GPU time and training cost side by side, per day and task.

- **Teacher** (``teacher_paid_usd``): what the teacher was paid: teacher-served requests, cascades (the student
  answered first, below its threshold) and audit pairs, priced from litellm's price map
  (``ratchet_core.pricing.model_prices``, offline) and the teacher's token counts on each row.
  ``teacher_equivalent_usd``: what every request would have cost on the teacher (the gateway's
  ``teacher_cost_usd``: the teacher's own usage, or its tokenizer's count of a student-served prompt).
- **Student** (``student_gpu_seconds``, ``student_cost_usd``): the student's tokens (prompt + completion of
  student-served rows and shadow pairs) over a throughput, at a price per GPU-hour. The throughput comes from one
  of two stated pricing models (``student_pricing``, printed with every report):

  - ``configured``: the deployment's vLLM throughput, tokens per second per GPU (``RATCHET_STUDENT_TOKENS_PER_SECOND``,
    or ``--tokens-per-second``): what one GPU serves with continuous batching. Use it to price the student you
    will deploy, whatever machine served the traffic.
  - ``measured`` (no throughput configured): the endpoint's own speed as the gateway saw it, the tokens over the
    seconds it waited on the student (``upstream_ms``), one request at a time with no credit for batching. That is
    the machine that served the traffic: a CPU student's seconds are many, so price them at that machine's hour.

  A cascaded request (the student answered below its threshold, the teacher served) costs the student's
  mean time per answer of its task.
- **Training** (``training_seconds``, ``training_cost_usd``): the night's training job duration (the adapter
  record's ``seconds``: ``adapters/day=D/adapter.json``) at a price per hour, shared between the day's tasks by
  their request counts (the adapter is one for all tasks).
- **Break-even** (``break_even_requests_per_day``): the daily volume at which the student pays for itself: the
  day's training cost over the saving per request (teacher-equivalent - teacher paid - student cost, per request);
  None when the student saves nothing per request.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

COLUMNS = [
    "request_id",
    "kind",
    "task",
    "served_by",
    "pair_role",
    "confidence",
    "prompt_tokens",
    "completion_tokens",
    "teacher_cost_usd",
    "upstream_ms",
    "status_code",
]


CONFIGURED, MEASURED = "configured", "measured"


@dataclass(frozen=True)
class CostConfig:
    teacher_model: str = "gpt-4o"
    gpu_price_per_hour: float = (
        2.5  # one hour of the student endpoint's GPU (or of the machine it runs on), USD
    )
    training_price_per_hour: float = 2.5  # the training job's machine, USD per hour
    tokens_per_second: float = 0.0  # > 0: the deployment's throughput per GPU (pricing "configured")

    @property
    def student_pricing(self) -> str:
        return CONFIGURED if self.tokens_per_second > 0 else MEASURED

    def usd_per_million_tokens(self, tokens_per_second: float) -> float | None:
        """The student's price of a million tokens at `tokens_per_second` (None: no throughput to price)."""
        if tokens_per_second <= 0:
            return None
        return self.gpu_price_per_hour / 3600.0 / tokens_per_second * 1e6


def cost_config(
    settings: Any,
    gpu_price_per_hour: float | None = None,
    training_price_per_hour: float | None = None,
    tokens_per_second: float | None = None,
) -> CostConfig:
    """The report's prices: each given value, else the setting's (``ratchet_core.settings``)."""

    def given(value: float | None, default: float | None) -> float:
        return float(default or 0.0) if value is None else float(value)

    return CostConfig(
        teacher_model=settings.teacher_model or "gpt-4o",
        gpu_price_per_hour=given(gpu_price_per_hour, settings.student_gpu_price_per_hour),
        training_price_per_hour=given(training_price_per_hour, settings.training_price_per_hour),
        tokens_per_second=given(tokens_per_second, settings.student_tokens_per_second),
    )


@dataclass
class TaskDayCost:
    day: str
    task: str
    requests: int = 0
    student_served: int = 0
    teacher_paid_usd: float = 0.0
    teacher_equivalent_usd: float = 0.0
    student_gpu_seconds: float = 0.0
    student_cost_usd: float = 0.0
    training_seconds: float = 0.0
    training_cost_usd: float = 0.0
    total_cost_usd: float = 0.0
    saved_usd: float = 0.0
    break_even_requests_per_day: float | None = None
    student_pricing: str = MEASURED  # configured | measured (module docstring)
    student_tokens: int = 0  # prompt + completion tokens the student answered (served and shadow)
    student_tokens_per_second: float = 0.0  # the throughput priced: configured, or measured for this task

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: round(v, 9) if isinstance(v, float) else v for k, v in d.items()}


def _rows(lake: str | Path, day: str) -> list[dict[str, Any]]:
    import pyarrow as pa

    from ratchet_core.lake import Lake

    tables = Lake(lake).day_tables(day, COLUMNS)
    return pa.concat_tables(tables, promote_options="permissive").to_pylist() if tables else []


def training_seconds(artifacts: str | Path, day: str) -> float:
    """Seconds the night of `day` trained (0 when it reused an adapter or did not train)."""
    from ratchet_core.layout import ArtifactLayout

    path = ArtifactLayout(artifacts).adapter_pointer(day)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0.0
    if record.get("train_day") not in (None, day):
        return 0.0  # a pointer to an adapter another night trained: no training today
    return float(record.get("seconds") or 0.0)


def cost_report(
    lake: str | Path, artifacts: str | Path, day: str, config: CostConfig | None = None
) -> list[TaskDayCost]:
    """The day's costs per task (module docstring)."""
    from ratchet_core.pricing import model_prices

    config = config or CostConfig()
    prices = model_prices(config.teacher_model)
    rows = [r for r in _rows(lake, day) if r["status_code"] == 200]
    out: dict[str, TaskDayCost] = {}
    served_ms: dict[str, list[float]] = defaultdict(list)
    cascaded: dict[str, int] = defaultdict(int)
    student_tokens: dict[str, int] = defaultdict(int)
    for r in rows:
        c = out.setdefault(r["task"], TaskDayCost(day, r["task"]))
        p, k = int(r["prompt_tokens"] or 0), int(r["completion_tokens"] or 0)
        teacher_price = prices.cost(p, k)
        if r["kind"] == "request":
            c.requests += 1
            c.teacher_equivalent_usd += float(r["teacher_cost_usd"] or 0.0)
            if r["served_by"] == "student":
                c.student_served += 1
                served_ms[r["task"]].append(float(r["upstream_ms"] or 0.0))
                student_tokens[r["task"]] += p + k
            else:
                c.teacher_paid_usd += teacher_price
                if r["confidence"] is not None:
                    cascaded[r["task"]] += 1
        elif r["pair_role"] == "audit":
            c.teacher_paid_usd += teacher_price
        elif r["pair_role"] == "shadow":
            served_ms[r["task"]].append(float(r["upstream_ms"] or 0.0))
            student_tokens[r["task"]] += p + k
    day_training = training_seconds(artifacts, day)
    total_requests = sum(c.requests for c in out.values())
    for task, c in out.items():
        ms = served_ms[task]
        c.student_pricing = config.student_pricing
        c.student_tokens = student_tokens[task]
        waited = sum(ms) / 1000.0
        if config.student_pricing == CONFIGURED:
            c.student_tokens_per_second = config.tokens_per_second
        else:
            c.student_tokens_per_second = c.student_tokens / waited if waited > 0 else 0.0
        answered = c.student_tokens / c.student_tokens_per_second if c.student_tokens_per_second else waited
        c.student_gpu_seconds = answered + cascaded[task] * (answered / len(ms) if ms else 0.0)
        c.student_cost_usd = c.student_gpu_seconds / 3600.0 * config.gpu_price_per_hour
        c.training_seconds = day_training * c.requests / total_requests if total_requests else 0.0
        c.training_cost_usd = c.training_seconds / 3600.0 * config.training_price_per_hour
        c.total_cost_usd = c.teacher_paid_usd + c.student_cost_usd + c.training_cost_usd
        c.saved_usd = c.teacher_equivalent_usd - c.total_cost_usd
        c.break_even_requests_per_day = break_even_requests_per_day(
            c.requests, c.teacher_equivalent_usd, c.teacher_paid_usd, c.student_cost_usd, c.training_cost_usd
        )
    return [out[t] for t in sorted(out)]


def break_even_requests_per_day(
    requests: int, teacher_equivalent_usd: float, teacher_paid_usd: float, student_cost_usd: float,
    training_cost_usd: float,
) -> float | None:  # fmt: skip
    """The day's training cost over the saving per request (module docstring); None: it saves nothing per request."""
    per_request = (teacher_equivalent_usd - teacher_paid_usd - student_cost_usd) / max(requests, 1)
    return training_cost_usd / per_request if per_request > 0 else None


def break_even_text(requests_per_day: float | None) -> str:
    """A break-even as printed: whole requests a day, rounded up (0.3 is 1: one request already pays), or never."""
    return "never" if requests_per_day is None else f"{math.ceil(requests_per_day):,}"


def totals(rows: list[TaskDayCost]) -> dict[str, Any]:
    keys = ("requests", "student_served", "teacher_paid_usd", "teacher_equivalent_usd", "student_tokens",
            "student_gpu_seconds", "student_cost_usd", "training_seconds", "training_cost_usd", "total_cost_usd",
            "saved_usd")  # fmt: skip
    return {k: round(sum(getattr(r, k) for r in rows), 9) for k in keys}


def measured_tokens_per_second(rows: list[TaskDayCost]) -> float | None:
    """The student endpoint's measured speed over `rows` (tokens over seconds waited), None when it answered none."""
    tokens = sum(r.student_tokens for r in rows if r.student_pricing == MEASURED)
    seconds = sum(r.student_tokens / r.student_tokens_per_second for r in rows
                  if r.student_pricing == MEASURED and r.student_tokens_per_second > 0)  # fmt: skip
    return tokens / seconds if seconds > 0 else None


def describe_pricing(config: CostConfig, rows: list[TaskDayCost] | None = None) -> str:
    """One line that says which pricing model priced the student, with its numbers (what every report prints)."""
    price = f"${config.gpu_price_per_hour:.2f} per GPU-hour"
    if config.student_pricing == CONFIGURED:
        per_million = config.usd_per_million_tokens(config.tokens_per_second)
        return (
            f"student priced by the configured vLLM throughput: {config.tokens_per_second:,.0f} tokens/s per GPU "
            f"at {price} = ${per_million:.4f} per 1M tokens; training at ${config.training_price_per_hour:.2f} "
            "an hour"
        )
    rate = measured_tokens_per_second(rows or [])
    speed = "no student answers to measure" if rate is None else (
        f"{rate:,.1f} tokens/s, one request at a time = ${config.usd_per_million_tokens(rate):.4f} per 1M tokens"
    )  # fmt: skip
    return (
        f"student priced by its measured speed (the gateway's wait on the endpoint): {speed}, at {price}; "
        f"training at ${config.training_price_per_hour:.2f} an hour. Set RATCHET_STUDENT_TOKENS_PER_SECOND "
        "(or --tokens-per-second) to price the deployment's batched vLLM throughput instead"
    )
