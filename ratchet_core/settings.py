"""Ratchet's configuration: environment variables prefixed ``RATCHET_`` (a ``.env`` file is honoured).

Every setting has a default that works on one machine with no network (the embedded default). An unknown
``RATCHET_*`` variable or an invalid value is an error that names the variable; ``ratchet config check`` lists
them all at once.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# litellm otherwise fetches its price map from the internet at import time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ENV_PREFIX = "RATCHET_"


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
    signing_key: str = Field(
        "", description="Ed25519 private key (base64 or PEM) or `@file`; default key file."
    )
    pepper: str = Field(
        "", description="Server pepper for hashing API keys; default a file under $RATCHET_HOME."
    )
    teacher_model: str = Field("openai/demo-teacher", description="litellm model name of the teacher.")
    teacher_api_base: str | None = Field("http://127.0.0.1:8101/v1", description="Teacher API base URL.")
    teacher_api_key: str = Field("sk-demo-teacher", description="Teacher API key (never logged).")
    student_base_url: str | None = Field(
        "http://127.0.0.1:8102/v1",
        description="OpenAI-compatible student server (vLLM or ratchet student-server).",
    )
    student_api_key: str = Field("sk-student", description="Student server API key (vLLM --api-key).")
    student_base_model: str | None = Field(
        None,
        description="Local path of the student's HF base model; default the demo base under $RATCHET_HOME.",
    )
    segment_seconds: float = Field(
        60.0, gt=0, description="Seal the ledger into a Parquet segment this often."
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, gt=0, description="Largest request body the gateway accepts."
    )
    redact_pii: bool = Field(
        True, description="Replace PII with stable placeholders before anything is stored."
    )
    upstream_timeout_s: float = Field(60.0, gt=0, description="Timeout of every teacher call.")
    student_timeout_s: float = Field(20.0, gt=0, description="Timeout of every student call (then: teacher).")
    model_aliases: str = Field(
        "", description="Extra model names clients may use for Ratchet, comma-separated."
    )
    manifest_poll_seconds: float = Field(
        1.0, gt=0, description="How often the gateway re-reads the manifest."
    )
    partitions_start: str = Field(
        "2026-01-01", pattern=r"^\d{4}-\d{2}-\d{2}$", description="First day (UTC) of the nightly partitions."
    )

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, v: Path) -> Path:
        return v.expanduser()

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
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    # Variables used by tools around Ratchet, not by Settings itself.
    # read by ratchet_core.clock and by `make bench`, not by Settings
    known |= {"RATCHET_DAY_SECONDS", "RATCHET_CLOCK_START", "RATCHET_BENCH_DIR", "RATCHET_BENCH_DURATION"}
    known |= {"RATCHET_BENCH_ROUNDS"}
    return sorted(k for k in env if k.upper().startswith(ENV_PREFIX) and k.upper() not in known)


def load_settings(**overrides: object) -> Settings:
    """Build Settings from the environment (and ``.env``), raising SettingsError that names each bad variable."""
    problems = [f"{name}: unknown setting (see `ratchet config check`)" for name in unknown_variables()]
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        for err in exc.errors():
            loc = ENV_PREFIX + "_".join(str(p) for p in err["loc"]).upper()
            problems.append(f"{loc}: {err['msg']}")
        settings = None
    if problems:
        raise SettingsError("invalid configuration:\n  " + "\n  ".join(problems))
    assert settings is not None
    return settings
