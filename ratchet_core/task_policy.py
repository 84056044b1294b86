"""Per-task policy: how each task is judged, certified, audited and split, signed into the release manifest.

A task is any name a client sends (``x-ratchet-task`` or a recognised system prompt). Its policy says:

- ``comparator``: ``label`` | ``json`` | ``tool_call`` | a custom comparator registered with
  ``ratchet_core.workloads.comparators.register_comparator`` (written ``custom:<name>``).
- ``target`` / ``delta``: the certification level (a task is certified when the Clopper-Pearson lower bound of its
  precision at ``delta`` reaches ``target``); the release rule promotes on evidence of precision > ``target``.
- ``audit_rate``: share of student-served requests re-asked of the teacher.
- ``golden_share``: share of new example keys the night holds out as golden (evaluation only, never training).
- ``enabled``: False sends every request of the task to the teacher (as a pin does).

How a version of the task is released (``ratchet_assets.release.decision.ReleaseRule.for_task``; the sensor and
``ratchet sim`` read the same fields, so what the simulator compared is what production runs):

- ``release_rule``: ``sequential`` (default: betting e-processes, anytime-valid) | ``wilson`` (a Wilson score bound
  per stage over that stage's audited answers): what rolls a version back, and by default what promotes it.
- ``promote_evidence``: ``e-value`` (promote only when the stage's e-process rejects "precision <= target") |
  ``bound`` (only when the stage's Wilson lower bound exceeds the target); default: the release rule's own.
- ``canary_audit_rate``: the audit rate while a candidate is in shadow or canary (default: ``audit_rate``).
- ``calibration``: ``ltt`` (default: the certificate's Learn-then-Test threshold) | ``point`` (the loosest grid
  threshold whose observed golden precision reaches the target, ``ratchet_stats.ltt.point_threshold``).
- ``paired_gate``: admit a candidate only if exact McNemar on the certificate's paired golden rows does not show it
  worse than the live version at level ``delta`` (``ratchet_stats.mcnemar``).
- ``min_certified``: admit a candidate only if its certified lower bound is at least this (default: ``target``).
- ``max_candidate_days``: a candidate keeps the task's one candidate slot (shadow/canary) this many days; a newer
  certified version waits behind it until then, unless the newer one is significantly better on the same golden
  rows (``ratchet_assets.release.tick``; default 2).
- ``evidence_spend_usd``: the most the teacher may be paid per day for audits of a candidate; caps the audit rate
  the evidence budget chooses (``ratchet_assets.release.budget``; default: no cap).

What the application's feedback means (``ratchet_core.feedback``; ``POST /ratchet/feedback``):

- ``metrics``: the metrics clients may send for the task, name -> ``{"type": "boolean" | "float", "direction":
  "higher" | "lower"}`` (which values are better); ``comment`` and ``demonstration`` are always accepted and
  are not metric names.
- ``bad_when``: the metric and threshold that say an answer was bad (``"thumbs_up=false"``, ``"rating<3"``): a
  teacher-served request with such feedback is kept out of training, and such feedback on student answers counts
  against the student in release evidence.

Every field is optional (None = the default). Defaults, in order: the task's built-in workload
(``ratchet_core.workloads``: its comparator) -> the global settings (``NightConfig.certify_target`` /
``certify_delta`` / ``golden_share``, the manifest's ``flags.audit_rate``). A task Ratchet does not know and that has
no policy keeps exact-text comparison (``label``). So a new task needs nothing but its name and
``ratchet admin task set NAME --target 0.9 ... --reason ...``.

Policies live in the signed release manifest (``Manifest.policies``, only written when non-empty so manifests
without policies keep their bytes; the release fields, ``RELEASE_FIELDS``, are only written when set, so a policy
without them keeps its bytes too); the gateway (audit rate, comparator, enabled), the night (golden share,
comparator, target/delta in the certificate), the certificate verifier and the release rule all read them through
:func:`resolve` (the policies of the current manifest: ``ratchet_core.manifest.current_policies``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ratchet_core.names import METRIC_NAME_PATTERN
from ratchet_core.workloads import TASKS

DEFAULT_TARGET = 0.95
DEFAULT_DELTA = 0.05
DEFAULT_GOLDEN_SHARE = 0.2
BUILTIN_COMPARATORS = ("label", "json", "tool_call")
RELEASE_RULES = ("sequential", "wilson")
PROMOTE_EVIDENCE = ("e-value", "bound")
CALIBRATIONS = ("ltt", "point")
# Fields added after policies were first signed: written only when set (None is left out of the predicate).
RELEASE_FIELDS = (
    "release_rule",
    "promote_evidence",
    "canary_audit_rate",
    "calibration",
    "paired_gate",
    "min_certified",
    "max_candidate_days",
    "evidence_spend_usd",
)
# What feedback means for the task (written only when set, like the release fields).
FEEDBACK_FIELDS = ("metrics", "bad_when")
METRIC_TYPES = ("boolean", "float")
DIRECTIONS = ("higher", "lower")
RESERVED_METRICS = ("comment", "demonstration")  # feedback kinds every task accepts
METRIC_NAME = re.compile(METRIC_NAME_PATTERN)  # the name rule's ``metric`` (ratchet_core.names)
_BAD_WHEN = re.compile(r"\s*([A-Za-z][A-Za-z0-9_.-]{0,63})\s*(<=|>=|<|>|=)\s*(\S+)\s*")


def valid_comparator(name: str) -> str:
    """``name`` when it is a built-in comparator or ``custom:<registered name>``; ValueError otherwise."""
    if name in BUILTIN_COMPARATORS:
        return name
    if name.startswith("custom:") and len(name) > len("custom:"):
        return name
    raise ValueError(
        f"comparator {name!r} is not one of {', '.join(BUILTIN_COMPARATORS)} or custom:<name> "
        "(a comparator registered with ratchet_core.workloads.comparators.register_comparator)"
    )


class MetricSpec(BaseModel):
    """One declared feedback metric: its type and which way is better."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["boolean", "float"]
    direction: Literal["higher", "lower"] = "higher"


@dataclass(frozen=True)
class BadWhen:
    """``bad_when`` parsed: ``metric op value`` (booleans only with ``=``)."""

    metric: str
    op: str
    value: float | bool

    def bad(self, value: float) -> bool:
        """Whether a metric value (a boolean as 0/1) says the answer was bad."""
        v = float(self.value)
        return {
            "<": value < v,
            "<=": value <= v,
            ">": value > v,
            ">=": value >= v,
            "=": value == v,
        }[self.op]


def parse_metric(text: str) -> tuple[str, MetricSpec]:
    """``name:boolean|float[:higher|lower]`` (``ratchet admin task set --metric``) -> (name, spec)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not METRIC_NAME.fullmatch(parts[0]):
        raise ValueError(
            f"--metric {text!r}: write NAME:boolean or NAME:float:higher|lower (a name of letters, digits, "
            "'_', '.', '-', starting with a letter)"
        )
    if parts[1] not in METRIC_TYPES or (len(parts) == 3 and parts[2] not in DIRECTIONS):
        raise ValueError(f"--metric {text!r}: the type is boolean or float, the direction higher or lower")
    return parts[0], MetricSpec(type=parts[1], direction=parts[2] if len(parts) == 3 else "higher")


def parse_bad_when(text: str, metrics: dict[str, MetricSpec]) -> BadWhen:
    """``NAME(<|<=|>|>=|=)VALUE`` against the declared `metrics`; ValueError saying what to write otherwise."""
    m = _BAD_WHEN.fullmatch(text)
    if m is None:
        raise ValueError(
            f"bad_when {text!r}: write METRIC<VALUE (or <=, >, >=, =), e.g. rating<3 or thumbs_up=false"
        )
    name, op, raw = m.groups()
    spec = metrics.get(name)
    if spec is None:
        raise ValueError(f"bad_when {text!r}: {name!r} is not a declared metric (declare it with --metric)")
    if spec.type == "boolean":
        if op != "=" or raw.lower() not in ("true", "false"):
            raise ValueError(f"bad_when {text!r}: {name} is boolean: write {name}=true or {name}=false")
        return BadWhen(name, op, raw.lower() == "true")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"bad_when {text!r}: {raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"bad_when {text!r}: the threshold must be finite")
    return BadWhen(name, op, value)


class TaskPolicy(BaseModel):
    """One task's policy as signed in the manifest; None fields fall back to the defaults (module docstring)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    comparator: str | None = None
    target: float | None = Field(None, gt=0.0, lt=1.0)
    delta: float | None = Field(None, gt=0.0, lt=1.0)
    audit_rate: float | None = Field(None, ge=0.0, le=1.0)
    golden_share: float | None = Field(None, ge=0.0, lt=1.0)
    enabled: bool = True
    release_rule: Literal["sequential", "wilson"] | None = None
    promote_evidence: Literal["e-value", "bound"] | None = None
    canary_audit_rate: float | None = Field(None, ge=0.0, le=1.0)
    calibration: Literal["ltt", "point"] | None = None
    paired_gate: bool | None = None
    min_certified: float | None = Field(None, gt=0.0, lt=1.0)
    max_candidate_days: int | None = Field(None, ge=0, le=365)
    evidence_spend_usd: float | None = Field(None, ge=0.0)
    metrics: dict[str, MetricSpec] | None = None
    bad_when: str | None = None

    @field_validator("metrics")
    @classmethod
    def _metric_names(cls, v: dict[str, MetricSpec] | None) -> dict[str, MetricSpec] | None:
        for name in v or {}:
            if name in RESERVED_METRICS or not METRIC_NAME.fullmatch(name):
                raise ValueError(
                    f"metric name {name!r}: letters, digits, '_', '.', '-' starting with a letter, and not "
                    f"{' or '.join(RESERVED_METRICS)} (every task accepts those)"
                )
        return v or None

    @model_validator(mode="after")
    def _bad_when_names_a_metric(self) -> TaskPolicy:
        if self.bad_when is not None:
            parse_bad_when(self.bad_when, self.metrics or {})
        return self

    def bad_rule(self) -> BadWhen | None:
        """``bad_when`` parsed (None when unset)."""
        return None if self.bad_when is None else parse_bad_when(self.bad_when, self.metrics or {})

    @field_validator("comparator")
    @classmethod
    def _comparator(cls, v: str | None) -> str | None:
        return None if v is None else valid_comparator(v)

    @model_serializer(mode="wrap")
    def _leave_out_unset_release_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in (*RELEASE_FIELDS, *FEEDBACK_FIELDS):
            if data.get(name) is None:
                data.pop(name, None)
        return data


@dataclass(frozen=True)
class ResolvedPolicy:
    """A task's effective policy: every field filled in; ``source`` says where each value came from."""

    task: str
    comparator: str
    target: float
    delta: float
    audit_rate: float
    golden_share: float
    enabled: bool
    source: dict[str, str]
    release_rule: str = "sequential"
    promote_evidence: str = "e-value"
    canary_audit_rate: float = 0.05
    calibration: str = "ltt"
    paired_gate: bool = False
    min_certified: float = DEFAULT_TARGET
    max_candidate_days: int | None = None  # None: the evidence budget's expected days to live plus one
    evidence_spend_usd: float | None = (
        None  # None: no cap (the budget audits at most a quarter of the traffic)
    )
    metrics: dict[str, dict[str, str]] | None = None
    bad_when: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _builtin_comparator(task: str) -> str | None:
    spec = TASKS.get(task)
    return spec.comparator if spec is not None else None


def resolve(
    task: str,
    policies: dict[str, TaskPolicy] | None = None,
    *,
    target: float = DEFAULT_TARGET,
    delta: float = DEFAULT_DELTA,
    audit_rate: float = 0.05,
    golden_share: float = DEFAULT_GOLDEN_SHARE,
) -> ResolvedPolicy:
    """``task``'s effective policy: its signed policy, else the built-in workload, else the given globals."""
    p = (policies or {}).get(task) or TaskPolicy()
    source: dict[str, str] = {}

    def pick(name: str, value: Any, default: Any, default_source: str = "global") -> Any:
        if value is not None:
            source[name] = "task policy"
            return value
        source[name] = default_source
        return default

    builtin = _builtin_comparator(task)
    comparator = pick(
        "comparator",
        p.comparator,
        builtin or "label",
        "built-in workload" if builtin else "unknown task: exact text",
    )
    t = float(pick("target", p.target, target))
    rate = float(pick("audit_rate", p.audit_rate, audit_rate))
    rule = pick("release_rule", p.release_rule, "sequential", "default")
    return ResolvedPolicy(
        task=task,
        comparator=comparator,
        target=t,
        delta=float(pick("delta", p.delta, delta)),
        audit_rate=rate,
        golden_share=float(pick("golden_share", p.golden_share, golden_share)),
        enabled=bool(p.enabled),
        source=source,
        release_rule=rule,
        promote_evidence=pick(
            "promote_evidence",
            p.promote_evidence,
            default_promote_evidence(rule),
            f"the {rule} release rule",
        ),
        canary_audit_rate=float(pick("canary_audit_rate", p.canary_audit_rate, rate, "audit rate")),
        calibration=pick("calibration", p.calibration, "ltt", "default"),
        paired_gate=bool(pick("paired_gate", p.paired_gate, False, "default")),
        min_certified=float(pick("min_certified", p.min_certified, t, "target")),
        max_candidate_days=pick(
            "max_candidate_days", p.max_candidate_days, None, "the evidence budget's days to live + 1"
        ),
        evidence_spend_usd=pick(
            "evidence_spend_usd", p.evidence_spend_usd, None, "no cap: at most 0.25 audited"
        ),
        metrics=pick(
            "metrics",
            {k: v.model_dump() for k, v in p.metrics.items()} if p.metrics else None,
            None,
            "none declared",
        ),
        bad_when=pick("bad_when", p.bad_when, None, "none"),
    )


def default_promote_evidence(release_rule: str) -> str:
    """What promotes under `release_rule` when the policy sets no ``promote_evidence``: its own evidence."""
    return "bound" if release_rule == "wilson" else "e-value"


def certification_floors(
    policies: dict[str, TaskPolicy] | None, *, target: float = DEFAULT_TARGET, delta: float = DEFAULT_DELTA
) -> dict[str, int]:
    """task -> the least golden rows that can certify the task's own target at its own delta with zero errors
    (``ratchet_stats.bounds.rows_to_certify``, as ``ratchet stats plan``), for every task whose policy sets a
    target or a delta; the night's golden split tops each task up to its floor (other tasks: the global floor,
    from ``target``/``delta``). The certificate judges each task by the same resolved target and delta."""
    from ratchet_stats.bounds import rows_to_certify

    out: dict[str, int] = {}
    for task, p in sorted((policies or {}).items()):
        if p.target is None and p.delta is None:
            continue
        r = resolve(task, policies, target=target, delta=delta)
        out[task] = rows_to_certify(r.target, r.delta)[0].rows
    return out


def resolve_in(manifest: Any, task: str, **globals_: float) -> ResolvedPolicy:
    """:func:`resolve` with the manifest's policies and its audit rate as the global audit rate."""
    if manifest is None:
        return resolve(task, None, **globals_)
    globals_.setdefault("audit_rate", manifest.flags.audit_rate)
    return resolve(task, manifest.policies, **globals_)
