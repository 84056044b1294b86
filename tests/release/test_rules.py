"""The rules a task's policy chooses: canary rule, promote evidence, calibration, paired gate, minimum certified
bound, and a newer certified version superseding one in shadow or canary (pure functions, then the sensor)."""

from __future__ import annotations

import random

import pytest

from ratchet_assets.release import registry
from ratchet_assets.release.admission import Candidate, Paired, admission_problem, certificate_numbers
from ratchet_assets.release.control import release_tick
from ratchet_assets.release.decision import ReleaseRule, Track, feed, simulate
from ratchet_assets.release.tick import ManifestMoved, admission_statuses, admit, decide_tick
from ratchet_core import manifest as mf
from ratchet_core.task_policy import TaskPolicy

from .conftest import write_certificate, write_pairs

SEQUENTIAL = ReleaseRule()
WILSON = ReleaseRule(release_rule="wilson")


def _stream(rate: float, n: int, seed: int) -> list[bool]:
    rng = random.Random(seed)
    return [rng.random() < rate for _ in range(n)]


def _rolled_back(stream: list[bool], rule: ReleaseRule) -> int | None:
    events = simulate(stream, rule)
    return events[-1][0] if events and events[-1][1].action == "rollback" else None


def test_at_the_floor_the_sequential_rule_keeps_its_level_and_the_wilson_rule_does_not():
    """Precision exactly at the floor (0.90): a rollback is a false alarm. The e-process is anytime-valid; the
    Wilson interval, looked at after every answer, spends its 5% again at each look."""
    seeds = range(100)
    seq = sum(_rolled_back(_stream(0.10, 400, s), SEQUENTIAL) is not None for s in seeds)
    wil = sum(_rolled_back(_stream(0.10, 400, s), WILSON) is not None for s in seeds)
    assert seq <= 5 + 6  # <= rollback_alpha, with three standard errors of 100 runs
    assert wil >= 15 and wil > 3 * max(seq, 1)


def test_a_30_percent_wrong_version_is_rolled_back_by_both_at_different_audit_counts():
    counts = [(_rolled_back(s, SEQUENTIAL), _rolled_back(s, WILSON)) for s in map(_stream_bad, range(8))]
    assert all(a is not None and b is not None and a <= 200 and b <= 200 for a, b in counts)
    assert all(b >= WILSON.min_stage_audits for _, b in counts)  # the Wilson rule waits for 30 at the stage
    assert any(a != b for a, b in counts)
    assert any(
        a < WILSON.min_stage_audits for a, _ in counts
    )  # the e-process may act sooner on a run of errors


def _stream_bad(seed: int) -> list[bool]:
    return _stream(0.30, 300, seed)


def test_promote_evidence_chooses_what_promotes_whatever_rolls_back():
    clean = [False] * 400
    positions = {
        (rule.release_rule, rule.promotes_on): [pos for pos, _ in simulate(clean, rule)]
        for rule in (
            SEQUENTIAL,
            WILSON,
            ReleaseRule(promote_evidence="bound"),
            ReleaseRule(release_rule="wilson", promote_evidence="e-value"),
        )
    }
    # The Wilson lower bound passes 0.95 after 52 clean answers (n / (n + z^2) > 0.95); the e-process later.
    assert positions[("sequential", "bound")] == positions[("wilson", "bound")] == [52, 104, 156, 208]
    assert positions[("sequential", "e-value")] == positions[("wilson", "e-value")]
    assert positions[("sequential", "e-value")][0] > 52
    d, _ = feed(Track.start("v1", "t", 1, WILSON), [False] * 10, WILSON)
    assert d.action == "hold" and "Wilson lower bound" in d.message and "at least 42 more" in d.message


def test_wilson_at_live_watches_its_newest_answers():
    rule = ReleaseRule(release_rule="wilson", wilson_window=100)
    track = Track.start("v1", "t", 4, rule)
    d, _ = feed(track, [False] * 1000, rule)
    assert d.action == "hold" and len(track.recent) == 100
    d, used = feed(track, [True] * 40, rule)  # drift: the window forgets the 1,000 clean answers
    assert d.action == "rollback" and used < 40 and "newest 100 at live" in d.message
    assert Track.from_dict(track.to_dict()).to_dict() == track.to_dict()
    assert (
        "recent" not in Track.start("v2", "t", 4, SEQUENTIAL).to_dict()
    )  # sequential tracks keep their bytes


def test_the_rules_come_from_the_signed_task_policy():
    m = mf.Manifest(
        policies={
            "t": TaskPolicy(
                release_rule="wilson", calibration="point", paired_gate=True, min_certified=0.97, delta=0.01
            )
        }
    )
    rule = ReleaseRule().for_task("t", m)
    assert (rule.release_rule, rule.promotes_on, rule.calibration, rule.paired_gate) == (
        "wilson",
        "bound",
        "point",
        True,
    )
    assert (rule.min_certified, rule.delta) == (0.97, 0.01) and ReleaseRule().for_task(
        "other", m
    ) == ReleaseRule()


def _candidate(**kw) -> Candidate:
    base = dict(version="v2", task="t", threshold=0.5, lower_bound=0.97, source="v2.dsse.json")
    return Candidate(**{**base, **kw})


def test_admission_rules_bound_threshold_and_paired_gate():
    rule = ReleaseRule()
    assert admission_problem(_candidate(), rule, "v1") is None
    assert "minimum certified bound 0.98" in admission_problem(
        _candidate(), ReleaseRule(min_certified=0.98), None
    )
    point = ReleaseRule(calibration="point")
    assert "point-rule" in admission_problem(_candidate(point_threshold=None), point, None)
    gate = ReleaseRule(paired_gate=True)
    worse = _candidate(paired=Paired("v1", 0, 9))  # right where live was wrong 0 times, wrong 9 times
    assert admission_problem(worse, rule, "v1") is None  # the plain gate admits it
    assert "worse than the live version v1" in admission_problem(worse, gate, "v1")
    assert admission_problem(_candidate(paired=Paired("v1", 4, 6)), gate, "v1") is None  # not significant
    assert "wait for a night evaluated against v1" in admission_problem(
        _candidate(paired=Paired("v0", 0, 0)), gate, "v1"
    )
    assert admission_problem(_candidate(), gate, None) is None  # nothing live: nothing to compare with


def test_calibration_point_serves_at_a_looser_threshold_than_ltt():
    """Golden rows with a band of errors at middling confidence: the fixed sequence of LTT stops there (6 wrong of
    230 is not significant at 0.95), the point rule's observed 97% passes and goes on down to 0.0; the admitted
    release carries the rule's threshold, so the gateway serves the low-confidence answers only under `point`."""
    from ratchet_stats.certificate import TaskOutcomes, build_certificate

    confidences = [0.97] * 200 + [0.5] * 30 + [0.1] * 300
    correct = [True] * 200 + [i >= 6 for i in range(30)] + [True] * 300
    predicate = build_certificate(
        version="v1", base={"name": "b"}, adapter_sha256="1" * 64, golden_root="2" * 64, golden_size=530,
        target=0.95, delta=0.05, tasks=[TaskOutcomes("t", "label", confidences, correct)],
    )  # fmt: skip
    n = certificate_numbers(predicate, "t")
    assert n.lower_bound >= 0.95 and (n.ltt_threshold, n.point_threshold) == (0.55, 0.0)
    served = {}
    for calibration in ("ltt", "point"):
        m = mf.Manifest(policies={"t": TaskPolicy(calibration=calibration)})
        c = Candidate("v1", "t", n.ltt_threshold, n.lower_bound, "v1", "", n.point_threshold, n.paired)
        plan = decide_tick(m, [c], {}, [], ReleaseRule())
        assert plan.manifest.task("t").stage == "shadow"
        served[calibration] = plan.manifest.task("t").threshold
    assert served == {"ltt": 0.55, "point": 0.0}


def _manifest(stage: str, previous_live: str | None = "v1", forced: bool = False) -> mf.Manifest:
    rel = mf.TaskRelease(
        stage=stage, version="v2", canary_percent=25.0 if stage == "canary" else 0.0, threshold=0.4,
        previous_live=previous_live, previous_threshold=0.3 if previous_live else None, forced=forced,
    )  # fmt: skip
    return mf.Manifest(tasks={"t": rel})


@pytest.mark.parametrize("stage", ["shadow", "canary"])
def test_a_newer_certified_version_preempts_a_stale_one_in_shadow_or_canary(stage):
    m = _manifest(stage)
    old = Track.start("v2", "t", 0 if stage == "shadow" else 2, SEQUENTIAL)
    old.since = "2026-01-01"  # stale by 2026-01-04 (max_candidate_days 2): tests/release/test_queue.py
    feed(old, [False] * 30 + [True], SEQUENTIAL)
    plan = decide_tick(
        m, [_candidate(version="v3", threshold=0.2)], {("v2", "t"): old}, [], SEQUENTIAL, today="2026-01-04"
    )
    (adm,) = plan.admissions
    new = plan.manifest.task("t")
    assert (new.stage, new.version, new.threshold, new.previous_live, new.previous_threshold) == (
        "shadow",
        "v3",
        0.2,
        "v1",
        0.3,
    )
    assert (
        adm.replaces == "v2"
        and "preempts v2" in adm.message
        and "31 audited answers, 1 disagreeing" in adm.message
    )
    assert adm.replaced_evidence["total_audits"] == 31  # kept with the admission (the sensor's audit log)
    assert set(plan.tracks) == {("v3", "t"), ("v1", "t")}
    assert ("v2", "t", "superseded") in {(c.version, c.task, c.status) for c in admission_statuses(adm)}
    again = _manifest("canary" if stage == "shadow" else "shadow")  # the manifest moved meanwhile
    again.tasks["t"] = again.tasks["t"].model_copy(update={"version": "v9"})
    with pytest.raises(ManifestMoved):
        admit(again, adm)


def test_a_forced_version_or_a_canary_with_nothing_live_behind_it_is_not_superseded():
    for m, why in (
        (_manifest("shadow", forced=True), "an operator forced v2"),
        (_manifest("canary", previous_live=None), "the only student serving the task"),
    ):
        plan = decide_tick(m, [_candidate(version="v3")], {}, [], SEQUENTIAL)
        assert not plan.admissions and why in plan.waiting[0]
    plan = decide_tick(
        _manifest("shadow", previous_live=None), [_candidate(version="v3")], {}, [], SEQUENTIAL
    )
    assert plan.admissions[0].replaces == "v2"  # in shadow it serves nothing: replaced even with nothing live
    condemned = Track.start("v2", "t", 0, SEQUENTIAL)
    feed(condemned, [True] * 40, SEQUENTIAL)
    plan = decide_tick(
        _manifest("shadow"), [_candidate(version="v3")], {("v2", "t"): condemned}, [], SEQUENTIAL
    )
    assert not plan.admissions and "rolls v2 back first" in plan.waiting[0]
    assert plan.decision is not None and plan.decision.action == "rollback"  # rolled back, not superseded


def test_the_sensor_preempts_a_stale_shadowing_version_keeps_its_evidence_and_lists_it(engine, key, tmp_path):
    from click.testing import CliRunner

    from ratchet_assets.admin.cli import admin

    art, lake = tmp_path / "artifacts", tmp_path / "lake"
    mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(t=mf.TaskRelease(stage="live", version="v1", threshold=0.3)),
        "v1 is live",
        "ops",
    )
    write_certificate(art, key, "v2", "t", correct=300, n=300)
    state = release_tick(engine, key, lake, art, None, today="2026-01-01").state
    write_pairs(lake, "2026-01-02", 1, "v2", "t", [False] * 20, role="shadow")
    state = release_tick(engine, key, lake, art, state, today="2026-01-02").state
    assert (
        mf.latest_verified(engine, key.public_key())[0].task("t").version == "v2"
    )  # 20 answers: still shadow
    write_certificate(art, key, "v3", "t", correct=300, n=300, day="2026-01-02")
    r = release_tick(engine, key, lake, art, state, today="2026-01-02")  # v2 within reach: v3 waits
    assert mf.latest_verified(engine, key.public_key())[0].task("t").version == "v2"
    assert any("v3 on t waits behind v2" in h for h in r.holds), r.holds
    r = release_tick(engine, key, lake, art, r.state, today="2026-01-04")  # v2 stale: v3 preempts it
    m, _ = mf.latest_verified(engine, key.public_key())
    assert (m.task("t").stage, m.task("t").version, m.task("t").previous_live) == ("shadow", "v3", "v1")
    assert "preempts v2 at shadow (20 audited answers, 0 disagreeing" in m.reason
    statuses = {(v["version"], v["status"]) for v in registry.list_versions(engine)}
    assert {("v2", "superseded"), ("v3", "shadow")} <= statuses and "v2|t" not in r.state["tracks"]
    admit_row = next(e for e in registry.read_audit_log(engine) if e["target"] == "v3/t")
    assert (
        admit_row["details"]["supersedes"] == "v2"
        and admit_row["details"]["its_evidence"]["total_audits"] == 20
    )
    out = CliRunner().invoke(admin, ["versions", "--artifacts", str(art), "--control-db", str(engine.url)])
    assert out.exit_code == 0 and any(
        line.split()[:3] == ["v2", "t", "superseded"] for line in out.output.splitlines()
    ), out.output


def test_admin_task_set_and_sim_offer_the_release_rules_under_one_name_each():
    import click

    from ratchet_assets.admin.task_cmd import set_cmd
    from ratchet_assets.sim.cli import sim

    def options(command):
        return {o: p.help for p in command.params if isinstance(p, click.Option) for o in p.opts}

    names = ["--release", "--promote-evidence", "--canary-audit-rate", "--calibration", "--paired-gate"]
    names.append("--min-certified")
    admin_opts, sim_opts = options(set_cmd), options(sim)
    assert all(admin_opts[n] == sim_opts[n] for n in names)
