"""A whole night with the lake AND the artifacts on an S3-API server (moto, started by the test): traffic ->
examples -> golden_split -> training_set -> lora_adapter -> evaluation_certificate -> bom, and daily_receipt, with
RATCHET_ARTIFACTS_URL set. Then the local artifacts cache is wiped and everything is read back from the store:
`ratchet verify` of the receipt and the BOM by s3:// URL, `ratchet admin export-adapter`, a gateway's receipt proof,
and a student server that loads the adapter from its s3:// URL (downloaded, digest-checked) and answers with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ratchet_assets.defs.resources import RatchetPaths
from ratchet_core.lake import Lake
from tests.night.nights import LOW_TARGET, TINY_TRAINING, materialize_night

# Real (tiny) training: this is about where the evidence lives, not the adapter's quality
# (tests/night/test_night_e2e.py certifies a good one).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DAY = "2026-01-01"
ROWS = 90  # as tests/night/test_moved_home.py: the tiny training gets some golden answers right


def test_night_on_s3_then_everything_read_back_from_the_store(s3_env, tmp_path: Path, monkeypatch) -> None:
    from ratchet_assets.night.fixtures import write_day
    from ratchet_cli.main import cli as ratchet
    from ratchet_core.artifact_store import ArtifactStore
    from ratchet_core.settings import Settings
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.app import GatewayOptions
    from ratchet_gateway.app import create_app as gateway_app
    from ratchet_gateway.student_server.app import create_app as student_app
    from ratchet_stats.certificate import adapter_dir_digest
    from ratchet_stats.keys import generate_private_key, public_key_b64, save_private_key
    from ratchet_stats.receipt import check_proof
    from tests.serve import serve_in_thread

    bucket = s3_env.new_bucket()
    lake_url, art_url = f"s3://{bucket}/lake", f"s3://{bucket}/artifacts"
    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    pub = public_key_b64(key.public_key())
    staged = (
        tmp_path / "staged-lake"
    )  # fixture segments, published to the S3 lake as a gateway's sealer would
    lake = Lake(lake_url)
    for seg in write_day(staged, DAY, ROWS, seed=1, workload="tickets", student_share=0.0):
        lake.publish_bytes(seg.relative_to(staged).as_posix(), seg.read_bytes())
    base = ensure_demo_base(tmp_path / "models" / "demo-base")
    artifacts = home / "artifacts"

    paths = RatchetPaths(home=str(home), lake=lake_url, artifacts_url=art_url)
    with serve_in_thread(student_app(base, adapter_cache=tmp_path / "adapter-cache")) as student:
        result = materialize_night(
            home, DAY, None, student, training=TINY_TRAINING, certificate=LOW_TARGET, bom=True, receipt=True,
            paths=paths,
        )  # fmt: skip
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        version = json.loads((artifacts / "adapters" / f"day={DAY}" / "adapter.json").read_text())["version"]
        digest = adapter_dir_digest(artifacts / "adapters" / version)
        rows = pq.read_table(artifacts / "receipts" / DAY / "rows.parquet", columns=["request_id", "client"])
        rid = next(r for r, c in zip(*rows.to_pydict().values(), strict=True) if c == "acme")

        store = ArtifactStore(art_url, tmp_path / "unused")
        published = set(store._listing())
        for rel in (
            f"receipts/{DAY}/receipt.dsse.json",
            f"receipts/{DAY}/rows.parquet",
            f"boms/{version}/bom.dsse.json",
            f"certificates/{version}.dsse.json",
            f"adapters/{version}/adapter_config.json",
            f"train/day={DAY}/train.jsonl",
            "golden/registry.parquet",
        ):
            assert rel in published, rel
        assert not [r for r in published if "/." in r or r.startswith(".")]  # no staging or temp names

        shutil.rmtree(artifacts)  # the local cache is gone: the store is the source of truth

        # `ratchet verify` reads the signed files (and the files beside them) from the store
        runner = CliRunner()
        res = runner.invoke(
            ratchet, ["verify", "receipt", f"{art_url}/receipts/{DAY}/receipt.dsse.json", "--key", pub]
        )
        assert res.exit_code == 0, res.output
        res = runner.invoke(
            ratchet, ["verify", "bom", f"{art_url}/boms/{version}/bom.dsse.json", "--key", pub]
        )
        assert res.exit_code == 0, res.output
        res = runner.invoke(
            ratchet,
            [
                "verify",
                "bom",
                f"{art_url}/boms/{version}/bom.dsse.json",
                "--key",
                public_key_b64(generate_private_key().public_key()),
            ],
        )
        assert res.exit_code != 0  # a verification that can fail

        # `ratchet admin export-adapter` with an empty cache fetches the adapter and its BOM folder
        monkeypatch.setenv("RATCHET_HOME", str(home))
        monkeypatch.setenv("RATCHET_ARTIFACTS_URL", art_url)
        res = runner.invoke(
            ratchet,
            [
                "admin",
                "export-adapter",
                "--version",
                version,
                "--out",
                str(tmp_path / "export"),
                "--key",
                pub,
            ],
        )
        assert res.exit_code == 0, res.output
        assert (tmp_path / "export" / "adapter" / "adapter_config.json").is_file()

        # a gateway whose cache is empty serves a client's receipt proof from the store
        settings = Settings(
            home=tmp_path / "gw-home",
            api_keys="acme:sk-acme-0123456789",
            teacher_api_base="http://127.0.0.1:9/v1",
            artifacts_url=art_url,
        )
        with serve_in_thread(
            gateway_app(settings, GatewayOptions(replica="gw", public_keys=[key.public_key()]))
        ) as gw:
            proof = httpx.get(
                f"{gw}/ratchet/receipts/{DAY}/proof/{rid}",
                headers={"Authorization": "Bearer sk-acme-0123456789"},
                timeout=30,
            )
            assert proof.status_code == 200, proof.text
            envelope = json.loads(
                (tmp_path / "gw-home" / "artifacts" / "receipts" / DAY / "receipt.dsse.json").read_bytes()
            )
            import base64

            predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
            assert check_proof(predicate, proof.json())["request_id"] == rid

        # the student server loads the adapter from its s3:// URL: a wrong digest is refused, the right one loads
        load = f"{student}/v1/load_lora_adapter"
        url = f"{art_url}/adapters/{version}"
        bad = httpx.post(
            load,
            json={"lora_name": "from-store", "lora_path": url, "adapter_digest": "sha256:" + "0" * 64},
            timeout=120,
        )
        assert bad.status_code == 400 and "digest" in bad.text
        ok = httpx.post(
            load, json={"lora_name": "from-store", "lora_path": url, "adapter_digest": digest}, timeout=120
        )
        assert ok.status_code == 200, ok.text
        [cached] = [p for p in (tmp_path / "adapter-cache").iterdir() if not p.name.startswith(".")]
        assert adapter_dir_digest(cached) == digest
        answer = httpx.post(
            f"{student}/v1/chat/completions",
            json={
                "model": "from-store",
                "messages": [{"role": "user", "content": "My invoice is wrong"}],
                "max_tokens": 16,
            },
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]
