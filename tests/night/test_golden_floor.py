"""Each task's golden floor comes from its own policy: the least golden rows that can certify the task's own target
at its own delta (as the certificate judges it), not from the global target.

Real components: the admin CLI signs the policies into the manifest of a test home's control DB; the Dagster asset
``golden_split`` (after ``traffic`` and ``examples``) reads them and tops each task up to its own floor.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ratchet_core.task_policy import TaskPolicy, certification_floors
from ratchet_stats.bounds import rows_to_certify

DAY = "2026-03-03"
# ceil(ln delta / ln target): the zero-error rows of `ratchet stats plan`
FLOOR_090, FLOOR_095, FLOOR_097 = 29, 59, 99


def test_floors_follow_each_tasks_own_target_and_delta() -> None:
    assert [rows_to_certify(t, 0.05)[0].rows for t in (0.9, 0.95, 0.97)] == [FLOOR_090, FLOOR_095, FLOOR_097]
    policies = {
        "tickets": TaskPolicy(target=0.9),
        "extract": TaskPolicy(target=0.97),
        "tools": TaskPolicy(golden_share=0.3),  # no target/delta of its own: the global floor
        "moods": TaskPolicy(delta=0.1),  # its own delta, the global target
    }
    assert certification_floors(policies, target=0.95, delta=0.05) == {
        "tickets": FLOOR_090,
        "extract": FLOOR_097,
        "moods": rows_to_certify(0.95, 0.1)[0].rows,
    }
    assert certification_floors({}, target=0.95, delta=0.05) == {}


def test_golden_split_tops_each_task_up_to_its_own_floor(tmp_path: Path) -> None:
    import dagster as dg

    from ratchet_assets.admin.cli import admin
    from ratchet_assets.defs.examples import examples
    from ratchet_assets.defs.golden_split import golden_split
    from ratchet_assets.defs.resources import night_resources
    from ratchet_assets.defs.traffic import traffic
    from ratchet_assets.night.fixtures import write_day
    from ratchet_stats.keys import generate_private_key, save_private_key

    home = tmp_path / "home"
    save_private_key(generate_private_key(), home / "keys" / "signing.key")
    # ~200 requests a task, every one a teacher answer: more new keys per task than the largest floor
    write_day(home / "lake", DAY, 600, seed=5, student_share=0.0, failure_share=0.0, repeat_share=0.0)
    common = [
        "--control-db",
        f"sqlite:///{(home / 'control.db').as_posix()}",
        "--signing-key-file",
        str(home / "keys" / "signing.key"),
    ]
    for task, target in (("tickets", "0.9"), ("extract", "0.97")):
        res = CliRunner().invoke(
            admin,
            ["task", "set", task, "--target", target, "--reason", f"{task}: its own target", *common],
            catch_exceptions=False,
        )
        assert res.exit_code == 0, res.output

    # golden share 0: every golden row is a floor top-up, so each task holds exactly its floor
    result = dg.materialize(
        [traffic, examples, golden_split],
        partition_key=DAY,
        resources=night_resources(home, golden_share=0.0),
    )
    assert result.success
    meta = result.asset_materializations_for_node("golden_split")[0].metadata
    golden = {k.split("/", 1)[1]: v.value for k, v in meta.items() if k.startswith("golden/")}
    assert golden == {"tickets": FLOOR_090, "extract": FLOOR_097, "tools": FLOOR_095}
    assert meta["floor/tickets"].value == FLOOR_090 and meta["floor/extract"].value == FLOOR_097
    # the global floor, for tasks without a target of their own
    assert meta["floor_per_task"].value == FLOOR_095
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "golden_floor_met"]
    assert check.passed
