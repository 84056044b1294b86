"""The GPU check: a night's adapter served by vLLM and by Ratchet's student server on the same base, asked the same
requests; their prompt token ids, answers, tool calls, logprobs and answer formats must agree.

Run by ``infra/vllm/gpu_check.sh`` (which starts vLLM with Ratchet's flags); never part of ``make test``. Steps:

1. ``build WORK [MODEL_DIR]``: the base is MODEL_DIR (a local HF folder of a small real model with its own chat
   template, e.g. Qwen2.5-0.5B-Instruct; nothing is downloaded) or, without it, the real-architecture test base
   (``ratchet_core.chatml_base``: Qwen2, BPE tokenizer, ChatML-with-tools template). One day of ``mixed`` traffic
   goes through the night's own steps (traffic -> examples -> golden split -> training set) and an adapter is
   trained on it: with the night's settings (``night.adapter.NIGHT_TRAINING``) on the test base, with
   ``TRAIN_STEPS`` steps (default 12) on a real model (its answers need only be the same on both servers, not
   right, and training runs on the CPU). The adapter must pass ``vllm_compatible``. Writes ``WORK/adapter`` and
   ``WORK/check.json`` (the base, the training run, the golden requests: ``ROWS_PER_TASK`` of each task, all by
   default on the test base, 8 on a real model).
2. ``compare WORK VLLM_URL [API_KEY]``: loads the adapter into vLLM (``POST /v1/load_lora_adapter``; then
   ``GET /v1/models`` must list it), starts Ratchet's student server on the same base and adapter, and per golden
   request, as the gateway sends it (``ratchet_gateway.chat.student_format.student_request``; greedy, logprobs):

   - prompt token ids: Ratchet's render (``ratchet_core.chat_format.render_prompt``, as the night trains on it),
     its student server's ``POST /tokenize`` and vLLM's ``POST /tokenize`` must be the same list, and both
     servers' ``usage.prompt_tokens`` its length (a mismatch is reported with the first differing position);
   - the answer (greedy, at most ``MAX_TOKENS`` tokens, default 160; content or tool calls, vLLM's read by
     ``--tool-call-parser hermes``, whether it returned them structured is recorded), the tokens' logprobs (within ``LOGPROB_TOLERANCE`` where the tokens agree) and the
     format (a json_schema answer valid for its schema, a tool call to a declared tool);

   then unloads the adapter (``POST /v1/unload_lora_adapter``): vLLM must no longer list it and must answer a
   request for it with 404. Writes ``WORK/report.json`` and exits 1 when a check fails.

Any endpoint with vLLM's API can stand in for vLLM: the test ``tests/student/test_gpu_check.py`` runs ``compare``
against a second Ratchet student server, so the script itself is proven on CPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

ADAPTER_NAME = "v1-gpu-check"
LOGPROB_TOLERANCE = 0.05
MIN_AGREEMENT = 0.9  # share of answers that must be the same (a tie between two tokens may break either way)
DAY = "2026-01-01"
CHECK_FILE = "check.json"


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise SystemExit(f"{name} must be a whole number, not {value!r}") from None


def _require_model_folder(model: Path) -> Path:
    """`model` resolved, or exit with a clear error when it has no ``config.json``."""
    model = model.resolve()
    if not (model / "config.json").is_file():
        raise SystemExit(
            f"{model} is not a Hugging Face model folder (no config.json): give a local model path"
        )
    return model


def _real_base(model: Path) -> Path:
    """MODEL_DIR checked: an HF model folder whose tokenizer has a chat template (a clear error otherwise)."""
    from transformers import AutoTokenizer

    from ratchet_core.chat_format import ChatTemplateError, chat_template

    model = _require_model_folder(model)
    try:
        chat_template(AutoTokenizer.from_pretrained(model))
    except ChatTemplateError as exc:
        raise SystemExit(f"{model}: {exc}") from None
    return model


def _golden_rows(golden: list, per_task: int) -> list[dict]:
    """The first `per_task` golden requests of each task (0 = all), in the golden set's order."""
    taken: dict[str, int] = {}
    rows = []
    for g in golden:
        if per_task and taken.get(g.task, 0) >= per_task:
            continue
        taken[g.task] = taken.get(g.task, 0) + 1
        rows.append(
            {"task": g.task, "messages": g.messages, "tools": g.tools, "response_format": g.response_format}
        )
    return rows


def build(work: Path, model: Path | None = None) -> dict:
    """Step 1 (module docstring); returns what it wrote to ``WORK/check.json``."""
    if model is not None:
        _require_model_folder(model)  # before the imports below (seconds): a wrong path fails at once
    from ratchet_assets.night.adapter import NIGHT_TRAINING
    from ratchet_assets.night.evaluate import load_golden
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_assets.release.vllm_compat import vllm_compatible
    from ratchet_core.chatml_base import build_chatml_base

    work.mkdir(parents=True, exist_ok=True)
    base = _real_base(model) if model else build_chatml_base(work / "base")
    max_len, max_rank = _env_int("MAX_MODEL_LEN", 0), _env_int("MAX_LORA_RANK", 32)
    threads = os.cpu_count() or 1  # a host of its own: every core (the night's 1 is for a shared CPU)
    lake, art = work / "lake", work / "artifacts"
    write_day(lake, DAY, 600, seed=7, workload="mixed", student_share=0.0)
    consolidate_traffic(lake, art, DAY)
    build_examples(art, DAY)
    split_golden(art, DAY, share=0.2)
    train = build_training_set(art, DAY).path
    if model:
        steps, batch = _env_int("TRAIN_STEPS", 12), 8
        config = LoraTrainConfig(
            epochs=1, min_steps=steps, batch_size=batch, max_len=max_len, num_threads=threads
        )
        lines = Path(train).read_text(encoding="utf-8").splitlines()[: steps * batch]
        train = work / "train-subset.jsonl"
        train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        config = dataclasses.replace(NIGHT_TRAINING, max_len=max_len, num_threads=threads)
    result = train_lora(base, train, work / "adapter", config)
    print(f"trained {result.steps} steps on {result.examples} rows in {result.seconds:.0f} s", flush=True)
    fit = vllm_compatible(work / "adapter", base, max_rank=max_rank)
    if not fit.ok:
        raise SystemExit(str(fit))
    per_task = _env_int("ROWS_PER_TASK", 8 if model else 0)
    check = {
        "base": str(base),
        "real_model": model is not None,
        "adapter": str(work / "adapter"),
        "training": {
            "steps": result.steps,
            "examples": result.examples,
            "rows_left_out": result.rows_left_out,
            "final_loss": result.final_loss,
        },
        "golden": _golden_rows(load_golden(art, DAY), per_task),
    }
    (work / CHECK_FILE).write_text(json.dumps(check), encoding="utf-8")
    return check


def _body(row: dict) -> dict:
    """The request as the gateway sends it to the student."""
    from ratchet_gateway.chat.student_format import student_request

    body = {"messages": row["messages"]}
    body.update({k: row[k] for k in ("tools", "response_format") if row.get(k)})
    return student_request(body)


def _tokenize(client: Any, url: str, body: dict) -> list[int]:
    request = {"model": ADAPTER_NAME, "messages": body["messages"], "add_generation_prompt": True}
    if body.get("tools"):
        request["tools"] = body["tools"]
    resp = client.post(f"{url}/tokenize", json=request, timeout=120)
    resp.raise_for_status()
    return list(resp.json()["tokens"])


def _ask(client: Any, url: str, body: dict) -> tuple[dict, bool]:
    """The answer to `body` and whether its tool calls came back structured (before the text is read)."""
    from ratchet_gateway.chat.student_format import read_tool_calls

    most = _env_int("MAX_TOKENS", 160)
    request = {**body, "model": ADAPTER_NAME, "temperature": 0, "max_tokens": most, "logprobs": True}
    resp = client.post(f"{url}/v1/chat/completions", json=request, timeout=600)
    resp.raise_for_status()
    data = resp.json()
    structured = bool(data["choices"][0]["message"].get("tool_calls"))
    read_tool_calls(body, data)
    return data, structured


def _said(data: dict) -> tuple:
    message = data["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    return (
        message.get("content") or "",
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls],
    )


def _format_ok(body: dict, data: dict) -> bool:
    import jsonschema

    message = data["choices"][0]["message"]
    if body.get("response_format"):
        try:
            jsonschema.validate(
                json.loads(message.get("content") or ""), body["response_format"]["json_schema"]["schema"]
            )
        except (ValueError, jsonschema.ValidationError):
            return False
    if body.get("tools") and message.get("tool_calls"):
        names = {t["function"]["name"] for t in body["tools"]}
        return all(c["function"]["name"] in names for c in message["tool_calls"])
    return True


def _logprobs(data: dict) -> list[tuple[str, float]]:
    content = (data["choices"][0].get("logprobs") or {}).get("content") or []
    return [(t["token"], t["logprob"]) for t in content]


def _first_difference(tokenizer: Any, ids: dict[str, list[int]]) -> dict:
    """Where the token id lists first differ, and each one's text from a few tokens before there."""
    lists = list(ids.values())
    at = next(
        (i for i in range(max(map(len, lists))) if len({tuple(x[i : i + 1]) for x in lists}) > 1),
        min(map(len, lists)),
    )
    return {
        "position": at,
        "lengths": {k: len(v) for k, v in ids.items()},
        "text_from": {k: tokenizer.decode(v[max(0, at - 4) : at + 12]) for k, v in ids.items()},
    }


def _load(vllm: Any, url: str, adapter: str) -> list[str]:
    """Load the adapter and check vLLM lists it; the failures."""
    r = vllm.post(f"{url}/v1/load_lora_adapter", json={"lora_name": ADAPTER_NAME, "lora_path": adapter})
    if r.status_code != 200:
        raise SystemExit(f"vLLM refused the adapter: HTTP {r.status_code} {r.text}")
    listed = {m["id"] for m in vllm.get(f"{url}/v1/models").json()["data"]}
    return [] if ADAPTER_NAME in listed else [f"the loaded adapter is not in /v1/models: {sorted(listed)}"]


def _unload(vllm: Any, url: str, body: dict) -> tuple[dict, list[str]]:
    """Unload the adapter; vLLM must no longer list or serve it. What it answered, and the failures."""
    r = vllm.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": ADAPTER_NAME})
    listed = {m["id"] for m in vllm.get(f"{url}/v1/models").json()["data"]}
    after = vllm.post(f"{url}/v1/chat/completions", json={**body, "model": ADAPTER_NAME, "max_tokens": 4})
    seen = {
        "unload_status": r.status_code,
        "listed_after": ADAPTER_NAME in listed,
        "asked_after": after.status_code,
    }
    failures = []
    if r.status_code != 200:
        failures.append(f"unloading the adapter: HTTP {r.status_code} {r.text}")
    if ADAPTER_NAME in listed or after.status_code != 404:
        failures.append(f"the unloaded adapter is still served: {seen}")
    return seen, failures


def compare(work: Path, vllm_url: str, api_key: str = "") -> int:
    """Step 2 (module docstring); 0 when every check passed, 1 otherwise."""
    import httpx
    from transformers import AutoTokenizer

    from ratchet_core.chat_encoding import encode
    from ratchet_core.chat_format import render_prompt
    from ratchet_gateway.student_server.app import create_app
    from tests.serve import serve_in_thread

    check = json.loads((work / CHECK_FILE).read_text(encoding="utf-8"))
    base, adapter = Path(check["base"]), check["adapter"]
    tokenizer = AutoTokenizer.from_pretrained(base)
    vllm = httpx.Client(headers={"Authorization": f"Bearer {api_key}"} if api_key else {}, timeout=120)
    version = vllm.get(f"{vllm_url}/version")
    failures = _load(vllm, vllm_url, adapter)
    rows = []
    with serve_in_thread(create_app(base, adapters={ADAPTER_NAME: adapter})) as ratchet_url:
        ratchet = httpx.Client(timeout=120)
        for i, row in enumerate(check["golden"]):
            body = _body(row)
            ids = {
                "ratchet": encode(tokenizer, render_prompt(tokenizer, body["messages"], body.get("tools"))),
                "server": _tokenize(ratchet, ratchet_url, body),
                "vllm": _tokenize(vllm, vllm_url, body),
            }
            (a, native), (b, _) = _ask(vllm, vllm_url, body), _ask(ratchet, ratchet_url, body)
            lp_a, lp_b = _logprobs(a), _logprobs(b)
            same_tokens = [(x, y) for x, y in zip(lp_a, lp_b, strict=False) if x[0] == y[0]]
            worst = max((abs(x[1] - y[1]) for x, y in same_tokens), default=0.0)
            usage = [a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"]]
            same_ids = ids["ratchet"] == ids["server"] == ids["vllm"]
            result = {
                "task": row["task"],
                "prompt_tokens": len(ids["ratchet"]),
                "prompt_ids_equal": same_ids,
                "usage_prompt_tokens": {"vllm": usage[0], "server": usage[1]},
                "same_answer": _said(a) == _said(b),
                "answers": {"vllm": _said(a), "server": _said(b)},
                "vllm_tool_calls_structured": native,
                "finish": {
                    "vllm": a["choices"][0]["finish_reason"],
                    "server": b["choices"][0]["finish_reason"],
                },
                "max_logprob_diff": worst,
                "format_ok": {"vllm": _format_ok(body, a), "server": _format_ok(body, b)},
            }
            if not same_ids:
                result["prompt_ids_difference"] = _first_difference(tokenizer, ids)
                failures.append(f"row {i}: the prompt token ids differ {result['prompt_ids_difference']}")
            if set(usage) != {len(ids["ratchet"])}:
                failures.append(f"row {i}: usage.prompt_tokens {usage}, rendered {len(ids['ratchet'])}")
            if worst > LOGPROB_TOLERANCE:
                failures.append(f"row {i}: logprobs differ by {worst:.3f} on the same tokens")
            if result["same_answer"] and len(set(result["format_ok"].values())) > 1:
                failures.append(f"row {i}: the same answer has another format: {result}")
            rows.append(result)
    unload, unload_failures = _unload(vllm, vllm_url, _body(check["golden"][0]))
    failures += unload_failures
    agreement = sum(r["same_answer"] for r in rows) / max(1, len(rows))
    if agreement < MIN_AGREEMENT:
        failures.append(f"only {agreement:.1%} of the answers agree (at least {MIN_AGREEMENT:.0%})")

    def per_task(key: str) -> dict[str, str]:
        tasks = sorted({r["task"] for r in rows})
        return {
            t: f"{sum(bool(r[key]) for r in rows if r['task'] == t)}/{sum(r['task'] == t for r in rows)}"
            for t in tasks
        }

    summary = {
        "endpoint": {
            "url": vllm_url,
            "version": version.json().get("version") if version.status_code == 200 else None,
        },
        "base": check["base"],
        "real_model": check["real_model"],
        "training": check["training"],
        "prompt_ids_equal": per_task("prompt_ids_equal"),
        "same_answer": per_task("same_answer"),
        "vllm_tool_calls_structured": per_task("vllm_tool_calls_structured"),
        "agreement": agreement,
        "max_logprob_diff": max((r["max_logprob_diff"] for r in rows), default=0.0),
        "unload": unload,
        "failures": failures,
    }
    (work / "report.json").write_text(json.dumps({**summary, "rows": rows}, indent=2), encoding="utf-8")
    print(json.dumps({**summary, "failures": failures[:20]}, indent=2))
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    if len(argv) in (2, 3) and argv[0] == "build":
        build(Path(argv[1]), Path(argv[2]) if len(argv) == 3 and argv[2] else None)
        return 0
    if len(argv) in (3, 4) and argv[0] == "compare":
        return compare(Path(argv[1]), argv[2].rstrip("/"), argv[3] if len(argv) == 4 else "")
    print(
        "usage: python infra/vllm/gpu_check.py build WORK [MODEL_DIR] | compare WORK VLLM_URL [API_KEY]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
