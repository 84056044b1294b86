"""Honest savings, end to end: the same requests served all by the teacher on one day and all by the student on
another give teacher-equivalents within 10% of each other in the signed receipts, although the student's
tokenizer counts 3.5x more tokens; the auditor's verification recomputes the student day from its rows.

Real components: the gateway, the demo teacher (usage counted with the teacher's tokenizer) and, as the student,
a demo teacher whose reported usage is multiplied by 3.5 (a byte-level student tokenizer), all on loopback; then
the night's traffic and receipt steps and the verifier kit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import orjson
import pytest

from tests.serve import serve_in_thread

from .conftest import API_KEY, OTHER_KEY, STUDENT_VERSION, running_gateway, sealed_rows

STUDENT_TOKENS_PER_TEACHER_TOKEN = 3.5
TASKS = ("tickets", "extract", "tools")


def _inflating(app, factor: float):
    """ASGI wrapper: the JSON answer's usage counts multiplied by `factor` (how a student tokenizer counts)."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        start: dict = {}
        chunks: list[bytes] = []

        async def capture(msg):
            if msg["type"] == "http.response.start":
                start.update(msg)
                return
            chunks.append(msg.get("body", b""))
            if msg.get("more_body"):
                return
            body = b"".join(chunks)
            try:
                doc = orjson.loads(body)
                usage = doc.get("usage") if isinstance(doc, dict) else None
            except orjson.JSONDecodeError:
                usage = None
            if usage:
                for k in ("prompt_tokens", "completion_tokens"):
                    usage[k] = round(usage[k] * factor)
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                body = orjson.dumps(doc)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await app(scope, receive, capture)

    return wrapped


@pytest.fixture(scope="module")
def wordy_student_url() -> Iterator[str]:
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app

    app = _inflating(create_app(DemoTeacherConfig(model=STUDENT_VERSION)), STUDENT_TOKENS_PER_TEACHER_TOKEN)
    with serve_in_thread(app) as url:
        yield url + "/v1"


def _examples():
    from ratchet_core.workloads import get_workload

    return [ex for task in TASKS for ex in get_workload(task).generate(14, seed=77)]


def _serve_day(tmp: Path, teacher_url: str, student_url: str, student: bool) -> tuple[Path, str, list[dict]]:
    """Send the same requests through a fresh gateway (all teacher, or all student with 50% audits); returns
    (home, day, sealed rows)."""
    with running_gateway(tmp, teacher_url, student_url) as g:
        if student:
            releases = {t: {"stage": "live", "version": STUDENT_VERSION, "threshold": 0.0} for t in TASKS}
            g.publish(**releases, _flags={"audit_rate": 0.5})
        for i, ex in enumerate(_examples()):
            client = openai.OpenAI(
                base_url=g.url + "/v1", api_key=(API_KEY, OTHER_KEY)[i % 2], max_retries=0, timeout=30
            )
            raw = client.chat.completions.with_raw_response.create(
                model="ratchet",
                messages=ex.messages,
                tools=ex.tools or openai.omit,
                response_format=ex.response_format or openai.omit,
                extra_headers={"X-Ratchet-Task": ex.task},
            )
            assert raw.headers["x-ratchet-served-by"] == ("student" if student else "teacher")
        g.drain()
        rows = sealed_rows(g.settings.lake_root)
        return Path(g.settings.home), rows[0]["day"], rows


def _receipt(home: Path, day: str):
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night.receipts import build_receipt, export_rows_jsonl
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_core.control_db import make_engine
    from ratchet_core.layout import ArtifactLayout
    from ratchet_stats.keys import generate_private_key

    art = home / "artifacts"
    consolidate_traffic(home / "lake", art, day)
    key = generate_private_key()
    ledger = EffectLedger(make_engine(f"sqlite:///{(home / 'night.db').as_posix()}"))
    result = build_receipt(art, day, key, ledger, teacher_model="openai/demo-teacher")
    layout = ArtifactLayout(art)
    files = {
        "envelope": layout.receipt_envelope(day).read_bytes(),
        "clients": layout.receipt_clients(day).read_bytes().splitlines(),
        "estimates": layout.receipt_estimates(day).read_bytes().splitlines(),
        "pairs": (layout.receipt_dir(day) / "pairs.jsonl").read_bytes().splitlines(),
        "rows": export_rows_jsonl(art, day, home / "rows.jsonl").read_bytes().splitlines(),
    }
    return result, files, key.public_key()


@pytest.mark.slow
def test_student_day_costs_what_the_teacher_day_cost_and_verify_recomputes_it(
    tmp_path, teacher_url, wordy_student_url
):
    from ratchet_core.pricing import model_prices, prompt_tokens
    from ratchet_stats.receipt import verify_receipt

    t_home, t_day, t_rows = _serve_day(tmp_path / "teacher", teacher_url, wordy_student_url, student=False)
    s_home, s_day, s_rows = _serve_day(tmp_path / "student", teacher_url, wordy_student_url, student=True)
    t_receipt, _, _ = _receipt(t_home, t_day)
    s_receipt, files, pub = _receipt(s_home, s_day)

    teacher_day = t_receipt.totals["teacher_cost_micro_usd"]
    student_day = s_receipt.totals["teacher_cost_micro_usd"]
    assert t_receipt.totals["teacher_cost_estimated_micro_usd"] == 0
    assert s_receipt.totals["teacher_cost_measured_micro_usd"] == 0
    assert abs(student_day - teacher_day) <= 0.10 * teacher_day, (student_day, teacher_day)

    # The old method (the student's own token counts at the teacher's prices) would have claimed ~3.5x.
    prices = model_prices("openai/demo-teacher")
    requests = [r for r in s_rows if r["kind"] == "request"]
    naive = sum(prices.cost(r["prompt_tokens"], r["completion_tokens"]) for r in requests) * 1e6
    assert naive > 2.5 * teacher_day

    # The gateway recorded each student-served prompt as the teacher's tokenizer counts it: the number the
    # teacher itself reported for the same request on the teacher day.
    by_prompt = {r["messages"]: r["prompt_tokens"] for r in t_rows if r["kind"] == "request"}
    assert all(r["teacher_prompt_tokens"] == by_prompt[r["messages"]] for r in requests)
    assert all(r["teacher_prompt_tokens"] < r["prompt_tokens"] for r in requests)
    ex = _examples()[0]
    first = next(r for r in requests if json.loads(r["messages"]) == ex.messages)
    assert first["teacher_prompt_tokens"] == prompt_tokens("openai/demo-teacher", ex.messages)

    # Estimates come from the day's audits (the teacher's own answers), and say so.
    assert {e["task"]: e["source"] for e in s_receipt.estimates} == dict.fromkeys(TASKS, "day")
    assert all(e["from_audits"]["answers"] > 0 for e in s_receipt.estimates)

    report = verify_receipt(
        files["envelope"],
        pub,
        leaves=files["rows"],
        clients=files["clients"],
        estimates=files["estimates"],
        pairs=files["pairs"],
    )
    assert report["checks"] == ["signature", "predicate", "clients", "estimates", "pairs", "rows"]
    assert report["totals"]["teacher_cost_micro_usd"] == student_day
    assert report["teacher_equivalent"]["prices"]["input_usd_per_token"] == prices.input_per_token
