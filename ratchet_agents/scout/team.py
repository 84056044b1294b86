"""Scout's team: planner -> one researcher per subject -> writer -> file the report through the effect gate.

Every model call goes to the gateway as an outside client would: the OpenAI client, the client's API key, model
``ratchet``, the agent's own task name (``X-Ratchet-Task``: research_plan, research_search, research_write, the
tasks of ``ratchet_core.workloads.research``), a JSON schema or declared tools for its answer. The agents share
nothing but what they send each other in messages.

Filing the report is the one side effect. It goes through the effect gate (``scout.file_report``, key derived from
the question, fingerprint = SHA-256 of the report text): only ``execute`` writes the file; a retried step (the
same question again, after a crash or a timeout) gets ``duplicate`` with the file already filed, ``in_flight``
while another attempt holds the lease, or ``blocked`` when an attempt vanished mid-filing: never a second file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import openai

from ratchet_core.workloads.research import (
    CORPUS,
    RESEARCH_PLAN,
    RESEARCH_SEARCH,
    RESEARCH_WRITE,
    SEARCH_TOOL,
)

from .gate import GateClient

FILE_EFFECT = "scout.file_report"


@dataclass
class ScoutResult:
    question: str
    plan: dict[str, Any]
    notes: dict[str, str]
    report: dict[str, Any]
    markdown: str
    filing: str  # execute (filed now) | duplicate | in_flight | blocked | denied | awaiting_approval
    path: str | None
    effect_key: str
    calls: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def search_sources(query: str) -> str:
    """Scout's search tool over its local corpus."""
    hit = CORPUS.get(query.strip().lower())
    return hit or f"No source in the corpus mentions {query!r}."


class Scout:
    """The research team. ``base_url`` is the gateway's /v1, ``gate`` the effect gate's client."""

    def __init__(self, base_url: str, api_key: str, gate: GateClient, out_dir: Path, model: str = "ratchet"):
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=2, timeout=60.0)
        self.gate = gate
        self.out_dir = Path(out_dir)
        self.model = model
        self.calls: list[dict[str, Any]] = []

    def _chat(self, task: str, messages: list[dict[str, Any]], **fields: Any):
        response = self.client.chat.completions.with_raw_response.create(
            model=self.model, messages=messages, extra_headers={"X-Ratchet-Task": task}, **fields
        )
        parsed = response.parse()
        self.calls.append({"task": task, "served_by": response.headers.get("x-ratchet-served-by", "")})
        return parsed.choices[0].message

    # The agents -----------------------------------------------------------------------------------------
    def plan(self, question: str) -> dict[str, Any]:
        message = self._chat(
            RESEARCH_PLAN.name,
            [
                {"role": "system", "content": RESEARCH_PLAN.system_prompt},
                {"role": "user", "content": f"Research question: {question}"},
            ],
            response_format=RESEARCH_PLAN.response_format,
        )
        plan = _json_object(message.content)
        subjects = [s for s in plan.get("subjects") or [] if isinstance(s, str) and s.strip()]
        return {"kind": plan.get("kind") or "comparison", "subjects": subjects or [question]}

    def research(self, subject: str) -> str:
        message = self._chat(
            RESEARCH_SEARCH.name,
            [
                {"role": "system", "content": RESEARCH_SEARCH.system_prompt},
                {"role": "user", "content": f"Find sources about {subject}."},
            ],
            tools=[SEARCH_TOOL],
            tool_choice="required",
        )
        for call in message.tool_calls or []:
            if call.function.name == "search_sources":
                query = _json_object(call.function.arguments).get("query")
                if isinstance(query, str) and query:
                    return search_sources(query)
        return search_sources(subject)

    def write(self, question: str, plan: dict[str, Any], notes: dict[str, str]) -> dict[str, Any]:
        subjects = plan["subjects"]
        pair = " and ".join(subjects[:2]) if len(subjects) > 1 else subjects[0]
        message = self._chat(
            RESEARCH_WRITE.name,
            [
                {"role": "system", "content": RESEARCH_WRITE.system_prompt},
                {"role": "user", "content": "Notes:\n" + "\n".join(f"- {s}: {n}" for s, n in notes.items())},
                {"role": "user", "content": f"Write the {plan['kind']} report on {pair} from the notes."},
            ],
            response_format=RESEARCH_WRITE.response_format,
        )
        report = _json_object(message.content)
        return {
            "title": report.get("title") or f"Report: {question}",
            "kind": report.get("kind") or plan["kind"],
            "covered": report.get("covered") or list(notes),
        }

    # The side effect ------------------------------------------------------------------------------------
    def file(self, question: str, markdown: str) -> tuple[str, str | None, str]:
        """File the report through the effect gate; (outcome, path, key). Only ``execute`` writes.

        The effect's result names the file relative to the report folder (``report-<hash>.md``), so a folder that
        moved with the control DB still answers a duplicate; an older result's absolute path is read by its name."""
        key = "report-" + hashlib.sha256(question.strip().lower().encode()).hexdigest()[:24]
        fingerprint = hashlib.sha256(markdown.encode()).hexdigest()
        began = self.gate.begin(
            FILE_EFFECT,
            key,
            fingerprint,
            lease_seconds=120,
            summary=f"file Scout's report on: {question[:200]}",
        )
        outcome = began["outcome"]
        if outcome == "duplicate":
            filed = (began.get("result") or {}).get("path")
            return outcome, str(self.out_dir / Path(filed).name) if filed else None, key
        if outcome != "execute":
            return outcome, None, key
        path = self.out_dir / f"{key}.md"
        try:
            self._write(path, markdown)
        except Exception as exc:
            self.gate.fail(began["token"], f"{type(exc).__name__}: {exc}")
            raise
        self.gate.report(began["token"], {"path": path.name, "sha256": fingerprint})
        return outcome, str(path), key

    def _write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def run(self, question: str) -> ScoutResult:
        plan = self.plan(question)
        notes = {subject: self.research(subject) for subject in plan["subjects"]}
        report = self.write(question, plan, notes)
        markdown = render(question, report, notes)
        filing, path, key = self.file(question, markdown)
        return ScoutResult(question, plan, notes, report, markdown, filing, path, key, list(self.calls))


def render(question: str, report: dict[str, Any], notes: dict[str, str]) -> str:
    lines = [
        f"# {report['title']}",
        "",
        f"Question: {question}",
        f"Kind: {report['kind']}",
        "",
        "## Findings",
    ]
    lines += [f"- **{subject}**: {note}" for subject, note in notes.items()]
    return "\n".join(lines) + "\n"


def _json_object(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        match = re.search(r"\{.*\}", text, re.S)  # a model that wrapped its JSON in prose
        try:
            value = json.loads(match.group(0)) if match else {}
        except json.JSONDecodeError:
            value = {}
    return value if isinstance(value, dict) else {}
