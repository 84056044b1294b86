"""Receipt v2: honest teacher-equivalent costs and per-client privacy (``predicateType`` = ``PREDICATE_TYPE``).

The signed predicate holds no client's name or totals and no overall totals (with two clients, the overall minus
one's own would be the other's). It commits to three RFC 9162 trees::

    predicate = {
      "day", "previous": null | {"day", "digest"},
      "requests": {"root", "size", "tree", "order": "request_id", "leaf_fields": LEAF_FIELDS},
      "clients":  {"root", "size", "tree", "order": "client", "leaf_fields": ["client", "salt", "totals"]},
      "teacher_equivalent": {"method", "rule", "prices": {teacher_model, input/output_usd_per_token, source},
                             "estimated_fields": [...],
                             "estimates": {"root", "size", "tree", "order": "task", "leaf_fields": [...]}},
      "unit": "micro-USD"}

- request leaves: ``canonical_json`` of each request row's ``LEAF_FIELDS`` (v1's plus ``teacher_prompt_tokens``);
- client leaves (``clients.jsonl`` beside the receipt), sorted by client: ``{"client", "salt", "totals": TOTALS}``
  with ``TOTALS = {requests, served_by, teacher_cost_micro_usd = measured + estimated,
  teacher_cost_measured_micro_usd, teacher_cost_estimated_micro_usd, actual_cost_micro_usd, saved_micro_usd}``.
  ``salt = SHA-256("ratchet receipt client salt" 0 day 0 client 0 first request_id)``: only someone holding the
  client's rows can recompute it, so a sibling hash in a proof cannot be matched against guessed totals;
- estimate leaves (``estimates.jsonl``), sorted by task: ``ratchet_stats.teacher_equivalent`` lines.

An auditor holding the files verifies the whole (``verify_receipt`` with the client and estimate lines and the
rows). A client receives a **client view** (``CLIENT_VIEW_TYPE``): the signed envelope, its own line with an
inclusion proof against the clients root, the estimate lines of the tasks it used (each proven), and its own
request leaves, which must recompute its line (``verify_client_view``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ratchet_stats import merkle
from ratchet_stats import teacher_equivalent as te
from ratchet_stats.canonical import canonical_json, sha256_hex
from ratchet_stats.receipt import (
    LEAF_FIELDS_V2 as LEAF_FIELDS,
)
from ratchet_stats.receipt import (
    PREDICATE_TYPE_V2 as PREDICATE_TYPE,
)
from ratchet_stats.receipt import (
    SERVED_BY,
    TREE,
    ReceiptError,
    micro,
)

CLIENT_VIEW_TYPE = "https://ratchet.dev/receipt-client-view/v1"
CLIENT_FIELDS = ("client", "salt", "totals")
COST_KEYS = (
    "teacher_cost_micro_usd",
    "teacher_cost_measured_micro_usd",
    "teacher_cost_estimated_micro_usd",
    "actual_cost_micro_usd",
    "saved_micro_usd",
)
ESTIMATED_FIELDS = ["teacher_cost_estimated_micro_usd", "teacher_cost_micro_usd", "saved_micro_usd"]


# Building ------------------------------------------------------------------------------------------------------
def empty_totals() -> dict[str, Any]:
    return {"requests": 0, "served_by": dict.fromkeys(SERVED_BY, 0), **dict.fromkeys(COST_KEYS, 0)}


def add(totals: dict[str, Any], served: str, n: int, measured: int, estimated: int, actual: int) -> None:
    """Add `n` rows served by `served` with these micro-USD sums to TOTALS in place."""
    totals["requests"] += n
    totals["served_by"][served] = totals["served_by"].get(served, 0) + n
    totals["teacher_cost_measured_micro_usd"] += measured
    totals["teacher_cost_estimated_micro_usd"] += estimated
    totals["teacher_cost_micro_usd"] += measured + estimated
    totals["actual_cost_micro_usd"] += actual
    totals["saved_micro_usd"] += measured + estimated - actual


def sum_totals(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out = empty_totals()
    for e in entries:
        out["requests"] += int(e["requests"])
        for k, v in e["served_by"].items():
            out["served_by"][k] = out["served_by"].get(k, 0) + int(v)
        for k in COST_KEYS:
            out[k] += int(e[k])
    return out


def client_salt(day: str, client: str, first_request_id: str) -> str:
    """The line's salt (module docstring)."""
    return sha256_hex(f"ratchet receipt client salt\0{day}\0{client}\0{first_request_id}".encode())


def client_leaf(client: str, salt: str, totals: Mapping[str, Any]) -> bytes:
    return canonical_json({"client": client, "salt": salt, "totals": dict(totals)})


def _tree_doc(root_hex: str, size: int, order: str, fields: Sequence[str]) -> dict[str, Any]:
    return {"root": root_hex, "size": size, "tree": TREE, "order": order, "leaf_fields": list(fields)}


def make_predicate(
    day: str,
    requests_root: str,
    size: int,
    client_leaves: Sequence[bytes],
    estimate_leaves: Sequence[bytes],
    prices: Mapping[str, Any],
    previous: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The v2 predicate (module docstring) over the day's request root and the client and estimate lines."""
    return {
        "day": day,
        "previous": dict(previous) if previous else None,
        "requests": _tree_doc(requests_root, size, "request_id", LEAF_FIELDS),
        "clients": _tree_doc(
            merkle.root(list(client_leaves)).hex(), len(client_leaves), "client", CLIENT_FIELDS
        ),
        "teacher_equivalent": {
            "method": te.METHOD,
            "rule": te.RULE,
            "prices": dict(prices),
            "estimated_fields": ESTIMATED_FIELDS,
            "estimates": _tree_doc(
                merkle.root(list(estimate_leaves)).hex(), len(estimate_leaves), "task", te.ESTIMATE_FIELDS
            ),
        },
        "unit": "micro-USD",
    }


def subjects(day: str, predicate: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The statement's subjects: the request root and the client root."""
    return [
        {"name": f"receipt:{day}", "digest": {"sha256": predicate["requests"]["root"]}},
        {"name": f"receipt-clients:{day}", "digest": {"sha256": predicate["clients"]["root"]}},
    ]


def row_amounts(
    row: Mapping[str, Any], estimates: Mapping[str, Mapping[str, Any]], prices: Mapping[str, Any]
) -> tuple[int, int]:
    """(measured, estimated) teacher-equivalent micro-USD of one request leaf row (``teacher_equivalent``)."""
    if te.is_estimated(row):
        line = estimates.get(str(row["task"]))
        if line is None:
            raise KeyError(str(row["task"]))
        return 0, te.estimated_micro(
            int(row.get("teacher_prompt_tokens") or 0), te.completion_estimate(line), prices
        )
    if (row.get("served_by") or "teacher") == "student":
        return 0, 0
    return micro(row.get("teacher_cost_usd")), 0


def totals_from_rows(
    rows: Iterable[Mapping[str, Any]],
    estimates: Mapping[str, Mapping[str, Any]],
    prices: Mapping[str, Any],
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(per-client TOTALS, per-client first request_id) of leaf rows, by the signed method."""
    clients: dict[str, dict[str, Any]] = {}
    first: dict[str, str] = {}
    for row in rows:
        name = str(row["client"])
        try:
            measured, estimated = row_amounts(row, estimates, prices)
        except KeyError:
            raise ReceiptError(
                "estimates", f"task {row['task']!r} has student-served rows but no estimate line"
            ) from None
        served = str(row.get("served_by") or "teacher")
        add(
            clients.setdefault(name, empty_totals()),
            served,
            1,
            measured,
            estimated,
            micro(row["actual_cost_usd"]),
        )
        rid = str(row["request_id"])
        if name not in first or rid < first[name]:
            first[name] = rid
    return dict(sorted(clients.items())), first


# Verification --------------------------------------------------------------------------------------------------
def _need(cond: bool, check: str, msg: str) -> None:
    if not cond:
        raise ReceiptError(check, msg)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _tree_ok(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("root"), str)
        and len(doc["root"]) == 64
        and _is_count(doc.get("size"))
    )


def check_shape(p: Any, what: str) -> None:
    """The v2 predicate's shape (check ``predicate``)."""

    def need(cond: bool, msg: str) -> None:
        _need(cond, "predicate", f"{what}: {msg}")

    need(isinstance(p, dict), "predicate is not an object")
    need(isinstance(p.get("day"), str) and len(p["day"]) == 10, "day must be YYYY-MM-DD")
    for name in ("requests", "clients"):
        need(_tree_ok(p.get(name)), f"{name} must be a tree (root: 64 hex chars, size: a count)")
    teq = p.get("teacher_equivalent")
    need(
        isinstance(teq, dict) and teq.get("method") == te.METHOD,
        f"teacher_equivalent.method must be {te.METHOD}",
    )
    prices = teq.get("prices")
    need(
        isinstance(prices, dict)
        and all(
            isinstance(prices.get(k), float | int) and prices[k] >= 0
            for k in ("input_usd_per_token", "output_usd_per_token")
        ),
        "teacher_equivalent.prices must hold input/output_usd_per_token",
    )
    need(_tree_ok(teq.get("estimates")), "teacher_equivalent.estimates must be a tree")
    need("totals" not in p and "clients" in p and "root" in p["clients"], "v2 signs no plain totals")
    prev = p.get("previous")
    need(prev is None or (isinstance(prev, dict) and {"day", "digest"} <= set(prev)), "previous is malformed")


def check_totals_entry(name: str, e: Any, check: str) -> None:
    """One TOTALS adds up by itself."""
    _need(
        isinstance(e, dict)
        and _is_count(e.get("requests"))
        and isinstance(e.get("served_by"), dict)
        and all(_is_count(v) for v in e["served_by"].values())
        and all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool) for k in COST_KEYS)
        and set(e) == {"requests", "served_by", *COST_KEYS},
        check,
        f"client {name!r}: totals are malformed",
    )
    _need(sum(e["served_by"].values()) == e["requests"], check, f"client {name!r}: served_by does not add up")
    _need(
        e["teacher_cost_measured_micro_usd"] + e["teacher_cost_estimated_micro_usd"]
        == e["teacher_cost_micro_usd"],
        check,
        f"client {name!r}: teacher cost != measured + estimated",
    )
    _need(
        e["teacher_cost_micro_usd"] - e["actual_cost_micro_usd"] == e["saved_micro_usd"],
        check,
        f"client {name!r}: saved != teacher cost - actual cost",
    )


def _parse_line(leaf: bytes, check: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(leaf)
    except ValueError as exc:
        raise ReceiptError(check, f"{what} is not JSON ({exc})") from None
    _need(isinstance(obj, dict) and canonical_json(obj) == leaf, check, f"{what} is not canonical JSON")
    return obj


def parse_client_line(leaf: bytes, check: str = "clients") -> dict[str, Any]:
    line = _parse_line(leaf, check, "a client line")
    _need(set(line) == set(CLIENT_FIELDS), check, f"a client line must have exactly {list(CLIENT_FIELDS)}")
    _need(
        isinstance(line["client"], str) and isinstance(line["salt"], str), check, "client and salt are text"
    )
    check_totals_entry(line["client"], line["totals"], check)
    return line


def parse_estimate_line(leaf: bytes, day: str, check: str = "estimates") -> dict[str, Any]:
    line = _parse_line(leaf, check, "an estimate line")
    _need(
        set(line) == set(te.ESTIMATE_FIELDS), check, f"an estimate line must have {list(te.ESTIMATE_FIELDS)}"
    )
    task = line["task"]
    for part in ("from_requests", "from_audits"):
        p = line[part]
        _need(
            isinstance(p, dict)
            and set(p) == {"answers", "completion_tokens"}
            and _is_count(p["answers"])
            and _is_count(p["completion_tokens"]),
            check,
            f"task {task!r}: {part} is malformed",
        )
    k, _ = te.answers_of(line)
    source, when = line["source"], line["day"]
    ok = {
        "day": k > 0 and when == day,
        "previous": k > 0 and isinstance(when, str) and when < day,
        "none": k == 0 and when is None,
    }.get(source, False)
    _need(ok, check, f"task {task!r}: source {source!r} with day {when!r} and {k} answers is inconsistent")
    return line


def _check_tree(doc: Mapping[str, Any], leaves: Sequence[bytes], check: str, what: str) -> None:
    _need(
        len(leaves) == doc["size"],
        check,
        f"{len(leaves)} {what} given, the receipt signs {doc['size']} ({what} dropped?)",
    )
    got = merkle.root(list(leaves)).hex()
    _need(
        got == doc["root"],
        check,
        f"{what} give root {got}, the receipt signs {doc['root']} (a line was altered)",
    )


def check_clients(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> dict[str, dict[str, Any]]:
    """Every client line: root and size, canonical and well-formed, sorted; they count every request."""
    _check_tree(predicate["clients"], leaves, "clients", "client lines")
    lines = [parse_client_line(b) for b in leaves]
    names = [line["client"] for line in lines]
    _need(names == sorted(set(names)), "clients", "client lines are not sorted by client (or repeat one)")
    total = sum(line["totals"]["requests"] for line in lines)
    _need(
        total == predicate["requests"]["size"],
        "clients",
        f"client lines count {total} requests, the tree has {predicate['requests']['size']}",
    )
    return {line["client"]: line for line in lines}


def check_estimates(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> dict[str, dict[str, Any]]:
    """Every estimate line: root and size, canonical, well-formed (source rules), sorted by task."""
    _check_tree(predicate["teacher_equivalent"]["estimates"], leaves, "estimates", "estimate lines")
    lines = [parse_estimate_line(b, predicate["day"]) for b in leaves]
    tasks = [line["task"] for line in lines]
    _need(tasks == sorted(set(tasks)), "estimates", "estimate lines are not sorted by task (or repeat one)")
    return {line["task"]: line for line in lines}


def _rows_of(leaves: Sequence[bytes]) -> list[dict[str, Any]]:
    return [json.loads(b) for b in leaves]


def check_rows(
    predicate: Mapping[str, Any],
    leaves: Sequence[bytes],
    clients: Mapping[str, Mapping[str, Any]],
    estimates: Mapping[str, Mapping[str, Any]],
) -> None:
    """The full rows give the signed request root, every client line (totals and salt) and every day-source
    estimate's request part."""
    _check_tree(predicate["requests"], leaves, "rows", "rows")
    rows = _rows_of(leaves)
    ids = [r["request_id"] for r in rows]
    _need(ids == sorted(ids), "rows", "rows are not sorted by request_id")
    prices = predicate["teacher_equivalent"]["prices"]
    totals, first = totals_from_rows(rows, estimates, prices)
    check_client_lines(predicate["day"], totals, first, clients)
    check_day_estimates(estimates, "from_requests", te.request_answers(rows))


def check_client_lines(
    day: str,
    totals: Mapping[str, Mapping[str, Any]],
    first: Mapping[str, str],
    clients: Mapping[str, Mapping[str, Any]],
) -> None:
    """The client lines are exactly the recomputed totals (and salts) of the clients the rows name."""
    _need(
        set(totals) == set(clients),
        "rows",
        f"rows name clients {sorted(totals)}, the lines {sorted(clients)}",
    )
    for name, entry in totals.items():
        line = clients[name]
        _need(
            canonical_json(_nonzero(entry)) == canonical_json(_nonzero(line["totals"])),
            "rows",
            f"client {name!r}: rows give {entry}, the receipt signs {line['totals']}",
        )
        _need(
            line["salt"] == client_salt(day, name, first[name]),
            "rows",
            f"client {name!r}: salt does not match the client's rows",
        )


def check_day_estimates(
    estimates: Mapping[str, Mapping[str, Any]], part: str, answers: Mapping[str, tuple[int, int]]
) -> None:
    """Each day-source estimate line's `part` equals the answers recomputed from the day's rows, and every task
    with such answers has a day-source line."""
    for task, line in estimates.items():
        if line["source"] == "day":
            got = answers.get(task, (0, 0))
            want = (line[part]["answers"], line[part]["completion_tokens"])
            _need(got == want, "estimates", f"task {task!r}: {part} recomputes to {got}, the line {want}")
    for task in answers:
        _need(
            task in estimates and estimates[task]["source"] == "day",
            "estimates",
            f"task {task!r} has teacher answers that day but its estimate line is not source 'day'",
        )


def _nonzero(totals: Mapping[str, Any]) -> dict[str, Any]:
    return {**totals, "served_by": {k: v for k, v in totals["served_by"].items() if v}}


def check_chained_estimates(
    estimates: Mapping[str, Mapping[str, Any]], prev_estimates: Mapping[str, Mapping[str, Any]], prev_day: str
) -> None:
    """Lines carried from the previous receipt carry its numbers; every previous line is carried forward."""
    for task, old in prev_estimates.items():
        new = estimates.get(task)
        _need(
            new is not None,
            "chain",
            f"task {task!r}: the previous receipt's estimate was not carried forward",
        )
        if new["source"] == "day":
            continue
        want_day = prev_day if old["source"] == "day" else old["day"]
        want_source = "none" if old["source"] == "none" else "previous"
        same = (
            new["source"] == want_source
            and new["day"] == (want_day if want_source == "previous" else None)
            and new["from_requests"] == old["from_requests"]
            and new["from_audits"] == old["from_audits"]
        )
        _need(
            same, "chain", f"task {task!r}: carried estimate {new} differs from the previous receipt's {old}"
        )
    for task, new in estimates.items():
        _need(
            new["source"] != "previous" or task in prev_estimates,
            "chain",
            f"task {task!r}: source 'previous' but the previous receipt has no estimate for it",
        )


# The client view -----------------------------------------------------------------------------------------------
def _proven(tree: merkle.MerkleTree, leaves: Sequence[bytes], index: int) -> dict[str, Any]:
    return {
        "index": index,
        "leaf": leaves[index].decode("utf-8"),
        "proof": [h.hex() for h in tree.inclusion_proof(index)],
    }


def make_client_view(
    envelope: Mapping[str, Any],
    day: str,
    client: str,
    client_leaves: Sequence[bytes],
    estimate_leaves: Sequence[bytes],
    rows: Sequence[Mapping[str, Any]],
) -> dict[str, Any] | None:
    """What `client` receives (module docstring): None when it has no line that day. `rows` are its own
    ``{index, request_id, leaf}`` entries; estimate lines are those of the tasks of its student-served rows."""
    lines = [json.loads(b) for b in client_leaves]
    index = next((i for i, line in enumerate(lines) if line["client"] == client), None)
    if index is None:
        return None
    tasks = {str(r["task"]) for r in (json.loads(row["leaf"]) for row in rows) if te.is_estimated(r)}
    est_tree = merkle.MerkleTree(estimate_leaves)
    estimates = [
        _proven(est_tree, estimate_leaves, i)
        for i, b in enumerate(estimate_leaves)
        if json.loads(b)["task"] in tasks
    ]
    return {
        "_type": CLIENT_VIEW_TYPE,
        "day": day,
        "client": client,
        "envelope": dict(envelope),
        "line": _proven(merkle.MerkleTree(client_leaves), client_leaves, index),
        "estimates": estimates,
        "rows": [dict(r) for r in rows],
    }


def _check_member(doc: Mapping[str, Any], item: Any, check: str, what: str) -> bytes:
    try:
        leaf = item["leaf"].encode("utf-8")
        index = int(item["index"])
        path = [bytes.fromhex(h) for h in item["proof"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReceiptError(check, f"malformed {what} ({exc.__class__.__name__}: {exc})") from None
    ok = merkle.verify_inclusion(leaf, index, doc["size"], path, bytes.fromhex(doc["root"]))
    _need(ok, check, f"{what} is not in the signed tree (line or audit path altered)")
    return leaf


def view_line(predicate: Mapping[str, Any], view: Mapping[str, Any], parse: Any = None) -> dict[str, Any]:
    """The view's own line, proven against the signed client root and parsed (by `parse`, default v2's)."""
    _need(
        view.get("_type") == CLIENT_VIEW_TYPE,
        "client-view",
        f"not a client view (_type {view.get('_type')!r})",
    )
    _need(view.get("day") == predicate["day"], "client-view", "the view's day is not the receipt's")
    leaf = _check_member(predicate["clients"], view.get("line") or {}, "client-line", "the client line")
    line = (parse or parse_client_line)(leaf, "client-line")
    _need(line["client"] == view.get("client"), "client-line", "the line belongs to another client")
    return line


def view_estimates(predicate: Mapping[str, Any], view: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The view's estimate lines, each proven against the signed estimate root, by task."""
    estimates = {}
    for item in view.get("estimates") or []:
        e_leaf = _check_member(
            predicate["teacher_equivalent"]["estimates"], item, "estimates", "an estimate line"
        )
        e = parse_estimate_line(e_leaf, predicate["day"])
        estimates[e["task"]] = e
    return estimates


def view_own(texts: Sequence[Any], client: str, what: str) -> list[dict[str, Any]]:
    """Canonical JSON lines of the view (rows or pair lines), each the client's own."""
    out = []
    for text in texts:
        row = _parse_line(str(text).encode("utf-8"), "client-rows", what)
        _need(row.get("client") == client, "client-rows", f"{what} of another client is in the view")
        out.append(row)
    return out


def view_indices_ok(predicate: Mapping[str, Any], rows_in: Sequence[Mapping[str, Any]]) -> None:
    indices = [int(r["index"]) for r in rows_in]
    _need(
        indices == sorted(set(indices)) and all(0 <= i < predicate["requests"]["size"] for i in indices),
        "client-rows",
        "row indices are not increasing within the tree",
    )


def view_totals_match(mine: Mapping[str, Any], line: Mapping[str, Any]) -> None:
    _need(
        canonical_json(_nonzero(mine)) == canonical_json(_nonzero(line["totals"])),
        "client-rows",
        f"your rows give {mine}, the signed line {line['totals']} (rows missing or altered?)",
    )


def check_client_view(
    predicate: Mapping[str, Any], view: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """A client's view against its signed predicate; returns (its line, the checks passed)."""
    line = view_line(predicate, view)
    checks = ["client-line"]
    estimates = view_estimates(predicate, view)
    checks.append("estimates")
    rows_in = view.get("rows")
    if rows_in is not None:
        rows = view_own([r["leaf"] for r in rows_in], line["client"], "a row")
        view_indices_ok(predicate, rows_in)
        totals, first = totals_from_rows(rows, estimates, predicate["teacher_equivalent"]["prices"])
        view_totals_match(totals.get(line["client"], empty_totals()), line)
        if rows:
            _need(
                line["salt"] == client_salt(predicate["day"], line["client"], first[line["client"]]),
                "client-rows",
                "the line's salt does not match your first request",
            )
        checks.append("client-rows")
    return line, checks


def rows_leaves(rows: Sequence[bytes]) -> list[bytes]:
    """Non-empty lines of a JSON-lines file's bytes."""
    return [line for line in rows if line.strip()]


__all__ = [
    "CLIENT_VIEW_TYPE",
    "PREDICATE_TYPE",
    "add",
    "check_client_view",
    "check_clients",
    "check_estimates",
    "check_rows",
    "client_leaf",
    "client_salt",
    "empty_totals",
    "make_client_view",
    "make_predicate",
    "sum_totals",
    "totals_from_rows",
]
