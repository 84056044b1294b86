"""Receipt proofs from the stored tree: the same documents as rebuilding the tree from every leaf, for rows on
row-group and tree-block edges, without reading the day's other rows."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ratchet_assets.effects import EffectLedger
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.receipts import build_receipt, receipt_proof
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core import receipt_store
from ratchet_core.control_db import make_engine
from ratchet_stats import merkle
from ratchet_stats.canonical import canonical_json
from ratchet_stats.keys import generate_private_key
from ratchet_stats.merkle_store import StoredTree
from ratchet_stats.receipt import check_proof, make_proof

DAY = "2026-02-03"


@pytest.fixture(scope="module")
def day_folder(tmp_path_factory) -> Path:
    """A signed receipt over ~4,500 request rows: two row groups of the rows file."""
    home = tmp_path_factory.mktemp("home")
    write_day(home / "lake", DAY, 4500, seed=3)
    consolidate_traffic(home / "lake", home / "art", DAY)
    ledger = EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))
    result = build_receipt(home / "art", DAY, generate_private_key(), ledger)
    assert result.size > receipt_store.ROW_GROUP_ROWS
    return home / "art" / "receipts" / DAY


def test_stored_proofs_equal_rebuilt_proofs_on_every_edge(day_folder: Path) -> None:
    rows = pq.read_table(day_folder / receipt_store.ROWS_FILE)
    n = rows.num_rows
    assert pq.ParquetFile(day_folder / receipt_store.ROWS_FILE).metadata.num_row_groups == 2
    ids, clients = rows["request_id"].to_pylist(), rows["client"].to_pylist()
    leaves = [s.encode() for s in rows["leaf"].to_pylist()]
    envelope = json.loads((day_folder / receipt_store.ENVELOPE_FILE).read_bytes())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    with StoredTree(day_folder / receipt_store.TREE_FILE) as tree:
        assert (tree.size, tree.root().hex()) == (n, predicate["requests"]["root"])
        assert tree.root() == merkle.root(leaves)
    for i in sorted({0, 1, 63, 64, 4095, 4096, 4097, n // 2, n - 2, n - 1}):
        got = receipt_store.receipt_proof(day_folder, DAY, ids[i], client=clients[i])
        assert canonical_json(got) == canonical_json(make_proof(DAY, ids[i], i, leaves, envelope))
        assert check_proof(predicate, got)["request_id"] == ids[i]
        assert receipt_proof(DAY, ids[i], day_folder.parent.parent) == got


def test_unknown_ids_and_other_clients_get_nothing(day_folder: Path) -> None:
    rows = pq.read_table(day_folder / receipt_store.ROWS_FILE, columns=["request_id", "client"])
    ids, clients = rows["request_id"].to_pylist(), rows["client"].to_pylist()
    other = next(c for c in clients if c != clients[5])
    assert receipt_store.receipt_proof(day_folder, DAY, ids[5], client=other) is None
    for missing in ("", "0", ids[0][:-1], ids[4096] + "x", ids[-1] + "z", "~~~"):
        assert missing not in ids
        assert receipt_store.receipt_proof(day_folder, DAY, missing) is None
    with pytest.raises(KeyError, match="not in the receipt"):
        receipt_proof(DAY, "nope", day_folder.parent.parent)


def test_a_day_without_a_stored_tree_is_proven_by_rebuilding(day_folder: Path, tmp_path: Path) -> None:
    old = tmp_path / DAY
    old.mkdir()
    for name in (receipt_store.ROWS_FILE, receipt_store.ENVELOPE_FILE):
        (old / name).write_bytes((day_folder / name).read_bytes())
    rid = pq.read_table(day_folder / receipt_store.ROWS_FILE, columns=["request_id"])["request_id"][4100]
    assert receipt_store.receipt_proof(old, DAY, rid.as_py()) == receipt_store.receipt_proof(
        day_folder, DAY, rid.as_py()
    )


def _million_row_day(folder: Path, n: int, key) -> dict:
    """A day of `n` receipt rows written as ``build_receipt`` writes them (rows in 4096-row groups with request_id
    statistics, the tree streamed into tree.bin), with a signed envelope; returns the predicate."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ratchet_assets.night import ChunkedParquetWriter
    from ratchet_assets.night.receipts import ROWS_SCHEMA
    from ratchet_core.lake import atomic_write_bytes
    from ratchet_stats.dsse import make_statement, sign_statement
    from ratchet_stats.merkle_store import TreeBuilder, leaf_hashes
    from ratchet_stats.receipt.v1 import PREDICATE_TYPE, empty_totals, make_predicate

    writer = ChunkedParquetWriter(
        folder / receipt_store.ROWS_FILE,
        ROWS_SCHEMA,
        row_group_size=receipt_store.ROW_GROUP_ROWS,
        compression="zstd",
        write_statistics=["request_id"],
    )
    tree = TreeBuilder(folder / receipt_store.TREE_FILE, base=receipt_store.TREE_BASE)
    for lo in range(0, n, 250_000):
        idx = np.arange(lo, min(n, lo + 250_000))
        ids = pc.utf8_lpad(pa.array(idx.astype(str)), 9, "0")
        ids = pc.binary_join_element_wise("req-", ids, "")
        client = pa.array(np.where(idx % 2 == 0, "app1", "app2"))
        leaf = pc.binary_join_element_wise(
            '{"client":"', client, '","n":', pa.array(idx.astype(str)), ',"request_id":"', ids, '"}', ""
        )
        tree.add_hashes(leaf_hashes(leaf.cast(pa.binary()).to_pylist()))
        writer.write(pa.table({"index": idx, "request_id": ids, "client": client, "leaf": leaf}))
    writer.close()
    root = tree.finish()
    clients = {c: empty_totals() for c in ("app1", "app2")}
    for i, c in enumerate(("app1", "app2")):
        clients[c]["requests"] = clients[c]["served_by"]["teacher"] = (n + 1 - i) // 2
    predicate = make_predicate(DAY, root.hex(), n, clients, None)
    statement = make_statement(
        PREDICATE_TYPE, predicate, [{"name": f"receipt:{DAY}", "digest": {"sha256": root.hex()}}]
    )
    atomic_write_bytes(folder / receipt_store.ENVELOPE_FILE, canonical_json(sign_statement(statement, key)))
    return predicate


def _gateway_settings(tmp_path: Path) -> Any:
    """A gateway with two clients (app1, app2) whose upstreams are never called."""
    from ratchet_core.settings import Settings

    return Settings(
        home=tmp_path / "home",
        api_keys="app1:sk-app1-0123456789abcdef,app2:sk-app2-fedcba9876543210",
        admin_key="admin-key-for-tests",
        teacher_model="openai/demo-teacher",
        teacher_api_base="http://127.0.0.1:9/v1",
        teacher_api_key="sk-teacher-upstream",
        student_base_url="http://127.0.0.1:9/v1",
        segment_seconds=3600,
    )


@pytest.fixture
def parquet_rows_read(monkeypatch) -> list[int]:
    """The row counts of every Parquet read made in this process from now on (the gateway's thread too)."""
    counts: list[int] = []

    def counting(read):
        def wrapper(*args, **kwargs):
            table = read(*args, **kwargs)
            counts.append(table.num_rows)
            return table

        return wrapper

    for name in ("read", "read_row_group", "read_row_groups"):
        monkeypatch.setattr(pq.ParquetFile, name, counting(getattr(pq.ParquetFile, name)))
    monkeypatch.setattr(pq, "read_table", counting(pq.read_table))
    return counts


@pytest.mark.slow
def test_the_gateway_proof_route_reads_one_row_group_of_a_million_row_day(
    tmp_path: Path, parquet_rows_read: list[int]
) -> None:
    """A proof comes from the stored tree and the row's own row group (two when the id may start the next one),
    never from the day's other rows: rebuilding the tree per call read all 1M rows (~2 s); ``make bench``
    measures the route's latency."""
    import httpx

    from ratchet_gateway.app import GatewayOptions, create_app
    from ratchet_stats.receipt import verify_receipt
    from tests.serve import serve_in_thread

    n = 1_000_000
    key = generate_private_key()
    settings = _gateway_settings(tmp_path)
    folder = Path(settings.artifacts_root) / "receipts" / DAY
    folder.mkdir(parents=True)
    predicate = _million_row_day(folder, n, key)
    app = create_app(settings, GatewayOptions(replica="gw", public_keys=[key.public_key()]))
    auth = {"Authorization": "Bearer sk-app1-0123456789abcdef"}
    targets = [0, 4094, 4096, 500_000, 777_778, n - 2]  # app1's rows (even indices)
    most = 2 * receipt_store.ROW_GROUP_ROWS
    with serve_in_thread(app) as url, httpx.Client(base_url=url, headers=auth, timeout=30) as http:
        for i in targets:
            parquet_rows_read.clear()
            r = http.get(f"/ratchet/receipts/{DAY}/proof/req-{i:09d}")
            assert r.status_code == 200, r.text
            assert sum(parquet_rows_read) <= most, (i, parquet_rows_read)
            proof = r.json()
            assert proof["index"] == i and proof["size"] == n
            verify_receipt((folder / receipt_store.ENVELOPE_FILE).read_bytes(), key.public_key(), proof=proof)
        assert http.get(f"/ratchet/receipts/{DAY}/proof/req-{1:09d}").status_code == 404  # app2's row
    for i in targets:
        parquet_rows_read.clear()
        assert receipt_store.receipt_proof(folder, DAY, f"req-{i:09d}", client="app1")["index"] == i
        assert sum(parquet_rows_read) <= most, (i, parquet_rows_read)
    assert predicate["requests"]["size"] == n


@pytest.mark.slow
def test_the_client_view_route_reads_only_the_client_lines_of_a_million_row_day(tmp_path: Path) -> None:
    """``GET /ratchet/receipts/{day}`` of a v3 receipt reads the stored client line and its proof (clients.jsonl),
    not the day's rows: here the rows file is not Parquet at all and there is no tree, and the view verifies
    against the signed client root."""
    import httpx

    from ratchet_core.lake import atomic_write_bytes
    from ratchet_gateway.app import GatewayOptions, create_app
    from ratchet_stats import teacher_equivalent as te
    from ratchet_stats.dsse import make_statement, sign_statement
    from ratchet_stats.receipt import v3, verify_client_view
    from tests.serve import serve_in_thread

    n = 1_000_000
    key = generate_private_key()
    settings = _gateway_settings(tmp_path)
    folder = Path(settings.artifacts_root) / "receipts" / DAY
    folder.mkdir(parents=True)
    lines = []
    for i, c in enumerate(("app1", "app2")):
        totals = v3.empty_totals()
        totals["requests"] = totals["served_by"]["teacher"] = (n + 1 - i) // 2
        lines.append(v3.client_leaf(c, f"{i:064x}", [], totals))
    prices = te.prices_doc("openai/demo-teacher", 1e-6, 2e-6)
    requests_root = "ab" * 32  # the request tree a million rows would have: not read by this route
    predicate = v3.make_predicate(DAY, requests_root, n, lines, [], [], prices, None)
    statement = make_statement(v3.PREDICATE_TYPE, predicate, v3.subjects(DAY, predicate))
    atomic_write_bytes(folder / receipt_store.ENVELOPE_FILE, canonical_json(sign_statement(statement, key)))
    atomic_write_bytes(folder / "clients.jsonl", b"".join(b + b"\n" for b in lines))
    atomic_write_bytes(folder / "estimates.jsonl", b"")
    (folder / receipt_store.ROWS_FILE).write_bytes(b"a million rows that this route must not read")
    app = create_app(settings, GatewayOptions(replica="gw", public_keys=[key.public_key()]))
    auth = {"Authorization": "Bearer sk-app1-0123456789abcdef"}
    with serve_in_thread(app) as url, httpx.Client(base_url=url, headers=auth, timeout=60) as http:
        r = http.get(f"/ratchet/receipts/{DAY}")
        assert r.status_code == 200, r.text
        view = r.json()
        assert "app2" not in r.text and "rows" not in view
        report = verify_client_view(view, key.public_key())
        assert report["client"] == "app1" and report["totals"]["requests"] == n // 2
