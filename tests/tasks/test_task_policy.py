"""Per-task policy: set with `ratchet admin task set` (reason required), signed in the manifest, read by routing,
the comparator, the golden split, the certificate and the release policy."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ratchet_assets.admin.cli import admin
from ratchet_core import manifest as mf
from ratchet_core.control_db import make_engine
from ratchet_core.routing import SafetyState, route
from ratchet_core.task_policy import TaskPolicy, resolve, resolve_in
from ratchet_stats.keys import generate_private_key, save_private_key
from tests.evidence.manifests import write_signed_manifest


@pytest.fixture
def env(tmp_path):
    key = generate_private_key()
    key_file = tmp_path / "signing.key"
    save_private_key(key, key_file)
    engine = make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")
    return key, engine, ["--control-db", str(engine.url), "--signing-key-file", str(key_file)]


def _run(args, ok=True):
    result = CliRunner().invoke(admin, args, catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_defaults_builtin_then_unknown_task_is_exact_text():
    assert resolve("tickets").comparator == "label" and resolve("extract").comparator == "json"
    assert resolve("tools").source["comparator"] == "built-in workload"
    unknown = resolve("moods")
    assert (unknown.comparator, unknown.target, unknown.delta, unknown.golden_share) == (
        "label",
        0.95,
        0.05,
        0.2,
    )
    assert unknown.source["comparator"] == "unknown task: exact text"
    mine = resolve("moods", {"moods": TaskPolicy(target=0.9, comparator="json")}, target=0.97)
    assert (mine.target, mine.comparator, mine.source["target"]) == (0.9, "json", "task policy")
    with pytest.raises(ValueError, match="custom:<name>"):
        TaskPolicy(comparator="fuzzy")


def test_admin_task_set_is_signed_needs_a_reason_and_only_changes_what_is_given(env):
    key, engine, common = env
    short = _run(["task", "set", "moods", "--target", "0.9", "--reason", "x", *common], ok=False)
    assert short.exit_code == 2 and "3-500 characters" in short.output
    missing = _run(["task", "set", "moods", "--target", "0.9", *common], ok=False)
    assert missing.exit_code == 2 and "--reason" in missing.output
    bad = _run(
        ["task", "set", "moods", "--target", "1.5", "--reason", "too high on purpose", *common], ok=False
    )
    assert bad.exit_code == 2 and "target" in bad.output
    assert mf.latest_verified(engine, key.public_key())[0] is None  # nothing was published

    out = _run(["task", "set", "moods", "--target", "0.9", "--audit-rate", "0.3", "--reason", "new task", "--json",
                *common])  # fmt: skip
    assert json.loads(out.output)["manifest"]["policies"]["moods"]["target"] == 0.9
    _run(["task", "set", "moods", "--comparator", "json", "--reason", "answers are JSON", *common])
    m, rejected = mf.latest_verified(engine, key.public_key())
    assert rejected == 0 and m.sequence == 2
    p = m.policies["moods"]
    assert (p.target, p.audit_rate, p.comparator, p.enabled) == (0.9, 0.3, "json", True)
    _run(["task", "set", "moods", "--clear", "audit_rate", "--disable", "--reason", "pause it", *common])
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.policies["moods"].audit_rate is None and not m.policies["moods"].enabled

    shown = json.loads(_run(["task", "show", "moods", "--json", *common]).output)
    assert (shown["target"], shown["source"]["target"], shown["audit_rate"]) == (0.9, "task policy", 0.05)
    listed = {r["task"]: r for r in json.loads(_run(["task", "list", "--json", *common]).output)}
    assert {"moods", "tickets", "extract", "tools"} <= set(listed) and listed["tickets"]["target"] == 0.95
    from ratchet_assets.release import registry

    log = registry.read_audit_log(engine, limit=10)
    assert log[0]["action"] == "task" and log[0]["reason"] == "pause it"


def test_a_manifest_without_policies_keeps_its_bytes_and_routing_follows_the_task_policy(env):
    key, engine, _ = env
    plain = mf.Manifest(tasks={"moods": mf.TaskRelease(stage="live", version="v1", threshold=0.5)})
    assert "policies" not in plain.to_predicate()
    with_policy = plain.model_copy(update={"policies": {"moods": TaskPolicy(audit_rate=1.0)}})
    written = write_signed_manifest(engine, key, with_policy)
    m, _ = mf.latest_verified(engine, key.public_key())
    assert m.policies == written.policies and m.audit_rate("moods") == 1.0 and m.audit_rate("other") == 0.05
    ids = [f"r{i}" for i in range(200)]
    assert all(route(m, SafetyState(), "moods", r).audit for r in ids)  # the task's own audit rate
    assert sum(route(plain, SafetyState(), "moods", r).audit for r in ids) < 30  # the global 0.05
    off = m.model_copy(update={"policies": {"moods": TaskPolicy(enabled=False)}})
    assert route(off, SafetyState(), "moods", "r1").student_version is None  # disabled: the teacher serves
    assert resolve_in(m, "moods").audit_rate == 1.0


def test_custom_comparator_registry_and_gateway_compare():
    from ratchet_core.workloads import compare
    from ratchet_core.workloads.comparators import UnknownComparator, register_comparator

    name = register_comparator(
        "casefold", lambda e, g: e["content"].casefold() == (g or {}).get("content", "").casefold()
    )
    assert name == "custom:casefold"
    assert compare(name, {"content": "Happy"}, {"content": "HAPPY"})
    assert not compare("moods", {"content": "Happy"}, {"content": "HAPPY"})  # unknown task: exact text
    with pytest.raises(UnknownComparator, match="not registered"):
        compare("custom:nope", {"content": "a"}, {"content": "a"})


def test_certificate_carries_a_tasks_own_level_and_recomputes_it():
    from ratchet_stats.certificate import TaskOutcomes, build_certificate, check_certificate

    def outcomes(task):  # 95/100 right: lower bound ~0.90 at delta 0.05
        return TaskOutcomes(
            task=task, comparator="label", confidences=[0.9] * 100, correct=[i < 95 for i in range(100)]
        )

    predicate = build_certificate(
        version="v1-x", base={"name": "b", "sha256": "0" * 64}, adapter_sha256="1" * 64, golden_root="2" * 64,
        golden_size=200, target=0.95, delta=0.05, tasks=[outcomes("moods"), outcomes("tickets")],
        task_levels={"moods": (0.85, 0.05), "tickets": (0.95, 0.05)},
    )  # fmt: skip
    assert predicate["certified_tasks"] == ["moods"]
    assert predicate["tasks"]["moods"]["target"] == 0.85 and "target" not in predicate["tasks"]["tickets"]
    assert check_certificate(predicate) == []
    forged = json.loads(json.dumps(predicate))
    forged["tasks"]["tickets"]["target"] = 0.85  # claim a lower level without recomputing
    assert any("certified" in p for p in check_certificate(forged))


def test_release_policy_and_golden_split_follow_the_task(tmp_path):
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.release.decision import ReleaseRule

    m = mf.Manifest(policies={"moods": TaskPolicy(target=0.85)})
    p = ReleaseRule().for_task("moods", m)
    assert (p.target, p.floor) == (0.85, 0.8) and ReleaseRule().for_task("tickets", m) == ReleaseRule()

    write_day(tmp_path / "lake", "2026-01-01", 300, seed=1)
    art = tmp_path / "art"
    consolidate_traffic(tmp_path / "lake", art, "2026-01-01")
    build_examples(art, "2026-01-01")
    r = split_golden(art, "2026-01-01", share=0.2, task_shares={"tickets": 0.0, "extract": 0.9})
    assert (
        r.golden_by_task.get("tickets", 0) == 0
        and r.golden_by_task["extract"] > 3 * r.golden_by_task["tools"]
    )


def test_release_rules_are_set_signed_shown_and_only_written_when_set(env):
    key, engine, common = env
    old_bytes = TaskPolicy(target=0.9, audit_rate=0.3).model_dump(mode="json")
    assert set(old_bytes) == {"comparator", "target", "delta", "audit_rate", "golden_share", "enabled"}
    bad = _run(["task", "set", "moods", "--release", "bayes", "--reason", "try a rule", *common], ok=False)
    assert bad.exit_code == 2 and "sequential" in bad.output and "wilson" in bad.output
    name = _run(["task", "set", "../moods", "--release", "wilson", "--reason", "odd name", *common], ok=False)
    assert name.exit_code == 2 and "not a valid task" in name.output
    _run(["task", "set", "moods", "--release", "wilson", "--calibration", "point", "--paired-gate",
          "--min-certified", "0.97", "--canary-audit-rate", "0.5", "--reason", "compare in production", *common])  # fmt: skip
    m, _ = mf.latest_verified(engine, key.public_key())
    p = m.policies["moods"]
    assert (p.release_rule, p.calibration, p.paired_gate, p.min_certified, p.canary_audit_rate) == (
        "wilson",
        "point",
        True,
        0.97,
        0.5,
    )
    assert "promote_evidence" not in m.to_predicate()["policies"]["moods"]  # unset: not written
    shown = json.loads(_run(["task", "show", "moods", "--json", *common]).output)
    assert (shown["promote_evidence"], shown["source"]["promote_evidence"]) == (
        "bound",
        "the wilson release rule",
    )
    text = _run(["task", "show", "moods", *common]).output
    assert "release_rule" in text and "wilson" in text
    _run(["task", "set", "moods", "--clear", "release_rule", "--no-paired-gate", "--reason", "back to e-values",
          *common])  # fmt: skip
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.policies["moods"].release_rule, m.policies["moods"].paired_gate) == (None, False)


def test_canary_audit_rate_applies_while_a_candidate_is_in_shadow_or_canary():
    policy = {"moods": TaskPolicy(audit_rate=0.0, canary_audit_rate=1.0)}
    ids = [f"r{i}" for i in range(100)]
    for stage, audited in (("live", 0), ("canary", 100), ("shadow", 100)):
        rel = mf.TaskRelease(stage=stage, version="v2", canary_percent=50.0, previous_live="v1")
        m = mf.Manifest(tasks={"moods": rel}, policies=policy)
        assert m.audit_rate("moods") == (1.0 if audited else 0.0)
        assert sum(route(m, SafetyState(), "moods", r).audit for r in ids) == audited, stage


def test_feedback_metrics_are_declared_signed_and_only_written_when_set(env):
    key, engine, common = env
    bad = _run(
        ["task", "set", "moods", "--metric", "stars:int", "--reason", "declare a metric", *common], ok=False
    )
    assert bad.exit_code == 2 and "boolean or float" in bad.output
    undeclared = _run(
        ["task", "set", "moods", "--bad-when", "stars<3", "--reason", "bad answers", *common], ok=False
    )
    assert undeclared.exit_code == 2 and "not a declared metric" in undeclared.output
    _run(["task", "set", "moods", "--metric", "thumbs_up:boolean", "--metric", "stars:float:higher",
          "--bad-when", "stars<3", "--reason", "the app's ratings", *common])  # fmt: skip
    _run(["task", "set", "moods", "--metric", "latency:float:lower", "--reason", "one more metric", *common])
    m, _ = mf.latest_verified(engine, key.public_key())
    p = m.policies["moods"]
    assert (
        sorted(p.metrics) == ["latency", "stars", "thumbs_up"] and p.metrics["latency"].direction == "lower"
    )
    assert p.bad_rule().bad(2.5) and not p.bad_rule().bad(3.0)
    shown = json.loads(_run(["task", "show", "moods", "--json", *common]).output)
    assert shown["bad_when"] == "stars<3" and shown["metrics"]["thumbs_up"] == {
        "type": "boolean",
        "direction": "higher",
    }
    _run(["task", "set", "other", "--target", "0.9", "--reason", "no metrics here", *common])
    m, _ = mf.latest_verified(engine, key.public_key())
    assert set(m.to_predicate()["policies"]["other"]) == {
        "comparator",
        "target",
        "delta",
        "audit_rate",
        "golden_share",
        "enabled",
    }
    reserved = _run(
        ["task", "set", "moods", "--metric", "comment:boolean", "--reason", "a reserved name", *common],
        ok=False,
    )
    assert reserved.exit_code == 2 and "comment" in reserved.output
