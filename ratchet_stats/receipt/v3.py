"""Receipt v3 (``PREDICATE_TYPE``, what the night signs now): v2 plus the day's audit and shadow pair calls in
what was paid.

A pair row is the other model's answer to a request, fetched off the request path (``ratchet_core.schema``): the
teacher's answer to an audited student-served request (``audit``) or the student's answer to a shadowed
teacher-served one (``shadow``). Both are spend the request leaves do not hold, so a v2 receipt's "paid" left
them out and its savings were overstated on days with audits. v3 commits them in a fourth tree and counts them::

    predicate = v2 predicate + {"pairs": {"root", "size", "tree", "order": "request_id, leaf",
                                          "leaf_fields": PAIR_LEAF_FIELDS}}

- pair leaves (``pairs.jsonl`` beside the receipt, ``PAIRS_FILE``): ``canonical_json`` of each pair row's
  ``PAIR_LEAF_FIELDS`` (``ts`` as ISO 8601 UTC text), sorted by (request_id, leaf bytes);
- client lines: ``{"client", "salt", "tasks", "totals": TOTALS}``, TOTALS = v2's plus ``pairs`` (count) and
  ``pair_cost_micro_usd`` (sum of ``micro(actual_cost_usd)`` of the client's pair rows: the teacher's price on
  audit pairs, the student's on shadow pairs); ``actual_cost_micro_usd`` (paid) = the request rows' actual cost +
  ``pair_cost_micro_usd``, so ``saved = teacher-equivalent - paid`` subtracts the pairs. ``tasks``: the sorted
  tasks of the client's estimated (student-served, 200) rows, whose estimate lines its totals used, so a client
  view can carry them without reading the client's rows. The salt's first request_id is the least over the
  client's request and pair rows (a client may have only pairs that day);
- the estimate lines' ``from_audits`` are recomputed from the pair leaves (v2 could not).

v3 is v2 plus the pairs, so it builds on ``v2``'s public functions (its predicate, subjects, TOTALS and their
checks) and adds the pair tree and the pair amounts; what both share otherwise is in ``common``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ratchet_stats import merkle
from ratchet_stats import teacher_equivalent as te
from ratchet_stats.canonical import canonical_json
from ratchet_stats.receipt import v2
from ratchet_stats.receipt.client_view import (
    proven_view,
    view_estimates,
    view_indices_ok,
    view_line,
    view_own,
    view_totals_match,
)
from ratchet_stats.receipt.common import (
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
    parse_line,
    rows_of,
    tree_doc,
    tree_ok,
)

PREDICATE_TYPE = "https://ratchet.dev/receipt/v3"
PAIRS_FILE = "pairs.jsonl"
PAIR_LEAF_FIELDS = (
    "request_id",
    "ts",
    "client",
    "task",
    "pair_role",
    "pair_outcome",
    "served_by",
    "version",
    "prompt_tokens",
    "completion_tokens",
    "status_code",
    "teacher_cost_usd",
    "actual_cost_usd",
)
CLIENT_FIELDS = ("client", "salt", "tasks", "totals")
PAIR_KEYS = ("pairs", "pair_cost_micro_usd")


# Building ------------------------------------------------------------------------------------------------------
def empty_totals() -> dict[str, Any]:
    return {**v2.empty_totals(), "pairs": 0, "pair_cost_micro_usd": 0}


def add_pairs(totals: dict[str, Any], n: int, cost: int) -> None:
    """Add `n` pair calls costing `cost` micro-USD to TOTALS in place: paid goes up, saved down."""
    totals["pairs"] += n
    totals["pair_cost_micro_usd"] += cost
    totals["actual_cost_micro_usd"] += cost
    totals["saved_micro_usd"] -= cost


def sum_totals(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    entries = list(entries)
    out = {**v2.sum_totals(entries), "pairs": 0, "pair_cost_micro_usd": 0}
    for e in entries:
        for k in PAIR_KEYS:
            out[k] += int(e.get(k, 0))
    return out


def client_leaf(client: str, salt: str, tasks: Iterable[str], totals: Mapping[str, Any]) -> bytes:
    return canonical_json(
        {"client": client, "salt": salt, "tasks": sorted(set(tasks)), "totals": dict(totals)}
    )


def pair_order(leaves: Iterable[bytes]) -> list[bytes]:
    """Pair leaves in tree order: by request_id, then by the leaf's bytes."""
    return sorted(leaves, key=lambda b: (json.loads(b)["request_id"] or "", b))


def make_predicate(
    day: str,
    requests_root: str,
    size: int,
    client_leaves: Sequence[bytes],
    estimate_leaves: Sequence[bytes],
    pair_leaves: Sequence[bytes],
    prices: Mapping[str, Any],
    previous: Mapping[str, str] | None,
) -> dict[str, Any]:
    leaves = list(pair_leaves)
    return make_predicate_from_root(
        day,
        requests_root,
        size,
        client_leaves,
        estimate_leaves,
        merkle.root(leaves).hex(),
        len(leaves),
        prices,
        previous,
    )


def make_predicate_from_root(
    day: str,
    requests_root: str,
    size: int,
    client_leaves: Sequence[bytes],
    estimate_leaves: Sequence[bytes],
    pairs_root: str,
    pairs_size: int,
    prices: Mapping[str, Any],
    previous: Mapping[str, str] | None,
) -> dict[str, Any]:
    """``make_predicate`` with the pair tree given as its (root hex, size), computed while the pair lines
    streamed past (``ratchet_assets.night.receipts``), so a day's million pair lines need not be held."""
    p = v2.make_predicate(day, requests_root, size, client_leaves, estimate_leaves, prices, previous)
    p["clients"]["leaf_fields"] = list(CLIENT_FIELDS)
    p["pairs"] = tree_doc(pairs_root, pairs_size, "request_id, leaf", PAIR_LEAF_FIELDS)
    return p


def subjects(day: str, predicate: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        *v2.subjects(day, predicate),
        {"name": f"receipt-pairs:{day}", "digest": {"sha256": predicate["pairs"]["root"]}},
    ]


def is_audit_answer(pair: Mapping[str, Any]) -> bool:
    """A pair row that counts towards its task's ``from_audits`` (the teacher answered, 200, not an error)."""
    return (
        pair.get("pair_role") == "audit"
        and (pair.get("served_by") or "teacher") != "student"
        and int(pair.get("status_code") or 0) == 200
        and int(pair.get("completion_tokens") or 0) > 0
        and pair.get("pair_outcome") not in (None, "error")
    )


def audit_answers(pairs: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for p in pairs:
        if is_audit_answer(p):
            k, c = out.get(str(p["task"]), (0, 0))
            out[str(p["task"])] = (k + 1, c + int(p["completion_tokens"]))
    return out


def totals_from_rows(
    rows: Iterable[Mapping[str, Any]],
    pairs: Iterable[Mapping[str, Any]],
    estimates: Mapping[str, Mapping[str, Any]],
    prices: Mapping[str, Any],
) -> tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, list[str]]]:
    """(per-client TOTALS, per-client least request_id, per-client estimated tasks) by the signed method."""
    rows = list(rows)
    base, first = v2.totals_from_rows(rows, estimates, prices)
    clients = {name: {**t, "pairs": 0, "pair_cost_micro_usd": 0} for name, t in base.items()}
    tasks: dict[str, set[str]] = {name: set() for name in clients}
    for row in rows:
        if te.is_estimated(row):
            tasks[str(row["client"])].add(str(row["task"]))
    for p in pairs:
        name = str(p["client"])
        add_pairs(clients.setdefault(name, empty_totals()), 1, micro(p.get("actual_cost_usd")))
        tasks.setdefault(name, set())
        rid = str(p["request_id"])
        if name not in first or rid < first[name]:
            first[name] = rid
    return dict(sorted(clients.items())), first, {k: sorted(v) for k, v in tasks.items()}


# Verification --------------------------------------------------------------------------------------------------
def check_shape(p: Any, what: str) -> None:
    v2.check_shape(p, what)
    need(tree_ok(p.get("pairs")), "predicate", f"{what}: pairs must be a tree (root, size)")


def check_totals_entry(name: str, e: Any, check: str) -> None:
    """One v3 TOTALS adds up by itself (v2's rules, paid including the pairs)."""
    need(
        isinstance(e, dict) and all(is_count(e.get(k)) for k in PAIR_KEYS),
        check,
        f"client {name!r}: pairs and pair_cost_micro_usd must be counts",
    )
    v2.check_totals_entry(name, {k: v for k, v in e.items() if k not in PAIR_KEYS}, check)
    need(
        e["pair_cost_micro_usd"] <= e["actual_cost_micro_usd"],
        check,
        f"client {name!r}: the pairs cost more than all that was paid",
    )


def parse_client_line(leaf: bytes, check: str = "clients") -> dict[str, Any]:
    line = parse_client_fields(leaf, check, CLIENT_FIELDS)
    tasks = line["tasks"]
    need(
        isinstance(tasks, list) and all(isinstance(t, str) for t in tasks) and tasks == sorted(set(tasks)),
        check,
        f"client {line['client']!r}: tasks must be sorted distinct names",
    )
    check_totals_entry(line["client"], line["totals"], check)
    return line


def check_clients(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> dict[str, dict[str, Any]]:
    """Every client line: root and size, canonical and well-formed, sorted; they count every request and pair."""
    check_tree(predicate["clients"], leaves, "clients", "client lines")
    lines = [parse_client_line(b) for b in leaves]
    check_line_names(lines, "client", "clients", "client lines")
    for key, tree in (("requests", "requests"), ("pairs", "pairs")):
        total = sum(line["totals"][key] for line in lines)
        need(
            total == predicate[tree]["size"],
            "clients",
            f"client lines count {total} {key}, the tree has {predicate[tree]['size']}",
        )
    return {line["client"]: line for line in lines}


def check_pairs(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> list[dict[str, Any]]:
    """The pair leaves give the signed pair root and size, canonical, in tree order."""
    check_tree(predicate["pairs"], leaves, "pairs", "pair lines")
    pairs = [parse_line(b, "pairs", "a pair line") for b in leaves]
    need(
        all(set(p) == set(PAIR_LEAF_FIELDS) for p in pairs),
        "pairs",
        f"a pair line must have exactly {list(PAIR_LEAF_FIELDS)}",
    )
    need(list(leaves) == pair_order(leaves), "pairs", "pair lines are not sorted by (request_id, line)")
    return pairs


def check_rows(
    predicate: Mapping[str, Any],
    leaves: Sequence[bytes],
    pair_leaves: Sequence[bytes],
    clients: Mapping[str, Mapping[str, Any]],
    estimates: Mapping[str, Mapping[str, Any]],
) -> None:
    """The request rows and pair lines give both signed roots, every client line (totals, tasks, salt) and both
    parts of every day-source estimate."""
    check_tree(predicate["requests"], leaves, "rows", "rows")
    pairs = check_pairs(predicate, pair_leaves)
    rows = rows_of(leaves)
    check_sorted_rows(rows)
    totals, first, tasks = totals_from_rows(rows, pairs, estimates, predicate["teacher_equivalent"]["prices"])
    check_client_lines(predicate["day"], totals, first, clients)
    for name in totals:
        need(clients[name]["tasks"] == tasks[name], "rows", f"client {name!r}: rows give tasks {tasks[name]}")
    check_day_estimates(estimates, "from_requests", te.request_answers(rows))
    check_day_estimates(estimates, "from_audits", audit_answers(pairs))


# The client view -----------------------------------------------------------------------------------------------
def make_client_view(
    envelope: Mapping[str, Any],
    day: str,
    client: str,
    client_leaves: Sequence[bytes],
    estimate_leaves: Sequence[bytes],
    rows: Sequence[Mapping[str, Any]] | None = None,
    pairs: Sequence[bytes] | None = None,
) -> dict[str, Any] | None:
    """What `client` receives: the envelope, its own line proven against the client root and the estimate lines
    of its line's ``tasks`` (each proven), from the small files alone; with `rows` (its ``{index, request_id,
    leaf}`` entries) and `pairs` (its pair lines) also those, which must recompute the line. None: no line."""
    view = proven_view(envelope, day, client, client_leaves, estimate_leaves, lambda line: line["tasks"])
    if view is not None and rows is not None:
        view["rows"] = [dict(r) for r in rows]
        view["pairs"] = [b.decode("utf-8") for b in pairs or []]
    return view


def check_client_view(
    predicate: Mapping[str, Any], view: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """A client's v3 view against its signed predicate; returns (its line, the checks passed)."""
    line = view_line(predicate, view, parse_client_line)
    estimates = view_estimates(predicate, view)
    missing = sorted(set(line["tasks"]) - set(estimates))
    need(not missing, "estimates", f"the estimate lines of tasks {missing} (named by your line) are missing")
    checks = ["client-line", "estimates"]
    rows_in = view.get("rows")
    if rows_in is not None:
        name = line["client"]
        rows = view_own([r["leaf"] for r in rows_in], name, "a row")
        pairs = view_own(view.get("pairs") or [], name, "a pair line")
        view_indices_ok(predicate, rows_in)
        totals, first, tasks = totals_from_rows(
            rows, pairs, estimates, predicate["teacher_equivalent"]["prices"]
        )
        view_totals_match(totals.get(name, empty_totals()), line)
        need(tasks.get(name, []) == line["tasks"], "client-rows", "your rows give other tasks")
        if name in first:
            need(
                line["salt"] == client_salt(predicate["day"], name, first[name]),
                "client-rows",
                "the line's salt does not match your first request",
            )
        checks.append("client-rows")
    return line, checks


def check_predicate(predicate: Mapping[str, Any]) -> list[str]:
    """Nothing beyond the shape: v3 signs roots, whose lines ``check_files`` checks."""
    return []


def check_files(predicate: Mapping[str, Any], files: AuditorFiles, previous: Previous | None) -> FilesReport:
    """The client and estimate lines, the estimates chained from the previous receipt, the pair lines, then the
    rows (which need all the lines), each when given."""
    report, lines, est = check_client_and_estimate_lines(
        predicate, files, previous, check_clients, sum_totals
    )
    if files.pairs is not None:
        check_pairs(predicate, files.pairs)
        report.checks.append("pairs")
    if files.leaves is not None:
        if lines is None or est is None or files.pairs is None:
            raise ReceiptError(
                "rows",
                "a v3 receipt's rows are checked against its client, estimate and pair lines: give them",
            )
        check_rows(predicate, files.leaves, files.pairs, lines, est)
        report.checks.append("rows")
    return report


FORMAT = ReceiptFormat(
    version=3,
    predicate_type=PREDICATE_TYPE,
    check_shape=check_shape,
    check_predicate=check_predicate,
    check_files=check_files,
    check_estimates=check_estimates,
    check_client_view=check_client_view,
)
