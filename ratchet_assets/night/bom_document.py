"""Build an adapter's CycloneDX 1.6 ML-BOM and its NOTICE.md (the format: ``ratchet_stats.bom_format``).

Pure functions over plain values, so ``ratchet sim`` and tests build BOMs without Dagster. The layout (component
refs, property names) is defined once in ``ratchet_stats.bom_format`` and verified there. Nothing here reads a clock:
the same inputs give the same BOM bytes (the serial number is a UUIDv5 of the version and adapter digest).
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_stats import bom_format as B
from ratchet_stats.certificate import adapter_digest
from ratchet_stats.commitment import Commitment

DEMO_BASE_LICENSE = "Apache-2.0"
TRAFFIC_LICENSE = "LicenseRef-ratchet-customer-traffic"
TRAFFIC_LICENSE_TEXT = (
    "Customer traffic labelled by the teacher model; use is governed by the deployment's agreement with the "
    "customer and the teacher provider's terms."
)
_SPDX_IDS = {
    "apache-2.0": "Apache-2.0",
    "mit": "MIT",
    "llama3.1": "LicenseRef-llama3.1",
    "gemma": "LicenseRef-gemma",
}


@dataclass(frozen=True)
class DataSet:
    """One data set the adapter depends on: its name, both Merkle commitments and its license."""

    name: str
    description: str
    keys: Commitment
    rows: Commitment
    license: str = TRAFFIC_LICENSE
    labels: Mapping[str, int] | None = (
        None  # rows per label source (teacher | people | import), when recorded
    )
    labels_tree: Commitment | None = None  # the training set's label-source tree (``<key> <source>`` leaves)


def code_version() -> str:
    """Ratchet's package version plus the git commit of this checkout when there is one (``0.1.0+g1a2b3c4``)."""
    try:
        version = importlib.metadata.version("ratchet")
    except importlib.metadata.PackageNotFoundError:
        version = "0+unknown"
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        if out.returncode == 0 and out.stdout.strip():
            version += f"+g{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return version


def base_license(base_path: str | Path, is_demo: bool) -> str:
    """The base model's license: Apache-2.0 for the demo base, else ``license:`` from the model card's YAML
    front matter (README.md, as on the Hugging Face hub), else ``NOASSERTION``."""
    if is_demo:
        return DEMO_BASE_LICENSE
    readme = Path(base_path) / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8", errors="replace")
        match = re.search(r"^---\s*$(.*?)^---\s*$", text, re.S | re.M)
        if match:
            lic = re.search(r"^license:\s*['\"]?([\w.\-+]+)", match.group(1), re.M)
            if lic:
                return _SPDX_IDS.get(lic.group(1).lower(), lic.group(1))
    return "NOASSERTION"


def _license_entry(license_id: str, text: str | None = None) -> dict[str, Any]:
    if license_id in ("Apache-2.0", "MIT"):
        return {"license": {"id": license_id}}
    entry: dict[str, Any] = {"name": license_id}
    if text:
        entry["text"] = {"content": text}
    return {"license": entry}


def _props(items: Mapping[str, Any]) -> list[dict[str, str]]:
    return [{"name": k, "value": str(v)} for k, v in sorted(items.items())]


def _metrics(certificate: Mapping[str, Any]) -> list[dict[str, Any]]:
    metrics = []
    for task, s in sorted((certificate.get("tasks") or {}).items()):
        metrics.append(
            {
                "type": "precision",
                "value": repr(float(s["precision"])),
                "slice": f"task={task}",
                "confidenceInterval": {"lowerBound": repr(float(s["lower_bound"])), "upperBound": "1.0"},
            }
        )
        thr = (s.get("ltt") or {}).get("threshold")
        metrics.append(
            {
                "type": "confidence-threshold (Learn-then-Test)",
                "value": "none" if thr is None else repr(float(thr)),
                "slice": f"task={task}",
            }
        )
    return metrics


def _data_component(ref: str, data: DataSet) -> dict[str, Any]:
    props: dict[str, Any] = {
        B.P_KEY_ROOT: data.keys.root,
        B.P_KEY_COUNT: data.keys.size,
        B.P_ROW_ROOT: data.rows.root,
        B.P_ROW_COUNT: data.rows.size,
    }
    props.update({f"{B.P_LABELS}{source}": n for source, n in (data.labels or {}).items()})
    if data.labels_tree is not None:
        props.update({B.P_LABEL_ROOT: data.labels_tree.root, B.P_LABEL_COUNT: data.labels_tree.size})
    people = (data.labels or {}).get("people", 0)
    return {
        "type": "data",
        "bom-ref": ref,
        "name": data.name,
        "description": data.description,
        "licenses": [
            _license_entry(data.license, TRAFFIC_LICENSE_TEXT if data.license == TRAFFIC_LICENSE else None)
        ],
        "data": [
            {
                "type": "dataset",
                "name": data.name,
                "contents": {"properties": _props(props)},
                "classification": "teacher- and people-labelled traffic (PII redacted)"
                if people
                else "teacher-labelled traffic (PII redacted)",
            }
        ],
        "properties": _props(props),
    }


def build_bom(
    *,
    version: str,
    adapter_files: Mapping[str, str],
    hyperparameters: Mapping[str, Any],
    base: Mapping[str, Any],
    base_license_id: str,
    train: DataSet,
    golden: DataSet,
    teacher_model: str,
    certificate: Mapping[str, Any],
    certificate_sha256: str,
    notice_sha256: str,
    code: str,
    learner: Mapping[str, Any] | None = None,
    start: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The CycloneDX 1.6 document for one adapter version (layout documented in ``ratchet_stats.bom_format``).

    ``adapter_files``: {file name: sha256}; ``base``: ``ratchet_core.student_model.base_identity``;
    ``certificate``: the evaluation certificate predicate (its metrics fill the model card).
    ``learner``: the learner's choices (``learner_properties``), as ``ratchet:learner:<name>`` adapter properties.
    ``start``: how the weights started (the adapter record's ``start``, ``night.warm_start``), as
    ``ratchet:start:<name>`` properties and, for a warm start, the parent in the component's pedigree; None (a
    record from before warm starts) adds nothing, so such a BOM keeps its bytes.
    """
    digest = adapter_digest(adapter_files)
    adapter_ref = f"{B.ADAPTER_REF_PREFIX}{version}"
    base_ref = f"{B.BASE_REF_PREFIX}{base['name']}"
    adapter_props = {f"{B.P_FILE}{n}": d for n, d in adapter_files.items()}
    adapter_props.update({f"{B.P_HYPER}{k}": _hyper_text(v) for k, v in hyperparameters.items()})
    adapter_props.update(learner_properties(learner or {}))
    adapter_props.update(start_properties(start or {}))
    adapter_props[B.P_CERT] = certificate_sha256
    adapter_props[B.P_VERSION] = version
    certified = list(certificate.get("certified_tasks") or [])
    adapter = {
        "type": "machine-learning-model",
        "bom-ref": adapter_ref,
        "name": f"ratchet-student-{version}",
        "version": version,
        "description": f"LoRA adapter {version} on {base['name']}; certified tasks: {', '.join(certified) or 'none'}",
        "hashes": [{"alg": "SHA-256", "content": digest}],
        "licenses": [_license_entry(base_license_id)],
        "modelCard": {
            "modelParameters": {
                "approach": {"type": "supervised"},
                "task": "text-generation",
                "architectureFamily": "LoRA adapter",
                "modelArchitecture": f"LoRA on {base['name']}",
                "datasets": [{"ref": B.TRAIN_REF}],
                "inputs": [{"format": "text/chat (OpenAI messages)"}],
                "outputs": [{"format": "text/chat (assistant message)"}],
            },
            "quantitativeAnalysis": {"performanceMetrics": _metrics(certificate)},
            "considerations": {
                "useCases": [
                    f"Answer requests of task(s) {', '.join(certified) or 'none'} in place of the teacher"
                ],
                "technicalLimitations": [
                    "Serve only above the certified confidence threshold; claims hold at the certificate's delta."
                ],
            },
            "properties": _props(
                {
                    "ratchet:certificate:target": certificate.get("target"),
                    "ratchet:certificate:delta": certificate.get("delta"),
                    B.P_CERT: certificate_sha256,
                }
            ),
        },
        "properties": _props(adapter_props),
    }
    parent = (start or {}).get("parent")
    if parent:
        adapter["pedigree"] = {
            "ancestors": [
                {
                    "type": "machine-learning-model",
                    "bom-ref": f"{B.ADAPTER_REF_PREFIX}{parent['version']}",
                    "name": f"ratchet-student-{parent['version']}",
                    "version": parent["version"],
                    "hashes": [{"alg": "SHA-256", "content": parent["adapter_sha256"]}],
                }
            ]
        }
    base_component = {
        "type": "machine-learning-model",
        "bom-ref": base_ref,
        "name": base["name"],
        "hashes": [{"alg": "SHA-256", "content": base["sha256"]}],
        "licenses": [_license_entry(base_license_id)],
        "properties": _props(
            {
                **{f"{B.P_FILE}{n}": d for n, d in (base.get("files") or {}).items()},
                # the template every prompt was rendered with and the vLLM tool parser it needs (older records
                # have neither)
                **{f"{B.P_BASE}{k}": base[k] for k in ("chat_template_sha256", "tool_parser") if k in base},
            }
        ),
    }
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": B.SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'ratchet:{version}:{digest}')}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "ratchet", "version": code}]},
            "properties": _props({B.P_VERSION: version}),
        },
        "components": [
            adapter,
            base_component,
            _data_component(B.TRAIN_REF, train),
            _data_component(B.GOLDEN_REF, golden),
        ],
        "services": [
            {
                "bom-ref": B.TEACHER_REF,
                "name": teacher_model,
                "description": "Teacher model whose answers labelled the training and golden data.",
            }
        ],
        "dependencies": [
            {"ref": adapter_ref, "dependsOn": sorted([base_ref, B.TRAIN_REF, B.TEACHER_REF])},
            {"ref": B.TRAIN_REF, "dependsOn": [B.TEACHER_REF]},
            {"ref": B.GOLDEN_REF, "dependsOn": [B.TEACHER_REF]},
        ],
        "properties": _props({B.P_CODE: code, B.P_NOTICE: notice_sha256}),
    }
    return bom


P_LEARNER = "ratchet:learner:"


def learner_properties(learner: Mapping[str, Any]) -> dict[str, str]:
    """``ratchet:learner:<name>`` properties: what the adaptive learner chose (steps, epochs run, best epoch, why it
    stopped, validation rows and accuracy, per epoch and per task as ``validation_accuracy:<task>``). Training
    seconds are left out: they differ from run to run, and the BOM of the same adapter stays the same bytes."""
    out = {}
    for k, v in learner.items():
        if k == "validation_per_task":
            out.update(
                {f"{P_LEARNER}validation_accuracy:{t}": str(r["accuracy"]) for t, r in sorted(v.items())}
            )
        elif v is not None:
            out[f"{P_LEARNER}{k}"] = _hyper_text(v)
    return out


def start_properties(start: Mapping[str, Any]) -> dict[str, str]:
    """``ratchet:start:<name>`` properties (``ratchet_stats.bom_format``): mode, reason, and for a warm start the
    parent's version and digest, the new and replayed row counts and the replay rule."""
    if not start:
        return {}
    out = {B.P_START_MODE: str(start["mode"]), f"{B.P_START}reason": str(start.get("reason", ""))}
    parent = start.get("parent")
    if parent:
        out[B.P_PARENT_VERSION] = str(parent["version"])
        out[B.P_PARENT_SHA256] = str(parent["adapter_sha256"])
        for name in ("new_rows", "replay_rows", "replay_rule"):
            if start.get(name) is not None:
                out[f"{B.P_START}{name}"] = str(start[name])
    return out


def _hyper_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def build_notice(
    *,
    version: str,
    base_name: str,
    base_license_id: str,
    data_sets: list[DataSet],
    teacher_model: str,
) -> str:
    """NOTICE.md for an adapter: the base model's license and every data source (name, license, commitments)."""
    lines = [
        f"# NOTICE for Ratchet adapter {version}",
        "",
        "This adapter is a derivative work. Redistribution must keep this notice.",
        "",
        "## Base model",
        "",
        f"- {base_name}: license {base_license_id}",
        "",
        "## Data sources",
        "",
    ]
    for data in data_sets:
        lines.append(
            f"- {data.name}: license {data.license} ({data.description}; {data.rows.size} rows, row root "
            f"{data.rows.root}; {data.keys.size} keys, key root {data.keys.root})"
        )
    lines += [
        "",
        f"Labels were produced by the teacher model `{teacher_model}`; its provider's terms apply to them.",
        "",
        f"{TRAFFIC_LICENSE}: {TRAFFIC_LICENSE_TEXT}",
        "",
    ]
    return "\n".join(lines)
