"""The student on a real architecture: a Qwen2 base with a BPE tokenizer and a ChatML-with-tools template
(``ratchet_core.chatml_base``, built here without a download), trained and served as vLLM would serve it.

What vLLM renders is computed here independently (:func:`vllm_prompt`: vLLM's own handling of a chat request,
its pydantic tool model's ``model_dump`` and its parsing of tool-call arguments, then the tokenizer's
``apply_chat_template``), and compared with what Ratchet trains on and what its student server takes.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, ConfigDict

from ratchet_core.workloads import TASKS, compare, get_workload
from tests.serve import serve_in_thread

VERSION = "v0-chatml"
THREE = ("tickets", "extract", "tools")  # a chat, a json_schema and a tools task


class _Function(BaseModel):  # vLLM's FunctionDefinition (its models allow extra fields)
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(BaseModel):  # vLLM's ChatCompletionToolsParam
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: _Function


def vllm_prompt(tokenizer, body: dict) -> str:
    """The prompt vLLM renders for a chat request `body` (text content, the "string" content format)."""
    conversation = []
    for m in body["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p["text"] for p in content if p.get("type") == "text")
        item = {"role": m["role"], "content": content or ""}
        if m["role"] == "assistant" and m.get("tool_calls"):
            item["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.loads(c["function"]["arguments"] or "{}"),
                    },
                }
                for c in m["tool_calls"]
            ]
        conversation.append(item)
    tools = [_Tool(**t).model_dump() for t in body["tools"]] if body.get("tools") else None
    return tokenizer.apply_chat_template(
        conversation, tools=tools, add_generation_prompt=True, tokenize=False
    )


def request_body(example, tool_choice: str | None = None) -> dict:
    body: dict[str, Any] = {"messages": example.messages}
    if example.tools:
        body["tools"] = example.tools
        body["tool_choice"] = tool_choice or "auto"
    if example.response_format:
        body["response_format"] = example.response_format
    return body


class _Recorder:
    """ASGI middleware keeping the body and the answer of every chat request the student server receives."""

    def __init__(self, app) -> None:
        self.app, self.calls = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        call = {"body": json.loads(b"".join(chunks)), "answer": b""}
        self.calls.append(call)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        async def keep(message):
            if message["type"] == "http.response.body":
                call["answer"] += message.get("body", b"")
            await send(message)

        await self.app(scope, replay, keep)


@pytest.fixture(scope="module")
def tokenizer(chatml_base):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(chatml_base)


@pytest.fixture(scope="module")
def teacher_url() -> Iterator[str]:
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app

    with serve_in_thread(create_app(DemoTeacherConfig(model="demo-teacher"))) as url:
        yield url + "/v1"


def test_the_prompt_trained_on_is_what_vllm_renders_for_the_gateways_request(
    chatml_base, tokenizer, teacher_url, tmp_path
):
    """chat, tools and json_schema requests through a real gateway to the real student server on the base; the
    night turns the sealed rows into train.jsonl; the trainer's prompts are byte for byte what vLLM renders for
    the bodies the student endpoint received, and the server took each prompt whole."""
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.lora_trainer import read_train_jsonl
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_gateway.student_server.app import create_app
    from tests.gateway.conftest import API_KEY, running_gateway

    student = _Recorder(create_app(chatml_base, served_model_name=VERSION))
    asked = [
        (task, request_body(e, choice))
        for task, choice, seed in (
            ("tickets", None, 1),
            ("extract", None, 2),
            ("tools", "auto", 3),
            ("tools", "required", 4),
        )
        for e in get_workload(task).generate(3, seed=seed)
    ]
    with (
        serve_in_thread(student) as surl,
        running_gateway(tmp_path, teacher_url, surl + "/v1", student_timeout_s=120) as g,
    ):
        # live, but a threshold no answer reaches: the student answers every request, the teacher serves it
        g.publish(**{t: {"stage": "live", "version": VERSION, "threshold": 1.0} for t in THREE})
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        for task, body in asked:
            raw = client.chat.completions.with_raw_response.create(
                model="ratchet", max_tokens=128, temperature=0, extra_headers={"X-Ratchet-Task": task}, **body
            )
            assert raw.headers["x-ratchet-served-by"] == "teacher"
        g.drain()
        lake = g.settings.lake_root
    assert len(student.calls) == len(asked)
    sent = [c["body"] for c in student.calls]
    # the student got the request's response_format (structured outputs) and, for `required`, `auto`: its own
    # tool-call format, which the guard then holds to `required`
    assert all(
        b.get("response_format") == e["response_format"]
        for b, (t, e) in zip(sent, asked, strict=True)
        if t == "extract"
    )
    assert {b.get("tool_choice") for b in sent if b.get("tools")} == {"auto"}

    day = datetime.now(UTC).strftime("%Y-%m-%d")
    art = tmp_path / "artifacts"
    consolidate_traffic(lake, art, day)
    build_examples(art, day)
    split_golden(art, day, share=0.0)
    train = build_training_set(art, day).path
    trained = sorted(prompt for prompt, _ in read_train_jsonl(train, tokenizer))
    rendered = sorted(vllm_prompt(tokenizer, body) for body in sent)
    assert trained == rendered
    for call, prompt in zip(student.calls, (vllm_prompt(tokenizer, b) for b in sent), strict=True):
        usage = json.loads(call["answer"])["usage"]
        assert usage["prompt_tokens"] == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    lengths = {
        t: max(len(tokenizer(vllm_prompt(tokenizer, b))["input_ids"]) for u, b in asked if u == t)
        for t in THREE
    }
    print(f"templated prompt tokens: {lengths}")
    assert (
        lengths["tools"] > 5 * lengths["tickets"]
    )  # the tool list in the system turn: trained and served whole


def test_tool_calls_round_trip_through_the_parser(tokenizer):
    """The template's answer turn, decoded as vLLM decodes it (special tokens skipped), reads back through the
    hermes parser, in the student server's answer, the gateway's reading of a text answer and the night's."""
    from ratchet_core.chat_encoding import encode_answer
    from ratchet_core.chat_format import render_answer
    from ratchet_core.tool_calls import answer_message
    from ratchet_gateway.chat.student_format import read_tool_calls

    for example in get_workload("tools").generate(20, seed=9):
        ids = encode_answer(
            tokenizer, render_answer(tokenizer, example.messages, example.tools, example.expected)
        )
        assert (
            ids[-1] == tokenizer.eos_token_id
            and ids.count(tokenizer.convert_tokens_to_ids("<tool_call>")) == 1
        )
        text = tokenizer.decode(ids, skip_special_tokens=True)
        served = answer_message(text, example.tools)
        assert compare("tool_call", example.expected, served), text
        resp = {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        read_tool_calls(request_body(example), resp)
        assert resp["choices"][0]["finish_reason"] == "tool_calls"
        assert compare("tool_call", example.expected, resp["choices"][0]["message"])


def test_prompts_are_never_cut(chatml_base, tokenizer, tmp_path):
    """A row longer than max_len is left out of training and counted; a prompt longer than the context is refused
    by the student server with vLLM's message, never cut."""
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora
    from ratchet_gateway.student_server.app import create_app
    from tests.student.bases import write_train_jsonl

    rows = get_workload("tickets").generate(16, seed=1) + get_workload("tools").generate(4, seed=1)
    train = write_train_jsonl(rows, tmp_path / "train.jsonl")
    config = LoraTrainConfig(rank=4, alpha=8, epochs=1, min_steps=0, max_len=200, num_threads=1)
    result = train_lora(chatml_base, train, tmp_path / "adapter", config)
    meta = json.loads((tmp_path / "adapter" / "ratchet_train.json").read_text())
    assert (result.examples, result.rows_left_out) == (16, 4)  # the tool prompts (~650 tokens) do not fit 200
    assert meta["rows_left_out"] == {"longer_than_max_len": 4} and meta["max_len"] == 200

    with serve_in_thread(create_app(chatml_base)) as url:
        body = {"model": "chatml-base", "messages": [{"role": "user", "content": "refund " * 3000}]}
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        assert (
            r.status_code == 400 and "maximum context length is 2048 tokens" in r.json()["error"]["message"]
        )
        body = {**body, "messages": [{"role": "user", "content": "refund " * 900}], "max_tokens": 2}
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        prompt = vllm_prompt(tokenizer, body)
        assert r.json()["usage"]["prompt_tokens"] == len(tokenizer(prompt)["input_ids"]) > 900


def test_the_student_server_decodes_under_the_response_format(chatml_base, tokenizer):
    """response_format is not in the prompt; it constrains decoding (xgrammar, as vLLM): even the untrained base
    writes only what the grammar allows, and a format it cannot constrain to is refused, as vLLM refuses it."""
    from xgrammar import GrammarCompiler, GrammarMatcher, TokenizerInfo

    from ratchet_gateway.student_server.app import create_app

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    messages = [{"role": "user", "content": "Is order A-12345 late?"}]
    with serve_in_thread(create_app(chatml_base)) as url:

        def ask(response_format, max_tokens=24) -> httpx.Response:
            body = {"model": "chatml-base", "messages": messages, "max_tokens": max_tokens, "logprobs": True}
            return httpx.post(
                f"{url}/v1/chat/completions", json={**body, "response_format": response_format}, timeout=60
            )

        free = ask({"type": "text"}).json()
        fmt = {"type": "json_schema", "json_schema": {"name": "late", "schema": schema}}
        bound = ask(fmt).json()
        assert free["usage"]["prompt_tokens"] == bound["usage"]["prompt_tokens"]  # the same prompt
        written = bound["choices"][0]["message"]["content"]
        # an independent matcher accepts what the server wrote under the schema's grammar, and refuses more
        matcher = GrammarMatcher(
            GrammarCompiler(TokenizerInfo.from_huggingface(tokenizer)).compile_json_schema(json.dumps(schema))
        )
        assert written.strip() and matcher.accept_string(written)
        assert not matcher.accept_string("}}")
        text = free["choices"][0]["message"]["content"]
        assert not text.lstrip().startswith("{")  # unconstrained, the untrained base writes no JSON
        for refused in ({"type": "json_schema", "json_schema": {"name": "late"}}, {"type": "structural_tag"}):
            r = ask(refused)
            assert r.status_code == 400 and "response_format" in r.json()["error"]["message"]


def _tiny_adapter(base: Path, out: Path, work: Path, modules_to_save: list[str] | None = None) -> Path:
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora
    from tests.student.bases import write_train_jsonl

    train = write_train_jsonl(get_workload("tickets").generate(16, seed=2), work / f"{out.name}.jsonl")
    config = LoraTrainConfig(
        rank=4, alpha=8, epochs=1, min_steps=0, num_threads=1, modules_to_save=modules_to_save
    )
    train_lora(base, train, out, config)
    return out


class _Endpoint:
    """A stand-in student endpoint speaking vLLM's LoRA admin API: its models are `owned_by` vLLM (or Ratchet)."""

    def __init__(self, owner: str) -> None:
        from fastapi import FastAPI

        self.loads: list[str] = []
        self.app = FastAPI()

        @self.app.get("/v1/models")
        async def models() -> dict:
            base = {"id": "base", "owned_by": owner, "parent": None}
            return {"data": [base, *({"id": n, "owned_by": owner, "parent": "base"} for n in self.loads)]}

        @self.app.post("/v1/load_lora_adapter")
        async def load(body: dict) -> str:
            self.loads.append(body["lora_name"])
            return "Success"


def test_the_reconciler_loads_into_vllm_only_what_vllm_can_load(chatml_base, demo_base, tmp_path):
    """`vllm_compatible` before every load into a vLLM endpoint: an adapter of the real base loads; the demo
    base's (trained embeddings and head, another base) and one above --max-lora-rank stay missing, with the
    reason; Ratchet's own student server is not held to vLLM's limits."""
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.release.adapters import reconcile_endpoint
    from ratchet_assets.release.vllm_compat import vllm_compatible
    from ratchet_core.control_db import ensure_schema, make_engine

    art = tmp_path / "artifacts"
    real = _tiny_adapter(chatml_base, art / "adapters" / "v1-real", tmp_path)
    # trained embeddings and head, as a random demo base's adapters carry them
    demo = _tiny_adapter(demo_base, art / "adapters" / "v2-demo", tmp_path, ["embed_tokens", "lm_head"])
    assert vllm_compatible(real, chatml_base, max_rank=32).ok
    reasons = vllm_compatible(demo, chatml_base, max_rank=32).reasons
    assert any("modules_to_save" in r and "Ratchet's student server only" in r for r in reasons), reasons
    assert any("trained on base ratchet-demo-base" in r for r in reasons), reasons
    assert not vllm_compatible(demo, demo_base, max_rank=32).ok  # on its own base: still not for vLLM
    engine = make_engine(f"sqlite:///{tmp_path / 'control.db'}")
    ensure_schema(engine)
    effects = EffectLedger(engine)
    desired = {"v1-real": ["tickets"], "v2-demo": ["tickets"]}
    for owner, max_rank, loaded, missing in (
        ("vllm", 32, ["v1-real"], {"v2-demo": "modules_to_save"}),
        ("vllm", 2, [], {"v1-real": "rank 4 is above the endpoint's --max-lora-rank 2", "v2-demo": "rank 4"}),
        ("ratchet", 2, ["v1-real", "v2-demo"], {}),
    ):
        endpoint = _Endpoint(owner)
        with serve_in_thread(endpoint.app) as url:
            report = reconcile_endpoint(
                url + "/v1", "", desired, art, effects, {}, base=chatml_base, max_rank=max_rank
            )
        assert endpoint.loads == report.loaded + report.reloaded == loaded, report.summary()
        assert set(report.missing) == set(missing), report.summary()
        for version, reason in missing.items():
            assert (
                report.missing[version].startswith("not loadable by vLLM: ")
                and reason in report.missing[version]
            )
        if missing:
            assert "MISSING" in report.summary() and "not loadable by vLLM" in report.summary()


# A whole night on the base ------------------------------------------------------------------------------------

DAY = "2026-02-02"


@pytest.fixture(scope="module")
def night(chatml_base, tmp_path_factory):
    """One night of `tickets` traffic on the base through the night's Dagster assets: the adapter trained with the
    night's defaults (short of steps judged at this night's target), evaluated through Ratchet's student server serving the base, at a target a random base can
    reach in one night (the chat, tools and json_schema prompts are proven above; a night of tool prompts, ~650
    tokens each, trains several times longer on two cores)."""
    from ratchet_assets.night.fixtures import write_day
    from ratchet_stats.keys import generate_private_key, save_private_key
    from tests.night.nights import run_night

    home = tmp_path_factory.mktemp("real-night") / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    write_day(home / "lake", DAY, 300, seed=3, workload="tickets", student_share=0.0)
    # short of steps asks what this night's certificate needs (target 0.3 at the night's delta), not the
    # config's 0.95: the lora_adapter asset passes the night's target to the trainer (``adapter.extend_targets``)
    result = run_night(home, DAY, base=chatml_base, bom=True, resources={"certify_target": 0.3})
    failures = [e.event_specific_data.error for e in result.all_events if e.is_step_failure]
    assert result.success, [f.message + "".join(f.stack[-3:]) for f in failures]
    art = home / "artifacts"
    record = json.loads((art / "adapters" / f"day={DAY}" / "adapter.json").read_text())
    return SimpleNamespace(home=home, art=art, record=record, adapter=art / record["adapter_dir"], key=key)


@pytest.mark.slow
def test_a_night_on_the_real_base_trains_a_vllm_loadable_adapter(night, chatml_base):
    from ratchet_assets.release.vllm_compat import vllm_compatible
    from ratchet_core.chat_format import template_sha256
    from ratchet_core.chatml_base import CHATML_TOOLS_TEMPLATE
    from ratchet_stats import certificate as CERT
    from ratchet_stats.dsse import verify_statement

    record = night.record
    # the night's certificate target reached the trainer: the rule asked for what certifies 0.3, not 0.95
    assert record["config"]["extend_targets"] == {"tickets": [0.3, 0.05]}
    assert json.loads((night.adapter / "ratchet_train.json").read_text())["config"]["extend_targets"] == {
        "tickets": [0.3, 0.05]
    }
    print(
        f"training: {record['seconds']:.0f} s wall, {record['cpu_seconds']:.0f} CPU-s, {record['steps']} steps"
    )
    config = json.loads((night.adapter / "adapter_config.json").read_text())
    assert config["modules_to_save"] is None
    assert {t.rsplit(".", 1)[-1] for t in config["target_modules"]} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    assert vllm_compatible(night.adapter, chatml_base, max_rank=32).ok
    assert str(vllm_compatible(night.adapter, chatml_base, max_rank=16)).startswith(
        "not loadable by vLLM: rank 32"
    )
    assert record["rows_left_out"] == 0  # every templated prompt trained whole
    # the base identity names the template and the tool parser: record, certificate and BOM
    expected = {"chat_template_sha256": template_sha256(CHATML_TOOLS_TEMPLATE), "tool_parser": "hermes"}
    assert {k: record["base"][k] for k in expected} == expected
    version = record["version"]
    cert = (night.art / "certificates" / f"{version}.dsse.json").read_bytes()
    predicate = verify_statement(cert, night.key.public_key(), CERT.PREDICATE_TYPE)["predicate"]
    assert {k: predicate["base"][k] for k in expected} == expected
    bom = verify_statement(
        (night.art / "boms" / version / "bom.dsse.json").read_bytes(), night.key.public_key()
    )
    base = next(c for c in bom["predicate"]["components"] if c["bom-ref"].startswith("base:"))
    props = {p["name"]: p["value"] for p in base["properties"]}
    assert {k: props[f"ratchet:base:{k}"] for k in expected} == expected
    print({t: (s["correct"], s["n"]) for t, s in predicate["tasks"].items()})


@pytest.mark.slow
def test_the_adapter_answers_the_same_rendered_by_apply_chat_template(night, chatml_base, tokenizer):
    """An independent transformers + peft reference renders each golden request as vLLM does (and decodes a
    json_schema request under xgrammar's own transformers processor, as vLLM's structured outputs do); the student
    server's answers are the same, and so is how often they are right."""
    import torch
    import xgrammar as xgr
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from xgrammar.contrib.hf import LogitsProcessor as GrammarProcessor

    from ratchet_assets.night.evaluate import load_golden
    from ratchet_core.tool_calls import answer_message
    from ratchet_gateway.chat.student_format import student_request
    from ratchet_gateway.student_server.app import create_app

    base = AutoModelForCausalLM.from_pretrained(chatml_base, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, night.adapter).eval()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=base.config.vocab_size)
    compiler = xgr.GrammarCompiler(info)
    golden = load_golden(night.art, DAY)
    # the night's own golden requests (tickets), and tools and json_schema requests (new to the adapter)
    rows = [(g.task, g.messages, g.tools, g.response_format, g.expected) for g in golden[:12]]
    for task in ("extract", "tools"):
        rows += [
            (task, e.messages, e.tools, e.response_format, e.expected)
            for e in get_workload(task).generate(4, seed=8)
        ]

    def sent(row) -> dict:  # what the gateway sends the student
        _, messages, tools, response_format, _ = row
        body = {"messages": messages, "tools": tools, "response_format": response_format}
        return student_request({k: v for k, v in body.items() if v})

    def reference(row) -> dict:
        body = sent(row)
        ids = torch.tensor([tokenizer(vllm_prompt(tokenizer, body), add_special_tokens=False)["input_ids"]])
        processors = []
        if body.get("response_format"):
            schema = json.dumps(body["response_format"]["json_schema"]["schema"])
            processors = [GrammarProcessor(compiler.compile_json_schema(schema))]
        with torch.no_grad():
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=96, do_sample=False,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                logits_processor=processors,
            )  # fmt: skip
        text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        return answer_message(text, body.get("tools"))

    shutil.copytree(night.adapter, night.home / "served")
    with serve_in_thread(create_app(chatml_base, adapters={VERSION: str(night.home / "served")})) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
        served = []
        for row in rows:
            msg = client.chat.completions.create(model=VERSION, max_tokens=96, **sent(row))  # greedy: sent()
            msg = msg.choices[0].message
            served.append(msg.model_dump(exclude_none=True))

    def said(message: dict) -> tuple:
        calls = message.get("tool_calls") or []
        return message.get("content") or "", [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls
        ]

    agree, right = 0, {"server": Counter(), "reference": Counter()}
    for row, got in zip(rows, served, strict=True):
        task, expected, ref = row[0], row[4], reference(row)
        agree += said(ref) == said(got)
        right["server"][task] += compare(TASKS[task].comparator, expected, got)
        right["reference"][task] += compare(TASKS[task].comparator, expected, ref)
    print(f"{agree}/{len(rows)} answers agree; right: {right}")
    assert agree == len(rows) and right["server"] == right["reference"]
    assert right["server"]["tickets"] >= 6  # of 12: it learnt the labels from one night
