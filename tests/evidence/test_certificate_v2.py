"""Certificate v2: golden rows people labelled, accuracy against their labels and agreement with the teacher, each
with its own exact bound, recomputed by the verifier; v1 keeps its bytes and both versions verify."""

from __future__ import annotations

import copy
import json

import pytest
from scipy import stats

from ratchet_stats import certificate as C
from ratchet_stats.bounds import rows_to_certify
from ratchet_stats.dsse import sign_statement
from tests.evidence.auditor import run_cli, write_json

TARGET, DELTA = 0.9, 0.05


def _outcomes(n_teacher: int = 60, n_people: int = 40, people_right: int = 38, agree_on_people: int = 5):
    """Teacher-labelled rows all right; people-labelled rows `people_right` right, `agree_on_people` of them agree
    with the teacher's (wrong) answer they replaced."""
    n = n_teacher + n_people
    correct = [True] * n_teacher + [i < people_right for i in range(n_people)]
    sources = ["teacher"] * n_teacher + ["people"] * n_people
    agrees = [True] * n_teacher + [i >= n_people - agree_on_people for i in range(n_people)]
    return C.TaskOutcomes(
        task="tickets",
        comparator="label",
        confidences=[0.5 + i / (2 * n) for i in range(n)],
        correct=correct,
        label_sources=sources,
        teacher_agrees=agrees,
    )


def _build(outcomes) -> dict:
    return C.build_certificate(
        version="v2-abc",
        base={"name": "demo", "sha256": "0" * 64},
        adapter_sha256="1" * 64,
        golden_root="2" * 64,
        golden_size=len(outcomes.correct),
        target=TARGET,
        delta=DELTA,
        tasks=[outcomes],
        day="2026-02-03",
    )


def test_people_and_teacher_bounds_match_independent_oracles() -> None:
    pred = _build(_outcomes())
    assert C.predicate_type_of(pred) == C.v2.PREDICATE_TYPE and C.check_certificate(pred) == []
    s = pred["tasks"]["tickets"]
    people, teacher = s["people"], s["teacher_agreement"]
    assert (people["n"], people["correct"]) == (40, 38)
    assert people["min_rows"] == rows_to_certify(TARGET, DELTA)[0].rows
    assert people["lower_bound"] == pytest.approx(stats.beta.ppf(DELTA, 38, 40 - 38 + 1))
    # teacher agreement: the 60 teacher rows, and 5 of the 40 people rows
    assert (teacher["n"], teacher["agree"]) == (100, 65)
    assert teacher["lower_bound"] == pytest.approx(stats.beta.ppf(DELTA, 65, 100 - 65 + 1))
    # the main bound is against the best label of every row (as v1 computes it)
    assert (s["n"], s["correct"]) == (100, 98) and pred["labels"] == {
        "import": 0,
        "people": 40,
        "teacher": 60,
    }
    assert any("people's labels 38/40" in line for line in C.summary_lines(pred))


def test_too_few_people_rows_get_no_bound() -> None:
    need = rows_to_certify(TARGET, DELTA)[0].rows
    pred = _build(_outcomes(n_people=need - 1, people_right=need - 1, agree_on_people=0))
    assert pred["tasks"]["tickets"]["people"]["lower_bound"] is None and C.check_certificate(pred) == []


def test_teacher_only_rows_keep_v1_and_its_bytes() -> None:
    plain = C.TaskOutcomes("tickets", "label", [0.9] * 30, [True] * 30)
    pred = _build(plain)
    assert C.predicate_type_of(pred) == C.PREDICATE_TYPE and "labels" not in pred
    assert pred == C.v1.build(
        version="v2-abc",
        base={"name": "demo", "sha256": "0" * 64},
        adapter_sha256="1" * 64,
        golden_root="2" * 64,
        golden_size=30,
        target=TARGET,
        delta=DELTA,
        tasks=[plain],
        day="2026-02-03",
    )
    assert all(len(r) == 3 for r in pred["tasks"]["tickets"]["rows"])


@pytest.mark.parametrize(
    "tamper, fragment",
    [
        (lambda s: s["people"].update(correct=40), "people.correct"),
        (lambda s: s["teacher_agreement"].update(lower_bound=0.99), "teacher_agreement.lower_bound"),
        (lambda s: s["rows"][0].__setitem__(3, "people"), "people.n"),
        (lambda s: s["rows"][0].__setitem__(4, not s["rows"][0][1]), "teacher"),
        (lambda s: s.pop("people"), "no people section"),
    ],
)
def test_tampered_v2_numbers_are_named(tamper, fragment) -> None:
    pred = copy.deepcopy(_build(_outcomes()))
    tamper(pred["tasks"]["tickets"])
    problems = C.check_certificate(pred)
    assert problems and any(fragment in p for p in problems), problems


def test_both_versions_verify_and_a_mislabelled_type_fails(tmp_path, signing_key, public_b64) -> None:
    for name, pred in (
        ("v1", _build(C.TaskOutcomes("tickets", "label", [0.9] * 30, [True] * 30))),
        ("v2", _build(_outcomes())),
    ):
        stmt = {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": C.certificate_subjects(pred),
            "predicateType": C.predicate_type_of(pred),
            "predicate": pred,
        }
        good = write_json(tmp_path / f"{name}.dsse.json", sign_statement(stmt, signing_key))
        res = run_cli("verify", "certificate", str(good), "--key", public_b64, "--json")
        assert res.returncode == 0, res.stdout + res.stderr
    # a v2 predicate signed under v1's type: v1's check refuses its rows
    wrong = {**stmt, "predicateType": C.PREDICATE_TYPE}
    bad = write_json(tmp_path / "wrong.dsse.json", sign_statement(wrong, signing_key))
    res = run_cli("verify", "certificate", str(bad), "--key", public_b64, "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["ok"] is False
    assert C.check_certificate(pred, C.PREDICATE_TYPE) != []
