"""`ratchet keygen` and `ratchet verify manifest|certificate` as a user runs them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from ratchet_stats import cli_verify, dsse, release_manifest
from ratchet_stats.canonical import canonical_json, digest
from ratchet_stats.cli import main
from ratchet_stats.evidence import DocumentFormat
from ratchet_stats.keys import load_private_key_file, private_key_pem, public_key_b64, public_key_pem

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "https://ratchet.dev/release-manifest/v1"


def _manifest(sequence: int = 4) -> dict:
    return {
        "sequence": sequence,
        "issued_at": "2025-01-02T03:04:05Z",
        "previous_digest": "00" * 32,
        "tasks": {
            "tickets": {"stage": "canary", "version": "v3-abc123", "canary_percent": 10.0, "threshold": 0.8}
        },
        "flags": {
            "student_disabled": False,
            "releases_frozen": False,
            "training_paused": False,
            "audit_rate": 0.05,
        },
        "pins": [],
        "reason": "canary evidence",
        "actor": "sensor",
    }


def _write_signed(path: Path, key, predicate: dict, predicate_type: str = MANIFEST) -> Path:
    subject = [
        {"name": f"release-manifest/{predicate.get('sequence')}", "digest": {"sha256": digest(predicate)}}
    ]
    envelope = dsse.sign_statement(dsse.make_statement(predicate_type, predicate, subject), key)
    path.write_bytes(canonical_json(envelope))
    return path


def test_keygen_writes_a_private_file_and_prints_only_public_material(tmp_path, capsys):
    out, pub = tmp_path / "keys" / "signing.key", tmp_path / "signing.pub"
    assert main(["keygen", "--out", str(out), "--public-out", str(pub)]) == 0
    printed = capsys.readouterr().out
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    key = load_private_key_file(out)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert hashlib.sha256(raw).hexdigest() in printed
    assert base64.b64encode(raw).decode() in printed
    pem_body = "".join(private_key_pem(key).splitlines()[1:-1])
    assert pem_body not in printed
    assert pub.read_text() == public_key_pem(key)


def test_keygen_refuses_to_overwrite_without_force(tmp_path, capsys):
    out = tmp_path / "k"
    assert main(["keygen", "--out", str(out), "--format", "base64", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["private_key_file"] == str(out) and "private_key" not in first
    before = out.read_bytes()
    assert main(["keygen", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert main(["keygen", "--out", str(out), "--force", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert out.read_bytes() != before and second["key_id"] != first["key_id"]


def test_keygen_stdout_only_when_asked(tmp_path, capsys):
    assert main(["keygen", "--stdout", "--format", "base64"]) == 0
    captured = capsys.readouterr()
    key_file = tmp_path / "k"
    key_file.write_text(captured.out)
    key = load_private_key_file(key_file)
    assert public_key_b64(key) in captured.err and public_key_b64(key) not in captured.out
    with pytest.raises(SystemExit) as exc:  # neither --out nor --stdout
        main(["keygen"])
    assert exc.value.code == 2


def test_verify_manifest_ok_prints_subject_and_key_id(tmp_path, capsys, signing_key):
    predicate = _manifest()
    doc = _write_signed(tmp_path / "m.json", signing_key, predicate)
    assert main(["verify", "manifest", str(doc), "--key", public_key_b64(signing_key)]) == 0
    out = capsys.readouterr().out
    assert digest(predicate) in out and "release-manifest/4" in out
    raw = signing_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert hashlib.sha256(raw).hexdigest() in out
    assert main(["verify", "manifest", str(doc), "--key", public_key_b64(signing_key), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["predicate"] == predicate


def test_verify_fails_naming_the_check(tmp_path, capsys, signing_key, other_key):
    good = _write_signed(tmp_path / "m.json", signing_key, _manifest())
    pub = public_key_b64(signing_key)

    def run(*argv: str) -> dict:
        code = main(["verify", *argv, "--json"])
        data = json.loads(capsys.readouterr().out)
        assert code == 1 and data["ok"] is False
        return data

    assert run("manifest", str(good), "--key", public_key_b64(other_key))["check"] == "keyid"
    assert run("certificate", str(good), "--key", pub)["check"] == "predicate-type"
    # A changed predicate re-encoded into the payload, signature kept: the signature check catches it.
    envelope = json.loads(good.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["tasks"]["tickets"]["canary_percent"] = 100.0
    envelope["payload"] = base64.b64encode(canonical_json(statement)).decode()
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(envelope))
    assert run("manifest", str(forged), "--key", pub)["check"] == "signature"
    # Signed, but not a valid manifest: the predicate checker names it.
    bad = _manifest()
    bad["tasks"]["tickets"]["stage"] = "everywhere"
    data = run("manifest", str(_write_signed(tmp_path / "bad.json", signing_key, bad)), "--key", pub)
    assert data["check"] == "predicate" and "stage" in data["error"]
    # Human output goes to stderr with the check named.
    assert main(["verify", "manifest", str(forged), "--key", pub]) == 1
    assert "FAILED (signature)" in capsys.readouterr().err


def test_documents_are_registries_of_formats(tmp_path, capsys, signing_key, monkeypatch):
    doc = _write_signed(tmp_path / "m.json", signing_key, _manifest())
    pub = public_key_b64(signing_key)
    # `verify manifest` runs the check of the format its predicate type names.
    cursed = DocumentFormat(MANIFEST, lambda st: [f"sequence {st['predicate']['sequence']} is cursed"], list)
    monkeypatch.setitem(cli_verify.DOCUMENTS, "manifest", ((cursed,), "verify a signed release manifest"))
    assert main(["verify", "manifest", str(doc), "--key", pub, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"] == "sequence 4 is cursed"
    # A second version of a document is one more format: either type verifies, each by its own check.
    other = "https://example.test/thing/v2"
    v2 = DocumentFormat(
        other, lambda st: [] if st["predicate"].get("fine") else ["not fine"], lambda p: ["fine"]
    )
    formats = (release_manifest.FORMAT, v2)
    keys = [signing_key.public_key()]
    assert cli_verify.verify_document(doc.read_bytes(), keys, formats).ok
    ok = _write_signed(tmp_path / "t.json", signing_key, {"fine": True}, other)
    assert cli_verify.verify_document(ok.read_bytes(), keys, formats).summary == ["fine"]
    not_ok = _write_signed(tmp_path / "u.json", signing_key, {"fine": False}, other)
    report = cli_verify.verify_document(not_ok.read_bytes(), keys, formats)
    assert (report.ok, report.check, report.problems) == (False, "predicate", ["not fine"])
    # A type no format names fails closed, naming the types it would take.
    report = cli_verify.verify_document(ok.read_bytes(), keys, (release_manifest.FORMAT,))
    assert (
        (report.ok, report.check) == (False, "predicate-type")
        and MANIFEST in report.error
        and other in report.error
    )


def test_key_arguments(tmp_path, capsys, signing_key, other_key):
    doc = _write_signed(tmp_path / "m.json", signing_key, _manifest())
    both = f"{public_key_b64(other_key)},{public_key_b64(signing_key)}"
    assert main(["verify", "manifest", str(doc), "--key", both]) == 0
    key_file = tmp_path / "trusted.pub"
    key_file.write_text(public_key_pem(other_key) + public_key_b64(signing_key) + "\n")
    assert main(["verify", "manifest", str(doc), "--key-file", str(key_file)]) == 0
    private_file = tmp_path / "signing.key"
    private_file.write_text(private_key_pem(signing_key))
    assert main(["verify", "manifest", str(doc), "--key", str(private_file)]) == 0
    capsys.readouterr()
    assert main(["verify", "manifest", str(doc), "--key", "not-a-key"]) == 2
    assert "ratchet keygen" in capsys.readouterr().err
    assert main(["verify", "manifest", str(doc)]) == 2
    assert "--key" in capsys.readouterr().err
    assert main(["verify", "manifest", str(tmp_path / "missing.json"), "--key", both]) == 2
    assert "cannot read" in capsys.readouterr().err
    # A key path that is not there (a home the night made without `ratchet init`: no signing.pub) says so; a
    # base64 key may hold "/" too, and one that parses is still a key.
    missing = tmp_path / "keys" / "signing.pub"
    assert main(["verify", "manifest", str(doc), "--key", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--key {missing}: no such file" in err and "ratchet init" in err and "neither PEM" not in err
    assert main(["verify", "manifest", str(doc), "--key", f"{public_key_b64(signing_key)},{missing}"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["verify", "manifest", str(doc), "--key", "abc/def"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_console_scripts_help():
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    keygen = subprocess.run(
        [sys.executable, "-m", "ratchet_stats", "keygen", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert keygen.returncode == 0 and "--public-out" in keygen.stdout and "--stdout" in keygen.stdout
    ratchet = Path(sys.executable).with_name("ratchet")
    verify = subprocess.run(
        [str(ratchet), "verify", "manifest", "--help"], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert verify.returncode == 0 and "--key-file" in verify.stdout and "release-manifest/v1" in verify.stdout


def test_verify_manifest_shows_and_checks_the_audit_streams_inclusion_probabilities(
    tmp_path, capsys, signing_key
):
    """A release's audit rate and targeted audit rate are what a reader of the ledger needs to recompute each pair
    row's inclusion probability: `verify manifest` prints them and refuses one out of range."""
    predicate = _manifest()
    predicate["tasks"]["tickets"].update(previous_live="v2-old", audit_rate=0.25, target_audit_rate=1.0)
    pub = public_key_b64(signing_key)
    assert (
        main(
            [
                "verify",
                "manifest",
                str(_write_signed(tmp_path / "m.json", signing_key, predicate)),
                "--key",
                pub,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "audit rate 0.25" in out and "targeted audit rate 1 (where it differs from live)" in out
    for bad in (0.0, 1.5, "1", True):
        predicate["tasks"]["tickets"]["target_audit_rate"] = bad
        doc = _write_signed(tmp_path / "bad.json", signing_key, predicate)
        assert main(["verify", "manifest", str(doc), "--key", pub, "--json"]) == 1
        data = json.loads(capsys.readouterr().out)
        assert data["check"] == "predicate" and "target_audit_rate" in data["error"]
