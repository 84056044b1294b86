"""Evaluate an adapter version on the golden set through the student endpoint (plain functions, no Dagster).

1. ``load_golden``: the night's golden set to date (``golden/day=D/golden.parquet``, written by ``golden_split``):
   request + its label per example key (the teacher's answer, or people's: ``GoldenRow.label_source``).
2. ``ensure_adapter_loaded``: vLLM's runtime LoRA API (``POST /v1/load_lora_adapter {lora_name, lora_path}``),
   through the effect ledger (effect ``adapter.load``, key ``<endpoint>|<version>``, fingerprint = the adapter
   digest: one name never means two adapters on one endpoint). The endpoint's ``/v1/models`` is asked first: a
   loaded adapter is not loaded again; one the ledger says was loaded but the endpoint lacks (a restarted server)
   is loaded again, which is harmless. The endpoint is given the folder's path; the ledger records its name in the
   artifacts tree (``adapters/<version>``: ``ratchet_core.layout``, "Stored names").
3. ``answer_rows``: every golden request through ``/v1/chat/completions`` (greedy, ``logprobs``), confidence =
   ``ratchet_core.confidence.answer_confidence`` (the gateway's cascade uses the same score). Requests go one at a
   time by default: a batch's padding changes floating-point results, and a rerun must reproduce the certificate
   byte for byte. A row the endpoint fails on (5xx) counts as wrong with confidence 0 (fail closed).
   Tool calls an endpoint answers as text (vLLM without a tool parser) are read as vLLM's hermes parser reads
   them (``ratchet_core.tool_calls``), as the gateway reads them. Each row's ``max_tokens`` is capped from the
   teacher's answer (``row_max_tokens``): ``min(max_tokens, 2 * b + 16)`` where ``b`` = UTF-8 bytes of
   ``hermes_text(teacher answer)``, about the text a correct student writes (its template may space it
   differently: the slack covers that). Bytes bound tokens from above (the demo base's tokenizer is byte-level; a BPE token covers >= 1 byte),
   so a correct answer (b tokens + EOS) always fits, while an adapter that has not learnt to stop writes ~2 b
   tokens instead of 512 (measured: an untrained day-1 adapter took ~21 s a row). The cap depends only on the
   row, so a rerun asks the same questions and the certificate stays byte-identical.
4. ``task_outcomes``: correctness by the task's comparator (``COMPARATORS`` overrides, else
   ``ratchet_core.workloads.comparators``: exact label, canonical JSON, tool-call equality) against the row's
   label; the live version's correctness on the same rows for McNemar. Where people labelled rows of a task, each
   row's label source and the answer's agreement with the teacher's own answer too (certificate v2).

The certificate itself is built and checked by ``ratchet_stats.certificate``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_core.layout import ArtifactLayout
from ratchet_stats.canonical import canonical_json
from ratchet_stats.certificate import TaskOutcomes
from ratchet_stats.commitment import Commitment, key_commitment

log = logging.getLogger(__name__)

# Task name -> comparator(expected assistant message, got message or None) -> correct. Extend for your tasks.
COMPARATORS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any] | None], bool]] = {}


class EvaluationError(RuntimeError):
    """Evaluation cannot proceed; the message says what to do."""


@dataclass(frozen=True)
class GoldenRow:
    """One golden example: the request and its label (``expected``): the teacher's answer, or the answer people
    gave (``label_source`` ``people``, with the teacher's answer it replaced in ``teacher_answer``)."""

    key: str
    task: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    response_format: dict[str, Any] | None
    expected: dict[str, Any]
    label_source: str = "teacher"
    teacher_answer: dict[str, Any] | None = None

    def leaf(self) -> bytes:
        """Row-tree leaf of the golden set: canonical JSON of the row (key, task, request, label; a row people
        labelled also says so and carries the teacher's answer)."""
        doc: dict[str, Any] = {
            "example_key": self.key,
            "task": self.task,
            "messages": self.messages,
            "tools": self.tools,
            "response_format": self.response_format,
            "answer": self.expected,
        }
        if self.label_source == "people":
            doc.update(label_source="people", teacher_answer=self.teacher_answer)
        return canonical_json(doc)


@dataclass(frozen=True)
class Answer:
    message: dict[str, Any] | None
    confidence: float
    error: str = ""


def load_golden(artifacts_root: str | Path, day: str) -> list[GoldenRow]:
    """The golden set to date for ``day`` (sorted by example key)."""
    import pyarrow.parquet as pq

    path = ArtifactLayout(artifacts_root).golden_file(day)
    if not path.exists():
        raise EvaluationError(f"no golden set at {path}: materialise `golden_split` for {day} first")
    columns = ["example_key", "task", "messages", "tools", "response_format", "answer"]
    labelled = "label_source" in pq.read_schema(path).names  # a golden set written before label sources: none
    table = pq.read_table(path, columns=columns + (["label_source", "teacher_answer"] if labelled else []))
    rows = []
    for r in table.to_pylist():
        teacher = r.get("teacher_answer")
        rows.append(
            GoldenRow(
                key=r["example_key"],
                task=r["task"],
                messages=json.loads(r["messages"]),
                tools=json.loads(r["tools"]) if r["tools"] else None,
                response_format=json.loads(r["response_format"]) if r["response_format"] else None,
                expected=json.loads(r["answer"]),
                label_source=r.get("label_source") or "teacher",
                teacher_answer=json.loads(teacher) if teacher else None,
            )
        )
    rows.sort(key=lambda g: g.key)
    return rows


def golden_commitments(rows: Sequence[GoldenRow]) -> tuple[Commitment, Commitment]:
    """(key tree, row tree) commitments of the golden set, as the BOM records them."""
    from ratchet_stats import merkle

    leaves = [g.leaf() for g in rows]
    return key_commitment(g.key for g in rows), Commitment(
        merkle.MerkleTree(leaves).root().hex(), len(leaves)
    )


def _models_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/models"


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def loaded_models(base_url: str, api_key: str = "") -> set[str]:
    """Model names the endpoint serves (``GET /v1/models``)."""
    import httpx

    try:
        resp = httpx.get(_models_url(base_url), headers=_headers(api_key), timeout=30)
    except httpx.HTTPError as exc:
        raise EvaluationError(
            f"student endpoint {base_url} is unreachable ({exc}); start it (`ratchet student-server`) or set "
            "RATCHET_STUDENT_BASE_URL"
        ) from exc
    if resp.status_code != 200:
        raise EvaluationError(
            f"student endpoint {base_url}/models answered HTTP {resp.status_code}: {resp.text[:200]}"
        )
    return {m.get("id", "") for m in resp.json().get("data", [])}


def _post_load(base_url: str, api_key: str, name: str, path: str) -> None:
    import httpx

    resp = httpx.post(
        base_url.rstrip("/") + "/load_lora_adapter",
        json={"lora_name": name, "lora_path": path},
        headers=_headers(api_key),
        timeout=300,
    )
    if resp.status_code == 200:
        return
    if resp.status_code == 400 and "already" in resp.text.lower():
        return
    raise EvaluationError(
        f"the student endpoint refused to load {name} from {path}: HTTP {resp.status_code} {resp.text[:300]}; "
        "the path must be readable by the endpoint (vLLM also needs --enable-lora and "
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
    )


def ensure_adapter_loaded(
    base_url: str,
    api_key: str,
    name: str,
    artifacts: ArtifactLayout,
    fingerprint: str,
    effects: Any | None = None,
) -> str:
    """Make sure the endpoint serves adapter version ``name`` (``adapters/<name>`` of ``artifacts``); returns what
    happened (already|loaded|reloaded)."""
    if name in loaded_models(base_url, api_key):
        return "already"
    path = artifacts.adapter_dir(name)
    if effects is None:
        _post_load(base_url, api_key, name, str(path))
        return "loaded"
    begin = effects.begin("adapter.load", f"{base_url}|{name}", fingerprint, lease_seconds=600)
    if begin.outcome == "execute":
        try:
            _post_load(base_url, api_key, name, str(path))
        except Exception as exc:
            effects.fail(begin.token, str(exc)[:500])
            raise
        effects.report(begin.token, {"endpoint": base_url, "version": name, "path": artifacts.name_of(path)})
        return "loaded"
    if begin.outcome == "duplicate":
        log.warning(
            "%s was loaded before but %s no longer serves it (restarted?): loading it again", name, base_url
        )
        _post_load(base_url, api_key, name, str(path))
        return "reloaded"
    if begin.outcome == "denied":
        raise EvaluationError(
            f"{base_url} already had an adapter named {name} with other content: version names must be unique; "
            "see `ratchet admin effects list`"
        )
    raise EvaluationError(
        f"loading {name} on {base_url} is {begin.outcome} ({begin.detail}); wait for the other run or resolve it "
        f"with `ratchet admin effects resolve adapter.load '{base_url}|{name}'`"
    )


def _message_dict(message: Any) -> dict[str, Any]:
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    out: dict[str, Any] = {"role": "assistant", "content": data.get("content"), "tool_calls": None}
    if data.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id", ""), "type": "function", "function": c.get("function", {})}
            for c in data["tool_calls"]
        ]
    return out


ANSWER_SLACK_FACTOR = 2
ANSWER_SLACK_TOKENS = 16


def row_max_tokens(row: GoldenRow, max_tokens: int) -> int:
    """``min(max_tokens, 2 * bytes(hermes_text(row.expected)) + 16)`` (module docstring, step 3)."""
    from ratchet_core.tool_calls import hermes_text

    answer_bytes = len(hermes_text(row.expected).encode("utf-8"))
    return max(1, min(max_tokens, ANSWER_SLACK_FACTOR * answer_bytes + ANSWER_SLACK_TOKENS))


def answer_rows(
    base_url: str,
    api_key: str,
    model: str,
    rows: Sequence[GoldenRow],
    concurrency: int = 1,
    max_tokens: int = 512,
    timeout_s: float = 120.0,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Answer]:
    """The endpoint's greedy answer and confidence for every row (order kept); ``max_tokens`` is the most any
    row may use (each row's own cap: ``row_max_tokens``)."""
    import openai

    from ratchet_core.confidence import answer_confidence
    from ratchet_core.tool_calls import read_text_calls

    client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=1)

    def one(row: GoldenRow) -> Answer:
        kwargs: dict[str, Any] = {}
        if row.tools:
            kwargs["tools"] = row.tools
        if row.response_format:
            kwargs["response_format"] = row.response_format
        try:
            resp = client.chat.completions.create(
                model=model,
                messages=row.messages,
                temperature=0,
                max_tokens=row_max_tokens(row, max_tokens),
                logprobs=True,
                **kwargs,
            )
        except openai.APIConnectionError as exc:
            raise EvaluationError(f"student endpoint {base_url} is unreachable: {exc}") from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                return Answer(None, 0.0, f"HTTP {exc.status_code}")
            raise EvaluationError(
                f"the student endpoint rejected a golden request for {model}: {exc}"
            ) from exc
        choice = resp.choices[0]
        logprobs = [t.logprob for t in (choice.logprobs.content or [])] if choice.logprobs else []
        message = _message_dict(choice.message)
        if row.tools:
            read_text_calls(message)
        return Answer(message, answer_confidence(logprobs))

    answers: list[Answer] = []
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for i, answer in enumerate(pool.map(one, rows), 1):
            answers.append(answer)
            if on_progress is not None:
                on_progress(i, len(rows))
    return answers


def is_correct(
    task: str, expected: Mapping[str, Any], got: Mapping[str, Any] | None, comparator: str | None = None
) -> bool:
    """The task's comparator: a COMPARATORS override, else the task policy's `comparator` when given, else
    ratchet_core.workloads.compare (by the task's built-in comparator; unknown: label)."""
    if got is None:
        return False
    custom = COMPARATORS.get(task)
    if custom is not None:
        return bool(custom(expected, got))
    from ratchet_core.workloads import compare

    return bool(compare(comparator or task, expected, got))


def comparator_name(task: str, comparator: str | None = None) -> str:
    if task in COMPARATORS:
        return f"custom:{task}"
    if comparator:
        return comparator
    from ratchet_core.workloads import comparator_of

    return comparator_of(task)


def task_outcomes(
    rows: Sequence[GoldenRow],
    answers: Sequence[Answer],
    baselines: Mapping[str, tuple[str, Sequence[Answer]]] | None = None,
    comparators: Mapping[str, str] | None = None,
) -> list[TaskOutcomes]:
    """Per task outcomes for the certificate. ``baselines``: task -> (live version, its answers for that task's
    rows in the order they appear in ``rows``); ``comparators``: task -> comparator from its signed policy."""
    comparators = comparators or {}
    by_task: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_task.setdefault(row.task, []).append(i)
    out = []
    for task in sorted(by_task):
        idx = by_task[task]
        baseline = (baselines or {}).get(task)
        base_correct = None
        if baseline is not None:
            version, base_answers = baseline
            if len(base_answers) != len(idx):
                raise ValueError(f"{task}: {len(base_answers)} baseline answers for {len(idx)} rows")
            base_correct = [
                is_correct(task, rows[i].expected, a.message, comparators.get(task))
                for i, a in zip(idx, base_answers, strict=True)
            ]
        correct = [is_correct(task, rows[i].expected, answers[i].message, comparators.get(task)) for i in idx]
        people = any(rows[i].label_source == "people" for i in idx)
        out.append(
            TaskOutcomes(
                task=task,
                comparator=comparator_name(task, comparators.get(task)),
                confidences=[answers[i].confidence for i in idx],
                correct=correct,
                baseline_correct=base_correct,
                baseline_version=baseline[0] if baseline is not None else None,
                # rows people labelled: their source, and agreement with the teacher's answer they replaced
                label_sources=[rows[i].label_source for i in idx] if people else None,
                teacher_agrees=[
                    ok
                    if rows[i].label_source == "teacher"
                    else (
                        None
                        if rows[i].teacher_answer is None
                        else is_correct(
                            task, rows[i].teacher_answer, answers[i].message, comparators.get(task)
                        )
                    )
                    for i, ok in zip(idx, correct, strict=True)
                ]
                if people
                else None,
            )
        )
    return out
