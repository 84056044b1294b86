"""`ratchet stats plan|bound|mcnemar|ltt`: exact statistics from the command line (argparse; see cli.py).

The statistics modules are imported inside each command so that `ratchet verify ...` does not pay for scipy.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from ratchet_stats.cli import CliError, emit

_ONE_SIDED = "Bounds are one-sided at level 1 - delta."


def _unit(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number strictly between 0 and 1, got {text!r}"
        ) from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number strictly between 0 and 1, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _grid(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated thresholds such as 0.5,0.6,0.7, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one threshold, such as 0.5,0.6,0.7")
    return values


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add plan, bound, mcnemar and ltt to the `stats` group."""
    p = subparsers.add_parser(
        "plan",
        help="rows needed to certify a precision target (and for a given power)",
        description=(
            "For each allowed error count 0..MAX_ERRORS, the least number of golden rows whose one-sided "
            "Clopper-Pearson lower bound reaches TARGET at level 1 - DELTA (0 errors at 0.95/0.05: 59 rows). "
            "With --true-precision, also the least sample size that certifies with probability >= --power."
        ),
    )
    p.add_argument("--target", type=_unit, required=True, help="precision to certify, e.g. 0.95")
    p.add_argument("--delta", type=_unit, default=0.05, help="error probability of the claim (default 0.05)")
    p.add_argument("--max-errors", type=_count, default=3, help="largest error count to plan for (default 3)")
    p.add_argument(
        "--power", type=_unit, default=None, help="desired power (default 0.8 with --true-precision)"
    )
    p.add_argument("--true-precision", type=_unit, default=None, help="precision you expect, e.g. 0.98")
    p.add_argument(
        "--max-n", type=_count, default=200_000, help="largest sample size searched (default 200000)"
    )
    _json_flag(p)
    p.set_defaults(func=_plan)

    b = subparsers.add_parser(
        "bound",
        help="one-sided confidence bounds for a proportion",
        description=(
            "Lower and upper confidence bounds for a success rate from SUCCESSES out of N, each one-sided at "
            "level 1 - DELTA (exact Clopper-Pearson by default, or the Wilson score approximation)."
        ),
    )
    b.add_argument("--successes", type=_count, required=True, help="number of correct rows")
    b.add_argument("--n", type=_count, required=True, help="number of rows")
    b.add_argument("--delta", type=_unit, default=0.05, help="error probability of each bound (default 0.05)")
    b.add_argument(
        "--method",
        choices=["clopper-pearson", "wilson"],
        default="clopper-pearson",
        help="clopper-pearson (exact, default) or wilson",
    )
    _json_flag(b)
    b.set_defaults(func=_bound)

    m = subparsers.add_parser(
        "mcnemar",
        help="exact McNemar test: candidate vs baseline on the same rows",
        description=(
            "Exact McNemar test on the discordant pairs: B = rows the candidate got right and the baseline "
            "wrong, C = rows the candidate got wrong and the baseline right. Under H0, B ~ Binom(B + C, 1/2). "
            "Prints the p-value for --alternative plus both one-sided p-values and the two-sided one."
        ),
    )
    m.add_argument("--b", type=_count, required=True, help="candidate right, baseline wrong")
    m.add_argument("--c", type=_count, required=True, help="candidate wrong, baseline right")
    m.add_argument(
        "--alternative",
        choices=["two-sided", "greater", "less"],
        default="two-sided",
        help="greater: candidate better; less: candidate worse; two-sided (default)",
    )
    _json_flag(m)
    m.set_defaults(func=_mcnemar)

    ltt = subparsers.add_parser(
        "ltt",
        help="Learn-then-Test: certify a confidence threshold",
        description=(
            "Learn then Test: the loosest threshold t (serve when confidence >= t) whose precision is >= TARGET "
            "with probability >= 1 - DELTA. Thresholds are tested from the highest down with exact binomial "
            "p-values, stopping at the first that fails. Exit code 0 when a threshold is certified, 1 when none is."
        ),
    )
    ltt.add_argument(
        "--input",
        type=Path,
        required=True,
        help="rows as .jsonl (objects with confidence, correct) or .csv (header confidence,correct)",
    )
    ltt.add_argument("--target", type=_unit, required=True, help="precision to certify, e.g. 0.9")
    ltt.add_argument(
        "--delta", type=_unit, default=0.05, help="error probability of the claim (default 0.05)"
    )
    ltt.add_argument(
        "--grid",
        type=_grid,
        default=None,
        help="comma-separated thresholds fixed in advance (default 0.00,0.05,...,0.95)",
    )
    _json_flag(ltt)
    ltt.set_defaults(func=_ltt)


def _plan(args: argparse.Namespace) -> int:
    from ratchet_stats.bounds import clopper_pearson_lower, rows_for_power, rows_to_certify

    if args.power is not None and args.true_precision is None:
        raise CliError("--power needs --true-precision (the precision you expect the model to have)")
    try:
        plan = rows_to_certify(args.target, args.delta, args.max_errors)
        power = None
        if args.true_precision is not None:
            power = rows_for_power(
                args.target, args.delta, args.true_precision, args.power or 0.8, max_n=args.max_n
            )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    rows = [
        {**r.to_dict(), "lower_bound": clopper_pearson_lower(r.rows - r.errors, r.rows, args.delta)}
        for r in plan
    ]
    data: dict[str, Any] = {"target": args.target, "delta": args.delta, "rows": rows}
    if power is not None:
        data["power"] = power.to_dict()
    lines = [
        f"Rows needed to certify precision >= {args.target:g} at confidence {1 - args.delta:g} "
        f"(one-sided Clopper-Pearson):",
        "  errors   rows",
        *(f"  {r['errors']:>6} {r['rows']:>6}" for r in rows),
    ]
    if power is not None:
        lines.append(
            f"With true precision {power.true_precision:g}: {power.n} rows (allowing up to "
            f"{power.allowed_errors} errors) certify with probability {power.power:.3f} "
            f"(>= {power.desired_power:g})."
        )
    emit(args, data, "\n".join(lines))
    return 0


def _bound(args: argparse.Namespace) -> int:
    from ratchet_stats import bounds

    if args.successes > args.n:
        raise CliError(f"--successes ({args.successes}) cannot exceed --n ({args.n})")
    lower_fn, upper_fn = {
        "clopper-pearson": (bounds.clopper_pearson_lower, bounds.clopper_pearson_upper),
        "wilson": (bounds.wilson_lower, bounds.wilson_upper),
    }[args.method]
    lower = lower_fn(args.successes, args.n, args.delta)
    upper = upper_fn(args.successes, args.n, args.delta)
    data = {
        "method": args.method,
        "successes": args.successes,
        "n": args.n,
        "delta": args.delta,
        "confidence": 1 - args.delta,
        "point": args.successes / args.n if args.n else None,
        "lower": lower,
        "upper": upper,
    }
    point = f"{args.successes}/{args.n}" + (f" = {args.successes / args.n:.4f}" if args.n else "")
    text = (
        f"{point}\n"
        f"lower bound {lower:.4f}, upper bound {upper:.4f} ({args.method}, each one-sided at "
        f"confidence {1 - args.delta:g})"
    )
    emit(args, data, text)
    return 0


def _mcnemar(args: argparse.Namespace) -> int:
    from ratchet_stats.mcnemar import mcnemar_exact

    result = mcnemar_exact(args.b, args.c, args.alternative)
    text = (
        f"b={result.b} (candidate right, baseline wrong)  c={result.c} (candidate wrong, baseline right)\n"
        f"p ({result.alternative}) = {result.p_value:.4g}\n"
        f"one-sided p: candidate better {result.p_greater:.4g}, candidate worse {result.p_less:.4g}; "
        f"two-sided p {result.p_two_sided:.4g}"
    )
    emit(args, result.to_dict(), text)
    return 0


_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f"}


def _parse_correct(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise CliError(f"{where}: correct must be true/false or 1/0 (got {value!r})")


def _parse_confidence(value: object, where: str) -> float:
    try:
        conf = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CliError(f"{where}: confidence must be a number (got {value!r})") from None
    if conf != conf or conf in (float("inf"), float("-inf")):
        raise CliError(f"{where}: confidence must be a finite number (got {value!r})")
    return conf


def _read_rows(path: Path) -> tuple[list[float], list[bool]]:
    if not path.is_file():
        raise CliError(f"input file {path} not found; pass a .jsonl or .csv file with confidence,correct")
    suffix = path.suffix.lower()
    confidences: list[float] = []
    correct: list[bool] = []
    if suffix in (".jsonl", ".ndjson"):
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise CliError(f"{where}: not valid JSON; each line must be one object") from None
                if not isinstance(obj, dict) or "confidence" not in obj or "correct" not in obj:
                    raise CliError(f'{where}: each line needs "confidence" and "correct" fields')
                confidences.append(_parse_confidence(obj["confidence"], where))
                correct.append(_parse_correct(obj["correct"], where))
    elif suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            fields = set(reader.fieldnames or [])
            if not {"confidence", "correct"} <= fields:
                raise CliError(f"{path}: the CSV header must name the columns confidence and correct")
            for lineno, rec in enumerate(reader, start=2):
                where = f"{path}:{lineno}"
                confidences.append(_parse_confidence(rec["confidence"], where))
                correct.append(_parse_correct(rec["correct"], where))
    else:
        raise CliError(f"input file {path} must end in .jsonl or .csv (got {suffix or 'no suffix'})")
    if not confidences:
        raise CliError(f"input file {path} holds no rows; Learn-then-Test needs labelled rows")
    return confidences, correct


def _ltt(args: argparse.Namespace) -> int:
    from ratchet_stats.ltt import DEFAULT_GRID, ltt_calibrate

    confidences, correct = _read_rows(args.input)
    grid = args.grid if args.grid is not None else list(DEFAULT_GRID)
    try:
        result = ltt_calibrate(confidences, correct, grid, args.target, args.delta)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    lines = [
        f"Learn then Test on {result.n_total} rows: target precision {args.target:g}, delta {args.delta:g}"
    ]
    lines.append("  threshold      n  errors  precision   p-value  outcome")
    for row in result.table:
        outcome = "certified" if row.certified else ("failed (stop)" if row.tested else "not tested")
        precision = f"{row.precision:.4f}" if row.precision is not None else "-"
        lines.append(
            f"  {row.threshold:>9.4g} {row.n:>6} {row.errors:>7} {precision:>10} {row.p_value:>9.3g}  {outcome}"
        )
    if result.threshold is None:
        lines.append(
            "No threshold certified: keep serving the teacher (more golden rows or a better student)."
        )
    else:
        lines.append(
            f"Certified threshold {result.threshold:g}: precision >= {args.target:g} with probability "
            f">= {1 - args.delta:g} (lower bound {result.precision_lower_bound:.4f})."
        )
    emit(args, result.to_dict(), "\n".join(lines))
    return 0 if result.certified else 1
