"""The effect gate as one caller sees it: the tenancy every door applies (REST routes and MCP tools alike).

A door authenticates its caller (a client name from ``RATCHET_API_KEYS``, or :data:`ADMIN`), builds a
:class:`CallerGate` and calls one method per operation with the operation's request model
(``ratchet_assets.effects.models``). Each method names the caller's types in its namespace, settles only its own
effects, shows only its own spend, and raises :class:`ApiError` (an HTTP status and OpenAI's error fields) for
anything the caller can fix; :func:`api_error` maps the ledger's own errors the same way for every door. So
``POST /effects/begin`` and the MCP tool ``begin_effect`` decide the same, by construction (ARCHITECTURE.md,
"Effects").
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from ratchet_assets.effects.ledger import EffectLedger
from ratchet_assets.effects.models import (
    BeginAnswer,
    BeginBody,
    EffectRef,
    ErrorBody,
    ErrorDetail,
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
from ratchet_assets.effects.records import EffectError, EffectRecord, ForeignType, StaleToken
from ratchet_assets.effects.tenancy import (
    ALL_TYPES,
    check_effect_type,
    client_cap_type,
    client_effect_type,
    namespace_of,
)
from ratchet_core import names
from ratchet_core.api_keys import KeyStore

ADMIN = ""  # the admin caller; no client can be named "" (name:secret needs a name)
MAX_BODY_BYTES = 64 * 1024  # a request body (REST) or a tool call's arguments (MCP)
# HTTP status -> OpenAI's error type
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
}


def key_store(clients: list[tuple[str, str]], admin_key: str) -> KeyStore:
    """The keys every door authenticates: each client's by its name, the admin key as :data:`ADMIN`.

    The admin key last: a client secret equal to it still authenticates as the admin."""
    return KeyStore([*clients, (ADMIN, admin_key)] if admin_key else clients, secrets.token_bytes(32))


def error_body(status: int, message: str, code: str, param: str | None = None) -> ErrorBody:
    """OpenAI's error document: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return ErrorBody(error=ErrorDetail(message=message, type=kind, param=param, code=code))


class ApiError(Exception):
    """An error the caller can fix: the HTTP status a REST door answers with, and OpenAI's error fields."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> ErrorBody:
        return error_body(self.status, self.message, self.code, self.param)


def api_error(exc: EffectError) -> ApiError:
    """The ledger's refusal as every door answers it: a token that holds nothing of the caller's is 409."""
    if isinstance(exc, StaleToken):
        return ApiError(409, str(exc), "stale_token", "token")
    return ApiError(400, str(exc), exc.code, exc.param)


def invalid_request(errors: Sequence[Mapping[str, Any]]) -> ApiError:
    """A validation failure as a 400 that names the fields: pydantic's errors, each ``loc`` relative to the
    request (no ``body``/``query`` prefix)."""

    def where(err: Mapping[str, Any]) -> str:
        return ".".join(str(p) for p in err.get("loc", ())) or "body"

    parts = [f"{where(e)}: {e.get('msg', 'invalid')}" for e in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    message = "invalid request: " + "; ".join(parts) + more + ". Fix these fields and retry."
    return ApiError(400, message, "invalid_request", where(errors[0]) if errors else None)


def non_finite(value: Any) -> str | None:
    """Why a parsed JSON value is refused (a number that is not finite: ``1e999`` parses as infinity), or None."""
    stack = [value]
    while stack:  # iterative: a deeply nested value cannot exhaust the stack
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "the request holds a number too large for a float; send finite numbers"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


class CallerGate:
    """The ledger's operations for one authenticated caller (a client's name, or :data:`ADMIN`)."""

    def __init__(self, ledger: EffectLedger, caller: str) -> None:
        self.ledger, self.caller = ledger, caller

    @property
    def is_admin(self) -> bool:
        return self.caller == ADMIN

    def require_admin(self, what: str) -> None:
        if not self.is_admin:
            raise ApiError(
                403, f"{what} needs the admin key (RATCHET_ADMIN_KEY), not a client key", "forbidden"
            )

    def _namespace(self) -> str | None:
        """The caller's namespace (None: the admin, who names every type in full)."""
        return None if self.is_admin else self.caller

    def effect_type(self, name: str, rules_target: bool = False) -> str:
        """The effect type the caller means by `name`: a client's own ``<client>/<name>``, the admin's as given
        (both by the one name rule; a ``rules_target`` may be a client's ``<client>/*``)."""
        try:
            if self.is_admin:
                return check_effect_type(name, rules_target=rules_target)
            return client_effect_type(self.caller, name)
        except ForeignType as exc:
            raise ApiError(403, str(exc), "forbidden_effect_type", "effect_type") from None
        except EffectError as exc:
            raise ApiError(400, str(exc), "invalid_effect_type", "effect_type") from None

    def _spend(self, effect_type: str) -> SpendView:
        return SpendView(**self.ledger.spend(effect_type))

    # One method per operation ----------------------------------------------------------------------------
    def begin(self, body: BeginBody) -> BeginAnswer:
        """Ask before acting; act only on ``execute`` (then report or fail with its token)."""
        effect_type = self.effect_type(body.effect_type)
        if self.ledger.rules(effect_type).policy == "probe":
            raise ApiError(
                400, f"{effect_type} has policy 'probe', which only in-process callers can use", "probe"
            )
        decided = self.ledger.begin(
            effect_type,
            body.key,
            body.fingerprint,
            lease_seconds=body.lease_seconds,
            cost_usd=body.cost_usd,
            summary=body.summary,
            requested_by=self.caller or "admin",
        )
        return BeginAnswer(**decided.to_dict(), effect_type=effect_type, key=body.key)

    def report(self, body: ReportBody) -> Finished:
        self.ledger.report(body.token, body.result, cost_usd=body.cost_usd, namespace=self._namespace())
        return Finished(status="done")

    def fail(self, body: FailBody) -> Finished:
        self.ledger.fail(body.token, body.error, cost_usd=body.cost_usd, namespace=self._namespace())
        return Finished(status="failed")

    def resolve(self, body: ResolveBody) -> EffectRecord | Forgotten:
        self.require_admin("resolve")
        record = self.ledger.resolve(
            body.effect_type, body.key, body.resolution, body.reason, force=body.force
        )
        return Forgotten(effect_type=body.effect_type, key=body.key) if record is None else record

    def list(self, query: ListQuery) -> list[EffectRecord]:
        return self.ledger.list_effects(
            effect_type=self.effect_type(query.effect_type) if query.effect_type else None,
            status=query.status,
            limit=query.limit,
            namespace=self._namespace(),
        )

    def get(self, ref: EffectRef) -> EffectRecord:
        record = self.ledger.lookup(self.effect_type(ref.effect_type), ref.key)
        if record is None:
            raise ApiError(
                404,
                f"no effect {ref.effect_type} {ref.key[:80]!r}; list yours with GET /effects (the list_effects tool)",
                "not_found",
            )
        return record

    def rules(self, ref: TypeRef) -> RulesView:
        """The type's rules and its spend in the current window; for a client's type also the client's own cap
        (``client_spend``). A client reads only its own types (``*``: its own cap)."""
        if not self.is_admin and ref.effect_type in (ALL_TYPES, client_cap_type(self.caller)):
            full = client_cap_type(self.caller)
        else:
            full = self.effect_type(ref.effect_type, rules_target=True)
        client = namespace_of(full)
        whole = client_cap_type(client) if client is not None else None
        return RulesView(
            **self.ledger.rules(full).to_dict(),
            spend=self._spend(full),
            client_spend=self._spend(whole) if whole is not None and whole != full else None,
        )

    def usage(self, query: UsageQuery) -> SpendView:
        """The client's spend in its own cap's current window (over all its types), the cap and what remains."""
        client = query.client
        if not self.is_admin:
            if client not in (None, self.caller):
                raise ApiError(
                    403, "a client reads only its own usage: leave `client` out", "forbidden", "client"
                )
            client = self.caller
        elif client is None:
            raise ApiError(
                400, "name the client whose usage to read: client=<name>", "missing_client", "client"
            )
        try:
            names.check("client", client, "client")
        except names.NameRuleError as exc:
            raise ApiError(400, exc.message, "invalid_client", "client") from None
        return self._spend(client_cap_type(client))
