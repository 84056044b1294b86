"""The GPU check: a night's adapter on the real-architecture test base, served by vLLM and by Ratchet's student
server, asked the same requests; their prompts, answers, tool calls, logprobs and answer format must agree.

Run by ``infra/vllm/gpu_check.sh`` (which installs vLLM and starts it); never part of ``make test``. Steps:

1. ``build``: the base (``ratchet_core.chatml_base``: Qwen2, BPE tokenizer, ChatML-with-tools template), one day of
   ``mixed`` traffic through the night's own steps (traffic -> examples -> golden split -> training set) and the
   adapter trained on it with the night's settings (``night.adapter.NIGHT_TRAINING``); checks it with
   ``vllm_compatible``. Writes ``WORK/base``, ``WORK/adapter`` and ``WORK/golden.json``.
2. ``compare URL``: loads the adapter into vLLM at ``URL`` (``POST /v1/load_lora_adapter``), starts Ratchet's
   student server on the same base and adapter, and asks both every golden request as the gateway sends it
   (``ratchet_gateway.chat.student_format.student_request``; greedy, logprobs). Per request: the prompt token count
   (vLLM's ``/tokenize`` and ``usage.prompt_tokens`` against Ratchet's rendering), the answer (content or tool
   calls, vLLM's through ``--tool-call-parser hermes``), the tokens' logprobs (within ``LOGPROB_TOLERANCE`` where
   the tokens agree; float32 on CPU against the GPU's kernels) and the format (a json_schema answer valid for its
   schema, a tool call declared). Writes ``WORK/report.json`` and exits 1 when a check fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ADAPTER_NAME = "v1-gpu-check"
LOGPROB_TOLERANCE = 0.05
MIN_AGREEMENT = 0.9  # share of answers that must be the same (a tie between two tokens may break either way)
DAY = "2026-01-01"


def build(work: Path) -> None:
    from ratchet_assets.night.adapter import NIGHT_TRAINING
    from ratchet_assets.night.evaluate import load_golden
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.lora_trainer import train_lora
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_assets.release.vllm_compat import vllm_compatible
    from ratchet_core.chatml_base import build_chatml_base

    base = build_chatml_base(work / "base")
    lake, art = work / "lake", work / "artifacts"
    write_day(lake, DAY, 600, seed=7, workload="mixed", student_share=0.0)
    consolidate_traffic(lake, art, DAY)
    build_examples(art, DAY)
    split_golden(art, DAY, share=0.2)
    train = build_training_set(art, DAY)
    result = train_lora(base, train.path, work / "adapter", NIGHT_TRAINING)
    print(f"trained {result.steps} steps on {result.examples} rows in {result.seconds:.0f} s", flush=True)
    fit = vllm_compatible(work / "adapter", base, max_rank=32)
    if not fit.ok:
        raise SystemExit(str(fit))
    golden = [
        {"task": g.task, "messages": g.messages, "tools": g.tools, "response_format": g.response_format}
        for g in load_golden(art, DAY)
    ]
    (work / "golden.json").write_text(json.dumps(golden), encoding="utf-8")


def _ask(client: Any, url: str, model: str, row: dict) -> dict:
    from ratchet_gateway.chat.student_format import read_tool_calls, student_request

    body = {"messages": row["messages"]}
    body.update({k: row[k] for k in ("tools", "response_format") if row.get(k)})
    sent = student_request(body)
    request = {**sent, "model": model, "temperature": 0, "max_tokens": 160, "logprobs": True}
    resp = client.post(f"{url}/v1/chat/completions", json=request, timeout=300)
    resp.raise_for_status()
    data = resp.json()
    read_tool_calls(sent, data)
    return data


def _said(data: dict) -> tuple:
    message = data["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    return (
        message.get("content") or "",
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls],
    )


def _format_ok(row: dict, data: dict) -> bool:
    import jsonschema

    message = data["choices"][0]["message"]
    if row.get("response_format"):
        try:
            jsonschema.validate(
                json.loads(message.get("content") or ""), row["response_format"]["json_schema"]["schema"]
            )
        except (ValueError, jsonschema.ValidationError):
            return False
    if row.get("tools") and message.get("tool_calls"):
        names = {t["function"]["name"] for t in row["tools"]}
        return all(c["function"]["name"] in names for c in message["tool_calls"])
    return True


def compare(work: Path, vllm_url: str, api_key: str) -> int:
    import httpx
    from transformers import AutoTokenizer

    from ratchet_core.chat_encoding import encode
    from ratchet_core.chat_format import render_prompt
    from ratchet_gateway.chat.student_format import student_request
    from ratchet_gateway.student_server.app import create_app
    from tests.serve import serve_in_thread

    base, adapter = work / "base", work / "adapter"
    tokenizer = AutoTokenizer.from_pretrained(base)
    golden = json.loads((work / "golden.json").read_text(encoding="utf-8"))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    vllm = httpx.Client(headers=headers)
    r = vllm.post(
        f"{vllm_url}/v1/load_lora_adapter", json={"lora_name": ADAPTER_NAME, "lora_path": str(adapter)}
    )
    if r.status_code != 200:
        raise SystemExit(f"vLLM refused the adapter: HTTP {r.status_code} {r.text}")
    rows, failures = [], []
    with serve_in_thread(create_app(base, adapters={ADAPTER_NAME: str(adapter)})) as ratchet_url:
        ratchet = httpx.Client()
        for i, row in enumerate(golden):
            body = student_request(
                {"messages": row["messages"], **({"tools": row["tools"]} if row["tools"] else {})}
            )
            ours = len(encode(tokenizer, render_prompt(tokenizer, body["messages"], body.get("tools"))))
            tok = vllm.post(
                f"{vllm_url}/tokenize",
                json={"model": ADAPTER_NAME, "messages": body["messages"], "tools": body.get("tools"),
                      "add_generation_prompt": True},
            ).json()  # fmt: skip
            a, b = _ask(vllm, vllm_url, ADAPTER_NAME, row), _ask(ratchet, ratchet_url, ADAPTER_NAME, row)
            lp_a = [
                (t["token"], t["logprob"])
                for t in (a["choices"][0].get("logprobs") or {}).get("content") or []
            ]
            lp_b = [
                (t["token"], t["logprob"])
                for t in (b["choices"][0].get("logprobs") or {}).get("content") or []
            ]
            same_tokens = [(x, y) for x, y in zip(lp_a, lp_b, strict=False) if x[0] == y[0]]
            worst = max((abs(x[1] - y[1]) for x, y in same_tokens), default=0.0)
            result = {
                "task": row["task"],
                "prompt_tokens": {"ratchet": ours, "vllm_tokenize": tok.get("count"),
                                  "vllm_usage": a["usage"]["prompt_tokens"], "server": b["usage"]["prompt_tokens"]},
                "same_answer": _said(a) == _said(b),
                "finish": [a["choices"][0]["finish_reason"], b["choices"][0]["finish_reason"]],
                "max_logprob_diff": worst,
                "format_ok": [_format_ok(row, a), _format_ok(row, b)],
            }  # fmt: skip
            rows.append(result)
            if len(set(result["prompt_tokens"].values())) != 1:
                failures.append(f"row {i}: prompt token counts differ {result['prompt_tokens']}")
            if worst > LOGPROB_TOLERANCE:
                failures.append(f"row {i}: logprobs differ by {worst:.3f} on the same tokens")
            if result["same_answer"] and result["format_ok"][0] != result["format_ok"][1]:
                failures.append(f"row {i}: the same answer has another format: {result}")
    agreement = sum(r["same_answer"] for r in rows) / max(1, len(rows))
    if agreement < MIN_AGREEMENT:
        failures.append(f"only {agreement:.1%} of the answers agree (at least {MIN_AGREEMENT:.0%})")
    per_task = {
        t: f"{sum(r['same_answer'] for r in rows if r['task'] == t)}/{sum(r['task'] == t for r in rows)}"
        for t in sorted({r["task"] for r in rows})
    }
    report = {"rows": rows, "agreement": agreement, "agreement_per_task": per_task, "failures": failures}
    (work / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps({"agreement": agreement, "per_task": per_task, "failures": failures[:20]}, indent=2))
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(Path(argv[1]))
        return 0
    if len(argv) >= 3 and argv[0] == "compare":
        return compare(Path(argv[1]), argv[2], argv[3] if len(argv) > 3 else "")
    print(
        "usage: python infra/vllm/gpu_check.py build WORK | compare WORK VLLM_URL [API_KEY]", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
