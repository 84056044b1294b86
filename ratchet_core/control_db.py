"""The control DB engine: small transactional state several processes share (SQLAlchemy Core).

SQLite in WAL mode by default (readers never block the writer; `busy_timeout` makes concurrent writers wait
instead of failing); any SQLAlchemy URL (e.g. ``postgresql+psycopg://``) at scale.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

_ENGINES: dict[str, Engine] = {}


def make_engine(url: str) -> Engine:
    """Return one engine per URL per process; for SQLite, create the folder and turn on WAL."""
    engine = _ENGINES.get(url)
    if engine is not None:
        return engine
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            # pysqlite's own implicit BEGIN would fight the BEGIN IMMEDIATE below (SQLAlchemy's SQLite recipe).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _sqlite_begin_immediate(conn):  # serialise writers up front: no lost updates under concurrency
            conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        engine = sa.create_engine(url, pool_pre_ping=True)
    _ENGINES[url] = engine
    return engine
