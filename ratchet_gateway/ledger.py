"""The replica's durable request ledger: journal group commit -> DuckDB -> sealed Parquet segments.

Why this shape (measured on the 2-core box): a DuckDB commit costs 3-5 ms, an append + fdatasync of 2 KB about
0.3 ms. So a response is released once its row is in an append-only **journal** that has been fdatasync'd, and
rows reach DuckDB later, in batches:

1. ``await ledger.append(row)`` assigns the next per-replica ``seq`` (gap-free, journal order = seq order) and
   queues the row. One **writer thread** takes every row queued while the previous fdatasync ran, writes them
   as records ``<len:u32><crc32:u32><orjson>`` with one ``write`` + one ``fdatasync``, then resolves all their
   futures: a group commit, one disk flush for many concurrent requests.
2. A **loader thread** inserts the journaled rows into ``<replica>.duckdb`` (the process's own file) every
   ``load_interval`` seconds, as an Arrow batch in one transaction.
3. Every ``segment_seconds`` and at shutdown the loader **seals** rows with ``seq`` > the sealed high-water mark
   into ``<lake>/traffic/day=D/<replica>-<first seq>.parquet``, then stores the new mark in DuckDB. If the
   process dies between publishing a segment and storing the mark, the next start reads the seqs of this
   replica's segments above the mark and never seals them again: no row sealed twice, none skipped.

The lake is a folder or any fsspec URL (``RATCHET_LAKE=s3://bucket/lake``, ``gs://``, ``memory://`` ...). Segment
names and publishing live in ``ratchet_core.lake`` (the module the night reads the lake with): a segment becomes
visible complete or not at all — a local folder gets a temp name, fsync and an atomic rename; an object store gets
one write-once ``pipe_file`` per key. A key is never rewritten (an existing key is skipped), and a crash before an
upload completes leaves no object, so the rows are sealed again under the same key at the next start.

Restart: rows of the journal with ``seq`` > max(seq) in DuckDB are loaded (idempotent by (replica, seq)); a torn
tail record (crash mid-write, never acknowledged) ends the replay. The journal is truncated once every row in it
is in DuckDB and it is larger than ``journal_max_bytes``.

Erasures (``ratchet erase``): the control plane records the erased request ids in the control DB; each replica
applies them to the files it alone owns (DESIGN §1) from its loader thread, polling ``erasures`` every
``erasure_poll_s``: journal records are rewritten in place with the content columns blanked
(:func:`scrub_journal`), the DuckDB rows blanked and the database copied into a fresh file renamed over the old
one (:func:`scrub_duckdb`), so no freed block keeps the text. Rows sealed later are sealed blanked. A scope
(``erase --user/--client/--text/--since``: ``ratchet_core.erasure_scope``) is matched against this replica's own
rows written before the erasure, unsealed ones included, and what it scrubbed is reported to the control DB.

Replica identity must survive a crash so the restarted process replays the right journal: a process takes the
first free slot ``<base>-<i>`` by ``flock`` on ``<ledger dir>/<base>-<i>.lock`` (the kernel releases it when the
process dies), so ``--workers 2`` gives ``host-0`` and ``host-1`` and a restart takes them back.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from ratchet_core.clock import now as clock_now
from ratchet_core.erasure_scope import SCOPE_COLUMNS
from ratchet_core.lake import SEALED_AT, Lake, parse_segment_relpath, segment_relpath
from ratchet_core.schema import CONTENT_COLUMNS, LEDGER_SCHEMA, duckdb_ddl

_HEADER = struct.Struct("<II")


def default_replica_base() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname()) or "replica"


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every intact record of a journal file, in order; stops at the first torn or corrupt record."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    data = path.read_bytes()
    pos = 0
    while pos + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        end = start + length
        if end > len(data) or zlib.crc32(data[start:end]) != crc:
            break
        rows.append(orjson.loads(data[start:end]))
        pos = end
    return rows


def rows_to_arrow(rows: list[dict[str, Any]], chunk: int = 64, encoded: list[bytes] | None = None):
    """The rows as one Arrow table (a missing key is a null).

    With `encoded` (each row's journal JSON, as the writer encoded it) Arrow's JSON reader builds the table: C++
    that releases the GIL, ~6x less of the loader's GIL time than converting the dicts, which the event loop
    would otherwise wait for. Otherwise (or if the reader refuses the batch) the dicts are converted `chunk` rows
    at a time, so the loader lets the event loop in between chunks."""
    import pyarrow as pa

    if encoded is not None:
        table = _json_to_arrow(encoded)
        if table is not None:
            return table

    if len(rows) <= chunk:
        return pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)
    parts = [
        pa.Table.from_pylist(rows[i : i + chunk], schema=LEDGER_SCHEMA) for i in range(0, len(rows), chunk)
    ]
    return pa.concat_tables(parts)


_JSON_OPTIONS: list = []


def _json_to_arrow(encoded: list[bytes]):
    """The journal JSON of rows as a table of LEDGER_SCHEMA, or None when Arrow's JSON reader cannot read it."""
    import pyarrow as pa
    import pyarrow.json as pj

    if not _JSON_OPTIONS:  # timestamps are integers (microseconds) in the journal: read int64, then cast
        fields = [pa.field(f.name, pa.int64()) if pa.types.is_timestamp(f.type) else f for f in LEDGER_SCHEMA]
        _JSON_OPTIONS.append(
            pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")
        )
        _JSON_OPTIONS.append(pj.ReadOptions(use_threads=False, block_size=1 << 24))
    try:
        table = pj.read_json(
            pa.BufferReader(b"\n".join(encoded)),
            read_options=_JSON_OPTIONS[1],
            parse_options=_JSON_OPTIONS[0],
        )
        table = table.select(LEDGER_SCHEMA.names).cast(LEDGER_SCHEMA)
    except (pa.ArrowException, ValueError, TypeError):
        return None
    return table if table.num_rows == len(encoded) else None


class Ledger:
    """One replica's ledger. ``open()`` before use, ``close()`` at shutdown (flush, load, seal)."""

    def __init__(
        self,
        ledger_dir: Path,
        lake_root: str,
        segment_seconds: float,
        replica_base: str | None = None,
        load_interval: float = 0.2,
        journal_max_bytes: int = 64 * 1024 * 1024,
        on_commit: Callable[[float, int], None] | None = None,
        erasures: Callable[[], Any] | None = None,
        erasure_poll_s: float = 5.0,
    ):
        self.ledger_dir = Path(ledger_dir)
        self.lake_root = str(lake_root)
        self._lake = Lake(self.lake_root)
        self.segment_seconds = segment_seconds
        self.replica_base = replica_base or default_replica_base()
        self.load_interval = load_interval
        self.journal_max_bytes = journal_max_bytes
        self.on_commit = on_commit
        self.replica = ""
        self.error: str | None = None
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._pending: list[
            tuple[bytes, dict[str, Any], asyncio.Future | None, asyncio.AbstractEventLoop | None]
        ] = []
        self._to_load: list[dict[str, Any]] = []
        self._to_load_json: list[bytes] = []  # the same rows' journal JSON (rows_to_arrow's fast path)
        self._loading: list[dict[str, Any]] = []  # rows being inserted into DuckDB now (find_rows sees them)
        self._load_lock = threading.Lock()
        self._stopping = False
        self._loader_stop = threading.Event()
        self._seal_request = threading.Event()
        self._seal_done = threading.Condition()
        self._flushed = threading.Condition()  # notified after every journal batch
        self._seals_completed = 0
        self._seq = 0
        self._written_seq = 0
        self._loaded_seq = 0
        self._sealed_seq = 0
        self._recovered: set[int] = set()
        self._journal_bytes = 0
        self._fd = -1
        self._lock_fd = -1
        self._con = None
        self._threads: list[threading.Thread] = []
        self._writer_thread: threading.Thread | None = None
        self._loader_thread: threading.Thread | None = None
        # loop mode (``open(loop)``, the gateway): the event loop writes the journal, a sync process fdatasyncs it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_tid = 0
        self._flush_scheduled = False
        self._inflight: list | None = None  # the batch written and waiting for its fdatasync
        self._sync_started = 0.0
        self._syncer: subprocess.Popen | None = None
        self._sync_req = self._sync_rep = -1
        # Erasures recorded in the control DB (``erasures`` returns every erased request id), applied by the loader.
        self._erasures = erasures
        self.erasure_poll_s = erasure_poll_s
        self._last_erasure_poll = 0.0
        self._erased: set[str] = set()
        self._erasure_done = threading.Condition()
        self._scopes: dict[int, Any] = {}  # erasure log id -> ScopeMatcher, as last polled
        self._scopes_applied: set[int] = set()
        self._scope_horizon: Any = None  # rows written before this may match an applied scope
        self._scoped_late: set[str] = set()  # matched on load, journal records still to scrub

    # lifecycle ---------------------------------------------------------------------------------------------
    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Take a free replica slot, replay the journal tail, start the threads. With `loop` (the gateway's
        event loop, running), appends made on that loop are group-committed by the loop itself and a sync
        process (:data:`_SYNC_PROCESS`); without it, by the journal writer thread."""
        import duckdb

        self.ledger_dir.mkdir(parents=True, exist_ok=True)
        for i in range(1024):
            fd = os.open(self.ledger_dir / f"{self.replica_base}-{i}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._lock_fd, self.replica = fd, f"{self.replica_base}-{i}"
            break
        else:  # pragma: no cover
            raise RuntimeError(f"no free ledger slot under {self.ledger_dir}")
        self._con = duckdb.connect(str(self.ledger_dir / f"{self.replica}.duckdb"))
        self._sql(duckdb_ddl("ledger"))
        self._sql("CREATE TABLE IF NOT EXISTS seal_state (id INTEGER PRIMARY KEY, sealed_seq BIGINT)")
        self._sql("CREATE TABLE IF NOT EXISTS erased_requests (request_id VARCHAR PRIMARY KEY)")
        self._erased = {r[0] for r in self._sql("SELECT request_id FROM erased_requests")}
        self._sql("CREATE TABLE IF NOT EXISTS erasure_scopes_applied (log_id BIGINT PRIMARY KEY)")
        self._scopes_applied = {int(r[0]) for r in self._sql("SELECT log_id FROM erasure_scopes_applied")}
        self._loaded_seq = int(self._sql("SELECT coalesce(max(seq), 0) FROM ledger")[0][0])
        rows = self._sql("SELECT sealed_seq FROM seal_state WHERE id = 1")
        self._sealed_seq = int(rows[0][0]) if rows else 0
        # Replay the journal tail that never reached DuckDB.
        journal = self.journal_path
        tail = [r for r in read_journal(journal) if r["seq"] > self._loaded_seq]
        if tail:
            self._insert(tail)
        self._seq = self._written_seq = self._loaded_seq
        self._recover_sealed()
        self._fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.ftruncate(self._fd, 0)  # every row in it is now in DuckDB
        os.fsync(self._fd)
        self._journal_bytes = 0
        self._last_seal = time.monotonic()
        if loop is not None:
            self._start_syncer(loop)
        else:
            self._writer_thread = self._thread(self._writer, "journal")
        self._loader_thread = self._thread(self._loader, "loader")

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=f"ledger-{name}-{self.replica}", daemon=True)
        t.start()
        self._threads.append(t)
        return t

    def _sql(self, query: str, params: list | None = None) -> list[tuple]:
        # DuckDB 2 refuses new work on a connection with an unfinished result: always fetch everything.
        return self._con.execute(query, params or []).fetchall()

    @property
    def journal_path(self) -> Path:
        return self.ledger_dir / f"{self.replica}.journal"

    def close(self) -> None:
        if self._con is None:
            return
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._writer_thread is not None:
            self._writer_thread.join()
        if self._loop is not None:
            self._stop_syncer()
        self._loader_stop.set()
        if self._loader_thread is not None:
            self._loader_thread.join()
        self._load_pending()
        self._seal()
        if self._loaded_seq >= self._written_seq:
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._sql("CHECKPOINT")
        self._con.close()
        self._con = None
        os.close(self._lock_fd)

    # appending ---------------------------------------------------------------------------------------------
    async def append(self, row: dict[str, Any]) -> int:
        """Give ``row`` the next seq and return it once the row is fdatasync'd in the journal."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        seq = self._enqueue(row, fut, loop)
        await fut
        return seq

    def append_nowait(self, row: dict[str, Any]) -> int:
        """Queue a row without awaiting durability (pair rows written off the request path)."""
        return self._enqueue(row, None, None)

    def _enqueue(self, row, fut, loop) -> int:
        if self.error:
            raise OSError(f"ledger is not writable: {self.error}")
        kick = False
        with self._cv:
            if self._stopping:
                raise OSError("ledger is closed")
            self._seq += 1
            seq = row["seq"] = self._seq
            row["replica"] = self.replica
            self._pending.append((orjson.dumps(row), row, fut, loop))
            if self._loop is None:
                self._cv.notify()
            elif not self._flush_scheduled:
                self._flush_scheduled = kick = True
        if kick:  # loop mode: flush at the end of this loop iteration (every row appended in it, one batch)
            if threading.get_ident() == self._loop_tid:
                self._loop.call_soon(self._flush)  # type: ignore[union-attr]
            else:
                self._loop.call_soon_threadsafe(self._flush)  # type: ignore[union-attr]
        return seq

    @staticmethod
    def _records(batch: list) -> bytes:
        return b"".join(_HEADER.pack(len(data), zlib.crc32(data)) + data for data, _, _, _ in batch)

    def _append(self, batch: list) -> None:
        """Write a batch's records to the journal (both modes; the caller fdatasyncs), first emptying the journal
        when it is over its size and every record in it is in DuckDB already."""
        if self._journal_bytes > self.journal_max_bytes and self._loaded_seq >= self._written_seq:
            os.ftruncate(self._fd, 0)
            self._journal_bytes = 0
        buf = self._records(batch)
        os.write(self._fd, buf)
        self._journal_bytes += len(buf)

    def _writer(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._stopping:
                    self._cv.wait()
                if not self._pending and self._stopping:
                    return
                batch, self._pending = self._pending, []
            self._sync_started = time.perf_counter()
            err: BaseException | None = None
            try:
                self._append(batch)
                os.fdatasync(self._fd)
            except OSError as exc:  # disk full, I/O error: fail these requests, report not ready
                err = exc
                self.error = f"{type(exc).__name__}: {exc}"
            self._done(batch, err)

    # loop mode: the event loop writes, a sync process fdatasyncs -----------------------------------------------
    # Why: a writer thread needs the GIL twice per group commit (woken, and back from fdatasync), and a busy event
    # loop holds it for up to sys.getswitchinterval() (5 ms) each time: measured at c=16, the commit wait was
    # p50 ~5 ms for a 0.3 ms fdatasync. Here the loop writes the batch to the page cache (microseconds) and the
    # sync process, which has its own interpreter, does the fdatasync and answers through a pipe the loop watches.
    def _start_syncer(self, loop: asyncio.AbstractEventLoop) -> None:
        req_r, self._sync_req = os.pipe()
        self._sync_rep, rep_w = os.pipe()
        try:
            self._syncer = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _SYNC_PROCESS, str(self._fd), str(req_r), str(rep_w)],
                pass_fds=(self._fd, req_r, rep_w),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            os.close(req_r)
            os.close(rep_w)
        os.set_blocking(self._sync_rep, False)
        self._loop = loop

        def attach() -> None:
            self._loop_tid = threading.get_ident()
            loop.add_reader(self._sync_rep, self._on_synced)

        if _running_loop() is loop:
            attach()
        else:  # open() runs in a worker thread (asyncio.to_thread): attach on the loop, before any append
            loop.call_soon_threadsafe(attach)

    def _flush(self) -> None:
        """Write every pending row as one batch and ask the sync process for its fdatasync (loop thread)."""
        with self._cv:
            self._flush_scheduled = False
            if self._inflight is not None or not self._pending or self._sync_req < 0:
                return  # the batch in flight flushes the next one when its sync comes back
            batch, self._pending = self._pending, []
            try:
                self._append(batch)
                self._sync_started = time.perf_counter()
                os.write(self._sync_req, b"S")
                self._inflight = batch
                return
            except OSError as exc:  # disk full, I/O error, the sync process gone: fail these requests
                err = exc
                self.error = f"{type(exc).__name__}: {exc}"
        self._done(batch, err)

    def _on_synced(self) -> None:
        """The sync process answered (loop thread): ``K`` = fdatasync done; ``E<why>`` or EOF = failed."""
        try:
            data = os.read(self._sync_rep, 4096)
        except BlockingIOError:
            return
        except OSError as exc:
            data = b"E" + str(exc).encode()
        with self._cv:
            batch, self._inflight = self._inflight, None
        err = None
        if data[:1] != b"K":
            why = data[1:].decode(errors="replace").strip() or "the journal sync process exited"
            err = OSError(why)
            self.error = f"journal sync: {why}"
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sync_rep)  # type: ignore[union-attr]
        if batch:
            self._done(batch, err)
        if err is None and self._pending:
            self._flush()

    def _done(self, batch: list, err: BaseException | None) -> None:
        if err is None:
            self._written_seq = batch[-1][1]["seq"]
            if self.on_commit:
                self.on_commit(time.perf_counter() - self._sync_started, len(batch))
            with self._load_lock:
                self._to_load.extend(row for _, row, _, _ in batch)
                self._to_load_json.extend(data for data, _, _, _ in batch)
        with self._flushed:
            self._flushed.notify_all()
        here = threading.get_ident() == self._loop_tid
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
        for _, _, fut, loop in batch:
            if fut is not None:
                by_loop.setdefault(loop, []).append(fut)
        for loop, futs in by_loop.items():
            if here and loop is self._loop:
                _resolve(futs, err)
            else:
                with contextlib.suppress(RuntimeError):  # loop closed
                    loop.call_soon_threadsafe(_resolve, futs, err)

    def _stop_syncer(self) -> None:
        """close() in loop mode: wait for the loop to commit what is queued (it runs while close() does, in
        asyncio.to_thread); if it does not (the loop is gone), write and fdatasync the rest here."""
        with self._flushed:
            self._flushed.wait_for(
                lambda: (self._inflight is None and not self._pending) or self.error is not None, 10.0
            )
        with self._cv:
            written, self._inflight = self._inflight or [], None
            pending, self._pending = self._pending, []
            req, self._sync_req = self._sync_req, -1
        err: BaseException | None = None
        try:
            if pending and not self.error:
                os.write(self._fd, self._records(pending))
            if written or pending:
                os.fdatasync(self._fd)
        except OSError as exc:
            err = exc
            self.error = f"{type(exc).__name__}: {exc}"
        if written or pending:
            self._done(written + pending, err)
        os.close(req)  # the sync process reads EOF and exits
        rep = self._sync_rep

        def detach() -> None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(rep)  # type: ignore[union-attr]
            os.close(rep)

        try:
            self._loop.call_soon_threadsafe(detach)  # type: ignore[union-attr]
        except RuntimeError:  # the loop is closed
            os.close(rep)
        if self._syncer is not None:
            try:
                self._syncer.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self._syncer.kill()

    # DuckDB loading and sealing (loader thread; also close()) ----------------------------------------------
    def _loader(self) -> None:
        while not self._loader_stop.wait(self.load_interval):
            try:
                self._load_pending()
                if (
                    self._erasures is not None
                    and time.monotonic() - self._last_erasure_poll >= self.erasure_poll_s
                ):
                    self._apply_erasures()
                if self._seal_request.is_set() or time.monotonic() - self._last_seal >= self.segment_seconds:
                    self._seal_request.clear()
                    self._seal()
                    with self._seal_done:
                        self._seals_completed += 1
                        self._seal_done.notify_all()
            except Exception as exc:  # keep serving; /readyz reports it
                self.error = f"loader: {type(exc).__name__}: {exc}"

    def _load_pending(self) -> None:
        with self._load_lock:
            rows, self._to_load = self._to_load, []
            encoded, self._to_load_json = self._to_load_json, []
            self._loading = rows
        try:
            if rows:
                self._insert(rows, encoded if len(encoded) == len(rows) else None)
        finally:
            with self._load_lock:
                self._loading = []

    # lookups (the feedback route: is this request, or this episode, the caller's?) ---------------------------------
    def find_rows(
        self, column: str, values: list[str], columns: list[str], client: str | None = None
    ) -> list[dict]:
        """This replica's request rows whose `column` (request_id or episode) is one of `values` (of `client`
        when given), as dicts of `columns`: rows journaled but not yet in DuckDB first (read under the load lock,
        so an acknowledged row is always in memory or already committed), then DuckDB."""
        assert column in ("request_id", "episode") and columns[0] == "request_id"
        want = set(values)
        with self._load_lock:
            mem = [
                r
                for r in (*self._loading, *self._to_load)
                if r.get("kind") == "request"
                and r.get(column) in want
                and (client is None or r.get("client") == client)
            ]
        found = [{c: r.get(c) for c in columns} for r in mem]
        con = self._con
        if con is None or not want:
            return found
        cur = con.cursor()  # a separate connection to the same database: safe beside the loader thread
        try:
            marks = ", ".join("?" for _ in want)
            who = " AND client = ?" if client is not None else ""
            out = cur.execute(
                f"SELECT {', '.join(columns)} FROM ledger WHERE kind = 'request' AND {column} IN ({marks}){who} "
                "ORDER BY seq",
                [*sorted(want), *([client] if client is not None else [])],
            ).fetchall()
        finally:
            cur.close()
        seen = {r["request_id"] for r in found}
        return found + [dict(zip(columns, r, strict=True)) for r in out if r[0] not in seen]

    def _insert(self, rows: list[dict[str, Any]], encoded: list[bytes] | None = None) -> None:
        given = rows
        if self._erased:  # a row journaled while its erasure was applied: load it blanked
            rows = [_blank(r) if r.get("request_id") in self._erased else r for r in rows]
        if self._scope_horizon is not None:
            rows = self._scope_late_rows(rows)
        table = rows_to_arrow(rows, encoded=encoded if rows is given else None)  # the JSON: rows as journaled
        self._con.register("incoming", table)
        try:
            self._sql("INSERT INTO ledger SELECT * FROM incoming")
        finally:
            self._con.unregister("incoming")
        self._loaded_seq = rows[-1]["seq"]

    def _recover_sealed(self) -> None:
        """Seqs of this replica's segments above the mark (a crash between publishing and marking)."""
        import pyarrow.parquet as pq

        for rel in self._lake.replica_segments(self.replica):
            if parse_segment_relpath(rel).first_seq > self._sealed_seq:
                with self._lake.open(rel) as fh:
                    seqs = pq.read_table(fh, columns=["seq"]).column("seq").to_pylist()
                self._recovered.update(s for s in seqs if s > self._sealed_seq)

    def _seal(self) -> list[str]:
        import pyarrow.compute as pc

        self._last_seal = time.monotonic()
        table = self._con.sql(
            f"SELECT * FROM ledger WHERE seq > {int(self._sealed_seq)} ORDER BY seq"
        ).to_arrow_table()
        if table.num_rows == 0:
            return []
        table = table.cast(LEDGER_SCHEMA)
        top = int(pc.max(table.column("seq")).as_py())
        if self._recovered:
            keep = pc.invert(pc.is_in(table.column("seq"), value_set=_pa_int64(sorted(self._recovered))))
            table = table.filter(keep)
        written = []
        for day in sorted(pc.unique(table.column("day")).to_pylist()):
            part = table.filter(pc.equal(table.column("day"), day))
            first = int(pc.min(part.column("seq")).as_py())
            rel = segment_relpath(day, self.replica, first)
            if self._lake.exists(rel):
                continue  # published before a crash; its rows are in _recovered (never rewritten)
            sealed_at = {SEALED_AT: clock_now().isoformat().encode()}  # lateness is judged on this clock
            self._lake.publish_table(
                rel, part.replace_schema_metadata({**(part.schema.metadata or {}), **sealed_at})
            )
            written.append(self._lake.path(rel))
        self._sql("INSERT OR REPLACE INTO seal_state VALUES (1, ?)", [top])
        self._sealed_seq = top
        self._recovered = {s for s in self._recovered if s > top}
        return written

    def seal_now(self, timeout: float = 30.0) -> None:
        """Wait until every row appended so far is journaled, loaded and sealed into a segment.

        Waits on the sealed high-water mark rather than on "one more seal": a seal already running when this
        is called may have started before these rows were loaded.
        """
        target = self._seq
        deadline = time.monotonic() + timeout
        with self._flushed:
            self._flushed.wait_for(lambda: self._written_seq >= target or self.error is not None, timeout)
        with self._seal_done:
            while self._sealed_seq < target and self.error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._seal_request.set()
                self._seal_done.wait(remaining)

    # erasures (recorded by ratchet_assets.governance.erase; this replica applies them to its own files) ------------
    def _apply_erasures(self) -> None:
        """Blank the content of newly erased requests' rows in this replica's journal and DuckDB file, and rewrite
        the DuckDB file so no freed block keeps the old text (loader thread only: it alone uses the connection).

        Erased ids come by id, and by each new erasure scope (``ratchet_core.erasure_scope``) matched here
        against this replica's rows written before it; what a scope scrubbed is reported to the control DB."""
        self._last_erasure_poll = time.monotonic()
        try:
            snap = self._erasures()  # type: ignore[misc]
        except Exception:  # the control DB unreachable: serving goes on, the next poll retries
            return
        ids, scopes = (snap.request_ids, snap.scopes) if hasattr(snap, "scopes") else (snap, {})
        new = ({str(r) for r in ids} | self._scoped_late) - self._erased
        pending = {k: m for k, m in scopes.items() if k not in self._scopes_applied}
        by_scope: dict[int, set[str]] = {}
        if pending:
            horizon = max(m.before for m in pending.values())
            cols = ", ".join(SCOPE_COLUMNS)
            table = self._con.sql(
                f"SELECT {cols} FROM ledger WHERE ts < $1", params=[horizon]
            ).to_arrow_table()
            for k, m in pending.items():
                by_scope[k] = m.matched_request_ids(table) - self._erased
                new |= by_scope[k]
        journal = rows = 0
        if new:
            journal = scrub_journal(self.journal_path, new)
            path = self.ledger_dir / f"{self.replica}.duckdb"
            marks = ", ".join("?" for _ in new)
            rows = int(
                self._sql(f"SELECT count(*) FROM ledger WHERE request_id IN ({marks})", sorted(new))[0][0]
            )
            self._con = scrub_duckdb(self._con, path, new)
            self._con.executemany(
                "INSERT OR IGNORE INTO erased_requests VALUES (?)", [[r] for r in sorted(new)]
            )
            self._erased |= new
            self._scoped_late -= new
        if pending:
            self._con.executemany(
                "INSERT OR IGNORE INTO erasure_scopes_applied VALUES (?)", [[k] for k in sorted(pending)]
            )
            self._scopes_applied.update(pending)
        if new or pending:
            self._sql("CHECKPOINT")
        for k, found in by_scope.items():
            with contextlib.suppress(Exception):  # the report is evidence, not a precondition of the scrub
                counts = {
                    "requests": len(found),  # matched in this replica's files (sealed copies included)
                    # found nowhere else (not erased by id): what the scope alone reached here
                    "requests_not_sealed": len(found - set(ids)),
                    "journal_records": journal,
                    "ledger_rows": rows,
                }
                snap.report(k, f"replica:{self.replica}", counts)
        self._scopes = scopes
        # A row is written within an hour of its ts (ts is set when the request arrives): past that, no row
        # still to load can be older than a scope, and loading stops checking.
        recent = [m.before for m in self._active_scopes(scopes).values() if m.before > clock_now() - _HOUR]
        self._scope_horizon = max(recent) if recent else None
        with self._erasure_done:
            self._erasure_done.notify_all()

    def _active_scopes(self, scopes: dict[int, Any]) -> dict[int, Any]:
        return {k: m for k, m in scopes.items() if k in self._scopes_applied}

    def _scope_late_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows loaded after a scope was applied but written before it (in flight at the erasure): blanked here,
        their journal records scrubbed at the next poll."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = rows_to_arrow(rows)
        ts = table.column("ts")
        if not pc.any(pc.less(ts, pa.scalar(self._scope_horizon, ts.type))).as_py():
            return rows
        hit: set[str] = set()
        for m in self._active_scopes(self._scopes).values():
            hit |= m.matched_request_ids(table)
        if not hit:
            return rows
        self._scoped_late |= hit
        return [_blank(r) if r.get("request_id") in hit else r for r in rows]

    def wait_erasures(self, request_ids: Any, timeout: float = 30.0) -> bool:
        """Wait until this replica has applied the erasure of every id in ``request_ids`` (True when it has)."""
        want = set(request_ids)
        with self._erasure_done:
            return self._erasure_done.wait_for(lambda: want <= self._erased, timeout)

    # observability -----------------------------------------------------------------------------------------
    @property
    def lag_rows(self) -> int:
        """Rows acknowledged (journaled) but not yet in DuckDB."""
        return max(0, self._written_seq - self._loaded_seq)

    @property
    def writable(self) -> bool:
        return (
            self._con is not None
            and self.error is None
            and all(t.is_alive() for t in self._threads)
            and (self._syncer is None or self._syncer.poll() is None)
        )

    @property
    def last_seq(self) -> int:
        return self._seq


_HOUR = timedelta(hours=1)


def _blank(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, **dict.fromkeys(CONTENT_COLUMNS, "")}


def scrub_journal(path: Path, request_ids: set[str]) -> int:
    """Overwrite, in place, each journal record of ``request_ids`` with its row blanked (CONTENT_COLUMNS = '')
    padded with JSON whitespace to the record's length: offsets, and the writer appending behind, are untouched.
    Returns the records rewritten."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    fd = os.open(path, os.O_WRONLY)
    n = pos = 0
    try:
        while pos + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, pos)
            start = pos + _HEADER.size
            end = start + length
            if end > len(data) or zlib.crc32(data[start:end]) != crc:
                break
            row = orjson.loads(data[start:end])
            if row.get("request_id") in request_ids:
                body = orjson.dumps(_blank(row)).ljust(length, b" ")
                os.pwrite(fd, _HEADER.pack(length, zlib.crc32(body)) + body, pos)
                n += 1
            pos = end
        os.fsync(fd)
    finally:
        os.close(fd)
    return n


def scrub_duckdb(con: Any, path: Path, request_ids: set[str]) -> Any:
    """Blank these requests' rows in the ledger at ``path`` (connection ``con`` or None) and copy the database into
    a fresh file renamed over it: DuckDB reuses freed blocks without zeroing them. Returns the new connection."""
    import duckdb

    con = con or duckdb.connect(str(path))
    sets = ", ".join(f"{c} = ''" for c in CONTENT_COLUMNS)
    con.register("erased_ids", _pa_strings(sorted(request_ids)))
    con.execute(f"UPDATE ledger SET {sets} WHERE request_id IN (SELECT r FROM erased_ids)").fetchall()
    con.unregister("erased_ids")
    fresh = path.with_name(f".{path.name}.erase-{os.getpid()}")
    fresh.unlink(missing_ok=True)
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    con.execute(f"ATTACH '{fresh}' AS fresh_copy")
    con.execute(f'COPY FROM DATABASE "{db}" TO fresh_copy')
    con.execute("DETACH fresh_copy")
    con.close()
    os.replace(fresh, path)
    Path(f"{path}.wal").unlink(missing_ok=True)  # closed cleanly: checkpointed into the file just replaced
    return duckdb.connect(str(path))


def _pa_strings(values: list[str]):
    import pyarrow as pa

    return pa.table({"r": pa.array(values, pa.string())})


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# The journal's sync process (loop mode): one fdatasync per request byte, answered with b"K" (b"E<why>" and exit
# on failure). It ignores SIGINT/SIGTERM (a Ctrl-C or a process-group SIGTERM reaches it too): it exits when
# the gateway closes the request pipe or dies, so a graceful shutdown can still commit its last batch.
_SYNC_PROCESS = """
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


def _resolve(futs: list[asyncio.Future], err: BaseException | None) -> None:
    for fut in futs:
        if not fut.done():
            if err is None:
                fut.set_result(None)
            else:
                fut.set_exception(OSError(f"ledger write failed: {err}"))


def _pa_int64(values: list[int]):
    import pyarrow as pa

    return pa.array(values, type=pa.int64())
