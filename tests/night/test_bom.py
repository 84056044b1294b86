"""The signed ML-BOM: valid CycloneDX 1.6, verifies offline, and every tampering is named."""

from __future__ import annotations

import copy
import json

import pytest

from ratchet_assets.night import bom_document as BD
from ratchet_stats import bom_format as B
from ratchet_stats import certificate as CERT
from ratchet_stats import commitment as C
from ratchet_stats.canonical import sha256_hex
from ratchet_stats.dsse import make_statement, sign_statement
from ratchet_stats.keys import generate_private_key, public_key_b64
from tests.evidence.auditor import key_of, run_cli, write_json

TRAIN_KEYS = [key_of(i) for i in range(0, 120, 2)]
GOLDEN_KEYS = [key_of(i) for i in range(1, 40, 2)]


def _certificate() -> dict:
    conf = [0.99] * 95 + [0.3] * 5
    correct = [True] * 95 + [False] * 5
    return CERT.build_certificate(
        version="v1-0123abcd",
        base={"name": "ratchet-demo-base", "sha256": "e" * 64},
        adapter_sha256="0" * 64,
        golden_root=C.key_commitment(GOLDEN_KEYS).root,
        golden_size=len(GOLDEN_KEYS),
        target=0.9,
        delta=0.05,
        tasks=[CERT.TaskOutcomes("tickets", "label", conf, correct)],
    )


@pytest.fixture()
def built(tmp_path, signing_key):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    (adapter / "adapter_model.safetensors").write_bytes(b"\x00weights" * 10)
    files = CERT.adapter_file_hashes(adapter)
    train = BD.DataSet(
        "training-set 2026-01-02",
        "teacher answers, 7 days",
        C.key_commitment(TRAIN_KEYS),
        C.row_commitment({"i": i} for i in range(60)),
    )
    golden = BD.DataSet(
        "golden-set 2026-01-02",
        "held-out teacher answers",
        C.key_commitment(GOLDEN_KEYS),
        C.row_commitment({"g": i} for i in range(20)),
    )
    notice = BD.build_notice(
        version="v1-0123abcd",
        base_name="ratchet-demo-base",
        base_license_id="Apache-2.0",
        data_sets=[train, golden],
        teacher_model="openai/demo-teacher",
    ).encode()
    cert = _certificate()
    kwargs = dict(
        version="v1-0123abcd",
        adapter_files=files,
        hyperparameters={"rank": 8, "lr": 0.005, "target_modules": "all-linear"},
        base={"name": "ratchet-demo-base", "sha256": "e" * 64, "files": {"config.json": "f" * 64}},
        base_license_id="Apache-2.0",
        train=train,
        golden=golden,
        teacher_model="openai/demo-teacher",
        certificate=cert,
        certificate_sha256="1" * 64,
        notice_sha256=sha256_hex(notice),
        code="0.1.0+gtest",
        learner={
            "steps": 192, "epochs_run": 8, "best_epoch": 8, "stopped": "all 8 epochs", "validation_rows": 40,
            "validation_accuracy": 1.0, "validation_accuracy_per_epoch": [0.5, 1.0],
            "validation_per_task": {"moods": {"rows": 40, "accuracy": 1.0}},
        },
    )  # fmt: skip
    bom = BD.build_bom(**kwargs)
    stmt = make_statement(B.BOM_PREDICATE, bom, B.subjects_for_files(files))
    envelope = sign_statement(stmt, signing_key)
    (tmp_path / "NOTICE.md").write_bytes(notice)
    write_json(tmp_path / "bom.dsse.json", envelope)
    return {
        "dir": tmp_path,
        "adapter": adapter,
        "bom": bom,
        "stmt": stmt,
        "envelope": envelope,
        "notice": notice,
        "kwargs": kwargs,
        "files": files,
    }


def test_bom_carries_the_learners_choices(built):
    [adapter] = [c for c in built["bom"]["components"] if c["bom-ref"].startswith(B.ADAPTER_REF_PREFIX)]
    props = B.properties(adapter)
    assert props["ratchet:learner:steps"] == "192" and props["ratchet:learner:epochs_run"] == "8"
    assert props["ratchet:learner:validation_accuracy:moods"] == "1.0"
    assert props["ratchet:learner:validation_accuracy_per_epoch"] == "0.5,1.0"
    assert props["ratchet:learner:stopped"] == "all 8 epochs"


def test_bom_is_valid_cyclonedx_1_6(built):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(built["bom"]), all_errors=True)
    assert errors is None, [str(e) for e in errors]


def test_bom_verifies_with_notice_and_files(built, signing_key):
    report = B.verify_bom(
        built["envelope"], signing_key.public_key(), notice=built["notice"], adapter_dir=built["adapter"]
    )
    assert report.checks == [
        "signature",
        "statement",
        "cyclonedx",
        "components",
        "subjects",
        "notice",
        "files",
    ]
    assert report.train == B.DataCommitment(
        C.key_commitment(TRAIN_KEYS).root, 60, C.row_commitment({"i": i} for i in range(60)).root, 60
    )
    assert report.golden.key_count == len(GOLDEN_KEYS)
    assert "Apache-2.0" in built["notice"].decode() and "golden-set 2026-01-02" in built["notice"].decode()


def test_same_inputs_same_bom_bytes(built):
    from ratchet_stats.canonical import canonical_json

    again = copy.deepcopy(built["bom"])
    assert canonical_json(again) == canonical_json(built["bom"])
    assert built["bom"]["serialNumber"].startswith("urn:uuid:")


def test_tampering_is_named(built, signing_key):
    pub = signing_key.public_key()
    with pytest.raises(B.BomError) as exc:
        B.verify_bom(built["envelope"], generate_private_key().public_key())
    assert exc.value.check == "signature"
    with pytest.raises(B.BomError) as exc:
        B.verify_bom(built["envelope"], pub, notice=built["notice"] + b"\nextra")
    assert exc.value.check == "notice"
    (built["adapter"] / "adapter_model.safetensors").write_bytes(b"other weights")
    with pytest.raises(B.BomError) as exc:
        B.verify_bom(built["envelope"], pub, adapter_dir=built["adapter"])
    assert exc.value.check == "files"
    # a re-signed BOM whose subjects do not match the listed adapter files
    stmt = copy.deepcopy(built["stmt"])
    stmt["subject"][0]["digest"]["sha256"] = "9" * 64
    with pytest.raises(B.BomError) as exc:
        B.verify_bom(sign_statement(stmt, signing_key), pub)
    assert exc.value.check == "subjects"
    # a re-signed BOM without the golden data component
    stmt = copy.deepcopy(built["stmt"])
    stmt["predicate"]["components"] = [
        c for c in stmt["predicate"]["components"] if c["bom-ref"] != B.GOLDEN_REF
    ]
    with pytest.raises(B.BomError) as exc:
        B.verify_bom(sign_statement(stmt, signing_key), pub)
    assert exc.value.check == "components"


def test_cli_verify_bom_and_proofs(built, signing_key):
    d = built["dir"]
    pub = public_key_b64(signing_key.public_key())
    bom = str(d / "bom.dsse.json")
    res = run_cli(
        "verify",
        "bom",
        bom,
        "--key",
        pub,
        "--notice",
        str(d / "NOTICE.md"),
        "--adapter-dir",
        str(built["adapter"]),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["train"]["key_count"] == 60
    res = run_cli("verify", "bom", bom, "--key", public_key_b64(generate_private_key().public_key()))
    assert res.returncode == 1 and "signature" in res.stderr

    tree = C.KeyTree(TRAIN_KEYS)
    member = write_json(d / "member.json", tree.prove(TRAIN_KEYS[3]))
    absent = write_json(d / "absent.json", tree.prove(key_of(7)))
    disjoint = write_json(d / "disjoint.json", tree.prove_disjoint(GOLDEN_KEYS))
    forged_obj = {**tree.prove(TRAIN_KEYS[3]), "key": key_of(7)}
    forged = write_json(d / "forged.json", forged_obj)
    for proof, expect in ((member, "member"), (absent, "absent"), (disjoint, "absent")):
        res = run_cli(
            "verify", "proof", "--bom", bom, "--proof", str(proof), "--key", pub, "--expect", expect
        )
        assert res.returncode == 0, res.stderr
    res = run_cli("verify", "proof", "--bom", bom, "--proof", str(absent), "--key", pub, "--expect", "member")
    assert res.returncode == 1
    res = run_cli("verify", "proof", "--bom", bom, "--proof", str(forged), "--key", pub, "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["check"] == "inclusion"
    res = run_cli("verify", "proof", "--bom", bom, "--proof", str(member))  # no key: works, but warns
    assert res.returncode == 0 and "NOT checked" in res.stderr


WARM = {
    "mode": "warm",
    "reason": "from live v3-89abcdef",
    "parent": {
        "version": "v3-89abcdef",
        "adapter_sha256": "a" * 64,
        "train_day": "2026-01-01",
        "chosen_as": "live",
    },
    "new_rows": 140,
    "replay_rows": 35,
    "replay_rule": 'sha256("replay:" key) < 0.25, at most 1000 rows, of the days up to 2026-01-01',
}


def test_a_warm_started_bom_names_its_parent_and_verifies_and_an_older_bom_still_does(built, signing_key):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    # the fixture's BOM is built without a start, as every BOM before warm starts: no start fields, verifies
    [old] = [c for c in built["bom"]["components"] if c["bom-ref"].startswith(B.ADAPTER_REF_PREFIX)]
    assert "pedigree" not in old and not any(k.startswith(B.P_START) for k in B.properties(old))

    bom = BD.build_bom(**built["kwargs"], start=WARM)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom), all_errors=True) is None
    [adapter] = [c for c in bom["components"] if c["bom-ref"].startswith(B.ADAPTER_REF_PREFIX)]
    props = B.properties(adapter)
    assert props[B.P_START_MODE] == "warm" and props[B.P_PARENT_VERSION] == "v3-89abcdef"
    assert props[B.P_PARENT_SHA256] == "a" * 64 and props["ratchet:start:replay_rows"] == "35"
    [ancestor] = adapter["pedigree"]["ancestors"]
    assert ancestor["version"] == "v3-89abcdef" and ancestor["hashes"][0]["content"] == "a" * 64

    def envelope(doc):
        return sign_statement(
            make_statement(B.BOM_PREDICATE, doc, B.subjects_for_files(built["files"])), signing_key
        )

    B.verify_bom(
        envelope(bom), signing_key.public_key(), notice=built["notice"], adapter_dir=built["adapter"]
    )

    # a pedigree that names another parent than the properties, or a cold start with a parent, is refused
    forged = copy.deepcopy(bom)
    [a] = [c for c in forged["components"] if c["bom-ref"].startswith(B.ADAPTER_REF_PREFIX)]
    a["pedigree"]["ancestors"][0]["hashes"][0]["content"] = "b" * 64
    with pytest.raises(B.BomError, match="pedigree does not name its parent") as exc:
        B.verify_bom(envelope(forged), signing_key.public_key())
    assert exc.value.check == "components"
    cold = BD.build_bom(**built["kwargs"], start={"mode": "cold", "reason": "the base changed"})
    B.verify_bom(envelope(cold), signing_key.public_key())
    cold_with_parent = copy.deepcopy(cold)
    [a] = [c for c in cold_with_parent["components"] if c["bom-ref"].startswith(B.ADAPTER_REF_PREFIX)]
    a["pedigree"] = copy.deepcopy(adapter["pedigree"])
    with pytest.raises(B.BomError, match="cold-started adapter names a parent"):
        B.verify_bom(envelope(cold_with_parent), signing_key.public_key())


def test_label_sources_are_recorded_and_must_account_for_every_row(built, signing_key):
    import dataclasses

    labels_tree = C.row_commitment({"line": i} for i in range(60))
    train = BD.DataSet(
        "training-set 2026-01-02",
        "teacher answers; 12 rows labelled by people instead",
        C.key_commitment(TRAIN_KEYS),
        C.row_commitment({"i": i} for i in range(60)),
        labels={"people": 12, "teacher": 48},
        labels_tree=labels_tree,
    )
    comp = BD._data_component(B.TRAIN_REF, train)
    props = B.properties(comp)
    assert props["ratchet:labels:people"] == "12" and props[B.P_LABEL_ROOT] == labels_tree.root
    assert "people-labelled" in comp["data"][0]["classification"]
    pub = signing_key.public_key()
    stmt = copy.deepcopy(built["stmt"])
    comps = stmt["predicate"]["components"]
    i = next(n for n, c in enumerate(comps) if c["bom-ref"] == B.TRAIN_REF)
    comps[i] = comp
    assert B.verify_bom(sign_statement(stmt, signing_key), pub).train.row_count == 60
    # counts that leave rows unaccounted for are refused
    comps[i] = BD._data_component(
        B.TRAIN_REF, dataclasses.replace(train, labels={"people": 12, "teacher": 40})
    )
    with pytest.raises(B.BomError) as exc:
        B.verify_bom(sign_statement(stmt, signing_key), pub)
    assert exc.value.check == "components" and "label sources" in exc.value.message
