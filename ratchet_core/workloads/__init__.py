"""Built-in workloads: realistic traffic for three tasks, the correct answer to each request, and comparators.

Tasks: ``tickets`` (label), ``extract`` (JSON per a JSON schema), ``tools`` (one function call).
Workloads: one per task plus ``mixed``. Each task is a plain data description (`TaskDescription`) in its own
module; copy one to describe your own application.

    >>> ex = get_workload("mixed").generate(3, seed=1)[0]
    >>> compare(ex.task, ex.expected, solve(ex.task, ex.messages, ex.tools, ex.response_format))
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from .base import (
    COMPARATORS,
    Example,
    Intent,
    TaskDescription,
    TaskSpec,
    Workload,
    last_user_text,
    solve_request,
    validate,
)
from .comparators import comparator_fn, json_equal
from .extract import EXTRACT
from .mixed import MIXED
from .research import RESEARCH, RESEARCH_TASKS
from .tickets import TICKETS
from .tools import TOOLS_TASK

DESCRIPTIONS: dict[str, TaskDescription] = {
    d.name: d for d in (TICKETS, EXTRACT, TOOLS_TASK, *RESEARCH_TASKS)
}
TASKS: dict[str, TaskSpec] = {name: d.spec for name, d in DESCRIPTIONS.items()}
WORKLOADS: dict[str, Workload] = {
    "tickets": Workload("tickets", (TICKETS,)),
    "extract": Workload("extract", (EXTRACT,)),
    "tools": Workload("tools", (TOOLS_TASK,)),
    "mixed": MIXED,
    "research": RESEARCH,
}


def get_workload(name: str) -> Workload:
    """The built-in workload `name` (tickets | extract | tools | mixed)."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}: choose one of {', '.join(WORKLOADS)}") from None


def detect_task(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    response_format=None,
) -> str | None:
    """The built-in task a request belongs to, recognised by its system prompt; None for anything else."""
    for msg in messages:
        if msg.get("role") in ("system", "developer") and isinstance(msg.get("content"), str):
            for name, desc in DESCRIPTIONS.items():
                if msg["content"].strip() == desc.system_prompt:
                    return name
    return None


def solve(
    task: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    response_format: Mapping[str, Any] | None = None,
) -> dict:
    """The correct assistant message for a request of built-in `task`, from the request text alone.

    Deterministic (tool-call ids derive from the text); unaffected by PII placeholders in place of e-mails and
    phone numbers. Raises KeyError for a task that is not built in.
    """
    desc = DESCRIPTIONS.get(task)
    if desc is None:
        raise KeyError(f"unknown task {task!r}: built-in tasks are {', '.join(DESCRIPTIONS)}")
    id_seed = hashlib.sha256(f"{task}\n{last_user_text(messages)}".encode()).hexdigest()
    return solve_request(desc, messages, id_seed)


def comparator_of(task_or_comparator: str) -> str:
    """The comparator name for a task name or comparator name (unknown tasks: ``label``)."""
    if task_or_comparator in COMPARATORS or task_or_comparator.startswith("custom:"):
        return task_or_comparator
    spec = TASKS.get(task_or_comparator)
    return spec.comparator if spec is not None else "label"


def compare(
    task_or_comparator: str, expected_message: Mapping[str, Any], got_message: Mapping[str, Any] | None
) -> bool:
    """True when `got_message` is a correct answer given the correct `expected_message` (see module doc)."""
    return comparator_fn(comparator_of(task_or_comparator))(expected_message, got_message)


__all__ = [
    "DESCRIPTIONS",
    "TASKS",
    "WORKLOADS",
    "Example",
    "Intent",
    "TaskDescription",
    "TaskSpec",
    "Workload",
    "comparator_of",
    "compare",
    "detect_task",
    "get_workload",
    "json_equal",
    "solve",
    "validate",
]
