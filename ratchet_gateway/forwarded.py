"""What of a client's body reaches a provider (ARCHITECTURE.md, "What reaches a provider"; the allow-lists are
``ratchet_core.provider_fields``).

- :func:`refuse_unknown`: a top-level field outside its API's allow-list and the operator's extras
  (``RATCHET_PROVIDER_EXTRA_FIELDS``) is a 400 naming it (``param``), as OpenAI answers an unknown argument, before
  anything else happens to the request;
- :func:`upstream_body` (the gateway's own HTTP client) and :func:`litellm_args` (litellm's keyword arguments)
  build what is sent from the allow-list again, whatever the body holds by then: the endpoint, the key, the
  provider, the timeout and the retries are the operator's (``ratchet_gateway.upstream``), and litellm never gets
  ``metadata`` (its callbacks' metadata, not the model's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ratchet_core.names import shown
from ratchet_core.provider_fields import CHAT_FIELDS, CHAT_ONLY_VALUE, EMBEDDINGS_FIELDS, LITELLM_OWN
from ratchet_gateway.errors import GatewayError

__all__ = [
    "CHAT_FIELDS",
    "EMBEDDINGS_FIELDS",
    "litellm_args",
    "refuse_tier",
    "refuse_unknown",
    "shown_name",
    "unknown_field",
    "upstream_body",
]

_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
EXTRAS_HELP = "the operator can name provider-specific fields in RATCHET_PROVIDER_EXTRA_FIELDS"


def shown_name(name: str) -> str:
    """A client's key as an error names it: as sent when plain (``A-Za-z0-9_.-``, at most 64), else a short escaped
    preview (a 5,000-character key, control or bidi characters are never echoed as they are)."""
    return name if _PLAIN.fullmatch(name) else shown(name)


def unknown_field(name: str, api: str, where: str = "") -> GatewayError:
    """The 400 for a field `name` the API `api` does not take (`where`: the object it is in, '' at the top)."""
    param = (where + "." if where else "") + shown_name(name)
    return GatewayError(
        400,
        f"{param}: unknown parameter; {api} requests here take only the fields the API documents and this "
        f'gateway forwards (README: "What a client can and cannot send"). Leave it out ({EXTRAS_HELP})',
        "unknown_parameter",
        param=param,
    )


def refuse_unknown(
    body: Mapping[str, Any], allowed: frozenset[str], extras: frozenset[str], api: str
) -> None:
    """A 400 naming the first top-level field of `body` that is neither in `allowed` nor in `extras`."""
    for name in body:
        if name not in allowed and name not in extras:
            if name in CHAT_ONLY_VALUE and allowed is CHAT_FIELDS:
                if body[name] is CHAT_ONLY_VALUE[name] or body[name] is None:
                    continue
                raise GatewayError(
                    400,
                    f"{name}: only {str(CHAT_ONLY_VALUE[name]).lower()} is accepted: this gateway keeps nothing on "
                    "the provider's side; leave it out",
                    "unsupported_parameter",
                    param=name,
                )
            raise unknown_field(name, api)


STANDARD_TIERS = frozenset(
    {"auto", "default"}
)  # OpenAI's service tiers billed at the model's standard prices


def refuse_tier(body: Mapping[str, Any], allowed: frozenset[str]) -> None:
    """A 400 for a ``service_tier`` other than ``auto``/``default`` (or absent) that the operator did not allow
    (`allowed`: ``RATCHET_SERVICE_TIERS``): the ledger, budgets and receipts price a request at the model's
    standard prices, so a client must not pick a pricier tier billed at those (README: "What a client can and
    cannot send")."""
    tier = body.get("service_tier")
    if tier is None or (isinstance(tier, str) and (tier in STANDARD_TIERS or tier in allowed)):
        return
    also = ", ".join(f"'{t}'" for t in sorted(allowed))
    raise GatewayError(
        400,
        f"service_tier: {shown(tier)} is not accepted here: send 'auto' or 'default'{', ' + also if also else ''}"
        " or leave it out (requests are billed at the model's standard prices; the operator can allow other "
        "tiers in RATCHET_SERVICE_TIERS)",
        "unsupported_parameter",
        param="service_tier",
    )


def upstream_body(body: Mapping[str, Any], allowed: frozenset[str], extras: frozenset[str]) -> dict[str, Any]:
    """The body the gateway's own HTTP client sends: the allow-listed fields of `body` and the extras."""
    return {k: v for k, v in body.items() if k in allowed or k in extras}


# a message's keys that reach litellm (OpenAI's); litellm reads others as a provider's blocks: an assistant
# message's ``provider_specific_fields`` (raw blocks put before its content, a tool call's signature),
# ``thinking_blocks``, ``cache_control``. Content parts and tools are closed by the request model.
_MESSAGE_KEYS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "refusal"}
)


def _call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    out = {k: v for k, v in call.items() if k in ("id", "type", "function")}
    if isinstance(out.get("function"), dict):
        out["function"] = {k: v for k, v in out["function"].items() if k in ("name", "arguments")}
    return out


def _message(m: Any) -> Any:
    if not isinstance(m, dict):
        return m
    out = {k: v for k, v in m.items() if k in _MESSAGE_KEYS}
    if isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [_call(c) for c in out["tool_calls"]]
    if isinstance(out.get("function_call"), dict):
        out["function_call"] = {k: v for k, v in out["function_call"].items() if k in ("name", "arguments")}
    return out


def litellm_args(body: Mapping[str, Any], allowed: frozenset[str], extras: frozenset[str]) -> dict[str, Any]:
    """litellm's keyword arguments for `body`: OpenAI's field names are litellm's argument names; the model, the
    stream flag and the input are passed by the caller, ``metadata`` never (litellm's callback metadata); each
    message with OpenAI's keys only (a new list: `body` is left as sent, for the ledger)."""
    args = {k: v for k, v in body.items() if (k in allowed or k in extras) and k not in LITELLM_OWN}
    if isinstance(args.get("messages"), list):
        args["messages"] = [_message(m) for m in args["messages"]]
    return args
