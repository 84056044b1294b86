"""The GPU check's comparison (``infra/vllm/gpu_check.py compare``), run as its one command against an endpoint with
vLLM's API: a second Ratchet student server stands in for vLLM, so everything but vLLM itself is proven here on
CPU (the adapter loaded and unloaded over HTTP, prompt token ids from both ``/tokenize`` routes and Ratchet's own
render, answers, logprobs, formats, the JSON report). A stand-in whose template renders one character differently
is caught by its token ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_core.workloads import get_workload
from tests.serve import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "infra" / "vllm" / "gpu_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    # short answers: the random base writes until max_tokens, and both servers are on this CPU
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MAX_TOKENS": "24"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def work(chatml_base, tmp_path_factory) -> Path:
    """What `build` leaves for `compare`: the base, a small adapter trained on it, golden requests of each task."""
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora
    from tests.student.bases import write_train_jsonl

    work = tmp_path_factory.mktemp("gpu-check")
    train = write_train_jsonl(get_workload("tickets").generate(16, seed=2), work / "train.jsonl")
    config = LoraTrainConfig(rank=4, alpha=8, epochs=1, min_steps=0, num_threads=1)
    train_lora(chatml_base, train, work / "adapter", config)
    golden = [
        {"task": task, "messages": e.messages, "tools": e.tools, "response_format": e.response_format}
        for task in ("tickets", "extract", "tools")
        for e in get_workload(task).generate(2, seed=5)
    ]
    check = {
        "base": str(chatml_base),
        "real_model": False,
        "adapter": str(work / "adapter"),
        "training": {},
        "golden": golden,
    }
    (work / "check.json").write_text(json.dumps(check), encoding="utf-8")
    return work


def test_the_gpu_check_compares_an_endpoint_with_vllms_api(work, chatml_base) -> None:
    from ratchet_gateway.student_server.app import create_app

    with serve_in_thread(create_app(chatml_base)) as url:
        done = _run("compare", str(work), url)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        models = {m["id"] for m in json.loads(_models(url))["data"]}
        _tokenize_is_vllms(url, chatml_base)
    report = json.loads((work / "report.json").read_text())
    assert report["failures"] == [] and report["agreement"] == 1.0
    assert report["prompt_ids_equal"] == {"extract": "2/2", "tickets": "2/2", "tools": "2/2"}
    assert {r["usage_prompt_tokens"]["vllm"] for r in report["rows"]} == {
        r["prompt_tokens"] for r in report["rows"]
    }
    # templated tool prompts are the long ones
    lengths = {r["task"]: r["prompt_tokens"] for r in report["rows"]}
    assert lengths["tools"] > 2 * lengths["tickets"]
    assert report["unload"] == {"unload_status": 200, "listed_after": False, "asked_after": 404}
    assert "v1-gpu-check" not in models


def _models(url: str) -> str:
    import httpx

    return httpx.get(url + "/v1/models").text


def _tokenize_is_vllms(url: str, base: Path) -> None:
    """The student server's /tokenize answers vLLM's other forms too: a plain prompt (special tokens added, as
    vLLM's default for a prompt), and refuses what it cannot render as its chat route does."""
    import httpx
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    got = httpx.post(url + "/tokenize", json={"prompt": "<|im_start|>user\nhello"}).json()
    assert got["tokens"] == tokenizer("<|im_start|>user\nhello")["input_ids"] and got["count"] == len(
        got["tokens"]
    )
    assert got["max_model_len"] == 2048
    messages = [{"role": "user", "content": "hello"}]
    for body, status in [
        ({"prompt": "x", "messages": messages}, 400),
        ({"messages": messages, "add_generation_prompt": False}, 400),
        ({"messages": messages, "model": "no-such-adapter"}, 404),
    ]:
        assert httpx.post(url + "/tokenize", json=body).status_code == status, body


def test_a_template_one_character_apart_fails_the_gpu_check(work, chatml_base, tmp_path) -> None:
    import shutil

    from ratchet_gateway.student_server.app import create_app

    other = shutil.copytree(chatml_base, tmp_path / "other-template")
    config_file = other / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    generation_prompt = "'<|im_start|>assistant\\n'"
    assert config["chat_template"].count(generation_prompt) == 1
    config["chat_template"] = config["chat_template"].replace(
        generation_prompt, "'<|im_start|>assistant \\n'"
    )
    config_file.write_text(json.dumps(config))
    with serve_in_thread(create_app(other)) as url:
        done = _run("compare", str(work), url)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((work / "report.json").read_text())
    assert report["prompt_ids_equal"] == {"extract": "0/2", "tickets": "0/2", "tools": "0/2"}
    difference = report["rows"][0]["prompt_ids_difference"]
    assert difference["position"] == report["rows"][0]["prompt_tokens"] - 1  # at the generation prompt's end
    assert any("the prompt token ids differ" in f for f in report["failures"])


def test_the_gpu_check_refuses_a_model_folder_it_cannot_serve(tmp_path) -> None:
    (tmp_path / "not-a-model").mkdir()
    done = _run("build", str(tmp_path / "work"), str(tmp_path / "not-a-model"))
    assert done.returncode == 1 and "is not a Hugging Face model folder" in done.stderr
    assert _run("nonsense").returncode == 2
