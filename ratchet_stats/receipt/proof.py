"""The inclusion proof of one request row in a day's receipt (``_type`` = ``PROOF_TYPE``), the same in every version.

Made by the gateway (``GET /ratchet/receipts/{day}/proof/{request_id}``, from the day's stored tree) and checked
by ``ratchet verify receipt --proof`` against the signed request root (``ratchet_stats.receipt.verify_receipt``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ratchet_stats import merkle, merkle_store
from ratchet_stats.canonical import canonical_json
from ratchet_stats.receipt.common import ReceiptError, envelope_digest

PROOF_TYPE = "https://ratchet.dev/receipt-proof/v1"


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


def check_proof(predicate: Mapping[str, Any], proof: Mapping[str, Any]) -> dict[str, Any]:
    """An inclusion proof of one request row against the signed root; returns the row."""
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
