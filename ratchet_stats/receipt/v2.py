"""Receipt v2 (``PREDICATE_TYPE``): teacher-equivalent costs and per-client privacy; signed before v3, still verified.

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

- request leaves: ``canonical_json`` of each request row's ``LEAF_FIELDS`` (v1's plus ``teacher_prompt_tokens``,
  the prompt counted with the teacher's tokenizer);
- client leaves (``clients.jsonl`` beside the receipt), sorted by client: ``{"client", "salt", "totals": TOTALS}``
  with ``TOTALS = {requests, served_by, teacher_cost_micro_usd = measured + estimated,
  teacher_cost_measured_micro_usd, teacher_cost_estimated_micro_usd, actual_cost_micro_usd, saved_micro_usd}``.
  ``salt`` = ``common.client_salt(day, client, first request_id)``: only someone holding the client's rows can
  recompute it, so a sibling hash in a proof cannot be matched against guessed totals;
- estimate leaves (``estimates.jsonl``), sorted by task: ``ratchet_stats.teacher_equivalent`` lines.

An auditor holding the files verifies the whole (``ratchet_stats.receipt.verify_receipt`` with the client and
estimate lines and the rows). A client receives a **client view** (``client_view.CLIENT_VIEW_TYPE``): the signed
envelope, its own line with an inclusion proof against the clients root, the estimate lines of the tasks it used
(each proven), and its own request leaves, which must recompute its line (``verify_client_view``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ratchet_stats import merkle
from ratchet_stats import teacher_equivalent as te
from ratchet_stats.canonical import canonical_json
from ratchet_stats.receipt import common, v1
from ratchet_stats.receipt.client_view import (
    proven_view,
    view_estimates,
    view_indices_ok,
    view_line,
    view_own,
    view_totals_match,
)
from ratchet_stats.receipt.common import (
    SERVED_BY,
    AuditorFiles,
    FilesReport,
    Previous,
    ReceiptError,
    ReceiptFormat,
    check_client_and_estimate_lines,
    check_client_lines,
    check_day_estimates,
    check_estimates,
    check_line_names,
    check_sorted_rows,
    check_tree,
    client_salt,
    is_count,
    micro,
    need,
    parse_client_fields,
    rows_of,
    tree_doc,
    tree_ok,
)

PREDICATE_TYPE = "https://ratchet.dev/receipt/v2"
LEAF_FIELDS = (*v1.LEAF_FIELDS, "teacher_prompt_tokens")
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
    return common.sum_totals(entries, empty_totals(), COST_KEYS)


def client_leaf(client: str, salt: str, totals: Mapping[str, Any]) -> bytes:
    return canonical_json({"client": client, "salt": salt, "totals": dict(totals)})


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
        "requests": tree_doc(requests_root, size, "request_id", LEAF_FIELDS),
        "clients": tree_doc(
            merkle.root(list(client_leaves)).hex(), len(client_leaves), "client", CLIENT_FIELDS
        ),
        "teacher_equivalent": {
            "method": te.METHOD,
            "rule": te.RULE,
            "prices": dict(prices),
            "estimated_fields": ESTIMATED_FIELDS,
            "estimates": tree_doc(
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
def check_shape(p: Any, what: str) -> None:
    """The v2 predicate's shape (check ``predicate``)."""

    def shape(cond: bool, msg: str) -> None:
        need(cond, "predicate", f"{what}: {msg}")

    shape(isinstance(p, dict), "predicate is not an object")
    shape(isinstance(p.get("day"), str) and len(p["day"]) == 10, "day must be YYYY-MM-DD")
    for name in ("requests", "clients"):
        shape(tree_ok(p.get(name)), f"{name} must be a tree (root: 64 hex chars, size: a count)")
    teq = p.get("teacher_equivalent")
    shape(
        isinstance(teq, dict) and teq.get("method") == te.METHOD,
        f"teacher_equivalent.method must be {te.METHOD}",
    )
    prices = teq.get("prices")
    shape(
        isinstance(prices, dict)
        and all(
            isinstance(prices.get(k), float | int) and prices[k] >= 0
            for k in ("input_usd_per_token", "output_usd_per_token")
        ),
        "teacher_equivalent.prices must hold input/output_usd_per_token",
    )
    shape(tree_ok(teq.get("estimates")), "teacher_equivalent.estimates must be a tree")
    shape("totals" not in p and "clients" in p and "root" in p["clients"], "v2 signs no plain totals")
    prev = p.get("previous")
    shape(
        prev is None or (isinstance(prev, dict) and {"day", "digest"} <= set(prev)), "previous is malformed"
    )


def check_totals_entry(name: str, e: Any, check: str) -> None:
    """One TOTALS adds up by itself."""
    need(
        isinstance(e, dict)
        and is_count(e.get("requests"))
        and isinstance(e.get("served_by"), dict)
        and all(is_count(v) for v in e["served_by"].values())
        and all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool) for k in COST_KEYS)
        and set(e) == {"requests", "served_by", *COST_KEYS},
        check,
        f"client {name!r}: totals are malformed",
    )
    need(sum(e["served_by"].values()) == e["requests"], check, f"client {name!r}: served_by does not add up")
    need(
        e["teacher_cost_measured_micro_usd"] + e["teacher_cost_estimated_micro_usd"]
        == e["teacher_cost_micro_usd"],
        check,
        f"client {name!r}: teacher cost != measured + estimated",
    )
    need(
        e["teacher_cost_micro_usd"] - e["actual_cost_micro_usd"] == e["saved_micro_usd"],
        check,
        f"client {name!r}: saved != teacher cost - actual cost",
    )


def parse_client_line(leaf: bytes, check: str = "clients") -> dict[str, Any]:
    line = parse_client_fields(leaf, check, CLIENT_FIELDS)
    check_totals_entry(line["client"], line["totals"], check)
    return line


def check_clients(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> dict[str, dict[str, Any]]:
    """Every client line: root and size, canonical and well-formed, sorted; they count every request."""
    check_tree(predicate["clients"], leaves, "clients", "client lines")
    lines = [parse_client_line(b) for b in leaves]
    check_line_names(lines, "client", "clients", "client lines")
    total = sum(line["totals"]["requests"] for line in lines)
    need(
        total == predicate["requests"]["size"],
        "clients",
        f"client lines count {total} requests, the tree has {predicate['requests']['size']}",
    )
    return {line["client"]: line for line in lines}


def check_rows(
    predicate: Mapping[str, Any],
    leaves: Sequence[bytes],
    clients: Mapping[str, Mapping[str, Any]],
    estimates: Mapping[str, Mapping[str, Any]],
) -> None:
    """The full rows give the signed request root, every client line (totals and salt) and every day-source
    estimate's request part."""
    check_tree(predicate["requests"], leaves, "rows", "rows")
    rows = rows_of(leaves)
    check_sorted_rows(rows)
    prices = predicate["teacher_equivalent"]["prices"]
    totals, first = totals_from_rows(rows, estimates, prices)
    check_client_lines(predicate["day"], totals, first, clients)
    check_day_estimates(estimates, "from_requests", te.request_answers(rows))


def check_predicate(predicate: Mapping[str, Any]) -> list[str]:
    """Nothing beyond the shape: v2 signs roots, whose lines ``check_files`` checks."""
    return []


def check_files(predicate: Mapping[str, Any], files: AuditorFiles, previous: Previous | None) -> FilesReport:
    """The client and estimate lines, the estimates chained from the previous receipt, then the rows (which need
    the lines), each when given."""
    report, lines, est = check_client_and_estimate_lines(
        predicate, files, previous, check_clients, sum_totals
    )
    if files.leaves is not None:
        if lines is None or est is None:
            raise ReceiptError(
                "rows", "a v2 receipt's rows are checked against its client and estimate lines: give them"
            )
        check_rows(predicate, files.leaves, lines, est)
        report.checks.append("rows")
    return report


# The client view -----------------------------------------------------------------------------------------------
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
    tasks = {str(r["task"]) for r in (json.loads(row["leaf"]) for row in rows) if te.is_estimated(r)}
    view = proven_view(envelope, day, client, client_leaves, estimate_leaves, lambda _line: tasks)
    if view is not None:
        view["rows"] = [dict(r) for r in rows]
    return view


def check_client_view(
    predicate: Mapping[str, Any], view: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """A client's view against its signed predicate; returns (its line, the checks passed)."""
    line = view_line(predicate, view, parse_client_line)
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
            need(
                line["salt"] == client_salt(predicate["day"], line["client"], first[line["client"]]),
                "client-rows",
                "the line's salt does not match your first request",
            )
        checks.append("client-rows")
    return line, checks


FORMAT = ReceiptFormat(
    version=2,
    predicate_type=PREDICATE_TYPE,
    check_shape=check_shape,
    check_predicate=check_predicate,
    check_files=check_files,
    check_estimates=check_estimates,
    check_client_view=check_client_view,
)
