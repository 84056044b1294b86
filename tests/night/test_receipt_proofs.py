"""Receipt proofs from the stored tree: the same documents as rebuilding the tree from every leaf, for rows on
row-group and tree-block edges, without reading the day's other rows."""

from __future__ import annotations

import base64
import json
from pathlib import Path

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
