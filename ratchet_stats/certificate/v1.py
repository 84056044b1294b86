"""Evaluation certificate v1: what one adapter version scored on the golden set, in a form anyone can recompute.

predicateType ``https://ratchet.dev/evaluation-certificate/v1``. The predicate signs the per-row outcomes, not just
the summary numbers, so a verifier recomputes every claim from the signed data alone:

- per task, ``rows`` = the sorted list of ``[confidence, correct, baseline_correct]`` triples, one per golden row
  (``confidence`` rounded to ``CONFIDENCE_DIGITS`` decimals before anything is computed from it;
  ``baseline_correct`` is ``null`` when there is no live version to compare with);
- ``n`` = len(rows), ``correct`` = #correct, ``precision`` = correct / n;
- ``lower_bound`` = Clopper-Pearson one-sided lower bound at ``delta``: the ``delta`` quantile of
  Beta(correct, n - correct + 1) (Clopper & Pearson 1934), via ``ratchet_stats.bounds.clopper_pearson_lower``;
  ``certified`` = lower_bound >= target;
- ``ltt``: Learn-then-Test (Angelopoulos et al. 2021) over the fixed ``grid``: for each threshold lambda, the rows
  with confidence >= lambda, their errors, the exact binomial p-value for H0 "precision < target" and the
  fixed-sequence decision; ``threshold`` = the loosest certified lambda or null (``ratchet_stats.ltt``);
- ``mcnemar``: the exact McNemar test (McNemar 1947; binomial on discordant pairs) of this version against the
  live ``baseline`` version on the same rows: b = candidate right & baseline wrong, c = candidate wrong & baseline
  right; or null when there is no live version.

Each task's claims hold at level ``delta`` on their own (no correction across tasks: each task's release is a
separate decision). The certificate carries no wall-clock time, so re-evaluating the same adapter on the same
golden rows yields a byte-identical payload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ratchet_stats.certificate.common import build_predicate, check_predicate
from ratchet_stats.evidence import DocumentFormat

PREDICATE_TYPE = "https://ratchet.dev/evaluation-certificate/v1"


def summary_lines(predicate: Mapping[str, Any]) -> list[str]:
    """Short human-readable lines per task (for the CLI and Dagster metadata)."""
    lines = [
        f"version {predicate.get('version')}  target {predicate.get('target')}  delta {predicate.get('delta')}"
    ]
    certified = list(predicate.get("certified_tasks") or [])
    # "not certified" is an outcome the certificate signs, not a failed verification: said first, in words
    lines.append(
        f"outcome: certified for {', '.join(certified)}"
        if certified
        else "outcome: NOT CERTIFIED for any task (no lower bound reaches its target; nothing is released)"
    )
    for name, s in sorted((predicate.get("tasks") or {}).items()):
        thr = (s.get("ltt") or {}).get("threshold")
        mc = s.get("mcnemar")
        mc_text = (
            f"  McNemar vs {mc['baseline']}: b={mc['b']} c={mc['c']} p={mc['p_value']:.4g}" if mc else ""
        )
        lines.append(
            f"{name}: {s.get('correct')}/{s.get('n')} correct, lower bound {s.get('lower_bound', 0):.4f} -> "
            f"{'CERTIFIED' if s.get('certified') else 'not certified'}; LTT threshold "
            f"{'none' if thr is None else thr}{mc_text}"
        )
    return lines


def check_certificate(predicate: Mapping[str, Any]) -> list[str]:
    """Recompute every number of a v1 predicate from its signed rows; [] means consistent.

    Each string names the task and quantity that disagrees, e.g. "tickets: lower_bound is 0.97, recomputed 0.91".
    """
    return check_predicate(predicate)


def build(**kw: Any) -> dict[str, Any]:
    """The v1 predicate (``ratchet_stats.certificate.common.build_predicate``'s arguments)."""
    return build_predicate(**kw)


def check_statement(statement: Mapping[str, Any]) -> list[str]:
    """``check_certificate`` of the statement's predicate (what ``ratchet verify certificate`` runs)."""
    return check_certificate(statement["predicate"])


FORMAT = DocumentFormat(PREDICATE_TYPE, check_statement, summary_lines)
