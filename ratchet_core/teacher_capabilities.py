"""What a teacher was found to support: ``$RATCHET_HOME/teacher.json``, written by ``ratchet doctor teacher --apply``.

One entry per teacher, keyed by its litellm model name and API base (another model or another provider is
another teacher, and inherits nothing). An entry holds how the gateway sends a ``json_schema`` request to that
teacher (:data:`JSON_SCHEMA_MODES`):

- ``strict``: as the client sent it (the provider honours strict ``json_schema``);
- ``json_object``: as ``response_format: {"type": "json_object"}`` with the schema in the system message, for a
  provider that refuses or ignores strict ``json_schema`` (``ratchet_gateway.schema_prompt``).

The settings read the entry of the configured teacher when ``RATCHET_TEACHER_JSON_SCHEMA`` is unset
(``ratchet_core.settings``), so ``ratchet config check`` shows the value and where it came from, and the gateway
applies it from its start. The file is small, private (0600) and written atomically.

Example::

    {"teachers": {"openai/gpt-4o-mini @ https://api.openai.com/v1":
        {"model": "openai/gpt-4o-mini", "api_base": "https://api.openai.com/v1", "json_schema": "json_object",
         "checked_at": "2026-03-01T12:00:00Z", "checks": {"json_schema": "warn", ...}}}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ratchet_core.home_files import private_dir, write_private

FILE_NAME = "teacher.json"
JSON_SCHEMA_MODES = ("strict", "json_object")


def capabilities_path(home: Path) -> Path:
    return Path(home) / FILE_NAME


def teacher_key(model: str, api_base: str | None) -> str:
    """The entry's key: the model and where it is served (``(provider default)`` without an API base)."""
    return f"{model} @ {(api_base or '(provider default)').rstrip('/')}"


def _read(home: Path) -> dict[str, Any]:
    path = capabilities_path(home)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return {}
    except ValueError as exc:
        raise ValueError(
            f"{path} is not JSON ({exc}); fix or delete it and rerun `ratchet doctor teacher --apply`"
        ) from None
    teachers = doc.get("teachers") if isinstance(doc, dict) else None
    if not isinstance(teachers, dict):
        raise ValueError(
            f"{path} has no `teachers` object; delete it and rerun `ratchet doctor teacher --apply`"
        )
    return teachers


def recorded_json_schema_mode(home: Path, model: str, api_base: str | None) -> str | None:
    """The ``json_schema`` mode recorded for this teacher, or None when the file has no entry for it."""
    entry = _read(home).get(teacher_key(model, api_base))
    mode = entry.get("json_schema") if isinstance(entry, dict) else None
    if mode is None:
        return None
    if mode not in JSON_SCHEMA_MODES:
        raise ValueError(
            f"{capabilities_path(home)}: json_schema {mode!r} for {teacher_key(model, api_base)} is not one of "
            f"{', '.join(JSON_SCHEMA_MODES)}; rerun `ratchet doctor teacher --apply`"
        )
    return str(mode)


def record(
    home: Path, model: str, api_base: str | None, json_schema: str, checked_at: str, checks: dict[str, str]
) -> Path:
    """Write this teacher's entry (other teachers' entries are kept); returns the file's path."""
    if json_schema not in JSON_SCHEMA_MODES:
        raise ValueError(f"json_schema must be one of {JSON_SCHEMA_MODES}, got {json_schema!r}")
    teachers = dict(_read(home))
    teachers[teacher_key(model, api_base)] = {
        "model": model,
        "api_base": api_base,
        "json_schema": json_schema,
        "checked_at": checked_at,
        "checks": checks,
    }
    private_dir(Path(home))
    path = capabilities_path(home)
    write_private(path, json.dumps({"teachers": teachers}, indent=2, sort_keys=True) + "\n")
    return path
