"""The control DB: small transactional state several processes share (SQLAlchemy Core), in one schema.

SQLite in WAL mode by default (readers never block the writer; `busy_timeout` makes concurrent writers wait
instead of failing); any SQLAlchemy URL (e.g. ``postgresql+psycopg://``) at scale.

Every table lives in the one :data:`metadata` below, and :func:`ensure_schema` is the only place that creates
and migrates them (idempotent, safe when several processes start at once). The modules that use a table import
it from here:

- ``release_manifests``, ``release_manifest_lock``: signed release manifests (``ratchet_core.manifest``);
- ``trusted_keys``: the signed history of the keys gateways trust (``ratchet_core.keys``);
- ``versions``, ``version_certificates``, ``release_audit_log``, ``release_state``, ``failed_nights``: release control
  (``ratchet_assets.release.registry``);
- ``effects``, ``effect_policies``, ``effect_approvals``, ``effect_spend``: the effect gate
  (``ratchet_assets.effects``);
- ``erasures``: forgotten examples (``ratchet_assets.night.erasures``); ``erasure_log``: the signed log of
  erasures (``ratchet_assets.governance.erase``);
- ``erasure_scopes``, ``erasure_applied``: each erasure's predicate and what each replica or night scrubbed
  for it (``ratchet_core.erasure_scope``);
- ``gateway_safety_events``: a gateway's narrowing switches (``ratchet_gateway.safety``);
- ``client_limits``, ``client_spend``, ``gateway_replicas``: per-client rate limits and budgets, each replica's
  spend per client and budget window, replica heartbeats (``ratchet_core.client_limits``);
- ``feedback``: what applications said about answers (metrics, comments, demonstrations), keyed by client and
  the client's feedback id (``ratchet_core.feedback``);
- ``sealed_requests``, ``sealed_segments``: the sealed request-id index (request id -> client, episode, segment),
  kept by each gateway's sealer (``ratchet_gateway.sealed_index``);
- ``ratchet_schema``: one row, the schema version (:data:`SCHEMA_VERSION`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

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


# ---------------------------------------------------------------------------------------------------------------
# The schema: every table of the control DB.

metadata = sa.MetaData()

# Release manifests (ratchet_core.manifest): a hash chain of DSSE envelopes, one row per publish.
release_manifests = sa.Table(
    "release_manifests",
    metadata,
    sa.Column("sequence", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("envelope", sa.Text, nullable=False),
    sa.Column("digest", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
)

# One row; publishers lock it (FOR UPDATE) on databases where BEGIN IMMEDIATE does not exist (Postgres).
release_manifest_lock = sa.Table(
    "release_manifest_lock",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
)

# The keys gateways trust (ratchet_core.keys): one signed change (add | retire) per row, each signed by a key
# trusted before it; the columns beside the envelope repeat the signed fields for queries and listings.
trusted_keys = sa.Table(
    "trusted_keys",
    metadata,
    sa.Column("sequence", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("action", sa.String(16), nullable=False),  # add | retire
    sa.Column("key_id", sa.String(64), nullable=False, index=True),
    sa.Column("public_key", sa.Text, nullable=False),  # base64 of the raw 32 bytes
    sa.Column("signed_by", sa.String(64), nullable=False),  # key id of the signer
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("at", sa.String(40), nullable=False),
    sa.Column("envelope", sa.Text, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
)

# Release control (ratchet_assets.release.registry).
versions = sa.Table(
    "versions",
    metadata,
    sa.Column("version", sa.String(200), primary_key=True),
    sa.Column("task", sa.String(200), primary_key=True),
    sa.Column("stage", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("threshold", sa.Float, nullable=True),
    sa.Column("certificate_path", sa.Text, nullable=False),
    sa.Column("day", sa.String(10), nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
    sa.Column("note", sa.Text, nullable=False),
)

# Every certificate of a version, one row each (ratchet_assets.release.registry): a night whose adapter equals an
# existing version's content re-certifies it (ratchet_assets.release.content); ``previous_digest`` chains each
# certificate to the version's earlier one ("" for its first).
version_certificates = sa.Table(
    "version_certificates",
    metadata,
    sa.Column("certificate_path", sa.Text, primary_key=True),
    sa.Column("version", sa.String(200), nullable=False, index=True),
    sa.Column("day", sa.String(10), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),  # SHA-256 of the envelope file's bytes
    sa.Column("previous_digest", sa.String(64), nullable=False),
    sa.Column("golden_root", sa.String(64), nullable=False),
    sa.Column("certified_tasks", sa.Text, nullable=False),  # comma-separated
    sa.Column("registered_at", sa.String(40), nullable=False),
)

release_audit_log = sa.Table(
    "release_audit_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.String(40), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("details", sa.Text, nullable=False),
    sa.Column("manifest_sequence", sa.Integer, nullable=True),
)

# The release sensor's state, written in the same transaction as each manifest it publishes: a sensor that dies
# after publishing but before Dagster stores its cursor resumes from here, never re-spending evidence.
release_state = sa.Table(
    "release_state",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)

failed_nights = sa.Table(
    "failed_nights",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("job_name", sa.String(200), nullable=False),
    sa.Column("partition", sa.String(64), nullable=False),
    sa.Column("failed_at", sa.String(40), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
)

# The effect ledger (ratchet_assets.effects; ARCHITECTURE.md, "Effects").
effects = sa.Table(
    "effects",
    metadata,
    sa.Column("effect_type", sa.String(64), primary_key=True),
    sa.Column("key", sa.String(512), primary_key=True),
    sa.Column("fingerprint", sa.String(128), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("lease_until", sa.String(40), nullable=False),
    sa.Column("token", sa.String(64), nullable=False),
    sa.Column("result", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("note", sa.Text, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)

# Erasures (ratchet_assets.night.erasures): one of the two ids per row.
erasures = sa.Table(
    "erasures",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("example_key", sa.String(64), nullable=True, index=True),
    sa.Column("request_id", sa.String(128), nullable=True, index=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("at", sa.String(40), nullable=False),
)

# The signed erasure log (ratchet_assets.governance.erase): who, why, scope (user and text as SHA-256), counts per
# store, when; `envelope` is the DSSE envelope over the same fields.
erasure_log = sa.Table(
    "erasure_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.String(40), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("counts", sa.Text, nullable=False),
    sa.Column("envelope", sa.Text, nullable=False),
)

# Each erasure's predicate (ratchet_core.erasure_scope.ScopeMatcher as JSON: end users and text only as SHA-256),
# applied by every replica to its unsealed rows and by each night to rows sealed after the erasure.
erasure_scopes = sa.Table(
    "erasure_scopes",
    metadata,
    sa.Column("log_id", sa.Integer, primary_key=True, autoincrement=False),  # erasure_log.id
    sa.Column("at", sa.String(40), nullable=False),  # wall-clock UTC when recorded (segment mtimes compare)
    sa.Column("matcher", sa.Text, nullable=False),
)

# What each store (a replica ``replica:<name>``, a night ``lake:<day>``) scrubbed for an erasure, and when.
erasure_applied = sa.Table(
    "erasure_applied",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("log_id", sa.Integer, nullable=False, index=True),
    sa.Column("store", sa.String(200), nullable=False),
    sa.Column("at", sa.String(40), nullable=False),
    sa.Column("counts", sa.Text, nullable=False),
)

# The effect gate's rules and decisions (ratchet_assets.effects): per effect type its indeterminate policy,
# whether it needs approval, max_attempts and a spend cap per window; one approval per effect; spend reserved
# per execute (state reserved -> spent on report with the actual cost).
effect_policies = sa.Table(
    "effect_policies",
    metadata,
    sa.Column("effect_type", sa.String(64), primary_key=True),
    sa.Column("policy", sa.String(16), nullable=True),
    sa.Column("approval_required", sa.Boolean, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=True),
    sa.Column("cap_usd", sa.Float, nullable=True),
    sa.Column("cap_window_seconds", sa.Integer, nullable=True),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)

effect_approvals = sa.Table(
    "effect_approvals",
    metadata,
    sa.Column("effect_type", sa.String(64), primary_key=True),
    sa.Column("key", sa.String(512), primary_key=True),
    sa.Column("fingerprint", sa.String(128), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # pending | granted | denied
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("requested_by", sa.String(200), nullable=False),
    sa.Column("requested_at", sa.String(40), nullable=False),
    sa.Column("decided_by", sa.String(200), nullable=True),
    sa.Column("decided_at", sa.String(40), nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
)

effect_spend = sa.Table(
    "effect_spend",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("effect_type", sa.String(64), nullable=False, index=True),
    sa.Column("key", sa.String(512), nullable=False),
    sa.Column("token", sa.String(64), nullable=False, index=True),
    sa.Column("usd", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # reserved | spent
    sa.Column("at", sa.String(40), nullable=False),
)

# A gateway's safety-only switches (ratchet_gateway.safety): they only ever narrow what the student serves.
gateway_safety_events = sa.Table(
    "gateway_safety_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),  # student_disabled | pin
    sa.Column("task", sa.Text, nullable=False, server_default=""),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("cleared_at", sa.Text, nullable=True),
    sa.Column("cleared_reason", sa.Text, nullable=True),
)

# Per-client limits (ratchet_core.client_limits): set by `ratchet admin client set`, read by every gateway replica.
client_limits = sa.Table(
    "client_limits",
    metadata,
    sa.Column("client", sa.String(64), primary_key=True),
    sa.Column("rpm", sa.Integer, nullable=True),
    sa.Column("tpm", sa.Integer, nullable=True),
    sa.Column("budget_usd", sa.Float, nullable=True),
    sa.Column("budget_period", sa.String(8), nullable=True),  # day | month
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)

# What each replica served each client in a budget window (day:YYYY-MM-DD | month:YYYY-MM): its running total.
client_spend = sa.Table(
    "client_spend",
    metadata,
    sa.Column("client", sa.String(64), primary_key=True),
    sa.Column("budget_window", sa.String(16), primary_key=True),
    sa.Column("replica", sa.String(200), primary_key=True),
    sa.Column("usd", sa.Float, nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)

# Gateway replica heartbeats: the live ones share each client's rate limits.
gateway_replicas = sa.Table(
    "gateway_replicas",
    metadata,
    sa.Column("replica", sa.String(200), primary_key=True),
    sa.Column("seen_at", sa.Float, nullable=False),  # seconds since the epoch
)

# Feedback (ratchet_core.feedback): one row per (client, the client's feedback id), so a retry is idempotent. The
# target is a request (`request_id`) or an episode the client set on its requests (`episode`). Text (comments,
# demonstrations) is stored redacted by the gateway's rules. `state`: recorded | pending (the request was not
# visible yet: another replica's unsealed row) | rejected (`error` says why).
feedback = sa.Table(
    "feedback",
    metadata,
    sa.Column("client", sa.String(64), primary_key=True),
    sa.Column("feedback_id", sa.String(128), primary_key=True),
    sa.Column("target", sa.String(16), nullable=False),  # request | episode
    sa.Column("request_id", sa.String(128), nullable=True, index=True),
    sa.Column("episode", sa.String(128), nullable=True, index=True),
    sa.Column("task", sa.String(64), nullable=True, index=True),
    sa.Column("metric", sa.String(64), nullable=False),  # a declared metric, comment or demonstration
    sa.Column("kind", sa.String(16), nullable=False),  # boolean | float | comment | demonstration
    sa.Column("value", sa.Float, nullable=True),  # boolean as 0/1, float as given
    sa.Column("text", sa.Text, nullable=True),  # redacted comment, or the demonstration's canonical JSON
    sa.Column("fingerprint", sa.String(64), nullable=False),  # SHA-256 of what was sent: a retry must match
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("error", sa.String(64), nullable=True),
    sa.Column("example_key", sa.String(64), nullable=True, index=True),
    sa.Column("request_day", sa.String(10), nullable=True),
    sa.Column("served_by", sa.String(16), nullable=True),
    sa.Column("version", sa.String(128), nullable=True),
    sa.Column("agrees", sa.Boolean, nullable=True),  # a demonstration: does the served answer agree with it
    sa.Column("received_at", sa.String(40), nullable=False),
    sa.Column("settled_at", sa.String(40), nullable=True),
)

# The sealed request-id index: every request row sealed into the lake, by request id, with its client, episode and
# segment (kept by each gateway's sealer, ``ratchet_gateway.sealed_index``), so feedback finds whose request an id is
# with one indexed lookup instead of scanning the lake; ``sealed_segments`` says which segments are in it.
sealed_requests = sa.Table(
    "sealed_requests",
    metadata,
    sa.Column("request_id", sa.String(128), primary_key=True),
    sa.Column("client", sa.String(64), nullable=False),
    sa.Column("episode", sa.String(128), nullable=True),
    sa.Column("segment", sa.String(256), nullable=False),  # the segment's name in the lake (lake-relative)
    sa.Index("ix_sealed_requests_client_episode", "client", "episode"),
)
sealed_segments = sa.Table(
    "sealed_segments",
    metadata,
    sa.Column("segment", sa.String(256), primary_key=True),
    sa.Column("requests", sa.Integer, nullable=False),
    sa.Column("indexed_at", sa.String(40), nullable=False),
)

ratchet_schema = sa.Table(
    "ratchet_schema",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)

# The schema's history, one row per version: (version, what changed, step). A step does what `create_all` cannot
# (new columns on existing tables, data moves): it takes a database at version - 1 to version, inside the schema
# transaction. New tables need no step (None): `create_all` adds them. Version 1 is the tables as the first
# release created them (in five modules, no version row).
SCHEMA_STEPS: tuple[tuple[int, str, Callable[[Connection], None] | None], ...] = (
    (2, "one schema; `trusted_keys` added", None),
    (3, "`erasure_log` added", None),
    (4, "`effect_policies`, `effect_approvals`, `effect_spend` added (the effect gate)", None),
    (5, "`erasure_scopes`, `erasure_applied` added (erasure predicates every replica applies)", None),
    (6, "`client_limits`, `client_spend`, `gateway_replicas` added (per-client limits and budgets)", None),
    (7, "`feedback` added (applications' metrics, comments and demonstrations)", None),
    (
        8,
        "`sealed_requests`, `sealed_segments` added (the sealed request-id index feedback looks ids up in)",
        None,
    ),
    (9, "`version_certificates` added (every certificate of a version, chained)", None),
)
SCHEMA_VERSION = SCHEMA_STEPS[-1][0]
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    v: step for v, _, step in SCHEMA_STEPS if step is not None
}
assert [v for v, _, _ in SCHEMA_STEPS] == list(range(2, SCHEMA_VERSION + 1)), (
    "SCHEMA_STEPS: one row per version"
)


class SchemaError(RuntimeError):
    """The control DB was written by a newer Ratchet than this one."""


def _stored_version(engine: Engine) -> int | None:
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(ratchet_schema.c.version).where(ratchet_schema.c.id == 1)).scalar()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError):
        return None  # no schema table yet: a fresh database, or one from before schema versions


def ensure_schema(engine: Engine) -> None:
    """Create every table and migrate an older database to :data:`SCHEMA_VERSION` (idempotent, concurrent-safe).

    Cheap when the schema is current (one query). Otherwise one transaction: SQLite's ``BEGIN IMMEDIATE`` (from
    :func:`make_engine`) or a Postgres advisory lock makes concurrent starters line up.
    """
    stored = _stored_version(engine)
    if stored == SCHEMA_VERSION:
        return
    if stored is not None and stored > SCHEMA_VERSION:
        raise SchemaError(
            f"the control DB has schema version {stored}, this Ratchet knows up to {SCHEMA_VERSION}: "
            "upgrade Ratchet (every process sharing a control DB must run the same or a newer version)"
        )
    for attempt in range(3):
        try:
            with engine.begin() as conn:
                _create_and_migrate(conn)
            return
        except (sa.exc.IntegrityError, sa.exc.OperationalError, sa.exc.ProgrammingError):
            # Another process created the same tables between our look and our DDL: look again.
            if _stored_version(engine) == SCHEMA_VERSION:
                return
            if attempt == 2:
                raise


def _create_and_migrate(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(7243190611)"))  # any constant: Ratchet's DDL lock
    metadata.create_all(conn, checkfirst=True)
    row = conn.execute(sa.select(ratchet_schema.c.version).where(ratchet_schema.c.id == 1)).scalar()
    current = 1 if row is None else int(row)
    for version in range(current + 1, SCHEMA_VERSION + 1):
        step = MIGRATIONS.get(version)
        if step is not None:
            step(conn)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    if row is None:
        conn.execute(ratchet_schema.insert().values(id=1, version=SCHEMA_VERSION, updated_at=now))
    elif current != SCHEMA_VERSION:
        conn.execute(
            ratchet_schema.update()
            .where(ratchet_schema.c.id == 1)
            .values(version=SCHEMA_VERSION, updated_at=now)
        )
    if conn.execute(sa.select(release_manifest_lock.c.id)).first() is None:
        conn.execute(release_manifest_lock.insert().values(id=1))
