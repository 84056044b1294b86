"""Training-set proofs for clients: was my request in adapter ``version``'s training set, provably, from its BOM?

The example keys and the key trees behind the proof routes (``ratchet_gateway.routers.proofs``; bearer client
key, like every route; errors in OpenAI's shape):

- ``POST /ratchet/proofs/{version}`` with the chat body the client sent to ``/v1/chat/completions`` (task from
  ``metadata.ratchet_task``, else the ``X-Ratchet-Task`` header, else ``default``, as the chat route decides):
  answered only when the calling client itself sent a request with that example key (:func:`client_sent`: this
  replica's ledger, then the sealed segments of every replica in the lake); any other body is a 404 exactly like
  an unknown request id, so a client cannot test guesses about other clients' requests;
- ``GET /ratchet/proofs/{version}/{request_id}``: the same for a request this replica's ledger holds, found by its
  ``x-ratchet-request-id``; only the calling client's own requests (another client's is a 404 exactly like a
  missing one). With several gateway workers a request lives in one worker's ledger: on a 404, POST the body;
- ``GET /ratchet/boms/{version}``: the signed BOM envelope the proof is checked against.

The answer is a proof in ``ratchet_stats.commitment``'s format (``_type`` = ``PROOF_TYPE``): ``membership``
(Merkle inclusion of the key in the sorted training-key tree) or ``non-membership`` (its two adjacent neighbours),
made with ``KeyTree`` from ``<artifacts>/boms/<version>/train-keys.txt`` (written by the ``bom`` asset). Save it
and check it offline against the BOM alone: ``ratchet verify proof --bom bom.dsse.json --proof proof.json --key
PUB [--expect member|absent]``; the verifier trusts only the root and size recorded in the signed BOM.

The example key is computed from exactly what the ledger stores for the request, so it equals the key the night
gives it (``ratchet_assets.night.examples``): ``key = SHA-256(canonical_json({task, messages, tools,
response_format}))`` (``ratchet_core.example_key.redacted_example_key``) over

- ``messages``: the body's messages through the gateway's redaction (``ratchet_core.redact.redact_value``, the
  identity when ``RATCHET_REDACT_PII`` is off, as for the ledger);
- ``tools``: the redacted ``tools`` list (the ledger stores ``{"tools", "tool_choice"}``; the night keeps
  ``tools`` only), ``null`` when absent or empty;
- ``response_format``: as sent, ``null`` when absent or empty.

For a ledger row the same document is rebuilt from its stored texts (``key_of_row``). Key trees are cached per
file (path, mtime, size): building one costs O(n log n) once per adapter, a proof O(log n).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson

from ratchet_core.example_key import body_example_key, redacted_example_key, split_tools_column
from ratchet_core.lake import Lake
from ratchet_core.names import is_valid
from ratchet_core.redact import redact_request
from ratchet_gateway.ledger import Ledger

_CACHE_SIZE = 4


def valid_version(version: str) -> bool:
    """An adapter version name (no path tricks): what a BOM folder may be called (``ratchet_core.names``)."""
    return is_valid("version", version)


def key_of_request(body: dict[str, Any], task: str, redact: bool) -> str:
    """The example key of a chat body, from the values the chat route writes to the ledger (see module doc)."""
    return body_example_key(body, task, redact=redact)


def stored_messages(body: dict[str, Any], redact: bool) -> str:
    """The ``messages`` column text the chat route stores for `body` (redacted, compact JSON, sorted keys)."""
    messages = (redact_request(body).body if redact else body).get("messages") or []
    return orjson.dumps(messages, option=orjson.OPT_SORT_KEYS).decode()


_OWN_ROWS = (
    "SELECT task, messages, tools, response_format FROM {src} "
    "WHERE kind = 'request' AND client = ? AND task = ? AND messages = ?"
)


def client_sent(ledger: Ledger, client: str, task: str, messages: str, key: str) -> bool:
    """Whether `client` sent a request whose example key is `key` (`messages` is its stored messages text, the
    index into the rows): this replica's ledger first, then every sealed segment in the lake (other replicas,
    rows of earlier days). The key is recomputed from each candidate row's stored columns."""
    params = [client, task, messages]
    con = ledger._con
    if con is not None:
        cur = con.cursor()
        try:
            rows = cur.execute(_OWN_ROWS.format(src="ledger"), params).fetchall()
        finally:
            cur.close()
        if any(key_of_row(*r) == key for r in rows):
            return True
    lake = Lake(ledger.lake_root)
    paths = [lake.duckdb_path(seg.rel) for day in lake.days() for seg in lake.segments(day)]
    if not paths:
        return False
    import duckdb

    with duckdb.connect() as db:
        lake.attach(db)
        src = "read_parquet(?, union_by_name = true)"
        rows = db.execute(_OWN_ROWS.format(src=src), [paths, *params]).fetchall()
    return any(key_of_row(*r) == key for r in rows)


def key_of_row(task: str, messages: str, tools: str, response_format: str) -> str:
    """The example key of a ledger row from its stored texts (messages already redacted)."""
    rf = json.loads(response_format) if response_format else None
    return redacted_example_key(task, json.loads(messages), split_tools_column(tools)[0], rf or None)


class KeyTreeCache:
    """``KeyTree`` per train-keys file, rebuilt when the file changes (path, mtime, size); a few kept."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._size = size
        self._trees: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path) -> Any:
        from ratchet_stats.commitment import KeyTree

        st = path.stat()
        ident = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            if ident in self._trees:
                self._trees.move_to_end(ident)
                return self._trees[ident]
        keys = [ln.strip() for ln in path.read_text(encoding="ascii").splitlines() if ln.strip()]
        tree = KeyTree(keys)  # ValueError on a malformed key
        with self._lock:
            self._trees[ident] = tree
            while len(self._trees) > self._size:
                self._trees.popitem(last=False)
        return tree


def find_request_row(ledger: Ledger, request_id: str) -> tuple[str, str, str, str, str] | None:
    """(client, task, messages, tools, response_format) of this replica's request row, or None."""
    con = ledger._con
    if con is None:
        return None
    cur = con.cursor()  # a separate connection to the same database: safe beside the loader thread
    try:
        rows = cur.execute(
            "SELECT client, task, messages, tools, response_format FROM ledger "
            "WHERE request_id = ? AND kind = 'request' ORDER BY seq LIMIT 1",
            [request_id],
        ).fetchall()
    finally:
        cur.close()
    return tuple(rows[0]) if rows else None  # type: ignore[return-value]
