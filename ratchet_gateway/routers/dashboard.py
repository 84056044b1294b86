"""The app owner's dashboard: ``GET /ratchet/dashboard`` (the page) and ``GET /ratchet/dashboard/data`` (its data).

For the calling client only (its API key, like every client route): its limits (requests and tokens per minute,
its budget, what it spent of it and how many requests were refused, ``ratchet_gateway.limits``), and per task: the stage and version the signed
manifest serves, the canary share and calibrated threshold, the certified lower bound read from the version's
certificate *after* its signature verifies with the gateway's trusted keys (else shown as unverified), the
student's share of the client's requests, and per day the client's actual spend against the teacher-equivalent
(the gap is the saving), with links to the evidence: the day's receipt view, the version's BOM and the public key.
Per task and day, too, the feedback the client sent (``ratchet_core.feedback``, from the control DB): items, and
how many of the student's and of the teacher's answers it called bad (the task's ``bad_when``, or a demonstration
the answer disagreed with).

Numbers come from the sealed lake segments (what receipts are built from), so they trail the live traffic by at
most one segment (``RATCHET_SEGMENT_SECONDS``). The page and its script are static files served from this package
(no CDN, no third-party script, a strict Content-Security-Policy that allows nothing else); the script asks for the key (or reads it from the URL fragment ``#key=...``,
which browsers never send to a server) and calls the data route with ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from starlette.responses import FileResponse, Response

from ratchet_core.names import is_valid
from ratchet_gateway.deps import ClientDep, GatewayDep
from ratchet_gateway.responses import PAGE_HEADERS, error_docs, json_response, ratchet_headers
from ratchet_gateway.state import Gateway

router = APIRouter(prefix="/ratchet", tags=["dashboard"])

STATIC = Path(__file__).resolve().parent.parent / "dashboard_static"
_FILES = {"app.js": "text/javascript", "app.css": "text/css"}


@router.get("/dashboard", summary="The app owner's dashboard page (static; its data needs the client key)")
async def dashboard_page() -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=_page_headers())


@router.get("/dashboard/static/{name}", include_in_schema=False)
async def dashboard_static(name: str) -> Response:
    if name not in _FILES:  # a fixed list: no path from the URL reaches the filesystem
        return Response(status_code=404, headers=_page_headers())
    return FileResponse(STATIC / name, media_type=_FILES[name], headers=_page_headers())


def _page_headers() -> dict[str, str]:
    """A page's headers: the strict CSP and its kin (``responses.PAGE_HEADERS``) and the x-ratchet-* ones."""
    return {**ratchet_headers(), **PAGE_HEADERS}


@router.get(
    "/dashboard/data",
    summary="The caller's dashboard: per task stage, version, certified bound, student share, spend per day",
    responses=error_docs(401),
)
async def dashboard_data(gw: GatewayDep, client: ClientDep) -> Response:
    return json_response(await asyncio.to_thread(build, gw, client))


def build(gw: Gateway, client: str) -> dict[str, Any]:
    daily = _daily(gw, client)
    feedback = _feedback(gw, client)
    tasks = sorted({r["task"] for r in daily} | set(gw.manifest.tasks) | {r["task"] for r in feedback})
    out = []
    for task in tasks:
        release = gw.manifest.task(task)
        rows = [r for r in daily if r["task"] == task]
        n = sum(r["requests"] for r in rows)
        student = sum(r["student"] for r in rows)
        bound, verified = _certified_bound(gw, release.version, task) if release.version else (None, False)
        out.append(
            {
                "task": task,
                "stage": release.stage,
                "version": release.version or None,
                "canary_percent": release.canary_percent,
                "threshold": release.threshold,
                "certified_bound": bound,
                "bound_verified": verified,
                "requests": n,
                "student_share": (student / n) if n else 0.0,
                "teacher_equivalent_usd": sum(r["teacher_equivalent_usd"] for r in rows),
                "actual_usd": sum(r["actual_usd"] for r in rows),
                "saved_usd": sum(r["teacher_equivalent_usd"] - r["actual_usd"] for r in rows),
                "days": rows,
                "feedback": [r for r in feedback if r["task"] == task],
                "evidence": _evidence(gw, release.version, [r["day"] for r in rows]),
            }
        )
    return {
        "client": client,
        "manifest_sequence": _sequence(gw),
        "limits": gw.limits.view(client),
        "tasks": out,
    }


def _feedback(gw: Gateway, client: str) -> list[dict[str, Any]]:
    """Per task and day (the request's day, else the day it was received): the client's feedback items, the
    demonstrations among them, and per model the answers with a verdict and the bad ones."""
    from ratchet_core import feedback
    from ratchet_core.control_db import feedback as table

    if gw.engine is None:
        return []
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in feedback.rows(gw.engine, table.c.client == client):
        if not r["task"]:
            continue
        day = r["request_day"] or r["received_at"][:10]
        d = out.setdefault(
            (r["task"], day),
            {"task": r["task"], "day": day, "items": 0, "pending": 0, "demonstrations": 0}
            | {f"{w}_{k}": 0 for w in ("student", "teacher") for k in ("rated", "bad")},
        )
        d["items"] += 1
        d["pending"] += r["state"] == "pending"
        d["demonstrations"] += r["kind"] == "demonstration" and r["state"] == "recorded"
        bad = feedback.verdict(r, gw.manifest.policies.get(r["task"]))
        if bad is not None and r["served_by"] in ("student", "teacher"):
            d[f"{r['served_by']}_rated"] += 1
            d[f"{r['served_by']}_bad"] += bad
    return [out[k] for k in sorted(out)]


def _sequence(gw: Gateway) -> int:
    return gw.manifest.sequence


def _daily(gw: Gateway, client: str) -> list[dict[str, Any]]:
    """Per task and day: requests, student-served, teacher-equivalent and actual dollars (sealed segments)."""
    import duckdb

    from ratchet_core.lake import Lake

    lake = Lake(gw.settings.lake_root)
    con = duckdb.connect()
    out: list[dict[str, Any]] = []
    try:
        for day in lake.days():
            files = [lake.path(s.rel) for s in lake.segments(day)]
            if not files:
                continue
            rows = con.execute(
                "SELECT task, count(*), count(*) FILTER (WHERE served_by = 'student'), "
                "coalesce(sum(teacher_cost_usd), 0), coalesce(sum(actual_cost_usd), 0) "
                "FROM read_parquet(?, union_by_name = true) WHERE client = ? GROUP BY task ORDER BY task",
                [files, client],
            ).fetchall()
            for task, n, student, te, actual in rows:
                out.append(
                    {
                        "task": task,
                        "day": day,
                        "requests": int(n),
                        "student": int(student),
                        "teacher_equivalent_usd": float(te),
                        "actual_usd": float(actual),
                    }
                )
    finally:
        con.close()
    return out


def _certified_bound(gw: Gateway, version: str, task: str) -> tuple[float | None, bool]:
    """The task's certified lower bound from the version's certificate, only if its signature verifies."""
    from ratchet_stats.dsse import verify_envelope

    if not is_valid("version", version):  # signed before the name rule: it names no artifact
        return None, False
    path = gw.artifacts.certificate(version)
    if not path.exists() or not gw.public_keys:
        return None, False
    try:
        payload = verify_envelope(path.read_bytes(), gw.public_keys, payload_types=(_payload_type(path),))
        section = json.loads(payload)["predicate"]["tasks"][task]
        return float(section["lower_bound"]), True
    except Exception:  # any failed check: the page says unverified, `ratchet verify certificate` says why
        return None, False


def _payload_type(path: Path) -> str:
    return json.loads(path.read_bytes())["payloadType"]


def _evidence(gw: Gateway, version: str, days: list[str]) -> list[dict[str, str]]:
    links = [
        {"label": f"receipt {d}", "href": f"/ratchet/receipts/{d}"}
        for d in days
        if gw.artifacts.receipt_envelope(d).exists()
    ]
    if version and is_valid("version", version):
        links.append({"label": f"BOM {version}", "href": f"/ratchet/boms/{version}"})
    links.append({"label": "public key", "href": "/ratchet/public-key"})
    return links
