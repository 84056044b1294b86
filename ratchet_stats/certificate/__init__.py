"""Evaluation certificates: a registry of versions (the receipt's pattern, ``ratchet_stats.receipt``).

Each version is one module exporting one ``ratchet_stats.evidence.DocumentFormat`` (``FORMAT``) and its builder and
checker; :data:`FORMATS` maps the in-toto predicate type to the format, and ``ratchet verify certificate`` accepts
every registered type (``ratchet_stats.cli_verify.DOCUMENTS``):

- ``v1``: per task the Clopper-Pearson bound, Learn-then-Test and McNemar, recomputed from the signed rows;
- ``v2``: v1 plus each golden row's label source (teacher | people | import), accuracy against people's labels
  with its own exact bound, and agreement with the teacher with its own.

:func:`build_certificate` signs v2 when people labelled some golden rows, v1 otherwise (a golden set labelled by the
teacher alone keeps v1's bytes); :func:`predicate_type_of` says which a predicate is (v2 carries ``labels``), and
:func:`check_certificate` checks any registered version. What the versions share is in ``common``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ratchet_stats.certificate import v1, v2
from ratchet_stats.certificate.common import (
    BASE_KEYS,
    CONFIDENCE_DIGITS,
    DEFAULT_GRID,
    MCNEMAR_ALTERNATIVE,
    TaskOutcomes,
    adapter_digest,
    adapter_dir_digest,
    adapter_file_hashes,
    certificate_subjects,
    task_section,
)
from ratchet_stats.evidence import DocumentFormat

FORMATS: dict[str, DocumentFormat] = {f.predicate_type: f for f in (v1.FORMAT, v2.FORMAT)}
PREDICATE_TYPE = v1.PREDICATE_TYPE  # the first version's type (every registered one verifies: FORMATS)
PREDICATE_TYPES = tuple(FORMATS)
FORMAT = v1.FORMAT

__all__ = [
    "BASE_KEYS",
    "CONFIDENCE_DIGITS",
    "DEFAULT_GRID",
    "FORMAT",
    "FORMATS",
    "MCNEMAR_ALTERNATIVE",
    "PREDICATE_TYPE",
    "PREDICATE_TYPES",
    "TaskOutcomes",
    "adapter_digest",
    "adapter_dir_digest",
    "adapter_file_hashes",
    "build_certificate",
    "certificate_subjects",
    "check_certificate",
    "predicate_type_of",
    "summary_lines",
    "task_section",
    "verify_certificate",
]


def build_certificate(*, tasks: Sequence[TaskOutcomes], **kw: Any) -> dict[str, Any]:
    """The certificate predicate for a version: v2 when people labelled a golden row, else v1 (arguments:
    ``ratchet_stats.certificate.common.build_predicate``'s)."""
    if any(t.people_labelled for t in tasks):
        return v2.build(tasks=tasks, **kw)
    return v1.build(tasks=tasks, **kw)


def predicate_type_of(predicate: Mapping[str, Any]) -> str:
    """The predicate type a predicate is signed under (v2 predicates carry ``labels``)."""
    return (
        v2.PREDICATE_TYPE if isinstance(predicate, Mapping) and "labels" in predicate else v1.PREDICATE_TYPE
    )


def check_certificate(predicate: Mapping[str, Any], predicate_type: str | None = None) -> list[str]:
    """Recompute every number of a certificate of any registered version; [] means consistent. With
    `predicate_type` (the statement's), the predicate must have that version's shape."""
    kind = predicate_type_of(predicate)
    if predicate_type is not None and predicate_type != kind:
        if predicate_type not in FORMATS:
            return [f"predicate type {predicate_type!r} is not a certificate version ({', '.join(FORMATS)})"]
        return [f"the predicate has the shape of {kind}, not of its predicate type {predicate_type}"]
    return FORMATS[kind].check({"predicate": predicate})


def summary_lines(predicate: Mapping[str, Any]) -> list[str]:
    return FORMATS[predicate_type_of(predicate)].summary(predicate)


def verify_certificate(envelope: Any, public_keys: Any) -> dict[str, Any]:
    """The signed statement of a certificate of any registered version (signature first; VerificationError, check
    ``predicate-type``, for any other type)."""
    from ratchet_stats.dsse import VerificationError, verify_statement

    statement = verify_statement(envelope, public_keys)
    if statement.get("predicateType") not in FORMATS:
        raise VerificationError(
            "predicate-type",
            f"predicateType {statement.get('predicateType')!r} is not an evaluation certificate "
            f"({', '.join(FORMATS)})",
        )
    return statement
