"""A task defined only by its name and `ratchet admin task set` goes through a night with its own target.

Real components: the night's Dagster assets (traffic -> examples -> golden_split -> training_set -> lora_adapter
-> evaluation_certificate) on a test home, a real (tiny) LoRA training on the demo base, the real student server on
loopback, the admin CLI publishing a signed manifest. The task ``moods`` (tests/tasks/moods.py) is not a built-in
workload: the only thing Ratchet learns about it is its policy.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from .moods import MOODS, MOODS_WORKLOAD

# one tiny real training and ~100 golden answers from the demo base: ~3-6 min on the shared 2 cores
pytestmark = pytest.mark.slow

DAY = "2026-03-02"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    from ratchet_stats.keys import generate_private_key, public_key_pem, save_private_key

    h = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, h / "keys" / "signing.key")
    (h / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    return h


def test_a_new_task_goes_through_a_night_with_its_own_target(home: Path, monkeypatch) -> None:
    from ratchet_assets.admin.cli import admin
    from ratchet_assets.defs.evaluation_certificate import evaluation_certificate
    from ratchet_assets.defs.examples import examples
    from ratchet_assets.defs.golden_split import golden_split
    from ratchet_assets.defs.lora_adapter import lora_adapter
    from ratchet_assets.defs.resources import night_resources
    from ratchet_assets.defs.traffic import traffic
    from ratchet_assets.defs.training_set import training_set
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.release.guard import certified_task
    from ratchet_core import workloads
    from ratchet_core.serve import serve_in_thread
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_core.workloads.base import validate
    from ratchet_gateway.student_server.app import create_app
    from ratchet_stats.certificate import check_certificate
    from ratchet_stats.keys import load_private_key

    assert validate(MOODS) == [] and "moods" not in workloads.TASKS
    monkeypatch.setitem(
        workloads.WORKLOADS, "moods", MOODS_WORKLOAD
    )  # the fixture writer's traffic source only
    write_day(home / "lake", DAY, 300, seed=7, workload="moods", student_share=0.0)

    url = f"sqlite:///{(home / 'control.db').as_posix()}"
    common = ["--control-db", url, "--signing-key-file", str(home / "keys" / "signing.key")]
    res = CliRunner().invoke(
        admin,
        ["task", "set", "moods", "--target", "0.6", "--delta", "0.1", "--golden-share", "0.35",
         "--reason", "a new task: moods", *common],
        catch_exceptions=False,
    )  # fmt: skip
    assert res.exit_code == 0, res.output

    base = ensure_demo_base(home / "models" / "demo-base")
    with serve_in_thread(create_app(base)) as student:
        run_config = {
            "ops": {
                "lora_adapter": {
                    "config": {"base_model": str(base), "epochs": 1, "min_steps": 20, "num_threads": 1}
                },
                "evaluation_certificate": {"config": {"student_base_url": f"{student}/v1"}},
            }
        }
        result = dg.materialize(
            [traffic, examples, golden_split, training_set, lora_adapter, evaluation_certificate],
            partition_key=DAY,
            instance=dg.DagsterInstance.ephemeral(),
            resources=night_resources(home),
            run_config=run_config,
            raise_on_error=False,
        )
    materialised = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {"golden_split", "lora_adapter", "evaluation_certificate"} <= materialised
    [cert_file] = (home / "artifacts" / "certificates").glob("*.dsse.json")
    envelope = json.loads(cert_file.read_text())
    import base64

    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    section = predicate["tasks"]["moods"]
    # the task's own level, signed in its section and recomputed by the verifier's code
    assert (section["target"], section["delta"], predicate["target"]) == (0.6, 0.1, 0.95)
    assert section["comparator"] == "label" and check_certificate(predicate) == []
    assert section["certified"] == (section["lower_bound"] >= 0.6)
    # the golden share came from the policy (0.35 of new keys, never below the certification floor)
    golden_meta = {
        e.asset_key.to_user_string(): e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }["golden_split"]
    share = golden_meta["golden_size"].value / golden_meta["new_keys"].value
    assert 0.25 < share < 0.45, share
    check = {c.check_name: c for c in result.get_asset_check_evaluations()}["at_least_one_task_certified"]
    assert check.passed == section["certified"]
    print(
        f"moods: n={section['n']} precision={section['precision']:.3f} lower={section['lower_bound']:.3f} "
        f"certified at its own target 0.6: {section['certified']}"
    )
    if section["certified"]:  # the release guard admits it at the task's target, not the global 0.95
        key = load_private_key((home / "keys" / "signing.key").read_bytes())
        ct = certified_task(cert_file, predicate["version"], "moods", [key.public_key()], 0.6)
        assert ct.target == 0.6
