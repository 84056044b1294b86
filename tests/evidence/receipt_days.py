"""Receipts of every version signed on fixed input with a fixed key, for byte-for-byte and dispatch tests.

    from tests.evidence.receipt_days import KEY, signed_days
    days = signed_days()          # {"v1": Day, "v2": Day, "v3": Day, "v3-next": Day (chained to "v3")}
    verify_receipt(days["v3"].envelope, KEY.public_key(), **days["v3"].files())

Ed25519 signatures are deterministic, so the same code gives the same envelope bytes on every run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ratchet_stats import merkle
from ratchet_stats import teacher_equivalent as te
from ratchet_stats.canonical import canonical_json
from ratchet_stats.dsse import make_statement, sign_statement
from ratchet_stats.receipt import envelope_digest, v1, v2, v3
from ratchet_stats.receipt.common import client_salt

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
DAY, NEXT_DAY = "2026-02-01", "2026-02-02"
PRICES = te.prices_doc("openai/demo-teacher", 2.5e-6, 1e-5)


@dataclass
class Day:
    """One signed day: the envelope and the files an auditor holds beside it."""

    envelope: dict[str, Any]
    leaves: list[bytes]
    clients: list[bytes] = field(default_factory=list)
    estimates: list[bytes] = field(default_factory=list)
    pairs: list[bytes] = field(default_factory=list)

    def files(self) -> dict[str, Any]:
        """``verify_receipt``'s keyword arguments for every file of the day."""
        out: dict[str, Any] = {"leaves": self.leaves}
        if self.clients:
            out |= {"clients": self.clients, "estimates": self.estimates}
        if self.pairs:
            out["pairs"] = self.pairs
        return out

    def own_rows(self, client: str) -> list[dict[str, Any]]:
        """The client's ``{index, request_id, leaf}`` entries (what the gateway reads from rows.parquet)."""
        rows = [(i, json.loads(b), b) for i, b in enumerate(self.leaves)]
        return [
            {"index": i, "request_id": r["request_id"], "leaf": b.decode()}
            for i, r, b in rows
            if r["client"] == client
        ]


def request_rows(day: str, n: int) -> list[dict[str, Any]]:
    """`n` request rows of two clients: every third student-served, one failed; the next day all of task sql."""
    rows = []
    for i in range(n):
        student = i % 3 == 1
        cost = 0.00123 * (i + 1)
        rows.append(
            {
                "request_id": f"{day}-req-{i:03d}",
                "ts": f"{day}T00:00:{i:02d}.000000Z",
                "client": ("acme", "globex")[i % 2],
                "task": ("sql", "summarize")[i % 2 if i < 5 else 0] if day == DAY else "sql",
                "served_by": "student" if student else "teacher",
                "version": "v1-abc" if student else None,
                "prompt_tokens": 100 + i,
                "completion_tokens": 20 + 3 * i,
                "reasoning_tokens": 0,
                "teacher_cost_usd": 0.0 if student else cost,
                "actual_cost_usd": 0.00001 * (i + 1) if student else cost,
                "status_code": 200 if i != 4 else 500,
                "teacher_prompt_tokens": 110 + i,
            }
        )
    return rows


def pair_rows(day: str) -> list[dict[str, Any]]:
    """An audit (the teacher's answer) and a shadow call (the student's)."""
    common = {"status_code": 200}
    return [
        {
            **common,
            "request_id": f"{day}-req-001",
            "ts": f"{day}T00:01:00.000000Z",
            "client": "globex",
            "task": "summarize" if day == DAY else "sql",
            "pair_role": "audit",
            "pair_outcome": "agree",
            "prompt_tokens": 101,
            "served_by": "teacher",
            "version": None,
            "completion_tokens": 31,
            "teacher_cost_usd": 0.0004,
            "actual_cost_usd": 0.0004,
        },
        {
            **common,
            "request_id": f"{day}-req-002",
            "ts": f"{day}T00:01:01.000000Z",
            "client": "acme",
            "task": "sql",
            "pair_role": "shadow",
            "pair_outcome": "disagree",
            "prompt_tokens": 102,
            "served_by": "student",
            "version": "v1-abc",
            "completion_tokens": 25,
            "teacher_cost_usd": 0.0,
            "actual_cost_usd": 0.000002,
        },
    ]


def leaves_of(rows: list[dict[str, Any]], fields: tuple[str, ...]) -> list[bytes]:
    return [canonical_json({k: r[k] for k in fields}) for r in sorted(rows, key=lambda r: r["request_id"])]


def sign(predicate_type: str, predicate: Mapping[str, Any], subjects: list[dict[str, Any]]) -> dict[str, Any]:
    return sign_statement(make_statement(predicate_type, dict(predicate), subjects), KEY)


def v1_day() -> Day:
    leaves = leaves_of(request_rows(DAY, 7), v1.LEAF_FIELDS)
    clients, _ = v1.totals_from_rows(json.loads(b) for b in leaves)
    root = merkle.root(leaves).hex()
    predicate = v1.make_predicate(DAY, root, len(leaves), clients, None)
    return Day(
        sign(v1.PREDICATE_TYPE, predicate, [{"name": f"receipt:{DAY}", "digest": {"sha256": root}}]), leaves
    )


def v2_day() -> Day:
    leaves = leaves_of(request_rows(DAY, 7), v2.LEAF_FIELDS)
    rows = [json.loads(b) for b in leaves]
    student_tasks = {r["task"] for r in rows if te.is_estimated(r)}
    lines = te.day_estimates(DAY, te.request_answers(rows), {}, student_tasks, None)
    estimates = [canonical_json(line) for line in lines]
    totals, first = v2.totals_from_rows(rows, {line["task"]: line for line in lines}, PRICES)
    clients = [v2.client_leaf(c, client_salt(DAY, c, first[c]), t) for c, t in totals.items()]
    predicate = v2.make_predicate(
        DAY, merkle.root(leaves).hex(), len(leaves), clients, estimates, PRICES, None
    )
    envelope = sign(v2.PREDICATE_TYPE, predicate, v2.subjects(DAY, predicate))
    return Day(envelope, leaves, clients, estimates)


def v3_parts(day: str, previous: Day | None) -> tuple[Day, dict[str, Any]]:
    """A v3 day's files and its predicate (unsigned); `previous` is the day it chains to (estimates carried)."""
    leaves = leaves_of(request_rows(day, 7 if day == DAY else 5), v2.LEAF_FIELDS)
    rows = [json.loads(b) for b in leaves]
    pairs = v3.pair_order([canonical_json(p) for p in pair_rows(day)])
    pair_dicts = [json.loads(b) for b in pairs]
    student_tasks = {r["task"] for r in rows if te.is_estimated(r)} | ({"extract"} if day != DAY else set())
    carried = {json.loads(b)["task"]: json.loads(b) for b in previous.estimates} if previous else None
    lines = te.day_estimates(
        day, te.request_answers(rows), v3.audit_answers(pair_dicts), student_tasks, carried
    )
    estimates = [canonical_json(line) for line in lines]
    totals, first, tasks = v3.totals_from_rows(rows, pair_dicts, {x["task"]: x for x in lines}, PRICES)
    clients = [v3.client_leaf(c, client_salt(day, c, first[c]), tasks[c], t) for c, t in totals.items()]
    link = {"day": DAY, "digest": envelope_digest(previous.envelope)} if previous else None
    predicate = v3.make_predicate(
        day, merkle.root(leaves).hex(), len(leaves), clients, estimates, pairs, PRICES, link
    )
    return Day({}, leaves, clients, estimates, pairs), predicate


def v3_day(day: str, previous: Day | None) -> Day:
    out, predicate = v3_parts(day, previous)
    out.envelope = sign(v3.PREDICATE_TYPE, predicate, v3.subjects(day, predicate))
    return out


def signed_days() -> dict[str, Day]:
    first = v3_day(DAY, None)
    return {"v1": v1_day(), "v2": v2_day(), "v3": first, "v3-next": v3_day(NEXT_DAY, first)}
