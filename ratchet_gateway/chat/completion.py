"""Reading a chat completion (an upstream's answer, or one rebuilt from a stream) as the pipeline needs it: the
message of choice 0, the token counts, the answer's confidence. Upstream answers are checked before they get here
(``ratchet_gateway.upstream.check_completion``), so these only fill in what is absent."""

from __future__ import annotations

from ratchet_core.confidence import answer_confidence


def message_of(resp: dict) -> tuple[dict, str, dict]:
    """(assistant message, finish_reason, usage) of choice 0."""
    choices = resp.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    msg = choice.get("message") or {}
    return msg, str(choice.get("finish_reason") or ""), resp.get("usage") or {}


def token_counts(usage: dict) -> tuple[int, int, int, int]:
    """(prompt, completion, reasoning, total) tokens of a ``usage`` object (total: prompt + completion if absent)."""
    p = int(usage.get("prompt_tokens") or 0)
    c = int(usage.get("completion_tokens") or 0)
    details = usage.get("completion_tokens_details") or {}
    r = int(details.get("reasoning_tokens") or 0) if isinstance(details, dict) else 0
    return p, c, r, int(usage.get("total_tokens") or p + c)


def reported(usage: dict | None) -> bool:
    """Whether a ``usage`` object reports anything (an upstream that sends none, or only zeros, did not)."""
    return bool(usage) and any(usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))


def confidence(resp: dict) -> float:
    """The answer's confidence from choice 0's token logprobs (``ratchet_core.confidence.answer_confidence``)."""
    choices = resp.get("choices") or [{}]
    lp = (choices[0] or {}).get("logprobs") or {}
    content = lp.get("content") or []
    return answer_confidence([float(t.get("logprob", 0.0)) for t in content if isinstance(t, dict)])
