"""Daily receipts (v3) verify offline: teacher-equivalent totals recomputed from the rows by the signed method,
what was paid including the day's audit and shadow pair calls (their lines committed in the pair tree),
estimates chained from the previous receipt, per-client privacy (a client's view holds only its own line and rows,
proven against the signed client root); a changed byte, a dropped row, an altered line or a broken chain fail,
named. Old (v1, v2) receipts still verify."""

from __future__ import annotations

import base64
import json
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ratchet_assets.effects import EffectLedger
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.receipts import build_receipt, export_rows_jsonl, receipt_proof
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.control_db import make_engine
from ratchet_core.layout import ArtifactLayout
from ratchet_core.pricing import model_prices
from ratchet_gateway.receipt_views import auditor_view, client_view
from ratchet_stats.canonical import canonical_json
from ratchet_stats.cli import main as stats_main
from ratchet_stats.keys import generate_private_key, load_private_key_file, load_public_key
from ratchet_stats.receipt import (
    CURRENT,
    ReceiptError,
    common,
    v1,
    v2,
    v3,
    verify_client_view,
    verify_receipt,
)

from .conftest import DAY1, DAY2

DAY3 = "2026-01-03"
TEACHER = "openai/demo-teacher"


@pytest.fixture
def signed(two_days: Path) -> dict:
    """Three signed days: two of mixed traffic, then one served only by the student with no audit."""
    write_day(two_days / "lake", DAY3, 60, seed=3, day_index=2, student_share=1.0, audit_share=0.0)
    art = two_days / "artifacts"
    key = load_private_key_file(two_days / "keys" / "signing.key")
    ledger = EffectLedger(make_engine(f"sqlite:///{(two_days / 'control.db').as_posix()}"))
    out: dict = {"art": art, "layout": ArtifactLayout(art), "key": key}
    for day in (DAY1, DAY2, DAY3):
        consolidate_traffic(two_days / "lake", art, day)
        out[day] = build_receipt(art, day, key, ledger, teacher_model=TEACHER)
    out["pub"] = load_public_key((two_days / "keys" / "signing.pub").read_text())
    out["pub_path"] = two_days / "keys" / "signing.pub"
    return out


def _files(s: dict, day: str, tmp_path: Path) -> dict:
    layout = s["layout"]
    return {
        "envelope": layout.receipt_envelope(day).read_bytes(),
        "clients": layout.receipt_clients(day).read_bytes().splitlines(),
        "estimates": layout.receipt_estimates(day).read_bytes().splitlines(),
        "pairs": (layout.receipt_dir(day) / v3.PAIRS_FILE).read_bytes().splitlines(),
        "leaves": export_rows_jsonl(s["art"], day, tmp_path / f"rows-{day}.jsonl").read_bytes().splitlines(),
    }


def _oracle(art: Path, day: str, previous: dict[str, Fraction]) -> tuple[dict, dict[str, Fraction]]:
    """Independent oracle from the traffic file, written from the method's text: per-client (measured,
    estimated, paid) micro-USD (paid: request rows and pair calls) and each task's completion estimate."""
    rows = pq.read_table(ArtifactLayout(art).traffic_file(day)).to_pylist()
    answers: dict[str, list[int]] = {}
    for r in rows:
        teacher_request = r["kind"] == "request" and (r["served_by"] or "teacher") == "teacher"
        audit = r["kind"] == "pair" and r["pair_role"] == "audit" and r["pair_outcome"] != "error"
        if (teacher_request or audit) and r["status_code"] == 200 and (r["completion_tokens"] or 0) > 0:
            answers.setdefault(r["task"], []).append(r["completion_tokens"])
    estimate = dict(previous)
    estimate.update({t: Fraction(sum(c), len(c)) for t, c in answers.items()})
    p = model_prices(TEACHER)
    out: dict[str, list[int]] = {}
    for r in rows:
        if r["kind"] == "pair":
            out.setdefault(r["client"], [0, 0, 0])[2] += round((r["actual_cost_usd"] or 0.0) * 1e6)
            continue
        m, e, a = out.setdefault(r["client"], [0, 0, 0])
        if r["served_by"] == "student":
            if r["status_code"] == 200:
                usd = r["teacher_prompt_tokens"] * Fraction(p.input_per_token) + estimate.get(
                    r["task"], Fraction(0)
                ) * Fraction(p.output_per_token)
                e += round(usd * 1_000_000)
        else:
            m += round((r["teacher_cost_usd"] or 0.0) * 1e6)
        a += round((r["actual_cost_usd"] or 0.0) * 1e6)
        out[r["client"]] = [m, e, a]
    return out, estimate


def test_totals_are_the_teacher_method_recomputed_from_rows_and_estimates_chain(signed, tmp_path) -> None:
    art, pub = signed["art"], signed["pub"]
    estimates: dict[str, Fraction] = {}
    for day, prev in ((DAY1, None), (DAY2, DAY1), (DAY3, DAY2)):
        f = _files(signed, day, tmp_path)
        kwargs = {}
        if prev:
            kwargs = {
                "prev_envelope": signed["layout"].receipt_envelope(prev).read_bytes(),
                "prev_estimates": signed["layout"].receipt_estimates(prev).read_bytes().splitlines(),
            }
        report = verify_receipt(
            f["envelope"],
            pub,
            leaves=f["leaves"],
            clients=f["clients"],
            estimates=f["estimates"],
            pairs=f["pairs"],
            **kwargs,
        )
        want = ["signature", "predicate"] + (["chain"] if prev else []) + ["clients", "estimates"]
        want += (["chained-estimates"] if prev else []) + ["pairs", "rows"]
        assert report["checks"] == want
        per_client, estimates = _oracle(art, day, estimates)
        lines = {json.loads(b)["client"]: json.loads(b)["totals"] for b in f["clients"]}
        got = {
            c: [
                t["teacher_cost_measured_micro_usd"],
                t["teacher_cost_estimated_micro_usd"],
                t["actual_cost_micro_usd"],
            ]
            for c, t in lines.items()
        }
        assert got == per_client
        # Paid counts the day's audit and shadow calls: the pair lines' cost, nothing else.
        pair_rows = [json.loads(b) for b in f["pairs"]]
        t = signed[day].totals
        assert t["pairs"] == len(pair_rows) and t["pairs"] == sum(
            1 for r in pq.read_table(signed["layout"].traffic_file(day)).to_pylist() if r["kind"] == "pair"
        )
        assert t["pair_cost_micro_usd"] == sum(round(r["actual_cost_usd"] * 1e6) for r in pair_rows)
        assert t["saved_micro_usd"] == t["teacher_cost_micro_usd"] - t["actual_cost_micro_usd"]
        if day != DAY3:  # days with audits: their teacher calls are in what was paid
            audits = [r for r in pair_rows if r["pair_role"] == "audit"]
            assert (
                audits
                and t["pair_cost_micro_usd"] >= sum(round(r["teacher_cost_usd"] * 1e6) for r in audits) > 0
            )
    # Day 3: the student served everything and nobody audited, so its estimates come from day 2's receipt.
    day3 = {e["task"]: e for e in signed[DAY3].estimates}
    assert {e["source"] for e in day3.values()} <= {"previous", "day"}
    carried = [e for e in day3.values() if e["source"] == "previous"]
    assert carried and all(e["day"] == DAY2 for e in carried)
    assert signed[DAY3].totals["teacher_cost_estimated_micro_usd"] > 0
    day2 = {e["task"]: e for e in signed[DAY2].estimates}
    assert all(day3[t]["from_audits"] == day2[t]["from_audits"] for t in (e["task"] for e in carried))


def test_the_signed_receipt_names_no_client_and_a_client_sees_only_itself(signed, tmp_path) -> None:
    layout, pub = signed["layout"], signed["pub"]
    envelope = json.loads(layout.receipt_envelope(DAY2).read_bytes())
    payload = base64.b64decode(envelope["payload"])
    assert b"acme" not in payload and b"globex" not in payload
    predicate = json.loads(payload)["predicate"]
    assert "totals" not in predicate and set(predicate["clients"]) == {
        "root",
        "size",
        "tree",
        "order",
        "leaf_fields",
    }
    view = client_view(layout.receipt_dir(DAY2), DAY2, "acme")
    assert "globex" not in json.dumps(view)
    report = verify_client_view(view, pub)
    assert report["checks"] == ["signature", "predicate", "client-line", "estimates", "client-rows"]
    line = next(json.loads(b) for b in layout.receipt_clients(DAY2).read_bytes().splitlines() if b"acme" in b)
    assert report["totals"] == line["totals"] and report["rows"] == line["totals"]["requests"]
    # The auditor's view has every line.
    whole = auditor_view(layout.receipt_dir(DAY2), DAY2)
    assert [json.loads(c)["client"] for c in whole["clients"]] == ["acme", "globex"]

    def fails(check: str, v: dict) -> None:
        with pytest.raises(ReceiptError) as info:
            verify_client_view(v, pub)
        assert info.value.check == check, str(info.value)

    bad = json.loads(json.dumps(view))
    forged = json.loads(bad["line"]["leaf"])
    forged["totals"]["saved_micro_usd"] += 1
    forged["totals"]["teacher_cost_micro_usd"] += 1
    forged["totals"]["teacher_cost_estimated_micro_usd"] += 1
    bad["line"]["leaf"] = json.dumps(forged, sort_keys=True, separators=(",", ":"))
    fails("client-line", bad)  # a line that adds up but is not the signed one
    bad = json.loads(json.dumps(view))
    bad["rows"] = bad["rows"][1:]
    fails("client-rows", bad)  # a row withheld
    theirs = client_view(layout.receipt_dir(DAY2), DAY2, "globex")
    bad = json.loads(json.dumps(view))
    bad["rows"] = sorted(bad["rows"] + theirs["rows"][:1], key=lambda r: r["index"])
    fails("client-rows", bad)  # another client's row
    bad = json.loads(json.dumps(view))
    bad["client"] = "globex"
    fails("client-line", bad)  # acme's line passed off as globex's
    with pytest.raises(ReceiptError) as info:
        verify_client_view(view, generate_private_key().public_key())
    assert info.value.check == "keyid"


def _fails(check: str, *args, **kwargs) -> str:
    with pytest.raises(ReceiptError) as info:
        verify_receipt(*args, **kwargs)
    assert info.value.check == check, str(info.value)
    return str(info.value)


def test_tampering_fails_naming_the_check(signed: dict, tmp_path: Path) -> None:
    pub, layout = signed["pub"], signed["layout"]
    f = _files(signed, DAY2, tmp_path)
    day1 = layout.receipt_envelope(DAY1).read_bytes()
    full = {"clients": f["clients"], "estimates": f["estimates"], "pairs": f["pairs"]}
    # One changed byte in the signed payload.
    env = json.loads(f["envelope"])
    payload = bytearray(base64.b64decode(env["payload"]))
    payload[payload.index(b'"size":') + 7] ^= 1
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    _fails("signature", json.dumps(env), pub)
    # A dropped row; an altered row (same count); an altered client line; a swapped estimate.
    leaves = f["leaves"]
    assert "rows dropped?" in _fails("rows", f["envelope"], pub, leaves=leaves[:5] + leaves[6:], **full)
    altered = [*leaves[:-1], leaves[-1].replace(b'"status_code":200', b'"status_code":201')]
    _fails("rows", f["envelope"], pub, leaves=altered, **full)
    line = json.loads(f["clients"][0])
    line["totals"]["actual_cost_micro_usd"] -= 5
    line["totals"]["saved_micro_usd"] += 5
    forged = v3.client_leaf(line["client"], line["salt"], line["tasks"], line["totals"])
    _fails("clients", f["envelope"], pub, clients=[forged, *f["clients"][1:]])
    # The pair calls: a dropped pair line, a cheaper one, a client line that leaves them out of what was paid.
    pairs = f["pairs"]
    assert pairs, "day 2 has audits"
    assert "dropped?" in _fails("pairs", f["envelope"], pub, **{**full, "pairs": pairs[1:]})
    cheaper = json.loads(pairs[0])
    cheaper["actual_cost_usd"] = 0.0
    _fails("pairs", f["envelope"], pub, **{**full, "pairs": [canonical_json(cheaper), *pairs[1:]]})
    line = json.loads(f["clients"][0])
    t = line["totals"]
    t["actual_cost_micro_usd"] -= t["pair_cost_micro_usd"]
    t["saved_micro_usd"] += t["pair_cost_micro_usd"]
    t["pair_cost_micro_usd"] = 0
    forged = v3.client_leaf(line["client"], line["salt"], line["tasks"], t)
    _fails("clients", f["envelope"], pub, clients=[forged, *f["clients"][1:]])
    est = json.loads(f["estimates"][0])
    est["from_audits"]["completion_tokens"] += 100
    _fails("estimates", f["envelope"], pub, estimates=[canonical_json(est), *f["estimates"][1:]])
    # A broken chain, and a carried estimate that is not the previous receipt's.
    _fails("chain", f["envelope"], pub, prev_envelope=f["envelope"])
    prev = {json.loads(b)["task"]: json.loads(b) for b in f["estimates"]}
    now = json.loads(json.dumps({t: {**e, "source": "previous", "day": DAY2} for t, e in prev.items()}))
    task = next(iter(now))
    now[task]["from_requests"]["answers"] += 1
    with pytest.raises(ReceiptError) as info:
        common.check_chained_estimates(now, prev, DAY2)
    assert info.value.check == "chain"
    # A proof with a swapped leaf.
    rows = pq.read_table(layout.receipt_rows(DAY2))
    proof = receipt_proof(DAY2, rows["request_id"][3].as_py(), signed["art"])
    assert (
        verify_receipt(f["envelope"], pub, proof=proof)["row"]["request_id"] == rows["request_id"][3].as_py()
    )
    proof["leaf"] = rows["leaf"][4].as_py()
    _fails("proof", f["envelope"], pub, proof=proof)
    # The right chain verifies; the wrong key does not.
    verify_receipt(f["envelope"], pub, prev_envelope=day1)
    _fails("keyid", f["envelope"], generate_private_key().public_key())


def test_v1_receipts_still_verify_and_chain_into_v3(two_days: Path, tmp_path: Path) -> None:
    from ratchet_core.lake import atomic_write_bytes
    from ratchet_stats.dsse import make_statement, sign_statement
    from ratchet_stats.merkle import root

    art = two_days / "artifacts"
    key = load_private_key_file(two_days / "keys" / "signing.key")
    pub = key.public_key()
    consolidate_traffic(two_days / "lake", art, DAY1)
    rows = pq.read_table(ArtifactLayout(art).traffic_file(DAY1)).to_pylist()
    v1_rows = [
        {k: (r[k].strftime("%Y-%m-%dT%H:%M:%S.%fZ") if k == "ts" else r[k]) for k in v1.LEAF_FIELDS}
        for r in sorted(rows, key=lambda r: r["request_id"])
        if r["kind"] == "request"
    ]
    leaves = [canonical_json(r) for r in v1_rows]
    clients, _ = v1.totals_from_rows(v1_rows)
    predicate = v1.make_predicate(DAY1, root(leaves).hex(), len(leaves), clients, None)
    statement = make_statement(
        v1.PREDICATE_TYPE, predicate, [{"name": "r", "digest": {"sha256": root(leaves).hex()}}]
    )
    layout = ArtifactLayout(art)
    layout.receipt_dir(DAY1).mkdir(parents=True)
    atomic_write_bytes(layout.receipt_envelope(DAY1), canonical_json(sign_statement(statement, key)))
    pq.write_table(
        pa.table(
            {
                "index": list(range(len(leaves))),
                "request_id": [r["request_id"] for r in v1_rows],
                "client": [r["client"] for r in v1_rows],
                "leaf": [b.decode() for b in leaves],
            }
        ),
        layout.receipt_rows(DAY1),
    )
    report = verify_receipt(layout.receipt_envelope(DAY1).read_bytes(), pub, leaves=leaves)
    assert report["version"] == 1 and report["checks"] == ["signature", "predicate", "totals", "rows"]
    # The next receipt (v3) chains to it; a v1 predecessor has no estimates, so nothing is carried.
    consolidate_traffic(two_days / "lake", art, DAY2)
    ledger = EffectLedger(make_engine(f"sqlite:///{(tmp_path / 'c.db').as_posix()}"))
    r2 = build_receipt(art, DAY2, key, ledger, teacher_model=TEACHER)
    assert r2.previous["day"] == DAY1 and all(e["source"] != "previous" for e in r2.estimates)
    after = verify_receipt(
        layout.receipt_envelope(DAY2).read_bytes(),
        pub,
        prev_envelope=layout.receipt_envelope(DAY1).read_bytes(),
    )
    assert after["version"] == 3 and "chain" in after["checks"]
    # A client asking for the v1 day gets its rows and its entry, never the envelope that names everyone.
    view = client_view(layout.receipt_dir(DAY1), DAY1, "acme")
    assert view["envelope"] is None and view["version"] == 1 and view["totals"] == clients["acme"]
    assert {json.loads(r["leaf"])["client"] for r in view["rows"]} == {"acme"}


def test_v2_receipts_still_verify_and_chain_into_v3(two_days: Path, tmp_path: Path) -> None:
    """A v2 receipt (signed before pairs counted) verifies with its rows; the v3 day after carries its estimates."""
    from ratchet_core.lake import atomic_write_bytes
    from ratchet_stats.dsse import make_statement, sign_statement

    art = two_days / "artifacts"
    key = load_private_key_file(two_days / "keys" / "signing.key")
    pub = key.public_key()
    layout = ArtifactLayout(art)
    consolidate_traffic(two_days / "lake", art, DAY1)
    scratch = EffectLedger(make_engine(f"sqlite:///{(tmp_path / 's.db').as_posix()}"))
    # A v3 receipt of the day, whose leaves and estimates are then re-signed as v2.
    r1 = build_receipt(art, DAY1, key, scratch, teacher_model=TEACHER)
    leaves = [s.encode() for s in pq.read_table(layout.receipt_rows(DAY1))["leaf"].to_pylist()]
    estimates = layout.receipt_estimates(DAY1).read_bytes().splitlines()
    lines = {json.loads(b)["task"]: json.loads(b) for b in estimates}
    totals, first = v2.totals_from_rows([json.loads(b) for b in leaves], lines, r1.prices)
    clients = [v2.client_leaf(c, common.client_salt(DAY1, c, first[c]), t) for c, t in totals.items()]
    predicate = v2.make_predicate(DAY1, r1.root, r1.size, clients, estimates, r1.prices, None)
    statement = make_statement(v2.PREDICATE_TYPE, predicate, v2.subjects(DAY1, predicate))
    atomic_write_bytes(layout.receipt_envelope(DAY1), canonical_json(sign_statement(statement, key)))
    atomic_write_bytes(layout.receipt_clients(DAY1), b"".join(c + b"\n" for c in clients))
    (layout.receipt_dir(DAY1) / v3.PAIRS_FILE).unlink()
    env1 = layout.receipt_envelope(DAY1).read_bytes()
    report = verify_receipt(env1, pub, leaves=leaves, clients=clients, estimates=estimates)
    assert report["version"] == 2 and report["checks"][-1] == "rows"
    # v2's paid leaves the pairs out: the same day's v3 paid is higher by exactly their cost.
    assert (
        r1.totals["actual_cost_micro_usd"] - report["totals"]["actual_cost_micro_usd"]
        == (r1.totals["pair_cost_micro_usd"])
        > 0
    )
    view = client_view(layout.receipt_dir(DAY1), DAY1, "acme")
    assert verify_client_view(view, pub)["version"] == 2
    consolidate_traffic(two_days / "lake", art, DAY2)
    ledger = EffectLedger(make_engine(f"sqlite:///{(tmp_path / 'c.db').as_posix()}"))
    build_receipt(art, DAY2, key, ledger, teacher_model=TEACHER)
    f = _files({"art": art, "layout": layout}, DAY2, tmp_path)
    after = verify_receipt(
        f["envelope"],
        pub,
        prev_envelope=env1,
        prev_estimates=estimates,
        leaves=f["leaves"],
        clients=f["clients"],
        estimates=f["estimates"],
        pairs=f["pairs"],
    )
    # The night signs the current format (CURRENT), chained to the v2 day's estimates.
    assert after["version"] == CURRENT.version == 3
    assert "chained-estimates" in after["checks"] and after["checks"][-1] == "rows"


def test_cli_verify_receipt_auditor_and_client(signed: dict, tmp_path: Path, capsys) -> None:
    layout = signed["layout"]
    f1, f2 = layout.receipt_envelope(DAY1), layout.receipt_envelope(DAY2)
    key = str(signed["pub_path"])
    rows = export_rows_jsonl(signed["art"], DAY2, tmp_path / "rows.jsonl")
    assert (
        stats_main(["verify", "receipt", str(f2), "--prev", str(f1), "--rows", str(rows), "--key", key]) == 0
    )
    out = capsys.readouterr().out
    assert "OK receipt 2026-01-02 (v3)" in out and "estimated $" in out and "method teacher-prices/v1" in out
    assert "audit/shadow calls)" in out
    assert "checks: signature, predicate, chain, clients, estimates, chained-estimates, pairs, rows" in out
    parquet = str(layout.receipt_rows(DAY2))
    assert stats_main(["verify", "receipt", str(f2), "--rows", parquet, "--key", key, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checks"][-1] == "rows"
    assert stats_main(["verify", "receipt", str(f2), "--prev", str(f2), "--key", key, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["check"] == "chain"
    view_path = tmp_path / "acme.json"
    view = client_view(layout.receipt_dir(DAY2), DAY2, "acme")
    view_path.write_text(json.dumps(view))
    assert stats_main(["verify", "receipt", "--client-proof", str(view_path), "--key", key]) == 0
    assert "OK receipt 2026-01-02: client acme" in capsys.readouterr().out
    view["rows"] = view["rows"][:-1]
    view_path.write_text(json.dumps(view))
    assert stats_main(["verify", "receipt", "--client-proof", str(view_path), "--key", key]) == 1
    assert "FAILED client-rows" in capsys.readouterr().out
    assert stats_main(["verify", "receipt", str(tmp_path / "nope.json"), "--key", key]) == 2
    assert "check the path" in capsys.readouterr().err


def test_cli_verify_receipt_refuses_a_saved_gateway_error_as_a_proof(
    signed: dict, tmp_path: Path, capsys
) -> None:
    """What `curl ... > p.json` keeps when the gateway refuses (a 404 for a request id that is not yours, a 401 for a
    wrong key) is the gateway's error: an input error (exit 2) that quotes it, not "malformed proof (KeyError)"."""
    f2 = str(signed["layout"].receipt_envelope(DAY2))
    key = str(signed["pub_path"])
    not_found = {"error": {"message": "no request req_x of yours in the receipt", "type": "not_found_error"}}
    (tmp_path / "p.json").write_text(json.dumps(not_found))
    assert stats_main(["verify", "receipt", f2, "--key", key, "--proof", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "the gateway's error, not a proof" in err and "no request req_x of yours" in err
    assert "KeyError" not in err
    (tmp_path / "mine.json").write_text(json.dumps({"error": {"message": "invalid or missing API key"}}))
    assert stats_main(["verify", "receipt", "--client-proof", str(tmp_path / "mine.json"), "--key", key]) == 2
    assert "not a client view: invalid or missing API key" in capsys.readouterr().err
    (tmp_path / "list.json").write_text("[1, 2]")
    assert stats_main(["verify", "receipt", f2, "--key", key, "--proof", str(tmp_path / "list.json")]) == 2
    assert "not an object" in capsys.readouterr().err


@pytest.mark.parametrize("old_share", ["some", "all"])
def test_segments_sealed_before_teacher_prompt_tokens_existed_still_make_a_receipt(
    home: Path, tmp_path: Path, old_share: str
) -> None:
    """An upgrade mid-day: segments sealed by the previous version lack the column; it reads as NULL (0 teacher
    prompt tokens: a lower bound), and the day still gets a receipt that verifies from its rows."""
    paths = sorted(write_day(home / "lake", DAY1, 60, seed=6, student_share=0.5, seal_next_day=False))
    for p in paths if old_share == "all" else paths[:1]:
        table = pq.read_table(p)
        pq.write_table(table.drop_columns(["teacher_prompt_tokens"]), p)
    art = home / "artifacts"
    consolidate_traffic(home / "lake", art, DAY1)
    traffic = pq.read_table(ArtifactLayout(art).traffic_file(DAY1))
    assert traffic.schema.field("teacher_prompt_tokens").type == pa.int64()
    assert traffic["teacher_prompt_tokens"].null_count > 0
    assert (traffic["teacher_prompt_tokens"].null_count == traffic.num_rows) == (old_share == "all")
    key = load_private_key_file(home / "keys" / "signing.key")
    ledger = EffectLedger(make_engine(f"sqlite:///{(tmp_path / 'c.db').as_posix()}"))
    build_receipt(art, DAY1, key, ledger, teacher_model=TEACHER)
    layout = ArtifactLayout(art)
    report = verify_receipt(
        layout.receipt_envelope(DAY1).read_bytes(),
        key.public_key(),
        leaves=export_rows_jsonl(art, DAY1, tmp_path / "rows.jsonl").read_bytes().splitlines(),
        clients=layout.receipt_clients(DAY1).read_bytes().splitlines(),
        estimates=layout.receipt_estimates(DAY1).read_bytes().splitlines(),
        pairs=(layout.receipt_dir(DAY1) / v3.PAIRS_FILE).read_bytes().splitlines(),
    )
    assert report["checks"][-1] == "rows" and report["size"] > 0


def test_a_refused_rerun_leaves_the_signed_days_lines(signed: dict, two_days: Path) -> None:
    from ratchet_assets.night.fixtures import request_rows, write_segments
    from ratchet_assets.night.receipts import ReceiptConflict

    layout, art = signed["layout"], signed["art"]
    files = (layout.receipt_clients(DAY1), layout.receipt_estimates(DAY1), layout.receipt_pairs(DAY1))
    before = {p: p.read_bytes() for p in files}
    assert before[layout.receipt_pairs(DAY1)], "day 1 has pair calls"
    late = request_rows(DAY1, 5, seed=99, replicas=("late",))
    write_segments(two_days / "lake", late)
    consolidate_traffic(two_days / "lake", art, DAY1)
    ledger = EffectLedger(make_engine(f"sqlite:///{(two_days / 'control.db').as_posix()}"))
    with pytest.raises(ReceiptConflict):
        build_receipt(art, DAY1, signed["key"], ledger, teacher_model=TEACHER)
    assert {p: p.read_bytes() for p in before} == before
    # the refused run's pair lines, streamed under a temporary name, are gone
    assert sorted(p.name for p in layout.receipt_dir(DAY1).iterdir() if p.name.startswith(".")) == []
    verify_receipt(
        layout.receipt_envelope(DAY1).read_bytes(),
        signed["pub"],
        clients=before[layout.receipt_clients(DAY1)].splitlines(),
        estimates=before[layout.receipt_estimates(DAY1)].splitlines(),
    )


def test_daily_receipt_runs_in_the_configured_night_memory_budget(two_days: Path) -> None:
    """The asset hands ``NightConfig``'s budget (RATCHET_NIGHT_MEMORY_MB) to the receipt's DuckDB work: a budget
    below the minimum is refused by the receipt step itself, a small valid one signs and reports its peak RSS."""
    import dagster as dg

    from ratchet_assets.defs.daily_receipt import daily_receipt
    from ratchet_assets.defs.resources import NightConfig, night_resources
    from ratchet_assets.defs.traffic import traffic

    instance = dg.DagsterInstance.ephemeral()
    resources = night_resources(two_days)
    dg.materialize([traffic], partition_key=DAY1, instance=instance, resources=resources)

    def receipt(memory_mb: int) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            [traffic, daily_receipt],
            selection=[daily_receipt],
            partition_key=DAY1,
            instance=instance,
            resources={**resources, "night": NightConfig(memory_mb=memory_mb)},
            raise_on_error=False,
        )

    refused = receipt(100)
    assert not refused.success
    assert "RATCHET_NIGHT_MEMORY_MB" in str(refused.get_step_failure_events()[0].event_specific_data.error)
    ok = receipt(300)
    assert ok.success
    [event] = ok.get_asset_materialization_events()
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert meta["peak_rss_mb"] > 0 and meta["pair_calls"] > 0
    assert (
        meta["pair_calls_usd"] > 0
        and meta["saved_usd"] < meta["teacher_equivalent_usd"] - meta["pair_calls_usd"]
    )
