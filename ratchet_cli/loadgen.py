"""The load generator: send a built-in workload to any OpenAI-compatible endpoint and score what comes back.

It uses the real `openai` client (``AsyncOpenAI``, ``with_raw_response`` to read Ratchet's response headers
``x-ratchet-served-by`` / ``x-ratchet-version``), names each request's task both as ``metadata.ratchet_task``
and as the ``X-Ratchet-Task`` header, streams a chosen share of requests (with ``stream_options.include_usage``),
and scores every answer with the workload's own comparator against the example's expected answer.

Summary (a dict; `ratchet traffic --json` prints it):
``sent, ok, errors, errors_by_type, error_samples, correct, accuracy (= correct / ok), latency_ms {p50, p90,
p99, max, mean}, served_by, versions, by_task {task: {sent, ok, correct, student}}, streamed, tokens, seconds,
requests_per_second``. Percentiles are nearest-rank: the ceil(q*n)-th smallest latency. Latency is from sending
the request to having the whole answer (last chunk for streams).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ratchet_core.workloads import Example, compare, get_workload

ProgressFn = Callable[[int, int], None]


def normalise_base_url(url: str) -> str:
    """`url` with ``/v1`` appended when it names a server root (the usual mistake), without a trailing slash."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--base-url must look like http://127.0.0.1:8100/v1, got {url!r}")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of ascending values: the ceil(q * n)-th smallest (q in (0, 1]); None if empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def _error_type(exc: BaseException) -> str:
    import openai

    if isinstance(exc, openai.APIStatusError):
        return f"http_{exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    return type(exc).__name__


async def _read_stream(stream: Any) -> tuple[dict, Any]:
    """Assemble an SSE stream of chat.completion.chunk into an assistant message; returns (message, usage)."""
    content: list[str] = []
    calls: dict[int, dict] = {}
    usage = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(
                    tc.index, {"id": None, "type": "function", "name": "", "arguments": ""}
                )
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
    tool_calls = [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for _, c in sorted(calls.items())
    ]
    message = {"role": "assistant", "content": "".join(content) or None, "tool_calls": tool_calls or None}
    return message, usage


async def run_traffic_async(
    base_url: str,
    api_key: str,
    workload: str = "mixed",
    requests: int = 100,
    concurrency: int = 8,
    seed: int = 0,
    model: str = "ratchet",
    day: int = 0,
    drift_day: int | None = None,
    stream_share: float = 0.0,
    timeout_s: float = 60.0,
    max_retries: int = 0,
    send_metadata: bool = True,
    on_progress: ProgressFn | None = None,
    examples: Sequence[Example] | None = None,
) -> dict[str, Any]:
    """Send `requests` examples of `workload` (or the given `examples`) with `concurrency` requests in flight;
    return the summary described in the module docstring. Which requests stream is decided by `seed`."""
    from openai import AsyncOpenAI

    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not 0.0 <= stream_share <= 1.0:
        raise ValueError(f"stream_share must be between 0 and 1, got {stream_share}")
    if examples is None:
        examples = get_workload(workload).generate(requests, seed=seed, day=day, drift_day=drift_day)
    stream_rng = random.Random(f"traffic-stream:{seed}:{day}")
    streams = [stream_rng.random() < stream_share for _ in examples]

    latencies: list[float] = []
    errors: Counter[str] = Counter()
    error_samples: list[str] = []
    served_by: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    by_task: dict[str, Counter[str]] = {}
    tokens: Counter[str] = Counter()
    done = 0
    next_index = 0

    client = AsyncOpenAI(
        base_url=normalise_base_url(base_url), api_key=api_key, max_retries=max_retries, timeout=timeout_s
    )

    async def one(i: int) -> None:
        nonlocal done
        ex = examples[i]
        stats = by_task.setdefault(ex.task, Counter())
        stats["sent"] += 1
        kwargs: dict[str, Any] = {
            "model": model,
            **ex.request_body(),
            "extra_headers": {"X-Ratchet-Task": ex.task},
        }
        if send_metadata:
            kwargs["metadata"] = {"ratchet_task": ex.task}
        if streams[i]:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        t0 = time.perf_counter()
        try:
            raw = await client.chat.completions.with_raw_response.create(**kwargs)
            parsed = await raw.parse() if asyncio.iscoroutinefunction(raw.parse) else raw.parse()
            if streams[i]:
                message, usage = await _read_stream(parsed)
            else:
                message, usage = parsed.choices[0].message.model_dump(), parsed.usage
            latencies.append((time.perf_counter() - t0) * 1000.0)
        except Exception as exc:  # every failure is a result of the run, counted by type
            kind = _error_type(exc)
            errors[kind] += 1
            if len(error_samples) < 5:
                error_samples.append(f"{kind}: {str(exc)[:200]}")
        else:
            stats["ok"] += 1
            served = raw.headers.get("x-ratchet-served-by") or "unknown"
            served_by[served] += 1
            stats["student"] += served == "student"
            version = raw.headers.get("x-ratchet-version")
            if version:
                versions[version] += 1
            if usage is not None:
                tokens["prompt"] += usage.prompt_tokens or 0
                tokens["completion"] += usage.completion_tokens or 0
            if compare(ex.task, ex.expected, message):
                stats["correct"] += 1
        finally:
            done += 1
            if on_progress is not None:
                on_progress(done, len(examples))

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(examples):
            i = next_index
            next_index += 1
            await one(i)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(examples))))))
    finally:
        await client.close()
    seconds = time.perf_counter() - started

    latencies.sort()
    ok = len(latencies)
    correct = sum(c["correct"] for c in by_task.values())
    return {
        "workload": workload,
        "model": model,
        "seed": seed,
        "day": day,
        "drift_day": drift_day,
        "concurrency": concurrency,
        "sent": len(examples),
        "ok": ok,
        "errors": sum(errors.values()),
        "errors_by_type": dict(sorted(errors.items())),
        "error_samples": error_samples,
        "correct": correct,
        "accuracy": (correct / ok) if ok else None,
        "latency_ms": {
            "p50": percentile(latencies, 0.50),
            "p90": percentile(latencies, 0.90),
            "p99": percentile(latencies, 0.99),
            "max": latencies[-1] if latencies else None,
            "mean": (sum(latencies) / ok) if ok else None,
        },
        "served_by": dict(sorted(served_by.items())),
        "versions": dict(sorted(versions.items())),
        "by_task": {
            t: {"sent": c["sent"], "ok": c["ok"], "correct": c["correct"], "student": c["student"]}
            for t, c in sorted(by_task.items())
        },
        "streamed": sum(streams),
        "tokens": {"prompt": tokens["prompt"], "completion": tokens["completion"]},
        "seconds": seconds,
        "requests_per_second": (len(examples) / seconds) if seconds > 0 else None,
    }


def run_traffic(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Synchronous `run_traffic_async` (runs its own event loop; call it from code that has none running)."""
    return asyncio.run(run_traffic_async(*args, **kwargs))
