"""Daily receipts: what the teacher would have cost vs what was paid, per client, committed and signed.

Three formats verify here. **v3** (``PREDICATE_TYPE_V3``, what the night signs now; ``ratchet_stats.receipt_v3``)
is v2 plus the day's audit and shadow pair calls, committed in their own tree and counted in what was paid.
**v2** (``PREDICATE_TYPE_V2``; ``ratchet_stats.receipt_v2``) prices student-served requests at the teacher's prices (``ratchet_stats.teacher_equivalent``) and commits
per-client totals in their own Merkle tree, signing no client's name or totals; :func:`verify_receipt` and
:func:`verify_client_view` dispatch to it. **v1**, described below, is kept so old receipts still verify.

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
``RECEIPT_LEAF_FIELDS`` (``ts`` as ISO 8601 UTC text), sorted by request_id. Costs are summed as integers:
``micro(x) = round(x * 10**6)`` per row, so totals are exact and equal the sum of the per-client entries.

Verification (``verify_receipt``) fails closed, in this order, each failure naming its check: the signature
(``envelope`` | ``payload-type`` | ``keyid`` | ``signature`` | ``payload`` | ... from ``ratchet_stats.dsse``),
``predicate`` (shape), ``totals`` (recomputed from the per-client entries), ``chain`` (the previous receipt's
signature, day and digest), ``proof`` (an inclusion proof's leaf, index and root against the signed root), and
``rows`` (a full row list recomputes the root, size and every client's totals).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ratchet_stats import merkle, merkle_store
from ratchet_stats.canonical import canonical_json, digest, sha256_hex
from ratchet_stats.dsse import VerificationError, verify_statement

PREDICATE_TYPE = "https://ratchet.dev/receipt/v1"  # v1: this module's format; still verified
PREDICATE_TYPE_V2 = (
    "https://ratchet.dev/receipt/v2"  # v2: ratchet_stats.receipt_v2 (signed before v3; still verified)
)
# v3: ratchet_stats.receipt_v3 (what the night signs now): v2 plus the audit and shadow pair calls in what was paid.
PREDICATE_TYPE_V3 = "https://ratchet.dev/receipt/v3"
PROOF_TYPE = "https://ratchet.dev/receipt-proof/v1"
TREE = "RFC 9162 SHA-256"
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
# v2 adds the prompt counted with the teacher's tokenizer (ratchet_stats.teacher_equivalent).
LEAF_FIELDS_V2 = (*LEAF_FIELDS, "teacher_prompt_tokens")
SERVED_BY = ("student", "teacher")


class ReceiptError(Exception):
    """The receipt (or its proof, chain or rows) does not verify; ``check`` names the failed check."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"{check}: {message}")
        self.check = check
        self.message = message


def micro(usd: float | int | None) -> int:
    """US dollars -> integer micro-dollars, rounded half to even (Python ``round``)."""
    return int(round(float(usd or 0.0) * 1_000_000))


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
    out = empty_totals()
    for e in entries:
        out["requests"] += int(e["requests"])
        for k, v in e["served_by"].items():
            out["served_by"][k] = out["served_by"].get(k, 0) + int(v)
        for k in ("teacher_cost_micro_usd", "actual_cost_micro_usd", "saved_micro_usd"):
            out[k] += int(e[k])
    return out


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
        "requests": {
            "root": root_hex,
            "size": size,
            "tree": TREE,
            "order": "request_id",
            "leaf_fields": list(LEAF_FIELDS),
        },
        "clients": {k: dict(v) for k, v in sorted(clients.items())},
        "totals": sum_totals(clients.values()),
        "unit": "micro-USD",
    }


def envelope_digest(envelope: Mapping[str, Any]) -> str:
    """The digest the next day's receipt chains to: SHA-256 of the canonical JSON of the envelope."""
    return digest(dict(envelope))


def make_proof(
    day: str, request_id: str, index: int, leaves: Sequence[bytes], envelope: Mapping[str, Any]
) -> dict[str, Any]:
    """The inclusion proof document of ``leaves[index]`` (the row of `request_id`) in the day's receipt.

    ``{_type: PROOF_TYPE, day, request_id, index, size, leaf, proof: [hex], root, receipt_digest}``: the audit
    path is RFC 9162 §2.1.3.1 ``PATH(index, D[size])`` over `leaves` (the canonical leaf texts, UTF-8, in tree
    order); ``receipt_digest`` is ``envelope_digest(envelope)``. Checked by ``check_proof``. This rebuilds the
    tree from every leaf; ``make_stored_proof`` reads the same document from the day's stored tree.
    """
    tree = merkle.MerkleTree(leaves)
    return proof_document(
        day, request_id, index, tree.size, leaves[index], tree.inclusion_proof(index), tree.root(), envelope
    )


def make_stored_proof(
    day: str,
    request_id: str,
    index: int,
    leaf: bytes,
    tree: merkle_store.StoredTree,
    block: Sequence[bytes],
    envelope: Mapping[str, Any] | str,
) -> dict[str, Any]:
    """``make_proof``'s document (the same bytes) from the day's stored tree (``ratchet_stats.merkle_store``):
    `block` holds the leaves (canonical texts, UTF-8) of ``tree.block_range(index)``, `leaf` is row `index`'s;
    `envelope` may be given as its ``envelope_digest`` already."""
    path = tree.inclusion_proof(index, merkle_store.leaf_hashes(block))
    return proof_document(day, request_id, index, tree.size, leaf, path, tree.root(), envelope)


def proof_document(
    day: str,
    request_id: str,
    index: int,
    size: int,
    leaf: bytes,
    path: Sequence[bytes],
    root: bytes,
    envelope: Mapping[str, Any] | str,
) -> dict[str, Any]:
    """The proof document (see ``make_proof``) from its parts."""
    return {
        "_type": PROOF_TYPE,
        "day": day,
        "request_id": request_id,
        "index": index,
        "size": size,
        "leaf": leaf.decode("utf-8"),
        "proof": [h.hex() for h in path],
        "root": root.hex(),
        "receipt_digest": envelope if isinstance(envelope, str) else envelope_digest(envelope),
    }


# Verification -------------------------------------------------------------------------------------------------
def signed_predicate(envelope: Any, public_keys: Any, what: str = "receipt") -> tuple[str, dict[str, Any]]:
    """(predicate type, predicate) of a v1 or v2 receipt: the signature first, then the payload and its shape."""
    try:
        statement = verify_statement(envelope, public_keys)
    except VerificationError as exc:
        raise ReceiptError(exc.check, f"{what}: {exc}") from None
    kind = statement.get("predicateType")
    if kind not in (PREDICATE_TYPE, PREDICATE_TYPE_V2, PREDICATE_TYPE_V3):
        raise ReceiptError(
            "predicate-type", f"{what}: predicateType is {kind!r}, not a receipt ({PREDICATE_TYPE_V3})"
        )
    predicate = statement["predicate"]
    if kind == PREDICATE_TYPE:
        _check_shape(predicate, what)
    else:
        # v2 and v3 build on this module, so they are imported where they are used.
        from ratchet_stats import receipt_v2, receipt_v3

        (receipt_v2 if kind == PREDICATE_TYPE_V2 else receipt_v3).check_shape(predicate, what)
    subjects = statement.get("subject") or []
    if not any(s.get("digest", {}).get("sha256") == predicate["requests"]["root"] for s in subjects):
        raise ReceiptError("predicate", f"{what}: no subject carries the request root")
    return kind, predicate


def _signed_predicate(envelope: Any, public_keys: Any, what: str) -> dict[str, Any]:
    return signed_predicate(envelope, public_keys, what)[1]


def _check_shape(p: Any, what: str) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ReceiptError("predicate", f"{what}: {msg}")

    need(isinstance(p, dict), "predicate is not an object")
    need(isinstance(p.get("day"), str) and len(p["day"]) == 10, "day must be YYYY-MM-DD")
    req = p.get("requests")
    need(isinstance(req, dict), "requests is missing")
    need(isinstance(req.get("root"), str) and len(req["root"]) == 64, "requests.root must be 64 hex chars")
    need(isinstance(req.get("size"), int) and req["size"] >= 0, "requests.size must be a count")
    need(isinstance(p.get("clients"), dict), "clients is missing")
    need(isinstance(p.get("totals"), dict), "totals is missing")
    prev = p.get("previous")
    need(prev is None or (isinstance(prev, dict) and {"day", "digest"} <= set(prev)), "previous is malformed")
    for name, entry in [*p["clients"].items(), ("totals", p["totals"])]:
        need(
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


def check_chain(predicate: Mapping[str, Any], prev_envelope: Any, public_keys: Any) -> dict[str, Any]:
    """The receipt names ``prev_envelope`` as its predecessor (day and digest); returns the previous predicate."""
    prev = _signed_predicate(prev_envelope, public_keys, "previous receipt")
    link = predicate.get("previous")
    if link is None:
        raise ReceiptError("chain", f"receipt {predicate['day']} names no previous receipt")
    if link["day"] != prev["day"]:
        raise ReceiptError("chain", f"receipt chains to day {link['day']}, the file given is {prev['day']}")
    if not prev["day"] < predicate["day"]:
        raise ReceiptError("chain", "the previous receipt is not from an earlier day")
    got = envelope_digest(prev_envelope if isinstance(prev_envelope, Mapping) else _json(prev_envelope))
    if link["digest"] != got:
        raise ReceiptError("chain", f"previous receipt digest is {got}, the receipt names {link['digest']}")
    return prev


def _json(data: Any) -> dict[str, Any]:
    import json

    return json.loads(data)


def check_proof(predicate: Mapping[str, Any], proof: Mapping[str, Any]) -> dict[str, Any]:
    """An inclusion proof of one request row against the signed root; returns the row."""
    import json

    try:
        leaf = proof["leaf"].encode("utf-8")
        index, size = int(proof["index"]), int(proof["size"])
        path = [bytes.fromhex(h) for h in proof["proof"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReceiptError("proof", f"malformed proof ({exc.__class__.__name__}: {exc})") from None
    req = predicate["requests"]
    if proof.get("day") != predicate["day"]:
        raise ReceiptError(
            "proof", f"proof is for day {proof.get('day')}, the receipt for {predicate['day']}"
        )
    if size != req["size"]:
        raise ReceiptError("proof", f"proof is for a tree of {size} rows, the receipt signs {req['size']}")
    if proof.get("root") not in (None, req["root"]):
        raise ReceiptError("proof", "proof root differs from the signed root")
    if not merkle.verify_inclusion(leaf, index, size, path, bytes.fromhex(req["root"])):
        raise ReceiptError("proof", f"row {index} is not in the signed tree (leaf or audit path altered)")
    row = json.loads(leaf)
    if canonical_json(row) != leaf:
        raise ReceiptError("proof", "leaf is not canonical JSON")
    return row


def check_rows(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> None:
    """A full list of leaves (canonical rows in order) must give the signed root, size and client totals."""
    import json

    req = predicate["requests"]
    if len(leaves) != req["size"]:
        raise ReceiptError(
            "rows", f"{len(leaves)} rows given, the receipt signs {req['size']} (rows dropped?)"
        )
    got = merkle.root(list(leaves)).hex()
    if got != req["root"]:
        raise ReceiptError(
            "rows", f"rows give root {got}, the receipt signs {req['root']} (a row was altered)"
        )
    rows = [json.loads(b) for b in leaves]
    ids = [r["request_id"] for r in rows]
    if ids != sorted(ids):
        raise ReceiptError("rows", "rows are not sorted by request_id")
    clients, _ = totals_from_rows(rows)
    for name, entry in clients.items():
        signed = predicate["clients"].get(name)
        want = {**entry, "served_by": {k: v for k, v in entry["served_by"].items() if v}}
        have = (
            None
            if signed is None
            else {**signed, "served_by": {k: v for k, v in signed["served_by"].items() if v}}
        )
        if canonical_json(want) != canonical_json(have):
            raise ReceiptError("rows", f"client {name!r}: rows give {entry}, the receipt signs {signed}")


def verify_receipt(
    envelope: Any,
    public_keys: Any,
    prev_envelope: Any = None,
    proof: Mapping[str, Any] | None = None,
    leaves: Sequence[bytes] | None = None,
    clients: Sequence[bytes] | None = None,
    estimates: Sequence[bytes] | None = None,
    prev_estimates: Sequence[bytes] | None = None,
    pairs: Sequence[bytes] | None = None,
) -> dict[str, Any]:
    """Verify a v1, v2 or v3 receipt offline (signature first); returns a report. Raises ReceiptError naming the check.

    v2 (``ratchet_stats.receipt_v2``): `clients` and `estimates` are the client and estimate lines (the
    auditor's files); with them the report has every client's totals and the overall totals. `leaves` (every row)
    then recompute the request root and every line; `prev_estimates` (the previous receipt's estimate lines)
    check the chained estimates. v3 (``ratchet_stats.receipt_v3``): as v2, and `pairs` (the pair lines) are
    checked against the signed pair root; with `leaves` they take part in recomputing every client line.
    """
    kind, predicate = signed_predicate(envelope, public_keys, "receipt")
    checks = ["signature", "predicate"]
    if kind == PREDICATE_TYPE:
        check_totals(predicate)
        checks.append("totals")
        totals, names = predicate["totals"], sorted(predicate["clients"])
    else:
        totals, names = None, None
    if prev_envelope is not None:
        check_chain(predicate, prev_envelope, public_keys)
        checks.append("chain")
    row = None
    if proof is not None:
        row = check_proof(predicate, proof)
        checks.append("proof")
    if kind == PREDICATE_TYPE:
        if leaves is not None:
            check_rows(predicate, leaves)
            checks.append("rows")
    else:
        from ratchet_stats import receipt_v2, receipt_v3

        v3 = kind == PREDICATE_TYPE_V3
        fmt: Any = receipt_v3 if v3 else receipt_v2
        lines, est = None, None
        if clients is not None:
            lines = fmt.check_clients(predicate, clients)
            totals = fmt.sum_totals(line["totals"] for line in lines.values())
            names = sorted(lines)
            checks.append("clients")
        if estimates is not None:
            est = receipt_v2.check_estimates(predicate, estimates)
            checks.append("estimates")
        if prev_estimates is not None:
            if est is None or prev_envelope is None:
                raise ReceiptError(
                    "chain", "chained estimates need the estimate lines and the previous receipt"
                )
            prev_kind, prev = signed_predicate(prev_envelope, public_keys, "previous receipt")
            if prev_kind == PREDICATE_TYPE:
                raise ReceiptError("chain", "the previous receipt is v1: it has no estimate lines to chain")
            receipt_v2.check_chained_estimates(
                est, receipt_v2.check_estimates(prev, prev_estimates), prev["day"]
            )
            checks.append("chained-estimates")
        if v3 and pairs is not None:
            receipt_v3.check_pairs(predicate, pairs)
            checks.append("pairs")
        if leaves is not None:
            if lines is None or est is None or (v3 and pairs is None):
                raise ReceiptError(
                    "rows",
                    "a v2 receipt's rows are checked against its client and estimate lines (v3: and its pair "
                    "lines): give them",
                )
            if v3:
                receipt_v3.check_rows(predicate, leaves, pairs or [], lines, est)
            else:
                receipt_v2.check_rows(predicate, leaves, lines, est)
            checks.append("rows")
    return {
        "ok": True,
        "version": _VERSIONS[kind],
        "day": predicate["day"],
        "checks": checks,
        "root": predicate["requests"]["root"],
        "size": predicate["requests"]["size"],
        "totals": totals,
        "clients": names,
        "teacher_equivalent": predicate.get("teacher_equivalent"),
        "previous": predicate["previous"],
        "row": row,
        "envelope_sha256": sha256_hex(
            canonical_json(envelope if isinstance(envelope, Mapping) else _json(envelope))
        ),
    }


_VERSIONS = {PREDICATE_TYPE: 1, PREDICATE_TYPE_V2: 2, PREDICATE_TYPE_V3: 3}


def verify_client_view(view: Mapping[str, Any], public_keys: Any) -> dict[str, Any]:
    """Verify what a client received for a day (``ratchet_stats.receipt_v2`` client view): the signature, its own
    line against the signed client root, the estimate lines it was given, and its rows against its line."""
    if not isinstance(view, Mapping) or "envelope" not in view:
        raise ReceiptError("client-view", "not a client view: it has no envelope")
    kind, predicate = signed_predicate(view["envelope"], public_keys, "receipt")
    if kind == PREDICATE_TYPE:
        raise ReceiptError("client-view", "the receipt is v1, which has no client tree; ask the auditor")
    from ratchet_stats import receipt_v2, receipt_v3

    fmt: Any = receipt_v3 if kind == PREDICATE_TYPE_V3 else receipt_v2
    line, checks = fmt.check_client_view(predicate, view)
    return {
        "ok": True,
        "version": _VERSIONS[kind],
        "day": predicate["day"],
        "client": line["client"],
        "checks": ["signature", "predicate", *checks],
        "totals": line["totals"],
        "teacher_equivalent": predicate["teacher_equivalent"],
        "rows": len(view.get("rows") or []),
        "envelope_sha256": sha256_hex(canonical_json(dict(view["envelope"]))),
    }
