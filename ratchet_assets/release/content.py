"""A version is its content: one pure rule for when a night's adapter is an existing version.

The content of an adapter is (the digest of its weights and adapter config: every file of its folder but the night's
own training record, ``night.adapter.weights_digest``; the base's identity SHA-256, the base's chat template
SHA-256, the training config hash). Two nights whose adapters have the same content are one version: the later night
does not mint a new name, it re-certifies the existing version on its own golden set (a new certificate naming the
same version, chained to the earlier one in the versions registry, ``ratchet_core.control_db.version_certificates``)
and starts no rollout (``ARCHITECTURE.md``, "Releases"). The nightly asset (``ratchet_assets.night.adapter``) and
``ratchet sim`` (``ratchet_assets.sim.engine``) both call :func:`content_digest` and :func:`existing_version`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ratchet_stats.canonical import digest


def content_digest(adapter_sha256: str, base_sha256: str, chat_template_sha256: str, config_hash: str) -> str:
    """SHA-256 of the canonical JSON of the four parts that make a version what it is."""
    return digest(
        {
            "adapter_sha256": adapter_sha256,
            "base_sha256": base_sha256,
            "chat_template_sha256": chat_template_sha256,
            "config_hash": config_hash,
        }
    )


def record_content(record: Mapping[str, Any]) -> str:
    """The content digest of a night's adapter record (``night.adapter``: ``adapter_sha256``, ``base`` with its
    ``sha256`` and ``chat_template_sha256``, ``config_hash``); a record that already carries ``content_sha256``
    keeps it."""
    if record.get("content_sha256"):
        return str(record["content_sha256"])
    base = record.get("base") or {}
    return content_digest(
        str(record.get("adapter_sha256") or ""),
        str(base.get("sha256") or ""),
        str(base.get("chat_template_sha256") or ""),
        str(record.get("config_hash") or ""),
    )


def existing_version(known: Iterable[tuple[str, str]], content: str) -> str | None:
    """The first (oldest) version among `known` ((version, content digest), oldest first) whose content is
    `content`; None when the content is new (then the night mints a version)."""
    for version, other in known:
        if other == content:
            return version
    return None
