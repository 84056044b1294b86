"""The sealed request-id index: which client's request an id is, without reading the lake.

Every request row a gateway seals into the lake is indexed in the control DB (``sealed_requests``: request id ->
client, episode, segment; ``sealed_segments``: the segments indexed), by the sealer that wrote it
(:meth:`SealedIndex.sealed`, called by the ledger after each publish). The feedback routes
(``ratchet_gateway.feedback``) then find a sealed request with one indexed lookup per batch, filtered by the
caller's client first: an id that is unknown and an id of another client give the same empty answer, and neither
reads a segment. Only the caller's own requests are read from their segment (the columns a feedback item is
checked against).

Segments sealed before the index existed (or while the control DB was unreachable) are indexed by
:meth:`SealedIndex.catch_up`: at gateway start in the background, and after any seal whose index write failed.
An erasure rewrites a segment in place under the same name, so the index stays right; a segment removed since is
read as holding no row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ratchet_core.lake import Lake

log = logging.getLogger("ratchet.gateway")

_CHUNK = 500  # ids per IN (...) query
RETRY_S = 60.0  # seconds between catch-ups that failed


def _insert_ignoring_taken(conn: Any, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert `rows`, skipping those whose key is already there (a segment indexed twice, by two replicas)."""
    if not rows:
        return
    name = conn.dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:  # pragma: no cover - another backend: row by row
        for row in rows:
            try:
                with conn.begin_nested():
                    conn.execute(table.insert().values(**row))
            except sa.exc.IntegrityError:
                pass
        return
    conn.execute(insert(table).on_conflict_do_nothing(), rows)


def index_table(engine: Any, rel: str, table: Any) -> int:
    """Index the request rows of one sealed segment (`rel`, lake-relative; `table` its Arrow rows); returns how
    many request rows it holds. Indexing a segment again is a no-op."""
    from ratchet_core.control_db import sealed_requests, sealed_segments

    names = set(table.column_names)
    kinds = table.column("kind").to_pylist()
    ids = table.column("request_id").to_pylist()
    clients = table.column("client").to_pylist()
    episodes = table.column("episode").to_pylist() if "episode" in names else [None] * len(ids)
    rows = [
        {"request_id": r, "client": c, "episode": e or None, "segment": rel}
        for k, r, c, e in zip(kinds, ids, clients, episodes, strict=True)
        if k == "request" and r
    ]
    with engine.begin() as conn:
        for i in range(0, len(rows), _CHUNK):
            _insert_ignoring_taken(conn, sealed_requests, rows[i : i + _CHUNK])
        _insert_ignoring_taken(
            conn,
            sealed_segments,
            [{"segment": rel, "requests": len(rows), "indexed_at": datetime.now(UTC).isoformat()}],
        )
    return len(rows)


class SealedIndex:
    """One gateway's writer and reader of the index (module docstring)."""

    def __init__(self, lake_root: str):
        self.lake_root = lake_root
        self.engine: Any = None  # the control DB, once the gateway has started
        self._behind = True  # segments may be missing from the index: catch up before trusting a miss fully
        self._lock = threading.Lock()
        self._next_try = (
            0.0  # after a failed catch-up, the next one waits RETRY_S (a bad segment, the DB away)
        )

    # writing ---------------------------------------------------------------------------------------------------
    def sealed(self, rel: str, table: Any) -> None:
        """The ledger sealed `table` as `rel` (called in its loader thread): index it, or remember to catch up."""
        engine = self.engine
        if engine is None:
            self._behind = True
            return
        try:
            index_table(engine, rel, table)
        except Exception as exc:  # the control DB is away: the next catch-up indexes it
            log.warning("sealed segment %s not indexed yet: %s", rel, type(exc).__name__)
            self._behind = True

    def catch_up(self) -> int:
        """Index every sealed segment of the lake the index does not hold yet; returns how many were indexed."""
        from ratchet_core.control_db import sealed_segments

        engine = self.engine
        if engine is None:
            return 0
        with self._lock:
            self._behind = False
            lake = Lake(self.lake_root)
            with engine.connect() as conn:
                done = set(conn.execute(sa.select(sealed_segments.c.segment)).scalars())
            count = 0
            try:
                for day in lake.days():
                    for seg in lake.segments(day):
                        if seg.rel in done:
                            continue
                        names = set(lake.read_schema(seg.rel).names)
                        cols = [c for c in ("kind", "request_id", "client", "episode") if c in names]
                        index_table(engine, seg.rel, lake.read_table(seg.rel, columns=cols))
                        count += 1
            except Exception:
                self._behind = True
                self._next_try = time.monotonic() + RETRY_S
                raise
            return count

    @property
    def behind(self) -> bool:
        """Whether a sealed segment may be missing from the index (a miss is then not yet proof of absence)."""
        return self._behind

    @property
    def due(self) -> bool:
        """Whether a catch-up should run now (behind, and not within RETRY_S of a failed one)."""
        return self._behind and time.monotonic() >= self._next_try

    # reading ---------------------------------------------------------------------------------------------------
    def segments_of(self, client: str, request_ids: Iterable[str]) -> dict[str, str]:
        """The caller's own sealed requests among `request_ids`: request id -> segment. Ids of other clients are
        left out by the query itself, exactly as unknown ids are."""
        from ratchet_core.control_db import sealed_requests

        ids = sorted(set(request_ids))
        out: dict[str, str] = {}
        if self.engine is None or not ids:
            return out
        t = sealed_requests.c
        with self.engine.connect() as conn:
            for i in range(0, len(ids), _CHUNK):
                query = sa.select(t.request_id, t.segment).where(
                    (t.client == client) & t.request_id.in_(ids[i : i + _CHUNK])
                )
                out.update({r: s for r, s in conn.execute(query)})
        return out

    def episode_seen(self, client: str, episode: str) -> bool:
        """Whether a sealed request of `client` carries `episode`."""
        from ratchet_core.control_db import sealed_requests

        if self.engine is None:
            return False
        t = sealed_requests.c
        with self.engine.connect() as conn:
            query = sa.select(t.request_id).where((t.client == client) & (t.episode == episode)).limit(1)
            return conn.execute(query).first() is not None
