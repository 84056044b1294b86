"""The Debian packages the suite needs beside its Python ones: one list for `make install` and for the tests.

``python -m tests.system_packages`` (what `make install` runs) installs the missing ones with apt-get when it
runs as root, or through ``sudo -n`` where that works without a password; otherwise it prints one line naming
them and the command that installs them. A test that needs a missing package fails with that same line
(``require``), never skips: a green suite means every check ran. Standard library only (runs before the venv).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")  # playwright drives Debian's Chromium (no browser download)


def _has_postgres() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")) or shutil.which("pg_ctl") is not None


# package -> (what the suite does with it, is it installed?)
PACKAGES = {
    "chromium": ("browser checks of the Dagster UI and the dashboard", CHROMIUM.exists),
    "postgresql": ("the at-scale tests start a throwaway cluster", _has_postgres),
    "docker-compose": (
        "validates infra/docker-compose.yaml (no engine needed)",
        lambda: shutil.which("docker-compose") is not None,
    ),
}


def missing(names: list[str] | None = None) -> list[str]:
    """The packages of `names` (default: all of them) that are not installed."""
    return [n for n in names or PACKAGES if not PACKAGES[n][1]()]


def install_line(names: list[str]) -> str:
    """One line a person can act on: what is missing and the command that installs it."""
    pkgs = " ".join(names)
    return (
        f"missing Debian packages: {pkgs} — install them with `sudo apt-get install -y {pkgs}` "
        "(`make install` does it when run as root)"
    )


def require(*names: str) -> None:
    """Fail the calling test with the install line when one of these packages is missing."""
    absent = missing(list(names))
    if absent:
        import pytest

        pytest.fail(install_line(absent), pytrace=False)


def _apt_prefix() -> list[str] | None:
    """How this user can run apt-get: directly as root, through passwordless sudo, or not at all."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def main() -> int:
    absent = missing()
    if not absent:
        return 0
    prefix = _apt_prefix()
    if prefix is not None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        print(f"installing Debian packages: {' '.join(absent)}", flush=True)
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *absent]):
            done = subprocess.run([*prefix, *cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if done.returncode != 0:
                print(done.stderr.decode(errors="replace")[-2000:], file=sys.stderr)
                break
        absent = missing()
    if absent:  # not fatal: everything else installs, and the tests that need these fail with this line
        print(install_line(absent), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
