"""Ratchet's configuration: environment variables prefixed ``RATCHET_`` (a ``.env`` file is honoured).

Every setting has a default that works on one machine with no network (the embedded default). An unknown
``RATCHET_*`` variable or an invalid value is an error that names the variable; ``ratchet config check`` lists
them all at once.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "RATCHET_"
# Read by tools around Ratchet (`make bench`), not by Ratchet itself: a gateway started by the benchmark inherits them.
TOOL_VARIABLES = frozenset({"RATCHET_BENCH_DIR", "RATCHET_BENCH_DURATION", "RATCHET_BENCH_ROUNDS"})


class SettingsError(ValueError):
    """A setting is unknown or invalid; the message names every offending variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", case_sensitive=False, frozen=False
    )

    home: Path = Field(
        Path(".ratchet"), description="Root folder for everything the embedded default writes."
    )
    lake: str | None = Field(
        None, description="Traffic lake (folder or fsspec URL); default $RATCHET_HOME/lake."
    )
    artifacts: str | None = Field(None, description="Artifacts root; default $RATCHET_HOME/artifacts.")
    artifacts_url: str | None = Field(
        None,
        description="Object store of the artifacts (fsspec URL, e.g. s3://bucket/artifacts); RATCHET_ARTIFACTS "
        "is then its local cache (ratchet_core.artifact_store).",
    )
    student_adapters_from_store: bool = Field(
        False,
        description="Give student endpoints an adapter's store URL (Ratchet's student server downloads it); "
        "default: the local artifacts path (a volume shared with vLLM).",
    )
    control_db: str | None = Field(
        None,
        description="SQLAlchemy URL of the control DB; default sqlite:///$RATCHET_HOME/control.db (WAL).",
    )
    api_keys: str = Field(
        "", description="Client keys `name:secret,...` or `@file` with one `name:secret` a line."
    )
    admin_key: str = Field(
        "", description="Bearer key for the gateway's /ratchet/admin routes (safety-only)."
    )
    effects_api_key: str = Field(
        "",
        description="The key (a client's from RATCHET_API_KEYS, or the admin key) whose caller `ratchet effects mcp` "
        "acts as.",
    )
    effects_max_cost_usd: float = Field(
        10_000.0,
        gt=0,
        allow_inf_nan=False,
        description="The most one effect may cost in the effect gate, in dollars (a larger cost_usd is a 400).",
    )
    signing_key: str = Field(
        "", description="Ed25519 private key (base64 or PEM) or `@file`; default key file."
    )
    pepper: str = Field(
        "", description="Server pepper for hashing API keys; default a file under $RATCHET_HOME."
    )
    teacher_model: str = Field("openai/demo-teacher", description="litellm model name of the teacher.")
    teacher_api_base: str | None = Field("http://127.0.0.1:8101/v1", description="Teacher API base URL.")
    teacher_api_key: str = Field("sk-demo-teacher", description="Teacher API key (never logged).")
    teacher_json_schema: str | None = Field(
        None,
        pattern=r"^(strict|json_object)$",
        description="How a json_schema request reaches the teacher: `strict` (as sent) or `json_object` (the schema "
        "in the system message, for a teacher without strict json_schema); default what `ratchet doctor teacher "
        "--apply` recorded for this teacher in $RATCHET_HOME/teacher.json, else strict.",
    )
    provider_extra_fields: str = Field(
        "",
        description="Comma-separated provider-specific request fields clients may send (e.g. top_k,repetition_penalty), "
        "forwarded to the teacher, the student and the embedding model as sent; OpenAI's own fields are forwarded "
        "anyway, and a name that selects an endpoint, credential, provider, headers, a mocked answer, callbacks or "
        "retries (a litellm argument) is refused (ratchet_core.provider_fields).",
    )
    service_tiers: str = Field(
        "",
        description="Comma-separated service tiers (OpenAI's service_tier, e.g. flex,priority) clients may ask for "
        "besides auto and default; any other is a 400. The ledger prices every request at the model's standard "
        "prices, so a tier listed here is billed at those (a pricier tier's difference is the operator's).",
    )
    embedding_model: str = Field(
        "",
        description="litellm model name that answers POST /v1/embeddings (e.g. openai/text-embedding-3-small); "
        "unset: the route answers 404.",
    )
    embedding_api_base: str | None = Field(None, description="Embedding model API base URL.")
    embedding_api_key: str = Field("", description="Embedding model API key (never logged).")
    student_base_url: str | None = Field(
        "http://127.0.0.1:8102/v1",
        description="OpenAI-compatible student server (vLLM or ratchet student-server).",
    )
    student_api_key: str = Field(
        "",
        description="Student server API key (vLLM --api-key); default the key `ratchet init` writes to "
        "$RATCHET_HOME/keys/student.key.",
    )
    student_base_model: str | None = Field(
        None,
        description="Local path of the student's HF base model; default the demo base under $RATCHET_HOME.",
    )
    student_max_lora_rank: int = Field(
        32,
        ge=1,
        description="The student endpoints' --max-lora-rank (vLLM); the adapter reconciler loads no adapter of a "
        "higher rank into vLLM.",
    )
    training_launcher: str = Field(
        "subprocess",
        pattern=r"^(subprocess|k8s)$",
        description="Where the night trains: `subprocess` (Pipes, this machine) or `k8s` (a GPU pod, dagster-k8s).",
    )
    training_image: str = Field(
        "", description="Image of the Kubernetes training pod (k8s launcher); default the pod template's."
    )
    segment_seconds: float = Field(
        60.0, gt=0, description="Seal the ledger into a Parquet segment this often."
    )
    replica_id: str | None = Field(
        None,
        description="This gateway's replica name in the lake (each worker adds -<slot>); default the host name. "
        "Gateways that share a lake need distinct ones (same as `ratchet gateway --replica`).",
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, gt=0, description="Largest request body the gateway accepts."
    )
    redact_pii: bool = Field(
        True, description="Replace PII with stable placeholders before anything is stored."
    )
    upstream_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Teacher: seconds to the first byte of an answer (a stream's first chunk; the whole answer "
        "when not streaming).",
    )
    upstream_connect_timeout_s: float = Field(
        5.0, gt=0, description="Teacher and student: seconds to open a connection to the endpoint."
    )
    upstream_idle_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Teacher: longest silence between two chunks of a stream (it is then cut, 504).",
    )
    upstream_total_timeout_s: float | None = Field(
        None, gt=0, description="Teacher: cap on a whole answer, streams included; unset = no cap."
    )
    upstream_max_response_bytes: int = Field(
        32 * 1024 * 1024,
        gt=0,
        description="Teacher and student: the largest answer the gateway reads (a stream in all); larger is a 502.",
    )
    student_timeout_s: float = Field(20.0, gt=0, description="Timeout of every student call (then: teacher).")
    student_breaker_failures: int = Field(
        3, ge=1, description="Consecutive student failures or timeouts that open its circuit breaker."
    )
    student_breaker_probe_s: float = Field(
        10.0, gt=0, description="While the student's breaker is open, one request probes it this often."
    )
    shadow_max_in_flight: int = Field(
        16,
        ge=0,
        description="Shadow calls (a candidate answering off the path) one gateway worker runs at once; a request "
        "that finds them all busy is not shadowed (counted as skipped), so shadowing never swamps the student; "
        "0 = none.",
    )
    model_aliases: str = Field(
        "", description="Extra model names clients may use for Ratchet, comma-separated."
    )
    manifest_poll_seconds: float = Field(
        1.0, gt=0, description="How often the gateway re-reads the manifest."
    )
    release_tick_seconds: int = Field(
        15,
        ge=1,
        le=3600,
        description="Seconds between the release sensor's evaluations (read when the code location loads); the "
        "accelerated demo sets a tenth of its day.",
    )
    partitions_start: str = Field(
        "2026-01-01", pattern=r"^\d{4}-\d{2}-\d{2}$", description="First day (UTC) of the nightly partitions."
    )
    partitions_end: str | None = Field(
        None,
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="Last day (UTC) of the nightly partitions; unset = through yesterday (the accelerated demo sets it).",
    )
    night_memory_mb: int = Field(
        2048,
        ge=256,
        description="Memory budget (MB) of one night step; DuckDB gets half and spills to disk beyond it.",
    )
    # Retention windows (days) per data class, enforced by the `retention` asset (ratchet_assets.governance
    # .retention); unset = kept. Receipts, certificates and BOMs are always kept.
    retention_traffic_days: int | None = Field(
        None, ge=1, description="Keep raw traffic (lake segments, the night's traffic files) this many days."
    )
    retention_examples_days: int | None = Field(None, ge=1, description="Keep examples files this many days.")
    retention_training_days: int | None = Field(None, ge=1, description="Keep training sets this many days.")
    retention_golden_days: int | None = Field(
        None,
        ge=1,
        description="Keep golden sets this many days; one that certifies a version not yet retired is kept.",
    )
    retention_adapters_days: int | None = Field(
        None, ge=1, description="Keep adapters this many days; a version not yet retired is kept."
    )
    day_seconds: float | None = Field(
        None,
        gt=0,
        description="Accelerated clock (demos, simulations): one day lasts this many real seconds; unset = real time.",
    )
    clock_start: str = Field(
        "2026-01-01",
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="Accelerated clock: the day it starts at (with RATCHET_DAY_SECONDS).",
    )
    otel_endpoint: str = Field(
        "",
        pattern=r"^(https?://\S+)?$",
        description="OpenTelemetry collector's OTLP/HTTP endpoint (e.g. http://collector:4318): the gateway and the "
        "night export traces there (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS are "
        "honoured); unset: no tracing.",
    )
    # The cost report's prices (ratchet_assets.cost: its pricing models).
    student_tokens_per_second: float | None = Field(
        None,
        gt=0,
        description="Cost report: the deployment's vLLM throughput, prompt + completion tokens per second per GPU "
        "(pricing model 'configured'); unset = the student endpoint's measured speed (pricing model 'measured').",
    )
    student_gpu_price_per_hour: float = Field(
        2.5, ge=0, description="Cost report: USD per hour of one GPU (or machine) of the student endpoint."
    )
    training_price_per_hour: float = Field(
        2.5, ge=0, description="Cost report: USD per hour of the machine the night's training runs on."
    )

    _from_home: set[str] = PrivateAttr(default_factory=set)  # settings whose value a file under the home gave

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, v: Path) -> Path:
        return v.expanduser()

    @field_validator("replica_id", mode="after")
    @classmethod
    def _replica_name(cls, v: str | None) -> str | None:
        from ratchet_core.names import check

        return None if v is None or v == "" else check("replica", v)

    @field_validator("provider_extra_fields", mode="after")
    @classmethod
    def _provider_extras(cls, v: str) -> str:
        from ratchet_core.provider_fields import parse_extra_fields

        return ",".join(sorted(parse_extra_fields(v))) if v.strip() else ""

    @field_validator("service_tiers", mode="after")
    @classmethod
    def _service_tiers(cls, v: str) -> str:
        tiers = sorted({t.strip() for t in v.split(",") if t.strip()})
        bad = [t for t in tiers if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", t)]
        if bad:
            raise ValueError(f"RATCHET_SERVICE_TIERS: not a tier name: {bad[0][:40]!r} (e.g. flex,priority)")
        return ",".join(tiers)

    @model_validator(mode="after")
    def _student_key_from_home(self) -> Settings:
        if not self.student_api_key:  # unset: the key `ratchet init` wrote (ratchet_core.home_files)
            from ratchet_core.home_files import read_student_key

            self.student_api_key = read_student_key(self.home)
        return self

    @model_validator(mode="after")
    def _teacher_json_schema_from_home(self) -> Settings:
        # unset: what `ratchet doctor teacher --apply` recorded for this teacher, else strict
        if self.teacher_json_schema is None:
            from ratchet_core.teacher_capabilities import recorded_json_schema_mode

            recorded = recorded_json_schema_mode(self.home, self.teacher_model, self.teacher_api_base)
            self.teacher_json_schema = recorded or "strict"
            if recorded is not None:
                self._from_home.add("teacher_json_schema")
        return self

    @cached_property
    def provider_extras(self) -> frozenset[str]:
        """RATCHET_PROVIDER_EXTRA_FIELDS as a set of names (checked when loaded)."""
        return frozenset(n for n in self.provider_extra_fields.split(",") if n)

    @property
    def allowed_service_tiers(self) -> frozenset[str]:
        """RATCHET_SERVICE_TIERS as a set of names (checked when loaded)."""
        return frozenset(t for t in self.service_tiers.split(",") if t)

    # Derived locations -------------------------------------------------------------------------------------
    @cached_property
    def lake_root(self) -> str:
        return self.lake or str(self.home / "lake")

    @cached_property
    def artifacts_root(self) -> str:
        return self.artifacts or str(self.home / "artifacts")

    @cached_property
    def control_db_url(self) -> str:
        return self.control_db or f"sqlite:///{(self.home / 'control.db').as_posix()}"

    @cached_property
    def signing_key_path(self) -> Path:
        return self.home / "keys" / "signing.key"

    @cached_property
    def demo_base_path(self) -> Path:
        return self.home / "models" / "demo-base"


def unknown_variables(environ: dict[str, str] | None = None) -> list[str]:
    """Names of ``RATCHET_*`` variables that are not settings (typos are the usual cause)."""
    env = os.environ if environ is None else environ
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields} | TOOL_VARIABLES
    return sorted(k for k in env if k.upper().startswith(ENV_PREFIX) and k.upper() not in known)


def load_settings(**overrides: object) -> Settings:
    """Build Settings from the environment (and ``.env``), raising SettingsError that names each bad variable."""
    problems = [f"{name}: unknown setting (see `ratchet config check`)" for name in unknown_variables()]
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        for err in exc.errors():
            if err["loc"]:
                loc = ENV_PREFIX + "_".join(str(p) for p in err["loc"]).upper()
                problems.append(f"{loc}: {err['msg']}")
            else:  # a whole-settings check (a file under the home): its message names the file
                problems.append(str(err["msg"]).removeprefix("Value error, "))
        settings = None
    if problems:
        raise SettingsError("invalid configuration:\n  " + "\n  ".join(problems))
    assert settings is not None
    return settings


def describe(settings: Settings | None) -> list[dict[str, object]]:
    """Every setting for ``ratchet config check``: variable, value, source (environment | home | default: home is a
    file under $RATCHET_HOME, e.g. ``teacher.json``), description.

    `settings` is the loaded object; when loading failed (None), the raw text of each variable is shown instead.
    """
    rows = []
    for name, field in Settings.model_fields.items():
        env = ENV_PREFIX + name.upper()
        value = getattr(settings, name) if settings is not None else os.environ.get(env, field.default)
        rows.append(
            {
                "name": name,
                "variable": env,
                "value": value,
                "source": "environment"
                if env in os.environ
                else "home"
                if settings is not None and name in settings._from_home
                else "default",
                "description": field.description or "",
            }
        )
    return rows


class ClockSettings(NamedTuple):
    day_seconds: float | None
    start: str
    home: Path


def clock_settings() -> ClockSettings:
    """The accelerated clock's settings (RATCHET_DAY_SECONDS, RATCHET_CLOCK_START, RATCHET_HOME), read on every call.

    ``ratchet_core.clock`` asks on each reading, so a process sees a clock the demo moves at once; building the
    whole :class:`Settings` (and reading ``.env``) per request would cost more than the clock itself.
    """
    raw = os.environ.get(ENV_PREFIX + "DAY_SECONDS")
    try:
        day_seconds = float(raw) if raw else None
    except ValueError:
        raise SettingsError(
            f"invalid configuration:\n  {ENV_PREFIX}DAY_SECONDS: not a number ({raw!r})"
        ) from None
    if day_seconds is not None and day_seconds <= 0:
        raise SettingsError(f"invalid configuration:\n  {ENV_PREFIX}DAY_SECONDS: must be > 0")
    start = os.environ.get(ENV_PREFIX + "CLOCK_START") or Settings.model_fields["clock_start"].default
    home = Path(os.environ.get(ENV_PREFIX + "HOME") or Settings.model_fields["home"].default).expanduser()
    return ClockSettings(day_seconds, start, home)
