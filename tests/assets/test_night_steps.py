"""The night's plain functions: what becomes an example, golden assignment, training rows and their roots."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import request_rows, write_day, write_segment, write_segments
from ratchet_assets.night.split import split_golden
from ratchet_assets.night.traffic import TrafficError, consolidate_traffic
from ratchet_assets.night.training_set import build_training_set
from ratchet_core.example_key import example_key
from ratchet_stats import merkle
from ratchet_stats.canonical import canonical_json

from .conftest import DAY1, DAY2


def _expected_keys(rows: list[dict]) -> set[str]:
    """Independent oracle: keys of complete teacher answers (requests and audit pairs), via example_key()."""
    keys = set()
    for r in rows:
        complete = (
            r["status_code"] == 200
            and not r["truncated"]
            and r["finish_reason"] not in ("length", "error")
            and not r["error"]
        )
        teacher_label = (r["kind"] == "request" and r["served_by"] == "teacher") or (
            r["kind"] == "pair" and r["pair_role"] == "audit"
        )
        if complete and teacher_label:
            tools = json.loads(r["tools"])["tools"] if r["tools"] else None
            rf = json.loads(r["response_format"]) if r["response_format"] else None
            keys.add(example_key(r["task"], json.loads(r["messages"]), tools, rf))
    return keys


def test_examples_are_complete_teacher_answers_keyed_by_example_key(tmp_path: Path) -> None:
    rows = request_rows(DAY1, 150, seed=3, failure_share=0.2, student_share=0.4, audit_share=0.5)
    write_segments(tmp_path / "lake", rows)
    # The same segment sealed twice (a replica retried its upload under a new name).
    write_segment(tmp_path / "lake" / "traffic" / f"day={DAY1}" / "r1-99999999.parquet", rows[:10])
    art = tmp_path / "art"
    t = consolidate_traffic(tmp_path / "lake", art, DAY1)
    assert t.rows == len(rows) and t.duplicates_dropped == 10
    assert t.requests == sum(r["kind"] == "request" for r in rows)
    e = build_examples(art, DAY1)
    got = set(pq.read_table(e.path)["example_key"].to_pylist())
    want = _expected_keys(rows)
    assert got == want and e.examples == len(want)
    assert e.by_source["audit"] > 0


def test_erasures_by_key_and_by_request_id(tmp_path: Path) -> None:
    write_day(tmp_path / "lake", DAY1, 60, seed=4)
    art = tmp_path / "art"
    consolidate_traffic(tmp_path / "lake", art, DAY1)
    table = pq.read_table(build_examples(art, DAY1).path)
    gone_key = table["example_key"][0].as_py()
    gone_req = table["request_id"][1].as_py()
    e = build_examples(art, DAY1, Erasures(frozenset({gone_key}), frozenset({gone_req})))
    after = pq.read_table(e.path)
    assert gone_key not in set(after["example_key"].to_pylist())
    # Erasing a request removes its row; the same question asked by another request may still teach.
    assert gone_req not in set(after["request_id"].to_pylist())
    assert e.erased >= 2 and e.examples < table.num_rows


def test_schema_mismatch_names_the_file_and_what_to_do(tmp_path: Path) -> None:
    import pyarrow as pa

    folder = tmp_path / "lake" / "traffic" / f"day={DAY1}"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"request_id": ["x"]}), folder / "r1-00000001.parquet")
    with pytest.raises(
        TrafficError, match=r"(?s)r1-00000001\.parquet: missing columns \['kind'.*rerun the partition"
    ):
        consolidate_traffic(tmp_path / "lake", tmp_path / "art", DAY1)


def test_late_segment_is_flagged(tmp_path: Path) -> None:
    rows = request_rows(DAY1, 10, seed=5)
    write_segments(tmp_path / "lake", rows, mtime=datetime(2026, 1, 2, 0, 10, tzinfo=UTC))
    first = consolidate_traffic(tmp_path / "lake", tmp_path / "art", DAY1)
    assert first.late_segments == []
    late = [
        dict(r, replica="r7", seq=i + 1, request_id=r["request_id"] + "x") for i, r in enumerate(rows[:3])
    ]
    write_segments(tmp_path / "lake", late, segments_per_replica=1, mtime=datetime(2026, 1, 3, tzinfo=UTC))
    second = consolidate_traffic(tmp_path / "lake", tmp_path / "art", DAY1)
    assert second.late_segments == ["r7-00000001.parquet"] and second.rows == first.rows + 3


def _score(key: str, salt: str) -> float:
    return int(hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()[:13], 16) / 2**52


def test_golden_by_keyed_hash_with_floor_and_permanence(two_days: Path) -> None:
    art = two_days / "artifacts"
    for day in (DAY1, DAY2):
        consolidate_traffic(two_days / "lake", art, day)
        build_examples(art, day)
    s1 = split_golden(art, DAY1, share=0.2, salt="s", floor=0)
    keys1 = pq.read_table(
        Path(s1.path).parent.parent.parent / "examples" / f"day={DAY1}" / "examples.parquet"
    )
    all1 = keys1["example_key"].to_pylist()
    golden1 = set(Path(s1.keys_path).read_text().split())
    assert golden1 == {k for k in all1 if _score(k, "s") < 0.2}
    # Day 2 with a floor: tasks short of it get their lowest-scoring NEW keys; day-1 assignments never change.
    s2 = split_golden(art, DAY2, share=0.2, salt="s", floor=40)
    golden2 = set(Path(s2.keys_path).read_text().split())
    assert golden1 <= golden2
    ex2 = pq.read_table(art / "examples" / f"day={DAY2}" / "examples.parquet")
    day2_keys = set(ex2["example_key"].to_pylist())
    new_by_task: dict[str, set[str]] = {}
    for k, t in zip(ex2["example_key"].to_pylist(), ex2["task"].to_pylist(), strict=True):
        if k not in all1:
            new_by_task.setdefault(t, set()).add(k)
    for task, new in new_by_task.items():  # the floor is met, or every new key of the task went golden
        assert s2.golden_by_task[task] >= 40 or new <= golden2
    topped = golden2 - golden1 - {k for k in day2_keys if _score(k, "s") < 0.2}
    assert topped and topped <= day2_keys - set(all1)
    assert s2.golden_root == merkle.root(sorted(k.encode() for k in golden2)).hex()


def test_a_day_without_traffic_on_a_new_home_makes_an_empty_training_set(tmp_path: Path) -> None:
    """The README's CI command on a fresh home (no traffic yet): golden_split records that nothing was assigned (an
    empty registry), so training_set writes 0 rows instead of failing with "materialise golden_split first" right
    after golden_split ran; a second day still finds and extends that registry."""
    art = tmp_path / "art"
    (tmp_path / "lake").mkdir()
    consolidate_traffic(tmp_path / "lake", art, DAY1)
    build_examples(art, DAY1)
    s = split_golden(art, DAY1, floor=10)
    assert (s.golden_size, s.new_keys) == (0, 0)
    t = build_training_set(art, DAY1)
    assert t.rows == 0 and Path(t.path).read_bytes() == b""
    registry = pq.read_table(art / "golden" / "registry.parquet")
    assert registry.num_rows == 0
    write_day(tmp_path / "lake", DAY2, 80, seed=5, day_index=1)
    consolidate_traffic(tmp_path / "lake", art, DAY2)
    build_examples(art, DAY2)
    assert split_golden(art, DAY2, floor=10).golden_size >= 10
    assert build_training_set(art, DAY2).rows > 0


def test_training_rows_are_canonical_chat_rows_with_recomputable_roots(two_days: Path) -> None:
    art = two_days / "artifacts"
    consolidate_traffic(two_days / "lake", art, DAY1)
    build_examples(art, DAY1)
    split_golden(art, DAY1, floor=10)
    t = build_training_set(art, DAY1)
    lines = Path(t.path).read_bytes().splitlines()
    rows = [json.loads(line) for line in lines]
    assert all(canonical_json(r) == line for r, line in zip(rows, lines, strict=True))
    assert all(
        r["messages"][-1]["role"] == "assistant" and set(r) == {"messages", "tools", "response_format"}
        for r in rows
    )
    assert any(r["tools"] for r in rows) and any(r["messages"][-1]["tool_calls"] for r in rows)
    keys = Path(t.keys_path).read_text().split()
    assert keys == sorted(keys) and len(keys) == len(lines)
    assert t.rows_root == merkle.root(lines).hex()
    assert t.keys_root == merkle.root([k.encode() for k in keys]).hex()
    commitment = json.loads((Path(t.path).parent / "commitment.json").read_text())
    assert commitment["rows"] == {"root": t.rows_root, "size": len(lines), "leaf": commitment["rows"]["leaf"]}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    days=st.lists(
        st.tuples(st.integers(5, 40), st.floats(0.0, 0.6), st.floats(0.0, 0.5)), min_size=1, max_size=3
    ),
    share=st.floats(0.0, 0.9),
    floor=st.integers(0, 30),
    window=st.integers(1, 3),
)
def test_no_golden_key_ever_appears_in_any_training_set(tmp_path_factory, days, share, floor, window) -> None:
    root = tmp_path_factory.mktemp("prop")
    art = root / "art"
    training_keys: set[str] = set()
    for i, (n, repeat, students) in enumerate(days):
        day = f"2026-02-{i + 1:02d}"
        # Repeat some requests of earlier days too (same example keys on several days).
        write_day(
            root / "lake", day, n, seed=i % 2, day_index=i % 2, repeat_share=repeat, student_share=students
        )
        consolidate_traffic(root / "lake", art, day)
        build_examples(art, day)
        split_golden(art, day, share=share, floor=floor)
        t = build_training_set(art, day, window_days=window)
        training_keys |= set(Path(t.keys_path).read_text().split())
    registry = pq.read_table(art / "golden" / "registry.parquet")
    golden = {
        k
        for k, g in zip(registry["example_key"].to_pylist(), registry["golden"].to_pylist(), strict=True)
        if g
    }
    assert not training_keys & golden


def test_fast_canonical_text_matches_canonical_json_and_rejects_nan() -> None:
    from ratchet_assets.night import canonical_text
    from ratchet_core.workloads import get_workload
    from ratchet_stats.canonical import loads_strict

    values = [ex.messages for ex in get_workload("mixed").generate(30, seed=9)]
    values += [{"b": 1.5, "a": [None, True, "é\u0001"]}, {"\U0001f600": 1, "\uffff": 2, "z": "\U0001f600"}]
    for v in values:
        assert canonical_text(v).encode("utf-8") == canonical_json(v)
    with pytest.raises(ValueError, match="NaN"):
        loads_strict('{"x": NaN}')
