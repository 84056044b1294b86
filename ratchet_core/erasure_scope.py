"""An erasure's predicate as every replica and every night applies it, holding no erased text (one home).

``ratchet admin erase`` (``ratchet_assets.governance.erase``) stores each erasure's scope in the control DB's
``erasure_scopes`` table as a :class:`ScopeMatcher`: request ids and clients as given, end users and the text
only as SHA-256 (the control DB must not keep what was erased), the time range, and ``ts_before``: the Ratchet
clock when the erasure was recorded. A scope reaches rows written **before** it (``ts < ts_before``), wherever
they are: sealed in the lake, or not sealed yet in a gateway's journal and DuckDB file; a request made after the
erasure is new data and is not erased.

Matching (the same code for the lake, the gateway ledgers and the nights):

- ``user``: the ``user`` field of the request's stored ``params``; stored text is redacted
  (``ratchet_core.redact``), so both the value given and its redacted placeholder match;
- text: a case-insensitive substring (Python ``str.lower``) of the stored request ``messages`` (canonical JSON:
  a quote or a backslash in the text is matched in its JSON-escaped form too), ``answer`` or ``tool_calls``; PII
  in the text is redacted as the gateway did, so ``alice@example.com`` finds the rows that stored its
  placeholder. Matching by hash: every window of the text's byte length in a candidate row is hashed.

A matched request is erased whole (its request row and its pair rows, by request id).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

SCOPE_COLUMNS = ["request_id", "client", "ts", "params", "messages", "answer", "tool_calls"]


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_forms(text: str) -> list[str]:
    """The lower-cased forms of ``text`` a stored row may hold: as given, redacted, JSON-escaped (sorted)."""
    from ratchet_core.redact import redact_text

    forms = {text, redact_text(text)}
    forms |= {json.dumps(f, ensure_ascii=False)[1:-1] for f in forms}
    return sorted({f.lower() for f in forms if f.strip()})


def user_forms(user: str) -> list[str]:
    from ratchet_core.redact import redact_text

    return sorted({user, redact_text(user)})


@dataclass(frozen=True)
class ScopeMatcher:
    """The stored predicate of one erasure (module docstring); ``to_json``/``from_json`` round-trip it."""

    ts_before: str  # ISO time on the Ratchet clock: rows written before the erasure
    request_ids: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()
    users_sha256: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    texts: tuple[tuple[int, str], ...] = field(default=())  # (byte length, SHA-256) of each lower-cased form

    @classmethod
    def build(
        cls,
        *,
        ts_before: datetime,
        request_ids: Iterable[str] = (),
        clients: Iterable[str] = (),
        users: Iterable[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        text: str | None = None,
    ) -> ScopeMatcher:
        forms = text_forms(text) if text else []
        return cls(
            ts_before=ts_before.isoformat(),
            request_ids=tuple(sorted(request_ids)),
            clients=tuple(sorted(clients)),
            users_sha256=tuple(sorted({sha256_text(f) for u in users for f in user_forms(u)})),
            since=since.isoformat() if since else None,
            until=until.isoformat() if until else None,
            texts=tuple((len(f.encode()), sha256_text(f)) for f in forms),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ScopeMatcher:
        d = json.loads(text)
        return cls(
            ts_before=d["ts_before"],
            request_ids=tuple(d["request_ids"]),
            clients=tuple(d["clients"]),
            users_sha256=tuple(d["users_sha256"]),
            since=d["since"],
            until=d["until"],
            texts=tuple((int(n), h) for n, h in d["texts"]),
        )

    @property
    def before(self) -> datetime:
        return datetime.fromisoformat(self.ts_before)

    def matches_text(self, value: str | None) -> bool:
        """Whether the erased text occurs in `value` (case-insensitive, as in rows): feedback comments and
        demonstrations (``ratchet_core.feedback``)."""
        return bool(self.texts) and _contains(value, self.texts)

    def matched_request_ids(self, table: Any) -> set[str]:
        """Request ids of the rows of ``table`` (Arrow, :data:`SCOPE_COLUMNS` at least) this scope matches."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if table.num_rows == 0:
            return set()
        ts = table.column("ts")
        mask = pc.less(ts, pa.scalar(self.before, ts.type))
        if self.since:
            mask = pc.and_(mask, pc.greater_equal(ts, pa.scalar(datetime.fromisoformat(self.since), ts.type)))
        if self.until:
            mask = pc.and_(mask, pc.less(ts, pa.scalar(datetime.fromisoformat(self.until), ts.type)))
        for name, values in (("request_id", self.request_ids), ("client", self.clients)):
            if values:
                mask = pc.and_(mask, pc.is_in(table.column(name), value_set=pa.array(values, pa.string())))
        rows = table.filter(pc.fill_null(mask, False))
        if self.users_sha256:
            users = set(self.users_sha256)
            keep = [_user_sha(p) in users for p in rows.column("params").to_pylist()]
            rows = rows.filter(pa.array(keep, pa.bool_()))
        if self.texts:
            cols = [rows.column(c).to_pylist() for c in ("messages", "answer", "tool_calls")]
            keep = [any(_contains(v, self.texts) for v in vals) for vals in zip(*cols, strict=True)]
            rows = rows.filter(pa.array(keep, pa.bool_()))
        return {r for r in rows.column("request_id").to_pylist() if r}


def _user_sha(params: str | None) -> str | None:
    if not params or '"user"' not in params:
        return None
    try:
        user = json.loads(params).get("user")
    except (ValueError, AttributeError):
        return None
    return sha256_text(user) if isinstance(user, str) else None


def _contains(value: str | None, texts: tuple[tuple[int, str], ...]) -> bool:
    """Whether some window of ``value.lower()`` hashes to one of ``texts`` (byte length, SHA-256)."""
    if not value:
        return False
    data = value.lower().encode("utf-8")
    sha = hashlib.sha256
    for n, digest in texts:
        want = bytes.fromhex(digest)
        if any(sha(data[i : i + n]).digest() == want for i in range(len(data) - n + 1)):
            return True
    return False


@dataclass(frozen=True)
class ErasureSnapshot:
    """What a replica applies: every erased request id and every stored scope (erasure log id -> matcher)."""

    request_ids: frozenset[str] = frozenset()
    scopes: dict[int, ScopeMatcher] = field(default_factory=dict)
    engine: Any = None

    def report(self, log_id: int, store: str, counts: dict[str, int]) -> None:
        """Record in the control DB what ``store`` (a replica, a night) scrubbed for erasure ``log_id``."""
        if self.engine is not None:
            record_applied(self.engine, log_id, store, counts)

    def forget_feedback(self, request_ids: Iterable[str]) -> int:
        """Delete the feedback on requests a replica scrubbed by a scope (rows no sealed copy held when the
        erasure ran, so ``erase`` could not name them); how many items went (``ratchet_core.feedback``)."""
        ids = set(request_ids)
        if self.engine is None or not ids:
            return 0
        from ratchet_core import feedback

        return feedback.delete(self.engine, request_ids=ids)


def snapshot(engine: Any) -> ErasureSnapshot:
    """The control DB's erasures as a replica's ledger polls them (``ratchet_gateway.ledger``)."""
    import sqlalchemy as sa

    from ratchet_core.control_db import ensure_schema, erasure_scopes, erasures

    if engine is None:
        return ErasureSnapshot()
    ensure_schema(engine)
    with engine.connect() as conn:
        ids = conn.execute(sa.select(erasures.c.request_id).where(erasures.c.request_id.is_not(None)))
        ids = frozenset(r[0] for r in ids)
        scopes = {
            int(r[0]): ScopeMatcher.from_json(r[1])
            for r in conn.execute(sa.select(erasure_scopes.c.log_id, erasure_scopes.c.matcher))
        }
    return ErasureSnapshot(ids, scopes, engine)


def record_applied(engine: Any, log_id: int, store: str, counts: dict[str, int]) -> None:
    from datetime import UTC

    from ratchet_core.control_db import erasure_applied

    with engine.begin() as conn:
        conn.execute(
            erasure_applied.insert().values(
                log_id=int(log_id),
                store=store[:200],
                at=datetime.now(UTC).isoformat(timespec="seconds"),
                counts=json.dumps(counts, sort_keys=True),
            )
        )
