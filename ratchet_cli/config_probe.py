"""What `ratchet config check` connects to: the control DB, the lake, the artifacts, the student endpoint, the teacher.

Each probe returns a :class:`Probe` (``ok``, what it reached, a one-line detail) within a few seconds and never
prints a secret: URLs are shown with passwords hidden, keys only as "key set". A probe that cannot run without a
paid call (a provider's default endpoint, no API base configured) is reported as not probed, not as a failure.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Probe:
    name: str
    target: str
    ok: bool | None  # None: not probed
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def safe_url(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a SQLAlchemy URL: show only the scheme and host part
        return url.split("@")[-1] if "@" in url else url


def control_db(url: str) -> Probe:
    import sqlalchemy as sa

    target = safe_url(url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return Probe("control_db", target, True, "SQLite file, created on first use")  # do not create it here
    try:
        engine = sa.create_engine(
            url, connect_args={"connect_timeout": int(TIMEOUT_S)} if "postgres" in url else {}
        )
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
                tables = sa.inspect(conn).get_table_names()
                version = conn.dialect.server_version_info
        finally:
            engine.dispose()
    except Exception as exc:
        return Probe("control_db", target, False, f"cannot connect: {_first_line(exc)}")
    server = ".".join(str(v) for v in version or ()) or "?"
    state = f"{len(tables)} tables" if tables else "empty (created on first use)"
    return Probe("control_db", target, True, f"{engine.dialect.name} {server}, {state}")


def storage(name: str, location: str) -> Probe:
    """A lake or artifacts root: a local folder (may not exist yet) or an fsspec URL whose bucket must answer."""
    from ratchet_core.lake import Lake

    try:
        lake = Lake(location)
        if lake.local:
            if not lake.fs.exists(lake.root):
                return Probe(name, location, True, "local folder, created on first write")
            return Probe(name, location, True, f"local folder, {len(lake.days())} day folders")
        bucket = lake.root.split("/", 1)[0]
        lake.fs.ls(bucket)  # raises for a missing bucket, refused credentials or no route
        days = len(lake.days()) if name == "lake" else None
        extra = f", {days} day folders" if days is not None else ""
        protocol = lake.fs.protocol[0] if isinstance(lake.fs.protocol, tuple) else lake.fs.protocol
        return Probe(name, location, True, f"{protocol} bucket {bucket} reachable{extra}")
    except Exception as exc:
        return Probe(name, location, False, f"cannot list: {_first_line(exc)}")


def openai_endpoint(name: str, base_url: str | None, api_key: str) -> Probe:
    """``GET {base}/models`` with the configured key: reachable, key accepted, which models it serves."""
    if not base_url:
        return Probe(
            name, "(provider default)", None, "no API base configured: not probed (it would be a paid call)"
        )
    url = base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
            body = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        hint = "the API key was refused" if exc.code in (401, 403) else f"HTTP {exc.code}"
        return Probe(name, base_url, False, hint)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Probe(name, base_url, False, f"unreachable: {_first_line(reason)}")
    models = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]
    shown = ", ".join(str(m) for m in models[:5]) + (" ..." if len(models) > 5 else "")
    return Probe(
        name, base_url, True, f"{len(models)} models: {shown}" if models else "reachable, no models listed"
    )


def probe_all(settings: Any) -> list[Probe]:
    return [
        control_db(settings.control_db_url),
        storage("lake", settings.lake_root),
        storage("artifacts", settings.artifacts_root),
        *([storage("artifacts store", settings.artifacts_url)] if settings.artifacts_url else []),
        openai_endpoint("student", settings.student_base_url, settings.student_api_key),
        openai_endpoint("teacher", settings.teacher_api_base, settings.teacher_api_key),
    ]


def _first_line(exc: object) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
