"""Adapters kept loaded: the `adapter_reconciler` sensor against a real `ratchet student-server` process, killed
with SIGKILL and restarted, behind a real gateway (demo teacher on loopback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import httpx
import openai
import pytest

from ratchet_assets.release import registry
from ratchet_assets.release.adapters import desired_versions
from ratchet_core import manifest as mf
from ratchet_core.control_db import ensure_schema
from tests.serve import free_port, serve_in_thread

pytestmark = pytest.mark.slow

LIVE, OLD, CANDIDATE = "v2-live", "v1-old", "v3-cand"
STUDENT_KEY = "sk-student-0123456789abcdef"  # the student server always requires a bearer key
AUTH = {"Authorization": f"Bearer {STUDENT_KEY}"}


def make_adapter(base: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter on the demo base whose student ends every answer at once (EOS, finish_reason "stop").

    Every token embeds to one vector, so the last hidden state is one vector h whatever the prompt, and the saved
    lm_head scores EOS highest on h. The gateway's answer guard serves such an (empty) answer, where an untrained
    adapter would run to max_tokens and be cascaded to the teacher as cut by length.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    eos = AutoTokenizer.from_pretrained(base).eos_token_id
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.copy_(emb[seed % emb.shape[0]].clone().expand_as(emb))
        h = model.model(input_ids=torch.tensor([[5, 6, 7]])).last_hidden_state[0, -1]
        head = model.get_output_embeddings().weight
        head.zero_()
        head[eos] = h / h.norm() * 50
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], modules_to_save=["embed_tokens", "lm_head"])
    get_peft_model(model, config).save_pretrained(out)
    return out


def start_student(base: Path, port: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    cmd = [
        sys.executable,
        "-m",
        "ratchet_cli.main",
        "student-server",
        "--base",
        str(base),
        "--port",
        str(port),
        "--api-key",
        STUDENT_KEY,
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-2000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"student server did not start: {log.read_text()[-2000:]}")


def loaded(url: str) -> set[str]:
    return {
        m["id"]
        for m in httpx.get(f"{url}/models", headers=AUTH, timeout=10).json()["data"]
        if m.get("parent")
    }


def test_desired_versions_are_what_the_manifest_serves():
    m = mf.Manifest(
        tasks={
            "a": mf.TaskRelease(stage="canary", version="v3", previous_live="v2"),
            "b": mf.TaskRelease(stage="live", version="v2", previous_live="v1"),
            "c": mf.TaskRelease(stage="teacher", version="v0"),
        }
    )
    assert desired_versions(m) == {"v1": ["b"], "v2": ["a", "b"], "v3": ["a"]}


def until(condition, attempts: int, pause_s: float, why: str) -> None:
    """Poll `condition` (a loopback HTTP call) until it holds; after `attempts` tries, fail saying `why`."""
    for _ in range(attempts):
        if condition():
            return
        time.sleep(pause_s)
    raise AssertionError(why)


def test_killed_student_server_serves_the_live_version_again_after_the_next_reconcile(tmp_path, key):
    """The daemon evaluates the sensor every RECONCILE_SECONDS (30 s): the test makes those evaluations itself, so
    "again within 60 s" is one interval (checked) plus the one evaluation after the restart that reloads it."""
    from ratchet_assets.definitions import defs as load_defs
    from ratchet_assets.defs.release_sensors import RECONCILE_SECONDS, StudentEndpoints
    from ratchet_assets.defs.resources import night_resources
    from ratchet_core.control_db import make_engine
    from ratchet_core.settings import Settings
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.app import GatewayOptions, create_app
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig
    from ratchet_gateway.demo_teacher.app import create_app as teacher_app
    from ratchet_stats.keys import private_key_b64

    home = tmp_path / "home"
    artifacts = home / "artifacts"
    base = ensure_demo_base(tmp_path / "base")
    for i, version in enumerate((OLD, LIVE, CANDIDATE)):
        make_adapter(base, artifacts / "adapters" / version, seed=i)
    engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
    ensure_schema(engine)
    with engine.begin() as conn:
        registry.set_status(conn, OLD, "tickets", "retired", "teacher", "replaced by v2-live")
        registry.set_status(conn, CANDIDATE, "tickets", "candidate", "teacher", "certified tonight")
    mf.publish(
        engine,
        key,
        lambda m: m.tasks.update(tickets=mf.TaskRelease(stage="live", version=LIVE, threshold=0.0)),
        "v2 is live",
        "ops",
    )

    port = free_port()
    student_url = f"http://127.0.0.1:{port}/v1"
    log = tmp_path / "student.log"
    proc = start_student(base, port, log)
    procs = [proc]
    try:
        for version in (OLD, CANDIDATE):  # loaded by earlier nights' evaluations
            r = httpx.post(
                f"{student_url}/load_lora_adapter",
                json={"lora_name": version, "lora_path": str(artifacts / "adapters" / version)},
                headers=AUTH,
                timeout=120,
            )
            assert r.status_code == 200, r.text

        code_location = load_defs()
        resources = {
            **night_resources(home=home, signing_key=private_key_b64(key)),
            "student_endpoints": StudentEndpoints(urls=student_url, api_key=STUDENT_KEY),
        }
        sensor = code_location.resolve_sensor_def("adapter_reconciler")
        assert sensor.minimum_interval_seconds == RECONCILE_SECONDS == 30
        cursor: list[str | None] = [None]

        def tick():  # one evaluation, as `dagster-daemon` makes every minimum interval
            with dg.DagsterInstance.ephemeral() as instance:
                ctx = dg.build_sensor_context(instance=instance, cursor=cursor[0], resources=resources)
                result = sensor(ctx)
                cursor[0] = result.cursor
                return result

        first = tick()
        assert loaded(student_url) == {LIVE, CANDIDATE}  # live loaded, retired unloaded, candidate left alone
        text = first.skip_reason.skip_message
        assert f"loaded {LIVE}" in text and f"unloaded {OLD}" in text and f"also loaded: {CANDIDATE}" in text
        (obs,) = first.asset_events
        assert obs.metadata["adapters_missing"].value == 0 and obs.metadata["adapters_loaded_now"].value == 1

        settings = Settings(
            home=home,
            api_keys="app:sk-app-0123456789abcdef",
            teacher_model="openai/demo-teacher",
            teacher_api_key="sk-teacher",
            student_base_url=student_url,
            student_api_key=STUDENT_KEY,
            segment_seconds=3600,
            manifest_poll_seconds=0.2,
            student_timeout_s=60,
        )
        with serve_in_thread(teacher_app(DemoTeacherConfig(model="demo-teacher"))) as teacher:
            settings = settings.model_copy(update={"teacher_api_base": teacher + "/v1"})
            gateway = create_app(settings, GatewayOptions(replica="gw", public_keys=[key.public_key()]))
            with serve_in_thread(gateway) as gw_url:
                client = openai.OpenAI(
                    base_url=gw_url + "/v1", api_key="sk-app-0123456789abcdef", max_retries=0, timeout=90
                )

                def served_by() -> tuple[str, str]:
                    raw = client.chat.completions.with_raw_response.create(
                        model="ratchet",
                        messages=[{"role": "user", "content": "Label: my parcel is late"}],
                        max_tokens=4,
                        extra_headers={"X-Ratchet-Task": "tickets"},
                    )
                    return raw.headers["x-ratchet-served-by"], raw.headers["x-ratchet-version"]

                live = ("student", LIVE)
                until(lambda: served_by() == live, 120, 0.5, "the gateway never served the live version")

                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                down = tick()  # drift is reported while the endpoint is gone
                assert "unreachable" in down.skip_reason.skip_message
                assert down.asset_events[0].metadata["adapters_missing"].value == 1
                assert served_by() == (
                    "teacher",
                    "teacher",
                )  # meanwhile the gateway falls back to the teacher

                proc = start_student(base, port, log)
                procs.append(proc)
                assert loaded(student_url) == set()  # a fresh process holds no adapter
                assert served_by() == ("teacher", "teacher")  # nothing reloads it before the next evaluation
                again = tick()
                assert f"loaded {LIVE}" in again.skip_reason.skip_message
                assert loaded(student_url) == {LIVE}
                until(
                    lambda: served_by() == live, 120, 0.5, "not served by the student again after the reload"
                )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    from ratchet_assets.effects import EffectLedger

    done = EffectLedger(engine).list_effects(effect_type="adapter.load", status="done")
    assert sorted(e.key.rsplit("#", 1)[1] for e in done) == ["1", "2"]  # the restart was a new target
