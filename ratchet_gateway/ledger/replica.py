""":class:`Ledger`: one replica's ledger -- its slot, the append API, the loader that moves journaled rows into
DuckDB and seals them into the lake (the package docstring says why this shape)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ratchet_core.clock import now as clock_now
from ratchet_core.lake import LEDGER_ID, SEALED_AT, Lake, parse_segment_relpath, segment_relpath
from ratchet_core.schema import LEDGER_SCHEMA, duckdb_ddl
from ratchet_gateway.ledger.arrow import pa_int64, rows_to_arrow
from ratchet_gateway.ledger.commit import CommitQueue, Entry, LoopCommit, ThreadCommit
from ratchet_gateway.ledger.erasure import Erasures
from ratchet_gateway.ledger.journal import Journal, read_journal


def default_replica_base() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname()) or "replica"


class ReplicaConflict(RuntimeError):
    """Another ledger's segments carry this replica's name in the lake: two gateways share a replica id."""


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
        on_sealed: Callable[[str, Any], None] | None = None,
    ):
        self.ledger_dir = Path(ledger_dir)
        self.lake_root = str(lake_root)
        self._lake = Lake(self.lake_root)
        self.segment_seconds = segment_seconds
        self.replica_base = replica_base or default_replica_base()
        self.load_interval = load_interval
        self.journal_max_bytes = journal_max_bytes
        self.on_commit = on_commit
        self.on_sealed = on_sealed  # (lake-relative name, Arrow rows) after each segment is published
        self.replica = ""
        self.ledger_id = ""  # this ledger's own id (``open``): stamped on its segments
        self.error: str | None = None
        self._queue = CommitQueue()
        self.engine: LoopCommit | ThreadCommit | None = None  # the journal's group commit (``open``)
        self._journal: Journal | None = None
        self._to_load: list[dict[str, Any]] = []
        self._to_load_json: list[bytes] = []  # the same rows' journal JSON (rows_to_arrow's fast path)
        self._loading: list[dict[str, Any]] = []  # rows being inserted into DuckDB now (find_rows sees them)
        self._load_lock = threading.Lock()
        self._loader_stop = threading.Event()
        self._seal_request = threading.Event()
        self._seal_done = threading.Condition()
        self._seals_completed = 0
        self._seq = 0
        self._written_seq = 0
        self._loaded_seq = 0
        self._sealed_seq = 0
        self._recovered: set[int] = set()
        self._lock_fd = -1
        self._con = None
        self._loader_thread: threading.Thread | None = None
        # Erasures recorded in the control DB (``erasures`` returns every erased request id), applied by the loader.
        self._erasures = Erasures(erasures, erasure_poll_s)

    # lifecycle ---------------------------------------------------------------------------------------------
    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Take a free replica slot, replay the journal tail, start the group commit and the loader thread. With
        `loop` (the gateway's event loop, running), appends made on that loop are group-committed by the loop
        itself and a sync process (``ratchet_gateway.ledger.commit.LoopCommit``); without it, by a writer thread
        (``ThreadCommit``)."""
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
        db_path = self.ledger_dir / f"{self.replica}.duckdb"
        fresh = not db_path.exists()
        self._con = duckdb.connect(str(db_path))
        self._sql(duckdb_ddl("ledger"))
        self._sql("CREATE TABLE IF NOT EXISTS seal_state (id INTEGER PRIMARY KEY, sealed_seq BIGINT)")
        self.ledger_id = self._identity()
        self._erasures.load(self._sql)
        self._loaded_seq = int(self._sql("SELECT coalesce(max(seq), 0) FROM ledger")[0][0])
        rows = self._sql("SELECT sealed_seq FROM seal_state WHERE id = 1")
        self._sealed_seq = int(rows[0][0]) if rows else 0
        # Replay the journal tail that never reached DuckDB.
        tail = [r for r in read_journal(self.journal_path) if r["seq"] > self._loaded_seq]
        if tail:
            self._insert(tail)
        self._seq = self._written_seq = self._loaded_seq
        try:
            self._check_own_segments(fresh)
        except ReplicaConflict:
            self._con.close()
            self._con = None
            os.close(self._lock_fd)
            raise
        self._recover_sealed()
        self._journal = Journal(self.journal_path, self.journal_max_bytes)
        self._journal.open()
        self._last_seal = time.monotonic()
        if loop is not None:
            self.engine = LoopCommit(self._queue, self._journal, self, loop)
        else:
            self.engine = ThreadCommit(self._queue, self._journal, self, f"ledger-journal-{self.replica}")
        self.engine.start()
        self._loader_thread = threading.Thread(
            target=self._loader, name=f"ledger-loader-{self.replica}", daemon=True
        )
        self._loader_thread.start()

    def _sql(self, query: str, params: list | None = None) -> list[tuple]:
        # DuckDB 2 refuses new work on a connection with an unfinished result: always fetch everything.
        return self._con.execute(query, params or []).fetchall()

    @property
    def journal_path(self) -> Path:
        return self.ledger_dir / f"{self.replica}.journal"

    def close(self) -> None:
        if self._con is None:
            return
        with self._queue.cv:
            self._queue.stopping = True
            self._queue.cv.notify_all()
        if self.engine is not None:
            self.engine.stop()
        self._loader_stop.set()
        if self._loader_thread is not None:
            self._loader_thread.join()
        self._load_pending()
        try:
            self._seal()
        except ReplicaConflict as exc:  # the rows stay here, unsealed: the next start says so again
            self.error = str(exc)
        self._journal.close(all_loaded=self._loaded_seq >= self._written_seq)  # type: ignore[union-attr]
        self._sql("CHECKPOINT")
        self._con.close()
        self._con = None
        os.close(self._lock_fd)

    # appending ---------------------------------------------------------------------------------------------
    async def append(self, row: dict[str, Any], encoded: bytes | None = None) -> int:
        """Give ``row`` the next seq and return it once the row is fdatasync'd in the journal. `encoded`: the row
        as JSON already, without ``seq`` and ``replica`` (a large row, written off the event loop)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        seq = self._enqueue(row, fut, loop, encoded)
        await fut
        return seq

    def append_nowait(self, row: dict[str, Any]) -> int:
        """Queue a row without awaiting durability (rows written off the request path)."""
        return self._enqueue(row, None, None)

    def _enqueue(self, row, fut, loop, encoded: bytes | None = None) -> int:
        if self.error:
            raise OSError(f"ledger is not writable: {self.error}")
        q = self._queue
        with q.cv:
            if q.stopping:
                raise OSError("ledger is closed")
            self._seq += 1
            seq = row["seq"] = self._seq
            row["replica"] = self.replica
            if encoded is None:
                data = orjson.dumps(row)
            else:  # the same document: seq and replica first, then the row's own members
                head = b'{"seq":%d,"replica":%s' % (seq, orjson.dumps(self.replica))
                data = head + (b"," + encoded[1:] if len(encoded) > 2 else b"}")
            q.rows.append((data, row, fut, loop))
            if self.engine is not None:
                self.engine.queued()
        return seq

    # what the group commit reports (``ratchet_gateway.ledger.commit.CommitSink``) --------------------------
    def journal_all_loaded(self) -> bool:
        return self._loaded_seq >= self._written_seq

    def batch_done(
        self, batch: list[Entry], err: BaseException | None, seconds: float, loop_here: Any
    ) -> None:
        """A batch is durable (queue its rows for loading) or failed; resolve its appends' futures, directly
        when on their loop, else through it."""
        if err is None:
            self._written_seq = batch[-1][1]["seq"]
            if self.on_commit:
                self.on_commit(seconds, len(batch))
            with self._load_lock:
                self._to_load.extend([e[1] for e in batch])
                self._to_load_json.extend([e[0] for e in batch])
        with self._queue.flushed:
            self._queue.flushed.notify_all()
        here: list[asyncio.Future] = []
        elsewhere: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
        for _, _, fut, loop in batch:
            if fut is None:
                continue
            if loop is loop_here:
                here.append(fut)
            else:
                elsewhere.setdefault(loop, []).append(fut)  # type: ignore[arg-type]
        if here:
            _resolve(here, err)
        for loop, futs in elsewhere.items():
            with contextlib.suppress(RuntimeError):  # loop closed
                loop.call_soon_threadsafe(_resolve, futs, err)

    # DuckDB loading and sealing (loader thread; also close()) ----------------------------------------------
    def _loader(self) -> None:
        while not self._loader_stop.wait(self.load_interval):
            try:
                self._load_pending()
                if self._erasures.due:
                    path = self.ledger_dir / f"{self.replica}.duckdb"
                    self._con = self._erasures.apply(self._con, self.journal_path, path, self.replica)
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

    def find_rows(
        self, column: str, values: list[str], columns: list[str], client: str | None = None
    ) -> list[dict[str, Any]]:
        """This replica's request rows whose `column` (request_id or episode) is one of `values` (of `client` when
        given), as dicts of `columns` (request_id first): rows journaled but not yet in DuckDB first, read under the
        load lock, so an acknowledged row is always in memory or already committed; then DuckDB (the feedback
        route: ``ratchet_gateway.feedback``)."""
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
        rows = self._erasures.blank_loading(rows)
        table = rows_to_arrow(rows, encoded=encoded if rows is given else None)  # the JSON: rows as journaled
        self._con.register("incoming", table)
        try:
            self._sql("INSERT INTO ledger SELECT * FROM incoming")
        finally:
            self._con.unregister("incoming")
        self._loaded_seq = rows[-1]["seq"]

    def _identity(self) -> str:
        """This ledger's id (made once, kept in its DuckDB file): stamped on every segment it seals."""
        import uuid

        self._sql("CREATE TABLE IF NOT EXISTS ledger_identity (id VARCHAR)")
        rows = self._sql("SELECT id FROM ledger_identity")
        if rows:
            return str(rows[0][0])
        new = uuid.uuid4().hex
        self._sql("INSERT INTO ledger_identity VALUES (?)", [new])
        return new

    def _check_own_segments(self, fresh: bool) -> None:
        """Refuse to run as a replica whose name already has segments in the lake from another ledger: a new
        ledger may take a name with no segments, a ledger that sealed before finds its own id on the newest one.
        (Two gateways with one name would otherwise write each other's segment names.)"""
        segments = self._lake.replica_segments(self.replica)
        if not segments:
            return
        newest = segments[-1]
        owner = self._lake.ledger_of(newest)
        if owner == self.ledger_id or (
            owner is None and not fresh
        ):  # ours (or sealed before ids were stamped)
            return
        raise ReplicaConflict(
            f"replica id {self.replica} already has {len(segments)} segment(s) in the lake {self.lake_root} "
            f"sealed by another ledger ({owner or 'unknown'}, e.g. {newest}); this ledger ({self.ledger_dir}) is "
            "not theirs. Give this gateway its own replica id (RATCHET_REPLICA_ID or `ratchet gateway --replica "
            "NAME`); gateways that share a lake need distinct ones."
        )

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
            keep = pc.invert(pc.is_in(table.column("seq"), value_set=pa_int64(sorted(self._recovered))))
            table = table.filter(keep)
        written = []
        for day in sorted(pc.unique(table.column("day")).to_pylist()):
            part = table.filter(pc.equal(table.column("day"), day))
            first = int(pc.min(part.column("seq")).as_py())
            rel = segment_relpath(day, self.replica, first)
            # lateness is judged on this clock; the ledger id says whose segment it is
            stamp = {SEALED_AT: clock_now().isoformat().encode(), LEDGER_ID: self.ledger_id.encode()}
            try:
                # written once: a name taken (by another gateway with this replica id) is never replaced
                self._lake.publish_table(
                    rel, part.replace_schema_metadata({**(part.schema.metadata or {}), **stamp}), once=True
                )
            except FileExistsError:
                # the rows stay in this ledger (the mark does not move): nothing is lost, the loader reports it
                raise ReplicaConflict(
                    f"cannot seal {rel}: the name is taken in the lake by another writer with replica id "
                    f"{self.replica}; the rows stay in this replica's ledger. Give each gateway its own replica "
                    "id (RATCHET_REPLICA_ID) and restart."
                ) from None
            self._recovered.update(
                part.column("seq").to_pylist()
            )  # sealed: a retry after a failure skips them
            if self.on_sealed is not None:
                self.on_sealed(rel, part)
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
        flushed = self._queue.flushed
        with flushed:
            flushed.wait_for(lambda: self._written_seq >= target or self.error is not None, timeout)
        with self._seal_done:
            while self._sealed_seq < target and self.error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._seal_request.set()
                self._seal_done.wait(remaining)

    def wait_erasures(self, request_ids: Any, timeout: float = 30.0) -> bool:
        """Wait until this replica has applied the erasure of every id in ``request_ids`` (True when it has)."""
        return self._erasures.wait(request_ids, timeout)

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
            and self._loader_thread is not None
            and self._loader_thread.is_alive()
            and self.engine is not None
            and self.engine.alive()
        )

    @property
    def last_seq(self) -> int:
        return self._seq


def _resolve(futs: list[asyncio.Future], err: BaseException | None) -> None:
    for fut in futs:
        if not fut.done():
            if err is None:
                fut.set_result(None)
            else:
                fut.set_exception(OSError(f"ledger write failed: {err}"))
