"""The ``daily_receipt`` step: commit to the day's request rows, chain to the previous receipt, sign once.

Files (D = YYYY-MM-DD), under ``<artifacts>/receipts/D/``:

- ``receipt.dsse.json``: canonical JSON of the DSSE envelope (so the file's SHA-256 is the chain digest);
- ``rows.parquet``: the leaves in tree order — columns ``index`` (int64), ``request_id``, ``client``, ``leaf``
  (the canonical JSON text that is hashed). The gateway serves a client its own rows from it and proofs with
  ``receipt_proof``.

Signing goes through the effect ledger (``receipt.sign``, key ``receipt:D``, fingerprint = digest of the
predicate, which holds the root, the totals and the chain link). A rerun with the same predicate reuses the
stored envelope byte for byte; a different predicate for a signed day is refused (``ReceiptConflict``), never
signed twice.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ratchet_assets.effects import EffectLedger, EffectRecord
from ratchet_assets.night import atomic_write_bytes, canonical_text, connect, sql_str
from ratchet_assets.night.traffic import traffic_path
from ratchet_core.schema import RECEIPT_LEAF_FIELDS
from ratchet_stats import merkle
from ratchet_stats.canonical import canonical_json, digest
from ratchet_stats.dsse import make_statement, sign_statement, verify_statement
from ratchet_stats.receipt import (
    PREDICATE_TYPE,
    PROOF_TYPE,
    envelope_digest,
    make_predicate,
    totals_from_rows,
)

EFFECT_TYPE = "receipt.sign"
ROWS_SCHEMA = pa.schema(
    [("index", pa.int64()), ("request_id", pa.string()), ("client", pa.string()), ("leaf", pa.string())]
)


class ReceiptConflict(RuntimeError):
    """The day was already signed with different content; the message says what to do."""


@dataclass
class ReceiptResult:
    day: str
    path: str
    rows_path: str
    root: str
    size: int
    envelope_digest: str
    outcome: str  # execute | duplicate
    previous: dict[str, str] | None
    totals: dict[str, Any]
    clients: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def receipt_dir(artifacts_root: str | Path, day: str) -> Path:
    return Path(artifacts_root) / "receipts" / day


def _ts_text(ts: Any) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def leaf_rows(traffic_file: str | Path) -> list[dict[str, Any]]:
    """Request rows' receipt fields, sorted by request_id, ``ts`` as ISO 8601 UTC text."""
    con = connect()
    cols = ", ".join(RECEIPT_LEAF_FIELDS)
    table = con.sql(
        f"SELECT {cols} FROM read_parquet({sql_str(str(traffic_file))}) WHERE kind = 'request' "
        "ORDER BY request_id"
    ).to_arrow_table()
    con.close()
    columns = {name: table[name].to_pylist() for name in RECEIPT_LEAF_FIELDS}
    columns["ts"] = [_ts_text(t) for t in columns["ts"]]
    for name in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "status_code"):
        columns[name] = [int(v or 0) for v in columns[name]]
    for name in ("teacher_cost_usd", "actual_cost_usd"):
        columns[name] = [float(v or 0.0) for v in columns[name]]
    return [
        dict(zip(RECEIPT_LEAF_FIELDS, values, strict=True)) for values in zip(*columns.values(), strict=True)
    ]


def previous_link(artifacts_root: str | Path, day: str) -> dict[str, str] | None:
    """The latest receipt before ``day`` ({day, digest}), or None for the first receipt."""
    root = Path(artifacts_root) / "receipts"
    days = sorted(p.name for p in root.glob("*") if p.name < day and (p / "receipt.dsse.json").exists())
    if not days:
        return None
    envelope = json.loads((root / days[-1] / "receipt.dsse.json").read_bytes())
    return {"day": days[-1], "digest": envelope_digest(envelope)}


def build_receipt(
    artifacts_root: str | Path,
    day: str,
    private_key: Any,
    ledger: EffectLedger,
    lease_seconds: float = 300.0,
) -> ReceiptResult:
    """Compute, sign (at most once per day) and write the day's receipt."""
    rows = leaf_rows(traffic_path(artifacts_root, day))
    leaves = [canonical_text(r).encode("utf-8") for r in rows]
    root_hex = merkle.root(leaves).hex()
    merkle.clear_cache()
    clients, _ = totals_from_rows(rows)
    predicate = make_predicate(day, root_hex, len(leaves), clients, previous_link(artifacts_root, day))
    out_dir = receipt_dir(artifacts_root, day)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_path = out_dir / "rows.parquet"
    table = pa.table(
        {
            "index": pa.array(range(len(rows)), pa.int64()),
            "request_id": pa.array([r["request_id"] for r in rows], pa.string()),
            "client": pa.array([r["client"] for r in rows], pa.string()),
            "leaf": pa.array([b.decode("utf-8") for b in leaves], pa.string()),
        },
        schema=ROWS_SCHEMA,
    )
    tmp = out_dir / ".rows.parquet.tmp"
    pq.write_table(table, tmp, compression="zstd", row_group_size=256_000)
    tmp.replace(rows_path)

    envelope_path = out_dir / "receipt.dsse.json"
    fingerprint = digest(predicate)
    key = f"receipt:{day}"
    public_key = private_key.public_key()

    def probe(_record: EffectRecord) -> dict[str, Any] | None:
        # A holder that vanished may have written the envelope before it could report.
        if not envelope_path.exists():
            return None
        try:
            envelope = json.loads(envelope_path.read_bytes())
            statement = verify_statement(envelope, public_key, PREDICATE_TYPE)
        except Exception:
            return None
        if digest(statement["predicate"]) != fingerprint:
            return None
        return {"envelope": envelope, "digest": envelope_digest(envelope), "root": root_hex}

    begin = ledger.begin(EFFECT_TYPE, key, fingerprint, lease_seconds=lease_seconds, probe=probe)
    if begin.outcome == "execute":
        statement = make_statement(
            PREDICATE_TYPE, predicate, [{"name": f"receipt:{day}", "digest": {"sha256": root_hex}}]
        )
        try:
            envelope = sign_statement(statement, private_key)
            atomic_write_bytes(envelope_path, canonical_json(envelope))
        except Exception as exc:
            ledger.fail(begin.token, f"{exc.__class__.__name__}: {exc}")
            raise
        result = {"envelope": envelope, "digest": envelope_digest(envelope), "root": root_hex}
        ledger.report(begin.token, result)
    elif begin.outcome == "duplicate":
        assert begin.result is not None
        envelope = begin.result["envelope"]
        data = canonical_json(envelope)
        if not envelope_path.exists() or envelope_path.read_bytes() != data:
            atomic_write_bytes(envelope_path, data)  # restore the one signed envelope
    elif begin.outcome == "denied":
        signed_root = (begin.result or {}).get("root", "?")
        raise ReceiptConflict(
            f"the receipt for {day} is already signed (request root {signed_root}); recomputing it now gives "
            f"root {root_hex} with different totals or chain — the day's traffic changed after signing (a late "
            f"segment?). Ratchet never signs a day twice. Inspect with `ratchet admin effects show {EFFECT_TYPE} "
            f"{key}`; restore the day's segments, or record the late rows in a later day's receipt."
        )
    elif begin.outcome == "in_flight":
        raise ReceiptConflict(
            f"another run is signing the receipt for {day} right now; wait for it (or for its lease to lapse, "
            f"then rerun)"
        )
    else:  # blocked
        raise ReceiptConflict(
            f"signing the receipt for {day} is blocked ({begin.detail}); resolve it with `ratchet admin effects "
            f"resolve {EFFECT_TYPE} {key} done|failed --reason ...` and rerun"
        )
    return ReceiptResult(
        day=day,
        path=str(envelope_path),
        rows_path=str(rows_path),
        root=root_hex,
        size=len(leaves),
        envelope_digest=envelope_digest(envelope),
        outcome="execute" if begin.outcome == "execute" else "duplicate",
        previous=predicate["previous"],
        totals=predicate["totals"],
        clients=predicate["clients"],
    )


def receipt_proof(day: str, request_id: str, artifacts_root: str | Path | None = None) -> dict[str, Any]:
    """Inclusion proof of one request row in the day's receipt: {day, index, size, leaf, proof[hex], root}."""
    if artifacts_root is None:
        from ratchet_core.settings import load_settings

        artifacts_root = load_settings().artifacts_root
    folder = receipt_dir(artifacts_root, day)
    rows_path = folder / "rows.parquet"
    if not rows_path.exists():
        raise FileNotFoundError(
            f"no receipt rows for {day} at {rows_path}: materialise `daily_receipt` first"
        )
    leaves_text = pq.read_table(rows_path, columns=["request_id", "leaf"])
    ids = leaves_text["request_id"].to_pylist()
    leaves = [s.encode("utf-8") for s in leaves_text["leaf"].to_pylist()]
    try:
        index = ids.index(request_id)
    except ValueError:
        raise KeyError(f"request {request_id} is not in the receipt for {day}") from None
    tree = merkle.MerkleTree(leaves)
    envelope = json.loads((folder / "receipt.dsse.json").read_bytes())
    return {
        "_type": PROOF_TYPE,
        "day": day,
        "request_id": request_id,
        "index": index,
        "size": len(leaves),
        "leaf": leaves[index].decode("utf-8"),
        "proof": [h.hex() for h in tree.inclusion_proof(index)],
        "root": tree.root().hex(),
        "receipt_digest": envelope_digest(envelope),
    }


def export_rows_jsonl(artifacts_root: str | Path, day: str, out: str | Path) -> Path:
    """Write the day's leaves as JSON lines (for ``ratchet verify receipt --rows``)."""
    table = pq.read_table(receipt_dir(artifacts_root, day) / "rows.parquet", columns=["leaf"])
    data = "".join(s + "\n" for s in table["leaf"].to_pylist()).encode("utf-8")
    atomic_write_bytes(Path(out), data)
    return Path(out)
