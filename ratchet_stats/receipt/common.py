"""What every receipt version shares: the error, the format object, the request tree's proofs, line and tree checks.

A version module (``v1``, ``v2``, ``v3``) exports one :class:`ReceiptFormat`; ``ratchet_stats.receipt`` maps each
format's predicate type to it and verifies through that map. The helpers here are the ones two versions use (tree
and line checks; client lines, estimate lines and client views are v2's and v3's), so no version module reaches
into another's privates. The inclusion proof of one request row, the same in every version, is ``proof``; what a
client receives of a day (v2 on), ``client_view``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ratchet_stats import merkle
from ratchet_stats import teacher_equivalent as te
from ratchet_stats.canonical import canonical_json, digest, sha256_hex
from ratchet_stats.evidence import EvidenceError

TREE = "RFC 9162 SHA-256"
SERVED_BY = ("student", "teacher")


class ReceiptError(EvidenceError):
    """The receipt (or its proof, chain, lines or rows) does not verify; ``check`` names the failed check."""


# The format object ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditorFiles:
    """What an auditor gives beside the envelope (each None when not given): the request leaves, the client,
    estimate and pair lines (canonical JSON texts in tree order), and the previous receipt's estimate lines."""

    leaves: Sequence[bytes] | None = None
    clients: Sequence[bytes] | None = None
    estimates: Sequence[bytes] | None = None
    pairs: Sequence[bytes] | None = None
    prev_estimates: Sequence[bytes] | None = None


@dataclass(frozen=True)
class Previous:
    """The previous receipt, its signature and shape verified: its format and its predicate."""

    format: ReceiptFormat
    predicate: Mapping[str, Any]


@dataclass
class FilesReport:
    """What a format's ``check_files`` found: the checks passed, in order, and, where the files (or the signed
    predicate) give them, the overall totals and the client names."""

    checks: list[str] = field(default_factory=list)
    totals: dict[str, Any] | None = None
    clients: list[str] | None = None


@dataclass(frozen=True)
class ReceiptFormat:
    """One receipt version: everything the verifier dispatches on, keyed in the registry by ``predicate_type``.

    - ``check_shape(predicate, what)``: the predicate's shape (check ``predicate``), before anything reads it;
    - ``check_predicate(predicate)``: checks of the signed predicate on its own, after its shape and before the
      chain (v1: its totals add up); returns the names of the checks passed;
    - ``check_files(predicate, files, previous)``: the auditor's files against the signed roots;
    - ``check_estimates(predicate, lines)``: the estimate lines by task, checked against the signed estimate
      root, for chaining the next receipt's estimates; None when the version signs no estimate lines;
    - ``check_client_view(predicate, view)``: a client's view, returning (its line, the checks passed); None
      when the version has no client tree (a client then asks the auditor).
    """

    version: int
    predicate_type: str
    check_shape: Callable[[Any, str], None]
    check_predicate: Callable[[Mapping[str, Any]], list[str]]
    check_files: Callable[[Mapping[str, Any], AuditorFiles, Previous | None], FilesReport]
    check_estimates: Callable[[Mapping[str, Any], Sequence[bytes]], dict[str, dict[str, Any]]] | None = None
    check_client_view: (
        Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[dict[str, Any], list[str]]] | None
    ) = None


# Amounts and the chain link ------------------------------------------------------------------------------------
def micro(usd: float | int | None) -> int:
    """US dollars -> integer micro-dollars, rounded half to even (Python ``round``)."""
    return int(round(float(usd or 0.0) * 1_000_000))


def envelope_digest(envelope: Mapping[str, Any]) -> str:
    """The digest the next day's receipt chains to: SHA-256 of the canonical JSON of the envelope."""
    return digest(dict(envelope))


def sum_totals(
    entries: Iterable[Mapping[str, Any]], empty: dict[str, Any], cost_keys: Sequence[str]
) -> dict[str, Any]:
    """The TOTALS of several TOTALS (e.g. the overall totals from the per-client entries), into `empty` (the
    version's zero TOTALS): requests, served_by and the version's `cost_keys` add up."""
    out = empty
    for e in entries:
        out["requests"] += int(e["requests"])
        for k, v in e["served_by"].items():
            out["served_by"][k] = out["served_by"].get(k, 0) + int(v)
        for k in cost_keys:
            out[k] += int(e[k])
    return out


def client_salt(day: str, client: str, first_request_id: str) -> str:
    """A client line's salt (v2 on): ``SHA-256("ratchet receipt client salt" 0 day 0 client 0 first request_id)``.
    Only someone holding the client's rows can recompute it, so a sibling hash in a proof cannot be matched
    against guessed totals."""
    return sha256_hex(f"ratchet receipt client salt\0{day}\0{client}\0{first_request_id}".encode())


# Trees and lines -----------------------------------------------------------------------------------------------
def need(cond: bool, check: str, msg: str) -> None:
    """Fail closed: ``ReceiptError(check, msg)`` unless `cond`."""
    if not cond:
        raise ReceiptError(check, msg)


def is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def tree_doc(root_hex: str, size: int, order: str, fields: Sequence[str]) -> dict[str, Any]:
    """A signed tree's entry in a predicate: its root, size, hash, leaf order and leaf fields."""
    return {"root": root_hex, "size": size, "tree": TREE, "order": order, "leaf_fields": list(fields)}


def tree_ok(doc: Any) -> bool:
    """Whether `doc` has a tree's shape (root: 64 hex chars, size: a count)."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("root"), str)
        and len(doc["root"]) == 64
        and is_count(doc.get("size"))
    )


def check_tree(doc: Mapping[str, Any], leaves: Sequence[bytes], check: str, what: str) -> None:
    """`leaves` are all of the signed tree `doc`: its size and its root."""
    need(
        len(leaves) == doc["size"],
        check,
        f"{len(leaves)} {what} given, the receipt signs {doc['size']} ({what} dropped?)",
    )
    got = merkle.root(list(leaves)).hex()
    need(
        got == doc["root"],
        check,
        f"{what} give root {got}, the receipt signs {doc['root']} (one of the {what} was altered)",
    )


def parse_line(leaf: bytes, check: str, what: str) -> dict[str, Any]:
    """One line of a tree: a JSON object in canonical form."""
    try:
        obj = json.loads(leaf)
    except ValueError as exc:
        raise ReceiptError(check, f"{what} is not JSON ({exc})") from None
    need(isinstance(obj, dict) and canonical_json(obj) == leaf, check, f"{what} is not canonical JSON")
    return obj


def rows_of(leaves: Sequence[bytes]) -> list[dict[str, Any]]:
    return [json.loads(b) for b in leaves]


def check_sorted_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    ids = [r["request_id"] for r in rows]
    need(ids == sorted(ids), "rows", "rows are not sorted by request_id")


def nonzero(totals: Mapping[str, Any]) -> dict[str, Any]:
    """TOTALS without its zero ``served_by`` entries (so a missing and a zero count compare equal)."""
    return {**totals, "served_by": {k: v for k, v in totals["served_by"].items() if v}}


# Client lines (v2 on) ------------------------------------------------------------------------------------------
def parse_client_fields(leaf: bytes, check: str, fields: Sequence[str]) -> dict[str, Any]:
    """A client line with exactly `fields` (the version's), its client and salt text; the version checks the rest."""
    line = parse_line(leaf, check, "a client line")
    need(set(line) == set(fields), check, f"a client line must have exactly {list(fields)}")
    need(isinstance(line["client"], str) and isinstance(line["salt"], str), check, "client and salt are text")
    return line


def check_client_lines(
    day: str,
    totals: Mapping[str, Mapping[str, Any]],
    first: Mapping[str, str],
    clients: Mapping[str, Mapping[str, Any]],
) -> None:
    """The client lines are exactly the recomputed totals (and salts) of the clients the rows name."""
    need(
        set(totals) == set(clients),
        "rows",
        f"rows name clients {sorted(totals)}, the lines {sorted(clients)}",
    )
    for name, entry in totals.items():
        line = clients[name]
        need(
            canonical_json(nonzero(entry)) == canonical_json(nonzero(line["totals"])),
            "rows",
            f"client {name!r}: rows give {entry}, the receipt signs {line['totals']}",
        )
        need(
            line["salt"] == client_salt(day, name, first[name]),
            "rows",
            f"client {name!r}: salt does not match the client's rows",
        )


def check_line_names(lines: Sequence[Mapping[str, Any]], key: str, check: str, what: str) -> None:
    names = [line[key] for line in lines]
    need(names == sorted(set(names)), check, f"{what} are not sorted by {key} (or repeat one)")


# Estimate lines (v2 on) ----------------------------------------------------------------------------------------
def parse_estimate_line(leaf: bytes, day: str, check: str = "estimates") -> dict[str, Any]:
    """One estimate line (``ratchet_stats.teacher_equivalent``): its fields, parts and source rules."""
    line = parse_line(leaf, check, "an estimate line")
    need(
        set(line) == set(te.ESTIMATE_FIELDS), check, f"an estimate line must have {list(te.ESTIMATE_FIELDS)}"
    )
    task = line["task"]
    for part in ("from_requests", "from_audits"):
        p = line[part]
        need(
            isinstance(p, dict)
            and set(p) == {"answers", "completion_tokens"}
            and is_count(p["answers"])
            and is_count(p["completion_tokens"]),
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
    need(ok, check, f"task {task!r}: source {source!r} with day {when!r} and {k} answers is inconsistent")
    return line


def check_estimates(predicate: Mapping[str, Any], leaves: Sequence[bytes]) -> dict[str, dict[str, Any]]:
    """Every estimate line: root and size, canonical, well-formed (source rules), sorted by task."""
    check_tree(predicate["teacher_equivalent"]["estimates"], leaves, "estimates", "estimate lines")
    lines = [parse_estimate_line(b, predicate["day"]) for b in leaves]
    check_line_names(lines, "task", "estimates", "estimate lines")
    return {line["task"]: line for line in lines}


def check_day_estimates(
    estimates: Mapping[str, Mapping[str, Any]], part: str, answers: Mapping[str, tuple[int, int]]
) -> None:
    """Each day-source estimate line's `part` equals the answers recomputed from the day's rows, and every task
    with such answers has a day-source line."""
    for task, line in estimates.items():
        if line["source"] == "day":
            got = answers.get(task, (0, 0))
            want = (line[part]["answers"], line[part]["completion_tokens"])
            need(got == want, "estimates", f"task {task!r}: {part} recomputes to {got}, the line {want}")
    for task in answers:
        need(
            task in estimates and estimates[task]["source"] == "day",
            "estimates",
            f"task {task!r} has teacher answers that day but its estimate line is not source 'day'",
        )


def check_chained_estimates(
    estimates: Mapping[str, Mapping[str, Any]], prev_estimates: Mapping[str, Mapping[str, Any]], prev_day: str
) -> None:
    """Lines carried from the previous receipt carry its numbers; every previous line is carried forward."""
    for task, old in prev_estimates.items():
        new = estimates.get(task)
        need(
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
        need(
            same, "chain", f"task {task!r}: carried estimate {new} differs from the previous receipt's {old}"
        )
    for task, new in estimates.items():
        need(
            new["source"] != "previous" or task in prev_estimates,
            "chain",
            f"task {task!r}: source 'previous' but the previous receipt has no estimate for it",
        )


def check_client_and_estimate_lines(
    predicate: Mapping[str, Any],
    files: AuditorFiles,
    previous: Previous | None,
    check_clients: Callable[[Mapping[str, Any], Sequence[bytes]], dict[str, dict[str, Any]]],
    sum_totals: Callable[[Iterable[Mapping[str, Any]]], dict[str, Any]],
) -> tuple[FilesReport, dict[str, dict[str, Any]] | None, dict[str, dict[str, Any]] | None]:
    """The client lines (by the version's `check_clients`), the estimate lines and the estimates chained from
    the previous receipt, each when given: (report so far, client lines by name, estimate lines by task)."""
    report = FilesReport()
    lines, est = None, None
    if files.clients is not None:
        lines = check_clients(predicate, files.clients)
        report.totals = sum_totals(line["totals"] for line in lines.values())
        report.clients = sorted(lines)
        report.checks.append("clients")
    if files.estimates is not None:
        est = check_estimates(predicate, files.estimates)
        report.checks.append("estimates")
    if files.prev_estimates is not None:
        if est is None or previous is None:
            raise ReceiptError("chain", "chained estimates need the estimate lines and the previous receipt")
        if previous.format.check_estimates is None:
            raise ReceiptError(
                "chain",
                f"the previous receipt is v{previous.format.version}: it has no estimate lines to chain",
            )
        prev_est = previous.format.check_estimates(previous.predicate, files.prev_estimates)
        check_chained_estimates(est, prev_est, previous.predicate["day"])
        report.checks.append("chained-estimates")
    return report, lines, est
