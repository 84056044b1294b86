"""Learn then Test: exact table vs a brute-force oracle, and a seeded simulation of its error guarantee."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ratchet_stats.bounds import clopper_pearson_lower
from ratchet_stats.ltt import DEFAULT_GRID, default_grid, ltt_calibrate, point_threshold


def _oracle(conf: list[float], ok: list[bool], grid: list[float], target: float, delta: float):
    """Plain loops + scipy.binomtest: (threshold, per-threshold (n, errors, p))."""
    table = []
    for t in sorted(grid, reverse=True):
        acc = [o for c, o in zip(conf, ok, strict=True) if c >= t]
        n, errors = len(acc), sum(1 for o in acc if not o)
        p = stats.binomtest(errors, n, 1 - target, alternative="less").pvalue if n else 1.0
        table.append((t, n, errors, p))
    certified = None
    for t, n, _, p in table:
        if n == 0 or p > delta:
            break
        certified = t
    return certified, table


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_table_and_threshold_match_a_brute_force_oracle(seed: int) -> None:
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random(400), 2).tolist()  # rounding makes ties with grid points
    ok = (rng.random(400) < 0.75 + 0.25 * np.asarray(conf)).tolist()
    grid = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    result = ltt_calibrate(conf, ok, grid, target=0.9, delta=0.1)
    certified, table = _oracle(conf, ok, grid, 0.9, 0.1)
    assert result.threshold == certified
    assert [(r.threshold, r.n, r.errors) for r in result.table] == [(t, n, e) for t, n, e, _ in table]
    for row, (_, _, _, p) in zip(result.table, table, strict=True):
        assert row.p_value == pytest.approx(p, rel=1e-9, abs=1e-300)
    if certified is not None:
        best = next(r for r in result.table if r.threshold == certified)
        assert result.precision_lower_bound == pytest.approx(
            clopper_pearson_lower(best.n - best.errors, best.n, 0.1)
        )


def test_true_precision_of_certified_threshold_is_below_target_at_most_delta_of_the_time() -> None:
    # conf ~ U(0, 1), P(correct | conf = c) = 0.7 + 0.3 c, so precision(t) = P(correct | conf >= t) = 0.85 + 0.15 t
    # exactly: thresholds below t* = 1/3 violate target 0.9.
    target, delta, reps, n = 0.9, 0.05, 2000, 1000
    t_star = (target - 0.85) / 0.15
    grid = default_grid(0.05, top=0.9)
    rng = np.random.default_rng(20240601)
    conf = rng.random((reps, n))
    ok = rng.random((reps, n)) < 0.7 + 0.3 * conf
    certified = [ltt_calibrate(conf[i], ok[i], grid, target, delta).threshold for i in range(reps)]
    th = np.array([np.nan if t is None else t for t in certified])
    failure = float(np.mean(th < t_star - 1e-12))  # NaN (nothing certified) is not a failure
    slack = 3 * np.sqrt(delta * (1 - delta) / reps)
    assert failure <= delta + slack
    # the procedure is useful, not vacuous: it usually certifies something no stricter than 0.6
    assert np.mean(th <= 0.6) > 0.5
    # the simulation can catch an invalid rule: "loosest threshold whose empirical precision >= target"
    wrong = ~ok
    naive_fail = 0
    for i in range(reps):
        order = np.argsort(-conf[i])
        cum_err = np.cumsum(wrong[i][order])
        accepted = np.arange(1, n + 1)
        prec = 1 - cum_err / accepted
        lowest = [t for t in grid if prec[np.count_nonzero(conf[i] >= t) - 1] >= target]
        naive_fail += bool(lowest) and min(lowest) < t_star
    assert naive_fail / reps > delta + slack


def test_nothing_certifies_when_precision_is_below_target_everywhere() -> None:
    rng = np.random.default_rng(7)
    conf = rng.random(2000)
    ok = rng.random(2000) < 0.8  # precision 0.8 at every threshold
    result = ltt_calibrate(conf, ok, DEFAULT_GRID, target=0.9, delta=0.05)
    assert result.threshold is None and not result.certified and result.precision_lower_bound is None
    assert result.table[0].tested and not result.table[0].certified
    assert not any(r.tested for r in result.table[1:])


def test_too_few_rows_certify_nothing_and_enough_rows_certify() -> None:
    # 10 perfect rows: P(Binom(10, 0.05) <= 0) = 0.95^10 > 0.05; 59 perfect rows: 0.95^59 < 0.05
    assert ltt_calibrate([0.99] * 10, [True] * 10, [0.5], 0.95, 0.05).threshold is None
    assert ltt_calibrate([0.99] * 59, [True] * 59, [0.5], 0.95, 0.05).threshold == 0.5


def test_fixed_sequence_stops_at_the_first_failure_and_at_an_empty_threshold() -> None:
    # top threshold: 5 rows (too few to pass); below it 200 perfect rows would pass on their own
    conf = [0.95] * 5 + [0.6] * 200
    ok = [True] * 205
    result = ltt_calibrate(conf, ok, [0.9, 0.5], 0.95, 0.05)
    assert result.threshold is None
    assert [r.tested for r in result.table] == [True, False]
    # a threshold that accepts nothing stops the sequence too
    empty_top = ltt_calibrate([0.6] * 200, [True] * 200, [0.99, 0.5], 0.95, 0.05)
    assert empty_top.threshold is None and empty_top.table[0].n == 0 and empty_top.table[0].precision is None
    # without that threshold the same rows certify 0.5
    assert ltt_calibrate([0.6] * 200, [True] * 200, [0.5], 0.95, 0.05).threshold == 0.5


def test_grid_order_does_not_matter_and_to_dict_is_json_ready() -> None:
    import json

    rng = np.random.default_rng(3)
    conf = rng.random(500)
    ok = rng.random(500) < 0.6 + 0.4 * conf
    a = ltt_calibrate(conf, ok, [0.2, 0.8, 0.5], 0.85, 0.05)
    b = ltt_calibrate(conf, ok, [0.8, 0.5, 0.2], 0.85, 0.05)
    assert a == b and [r.threshold for r in a.table] == [0.8, 0.5, 0.2]
    data = json.loads(json.dumps(a.to_dict()))
    assert data["threshold"] == a.threshold and len(data["table"]) == 3


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"grid": []}, "at least one threshold"),
        ({"grid": [0.5, 0.5]}, "distinct"),
        ({"target": 1.0}, "strictly between 0 and 1"),
        ({"correct": [True, 2]}, "booleans"),
        ({"correct": [True]}, "one entry per row"),
        ({"confidences": [0.5, float("nan")]}, "finite"),
    ],
)
def test_invalid_input_says_what_to_fix(kwargs: dict, needle: str) -> None:
    args = {"confidences": [0.5, 0.7], "correct": [True, False], "grid": [0.5], "target": 0.9, "delta": 0.05}
    args.update(kwargs)
    with pytest.raises(ValueError, match=needle):
        ltt_calibrate(**args)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_point_threshold_matches_its_oracle_and_is_never_stricter_than_ltt(seed: int) -> None:
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random(300), 2).tolist()
    ok = (rng.random(300) < 0.8 + 0.2 * np.asarray(conf)).tolist()
    grid = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    _, table = _oracle(conf, ok, grid, 0.9, 0.05)
    want = None
    for t, n, errors, _ in table:  # highest first, stop at the first observed precision under the target
        if n == 0 or (n - errors) / n < 0.9:
            break
        want = t
    got = point_threshold(conf, ok, grid, 0.9)
    assert got == want
    ltt = ltt_calibrate(conf, ok, grid, 0.9, 0.05).threshold
    assert ltt is None or (got is not None and got <= ltt)  # a passing binomial test implies the point passes


def test_point_threshold_misses_the_target_far_more_often_than_delta() -> None:
    """Same model as above: precision(t) = 0.85 + 0.15 t, so thresholds under 1/3 serve below 0.9."""
    target, delta, reps, n = 0.9, 0.05, 400, 1000
    t_star = (target - 0.85) / 0.15
    grid = default_grid(0.05, top=0.9)
    rng = np.random.default_rng(11)
    conf = rng.random((reps, n))
    ok = rng.random((reps, n)) < 0.7 + 0.3 * conf
    point = [point_threshold(conf[i], ok[i], grid, target) for i in range(reps)]
    ltt = [ltt_calibrate(conf[i], ok[i], grid, target, delta).threshold for i in range(reps)]
    point_fail = np.mean([t is not None and t < t_star - 1e-12 for t in point])
    ltt_fail = np.mean([t is not None and t < t_star - 1e-12 for t in ltt])
    assert ltt_fail <= delta + 3 * np.sqrt(delta * (1 - delta) / reps)
    assert point_fail > 0.2 and point_fail > 4 * max(ltt_fail, 0.01)
