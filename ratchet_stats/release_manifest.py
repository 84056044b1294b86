"""The release manifest's signed format (``ratchet_core.manifest`` signs it): its predicate type and its checks.

``ratchet verify manifest FILE --key PUB`` (``ratchet_stats.cli_verify``) checks the DSSE signature first, then
``FORMAT.check``: the predicate's structure (``check_manifest``: sequence, stages, canary share, audit rates (the
flag's, and a release's ``audit_rate`` and ``target_audit_rate``, the inclusion probabilities of its audit streams),
pins)
and the subject ``release-manifest/<sequence>`` carrying the predicate's digest (``subject_problems``). One
version today; a second is one more ``DocumentFormat`` beside ``FORMAT`` and one entry in the CLI's documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ratchet_stats.canonical import digest
from ratchet_stats.evidence import DocumentFormat

PREDICATE_TYPE = "https://ratchet.dev/release-manifest/v1"
_STAGES = {"teacher", "shadow", "canary", "live"}


def check_manifest(predicate: Mapping[str, Any]) -> list[str]:
    """Structural checks of a release manifest predicate (``ratchet_core.manifest.Manifest``)."""
    problems: list[str] = []
    seq = predicate.get("sequence")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        problems.append(f"sequence is {seq!r}, expected a non-negative integer")
    tasks = predicate.get("tasks")
    if not isinstance(tasks, dict):
        problems.append("tasks is not an object")
        tasks = {}
    for name, release in sorted(tasks.items()):
        if not isinstance(release, dict):
            problems.append(f"tasks.{name} is not an object")
            continue
        if release.get("stage", "teacher") not in _STAGES:
            problems.append(
                f"tasks.{name}.stage is {release.get('stage')!r}, expected one of {sorted(_STAGES)}"
            )
        pct = release.get("canary_percent", 0.0)
        if not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 <= pct <= 100:
            problems.append(f"tasks.{name}.canary_percent is {pct!r}, expected a number in [0, 100]")
        # the audit streams' inclusion probabilities (ratchet_core.routing): absent, or in range
        for key, low_open in (("audit_rate", False), ("target_audit_rate", True)):
            rate = release.get(key)
            if rate is None:
                continue
            if (
                not isinstance(rate, int | float)
                or isinstance(rate, bool)
                or not (0 < rate <= 1 if low_open else 0 <= rate <= 1)
            ):
                span = "(0, 1]" if low_open else "[0, 1]"
                problems.append(f"tasks.{name}.{key} is {rate!r}, expected a number in {span}")
    flags = predicate.get("flags", {})
    if not isinstance(flags, dict):
        problems.append("flags is not an object")
    else:
        rate = flags.get("audit_rate", 0.0)
        if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 <= rate <= 1:
            problems.append(f"flags.audit_rate is {rate!r}, expected a number in [0, 1]")
    pins = predicate.get("pins", [])
    if not isinstance(pins, list) or not all(isinstance(p, str) for p in pins):
        problems.append("pins is not a list of task names")
    return problems


def summarize_manifest(predicate: Mapping[str, Any]) -> list[str]:
    lines = [
        f"sequence {predicate.get('sequence')}  issued {predicate.get('issued_at')}  by {predicate.get('actor')}"
    ]
    for name, release in sorted((predicate.get("tasks") or {}).items()):
        if isinstance(release, dict):
            extra = f" {release.get('canary_percent')}%" if release.get("stage") == "canary" else ""
            # what a reader of the ledger needs to recompute each pair row's inclusion probability
            # (ratchet_core.routing: unit_hash("audit", request_id) < the rate)
            if release.get("audit_rate") is not None:
                extra += f"  audit rate {release['audit_rate']:g}"
            if release.get("target_audit_rate") is not None:
                extra += (
                    f"  targeted audit rate {release['target_audit_rate']:g} (where it differs from live)"
                )
            lines.append(f"{name}: {release.get('stage')} {release.get('version') or ''}{extra}".rstrip())
    return lines


def subject_problems(statement: Mapping[str, Any]) -> list[str]:
    """The subject ``release-manifest/<sequence>`` (``ratchet_core.manifest`` names it so) carries the sequence and
    the digest of the signed predicate."""
    predicate = statement["predicate"]
    problems = []
    for s in statement["subject"]:
        if s["name"].startswith("release-manifest/"):
            if s["name"] != f"release-manifest/{predicate.get('sequence')}":
                problems.append(f"subject {s['name']} does not match sequence {predicate.get('sequence')}")
            if s["digest"].get("sha256") != digest(predicate):
                problems.append(f"subject {s['name']} digest is not the digest of the signed predicate")
    return problems


def check_statement(statement: Mapping[str, Any]) -> list[str]:
    """The predicate's structure, then its subject."""
    return check_manifest(statement["predicate"]) + subject_problems(statement)


FORMAT = DocumentFormat(PREDICATE_TYPE, check_statement, summarize_manifest)
