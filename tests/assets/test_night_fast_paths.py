"""The night's set-wise fast paths against the straightforward definitions they replace, on random inputs.

- ``canonical_json_text`` / ``canonical_fixups`` (orjson round trip screened by DuckDB) vs
  ``canonical_json(json.loads(text))``;
- ``build_examples`` keys (assembled and hashed in DuckDB) vs ``ratchet_core.example_key.example_key`` on ledger
  texts that are NOT canonical (whitespace, unsorted keys, floats, astral characters);
- receipt leaves and totals (assembled set-wise) vs ``canonical_json`` of ``leaf_rows`` and ``totals_from_rows``.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet_assets.night import canonical_fixups, canonical_json_text, connect
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import request_rows, write_segments
from ratchet_assets.night.receipts import leaf_rows, receipt_leaves
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.example_key import example_key
from ratchet_stats.canonical import canonical_json
from ratchet_stats.receipt.v2 import totals_from_rows

from .conftest import DAY1

_text = st.text(st.characters(codec="utf-8"), max_size=12)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e-7, 1e16, 0.00001, 123456.5, -0.0, 1.0])
    | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


def _spellings(value: object) -> list[bytes]:
    """Canonical and non-canonical JSON texts of one value."""
    return [
        canonical_json(value),
        json.dumps(value).encode(),  # whitespace, ASCII escapes, insertion order
        json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(),  # unsorted keys
        orjson.dumps(value, option=orjson.OPT_SORT_KEYS) if _orjson_ok(value) else canonical_json(value),
    ]


def _orjson_ok(value: object) -> bool:
    try:
        orjson.dumps(value)
        return True
    except TypeError:  # integers beyond 64 bits
        return False


def _definition(data: bytes) -> str | None:
    canon = canonical_json(json.loads(data))
    return None if canon == data else canon.decode()


@settings(max_examples=300, deadline=None)
@given(_json)
def test_canonical_json_text_matches_the_definition(value: object) -> None:
    for data in _spellings(value):
        assert canonical_json_text(data) == _definition(data)


def test_orjson_writes_every_code_point_as_pythons_encoder_does() -> None:
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    ours = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode(chars).encode()
    assert orjson.dumps(chars) == ours


@settings(max_examples=20, deadline=None)
@given(st.lists(_json, min_size=1, max_size=30))
def test_canonical_fixups_screened_by_duckdb_match_the_definition(values: list[object]) -> None:
    import pyarrow as pa

    texts = [s for v in values for s in _spellings(v)]
    con = connect()
    con.register("texts", pa.table({"text": pa.array(texts, pa.binary()).cast(pa.string())}))
    got = canonical_fixups(con, "SELECT text FROM texts").to_pylist()
    con.close()
    want = {d: c for d in set(texts) if (c := _definition(d)) is not None and d}
    assert {r["raw"].encode(): r["canonical"] for r in got} == want


def _respell(text: str, rng: random.Random) -> str:
    """The same JSON value, spelled differently (what a non-canonical writer might store)."""
    if not text:
        return text
    value = json.loads(text)
    choice = rng.randrange(4)
    if choice == 0:
        return json.dumps(value)  # whitespace and \\u escapes
    if choice == 1:
        return json.dumps(value, ensure_ascii=False, indent=1)
    if choice == 2 and isinstance(value, list) and value and isinstance(value[0], dict):
        value[0] = dict(reversed(list(value[0].items())))  # unsorted keys
        value[0]["\U0001f600 note"] = 1.5e-7  # an astral key and a float with an exponent
        return json.dumps(value, ensure_ascii=False)
    return text


def test_examples_keys_on_non_canonical_ledger_texts_match_example_key(tmp_path: Path) -> None:
    rng = random.Random(11)
    rows = request_rows(DAY1, 120, seed=8, student_share=0.3, audit_share=0.6, repeat_share=0.3)
    for r in rows:
        r["messages"] = _respell(r["messages"], rng)
        r["tools"] = _respell(r["tools"], rng)
        r["tool_calls"] = _respell(r["tool_calls"], rng)
    write_segments(tmp_path / "lake", rows)
    art = tmp_path / "art"
    consolidate_traffic(tmp_path / "lake", art, DAY1)
    table = pq.read_table(build_examples(art, DAY1).path).to_pylist()
    by_id = {(r["request_id"], r["kind"]): r for r in rows}
    assert table
    for ex in table:
        src = by_id[(ex["request_id"], "request" if ex["source"] == "request" else "pair")]
        if ex["source"] == "audit" and not src["messages"]:
            src = {**src, **{k: by_id[(ex["request_id"], "request")][k] for k in ("messages", "tools")}}
        tools = json.loads(src["tools"]) if src["tools"] else None
        tools = tools["tools"] if isinstance(tools, dict) else tools
        rf = json.loads(src["response_format"]) if src["response_format"] else None
        messages = json.loads(src["messages"])
        assert ex["example_key"] == example_key(src["task"], messages, tools, rf)
        assert ex["messages"].encode() == canonical_json(messages)
        calls = json.loads(src["tool_calls"]) if src["tool_calls"] else None
        answer = {"role": "assistant", "content": src["answer"] or None, "tool_calls": calls or None}
        assert ex["answer"].encode() == canonical_json(answer)


def test_receipt_leaves_and_totals_match_the_definition(tmp_path: Path) -> None:
    rows = [r for r in request_rows(DAY1, 80, seed=9) if r["kind"] == "request"]
    odd = [
        {"client": 'say "hi"\n', "version": None, "teacher_cost_usd": None, "actual_cost_usd": -0.0},
        {"client": None, "served_by": "", "teacher_cost_usd": 1e-7, "actual_cost_usd": 12345678.123},
        {"task": "tâche \U0001f600", "served_by": None, "prompt_tokens": None, "status_code": None},
        {"ts": datetime(2026, 1, 1, 23, 59, 59, 999999, tzinfo=UTC), "request_id": "a\\b"},
    ]
    for r, change in zip(rows, odd, strict=False):
        r.update(change)
    write_segments(tmp_path / "lake", rows)
    consolidate_traffic(tmp_path / "lake", tmp_path / "art", DAY1)
    path = tmp_path / "art" / "traffic" / f"day={DAY1}" / "traffic.parquet"
    want = leaf_rows(path)
    batches = list(receipt_leaves(path))
    got = [leaf.encode() for b in batches for leaf in b["leaf"].to_pylist()]
    assert got == [canonical_json(r) for r in want]
    # The set-wise totals (per batch, student rows priced once per distinct prompt length) are the per-row
    # definition the verifier applies (ratchet_stats.receipt.v2.totals_from_rows).
    from ratchet_assets.night.receipts import _DayTotals
    from ratchet_stats import teacher_equivalent as te

    day = _DayTotals()
    for b in batches:
        day.add(b)
    assert day.answers == te.request_answers(want)
    lines = te.day_estimates(DAY1, day.answers, {}, day.student_tasks(), None)
    estimates = {e["task"]: e for e in lines}
    prices = te.prices_doc("openai/demo-teacher", 2.5e-6, 1e-5)
    day.price(estimates, prices)
    clients, first = totals_from_rows(want, estimates, prices)
    assert canonical_json(dict(sorted(day.clients.items()))) == canonical_json(clients)
    assert day.first == first


def test_non_canonical_texts_in_key_ranges_rekey_the_day_to_the_same_bytes(tmp_path: Path) -> None:
    """The key ranges key the messages as written and check them afterwards: a range holding a non-canonical
    text sends the day through a second, canonicalising pass, so the split file equals the one-range file
    (in which respelled repeats of one request share one key)."""
    from ratchet_assets.night.budget import Budget
    from ratchet_assets.night.examples import ExamplesPart, merge_examples, prepare_examples

    rng = random.Random(5)
    rows = request_rows(DAY1, 160, seed=9, student_share=0.3, audit_share=0.6, repeat_share=0.4)
    for r in rows:
        r["messages"] = _respell(r["messages"], rng)
    write_segments(tmp_path / "lake", rows)
    files = {}
    for name, budget in (
        ("one", None),
        ("split", Budget(shards=3)),
        ("workers", Budget(shards=3, workers=2)),
    ):
        art = tmp_path / name
        consolidate_traffic(tmp_path / "lake", art, DAY1)
        result = build_examples(art, DAY1, budget=budget)
        files[name] = Path(result.path).read_bytes()
        assert result.candidates - result.erased - result.duplicates == result.examples > 0
    assert files["split"] == files["one"] == files["workers"]
    keys = pq.read_table(tmp_path / "one" / "examples" / f"day={DAY1}" / "examples.parquet")["example_key"]
    assert len(set(keys.to_pylist())) == len(keys)
    # The first pass over the ranges is what flags them (the Dagster merge step re-keys the day).
    art = tmp_path / "split"
    plan = prepare_examples(art, DAY1, budget=Budget(shards=3))
    from ratchet_assets.night.examples import examples_shard

    parts = [examples_shard(plan, i) for i in range(plan.shards)]
    assert any(p.noncanonical for p in parts) and all(isinstance(p, ExamplesPart) for p in parts)
    assert Path(merge_examples(plan, parts).path).read_bytes() == files["one"]


def test_canonical_fixups_checks_texts_in_bulk_only_when_each_is_one_document() -> None:
    """The bulk round trip of ``[t1,t2,...]`` would accept ``1,2`` / ``[3`` / ``4]`` as a whole (it spells the
    canonical array ``[1,2,[3,4]]``); each text is checked alone instead, so the invalid ones raise as before."""
    con = connect()
    con.register("texts", pa.table({"text": ["1,2", "[3", "4]", '{"a":1}']}))
    with pytest.raises(ValueError):
        canonical_fixups(con, "SELECT text FROM texts")
    con.register("ok", pa.table({"text": ['{"a":1}', "[1,2]", '"x"', '{"b":[true,null]}'] * 3}))
    assert canonical_fixups(con, "SELECT text FROM ok").num_rows == 0
    con.register("mixed", pa.table({"text": ['{"a":1}', '{"b":1,"a":2}', "[1, 2]"]}))
    got = canonical_fixups(con, "SELECT text FROM mixed").to_pylist()
    assert sorted((r["raw"], r["canonical"]) for r in got) == [
        ("[1, 2]", "[1,2]"),
        ('{"b":1,"a":2}', '{"a":2,"b":1}'),
    ]
