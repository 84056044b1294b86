"""Which request fields may reach a model provider: the allow-lists the gateway forwards by, and the rule for the
provider-specific extras an operator names in ``RATCHET_PROVIDER_EXTRA_FIELDS`` (ARCHITECTURE.md, "What reaches a
provider").

A client field reaches the teacher, the student or the embedding model only when its API's allow-list holds it:
the parameters OpenAI documents for chat completions (:data:`CHAT_FIELDS`) and embeddings
(:data:`EMBEDDINGS_FIELDS`), sent as they are on the gateway's own HTTP client and as litellm's arguments of the
same name on litellm's path (litellm takes OpenAI's names). Responses and Messages bodies are translated field by
field into a chat body (``ratchet_gateway.apis``), so only what the translation writes goes on. Everything else is a
400 that names the field: above all litellm's own arguments (``api_base``, ``base_url``, ``api_key``,
``custom_llm_provider``, ``extra_headers``, ``mock_response``, ``num_retries``, ``fallbacks``, ``timeout``...),
which would let a client choose where the teacher is called with the operator's key, or write the teacher's answer
itself.

Shared by the settings check (``ratchet_core.settings``: a bad extra is a configuration error ``ratchet config
check`` reports) and the gateway (``ratchet_gateway.forwarded``).
"""

from __future__ import annotations

import re

# OpenAI's chat completions parameters, forwarded. Not here: `audio` and `modalities` (an audio answer cannot be
# relayed, checked or stored), `web_search_options` (a search the provider runs and bills: the gateway serves no
# built-in tools, as on the Responses API) and `store` (accepted only as false: the operator's account keeps nothing a tenant
# sends). `metadata` reaches the gateway's own HTTP client only (OpenAI's
# field); litellm reads a `metadata` argument as its callbacks' metadata, so it never reaches litellm.
CHAT_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "n",
        "stop",
        "max_tokens",
        "max_completion_tokens",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "seed",
        "user",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "reasoning_effort",
        "verbosity",
        "prediction",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "metadata",
    }
)
# accepted on chat completions with only this value, and never forwarded
CHAT_ONLY_VALUE = {"store": False}
# OpenAI's embeddings parameters, forwarded
EMBEDDINGS_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
# the fields the gateway passes to litellm itself (never from the body as they are)
LITELLM_OWN = frozenset({"model", "stream", "input", "metadata"})

EXTRA_FIELD_PATTERN = r"[a-z][a-z0-9_]{0,63}"
# names no extra may have, whatever litellm's version knows: endpoints, credentials, providers, headers, mocked
# answers, callbacks, retries, prices, the account or region billed, a body of further fields (extra_body)
_NEVER = re.compile(
    r"(^|_)(api|base|url|key|secret|password|headers?|provider|credentials?|mock|callbacks?|retries|fallbacks|"
    r"timeout|litellm|cost|proxy|deployment|extra|aws|azure|vertex|gcp|region|project|location|organization|"
    r"tenant|account)($|_)"
)
_EXTRA = re.compile(EXTRA_FIELD_PATTERN)


def _litellm_names() -> frozenset[str]:
    """Every argument name litellm itself interprets (its params list and its call signatures)."""
    import inspect

    import litellm
    from litellm.types.utils import all_litellm_params

    names = set(all_litellm_params)
    for fn in (litellm.acompletion, litellm.aembedding, litellm.completion, litellm.embedding):
        names.update(inspect.signature(fn).parameters)
    return frozenset(names)


def extra_field_problem(name: str) -> str | None:
    """Why `name` cannot be a provider extra (``RATCHET_PROVIDER_EXTRA_FIELDS``), or None when it can."""
    if not _EXTRA.fullmatch(name):
        return f"{name!r} is not a field name ({EXTRA_FIELD_PATTERN})"
    if name in CHAT_FIELDS or name in EMBEDDINGS_FIELDS or name in CHAT_ONLY_VALUE:
        return f"{name!r} is one of OpenAI's own fields, which the gateway checks and forwards itself"
    if _NEVER.search(name) or name in _litellm_names():
        return (
            f"{name!r} would choose where or how the model is called (an endpoint, a credential, a provider, "
            "headers, a mocked answer, callbacks, retries or prices: litellm reads it as its own argument)"
        )
    return None


def parse_extra_fields(value: str) -> frozenset[str]:
    """The names in a comma-separated ``RATCHET_PROVIDER_EXTRA_FIELDS`` (blanks ignored); ValueError naming every
    refused one."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    problems = [p for p in map(extra_field_problem, names) if p]
    if problems:
        raise ValueError("; ".join(problems))
    return frozenset(names)
