"""Resources every night asset shares, configured from Ratchet's settings in one place (:func:`night_resources`).

- ``paths``: ``RatchetPaths`` -- lake (folder or fsspec URL), artifacts and home folders;
- ``control_db``: ``ControlDB`` -- SQLAlchemy engine of the control DB (effect ledger, erasures, manifests);
- ``signer``: ``Signer`` -- the control plane's Ed25519 key (``ratchet_core.keys.signing_key``: RATCHET_SIGNING_KEY
  or ``$RATCHET_HOME/keys/signing.key``, created with a log line when absent in the embedded default);
- ``models``: ``ModelEndpoints`` -- the teacher's model name, the student endpoint and the student's base model;
- ``night``: ``NightConfig`` -- golden share and salt, certification target, training window;
- ``retention``: ``Retention`` -- retention windows per data class (the ``retention`` asset).

:func:`night_resources` reads the settings once (``ratchet_core.settings.load_settings``) and puts every value that
is not a secret into the resources' config, so the Dagster UI shows what a run uses; assets take settings from
their resources, never from ``load_settings()``. Secrets (the signing key, the student API key, a control-DB URL
that may carry a password) stay out of run config: an empty field means "the settings' value", read when used.

Tests replace them with instances rooted in ``tmp_path`` (``dg.materialize(..., resources=night_resources(...))``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from sqlalchemy.engine import Engine

from ratchet_assets.defs.training_launcher import TrainingLauncher
from ratchet_core.control_db import make_engine
from ratchet_core.lake import lake_location
from ratchet_core.settings import Settings, load_settings


def _settings() -> Settings:
    return load_settings()


class RatchetPaths(dg.ConfigurableResource):
    """Where the lake (a folder or an fsspec URL, ``ratchet_core.lake``) and the artifacts (a local folder) live;
    empty = the settings' default."""

    home: str = ""
    lake: str = ""
    artifacts: str = ""
    artifacts_url: str = ""  # RATCHET_ARTIFACTS_URL: the artifacts' object store, the folder its cache
    # RATCHET_STUDENT_ADAPTERS_FROM_STORE: student endpoints get the store URL of an adapter and download it
    student_adapters_from_store: bool = False

    def artifact_store(self) -> Any:
        """The ``ratchet_core.artifact_store.ArtifactStore`` (None without ``artifacts_url``)."""
        from ratchet_core.artifact_store import store_for

        return store_for(self.artifacts_url, self.artifacts_root())

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A step starts (not a sensor tick): publish what an earlier step left in this cache unpublished, then
        fetch what the cache lacks. Each night asset publishes its own outputs when it ends
        (``ratchet_core.artifact_store.publishes_artifacts``)."""
        if getattr(context, "dagster_run", None) is None:
            return
        if store := self.artifact_store():
            store.sync_up()
            store.sync_down()

    def home_path(self) -> Path:
        return Path(self.home) if self.home else _settings().home

    def lake_root(self) -> str | Path:
        """A ``Path`` for a folder, the URL itself for ``s3://...`` etc. (read it with ``ratchet_core.lake.Lake``)."""
        if self.lake:
            return lake_location(self.lake)
        if self.home:
            return Path(self.home) / "lake"
        return lake_location(_settings().lake_root)

    def artifacts_root(self) -> Path:
        if self.artifacts:
            return Path(self.artifacts)
        if self.home:
            return Path(self.home) / "artifacts"
        return Path(_settings().artifacts_root)


class ControlDB(dg.ConfigurableResource):
    """The control DB (SQLite WAL by default, any SQLAlchemy URL at scale); empty URL = RATCHET_CONTROL_DB."""

    url: str = ""

    def resolved_url(self) -> str:
        return self.url or _settings().control_db_url

    def engine(self) -> Engine:
        return make_engine(self.resolved_url())

    def effects(self) -> Any:
        from ratchet_assets.effects import EffectLedger

        return EffectLedger(self.engine())


class Signer(dg.ConfigurableResource):
    """The control plane's signing key. ``key``: base64/PEM text (tests); ``key_file``: a path; else the settings.

    ``control_db``: the control DB whose key history :meth:`verify_keys` reads (empty = RATCHET_CONTROL_DB).
    """

    key: str = ""
    key_file: str = ""
    create_if_missing: bool = True
    control_db: str = ""

    def private_key(self) -> Any:
        from ratchet_core.keys import signing_key
        from ratchet_stats.keys import load_private_key

        if self.key:
            return load_private_key(self.key)
        return signing_key(_settings(), self.key_file or None, create=self.create_if_missing)

    def public_key(self) -> Any:
        return self.private_key().public_key()

    def key_id(self) -> str:
        from ratchet_stats.keys import key_id

        return key_id(self.public_key())

    def verify_keys(self) -> list[Any]:
        """This key and every key the control DB's history ever trusted: verifies evidence signed before a rotation."""
        from ratchet_core.control_db import ensure_schema
        from ratchet_core.key_history import keys_ever_trusted

        engine = make_engine(self.control_db or _settings().control_db_url)
        ensure_schema(engine)
        return keys_ever_trusted(engine, [self.public_key()])


class ModelEndpoints(dg.ConfigurableResource):
    """The models the night talks to; empty = the settings (RATCHET_TEACHER_MODEL, RATCHET_STUDENT_*)."""

    teacher_model: str = ""
    student_base_url: str = ""
    student_base_model: str = ""

    def teacher(self) -> str:
        return self.teacher_model or _settings().teacher_model

    def student_url(self) -> str:
        """The student server's OpenAI-compatible base URL ("" when none is configured)."""
        return self.student_base_url or _settings().student_base_url or ""

    def student_api_key(self) -> str:
        """RATCHET_STUDENT_API_KEY, read when used (a secret: never part of run config)."""
        return _settings().student_api_key

    def base_model(self) -> str:
        """RATCHET_STUDENT_BASE_MODEL ("" = the demo base under $RATCHET_HOME)."""
        return self.student_base_model or _settings().student_base_model or ""


class NightConfig(dg.ConfigurableResource):
    """Knobs of the night. Changing ``golden_salt`` or ``golden_share`` only affects keys not yet assigned."""

    golden_share: float = 0.2
    golden_salt: str = "ratchet-golden-v1"
    certify_target: float = 0.95
    certify_delta: float = 0.05
    window_days: int = 7
    late_grace_minutes: float = 60.0
    memory_mb: int = 2048  # RATCHET_NIGHT_MEMORY_MB: one step's memory budget (ratchet_assets.night.budget)
    key_ranges: int = (
        0  # example-key ranges a big step is split into; 0 = by the day's size (~250k rows each)
    )

    def budget(self) -> Any:
        """The steps' ``ratchet_assets.night.budget.Budget``."""
        from ratchet_assets.night.budget import Budget

        return Budget(memory_mb=self.memory_mb, shards=self.key_ranges)


class Retention(dg.ConfigurableResource):
    """Retention windows in days per data class (``RATCHET_RETENTION_*_DAYS``; 0 = kept), for the ``retention``
    asset (``ratchet_assets.governance.retention``)."""

    traffic_days: int = 0
    examples_days: int = 0
    training_days: int = 0
    golden_days: int = 0
    adapters_days: int = 0

    @classmethod
    def from_settings(cls, s: Settings) -> Retention:
        names = ("traffic", "examples", "training", "golden", "adapters")
        return cls(**{f"{n}_days": getattr(s, f"retention_{n}_days") or 0 for n in names})


def night_resources(
    home: str | Path | None = None,
    control_db_url: str = "",
    signing_key: str = "",
    *,
    settings: Settings | None = None,
    **night: Any,
) -> dict[str, Any]:
    """The resource dict for ``dg.materialize`` / ``Definitions``, configured from `settings` (default: read once).

    With `home`, everything (lake, artifacts, control DB, key file) lives under it, whatever the settings say.
    """
    s = settings or load_settings()
    if home:
        home_s = str(home)
        paths = RatchetPaths(
            home=home_s,
            artifacts_url=s.artifacts_url or "",
            student_adapters_from_store=s.student_adapters_from_store,
        )
        control_db_url = control_db_url or f"sqlite:///{(Path(home) / 'control.db').as_posix()}"
        key_file = "" if signing_key else str(Path(home) / "keys" / "signing.key")
    else:
        paths = RatchetPaths(
            home=str(s.home),
            lake=s.lake_root,
            artifacts=s.artifacts_root,
            artifacts_url=s.artifacts_url or "",
            student_adapters_from_store=s.student_adapters_from_store,
        )
        key_file = ""  # the settings' key, resolved when used (RATCHET_SIGNING_KEY may hold the key itself)
    return {
        "paths": paths,
        "control_db": ControlDB(url=control_db_url),
        "signer": Signer(key=signing_key, key_file=key_file, control_db=control_db_url),
        "models": ModelEndpoints(
            teacher_model=s.teacher_model,
            student_base_url=s.student_base_url or "",
            student_base_model=s.student_base_model or "",
        ),
        "night": NightConfig(**{"memory_mb": s.night_memory_mb, **night}),
        "training": TrainingLauncher.from_settings(s),
        "retention": Retention.from_settings(s),
    }


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=night_resources())
