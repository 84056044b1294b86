"""``ratchet sim --compare-release``: one seed, each release rule, side by side.

Every run is a whole simulation with the same arguments and seed (so the same traffic, the same nights while the
releases agree), differing only in the task policy's ``release_rule`` (``ratchet_core.task_policy.RELEASE_RULES``).
Per rule: the versions it rolled back and after how many audited answers, the versions superseded, those that
reached live, the student's share and the served precision.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratchet_assets.sim.config import SimConfig
from ratchet_assets.sim.engine import run_sim
from ratchet_core.task_policy import RELEASE_RULES


def comparison_row(result: dict[str, Any]) -> dict[str, Any]:
    """What the comparison shows of one run."""
    s = result["summary"]
    return {
        **s["releases"],
        "student_share": s["student_share"],
        "served_precision": s["served_precision"],
        "cost_ratio": s["cost_ratio"],
        "promote_evidence": s["task_policy"].get("promote_evidence") or "the rule's own",
        "flywheel": s["flywheel"],
    }


def compare_release(
    config: SimConfig, home: Path | None = None, on_run: Callable[[str, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run `config` once per release rule (under ``<home>/<rule>``, or temporary folders) and compare them."""
    runs: dict[str, dict[str, Any]] = {}
    for rule in RELEASE_RULES:
        cfg = dataclasses.replace(config, release_rule=rule)
        if home is None:
            with tempfile.TemporaryDirectory(prefix=f"ratchet-sim-{rule}-") as tmp:
                runs[rule] = run_sim(cfg, tmp)
        else:
            runs[rule] = run_sim(cfg, home / rule)
        if on_run is not None:
            on_run(rule, runs[rule])
    return {"compare_release": {rule: comparison_row(r) for rule, r in runs.items()}, "runs": runs}


def comparison_lines(comparison: dict[str, dict[str, Any]]) -> list[str]:
    """The side-by-side table, one line per rule (the rolled-back column as wide as its longest list, so the columns
    after it stay under their headers when a drift run rolls back several versions)."""
    backs = {
        rule: ", ".join(
            f"{v} ({n})" for v, n in zip(row["rolled_back"], row["audits_to_rollback"], strict=True)
        )
        or "none"
        for rule, row in comparison.items()
    }
    width = max([40, *(len(b) for b in backs.values())])
    lines = [
        f"{'rule':<11} {'rolled back (audits to rollback)':<{width}} {'superseded':<12} {'reached live':<13} "
        f"{'student':>8} {'precision':>9}"
    ]
    for rule, row in comparison.items():
        lines.append(
            f"{rule:<11} {backs[rule]:<{width}} {len(row['superseded']):<12} {len(row['reached_live']):<13} "
            f"{row['student_share']:>8.1%} {row['served_precision']:>9.4f}"
        )
    for rule, row in comparison.items():
        for task, f in row["flywheel"].items():
            lines.append(
                f"{rule:<11} {task}: minted {f['versions_minted']}, reached live {f['versions_reached_live']}, "
                f"days to live {f['days_certificate_to_live'] or '-'}, days below target "
                f"{f['days_below_target'] or 'none'}, evidence spend ${f['evidence_spend_usd']:.4f}"
            )
    return lines
