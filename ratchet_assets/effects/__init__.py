"""The effect gate: every irreversible effect happens at most once per content-derived key (ARCHITECTURE.md, "Effects").

Import it from here only: ``from ratchet_assets.effects import EffectLedger``. The modules of this package are its
private parts (the layer check, ``tests/layers.py``, fails any import of them from outside the package):

- ``ledger``: :class:`EffectLedger`, the state machine (begin / report / fail / resolve) in the control DB;
- ``records``: what the ledger answers and stores (:class:`Begin`, :class:`EffectRecord`, :class:`Rules`,
  :class:`Approval`), its errors and the built-in types' policies;
- ``tenancy``: a client's namespace ``<client>/`` (:func:`client_effect_type`, :func:`client_cap_type`);
- ``rules``: the gate's checks before an ``execute`` (approval, max_attempts, spend caps) and the spend sums;
- ``models``, ``caller``, ``api``, ``tools``, ``mcp_door``, ``manifest``: the doors (HTTP, MCP, manifest) and
  the tenancy every door applies (:class:`CallerGate`).

The ledger's names load with the package; the doors (FastAPI, the MCP SDK) load when one of their names is first
read (:func:`create_app`, :func:`serve_stdio`...), so the night and the admin CLI never import a web stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ratchet_assets.effects.ledger import EffectLedger, effects_table
from ratchet_assets.effects.records import (
    DEFAULT_POLICIES,
    RESOLUTIONS,
    STATUSES,
    Approval,
    Begin,
    EffectError,
    EffectRecord,
    ForeignType,
    IndeterminateAction,
    Outcome,
    Rules,
    StaleToken,
)
from ratchet_assets.effects.tenancy import (
    ALL_TYPES,
    EFFECT_NAME,
    MAX_TYPE_LENGTH,
    NAMESPACE_SEP,
    client_cap_type,
    client_effect_type,
    namespace_of,
)

if TYPE_CHECKING:
    from ratchet_assets.effects.api import app_from_settings, create_app
    from ratchet_assets.effects.caller import ADMIN, MAX_BODY_BYTES, ApiError, CallerGate, key_store
    from ratchet_assets.effects.manifest import agent_manifest, llms_txt
    from ratchet_assets.effects.mcp_door import McpHttpDoor, serve_stdio, stdio_caller
    from ratchet_assets.effects.tools import TOOLS, TOOLS_BY_NAME, GateTool

# The doors' names, loaded on first use: name -> the module of this package that defines it.
_DOORS = {
    "create_app": "api",
    "app_from_settings": "api",
    "ADMIN": "caller",
    "MAX_BODY_BYTES": "caller",
    "ApiError": "caller",
    "CallerGate": "caller",
    "key_store": "caller",
    "agent_manifest": "manifest",
    "llms_txt": "manifest",
    "McpHttpDoor": "mcp_door",
    "serve_stdio": "mcp_door",
    "stdio_caller": "mcp_door",
    "TOOLS": "tools",
    "TOOLS_BY_NAME": "tools",
    "GateTool": "tools",
}


def __getattr__(name: str) -> Any:
    if (module := _DOORS.get(name)) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = [
    "ALL_TYPES",
    "DEFAULT_POLICIES",
    "EFFECT_NAME",
    "MAX_TYPE_LENGTH",
    "NAMESPACE_SEP",
    "RESOLUTIONS",
    "STATUSES",
    "Approval",
    "Begin",
    "EffectError",
    "EffectLedger",
    "EffectRecord",
    "ForeignType",
    "IndeterminateAction",
    "Outcome",
    "Rules",
    "StaleToken",
    "client_cap_type",
    "client_effect_type",
    "effects_table",
    "namespace_of",
    # the doors, loaded on first use (_DOORS)
    "ADMIN",
    "MAX_BODY_BYTES",
    "TOOLS",
    "TOOLS_BY_NAME",
    "ApiError",
    "CallerGate",
    "GateTool",
    "McpHttpDoor",
    "agent_manifest",
    "app_from_settings",
    "create_app",
    "key_store",
    "llms_txt",
    "serve_stdio",
    "stdio_caller",
]
