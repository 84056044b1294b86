"""``ratchet export``: a task's and client's rows as JSONL or Parquet whose manifest root verifies offline."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ratchet_assets.effects import EffectLedger
from ratchet_assets.governance.export import ExportError, ExportFilters, export_data, verify_export
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.receipts import build_receipt
from ratchet_assets.night.split import split_golden
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.control_db import make_engine
from ratchet_stats.keys import generate_private_key

DAY1 = "2026-01-01"


@pytest.fixture
def night(tmp_path: Path) -> dict:
    lake, art = tmp_path / "lake", tmp_path / "art"
    write_day(lake, DAY1, 60, seed=4)
    consolidate_traffic(lake, art, DAY1)
    build_examples(art, DAY1)
    split_golden(art, DAY1, share=0.3, floor=2)
    engine = make_engine(f"sqlite:///{(tmp_path / 'c.db').as_posix()}")
    key = generate_private_key()
    build_receipt(art, DAY1, key, EffectLedger(engine), teacher_model="openai/demo-teacher")
    return {"lake": str(lake), "art": str(art), "engine": engine, "key": key, "tmp": tmp_path}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_root_verifies_and_a_changed_row_fails(night: dict, fmt: str) -> None:
    out = night["tmp"] / f"out-{fmt}"
    filters = ExportFilters(
        client="acme", since=datetime(2026, 1, 1, tzinfo=UTC), until=datetime(2026, 1, 2, tzinfo=UTC)
    )
    manifest = export_data(
        out,
        lake_root=night["lake"],
        artifacts_root=night["art"],
        filters=filters,
        fmt=fmt,
        engine=night["engine"],
        private_key=night["key"],
    )
    files = manifest["files"]
    assert files["requests"]["rows"] > 0 and files["receipts"]["rows"] == files["requests"]["rows"]
    assert files["examples"]["rows"] > 0
    assert verify_export(out, [night["key"].public_key()])["root"] == manifest["root"]
    if fmt == "jsonl":
        rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        assert {r["client"] for r in rows} == {"acme"} and all(r["ts"].startswith(DAY1) for r in rows)
        receipts = [json.loads(line) for line in (out / "receipts.jsonl").read_text().splitlines()]
        assert {json.loads(r["leaf"])["client"] for r in receipts} == {"acme"}
        lines = (out / "requests.jsonl").read_bytes().splitlines()
        lines[0] = lines[0].replace(b'"acme"', b'"evil"')
        (out / "requests.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    else:
        import polars as pl

        frame = pl.read_parquet(out / "requests.parquet")
        frame.with_columns(pl.col("answer").str.replace("^", "x")).write_parquet(out / "requests.parquet")
    with pytest.raises(ExportError, match="requests"):
        verify_export(out)


def test_export_leaves_out_erased_requests(night: dict) -> None:
    from ratchet_assets.governance.erase import ErasureScope, erase

    first = export_data(
        night["tmp"] / "a", lake_root=night["lake"], artifacts_root=night["art"], filters=ExportFilters(),
        kinds=("requests",), engine=night["engine"],
    )  # fmt: skip
    rid = json.loads((night["tmp"] / "a" / "requests.jsonl").read_text().splitlines()[0])["request_id"]
    erase(
        ErasureScope(request_ids=(rid,)), lake_root=night["lake"], artifacts_root=night["art"],
        engine=night["engine"], reason="test erasure", private_key=night["key"],
    )  # fmt: skip
    second = export_data(
        night["tmp"] / "b", lake_root=night["lake"], artifacts_root=night["art"], filters=ExportFilters(),
        kinds=("requests",), engine=night["engine"],
    )  # fmt: skip
    assert second["files"]["requests"]["rows"] == first["files"]["requests"]["rows"] - 1
    assert rid not in (night["tmp"] / "b" / "requests.jsonl").read_text()


def test_cli_export_then_verify_then_tamper(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ratchet_assets.governance.cli import export_cmd, import_cmd
    from ratchet_stats.keys import public_key_pem, save_private_key

    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    (home / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    write_day(home / "lake", DAY1, 20, seed=6)
    runner = CliRunner(env={"RATCHET_HOME": str(home)})
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi there"}], "answer": "hello"}) + "\n"
    )
    res = runner.invoke(
        import_cmd, [str(rows), "--task", "greet", "--as", "golden", "--source", "s", "--license", "MIT"]
    )
    assert res.exit_code == 0 and "imported 1 golden rows" in res.output, res.output
    out = tmp_path / "export"
    res = runner.invoke(export_cmd, ["--out", str(out), "--client", "globex", "--kind", "requests"])
    assert res.exit_code == 0 and "manifest root" in res.output, res.output
    ok = runner.invoke(export_cmd, ["--verify", str(out)])
    assert ok.exit_code == 0 and "signed" in ok.output, ok.output
    (out / "requests.jsonl").write_bytes((out / "requests.jsonl").read_bytes()[:-1] + b" \n")
    bad = runner.invoke(export_cmd, ["--verify", str(out)])
    assert bad.exit_code == 2 and "requests" in bad.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--out", "{home}/keys/export"], "is inside the Ratchet home"),
        (["--out", "{home}"], "is inside the Ratchet home"),
        (["--out", "{home}/lake/x"], "is inside the Ratchet home"),
        (["--out", "{tmp}/out", "--since", "2026-01-02", "--until", "2026-01-01"], "is not before --until"),
        (["--out", "{tmp}/out", "--since", "2026-01-01", "--until", "2026-01-01"], "is not before --until"),
        (["--out", "{tmp}/out", "--task", "../../evil"], "is not a valid task"),
        (["--out", "{tmp}/out", "--client", "<b>x</b>"], "is not a valid client"),
    ],
)
def test_cli_export_refuses_a_folder_in_the_home_an_empty_range_and_bad_names(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    from click.testing import CliRunner

    from ratchet_assets.governance.cli import export_cmd

    home = tmp_path / "home"
    write_day(home / "lake", DAY1, 10, seed=6)
    before = sorted(p for p in tmp_path.rglob("*"))
    args = [a.format(home=home, tmp=tmp_path) for a in args]
    result = CliRunner(env={"RATCHET_HOME": str(home)}).invoke(export_cmd, [*args, "--no-sign"])
    assert result.exit_code == 2 and expected in result.output, result.output
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written


def test_an_out_folder_linked_into_the_home_is_refused(tmp_path: Path) -> None:
    from ratchet_assets.governance.export import check_out_folder

    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    (tmp_path / "link").symlink_to(home / "keys")
    with pytest.raises(ExportError, match="inside the Ratchet home"):
        check_out_folder(tmp_path / "link" / "export", {"Ratchet home": home})
    check_out_folder(tmp_path / "outside", {"Ratchet home": home, "lake": "s3://bucket/lake"})


def test_export_carries_feedback_of_the_filters(night: dict) -> None:
    import pyarrow.parquet as pq

    from ratchet_core import feedback as fb
    from ratchet_gateway.feedback import item_row

    rows = [r for r in pq.read_table(Path(night["art"]) / "traffic" / f"day={DAY1}" / "traffic.parquet").to_pylist()
            if r["kind"] == "request"]  # fmt: skip
    cols = ["request_id", "client", "task", "day", "served_by", "version", "messages", "tools"]
    cols += ["response_format", "answer", "tool_calls"]
    for i, r in enumerate(rows[:4]):
        stored = fb.StoredRequest(**{c: r[c] or "" for c in cols})
        item = {
            "feedback_id": f"f{i}",
            "request_id": r["request_id"],
            "metric": "comment",
            "value": f"note {i}",
        }
        fb.take(
            night["engine"], item_row(r["client"], item, {r["request_id"]: stored}, {}, lambda v: v, None)
        )
    manifest = export_data(
        night["tmp"] / "fb", lake_root=night["lake"], artifacts_root=night["art"],
        filters=ExportFilters(client="acme"), kinds=("feedback",), engine=night["engine"],
    )  # fmt: skip
    lines = [json.loads(x) for x in (night["tmp"] / "fb" / "feedback.jsonl").read_text().splitlines()]
    want = sum(r["client"] == "acme" for r in rows[:4])
    assert manifest["files"]["feedback"]["rows"] == len(lines) == want and {x["client"] for x in lines} == {
        "acme"
    }
    assert all(x["state"] == "recorded" and x["text"].startswith("note") for x in lines)
    assert verify_export(night["tmp"] / "fb")["root"] == manifest["root"]
