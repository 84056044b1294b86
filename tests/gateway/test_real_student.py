"""The real student server (transformers + peft, vLLM's API) behind the gateway: live stage, real logprobs, the
answer guard on a real answer."""

from __future__ import annotations

import openai
import pytest

from .conftest import API_KEY, running_gateway, sealed_rows

VERSION = "v0-base"


@pytest.mark.slow
def test_live_stage_with_the_real_student_server(tmp_path, teacher_url):
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app
    from tests.serve import serve_in_thread

    base = ensure_demo_base(tmp_path / "base")
    student = create_app(base, served_model_name=VERSION)
    with (
        serve_in_thread(student) as surl,
        running_gateway(tmp_path, teacher_url, surl + "/v1", student_timeout_s=60) as g,
    ):
        g.publish(tickets={"stage": "live", "version": VERSION, "threshold": 0.0})
        c = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=90)
        raw = c.chat.completions.with_raw_response.create(
            model="ratchet",
            messages=[{"role": "user", "content": "Label: my parcel is late"}],
            max_tokens=4,
            temperature=0,
            logprobs=True,
            extra_headers={"X-Ratchet-Task": "tickets"},
        )
        # The untrained demo base never ends an answer by itself: cut at max_tokens (finish_reason length), its
        # confident answer breaks the request's contract, so the answer guard hands the request to the teacher.
        assert raw.headers["x-ratchet-served-by"] == "teacher"
        g.drain()
        (row,) = [r for r in sealed_rows(g.settings.lake_root) if r["kind"] == "request"]
        assert row["served_by"] == "teacher" and row["version"] == VERSION
        assert row["contract_violation"] == "finish_length"
        assert 0 < row["confidence"] <= 1  # from the real student's logprobs
