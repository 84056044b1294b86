"""`ratchet replay --task T --from DAY [--to DAY] [--threshold X | --target P] [--audit-rate A] [--candidate V]`.

Replays the stored lake at the real policy (checking that it reproduces what the gateway served, request by
request) and at the what-if, and says how many requests the what-if can and cannot answer from the data
(``ratchet_assets.replay``).
"""

from __future__ import annotations

import json
import sys

import click

from ratchet_assets.cli_names import names_checked


@click.command("replay")
@click.option("--task", required=True, callback=names_checked("task"), help="Task to replay.")
@click.option("--from", "start", required=True, callback=names_checked("day"), help="First day (YYYY-MM-DD).")
@click.option("--to", "end", default=None, callback=names_checked("day"), help="Last day (default: --from).")
@click.option("--threshold", type=float, default=None, help="What-if confidence threshold.")
@click.option(
    "--target",
    type=float,
    default=None,
    help="What-if target: the threshold LTT calibrates at it from --certificate's signed rows.",
)
@click.option(
    "--certificate", default=None, help="Certificate file for --target (default: the version served)."
)
@click.option(
    "--audit-rate", type=float, default=None, help="What-if audit rate (exact: the draw is by request id)."
)
@click.option("--candidate", default=None, help="Replay this shadowed version as if it had served.")
@click.option("--lake", default="", help="Lake folder or URL (default: RATCHET_LAKE_ROOT).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def replay_cmd(
    task: str,
    start: str,
    end: str | None,
    threshold: float | None,
    target: float | None,
    certificate: str | None,
    audit_rate: float | None,
    candidate: str | None,
    lake: str,
    as_json: bool,
) -> None:
    """What the stored traffic of TASK would have been served and paid under another threshold/audit rate/target."""
    from ratchet_assets.replay import (
        ReplayError,
        ReplayScenario,
        day_range,
        load_rows,
        replay,
        threshold_at_target,
    )
    from ratchet_core.settings import load_settings

    try:
        if threshold is not None and target is not None:
            raise ReplayError("give --threshold or --target, not both")
        for name, v in (("threshold", threshold), ("audit-rate", audit_rate)):
            if v is not None and not 0.0 <= v <= 1.0:
                raise ReplayError(f"--{name} takes a number between 0 and 1 (got {v})")
        settings = load_settings()
        days = day_range(start, end)
        rows = load_rows(lake or settings.lake_root, days, task)
        if target is not None:
            if not certificate:
                versions = sorted(
                    {r["version"] for r in rows if r["served_by"] == "student" and r["version"]}
                )
                if len(versions) != 1:
                    raise ReplayError(
                        f"--target needs --certificate (the rows were served by {versions or 'none'})"
                    )
                from ratchet_core.layout import ArtifactLayout

                certificate = str(ArtifactLayout(settings.artifacts_root).certificate(versions[0]))
            threshold = threshold_at_target(certificate, task, target)
        result = replay(
            rows,
            task,
            days,
            ReplayScenario(threshold=threshold, audit_rate=audit_rate, candidate=candidate),
            _feedback(settings, task),
        )
    except (ReplayError, ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    data = result.as_dict()
    if target is not None:
        data["policy"]["target"] = target
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    a, r, w = data["actual"], data["replayed"], data["what_if"]
    click.echo(
        f"{task} {days[0]}..{days[-1]}: {a['requests']} requests; the student answered {data['answerable']} "
        f"(replayable at any threshold), never answered {data['unanswerable']} (stay with the teacher)"
    )
    click.echo(
        f"served by the student: gateway {a['student_served']}, replay {r['student_served']} "
        f"({'reproduced' if data['reproduced'] else f'{len(result.mismatches)} mismatches'}); "
        f"paid ${a['cost_usd']:.6f} + audits ${a['audit_cost_usd']:.6f}"
    )
    if w is not None:
        click.echo(
            f"what-if {data['policy']}: student {w['student_served']} ({w['student_share']:.1%}), paid "
            f"${w['cost_usd']:.6f} + audits ${w['audit_cost_usd']:.6f} ({w['audits']}), known errors "
            f"{w['served_known_errors']}/{w['served_known_outcomes']} of {w['student_served']} served"
        )
    if a["student_feedback"] or a["teacher_feedback"]:
        click.echo(
            f"feedback: the student's answers {_agreement(a, 'student')}; the teacher's {_agreement(a, 'teacher')}"
        )
    for note in data["notes"]:
        click.echo(f"note: {note}")


def _agreement(out: dict, who: str) -> str:
    n, bad = out[f"{who}_feedback"], out[f"{who}_feedback_bad"]
    return f"{n - bad} of {n} good ({(n - bad) / n:.1%})" if n else "have no feedback"


def _feedback(settings, task: str) -> dict[str, bool]:
    """The application's feedback on the task's requests (the control DB; the task's signed bad_when)."""
    from ratchet_assets.replay import load_feedback
    from ratchet_core.control_db import make_engine
    from ratchet_core.keys import root_public_keys
    from ratchet_core.manifest import current_policies

    engine = make_engine(settings.control_db_url)
    try:
        policy = current_policies(engine, root_public_keys(settings)).get(task)
    except Exception:  # no trusted key here: only demonstrations say good or bad
        policy = None
    return load_feedback(engine, task, policy)
