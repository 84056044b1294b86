"""Training-set proofs for clients: was my request in adapter ``version``'s training set, provably, from its BOM?

The example keys and the key trees behind the proof routes (``ratchet_gateway.routers.proofs``; bearer client
key, like every route; errors in OpenAI's shape). A proof is asked for by request id, for a request the caller
itself sent (:func:`find_request_row`: this replica's ledger, then the sealed segments of every replica in the
lake); another client's is a 404 exactly like a missing one, and a request sent after the version's training data
was collected (:func:`training_day`, from its BOM) gets none. Not by body: a client that replayed another client's
exact body would hold a request of its own with the same example key, and a proof by body would tell it whether
the other's was trained on.

The answer is a proof in ``ratchet_stats.commitment``'s format (``_type`` = ``PROOF_TYPE``): ``membership``
(Merkle inclusion of the key in the sorted training-key tree) or ``non-membership`` (its two adjacent neighbours),
made with ``KeyTree`` from ``<artifacts>/boms/<version>/train-keys.txt`` (written by the ``bom`` asset). Save it
and check it offline against the BOM alone: ``ratchet verify proof --bom bom.dsse.json --proof proof.json --key
PUB [--expect member|absent]``; the verifier trusts only the root and size recorded in the signed BOM.

The example key is computed from exactly what the ledger stores for the request, so it equals the key the night
gives it (``ratchet_assets.night.examples``): ``key = SHA-256(canonical_json({task, messages, tools,
response_format}))`` (``ratchet_core.example_key.redacted_example_key``) over the row's stored (redacted) messages,
its tools (the ledger stores ``{"tools", "tool_choice"}``; the night keeps ``tools`` only) and its response format
(:func:`key_of_row`). Key trees are cached per file (path, mtime, size): building one costs O(n log n) once per
adapter, a proof O(log n).
"""

from __future__ import annotations

import base64
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

from ratchet_core.example_key import redacted_example_key, split_tools_column
from ratchet_core.lake import Lake
from ratchet_core.names import is_valid
from ratchet_gateway.ledger import Ledger

_CACHE_SIZE = 4


def valid_version(version: str) -> bool:
    """An adapter version name (no path tricks): what a BOM folder may be called (``ratchet_core.names``)."""
    return is_valid("version", version)


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


class OwnRow(NamedTuple):
    """What a proof needs of a request row."""

    client: str
    task: str
    messages: str
    tools: str
    response_format: str
    day: str


_ROW = (
    "SELECT client, task, messages, tools, response_format, day FROM {src} "
    "WHERE request_id = ? AND kind = 'request' ORDER BY seq LIMIT 1"
)


def find_request_row(ledger: Ledger, request_id: str, until: str | None = None) -> OwnRow | None:
    """The request row of `request_id`: this replica's ledger first (``Ledger.find_rows``: rows acknowledged but
    not yet loaded into DuckDB too, so a proof asked for right after its request's answer finds it), then the
    sealed segments in the lake (other replicas, earlier days; only days up to `until` when given); None when
    neither has it."""
    mine = ledger.find_rows("request_id", [request_id], ["request_id", *OwnRow._fields])
    if mine:
        return OwnRow(*(str(mine[0][f] or "") for f in OwnRow._fields))
    lake = Lake(ledger.lake_root)
    days = [d for d in lake.days() if until is None or d <= until]
    paths = [lake.duckdb_path(seg.rel) for day in days for seg in lake.segments(day)]
    if not paths:
        return None
    import duckdb

    with duckdb.connect() as db:
        lake.attach(db)
        rows = db.execute(
            _ROW.format(src="read_parquet(?, union_by_name = true)"), [paths, request_id]
        ).fetchall()
    return OwnRow(*rows[0]) if rows else None


_TRAINING_SET = "training-set day="


def training_day(bom_path: Path) -> str | None:
    """The last day of traffic the version's training set was drawn from (its BOM's ``training-set day=D`` data
    set), or None when the BOM does not say (or cannot be read: then no proof verifies against it anyway)."""
    try:
        envelope = json.loads(bom_path.read_bytes())
        statement = json.loads(base64.b64decode(envelope["payload"]))
        components = statement["predicate"]["components"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for component in components if isinstance(components, list) else []:
        name = component.get("name", "") if isinstance(component, dict) else ""
        if name.startswith(_TRAINING_SET) and is_valid("day", name[len(_TRAINING_SET) :]):
            return name[len(_TRAINING_SET) :]
    return None
