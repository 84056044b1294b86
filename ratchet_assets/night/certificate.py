"""The ``evaluation_certificate`` step: the night's adapter answers every golden row; a signed certificate.

Plain functions (no Dagster; the asset calls ``certify_adapter``). The adapter of the night's record
(``night.adapter``) is loaded into the student endpoint under its version name (``/v1/load_lora_adapter``,
through the effect ledger), each golden request is answered greedily with logprobs, and correctness is judged by
the task's comparator against the teacher's answer (``night.evaluate``). Per task: precision and its
Clopper-Pearson lower bound at delta, the Learn-then-Test confidence threshold, and the exact McNemar test against
the live version on the same rows (``ratchet_stats.certificate``). The certificate commits to the golden set by
the key root ``golden_split`` wrote (``night.commitments``). It is recomputed by the verifier's own code before it
is signed, then written to ``<artifacts>/certificates/<version>.dsse.json``; ``ratchet verify certificate FILE
--key PUB`` recomputes it. Ed25519 is deterministic, so a rerun on the same rows writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_assets.night import evaluate as ev
from ratchet_assets.night.adapter import read_record
from ratchet_assets.night.commitments import golden_commitment
from ratchet_core.lake import atomic_write_bytes
from ratchet_core.layout import ArtifactLayout


class CertificateError(RuntimeError):
    """The certificate cannot be produced; the message says what to do."""


@dataclass
class CertificateResult:
    predicate: dict[str, Any]
    path: Path

    @property
    def certified(self) -> list[str]:
        return list(self.predicate["certified_tasks"])


def live_versions(engine: Any, public_key: Any) -> dict[str, str]:
    """task -> the version the night compares its adapter with, from the newest verified release manifest ({}
    when none): the candidate in the task's slot (shadow, canary), else the live version
    (``ratchet_assets.release.tick.incumbent``). A newcomer significantly better than the candidate preempts it;
    once that candidate is live, the comparison is the paired gate's (with live)."""
    from ratchet_assets.release.tick import incumbent
    from ratchet_core.control_db import ensure_schema
    from ratchet_core.manifest import latest_verified

    ensure_schema(engine)
    manifest, _ = latest_verified(engine, public_key)
    if manifest is None:
        return {}
    return {task: version for task, rel in manifest.tasks.items() if (version := incumbent(rel))}


def certify_adapter(
    artifacts: str | Path,
    day: str,
    *,
    url: str,
    api_key: str,
    target: float,
    delta: float,
    effects: Any,
    private_key: Any,
    live: Mapping[str, str] | None = None,
    concurrency: int = 1,
    max_tokens: int = 512,
    log: Callable[[str], None] = lambda line: None,
    policies: Mapping[str, Any] | None = None,
) -> CertificateResult:
    """Evaluate night ``day``'s adapter on its golden set and write the signed certificate.

    ``live``: task -> the live version to compare with (McNemar on the same rows); ``effects``: the effect ledger
    (adapter loads); ``log`` gets progress lines; ``policies``: task -> ``TaskPolicy`` from the signed manifest
    (``ratchet_core.task_policy``): a task's comparator and its own target/delta (``target``/``delta`` otherwise).
    """
    from ratchet_core.task_policy import resolve
    from ratchet_stats import certificate as cert
    from ratchet_stats.canonical import canonical_json
    from ratchet_stats.dsse import make_statement, sign_statement

    layout = ArtifactLayout(artifacts)
    record = read_record(artifacts, day, needed_by="`evaluation_certificate`")
    version = record["version"]
    if not url:
        raise CertificateError(
            "no student endpoint: set RATCHET_STUDENT_BASE_URL (e.g. http://127.0.0.1:8102/v1)"
        )
    rows = ev.load_golden(artifacts, day)
    if not rows:
        raise CertificateError(f"the golden set for {day} is empty: nothing to certify on; send more traffic")
    golden = golden_commitment(artifacts, day).keys
    if golden.size != len(rows):
        raise CertificateError(
            f"the golden set of {day} has {len(rows)} rows but golden_split committed to {golden.size}: "
            f"materialise `golden_split` for {day} again"
        )
    how = ev.ensure_adapter_loaded(url, api_key, version, layout, record["adapter_sha256"], effects)
    log(f"{version} on {url}: {how}")
    step = max(1, len(rows) // 10)

    def progress(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            log(f"answered {done}/{total} golden rows with {version}")

    answers = ev.answer_rows(url, api_key, version, rows, concurrency, max_tokens, on_progress=progress)
    baselines: dict[str, tuple[str, list[ev.Answer]]] = {}
    for task, live_version in sorted((live or {}).items()):
        task_rows = [r for r in rows if r.task == task]
        live_dir = layout.adapter_dir(live_version)
        if live_version == version or not task_rows or not live_dir.is_dir():
            continue
        live_digest = cert.adapter_dir_digest(live_dir)
        ev.ensure_adapter_loaded(url, api_key, live_version, layout, live_digest, effects)
        baselines[task] = (
            live_version,
            ev.answer_rows(url, api_key, live_version, task_rows, concurrency, max_tokens),
        )
        log(f"{task}: compared with live version {live_version} on the same {len(task_rows)} rows")

    levels: dict[str, tuple[float, float]] = {}
    comparators: dict[str, str] = {}
    for task in sorted({r.task for r in rows}):
        p = resolve(task, dict(policies or {}), target=target, delta=delta)
        levels[task] = (p.target, p.delta)
        if p.source["comparator"] == "task policy":
            comparators[task] = p.comparator
    predicate = cert.build_certificate(
        version=version,
        base=record["base"],
        adapter_sha256=record["adapter_sha256"],
        golden_root=golden.root,
        golden_size=golden.size,
        target=target,
        delta=delta,
        tasks=ev.task_outcomes(rows, answers, baselines, comparators),
        day=day,
        task_levels=levels,
    )
    problems = cert.check_certificate(predicate)
    if problems:  # the verifier's own recomputation must agree before anything is signed
        raise CertificateError("certificate does not recompute: " + "; ".join(problems[:5]))
    statement = make_statement(
        cert.predicate_type_of(predicate), predicate, cert.certificate_subjects(predicate)
    )
    envelope = sign_statement(statement, private_key)
    path = layout.night_certificate(version, day)  # the minting night's name, or <version>@<day>
    atomic_write_bytes(path, canonical_json(envelope) + b"\n")
    for line in cert.summary_lines(predicate):
        log(line)
    return CertificateResult(predicate, path)
