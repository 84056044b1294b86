"""The litellm fallback path (used for non-OpenAI providers) against the demo teacher; aliases; PII switch."""

from __future__ import annotations

import json

import openai

from .conftest import API_KEY, running_gateway, sealed_rows


def test_teacher_through_litellm_acompletion(tmp_path, teacher_url):
    from ratchet_core.workloads import get_workload, solve

    ex = get_workload("tools").generate(1, seed=2)[0]
    expected = solve(ex.task, ex.messages, ex.tools, ex.response_format)
    with running_gateway(
        tmp_path, teacher_url, options={"teacher_via_litellm": True}, model_aliases="my-llm"
    ) as g:
        assert g.gw.teacher.fast is False
        c = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)
        resp = c.chat.completions.create(
            model="my-llm", messages=ex.messages, tools=ex.tools, extra_headers={"X-Ratchet-Task": "tools"}
        )
        call = resp.choices[0].message.tool_calls[0].function
        want = expected["tool_calls"][0]["function"]
        assert call.name == want["name"] and json.loads(call.arguments) == json.loads(want["arguments"])
        chunks = list(
            c.chat.completions.create(
                model="ratchet",
                messages=[{"role": "user", "content": "hello"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert any(ch.usage for ch in chunks)
        g.drain()
        rows = sealed_rows(g.settings.lake_root)
        assert len(rows) == 2 and all(r["status_code"] == 200 and r["teacher_cost_usd"] > 0 for r in rows)


def test_redaction_can_be_turned_off(tmp_path, teacher_url):
    with running_gateway(tmp_path, teacher_url, redact_pii=False) as g:
        c = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0)
        c.chat.completions.create(
            model="ratchet", messages=[{"role": "user", "content": "mail me at a@b.co"}]
        )
        g.drain()
        assert "a@b.co" in sealed_rows(g.settings.lake_root)[0]["messages"]
