"""What a client receives of a day's receipt (v2 on), and the checks of it both versions share.

A **client view** (``_type`` = ``CLIENT_VIEW_TYPE``) holds the signed envelope, which names no client, the
client's own line with an inclusion proof against the signed client root, and the estimate lines its totals used,
each proven against the signed estimate root; v2 and v3 add the client's own rows (v3 also its pair lines), which
must recompute the line. ``ratchet verify receipt --client-proof FILE`` checks it
(``ratchet_stats.receipt.verify_client_view``, then the version's ``check_client_view``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ratchet_stats import merkle
from ratchet_stats.canonical import canonical_json
from ratchet_stats.receipt.common import ReceiptError, need, nonzero, parse_estimate_line, parse_line

CLIENT_VIEW_TYPE = "https://ratchet.dev/receipt-client-view/v1"


def proven(tree: merkle.MerkleTree, leaves: Sequence[bytes], index: int) -> dict[str, Any]:
    """Line `index` of `leaves` with its inclusion proof in `tree` (a client view's entry)."""
    return {
        "index": index,
        "leaf": leaves[index].decode("utf-8"),
        "proof": [h.hex() for h in tree.inclusion_proof(index)],
    }


def proven_view(
    envelope: Mapping[str, Any],
    day: str,
    client: str,
    client_leaves: Sequence[bytes],
    estimate_leaves: Sequence[bytes],
    tasks: Callable[[dict[str, Any]], Iterable[str]],
) -> dict[str, Any] | None:
    """What `client` receives of a day (v2 on), None when it has no line: the envelope, its own line proven against
    the client root, and the estimate lines of the tasks `tasks(its line)` names, each proven against the
    estimate root. The version adds the rows (and pair lines) it carries."""
    index = next((i for i, b in enumerate(client_leaves) if json.loads(b)["client"] == client), None)
    if index is None:
        return None
    wanted = set(tasks(json.loads(client_leaves[index])))
    est_tree = merkle.MerkleTree(estimate_leaves)
    return {
        "_type": CLIENT_VIEW_TYPE,
        "day": day,
        "client": client,
        "envelope": dict(envelope),
        "line": proven(merkle.MerkleTree(client_leaves), client_leaves, index),
        "estimates": [
            proven(est_tree, estimate_leaves, i)
            for i, b in enumerate(estimate_leaves)
            if json.loads(b)["task"] in wanted
        ],
    }


def check_member(doc: Mapping[str, Any], item: Any, check: str, what: str) -> bytes:
    """A proven entry (``proven``) is in the signed tree `doc`; returns its line."""
    try:
        leaf = item["leaf"].encode("utf-8")
        index = int(item["index"])
        path = [bytes.fromhex(h) for h in item["proof"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReceiptError(check, f"malformed {what} ({exc.__class__.__name__}: {exc})") from None
    ok = merkle.verify_inclusion(leaf, index, doc["size"], path, bytes.fromhex(doc["root"]))
    need(ok, check, f"{what} is not in the signed tree (line or audit path altered)")
    return leaf


def view_line(
    predicate: Mapping[str, Any], view: Mapping[str, Any], parse: Callable[[bytes, str], dict[str, Any]]
) -> dict[str, Any]:
    """The view's own line, proven against the signed client root and parsed by the version's `parse`."""
    need(
        view.get("_type") == CLIENT_VIEW_TYPE,
        "client-view",
        f"not a client view (_type {view.get('_type')!r})",
    )
    need(view.get("day") == predicate["day"], "client-view", "the view's day is not the receipt's")
    leaf = check_member(predicate["clients"], view.get("line") or {}, "client-line", "the client line")
    line = parse(leaf, "client-line")
    need(line["client"] == view.get("client"), "client-line", "the line belongs to another client")
    return line


def view_estimates(predicate: Mapping[str, Any], view: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The view's estimate lines, each proven against the signed estimate root, by task."""
    estimates = {}
    for item in view.get("estimates") or []:
        e_leaf = check_member(
            predicate["teacher_equivalent"]["estimates"], item, "estimates", "an estimate line"
        )
        e = parse_estimate_line(e_leaf, predicate["day"])
        estimates[e["task"]] = e
    return estimates


def view_own(texts: Sequence[Any], client: str, what: str) -> list[dict[str, Any]]:
    """Canonical JSON lines of the view (rows or pair lines), each the client's own."""
    out = []
    for text in texts:
        row = parse_line(str(text).encode("utf-8"), "client-rows", what)
        need(row.get("client") == client, "client-rows", f"{what} of another client is in the view")
        out.append(row)
    return out


def view_indices_ok(predicate: Mapping[str, Any], rows_in: Sequence[Mapping[str, Any]]) -> None:
    indices = [int(r["index"]) for r in rows_in]
    need(
        indices == sorted(set(indices)) and all(0 <= i < predicate["requests"]["size"] for i in indices),
        "client-rows",
        "row indices are not increasing within the tree",
    )


def view_totals_match(mine: Mapping[str, Any], line: Mapping[str, Any]) -> None:
    need(
        canonical_json(nonzero(mine)) == canonical_json(nonzero(line["totals"])),
        "client-rows",
        f"your rows give {mine}, the signed line {line['totals']} (rows missing or altered?)",
    )
