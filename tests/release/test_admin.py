"""`ratchet admin` release commands: signed, audited, exported; concurrent with each other and a sensor tick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from ratchet_assets.admin.cli import admin
from ratchet_assets.release import registry
from ratchet_assets.release.control import release_tick
from ratchet_core import manifest as mf
from ratchet_core.control_db import ensure_schema
from ratchet_stats.cli import main as stats_main
from ratchet_stats.keys import public_key_pem, save_private_key
from tests.evidence.certificates import sign_certificate

from .conftest import write_certificate, write_pairs


@pytest.fixture
def setup(tmp_path, key, engine):
    key_file = tmp_path / "signing.key"
    save_private_key(key, key_file)
    url = str(engine.url)
    common = ["--control-db", url, "--signing-key-file", str(key_file)]
    return url, common


def _run(args, ok=True):
    result = CliRunner().invoke(admin, args, catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_admin_changes_are_signed_audited_and_exported(setup, key, engine, tmp_path, capsys):
    url, common = setup
    write_certificate(tmp_path / "artifacts", key, "v1-abc", "tickets", correct=300, n=300)
    promote = ["promote", "v1-abc", "--task", "tickets", "--artifacts", str(tmp_path / "artifacts")]
    _run(["pin", "extract", "--reason", "extract answers look odd", *common])
    _run(["flag", "audit_rate", "0.2", "--reason", "audit more during rollout", *common])
    out = _run([*promote, "--reason", "manual first rollout", "--json", *common])
    released = json.loads(out.output)["manifest"]["tasks"]["tickets"]
    assert released["stage"] == "shadow" and released["threshold"] == 0.0 and not released["forced"]
    _run([*promote, "--reason", "shadow looked fine", *common])
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.task("tickets").stage, m.task("tickets").canary_percent) == ("canary", 5.0)
    assert m.pins == ["extract"] and m.flags.audit_rate == 0.2 and m.actor.startswith("admin:")

    short = _run(["rollback", "--task", "tickets", "--reason", "no", *common], ok=False)
    assert short.exit_code == 2 and "3-500 characters" in short.output
    bad = _run(["flag", "audit_rate", "7", "--reason", "way too much", *common], ok=False)
    assert bad.exit_code == 2 and "between 0 and 1" in bad.output
    _run(["rollback", "--task", "tickets", "--reason", "complaints from support", *common])
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("tickets").stage == "teacher"
    forced = _run([*promote, "--reason", "try again", *common], ok=False)
    assert forced.exit_code == 2 and "--force" in forced.output and "rolled_back" in forced.output
    _run([*promote, "--force", "--reason", "fixed upstream", *common])
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("tickets").forced and m.task("tickets").threshold == 0.0  # still the calibrated threshold

    versions = json.loads(_run(["versions", "--json", "--control-db", url]).output)
    assert {(v["version"], v["task"], v["status"]) for v in versions} == {("v1-abc", "tickets", "shadow")}
    # --status filters; an unknown status is a usage error naming the statuses, and an empty filter does not claim
    # that no version exists (before: 'bogus' listed nothing and said "no versions yet")
    assert "v1-abc" in _run(["versions", "--status", "shadow", "--control-db", url]).output
    live = _run(["versions", "--status", "live", "--control-db", url]).output
    assert "no version is live" in live and "no versions yet" not in live
    bogus = _run(["versions", "--status", "bogus", "--control-db", url], ok=False)
    assert bogus.exit_code == 2 and "rolled_back" in bogus.output and "superseded" in bogus.output

    # A gateway safety event (H5's table) shows up in the audit log next to the signed changes.
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE IF NOT EXISTS gateway_safety_events (id INTEGER PRIMARY KEY, created_at TEXT, kind TEXT,"
            " task TEXT, reason TEXT, actor TEXT, cleared_at TEXT, cleared_reason TEXT)"
        )
        conn.exec_driver_sql(
            "INSERT INTO gateway_safety_events (created_at, kind, task, reason, actor) "
            "VALUES ('2999-01-01T00:00:00', 'pin', 'tools', 'tool calls broken', 'oncall')"
        )
    log = json.loads(_run(["audit-log", "--json", "--control-db", url]).output)
    assert log[0]["source"] == "gateway" and log[0]["target"] == "tools"
    assert [e["action"] for e in log if e["source"] == "control-plane"] == [
        "promote",
        "rollback",
        "promote",
        "promote",
        "flag",
        "pin",
    ]
    assert all(e["manifest_sequence"] for e in log if e["source"] == "control-plane")

    export = tmp_path / "export.ndjson"
    _run(["export", "--out", str(export), *common])
    records = [json.loads(line) for line in export.read_text().splitlines()]
    manifests = [r for r in records if r["type"] == "manifest"]
    assert [r["sequence"] for r in manifests] == list(range(1, 7)) and all(r["verified"] for r in manifests)
    assert sum(r["type"] == "audit" for r in records) == 7
    # Each manifest line carries its signed envelope: the file `ratchet verify manifest` checks offline (README,
    # "Verifying evidence": before it, no command gave a user that file).
    pub_file = tmp_path / "signing.pub"
    pub_file.write_text(public_key_pem(key))
    for r in (manifests[0], manifests[-1]):
        doc = tmp_path / f"manifest-{r['sequence']}.dsse.json"
        doc.write_text(json.dumps(r["envelope"]))
        assert stats_main(["verify", "manifest", str(doc), "--key", str(pub_file), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["predicate"]["sequence"] == r["sequence"]
    tampered = json.loads(json.dumps(manifests[-1]["envelope"]))
    tampered["payload"] = manifests[0]["envelope"]["payload"]
    (tmp_path / "tampered.json").write_text(json.dumps(tampered))
    assert stats_main(["verify", "manifest", str(tmp_path / "tampered.json"), "--key", str(pub_file)]) == 1


@pytest.mark.slow
def test_concurrent_admin_processes_and_a_sensor_tick_keep_one_chain(setup, key, engine, tmp_path):
    url, common = setup
    ensure_schema(engine)
    mf.publish(
        engine, key, lambda m: m.tasks.update(t=mf.TaskRelease(stage="shadow", version="v1")), "start", "ops"
    )
    write_pairs(tmp_path / "lake", "2026-01-02", 1, "v1", "t", [False] * 150)  # the tick will promote
    tasks = [f"task{i}" for i in range(5)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    code = "from ratchet_assets.admin.cli import admin; admin()"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, "pin", t, "--reason", f"pin {t} for the test", *common],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for t in tasks
    ]
    procs.append(
        subprocess.Popen(
            [sys.executable, "-c", code, "flag", "audit_rate", "0.3", "--reason", "more audits", *common],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    )
    tick_result = {}
    sensor = threading.Thread(
        target=lambda: tick_result.update(
            r=release_tick(engine, key, tmp_path / "lake", tmp_path / "artifacts", None)
        )
    )
    sensor.start()
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out.decode()
    sensor.join(timeout=120)
    assert tick_result["r"].published, tick_result["r"].summary()

    with engine.connect() as conn:
        rows = conn.execute(sa.select(mf.release_manifests).order_by(mf.release_manifests.c.sequence)).all()
    assert [r.sequence for r in rows] == list(range(1, 9))  # start + 6 admin changes + 1 promotion, no gaps
    chain = [mf.verify_row(r.sequence, r.envelope, key.public_key()) for r in rows]
    for prev, m in zip(rows, chain[1:], strict=False):
        assert m.previous_digest == prev.digest  # no fork: each one derived from the one before
    final = chain[-1]
    assert final.pins == sorted(tasks) and final.flags.audit_rate == 0.3  # no change lost
    assert (final.task("t").stage, final.task("t").canary_percent) == ("canary", 5.0)


def test_promotion_needs_a_verified_certificate_for_the_task_or_force(setup, key, engine, tmp_path):
    """Unknown, uncertified, wrongly signed: refused with the reason and nothing published; --force is
    recorded in the manifest and the audit log, and the sensor never promotes a forced release further."""
    from ratchet_stats.keys import generate_private_key

    url, common = setup
    artifacts = tmp_path / "artifacts"
    write_certificate(artifacts, key, "v2-weak", "tickets", correct=150, n=300)
    write_certificate(artifacts, key, "v3-extract", "extract", correct=300, n=300)
    write_certificate(artifacts, generate_private_key(), "v4-stranger", "tickets", correct=300, n=300)
    write_certificate(artifacts, key, "v5-lowbar", "tickets", correct=290, n=300)  # certified at 0.9 only
    cases = {
        "v9-unknown": "no evaluation certificate",
        "v2-weak": "not certified for tickets",
        "v3-extract": "does not evaluate tickets",
        "v4-stranger": "signature",
        "v5-lowbar": "< the release target 0.95",
    }
    for version, why in cases.items():
        for to in ("shadow", "live"):
            res = _run(
                ["promote", version, "--task", "tickets", "--to", to, "--artifacts", str(artifacts)]
                + ["--reason", "ship it now", *common],
                ok=False,
            )
            assert res.exit_code == 2 and why in res.output and "nothing was published" in res.output, (
                res.output
            )
    assert mf.latest_verified(engine, key.public_key()) == (None, 0)

    _run(
        ["promote", "v9-unknown", "--task", "tickets", "--to", "shadow", "--artifacts", str(artifacts)]
        + ["--force", "--reason", "vendor adapter, checked by hand", *common]
    )
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (
        m.task("tickets").stage == "shadow"
        and m.task("tickets").forced
        and m.task("tickets").threshold is None
    )
    (entry,) = registry.read_audit_log(engine)
    assert (
        entry["details"]["forced"] is True
        and "no evaluation certificate" in entry["details"]["overridden"][0]
    )

    write_pairs(tmp_path / "lake", "2026-01-02", 1, "v9-unknown", "tickets", [False] * 300)
    r = release_tick(engine, key, tmp_path / "lake", artifacts, None)
    assert not r.decisions and "forced it here" in r.summary()  # (v3-extract was admitted on extract)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.task("tickets").stage == "shadow"


def test_versions_lists_a_certificate_the_sensor_has_not_seen_yet(setup, key, engine, tmp_path, monkeypatch):
    """The demo's fourth night: its certificate was written after the sensor's last tick, then everything
    stopped. `admin versions` verifies and lists it anyway; a certificate signed by an unknown key is not."""
    from ratchet_stats.keys import generate_private_key

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    url, _ = setup
    artifacts = tmp_path / "artifacts"
    write_certificate(artifacts, key, "v3-night3", "tickets", correct=300, n=300, day="2026-01-03")
    release_tick(engine, key, tmp_path / "lake", artifacts, None)  # the last tick: v3 admitted to shadow
    write_certificate(artifacts, key, "v4-night4", "tickets", correct=300, n=300, day="2026-01-04")
    write_certificate(artifacts, generate_private_key(), "v5-forged", "tickets", correct=300, n=300)
    res = CliRunner().invoke(
        admin, ["versions", "--json", "--control-db", url, "--artifacts", str(artifacts)]
    )
    assert res.exit_code == 0, res.output
    listed = {(v["version"], v["status"], v["day"]) for v in json.loads(res.stdout)}
    assert listed == {("v3-night3", "shadow", "2026-01-03"), ("v4-night4", "candidate", "2026-01-04")}
    assert (
        "v5-forged.dsse.json: not registered" in res.stderr
        and "no signature is by a trusted key" in res.stderr
    )


@pytest.mark.parametrize(
    "args",
    [
        ["task", "set", "evil\r\nFORGED: promote", "--target", "0.9"],
        ["task", "set", "<script>alert(1)</script>", "--target", "0.9"],
        ["pin", "tickets\n"],
        ["unpin", "../tickets"],
        ["rollback", "--task", "<b>tickets</b>"],
        ["promote", "v1/../../keys", "--task", "tickets", "--force"],
        ["retire", "v1-abc", "--task", "tick ets"],
    ],
)
def test_names_with_newlines_markup_or_paths_are_refused_before_anything_is_signed(setup, engine, args):
    url, common = setup
    refused = _run([*args, "--reason", "an operator's typo", *common], ok=False)
    assert refused.exit_code == 2 and "is not a valid" in refused.output, refused.output
    ensure_schema(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(mf.release_manifests)).scalar() == 0
    assert registry.read_audit_log(engine) == []


def test_publishing_refuses_a_new_task_or_version_name_that_breaks_the_rule(key, engine):
    ensure_schema(engine)
    with pytest.raises(mf.ManifestError, match="nothing was published: task 'a\\\\nb' is not a valid task"):
        mf.publish(engine, key, lambda m: m.pins.append("a\nb"), "pin from a script", "test")
    bad_version = mf.TaskRelease(stage="live", version="v1\r\n<x>")
    with pytest.raises(mf.ManifestError, match="is not a valid version"):
        mf.publish(engine, key, lambda m: m.tasks.update(tickets=bad_version), "release by hand", "test")
    published = mf.publish(engine, key, lambda m: m.pins.append("tickets"), "pin tickets", "test")
    assert published.pins == ["tickets"]


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "--task", "a/../b", "--from", "2026-01-01"],
        ["replay", "--task", "tickets", "--from", "2026-01-01\n"],
        ["cost", "report", "--day", "2026-02-30"],
        ["admin", "export-adapter", "--version", "../keys", "--out", "x"],
        ["export", "--out", "x", "--client", "acme\r\nx"],
        ["admin", "erase", "--client", "<i>acme</i>", "--reason", "offboarding acme"],
    ],
)
def test_every_control_plane_command_taking_a_name_refuses_a_bad_one(tmp_path, args):
    from ratchet_cli.main import cli

    result = CliRunner(env={"RATCHET_HOME": str(tmp_path / "home")}).invoke(cli, args)
    assert result.exit_code == 2 and "is not a valid" in result.output, result.output
    assert not (tmp_path / "home").exists()


def test_versions_shows_each_versions_certificates_chained(setup, key, engine, tmp_path, monkeypatch):
    """A later night whose adapter is v3's content writes ``v3@<day>.dsse.json``: `admin versions` lists v3 once per
    task with both certificates, the second chained to the first."""
    from ratchet_core.layout import ArtifactLayout

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    url, _ = setup
    artifacts = tmp_path / "artifacts"
    write_certificate(artifacts, key, "v3-night3", "tickets", correct=300, n=300, day="2026-01-03")
    again = ArtifactLayout(artifacts).recertificate("v3-night3", "2026-01-04")
    sign_certificate(artifacts, key, "v3-night3", "tickets", correct=298, n=300, day="2026-01-04", path=again)
    release_tick(
        engine, key, tmp_path / "lake", artifacts, None
    )  # registers both (the CLI trusts the key history)
    res = CliRunner().invoke(
        admin, ["versions", "--json", "--control-db", url, "--artifacts", str(artifacts)]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [v["version"] for v in rows] == ["v3-night3"], (rows, res.stderr)
    row = rows[0]
    assert [c["day"] for c in row["certificates"]] == ["2026-01-03", "2026-01-04"]
    assert row["certificates"][1]["previous_digest"] == row["certificates"][0]["digest"]
    text = CliRunner().invoke(admin, ["versions", "--control-db", url, "--artifacts", str(artifacts)]).output
    assert (
        "certificate 2026-01-04 certificates/v3-night3@2026-01-04.dsse.json" in text and "chained to" in text
    )
