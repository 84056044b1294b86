"""What a client and what the auditor receive of a day's receipt, read from the files ``daily_receipt`` wrote.

- :func:`client_view`: a v2 receipt's **client view** (``ratchet_stats.receipt.v2.make_client_view``): the signed
  envelope (which names no client), the caller's own client line with an inclusion proof against the signed client
  root, the estimate lines of the tasks its student-served rows used (each proven), and its own request leaves. It
  never holds another client's name, totals or rows. ``ratchet verify receipt --client-proof FILE`` checks it.
  A v1 receipt signs every client's totals in one document, so a client gets only its own rows and its own entry
  (``envelope`` null); the auditor gets the v1 envelope.
- :func:`auditor_view`: the envelope with every client line and estimate line (the whole, for the admin key).

The gateway (``GET /ratchet/receipts/{day}`` and ``/ratchet/receipts/{day}/audit``) calls these; the files'
names come from ``ratchet_core.layout``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ratchet_core.layout import (
    RECEIPT_CLIENTS_FILE,
    RECEIPT_ENVELOPE_FILE,
    RECEIPT_ESTIMATES_FILE,
    RECEIPT_PAIRS_FILE,
    RECEIPT_ROWS_FILE,
)
from ratchet_stats.receipt import v3 as receipt_v3
from ratchet_stats.receipt.v1 import PREDICATE_TYPE
from ratchet_stats.receipt.v2 import PREDICATE_TYPE as PREDICATE_TYPE_V2
from ratchet_stats.receipt.v2 import make_client_view
from ratchet_stats.receipt.v3 import PREDICATE_TYPE as PREDICATE_TYPE_V3

V1_NOTE = (
    "this day's receipt is v1: it signs every client's totals in one document, so only the auditor receives it; "
    "your rows and your totals are given unsigned (receipts from v2 on carry a proven client line)"
)


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()] if path.exists() else []


def _predicate(envelope: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(predicateType, predicate) of a stored envelope, unverified (the reader verifies; this only routes)."""
    try:
        statement = json.loads(base64.b64decode(envelope["payload"]))
        return str(statement.get("predicateType", "")), dict(statement.get("predicate") or {})
    except (KeyError, TypeError, ValueError):
        return "", {}  # not a receipt this module can route: the client gets its rows only


def own_rows(folder: Path, client: str) -> list[dict[str, Any]]:
    """The client's own leaves ({index, request_id, leaf}) in tree order (a filtered read of rows.parquet)."""
    import pyarrow.parquet as pq

    table = pq.read_table(
        folder / RECEIPT_ROWS_FILE,
        columns=["index", "request_id", "leaf"],
        filters=[("client", "=", client)],
    )
    return table.to_pylist()


def own_pairs(folder: Path, client: str) -> list[bytes]:
    """The client's own pair lines (v3 ``pairs.jsonl``), in tree order."""
    return [b for b in _lines(folder / RECEIPT_PAIRS_FILE) if json.loads(b).get("client") == client]


def client_view(folder: Path, day: str, client: str, rows: bool = True) -> dict[str, Any]:
    """The client's view of the day's receipt (module docstring). A v3 receipt's line names the client's
    estimated tasks, so its view is read from the small files alone (``clients.jsonl``, ``estimates.jsonl``:
    milliseconds at any day size); `rows` adds the client's own request leaves and pair lines (a filtered scan
    of ``rows.parquet``). v1 and v2 views always carry the rows."""
    envelope = json.loads((folder / RECEIPT_ENVELOPE_FILE).read_bytes())
    kind, predicate = _predicate(envelope)
    if kind == PREDICATE_TYPE_V3:
        view = receipt_v3.make_client_view(
            envelope,
            day,
            client,
            _lines(folder / RECEIPT_CLIENTS_FILE),
            _lines(folder / RECEIPT_ESTIMATES_FILE),
            own_rows(folder, client) if rows else None,
            own_pairs(folder, client) if rows else None,
        )
        if view is not None:
            return view
        return {"day": day, "client": client, "envelope": None, "line": None, "estimates": [], "rows": []}
    leaves = own_rows(folder, client)
    if kind == PREDICATE_TYPE_V2:
        view = make_client_view(
            envelope,
            day,
            client,
            _lines(folder / RECEIPT_CLIENTS_FILE),
            _lines(folder / RECEIPT_ESTIMATES_FILE),
            leaves,
        )
        if view is not None:
            return view
        return {"day": day, "client": client, "envelope": None, "line": None, "estimates": [], "rows": leaves}
    v1 = kind == PREDICATE_TYPE
    return {
        "day": day,
        "client": client,
        "envelope": None,
        "version": 1 if v1 else None,
        "totals": (predicate.get("clients") or {}).get(client) if v1 else None,
        "note": V1_NOTE if v1 else "the stored receipt is not one this gateway can read; your rows only",
        "rows": leaves,
    }


def auditor_view(folder: Path, day: str) -> dict[str, Any]:
    """The whole: the envelope, every client line and every estimate line (canonical JSON texts, tree order)."""
    envelope = json.loads((folder / RECEIPT_ENVELOPE_FILE).read_bytes())
    return {
        "day": day,
        "envelope": envelope,
        "clients": [b.decode("utf-8") for b in _lines(folder / RECEIPT_CLIENTS_FILE)],
        "estimates": [b.decode("utf-8") for b in _lines(folder / RECEIPT_ESTIMATES_FILE)],
    }
