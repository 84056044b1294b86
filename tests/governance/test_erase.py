"""An end user's erasure, end to end: a real replica ledger, the lake, a night's artifacts and a signed receipt.

After ``erase(users=alice)`` no byte of alice's prompts or answers is anywhere under RATCHET_HOME (every file read
raw, and decoded: Parquet columns, DuckDB tables, journal records), the day's receipt still verifies (a rebuilt
receipt gives the signed root; an erased row's inclusion proof verifies), and the next night leaves her rows out.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ratchet_assets.effects import EffectLedger
from ratchet_assets.governance.erase import ErasureError, ErasureScope, erase, read_log
from ratchet_assets.night.erasures import load_erasures
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import request_rows, write_day
from ratchet_assets.night.receipts import build_receipt, receipt_proof
from ratchet_assets.night.split import split_golden
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_assets.night.training_set import build_training_set
from ratchet_core.control_db import make_engine
from ratchet_core.erasure_scope import snapshot
from ratchet_core.layout import ArtifactLayout
from ratchet_gateway.ledger import Ledger, read_journal
from ratchet_stats.canonical import canonical_json
from ratchet_stats.commitment import key_commitment
from ratchet_stats.keys import generate_private_key
from ratchet_stats.receipt import verify_receipt

DAY1, DAY2 = "2026-01-01", "2026-01-02"
TEACHER = "openai/demo-teacher"


def _alice_rows(n: int) -> tuple[list[dict], list[bytes]]:
    """n teacher-served rows of end user alice with unique prompt/answer text; the markers to look for."""
    base = [
        r
        for r in request_rows(DAY1, 200, seed=7, failure_share=0, student_share=0, repeat_share=0)
        if r["answer"] and not r["tool_calls"] and not r["tools"] and not r["response_format"]
    ]
    rows, markers = [], []
    for i, r in enumerate(base[:n]):
        prompt, answer = f"alice-private-prompt-{i:03d}-zqxv", f"alice-private-answer-{i:03d}-wjkp"
        msgs = [{"role": "user", "content": f"My account note is {prompt}. Summarise it."}]
        rows.append(
            dict(
                r,
                request_id=f"req-alice-{i:03d}",
                messages=canonical_json(msgs).decode(),
                answer=answer,
                params=canonical_json({"temperature": 0, "user": "alice"}).decode(),
            )
        )
        markers += [prompt.encode(), answer.encode()]
    return rows, markers


def _found(home: Path, markers: list[bytes]) -> dict[str, set[bytes]]:
    """Every file under home that holds a marker: raw bytes, and decoded (Parquet, DuckDB, journal records)."""
    hits: dict[str, set[bytes]] = {}

    def look(path: Path, data: bytes) -> None:
        got = {m for m in markers if m in data}
        if got:
            hits.setdefault(str(path.relative_to(home)), set()).update(got)

    for path in sorted(p for p in home.rglob("*") if p.is_file()):
        look(path, path.read_bytes())
        if path.suffix == ".parquet":
            look(path, json.dumps(pq.read_table(path).to_pylist(), default=str).encode())
        elif path.suffix == ".duckdb":
            con = duckdb.connect(str(path))  # the replica in this process may hold it open: same config
            for (table,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
                look(path, json.dumps(con.execute(f"SELECT * FROM {table}").fetchall(), default=str).encode())
            con.close()
        elif path.suffix == ".journal":
            look(path, json.dumps(read_journal(path), default=str).encode())
    return hits


@pytest.mark.slow
def test_an_end_users_erasure_leaves_no_byte_and_receipts_still_verify(tmp_path: Path) -> None:
    home = tmp_path / "home"
    lake, art = home / "lake", home / "artifacts"
    engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
    key = generate_private_key()
    alice, markers = _alice_rows(8)
    others = request_rows(DAY1, 80, seed=1)

    # A real replica ledger (journal -> DuckDB -> sealed segments) that polls the control DB for erasures.
    ledger = Ledger(
        home / "ledger",
        str(lake),
        segment_seconds=3600,
        replica_base="gw",
        erasures=lambda: snapshot(engine),
        erasure_poll_s=0.05,
    )
    ledger.open()
    try:
        for row in sorted(others + alice, key=lambda r: r["ts"]):
            ledger.append_nowait(dict(row))
        ledger.seal_now()
        write_day(lake, DAY2, 1, seed=9)  # the next day has begun: DAY1 is complete
        for row in alice[:2]:  # alice's latest requests: journaled and in DuckDB, not sealed yet
            ledger.append_nowait(dict(row, request_id=row["request_id"] + "-late", day=DAY2, ts=row["ts"]))
        deadline = time.monotonic() + 10
        while ledger.lag_rows and time.monotonic() < deadline:
            time.sleep(0.02)

        # The night of DAY1: traffic, examples, golden, training set, the signed receipt.
        consolidate_traffic(lake, art, DAY1)
        build_examples(art, DAY1)
        split_golden(art, DAY1, share=0.3, floor=2)
        build_training_set(art, DAY1)
        receipt = build_receipt(art, DAY1, key, EffectLedger(engine), teacher_model=TEACHER)
        before = _found(home, markers)
        for store in (
            "lake/traffic",
            "artifacts/traffic",
            "artifacts/examples",
            "artifacts/train",
            "ledger/gw-0",
        ):
            assert any(f.startswith(store) for f in before), (store, sorted(before))

        scope = ErasureScope(users=("alice",))
        with pytest.raises(ErasureError, match="at least one"):
            erase(ErasureScope(), lake_root=str(lake), artifacts_root=str(art), engine=engine, reason="gdpr")
        dry = erase(
            scope,
            lake_root=str(lake),
            artifacts_root=str(art),
            engine=engine,
            reason="GDPR art. 17",
            dry_run=True,
        )
        assert (
            dry.counts["requests"] == 8 and dry.counts["lake_rows"] == 8 and dry.counts["examples_rows"] >= 1
        )
        assert _found(home, markers) == before and load_erasures(engine).request_ids == frozenset()

        done = erase(
            scope,
            lake_root=str(lake),
            artifacts_root=str(art),
            engine=engine,
            reason="GDPR art. 17 request from alice",
            private_key=key,
            actor="dpo@example.com",
        )
        assert {k: done.counts[k] for k in dry.counts} == dry.counts
        # alice's rows not sealed yet match no sealed traffic: the replica applies the stored scope to them.
        assert ledger.wait_erasures(
            {r["request_id"] for r in alice} | {r["request_id"] + "-late" for r in alice[:2]}
        )
        # The training and golden sets were rewritten: their commitments follow the files, the old roots are kept.
        layout = ArtifactLayout(art)
        train_c = json.loads(layout.train_commitment(DAY1).read_text())
        assert train_c["keys"]["root"] == key_commitment(layout.train_keys(DAY1).read_text().split()).root
        assert train_c["rewritten_by_erasure"][0]["previous"]["keys"]["size"] > train_c["keys"]["size"]
        for day in done.golden_days:
            golden_c = json.loads(layout.golden_commitment(day).read_text())
            left = pq.read_table(layout.golden_file(day))["example_key"].to_pylist()
            assert golden_c["keys"]["root"] == key_commitment(left).root
            assert layout.golden_keys(day).read_text().split() == sorted(left)
    finally:
        ledger.close()

    assert _found(home, markers) == {}
    # The rewritten replica file reopens with its seal mark and its applied erasures (nothing replayed or resealed).
    again_ledger = Ledger(home / "ledger", str(lake), segment_seconds=3600, replica_base="gw")
    again_ledger.open()
    try:
        assert again_ledger.replica == "gw-0" and again_ledger.wait_erasures(done.request_ids, timeout=0)
        assert (
            again_ledger._sealed_seq == len(others) + len(alice) + 2
        )  # the late rows: sealed blanked at close
    finally:
        again_ledger.close()
    assert _found(home, markers) == {}
    # The log is signed and says who, why, the scope (alice only as a hash) and the counts.
    log = read_log(engine, [key.public_key()])
    assert log[0]["actor"] == "dpo@example.com" and log[0]["counts"]["requests"] == 8
    # ... and what the replica scrubbed for it: alice's 8 sealed requests' copies and her 2 unsealed ones
    applied = log[0]["applied"]
    assert [a["store"] for a in applied] == ["replica:gw-0"]
    assert applied[0]["counts"]["requests"] == 10 and applied[0]["counts"]["requests_not_sealed"] == 2
    assert "alice" not in json.dumps(log[0]["scope"]) and log[0]["scope"]["users_sha256"]

    # The day's receipt still verifies: its rows, an erased row's proof, and a rebuild gives the signed root.
    layout = ArtifactLayout(art)
    envelope = layout.receipt_envelope(DAY1).read_bytes()
    leaves = [s.encode() for s in pq.read_table(layout.receipt_rows(DAY1))["leaf"].to_pylist()]
    lines = {
        name: path.read_bytes().splitlines()
        for name, path in (
            ("clients", layout.receipt_clients(DAY1)),
            ("estimates", layout.receipt_estimates(DAY1)),
        )
    }
    # v3 receipts commit to the pair calls too
    if (pairs := layout.receipt_dir(DAY1) / "pairs.jsonl").exists():
        lines["pairs"] = pairs.read_bytes().splitlines()
    assert "rows" in verify_receipt(envelope, key.public_key(), leaves=leaves, **lines)["checks"]
    proof = receipt_proof(DAY1, alice[0]["request_id"], art)
    assert (
        verify_receipt(envelope, key.public_key(), proof=proof)["row"]["request_id"] == alice[0]["request_id"]
    )
    consolidate_traffic(lake, art, DAY1)
    again = build_receipt(art, DAY1, key, EffectLedger(engine), teacher_model=TEACHER)
    assert again.root == receipt.root and again.outcome == "duplicate"

    # The next night: alice's examples are not in its training set, even re-asked on DAY2.
    write_day(lake, DAY2, 40, seed=2, day_index=1)
    erased = load_erasures(engine)
    consolidate_traffic(lake, art, DAY2)
    build_examples(art, DAY2, erased)
    split_golden(art, DAY2, share=0.3, floor=2, erasures=erased)
    t2 = build_training_set(art, DAY2, window_days=2, erasures=erased)
    assert not set(Path(t2.keys_path).read_text().split()) & set(done.example_keys)
    assert done.example_keys and not any(m in Path(t2.path).read_bytes() for m in markers)
    honoured = json.loads(Path(t2.path).with_name("commitment.json").read_text())[
        "erasures"
    ]  # the BOM's source
    assert (
        honoured["honoured"]
        == len(erased.request_ids) + len(erased.example_keys)
        >= 8 + len(done.example_keys)
    )
    assert _found(home, markers) == {}


def test_erase_by_client_time_and_text_counts_per_store(tmp_path: Path) -> None:
    lake, art = tmp_path / "lake", tmp_path / "art"
    write_day(lake, DAY1, 40, seed=3)
    consolidate_traffic(lake, art, DAY1)
    engine = make_engine(f"sqlite:///{(tmp_path / 'c.db').as_posix()}")
    table = pq.read_table(art / "traffic" / f"day={DAY1}" / "traffic.parquet")
    requests = table.filter(pa.compute.equal(table["kind"], "request"))
    first = requests.slice(0, 1).to_pylist()[0]
    word = json.loads(first["messages"])[-1]["content"][:12]
    by_text = erase(
        ErasureScope(text=word),
        lake_root=str(lake),
        artifacts_root=str(art),
        engine=engine,
        reason="test",
        dry_run=True,
    )
    assert first["request_id"] in by_text.request_ids
    from datetime import timedelta

    t0 = first["ts"]
    window = ErasureScope(clients=(first["client"],), since=t0, until=t0 + timedelta(seconds=1))
    by_client = erase(
        window, lake_root=str(lake), artifacts_root=str(art), engine=engine, reason="test", dry_run=True
    )
    assert by_client.request_ids == [first["request_id"]]
    assert by_client.counts["traffic_rows"] >= 1 and by_client.counts["lake_rows"] >= 1


def test_cli_erase_dry_run_then_signed_log(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ratchet_assets.admin.cli import admin
    from ratchet_stats.keys import public_key_pem, save_private_key

    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    (home / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    write_day(home / "lake", DAY1, 30, seed=5)
    runner = CliRunner(env={"RATCHET_HOME": str(home)})
    args = ["erase", "--client", "acme", "--until", "2026-01-01T06:00", "--reason", "customer offboarding"]
    dry = runner.invoke(admin, [*args, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    counted = json.loads(dry.output)
    assert counted["dry_run"] and counted["counts"]["lake_rows"] > 0 and counted["log_id"] is None
    assert runner.invoke(admin, ["erasures", "--json"]).output.strip() == "[]"
    done = runner.invoke(admin, [*args, "--actor", "ops"])
    assert done.exit_code == 0 and "erased (log #1)" in done.output, done.output
    log = json.loads(runner.invoke(admin, ["erasures", "--json"]).output)
    assert log[0]["actor"] == "ops" and log[0]["counts"]["lake_rows"] == counted["counts"]["lake_rows"]
    again = runner.invoke(admin, [*args, "--dry-run", "--json"])
    assert (
        json.loads(again.output)["counts"]["lake_rows"] == counted["counts"]["lake_rows"]
    )  # tombstones stay
    bad = runner.invoke(admin, ["erase", "--reason", "no scope given"])
    assert bad.exit_code == 2 and "at least one" in bad.output


def test_adapters_trained_on_erased_examples_are_named(tmp_path: Path) -> None:
    from ratchet_assets.governance.erase import adapters_trained_on

    layout = ArtifactLayout(tmp_path)
    for version, keys in (("v1-a", ["k1", "k2"]), ("v2-b", ["k3"])):
        layout.bom_dir(version).mkdir(parents=True)
        layout.bom(version).write_text("{}")
        layout.bom_train_keys(version).write_text("".join(k + "\n" for k in keys))
    assert adapters_trained_on(layout, {"k2", "k9"}) == ["v1-a"]
    assert adapters_trained_on(layout, {"k9"}) == []


def _signed_home(tmp_path: Path) -> tuple[Path, object]:
    """A Ratchet home with a signing key (erasures are signed) and a day of sealed traffic; and a CLI runner."""
    from click.testing import CliRunner

    from ratchet_stats.keys import public_key_pem, save_private_key

    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    (home / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    write_day(home / "lake", DAY1, 30, seed=5)
    return home, CliRunner(env={"RATCHET_HOME": str(home)})


def test_an_erasure_that_matches_nothing_says_so_and_signs_zero_requests(tmp_path: Path) -> None:
    from ratchet_assets.admin.cli import admin

    home, runner = _signed_home(tmp_path)
    done = runner.invoke(
        admin, ["erase", "--request-id", "req-nobody-sent", "--reason", "user asked to erase"]
    )
    assert done.exit_code == 0, done.output
    assert "nothing matched" in done.output and "erased (log #1): 0 requests" in done.output
    assert "1 given request ids are in no sealed row (req-nobody-sent): not counted" in done.output
    [entry] = json.loads(runner.invoke(admin, ["erasures", "--json"]).output)  # the signature verified
    assert entry["counts"]["requests"] == 0 and entry["request_ids"] == []
    assert entry["request_ids_not_found"] == ["req-nobody-sent"]
    # still recorded: a replica that holds the id unsealed blanks it when it applies the erasure
    assert load_erasures(make_engine(f"sqlite:///{home / 'control.db'}")).request_ids == {"req-nobody-sent"}
    bad = runner.invoke(admin, ["erase", "--request-id", "req-1\nx", "--reason", "user asked to erase"])
    assert bad.exit_code == 2 and "is not a valid request id" in bad.output


@pytest.mark.parametrize("kind", ["symlink", "not parquet", "folder"])
def test_a_lake_segment_the_erasure_cannot_read_fails_it_loudly_and_changes_nothing(
    tmp_path: Path, kind: str
) -> None:
    from ratchet_assets.admin.cli import admin

    home, runner = _signed_home(tmp_path)
    day = home / "lake" / "traffic" / f"day={DAY1}"
    first = sorted(day.glob("*.parquet"))[0]
    odd = day / "zz-odd.parquet"
    if kind == "symlink":  # a segment moved out of the lake, a link left in its place
        moved = tmp_path / "elsewhere.parquet"
        first.rename(moved)
        odd = first
        odd.symlink_to(moved)
    elif kind == "not parquet":
        odd.write_bytes(b"PAR1 half a segment")
    else:
        odd.mkdir()
    before = {p: p.read_bytes() for p in sorted(day.glob("*.parquet")) if p.is_file() and not p.is_symlink()}
    args = ["erase", "--client", "acme", "--reason", "customer offboarding"]
    for extra in (["--dry-run"], []):
        failed = runner.invoke(admin, [*args, *extra])
        assert failed.exit_code == 2, failed.output
        assert odd.name in failed.output and "nothing was erased" in failed.output
        assert "Traceback" not in failed.output and "erased (log" not in failed.output
    assert {p: p.read_bytes() for p in before} == before
    assert runner.invoke(admin, ["erasures", "--json"]).output.strip() == "[]"
