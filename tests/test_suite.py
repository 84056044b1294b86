"""The suite's own machinery: the order in which xdist hands out files, and the Debian packages a test requires
(a missing one fails the test with the line that says how to install it, never skips it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import system_packages
from tests.xdist_layout import slow_files_first


def _item(nodeid: str, slow: bool = False) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: slow if name == "slow" else None)


def test_files_with_a_slow_test_go_first_and_each_file_stays_together_in_order() -> None:
    items = [
        _item("tests/a/test_x.py::test_1"),
        _item("tests/a/test_x.py::test_2"),
        _item("tests/b/test_y.py::test_1"),
        _item("tests/b/test_y.py::test_2", slow=True),
        _item("tests/b/test_y.py::test_3"),
        _item("tests/c/test_z.py::test_1", slow=True),
        _item("tests/d/test_w.py::test_1"),
    ]
    slow_files_first(items)
    assert [i.nodeid for i in items] == [
        "tests/b/test_y.py::test_1",
        "tests/b/test_y.py::test_2",
        "tests/b/test_y.py::test_3",
        "tests/c/test_z.py::test_1",
        "tests/a/test_x.py::test_1",
        "tests/a/test_x.py::test_2",
        "tests/d/test_w.py::test_1",
    ]


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
