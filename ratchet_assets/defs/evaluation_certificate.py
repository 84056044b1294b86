"""``evaluation_certificate``: the night's adapter answers every golden row; exact statistics; a signed certificate.

The adapter is loaded into the student endpoint under its version name (``/v1/load_lora_adapter``, through the
effect ledger), each golden request is answered greedily with logprobs, and correctness is judged by the task's
comparator against the teacher's answer (``ratchet_assets.night.evaluate``). Per task: precision and its
Clopper-Pearson lower bound at delta, the Learn-then-Test confidence threshold, and the exact McNemar test against
the live version on the same rows (``ratchet_stats.certificate``). The signed certificate goes to
``<artifacts>/certificates/<version>.dsse.json``; ``ratchet verify certificate FILE --key PUB`` recomputes it.

Blocking check ``at_least_one_task_certified``: when no task's lower bound reaches the target, the run stops
here: no BOM, and the release sensor never sees a certified task.
"""

# No `from __future__ import annotations`: Dagster resolves the Config annotation at definition time.
import json
from pathlib import Path
from typing import Any

import dagster as dg

from ratchet_assets.defs.lora_adapter import day_pointer
from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, NightConfig, RatchetPaths, Signer

CHECK = "at_least_one_task_certified"


class EvaluationConfig(dg.Config):
    """Where the student endpoint is, and the certification level (0 = NightConfig's target/delta)."""

    student_base_url: str = ""  # "" = RATCHET_STUDENT_BASE_URL
    student_api_key: str = ""  # "" = RATCHET_STUDENT_API_KEY
    target: float = 0.0
    delta: float = 0.0
    concurrency: int = 1  # >1 is faster, but batching can change the last bits of logprobs between reruns
    max_tokens: int = 512


def certificate_path(artifacts: Path, version: str) -> Path:
    return artifacts / "certificates" / f"{version}.dsse.json"


def live_versions(control_db: ControlDB, signer: Signer) -> dict[str, str]:
    """task -> live version, from the newest verified release manifest ({} when none)."""
    try:
        from ratchet_core.manifest import ensure_tables, latest_verified
    except ImportError:
        return {}
    engine = control_db.engine()
    ensure_tables(engine)
    manifest, _ = latest_verified(engine, signer.public_key())
    if manifest is None:
        return {}
    return {task: rel.version for task, rel in manifest.tasks.items() if rel.stage == "live" and rel.version}


def _metadata(predicate: dict[str, Any], path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "version": predicate["version"],
        "certified_tasks": ", ".join(predicate["certified_tasks"]) or "none",
        "target": dg.MetadataValue.float(predicate["target"]),
        "delta": dg.MetadataValue.float(predicate["delta"]),
        "golden_root": dg.MetadataValue.text(predicate["golden"]["root"]),
        "dagster/row_count": dg.MetadataValue.int(int(predicate["golden"]["size"])),
        "dagster/uri": dg.MetadataValue.path(str(path)),
    }
    lines = [
        "| task | n | correct | precision | lower bound | LTT threshold | certified |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, s in sorted(predicate["tasks"].items()):
        thr = s["ltt"]["threshold"]
        meta[f"{task}/precision"] = dg.MetadataValue.float(float(s["precision"]))
        meta[f"{task}/lower_bound"] = dg.MetadataValue.float(float(s["lower_bound"]))
        meta[f"{task}/n"] = dg.MetadataValue.int(int(s["n"]))
        if thr is not None:
            meta[f"{task}/threshold"] = dg.MetadataValue.float(float(thr))
        if s["mcnemar"] is not None:
            meta[f"{task}/mcnemar_p"] = dg.MetadataValue.float(float(s["mcnemar"]["p_value"]))
        lines.append(
            f"| {task} | {s['n']} | {s['correct']} | {s['precision']:.4f} | {s['lower_bound']:.4f} | "
            f"{'none' if thr is None else thr} | {'yes' if s['certified'] else 'no'} |"
        )
    meta["summary"] = dg.MetadataValue.md("\n".join(lines))
    return meta


@dg.asset(
    partitions_def=daily_partitions,
    deps=["lora_adapter", "golden_split"],
    kinds={"python", "json"},
    group_name="night_school",
    check_specs=[dg.AssetCheckSpec(CHECK, asset="evaluation_certificate", blocking=True)],
)
def evaluation_certificate(
    context: dg.AssetExecutionContext,
    config: EvaluationConfig,
    paths: RatchetPaths,
    control_db: ControlDB,
    signer: Signer,
    night: NightConfig,
) -> dg.MaterializeResult:
    """The signed evaluation certificate of the night's adapter on the golden set."""
    from ratchet_assets.night import atomic_write_bytes
    from ratchet_assets.night import evaluate as ev
    from ratchet_assets.night.bom_builder import adapter_file_hashes
    from ratchet_core.settings import load_settings
    from ratchet_stats import certificate as cert
    from ratchet_stats.canonical import canonical_json
    from ratchet_stats.dsse import make_statement, sign_statement

    day = context.partition_key
    artifacts = paths.artifacts_root()
    pointer = day_pointer(artifacts, day)
    if not pointer.exists():
        raise dg.Failure(
            f"no adapter for {day} ({pointer} is missing): materialise `lora_adapter` for {day} first"
        )
    record = json.loads(pointer.read_text())
    version = record["version"]
    settings = load_settings()
    url = config.student_base_url or settings.student_base_url or ""
    api_key = config.student_api_key or settings.student_api_key
    if not url:
        raise dg.Failure("no student endpoint: set RATCHET_STUDENT_BASE_URL (e.g. http://127.0.0.1:8102/v1)")
    target = config.target or night.certify_target
    delta = config.delta or night.certify_delta

    try:
        rows = ev.load_golden(artifacts, day)
    except ev.EvaluationError as exc:
        raise dg.Failure(str(exc)) from exc
    if not rows:
        raise dg.Failure(f"the golden set for {day} is empty: nothing to certify on; send more traffic")
    golden_keys, _ = ev.golden_commitments(rows)
    effects = control_db.effects()
    try:
        how = ev.ensure_adapter_loaded(
            url, api_key, version, record["adapter_dir"], record["adapter_sha256"], effects
        )
        context.log.info(f"{version} on {url}: {how}")
        step = max(1, len(rows) // 10)

        def progress(done: int, total: int) -> None:
            if done % step == 0 or done == total:
                context.log.info(f"answered {done}/{total} golden rows with {version}")

        answers = ev.answer_rows(
            url, api_key, version, rows, config.concurrency, config.max_tokens, on_progress=progress
        )
        baselines: dict[str, tuple[str, list[ev.Answer]]] = {}
        for task, live in sorted(live_versions(control_db, signer).items()):
            task_rows = [r for r in rows if r.task == task]
            live_dir = artifacts / "adapters" / live
            if live == version or not task_rows or not live_dir.is_dir():
                continue
            live_digest = cert.adapter_digest(adapter_file_hashes(live_dir))
            ev.ensure_adapter_loaded(url, api_key, live, live_dir, live_digest, effects)
            baselines[task] = (
                live,
                ev.answer_rows(url, api_key, live, task_rows, config.concurrency, config.max_tokens),
            )
            context.log.info(f"{task}: compared with live version {live} on the same {len(task_rows)} rows")
    except ev.EvaluationError as exc:
        raise dg.Failure(str(exc)) from exc

    outcomes = ev.task_outcomes(rows, answers, baselines)
    predicate = cert.build_certificate(
        version=version,
        base=record["base"],
        adapter_sha256=record["adapter_sha256"],
        golden_root=golden_keys.root,
        golden_size=golden_keys.size,
        target=target,
        delta=delta,
        tasks=outcomes,
        day=day,
    )
    problems = cert.check_certificate(predicate)
    if problems:  # the verifier's own recomputation must agree before anything is signed
        raise dg.Failure("certificate does not recompute: " + "; ".join(problems[:5]))
    statement = make_statement(cert.PREDICATE_TYPE, predicate, cert.certificate_subjects(predicate))
    envelope = sign_statement(statement, signer.private_key())
    path = certificate_path(artifacts, version)
    atomic_write_bytes(path, canonical_json(envelope) + b"\n")
    for line in cert.summary_lines(predicate):
        context.log.info(line)
    certified = predicate["certified_tasks"]
    return dg.MaterializeResult(
        metadata=_metadata(predicate, path),
        check_results=[
            dg.AssetCheckResult(
                check_name=CHECK,
                passed=bool(certified),
                metadata={
                    "certified_tasks": ", ".join(certified) or "none",
                    "target": dg.MetadataValue.float(target),
                    "best_lower_bound": dg.MetadataValue.float(
                        max((s["lower_bound"] for s in predicate["tasks"].values()), default=0.0)
                    ),
                },
                description=None
                if certified
                else f"no task's precision lower bound reaches {target} at delta {delta}: {version} is not released",
            )
        ],
    )
