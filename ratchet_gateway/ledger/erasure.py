"""Erasure on a replica (``ratchet erase``): the content of erased requests removed from every file this replica
alone owns, their rows kept blanked.

The control plane records erased request ids and erasure scopes (``erase --user/--client/--text/--since``,
``ratchet_core.erasure_scope``) in the control DB; the ledger's loader thread polls them every ``poll_s`` and
:meth:`Erasures.apply` scrubs this replica's files: journal records are rewritten in place with the content columns
blanked (:func:`scrub_journal`), the DuckDB rows blanked and the database copied into a fresh file renamed over the
old one (:func:`scrub_duckdb`), so no freed block keeps the text. A scope is matched against this replica's own
rows written before the erasure, unsealed ones included, and what it scrubbed is reported to the control DB. Rows
loaded later are loaded blanked (:meth:`Erasures.blank_loading`), so they are sealed blanked.
"""

from __future__ import annotations

import contextlib
import os
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
from ratchet_core.schema import CONTENT_COLUMNS
from ratchet_gateway.ledger.arrow import rows_to_arrow
from ratchet_gateway.ledger.journal import HEADER, intact_records

_HOUR = timedelta(hours=1)


def blank(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with its content columns (``CONTENT_COLUMNS``) emptied."""
    return {**row, **dict.fromkeys(CONTENT_COLUMNS, "")}


class Erasures:
    """What this replica has erased, and the application of new erasures (loader thread only: it alone uses the
    DuckDB connection)."""

    def __init__(self, source: Callable[[], Any] | None, poll_s: float):
        self.source = source  # () -> ErasureSnapshot (or the erased ids): every erasure recorded so far
        self.poll_s = poll_s
        self.erased: set[str] = set()
        self._last_poll = 0.0
        self._done = threading.Condition()
        self._scopes: dict[int, Any] = {}  # erasure log id -> ScopeMatcher, as last polled
        self._scopes_applied: set[int] = set()
        self._scope_horizon: Any = None  # rows written before this may match an applied scope
        self._scoped_late: set[str] = set()  # matched on load, journal records still to scrub

    def load(self, sql: Callable[[str], list[tuple]]) -> None:
        """What this replica applied before (its DuckDB file's tables, created when absent)."""
        sql("CREATE TABLE IF NOT EXISTS erased_requests (request_id VARCHAR PRIMARY KEY)")
        self.erased = {r[0] for r in sql("SELECT request_id FROM erased_requests")}
        sql("CREATE TABLE IF NOT EXISTS erasure_scopes_applied (log_id BIGINT PRIMARY KEY)")
        self._scopes_applied = {int(r[0]) for r in sql("SELECT log_id FROM erasure_scopes_applied")}

    @property
    def due(self) -> bool:
        """Whether the loader should poll the control DB now."""
        return self.source is not None and time.monotonic() - self._last_poll >= self.poll_s

    def blank_loading(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows about to be loaded, erased ones blanked (a row journaled while its erasure was applied, or written
        before an applied scope but loaded after it). The same list when no erasure could touch them."""
        if self.erased:
            rows = [blank(r) if r.get("request_id") in self.erased else r for r in rows]
        if self._scope_horizon is not None:
            rows = self._scope_late_rows(rows)
        return rows

    def apply(self, con: Any, journal_path: Path, duckdb_path: Path, replica: str) -> Any:
        """Blank the content of newly erased requests' rows in this replica's journal and DuckDB file, and rewrite
        the DuckDB file so no freed block keeps the old text. Returns the connection to use from now on.

        Erased ids come by id, and by each new erasure scope (``ratchet_core.erasure_scope``) matched here
        against this replica's rows written before it; what a scope scrubbed is reported to the control DB, and the
        feedback on those requests deleted there."""
        self._last_poll = time.monotonic()
        try:
            snap = self.source()  # type: ignore[misc]
        except Exception:  # the control DB unreachable: serving goes on, the next poll retries
            return con
        ids, scopes = (snap.request_ids, snap.scopes) if hasattr(snap, "scopes") else (snap, {})
        new = ({str(r) for r in ids} | self._scoped_late) - self.erased
        pending = {k: m for k, m in scopes.items() if k not in self._scopes_applied}
        by_scope: dict[int, set[str]] = {}
        if pending:
            horizon = max(m.before for m in pending.values())
            cols = ", ".join(SCOPE_COLUMNS)
            table = con.sql(f"SELECT {cols} FROM ledger WHERE ts < $1", params=[horizon]).to_arrow_table()
            for k, m in pending.items():
                by_scope[k] = m.matched_request_ids(table) - self.erased
                new |= by_scope[k]
        journal = rows = 0
        if new:
            journal = scrub_journal(journal_path, new)
            marks = ", ".join("?" for _ in new)
            count = con.execute(f"SELECT count(*) FROM ledger WHERE request_id IN ({marks})", sorted(new))
            rows = int(count.fetchall()[0][0])
            con = scrub_duckdb(con, duckdb_path, new)
            con.executemany("INSERT OR IGNORE INTO erased_requests VALUES (?)", [[r] for r in sorted(new)])
            self.erased |= new
            self._scoped_late -= new
        if pending:
            con.executemany(
                "INSERT OR IGNORE INTO erasure_scopes_applied VALUES (?)", [[k] for k in sorted(pending)]
            )
            self._scopes_applied.update(pending)
        if new or pending:
            con.execute("CHECKPOINT").fetchall()
        for k, found in by_scope.items():
            with contextlib.suppress(Exception):  # the report is evidence, not a precondition of the scrub
                counts = {
                    "requests": len(found),  # matched in this replica's files (sealed copies included)
                    # found nowhere else (not erased by id): what the scope alone reached here
                    "requests_not_sealed": len(found - set(ids)),
                    "journal_records": journal,
                    "ledger_rows": rows,
                }
                if hasattr(snap, "forget_feedback"):
                    counts["feedback_items"] = snap.forget_feedback(found)
                snap.report(k, f"replica:{replica}", counts)
        self._scopes = scopes
        # A row is written within an hour of its ts (ts is set when the request arrives): past that, no row
        # still to load can be older than a scope, and loading stops checking.
        recent = [m.before for m in self._active_scopes(scopes).values() if m.before > clock_now() - _HOUR]
        self._scope_horizon = max(recent) if recent else None
        with self._done:
            self._done.notify_all()
        return con

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
        return [blank(r) if r.get("request_id") in hit else r for r in rows]

    def wait(self, request_ids: Any, timeout: float = 30.0) -> bool:
        """Wait until every id in ``request_ids`` is erased here (True when it is)."""
        want = set(request_ids)
        with self._done:
            return self._done.wait_for(lambda: want <= self.erased, timeout)


def scrub_journal(path: Path, request_ids: set[str]) -> int:
    """Overwrite, in place, each journal record of ``request_ids`` with its row blanked (CONTENT_COLUMNS = '')
    padded with JSON whitespace to the record's length: offsets, and the writer appending behind, are untouched.
    Returns the records rewritten."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    fd = os.open(path, os.O_WRONLY)
    n = 0
    try:
        for pos, length, payload in intact_records(data):
            row = orjson.loads(payload)
            if row.get("request_id") in request_ids:
                body = orjson.dumps(blank(row)).ljust(length, b" ")
                os.pwrite(fd, HEADER.pack(length, zlib.crc32(body)) + body, pos)
                n += 1
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
