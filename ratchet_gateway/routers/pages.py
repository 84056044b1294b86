"""The gateway's own web pages beside the dashboard: the landing page ``GET /`` and Scout's page ``GET /ratchet/scout``.

- ``/`` says what this gateway serves. Without a key it shows only what any visitor may see: the APIs (read from
  ``/openapi.json`` by the page), and links to the dashboard, Scout's page, the OpenAPI document, the public key
  and the health checks. Task names and versions may be a tenant's business, so they come from
  ``GET /ratchet/serving``, which needs a client key: per task the stage the signed manifest publishes, the stage
  the gateway applies (pins and switches narrow it to the teacher), the version, the live version a rollout runs
  beside, the canary share and threshold; the model names; and the evidence this gateway serves (the days with a
  signed receipt, the versions with a signed BOM).
- ``/ratchet/scout`` runs Scout's team (``ratchet_agents.scout``: planner, one researcher per subject, writer) in
  the browser, with the user's key, as an outside client: every step is a ``POST /v1/chat/completions`` to this
  gateway under the agent's task, so the page shows who served each step (``x-ratchet-served-by``) and its request
  id, and assembles the same report the ``ratchet scout`` command files. The gateway sits below the agents in the
  layers (ARCHITECTURE.md "Layers"), so it never runs them; the page's script is the loop, and what the agents
  say (system prompts, answer schemas, the search tool, the corpus) comes from ``GET /ratchet/scout/team``, built
  from ``ratchet_core.workloads.research``, the same objects Scout's Python team sends. The page keeps the report
  in the browser (Save); filing through the effect gate is the command's, which reaches the gate.

Both pages are static files of this package (``pages_static``; no CDN, no third-party script, no inline script or
style), sent with a strict Content-Security-Policy, ``frame-ancestors 'none'`` and ``nosniff``. The key stays in
the browser: typed in, or read once from the URL fragment ``#key=...`` (never sent to a server), kept in
``sessionStorage`` and sent only as ``Authorization: Bearer`` to this origin. Every name the pages show is written
as text, never as markup.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from starlette.responses import FileResponse, HTMLResponse, Response

from ratchet_core.names import is_valid
from ratchet_core.workloads.research import (
    CORPUS,
    RESEARCH_PLAN,
    RESEARCH_SEARCH,
    RESEARCH_WRITE,
    SEARCH_TOOL,
)
from ratchet_gateway.deps import ClientDep, GatewayDep
from ratchet_gateway.responses import PAGE_HEADERS, error_docs, json_response, ratchet_headers
from ratchet_gateway.state import Gateway

router = APIRouter(tags=["pages"])

STATIC = Path(__file__).resolve().parent.parent / "pages_static"
_FILES = {
    "pages.css": "text/css",
    "common.js": "text/javascript",
    "landing.js": "text/javascript",
    "scout.js": "text/javascript",
}


def page_headers() -> dict[str, str]:
    """A page's headers: the strict CSP and its kin (``responses.PAGE_HEADERS``, as the dashboard's) and the
    x-ratchet-* ones (nosniff among them)."""
    return {**ratchet_headers(), **PAGE_HEADERS}


def _page(name: str) -> Response:
    return FileResponse(STATIC / name, media_type="text/html", headers=page_headers())


@router.get(
    "/",
    response_class=HTMLResponse,
    summary="The landing page: what this gateway serves (static; tasks need the client key)",
)
async def landing_page() -> Response:
    return _page("landing.html")


@router.get(
    "/ratchet/scout", summary="Scout's page: a research question answered by agents through the gateway"
)
async def scout_page() -> Response:
    return _page("scout.html")


@router.get("/ratchet/pages/static/{name}", include_in_schema=False)
async def page_file(name: str) -> Response:
    if name not in _FILES:  # a fixed list: no path from the URL reaches the filesystem
        return Response(status_code=404, headers=page_headers())
    return FileResponse(STATIC / name, media_type=_FILES[name], headers=page_headers())


@router.get(
    "/ratchet/serving",
    summary="What this gateway serves the caller: per task stage and version, the models, the evidence",
    responses=error_docs(401),
)
async def serving(gw: GatewayDep, client: ClientDep) -> Response:
    return json_response(await asyncio.to_thread(build_serving, gw, client))


def build_serving(gw: Gateway, client: str) -> dict[str, Any]:
    """Per task the published release and the stage this replica applies: the manifest's pins and switches and
    the gateway's own safety switches (``ratchet_core.routing``) only ever narrow it to the teacher."""
    manifest, safety = gw.manifest, gw.safety
    names = sorted(set(manifest.tasks) | set(manifest.pins) | set(manifest.policies) | safety.pins)
    student_off = manifest.flags.student_disabled or safety.student_disabled
    tasks = []
    for name in names:
        release = manifest.task(name)
        pinned = name in manifest.pins or name in safety.pins
        applied = "teacher" if student_off or pinned else manifest.serving(name).stage
        tasks.append(
            {
                "task": name,
                "stage": release.stage,
                "serving_stage": applied,
                "version": release.version or None,
                "live_version": release.live_version,
                "canary_percent": release.canary_percent,
                "threshold": release.threshold,
                "pinned": pinned,
            }
        )
    # A version signed before the name rule cannot name an artifact: it has no BOM to link.
    versions = sorted({v for t in tasks for v in (t["version"], t["live_version"]) if is_valid("version", v)})
    return {
        "client": client,
        "manifest_sequence": manifest.sequence,
        "student_disabled": student_off,
        "models": sorted(gw.model_names),
        "tasks": tasks,
        "receipt_days": gw.artifacts.receipt_days(),
        "bom_versions": [v for v in versions if gw.artifacts.bom(v).is_file()],
    }


@router.get(
    "/ratchet/scout/team",
    summary="What Scout's agents send: task names, system prompts, answer schemas, the search tool and corpus",
)
async def scout_team() -> Response:
    return json_response(SCOUT_TEAM)


SCOUT_TEAM: dict[str, Any] = {
    "model": "ratchet",
    "planner": {
        "task": RESEARCH_PLAN.name,
        "system": RESEARCH_PLAN.system_prompt,
        "response_format": RESEARCH_PLAN.response_format,
    },
    "researcher": {
        "task": RESEARCH_SEARCH.name,
        "system": RESEARCH_SEARCH.system_prompt,
        "tools": [SEARCH_TOOL],
        "tool_choice": "required",
    },
    "writer": {
        "task": RESEARCH_WRITE.name,
        "system": RESEARCH_WRITE.system_prompt,
        "response_format": RESEARCH_WRITE.response_format,
    },
    "corpus": CORPUS,
}
