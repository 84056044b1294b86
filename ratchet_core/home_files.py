"""Files under ``$RATCHET_HOME`` are private to the user running Ratchet: files 0600, folders 0700.

Everything Ratchet keeps there (keys, the pepper, the student server key, the ledger and its journal, the lake and
artifacts of the embedded default, the control DB, the demo's state) may hold secrets or client traffic, so no
other local user may read it. Two tools, used where Ratchet creates things under the home:

- :func:`private_dir` creates a folder (and its missing parents under the home) as 0700;
- :func:`private_umask` is a context manager that sets the process umask to 077 while files are created by code
  that does not take a mode (DuckDB, SQLite, pyarrow, Dagster), so they are born 0600/0700;
- :func:`tighten` walks an existing home and removes group/other bits (``ratchet init`` runs it, so a home made
  by an older version is fixed too);
- :func:`write_private` writes a small file atomically as 0600.

The student server key: ``ratchet init`` writes ``$RATCHET_HOME/keys/student.key`` (:func:`ensure_student_key`);
with ``RATCHET_STUDENT_API_KEY`` unset, the settings read it (``ratchet_core.settings``), so the gateway, the
night and ``ratchet student-server`` (the demo's student server) all use it and the student server never runs
without a key by default.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
STUDENT_KEY_FILE = ("keys", "student.key")


def student_key_path(home: Path) -> Path:
    """``$RATCHET_HOME/keys/student.key``: the bearer key the student server requires and the gateway sends."""
    return Path(home).joinpath(*STUDENT_KEY_FILE)


def read_student_key(home: Path) -> str:
    """The student key written by ``ratchet init``, or '' when there is none."""
    try:
        return student_key_path(home).read_text().strip()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return ""


def ensure_student_key(home: Path) -> tuple[Path, bool]:
    """Create the student key file (0600, a fresh random key) if absent; (path, created)."""
    path = student_key_path(home)
    if path.exists():
        return path, False
    private_dir(path.parent)
    try:
        write_private(path, "sk-student-" + secrets.token_urlsafe(32) + "\n", exclusive=True)
    except FileExistsError:  # another process created it first
        return path, False
    return path, True


def private_dir(path: Path) -> Path:
    """`path` created (with missing parents) as 0700; an existing folder is tightened to 0700."""
    path = Path(path)
    with private_umask():
        path.mkdir(parents=True, exist_ok=True)
    _chmod(path, DIR_MODE)
    return path


def write_private(path: Path, data: str | bytes, exclusive: bool = False) -> None:
    """Write `data` to `path` as a 0600 file (atomically by rename, or O_EXCL when `exclusive`)."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    if exclusive:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        return
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(raw)
    os.replace(tmp, path)


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Umask 077 inside the block (files created 0600 at most, folders 0700), the previous one restored after.

    The umask is process-wide: use it around start-up work (opening the ledger, ``ratchet init``), not around
    request handling."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def tighten(home: Path) -> int:
    """Remove group/other permission bits from every file and folder under `home` (symlinks are not
    followed); returns how many were changed."""
    home = Path(home)
    changed = 0
    if not home.exists():
        return 0
    changed += _chmod(home, DIR_MODE)
    for root, dirs, files in os.walk(home):
        for name in dirs:
            changed += _chmod(Path(root) / name, DIR_MODE)
        for name in files:
            changed += _chmod(Path(root) / name, FILE_MODE)
    return changed


def _chmod(path: Path, mode: int) -> int:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if stat.S_ISLNK(st.st_mode):
        return 0
    keep = stat.S_IMODE(st.st_mode) & ~0o077
    want = (keep | mode) if stat.S_ISDIR(st.st_mode) else keep | (mode & 0o600)
    if stat.S_IMODE(st.st_mode) == want:
        return 0
    os.chmod(path, want)
    return 1
