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
    with pytest.raises(ImportRowError, match="bad.jsonl line 1: messages"):
        import_examples(bad, artifacts_root=str(tmp_path), task="t", role="golden", source="s", license="MIT")
    bad.write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(ImportRowError, match="bad.jsonl line 1: missing answer and messages"):
        import_examples(bad, artifacts_root=str(tmp_path), task="t", role="golden", source="s", license="MIT")


def test_the_same_file_for_two_tasks_and_both_kinds_keeps_every_import(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in _rows(3)))
    common = dict(artifacts_root=str(tmp_path / "art"), source="s", license="MIT", day=DAY1)
    a = import_examples(rows, task="moods", role="golden", **common)
    b = import_examples(rows, task="notes", role="golden", **common)
    c = import_examples(rows, task="notes", role="train", **common)  # refused rows: golden for notes already
    assert len({a.import_id, b.import_id, c.import_id}) == 3
    assert a.import_id.startswith(f"{DAY1}-moods-golden-") and c.import_id.startswith(f"{DAY1}-notes-train-")
    kept = {
        p.parent.name: pl.read_parquet(p)["task"].unique().to_list()
        for p in (tmp_path / "art").rglob("examples.parquet")
    }
    assert kept == {a.import_id: ["moods"], b.import_id: ["notes"], c.import_id: []}
    assert (a.imported, b.imported, c.refused) == (3, 3, 3)


BAD_FILES = {
    "empty.jsonl": (b"", "empty.jsonl: the file is empty"),
    "blank.jsonl": (b"\n  \n", "blank.jsonl: the file is empty"),
    "broken.jsonl": (
        json.dumps({"messages": [{"role": "user", "content": "hi"}], "answer": "a"}).encode()
        + b"\n{not json\n",
        "broken.jsonl line 2: not JSON",
    ),
    "latin1.jsonl": (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "answer": "a"}).encode()
        + b'\n{"messages": [{"role": "user", "content": "caf\xe9"}], "answer": "a"}\n',
        "latin1.jsonl line 2: not UTF-8",
    ),
    "list.jsonl": (b"[1, 2]\n", "list.jsonl line 1: not a JSON object"),
    "nan.jsonl": (
        b'{"messages": [{"role": "user", "content": "x"}], "answer": NaN}\n',
        "nan.jsonl line 1: not JSON",
    ),
    "roles.jsonl": (b'{"messages": ["hi"], "answer": "a"}\n', "roles.jsonl line 1: messages must be"),
    "corrupt.parquet": (
        b"PAR1 this is not parquet at all PAR1",
        "corrupt.parquet: not a readable Parquet file",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_file_is_one_clear_line_naming_it_and_nothing_is_written(tmp_path: Path, name: str) -> None:
    from click.testing import CliRunner

    from ratchet_assets.governance.cli import import_cmd

    data, expected = BAD_FILES[name]
    path = tmp_path / name
    path.write_bytes(data)
    home = tmp_path / "home"
    result = CliRunner(env={"RATCHET_HOME": str(home)}).invoke(
        import_cmd, [str(path), "--task", "moods", "--as", "golden", "--source", "s", "--license", "MIT"]
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected}"), result.stderr
    assert "Traceback" not in result.output and not (home / "artifacts").exists()


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--task", "../../evil", "--task '../../evil' is not a valid task"),
        ("--task", "moods\nrm", "is not a valid task"),
        ("--day", "2026-13-45", "--day '2026-13-45' is not a valid day"),
        ("--day", "2026-01-01/../x", "is not a valid day"),
    ],
)
def test_a_bad_task_or_day_is_refused_and_nothing_is_written(
    tmp_path: Path, option: str, value: str, expected: str
) -> None:
    from click.testing import CliRunner

    from ratchet_assets.governance.cli import import_cmd

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in _rows(2)))
    args = {"--task": "moods", "--day": DAY1, option: value}
    home = tmp_path / "home"
    result = CliRunner(env={"RATCHET_HOME": str(home)}).invoke(
        import_cmd,
        [
            str(rows),
            "--as",
            "golden",
            "--source",
            "s",
            "--license",
            "MIT",
            *[x for kv in args.items() for x in kv],
        ],
    )
    assert result.exit_code == 2 and expected in result.stderr, result.stderr
    assert not (home / "artifacts").exists()


def test_imported_labels_keep_their_source_in_the_golden_and_training_sets(tmp_path: Path) -> None:
    lake, art = tmp_path / "lake", tmp_path / "art"
    write_day(lake, DAY1, 40, seed=1)
    golden_in, train_in = tmp_path / "golden.jsonl", tmp_path / "train.jsonl"
    golden_in.write_text("".join(json.dumps(r) + "\n" for r in _rows(6)))
    train_in.write_text("".join(json.dumps(r) + "\n" for r in _rows(5, offset=50)))
    common = {"artifacts_root": str(art), "task": "moods", "source": "support team", "license": "CC-BY-4.0"}
    import_examples(golden_in, role="golden", day=DAY1, label_source="people", **common)
    t = import_examples(train_in, role="train", day=DAY1, **common)  # no source named: "import"
    assert t.provenance["label_source"] == "import"
    with pytest.raises(ImportRowError, match="label source"):
        import_examples(train_in, role="train", day=DAY1, label_source="robots", **common)
    consolidate_traffic(lake, art, DAY1)
    build_examples(art, DAY1)
    split = split_golden(art, DAY1)
    assert split.labels_by_source["people"] == 6
    people = [g for g in load_golden(art, DAY1) if g.task == "moods"]
    assert {g.label_source for g in people} == {"people"} and all(g.teacher_answer is None for g in people)
    result = build_training_set(art, DAY1)
    assert result.by_label["import"] == 5 and result.by_label["teacher"] == result.rows - 5
