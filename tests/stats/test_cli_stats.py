"""`ratchet stats plan|bound|mcnemar|ltt`: the numbers a user sees, exit codes, help, and import hygiene."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ratchet_stats.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["stats", *argv], prog="ratchet")
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_shows_59_rows_for_zero_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--target", "0.95", "--delta", "0.05", "--max-errors", "2", "--json")
    data = json.loads(out)
    assert code == 0
    assert [(r["errors"], r["rows"]) for r in data["rows"]][0] == (0, 59)
    assert len(data["rows"]) == 3
    assert data["rows"][0]["lower_bound"] >= 0.95
    code, text, _ = run(capsys, "plan", "--target", "0.95")  # --delta defaults to 0.05 as the help says
    assert code == 0 and "59" in text.splitlines()[2]


def test_plan_with_power(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "plan", "--target", "0.95", "--power", "0.8", "--true-precision", "0.98", "--json"
    )
    power = json.loads(out)["power"]
    assert code == 0 and power["power"] >= 0.8
    # independent check of the reported point: k errors certify at n, and the chance of <= k errors is the power
    n, k = power["n"], power["allowed_errors"]
    assert stats.binom.cdf(k, n, 0.05) <= 0.05 < stats.binom.cdf(k + 1, n, 0.05)
    assert power["power"] == pytest.approx(stats.binom.cdf(k, n, 0.02))


def test_plan_power_without_true_precision_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--target", "0.95", "--power", "0.8")
    assert code == 2 and "--true-precision" in err


def test_bound_190_of_200(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "bound", "--successes", "190", "--n", "200", "--delta", "0.05", "--json")
    data = json.loads(out)
    assert code == 0 and round(data["lower"], 4) == 0.9167
    assert data["upper"] == pytest.approx(stats.beta.ppf(0.95, 191, 10))
    code, text, _ = run(capsys, "bound", "--successes", "190", "--n", "200")
    assert "lower bound 0.9167" in text
    code, out, _ = run(capsys, "bound", "--successes", "190", "--n", "200", "--method", "wilson", "--json")
    assert json.loads(out)["method"] == "wilson" and json.loads(out)["lower"] > 0.9167


def test_bound_input_errors_say_what_to_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "bound", "--successes", "201", "--n", "200")
    assert code == 2 and "cannot exceed --n" in err
    with pytest.raises(SystemExit) as exc:
        run(capsys, "bound", "--successes", "1", "--n", "2", "--delta", "1.5")
    assert exc.value.code == 2 and "strictly between 0 and 1" in capsys.readouterr().err


def test_mcnemar_b3_c15_one_sided_p(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mcnemar", "--b", "3", "--c", "15", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["p_one_sided"] == pytest.approx(stats.binomtest(3, 18, 0.5, alternative="less").pvalue)
    assert data["p_two_sided"] == pytest.approx(stats.binomtest(3, 18, 0.5).pvalue)
    code, text, _ = run(capsys, "mcnemar", "--b", "3", "--c", "15", "--alternative", "greater")
    assert f"{stats.binomtest(3, 18, 0.5, alternative='greater').pvalue:.4g}" in text


def _write_rows(path: Path, conf: np.ndarray, ok: np.ndarray) -> None:
    if path.suffix == ".csv":
        lines = ["confidence,correct", *(f"{c},{int(o)}" for c, o in zip(conf, ok, strict=True))]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text(
            "".join(
                json.dumps({"confidence": float(c), "correct": bool(o)}) + "\n"
                for c, o in zip(conf, ok, strict=True)
            )
        )


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_ltt_certifies_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    rng = np.random.default_rng(0)
    conf = rng.random(3000)
    ok = rng.random(3000) < 0.8 + 0.2 * conf  # precision(t) = 0.9 + 0.1 t
    path = tmp_path / f"rows{suffix}"
    _write_rows(path, conf, ok)
    code, out, _ = run(capsys, "ltt", "--input", str(path), "--target", "0.9", "--delta", "0.05", "--json")
    data = json.loads(out)
    assert code == 0 and data["certified"]
    assert [r["threshold"] for r in data["table"]][:2] == [0.95, 0.9]  # default grid, highest first
    assert len(data["table"]) == 20
    best = next(r for r in data["table"] if r["threshold"] == data["threshold"])
    assert best["n"] == int(np.sum(conf >= data["threshold"]))
    assert best["p_value"] <= 0.05


def test_ltt_exit_code_1_when_nothing_certifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.jsonl"
    _write_rows(path, np.linspace(0, 1, 50), np.arange(50) % 2 == 0)
    code, text, _ = run(capsys, "ltt", "--input", str(path), "--target", "0.9", "--grid", "0.2,0.5")
    assert code == 1 and "No threshold certified" in text


@pytest.mark.parametrize(
    "content,name,needle",
    [
        ('{"confidence": 0.5}\n', "rows.jsonl", '"confidence" and "correct"'),
        ('{"confidence": 0.5, "correct": "maybe"}\n', "rows.jsonl", "rows.jsonl:1: correct must be"),
        ("not json\n", "rows.jsonl", "not valid JSON"),
        ("conf,ok\n0.5,1\n", "rows.csv", "header must name"),
        ("confidence,correct\n", "rows.csv", "no rows"),
        ("x", "rows.txt", "must end in .jsonl or .csv"),
    ],
)
def test_ltt_bad_input_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, name: str, needle: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    code, _, err = run(capsys, "ltt", "--input", str(path), "--target", "0.9")
    assert code == 2 and needle in err
    code, _, err = run(capsys, "ltt", "--input", str(tmp_path / "missing.jsonl"), "--target", "0.9")
    assert code == 2 and "not found" in err


def test_help_lists_every_subcommand_and_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["stats", "--help"], prog="ratchet")
    top = capsys.readouterr().out
    for sub in ("plan", "bound", "mcnemar", "ltt"):
        assert sub in top
    expected = {
        "plan": ["--target", "--delta", "--max-errors", "--power", "--true-precision", "--json"],
        "bound": ["--successes", "--n", "--delta", "--method", "--json"],
        "mcnemar": ["--b", "--c", "--alternative", "--json"],
        "ltt": ["--input", "--target", "--delta", "--grid", "--json", "Exit code 0"],
    }
    for sub, needles in expected.items():
        with pytest.raises(SystemExit):
            main(["stats", sub, "--help"], prog="ratchet")
        text = capsys.readouterr().out
        assert text.startswith(f"usage: ratchet stats {sub}")
        for needle in needles:
            assert needle in text


def test_console_script_runs_the_same_command() -> None:
    ratchet = Path(sys.executable).parent / "ratchet"
    proc = subprocess.run(
        [str(ratchet), "stats", "bound", "--successes", "190", "--n", "200", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert proc.returncode == 0, proc.stderr
    assert math.isclose(json.loads(proc.stdout)["lower"], 0.916664848933628, rel_tol=1e-9)


def test_import_ratchet_stats_pulls_in_no_heavy_stack() -> None:
    code = (
        "import sys, ratchet_stats\n"
        "from ratchet_stats import bounds, mcnemar, ltt, eprocess, cli_stats, ltt_calibrate\n"
        "from ratchet_stats.cli import build_parser\n"
        "build_parser()\n"
        "bad = ['dagster', 'fastapi', 'litellm', 'torch', 'pyarrow', 'pydantic']\n"
        "print(','.join(m for m in bad if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback() -> None:
    """``python -m ratchet_stats stats plan ... | head -1``: the CLI stops quietly with 141 (128 + SIGPIPE). The plan
    of 2,000 error counts as JSON is ~190 KB, more than a pipe holds, and takes ~2 s to compute."""
    import os
    import subprocess
    import sys

    plan = ["stats", "plan", "--target", "0.95", "--max-errors", "2000", "--json"]
    cmd = [sys.executable, "-m", "ratchet_stats", *plan]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader leaves while more than a pipe's buffer is still to come
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert first.strip() == b"{"  # the JSON had begun
    assert code == 141 and "Traceback" not in err and "BrokenPipeError" not in err, err
