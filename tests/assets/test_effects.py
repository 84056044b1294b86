"""The effect ledger: one execute per key under concurrency, leases, indeterminate effects and policies."""

from __future__ import annotations

import multiprocessing as mp
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from ratchet_assets.effects import EffectLedger, StaleToken
from ratchet_core.control_db import ensure_schema, make_engine


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{(tmp_path / 'control.db').as_posix()}"


def _begin_in_child(url: str, barrier, out) -> None:
    ledger = EffectLedger(make_engine(url))
    barrier.wait()
    out.put(ledger.begin("receipt.sign", "receipt:2026-01-01", "fp", probe=lambda r: None).outcome)


def test_eight_processes_begin_one_key_exactly_one_executes(url: str) -> None:
    engine = sa.create_engine(url)  # not make_engine: forked children must not share its pool
    ensure_schema(engine)
    engine.dispose()
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_begin_in_child, args=(url, barrier, out)) for _ in range(8)]
    for p in procs:
        p.start()
    outcomes = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["execute"] + ["in_flight"] * 7


def test_done_duplicate_denied_and_report_needs_current_token(url: str) -> None:
    ledger = EffectLedger(make_engine(url), policies={"x": "block"})
    first = ledger.begin("x", "k", "fp1")
    assert first.outcome == "execute" and first.token
    assert ledger.begin("x", "k", "fp1").outcome == "in_flight"
    ledger.report(first.token, {"answer": 42})
    dup = ledger.begin("x", "k", "fp1")
    assert (dup.outcome, dup.result) == ("duplicate", {"answer": 42})
    assert ledger.begin("x", "k", "fp2").outcome == "denied"
    with pytest.raises(StaleToken):
        ledger.report(first.token, {"answer": 43})  # already reported
    assert ledger.lookup("x", "k").result == {"answer": 42}


def test_lapsed_lease_becomes_indeterminate_then_each_policy(url: str) -> None:
    clock = Clock()
    ledger = EffectLedger(make_engine(url), policies={"b": "block", "r": "retry", "p": "probe"}, clock=clock)
    holders = {t: ledger.begin(t, "k", "fp", lease_seconds=60, probe=lambda r: None) for t in ("b", "r", "p")}
    assert all(h.outcome == "execute" for h in holders.values())
    clock.t += timedelta(seconds=61)  # every holder vanished without a report
    assert {r.effect_type for r in ledger.indeterminate()} == {"b", "r", "p"}

    blocked = ledger.begin("b", "k", "fp")
    assert blocked.outcome == "blocked" and ledger.lookup("b", "k").status == "indeterminate"
    ledger.resolve("b", "k", "done", reason="operator saw the effect happen", result={"ok": True})
    assert ledger.begin("b", "k", "fp").outcome == "duplicate"

    retried = ledger.begin("r", "k", "fp")
    assert (retried.outcome, retried.attempts) == ("execute", 2)
    with pytest.raises(StaleToken):
        ledger.report(holders["r"].token, {"late": True})  # the vanished holder cannot report any more
    ledger.report(retried.token, {"ok": 2})
    assert ledger.lookup("r", "k").status == "done"

    seen = []
    found = ledger.begin("p", "k", "fp", probe=lambda rec: seen.append(rec.status) or {"found": True})
    assert (found.outcome, found.result, seen) == ("duplicate", {"found": True}, ["indeterminate"])

    ledger.begin("p", "k2", "fp", lease_seconds=1, probe=lambda r: None)
    clock.t += timedelta(seconds=2)
    again = ledger.begin("p", "k2", "fp", probe=lambda r: None)
    assert again.outcome == "execute" and again.attempts == 2
    assert ledger.indeterminate() == []


def test_failed_effect_retries_or_blocks_by_policy(url: str) -> None:
    ledger = EffectLedger(make_engine(url), policies={"b": "block", "r": "retry"})
    for t in ("b", "r"):
        ledger.fail(ledger.begin(t, "k", "fp").token, "upstream said no")
    assert ledger.begin("b", "k", "fp").outcome == "blocked"
    assert ledger.begin("r", "k", "fp").outcome == "execute"


def test_admin_effects_list_show_resolve(url: str) -> None:
    from ratchet_assets.admin.cli import admin

    clock = Clock()
    ledger = EffectLedger(make_engine(url), policies={"training.launch": "block"}, clock=clock)
    ledger.begin("training.launch", "train:abc", "fp", lease_seconds=0)
    runner = CliRunner()
    listed = runner.invoke(admin, ["effects", "list", "--status", "indeterminate", "--control-db", url])
    assert listed.exit_code == 0 and "train:abc" in listed.output and "lease lapsed" in listed.output
    shown = runner.invoke(
        admin, ["effects", "show", "training.launch", "train:abc", "--json", "--control-db", url]
    )
    assert shown.exit_code == 0 and '"status": "in_flight"' in shown.output
    missing = runner.invoke(admin, ["effects", "show", "training.launch", "nope", "--control-db", url])
    assert missing.exit_code == 2 and "ratchet admin effects list" in missing.output
    resolved = runner.invoke(
        admin,
        [
            "effects",
            "resolve",
            "training.launch",
            "train:abc",
            "failed",
            "--reason",
            "job never started",
            "--control-db",
            url,
        ],
    )
    assert resolved.exit_code == 0, resolved.output
    assert ledger.lookup("training.launch", "train:abc").status == "failed"


def test_a_done_effect_changes_only_with_force_and_every_resolution_needs_a_real_reason(url: str) -> None:
    from ratchet_assets.admin.cli import admin
    from ratchet_assets.effects import EffectError

    ledger = EffectLedger(make_engine(url))
    begun = ledger.begin("receipt.sign", "receipt:2026-01-01", "fp", probe=lambda r: None)
    ledger.report(begun.token, {"signed": True})
    runner = CliRunner()
    base = ["effects", "resolve", "receipt.sign", "receipt:2026-01-01"]
    refused = runner.invoke(admin, [*base, "failed", "--reason", "looks wrong to me", "--control-db", url])
    assert refused.exit_code == 2 and "is done" in refused.output and "--force" in refused.output
    assert ledger.lookup("receipt.sign", "receipt:2026-01-01").status == "done"
    for bad in ("ok", "   \t  ", "x" * 501):
        out = runner.invoke(admin, [*base, "failed", "--force", "--reason", bad, "--control-db", url])
        assert out.exit_code == 2 and "3-500 characters" in out.output
    with pytest.raises(EffectError, match="3-500 characters"):
        ledger.resolve("receipt.sign", "receipt:2026-01-01", "forget", reason="no", force=True)
    forced = runner.invoke(
        admin, [*base, "failed", "--force", "--reason", "the signed file was lost", "--control-db", url]
    )
    assert forced.exit_code == 0, forced.output
    record = ledger.lookup("receipt.sign", "receipt:2026-01-01")
    assert record.status == "failed" and record.note == "resolved failed: the signed file was lost"


def test_admin_erase_records_an_erasure(url: str, tmp_path: Path) -> None:
    from ratchet_assets.admin.cli import admin
    from ratchet_assets.night.erasures import load_erasures
    from ratchet_stats.keys import generate_private_key, save_private_key

    # erasures are signed: the CLI's home holds a signing key
    save_private_key(generate_private_key(), tmp_path / "home" / "keys" / "signing.key")
    runner = CliRunner(env={"RATCHET_HOME": str(tmp_path / "home")})
    ok = runner.invoke(
        admin, ["erase", "--request-id", "req-1", "--reason", "GDPR request", "--control-db", url]
    )
    assert ok.exit_code == 0, ok.output
    both = runner.invoke(
        admin,
        ["erase", "--request-id", "a", "--example-key", "b", "--reason", "user asked", "--control-db", url],
    )
    assert both.exit_code == 2 and "exactly one" in both.output
    short = runner.invoke(admin, ["erase", "--request-id", "b", "--reason", "x", "--control-db", url])
    assert short.exit_code == 2 and "3-500 characters" in short.output
    assert load_erasures(make_engine(url)).request_ids == frozenset({"req-1"})
