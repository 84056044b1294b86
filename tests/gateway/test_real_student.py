"""The real student server (transformers + peft, vLLM's API) behind the gateway: live stage, real logprobs."""

from __future__ import annotations

import openai
import pytest

from .conftest import API_KEY, running_gateway, sealed_rows

VERSION = "v0-base"


@pytest.mark.slow
def test_live_stage_with_the_real_student_server(tmp_path, teacher_url):
    from ratchet_core.serve import serve_in_thread
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app

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
        assert raw.headers["x-ratchet-served-by"] == "student"
        resp = raw.parse()
        assert resp.choices[0].logprobs is not None  # the client asked for them
        g.drain()
        (row,) = [r for r in sealed_rows(g.settings.lake_root) if r["kind"] == "request"]
        lps = [t.logprob for t in resp.choices[0].logprobs.content]
        from math import exp

        assert row["confidence"] == pytest.approx(exp(sum(lps) / len(lps)), rel=1e-6)
        assert row["served_by"] == "student" and row["version"] == VERSION
