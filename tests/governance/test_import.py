"""``ratchet import``: labelled rows as golden-only (never trained on) or training rows, with provenance."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from ratchet_assets.governance.importer import ImportRowError, import_examples
from ratchet_assets.night.evaluate import load_golden
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.split import split_golden
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_assets.night.training_set import build_training_set, disjoint_from_golden

DAY1 = "2026-01-01"
LABELS = ("praise", "complaint", "question")


def _rows(n: int, offset: int = 0) -> list[dict]:
    return [
        {
            "messages": [
                {"role": "system", "content": "Label the note: praise, complaint or question."},
                {
                    "role": "user",
                    "content": f"Customer note {i}: the product number {i} is {LABELS[i % 3]}-ish.",
                },
            ],
            "answer": LABELS[i % 3],
        }
        for i in range(offset, offset + n)
    ]


def test_imported_golden_rows_join_the_golden_set_and_never_the_training_set(tmp_path: Path) -> None:
    lake, art = tmp_path / "lake", tmp_path / "art"
    write_day(lake, DAY1, 40, seed=1)
    golden_in = tmp_path / "golden.jsonl"
    golden_in.write_text("".join(json.dumps(r) + "\n" for r in _rows(12) + _rows(1)))  # one duplicate
    g = import_examples(
        golden_in, artifacts_root=str(art), task="moods", role="golden", source="acme-labels-v1",
        license="CC-BY-4.0", day=DAY1,
    )  # fmt: skip
    assert (g.rows, g.imported, g.duplicates, g.refused) == (13, 12, 1, 0)
    train_in = tmp_path / "train.parquet"
    pl.DataFrame(
        [{**r, "messages": json.dumps(r["messages"])} for r in _rows(20, offset=100) + _rows(2)]
    ).write_parquet(train_in)
    t = import_examples(
        train_in, artifacts_root=str(art), task="moods", role="train", source="acme-labels-v1",
        license="CC-BY-4.0", day=DAY1,
    )  # fmt: skip
    assert (t.imported, t.refused) == (20, 2)  # two golden keys are refused as training rows
    assert json.loads(Path(t.path).with_name("provenance.json").read_text())["license"] == "CC-BY-4.0"

    consolidate_traffic(lake, art, DAY1)
    build_examples(art, DAY1)
    split_golden(art, DAY1, share=0.2, floor=2)
    golden = [r for r in load_golden(art, DAY1) if r.task == "moods"]
    assert len(golden) == 12 and {r.expected["content"] for r in golden} == set(LABELS)
    ts = build_training_set(art, DAY1)
    assert ts.by_task["moods"] == 20 and ts.golden_overlap == 0
    golden_keys = {r.key for r in golden}
    assert not golden_keys & set(Path(ts.keys_path).read_text().split())
    assert disjoint_from_golden(art, DAY1)[0]
    train_lines = Path(ts.path).read_text()
    assert "product number 100 " in train_lines and "product number 3 " not in train_lines
    reg = pq.read_table(art / "golden" / "registry.parquet").to_pylist()
    assert sum(r["reason"] == "import" for r in reg) == 32


def test_bad_input_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [], "answer": "x"}) + "\n")
    with pytest.raises(ImportRowError, match="row 1: messages"):
        import_examples(bad, artifacts_root=str(tmp_path), task="t", role="golden", source="s", license="MIT")
    bad.write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(ImportRowError, match="missing columns"):
        import_examples(bad, artifacts_root=str(tmp_path), task="t", role="golden", source="s", license="MIT")
