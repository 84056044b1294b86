"""``bom``: the certified adapter's signed CycloneDX 1.6 ML-BOM, its NOTICE.md and its training-set proofs.

Runs only after ``evaluation_certificate``'s blocking check passed. Writes ``<artifacts>/boms/<version>/``:
``bom.dsse.json`` (DSSE envelope, in-toto Statement, predicateType ``https://cyclonedx.org/bom``; subjects = the
adapter files), ``NOTICE.md`` (base model license, every data source; its sha256 is in the BOM),
``train-keys.txt`` / ``golden-keys.txt`` (sorted example keys, for ``ratchet proof make``) and
``disjoint.proof.json`` (every golden key absent from the training set, checkable with
``ratchet verify proof --bom bom.dsse.json --proof disjoint.proof.json --key PUB``). The BOM is verified with the
auditor's own code (``ratchet_stats.bom.verify_bom``) before the asset succeeds.
"""

import json
import shutil
from pathlib import Path

import dagster as dg

from ratchet_assets.defs.evaluation_certificate import certificate_path
from ratchet_assets.defs.lora_adapter import day_pointer, train_dir
from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import RatchetPaths, Signer


def bom_dir(artifacts: Path, version: str) -> Path:
    return artifacts / "boms" / version


@dg.asset(
    partitions_def=daily_partitions,
    deps=["evaluation_certificate"],
    kinds={"json"},
    group_name="evidence",
)
def bom(context: dg.AssetExecutionContext, paths: RatchetPaths, signer: Signer) -> dg.MaterializeResult:
    """The signed ML-BOM (CycloneDX 1.6) and NOTICE.md of the night's certified adapter."""
    from ratchet_assets.night import atomic_write_bytes
    from ratchet_assets.night import bom_builder as BB
    from ratchet_assets.night.evaluate import golden_commitments, load_golden
    from ratchet_core.settings import load_settings
    from ratchet_core.student_model import is_demo_base
    from ratchet_stats import bom as B
    from ratchet_stats import certificate as cert
    from ratchet_stats.canonical import canonical_json, sha256_hex
    from ratchet_stats.commitment import Commitment, KeyTree
    from ratchet_stats.dsse import make_statement, sign_statement, verify_statement

    day = context.partition_key
    artifacts = paths.artifacts_root()
    pointer = day_pointer(artifacts, day)
    if not pointer.exists():
        raise dg.Failure(
            f"no adapter for {day}: materialise `lora_adapter` and `evaluation_certificate` first"
        )
    record = json.loads(pointer.read_text())
    version = record["version"]
    cert_file = certificate_path(artifacts, version)
    if not cert_file.exists():
        raise dg.Failure(
            f"no certificate at {cert_file}: materialise `evaluation_certificate` for {day} first"
        )
    public = signer.public_key()
    predicate = verify_statement(cert_file.read_bytes(), public, cert.PREDICATE_TYPE)["predicate"]
    if not predicate["certified_tasks"]:
        raise dg.Failure(
            f"{version} certified no task: no BOM is produced for an adapter that will not serve"
        )

    train_folder = train_dir(artifacts, record.get("train_day", day))
    train_keys = [k for k in (train_folder / "keys.txt").read_text().split() if k]
    train_tree = KeyTree(train_keys)
    lines = (train_folder / "train.jsonl").read_bytes().splitlines()
    from ratchet_stats import merkle

    train_rows = Commitment(merkle.MerkleTree(lines).root().hex(), len(lines))
    if train_rows.root != record.get("train_rows_root", train_rows.root):
        raise dg.Failure(f"{train_folder}/train.jsonl changed since {version} was trained on it")
    golden = load_golden(artifacts, day)
    golden_keys, golden_rows = golden_commitments(golden)
    if golden_keys.root != predicate["golden"]["root"]:
        raise dg.Failure(
            f"the golden set of {day} is not the one {version} was certified on; rerun the night"
        )
    try:
        disjoint = train_tree.prove_disjoint(g.key for g in golden)
    except ValueError as exc:
        raise dg.Failure(f"training set and golden set overlap: {exc}") from exc

    train = BB.DataSet(
        f"training-set day={record.get('train_day', day)}",
        "teacher-labelled requests (PII redacted), one row per example key",
        Commitment(train_tree.root, train_tree.size),
        train_rows,
    )
    golden_set = BB.DataSet(
        f"golden-set day={day}",
        "held-out teacher-labelled requests the certificate was computed on",
        golden_keys,
        golden_rows,
    )
    base_path = record.get("base_path", "")
    license_id = BB.base_license(base_path, bool(base_path) and is_demo_base(base_path))
    teacher = load_settings().teacher_model
    notice = BB.build_notice(
        version=version,
        base_name=record["base"]["name"],
        base_license_id=license_id,
        data_sets=[train, golden_set],
        teacher_model=teacher,
    ).encode("utf-8")
    hyper = record.get("hyperparameters") or {
        k: v for k, v in record["config"].items() if v is not None and k != "num_threads"
    }
    document = BB.build_bom(
        version=version,
        adapter_files=record["files"],
        hyperparameters=hyper,
        base=record["base"],
        base_license_id=license_id,
        train=train,
        golden=golden_set,
        teacher_model=teacher,
        certificate=predicate,
        certificate_sha256=sha256_hex(cert_file.read_bytes()),
        notice_sha256=sha256_hex(notice),
        code=BB.code_version(),
    )
    envelope = sign_statement(
        make_statement(B.BOM_PREDICATE, document, B.subjects_for_files(record["files"])), signer.private_key()
    )
    try:  # the auditor's check, before anything is published
        report = B.verify_bom(envelope, public, notice=notice, adapter_dir=record["adapter_dir"])
    except B.BomError as exc:
        raise dg.Failure(f"the BOM does not verify ({exc.check}): {exc.message}") from exc

    out = bom_dir(artifacts, version)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "NOTICE.md", notice)
    atomic_write_bytes(out / "train-keys.txt", "".join(k + "\n" for k in train_tree.keys).encode("ascii"))
    atomic_write_bytes(
        out / "golden-keys.txt", "".join(k + "\n" for k in sorted(g.key for g in golden)).encode("ascii")
    )
    atomic_write_bytes(out / "disjoint.proof.json", json.dumps(disjoint, sort_keys=True).encode("utf-8"))
    atomic_write_bytes(out / "bom.dsse.json", canonical_json(envelope) + b"\n")
    shutil.copyfile(cert_file, out / "certificate.dsse.json")
    return dg.MaterializeResult(
        metadata={
            "version": version,
            "adapter_sha256": dg.MetadataValue.text(report.adapter_sha256),
            "train_key_root": dg.MetadataValue.text(train_tree.root),
            "train_rows": dg.MetadataValue.int(train_rows.size),
            "golden_key_root": dg.MetadataValue.text(golden_keys.root),
            "golden_rows": dg.MetadataValue.int(golden_keys.size),
            "base_license": license_id,
            "checks": ", ".join(report.checks),
            "dagster/uri": dg.MetadataValue.path(str(out / "bom.dsse.json")),
        }
    )
