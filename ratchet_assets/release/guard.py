"""Promotion needs evidence: a verified evaluation certificate that certifies the task at the release target.

:func:`certified_task` reads ``<artifacts>/certificates/<version>.dsse.json`` (the name the versions registry
recorded, ``registry.certificate_file``), checks its signature with the trusted public keys BEFORE parsing it, recomputes its numbers
(``ratchet_stats.certificate.check_certificate``) and returns the task's lower bound, its confidence threshold
under the task's calibration (``ltt`` or ``point``, ``ratchet_assets.release.admission``) and the numbers the
admission rules read; every way it can fail raises :class:`NotCertified` with a message that names the failed
check and what to do. The release sensor admits a candidate only through it (``control.release_tick``), and
``ratchet admin promote`` refuses a version without it unless ``--force`` (recorded as forced).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_assets.release.admission import CertificateNumbers, certificate_numbers


class NotCertified(ValueError):
    """The version has no verified certificate that certifies the task at the target; the message says why."""


@dataclass(frozen=True)
class CertifiedTask:
    version: str
    task: str
    lower_bound: float
    threshold: float  # under the calibration asked for
    target: float  # the certificate's own target
    certificate: str  # path of the certificate file
    day: str
    numbers: CertificateNumbers  # both thresholds and the paired comparison (admission rules)


def certified_task(
    path: str | Path,
    version: str,
    task: str,
    public_keys: Any,
    target: float | None = None,
    calibration: str = "ltt",
) -> CertifiedTask:
    """The verified certificate at `path` certifies `task` for `version` (at `target` when given) with a threshold
    under `calibration` (``ltt`` | ``point``); else raises."""
    from ratchet_stats.certificate import check_certificate, verify_certificate
    from ratchet_stats.dsse import VerificationError

    path = Path(path)
    try:
        text = path.read_text()
    except OSError:
        raise NotCertified(
            f"{version} has no evaluation certificate ({path} is missing): only a version the night certified "
            "can serve; run its night, or pass --force with a reason"
        ) from None
    try:
        statement = verify_certificate(text, public_keys)
    except (VerificationError, ValueError) as exc:
        check = getattr(exc, "check", "format")
        raise NotCertified(
            f"the certificate of {version} ({path.name}) failed the {check} check: {exc}; it must be signed "
            "by a key the gateways trust"
        ) from None
    predicate = statement["predicate"]
    if str(predicate.get("version")) != version:
        raise NotCertified(f"{path.name} certifies {predicate.get('version')!r}, not {version}")
    problems = check_certificate(predicate, statement["predicateType"])
    if problems:
        raise NotCertified(f"the numbers of {path.name} do not recompute: {problems[0]}")
    section = (predicate.get("tasks") or {}).get(task)
    if not isinstance(section, dict):
        known = ", ".join(sorted(predicate.get("tasks") or {})) or "none"
        raise NotCertified(f"the certificate of {version} does not evaluate {task} (it evaluates: {known})")
    numbers = certificate_numbers(predicate, task)
    bound, cert_target = numbers.lower_bound, numbers.target  # a task's own level first
    if section.get("certified") is not True:
        raise NotCertified(
            f"{version} is not certified for {task}: lower bound {bound:.4f} < target {cert_target:g} "
            f"({section.get('correct')}/{section.get('n')} golden rows right)"
        )
    if target is not None and bound < target:
        raise NotCertified(
            f"{version} is certified for {task} at {cert_target:g} only: lower bound {bound:.4f} < the release "
            f"target {target:g}"
        )
    threshold = numbers.point_threshold if calibration == "point" else numbers.ltt_threshold
    if threshold is None:
        how = (
            "point-rule threshold for {task} (no grid threshold's golden precision reaches the target)"
            if calibration == "point"
            else "calibrated confidence threshold for {task} (LTT certified none)"
        )
        raise NotCertified(f"the certificate of {version} has no {how.format(task=task)}")
    return CertifiedTask(
        version,
        task,
        bound,
        float(threshold),
        cert_target,
        str(path),
        str(predicate.get("day") or ""),
        numbers,
    )
