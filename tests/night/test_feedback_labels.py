"""People's labels in the night's plain steps: recorded feedback (stored through the gateway's own item logic, in a
real control DB) relabels golden and training rows, keeps bad teacher answers out of training, and every label
source is committed; erasure removes feedback and keeps the commitments consistent; a night without feedback writes
the bytes it always wrote."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ratchet_assets.night.erasures import load_erasures
from ratchet_assets.night.evaluate import golden_commitments, load_golden
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import request_rows, write_segments
from ratchet_assets.night.labels import Labels, load_labels, settle_from_traffic
from ratchet_assets.night.split import split_golden
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_assets.night.training_set import build_training_set
from ratchet_core import feedback as fb
from ratchet_core.control_db import ensure_schema, make_engine
from ratchet_core.layout import ArtifactLayout
from ratchet_core.task_policy import TaskPolicy
from ratchet_stats import merkle

DAY = "2026-02-03"
POLICY = TaskPolicy(metrics={"thumbs_up": {"type": "boolean"}}, bad_when="thumbs_up=false")
COLUMNS = ["request_id", "client", "task", "day", "served_by", "version", "messages", "tools"]
COLUMNS += ["response_format", "answer", "tool_calls"]


def _stored(row: dict) -> fb.StoredRequest:
    return fb.StoredRequest(**{c: row[c] or "" for c in COLUMNS})


def _send(engine, row: dict, fid: str, metric: str, value, policies: dict, found: bool = True) -> dict:
    """Store one item as the gateway's route does (ratchet_gateway.feedback.item_row)."""
    from ratchet_gateway.feedback import item_row

    item = {"feedback_id": fid, "request_id": row["request_id"], "metric": metric, "value": value}
    stored = item_row(
        row["client"], item, {row["request_id"]: _stored(row)} if found else {}, policies, lambda v: v, None
    )
    return fb.take(engine, stored)[0]


@pytest.fixture
def night(tmp_path: Path):
    lake, art = tmp_path / "lake", tmp_path / "art"
    rows = request_rows(
        DAY, 240, seed=11, workload="tickets", student_share=0.0, failure_share=0.0, repeat_share=0.0
    )
    write_segments(lake, rows)
    consolidate_traffic(lake, art, DAY)
    build_examples(art, DAY)
    engine = make_engine(f"sqlite:///{tmp_path / 'control.db'}")
    ensure_schema(engine)
    teacher = [r for r in rows if r["kind"] == "request" and r["served_by"] == "teacher"]
    return tmp_path, lake, art, engine, teacher


def _golden_keys(art: Path) -> set[str]:
    reg = pq.read_table(ArtifactLayout(art).golden_registry()).to_pylist()
    return {r["example_key"] for r in reg if r["golden"]}


def test_no_feedback_writes_the_same_bytes_as_before(night) -> None:
    tmp, _, art, engine, _ = night
    split_golden(art, DAY)
    plain = build_training_set(art, DAY)
    layout = ArtifactLayout(art)
    before = (layout.train_jsonl(DAY).read_bytes(), layout.train_keys(DAY).read_bytes())
    with_empty = build_training_set(art, DAY, labels=load_labels(engine, {"tickets": POLICY}))
    assert (layout.train_jsonl(DAY).read_bytes(), layout.train_keys(DAY).read_bytes()) == before
    assert with_empty.rows_root == plain.rows_root and with_empty.by_label == {"teacher": plain.rows}
    labels = layout.train_labels(DAY).read_text().splitlines()
    assert [ln.split(" ")[0] for ln in labels] == layout.train_keys(DAY).read_text().split()
    assert {ln.split(" ")[1] for ln in labels} == {"teacher"}
    commitment = json.loads(layout.train_commitment(DAY).read_text())
    assert commitment["labels"]["root"] == merkle.root([ln.encode() for ln in labels]).hex()
    assert "feedback" not in commitment  # nothing was read


def test_demonstrations_relabel_and_bad_answers_stay_out(night) -> None:
    tmp, _, art, engine, teacher = night
    policies = {"tickets": POLICY}
    split_golden(art, DAY)  # the registry first: which keys are golden
    golden = _golden_keys(art)
    keyed = [(r, _stored(r).example_key()) for r in teacher]
    train_rows = [(r, k) for r, k in keyed if k not in golden]
    golden_rows = [(r, k) for r, k in keyed if k in golden]
    demo_train, bad_train, demo_golden = train_rows[0], train_rows[1], golden_rows[0]
    _send(engine, demo_train[0], "d1", "demonstration", "shipping", policies)
    _send(engine, bad_train[0], "b1", "thumbs_up", False, policies)
    _send(engine, demo_golden[0], "d2", "demonstration", "account", policies)
    _send(engine, train_rows[2][0], "c1", "comment", "fine", policies)  # a comment changes nothing
    _send(engine, golden_rows[1][0], "b2", "thumbs_up", False, policies)  # a golden label known to be wrong
    labels = load_labels(engine, policies, load_erasures(engine))
    assert labels.demonstrations.keys() == {demo_train[1], demo_golden[1]}
    assert labels.bad == {bad_train[1], golden_rows[1][1]}

    before = split_golden(art, DAY).golden_size
    split = split_golden(art, DAY, labels=labels)
    assert split.golden_size == before - 1  # the wrong golden label is not evaluated against
    assert split.labels_by_source == {"people": 1, "teacher": split.golden_size - 1}
    rows = {g.key: g for g in load_golden(art, DAY)}
    assert golden_rows[1][1] not in rows
    people = rows[demo_golden[1]]
    assert people.label_source == "people" and people.expected["content"] == "account"
    assert people.teacher_answer["content"] == demo_golden[0]["answer"]
    # the golden commitment the split streamed is the one its rows give (leaves say which rows people labelled)
    keys_c, rows_c = golden_commitments(sorted(rows.values(), key=lambda g: g.key))
    commitment = json.loads(ArtifactLayout(art).golden_commitment(DAY).read_text())
    assert (commitment["rows"]["root"], commitment["keys"]["root"]) == (rows_c.root, keys_c.root)
    assert commitment["labels"] == {"people": 1, "teacher": split.golden_size - 1}
    assert b'"label_source":"people"' in people.leaf()

    t = build_training_set(art, DAY, labels=labels)
    layout = ArtifactLayout(art)
    keys = layout.train_keys(DAY).read_text().split()
    assert bad_train[1] not in keys and t.bad_left_out == 1 and demo_golden[1] not in keys
    line = layout.train_jsonl(DAY).read_text().splitlines()[keys.index(demo_train[1])]
    assert json.loads(line)["messages"][-1]["content"] == "shipping"
    labels_txt = layout.train_labels(DAY).read_text().splitlines()
    assert labels_txt[keys.index(demo_train[1])] == f"{demo_train[1]} people"
    doc = json.loads(layout.train_commitment(DAY).read_text())
    assert doc["labels"]["counts"] == {"people": 1, "teacher": len(keys) - 1}
    assert doc["labels"]["root"] == merkle.root([ln.encode() for ln in labels_txt]).hex()
    assert doc["feedback"] == {
        "items": 5,
        "demonstrations_used": 1,
        "bad_left_out": 1,
        "sha256": labels.digest,
    }


def test_pending_feedback_settles_against_the_days_traffic(night) -> None:
    _, _, art, engine, teacher = night
    row = teacher[3]
    item = _send(engine, row, "p1", "thumbs_up", False, {}, found=False)  # not visible when it was sent
    assert item["state"] == "pending" and item.get("example_key") is None
    assert load_labels(engine, {"tickets": POLICY}).bad == frozenset()  # pending says nothing yet
    assert settle_from_traffic(engine, art, DAY, {"tickets": POLICY}) == 1
    settled = fb.get(engine, row["client"], "p1")
    assert settled["state"] == "recorded" and settled["example_key"] == _stored(row).example_key()
    assert load_labels(engine, {"tickets": POLICY}).bad == {settled["example_key"]}
    # a pending item on another client's request is rejected when it settles, as an unknown request is
    other = "globex" if row["client"] == "acme" else "acme"
    _send(engine, {**row, "client": other}, "p2", "comment", "x", {}, found=False)
    settle_from_traffic(engine, art, DAY, {})
    assert fb.get(engine, other, "p2")["error"] == fb.UNKNOWN_REQUEST


def test_erasure_removes_feedback_and_recommits_the_label_tree(night) -> None:
    from ratchet_assets.governance.erase import ErasureScope, erase
    from ratchet_stats.keys import generate_private_key

    tmp, lake, art, engine, teacher = night
    policies = {"tickets": POLICY}
    split_golden(art, DAY)
    golden = _golden_keys(art)
    row = next(r for r in teacher if _stored(r).example_key() not in golden)
    _send(engine, row, "d1", "demonstration", "shipping jane@example.com", policies)
    _send(engine, teacher[-1], "c1", "comment", "call me at jane@example.com", policies)
    labels = load_labels(engine, policies)
    split_golden(art, DAY, labels=labels)
    build_training_set(art, DAY, labels=labels)
    report = erase(
        ErasureScope(request_ids=(row["request_id"],)),
        lake_root=str(lake),
        artifacts_root=str(art),
        engine=engine,
        reason="a customer asked",
        private_key=generate_private_key(),
    )
    assert report.counts["feedback_items"] == 1 and fb.get(engine, row["client"], "d1") is None
    layout = ArtifactLayout(art)
    lines = layout.train_labels(DAY).read_text().splitlines()
    assert all(" people" not in ln for ln in lines) and len(lines) == len(
        layout.train_keys(DAY).read_text().split()
    )
    doc = json.loads(layout.train_commitment(DAY).read_text())
    assert doc["labels"]["root"] == merkle.root([ln.encode() for ln in lines]).hex()
    assert doc["labels"]["counts"] == {"teacher": len(lines)}
    # an erasure by text reaches a comment's text too
    erase(
        ErasureScope(text="jane@example.com"),
        lake_root=str(lake),
        artifacts_root=str(art),
        engine=engine,
        reason="a customer asked",
        private_key=generate_private_key(),
    )
    assert fb.rows(engine) == []


def test_erasing_a_client_removes_all_its_feedback_and_a_time_range_that_on_its_requests(night) -> None:
    from ratchet_assets.governance.erase import ErasureScope, erase
    from ratchet_stats.keys import generate_private_key

    _, lake, art, engine, teacher = night
    acme = [r for r in teacher if r["client"] == "acme"]
    other = next(r for r in teacher if r["client"] != "acme")
    _send(engine, acme[0], "a1", "comment", "fine", {})
    _send(engine, acme[1], "a2", "comment", "not sealed anywhere yet", {}, found=False)  # pending
    _send(engine, other, "o1", "comment", "fine", {})
    common = {
        "lake_root": str(lake),
        "artifacts_root": str(art),
        "engine": engine,
        "reason": "a customer asked",
    }
    report = erase(ErasureScope(clients=("acme",)), private_key=generate_private_key(), **common)
    assert report.counts["feedback_items"] == 2
    assert [(r["client"], r["feedback_id"]) for r in fb.rows(engine)] == [(other["client"], "o1")]
    # a time range's erasure reaches the feedback on the requests it resolves
    around = {"since": other["ts"] - timedelta(seconds=1), "until": other["ts"] + timedelta(seconds=1)}
    report = erase(ErasureScope(**around), private_key=generate_private_key(), **common)
    assert other["request_id"] in report.request_ids
    assert report.counts["feedback_items"] == 1 and fb.rows(engine) == []


def test_labels_digest_names_what_the_night_used() -> None:
    a = Labels({"k" * 64: '{"content":"x"}'}, frozenset({"b" * 64}), 2)
    b = Labels({"k" * 64: '{"content":"y"}'}, frozenset({"b" * 64}), 2)
    assert a.digest != b.digest and a.digest == Labels(dict(a.demonstrations), a.bad, 7).digest
