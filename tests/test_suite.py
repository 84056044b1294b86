"""The suite's own machinery: the order in which xdist hands out files, the Debian packages a test requires
(a missing one fails the test with the line that says how to install it, never skips it), and no resource budget
outside the `timing` tests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import system_packages
from tests.budgets import budget_asserts, suite_budget_asserts
from tests.xdist_layout import load_durations, longest_files_first


def _item(nodeid: str, slow: bool = False) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: slow if name == "slow" else None)


def test_the_longest_files_go_first_and_each_file_stays_together_in_order() -> None:
    items = [
        _item("tests/a/test_x.py::test_1"),
        _item("tests/a/test_x.py::test_2"),
        _item("tests/b/test_y.py::test_1"),
        _item("tests/b/test_y.py::test_2", slow=True),
        _item("tests/b/test_y.py::test_3"),
        _item("tests/c/test_z.py::test_1", slow=True),
        _item("tests/d/test_w.py::test_1"),
        _item("tests/e/test_v.py::test_1"),
    ]
    # c measured longest; b is slow but not measured (UNKNOWN_SLOW); e measured short; a and d not measured
    longest_files_first(items, {"tests/c/test_z.py": 100.0, "tests/e/test_v.py": 0.2})
    assert [i.nodeid for i in items] == [
        "tests/c/test_z.py::test_1",
        "tests/b/test_y.py::test_1",
        "tests/b/test_y.py::test_2",
        "tests/b/test_y.py::test_3",
        "tests/a/test_x.py::test_1",
        "tests/a/test_x.py::test_2",
        "tests/d/test_w.py::test_1",
        "tests/e/test_v.py::test_1",
    ]


def test_the_durations_file_names_test_files_of_the_suite_and_is_sorted_longest_first() -> None:
    root = Path(__file__).resolve().parents[1]
    durations = load_durations()
    assert len(durations) >= 10
    assert all((root / name).is_file() for name in durations), [
        n for n in durations if not (root / n).is_file()
    ]
    assert list(durations.values()) == sorted(durations.values(), reverse=True)


def test_record_durations_merges_the_files_that_ran(tmp_path: Path) -> None:
    """A real pytest run of a two-file suite with --record-durations (this suite's conftest, another rootdir)."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    suite = tmp_path / "tests"
    suite.mkdir()
    (suite / "conftest.py").write_text((root / "tests" / "conftest.py").read_text())
    (suite / "test_quick.py").write_text("def test_a():\n    pass\n")
    (suite / "test_slow.py").write_text("import time\n\ndef test_b():\n    time.sleep(0.3)\n")
    out = tmp_path / "durations.json"
    out.write_text(json.dumps({"about": "kept", "files": {"tests/gone.py": 5.0, "tests/test_quick.py": 9.0}}))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "--record-durations", str(out), str(suite)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(out.read_text())
    assert data["about"] == "kept" and set(data["files"]) == {
        "tests/gone.py",
        "tests/test_quick.py",
        "tests/test_slow.py",
    }
    assert data["files"]["tests/gone.py"] == 5.0 and data["files"]["tests/test_quick.py"] < 9.0
    assert data["files"]["tests/test_slow.py"] >= 0.3
    assert "busy: main" in res.stdout


def test_a_missing_package_fails_the_test_with_the_install_line(monkeypatch) -> None:
    monkeypatch.setitem(system_packages.PACKAGES, "chromium", ("browser checks", lambda: False))
    with pytest.raises(pytest.fail.Exception) as info:
        system_packages.require("chromium")
    assert str(info.value) == system_packages.install_line(["chromium"])
    assert "sudo apt-get install -y chromium" in str(info.value)
    monkeypatch.setitem(system_packages.PACKAGES, "chromium", ("browser checks", lambda: True))
    system_packages.require("chromium")


def test_make_install_names_what_it_cannot_install(monkeypatch, capsys) -> None:
    for name in system_packages.PACKAGES:
        monkeypatch.setitem(system_packages.PACKAGES, name, ("x", lambda name=name: name != "postgresql"))
    monkeypatch.setattr(system_packages, "_apt_prefix", lambda: None)  # not root, no passwordless sudo
    assert system_packages.main() == 0  # not fatal: the Python parts still install
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [system_packages.install_line(["postgresql"])]


def test_no_resource_budget_is_asserted_outside_the_timing_tests() -> None:
    """A functional test asserts what happened; CPU seconds, memory and wall clock belong to `timing` tests and
    `make bench` (one such budget, "training needed 250 CPU-seconds", failed `make test` on a slower machine)."""
    assert suite_budget_asserts(Path(__file__).parent) == []


def test_the_budget_check_finds_budgets_and_spares_deadlines_and_timing_tests() -> None:
    source = """
import pytest
from tests.cpu_time import cpu_seconds_at_most

def test_cpu(record):
    assert record["cpu_seconds"] <= 240

def test_memory(rss):
    assert 2048 > rss.mb()

def test_helper():
    with cpu_seconds_at_most(3.0):
        pass

def test_wall(started):
    elapsed = time.perf_counter() - started
    assert elapsed < 5

def test_waits(deadline):
    assert time.monotonic() < deadline, "never came up"

def test_lower_bound(sent, started):
    assert sent - started > 1.0 and record["steps"] > 0

@pytest.mark.timing
def test_latency(seconds):
    assert seconds < 0.05
    with cpu_seconds_at_most(1.0):
        pass
"""
    found = budget_asserts(source, "t.py")
    assert [line.split(":")[1] for line in found] == ["6", "9", "12", "17"], found
    assert budget_asserts("import pytest\npytestmark = [pytest.mark.timing]\n" + source) == []


def _make_test(tmp_path: Path, first_passes: bool, timing_passes: bool) -> tuple[int, str]:
    """`make test` on a two-test suite (one plain test, one marked `timing`) run by the real pytest."""
    import shutil
    import subprocess
    import sys

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    timing: latency\n")
    (suite / "test_two.py").write_text(
        "import pytest\n\n"
        f"def test_plain():\n    print('ran: plain')\n    assert {first_passes}\n\n"
        f"@pytest.mark.timing\ndef test_timed():\n    print('ran: timing')\n    assert {timing_passes}\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "pytest").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m pytest -p no:cacheprovider -s -c {suite}/pytest.ini "$@" {suite}\n'
    )
    (bin_dir / "pytest").chmod(0o755)
    make = shutil.which("make")
    assert make, "make is not installed"
    repo = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [make, "-C", str(repo), "--no-print-directory", "test", f"BIN={bin_dir}", "WORKERS=1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return res.returncode, res.stdout + res.stderr


@pytest.mark.parametrize(("first_passes", "timing_passes"), [(False, True), (True, False), (True, True)])
def test_make_test_runs_the_timing_tests_after_a_failure_and_fails_when_either_part_failed(
    tmp_path: Path, first_passes: bool, timing_passes: bool
) -> None:
    code, output = _make_test(tmp_path, first_passes, timing_passes)
    assert "ran: plain" in output and "ran: timing" in output, output
    assert (code == 0) == (first_passes and timing_passes), output
