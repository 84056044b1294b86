"""Real servers for the at-scale tests: a throwaway PostgreSQL cluster per test session (Debian's `postgresql`).

`postgres_server` runs ``initdb`` into a temp folder and ``pg_ctl start`` on a free loopback port (unix socket in
the same folder); as root, both run as the ``postgres`` user (PostgreSQL refuses to run as root). Each test gets
its own database (`pg_url`), so tests never see each other's rows. `control_db_url` runs a test on SQLite and
on Postgres alike. A missing PostgreSQL is a failure that says how to install it, never a skip.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.evidence.certificates import sign_certificate as sign_certificate  # the scale tests import it here
from tests.serve import free_port
from tests.system_packages import require


def postgres_bindir() -> Path:
    """The newest /usr/lib/postgresql/<major>/bin (Debian's layout), else the folder of `pg_ctl` on PATH; without
    PostgreSQL the test fails with the line that says how to install it (``tests.system_packages``)."""
    require("postgresql")
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    return Path(shutil.which("pg_ctl")).resolve().parent


@dataclass
class PostgresServer:
    host: str
    port: int
    user: str
    socket_dir: Path

    def url(self, db: str = "postgres", driver: str = "psycopg") -> str:
        return f"postgresql+{driver}://{self.user}@{self.host}:{self.port}/{db}"

    def create_database(self, prefix: str = "t") -> str:
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host=self.host, port=self.port, user=self.user, dbname="postgres") as conn:
            conn.autocommit = True
            conn.execute(f'CREATE DATABASE "{name}"')
        return name


def _as_postgres_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@pytest.fixture(scope="session")
def postgres_server():
    bindir = postgres_bindir()
    root = Path(tempfile.mkdtemp(prefix="ratchet-pg-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    root.chmod(0o700)
    data, log = root / "data", root / "server.log"
    user = "ratchet"
    subprocess.run(
        _as_postgres_user(
            [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", user, "-E", "UTF8", "--no-sync"]
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = 0
    for _attempt in range(3):  # a free port can be taken between the probe and the bind: try another
        port = free_port()
        opts = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB"
        )
        started = subprocess.run(
            _as_postgres_user(
                [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-o", opts, "start"]
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if started.returncode == 0:
            break
    else:
        text = log.read_text() if log.exists() else started.stderr
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {text[-2000:]}")
    try:
        yield PostgresServer(host="127.0.0.1", port=port, user=user, socket_dir=root)
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(
                _as_postgres_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class S3Server:
    endpoint: str
    env: dict[str, str]  # what a process needs to reach it (s3fs/botocore read these)

    def new_bucket(self, prefix: str = "ratchet") -> str:
        import fsspec

        bucket = f"{prefix}-{uuid.uuid4().hex[:12]}"
        fsspec.filesystem("s3", endpoint_url=self.endpoint, key="test", secret="test").mkdir(bucket)
        return bucket


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """An S3-API server for the session: moto's server mode on a free loopback port (as s3fs's own tests run it)."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    out = log.open("w")
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"moto_server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        yield S3Server(endpoint=endpoint, env=env)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        out.close()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """This process reaches the S3 server through the standard AWS variables (s3fs clients made from now on)."""
    import s3fs

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_server
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's PostgreSQL (SQLAlchemy URL, psycopg 3 driver)."""
    return postgres_server.url(postgres_server.create_database())


@pytest.fixture(params=["sqlite", "postgres"])
def control_db_url(request, tmp_path: Path) -> str:
    """The control DB's URL: SQLite (WAL, the embedded default) or a fresh PostgreSQL database (at scale)."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'control.db').as_posix()}"
    return request.getfixturevalue("pg_url")
