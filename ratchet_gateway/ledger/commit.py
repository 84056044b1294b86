"""The journal's group commit: rows appended by many concurrent requests reach the disk in one ``write`` and one
``fdatasync``, then all their appends return.

``Ledger.append`` puts each row, with its seq and a future, on the :class:`CommitQueue`; an engine takes every row
queued while the previous batch was being synced, writes them as one batch of journal records
(``ratchet_gateway.ledger.journal``), syncs it and hands the batch back (``CommitSink.batch_done``), which resolves
the futures. Two engines:

- :class:`LoopCommit` (``Ledger.open(loop)``, the gateway): the event loop writes each batch to the page cache
  itself (microseconds) and a small sync process (:data:`SYNC_PROCESS`, its own interpreter) does the
  ``fdatasync`` and answers through a pipe the loop watches. Why: a writer thread needs the GIL twice per group
  commit (woken, and back from ``fdatasync``) and a busy event loop holds it for up to
  ``sys.getswitchinterval()`` each time; measured at c=16, the commit wait was p50 ~5 ms for a 0.3 ms fdatasync.
- :class:`ThreadCommit` (``Ledger.open()`` without a loop: tests and scripts with no event loop; the gateway never
  uses it): a writer thread that writes and syncs each batch.

A failed write or sync (disk full, I/O error, the sync process gone) fails that batch's appends with ``OSError``
and marks the ledger not writable (``CommitSink.error``; ``/readyz`` reports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from typing import Any, Protocol

from ratchet_gateway.ledger.journal import Journal, encode_records

# (the row's journal JSON, the row, its append's future or None, the loop that future belongs to)
Entry = tuple[bytes, dict[str, Any], asyncio.Future | None, asyncio.AbstractEventLoop | None]


class CommitQueue:
    """Rows appended and not yet written, in seq order; ``cv`` guards ``rows`` and ``stopping``."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.rows: list[Entry] = []
        self.stopping = False
        self.flushed = threading.Condition()  # notified after every batch (committed or failed)

    def take(self) -> list[Entry]:
        """Every queued row (the caller holds ``cv``)."""
        batch, self.rows = self.rows, []
        return batch


class CommitSink(Protocol):
    """What an engine reports to (the ledger)."""

    error: str | None  # set by an engine when a write or sync failed (the ledger is then not writable)

    def journal_all_loaded(self) -> bool:
        """Whether every record written to the journal is in DuckDB (so the journal may be emptied)."""
        ...

    def batch_done(
        self, batch: list[Entry], err: BaseException | None, seconds: float, loop_here: Any
    ) -> None:
        """`batch` is durable (`err` None) or failed; `loop_here` is the event loop the caller runs on, if any."""
        ...


class ThreadCommit:
    """Group commit by a writer thread."""

    def __init__(self, queue: CommitQueue, journal: Journal, sink: CommitSink, name: str):
        self.queue = queue
        self.journal = journal
        self.sink = sink
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def queued(self) -> None:
        """A row was queued (``queue.cv`` held): wake the writer."""
        self.queue.cv.notify()

    def stop(self) -> None:
        """Wait for the writer to commit what is queued (the ledger set ``queue.stopping`` first)."""
        self._thread.join()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        q = self.queue
        while True:
            with q.cv:
                while not q.rows and not q.stopping:
                    q.cv.wait()
                if not q.rows and q.stopping:
                    return
                batch = q.take()
            started = time.perf_counter()
            err: BaseException | None = None
            try:
                self.journal.write(encode_records([e[0] for e in batch]), self.sink.journal_all_loaded())
                self.journal.sync()
            except OSError as exc:  # disk full, I/O error: fail these requests, report not ready
                err = exc
                self.sink.error = f"{type(exc).__name__}: {exc}"
            self.sink.batch_done(batch, err, time.perf_counter() - started, None)


class LoopCommit:
    """Group commit by the event loop (the writes) and a sync process (the fdatasyncs)."""

    def __init__(
        self, queue: CommitQueue, journal: Journal, sink: CommitSink, loop: asyncio.AbstractEventLoop
    ):
        self.queue = queue
        self.journal = journal
        self.sink = sink
        self.loop = loop
        self._loop_tid = 0
        self._flush_scheduled = False
        self._inflight: list[Entry] | None = None  # the batch written and waiting for its fdatasync
        self._sync_started = 0.0
        self.sync_process: subprocess.Popen | None = None
        self._sync_req = self._sync_rep = -1

    def start(self) -> None:
        """Start the sync process and watch its answers on the loop (before any append is flushed)."""
        req_r, self._sync_req = os.pipe()
        self._sync_rep, rep_w = os.pipe()
        fd = self.journal.fd
        try:
            self.sync_process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", SYNC_PROCESS, str(fd), str(req_r), str(rep_w)],
                pass_fds=(fd, req_r, rep_w),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            os.close(req_r)
            os.close(rep_w)
        os.set_blocking(self._sync_rep, False)
        loop = self.loop

        def attach() -> None:
            self._loop_tid = threading.get_ident()
            loop.add_reader(self._sync_rep, self._on_synced)

        if _running_loop() is loop:
            attach()
        else:  # open() runs in a worker thread (asyncio.to_thread): attach on the loop, before any append
            loop.call_soon_threadsafe(attach)

    def queued(self) -> None:
        """A row was queued (``queue.cv`` held): flush at the end of this loop iteration, so every row appended in
        it goes in one batch (scheduling only; nothing here waits)."""
        if self._flush_scheduled:
            return
        self._flush_scheduled = True
        if threading.get_ident() == self._loop_tid:
            self.loop.call_soon(self._flush)
        else:
            self.loop.call_soon_threadsafe(self._flush)

    def alive(self) -> bool:
        return self.sync_process is None or self.sync_process.poll() is None

    def _here(self) -> asyncio.AbstractEventLoop | None:
        return self.loop if threading.get_ident() == self._loop_tid else None

    def _flush(self) -> None:
        """Write every queued row as one batch and ask the sync process for its fdatasync (loop thread)."""
        q = self.queue
        with q.cv:
            self._flush_scheduled = False
            if self._inflight is not None or not q.rows or self._sync_req < 0:
                return  # the batch in flight flushes the next one when its sync comes back
            batch, q.rows = q.rows, []
            try:
                self.journal.write(encode_records([e[0] for e in batch]), self.sink.journal_all_loaded())
                self._sync_started = time.perf_counter()
                os.write(self._sync_req, b"S")
                self._inflight = batch
                return
            except OSError as exc:  # disk full, I/O error, the sync process gone: fail these requests
                err = exc
                self.sink.error = f"{type(exc).__name__}: {exc}"
        self.sink.batch_done(batch, err, 0.0, self.loop)  # on the loop: call_soon'd

    def _on_synced(self) -> None:
        """The sync process answered (loop thread): ``K`` = fdatasync done; ``E<why>`` or EOF = failed."""
        try:
            data = os.read(self._sync_rep, 4096)
        except BlockingIOError:
            return
        except OSError as exc:
            data = b"E" + str(exc).encode()
        with self.queue.cv:
            batch, self._inflight = self._inflight, None
        err = None
        if data[:1] != b"K":
            why = data[1:].decode(errors="replace").strip() or "the journal sync process exited"
            err = OSError(why)
            self.sink.error = f"journal sync: {why}"
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self._sync_rep)
        if batch:
            self.sink.batch_done(
                batch, err, time.perf_counter() - self._sync_started, self.loop
            )  # a loop reader
        if err is None and self.queue.rows:
            self._flush()

    def stop(self) -> None:
        """Wait for the loop to commit what is queued (``Ledger.close`` runs in ``asyncio.to_thread`` while the loop
        runs); if it does not (the loop is gone), write and fdatasync the rest here. Then end the sync process."""
        q = self.queue
        with q.flushed:
            q.flushed.wait_for(
                lambda: (self._inflight is None and not q.rows) or self.sink.error is not None, 10.0
            )
        with q.cv:
            written, self._inflight = self._inflight or [], None
            pending = q.take()
            req, self._sync_req = self._sync_req, -1
        err: BaseException | None = None
        try:
            if pending and not self.sink.error:
                # never emptied here: `written` may be in the file, waiting for its sync
                self.journal.write(encode_records([e[0] for e in pending]), all_loaded=False)
            if written or pending:
                self.journal.sync()
        except OSError as exc:
            err = exc
            self.sink.error = f"{type(exc).__name__}: {exc}"
        if written or pending:
            self.sink.batch_done(
                written + pending, err, time.perf_counter() - self._sync_started, self._here()
            )
        os.close(req)  # the sync process reads EOF and exits
        rep = self._sync_rep

        def detach() -> None:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(rep)
            os.close(rep)

        try:
            self.loop.call_soon_threadsafe(detach)
        except RuntimeError:  # the loop is closed
            os.close(rep)
        if self.sync_process is not None:
            try:
                self.sync_process.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self.sync_process.kill()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# The journal's sync process (loop mode): one fdatasync per request byte, answered with b"K" (b"E<why>" and exit
# on failure). It ignores SIGINT/SIGTERM (a Ctrl-C or a process-group SIGTERM reaches it too): it exits when
# the gateway closes the request pipe or dies, so a graceful shutdown can still commit its last batch.
SYNC_PROCESS = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd, req, rep = (int(a) for a in sys.argv[1:4])
while True:
    try:
        got = os.read(req, 4096)
        if not got:
            break
        os.fdatasync(fd)
    except OSError as exc:
        os.write(rep, b"E" + str(exc).encode(errors="replace")[:300])
        break
    os.write(rep, b"K" * len(got))
"""
