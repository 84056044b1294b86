"""The ``bom`` step: the certified adapter's signed CycloneDX 1.6 ML-BOM, its NOTICE.md and training-set proofs.

Plain functions (no Dagster; the asset calls ``write_bom``, which runs only after ``evaluation_certificate``'s
blocking check passed). Writes ``<artifacts>/boms/<version>/``: ``bom.dsse.json`` (DSSE envelope, in-toto
Statement, predicateType ``https://cyclonedx.org/bom``; subjects = the adapter files), ``NOTICE.md`` (base model
license, every data source; its sha256 is in the BOM), ``train-keys.txt`` / ``golden-keys.txt`` (sorted example
keys, for ``ratchet proof make``), ``disjoint.proof.json`` (every golden key absent from the training set,
checkable with ``ratchet verify proof --bom bom.dsse.json --proof disjoint.proof.json --key PUB``) and a copy of
the certificate. The data-set commitments are the ones ``training_set`` and ``golden_split`` wrote
(``night.commitments``); the key lists are checked against them. The document itself is built by
``night.bom_document``, and the BOM is verified with the auditor's own code (``ratchet_stats.bom_format.verify_bom``)
before any file is written.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_assets.night import bom_document as BD
from ratchet_assets.night.adapter import adapter_path, read_record
from ratchet_assets.night.commitments import golden_commitment, training_commitment
from ratchet_core.lake import atomic_write_bytes
from ratchet_core.layout import ArtifactLayout


class BomStepError(RuntimeError):
    """The BOM cannot be produced; the message says what to do."""


class NotCertifiedNoBom(BomStepError):
    """The night's certificate certified no task: an outcome, not a failure; there is no BOM to write."""


class KeepsItsBom(BomStepError):
    """The night's adapter is an earlier night's version, re-certified on this night's golden set
    (``ratchet_assets.release.content``): the version's BOM, written the night that minted it, stands (it names
    that night's training and golden sets, and its certificate); this night's certificate is its own signed
    document beside the first (``certificates/<version>@<day>.dsse.json``). An outcome, not a failure."""

    def __init__(self, message: str, bom: Path) -> None:
        super().__init__(message)
        self.bom = bom


@dataclass
class BomResult:
    version: str
    path: Path  # bom.dsse.json
    adapter_sha256: str
    train: BD.DataSet
    golden: BD.DataSet
    license_id: str
    checks: list[str]


def _key_list(path: Path) -> list[str]:
    return [k for k in path.read_text().split() if k]


def write_bom(
    artifacts: str | Path, day: str, *, private_key: Any, public_keys: Any, teacher_model: str
) -> BomResult:
    """Build, verify and write the BOM of night ``day``'s certified adapter; see the module docstring.

    ``public_keys``: the key (or keys) the certificate and the new BOM must verify with.
    """
    from ratchet_stats import bom_format as B
    from ratchet_stats import certificate as cert
    from ratchet_stats.canonical import canonical_json, sha256_hex
    from ratchet_stats.commitment import Commitment, KeyTree
    from ratchet_stats.dsse import make_statement, sign_statement

    layout = ArtifactLayout(artifacts)
    record = read_record(artifacts, day, needed_by="`evaluation_certificate` and `bom`")
    version = record["version"]
    minted = layout.bom(version)  # written the night that minted the version
    if record.get("recertifies") and minted.exists():
        raise KeepsItsBom(
            f"{version} was re-certified on the golden set of {day}; its BOM stands: {minted}", minted
        )
    cert_file = layout.night_certificate(version, day)  # a re-certified version without a BOM yet: tonight's
    if not cert_file.exists():
        raise BomStepError(
            f"no certificate at {cert_file}: materialise `evaluation_certificate` for {day} first"
        )
    certificate_bytes = cert_file.read_bytes()
    predicate = cert.verify_certificate(certificate_bytes, public_keys)["predicate"]
    if not predicate["certified_tasks"]:
        raise NotCertifiedNoBom(
            f"{version} certified no task: no BOM is produced for an adapter that will not serve"
        )

    train_day = record.get("train_day", day)
    train_c = training_commitment(artifacts, train_day)
    if train_c.rows.root != record.get("train_rows_root", train_c.rows.root):
        raise BomStepError(f"{layout.train_dir(train_day)} changed since {version} was trained on it")
    train_tree = KeyTree(_key_list(layout.train_keys(train_day)))  # the proofs need the tree
    if (train_tree.root, train_tree.size) != (train_c.keys.root, train_c.keys.size):
        raise BomStepError(f"train/day={train_day}/keys.txt does not match the training set's commitment")
    golden_c = golden_commitment(artifacts, day)
    if golden_c.keys.root != predicate["golden"]["root"]:
        raise BomStepError(
            f"the golden set of {day} is not the one {version} was certified on; rerun the night"
        )
    golden_keys = sorted(_key_list(layout.golden_keys(day)))
    try:
        disjoint = train_tree.prove_disjoint(golden_keys)
    except ValueError as exc:
        raise BomStepError(f"training set and golden set overlap: {exc}") from exc
    if (
        Commitment(disjoint["golden"]["root"], disjoint["golden"]["size"]) != golden_c.keys
    ):  # the proof's tree
        raise BomStepError(f"golden/day={day}/keys.txt does not match the golden set's commitment")

    train_labels, train_tree_l = _labels(layout.train_commitment(train_day))
    golden_labels, _ = _labels(layout.golden_commitment(day))
    train = BD.DataSet(
        f"training-set day={train_day}",
        _labelled("teacher-labelled requests (PII redacted), one row per example key", train_labels),
        train_c.keys,
        train_c.rows,
        labels=train_labels,
        labels_tree=train_tree_l,
    )
    golden = BD.DataSet(
        f"golden-set day={day}",
        _labelled("held-out teacher-labelled requests the certificate was computed on", golden_labels),
        golden_c.keys,
        golden_c.rows,
        labels=golden_labels,
    )
    license_id = _base_license(record, day)
    notice = BD.build_notice(
        version=version,
        base_name=record["base"]["name"],
        base_license_id=license_id,
        data_sets=[train, golden],
        teacher_model=teacher_model,
    ).encode("utf-8")
    notice += _governance_notice(artifacts, train_day)
    hyper = record.get("hyperparameters") or {
        k: v for k, v in record["config"].items() if v is not None and k != "num_threads"
    }
    document = BD.build_bom(
        version=version,
        adapter_files=record["files"],
        hyperparameters=hyper,
        base=record["base"],
        base_license_id=license_id,
        train=train,
        golden=golden,
        teacher_model=teacher_model,
        certificate=predicate,
        certificate_sha256=sha256_hex(certificate_bytes),
        notice_sha256=sha256_hex(notice),
        code=BD.code_version(),
        learner={"steps": record.get("steps"), **(record.get("learner") or {})},
        start=record.get("start"),
    )
    document["properties"] += _governance_properties(artifacts, train_day)
    envelope = sign_statement(
        make_statement(B.BOM_PREDICATE, document, B.subjects_for_files(record["files"])), private_key
    )
    try:  # the auditor's check, before anything is published
        report = B.verify_bom(envelope, public_keys, notice=notice, adapter_dir=adapter_path(layout, record))
    except B.BomError as exc:
        raise BomStepError(f"the BOM does not verify ({exc.check}): {exc.message}") from exc

    layout.bom_dir(version).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(layout.bom_notice(version), notice)
    atomic_write_bytes(
        layout.bom_train_keys(version), "".join(k + "\n" for k in train_tree.keys).encode("ascii")
    )
    atomic_write_bytes(
        layout.bom_golden_keys(version), "".join(k + "\n" for k in golden_keys).encode("ascii")
    )
    atomic_write_bytes(
        layout.bom_disjoint_proof(version), json.dumps(disjoint, sort_keys=True).encode("utf-8")
    )
    atomic_write_bytes(layout.bom(version), canonical_json(envelope) + b"\n")
    shutil.copyfile(cert_file, layout.bom_certificate(version))
    return BomResult(
        version=version,
        path=layout.bom(version),
        adapter_sha256=report.adapter_sha256,
        train=train,
        golden=golden,
        license_id=license_id,
        checks=list(report.checks),
    )


def _labels(commitment_path: Path) -> tuple[dict[str, int] | None, Any]:
    """(rows per label source, the label-source tree) a data set's commitment records (None, None when it predates
    label sources)."""
    from ratchet_stats.commitment import Commitment

    doc = json.loads(commitment_path.read_bytes())
    labels = doc.get("labels")
    if not labels:
        return None, None
    if "root" in labels:  # the training set: a tree and counts
        return dict(labels.get("counts") or {}), Commitment(labels["root"], int(labels["size"]))
    return dict(labels), None  # the golden set: counts (its leaves carry the source)


def _labelled(what: str, labels: dict[str, int] | None) -> str:
    """A data set's description, naming who labelled it."""
    if labels and labels.get("people"):
        return f"{what}; {labels['people']} rows labelled by people instead (feedback demonstrations)"
    return what


def _base_license(record: dict[str, Any], day: str) -> str:
    """The base model's licence: the record's ``base_license``. A record written before it was recorded names the
    base by its path (``base_path``): the demo base is known by its marker file among the base's files, any other
    base's licence is read where the path says, and a base no longer there stops the step (never a silent
    NOASSERTION: the signed BOM would change)."""
    from ratchet_core.student_model import is_demo_identity

    if "base_license" in record:
        return str(record["base_license"])
    if is_demo_identity(record.get("base") or {}):
        return BD.DEMO_BASE_LICENSE
    base_path = record.get("base_path", "")
    if not base_path or not Path(base_path).is_dir():
        raise BomStepError(
            f"the adapter record of {day} names its base model by a path that is gone ({base_path or 'none'}): "
            f"materialise `lora_adapter` for {day} again (it reuses the adapter and records the base's licence)"
        )
    return BD.base_license(base_path, False)


# Data governance (ratchet_assets.governance): imported data's provenance and the erasures honoured ---------------
def _import_provenance(artifacts: str | Path, day: str) -> list[dict[str, Any]]:
    """Provenance of every import in the night of ``day`` (``ratchet import`` writes it beside the rows)."""
    layout = ArtifactLayout(artifacts)
    return [
        json.loads(layout.import_provenance(p.parent.name).read_bytes())
        for p in layout.import_files(until=day)
        if layout.import_provenance(p.parent.name).exists()
    ]


def _governance_properties(artifacts: str | Path, day: str) -> list[dict[str, str]]:
    """BOM properties: each import in the night (source, licence, role, input sha256) and the erasures the training
    set honoured (count and digest, from its commitment)."""
    props = [
        {
            "name": f"ratchet:import:{p['import_id']}",
            "value": f"task={p['task']}; role={p['role']}; source={p['source']}; license={p['license']}; "
            f"rows={p['imported']}; sha256={p['input']['sha256']}",
        }
        for p in _import_provenance(artifacts, day)
    ]
    commitment = json.loads(ArtifactLayout(artifacts).train_commitment(day).read_bytes())
    erased = commitment.get("erasures")
    if erased:
        props.append({"name": "ratchet:erasures:honoured", "value": str(erased["honoured"])})
        props.append({"name": "ratchet:erasures:sha256", "value": erased["sha256"]})
    return props


def _governance_notice(artifacts: str | Path, day: str) -> bytes:
    """NOTICE lines for imported data (its source and licence travel with the adapter)."""
    imports = _import_provenance(artifacts, day)
    if not imports:
        return b""
    lines = ["", "## Imported data", ""]
    lines += [
        f"- {p['task']} ({p['role']}, {p['imported']} rows): {p['source']}, licence {p['license']}"
        for p in imports
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")
