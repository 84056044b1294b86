"""What the teacher would have billed for a request, recorded on its ledger row (the receipt's inputs).

- A teacher-served row: ``teacher_prompt_tokens`` = the teacher's own reported prompt tokens, and
  ``teacher_cost_usd`` what it billed (set by the chat route). Its completion tokens feed this replica's running
  per-task mean, as do audit pairs (the teacher's off-path answers to student-served requests).
- A student-served row: ``teacher_prompt_tokens`` = the prompt counted with the teacher's tokenizer
  (``ratchet_core.pricing.prompt_tokens``: ``litellm.token_counter`` for the teacher model, on the prompt as the
  client sent it), and ``teacher_cost_usd`` a live estimate = that prompt plus this replica's mean teacher
  completion for the task so far (0 completion tokens before any teacher answer). The signed receipt does not
  trust that estimate: it recomputes every student-served row from ``teacher_prompt_tokens`` and the day's teacher
  answers (``ratchet_stats.teacher_equivalent``). The student's own token counts never price anything.

Counting costs ~0.3 ms of CPU per prompt (tiktoken), so it starts in a worker thread as soon as a request is sent
to the student and is collected when the row is committed: it runs while the student answers, off the critical
path. A request the student does not end up serving never waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ratchet_core import pricing

log = logging.getLogger("ratchet.gateway")


class TeacherEquivalent:
    """The teacher's tokenizer and prices for one gateway, and its per-task completion means."""

    def __init__(self, model: str, prices: pricing.Prices) -> None:
        self.model = model
        self.prices = prices
        self._answers: dict[str, tuple[int, int]] = {}  # task -> (teacher answers, completion tokens)

    @classmethod
    async def create(cls, model: str, prices: pricing.Prices) -> TeacherEquivalent:
        """One with its tokenizer loaded (the first count of a process takes ~1 s)."""
        await asyncio.to_thread(pricing.warm_up, model)
        return cls(model, prices)

    def count(self, body: Mapping[str, Any]) -> int:
        """The prompt of a chat body as the teacher bills it (0, logged, if it cannot be counted)."""
        try:
            messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
            tools = body.get("tools") if isinstance(body.get("tools"), list) else None
            rf = body.get("response_format") if isinstance(body.get("response_format"), Mapping) else None
            return pricing.prompt_tokens(self.model, messages, tools, rf)
        except Exception as exc:  # a prompt litellm cannot count must not fail the request
            log.warning(
                "cannot count the prompt with %s's tokenizer (%s)", self.model, exc.__class__.__name__
            )
            return 0

    def counted_usage(self, body: Mapping[str, Any], message: Mapping[str, Any]) -> dict[str, int]:
        """A ``usage`` object for an answer its model reported none for (a stream abandoned or broken before
        its usage chunk): the prompt of `body` and the text of `message` (content, tool-call names and arguments)
        as the teacher's tokenizer counts them. CPU-bound: call it in a worker thread."""
        prompt = self.count(body)
        parts = [message.get("content") or ""]
        for call in message.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                parts += [str(fn.get("name") or ""), str(fn.get("arguments") or "")]
        try:
            completion = pricing.text_tokens(self.model, "".join(p for p in parts if isinstance(p, str)))
        except Exception as exc:  # an answer litellm cannot count must not lose the prompt's count
            log.warning("cannot count an answer with %s's tokenizer (%s)", self.model, exc.__class__.__name__)
            completion = 0
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def start_count(self, body: Mapping[str, Any]) -> asyncio.Future[int]:
        """Count `body`'s prompt in a worker thread; collected by :meth:`settle`."""
        return asyncio.ensure_future(asyncio.to_thread(self.count, body))

    def observe(self, row: dict[str, Any]) -> None:
        """A row the teacher answered (request or audit pair): its own prompt count, and its completion for the
        task's mean."""
        row["teacher_prompt_tokens"] = int(row.get("prompt_tokens") or 0)
        completion = int(row.get("completion_tokens") or 0)
        if row.get("status_code") == 200 and completion > 0:
            k, c = self._answers.get(row["task"], (0, 0))
            self._answers[row["task"]] = (k + 1, c + completion)

    def mean_completion(self, task: str) -> float:
        k, c = self._answers.get(task, (0, 0))
        return c / k if k else 0.0

    async def settle(self, row: dict[str, Any], counting: asyncio.Future[int] | None) -> None:
        """Fill a request row's teacher-equivalent columns before it is committed (module docstring)."""
        if row.get("served_by") != "student":
            if row.get("status_code") == 200:
                self.observe(row)
            return
        tokens = await counting if counting is not None else 0
        row["teacher_prompt_tokens"] = tokens
        ok = row.get("status_code") == 200
        row["teacher_cost_usd"] = (
            self.prices.cost(tokens, 0) + self.mean_completion(row["task"]) * self.prices.output_per_token
            if ok
            else 0.0
        )
