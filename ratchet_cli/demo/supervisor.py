"""Child processes of `ratchet demo`: start each in its own process group, wait until it answers, stop them all.

Each service logs to ``$RATCHET_HOME/logs/<name>.log``. Readiness is an HTTP GET answered with 2xx before a
deadline; a child that exits first, or misses the deadline, raises ``ServiceError`` naming the service, its log
file and the log's last lines. Stopping sends SIGTERM to each child's process group (so `dagster dev`'s webserver,
daemon and code servers go too), waits, then SIGKILLs whatever is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class ServiceError(RuntimeError):
    """A child service failed to start or died; the message names it and its log file."""


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = 15) -> str:
    """The last `lines` lines of a log file (empty if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when GET `url` answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback URLs we built)
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class Service:
    """One child process: what to run, how to tell it is ready, and what to show the user."""

    name: str
    argv: list[str]
    env: dict[str, str]
    ready_url: str
    url: str
    log_path: Path
    port: int
    ready_timeout_s: float = 180.0
    cwd: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    def describe_failure(self, what: str) -> str:
        last = tail(self.log_path)
        msg = f"{self.name} {what}; see its log {self.log_path}"
        return msg + (f"\n--- last lines of {self.log_path.name} ---\n{last}" if last else "")


class Supervisor:
    """Starts services, waits for them, and stops every one it started (reverse order, by process group)."""

    def __init__(self) -> None:
        self.services: list[Service] = []

    def start(self, svc: Service) -> None:
        if not port_is_free(svc.port):
            raise ServiceError(
                f"{svc.name}: port {svc.port} on 127.0.0.1 is in use (another `ratchet demo`, or an old child "
                f"still running?); stop it, or pick another port with the demo's --*-port options"
            )
        svc.log_path.parent.mkdir(parents=True, exist_ok=True)
        svc._log = open(svc.log_path, "ab")  # noqa: SIM115 (closed in stop_all)
        svc._log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(svc.argv)}\n".encode())
        svc._log.flush()
        svc.proc = subprocess.Popen(
            svc.argv,
            env=svc.env,
            cwd=svc.cwd,
            stdin=subprocess.DEVNULL,
            stdout=svc._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: terminal Ctrl-C reaches only us; we stop it
        )
        self.services.append(svc)

    def wait_ready(self, svc: Service, sleep: Callable[[float], None] = time.sleep) -> None:
        """Poll the service's ready URL until it answers 2xx; ServiceError if it exits or the deadline passes."""
        deadline = time.monotonic() + svc.ready_timeout_s
        while True:
            assert svc.proc is not None
            code = svc.proc.poll()
            if code is not None:
                raise ServiceError(svc.describe_failure(f"exited with code {code} before it was ready"))
            if http_ok(svc.ready_url):
                return
            if time.monotonic() > deadline:
                raise ServiceError(
                    svc.describe_failure(f"did not answer {svc.ready_url} within {svc.ready_timeout_s:.0f} s")
                )
            sleep(0.25)

    def check_alive(self) -> None:
        """ServiceError for the first started service that has exited."""
        for svc in self.services:
            if svc.proc is not None and svc.proc.poll() is not None:
                raise ServiceError(
                    svc.describe_failure(f"stopped unexpectedly (exit code {svc.proc.returncode})")
                )

    def stop_all(self, timeout_s: float = 40.0) -> list[str]:
        """SIGTERM every service's process group, wait up to `timeout_s`, SIGKILL the rest; returns what was killed."""
        for svc in reversed(self.services):
            _signal_group(svc.proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        killed = []
        for svc in reversed(self.services):
            if svc.proc is None:
                continue
            try:
                svc.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(svc.proc, signal.SIGKILL)
                svc.proc.wait(timeout=10)
                killed.append(svc.name)
            # Children of the group that outlived their leader (e.g. a code server) go too.
            _signal_group(svc.proc, signal.SIGKILL)
            if svc._log is not None:
                svc._log.close()
        self.services.clear()
        return killed


def _signal_group(proc: subprocess.Popen | None, sig: int) -> None:
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # pgid == pid: started with start_new_session
