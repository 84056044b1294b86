"""The artifacts in an object store (RATCHET_ARTIFACTS_URL) on moto's S3 server: the local folder is a cache that
publishes what a step wrote and fetches what it lacks; signed files and adapters are written once."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratchet_core.artifact_store import ArtifactConflict, ArtifactStore, fetch_adapter, local_copy
from ratchet_core.layout import ArtifactLayout

DAY = "2026-01-01"


def _write(root: Path, rel: str, data: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_publish_fetch_and_write_once(s3_env, tmp_path: Path) -> None:
    url = f"s3://{s3_env.new_bucket()}/artifacts"
    a = ArtifactStore(url, tmp_path / "a")
    _write(a.cache, f"receipts/{DAY}/receipt.dsse.json", b'{"signed": 1}')
    _write(a.cache, "golden/registry.parquet", b"v1")
    _write(a.cache, "adapters/.staging-0123/adapter_config.json", b"{}")  # in progress: never travels
    _write(a.cache, "golden/.registry.lock", b"")
    assert a.sync_up() == ["golden/registry.parquet", f"receipts/{DAY}/receipt.dsse.json"]
    assert a.sync_up() == []  # nothing changed since

    # another machine, empty cache: everything comes down; hidden names never went up
    b = ArtifactStore(url, tmp_path / "b")
    assert b.sync_down() == ["golden/registry.parquet", f"receipts/{DAY}/receipt.dsse.json"]
    assert (b.cache / f"receipts/{DAY}/receipt.dsse.json").read_bytes() == b'{"signed": 1}'

    # a mutable file grows on machine b; a's unchanged copy is refreshed on its next sync_down
    _write(b.cache, "golden/registry.parquet", b"v2-longer")
    assert b.sync_up() == ["golden/registry.parquet"]
    assert a.sync_down() == ["golden/registry.parquet"]
    assert (a.cache / "golden/registry.parquet").read_bytes() == b"v2-longer"

    # a signed file republished with the same bytes is a no-op; with other bytes it is refused
    _write(b.cache, f"receipts/{DAY}/receipt.dsse.json", b'{"signed": 1}')
    assert b.sync_up() == []
    _write(b.cache, f"receipts/{DAY}/receipt.dsse.json", b'{"signed": 2}')
    with pytest.raises(ArtifactConflict, match="written once"):
        b.sync_up()
    assert a.fs.cat_file(a.key(f"receipts/{DAY}/receipt.dsse.json")) == b'{"signed": 1}'

    # a file this cache synced and then deleted (retention) is deleted from the store; others' files stay
    (a.cache / "golden/registry.parquet").unlink()
    assert a.sync_up() == ["-golden/registry.parquet"]
    assert not a.fs.exists(a.key("golden/registry.parquet"))
    assert a.fs.exists(a.key(f"receipts/{DAY}/receipt.dsse.json"))

    # readers: a layout with the store fetches an item the cache lacks; a missing one is not an error
    c = ArtifactLayout(tmp_path / "c", store=ArtifactStore(url, tmp_path / "c"))
    assert c.receipt_envelope(DAY).read_bytes() == b'{"signed": 1}'
    assert not c.receipt_envelope("2026-01-02").exists()
    # `ratchet verify s3://...`: a local copy with the files beside it
    assert local_copy(f"{url}/receipts/{DAY}/receipt.dsse.json").read_bytes() == b'{"signed": 1}'


def test_layout_without_store_is_a_plain_folder(tmp_path: Path) -> None:
    layout = ArtifactLayout(tmp_path)
    assert (
        layout.store is None
        and layout.receipt_envelope(DAY) == tmp_path / "receipts" / DAY / "receipt.dsse.json"
    )
    with pytest.raises(ValueError, match="RATCHET_ARTIFACTS_URL"):
        ArtifactLayout("s3://bucket/artifacts")


def test_adapter_download_is_digest_checked_and_whole(s3_env, tmp_path: Path) -> None:
    url = f"s3://{s3_env.new_bucket()}/artifacts"
    store = ArtifactStore(url, tmp_path / "art")
    _write(store.cache, "adapters/v1-abc/adapter_config.json", b'{"r": 8}')
    _write(store.cache, "adapters/v1-abc/adapter_model.safetensors", b"\x00weights")
    store.sync_up()
    with pytest.raises(ValueError, match="digest"):
        fetch_adapter(f"{url}/adapters/v1-abc", tmp_path / "cache", digest="sha256:" + "0" * 64)
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-downloaded stays
    folder = fetch_adapter(f"{url}/adapters/v1-abc", tmp_path / "cache")
    assert (folder / "adapter_model.safetensors").read_bytes() == b"\x00weights"
    assert fetch_adapter(f"{url}/adapters/v1-abc", tmp_path / "cache") == folder  # one copy per content
    with pytest.raises(FileNotFoundError):
        fetch_adapter(f"{url}/adapters/v9-none", tmp_path / "cache")


def test_config_check_probes_the_artifacts_store(s3_env, tmp_path: Path) -> None:
    from ratchet_cli.config_probe import probe_all
    from ratchet_core.settings import Settings

    url = f"s3://{s3_env.new_bucket()}/artifacts"
    probes = {p.name: p for p in probe_all(Settings(home=tmp_path, artifacts_url=url))}
    assert probes["artifacts store"].ok is True and "reachable" in probes["artifacts store"].detail
    missing = {
        p.name: p for p in probe_all(Settings(home=tmp_path, artifacts_url="s3://no-such-bucket-x1/a"))
    }
    assert missing["artifacts store"].ok is False
    assert "artifacts store" not in {p.name for p in probe_all(Settings(home=tmp_path))}
