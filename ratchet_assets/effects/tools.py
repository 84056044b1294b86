"""What the effect gate offers agents: its tools, what it does and deliberately does not do, and its limits.

One table, :data:`TOOLS`, is the source of truth that the MCP server (``ratchet_assets.effects.mcp_door``), the agent
manifest and ``/llms.txt`` (``ratchet_assets.effects.manifest``) are built from. Each tool maps one to one onto a
REST route of ``ratchet effects serve``: its arguments are that route's request model and its answer that route's
answer model (``ratchet_assets.effects.models``, the models ``/openapi.json`` documents), and it runs the same
:class:`~ratchet_assets.effects.caller.CallerGate` method, so tenancy and decisions are the REST API's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel, TypeAdapter, ValidationError

from ratchet_assets.effects.caller import (
    MAX_BODY_BYTES,
    ApiError,
    CallerGate,
    api_error,
    invalid_request,
    non_finite,
)
from ratchet_assets.effects.models import (
    BeginAnswer,
    BeginBody,
    EffectList,
    EffectRef,
    FailBody,
    Finished,
    Forgotten,
    ListQuery,
    ReportBody,
    ResolveBody,
    RulesView,
    SpendView,
    TypeRef,
    UsageQuery,
)
from ratchet_assets.effects.records import EffectError, EffectRecord, Outcome

log = logging.getLogger(__name__)

NAME = "ratchet-effect-gate"
TITLE = "Ratchet effect gate"
SUMMARY = (
    "Ask before an irreversible action: the gate records it under a key derived from its content, answers "
    "execute at most once per key and payload, hands the stored result to a retry, checks approvals, attempts "
    "and spend caps, and never performs the action itself."
)
DOES = (
    "records an irreversible action (sending, filing, paying, deploying) before the agent takes it, under a key "
    "derived from the action's content and a fingerprint of its payload",
    "answers execute at most once per key and fingerprint; a retry after the action was reported gets duplicate "
    "with the stored result, so a retried agent never acts twice",
    "checks, in the same transaction, each effect type's rules: approval by an operator, a maximum number of "
    "attempts, a spend cap per time window, and the client's own cap over all its types",
    "keeps each client in its own namespace (`<client>/<type>`): a client sees, settles and spends against only "
    "its own effects",
)
DOES_NOT = (
    "perform the action: the agent does, and only after an execute",
    "see the action's payload: it stores the key, the payload's fingerprint, the summary the agent sends and the "
    "result the agent reports",
    "retry or undo an action: a failed effect runs again only when the agent begins it again and its rules allow",
    "grant approvals: an operator does, with the admin key (`POST /approvals/grant`, `ratchet admin approve`)",
    "move money: spend caps count the costs callers declare (an estimate at begin, the actual cost at report)",
)
OUTCOMES: dict[str, str] = {
    "execute": "act now, once; then report_effect (it happened) or fail_effect (it did not) with the token, "
    "before lease_seconds pass",
    "duplicate": "it already happened: do not act; use `result`, the stored outcome",
    "in_flight": "someone holds it now: do not act; ask again later",
    "awaiting_approval": "an operator must approve it first: do not act; ask again later",
    "blocked": "it failed or was attempted too often and an operator must resolve it: do not act",
    "denied": "do not act: another payload under this key, a denied approval, or over a spend cap (`detail`, "
    "`remaining_usd`)",
}
assert set(OUTCOMES) == set(get_args(Outcome)), "every outcome of begin is explained to agents"
AUTH = {
    "scheme": "bearer",
    "header": "Authorization: Bearer <key>",
    "client_key": "a client's key from RATCHET_API_KEYS: its own effect types, effects and spend",
    "admin_key": "RATCHET_ADMIN_KEY: every type named in full, resolve, approvals and rules",
    "stdio": "`ratchet effects mcp` acts as the key in RATCHET_EFFECTS_API_KEY (or --api-key)",
}
LIMITS = {
    "max_body_bytes": MAX_BODY_BYTES,
    "json": "strict: no NaN or Infinity, no number too large for a float",
    "cost_usd": "a finite number >= 0; required where a spend cap is set",
    "effect_type": "1-64 characters with the `<client>/` prefix, of A-Z a-z 0-9 . _ -",
    "key": "1-400 characters, derived from the action's content (never a run id)",
    "fingerprint": "1-128 characters, a hash of the payload",
    "lease_seconds": "at most 86400 (default 600)",
    "list_limit": 1000,
    "errors": 'OpenAI\'s shape {"error": {"message", "type", "param", "code"}}, as a tool error over MCP',
}


def _schema(kind: Any, mode: str) -> dict[str, Any]:
    """`kind`'s JSON schema (pydantic's, as ``/openapi.json`` holds it); a union answer is still an object."""
    schema = TypeAdapter(kind).json_schema(mode=mode)  # type: ignore[arg-type]
    schema.setdefault("type", "object")  # MCP wants an object at a tool schema's root
    return schema


@dataclass(frozen=True)
class GateTool:
    """One MCP tool: the REST route it maps onto, its request model and answer type, and the gate's method."""

    name: str
    title: str
    route: str  # "METHOD /path" of ``ratchet effects serve``
    description: str
    arguments: type[BaseModel]
    answer: Any
    run: Callable[[CallerGate, Any], Any]
    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False  # may delete or overwrite a record (resolve: forget, or done -> failed)
    admin_only: bool = False

    def input_schema(self) -> dict[str, Any]:
        return _schema(self.arguments, "validation")

    def output_schema(self) -> dict[str, Any]:
        return _schema(self.answer, "serialization")

    def call(self, gate: CallerGate, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run the tool as `gate`'s caller: the REST door's limits and validation, then the gate's method; the
        answer as JSON-ready data. Raises :class:`ApiError` for what the caller can fix."""
        if len(json.dumps(arguments, default=str)) > MAX_BODY_BYTES:
            message = (
                f"the arguments are larger than {MAX_BODY_BYTES} bytes; send a smaller result or summary"
            )
            raise ApiError(413, message, "body_too_large")
        if (problem := non_finite(arguments)) is not None:
            raise ApiError(400, problem, "invalid_json")
        try:
            request = self.arguments.model_validate(arguments)
        except ValidationError as exc:
            raise invalid_request(exc.errors()) from None
        try:
            answer = self.run(gate, request)
        except EffectError as exc:
            raise api_error(exc) from None
        return TypeAdapter(self.answer).dump_python(answer, mode="json")


_OUTCOME_LINES = "; ".join(f"{name}: {meaning}" for name, meaning in OUTCOMES.items())
TOOLS: tuple[GateTool, ...] = (
    GateTool(
        "begin_effect",
        "Ask before an irreversible action",
        "POST /effects/begin",
        "Ask the gate before an irreversible action (sending, filing, paying, deploying) and act only if "
        f"`outcome` is execute. Outcomes: {_OUTCOME_LINES}. `effect_type` is your own name for the kind of "
        "action (stored as `<client>/<name>`); `key` identifies the action by its content (e.g. a hash of the "
        "recipient and subject), `fingerprint` the exact payload: asking again with both is safe and answers "
        "duplicate once it happened. Send `cost_usd` where a spend cap is set. The gate never performs the action.",
        BeginBody,
        BeginAnswer,
        CallerGate.begin,
        idempotent=True,
    ),
    GateTool(
        "report_effect",
        "Report that the action happened",
        "POST /effects/report",
        "The action you began (the `token` of begin_effect's execute) happened. `result` (a JSON object, e.g. the "
        "id of what was created) is stored and given to every later begin_effect of the same key and "
        "fingerprint as duplicate; `cost_usd` is what it actually cost.",
        ReportBody,
        Finished,
        CallerGate.report,
    ),
    GateTool(
        "fail_effect",
        "Report that the action did not happen",
        "POST /effects/fail",
        "The action you began (the `token` of begin_effect's execute) did not happen; `error` says why. It may be "
        "begun again as its type's rules allow. `cost_usd` is what was spent anyway (0 releases the reservation).",
        FailBody,
        Finished,
        CallerGate.fail,
    ),
    GateTool(
        "get_effect",
        "Read one effect",
        "GET /effects/{effect_type}/{key}",
        "One of your effects by type and key: its status (in_flight, done, failed, indeterminate), attempts, "
        "stored result or error.",
        EffectRef,
        EffectRecord,
        CallerGate.get,
        read_only=True,
        idempotent=True,
    ),
    GateTool(
        "list_effects",
        "List effects",
        "GET /effects",
        "Your effects, newest first, optionally only of one type or in one state.",
        ListQuery,
        EffectList,
        lambda gate, query: EffectList(effects=gate.list(query)),
        read_only=True,
        idempotent=True,
    ),
    GateTool(
        "get_policy",
        "Read an effect type's rules",
        "GET /rules/{effect_type}",
        "The rules of one of your effect types (approval required, max attempts, spend cap per window, what "
        "happens when a lease lapses: block or retry) and its spend in the current window, with your own cap "
        "over all your types (`client_spend`); `*` reads your own cap.",
        TypeRef,
        RulesView,
        CallerGate.rules,
        read_only=True,
        idempotent=True,
    ),
    GateTool(
        "get_usage",
        "Read your spend against your cap",
        "GET /usage",
        "Your spend over all your effect types in your cap's current window: cap_usd, window_seconds, used_usd "
        "(reserved and spent) and remaining_usd (null: no cap).",
        UsageQuery,
        SpendView,
        CallerGate.usage,
        read_only=True,
        idempotent=True,
    ),
    GateTool(
        "resolve_effect",
        "Resolve a stuck effect (admin)",
        "POST /effects/resolve",
        "Admin key only: an operator's decision on a stuck effect (done, failed or forget), with the reason; "
        "types are named in full (`<client>/<name>`). A client key is refused.",
        ResolveBody,
        EffectRecord | Forgotten,
        CallerGate.resolve,
        destructive=True,
        admin_only=True,
    ),
)
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
INSTRUCTIONS = "\n".join(  # what an MCP client shows its model about the server as a whole
    [
        SUMMARY,
        "The gate: " + "; ".join(DOES) + ".",
        "It does not: " + "; ".join(DOES_NOT) + ".",
        "Before an irreversible action call begin_effect and act only on `execute`; then report_effect or "
        f"fail_effect with its token. Outcomes: {_OUTCOME_LINES}.",
    ]
)
