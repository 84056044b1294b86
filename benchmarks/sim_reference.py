"""`make reference`: pinned `ratchet sim` runs whose JSON must reproduce byte for byte.

One run per workload family, each also pinning a set of the simulator's release options (the reference files are
exactly what ``ratchet sim ARGS --json`` prints):

- ``tickets.json`` (labels): a bad deploy rolled back by the Wilson rule, a newer version superseding, receipts
  sealed beside the true all-teacher cost;
- ``extract.json`` (JSON answers): a low certification target with the point calibration and a teacher that
  bills reasoning tokens;
- ``tools.json`` (tool calls): the sequential rule promoting on the Wilson bound, the paired gate and a minimum
  certified bound;
- ``flywheel.json``: ten good days at the default settings: every night's version waits for the candidate slot,
  the evidence budget's audit rate walks each to live (``summary.flywheel``);
- ``drift.json``: traffic drifts on day 4: the live version is rolled back, a retrained version goes live (the
  day-by-day precision is ``summary.flywheel.tickets.precision_by_day``).

``python -m benchmarks.sim_reference`` reruns them and fails, naming the first numbers that moved, when any
differs from ``benchmarks/reference/<name>.json``. When the change is intended: ``--write --note "why"``
rewrites them and appends a line to ``benchmarks/reference/CHANGES.md`` saying which files changed, how their
summaries moved, and why; commit the files and that line together.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "reference"
CHANGES = HERE / "CHANGES.md"

# name -> `ratchet sim` arguments (--json is added)
RUNS: dict[str, str] = {
    "tickets": "--workload tickets --days 5 --requests 400 --seed 7 --bad-deploy-version 2 "
    "--canary-audit-rate 0.3 --release wilson --receipts",
    "extract": "--workload extract --days 4 --requests 300 --seed 3 --cert-target 0.6 --calibration point "
    "--teacher-reasoning-mean 200 --teacher-reasoning-cv 0.5",
    "tools": "--workload tools --days 5 --requests 300 --seed 3 --promote-evidence bound --paired-gate "
    "--min-certified 0.96",
    "flywheel": "--workload tickets --days 10 --requests 600 --seed 19",
    "drift": "--workload tickets --days 8 --requests 600 --seed 19 --drift-day 4",
}
# Summary numbers a changed run reports first (then the first other difference).
WATCHED = (
    "student_share",
    "served_precision",
    "actual_usd",
    "all_teacher_usd",
    "manifest_sequence",
    "releases",
    "flywheel",
)


def run(name: str) -> str:
    """The JSON text `ratchet sim <RUNS[name]> --json` prints."""
    from click.testing import CliRunner

    from ratchet_assets.sim.cli import sim

    result = CliRunner().invoke(sim, [*RUNS[name].split(), "--json"], catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"ratchet sim {RUNS[name]} failed:\n{result.output}")
    return result.output


def _first_difference(old: Any, new: Any, path: str = "") -> str | None:
    if type(old) is not type(new):
        return f"{path or '.'}: {old!r} -> {new!r}"
    if isinstance(old, dict):
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                return f"{path}.{key}: {'added' if key not in old else 'removed'}"
            diff = _first_difference(old[key], new[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(old, list):
        if len(old) != len(new):
            return f"{path}: {len(old)} -> {len(new)} items"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            diff = _first_difference(a, b, f"{path}[{i}]")
            if diff:
                return diff
        return None
    return None if old == new else f"{path}: {old!r} -> {new!r}"


def describe_change(old_text: str, new_text: str) -> str:
    """How a run moved: its watched summary numbers, else its first difference."""
    try:
        old, new = json.loads(old_text), json.loads(new_text)
    except ValueError:
        return "the stored file is not JSON"
    moved = [
        f"{k} {old['summary'].get(k)} -> {new['summary'].get(k)}"
        for k in WATCHED
        if old.get("summary", {}).get(k) != new["summary"].get(k)
    ]
    return "; ".join(moved) or (_first_difference(old, new) or "only the bytes (formatting)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="rewrite the reference files (needs --note)")
    parser.add_argument("--note", default="", help="why the reference runs changed (a line in CHANGES.md)")
    parser.add_argument("--only", default="", help="comma-separated names (default: all)")
    args = parser.parse_args(argv)
    if args.write and len(args.note.strip()) < 10:
        parser.error('--write needs --note "what changed and why" (at least 10 characters)')
    names = [n for n in RUNS if not args.only or n in args.only.split(",")]
    changed: dict[str, str] = {}
    for name in names:
        path = HERE / f"{name}.json"
        new = run(name)
        old = path.read_text() if path.exists() else ""
        if new == old:
            print(f"{name}: reproduced ({len(new)} bytes)")
            continue
        changed[name] = describe_change(old, new) if old else "new reference"
        print(f"{name}: CHANGED: {changed[name]}")
        if args.write:
            path.write_text(new)
    if not changed:
        return 0
    if not args.write:
        print(
            "The pinned simulator runs changed. If that is intended, rewrite them with\n"
            "  make reference REFERENCE_ARGS=\"--write --note 'what changed and why'\"\n"
            "and commit the files with the line it adds to benchmarks/reference/CHANGES.md.",
            file=sys.stderr,
        )
        return 1
    line = f"- {dt.date.today().isoformat()}: {args.note.strip()} ({'; '.join(f'{n}: {d}' for n, d in changed.items())})\n"
    with CHANGES.open("a") as f:
        f.write(line)
    print(f"rewrote {', '.join(changed)}; noted in {CHANGES.relative_to(HERE.parent.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
