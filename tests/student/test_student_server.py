"""End to end: train a tickets adapter, load it into a running student server, query it with the openai client."""

from __future__ import annotations

import math
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import NotFoundError, OpenAI

from ratchet_core.workloads import TASKS, compare
from ratchet_gateway.student_server.app import create_app
from tests.serve import serve_in_thread

pytestmark = pytest.mark.slow

ADAPTER = "v1-tickets"


@pytest.fixture(scope="module")
def server(demo_base, trained_adapter):
    with serve_in_thread(create_app(demo_base, max_batch=8)) as url:
        r = httpx.post(
            f"{url}/v1/load_lora_adapter",
            json={"lora_name": ADAPTER, "lora_path": str(trained_adapter[0].adapter_dir)},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        yield url


def _client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_training_reports_progress_and_writes_peft_files(trained_adapter):
    result, progress = trained_adapter
    assert [p[0] for p in progress] == list(range(1, result.steps + 1))
    assert all(total == result.steps for _, total, _ in progress)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(result.files)
    first = sum(loss for _, _, loss in progress[:5]) / 5
    assert result.final_loss < first / 4  # it learnt something


def test_adapter_answers_held_out_tickets(server, tickets_split):
    client = _client(server)
    held_out = tickets_split[1]

    def ask(example):
        res = client.chat.completions.create(
            model=ADAPTER,
            messages=example.messages,
            max_tokens=24,
            temperature=0,
            logprobs=True,
            top_logprobs=2,
        )
        return example, res

    with ThreadPoolExecutor(8) as pool:  # concurrent: exercises the batcher too
        answers = list(pool.map(ask, held_out))
    correct = sum(
        compare(TASKS["tickets"].comparator, e.expected, r.choices[0].message.model_dump())
        for e, r in answers
    )
    assert correct / len(held_out) >= 0.90, f"exact match {correct}/{len(held_out)}"
    _, res = answers[0]
    content = res.choices[0].message.content
    tokens = res.choices[0].logprobs.content
    assert bytes(b for t in tokens for b in t.bytes).decode() == content
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in tokens)
    assert all(t.top_logprobs[0].logprob >= t.logprob - 1e-6 for t in tokens)
    assert res.usage.completion_tokens == len(tokens) + 1  # + EOS
    assert math.exp(sum(t.logprob for t in tokens) / len(tokens)) > 0.5


def test_streaming_matches_the_plain_answer(server, tickets_split):
    client = _client(server)
    example = tickets_split[1][0]
    plain = client.chat.completions.create(model=ADAPTER, messages=example.messages, max_tokens=24)
    chunks = list(
        client.chat.completions.create(
            model=ADAPTER,
            messages=example.messages,
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.total_tokens == plain.usage.total_tokens


def test_unknown_model_is_404_in_openai_shape(server):
    with pytest.raises(NotFoundError, match="The model `v9-nothing` does not exist."):
        _client(server).chat.completions.create(
            model="v9-nothing", messages=[{"role": "user", "content": "hi"}]
        )
    r = httpx.post(
        f"{server}/v1/chat/completions", json={"model": "v9-nothing", "messages": [{"role": "user"}]}
    )
    assert r.status_code == 404 and set(r.json()["error"]) >= {"message", "type", "code"}


def test_admin_api_errors(server, trained_adapter, tmp_path):
    path = str(trained_adapter[0].adapter_dir)
    again = httpx.post(f"{server}/v1/load_lora_adapter", json={"lora_name": ADAPTER, "lora_path": path})
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
    bad = httpx.post(f"{server}/v1/load_lora_adapter", json={"lora_name": "v2-x", "lora_path": str(tmp_path)})
    assert bad.status_code == 400 and "adapter_config.json" in bad.json()["error"]["message"]
    gone = httpx.post(f"{server}/v1/unload_lora_adapter", json={"lora_name": "v2-x"})
    assert gone.status_code == 404
    models = httpx.get(f"{server}/v1/models").json()["data"]
    entry = next(m for m in models if m["id"] == ADAPTER)
    assert entry["parent"] == models[0]["id"] and models[0]["parent"] is None


def test_serves_under_load_while_an_adapter_is_loaded_and_unloaded(
    server, trained_adapter, tickets_split, tmp_path
):
    spare = shutil.copytree(trained_adapter[0].adapter_dir, tmp_path / "spare")
    base_name = httpx.get(f"{server}/v1/models").json()["data"][0]["id"]
    messages = tickets_split[1][1].messages
    statuses: list[tuple[str, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def hammer(i: int) -> None:
        model = (ADAPTER, base_name, "v2-spare")[i % 3]
        with httpx.Client(timeout=120) as http:
            for _ in range(3):
                r = http.post(
                    f"{server}/v1/chat/completions",
                    json={"model": model, "messages": messages, "max_tokens": 8},
                )
                with lock:
                    statuses.append((model, r.status_code))

    churn_codes: list[int] = []

    def churn() -> None:
        with httpx.Client(timeout=120) as http:
            while not stop.is_set():
                for route, body in (
                    ("load_lora_adapter", {"lora_name": "v2-spare", "lora_path": str(spare)}),
                    ("unload_lora_adapter", {"lora_name": "v2-spare"}),
                ):
                    churn_codes.append(http.post(f"{server}/v1/{route}", json=body).status_code)

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(hammer, range(16)))
    finally:
        stop.set()
        churner.join()
    assert len(statuses) == 48
    assert churn_codes and set(churn_codes) == {200}, churn_codes
    assert all(code == 200 for model, code in statuses if model != "v2-spare"), statuses
    assert all(code in (200, 404) for model, code in statuses if model == "v2-spare"), statuses
    assert httpx.get(f"{server}/healthz").json()["adapters"] == [ADAPTER]


def test_api_key_is_required_when_set(demo_base):
    with serve_in_thread(create_app(demo_base, api_key="sk-student-test")) as url:
        denied = httpx.get(f"{url}/v1/models")
        assert denied.status_code == 401 and "sk-student-test" not in denied.text
        assert (
            httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer sk-student-test"}).status_code
            == 200
        )
        assert httpx.get(f"{url}/health").status_code == 200


def test_a_small_base_decodes_on_one_thread_and_a_large_one_on_torch_default(demo_base):
    """torch's other intra-op threads only spin between a tiny model's operations (engine.default_threads)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ratchet_gateway.student_server.engine import SMALL_MODEL_PARAMETERS, default_threads

    small = AutoModelForCausalLM.from_pretrained(demo_base)
    assert default_threads(small) == 1

    class Large(torch.nn.Module):  # parameters on the meta device: counted, never allocated
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(SMALL_MODEL_PARAMETERS, device="meta"))

    assert default_threads(Large()) == torch.get_num_threads()
