"""The artifact layout (ratchet_core.layout): every path, spelled out here once so a change to the tree is deliberate."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratchet_core.layout import BOM_FILES, AdapterExport, ArtifactLayout

D, V = "2026-01-02", "v3-1a2b3c4d"


def test_every_path_under_the_root(tmp_path):
    a = ArtifactLayout(str(tmp_path))
    expected = {
        a.traffic_file(D): f"traffic/day={D}/traffic.parquet",
        a.traffic_segments(D): f"traffic/day={D}/segments.json",
        a.examples_file(D): f"examples/day={D}/examples.parquet",
        a.golden_registry(): "golden/registry.parquet",
        a.golden_registry_lock(): "golden/.registry.lock",
        a.golden_file(D): f"golden/day={D}/golden.parquet",
        a.golden_keys(D): f"golden/day={D}/keys.txt",
        a.golden_commitment(D): f"golden/day={D}/commitment.json",
        a.train_jsonl(D): f"train/day={D}/train.jsonl",
        a.train_keys(D): f"train/day={D}/keys.txt",
        a.train_commitment(D): f"train/day={D}/commitment.json",
        a.adapter_dir(V): f"adapters/{V}",
        a.adapter_pointer(D): f"adapters/day={D}/adapter.json",
        a.adapter_staging("0123456789abcdef0123"): "adapters/.staging-0123456789abcdef",
        a.certificate(V): f"certificates/{V}.dsse.json",
        a.certificate_predicate(V): f"certificates/{V}.predicate.json",
        a.bom(V): f"boms/{V}/bom.dsse.json",
        a.bom_notice(V): f"boms/{V}/NOTICE.md",
        a.bom_certificate(V): f"boms/{V}/certificate.dsse.json",
        a.bom_train_keys(V): f"boms/{V}/train-keys.txt",
        a.bom_golden_keys(V): f"boms/{V}/golden-keys.txt",
        a.bom_disjoint_proof(V): f"boms/{V}/disjoint.proof.json",
        a.receipt_envelope(D): f"receipts/{D}/receipt.dsse.json",
        a.receipt_rows(D): f"receipts/{D}/rows.parquet",
        a.receipt_tree(D): f"receipts/{D}/tree.bin",
    }
    for path, rel in expected.items():
        assert isinstance(path, Path)
        assert path == tmp_path / rel
    export = AdapterExport(tmp_path / "out")
    assert export.adapter_dir == tmp_path / "out" / "adapter"
    assert [export.file(n).name for n in BOM_FILES] == list(BOM_FILES)
    with pytest.raises(ValueError):
        export.file("rows.parquet")


def test_listings_see_only_complete_artifacts(tmp_path):
    a = ArtifactLayout(tmp_path)
    assert a.days("examples") == [] and a.receipt_days() == [] and a.adapter_versions() == []
    for d in ("2026-01-01", "2026-01-03", "2026-01-02"):
        a.examples_file(d).parent.mkdir(parents=True)
    for d in ("2026-01-01", "2026-01-03"):
        a.examples_file(d).write_bytes(b"x")
    assert a.days("examples") == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert a.examples_files(until="2026-01-02") == [a.examples_file("2026-01-01")]
    a.receipt_dir("2026-01-01").mkdir(parents=True)  # a receipt folder without its signed envelope
    a.receipt_dir("2026-01-02").mkdir(parents=True)
    a.receipt_envelope("2026-01-02").write_text("{}")
    assert a.receipt_days() == ["2026-01-02"]
    a.adapter_dir(V).mkdir(parents=True)
    a.adapter_staging("f" * 64).mkdir(parents=True)
    assert a.adapter_versions() == []  # no adapter_config.json yet
    (a.adapter_dir(V) / "adapter_config.json").write_text("{}")
    assert a.adapter_versions() == [V]


def test_names_never_leave_their_folder_and_urls_are_refused(tmp_path):
    a = ArtifactLayout(tmp_path)
    for bad in ("..", "../x", "a/b", ""):
        with pytest.raises(ValueError, match="not a valid version"):
            a.certificate(bad)
    with pytest.raises(ValueError, match="not a valid day"):
        a.receipt_dir("..")
    with pytest.raises(ValueError, match="RATCHET_ARTIFACTS"):
        ArtifactLayout("s3://bucket/artifacts")
    assert ArtifactLayout(tmp_path) == ArtifactLayout(str(tmp_path))


def test_records_store_names_that_any_root_reads_back(tmp_path):
    """A record stores an item's name in the tree; the root that reads it may be another folder (a moved home)."""
    here, there = ArtifactLayout(tmp_path / "here"), ArtifactLayout(tmp_path / "there")
    for path in (here.adapter_dir(V), here.certificate(V), here.bom(V), here.train_commitment(D)):
        name = here.name_of(path)
        assert not Path(name).is_absolute() and there.resolve(name) == Path(there.root) / name
    assert here.name_of(here.adapter_dir(V)) == f"adapters/{V}"
    with pytest.raises(ValueError, match="not under the artifacts root"):
        here.name_of(tmp_path / "elsewhere" / "adapters" / V)
    # records written before names: absolute paths under an old home's root, read by their name
    old = "/srv/old-home/artifacts"
    assert there.resolve(f"{old}/adapters/{V}") == there.adapter_dir(V)
    assert there.resolve(f"{old}/certificates/{V}.dsse.json") == there.certificate(V)
    assert there.resolve(f"/data/train/home/artifacts/train/day={D}/train.jsonl") == there.train_jsonl(D)
    assert there.resolve(f".ratchet/artifacts/adapters/{V}") == there.adapter_dir(V)  # relative to an old cwd
    assert there.resolve("/opt/models/base") == Path("/opt/models/base")  # names nothing in the tree
    with pytest.raises(ValueError, match="URL"):
        there.resolve(f"s3://bucket/artifacts/adapters/{V}")


def test_receipt_file_names_agree_with_the_standalone_verifier(tmp_path):
    """`ratchet verify receipt` (ratchet_stats, no Ratchet imports) finds the lines beside the envelope by name."""
    from ratchet_stats import cli_receipt
    from ratchet_stats.receipt import v3

    layout = ArtifactLayout(tmp_path)
    day = "2026-03-01"
    assert layout.receipt_pairs(day).name == v3.PAIRS_FILE
    assert layout.receipt_clients(day).name == cli_receipt.CLIENTS_FILE
    assert layout.receipt_estimates(day).name == cli_receipt.ESTIMATES_FILE
    assert layout.receipt_pairs(day).parent == layout.receipt_envelope(day).parent
