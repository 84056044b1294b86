"""An import certifies a new task: ``moods`` has no traffic at all, only imported golden rows (to certify on) and
imported training rows (to learn from). The real night (Dagster assets, a tiny real LoRA training on the demo base,
the real student server on loopback) signs a certificate with a ``moods`` section computed on exactly the imported
golden rows, none of which was trained on."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

pytestmark = pytest.mark.slow  # one tiny real training and the golden answers from the demo base: ~2 min

DAY = "2026-03-02"


def _moods_workload():
    path = Path(__file__).resolve().parents[1] / "tasks" / "moods.py"
    spec = importlib.util.spec_from_file_location("moods_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MOODS_WORKLOAD


def _jsonl(path: Path, examples) -> Path:
    path.write_text(
        "".join(json.dumps({"messages": e.messages, "answer": e.expected}) + "\n" for e in examples)
    )
    return path


def test_imported_golden_rows_certify_a_task_without_traffic(tmp_path: Path) -> None:
    from ratchet_assets.admin.cli import admin
    from ratchet_assets.defs.evaluation_certificate import evaluation_certificate
    from ratchet_assets.defs.examples import examples
    from ratchet_assets.defs.golden_split import golden_split
    from ratchet_assets.defs.lora_adapter import lora_adapter
    from ratchet_assets.defs.resources import night_resources
    from ratchet_assets.defs.traffic import traffic
    from ratchet_assets.defs.training_set import training_set
    from ratchet_assets.governance.importer import import_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_core.layout import ArtifactLayout
    from ratchet_core.serve import serve_in_thread
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app
    from ratchet_stats.certificate import check_certificate
    from ratchet_stats.keys import generate_private_key, public_key_pem, save_private_key

    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    (home / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    art = home / "artifacts"
    write_day(home / "lake", DAY, 30, seed=3, student_share=0.0)  # other tasks' traffic; none of moods
    moods = _moods_workload().generate(260, seed=11)
    golden_rows, train_rows = moods[:60], moods[60:]
    g = import_examples(
        _jsonl(tmp_path / "g.jsonl", golden_rows), artifacts_root=str(art), task="moods", role="golden",
        source="moods labels, hand-checked", license="CC-BY-4.0", day=DAY,
    )  # fmt: skip
    t = import_examples(
        _jsonl(tmp_path / "t.jsonl", train_rows), artifacts_root=str(art), task="moods", role="train",
        source="moods labels, hand-checked", license="CC-BY-4.0", day=DAY,
    )  # fmt: skip
    assert g.imported >= 20 and t.imported >= 60

    url = f"sqlite:///{(home / 'control.db').as_posix()}"
    res = CliRunner().invoke(
        admin,
        ["task", "set", "moods", "--target", "0.6", "--delta", "0.1", "--reason", "certify moods from imports",
         "--control-db", url, "--signing-key-file", str(home / "keys" / "signing.key")],
        catch_exceptions=False,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    base = ensure_demo_base(home / "models" / "demo-base")
    with serve_in_thread(create_app(base)) as student:
        run_config = {
            "ops": {
                "lora_adapter": {
                    "config": {"base_model": str(base), "epochs": 2, "min_steps": 40, "num_threads": 1}
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
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {"training_set", "lora_adapter", "evaluation_certificate"} <= done, done
    layout = ArtifactLayout(art)
    golden_keys = set(layout.golden_keys(DAY).read_text().split())
    train_keys = set(layout.train_keys(DAY).read_text().split())
    assert not golden_keys & train_keys
    [cert_file] = layout.certificate_files()
    predicate = json.loads(base64.b64decode(json.loads(cert_file.read_text())["payload"]))["predicate"]
    section = predicate["tasks"]["moods"]
    # certified on the imported golden rows only: the task has no traffic
    assert section["n"] == g.imported and check_certificate(predicate) == []
    assert section["certified"] == (section["lower_bound"] >= 0.6)
    print(
        f"moods from imports: n={section['n']} precision={section['precision']:.3f} certified={section['certified']}"
    )
