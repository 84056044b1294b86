"""The evaluation certificate: every number recomputes from the signed rows, against independent oracles."""

from __future__ import annotations

import copy
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ratchet_stats import certificate as C
from ratchet_stats.canonical import canonical_json
from ratchet_stats.dsse import sign_statement
from tests.evidence.auditor import run_cli, write_json

TARGET, DELTA = 0.9, 0.05


def _outcomes(seed: int = 0, n: int = 300, with_baseline: bool = True) -> C.TaskOutcomes:
    rng = random.Random(seed)
    conf = [rng.random() ** 0.3 for _ in range(n)]
    # errors concentrate at low confidence, so a threshold certifies
    correct = [rng.random() < (0.6 if c < 0.8 else 0.995) for c in conf]
    base = [rng.random() < 0.85 for _ in range(n)] if with_baseline else None
    return C.TaskOutcomes("tickets", "label", conf, correct, base, "v1-aaaaaaaa" if with_baseline else None)


def _cert(tasks, **kw):
    args = dict(
        version="v2-bbbbbbbb",
        base={"name": "demo-base", "sha256": "a" * 64, "files": {"config.json": "b" * 64}, "path": "/tmp/x"},
        adapter_sha256="c" * 64,
        golden_root="d" * 64,
        golden_size=1000,
        target=TARGET,
        delta=DELTA,
        tasks=tasks,
        day="2026-01-02",
    )
    args.update(kw)
    return C.build_certificate(**args)


def _oracle_ltt(conf, correct, grid, target, delta):
    """Fixed-sequence LTT written independently: highest threshold first, binomial lower tail p-values."""
    certified = None
    for t in sorted(grid, reverse=True):
        acc = [ok for c, ok in zip(conf, correct, strict=True) if c >= t]
        if not acc:
            break
        errors = sum(1 for ok in acc if not ok)
        if stats.binom.cdf(errors, len(acc), 1 - target) > delta:
            break
        certified = t
    return certified


def test_numbers_match_independent_oracles():
    t = _outcomes()
    pred = _cert([t])
    s = pred["tasks"]["tickets"]
    k, n = sum(t.correct), len(t.correct)
    assert (s["n"], s["correct"]) == (n, k)
    assert s["lower_bound"] == pytest.approx(stats.beta.ppf(DELTA, k, n - k + 1), rel=1e-9)
    assert s["certified"] == (stats.beta.ppf(DELTA, k, n - k + 1) >= TARGET)
    rounded = [round(c, 6) for c in t.confidences]
    want = _oracle_ltt(rounded, t.correct, pred["grid"], TARGET, DELTA)
    assert want is not None  # the fixture is built so that a threshold certifies
    assert s["ltt"]["threshold"] == pytest.approx(want)
    b = sum(1 for x, y in zip(t.correct, t.baseline_correct, strict=True) if x and not y)
    c = sum(1 for x, y in zip(t.correct, t.baseline_correct, strict=True) if y and not x)
    assert (s["mcnemar"]["b"], s["mcnemar"]["c"]) == (b, c)
    assert s["mcnemar"]["p_value"] == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)
    assert "path" not in pred["base"]  # no machine-local paths in signed evidence
    assert C.check_certificate(pred) == []


def test_not_certified_when_precision_is_low():
    rng = random.Random(3)
    conf = [rng.random() for _ in range(200)]
    correct = [rng.random() < 0.5 for _ in conf]  # a coin: like shuffled labels
    pred = _cert([C.TaskOutcomes("tickets", "label", conf, correct)])
    s = pred["tasks"]["tickets"]
    assert not s["certified"] and s["ltt"]["threshold"] is None and s["mcnemar"] is None
    assert pred["certified_tasks"] == []
    assert C.check_certificate(pred) == []


def test_payload_does_not_depend_on_row_order():
    t = _outcomes()
    perm = list(range(len(t.correct)))
    random.Random(9).shuffle(perm)
    shuffled = C.TaskOutcomes(
        t.task,
        t.comparator,
        [t.confidences[i] for i in perm],
        [t.correct[i] for i in perm],
        [t.baseline_correct[i] for i in perm],
        t.baseline_version,
    )
    assert canonical_json(_cert([t])) == canonical_json(_cert([shuffled]))


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        (("correct",), 299, "correct"),
        (("lower_bound",), 0.99, "lower_bound"),
        (("certified",), "flip", "certified"),
        (("ltt", "threshold"), 0.05, "LTT threshold"),
        (("mcnemar", "p_value"), 0.5, "McNemar p_value"),
        (("mcnemar", "b"), 0, "McNemar b"),
    ],
)
def test_tampered_numbers_are_named(path, value, fragment):
    pred = _cert([_outcomes()])
    bad = copy.deepcopy(pred)
    node = bad["tasks"]["tickets"]
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = (not node[path[-1]]) if value == "flip" else value
    problems = C.check_certificate(bad)
    assert any(fragment in p for p in problems), problems


def test_flipped_row_changes_recomputed_numbers():
    bad = copy.deepcopy(_cert([_outcomes()]))
    row = next(r for r in bad["tasks"]["tickets"]["rows"] if r[1])
    row[1] = False
    assert any("correct is" in p for p in C.check_certificate(bad))


def test_cli_recomputes_a_signed_certificate(tmp_path, signing_key, public_b64):
    pred = _cert([_outcomes()])
    stmt = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": C.certificate_subjects(pred),
        "predicateType": C.PREDICATE_TYPE,
        "predicate": pred,
    }
    good = write_json(tmp_path / "good.dsse.json", sign_statement(stmt, signing_key))
    res = run_cli("verify", "certificate", str(good), "--key", public_b64, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    # correctly signed, but the numbers lie: the signature alone must not make it pass
    lie = copy.deepcopy(stmt)
    lie["predicate"]["tasks"]["tickets"]["lower_bound"] = 0.999
    bad = write_json(tmp_path / "bad.dsse.json", sign_statement(lie, signing_key))
    res = run_cli("verify", "certificate", str(bad), "--key", public_b64, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "lower_bound" in res.stdout + res.stderr
    assert json.loads(res.stdout)["ok"] is False


@settings(max_examples=30, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.floats(0, 1, allow_nan=False), st.booleans(), st.booleans()), min_size=1, max_size=80
    ),
    with_baseline=st.booleans(),
    flip=st.integers(0, 79),
)
def test_any_certificate_recomputes_and_any_flipped_row_is_caught(data, with_baseline, flip):
    t = C.TaskOutcomes(
        "tickets",
        "label",
        [d[0] for d in data],
        [d[1] for d in data],
        [d[2] for d in data] if with_baseline else None,
        "v1-x" if with_baseline else None,
    )
    pred = _cert([t])
    assert C.check_certificate(pred) == []
    bad = copy.deepcopy(pred)
    row = bad["tasks"]["tickets"]["rows"][flip % len(data)]
    row[1] = not row[1]
    assert C.check_certificate(bad) != []
