"""The reconciler with the artifacts in an object store (moto's S3 server): an adapter its cache lacks is fetched
from the store and loaded by local path (vLLM on a volume shared with the cache), or, with from_store, the student
server is given the s3:// URL and its digest and downloads the adapter itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

VERSION = "v1-0badc0de"


def _adapter(base: Path, out: Path) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).save_pretrained(out)
    return out


def test_reconciler_loads_an_adapter_that_lives_in_the_store(s3_env, tmp_path: Path) -> None:
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.release.adapters import EFFECT_TYPE, reconcile_endpoint
    from ratchet_core.artifact_store import ArtifactStore
    from ratchet_core.control_db import make_engine
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app
    from ratchet_stats.certificate import adapter_dir_digest
    from tests.serve import serve_in_thread

    url = f"s3://{s3_env.new_bucket()}/artifacts"
    base = ensure_demo_base(tmp_path / "base")
    trainer = ArtifactStore(url, tmp_path / "trainer-cache")  # the machine that trained it
    digest = adapter_dir_digest(_adapter(base, trainer.cache / "adapters" / VERSION))
    assert f"adapters/{VERSION}/adapter_config.json" in trainer.sync_up()
    shutil.rmtree(trainer.cache)

    effects = EffectLedger(make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}"))
    desired = {VERSION: ["tickets"]}
    with serve_in_thread(create_app(base, adapter_cache=tmp_path / "student-cache")) as student:
        # default: fetched into the reconciler's (empty) cache, loaded by that path
        cache = tmp_path / "reconciler-cache"
        store = ArtifactStore(url, cache)
        report = reconcile_endpoint(student + "/v1", "", desired, cache, effects, {}, store)
        assert report.loaded == [VERSION] and not report.missing, report.summary()
        assert (cache / "adapters" / VERSION / "adapter_config.json").is_file()
        [rec] = effects.list_effects(effect_type=EFFECT_TYPE)
        assert rec.fingerprint == digest

        # from_store: the endpoint gets the s3:// URL (a second server: the first already holds the version)
    with serve_in_thread(create_app(base, adapter_cache=tmp_path / "student-cache")) as student2:
        empty = tmp_path / "empty-cache"
        report = reconcile_endpoint(
            student2 + "/v1", "", desired, empty, effects, {}, ArtifactStore(url, empty), from_store=True
        )
        assert report.loaded == [VERSION] and not report.missing, report.summary()
        models = httpx.get(student2 + "/v1/models", timeout=10).json()["data"]
        assert VERSION in {m["id"] for m in models}
        [cached] = [p for p in (tmp_path / "student-cache").iterdir() if not p.name.startswith(".")]
        assert cached.name.endswith(VERSION) and adapter_dir_digest(cached) == digest
        paths = {(r.result or {}).get("path") for r in effects.list_effects(effect_type=EFFECT_TYPE)}
        assert f"{url}/adapters/{VERSION}" in paths
