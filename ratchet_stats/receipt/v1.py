"""Receipt v1 (``PREDICATE_TYPE``): every client's totals signed in one document; kept so old receipts verify.

A v1 receipt is a DSSE envelope (Ed25519) over an in-toto Statement with ``predicateType`` = ``PREDICATE_TYPE``::

    predicate = {
      "day": "YYYY-MM-DD",
      "previous": null | {"day": "YYYY-MM-DD", "digest": sha256 hex of canonical_json(previous envelope)},
      "requests": {"root": hex, "size": n, "tree": "RFC 9162 SHA-256", "order": "request_id",
                   "leaf_fields": [...]},
      "clients": {name: TOTALS}, "totals": TOTALS, "unit": "micro-USD"}
    TOTALS = {"requests": n, "served_by": {"teacher": n1, "student": n2},
              "teacher_cost_micro_usd": T, "actual_cost_micro_usd": A, "saved_micro_usd": T - A}

Leaves (RFC 9162, leaf hash = SHA-256(0x00 || leaf)): ``canonical_json`` of each request row's
``LEAF_FIELDS`` (``ts`` as ISO 8601 UTC text), sorted by request_id. Costs are summed as integers:
``micro(x) = round(x * 10**6)`` per row, so totals are exact and equal the sum of the per-client entries.

Verification (``ratchet_stats.receipt.verify_receipt``) fails closed, in this order, each failure naming its
check: the signature (``envelope`` | ``payload-type`` | ``keyid`` | ``signature`` | ``payload`` | ... from
``ratchet_stats.dsse``), ``predicate`` (shape), ``totals`` (recomputed from the per-client entries), ``chain``
(the previous receipt's signature, day and digest), ``proof`` (an inclusion proof's leaf, index and root against
the signed root), and ``rows`` (a full row list recomputes the root, size and every client's totals). A v1
receipt has no client tree: a client gets its rows and its entry unsigned, the auditor the envelope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ratchet_stats.canonical import canonical_json
from ratchet_stats.receipt import common
from ratchet_stats.receipt.common import (
    SERVED_BY,
    AuditorFiles,
    FilesReport,
    Previous,
    ReceiptError,
    ReceiptFormat,
    check_sorted_rows,
    check_tree,
    micro,
    need,
    nonzero,
    rows_of,
    tree_doc,
)

PREDICATE_TYPE = "https://ratchet.dev/receipt/v1"
LEAF_FIELDS = (
    "request_id",
    "ts",
    "client",
    "task",
    "served_by",
    "version",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "teacher_cost_usd",
    "actual_cost_usd",
    "status_code",
)
COST_KEYS = ("teacher_cost_micro_usd", "actual_cost_micro_usd", "saved_micro_usd")


def empty_totals() -> dict[str, Any]:
    return {
        "requests": 0,
        "served_by": dict.fromkeys(SERVED_BY, 0),
        "teacher_cost_micro_usd": 0,
        "actual_cost_micro_usd": 0,
        "saved_micro_usd": 0,
    }


def add_row(totals: dict[str, Any], row: Mapping[str, Any]) -> None:
    """Add one leaf row to a TOTALS dict in place."""
    totals["requests"] += 1
    served = str(row.get("served_by") or "teacher")
    totals["served_by"][served] = totals["served_by"].get(served, 0) + 1
    t, a = micro(row.get("teacher_cost_usd")), micro(row.get("actual_cost_usd"))
    totals["teacher_cost_micro_usd"] += t
    totals["actual_cost_micro_usd"] += a
    totals["saved_micro_usd"] += t - a


def sum_totals(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The TOTALS of several TOTALS (e.g. the overall totals from the per-client entries)."""
    return common.sum_totals(entries, empty_totals(), COST_KEYS)


def totals_from_rows(rows: Iterable[Mapping[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(per-client TOTALS, overall TOTALS) of leaf rows."""
    clients: dict[str, dict[str, Any]] = {}
    for row in rows:
        add_row(clients.setdefault(str(row["client"]), empty_totals()), row)
    clients = dict(sorted(clients.items()))
    return clients, sum_totals(clients.values())


def make_predicate(
    day: str,
    root_hex: str,
    size: int,
    clients: Mapping[str, Mapping[str, Any]],
    previous: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The receipt predicate (see module docstring); totals are the sum of the client entries."""
    return {
        "day": day,
        "previous": dict(previous) if previous else None,
        "requests": tree_doc(root_hex, size, "request_id", LEAF_FIELDS),
        "clients": {k: dict(v) for k, v in sorted(clients.items())},
        "totals": sum_totals(clients.values()),
        "unit": "micro-USD",
    }


# Verification -------------------------------------------------------------------------------------------------
def check_shape(p: Any, what: str) -> None:
    """The v1 predicate's shape (check ``predicate``)."""

    def shape(cond: bool, msg: str) -> None:
        need(cond, "predicate", f"{what}: {msg}")

    shape(isinstance(p, dict), "predicate is not an object")
    shape(isinstance(p.get("day"), str) and len(p["day"]) == 10, "day must be YYYY-MM-DD")
    req = p.get("requests")
    shape(isinstance(req, dict), "requests is missing")
    shape(isinstance(req.get("root"), str) and len(req["root"]) == 64, "requests.root must be 64 hex chars")
    shape(isinstance(req.get("size"), int) and req["size"] >= 0, "requests.size must be a count")
    shape(isinstance(p.get("clients"), dict), "clients is missing")
    shape(isinstance(p.get("totals"), dict), "totals is missing")
    prev = p.get("previous")
    shape(
        prev is None or (isinstance(prev, dict) and {"day", "digest"} <= set(prev)), "previous is malformed"
    )
    for name, entry in [*p["clients"].items(), ("totals", p["totals"])]:
        shape(
            isinstance(entry, dict)
            and isinstance(entry.get("served_by"), dict)
            and all(
                isinstance(entry.get(k), int)
                for k in ("requests", "teacher_cost_micro_usd", "actual_cost_micro_usd", "saved_micro_usd")
            ),
            f"entry {name!r} is malformed",
        )


def check_totals(predicate: Mapping[str, Any]) -> None:
    """Totals must equal the sum of the client entries; each entry must add up by itself."""
    for name, e in predicate["clients"].items():
        if sum(int(v) for v in e["served_by"].values()) != e["requests"]:
            raise ReceiptError("totals", f"client {name!r}: requests by served_by do not add up to requests")
        if e["teacher_cost_micro_usd"] - e["actual_cost_micro_usd"] != e["saved_micro_usd"]:
            raise ReceiptError("totals", f"client {name!r}: saved != teacher cost - actual cost")
    expected = sum_totals(predicate["clients"].values())
    got = dict(predicate["totals"])
    got["served_by"] = {**dict.fromkeys(SERVED_BY, 0), **got["served_by"]}
    if canonical_json(expected) != canonical_json(got):
        raise ReceiptError("totals", f"totals {got} differ from the sum of the client entries {expected}")
    if expected["requests"] != predicate["requests"]["size"]:
        raise ReceiptError(
            "totals",
            f"{expected['requests']} requests counted but the tree has {predicate['requests']['size']}",
        )


def check_rows(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> None:
    """A full list of leaves (canonical rows in order) must give the signed root, size and client totals."""
    check_tree(predicate["requests"], leaves, "rows", "rows")
    rows = rows_of(leaves)
    check_sorted_rows(rows)
    clients, _ = totals_from_rows(rows)
    for name, entry in clients.items():
        signed = predicate["clients"].get(name)
        have = None if signed is None else nonzero(signed)
        if canonical_json(nonzero(entry)) != canonical_json(have):
            raise ReceiptError("rows", f"client {name!r}: rows give {entry}, the receipt signs {signed}")


def check_predicate(predicate: Mapping[str, Any]) -> list[str]:
    """A v1 predicate signs every client's totals and the overall totals: they must add up (check ``totals``)."""
    check_totals(predicate)
    return ["totals"]


def check_files(predicate: Mapping[str, Any], files: AuditorFiles, previous: Previous | None) -> FilesReport:
    """The rows, when given (v1 has no line files: its totals are in the predicate)."""
    report = FilesReport(totals=predicate["totals"], clients=sorted(predicate["clients"]))
    if files.leaves is not None:
        check_rows(predicate, files.leaves)
        report.checks.append("rows")
    return report


FORMAT = ReceiptFormat(
    version=1,
    predicate_type=PREDICATE_TYPE,
    check_shape=check_shape,
    check_predicate=check_predicate,
    check_files=check_files,
)
