"""``evaluation_certificate``: the night's adapter answers every golden row; exact statistics; a signed certificate.

Dagster wiring only: the config (student endpoint, certification level), the resources, the metadata and the
blocking check. The step itself (adapter load, answers, statistics, signing) is
``ratchet_assets.night.certificate.certify_adapter``; the certificate goes to
``<artifacts>/certificates/<version>.dsse.json`` and ``ratchet verify certificate FILE --key PUB`` recomputes it.

Check ``at_least_one_task_certified`` (severity WARN, not blocking): "not certified" is an outcome, not a failure
(ARCHITECTURE.md, the night). A night whose adapter reaches no task's target is a SUCCESSFUL run that signs a
certificate saying so (``certified_tasks`` empty, every section ``certified: false``); the check records it in the
UI, ``bom`` materialises nothing for it, and the release sensor registers the version as rejected. A FAILED run
means something broke (``failed_night_sensor`` records it), never that the adapter was not good enough yet.
"""

# No `from __future__ import annotations`: Dagster resolves the Config annotation at definition time.
from typing import Any

import dagster as dg

from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ControlDB, ModelEndpoints, NightConfig, RatchetPaths, Signer
from ratchet_assets.night import certificate as step
from ratchet_core.artifact_store import publishes_artifacts

CHECK = "at_least_one_task_certified"


class EvaluationConfig(dg.Config):
    """Where the student endpoint is, and the certification level (0 = NightConfig's target/delta)."""

    student_base_url: str = ""  # "" = RATCHET_STUDENT_BASE_URL
    student_api_key: str = ""  # "" = RATCHET_STUDENT_API_KEY
    target: float = 0.0
    delta: float = 0.0
    concurrency: int = 1  # >1 is faster, but batching can change the last bits of logprobs between reruns
    max_tokens: int = 512


def _metadata(result: step.CertificateResult) -> dict[str, Any]:
    predicate = result.predicate
    meta: dict[str, Any] = {
        "version": predicate["version"],
        "outcome": "certified" if predicate["certified_tasks"] else "not certified",
        "certified_tasks": ", ".join(predicate["certified_tasks"]) or "none",
        "target": dg.MetadataValue.float(predicate["target"]),
        "delta": dg.MetadataValue.float(predicate["delta"]),
        "golden_root": dg.MetadataValue.text(predicate["golden"]["root"]),
        # a series the UI plots per partition (issue 16): the best task's certified lower bound
        "certified_lower_bound": dg.MetadataValue.float(
            max((float(s["lower_bound"]) for s in predicate["tasks"].values()), default=0.0)
        ),
        "dagster/row_count": dg.MetadataValue.int(int(predicate["golden"]["size"])),
        "dagster/uri": dg.MetadataValue.path(str(result.path)),
    }
    lines = [
        "| task | n | correct | precision | lower bound | LTT threshold | certified |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, s in sorted(predicate["tasks"].items()):
        thr = s["ltt"]["threshold"]
        meta[f"{task}/precision"] = dg.MetadataValue.float(float(s["precision"]))
        meta[f"{task}/target"] = dg.MetadataValue.float(float(s.get("target", predicate["target"])))
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
    group_name="night",
    check_specs=[dg.AssetCheckSpec(CHECK, asset="evaluation_certificate")],
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def evaluation_certificate(
    context: dg.AssetExecutionContext,
    config: EvaluationConfig,
    paths: RatchetPaths,
    control_db: ControlDB,
    signer: Signer,
    night: NightConfig,
    models: ModelEndpoints,
) -> dg.MaterializeResult:
    """The signed evaluation certificate of the night's adapter on the golden set."""
    from ratchet_assets.night.adapter import AdapterError
    from ratchet_assets.night.commitments import CommitmentMissing
    from ratchet_assets.night.evaluate import EvaluationError
    from ratchet_core.manifest import current_policies

    target = config.target or night.certify_target
    delta = config.delta or night.certify_delta
    try:
        result = step.certify_adapter(
            paths.artifacts_root(),
            context.partition_key,
            url=config.student_base_url or models.student_url(),
            api_key=config.student_api_key or models.student_api_key(),
            target=target,
            delta=delta,
            effects=control_db.effects(),
            private_key=signer.private_key(),
            live=step.live_versions(control_db.engine(), signer.public_key()),
            policies=current_policies(control_db.engine(), signer.public_key()),
            concurrency=config.concurrency,
            max_tokens=config.max_tokens,
            log=context.log.info,
        )
    except (AdapterError, CommitmentMissing, EvaluationError, step.CertificateError) as exc:
        raise dg.Failure(str(exc)) from exc
    predicate, certified = result.predicate, result.certified
    return dg.MaterializeResult(
        metadata=_metadata(result),
        check_results=[
            dg.AssetCheckResult(
                check_name=CHECK,
                passed=bool(certified),
                severity=dg.AssetCheckSeverity.WARN,  # an outcome the certificate signs, not a broken night
                metadata={
                    "certified_tasks": ", ".join(certified) or "none",
                    "target": dg.MetadataValue.float(target),
                    "best_lower_bound": dg.MetadataValue.float(
                        max((s["lower_bound"] for s in predicate["tasks"].values()), default=0.0)
                    ),
                },
                description=None
                if certified
                else f"no task's precision lower bound reaches {target} at delta {delta}: "
                f"{predicate['version']} is signed NOT CERTIFIED and is not released",
            )
        ],
    )
