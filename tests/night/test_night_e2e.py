"""The night, part 2, end to end on the embedded default (real training, real student server, real Dagster).

Fixture traffic for `tickets` -> training_set -> lora_adapter (Pipes subprocess) -> evaluation_certificate
(adapter loaded into a loopback student server) -> bom. One good training run is shared by the module; a second,
shorter run on shuffled labels must fail certification and produce no BOM.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from scipy import stats

from ratchet_assets.defs.bom import bom
from ratchet_assets.defs.evaluation_certificate import CHECK, evaluation_certificate
from ratchet_assets.defs.examples import examples
from ratchet_assets.defs.golden_split import golden_split
from ratchet_assets.defs.lora_adapter import lora_adapter
from ratchet_assets.defs.release_sensors import failed_night_sensor, release_promotion_sensor
from ratchet_assets.defs.resources import night_resources
from ratchet_assets.defs.traffic import traffic
from ratchet_assets.defs.training_set import training_set
from ratchet_assets.release import registry
from ratchet_core import manifest as mf
from ratchet_stats import certificate as CERT
from ratchet_stats.dsse import verify_statement
from tests.evidence.auditor import run_cli
from tests.night.nights import materialize_night

from .conftest import home_with_a_day

# Real training: ~2-4 min on two idle cores, several times that when other test runs share them.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DAY1, DAY2 = "2026-01-01", "2026-01-02"
UPSTREAM = [traffic, examples, golden_split, training_set]
NIGHT2 = [lora_adapter, evaluation_certificate, bom]
TARGET, DELTA = 0.90, 0.05
# The first night trains with lora_adapter's defaults (night.adapter.NIGHT_TRAINING: what the demo certifies
# with) but one selection run: its 92-row split ends at 0.989 where a split of that size certifies 0.95 only at
# every row, so "short of steps" would train a second, twice as long run (~+1 min of this file); that rule is
# proven in tests/night/test_short_of_steps.py (a real doubled run equals a run started at twice the budget).
# The short runs below train exactly one epoch, without the min_steps floor or early stopping (whose validation
# split would run up to max_epochs) (another config: a new launch).
TRAIN_KW: dict = {"max_extensions": 0}
ONE_EPOCH = {"epochs": 1, "min_steps": 0, "validation_share": 0.0}


def _run(env, day: str, assets, lora: dict | None = None, max_tokens: int = 512) -> dg.ExecuteInProcessResult:
    # one torch thread (the default): with two, OpenMP's spin-waits on busy shared cores were counted as training
    # CPU time (412 CPU-s for 165 steps, against ~0.6 CPU-s a step with one thread)
    return materialize_night(
        env.home,
        day,
        student_url=env.root,
        assets=assets,
        training=lora or TRAIN_KW,
        certificate={"target": TARGET, "delta": DELTA, "max_tokens": max_tokens},
        instance=env.instance,
    )


def _meta(result, asset: str) -> dict:
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    assert events, f"{asset} was not materialised"
    return {k: v.value for k, v in events[-1].materialization.metadata.items()}


def _effects(home: Path, effect_type: str) -> list:
    from ratchet_assets.effects import EffectLedger
    from ratchet_core.control_db import make_engine

    ledger = EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))
    return ledger.list_effects(effect_type=effect_type, limit=1000)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from ratchet_gateway.student_server.app import create_app
    from ratchet_stats.keys import public_key_b64
    from tests.serve import serve_in_thread

    home = tmp_path_factory.mktemp("night") / "home"
    key = home_with_a_day(home, DAY1, 900, seed=1)
    with serve_in_thread(create_app(home / "models" / "demo-base")) as url:
        yield SimpleNamespace(
            home=home,
            artifacts=home / "artifacts",
            root=url,
            url=url + "/v1",
            instance=dg.DagsterInstance.ephemeral(),
            pub=public_key_b64(key.public_key()),
            public_key=key.public_key(),
        )


@pytest.fixture(scope="module")
def first_night(env):
    started = time.perf_counter()
    result = _run(env, DAY1, UPSTREAM + NIGHT2)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    pointer = json.loads((env.artifacts / "adapters" / f"day={DAY1}" / "adapter.json").read_text())
    return SimpleNamespace(result=result, record=pointer, wall=time.perf_counter() - started)


def test_good_adapter_is_certified_and_its_bom_verifies(env, first_night):
    record = first_night.record
    version = record["version"]
    assert version.startswith("v1-") and version[3:] == record["adapter_sha256"][:8]
    # What happened, not how fast (CPU and wall seconds depend on the machine: benchmarks/warm_start.py measures
    # the night's training time, `make bench` the rest): the learner trained and stopped by its own rule, before
    # the time budget would have cut it. The seconds are printed for the reader.
    print(
        f"training: {record['seconds']:.0f} s wall, {record['cpu_seconds']:.0f} s CPU, {record['steps']} steps"
    )
    assert record["steps"] > 0 and record["learner"]["epochs_run"] >= 1
    assert not record["learner"].get("stopped", "").startswith("time budget"), record["learner"]
    cert_file = env.artifacts / "certificates" / f"{version}.dsse.json"
    predicate = verify_statement(cert_file.read_bytes(), env.public_key, CERT.PREDICATE_TYPE)["predicate"]
    tickets = predicate["tasks"]["tickets"]
    k, n = tickets["correct"], tickets["n"]
    assert n >= 60
    assert k / n >= 0.95, f"exact match {k}/{n}"
    # the bound, recomputed with scipy, clears the target
    assert stats.beta.ppf(DELTA, k, n - k + 1) >= TARGET
    assert predicate["certified_tasks"] == ["tickets"]
    assert {e.check_name: e.passed for e in first_night.result.get_asset_check_evaluations()}[CHECK] is True

    # independent spot check: ask the student ourselves; the workload's own solver is the oracle
    import openai

    from ratchet_assets.night.evaluate import load_golden
    from ratchet_core.workloads import compare, solve

    client = openai.OpenAI(base_url=env.url, api_key="none")
    sample = load_golden(env.artifacts, DAY1)[:20]
    right = 0
    for row in sample:
        msg = (
            client.chat.completions.create(model=version, messages=row.messages, temperature=0)
            .choices[0]
            .message
        )
        right += compare(
            "tickets", solve("tickets", row.messages), {"role": "assistant", "content": msg.content}
        )
    assert right >= 18, f"spot check {right}/20"

    # the auditor's view: certificate recomputes, BOM verifies with NOTICE and files, no golden key trained on
    out = env.artifacts / "boms" / version
    assert run_cli("verify", "certificate", str(cert_file), "--key", env.pub).returncode == 0
    res = run_cli(
        "verify", "bom", str(out / "bom.dsse.json"), "--key", env.pub, "--notice", str(out / "NOTICE.md"),
        "--adapter-dir", str(env.artifacts / record["adapter_dir"]), "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        json.loads(res.stdout)["train"]["row_count"]
        == _meta(first_night.result, "training_set")["dagster/row_count"]
    )
    for proof, expect in ((out / "disjoint.proof.json", "absent"),):
        res = run_cli("verify", "proof", "--bom", str(out / "bom.dsse.json"), "--proof", str(proof), "--key",
                      env.pub, "--expect", expect)  # fmt: skip
        assert res.returncode == 0, res.stderr

    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    document = json.loads(
        json.dumps(verify_statement((out / "bom.dsse.json").read_bytes(), env.public_key)["predicate"])
    )
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document)) is None


def test_proofs_for_a_trained_and_a_golden_example(env, first_night, tmp_path):
    from ratchet_cli.proof_cmd import proof

    out = env.artifacts / "boms" / first_night.record["version"]
    train_key = (out / "train-keys.txt").read_text().split()[5]
    golden_key = (out / "golden-keys.txt").read_text().split()[0]
    runner = CliRunner()
    for key, expect in ((train_key, "member"), (golden_key, "absent")):
        path = tmp_path / f"{expect}.json"
        res = runner.invoke(
            proof, ["make", "--keys", str(out / "train-keys.txt"), "--example-key", key, "--out", str(path)]
        )
        assert res.exit_code == 0, res.output
        res = run_cli("verify", "proof", "--bom", str(out / "bom.dsse.json"), "--proof", str(path), "--key",
                      env.pub, "--expect", expect)  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        forged = json.loads(path.read_text())
        forged["key"] = golden_key if expect == "member" else train_key
        path.write_text(json.dumps(forged))
        res = run_cli(
            "verify", "proof", "--bom", str(out / "bom.dsse.json"), "--proof", str(path), "--key", env.pub
        )
        assert res.returncode == 1, res.stdout


def test_rerun_reuses_the_adapter_and_the_certificate_is_byte_identical(env, first_night):
    version = first_night.record["version"]
    cert_file = env.artifacts / "certificates" / f"{version}.dsse.json"
    before = cert_file.read_bytes()
    rerun = _run(env, DAY1, UPSTREAM + NIGHT2)
    assert rerun.success
    assert _meta(rerun, "lora_adapter")["reused"] is True
    assert _meta(rerun, "lora_adapter")["version"] == version
    launches = _effects(env.home, "training.launch")
    assert [(e.status, e.attempts) for e in launches] == [("done", 1)]
    after = cert_file.read_bytes()
    payload = lambda b: json.loads(b)["payload"]  # noqa: E731
    assert payload(after) == payload(before)
    assert after == before  # Ed25519 is deterministic: the whole envelope is identical


def test_shuffled_labels_are_a_successful_not_certified_night(env, tmp_path):
    """A separate, small home (its own ledger and golden set): one short training run on shuffled labels. "Not
    certified" is an outcome: the run succeeds with a signed not-certified certificate, no BOM, nothing released,
    and the failed-night sensor records nothing; a night that broke is a failed run it records."""
    from ratchet_assets.night.fixtures import write_day
    from ratchet_stats import merkle
    from ratchet_stats.canonical import canonical_json
    from ratchet_stats.keys import load_private_key_file, save_private_key

    home = tmp_path / "home"
    save_private_key(load_private_key_file(env.home / "keys" / "signing.key"), home / "keys" / "signing.key")
    write_day(home / "lake", DAY2, 300, seed=2, workload="tickets", student_share=0.0)
    small = SimpleNamespace(**{**vars(env), "home": home, "artifacts": home / "artifacts"})
    assert _run(small, DAY2, UPSTREAM).success
    folder = small.artifacts / "train" / f"day={DAY2}"
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    answers = [r["messages"][-1] for r in rows]
    random.Random(0).shuffle(answers)
    for r, a in zip(rows, answers, strict=True):
        r["messages"][-1] = a
    lines = [canonical_json(r) for r in rows]
    (folder / "train.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    commitment = json.loads((folder / "commitment.json").read_text())
    commitment["rows"]["root"] = merkle.root(lines).hex()
    (folder / "commitment.json").write_text(json.dumps(commitment))

    resources = night_resources(home)
    sensor_defs = dg.Definitions(sensors=[failed_night_sensor], resources=resources)
    first_tick = failed_night_sensor.evaluate_tick(
        dg.build_sensor_context(instance=env.instance, definitions=sensor_defs, resources=resources)
    )  # a run-status sensor's first tick only sets its cursor

    result = _run(small, DAY2, NIGHT2, lora=ONE_EPOCH, max_tokens=32)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks[CHECK].passed is False and checks[CHECK].severity == dg.AssetCheckSeverity.WARN
    assert _meta(result, "evaluation_certificate")["outcome"] == "not certified"
    record = json.loads((small.artifacts / "adapters" / f"day={DAY2}" / "adapter.json").read_text())
    cert_file = small.artifacts / "certificates" / f"{record['version']}.dsse.json"
    predicate = verify_statement(cert_file.read_bytes(), env.public_key, CERT.PREDICATE_TYPE)["predicate"]
    assert predicate["certified_tasks"] == [] and CERT.check_certificate(predicate) == []
    assert predicate["tasks"]["tickets"]["lower_bound"] < TARGET
    assert not (small.artifacts / "boms").exists()
    assert "bom" not in {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    # the verifier verifies the signed outcome and says it is not certified
    res = run_cli("verify", "certificate", str(cert_file), "--key", env.pub)
    assert res.returncode == 0 and "NOT CERTIFIED for any task" in res.stdout, res.stdout + res.stderr

    # the release sensor registers the version as rejected and publishes nothing that serves it
    engine = resources["control_db"].engine()
    tick = release_promotion_sensor(
        dg.build_sensor_context(instance=env.instance, definitions=sensor_defs, resources=resources)
    )
    manifest, _ = mf.latest_verified(engine, env.public_key)
    served = set() if manifest is None else {t.version for t in manifest.tasks.values()}
    assert record["version"] not in served, tick
    with engine.connect() as conn:
        statuses = {r["status"] for r in conn.execute(sa.select(registry.versions)).mappings()}
    assert statuses == {"rejected"}

    # a night that broke (no adapter for its day) is a failed run, and only it is recorded
    broken = _run(small, "2026-01-03", [evaluation_certificate])
    assert not broken.success
    second_tick = failed_night_sensor.evaluate_tick(
        dg.build_sensor_context(
            instance=env.instance, cursor=first_tick.cursor, definitions=sensor_defs, resources=resources
        )
    )
    assert second_tick.cursor != first_tick.cursor
    with engine.connect() as conn:
        failed = conn.execute(sa.select(registry.failed_nights)).mappings().all()
    assert [(r["run_id"], r["partition"]) for r in failed] == [(broken.run_id, "2026-01-03")]


def test_export_adapter_copies_verified_files(env, first_night, tmp_path):
    from ratchet_assets.admin.export_cmd import export_adapter

    version = first_night.record["version"]
    args = ["--version", version, "--artifacts", str(env.artifacts), "--key", env.pub, "--json"]
    res = CliRunner().invoke(export_adapter, [*args, "--out", str(tmp_path / "x")])
    assert res.exit_code == 0, res.output
    out = tmp_path / "x"
    assert {"bom.dsse.json", "NOTICE.md", "certificate.dsse.json"} <= {p.name for p in out.iterdir()}
    res = run_cli("verify", "bom", str(out / "bom.dsse.json"), "--key", env.pub, "--notice", str(out / "NOTICE.md"),
                  "--adapter-dir", str(out / "adapter"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = CliRunner().invoke(export_adapter, ["--version", "v99-00000000", "--artifacts", str(env.artifacts),
                                              "--out", str(tmp_path / "y")])  # fmt: skip
    assert res.exit_code != 0 and "no adapter v99-00000000" in res.output


def test_new_config_trains_v2_and_is_compared_with_the_live_version(env, first_night):
    """With v1 live on tickets, a candidate trained with another config gets McNemar against v1 on the same rows."""
    from ratchet_core.control_db import ensure_schema, make_engine
    from ratchet_stats.keys import load_private_key_file
    from tests.evidence.manifests import write_signed_manifest

    live = first_night.record["version"]
    engine = make_engine(f"sqlite:///{(env.home / 'control.db').as_posix()}")
    ensure_schema(engine)
    key = load_private_key_file(env.home / "keys" / "signing.key")
    write_signed_manifest(
        engine, key, tasks={"tickets": {"stage": "live", "version": live}}, reason="v1 live"
    )

    # a half-trained model rambles: cap the answer length (labels are a few tokens)
    _run(env, DAY1, [lora_adapter, evaluation_certificate], lora=ONE_EPOCH, max_tokens=32)
    record = json.loads((env.artifacts / "adapters" / f"day={DAY1}" / "adapter.json").read_text())
    assert record["version"].startswith("v2-") and record["version"] != live
    assert len(_effects(env.home, "training.launch")) == 2
    cert_file = env.artifacts / "certificates" / f"{record['version']}.dsse.json"
    predicate = verify_statement(cert_file.read_bytes(), env.public_key, CERT.PREDICATE_TYPE)["predicate"]
    mc = predicate["tasks"]["tickets"]["mcnemar"]
    assert mc is not None and mc["baseline"] == live
    rows = predicate["tasks"]["tickets"]["rows"]
    b = sum(1 for _, cand, base in rows if cand and not base)
    c = sum(1 for _, cand, base in rows if base and not cand)
    assert (mc["b"], mc["c"]) == (b, c)
    # the baseline column is v1's own result on these rows: the same count as v1's certificate
    assert sum(1 for *_, base in rows if base) == first_night_correct(env, live)
    assert mc["p_value"] == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue if b + c else 1.0)
    assert CERT.check_certificate(predicate) == []


def first_night_correct(env, version: str) -> int:
    cert_file = env.artifacts / "certificates" / f"{version}.dsse.json"
    return verify_statement(cert_file.read_bytes(), env.public_key, CERT.PREDICATE_TYPE)["predicate"][
        "tasks"
    ]["tickets"]["correct"]
